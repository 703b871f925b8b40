//! The Go seed's run semantics: `is_streaming` for the whole run, the arguments a tool runs
//! with (`ToolExecute`), and the idle agent's transcript and queues (reset, replace, clear).

use super::*;

/// A tool `gate` that tells `started` it runs, then waits (bounded) for `release`.
fn gate_tool(
    started: crossbeam_channel::Sender<()>,
    release: crossbeam_channel::Receiver<()>,
) -> FnTool {
    fn_tool("gate", move |_, _| {
        started.send(()).unwrap();
        release
            .recv_timeout(PATIENCE)
            .expect("the test releases the tool");
        Ok(ToolOutput::text("opened"))
    })
}

/// Waits (bounded) until `rx` says the tool started.
fn wait_started(rx: &crossbeam_channel::Receiver<()>) {
    rx.recv_timeout(PATIENCE).expect("the tool starts");
}

/// An agent with `faux`'s replies and the tool `gate`; the receiver says the tool started,
/// the sender releases it.
fn gated_agent(
    faux: &Faux,
) -> (
    Arc<Agent>,
    crossbeam_channel::Receiver<()>,
    crossbeam_channel::Sender<()>,
) {
    let (started_tx, started_rx) = crossbeam_channel::bounded(1);
    let (release_tx, release_rx) = crossbeam_channel::bounded(1);
    let agent = Arc::new(
        builder(faux)
            .tool(gate_tool(started_tx, release_rx))
            .build()
            .unwrap(),
    );
    (agent, started_rx, release_tx)
}

/// The replies of a run through the gate: a call of `gate`, then "done".
fn gate_then_done_replies() -> Faux {
    Faux::default()
        .reply(FauxReply::tool_call("gate", json!({})))
        .reply(FauxReply::text("done"))
}

/// The events of a [`gated_agent`]'s run on [`gate_then_done_replies`]: "go", the tool
/// `gate` once, then "done".
fn gate_then_done() -> Vec<String> {
    batch_then_answer(
        "go",
        "[call_1:gate]{}",
        &["call_1"],
        &[
            "ToolStart(call_1)",
            "ToolExecute(call_1)",
            r#"ToolEnd(call_1 "opened")"#,
        ],
        "done",
    )
}

/// Prompts `agent` with "go" on a thread of its own.
fn prompt_go(agent: &Arc<Agent>) -> std::thread::JoinHandle<pagent::RunResult> {
    let agent = agent.clone();
    std::thread::spawn(move || agent.prompt("go").unwrap())
}

#[test]
fn is_streaming_spans_the_whole_run_and_is_streaming_reply_the_reply() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("echo", json!({"x": 1})))
        .reply(FauxReply::text("ok"));
    let agent = builder(&faux).tool(echo()).build().unwrap();
    let rec = Recorder::attach(&agent);
    // The flags as each listener call reads them, next to the event.
    let flags = watch(
        &agent,
        |e| !is_update(e),
        |s| (s.is_streaming, s.is_streaming_reply),
    );
    assert!(!agent.snapshot().is_streaming);

    agent.prompt("go").unwrap();

    let names: Vec<String> = rec
        .lines()
        .into_iter()
        .filter(|l| !l.starts_with("MessageUpdate"))
        .collect();
    let seen: Vec<String> = names
        .iter()
        .zip(flags.lock().unwrap().iter())
        .map(|(name, (run, reply))| format!("{name} run={run} reply={reply}"))
        .collect();
    assert_eq!(
        seen,
        lines(&[
            "AgentStart run=true reply=false",
            "TurnStart(1) run=true reply=false",
            "MessageStart(user) run=true reply=false",
            r#"MessageEnd(user "go") run=true reply=false"#,
            "MessageStart(assistant) run=true reply=true",
            r#"MessageEnd(assistant tool_use "" [call_1]) run=true reply=false"#,
            "ToolStart(call_1) run=true reply=false",
            "ToolExecute(call_1) run=true reply=false",
            r#"ToolEnd(call_1 "1") run=true reply=false"#,
            "MessageStart(tool_result) run=true reply=false",
            "MessageEnd(tool_result call_1) run=true reply=false",
            "TurnEnd(1 continuing) run=true reply=false",
            "TurnStart(2) run=true reply=false",
            "MessageStart(assistant) run=true reply=true",
            r#"MessageEnd(assistant stop "ok") run=true reply=false"#,
            "TurnEnd(2 no_tool_calls) run=true reply=false",
            "AgentEnd(no_tool_calls) run=false reply=false",
        ])
    );
    let s = agent.snapshot();
    assert!(!s.is_streaming && !s.is_streaming_reply);
}

