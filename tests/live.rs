//! The full agent against a real model server (llama.cpp's `llama-server` with SmolLM2-135M,
//! started by `../shared/llm-server/start.sh`). Ignored by a plain `cargo test`; run them with
//! `PAGENT_LIVE_BASE_URL=http://127.0.0.1:8091/v1 cargo test --test live -- --ignored`, the
//! variable naming the server's OpenAI-compatible base URL. `.ci/run` does that.
//!
//! The streamed reply and the tool loop run twice: over Chat Completions (`OpenAiCompat`) and
//! over the Responses API (`OpenAiResponses`, llama-server's `/v1/responses`); the tool loop
//! also over Anthropic Messages (llama-server's `/v1/messages`) with the prompt cache
//! breakpoints `Anthropic` writes by default.

#[path = "live/structured.rs"]
mod structured;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pagent::llm::{Anthropic, OpenAiCompat, OpenAiResponses, Provider};
use pagent::{Agent, AgentEvent, ErrorKind, RunStopReason, StopReason, ToolOutput, tool};
use serde_json::json;
use support::Recorder;
use support::answers::{City, few_shot, weather_json};

fn base() -> String {
    // OK to panic: these tests run only on request (`--ignored`), and then need the server.
    std::env::var("PAGENT_LIVE_BASE_URL")
        .expect("set PAGENT_LIVE_BASE_URL (e.g. http://127.0.0.1:8091/v1) to run the live tests")
}

fn live() -> OpenAiCompat {
    // The tiny model is deterministic at temperature 0; the timeouts leave room for a busy
    // machine.
    OpenAiCompat::new(base())
        .temperature(0.0)
        .first_byte_timeout(Duration::from_secs(120))
        .idle_timeout(Duration::from_secs(60))
}

/// The same server through its Responses API, replies capped at `max` tokens.
fn live_responses(max: u32) -> OpenAiResponses {
    OpenAiResponses::new(base())
        .temperature(0.0)
        .max_output_tokens(max)
        .first_byte_timeout(Duration::from_secs(120))
        .idle_timeout(Duration::from_secs(60))
}

fn agent(provider: impl Provider + 'static) -> (Agent, Recorder) {
    let agent = Agent::builder()
        .provider(provider)
        .model("smollm2")
        .tool(weather_json())
        .max_turns(3)
        // The few-shot history shows calls without results on purpose (see `few_shot`), and
        // llama-server takes it as it is.
        .repair_requests(false)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    (agent, rec)
}

#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_streamed_text_reply_with_usage() {
    streamed_text_reply_with_usage(live().max_tokens(24));
}

#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_responses_streamed_text_reply_with_usage() {
    streamed_text_reply_with_usage(live_responses(24));
}

fn streamed_text_reply_with_usage(provider: impl Provider + 'static) {
    let (agent, rec) = agent(provider);
    let result = agent.prompt("Say hello to Oslo.").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    let reply = result.messages[1].as_assistant().unwrap();
    assert!(!reply.text().is_empty());
    assert!(matches!(
        reply.stop_reason,
        StopReason::Stop | StopReason::Length
    ));
    assert!(
        result.usage.input > 0 && result.usage.output > 0,
        "{:?}",
        result.usage
    );
    let lines = rec.lines();
    let text_line = &lines[5];
    assert!(text_line.starts_with("text x"), "{lines:#?}");
    let u = result.usage;
    assert_eq!(
        lines,
        [
            "AgentStart",
            "TurnStart 1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            text_line,
            &format!(
                "usage in={} out={} cache_read={} cache_write=0 reasoning=0 total={}",
                u.input, u.output, u.cache_read, u.total
            ),
            &format!("MessageEnd assistant {:?} calls=0", reply.stop_reason),
            "TurnEnd 1 no_tool_calls",
            &format!("AgentEnd no_tool_calls in={} out={}", u.input, u.output),
        ]
    );
}

#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_tool_call_round_trip() {
    tool_call_round_trip(live().max_tokens(64));
}

#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_responses_tool_call_round_trip() {
    tool_call_round_trip(live_responses(64));
}

/// The server takes the `cache_control` breakpoints (tools, transcript) that `Anthropic`
/// sends by default.
#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_anthropic_tool_call_round_trip_with_cache_breakpoints() {
    let base = base();
    let provider = Anthropic::new(base.trim_end_matches("/v1"))
        .temperature(0.0)
        .max_tokens(64)
        .first_byte_timeout(Duration::from_secs(120))
        .idle_timeout(Duration::from_secs(60));
    tool_call_round_trip(provider);
}

