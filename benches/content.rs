//! What a 5 MB image costs: folding and publishing a run whose prompt carries it, and
//! building and sending a request that carries it on turn 10 of a tool loop.
//!
//! `cargo bench --bench content`
//!
//! Groups:
//! - `content/fold_run_{text,image_5mb}`: a three-turn run on the scripted provider (two tool
//!   calls, then a streamed answer of about 700 deltas) whose listener keeps every snapshot
//!   it reads, without and with a 5 MB PNG in the prompt;
//! - `content/request_turn10_{text,image_5mb}`: one Chat Completions model call (the body
//!   built from a transcript of ten turns, sent to a loopback server that reads it whole,
//!   and the short reply streamed back), without and with the image in the first message.
//!
//! The summary printed first gives, from a counting allocator, the bytes the run thread
//! allocated per run and per call, and the medians of a few runs side by side.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "../tests/alloc/counting.rs"]
mod counting;

use criterion::{Criterion, criterion_group, criterion_main};
use pagent::llm::{Faux, FauxReply, OpenAiCompat, Provider, Request};
use pagent::tool::{self, ToolOutput};
use pagent::{
    Agent, AgentEvent, AssistantMessage, Blob, CancelToken, ContentBlock, Image, Message,
    StopReason, ToolCall, ToolResultMessage, UserMessage,
};

fn allocated_by(f: impl FnOnce()) -> usize {
    counting::allocated_by(f).1
}

const FIVE_MB: usize = 5 * 1024 * 1024;

fn image() -> Blob {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.resize(FIVE_MB, 7);
    Blob::from(png)
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// One scripted run; the listener keeps every snapshot until the run ends.
fn fold_run(image: Option<&Blob>) -> usize {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("look", serde_json::json!({})))
        .reply(FauxReply::tool_call("look", serde_json::json!({})))
        .reply(FauxReply::text("a long answer ".repeat(200)));
    let agent = Agent::builder()
        .provider(faux)
        .tool(tool::typed("look", "Looks.", |_: NoArgs, _| {
            Ok(ToolOutput::text("seen"))
        }))
        .build()
        .unwrap();
    let kept = Arc::new(Mutex::new(Vec::with_capacity(1024)));
    let sink = kept.clone();
    let handle = agent.handle();
    agent
        .subscribe(move |_: &AgentEvent| sink.lock().unwrap().push(handle.snapshot()))
        .keep();
    let mut prompt = UserMessage::new("What is on the screen?");
    if let Some(image) = image {
        prompt = prompt.with_part(Image::new("image/png", image.clone()));
    }
    agent.prompt(prompt).unwrap();
    kept.lock().unwrap().len()
}

/// A loopback server that reads each request whole and streams a short text reply.
fn server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || connection(stream));
        }
    });
    url
}

const REPLY: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"A square.\"}}]}\n\n\
                     data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                     data: [DONE]\n\n";

fn connection(stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    let mut head = String::new();
    let mut body = Vec::new();
    loop {
        head.clear();
        let mut len = 0;
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
            if let Some((n, v)) = line.split_once(':')
                && n.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap();
            }
        }
        body.resize(len, 0);
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let msg = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{REPLY}",
            REPLY.len()
        );
        if out.write_all(msg.as_bytes()).is_err() {
            return;
        }
    }
}

/// A transcript of ten turns (nine tool calls and their results), the prompt first.
fn turn_10(image: Option<&Blob>) -> Request {
    let mut prompt = UserMessage::new("Look at the screen until the square turns red.");
    if let Some(image) = image {
        prompt = prompt.with_part(Image::new("image/png", image.clone()));
    }
    let mut messages = vec![Arc::new(Message::from(prompt))];
    for i in 0..9 {
        let id = format!("call_{i}");
        messages.push(Arc::new(Message::Assistant(AssistantMessage::new(
            vec![
                ContentBlock::text("Looking."),
                ContentBlock::ToolCall(ToolCall::new(&id, "look", "{}")),
            ],
            StopReason::ToolUse,
        ))));
        messages.push(Arc::new(Message::ToolResult(ToolResultMessage::new(
            &id,
            "look",
            "still blue",
        ))));
    }
    Request::new("m", messages)
}

fn call(provider: &OpenAiCompat, request: &Request) {
    let mut text = 0;
    provider
        .stream(request, &CancelToken::new(), &mut |e| {
            text += usize::from(matches!(e, pagent::llm::StreamEvent::TextDelta { .. }));
            Ok(())
        })
        .unwrap();
    assert!(text > 0);
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn summary(image: &Blob, provider: &OpenAiCompat) {
    let (text, with) = (turn_10(None), turn_10(Some(image)));
    // Warm up: the connection, lazy statics.
    call(provider, &text);
    fold_run(None);
    let fold_text = allocated_by(|| {
        fold_run(None);
    });
    let fold_image = allocated_by(|| {
        fold_run(Some(image));
    });
    let request_text = allocated_by(|| call(provider, &text));
    let request_image = allocated_by(|| call(provider, &with));
    let mut times: [Vec<Duration>; 4] = Default::default();
    for _ in 0..5 {
        for (i, run) in [
            &(|| {
                fold_run(None);
            }) as &dyn Fn(),
            &|| {
                fold_run(Some(image));
            },
            &|| call(provider, &text),
            &|| call(provider, &with),
        ]
        .into_iter()
        .enumerate()
        {
            let t = Instant::now();
            run();
            times[i].push(t.elapsed());
        }
    }
    let [ft, fi, rt, ri] = times.map(median);
    let snapshots = fold_run(Some(image));
    println!("content summary (medians of 5; bytes the run thread allocated):");
    println!(
        "  fold run, {snapshots} snapshots kept: text {ft:?} {fold_text} B; 5 MB image {fi:?} {fold_image} B (+{} B)",
        fold_image as i64 - fold_text as i64
    );
    println!(
        "  turn-10 request: text {rt:?} {request_text} B; 5 MB image {ri:?} {request_image} B \
         (base64 of the image: {} B)",
        FIVE_MB.div_ceil(3) * 4
    );
}

fn bench(c: &mut Criterion) {
    let image = image();
    let provider = OpenAiCompat::new(server());
    summary(&image, &provider);
    let mut g = c.benchmark_group("content");
    g.sample_size(20);
    g.bench_function("fold_run_text", |b| b.iter(|| fold_run(None)));
    g.bench_function("fold_run_image_5mb", |b| b.iter(|| fold_run(Some(&image))));
    let (text, with) = (turn_10(None), turn_10(Some(&image)));
    g.bench_function("request_turn10_text", |b| b.iter(|| call(&provider, &text)));
    g.bench_function("request_turn10_image_5mb", |b| {
        b.iter(|| call(&provider, &with))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
