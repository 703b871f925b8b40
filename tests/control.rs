//! Control of a running agent: steering, follow-ups, `continue_run`, abort, hooks and parallel
//! tools. Each test asserts the whole event sequence; timing-sensitive ones are driven by
//! channels inside tools, hooks and listeners, and every wait is bounded.

#[path = "control/goseed.rs"]
mod goseed;
mod replay;
#[path = "control/support.rs"]
mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pagent::hooks::ToolDecision;
use pagent::llm::{Faux, FauxReply, ThinkingLevel};
use pagent::{
    Agent, AgentEvent, AgentHandle, AssistantMessage, ContentBlock, Error, ErrorKind, Message,
    QueueMode, RunStopReason, SteeringPolicy, StopReason, ToolCall, ToolOutput, ToolResultMessage,
};
use serde_json::json;
use support::*;

fn builder(faux: &Faux) -> pagent::AgentBuilder {
    Agent::builder().provider(faux.clone()).model("m")
}

/// The messages of one request, described, for asserting what the model was sent.
fn sent(faux: &Faux, request: usize) -> Vec<String> {
    faux.requests()[request]
        .messages
        .iter()
        .map(|m| describe(m))
        .collect()
}

fn texts<'a>(queue: impl IntoIterator<Item = &'a Arc<Message>>) -> Vec<String> {
    queue.into_iter().map(|m| m.text()).collect()
}

/// A listener that calls `f` once, on the first event for which `when` is true.
fn once(
    agent: &Agent,
    when: impl Fn(&AgentEvent) -> bool + Send + Sync + 'static,
    f: impl Fn(&AgentHandle) + Send + Sync + 'static,
) {
    let handle = agent.handle();
    let done = AtomicBool::new(false);
    agent
        .subscribe(move |e: &AgentEvent| {
            if when(e) && !done.swap(true, Ordering::SeqCst) {
                f(&handle);
            }
        })
        .keep();
}

/// Reads the state with `read` on every event for which `when` is true.
fn watch<T: Send + 'static>(
    agent: &Agent,
    when: impl Fn(&AgentEvent) -> bool + Send + Sync + 'static,
    read: impl Fn(&pagent::State) -> T + Send + Sync + 'static,
) -> Arc<Mutex<Vec<T>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let handle = agent.handle();
    agent
        .subscribe(move |e: &AgentEvent| {
            if when(e) {
                sink.lock().unwrap().push(read(&handle.snapshot()));
            }
        })
        .keep();
    seen
}

/// A reply made only of tool calls (its deltas rendered as `deltas`), the tool events it
/// led to, then the result messages of `ids`.
fn calls_turn(deltas: &str, ids: &[&str], tools: &[&str]) -> Vec<String> {
    [
        vec![
            "MessageStart(assistant)".to_owned(),
            format!("MessageUpdate*({deltas})"),
            format!(r#"MessageEnd(assistant tool_use "" [{}])"#, ids.join(" ")),
        ],
        lines(tools),
        results(ids),
    ]
    .concat()
}

/// A whole run prompted with `prompt`: a first reply of tool calls (see [`calls_turn`]),
/// then a second turn that answers `answer`.
fn batch_then_answer(
    prompt: &str,
    deltas: &str,
    ids: &[&str],
    tools: &[&str],
    answer: &str,
) -> Vec<String> {
    [
        opening(prompt),
        calls_turn(deltas, ids, tools),
        lines(&["TurnEnd(1 continuing)", "TurnStart(2)"]),
        text_reply(answer),
        lines(&["TurnEnd(2 no_tool_calls)", "AgentEnd(no_tool_calls)"]),
    ]
    .concat()
}

/// A whole run of text replies, one turn each: a turn takes its user messages, then answers
/// its text; the last turn ends the run.
fn text_turns(turns: &[(&[&str], &str)]) -> Vec<String> {
    let mut v = lines(&["AgentStart"]);
    for (i, (users, reply)) in turns.iter().enumerate() {
        let turn = i + 1;
        v.push(format!("TurnStart({turn})"));
        users.iter().for_each(|u| v.extend(user(u)));
        v.extend(text_reply(reply));
        let stop = if turn == turns.len() {
            "no_tool_calls"
        } else {
            "continuing"
        };
        v.push(format!("TurnEnd({turn} {stop})"));
    }
    v.push("AgentEnd(no_tool_calls)".into());
    v
}

fn is_update(e: &AgentEvent) -> bool {
    matches!(e, AgentEvent::MessageUpdate { .. })
}

fn assistant(text: &str) -> Message {
    Message::Assistant(
        AssistantMessage::new(vec![ContentBlock::text(text)], StopReason::Stop).with_model("m"),
    )
}

/// Two echo calls in one reply, after a little text.
fn two_echoes() -> FauxReply {
    FauxReply::text("Look")
        .then_tool_call("echo", json!({"x": 1}))
        .then_tool_call("echo", json!({"x": 2}))
}

// ---------------------------------------------------------------------------------------
// Steering

/// Steers on the first streamed delta of a reply that calls `echo` twice (one call at a
/// time); returns the recorded lines, how many calls ran, and the provider.
fn steer_during_streaming(policy: SteeringPolicy) -> (Vec<String>, usize, Faux) {
    let faux = Faux::default()
        .reply(two_echoes())
        .reply(FauxReply::text("Done"));
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let agent = builder(&faux)
        .tool(fn_tool("echo", move |args, _| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(ToolOutput::text(args["x"].to_string()))
        }))
        .max_parallel_tools(1)
        .steering_policy(policy)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    once(&agent, is_update, |h| h.steer("stop that").unwrap());
    // The queued message is visible in the state while the batch is handled.
    let seen = watch(
        &agent,
        |e| matches!(e, AgentEvent::ToolStart { .. }),
        |s| texts(&s.steering_queue),
    );

    let result = agent.prompt("go").unwrap();

    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        *seen.lock().unwrap(),
        [vec!["stop that"], vec!["stop that"]]
    );
    assert!(agent.snapshot().steering_queue.is_empty());
    // The steering message goes in after the results, before the next model call.
    assert_eq!(
        sent(&faux, 1),
        [
            r#"user "go""#,
            r#"assistant tool_use "Look" [call_1 call_2]"#,
            "tool_result call_1",
            "tool_result call_2",
            r#"user "stop that""#,
        ]
    );
    (rec.lines(), ran.load(Ordering::SeqCst), faux)
}

/// The whole sequence of a run prompted "go" whose first reply is [`two_echoes`] (one call at
/// a time) with the two `ToolEnd` lines given, steered with `steer` after that batch.
/// `call_1` and `call_2`: what follows each call's `ToolStart` (its `ToolExecute` when it
/// runs, then its `ToolEnd`).
fn steered_sequence(steer: &str, call_1: &[&str], call_2: &[&str]) -> Vec<String> {
    [
        opening("go"),
        lines(&[
            "MessageStart(assistant)",
            r#"MessageUpdate*(Look[call_1:echo]{"x":1}[call_2:echo]{"x":2})"#,
            r#"MessageEnd(assistant tool_use "Look" [call_1 call_2])"#,
            "ToolStart(call_1)",
        ]),
        lines(call_1),
        lines(&["ToolStart(call_2)"]),
        lines(call_2),
        results(&["call_1", "call_2"]),
        lines(&["TurnEnd(1 continuing)", "TurnStart(2)"]),
        user(steer),
        text_reply("Done"),
        lines(&["TurnEnd(2 no_tool_calls)", "AgentEnd(no_tool_calls)"]),
    ]
    .concat()
}

