//! The OpenAI Responses provider against a loopback server replaying recorded streams
//! (llama.cpp's `llama-server`, `tests/data/llama-server/responses_*.sse`) and written ones in
//! OpenAI's shape (`tests/data/written/responses_*.sse`, each event valid for the official SDK's
//! event models): whole event sequences through the agent, the requests it writes, how each
//! stream ends. The SDK check itself is `sdk_types_accept_the_requests_and_streams`, run by
//! `.ci/run` with the SDKs' venv.

mod support;

use std::sync::Arc;
use std::time::Duration;

use pagent::llm::{OpenAiResponses, Request, ThinkingLevel, ToolDefinition};
use pagent::{
    AssistantMessage, ContentBlock, Document, Error, Image, Message, RunStopReason, StopReason,
    ToolCall, ToolResultMessage, UserMessage,
};
use serde_json::{Value, json};
use support::{Reply, Server, agent, fast_retries, with_prompt};

fn responses(server: &Server) -> OpenAiResponses {
    OpenAiResponses::new(format!("{}/v1", server.url)).retry(fast_retries())
}

/// The request bodies the server received.
fn bodies(server: &Server) -> Vec<Value> {
    server.requests().iter().map(|r| r.json()).collect()
}

// ---- recorded llama-server streams through the agent ----

#[test]
fn llama_server_responses_text_replays_through_the_agent() {
    let server = Server::start(vec![
        Reply::sse_file("llama-server/responses_text.sse").chunked(7, Duration::ZERO),
    ]);
    let (agent, rec) = agent(responses(&server), "smollm2");
    let result = agent.prompt("Say hello to Oslo.").unwrap();
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "text x17 \"Hello, I'm here to help with your travel plans. What's your destination?\"",
            "usage in=210 out=18 cache_read=96 cache_write=0 reasoning=0 total=228",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=210 out=18",
        ])
    );
    let reply = result.messages[1].as_assistant().unwrap();
    // The id of the final response, the model the server named.
    assert_eq!(
        reply.response_id.as_deref(),
        Some("resp_YXc1rNwLrnzZOJwlzmgvRF52gbY9iaLy")
    );
    assert_eq!(reply.model, "smollm2");
    let sent = &server.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/responses")
    );
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(
        sent.json(),
        json!({
            "model": "smollm2",
            "input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "Say hello to Oslo."}]}],
            "tools": [{"type": "function", "name": "get_weather",
                       "description": "Get the current weather for a city",
                       "parameters": sent.json()["tools"][0]["parameters"], "strict": false}],
            "stream": true,
            "store": false,
            "include": ["reasoning.encrypted_content"],
        })
    );
}

#[test]
fn llama_server_responses_tool_loop_replays_through_the_agent() {
    let server = Server::start(vec![
        Reply::sse_file("llama-server/responses_tool_call.sse").chunked(13, Duration::ZERO),
        Reply::sse_file("llama-server/responses_tool_result_followup.sse"),
    ]);
    let (agent, rec) = agent(responses(&server), "smollm2");
    let result = agent.prompt("Weather in Paris?").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    let id = "call_gnItJJhEG0AKIigBAylws8uCZmU3vOp7";
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            &format!("call {id} get_weather"),
            "args[0] x8 \"{\\\"city\\\": \\\"Paris\\\"}\"",
            "usage in=300 out=31 cache_read=199 cache_write=0 reasoning=0 total=331",
            "MessageEnd assistant ToolUse calls=1",
            &format!("ToolStart {id} get_weather {{\"city\": \"Paris\"}}"),
            &format!("ToolExecute {id} {{\"city\":\"Paris\"}}"),
            &format!("ToolEnd {id} ok Paris: 21 C, sunny"),
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "MessageStart assistant",
            "text x21 \"<tool_response>\\n{\\\"city\\\":\\\"Paris\\\",\\\"temp_c\\\":21}\\n</tool_response>\"",
            "usage in=365 out=25 cache_read=330 cache_write=0 reasoning=0 total=390",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 2 no_tool_calls",
            "AgentEnd no_tool_calls in=665 out=56",
        ])
    );
    let second = &bodies(&server)[1];
    assert_eq!(
        second["input"],
        json!([
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
            {"type": "function_call", "call_id": id, "name": "get_weather",
             "arguments": "{\"city\": \"Paris\"}"},
            {"type": "function_call_output", "call_id": id, "output": "Paris: 21 C, sunny"},
        ])
    );
}

