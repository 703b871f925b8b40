//! The events of a run and why a run stops.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::context::{CompactionReason, ContextUsage};
use crate::elicit::{Elicitation, ElicitationAnswer};
use crate::kind::ErrorInfo;
use crate::message::{Message, ToolCall, ToolResultMessage, Usage};
use crate::output::OutputCheck;
use crate::partial::PartialMessage;
use crate::types::{StreamEvent, ToolOutput};

/// One step of a run. Every run emits them in this order:
///
/// ```text
/// AgentStart
///   TurnStart { turn }
///     MessageStart / MessageEnd                     the prompt (and steering messages)
///     CompactionStart / (MessageStart / MessageEnd)? / CompactionEnd   when the context is compacted
///     MessageStart / MessageUpdate* / MessageEnd    the assistant reply, streamed
///     ToolStart / ToolExecute? / ToolUpdate* / ToolEnd   each tool call of that reply
///       (ElicitationStart / ElicitationEnd)*        a question the call asks the user, inside
///                                                   its ToolExecute..ToolEnd, among its updates
///     MessageStart / MessageEnd                     each tool result message, in call order
///     OutputChecked?                                the structured answer, checked
///   TurnEnd { turn, message, tool_results, stop_reason, context }
///   ... the next TurnStart while the model keeps calling tools ...
/// AgentEnd { messages, stop_reason, usage, error }
/// ```
///
/// Between runs, [`crate::Agent::reset`] and [`crate::Agent::replace_messages`] emit
/// `MessagesReplaced`, the one event outside a run.
///
/// Each event is folded into the agent's [`crate::State`] before any listener sees it.
///
/// An event has one JSON shape, the wire's: [`crate::wire::encode_event_line`] writes it as a
/// JSON-RPC notification line (`{"jsonrpc":"2.0","method":"MessageUpdate","params":{..}}`) and
/// [`crate::wire::decode_event_line`] (or a [`crate::wire::Decoder`]) reads it back. The type
/// does not implement serde's traits, so no second shape exists beside it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AgentEvent {
    /// A run begins.
    AgentStart,
    /// A turn begins: one model call and the tools it asks for. `turn` counts from 1 within
    /// the run.
    TurnStart {
        /// The turn number, from 1.
        turn: u32,
    },
    /// A message begins. For the assistant reply it is empty and the reply streams in
    /// `MessageUpdate`s; user and tool-result messages arrive whole.
    MessageStart {
        /// The message (an empty assistant message for a reply about to stream).
        message: Arc<Message>,
    },
    /// A piece of the assistant reply arrived.
    MessageUpdate {
        /// The reply assembled so far, this delta included (shared, O(1) to clone).
        message: PartialMessage,
        /// What arrived.
        delta: StreamEvent,
    },
    /// A message is complete and appended to the transcript.
    MessageEnd {
        /// The finished message.
        message: Arc<Message>,
    },
    /// Before this turn's model call, the context is compacted ([`crate::context::Compaction`],
    /// or an overflow): the model is asked for a summary of the oldest part of what is sent.
    /// Follows the turn's input messages; the summary message (a user message marked with a
    /// [`Summary`](crate::context::Summary)) then comes as a `MessageStart` / `MessageEnd`,
    /// unless the compaction fails, and `CompactionEnd` closes it.
    CompactionStart {
        /// Why it runs.
        reason: CompactionReason,
        /// How many messages of the transcript the summary is written from (an earlier
        /// summary counts as one).
        messages: u64,
        /// The context before the compaction.
        context: ContextUsage,
    },
    /// A compaction ended: its summary message was appended (just before this event), or
    /// it failed and nothing changed.
    CompactionEnd {
        /// Why it ran.
        reason: CompactionReason,
        /// The context after it: what the next request sends.
        context: ContextUsage,
        /// The usage of the summary's model calls (counted in the run's and the agent's
        /// usage).
        usage: Usage,
        /// What went wrong, when it failed: the run goes on without it.
        error: Option<ErrorInfo>,
    },
    /// A tool call starts: the model's call, its arguments final as the model wrote them
    /// (raw JSON text). Emitted before the call is checked: the tool is looked up, the
    /// arguments parsed and validated and `before_tool_call` asked after it, so an approval
    /// UI sees the call (in `State::pending_tool_calls`) while the hook waits.
    ToolStart {
        /// The call, as the model made it.
        call: ToolCall,
        /// When the call started, on the agent's clock (a UI shows how long it has been
        /// running); `None` from a source that does not say (a wire line of a pagent
        /// dialect).
        at: Option<SystemTime>,
    },
    /// The tool of a call runs now, with these arguments: the call passed validation and
    /// `before_tool_call` allowed it (or rewrote its arguments, which were then validated
    /// again). Follows the call's `ToolStart` (right after it, unless `before_tool_call`
    /// waited while other calls of the batch published their progress) and precedes its
    /// `ToolUpdate`s and `ToolEnd`. A call that does not run (unknown tool, invalid
    /// arguments, blocked, cancelled, skipped) has none: its `ToolEnd` says why.
    ToolExecute {
        /// The id of the call.
        call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The arguments the tool's `execute` gets: the model's, parsed and validated, or
        /// those `before_tool_call` put in their place.
        arguments: serde_json::Value,
        /// True when `before_tool_call` rewrote the arguments
        /// ([`ToolDecision::Rewrite`](crate::hooks::ToolDecision::Rewrite)); the model's own
        /// are in the call of the `ToolStart`.
        rewritten: bool,
    },
    /// A running tool published progress.
    ToolUpdate {
        /// The id of the call.
        call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The progress the tool published.
        partial: ToolOutput,
    },
    /// A running tool call asks the user a question (an MCP server's elicitation, in a form
    /// or at a URL) and waits for the answer. Comes after the call's `ToolExecute` and
    /// before its `ToolEnd`, in order with its `ToolUpdate`s, and is always followed by the
    /// matching `ElicitationEnd` before that `ToolEnd` (also when the run is aborted while it
    /// waits). `State::elicitations` lists the question until then, so a UI polling
    /// snapshots shows the form. Answer it with
    /// [`AgentHandle::answer_elicitation`](crate::AgentHandle::answer_elicitation) (or the
    /// wire server's `elicitation/answer`), unless a hook of the program answers it (see
    /// `mcp::ClientBuilder::on_elicitation` (feature `mcp`)). A call
    /// may ask several questions, one after another.
    ElicitationStart {
        /// The question's id, unique in the process (`"elicitation-7"`): what an answer
        /// names.
        id: String,
        /// The id of the tool call that asks.
        tool_call_id: String,
        /// The question (shared with the state).
        request: Arc<Elicitation>,
    },
    /// The question `id` was answered, or given up: `answer` is what the asker was told, a
    /// form's values completed with its defaults and checked against its schema (an answer
    /// that did not fit was refused, see `answer_elicitation`, or, from a hook, sent as
    /// `Cancel`), `Cancel` when the run was aborted or the call gave up while it waited.
    ElicitationEnd {
        /// The question's id.
        id: String,
        /// The id of the tool call that asked.
        tool_call_id: String,
        /// The answer as it was given to the asker.
        answer: ElicitationAnswer,
    },
    /// A tool call ended; `result` is the message the model will see.
    ToolEnd {
        /// The result.
        result: Arc<ToolResultMessage>,
        /// How long the call took, from its `ToolStart` to this event (measured on a
        /// monotonic clock); `None` from a source that does not say.
        duration: Option<Duration>,
    },
    /// A run with an [`OutputSchema`](crate::OutputSchema) checked the structured answer of
    /// this turn: the reply's text, parsed and checked against the schema. Comes when the
    /// run would otherwise stop (the model answered without calling tools, or the final
    /// answer turn ended), after the reply's `MessageEnd` (and the results of calls that did
    /// not run) and before the turn's `TurnEnd`. A valid answer ends the run (its value is in
    /// [`RunResult::output`](crate::RunResult::output)); an invalid one is followed by a
    /// repair turn, whose user message says what was wrong, until the repairs are spent and
    /// the run fails with [`Error::InvalidOutput`](crate::Error::InvalidOutput) (see
    /// [`AgentBuilder::output_repairs`](crate::AgentBuilder::output_repairs)). The state
    /// keeps the latest in `State::output`.
    OutputChecked {
        /// The turn number, from 1.
        turn: u32,
        /// The answer, and its value or what is wrong with it (shared with the state).
        check: Arc<OutputCheck>,
    },
    /// A turn ended.
    TurnEnd {
        /// The turn number, from 1.
        turn: u32,
        /// The assistant reply of this turn.
        message: Arc<Message>,
        /// The tool results of this turn, in call order.
        tool_results: Vec<Arc<ToolResultMessage>>,
        /// `Continuing` when another turn follows; otherwise why the run stops.
        stop_reason: RunStopReason,
        /// How full the context is now: what the next request would send, this turn's
        /// reply and tool results included (see [`ContextUsage`]).
        context: ContextUsage,
    },
    /// Between runs, the transcript was replaced ([`crate::Agent::replace_messages`]) or
    /// emptied ([`crate::Agent::reset`]). The state then holds these messages, and forgets
    /// what the last run left (`error_message`, `error_kind`, `stop_reason`, `turn`,
    /// `run_usage`, `tool_results`, `output`): it no longer describes this transcript. Never
    /// emitted while a run is active, nor between a run's `AgentStart` and its `AgentEnd`.
    MessagesReplaced {
        /// The whole new transcript, oldest first (empty after a reset).
        messages: Vec<Arc<Message>>,
    },
    /// The run ended. Emitted exactly once per run, whatever failed.
    AgentEnd {
        /// Every message this run appended, in order.
        messages: Vec<Arc<Message>>,
        /// Why the run stopped.
        stop_reason: RunStopReason,
        /// Usage summed over the run's replies.
        usage: Usage,
        /// What went wrong, when `stop_reason` is `Error`: the kind and the message of the
        /// error the run returned. `None` for a run that ended as asked.
        error: Option<ErrorInfo>,
    },
}

