//! Reading the two `pagent` dialects: pagent v1 and v4 lines mapped onto our events.
//!
//! pagent's wire carries less than ours: no message starts, no ids but the tool calls', no
//! model, no per-turn list of results, and a `TurnEnd` (v1) that says only whether the run
//! stopped. The reader keeps the context of the run it reads (the prompt waiting for its
//! first turn, the reply streaming, the turn's calls and results, the run's messages and
//! usage) and synthesizes what our events need from it, deterministically. See the [wire
//! docs](super#reading-pagent-lines) for the mapping.

use crate::context::ContextUsage;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Dialect;
use crate::Error;
use crate::event::{AgentEvent, RunStopReason};
use crate::kind::{ErrorInfo, ErrorKind};
use crate::llm::StreamEvent;
use crate::message::{
    AssistantMessage, ContentBlock, Message, StopReason, ToolCall, ToolResultMessage, Usage,
};
use crate::partial::PartialMessage;

/// Every method of the pagent dialects: v1's, then v4's `TurnResult`.
pub(crate) const PAGENT_METHODS: [&str; 10] = [
    "RunBegin",
    "TurnBegin",
    "TextDelta",
    "ReasoningDelta",
    "StepEnd",
    "ToolCallBegin",
    "ToolResult",
    "TurnEnd",
    "RunEnd",
    "TurnResult",
];

/// The message of the error a run gets when its pagent stream breaks off.
pub(crate) const BROKE_OFF: &str =
    "the pagent run ended without its RunEnd: pagent's stream breaks off when the run fails";

/// Which pagent wire a stream speaks, as far as the reader knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V4,
}

/// One pagent line, checked and typed; applying it cannot fail.
enum Line {
    RunBegin {
        user_input: String,
    },
    TurnBegin {
        turn: u32,
    },
    Delta(StreamEvent),
    /// v1 `StepEnd`, v4 `TurnResult`: a reply is complete.
    Reply {
        content: String,
        tool_calls: Vec<ToolCall>,
        reasoning_content: String,
        usage: Usage,
    },
    ToolCallBegin(ToolCall),
    ToolResult(Arc<ToolResultMessage>),
    /// `stop_reason`: v4's; `None` in v1, where `stopped` is all there is.
    TurnEnd {
        turn: u32,
        stopped: bool,
        stop_reason: Option<RunStopReason>,
    },
    /// `stop_reason`: v4's; `None` in v1, whose `RunEnd` repeats the last reply.
    RunEnd {
        stop_reason: Option<RunStopReason>,
    },
}

/// The reader of one pagent stream.
#[derive(Clone, Debug)]
pub(crate) struct Reader {
    /// `None` while a detecting reader has seen no line that tells v1 from v4. Once known,
    /// lines of the other version are errors.
    version: Option<Version>,
    /// Between `RunBegin` and `RunEnd` (or a line that implies a run).
    in_run: bool,
    /// The prompt of `RunBegin`, waiting for the run's first turn.
    prompt: Option<String>,
    /// Our number (from 1) of the open turn.
    turn: Option<u32>,
    /// v1: the open turn ended `stopped: false`; the next line tells whether the run went on
    /// (`TurnBegin`) or stopped at `max_turns` (`RunEnd`).
    held_end: bool,
    /// pagent's number of the last turn that ended in this run, and how.
    last_end: Option<(u32, RunStopReason)>,
    /// The reply streaming now.
    partial: Option<PartialMessage>,
    /// The open turn's reply, once complete.
    reply: Option<Arc<Message>>,
    /// The open turn's tool results, in the order they ended, each with whether its message
    /// is in the transcript already.
    results: Vec<(Arc<ToolResultMessage>, bool)>,
    /// Every message this run appended, and its usage.
    messages: Vec<Arc<Message>>,
    usage: Usage,
}

impl Reader {
    /// A reader of `dialect` (a pagent one), or a detecting one (`None`).
    pub(crate) fn new(dialect: Option<Dialect>) -> Reader {
        let version = match dialect {
            Some(Dialect::PagentV1) => Some(Version::V1),
            Some(Dialect::PagentV4) => Some(Version::V4),
            _ => None,
        };
        Reader {
            version,
            in_run: false,
            prompt: None,
            turn: None,
            held_end: false,
            last_end: None,
            partial: None,
            reply: None,
            results: Vec::new(),
            messages: Vec::new(),
            usage: Usage::default(),
        }
    }