// ---- written streams in OpenAI's shape ----

/// A reasoning model's reasoning survives a stateless (`store: false`) tool loop: the
/// reasoning item streamed in turn 1 (two summary parts, encrypted content) is kept in the
/// reply as a thinking block and sent back in turn 2, whole and before its function call.
#[test]
fn reasoning_items_are_kept_and_sent_back_in_the_next_request() {
    let server = Server::start(vec![
        Reply::sse_file("written/responses_reasoning_tool.sse").chunked(11, Duration::ZERO),
        Reply::sse_file("written/responses_text.sse"),
    ]);
    let provider = responses(&server).api_key("sk-test-responses-key");
    let (agent, rec) = agent(provider, "gpt-5-mini");
    agent.set_thinking(ThinkingLevel::High);
    let result = agent.prompt("Weather in Paris?").unwrap();
    let signature = r#"{"type":"reasoning","id":"rs_01","encrypted_content":"gAAAAABpZ0encrypted-reasoning-opaque-Q1w2E3r4T5y6"}"#;
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "thinking x4 \"**Checking the weather**\\n\\nThe user asks about Paris.\\n\\nI should call get_weather.\"",
            &format!("signature {signature}"),
            "call call_Xy12 get_weather",
            "args[0] x2 \"{\\\"city\\\":\\\"Paris\\\"}\"",
            "usage in=1200 out=90 cache_read=1024 cache_write=176 reasoning=64 total=1290",
            "MessageEnd assistant ToolUse calls=1",
            "ToolStart call_Xy12 get_weather {\"city\":\"Paris\"}",
            "ToolExecute call_Xy12 {\"city\":\"Paris\"}",
            "ToolEnd call_Xy12 ok Paris: 21 C, sunny",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "MessageStart assistant",
            "text x4 \"Paris is 21 C and sunny.\"",
            "usage in=1300 out=12 cache_read=1280 cache_write=0 reasoning=0 total=1312",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 2 no_tool_calls",
            "AgentEnd no_tool_calls in=2500 out=102",
        ])
    );
    assert_eq!(result.usage.cache_read, 2304);
    assert_eq!(result.usage.cache_write, 176);
    assert_eq!(agent.snapshot().usage.reasoning, 64);
    let first = result.messages[1].as_assistant().unwrap();
    assert_eq!(first.response_id.as_deref(), Some("resp_0a1b2c3d4e5f"));
    assert_eq!(first.model, "gpt-5-mini-2026-08-07");
    let bodies = bodies(&server);
    assert_eq!(
        bodies[0]["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer sk-test-responses-key")
    );
    assert_eq!(
        bodies[1]["input"],
        json!([
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
            {"type": "reasoning", "id": "rs_01",
             "summary": [{"type": "summary_text",
                          "text": "**Checking the weather**\n\nThe user asks about Paris.\n\nI should call get_weather."}],
             "encrypted_content": "gAAAAABpZ0encrypted-reasoning-opaque-Q1w2E3r4T5y6"},
            {"type": "function_call", "call_id": "call_Xy12", "name": "get_weather",
             "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_Xy12",
             "output": "Paris: 21 C, sunny"},
        ])
    );
}

