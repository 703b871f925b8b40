//! What a UI thread reads: the waker that asks it for frames, and the state it draws (the
//! generation, each tool call's times, the results beside their calls, each channel's
//! dropped updates). The UI side runs on threads of its own, as a UI thread would.

#[allow(dead_code)]
mod replay;
#[allow(dead_code)]
#[path = "control/support.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use pagent::crossbeam_channel;
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, AgentEvent, ChannelPolicy, Message, ToolOutput};
use serde_json::json;
use support::{PATIENCE, bounded, fn_tool};

/// A UI thread: it waits for a wake (a frame request), draws by taking the waker's
/// snapshot, and stops once it drew a state `done` says is the last. Returns the
/// generations it drew, in order.
fn ui_thread(
    agent: &Agent,
    done: impl Fn(&pagent::State) -> bool + Send + 'static,
) -> (
    std::thread::JoinHandle<Vec<u64>>,
    crossbeam_channel::Receiver<()>,
) {
    let (wake_tx, wake_rx) = crossbeam_channel::unbounded();
    let waker = agent.waker(move || {
        let _ = wake_tx.send(());
    });
    let frames = wake_rx.clone();
    // The first frame draws the idle agent, as a window's first frame does.
    let first = waker.snapshot();
    let ui = std::thread::spawn(move || {
        let mut drawn = vec![first.generation];
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if frames.recv_timeout(PATIENCE).is_err() {
                break;
            }
            let state = waker.snapshot();
            drawn.push(state.generation);
            if done(&state) {
                break;
            }
        }
        drawn
    });
    (ui, wake_rx)
}

/// The tutorial's rule used to be "repaint while `is_streaming`": the frame that started a
/// run saw an idle agent and asked for no other, so the run's start went unseen until some
/// input came. A waker asks for the frame from the run itself.
#[test]
fn a_waker_never_misses_the_first_event_of_a_run_started_elsewhere() {
    for round in 0..20 {
        let agent = Arc::new(
            Agent::builder()
                .provider(
                    Faux::default()
                        .chunk_chars(2)
                        .otherwise(|_| FauxReply::text("a streamed answer")),
                )
                .build()
                .unwrap(),
        );
        let (ui, _frames) = ui_thread(&agent, |s| s.stop_reason.is_some() && !s.is_streaming);
        // A worker starts the run, as a Send button's handler does.
        let a = agent.clone();
        let run = std::thread::spawn(move || a.prompt(format!("round {round}")).unwrap());
        let drawn = bounded(move || ui.join().unwrap());
        run.join().unwrap();
        let last = agent.snapshot().generation;
        assert_eq!(drawn.last(), Some(&last), "round {round}: {drawn:?}");
        // Never an older state after a newer one. The same state may be drawn twice: a run
        // that published just before the UI armed the waker still sees it armed and wakes
        // (at most one wake per snapshot taken, as documented), and that frame reads the state
        // the previous one already drew.
        assert!(drawn.windows(2).all(|w| w[0] <= w[1]), "{drawn:?}");
    }
}

#[test]
fn an_idle_agent_asks_for_no_frame_and_a_busy_one_for_few() {
    let agent = Arc::new(
        Agent::builder()
            .provider(
                Faux::default()
                    .chunk_chars(1)
                    .otherwise(|_| FauxReply::text("x".repeat(2_000))),
            )
            .build()
            .unwrap(),
    );
    let wakes = Arc::new(AtomicUsize::new(0));
    let count = wakes.clone();
    let waker = agent.waker(move || {
        count.fetch_add(1, Ordering::SeqCst);
    });
    drop(waker.snapshot());
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(wakes.load(Ordering::SeqCst), 0, "idle: no frame asked");
    // A run of 2,000 deltas while nobody draws: one wake, not one per event.
    agent.prompt("go").unwrap();
    assert_eq!(wakes.load(Ordering::SeqCst), 1);
    // A change outside events (a steering message queued from another thread) wakes too.
    drop(waker.snapshot());
    let h = agent.handle();
    std::thread::spawn(move || h.steer(Message::user("later")).unwrap())
        .join()
        .unwrap();
    assert_eq!(wakes.load(Ordering::SeqCst), 2);
    assert_eq!(waker.snapshot().steering_queue.len(), 1);
    // Dropped, it is gone.
    drop(waker);
    agent.prompt("again").unwrap();
    assert_eq!(wakes.load(Ordering::SeqCst), 2);
}

#[test]
fn a_panicking_waker_does_not_break_the_run() {
    let agent = Agent::builder()
        .provider(Faux::default().otherwise(|_| FauxReply::text("fine")))
        .build()
        .unwrap();
    let waker = agent.waker(|| panic!("the toolkit is gone"));
    assert_eq!(agent.prompt("hi").unwrap().text(), "fine");
    drop(waker.snapshot());
    assert_eq!(agent.prompt("hi").unwrap().text(), "fine");
}

#[test]
fn the_generation_moves_with_events_and_with_changes_outside_them() {
    let agent = Agent::builder()
        .provider(Faux::default().otherwise(|_| FauxReply::text("ok")))
        .build()
        .unwrap();
    let g0 = agent.snapshot().generation;
    agent.steer(Message::user("queued")).unwrap();
    let g1 = agent.snapshot().generation;
    assert!(g1 > g0);
    agent.set_model("other");
    let g2 = agent.snapshot().generation;
    assert!(g2 > g1);
    // Unchanged while nothing happens: a poller draws nothing new.
    assert_eq!(agent.snapshot().generation, g2);
    agent.prompt("go").unwrap();
    assert!(agent.snapshot().generation > g2);
}