fn tool_call_round_trip(provider: impl Provider + 'static) {
    let (agent, rec) = agent(provider);
    let result = agent.prompt(few_shot()).unwrap();
    let events = rec.events();
    // The tool ran with the model's arguments...
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolEnd { result, .. } => Some(result.clone()),
            _ => None,
        })
        .collect();
    assert!(!ends.is_empty(), "{:#?}", rec.lines());
    assert!(!ends[0].is_error, "{:?}", ends[0]);
    assert!(ends[0].text().contains("Paris"), "{:?}", ends[0]);
    // ...its result went back in the next request, and a final reply arrived.
    let snapshot = agent.snapshot();
    let tool_result_at = snapshot
        .messages
        .iter()
        .position(|m| m.as_tool_result().is_some())
        .unwrap();
    let after: Vec<_> = snapshot.messages.iter().skip(tool_result_at + 1).collect();
    assert!(
        after.iter().any(|m| m.as_assistant().is_some()),
        "a reply after the tool result"
    );
    assert!(matches!(
        result.stop_reason,
        RunStopReason::NoToolCalls | RunStopReason::MaxTurns
    ));
    let last = snapshot.messages.last().unwrap();
    assert!(last.as_assistant().is_some_and(|m| !m.is_empty()));
}

/// The README's recipe for small local models, as a user writes it: the few-shot history
/// handed to the builder (its last example call unanswered), `repair_requests(false)`, then
/// `prompt` with the question. The run used to append a synthesized "never answered" result
/// for that last example call, which the model then parroted instead of calling the tool.
#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_readme_recipe_makes_a_real_tool_call() {
    let mut history = few_shot();
    let question = history.pop().expect("the question comes last");
    let agent = Agent::builder()
        .provider(live().max_tokens(64))
        .model("smollm2")
        .tool(tool::typed(
            "get_weather",
            "Get the current weather for a city",
            |args: City, _| Ok(ToolOutput::text(format!("{}: 21 C, sunny", args.city))),
        ))
        .messages(history.clone())
        .repair_requests(false)
        .max_turns(2)
        .build()
        .unwrap();
    agent.prompt(question.text()).unwrap();
    let transcript = agent.snapshot().messages.to_vec();
    // The history is kept as given: no result after the last example call.
    assert_eq!(
        transcript[..history.len()]
            .iter()
            .map(|m| (**m).clone())
            .collect::<Vec<_>>(),
        history
    );
    assert_eq!(transcript[history.len()].text(), "Weather in Paris?");
    let reply = transcript[history.len() + 1]
        .as_assistant()
        .expect("the model's reply follows the question");
    let call = reply.tool_calls().next().unwrap_or_else(|| {
        panic!("no tool call: {:?}", reply.text());
    });
    assert_eq!(call.name, "get_weather");
    assert_eq!(call.parse_arguments().unwrap(), json!({"city": "Paris"}));
    let result = transcript[history.len() + 2]
        .as_tool_result()
        .expect("the tool's result");
    assert_eq!(result.text(), "Paris: 21 C, sunny");
    assert!(
        !transcript
            .iter()
            .any(|m| m.text().contains("never answered")),
        "a synthesized result in {transcript:#?}"
    );
}

#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_abort_mid_stream() {
    let provider = live();
    let (agent, _) = agent(provider.max_tokens(1000));
    let handle = agent.handle();
    let deltas = Arc::new(AtomicUsize::new(0));
    let seen = deltas.clone();
    let aborted_at = Arc::new(Mutex::new(None));
    let at = aborted_at.clone();
    let _sub = agent.subscribe(move |e: &AgentEvent| {
        if let AgentEvent::MessageUpdate { .. } = e
            && seen.fetch_add(1, Ordering::SeqCst) == 4
        {
            *at.lock().unwrap() = Some(Instant::now());
            handle.abort();
        }
    });
    let result = agent
        .prompt("Write a very long story about a dragon.")
        .unwrap();
    let returned = Instant::now();
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    let reply = result.messages[1].as_assistant().unwrap();
    assert_eq!(reply.stop_reason, StopReason::Aborted);
    assert!(!reply.text().is_empty(), "the partial reply is kept");
    // The stream stops at the abort: a few deltas already read may follow it, not the rest
    // of a 1,000-token story. (A bound on the latency would flake on a loaded machine; it
    // is reported, and measured in the benches.)
    let after_abort = deltas.load(Ordering::SeqCst) - 5;
    assert!(after_abort < 50, "{after_abort} deltas after the abort");
    let latency = returned - aborted_at.lock().unwrap().unwrap();
    eprintln!("abort to return: {latency:?}");
}

