//! Context policies against a real model server with a small context: llama.cpp's
//! `llama-server` (SmolLM2-135M) started with `-c 2048` by `.ci/run`. Ignored by a plain
//! `cargo test`; run them with
//! `PAGENT_LIVE_SMALL_CTX_URL=http://127.0.0.1:8097/v1 cargo test --test live_context -- --ignored`.
//!
//! The run reads a book a page at a time (a tool returning about 200 tokens a page), from a
//! history of pages read, which is what makes the tiny model call the tool again. Without
//! a policy the transcript outgrows the 2,048-token context and the server refuses it
//! (`ContextOverflow`); with a sliding window or compaction the same run goes on to its end.
//! Along the way the state's count is compared with the server's own count of each request
//! (`prompt_tokens`, which is `/tokenize` of the prompt its chat template renders).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pagent::context::{Compaction, CompactionReason, ContextPolicy, ContextUsage, SlidingWindow};
use pagent::llm::OpenAiCompat;
use pagent::{
    Agent, AgentEvent, AssistantMessage, ContentBlock, ErrorKind, Message, RunStopReason,
    StopReason, ToolCall, ToolOutput, ToolResultMessage, tool,
};
use serde_json::json;

/// The documented bound of the state's count against the server's (see `pagent::context`).
const MAX_ERROR: f64 = 0.10;
const WINDOW: u64 = 2048;
/// How a run starts and how long it goes: the pages read in the history it starts from
/// (about 220 tokens each) and its turns (a page read, or a reply and a follow-up of about
/// 60 tokens, in each). Together more than the context holds; each turn costs `.ci/run`'s
/// 1-thread server seconds, so the runs are kept as short as that allows.
#[derive(Clone, Copy)]
struct Length {
    pages: u64,
    turns: u32,
}

/// Close to what the context holds from the start, so that a few turns go past it.
const SHORT: Length = Length { pages: 7, turns: 8 };
/// For compaction: with a long history compacted at once, the tiny model stops calling the
/// tool; from a shorter one it reads pages before and after the compaction.
const LONG: Length = Length {
    pages: 3,
    turns: 12,
};
/// Pages the model reads with the tool at least, past those of the history.
const MIN_PAGES: usize = 2;

fn url() -> String {
    // OK to panic: these tests run only on request (`--ignored`), and then need the server.
    std::env::var("PAGENT_LIVE_SMALL_CTX_URL").expect(
        "set PAGENT_LIVE_SMALL_CTX_URL (e.g. http://127.0.0.1:8097/v1) to a llama-server \
         started with a 2048-token context",
    )
}

fn provider() -> OpenAiCompat {
    OpenAiCompat::new(url())
        .temperature(0.0)
        .max_tokens(40)
        .first_byte_timeout(Duration::from_secs(300))
        .idle_timeout(Duration::from_secs(120))
}

const WORDS: [&str; 32] = [
    "river", "castle", "winter", "lantern", "harbor", "silver", "forest", "merchant", "candle",
    "garden", "thunder", "valley", "whisper", "captain", "meadow", "shadow", "ribbon", "orchard",
    "pilgrim", "tower", "harvest", "glacier", "falcon", "ember", "compass", "violet", "anchor",
    "quarry", "saddle", "beacon", "marble", "willow",
];

/// Page `n`: about 150 words, the same every time.
fn page(n: u64) -> String {
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let words: Vec<&str> = (0..150)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            WORDS[(x % WORDS.len() as u64) as usize]
        })
        .collect();
    format!("Page {n}. {}. Next: page {}.", words.join(" "), n + 1)
}

fn call(n: u64) -> Message {
    Message::Assistant(AssistantMessage::new(
        vec![ContentBlock::ToolCall(ToolCall::new(
            format!("call_{n}"),
            "read_page",
            json!({ "page": n }).to_string(),
        ))],
        StopReason::ToolUse,
    ))
}