#[test]
fn steering_during_streaming_after_batch_lets_the_batch_finish() {
    let (lines, ran, _) = steer_during_streaming(SteeringPolicy::AfterBatch);
    assert_eq!(ran, 2);
    assert_eq!(
        lines,
        steered_sequence(
            "stop that",
            &["ToolExecute(call_1)", r#"ToolEnd(call_1 "1")"#],
            &["ToolExecute(call_2)", r#"ToolEnd(call_2 "2")"#],
        )
    );
}

#[test]
fn steering_during_streaming_at_tool_boundary_skips_the_calls_not_started() {
    let (lines, ran, faux) = steer_during_streaming(SteeringPolicy::AtToolBoundary);
    assert_eq!(ran, 0, "no call of the batch may run");
    assert_eq!(
        lines,
        steered_sequence(
            "stop that",
            &[&format!("ToolEnd(call_1 error {SKIPPED:?})")],
            &[&format!("ToolEnd(call_2 error {SKIPPED:?})")],
        )
    );
    // The model sees a result for every call, saying why it did not run.
    let req = &faux.requests()[1];
    let results: Vec<_> = req
        .messages
        .iter()
        .filter_map(|m| m.as_tool_result())
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r.is_error && r.text() == SKIPPED));
}

#[test]
fn steering_at_tool_boundary_keeps_the_result_of_a_call_already_running() {
    let faux = Faux::default()
        .reply(two_echoes())
        .reply(FauxReply::text("Done"));
    let handle: Arc<OnceLock<AgentHandle>> = Arc::default();
    let h = handle.clone();
    let agent = builder(&faux)
        .tool(fn_tool("echo", move |args, _| {
            // The user steers while the first call runs; that call still completes.
            h.get().unwrap().steer("new direction").unwrap();
            Ok(ToolOutput::text(format!("did {}", args["x"])))
        }))
        .max_parallel_tools(1)
        .steering_policy(SteeringPolicy::AtToolBoundary)
        .build()
        .unwrap();
    handle.set(agent.handle()).unwrap();
    let rec = Recorder::attach(&agent);

    agent.prompt("go").unwrap();

    assert_eq!(
        rec.lines(),
        steered_sequence(
            "new direction",
            &["ToolExecute(call_1)", r#"ToolEnd(call_1 "did 1")"#],
            &[&format!("ToolEnd(call_2 error {SKIPPED:?})")],
        )
    );
    assert_eq!(sent(&faux, 1).last().unwrap(), r#"user "new direction""#);
}

#[test]
fn steering_queued_before_prompt_rides_with_the_prompt() {
    let faux = Faux::default().reply(FauxReply::text("ok"));
    let agent = builder(&faux).build().unwrap();
    agent.steer("be brief").unwrap();
    assert_eq!(texts(&agent.snapshot().steering_queue), ["be brief"]);
    let rec = Recorder::attach(&agent);

    agent.prompt("hi").unwrap();

    assert_eq!(
        rec.lines(),
        [
            opening("hi"),
            user("be brief"),
            text_reply("ok"),
            lines(&["TurnEnd(1 no_tool_calls)", "AgentEnd(no_tool_calls)"])
        ]
        .concat()
    );
    assert_eq!(faux.requests().len(), 1);
    assert_eq!(sent(&faux, 0), [r#"user "hi""#, r#"user "be brief""#]);
    assert!(agent.snapshot().steering_queue.is_empty());
}

/// Records the steering queue at each `TurnStart`.
fn queue_at_turn_start(agent: &Agent) -> Arc<Mutex<Vec<Vec<String>>>> {
    watch(
        agent,
        |e| matches!(e, AgentEvent::TurnStart { .. }),
        |s| texts(&s.steering_queue),
    )
}

#[test]
fn steering_one_at_a_time_takes_one_message_per_model_call() {
    let faux = Faux::default()
        .reply(FauxReply::text("a"))
        .reply(FauxReply::text("b"))
        .reply(FauxReply::text("c"));
    let agent = builder(&faux).build().unwrap();
    for s in ["s1", "s2", "s3"] {
        agent.steer(s).unwrap();
    }
    let rec = Recorder::attach(&agent);
    let queues = queue_at_turn_start(&agent);

    let result = agent.prompt("hi").unwrap();

    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        text_turns(&[(&["hi", "s1"], "a"), (&["s2"], "b"), (&["s3"], "c")])
    );
    // At each TurnStart the message about to go in is still queued (it is taken right
    // before the model call).
    assert_eq!(
        *queues.lock().unwrap(),
        [vec!["s1", "s2", "s3"], vec!["s2", "s3"], vec!["s3"]]
    );
}

#[test]
fn steering_all_takes_every_queued_message_at_once() {
    let faux = Faux::default().reply(FauxReply::text("a"));
    let agent = builder(&faux)
        .steering_mode(QueueMode::All)
        .build()
        .unwrap();
    for s in ["s1", "s2", "s3"] {
        agent.steer(s).unwrap();
    }
    let rec = Recorder::attach(&agent);
    let queues = queue_at_turn_start(&agent);

    agent.prompt("hi").unwrap();

    assert_eq!(
        rec.lines(),
        [
            opening("hi"),
            user("s1"),
            user("s2"),
            user("s3"),
            text_reply("a"),
            lines(&["TurnEnd(1 no_tool_calls)", "AgentEnd(no_tool_calls)"])
        ]
        .concat()
    );
    assert_eq!(*queues.lock().unwrap(), [vec!["s1", "s2", "s3"]]);
    assert_eq!(faux.requests().len(), 1);
    assert!(agent.snapshot().steering_queue.is_empty());
}

// ---------------------------------------------------------------------------------------
// Follow-ups

#[test]
fn follow_up_waits_for_the_final_answer_then_starts_a_new_turn() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("echo", json!({"x": 1})))
        .reply(FauxReply::text("first"))
        .reply(FauxReply::text("second"));
    let agent = builder(&faux).tool(echo()).build().unwrap();
    let rec = Recorder::attach(&agent);
    once(&agent, is_update, |h| h.follow_up("and then?").unwrap());
    let queued_at_tool = watch(
        &agent,
        |e| matches!(e, AgentEvent::ToolEnd { .. }),
        |s| texts(&s.follow_up_queue),
    );

    let result = agent.prompt("go").unwrap();

    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(result.text(), "second");
    assert_eq!(*queued_at_tool.lock().unwrap(), [vec!["and then?"]]);
    assert_eq!(
        rec.lines(),
        lines(&[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            r#"MessageEnd(user "go")"#,
            "MessageStart(assistant)",
            r#"MessageUpdate*([call_1:echo]{"x":1})"#,
            r#"MessageEnd(assistant tool_use "" [call_1])"#,
            "ToolStart(call_1)",
            "ToolExecute(call_1)",
            r#"ToolEnd(call_1 "1")"#,
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_1)",
            "TurnEnd(1 continuing)",
            // The model still had work: the follow-up waits.
            "TurnStart(2)",
            "MessageStart(assistant)",
            "MessageUpdate*(first)",
            r#"MessageEnd(assistant stop "first")"#,
            "TurnEnd(2 continuing)",
            // The run would stop here: the follow-up starts a new turn of the same run.
            "TurnStart(3)",
            "MessageStart(user)",
            r#"MessageEnd(user "and then?")"#,
            "MessageStart(assistant)",
            "MessageUpdate*(second)",
            r#"MessageEnd(assistant stop "second")"#,
            "TurnEnd(3 no_tool_calls)",
            "AgentEnd(no_tool_calls)",
        ])
    );
    assert!(agent.snapshot().follow_up_queue.is_empty());
}