impl AgentEvent {
    /// The event's name as the wire writes it (`"MessageUpdate"`).
    pub fn name(&self) -> &'static str {
        match self {
            AgentEvent::AgentStart => "AgentStart",
            AgentEvent::TurnStart { .. } => "TurnStart",
            AgentEvent::MessageStart { .. } => "MessageStart",
            AgentEvent::MessageUpdate { .. } => "MessageUpdate",
            AgentEvent::MessageEnd { .. } => "MessageEnd",
            AgentEvent::CompactionStart { .. } => "CompactionStart",
            AgentEvent::CompactionEnd { .. } => "CompactionEnd",
            AgentEvent::ToolStart { .. } => "ToolStart",
            AgentEvent::ToolExecute { .. } => "ToolExecute",
            AgentEvent::ToolUpdate { .. } => "ToolUpdate",
            AgentEvent::ElicitationStart { .. } => "ElicitationStart",
            AgentEvent::ElicitationEnd { .. } => "ElicitationEnd",
            AgentEvent::ToolEnd { .. } => "ToolEnd",
            AgentEvent::OutputChecked { .. } => "OutputChecked",
            AgentEvent::TurnEnd { .. } => "TurnEnd",
            AgentEvent::MessagesReplaced { .. } => "MessagesReplaced",
            AgentEvent::AgentEnd { .. } => "AgentEnd",
        }
    }
}

