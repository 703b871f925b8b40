//! Reading a transcript back: the messages of a session file or of a Redis conversation,
//! one JSON object each, read into `Message`s.
//!
//! `cargo bench --bench transcript`
//!
//! A transcript of 1,000 messages as an agent writes them (a prompt, then replies with a line
//! of text and a tool call, and their results), each message its own line:
//! - `transcript/one_pass`: read as `Message` (pagent's reading of the enums named by a
//!   field: `role`, and `type` for the content blocks);
//! - `transcript/derive`: the same lines read into the same types through serde's derive
//!   (`#[serde(tag = ..)]`, which buffers each object before it reads it), defined here: the
//!   reading pagent had before, for the ratio;
//! - `transcript/session_load`: `pagent::session::load` of the same lines in a file.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use pagent::{
    AssistantMessage, ContentBlock, Message, StopReason, ToolCall, ToolResultMessage, Usage,
    UserMessage,
};
use serde::Deserialize;

const MESSAGES: usize = 1_000;

/// The same types read through serde's derive.
mod derived {
    use super::*;

    #[derive(Deserialize)]
    #[serde(tag = "role", rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum Message {
        User(UserMessage),
        Assistant(Assistant),
        ToolResult(ToolResultMessage),
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    pub struct Assistant {
        content: Vec<Block>,
        stop_reason: StopReason,
        #[serde(default)]
        usage: Usage,
        #[serde(default)]
        model: String,
        #[serde(default)]
        response_id: Option<String>,
        #[serde(default)]
        error_message: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum Block {
        Text {
            text: String,
        },
        Thinking {
            thinking: String,
            #[serde(default)]
            signature: Option<String>,
        },
        ToolCall(ToolCall),
    }
}

fn transcript() -> Vec<Vec<u8>> {
    let mut out = vec![Message::user(
        "Find the weather in the five largest cities.",
    )];
    let mut i = 0;
    while out.len() < MESSAGES {
        let id = format!("call_{i:06}");
        out.push(Message::Assistant(
            AssistantMessage::new(
                vec![
                    ContentBlock::text("Let me look that up."),
                    ContentBlock::ToolCall(ToolCall::new(
                        id.clone(),
                        "weather",
                        format!("{{\"city\":\"city {i}\"}}"),
                    )),
                ],
                StopReason::ToolUse,
            )
            .with_model("qwen3-8b")
            .with_usage(Usage::new(1_200 + i, 24))
            .with_response_id(format!("chatcmpl-{i}")),
        ));
        out.push(Message::ToolResult(ToolResultMessage::new(
            id,
            "weather",
            format!("City {i}: 18 degrees, light rain, wind 12 km/h from the west."),
        )));
        i += 1;
    }
    out.truncate(MESSAGES);
    out.iter().map(|m| serde_json::to_vec(m).unwrap()).collect()
}

fn bench(c: &mut Criterion) {
    let lines = transcript();
    let mut g = c.benchmark_group("transcript");
    g.measurement_time(Duration::from_secs(8));
    g.bench_function("one_pass", |b| {
        b.iter(|| {
            for line in &lines {
                black_box(serde_json::from_slice::<Message>(line).unwrap());
            }
        })
    });
    g.bench_function("derive", |b| {
        b.iter(|| {
            for line in &lines {
                black_box(serde_json::from_slice::<derived::Message>(line).unwrap());
            }
        })
    });
    let dir = std::env::temp_dir().join(format!("pagent-transcript-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("session.jsonl");
    let mut file = Vec::new();
    for line in &lines {
        file.extend_from_slice(line);
        file.push(b'\n');
    }
    std::fs::write(&path, &file).unwrap();
    g.bench_function("session_load", |b| {
        b.iter(|| {
            let loaded = pagent::session::load(&path).unwrap();
            assert_eq!(loaded.messages.len(), MESSAGES);
            black_box(loaded)
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
