//! The updates beside a run's own: `usage_update` after each reply, `session_info_update`
//! with the session's title, `available_commands_update` and the commands' rewrites, and the
//! `messageId` of chunks.

use pagent::acp::{self, Command, Prices, SessionInfo};
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, AgentBuilder, Message, Usage};
use serde_json::{Value, json};

use super::{Client, prompt_of};

/// A model that echoes the last user text, with a usage of 100 prompt and 20 generated
/// tokens.
fn echo(_: &SessionInfo) -> Result<AgentBuilder, pagent::Error> {
    Ok(
        Agent::builder().provider(Faux::default().chunk_chars(1000).otherwise(|r| {
            let last = r
                .messages
                .iter()
                .rev()
                .find(|m| matches!(***m, Message::User(_)));
            FauxReply::text(format!(
                "echo: {}",
                last.map(|m| m.text()).unwrap_or_default()
            ))
            .usage(Usage::new(100, 20))
        })),
    )
}

fn update(session: &str, update: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}})
}

#[test]
fn each_reply_gets_its_usage_the_first_prompt_its_title_and_chunks_their_message() {
    let options = acp::Options::new()
        .context_window(8_000)
        .prices(Prices {
            currency: "USD".into(),
            input: 3.0,
            output: 15.0,
        })
        .session_title(|prompt: &str| {
            prompt
                .contains("title")
                .then(|| "Program's title".to_owned())
        })
        .command(
            Command::new("shout", "Says it loudly", |rest: &str| rest.to_uppercase()).hint("words"),
        );
    let mut client = Client::start(echo, options);
    client.titles = true;
    client.request(1, "session/new", json!({"cwd": "/tmp", "mcpServers": []}));
    let session = client.recv()["result"]["sessionId"]
        .as_str()
        .expect("an id")
        .to_owned();
    assert_eq!(
        client.recv(),
        update(
            &session,
            json!({"sessionUpdate": "available_commands_update", "availableCommands": [
            {"name": "shout", "description": "Says it loudly", "input": {"hint": "words"}}]})
        )
    );
    client.request(
        2,
        "session/prompt",
        prompt_of(&session, "/shout hello there"),
    );
    let mut seen = Vec::new();
    loop {
        let mut m = client.recv();
        if let Some(at) = m.pointer_mut("/params/update/updatedAt") {
            assert!(at.as_str().is_some_and(|at| at.ends_with('Z')), "{at}");
            *at = json!("<time>");
        }
        let done = m.get("id").is_some();
        seen.push(m);
        if done {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            update(
                &session,
                json!({"sessionUpdate": "session_info_update", "title": "HELLO THERE", "updatedAt": "<time>"})
            ),
            update(
                &session,
                json!({"sessionUpdate": "agent_message_chunk", "messageId": "m1",
                "content": {"type": "text", "text": "echo: HELLO THERE"}})
            ),
            update(
                &session,
                json!({"sessionUpdate": "usage_update", "used": 120, "size": 8000,
                "cost": {"amount": 0.0006, "currency": "USD"}})
            ),
            json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}),
        ]
    );
    // The second reply: its own message id, the cost summed over the session, no new title.
    client.request(3, "session/prompt", prompt_of(&session, "a title?"));
    let seen = client.until_response(3);
    assert_eq!(
        seen[1],
        update(
            &session,
            json!({"sessionUpdate": "usage_update", "used": 120, "size": 8000,
            "cost": {"amount": 0.0012, "currency": "USD"}})
        )
    );
    client.close().expect("a clean end");
    // The program's title wins over the first line.
    let mut client = Client::start(
        echo,
        acp::Options::new().session_title(|_: &str| Some("Mine".into())),
    );
    client.titles = true;
    let session = client.new_session(1);
    client.request(2, "session/prompt", prompt_of(&session, "hello"));
    assert_eq!(client.recv()["params"]["update"]["title"], "Mine");
    client.close().expect("a clean end");
}

