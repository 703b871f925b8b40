//! The core loop on the scripted provider: whole event sequences, snapshots under load,
//! listeners, channels.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pagent::llm::{Faux, FauxReply};
use pagent::{
    Agent, AgentEvent, Error, ErrorKind, FinalTurn, Message, RunStopReason, StopReason, ToolError,
    ToolOutput, Usage, tool,
};

mod replay;
use replay::MirrorCheck;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// One line per event, with every field a test cares about, so sequences compare exactly.
fn render(e: &AgentEvent) -> String {
    match e {
        AgentEvent::AgentStart => "AgentStart".into(),
        AgentEvent::TurnStart { turn } => format!("TurnStart({turn})"),
        AgentEvent::MessageStart { message } => format!("MessageStart({})", message.role()),
        AgentEvent::MessageUpdate { delta, .. } => {
            let d = serde_json::to_value(delta).unwrap();
            let mut d = d.as_object().unwrap().clone();
            let kind = d.remove("type").unwrap();
            format!(
                "Update({} {})",
                kind.as_str().unwrap(),
                serde_json::Value::Object(d)
            )
        }
        AgentEvent::MessageEnd { message } => match &**message {
            Message::User(m) => format!("MessageEnd(user {:?})", m.text()),
            Message::Assistant(m) => format!(
                "MessageEnd(assistant {:?} {:?} calls={})",
                m.stop_reason,
                m.text(),
                m.tool_calls().count()
            ),
            Message::ToolResult(m) => format!(
                "MessageEnd(tool_result {} {} {:?})",
                m.tool_call_id,
                if m.is_error { "err" } else { "ok" },
                m.text()
            ),
            other => format!("MessageEnd({})", other.role()),
        },
        AgentEvent::ToolStart { call, .. } => {
            format!("ToolStart({} {} {})", call.id, call.name, call.arguments)
        }
        AgentEvent::ToolExecute {
            call_id,
            arguments,
            rewritten,
            ..
        } => format!(
            "ToolExecute({call_id} {arguments}{})",
            if *rewritten { " rewritten" } else { "" }
        ),
        AgentEvent::ToolUpdate {
            call_id, partial, ..
        } => format!("ToolUpdate({call_id} {:?})", partial.to_text()),
        AgentEvent::ToolEnd { result, .. } => format!(
            "ToolEnd({} {} {:?})",
            result.tool_call_id,
            if result.is_error { "err" } else { "ok" },
            result.text()
        ),
        AgentEvent::TurnEnd {
            turn,
            tool_results,
            stop_reason,
            ..
        } => format!(
            "TurnEnd({turn} {stop_reason} results={})",
            tool_results.len()
        ),
        AgentEvent::AgentEnd {
            messages,
            stop_reason,
            error,
            ..
        } => format!(
            "AgentEnd({stop_reason} messages={} error={:?})",
            messages.len(),
            error.as_ref().map(|e| format!("{}: {}", e.kind, e.message))
        ),
        other => other.name().into(),
    }
}

/// Records every event an agent emits. Every scenario of this suite is also a wire replay
/// test: the recorder's `MirrorCheck` replays the run's wire lines when the test ends.
struct Recorder {
    events: Arc<Mutex<Vec<AgentEvent>>>,
    _mirror: MirrorCheck,
}

impl Recorder {
    fn attach(agent: &Agent) -> Recorder {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        agent
            .subscribe(move |e| sink.lock().unwrap().push(e.clone()))
            .keep();
        Recorder {
            events,
            _mirror: MirrorCheck::attach(agent),
        }
    }

    fn lines(&self) -> Vec<String> {
        self.events.lock().unwrap().iter().map(render).collect()
    }

    fn events(&self) -> Vec<AgentEvent> {
        self.events.lock().unwrap().clone()
    }
}

fn assert_lines(actual: Vec<String>, expected: &[&str]) {
    let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    if actual != expected {
        panic!(
            "event sequence differs\n--- actual\n{}\n--- expected\n{}",
            actual.join("\n"),
            expected.join("\n")
        );
    }
}

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

fn add_tool() -> impl pagent::Tool {
    tool::typed("add", "Adds two integers.", |args: AddArgs, _ctx| {
        Ok(ToolOutput::text((args.a + args.b).to_string()))
    })
}

/// An agent on `faux` with the `add` tool.
fn adder(faux: Faux) -> Agent {
    Agent::builder()
        .provider(faux)
        .tool(add_tool())
        .build()
        .unwrap()
}

fn usage(input: u64, output: u64) -> Usage {
    Usage::new(input, output)
}

#[test]
fn text_only_run() {
    let faux = Faux::default().reply(FauxReply::text("Hello there").usage(usage(5, 3)));
    let agent = Agent::builder().provider(faux).model("m1").build().unwrap();
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("hi").unwrap();
    assert_lines(
        rec.lines(),
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"hi\")",
            "MessageStart(assistant)",
            "Update(text_delta {\"text\":\"Hell\"})",
            "Update(text_delta {\"text\":\"o th\"})",
            "Update(text_delta {\"text\":\"ere\"})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":5,\"output\":3,\"reasoning\":0,\"total\":8}})",
            "MessageEnd(assistant Stop \"Hello there\" calls=0)",
            "TurnEnd(1 no_tool_calls results=0)",
            "AgentEnd(no_tool_calls messages=2 error=None)",
        ],
    );
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(result.text(), "Hello there");
    assert_eq!(result.usage, usage(5, 3));
    let s = agent.snapshot();
    assert_eq!(s.messages.len(), 2);
    assert!(!s.is_streaming && !s.is_streaming_reply && s.streaming_message.is_none());
    assert_eq!(s.stop_reason, Some(RunStopReason::NoToolCalls));
    assert_eq!(s.usage, usage(5, 3));
    assert_eq!(&*s.model, "m1");
}

#[test]
fn one_tool_call_then_an_answer() {
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(FauxReply::tool_call("add", json!({"a": 2, "b": 3})).usage(usage(1, 1)))
        .reply_with(|req| {
            let last = req.messages.last().unwrap().text();
            FauxReply::text(format!("It is {last}.")).usage(usage(1, 1))
        });
    let agent = Agent::builder()
        .provider(faux.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("2+3?").unwrap();
    let u = "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":1,\"output\":1,\"reasoning\":0,\"total\":2}})";
    assert_lines(
        rec.lines(),
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"2+3?\")",
            "MessageStart(assistant)",
            "Update(tool_call_start {\"id\":\"call_1\",\"name\":\"add\"})",
            "Update(tool_call_delta {\"arguments\":\"{\\\"a\\\":2,\\\"b\\\":3}\",\"index\":0})",
            u,
            "MessageEnd(assistant ToolUse \"\" calls=1)",
            "ToolStart(call_1 add {\"a\":2,\"b\":3})",
            "ToolExecute(call_1 {\"a\":2,\"b\":3})",
            "ToolEnd(call_1 ok \"5\")",
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_1 ok \"5\")",
            "TurnEnd(1 continuing results=1)",
            "TurnStart(2)",
            "MessageStart(assistant)",
            "Update(text_delta {\"text\":\"It is 5.\"})",
            u,
            "MessageEnd(assistant Stop \"It is 5.\" calls=0)",
            "TurnEnd(2 no_tool_calls results=0)",
            "AgentEnd(no_tool_calls messages=4 error=None)",
        ],
    );
    assert_eq!(result.text(), "It is 5.");
    assert_eq!(result.usage, usage(2, 2));
    // The second request carried the tool definition, the call and its result.
    let requests = faux.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].tools[0].name, "add");
    assert_eq!(requests[1].messages.len(), 3);
    assert_eq!(requests[1].messages[2].role(), "tool_result");
}