    /// The dialect, once known.
    pub(crate) fn dialect(&self) -> Option<Dialect> {
        self.version.map(|v| match v {
            Version::V1 => Dialect::PagentV1,
            Version::V4 => Dialect::PagentV4,
        })
    }

    /// The reply streaming now.
    pub(crate) fn partial(&self) -> Option<&PartialMessage> {
        self.partial.as_ref()
    }

    /// Decodes one line (its method and params) and appends the events it stands for to
    /// `out`. A line that does not decode leaves the reader as it was.
    pub(crate) fn decode(
        &mut self,
        method: &str,
        params: Value,
        out: &mut Vec<AgentEvent>,
    ) -> Result<(), Error> {
        let (line, version) = self.parse(method, params)?;
        if let Some(v) = version {
            self.version = Some(v);
        }
        self.apply(line, out);
        Ok(())
    }

    /// The end of the stream: a run still open broke off, which is how pagent's stream tells
    /// of a failed run. Appends the events that end it as failed.
    pub(crate) fn finish(&mut self, out: &mut Vec<AgentEvent>) {
        if self.in_run {
            self.fail_run(out);
        }
    }

    /// Checks `params` against `method` and types them; also says which version the line
    /// shows the stream to be, if it tells.
    fn parse(&self, method: &str, params: Value) -> Result<(Line, Option<Version>), Error> {
        let only = |v: Version| -> Result<Option<Version>, Error> {
            match self.version {
                Some(known) if known != v => Err(Error::Wire(format!(
                    "{method} is not a method of pagent {}",
                    if known == Version::V1 { "v1" } else { "v4" }
                ))),
                _ => Ok(Some(v)),
            }
        };
        Ok(match method {
            "RunBegin" => {
                let p: RunBeginParams = params_of(method, params)?;
                (
                    Line::RunBegin {
                        user_input: p.user_input,
                    },
                    None,
                )
            }
            "TurnBegin" => {
                let p: TurnParams = params_of(method, params)?;
                (Line::TurnBegin { turn: p.turn }, None)
            }
            "TextDelta" => {
                let p: TextParams = params_of(method, params)?;
                (Line::Delta(StreamEvent::TextDelta { text: p.text }), None)
            }
            "ReasoningDelta" => {
                let p: TextParams = params_of(method, params)?;
                (
                    Line::Delta(StreamEvent::ThinkingDelta { text: p.text }),
                    None,
                )
            }
            "StepEnd" => {
                let version = only(Version::V1)?;
                let p: StepEndParams = params_of(method, params)?;
                (p.into_line(), version)
            }
            "TurnResult" => {
                let version = only(Version::V4)?;
                let p: TurnResultParams = params_of(method, params)?;
                (p.into_line(), version)
            }
            "ToolCallBegin" => {
                let p: ToolCallBeginParams = params_of(method, params)?;
                let call = ToolCall::new(p.tool_call_id, p.name, p.arguments);
                (Line::ToolCallBegin(call), None)
            }
            "ToolResult" => {
                let p: ToolResultParams = params_of(method, params)?;
                let result =
                    ToolResultMessage::new(p.tool_call_id, p.name, p.content).with_is_error(!p.ok);
                (Line::ToolResult(Arc::new(result)), None)
            }
            "TurnEnd" => {
                // v4 writes `stop_reason`, v1 does not (and its decoder ignores one).
                let (turn, stopped, stop_reason, version) = if self.writes_v4(&params) {
                    let p: TurnEndV4Params = params_of(method, params)?;
                    let stop_reason = stop_reason(method, &p.stop_reason)?;
                    (p.turn, p.stopped, Some(stop_reason), Version::V4)
                } else {
                    let p: TurnEndV1Params = params_of(method, params)?;
                    (p.turn, p.stopped, None, Version::V1)
                };
                let line = Line::TurnEnd {
                    turn,
                    stopped,
                    stop_reason,
                };
                (line, Some(version))
            }
            "RunEnd" => {
                // v4: `{turn, stop_reason}`; v1: the fields of the last `StepEnd`.
                if self.writes_v4(&params) {
                    let p: RunEndV4Params = params_of(method, params)?;
                    let stop_reason = stop_reason(method, &p.stop_reason)?;
                    let _ = p.turn;
                    (
                        Line::RunEnd {
                            stop_reason: Some(stop_reason),
                        },
                        Some(Version::V4),
                    )
                } else {
                    let _: RunEndV1Params = params_of(method, params)?;
                    (Line::RunEnd { stop_reason: None }, Some(Version::V1))
                }
            }
            other => {
                return Err(Error::Wire(format!(
                    "unknown method `{other}`; the pagent methods are {}",
                    PAGENT_METHODS.join(", ")
                )));
            }
        })
    }

