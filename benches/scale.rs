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
//!   HTTP server (OpenAI-style stream of 200 deltas), for N = 10, 100, 1,000, 10,000 (`--
//!   agents 10,100` for other sizes; `SCALE_REPS` rounds of each, 3 by default). Each round
//!   runs in a fresh process, its server in another (its CPU and memory are not counted).
//!   The server writes the first half of every reply and holds the rest until all N
//!   requests arrived: all N agents are then running at once (mid-reply), and the memory of
//!   the process is measured; then it writes the rest, and the memory is measured again with
//!   the N agents alive and idle (their threads exited, their connections pooled). Figures:
//!   CPU per agent run (the whole client process, thread start included), and per agent,
//!   running and idle: resident memory growth, the part of it in the run threads' stacks
//!   (each thread's stack mapping, from `/proc/self/smaps`), the rest ("beyond the stack"),
//!   and the heap in use (`mallinfo2`); idle, the RSS again after `malloc_trim(0)` (what
//!   the allocator kept of the runs' freed memory, for reuse, goes back to the system);
//!   threads and sockets left per idle agent; runs that failed, and retries. The server's listen backlog is std's (128): a burst of 10,000
//!   connects overflows it (see the README). With `SCALE_TLS=1` the same over `https`: the
//!   server speaks TLS 1.3 with tests/data/tls/server.pem, each agent's provider trusts
//!   tests/data/tls/ca.pem (`root_certificates`), so each connection also holds its TLS
//!   state and the process the one rustls configuration of those providers.
//! - the per-delta cost of fold + store + dispatch is in `cargo bench --bench fold`.

mod cpu;
use cpu::cpu_ns;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use pagent::llm::{Faux, FauxReply, OpenAiCompat, StreamEvent};
use pagent::{Agent, AgentEvent};

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
/// The stack of each agent's thread (the bench chooses it; pagent's run needs far less).
const STACK: usize = 256 * 1024;
/// The stack of the server's threads.
const SERVER_STACK: usize = 64 * 1024;

fn main() {
    // `cargo bench` adds `--bench`: options are not ours.
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    match args.next().as_deref() {
        Some("threads") => threads(),
        Some("agents") => agents_part(args.next()),
        Some("round") => {
            let n = args.next().and_then(|n| n.parse().ok()).expect("round N");
            round_process(n);
        }
        Some("serve") => serve(),
        _ => {
            for part in ["threads", "agents"] {
                assert!(run_self(&[part]).success(), "the {part} part failed");
            }
        }
    }
}

fn run_self(args: &[&str]) -> std::process::ExitStatus {
    let me = std::env::current_exe().expect("the bench's own path");
    std::process::Command::new(me)
        .args(args)
        .status()
        .expect("the bench runs itself")
}

// ---- the server (a process of its own) ----

/// The reply, cut in two: the head and the first half of the events, then the rest.
fn reply_halves() -> (Vec<u8>, Vec<u8>) {
    let mut events = Vec::new();
    let mut half = 0;
    for i in 0..REPLY_DELTAS {
        if i == REPLY_DELTAS / 2 {
            half = events.len();
        }
        let chunk = format!(
            r#"data: {{"choices":[{{"index":0,"delta":{{"content":" tok{}"}},"finish_reason":null}}],"object":"chat.completion.chunk"}}"#,
            i % 100
        );
        events.extend_from_slice(chunk.as_bytes());
        events.extend_from_slice(b"\n\n");
    }
    events.extend_from_slice(
        br#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"object":"chat.completion.chunk"}"#,
    );
    events.extend_from_slice(b"\n\ndata: [DONE]\n\n");
    // Kept alive, as model servers do: an idle agent keeps its connection pooled.
    let mut first = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n",
        events.len()
    )
    .into_bytes();
    first.extend_from_slice(&events[..half]);
    (first, events[half..].to_vec())
}

/// Whether the round is over TLS (`SCALE_TLS=1`, inherited by the round and server processes).
fn tls() -> bool {
    std::env::var("SCALE_TLS").is_ok_and(|v| v == "1")
}

