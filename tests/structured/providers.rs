//! Structured answers through each provider against a loopback server: the request that
//! carries the schema in the provider's own shape, the recorded or written stream of the
//! answer, and the whole event sequence up to the typed value.

use std::time::Duration;

use pagent::llm::{Anthropic, AnthropicOutput, OpenAiResponses};
use pagent::{Agent, OutputSchema, RunStopReason};
use serde_json::{Value, json};

use super::support::answers::{Board, Cell, Forecast, Sky, few_shot, weather_json};
use super::support::{Recorder, Reply, Server, fast_retries, openai, with_prompt};

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

fn anthropic(server: &Server, mode: AnthropicOutput) -> Anthropic {
    Anthropic::new(server.url.clone())
        .retry(fast_retries())
        .output_mode(mode)
}

/// Anthropic's structured outputs: `output_config.format` with the schema in the form
/// Anthropic takes, and the answer as the reply's text.
#[test]
fn anthropic_output_config_carries_the_schema() {
    let server = Server::start(vec![
        Reply::sse_file("written/anthropic_structured.sse").chunked(9, Duration::ZERO),
    ]);
    let agent = Agent::builder()
        .provider(anthropic(&server, AnthropicOutput::Format))
        .model("claude-sonnet-4-5")
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let typed = agent.prompt_as::<Forecast>("Weather in Bergen?").unwrap();
    assert_eq!(
        typed.value,
        Forecast {
            sky: Sky::Rainy,
            warm: false
        }
    );
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "usage in=180 out=1 cache_read=0 cache_write=0 reasoning=0 total=181",
            "text x2 \"{\\\"sky\\\":\\\"rainy\\\",\\\"warm\\\":false}\"",
            "usage in=180 out=11 cache_read=0 cache_write=0 reasoning=0 total=191",
            "MessageEnd assistant Stop calls=0",
            "OutputChecked 1 #1 ok {\"sky\":\"rainy\",\"warm\":false}",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=180 out=11",
        ])
    );
    let sent = &bodies(&server)[0];
    let schema = OutputSchema::of::<Forecast>();
    assert_eq!(
        sent["output_config"],
        json!({"format": {"type": "json_schema", "schema": schema.anthropic_schema()}})
    );
    assert_eq!((sent.get("tools"), sent.get("tool_choice")), (None, None));
}

/// `AnthropicOutput::ForcedTool`: a tool named after the schema, forced; its input streams
/// as the reply's text, and the reply is an answer (`Stop`), not a call.
#[test]
fn anthropic_forced_tool_input_is_the_answer() {
    let server = Server::start(vec![
        Reply::sse_file("written/anthropic_forced_tool.sse").chunked(11, Duration::ZERO),
    ]);
    let agent = Agent::builder()
        .provider(anthropic(&server, AnthropicOutput::ForcedTool))
        .model("claude-haiku-4-5")
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let typed = agent.prompt_as::<Forecast>("Weather in Oslo?").unwrap();
    assert_eq!(
        typed.value,
        Forecast {
            sky: Sky::Cloudy,
            warm: true
        }
    );
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "usage in=420 out=1 cache_read=0 cache_write=0 reasoning=0 total=421",
            "text x2 \"{\\\"sky\\\": \\\"cloudy\\\", \\\"warm\\\": true}\"",
            "usage in=420 out=19 cache_read=0 cache_write=0 reasoning=0 total=439",
            "MessageEnd assistant Stop calls=0",
            "OutputChecked 1 #1 ok {\"sky\":\"cloudy\",\"warm\":true}",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=420 out=19",
        ])
    );
    let sent = &bodies(&server)[0];
    let schema = OutputSchema::of::<Forecast>();
    assert_eq!(
        sent["tools"],
        json!([{
            "name": "Forecast",
            "description": "Give your final answer: its input is the answer.",
            "input_schema": schema.schema(),
        }])
    );
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "tool", "name": "Forecast"})
    );
    assert_eq!(sent.get("output_config"), None);
}

