//! Agents on a fleet of workers over Redis streams (`pagent::redis`).
//!
//! ```sh
//! cargo run --features redis --example fleet                      # all in one process
//! cargo run --features redis --example fleet -- worker w1 60      # a worker, for 60 s
//! cargo run --features redis --example fleet -- submit alice "Hello"
//! cargo run --features redis --example fleet -- watch alice       # follow alice's runs live
//! cargo run --release --features redis --example fleet -- bench 4 2000   # prompts/s, 4 workers
//! cargo run --release --features redis --example fleet -- bench 1 2000 nolog   # event log off
//! cargo run --release --features redis --example fleet -- bench 1 2000 on_end  # counted by on_end
//! cargo run --release --features redis --example fleet -- latency 2000   # mirror latency
//! cargo run --release --features redis --example fleet -- memory 10      # bytes per conversation
//! ```
//!
//! The server is `REDIS_URL` (default `redis://127.0.0.1:6379/`). The agents answer with
//! the scripted provider (`Faux`), so the example runs offline: "You said: <prompt>".
//! Start several `worker`s in several terminals, `submit` prompts from another, and `watch`
//! a conversation from yet another: any worker runs any conversation, one run at a time,
//! and a worker killed mid-run has its conversation finished by another after the claim
//! timeout (30 s by default).

use std::error::Error;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pagent::llm::{Faux, FauxReply};
use pagent::redis::{EventLog, Queue, Redis, RemoteMirror, Store, Worker};
use pagent::{Agent, AgentEvent, Message, StreamEvent};

fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let redis = Redis::open(&url)?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    let number = |i: usize, default: u64| arg(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    match arg(0) {
        Some("worker") => {
            let name = arg(1).unwrap_or("worker-1");
            let worker = Worker::new(&redis, name, echo_agent)?;
            let handled = worker.run_for(Duration::from_secs(number(2, 60)))?;
            println!("{name}: handled {handled} queue entries");
        }
        Some("submit") => {
            let id =
                Queue::new(&redis).prompt(arg(1).unwrap_or("alice"), arg(2).unwrap_or("Hello"))?;
            println!("queued as {id}");
        }
        Some("watch") => watch(&redis, arg(1).unwrap_or("alice"))?,
        Some("bench") => bench(
            &url,
            &redis,
            number(1, 1) as usize,
            number(2, 1000) as usize,
            !args.iter().skip(3).any(|a| a == "nolog"),
            args.iter().skip(3).any(|a| a == "on_end"),
        )?,
        Some("latency") => latency(&redis, number(1, 2000) as usize)?,
        Some("memory") => memory(&url, &redis, number(1, 10) as usize)?,
        _ => demo(&redis)?,
    }
    Ok(())
}

/// The agent of every conversation: built from its stored transcript, answering on Faux.
fn echo_agent(_conversation: &str, messages: Vec<Message>) -> Result<Agent, pagent::Error> {
    let faux = Faux::default().otherwise(|request| {
        let said = request
            .messages
            .last()
            .map(|m| m.text())
            .unwrap_or_default();
        FauxReply::text(format!("You said: {said}"))
    });
    Agent::builder().provider(faux).messages(messages).build()
}

/// A worker thread, a watcher thread and a client in one process.
fn demo(redis: &Redis) -> Result<(), Box<dyn Error>> {
    let redis = redis
        .clone()
        .prefix(format!("fleet-demo-{}", std::process::id()));
    let store = Store::new(&redis);
    let worker = Worker::new(&redis, "demo-worker", echo_agent)?;
    let w = worker.clone();
    let running = thread::spawn(move || w.run_for(Duration::from_secs(30)));
    let mut mirror = RemoteMirror::new(&redis, "alice");
    let queue = Queue::new(&redis);
    for text in ["Hello", "How are you?"] {
        queue.prompt("alice", text)?;
        let state = mirror.follow_run(Duration::from_secs(20))?;
        let answer = state.messages.last().map(|m| m.text()).unwrap_or_default();
        println!("{text} -> {answer}");
    }
    worker.stop();
    running.join().expect("the worker thread does not panic")?;
    println!("stored: {} messages", store.load("alice")?.messages.len());
    store.delete("alice")?;
    Ok(())
}

