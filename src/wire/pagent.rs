//! The two `pagent` dialects: our events written as the Python pagent wire (v1 and v4).
//!
//! The encoder is a small state machine over the native events: pagent's `RunBegin` needs the
//! prompt text (which arrives after our `TurnStart`), pagent pairs each `ToolCallBegin` with its
//! `ToolResult` in call order (ours end in completion order), and v1 writes the calls of a
//! final answer turn, which no `ToolStart` announces, from its `TurnEnd`. Lines are written as
//! pagent writes them, byte for byte: Python's `json.dumps` defaults (`", "` and `": "`, raw
//! UTF-8) and the params in the order of pagent's dataclass fields. See the
//! [wire docs](super#the-pagent-dialects) for the mapping.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::Arc;

use serde::Serialize;

use crate::content::text_with_notes;
use crate::event::{AgentEvent, RunStopReason};
use crate::llm::StreamEvent;
use crate::message::{AssistantMessage, Message, StopReason, ToolCall, ToolResultMessage, Usage};

/// Which pagent wire version to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Version {
    V1,
    V4,
}

#[derive(Debug)]
enum Phase {
    /// Between runs.
    Idle,
    /// `AgentStart` seen, `RunBegin` not yet written: it waits for the prompt text. Holds the
    /// turn whose `TurnBegin` waits with it.
    Pending(Option<u32>),
    Running,
}

/// The encoder of one stream.
#[derive(Debug)]
pub(crate) struct Encoder {
    version: Version,
    phase: Phase,
    open_turn: Option<u32>,
    /// Calls started and not yet written, in start (call) order.
    started: VecDeque<ToolCall>,
    /// Whether the first call of `started` has had its `ToolCallBegin`.
    begun: bool,
    /// Results that arrived before their call's turn to be written.
    ended: HashMap<String, Arc<ToolResultMessage>>,
    /// Whether a `ToolStart` came in the open turn.
    tool_started: bool,
    /// v4: the open turn's reply was cut by an abort. pagent writes no `TurnResult` for a
    /// reply its cancel cut, and its calls never run, so neither is written.
    aborted_reply: bool,
    /// The params of the last `StepEnd`, as written, for the v1 `RunEnd`.
    last_summary: Option<Vec<u8>>,
    /// The 0-based turn and stop reason of the last `TurnEnd`, for the v4 `RunEnd`.
    last_turn_end: Option<(u32, &'static str)>,
    /// Our number of the first turn of the current pagent run (pagent counts from 0 per run,
    /// and v1 may split one of our runs into several pagent runs).
    base: u32,
}

impl Encoder {
    pub(crate) fn new(version: Version) -> Encoder {
        Encoder {
            version,
            phase: Phase::Idle,
            open_turn: None,
            started: VecDeque::new(),
            begun: false,
            ended: HashMap::new(),
            tool_started: false,
            aborted_reply: false,
            last_summary: None,
            last_turn_end: None,
            base: 1,
        }
    }