/// Why a turn or a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunStopReason {
    /// Another turn follows (on `TurnEnd` only).
    Continuing,
    /// The model answered without calling a tool.
    NoToolCalls,
    /// The model's reply had no text, no reasoning and no tool call.
    EmptyResponse,
    /// The run reached `max_turns` (see [`AgentBuilder::max_turns`](crate::AgentBuilder::max_turns)
    /// and [`FinalTurn`](crate::FinalTurn)): the final answer turn still called tools (those
    /// calls were not run; their results say so), or, with `FinalTurn::Off`, the last allowed
    /// turn's tools ran and no answer followed, or a steering or follow-up message waits
    /// after the last allowed turn answered.
    MaxTurns,
    /// `abort()` ended the run.
    Cancelled,
    /// The run failed: a provider error, a timeout, a reply too large, a panic in code the
    /// run depends on. `prompt` returns it as a [`crate::RunError`]; `AgentEnd`'s `error` and
    /// the state's `error_kind` and `error_message` say what failed.
    Error,
}

impl RunStopReason {
    /// The snake_case name (`"no_tool_calls"`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStopReason::Continuing => "continuing",
            RunStopReason::NoToolCalls => "no_tool_calls",
            RunStopReason::EmptyResponse => "empty_response",
            RunStopReason::MaxTurns => "max_turns",
            RunStopReason::Cancelled => "cancelled",
            RunStopReason::Error => "error",
        }
    }
}

impl std::fmt::Display for RunStopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
