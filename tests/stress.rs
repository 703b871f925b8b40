//! A randomized stress test: runs on the scripted provider (small delays, tool calls) while
//! another thread, and the listeners themselves, abort, steer, follow up, subscribe and
//! unsubscribe at random. After every run the invariants of the event stream and the
//! transcript are checked. Seeded (`PAGENT_STRESS_SEED=<n>` replays a seed; the seed is
//! printed when the test fails) and bounded in time.

#[allow(dead_code)]
mod replay;
#[allow(dead_code)]
#[path = "control/support.rs"]
mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, AgentEvent, ChannelPolicy, Message, Subscription, ToolOutput};
use serde_json::json;
use support::{PATIENCE, bounded, fn_tool, render};

/// How long the test makes runs; it stops earlier after `MAX_RUNS`.
const BUDGET: Duration = Duration::from_secs(3);
const MAX_RUNS: usize = 400;

/// xorshift64*: small, seeded, good enough to pick actions.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_control_from_threads_and_listeners_keeps_every_invariant() {
    let seed = std::env::var("PAGENT_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    // Shown with the failure (the harness prints a failing test's output).
    println!("stress seed {seed} (replay with PAGENT_STRESS_SEED={seed})");
    let outcome = std::panic::catch_unwind(|| stress(seed));
    if let Err(e) = outcome {
        eprintln!("stress test failed with PAGENT_STRESS_SEED={seed}");
        std::panic::resume_unwind(e);
    }
}

/// Sessions of up to `SESSION_RUNS` runs, each on a fresh agent (the transcript, and the
/// requests the scripted provider keeps, stay small), until the budget or `MAX_RUNS`.
const SESSION_RUNS: usize = 25;

fn stress(seed: u64) {
    let started = Instant::now();
    let mut runs = 0;
    let mut session = 0u64;
    while runs < MAX_RUNS && started.elapsed() < BUDGET {
        runs += self::session(
            seed.wrapping_add(session.wrapping_mul(0x9E37_79B9)),
            started,
        );
        session += 1;
    }
    assert!(runs > 0);
    println!(
        "stress: {runs} runs in {session} sessions, {:?}",
        started.elapsed()
    );
}

