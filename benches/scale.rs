//! State publication at scale: does the cost of an event depend on how many threads exist, or
//! have ever read a snapshot? Prints three figures (not a criterion bench: each is one
//! measurement of CPU time, taken with `getrusage`, repeated and reported as the median).
//!
//! `cargo bench --bench scale` (or `-- threads`, `-- agents` for one part). Each part runs in
//! a process of its own, so that the threads one part made cannot weigh on the other.
//!
//! - `threads`: one agent's run of 100,000 text deltas (the scripted provider, on this
//!   thread), alone, then while 1,000 idle threads that each took one `snapshot()` of another,
//!   idle agent are alive, then after they exited. The ratio to the run alone should stay
//!   near 1 (it was about 11 when the state lived in an `ArcSwap`).
//! - `agents`: N agents at once, one thread each, each running one prompt against a loopback
//!   HTTP server (OpenAI-style stream of 200 deltas, written at once), for N = 10, 100, 1,000:
//!   client CPU per agent run (the process's CPU minus the server threads' own), and the
//!   resident memory each agent adds (RSS growth over N, the agents alive after their run).
//! - the per-delta cost of fold + store + dispatch is in `cargo bench --bench fold`.

mod cpu;
use cpu::cpu_ns;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use pagent::llm::{Faux, FauxReply, OpenAiCompat};
use pagent::{Agent, AgentEvent};

/// CPU time the server's reply threads spent, in nanoseconds.
static SERVER_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// Resident memory of the process, in bytes.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

const RUN_DELTAS: usize = 100_000;

/// CPU of one 100,000-delta run on this thread, in milliseconds (median of `reps`).
fn delta_run_ms(reps: usize) -> f64 {
    let text = "x".repeat(RUN_DELTAS);
    let samples = (0..reps)
        .map(|_| {
            let agent = Agent::builder()
                .provider(Faux::default().chunk_chars(1).reply(FauxReply::text(&text)))
                .model("m")
                .build()
                .unwrap();
            let _sub = agent.subscribe(|e: &AgentEvent| {
                std::hint::black_box(e);
            });
            let start = cpu_ns(libc::RUSAGE_THREAD);
            let r = agent.prompt("go").unwrap();
            let spent = cpu_ns(libc::RUSAGE_THREAD) - start;
            assert_eq!(r.text().len(), RUN_DELTAS);
            spent as f64 / 1e6
        })
        .collect();
    median(samples)
}

fn threads() {
    let reps = 5;
    let alone = delta_run_ms(reps);
    let idle = Agent::builder()
        .provider(Faux::default())
        .build()
        .unwrap()
        .handle();
    let release = Arc::new(Barrier::new(1_001));
    let readers: Vec<_> = (0..1_000)
        .map(|_| {
            let (idle, release) = (idle.clone(), release.clone());
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    std::hint::black_box(idle.snapshot());
                    release.wait();
                })
                .unwrap()
        })
        .collect();
    // Every reader took its snapshot and waits, idle.
    std::thread::sleep(Duration::from_millis(200));
    let with = delta_run_ms(reps);
    release.wait();
    for r in readers {
        r.join().unwrap();
    }
    let after = delta_run_ms(reps);
    println!(
        "threads: CPU of a {RUN_DELTAS}-delta run: alone {alone:.1} ms; with 1,000 idle \
         threads that read a snapshot {with:.1} ms (ratio {:.2}); after they exited \
         {after:.1} ms (ratio {:.2})",
        with / alone,
        after / alone
    );
}

const REPLY_DELTAS: usize = 200;

fn reply_bytes() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    );
    for i in 0..REPLY_DELTAS {
        let chunk = format!(
            r#"data: {{"choices":[{{"index":0,"delta":{{"content":" tok{}"}},"finish_reason":null}}],"object":"chat.completion.chunk"}}"#,
            i % 100
        );
        out.extend_from_slice(chunk.as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(
        br#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"object":"chat.completion.chunk"}"#,
    );
    out.extend_from_slice(b"\n\ndata: [DONE]\n\n");
    out
}

/// Serves the reply to every request on its own thread, until the process ends.
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let reply = Arc::new(reply_bytes());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let reply = reply.clone();
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let start = cpu_ns(libc::RUSAGE_THREAD);
                    answer(stream, &reply);
                    SERVER_CPU_NS.fetch_add(cpu_ns(libc::RUSAGE_THREAD) - start, Ordering::SeqCst);
                })
                .unwrap();
        }
    });
    url
}

fn answer(stream: TcpStream, reply: &[u8]) {
    let mut reader = BufReader::new(&stream);
    let mut len = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            len = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let _ = (&stream).write_all(reply);
}

/// N agents at once: (client CPU per agent run in ms, RSS per agent in KiB, wall time).
fn agents(url: &str, n: usize) -> (f64, f64, Duration) {
    let rss = rss_bytes();
    let (process, server) = (
        cpu_ns(libc::RUSAGE_SELF),
        SERVER_CPU_NS.load(Ordering::SeqCst),
    );
    let started = Instant::now();
    let go = Arc::new(Barrier::new(n));
    let runs: Vec<_> = (0..n)
        .map(|_| {
            let (url, go) = (url.to_owned(), go.clone());
            std::thread::spawn(move || {
                let agent = Agent::builder()
                    .provider(OpenAiCompat::new(url))
                    .model("m")
                    .build()
                    .unwrap();
                let _sub = agent.subscribe(|e: &AgentEvent| {
                    std::hint::black_box(e);
                });
                go.wait();
                let r = agent.prompt("Hello").unwrap();
                let expected: usize = (0..REPLY_DELTAS)
                    .map(|i| format!(" tok{}", i % 100).len())
                    .sum();
                assert_eq!(r.text().len(), expected);
                agent
            })
        })
        .collect();
    let alive: Vec<Agent> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    let wall = started.elapsed();
    let process = cpu_ns(libc::RUSAGE_SELF) - process;
    let server = SERVER_CPU_NS.load(Ordering::SeqCst) - server;
    let per_run = process.saturating_sub(server) as f64 / n as f64 / 1e6;
    let per_agent = rss_bytes().saturating_sub(rss) as f64 / n as f64 / 1024.0;
    drop(alive);
    (per_run, per_agent, wall)
}

fn main() {
    let part = std::env::args()
        .skip(1)
        .find(|a| a == "threads" || a == "agents");
    match part.as_deref() {
        Some("threads") => threads(),
        Some("agents") => agents_part(),
        _ => {
            let me = std::env::current_exe().expect("the bench's own path");
            for part in ["threads", "agents"] {
                let status = std::process::Command::new(&me)
                    .arg(part)
                    .status()
                    .expect("the bench runs itself");
                assert!(status.success(), "the {part} part failed");
            }
        }
    }
}

fn agents_part() {
    let url = serve();
    // Warm up the connection path once.
    agents(&url, 4);
    let mut at_10 = 0.0;
    for n in [10usize, 100, 1_000] {
        let samples: Vec<(f64, f64, Duration)> = (0..3).map(|_| agents(&url, n)).collect();
        let cpu = median(samples.iter().map(|s| s.0).collect());
        let rss = median(samples.iter().map(|s| s.1).collect());
        let wall = median(samples.iter().map(|s| s.2.as_secs_f64()).collect());
        if n == 10 {
            at_10 = cpu;
        }
        println!(
            "agents: N = {n:>5}: CPU per agent run {cpu:.2} ms ({:.2}x N = 10), memory per \
             agent {rss:.0} KiB, wall {:.0} ms",
            cpu / at_10,
            wall * 1e3
        );
    }
}