#[test]
fn another_thread_sees_is_streaming_while_a_tool_runs_between_replies() {
    let faux = gate_then_done_replies();
    let (agent, started_rx, release_tx) = gated_agent(&faux);
    let handle = agent.handle();
    let run = prompt_go(&agent);
    wait_started(&started_rx);
    // No reply streams while the tool runs, yet the run goes on.
    let during = handle.snapshot();
    assert!(during.is_streaming, "a run is going on");
    assert!(!during.is_streaming_reply && during.streaming_message.is_none());
    assert_eq!(during.pending_tool_calls.len(), 1);
    release_tx.send(()).unwrap();
    let result = bounded(move || run.join().unwrap());
    assert_eq!(result.text(), "done");
    assert!(!handle.snapshot().is_streaming);
}

/// A pending call as its tool found it: the raw text, the arguments, rewritten.
type Found = (String, Option<serde_json::Value>, bool);

#[test]
fn tool_execute_carries_the_arguments_as_validated_and_as_rewritten() {
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("echo", json!({"x": 1}))
                .then_tool_call("echo", json!({"x": 2}))
                .then_tool_call("echo", json!({"x": "block me"})),
        )
        .reply(FauxReply::text("ok"));
    let handle: Arc<OnceLock<AgentHandle>> = Arc::default();
    let h = handle.clone();
    // What the running tool finds in the state for its own call: the model's raw text and
    // the arguments it runs with, side by side. The calls run on worker threads.
    let pending: Arc<Mutex<Vec<Found>>> = Arc::default();
    let found = pending.clone();
    let agent = builder(&faux)
        .tool(fn_tool("echo", move |args, ctx| {
            let state = h.get().unwrap().snapshot();
            let me = state
                .pending_tool_calls
                .iter()
                .find(|p| p.call.id == ctx.call_id())
                .expect("a running call is pending");
            found.lock().unwrap().push((
                me.call.arguments.clone(),
                me.arguments.clone(),
                me.rewritten,
            ));
            Ok(ToolOutput::text(args["x"].to_string()))
        }))
        .max_parallel_tools(4)
        .before_tool_call(|req| match &req.args["x"] {
            x if *x == json!(2) => ToolDecision::Rewrite(json!({"x": 42})),
            x if x.is_string() => ToolDecision::Block("no strings".into()),
            _ => ToolDecision::Allow,
        })
        .build()
        .unwrap();
    handle.set(agent.handle()).unwrap();
    let rec = Recorder::attach(&agent);

    agent.prompt("go").unwrap();

    // Starts and executes come from the run thread in call order; the calls that run end
    // in completion order.
    let all = rec.lines();
    let begun: Vec<&String> = all
        .iter()
        .filter(|l| l.starts_with("ToolStart") || l.starts_with("ToolExecute"))
        .collect();
    assert_eq!(
        begun,
        [
            "ToolStart(call_1)",
            "ToolExecute(call_1)",
            "ToolStart(call_2)",
            "ToolExecute(call_2 rewritten)",
            "ToolStart(call_3)",
        ]
    );
    let mut ended: Vec<&String> = all.iter().filter(|l| l.starts_with("ToolEnd")).collect();
    ended.sort();
    assert_eq!(
        ended,
        [
            r#"ToolEnd(call_1 "1")"#,
            r#"ToolEnd(call_2 "42")"#,
            r#"ToolEnd(call_3 error "blocked: no strings")"#,
        ]
    );
    // The events themselves: the parsed arguments, or the hook's.
    let executed: Vec<(String, serde_json::Value, bool)> = rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecute {
                call_id,
                tool_name,
                arguments,
                rewritten,
            } => {
                assert_eq!(tool_name, "echo");
                Some((call_id, arguments, rewritten))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        executed,
        [
            ("call_1".to_owned(), json!({"x": 1}), false),
            ("call_2".to_owned(), json!({"x": 42}), true),
        ]
    );
    let mut found = pending.lock().unwrap().clone();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        found,
        [
            (r#"{"x":1}"#.to_owned(), Some(json!({"x": 1})), false),
            (r#"{"x":2}"#.to_owned(), Some(json!({"x": 42})), true),
        ]
    );
}

