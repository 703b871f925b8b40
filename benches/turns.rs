//! The cost of a turn, and how fast an abort reaches the server, against a loopback server.
//!
//! `cargo bench --bench turns`
//!
//! Groups (each "wall" bench reports wall time per run, each "cpu" bench the client's CPU
//! time per run: the process's user + system time from `getrusage` minus what the server
//! threads spent, which each record their own):
//! - `turns/agent_{1,20}`: a run of 1 and of 20 turns (19 tool calls, then a text reply)
//!   through the full agent on `OpenAiCompat`;
//! - `turns/minimal_{1,20}`: a minimal blocking client doing the same requests with ureq
//!   directly (one pooled connection, each body read to its end);
//! - `turns/agent_responses_{1,20}_cpu`: the full agent on `OpenAiResponses`, the same
//!   turns as the Responses API streams them (a `function_call` item, then a text message);
//! - `abort/to_return_*`, `abort/to_server_close_*`: from `abort()` on another thread to
//!   `prompt` returning, and to the server seeing the connection close, while the run waits
//!   for the headers (`headers`) and mid-stream (`stream`).
//!
//! The cost per extra turn is `(turns_20 - turns_1) / 19`; the summary printed first gives
//! the medians and ratios from its own runs, side by side (the agent's and the minimal
//! client's samples alternate), so that they come from one machine state.

mod cpu;
use cpu::cpu_ns;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use crossbeam_channel::Sender;
use pagent::llm::{OpenAiCompat, OpenAiResponses, Provider, RetryPolicy};
use pagent::tool::{self, ToolOutput};
use pagent::{Agent, RunStopReason};
use serde::Deserialize;

const TURNS: usize = 20;

/// CPU time the server threads spent, which they add up themselves.
static SERVER_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// What the server does with a request.
#[derive(Clone, Copy)]
enum Mode {
    /// A tool call while the request holds fewer than `TURNS - 1` tool results, else text;
    /// text at once when the request says "one turn".
    Turns,
    /// Nothing: holds the connection until the client closes it.
    Silent,
    /// The headers and one event, then nothing.
    OneEvent,
}

/// A keep-alive loopback server; `closed` hears when a held connection was closed.
fn server(mode: Mode, closed: Option<Sender<Instant>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let closed = closed.clone();
            std::thread::spawn(move || connection(stream, mode, closed));
        }
    });
    url
}

fn tool_call(n: usize) -> String {
    format!(
        "data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"call_{n}\",\
         \"type\":\"function\",\"function\":{{\"name\":\"echo\",\"arguments\":\"{{}}\"}}}}]}}}}]}}\n\n\
         data: {{\"choices\":[{{\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\n\
         data: [DONE]\n\n"
    )
}

const TEXT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"done\"}}]}\n\n\
                    data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                    data: [DONE]\n\n";

/// The Responses API's tool call turn, in OpenAI's shape.
fn responses_tool_call(n: usize) -> String {
    let item = format!(
        r#"{{"id":"fc_{n}","type":"function_call","status":"completed","arguments":"{{}}","call_id":"call_{n}","name":"echo"}}"#
    );
    format!(
        "event: response.created\ndata: {{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{{\"id\":\"resp_{n}\",\"status\":\"in_progress\"}}}}\n\n\
         event: response.output_item.added\ndata: {{\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{item}}}\n\n\
         event: response.output_item.done\ndata: {{\"type\":\"response.output_item.done\",\"sequence_number\":2,\"output_index\":0,\"item\":{item}}}\n\n\
         event: response.completed\ndata: {{\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{{\"id\":\"resp_{n}\",\"status\":\"completed\"}}}}\n\n"
    )
}

const RESPONSES_TEXT: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_t\",\"status\":\"in_progress\"}}\n\n\
     event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_t\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n\
     event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"msg_t\",\"output_index\":0,\"content_index\":0,\"delta\":\"done\",\"logprobs\":[]}\n\n\
     event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_t\",\"status\":\"completed\"}}\n\n";