#[test]
fn two_tool_calls_in_one_reply() {
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(
            FauxReply::text("Adding twice.")
                .then_tool_call("add", json!({"a": 1, "b": 1}))
                .then_tool_call("add", json!({"a": 2, "b": 2}))
                .usage(Usage::default()),
        )
        .reply(FauxReply::text("2 and 4.").usage(Usage::default()));
    let agent = adder(faux);
    let rec = Recorder::attach(&agent);
    agent.prompt("go").unwrap();
    let lines = rec.lines();
    // Both calls start in call order; they run in parallel, so their ends may come in either
    // order; the result messages are in call order.
    let starts: Vec<_> = lines
        .iter()
        .filter(|l| l.starts_with("ToolStart") || l.starts_with("ToolExecute"))
        .collect();
    assert_eq!(
        starts,
        [
            "ToolStart(call_1 add {\"a\":1,\"b\":1})",
            "ToolExecute(call_1 {\"a\":1,\"b\":1})",
            "ToolStart(call_2 add {\"a\":2,\"b\":2})",
            "ToolExecute(call_2 {\"a\":2,\"b\":2})",
        ]
    );
    let mut ends: Vec<_> = lines
        .iter()
        .filter(|l| l.starts_with("ToolEnd"))
        .cloned()
        .collect();
    ends.sort();
    assert_eq!(
        ends,
        ["ToolEnd(call_1 ok \"2\")", "ToolEnd(call_2 ok \"4\")"]
    );
    let mut normalized = lines.clone();
    // Put the tool section in canonical order to assert the rest exactly.
    let first_tool = normalized
        .iter()
        .position(|l| l.starts_with("ToolStart"))
        .unwrap();
    normalized[first_tool..first_tool + 6].sort();
    assert_lines(
        normalized,
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"go\")",
            "MessageStart(assistant)",
            "Update(text_delta {\"text\":\"Adding twice.\"})",
            "Update(tool_call_start {\"id\":\"call_1\",\"name\":\"add\"})",
            "Update(tool_call_delta {\"arguments\":\"{\\\"a\\\":1,\\\"b\\\":1}\",\"index\":0})",
            "Update(tool_call_start {\"id\":\"call_2\",\"name\":\"add\"})",
            "Update(tool_call_delta {\"arguments\":\"{\\\"a\\\":2,\\\"b\\\":2}\",\"index\":1})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":0,\"output\":0,\"reasoning\":0,\"total\":0}})",
            "MessageEnd(assistant ToolUse \"Adding twice.\" calls=2)",
            "ToolEnd(call_1 ok \"2\")",
            "ToolEnd(call_2 ok \"4\")",
            "ToolExecute(call_1 {\"a\":1,\"b\":1})",
            "ToolExecute(call_2 {\"a\":2,\"b\":2})",
            "ToolStart(call_1 add {\"a\":1,\"b\":1})",
            "ToolStart(call_2 add {\"a\":2,\"b\":2})",
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_1 ok \"2\")",
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_2 ok \"4\")",
            "TurnEnd(1 continuing results=2)",
            "TurnStart(2)",
            "MessageStart(assistant)",
            "Update(text_delta {\"text\":\"2 and 4.\"})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":0,\"output\":0,\"reasoning\":0,\"total\":0}})",
            "MessageEnd(assistant Stop \"2 and 4.\" calls=0)",
            "TurnEnd(2 no_tool_calls results=0)",
            "AgentEnd(no_tool_calls messages=5 error=None)",
        ],
    );
    // ToolStart of a call always precedes its ToolExecute, which precedes its ToolEnd.
    for id in ["call_1", "call_2"] {
        let at = |event: &str| {
            lines
                .iter()
                .position(|l| l.starts_with(&format!("{event}({id}")))
                .unwrap()
        };
        assert!(at("ToolStart") < at("ToolExecute") && at("ToolExecute") < at("ToolEnd"));
    }
}

/// Tool events only (MessageUpdate deltas are covered elsewhere).
fn coarse(rec: &Recorder) -> Vec<String> {
    rec.lines()
        .into_iter()
        .filter(|l| !l.starts_with("Update("))
        .collect()
}

/// The events of the two tool turns of a run with `max_turns(2)` whose model always calls
/// `add`: both turns' tools run.
const TWO_TOOL_TURNS: &[&str] = &[
    "AgentStart",
    "TurnStart(1)",
    "MessageStart(user)",
    "MessageEnd(user \"loop\")",
    "MessageStart(assistant)",
    "MessageEnd(assistant ToolUse \"\" calls=1)",
    "ToolStart(call_1 add {\"a\":1,\"b\":0})",
    "ToolExecute(call_1 {\"a\":1,\"b\":0})",
    "ToolEnd(call_1 ok \"1\")",
    "MessageStart(tool_result)",
    "MessageEnd(tool_result call_1 ok \"1\")",
    "TurnEnd(1 continuing results=1)",
    "TurnStart(2)",
    "MessageStart(assistant)",
    "MessageEnd(assistant ToolUse \"\" calls=1)",
    "ToolStart(call_2 add {\"a\":2,\"b\":0})",
    "ToolExecute(call_2 {\"a\":2,\"b\":0})",
    "ToolEnd(call_2 ok \"2\")",
    "MessageStart(tool_result)",
    "MessageEnd(tool_result call_2 ok \"2\")",
];

/// A model that calls `add` twice, then does what `third` says.
fn max_turns_agent(final_turn: Option<FinalTurn>, third: FauxReply) -> (Agent, Faux) {
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(FauxReply::tool_call("add", json!({"a": 1, "b": 0})))
        .reply(FauxReply::tool_call("add", json!({"a": 2, "b": 0})))
        .reply(third)
        .reply(FauxReply::text("never requested"));
    let mut builder = Agent::builder()
        .provider(faux.clone())
        .tool(add_tool())
        .max_turns(2);
    if let Some(f) = final_turn {
        builder = builder.final_turn(f);
    }
    (builder.build().unwrap(), faux)
}

