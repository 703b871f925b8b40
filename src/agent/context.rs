//! Where the run meets its context policy: the ledger kept across runs, the decision before
//! each model call (slide, compact), the view each request sends, the server's counts after
//! each reply, and the recovery from an overflow. The policies themselves are in
//! [`crate::context`].

use std::sync::Arc;

use super::guard;
use super::run::Run;
use crate::context::ledger::{Ledger, ViewKey};
use crate::context::summarize::{self, Summarizer};
use crate::context::{
    COMPACTION_PROMPT, Compaction, CompactionReason, ContextPolicy, ContextUsage, known_window,
    parse_overflow,
};
use crate::event::AgentEvent;
use crate::kind::ErrorInfo;
use crate::llm::{Request, TokenCounter};
use crate::message::{AssistantMessage, Message};
use crate::{Error, RunStopReason};

/// What the agent keeps of its context between runs.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    ledger: Ledger,
    /// The window the server reported or an overflow named, and the model it is of.
    learnt: Option<(String, u64)>,
    /// The model whose server was last asked for its window (asked once a model).
    asked: Option<String>,
}

/// A run's side of the context: the memory (taken from the agent for the run), and what the
/// current model call needs.
#[derive(Debug, Default)]
pub(crate) struct RunContext {
    memory: Memory,
    /// The estimate of the view the last request sent, to anchor the server's count.
    sent: u64,
    /// How many messages the transcript had then: the reply is the next one.
    sent_len: usize,
    /// Set when the last model call overflowed: the next one compacts (or slides) first.
    overflowed: bool,
    /// Whether the current model call is the retry of an overflowed one.
    retrying: bool,
    /// The well-known window of the model last asked about (asked twice a turn; the model
    /// may change between turns).
    known: Option<(String, Option<u64>)>,
    /// What the last request's repair check found of its view (see `repair::Checked`).
    pub(crate) checked: Option<super::repair::Checked>,
    /// How many messages the run had appended when the ledger was last brought up to the
    /// transcript: it is synced again only when the run appended more. The transcript
    /// itself is read from the published state each time, never kept: a list kept beside
    /// the state's shares its last node, and the state's next message would copy that node
    /// (its `Arc`s counted up one by one) rather than append in place.
    synced: Option<usize>,
}

impl RunContext {
    pub(crate) fn new(memory: Memory) -> RunContext {
        RunContext {
            memory,
            ..RunContext::default()
        }
    }

    pub(crate) fn into_memory(self) -> Memory {
        self.memory
    }
}

/// The share of a decision's limit from which the agent asks for an exact count.
const NEAR: f64 = 0.9;
/// What a slide after an overflow aims at, as a share of the window.
const AFTER_OVERFLOW: f64 = 0.7;
/// The largest summary, as a share of the window.
const SUMMARY_SHARE: f64 = 0.15;

/// A counter whose panics become "no count": user code, called where the run must go on.
struct Guarded<'a>(&'a dyn TokenCounter);

impl TokenCounter for Guarded<'_> {
    fn text_tokens(&self, text: &str) -> Option<u64> {
        guard::catch(|| self.0.text_tokens(text)).ok().flatten()
    }
}

