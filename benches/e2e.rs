//! End-to-end cost of one streamed text delta: a loopback server streams a reply of
//! `DELTAS` OpenAI-style chunks (shaped like llama-server's), and we time
//!
//! - `e2e/agent`: the full agent (`OpenAiCompat` over ureq, the reply read on the run thread,
//!   the SSE parser, chunk decoding, the fold into the state, one listener), one `prompt`
//!   per iteration on a fresh agent;
//! - `e2e/minimal_reader`: a minimal reader of the same bytes from the same server: a raw
//!   TCP request, splitting the body into SSE events, parsing each JSON chunk into a struct;
//! - `e2e/agent_responses`: the full agent on `OpenAiResponses`, the same reply (the same
//!   tokens) as the Responses API streams it: one `response.output_text.delta` event per
//!   token in OpenAI's shape (with its `event:` line, `sequence_number`, `item_id`,
//!   `output_index`, `content_index`, `logprobs`), then the done events and
//!   `response.completed` with the usage;
//! - `e2e/minimal_responses_reader`: the minimal reader of that stream: the same raw TCP
//!   request and split, each event's `data:` line parsed into a borrowed struct of its
//!   `type` and `delta`;
//! - `e2e/agent_anthropic`: the full agent on `Anthropic`, the same tokens as Anthropic's
//!   Messages API streams them (a `content_block_delta` event with a `text_delta` per token,
//!   with its `event:` line), against the Chat Completions agent (no minimal reader of its
//!   own: its per-delta work is the same as the others').
//!
//! Before the groups run, a summary prints for each server mode the medians of 15 runs of
//! each of the five clients, their runs alternating, per delta, and the ratios (each OpenAI
//! agent over the minimal reader of its API, the other agents over the Chat Completions
//! one).
//!
//! For instruction counts (callgrind), `E2E_RUNS=<client>,<mode>,<runs>` makes that many
//! runs of one client and exits (see `counted_runs`).
//!
//! What is measured is CPU time, not wall time: the process's user + system time
//! (`getrusage`, which counts the threads that ended too) minus the time of the server's threads, which each record their own. So the
//! figures hold on a loaded machine, and they include the kernel's socket work on the
//! reading side. Criterion reports it per delta (the throughput element); the ratio of the
//! two is the library's cost per delta over the bare minimum.
//!
//! Three server modes: `e2e/per_token/*` writes each event on its own, as a model server
//! flushes each token, as fast as it can (the client, slower, then reads several events at
//! a time); `e2e/bulk/*` writes the whole reply at once, so the reads are large and what
//! remains is the processing per delta; `paced` (in the summary and `E2E_RUNS` only: a run
//! takes 2000 pauses) pauses [`PACE`] after each event, so that each event is a read of its
//! own, as a model server's tokens arrive: the cost of a read is then part of each delta.
//!
//! `request/openai/{1000,10000}` times one model call of `OpenAiCompat` with a transcript of
//! that many messages (shared `Arc`s, as the agent hands them over) and a one-delta reply:
//! building the body, sending it, reading the short reply. Its throughput is the body's
//! bytes, so the cost per byte shows whether it grows faster than what is sent; the bytes
//! are printed too. `request/openai/cached_{1000,10000}` is the same call as the agent
//! makes it, with the transcript's body cache: every message's JSON but the last (new each
//! turn) comes from the cache.
//!
//! The clients and the loopback server's threads run on one CPU, the first the process may
//! use (`cpu::pin`): left to the scheduler, a client and its server sometimes shared a CPU
//! and sometimes not, which moved one client's cost per turn by 3x between runs (a wake-up
//! across CPUs costs what a turn does) and swapped which client looked cheaper.
//! `BENCH_PIN=split` puts the servers on the last CPU, `BENCH_PIN=off` pins nothing.
//!
//! `cargo bench --bench e2e`

mod cpu;
use cpu::{Side, cpu_ns, pin};
use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagent::CancelToken;
use pagent::llm::{Anthropic, BodyCache, OpenAiCompat, OpenAiResponses, Provider, Request};
use pagent::{Agent, AgentEvent, AssistantMessage, ContentBlock, Message, ToolCall};
use pagent::{StopReason, ToolResultMessage};
use serde::Deserialize;

const DELTAS: usize = 2000;

/// The pause after each event in the `paced` mode: long enough that the client has read
/// the event before the next is written, as a model server's tokens arrive.
const PACE: Duration = Duration::from_micros(100);