    /// Appends the lines (zero or more) `event` becomes to `out`, each with its `\n`.
    pub(crate) fn encode(&mut self, event: &AgentEvent, out: &mut Vec<u8>) {
        match event {
            AgentEvent::AgentStart => {
                *self = Encoder::new(self.version);
                self.phase = Phase::Pending(None);
                return;
            }
            AgentEvent::TurnStart { turn } => {
                self.open_turn = Some(*turn);
                self.started.clear();
                self.begun = false;
                self.ended.clear();
                self.tool_started = false;
                self.aborted_reply = false;
                if let Phase::Pending(waiting) = &mut self.phase {
                    *waiting = Some(*turn);
                } else {
                    let turn = self.pagent_turn(*turn);
                    line(out, "TurnBegin", &TurnParams { turn });
                }
                return;
            }
            AgentEvent::MessageStart { message } if matches!(self.phase, Phase::Pending(_)) => {
                if let Message::User(m) = &**message {
                    self.begin_run(&text_with_notes(&m.content), out);
                    return;
                }
            }
            _ => {}
        }
        if matches!(self.phase, Phase::Pending(_)) {
            self.begin_run("", out);
        }
        match event {
            AgentEvent::MessageUpdate { delta, .. } => match delta {
                StreamEvent::TextDelta { text } => line(out, "TextDelta", &TextParams { text }),
                StreamEvent::ThinkingDelta { text } => {
                    line(out, "ReasoningDelta", &TextParams { text });
                }
                _ => {}
            },
            AgentEvent::MessageEnd { message } => {
                let Message::Assistant(m) = &**message else {
                    return;
                };
                match m.stop_reason {
                    // A failed reply has no summary: pagent's stream breaks off where its
                    // provider failed (see `AgentEnd`).
                    StopReason::Error => {}
                    StopReason::Aborted if self.version == Version::V4 => {
                        self.aborted_reply = true;
                    }
                    _ => {
                        let mut params = Vec::new();
                        py_json(&mut params, &self.summary(m));
                        let method = match self.version {
                            Version::V1 => "StepEnd",
                            Version::V4 => "TurnResult",
                        };
                        line_raw(out, method, &params);
                        self.last_summary = Some(params);
                    }
                }
            }
            AgentEvent::ToolStart { call, .. } if !self.aborted_reply => {
                self.tool_started = true;
                self.started.push_back(call.clone());
                self.pair_tools(out);
            }
            AgentEvent::ToolEnd { result, .. } if !self.aborted_reply => {
                self.ended
                    .insert(result.tool_call_id.clone(), result.clone());
                self.pair_tools(out);
            }
            AgentEvent::TurnEnd {
                stop_reason: RunStopReason::Error,
                ..
            } => {
                // The failed turn has no `TurnEnd`; the tools that ran before the failure
                // were written as they ran, as pagent writes each tool.
                self.open_turn = None;
            }
            AgentEvent::TurnEnd {
                turn,
                message,
                tool_results,
                stop_reason,
                ..
            } => {
                let reply = message.as_assistant();
                let had_calls = reply.is_some_and(|m| m.tool_calls().next().is_some());
                if self.version == Version::V1
                    && had_calls
                    && !self.tool_started
                    && let Some(reply) = reply
                {
                    // The calls of a final answer turn did not run and had no `ToolStart`.
                    // v1 has no way to say so but a result: a turn whose calls have no
                    // results is one pagent v1 never writes (see the wire docs).
                    for (call, result) in reply.tool_calls().zip(tool_results) {
                        write_pair(out, call, Some(result));
                    }
                }
                self.end_turn(*turn, *stop_reason, had_calls, reply, out);
            }
            AgentEvent::AgentEnd {
                stop_reason: RunStopReason::Error,
                ..
            } => {
                // pagent (v1 and v4) raises its provider's exception out of the event
                // iterator: the run's lines break off with no `TurnEnd` and no `RunEnd`, and
                // the consumer learns of the failure from the missing `RunEnd`. The dialects
                // do the same, for every failed run (a panic in the loop included).
                self.phase = Phase::Idle;
            }
            AgentEvent::AgentEnd { stop_reason, .. } => {
                // A run that broke off mid-turn still closes its turn.
                if let Some(turn) = self.open_turn {
                    self.end_turn(turn, *stop_reason, false, None, out);
                } else if self.version == Version::V4
                    && matches!(self.last_turn_end, Some((_, "continuing")))
                {
                    // The run stopped between turns (an abort after a continuing `TurnEnd`):
                    // v4 ends a run on a stopped turn, so the turn that did not start opens
                    // and ends `cancelled` (pagent writes a second `TurnEnd` for the last
                    // turn instead; ours stays regular).
                    let (turn, _) = self.last_turn_end.unwrap_or_default();
                    let turn = turn + self.base + 1;
                    let pagent_turn = self.pagent_turn(turn);
                    line(out, "TurnBegin", &TurnParams { turn: pagent_turn });
                    self.end_turn(turn, *stop_reason, false, None, out);
                }
                self.run_end(*stop_reason, out);
                self.phase = Phase::Idle;
            }
            _ => {}
        }
    }