/// Prints each run of `conversation` as it streams, from wherever it runs.
fn watch(redis: &Redis, conversation: &str) -> Result<(), Box<dyn Error>> {
    let mut mirror = RemoteMirror::new(redis, conversation).after("$");
    let deadline = Instant::now() + Duration::from_secs(3600);
    while Instant::now() < deadline {
        match mirror.next_event(Duration::from_secs(1)) {
            Ok(Some(AgentEvent::MessageUpdate { delta, .. })) => {
                if let StreamEvent::TextDelta { text } = delta {
                    print!("{text}");
                    std::io::stdout().flush()?;
                }
            }
            Ok(Some(AgentEvent::MessageStart { message })) => {
                if let Message::User(_) = &*message {
                    println!("\n> {}", message.text());
                }
            }
            Ok(Some(AgentEvent::AgentEnd { stop_reason, .. })) => println!("\n[{stop_reason}]"),
            Ok(_) => {}
            // Redis restarting: the next read connects again and resumes.
            Err(pagent::Error::Connection(e)) => {
                eprintln!("({e}; reconnecting)");
                thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Prompts per second through the queue: `prompts` prompts, each its own conversation (so
/// each queue entry runs one prompt), run by `workers` worker threads (each its own
/// consumer), on Faux, with the event log on (`events`) or off. The end is seen by polling
/// the queue stream's length (a worker deletes an entry once its conversation is done), or,
/// with `on_end`, counted by a [`Worker::on_end`] callback (which costs a round trip per
/// prompt: it is called once the run's writes landed). Prints the commands Redis ran per
/// prompt and the Redis CPU time of the worker's commands per prompt (`INFO commandstats`).
fn bench(
    url: &str,
    redis: &Redis,
    workers: usize,
    prompts: usize,
    events: bool,
    on_end: bool,
) -> Result<(), Box<dyn Error>> {
    let redis = redis
        .clone()
        .prefix(format!("fleet-bench-{}", std::process::id()));
    let queue = Queue::new(&redis);
    let store = Store::new(&redis);
    for i in 0..prompts {
        queue.prompt(&format!("c{i}"), &format!("prompt {i}"))?;
    }
    let ended = Arc::new(AtomicUsize::new(0));
    let fleet: Vec<Worker> = (0..workers)
        .map(|i| {
            let ended = ended.clone();
            let worker =
                Worker::new(&redis, &format!("w{i}"), echo_agent)?.events(events.then_some(10_000));
            Ok(if on_end {
                worker.on_end(move |_, _, _| {
                    ended.fetch_add(1, Ordering::Relaxed);
                })
            } else {
                worker
            })
        })
        .collect::<Result<_, pagent::Error>>()?;
    let mut conn = redis::Client::open(url)?.get_connection()?;
    // (commands processed, µs of the worker's top-level commands, Redis's CPU seconds), by
    // `INFO`.
    let stats = |conn: &mut redis::Connection| -> Result<(u64, u64, f64), Box<dyn Error>> {
        let info: String = redis::cmd("INFO").arg("all").query(conn)?;
        let field = |line: &str, name: &str| -> u64 {
            line.split(&[':', ','])
                .find_map(|f| f.strip_prefix(name))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        let mut commands = 0;
        let mut usec = 0;
        let mut cpu = 0.0;
        for line in info.lines() {
            for name in ["used_cpu_sys:", "used_cpu_user:"] {
                if let Some(s) = line.strip_prefix(name) {
                    cpu += s.trim().parse::<f64>().unwrap_or(0.0);
                }
            }
            if let Some(n) = line.strip_prefix("total_commands_processed:") {
                commands = n.trim().parse().unwrap_or(0);
            }
            // The worker's own commands; the scripts' inner commands are in `eval`'s time.
            for name in [
                "eval",
                "evalsha",
                "xreadgroup",
                "xautoclaim",
                "ping",
                "client",
            ] {
                if line.starts_with(&format!("cmdstat_{name}:")) {
                    usec += field(line, "usec=");
                }
            }
        }
        Ok((commands, usec, cpu))
    };
    let queue_key = format!("fleet-bench-{}:{{queue}}", std::process::id());
    let polls = std::cell::Cell::new(0u64);
    let done = |conn: &mut redis::Connection| -> Result<bool, Box<dyn Error>> {
        if on_end {
            return Ok(ended.load(Ordering::Relaxed) >= prompts);
        }
        polls.set(polls.get() + 1);
        handled(conn, &queue_key)
    };
    let before = stats(&mut conn)?;
    let cpu_before = process_cpu();
    let started = Instant::now();
    let threads: Vec<_> = fleet
        .iter()
        .cloned()
        .map(|w| thread::spawn(move || w.run_for(Duration::from_secs(600))))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    while !done(&mut conn)? && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
    let elapsed = started.elapsed();
    let cpu = process_cpu().zip(cpu_before).map(|(a, b)| a - b);
    let after = stats(&mut conn)?;
    fleet.iter().for_each(Worker::stop);
    for t in threads {
        t.join().expect("a worker thread does not panic")?;
    }
    // Every prompt answered once: two messages each.
    let mut stored = 0;
    for c in 0..prompts {
        stored += store.load(&format!("c{c}"))?.messages.len();
        store.delete(&format!("c{c}"))?;
    }
    assert_eq!(stored, prompts * 2);
    println!(
        "{workers} worker(s), event log {}: {prompts} prompts in {:.2} s = {:.0} prompts/s, \
         {:.1} commands per prompt, {:.1} µs of Redis per prompt; CPU per prompt: \
         {} µs of this process, {:.0} µs of Redis",
        if events { "on" } else { "off" },
        elapsed.as_secs_f64(),
        prompts as f64 / elapsed.as_secs_f64(),
        // Less this loop's own: the polls (two commands each) and the `INFO`.
        (after.0 - before.0 - 2 * polls.get() - 1) as f64 / prompts as f64,
        (after.1 - before.1) as f64 / prompts as f64,
        cpu.map_or("?".into(), |c| format!("{:.0}", c * 1e6 / prompts as f64)),
        (after.2 - before.2) * 1e6 / prompts as f64,
    );
    Ok(())
}

/// Whether every entry of the queue stream `queue` was handled: none pending, and the
/// workers' group was handed the last one. (Handled entries are trimmed from the stream in
/// whole nodes, so its length is not what is left to do.)
fn handled(conn: &mut redis::Connection, queue: &str) -> Result<bool, Box<dyn Error>> {
    let (groups, last): (
        Vec<std::collections::HashMap<String, redis::Value>>,
        redis::streams::StreamRangeReply,
    ) = redis::pipe()
        .cmd("XINFO")
        .arg("GROUPS")
        .arg(queue)
        .cmd("XREVRANGE")
        .arg(queue)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query(conn)?;
    let Some(group) = groups.first() else {
        return Ok(false);
    };
    let pending: u64 = redis::from_redis_value_ref(&group["pending"])?;
    let delivered: String = redis::from_redis_value_ref(&group["last-delivered-id"])?;
    Ok(pending == 0 && last.ids.first().is_none_or(|e| e.id == delivered))
}

/// The CPU time this process used so far, in seconds (Linux: `/proc/self/stat`, in ticks of
/// 10 ms), or `None` where that is not there.
fn process_cpu() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command's `(name)`: utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// The added latency per event to a remote mirror: from the event's emission on the run
/// thread (before its `XADD`) to the mirror on another thread having folded it in.
fn latency(redis: &Redis, chunks: usize) -> Result<(), Box<dyn Error>> {
    let redis = redis
        .clone()
        .prefix(format!("fleet-latency-{}", std::process::id()));
    Store::new(&redis).delete("c")?;
    let text = "x".repeat(chunks);
    // 1,000 chunks a second: a fast model, and a mirror that is never behind on its own.
    let faux = Faux::new([FauxReply::text(text)])
        .chunk_chars(1)
        .tokens_per_second(1000.0);
    let agent = Agent::builder().provider(faux).build()?;
    let emitted = Arc::new(Mutex::new(Vec::new()));
    let e = emitted.clone();
    let _t = agent.subscribe(move |_| e.lock().unwrap().push(Instant::now()));
    let log = EventLog::new(&redis, "c");
    let _l = agent.subscribe(log.listener());
    let mut mirror = RemoteMirror::new(&redis, "c");
    let follower = thread::spawn(move || {
        let mut folded = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            match mirror.next_event(Duration::from_millis(200)) {
                Ok(Some(AgentEvent::AgentEnd { .. })) => {
                    folded.push(Instant::now());
                    break;
                }
                Ok(Some(_)) => folded.push(Instant::now()),
                Ok(None) => {}
                Err(e) => panic!("{e}"),
            }
        }
        folded
    });
    agent.prompt("Go.")?;
    let folded = follower.join().expect("the follower does not panic");
    let emitted = emitted.lock().unwrap();
    assert_eq!(folded.len(), emitted.len(), "the mirror saw every event");
    let mut micros: Vec<u128> = folded
        .iter()
        .zip(emitted.iter())
        .map(|(f, e)| f.duration_since(*e).as_micros())
        .collect();
    micros.sort_unstable();
    println!(
        "{} events: median {} µs, p90 {} µs, p99 {} µs from emission to the remote mirror",
        micros.len(),
        micros[micros.len() / 2],
        micros[micros.len() * 9 / 10],
        micros[micros.len() * 99 / 100]
    );
    Store::new(&redis).delete("c")?;
    Ok(())
}

/// Memory per stored conversation (Redis `MEMORY USAGE`) after `turns` prompts through a
/// worker, with its inbox, meta and event stream.
fn memory(url: &str, redis: &Redis, turns: usize) -> Result<(), Box<dyn Error>> {
    let prefix = format!("fleet-memory-{}", std::process::id());
    let redis = redis.clone().prefix(&prefix);
    let queue = Queue::new(&redis);
    for i in 0..turns {
        queue.prompt("c", &format!("Tell me about item {i}."))?;
    }
    let worker = Worker::new(&redis, "w", echo_agent)?;
    let store = Store::new(&redis);
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.load("c")?.messages.len() < turns * 2 && Instant::now() < deadline {
        worker.step(Duration::from_millis(100))?;
    }
    let mut conn = redis::Client::open(url)?.get_connection()?;
    let mut total = 0;
    for what in ["messages", "inbox", "meta", "events"] {
        let key = format!("{prefix}:{{c}}:{what}");
        let bytes: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .arg("SAMPLES")
            .arg(0)
            .query(&mut conn)?;
        let bytes = bytes.unwrap_or(0);
        total += bytes;
        println!("{what:>9}: {bytes} bytes");
    }
    println!("{turns} turns: {total} bytes per conversation");
    store.delete("c")?;
    Ok(())
}