    /// Whether a `TurnEnd` or `RunEnd` line is v4's: the stream's version once known, else
    /// whether the line has a `stop_reason` (v4 writes one, v1 does not).
    fn writes_v4(&self, params: &Value) -> bool {
        match self.version {
            Some(v) => v == Version::V4,
            None => params.get("stop_reason").is_some(),
        }
    }

    fn apply(&mut self, line: Line, out: &mut Vec<AgentEvent>) {
        // Every line but `RunEnd` happens inside a run (a reader may join a stream mid-run).
        let run_end = matches!(line, Line::RunEnd { .. });
        if !run_end && !matches!(line, Line::RunBegin { .. }) {
            self.in_run = true;
        }
        // A v1 turn that ended `stopped: false` is ended by the line after it.
        if self.held_end {
            let stop = if run_end {
                RunStopReason::MaxTurns
            } else {
                RunStopReason::Continuing
            };
            self.held_end = false;
            self.close_turn(stop, out);
        }
        match line {
            Line::RunBegin { user_input } => {
                if self.in_run {
                    // The previous run has no `RunEnd`: it failed.
                    self.fail_run(out);
                }
                self.in_run = true;
                out.push(AgentEvent::AgentStart);
                self.prompt = Some(user_input);
            }
            Line::TurnBegin { turn } => {
                // pagent v4 writes no `TurnEnd` for the turn before a `max_turns` synthesis
                // turn: the turn ran its tools and the run went on.
                if self.turn.is_some() {
                    self.close_turn(RunStopReason::Continuing, out);
                }
                self.open_turn(turn.saturating_add(1), out);
            }
            Line::Delta(delta) => {
                self.first_turn(out);
                let partial = match self.partial.take() {
                    Some(p) => p,
                    None => {
                        out.push(AgentEvent::MessageStart {
                            message: empty_reply(),
                        });
                        PartialMessage::default()
                    }
                };
                let message = partial.apply(&delta);
                self.partial = Some(message.clone());
                out.push(AgentEvent::MessageUpdate { message, delta });
            }
            Line::Reply {
                content,
                tool_calls,
                reasoning_content,
                usage,
            } => {
                self.first_turn(out);
                if self.partial.take().is_none() {
                    out.push(AgentEvent::MessageStart {
                        message: empty_reply(),
                    });
                }
                let mut blocks = Vec::new();
                if !reasoning_content.is_empty() {
                    blocks.push(ContentBlock::thinking(reasoning_content));
                }
                if !content.is_empty() {
                    blocks.push(ContentBlock::text(content));
                }
                let stop = if tool_calls.is_empty() {
                    StopReason::Stop
                } else {
                    StopReason::ToolUse
                };
                blocks.extend(tool_calls.into_iter().map(ContentBlock::ToolCall));
                let reply = AssistantMessage::new(blocks, stop).with_usage(usage);
                let message = Arc::new(Message::Assistant(reply));
                self.append(message.clone(), out);
                self.reply = Some(message);
            }
            Line::ToolCallBegin(call) => {
                self.first_turn(out);
                self.end_streaming(StopReason::ToolUse, out);
                out.push(AgentEvent::ToolStart { call, at: None });
            }
            Line::ToolResult(result) => {
                self.first_turn(out);
                self.end_streaming(StopReason::ToolUse, out);
                out.push(AgentEvent::ToolEnd {
                    result: result.clone(),
                    duration: None,
                });
                self.results.push((result, false));
                // Once every call of the reply has its result, the result messages go into
                // the transcript, in call order, as ours do after a turn's tools.
                let calls = self.calls();
                if !calls.is_empty()
                    && calls
                        .iter()
                        .all(|c| self.results.iter().any(|(r, _)| r.tool_call_id == c.id))
                {
                    self.append_results(out);
                }
            }
            Line::TurnEnd {
                turn,
                stopped,
                stop_reason,
            } => {
                if self.turn.is_none() {
                    if self.last_end.is_some_and(|(t, _)| t == turn) {
                        // pagent v4 writes a second `TurnEnd` for a turn that ended
                        // `continuing` when the run is cancelled then: the run stops there,
                        // and its `RunEnd` says why.
                        if let Some(stop) = stop_reason {
                            self.last_end = Some((turn, stop));
                        }
                        return;
                    }
                    // A `TurnEnd` without its `TurnBegin` (pagent v4 cancelled right after
                    // `RunBegin`): the turn opens here.
                    self.open_turn(turn.saturating_add(1), out);
                }
                match stop_reason {
                    Some(stop) => self.close_turn(stop, out),
                    // v1: a turn stops exactly when its reply called no tools.
                    None if stopped => {
                        let empty = self
                            .reply
                            .as_deref()
                            .and_then(Message::as_assistant)
                            .is_none_or(AssistantMessage::is_empty);
                        let stop = if empty {
                            RunStopReason::EmptyResponse
                        } else {
                            RunStopReason::NoToolCalls
                        };
                        self.close_turn(stop, out);
                    }
                    None => self.held_end = true,
                }
            }
            Line::RunEnd { stop_reason } => {
                self.first_turn(out);
                let stop = match (stop_reason, self.last_end) {
                    (Some(stop), _) => stop,
                    (None, Some((_, stop))) => stop,
                    // A v1 `RunEnd` after no `TurnEnd` at all: the run had no turn to end.
                    (None, None) => RunStopReason::EmptyResponse,
                };
                if self.turn.is_some() {
                    self.close_turn(stop, out);
                }
                self.end_run(stop, None, out);
            }
        }
    }

