//! What pagent sends and reads, checked against the official Python SDKs' own types: request
//! bodies must validate as the SDK's request TypedDict with no key it does not know, and the
//! events of replayed streams as its event models (`tests/sdk/validate.py`). Ignored by a plain
//! `cargo test`: they need `PAGENT_SDK_PYTHON`, the python of the venv `.ci/sdk.sh` installs
//! (pinned `openai` and `anthropic`); `.ci/run` runs them.

use std::sync::Arc;

use pagent::llm::{Request, ThinkingLevel, ToolDefinition};
use pagent::{AssistantMessage, ContentBlock, Message, StopReason, ToolCall, ToolResultMessage};
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
    let script = format!("{}/tests/sdk/validate.py", env!("CARGO_MANIFEST_DIR"));
    for (kind, lines) in [("anthropic", anthropic), ("chat", vec![chat])] {
        let file = dir.join(format!("{kind}.jsonl"));
        std::fs::write(&file, lines.join("\n")).unwrap();
        let out = std::process::Command::new(&python)
            .args([&script, "request", kind, &file.display().to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{kind}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