/// The book so far: the task, and `pages` pages read.
fn history(pages: u64) -> Vec<Message> {
    let mut out = vec![Message::user(
        "Read the book, page by page, with read_page.",
    )];
    for n in 1..=pages {
        out.push(call(n));
        out.push(Message::ToolResult(ToolResultMessage::new(
            format!("call_{n}"),
            "read_page",
            page(n),
        )));
    }
    out
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Page {
    /// The page number.
    page: u64,
}

/// With `PAGENT_CONTEXT_RECORD=<dir>`, each run writes `<dir>/<name>.jsonl`: a line per
/// model request with the messages it sent and the server's count of it (`prompt_tokens`),
/// which `tests/context.rs` replays to measure the estimate offline.
struct Recording {
    sent: Mutex<Vec<Vec<Arc<Message>>>>,
}

fn record(
    name: &str,
    builder: pagent::AgentBuilder,
) -> (pagent::AgentBuilder, Option<(String, Arc<Recording>)>) {
    let Ok(dir) = std::env::var("PAGENT_CONTEXT_RECORD") else {
        return (builder, None);
    };
    let rec = Arc::new(Recording {
        sent: Mutex::new(Vec::new()),
    });
    let sink = rec.clone();
    let builder = builder.transform_context(move |messages| {
        sink.sent.lock().unwrap().push(messages.clone());
        messages
    });
    (builder, Some((format!("{dir}/{name}.jsonl"), rec)))
}

fn write_recording(agent: &Agent, recording: Option<(String, Arc<Recording>)>, length: Length) {
    let Some((path, rec)) = recording else {
        return;
    };
    let replies: Vec<u64> = agent
        .snapshot()
        .messages
        .iter()
        // The replies of the run, after the history it started from.
        .skip(history(length.pages).len())
        .filter_map(|m| m.as_assistant().map(|a| a.usage.input))
        .collect();
    let sent = rec.sent.lock().unwrap();
    let snapshot = agent.snapshot();
    let mut out = json!({
        "system_prompt": &*snapshot.system_prompt,
        "tools": &*snapshot.tools,
    })
    .to_string();
    out.push('\n');
    for (messages, count) in sent.iter().zip(replies) {
        if count == 0 {
            continue;
        }
        let line = json!({ "messages": messages, "prompt_tokens": count });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    std::fs::write(&path, out).unwrap();
    eprintln!("recorded {path}");
}

fn agent(policy: ContextPolicy, recover: bool, length: Length) -> Agent {
    let agent = builder(policy, recover, length).build().unwrap();
    keep_reading(&agent);
    agent
}

/// Keeps the loop going to its turn limit: when the model answers instead of calling the
/// tool, a follow-up asks for the next page. The 135M model calls `read_page` for a few pages,
/// then, with pages in its history, tends to write pages itself (no request can force its
/// tool call: llama-server takes neither a grammar with tools nor, for this template, a
/// `tool_choice` it enforces); either way the transcript grows each turn.
fn keep_reading(agent: &Agent) {
    let handle = agent.handle();
    agent
        .subscribe(move |e| {
            if let AgentEvent::MessageEnd { message } = e
                && let Some(reply) = message.as_assistant()
                && reply.stop_reason != StopReason::Error
                && reply.tool_calls().next().is_none()
            {
                handle.follow_up("Read the next page.").unwrap();
            }
        })
        .keep();
}

fn builder(policy: ContextPolicy, recover: bool, length: Length) -> pagent::AgentBuilder {
    Agent::builder()
        .provider(provider())
        .model("smollm2")
        .system_prompt("You read books with the read_page tool.")
        .tool(tool::typed(
            "read_page",
            "Reads one page of the book",
            |p: Page, _| Ok(ToolOutput::text(page(p.page))),
        ))
        .messages(history(length.pages))
        .max_turns(length.turns)
        .context_policy(policy)
        .overflow_recovery(recover)
}

/// What a run showed: pairs of a `TurnEnd`'s count and the server's count of the request
/// that followed it, kept when the policy did not change what is sent in between (a slide
/// changes `omitted`; a compaction's `CompactionEnd` gives the count after it).
#[derive(Default)]
struct Seen {
    pairs: Vec<(ContextUsage, u64)>,
    last: Option<ContextUsage>,
    pending: Option<(ContextUsage, u64)>,
    compactions: usize,
    /// Compactions after the server refused a request as over its context.
    overflows: usize,
    tools: usize,
}

fn watch(agent: &Agent) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sink = seen.clone();
    agent
        .subscribe(move |e| {
            let mut s = sink.lock().unwrap();
            match e {
                AgentEvent::TurnEnd { context, .. } => {
                    if let Some((before, server)) = s.pending.take()
                        && before.omitted == context.omitted
                    {
                        s.pairs.push((before, server));
                    }
                    s.last = Some(*context);
                }
                AgentEvent::CompactionStart {
                    reason: CompactionReason::Overflow,
                    ..
                } => s.overflows += 1,
                AgentEvent::CompactionEnd { context, .. } => {
                    s.compactions += 1;
                    s.last = Some(*context);
                }
                AgentEvent::ToolEnd { .. } => s.tools += 1,
                AgentEvent::MessageEnd { message } => {
                    if let Some(reply) = message.as_assistant()
                        && reply.usage.input > 0
                        && let Some(before) = s.last.take()
                    {
                        s.pending = Some((before, reply.usage.input));
                    }
                }
                _ => {}
            }
        })
        .keep();
    seen
}

/// The largest relative error of the state's count against the server's.
fn worst_error(seen: &Seen) -> f64 {
    let mut worst = 0.0f64;
    for (usage, server) in &seen.pairs {
        let error = (usage.used as f64 - *server as f64).abs() / *server as f64;
        eprintln!(
            "state {:>5} server {:>5} error {:>5.1}% (estimated {}, omitted {})",
            usage.used,
            server,
            100.0 * error,
            usage.estimated,
            usage.omitted
        );
        worst = worst.max(error);
    }
    assert!(!seen.pairs.is_empty(), "no request to compare");
    worst
}

#[test]
#[ignore = "needs a small-context model server: PAGENT_LIVE_SMALL_CTX_URL, see the module docs"]
fn live_small_context_without_a_policy_overflows() {
    let agent = agent(ContextPolicy::Unbounded, false, SHORT);
    let failed = agent.continue_run().unwrap_err();
    assert_eq!(failed.kind(), ErrorKind::ContextOverflow, "{failed}");
    // The server's own window, read from the error.
    assert!(failed.to_string().contains("(2048 tokens)"), "{failed}");
}

fn run_to_the_end(name: &str, policy: ContextPolicy, length: Length) -> (Agent, Arc<Mutex<Seen>>) {
    let (builder, recording) = record(name, builder(policy, false, length));
    let agent = builder.build().unwrap();
    keep_reading(&agent);
    let seen = watch(&agent);
    let result = agent.continue_run();
    write_recording(&agent, recording, length);
    let snapshot = agent.snapshot();
    let result = result.unwrap_or_else(|e| panic!("{e}: {:#?}", snapshot.context));
    // The follow-ups keep it going to its turn limit.
    assert_eq!(result.stop_reason, RunStopReason::MaxTurns);
    // The run read past what the window holds: the transcript is larger than the context.
    let transcript: u64 = snapshot
        .messages
        .iter()
        .map(|m| pagent::context::estimate_message(m))
        .sum();
    let shape: Vec<String> = snapshot
        .messages
        .iter()
        .map(|m| format!("{}: {:.60}", m.role(), m.text()))
        .collect();
    assert!(
        transcript > WINDOW,
        "the run stayed small: {transcript} tokens: {shape:#?}"
    );
    assert!(snapshot.context.omitted > 0);
    assert_eq!(snapshot.context.window, Some(WINDOW));
    (agent, seen)
}

#[test]
#[ignore = "needs a small-context model server: PAGENT_LIVE_SMALL_CTX_URL, see the module docs"]
fn live_small_context_sliding_window_runs_to_the_end() {
    let (_agent, seen) = run_to_the_end(
        "sliding",
        SlidingWindow::share(0.7).keep_first_user(true).into(),
        SHORT,
    );
    let seen = seen.lock().unwrap();
    assert!(seen.tools >= MIN_PAGES, "{} pages read", seen.tools);
    let worst = worst_error(&seen);
    assert!(worst <= MAX_ERROR, "worst error {:.1}%", 100.0 * worst);
}

#[test]
#[ignore = "needs a small-context model server: PAGENT_LIVE_SMALL_CTX_URL, see the module docs"]
fn live_small_context_compaction_runs_to_the_end() {
    let (_agent, seen) = run_to_the_end(
        "compaction",
        Compaction::new()
            .threshold(0.7)
            .keep_recent(0.45)
            .keep_first_user(true)
            .into(),
        LONG,
    );
    let seen = seen.lock().unwrap();
    assert!(seen.compactions >= 1);
    assert!(seen.tools >= MIN_PAGES, "{} pages read", seen.tools);
    let worst = worst_error(&seen);
    assert!(worst <= MAX_ERROR, "worst error {:.1}%", 100.0 * worst);
}

#[test]
#[ignore = "needs a small-context model server: PAGENT_LIVE_SMALL_CTX_URL, see the module docs"]
fn live_small_context_overflow_recovery_compacts_and_goes_on() {
    // No policy, but the recovery on (the default): each overflow is compacted and sent again.
    let agent = agent(ContextPolicy::Unbounded, true, SHORT);
    let seen = watch(&agent);
    let result = agent.continue_run().unwrap();
    assert_eq!(result.stop_reason, RunStopReason::MaxTurns);
    let seen = seen.lock().unwrap();
    assert!(seen.tools >= MIN_PAGES, "{} pages read", seen.tools);
    // Every compaction came after an overflow the server reported, and each overflowed
    // request was sent again once.
    assert!(seen.overflows >= 1);
    assert_eq!(seen.overflows, seen.compactions);
    let refused = agent
        .snapshot()
        .messages
        .iter()
        .filter(|m| {
            m.as_assistant()
                .is_some_and(|a| a.stop_reason == StopReason::Error)
        })
        .count();
    assert_eq!(refused, seen.overflows);
}