/// `FinalTurn::Off` (pagent v1): the run ends right after the last allowed turn's tools ran.
#[test]
fn max_turns_reached_with_tool_calls_pending() {
    let (agent, faux) = max_turns_agent(Some(FinalTurn::Off), FauxReply::text("unused"));
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("loop").unwrap();
    let mut expected = TWO_TOOL_TURNS.to_vec();
    expected.extend([
        "TurnEnd(2 max_turns results=1)",
        "AgentEnd(max_turns messages=5 error=None)",
    ]);
    assert_lines(coarse(&rec), &expected);
    assert_eq!(result.stop_reason, RunStopReason::MaxTurns);
    assert_eq!(faux.remaining(), 2, "no third model call");
    // The last assistant message still holds its tool call, and it has its result.
    let s = agent.snapshot();
    let last_assistant = s
        .messages
        .iter()
        .rev()
        .find_map(|m| m.as_assistant())
        .unwrap();
    assert_eq!(last_assistant.tool_calls().count(), 1);
    assert_eq!(s.messages.last().unwrap().role(), "tool_result");
}

/// The default (pagent v4): at the limit one more model call, with the tools offered; the
/// calls it makes are not run (no `ToolStart`), they get results that say so.
#[test]
fn max_turns_final_turn_offers_the_tools_and_runs_none() {
    let (agent, faux) = max_turns_agent(
        None,
        FauxReply::tool_call("add", json!({"a": 3, "b": 0})).with_id("call_3"),
    );
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("loop").unwrap();
    let mut expected = TWO_TOOL_TURNS.to_vec();
    let not_run = "MessageEnd(tool_result call_3 err \"not run: the run reached its max_turns \
                   limit, and this was its final answer turn\")";
    expected.extend([
        "TurnEnd(2 continuing results=1)",
        "TurnStart(3)",
        "MessageStart(assistant)",
        "MessageEnd(assistant ToolUse \"\" calls=1)",
        "MessageStart(tool_result)",
        not_run,
        "TurnEnd(3 max_turns results=1)",
        "AgentEnd(max_turns messages=7 error=None)",
    ]);
    assert_lines(coarse(&rec), &expected);
    assert_eq!(result.stop_reason, RunStopReason::MaxTurns);
    assert_eq!(faux.remaining(), 1, "one final model call");
    let requests = faux.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.tools.len() == 1), "tools offered");
    assert!(agent.snapshot().pending_tool_calls.is_empty());
}

/// `FinalTurn::ToolsWithheld` (pagent v5): the final call sends no tools, and its answer
/// ends the run as any answer does.
#[test]
fn max_turns_final_turn_withholds_the_tools_and_answers() {
    let (agent, faux) = max_turns_agent(
        Some(FinalTurn::ToolsWithheld),
        FauxReply::text("the sum is 3"),
    );
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("loop").unwrap();
    let mut expected = TWO_TOOL_TURNS.to_vec();
    expected.extend([
        "TurnEnd(2 continuing results=1)",
        "TurnStart(3)",
        "MessageStart(assistant)",
        "MessageEnd(assistant Stop \"the sum is 3\" calls=0)",
        "TurnEnd(3 no_tool_calls results=0)",
        "AgentEnd(no_tool_calls messages=6 error=None)",
    ]);
    assert_lines(coarse(&rec), &expected);
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    let tools: Vec<usize> = faux.requests().iter().map(|r| r.tools.len()).collect();
    assert_eq!(tools, [1, 1, 0], "the final call withholds the tools");
}

/// A turn at the limit that answers needs no final turn.
#[test]
fn max_turns_answer_at_the_limit_ends_the_run_without_a_final_turn() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("add", json!({"a": 1, "b": 0})))
        .reply(FauxReply::text("done"))
        .reply(FauxReply::text("never requested"));
    let agent = Agent::builder()
        .provider(faux.clone())
        .tool(add_tool())
        .max_turns(2)
        .build()
        .unwrap();
    let result = agent.prompt("loop").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(faux.remaining(), 1);
}

/// pagent's default.
#[test]
fn max_turns_defaults_to_pagents_24() {
    assert_eq!(pagent::AgentBuilder::DEFAULT_MAX_TURNS, 24);
    let faux = (0..30).fold(Faux::default(), |f, i| {
        f.reply(FauxReply::tool_call("add", json!({"a": i, "b": 0})))
    });
    let agent = Agent::builder()
        .provider(faux.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let result = agent.prompt("loop").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::MaxTurns);
    assert_eq!(
        faux.requests().len(),
        25,
        "24 tool turns and the final turn"
    );
}

#[test]
fn provider_error_mid_stream_keeps_the_partial_text() {
    let faux =
        Faux::default().reply(FauxReply::text("Partial answ").then_error("connection reset"));
    let agent = Agent::builder().provider(faux).build().unwrap();
    let rec = Recorder::attach(&agent);
    let failed = agent.prompt("hi").unwrap_err();
    assert_lines(
        rec.lines(),
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"hi\")",
            "MessageStart(assistant)",
            "Update(text_delta {\"text\":\"Part\"})",
            "Update(text_delta {\"text\":\"ial \"})",
            "Update(text_delta {\"text\":\"answ\"})",
            "MessageEnd(assistant Error \"Partial answ\" calls=0)",
            "TurnEnd(1 error results=0)",
            "AgentEnd(error messages=2 error=Some(\"provider: provider error: connection reset\"))",
        ],
    );
    assert_eq!(failed.error(), &Error::Provider("connection reset".into()));
    assert_eq!(failed.kind(), ErrorKind::Provider);
    let result = failed.result();
    assert_eq!(result.stop_reason, RunStopReason::Error);
    // The error gives back what the run produced: the prompt and the partial reply.
    assert_eq!(result.messages.len(), 2);
    assert_eq!(result.text(), "Partial answ");
    let s = agent.snapshot();
    assert_eq!(s.error_kind, Some(ErrorKind::Provider));
    assert_eq!(
        s.error_message.as_deref(),
        Some("provider error: connection reset")
    );
    let reply = s.messages[1].as_assistant().unwrap();
    assert_eq!(reply.text(), "Partial answ");
    assert_eq!(reply.stop_reason, StopReason::Error);
    assert_eq!(
        reply.error_message.as_deref(),
        Some("provider error: connection reset")
    );
}