#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_context_overflow_is_a_typed_error() {
    let provider = live();
    let (agent, _) = agent(provider.max_tokens(8));
    // About 6000 tokens, over the server's 4096-token context.
    let long = "alpha beta gamma delta ".repeat(1500);
    let failed = agent.prompt(long).unwrap_err();
    assert_eq!(failed.result().stop_reason, RunStopReason::Error);
    assert_eq!(failed.kind(), ErrorKind::ContextOverflow, "{failed}");
    let error = failed.error();
    assert_eq!(error.status(), Some(400), "{error}");
    assert!(error.is_context_overflow(), "{error}");
}

/// The server's `/props`: what the model takes (`modalities`).
fn modalities() -> serde_json::Value {
    let root = base().trim_end_matches("/v1").to_owned();
    let props: serde_json::Value = ureq::get(format!("{root}/props"))
        .call()
        .expect("the server answers /props")
        .body_mut()
        .read_json()
        .expect("/props is JSON");
    props["modalities"].clone()
}

/// A prompt with a tiny PNG (one pixel).
fn with_image(text: &str) -> pagent::UserMessage {
    const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(PIXEL)
        .unwrap();
    pagent::UserMessage::new(text).with_part(pagent::Image::from_bytes(png).unwrap())
}

/// The test model cannot see (its `/props` says `vision: false`), so the image path is
/// checked as far as a text-only model lets it be: told so with `Accepts::text()`, the
/// provider refuses the image before sending anything; not told, each provider's image
/// reaches the server in a shape its parser takes as an image (it answers that image input
/// is not supported, where a part of a shape it does not know is an "unsupported
/// content[].type"), a typed server error with the server's own words.
#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_a_text_only_model_refuses_images_before_and_after_sending() {
    use pagent::llm::{Accepts, RetryPolicy};
    assert_eq!(modalities()["vision"], json!(false));
    let told = Agent::builder()
        .provider(live().accepts(Accepts::text()))
        .model("smollm2")
        .build()
        .unwrap();
    let refused = told.prompt(with_image("What is this?")).unwrap_err();
    assert!(
        matches!(refused.error(), pagent::Error::UnsupportedContent(_)),
        "{refused}"
    );
    assert_eq!(refused.kind(), ErrorKind::InvalidRequest(None));
    let root = base().trim_end_matches("/v1").to_owned();
    let providers: [(&str, Arc<dyn Provider>); 3] = [
        ("chat", Arc::new(live().retry(RetryPolicy::none()))),
        (
            "anthropic",
            Arc::new(
                Anthropic::new(&root)
                    .api_key("unused")
                    .retry(RetryPolicy::none())
                    .first_byte_timeout(Duration::from_secs(120)),
            ),
        ),
        (
            "responses",
            Arc::new(live_responses(8).retry(RetryPolicy::none())),
        ),
    ];
    for (api, provider) in providers {
        let agent = Agent::builder()
            .provider(provider)
            .model("smollm2")
            .build()
            .unwrap();
        let failed = agent.prompt(with_image("What is this?")).unwrap_err();
        let error = failed.error().to_string();
        assert!(
            error.contains("image input is not supported"),
            "{api}: {error}"
        );
        assert!(failed.error().status().is_some(), "{api}: {error}");
    }
}

/// A document of text goes as text, which every model reads: the server answers it.
#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_a_document_of_text_is_read_as_text() {
    let agent = Agent::builder()
        .provider(live().max_tokens(16))
        .model("smollm2")
        .build()
        .unwrap();
    let prompt = pagent::UserMessage::new("Repeat the word in the document.")
        .with_part(pagent::Document::text("word.txt", "banana"));
    let result = agent.prompt(prompt).unwrap();
    assert!(!result.text().is_empty());
    assert!(
        result.usage.input > 20,
        "the document was sent: {:?}",
        result.usage
    );
}
