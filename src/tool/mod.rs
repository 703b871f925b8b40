//! Tools the model can call: the [`Tool`] trait, its output and context, and typed tools.
//!
//! # Contract
//! - [`Tool::execute`] is called with the parsed JSON arguments, never while a lock of the
//!   agent is held. The tool calls of one reply run in parallel, each on a worker thread of
//!   the run, unless a tool is sequential. Calls that run one at a time (a reply with a
//!   single call, or a sequential batch) run on the run thread itself, with no thread to
//!   start; with a run deadline (`AgentBuilder::run_timeout`) they run on a worker thread
//!   all the same, so that the run thread can cancel the token at the deadline while the
//!   tool waits.
//! - It blocks its thread until it returns. Long tools should check [`ToolContext::cancel`]
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
//! | [`Tool::execute`] | on the run thread or a worker thread (see above) | that call gets an error result `the tool `name` panicked: ..` |
//!
//! (Built with `panic = "abort"`, a panic ends the process instead: nothing can catch it.)
//! - [`ToolContext::update`] publishes progress as a `ToolUpdate` event (emitted from the run
//!   thread, in the order the updates were made; see its docs for when).

use std::fmt;
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Duration;

use parking_lot::Mutex;

use crate::cancel::CancelToken;
use crate::event::AgentEvent;
use crate::types::ToolDefinition;
pub use crate::types::ToolOutput;

pub(crate) mod ask;
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

/// A tool's failure; the message goes to the model as an error result.
///
/// Any error converts into it, so `?` works inside [`Tool::execute`] on a `ParseIntError`, an
/// `io::Error`, a `serde_json::Error` or your own error type (anything that converts into
/// `Box<dyn std::error::Error + Send + Sync>`), and on a `String` or `&str` message. The
/// message is the error's `Display`.
///
/// `ToolError` itself does not implement [`std::error::Error`]: that is what lets every error
/// convert into it (the same choice as `anyhow::Error`). Its message is the public field, and
/// it implements `Display`.
///
/// ```
/// use pagent::ToolError;
///
/// fn parse(text: &str) -> Result<i64, ToolError> {
///     Ok(text.trim().parse::<i64>()?)
/// }
/// assert_eq!(parse(" 42 "), Ok(42));
/// assert_eq!(parse("x").unwrap_err().0, "invalid digit found in string");
/// let refused: ToolError = "not allowed".into();
/// assert_eq!(refused.to_string(), "not allowed");
/// ```
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

/// Every error, and a `String` or `&str` message: `Box<dyn Error + Send + Sync>` converts from
/// all of them, and its `Display` is the message.
impl<E> From<E> for ToolError
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn from(e: E) -> ToolError {
        ToolError(e.into().to_string())
    }
}

/// What a running tool gets besides its arguments.
pub struct ToolContext {
    // Shared with the call's updates and questions: one copy of the id per call.
    call_id: Arc<str>,
    cancel: CancelToken,
    updates: Updates,
    // How the call asks the user a question (elicitation) as an event of the run; none for
    // a detached context.
    asker: Option<ask::Asker>,
}

/// Where the updates of a running tool go.
pub(crate) enum Updates {
    /// Nowhere: a detached context.
    Nowhere,
    /// Handed to a sink the agent built (it sends them over the batch's channel to the run
    /// thread): the tool runs on a worker thread.
    Sink(Box<dyn Fn(ToolOutput) + Send + Sync>),
    /// Published at once: the tool runs on the run thread itself.
    Direct(Direct),
}

/// The updates of a tool that runs on the run thread: published by `emit` (the run's, which
/// publishes an event) as `ToolUpdate` events of `tool_name` from that thread as they are
/// made. An update made from another thread (one the tool started) cannot be published from
/// there, as events come only from the run thread: it waits in `later` until the tool makes
/// an update from the run thread or returns.
///
/// `emit` is shared by every call of the run, so a call that makes no update costs no
/// allocation for them.
pub(crate) struct Direct {
    run_thread: ThreadId,
    emit: Emit,
    tool_name: String,
    later: Mutex<Vec<ToolOutput>>,
}

/// How a call run on the run thread publishes an event of its own (an update, a question):
/// the run's, one for all its calls.
pub(crate) type Emit = Arc<dyn Fn(AgentEvent) + Send + Sync>;

impl Updates {
    /// Updates published at once through `emit` as `ToolUpdate` events of `tool_name`, from
    /// the calling (run) thread.
    pub(crate) fn direct(emit: Emit, tool_name: String) -> Updates {
        Updates::Direct(Direct {
            run_thread: std::thread::current().id(),
            emit,
            tool_name,
            later: Mutex::new(Vec::new()),
        })
    }
}