#[test]
fn errored_reply_with_tool_calls_gets_synthesized_results() {
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(FauxReply::tool_call("add", json!({"a": 1, "b": 2})).then_error("dropped"));
    let agent = adder(faux);
    let rec = Recorder::attach(&agent);
    agent.prompt("x").unwrap_err();
    assert_lines(
        coarse(&rec),
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"x\")",
            "MessageStart(assistant)",
            "MessageEnd(assistant Error \"\" calls=1)",
            "ToolStart(call_1 add {\"a\":1,\"b\":2})",
            "ToolEnd(call_1 err \"not run: the reply failed before this tool call was complete\")",
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_1 err \"not run: the reply failed before this tool call was complete\")",
            "TurnEnd(1 error results=1)",
            "AgentEnd(error messages=3 error=Some(\"provider: provider error: dropped\"))",
        ],
    );
}

#[test]
fn reply_cut_by_length_gets_synthesized_results_and_goes_on() {
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(
            FauxReply::default()
                .then_tool_call_raw("add", "{\"a\": 1, \"b")
                .cut_by_length(),
        )
        .reply(FauxReply::text("Sorry."));
    let agent = adder(faux);
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("x").unwrap();
    let lines = coarse(&rec);
    assert_eq!(lines[5], "MessageEnd(assistant Length \"\" calls=1)");
    assert!(
        lines[7].starts_with(
            "ToolEnd(call_1 err \"not run: the reply was cut at the output token limit"
        )
    );
    assert_eq!(lines[10], "TurnEnd(1 continuing results=1)");
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    // Every tool call in the transcript has exactly one result.
    assert_each_call_has_one_result(&agent);
}

fn assert_each_call_has_one_result(agent: &Agent) {
    let s = agent.snapshot();
    for m in s.messages.iter() {
        if let Some(a) = m.as_assistant() {
            for call in a.tool_calls() {
                let n = s
                    .messages
                    .iter()
                    .filter(|r| {
                        r.as_tool_result()
                            .is_some_and(|r| r.tool_call_id == call.id)
                    })
                    .count();
                assert_eq!(n, 1, "call {} has {n} results", call.id);
            }
        }
    }
}

#[test]
fn unknown_tool_becomes_an_error_result() {
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(FauxReply::tool_call("nope", json!({})))
        .reply(FauxReply::text("ok"));
    let agent = adder(faux);
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("x").unwrap();
    assert_lines(
        rec.lines(),
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"x\")",
            "MessageStart(assistant)",
            "Update(tool_call_start {\"id\":\"call_1\",\"name\":\"nope\"})",
            "Update(tool_call_delta {\"arguments\":\"{}\",\"index\":0})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":1,\"output\":1,\"reasoning\":0,\"total\":2}})",
            "MessageEnd(assistant ToolUse \"\" calls=1)",
            "ToolStart(call_1 nope {})",
            "ToolEnd(call_1 err \"error: unknown tool 'nope'; available: ['add']\")",
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_1 err \"error: unknown tool 'nope'; available: ['add']\")",
            "TurnEnd(1 continuing results=1)",
            "TurnStart(2)",
            "MessageStart(assistant)",
            "Update(text_delta {\"text\":\"ok\"})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":11,\"output\":1,\"reasoning\":0,\"total\":12}})",
            "MessageEnd(assistant Stop \"ok\" calls=0)",
            "TurnEnd(2 no_tool_calls results=0)",
            "AgentEnd(no_tool_calls messages=4 error=None)",
        ],
    );
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
}

#[test]
fn invalid_arguments_become_error_results() {
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(
            FauxReply::default()
                .then_tool_call_raw("add", "{\"a\": 1,")
                .then_tool_call("add", json!({"a": "one", "b": 2})),
        )
        .reply(FauxReply::text("ok"));
    let agent = adder(faux);
    let rec = Recorder::attach(&agent);
    agent.prompt("x").unwrap();
    assert_lines(
        rec.lines(),
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"x\")",
            "MessageStart(assistant)",
            "Update(tool_call_start {\"id\":\"call_1\",\"name\":\"add\"})",
            "Update(tool_call_delta {\"arguments\":\"{\\\"a\\\": 1,\",\"index\":0})",
            "Update(tool_call_start {\"id\":\"call_2\",\"name\":\"add\"})",
            "Update(tool_call_delta {\"arguments\":\"{\\\"a\\\":\\\"one\\\",\\\"b\\\":2}\",\"index\":1})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":1,\"output\":6,\"reasoning\":0,\"total\":7}})",
            "MessageEnd(assistant ToolUse \"\" calls=2)",
            "ToolStart(call_1 add {\"a\": 1,)",
            "ToolEnd(call_1 err \"invalid JSON in the arguments of `add`: EOF while parsing a value at line 1 column 8; the arguments must be one JSON object\")",
            "ToolStart(call_2 add {\"a\":\"one\",\"b\":2})",
            "ToolEnd(call_2 err \"invalid arguments for `add`: invalid type: string \\\"one\\\", expected i64. Expected arguments matching this JSON Schema: {\\\"properties\\\":{\\\"a\\\":{\\\"format\\\":\\\"int64\\\",\\\"type\\\":\\\"integer\\\"},\\\"b\\\":{\\\"format\\\":\\\"int64\\\",\\\"type\\\":\\\"integer\\\"}},\\\"required\\\":[\\\"a\\\",\\\"b\\\"],\\\"type\\\":\\\"object\\\"}\")",
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_1 err \"invalid JSON in the arguments of `add`: EOF while parsing a value at line 1 column 8; the arguments must be one JSON object\")",
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_2 err \"invalid arguments for `add`: invalid type: string \\\"one\\\", expected i64. Expected arguments matching this JSON Schema: {\\\"properties\\\":{\\\"a\\\":{\\\"format\\\":\\\"int64\\\",\\\"type\\\":\\\"integer\\\"},\\\"b\\\":{\\\"format\\\":\\\"int64\\\",\\\"type\\\":\\\"integer\\\"}},\\\"required\\\":[\\\"a\\\",\\\"b\\\"],\\\"type\\\":\\\"object\\\"}\")",
            "TurnEnd(1 continuing results=2)",
            "TurnStart(2)",
            "MessageStart(assistant)",
            "Update(text_delta {\"text\":\"ok\"})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":93,\"output\":1,\"reasoning\":0,\"total\":94}})",
            "MessageEnd(assistant Stop \"ok\" calls=0)",
            "TurnEnd(2 no_tool_calls results=0)",
            "AgentEnd(no_tool_calls messages=5 error=None)",
        ],
    );
    assert_each_call_has_one_result(&agent);
}

