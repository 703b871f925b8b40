//! The request body of a model call at 10, 1,000, 10,000 and 100,000 messages: built from
//! scratch, built per turn with the transcript's body cache (the transcript as sent the turn
//! before plus one new message), and the cost of writing the same bytes to a loopback socket.
//!
//! `cargo bench -p pagent-benches --bench bodies`
//!
//! Groups (per dialect: `chat`, `anthropic`, `responses`; N messages):
//! - `bodies/{dialect}_uncached_{N}`: the whole body serialized, no cache (as every model
//!   call did before the cache);
//! - `bodies/{dialect}_cached_{N}`: the body of one turn with the cache holding the other
//!   N - 1 messages: one message serialized, the rest looked up; written to `io::sink`;
//! - `bodies/socket_{N}`: writing the bytes of that (Chat Completions) body, already
//!   built, to a loopback TCP socket that a thread drains;
//! - `bodies/chat_cached_socket_{N}`: the cached build and its write to that socket (the
//!   pieces copied through a 128 KB buffer, as ureq sends them), which is what a turn pays
//!   for its body.
//!
//! The summary printed first gives the medians and the ratios to the socket write, from
//! its own runs (the variants' samples alternate, so they see the same machine load), and
//! the cost of joining the cached pieces into one buffer (what sending them as pieces
//! saves).
//!
//! For instruction counts, `BODIES_TURNS=<uncached|cached>,<messages>,<turns>` runs only
//! that many turns of that build and exits: under `valgrind --tool=callgrind`, the
//! difference between `<turns>` and 0 turns, divided by `<turns>`, is the cost of a turn.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use pagent::llm::{
    Anthropic, BodyCache, OpenAiCompat, OpenAiResponses, PromptCache, Request, ToolDefinition,
};
use pagent::{
    AssistantMessage, ContentBlock, Message, StopReason, ToolCall, ToolResultMessage, UserMessage,
};

const SIZES: [usize; 4] = [10, 1_000, 10_000, 100_000];

/// Message `i` of a tool loop: a prompt, then replies with a call and their results (about
/// 290 bytes of JSON each, as the transcripts measured before).
fn message(i: usize) -> Message {
    match i % 3 {
        0 => Message::from(UserMessage::new(format!(
            "Step {i}: look at the file list again and tell me which of them changed since \
             the last build, and why the tests of the parser fail on the second input."
        ))),
        1 => Message::Assistant(AssistantMessage::new(
            vec![
                ContentBlock::Text {
                    text: format!("Reading the list once more (step {i})."),
                },
                ContentBlock::ToolCall(ToolCall::new(
                    format!("call_{i}"),
                    "read_file",
                    format!(r#"{{"path":"src/parser/input_{i}.rs","lines":[1,200]}}"#),
                )),
            ],
            StopReason::ToolUse,
        )),
        _ => Message::ToolResult(ToolResultMessage::new(
            format!("call_{}", i - 1),
            "read_file",
            format!(
                "fn parse_{i}(input: &str) -> Result<Ast, Error> {{ let tokens = lex(input)?; \
                 Parser::new(tokens).expression() }} // {i} lines, unchanged since the build"
            ),
        )),
    }
}

fn transcript(n: usize) -> Vec<Arc<Message>> {
    (0..n).map(|i| Arc::new(message(i))).collect()
}

fn request(messages: Vec<Arc<Message>>, cache: Option<&BodyCache>) -> Request {
    let tool = ToolDefinition::new(
        "read_file",
        "Reads a file.",
        serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    );
    let request = Request::new("model", messages)
        .with_system_prompt("You are a careful engineer.")
        .with_tools(vec![tool]);
    match cache {
        Some(cache) => request.with_body_cache(cache.clone()),
        None => request,
    }
}

/// A provider's body writer.
type Write_ = fn(&Request, &mut dyn Write);

fn chat(r: &Request, out: &mut dyn Write) {
    OpenAiCompat::new("http://x/v1").write_body(r, out).unwrap();
}

fn anthropic(r: &Request, out: &mut dyn Write) {
    Anthropic::new("http://x")
        .prompt_cache(PromptCache::auto())
        .write_body(r, out)
        .unwrap();
}

fn responses(r: &Request, out: &mut dyn Write) {
    OpenAiResponses::new("http://x/v1")
        .write_body(r, out)
        .unwrap();
}

const DIALECTS: [(&str, Write_); 3] = [
    ("chat", chat),
    ("anthropic", anthropic),
    ("responses", responses),
];

/// One turn's setup: the transcript whose last message is new (the cache holds the others,
/// from the turn before).
struct Turn {
    messages: Vec<Arc<Message>>,
    cache: BodyCache,
    at: usize,
}

impl Turn {
    fn new(n: usize, write: Write_) -> Turn {
        let messages = transcript(n);
        let cache = BodyCache::new();
        write(
            &request(messages.clone(), Some(&cache)),
            &mut std::io::sink(),
        );
        Turn {
            messages,
            cache,
            at: n,
        }
    }

    /// The next turn's request: the last message replaced by a new one.
    fn next(&mut self) -> Request {
        self.at += 1;
        let last = self.messages.len() - 1;
        self.messages[last] = Arc::new(message(self.at));
        request(self.messages.clone(), Some(&self.cache))
    }
}

/// A loopback socket whose other end a thread drains.
fn socket() -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut buf = vec![0; 256 * 1024];
        while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
    });
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn summary() {
    let mut sock = socket();
    println!(
        "| messages | body | uncached | cached per turn | socket write | cached / socket | \
         cached + write / socket | cached, joined |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for n in SIZES {
        let samples = if n >= 100_000 { 7 } else { 31 };
        let messages = transcript(n);
        let bytes = {
            let mut v = Vec::new();
            chat(&request(messages.clone(), None), &mut v);
            v
        };
        let mut turn = Turn::new(n, chat);
        let (mut uncached, mut cached, mut write, mut both) = (vec![], vec![], vec![], vec![]);
        let mut joined = vec![];
        for _ in 0..samples {
            let r = request(messages.clone(), None);
            let t = Instant::now();
            chat(&r, &mut std::io::sink());
            uncached.push(t.elapsed());
            let r = turn.next();
            let t = Instant::now();
            chat(&r, &mut std::io::sink());
            cached.push(t.elapsed());
            drop(r);
            let t = Instant::now();
            sock.write_all(&bytes).unwrap();
            write.push(t.elapsed());
            let r = turn.next();
            let t = Instant::now();
            chat(&r, &mut sock);
            both.push(t.elapsed());
            let r = turn.next();
            let t = Instant::now();
            let mut one = Vec::new();
            chat(&r, &mut one);
            joined.push(t.elapsed());
            drop(one);
        }
        let (u, c, w, b) = (
            median(uncached),
            median(cached),
            median(write),
            median(both),
        );
        let j = median(joined);
        let ratio = |a: Duration| a.as_secs_f64() / w.as_secs_f64();
        println!(
            "| {n} | {:.2} MB | {u:.2?} | {c:.2?} | {w:.2?} | {:.2}x | {:.2}x | {j:.2?} |",
            bytes.len() as f64 / 1e6,
            ratio(c),
            ratio(b),
        );
    }
}

