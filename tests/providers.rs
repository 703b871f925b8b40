//! The HTTP providers against a loopback server that replays recorded and written streams
//! byte for byte: whole event sequences through the agent, errors, retries, abort.

mod support;

use std::time::{Duration, Instant};

use pagent::llm::{Anthropic, OpenAiCompat, Provider, Request, RetryPolicy, StreamEvent};
use pagent::wire;
use pagent::{
    Agent, CancelToken, ContentBlock, Error, ErrorInfo, ErrorKind, Message, RunStopReason,
    StopReason, TimeoutPhase,
};
use serde_json::json;
use support::{
    Recorder, Reply, Server, agent, data, fast_retries, openai, replay, weather, with_prompt,
};

fn anthropic(server: &Server) -> Anthropic {
    Anthropic::new(&server.url)
        .api_key("sk-ant-test-key")
        .retry(fast_retries())
}

// ---- recorded llama.cpp streams through the agent ----

#[test]
fn llama_server_text_with_usage_replays_through_the_agent() {
    let server = Server::start(vec![
        Reply::sse_file("llama-server/stream_text_usage.sse").chunked(7, Duration::ZERO),
    ]);
    let (agent, rec) = agent(openai(&server), "smollm2");
    let result = agent.prompt("Hello").unwrap();
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "text x20 \"I'm glad you're here! I'm glad to have you as a guest on my blog.\"",
            "usage in=39 out=21 cache_read=38 cache_write=0 reasoning=0 total=60",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=39 out=21",
        ])
    );
    assert_eq!(result.usage.cache_read, 38);
    let sent = &server.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    let body = sent.json();
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["model"], json!("smollm2"));
    assert_eq!(sent.header("authorization"), None);
}

#[test]
fn llama_server_tool_call_round_trip_replays_through_the_agent() {
    let server = Server::start(vec![
        Reply::sse_file("llama-server/stream_tools_fewshot_usage.sse").chunked(13, Duration::ZERO),
        Reply::sse_file("llama-server/stream_tool_result_followup.sse"),
    ]);
    let (agent, rec) = agent(openai(&server), "smollm2");
    let result = agent.prompt("Weather in Paris?").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "call 20n0LeDcXMvKR1FhfILeQ4PZDPaMYOu5 get_weather",
            "args[0] x8 \"{\\\"city\\\": \\\"Paris\\\"}\"",
            "usage in=300 out=31 cache_read=299 cache_write=0 reasoning=0 total=331",
            "MessageEnd assistant ToolUse calls=1",
            "ToolStart 20n0LeDcXMvKR1FhfILeQ4PZDPaMYOu5 get_weather {\"city\": \"Paris\"}",
            "ToolExecute 20n0LeDcXMvKR1FhfILeQ4PZDPaMYOu5 {\"city\":\"Paris\"}",
            "ToolEnd 20n0LeDcXMvKR1FhfILeQ4PZDPaMYOu5 ok Paris: 21 C, sunny",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "MessageStart assistant",
            "text x17 \"<tool_response>\\n{\\\"temp_c\\\":21, \\\"sky\\\":\\\"sunny\\\"}\"",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 2 no_tool_calls",
            "AgentEnd no_tool_calls in=300 out=31",
        ])
    );
    let second = server.requests()[1].json();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1]["role"], json!("assistant"));
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["name"],
        json!("get_weather")
    );
    assert_eq!(messages[2]["role"], json!("tool"));
    assert_eq!(
        messages[2]["tool_call_id"],
        messages[1]["tool_calls"][0]["id"]
    );
    assert_eq!(messages[2]["content"], json!("Paris: 21 C, sunny"));
    assert_eq!(second["tools"][0]["function"]["name"], json!("get_weather"));
}

#[test]
fn llama_server_parallel_tool_calls_replay_through_the_agent() {
    let replies = vec![
        Reply::sse_file("llama-server/stream_tools_fewshot_parallel.sse"),
        Reply::sse_file("llama-server/stream_text_usage.sse"),
    ];
    let (lines, _, _) = replay("smollm2", replies, "Weather in Paris and Tokyo?");
    assert_eq!(
        lines,
        with_prompt(&[
            "call U0PjMGUf2dCsy1cwSgfsj9swfWHLnBjs get_weather",
            "args[0] x8 \"{\\\"city\\\": \\\"Paris\\\"}\"",
            "call 7qvyGyfzbOftEPLIiypBRGquXPUsCEIj get_weather",
            "args[1] x9 \"{\\\"city\\\": \\\"Tokyo\\\"}\"",
            "MessageEnd assistant ToolUse calls=2",
            "ToolStart U0PjMGUf2dCsy1cwSgfsj9swfWHLnBjs get_weather {\"city\": \"Paris\"}",
            "ToolExecute U0PjMGUf2dCsy1cwSgfsj9swfWHLnBjs {\"city\":\"Paris\"}",
            "ToolEnd U0PjMGUf2dCsy1cwSgfsj9swfWHLnBjs ok Paris: 21 C, sunny",
            "ToolStart 7qvyGyfzbOftEPLIiypBRGquXPUsCEIj get_weather {\"city\": \"Tokyo\"}",
            "ToolExecute 7qvyGyfzbOftEPLIiypBRGquXPUsCEIj {\"city\":\"Tokyo\"}",
            "ToolEnd 7qvyGyfzbOftEPLIiypBRGquXPUsCEIj ok Tokyo: 21 C, sunny",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "MessageStart assistant",
            "text x20 \"I'm glad you're here! I'm glad to have you as a guest on my blog.\"",
            "usage in=39 out=21 cache_read=38 cache_write=0 reasoning=0 total=60",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 2 no_tool_calls",
            "AgentEnd no_tool_calls in=39 out=21",
        ])
    );
}

#[test]
fn llama_server_length_stop_replays_through_the_agent() {
    let replies = vec![Reply::sse_file("llama-server/stream_text_stop_length.sse")];
    let (lines, _, _) = replay("smollm2", replies, "Tell me a story");
    assert_eq!(
        lines,
        with_prompt(&[
            "text x5 \"Once upon a time,\"",
            "MessageEnd assistant Length calls=0",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=0 out=0",
        ])
    );
}

#[test]
fn llama_cpp_python_text_replays_through_the_agent() {
    let replies =
        vec![Reply::sse_file("llama-cpp-python/stream_text.sse").chunked(64, Duration::ZERO)];
    let (lines, _, _) = replay("smollm2", replies, "Hello");
    assert_eq!(
        lines,
        with_prompt(&[
            "text x28 \"I'm so glad you're here. I hope it brings a smile to your face, and I promise to make things right for you.\"",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=0 out=0",
        ])
    );
}

#[test]
fn llama_cpp_python_repeated_tool_ids_make_one_call() {
    let server = Server::start(vec![Reply::sse_file(
        "llama-cpp-python/stream_tools_forced.sse",
    )]);
    let agent = Agent::builder()
        .provider(openai(&server))
        .model("smollm2")
        .tool(weather())
        .max_turns(1)
        .final_turn(pagent::FinalTurn::Off)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    agent.prompt("Weather in Paris?").unwrap();
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "call call__0_get_weather_cmpl-d7d616aa-9765-490b-9483-b8317432434e get_weather",
            "args[0] x8 \"{ \\\"city\\\": \\\"Paris\\\" }\"",
            "MessageEnd assistant ToolUse calls=1",
            "ToolStart call__0_get_weather_cmpl-d7d616aa-9765-490b-9483-b8317432434e get_weather { \"city\": \"Paris\" }",
            "ToolExecute call__0_get_weather_cmpl-d7d616aa-9765-490b-9483-b8317432434e {\"city\":\"Paris\"}",
            "ToolEnd call__0_get_weather_cmpl-d7d616aa-9765-490b-9483-b8317432434e ok Paris: 21 C, sunny",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 max_turns",
            "AgentEnd max_turns in=0 out=0",
        ])
    );
}