/// CPU time the server's reply threads spent, in nanoseconds.
static SERVER_CPU_NS: AtomicU64 = AtomicU64::new(0);
/// The size of the last request body the server read.
static LAST_BODY_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` `iters` times and returns the CPU time the client side spent.
fn client_cpu(iters: u64, mut f: impl FnMut()) -> Duration {
    let (process, server) = (
        cpu_ns(libc::RUSAGE_SELF),
        SERVER_CPU_NS.load(Ordering::SeqCst),
    );
    for _ in 0..iters {
        f();
    }
    let process = cpu_ns(libc::RUSAGE_SELF) - process;
    let server = SERVER_CPU_NS.load(Ordering::SeqCst) - server;
    Duration::from_nanos(process.saturating_sub(server))
}

/// A reply of `DELTAS` one-token text chunks, a finish chunk, a usage chunk and `[DONE]`,
/// each event its own write, as llama-server sends them.
fn events() -> Vec<Vec<u8>> {
    let head = r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"#;
    let tail = r#"}}],"created":1795993459,"id":"chatcmpl-M3hUd40FVD9G6dvFgeuhw4IEQqQj0KIS","model":"smollm2","system_fingerprint":"b1-0c1e570","object":"chat.completion.chunk"}"#;
    let mut out = Vec::with_capacity(DELTAS + 3);
    for i in 0..DELTAS {
        let token = serde_json::to_string(&format!(" tok{}", i % 100)).unwrap();
        out.push(format!("data: {head}{token}{tail}\n\n").into_bytes());
    }
    out.push(
        br#"data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"object":"chat.completion.chunk"}

"#
        .to_vec(),
    );
    out.push(
        br#"data: {"choices":[],"usage":{"completion_tokens":2000,"prompt_tokens":39,"total_tokens":2039}}

"#
        .to_vec(),
    );
    out.push(b"data: [DONE]\n\n".to_vec());
    out
}

/// The same reply as the Responses API streams it, in OpenAI's shape.
fn responses_events() -> Vec<Vec<u8>> {
    let id = "msg_68c1e0a9f3b48190a2b0c6d4e8f1a2b3";
    let event = |seq: usize, kind: &str, rest: &str| {
        format!("event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{seq},{rest}}}\n\n")
            .into_bytes()
    };
    let response = |status: &str, usage: &str| {
        format!(
            r#""response":{{"id":"resp_68c1e0a9","object":"response","created_at":1795993459,"status":"{status}","model":"gpt-5-mini","output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[]{usage}}}"#
        )
    };
    let mut out = vec![
        event(0, "response.created", &response("in_progress", "")),
        event(
            1,
            "response.output_item.added",
            &format!(
                r#""output_index":0,"item":{{"id":"{id}","type":"message","status":"in_progress","content":[],"role":"assistant"}}"#
            ),
        ),
    ];
    for i in 0..DELTAS {
        let token = serde_json::to_string(&format!(" tok{}", i % 100)).unwrap();
        out.push(event(
            i + 2,
            "response.output_text.delta",
            &format!(r#""item_id":"{id}","output_index":0,"content_index":0,"delta":{token},"logprobs":[]"#),
        ));
    }
    let n = DELTAS + 2;
    out.push(event(
        n,
        "response.output_item.done",
        &format!(r#""output_index":0,"item":{{"id":"{id}","type":"message","status":"completed","content":[],"role":"assistant"}}"#),
    ));
    out.push(event(
        n + 1,
        "response.completed",
        &response(
            "completed",
            r#","usage":{"input_tokens":39,"input_tokens_details":{"cached_tokens":0},"output_tokens":2000,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":2039}"#,
        ),
    ));
    out
}

/// The same reply as Anthropic's Messages API streams it.
fn anthropic_events() -> Vec<Vec<u8>> {
    let event = |kind: &str, rest: &str| {
        format!("event: {kind}\ndata: {{\"type\":\"{kind}\",{rest}}}\n\n").into_bytes()
    };
    let mut out = vec![
        event(
            "message_start",
            r#""message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":39,"output_tokens":1}}"#,
        ),
        event(
            "content_block_start",
            r#""index":0,"content_block":{"type":"text","text":""}"#,
        ),
    ];
    for i in 0..DELTAS {
        let token = serde_json::to_string(&format!(" tok{}", i % 100)).unwrap();
        out.push(event(
            "content_block_delta",
            &format!(r#""index":0,"delta":{{"type":"text_delta","text":{token}}}"#),
        ));
    }
    out.push(event("content_block_stop", r#""index":0"#));
    out.push(event(
        "message_delta",
        r#""delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2000}"#,
    ));
    out.push(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".to_vec());
    out
}

/// The replies the server streams, by the API a request is for.
struct Streams {
    chat: Vec<Vec<u8>>,
    responses: Vec<Vec<u8>>,
    anthropic: Vec<Vec<u8>>,
}

/// Serves the reply to every request, close-delimited, until the process ends: the Chat
/// Completions stream, the Responses one to a request for `/responses`, Anthropic's to one
/// for `/messages`.
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let events = Arc::new(Streams {
        chat: events(),
        responses: responses_events(),
        anthropic: anthropic_events(),
    });
    std::thread::spawn(move || {
        pin(Side::Server);
        for stream in listener.incoming() {
            let events = events.clone();
            std::thread::spawn(move || reply(stream.unwrap(), &events));
        }
    });
    url
}

fn reply(stream: TcpStream, events: &Streams) {
    let start = cpu_ns(libc::RUSAGE_THREAD);
    write_reply(&stream, events);
    // Recorded before the stream closes, so the client's EOF comes after it.
    SERVER_CPU_NS.fetch_add(cpu_ns(libc::RUSAGE_THREAD) - start, Ordering::SeqCst);
}

fn write_reply(stream: &TcpStream, streams: &Streams) {
    let mut events = &streams.chat[..];
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream);
    let mut len = 0;
    let mut bulk = false;
    let mut short = false;
    let mut paced = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        bulk |= line.starts_with("POST /bulk/");
        short |= line.starts_with("POST /short/");
        paced |= line.starts_with("POST /paced/");
        if line.starts_with("POST ") && line.contains("/responses ") {
            events = &streams.responses[..];
        }
        if line.starts_with("POST ") && line.contains("/messages ") {
            events = &streams.anthropic[..];
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            len = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    LAST_BODY_BYTES.store(len, Ordering::SeqCst);
    let mut out = stream;
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    if short {
        let n = events.len();
        let _ = out.write_all(&[&events[0][..], &events[n - 3], &events[n - 1]].concat());
        return;
    }
    if bulk {
        let _ = out.write_all(&events.concat());
        return;
    }
    for event in events {
        if out.write_all(event).is_err() {
            return;
        }
        if paced {
            std::thread::sleep(PACE);
        }
    }
}

fn agent_run(url: &str) {
    run_on(OpenAiCompat::new(format!("{url}/v1")), 1);
}

fn agent_run_responses(url: &str) {
    run_on(OpenAiResponses::new(format!("{url}/v1")), 1);
}

/// Anthropic reports usage twice: the input as the message starts, the output at its end.
fn agent_run_anthropic(url: &str) {
    run_on(Anthropic::new(url), 2);
}

/// A prompt on a fresh agent of `provider`, whose reply is the deltas and `usages` usage
/// reports.
fn run_on(provider: impl Provider + 'static, usages: usize) {
    let agent = Agent::builder()
        .provider(provider)
        .model("smollm2")
        .build()
        .unwrap();
    let deltas = Arc::new(AtomicUsize::new(0));
    let seen = deltas.clone();
    let _sub = agent.subscribe(move |e: &AgentEvent| {
        if let AgentEvent::MessageUpdate { .. } = e {
            seen.fetch_add(1, Ordering::Relaxed);
        }
    });
    black_box(agent.prompt("Hello").unwrap());
    assert_eq!(
        deltas.load(Ordering::Relaxed),
        DELTAS + usages,
        "the deltas and the usage"
    );
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
    content: Option<std::borrow::Cow<'a, str>>,
}

/// Reads the reply over raw TCP, splits it into events at blank lines and parses each one.
fn minimal_reader(addr: &str, prefix: &str) -> usize {
    let body =
        br#"{"model":"smollm2","messages":[{"role":"user","content":"Hello"}],"stream":true}"#;
    read_events(addr, &format!("{prefix}/v1/chat/completions"), body, parse)
}

/// POSTs `body` to `path` over raw TCP and hands each event of the reply (split at blank
/// lines) to `parse`; returns the sum of what it returned.
fn read_events(addr: &str, path: &str, body: &[u8], parse: impl Fn(&[u8]) -> usize) -> usize {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(body).unwrap();
    let mut buf = Vec::new();
    let mut chunk = vec![0; 16 * 1024];
    let mut start = 0;
    let mut in_body = false;
    let mut deltas = 0;
    loop {
        let n = stream.read(&mut chunk).unwrap();
        if n == 0 {
            return deltas;
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf[start..].windows(2).position(|w| w == b"\n\n") {
            let event = &buf[start..start + end];
            start += end + 2;
            if !in_body {
                // The response head ends with CRLF CRLF; the first event follows it.
                in_body = true;
                if let Some(p) = event.windows(4).position(|w| w == b"\r\n\r\n") {
                    let first = &event[p + 4..];
                    deltas += parse(first);
                }
                continue;
            }
            deltas += parse(event);
        }
    }
}

fn parse(event: &[u8]) -> usize {
    let Some(data) = event.strip_prefix(b"data: ") else {
        return 0;
    };
    if data == b"[DONE]" {
        return 0;
    }
    let chunk: Chunk<'_> = serde_json::from_slice(data).unwrap();
    chunk
        .choices
        .iter()
        .filter(|c| c.delta.as_ref().is_some_and(|d| d.content.is_some()))
        .count()
}

#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    delta: Option<std::borrow::Cow<'a, str>>,
}

/// The minimal reader of the Responses stream: the same raw TCP request and event split,
/// each event's `data:` line (after its `event:` line) parsed into a borrowed struct of its
/// `type` and `delta`.
fn minimal_responses_reader(addr: &str, prefix: &str) -> usize {
    let body = br#"{"model":"smollm2","input":[{"role":"user","content":"Hello"}],"stream":true}"#;
    read_events(addr, &format!("{prefix}/v1/responses"), body, |event| {
        let Some(at) = event.windows(7).position(|w| w == b"\ndata: ") else {
            return 0;
        };
        let e: ResponsesEvent<'_> = serde_json::from_slice(&event[at + 7..]).unwrap();
        usize::from(e.kind == "response.output_text.delta" && e.delta.is_some())
    })
}

/// A transcript of `n` messages in turns of four: a question, a reply that calls a tool, the
/// tool's result, an answer (about 1 KB a turn).
fn transcript(n: usize) -> Vec<Arc<Message>> {
    let prose = "The quick brown fox jumps over the lazy dog; \"quoted\" text, and a newline.\n";
    (0..n)
        .map(|i| {
            Arc::new(match i % 4 {
                0 => Message::user(format!("Question {i}: {}", prose.repeat(2))),
                1 => Message::Assistant(AssistantMessage::new(
                    vec![
                        ContentBlock::text(prose.repeat(3)),
                        ContentBlock::ToolCall(ToolCall::new(
                            format!("call_{i}"),
                            "get_weather",
                            format!(r#"{{"city": "Paris {i}"}}"#),
                        )),
                    ],
                    StopReason::ToolUse,
                )),
                2 => Message::ToolResult(ToolResultMessage::new(
                    format!("call_{}", i - 1),
                    "get_weather",
                    prose.repeat(2),
                )),
                _ => Message::Assistant(AssistantMessage::new(
                    vec![ContentBlock::text(prose.repeat(4))],
                    StopReason::Stop,
                )),
            })
        })
        .collect()
}

fn request_bench(c: &mut Criterion, server: &str) {
    let provider = OpenAiCompat::new(format!("{server}/short/v1"));
    let mut group = c.benchmark_group("request/openai");
    for n in [1_000, 10_000] {
        let request = Request::new("smollm2", transcript(n)).with_system_prompt("You are terse.");
        let call = |request: &Request| {
            let end = provider
                .stream(request, &CancelToken::new(), &mut |e| {
                    black_box(e);
                    Ok(())
                })
                .unwrap();
            black_box(end);
        };
        call(&request);
        let bytes = LAST_BODY_BYTES.load(Ordering::SeqCst);
        println!("request/openai/{n}: {bytes} bytes sent");
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(n.to_string(), |b| {
            b.iter_custom(|iters| client_cpu(iters, || call(&request)))
        });
        // As the agent calls it: the transcript's body cache holds the JSON of every message
        // but the last, which is new each turn.
        let mut request = request.with_body_cache(BodyCache::new());
        call(&request);
        let mut turn = n;
        group.bench_function(format!("cached_{n}"), |b| {
            b.iter_custom(|iters| {
                client_cpu(iters, || {
                    turn += 1;
                    let last = request.messages.len() - 1;
                    request.messages[last] = Arc::new(Message::user(format!("Question {turn}")));
                    call(&request);
                })
            })
        });
    }
    group.finish();
}

/// The five clients' CPU per delta in `mode`, medians of 15 runs each, the clients' runs
/// alternating (so that all see the same machine load), and the ratios: each OpenAI agent
/// against the minimal reader of its API, and the Responses and Anthropic agents against
/// the Chat Completions one.
fn summary(server: &str, mode: &str) {
    let clients = [
        "agent",
        "minimal",
        "agent_responses",
        "minimal_responses",
        "agent_anthropic",
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); clients.len()];
    for _ in 0..15 {
        for (client, samples) in clients.iter().zip(&mut samples) {
            let cpu = client_cpu(1, || one_run(client, server, mode));
            samples.push(cpu.as_nanos() as f64 / DELTAS as f64);
        }
    }
    let m: Vec<f64> = samples
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    println!(
        "e2e {mode} (CPU per delta, median of 15 alternating runs): chat agent {:.0} ns, \
         minimal {:.0} ns: {:.2}x; responses agent {:.0} ns, minimal {:.0} ns: {:.2}x; \
         responses/chat agent {:.2}x; anthropic agent {:.0} ns, anthropic/chat agent {:.2}x",
        m[0],
        m[1],
        m[0] / m[1],
        m[2],
        m[3],
        m[2] / m[3],
        m[2] / m[0],
        m[4],
        m[4] / m[0]
    );
}

/// One run of `client` (`agent`, `agent_responses`, `agent_anthropic`, `minimal`,
/// `minimal_responses`)
/// against the server at `server` in `mode` (`bulk`, `per_token` or `paced`). Not inlined, so that
/// `valgrind --tool=callgrind --toggle-collect='*e2e::one_run*'` counts the client's
/// instructions alone (the server's threads are not in it).
#[inline(never)]
fn one_run(client: &str, server: &str, mode: &str) {
    let prefix = match mode {
        "bulk" => "/bulk",
        "per_token" => "",
        "paced" => "/paced",
        other => panic!("no mode {other}"),
    };
    let addr = server.trim_start_matches("http://");
    let url = format!("{server}{prefix}");
    match client {
        "agent" => agent_run(&url),
        "agent_responses" => agent_run_responses(&url),
        "agent_anthropic" => agent_run_anthropic(&url),
        "minimal" => assert_eq!(minimal_reader(addr, prefix), DELTAS),
        "minimal_responses" => assert_eq!(minimal_responses_reader(addr, prefix), DELTAS),
        other => panic!("no client {other}"),
    }
}

/// `E2E_RUNS=<client>,<mode>,<runs>`: that many runs of one client (see [`one_run`]), then
/// exit, for instruction counts: the difference between `<runs>` and 1 run, divided by the
/// runs between and by `DELTAS`, is the client's instructions per delta.
fn counted_runs(server: &str) -> bool {
    let Ok(spec) = std::env::var("E2E_RUNS") else {
        return false;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let [client, mode, runs] = parts[..] else {
        panic!("E2E_RUNS=<client>,<mode>,<runs>, not {spec}");
    };
    for _ in 0..runs.parse::<usize>().unwrap() {
        one_run(client, server, mode);
    }
    true
}

fn bench(c: &mut Criterion) {
    pin(Side::Client);
    let server = serve();
    if counted_runs(&server) {
        return;
    }
    let addr = server.trim_start_matches("http://").to_owned();
    for mode in ["bulk", "per_token", "paced"] {
        summary(&server, mode);
    }
    for (name, prefix) in [("per_token", ""), ("bulk", "/bulk")] {
        assert_eq!(minimal_reader(&addr, prefix), DELTAS);
        assert_eq!(minimal_responses_reader(&addr, prefix), DELTAS);
        let url = format!("{server}{prefix}");
        let mut group = c.benchmark_group(format!("e2e/{name}"));
        group.throughput(Throughput::Elements(DELTAS as u64));
        // A fresh agent per prompt, so the transcript (and the request) stays the same
        // size; building one takes microseconds next to the 2000 deltas.
        group.bench_function("agent", |b| {
            b.iter_custom(|iters| client_cpu(iters, || agent_run(&url)))
        });
        group.bench_function("agent_responses", |b| {
            b.iter_custom(|iters| client_cpu(iters, || agent_run_responses(&url)))
        });
        group.bench_function("agent_anthropic", |b| {
            b.iter_custom(|iters| client_cpu(iters, || agent_run_anthropic(&url)))
        });
        group.bench_function("minimal_reader", |b| {
            b.iter_custom(|iters| {
                client_cpu(iters, || {
                    black_box(minimal_reader(&addr, prefix));
                })
            })
        });
        group.bench_function("minimal_responses_reader", |b| {
            b.iter_custom(|iters| {
                client_cpu(iters, || {
                    black_box(minimal_responses_reader(&addr, prefix));
                })
            })
        });
        group.finish();
    }
    request_bench(c, &server);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