    /// Opens turn `turn` (ours, from 1); the prompt of `RunBegin` goes in with the first.
    fn open_turn(&mut self, turn: u32, out: &mut Vec<AgentEvent>) {
        self.turn = Some(turn);
        self.reply = None;
        self.results.clear();
        out.push(AgentEvent::TurnStart { turn });
        if let Some(prompt) = self.prompt.take()
            && !prompt.is_empty()
        {
            let message = Arc::new(Message::user(prompt));
            out.push(AgentEvent::MessageStart {
                message: message.clone(),
            });
            self.messages.push(message.clone());
            out.push(AgentEvent::MessageEnd { message });
        }
    }

    /// A line of a turn right after `RunBegin`, with no `TurnBegin` between: the first turn
    /// opens.
    fn first_turn(&mut self, out: &mut Vec<AgentEvent>) {
        if self.turn.is_none() && self.prompt.is_some() {
            self.open_turn(1, out);
        }
    }

    /// Appends a finished message to the run and the transcript.
    fn append(&mut self, message: Arc<Message>, out: &mut Vec<AgentEvent>) {
        if let Message::Assistant(m) = &*message {
            self.usage += m.usage;
        }
        self.messages.push(message.clone());
        out.push(AgentEvent::MessageEnd { message });
    }

    /// Ends a reply that streamed without its summary line, as it stands.
    fn end_streaming(&mut self, stop: StopReason, out: &mut Vec<AgentEvent>) {
        if let Some(partial) = self.partial.take() {
            let mut reply = partial.to_message(stop);
            match stop {
                StopReason::Aborted => reply.error_message = Some(Error::Aborted.to_string()),
                StopReason::Error => reply.error_message = Some(BROKE_OFF.into()),
                _ => {}
            }
            let message = Arc::new(Message::Assistant(reply));
            self.append(message.clone(), out);
            self.reply = Some(message);
        }
    }

    /// The tool calls of the open turn's reply.
    fn calls(&self) -> Vec<ToolCall> {
        self.reply
            .as_deref()
            .and_then(Message::as_assistant)
            .map(|m| m.tool_calls().cloned().collect())
            .unwrap_or_default()
    }