/// `FinalTurn::ToolsWithheld` (pagent v5): the request of the final answer turn has no
/// `tools`, the others have them; the default (pagent v4) offers them in every request.
#[test]
fn final_turn_withholds_the_tools_from_the_request() {
    for (final_turn, tools_in_final) in [
        (pagent::FinalTurn::ToolsWithheld, false),
        (pagent::FinalTurn::ToolsNotRun, true),
    ] {
        let server = Server::start(vec![
            Reply::sse_file("llama-cpp-python/stream_tools_forced.sse"),
            Reply::sse_file("llama-cpp-python/stream_text.sse"),
        ]);
        let agent = Agent::builder()
            .provider(openai(&server))
            .model("smollm2")
            .tool(weather())
            .max_turns(1)
            .final_turn(final_turn)
            .build()
            .unwrap();
        let result = agent.prompt("Weather in Paris?").unwrap();
        assert_eq!(result.stop_reason, pagent::RunStopReason::NoToolCalls);
        let has_tools: Vec<bool> = server
            .requests()
            .iter()
            .map(|r| r.json().get("tools").is_some())
            .collect();
        assert_eq!(has_tools, [true, tools_in_final], "{final_turn:?}");
    }
}

#[test]
fn llama_server_context_overflow_is_a_typed_http_error() {
    let server = Server::start(vec![Reply::json(
        400,
        data("llama-server/err_context_overflow.json"),
    )]);
    let (agent, rec) = agent(openai(&server), "smollm2");
    let error = agent.prompt("a very long prompt").unwrap_err().into_error();
    assert_eq!(error.kind(), ErrorKind::ContextOverflow);
    assert_eq!(error.status(), Some(400));
    assert!(error.is_context_overflow());
    assert_eq!(
        error.to_string(),
        format!(
            "http status 400: request (5033 tokens) exceeds the available context size (4096 tokens), try increasing it (POST {}/v1/chat/completions)",
            server.url
        )
    );
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            &format!(
                "MessageEnd assistant Error calls=0 error=http status 400: request (5033 tokens) exceeds the available context size (4096 tokens), try increasing it (POST {}/v1/chat/completions)",
                server.url
            ),
            "TurnEnd 1 error",
            "AgentEnd error in=0 out=0",
        ])
    );
    assert_eq!(server.requests().len(), 1, "a 400 is not retried");
}

// ---- streams written from the providers' documentation ----

#[test]
fn openai_tool_call_fragments_across_chunks() {
    let replies = vec![
        Reply::sse_file("written/openai_tool_fragments.sse").chunked(5, Duration::ZERO),
        Reply::sse_file("written/openai_reasoning.sse"),
    ];
    let (lines, _, _) = replay("gpt-4o-mini", replies, "Weather in Paris?");
    assert_eq!(
        lines,
        with_prompt(&[
            "call call_DdmO9pD3xa9XTPNJ32zg2hcA get_weather",
            "args[0] x6 \"{\\\"city\\\":\\\"Paris\\\"}\"",
            "usage in=80 out=18 cache_read=64 cache_write=0 reasoning=0 total=98",
            "MessageEnd assistant ToolUse calls=1",
            "ToolStart call_DdmO9pD3xa9XTPNJ32zg2hcA get_weather {\"city\":\"Paris\"}",
            "ToolExecute call_DdmO9pD3xa9XTPNJ32zg2hcA {\"city\":\"Paris\"}",
            "ToolEnd call_DdmO9pD3xa9XTPNJ32zg2hcA ok Paris: 21 C, sunny",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "MessageStart assistant",
            "thinking x2 \"Short thought.\"",
            "text x1 \"Done.\"",
            "usage in=9 out=5 cache_read=0 cache_write=0 reasoning=0 total=14",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 2 no_tool_calls",
            "AgentEnd no_tool_calls in=89 out=23",
        ])
    );
}

#[test]
fn openai_parallel_tool_calls_are_keyed_by_index() {
    let replies = vec![
        Reply::sse_file("written/openai_parallel_tools.sse"),
        Reply::sse_file("written/openai_reasoning.sse"),
    ];
    let (lines, _, _) = replay("gpt-4o-mini", replies, "Weather in Oslo and Tokyo?");
    assert_eq!(
        lines,
        with_prompt(&[
            "call call_a get_weather",
            "call call_b get_weather",
            "args[0] x1 \"{\\\"city\\\":\"",
            "args[1] x2 \"{\\\"city\\\":\\\"Tokyo\\\"}\"",
            "args[0] x1 \"\\\"Oslo\\\"}\"",
            "usage in=120 out=40 cache_read=0 cache_write=0 reasoning=0 total=160",
            "MessageEnd assistant ToolUse calls=2",
            "ToolStart call_a get_weather {\"city\":\"Oslo\"}",
            "ToolExecute call_a {\"city\":\"Oslo\"}",
            "ToolEnd call_a ok Oslo: 21 C, sunny",
            "ToolStart call_b get_weather {\"city\":\"Tokyo\"}",
            "ToolExecute call_b {\"city\":\"Tokyo\"}",
            "ToolEnd call_b ok Tokyo: 21 C, sunny",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "MessageStart assistant",
            "thinking x2 \"Short thought.\"",
            "text x1 \"Done.\"",
            "usage in=9 out=5 cache_read=0 cache_write=0 reasoning=0 total=14",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 2 no_tool_calls",
            "AgentEnd no_tool_calls in=129 out=45",
        ])
    );
}

#[test]
fn openai_reasoning_content_and_reasoning_usage() {
    let server = Server::start(vec![Reply::sse_file(
        "written/openai_reasoning_content.sse",
    )]);
    let (agent, rec) = agent(openai(&server), "deepseek-reasoner");
    agent.set_thinking(pagent::llm::ThinkingLevel::High);
    let result = agent.prompt("2+2?").unwrap();
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "thinking x3 \"The user asks 2+2; that is 4.\"",
            "text x2 \"2 + 2 = 4.\"",
            "usage in=15 out=30 cache_read=0 cache_write=0 reasoning=22 total=45",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=15 out=30",
        ])
    );
    let reply = result.messages[1].as_assistant().unwrap();
    assert_eq!(reply.thinking(), "The user asks 2+2; that is 4.");
    assert_eq!(
        server.requests()[0].json()["reasoning_effort"],
        json!("high")
    );
}

#[test]
fn anthropic_thinking_and_tool_use_round_trip() {
    let server = Server::start(vec![
        Reply::sse_file("written/anthropic_thinking_tool_use.sse").chunked(11, Duration::ZERO),
        Reply::sse_file("written/anthropic_text.sse"),
    ]);
    let (agent, rec) = agent(anthropic(&server), "claude-sonnet-4-5");
    agent.set_thinking(pagent::llm::ThinkingLevel::Low);
    let result = agent.prompt("Weather in Paris?").unwrap();
    assert_eq!(result.text(), "It is sunny in Paris.");
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "usage in=592 out=2 cache_read=100 cache_write=20 reasoning=0 total=594",
            "thinking x2 \"The user wants the weather in Paris.\"",
            "signature EqQBCgIYAhIM1gbcDa9GJwZA2b3h",
            "text x2 \"I'll check the weather.\"",
            "call toolu_01A09q90qw90lq917835lq9 get_weather",
            "args[0] x2 \"{\\\"city\\\": \\\"Paris\\\"}\"",
            "usage in=592 out=89 cache_read=100 cache_write=20 reasoning=0 total=681",
            "MessageEnd assistant ToolUse calls=1",
            "ToolStart toolu_01A09q90qw90lq917835lq9 get_weather {\"city\": \"Paris\"}",
            "ToolExecute toolu_01A09q90qw90lq917835lq9 {\"city\":\"Paris\"}",
            "ToolEnd toolu_01A09q90qw90lq917835lq9 ok Paris: 21 C, sunny",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "MessageStart assistant",
            "usage in=600 out=1 cache_read=0 cache_write=0 reasoning=0 total=601",
            "text x2 \"It is sunny in Paris.\"",
            "usage in=600 out=12 cache_read=0 cache_write=0 reasoning=0 total=612",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 2 no_tool_calls",
            "AgentEnd no_tool_calls in=1192 out=101",
        ])
    );
    let requests = server.requests();
    let first = &requests[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.header("x-api-key"), Some("sk-ant-test-key"));
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        first.json()["thinking"],
        json!({"type": "enabled", "budget_tokens": 4096})
    );
    let second = requests[1].json();
    assert_eq!(
        second["messages"],
        json!([
            // Prompt caching (on by default): the end of the previous request and the
            // newest block end cached prefixes.
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?",
                                          "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user wants the weather in Paris.",
                 "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
                {"type": "text", "text": "I'll check the weather."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                 "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                 "content": "Paris: 21 C, sunny", "is_error": false,
                 "cache_control": {"type": "ephemeral"}},
            ]},
        ])
    );
}