#[test]
fn tool_error_and_tool_panic_become_error_results() {
    let failing = tool::typed(
        "fail",
        "Fails.",
        |_: AddArgs, _| -> Result<ToolOutput, ToolError> { Err(ToolError::new("disk full")) },
    );
    let panicking = tool::typed(
        "boom",
        "Panics.",
        |_: AddArgs, _| -> Result<ToolOutput, ToolError> { panic!("kaboom") },
    );
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(
            FauxReply::tool_call("fail", json!({"a": 1, "b": 1}))
                .then_tool_call("boom", json!({"a": 1, "b": 1})),
        )
        .reply(FauxReply::text("recovered"));
    let agent = Agent::builder()
        .provider(faux)
        .tool(failing)
        .tool(panicking)
        .max_parallel_tools(1)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("x").unwrap();
    assert_lines(
        rec.lines(),
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"x\")",
            "MessageStart(assistant)",
            "Update(tool_call_start {\"id\":\"call_1\",\"name\":\"fail\"})",
            "Update(tool_call_delta {\"arguments\":\"{\\\"a\\\":1,\\\"b\\\":1}\",\"index\":0})",
            "Update(tool_call_start {\"id\":\"call_2\",\"name\":\"boom\"})",
            "Update(tool_call_delta {\"arguments\":\"{\\\"a\\\":1,\\\"b\\\":1}\",\"index\":1})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":1,\"output\":6,\"reasoning\":0,\"total\":7}})",
            "MessageEnd(assistant ToolUse \"\" calls=2)",
            "ToolStart(call_1 fail {\"a\":1,\"b\":1})",
            "ToolExecute(call_1 {\"a\":1,\"b\":1})",
            "ToolEnd(call_1 err \"disk full\")",
            "ToolStart(call_2 boom {\"a\":1,\"b\":1})",
            "ToolExecute(call_2 {\"a\":1,\"b\":1})",
            "ToolEnd(call_2 err \"the tool `boom` panicked: kaboom\")",
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_1 err \"disk full\")",
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_2 err \"the tool `boom` panicked: kaboom\")",
            "TurnEnd(1 continuing results=2)",
            "TurnStart(2)",
            "MessageStart(assistant)",
            "Update(text_delta {\"text\":\"recovered\"})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":10,\"output\":2,\"reasoning\":0,\"total\":12}})",
            "MessageEnd(assistant Stop \"recovered\" calls=0)",
            "TurnEnd(2 no_tool_calls results=0)",
            "AgentEnd(no_tool_calls messages=5 error=None)",
        ],
    );
    assert_eq!(result.text(), "recovered");
}

#[test]
fn question_mark_on_any_error_inside_a_tool_becomes_an_error_result() {
    #[derive(Deserialize, JsonSchema)]
    struct NumberArgs {
        n: String,
    }
    // `?` on a `ParseIntError` compiles: every error converts into a `ToolError`.
    let parse = tool::typed("parse", "Parses an integer.", |args: NumberArgs, _| {
        let n: i64 = args.n.parse()?;
        Ok(ToolOutput::text(n.to_string()))
    });
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("parse", json!({"n": "12"}))
                .then_tool_call("parse", json!({"n": "twelve"})),
        )
        .reply(FauxReply::text("done"));
    let agent = Agent::builder()
        .provider(faux)
        .tool(parse)
        .max_parallel_tools(1)
        .build()
        .unwrap();
    agent.prompt("x").unwrap();
    let results: Vec<(String, bool)> = agent
        .snapshot()
        .messages
        .iter()
        .filter_map(|m| match &**m {
            Message::ToolResult(r) => Some((m.text(), r.is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("12".to_owned(), false),
            ("invalid digit found in string".to_owned(), true)
        ]
    );
}

#[test]
fn listener_panic_is_caught_and_reported() {
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(FauxReply::text("fine"));
    let agent = Agent::builder().provider(faux).build().unwrap();
    let _bad = agent.subscribe(|e| {
        if matches!(e, AgentEvent::TurnStart { .. }) {
            panic!("listener bug");
        }
    });
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("hi").unwrap();
    // The later listener saw every event, the run finished normally.
    assert_lines(
        rec.lines(),
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"hi\")",
            "MessageStart(assistant)",
            "Update(text_delta {\"text\":\"fine\"})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":1,\"output\":1,\"reasoning\":0,\"total\":2}})",
            "MessageEnd(assistant Stop \"fine\" calls=0)",
            "TurnEnd(1 no_tool_calls results=0)",
            "AgentEnd(no_tool_calls messages=2 error=None)",
        ],
    );
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    let s = agent.snapshot();
    assert_eq!(s.listener_panics, 1);
    assert!(
        s.last_listener_panic
            .as_deref()
            .unwrap()
            .ends_with("panicked on TurnStart: listener bug")
    );
}

#[test]
fn second_prompt_while_running_is_busy() {
    // The model answers only when the test lets it, so the run is surely active meanwhile.
    let (release, gate) = crossbeam_channel::bounded::<()>(1);
    let faux = Faux::default().chunk_chars(100).reply_with(move |_| {
        gate.recv_timeout(Duration::from_secs(20)).unwrap();
        FauxReply::text("slow").usage(Usage::default())
    });
    let agent = Arc::new(Agent::builder().provider(faux).build().unwrap());
    let rec = Recorder::attach(&agent);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let _sub = agent.subscribe(move |e| {
        if matches!(e, AgentEvent::AgentStart) {
            let _ = tx.send(());
        }
    });
    let a2 = agent.clone();
    let runner = std::thread::spawn(move || a2.prompt("first"));
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // Refused before a run started: the error alone, with an empty result.
    let busy = agent.prompt("second").unwrap_err();
    assert_eq!(busy.error(), &Error::Busy);
    assert_eq!(busy.kind(), ErrorKind::Busy);
    assert!(busy.result().messages.is_empty());
    assert_eq!(agent.continue_run().unwrap_err().into_error(), Error::Busy);
    assert!(agent.is_running());
    release.send(()).unwrap();
    let first = runner.join().unwrap().unwrap();
    assert_eq!(first.text(), "slow");
    // The busy calls left no trace: one run, as if they never happened.
    assert_lines(
        rec.lines(),
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"first\")",
            "MessageStart(assistant)",
            "Update(text_delta {\"text\":\"slow\"})",
            "Update(usage {\"usage\":{\"cache_read\":0,\"cache_write\":0,\"input\":0,\"output\":0,\"reasoning\":0,\"total\":0}})",
            "MessageEnd(assistant Stop \"slow\" calls=0)",
            "TurnEnd(1 no_tool_calls results=0)",
            "AgentEnd(no_tool_calls messages=2 error=None)",
        ],
    );
    assert!(!agent.is_running());
}

#[test]
fn empty_reply_ends_with_empty_response() {
    let agent = Agent::builder()
        .provider(Faux::default().reply(FauxReply::empty()))
        .build()
        .unwrap();
    let result = agent.prompt("hi").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EmptyResponse);
}

