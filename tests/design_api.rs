//! The core API exactly as the design document writes it: these names are a contract, and
//! this test keeps them compiling and behaving as written.

use std::sync::Arc;
use std::time::Duration;

use pagent::llm::{Anthropic, Faux, FauxReply, OpenAiCompat};
use pagent::{Agent, AgentEvent, Error, RunStopReason, State, ToolOutput, tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

#[test]
fn the_core_api_reads_as_the_design_writes_it() -> Result<(), Error> {
    let weather_tool = tool::typed("weather", "The weather in a city.", |a: City, _| {
        Ok(ToolOutput::text(format!("Sunny in {}", a.city)))
    });
    let script = vec![
        FauxReply::tool_call("weather", json!({"city": "Oslo"})),
        FauxReply::text("It is sunny in Oslo."),
    ];
    let agent = Agent::builder()
        .provider(Faux::new(script)) // or OpenAiCompat::from_env()?, Anthropic::from_env()?
        .model("gpt-4o-mini")
        .system_prompt("You are terse.")
        .tool(weather_tool)
        .max_turns(16)
        .build()?;

    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let sub = agent.subscribe(move |event: &AgentEvent| {
        sink.lock().unwrap().push(event.name());
    });
    let rx = agent.subscribe_channel(1024); // crossbeam_channel::Receiver<AgentEvent>
    let handle = agent.handle(); // Clone + Send + Sync: steer, follow_up, abort, snapshot
    let result = agent.prompt("What is the weather in Oslo?")?; // blocks until the run ends
    let state: Arc<State> = agent.snapshot(); // from any thread, any time
    assert!(sub.unsubscribe()); // or agent.unsubscribe(id)

    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(result.text(), "It is sunny in Oslo.");
    assert_eq!(result.messages.len(), 4);
    assert_eq!(state.messages.len(), 4);
    assert_eq!(&*state.system_prompt, "You are terse.");
    assert_eq!(&*state.model, "gpt-4o-mini");
    assert!(!state.is_streaming_reply && state.streaming_message.is_none());
    assert!(state.pending_tool_calls.is_empty() && state.error_message.is_none());
    assert_eq!(state.tools[0].name, "weather");
    let from_channel: Vec<AgentEvent> = rx.try_iter().collect();
    assert_eq!(from_channel.len(), seen.lock().unwrap().len());
    assert_eq!(handle.snapshot(), state);
    // No run is active: the handle's abort does nothing, and the handle crosses threads.
    let h2 = handle.clone();
    assert!(!std::thread::spawn(move || h2.abort()).join().unwrap());
    Ok(())
}

#[test]
fn providers_build_from_explicit_urls_without_a_key() {
    // Local servers need no key; nothing is sent until a prompt.
    let openai = OpenAiCompat::new("http://127.0.0.1:9/v1").connect_timeout(Duration::from_secs(1));
    let anthropic = Anthropic::new("http://127.0.0.1:9");
    assert!(Agent::builder().provider(openai).build().is_ok());
    assert!(Agent::builder().provider(anthropic).build().is_ok());
}

#[test]
fn stream_event_and_cancel_token_are_at_the_root() {
    // One type under two paths: the root for users, `llm` beside the `Provider` trait.
    let delta: pagent::StreamEvent = pagent::llm::StreamEvent::text("hi");
    assert!(matches!(delta, pagent::StreamEvent::TextDelta { .. }));
    let token = pagent::CancelToken::new();
    assert!(!token.is_cancelled());
}

/// `State`'s lists and the channel receiver are reached through pagent alone: no `imbl` or
/// `crossbeam-channel` dependency (and version) of the user's own.
#[test]
fn the_state_and_channels_need_no_foreign_crate() -> Result<(), Error> {
    #[derive(Deserialize, pagent::schemars::JsonSchema)]
    #[schemars(crate = "pagent::schemars")]
    struct NoArgs {}

    let clock = tool::typed("clock", "The time.", |_: NoArgs, _| {
        Ok(ToolOutput::text("noon"))
    });
    let agent = Agent::builder()
        .provider(Faux::new([
            FauxReply::tool_call("clock", json!({})),
            FauxReply::text("It is noon."),
        ]))
        .tool(clock)
        .build()?;
    let events: pagent::crossbeam_channel::Receiver<AgentEvent> = agent.subscribe_channel(64);
    agent.prompt("Time?")?;
    assert_eq!(events.try_iter().last().map(|e| e.name()), Some("AgentEnd"));
    let state = agent.snapshot();
    let messages: &pagent::List<Arc<pagent::Message>> = &state.messages;
    let roles: Vec<&str> = messages.iter().map(|m| m.role()).collect();
    assert_eq!(roles, ["user", "assistant", "tool_result", "assistant"]);
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[1].role(), "assistant");
    assert_eq!(
        messages.last().map(|m| m.text()),
        Some("It is noon.".into())
    );
    assert_eq!(messages.iter().rev().count(), messages.len());
    assert!(state.pending_tool_calls.is_empty() && state.steering_queue.is_empty());
    Ok(())
}

/// A message's `StopReason` had no `Display` while the run's `RunStopReason` had one, so a
/// UI printing both wrote `{:?}` for one of them.
#[test]
fn a_message_stop_reason_displays_as_its_serialized_name() {
    use pagent::StopReason;
    for (reason, name) in [
        (StopReason::Stop, "stop"),
        (StopReason::Length, "length"),
        (StopReason::ToolUse, "tool_use"),
        (StopReason::Error, "error"),
        (StopReason::Aborted, "aborted"),
    ] {
        assert_eq!(reason.to_string(), name);
        assert_eq!(reason.as_str(), name);
        assert_eq!(serde_json::to_value(reason).unwrap(), json!(name));
    }
    assert_eq!(
        format!("{} / {}", StopReason::ToolUse, RunStopReason::NoToolCalls),
        "tool_use / no_tool_calls"
    );
}
