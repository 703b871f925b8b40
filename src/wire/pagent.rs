//! The two `pagent` dialects: our events written as the Python pagent wire (v1 and v4).
//!
//! The encoder is a small state machine over the native events: pagent's `RunBegin` needs the
//! prompt text (which arrives after our `TurnStart`), pagent pairs each `ToolCallBegin` with its
//! `ToolResult` in call order (ours end in completion order), and a pagent turn that stops runs
//! no tools. See the [wire docs](super#the-pagent-dialects) for the mapping.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};

use super::codec::notification_to;
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
    /// v4: the `ToolCallBegin` / `ToolResult` lines of the open turn (each with its `\n`),
    /// held until its `TurnEnd`.
    tool_lines: Vec<u8>,
    /// Params of the last `StepEnd` / `TurnResult`, for the v1 `RunEnd`.
    last_summary: Option<Value>,
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
            tool_lines: Vec::new(),
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
                self.tool_lines.clear();
                if let Phase::Pending(waiting) = &mut self.phase {
                    *waiting = Some(*turn);
                } else {
                    let turn = self.pagent_turn(*turn);
                    notification_to(out, "TurnBegin", &json!({ "turn": turn }));
                }
                return;
            }
            AgentEvent::MessageStart { message } if matches!(self.phase, Phase::Pending(_)) => {
                if let Message::User(m) = &**message {
                    self.begin_run(&m.content, out);
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
                StreamEvent::TextDelta { text } => {
                    notification_to(out, "TextDelta", &TextParams { text });
                }
                StreamEvent::ThinkingDelta { text } => {
                    notification_to(out, "ReasoningDelta", &TextParams { text });
                }
                _ => {}
            },
            AgentEvent::MessageEnd { message } => {
                // A failed reply has no summary: pagent's stream breaks off where its
                // provider failed (see `AgentEnd`).
                if let Message::Assistant(m) = &**message
                    && m.stop_reason != StopReason::Error
                {
                    let params = self.summary(m);
                    let method = match self.version {
                        Version::V1 => "StepEnd",
                        Version::V4 => "TurnResult",
                    };
                    notification_to(out, method, &params);
                    self.last_summary = Some(params);
                }
            }
            AgentEvent::ToolStart { call } => {
                self.started.push_back(call.clone());
                self.pair_tools(out);
            }
            AgentEvent::ToolEnd { result } => {
                self.ended
                    .insert(result.tool_call_id.clone(), result.clone());
                self.pair_tools(out);
            }
            AgentEvent::TurnEnd {
                stop_reason: RunStopReason::Error,
                ..
            } => {
                // The failed turn has no `TurnEnd`; the tools that ran before the failure
                // are written, as pagent writes each tool as it runs.
                out.append(&mut self.tool_lines);
                self.open_turn = None;
            }
            AgentEvent::TurnEnd {
                turn,
                message,
                stop_reason,
                ..
            } => {
                let had_calls = message
                    .as_assistant()
                    .is_some_and(|m| m.tool_calls().next().is_some());
                self.end_turn(*turn, *stop_reason, had_calls, message.as_assistant(), out);
            }
            AgentEvent::AgentEnd {
                stop_reason: RunStopReason::Error,
                ..
            } => {
                // pagent (v1 and v4) raises its provider's exception out of the event
                // iterator: the run's lines break off with no `TurnEnd` and no `RunEnd`, and
                // the consumer learns of the failure from the missing `RunEnd`. The dialects
                // do the same, for every failed run (a panic in the loop included).
                out.append(&mut self.tool_lines);
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
                    notification_to(out, "TurnBegin", &json!({ "turn": self.pagent_turn(turn) }));
                    self.end_turn(turn, *stop_reason, false, None, out);
                }
                self.run_end(*stop_reason, out);
                self.phase = Phase::Idle;
            }
            _ => {}
        }
    }

    fn begin_run(&mut self, user_input: &str, out: &mut Vec<u8>) {
        notification_to(out, "RunBegin", &json!({ "user_input": user_input }));
        if let Phase::Pending(Some(turn)) = self.phase {
            self.base = turn;
            notification_to(out, "TurnBegin", &json!({ "turn": 0 }));
        }
        self.phase = Phase::Running;
    }

    /// Writes what the tool calls allow, in call order: the first waiting call's
    /// `ToolCallBegin` at once, its `ToolResult` when it ended, then the next call's. v1 gets
    /// the lines as they come; v4 holds them until the turn's `TurnEnd` (see `end_turn`).
    fn pair_tools(&mut self, out: &mut Vec<u8>) {
        let lines = match self.version {
            Version::V1 => out,
            Version::V4 => &mut self.tool_lines,
        };
        while let Some(call) = self.started.front() {
            if !self.begun {
                notification_to(
                    lines,
                    "ToolCallBegin",
                    &json!({ "tool_call_id": call.id, "name": call.name, "arguments": call.arguments }),
                );
                self.begun = true;
            }
            let Some(result) = self.ended.remove(&call.id) else {
                break;
            };
            notification_to(
                lines,
                "ToolResult",
                &json!({
                    "tool_call_id": call.id,
                    "name": call.name,
                    "content": result.content,
                    "ok": !result.is_error,
                }),
            );
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
            // abort, an error) ends with stopped=false, as pagent v1 writes a max_turns ending.
            Version::V1 => !had_calls,
            Version::V4 => reason != "continuing",
        };
        // pagent goes on only after tool calls. Our run also goes on after a final answer
        // when a steering or follow-up message waits: in pagent terms that ends this run, and
        // the next turn begins a new one (its `RunBegin` carries the waiting message).
        let split = stopped && stop == RunStopReason::Continuing;
        // A pagent turn that stops runs no tools (v4's max_turns turn is a "synthesis" turn),
        // so the tool lines of a stopping turn are left out; the native stream has them. A
        // cancelled turn keeps them: pagent writes the `ToolCallBegin` of the tool an abort
        // cuts short, and its decoder takes any prefix of the turn's calls.
        if !stopped || reason == "cancelled" {
            out.append(&mut self.tool_lines);
        }
        self.tool_lines.clear();
        let turn = self.pagent_turn(turn);
        let params = match self.version {
            Version::V1 => json!({ "turn": turn, "stopped": stopped }),
            Version::V4 => json!({ "turn": turn, "stopped": stopped, "stop_reason": reason }),
        };
        notification_to(out, "TurnEnd", &params);
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
        let params = match self.version {
            Version::V1 => self.last_summary.clone().unwrap_or_else(|| {
                json!({ "content": "", "tool_calls": [], "reasoning_content": "", "usage": null })
            }),
            Version::V4 => {
                let (turn, reason) = self
                    .last_turn_end
                    .unwrap_or((0, v4_reason(stop, false, None)));
                json!({ "turn": turn, "stop_reason": reason })
            }
        };
        notification_to(out, "RunEnd", &params);
    }

    /// The params of `StepEnd` (v1) or `TurnResult` (v4).
    fn summary(&self, m: &AssistantMessage) -> Value {
        let calls: Vec<Value> = m
            .tool_calls()
            .map(|c| match self.version {
                Version::V1 => json!({
                    "id": c.id,
                    "type": "function",
                    "function": { "name": c.name, "arguments": c.arguments },
                }),
                Version::V4 => json!({
                    "type": "function", "id": c.id, "name": c.name, "arguments": c.arguments,
                }),
            })
            .collect();
        json!({
            "content": m.text(),
            "tool_calls": calls,
            "reasoning_content": m.thinking(),
            "usage": openai_usage(m.usage),
        })
    }
}