/// A UI used to time tools itself and pair each result with its call by id.
#[test]
fn tool_calls_carry_their_start_and_duration_and_results_sit_beside_their_calls() {
    let (started_tx, started_rx) = crossbeam_channel::bounded(1);
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
    let slow = fn_tool("slow", move |args, _| {
        if args["wait"].as_bool() == Some(true) {
            let _ = started_tx.send(());
            let _ = go_rx.recv_timeout(PATIENCE);
        }
        Ok(ToolOutput::text(format!("done {}", args["n"])))
    });
    let agent = Arc::new(
        Agent::builder()
            .provider(
                Faux::default()
                    .reply(
                        FauxReply::tool_call("slow", json!({"n": 1, "wait": true}))
                            .then_tool_call("slow", json!({"n": 2})),
                    )
                    .reply(FauxReply::text("both done")),
            )
            .tool(slow)
            .build()
            .unwrap(),
    );
    let before = SystemTime::now();
    let a = agent.clone();
    let run = std::thread::spawn(move || a.prompt("go").unwrap());
    started_rx.recv_timeout(PATIENCE).unwrap();
    // While call 1 runs, from another thread: its start, and call 2 already finished
    // beside its call.
    let deadline = Instant::now() + PATIENCE;
    let state = loop {
        let s = agent.snapshot();
        if s.finished_tool_calls.len() == 1 {
            break s;
        }
        assert!(Instant::now() < deadline, "call 2 never finished");
        std::thread::sleep(Duration::from_millis(1));
    };
    let pending = &state.pending_tool_calls[0];
    assert_eq!(pending.call.id, "call_1");
    let started = pending.started_at.expect("a start time");
    assert!(started + Duration::from_millis(1) >= before);
    let done = &state.finished_tool_calls[0];
    assert_eq!(done.call.id, "call_2");
    assert_eq!(done.result.tool_call_id, "call_2");
    assert_eq!(done.result.text(), "done 2");
    assert_eq!(done.arguments, Some(json!({"n": 2})));
    assert!(done.started_at.is_some() && done.duration.is_some());
    std::thread::sleep(Duration::from_millis(30));
    go_tx.send(()).unwrap();
    run.join().unwrap();
    // The last turn answered with text: its TurnStart emptied the list. The tool turn's
    // ToolEnd events carried the same durations.
    assert!(agent.snapshot().finished_tool_calls.is_empty());
}

#[test]
fn a_tool_calls_duration_is_measured_from_its_start() {
    let agent = Agent::builder()
        .provider(
            Faux::default()
                .reply(FauxReply::tool_call("nap", json!({})))
                .reply(FauxReply::text("rested")),
        )
        .tool(fn_tool("nap", |_, ctx| {
            ctx.sleep(Duration::from_millis(40));
            Ok(ToolOutput::text("zzz"))
        }))
        .build()
        .unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let handle = agent.handle();
    let _sub = agent.subscribe(move |e| {
        if let AgentEvent::ToolEnd { duration, .. } = e {
            let finished = handle.snapshot().finished_tool_calls.clone();
            sink.lock().unwrap().push((*duration, finished));
        }
    });
    agent.prompt("sleep").unwrap();
    let seen = seen.lock().unwrap();
    let (duration, finished) = &seen[0];
    let duration = duration.expect("a duration");
    assert!(duration >= Duration::from_millis(40), "{duration:?}");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].duration, Some(duration));
    assert_eq!(finished[0].result.text(), "zzz");
}

/// `updates_dropped` was one counter for all of an agent's channels: a consumer could not
/// tell what it missed itself.
#[test]
fn each_channel_counts_the_updates_it_dropped() {
    let agent = Agent::builder()
        .provider(
            Faux::default()
                .chunk_chars(1)
                .otherwise(|_| FauxReply::text("y".repeat(300))),
        )
        .build()
        .unwrap();
    let (slow_id, slow) = agent.subscribe_channel_with_id(4, ChannelPolicy::DropUpdates);
    let (roomy_id, roomy) = agent.subscribe_channel_with_id(10_000, ChannelPolicy::DropUpdates);
    let (lossless_id, lossless) = agent.subscribe_channel_with_id(10_000, ChannelPolicy::Block);
    agent.prompt("go").unwrap();
    let state = agent.snapshot();
    let stats = |id| state.channels.iter().find(|c| c.id == id).unwrap().clone();
    // The five events before the reply filled the slow one: every update went.
    let updates = roomy
        .try_iter()
        .filter(|e| matches!(e, AgentEvent::MessageUpdate { .. }))
        .count() as u64;
    assert_eq!(stats(slow_id).updates_dropped, updates);
    assert_eq!(stats(roomy_id).updates_dropped, 0);
    assert_eq!(stats(lossless_id).updates_dropped, 0);
    assert_eq!(stats(lossless_id).policy, ChannelPolicy::Block);
    assert_eq!(stats(slow_id).capacity, 4);
    assert_eq!(state.updates_dropped, updates, "the sum over the channels");
    assert_eq!(
        lossless.try_iter().count(),
        slow.try_iter().count() + updates as usize
    );
    // A channel whose receiver was dropped leaves the list at the next event; one
    // unsubscribed by id at once.
    drop(slow);
    assert!(agent.unsubscribe(roomy_id));
    agent.prompt("again").unwrap();
    let ids: Vec<u64> = agent.snapshot().channels.iter().map(|c| c.id).collect();
    assert_eq!(ids, [lossless_id]);
}
