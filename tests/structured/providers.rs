//! Structured answers through each provider against a loopback server: the request that
//! carries the schema in the provider's own shape, the recorded or written stream of the
//! answer, and the whole event sequence up to the typed value.

use std::time::Duration;

use pagent::llm::OpenAiResponses;
use pagent::schemars::{self, JsonSchema};
use pagent::{Agent, OutputSchema, RunStopReason};
use serde::Deserialize;
use serde_json::{Value, json};

use super::support::{Recorder, Reply, Server, fast_retries, with_prompt};

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Sky {
    Sunny,
    Cloudy,
    Rainy,
}

/// Today's weather in a city.
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Forecast {
    sky: Sky,
    warm: bool,
}

fn bodies(server: &Server) -> Vec<Value> {
    server.requests().iter().map(|r| r.json()).collect()
}

/// The tool turn of the recorded Responses tool loop goes without the schema; the final
/// answer turn after `max_turns` asks for it as `text.format`, with the tools listed and
/// `tool_choice: "none"`, and its answer (a stream in OpenAI's shape) is the typed value.
#[test]
fn responses_text_format_on_the_answer_turn_only() {
    let server = Server::start(vec![
        Reply::sse_file("llama-server/responses_tool_call.sse").chunked(13, Duration::ZERO),
        Reply::sse_file("written/responses_structured.sse").chunked(5, Duration::ZERO),
    ]);
    let agent = Agent::builder()
        .provider(OpenAiResponses::new(format!("{}/v1", server.url)).retry(fast_retries()))
        .model("gpt-5-mini")
        .tool(super::support::weather())
        .max_turns(1)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let typed = agent.prompt_as::<Forecast>("Weather in Paris?").unwrap();
    assert_eq!(
        typed.value,
        Forecast {
            sky: Sky::Sunny,
            warm: true
        }
    );
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
            "text x9 \"{\\\"sky\\\":\\\"sunny\\\",\\\"warm\\\":true}\"",
            "usage in=412 out=9 cache_read=384 cache_write=0 reasoning=0 total=421",
            "MessageEnd assistant Stop calls=0",
            "OutputChecked 2 #1 ok {\"sky\":\"sunny\",\"warm\":true}",
            "TurnEnd 2 no_tool_calls",
            "AgentEnd no_tool_calls in=712 out=40",
        ])
    );
    let sent = bodies(&server);
    assert_eq!(
        (sent[0].get("text"), sent[0].get("tool_choice")),
        (None, None)
    );
    let schema = OutputSchema::of::<Forecast>();
    assert_eq!(
        sent[1]["text"],
        json!({"format": {
            "type": "json_schema",
            "name": "Forecast",
            "description": "Today's weather in a city.",
            "schema": schema.strict_schema().unwrap(),
            "strict": true,
        }})
    );
    assert_eq!(sent[1]["tool_choice"], json!("none"));
    assert_eq!(sent[1]["tools"], sent[0]["tools"]);
    assert_eq!(typed.result.stop_reason, RunStopReason::NoToolCalls);
}