/// The certificates of tests/data/tls.
const CA: &[u8] = include_bytes!("../tests/data/tls/ca.pem");
const SERVER_CERT: &[u8] = include_bytes!("../tests/data/tls/server.pem");
const SERVER_KEY: &[u8] = include_bytes!("../tests/data/tls/server.key");

fn tls_config() -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(SERVER_CERT)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    Arc::new(config)
}

/// A connection of the server, plain or TLS, its request read and its reply's first half
/// written; `None` when the client left first.
fn accept(
    stream: TcpStream,
    tls: Option<&Arc<rustls::ServerConfig>>,
    first: &[u8],
) -> Option<Held> {
    let mut held: Held = match tls {
        None => Box::new(stream),
        Some(config) => {
            let mut stream = stream;
            let mut conn = rustls::ServerConnection::new(config.clone()).ok()?;
            while conn.is_handshaking() {
                conn.complete_io(&mut stream).ok()?;
            }
            Box::new(rustls::StreamOwned::new(conn, stream))
        }
    };
    let mut reader = BufReader::new(&mut held);
    if !read_request(&mut reader) {
        return None;
    }
    drop(reader);
    held.write_all(first).ok()?;
    held.flush().ok()?;
    Some(held)
}

/// A connection the server holds.
type Held = Box<dyn ReadWrite + Send>;

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Reads one request (head and body); false when the client left first.
fn read_request(reader: &mut impl BufRead) -> bool {
    let mut len = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return false;
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
    reader.read_exact(&mut body).is_ok()
}

/// The server: prints its address, then for each `round` line on stdin answers every request
/// with the first half of the reply and holds it, printing `held K` as K requests are held;
/// `release` writes the rest of every held reply; `end` closes every connection.
fn serve() {
    // std's listen backlog (128), as many servers have.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("{}", listener.local_addr().unwrap());
    let (first, rest) = reply_halves();
    let (first, rest) = (Arc::new(first), Arc::new(rest));
    let tls = tls().then(tls_config);
    let held: Arc<Mutex<Vec<Held>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // A TLS handshake waits for the client's turns (10,000 client threads on a few cores):
    // more threads accept, so that a slow client does not hold the queue behind it.
    let accepting = if tls.is_some() { 64 } else { 4 };
    for _ in 0..accepting {
        let (listener, first, held, tx, tls) = (
            listener.try_clone().unwrap(),
            first.clone(),
            held.clone(),
            tx.clone(),
            tls.clone(),
        );
        std::thread::Builder::new()
            .stack_size(SERVER_STACK)
            .spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { continue };
                    let Some(stream) = accept(stream, tls.as_ref(), &first) else {
                        continue;
                    };
                    held.lock().unwrap().push(stream);
                    let _ = tx.send(());
                }
            })
            .unwrap();
    }
    // Counts held requests and reports them (a line per change, read by the client).
    std::thread::Builder::new()
        .stack_size(SERVER_STACK)
        .spawn({
            let held = held.clone();
            move || {
                let mut out = std::io::stdout();
                while rx.recv().is_ok() {
                    let k = held.lock().unwrap().len();
                    let _ = writeln!(out, "held {k}");
                    let _ = out.flush();
                }
            }
        })
        .unwrap();
    let mut open = Vec::new();
    for line in std::io::stdin().lines() {
        let line = line.unwrap();
        match line.trim() {
            "release" => {
                let mut streams = std::mem::take(&mut *held.lock().unwrap());
                for stream in &mut streams {
                    let _ = stream.write_all(&rest);
                    let _ = stream.flush();
                }
                open.extend(streams);
            }
            "end" => {
                open.clear();
                held.lock().unwrap().clear();
                println!("ended");
            }
            _ => {}
        }
    }
}

// ---- the agents (a process per round) ----

/// What one round at N measured (per agent where it says so).
#[derive(Clone, Copy, Debug, Default)]
struct Round {
    cpu_ms: f64,
    wall_ms: f64,
    run_rss_kib: f64,
    run_stack_kib: f64,
    run_heap_kib: f64,
    idle_rss_kib: f64,
    trimmed_rss_kib: f64,
    idle_heap_kib: f64,
    idle_threads: f64,
    idle_fds: f64,
    failed: f64,
    retries: f64,
}