/// How each stream ends: `incomplete` for the token limit is `Length`; a failed response,
/// an `error` event and the content filter are `Error::Api` with the server's code; a stream
/// cut before its final event is an `Error::Stream`; what streamed before is kept.
#[test]
fn each_end_of_a_stream_is_a_stop_reason_or_a_typed_error() {
    let run = |file: &str| {
        let server = Server::start(vec![Reply::sse_file(file)]);
        let (agent, rec) = agent(responses(&server), "m");
        let result = agent.prompt("Hi");
        (result, rec.lines())
    };
    let (result, lines) = run("written/responses_incomplete.sse");
    let reply = result.unwrap();
    assert_eq!(
        reply.messages[1].as_assistant().unwrap().stop_reason,
        StopReason::Length
    );
    assert_eq!(lines[5], "text x1 \"Once upon\"");
    for (file, kind, message) in [
        (
            "written/responses_failed.sse",
            "server_error",
            "The model produced invalid content.",
        ),
        (
            "written/responses_error.sse",
            "rate_limit_exceeded",
            "Rate limit reached for requests",
        ),
        (
            "written/responses_content_filter.sse",
            "content_filter",
            "the reply was stopped by the content filter",
        ),
    ] {
        let (result, _) = run(file);
        let failed = result.unwrap_err();
        assert_eq!(
            failed.error(),
            &Error::Api {
                kind: kind.into(),
                message: message.into()
            },
            "{file}"
        );
    }
    let (result, lines) = run("written/responses_truncated.sse");
    let failed = result.unwrap_err();
    assert_eq!(
        failed.error(),
        &Error::Stream("the stream ended before response.completed".into())
    );
    let partial = failed.result().messages[1].as_assistant().unwrap();
    assert_eq!(partial.text(), "Hello");
    assert_eq!(partial.stop_reason, StopReason::Error);
    assert_eq!(lines[5], "text x2 \"Hello\"");
}

/// A server that sends items whole (no deltas) still gives the whole reply: the text of a
/// finished message, a function call first seen when done, a reasoning summary.
#[test]
fn items_sent_whole_without_deltas_are_read() {
    let sse = concat!(
        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_w\"}}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"reasoning\",\"id\":\"rs_w\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"Think.\"}]}}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"message\",\"id\":\"m_w\",\"content\":[{\"type\":\"output_text\",\"text\":\"Calling.\"}]}}\n\n",
        "data: {\"output_index\":2,\"type\":\"response.output_item.done\",\"item\":{\"type\":\"function_call\",\"id\":\"fc_w\",\"call_id\":\"c_w\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}\n\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_w\",\"status\":\"completed\"}}\n\n",
    );
    let server = Server::start(vec![
        Reply::sse(sse),
        Reply::sse_file("written/responses_text.sse"),
    ]);
    let (agent, rec) = agent(responses(&server), "m");
    agent.prompt("Hi").unwrap();
    assert_eq!(
        rec.lines()[5..9],
        [
            "thinking x1 \"Think.\"",
            "signature {\"type\":\"reasoning\",\"id\":\"rs_w\"}",
            "text x1 \"Calling.\"",
            "call c_w get_weather",
        ]
    );
    assert_eq!(rec.lines()[9], "args[0] x1 \"{\\\"city\\\":\\\"Oslo\\\"}\"");
}

