//! Sampling: a server's `sampling/createMessage` during a tool call, answered through a
//! provider (the scripted Faux) or the program's hook, in both eras (a request of the
//! server's own; an `input_required` result), refused, and given up by an abort. Against
//! the small scripted server tests/mcp/elicit_server.py (its tool `sample`).

use pagent::llm::ToolDefinition;
use pagent::mcp::{SamplingReply, SamplingRequest};
use pagent::{
    AssistantMessage, ContentBlock, Image, StopReason, ToolCall, ToolResultMessage, UserMessage,
};

use super::*;

/// The scripted server, in the session era or (`stateless`) the 2026-07-28 one.
fn sampler(stateless: bool) -> ClientBuilder {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/elicit_server.py");
    let mut builder = Client::stdio("python3").arg(script.display().to_string());
    if stateless {
        builder = builder.arg("--stateless");
    }
    builder
        .call_timeout(Duration::from_secs(30))
        .shutdown_grace(Duration::from_millis(200))
}

/// What the scripted server's tool returns for `answer`: as it is in the session era, with
/// the state of its `input_required` round in the stateless one.
fn in_era(answer: Value, stateless: bool) -> Value {
    if stateless {
        json!({"got": answer, "state": "opaque-1"})
    } else {
        answer
    }
}

/// Asserts that every message `traffic` saw declared `caps`: in the handshake (session era),
/// or in every request's `_meta` (stateless).
fn assert_declared(traffic: &Traffic, stateless: bool, caps: Value) {
    for sent in traffic.sent() {
        let declared = match sent["method"].as_str() {
            Some("initialize") => &sent["params"]["capabilities"],
            _ if stateless => {
                &sent["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
            }
            _ => continue,
        };
        assert_eq!(declared, &caps, "{sent}");
    }
}

/// A 1x1 PNG, base64.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// The server's request: three messages (text, an assistant's, an image and text), a system
/// prompt, the limits and a model hint.
fn request() -> Value {
    json!({
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "What is this?"}},
            {"role": "assistant", "content": {"type": "text", "text": "Show me."}},
            {"role": "user", "content": [
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "text", "text": "This."},
            ]},
        ],
        "systemPrompt": "Answer in three words.",
        "maxTokens": 50,
        "temperature": 0.2,
        "stopSequences": ["STOP"],
        "includeContext": "none",
        "modelPreferences": {"hints": [{"name": "claude-haiku"}, {"name": "small"}], "speedPriority": 0.9},
    })
}

/// The messages the provider is sent for [`request`].
fn messages() -> Vec<Arc<Message>> {
    let png: pagent::Blob = serde_json::from_value(json!(PNG)).unwrap();
    vec![
        Message::user("What is this?"),
        Message::Assistant(AssistantMessage::new(
            vec![ContentBlock::text("Show me.")],
            StopReason::Stop,
        )),
        Message::User(UserMessage::from_parts([
            Image::new("image/png", png).into(),
            pagent::Part::text("This."),
        ])),
    ]
    .into_iter()
    .map(Arc::new)
    .collect()
}

/// An agent whose model calls `sample` with [`request`], then answers "done".
fn sample_agent(client: &Client) -> Agent {
    let faux = Faux::default()
        .reply(FauxReply::tool_call(
            "sample",
            json!({"request": request()}),
        ))
        .reply(FauxReply::text("done"));
    agent_with(&faux, client.tools().unwrap())
}

/// The run's lines around its one call of `sample`, whose result is `end`.
fn sampled(end: &str) -> Vec<String> {
    [
        opening("go"),
        vec![
            "MessageStart(assistant)".into(),
            format!(
                "MessageUpdate*([call_1:sample]{})",
                json!({"request": request()})
            ),
            "MessageEnd(assistant tool_use \"\" [call_1])".into(),
            "ToolStart(call_1)".into(),
            "ToolExecute(call_1)".into(),
            end.to_owned(),
        ],
        results(&["call_1"]),
        lines(&["TurnEnd(1 continuing)", "TurnStart(2)"]),
        text_reply("done"),
        lines(&["TurnEnd(2 no_tool_calls)", "AgentEnd(no_tool_calls)"]),
    ]
    .concat()
}

/// The tool's result text as the recorder shows it.
fn ended(got: Value) -> String {
    format!("ToolEnd(call_1 {:?})", got.to_string())
}