#[test]
fn follow_ups_one_at_a_time_vs_all() {
    for (mode, turns) in [(QueueMode::OneAtATime, 3), (QueueMode::All, 2)] {
        let faux = Faux::default()
            .reply(FauxReply::text("a"))
            .reply(FauxReply::text("b"))
            .reply(FauxReply::text("c"));
        let agent = builder(&faux).follow_up_mode(mode).build().unwrap();
        agent.follow_up("f1").unwrap();
        agent.follow_up("f2").unwrap();
        let rec = Recorder::attach(&agent);
        agent.prompt("hi").unwrap();
        let expected = if turns == 3 {
            text_turns(&[(&["hi"], "a"), (&["f1"], "b"), (&["f2"], "c")])
        } else {
            text_turns(&[(&["hi"], "a"), (&["f1", "f2"], "b")])
        };
        assert_eq!(rec.lines(), expected, "{mode:?}");
        assert_eq!(faux.requests().len(), turns, "{mode:?}");
    }
}

// ---------------------------------------------------------------------------------------
// continue_run

#[test]
fn continue_run_from_a_user_tail_asks_the_model() {
    let faux = Faux::default().reply(FauxReply::text("answer"));
    let agent = builder(&faux)
        .messages([Message::user("q")])
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    let result = agent.continue_run().unwrap();

    assert_eq!(result.text(), "answer");
    assert_eq!(
        rec.lines(),
        [
            lines(&["AgentStart", "TurnStart(1)"]),
            text_reply("answer"),
            lines(&["TurnEnd(1 no_tool_calls)", "AgentEnd(no_tool_calls)"])
        ]
        .concat()
    );
    assert_eq!(sent(&faux, 0), [r#"user "q""#]);
}

#[test]
fn continue_run_from_a_tool_result_tail_asks_the_model() {
    let call = ToolCall::new("c9", "echo", "{}");
    let asked = Message::Assistant(AssistantMessage::new(
        vec![ContentBlock::ToolCall(call)],
        StopReason::ToolUse,
    ));
    let answered = Message::ToolResult(ToolResultMessage::new("c9", "echo", "42"));
    let faux = Faux::default().reply(FauxReply::text("it is 42"));
    let agent = builder(&faux)
        .messages([Message::user("q"), asked, answered])
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    agent.continue_run().unwrap();

    assert_eq!(
        rec.lines(),
        [
            lines(&["AgentStart", "TurnStart(1)"]),
            text_reply("it is 42"),
            lines(&["TurnEnd(1 no_tool_calls)", "AgentEnd(no_tool_calls)"])
        ]
        .concat()
    );
    assert_eq!(sent(&faux, 0).last().unwrap(), "tool_result c9");
}

#[test]
fn continue_run_from_an_assistant_tail_takes_steering_one_at_a_time_then_follow_ups() {
    let faux = Faux::default()
        .reply(FauxReply::text("r1"))
        .reply(FauxReply::text("r2"))
        .reply(FauxReply::text("r3"));
    let agent = builder(&faux)
        .messages([Message::user("q"), assistant("a")])
        .build()
        .unwrap();
    agent.follow_up("f").unwrap();
    agent.steer("s1").unwrap();
    agent.steer("s2").unwrap();
    let rec = Recorder::attach(&agent);

    agent.continue_run().unwrap();

    // Regression: the first turn took two steering messages in one-at-a-time mode.
    assert_eq!(
        rec.lines(),
        text_turns(&[(&["s1"], "r1"), (&["s2"], "r2"), (&["f"], "r3")])
    );
}

#[test]
fn continue_run_from_an_assistant_tail_takes_a_follow_up() {
    let faux = Faux::default().reply(FauxReply::text("r"));
    let agent = builder(&faux)
        .messages([Message::user("q"), assistant("a")])
        .build()
        .unwrap();
    agent.follow_up("more").unwrap();
    let rec = Recorder::attach(&agent);

    agent.continue_run().unwrap();

    assert_eq!(
        rec.lines(),
        [
            opening("more"),
            text_reply("r"),
            lines(&["TurnEnd(1 no_tool_calls)", "AgentEnd(no_tool_calls)"])
        ]
        .concat()
    );
}

#[test]
fn continue_run_with_nothing_to_continue_is_a_clear_error() {
    for transcript in [vec![], vec![Message::user("q"), assistant("a")]] {
        let faux = Faux::default().reply(FauxReply::text("unused"));
        let agent = builder(&faux).messages(transcript).build().unwrap();
        let rec = Recorder::attach(&agent);
        let err = agent.continue_run().unwrap_err();
        assert!(err.result().messages.is_empty());
        let err = err.into_error();
        assert!(matches!(err, Error::NothingToContinue(_)), "{err:?}");
        assert!(
            err.to_string().starts_with("nothing to continue: "),
            "{err}"
        );
        assert!(rec.events().is_empty(), "no run started");
        assert!(!agent.is_running());
        assert_eq!(faux.remaining(), 1);
        // The agent is usable afterwards.
        agent.prompt("x").unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Abort

/// How long the model, the stream or a tool stalls in the abort tests. An abort that
/// worked returns in milliseconds; one that did not waits for the stall to end. The tests
/// assert a bound of half the stall, which a loaded machine does not reach, and the
/// latency target itself is measured in `cargo bench --bench control`.
const STALL: Duration = Duration::from_secs(60);

/// Aborts from another thread once `ready` fires; returns how long `prompt` took to return
/// after the abort.
fn abort_when(
    agent: &Agent,
    ready: crossbeam_channel::Receiver<()>,
    input: &str,
) -> (pagent::RunResult, Duration) {
    let handle = agent.handle();
    std::thread::scope(|s| {
        let aborter = s.spawn(move || {
            ready
                .recv_timeout(PATIENCE)
                .expect("the phase to abort in was reached");
            let at = Instant::now();
            assert!(handle.abort(), "a run is active");
            at
        });
        let result = agent.prompt(input).unwrap();
        let returned = Instant::now();
        let at = aborter.join().unwrap();
        (result, returned - at)
    })
}

#[test]
fn abort_while_waiting_for_the_first_byte() {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let faux = Faux::default()
        .reply_with(move |_| {
            tx.send(()).unwrap();
            FauxReply::text("never sent").delay(STALL)
        })
        .reply(FauxReply::text("unused"));
    let agent = builder(&faux).build().unwrap();
    agent.follow_up("queued follow-up").unwrap();
    let rec = Recorder::attach(&agent);

    let (result, latency) = abort_when(&agent, rx, "hi");

    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert!(latency < STALL / 2, "abort took {latency:?}");
    assert_eq!(
        rec.lines(),
        [
            opening("hi"),
            lines(&[
                "MessageStart(assistant)",
                r#"MessageEnd(assistant aborted "")"#,
                "TurnEnd(1 cancelled)",
                "AgentEnd(cancelled)"
            ])
        ]
        .concat()
    );
    // No further model call, and the follow-up stays queued.
    assert_eq!(faux.remaining(), 1);
    assert_eq!(
        texts(&agent.snapshot().follow_up_queue),
        ["queued follow-up"]
    );
    assert!(!agent.is_running());
}

#[test]
fn abort_while_streaming_keeps_the_partial_reply() {
    let faux = Faux::default()
        .reply(FauxReply::text("Hello world, this is long"))
        .reply(FauxReply::text("unused"));
    let agent = builder(&faux).build().unwrap();
    let rec = Recorder::attach(&agent);
    let updates = AtomicUsize::new(0);
    let handle = agent.handle();
    agent
        .subscribe(move |e: &AgentEvent| {
            if is_update(e) && updates.fetch_add(1, Ordering::SeqCst) == 1 {
                assert!(handle.abort());
            }
        })
        .keep();

    let result = agent.prompt("hi").unwrap();

    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert_eq!(
        rec.lines(),
        [
            opening("hi"),
            lines(&[
                "MessageStart(assistant)",
                "MessageUpdate*(Hello wo)",
                r#"MessageEnd(assistant aborted "Hello wo")"#,
                "TurnEnd(1 cancelled)",
                "AgentEnd(cancelled)"
            ])
        ]
        .concat()
    );
    let last = agent.snapshot().last_message().unwrap().clone();
    let reply = last.as_assistant().unwrap();
    assert_eq!(reply.stop_reason, StopReason::Aborted);
    assert_eq!(reply.error_message.as_deref(), Some("aborted"));
    assert_eq!(faux.remaining(), 1);
}

#[test]
fn abort_from_another_thread_while_the_stream_stalls() {
    let faux = Faux::default().reply(
        FauxReply::text("partial")
            .then_tool_call("echo", json!({"x": 1}))
            .then_stall(STALL),
    );
    let agent = builder(&faux).tool(echo()).build().unwrap();
    let rec = Recorder::attach(&agent);
    let (tx, rx) = crossbeam_channel::bounded(1);
    agent
        .subscribe(move |e: &AgentEvent| {
            if let AgentEvent::MessageUpdate { message, .. } = e
                && message
                    .tool_calls()
                    .first()
                    .is_some_and(|c| c.arguments == r#"{"x":1}"#)
            {
                let _ = tx.try_send(());
            }
        })
        .keep();

    let (result, latency) = abort_when(&agent, rx, "hi");

    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert!(latency < STALL / 2, "abort took {latency:?}");
    let cancelled = format!("ToolEnd(call_1 error {CANCELLED:?})");
    assert_eq!(
        rec.lines(),
        lines(&[
            "AgentStart",
            "TurnStart(1)",
            "MessageStart(user)",
            r#"MessageEnd(user "hi")"#,
            "MessageStart(assistant)",
            r#"MessageUpdate*(partial[call_1:echo]{"x":1})"#,
            r#"MessageEnd(assistant aborted "partial" [call_1])"#,
            // The call of the cut reply never runs, but gets its result.
            "ToolStart(call_1)",
            &cancelled,
            "MessageStart(tool_result)",
            "MessageEnd(tool_result call_1)",
            "TurnEnd(1 cancelled)",
            "AgentEnd(cancelled)",
        ])
    );
}

#[test]
fn abort_during_a_tool_keeps_its_result_and_cancels_the_rest() {
    let (started_tx, started_rx) = crossbeam_channel::bounded(1);
    let faux = Faux::default()
        .reply(FauxReply::tool_call("slow", json!({})).then_tool_call("echo", json!({"x": 2})))
        .reply(FauxReply::text("unused"));
    let agent = builder(&faux)
        .tool(fn_tool("slow", move |_, ctx| {
            started_tx.send(()).unwrap();
            // A cooperative tool: it sees the cancel token and returns what it has.
            let aborted = ctx.sleep(STALL);
            Ok(ToolOutput::text(format!("stopped early: {aborted}")))
        }))
        .tool(echo())
        .max_parallel_tools(1)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    let (result, latency) = abort_when(&agent, started_rx, "go");

    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert!(latency < STALL / 2, "abort took {latency:?}");
    let cancelled = format!("ToolEnd(call_2 error {CANCELLED:?})");
    assert_eq!(
        rec.lines(),
        [
            opening("go"),
            calls_turn(
                r#"[call_1:slow]{}[call_2:echo]{"x":2}"#,
                &["call_1", "call_2"],
                &[
                    "ToolStart(call_1)",
                    "ToolExecute(call_1)",
                    r#"ToolEnd(call_1 "stopped early: true")"#,
                    "ToolStart(call_2)",
                    &cancelled
                ],
            ),
            lines(&["TurnEnd(1 cancelled)", "AgentEnd(cancelled)"])
        ]
        .concat()
    );
    assert_eq!(faux.remaining(), 1, "no model call after the abort");
}

#[test]
fn abort_releases_a_before_tool_call_hook_waiting_for_a_human() {
    let (asking_tx, asking_rx) = crossbeam_channel::bounded(1);
    // Nobody ever answers: only the abort can release the hook.
    let (_answer_tx, answer_rx) = crossbeam_channel::bounded::<bool>(1);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let faux = Faux::default()
        .reply(FauxReply::tool_call("rm", json!({"path": "/"})))
        .reply(FauxReply::text("unused"));
    let agent = builder(&faux)
        .tool(fn_tool("rm", move |_, _| {
            flag.store(true, Ordering::SeqCst);
            Ok(ToolOutput::text("removed"))
        }))
        .before_tool_call(move |req| {
            asking_tx.send(()).unwrap();
            match req.wait_for(&answer_rx) {
                Some(true) => ToolDecision::Allow,
                Some(false) => ToolDecision::Block("the user said no".into()),
                None => ToolDecision::Block("no answer".into()),
            }
        })
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    let (result, latency) = abort_when(&agent, asking_rx, "clean up");

    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert!(latency < STALL / 2, "abort took {latency:?}");
    assert!(!ran.load(Ordering::SeqCst));
    let cancelled = format!("ToolEnd(call_1 error {CANCELLED:?})");
    assert_eq!(
        rec.lines(),
        [
            opening("clean up"),
            calls_turn(
                r#"[call_1:rm]{"path":"/"}"#,
                &["call_1"],
                &["ToolStart(call_1)", &cancelled],
            ),
            lines(&["TurnEnd(1 cancelled)", "AgentEnd(cancelled)"])
        ]
        .concat()
    );
}

#[test]
fn abort_after_a_turn_ended_makes_no_further_model_call() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("echo", json!({"x": 1})))
        .reply(FauxReply::text("unused"));
    let agent = builder(&faux).tool(echo()).build().unwrap();
    agent.steer("later").unwrap();
    let rec = Recorder::attach(&agent);
    once(
        &agent,
        |e| matches!(e, AgentEvent::TurnEnd { .. }),
        |h| assert!(h.abort()),
    );
    // Steering queued during the turn must stay queued too.
    once(&agent, is_update, |h| h.steer("during").unwrap());

    let result = agent.prompt("go").unwrap();

    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert_eq!(
        rec.lines(),
        [
            opening("go"),
            user("later"),
            calls_turn(
                r#"[call_1:echo]{"x":1}"#,
                &["call_1"],
                &[
                    "ToolStart(call_1)",
                    "ToolExecute(call_1)",
                    r#"ToolEnd(call_1 "1")"#
                ],
            ),
            // The abort came with TurnEnd: the run ends there, without a second turn.
            lines(&["TurnEnd(1 continuing)", "AgentEnd(cancelled)"]),
        ]
        .concat()
    );
    assert_eq!(faux.remaining(), 1);
    assert_eq!(texts(&agent.snapshot().steering_queue), ["during"]);
}

#[test]
fn abort_when_no_run_is_active_does_not_cancel_the_next_run() {
    let faux = Faux::default()
        .reply(FauxReply::text("one"))
        .reply(FauxReply::text("two"));
    let agent = builder(&faux).build().unwrap();
    assert!(!agent.abort(), "nothing to abort");
    assert!(!agent.handle().abort());
    // An abort that arrives as the first run ends (in its AgentEnd listener) is too late
    // for that run and must not reach the next one either.
    once(
        &agent,
        |e| matches!(e, AgentEvent::AgentEnd { .. }),
        |h| {
            h.abort();
        },
    );

    assert_eq!(
        agent.prompt("a").unwrap().stop_reason,
        RunStopReason::NoToolCalls
    );
    assert!(!agent.abort());
    let second = agent.prompt("b").unwrap();
    assert_eq!(second.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(second.text(), "two");
}

#[test]
fn steering_queued_when_aborted_stays_queued_and_rides_with_the_next_prompt() {
    let faux = Faux::default()
        .reply(FauxReply::text("Hello world, this is long"))
        .reply(FauxReply::text("fresh"));
    let agent = builder(&faux).build().unwrap();
    once(&agent, is_update, |h| {
        h.steer("use French").unwrap();
        assert!(h.abort());
    });

    assert_eq!(
        agent.prompt("hi").unwrap().stop_reason,
        RunStopReason::Cancelled
    );
    assert_eq!(texts(&agent.snapshot().steering_queue), ["use French"]);

    let rec = Recorder::attach(&agent);
    let result = agent.prompt("again").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        text_turns(&[(&["again", "use French"], "fresh")])
    );
    assert!(agent.snapshot().steering_queue.is_empty());
}

// ---------------------------------------------------------------------------------------
// Hooks

#[test]
fn before_tool_call_blocks_with_a_reason_the_model_sees() {
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("rm", json!({"path": "/"}))
                .then_tool_call("echo", json!({"x": 7})),
        )
        .reply(FauxReply::text("understood"));
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let agent = builder(&faux)
        .tool(fn_tool("rm", move |_, _| {
            flag.store(true, Ordering::SeqCst);
            Ok(ToolOutput::text("removed"))
        }))
        .tool(echo())
        .max_parallel_tools(1)
        .before_tool_call(|req| {
            if req.call.name == "rm" {
                ToolDecision::Block(format!("deleting {} is not allowed", req.args["path"]))
            } else {
                ToolDecision::Allow
            }
        })
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    agent.prompt("clean up").unwrap();

    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "clean up",
            r#"[call_1:rm]{"path":"/"}[call_2:echo]{"x":7}"#,
            &["call_1", "call_2"],
            &[
                "ToolStart(call_1)",
                r#"ToolEnd(call_1 error "blocked: deleting \"/\" is not allowed")"#,
                "ToolStart(call_2)",
                "ToolExecute(call_2)",
                r#"ToolEnd(call_2 "7")"#,
            ],
            "understood",
        )
    );
    let results: Vec<_> = faux.requests()[1]
        .messages
        .iter()
        .filter_map(|m| m.as_tool_result().cloned())
        .collect();
    assert_eq!(results[0].text(), r#"blocked: deleting "/" is not allowed"#);
    assert!(results[0].is_error);
}

#[test]
fn before_tool_call_rewrites_the_arguments() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("echo", json!({"x": 1})))
        .reply(FauxReply::text("ok"));
    let agent = builder(&faux)
        .tool(echo())
        .before_tool_call(|req| {
            let mut args = req.args.clone();
            args["x"] = json!(42);
            ToolDecision::Rewrite(args)
        })
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    agent.prompt("go").unwrap();

    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            r#"[call_1:echo]{"x":1}"#,
            &["call_1"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1 rewritten)",
                r#"ToolEnd(call_1 "42")"#
            ],
            "ok",
        )
    );
    // The transcript keeps the call as the model made it.
    let calls: Vec<_> = agent.snapshot().messages[1]
        .as_assistant()
        .unwrap()
        .tool_calls()
        .map(|c| c.arguments.clone())
        .collect();
    assert_eq!(calls, [r#"{"x":1}"#]);
}

#[test]
fn after_tool_call_replaces_the_result_of_calls_that_ran() {
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("echo", json!({"x": "secret"}))
                .then_tool_call("missing", json!({})),
        )
        .reply(FauxReply::text("ok"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let agent = builder(&faux)
        .tool(echo())
        .max_parallel_tools(1)
        .after_tool_call(move |call, result| {
            sink.lock().unwrap().push(call.id.clone());
            let content = result.text().replace("secret", "[redacted]");
            result.with_content(content)
        })
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    agent.prompt("go").unwrap();

    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            r#"[call_1:echo]{"x":"secret"}[call_2:missing]{}"#,
            &["call_1", "call_2"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                r#"ToolEnd(call_1 "\"[redacted]\"")"#,
                "ToolStart(call_2)",
                r#"ToolEnd(call_2 error "error: unknown tool 'missing'; available: ['echo']")"#,
            ],
            "ok",
        )
    );
    // The hook sees the calls whose tool ran, not the ones settled without running.
    assert_eq!(*seen.lock().unwrap(), ["call_1"]);
    let sent_result = faux.requests()[1]
        .messages
        .iter()
        .find_map(|m| m.as_tool_result().cloned())
        .unwrap();
    assert_eq!(sent_result.text(), r#""[redacted]""#);
}

#[test]
fn transform_context_drops_old_messages_without_touching_the_transcript() {
    let history = [
        Message::user("old question"),
        assistant("old answer"),
        Message::user("older context"),
        assistant("more"),
    ];
    let faux = Faux::default()
        .reply(FauxReply::tool_call("echo", json!({"x": 1})))
        .reply(FauxReply::text("done"));
    let agent = builder(&faux)
        .messages(history)
        .tool(echo())
        .transform_context(|messages| {
            // Keep the last user message and what follows it.
            let from = messages
                .iter()
                .rposition(|m| matches!(&**m, Message::User(_)))
                .unwrap_or(0);
            messages[from..].to_vec()
        })
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    agent.prompt("new question").unwrap();

    assert_eq!(sent(&faux, 0), [r#"user "new question""#]);
    assert_eq!(
        sent(&faux, 1),
        [
            r#"user "new question""#,
            r#"assistant tool_use "" [call_1]"#,
            "tool_result call_1",
        ]
    );
    let transcript: Vec<_> = agent
        .snapshot()
        .messages
        .iter()
        .map(|m| describe(m))
        .collect();
    assert_eq!(
        transcript,
        [
            r#"user "old question""#,
            r#"assistant stop "old answer""#,
            r#"user "older context""#,
            r#"assistant stop "more""#,
            r#"user "new question""#,
            r#"assistant tool_use "" [call_1]"#,
            "tool_result call_1",
            r#"assistant stop "done""#,
        ]
    );
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "new question",
            r#"[call_1:echo]{"x":1}"#,
            &["call_1"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                r#"ToolEnd(call_1 "1")"#
            ],
            "done",
        )
    );
}

#[test]
fn transform_context_gets_the_transcript_s_own_messages_and_may_add_new_ones() {
    let faux = Faux::default().reply(FauxReply::text("done"));
    let shared = Arc::new(AtomicBool::new(false));
    let seen = shared.clone();
    let handle: Arc<OnceLock<AgentHandle>> = Arc::default();
    let agent_handle = handle.clone();
    let agent = builder(&faux)
        .messages([Message::user("old question"), assistant("old answer")])
        .transform_context(move |mut messages| {
            // The very `Arc`s of the transcript: nothing was copied to build the request.
            let snapshot = agent_handle.get().unwrap().snapshot();
            seen.store(
                messages.len() == snapshot.messages.len()
                    && messages
                        .iter()
                        .zip(snapshot.messages.iter())
                        .all(|(a, b)| Arc::ptr_eq(a, b)),
                Ordering::SeqCst,
            );
            messages.insert(0, Arc::new(Message::user("summary of before")));
            messages
        })
        .build()
        .unwrap();
    handle.set(agent.handle()).unwrap();

    agent.prompt("new question").unwrap();

    assert!(
        shared.load(Ordering::SeqCst),
        "the hook got the transcript's own Arcs"
    );
    assert_eq!(
        sent(&faux, 0),
        [
            r#"user "summary of before""#,
            r#"user "old question""#,
            r#"assistant stop "old answer""#,
            r#"user "new question""#,
        ]
    );
    assert_eq!(
        agent.snapshot().messages.len(),
        4,
        "the transcript is untouched"
    );
}

#[test]
fn before_turn_switches_the_model_thinking_and_tools_between_turns() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("echo", json!({"x": 1})))
        .reply(FauxReply::text("done"));
    let turns = Arc::new(Mutex::new(Vec::new()));
    let sink = turns.clone();
    let agent = builder(&faux)
        .tool(echo())
        .before_turn(move |setup| {
            sink.lock().unwrap().push((setup.turn, setup.model.clone()));
            if setup.turn == 2 {
                setup.model = "big".into();
                setup.thinking = ThinkingLevel::High;
                setup.tools.clear();
            }
        })
        .build()
        .unwrap();
    let models = Arc::new(Mutex::new(Vec::new()));
    let sink = models.clone();
    let handle = agent.handle();
    agent
        .subscribe(move |e: &AgentEvent| {
            if let AgentEvent::MessageStart { message } = e
                && let Some(a) = message.as_assistant()
            {
                let s = handle.snapshot();
                sink.lock()
                    .unwrap()
                    .push((a.model.clone(), s.model.to_string(), s.tools.len()));
            }
        })
        .keep();

    agent.prompt("go").unwrap();

    assert_eq!(
        *turns.lock().unwrap(),
        [(1, "m".to_owned()), (2, "m".to_owned())]
    );
    let requests = faux.requests();
    assert_eq!(
        (requests[0].model.as_str(), requests[0].tools.len()),
        ("m", 1)
    );
    assert_eq!(requests[0].thinking, ThinkingLevel::Off);
    assert_eq!(
        (requests[1].model.as_str(), requests[1].tools.len()),
        ("big", 0)
    );
    assert_eq!(requests[1].thinking, ThinkingLevel::High);
    // The state says which model and tools the request in flight uses.
    assert_eq!(
        *models.lock().unwrap(),
        [
            ("m".to_owned(), "m".to_owned(), 1),
            ("big".to_owned(), "big".to_owned(), 0)
        ]
    );
    let s = agent.snapshot();
    assert_eq!((&*s.model, s.thinking), ("big", ThinkingLevel::High));
    // The switch stays: the next run asks the same model as the state says.
    faux.push(FauxReply::text("again"));
    agent.prompt("more").unwrap();
    assert_eq!(faux.requests()[2].model, "big");
    assert_eq!(
        turns.lock().unwrap().last().unwrap(),
        &(1, "big".to_owned())
    );
}