// ---- adversarial streams: a typed error, the partial reply kept ----

/// Runs one prompt against `reply` and returns the run's error, the event lines and the
/// text of the kept partial reply.
fn failing(
    provider: impl FnOnce(&Server) -> OpenAiCompat,
    reply: Reply,
) -> (Error, Vec<String>, String) {
    let server = Server::start(vec![reply]);
    let (agent, rec) = agent(provider(&server), "gpt-4o-mini");
    let (error, result) = agent.prompt("Hi").unwrap_err().into_parts();
    assert_eq!(result.stop_reason, RunStopReason::Error);
    assert_eq!(
        server.requests().len(),
        1,
        "no retry once the reply started"
    );
    let text = result.text();
    (error, rec.lines(), text)
}

#[test]
fn truncated_mid_json_is_a_stream_error_keeping_the_partial() {
    let (error, lines, text) = failing(openai, Reply::sse_file("written/truncated_mid_json.sse"));
    assert_eq!(
        error,
        Error::Stream("the stream ended before a finish_reason".into())
    );
    assert_eq!(text, "Hello wor");
    assert_eq!(
        lines,
        with_prompt(&[
            "text x2 \"Hello wor\"",
            "MessageEnd assistant Error calls=0 error=malformed stream: the stream ended before a finish_reason",
            "TurnEnd 1 error",
            "AgentEnd error in=0 out=0",
        ])
    );
}

#[test]
fn broken_streams_are_typed_errors_keeping_the_partial() {
    let stream = |m: &str| Error::Stream(m.into());
    let cases = [
        (
            "missing_finish_reason",
            stream("the stream ended before a finish_reason"),
        ),
        (
            "error_event",
            Error::Api {
                kind: "server_error".into(),
                message: "The server had an error while processing your request. Sorry about that!"
                    .into(),
            },
        ),
        (
            "invalid_utf8",
            stream("the event stream is not valid utf-8"),
        ),
        (
            "over_long_event",
            stream("an event is larger than the limit of 1024 bytes"),
        ),
    ];
    for (name, expected) in cases {
        let small = |s: &Server| openai(s).max_event_bytes(1024);
        let reply = Reply::sse_file(&format!("written/{name}.sse"));
        let (error, _, text) = failing(small, reply);
        assert_eq!(error, expected, "{name}");
        assert_eq!(text, "Hello wor", "{name}");
    }
}

#[test]
fn a_connection_dropped_mid_reply_is_a_connection_error() {
    let (error, _, text) = failing(openai, Reply::sse_file("written/mid_reply.sse").cut());
    assert!(matches!(error, Error::Connection(_)), "{error:?}");
    assert_eq!(text, "Hello wor");
}

/// Anthropic's events, blocks and deltas are read by their `type` wherever it stands, first,
/// last or escaped; blocks, deltas and events of other types are skipped whatever their
/// fields hold; a known block or delta without a field its type requires, and an event that
/// is not JSON (one the decoder skips included), are typed stream errors that keep what
/// streamed before them.
#[test]
fn anthropic_objects_are_read_by_their_type_wherever_it_stands() {
    let events = [
        r#"{"type":"message_start","message":{"id":"msg_o","model":"claude-x","usage":{"input_tokens":5}}}"#,
        r#"{"index":0,"content_block":{"text":"","type":"text"},"type":"content_block_start"}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"text":"Sunny \u00e9","type":"text_delta"}}"#,
        r#"{"type":"content_block_d\u0065lta","index":0,"delta":{"type":"text_delta","text":", warm"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"cited_text":"x"},"text":7}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"abc","text":{"not":"text"},"id":3}}"#,
        r#"{"type":"ping","anything":[1,{"a":null}]}"#,
        r#"{"type":"a_future_event","index":"one","delta":7}"#,
        r#"{"type":"content_block_start","index":2,"content_block":{"name":"get_weather","id":"toolu_o","input":{},"type":"tool_use"}}"#,
        r#"{"type":"content_block_delta","index":2,"delta":{"partial_json":"{}","type":"input_json_delta"}}"#,
        r#"{"usage":{"output_tokens":9},"delta":{"stop_reason":"tool_use"},"type":"message_delta"}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let stream: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    let server = Server::start(vec![
        Reply::sse(stream),
        Reply::sse_file("written/anthropic_text.sse"),
    ]);
    let (first, rec) = agent(anthropic(&server), "claude-x");
    first.prompt("Hi").unwrap();
    assert_eq!(
        rec.lines()[4..11],
        [
            "MessageStart assistant",
            "usage in=5 out=0 cache_read=0 cache_write=0 reasoning=0 total=5",
            "text x2 \"Sunny é, warm\"",
            "call toolu_o get_weather",
            "args[0] x1 \"{}\"",
            "usage in=5 out=9 cache_read=0 cache_write=0 reasoning=0 total=14",
            "MessageEnd assistant ToolUse calls=1",
        ]
    );

    let start = [
        r#"{"type":"message_start","message":{"id":"msg_b"}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Kept"}}"#,
    ];
    for (bad, says) in [
        (
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","name":"f"}}"#,
            "missing field `id`",
        ),
        (
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":null}}"#,
            "invalid type: null",
        ),
        (
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":["no"]}}"#,
            "invalid type",
        ),
        (
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":null}}"#,
            "invalid type: null",
        ),
        (r#"{"type":"ping","cut"#, "an event is not valid json"),
        (
            r#"{"type":"message_stop"} and more"#,
            "an event is not valid json",
        ),
    ] {
        let stream: String = start
            .iter()
            .chain([&bad])
            .map(|e| format!("data: {e}\n\n"))
            .collect();
        let server = Server::start(vec![Reply::sse(stream)]);
        let (agent, _) = agent(anthropic(&server), "claude-x");
        let (error, result) = agent.prompt("Hi").unwrap_err().into_parts();
        let Error::Stream(message) = &error else {
            panic!("not a stream error for {bad}: {error:?}");
        };
        assert!(
            message.starts_with("an event is not valid json") && message.contains(says),
            "{bad}: {message}"
        );
        let reply = result.messages[1].as_assistant().unwrap();
        assert_eq!(
            (reply.text(), reply.stop_reason),
            ("Kept".to_owned(), StopReason::Error),
            "{bad}"
        );
    }
}

#[test]
fn anthropic_error_event_is_an_api_error() {
    let stream = String::from_utf8(data("written/anthropic_error.sse")).unwrap();
    api_error_keeping(
        anthropic,
        stream,
        ("overloaded_error", "Overloaded"),
        "Partial",
    );
}

