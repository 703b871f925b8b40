//! The context policies a builder chooses: [`ContextPolicy`], [`SlidingWindow`],
//! [`Compaction`].

use std::sync::Arc;

/// A number of tokens, or a share of the model's context window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Budget {
    Tokens(u64),
    Share(f64),
}

impl Budget {
    /// The tokens, given the window; `None` for a share of an unknown window.
    pub(crate) fn tokens(self, window: Option<u64>) -> Option<u64> {
        match self {
            Budget::Tokens(n) => Some(n),
            Budget::Share(s) => window.map(|w| (w as f64 * s) as u64),
        }
    }

    fn share(share: f64) -> Budget {
        Budget::Share(if share.is_finite() {
            share.clamp(0.01, 1.0)
        } else {
            1.0
        })
    }
}

/// How the agent keeps what it sends within the model's context window. Set with
/// [`AgentBuilder::context_policy`](crate::AgentBuilder::context_policy); the transcript
/// itself is never shortened (see the [module docs](crate::context)).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum ContextPolicy {
    /// Send the whole transcript (after the latest summary, when a compaction wrote one).
    /// The default. A request the server refuses as too long is still compacted and sent
    /// again once, unless [`AgentBuilder::overflow_recovery`](crate::AgentBuilder::overflow_recovery)
    /// is off.
    #[default]
    Unbounded,
    /// Send the newest messages within a token budget.
    SlidingWindow(SlidingWindow),
    /// Summarize the oldest part of the transcript at a threshold.
    Compaction(Compaction),
}

impl From<SlidingWindow> for ContextPolicy {
    fn from(policy: SlidingWindow) -> ContextPolicy {
        ContextPolicy::SlidingWindow(policy)
    }
}

impl From<Compaction> for ContextPolicy {
    fn from(policy: Compaction) -> ContextPolicy {
        ContextPolicy::Compaction(policy)
    }
}

impl ContextPolicy {
    /// Whether the first user message is kept in what is sent.
    pub(crate) fn keep_first_user(&self) -> bool {
        match self {
            ContextPolicy::Unbounded => false,
            ContextPolicy::SlidingWindow(s) => s.keep_first_user,
            ContextPolicy::Compaction(c) => c.keep_first_user,
        }
    }

    /// Whether a decision of the policy needs the window.
    pub(crate) fn needs_window(&self) -> bool {
        match self {
            ContextPolicy::Unbounded => false,
            ContextPolicy::SlidingWindow(s) => matches!(s.budget, Budget::Share(_)),
            ContextPolicy::Compaction(c) => {
                matches!(c.threshold, Budget::Share(_)) || matches!(c.keep_recent, Budget::Share(_))
            }
        }
    }
}

/// A sliding window by tokens, as Python pagent's `SlidingWindowSession`: each request sends
/// the newest messages that fit the budget, with the system prompt and the tools (which count
/// against it).
///
/// When what is sent would be over the budget, the window moves forward, never starting at a
/// tool result (a call and its results leave together), and never past the newest user
/// message or reply, so the model always sees what it answers. It moves far enough to bring
/// what is sent down to 80% of the budget: the next turns then send the same first messages
/// (which a server's prompt cache keeps) until the budget is reached again, where a window
/// moved at every turn would send a new prefix, read again whole, each time. The first user message (the task, often) can be
/// kept in front of the window with [`SlidingWindow::keep_first_user`]. A slide changes no
/// message: the transcript keeps everything, `State::context.omitted` counts what is not sent.
///
/// ```
/// use pagent::context::SlidingWindow;
/// use pagent::{Agent, llm::Faux};
///
/// let agent = Agent::builder()
///     .provider(Faux::default())
///     .context_window(8_192)
///     .context_policy(SlidingWindow::share(0.5).keep_first_user(true))
///     .build()?;
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct SlidingWindow {
    pub(crate) budget: Budget,
    pub(crate) keep_first_user: bool,
}

impl Default for SlidingWindow {
    fn default() -> SlidingWindow {
        SlidingWindow::new()
    }
}

impl SlidingWindow {
    /// A window of 75% of the model's context window, which leaves a quarter for the reply.
    /// Until the window is known (set, read from the server, or learnt from an overflow) the
    /// whole transcript is sent.
    pub fn new() -> SlidingWindow {
        SlidingWindow::share(0.75)
    }

    /// A window of `tokens` tokens, whatever the model's context window.
    pub fn tokens(tokens: u64) -> SlidingWindow {
        SlidingWindow {
            budget: Budget::Tokens(tokens),
            keep_first_user: false,
        }
    }