impl Round {
    const FIELDS: usize = 12;

    fn to_line(self) -> String {
        let v = [
            self.cpu_ms,
            self.wall_ms,
            self.run_rss_kib,
            self.run_stack_kib,
            self.run_heap_kib,
            self.idle_rss_kib,
            self.trimmed_rss_kib,
            self.idle_heap_kib,
            self.idle_threads,
            self.idle_fds,
            self.failed,
            self.retries,
        ];
        let v: Vec<String> = v.iter().map(|x| x.to_string()).collect();
        format!("round {}", v.join(" "))
    }

    fn from_line(line: &str) -> Option<Round> {
        let v: Vec<f64> = line
            .strip_prefix("round ")?
            .split(' ')
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        (v.len() == Round::FIELDS).then(|| Round {
            cpu_ms: v[0],
            wall_ms: v[1],
            run_rss_kib: v[2],
            run_stack_kib: v[3],
            run_heap_kib: v[4],
            idle_rss_kib: v[5],
            trimmed_rss_kib: v[6],
            idle_heap_kib: v[7],
            idle_threads: v[8],
            idle_fds: v[9],
            failed: v[10],
            retries: v[11],
        })
    }
}

/// Raises the soft limits of open files and processes to the hard ones (an unprivileged
/// process may not go past them), and says what it got.
fn raise_limits() -> String {
    let mut said = Vec::new();
    for (name, resource) in [
        ("open files", libc::RLIMIT_NOFILE),
        ("processes", libc::RLIMIT_NPROC),
    ] {
        // SAFETY: getrlimit and setrlimit only read and write the struct passed, which lives
        // across the calls.
        unsafe {
            let mut limit: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(resource, &mut limit) != 0 {
                continue;
            }
            let before = limit.rlim_cur;
            // Past the hard limit where the process may (CAP_SYS_RESOURCE), else up to it.
            let mut wanted = limit;
            wanted.rlim_cur = limit.rlim_max.max(65_536);
            wanted.rlim_max = wanted.rlim_cur;
            if libc::setrlimit(resource, &wanted) != 0 {
                limit.rlim_cur = limit.rlim_max;
                libc::setrlimit(resource, &limit);
            }
            libc::getrlimit(resource, &mut limit);
            said.push(format!("{name} {before} -> {}", limit.rlim_cur));
        }
    }
    said.join(", ")
}

/// Resident memory of the process's thread stacks of size [`STACK`], in bytes: the mappings
/// of that size (the guard page is a mapping of its own) that are readable and writable.
fn stack_rss_bytes() -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let want_kib = (STACK / 1024).to_string();
    let mut total = 0;
    let mut in_stack = false;
    let mut rw = false;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if first.contains('-') && first.chars().next().is_some_and(|c| c.is_ascii_hexdigit()) {
            rw = words.next() == Some("rw-p");
            in_stack = false;
        } else if first == "Size:" {
            in_stack = rw && words.next() == Some(&want_kib);
        } else if first == "Rss:" && in_stack {
            total += words
                .next()
                .and_then(|k| k.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024;
        }
    }
    total
}

/// Bytes of the heap in use (glibc's count over all arenas).
fn heap_bytes() -> u64 {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path).map(|d| d.count()).unwrap_or(0)
}

