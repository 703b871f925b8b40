//! Run LLM agents from ordinary, blocking Rust programs.
//!
//! A blocking [`Agent::prompt`] drives the whole agent loop on the caller's thread: it streams a
//! model reply, runs the tools the model asks for, and goes on for more turns until the agent
//! stops. Every step is an [`AgentEvent`], first folded into an immutable [`State`] that any
//! thread can read with [`Agent::snapshot`], then handed in order to the listeners registered
//! with [`Agent::subscribe`].
//!
//! # Hello, agent
//!
//! Offline, on the scripted [`llm::Faux`] provider (swap in a real provider for a real model):
//!
//! ```
//! use pagent::llm::{Faux, FauxReply};
//! use pagent::{Agent, RunStopReason};
//!
//! let agent = Agent::builder()
//!     .provider(Faux::new().reply(FauxReply::text("Hello! How can I help?")))
//!     .system_prompt("You are terse.")
//!     .build()?;
//!
//! let result = agent.prompt("Hi")?;
//! assert_eq!(result.text(), "Hello! How can I help?");
//! assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
//! assert_eq!(agent.snapshot().messages.len(), 2); // the prompt and the reply
//! # Ok::<(), pagent::Error>(())
//! ```
//!
//! # Events and their order
//!
//! ```text
//! AgentStart
//!   TurnStart { turn }
//!     MessageStart / MessageEnd                     the prompt (and steering messages)
//!     MessageStart / MessageUpdate* / MessageEnd    the assistant reply, streamed
//!     ToolStart / ToolUpdate* / ToolEnd             each tool call of that reply
//!     MessageStart / MessageEnd                     each tool result message, in call order
//!   TurnEnd { turn, message, tool_results, stop_reason }
//!   ... the next TurnStart while the model keeps calling tools ...
//! AgentEnd { messages, stop_reason, usage }
//! ```
//!
//! Every run that starts emits exactly one `AgentStart` and one `AgentEnd`, whatever fails.
//! Every tool call gets exactly one `ToolStart`, one `ToolEnd` and one result message, also
//! when it never ran (a reply cut by the length limit, a failed or aborted reply, a blocked
//! or skipped call): those get a synthesized error result saying why, so the transcript is
//! always valid for the next request.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use pagent::llm::{Faux, FauxReply};
//! use pagent::{Agent, AgentEvent, ToolOutput, tool};
//! # #[derive(serde::Deserialize, schemars::JsonSchema)] struct Args {}
//!
//! let clock = tool::typed("clock", "The time.", |_: Args, _| Ok(ToolOutput::text("12:00")));
//! let faux = Faux::new()
//!     .reply(FauxReply::tool_call("clock", serde_json::json!({})))
//!     .reply(FauxReply::text("It is noon."));
//! let agent = Agent::builder().provider(faux).tool(clock).build()?;
//!
//! let names = Arc::new(Mutex::new(Vec::new()));
//! let sink = names.clone();
//! let _sub = agent.subscribe(move |e: &AgentEvent| {
//!     let name = e.name();
//!     let mut v = sink.lock().unwrap();
//!     if v.last() != Some(&name) || name != "MessageUpdate" { v.push(name) }
//! });
//! agent.prompt("What time is it?")?;
//! assert_eq!(*names.lock().unwrap(), [
//!     "AgentStart",
//!     "TurnStart", "MessageStart", "MessageEnd",                   // the prompt
//!     "MessageStart", "MessageUpdate", "MessageEnd",               // the reply, streamed
//!     "ToolStart", "ToolEnd", "MessageStart", "MessageEnd",       // the tool and its result
//!     "TurnEnd",
//!     "TurnStart", "MessageStart", "MessageUpdate", "MessageEnd", "TurnEnd",
//!     "AgentEnd",
//! ]);
//! # Ok::<(), pagent::Error>(())
//! ```
//!
//! Run stop reasons ([`RunStopReason`]): `NoToolCalls` (a final answer), `EmptyResponse`,
//! `MaxTurns` (`max_turns` model calls made; the last turn's tools still ran), `Cancelled`
//! (`abort()`), `Error` (the provider failed; the partial reply is kept and
//! `State::error_message` says why). `TurnEnd` also uses `Continuing`.
//!
//! # Threads
//!
//! - The run happens on the thread that calls `prompt`; listeners, hooks and event delivery
//!   happen on that thread too. Tools run on scoped worker threads of the run (in parallel,
//!   up to `max_parallel_tools`), but their progress and end become events on the run thread.
//! - [`Agent::snapshot`] returns the latest `Arc<State>` from any thread without locking or
//!   waiting. Each event is folded into the state *before* listeners see it, so a listener
//!   that calls `snapshot()` sees the state including its event.
//! - [`AgentHandle`] (`Clone + Send + Sync`) steers, queues follow-ups and aborts from any
//!   thread, listeners included.
//! - What blocks: `prompt` until the run ends; a listener blocks the run while it runs; a full
//!   channel of [`Agent::subscribe_channel`] blocks the run until the consumer takes an event
//!   (nothing is dropped). What unblocks: `abort()` ends a model call or a
//!   [`hooks::ToolCallRequest::wait_for`] at once, and running tools through their cancel
//!   token; the run then ends with `Cancelled`.
//! - A panicking listener is caught: the run goes on, and the state counts it in
//!   `listener_panics` (with the message in `last_listener_panic`). A panicking tool becomes an
//!   error result; a panicking provider ends the run with `Error`.
//!
//! # The wire
//!
//! The same timeline as line-delimited JSON-RPC 2.0, for other languages, browsers and log
//! files: [`wire::Writer`] writes one notification line per event (or the Python pagent v1
//! and v4 dialects), [`wire::Mirror`] folds the lines back into the snapshots the agent
//! published, [`wire::serve`] drives an agent over stdin/stdout. [`session`] saves and
//! restores transcripts, one message per line.
//!
//! ```
//! use pagent::llm::{Faux, FauxReply};
//! use pagent::{Agent, wire};
//!
//! let agent = Agent::builder().provider(Faux::new().reply(FauxReply::text("Hi!"))).build()?;
//! let log = wire::Writer::new(Vec::new()); // a File or a socket in real use
//! let _sub = agent.subscribe(log.listener());
//! let mut mirror = wire::Mirror::from_state(agent.snapshot().timeline());
//! agent.prompt("Hello")?;
//!
//! let lines = log.with_output(|bytes| String::from_utf8(bytes.clone()).unwrap());
//! assert!(lines.contains(r#"{"jsonrpc":"2.0","method":"MessageUpdate","params":{"delta":{"type":"text_delta","text":"Hi!"}}}"#));
//! mirror.read_lines(lines.as_bytes(), |_event, _state| {})?;
//! assert_eq!(mirror.state().timeline(), agent.snapshot().timeline());
//! # Ok::<(), pagent::Error>(())
//! ```
//!
//! # Performance
//!
//! Folding an event into the state costs O(size of the event): the transcript, the partial
//! reply and the lists are persistent structures shared between snapshots, so a snapshot is
//! an `Arc` clone and a long reply into a long transcript stays linear. Measured with
//! `cargo bench --bench fold` (fold + store + dispatch of one text delta to one listener; see
//! the README for the figures).

