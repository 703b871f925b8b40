//! The ways to consume a run: iterators over its events, text chunks and wire lines, and the
//! stateless loop.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pagent::llm::{Faux, FauxReply};
use pagent::{
    Agent, AgentBuilder, AgentEvent, Error, ErrorKind, Message, RunStopReason, RunStream, wire,
};
use serde_json::json;

mod common;

/// A tool turn then a text answer, streamed in small chunks.
fn tool_then_text() -> AgentBuilder {
    Agent::builder().tool(common::echo()).provider(
        Faux::default()
            .chunk_chars(3)
            .reply(FauxReply::text("let me check").then_tool_call("echo", json!({"text": "hi"})))
            .reply(FauxReply::text("the echo said hi")),
    )
}

/// Held by every test that starts a stream, so that counting `pagent-run` threads sees only
/// the test's own.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The number of threads of this process named `pagent-run`.
fn run_threads() -> usize {
    // A joined thread can stay listed in /proc for a moment (the kernel wakes the joiner
    // before it removes the task): wait, bounded, for the list to catch up.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = listed_run_threads();
        if n == 0 || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The threads named `pagent-run` that /proc lists now.
fn listed_run_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.trim() == "pagent-run")
                .count()
        })
        .unwrap_or(0)
}

/// `events` without the times they carry (when a tool started, how long it took), which
/// differ from run to run.
fn timeless(events: Vec<AgentEvent>) -> Vec<AgentEvent> {
    events
        .into_iter()
        .map(|e| match e {
            AgentEvent::ToolStart { call, .. } => AgentEvent::ToolStart { call, at: None },
            AgentEvent::ToolEnd { result, .. } => AgentEvent::ToolEnd {
                result,
                duration: None,
            },
            other => other,
        })
        .collect()
}

fn listen(agent: &Agent) -> Arc<Mutex<Vec<AgentEvent>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    agent
        .subscribe(move |e| sink.lock().unwrap().push(e.clone()))
        .keep();
    seen
}

#[test]
fn events_iterator_yields_what_a_listener_sees() {
    let _serial = serial();
    let agent = tool_then_text().build().unwrap();
    let seen = listen(&agent);
    let mut run = agent.prompt_stream("go").unwrap();
    let events: Vec<AgentEvent> = run.by_ref().collect();
    let result = run.finish().unwrap();
    assert_eq!(events, *seen.lock().unwrap());
    let names: Vec<&str> = events.iter().map(|e| e.name()).collect();
    let mut expected = vec!["AgentStart", "TurnStart", "MessageStart", "MessageEnd"];
    expected.extend(tool_call_reply());
    expected.extend(["TurnStart", "MessageStart"]);
    expected.extend(["MessageUpdate"; 7]);
    expected.extend(["MessageEnd", "TurnEnd", "AgentEnd"]);
    assert_eq!(names, expected);
    assert_eq!(result.text(), "the echo said hi");
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(result.messages.len(), 4);
}

#[test]
fn text_iterator_concatenates_to_the_replies_text() {
    let _serial = serial();
    let agent = tool_then_text().build().unwrap();
    let mut chunks = agent.prompt_stream("go").unwrap().text();
    let collected: Vec<String> = chunks.by_ref().collect();
    assert_eq!(
        collected,
        [
            "let", " me", " ch", "eck", "the", " ec", "ho ", "sai", "d h", "i"
        ]
    );
    assert_eq!(collected.concat(), "let me checkthe echo said hi");
    assert_eq!(chunks.finish().unwrap().text(), "the echo said hi");
}