#[test]
fn hooks_that_panic_are_contained_as_documented() {
    // before_tool_call and after_tool_call: that call gets an error result, the run goes on.
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("echo", json!({"x": 1})).then_tool_call("echo", json!({"x": 2})),
        )
        .reply(FauxReply::text("ok"));
    let agent = builder(&faux)
        .tool(echo())
        .max_parallel_tools(1)
        .before_tool_call(|req| {
            assert!(req.args["x"] != 1, "no ones");
            ToolDecision::Allow
        })
        .after_tool_call(|_, _| panic!("after boom"))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("go").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            r#"[call_1:echo]{"x":1}[call_2:echo]{"x":2}"#,
            &["call_1", "call_2"],
            &[
                "ToolStart(call_1)",
                r#"ToolEnd(call_1 error "the before_tool_call hook panicked: no ones")"#,
                "ToolStart(call_2)",
                "ToolExecute(call_2)",
                r#"ToolEnd(call_2 error "the after_tool_call hook panicked: after boom")"#,
            ],
            "ok",
        )
    );

    // transform_context and before_turn: the run ends with Error, AgentEnd still comes.
    type Build = fn(pagent::AgentBuilder) -> pagent::AgentBuilder;
    let cases: [(Build, &str); 2] = [
        (
            |b| b.transform_context(|_| panic!("transform boom")),
            "the transform_context hook panicked: transform boom",
        ),
        (
            |b| b.before_turn(|_| panic!("turn boom")),
            "the before_turn hook panicked: turn boom",
        ),
    ];
    for (build, message) in cases {
        let faux = Faux::default().reply(FauxReply::text("unused"));
        let agent = build(builder(&faux)).build().unwrap();
        let rec = Recorder::attach(&agent);
        let failed = agent.prompt("go").unwrap_err();
        assert_eq!(failed.result().stop_reason, RunStopReason::Error);
        assert_eq!(failed.to_string(), message);
        assert!(failed.error().is_panic());
        assert_eq!(failed.kind(), ErrorKind::Panic);
        assert_eq!(faux.remaining(), 1, "no model call");
        assert_eq!(
            rec.lines(),
            [
                opening("go"),
                lines(&[
                    "MessageStart(assistant)",
                    r#"MessageEnd(assistant error "")"#,
                    "TurnEnd(1 error)",
                    "AgentEnd(error)",
                ]),
            ]
            .concat(),
            "{message}"
        );
        assert_eq!(agent.snapshot().error_message.as_deref(), Some(message));
        assert!(!agent.is_running());
    }
}