/// An item's fields are read in any order, its `type` last included; an item or part of
/// another type is skipped whatever its fields hold (a field of a shape the decoder would
/// refuse in a known item); a known item whose field has the wrong shape is a typed stream
/// error, and the reply keeps what came before it.
#[test]
fn items_are_read_in_any_field_order_and_other_types_whatever_they_hold() {
    let sse = concat!(
        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_o\"}}\n\n",
        "data: {\"type\":\"response.output_item.added\",\"item\":{\"id\":\"ws_o\",\"content\":\"a string\",\"name\":{\"an\":\"object\"},\"arguments\":7,\"type\":\"web_search_call\"}}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"item\":{\"id\":3,\"summary\":null,\"type\":\"mcp_list_tools\"}}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"item\":{\"content\":[{\"text\":{\"not\":\"text\"},\"type\":\"output_image\"},{\"text\":\"Calling \\u00e9.\",\"type\":\"output_text\"}],\"id\":\"m_o\",\"type\":\"message\"}}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"item\":{\"arguments\":\"{}\",\"name\":\"get_weather\",\"call_id\":\"c_o\",\"id\":\"fc_o\",\"type\":\"function_call\"}}\n\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_o\",\"status\":\"completed\"}}\n\n",
    );
    let server = Server::start(vec![
        Reply::sse(sse),
        Reply::sse_file("written/responses_text.sse"),
    ]);
    let (first, rec) = agent(responses(&server), "m");
    first.prompt("Hi").unwrap();
    assert_eq!(
        rec.lines()[5..8],
        [
            "text x1 \"Calling é.\"",
            "call c_o get_weather",
            "args[0] x1 \"{}\"",
        ]
    );

    let sse = concat!(
        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_b\"}}\n\n",
        "data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"message\",\"id\":\"m_b\",\"content\":[]}}\n\n",
        "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m_b\",\"delta\":\"Kept\"}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"function_call\",\"id\":\"fc_b\",\"name\":[\"not a name\"]}}\n\n",
    );
    let server = Server::start(vec![Reply::sse(sse)]);
    let (agent, _) = agent(responses(&server), "m");
    let failed = agent.prompt("Hi").unwrap_err();
    let Error::Stream(message) = failed.error() else {
        panic!("not a stream error: {:?}", failed.error());
    };
    assert!(
        message.starts_with("a response.output_item.done event is not as the API defines it"),
        "{message}"
    );
    let partial = failed.result().messages[1].as_assistant().unwrap();
    assert_eq!(
        (partial.text(), partial.stop_reason),
        ("Kept".to_owned(), StopReason::Error)
    );
}

/// The event's `type` is read from the start of its text when it comes first unescaped;
/// an escaped one, or one after other fields, is parsed: the same events either way.
#[test]
fn an_event_type_escaped_or_not_first_is_read_as_well() {
    let sse = concat!(
        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_e\"}}\n\n",
        "data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"message\",\"id\":\"m_e\",\"content\":[]}}\n\n",
        "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m_e\",\"delta\":\"a\"}\n\n",
        "data: {\"type\":\"response.output_text.d\\u0065lta\",\"item_id\":\"m_e\",\"delta\":\"b\"}\n\n",
        "data: {\"type\":\"\\u0072esponse.output_text.delta\",\"item_id\":\"m_e\",\"delta\":\"c\"}\n\n",
        "data: {\"item_id\":\"m_e\",\"type\":\"response.output_text.delta\",\"delta\":\"d\"}\n\n",
        "data: {\"type\":\"response.output_text.\\\"delta\",\"item_id\":\"m_e\",\"delta\":\"not a delta\"}\n\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_e\",\"status\":\"completed\"}}\n\n",
    );
    let server = Server::start(vec![Reply::sse(sse)]);
    let (agent, _) = agent(responses(&server), "m");
    assert_eq!(agent.prompt("Hi").unwrap().text(), "abcd");
}

// ---- the request ----

