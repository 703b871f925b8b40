//! The plain data of context counting: how full the context is ([`ContextUsage`]), why a
//! compaction ran ([`CompactionReason`]) and the mark a summary message carries
//! ([`Summary`]). Events, the state and messages hold these; nothing here has behaviour.

use serde::{Deserialize, Serialize};

/// How full the model's context is: the tokens of what the next request sends (system prompt,
/// tools and the messages the context policy keeps), against the model's context window.
///
/// Published in `State::context`, set by every `TurnEnd` and `CompactionEnd` (and on the
/// native wire with them, so a mirror shows the same figures).
///
/// `used` is the server's own count of the last request and reply (their usage) plus an
/// estimate for what was appended since; `estimated` says how many of those tokens are
/// estimated (0 when the whole figure is the server's). See the [module docs](crate::context)
/// for the error of the estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "Counts")]
#[non_exhaustive]
pub struct ContextUsage {
    /// Tokens of the context the next request sends.
    pub used: u64,
    /// The model's context window in tokens, when known (set on the builder, read from the
    /// server, from the table of known models, or learnt from an overflow error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// `used / window`, when the window is known (above 1.0 when the context overflows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// How many of `used` are an estimate rather than the server's count: the tokens of the
    /// messages appended since the server last counted.
    #[serde(default)]
    pub estimated: u64,
    /// How many messages of the transcript the next request leaves out: slid out of the
    /// window or replaced by a summary.
    #[serde(default)]
    pub omitted: u64,
}

/// What a [`ContextUsage`] is read from: the share is worked out again, not read, so that a
/// mirror's figure is the agent's to the last bit.
#[derive(Deserialize)]
struct Counts {
    used: u64,
    #[serde(default)]
    window: Option<u64>,
    #[serde(default)]
    estimated: u64,
    #[serde(default)]
    omitted: u64,
}

impl From<Counts> for ContextUsage {
    fn from(c: Counts) -> ContextUsage {
        ContextUsage::new(c.used, c.window, c.estimated, c.omitted)
    }
}

impl ContextUsage {
    /// `used` tokens of a `window` (if known), `estimated` of them estimated, `omitted`
    /// transcript messages left out; the share is worked out.
    pub fn new(used: u64, window: Option<u64>, estimated: u64, omitted: u64) -> ContextUsage {
        ContextUsage {
            used,
            window,
            share: window.filter(|w| *w > 0).map(|w| used as f64 / w as f64),
            estimated: estimated.min(used),
            omitted,
        }
    }

    /// The tokens left before the window is full (0 once it is), when the window is known.
    pub fn remaining(&self) -> Option<u64> {
        self.window.map(|w| w.saturating_sub(self.used))
    }
}

/// Why a compaction ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompactionReason {
    /// The context reached the policy's threshold (for example 80% of the window).
    #[default]
    Threshold,
    /// The server refused the last request as larger than the context window
    /// (`ErrorKind::ContextOverflow`); the request is sent again, once, after the compaction.
    Overflow,
}

impl CompactionReason {
    /// The snake_case name (`"threshold"`).
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionReason::Threshold => "threshold",
            CompactionReason::Overflow => "overflow",
        }
    }
}

impl std::fmt::Display for CompactionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The mark of a summary message: a user message a compaction appended to the transcript,
/// which stands, in what is sent to the model, for the first `replaces` messages of the
/// transcript.
///
/// The transcript keeps every message; the summary goes at its end when the compaction runs
/// (so the transcript shows when it happened), and each request sends it first, in place of
/// the messages it replaces, followed by the messages after them (other summaries left out).
/// Sessions, the wire and Redis carry the mark with the message, so a restored agent sends
/// what the original one would have sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Summary {
    /// How many messages, from the start of the transcript, the summary replaces.
    pub replaces: u64,
    /// The estimated tokens of what it replaces.
    #[serde(default)]
    pub tokens: u64,
}

impl Summary {
    /// A summary of the first `replaces` messages of the transcript, which held about
    /// `tokens` tokens.
    pub fn new(replaces: u64, tokens: u64) -> Summary {
        Summary { replaces, tokens }
    }
}