/// `BODIES_TURNS=<uncached|cached>,<messages>,<turns>`: that many turns only (see the
/// module docs). True when it ran.
fn turns_only() -> bool {
    let Ok(spec) = std::env::var("BODIES_TURNS") else {
        return false;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let [mode, n, turns] = parts[..] else {
        panic!("BODIES_TURNS=<uncached|cached>,<messages>,<turns>");
    };
    let (n, turns): (usize, usize) = (n.parse().unwrap(), turns.parse().unwrap());
    let mut turn = Turn::new(n, chat);
    let messages = transcript(n);
    for _ in 0..turns {
        match mode {
            "cached" => chat(&turn.next(), &mut std::io::sink()),
            _ => chat(&request(messages.clone(), None), &mut std::io::sink()),
        }
    }
    true
}

fn bodies(c: &mut Criterion) {
    if turns_only() {
        return;
    }
    summary();
    let mut g = c.benchmark_group("bodies");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut sock = socket();
    for n in SIZES {
        for (name, write) in DIALECTS {
            let messages = transcript(n);
            g.bench_function(format!("{name}_uncached_{n}"), |b| {
                b.iter_batched_ref(
                    || request(messages.clone(), None),
                    |r| write(r, &mut std::io::sink()),
                    BatchSize::LargeInput,
                )
            });
            let mut turn = Turn::new(n, write);
            g.bench_function(format!("{name}_cached_{n}"), |b| {
                b.iter_batched_ref(
                    || turn.next(),
                    |r| write(r, &mut std::io::sink()),
                    BatchSize::LargeInput,
                )
            });
        }
        let mut bytes = Vec::new();
        chat(&request(transcript(n), None), &mut bytes);
        g.bench_function(format!("socket_{n}"), |b| {
            b.iter(|| sock.write_all(&bytes).unwrap())
        });
        let mut turn = Turn::new(n, chat);
        g.bench_function(format!("chat_cached_socket_{n}"), |b| {
            b.iter_batched_ref(
                || turn.next(),
                |r| chat(r, &mut sock),
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bodies);
criterion_main!(benches);