fn transcript() -> Vec<Arc<Message>> {
    let reply = AssistantMessage::new(
        vec![
            // Anthropic's signed thinking and plain reasoning text are not this API's.
            ContentBlock::Thinking {
                thinking: "from another provider".into(),
                signature: Some("EqQBCkgIARABGAIiQL".into()),
            },
            ContentBlock::thinking("unsigned"),
            ContentBlock::Thinking {
                thinking: "Plan.".into(),
                signature: Some(
                    r#"{"type":"reasoning","id":"rs_9","encrypted_content":"enc"}"#.into(),
                ),
            },
            ContentBlock::text("Let me look."),
            ContentBlock::ToolCall(ToolCall::new("call_9", "screenshot", "")),
            // A reasoning item with nothing after it is not sent (the API refuses it).
            ContentBlock::Thinking {
                thinking: String::new(),
                signature: Some(r#"{"type":"reasoning","id":"rs_10"}"#.into()),
            },
        ],
        StopReason::ToolUse,
    )
    .with_response_id("resp_9");
    vec![
        Message::from(
            UserMessage::new("What is on the screen and in the report?")
                .with_part(Image::url("https://example.com/a.png"))
                .with_part(Image::new("image/png", vec![0x89, b'P', b'N', b'G']))
                .with_part(Document::pdf(b"%PDF-1".to_vec()).with_name("report.pdf"))
                .with_part(Document::url("https://example.com/b.pdf")),
        ),
        Message::Assistant(reply),
        Message::ToolResult(
            ToolResultMessage::new("call_9", "screenshot", "The screen:").with_parts([
                pagent::Part::text("The screen:"),
                Image::new("image/jpeg", vec![0xFF, 0xD8, 0xFF]).into(),
            ]),
        ),
    ]
    .into_iter()
    .map(Arc::new)
    .collect()
}

fn request() -> Request {
    Request::new("gpt-5", transcript())
        .with_system_prompt("Be terse.")
        .with_tools(vec![ToolDefinition::new(
            "screenshot",
            "Takes a screenshot",
            json!({"type": "object", "properties": {}}),
        )])
        .with_thinking(ThinkingLevel::Low)
}

#[test]
fn the_request_carries_the_transcript_as_items_with_their_parts() {
    let body = OpenAiResponses::new("http://x/v1")
        .temperature(0.2)
        .max_output_tokens(2000)
        .prompt_cache_key("agent-7")
        .prompt_cache_retention("24h")
        .request_body(&request());
    assert_eq!(
        body,
        json!({
            "model": "gpt-5",
            "instructions": "Be terse.",
            "input": [
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "What is on the screen and in the report?"},
                    {"type": "input_image", "detail": "auto", "image_url": "https://example.com/a.png"},
                    {"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,iVBORw=="},
                    {"type": "input_file", "filename": "report.pdf",
                     "file_data": "data:application/pdf;base64,JVBERi0x"},
                    {"type": "input_file", "file_url": "https://example.com/b.pdf"},
                ]},
                {"type": "reasoning", "id": "rs_9",
                 "summary": [{"type": "summary_text", "text": "Plan."}],
                 "encrypted_content": "enc"},
                {"type": "message", "role": "assistant", "content": "Let me look."},
                {"type": "function_call", "call_id": "call_9", "name": "screenshot",
                 "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_9", "output": [
                    {"type": "input_text", "text": "The screen:"},
                    {"type": "input_image", "detail": "auto", "image_url": "data:image/jpeg;base64,/9j/"},
                ]},
            ],
            "tools": [{"type": "function", "name": "screenshot", "description": "Takes a screenshot",
                       "parameters": {"type": "object", "properties": {}}, "strict": false}],
            "stream": true,
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "low", "summary": "auto"},
            "temperature": 0.2,
            "max_output_tokens": 2000,
            "prompt_cache_key": "agent-7",
            "prompt_cache_retention": "24h",
        })
    );
}

/// `previous_response_id` is opt-in: with it, the request names the last reply of this API
/// and sends only what came after it, and `store` is on (without `include`); a transcript
/// whose last reply came from elsewhere is sent whole.
#[test]
fn chaining_sends_only_what_follows_the_previous_response() {
    let provider = OpenAiResponses::new("http://x/v1")
        .previous_response_id(true)
        .reasoning_summary(None)
        .extra_body(json!({"parallel_tool_calls": false, "store": true}));
    let mut transcript = transcript();
    if let Message::Assistant(m) = Arc::make_mut(&mut transcript[1]) {
        m.response_id = Some("resp_abc".into());
    }
    let body = provider.request_body(
        &Request::new("gpt-5", transcript.clone()).with_thinking(ThinkingLevel::Medium),
    );
    assert_eq!(body["previous_response_id"], json!("resp_abc"));
    assert_eq!(body["store"], json!(true));
    assert_eq!(body["parallel_tool_calls"], json!(false));
    assert_eq!(body.get("include"), None);
    assert_eq!(body["reasoning"], json!({"effort": "medium"}));
    let input = body["input"].as_array().unwrap();
    assert_eq!(input.len(), 1);
    assert_eq!(input[0]["type"], json!("function_call_output"));
    // A reply from Chat Completions cannot be chained from.
    if let Message::Assistant(m) = Arc::make_mut(&mut transcript[1]) {
        m.response_id = Some("chatcmpl-1".into());
    }
    let body = provider.request_body(&Request::new("gpt-5", transcript));
    assert_eq!(body.get("previous_response_id"), None);
    assert_eq!(body["input"].as_array().unwrap().len(), 5);
}

