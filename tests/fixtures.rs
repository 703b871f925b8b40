//! The rest of the recordings of two real llama.cpp servers (`llama-server` and
//! `llama-cpp-python`, see `tests/data/*/SUMMARY.txt`), replayed byte for byte through the
//! full agent: tool-call requests the small model answered with text, tool calls, streaming
//! requests the servers answered with an error, and error bodies with their recorded status.

mod support;

use pagent::llm::RetryPolicy;
use pagent::{Error, ErrorKind, RunStopReason};
use support::{Reply, Server, agent, data, openai, replay, with_prompt};

/// What every run ends with when its one reply failed with `error`.
fn failed(error: &Error) -> Vec<String> {
    with_prompt(&[
        &format!("MessageEnd assistant Error calls=0 error={error}"),
        "TurnEnd 1 error",
        "AgentEnd error in=0 out=0",
    ])
}

/// A recorded response as the server sent it: the status of its `.meta` file
/// (`http_code=404 ...`), the content type of its `.headers` file when there is one, and the
/// body in its `.{body}` file.
fn recorded_reply(name: &str, body: &str) -> Reply {
    let path = |ext: &str| format!("{name}.{ext}");
    let meta = String::from_utf8(data(&path("meta"))).unwrap();
    let status = meta
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("http_code="))
        .unwrap_or_else(|| panic!("{name}.meta: no http_code"))
        .parse()
        .unwrap();
    let mut reply = Reply::json(status, data(&path(body)));
    let headers = format!(
        "{}/tests/data/{}",
        env!("CARGO_MANIFEST_DIR"),
        path("headers")
    );
    if let Ok(headers) = std::fs::read_to_string(headers) {
        let content_type = headers
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(": ")?;
                name.eq_ignore_ascii_case("content-type").then_some(value)
            })
            .unwrap();
        reply.headers = vec![("Content-Type".into(), content_type.into())];
    }
    reply
}

// ---- tool-call requests answered with text, and text with odd requests ----

#[test]
fn recorded_text_streams_replay_through_the_agent() {
    let cases: [(&str, &[&str]); 10] = [
        (
            "llama-server/err_unknown_model_stream",
            &[
                r#"text x4 "Hello there! I""#,
                "MessageEnd assistant Length calls=0",
                "TurnEnd 1 no_tool_calls",
                "AgentEnd no_tool_calls in=0 out=0",
            ],
        ),
        (
            "llama-server/err_forced_unknown_tool",
            &[
                r#"text x16 "The weather in Paris is known as the \"Bien sûr Paris\"""#,
                "MessageEnd assistant Length calls=0",
                "TurnEnd 1 no_tool_calls",
                "AgentEnd no_tool_calls in=0 out=0",
            ],
        ),
        (
            "llama-server/stream_tools_two_auto",
            &[
                r#"text x96 "You can call both tools using the following code:\n\n```\n# Qwen\nQwen.call(\n    {\n        \"type\": \"function\",\n        \"function\": {\n            \"name\": \"get_weather\",\n            \"description\": \"Get the current weather for a city\",\n            \"parameters\": {\n                \"type\": \"object\",\n                \"properties\": {\n                    \"city\": {\n                        \"type\": \"string\",\n                        \"required\": [\"city\"]\n                   ""#,
                "MessageEnd assistant Length calls=0",
                "TurnEnd 1 no_tool_calls",
                "AgentEnd no_tool_calls in=0 out=0",
            ],
        ),
        (
            "llama-server/stream_tools_required",
            &[
                r#"text x64 "You can use the get_weather function to get the current weather in Paris.\n\n```python\ndef get_weather(city_name: str) -> dict:\n    return {\n        \"city\": {\n            \"type\": \"string\",\n            \"description\": \"Paris\",\n            \"location\": {\n                \"""#,
                "MessageEnd assistant Length calls=0",
                "TurnEnd 1 no_tool_calls",
                "AgentEnd no_tool_calls in=0 out=0",
            ],
        ),
        (
            "llama-server/stream_tools_notoolchoice",
            &[
                r#"text x64 "You can use the get_weather function to get the current weather in Paris.\n\n```python\ndef get_weather(city_name: str) -> dict:\n    return {\n        \"city\": {\n            \"type\": \"string\",\n            \"description\": \"Paris\",\n            \"location\": {\n                \"""#,
                "MessageEnd assistant Length calls=0",
                "TurnEnd 1 no_tool_calls",
                "AgentEnd no_tool_calls in=0 out=0",
            ],
        ),
        (
            "llama-server/stream_tools_forced_usage",
            &[
                r#"text x64 "You can use the get_weather function to get the current weather in Paris.\n\n```python\ndef get_weather(city_name: str) -> dict:\n    return {\n        \"city\": {\n            \"type\": \"string\",\n            \"description\": \"Paris\",\n            \"location\": {\n                \"""#,
                "usage in=219 out=64 cache_read=218 cache_write=0 reasoning=0 total=283",
                "MessageEnd assistant Length calls=0",
                "TurnEnd 1 no_tool_calls",
                "AgentEnd no_tool_calls in=219 out=64",
            ],
        ),
        (
            "llama-cpp-python/err_unknown_model_stream",
            &[
                r#"text x4 "The \"Estr""#,
                "MessageEnd assistant Length calls=0",
                "TurnEnd 1 no_tool_calls",
                "AgentEnd no_tool_calls in=0 out=0",
            ],
        ),
        (
            "llama-cpp-python/stream_tools_notoolchoice",
            &[
                r#"text x64 "The weather in Paris is a mix of warm and cool. The sun shines brightly, with temperatures ranging from 25°C to 30°C (74°F to 86°F), making it the perfect place for outdoor activities like hiking and exploring cities. However, during peak summer months""#,
                "MessageEnd assistant Length calls=0",
                "TurnEnd 1 no_tool_calls",
                "AgentEnd no_tool_calls in=0 out=0",
            ],
        ),
        (
            "llama-cpp-python/stream_tools_fewshot_usage",
            &[
                r#"text x32 "functions.get_weather:\n{&#34;city&#34;: &#34;Paris&#34;}""#,
                "MessageEnd assistant Stop calls=0",
                "TurnEnd 1 no_tool_calls",
                "AgentEnd no_tool_calls in=0 out=0",
            ],
        ),
        (
            "llama-cpp-python/stream_tools_two_auto",
            &[
                "MessageEnd assistant Stop calls=0",
                "TurnEnd 1 empty_response",
                "AgentEnd empty_response in=0 out=0",
            ],
        ),
    ];
    for (name, expected) in cases {
        let replies = vec![Reply::sse_file(&format!("{name}.sse"))];
        let (lines, result, server) = replay("smollm2", replies, "Weather in Paris?");
        assert_eq!(lines, with_prompt(expected), "{name}");
        assert!(result.is_ok(), "{name}: {result:?}");
        assert_eq!(server.requests().len(), 1, "{name}");
    }
}