/// The params of `TextDelta` and `ReasoningDelta`, borrowed from the delta.
#[derive(Serialize)]
struct TextParams<'a> {
    text: &'a str,
}

/// pagent's usage object: the OpenAI `CompletionUsage` as pagent dumps it (`model_dump()` of
/// the `openai` SDK it depends on), or `null` when the reply has no counts (the provider
/// reported none: pagent writes the `usage` it got, `None` included). A details object is
/// written when it has a count, with every field the SDK dumps (`null` where we have none),
/// and is `null` otherwise, as when the provider sends none.
fn openai_usage(u: Usage) -> Value {
    if u == Usage::default() {
        return Value::Null;
    }
    let count = |n: u64| if n == 0 { Value::Null } else { json!(n) };
    let completion_details = if u.reasoning == 0 {
        Value::Null
    } else {
        json!({
            "accepted_prediction_tokens": null,
            "audio_tokens": null,
            "reasoning_tokens": u.reasoning,
            "rejected_prediction_tokens": null,
            "text_tokens": null,
        })
    };
    let prompt_details = if u.cache_read == 0 && u.cache_write == 0 {
        Value::Null
    } else {
        json!({
            "audio_tokens": null,
            "cache_write_tokens": count(u.cache_write),
            "cached_tokens": u.cache_read,
            "image_tokens": null,
            "text_tokens": null,
        })
    };
    json!({
        "completion_tokens": u.output,
        "prompt_tokens": u.input,
        "total_tokens": u.total,
        "completion_tokens_details": completion_details,
        "prompt_tokens_details": prompt_details,
    })
}

/// v4's `stop_reason`. A failed run has none: its lines break off (see `AgentEnd`). A reply without tool calls is a final answer in pagent's terms, also when our run
/// goes on (`Continuing`, a steering or follow-up message waits) or stops at `MaxTurns`
/// (steering queued at the limit).
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

    #[test]
    fn usage_is_null_when_the_provider_reported_none() {
        assert_eq!(openai_usage(Usage::default()), Value::Null);
        assert_eq!(
            openai_usage(Usage::new(10, 3)),
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
        assert_eq!(openai_usage(u), pagent);
        let written = openai_usage(Usage::new(10, 3).with_cache(0, 5));
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
            AgentEvent::ToolStart { call: call("a") },
            AgentEvent::ToolStart { call: call("b") },
            end("b"),
            end("a"),
        ];
        let v1 = written(Version::V1, &events);
        assert_eq!(v1[0], [r#""ToolCallBegin""#]);
        assert!(v1[1].is_empty() && v1[2].is_empty());
        assert_eq!(
            v1[3],
            [r#""ToolResult""#, r#""ToolCallBegin""#, r#""ToolResult""#]
        );
        // v4 holds them for its TurnEnd.
        assert!(written(Version::V4, &events).iter().all(Vec::is_empty));
    }
}
