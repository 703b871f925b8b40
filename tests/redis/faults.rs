//! The fleet under faults: a worker paused past its lease, connections the server closed,
//! a restart, a full Redis with either eviction policy, poison entries (mirrors under
//! faults: `mirrors.rs`). Each test is named after what broke.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[test]
fn a_worker_paused_past_its_lease_writes_nothing_to_the_transcript_or_the_event_log() {
    let redis = shared("paused");
    let prefix = format!("t{}-paused", std::process::id());
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    let id = Queue::new(&redis).prompt("c", "Hello").unwrap();
    let worker = |name: &str, delay: &str| {
        Role::start(
            "worker",
            &[
                ("PAGENT_REDIS_TEST_URL", shared_url()),
                ("PAGENT_REDIS_TEST_PREFIX", prefix.clone()),
                ("PAGENT_REDIS_TEST_NAME", name.into()),
                ("PAGENT_REDIS_TEST_DELAY_MS", delay.into()),
                ("PAGENT_REDIS_TEST_LEASE_MS", "600".into()),
                ("PAGENT_REDIS_TEST_CLAIM_MS", "1500".into()),
                ("PAGENT_REDIS_TEST_EVENTS", "10000".into()),
            ],
        )
    };
    // w0 answers slowly: it is stopped with the prompt stored and its reply streaming.
    let w0 = worker("w0", "1500");
    wait_until("w0 running the prompt", || {
        described(&store, "c").len() == 1
    });
    signal(w0.pid(), "-STOP");
    let w1 = worker("w1", "0");
    let mut conn = raw(&shared_url());
    wait_until("w1's answer", || {
        done_of(&mut conn, &prefix, "c").as_ref() == Some(&id)
    });
    drop(w1);
    let before = runs_in_stream(&redis, "c");
    // w0 wakes up, its lease long gone: its reply ends, and nothing of it is written.
    signal(w0.pid(), "-CONT");
    std::thread::sleep(Duration::from_millis(2500));
    drop(w0);
    let answer = answered(&["Hello".to_string()], |p| format!("answer to {p}"));
    assert_eq!(described(&store, "c"), answer);
    let after = runs_in_stream(&redis, "c");
    assert_eq!(after, before, "w0 appended events after losing its lease");
    // w0's run broke off; w1's resumed from the stored prompt and answered once.
    assert_eq!(after, runs(&answer, true));
    let (state, _) = folded(&redis, "c");
    assert_eq!(
        state
            .messages
            .iter()
            .map(|m| (**m).clone())
            .collect::<Vec<_>>(),
        stored(&store, "c")
    );
}

/// The runs [`runs_in_stream`] describes for a conversation whose prompts ran once each,
/// `answers` listing each prompt with its answer (as [`answered`] does); with
/// `first_broken`, the first prompt's run broke off once its prompt was stored and another
/// run resumed it (that run has no prompt of its own).
fn runs(answers: &[String], first_broken: bool) -> Vec<String> {
    let mut runs = Vec::new();
    for (i, pair) in answers.chunks(2).enumerate() {
        runs.extend(["AgentStart".to_string(), pair[0].clone()]);
        if i == 0 && first_broken {
            runs.push("AgentStart".into());
        }
        runs.extend([pair[1].clone(), "AgentEnd no_tool_calls".into()]);
    }
    runs
}

/// An in-process worker's steps, on the test thread.
fn echo_worker(redis: &Redis, name: &str) -> Worker {
    Worker::new(redis, name, |_, messages| answering_agent(messages))
        .unwrap()
        .lease(Duration::from_millis(600))
        .claim_after(Duration::from_secs(60))
}

/// Steps `worker` until the conversation is done up to `id`, within 10 s (far less than the
/// worker's 60 s `claim_after`: a worker that had to wait for it would fail this).
fn step_until_done(worker: &Worker, url: &str, prefix: &str, id: &str) {
    wait_within("the answer", Duration::from_secs(10), || {
        let _ = worker.step(Duration::from_millis(100));
        done_of(&mut raw(url), prefix, "c").as_deref() == Some(id)
    });
}

#[test]
fn connections_the_server_closed_while_idle_cost_no_phantom_run_and_no_claim_wait() {
    let server = RedisServer::start_with(false, &["--timeout", "1"]);
    let redis = Redis::open(&server.url()).unwrap().prefix("idle");
    let worker = echo_worker(&redis, "w");
    let queue = Queue::new(&redis);
    let store = Store::new(&redis);
    let mut prompts = Vec::new();
    for i in 0..4 {
        // Every connection sits idle past the server's `timeout` (it closes them).
        std::thread::sleep(Duration::from_millis(2200));
        let text = format!("Prompt {i}");
        let id = queue
            .prompt("c", &text)
            .expect("a queue call after an idle gap");
        prompts.push(text);
        step_until_done(&worker, &server.url(), "idle", &id);
    }
    let answers = answered(&prompts, |p| format!("answer to {p}"));
    assert_eq!(described(&store, "c"), answers);
    assert_eq!(
        runs_in_stream(&redis, "c"),
        runs(&answers, false),
        "a phantom run"
    );
}

#[test]
fn a_redis_restart_between_runs_costs_no_phantom_run_and_no_claim_wait() {
    let mut server = RedisServer::start(true);
    let redis = Redis::open(&server.url())
        .unwrap()
        .prefix("restart-between")
        .timeout(Duration::from_secs(1));
    let worker = echo_worker(&redis, "w");
    let queue = Queue::new(&redis);
    let store = Store::new(&redis);
    let first = queue.prompt("c", "One").unwrap();
    step_until_done(&worker, &server.url(), "restart-between", &first);
    // Every kept connection is dead now, and found so before anything is written to it.
    server.restart();
    let second = queue
        .prompt("c", "Two")
        .expect("a queue call after a restart");
    step_until_done(&worker, &server.url(), "restart-between", &second);
    let answers = answered(&["One".into(), "Two".into()], |p| format!("answer to {p}"));
    assert_eq!(described(&store, "c"), answers);
    assert_eq!(runs_in_stream(&redis, "c"), runs(&answers, false));
}

#[test]
fn a_run_broken_by_a_redis_restart_is_taken_up_again_without_waiting_for_its_own_lease() {
    // Persistence on: the lease of the broken run (the default 10 s) survives the restart.
    let mut server = RedisServer::start(true);
    let redis = Redis::open(&server.url())
        .unwrap()
        .prefix("own-lease")
        .timeout(Duration::from_secs(1));
    // The default lease, and a claim wait far past the test's bound: a worker that waited
    // for its own lease to expire or for the claim fails this.
    let worker = Worker::new(&redis, "w", |_, messages| {
        let faux = answering(Duration::from_millis(800)).chunk_chars(1);
        Agent::builder().provider(faux).messages(messages).build()
    })
    .unwrap()
    .claim_after(Duration::from_secs(60));
    let store = Store::new(&redis);
    let id = Queue::new(&redis).prompt("c", "Hello").unwrap();
    let stepper = worker.clone();
    let step = std::thread::spawn(move || stepper.step(Duration::from_millis(100)));
    wait_within("the prompt stored", Duration::from_secs(10), || {
        store.load("c").is_ok_and(|l| l.messages.len() == 1)
    });
    server.kill();
    let failed = step.join().unwrap();
    assert!(
        matches!(failed, Err(Error::Connection(_) | Error::Timeout(_))),
        "{failed:?}"
    );
    server.spawn();
    let lease: Option<String> = redis::cmd("GET")
        .arg("own-lease:{c}:lease")
        .query(&mut raw(&server.url()))
        .unwrap();
    assert!(
        lease.is_some(),
        "the broken run's lease survived the restart"
    );
    step_until_done(&worker, &server.url(), "own-lease", &id);
    // The broken run's writes that Redis never acknowledged stay unwritten: the stream
    // holds what it had before the restart, then the resumed run, whole.
    assert_eq!(
        described(&store, "c"),
        answered(&["Hello".into()], |p| format!("answer to {p}"))
    );
    assert_eq!(
        runs_in_stream(&redis, "c"),
        runs(
            &answered(&["Hello".into()], |p| format!("answer to {p}")),
            true
        )
    );
}

