//! Reading pagent's wire: every capture of pagent 0.7.30 decodes and mirrors to the
//! conversation it holds, our own pagent dialect lines read back to what they were written
//! from, bad lines are typed errors; and (on request) a Python pagent agent streams into the
//! `pagent_mirror` example.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use pagent::wire::{Decoder, Dialect, Mirror, Writer};
use pagent::{
    AgentEvent, AssistantMessage, ContentBlock, ErrorKind, List, Message, RunStopReason, State,
    StopReason, ToolCall, ToolResultMessage, Usage,
};
use serde_json::Value;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pagent-wire");

fn capture(name: &str) -> String {
    let path = Path::new(DATA)
        .join("captures")
        .join(format!("{name}.jsonl"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every capture's name (`v1_text`, ..), sorted.
fn captures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(Path::new(DATA).join("captures"))
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            path.file_stem().unwrap().to_str().unwrap().to_owned()
        })
        .collect();
    names.sort();
    names
}

/// One event, short: the name, with the role of a message, the number and stop reason of a
/// `TurnEnd` (and its count of results), the stop reason of an `AgentEnd` (and its count of
/// messages).
fn short(e: &AgentEvent) -> String {
    match e {
        AgentEvent::TurnStart { turn } => format!("TurnStart{turn}"),
        AgentEvent::MessageStart { message } => format!("Start:{}", message.role()),
        AgentEvent::MessageEnd { message } => format!("End:{}", message.role()),
        AgentEvent::MessageUpdate { .. } => "Update".into(),
        AgentEvent::TurnEnd {
            turn,
            stop_reason,
            tool_results,
            ..
        } => format!("TurnEnd{turn}:{stop_reason}:{}", tool_results.len()),
        AgentEvent::AgentEnd {
            stop_reason,
            messages,
            ..
        } => format!("AgentEnd:{stop_reason}:{}", messages.len()),
        e => e.name().into(),
    }
}

/// Mirrors `text` with `mirror`, returning the events.
fn mirror_all(mirror: &mut Mirror, text: &str) -> Vec<AgentEvent> {
    let mut events = Vec::new();
    mirror
        .read_lines(text.as_bytes(), |e, _| events.push(e.clone()))
        .unwrap();
    events
}

fn user(text: &str) -> Arc<Message> {
    Arc::new(Message::user(text))
}

fn reply(blocks: Vec<ContentBlock>, usage: Usage) -> Arc<Message> {
    let stop = if blocks
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolCall(_)))
    {
        StopReason::ToolUse
    } else {
        StopReason::Stop
    };
    Arc::new(Message::Assistant(
        AssistantMessage::new(blocks, stop).with_usage(usage),
    ))
}

fn text(t: &str, usage: Usage) -> Arc<Message> {
    reply(vec![ContentBlock::text(t)], usage)
}