#[test]
fn exhausted_script_is_a_clear_error_with_one_agent_end() {
    let agent = Agent::builder().provider(Faux::default()).build().unwrap();
    let rec = Recorder::attach(&agent);
    let failed = agent.prompt("hi").unwrap_err();
    assert_eq!(failed.error(), &Error::ScriptExhausted);
    let lines = rec.lines();
    assert_eq!(lines.iter().filter(|l| *l == "AgentStart").count(), 1);
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("AgentEnd")).count(),
        1
    );
    assert_eq!(
        lines.last().unwrap(),
        "AgentEnd(error messages=2 error=Some(\"provider: the scripted provider has no reply left\"))"
    );
}

#[test]
fn listener_may_call_snapshot_abort_subscribe_and_unsubscribe() {
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(FauxReply::text("one"))
        .reply(FauxReply::text("two"));
    let agent = Arc::new(Agent::builder().provider(faux).build().unwrap());
    let handle = agent.handle();
    let seen_streaming = Arc::new(AtomicBool::new(false));
    let late_calls = Arc::new(AtomicUsize::new(0));
    let (seen, late) = (seen_streaming.clone(), late_calls.clone());
    let _sub = agent.subscribe(move |e| match e {
        AgentEvent::MessageUpdate { message, .. } => {
            // The snapshot already holds the event being handled.
            let s = handle.snapshot();
            assert_eq!(s.streaming_message.as_ref(), Some(message));
            seen.store(true, Ordering::SeqCst);
        }
        AgentEvent::TurnStart { .. } => {
            let late = late.clone();
            let sub = handle.subscribe(move |_| {
                late.fetch_add(1, Ordering::SeqCst);
            });
            assert!(handle.unsubscribe(sub.id()));
            handle.subscribe(|_| {}).keep();
        }
        AgentEvent::TurnEnd { .. } => {
            handle.abort();
        }
        _ => {}
    });
    let r = agent.prompt("hi").unwrap();
    assert!(seen_streaming.load(Ordering::SeqCst));
    assert_eq!(late_calls.load(Ordering::SeqCst), 0);
    // The abort came after the run's last turn ended, but before the run ended: an abort
    // that returned true always cancels its run (no further model call either way).
    assert_eq!(r.stop_reason, RunStopReason::Cancelled);
    assert_eq!(agent.prompt("again").unwrap().text(), "two");
}

/// The run thread delivers each event to the listener list it used last while no
/// `subscribe` or `unsubscribe` changed it: a listener subscribed mid-run (by a listener, at
/// a call's `ToolStart`) gets every event from the next one on, unsubscribed (at the call's
/// `ToolEnd`, by the listener called before it) it gets none after, and what it holds is let
/// go by the time the run ends.
#[test]
fn a_listener_subscribed_mid_run_sees_exactly_the_events_until_it_is_removed() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("add", json!({"a": 40, "b": 2})))
        .reply(FauxReply::text("42"));
    let agent = adder(faux);
    let rec = Recorder::attach(&agent);
    let handle = agent.handle();
    let seen: Arc<Mutex<Vec<AgentEvent>>> = Arc::default();
    // What the listener subscribed mid-run holds, watched through a weak reference.
    let held: Arc<Mutex<Option<std::sync::Weak<()>>>> = Arc::default();
    let late = Arc::new(Mutex::new(None));
    let (seen2, held2, late2) = (seen.clone(), held.clone(), late.clone());
    let _sub = agent.subscribe(move |e| match e {
        AgentEvent::ToolStart { .. } => {
            let (seen, held) = (seen2.clone(), Arc::new(()));
            *held2.lock().unwrap() = Some(Arc::downgrade(&held));
            let sub = handle.subscribe(move |e| {
                let _ = &held;
                seen.lock().unwrap().push(e.clone());
            });
            *late2.lock().unwrap() = Some(sub.id());
            sub.keep();
        }
        AgentEvent::ToolEnd { .. } => {
            let id = late2
                .lock()
                .unwrap()
                .take()
                .expect("subscribed at ToolStart");
            assert!(handle.unsubscribe(id));
        }
        _ => {}
    });
    assert_eq!(agent.prompt("x").unwrap().text(), "42");
    let events = rec.events();
    let start = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ToolStart { .. }))
        .unwrap();
    let end = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ToolEnd { .. }))
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), events[start + 1..end]);
    assert!(!seen.lock().unwrap().is_empty());
    let held = held
        .lock()
        .unwrap()
        .clone()
        .expect("subscribed at ToolStart");
    assert!(held.upgrade().is_none(), "the removed listener was dropped");
}

#[test]
fn channel_subscription_delivers_every_event_in_order() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("add", json!({"a": 40, "b": 2})))
        .reply(FauxReply::text("The answer is 42, as computed."));
    let agent = adder(faux);
    let rec = Recorder::attach(&agent);
    // A tiny capacity: the run must wait for the consumer, never drop.
    let rx = agent.subscribe_channel(1);
    let consumer = std::thread::spawn(move || {
        let mut got = Vec::new();
        while let Ok(e) = rx.recv_timeout(Duration::from_secs(10)) {
            std::thread::sleep(Duration::from_micros(200));
            let end = matches!(e, AgentEvent::AgentEnd { .. });
            got.push(e);
            if end {
                break;
            }
        }
        got
    });
    agent.prompt("x").unwrap();
    let got = consumer.join().unwrap();
    assert_eq!(got, rec.events());
    assert!(got.len() > 20);
}

#[test]
fn dropped_receiver_unsubscribes_itself() {
    let faux = Faux::default()
        .reply(FauxReply::text("first run"))
        .reply(FauxReply::text("second run"));
    let agent = Agent::builder().provider(faux).build().unwrap();
    let rx = agent.subscribe_channel(0);
    drop(rx);
    // With a rendezvous channel and no receiver, a listener that did not remove itself would
    // block or fail every event; the runs complete.
    agent.prompt("a").unwrap();
    let r = agent.prompt("b").unwrap();
    assert_eq!(r.text(), "second run");
}

#[test]
fn dropping_a_subscription_removes_its_listener_and_keep_keeps_it() {
    let faux = Faux::default()
        .reply(FauxReply::text("first run"))
        .reply(FauxReply::text("second run"))
        .reply(FauxReply::text("third run"));
    let agent = Agent::builder().provider(faux).build().unwrap();
    let counter = |count: &Arc<AtomicUsize>| {
        let count = count.clone();
        move |e: &AgentEvent| {
            if matches!(e, AgentEvent::AgentEnd { .. }) {
                count.fetch_add(1, Ordering::SeqCst);
            }
        }
    };
    let (guarded, kept, unsubscribed) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let guard = agent.subscribe(counter(&guarded));
    let kept_id = agent.subscribe(counter(&kept)).keep();
    let explicit = agent.subscribe(counter(&unsubscribed));
    agent.prompt("a").unwrap();
    drop(guard);
    assert!(explicit.unsubscribe());
    agent.prompt("b").unwrap();
    // The kept listener stays until it is removed by its id.
    assert!(agent.unsubscribe(kept_id));
    agent.prompt("c").unwrap();
    let counts = [&guarded, &kept, &unsubscribed].map(|c| c.load(Ordering::SeqCst));
    assert_eq!(counts, [1, 2, 1]);
}