// No unsafe code anywhere: the concurrency is built on arc-swap, crossbeam and parking_lot.
#![forbid(unsafe_code)]
// Every public item is documented; the docs are the contract users rely on.
#![deny(missing_docs)]
// Keep public types debuggable, the code idiomatic, and `pub` honest.
#![warn(missing_debug_implementations, rust_2018_idioms, unreachable_pub)]

mod agent;
mod cancel;
mod error;
mod event;
pub mod llm;
mod message;
mod partial;
pub mod session;
mod state;
pub mod tool;
pub mod wire;

pub use agent::{
    Agent, AgentBuilder, AgentHandle, Prompt, QueueMode, Refused, RunResult, SteeringPolicy,
    Subscription,
};
pub use cancel::CancelToken;
pub use error::{Error, TimeoutPhase};
pub use event::{AgentEvent, RunStopReason};
pub use message::{
    AssistantMessage, ContentBlock, Message, StopReason, ToolCall, ToolResultMessage, Usage,
    UserMessage,
};
pub use partial::{PartialBlock, PartialMessage, Text};
pub use state::{PendingToolCall, State};
pub use tool::{Tool, ToolContext, ToolError, ToolOutput};

/// Hooks that police and reshape a run: the types their callbacks see and return.
pub mod hooks {
    pub use crate::agent::hooks::{ToolCallRequest, ToolDecision, TurnSetup};
}

// `Agent`, its handle, events, states and errors cross threads.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Agent>();
    assert_send_sync::<AgentHandle>();
    assert_send_sync::<AgentEvent>();
    assert_send_sync::<State>();
    assert_send_sync::<Error>();
};
