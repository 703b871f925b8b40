//! Images, documents and audio through the providers: the request shape each API takes
//! (Chat Completions parts, Anthropic blocks), the capability check before anything is sent,
//! replayed replies of vision models, retries that send the same bytes, and the bytes shared,
//! never copied, from the prompt to the request.

mod support;

use std::sync::Arc;

use pagent::llm::{
    Accepts, Anthropic, BodyCache, Faux, FauxReply, OpenAiCompat, PromptCache, Request,
};
use pagent::{
    Agent, AgentEvent, AssistantMessage, Audio, Blob, CancelToken, ContentBlock, Document, Error,
    ErrorKind, Image, Message, Part, StopReason, ToolCall, ToolOutput, ToolResultMessage,
    UserMessage, tool,
};
use serde_json::{Value, json};
use support::{Recorder, Reply, Server, fast_retries, lines};

/// A tool without arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// A tiny PNG (a header: nothing decodes it here) and its base64.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUg==";
const PDF: &[u8] = b"%PDF-1.7 tiny";
const PDF_B64: &str = "JVBERi0xLjcgdGlueQ==";
const WAV: &[u8] = b"RIFF\0\0\0\0WAVEfmt ";
const WAV_B64: &str = "UklGRgAAAABXQVZFZm10IA==";

/// A transcript with every kind of part: a prompt with an inline image, an image by URL, a
/// named PDF, a document of text; a reply that calls two tools; a screenshot result (text,
/// an image, a document of text) and a text result; a follow-up.
fn transcript(audio: bool) -> Request {
    let mut prompt = UserMessage::new("Compare these.")
        .with_part(Image::new("image/png", PNG))
        .with_part(Image::url("https://example.com/chart.png"))
        .with_part(Document::pdf(PDF).with_name("invoice.pdf"))
        .with_part(Document::text("notes.txt", "Paid in May."));
    if audio {
        prompt = prompt.with_part(Audio::new("audio/wav", WAV));
    }
    let reply = AssistantMessage::new(
        vec![
            ContentBlock::text("Looking."),
            ContentBlock::ToolCall(ToolCall::new("call_1", "screenshot", "{}")),
            ContentBlock::ToolCall(ToolCall::new("call_2", "clock", "{}")),
        ],
        StopReason::ToolUse,
    );
    let shot = ToolResultMessage::new("call_1", "screenshot", "").with_parts([
        Part::text("The screen:"),
        Image::new("image/png", PNG).into(),
        Document::text("log.txt", "ok").into(),
    ]);
    let clock = ToolResultMessage::new("call_2", "clock", "12:00");
    Request::new(
        "m",
        [
            Message::from(prompt),
            Message::Assistant(reply),
            Message::ToolResult(shot),
            Message::ToolResult(clock),
            Message::user("And now?"),
        ]
        .into_iter()
        .map(Arc::new)
        .collect(),
    )
}

/// Chat Completions: user parts as `text` / `image_url` / `file` / `input_audio`, a document
/// of text as text; a tool message holds text only, so the screenshot's image follows the
/// run of tool results in one user message under a line naming its call.
#[test]
fn chat_completions_writes_every_part_in_its_own_shape() {
    let body = OpenAiCompat::new("http://x/v1").request_body(&transcript(true));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "Compare these."},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_B64}")}},
                {"type": "image_url", "image_url": {"url": "https://example.com/chart.png"}},
                {"type": "file", "file": {"filename": "invoice.pdf", "file_data": format!("data:application/pdf;base64,{PDF_B64}")}},
                {"type": "text", "text": "<document name=\"notes.txt\">\nPaid in May.\n</document>"},
                {"type": "input_audio", "input_audio": {"data": WAV_B64, "format": "wav"}},
            ]},
            {"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}},
                {"id": "call_2", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content":
                "The screen:\n[an image: in the next message]\n<document name=\"log.txt\">\nok\n</document>"},
            {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
            {"role": "user", "content": [
                {"type": "text", "text": "Attached to the result of `screenshot` (call call_1):"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_B64}")}},
            ]},
            {"role": "user", "content": "And now?"},
        ])
    );
}

