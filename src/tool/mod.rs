//! Tools the model can call: the [`Tool`] trait, its output and context, and typed tools.
//!
//! # Contract
//! - [`Tool::execute`] is called with the parsed JSON arguments on a worker thread of the run
//!   (the tool calls of one reply run in parallel unless a tool is sequential), never while a
//!   lock of the agent is held.
//! - It blocks that worker until it returns. Long tools should check [`ToolContext::cancel`]
//!   (or wait with [`ToolContext::sleep`]) so that `abort()` ends them promptly; the agent
//!   waits for every started tool to return and keeps its result.
//! - `Ok` becomes the result the model sees; `Err` becomes an error result with the message;
//!   a panic is caught and becomes an error result too. The run goes on in every case.
//!
//! # Panics
//! Every method is user code, and the agent catches a panic in any of them. The run goes on,
//! and every call the model made gets exactly one result:
//!
//! | method | asked | a panic |
//! | --- | --- | --- |
//! | [`Tool::name`] | by `build` (a duplicate check), then once per run, on the run thread | `build` fails with [`Error::Config`](crate::Error::Config); during a run no call finds the tool, and its calls get an "unknown tool" error result naming the panic |
//! | [`Tool::definition`] (and the `description` and `parameters` it calls) | when the tools are set: `build`, `set_tools`, a `before_turn` that changes them | `build` fails with `Error::Config`; a `before_turn` change ends the run with [`Error::Panic`](crate::Error::Panic); `set_tools` leaves the tool out of what the model is offered |
//! | [`Tool::sequential`] | once per call, before a batch runs | the batch runs one call at a time, and that tool's calls get an error result without running |
//! | [`Tool::validate`] | before `before_tool_call`, and again on rewritten arguments | that call gets an error result; `execute` is not called |
//! | [`Tool::execute`] | on a worker thread | that call gets an error result `the tool `name` panicked: ..` |
//!
//! (Built with `panic = "abort"`, a panic ends the process instead: nothing can catch it.)
//! - [`ToolContext::update`] publishes progress as a `ToolUpdate` event (emitted from the run
//!   thread, in the order the updates were made).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use serde::{Deserialize, Serialize};

use crate::cancel::CancelToken;
use crate::llm::ToolDefinition;

mod typed;

pub use typed::{TypedTool, typed};

/// A tool the model can call.
///
/// Every method may be called from the run thread or a worker thread of the run, never under
/// a lock of the agent; see the [module docs](self) for the contract and for what a panic in
/// each method does (in short: never a crash, and never a call without its result).
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;

    /// What it does, written for the model.
    fn description(&self) -> &str;

    /// JSON Schema of the arguments object.
    fn parameters(&self) -> serde_json::Value;

    /// Runs the tool. See the [module docs](self) for the contract.
    ///
    /// # Errors
    /// A [`ToolError`] becomes an error result the model sees; the run goes on.
    fn execute(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;

    /// True when this tool must not run beside others: a reply that calls it runs all its
    /// calls one after another. Defaults to false.
    fn sequential(&self) -> bool {
        false
    }

    /// Checks the arguments before `execute`; `Err` becomes an error result that tells the
    /// model what was wrong, and `execute` is not called. Defaults to accepting everything.
    ///
    /// # Errors
    /// A message for the model naming what is wrong with the arguments.
    fn validate(&self, args: &serde_json::Value) -> Result<(), String> {
        let _ = args;
        Ok(())
    }

    /// The definition sent to the model.
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: self.parameters(),
        }
    }
}

impl<T: Tool + ?Sized> Tool for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn description(&self) -> &str {
        (**self).description()
    }
    fn parameters(&self) -> serde_json::Value {
        (**self).parameters()
    }
    fn execute(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        (**self).execute(args, ctx)
    }
    fn sequential(&self) -> bool {
        (**self).sequential()
    }
    fn validate(&self, args: &serde_json::Value) -> Result<(), String> {
        (**self).validate(args)
    }
    fn definition(&self) -> ToolDefinition {
        (**self).definition()
    }
}

/// What a tool returns: text for the model and optional structured details for programs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolOutput {
    /// The text the model sees.
    pub content: String,
    /// Data for programs and UIs (not sent to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ToolOutput {
    /// Output with this text.
    pub fn text(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            details: None,
        }
    }

    /// Adds structured details.
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> ToolOutput {
        self.details = Some(details);
        self
    }
}

impl From<String> for ToolOutput {
    fn from(s: String) -> ToolOutput {
        ToolOutput::text(s)
    }
}

impl From<&str> for ToolOutput {
    fn from(s: &str) -> ToolOutput {
        ToolOutput::text(s)
    }
}

/// A tool's failure; the message goes to the model as an error result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolError(pub String);

impl ToolError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> ToolError {
        ToolError(message.into())
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ToolError {}

impl From<String> for ToolError {
    fn from(s: String) -> ToolError {
        ToolError(s)
    }
}

impl From<&str> for ToolError {
    fn from(s: &str) -> ToolError {
        ToolError(s.to_owned())
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> ToolError {
        ToolError(e.to_string())
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(e: serde_json::Error) -> ToolError {
        ToolError(e.to_string())
    }
}

/// What a running tool gets besides its arguments.
pub struct ToolContext {
    call_id: String,
    cancel: CancelToken,
    updates: Option<Sender<ToolMsg>>,
}

/// What a tool worker tells the run thread.
pub(crate) enum ToolMsg {
    Update {
        call_id: String,
        output: ToolOutput,
    },
    Done {
        index: usize,
        outcome: Result<ToolOutput, ToolError>,
    },
}

impl ToolContext {
    pub(crate) fn new(
        call_id: String,
        cancel: CancelToken,
        updates: Option<Sender<ToolMsg>>,
    ) -> ToolContext {
        ToolContext {
            call_id,
            cancel,
            updates,
        }
    }

    /// A context for calling a tool directly, outside an agent (in a test, say): updates go
    /// nowhere, and the token is never cancelled unless you cancel it.
    pub fn detached(cancel: CancelToken) -> ToolContext {
        ToolContext::new(String::new(), cancel, None)
    }

    /// The id of the call being run.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The run's cancel token: cancelled by `abort()`.
    pub fn cancel(&self) -> &CancelToken {
        &self.cancel
    }

    /// True once the run was aborted.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Sleeps for `d` or until the run is aborted. Returns true when aborted.
    pub fn sleep(&self, d: Duration) -> bool {
        self.cancel.wait_timeout(d)
    }

    /// Publishes progress: the agent emits a `ToolUpdate` event with it. Does not block.
    pub fn update(&self, partial: impl Into<ToolOutput>) {
        if let Some(tx) = &self.updates {
            // The run thread may already be gone only after the tool returned; ignore then.
            let _ = tx.send(ToolMsg::Update {
                call_id: self.call_id.clone(),
                output: partial.into(),
            });
        }
    }
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("call_id", &self.call_id)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}