/// A fault-injecting proxy in front of the shared server.
fn proxy_to_shared() -> proxy::Proxy {
    let upstream: u16 = shared_url()
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    proxy::Proxy::start(upstream)
}

/// A test's Redis through a proxy of its own (`redis`) and directly (`direct`), both under the
/// test's prefix (as [`shared`] makes it for `test`).
fn proxied(test: &str) -> (proxy::Proxy, String, Redis, Redis) {
    let proxy = proxy_to_shared();
    let prefix = format!("t{}-{test}", std::process::id());
    let redis = Redis::open(&proxy.url()).unwrap().prefix(&prefix);
    (proxy, prefix, redis, shared(test))
}

#[test]
fn a_queue_call_cut_after_sending_is_sent_again_once_and_only_an_unknown_outcome_says_so() {
    let redis_url = shared_url();
    let proxy = proxy_to_shared();
    let prefix = format!("t{}-cut", std::process::id());
    let redis = Redis::open(&proxy.url()).unwrap().prefix(&prefix);
    let queue = Queue::new(&redis);
    queue.prompt("c", "One").unwrap();
    // The connection is closed while idle: the next call finds out before it sends.
    proxy.close_all();
    std::thread::sleep(Duration::from_millis(600));
    queue
        .prompt("c", "Two")
        .expect("nothing was sent on the dead connection");
    // Closed while in use: the request is sent again on a new connection.
    proxy.close_all();
    queue.prompt("c", "Three").expect("sent again");
    // Cut after the request reached Redis: sent again, and applied once.
    proxy.cut_next_requests(1);
    queue.prompt("c", "Four").expect("sent again");
    // Cut twice: the outcome is unknown, and the error says so.
    proxy.cut_next_requests(2);
    match queue.prompt("c", "Five") {
        Err(Error::Connection(why)) => assert!(why.contains("may have been applied"), "{why}"),
        other => panic!("{other:?}"),
    }
    let mut conn = raw(&redis_url);
    let inbox: Vec<String> = redis::cmd("XRANGE")
        .arg(format!("{prefix}:{{c}}:inbox"))
        .arg("-")
        .arg("+")
        .query::<redis::streams::StreamRangeReply>(&mut conn)
        .unwrap()
        .ids
        .iter()
        .map(|e| e.get::<String>("text").unwrap())
        .collect();
    assert_eq!(inbox, ["One", "Two", "Three", "Four", "Five"]);
    let announced: usize = redis::cmd("XLEN")
        .arg(format!("{prefix}:{{queue}}"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(announced, 5);
}

#[test]
fn a_steer_handed_over_as_the_run_ends_is_run_not_marked_done_and_lost() {
    let redis = shared("late-steer");
    let prefix = format!("t{}-late-steer", std::process::id());
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    let queue = Queue::new(&redis);
    let sent = Arc::new(AtomicBool::new(false));
    let (q, flag) = (queue.clone(), sent.clone());
    // At the first run's AgentEnd (too late for that run to take it), a steer arrives and
    // is handed to the agent.
    let worker = Worker::new(&redis, "w", move |_, messages| {
        let agent = answering_agent(messages)?;
        let (q, flag, handle) = (q.clone(), flag.clone(), agent.handle());
        agent
            .subscribe(move |event| {
                if matches!(event, pagent::AgentEvent::AgentEnd { .. })
                    && !flag.swap(true, Ordering::SeqCst)
                {
                    q.steer("c", "Late.").unwrap();
                    wait_until("the steer handed over", || {
                        !handle.snapshot().steering_queue.is_empty()
                    });
                }
            })
            .keep();
        Ok(agent)
    })
    .unwrap()
    .events(None);
    queue.prompt("c", "Hello").unwrap();
    let mut conn = raw(&shared_url());
    let _w = InProcess::start(worker);
    wait_until("both answered", || described(&store, "c").len() == 4);
    assert_eq!(
        described(&store, "c"),
        answered(&["Hello".into(), "Late.".into()], |p| format!(
            "answer to {p}"
        ))
    );
    let last: redis::streams::StreamRangeReply = redis::cmd("XREVRANGE")
        .arg(format!("{prefix}:{{c}}:inbox"))
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query(&mut conn)
        .unwrap();
    wait_until("done", || {
        done_of(&mut conn, &prefix, "c") == Some(last.ids[0].id.clone())
    });
}

#[test]
fn a_full_redis_with_noeviction_is_waited_out_and_the_worker_does_not_exit() {
    let server = RedisServer::start_with(
        false,
        &["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"],
    );
    let redis = Redis::open(&server.url()).unwrap().prefix("oom");
    let queue = Queue::new(&redis);
    let store = Store::new(&redis);
    let id = queue.prompt("c", "Hello").unwrap();
    let worker = echo_worker(&redis, "w").claim_after(Duration::from_secs(60));
    // Fill Redis up, then lower its limit under what it uses: it refuses every write.
    let mut conn = raw(&server.url());
    let filler = "x".repeat(64 * 1024);
    for i in 0..16 {
        redis::cmd("SET")
            .arg(format!("filler{i}"))
            .arg(&filler)
            .query::<()>(&mut conn)
            .unwrap();
    }
    let limit = |bytes: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(bytes)
            .query::<()>(&mut raw(&server.url()))
            .unwrap();
    };
    limit("1mb");
    // A request is refused with an error that says to wait, not a failure for good.
    let refused = queue.prompt("c", "Too much");
    assert!(
        matches!(&refused, Err(Error::Connection(why)) if why.contains("OOM")),
        "{refused:?}"
    );
    let w = worker.clone();
    let running = std::thread::spawn(move || w.run_for(PATIENCE));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !running.is_finished(),
        "the worker exited: {:?}",
        running.join()
    );
    assert_eq!(done_of(&mut conn, "oom", "c"), None);
    // Memory freed: the prompt is answered, once.
    limit("64mb");
    wait_within("the answer", Duration::from_secs(30), || {
        done_of(&mut conn, "oom", "c").as_ref() == Some(&id)
    });
    assert_eq!(
        described(&store, "c"),
        answered(&["Hello".into()], |p| format!("answer to {p}"))
    );
    worker.stop();
    assert!(running.join().unwrap().is_ok());
}