#[test]
fn snapshots_stay_consistent_under_load() {
    // 100,000+ deltas and several tool calls, three readers checking invariants throughout.
    let long = "abcdefghij".repeat(12_000); // 120,000 chars, one char a delta
    let faux = Faux::default()
        .chunk_chars(1)
        .reply(
            FauxReply::text(long.clone())
                .then_tool_call("slow_add", json!({"a": 1, "b": 2}))
                .then_tool_call("slow_add", json!({"a": 3, "b": 4})),
        )
        .reply(
            FauxReply::tool_call("slow_add", json!({"a": 5, "b": 6}))
                .then_tool_call("slow_add", json!({"a": 7, "b": 8}))
                .then_tool_call("slow_add", json!({"a": 9, "b": 10})),
        )
        .reply(FauxReply::text("done"));
    // Tools that take a little while, with progress, so readers see calls pending.
    let slow_add = tool::typed("slow_add", "Adds, slowly.", |args: AddArgs, ctx| {
        for step in 0..5 {
            ctx.update(format!("step {step}"));
            std::thread::sleep(Duration::from_millis(2 + (args.a as u64 % 3)));
        }
        Ok(ToolOutput::text((args.a + args.b).to_string()))
    });
    let agent = Arc::new(
        Agent::builder()
            .provider(faux)
            .tool(slow_add)
            .build()
            .unwrap(),
    );
    let done = Arc::new(AtomicBool::new(false));
    let seen_pending = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (agent, done) = (agent.clone(), done.clone());
            let seen_pending = seen_pending.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(120);
                let (mut last_len, mut last_msgs, mut checks) = (0usize, 0usize, 0u64);
                let mut last_streaming_count = None;
                while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                    let s = agent.snapshot();
                    checks += 1;
                    assert_eq!(s.is_streaming_reply, s.streaming_message.is_some());
                    assert!(s.messages.len() >= last_msgs, "the transcript shrank");
                    match &s.streaming_message {
                        Some(p) => {
                            // Within one message the partial only grows.
                            if last_streaming_count == Some(s.messages.len()) {
                                assert!(p.len() >= last_len, "partial shrank");
                            }
                            last_len = p.len();
                            last_streaming_count = Some(s.messages.len());
                        }
                        None => last_streaming_count = None,
                    }
                    // Pending calls are exactly the calls started and not ended. Calls
                    // start in call order, so the started ones are a prefix of the last
                    // reply's calls: pending and ended are disjoint and together make up
                    // that prefix.
                    let ended: Vec<String> = s
                        .tool_results
                        .iter()
                        .map(|r| r.tool_call_id.clone())
                        .collect();
                    let pending: Vec<String> = s
                        .pending_tool_calls
                        .iter()
                        .map(|p| p.call.id.clone())
                        .collect();
                    let calls: Vec<String> = s
                        .messages
                        .iter()
                        .rev()
                        .find_map(|m| m.as_assistant())
                        .map(|a| a.tool_calls().map(|c| c.id.clone()).collect())
                        .unwrap_or_default();
                    let started = pending.len() + ended.len();
                    assert!(started <= calls.len(), "more calls than the reply made");
                    let mut union: Vec<&String> = pending.iter().chain(&ended).collect();
                    union.sort();
                    let mut prefix: Vec<&String> = calls[..started].iter().collect();
                    prefix.sort();
                    assert_eq!(union, prefix, "pending + ended is not the started calls");
                    if !pending.is_empty() {
                        assert!(
                            !s.is_streaming_reply,
                            "tools run only after the reply ended"
                        );
                        seen_pending.fetch_add(1, Ordering::Relaxed);
                    }
                    last_msgs = s.messages.len();
                }
                checks
            })
        })
        .collect();
    let rec_starts = Arc::new(AtomicUsize::new(0));
    let r2 = rec_starts.clone();
    let _sub = agent.subscribe(move |e| {
        if matches!(e, AgentEvent::MessageUpdate { .. }) {
            r2.fetch_add(1, Ordering::Relaxed);
        }
    });
    let result = agent.prompt("stress").unwrap();
    done.store(true, Ordering::SeqCst);
    let checks: Vec<u64> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    assert!(checks.iter().all(|&c| c > 0), "{checks:?}");
    assert!(
        seen_pending.load(Ordering::Relaxed) > 0,
        "the readers never saw a call pending"
    );
    assert!(rec_starts.load(Ordering::Relaxed) >= 100_000);
    assert_eq!(result.text(), "done");
    let s = agent.snapshot();
    assert_eq!(s.messages[1].as_assistant().unwrap().text(), long);
    assert_eq!(s.messages.len(), 9);
    assert_each_call_has_one_result(&agent);
}

#[test]
fn tool_updates_become_events_and_progress_in_the_state() {
    #[derive(Deserialize, JsonSchema)]
    struct Steps {
        n: u32,
    }
    let seen_progress = Arc::new(Mutex::new(Vec::new()));
    let progress = tool::typed("count", "Counts.", |a: Steps, ctx| {
        for i in 1..=a.n {
            ctx.update(format!("{i}/{}", a.n));
        }
        Ok(ToolOutput::text("counted").with_details(json!({"n": a.n})))
    });
    let faux = Faux::default()
        .chunk_chars(100)
        .reply(FauxReply::tool_call("count", json!({"n": 3})))
        .reply(FauxReply::text("ok"));
    let agent = Agent::builder()
        .provider(faux)
        .tool(progress)
        .build()
        .unwrap();
    let handle = agent.handle();
    let sink = seen_progress.clone();
    let _sub = agent.subscribe(move |e| {
        if let AgentEvent::ToolUpdate { .. } = e {
            let s = handle.snapshot();
            let p = s.pending_tool_calls[0].progress.clone().unwrap();
            sink.lock().unwrap().push(p.to_text());
        }
    });
    let rec = Recorder::attach(&agent);
    agent.prompt("count").unwrap();
    assert_lines(
        coarse(&rec)[6..13].to_vec(),
        &[
            "ToolStart(call_1 count {\"n\":3})",
            "ToolExecute(call_1 {\"n\":3})",
            "ToolUpdate(call_1 \"1/3\")",
            "ToolUpdate(call_1 \"2/3\")",
            "ToolUpdate(call_1 \"3/3\")",
            "ToolEnd(call_1 ok \"counted\")",
            "MessageStart(tool_result)",
        ],
    );
    assert_eq!(*seen_progress.lock().unwrap(), ["1/3", "2/3", "3/3"]);
    let s = agent.snapshot();
    let result = s.messages[2].as_tool_result().unwrap();
    assert_eq!(result.details, Some(json!({"n": 3})));
}