#[test]
fn a_replayed_transcript_names_each_message() {
    let dir = std::env::temp_dir().join(format!("pagent-acp-ids-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let mut client = Client::start(echo, acp::Options::new().session_dir(&dir));
    let session = client.new_session(1);
    client.request(2, "session/prompt", prompt_of(&session, "one"));
    client.until_response(2);
    client.request(
        3,
        "session/load",
        json!({"sessionId": session, "cwd": "/tmp", "mcpServers": []}),
    );
    let ids: Vec<(Value, Value)> = (0..2)
        .map(|_| {
            let u = client.recv()["params"]["update"].clone();
            (u["sessionUpdate"].clone(), u["messageId"].clone())
        })
        .collect();
    assert_eq!(
        ids,
        [
            (json!("user_message_chunk"), json!("m0")),
            (json!("agent_message_chunk"), json!("m1"))
        ]
    );
    client.close().expect("a clean end");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_commands_come_before_anything_of_a_prompt_sent_on_the_answer() {
    let options =
        acp::Options::new().command(Command::new("shout", "Says it loudly", |rest: &str| {
            rest.to_uppercase()
        }));
    let mut client = Client::start(echo, options);
    // Each session's prompt goes out the moment its answer is read, racing the setup
    // thread that sends the commands.
    for n in 0..200 {
        let id = 10 * n + 1;
        client.request(id, "session/new", json!({"cwd": "/tmp", "mcpServers": []}));
        let answer = client.recv();
        let session = answer["result"]["sessionId"]
            .as_str()
            .expect("an id")
            .to_owned();
        client.request(id + 1, "session/prompt", prompt_of(&session, "hi"));
        let next = client.recv();
        assert_eq!(
            next["params"]["update"]["sessionUpdate"], "available_commands_update",
            "session {n}: {next}"
        );
        let rest = client.until_response(id + 1);
        assert_eq!(
            rest.last(),
            Some(&json!({"jsonrpc": "2.0", "id": id + 1, "result": {"stopReason": "end_turn"}}))
        );
    }
    client.close().expect("a clean end");
}

#[test]
fn without_the_option_the_usage_update_takes_the_agents_own_context_window() {
    let windowed = |info: &SessionInfo| Ok(echo(info)?.context_window(4_096));
    // The agent's window, when the program sets none.
    let mut client = Client::start(windowed, acp::Options::new());
    let session = client.new_session(1);
    client.request(2, "session/prompt", prompt_of(&session, "hi"));
    let seen = client.until_response(2);
    assert_eq!(
        seen[1],
        update(
            &session,
            json!({"sessionUpdate": "usage_update", "used": 120, "size": 4096})
        )
    );
    client.close().expect("a clean end");
    // The program's window wins.
    let mut client = Client::start(windowed, acp::Options::new().context_window(8_000));
    let session = client.new_session(1);
    client.request(2, "session/prompt", prompt_of(&session, "hi"));
    assert_eq!(
        client.until_response(2)[1]["params"]["update"]["size"],
        8000
    );
    client.close().expect("a clean end");
    // No window known: no `usage_update` (the protocol needs its size).
    let mut client = Client::start(echo, acp::Options::new());
    let session = client.new_session(1);
    client.request(2, "session/prompt", prompt_of(&session, "hi"));
    let kinds: Vec<Value> = (client.until_response(2).iter())
        .map(|m| m["params"]["update"]["sessionUpdate"].clone())
        .collect();
    assert_eq!(kinds, [json!("agent_message_chunk"), Value::Null]);
    client.close().expect("a clean end");
}

/// An agent whose first request is past its compaction threshold: a long history, a
/// 1,000-token window. Requests without tools are the compaction's summary requests.
fn compacting(_: &SessionInfo) -> Result<AgentBuilder, pagent::Error> {
    let history = (0..8).flat_map(|n| {
        [
            Message::user(format!(
                "Note {n}: {}",
                "lorem ipsum dolor sit amet ".repeat(8)
            )),
            Message::Assistant(pagent::AssistantMessage::new(
                vec![pagent::ContentBlock::text(format!("Noted {n}."))],
                pagent::StopReason::Stop,
            )),
        ]
    });
    let faux = Faux::default().chunk_chars(1000).otherwise(|r| {
        if r.tools.is_empty() {
            FauxReply::text("Eight notes of lorem ipsum.")
        } else {
            FauxReply::text("Done.")
        }
    });
    Ok(Agent::builder()
        .provider(faux)
        .messages(history)
        .context_window(1000)
        .context_policy(
            pagent::context::Compaction::new()
                .threshold(0.3)
                .keep_recent(0.1),
        )
        .tool(pagent::tool::typed(
            "noop",
            "Does nothing.",
            |_: serde_json::Map<String, Value>, _| Ok(pagent::ToolOutput::text("")),
        )))
}

fn compaction_updates(client_capabilities: Value) -> Vec<Value> {
    let mut client = Client::start(compacting, acp::Options::new());
    client.request(
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": client_capabilities}),
    );
    client.recv();
    let session = client.new_session(2);
    client.request(3, "session/prompt", prompt_of(&session, "Go on."));
    let seen = client.until_response(3);
    client.close().expect("a clean end");
    seen.into_iter()
        .map(|m| m["params"]["update"].clone())
        .filter(|u| !u.is_null())
        .collect()
}

/// A client that shows compactions (`session.compaction`) gets a `compaction_update` as the
/// compaction starts and one with its summary as it ends; any other gets thought chunks.
#[test]
fn a_compaction_is_a_compaction_update_for_a_client_that_shows_them() {
    assert_eq!(
        compaction_updates(json!({"session": {"compaction": {}}})),
        [
            json!({"sessionUpdate": "compaction_update", "compactionId": "c1",
                   "status": "in_progress"}),
            json!({"sessionUpdate": "compaction_update", "compactionId": "c1",
                   "status": "completed",
                   "summary": [{"type": "text", "text": "Eight notes of lorem ipsum."}]}),
            json!({"sessionUpdate": "agent_message_chunk",
                   "content": {"type": "text", "text": "Done."}}),
            json!({"sessionUpdate": "usage_update", "size": 1000, "used": 77}),
        ]
    );
    let kinds: Vec<Value> = compaction_updates(json!({}))
        .iter()
        .map(|u| u["sessionUpdate"].clone())
        .collect();
    assert_eq!(
        kinds,
        [
            "agent_thought_chunk",
            "agent_thought_chunk",
            "agent_message_chunk",
            "usage_update"
        ]
    );
}

/// The `compaction_update`s validate against the pinned SDK's schema.
#[test]
#[ignore = "needs node and the pinned SDK: PAGENT_ACP_NODE_PATH=$(.ci/acp.sh)"]
fn compaction_updates_validate_against_the_sdks_schema() {
    let updates = compaction_updates(json!({"session": {"compaction": {}}}));
    for update in &updates[..2] {
        let params = json!({"sessionId": "s1", "update": update});
        if let Err(why) = super::schema_check("session/update", "client", "Notification", &params) {
            panic!("{params}: {why}");
        }
    }
    // The check can fail: a compaction without its id is no update.
    let mut broken = updates[0].clone();
    broken.as_object_mut().unwrap().remove("compactionId");
    let params = json!({"sessionId": "s1", "update": broken});
    assert!(super::schema_check("session/update", "client", "Notification", &params).is_err());
}