#[test]
fn an_evicting_redis_is_refused_and_a_queue_deleted_under_a_blocked_read_is_waited_out() {
    let server = RedisServer::start_with(
        false,
        &["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"],
    );
    let redis = Redis::open(&server.url()).unwrap().prefix("lru");
    let refused = echo_worker(&redis, "w").run_for(Duration::from_secs(5));
    assert!(
        matches!(&refused, Err(Error::Config(why)) if why.contains("allkeys-lru")),
        "{refused:?}"
    );
    // Allowed: it runs, and survives the queue stream evicted (here: deleted) while it
    // blocks on it.
    let worker = echo_worker(&redis, "w").allow_eviction(true);
    let w = worker.clone();
    let running = std::thread::spawn(move || w.run_for(PATIENCE));
    let queue = Queue::new(&redis);
    let mut conn = raw(&server.url());
    let first = queue.prompt("c", "One").unwrap();
    wait_within("the first answer", Duration::from_secs(10), || {
        done_of(&mut conn, "lru", "c").as_ref() == Some(&first)
    });
    std::thread::sleep(Duration::from_millis(200));
    redis::cmd("DEL")
        .arg("lru:{queue}")
        .query::<i64>(&mut conn)
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !running.is_finished(),
        "the worker exited: {:?}",
        running.join()
    );
    let second = queue.prompt("c", "Two").unwrap();
    wait_within("the second answer", Duration::from_secs(10), || {
        done_of(&mut conn, "lru", "c").as_ref() == Some(&second)
    });
    worker.stop();
    assert!(running.join().unwrap().is_ok());
}

#[test]
fn a_panicking_factory_is_caught_and_its_entry_dead_lettered_after_max_failures() {
    let redis = shared("poison");
    let prefix = format!("t{}-poison", std::process::id());
    let store = Store::new(&redis);
    for c in ["poison", "fine"] {
        store.delete(c).unwrap();
    }
    let built = Arc::new(AtomicUsize::new(0));
    let b = built.clone();
    let worker = Worker::new(&redis, "w", move |conversation, messages| {
        if conversation == "poison" {
            b.fetch_add(1, Ordering::SeqCst);
            panic!("the factory cannot build this one");
        }
        answering_agent(messages)
    })
    .unwrap()
    .lease(Duration::from_millis(600))
    .claim_after(Duration::from_millis(300))
    .max_failures(2);
    let queue = Queue::new(&redis);
    let poison = queue.prompt("poison", "Boom").unwrap();
    let after = queue.prompt("poison", "After").unwrap();
    let fine = queue.prompt("fine", "Hello").unwrap();
    let running = InProcess::start(worker);
    let mut conn = raw(&shared_url());
    wait_until("fine answered", || {
        done_of(&mut conn, &prefix, "fine").as_ref() == Some(&fine)
    });
    wait_until("the poison entry dead-lettered", || {
        done_of(&mut conn, &prefix, "poison").as_ref() == Some(&poison)
    });
    let dead = dead_letters(&mut conn, &prefix);
    assert_eq!(dead.len(), 1);
    let field = |name: &str| dead[0].get::<String>(name).unwrap();
    assert_eq!(field("conversation"), "poison");
    assert_eq!(field("entry"), poison);
    assert_eq!(field("text"), "Boom");
    assert_eq!(field("failures"), "2");
    assert!(
        field("error").contains("the factory cannot build this one"),
        "{}",
        field("error")
    );
    // The conversation goes on with its next request: the factory still panics for it, so
    // that one is dead-lettered too, after its own failures; the worker never exited.
    wait_until("the next entry dead-lettered", || {
        done_of(&mut conn, &prefix, "poison").as_ref() == Some(&after)
    });
    assert_eq!(built.load(Ordering::SeqCst), 4);
    assert!(!running.thread.as_ref().unwrap().is_finished());
    let lease = lease_of(&mut conn, &prefix, "poison");
    assert_eq!(lease, None);
}