/// Anthropic: `image` and `document` blocks with `base64`, `url` and `text` sources (a
/// title from the document's name), in the user turn and inside `tool_result` content; the
/// turn's breakpoint lands on its last block, whatever kind it is.
#[test]
fn anthropic_writes_images_and_documents_as_blocks() {
    let body = Anthropic::new("http://x")
        .prompt_cache(PromptCache::off())
        .request_body(&transcript(false));
    let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}});
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "Compare these."},
                image,
                {"type": "image", "source": {"type": "url", "url": "https://example.com/chart.png"}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64}, "title": "invoice.pdf"},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Paid in May."}, "title": "notes.txt"},
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "call_1", "name": "screenshot", "input": {}},
                {"type": "tool_use", "id": "call_2", "name": "clock", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "is_error": false, "content": [
                    {"type": "text", "text": "The screen:"},
                    image,
                    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "ok"}, "title": "log.txt"},
                ]},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "12:00", "is_error": false},
                {"type": "text", "text": "And now?"},
            ]},
        ])
    );
    // Breakpoints: the first user turn ends on a document block.
    let cached = Anthropic::new("http://x").request_body(&transcript(false));
    let first = &cached["messages"][0]["content"];
    assert_eq!(first[4]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(first[3].get("cache_control"), None);
    // Without documents, a document of text is a text block.
    let plain = Anthropic::new("http://x")
        .prompt_cache(PromptCache::off())
        .accepts(Accepts::all().documents(false));
    let r = Request::new(
        "m",
        vec![Arc::new(Message::from(
            UserMessage::new("Read:").with_part(Document::text("a.txt", "x")),
        ))],
    );
    assert_eq!(
        plain.request_body(&r)["messages"][0]["content"],
        json!([{"type": "text", "text": "Read:"}, {"type": "text", "text": "<document name=\"a.txt\">\nx\n</document>"}])
    );
}