#[test]
fn a_servers_sampling_request_is_answered_by_the_provider_in_both_eras() {
    for stateless in [false, true] {
        let model = Faux::default()
            .reply(FauxReply::text("A red dot.STOP and more"))
            .record_requests(1);
        let traffic = Traffic::default();
        let client = traffic
            .attach(sampler(stateless))
            .sample_with(model.clone(), "small-model")
            .connect()
            .unwrap();
        assert_eq!(
            client.server_info().era,
            if stateless {
                Era::Stateless
            } else {
                Era::Session
            }
        );
        let agent = sample_agent(&client);
        let rec = Recorder::attach(&agent);
        let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
        assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
        // The provider got the server's messages and system prompt, for the model given.
        let asked = model.requests();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].model, "small-model");
        assert_eq!(asked[0].system_prompt, "Answer in three words.");
        assert_eq!(asked[0].messages, messages());
        // The server got the text up to the stop sequence.
        let answer = json!({
            "role": "assistant",
            "content": {"type": "text", "text": "A red dot."},
            "model": "small-model",
            "stopReason": "stopSequence",
        });
        let got = in_era(answer, stateless);
        assert_eq!(rec.lines(), sampled(&ended(got)), "stateless: {stateless}");
        // Declared, in the handshake or every request's `_meta`.
        assert_declared(&traffic, stateless, json!({"sampling": {"tools": {}}}));
        client.close();
    }
}

#[test]
fn the_programs_hook_sees_the_whole_request_and_may_refuse_it() {
    let seen = Arc::new(Mutex::new(Vec::<SamplingRequest>::new()));
    let log = seen.clone();
    let client = sampler(false)
        .on_sampling(move |request, _| {
            log.lock().unwrap().push(request.clone());
            if request.messages.len() == 3 {
                Err("the user said no".into())
            } else {
                Ok(SamplingReply::new("m", "yes"))
            }
        })
        .connect()
        .unwrap();
    let agent = sample_agent(&client);
    let rec = Recorder::attach(&agent);
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        sampled(&ended(json!({"error": {
            "code": -1,
            "message": "sampling refused: the user said no",
        }})))
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!(r.server, "asker");
    assert_eq!(
        r.messages.iter().cloned().map(Arc::new).collect::<Vec<_>>(),
        messages()
    );
    assert_eq!(r.system_prompt.as_deref(), Some("Answer in three words."));
    assert_eq!(r.max_tokens, 50);
    assert_eq!(r.temperature, Some(0.2));
    assert_eq!(r.stop_sequences, ["STOP"]);
    assert_eq!(r.model_hints, ["claude-haiku", "small"]);
    assert_eq!(r.model_preferences["speedPriority"], json!(0.9));
    assert_eq!(r.include_context.as_deref(), Some("none"));
    client.close();
}

#[test]
fn a_client_without_sampling_neither_declares_it_nor_answers_it() {
    let traffic = Traffic::default();
    let client = traffic.attach(sampler(false)).connect().unwrap();
    let agent = sample_agent(&client);
    let rec = Recorder::attach(&agent);
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        sampled(&ended(json!({"error": {
            "code": -32601,
            "message": "method not supported by the client",
        }})))
    );
    let hello = traffic
        .sent()
        .into_iter()
        .find(|m| m["method"] == "initialize");
    assert_eq!(hello.unwrap()["params"]["capabilities"], json!({}));
    client.close();
}

/// Roots are the client's other answer: declared only when given, listed as given, in both
/// eras (a server request, or an `input_required` result's input request).
#[test]
fn roots_given_are_declared_and_listed_to_the_server_in_both_eras() {
    let ask = json!({"method": "roots/list", "request": {}});
    let never = CancelToken::new();
    for stateless in [false, true] {
        let traffic = Traffic::default();
        let client = traffic
            .attach(sampler(stateless))
            .root("file:///work/project", Some("project"))
            .root("file:///tmp/scratch", None)
            .connect()
            .unwrap();
        let got = client
            .call_tool("sample", ask.clone(), &never, &mut |_| {})
            .unwrap();
        let roots = json!({"roots": [
            {"uri": "file:///work/project", "name": "project"},
            {"uri": "file:///tmp/scratch"},
        ]});
        let got: Value = serde_json::from_str(&got.text()).unwrap();
        assert_eq!(got, in_era(roots, stateless), "stateless: {stateless}");
        assert_declared(
            &traffic,
            stateless,
            json!({"roots": {"listChanged": false}}),
        );
        client.close();
    }
    // Without roots: not declared (above, an empty handshake) and not answered.
    let client = sampler(false).connect().unwrap();
    let got = client
        .call_tool("sample", ask, &never, &mut |_| {})
        .unwrap();
    let got: Value = serde_json::from_str(&got.text()).unwrap();
    assert_eq!(
        got,
        json!({"error": {"code": -32601, "message": "method not supported by the client"}})
    );
    client.close();
}