#[test]
fn a_factory_failing_with_a_connection_error_is_tried_again_after_claim_after_not_at_once() {
    let redis = shared("factory-connection");
    let prefix = format!("t{}-factory-connection", std::process::id());
    Store::new(&redis).delete("c").unwrap();
    let built = Arc::new(AtomicUsize::new(0));
    let b = built.clone();
    // The factory's own error looks like Redis's (its model server is away, say): it is
    // the entry's failure, counted and tried again after `claim_after`, not a failure of
    // this worker's connection to take up again at once.
    let worker = Worker::new(&redis, "w", move |_, _| {
        b.fetch_add(1, Ordering::SeqCst);
        Err(Error::Connection("the model server is away".into()))
    })
    .unwrap()
    .claim_after(Duration::from_secs(60))
    .max_failures(3);
    let id = Queue::new(&redis).prompt("c", "Hello").unwrap();
    assert_eq!(worker.run_for(Duration::from_millis(1500)), Ok(0));
    assert_eq!(
        built.load(Ordering::SeqCst),
        1,
        "tried again before claim_after"
    );
    let mut conn = raw(&shared_url());
    let dead: usize = redis::cmd("XLEN")
        .arg(format!("{prefix}:{{dead}}"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(dead, 0);
    let failed: Option<String> = redis::cmd("HGET")
        .arg(format!("{prefix}:{{c}}:meta"))
        .arg("failed")
        .query(&mut conn)
        .unwrap();
    assert_eq!(failed, Some(format!("{id} 1")));
}

#[test]
fn on_end_is_not_called_again_when_a_resume_finds_the_answer_stored() {
    let redis = shared("resume-end");
    let prefix = format!("t{}-resume-end", std::process::id());
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    let id = Queue::new(&redis).prompt("c", "Hello").unwrap();
    // A worker stored the prompt and its answer, then died before recording the run done.
    let answer = answered(&["Hello".into()], |p| format!("answer to {p}"));
    let agent = Agent::builder()
        .provider(answering(Duration::ZERO))
        .build()
        .unwrap();
    agent.prompt("Hello").unwrap();
    let messages: Vec<Message> = agent
        .snapshot()
        .messages
        .iter()
        .map(|m| (**m).clone())
        .collect();
    store.save("c", &messages).unwrap();
    let mut conn = raw(&shared_url());
    redis::cmd("HSET")
        .arg(format!("{prefix}:{{c}}:meta"))
        .arg("started")
        .arg(&id)
        .query::<()>(&mut conn)
        .unwrap();
    let ended = Arc::new(AtomicUsize::new(0));
    let e = ended.clone();
    let worker = echo_worker(&redis, "w").on_end(move |_, _, _| {
        e.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(worker.step(Duration::from_secs(1)), Ok(1));
    assert_eq!(done_of(&mut conn, &prefix, "c"), Some(id));
    assert_eq!(described(&store, "c"), answer);
    assert_eq!(
        ended.load(Ordering::SeqCst),
        0,
        "on_end for a run that ran nothing"
    );
}

#[test]
fn started_is_recorded_with_the_prompt_not_with_a_synthesized_tool_result() {
    let redis = shared("started");
    let prefix = format!("t{}-started", std::process::id());
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    // A worker died while a tool ran: the transcript ends with a call and no result.
    let agent = Agent::builder()
        .provider(Faux::new([
            FauxReply::tool_call("echo", json!({"x": 1})).with_id("call_1")
        ]))
        .build()
        .unwrap();
    let _ = agent.prompt("Call it.");
    let mut messages: Vec<Message> = agent
        .snapshot()
        .messages
        .iter()
        .map(|m| (**m).clone())
        .collect();
    messages.truncate(2);
    store.save("c", &messages).unwrap();
    let id = Queue::new(&redis).prompt("c", "Hello").unwrap();
    // When the prompt's message starts, the synthesized tool result was written before it:
    // `started` must not be recorded yet (it goes with the prompt).
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s, url, meta) = (seen.clone(), shared_url(), format!("{prefix}:{{c}}:meta"));
    let worker = Worker::new(&redis, "w", move |_, messages| {
        let agent = answering_agent(messages)?;
        let (s, url, meta) = (s.clone(), url.clone(), meta.clone());
        agent
            .subscribe(move |event| {
                if let pagent::AgentEvent::MessageStart { message } = event
                    && matches!(**message, Message::User(_))
                {
                    let started: Option<String> = redis::cmd("HGET")
                        .arg(&meta)
                        .arg("started")
                        .query(&mut raw(&url))
                        .unwrap();
                    s.lock().unwrap().push(started);
                }
            })
            .keep();
        Ok(agent)
    })
    .unwrap();
    assert_eq!(worker.step(Duration::from_secs(1)), Ok(1));
    assert_eq!(*seen.lock().unwrap(), [None]);
    let mut conn = raw(&shared_url());
    let started: Option<String> = redis::cmd("HGET")
        .arg(format!("{prefix}:{{c}}:meta"))
        .arg("started")
        .query(&mut conn)
        .unwrap();
    assert_eq!(started, Some(id));
    let described = described(&store, "c");
    assert_eq!(described[2], "tool_result call_1");
    assert_eq!(described[3], "user \"Hello\"");
}

#[test]
fn setters_on_clones_and_names_with_braces_behave() {
    let redis = shared("setters");
    // Worker setters on a clone: the clone changes, the original does not, no panic.
    let worker = echo_worker(&redis, "w");
    let clone = worker.clone().lease(Duration::from_secs(5));
    assert!(format!("{worker:?}").contains("600ms"), "{worker:?}");
    assert!(format!("{clone:?}").contains("5s"), "{clone:?}");
    // EventLog::max_len on a clone leaves the original's cap.
    let log = EventLog::new(&redis, "c");
    let capped = log.clone().max_len(5);
    assert!(format!("{log:?}").contains("max_len: 10000"), "{log:?}");
    assert!(format!("{capped:?}").contains("max_len: 5"), "{capped:?}");
    // A name that would move the hash tag is refused.
    let bad = "a}b";
    assert!(matches!(
        Queue::new(&redis).prompt(bad, "x"),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        Store::new(&redis).load(bad),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        EventLog::new(&redis, bad).write_event(&pagent::AgentEvent::AgentStart),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        RemoteMirror::new(&redis, "{x").next_event(Duration::from_millis(1)),
        Err(Error::Config(_))
    ));
}

/// Text only the script that appends a batch of a run's writes ([`pagent::redis`]'s
/// `WRITE`) carries.
const WRITE_SCRIPT: &str = "KEYS[4], 'wrote'";

/// Text only the script that ends a run ([`pagent::redis`]'s `END`) carries: the proxy
/// marks its calls by the SHA1 it learns when a connection loads it.
const END_SCRIPT: &str = "'ended'";

#[test]
fn a_reply_corrupted_or_cut_in_the_middle_is_a_typed_error_and_every_write_applies_once() {
    let (proxy, prefix, redis, direct) = proxied("reply-faults");
    let store = Store::new(&direct);
    store.delete("c").unwrap();
    let queue = Queue::new(&direct);
    let worker = echo_worker(&redis, "w");
    let url = shared_url();
    let mut prompts = Vec::new();
    let mut expected_faults = 0;
    for (i, fault) in [proxy::Fault::CorruptReply, proxy::Fault::CutReply]
        .into_iter()
        .enumerate()
    {
        // The end of the run applied, its reply unreadable: it goes again on a new
        // connection and is recognised.
        let text = format!("Prompt {i}");
        let id = queue.prompt("c", &text).unwrap();
        prompts.push(text);
        proxy.fault_requests_with(END_SCRIPT, fault, 1);
        expected_faults += 1;
        step_until_done(&worker, &url, &prefix, &id);
        assert_eq!(proxy.faulted(), expected_faults, "{fault:?}");
    }
    let answers = answered(&prompts, |p| format!("answer to {p}"));
    assert_eq!(described(&store, "c"), answers);
    assert_eq!(runs_in_stream(&direct, "c"), runs(&answers, false));
    // A read whose reply is unreadable twice (the first try and the one on a new
    // connection) is a typed error saying so; the next one reads on a new connection.
    let through = Store::new(&redis);
    // Its connection kept: a failure on it is tried again once on a new one.
    assert_eq!(through.load("c").unwrap().messages.len(), answers.len());
    for fault in [proxy::Fault::CorruptReply, proxy::Fault::CutReply] {
        proxy.fault_requests_with("LRANGE", fault, 2);
        let failed = through.load("c").map(|l| l.messages.len());
        match (&fault, &failed) {
            (proxy::Fault::CorruptReply, Err(Error::Connection(why))) => {
                assert!(why.contains("malformed reply"), "{why}");
            }
            (proxy::Fault::CutReply, Err(Error::Connection(why))) => {
                assert!(why.contains("closed the connection"), "{why}");
            }
            _ => panic!("{fault:?}: {failed:?}"),
        }
        assert_eq!(through.load("c").unwrap().messages.len(), answers.len());
    }
}

#[test]
fn writes_sent_again_after_a_break_apply_once_though_a_later_write_of_the_run_had_landed() {
    let (proxy, prefix, redis, direct) = proxied("resend-order");
    let store = Store::new(&direct);
    store.delete("c").unwrap();
    // The reply comes late: the prompt's batch goes on its own (within 5 ms of its end),
    // and the batches after it and the run's end follow without its reply being read. The
    // first batch and the request after it are applied and their replies lost: the unread
    // ones go again on a new connection, the first one behind a later one that landed.
    let worker = Worker::new(&redis, "w", |_, messages| {
        Agent::builder()
            .provider(answering(Duration::from_millis(300)))
            .messages(messages)
            .build()
    })
    .unwrap()
    .lease(Duration::from_secs(5))
    .claim_after(Duration::from_secs(60));
    let id = Queue::new(&direct).prompt("c", "Hello").unwrap();
    proxy.fault_requests_with(WRITE_SCRIPT, proxy::Fault::SilenceThenCut, 1);
    step_until_done(&worker, &shared_url(), &prefix, &id);
    assert_eq!(proxy.faulted(), 1, "the first batch's reply was lost");
    let answers = answered(&["Hello".into()], |p| format!("answer to {p}"));
    assert_eq!(described(&store, "c"), answers, "a write applied twice");
    assert_eq!(runs_in_stream(&direct, "c"), runs(&answers, false));
}

#[test]
fn the_end_of_a_run_carrying_its_last_writes_applies_once_when_it_is_cut_or_dropped() {
    let (proxy, prefix, redis, direct) = proxied("end-cut");
    let store = Store::new(&direct);
    store.delete("c").unwrap();
    let queue = Queue::new(&direct);
    // No `on_end`: a short run's writes go with its end, in one script.
    let worker = echo_worker(&redis, "w");
    let url = shared_url();
    let faults = [
        // Applied, its reply lost: sent again on a new connection, recognised.
        (proxy::Fault::ForwardThenCut, 1),
        // Never reached Redis: sent again, applied then.
        (proxy::Fault::DropAndCut, 1),
        // Applied, and the second send's reply lost too: the step fails (the outcome was
        // unknown to it), and the next steps find the run done, not to be run again.
        (proxy::Fault::ForwardThenCut, 2),
    ];
    let mut prompts = Vec::new();
    let mut expected_faults = 0;
    for (i, (fault, times)) in faults.into_iter().enumerate() {
        // Two prompts at once: the first run's end keeps the lease and hands back the
        // second (so an end applied twice would append its writes twice), the second's
        // releases it.
        let mut id = String::new();
        for part in ["a", "b"] {
            let text = format!("Prompt {i}{part}");
            id = queue.prompt("c", &text).unwrap();
            prompts.push(text);
        }
        proxy.fault_requests_with(END_SCRIPT, fault, times);
        expected_faults += times;
        step_until_done(&worker, &url, &prefix, &id);
        assert_eq!(
            proxy.faulted(),
            expected_faults,
            "{fault:?} done to the run's end"
        );
    }
    let answers = answered(&prompts, |p| format!("answer to {p}"));
    assert_eq!(described(&store, "c"), answers);
    assert_eq!(
        runs_in_stream(&direct, "c"),
        runs(&answers, false),
        "a write applied twice"
    );
    // The queue entries of the "b" prompts find their prompt done: acknowledged.
    let mut conn = raw(&url);
    wait_within("the queue handled", Duration::from_secs(10), || {
        let _ = worker.step(Duration::from_millis(100));
        unhandled(&mut conn, &prefix) == 0
    });
    assert_eq!(described(&store, "c"), answers, "nothing run again");
    let lease = lease_of(&mut conn, &prefix, "c");
    assert_eq!(lease, None, "the lease was released");
    let (state, _) = folded(&direct, "c");
    assert_eq!(
        state
            .messages
            .iter()
            .map(|m| (**m).clone())
            .collect::<Vec<_>>(),
        stored(&store, "c")
    );
}

#[test]
fn a_worker_killed_with_the_end_of_its_run_unsent_has_the_prompt_answered_once_by_another() {
    let proxy = proxy_to_shared();
    let prefix = format!("t{}-end-kill", std::process::id());
    let redis = shared("end-kill");
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    let id = Queue::new(&redis).prompt("c", "Hello").unwrap();
    let worker = |name: &str, url: String| {
        Role::start(
            "worker",
            &[
                ("PAGENT_REDIS_TEST_URL", url),
                ("PAGENT_REDIS_TEST_PREFIX", prefix.clone()),
                ("PAGENT_REDIS_TEST_NAME", name.into()),
                ("PAGENT_REDIS_TEST_LEASE_MS", "600".into()),
                ("PAGENT_REDIS_TEST_CLAIM_MS", "1500".into()),
                ("PAGENT_REDIS_TEST_EVENTS", "10000".into()),
            ],
        )
    };
    // w0's run ends, and the script that would record it (with the run's last writes) never
    // reaches Redis: w0 dies right then.
    proxy.fault_requests_with(END_SCRIPT, proxy::Fault::Hold, 1);
    let mut w0 = worker("w0", proxy.url());
    wait_until("w0 sending the end of its run", || proxy.faulted() == 1);
    w0.kill();
    let mut conn = raw(&shared_url());
    assert_eq!(
        done_of(&mut conn, &prefix, "c"),
        None,
        "the run was not recorded done"
    );
    let _w1 = worker("w1", shared_url());
    wait_until("w1's answer", || {
        done_of(&mut conn, &prefix, "c").as_ref() == Some(&id)
    });
    assert_eq!(
        described(&store, "c"),
        answered(&["Hello".to_string()], |p| format!("answer to {p}"))
    );
    // Whatever of w0's run had landed before its end (nothing, when its writes all went
    // with the end), the mirror holds what the store holds.
    let (state, _) = folded(&redis, "c");
    assert_eq!(
        state
            .messages
            .iter()
            .map(|m| (**m).clone())
            .collect::<Vec<_>>(),
        stored(&store, "c")
    );
    let runs = runs_in_stream(&redis, "c");
    assert_eq!(
        runs.iter().filter(|r| r.starts_with("assistant")).count(),
        1,
        "one answer in the event stream: {runs:?}"
    );
}

/// The bytes only a worker's first read of the queue ahead carries: `COUNT 4`.
const READ_AHEAD_OF_FOUR: &str = "COUNT\r\n$1\r\n4\r\n";

#[test]
fn a_queue_entry_read_ahead_whose_reply_was_lost_is_run_without_a_claim_wait() {
    let (proxy, prefix, redis, direct) = proxied("ahead-cut");
    let store = Store::new(&direct);
    let queue = Queue::new(&direct);
    let mut conn = raw(&shared_url());
    for round in 0..3 {
        // `claim_after` 60 s: an entry left pending and not taken up again by its own
        // worker would wait that long, past this test's bounds.
        let worker = echo_worker(&redis, &format!("w{round}"));
        let (a, b) = (format!("a{round}"), format!("b{round}"));
        for c in [&a, &b] {
            store.delete(c).unwrap();
        }
        // The start of a's run goes with the read of the next queue entries (b's; the
        // first read ahead, four at most): its reply is lost, and the read is not sent
        // again (it is not idempotent), so b's entry is pending under the worker with
        // nothing in hand.
        proxy.fault_requests_with(READ_AHEAD_OF_FOUR, proxy::Fault::ForwardThenCut, 1);
        let id_a = queue.prompt(&a, "One").unwrap();
        let id_b = queue.prompt(&b, "Two").unwrap();
        let running = worker.clone();
        let run = std::thread::spawn(move || running.run_for(Duration::from_secs(20)));
        wait_within("both answered", Duration::from_secs(10), || {
            done_of(&mut conn, &prefix, &a).as_ref() == Some(&id_a)
                && done_of(&mut conn, &prefix, &b).as_ref() == Some(&id_b)
        });
        worker.stop();
        run.join().unwrap().unwrap();
        assert_eq!(proxy.faulted(), round + 1, "the read was cut");
        assert_eq!(
            described(&store, &a),
            answered(&["One".into()], |p| format!("answer to {p}"))
        );
        assert_eq!(
            described(&store, &b),
            answered(&["Two".into()], |p| format!("answer to {p}"))
        );
    }
    let pending: redis::Value = redis::cmd("XPENDING")
        .arg(format!("{prefix}:{{queue}}"))
        .arg("workers")
        .query(&mut conn)
        .unwrap();
    assert!(
        matches!(&pending, redis::Value::Array(v) if v.first() == Some(&redis::Value::Int(0))),
        "nothing left pending: {pending:?}"
    );
}

#[test]
fn run_for_ending_with_a_queue_entry_read_ahead_runs_it_before_it_returns() {
    let redis = shared("ahead-end");
    let prefix = format!("t{}-ahead-end", std::process::id());
    let store = Store::new(&redis);
    let queue = Queue::new(&redis);
    for c in ["a", "b"] {
        store.delete(c).unwrap();
    }
    // a's run outlasts `run_for`'s limit: its start reads b's entry ahead, its end comes
    // after the limit, and `run_for` must not return with b's entry in hand.
    let worker = Worker::new(&redis, "w", |conversation, messages| {
        if conversation == "a" {
            std::thread::sleep(Duration::from_millis(600));
        }
        answering_agent(messages)
    })
    .unwrap()
    .claim_after(Duration::from_secs(60));
    let id_a = queue.prompt("a", "One").unwrap();
    let id_b = queue.prompt("b", "Two").unwrap();
    let handled = worker.run_for(Duration::from_millis(300)).unwrap();
    assert_eq!(
        handled, 2,
        "b's entry, read ahead with a's start, was handled too"
    );
    let mut conn = raw(&shared_url());
    assert_eq!(done_of(&mut conn, &prefix, "a"), Some(id_a));
    assert_eq!(done_of(&mut conn, &prefix, "b"), Some(id_b));
    assert_eq!(
        described(&store, "b"),
        answered(&["Two".into()], |p| format!("answer to {p}"))
    );
    assert_eq!(
        unhandled(&mut conn, &prefix),
        0,
        "nothing left in the queue"
    );
}

#[test]
fn a_script_cache_flushed_between_runs_and_mid_run_is_loaded_again_and_each_write_applies_once() {
    // A server of its own: emptying the shared server's script cache would reach every
    // other test's connections.
    let server = RedisServer::start(false);
    let proxy = proxy::Proxy::start(server.port);
    let redis = Redis::open(&proxy.url()).unwrap().prefix("flush");
    let direct = Redis::open(&server.url()).unwrap().prefix("flush");
    let store = Store::new(&direct);
    let queue = Queue::new(&redis);
    let worker = Worker::new(&redis, "w", |_, messages| {
        Agent::builder()
            .provider(answering(Duration::from_millis(300)).chunk_chars(2))
            .messages(messages)
            .build()
    })
    .unwrap()
    .lease(Duration::from_millis(600))
    .claim_after(Duration::from_secs(60));
    let mut conn = raw(&server.url());
    // The cache emptied right before a call of each script: the queue's request, the
    // start of a run, a batch of writes sent ahead (with the end behind it), the end, and
    // the lease's renewal (each reply takes 300 ms, past a third of the lease).
    let markers = [
        "'XREVRANGE'",
        "'NX'",
        "ARGV[4], 5, set)",
        "'ended'",
        "'XCLAIM'",
    ];
    let mut prompts = Vec::new();
    for (i, marker) in markers.into_iter().enumerate() {
        proxy.fault_requests_with(marker, proxy::Fault::FlushScripts, 1);
        let text = format!("Prompt {i}");
        let id = queue.prompt("c", &text).unwrap();
        prompts.push(text);
        step_until_done(&worker, &server.url(), "flush", &id);
        assert_eq!(proxy.faulted(), i + 1, "the cache emptied before {marker}");
    }
    // Emptied between runs: every kept connection finds its scripts gone.
    for i in 0..2 {
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query::<()>(&mut conn)
            .unwrap();
        let text = format!("Between {i}");
        let id = queue.prompt("c", &text).unwrap();
        prompts.push(text);
        step_until_done(&worker, &server.url(), "flush", &id);
    }
    let answers = answered(&prompts, |p| format!("answer to {p}"));
    assert_eq!(described(&store, "c"), answers);
    // No run broke off, none ran twice, no write applied twice.
    assert_eq!(runs_in_stream(&redis, "c"), runs(&answers, false));
    let lease: Option<String> = redis::cmd("GET")
        .arg("flush:{c}:lease")
        .query(&mut conn)
        .unwrap();
    assert_eq!(lease, None, "the lease was released");
}

#[test]
fn a_stored_transcript_of_whole_pages_or_more_reaches_the_agent_whole() {
    let redis = shared("pages");
    let prefix = format!("t{}-pages", std::process::id());
    let store = Store::new(&redis);
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let worker = Worker::new(&redis, "w", move |_, messages| {
        s.store(messages.len(), Ordering::Release);
        answering_agent(messages)
    })
    .unwrap()
    .claim_after(Duration::from_secs(60));
    let url = shared_url();
    // The script that starts a run returns a first page of 500 elements; the rest is read
    // page by page until one is not full.
    for len in [499, 500, 1000, 1001] {
        let name = format!("c{len}");
        let messages: Vec<Message> = (0..len).map(|i| Message::user(format!("m{i}"))).collect();
        store.save(&name, &messages).unwrap();
        let id = Queue::new(&redis).prompt(&name, "Hello").unwrap();
        wait_within("the answer", Duration::from_secs(10), || {
            let _ = worker.step(Duration::from_millis(100));
            done_of(&mut raw(&url), &prefix, &name).as_ref() == Some(&id)
        });
        assert_eq!(seen.load(Ordering::Acquire), len, "the agent got it whole");
        let stored = stored(&store, &name);
        assert_eq!(stored.len(), len + 2);
        assert_eq!(stored[..len], messages[..]);
        store.delete(&name).unwrap();
    }
}

#[test]
fn a_queue_entry_read_ahead_is_kept_claimed_while_its_worker_runs_on_past_claim_after() {
    let redis = shared("ahead-kept");
    let prefix = format!("t{}-ahead-kept", std::process::id());
    let store = Store::new(&redis);
    for c in ["a", "b"] {
        store.delete(c).unwrap();
    }
    let queue = Queue::new(&redis);
    // a has two prompts in its inbox: the start of the first run reads b's queue entry
    // ahead, and its end finds the second prompt to run, which takes longer than
    // `claim_after`.
    let id_a1 = queue.prompt("a", "One").unwrap();
    let id_b = queue.prompt("b", "Two").unwrap();
    let id_a2 = queue.prompt("a", "Three").unwrap();
    let worker = |name: &str, built: Arc<AtomicUsize>| {
        Worker::new(&redis, name, move |_, messages| {
            built.fetch_add(1, Ordering::AcqRel);
            let faux = Faux::default().otherwise(|request| {
                let prompt = last_user(&request.messages);
                let slow = if prompt == "Three" { 2500 } else { 0 };
                FauxReply::text(format!("answer to {prompt}")).delay(Duration::from_millis(slow))
            });
            Agent::builder().provider(faux).messages(messages).build()
        })
        .unwrap()
        .lease(Duration::from_millis(600))
        .claim_after(Duration::from_millis(1500))
    };
    let w1 = InProcess::start(worker("w1", Arc::default()));
    let mut conn = raw(&shared_url());
    wait_until("a's first answer", || {
        done_of(&mut conn, &prefix, "a").as_ref() == Some(&id_a1)
    });
    // b's entry is in w1's hands now. w2 claims what stays pending 1.5 s.
    let built_by_w2 = Arc::new(AtomicUsize::new(0));
    let w2 = InProcess::start(worker("w2", built_by_w2.clone()));
    wait_until("every answer", || {
        done_of(&mut conn, &prefix, "a").as_ref() == Some(&id_a2)
            && done_of(&mut conn, &prefix, "b").as_ref() == Some(&id_b)
    });
    drop((w1, w2));
    assert_eq!(
        built_by_w2.load(Ordering::Acquire),
        0,
        "w2 claimed an entry w1 held and ran it"
    );
    let answer = |p: &str| format!("answer to {p}");
    let a = answered(&["One".into(), "Three".into()], answer);
    assert_eq!(described(&store, "a"), a);
    assert_eq!(runs_in_stream(&redis, "a"), runs(&a, false));
    let b = answered(&["Two".into()], answer);
    assert_eq!(described(&store, "b"), b);
    assert_eq!(runs_in_stream(&redis, "b"), runs(&b, false));
}

/// A worker whose factory counts the agents it built per conversation, answering each
/// prompt after `slow(prompt)`.
fn counting_worker(
    redis: &Redis,
    name: &str,
    built: Arc<Mutex<Vec<String>>>,
    slow: fn(&str) -> u64,
) -> Worker {
    Worker::new(redis, name, move |conversation, messages| {
        built.lock().unwrap().push(conversation.to_string());
        let faux = Faux::default().otherwise(move |request| {
            let prompt = last_user(&request.messages);
            FauxReply::text(format!("answer to {prompt}"))
                .delay(Duration::from_millis(slow(&prompt)))
        });
        Agent::builder().provider(faux).messages(messages).build()
    })
    .unwrap()
    .claim_after(Duration::from_secs(60))
}

#[test]
fn the_start_of_a_run_sent_ahead_whose_reply_was_lost_or_that_never_arrived_is_sent_by_its_run() {
    let (proxy, prefix, redis, direct) = proxied("begin-ahead");
    let store = Store::new(&direct);
    let queue = Queue::new(&direct);
    let faults = [proxy::Fault::ForwardThenCut, proxy::Fault::DropAndCut];
    for (round, fault) in faults.into_iter().enumerate() {
        let (names, ids) = four_queued(&store, &queue, round);
        // The first run (a's) has nothing read ahead; its start reads b's, c's and d's
        // entries, and b's run sends the start of c's ahead: the third start of a run.
        proxy.fault_requests_after("'NX'", 2, fault, 1);
        let built = Arc::new(Mutex::new(Vec::new()));
        let worker = counting_worker(&redis, &format!("w{round}"), built.clone(), |_| 0);
        run_until_answered(&worker, &prefix, &names, &ids);
        assert_eq!(
            proxy.faulted(),
            round + 1,
            "{fault:?} done to the start of c's run"
        );
        assert_eq!(*built.lock().unwrap(), names, "each run once, in order");
        each_answered_once(&store, &direct, &prefix, &names);
    }
    let mut conn = raw(&shared_url());
    assert_eq!(
        unhandled(&mut conn, &prefix),
        0,
        "nothing left in the queue"
    );
}

#[test]
fn the_start_of_a_run_sent_ahead_is_not_used_once_its_lease_may_have_expired() {
    let redis = shared("stale-begin");
    let prefix = format!("t{}-stale-begin", std::process::id());
    let store = Store::new(&redis);
    for c in ["a", "b", "c"] {
        store.delete(c).unwrap();
    }
    let queue = Queue::new(&redis);
    let id_a = queue.prompt("a", "One").unwrap();
    let id_b = queue.prompt("b", "Two").unwrap();
    let id_c1 = queue.prompt("c", "Three").unwrap();
    // b's run (which sends the start of c's ahead, with a lease of 600 ms) takes 1.5 s:
    // c's lease expires meanwhile, and another worker runs c.
    let built = Arc::new(Mutex::new(Vec::new()));
    let slow = |prompt: &str| if prompt == "Two" { 1500 } else { 0 };
    let w1 = counting_worker(&redis, "w1", built.clone(), slow).lease(Duration::from_millis(600));
    let w1 = InProcess::start(w1);
    wait_until("b's prompt stored", || {
        store.load("b").is_ok_and(|l| l.messages.len() == 1)
    });
    std::thread::sleep(Duration::from_millis(700));
    let id_c2 = queue.prompt("c", "Four").unwrap();
    let w2 = counting_worker(&redis, "w2", Arc::default(), slow);
    let url = shared_url();
    wait_within("w2 running c", Duration::from_secs(10), || {
        let _ = w2.step(Duration::from_millis(100));
        done_of(&mut raw(&url), &prefix, "c").as_ref() == Some(&id_c2)
    });
    let mut conn = raw(&url);
    wait_until("w1 done with b and c's entry", || {
        done_of(&mut conn, &prefix, "b").as_ref() == Some(&id_b) && {
            let pending: redis::Value = redis::cmd("XPENDING")
                .arg(format!("{prefix}:{{queue}}"))
                .arg("workers")
                .query(&mut conn)
                .unwrap();
            matches!(&pending, redis::Value::Array(v) if v.first() == Some(&redis::Value::Int(0)))
        }
    });
    drop(w1);
    assert_eq!(done_of(&mut conn, &prefix, "a"), Some(id_a));
    // w1 read c again (what it read ahead was older than a third of the lease): c was
    // done, and w1 built no agent for it.
    assert_eq!(*built.lock().unwrap(), ["a", "b"]);
    let _ = id_c1;
    let c = answered(&["Three".into(), "Four".into()], |p| {
        format!("answer to {p}")
    });
    assert_eq!(described(&store, "c"), c);
    assert_eq!(runs_in_stream(&redis, "c"), runs(&c, false));
}

/// Four conversations of one prompt each, queued for one worker under `run_for`: the
/// first run has nothing read ahead and waits for its end; each later one sends the start
/// of the next ahead, so its end is not waited for. Returns the conversations' names and
/// their prompts' ids.
fn four_queued(store: &Store, queue: &Queue, round: usize) -> (Vec<String>, Vec<String>) {
    let names: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|c| format!("{c}{round}"))
        .collect();
    for c in &names {
        store.delete(c).unwrap();
    }
    let ids = names
        .iter()
        .map(|c| queue.prompt(c, "Hello").unwrap())
        .collect();
    (names, ids)
}

/// Each of `names` answered once, in its transcript and its event stream, its lease
/// released.
fn each_answered_once(store: &Store, direct: &Redis, prefix: &str, names: &[String]) {
    let mut conn = raw(&shared_url());
    let answers = answered(&["Hello".into()], |p| format!("answer to {p}"));
    for c in names {
        assert_eq!(described(store, c), answers, "{c}");
        assert_eq!(runs_in_stream(direct, c), runs(&answers, false), "{c}");
        let lease = lease_of(&mut conn, prefix, c);
        assert_eq!(lease, None, "{c}'s lease was released");
    }
}

/// Runs `worker` under `run_for` until each of `names` is done up to its prompt of `ids`,
/// then stops it; returns what `run_for` handled. Within 10 s: a `claim_after` is 60 s, so
/// an entry left waiting for a claim fails this.
fn run_until_answered(worker: &Worker, prefix: &str, names: &[String], ids: &[String]) -> u64 {
    let running = worker.clone();
    let run = std::thread::spawn(move || running.run_for(Duration::from_secs(20)));
    let mut conn = raw(&shared_url());
    wait_within("every answer", Duration::from_secs(10), || {
        names
            .iter()
            .zip(ids)
            .all(|(c, id)| done_of(&mut conn, prefix, c).as_ref() == Some(id))
    });
    worker.stop();
    run.join().unwrap().unwrap()
}

#[test]
fn the_end_of_a_run_not_waited_for_applies_once_when_it_is_cut_dropped_or_its_reply_lost() {
    let (proxy, prefix, redis, direct) = proxied("end-later");
    let store = Store::new(&direct);
    let queue = Queue::new(&direct);
    let mut conn = raw(&shared_url());
    let faults = [
        // Applied, its reply lost: sent again on a new connection, recognised.
        (proxy::Fault::ForwardThenCut, 1),
        // Never reached Redis: sent again, applied then.
        (proxy::Fault::DropAndCut, 1),
        // Applied, its reply cut in the middle or unreadable.
        (proxy::Fault::CutReply, 1),
        (proxy::Fault::CorruptReply, 1),
        // Applied with the start sent ahead behind it, neither answered.
        (proxy::Fault::SilenceThenCut, 1),
        // Applied, and the second send's reply lost too: its outcome is unknown to the
        // worker, which takes up its own entries again and finds this one done.
        (proxy::Fault::ForwardThenCut, 2),
    ];
    for (round, (fault, times)) in faults.into_iter().enumerate() {
        let (names, ids) = four_queued(&store, &queue, round);
        // b's end: the first not waited for (c's run was started ahead of it).
        proxy.fault_requests_after(END_SCRIPT, 1, fault, times);
        let before = proxy.faulted();
        let built = Arc::new(Mutex::new(Vec::new()));
        let worker = counting_worker(&redis, &format!("w{round}"), built.clone(), |_| 0);
        let handled = run_until_answered(&worker, &prefix, &names, &ids);
        assert_eq!(proxy.faulted() - before, times, "{fault:?} done to b's end");
        assert_eq!(
            *built.lock().unwrap(),
            names,
            "{fault:?}: each run once, in order"
        );
        each_answered_once(&store, &direct, &prefix, &names);
        if times == 1 {
            assert_eq!(handled, 4, "{fault:?}: each end counted once it landed");
        }
    }
    assert_eq!(
        unhandled(&mut conn, &prefix),
        0,
        "nothing left in the queue"
    );
}

#[test]
fn the_next_run_starts_while_the_end_of_the_last_one_has_not_reached_redis() {
    let (proxy, prefix, redis, direct) = proxied("end-held");
    let redis = redis.timeout(Duration::from_secs(1));
    let store = Store::new(&direct);
    let queue = Queue::new(&direct);
    let (names, ids) = four_queued(&store, &queue, 0);
    // What each run's factory found of the conversation before it: its `done`.
    let found = Arc::new(Mutex::new(Vec::new()));
    let worker = {
        let (found, names, prefix) = (found.clone(), names.clone(), prefix.clone());
        Worker::new(&redis, "w", move |conversation, messages| {
            let at = names.iter().position(|c| c == conversation).unwrap();
            if at > 0 {
                let before = done_of(&mut raw(&shared_url()), &prefix, &names[at - 1]);
                found
                    .lock()
                    .unwrap()
                    .push((conversation.to_string(), before));
            }
            answering_agent(messages)
        })
        .unwrap()
        .claim_after(Duration::from_secs(60))
    };
    // b's end never reaches Redis, nor anything after it on its connection, until the
    // worker gives the connection up (its 1 s timeout) and sends it again on a new one.
    proxy.fault_requests_after(END_SCRIPT, 1, proxy::Fault::Hold, 1);
    assert_eq!(run_until_answered(&worker, &prefix, &names, &ids), 4);
    assert_eq!(proxy.faulted(), 1, "b's end held");
    let found = found.lock().unwrap().clone();
    assert_eq!(
        found[..2],
        [
            (names[1].clone(), Some(ids[0].clone())),
            (names[2].clone(), None),
        ],
        "a's end was waited for (nothing was started ahead of it), b's was not: c's run \
         started while it was held"
    );
    each_answered_once(&store, &direct, &prefix, &names);
}

#[test]
fn an_end_not_waited_for_that_finds_more_in_the_inbox_hands_the_conversation_back() {
    let redis = shared("hand-back");
    let prefix = format!("t{}-hand-back", std::process::id());
    // A conversation's name may be empty: its end hands it back all the same.
    for (round, a) in ["a", ""].into_iter().enumerate() {
        let (x, b) = (format!("x{round}"), format!("b{round}"));
        hand_back(&redis, &prefix, [&x, a, &b], round);
    }
}

/// x's run reads a's and b's entries ahead; a's run sends b's start ahead, so its end is
/// not waited for. a's second prompt comes while its first runs: that end finds it in the
/// inbox and hands a back to the queue, behind b, instead of running it.
fn hand_back(redis: &Redis, prefix: &str, [x, a, b]: [&str; 3], round: usize) {
    let store = Store::new(redis);
    let queue = Queue::new(redis);
    for c in [x, a, b] {
        store.delete(c).unwrap();
    }
    let id_x = queue.prompt(x, "Zero").unwrap();
    queue.prompt(a, "One").unwrap();
    let id_b = queue.prompt(b, "Two").unwrap();
    let built = Arc::new(Mutex::new(Vec::new()));
    let worker = counting_worker(redis, &format!("w{round}"), built.clone(), |prompt| {
        if prompt == "One" { 400 } else { 0 }
    });
    let running = worker.clone();
    let run = std::thread::spawn(move || running.run_for(Duration::from_secs(20)));
    wait_within("a's first run", Duration::from_secs(10), || {
        built.lock().unwrap().len() == 2
    });
    let id_a2 = queue.prompt(a, "Three").unwrap();
    let mut conn = raw(&shared_url());
    // `claim_after` is 60 s: an end that kept the lease unnoticed fails this.
    wait_within("every answer", Duration::from_secs(10), || {
        done_of(&mut conn, prefix, x).as_ref() == Some(&id_x)
            && done_of(&mut conn, prefix, a).as_ref() == Some(&id_a2)
            && done_of(&mut conn, prefix, b).as_ref() == Some(&id_b)
    });
    worker.stop();
    // The four prompts' queue entries and the hand back's, which finds nothing left to run.
    assert_eq!(
        run.join().unwrap().unwrap(),
        5,
        "{a:?}: each entry counted once"
    );
    assert_eq!(
        *built.lock().unwrap(),
        [x, a, b, a],
        "{a:?} handed back behind {b}"
    );
    let answer = |p: &str| format!("answer to {p}");
    let answers = answered(&["One".into(), "Three".into()], answer);
    assert_eq!(described(&store, a), answers);
    assert_eq!(runs_in_stream(redis, a), runs(&answers, false));
    assert_eq!(described(&store, b), answered(&["Two".into()], answer));
    let lease = lease_of(&mut conn, prefix, a);
    assert_eq!(lease, None, "{a:?}'s lease was released");
    assert_eq!(unhandled(&mut conn, prefix), 0, "nothing left in the queue");
}

#[test]
fn a_dead_lettered_entry_keeps_the_lease_and_its_conversation_goes_on_at_once() {
    let redis = shared("dead-goes-on");
    let prefix = format!("t{}-dead-goes-on", std::process::id());
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    // The first agent built panics; at its first failure (`max_failures` 1) the entry is
    // dead-lettered, and the conversation's next request runs in the same hands. With
    // `claim_after` 60 s, a lease dropped there would leave Boom's queue entry pending
    // past this test.
    let built = Arc::new(AtomicUsize::new(0));
    let b = built.clone();
    let worker = Worker::new(&redis, "w", move |_, messages| {
        if b.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("the first agent cannot be built");
        }
        answering_agent(messages)
    })
    .unwrap()
    .claim_after(Duration::from_secs(60))
    .max_failures(1);
    let queue = Queue::new(&redis);
    let boom = queue.prompt("c", "Boom").unwrap();
    let after = queue.prompt("c", "After").unwrap();
    let _running = InProcess::start(worker);
    let mut conn = raw(&shared_url());
    // Both queue entries handled: Boom's with the end of the drain that ran After, After's
    // own next (it finds After done).
    wait_within("the queue handled", Duration::from_secs(10), || {
        done_of(&mut conn, &prefix, "c").as_ref() == Some(&after)
            && unhandled(&mut conn, &prefix) == 0
    });
    assert_eq!(built.load(Ordering::SeqCst), 2);
    assert_eq!(
        described(&store, "c"),
        answered(&["After".into()], |p| format!("answer to {p}"))
    );
    let dead = dead_letters(&mut conn, &prefix);
    assert_eq!(
        dead.iter()
            .map(|e| e.get::<String>("entry"))
            .collect::<Vec<_>>(),
        [Some(boom)]
    );
    let lease = lease_of(&mut conn, &prefix, "c");
    assert_eq!(lease, None, "the lease was released at the end");
}
