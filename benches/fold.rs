//! The cost of publishing one streamed text delta: fold into the state, store the snapshot,
//! dispatch to one listener. It must not grow with the transcript or the partial reply.
//!
//! `cargo bench --bench fold`
//!
//! Groups:
//! - `delta/transcript/{0,1000,100000}`: one delta into a short partial, with that many
//!   messages in the transcript.
//! - `delta/partial_1mb`: one delta into a 1 MB partial reply.
//! - `naive/transcript/*`: the baseline a whole-state clone would cost (copy the message list
//!   and the partial text for each delta), for the ratio.
//! - `dispatch/listeners/{1,10}`: the same delta with 1 and 10 listeners.
//! - `snapshot/under_writer`: `snapshot()` while another thread streams deltas.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use pagent::bench_support::Emitter;
use pagent::llm::StreamEvent;
use pagent::{AgentEvent, AssistantMessage, Message, PartialMessage, State};

fn state_with(messages: usize) -> State {
    let mut s = State::default();
    s.messages = (0..messages)
        .map(|i| Arc::new(Message::user(format!("message {i}"))))
        .collect();
    s
}

fn streaming(emitter: &Emitter, partial: &PartialMessage) {
    emitter.emit(AgentEvent::MessageStart {
        message: Arc::new(Message::Assistant(AssistantMessage::default())),
    });
    emitter.emit(AgentEvent::MessageUpdate {
        message: partial.clone(),
        delta: StreamEvent::text(""),
    });
}

/// Times `iters` deltas through the real event path, from a fresh emitter each sample.
fn time_deltas(messages: usize, prefill: usize, listeners: usize, iters: u64) -> Duration {
    let emitter = Emitter::new(state_with(messages));
    for _ in 0..listeners {
        emitter.subscribe(|e| {
            black_box(e);
        });
    }
    let mut partial = PartialMessage::new("m");
    if prefill > 0 {
        partial.push(&StreamEvent::text("x".repeat(prefill)));
    }
    streaming(&emitter, &partial);
    let delta = StreamEvent::text("abcd");
    let start = Instant::now();
    for _ in 0..iters {
        // What the loop does per delta: extend the partial, then emit.
        partial = partial.apply(&delta);
        emitter.emit(AgentEvent::MessageUpdate {
            message: partial.clone(),
            delta: delta.clone(),
        });
    }
    start.elapsed()
}

/// The baseline: a state that is cloned whole per delta (a `Vec` of messages and a `String`).
fn time_naive(messages: usize, iters: u64) -> Duration {
    #[derive(Clone)]
    struct NaiveState {
        messages: Vec<Arc<Message>>,
        partial: String,
    }
    let mut state = Arc::new(NaiveState {
        messages: (0..messages)
            .map(|i| Arc::new(Message::user(format!("message {i}"))))
            .collect(),
        partial: String::new(),
    });
    let start = Instant::now();
    for _ in 0..iters {
        let mut next = (*state).clone();
        next.partial.push_str("abcd");
        state = Arc::new(next);
        black_box(&state.messages);
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("delta");
    for n in [0usize, 1_000, 100_000] {
        g.bench_function(format!("transcript/{n}"), |b| {
            b.iter_custom(|iters| time_deltas(n, 0, 1, iters))
        });
    }
    g.bench_function("partial_1mb", |b| {
        b.iter_custom(|iters| time_deltas(0, 1 << 20, 1, iters))
    });
    g.finish();

    let mut g = c.benchmark_group("naive");
    for n in [0usize, 1_000, 100_000] {
        g.bench_function(format!("transcript/{n}"), |b| {
            b.iter_custom(|iters| time_naive(n, iters))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("dispatch");
    for listeners in [1usize, 10] {
        g.bench_function(format!("listeners/{listeners}"), |b| {
            b.iter_custom(|iters| time_deltas(0, 0, listeners, iters))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("snapshot");
    g.bench_function("under_writer", |b| {
        let emitter = Arc::new(Emitter::new(state_with(1_000)));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (emitter, stop) = (emitter.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut partial = PartialMessage::new("m");
                streaming(&emitter, &partial);
                let delta = StreamEvent::text("abcd");
                // Bounded: stops when the bench ends, or after a minute at most.
                let deadline = Instant::now() + Duration::from_secs(60);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    partial = partial.apply(&delta);
                    emitter.emit(AgentEvent::MessageUpdate {
                        message: partial.clone(),
                        delta: delta.clone(),
                    });
                    n += 1;
                    if n.is_multiple_of(100_000) {
                        // Start over so memory stays bounded.
                        partial = PartialMessage::new("m");
                    }
                }
            })
        };
        b.iter(|| black_box(emitter.snapshot()));
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