/// Streams one reply of `provider` to a plain prompt, outside any agent: the result and the
/// events it produced.
fn stream_once(
    provider: &dyn Provider,
) -> (Result<pagent::AssistantMessage, Error>, Vec<StreamEvent>) {
    let request = Request::new("m", vec![Message::user("Hi").into()]);
    let mut events = Vec::new();
    let result = provider.stream(&request, &CancelToken::new(), &mut |e| {
        events.push(e);
        Ok(())
    });
    // Assembled from the events, as the agent does it.
    let mut partial = pagent::PartialMessage::new("m");
    events.iter().for_each(|e| partial.push(e));
    let result = result.map(|end| {
        let mut message = partial.to_message(end.stop_reason);
        message.response_id = end.response_id;
        message.model = end.model.unwrap_or(message.model);
        message
    });
    (result, events)
}

#[test]
fn usage_counts_at_u64_max_do_not_overflow() {
    let max = u64::MAX;
    let openai_usage = sse(&[
        json!({"choices": [{"delta": {"content": "Hi"}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": max, "completion_tokens": max, "total_tokens": 0}}),
    ]) + "data: [DONE]\n\n";
    let anthropic_usage = sse(&[
        json!({"type": "message_start", "message": {"usage": {"input_tokens": max,
               "cache_read_input_tokens": max, "cache_creation_input_tokens": max, "output_tokens": max}}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": max}}),
        json!({"type": "message_stop"}),
    ]);
    let server = Server::start(vec![Reply::sse(openai_usage), Reply::sse(anthropic_usage)]);
    for provider in [
        &openai(&server) as &dyn Provider,
        &anthropic(&server) as &dyn Provider,
    ] {
        let (result, _) = stream_once(provider);
        let usage = result.unwrap().usage;
        assert_eq!(
            (usage.input, usage.output, usage.total),
            (max, max, max),
            "{}",
            provider.name()
        );
    }
}

/// An event stream of these `data:` payloads.
fn sse(events: &[serde_json::Value]) -> String {
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

/// Runs one prompt on the provider `provider` makes for a server replaying `stream`, checks
/// that it failed with `Error::Api { kind, message }` keeping `text` as the partial reply,
/// and returns the event lines.
fn api_error_keeping<P: Provider + 'static>(
    provider: impl FnOnce(&Server) -> P,
    stream: String,
    (kind, message): (&str, &str),
    text: &str,
) -> Vec<String> {
    let server = Server::start(vec![Reply::sse(stream)]);
    let (agent, rec) = agent(provider(&server), "m");
    let (error, result) = agent.prompt("Hi").unwrap_err().into_parts();
    let expected = Error::Api {
        kind: kind.into(),
        message: message.into(),
    };
    assert_eq!(error, expected);
    assert_eq!(result.text(), text);
    rec.lines()
}

#[test]
fn openai_content_filter_is_an_api_error_keeping_the_partial() {
    let stream = sse(&[
        json!({"choices": [{"delta": {"content": "Hello"}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "content_filter"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}),
    ]) + "data: [DONE]\n\n";
    let message = "the reply was stopped by the content filter";
    assert_eq!(
        api_error_keeping(openai, stream, ("content_filter", message), "Hello"),
        with_prompt(&[
            "text x1 \"Hello\"",
            "usage in=5 out=1 cache_read=0 cache_write=0 reasoning=0 total=6",
            "MessageEnd assistant Error calls=0 error=provider reported content_filter: the reply was stopped by the content filter",
            "TurnEnd 1 error",
            "AgentEnd error in=5 out=1",
        ])
    );
}

#[test]
fn anthropic_refusal_is_an_api_error_keeping_the_partial() {
    let stream = sse(&[
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "I can"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "refusal"}, "usage": {"output_tokens": 2}}),
        json!({"type": "message_stop"}),
    ]);
    let message = "the model refused to answer";
    assert_eq!(
        api_error_keeping(anthropic, stream, ("refusal", message), "I can"),
        with_prompt(&[
            "usage in=5 out=1 cache_read=0 cache_write=0 reasoning=0 total=6",
            "text x1 \"I can\"",
            "usage in=5 out=2 cache_read=0 cache_write=0 reasoning=0 total=7",
            "MessageEnd assistant Error calls=0 error=provider reported refusal: the model refused to answer",
            "TurnEnd 1 error",
            "AgentEnd error in=5 out=2",
        ])
    );
}

#[test]
fn keep_alive_comments_and_crlf_are_read_as_usual() {
    let replies = vec![Reply::sse_file("written/keepalive_crlf.sse").chunked(3, Duration::ZERO)];
    let (lines, _, _) = replay("gpt-4o-mini", replies, "Hi");
    assert_eq!(
        lines,
        with_prompt(&[
            "text x2 \"Hello\"",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=0 out=0",
        ])
    );
}

// ---- retries ----

#[test]
fn a_429_with_retry_after_is_retried_then_succeeds() {
    let server = Server::start(vec![
        Reply::json(
            429,
            r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#,
        )
        .header("Retry-After", "1"),
        Reply::sse_file("written/keepalive_crlf.sse"),
    ]);
    let (agent, rec) = agent(openai(&server), "gpt-4o-mini");
    // While the agent waits, the state says why.
    let handle = agent.handle();
    let during = std::sync::Arc::new(std::sync::Mutex::new(None));
    let at_first_text = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (seen, text_seen) = (during.clone(), at_first_text.clone());
    let _sub = agent.subscribe(move |e: &pagent::AgentEvent| match e {
        pagent::AgentEvent::MessageUpdate {
            delta: StreamEvent::Retry { .. },
            ..
        } => *seen.lock().unwrap() = handle.snapshot().retry.clone(),
        pagent::AgentEvent::MessageUpdate {
            delta: StreamEvent::TextDelta { .. },
            ..
        } => {
            let mut first = text_seen.lock().unwrap();
            if first.is_none() {
                *first = Some(handle.snapshot().retry.clone());
            }
        }
        _ => {}
    });
    let before = std::time::SystemTime::now();
    let start = Instant::now();
    let result = agent.prompt("Hi").unwrap();
    // When the wait began and when it ends: a UI's countdown needs nothing else.
    let retry = during
        .lock()
        .unwrap()
        .clone()
        .expect("a retry in the state");
    let StreamEvent::Retry { at: Some(at), .. } = retry else {
        panic!("a retry without its start: {retry:?}");
    };
    assert!(at + Duration::from_millis(1) >= before, "{at:?} {before:?}");
    assert_eq!(retry.retry_ends_at(), Some(at + Duration::from_secs(1)));
    assert_eq!(
        *at_first_text.lock().unwrap(),
        Some(None),
        "the wait is over once the retried request answers"
    );
    assert_eq!(
        during
            .lock()
            .unwrap()
            .as_ref()
            .and_then(StreamEvent::retry_delay),
        Some(Duration::from_secs(1))
    );
    assert_eq!(
        agent.snapshot().retry,
        None,
        "cleared once the reply streams"
    );
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "Retry-After is honoured"
    );
    assert_eq!(result.text(), "Hello");
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            &format!(
                "retry 1 after 1000 ms: http status 429: Rate limit reached (POST {}/v1/chat/completions)",
                server.url
            ),
            "text x2 \"Hello\"",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=0 out=0",
        ])
    );
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn retry_after_ms_is_honoured() {
    let server = Server::start(vec![
        Reply::json(503, "").header("retry-after-ms", "20"),
        Reply::sse_file("written/keepalive_crlf.sse"),
    ]);
    let (agent, rec) = agent(openai(&server), "gpt-4o-mini");
    agent.prompt("Hi").unwrap();
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            &format!(
                "retry 1 after 20 ms: http status 503: the server gave no reason for status 503 (POST {}/v1/chat/completions)",
                server.url
            ),
            "text x2 \"Hello\"",
            "MessageEnd assistant Stop calls=0",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=0 out=0",
        ])
    );
}

