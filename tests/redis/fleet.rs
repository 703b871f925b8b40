//! The fleet at work: steering and aborts routed to the worker that runs a conversation,
//! three worker processes answering every prompt once and in order, a worker killed by
//! SIGKILL and Redis restarted mid-run, a lost lease, a replayed queue entry, the README's
//! example.

use super::*;

#[test]
fn steering_and_an_abort_reach_the_worker_running_the_conversation() {
    let redis = shared("control");
    let store = Store::new(&redis);
    for c in ["steered", "aborted"] {
        store.delete(c).unwrap();
    }
    // The tool says it runs, then waits until the steering message reached the agent.
    let running: Arc<Mutex<Option<AgentHandle>>> = Arc::default();
    let in_tool = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (slot, flag) = (running.clone(), in_tool.clone());
    let factory = move |conversation: &str, messages: Vec<Message>| {
        let agent = if conversation == "steered" {
            let (r, flag) = (slot.clone(), flag.clone());
            let tool = fn_tool("wait", move |_, _| {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                wait_until("the steering message", || {
                    r.lock()
                        .unwrap()
                        .as_ref()
                        .is_some_and(|h| !h.snapshot().steering_queue.is_empty())
                });
                Ok(ToolOutput::text("waited"))
            });
            let faux = Faux::new([
                FauxReply::tool_call("wait", json!({})).with_id("call_1"),
                FauxReply::text("Steered."),
            ]);
            Agent::builder()
                .provider(faux)
                .tool(tool)
                .messages(messages)
                .build()?
        } else {
            // Stalls until aborted.
            let faux = Faux::new([FauxReply::text("never").delay(PATIENCE)]);
            Agent::builder().provider(faux).messages(messages).build()?
        };
        *slot.lock().unwrap() = Some(agent.handle());
        Ok(agent)
    };
    // Two workers: the one running a conversation reads no queue entry meanwhile, so the
    // other one takes the steer's and the abort's, and they reach the run all the same.
    let _workers: Vec<InProcess> = ["w1", "w2"]
        .into_iter()
        .map(|name| {
            let worker = Worker::new(&redis, name, factory.clone())
                .unwrap()
                .lease(Duration::from_millis(600))
                .claim_after(Duration::from_secs(2));
            InProcess::start(worker)
        })
        .collect();
    let queue = Queue::new(&redis);
    let mut conn = raw(&shared_url());
    let prefix = format!("t{}-control", std::process::id());

    queue.prompt("steered", "Wait.").unwrap();
    wait_until("the tool", || {
        in_tool.load(std::sync::atomic::Ordering::SeqCst)
    });
    let last = queue.steer("steered", "Also this.").unwrap();
    wait_until("the steered run", || {
        done_of(&mut conn, &prefix, "steered").as_ref() == Some(&last)
    });
    assert_eq!(
        described(&store, "steered"),
        [
            "user \"Wait.\"",
            "assistant tool_use \"\" [call_1]",
            "tool_result call_1",
            "user \"Also this.\"",
            "assistant stop \"Steered.\"",
        ]
    );

    *running.lock().unwrap() = None;
    queue.prompt("aborted", "Stall.").unwrap();
    wait_until("the run", || {
        running
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|h| h.is_running())
    });
    let started = Instant::now();
    let last = queue.abort("aborted").unwrap();
    wait_until("the aborted run", || {
        done_of(&mut conn, &prefix, "aborted").as_ref() == Some(&last)
    });
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the stall took {PATIENCE:?}"
    );
    assert_eq!(
        described(&store, "aborted"),
        ["user \"Stall.\"", "assistant aborted \"\""]
    );
}