// ---------------------------------------------------------------------------------------
// Parallel tools

/// `sleep`: waits `ms` milliseconds (abortable) and says so; counts how many run at once.
fn sleeper(live: Arc<AtomicUsize>, peak: Arc<AtomicUsize>) -> FnTool {
    fn_tool("sleep", move |args, ctx| {
        let now = live.fetch_add(1, Ordering::SeqCst) + 1;
        peak.fetch_max(now, Ordering::SeqCst);
        let ms = args["ms"].as_u64().unwrap();
        ctx.sleep(Duration::from_millis(ms));
        live.fetch_sub(1, Ordering::SeqCst);
        Ok(ToolOutput::text(format!("slept {ms}")))
    })
}

fn three_sleeps() -> FauxReply {
    FauxReply::tool_call("sleep", json!({"ms": 300}))
        .then_tool_call("sleep", json!({"ms": 100}))
        .then_tool_call("sleep", json!({"ms": 200}))
}

/// Waits until the three calls of its batch have all been running at once, then, with
/// `{"after": id}`, until the agent's snapshot shows that call's result: the completion order
/// is the test's choice, not the scheduler's. Gives up after `PATIENCE` and says so.
fn waiter(
    agent: Arc<OnceLock<AgentHandle>>,
    live: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
) -> FnTool {
    fn_tool("wait", move |args, ctx| {
        let now = live.fetch_add(1, Ordering::SeqCst) + 1;
        peak.fetch_max(now, Ordering::SeqCst);
        let deadline = Instant::now() + PATIENCE;
        let wait_for = |done: &dyn Fn() -> bool| {
            while !done() {
                if Instant::now() > deadline || ctx.sleep(Duration::from_millis(1)) {
                    return false;
                }
            }
            true
        };
        let ended = |id: &str| {
            agent.get().is_some_and(|h| {
                h.snapshot()
                    .tool_results
                    .iter()
                    .any(|r| r.tool_call_id == id)
            })
        };
        let waited = wait_for(&|| peak.load(Ordering::SeqCst) == 3)
            && args["after"]
                .as_str()
                .is_none_or(|id| wait_for(&|| ended(id)));
        live.fetch_sub(1, Ordering::SeqCst);
        Ok(ToolOutput::text(if waited { "waited" } else { "gave up" }))
    })
}