impl Direct {
    fn publish(&self, call_id: &str, output: ToolOutput) {
        (self.emit)(AgentEvent::ToolUpdate {
            call_id: call_id.to_owned(),
            tool_name: self.tool_name.clone(),
            partial: output,
        });
    }

    /// Publishes the updates made from other threads, in the order they were made. Never
    /// under the lock: publishing runs the listeners.
    fn publish_later(&self, call_id: &str) {
        let later = std::mem::take(&mut *self.later.lock());
        for output in later {
            self.publish(call_id, output);
        }
    }
}

impl ToolContext {
    pub(crate) fn new(call_id: Arc<str>, cancel: CancelToken, updates: Updates) -> ToolContext {
        ToolContext {
            call_id,
            cancel,
            updates,
            asker: None,
        }
    }

    /// The context with the call's way to ask the user.
    pub(crate) fn with_asker(mut self, asker: ask::Asker) -> ToolContext {
        self.asker = Some(asker);
        self
    }

    pub(crate) fn asker(&self) -> Option<&ask::Asker> {
        self.asker.as_ref()
    }

    /// A context for calling a tool directly, outside an agent (in a test, say): updates go
    /// nowhere, and the token is never cancelled unless you cancel it.
    pub fn detached(cancel: CancelToken) -> ToolContext {
        ToolContext::new(Arc::from(""), cancel, Updates::Nowhere)
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

    /// Publishes progress: the agent emits a `ToolUpdate` event with it, from the run thread.
    ///
    /// When the tool runs on the run thread (see the [module docs](self)), the event is
    /// folded into the state and handed to the listeners within this call, so it returns
    /// once they are done: do not hold a lock that a listener takes while calling it. An
    /// update made there from another thread (one the tool started) is published when the
    /// tool next makes an update from the run thread, or when it returns. When the tool
    /// runs on a worker thread, this never blocks, and the run thread publishes the update
    /// at once.
    pub fn update(&self, partial: impl Into<ToolOutput>) {
        match &self.updates {
            Updates::Nowhere => {}
            Updates::Sink(send) => send(partial.into()),
            Updates::Direct(direct) => {
                let output = partial.into();
                if std::thread::current().id() == direct.run_thread {
                    direct.publish_later(&self.call_id);
                    direct.publish(&self.call_id, output);
                } else {
                    direct.later.lock().push(output);
                }
            }
        }
    }

    /// Asks the user `question` and waits for the answer: the run publishes an
    /// [`AgentEvent::ElicitationStart`] (listed in
    /// [`State::elicitations`](crate::State::elicitations)) and, once it is answered
    /// ([`AgentHandle::answer_elicitation`](crate::AgentHandle::answer_elicitation): a UI, the
    /// wire server's client, an ACP client) or given up, its `ElicitationEnd`, both before
    /// this call's `ToolEnd`. A form's values come completed with the schema's defaults and
    /// checked against it; for a URL, `Accept` carries `Null`.
    ///
    /// Blocks until the answer comes or the run is aborted (then the answer is
    /// [`ElicitationAnswer::Cancel`](crate::ElicitationAnswer::Cancel)). Returns `Cancel` at
    /// once, asking nobody, from a [detached](ToolContext::detached) context, for a form
    /// whose schema is no elicitation form (flat, of strings, numbers, integers, booleans and
    /// lists of choices), and, for a tool run on the run thread, from any other thread.
    pub fn elicit(&self, question: crate::Elicitation) -> crate::ElicitationAnswer {
        let form_ok = match &question.mode {
            crate::ElicitationMode::Form { schema } => crate::elicit::check_form(schema).is_ok(),
            crate::ElicitationMode::Url { .. } => true,
        };
        match self.asker() {
            Some(asker) if form_ok && asker.may_ask() => asker.ask(question, None, &self.cancel),
            _ => crate::ElicitationAnswer::Cancel,
        }
    }

    /// Publishes what is still waiting to be published: updates of a tool that runs on the
    /// run thread made from other threads. Called on the run thread once the tool returned.
    pub(crate) fn publish_pending(&self) {
        if let Updates::Direct(direct) = &self.updates {
            direct.publish_later(&self.call_id);
        }
    }

    /// Gives back the tool name the updates of a call run on the run thread carried, once
    /// the call is over (its result carries it next).
    pub(crate) fn into_tool_name(self) -> Option<String> {
        match self.updates {
            Updates::Direct(direct) => Some(direct.tool_name),
            _ => None,
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