#[test]
fn three_worker_processes_answer_every_prompt_exactly_once_in_order() {
    const CONVERSATIONS: usize = 100;
    const HTTP: usize = 10;
    const PROMPTS: usize = 3;
    let redis = shared("fleet");
    let prefix = format!("t{}-fleet", std::process::id());
    let answer = "It is sunny.";
    let sse = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        json!({"choices":[{"index":0,"delta":{"content":answer}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})
    );
    let model = http::Server::start(vec![http::Reply::sse(sse); HTTP * PROMPTS]);
    let names: Vec<String> = (0..CONVERSATIONS)
        .map(|i| {
            if i < HTTP {
                format!("http-{i}")
            } else {
                format!("faux-{i}")
            }
        })
        .collect();
    let store = Store::new(&redis);
    let last = queue_prompts(&redis, &store, &names, PROMPTS);
    let workers = three_workers(
        &prefix,
        &[("PAGENT_REDIS_TEST_MODEL_URL", model.url.clone())],
    );
    let mut conn = raw(&shared_url());
    wait_all_done(&mut conn, &prefix, &last);
    drop(workers);
    for name in &names {
        let prompts = prompts_of(name, PROMPTS);
        let expected = if name.starts_with("http-") {
            answered(&prompts, |_| answer.to_string())
        } else {
            answered(&prompts, |p| format!("answer to {p}"))
        };
        assert_eq!(described(&store, name), expected, "{name}");
    }
    // The model server was asked once per prompt of its conversations.
    assert_eq!(model.requests().len(), HTTP * PROMPTS);
}

#[test]
fn a_worker_killed_mid_run_has_its_conversations_finished_by_the_others() {
    const CONVERSATIONS: usize = 30;
    const PROMPTS: usize = 3;
    let redis = shared("kill");
    let prefix = format!("t{}-kill", std::process::id());
    let names: Vec<String> = (0..CONVERSATIONS).map(|i| format!("c{i}")).collect();
    let store = Store::new(&redis);
    let last = queue_prompts(&redis, &store, &names, PROMPTS);
    let mut workers = three_workers(
        &prefix,
        &[
            // Slow enough replies that the kill lands inside a run.
            ("PAGENT_REDIS_TEST_DELAY_MS", "40".into()),
            ("PAGENT_REDIS_TEST_LEASE_MS", "600".into()),
            ("PAGENT_REDIS_TEST_CLAIM_MS", "1500".into()),
        ],
    );
    let mut conn = raw(&shared_url());
    // Kill w0 while it holds a conversation whose prompt is stored and unanswered.
    let mut victim = None;
    wait_until("w0 in the middle of a run", || {
        victim = names.iter().find(|n| {
            let lease = lease_of(&mut conn, &prefix, n);
            // A token starts with its worker's name after the name's length.
            lease.is_some_and(|l| l.starts_with("2:w0:"))
                && described(&store, n)
                    .last()
                    .is_some_and(|m| m.starts_with("user"))
        });
        victim.is_some()
    });
    let killed = workers[0].pid();
    workers[0].kill();
    let victim = victim.unwrap();
    let pending: i64 = redis::cmd("XPENDING")
        .arg(format!("{prefix}:{{queue}}"))
        .arg("workers")
        .query::<redis::Value>(&mut conn)
        .map(|v| match v {
            redis::Value::Array(v) => match v.first() {
                Some(redis::Value::Int(n)) => *n,
                _ => 0,
            },
            _ => 0,
        })
        .unwrap();
    assert!(pending > 0, "w0 (pid {killed}) left nothing pending");
    wait_all_done(&mut conn, &prefix, &last);
    drop(workers);
    for name in &names {
        let prompts = prompts_of(name, PROMPTS);
        assert_eq!(
            described(&store, name),
            answered(&prompts, |p| format!("answer to {p}")),
            "{name} (w0 died in {victim})"
        );
    }
}

#[test]
fn a_redis_restart_mid_run_fails_the_run_with_a_typed_error_and_loses_nothing_acknowledged() {
    let mut server = RedisServer::start(true);
    let redis = Redis::open(&server.url())
        .unwrap()
        .prefix("restart-worker")
        .timeout(Duration::from_secs(1));
    // The agent's state at the end of each run, to compare with a mirror's.
    let ended: Arc<Mutex<Vec<pagent::State>>> = Arc::default();
    let e = ended.clone();
    // The first reply streams slowly, so the restart lands inside it.
    let worker = Worker::new(&redis, "w", |_, messages| {
        let faux = answering(Duration::from_millis(800)).chunk_chars(1);
        Agent::builder().provider(faux).messages(messages).build()
    })
    .unwrap()
    .lease(Duration::from_millis(600))
    .claim_after(Duration::from_millis(1500))
    .on_end(move |_, _, state| e.lock().unwrap().push(state.clone()));
    let queue = Queue::new(&redis);
    let store = Store::new(&redis);
    let id = queue.prompt("c", "Hello").unwrap();
    let stepper = worker.clone();
    let step = std::thread::spawn(move || stepper.step(Duration::from_millis(100)));
    wait_until("the prompt stored", || {
        store.load("c").is_ok_and(|l| l.messages.len() == 1)
    });
    // A mirror follows the run from its start, through the restart, to the `AgentEnd` of
    // the run that resumes it.
    let mut mirror = RemoteMirror::new(&redis, "c");
    let follower = std::thread::spawn(move || mirror.follow_run(PATIENCE));
    server.kill();
    let failed = step.join().unwrap();
    assert!(
        matches!(failed, Err(Error::Connection(_) | Error::Timeout(_))),
        "{failed:?}"
    );
    server.spawn();
    // What Redis acknowledged is there; the run resumes and answers once.
    assert_eq!(described(&store, "c"), ["user \"Hello\""]);
    let _w = InProcess::start(worker);
    let mut conn = raw(&server.url());
    wait_until("the answer", || {
        done_of(&mut conn, "restart-worker", "c").as_ref() == Some(&id)
    });
    assert_eq!(
        described(&store, "c"),
        answered(&["Hello".to_string()], |p| format!("answer to {p}"))
    );
    let mirrored = follower.join().unwrap().unwrap();
    let ended = ended.lock().unwrap();
    assert_eq!(ended.len(), 1, "only the resumed run ended");
    assert_eq!(mirrored.timeline(), ended[0].timeline());
}

#[test]
fn a_worker_that_lost_its_lease_cannot_write_to_the_transcript() {
    let redis = shared("fence");
    let prefix = format!("t{}-fence", std::process::id());
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    let worker = Worker::new(&redis, "w", |_, messages| {
        let faux = answering(Duration::from_millis(500));
        Agent::builder().provider(faux).messages(messages).build()
    })
    .unwrap()
    .lease(Duration::from_secs(30))
    .claim_after(Duration::from_millis(300));
    let id = Queue::new(&redis).prompt("c", "Hello").unwrap();
    let stepper = worker.clone();
    let step = std::thread::spawn(move || stepper.step(Duration::from_millis(100)));
    wait_until("the prompt stored", || described(&store, "c").len() == 1);
    // Another worker took the conversation (this one was paused past its lease, say).
    let mut conn = raw(&shared_url());
    let lease = format!("{prefix}:{{c}}:lease");
    redis::cmd("SET")
        .arg(&lease)
        .arg("other")
        .query::<()>(&mut conn)
        .unwrap();
    assert_eq!(step.join().unwrap(), Err(Error::LeaseLost));
    // The reply of the run that lost its lease was not written, nor any of its events.
    assert_eq!(described(&store, "c"), ["user \"Hello\""]);
    assert_eq!(
        folded(&redis, "c").1,
        0,
        "no AgentEnd of the run that lost its lease"
    );
    // Once the other worker is gone, the entry is claimed again and answered once.
    redis::cmd("DEL")
        .arg(&lease)
        .query::<()>(&mut conn)
        .unwrap();
    let _w = InProcess::start(worker);
    wait_until("the answer", || {
        done_of(&mut conn, &prefix, "c").as_ref() == Some(&id)
    });
    assert_eq!(
        described(&store, "c"),
        answered(&["Hello".to_string()], |p| format!("answer to {p}"))
    );
    // A mirror of the whole stream ends with the stored transcript: one answer.
    let (state, ends) = folded(&redis, "c");
    assert_eq!(ends, 1);
    assert_eq!(
        stored(&store, "c"),
        state
            .messages
            .iter()
            .map(|m| (**m).clone())
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_queue_entry_replayed_after_its_prompt_was_answered_runs_nothing() {
    let redis = shared("replay");
    let prefix = format!("t{}-replay", std::process::id());
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    let built = Arc::new(Mutex::new(0usize));
    let b = built.clone();
    let worker = Worker::new(&redis, "w", move |_, messages| {
        *b.lock().unwrap() += 1;
        let faux = answering(Duration::ZERO);
        Agent::builder().provider(faux).messages(messages).build()
    })
    .unwrap()
    .claim_after(Duration::from_millis(200));
    let id = Queue::new(&redis).prompt("c", "Hello").unwrap();
    assert_eq!(worker.step(Duration::from_secs(1)), Ok(1));
    let once = answered(&["Hello".to_string()], |p| format!("answer to {p}"));
    assert_eq!(described(&store, "c"), once);
    // A worker that died after marking the run done and before acknowledging leaves its
    // queue entry pending: the same entry, claimed by a consumer that never acknowledges.
    let mut conn = raw(&shared_url());
    let queue = format!("{prefix}:{{queue}}");
    redis::cmd("XADD")
        .arg(&queue)
        .arg("*")
        .arg("conversation")
        .arg("c")
        .query::<String>(&mut conn)
        .unwrap();
    redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("workers")
        .arg("dead")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(&queue)
        .arg(">")
        .query::<redis::Value>(&mut conn)
        .unwrap();
    // The live worker claims it after `claim_after` and finds the inbox done up to it.
    wait_until("the replayed entry handled", || {
        worker.step(Duration::from_millis(50)) == Ok(1)
    });
    assert_eq!(described(&store, "c"), once);
    assert_eq!(*built.lock().unwrap(), 1, "no second run");
    assert_eq!(done_of(&mut conn, &prefix, "c"), Some(id));
    let pending: redis::Value = redis::cmd("XPENDING")
        .arg(&queue)
        .arg("workers")
        .query(&mut conn)
        .unwrap();
    assert!(
        matches!(&pending, redis::Value::Array(v) if v.first() == Some(&redis::Value::Int(0))),
        "{pending:?}"
    );
}

#[test]
fn handled_queue_entries_are_trimmed_and_none_pending_or_not_yet_delivered_is_dropped() {
    // More entries than a stream node holds (100 by default), so that whole nodes can go.
    const ENTRIES: usize = 250;
    const DEAD: usize = 3;
    const HANDLED: usize = 200;
    let redis = shared("trim");
    let prefix = format!("t{}-trim", std::process::id());
    let queue_key = format!("{prefix}:{{queue}}");
    let store = Store::new(&redis);
    let names: Vec<String> = (0..ENTRIES).map(|i| format!("c{i}")).collect();
    queue_prompts(&redis, &store, &names, 1);
    let mut conn = raw(&shared_url());
    let ids = |conn: &mut redis::Connection| -> Vec<String> {
        let range: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(&queue_key)
            .arg("-")
            .arg("+")
            .query(conn)
            .unwrap();
        range.ids.into_iter().map(|e| e.id).collect()
    };
    let queued = ids(&mut conn);
    assert_eq!(queued.len(), ENTRIES);
    let factory = |_: &str, messages: Vec<Message>| answering_agent(messages);
    // (It makes the workers' group.)
    let worker = Worker::new(&redis, "w", factory)
        .unwrap()
        .claim_after(PATIENCE);
    // A worker that dies holding the first entries: they stay pending under it.
    redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("workers")
        .arg("dead")
        .arg("COUNT")
        .arg(DEAD)
        .arg("STREAMS")
        .arg(&queue_key)
        .arg(">")
        .query::<redis::Value>(&mut conn)
        .unwrap();
    for _ in 0..HANDLED {
        assert_eq!(worker.step(Duration::from_secs(1)), Ok(1));
    }
    // The dead worker's entries, older than every handled one, and those not handed out yet
    // are all still there.
    let left = ids(&mut conn);
    let unacknowledged: Vec<&String> = queued[..DEAD]
        .iter()
        .chain(&queued[DEAD + HANDLED..])
        .collect();
    for id in &unacknowledged {
        assert!(left.contains(id), "{id} was dropped while unacknowledged");
    }
    assert_eq!(unhandled(&mut conn, &prefix), ENTRIES - HANDLED);
    // Another worker claims the dead one's entries, then handles the rest: every prompt is
    // answered once, and the handled entries went, but for at most the last stream node
    // and those handled since each worker's last trim (at every 16th end of a run).
    let other = Worker::new(&redis, "w2", factory)
        .unwrap()
        .claim_after(Duration::from_millis(1));
    wait_within("every entry handled", Duration::from_secs(60), || {
        let _ = other.step(Duration::from_millis(50));
        unhandled(&mut conn, &prefix) == 0
    });
    for name in &names {
        assert_eq!(
            described(&store, name),
            answered(&prompts_of(name, 1), |p| format!("answer to {p}")),
            "{name}"
        );
    }
    let node: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("stream-node-max-entries")
        .query(&mut conn)
        .unwrap();
    let node: usize = node[1].parse().unwrap();
    let length: usize = redis::cmd("XLEN").arg(&queue_key).query(&mut conn).unwrap();
    assert!(
        length <= node + 2 * 16,
        "{length} entries left, more than a stream node ({node}) and two workers' untrimmed"
    );
}

/// The README's example, on the shared server.
#[test]
fn the_readme_fleet_example_runs() {
    let redis = shared("readme");
    Store::new(&redis).delete("alice").unwrap();
    let worker = Worker::new(&redis, "worker-1", |_conversation, messages| {
        Agent::builder()
            .provider(Faux::default().reply(FauxReply::text("Hi!")))
            .messages(messages)
            .build()
    })
    .unwrap();
    Queue::new(&redis).prompt("alice", "Hello").unwrap();
    assert_eq!(worker.step(Duration::from_secs(1)), Ok(1));
    let state = RemoteMirror::new(&redis, "alice")
        .follow_run(Duration::from_secs(5))
        .unwrap();
    assert_eq!(state.messages.len(), 2);
}

#[test]
fn a_prompt_costs_two_scripts_with_or_without_the_log_half_a_queue_read_and_a_sixteenth_of_a_trim()
{
    // A server of its own: its command counts are this test's alone.
    const PROMPTS: usize = 40;
    let server = RedisServer::start(false);
    let mut conn = raw(&server.url());
    let redis = Redis::open(&server.url()).unwrap().prefix("cost");
    let store = Store::new(&redis);
    let factory = |_: &str, messages: Vec<Message>| answering_agent(messages);
    // Calls of each command since the last `CONFIG RESETSTAT`, by `INFO commandstats`.
    let calls = |conn: &mut redis::Connection, command: &str| -> usize {
        let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    };
    for (round, log) in [None, Some(1_000)].into_iter().enumerate() {
        let names: Vec<String> = (0..PROMPTS).map(|i| format!("r{round}c{i}")).collect();
        queue_prompts(&redis, &store, &names, 1);
        // A long lease: a run's start sent ahead is trusted (not sent again) however slow
        // a loaded machine makes the run before.
        let worker = Worker::new(&redis, &format!("w{round}"), factory)
            .unwrap()
            .lease(Duration::from_secs(60))
            .events(log);
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query::<()>(&mut conn)
            .unwrap();
        let running = worker.clone();
        let run = std::thread::spawn(move || running.run_for(Duration::from_secs(60)));
        wait_within("every prompt handled", Duration::from_secs(30), || {
            unhandled(&mut conn, "cost") == 0
        });
        worker.stop();
        run.join().unwrap().unwrap();
        let scripts = calls(&mut conn, "evalsha");
        let reads = calls(&mut conn, "xreadgroup");
        let trims = calls(&mut conn, "xpending");
        let acks = calls(&mut conn, "xack");
        // A batch of writes sent ahead of the end reads `meta.wrote` with one `HGET`; the
        // start and the end of a run do not.
        let batches = calls(&mut conn, "hget");
        for name in &names {
            assert_eq!(store.load(name).unwrap().messages.len(), 2, "{name}");
        }
        // A run's start and its end, and the end acknowledges the queue entry and takes the
        // run's writes, its events too: a batch goes ahead only for a run that took longer
        // than 5 ms (a loaded machine). The queue is read ahead two entries at a time (and
        // once more, blocking, for the first entry and while idle, and at each of the last
        // few starts, which find none left).
        assert_eq!(
            scripts - batches,
            2 * PROMPTS,
            "log {log:?}: starts and ends"
        );
        assert_eq!(acks, PROMPTS, "log {log:?}");
        assert!(
            batches <= PROMPTS / 4,
            "log {log:?}: {batches} batches ahead"
        );
        if log.is_some() {
            // The events went with the end: each run's whole, on its stream.
            for name in &names {
                let state = RemoteMirror::new(&redis, name)
                    .follow_run(Duration::from_secs(5))
                    .unwrap();
                assert_eq!(state.messages.len(), 2, "{name}");
            }
        }
        assert!(
            reads <= PROMPTS / 2 + 6,
            "log {log:?}: {reads} queue reads for {PROMPTS} prompts"
        );
        // The queue is trimmed at the first end and every 16th after it.
        assert_eq!(trims, PROMPTS.div_ceil(16), "log {log:?}: queue trims");
    }
}