#[test]
fn three_parallel_tools_end_in_completion_order_and_report_in_call_order() {
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("wait", json!({"after": "call_3"}))
                .then_tool_call("wait", json!({}))
                .then_tool_call("wait", json!({"after": "call_2"})),
        )
        .reply(FauxReply::text("done"));
    let (live, peak) = (Arc::default(), Arc::<AtomicUsize>::default());
    let handle: Arc<OnceLock<AgentHandle>> = Arc::default();
    let agent = builder(&faux)
        .tool(waiter(handle.clone(), live, peak.clone()))
        .build()
        .unwrap();
    handle.set(agent.handle()).unwrap();
    let rec = Recorder::attach(&agent);

    agent.prompt("go").unwrap();

    // All three ran at once (none could end before the three were running), so the batch
    // took about its longest call, not the sum; the order they end in is the one the calls
    // waited for, and the events report it.
    assert_eq!(peak.load(Ordering::SeqCst), 3);
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            r#"[call_1:wait]{"after":"call_3"}[call_2:wait]{}[call_3:wait]{"after":"call_2"}"#,
            &["call_1", "call_2", "call_3"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                "ToolStart(call_2)",
                "ToolExecute(call_2)",
                "ToolStart(call_3)",
                "ToolExecute(call_3)",
                r#"ToolEnd(call_2 "waited")"#,
                r#"ToolEnd(call_3 "waited")"#,
                r#"ToolEnd(call_1 "waited")"#
            ],
            "done",
        )
    );
    // TurnEnd carries the results in call order too.
    let ends: Vec<_> = rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::TurnEnd {
                turn: 1,
                tool_results,
                ..
            } => Some(tool_results),
            _ => None,
        })
        .collect();
    let ids: Vec<_> = ends[0].iter().map(|r| r.tool_call_id.as_str()).collect();
    assert_eq!(ids, ["call_1", "call_2", "call_3"]);
}