/// Runs one agent up to `SESSION_RUNS` times; returns how many runs it made.
fn session(seed: u64, started: Instant) -> usize {
    let seed = seed | 1;
    let rng = Arc::new(Mutex::new(Rng(seed)));
    let replies = rng.clone();
    let faux = Faux::default().chunk_chars(3).otherwise(move |_| {
        let mut r = replies.lock().unwrap();
        let delay = Duration::from_micros(r.below(1_500));
        let text = "word ".repeat(1 + r.below(12) as usize);
        let reply = match r.below(3) {
            0 => FauxReply::text(text),
            _ => {
                let mut reply = FauxReply::text(text);
                for _ in 0..1 + r.below(3) {
                    let tool = if r.below(2) == 0 { "echo" } else { "slow" };
                    reply = reply.then_tool_call(tool, json!({ "x": r.below(100) }));
                }
                reply
            }
        };
        reply.delay(delay)
    });
    let slow = fn_tool("slow", |args, ctx| {
        ctx.update("started");
        ctx.sleep(Duration::from_micros(args["x"].as_u64().unwrap_or(0) * 20));
        Ok(ToolOutput::text("slept"))
    });
    let agent = Arc::new(
        Agent::builder()
            .provider(faux)
            .tool(support::echo())
            .tool(slow)
            .max_turns(4)
            .model("m")
            .build()
            .unwrap(),
    );

    // Records every event of the current run; registered first.
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let _recorder = agent.subscribe(move |e: &AgentEvent| sink.lock().unwrap().push(e.clone()));

    // A listener that acts from inside the run.
    let inner_rng = Arc::new(Mutex::new(Rng(seed.rotate_left(17) | 1)));
    let handle = agent.handle();
    let subs: Arc<Mutex<Vec<Subscription>>> = Arc::new(Mutex::new(Vec::new()));
    let inner_subs = subs.clone();
    let _actor = agent.subscribe(move |e: &AgentEvent| {
        let s = handle.snapshot();
        assert_eq!(s.is_streaming_reply, s.streaming_message.is_some());
        let mut r = inner_rng.lock().unwrap();
        if r.below(40) != 0 || matches!(e, AgentEvent::MessageUpdate { .. }) {
            return;
        }
        match r.below(6) {
            0 => {
                handle.abort();
            }
            1 => {
                let _ = handle.steer(Message::user("steer from a listener"));
            }
            2 => {
                let _ = handle.follow_up(Message::user("follow-up from a listener"));
            }
            3 => inner_subs.lock().unwrap().push(handle.subscribe(|_| {})),
            4 => {
                let sub = inner_subs.lock().unwrap().pop();
                if let Some(sub) = sub {
                    sub.unsubscribe();
                }
            }
            _ => {
                let rx = handle.subscribe_channel_with(2, ChannelPolicy::DropUpdates);
                drop(rx);
            }
        }
    });

    // Another thread acts at random while runs go on.
    let stop = Arc::new(AtomicBool::new(false));
    let chaos = {
        let (agent, stop, subs) = (agent.clone(), stop.clone(), subs.clone());
        let mut r = Rng(seed.rotate_left(31) | 1);
        std::thread::spawn(move || {
            let deadline = Instant::now() + BUDGET + PATIENCE;
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(r.below(2_000)));
                let s = agent.snapshot();
                assert_eq!(s.is_streaming_reply, s.streaming_message.is_some());
                match r.below(8) {
                    0 => {
                        agent.abort();
                    }
                    1 => {
                        let _ = agent.steer(Message::user("steer from a thread"));
                    }
                    2 => {
                        let _ = agent.follow_up(Message::user("follow-up from a thread"));
                    }
                    3 => subs.lock().unwrap().push(agent.subscribe(|_| {})),
                    4 => {
                        let sub = subs.lock().unwrap().pop();
                        if let Some(sub) = sub {
                            sub.unsubscribe();
                        }
                    }
                    5 => {
                        // A lossless consumer that reads a while, then goes away.
                        let rx = agent.subscribe_channel(1 + r.below(4) as usize);
                        let take = r.below(50) as usize;
                        std::thread::spawn(move || {
                            for _ in 0..take {
                                if rx.recv_timeout(Duration::from_millis(50)).is_err() {
                                    break;
                                }
                            }
                        });
                    }
                    6 => {
                        // A never-waiting channel nobody reads for a moment.
                        let rx = agent.subscribe_channel_with(2, ChannelPolicy::DropUpdates);
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_millis(5));
                            drop(rx);
                        });
                    }
                    _ => {}
                }
            }
        })
    };

    let mut runs = 0;
    while runs < SESSION_RUNS && started.elapsed() < BUDGET {
        let before = agent.snapshot().messages.to_vec();
        log.lock().unwrap().clear();
        let a = agent.clone();
        let result = bounded(move || a.prompt("go"));
        let result = match result {
            Ok(r) => r,
            Err(e) => panic!("run {runs}: prompt failed: {e}"),
        };
        let events = std::mem::take(&mut *log.lock().unwrap());
        check_run(runs, &events);
        let Some(AgentEvent::AgentEnd { messages, .. }) = events.last() else {
            unreachable!("checked above")
        };
        assert_eq!(
            *messages, result.messages,
            "run {runs}: AgentEnd and the result"
        );
        let after = agent.snapshot();
        let mut expected = before.clone();
        expected.extend(messages.iter().cloned());
        assert_eq!(
            after.messages.to_vec(),
            expected,
            "run {runs}: the transcript"
        );
        assert!(!after.is_streaming && after.pending_tool_calls.is_empty());
        runs += 1;
    }
    stop.store(true, Ordering::SeqCst);
    chaos.join().unwrap();
    // Listeners hold a handle: dropping the agent must release them all the same.
    let weak = Arc::downgrade(&log);
    drop(log);
    drop(agent);
    assert!(
        weak.upgrade().is_none(),
        "the agent's listeners outlived it"
    );
    runs
}