fn connection(stream: TcpStream, mode: Mode, closed: Option<Sender<Instant>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    let mut last = cpu_ns(libc::RUSAGE_THREAD);
    let mut head = String::new();
    loop {
        let mut len = 0;
        head.clear();
        let mut responses = false;
        loop {
            let start = head.len();
            match reader.read_line(&mut head) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = head[start..].trim_end();
            if line.is_empty() {
                break;
            }
            responses |= line.starts_with("POST ") && line.contains("/responses ");
            if let Some((n, v)) = line.split_once(':')
                && n.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        match mode {
            Mode::Turns => {
                let marker: &[u8] = if responses {
                    b"\"type\":\"function_call_output\""
                } else {
                    b"\"role\":\"tool\""
                };
                let results = body.windows(marker.len()).filter(|w| *w == marker).count();
                let one = body.windows(8).any(|w| w == b"one turn");
                let reply = match (results + 1 < TURNS && !one, responses) {
                    (true, false) => tool_call(results),
                    (true, true) => responses_tool_call(results),
                    (false, false) => TEXT.to_owned(),
                    (false, true) => RESPONSES_TEXT.to_owned(),
                };
                let msg = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                     Content-Length: {}\r\n\r\n{reply}",
                    reply.len()
                );
                if out.write_all(msg.as_bytes()).is_err() {
                    return;
                }
                let now = cpu_ns(libc::RUSAGE_THREAD);
                SERVER_CPU_NS.fetch_add(now - last, Ordering::SeqCst);
                last = now;
            }
            Mode::Silent | Mode::OneEvent => {
                if let Mode::OneEvent = mode {
                    let event = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n";
                    let _ = write!(
                        out,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{event}\r\n",
                        event.len()
                    );
                }
                let mut buf = [0; 256];
                while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
                if let Some(tx) = &closed {
                    let _ = tx.send(Instant::now());
                }
                return;
            }
        }
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Nothing {}

/// One provider per server, shared by the agents of every run (and so its connection pool).
fn provider(url: &str) -> Arc<dyn Provider> {
    Arc::new(OpenAiCompat::new(format!("{url}/v1")).retry(RetryPolicy::none()))
}

/// The same, over the Responses API.
fn responses_provider(url: &str) -> Arc<dyn Provider> {
    Arc::new(OpenAiResponses::new(format!("{url}/v1")).retry(RetryPolicy::none()))
}

fn agent(provider: &Arc<dyn Provider>) -> Agent {
    Agent::builder()
        .provider(provider.clone())
        .model("m")
        .tool(tool::typed("echo", "Echoes.", |_: Nothing, _| {
            Ok(ToolOutput::text("ok"))
        }))
        .max_turns(TURNS as u32)
        .build()
        .unwrap()
}

/// One run of a fresh agent: `TURNS` turns (the server calls a tool until the request
/// holds `TURNS - 1` results), or one.
fn agent_run(provider: &Arc<dyn Provider>, turns: usize) {
    let agent = agent(provider);
    let prompt = if turns == 1 { "one turn" } else { "go" };
    let result = agent.prompt(prompt).unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls, "{result:?}");
}

/// The same requests from a minimal blocking client: a body with as many tool results as
/// the agent's request would hold, each reply read to its end.
fn minimal_run(client: &ureq::Agent, url: &str, turns: usize) {
    let prompt = if turns == 1 { "one turn" } else { "go" };
    for done in 0..turns {
        let mut body = String::from("{\"model\":\"m\",\"stream\":true,\"messages\":[");
        body.push_str(&format!("{{\"role\":\"user\",\"content\":\"{prompt}\"}}"));
        for i in 0..done {
            body.push_str(&format!(
                ",{{\"role\":\"assistant\",\"tool_calls\":[{{\"id\":\"call_{i}\"}}]}},\
                 {{\"role\":\"tool\",\"tool_call_id\":\"call_{i}\",\"content\":\"ok\"}}"
            ));
        }
        body.push_str("]}");
        let mut response = client
            .post(&format!("{url}/v1/chat/completions"))
            .header("content-type", "application/json")
            .send(body.as_bytes())
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap();
        assert!(text.ends_with("[DONE]\n\n"));
    }
}

/// Wall and client CPU time of `f`.
fn measure(mut f: impl FnMut()) -> (Duration, Duration) {
    let (cpu, server) = (
        cpu_ns(libc::RUSAGE_SELF),
        SERVER_CPU_NS.load(Ordering::SeqCst),
    );
    let start = Instant::now();
    f();
    let wall = start.elapsed();
    let spent = cpu_ns(libc::RUSAGE_SELF) - cpu;
    let server = SERVER_CPU_NS.load(Ordering::SeqCst) - server;
    (wall, Duration::from_nanos(spent.saturating_sub(server)))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The runs of one client: (wall, cpu) of each run of 1 and of `TURNS` turns.
#[derive(Default)]
struct Runs {
    one: Vec<(Duration, Duration)>,
    many: Vec<(Duration, Duration)>,
}

impl Runs {
    /// One sample: a run of 1 turn and one of `TURNS`.
    fn sample(&mut self, mut run: impl FnMut(usize)) {
        self.one.push(measure(|| run(1)));
        self.many.push(measure(|| run(TURNS)));
    }

    /// Medians per extra turn: (wall, cpu).
    fn per_extra_turn(&self) -> (Duration, Duration) {
        let med = |v: &[(Duration, Duration)], cpu: bool| {
            median(v.iter().map(|&(w, c)| if cpu { c } else { w }).collect())
        };
        let extra =
            |cpu| med(&self.many, cpu).saturating_sub(med(&self.one, cpu)) / (TURNS as u32 - 1);
        (extra(false), extra(true))
    }
}

fn summary() {
    let url = server(Mode::Turns, None);
    let agent = provider(&url);
    let responses = responses_provider(&url);
    let client: ureq::Agent = ureq::Agent::config_builder().build().into();
    // Warm up all three (connections, allocations).
    for _ in 0..3 {
        agent_run(&agent, TURNS);
        agent_run(&responses, TURNS);
        minimal_run(&client, &url, TURNS);
    }
    // The clients' samples alternate, so that all see the same machine load.
    let samples = 30;
    let (mut a, mut r, mut m) = (Runs::default(), Runs::default(), Runs::default());
    for _ in 0..samples {
        a.sample(|t| agent_run(&agent, t));
        r.sample(|t| agent_run(&responses, t));
        m.sample(|t| minimal_run(&client, &url, t));
    }
    let ((aw, ac), (rw, rc), (mw, mc)) =
        (a.per_extra_turn(), r.per_extra_turn(), m.per_extra_turn());
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    println!(
        "per extra turn (median of {samples}): agent wall {aw:?} cpu {ac:?}; minimal client \
         wall {mw:?} cpu {mc:?}; wall ratio {:.2}x, cpu ratio {:.2}x",
        ratio(aw, mw),
        ratio(ac, mc)
    );
    println!(
        "per extra turn (median of {samples}): agent on the Responses API wall {rw:?} cpu \
         {rc:?}; against the agent on Chat Completions: wall {:.2}x, cpu {:.2}x",
        ratio(rw, aw),
        ratio(rc, ac)
    );
    for (name, mode) in [("headers", Mode::Silent), ("stream", Mode::OneEvent)] {
        let (back, close): (Vec<_>, Vec<_>) = (0..samples).map(|_| abort_once(mode)).unzip();
        println!(
            "abort {name} (median of {samples}): to prompt returning {:?}, to the server \
             seeing the close {:?}",
            median(back),
            median(close)
        );
    }
}

/// One aborted run: (abort to `prompt` returning, abort to the server seeing the close).
fn abort_once(mode: Mode) -> (Duration, Duration) {
    let (tx, closed) = crossbeam_channel::bounded(1);
    let url = server(mode, Some(tx));
    let agent = agent(&provider(&url));
    let handle = agent.handle();
    let (ready_tx, ready) = crossbeam_channel::bounded(1);
    let _sub = agent.subscribe(move |e: &pagent::AgentEvent| {
        if matches!(e, pagent::AgentEvent::MessageStart { .. }) {
            let _ = ready_tx.try_send(());
        }
    });
    std::thread::scope(|s| {
        let aborter = s.spawn(|| {
            ready.recv_timeout(Duration::from_secs(10)).unwrap();
            // Time for the request to reach the server and the reply to be awaited.
            std::thread::sleep(Duration::from_millis(20));
            let at = Instant::now();
            assert!(handle.abort());
            at
        });
        let result = agent.prompt("go").unwrap();
        let returned = Instant::now();
        assert_eq!(result.stop_reason, RunStopReason::Cancelled);
        let at = aborter.join().unwrap();
        let close = closed.recv_timeout(Duration::from_secs(10)).unwrap();
        (returned - at, close.saturating_duration_since(at))
    })
}

fn turns(c: &mut Criterion) {
    summary();
    let url = server(Mode::Turns, None);
    let agent = provider(&url);
    let responses = responses_provider(&url);
    let client: ureq::Agent = ureq::Agent::config_builder().build().into();
    let mut g = c.benchmark_group("turns");
    for n in [1, TURNS] {
        g.bench_function(format!("agent_{n}"), |b| b.iter(|| agent_run(&agent, n)));
        g.bench_function(format!("minimal_{n}"), |b| {
            b.iter(|| minimal_run(&client, &url, n))
        });
        g.bench_function(format!("agent_{n}_cpu"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| measure(|| agent_run(&agent, n)).1).sum())
        });
        g.bench_function(format!("agent_responses_{n}_cpu"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| measure(|| agent_run(&responses, n)).1)
                    .sum()
            })
        });
        g.bench_function(format!("minimal_{n}_cpu"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| measure(|| minimal_run(&client, &url, n)).1)
                    .sum()
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("abort");
    g.sample_size(20);
    for (name, mode) in [("headers", Mode::Silent), ("stream", Mode::OneEvent)] {
        g.bench_function(format!("to_return_{name}"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| abort_once(mode).0).sum())
        });
        g.bench_function(format!("to_server_close_{name}"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| abort_once(mode).1).sum())
        });
    }
    g.finish();
}

criterion_group!(benches, turns);
criterion_main!(benches);
