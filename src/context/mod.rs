//! Context that never overflows: how full the model's context is, and the policies that keep
//! a long run within it.
//!
//! # How full the context is
//!
//! Every `TurnEnd` carries a [`ContextUsage`], and the state shows the latest in
//! `State::context`: `used`, the tokens the next request sends (system prompt, tools and
//! the messages the policy keeps); `window`, the model's context window; `share`, their
//! ratio; `estimated`, how many of `used` are an estimate; `omitted`, how many transcript
//! messages are not sent. A `CompactionEnd` carries the figures after the compaction. Both
//! events are on the native wire, so a [`Mirror`](crate::wire::Mirror) shows the same
//! figures as the agent.
//!
//! `used` is the server's own count of the last request and its reply (the usage of the
//! reply: `input + output`), plus an estimate of what was appended since (the tool results),
//! minus what a slide or a compaction took out. The estimate is the built-in one
//! ([`estimate_message`]: about four letters a token, more for digits, punctuation and CJK,
//! the chat template's framing per message, images by their size), or the counts of a
//! tokenizer set with [`AgentBuilder::token_counter`](crate::AgentBuilder::token_counter);
//! either way it is scaled by how far the estimate of the last request was from the server's
//! count of it, so a systematic error of the estimate (a tokenizer that splits more finely)
//! is corrected after the first reply.
//!
//! When a decision of the policy is near (the figure within 10% of the threshold or the
//! budget), the agent asks for an exact count of the request, if its counter can make one
//! ([`TokenCounter::request_tokens`](crate::llm::TokenCounter::request_tokens)): llama.cpp's
//! `/apply-template` and `/tokenize`, the Responses API's `input_tokens`, Anthropic's
//! `count_tokens` (see
//! [`llm::TokenCounter`](crate::llm::TokenCounter) for the table). A server without those
//! endpoints is asked once.
//!
//! The window comes from, in order: [`AgentBuilder::context_window`](crate::AgentBuilder::context_window);
//! the server, asked once per model and only when the policy needs the window
//! ([`Provider::context_window`](crate::llm::Provider::context_window): llama.cpp's `/props`,
//! vLLM's `/v1/models`); the table of well-known models ([`known_window`]). An overflow error
//! that names the window (llama.cpp, OpenAI and Anthropic all do) teaches it too, and wins
//! over a larger one set on the builder.
//!
//! ## How close the figure is
//!
//! Measured against llama.cpp's own count (`prompt_tokens` of each request, which is
//! `/tokenize` of the prompt its chat template renders) over the requests of the live runs of
//! `tests/live_context.rs` (SmolLM2-135M, a 2,048-token context, pages of about 220 tokens
//! read by a tool; recorded in `tests/data/context/`, replayed by `tests/context.rs`): the
//! built-in estimate alone is off by up to 13.5%; the figure the agent shows (the server's
//! last count plus the scaled estimate of what was appended) by at most 4.0% at every turn.
//! After a slide or a compaction, which change much of what is sent, the agent asks for an
//! exact count where the server gives one (so the figure is the server's); where none is
//! offered the scaled estimate is off by up to 10.5% there, until the next reply's usage
//! corrects it. The live tests assert 10% against the server's count at every request.
//!
//! # Policies
//!
//! Chosen with [`AgentBuilder::context_policy`](crate::AgentBuilder::context_policy):
//!
//! - [`ContextPolicy::Unbounded`] (the default): everything is sent.
//! - [`SlidingWindow`]: the newest messages within a budget of tokens (Python pagent's
//!   `SlidingWindowSession`), never starting at a tool result, optionally with the first
//!   user message kept in front.
//! - [`Compaction`]: at a threshold, the oldest part of what is sent is summarized by the
//!   model (Python pagent's `CompactingSession`), between `CompactionStart` and
//!   `CompactionEnd`.
//!
//! The transcript is never rewritten. A slide only changes what is sent. A compaction adds a
//! message: the summary, a user message marked with a [`Summary`] that says how many of the
//! first messages it replaces, appended where the compaction happened (so a UI shows when it
//! did). Every request then sends the latest summary first, then the messages after what it
//! replaces, other summaries left out. The mark travels with the message (sessions, the
//! wire, Redis), so an agent restored from a session sends what the original would have
//! sent, whatever its own policy.
//!
//! # The order of each model call
//!
//! 1. The turn's input and steering messages are appended.
//! 2. The policy decides: a slide, or a compaction (its events and its summary message).
//! 3. The view is built: the pinned first user message, the latest summary, the messages
//!    after it (or after the window's start).
//! 4. [`AgentBuilder::transform_context`](crate::AgentBuilder::transform_context) gets that
//!    view and returns what the request carries (it stays the escape hatch: it can drop,
//!    add or rewrite messages after the policy; the next reply's usage corrects the figures).
//! 5. Unanswered tool calls are repaired ([`AgentBuilder::repair_requests`](crate::AgentBuilder::repair_requests)).
//!
//! # Overflow
//!
//! When the server refuses a request as larger than its context
//! ([`ErrorKind::ContextOverflow`](crate::ErrorKind::ContextOverflow)) before any of the
//! reply arrived, the agent compacts (with the policy's [`Compaction`], or the default one
//! when the policy has none), or slides (a [`SlidingWindow`] policy, or when a compaction
//! cannot help), to 70% of the window the error named, and sends the request again, once,
//! whatever the policy. The refused reply stays in the transcript as what happened (an empty
//! reply with `StopReason::Error`, which requests leave out); its turn ends `Continuing`
//! and the next turn (not counted against `max_turns`) makes the call again. A second
//! overflow ends the run with the error, and so does one that nothing can shrink (a single
//! message larger than the window). Turn it off with
//! [`AgentBuilder::overflow_recovery`](crate::AgentBuilder::overflow_recovery).
//!
//! # Performance
//!
//! Each message is counted once, when the ledger first sees it; the ledger keeps prefix sums
//! of the counts, so the figures and the decisions cost O(1) per turn after counting the new
//! messages, and a slide costs O(messages it drops), each dropped once. A turn therefore
//! costs O(new messages) plus building the view, which a sliding window or a summary bounds
//! by the window (without a policy the view is the whole transcript, a pointer per message,
//! as the request has always been). `cargo bench --bench context` measures it at 10, 1,000 and
//! 10,000 messages: a sliding window 14, 37 and 44 µs a turn, compaction 19, 29 and 22 µs,
//! counting alone 12, 19 and 27 µs, without a policy 17 µs, 78 µs and 1.8 ms (medians of
//! wall time on a loaded 2-core machine: the ratios are the figure).

mod estimate;
pub(crate) mod ledger;
mod policy;
pub(crate) mod summarize;
mod usage;
mod windows;

pub use estimate::{estimate_message, estimate_request, estimate_text};
pub use policy::{COMPACTION_PROMPT, Compaction, ContextPolicy, SlidingWindow};
pub use usage::{CompactionReason, ContextUsage, Summary};
pub use windows::known_window;

pub(crate) use windows::parse_overflow;