    /// Sorts the turn's results into call order (those of calls the reply does not list
    /// last, in the order they ended).
    fn sort_results(&mut self) {
        let calls = self.calls();
        self.results.sort_by_key(|(r, _)| {
            calls
                .iter()
                .position(|c| c.id == r.tool_call_id)
                .unwrap_or(calls.len())
        });
    }

    /// Puts the result messages not yet in the transcript there, in call order.
    fn append_results(&mut self, out: &mut Vec<AgentEvent>) {
        self.sort_results();
        for (result, appended) in &mut self.results {
            if std::mem::replace(appended, true) {
                continue;
            }
            let message = Arc::new(Message::ToolResult((**result).clone()));
            out.push(AgentEvent::MessageStart {
                message: message.clone(),
            });
            self.messages.push(message.clone());
            out.push(AgentEvent::MessageEnd { message });
        }
    }

    /// Ends the open turn with `stop`.
    fn close_turn(&mut self, stop: RunStopReason, out: &mut Vec<AgentEvent>) {
        let Some(turn) = self.turn else {
            return;
        };
        let cut = match stop {
            RunStopReason::Cancelled => StopReason::Aborted,
            RunStopReason::Error => StopReason::Error,
            _ => StopReason::Stop,
        };
        self.end_streaming(cut, out);
        self.append_results(out);
        // A turn that ended before its reply has an empty one, which our `TurnEnd` needs;
        // it is not in the transcript (pagent's has no such message).
        let message = self.reply.take().unwrap_or_else(|| {
            let mut reply = AssistantMessage::new(Vec::new(), cut);
            match cut {
                StopReason::Aborted => reply.error_message = Some(Error::Aborted.to_string()),
                StopReason::Error => reply.error_message = Some(BROKE_OFF.into()),
                _ => {}
            }
            Arc::new(Message::Assistant(reply))
        });
        // pagent writes no context figures.
        let context = ContextUsage::default();
        out.push(AgentEvent::TurnEnd {
            turn,
            message,
            tool_results: self.results.drain(..).map(|(r, _)| r).collect(),
            stop_reason: stop,
            context,
        });
        self.turn = None;
        self.last_end = Some((turn - 1, stop));
    }

    /// The run broke off without its `RunEnd`: it failed.
    fn fail_run(&mut self, out: &mut Vec<AgentEvent>) {
        if self.held_end {
            self.held_end = false;
            self.close_turn(RunStopReason::Continuing, out);
        }
        self.first_turn(out);
        self.close_turn(RunStopReason::Error, out);
        let error = ErrorInfo::new(ErrorKind::Provider, BROKE_OFF);
        self.end_run(RunStopReason::Error, Some(error), out);
    }

    fn end_run(
        &mut self,
        stop: RunStopReason,
        error: Option<ErrorInfo>,
        out: &mut Vec<AgentEvent>,
    ) {
        out.push(AgentEvent::AgentEnd {
            messages: std::mem::take(&mut self.messages),
            stop_reason: stop,
            usage: std::mem::take(&mut self.usage),
            error,
        });
        self.in_run = false;
        self.prompt = None;
        self.turn = None;
        self.held_end = false;
        self.last_end = None;
        self.partial = None;
        self.reply = None;
        self.results.clear();
    }
}

/// The empty reply a synthesized `MessageStart` carries (pagent names no model).
fn empty_reply() -> Arc<Message> {
    Arc::new(Message::Assistant(AssistantMessage::default()))
}

fn params_of<T: DeserializeOwned>(method: &str, params: Value) -> Result<T, Error> {
    serde_json::from_value(params)
        .map_err(|e| Error::Wire(format!("invalid params of {method}: {e}")))
}

fn stop_reason(method: &str, name: &str) -> Result<RunStopReason, Error> {
    Ok(match name {
        "continuing" => RunStopReason::Continuing,
        "no_tool_calls" => RunStopReason::NoToolCalls,
        "empty_response" => RunStopReason::EmptyResponse,
        "max_turns" => RunStopReason::MaxTurns,
        "cancelled" => RunStopReason::Cancelled,
        other => {
            return Err(Error::Wire(format!(
                "invalid params of {method}: unknown stop_reason `{other}`; pagent's are \
                 continuing, no_tool_calls, empty_response, max_turns, cancelled"
            )));
        }
    })
}