fn echo_call(id: &str, arg: &str) -> ContentBlock {
    ContentBlock::ToolCall(ToolCall::new(id, "echo", format!(r#"{{"text": "{arg}"}}"#)))
}

fn result(id: &str, name: &str, content: &str, is_error: bool) -> Arc<ToolResultMessage> {
    Arc::new(ToolResultMessage::new(id, name, content).with_is_error(is_error))
}

fn as_message(r: &Arc<ToolResultMessage>) -> Arc<Message> {
    Arc::new(Message::ToolResult((**r).clone()))
}

/// `prompt`, then a turn for each of `args` that calls `echo` once with it (ids `call_0`,
/// `call_1`, ..) and gets its result, each reply with `usage`; and the last result.
fn echoed(
    prompt: Arc<Message>,
    args: &[&str],
    usage: Usage,
) -> (Vec<Arc<Message>>, Arc<ToolResultMessage>) {
    let mut messages = vec![prompt];
    let mut last = None;
    for (i, arg) in args.iter().enumerate() {
        let id = format!("call_{i}");
        let r = result(&id, "echo", arg, false);
        messages.push(reply(vec![echo_call(&id, arg)], usage));
        messages.push(as_message(&r));
        last = Some(r);
    }
    (messages, last.expect("at least one call"))
}

/// The state a mirror of one whole pagent run ends in.
fn ended(
    messages: Vec<Arc<Message>>,
    turn: u32,
    stop: RunStopReason,
    tool_results: Vec<Arc<ToolResultMessage>>,
) -> State {
    let usage = messages
        .iter()
        .filter_map(|m| m.as_assistant())
        .fold(Usage::default(), |sum, m| sum + m.usage);
    let mut s = State::default();
    s.messages = messages.into_iter().collect::<List<_>>();
    s.turn = turn;
    s.stop_reason = Some(stop);
    s.tool_results = tool_results.into_iter().collect();
    s.run_usage = usage;
    s.usage = usage;
    s
}

/// What each capture holds: the events it stands for and the state its mirror ends in.
fn expected(name: &str) -> (&'static str, State) {
    let (version, scenario) = name.split_once('_').unwrap();
    // pagent v1 asks for no usage in its stream; v4 gets the mock's counts.
    let u = |output: u64| {
        if version == "v1" {
            Usage::default()
        } else {
            Usage::new(10, output)
        }
    };
    let prompt = user("Say hello.");
    let tool_turn = "AgentStart TurnStart1 Start:user End:user Start:assistant End:assistant \
                     ToolStart ToolEnd Start:tool_result End:tool_result TurnEnd1:continuing:1";
    match scenario {
        "text" => (
            "AgentStart TurnStart1 Start:user End:user Start:assistant Update Update Update \
             Update End:assistant TurnEnd1:no_tool_calls:0 AgentEnd:no_tool_calls:2",
            ended(
                vec![prompt, text("Hello, world!", u(4))],
                1,
                RunStopReason::NoToolCalls,
                vec![],
            ),
        ),
        "reasoning" => (
            "AgentStart TurnStart1 Start:user End:user Start:assistant Update Update Update \
             End:assistant TurnEnd1:no_tool_calls:0 AgentEnd:no_tool_calls:2",
            ended(
                vec![
                    prompt,
                    reply(
                        vec![
                            ContentBlock::thinking("thinking"),
                            ContentBlock::text("Done."),
                        ],
                        u(3),
                    ),
                ],
                1,
                RunStopReason::NoToolCalls,
                vec![],
            ),
        ),
        "tool" | "steer_after_turnend" => {
            let (messages, _) = echoed(prompt, &["ping"], u(1));
            // The steering message pagent v4 adds is not on its wire (the model counts it).
            let answer = if scenario == "tool" {
                "echo said: ping"
            } else {
                "user messages: 2"
            };
            let tool = if scenario == "tool" { 2 } else { 1 };
            let events = if scenario == "tool" {
                "TurnStart2 Start:assistant Update Update End:assistant \
                 TurnEnd2:no_tool_calls:0 AgentEnd:no_tool_calls:4"
            } else {
                "TurnStart2 Start:assistant Update End:assistant \
                 TurnEnd2:no_tool_calls:0 AgentEnd:no_tool_calls:4"
            };
            (
                leak(format!("{tool_turn} {events}")),
                ended(
                    [messages, vec![text(answer, u(tool))]].concat(),
                    2,
                    RunStopReason::NoToolCalls,
                    vec![],
                ),
            )
        }
        "tool2" => {
            let (a, b) = (
                result("call_a", "echo", "a", false),
                result("call_b", "echo", "b", false),
            );
            (
                "AgentStart TurnStart1 Start:user End:user Start:assistant End:assistant \
                 ToolStart ToolEnd ToolStart ToolEnd Start:tool_result End:tool_result \
                 Start:tool_result End:tool_result TurnEnd1:continuing:2 TurnStart2 \
                 Start:assistant Update End:assistant TurnEnd2:no_tool_calls:0 \
                 AgentEnd:no_tool_calls:5",
                ended(
                    vec![
                        prompt,
                        reply(
                            vec![echo_call("call_a", "a"), echo_call("call_b", "b")],
                            u(2),
                        ),
                        as_message(&a),
                        as_message(&b),
                        text("both done", u(1)),
                    ],
                    2,
                    RunStopReason::NoToolCalls,
                    vec![],
                ),
            )
        }
        "tool_error" => {
            let nope = result(
                "call_x",
                "nope",
                "error: unknown tool 'nope'; available: ['echo']",
                true,
            );
            (
                leak(format!(
                    "{tool_turn} TurnStart2 Start:assistant Update End:assistant \
                     TurnEnd2:no_tool_calls:0 AgentEnd:no_tool_calls:4"
                )),
                ended(
                    vec![
                        prompt,
                        reply(
                            vec![ContentBlock::ToolCall(ToolCall::new(
                                "call_x", "nope", "{}",
                            ))],
                            u(1),
                        ),
                        as_message(&nope),
                        text("recovered", u(1)),
                    ],
                    2,
                    RunStopReason::NoToolCalls,
                    vec![],
                ),
            )
        }
        "maxturns" if version == "v1" => {
            // v1: the last turn ran its tools and ended `stopped: false`; its `RunEnd`
            // says the run stopped there.
            let (messages, r1) = echoed(prompt, &["again 0", "again 1"], u(1));
            (
                leak(format!(
                    "{tool_turn} TurnStart2 Start:assistant End:assistant ToolStart ToolEnd \
                     Start:tool_result End:tool_result TurnEnd2:max_turns:1 AgentEnd:max_turns:5"
                )),
                ended(messages, 2, RunStopReason::MaxTurns, vec![r1]),
            )
        }
        "maxturns" => {
            // v4: two tool turns (pagent writes no `TurnEnd` for the second), then the
            // synthesis turn, whose call does not run.
            let (mut messages, _) = echoed(prompt, &["again 0", "again 1"], u(1));
            messages.push(reply(vec![echo_call("call_2", "again 2")], u(1)));
            (
                leak(format!(
                    "{tool_turn} TurnStart2 Start:assistant End:assistant ToolStart ToolEnd \
                     Start:tool_result End:tool_result TurnEnd2:continuing:1 TurnStart3 \
                     Start:assistant End:assistant TurnEnd3:max_turns:0 AgentEnd:max_turns:6"
                )),
                ended(messages, 3, RunStopReason::MaxTurns, vec![]),
            )
        }
        // Cancelled before the reply: the turn opens (pagent writes no `TurnBegin` when the
        // cancel comes right after `RunBegin`) and ends with an empty reply that is not in
        // the transcript.
        "cancel_after_runbegin" | "cancel_after_turnbegin" => (
            "AgentStart TurnStart1 Start:user End:user TurnEnd1:cancelled:0 AgentEnd:cancelled:1",
            ended(vec![prompt], 1, RunStopReason::Cancelled, vec![]),
        ),
        // The call started and has no result on pagent's wire.
        "cancel_after_toolcallbegin" => (
            "AgentStart TurnStart1 Start:user End:user Start:assistant End:assistant ToolStart \
             TurnEnd1:cancelled:0 AgentEnd:cancelled:2",
            ended(
                vec![prompt, reply(vec![echo_call("call_0", "ping")], u(1))],
                1,
                RunStopReason::Cancelled,
                vec![],
            ),
        ),
        // pagent writes a second `TurnEnd` for the turn that ended `continuing`: the run
        // stops there.
        "cancel_after_turnend" => {
            let (messages, ping) = echoed(prompt, &["ping"], u(1));
            (
                leak(format!("{tool_turn} AgentEnd:cancelled:3")),
                ended(messages, 1, RunStopReason::Cancelled, vec![ping]),
            )
        }
        other => panic!("no expectation for capture {other}"),
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

#[test]
fn every_capture_mirrors_to_the_conversation_it_holds() {
    let names = captures();
    assert_eq!(names.len(), 17, "{names:?}");
    for name in &names {
        let (events, state) = expected(name);
        let dialect = if name.starts_with("v1") {
            Dialect::PagentV1
        } else {
            Dialect::PagentV4
        };
        // Detected, and chosen: the same events.
        let mut detecting = Mirror::new();
        let got = mirror_all(&mut detecting, &capture(name));
        let mut chosen = Mirror::new().decoder(Decoder::for_dialect(dialect));
        assert_eq!(mirror_all(&mut chosen, &capture(name)), got, "{name}");
        let count = got.len() as u64;
        let got: Vec<String> = got.iter().map(short).collect();
        assert_eq!(
            got.join(" "),
            events.split_whitespace().collect::<Vec<_>>().join(" "),
            "{name}"
        );
        // One generation per event; the finished calls are the results beside their calls,
        // with no times (pagent's lines carry none).
        let mut state = state;
        state.generation = count;
        let finished = detecting.state().finished_tool_calls.clone();
        assert_eq!(
            finished
                .iter()
                .map(|f| f.result.clone())
                .collect::<Vec<_>>(),
            state.tool_results.to_vec(),
            "{name}"
        );
        assert!(
            finished.iter().all(|f| f.call.id == f.result.tool_call_id
                && f.started_at.is_none()
                && f.duration.is_none()),
            "{name}"
        );
        state.finished_tool_calls = finished;
        assert_eq!(**detecting.state(), state, "{name}");
        assert_eq!(**chosen.state(), state, "{name}");
    }
}

/// After each line of every capture, the mirror shows what the line says: the run and the
/// turn, the reply as far as it streamed, the calls running, the results so far.
#[test]
fn mirrored_state_follows_each_capture_line_as_it_streams() {
    for name in captures() {
        let mut mirror = Mirror::new();
        let (mut text, mut reasoning) = (String::new(), String::new());
        let mut snapshots = 0;
        for (i, line) in capture(&name).lines().enumerate() {
            let at = format!("{name} line {}", i + 1);
            mirror.apply_line(line).unwrap();
            let s = mirror.state();
            let v: Value = serde_json::from_str(line).unwrap();
            let p = &v["params"];
            assert_eq!(s.is_streaming_reply, s.streaming_message.is_some(), "{at}");
            match v["method"].as_str().unwrap() {
                "RunBegin" => {
                    assert!(s.is_streaming && s.messages.is_empty(), "{at}");
                }
                "TurnBegin" => {
                    let k = p["turn"].as_u64().unwrap() as u32;
                    assert_eq!(s.turn, k + 1, "{at}");
                    assert!(s.is_streaming && !s.is_streaming_reply, "{at}");
                    if k == 0 {
                        assert_eq!(s.messages.last().unwrap().text(), "Say hello.", "{at}");
                    }
                }
                method @ ("TextDelta" | "ReasoningDelta") => {
                    let piece = p["text"].as_str().unwrap();
                    if method == "TextDelta" {
                        text.push_str(piece);
                    } else {
                        reasoning.push_str(piece);
                    }
                    let partial = s.streaming_message.as_ref().expect(&at);
                    assert_eq!(partial.text(), text, "{at}");
                    assert_eq!(partial.thinking(), reasoning, "{at}");
                    snapshots += 1;
                }
                "StepEnd" | "TurnResult" => {
                    assert!(!s.is_streaming_reply, "{at}");
                    let last = s.messages.last().unwrap().as_assistant().unwrap().clone();
                    assert_eq!(last.text(), p["content"].as_str().unwrap(), "{at}");
                    assert_eq!(last.text(), text, "{at}: the deltas add up");
                    assert_eq!(last.thinking(), reasoning, "{at}");
                    assert_eq!(
                        last.tool_calls().count(),
                        p["tool_calls"].as_array().unwrap().len(),
                        "{at}"
                    );
                    text.clear();
                    reasoning.clear();
                }
                "ToolCallBegin" => {
                    let pending = s.pending_tool_calls.last().expect(&at);
                    assert_eq!(pending.call.id, p["tool_call_id"].as_str().unwrap(), "{at}");
                    assert_eq!(pending.call.arguments, p["arguments"].as_str().unwrap());
                }
                "ToolResult" => {
                    let id = p["tool_call_id"].as_str().unwrap();
                    assert!(
                        !s.pending_tool_calls.iter().any(|c| c.call.id == id),
                        "{at}"
                    );
                    let last = s.tool_results.last().unwrap();
                    assert_eq!(last.tool_call_id, id, "{at}");
                    assert_eq!(last.text(), p["content"].as_str().unwrap(), "{at}");
                    assert_eq!(last.is_error, !p["ok"].as_bool().unwrap(), "{at}");
                }
                "TurnEnd" => assert!(s.is_streaming && !s.is_streaming_reply, "{at}"),
                "RunEnd" => {
                    assert!(!s.is_streaming && s.stop_reason.is_some(), "{at}");
                    assert!(s.pending_tool_calls.is_empty(), "{at}");
                }
                other => panic!("{at}: {other}"),
            }
        }
        if name.ends_with("_text") {
            // "Hello", ", ", "world", "!": the reply seen growing four times.
            assert_eq!(snapshots, 4, "{name}");
        }
    }
}

/// Our pagent dialect lines, read back and written again, are the lines they were: the
/// decoder gives the events the dialect says, for every recorded run (aborts, failed runs,
/// steering, follow-ups, several runs included), with the dialect chosen or detected.
#[test]
fn our_pagent_lines_read_back_to_the_same_lines() {
    for r in common::record_all() {
        for (dialect, stream) in [(Dialect::PagentV1, &r.v1), (Dialect::PagentV4, &r.v4)] {
            let at = format!("{dialect:?} {}", r.name);
            let mut chosen = Mirror::new().decoder(Decoder::for_dialect(dialect));
            let events = mirror_all(&mut chosen, stream);
            let mut detecting = Mirror::new();
            assert_eq!(mirror_all(&mut detecting, stream), events, "{at}");
            assert_eq!(detecting.state(), chosen.state(), "{at}");
            let again = Writer::with_dialect(Vec::new(), dialect);
            for e in &events {
                again.write_event(e).unwrap();
            }
            let again = again.with_output(|b| String::from_utf8(b.clone()).unwrap());
            assert_eq!(&again, stream, "{at}");
            // Whole runs: each `AgentStart` has its `AgentEnd`, a broken-off one included.
            let count = |n: &str| events.iter().filter(|e| e.name() == n).count();
            assert_eq!(count("AgentStart"), count("AgentEnd"), "{at}");
            assert!(!chosen.state().is_streaming, "{at}");
        }
    }
}

/// What the dialects carry of a message: no model, response id, thinking signature or tool
/// result details; a reply's stop reason says only whether it called tools.
fn carried(m: &Arc<Message>) -> Arc<Message> {
    match &**m {
        Message::Assistant(a) => {
            let blocks = a
                .content
                .iter()
                .map(|b| match b {
                    ContentBlock::Thinking { thinking, .. } => ContentBlock::thinking(thinking),
                    b => b.clone(),
                })
                .collect();
            reply(blocks, a.usage)
        }
        Message::ToolResult(t) => Arc::new(Message::ToolResult(
            ToolResultMessage::new(&t.tool_call_id, &t.tool_name, t.text())
                .with_is_error(t.is_error),
        )),
        _ => m.clone(),
    }
}

/// The transcript a Rust agent built, read from its pagent dialect lines: the same messages,
/// as far as the dialect carries them.
#[test]
fn the_transcript_reads_back_from_our_pagent_lines() {
    let all = common::record_all();
    for name in [
        "text",
        "reasoning",
        "tool",
        "tool2",
        "tool_error",
        "maxturns",
        "maxturns_final",
        "maxturns_withheld",
        "failing_tool",
        "tool_panic",
        "invalid_args",
        "tool_progress",
        "cut_by_length",
        "empty_response",
        "unicode_newlines",
        "blocked_by_hook",
        "listener_panic",
        "two_runs",
    ] {
        let r = all.iter().find(|r| r.name == name).unwrap();
        let native: Vec<_> = r.agent.snapshot().messages.iter().map(carried).collect();
        for (dialect, stream) in [(Dialect::PagentV1, &r.v1), (Dialect::PagentV4, &r.v4)] {
            let mut mirror = Mirror::new();
            mirror_all(&mut mirror, stream);
            let read: Vec<_> = mirror.state().messages.iter().map(carried).collect();
            // pagent v4 writes the calls of a final answer turn in its `TurnResult` only,
            // without the results that say they were not run.
            let mut native = native.clone();
            if dialect == Dialect::PagentV4 {
                native.retain(|m| {
                    !matches!(&**m, Message::ToolResult(r) if r.text().starts_with("not run: the run reached its max_turns"))
                });
            }
            assert_eq!(read, native, "{dialect:?} {name}");
            let s = mirror.state();
            let agent = r.agent.snapshot();
            assert_eq!(s.run_usage, agent.run_usage, "{dialect:?} {name}");
            assert_eq!(s.stop_reason, agent.stop_reason, "{dialect:?} {name}");
        }
    }
}

/// pagent tells a failed run by its missing `RunEnd`: at the end of the stream (or at the
/// next `RunBegin`) the run ends with `Error`, its streamed text kept.
#[test]
fn a_pagent_run_without_run_end_reads_as_failed() {
    let r = common::record_all()
        .into_iter()
        .find(|r| r.name == "provider_error")
        .unwrap();
    for stream in [&r.v1, &r.v4] {
        let mut mirror = Mirror::new();
        let events = mirror_all(&mut mirror, stream);
        let Some(AgentEvent::AgentEnd {
            stop_reason: RunStopReason::Error,
            error: Some(error),
            ..
        }) = events.last()
        else {
            panic!("{events:?}");
        };
        assert_eq!(error.kind, ErrorKind::Provider);
        let s = mirror.state();
        assert_eq!(s.error_kind, Some(ErrorKind::Provider));
        assert!(!s.is_streaming && !s.is_streaming_reply);
        let last = s.messages.last().unwrap().as_assistant().unwrap();
        assert_eq!(
            (last.text().as_str(), last.stop_reason),
            ("partial repl", StopReason::Error)
        );
        // The same run followed by another: the failed one ends at the next `RunBegin`.
        let twice = format!("{stream}{}", capture("v4_text"));
        let mut decoder = Decoder::detecting();
        let mut names = Vec::new();
        for line in twice.lines() {
            names.extend(decoder.decode_events(line).unwrap().iter().map(short));
        }
        assert!(decoder.finish().is_empty(), "the second run ended");
        let ends: Vec<&String> = names.iter().filter(|n| n.starts_with("AgentEnd")).collect();
        assert_eq!(ends, ["AgentEnd:error:2", "AgentEnd:no_tool_calls:2"]);
    }
}

#[test]
fn the_dialect_is_detected_from_the_lines() {
    let mut d = Decoder::detecting();
    assert_eq!(d.dialect(), None);
    let lines: Vec<String> = capture("v1_tool").lines().map(str::to_owned).collect();
    d.decode_events(&lines[0]).unwrap(); // RunBegin: pagent, v1 or v4
    d.decode_events(&lines[1]).unwrap(); // TurnBegin
    assert_eq!(d.dialect(), None);
    d.decode_events(&lines[2]).unwrap(); // StepEnd
    assert_eq!(d.dialect(), Some(Dialect::PagentV1));
    let mut d = Decoder::detecting();
    for line in capture("v4_cancel_after_runbegin").lines().take(2) {
        d.decode_events(line).unwrap();
    }
    assert_eq!(
        d.dialect(),
        Some(Dialect::PagentV4),
        "a TurnEnd with stop_reason"
    );
    // A native stream decodes as with the native decoder.
    for r in common::record_all().iter().take(6) {
        let (mut native, mut detecting) = (Decoder::new(), Decoder::detecting());
        for line in r.native.lines() {
            assert_eq!(
                detecting.decode_events(line).unwrap(),
                [native.decode_line(line).unwrap()]
            );
        }
        assert_eq!(detecting.dialect(), Some(Dialect::Native));
        assert!(detecting.finish().is_empty());
    }
}

/// Bad pagent lines are `Error::Wire`s that name the problem, and leave the decoder as it
/// was: the stream goes on decoding as if they had not been there.
#[test]
fn bad_pagent_lines_are_typed_errors() {
    let cases: [(Dialect, &str, &str); 16] = [
        (
            Dialect::PagentV1,
            r#"{"jsonrpc": "2.0", "method": "RunBegin""#,
            "incomplete JSON",
        ),
        (
            Dialect::PagentV1,
            r#"{"jsonrpc": "2.0", "method": "TurnBegin", "params": {"turn": 0}} x"#,
            "trailing characters",
        ),
        (Dialect::PagentV1, r#"[1]"#, "not a JSON object"),
        (
            Dialect::PagentV4,
            r#"{"jsonrpc": "1.0", "method": "TurnBegin", "params": {"turn": 0}}"#,
            "not \"2.0\"",
        ),
        (
            Dialect::PagentV4,
            r#"{"jsonrpc": "2.0", "id": 1, "method": "TurnBegin", "params": {"turn": 0}}"#,
            "must not have an `id`",
        ),
        (
            Dialect::PagentV4,
            r#"{"jsonrpc": "2.0", "method": "Hello", "params": {}}"#,
            "unknown method `Hello`; the pagent methods are",
        ),
        (
            Dialect::PagentV4,
            r#"{"jsonrpc": "2.0", "method": "TurnStart", "params": {"turn": 1}}"#,
            "unknown method `TurnStart`",
        ),
        (
            Dialect::PagentV1,
            r#"{"jsonrpc": "2.0", "method": "TurnBegin", "params": [0]}"#,
            "params of TurnBegin is not an object",
        ),
        (
            Dialect::PagentV1,
            r#"{"jsonrpc": "2.0", "method": "RunBegin", "params": {}}"#,
            "invalid params of RunBegin: missing field `user_input`",
        ),
        (
            Dialect::PagentV1,
            r#"{"jsonrpc": "2.0", "method": "TurnBegin", "params": {"turn": "0"}}"#,
            "invalid params of TurnBegin: invalid type",
        ),
        (
            Dialect::PagentV1,
            r#"{"jsonrpc": "2.0", "method": "TurnBegin", "params": {"turn": -1}}"#,
            "invalid params of TurnBegin",
        ),
        (
            Dialect::PagentV1,
            r#"{"jsonrpc": "2.0", "method": "StepEnd", "params": {"content": ""}}"#,
            "missing field `tool_calls`",
        ),
        (
            Dialect::PagentV1,
            r#"{"jsonrpc": "2.0", "method": "TurnResult", "params": {}}"#,
            "TurnResult is not a method of pagent v1",
        ),
        (
            Dialect::PagentV4,
            r#"{"jsonrpc": "2.0", "method": "StepEnd", "params": {"content": "", "tool_calls": [], "reasoning_content": ""}}"#,
            "StepEnd is not a method of pagent v4",
        ),
        (
            Dialect::PagentV4,
            r#"{"jsonrpc": "2.0", "method": "TurnEnd", "params": {"turn": 0, "stopped": true}}"#,
            "missing field `stop_reason`",
        ),
        (
            Dialect::PagentV4,
            r#"{"jsonrpc": "2.0", "method": "RunEnd", "params": {"turn": 0, "stop_reason": "error"}}"#,
            "unknown stop_reason `error`",
        ),
    ];
    for (dialect, bad, why) in cases {
        let stream = match dialect {
            Dialect::PagentV1 => capture("v1_tool"),
            _ => capture("v4_tool"),
        };
        let lines: Vec<&str> = stream.lines().collect();
        let clean: Vec<AgentEvent> = {
            let mut d = Decoder::for_dialect(dialect);
            lines
                .iter()
                .flat_map(|l| d.decode_events(l).unwrap())
                .collect()
        };
        // The bad line in the middle of a reply, where the reader holds the most.
        for decoder in [Decoder::for_dialect(dialect), Decoder::detecting()] {
            let mut d = decoder;
            let mut events = Vec::new();
            for (i, line) in lines.iter().enumerate() {
                if i == 8 {
                    match d.decode_events(bad) {
                        Err(pagent::Error::Wire(e)) => assert!(e.contains(why), "{bad}: {e}"),
                        other => panic!("{bad}: {other:?}"),
                    }
                }
                events.extend(d.decode_events(line).unwrap());
            }
            assert_eq!(events, clean, "{bad}");
        }
    }
    // A mirror names the line.
    let mut mirror = Mirror::new();
    let stream = format!(
        "{}{}\n",
        capture("v1_text")
            .lines()
            .take(3)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
        cases[9].1
    );
    let e = mirror.read_lines(stream.as_bytes(), |_, _| {}).unwrap_err();
    assert!(
        e.to_string()
            .contains("line 4: invalid params of TurnBegin"),
        "{e}"
    );
    assert!(
        mirror.state().is_streaming_reply,
        "the lines before it stay folded in"
    );
    // `decode_line` is the native one-event read: a pagent line asks for `decode_events`.
    let e = Decoder::detecting()
        .decode_line(capture("v1_text").lines().next().unwrap())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("decode it with Decoder::decode_events"),
        "{e}"
    );
    // A native line on a pagent decoder, and a pagent line on a native one.
    let mut d = Decoder::for_dialect(Dialect::PagentV4);
    let e = d
        .decode_events(r#"{"jsonrpc":"2.0","method":"AgentStart","params":{}}"#)
        .unwrap_err();
    assert!(e.to_string().contains("unknown method `AgentStart`"), "{e}");
    let e = Decoder::new()
        .decode_events(capture("v4_text").lines().next().unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("unknown method `RunBegin`"), "{e}");
}

/// The program of the live test: pagent 0.7.30 runs `arun_wire` against its mock server.
fn pagent_driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pagent_read/arun_wire.py")
}

/// The `pagent_mirror` example, built if it is not (or, with `rebuild`, if it is stale:
/// `cargo test --test pagent_read` alone does not build the examples).
fn mirror_example(rebuild: bool) -> PathBuf {
    // tests run from target/<profile>/deps/; the examples live in target/<profile>/examples/.
    let exe = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let path = profile_dir
        .join("examples")
        .join("pagent_mirror")
        .with_extension(std::env::consts::EXE_EXTENSION);
    if rebuild || !path.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--example", "pagent_mirror"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(
            status.success(),
            "cargo build --example pagent_mirror failed"
        );
    }
    path
}

/// What the example prints for `input`.
fn mirrored(example: &Path, input: &str) -> Vec<String> {
    let mut child = Command::new(example)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The example mirrors a pagent capture offline (this runs with `cargo test`).
#[test]
fn the_pagent_mirror_example_prints_the_state_after_each_event() {
    let lines = mirrored(&mirror_example(false), &capture("v4_tool"));
    assert_eq!(lines.len(), 18, "{lines:#?}");
    assert_eq!(
        lines[12..15],
        [
            r#"MessageStart running turn=2 messages=3 last=tool_result:ping streaming="""#,
            r#"MessageUpdate running turn=2 messages=3 last=tool_result:ping streaming="echo said: ""#,
            r#"MessageUpdate running turn=2 messages=3 last=tool_result:ping streaming="echo said: ping""#,
        ]
    );
    assert_eq!(
        lines.last().unwrap(),
        "AgentEnd idle turn=2 messages=4 last=assistant:echo said: ping stop=no_tool_calls"
    );
    // Lines that break off: the run failed.
    let cut: String = capture("v4_text")
        .lines()
        .take(3)
        .map(|l| format!("{l}\n"))
        .collect();
    let lines = mirrored(&mirror_example(false), &cut);
    assert_eq!(
        lines.last().unwrap(),
        "AgentEnd idle turn=1 messages=2 last=assistant:Hello stop=error"
    );
}

/// Python pagent 0.7.30 runs `arun_wire` (and v4's `Runner.run(return_type="acp")`) against
/// pagent's mock server, its stdout piped into
/// the `pagent_mirror` example, which prints the mirrored state after each event: the same
/// lines as for the committed capture of that run. The driver stops after the first
/// `TextDelta` until the test has read the example's line for it, so the mirror is seen
/// showing the reply streaming while pagent's run is still going.
///
/// Runs only on request (`--ignored`, as `.ci/run` does), with `PAGENT_WIRE_PYTHON` naming a
/// python that has `pagent==0.7.30` installed.
#[test]
#[ignore = "needs pagent 0.7.30: PAGENT_WIRE_PYTHON=<python> cargo test --test pagent_read -- --ignored"]
fn a_python_pagent_run_mirrors_as_it_streams() {
    // OK to panic: the test runs only on request, and then needs that python.
    let python = std::env::var_os("PAGENT_WIRE_PYTHON")
        .expect("set PAGENT_WIRE_PYTHON to a python with pagent==0.7.30 installed");
    let example = mirror_example(true);
    let runs = ["text", "tool", "tool2", "reasoning"]
        .map(|s| ("v1", s))
        .into_iter()
        .chain(["text", "tool"].map(|s| ("v4", s)));
    for (version, scenario) in runs {
        let expected = mirrored(&example, &capture(&format!("{version}_{scenario}")));
        let mut driver = Command::new(&python)
            .arg(pagent_driver())
            .args((version == "v4").then_some("--v4"))
            .arg(scenario)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python starts");
        let mut mirror = Command::new(&example)
            .stdin(driver.stdout.take().unwrap())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the example starts");
        let (tx, rx) = mpsc::channel();
        let out = BufReader::new(mirror.stdout.take().unwrap());
        let reader = std::thread::spawn(move || {
            for line in out.lines() {
                if tx.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        let next = || rx.recv_timeout(Duration::from_secs(60));
        let mut lines = Vec::new();
        // Up to the first delta, which the driver waits on: pagent has not finished the
        // reply, and the mirror shows its first piece.
        while !lines
            .last()
            .is_some_and(|l: &String| l.starts_with("MessageUpdate"))
        {
            lines.push(next().expect("the example mirrors the first delta within 60 s"));
        }
        assert!(lines.last().unwrap().contains("streaming=\""), "{lines:#?}");
        assert!(
            !lines.iter().any(|l| l.starts_with("AgentEnd")),
            "{lines:#?}"
        );
        let mut go = driver.stdin.take().unwrap();
        writeln!(go, "go").unwrap();
        drop(go);
        while let Ok(line) = next() {
            lines.push(line);
        }
        assert!(driver.wait().unwrap().success(), "{version} {scenario}");
        assert!(mirror.wait().unwrap().success(), "{version} {scenario}");
        reader.join().unwrap();
        assert_eq!(lines, expected, "{version} {scenario}");
    }
}

/// The usage object as pagent writes it for a reply with reasoning and cache counts (the
/// OpenAI SDK's `model_dump()`), read back into our counts.
#[test]
fn pagent_usage_reads_into_our_counts() {
    let line = r#"{"jsonrpc": "2.0", "method": "TurnResult", "params": {"content": "hi", "tool_calls": [], "reasoning_content": "", "usage": {"completion_tokens": 3, "prompt_tokens": 10, "total_tokens": 13, "completion_tokens_details": {"accepted_prediction_tokens": null, "audio_tokens": null, "reasoning_tokens": 2, "rejected_prediction_tokens": null, "text_tokens": null}, "prompt_tokens_details": {"audio_tokens": null, "cache_write_tokens": 5, "cached_tokens": 4, "image_tokens": null, "text_tokens": null}}}}"#;
    let mut d = Decoder::for_dialect(Dialect::PagentV4);
    let events = d.decode_events(line).unwrap();
    let [
        AgentEvent::MessageStart { .. },
        AgentEvent::MessageEnd { message },
    ] = &events[..]
    else {
        panic!("{events:?}")
    };
    let reply = message.as_assistant().unwrap();
    assert_eq!(
        reply.usage,
        Usage::new(10, 3).with_cache(4, 5).with_reasoning(2)
    );
    assert_eq!(reply.text(), "hi");
    // A total the provider counts otherwise is kept; `null` counts read as 0.
    let line = r#"{"jsonrpc": "2.0", "method": "TurnResult", "params": {"usage": {"completion_tokens": null, "prompt_tokens": 7, "total_tokens": 9}}}"#;
    let events = d.decode_events(line).unwrap();
    let Some(AgentEvent::MessageEnd { message }) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(
        message.as_assistant().unwrap().usage,
        Usage::new(7, 0).with_total(9)
    );
}

proptest::proptest! {
    /// Any sequence of pagent lines (taken from the captures, in any order: a mirror may
    /// join anywhere, and pagent frames some runs irregularly) keeps the state's
    /// invariants after each line and at the end.
    #[test]
    fn any_order_of_pagent_lines_keeps_the_state_invariants(
        picks in proptest::collection::vec(0usize..1000, 0..40),
        v4 in proptest::bool::ANY,
    ) {
        let lines: Vec<String> = captures()
            .iter()
            .filter(|n| n.starts_with(if v4 { "v4" } else { "v1" }))
            .flat_map(|n| capture(n).lines().map(str::to_owned).collect::<Vec<_>>())
            .collect();
        let mut mirror = Mirror::new();
        let check = |s: &State| {
            assert_eq!(s.is_streaming_reply, s.streaming_message.is_some());
            if !s.is_streaming {
                assert!(!s.is_streaming_reply && s.pending_tool_calls.is_empty());
            }
        };
        for pick in picks {
            mirror.apply_line(&lines[pick % lines.len()]).unwrap();
            check(mirror.state());
        }
        let _ = mirror.finish();
        check(mirror.state());
        // The end of the stream ends a run still open.
        proptest::prop_assert!(!mirror.state().is_streaming);
    }
}

/// A regression test: `TurnEnd` is a method of both wires, and a detecting decoder whose
/// first line was pagent's `TurnEnd` (a mirror joining between turns) took it for ours.
#[test]
fn a_stream_that_starts_with_turn_end_is_told_by_its_params() {
    let pagent = r#"{"jsonrpc": "2.0", "method": "TurnEnd", "params": {"turn": 0, "stopped": false, "stop_reason": "continuing"}}"#;
    let mut d = Decoder::detecting();
    let events: Vec<String> = d.decode_events(pagent).unwrap().iter().map(short).collect();
    assert_eq!(events, ["TurnStart1", "TurnEnd1:continuing:0"]);
    assert_eq!(d.dialect(), Some(Dialect::PagentV4));
    let r = common::record_all()
        .into_iter()
        .find(|r| r.name == "tool")
        .unwrap();
    let native = r
        .native
        .lines()
        .find(|l| l.contains(r#""method":"TurnEnd""#))
        .unwrap();
    let mut d = Decoder::detecting();
    assert_eq!(d.decode_events(native).unwrap().len(), 1);
    assert_eq!(d.dialect(), Some(Dialect::Native));
}
