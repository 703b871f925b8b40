//! The cost per streamed text delta of each wire dialect, both ways: writing the line of one
//! `MessageUpdate` (native, pagent v1, pagent v4), and reading one delta's line back into a
//! `Mirror` (our native line, pagent's `TextDelta`).
//!
//! `cargo bench --bench wire`
//!
//! Groups:
//! - `encode/{native,pagent_v1,pagent_v4}`: one text delta's line, from a `DialectEncoder` in
//!   the middle of a streaming reply, into a reused buffer (the native line carries the delta
//!   only, never the partial).
//! - `mirror/{native,pagent_v4}`: one delta's line decoded and folded by a `Mirror` in the
//!   middle of a streaming reply.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use pagent::llm::StreamEvent;
use pagent::wire::{Dialect, DialectEncoder, Mirror, encode_event_line};
use pagent::{AgentEvent, AssistantMessage, Message, PartialMessage};

/// The events of a run up to a streaming reply, then one delta of that reply.
fn opening() -> (Vec<AgentEvent>, AgentEvent) {
    let user = Arc::new(Message::user("Say hello."));
    let mut partial = PartialMessage::new("m");
    let delta = StreamEvent::text("abcd");
    partial.push(&StreamEvent::text("Hello, world. "));
    let opening = vec![
        AgentEvent::AgentStart,
        AgentEvent::TurnStart { turn: 1 },
        AgentEvent::MessageStart {
            message: user.clone(),
        },
        AgentEvent::MessageEnd { message: user },
        AgentEvent::MessageStart {
            message: Arc::new(Message::Assistant(AssistantMessage::default())),
        },
    ];
    let update = AgentEvent::MessageUpdate {
        message: partial.apply(&delta),
        delta,
    };
    (opening, update)
}

fn encode(c: &mut Criterion) {
    let (opening, update) = opening();
    let mut group = c.benchmark_group("encode");
    for (name, dialect) in [
        ("native", Dialect::Native),
        ("pagent_v1", Dialect::PagentV1),
        ("pagent_v4", Dialect::PagentV4),
    ] {
        let mut encoder = DialectEncoder::new(dialect);
        for event in &opening {
            encoder.encode_event_line(event);
        }
        let mut out = Vec::with_capacity(256);
        group.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                encoder.encode_event_to(black_box(&update), &mut out);
                black_box(out.len())
            })
        });
    }
    group.finish();
}

/// Times `iters` applications of `line` to a mirror that has read `opening`, fresh per sample
/// (so that the streaming reply does not grow across samples).
fn time_mirror(opening: &[String], line: &str, iters: u64) -> Duration {
    let mut mirror = Mirror::new();
    for l in opening {
        mirror.apply_line(l).expect("the opening reads");
    }
    let start = Instant::now();
    for _ in 0..iters {
        black_box(mirror.apply_line(black_box(line)).expect("the delta reads"));
    }
    start.elapsed()
}

fn mirror(c: &mut Criterion) {
    let (opening, update) = opening();
    let native: Vec<String> = opening.iter().map(encode_event_line).collect();
    let native_delta = encode_event_line(&update);
    let pagent = [
        r#"{"jsonrpc": "2.0", "method": "RunBegin", "params": {"user_input": "Say hello."}}"#,
        r#"{"jsonrpc": "2.0", "method": "TurnBegin", "params": {"turn": 0}}"#,
        r#"{"jsonrpc": "2.0", "method": "TextDelta", "params": {"text": "Hello, world. "}}"#,
    ]
    .map(String::from);
    let pagent_delta = r#"{"jsonrpc": "2.0", "method": "TextDelta", "params": {"text": "abcd"}}"#;
    let mut group = c.benchmark_group("mirror");
    group.bench_function("native", |b| {
        b.iter_custom(|iters| time_mirror(&native, &native_delta, iters))
    });
    group.bench_function("pagent_v4", |b| {
        b.iter_custom(|iters| time_mirror(&pagent, pagent_delta, iters))
    });
    group.finish();
}

criterion_group!(benches, encode, mirror);
criterion_main!(benches);
