//! Request bodies built with the transcript's body cache are byte for byte the bodies built
//! without it, for every dialect and every kind of message, over turns that grow the
//! transcript, slide it, retry, move Anthropic's breakpoints and switch options; and an
//! agent's model calls send exactly those bytes.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use pagent::llm::{
    Accepts, Anthropic, BodyCache, OnEvent, OpenAiCompat, OpenAiResponses, PromptCache, Provider,
    ReplyEnd, Request, ToolDefinition,
};
use pagent::{
    Agent, AssistantMessage, CancelToken, ContentBlock, Document, Error, Image, Message, Part,
    StopReason, ToolCall, ToolResultMessage, UserMessage,
};
use support::{Reply, Server, fast_retries};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
const PDF: &[u8] = b"%PDF-1.7 tiny";

/// Message `i` of a conversation that holds every kind of message in turn: text prompts,
/// prompts with images and documents, replies with text, tool calls, Anthropic's signed
/// thinking, the Responses API's reasoning items and unsigned thinking, empty replies, tool
/// results with parts (images, documents) and errors, summaries of a compaction, a prompt of
/// 24 KB.
fn message(i: usize) -> Message {
    let call = |n: usize| format!("call_{n}");
    match i % 12 {
        0 => Message::user(format!("Prompt {i}: \"quoted\", a tab\t, unicode é ✓")),
        1 => Message::Assistant(AssistantMessage::new(
            vec![
                ContentBlock::Thinking {
                    thinking: format!("Thinking about {i}"),
                    signature: Some(format!("sig-{i}")),
                },
                ContentBlock::text(format!("Text {i}")),
                ContentBlock::ToolCall(ToolCall::new(call(i), "look", r#"{"at": 1}"#)),
                ContentBlock::ToolCall(ToolCall::new(call(i + 100), "look", "not json")),
            ],
            StopReason::ToolUse,
        )),
        2 => Message::ToolResult(ToolResultMessage::new(call(i - 1), "look", "").with_parts([
            Part::text(format!("Result {i}")),
            Image::new("image/png", PNG).into(),
            Document::text("log.txt", "all fine").into(),
            Document::pdf(PDF).with_name("report.pdf").into(),
        ])),
        3 => Message::ToolResult(ToolResultMessage::error(
            call(i + 98),
            "look",
            "bad arguments",
        )),
        4 => Message::from(
            UserMessage::new(format!("Look at {i}"))
                .with_part(Image::new("image/png", PNG))
                .with_part(Image::url("https://example.com/a.png"))
                .with_part(Document::pdf(PDF))
                .with_part(Document::text("notes.md", "# Notes")),
        ),
        5 => Message::Assistant(AssistantMessage::new(
            vec![
                ContentBlock::Thinking {
                    thinking: "summary of the reasoning".into(),
                    signature: Some(format!(
                        r#"{{"type":"reasoning","id":"rs_{i}","encrypted_content":"enc{i}"}}"#
                    )),
                },
                ContentBlock::text(""),
                ContentBlock::text(format!("Two blocks {i}, ")),
                ContentBlock::text("joined"),
            ],
            StopReason::Stop,
        )),
        6 => Message::user(format!("Summary of the conversation so far ({i})")),
        // An empty reply (aborted before anything came): sends nothing anywhere.
        7 => Message::Assistant(AssistantMessage::new(vec![], StopReason::Error)),
        8 => Message::Assistant(AssistantMessage::new(
            vec![
                ContentBlock::Thinking {
                    thinking: "unsigned".into(),
                    signature: None,
                },
                ContentBlock::ToolCall(ToolCall::new(call(i), "clock", "")),
            ],
            StopReason::ToolUse,
        )),
        9 => Message::ToolResult(ToolResultMessage::new(call(i - 1), "clock", "12:00")),
        10 => Message::ToolResult(
            ToolResultMessage::new(call(i - 2), "shot", "").with_parts([Image::new(
                "image/png",
                PNG,
            )
            .into()]),
        ),
        // Large: a piece kept in the buffer it was written into, not copied.
        _ => Message::user(format!("Follow-up {i}: {}", "a long line ".repeat(2_000))),
    }
}

/// A body writer of one dialect, with its options.
type Writer = Box<dyn Fn(&Request, &mut dyn Write)>;

fn writers() -> Vec<(&'static str, Writer)> {
    let chat = OpenAiCompat::new("http://x/v1");
    let anthropic = Anthropic::new("http://x");
    let text_docs = Anthropic::new("http://x")
        .accepts(Accepts::all().documents(false))
        .prompt_cache(PromptCache::auto().one_hour(true));
    // The same dialect as `anthropic`, other breakpoints (kept JSON must not cross over).
    let one_hour = Anthropic::new("http://x").prompt_cache(PromptCache::auto().one_hour(true));
    let no_breakpoints = Anthropic::new("http://x").prompt_cache(PromptCache::off());
    let responses = OpenAiResponses::new("http://x/v1");
    let chained = OpenAiResponses::new("http://x/v1").previous_response_id(true);
    let extra = OpenAiCompat::new("http://x/v1").extra_body(serde_json::json!({"model": "o"}));
    vec![
        ("chat", Box::new(move |r, o| chat.write_body(r, o).unwrap())),
        (
            "chat extra_body",
            Box::new(move |r, o| extra.write_body(r, o).unwrap()),
        ),
        (
            "anthropic",
            Box::new(move |r, o| anthropic.write_body(r, o).unwrap()),
        ),
        (
            "anthropic text documents",
            Box::new(move |r, o| text_docs.write_body(r, o).unwrap()),
        ),
        (
            "anthropic one hour",
            Box::new(move |r, o| one_hour.write_body(r, o).unwrap()),
        ),
        (
            "anthropic no breakpoints",
            Box::new(move |r, o| no_breakpoints.write_body(r, o).unwrap()),
        ),
        (
            "responses",
            Box::new(move |r, o| responses.write_body(r, o).unwrap()),
        ),
        (
            "responses chained",
            Box::new(move |r, o| chained.write_body(r, o).unwrap()),
        ),
    ]
}

fn request(messages: &[Arc<Message>]) -> Request {
    Request::new("m", messages.to_vec())
        .with_system_prompt("Be terse.")
        .with_tools(vec![ToolDefinition::new(
            "look",
            "Looks.",
            serde_json::json!({"type": "object"}),
        )])
}

fn bytes(write: &Writer, request: &Request) -> Vec<u8> {
    let mut out = Vec::new();
    write(request, &mut out);
    out
}

/// The body with `cache` equals the body without; the cache then holds the messages sent.
fn same(write: &Writer, name: &str, step: &str, messages: &[Arc<Message>], cache: &BodyCache) {
    let plain = request(messages);
    let fresh = bytes(write, &plain);
    let cached = bytes(write, &plain.clone().with_body_cache(cache.clone()));
    assert!(
        fresh == cached,
        "{name}, {step}: the cached body differs:\n{}\n{}",
        String::from_utf8_lossy(&fresh),
        String::from_utf8_lossy(&cached)
    );
    serde_json::from_slice::<serde_json::Value>(&cached).expect("the body is JSON");
    assert!(!cache.is_empty(), "{name}, {step}: nothing was kept");
}

#[test]
fn cached_bodies_are_the_bytes_of_fresh_ones_over_every_kind_of_turn() {
    for (name, write) in writers() {
        let cache = BodyCache::new();
        let mut messages: Vec<Arc<Message>> = Vec::new();
        let mut next = 0;
        // The transcript grows by one message, then by a whole turn, a kind at a time:
        // Anthropic's breakpoints move to the newest user turns each time.
        for round in 0..30 {
            let more = if round % 3 == 0 { 3 } else { 1 };
            for _ in 0..more {
                messages.push(Arc::new(message(next)));
                next += 1;
            }
            same(&write, name, &format!("turn {round}"), &messages, &cache);
            // A retry of the same request.
            same(
                &write,
                name,
                &format!("turn {round} again"),
                &messages,
                &cache,
            );
        }
        assert!(
            cache.len() <= messages.len(),
            "{name}: the cache outgrew the request"
        );
        // A context policy's slide: the oldest messages dropped, a summary in front; the
        // dropped messages are freed, and new ones may take their addresses.
        let mut slid = vec![Arc::new(Message::user("Summary of the start"))];
        slid.extend(messages.drain(..).skip(14));
        let kept = slid.len();
        for round in 0..12 {
            slid.push(Arc::new(message(next)));
            next += 1;
            same(
                &write,
                name,
                &format!("after the slide, turn {round}"),
                &slid,
                &cache,
            );
        }
        assert!(
            cache.len() <= slid.len(),
            "{name}: the slide's dropped pieces stayed"
        );
        // A transform that rewrites one message and keeps the others.
        slid[kept / 2] = Arc::new(Message::user("rewritten by a hook"));
        same(&write, name, "a rewritten message", &slid, &cache);
        // A hook that sends one message twice, and the list reversed.
        let mut twice = slid.clone();
        twice.push(slid[3].clone());
        same(&write, name, "a message twice", &twice, &cache);
        let reversed: Vec<_> = slid.iter().rev().cloned().collect();
        same(&write, name, "reversed", &reversed, &cache);
        // A request of a single new message, then the long one again.
        same(
            &write,
            name,
            "a summary request",
            &[Arc::new(message(0))],
            &cache,
        );
        assert_eq!(
            cache.len(),
            1,
            "{name}: the pieces of the long request stayed"
        );
        same(&write, name, "the long one again", &slid, &cache);
    }
}

/// The same cache handed to each dialect in turn (a provider switched between turns): the
/// pieces of one dialect never go into another's body.
#[test]
fn a_cache_handed_to_another_dialect_never_sends_the_first_ones_pieces() {
    let cache = BodyCache::new();
    let messages: Vec<Arc<Message>> = (0..24).map(|i| Arc::new(message(i))).collect();
    for round in 0..3 {
        for (name, write) in writers() {
            same(&write, name, &format!("round {round}"), &messages, &cache);
        }
    }
}

/// The tools' JSON is kept while the requests hand the same list (as an agent does, turn
/// after turn), and written again for another list, or for another dialect given the same
/// cache: each body is the bytes of a fresh one.
#[test]
fn the_tools_are_written_again_only_for_another_list_or_dialect() {
    let messages: Vec<Arc<Message>> = (0..6).map(|i| Arc::new(message(i))).collect();
    let tools = |name: &str, schema: serde_json::Value| -> Request {
        Request::new("m", messages.clone()).with_tools(vec![
            ToolDefinition::new(name, "Looks.", schema),
            ToolDefinition::new("other", "Other.", serde_json::json!({"type": "object"})),
        ])
    };
    let first = tools("look", serde_json::json!({"type": "object"}));
    // The same length and names, another schema: the list, not its length, decides.
    let second = tools(
        "look",
        serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    );
    same_as_fresh(
        "list",
        &[("first", &first), ("second", &second), ("first", &first)],
    );
    for (name, write) in writers() {
        assert_ne!(bytes(&write, &first), bytes(&write, &second), "{name}");
    }
}

/// With one cache for all the writers, twice over: each body of `steps`, written twice,
/// equals the body written without a cache (`what` names the steps' kind).
fn same_as_fresh(what: &str, steps: &[(&str, &Request)]) {
    let cache = BodyCache::new();
    for round in 0..2 {
        for (name, write) in writers() {
            for &(step, request) in steps {
                let fresh = bytes(&write, request);
                for again in 0..2 {
                    let cached = bytes(&write, &request.clone().with_body_cache(cache.clone()));
                    assert!(
                        fresh == cached,
                        "{name}, round {round}, {step} {what}, call {again}: the cached body \
                         differs:\n{}\n{}",
                        String::from_utf8_lossy(&fresh),
                        String::from_utf8_lossy(&cached)
                    );
                }
            }
        }
    }
}

/// The system prompt's JSON is kept while the requests hand the same text, and written
/// again for another text (of the same length too), or for another dialect or breakpoint
/// given the same cache: each body is the bytes of a fresh one.
#[test]
fn the_system_prompt_is_written_again_only_for_another_text_or_dialect() {
    let messages: Vec<Arc<Message>> = (0..6).map(|i| Arc::new(message(i))).collect();
    let with = |system: &str| request(&messages).with_system_prompt(system);
    // The same length, another text (and one a JSON string must escape).
    let first = with("Be terse.");
    let second = with("Be tense.");
    let quoted = with("Say \"hi\"\n");
    let none = with("");
    same_as_fresh(
        "prompt",
        &[
            ("first", &first),
            ("second", &second),
            ("first", &first),
            ("quoted", &quoted),
            ("none", &none),
            ("first", &first),
        ],
    );
    for (name, write) in writers() {
        assert_ne!(bytes(&write, &first), bytes(&write, &second), "{name}");
    }
}

/// A provider that records each request it is given, then calls the real one.
struct Recording<P> {
    inner: P,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl<P: Provider> Provider for Recording<P> {
    fn stream(
        &self,
        request: &Request,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, Error> {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.stream(request, cancel, on_event)
    }
}

const CALL: &str = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\
                    \"function\":{\"name\":\"look\",\"arguments\":\"{}\"}}]}}]}\n\n\
                    data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n\
                    data: [DONE]\n\n";
const TEXT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Done.\"}}]}\n\n\
                    data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                    data: [DONE]\n\n";

/// An agent's model calls over a tool loop, with a `transform_context` hook that drops the
/// oldest messages and a retried 503: each body the server read is the body of the request
/// the provider got, written without a cache.
#[test]
fn an_agent_sends_the_bytes_of_a_fresh_serialization_every_turn() {
    let mut replies = vec![Reply::json(503, "{}")];
    for _ in 0..6 {
        replies.push(Reply::sse(CALL));
    }
    replies.push(Reply::sse(TEXT));
    let server = Server::start(replies);
    let provider = OpenAiCompat::new(&server.url).retry(fast_retries());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder()
        .provider(Recording {
            inner: provider.clone(),
            requests: requests.clone(),
        })
        .tool(pagent::tool::typed("look", "Looks.", |_: NoArgs, _| {
            Ok(pagent::ToolOutput::text("a red square"))
        }))
        .transform_context(|messages| {
            let drop = messages.len().saturating_sub(6);
            messages.into_iter().skip(drop).collect()
        })
        .build()
        .unwrap();
    agent.prompt("Look until it is red.").unwrap();
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 7);
    let sent = server.requests();
    // The first body went twice (the 503, then its retry).
    assert_eq!(sent.len(), 8);
    assert_eq!(sent[0].body, sent[1].body);
    for (i, (request, recorded)) in requests.iter().zip(&sent[1..]).enumerate() {
        assert!(request.body_cache.is_some(), "call {i} had no cache");
        let mut fresh = request.clone();
        fresh.body_cache = None;
        let mut expected = Vec::new();
        provider.write_body(&fresh, &mut expected).unwrap();
        assert!(
            recorded.body == expected,
            "call {i}: sent\n{}\nexpected\n{}",
            String::from_utf8_lossy(&recorded.body),
            String::from_utf8_lossy(&expected)
        );
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}