    fn begin_run(&mut self, user_input: &str, out: &mut Vec<u8>) {
        line(out, "RunBegin", &RunBeginParams { user_input });
        if let Phase::Pending(Some(turn)) = self.phase {
            self.base = turn;
            line(out, "TurnBegin", &TurnParams { turn: 0 });
        }
        self.phase = Phase::Running;
    }

    /// Writes what the tool calls allow, in call order: the first waiting call's
    /// `ToolCallBegin` at once, its `ToolResult` when it ended, then the next call's.
    fn pair_tools(&mut self, out: &mut Vec<u8>) {
        while let Some(call) = self.started.front() {
            if !self.begun {
                write_pair(out, call, None);
                self.begun = true;
            }
            let Some(result) = self.ended.remove(&call.id) else {
                break;
            };
            write_result(out, call, &result);
            self.started.pop_front();
            self.begun = false;
        }
    }

    fn end_turn(
        &mut self,
        turn: u32,
        stop: RunStopReason,
        had_calls: bool,
        reply: Option<&AssistantMessage>,
        out: &mut Vec<u8>,
    ) {
        let reason = v4_reason(stop, had_calls, reply);
        let stopped = match self.version {
            // In v1 a turn with tool calls never stops: a run that ends on one (max_turns, an
            // abort) ends with stopped=false, as pagent v1 writes a max_turns ending.
            Version::V1 => !had_calls,
            Version::V4 => reason != "continuing",
        };
        // pagent goes on only after tool calls. Our run also goes on after a final answer
        // when a steering or follow-up message waits: in pagent terms that ends this run, and
        // the next turn begins a new one (its `RunBegin` carries the waiting message).
        let split = stopped && stop == RunStopReason::Continuing;
        let turn = self.pagent_turn(turn);
        match self.version {
            Version::V1 => line(out, "TurnEnd", &TurnEndV1 { turn, stopped }),
            Version::V4 => line(
                out,
                "TurnEnd",
                &TurnEndV4 {
                    turn,
                    stopped,
                    stop_reason: reason,
                },
            ),
        }
        self.last_turn_end = Some((turn, reason));
        self.open_turn = None;
        if split {
            self.run_end(stop, out);
            self.phase = Phase::Pending(None);
        }
    }

    /// pagent counts turns from 0 in each of its runs; we count from 1 in ours.
    fn pagent_turn(&self, turn: u32) -> u32 {
        turn.saturating_sub(self.base)
    }

    fn run_end(&self, stop: RunStopReason, out: &mut Vec<u8>) {
        match self.version {
            Version::V1 => match &self.last_summary {
                Some(params) => line_raw(out, "RunEnd", params),
                None => line(
                    out,
                    "RunEnd",
                    &Summary {
                        content: String::new(),
                        tool_calls: Vec::new(),
                        reasoning_content: String::new(),
                        usage: None,
                    },
                ),
            },
            Version::V4 => {
                let (turn, stop_reason) = self
                    .last_turn_end
                    .unwrap_or((0, v4_reason(stop, false, None)));
                line(out, "RunEnd", &RunEndV4 { turn, stop_reason });
            }
        }
    }

    /// The params of `StepEnd` (v1) or `TurnResult` (v4).
    fn summary<'m>(&self, m: &'m AssistantMessage) -> Summary<'m> {
        let tool_calls = m
            .tool_calls()
            .map(|c| match self.version {
                Version::V1 => SummaryCall::V1 {
                    id: &c.id,
                    kind: "function",
                    function: Function {
                        name: &c.name,
                        arguments: &c.arguments,
                    },
                },
                Version::V4 => SummaryCall::V4 {
                    kind: "function",
                    id: &c.id,
                    name: &c.name,
                    arguments: &c.arguments,
                },
            })
            .collect();
        Summary {
            content: m.text(),
            tool_calls,
            reasoning_content: m.thinking(),
            usage: openai_usage(m.usage),
        }
    }
}