    /// A window of this share of the model's context window (clamped to 0.01-1.0).
    pub fn share(share: f64) -> SlidingWindow {
        SlidingWindow {
            budget: Budget::share(share),
            keep_first_user: false,
        }
    }

    /// Whether the first user message of the transcript is sent in front of the window once
    /// it slid out. Defaults to false.
    pub fn keep_first_user(mut self, keep: bool) -> SlidingWindow {
        self.keep_first_user = keep;
        self
    }
}

/// Compaction, as Python pagent's `CompactingSession`: when the context reaches a threshold
/// (80% of the window by default), before the next model call, the model is asked for a
/// summary of the oldest part of what is sent, which replaces that part from then on.
///
/// The newest messages (30% of the window by default) stay as they are; the cut never
/// separates a tool call from its results. The summary is appended to the transcript as a
/// user message marked with a [`Summary`](crate::context::Summary), between the events
/// `CompactionStart` and `CompactionEnd`; every later request sends it first, in place of
/// what it replaces. When the part to summarize is larger than half the window, it is
/// summarized in pieces, each summary carried into the next request. A compaction that fails
/// (the server errs, the summary comes back empty) changes nothing and the run goes on; its
/// `CompactionEnd` says why.
///
/// ```
/// use pagent::context::Compaction;
/// use pagent::{Agent, llm::Faux};
///
/// let agent = Agent::builder()
///     .provider(Faux::default())
///     .context_window(32_768)
///     .context_policy(Compaction::new().threshold(0.7).keep_recent(0.2))
///     .build()?;
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct Compaction {
    pub(crate) threshold: Budget,
    pub(crate) keep_recent: Budget,
    pub(crate) prompt: Option<Arc<str>>,
    pub(crate) model: Option<String>,
    pub(crate) keep_first_user: bool,
}

impl Default for Compaction {
    fn default() -> Compaction {
        Compaction::new()
    }
}

/// The instructions a compaction gives the model, by default.
pub const COMPACTION_PROMPT: &str = "You write the summary of a conversation between a user \
and an assistant that uses tools, so that the assistant can go on with the work from the summary \
alone. Keep: the task and the user's requirements, decisions made and why, facts, names, numbers, \
file paths and results the tools gave that are still needed, what was done and what remains to be \
done, open questions. Leave out greetings, repetition and reasoning that led nowhere. Write plain \
text, as short as the content allows, and nothing but the summary.";

impl Compaction {
    /// Compaction at 80% of the window, keeping the newest 30% of it as it is, with the
    /// agent's model and [`COMPACTION_PROMPT`].
    pub fn new() -> Compaction {
        Compaction {
            threshold: Budget::Share(0.8),
            keep_recent: Budget::Share(0.3),
            prompt: None,
            model: None,
            keep_first_user: false,
        }
    }

    /// Compacts when the context reaches this share of the window (clamped to 0.01-1.0).
    /// Defaults to 0.8. Until the window is known, only an overflow compacts.
    pub fn threshold(mut self, share: f64) -> Compaction {
        self.threshold = Budget::share(share);
        self
    }

    /// Compacts when the context reaches this many tokens, whatever the window (Python
    /// pagent's `compact_at_tokens`).
    pub fn threshold_tokens(mut self, tokens: u64) -> Compaction {
        self.threshold = Budget::Tokens(tokens);
        self
    }

    /// Keeps this share of the window of the newest messages as they are (clamped to
    /// 0.01-1.0, and to 80% of the threshold, so that a compaction leaves room below it).
    /// Defaults to 0.3.
    pub fn keep_recent(mut self, share: f64) -> Compaction {
        self.keep_recent = Budget::share(share);
        self
    }

    /// Keeps this many tokens of the newest messages as they are.
    pub fn keep_recent_tokens(mut self, tokens: u64) -> Compaction {
        self.keep_recent = Budget::Tokens(tokens);
        self
    }

    /// The instructions of the summary request (its system prompt). Defaults to
    /// [`COMPACTION_PROMPT`].
    pub fn prompt(mut self, prompt: impl Into<String>) -> Compaction {
        self.prompt = Some(Arc::from(prompt.into()));
        self
    }

    /// The model that writes the summaries (a cheaper one, say). Defaults to the agent's.
    pub fn model(mut self, model: impl Into<String>) -> Compaction {
        self.model = Some(model.into());
        self
    }

    /// Whether the first user message of the transcript is left out of the summary and sent
    /// as it is, in front of it. Defaults to false.
    pub fn keep_first_user(mut self, keep: bool) -> Compaction {
        self.keep_first_user = keep;
        self
    }
}