/// On the answer turn of a run with tools, Anthropic lists the tools with `tool_choice:
/// {"type": "none"}`; the forced tool goes after the agent's tools, renamed when one of
/// them has its name; a tool turn under `OutputTurn::Every` carries `output_config` beside
/// the tools and no `tool_choice`.
#[test]
fn anthropic_answer_turn_bodies() {
    use pagent::llm::{OutputRequest, Request, ToolDefinition};
    let schema = OutputSchema::of::<Forecast>();
    let tools = vec![
        ToolDefinition::new("get_weather", "Weather.", json!({"type": "object"})),
        ToolDefinition::new(
            "Forecast",
            "A tool of the agent's.",
            json!({"type": "object"}),
        ),
    ];
    let request = |answer_now| {
        Request::new("m", vec![std::sync::Arc::new(pagent::Message::user("q"))])
            .with_tools(tools.clone())
            .with_output(OutputRequest::new(schema.clone(), answer_now))
    };
    let format = Anthropic::new("http://x").prompt_cache(pagent::llm::PromptCache::off());
    let answer = format.request_body(&request(true));
    assert_eq!(answer["tool_choice"], json!({"type": "none"}));
    assert_eq!(answer["tools"].as_array().unwrap().len(), 2);
    assert!(answer["output_config"].is_object());
    let tool_turn = format.request_body(&request(false));
    assert_eq!(tool_turn.get("tool_choice"), None);
    assert!(tool_turn["output_config"].is_object());
    let forced = format.clone().output_mode(AnthropicOutput::ForcedTool);
    let answer = forced.request_body(&request(true));
    let names: Vec<&str> = answer["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["get_weather", "Forecast", "Forecast_answer"]);
    assert_eq!(
        answer["tool_choice"],
        json!({"type": "tool", "name": "Forecast_answer"})
    );
    // A forced tool's turn asks for no thinking (the API refuses the two together).
    let thinking =
        forced.request_body(&request(true).with_thinking(pagent::llm::ThinkingLevel::High));
    assert_eq!(thinking.get("thinking"), None);
    // A tool turn under `OutputTurn::Every` cannot force the answer: it goes without it.
    let tool_turn = forced.request_body(&request(false));
    assert_eq!(
        (tool_turn.get("tool_choice"), tool_turn.get("output_config")),
        (None, None)
    );
    assert_eq!(tool_turn["tools"].as_array().unwrap().len(), 2);
}

/// llama-server's answers to Chat Completions' `response_format`, recorded by the live tests
/// (its grammar let the model write only a value of the schema): the request pagent writes
/// is the recorded one byte for byte, and the answer, pretty-printed and split in tokens,
/// is the typed value.
#[test]
fn chat_response_format_replays_llama_server_answers() {
    let server = Server::start(vec![
        Reply::sse_file("llama-server/structured_forecast.sse").chunked(17, Duration::ZERO),
        Reply::sse_file("llama-server/structured_board.sse"),
    ]);
    let plain = |max_tokens| {
        let agent = Agent::builder()
            .provider(openai(&server).temperature(0.0).max_tokens(max_tokens))
            .model("smollm2")
            .output_repairs(0)
            .build()
            .unwrap();
        let rec = Recorder::attach(&agent);
        (agent, rec)
    };
    let (agent, rec) = plain(64);
    let typed = agent
        .prompt_as::<Forecast>("What is the weather in Oslo today?")
        .unwrap();
    assert_eq!(
        typed.value,
        Forecast {
            sky: Sky::Sunny,
            warm: true
        }
    );
    assert_eq!(
        rec.lines(),
        with_prompt(&[
            "text x21 \"{\\n  \\\"sky\\\" : \\\"sunny\\\",\\n  \\\"warm\\\" : true\\n}\"",
            "usage in=40 out=34 cache_read=26 cache_write=0 reasoning=0 total=74",
            "MessageEnd assistant Stop calls=0",
            "OutputChecked 1 #1 ok {\"sky\":\"sunny\",\"warm\":true}",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=40 out=34",
        ])
    );
    let (agent, _) = plain(160);
    let board = agent
        .prompt_as::<Board>("Draw a tic-tac-toe board where X has won.")
        .unwrap();
    assert_eq!(board.value.rows.len(), 3);
    assert!(
        matches!(board.value.rows[0], [Cell::X, Cell::X, Cell::X]),
        "{board:?}"
    );
    let recorded = |name: &str| -> Value {
        serde_json::from_slice(&super::support::data(&format!(
            "llama-server/structured_{name}.request.json"
        )))
        .unwrap()
    };
    let sent = bodies(&server);
    assert_eq!(sent[0], recorded("forecast"));
    assert_eq!(sent[1], recorded("board"));
    assert_eq!(
        sent[0]["response_format"]["json_schema"]["schema"],
        *OutputSchema::of::<Forecast>().strict_schema().unwrap()
    );
}

/// The live tests' agent: its weather tool, three turns, temperature 0.
fn live_agent(server: &Server, turn: pagent::OutputTurn) -> (Agent, Recorder) {
    let agent = Agent::builder()
        .provider(openai(server).temperature(0.0).max_tokens(64))
        .model("smollm2")
        .tool(weather_json())
        .max_turns(3)
        .repair_requests(false)
        .output_turn(turn)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    (agent, rec)
}

/// The trap, recorded from llama-server: by default the tool turn goes without the schema
/// and the model calls the tool; its prose answer is checked, and the answer turn asks for
/// the schema (`response_format` and `tool_choice: "none"` beside the tools), which the
/// grammar makes a valid value. With `OutputTurn::Every` the first request carries the
/// schema beside the tools, and the grammar leaves the model no way to call the tool.
#[test]
fn chat_tool_turns_keep_their_tools_replayed_from_llama_server() {
    let server = Server::start(vec![
        Reply::sse_file("llama-server/structured_trap_tool_turn.sse").chunked(19, Duration::ZERO),
        Reply::sse_file("llama-server/structured_trap_prose.sse"),
        Reply::sse_file("llama-server/structured_trap_answer_turn.sse"),
    ]);
    let (agent, rec) = live_agent(&server, pagent::OutputTurn::Answer);
    let typed = agent.prompt_as::<Forecast>(few_shot()).unwrap();
    assert_eq!(
        typed.value,
        Forecast {
            sky: Sky::Sunny,
            warm: false
        }
    );
    assert_eq!(
        rec.lines(),
        super::lines(&[
            "AgentStart",
            "TurnStart 1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "MessageEnd assistant ToolUse calls=1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "MessageEnd assistant ToolUse calls=1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "call uO9dgXDkY8CnobV7wBtZtBb2oxQpBD5E get_weather",
            "args[0] x8 \"{\\\"city\\\": \\\"Paris\\\"}\"",
            "usage in=300 out=31 cache_read=299 cache_write=0 reasoning=0 total=331",
            "MessageEnd assistant ToolUse calls=1",
            "ToolStart uO9dgXDkY8CnobV7wBtZtBb2oxQpBD5E get_weather {\"city\": \"Paris\"}",
            "ToolExecute uO9dgXDkY8CnobV7wBtZtBb2oxQpBD5E {\"city\":\"Paris\"}",
            "ToolEnd uO9dgXDkY8CnobV7wBtZtBb2oxQpBD5E ok {\"city\":\"Paris\",\"temp_c\":21}",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "MessageStart assistant",
            "text x21 \"<tool_response>\\n{\\\"city\\\":\\\"Paris\\\",\\\"temp_c\\\":21}\\n</tool_response>\"",
            "usage in=365 out=25 cache_read=330 cache_write=0 reasoning=0 total=390",
            "MessageEnd assistant Stop calls=0",
            "OutputChecked 2 #1 err the answer is not JSON: expected value at line 1 column 1",
            "TurnEnd 2 continuing",
            "TurnStart 3",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "text x12 \"{\\\"sky\\\":\\\"sunny\\\", \\\"warm\\\":false}\"",
            "usage in=503 out=13 cache_read=389 cache_write=0 reasoning=0 total=516",
            "MessageEnd assistant Stop calls=0",
            "OutputChecked 3 #2 ok {\"sky\":\"sunny\",\"warm\":false}",
            "TurnEnd 3 no_tool_calls",
            "AgentEnd no_tool_calls in=1168 out=69",
        ])
    );
    let recorded = |name: &str| -> Value {
        serde_json::from_slice(&super::support::data(&format!(
            "llama-server/structured_{name}.request.json"
        )))
        .unwrap()
    };
    let sent = bodies(&server);
    assert_eq!(sent[0], recorded("trap_tool_turn"));
    assert_eq!(sent[1], recorded("trap_prose"));
    assert_eq!(sent[2], recorded("trap_answer_turn"));
    assert_eq!(
        sent.iter()
            .map(|b| (
                b.get("response_format").is_some(),
                b.get("tool_choice").cloned()
            ))
            .collect::<Vec<_>>(),
        [(false, None), (false, None), (true, Some(json!("none")))]
    );

    let server = Server::start(vec![Reply::sse_file("llama-server/structured_every.sse")]);
    let (agent, rec) = live_agent(&server, pagent::OutputTurn::Every);
    let typed = agent.prompt_as::<Forecast>(few_shot()).unwrap();
    assert_eq!(typed.value.sky, Sky::Sunny);
    assert_eq!(
        rec.lines(),
        super::lines(&[
            "AgentStart",
            "TurnStart 1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "MessageEnd assistant ToolUse calls=1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "MessageEnd assistant ToolUse calls=1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "text x20 \"{\\n  \\\"sky\\\": \\\"sunny\\\",\\n  \\\"warm\\\": true\\n}\"",
            "usage in=300 out=21 cache_read=299 cache_write=0 reasoning=0 total=321",
            "MessageEnd assistant Stop calls=0",
            "OutputChecked 1 #1 ok {\"sky\":\"sunny\",\"warm\":true}",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=300 out=21",
        ])
    );
    let sent = bodies(&server);
    assert_eq!(sent, [recorded("every")]);
    assert_eq!(sent[0].get("tool_choice"), None);
    assert!(sent[0]["tools"].is_array() && sent[0]["response_format"].is_object());
}