/// The client of one round: a server process of its own, a warm-up round of 4 agents (on
/// threads of the default stack size, so that glibc's cache of stacks does not hand theirs
/// to the measured threads), then the round of N, printed as one line.
fn round_process(n: usize) {
    raise_limits();
    let me = std::env::current_exe().expect("the bench's own path");
    let mut server = std::process::Command::new(me)
        .arg("serve")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the server starts");
    let mut control = server.stdin.take().unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let addr = lines.next().unwrap().unwrap();
    let url = format!("{}://{addr}/v1", if tls() { "https" } else { "http" });
    // The server's lines: `held K` counted here, `ended` passed on.
    let held = Arc::new(AtomicUsize::new(0));
    let (ended_tx, ended) = std::sync::mpsc::channel();
    std::thread::spawn({
        let held = held.clone();
        move || {
            for line in lines {
                let line = line.unwrap();
                if let Some(k) = line.strip_prefix("held ") {
                    held.store(k.parse().unwrap(), Ordering::SeqCst);
                } else if line == "ended" {
                    let _ = ended_tx.send(());
                }
            }
        }
    });
    let mut command = |c: &str| {
        writeln!(control, "{c}").unwrap();
        control.flush().unwrap();
    };
    let mut rounds = Vec::new();
    for (k, stack) in [(4, None), (n, Some(STACK))] {
        let r = round(&url, k, stack, &held, &mut command);
        command("end");
        ended.recv().unwrap();
        held.store(0, Ordering::SeqCst);
        rounds.push(r);
    }
    println!("{}", rounds[1].to_line());
    drop(control);
    let _ = server.kill();
    let _ = server.wait();
}

fn round(
    url: &str,
    n: usize,
    stack: Option<usize>,
    held: &AtomicUsize,
    command: &mut dyn FnMut(&str),
) -> Round {
    let expected: usize = (0..REPLY_DELTAS)
        .map(|i| format!(" tok{}", i % 100).len())
        .sum();
    let (rss, heap, tasks, fds) = (
        rss_bytes(),
        heap_bytes(),
        count_dir("/proc/self/task"),
        count_dir("/proc/self/fd"),
    );
    let stacks = stack_rss_bytes();
    let failed = Arc::new(AtomicUsize::new(0));
    let retries = Arc::new(AtomicUsize::new(0));
    let process = cpu_ns(libc::RUSAGE_SELF);
    let started = Instant::now();
    let go = Arc::new(Barrier::new(n));
    let runs: Vec<_> = (0..n)
        .map(|_| {
            let (url, go, failed, retries) =
                (url.to_owned(), go.clone(), failed.clone(), retries.clone());
            let mut builder = std::thread::Builder::new();
            if let Some(stack) = stack {
                builder = builder.stack_size(stack);
            }
            builder
                .spawn(move || {
                    let mut provider = OpenAiCompat::new(url);
                    if tls() {
                        provider = provider.root_certificates(CA);
                    }
                    let agent = Agent::builder()
                        .provider(provider)
                        .model("m")
                        .build()
                        .unwrap();
                    let _sub = agent.subscribe(move |e: &AgentEvent| {
                        if let AgentEvent::MessageUpdate {
                            delta: StreamEvent::Retry { .. },
                            ..
                        } = e
                        {
                            retries.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    go.wait();
                    match agent.prompt("Hello") {
                        Ok(r) => assert_eq!(r.text().len(), expected),
                        Err(e) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            eprintln!("a run failed: {e}");
                        }
                    }
                    agent
                })
                .expect("a thread per agent")
        })
        .collect();
    // Every agent is mid-reply (or failed): all N running at once.
    let patience = Instant::now() + Duration::from_secs(300);
    while held.load(Ordering::SeqCst) + failed.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < patience, "the round did not get going");
        std::thread::sleep(Duration::from_millis(5));
    }
    let measuring = cpu_ns(libc::RUSAGE_THREAD);
    let (run_rss, run_heap, run_stacks) = (rss_bytes(), heap_bytes(), stack_rss_bytes());
    let measured = cpu_ns(libc::RUSAGE_THREAD) - measuring;
    command("release");
    let alive: Vec<Agent> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    let wall = started.elapsed();
    let spent = cpu_ns(libc::RUSAGE_SELF) - process - measured;
    // Idle: the agents alive, their threads gone (their stacks in glibc's cache, counted apart).
    let (idle_rss, idle_heap, idle_stacks) = (rss_bytes(), heap_bytes(), stack_rss_bytes());
    let (idle_tasks, idle_fds) = (count_dir("/proc/self/task"), count_dir("/proc/self/fd"));
    // What of that RSS is the allocator's free memory, kept for reuse: given back, then
    // measured again.
    // SAFETY: malloc_trim only releases free memory of the allocator.
    unsafe { libc::malloc_trim(0) };
    let trimmed_rss = rss_bytes();
    drop(alive);
    let per = |bytes: i64| bytes as f64 / n as f64 / 1024.0;
    let diff = |a: u64, b: u64| a as i64 - b as i64;
    let run_stack = diff(run_stacks, stacks);
    Round {
        cpu_ms: spent as f64 / n as f64 / 1e6,
        wall_ms: wall.as_secs_f64() * 1e3,
        run_rss_kib: per(diff(run_rss, rss)),
        run_stack_kib: per(run_stack),
        run_heap_kib: per(diff(run_heap, heap)),
        idle_rss_kib: per(diff(idle_rss, rss) - diff(idle_stacks, stacks)),
        trimmed_rss_kib: per(diff(trimmed_rss, rss) - diff(idle_stacks, stacks)),
        idle_heap_kib: per(diff(idle_heap, heap)),
        idle_threads: (idle_tasks as f64 - tasks as f64) / n as f64,
        idle_fds: (idle_fds as f64 - fds as f64) / n as f64,
        failed: failed.load(Ordering::SeqCst) as f64,
        retries: retries.load(Ordering::SeqCst) as f64,
    }
}