/// A text-only prompt is written as it always was (one string, one text block).
#[test]
fn text_only_messages_keep_their_shape() {
    let r = Request::new("m", vec![Arc::new(Message::user("hi"))]);
    assert_eq!(
        OpenAiCompat::new("http://x/v1").request_body(&r)["messages"],
        json!([{"role": "user", "content": "hi"}])
    );
    assert_eq!(
        Anthropic::new("http://x")
            .prompt_cache(PromptCache::off())
            .request_body(&r)["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );
}

/// The prompt with an image, for the agent tests.
fn looking() -> UserMessage {
    UserMessage::new("What is on the screen?").with_part(Image::new("image/png", PNG))
}

/// The events of a run whose first model call was refused before it was sent.
const REFUSED: [&str; 8] = [
    "AgentStart",
    "TurnStart 1",
    "MessageStart user",
    "MessageEnd user",
    "MessageStart assistant",
    "MessageEnd assistant Error calls=0",
    "TurnEnd 1 error",
    "AgentEnd error in=0 out=0",
];

/// A part the model does not take, or the API cannot carry, fails the model call with a
/// typed error before anything is sent: the server sees no request, nothing is retried,
/// the run ends with `UnsupportedContent` (kind `invalid_request`) and keeps the prompt.
#[test]
fn a_part_the_model_does_not_take_fails_before_the_request_is_sent() {
    type Case = (
        fn(&str) -> Arc<dyn pagent::llm::Provider>,
        UserMessage,
        &'static str,
    );
    let cases: [Case; 5] = [
        (
            |url| Arc::new(OpenAiCompat::new(format!("{url}/v1")).accepts(Accepts::text())),
            looking(),
            "unsupported content: message 0 (user), part 1: an image (image/png, 16 bytes), which the model does not take (Accepts::images is off)",
        ),
        (
            |url| Arc::new(Anthropic::new(url).accepts(Accepts::all().images(false))),
            looking(),
            "unsupported content: message 0 (user), part 1: an image (image/png, 16 bytes), which the model does not take (Accepts::images is off)",
        ),
        (
            |url| Arc::new(OpenAiCompat::new(format!("{url}/v1"))),
            UserMessage::new("Read it.").with_part(Document::url("https://example.com/a.pdf")),
            "unsupported content: message 0 (user), part 1: a document by URL, which Chat Completions cannot carry: its documents go inline (Document::pdf, Document::load)",
        ),
        (
            |url| Arc::new(Anthropic::new(url)),
            UserMessage::new("Listen.").with_part(Audio::new("audio/wav", WAV)),
            "unsupported content: message 0 (user), part 1: audio (audio/wav, 16 bytes), which the Anthropic Messages API cannot carry: it takes no audio",
        ),
        (
            |url| {
                Arc::new(OpenAiCompat::new(format!("{url}/v1")).accepts(Accepts::all().urls(false)))
            },
            UserMessage::new("See.").with_part(Image::url("https://example.com/a.png")),
            "unsupported content: message 0 (user), part 1: an image by URL, which the model does not take (Accepts::urls is off: send the bytes inline)",
        ),
    ];
    for (provider, prompt, message) in cases {
        let server = Server::start(vec![Reply::sse(support::data(
            "written/openai_vision_reply.sse",
        ))]);
        let agent = Agent::builder()
            .provider(provider(&server.url))
            .model("m")
            .build()
            .unwrap();
        let rec = Recorder::attach(&agent);
        let e = agent.prompt(prompt.clone()).unwrap_err();
        assert_eq!(e.to_string(), message);
        assert!(matches!(e.error(), Error::UnsupportedContent(_)));
        assert_eq!(e.kind(), ErrorKind::InvalidRequest(None));
        let mut expected = lines(&REFUSED);
        let why = message.trim_start_matches("unsupported content: ");
        expected[5] =
            format!("MessageEnd assistant Error calls=0 error=unsupported content: {why}");
        assert_eq!(rec.lines(), expected);
        assert_eq!(server.requests().len(), 0, "{message}");
        let state = agent.snapshot();
        assert_eq!(*state.messages[0], Message::from(prompt));
        assert_eq!(state.error_kind, Some(ErrorKind::InvalidRequest(None)));
    }
}

/// The check holds for messages whose JSON the body cache already wrote: a message written
/// for a model that takes images is refused by one that does not (the cache is kept per
/// what the model takes), and a refused message stays refused on the next call, though its
/// JSON is cached; the vision model's calls go out, the refused ones never do.
#[test]
fn the_check_holds_for_messages_the_body_cache_already_wrote() {
    let server = Server::start(vec![
        Reply::sse(support::data("written/openai_vision_reply.sse")),
        Reply::sse(support::data("written/openai_vision_reply.sse")),
    ]);
    let vision = OpenAiCompat::new(format!("{}/v1", server.url)).retry(fast_retries());
    let text = OpenAiCompat::new(format!("{}/v1", server.url)).accepts(Accepts::text());
    let request = Request::new("m", vec![Arc::new(Message::from(looking()))])
        .with_body_cache(BodyCache::default());
    let call = |provider: &OpenAiCompat| {
        use pagent::llm::Provider;
        provider.stream(&request, &CancelToken::new(), &mut |_| Ok(()))
    };
    let refused = "unsupported content: message 0 (user), part 1: an image (image/png, 16 \
                   bytes), which the model does not take (Accepts::images is off)";
    call(&vision).unwrap();
    for _ in 0..2 {
        let e = call(&text).unwrap_err();
        assert!(matches!(e, Error::UnsupportedContent(_)));
        assert_eq!(e.to_string(), refused);
    }
    call(&vision).unwrap();
    assert_eq!(server.requests().len(), 2);
}

/// A screenshot tool on a vision model over Chat Completions, replayed: the tool returns an
/// image, the next request carries it after the tool message, and the reply (text, as any
/// reply) is read as always. The bytes the tool made are the bytes in the transcript, in
/// every snapshot and in the request: one allocation.
#[test]
fn a_screenshot_tool_loop_replays_through_chat_completions() {
    let server = Server::start(vec![
        Reply::sse(support::data("written/openai_vision_tool_call.sse")),
        Reply::sse(support::data("written/openai_vision_reply.sse")),
    ]);
    let screen = Blob::from(PNG.to_vec());
    let shot = screen.clone();
    let agent = Agent::builder()
        .provider(OpenAiCompat::new(format!("{}/v1", server.url)).retry(fast_retries()))
        .model("gpt-4o-mini")
        .tool(tool::typed(
            "screenshot",
            "Takes a screenshot",
            move |_: NoArgs, _| {
                Ok(ToolOutput::text("The screen now:")
                    .with_part(Image::new("image/png", shot.clone())))
            },
        ))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("Take a screenshot and describe it.").unwrap();
    assert_eq!(
        result.text(),
        "The screenshot shows a red square on a white background."
    );
    assert_eq!(
        rec.lines(),
        lines(&[
            "AgentStart",
            "TurnStart 1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "call call_shot1 screenshot",
            "args[0] x1 \"{}\"",
            "usage in=1109 out=11 cache_read=0 cache_write=0 reasoning=0 total=1120",
            "MessageEnd assistant ToolUse calls=1",
            "ToolStart call_shot1 screenshot {}",
            "ToolExecute call_shot1 {}",
            "ToolEnd call_shot1 ok The screen now:",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "MessageStart assistant",
            "text x5 \"The screenshot shows a red square on a white background.\"",
            "usage in=1402 out=9 cache_read=1024 cache_write=0 reasoning=0 total=1411",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 2 no_tool_calls",
            "AgentEnd no_tool_calls in=2511 out=20",
        ])
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].json()["messages"].clone();
    assert_eq!(
        messages.as_array().unwrap()[2..],
        [
            json!({"role": "tool", "tool_call_id": "call_shot1", "content": "The screen now:\n[an image: in the next message]"}),
            json!({"role": "user", "content": [
                {"type": "text", "text": "Attached to the result of `screenshot` (call call_shot1):"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_B64}")}},
            ]}),
        ]
    );
    // One copy of the bytes: the tool's, in the transcript and in every event that held it.
    let state = agent.snapshot();
    assert!(Blob::ptr_eq(
        state.messages[2].parts()[1].data().unwrap(),
        &screen
    ));
    for event in rec.events() {
        if let AgentEvent::ToolEnd { result, .. } = &event {
            assert!(Blob::ptr_eq(result.content[1].data().unwrap(), &screen));
        }
    }
}

/// A prompt with an image and a PDF to a vision model over Anthropic, replayed: the blocks
/// go out, the reply comes back as text.
#[test]
fn an_image_and_a_pdf_replay_through_anthropic() {
    let server = Server::start(vec![Reply::sse(support::data(
        "written/anthropic_vision.sse",
    ))]);
    let agent = Agent::builder()
        .provider(Anthropic::new(&server.url).retry(fast_retries()))
        .model("claude-sonnet-4-5")
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let prompt = looking().with_part(Document::pdf(PDF).with_name("invoice.pdf"));
    let result = agent.prompt(prompt).unwrap();
    assert_eq!(
        result.text(),
        "The image is a red square on white; the PDF is a one-page invoice."
    );
    assert_eq!(
        rec.lines(),
        support::with_prompt(&[
            "usage in=1580 out=2 cache_read=0 cache_write=0 reasoning=0 total=1582",
            "text x3 \"The image is a red square on white; the PDF is a one-page invoice.\"",
            "usage in=1580 out=19 cache_read=0 cache_write=0 reasoning=0 total=1599",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=1580 out=19",
        ])
    );
    let body = server.requests()[0].json();
    let content = &body["messages"][0]["content"];
    assert_eq!(content[1]["source"]["data"], PNG_B64);
    assert_eq!(content[2]["type"], "document");
    assert_eq!(content[2]["cache_control"], json!({"type": "ephemeral"}));
}

/// A retried request sends the very bytes of the first attempt: the body is written once
/// per model call, its image base64-encoded once, and each attempt sends that buffer.
#[test]
fn a_retry_sends_the_same_body_with_the_image_once() {
    let server = Server::start(vec![
        Reply::json(503, r#"{"error":{"message":"overloaded"}}"#),
        Reply::json(429, r#"{"error":{"message":"slow down"}}"#),
        Reply::sse(support::data("written/openai_vision_reply.sse")),
    ]);
    let agent = Agent::builder()
        .provider(OpenAiCompat::new(format!("{}/v1", server.url)).retry(fast_retries()))
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    let big = vec![7u8; 300_000];
    let prompt = UserMessage::new("What is it?").with_part(Image::new("image/png", big));
    agent.prompt(prompt).unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.body == requests[0].body));
    let body = String::from_utf8(requests[0].body.clone()).unwrap();
    assert_eq!(body.matches("data:image/png;base64,").count(), 1);
    assert!(
        body.len() > 400_000 && body.len() < 401_000,
        "{}",
        body.len()
    );
}

/// `Faux` takes every part, and what it records is what the agent sent: the prompt's own
/// bytes (the same allocation), a tool's image in the result of the next request.
#[test]
fn faux_sees_the_parts_the_agent_sends() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("screenshot", json!({})))
        .reply_with(|request| {
            let parts = request.messages.last().unwrap().parts();
            FauxReply::text(format!("{} parts", parts.len()))
        });
    let agent = Agent::builder()
        .provider(faux.clone())
        .tool(tool::typed(
            "screenshot",
            "Takes a screenshot",
            |_: NoArgs, _| Ok(ToolOutput::image(Image::new("image/png", PNG))),
        ))
        .build()
        .unwrap();
    let prompt = looking();
    let image = prompt.content[1].data().unwrap().clone();
    assert_eq!(agent.prompt(prompt).unwrap().text(), "1 parts");
    let requests = faux.requests();
    assert!(Blob::ptr_eq(
        requests[0].messages[0].parts()[1].data().unwrap(),
        &image
    ));
    let result = requests[1].messages[2].as_tool_result().unwrap();
    assert!(
        matches!(&result.content[..], [Part::Image(i)] if i.source.data().unwrap().as_bytes() == PNG)
    );
}