/// The invariants of one run's event stream.
fn check_run(run: usize, events: &[AgentEvent]) {
    let ctx = || format!("run {run}: {:#?}", render(events));
    let starts = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::AgentStart))
        .count();
    let ends = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::AgentEnd { .. }))
        .count();
    assert_eq!((starts, ends), (1, 1), "{}", ctx());
    assert!(
        matches!(events.first(), Some(AgentEvent::AgentStart)),
        "{}",
        ctx()
    );
    assert!(
        matches!(events.last(), Some(AgentEvent::AgentEnd { .. })),
        "{}",
        ctx()
    );

    // Nesting: turns hold messages and tool calls; a message holds only its updates.
    let mut turn: Option<u32> = None;
    let mut message: Option<&'static str> = None;
    let mut tools: HashMap<String, bool> = HashMap::new();
    let mut executed: HashSet<String> = HashSet::new();
    for e in &events[1..events.len() - 1] {
        match e {
            AgentEvent::TurnStart { turn: t } => {
                assert!(turn.is_none() && message.is_none(), "{}", ctx());
                turn = Some(*t);
                tools.clear();
                executed.clear();
            }
            AgentEvent::TurnEnd { turn: t, .. } => {
                assert_eq!(turn, Some(*t), "{}", ctx());
                assert!(message.is_none(), "{}", ctx());
                assert!(tools.values().all(|ended| *ended), "{}", ctx());
                turn = None;
            }
            AgentEvent::MessageStart { message: m } => {
                assert!(turn.is_some() && message.is_none(), "{}", ctx());
                message = Some(m.role());
            }
            AgentEvent::MessageUpdate { .. } => {
                assert_eq!(message, Some("assistant"), "{}", ctx());
            }
            AgentEvent::MessageEnd { message: m } => {
                assert_eq!(message, Some(m.role()), "{}", ctx());
                message = None;
            }
            AgentEvent::ToolStart { call, .. } => {
                assert!(turn.is_some() && message.is_none(), "{}", ctx());
                assert!(tools.insert(call.id.clone(), false).is_none(), "{}", ctx());
            }
            AgentEvent::ToolUpdate { call_id, .. } => {
                assert_eq!(tools.get(call_id), Some(&false), "{}", ctx());
            }
            AgentEvent::ToolExecute { call_id, .. } => {
                // Between the call's start and its end, once.
                assert_eq!(tools.get(call_id), Some(&false), "{}", ctx());
                assert!(executed.insert(call_id.clone()), "{}", ctx());
            }
            AgentEvent::ToolEnd { result, .. } => {
                assert_eq!(tools.get(&result.tool_call_id), Some(&false), "{}", ctx());
                tools.insert(result.tool_call_id.clone(), true);
            }
            AgentEvent::AgentStart | AgentEvent::AgentEnd { .. } => {
                panic!("a second AgentStart or AgentEnd: {}", ctx())
            }
            other => panic!("an event this test does not know: {other:?}"),
        }
    }
    assert!(turn.is_none() && message.is_none(), "{}", ctx());

    // Exactly one result per tool call, right after the reply that made the calls.
    let Some(AgentEvent::AgentEnd { messages, .. }) = events.last() else {
        unreachable!()
    };
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        match &**m {
            Message::Assistant(a) => {
                assert!(open.is_empty(), "calls without results: {open:?} {}", ctx());
                open = a.tool_calls().map(|c| c.id.clone()).collect();
            }
            Message::ToolResult(r) => {
                let Some(pos) = open.iter().position(|id| *id == r.tool_call_id) else {
                    panic!("a result without its call {}: {}", r.tool_call_id, ctx())
                };
                open.remove(pos);
            }
            Message::User(_) => {
                assert!(open.is_empty(), "calls without results: {open:?} {}", ctx());
            }
            other => panic!("a message this test does not know: {other:?}"),
        }
    }
    assert!(open.is_empty(), "calls without results: {open:?} {}", ctx());
}