// ---- tool calls ----

/// A whole run without usage: one `get_weather` call whose arguments stream in 8 fragments as
/// `args`, its result, then a second turn whose text renders as `answer`.
fn weather_call_then(id: &str, args: &str, answer: &str) -> Vec<String> {
    with_prompt(&[
        &format!("call {id} get_weather"),
        &format!("args[0] x8 {args:?}"),
        "MessageEnd assistant ToolUse calls=1",
        &format!("ToolStart {id} get_weather {args}"),
        &format!(r#"ToolExecute {id} {{"city":"Paris"}}"#),
        &format!("ToolEnd {id} ok Paris: 21 C, sunny"),
        "MessageStart tool_result",
        "MessageEnd tool_result",
        "TurnEnd 1 continuing",
        "TurnStart 2",
        "MessageStart assistant",
        answer,
        "MessageEnd assistant Stop calls=0",
        "TurnEnd 2 no_tool_calls",
        "AgentEnd no_tool_calls in=0 out=0",
    ])
}

#[test]
fn llama_server_few_shot_tool_calls_round_trip() {
    for (name, id) in [
        (
            "stream_tools_fewshot_auto",
            "qdaHFO8ISPTCbyNI0TVLT4Jt2SIInNJj",
        ),
        (
            "stream_tools_fewshot_required",
            "qG6DUlrZRdRLMWX8VUI0sFnyKl9jGIEF",
        ),
    ] {
        let replies = vec![
            Reply::sse_file(&format!("llama-server/{name}.sse")),
            Reply::sse_file("llama-server/stream_tool_result_followup.sse"),
        ];
        let (lines, result, _) = replay("smollm2", replies, "Weather in Paris?");
        assert_eq!(
            result.unwrap().stop_reason,
            RunStopReason::NoToolCalls,
            "{name}"
        );
        assert_eq!(
            lines,
            weather_call_then(
                id,
                r#"{"city": "Paris"}"#,
                r#"text x17 "<tool_response>\n{\"temp_c\":21, \"sky\":\"sunny\"}""#,
            ),
            "{name}"
        );
    }
}

#[test]
fn llama_cpp_python_forced_tool_call_round_trips() {
    // The recording asked for usage; llama-cpp-python sent none.
    let id = "call__0_get_weather_cmpl-ccc8ae76-38cc-45b6-adb2-d3a1b0a5d52d";
    let replies = vec![
        Reply::sse_file("llama-cpp-python/stream_tools_forced_usage.sse"),
        Reply::sse_file("llama-cpp-python/stream_text.sse"),
    ];
    let (lines, result, server) = replay("smollm2", replies, "Weather in Paris?");
    assert_eq!(result.unwrap().stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        lines,
        weather_call_then(
            id,
            r#"{ "city": "Paris" }"#,
            r#"text x28 "I'm so glad you're here. I hope it brings a smile to your face, and I promise to make things right for you.""#,
        )
    );
    let second = server.requests()[1].json();
    assert_eq!(second["messages"][2]["tool_call_id"], id);
}

// ---- streaming requests answered with an error ----

#[test]
fn llama_server_context_overflow_on_a_stream_is_a_typed_http_error() {
    // Its body is JSON, in the `.sse` file the probe wrote for a streaming request.
    let reply = recorded_reply("llama-server/err_context_overflow_stream", "sse");
    let (lines, result, server) = replay("smollm2", vec![reply], "a very long prompt");
    let error = result.unwrap_err().into_error();
    assert_eq!(error.kind(), ErrorKind::ContextOverflow);
    assert_eq!(
        error,
        Error::Http {
            status: 400,
            message: format!(
                "request (5033 tokens) exceeds the available context size (4096 tokens), try increasing it (POST {}/v1/chat/completions)",
                server.url
            ),
            retry_after: None,
        }
    );
    assert!(error.is_context_overflow());
    assert_eq!(lines, failed(&error));
    assert_eq!(server.requests().len(), 1, "a 400 is not retried");
}

/// llama-cpp-python fails inside its stream generator after the 200 headers went out (a
/// prompt over the context, a forced tool it does not know, `required` tool choice...): the
/// body is empty, which the agent reports as a broken stream.
#[test]
fn llama_cpp_python_empty_streams_are_stream_errors() {
    for name in [
        "err_context_overflow_stream",
        "err_forced_unknown_tool",
        "stream_tools_required",
        "stream_tools_fewshot_auto",
        "stream_tools_fewshot_parallel",
        "stream_tools_fewshot_required",
    ] {
        let path = format!("llama-cpp-python/{name}.sse");
        assert!(data(&path).is_empty(), "{name}");
        let (lines, result, server) = replay("smollm2", vec![Reply::sse_file(&path)], "Hi");
        let error = result.unwrap_err().into_error();
        assert_eq!(
            error,
            Error::Stream("the stream ended before a finish_reason".into()),
            "{name}"
        );
        assert_eq!(lines, failed(&error), "{name}");
        assert_eq!(
            server.requests().len(),
            1,
            "{name}: no retry once the reply started"
        );
    }
}

// ---- error bodies ----

#[test]
fn llama_cpp_python_error_bodies_are_http_errors_with_the_servers_message() {
    let bad_role: serde_json::Value =
        serde_json::from_slice(&data("llama-cpp-python/err_bad_role.json")).unwrap();
    let bad_role = bad_role["error"]["message"].as_str().unwrap();
    // A message over 1000 bytes is cut there.
    let bad_role = format!("{}...", &bad_role[..1000]);
    let cases = [
        ("err_404", 404, "Not Found"),
        ("err_get_on_post", 405, "Method Not Allowed"),
        (
            "err_context_overflow",
            400,
            "This model's maximum context length is 4096 tokens. However, you requested 5014 tokens (5010 in the messages, 4 in the completion). Please reduce the length of the messages or completion.",
        ),
        ("err_bad_json", 500, "Internal Server Error"),
        ("err_bad_json_stream", 500, "Internal Server Error"),
        (
            "err_messages_not_array",
            500,
            "1 validation error:\n  {'type': 'list_type', 'loc': ('body', 'messages'), 'msg': 'Input should be a valid list', 'input': 'hi'}\n\n  File \"/opt/venv/lib/python3.11/site-packages/llama_cpp/server/app.py\", line 376, in create_chat_completion\n    POST /v1/chat/completions",
        ),
        ("err_bad_role", 500, &bad_role),
    ];
    for (name, status, message) in cases {
        let reply = recorded_reply(&format!("llama-cpp-python/{name}"), "json");
        let server = Server::start(vec![reply]);
        // No retries, so that the message is the server's and the request's alone.
        let (agent, rec) = agent(openai(&server).retry(RetryPolicy::none()), "smollm2");
        let error = agent.prompt("Hi").unwrap_err().into_error();
        assert_eq!(
            error,
            Error::Http {
                status,
                message: format!("{message} (POST {}/v1/chat/completions)", server.url),
                retry_after: None,
            },
            "{name}"
        );
        assert_eq!(
            error.is_context_overflow(),
            name == "err_context_overflow",
            "{name}"
        );
        assert_eq!(rec.lines(), failed(&error), "{name}");
    }
}