/// Writes a call's `ToolCallBegin`, and its `ToolResult` when `result` is given.
fn write_pair(out: &mut Vec<u8>, call: &ToolCall, result: Option<&Arc<ToolResultMessage>>) {
    line(
        out,
        "ToolCallBegin",
        &ToolCallBeginParams {
            tool_call_id: &call.id,
            name: &call.name,
            arguments: &call.arguments,
        },
    );
    if let Some(result) = result {
        write_result(out, call, result);
    }
}

fn write_result(out: &mut Vec<u8>, call: &ToolCall, result: &ToolResultMessage) {
    line(
        out,
        "ToolResult",
        &ToolResultParams {
            tool_call_id: &call.id,
            name: &call.name,
            content: &text_with_notes(&result.content),
            ok: !result.is_error,
        },
    );
}

/// Python's `json.dumps` with its default separators (`", "` between items, `": "` after a
/// key) and `ensure_ascii=False`, as pagent writes its lines. Strings are escaped as both
/// escape them: `"`, `\`, and control characters (`\n`, `\r`, `\t`, `\b`, `\f`, the others as
/// `\u00xx` with lowercase hex); everything else is raw UTF-8.
struct PyFormatter;

impl serde_json::ser::Formatter for PyFormatter {
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

/// Appends `value` as pagent's JSON (see [`PyFormatter`]).
fn py_json(out: &mut Vec<u8>, value: &impl Serialize) {
    let mut ser = serde_json::Serializer::with_formatter(out, PyFormatter);
    // OK because the params types serialize to JSON (string keys, no fallible `Serialize`),
    // and writing to a `Vec` cannot fail.
    value
        .serialize(&mut ser)
        .expect("pagent params always serialize");
}

/// Appends the line `{"jsonrpc": "2.0", "method": <method>, "params": <params>}` and its
/// `\n`, the envelope in pagent's key order.
fn line(out: &mut Vec<u8>, method: &str, params: &impl Serialize) {
    begin_line(out, method);
    py_json(out, params);
    out.extend_from_slice(b"}\n");
}

/// [`line`] with params already written as JSON.
fn line_raw(out: &mut Vec<u8>, method: &str, params: &[u8]) {
    begin_line(out, method);
    out.extend_from_slice(params);
    out.extend_from_slice(b"}\n");
}

/// The envelope up to the params' value.
fn begin_line(out: &mut Vec<u8>, method: &str) {
    // The method names are plain ASCII identifiers: nothing to escape.
    out.extend_from_slice(b"{\"jsonrpc\": \"2.0\", \"method\": \"");
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(b"\", \"params\": ");
}

// The params of each method, with the fields in the order of pagent's dataclasses (which is
// the order `json.dumps` writes them in).

#[derive(Serialize)]
struct RunBeginParams<'a> {
    user_input: &'a str,
}

#[derive(Serialize)]
struct TurnParams {
    turn: u32,
}

#[derive(Serialize)]
struct TextParams<'a> {
    text: &'a str,
}

/// `StepEnd` (v1, also its `RunEnd`) and `TurnResult` (v4).
#[derive(Serialize)]
struct Summary<'a> {
    content: String,
    tool_calls: Vec<SummaryCall<'a>>,
    reasoning_content: String,
    usage: Option<OpenAiUsage>,
}

/// A tool call: v1 in the OpenAI message shape, v4 as pagentv4's `ToolCall` model dumps it.
#[derive(Serialize)]
#[serde(untagged)]
enum SummaryCall<'a> {
    V1 {
        id: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
        function: Function<'a>,
    },
    V4 {
        #[serde(rename = "type")]
        kind: &'static str,
        id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ToolCallBeginParams<'a> {
    tool_call_id: &'a str,
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ToolResultParams<'a> {
    tool_call_id: &'a str,
    name: &'a str,
    content: &'a str,
    ok: bool,
}

#[derive(Serialize)]
struct TurnEndV1 {
    turn: u32,
    stopped: bool,
}

#[derive(Serialize)]
struct TurnEndV4 {
    turn: u32,
    stopped: bool,
    stop_reason: &'static str,
}

#[derive(Serialize)]
struct RunEndV4 {
    turn: u32,
    stop_reason: &'static str,
}