#[test]
fn anthropic_overloaded_is_retried_with_its_own_message() {
    let server = Server::start(vec![
        Reply::json(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        Reply::sse_file("written/anthropic_text.sse"),
    ]);
    let (agent, rec) = agent(anthropic(&server), "claude-sonnet-4-5");
    let result = agent.prompt("Weather?").unwrap();
    assert_eq!(result.text(), "It is sunny in Paris.");
    let retry = &rec.lines()[5];
    assert!(
        retry.starts_with("retry 1 after ")
            && retry.ends_with(&format!(
                " ms: http status 529: Overloaded (POST {}/v1/messages)",
                server.url
            )),
        "{retry}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_500_three_times_gives_up_with_a_clear_error() {
    let body = String::from_utf8(data("llama-server/err_bad_json.json")).unwrap();
    let server = Server::start(vec![Reply::json(500, body.clone()); 3]);
    let (agent, rec) = agent(openai(&server), "gpt-4o-mini");
    let error = agent.prompt("Hi").unwrap_err().into_error();
    assert_eq!(error.status(), Some(500));
    assert_eq!(error.kind(), ErrorKind::Server(Some(500)));
    assert!(
        error.to_string().ends_with(&format!(
            "expected ']' (POST {}/v1/chat/completions) (gave up after 3 attempts)",
            server.url
        )),
        "{error}"
    );
    assert_eq!(server.requests().len(), 3);
    let retries = rec
        .lines()
        .iter()
        .filter(|l| l.starts_with("retry "))
        .count();
    assert_eq!(retries, 2);
}

#[test]
fn no_retry_after_the_first_byte_arrived() {
    let server = Server::start(vec![
        Reply::sse_file("written/mid_reply.sse").cut(),
        Reply::sse_file("written/keepalive_crlf.sse"),
    ]);
    let (agent, _) = agent(openai(&server), "gpt-4o-mini");
    let failed = agent.prompt("Hi").unwrap_err();
    assert_eq!(failed.result().stop_reason, RunStopReason::Error);
    assert_eq!(failed.kind(), ErrorKind::Connection);
    assert_eq!(server.requests().len(), 1);
}

// ---- timeouts and abort ----

/// How long the server stalls in the abort tests. An abort that worked returns in
/// milliseconds, one that did not waits for the stall to end; the tests assert half of it,
/// which no loaded machine reaches. The latency itself is measured in the benches.
const STALL: Duration = Duration::from_secs(20);

#[test]
fn abort_while_the_server_stalls_returns_cancelled_promptly() {
    // Headers, then nothing at all.
    let server = Server::start(vec![Reply::sse("").stall(STALL)]);
    let (agent, rec) = agent(openai(&server), "gpt-4o-mini");
    let handle = agent.handle();
    let (result, returned, aborted_at) = std::thread::scope(|s| {
        let aborter = s.spawn(|| {
            // Abort once the request reached the server (not after a guessed delay, which a
            // loaded machine can outlast before the run even starts).
            let deadline = Instant::now() + STALL;
            while server.requests().is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let at = Instant::now();
            assert!(handle.abort(), "the run is active");
            at
        });
        let result = agent.prompt("Hi").unwrap();
        (result, Instant::now(), aborter.join().unwrap())
    });
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    let latency = returned - aborted_at;
    assert!(latency < STALL / 2, "{latency:?}");
    eprintln!("abort to return while the server stalls: {latency:?}");
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "MessageEnd assistant Aborted calls=0 error=aborted",
            "TurnEnd 1 cancelled",
            "AgentEnd cancelled in=0 out=0",
        ])
    );
}

#[test]
fn abort_before_the_response_headers_returns_promptly() {
    // A server that accepts the connection and never answers, not even with headers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let held = listener.accept();
        std::thread::sleep(STALL);
        drop(held);
    });
    let provider = OpenAiCompat::new(url);
    let cancel = CancelToken::new();
    let remote = cancel.clone();
    let aborter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        remote.cancel();
        Instant::now()
    });
    let r = provider.stream(&Request::default(), &cancel, &mut |_| Ok(()));
    let returned = Instant::now();
    assert_eq!(r.unwrap_err(), Error::Aborted);
    assert!(returned - aborter.join().unwrap() < STALL / 2);
}

#[test]
fn abort_mid_stream_keeps_the_partial_reply() {
    let server = Server::start(vec![
        Reply::sse_file("written/mid_reply.sse").stall(Duration::from_secs(20)),
    ]);
    let (agent, _) = agent(openai(&server), "gpt-4o-mini");
    let handle = agent.handle();
    let _sub = agent.subscribe(move |e: &pagent::AgentEvent| {
        if let pagent::AgentEvent::MessageUpdate { message, .. } = e
            && message.text() == "Hello wor"
        {
            handle.abort();
        }
    });
    let result = agent.prompt("Hi").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    let reply = result.messages[1].as_assistant().unwrap();
    assert_eq!(
        (reply.stop_reason, reply.text().as_str()),
        (StopReason::Aborted, "Hello wor")
    );
}

#[test]
fn a_first_byte_timeout_is_not_retried() {
    let server = Server::start(vec![
        Reply::sse("").stall(Duration::from_secs(20)),
        Reply::sse("").stall(Duration::from_secs(20)),
    ]);
    // Retries on (the default policy): a silent server is still asked only once.
    let provider = openai(&server).first_byte_timeout(Duration::from_millis(200));
    let request = Request::new("m", vec![Message::user("Hi").into()]);
    let mut retries = 0;
    let r = provider.stream(&request, &CancelToken::new(), &mut |e| {
        if matches!(e, StreamEvent::Retry { .. }) {
            retries += 1;
        }
        Ok(())
    });
    assert_eq!(r.unwrap_err(), Error::Timeout(TimeoutPhase::FirstByte));
    assert_eq!(retries, 0);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn timeouts_name_their_phase() {
    let server = Server::start(vec![
        Reply::sse("").stall(Duration::from_secs(20)),
        Reply::sse_file("written/mid_reply.sse").stall(Duration::from_secs(20)),
    ]);
    let provider = openai(&server)
        .retry(RetryPolicy::none())
        .first_byte_timeout(Duration::from_millis(200))
        .idle_timeout(Duration::from_millis(200));
    let request = Request::new("m", vec![Message::user("Hi").into()]);
    let cancel = CancelToken::new();
    let r = provider.stream(&request, &cancel, &mut |_| Ok(()));
    assert_eq!(r.unwrap_err(), Error::Timeout(TimeoutPhase::FirstByte));
    let mut texts = String::new();
    let r = provider.stream(&request, &cancel, &mut |e| {
        if let StreamEvent::TextDelta { text } = e {
            texts.push_str(&text);
        }
        Ok(())
    });
    assert_eq!(r.unwrap_err(), Error::Timeout(TimeoutPhase::Idle));
    assert_eq!(texts, "Hello wor");
}

#[test]
fn a_refused_connection_is_retried_then_reported() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let provider = OpenAiCompat::new(format!("http://127.0.0.1:{port}/v1")).retry(fast_retries());
    let mut retries = 0;
    let r = provider.stream(&Request::default(), &CancelToken::new(), &mut |e| {
        retries += matches!(e, StreamEvent::Retry { .. }) as u32;
        Ok(())
    });
    let error = r.unwrap_err();
    assert!(
        matches!(&error, Error::Connection(m) if m.contains("gave up after 7 attempts")),
        "{error:?}"
    );
    // A failed connection's count (6 by default), not a status's (2).
    assert_eq!(retries, 6);
}

// ---- secrets ----

#[test]
fn the_api_key_never_shows_in_debug_errors_or_events() {
    let key = "sk-test-SECRET-1234";
    let server = Server::start(vec![Reply::json(
        401,
        format!(
            r#"{{"error":{{"message":"Incorrect API key provided: {key}","type":"invalid_request_error"}}}}"#
        ),
    )]);
    let provider = openai(&server).api_key(key);
    assert!(!format!("{provider:?}").contains(key));
    let anthropic = Anthropic::new("http://x").api_key(key);
    assert!(!format!("{anthropic:?}").contains(key));
    let (agent, rec) = agent(provider, "gpt-4o-mini");
    let error = agent.prompt("Hi").unwrap_err().into_error();
    assert_eq!(error.kind(), ErrorKind::Auth);
    assert_eq!(
        error.to_string(),
        format!(
            "http status 401: Incorrect API key provided: <redacted> (POST {}/v1/chat/completions)",
            server.url
        )
    );
    assert!(!format!("{:?}", rec.events()).contains(key));
    assert!(!format!("{:?}", agent.snapshot()).contains(key));
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
}