#[test]
fn replace_messages_and_reset_are_refused_while_a_run_is_active() {
    let faux = gate_then_done_replies().reply(FauxReply::text("from the replaced transcript"));
    let (agent, started_rx, release_tx) = gated_agent(&faux);
    // From a listener of the run (the run thread) too.
    let from_listener: Arc<Mutex<Vec<Error>>> = Arc::default();
    {
        let sink = from_listener.clone();
        let weak = Arc::downgrade(&agent);
        agent
            .subscribe(move |e| {
                let agent = weak.upgrade().unwrap();
                match e {
                    AgentEvent::ToolStart { .. } => {
                        sink.lock().unwrap().push(agent.reset().unwrap_err());
                    }
                    // The run is decided, but its listeners still run on this thread.
                    AgentEvent::AgentEnd { .. } => {
                        let refused = agent.replace_messages(Vec::new()).unwrap_err();
                        sink.lock().unwrap().push(refused);
                    }
                    _ => {}
                }
            })
            .keep();
    }
    let rec = Recorder::attach(&agent);
    let run = prompt_go(&agent);
    wait_started(&started_rx);

    // Another thread, while the tool runs.
    let before = agent.snapshot();
    assert_eq!(
        agent.replace_messages(vec![Message::user("elsewhere")]),
        Err(Error::Busy)
    );
    assert_eq!(agent.reset(), Err(Error::Busy));
    assert_eq!(
        agent.snapshot().messages,
        before.messages,
        "nothing changed"
    );

    release_tx.send(()).unwrap();
    bounded(move || run.join().unwrap());
    assert_eq!(*from_listener.lock().unwrap(), [Error::Busy, Error::Busy]);
    assert_eq!(rec.lines(), gate_then_done());

    // Idle: the transcript is replaced, the next run goes on from it.
    agent
        .replace_messages(vec![Message::user("a"), assistant("b")])
        .unwrap();
    assert_eq!(texts(&agent.snapshot().messages), ["a", "b"]);
    agent.prompt("c").unwrap();
    assert_eq!(
        sent(&faux, 2),
        [r#"user "a""#, r#"assistant stop "b""#, r#"user "c""#]
    );
    // The listeners saw the replacement between the two runs (and the recorder's wire
    // mirror rebuilt every snapshot, the replaced transcript included).
    let all = rec.lines();
    let second_run = all.iter().rposition(|l| l == "AgentStart").unwrap();
    assert_eq!(
        all[second_run - 2..second_run],
        ["AgentEnd(no_tool_calls)", r#"MessagesReplaced(["a" "b"])"#]
    );
    assert_eq!(
        all[second_run..],
        text_turns(&[(&["c"], "from the replaced transcript")])
    );
}

#[test]
fn reset_starts_a_new_conversation_and_gives_back_what_was_queued() {
    let faux = Faux::default()
        .reply(FauxReply::fail("out of tokens"))
        .reply(FauxReply::text("fresh"));
    let agent = builder(&faux).build().unwrap();
    let _ = agent.prompt("first").unwrap_err();
    let rec = Recorder::attach(&agent);
    // What a listener reads while it handles the event: the queues already empty.
    let seen = watch(
        &agent,
        |e| matches!(e, AgentEvent::MessagesReplaced { .. }),
        |s| {
            (
                s.messages.len(),
                s.steering_queue.len(),
                s.follow_up_queue.len(),
            )
        },
    );
    agent.steer("s").unwrap();
    agent.follow_up("f").unwrap();
    let before = agent.snapshot();
    assert_eq!(before.messages.len(), 2);
    assert!(before.error_message.is_some() && before.stop_reason.is_some());

    let removed = agent.reset().unwrap();

    assert_eq!(
        removed.iter().map(|m| m.text()).collect::<Vec<_>>(),
        ["s", "f"]
    );
    let s = agent.snapshot();
    assert!(s.messages.is_empty());
    assert!(s.steering_queue.is_empty() && s.follow_up_queue.is_empty());
    assert_eq!((s.error_message.clone(), s.error_kind), (None, None));
    assert_eq!((s.stop_reason, s.turn), (None, 0));
    assert_eq!(&*s.model, "m", "the settings stay");
    assert_eq!(s.usage, before.usage, "usage over the agent's life stays");
    assert_eq!(*seen.lock().unwrap(), [(0, 0, 0)]);
    // The listeners saw it, and the next run starts from nothing.
    agent.prompt("again").unwrap();
    assert_eq!(sent(&faux, 1), [r#"user "again""#]);
    assert_eq!(
        rec.lines(),
        [
            lines(&["MessagesReplaced([])"]),
            text_turns(&[(&["again"], "fresh")])
        ]
        .concat()
    );
}

#[test]
fn clearing_the_queues_from_another_thread_during_a_run_delivers_none_of_them() {
    let faux = gate_then_done_replies();
    let (agent, started_rx, release_tx) = gated_agent(&faux);
    let rec = Recorder::attach(&agent);
    let run = prompt_go(&agent);
    wait_started(&started_rx);
    let handle = agent.handle();
    let other = std::thread::spawn(move || {
        handle.steer("s1").unwrap();
        handle.steer("s2").unwrap();
        handle.follow_up("f1").unwrap();
        let steering = handle.clear_steering_queue();
        let s = handle.snapshot();
        assert!(s.steering_queue.is_empty());
        assert_eq!(texts(&s.follow_up_queue), ["f1"]);
        let follow_ups = handle.clear_follow_up_queue();
        handle.steer("s3").unwrap();
        handle.follow_up("f2").unwrap();
        let both = handle.clear_queues();
        let s = handle.snapshot();
        assert!(s.steering_queue.is_empty() && s.follow_up_queue.is_empty());
        assert!(handle.clear_queues().is_empty(), "nothing left");
        [steering, follow_ups, both].map(|ms| ms.iter().map(|m| m.text()).collect::<Vec<_>>())
    });
    let [steering, follow_ups, both] = other.join().unwrap();
    assert_eq!(steering, ["s1", "s2"]);
    assert_eq!(follow_ups, ["f1"]);
    assert_eq!(both, ["s3", "f2"]);
    release_tx.send(()).unwrap();
    bounded(move || run.join().unwrap());

    // None of them reached the model: the run is what it would have been without them.
    assert_eq!(rec.lines(), gate_then_done());
    assert_eq!(
        sent(&faux, 1),
        [
            r#"user "go""#,
            r#"assistant tool_use "" [call_1]"#,
            "tool_result call_1"
        ]
    );
}

#[test]
fn reset_racing_prompts_from_another_thread_never_lands_inside_a_run() {
    const ROUNDS: usize = 60;
    let mut faux = Faux::default();
    for i in 0..ROUNDS {
        faux = faux.reply(FauxReply::text(format!("r{i}")));
    }
    let agent = Arc::new(builder(&faux).build().unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let resets = {
        let (agent, done) = (agent.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut ok, mut busy) = (0usize, 0usize);
            let deadline = Instant::now() + PATIENCE;
            while !done.load(Ordering::Acquire) && Instant::now() < deadline {
                match agent.reset() {
                    Ok(_) => ok += 1,
                    Err(Error::Busy) => busy += 1,
                    Err(e) => panic!("reset failed: {e}"),
                }
                std::thread::yield_now();
            }
            (ok, busy)
        })
    };
    for i in 0..ROUNDS {
        // A reset holding the agent for its instant makes `prompt` return `Busy`: try again.
        let deadline = Instant::now() + PATIENCE;
        let result = loop {
            match agent.prompt(format!("p{i}").as_str()) {
                Err(e) if *e.error() == Error::Busy && Instant::now() < deadline => {
                    std::thread::yield_now();
                }
                other => break other.unwrap(),
            }
        };
        // The run's own messages are whole: a reset never removed its prompt before the
        // model call, nor its reply before the end.
        assert_eq!(
            result
                .messages
                .iter()
                .map(|m| describe(m))
                .collect::<Vec<_>>(),
            [format!("user \"p{i}\""), format!("assistant stop \"r{i}\"")]
        );
        assert_eq!(
            sent(&faux, i).last().unwrap(),
            &format!("user \"p{i}\""),
            "round {i}"
        );
        // Whatever the reset did before this run, the transcript ends with this run.
        let s = agent.snapshot();
        let tail: Vec<String> = s.messages.iter().map(|m| describe(m)).collect();
        assert!(
            tail.ends_with(&[format!("user \"p{i}\""), format!("assistant stop \"r{i}\"")])
                || tail.is_empty(),
            "round {i}: {tail:?}"
        );
    }
    done.store(true, Ordering::Release);
    let (ok, busy) = resets.join().unwrap();
    // How many landed between runs depends on the scheduler; at least one was tried.
    assert!(ok + busy > 0);
    // Idle now: from another thread, a reset is not refused.
    let agent2 = agent.clone();
    assert!(
        std::thread::spawn(move || agent2.reset())
            .join()
            .unwrap()
            .is_ok()
    );
    assert!(agent.snapshot().messages.is_empty());
}
