//! Hooks: callbacks that police and reshape a run, set on the builder.
//!
//! Every hook runs synchronously for the run, never while a lock of the agent is held, so a
//! hook may call `snapshot`, `steer`, `follow_up` and `abort` on a handle. Hooks run on the
//! run thread, with one exception: while other tool calls of the batch are running,
//! `before_tool_call` runs on a helper thread and the run thread goes on publishing those
//! calls' progress and ends (so an approval prompt never holds back finished results). It
//! may then overlap with `after_tool_call` and listeners; hooks are `Send + Sync` for that.
//!
//! | hook | when | a panic |
//! | --- | --- | --- |
//! | `before_turn` | before each model call, the first included | ends the run with `Error` ([`Error::Panic`](crate::Error::Panic)) |
//! | `transform_context` | building each request | ends the run with `Error` ([`Error::Panic`](crate::Error::Panic)) |
//! | `before_tool_call` | before each call runs, one call at a time in call order, after its `ToolStart`, before its `ToolExecute` | error result for that call |
//! | `after_tool_call` | after each call whose tool ran, before its `ToolEnd` | error result for that call |
//!
//! A hook ended by a panic never leaves the run half-done: `AgentEnd` still comes, and every
//! tool call still gets exactly one result. A hook that ends the run does so before the
//! model call, with an error reply in the transcript (`MessageEnd` of an assistant message
//! with `StopReason::Error`, then `TurnEnd` and `AgentEnd` with `Error`).
//!
//! The messages `transform_context` returns are repaired before they are sent: a tool call
//! left without a result (a result the hook pruned, say) gets a synthesized error result
//! right after the results it has, so the request is always valid for the provider.

use std::fmt;
use std::sync::Arc;

use crossbeam_channel::Receiver;

use super::builder::debug_name;
use crate::cancel::CancelToken;
use crate::llm::ThinkingLevel;
use crate::message::{Message, ToolCall, ToolResultMessage};
use crate::tool::Tool;

/// What `before_tool_call` decides about one call. An abort while the hook ran overrides
/// the decision: the call gets a "cancelled" result.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ToolDecision {
    /// Run the call as the model asked.
    Allow,
    /// Do not run it; the model gets an error result with this reason.
    Block(String),
    /// Run it with these arguments instead.
    Rewrite(serde_json::Value),
}

/// What `before_tool_call` sees of one call.
#[derive(Debug)]
pub struct ToolCallRequest<'a> {
    /// The call as the model made it.
    pub call: &'a ToolCall,
    /// Its arguments, parsed.
    pub args: &'a serde_json::Value,
    cancel: &'a CancelToken,
}

impl<'a> ToolCallRequest<'a> {
    pub(crate) fn new(
        call: &'a ToolCall,
        args: &'a serde_json::Value,
        cancel: &'a CancelToken,
    ) -> ToolCallRequest<'a> {
        ToolCallRequest { call, args, cancel }
    }

    /// The run's cancel token.
    pub fn cancel(&self) -> &CancelToken {
        self.cancel
    }

    /// Blocks until `answers` yields a value or the run is aborted (or reaches its
    /// `run_timeout`), whichever comes first; `None` when aborted or timed out (or when the
    /// sender is gone). This is how an approval prompt waits
    /// for a human without keeping `abort()` from ending the run.
    ///
    /// ```
    /// use pagent::hooks::ToolDecision;
    /// use pagent::llm::{Faux, FauxReply};
    /// use pagent::{Agent, RunStopReason, ToolOutput, tool};
    /// use pagent::crossbeam_channel;
    /// # use pagent::schemars::{self, JsonSchema};
    /// # #[derive(serde::Deserialize, JsonSchema)] struct Path { path: String }
    ///
    /// // The approval UI (another thread) answers through this channel.
    /// let (approve, answers) = crossbeam_channel::bounded::<bool>(1);
    /// let rm = tool::typed("rm", "Removes a file.", |_: Path, _| Ok(ToolOutput::text("gone")));
    /// let faux = Faux::default()
    ///     .reply(FauxReply::tool_call("rm", serde_json::json!({"path": "/tmp/x"})))
    ///     .reply(FauxReply::text("Not removed."));
    /// let agent = Agent::builder()
    ///     .provider(faux)
    ///     .tool(rm)
    ///     .before_tool_call(move |req| match req.wait_for(&answers) {
    ///         Some(true) => ToolDecision::Allow,
    ///         _ => ToolDecision::Block("the user said no".into()),
    ///     })
    ///     .build()?;
    /// approve.send(false).unwrap();
    /// let result = agent.prompt("Clean up")?;
    /// assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    /// assert_eq!(result.messages[2].text(), "blocked: the user said no");
    /// # Ok::<(), pagent::Error>(())
    /// ```
    pub fn wait_for<T>(&self, answers: &Receiver<T>) -> Option<T> {
        crossbeam_channel::select! {
            recv(answers) -> v => v.ok(),
            recv(self.cancel.receiver()) -> _ => None,
            // The run deadline (`run_timeout`): cancels the run's token for everyone.
            recv(self.cancel.timer()) -> _ => {
                self.cancel.is_cancelled();
                None
            }
        }
    }
}

/// What `before_turn` may change for the next model call. A change stays for the rest of the
/// run and after it (it becomes the agent's setting, as with `Agent::set_model`).
#[non_exhaustive]
pub struct TurnSetup {
    /// The turn about to start, from 1.
    pub turn: u32,
    /// The model id of the next request.
    pub model: String,
    /// The thinking level of the next request.
    pub thinking: ThinkingLevel,
    /// The tools offered in the next request.
    pub tools: Vec<Arc<dyn Tool>>,
}

impl fmt::Debug for TurnSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnSetup")
            .field("turn", &self.turn)
            .field("model", &self.model)
            .field("thinking", &self.thinking)
            .field(
                "tools",
                &self.tools.iter().map(debug_name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

pub(crate) type BeforeToolCall = dyn Fn(&ToolCallRequest<'_>) -> ToolDecision + Send + Sync;
pub(crate) type AfterToolCall =
    dyn Fn(&ToolCall, ToolResultMessage) -> ToolResultMessage + Send + Sync;
pub(crate) type TransformContext = dyn Fn(Vec<Arc<Message>>) -> Vec<Arc<Message>> + Send + Sync;
pub(crate) type BeforeTurn = dyn Fn(&mut TurnSetup) + Send + Sync;

/// The hooks of an agent.
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) before_tool_call: Option<Arc<BeforeToolCall>>,
    pub(crate) after_tool_call: Option<Arc<AfterToolCall>>,
    pub(crate) transform_context: Option<Arc<TransformContext>>,
    pub(crate) before_turn: Option<Arc<BeforeTurn>>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("before_tool_call", &self.before_tool_call.is_some())
            .field("after_tool_call", &self.after_tool_call.is_some())
            .field("transform_context", &self.transform_context.is_some())
            .field("before_turn", &self.before_turn.is_some())
            .finish()
    }
}