impl Run<'_> {
    fn counter(&self) -> Option<Arc<dyn TokenCounter>> {
        self.config.token_counter.clone()
    }

    /// Brings the ledger up to the transcript and the current system prompt and tools. The
    /// transcript is read again only when the run appended to it since the last time (asked
    /// four times a turn, it changed at most twice).
    fn sync_context(&mut self) {
        let counter = self.counter();
        let guarded = counter.as_deref().map(Guarded);
        let counter = guarded.as_ref().map(|g| g as &dyn TokenCounter);
        let ledger = &mut self.context.memory.ledger;
        if self.context.synced != Some(self.appended.len()) {
            self.context.synced = Some(self.appended.len());
            ledger.keep_first_user = self.config.context_policy.keep_first_user();
            ledger.sync(&self.inner.shared.snapshot().messages, counter);
        }
        ledger.set_fixed(&self.config.system_prompt, &self.config.tool_defs, counter);
    }

    /// The model's window: set on the builder, else learnt (the server, an overflow), else
    /// known for the model, else asked of the server when the policy needs it.
    fn window(&mut self) -> Option<u64> {
        // Borrowed: asked twice a turn, the model's name is copied only to be kept.
        let model = &self.config.model;
        let learnt = self
            .context
            .memory
            .learnt
            .as_ref()
            .filter(|(m, _)| m == model)
            .map(|(_, w)| *w);
        let set = self.config.context_window;
        // A smaller window an overflow named wins over the one set: the server decides.
        match (set, learnt) {
            (Some(s), Some(l)) => return Some(s.min(l)),
            (Some(s), None) => return Some(s),
            (None, Some(l)) => return Some(l),
            (None, None) => {}
        }
        let known = match &self.context.known {
            Some((m, w)) if m == model => *w,
            _ => {
                let w = known_window(model);
                self.context.known = Some((model.clone(), w));
                w
            }
        };
        if let Some(w) = known {
            return Some(w);
        }
        let asked = self.context.memory.asked.as_deref() == Some(model.as_str());
        if !asked && self.config.context_policy.needs_window() {
            let model = model.clone();
            self.context.memory.asked = Some(model.clone());
            let provider = self.config.provider.clone();
            let cancel = self.cancel.clone();
            let told = guard::catch(|| provider.context_window(&model, &cancel))
                .ok()
                .flatten()
                .filter(|w| *w > 0);
            if let Some(w) = told {
                self.context.memory.learnt = Some((model, w));
                return Some(w);
            }
        }
        None
    }

    /// The figures of the context now, as `TurnEnd` carries them.
    pub(crate) fn context_usage(&mut self) -> ContextUsage {
        self.sync_context();
        let window = self.window();
        self.context.memory.ledger.usage(window)
    }

    /// Asks the counter for an exact count of the view when `used` is near `limit`, and
    /// anchors the ledger with it.
    fn count_if_near(&mut self, limit: u64) {
        let used = self.context.memory.ledger.used();
        if (used as f64) < limit as f64 * NEAR {
            return;
        }
        self.count_exactly();
    }

    /// Asks the counter for an exact count of the view as it is now, and anchors the ledger
    /// with it: near a decision, and after a slide or a compaction changed much of what is
    /// sent (the estimate of so large a change is the least exact figure the ledger has:
    /// measured against llama.cpp, up to 10% off after a compaction, 1-2% otherwise).
    fn count_exactly(&mut self) {
        let Some(counter) = self.counter() else {
            return;
        };
        let messages = self.inner.shared.snapshot().messages.clone();
        let request = Request {
            system_prompt: self.config.system_prompt.clone(),
            messages: self.context.memory.ledger.view(&messages),
            tools: self.config.tool_defs.clone(),
            model: self.config.model.clone(),
            thinking: self.config.thinking,
            // A summary or a count asks for no structured answer.
            output: None,
            // The messages the next model call sends (before `transform_context`), in its
            // order: the count's body takes the JSON of those sent before from the
            // transcript's cache, and leaves there the JSON of the new ones for the call.
            body_cache: Some(self.inner.body_cache.clone()),
        };
        let cancel = self.cancel.clone();
        if let Ok(Ok(Some(tokens))) = guard::catch(|| counter.request_tokens(&request, &cancel)) {
            self.context.memory.ledger.exact(tokens);
        }
    }

    /// Before the model call: slides or compacts as the policy (or an overflow) says.
    pub(crate) fn prepare_context(&mut self) {
        self.sync_context();
        let window = self.window();
        let overflowed = std::mem::take(&mut self.context.overflowed);
        self.context.retrying = overflowed;
        // After an overflow the window is what it named, else the count that overflowed.
        let fallback = window.unwrap_or_else(|| self.context.memory.ledger.used());
        match self.config.context_policy.clone() {
            ContextPolicy::SlidingWindow(policy) => {
                let mut budget = policy.budget.tokens(window);
                if overflowed {
                    let cap = (fallback as f64 * AFTER_OVERFLOW) as u64;
                    budget = Some(budget.map_or(cap, |b| b.min(cap)));
                }
                if let Some(budget) = budget {
                    self.count_if_near(budget);
                    if self.context.memory.ledger.slide(budget) > 0 {
                        self.count_exactly();
                    }
                }
            }
            ContextPolicy::Compaction(policy) => {
                let threshold = policy.threshold.tokens(window);
                if let Some(t) = threshold.filter(|_| !overflowed) {
                    self.count_if_near(t);
                }
                let due =
                    overflowed || threshold.is_some_and(|t| self.context.memory.ledger.used() >= t);
                if due {
                    let reason = if overflowed {
                        CompactionReason::Overflow
                    } else {
                        CompactionReason::Threshold
                    };
                    let done = self.compact(reason, &policy, window.or(Some(fallback)));
                    if !done && overflowed {
                        self.slide_after_overflow(fallback);
                    }
                }
            }
            _ => {
                if overflowed
                    && !self.compact(
                        CompactionReason::Overflow,
                        &Compaction::new(),
                        Some(fallback),
                    )
                {
                    self.slide_after_overflow(fallback);
                }
            }
        }
    }

    /// The last resort after an overflow: send what fits in part of the window.
    fn slide_after_overflow(&mut self, window: u64) {
        let budget = (window as f64 * AFTER_OVERFLOW) as u64;
        if self.context.memory.ledger.slide(budget) > 0 {
            self.count_exactly();
        }
    }

    /// Compacts: summarizes the oldest part of what is sent, appends the summary. Returns
    /// false when there was nothing to compact or the summary failed.
    fn compact(
        &mut self,
        reason: CompactionReason,
        policy: &Compaction,
        window: Option<u64>,
    ) -> bool {
        let Some(window) = window.filter(|w| *w > 0) else {
            return false;
        };
        let mut keep = policy
            .keep_recent
            .tokens(Some(window))
            .unwrap_or(window * 3 / 10);
        // What is kept must leave room below the threshold, or every turn would compact again.
        if let Some(threshold) = policy.threshold.tokens(Some(window)) {
            keep = keep.min(threshold * 4 / 5);
        }
        let ledger = &self.context.memory.ledger;
        let Some(cut) = ledger.cut(keep) else {
            return false;
        };
        let messages = self.inner.shared.snapshot().messages.clone();
        let summarized: Vec<usize> = ledger.summarized(cut).collect();
        let previous = ledger
            .latest_summary()
            .and_then(|i| messages.get(i))
            .cloned();
        // What the summary stands for: the messages summarized now, and what the previous
        // summary stood for.
        let replaced = summarized.iter().map(|i| ledger.tokens(*i)).sum::<u64>()
            + previous.as_deref().map_or(0, |p| match p {
                Message::User(u) => u.summary.map_or(0, |s| s.tokens),
                _ => 0,
            });
        let before = ledger.usage(Some(window));
        self.emit(AgentEvent::CompactionStart {
            reason,
            messages: (summarized.len() + usize::from(previous.is_some())) as u64,
            context: before,
        });
        let prompt: &str = policy.prompt.as_deref().unwrap_or(COMPACTION_PROMPT);
        let model = policy.model.as_deref().unwrap_or(&self.config.model);
        let max_summary = ((window as f64 * SUMMARY_SHARE) as u64).max(64);
        // Each piece and the summary carried into its request fit half the window, with
        // room for the instructions and the reply.
        let piece = (window / 2)
            .saturating_sub(max_summary + crate::context::estimate_text(prompt) + 64)
            .max(128);
        let pieces = summarize::pieces(
            summarized
                .iter()
                .filter_map(|i| messages.get(*i))
                .map(|m| &**m),
            piece,
        );
        let provider = self.config.provider.clone();
        let cancel = self.cancel.clone();
        let summarizer = Summarizer {
            provider: &*provider,
            model,
            prompt,
            cancel: &cancel,
            max_bytes: usize::try_from(max_summary * 4).unwrap_or(usize::MAX),
        };
        let previous_text = previous.as_deref().and_then(summarize::summary_text);
        let outcome = guard::catch(|| summarizer.run(previous_text, &pieces));
        let (text, usage) = match outcome {
            Ok(done) => (done.text, done.usage),
            Err(panic) => (
                Err(Error::Panic {
                    source: "the provider",
                    message: panic,
                }),
                Default::default(),
            ),
        };
        self.add_usage(usage);
        let error = match text {
            Ok(text) => {
                self.append(summarize::summary_message(&text, cut, replaced));
                None
            }
            Err(e) => Some(ErrorInfo::from(&e)),
        };
        let done = error.is_none();
        if done {
            self.sync_context();
            self.count_exactly();
        }
        let after = self.context_usage();
        self.emit(AgentEvent::CompactionEnd {
            reason,
            context: after,
            usage,
            error,
        });
        done
    }

    /// The messages this request sends: the view of the ledger, shared with the transcript.
    pub(crate) fn context_view(&mut self) -> Vec<Arc<Message>> {
        self.sync_context();
        let ledger = &self.context.memory.ledger;
        self.context.sent = ledger.estimate();
        self.context.sent_len = ledger.len();
        // Into the last request's list (given back after its reply, see `Run::spares`).
        let mut view = std::mem::take(&mut self.spares.messages);
        // The transcript the ledger was synced to: only the run appends to it meanwhile.
        self.inner
            .shared
            .read(|state| ledger.view_into(&state.messages, &mut view));
        view
    }

    /// The key of the view [`Run::context_view`] cut last (see `Ledger::view_key`).
    pub(crate) fn view_key(&self) -> ViewKey {
        self.context.memory.ledger.view_key()
    }

    /// After the reply: notes the server's count, and decides whether an overflow is sent
    /// again. Returns the stop reason and error the turn ends with.
    pub(crate) fn after_reply(
        &mut self,
        reply: &AssistantMessage,
        stop: RunStopReason,
        error: Option<Error>,
    ) -> (RunStopReason, Option<Error>) {
        self.sync_context();
        let ledger = &mut self.context.memory.ledger;
        if reply.usage.input > 0 {
            // The reply came right after the request's messages; tool results may follow it.
            let at = self.context.sent_len;
            let reply_tokens = if at < ledger.len() {
                ledger.tokens(at)
            } else {
                0
            };
            ledger.counted(
                self.context.sent,
                reply.usage.input,
                reply.usage.output,
                reply_tokens,
            );
        }
        let Some(e) = error.as_ref().filter(|e| e.is_context_overflow()) else {
            return (stop, error);
        };
        let told = parse_overflow(&e.to_string());
        if let Some(w) = told.window.filter(|w| *w > 0) {
            self.context.memory.learnt = Some((self.config.model.clone(), w));
        }
        if let Some(prompt) = told.prompt {
            let sent = self.context.sent;
            self.context.memory.ledger.counted(sent, prompt, 0, 0);
        }
        let retry = self.config.overflow_recovery
            && !self.context.retrying
            && self.context.memory.ledger.can_shrink()
            && reply.is_empty()
            && stop == RunStopReason::Error
            && !self.cancel.is_cancelled();
        if !retry {
            return (stop, error);
        }
        self.context.overflowed = true;
        self.retried += 1;
        (RunStopReason::Continuing, None)
    }
}
