//! What pagent sends and reads, checked against the official Python SDKs' own types: request
//! bodies must validate as the SDK's request TypedDict with no key it does not know, and the
//! events of replayed streams as its event models (`tests/sdk/validate.py`). Ignored by a plain
//! `cargo test`: they need `PAGENT_SDK_PYTHON`, the python of the venv `.ci/sdk.sh` installs
//! (pinned `openai` and `anthropic`); `.ci/run` runs them.

use std::sync::Arc;

use pagent::llm::{Request, ThinkingLevel, ToolDefinition};
use pagent::{
    AssistantMessage, Audio, ContentBlock, Document, Image, Message, Part, StopReason, ToolCall,
    ToolResultMessage, UserMessage,
};
use serde_json::{Value, json};

/// The prompt cache breakpoints `Anthropic` writes (system as a cached text block, the last
/// tool, the transcript's two user turns; the one-hour TTL) are valid
/// `MessageCreateParamsStreaming` of the `anthropic` SDK, and Chat Completions' own cache
/// fields (`prompt_cache_key`, `prompt_cache_retention`) are valid for the `openai` SDK.
#[test]
#[ignore = "needs the SDKs' venv: PAGENT_SDK_PYTHON (see .ci/sdk.sh)"]
fn sdk_types_accept_the_prompt_cache_fields() {
    use pagent::llm::{Anthropic, OpenAiCompat, PromptCache};
    let python = std::env::var("PAGENT_SDK_PYTHON").expect("PAGENT_SDK_PYTHON");
    let dir = std::env::temp_dir().join(format!("pagent-sdk-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text_only = Request::new(
        "claude-haiku-4-5",
        [
            Message::user("Weather in Paris?"),
            Message::Assistant(AssistantMessage::new(
                vec![
                    ContentBlock::text("Checking."),
                    ContentBlock::ToolCall(ToolCall::new(
                        "t1",
                        "get_weather",
                        "{\"city\":\"Paris\"}",
                    )),
                ],
                StopReason::ToolUse,
            )),
            Message::ToolResult(ToolResultMessage::new("t1", "get_weather", "21 C")),
            Message::user("And in Oslo?"),
        ]
        .into_iter()
        .map(Arc::new)
        .collect(),
    )
    .with_system_prompt("Be terse.")
    .with_tools(vec![ToolDefinition::new(
        "get_weather",
        "Get the weather",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )]);
    let anthropic: Vec<String> = [
        Anthropic::new("http://x").request_body(&text_only),
        Anthropic::new("http://x")
            .prompt_cache(PromptCache::auto().one_hour(true))
            .request_body(&text_only.clone().with_thinking(ThinkingLevel::Low)),
        Anthropic::new("http://x")
            .prompt_cache(PromptCache::off())
            .request_body(&text_only),
    ]
    .iter()
    .map(Value::to_string)
    .collect();
    assert!(anthropic[0].contains("cache_control"));
    let chat = OpenAiCompat::new("http://x/v1")
        .prompt_cache_key("agent-7")
        .prompt_cache_retention("24h")
        .request_body(&text_only)
        .to_string();
    for (kind, lines) in [("anthropic", anthropic), ("chat", vec![chat])] {
        let file = dir.join(format!("{kind}.jsonl"));
        std::fs::write(&file, lines.join("\n")).unwrap();
        validate(&python, "request", kind, &file);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `validate.py MODE KIND` on one file of these lines; panics with its report on a failure.
fn validate(python: &str, mode: &str, kind: &str, file: &std::path::Path) {
    let script = format!("{}/tests/sdk/validate.py", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(python)
        .args([&script, mode, kind, &file.display().to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{kind}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A transcript with every kind of part: a prompt with an inline image, an image by URL, a
/// named PDF and a document of text (and audio, for Chat Completions); a screenshot tool's
/// result with text, an image and a PDF; a text result; a follow-up.
fn every_part(audio: bool, pdf_url: bool) -> Request {
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    let mut prompt = UserMessage::new("Compare these.")
        .with_part(Image::new("image/png", png.clone()))
        .with_part(Image::url("https://example.com/chart.png"))
        .with_part(Document::pdf(b"%PDF-1.7".to_vec()).with_name("invoice.pdf"))
        .with_part(Document::text("notes.txt", "Paid in May."));
    if audio {
        prompt = prompt.with_part(Audio::new("audio/wav", b"RIFF\0\0\0\0WAVEfmt ".to_vec()));
    }
    if pdf_url {
        prompt = prompt.with_part(Document::url("https://example.com/spec.pdf"));
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
        Image::new("image/jpeg", vec![0xFF, 0xD8, 0xFF, 0xE0]).into(),
        Document::pdf(b"%PDF-1.7".to_vec()).into(),
    ]);
    Request::new(
        "m",
        [
            Message::from(prompt),
            Message::Assistant(reply),
            Message::ToolResult(shot),
            Message::ToolResult(ToolResultMessage::new("call_2", "clock", "12:00")),
            Message::user("And now?"),
        ]
        .into_iter()
        .map(Arc::new)
        .collect(),
    )
    .with_tools(vec![ToolDefinition::new(
        "screenshot",
        "Takes a screenshot",
        json!({"type": "object", "properties": {}}),
    )])
}

/// Images, documents and audio as each provider writes them are valid request params of the
/// official SDKs (Chat Completions `image_url` / `file` / `input_audio` parts and the user
/// message after the tool results; Anthropic `image` / `document` blocks with `base64`,
/// `url` and `text` sources, in a turn and inside `tool_result`, with and without cache
/// breakpoints; Responses `input_image` / `input_file`, in a message and in a
/// `function_call_output`), and the replayed replies of vision models are valid streams.
#[test]
#[ignore = "needs the SDKs' venv: PAGENT_SDK_PYTHON (see .ci/sdk.sh)"]
fn sdk_types_accept_images_documents_and_audio() {
    use pagent::llm::{Anthropic, OpenAiCompat, OpenAiResponses, PromptCache};
    let python = std::env::var("PAGENT_SDK_PYTHON").expect("PAGENT_SDK_PYTHON");
    let dir = std::env::temp_dir().join(format!("pagent-sdk-parts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bodies = [
        (
            "chat",
            vec![OpenAiCompat::new("http://x/v1").request_body(&every_part(true, false))],
        ),
        (
            "anthropic",
            vec![
                Anthropic::new("http://x").request_body(&every_part(false, true)),
                Anthropic::new("http://x")
                    .prompt_cache(PromptCache::off())
                    .request_body(&every_part(false, true)),
            ],
        ),
        (
            "responses",
            vec![OpenAiResponses::new("http://x/v1").request_body(&every_part(false, true))],
        ),
    ];
    for (kind, bodies) in bodies {
        let text: Vec<String> = bodies.iter().map(Value::to_string).collect();
        for part in [
            "image",
            "document",
            "input_image",
            "input_file",
            "image_url",
            "file",
        ] {
            let written = text
                .iter()
                .any(|t| t.contains(&format!("\"type\":\"{part}\"")));
            let expected = match kind {
                "chat" => ["image_url", "file"].contains(&part),
                "anthropic" => ["image", "document"].contains(&part),
                _ => ["input_image", "input_file"].contains(&part),
            };
            assert_eq!(written, expected, "{kind} {part}");
        }
        let file = dir.join(format!("{kind}.jsonl"));
        std::fs::write(&file, text.join("\n")).unwrap();
        validate(&python, "request", kind, &file);
    }
    let data = format!("{}/tests/data/written", env!("CARGO_MANIFEST_DIR"));
    for (kind, stream) in [
        ("chat", "openai_vision_reply.sse"),
        ("chat", "openai_vision_tool_call.sse"),
        ("anthropic", "anthropic_vision.sse"),
    ] {
        validate(
            &python,
            "stream",
            kind,
            &std::path::Path::new(&data).join(stream),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A report with what schemas usually hold: a doc comment, ranges, an enum, an optional
/// field, a list of nested objects (a `$defs` entry referenced with a description beside it).
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Report {
    /// The title, short.
    #[schemars(length(max = 80))]
    title: String,
    /// From 0 to 10.
    score: u8,
    mood: Mood,
    note: Option<String>,
    /// Each finding, most important first.
    #[schemars(length(min = 2))]
    findings: Vec<Finding>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
enum Mood {
    Good,
    Bad,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Finding {
    line: u32,
    text: String,
    tags: Vec<Vec<String>>,
}

/// A structured answer as each provider asks for it is valid for the SDKs' request types:
/// Chat Completions' `response_format` (`json_schema`, strict or not) with `tool_choice:
/// "none"` beside the tools on the answer turn, the Responses API's `text.format`, and
/// Anthropic's `output_config.format`, `tool_choice: {"type": "none"}` and the forced tool.
/// And the schema forms pagent sends are the SDKs' own: openai's conversion to strict mode
/// and anthropic's `transform_schema` leave them as they are.
#[test]
#[ignore = "needs the SDKs' venv: PAGENT_SDK_PYTHON (see .ci/sdk.sh)"]
fn sdk_types_accept_the_structured_output_requests() {
    use pagent::OutputSchema;
    use pagent::llm::{Anthropic, AnthropicOutput, OpenAiCompat, OpenAiResponses, OutputRequest};
    let python = std::env::var("PAGENT_SDK_PYTHON").expect("PAGENT_SDK_PYTHON");
    let dir = std::env::temp_dir().join(format!("pagent-sdk-output-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schemas = [
        OutputSchema::of::<Report>().with_description("A review of a file."),
        OutputSchema::of::<Finding>(),
        // No strict form (its root is an array): sent with `strict: false`.
        OutputSchema::new(
            "Colors",
            json!({"type": "array", "items": {"enum": ["red", "green"]}, "minItems": 1}),
        )
        .unwrap(),
    ];
    assert!(schemas[0].strict_schema().is_some() && schemas[2].strict_schema().is_none());
    let tools = vec![ToolDefinition::new(
        "get_weather",
        "Get the weather",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )];
    let mut requests = Vec::new();
    for schema in &schemas {
        for answer_now in [false, true] {
            let asked = Request::new("m", vec![Arc::new(Message::user("Review it."))])
                .with_system_prompt("Be terse.")
                .with_tools(tools.clone())
                .with_output(OutputRequest::new(schema.clone(), answer_now));
            requests.push(asked.clone());
            requests.push(asked.with_tools(Vec::new()));
        }
    }
    let bodies = |f: &dyn Fn(&Request) -> Value| -> Vec<String> {
        requests.iter().map(|r| f(r).to_string()).collect()
    };
    let chat = OpenAiCompat::new("http://x/v1");
    let responses = OpenAiResponses::new("http://x/v1");
    let anthropic = Anthropic::new("http://x");
    let forced = Anthropic::new("http://x").output_mode(AnthropicOutput::ForcedTool);
    let chat_bodies = bodies(&|r| chat.request_body(r));
    assert!(
        chat_bodies
            .iter()
            .any(|b| b.contains(r#""tool_choice":"none""#))
    );
    let mut anthropic_bodies = bodies(&|r| anthropic.request_body(r));
    // The forced tool takes an object: the schemas whose root is one.
    anthropic_bodies.extend(
        requests
            .iter()
            .filter(|r| r.output.as_ref().unwrap().schema.name() != "Colors")
            .map(|r| forced.request_body(r).to_string()),
    );
    assert!(
        anthropic_bodies
            .iter()
            .any(|b| b.contains(r#""type":"tool""#))
    );
    let files = [
        ("request", "chat", chat_bodies),
        (
            "request",
            "responses",
            bodies(&|r| responses.request_body(r)),
        ),
        ("request", "anthropic", anthropic_bodies),
        (
            "schema",
            "openai",
            schemas
                .iter()
                .filter_map(|s| s.strict_schema().map(Value::to_string))
                .collect(),
        ),
        (
            "schema",
            "anthropic",
            schemas
                .iter()
                .map(|s| s.anthropic_schema().to_string())
                .collect(),
        ),
    ];
    let script = format!("{}/tests/sdk/validate.py", env!("CARGO_MANIFEST_DIR"));
    for (mode, kind, lines) in files {
        let file = dir.join(format!("{mode}-{kind}.jsonl"));
        std::fs::write(&file, lines.join("\n")).unwrap();
        let out = std::process::Command::new(&python)
            .args([&script, mode, kind, &file.display().to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{mode} {kind}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
