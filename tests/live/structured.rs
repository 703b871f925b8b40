//! Typed structured output against the real server. llama-server turns Chat Completions'
//! `response_format` (`json_schema`) into a grammar, so the tiny model can only write a
//! value of the schema. Its `/v1/responses` ignores `text.format` and its `/v1/messages`
//! ignores `output_config` (a forced tool reaches it as `tool_choice: "required"`, and
//! SmolLM2 still answered in prose when tried), so those providers' requests are checked
//! against the SDKs' types instead (tests/sdk.rs) and their answers replayed
//! (tests/structured/providers.rs).

use pagent::llm::Provider;
use pagent::{Agent, AgentEvent, OutputTurn, RunStopReason, StopReason};

use super::support::Recorder;
use super::support::answers::{Board, Forecast, Sky, few_shot, weather_json};
use super::{agent, live};

/// The server for a run of several turns, each of which may wait long for a busy machine.
fn patient() -> pagent::llm::OpenAiCompat {
    live()
        .max_tokens(64)
        .idle_timeout(std::time::Duration::from_secs(240))
}

/// An agent without tools: its first request carries the schema.
fn plain(provider: impl Provider + 'static) -> (Agent, Recorder) {
    let agent = Agent::builder()
        .provider(provider)
        .model("smollm2")
        .output_repairs(0)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    (agent, rec)
}

/// The events of a run whose first reply was a valid answer.
fn answered_at_once(rec: &Recorder, result: &pagent::RunResult) -> Vec<String> {
    let lines = rec.lines();
    let reply = result.messages[1].as_assistant().unwrap();
    let u = result.usage;
    let text = lines
        .iter()
        .find(|l| l.starts_with("text x"))
        .cloned()
        .unwrap_or_else(|| panic!("{lines:#?}"));
    let value = result.output.clone().unwrap();
    assert_eq!(
        lines,
        [
            "AgentStart",
            "TurnStart 1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            &text,
            &format!(
                "usage in={} out={} cache_read={} cache_write=0 reasoning=0 total={}",
                u.input, u.output, u.cache_read, u.total
            ),
            &format!("MessageEnd assistant {:?} calls=0", reply.stop_reason),
            &format!("OutputChecked 1 #1 ok {value}"),
            "TurnEnd 1 no_tool_calls",
            &format!("AgentEnd no_tool_calls in={} out={}", u.input, u.output),
        ]
    );
    lines
}

#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_typed_answer_from_response_format() {
    let (agent, rec) = plain(live().max_tokens(64));
    let typed = agent
        .prompt_as::<Forecast>("What is the weather in Oslo today?")
        .unwrap();
    answered_at_once(&rec, &typed.result);
    let state = agent.snapshot();
    assert!(state.output.as_ref().unwrap().is_valid());
    // The value came typed: an enum and a bool, read from the grammar-bound text.
    let _: (Sky, bool) = (typed.value.sky, typed.value.warm);
}

#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_typed_answer_with_nested_arrays() {
    let (agent, rec) = plain(live().max_tokens(160));
    let typed = agent
        .prompt_as::<Board>("Draw a tic-tac-toe board where X has won.")
        .unwrap();
    answered_at_once(&rec, &typed.result);
    assert!((1..=3).contains(&typed.value.rows.len()), "{typed:?}");
    assert_eq!(
        typed.result.messages[1].as_assistant().unwrap().stop_reason,
        StopReason::Stop
    );
}

/// The trap of a schema sent beside the tools, on a server that turns the schema into a
/// grammar: with `OutputTurn::Every` the model can only answer, and the tool never runs;
/// with the default (`OutputTurn::Answer`) the tool turn goes without the schema, the tool
/// runs, and the answer turn after it gets the typed value.
#[test]
#[ignore = "needs a model server: PAGENT_LIVE_BASE_URL, see the module docs"]
fn live_tool_turns_keep_their_tools_and_the_answer_is_typed() {
    let (agent, rec) = agent(patient());
    let typed = agent.prompt_as::<Forecast>(few_shot()).unwrap();
    let events = rec.events();
    let ran: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolEnd { result, .. } => Some(result.text()),
            _ => None,
        })
        .collect();
    assert!(
        ran.first().is_some_and(|t| t.contains("Paris")),
        "{:#?}",
        rec.lines()
    );
    let checks: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::OutputChecked { check, .. } => Some(check.clone()),
            _ => None,
        })
        .collect();
    assert!(checks.last().unwrap().is_valid(), "{:#?}", rec.lines());
    assert_eq!(typed.result.stop_reason, RunStopReason::NoToolCalls);

    // The same run with the schema on every request: the grammar wins over the tools.
    let agent_every = Agent::builder()
        .provider(patient())
        .model("smollm2")
        .tool(weather_json())
        .output_turn(OutputTurn::Every)
        .repair_requests(false)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent_every);
    let typed = agent_every.prompt_as::<Forecast>(few_shot()).unwrap();
    let lines = rec.lines();
    assert!(
        !lines.iter().any(|l| l.starts_with("ToolStart")),
        "{lines:#?}"
    );
    assert!(
        !typed
            .result
            .messages
            .iter()
            .any(|m| m.as_tool_result().is_some()),
        "{lines:#?}"
    );
}
