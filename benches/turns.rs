//! The cost of a turn, and how fast an abort reaches the server, against a loopback server.
//!
//! The clients and the loopback server's threads run on one CPU, the first the process may
//! use (`cpu::pin`): left to the scheduler, a client and its server sometimes shared a CPU
//! and sometimes not, which moved one client's cost per turn by 3x between runs (a wake-up
//! across CPUs costs what a turn does) and swapped which client looked cheaper.
//! `BENCH_PIN=split` puts the servers on the last CPU, `BENCH_PIN=off` pins nothing.
//!
//! `cargo bench --bench turns`
//!
//! Groups (each "wall" bench reports wall time per run, each `_cpu` bench the client's CPU
//! time per run: the process's user + system time from `getrusage` minus what the server
//! threads spent, which each record their own):
//! - `turns/agent_{1,20}`: a run of 1 and of 20 turns (19 tool calls, then a text reply)
//!   through the full agent on `OpenAiCompat`;
//! - `turns/minimal_{1,20}`: a minimal blocking client doing the same requests with ureq
//!   directly (one pooled connection), each reply's events read into borrowed typed structs
//!   and the next request built from the tool call it named;
//! - `turns/agent_responses_{1,20}` and `turns/minimal_responses_{1,20}`: the same two
//!   clients over the Responses API (a `function_call` item, then a text message);
//! - `abort/to_return_*`, `abort/to_server_close_*`: from `abort()` on another thread to
//!   `prompt` returning, and to the server seeing the connection close, while the run waits
//!   for the headers (`headers`) and mid-stream (`stream`).
//!
//! The cost per extra turn is `(turns_20 - turns_1) / 19`; the summary printed first gives
//! the medians and ratios from its own runs, side by side (the four clients' samples
//! alternate), so that they come from one machine state.
//!
//! For instruction counts (callgrind), `TURNS_RUNS=<client>,<turns>,<runs>` makes that many
//! runs of one client and exits (see `counted_runs`).

mod cpu;
use cpu::{Side, cpu_ns, pin};
use std::borrow::Cow;
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
        pin(Side::Server);
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

/// The same requests from a minimal blocking client: each reply's events read into
/// borrowed typed structs (the tool call's id taken from it), and a body with the calls and
/// results so far, as the agent's request would hold them.
fn minimal_run(client: &ureq::Agent, url: &str, turns: usize) {
    let prompt = if turns == 1 { "one turn" } else { "go" };
    let mut calls: Vec<String> = Vec::new();
    let mut text = String::new();
    for _ in 0..turns {
        let mut body = String::from("{\"model\":\"m\",\"stream\":true,\"messages\":[");
        body.push_str(&format!("{{\"role\":\"user\",\"content\":\"{prompt}\"}}"));
        for id in &calls {
            body.push_str(&format!(
                ",{{\"role\":\"assistant\",\"tool_calls\":[{{\"id\":\"{id}\",\"type\":\"function\",\
                 \"function\":{{\"name\":\"echo\",\"arguments\":\"{{}}\"}}}}]}},\
                 {{\"role\":\"tool\",\"tool_call_id\":\"{id}\",\"content\":\"ok\"}}"
            ));
        }
        body.push_str("]}");
        let reply = post(client, &format!("{url}/v1/chat/completions"), &body);
        let mut call = None;
        for data in events(&reply) {
            if data == "[DONE]" {
                break;
            }
            let chunk: Chunk<'_> = serde_json::from_str(data).unwrap();
            for delta in chunk.choices.into_iter().filter_map(|c| c.delta) {
                text.push_str(delta.content.as_deref().unwrap_or(""));
                for t in delta.tool_calls.into_iter().flatten() {
                    call = t.id.map(|id| id.into_owned()).or(call);
                }
            }
        }
        match call {
            Some(id) => calls.push(id),
            None => break,
        }
    }
    assert_eq!((calls.len() + 1, text.as_str()), (turns, "done"));
}

/// The same over the Responses API: input items for the calls and their outputs, each
/// reply's events read into borrowed typed structs.
fn minimal_responses_run(client: &ureq::Agent, url: &str, turns: usize) {
    let prompt = if turns == 1 { "one turn" } else { "go" };
    let mut calls: Vec<String> = Vec::new();
    let mut text = String::new();
    for _ in 0..turns {
        let mut body = String::from("{\"model\":\"m\",\"stream\":true,\"input\":[");
        body.push_str(&format!("{{\"role\":\"user\",\"content\":\"{prompt}\"}}"));
        for id in &calls {
            body.push_str(&format!(
                ",{{\"type\":\"function_call\",\"call_id\":\"{id}\",\"name\":\"echo\",\"arguments\":\"{{}}\"}},\
                 {{\"type\":\"function_call_output\",\"call_id\":\"{id}\",\"output\":\"ok\"}}"
            ));
        }
        body.push_str("]}");
        let reply = post(client, &format!("{url}/v1/responses"), &body);
        let mut call = None;
        for data in events(&reply) {
            let event: ResponsesEvent<'_> = serde_json::from_str(data).unwrap();
            match &*event.kind {
                "response.output_text.delta" => text.push_str(event.delta.as_deref().unwrap_or("")),
                "response.output_item.done" => {
                    if let Some(item) = event.item.filter(|i| i.kind == "function_call") {
                        call = item.call_id.map(|id| id.into_owned());
                    }
                }
                "response.completed" => break,
                _ => {}
            }
        }
        match call {
            Some(id) => calls.push(id),
            None => break,
        }
    }
    assert_eq!((calls.len() + 1, text.as_str()), (turns, "done"));
}

