//! Mirrors under faults: one behind a small cap, one resynced in the middle of a reply, one
//! of a Redis that lost its data, and `after("$")` resolved once.

use super::*;

#[test]
fn a_slow_mirror_behind_a_small_cap_gets_a_typed_error_and_resyncs_from_the_store() {
    let redis = shared("behind");
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    // A long streamed reply: hundreds of entries (a batch of deltas each 5 ms) into a
    // stream capped at 10.
    let worker = Worker::new(&redis, "w", |_, messages| {
        let faux = answering(Duration::ZERO)
            .chunk_chars(1)
            .tokens_per_second(1000.0);
        Agent::builder().provider(faux).messages(messages).build()
    })
    .unwrap()
    .events(Some(10));
    let queue = Queue::new(&redis);
    let mut mirror = RemoteMirror::new(&redis, "c");
    let long = "y".repeat(1000);
    queue.prompt("c", &long).unwrap();
    assert_eq!(worker.step(Duration::from_secs(1)), Ok(1));
    // The mirror comes late: the stream's start is gone.
    match mirror.next_event(Duration::from_millis(10)) {
        Err(Error::Behind {
            missed: Some(n), ..
        }) => assert!(n > 50, "{n}"),
        other => panic!("{other:?}"),
    }
    // Nothing was folded, and it stays so until resynced.
    assert!(mirror.state().messages.is_empty());
    assert!(matches!(
        mirror.next_event(Duration::from_millis(10)),
        Err(Error::Behind { .. })
    ));
    let state = mirror.resync().unwrap();
    let messages = |s: &pagent::State| s.messages.iter().map(|m| (**m).clone()).collect::<Vec<_>>();
    assert_eq!(messages(&state), stored(&store, "c"));
    // From there it follows the next run to the store's state (its events fit the cap
    // of this handle of the worker: a setter on a clone).
    queue.prompt("c", "Again.").unwrap();
    let roomy = worker.clone().events(Some(1000));
    assert_eq!(roomy.step(Duration::from_secs(1)), Ok(1));
    let state = mirror.follow_run(Duration::from_secs(10)).unwrap();
    assert_eq!(messages(&state), stored(&store, "c"));
    assert_eq!(state.messages.len(), 4);
}

#[test]
fn a_mirror_resynced_in_the_middle_of_a_reply_skips_its_deltas_without_reporting_a_quiet_stream() {
    let redis = shared("resync-mid-reply");
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    // A reply of 150 one-character chunks at 100 a second: 1.5 s of deltas.
    let worker = Worker::new(&redis, "w", |_, messages| {
        let faux = answering(Duration::ZERO)
            .chunk_chars(1)
            .tokens_per_second(100.0);
        Agent::builder().provider(faux).messages(messages).build()
    })
    .unwrap();
    let w = worker.clone();
    let queue = Queue::new(&redis);
    queue.prompt("c", &"z".repeat(140)).unwrap();
    let running = std::thread::spawn(move || w.step(Duration::from_secs(1)));
    let mut peek = RemoteMirror::new(&redis, "c");
    wait_within("the reply streaming", Duration::from_secs(10), || {
        matches!(
            peek.next_event(Duration::from_millis(50)),
            Ok(Some(pagent::AgentEvent::MessageUpdate { .. }))
        )
    });
    let mut mirror = RemoteMirror::new(&redis, "c");
    let state = mirror.resync().unwrap();
    assert_eq!(
        state.messages.len(),
        1,
        "the prompt is stored, the reply is not yet"
    );
    // Deltas keep coming: each call folds the next event it can, never `None` within the
    // wait while the stream goes on. The first one after the skipped deltas is the reply's
    // end.
    let next = mirror.next_event(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(&next, Some(pagent::AgentEvent::MessageEnd { message }) if message.as_assistant().is_some()),
        "{next:?}"
    );
    let state = mirror.follow_run(Duration::from_secs(10)).unwrap();
    assert_eq!(running.join().unwrap(), Ok(1));
    assert_eq!(
        state
            .messages
            .iter()
            .map(|m| (**m).clone())
            .collect::<Vec<_>>(),
        stored(&store, "c")
    );
    assert!(!state.is_streaming);
}