#[test]
fn a_sequential_tool_makes_its_batch_sequential() {
    let faux = Faux::default()
        .reply(three_sleeps().then_tool_call("lock", json!({})))
        .reply(FauxReply::text("done"));
    let (live, peak) = (Arc::default(), Arc::<AtomicUsize>::default());
    let agent = builder(&faux)
        .tool(sleeper(live, peak.clone()))
        .tool(fn_tool("lock", |_, _| Ok(ToolOutput::text("locked"))).sequential())
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    agent.prompt("go").unwrap();

    assert_eq!(peak.load(Ordering::SeqCst), 1);
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            r#"[call_1:sleep]{"ms":300}[call_2:sleep]{"ms":100}[call_3:sleep]{"ms":200}[call_4:lock]{}"#,
            &["call_1", "call_2", "call_3", "call_4"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                r#"ToolEnd(call_1 "slept 300")"#,
                "ToolStart(call_2)",
                "ToolExecute(call_2)",
                r#"ToolEnd(call_2 "slept 100")"#,
                "ToolStart(call_3)",
                "ToolExecute(call_3)",
                r#"ToolEnd(call_3 "slept 200")"#,
                "ToolStart(call_4)",
                "ToolExecute(call_4)",
                r#"ToolEnd(call_4 "locked")"#,
            ],
            "done",
        )
    );
}

#[test]
fn max_parallel_tools_caps_concurrency() {
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("sleep", json!({"ms": 400}))
                .then_tool_call("sleep", json!({"ms": 100}))
                .then_tool_call("sleep", json!({"ms": 50})),
        )
        .reply(FauxReply::text("done"));
    let (live, peak) = (Arc::default(), Arc::<AtomicUsize>::default());
    let agent = builder(&faux)
        .tool(sleeper(live, peak.clone()))
        .max_parallel_tools(2)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    agent.prompt("go").unwrap();

    assert!(peak.load(Ordering::SeqCst) <= 2);
    // call_3 starts only once a slot is free: after call_2 (100 ms) ended; it ends at about
    // 150 ms, far (250 ms) before call_1 (400 ms), so the order is stable on a loaded machine.
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            r#"[call_1:sleep]{"ms":400}[call_2:sleep]{"ms":100}[call_3:sleep]{"ms":50}"#,
            &["call_1", "call_2", "call_3"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                "ToolStart(call_2)",
                "ToolExecute(call_2)",
                r#"ToolEnd(call_2 "slept 100")"#,
                "ToolStart(call_3)",
                "ToolExecute(call_3)",
                r#"ToolEnd(call_3 "slept 50")"#,
                r#"ToolEnd(call_1 "slept 400")"#,
            ],
            "done",
        )
    );
}

#[test]
fn a_finished_tool_is_in_the_state_while_a_sibling_still_runs() {
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
    let (updated_tx, updated_rx) = crossbeam_channel::bounded::<()>(1);
    let faux = Faux::default()
        .reply(FauxReply::tool_call("wait", json!({})).then_tool_call("quick", json!({})))
        .reply(FauxReply::text("done"));
    let agent = builder(&faux)
        .tool(fn_tool("wait", move |_, ctx| {
            ctx.update("waiting for the test");
            updated_tx.send(()).unwrap();
            release_rx
                .recv_timeout(PATIENCE)
                .expect("released by the test");
            Ok(ToolOutput::text("released"))
        }))
        // Ends once its sibling published progress, so the order of events is fixed.
        .tool(fn_tool("quick", move |_, _| {
            updated_rx.recv_timeout(PATIENCE).expect("call_1 published");
            Ok(ToolOutput::text("5"))
        }))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let (ended_tx, ended_rx) = crossbeam_channel::bounded(1);
    agent
        .subscribe(move |e: &AgentEvent| {
            if let AgentEvent::ToolEnd { result, .. } = e
                && result.tool_call_id == "call_2"
            {
                ended_tx.send(()).unwrap();
            }
        })
        .keep();

    std::thread::scope(|s| {
        let run = s.spawn(|| agent.prompt("go").unwrap());
        ended_rx.recv_timeout(PATIENCE).expect("call_2 ended");
        // The run thread is blocked on call_1, and the state already shows call_2 done.
        let state = agent.snapshot();
        let pending: Vec<_> = state
            .pending_tool_calls
            .iter()
            .map(|p| p.call.id.clone())
            .collect();
        assert_eq!(pending, ["call_1"]);
        assert_eq!(
            state.pending_tool_calls[0]
                .progress
                .as_ref()
                .map(|p| p.to_text())
                .as_deref(),
            Some("waiting for the test")
        );
        let done: Vec<_> = state
            .tool_results
            .iter()
            .map(|r| (r.tool_call_id.as_str(), r.text()))
            .collect();
        assert_eq!(done, [("call_2", "5".to_owned())]);
        // A second prompt while the run is active is refused, not queued.
        assert_eq!(agent.prompt("again").unwrap_err().error(), &Error::Busy);
        assert_eq!(agent.continue_run().unwrap_err().error(), &Error::Busy);
        release_tx.send(()).unwrap();
        assert_eq!(run.join().unwrap().stop_reason, RunStopReason::NoToolCalls);
    });
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            "[call_1:wait]{}[call_2:quick]{}",
            &["call_1", "call_2"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                "ToolStart(call_2)",
                "ToolExecute(call_2)",
                r#"ToolUpdate(call_1 "waiting for the test")"#,
                r#"ToolEnd(call_2 "5")"#,
                r#"ToolEnd(call_1 "released")"#,
            ],
            "done",
        )
    );
}

// ---------------------------------------------------------------------------------------
// Calls that run one at a time run on the run thread

