//! Lossless channels and their consumer: how long an event takes to reach a consumer that
//! spends `c` µs on each (it sleeps, as a consumer writing to a socket or a disk does; 0 is
//! a consumer that only counts), and how much CPU the producing thread spends meanwhile.
//!
//! Two ways to wait for room, in the same run:
//! - `blocking`: what `subscribe_channel` does, a bounded crossbeam channel whose `send`
//!   waits beside the run's cancel token in a `select!` (src/agent/channel.rs);
//! - `polled`: what it did before, an unbounded channel whose bound the producer kept by
//!   looking at its length (16 yields, then sleeps on the token of 20 µs doubling to 2 ms).
//!   The code is the removed `Shared::wait_for_room`, copied here as it was.
//!
//! Both send the same pre-built events from the bench thread (nothing else differs), at
//! capacities 0, 1, 4 and 64. The `agent` group is the real path (fold, publish, dispatch)
//! of one prompt streaming one delta per event into `subscribe_channel`, for scale.
//!
//! `cargo bench --bench channel` (add a filter such as `-- polled/50us` for part of it).
//! Criterion gives the wall time per event; the producer's CPU per event is printed after
//! it, per benchmark (the run's thread, `RUSAGE_THREAD`, summed over every sample).

mod cpu;
use cpu::cpu_ns;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use crossbeam_channel::{Receiver, SendTimeoutError, Sender, select};
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, AgentEvent, CancelToken};

const CAPACITIES: [usize; 4] = [0, 1, 4, 64];
const CONSUMER_US: [u64; 4] = [0, 50, 200, 1500];

/// Producer CPU ns and events, per benchmark id.
static CPU: Mutex<BTreeMap<String, (u64, u64)>> = Mutex::new(BTreeMap::new());

fn record(id: &str, cpu: u64, events: u64) {
    let mut map = CPU.lock().unwrap();
    let entry = map.entry(id.to_string()).or_default();
    entry.0 += cpu;
    entry.1 += events;
}

/// A consumer on its own thread that takes `n` events, spending `per_event` on each.
fn consumer(rx: Receiver<AgentEvent>, n: u64, per_event: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for _ in 0..n {
            let _ = rx.recv().unwrap();
            if !per_event.is_zero() {
                std::thread::sleep(per_event);
            }
        }
    })
}

/// The removed wait: until fewer than `limit` events wait in `tx` (or the token is
/// cancelled).
fn polled_wait(tx: &Sender<AgentEvent>, limit: usize, token: &CancelToken) {
    const FIRST_PAUSE: Duration = Duration::from_micros(20);
    const LAST_PAUSE: Duration = Duration::from_millis(2);
    const YIELDS: u32 = 16;
    if tx.len() < limit {
        return;
    }
    let mut pause = FIRST_PAUSE;
    let mut yields = 0;
    while tx.len() >= limit {
        if token.is_cancelled() {
            return;
        }
        if yields < YIELDS {
            yields += 1;
            std::thread::yield_now();
            continue;
        }
        token.wait_timeout(pause);
        pause = (pause * 2).min(LAST_PAUSE);
    }
}

/// The removed send of a lossless channel.
fn polled_send(tx: &Sender<AgentEvent>, capacity: usize, event: &AgentEvent, token: &CancelToken) {
    polled_wait(tx, capacity.max(1), token);
    tx.send(event.clone()).unwrap();
    if capacity == 0 {
        polled_wait(tx, 1, token);
    }
}

/// The send of src/agent/channel.rs while no abort came: crossbeam's `send` without its
/// parking (a few spins and yields), then its `send` beside the token.
fn blocking_send(tx: &Sender<AgentEvent>, event: &AgentEvent, token: &CancelToken) {
    let full = match tx.send_timeout(event.clone(), Duration::ZERO) {
        Ok(()) => return,
        Err(SendTimeoutError::Timeout(full)) => full,
        Err(SendTimeoutError::Disconnected(_)) => panic!("the consumer left"),
    };
    let timer = token.timer();
    select! {
        send(tx, full) -> sent => sent.unwrap(),
        recv(token.receiver()) -> _ => unreachable!("never cancelled here"),
        recv(timer) -> _ => unreachable!("no deadline"),
    }
}