#[test]
fn an_abort_while_the_model_replies_gives_the_sampling_up_and_ends_the_run() {
    let model = Faux::default()
        .reply(FauxReply::text("Thinking").then_stall(Duration::from_secs(60)))
        .record_requests(1);
    let client = sampler(false)
        .sample_with(model.clone(), "m")
        .connect()
        .unwrap();
    let agent = sample_agent(&client);
    let rec = Recorder::attach(&agent);
    let handle = agent.handle();
    let aborter = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(15);
        while model.requests().is_empty() {
            assert!(Instant::now() < until, "the model was never asked");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(handle.abort());
    });
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    aborter.join().unwrap();
    assert_eq!(result.unwrap(), RunStopReason::Cancelled);
    let events = rec.lines();
    assert_eq!(
        events,
        [
            opening("go"),
            vec![
                "MessageStart(assistant)".into(),
                format!(
                    "MessageUpdate*([call_1:sample]{})",
                    json!({"request": request()})
                ),
                "MessageEnd(assistant tool_use \"\" [call_1])".into(),
                "ToolStart(call_1)".into(),
                "ToolExecute(call_1)".into(),
                "ToolEnd(call_1 error \"aborted\")".into(),
            ],
            results(&["call_1"]),
            lines(&["TurnEnd(1 cancelled)", "AgentEnd(cancelled)"]),
        ]
        .concat()
    );
    client.close();
}

#[test]
fn sampling_with_tools_gives_the_provider_the_tools_calls_and_results_and_the_server_its_call() {
    let asked = json!({
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "Weather in Paris, then Lyon?"}},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "toolUseId": "t1", "content": [{"type": "text", "text": "18C"}]},
            ]},
        ],
        "tools": [{"name": "weather", "description": "The weather in a city.",
                   "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "toolChoice": {"mode": "auto"},
        "maxTokens": 100,
    });
    let model = Faux::default()
        .reply(FauxReply::tool_call("weather", json!({"city": "Lyon"})))
        .record_requests(1);
    let client = sampler(false)
        .sample_with(model.clone(), "m")
        .connect()
        .unwrap();
    let faux = Faux::default()
        .reply(FauxReply::tool_call("sample", json!({"request": asked})))
        .reply(FauxReply::text("done"));
    let agent = agent_with(&faux, client.tools().unwrap());
    let rec = Recorder::attach(&agent);
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    let sent = model.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].tools[..],
        [ToolDefinition::new(
            "weather",
            "The weather in a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}})
        )]
    );
    let expected: Vec<Arc<Message>> = vec![
        Message::user("Weather in Paris, then Lyon?"),
        Message::Assistant(AssistantMessage::new(
            vec![ContentBlock::ToolCall(ToolCall::new(
                "t1",
                "weather",
                r#"{"city":"Paris"}"#,
            ))],
            StopReason::ToolUse,
        )),
        Message::ToolResult(ToolResultMessage::new("t1", "weather", "18C")),
    ]
    .into_iter()
    .map(Arc::new)
    .collect();
    assert_eq!(sent[0].messages, expected);
    let lines_seen = rec.lines();
    let end = lines_seen
        .iter()
        .find(|l| l.starts_with("ToolEnd(call_1"))
        .unwrap();
    let text: String = serde_json::from_str(
        end.strip_prefix("ToolEnd(call_1 ")
            .unwrap()
            .strip_suffix(')')
            .unwrap(),
    )
    .unwrap();
    let got: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        got,
        json!({
            "role": "assistant",
            "content": [{"type": "tool_use", "id": got["content"][0]["id"], "name": "weather", "input": {"city": "Lyon"}}],
            "model": "m",
            "stopReason": "toolUse",
        })
    );
    assert!(
        got["content"][0]["id"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{got}"
    );
    client.close();
}

#[test]
fn the_python_sdks_create_message_is_answered_by_the_provider_with_and_without_tools() {
    let Some(dir) = installed() else { return };
    let server = PyServer::launch(&dir.join("venv/bin/python"), "url_server.py", &["{port}"]);
    let model = Faux::default()
        .reply(FauxReply::text("Hello."))
        .reply(FauxReply::tool_call("weather", json!({"city": "Oslo"})))
        .record_requests(2);
    let client = Client::http(&server.url)
        .call_timeout(Duration::from_secs(30))
        .sample_with(model.clone(), "m")
        .connect()
        .unwrap();
    let plain = client
        .call_tool("sample", json!({}), &CancelToken::new(), &mut |_| {})
        .unwrap();
    let got: Value = serde_json::from_str(&plain.text()).unwrap();
    assert_eq!(
        got,
        json!({"role": "assistant", "content": {"type": "text", "text": "Hello."},
               "model": "m", "stopReason": "endTurn"})
    );
    let with_tools = client
        .call_tool(
            "sample",
            json!({"tools": true}),
            &CancelToken::new(),
            &mut |_| {},
        )
        .unwrap();
    let got: Value = serde_json::from_str(&with_tools.text()).unwrap();
    assert_eq!(got["stopReason"], "toolUse", "{got}");
    assert_eq!(got["content"][0]["type"], "tool_use", "{got}");
    assert_eq!(got["content"][0]["name"], "weather", "{got}");
    assert_eq!(got["content"][0]["input"], json!({"city": "Oslo"}), "{got}");
    let asked = model.requests();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].system_prompt, "Be brief.");
    assert_eq!(asked[0].messages, vec![Arc::new(Message::user("Hi?"))]);
    assert!(asked[0].tools.is_empty());
    assert_eq!(asked[1].tools.len(), 1);
    assert_eq!(asked[1].tools[0].name, "weather");
    client.close();
}
