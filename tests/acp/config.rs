//! Config options (model, thinking level, mode), `session/set_mode`,
//! `session/set_config_option`, their updates, and `logout`.

use pagent::acp::{self, Mode, SessionInfo};
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, AgentBuilder, ToolOutput, tool};
use serde_json::{Value, json};

use super::{Client, error_code, prompt_of};

/// A model that says its model id, system prompt, thinking level and tools, and an agent
/// with two tools.
fn telling(_: &SessionInfo) -> Result<AgentBuilder, pagent::Error> {
    let tool_named = |name: &'static str| {
        tool::typed(name, "A tool.", |_: serde_json::Map<String, Value>, _| {
            Ok(ToolOutput::text("ok"))
        })
    };
    Ok(Agent::builder()
        .model("small")
        .system_prompt("Base.")
        .tool(tool_named("read"))
        .tool(tool_named("write"))
        .provider(Faux::default().chunk_chars(1000).otherwise(|r| {
            let tools: Vec<&str> = r.tools.iter().map(|t| t.name.as_str()).collect();
            FauxReply::text(format!(
                "{} / {} / {:?} / {}",
                r.model,
                r.system_prompt,
                r.thinking,
                tools.join(",")
            ))
        })))
}

fn options() -> acp::Options {
    acp::Options::new()
        .model("small", "Small")
        .model("large", "Large")
        .mode(
            Mode::new("ask", "Ask")
                .description("Reads only")
                .system_prompt("Only answer.")
                .tools(["read"]),
        )
        .mode(Mode::new("code", "Code"))
}

fn told(client: &mut Client, id: u64, session: &str) -> String {
    client.request(id, "session/prompt", prompt_of(session, "tell"));
    let seen = client.until_response(id);
    seen[0]["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn select(id: &str, name: &str, category: &str, current: &str, values: &[(&str, &str)]) -> Value {
    let values: Vec<Value> = values
        .iter()
        .map(|(v, n)| json!({"value": v, "name": n}))
        .collect();
    json!({"id": id, "name": name, "category": category, "type": "select", "currentValue": current, "options": values})
}

const LEVELS: [(&str, &str); 5] = [
    ("off", "Off"),
    ("minimal", "Minimal"),
    ("low", "Low"),
    ("medium", "Medium"),
    ("high", "High"),
];

#[test]
fn the_pickers_change_the_model_the_thinking_and_the_mode() {
    let mut client = Client::start(telling, options());
    client.request(1, "session/new", json!({"cwd": "/tmp", "mcpServers": []}));
    let answer = client.recv()["result"].clone();
    let session = answer["sessionId"].as_str().expect("an id").to_owned();
    let models = [("small", "Small"), ("large", "Large")];
    let modes = [("ask", "Ask"), ("code", "Code")];
    assert_eq!(
        answer,
        json!({"sessionId": session,
        "modes": {"currentModeId": "ask", "availableModes": [
            {"id": "ask", "name": "Ask", "description": "Reads only"}, {"id": "code", "name": "Code"}]},
        "configOptions": [
            select("mode", "Mode", "mode", "ask", &modes),
            select("model", "Model", "model", "small", &models),
            select("thinking", "Thinking", "thought_level", "off", &LEVELS),
        ]})
    );
    // The first mode holds: its system prompt and tools.
    assert_eq!(
        told(&mut client, 2, &session),
        "small / Only answer. / Off / read"
    );
    client.request(
        3,
        "session/set_config_option",
        json!({"sessionId": session, "configId": "model", "value": "large"}),
    );
    assert_eq!(
        client.recv()["result"]["configOptions"][1]["currentValue"],
        "large"
    );
    client.request(
        4,
        "session/set_config_option",
        json!({"sessionId": session, "configId": "thinking", "value": "high"}),
    );
    assert_eq!(
        client.recv()["result"]["configOptions"][2]["currentValue"],
        "high"
    );
    assert_eq!(
        told(&mut client, 5, &session),
        "large / Only answer. / High / read"
    );
    // set_mode: the update of the mode and of the options, then the answer.
    client.request(
        6,
        "session/set_mode",
        json!({"sessionId": session, "modeId": "code"}),
    );
    let update = |u: Value| json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": u}});
    assert_eq!(
        client.recv(),
        update(json!({"sessionUpdate": "current_mode_update", "currentModeId": "code"}))
    );
    assert_eq!(
        client.recv(),
        update(
            json!({"sessionUpdate": "config_option_update", "configOptions": [
                select("mode", "Mode", "mode", "code", &modes),
                select("model", "Model", "model", "large", &models),
                select("thinking", "Thinking", "thought_level", "high", &LEVELS),
            ]})
        )
    );
    assert_eq!(
        client.recv(),
        json!({"jsonrpc": "2.0", "id": 6, "result": {}})
    );
    assert_eq!(
        told(&mut client, 7, &session),
        "large / Base. / High / read,write"
    );
    // The mode as a config option: answered with the options, and a current_mode_update.
    client.request(
        8,
        "session/set_config_option",
        json!({"sessionId": session, "configId": "mode", "value": "ask"}),
    );
    assert_eq!(
        client.recv(),
        update(json!({"sessionUpdate": "current_mode_update", "currentModeId": "ask"}))
    );
    assert_eq!(
        client.recv()["result"]["configOptions"][0]["currentValue"],
        "ask"
    );
    for (id, params) in [
        (9, json!({"configId": "model", "value": "huge"})),
        (10, json!({"configId": "colour", "value": "red"})),
        (11, json!({"configId": "thinking", "value": true})),
    ] {
        let mut params = params;
        params["sessionId"] = json!(session);
        client.request(id, "session/set_config_option", params);
        assert_eq!(error_code(&client.recv()), acp::codes::INVALID_PARAMS);
    }
    client.request(
        12,
        "session/set_mode",
        json!({"sessionId": session, "modeId": "fly"}),
    );
    assert_eq!(error_code(&client.recv()), acp::codes::INVALID_PARAMS);
    client.request(13, "logout", json!({}));
    assert_eq!(
        client.recv(),
        json!({"jsonrpc": "2.0", "id": 13, "result": {}})
    );
    client.close().expect("a clean end");
}

#[test]
fn a_modes_approval_policy_replaces_the_options() {
    let options = acp::Options::new()
        .ask_permission(|_| true)
        .mode(Mode::new("auto", "Auto").ask_permission(|_| false));
    let mut client = Client::start(super::touching, options);
    let session = client.new_session(1);
    client.request(2, "session/prompt", prompt_of(&session, "touch"));
    let seen = client.until_response(2);
    assert!(
        seen.iter()
            .all(|m| m["method"] != "session/request_permission"),
        "{seen:?}"
    );
    assert_eq!(
        seen.last().expect("an answer")["result"]["stopReason"],
        "end_turn"
    );
    client.close().expect("a clean end");
}