#[test]
fn follow_up_survives_an_abort_between_turns() {
    let faux = Faux::new([FauxReply::text("one"), FauxReply::text("never")]);
    let agent = Agent::builder().provider(faux.clone()).build().unwrap();
    agent.follow_up("later").unwrap();
    let handle = agent.handle();
    let _abort = agent.subscribe(move |e| {
        if let AgentEvent::TurnEnd {
            stop_reason: RunStopReason::Continuing,
            ..
        } = e
        {
            handle.abort();
        }
    });
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("first").unwrap();
    assert_lines(
        coarse(&rec),
        &[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            "MessageEnd(user \"first\")",
            "MessageStart(assistant)",
            "MessageEnd(assistant Stop \"one\" calls=0)",
            "TurnEnd(1 continuing results=0)",
            "AgentEnd(cancelled messages=2 error=None)",
        ],
    );
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert_eq!(faux.remaining(), 1, "no model call after the abort");
    // The follow-up was not delivered, so it is still queued for the next run.
    let s = agent.snapshot();
    assert_eq!(s.follow_up_queue.len(), 1);
    assert_eq!(s.follow_up_queue[0].text(), "later");
    assert!(s.messages.iter().all(|m| m.text() != "later"));
}

#[test]
fn a_reply_the_provider_ends_with_error_carries_the_error() {
    let faux = Faux::new([FauxReply::text("filtered").stop(StopReason::Error)]);
    let agent = Agent::builder().provider(faux).build().unwrap();
    let rec = Recorder::attach(&agent);
    let failed = agent.prompt("hi").unwrap_err();
    assert_eq!(failed.result().stop_reason, RunStopReason::Error);
    let expected = Error::Provider("the provider ended the reply with an error".into());
    assert_eq!(failed.error(), &expected);
    assert_eq!(Error::from(failed), expected);
    assert_eq!(
        rec.lines().last().unwrap(),
        "AgentEnd(error messages=2 error=Some(\"provider: provider error: the provider ended the reply with an error\"))"
    );
    assert_eq!(
        agent.snapshot().error_message.as_deref(),
        Some("provider error: the provider ended the reply with an error")
    );
}

#[test]
fn settings_changed_during_a_run_show_in_the_state_when_it_ends() {
    let faux = Faux::new([FauxReply::text("first"), FauxReply::text("second")]);
    let agent = Arc::new(
        Agent::builder()
            .provider(faux.clone())
            .model("old")
            .build()
            .unwrap(),
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (a2, sink) = (Arc::downgrade(&agent), seen.clone());
    let _sub = agent.subscribe(move |e| {
        let Some(agent) = a2.upgrade() else { return };
        if let AgentEvent::TurnStart { .. } = e {
            agent.set_model("new");
            agent.set_system_prompt("be new");
        }
        sink.lock()
            .unwrap()
            .push(agent.snapshot().model.to_string());
    });
    agent.prompt("one").unwrap();
    // The run kept its model, and so did the state while it ran.
    assert!(seen.lock().unwrap().iter().all(|m| m == "old"));
    let s = agent.snapshot();
    assert_eq!((&*s.model, &*s.system_prompt), ("new", "be new"));
    agent.prompt("two").unwrap();
    let requests = faux.requests();
    assert_eq!(
        (requests[0].model.as_str(), requests[1].model.as_str()),
        ("old", "new")
    );
    assert_eq!(requests[1].system_prompt, "be new");
}

/// A tool with its own definition (a hand-written schema, say).
struct Custom;

impl pagent::Tool for Custom {
    fn name(&self) -> &str {
        "custom"
    }
    fn description(&self) -> &str {
        "from name and description"
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn execute(
        &self,
        _: serde_json::Value,
        _: &pagent::ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ran"))
    }
    fn definition(&self) -> pagent::llm::ToolDefinition {
        pagent::llm::ToolDefinition::new(
            "custom",
            "its own definition",
            json!({"type": "object", "properties": {}}),
        )
    }
}

#[test]
fn a_tools_own_definition_is_what_the_model_sees() {
    let faux = Faux::new([FauxReply::text("ok")]);
    let agent = Agent::builder()
        .provider(faux.clone())
        .tool(Custom)
        .build()
        .unwrap();
    agent.prompt("hi").unwrap();
    let sent = &faux.requests()[0].tools;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].description, "its own definition");
    assert_eq!(agent.snapshot().tools[0].description, "its own definition");
}

#[test]
fn a_before_turn_switch_keeps_a_setting_changed_meanwhile() {
    let faux = Faux::new([
        FauxReply::tool_call("add", json!({"a": 1, "b": 1})),
        FauxReply::text("done"),
    ]);
    let agent = Arc::new(
        Agent::builder()
            .provider(faux)
            .tool(add_tool())
            .model("old")
            .before_turn(|setup| {
                if setup.turn == 2 {
                    setup.thinking = pagent::llm::ThinkingLevel::High;
                }
            })
            .build()
            .unwrap(),
    );
    let weak = Arc::downgrade(&agent);
    let _sub = agent.subscribe(move |e| {
        if let (AgentEvent::TurnStart { turn: 1 }, Some(agent)) = (e, weak.upgrade()) {
            agent.set_model("new");
        }
    });
    agent.prompt("go").unwrap();
    let s = agent.snapshot();
    // The hook switched the thinking level only; the model set meanwhile stays.
    assert_eq!(&*s.model, "new");
    assert_eq!(s.thinking, pagent::llm::ThinkingLevel::High);
}

#[test]
fn run_result_shares_the_transcripts_messages() {
    let faux = Faux::new([
        FauxReply::tool_call("add", json!({"a": 1, "b": 1})),
        FauxReply::text("done"),
    ]);
    let agent = adder(faux);
    let result = agent.prompt("go").unwrap();
    let s = agent.snapshot();
    assert_eq!(result.messages.len(), s.messages.len());
    for (ours, theirs) in result.messages.iter().zip(s.messages.iter()) {
        assert!(Arc::ptr_eq(ours, theirs), "{:?}", ours.role());
    }
}

#[test]
fn a_handle_outliving_its_agent_gives_messages_back() {
    let agent = Agent::builder()
        .provider(Faux::new([FauxReply::text("hi")]))
        .build()
        .unwrap();
    agent.prompt("hello").unwrap();
    let handle = agent.handle();
    drop(agent);
    assert_eq!(
        handle.steer("too late").unwrap_err(),
        pagent::Refused(Box::new(Message::user("too late")))
    );
    assert_eq!(handle.follow_up("later").unwrap_err().0.text(), "later");
    assert!(!handle.abort());
    assert!(!handle.is_running());
    // The last state is still readable.
    assert_eq!(handle.snapshot().messages.len(), 2);
}
