//! Run LLM agents from ordinary, blocking Rust programs.
//!
//! A blocking [`Agent::prompt`] drives the whole agent loop on the caller's thread: it streams a
//! model reply, runs the tools the model asks for, and goes on for more turns until the agent
//! stops. Every step is an [`AgentEvent`], first folded into an immutable [`State`] that any
//! thread can read with [`Agent::snapshot`], then handed in order to the listeners registered
//! with [`Agent::subscribe`].
//!
//! This documentation is a short tutorial; every example runs offline, on the scripted
//! [`llm::Faux`] provider.
//!
#![doc = include_str!("../docs/tutorial.md")]
// The README's example runs with the doctests, so it cannot rot either.
#![cfg_attr(doctest, doc = include_str!("../README.md"))]
// No unsafe code anywhere: the concurrency is built on crossbeam and parking_lot.
#![forbid(unsafe_code)]
// Every public item is documented; the docs are the contract users rely on.
#![deny(missing_docs)]
// Keep public types debuggable, the code idiomatic, and `pub` honest.
#![warn(missing_debug_implementations, rust_2018_idioms, unreachable_pub)]

#[cfg(feature = "acp")]
pub mod acp;
mod agent;
mod cancel;
mod content;
pub mod context;
mod elicit;
mod error;
mod event;
mod jsonrpc;
mod kind;
mod list;
pub mod llm;
#[cfg(feature = "mcp")]
pub mod mcp;
mod message;
mod output;
mod partial;
#[cfg(feature = "redis")]
pub mod redis;
pub mod session;
mod state;
mod tag;
pub mod tool;
// Public with the feature (its docs are the span table); the loop's calls compile to nothing
// without it.
#[cfg(feature = "tracing")]
pub mod trace;
#[cfg(not(feature = "tracing"))]
mod trace;
mod types;
pub mod wire;

pub use agent::{
    Agent, AgentBuilder, AgentHandle, ClaimedRun, FinalTurn, OutputTurn, Prompt, QueueMode,
    Refused, RunMessages, RunResult, RunStream, SteeringPolicy, Subscription, TextChunks, TypedRun,
    Waker, WireLines, run_loop,
};
pub use cancel::CancelToken;
pub use content::{Audio, Blob, Document, Image, Part, Source};
pub use elicit::{
    AnswerRefused, Elicitation, ElicitationAnswer, ElicitationMode, PendingElicitation,
};
pub use error::{Error, RunError, TimeoutPhase};
pub use event::{AgentEvent, RunStopReason};
pub use kind::{ErrorInfo, ErrorKind};
pub use list::{List, ListIter};
pub use llm::StreamEvent;
pub use message::{
    AssistantMessage, ContentBlock, Message, StopReason, ToolCall, ToolResultMessage, Usage,
    UserMessage,
};
pub use output::{OutputCheck, OutputSchema};
pub use partial::{PartialBlock, PartialMessage, Text};
pub use state::{ChannelPolicy, ChannelStats, FinishedToolCall, PendingToolCall, State};
pub use tool::{Tool, ToolContext, ToolError, ToolOutput};

/// The `crossbeam-channel` crate (0.5), re-exported: [`Agent::subscribe_channel`],
/// [`CancelToken::receiver`] and [`hooks::ToolCallRequest::wait_for`] hand out or take its
/// `Receiver`, so `pagent::crossbeam_channel::select!` and the rest of the crate always match
/// the version pagent uses, without a dependency of your own.
pub use crossbeam_channel;

/// The `schemars` crate (1.x), re-exported for [`tool::typed`]: derive the argument struct's
/// schema with it, and it always matches the version pagent uses, without a dependency of
/// your own. `use pagent::schemars::{self, JsonSchema};` puts `schemars` in scope for the
/// derive; with the full path, add `#[schemars(crate = "pagent::schemars")]`.
///
/// ```
/// use pagent::schemars::{self, JsonSchema};
///
/// #[derive(serde::Deserialize, JsonSchema)]
/// struct Add {
///     a: f64,
///     b: f64,
/// }
///
/// let add = pagent::tool::typed("add", "Adds two numbers.", |args: Add, _ctx| {
///     Ok(pagent::ToolOutput::text((args.a + args.b).to_string()))
/// });
/// # use pagent::Tool;
/// assert!(add.definition().parameters["properties"]["a"].is_object());
/// ```
pub use schemars;

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
    assert_send_sync::<RunError>();
};