/// A reasoning item kept by this provider is not sent to Anthropic as a signature (the API
/// would refuse it), while Anthropic's own signed thinking still is.
#[test]
fn anthropic_leaves_out_reasoning_items_of_the_responses_api() {
    let body = pagent::llm::Anthropic::new("http://x").request_body(&request());
    let blocks = body["messages"][1]["content"].as_array().unwrap();
    let types: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["thinking", "text", "tool_use"]);
    assert_eq!(blocks[0]["signature"], json!("EqQBCkgIARABGAIiQL"));
}

// ---- the official SDK's types ----

/// The bodies this provider writes are valid `ResponseCreateParamsStreaming` of the `openai`
/// Python SDK with no key it does not know, and every event of the replayed streams parses
/// as the SDK's event model of its type (llama-server's leave out fields such as
/// `sequence_number` that pagent does not read: listed, not failed). Needs
/// `PAGENT_SDK_PYTHON`, the python of `.ci/sdk.sh`'s venv.
#[test]
#[ignore = "needs the SDKs' venv: PAGENT_SDK_PYTHON (see .ci/sdk.sh)"]
fn sdk_types_accept_the_requests_and_streams() {
    let python = std::env::var("PAGENT_SDK_PYTHON").expect("PAGENT_SDK_PYTHON");
    let dir = std::env::temp_dir().join(format!("pagent-sdk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let requests = dir.join("responses.jsonl");
    let chained = OpenAiResponses::new("http://x/v1").previous_response_id(true);
    let lines: Vec<String> = [
        OpenAiResponses::new("http://x/v1")
            .temperature(0.2)
            .max_output_tokens(100)
            .prompt_cache_key("k")
            .prompt_cache_retention("24h")
            .request_body(&request()),
        chained.request_body(&request()),
        OpenAiResponses::new("http://x/v1").request_body(&Request::new("m", transcript())),
    ]
    .iter()
    .map(Value::to_string)
    .collect();
    std::fs::write(&requests, lines.join("\n")).unwrap();
    let data = |f: &str| format!("{}/tests/data/{f}", env!("CARGO_MANIFEST_DIR"));
    let script = data("../sdk/validate.py");
    let run = |args: Vec<String>| {
        let out = std::process::Command::new(&python)
            .arg(&script)
            .args(&args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let mut recorded: Vec<String> = ["text", "tool_call", "tool_result_followup"]
        .iter()
        .map(|n| data(&format!("llama-server/responses_{n}.request.json")))
        .collect();
    recorded.push(requests.display().to_string());
    run([vec!["request".into(), "responses".into()], recorded].concat());
    let written: Vec<String> = [
        "reasoning_tool",
        "text",
        "incomplete",
        "failed",
        "error",
        "truncated",
        "content_filter",
        "structured",
    ]
    .iter()
    .map(|n| data(&format!("written/responses_{n}.sse")))
    .collect();
    let out = run([vec!["stream".into(), "responses".into()], written].concat());
    assert!(!out.contains("left out"), "{out}");
    let llama: Vec<String> = ["text", "tool_call", "tool_result_followup"]
        .iter()
        .map(|n| data(&format!("llama-server/responses_{n}.sse")))
        .collect();
    run([
        vec!["stream".into(), "responses".into(), "--lenient".into()],
        llama,
    ]
    .concat());
    let _ = std::fs::remove_dir_all(&dir);
}