#[test]
fn a_mirror_of_a_redis_that_lost_its_data_gets_a_typed_error() {
    let mut server = RedisServer::start(false);
    let redis = Redis::open(&server.url())
        .unwrap()
        .prefix("lost")
        .timeout(Duration::from_secs(1));
    let run = |text: &str| {
        let agent = Agent::builder()
            .provider(Faux::new([FauxReply::text(text)]))
            .build()
            .unwrap();
        let log = EventLog::new(&redis, "c");
        let _sub = agent.subscribe(log.listener());
        agent.prompt("Hi").unwrap();
        assert_eq!(log.error(), None);
    };
    run("First.");
    let mut mirror = RemoteMirror::new(&redis, "c");
    assert!(mirror.follow_run(Duration::from_secs(5)).is_ok());
    // Redis restarts without persistence: the stream it had is gone, a new one starts.
    server.restart();
    run("Second.");
    match mirror.next_event(Duration::from_millis(10)) {
        Err(Error::Behind {
            missed: None,
            message,
        }) => {
            assert!(message.contains("lost"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // The store has nothing (only an event log was written): the state says so.
    let state = mirror.resync().unwrap();
    assert!(state.messages.is_empty());
    assert_eq!(mirror.next_event(Duration::from_millis(10)), Ok(None));
}

#[test]
fn after_dollar_resolves_once_so_events_appended_between_reads_are_not_missed() {
    let redis = shared("dollar");
    Store::new(&redis).delete("c").unwrap();
    let log = EventLog::new(&redis, "c");
    log.write_event(&pagent::AgentEvent::AgentStart).unwrap();
    let mut mirror = RemoteMirror::new(&redis, "c").after("$");
    assert_eq!(mirror.next_event(Duration::from_millis(10)), Ok(None));
    // Appended while the mirror is not reading.
    log.write_event(&pagent::AgentEvent::TurnStart { turn: 1 })
        .unwrap();
    log.write_event(&pagent::AgentEvent::TurnStart { turn: 2 })
        .unwrap();
    assert_eq!(
        mirror.next_event(Duration::from_millis(10)),
        Ok(Some(pagent::AgentEvent::TurnStart { turn: 1 }))
    );
    assert_eq!(
        mirror.next_event(Duration::from_millis(10)),
        Ok(Some(pagent::AgentEvent::TurnStart { turn: 2 }))
    );
}

/// Every event a fresh mirror of the conversation folds, in order, and its state then.
fn all_events(redis: &Redis, c: &str) -> (Vec<pagent::AgentEvent>, Arc<pagent::State>) {
    let mut mirror = RemoteMirror::new(redis, c);
    let mut events = Vec::new();
    while let Some(event) = mirror.next_event(Duration::from_millis(1)).unwrap() {
        events.push(event);
    }
    (events, mirror.state().clone())
}

#[test]
fn a_worker_writes_a_batch_of_events_as_one_entry_and_a_mirror_stopped_inside_it_goes_on_from_the_next_event()
 {
    let redis = shared("batched");
    Store::new(&redis).delete("c").unwrap();
    let worker = Worker::new(&redis, "w", |_, messages| {
        let faux = answering(Duration::ZERO).chunk_chars(2);
        Agent::builder().provider(faux).messages(messages).build()
    })
    .unwrap()
    .events(Some(1000));
    Queue::new(&redis).prompt("c", "Hello there").unwrap();
    assert_eq!(worker.step(Duration::from_secs(1)), Ok(1));

    let (events, end) = all_events(&redis, "c");
    let names: Vec<&str> = events.iter().map(pagent::AgentEvent::name).collect();
    assert_eq!(names.first(), Some(&"AgentStart"));
    assert_eq!(names.last(), Some(&"AgentEnd"));
    assert_eq!(end.messages.len(), 2);
    // The stream holds the run in fewer entries than events, each entry's field `lines`
    // one or more wire lines, in order.
    let mut conn = raw(&shared_url());
    let key = format!("t{}-batched:{{c}}:events", std::process::id());
    let range: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    let lines: Vec<Vec<String>> = range
        .ids
        .iter()
        .map(|e| {
            let text: String = e.get("lines").unwrap();
            assert!(text.ends_with('\n'), "{text:?}");
            text.lines().map(str::to_owned).collect()
        })
        .collect();
    assert!(lines.len() < events.len(), "{} entries", lines.len());
    assert!(lines.iter().any(|l| l.len() > 1), "{lines:?}");
    let methods: Vec<String> = lines
        .iter()
        .flatten()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["method"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(methods, names);

    // A mirror stopped after any event, saved and resumed with `after(last_id)`, folds the
    // rest exactly once and ends equal.
    let mut inside = 0;
    for k in 1..events.len() {
        let mut first = RemoteMirror::new(&redis, "c");
        for _ in 0..k {
            first.next_event(Duration::from_millis(1)).unwrap().unwrap();
        }
        let (state, at) = (first.state().clone(), first.last_id().to_owned());
        inside += usize::from(at.contains('#'));
        let mut then = RemoteMirror::new(&redis, "c")
            .from_state((*state).clone())
            .after(at.clone());
        let mut rest = Vec::new();
        while let Some(event) = then.next_event(Duration::from_millis(1)).unwrap() {
            rest.push(event);
        }
        assert_eq!(rest, events[k..], "resumed at {at} after {k} events");
        assert_eq!(then.state(), &end, "resumed at {at}");
        assert!(!then.last_id().contains('#'));
    }
    assert!(inside > 0, "no stop inside an entry");

    // A mirror resumed inside an entry that was trimmed since misses the rest of it: a
    // typed error, not a state with a hole.
    let mut first = RemoteMirror::new(&redis, "c");
    while !first.last_id().contains('#') {
        first.next_event(Duration::from_millis(1)).unwrap().unwrap();
    }
    let at = first.last_id().to_owned();
    let entry = at.split('#').next().unwrap();
    let _: usize = redis::cmd("XDEL")
        .arg(&key)
        .arg(entry)
        .query(&mut conn)
        .unwrap();
    let mut then = RemoteMirror::new(&redis, "c")
        .from_state((**first.state()).clone())
        .after(at.clone());
    assert!(
        matches!(
            then.next_event(Duration::from_millis(1)),
            Err(Error::Behind { .. })
        ),
        "resumed at {at}"
    );
}

#[test]
fn a_stream_of_one_line_per_entry_as_earlier_versions_wrote_it_is_read_as_before() {
    let redis = shared("one-line");
    Store::new(&redis).delete("c").unwrap();
    let mut conn = raw(&shared_url());
    let key = format!("t{}-one-line:{{c}}:events", std::process::id());
    let written = [
        pagent::AgentEvent::AgentStart,
        pagent::AgentEvent::TurnStart { turn: 1 },
    ];
    for event in &written {
        let _: String = redis::cmd("XADD")
            .arg(&key)
            .arg("*")
            .arg("line")
            .arg(pagent::wire::encode_event_line(event))
            .query(&mut conn)
            .unwrap();
    }
    // And one in today's form, from an event log.
    EventLog::new(&redis, "c")
        .write_event(&pagent::AgentEvent::TurnStart { turn: 2 })
        .unwrap();
    let (events, _) = all_events(&redis, "c");
    assert_eq!(
        events,
        [
            pagent::AgentEvent::AgentStart,
            pagent::AgentEvent::TurnStart { turn: 1 },
            pagent::AgentEvent::TurnStart { turn: 2 },
        ]
    );
}