/// pagent's usage object: the OpenAI SDK's `CompletionUsage` as pagent dumps it
/// (`model_dump()`, the fields in the SDK's order).
#[derive(Serialize, Debug, PartialEq)]
struct OpenAiUsage {
    completion_tokens: u64,
    prompt_tokens: u64,
    total_tokens: u64,
    completion_tokens_details: Option<CompletionTokensDetails>,
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Serialize, Debug, PartialEq)]
struct CompletionTokensDetails {
    accepted_prediction_tokens: Option<u64>,
    audio_tokens: Option<u64>,
    reasoning_tokens: u64,
    rejected_prediction_tokens: Option<u64>,
    text_tokens: Option<u64>,
}

#[derive(Serialize, Debug, PartialEq)]
struct PromptTokensDetails {
    audio_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
    cached_tokens: u64,
    image_tokens: Option<u64>,
    text_tokens: Option<u64>,
}

/// The usage pagent writes for a reply with counts `u`: `None` (`null`) when the reply has
/// none (the provider reported none: pagent writes the `usage` it got, `None` included). A
/// details object is written when it has a count, with every field the SDK dumps (`null`
/// where we have none), and is `null` otherwise, as when the provider sends none.
fn openai_usage(u: Usage) -> Option<OpenAiUsage> {
    if u == Usage::default() {
        return None;
    }
    Some(OpenAiUsage {
        completion_tokens: u.output,
        prompt_tokens: u.input,
        total_tokens: u.total,
        completion_tokens_details: (u.reasoning != 0).then_some(CompletionTokensDetails {
            accepted_prediction_tokens: None,
            audio_tokens: None,
            reasoning_tokens: u.reasoning,
            rejected_prediction_tokens: None,
            text_tokens: None,
        }),
        prompt_tokens_details: (u.cache_read != 0 || u.cache_write != 0).then_some(
            PromptTokensDetails {
                audio_tokens: None,
                cache_write_tokens: (u.cache_write != 0).then_some(u.cache_write),
                cached_tokens: u.cache_read,
                image_tokens: None,
                text_tokens: None,
            },
        ),
    })
}