/// `Debug` of an event, a snapshot and a run's result prints the length of an image, never
/// its bytes.
#[test]
fn debug_never_prints_the_bytes() {
    let agent = Agent::builder()
        .provider(Faux::new([FauxReply::text("ok")]))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let prompt = UserMessage::new("Look.")
        .with_part(Image::new("image/png", vec![b'A'; 1 << 20]))
        .with_part(Document::text("big.txt", "B".repeat(1 << 20)))
        .with_part(Audio::new("audio/wav", vec![b'C'; 1 << 20]));
    let result = agent.prompt(prompt).unwrap();
    let texts = [
        format!("{:?}", agent.snapshot()),
        format!("{result:?}"),
        format!("{:?}", rec.events()),
    ];
    for text in texts {
        assert!(text.contains("Blob(1048576 bytes)"), "{}", &text[..200]);
        assert!(!text.contains("AAAAAAAA") && !text.contains("BBBBBBBB"));
        assert!(!text.contains("CCCCCCCC") && !text.contains("QUFBQUFB"));
        assert!(text.len() < 64 * 1024, "{}", text.len());
    }
}

/// A session file holds a transcript with an image, a PDF, a document of text and audio,
/// and gives it back equal, each message's bytes held once.
#[test]
fn a_session_round_trips_images_documents_and_audio() {
    let dir = std::env::temp_dir().join(format!("pagent-content-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("session.jsonl");
    let request = transcript(true);
    pagent::session::save(&path, request.messages.iter().map(|m| &**m)).unwrap();
    let loaded = pagent::session::load(&path).unwrap();
    let back = loaded.messages;
    let sent: Vec<Message> = request.messages.iter().map(|m| (**m).clone()).collect();
    assert_eq!(back, sent);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 5);
    assert!(text.contains(&format!(r#""data":"{PNG_B64}""#)));
    let _ = std::fs::remove_dir_all(&dir);
    let first: &Value = &serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["content"][5]["type"], "audio");
}
