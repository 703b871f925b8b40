//! Context that never overflows: the counts in the state, the sliding window, compaction,
//! overflow recovery, the servers' counts and windows, and sessions that restore a summary.
//! On the scripted provider and on a loopback server replaying recorded llama.cpp replies.

mod support;

use std::sync::{Arc, Mutex};

use pagent::context::{
    Compaction, CompactionReason, ContextPolicy, ContextUsage, SlidingWindow, estimate_message,
    estimate_text,
};
use pagent::llm::{Faux, FauxReply, Request, TokenCounter};
use pagent::{
    Agent, AgentEvent, ErrorKind, Message, RunStopReason, StopReason, ToolOutput, Usage, session,
    tool,
};
use serde_json::json;
use support::{Recorder, Reply, Server, data, openai};

/// `read`: a page of `WORDS` words, numbered by its argument.
fn reader() -> impl pagent::Tool {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Page {
        page: u32,
    }
    tool::typed("read", "Reads one page.", |p: Page, _| {
        Ok(ToolOutput::text(page(p.page)))
    })
}

const WORDS: usize = 60;

fn page(n: u32) -> String {
    format!("Page {n}: {}", "lorem ".repeat(WORDS))
}

fn read(n: u32) -> FauxReply {
    FauxReply::tool_call("read", json!({ "page": n })).with_id(format!("call_{n}"))
}

/// A model that reads pages 1..=n, then answers.
fn reading(n: u32) -> Faux {
    (1..=n)
        .fold(Faux::default(), |f, i| f.reply(read(i)))
        .reply(FauxReply::text("The end."))
}

fn builder(provider: Faux) -> pagent::AgentBuilder {
    Agent::builder()
        .provider(provider)
        .model("faux-1")
        .system_prompt("Read the book.")
        .tool(reader())
        .max_turns(64)
}