#[test]
fn wire_lines_decode_to_the_same_events() {
    let _serial = serial();
    let agent = tool_then_text().build().unwrap();
    let seen = listen(&agent);
    let lines: Vec<String> = agent.prompt_stream("go").unwrap().wire_lines().collect();
    let expected: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(wire::encode_event_line)
        .collect();
    assert_eq!(lines, expected);
    let mut decoder = wire::Decoder::new();
    let decoded: Vec<AgentEvent> = lines
        .iter()
        .map(|l| decoder.decode_line(l).unwrap())
        .collect();
    let renamed: Vec<&str> = decoded.iter().map(|e| e.name()).collect();
    let original: Vec<&str> = seen.lock().unwrap().iter().map(|e| e.name()).collect();
    assert_eq!(renamed, original);
    let reencoded: Vec<String> = decoded.iter().map(wire::encode_event_line).collect();
    assert_eq!(reencoded, lines);
}

/// pagent v4's `return_type="acp"` and v1's `arun_wire`, the Rust way: the lines a
/// `DialectEncoder` writes for the run's events, as the run goes.
#[test]
fn dialect_lines_yield_the_pagent_lines_of_the_run() {
    let _serial = serial();
    let agent = tool_then_text().build().unwrap();
    let seen = listen(&agent);
    let lines: Vec<String> = agent
        .prompt_stream("go")
        .unwrap()
        .dialect_lines(wire::Dialect::PagentV4)
        .collect();
    let mut encoder = wire::DialectEncoder::new(wire::Dialect::PagentV4);
    let expected: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .flat_map(|e| encoder.encode_event_line(e))
        .collect();
    assert_eq!(lines, expected);
    let methods: Vec<String> = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["method"].to_string())
        .collect();
    let text_deltas = |n| vec![r#""TextDelta""#; n];
    let mut expected = vec![r#""RunBegin""#, r#""TurnBegin""#];
    expected.extend(text_deltas(4)); // "let me check" in chunks of 3
    expected.extend([
        r#""TurnResult""#,
        r#""ToolCallBegin""#,
        r#""ToolResult""#,
        r#""TurnEnd""#,
        r#""TurnBegin""#,
    ]);
    expected.extend(text_deltas(6)); // "the echo said hi"
    expected.extend([r#""TurnResult""#, r#""TurnEnd""#, r#""RunEnd""#]);
    assert_eq!(methods, expected);
    assert_eq!(
        lines.last().unwrap(),
        r#"{"jsonrpc": "2.0", "method": "RunEnd", "params": {"turn": 1, "stop_reason": "no_tool_calls"}}"#
    );
}

/// pagent v4's `return_type="message"`, the Rust way: each message as it is appended, and
/// the final message.
#[test]
fn messages_iterator_yields_each_message_as_it_is_appended() {
    let _serial = serial();
    let agent = tool_then_text().build().unwrap();
    let mut messages = agent.prompt_stream("go").unwrap().messages();
    let roles: Vec<(&str, String)> = messages
        .by_ref()
        .map(|m| {
            let text = match &*m {
                Message::User(u) => u.text(),
                Message::Assistant(a) => a.text(),
                Message::ToolResult(r) => r.text(),
                _ => String::new(),
            };
            (m.role(), text)
        })
        .collect();
    assert_eq!(
        roles,
        [
            ("user", "go".to_owned()),
            ("assistant", "let me check".to_owned()),
            ("tool_result", "hi".to_owned()),
            ("assistant", "the echo said hi".to_owned()),
        ]
    );
    let result = messages.finish().unwrap();
    assert_eq!(
        result.final_message().map(|m| m.text()),
        Some("the echo said hi".to_owned())
    );
    assert_eq!(
        result.messages.iter().map(|m| m.role()).collect::<Vec<_>>(),
        ["user", "assistant", "tool_result", "assistant"]
    );
}

#[test]
fn dropping_the_iterator_mid_run_aborts_the_run_and_joins_its_thread() {
    let _serial = serial();
    let agent = Agent::builder()
        .tool(common::echo())
        .provider(
            Faux::default()
                .reply(FauxReply::tool_call("echo", json!({"text": "slow"})))
                .reply(FauxReply::text("after")),
        )
        .build()
        .unwrap();
    let started = Instant::now();
    let mut run = agent.prompt_stream("go").unwrap();
    assert!(run.by_ref().any(|e| e.name() == "ToolStart"));
    assert!(agent.is_running());
    drop(run);
    // The slow tool sleeps 5 s unless aborted.
    assert!(started.elapsed() < Duration::from_secs(4));
    let state = agent.snapshot();
    assert!(!state.is_streaming);
    assert_eq!(state.stop_reason, Some(RunStopReason::Cancelled));
    assert_eq!(run_threads(), 0);
    // The agent takes the next prompt.
    assert_eq!(agent.prompt("again").unwrap().text(), "after");
}

#[test]
fn a_second_stream_while_a_run_is_active_is_busy_at_once() {
    let _serial = serial();
    let agent = Agent::builder()
        .tool(common::echo())
        .provider(Faux::default().reply(FauxReply::tool_call("echo", json!({"text": "slow"}))))
        .build()
        .unwrap();
    let mut run = agent.prompt_stream("go").unwrap();
    assert_eq!(run.next().map(|e| e.name()), Some("AgentStart"));
    let busy = agent.prompt_stream("again").unwrap_err();
    assert!(matches!(busy.error(), Error::Busy));
    assert!(matches!(
        agent.prompt("again").unwrap_err().error(),
        Error::Busy
    ));
    run.abort();
    let rest: Vec<&str> = run.by_ref().map(|e| e.name()).collect();
    assert_eq!(rest.last(), Some(&"AgentEnd"));
    assert_eq!(run.finish().unwrap().stop_reason, RunStopReason::Cancelled);
    let empty = agent.prompt_stream(Vec::<Message>::new()).unwrap_err();
    assert!(matches!(empty.error(), Error::NothingToContinue(_)));
}

#[test]
fn a_failed_run_ends_the_iterator_and_finish_returns_the_error() {
    let _serial = serial();
    let agent = Agent::builder()
        .provider(Faux::default().reply(FauxReply::text("partial").then_error("the link broke")))
        .build()
        .unwrap();
    let mut run = agent.prompt_stream("go").unwrap();
    let events: Vec<AgentEvent> = run.by_ref().collect();
    match events.last() {
        Some(AgentEvent::AgentEnd {
            stop_reason, error, ..
        }) => {
            assert_eq!(*stop_reason, RunStopReason::Error);
            assert_eq!(error.as_ref().map(|e| e.kind), Some(ErrorKind::Provider));
        }
        other => panic!("the stream ended with {other:?}"),
    }
    let error = run.finish().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Provider);
    assert_eq!(error.result().stop_reason, RunStopReason::Error);
    assert_eq!(run_threads(), 0);
}

#[test]
fn run_loop_returns_exactly_the_appended_messages() {
    let earlier = Agent::builder()
        .provider(Faux::default().reply(FauxReply::text("hi")))
        .build()
        .unwrap();
    earlier.prompt("say hi").unwrap();
    let mut history: Vec<Message> = earlier
        .snapshot()
        .messages
        .iter()
        .map(|m| Message::clone(m))
        .collect();
    history.push(Message::user("now echo it"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let appended = pagent::run_loop(tool_then_text(), history.clone(), move |e| {
        sink.lock().unwrap().push(e.clone())
    })
    .unwrap();
    let seen = seen.lock().unwrap();
    match seen.last() {
        Some(AgentEvent::AgentEnd { messages, .. }) => assert_eq!(*messages, appended),
        other => panic!("the run ended with {other:?}"),
    }
    let roles: Vec<&str> = appended.iter().map(|m| m.role()).collect();
    assert_eq!(roles, ["assistant", "tool_result", "assistant"]);
    assert_eq!(
        appended[2].as_assistant().unwrap().text(),
        "the echo said hi"
    );
    // Nothing the model is due to answer: refused, no event.
    let mut done = history;
    done.extend(appended.iter().map(|m| Message::clone(m)));
    let refused = pagent::run_loop(tool_then_text(), done, |_| panic!("no event")).unwrap_err();
    assert!(matches!(refused.error(), Error::NothingToContinue(_)));
}

#[test]
fn dropping_an_unread_stream_releases_a_run_waiting_on_its_full_channel() {
    let _serial = serial();
    let long = "x".repeat(500);
    let faux = Faux::default()
        .chunk_chars(1)
        .reply(FauxReply::text(long.clone()))
        .reply(FauxReply::text("next"));
    let agent = Agent::builder().provider(faux.clone()).build().unwrap();
    let started = Instant::now();
    let mut run = agent.prompt_stream("go").unwrap();
    assert_eq!(run.next().map(|e| e.name()), Some("AgentStart"));
    // The run now waits on the full channel (500 updates, room for 64).
    let deadline = Instant::now() + Duration::from_secs(10);
    let streamed =
        |agent: &Agent| (agent.snapshot().streaming_message.as_ref()).map_or(0, |m| m.text().len());
    while (faux.remaining() > 1 || streamed(&agent) < 32) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(run);
    assert!(started.elapsed() < Duration::from_secs(10));
    let state = agent.snapshot();
    assert_eq!(state.stop_reason, Some(RunStopReason::Cancelled));
    assert_eq!(run_threads(), 0);
    assert_eq!(agent.prompt("again").unwrap().text(), "next");
}

/// What one way of consuming a run read of it before it was dropped.
type Consume = fn(RunStream) -> Box<dyn std::any::Any>;

/// A regression test: only dropping the event iterator was shown to abort its run. Each of
/// the five (events, text chunks, wire lines, dialect lines, messages), dropped while the
/// run's tool runs, aborts that run: the run ends `Cancelled` with the events of an abort
/// in a tool, its thread is joined, and the agent takes the next prompt.
#[test]
fn dropping_any_of_the_iterators_mid_run_aborts_its_run() {
    let _serial = serial();
    let kinds: [(&str, Consume); 5] = [
        ("events", |mut s| {
            assert_eq!(s.next().map(|e| e.name()), Some("AgentStart"));
            Box::new(s)
        }),
        ("text", |s| {
            let mut t = s.text();
            assert_eq!(t.next().as_deref(), Some("let"));
            Box::new(t)
        }),
        ("wire_lines", |s| {
            let mut l = s.wire_lines();
            assert_eq!(
                l.next().as_deref(),
                Some(r#"{"jsonrpc":"2.0","method":"AgentStart","params":{}}"#)
            );
            Box::new(l)
        }),
        ("dialect_lines", |s| {
            let mut l = s.dialect_lines(wire::Dialect::PagentV4);
            assert_eq!(
                l.next().as_deref(),
                Some(r#"{"jsonrpc": "2.0", "method": "RunBegin", "params": {"user_input": "go"}}"#)
            );
            Box::new(l)
        }),
        ("messages", |s| {
            let mut m = s.messages();
            assert_eq!(m.next().map(|m| m.role()), Some("user"));
            Box::new(m)
        }),
    ];
    for (kind, consume) in kinds {
        let agent = Agent::builder()
            .tool(common::echo())
            .provider(
                Faux::default()
                    .chunk_chars(3)
                    .reply(
                        FauxReply::text("let me check")
                            .then_tool_call("echo", json!({"text": "slow"})),
                    )
                    .reply(FauxReply::text("after")),
            )
            .build()
            .unwrap();
        let seen = listen(&agent);
        let held = consume(agent.prompt_stream("go").unwrap());
        // Dropped while the slow tool runs (it sleeps 5 s unless aborted).
        let deadline = Instant::now() + Duration::from_secs(10);
        let running = |agent: &Agent| {
            (agent.snapshot().pending_tool_calls.iter()).any(|p| p.arguments.is_some())
        };
        while !running(&agent) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(running(&agent), "{kind}: the tool never ran");
        let dropped = Instant::now();
        drop(held);
        assert!(dropped.elapsed() < Duration::from_secs(4), "{kind}");
        assert_eq!(run_threads(), 0, "{kind}");
        let state = agent.snapshot();
        assert!(!state.is_streaming, "{kind}");
        assert_eq!(state.stop_reason, Some(RunStopReason::Cancelled), "{kind}");
        let names: Vec<&str> = seen.lock().unwrap().iter().map(|e| e.name()).collect();
        let mut expected = vec!["AgentStart", "TurnStart", "MessageStart", "MessageEnd"];
        expected.extend(tool_call_reply());
        expected.push("AgentEnd");
        assert_eq!(names, expected, "{kind}");
        match seen.lock().unwrap().last() {
            Some(AgentEvent::AgentEnd { stop_reason, .. }) => {
                assert_eq!(*stop_reason, RunStopReason::Cancelled, "{kind}")
            }
            other => panic!("{kind}: the run ended with {other:?}"),
        }
        assert_eq!(agent.prompt("again").unwrap().text(), "after", "{kind}");
    }
}

/// The names of the events from the start of a reply that streams a text and a tool call in
/// 11 updates (the text in 4 chunks, then the tool call) to the end of its turn, which runs
/// the tool.
fn tool_call_reply() -> Vec<&'static str> {
    let mut names = vec!["MessageStart"];
    names.extend(["MessageUpdate"; 11]);
    names.extend([
        "MessageEnd",
        "ToolStart",
        "ToolExecute",
        "ToolEnd",
        "MessageStart",
        "MessageEnd",
        "TurnEnd",
    ]);
    names
}

/// `run_loop` emits the events `Agent::continue_run` emits over the same messages, and those
/// of `Agent::prompt` with the last message as the prompt, less that prompt's own
/// `MessageStart` / `MessageEnd` (it is in the list already; the loop does not append it).
#[test]
fn run_loop_emits_the_events_of_prompt() {
    let history = vec![
        Message::user("say hi"),
        Message::Assistant(pagent::AssistantMessage::new(
            vec![pagent::ContentBlock::text("hi")],
            pagent::StopReason::Stop,
        )),
    ];
    let record = || {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        (seen, move |e: &AgentEvent| {
            sink.lock().unwrap().push(e.clone())
        })
    };
    // The stateless loop.
    let (looped, on_event) = record();
    let mut messages = history.clone();
    messages.push(Message::user("now echo it"));
    let appended = pagent::run_loop(tool_then_text(), messages.clone(), on_event).unwrap();
    let looped = timeless(looped.lock().unwrap().clone());
    // An agent's prompt over the same history.
    let agent = tool_then_text().messages(history).build().unwrap();
    let prompted = listen(&agent);
    let result = agent.prompt("now echo it").unwrap();
    let prompted = timeless(prompted.lock().unwrap().clone());
    // An agent's continue_run over the same messages.
    let agent = tool_then_text().messages(messages).build().unwrap();
    let continued = listen(&agent);
    agent.continue_run().unwrap();
    let continued = timeless(continued.lock().unwrap().clone());

    assert_eq!(looped, continued);
    let is_prompt = |e: &AgentEvent| match e {
        AgentEvent::MessageStart { message } | AgentEvent::MessageEnd { message } => {
            message.role() == "user"
        }
        _ => false,
    };
    let without_prompt: Vec<AgentEvent> = prompted
        .iter()
        .filter(|e| !is_prompt(e))
        .map(|e| match e {
            AgentEvent::AgentEnd {
                messages,
                stop_reason,
                usage,
                error,
            } => AgentEvent::AgentEnd {
                messages: messages[1..].to_vec(),
                stop_reason: *stop_reason,
                usage: *usage,
                error: error.clone(),
            },
            e => e.clone(),
        })
        .collect();
    assert_eq!(prompted.len(), without_prompt.len() + 2);
    assert_eq!(looped, without_prompt);
    assert_eq!(appended, result.messages[1..]);
    let names: Vec<&str> = looped.iter().map(|e| e.name()).collect();
    let mut expected = vec!["AgentStart", "TurnStart"];
    expected.extend(tool_call_reply());
    expected.extend(["TurnStart", "MessageStart"]);
    expected.extend(["MessageUpdate"; 7]);
    expected.extend(["MessageEnd", "TurnEnd", "AgentEnd"]);
    assert_eq!(names, expected);
}