/// `iters` events through one way of waiting, to a consumer spending `per_event` on each:
/// the wall time until the consumer took the last one.
fn through(id: &str, polled: bool, capacity: usize, per_event: Duration, iters: u64) -> Duration {
    let (tx, rx) = if polled {
        crossbeam_channel::unbounded()
    } else {
        crossbeam_channel::bounded(capacity)
    };
    let token = CancelToken::new();
    let event = AgentEvent::AgentStart;
    let start = Instant::now();
    let taker = consumer(rx, iters, per_event);
    let cpu = cpu_ns(libc::RUSAGE_THREAD);
    for _ in 0..iters {
        if polled {
            polled_send(&tx, capacity, &event, &token);
        } else {
            blocking_send(&tx, &event, &token);
        }
    }
    let cpu = cpu_ns(libc::RUSAGE_THREAD) - cpu;
    taker.join().unwrap();
    let wall = start.elapsed();
    record(id, cpu, iters);
    wall
}

/// One prompt streaming `iters` deltas into `subscribe_channel(capacity)`, read by a
/// consumer spending `per_event` on each event: the wall time until it took the `AgentEnd`.
fn agent_run(id: &str, capacity: usize, per_event: Duration, iters: u64) -> Duration {
    let agent = Agent::builder()
        .provider(
            Faux::default()
                .chunk_chars(1)
                .reply(FauxReply::text("x".repeat(iters as usize))),
        )
        .model("m")
        .build()
        .unwrap();
    let rx = agent.subscribe_channel(capacity);
    let start = Instant::now();
    let taker = std::thread::spawn(move || {
        let mut n = 0u64;
        // Bounded: every run ends with an AgentEnd.
        while let Ok(e) = rx.recv() {
            n += 1;
            if !per_event.is_zero() {
                std::thread::sleep(per_event);
            }
            if matches!(e, AgentEvent::AgentEnd { .. }) {
                break;
            }
        }
        n
    });
    let cpu = cpu_ns(libc::RUSAGE_THREAD);
    agent.prompt("hi").unwrap();
    let cpu = cpu_ns(libc::RUSAGE_THREAD) - cpu;
    let events = taker.join().unwrap();
    let wall = start.elapsed();
    // Criterion divides by `iters` (the deltas): the run's few other events ride along.
    record(id, cpu, events);
    wall
}

fn channels(c: &mut Criterion) {
    for us in CONSUMER_US {
        let per_event = Duration::from_micros(us);
        let mut g = c.benchmark_group(format!("channel/{us}us"));
        for capacity in CAPACITIES {
            for (name, polled) in [("blocking", false), ("polled", true)] {
                let id = format!("{name}/{us}us/{capacity}");
                g.bench_function(BenchmarkId::new(name, capacity), |b| {
                    b.iter_custom(|iters| through(&id, polled, capacity, per_event, iters))
                });
            }
        }
        g.finish();
    }
}

fn agent(c: &mut Criterion) {
    for us in CONSUMER_US {
        let per_event = Duration::from_micros(us);
        let mut g = c.benchmark_group(format!("agent/{us}us"));
        for capacity in CAPACITIES {
            let id = format!("agent/{us}us/{capacity}");
            g.bench_function(BenchmarkId::new("subscribe_channel", capacity), |b| {
                b.iter_custom(|iters| agent_run(&id, capacity, per_event, iters))
            });
        }
        g.finish();
    }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    channels(&mut c);
    agent(&mut c);
    c.final_summary();
    let map = CPU.lock().unwrap();
    if map.is_empty() {
        return;
    }
    println!("\nproducer CPU per event (all samples, warm-up included)");
    for (id, (cpu, events)) in map.iter() {
        println!(
            "{id:<24} {:>9.3} µs",
            *cpu as f64 / 1e3 / (*events).max(1) as f64
        );
    }
}