/// v4's `stop_reason`. A failed run has none: its lines break off (see `AgentEnd`). A reply
/// without tool calls is a final answer in pagent's terms, also when our run goes on
/// (`Continuing`, a steering or follow-up message waits) or stops at `MaxTurns` (steering
/// queued at the limit).
fn v4_reason(
    stop: RunStopReason,
    had_calls: bool,
    reply: Option<&AssistantMessage>,
) -> &'static str {
    match stop {
        RunStopReason::Continuing if had_calls => "continuing",
        RunStopReason::MaxTurns if had_calls => "max_turns",
        RunStopReason::NoToolCalls => "no_tool_calls",
        RunStopReason::EmptyResponse => "empty_response",
        RunStopReason::Continuing | RunStopReason::MaxTurns
            if reply.is_some_and(|r| r.is_empty()) =>
        {
            "empty_response"
        }
        RunStopReason::Continuing | RunStopReason::MaxTurns => "no_tool_calls",
        // `Error` is never written (the run breaks off); an abort is pagent's cancel.
        RunStopReason::Cancelled | RunStopReason::Error => "cancelled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "echo".into(),
            arguments: "{}".into(),
        }
    }

    fn end(id: &str) -> AgentEvent {
        AgentEvent::ToolEnd {
            result: Arc::new(ToolResultMessage {
                tool_call_id: id.into(),
                tool_name: "echo".into(),
                ..Default::default()
            }),
            duration: None,
        }
    }

    /// The methods each event becomes, one list per event.
    fn written(version: Version, events: &[AgentEvent]) -> Vec<Vec<String>> {
        let mut encoder = Encoder::new(version);
        let mut prelude = Vec::new();
        encoder.encode(&AgentEvent::AgentStart, &mut prelude);
        encoder.encode(&AgentEvent::TurnStart { turn: 1 }, &mut prelude);
        let user = Arc::new(Message::user("hi"));
        encoder.encode(&AgentEvent::MessageStart { message: user }, &mut prelude);
        events
            .iter()
            .map(|e| {
                let mut out = Vec::new();
                encoder.encode(e, &mut out);
                String::from_utf8(out)
                    .unwrap()
                    .lines()
                    .map(|l| serde_json::from_str::<Value>(l).unwrap()["method"].to_string())
                    .collect()
            })
            .collect()
    }

    fn usage_json(u: Usage) -> Value {
        serde_json::to_value(openai_usage(u)).unwrap()
    }

    #[test]
    fn usage_is_null_when_the_provider_reported_none() {
        assert_eq!(usage_json(Usage::default()), Value::Null);
        assert_eq!(
            usage_json(Usage::new(10, 3)),
            json!({
                "completion_tokens": 3, "prompt_tokens": 10, "total_tokens": 13,
                "completion_tokens_details": null, "prompt_tokens_details": null,
            })
        );
    }

    /// The shape pagent 0.7.30 writes for an OpenAI reply with
    /// `completion_tokens_details: {reasoning_tokens: 2}` and
    /// `prompt_tokens_details: {cached_tokens: 4}` (the SDK's `model_dump()`).
    #[test]
    fn cache_read_and_reasoning_counts_are_in_the_detail_objects() {
        let u = Usage::new(10, 3).with_cache(4, 0).with_reasoning(2);
        let pagent: Value = serde_json::from_str(
            r#"{"completion_tokens": 3, "prompt_tokens": 10, "total_tokens": 13, "completion_tokens_details": {"accepted_prediction_tokens": null, "audio_tokens": null, "reasoning_tokens": 2, "rejected_prediction_tokens": null, "text_tokens": null}, "prompt_tokens_details": {"audio_tokens": null, "cache_write_tokens": null, "cached_tokens": 4, "image_tokens": null, "text_tokens": null}}"#,
        )
        .unwrap();
        assert_eq!(usage_json(u), pagent);
        let written = usage_json(Usage::new(10, 3).with_cache(0, 5));
        assert_eq!(
            written["prompt_tokens_details"]["cache_write_tokens"],
            json!(5)
        );
        assert_eq!(written["prompt_tokens_details"]["cached_tokens"], json!(0));
        assert_eq!(written["completion_tokens_details"], Value::Null);
    }

    #[test]
    fn parallel_tools_are_paired_in_call_order_as_they_end() {
        let events = [
            AgentEvent::ToolStart {
                call: call("a"),
                at: None,
            },
            AgentEvent::ToolStart {
                call: call("b"),
                at: None,
            },
            end("b"),
            end("a"),
        ];
        for version in [Version::V1, Version::V4] {
            let lines = written(version, &events);
            assert_eq!(lines[0], [r#""ToolCallBegin""#]);
            assert!(lines[1].is_empty() && lines[2].is_empty());
            assert_eq!(
                lines[3],
                [r#""ToolResult""#, r#""ToolCallBegin""#, r#""ToolResult""#]
            );
        }
    }

    /// pagent's `json.dumps(..., ensure_ascii=False)` of the same params.
    #[test]
    fn lines_are_written_as_python_json_dumps_writes_them() {
        let mut out = Vec::new();
        line(
            &mut out,
            "ToolResult",
            &ToolResultParams {
                tool_call_id: "c",
                name: "echo",
                content: "é \"q\" \\ \n\t\u{1}\u{7f}\u{2028}",
                ok: true,
            },
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"jsonrpc\": \"2.0\", \"method\": \"ToolResult\", \"params\": {\"tool_call_id\": \"c\", \
             \"name\": \"echo\", \"content\": \"é \\\"q\\\" \\\\ \\n\\t\\u0001\u{7f}\u{2028}\", \"ok\": true}}\n"
        );
        let mut out = Vec::new();
        py_json(
            &mut out,
            &Summary {
                content: String::new(),
                tool_calls: Vec::new(),
                reasoning_content: String::new(),
                usage: None,
            },
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"content": "", "tool_calls": [], "reasoning_content": "", "usage": null}"#
        );
    }
}