#[test]
fn a_lone_call_runs_on_the_run_thread_and_its_progress_is_in_the_state_while_it_runs() {
    let (updated_tx, updated_rx) = crossbeam_channel::bounded::<()>(1);
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
    let ran_on = Arc::new(Mutex::new(None));
    let on = ran_on.clone();
    let faux = Faux::default()
        .reply(FauxReply::tool_call("wait", json!({})))
        .reply(FauxReply::text("done"));
    let agent = builder(&faux)
        .tool(fn_tool("wait", move |_, ctx| {
            *on.lock().unwrap() = Some(std::thread::current().id());
            ctx.update("half way");
            updated_tx.send(()).unwrap();
            release_rx
                .recv_timeout(PATIENCE)
                .expect("released by the test");
            Ok(ToolOutput::text("released"))
        }))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);

    let run_thread = std::thread::scope(|s| {
        let run = s.spawn(|| {
            let result = agent.prompt("go").unwrap();
            (std::thread::current().id(), result)
        });
        updated_rx.recv_timeout(PATIENCE).expect("the tool updated");
        // Read from this thread while the tool still runs.
        let state = agent.snapshot();
        assert!(state.is_streaming);
        assert_eq!(state.pending_tool_calls.len(), 1);
        assert_eq!(
            state.pending_tool_calls[0]
                .progress
                .as_ref()
                .map(|p| p.to_text())
                .as_deref(),
            Some("half way")
        );
        release_tx.send(()).unwrap();
        let (thread, result) = run.join().unwrap();
        assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
        thread
    });
    assert_eq!(*ran_on.lock().unwrap(), Some(run_thread));
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            "[call_1:wait]{}",
            &["call_1"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                r#"ToolUpdate(call_1 "half way")"#,
                r#"ToolEnd(call_1 "released")"#,
            ],
            "done",
        )
    );
}

#[test]
fn a_sequential_batch_runs_on_the_run_thread_one_call_after_another() {
    let threads = Arc::new(Mutex::new(Vec::new()));
    let log = threads.clone();
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("echo", json!({"x": 1})).then_tool_call("echo", json!({"x": 2})),
        )
        .reply(FauxReply::text("done"));
    let agent = builder(&faux)
        .tool(
            fn_tool("echo", move |args, ctx| {
                log.lock().unwrap().push(std::thread::current().id());
                ctx.update(format!("echoing {}", args["x"]));
                Ok(ToolOutput::text(args["x"].to_string()))
            })
            .sequential(),
        )
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("go").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    let me = std::thread::current().id();
    assert_eq!(*threads.lock().unwrap(), [me, me]);
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            r#"[call_1:echo]{"x":1}[call_2:echo]{"x":2}"#,
            &["call_1", "call_2"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                r#"ToolUpdate(call_1 "echoing 1")"#,
                r#"ToolEnd(call_1 "1")"#,
                "ToolStart(call_2)",
                "ToolExecute(call_2)",
                r#"ToolUpdate(call_2 "echoing 2")"#,
                r#"ToolEnd(call_2 "2")"#,
            ],
            "done",
        )
    );
}

#[test]
fn updates_from_a_thread_the_tool_started_are_published_in_order_before_its_end() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("helpers", json!({})))
        .reply(FauxReply::text("done"));
    let agent = builder(&faux)
        .tool(fn_tool("helpers", |_, ctx| {
            std::thread::scope(|s| {
                s.spawn(|| ctx.update("from a helper, first"));
            });
            // Publishes the helper's update first, then its own.
            ctx.update("from the tool");
            std::thread::scope(|s| {
                s.spawn(|| ctx.update("from a helper, last"));
            });
            Ok(ToolOutput::text("helped"))
        }))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = bounded(move || agent.prompt("go").unwrap());
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            "[call_1:helpers]{}",
            &["call_1"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                r#"ToolUpdate(call_1 "from a helper, first")"#,
                r#"ToolUpdate(call_1 "from the tool")"#,
                r#"ToolUpdate(call_1 "from a helper, last")"#,
                r#"ToolEnd(call_1 "helped")"#,
            ],
            "done",
        )
    );
}

// ---------------------------------------------------------------------------------------
// Listeners that control the agent

#[test]
fn listeners_may_steer_abort_subscribe_and_unsubscribe_without_deadlock() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("echo", json!({"x": 1})))
        .reply(FauxReply::text("Hello world, this is long"))
        .reply(FauxReply::text("unused"));
    let agent = Arc::new(builder(&faux).tool(echo()).build().unwrap());
    let rec = Recorder::attach(&agent);
    let handle = agent.handle();
    let inner_calls = Arc::new(AtomicUsize::new(0));
    let count = inner_calls.clone();
    agent
        .subscribe(move |e: &AgentEvent| {
            let _ = handle.snapshot();
            match e {
                AgentEvent::TurnStart { turn: 1 } => {
                    let count = count.clone();
                    let sub = handle.subscribe(move |_| {
                        count.fetch_add(1, Ordering::SeqCst);
                    });
                    handle.steer("from a listener").unwrap();
                    handle.follow_up("later, from a listener").unwrap();
                    // Unsubscribing at once: it never sees an event.
                    assert!(sub.unsubscribe());
                    let kept = handle.subscribe(|_| {});
                    assert!(handle.unsubscribe(kept.id()));
                }
                AgentEvent::TurnStart { turn: 2 } => assert!(handle.abort()),
                _ => {}
            }
        })
        .keep();

    let agent2 = agent.clone();
    let result = bounded(move || agent2.prompt("go").unwrap());

    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert_eq!(inner_calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        rec.lines(),
        [
            opening("go"),
            // Steered in the `TurnStart(1)` listener: it goes in before turn 1's model call.
            user("from a listener"),
            calls_turn(
                r#"[call_1:echo]{"x":1}"#,
                &["call_1"],
                &[
                    "ToolStart(call_1)",
                    "ToolExecute(call_1)",
                    r#"ToolEnd(call_1 "1")"#
                ],
            ),
            lines(&["TurnEnd(1 continuing)", "TurnStart(2)"]),
            lines(&[
                "MessageStart(assistant)",
                r#"MessageEnd(assistant aborted "")"#,
                "TurnEnd(2 cancelled)",
                "AgentEnd(cancelled)",
            ]),
        ]
        .concat()
    );
    assert_eq!(
        texts(&agent.snapshot().follow_up_queue),
        ["later, from a listener"]
    );
}

#[test]
fn a_tool_that_finished_is_published_while_before_tool_call_waits_for_approval() {
    // The approval for call_2 is given only once call_1's end was published: if the hook
    // held back the run thread's events, it would wait in vain (and time out).
    let (approve_tx, approve_rx) = crossbeam_channel::bounded::<bool>(1);
    let faux = Faux::default()
        .reply(FauxReply::tool_call("echo", json!({"x": 1})).then_tool_call("rm", json!({})))
        .reply(FauxReply::text("done"));
    let agent = builder(&faux)
        .tool(echo())
        .tool(fn_tool("rm", |_, _| Ok(ToolOutput::text("removed"))))
        .before_tool_call(move |req| {
            if req.call.name != "rm" {
                return ToolDecision::Allow;
            }
            match approve_rx.recv_timeout(PATIENCE) {
                Ok(true) => ToolDecision::Allow,
                _ => ToolDecision::Block("no approval".into()),
            }
        })
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let handle = agent.handle();
    agent
        .subscribe(move |e: &AgentEvent| {
            if let AgentEvent::ToolEnd { result, .. } = e
                && result.tool_call_id == "call_1"
            {
                // The state already has it, while call_2 still waits for its approval.
                let s = handle.snapshot();
                assert_eq!(s.pending_tool_calls.len(), 1);
                assert_eq!(s.pending_tool_calls[0].call.id, "call_2");
                approve_tx.send(true).unwrap();
            }
        })
        .keep();

    let result = bounded(move || agent.prompt("go").unwrap());

    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        batch_then_answer(
            "go",
            r#"[call_1:echo]{"x":1}[call_2:rm]{}"#,
            &["call_1", "call_2"],
            &[
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                "ToolStart(call_2)",
                // call_1 ends while the hook waits for approval of call_2.
                r#"ToolEnd(call_1 "1")"#,
                "ToolExecute(call_2)",
                r#"ToolEnd(call_2 "removed")"#,
            ],
            "done",
        )
    );
}