/// The messages `request` sends, as `role:first words`.
fn shape(request: &Request) -> Vec<String> {
    request
        .messages
        .iter()
        .map(|m| match &**m {
            Message::User(u) if u.summary.is_some() => "summary".to_owned(),
            Message::User(_) => "user".to_owned(),
            Message::Assistant(a) => match a.tool_calls().next() {
                Some(c) => format!("call:{}", c.id),
                None => "assistant".to_owned(),
            },
            Message::ToolResult(r) => format!("result:{}", r.tool_call_id),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Every tool result a request sends follows the call it answers, in the same request.
fn calls_and_results_together(request: &Request) {
    let mut open: Vec<String> = Vec::new();
    for m in &request.messages {
        match &**m {
            Message::Assistant(a) => open = a.tool_calls().map(|c| c.id.clone()).collect(),
            Message::ToolResult(r) => assert!(
                open.contains(&r.tool_call_id),
                "a result without its call: {:?}",
                shape(request)
            ),
            _ => open.clear(),
        }
    }
}

fn turn_ends(rec: &Recorder) -> Vec<ContextUsage> {
    rec.events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::TurnEnd { context, .. } => Some(context),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------- counting

#[test]
fn each_turn_end_counts_the_context_from_the_servers_usage_and_the_estimate() {
    let faux = Faux::default()
        .reply(read(1).usage(Usage::new(300, 20)))
        .reply(FauxReply::text("Done.").usage(Usage::new(500, 5)));
    let agent = builder(faux).context_window(1000).build().unwrap();
    let rec = Recorder::attach(&agent);
    agent.prompt("Go.").unwrap();
    let snapshot = agent.snapshot();
    let ends = turn_ends(&rec);
    assert_eq!(ends.len(), 2);
    // The last reply's count, and nothing estimated after it: the server's own figure.
    assert_eq!(ends[1], ContextUsage::new(505, Some(1000), 0, 0));
    assert_eq!(ends[1].share, Some(0.505));
    assert_eq!(snapshot.context, ends[1]);
    // After the first reply, its tool result was appended: estimated, scaled by how far the
    // estimate of the first request was off the server's 300.
    let first = ends[0];
    assert_eq!(first.window, Some(1000));
    let result = estimate_message(&snapshot.messages[2]);
    assert!(first.used > 320 && first.estimated > 0, "{first:?}");
    assert!(
        first.estimated >= result / 4 && first.estimated <= result * 4,
        "{first:?}"
    );
    assert_eq!(first.used, 320 + first.estimated);
}

#[test]
fn without_usage_the_figure_is_the_estimate_and_a_plugged_tokenizer_makes_it() {
    /// One token a word.
    struct Words;
    impl TokenCounter for Words {
        fn text_tokens(&self, text: &str) -> Option<u64> {
            Some(text.split_whitespace().count() as u64)
        }
    }
    // No usage reported: the figure is all estimate.
    let faux = Faux::default().reply(FauxReply::text("one two three").usage(Usage::default()));
    let agent = Agent::builder()
        .provider(faux)
        .token_counter(Words)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    agent.prompt("four five").unwrap();
    // Two messages of 4 framing tokens each, 2 + 3 words.
    assert_eq!(turn_ends(&rec), [ContextUsage::new(13, None, 13, 0)]);
    // The built-in estimate without the tokenizer.
    let faux = Faux::default().reply(FauxReply::text("one two three").usage(Usage::default()));
    let agent = Agent::builder().provider(faux).build().unwrap();
    agent.prompt("four five").unwrap();
    let expected: u64 = agent
        .snapshot()
        .messages
        .iter()
        .map(|m| estimate_message(m))
        .sum();
    assert_eq!(agent.snapshot().context.used, expected);
}

#[test]
fn a_restored_transcript_is_counted_when_the_agent_is_built() {
    let history = vec![Message::user("hello there"), Message::user(page(1))];
    let agent = Agent::builder()
        .provider(Faux::default())
        .model("gpt-4o")
        .messages(history.clone())
        .build()
        .unwrap();
    let expected: u64 = history.iter().map(estimate_message).sum();
    let c = agent.snapshot().context;
    assert_eq!((c.used, c.window), (expected, Some(128_000)));
}

// ---------------------------------------------------------------- the sliding window

#[test]
fn a_sliding_window_sends_the_newest_messages_within_its_budget() {
    let faux = reading(12).record_requests(64);
    let budget = 400;
    let agent = builder(faux.clone())
        .context_policy(SlidingWindow::tokens(budget))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("Read every page.").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    // The transcript keeps everything: the prompt, 12 calls and results, the answer.
    assert_eq!(agent.snapshot().messages.len(), 26);
    let requests = faux.requests();
    assert_eq!(requests.len(), 13);
    for r in &requests {
        calls_and_results_together(r);
        let sent: u64 = r.messages.iter().map(|m| estimate_message(m)).sum();
        let fixed = estimate_text("Read the book.") + 200;
        assert!(sent <= budget + fixed, "{sent}: {:?}", shape(r));
    }
    // The early requests send everything; the late ones start at a call.
    assert_eq!(shape(&requests[0]), ["user"]);
    let last = shape(&requests[12]);
    assert!(last[0].starts_with("call:"), "{last:?}");
    assert_eq!(last.last().unwrap(), "result:call_12");
    // The state says how many messages are left out.
    let ends = turn_ends(&rec);
    assert_eq!(ends[0].omitted, 0);
    // After the answer: the last request's messages and the answer are what is sent.
    assert_eq!(ends[12].omitted as usize, 26 - (last.len() + 1), "{last:?}");
}

#[test]
fn a_sliding_window_can_keep_the_first_user_message() {
    let faux = reading(12).record_requests(64);
    let agent = builder(faux.clone())
        .context_policy(SlidingWindow::tokens(400).keep_first_user(true))
        .build()
        .unwrap();
    agent.prompt("Read every page.").unwrap();
    let last = faux.requests().pop().unwrap();
    let shape = shape(&last);
    assert_eq!(shape[0], "user");
    assert_eq!(last.messages[0].text(), "Read every page.");
    assert!(shape[1].starts_with("call:"), "{shape:?}");
    calls_and_results_together(&last);
}

#[test]
fn a_sliding_window_by_share_waits_for_the_window() {
    // No window known: everything is sent.
    let faux = reading(6).record_requests(64);
    let agent = builder(faux.clone())
        .context_policy(SlidingWindow::share(0.5))
        .build()
        .unwrap();
    agent.prompt("Read.").unwrap();
    assert_eq!(faux.requests().last().unwrap().messages.len(), 13);
    // With one, half of it.
    let faux = reading(6).record_requests(64);
    let agent = builder(faux.clone())
        .context_window(600)
        .context_policy(SlidingWindow::share(0.5))
        .build()
        .unwrap();
    agent.prompt("Read.").unwrap();
    assert!(faux.requests().last().unwrap().messages.len() < 13);
}

// ---------------------------------------------------------------- compaction

fn compacting(pages: u32) -> Faux {
    // Reads `pages` pages; every request without tools is a summary request.
    let faux = Faux::default().record_requests(256);
    let calls = Arc::new(Mutex::new(0u32));
    faux.otherwise(move |request| {
        if request.tools.is_empty() {
            return FauxReply::text("Pages were read; they were all lorem.");
        }
        let mut n = calls.lock().unwrap();
        *n += 1;
        if *n > pages {
            FauxReply::text("The end.")
        } else {
            read(*n)
        }
    })
}

fn compaction_events(rec: &Recorder) -> Vec<String> {
    rec.events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::CompactionStart {
                reason, messages, ..
            } => Some(format!("CompactionStart {reason} {messages}")),
            AgentEvent::MessageEnd { message } => match &**message {
                Message::User(u) if u.summary.is_some() => {
                    Some(format!("summary replaces {}", u.summary.unwrap().replaces))
                }
                _ => None,
            },
            AgentEvent::CompactionEnd { reason, error, .. } => Some(format!(
                "CompactionEnd {reason} {}",
                error
                    .as_ref()
                    .map_or("ok".to_owned(), |e| e.message.clone())
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn compaction_summarizes_the_oldest_messages_at_the_threshold() {
    let faux = compacting(10);
    let agent = builder(faux.clone())
        .context_window(1000)
        .context_policy(Compaction::new().threshold(0.6).keep_recent(0.2))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("Read every page.").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    let events = compaction_events(&rec);
    assert!(!events.is_empty());
    assert!(
        events[0].starts_with("CompactionStart threshold "),
        "{events:?}"
    );
    assert!(events[1].starts_with("summary replaces "), "{events:?}");
    assert_eq!(events[2], "CompactionEnd threshold ok");
    // The events come between the turn's input and its reply, the summary between them.
    let names: Vec<&str> = rec.events().iter().map(|e| e.name()).collect();
    let at = names.iter().position(|n| *n == "CompactionStart").unwrap();
    assert_eq!(
        names[at..at + 5],
        [
            "CompactionStart",
            "MessageStart",
            "MessageEnd",
            "CompactionEnd",
            "MessageStart"
        ]
    );
    // No model request was ever over the threshold, and each sent after a compaction starts
    // with the latest summary.
    let requests = faux.requests();
    let model_calls: Vec<&Request> = requests.iter().filter(|r| !r.tools.is_empty()).collect();
    assert_eq!(model_calls.len(), 11);
    let mut seen_summary = false;
    for r in &model_calls {
        calls_and_results_together(r);
        let shape = shape(r);
        if shape[0] == "summary" {
            seen_summary = true;
            assert_eq!(shape.iter().filter(|s| *s == "summary").count(), 1);
        }
        assert!(!seen_summary || shape[0] == "summary", "{shape:?}");
    }
    assert!(seen_summary);
    // The summary request: the compaction prompt, no tools, the old messages as text.
    let summary_request = requests.iter().find(|r| r.tools.is_empty()).unwrap();
    assert_eq!(
        summary_request.system_prompt,
        pagent::context::COMPACTION_PROMPT
    );
    let asked = summary_request.messages[0].text();
    assert!(asked.contains("[user] Read every page."), "{asked}");
    assert!(
        asked.contains("[assistant calls read] {\"page\":1}"),
        "{asked}"
    );
    assert!(asked.contains("[read result] Page 1: lorem"), "{asked}");
    // The transcript keeps every message, the summaries among them.
    let snapshot = agent.snapshot();
    let summaries = snapshot
        .messages
        .iter()
        .filter(|m| matches!(&***m, Message::User(u) if u.summary.is_some()))
        .count();
    assert_eq!(snapshot.messages.len(), 1 + 20 + 1 + summaries);
    assert!(snapshot.context.omitted > 0);
    assert!(!snapshot.compacting);
    let summary = snapshot
        .messages
        .iter()
        .rev()
        .find(|m| matches!(&***m, Message::User(u) if u.summary.is_some()))
        .unwrap();
    assert_eq!(
        summary.text(),
        "[Previous conversation summary]\nPages were read; they were all lorem."
    );
}

/// The whole timeline of a run that compacts once: the compaction comes after the turn's
/// input and before the turn's reply, its summary
/// message between `CompactionStart` and `CompactionEnd`.
#[test]
fn a_compaction_run_emits_exactly_this_sequence() {
    let faux = compacting(3);
    let agent = builder(faux)
        .context_window(1000)
        .context_policy(Compaction::new().threshold(0.2).keep_recent(0.1))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    agent.prompt("Read every page.").unwrap();
    // Faux reports usage (its own count of each request); the figures are left out here.
    let lines: Vec<String> = rec
        .lines()
        .into_iter()
        .map(|l| {
            if l.starts_with("usage ") {
                "usage".into()
            } else {
                l
            }
        })
        .collect();
    let page = |n: u32| {
        [
            "MessageStart assistant".to_owned(),
            format!("call call_{n} read"),
            format!("args[0] x3 \"{{\\\"page\\\":{n}}}\""),
            "usage".to_owned(),
            "MessageEnd assistant ToolUse calls=1".to_owned(),
            format!("ToolStart call_{n} read {{\"page\":{n}}}"),
            format!("ToolExecute call_{n} {{\"page\":{n}}}"),
            format!("ToolEnd call_{n} ok Page {n}: {}", "lorem ".repeat(WORDS)),
            "MessageStart tool_result".to_owned(),
            "MessageEnd tool_result".to_owned(),
        ]
    };
    let compaction = [
        "CompactionStart",
        "MessageStart user",
        "MessageEnd user",
        "CompactionEnd",
    ]
    .map(str::to_owned);
    // Turn 4's request would be over 200 tokens (Faux's count of turn 3's, 191, plus the
    // reply and page 3): it compacts first.
    let mut want: Vec<String> = [
        "AgentStart",
        "TurnStart 1",
        "MessageStart user",
        "MessageEnd user",
    ]
    .map(str::to_owned)
    .into();
    want.extend(page(1));
    want.extend(["TurnEnd 1 continuing".into(), "TurnStart 2".into()]);
    want.extend(page(2));
    want.extend(["TurnEnd 2 continuing".into(), "TurnStart 3".into()]);
    want.extend(page(3));
    want.extend(["TurnEnd 3 continuing".into(), "TurnStart 4".into()]);
    want.extend(compaction);
    want.extend(
        [
            "MessageStart assistant",
            "text x2 \"The end.\"",
            "usage",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 4 no_tool_calls",
            // The summary call's usage counts in the run's.
            "AgentEnd no_tool_calls in=934 out=26",
        ]
        .map(str::to_owned),
    );
    assert_eq!(lines, want, "{lines:#?}");
    // Each compaction's figures: before it at or over the threshold, after it below.
    let figures: Vec<(u64, u64)> = rec
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::CompactionStart { context, .. } => Some((0, context.used)),
            AgentEvent::CompactionEnd { context, .. } => Some((1, context.used)),
            _ => None,
        })
        .collect();
    for pair in figures.chunks(2) {
        assert!(pair[0].1 >= 200 && pair[1].1 < 200, "{figures:?}");
    }
}

#[test]
fn a_failed_compaction_changes_nothing_and_the_run_goes_on() {
    let faux = Faux::default().record_requests(64);
    let calls = Arc::new(Mutex::new(0u32));
    let faux = faux.otherwise(move |request| {
        if request.tools.is_empty() {
            return FauxReply::fail("the summary model is down");
        }
        let mut n = calls.lock().unwrap();
        *n += 1;
        if *n > 4 {
            FauxReply::text("The end.")
        } else {
            read(*n)
        }
    });
    let agent = builder(faux)
        .context_policy(
            Compaction::new()
                .threshold_tokens(150)
                .keep_recent_tokens(50),
        )
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    agent.prompt("Read.").unwrap();
    let events = compaction_events(&rec);
    assert!(!events.is_empty());
    for pair in events.chunks(2) {
        assert!(
            pair[0].starts_with("CompactionStart threshold"),
            "{events:?}"
        );
        assert_eq!(
            pair[1],
            "CompactionEnd threshold provider error: the summary model is down"
        );
    }
    let snapshot = agent.snapshot();
    assert_eq!(snapshot.messages.len(), 10);
    assert_eq!(snapshot.context.omitted, 0);
    assert_eq!(snapshot.error_message, None);
}

#[test]
fn compaction_usage_counts_in_the_run() {
    let faux = Faux::default()
        .reply(read(1).usage(Usage::new(100, 10)))
        .reply(FauxReply::text("summary").usage(Usage::new(40, 4)))
        .reply(FauxReply::text("The end.").usage(Usage::new(60, 6)));
    let agent = builder(faux)
        .context_policy(Compaction::new().threshold_tokens(1).keep_recent_tokens(1))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("Read.").unwrap();
    assert_eq!(result.usage, Usage::new(200, 20));
    assert_eq!(agent.snapshot().run_usage, Usage::new(200, 20));
    let compaction_usage: Vec<Usage> = rec
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::CompactionEnd { usage, .. } => Some(*usage),
            _ => None,
        })
        .collect();
    assert_eq!(compaction_usage, [Usage::new(40, 4)]);
}

#[test]
fn a_session_restores_the_summary_and_sends_what_the_agent_sent() {
    let path = std::env::temp_dir().join(format!("pagent-context-{}.jsonl", std::process::id()));
    let faux = compacting(6);
    let agent = builder(faux.clone())
        .context_window(800)
        .context_policy(Compaction::new().threshold(0.5).keep_recent(0.2))
        .build()
        .unwrap();
    let writer = session::Writer::create(&path).unwrap();
    let _sub = agent.subscribe(writer.listener());
    agent.prompt("Read every page.").unwrap();
    let snapshot = agent.snapshot();
    let loaded = session::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(loaded.messages.len(), snapshot.messages.len());
    // The next request of the original agent, and of one restored from the session (with
    // no policy at all): the same messages.
    let next = |agent: &Agent, faux: &Faux| {
        agent.prompt("And now?").unwrap();
        faux.requests().last().unwrap().clone()
    };
    let restored_faux = Faux::default()
        .reply(FauxReply::text("ok"))
        .record_requests(4);
    let restored = builder(restored_faux.clone())
        .messages(loaded.messages)
        .build()
        .unwrap();
    let a = next(&agent, &faux);
    let b = next(&restored, &restored_faux);
    assert_eq!(shape(&a)[0], "summary");
    let texts = |r: &Request| r.messages.iter().map(|m| (**m).clone()).collect::<Vec<_>>();
    assert_eq!(texts(&a), texts(&b));
}

#[test]
fn transform_context_gets_what_the_policy_sends() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let faux = reading(8).record_requests(64);
    let agent = builder(faux.clone())
        .context_policy(SlidingWindow::tokens(300))
        .transform_context(move |messages| {
            sink.lock().unwrap().push(messages.len());
            messages
        })
        .build()
        .unwrap();
    agent.prompt("Read.").unwrap();
    let seen = seen.lock().unwrap().clone();
    let sent: Vec<usize> = faux.requests().iter().map(|r| r.messages.len()).collect();
    assert_eq!(seen, sent);
    assert!(
        *seen.last().unwrap() < 17,
        "the hook got the slid view: {seen:?}"
    );
}

// ---------------------------------------------------------------- overflow, on a loopback server

/// An OpenAI-compatible stream of one text reply with usage.
fn sse_text(text: &str, input: u64, output: u64) -> Reply {
    let chunk = |v: serde_json::Value| format!("data: {v}\n\n");
    let body = [
        chunk(json!({"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":text},"finish_reason":null}]})),
        chunk(json!({"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})),
        chunk(json!({"id":"c","model":"m","choices":[],"usage":{"prompt_tokens":input,"completion_tokens":output,"total_tokens":input+output}})),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    Reply::sse(body)
}

/// llama-server's own answer to a prompt over its context (recorded).
fn overflow() -> Reply {
    Reply::json(400, data("llama-server/err_context_overflow_stream.sse"))
}

/// A long conversation to start from.
fn history() -> Vec<Message> {
    (0..6)
        .flat_map(|i| {
            [
                Message::user(format!("Question {i}: {}", "why ".repeat(30))),
                Message::Assistant(pagent::AssistantMessage::new(
                    vec![pagent::ContentBlock::text(format!(
                        "Answer {i}: {}",
                        "because ".repeat(30)
                    ))],
                    StopReason::Stop,
                )),
            ]
        })
        .collect()
}

fn loopback(server: &Server, policy: ContextPolicy) -> (Agent, Recorder) {
    let agent = Agent::builder()
        .provider(openai(server))
        .model("smollm2")
        .messages(history())
        .context_policy(policy)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    (agent, rec)
}

#[test]
fn an_overflow_is_compacted_and_sent_again_once() {
    let server = Server::start(vec![
        overflow(),
        sse_text("They asked why; it was because.", 900, 12),
        // The exact count after the compaction: not llama.cpp.
        Reply::json(404, r#"{"error":"not found"}"#),
        sse_text("Here is the answer.", 600, 5),
    ]);
    let (agent, rec) = loopback(&server, ContextPolicy::Unbounded);
    let result = agent.prompt("And the last one?").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    let error = format!(
        "http status 400: request (5033 tokens) exceeds the available context size (4096 \
         tokens), try increasing it (POST {}/v1/chat/completions)",
        server.url
    );
    assert_eq!(
        rec.lines(),
        [
            "AgentStart",
            "TurnStart 1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            &format!("MessageEnd assistant Error calls=0 error={error}"),
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "CompactionStart",
            "MessageStart user",
            "MessageEnd user",
            "CompactionEnd",
            "MessageStart assistant",
            "text x1 \"Here is the answer.\"",
            "usage in=600 out=5 cache_read=0 cache_write=0 reasoning=0 total=605",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 2 no_tool_calls",
            "AgentEnd no_tool_calls in=1500 out=17",
        ]
    );
    let events = compaction_events(&rec);
    assert!(
        events[0].starts_with("CompactionStart overflow "),
        "{events:?}"
    );
    assert_eq!(events[2], "CompactionEnd overflow ok");
    // The one refused, the summary, the exact count of what is sent now (refused), the one
    // sent again with the summary first and the newest messages after it.
    let requests = server.requests();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v1/chat/completions",
            "/v1/chat/completions",
            "/apply-template",
            "/v1/chat/completions"
        ]
    );
    let first = requests[0].json();
    assert_eq!(first["messages"].as_array().unwrap().len(), 13);
    let summary = requests[1].json();
    assert!(summary.get("tools").is_none());
    assert_eq!(summary["messages"][0]["role"], "system");
    let again = requests[3].json();
    let sent = again["messages"].as_array().unwrap();
    assert!(sent.len() < 13, "{sent:?}");
    assert_eq!(
        sent[0]["content"],
        "[Previous conversation summary]\nThey asked why; it was because."
    );
    assert_eq!(sent.last().unwrap()["content"], "And the last one?");
    // The window the error named, and no error left in the state.
    let snapshot = agent.snapshot();
    assert_eq!(snapshot.context.window, Some(4096));
    assert_eq!(snapshot.error_message, None);
    assert_eq!(snapshot.stop_reason, Some(RunStopReason::NoToolCalls));
}

#[test]
fn a_second_overflow_ends_the_run_with_the_error() {
    let server = Server::start(vec![
        overflow(),
        sse_text("summary", 900, 12),
        Reply::json(404, r#"{"error":"not found"}"#),
        overflow(),
    ]);
    let (agent, _rec) = loopback(&server, ContextPolicy::Unbounded);
    let failed = agent.prompt("And the last one?").unwrap_err();
    assert_eq!(failed.kind(), ErrorKind::ContextOverflow);
    assert_eq!(server.requests().len(), 4);
    assert_eq!(
        agent.snapshot().error_kind,
        Some(ErrorKind::ContextOverflow)
    );
}

#[test]
fn overflow_recovery_can_be_turned_off() {
    let server = Server::start(vec![overflow()]);
    let agent = Agent::builder()
        .provider(openai(&server))
        .messages(history())
        .overflow_recovery(false)
        .build()
        .unwrap();
    let failed = agent.prompt("And the last one?").unwrap_err();
    assert_eq!(failed.kind(), ErrorKind::ContextOverflow);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn an_overflow_under_a_sliding_window_slides_and_is_sent_again() {
    let server = Server::start(vec![
        overflow(),
        // The exact count asked near the budget: not llama.cpp.
        Reply::json(404, r#"{"error":"not found"}"#),
        sse_text("ok", 100, 1),
    ]);
    // A budget the server's window cannot hold: the error teaches the window.
    let (agent, rec) = loopback(&server, SlidingWindow::tokens(100_000).into());
    agent.prompt("And the last one?").unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[1].path, "/apply-template");
    let again = requests[2].json()["messages"].as_array().unwrap().len();
    assert!(again < 13, "{again}");
    assert!(compaction_events(&rec).is_empty());
}

// ---------------------------------------------------------------- servers' counts and windows

#[test]
fn llama_cpp_reports_its_window_and_counts_a_request_exactly() {
    let server = Server::start(vec![
        // GET /props
        Reply::json(
            200,
            r#"{"default_generation_settings":{"n_ctx":2048},"total_slots":1}"#,
        ),
        // The exact count near the budget: /apply-template, then /tokenize.
        Reply::json(200, r#"{"prompt":"<|im_start|>user\nhi<|im_end|>\n"}"#),
        Reply::json(200, r#"{"tokens":[1,2,3]}"#),
        sse_text("ok", 3, 1),
    ]);
    let agent = Agent::builder()
        .provider(openai(&server))
        .model("smollm2")
        // 0.01 of 2048 is 20 tokens: the prompt is near it, so the server is asked.
        .context_policy(SlidingWindow::share(0.01))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    agent.prompt(format!("hi {}", "there ".repeat(12))).unwrap();
    let requests = server.requests();
    let paths: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        paths,
        [
            "GET /props",
            "POST /apply-template",
            "POST /tokenize",
            "POST /v1/chat/completions"
        ]
    );
    assert_eq!(requests[1].json()["messages"][0]["role"], "user");
    assert_eq!(
        requests[2].json(),
        json!({"content": "<|im_start|>user\nhi<|im_end|>\n"})
    );
    // Counted 3 and within the budget: nothing slid; the state has the window.
    assert_eq!(turn_ends(&rec)[0].window, Some(2048));
    assert_eq!(requests[3].json()["messages"].as_array().unwrap().len(), 1);
    // The count sent the model call's body, byte for byte (its messages' JSON written once,
    // into the transcript's cache, and taken from there by the call).
    assert_eq!(
        String::from_utf8_lossy(&requests[1].body),
        String::from_utf8_lossy(&requests[3].body)
    );
}

#[test]
fn a_server_without_the_endpoints_is_asked_once() {
    let server = Server::start(vec![
        Reply::json(404, r#"{"error":"not found"}"#),
        Reply::json(404, r#"{"error":"not found"}"#),
        sse_text("one", 10, 1),
        sse_text("two", 10, 1),
    ]);
    let agent = Agent::builder()
        .provider(openai(&server))
        .model("some-model")
        .context_policy(SlidingWindow::new())
        .build()
        .unwrap();
    agent.prompt("a").unwrap();
    agent.prompt("b").unwrap();
    let paths: Vec<String> = server
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        paths,
        [
            "GET /props",
            "GET /v1/models",
            "POST /v1/chat/completions",
            "POST /v1/chat/completions"
        ]
    );
}

#[test]
fn anthropic_counts_a_request_with_count_tokens() {
    let counted = || Reply::json(200, r#"{"input_tokens":42}"#);
    let server = Server::start(vec![counted(), counted(), counted()]);
    let provider =
        pagent::llm::Anthropic::new(server.url.clone()).api_key("sk-ant-test-0123456789");
    let counter = pagent::llm::Provider::token_counter(&provider).unwrap();
    let request = Request::new("claude-x", vec![Arc::new(Message::user("hi"))])
        .with_system_prompt("Be brief.");
    let n = counter
        .request_tokens(&request, &pagent::CancelToken::new())
        .unwrap();
    assert_eq!(n, Some(42));
    let got = &server.requests()[0];
    assert_eq!(got.path, "/v1/messages/count_tokens");
    assert_eq!(got.header("x-api-key"), Some("sk-ant-test-0123456789"));
    let body = got.json();
    assert!(body.get("max_tokens").is_none() && body.get("stream").is_none());
    // The system prompt as the Messages call sends it: a text block (a cache breakpoint on it).
    assert_eq!(body["system"][0]["text"], "Be brief.");
    assert_eq!(body["messages"][0]["role"], "user");
    counts_with_a_cache_send_the_same_body(&*counter, request, &server, Some(42));
}

#[test]
fn responses_counts_a_request_with_input_tokens() {
    let counted = || {
        Reply::json(
            200,
            r#"{"object":"response.input_tokens","input_tokens":17}"#,
        )
    };
    let server = Server::start(vec![counted(), counted(), counted()]);
    let provider = pagent::llm::OpenAiResponses::new(format!("{}/v1", server.url))
        .api_key("sk-test-0123456789")
        .max_output_tokens(64)
        .prompt_cache_key("k");
    let counter = pagent::llm::Provider::token_counter(&provider).unwrap();
    let request = Request::new("gpt-5-mini", vec![Arc::new(Message::user("hi"))])
        .with_system_prompt("Be brief.");
    let n = counter
        .request_tokens(&request, &pagent::CancelToken::new())
        .unwrap();
    assert_eq!(n, Some(17));
    let got = &server.requests()[0];
    assert_eq!(got.path, "/v1/responses/input_tokens");
    assert_eq!(
        got.header("authorization"),
        Some("Bearer sk-test-0123456789")
    );
    // Only what makes the input: no stream, store, include, output limit or cache routing.
    let body = got.json();
    let mut keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["input", "instructions", "model"]);
    assert_eq!(body["instructions"], "Be brief.");
    assert_eq!(body["input"][0]["role"], "user");
    counts_with_a_cache_send_the_same_body(&*counter, request, &server, Some(17));
}

/// Counts `request` twice with a body cache, as the agent counts (the cache filled, then
/// the messages' JSON from it): each body is the bytes of the first, uncached count.
fn counts_with_a_cache_send_the_same_body(
    counter: &dyn TokenCounter,
    request: Request,
    server: &Server,
    expected: Option<u64>,
) {
    let cached = request.with_body_cache(pagent::llm::BodyCache::new());
    for _ in 0..2 {
        let n = counter.request_tokens(&cached, &pagent::CancelToken::new());
        assert_eq!(n.unwrap(), expected);
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[1].body, requests[0].body);
    assert_eq!(requests[2].body, requests[0].body);
}

#[test]
fn the_state_after_a_compaction_is_the_mirrors() {
    let faux = compacting(6);
    let agent = builder(faux)
        .context_window(700)
        .context_policy(Compaction::new().threshold(0.5).keep_recent(0.2))
        .build()
        .unwrap();
    let writer = pagent::wire::Writer::new(Vec::new());
    let _sub = agent.subscribe(writer.listener());
    agent.prompt("Read.").unwrap();
    let lines = writer.with_output(|b| String::from_utf8(b.clone()).unwrap());
    assert!(lines.contains("\"method\":\"CompactionStart\""));
    let mut mirror = pagent::wire::Mirror::new();
    mirror.read_lines(lines.as_bytes(), |_, _| {}).unwrap();
    assert_eq!(mirror.state().timeline(), agent.snapshot().timeline());
    assert_eq!(mirror.state().context, agent.snapshot().context);
    assert!(mirror.state().context.omitted > 0);
    let reason = CompactionReason::Threshold;
    assert!(lines.contains(&format!("\"reason\":\"{reason}\"")));
}

// ---------------------------------------------------------------- the estimate over recorded runs

/// The requests of the live runs against llama-server (`tests/live_context.rs`, recorded with
/// `PAGENT_CONTEXT_RECORD`), each with the server's count of it: the built-in estimate of a
/// request alone, and the figure the agent works out for it from the previous request's count
/// (plus the estimate of what changed, scaled by how far the estimate was off then). That
/// figure is measured apart where the request only appended to the previous one (the agent's
/// figure at every turn) and where a slide or a compaction changed its start (where the agent
/// asks a server that counts, llama.cpp among them, for an exact count instead: the figure is
/// what a server without one gets).
#[test]
fn the_estimate_stays_within_its_bound_over_the_recorded_runs() {
    let mut raw_worst = 0.0f64;
    let mut appended_worst = 0.0f64;
    let mut changed_worst = 0.0f64;
    let (mut appended, mut changed) = (0, 0);
    for name in ["sliding", "compaction"] {
        let text = String::from_utf8(data(&format!("context/{name}.jsonl"))).unwrap();
        let mut lines = text.lines();
        let head: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        let system = head["system_prompt"].as_str().unwrap().to_owned();
        let tools: Vec<pagent::llm::ToolDefinition> =
            serde_json::from_value(head["tools"].clone()).unwrap();
        let mut previous: Option<(u64, u64, Vec<Arc<Message>>)> = None;
        for line in lines {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let messages: Vec<Arc<Message>> =
                serde_json::from_value(v["messages"].clone()).unwrap();
            let count = v["prompt_tokens"].as_u64().unwrap();
            let request = Request::new("smollm2", messages.clone())
                .with_system_prompt(system.clone())
                .with_tools(tools.clone());
            let estimate = pagent::context::estimate_request(&request);
            let error = |figure: u64| (figure as f64 - count as f64).abs() / count as f64;
            raw_worst = raw_worst.max(error(estimate));
            if let Some((c, e, before)) = &previous {
                let ratio = (*c as f64 / *e as f64).clamp(0.25, 4.0);
                let figure = (*c as f64 + ratio * (estimate as f64 - *e as f64)).round() as u64;
                let grew = messages.len() >= before.len()
                    && messages.iter().zip(before).all(|(a, b)| **a == **b);
                eprintln!(
                    "{name}: server {count:>5} estimate {estimate:>5} ({:>4.1}%) figure {figure:>5} ({:>4.1}%){}",
                    100.0 * error(estimate),
                    100.0 * error(figure),
                    if grew {
                        ""
                    } else {
                        " after a slide or a compaction"
                    }
                );
                if grew {
                    appended_worst = appended_worst.max(error(figure));
                    appended += 1;
                } else {
                    changed_worst = changed_worst.max(error(figure));
                    changed += 1;
                }
            }
            previous = Some((count, estimate, messages));
        }
    }
    eprintln!(
        "{appended} requests after appends, {changed} after a slide or a compaction: the \
         estimate alone is off by at most {:.1}%, the agent's figure by {:.1}% after appends \
         and {:.1}% after the others",
        100.0 * raw_worst,
        100.0 * appended_worst,
        100.0 * changed_worst
    );
    assert!(appended >= 10 && changed >= 2, "{appended} {changed}");
    // The bounds the docs give: 5% at every turn, 15% after a change of the start without an
    // exact count; the estimate alone within a factor of 1.5.
    assert!(appended_worst <= 0.05, "{:.1}%", 100.0 * appended_worst);
    assert!(changed_worst <= 0.15, "{:.1}%", 100.0 * changed_worst);
    assert!(raw_worst <= 0.5, "{:.1}%", 100.0 * raw_worst);
}

// ---------------------------------------------------------------- the sliding window, for any transcript

/// One step of a generated conversation: a user message, a text reply, or a reply with
/// `calls` tool calls followed by their results; each of `words` words.
#[derive(Clone, Debug)]
enum Step {
    User(usize),
    Text(usize),
    Calls(usize, usize),
}

fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
    use proptest::prelude::*;
    let step = prop_oneof![
        (1usize..40).prop_map(Step::User),
        (1usize..40).prop_map(Step::Text),
        (1usize..4, 1usize..80).prop_map(|(c, w)| Step::Calls(c, w)),
    ];
    proptest::collection::vec(step, 1..40)
}

fn conversation(steps: &[Step]) -> Vec<Message> {
    let mut out = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::User(w) => out.push(Message::user("ask ".repeat(w))),
            Step::Text(w) => out.push(Message::Assistant(pagent::AssistantMessage::new(
                vec![pagent::ContentBlock::text("say ".repeat(w))],
                StopReason::Stop,
            ))),
            Step::Calls(calls, w) => {
                let ids: Vec<String> = (0..calls).map(|c| format!("c{i}_{c}")).collect();
                out.push(Message::Assistant(pagent::AssistantMessage::new(
                    ids.iter()
                        .map(|id| {
                            pagent::ContentBlock::ToolCall(pagent::ToolCall::new(
                                id.clone(),
                                "read",
                                "{\"page\":1}",
                            ))
                        })
                        .collect(),
                    StopReason::ToolUse,
                )));
                for id in ids {
                    out.push(Message::ToolResult(pagent::ToolResultMessage::new(
                        id,
                        "read",
                        "page ".repeat(w),
                    )));
                }
            }
        }
    }
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

    /// Whatever the transcript and the budget: the request sends a run of the newest
    /// messages (after the pinned first user message, if kept) that never starts with a tool
    /// result, every result with its call; it fits the budget, unless only the newest
    /// message is left; `omitted` counts what was left out.
    #[test]
    fn a_sliding_window_never_separates_a_call_from_its_results(
        steps in steps(),
        budget in 20u64..2_000,
        keep_first in proptest::bool::ANY,
    ) {
        let history = conversation(&steps);
        let faux = Faux::default().record_requests(4).reply(FauxReply::text("ok"));
        let agent = Agent::builder()
            .provider(faux.clone())
            .model("faux-1")
            .messages(history.clone())
            .context_policy(SlidingWindow::tokens(budget).keep_first_user(keep_first))
            .build()
            .unwrap();
        agent.prompt("go").unwrap();
        let request = &faux.requests()[0];
        calls_and_results_together(request);
        let mut transcript: Vec<Message> = history.clone();
        transcript.push(Message::user("go"));
        let sent: Vec<&Message> = request.messages.iter().map(|m| &**m).collect();
        // The pinned first user message, when it was left out of the run.
        let first_user = transcript.iter().position(|m| matches!(m, Message::User(_)));
        let (pinned, run) = match (keep_first, first_user) {
            // (The run holds at least the prompt, `go`.)
            (true, Some(i)) if sent.len() > 1
                && transcript.len() - (sent.len() - 1) > i
                && sent[0] == &transcript[i] => (1, &sent[1..]),
            _ => (0, &sent[..]),
        };
        // A run of the newest messages.
        let tail = &transcript[transcript.len() - run.len()..];
        proptest::prop_assert!(run.iter().zip(tail).all(|(a, b)| *a == b));
        proptest::prop_assert!(!matches!(run[0], Message::ToolResult(_)));
        let estimate = pagent::context::estimate_request(request);
        proptest::prop_assert!(estimate <= budget || run.len() == 1, "{estimate} > {budget}");
        // The figures after the reply (one more message, sent): what was left out.
        let omitted = transcript.len() - run.len() - pinned;
        proptest::prop_assert_eq!(agent.snapshot().context.omitted, omitted as u64);
    }
}