/// Internals exposed for the benches only; not part of the API, may change at any time.
#[doc(hidden)]
pub mod bench_support {
    use crate::agent::dispatch::{Shared, Sink};
    use crate::{AgentEvent, State};
    use std::sync::Arc;

    /// The event path of a run: fold, store, dispatch.
    pub struct Emitter(Shared);

    impl std::fmt::Debug for Emitter {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Emitter")
        }
    }

    impl Emitter {
        /// An emitter publishing `state`.
        pub fn new(state: State) -> Emitter {
            Emitter(Shared::new(state))
        }
        /// Folds, stores, dispatches, exactly as a run does.
        pub fn emit(&self, event: AgentEvent) {
            self.0.emit(&event)
        }
        /// Adds a listener.
        pub fn subscribe(&self, f: impl Fn(&AgentEvent) + Send + Sync + 'static) {
            self.0.subscribe(Sink::Callback(Box::new(f)));
        }
        /// The latest state.
        pub fn snapshot(&self) -> Arc<State> {
            self.0.snapshot()
        }
    }
}

/// The context ledger's work for one turn, for the benches only; not part of the API.
#[doc(hidden)]
pub mod context_bench {
    use std::sync::Arc;

    use crate::context::ledger::Ledger;
    use crate::list::List;
    use crate::{Message, context::ContextUsage, llm::ToolDefinition};

    /// A transcript and its ledger.
    #[derive(Clone, Debug)]
    pub struct Turns {
        ledger: Ledger,
        messages: List<Arc<Message>>,
        tools: Arc<[ToolDefinition]>,
    }

    impl Turns {
        /// A ledger that counted `messages`.
        pub fn new(messages: Vec<Message>) -> Turns {
            let messages: List<Arc<Message>> = messages.into_iter().map(Arc::new).collect();
            let mut ledger = Ledger::default();
            ledger.sync(&messages, None);
            Turns {
                ledger,
                messages,
                tools: Arc::from([]),
            }
        }

        /// One turn, as the run does it: the messages appended, counted; the policy's
        /// decision (a slide to `budget`, or the check of `threshold`); the view built; the
        /// server's count noted; the figures for `TurnEnd`. Returns the view's length and
        /// the figures.
        pub fn turn(
            &mut self,
            appended: &[Arc<Message>],
            budget: Option<u64>,
            threshold: Option<u64>,
        ) -> (usize, ContextUsage) {
            for m in appended {
                self.messages.push_back(m.clone());
            }
            let l = &mut self.ledger;
            l.sync(&self.messages, None);
            l.set_fixed("Be brief.", &self.tools, None);
            if let Some(b) = budget {
                l.slide(b);
            }
            if let Some(t) = threshold {
                std::hint::black_box(l.used() >= t);
            }
            let estimate = l.estimate();
            let view = l.view(&self.messages);
            l.counted(estimate, estimate, 10, 10);
            (view.len(), l.usage(Some(128_000)))
        }

        /// Counting alone: the messages appended, counted, and the figures.
        pub fn count(&mut self, appended: &[Arc<Message>]) -> ContextUsage {
            for m in appended {
                self.messages.push_back(m.clone());
            }
            self.ledger.sync(&self.messages, None);
            self.ledger.usage(Some(128_000))
        }
    }
}

/// Internals exposed for the fuzz targets (`fuzz/`) only; not part of the API, may change at
/// any time. Everything else the targets drive is public.
#[doc(hidden)]
pub mod fuzz_support {
    use crate::wire::lines::{Line, read_line};

    /// Every line the wire's and the session's line reader finds in `input` with a limit of
    /// `max` bytes: `Ok(line)` (line end removed) or `Err(length)` for a line over the limit.
    ///
    /// # Errors
    /// The first read error of `input`.
    pub fn read_lines(
        mut input: impl std::io::BufRead,
        max: usize,
    ) -> std::io::Result<Vec<Result<Vec<u8>, usize>>> {
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        loop {
            match read_line(&mut input, &mut buf, max)? {
                Line::End => return Ok(lines),
                Line::Whole { .. } => lines.push(Ok(buf.clone())),
                Line::TooLong(n) => lines.push(Err(n)),
            }
        }
    }
}