fn agents_part(sizes: Option<String>) {
    let sizes: Vec<usize> = sizes
        .map(|s| s.split(',').map(|n| n.trim().parse().expect("N")).collect())
        .unwrap_or_else(|| vec![10, 100, 1_000, 10_000]);
    let reps: usize = std::env::var("SCALE_REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    // The rounds' processes inherit the limits.
    let limits = raise_limits();
    let me = std::env::current_exe().expect("the bench's own path");
    println!("agents: limits raised: {limits}");
    println!(
        "agents: one thread each ({} KiB stacks), a loopback server in another process{}; \
         medians of {reps} rounds, each in a fresh process",
        STACK / 1024,
        if tls() { ", over TLS 1.3" } else { "" }
    );
    println!(
        "| N | CPU per run | vs N = 10 | running: RSS per agent | of it stack | beyond the \
         stack | heap | idle: RSS per agent | after malloc_trim | heap | threads per idle \
         agent | sockets per idle agent | failed runs | retries | wall |"
    );
    println!("|{}", " --- |".repeat(15));
    let mut at_10 = None;
    for n in sizes {
        let mut rounds = Vec::new();
        for _ in 0..reps {
            let out = std::process::Command::new(&me)
                .args(["round", &n.to_string()])
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("a round runs");
            let line = String::from_utf8_lossy(&out.stdout);
            match line.lines().find_map(Round::from_line) {
                Some(r) => rounds.push(r),
                None => panic!("a round at N = {n} printed no figures ({})", out.status),
            }
        }
        let m = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
        let cpu = m(|r| r.cpu_ms);
        let base = *at_10.get_or_insert(cpu);
        let (rss, stack) = (m(|r| r.run_rss_kib), m(|r| r.run_stack_kib));
        let beyond = median(
            rounds
                .iter()
                .map(|r| r.run_rss_kib - r.run_stack_kib)
                .collect(),
        );
        let failed: f64 = rounds.iter().map(|r| r.failed).sum();
        let retries: f64 = rounds.iter().map(|r| r.retries).sum();
        println!(
            "| {n} | {cpu:.2} ms | {:.2}x | {rss:.0} KiB | {stack:.0} KiB | {beyond:.0} KiB | \
             {:.0} KiB | {:.0} KiB | {:.0} KiB | {:.0} KiB | {:.2} | {:.2} | {failed} of {} | \
             {retries} | {:.0} ms |",
            cpu / base,
            m(|r| r.run_heap_kib),
            m(|r| r.idle_rss_kib),
            m(|r| r.trimmed_rss_kib),
            m(|r| r.idle_heap_kib),
            m(|r| r.idle_threads),
            m(|r| r.idle_fds),
            n * reps,
            m(|r| r.wall_ms),
        );
    }
}