#[derive(Deserialize)]
struct RunBeginParams {
    user_input: String,
}

#[derive(Deserialize)]
struct TurnParams {
    turn: u32,
}

#[derive(Deserialize)]
struct TextParams {
    text: String,
}

/// v1 `StepEnd`: pagent's dataclass gives only `usage` a default.
#[derive(Deserialize)]
struct StepEndParams {
    content: String,
    tool_calls: Vec<WireCall>,
    reasoning_content: String,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
}

/// v4 `TurnResult`: every field has a default.
#[derive(Deserialize)]
struct TurnResultParams {
    #[serde(default)]
    content: String,
    #[serde(default)]
    tool_calls: Vec<WireCall>,
    #[serde(default)]
    reasoning_content: String,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
}

impl StepEndParams {
    fn into_line(self) -> Line {
        reply_line(
            self.content,
            self.tool_calls,
            self.reasoning_content,
            self.usage,
        )
    }
}

impl TurnResultParams {
    fn into_line(self) -> Line {
        reply_line(
            self.content,
            self.tool_calls,
            self.reasoning_content,
            self.usage,
        )
    }
}

fn reply_line(
    content: String,
    calls: Vec<WireCall>,
    reasoning_content: String,
    usage: Option<OpenAiUsage>,
) -> Line {
    Line::Reply {
        content,
        tool_calls: calls.into_iter().map(WireCall::into_call).collect(),
        reasoning_content,
        usage: usage.map(OpenAiUsage::into_usage).unwrap_or_default(),
    }
}

/// A tool call in either shape pagent reads: v1's (OpenAI's)
/// `{"id","type":"function","function":{"name","arguments"}}` or v4's flat
/// `{"type":"function","id","name","arguments"}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum WireCall {
    OpenAi {
        id: String,
        function: Function,
    },
    Flat {
        id: String,
        name: String,
        arguments: String,
    },
}

#[derive(Deserialize)]
struct Function {
    name: String,
    arguments: String,
}

impl WireCall {
    fn into_call(self) -> ToolCall {
        match self {
            WireCall::OpenAi { id, function } => {
                ToolCall::new(id, function.name, function.arguments)
            }
            WireCall::Flat {
                id,
                name,
                arguments,
            } => ToolCall::new(id, name, arguments),
        }
    }
}

/// The OpenAI `CompletionUsage` as pagent dumps it; every count may be missing or `null`.
#[derive(Deserialize)]
struct OpenAiUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    cache_write_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl OpenAiUsage {
    fn into_usage(self) -> Usage {
        let input = self.prompt_tokens.unwrap_or(0);
        let output = self.completion_tokens.unwrap_or(0);
        let prompt = self.prompt_tokens_details;
        let read = prompt.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0);
        let write = prompt.and_then(|d| d.cache_write_tokens).unwrap_or(0);
        let reasoning = self
            .completion_tokens_details
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0);
        Usage::new(input, output)
            .with_total(self.total_tokens.unwrap_or(input.saturating_add(output)))
            .with_cache(read, write)
            .with_reasoning(reasoning)
    }
}

#[derive(Deserialize)]
struct ToolCallBeginParams {
    tool_call_id: String,
    name: String,
    arguments: String,
}

#[derive(Deserialize)]
struct ToolResultParams {
    tool_call_id: String,
    name: String,
    content: String,
    #[serde(default = "yes")]
    ok: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct TurnEndV1Params {
    turn: u32,
    stopped: bool,
}

#[derive(Deserialize)]
struct TurnEndV4Params {
    turn: u32,
    stopped: bool,
    stop_reason: String,
}

#[derive(Deserialize)]
struct RunEndV4Params {
    turn: u32,
    stop_reason: String,
}

/// v1 `RunEnd`: pagent's `RunEnd` dataclass, the fields of the last reply (checked, then
/// left: the run's last `StepEnd` carried them already).
#[derive(Deserialize)]
#[allow(dead_code)] // Deserialized to check the line; the fields are not read.
struct RunEndV1Params {
    content: String,
    #[serde(default)]
    tool_calls: Vec<WireCall>,
    #[serde(default)]
    reasoning_content: String,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
}
