//! The context policy's work per turn: count what the turn appended, decide (slide, or check
//! the compaction threshold), build the view the request sends, note the server's count, and
//! work out the figures of `TurnEnd`. It must cost O(new messages), not O(transcript).
//!
//! `cargo bench --bench context`
//!
//! Each turn appends a tool call and its result (about 60 tokens) to a transcript of
//! 10, 1,000 or 10,000 messages:
//! - `context/unbounded/N`: no policy. The view is the whole transcript, so building it is
//!   O(N) (a pointer per message): the request the loop made before policies existed.
//! - `context/sliding/N`: a sliding window of 4,000 tokens: the view stays about 130 messages.
//! - `context/compacted/N`: compaction below its threshold, after a summary that replaced all
//!   but the newest 40 messages.
//! - `context/count_only/N`: counting and the figures alone, without building the view.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use pagent::context_bench::Turns;
use pagent::{AssistantMessage, ContentBlock, Message, StopReason, ToolCall, ToolResultMessage};

fn pair(i: usize) -> [Arc<Message>; 2] {
    let id = format!("call_{i}");
    [
        Arc::new(Message::Assistant(AssistantMessage::new(
            vec![ContentBlock::ToolCall(ToolCall::new(
                id.clone(),
                "read",
                format!("{{\"page\":{i}}}"),
            ))],
            StopReason::ToolUse,
        ))),
        Arc::new(Message::ToolResult(ToolResultMessage::new(
            id,
            "read",
            format!("Page {i}: {}", "lorem ipsum dolor sit amet ".repeat(8)),
        ))),
    ]
}

fn transcript(n: usize) -> Vec<Message> {
    let mut out = vec![Message::user("Read the book.")];
    let mut i = 0;
    while out.len() < n {
        out.extend(pair(i).iter().map(|m| (**m).clone()));
        i += 1;
    }
    out.truncate(n);
    out
}

/// A transcript of `n` messages whose last but 40 are replaced by a summary at its end.
fn compacted(n: usize) -> Vec<Message> {
    let mut out = transcript(n.saturating_sub(1));
    let replaces = out.len().saturating_sub(40);
    let json = serde_json::json!({
        "role": "user",
        "content": "[Previous conversation summary]\nPages were read.",
        "summary": {"replaces": replaces, "tokens": 1000}
    });
    out.push(serde_json::from_value(json).unwrap());
    out
}

/// One turn on a copy of `base` (the copy made outside the timing): what one more turn
/// costs at the size of `base`, whatever the number of iterations.
fn one_turn(
    b: &mut criterion::Bencher<'_>,
    base: &Turns,
    budget: Option<u64>,
    threshold: Option<u64>,
    view: bool,
) {
    let p = pair(1_000_000);
    b.iter_batched(
        || base.clone(),
        |mut turns| {
            if view {
                black_box(turns.turn(&p, budget, threshold));
            } else {
                black_box(turns.count(&p));
            }
            turns
        },
        BatchSize::LargeInput,
    )
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("context");
    for n in [10, 1_000, 10_000] {
        let unbounded = Turns::new(transcript(n));
        // The window slid once already: the measured turn is a turn of a long run.
        let mut sliding = Turns::new(transcript(n));
        sliding.turn(&pair(999_999), Some(4_000), None);
        let compacted = Turns::new(compacted(n));
        g.bench_function(format!("unbounded/{n}"), |b| {
            one_turn(b, &unbounded, None, None, true)
        });
        g.bench_function(format!("sliding/{n}"), |b| {
            one_turn(b, &sliding, Some(4_000), None, true)
        });
        g.bench_function(format!("compacted/{n}"), |b| {
            one_turn(b, &compacted, None, Some(100_000), true)
        });
        g.bench_function(format!("count_only/{n}"), |b| {
            one_turn(b, &unbounded, None, None, false)
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