#[test]
fn an_api_key_echoed_in_error_bodies_and_stream_errors_is_scrubbed_everywhere() {
    let key = "sk-test-SECRET-1234";
    let echo = format!("the key {key} is not allowed");
    let body = json!({"error": {"message": echo, "type": "server_error"}}).to_string();
    let openai_stream = sse(&[
        json!({"choices": [{"delta": {"content": "Hello"}}]}),
        json!({"error": {"message": echo, "type": "invalid_request_error"}}),
    ]);
    let anthropic_stream = sse(&[
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": "Hello"}}),
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": echo}}),
    ]);
    let server = Server::start(vec![
        Reply::json(500, body.clone()),
        Reply::sse(openai_stream),
        Reply::json(529, body),
        Reply::sse(anthropic_stream),
    ]);
    let providers: [std::sync::Arc<dyn Provider>; 2] = [
        std::sync::Arc::new(openai(&server).api_key(key)),
        std::sync::Arc::new(anthropic(&server).api_key(key)),
    ];
    for provider in providers {
        let name = provider.name().to_owned();
        let (agent, rec) = agent(provider, "m");
        let (error, result) = agent.prompt("Hi").unwrap_err().into_parts();
        let redacted = "the key <redacted> is not allowed";
        assert_eq!(
            error,
            Error::Api {
                kind: "invalid_request_error".into(),
                message: redacted.into()
            },
            "{name}"
        );
        assert_eq!(result.text(), "Hello", "{name}");
        let lines = rec.lines();
        assert!(
            lines.iter().any(|l| l.starts_with("retry 1")
                && l.contains(&format!("{redacted} (POST {}", server.url))),
            "{name}: {lines:?}"
        );
        let wire: Vec<String> = rec
            .events()
            .iter()
            .map(pagent::wire::encode_event_line)
            .collect();
        assert!(wire.iter().any(|l| l.contains(redacted)), "{name}");
        assert!(!wire.concat().contains(key), "{name}");
        assert!(!format!("{:?}", rec.events()).contains(key), "{name}");
        assert!(!format!("{:?}", agent.snapshot()).contains(key), "{name}");
    }
}

// ---- request bodies ----

#[test]
fn openai_request_carries_the_whole_transcript() {
    let provider = OpenAiCompat::new("http://x/v1")
        .temperature(0.0)
        .max_tokens(64)
        .extra_body(json!({"seed": 7}));
    let request = Request::new(
        "m",
        vec![
            Message::user("Weather?"),
            Message::Assistant(pagent::AssistantMessage::new(
                vec![
                    ContentBlock::thinking("hmm"),
                    ContentBlock::text("Checking."),
                    ContentBlock::ToolCall(pagent::ToolCall::new("c1", "get_weather", "")),
                ],
                StopReason::ToolUse,
            )),
            Message::ToolResult(pagent::ToolResultMessage::new("c1", "get_weather", "sunny")),
        ]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect(),
    )
    .with_system_prompt("Be terse.");
    assert_eq!(
        provider.request_body(&request),
        json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be terse."},
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "temperature": 0.0,
            "max_tokens": 64,
            "seed": 7,
        })
    );
}

// ---- one assembly of the reply, one body per call, a bounded reply ----

/// A provider whose end report says more than its events: a stop reason for tool calls it
/// never streamed, a model and a response id.
struct Boastful;

impl Provider for Boastful {
    fn stream(
        &self,
        _request: &Request,
        _cancel: &CancelToken,
        on_event: &mut pagent::llm::OnEvent<'_>,
    ) -> Result<pagent::llm::ReplyEnd, Error> {
        on_event(StreamEvent::text("only "))?;
        on_event(StreamEvent::text("this"))?;
        Ok(pagent::llm::ReplyEnd::new(StopReason::Stop)
            .response_id("resp-1")
            .model("served-model"))
    }
}

/// The message of each `MessageEnd` equals the partial of the last `MessageUpdate` before
/// it (what a listener saw streaming), apart from how it ended.
fn assert_messages_equal_their_events(events: &[pagent::AgentEvent]) {
    let mut last_partial = None;
    let mut checked = 0;
    for e in events {
        match e {
            pagent::AgentEvent::MessageUpdate { message, .. } => {
                last_partial = Some(message.clone())
            }
            pagent::AgentEvent::MessageEnd { message } => {
                if let (Some(reply), Some(partial)) = (message.as_assistant(), last_partial.take())
                {
                    assert_eq!(reply.content, partial.to_message(reply.stop_reason).content);
                    assert_eq!(reply.usage, partial.usage());
                    checked += 1;
                }
            }
            _ => {}
        }
    }
    assert!(checked > 0, "no streamed reply in {events:?}");
}

#[test]
fn a_provider_end_report_cannot_change_the_message_the_events_built() {
    let agent = Agent::builder()
        .provider(Boastful)
        .model("asked")
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = agent.prompt("Hi").unwrap();
    let reply = result
        .messages
        .last()
        .unwrap()
        .as_assistant()
        .unwrap()
        .clone();
    assert_eq!(reply.text(), "only this");
    assert_eq!(reply.stop_reason, StopReason::Stop);
    assert_eq!(reply.model, "served-model");
    assert_eq!(reply.response_id.as_deref(), Some("resp-1"));
    assert_messages_equal_their_events(&rec.events());
}

#[test]
fn http_replies_are_exactly_what_their_events_showed() {
    let server = Server::start(vec![
        Reply::sse_file("llama-server/stream_tools_fewshot_usage.sse").chunked(13, Duration::ZERO),
        Reply::sse_file("llama-server/stream_tool_result_followup.sse"),
    ]);
    let (agent, rec) = agent(openai(&server), "smollm2");
    agent.prompt("Weather in Paris?").unwrap();
    assert_messages_equal_their_events(&rec.events());
    let reply = agent.snapshot().messages[1].as_assistant().unwrap().clone();
    assert!(reply.response_id.is_some(), "the chunk id is kept");
}

/// A transcript of a few messages of each kind, for request bodies.
fn transcript() -> Vec<Message> {
    vec![
        Message::user("first question"),
        Message::Assistant(pagent::AssistantMessage::new(
            vec![
                ContentBlock::text("calling \"tools\"\n"),
                ContentBlock::ToolCall(pagent::ToolCall::new(
                    "c1",
                    "get_weather",
                    r#"{"city": "Paris"}"#,
                )),
            ],
            StopReason::ToolUse,
        )),
        Message::ToolResult(pagent::ToolResultMessage::new(
            "c1",
            "get_weather",
            "sunny, 21°C",
        )),
    ]
}