/// POSTs `body` to `url` and reads the whole reply.
fn post(client: &ureq::Agent, url: &str, body: &str) -> String {
    let mut response = client
        .post(url)
        .header("content-type", "application/json")
        .send(body.as_bytes())
        .unwrap();
    response.body_mut().read_to_string().unwrap()
}

/// The `data` of each event of an SSE body (events split at blank lines, one `data:` line
/// each, after an `event:` line or not).
fn events(body: &str) -> impl Iterator<Item = &str> {
    body.split("\n\n")
        .filter_map(|event| event.lines().find_map(|line| line.strip_prefix("data: ")))
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    choices: Vec<Choice<'a>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    tool_calls: Option<Vec<ToolDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolDelta<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(borrow)]
    item: Option<ResponsesItem<'a>>,
}

#[derive(Deserialize)]
struct ResponsesItem<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    call_id: Option<Cow<'a, str>>,
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

/// The four clients of one server: the agent and the minimal client, on Chat Completions
/// and on the Responses API.
struct Clients {
    url: String,
    chat: Arc<dyn Provider>,
    responses: Arc<dyn Provider>,
    minimal: ureq::Agent,
}

impl Clients {
    fn new() -> Clients {
        let url = server(Mode::Turns, None);
        Clients {
            chat: provider(&url),
            responses: responses_provider(&url),
            minimal: ureq::Agent::config_builder().build().into(),
            url,
        }
    }

    /// One run of `turns` turns by `client`: `agent`, `minimal`, `agent_responses` or
    /// `minimal_responses`. Not inlined, so that `valgrind --tool=callgrind
    /// --toggle-collect='*turns::Clients::run*'` counts the client's instructions alone.
    #[inline(never)]
    fn run(&self, client: &str, turns: usize) {
        match client {
            "agent" => agent_run(&self.chat, turns),
            "minimal" => minimal_run(&self.minimal, &self.url, turns),
            "agent_responses" => agent_run(&self.responses, turns),
            "minimal_responses" => minimal_responses_run(&self.minimal, &self.url, turns),
            other => panic!("no client {other}"),
        }
    }
}

/// The clients of [`Clients::run`], in the summary's order.
const CLIENTS: [&str; 4] = ["agent", "minimal", "agent_responses", "minimal_responses"];

/// `TURNS_RUNS=<client>,<turns>,<runs>`: that many runs of `<turns>` turns by one client,
/// then exit, for instruction counts: `(Ir(20 turns) - Ir(1 turn)) / 19` over the same
/// number of runs is the client's instructions per extra turn.
fn counted_runs() -> bool {
    let Ok(spec) = std::env::var("TURNS_RUNS") else {
        return false;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let [client, turns, runs] = parts[..] else {
        panic!("TURNS_RUNS=<client>,<turns>,<runs>, not {spec}");
    };
    let clients = Clients::new();
    for _ in 0..runs.parse::<usize>().unwrap() {
        clients.run(client, turns.parse().unwrap());
    }
    true
}

fn summary() {
    let clients = Clients::new();
    // Warm up all four (connections, allocations).
    for _ in 0..3 {
        for client in CLIENTS {
            clients.run(client, TURNS);
        }
    }
    // The clients' samples alternate, so that all see the same machine load.
    let samples = 30;
    let mut runs: Vec<Runs> = CLIENTS.iter().map(|_| Runs::default()).collect();
    for _ in 0..samples {
        for (client, runs) in CLIENTS.iter().zip(&mut runs) {
            runs.sample(|t| clients.run(client, t));
        }
    }
    let per: Vec<(Duration, Duration)> = runs.iter().map(Runs::per_extra_turn).collect();
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    for (api, agent, minimal) in [
        ("Chat Completions", per[0], per[1]),
        ("the Responses API", per[2], per[3]),
    ] {
        let ((aw, ac), (mw, mc)) = (agent, minimal);
        println!(
            "per extra turn on {api} (median of {samples}): agent wall {aw:?} cpu {ac:?}; \
             minimal client wall {mw:?} cpu {mc:?}; wall ratio {:.2}x, cpu ratio {:.2}x",
            ratio(aw, mw),
            ratio(ac, mc)
        );
    }
    println!(
        "per extra turn: the agent on the Responses API against the agent on Chat \
         Completions: wall {:.2}x, cpu {:.2}x",
        ratio(per[2].0, per[0].0),
        ratio(per[2].1, per[0].1)
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
    pin(Side::Client);
    if counted_runs() {
        return;
    }
    summary();
    let clients = Clients::new();
    let mut g = c.benchmark_group("turns");
    for n in [1, TURNS] {
        for client in CLIENTS {
            g.bench_function(format!("{client}_{n}"), |b| {
                b.iter(|| clients.run(client, n))
            });
            g.bench_function(format!("{client}_{n}_cpu"), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| measure(|| clients.run(client, n)).1)
                        .sum()
                })
            });
        }
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