#[test]
fn request_bytes_are_identical_across_retries() {
    let anthropic_ok = sse(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 3}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
        json!({"type": "message_stop"}),
    ]);
    for name in ["openai", "anthropic"] {
        let ok = match name {
            "openai" => Reply::sse_file("written/keepalive_crlf.sse"),
            _ => Reply::sse(anthropic_ok.clone()),
        };
        let server = Server::start(vec![
            Reply::json(500, r#"{"error":{"message":"boom"}}"#),
            Reply::json(503, r#"{"error":{"message":"busy"}}"#),
            ok,
        ]);
        let provider: std::sync::Arc<dyn Provider> = match name {
            "openai" => std::sync::Arc::new(openai(&server)),
            _ => std::sync::Arc::new(anthropic(&server)),
        };
        let agent = Agent::builder()
            .provider(provider)
            .model("m")
            .system_prompt("Be terse.")
            .tool(weather())
            .messages(transcript())
            .build()
            .unwrap();
        let result = agent.prompt("and tomorrow?").unwrap();
        assert_eq!(result.text(), if name == "openai" { "Hello" } else { "ok" });
        let bodies: Vec<Vec<u8>> = server.requests().into_iter().map(|r| r.body).collect();
        assert_eq!(bodies.len(), 3, "{name}");
        assert!(
            bodies.iter().all(|b| *b == bodies[0]),
            "{name}: retries send the same bytes"
        );
        let body: serde_json::Value = serde_json::from_slice(&bodies[0]).unwrap();
        assert_eq!(
            body["messages"].as_array().unwrap().len(),
            if name == "openai" { 5 } else { 3 }
        );
    }
}

#[test]
fn a_reply_past_max_reply_bytes_ends_with_a_typed_error_keeping_what_arrived() {
    // 200 deltas of 10 bytes each, far past a 95-byte limit, then the next prompt's reply.
    let chunk =
        |text: &str| json!({"choices": [{"delta": {"content": text}, "finish_reason": null}]});
    let long: Vec<_> = (0..200).map(|i| chunk(&format!("{i:09} "))).collect();
    let server = Server::start(vec![
        Reply::sse(sse(&long) + "data: [DONE]\n\n"),
        Reply::sse_file("written/keepalive_crlf.sse"),
    ]);
    let agent = Agent::builder()
        .provider(openai(&server))
        .model("m")
        .max_reply_bytes(95)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let (error, result) = agent.prompt("Talk").unwrap_err().into_parts();
    assert_eq!(result.stop_reason, RunStopReason::Error);
    assert_eq!(error, Error::ReplyTooLarge { limit: 95 });
    assert_eq!(error.kind(), ErrorKind::ReplyTooLarge);
    let kept: String = (0..9).map(|i| format!("{i:09} ")).collect();
    assert_eq!(result.text(), kept, "the deltas before the limit are kept");
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            &format!("text x9 {kept:?}"),
            "MessageEnd assistant Error calls=0 error=the reply grew past the limit of 95 bytes",
            "TurnEnd 1 error",
            "AgentEnd error in=0 out=0",
        ])
    );
    // The transcript stays valid: the next prompt sends it and gets its answer.
    assert_eq!(agent.prompt("Shorter").unwrap().text(), "Hello");
    let sent = server.requests()[1].json();
    let roles: Vec<_> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
}

#[test]
fn extra_body_overrides_known_fields_without_duplicate_keys() {
    let server = Server::start(vec![Reply::sse_file("written/keepalive_crlf.sse")]);
    let provider = openai(&server).temperature(0.5).extra_body(
        json!({"temperature": 0.0, "stream_options": {"include_usage": false}, "seed": 7}),
    );
    let (agent, _) = agent(provider, "m");
    agent.prompt("Hi").unwrap();
    let sent = &server.requests()[0];
    let text = String::from_utf8(sent.body.clone()).unwrap();
    for key in [
        "\"temperature\"",
        "\"stream_options\"",
        "\"seed\"",
        "\"model\"",
    ] {
        assert_eq!(text.matches(key).count(), 1, "{key} once in {text}");
    }
    let body = sent.json();
    assert_eq!(body["temperature"], json!(0.0));
    assert_eq!(body["stream_options"], json!({"include_usage": false}));
    assert_eq!(body["seed"], json!(7));
    assert_eq!(body["model"], json!("m"));
}

/// A GUI or a wire client must tell a 401 from a 429 from a timeout without reading text: the
/// kind is the same in the `Err` of `prompt`, in `AgentEnd`, in the snapshot, on the native
/// wire, and in a `Mirror` fed those lines.
#[test]
fn a_wire_client_tells_a_401_from_a_429_from_a_timeout() {
    let body = |message: &str| format!(r#"{{"error":{{"message":"{message}","type":"x"}}}}"#);
    let cases = [
        (
            Reply::json(401, body("Incorrect API key")),
            ErrorKind::Auth,
            json!({"kind": "auth"}),
        ),
        (
            Reply::json(429, body("Rate limit reached")),
            ErrorKind::RateLimited,
            json!({"kind": "rate_limited"}),
        ),
        (
            Reply::sse("").stall(Duration::from_secs(20)),
            ErrorKind::Timeout(TimeoutPhase::FirstByte),
            json!({"kind": "timeout", "phase": "first_byte"}),
        ),
        (
            Reply::json(503, body("Overloaded")),
            ErrorKind::Server(Some(503)),
            json!({"kind": "server", "status": 503}),
        ),
        (
            Reply::json(404, body("Not Found")),
            ErrorKind::InvalidRequest(Some(404)),
            json!({"kind": "invalid_request", "status": 404}),
        ),
    ];
    for (reply, kind, mut wire_error) in cases {
        let server = Server::start(vec![reply]);
        let provider = openai(&server)
            .retry(RetryPolicy::none())
            .first_byte_timeout(Duration::from_millis(200));
        let agent = Agent::builder()
            .provider(provider)
            .model("m")
            .build()
            .unwrap();
        let rec = Recorder::attach(&agent);
        let log = wire::Writer::new(Vec::new());
        let _wire = agent.subscribe(log.listener());
        let mut mirror = wire::Mirror::from_state(agent.snapshot().timeline());

        let failed = agent.prompt("Hi").unwrap_err();
        assert_eq!(failed.kind(), kind);
        assert_eq!(Error::from(failed.clone()).kind(), kind, "through `?`");
        // What the run produced: the prompt and the (empty) failed reply.
        assert_eq!(failed.result().stop_reason, RunStopReason::Error);
        assert_eq!(failed.result().messages.len(), 2);
        let expected = ErrorInfo::new(kind, failed.to_string());

        let ends: Vec<_> = rec
            .events()
            .into_iter()
            .filter_map(|e| match e {
                pagent::AgentEvent::AgentEnd {
                    stop_reason, error, ..
                } => Some((stop_reason, error)),
                _ => None,
            })
            .collect();
        assert_eq!(ends, [(RunStopReason::Error, Some(expected.clone()))]);

        let state = agent.snapshot();
        assert_eq!(state.error_kind, Some(kind));
        assert_eq!(state.error_message.as_deref(), Some(&*expected.message));

        let bytes = log.with_output(|b| b.clone());
        let text = String::from_utf8(bytes.clone()).unwrap();
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["method"], "AgentEnd");
        wire_error["message"] = json!(expected.message);
        assert_eq!(last["params"]["error"], wire_error);

        mirror.read_lines(&bytes[..], |_, _| {}).unwrap();
        assert_eq!(mirror.state().error_kind, Some(kind));
        assert_eq!(mirror.state().timeline(), state.timeline());
    }
}

// ---- Chat Completions chunks, field by field ----

/// A Chat Completions reply of these raw `data:` payloads, then `[DONE]`.
fn chunks(payloads: &[&str]) -> String {
    let events: String = payloads.iter().map(|p| format!("data: {p}\n\n")).collect();
    events + "data: [DONE]\n\n"
}

/// One reply of `OpenAiCompat` to `stream`, from a server of its own.
fn chat_reply(stream: String) -> (Result<pagent::AssistantMessage, Error>, Vec<StreamEvent>) {
    let server = Server::start_exact(vec![Reply::sse(stream)]);
    stream_once(&openai(&server))
}

const STOP: &str = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;

#[test]
fn chat_chunks_of_every_field_shape_give_exactly_their_events() {
    let start = |id: &str, name: &str| StreamEvent::ToolCallStart {
        id: id.into(),
        name: name.into(),
    };
    let args = |index, arguments: &str| StreamEvent::ToolCallDelta {
        index,
        arguments: arguments.into(),
    };
    let (text, thinking) = (StreamEvent::text, StreamEvent::thinking);
    let nothing = Vec::<StreamEvent>::new;
    let cases: Vec<(&str, Vec<&str>, Vec<StreamEvent>, StopReason)> = vec![
        (
            "text, as llama-server sends it",
            vec![
                r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" tok1"}}],"created":1795993459,"id":"chatcmpl-1","model":"smollm2","object":"chat.completion.chunk"}"#,
                STOP,
            ],
            vec![text(" tok1")],
            StopReason::Stop,
        ),
        (
            "escaped text",
            vec![
                r#"{"choices":[{"delta":{"content":"a\"b\\c\n\t\u00e9\ud83d\ude00\/"}}]}"#,
                STOP,
            ],
            vec![text("a\"b\\c\n\té\u{1F600}/")],
            StopReason::Stop,
        ),
        (
            "reasoning before text, whatever the field order",
            vec![
                r#"{"choices":[{"delta":{"content":"B","reasoning":"R","reasoning_content":"A"}}]}"#,
                STOP,
            ],
            vec![thinking("A"), thinking("R"), text("B")],
            StopReason::Stop,
        ),
        (
            "each reasoning field alone, one escaped",
            vec![
                r#"{"choices":[{"delta":{"reasoning_content":"x\"y"}}]}"#,
                r#"{"choices":[{"delta":{"reasoning":"z"}}]}"#,
                STOP,
            ],
            vec![thinking("x\"y"), thinking("z")],
            StopReason::Stop,
        ),
        (
            "empty and null strings, null and missing deltas and choices",
            vec![
                r#"{"choices":[{"delta":{"content":"","reasoning_content":null,"reasoning":""}}]}"#,
                r#"{"choices":[{"delta":null,"finish_reason":null}]}"#,
                r#"{"choices":[{"index":0}]}"#,
                r#"{"choices":[{}]}"#,
                r#"{"choices":null}"#,
                r#"{"choices":[]}"#,
                r#"{"id":"x"}"#,
                r#"{}"#,
                STOP,
            ],
            nothing(),
            StopReason::Stop,
        ),
        (
            "unknown fields of every kind, at every level",
            vec![
                r#"{"x":{"y":[1,{"z":null}]},"choices":[{"logprobs":{"content":[{"token":"\u00e9","bytes":[195,169]}]},"delta":{"role":"assistant","refusal":null,"audio":{"a":[true,false]},"content":"Hi","n":-1.5e3},"index":0}],"usage":null,"error":null,"created":1,"s":"\"}"}"#,
                STOP,
            ],
            vec![text("Hi")],
            StopReason::Stop,
        ),
        (
            "a call in fragments",
            vec![
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"get_weather","arguments":"\"Oslo\"}"}}]}}]}"#,
                r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            ],
            vec![
                start("call_a", "get_weather"),
                args(0, "{\"city\":"),
                args(0, "\"Oslo\"}"),
            ],
            StopReason::ToolUse,
        ),
        (
            "calls without index or id, two in one delta, text beside them, finish `stop`",
            vec![
                r#"{"choices":[{"delta":{"content":"ok","tool_calls":[{"function":{"name":"a","arguments":"{}"}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":3,"function":{"name":"b"}},{"index":3,"function":{"arguments":"[1]"}}]}}]}"#,
                STOP,
            ],
            vec![
                text("ok"),
                start("call_0", "a"),
                args(0, "{}"),
                start("call_3", "b"),
                args(1, "[1]"),
            ],
            StopReason::ToolUse,
        ),
        (
            "two choices in one chunk, each with its delta and finish",
            vec![
                r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"},{"index":1,"delta":{"content":"b","reasoning":"c"},"finish_reason":"length"}]}"#,
            ],
            vec![text("a"), thinking("c"), text("b")],
            StopReason::Length,
        ),
        (
            "a finish, then the usage chunk",
            vec![
                r#"{"choices":[{"delta":{"content":"x"},"finish_reason":"length"}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":1}}}"#,
            ],
            vec![
                text("x"),
                StreamEvent::Usage {
                    usage: {
                        let mut u = pagent::Usage::default();
                        (u.input, u.output, u.cache_read, u.reasoning, u.total) = (5, 2, 3, 1, 7);
                        u
                    },
                },
            ],
            StopReason::Length,
        ),
    ];
    for (name, payloads, events, stop) in cases {
        let (result, seen) = chat_reply(chunks(&payloads));
        assert_eq!(seen, events, "{name}");
        assert_eq!(result.map(|m| m.stop_reason), Ok(stop), "{name}");
    }
}

#[test]
fn a_malformed_chat_chunk_is_a_stream_error_and_gives_nothing_of_itself() {
    let good = r#"{"choices":[{"delta":{"content":"Hi"}}]}"#;
    let malformed = [
        r#"{"choices":[{"delta":{"content":"lost"}}]"#,
        r#"{"choices":[{"delta":{"content":"lost"}}]} x"#,
        r#"{"choices":[{"delta":{"content":"lost"}}],"usage":{"prompt_tokens":"many"}}"#,
        r#"{"choices":[{"delta":{"content":"lost"}},{"delta":{"content":5}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost","content":"again"}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost"},"delta":null}]}"#,
        r#"{"choices":[{"delta":{"content":"lost"}}],"choices":[]}"#,
        r#"{"choices":[{"delta":{"content":"lost","reasoning":["no"]}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost","tool_calls":{"index":0}}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost"},"finish_reason":7}]}"#,
        r#"{"choices":[{"delta":"lost"}]}"#,
        r#"{"choices":{"delta":{"content":"lost"}}}"#,
        r#"{"choices":[{"delta":{"content":"bad \x escape"}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost"}}],}"#,
        r#"{"choices":[{"delta":{"content":"lost","tool_calls":[{"index":"0"}]}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost","tool_calls":[null]}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost","tool_calls":[{"id":"a","id":"b"}]}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost","tool_calls":[{"function":"f"}]}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost","tool_calls":[{"function":{"arguments":5}}]}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost","tool_calls":[{"function":{"name":"a","name":"b"}}]}}]}"#,
        r#"{"choices":[{"delta":{"content":"lost"}}],"id":{"unclosed":}"#,
        r#"[{"choices":[]}]"#,
        "lost",
    ];
    for payload in malformed {
        let (result, seen) = chat_reply(chunks(&[good, payload, STOP]));
        assert_eq!(seen, vec![StreamEvent::text("Hi")], "{payload}");
        match result {
            Err(Error::Stream(message)) => assert!(
                message.starts_with("a chunk is not valid json ("),
                "{payload}: {message}"
            ),
            other => panic!("{payload}: {other:?}"),
        }
    }
}

#[test]
fn a_chat_replys_id_and_model_are_its_first_chunks_wherever_they_lie() {
    let reply = |first: &str| {
        let (result, _) = chat_reply(chunks(&[
            first,
            r#"{"id":"later","model":"later","choices":[{"delta":{"content":"b"}}]}"#,
            STOP,
        ]));
        let message = result.unwrap();
        let text = message.text();
        (message.response_id, message.model, text)
    };
    let (id, model) = (Some("chatcmpl-1".to_owned()), "served".to_owned());
    let text = "ab".to_owned();
    assert_eq!(
        reply(r#"{"choices":[{"delta":{"content":"a"}}],"id":"chatcmpl-1","model":"served"}"#),
        (id.clone(), model.clone(), text.clone())
    );
    assert_eq!(
        reply(r#"{"model":"served","id":"chatcmpl-1","choices":[{"delta":{"content":"a"}}]}"#),
        (id.clone(), model.clone(), text.clone())
    );
    // A field that is not a string says nothing; an empty model is none.
    assert_eq!(
        reply(r#"{"id":7,"model":"served","choices":[{"delta":{"content":"a"}}]}"#),
        (None, model, text.clone())
    );
    assert_eq!(
        reply(r#"{"id":"chatcmpl-1","model":"","choices":[{"delta":{"content":"a"}}]}"#),
        (id, "m".to_owned(), text.clone())
    );
    assert_eq!(
        reply(r#"{"model":{"name":"x"},"choices":[{"delta":{"content":"a"}}]}"#),
        (None, "m".to_owned(), text)
    );
}
