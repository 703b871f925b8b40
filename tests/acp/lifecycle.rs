//! The session lifecycle: `session/list`, `session/resume`, `session/close`,
//! `session/delete`, and idle expiry.

use std::path::PathBuf;
use std::time::Duration;

use pagent::acp::{self, SessionInfo};
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, AgentBuilder, Message};
use serde_json::{Value, json};

use super::{Client, error_code, prompt_of};

/// A model that answers how many user messages it was sent so far.
fn counting(_: &SessionInfo) -> Result<AgentBuilder, pagent::Error> {
    Ok(
        Agent::builder().provider(Faux::default().chunk_chars(1000).otherwise(|r| {
            let users = r
                .messages
                .iter()
                .filter(|m| matches!(***m, Message::User(_)))
                .count();
            FauxReply::text(format!("{users} prompts"))
        })),
    )
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pagent-acp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

fn list(client: &mut Client, id: u64, params: Value) -> Vec<Value> {
    client.request(id, "session/list", params);
    let m = client.recv();
    let sessions = m["result"]["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("sessions in {m}"));
    sessions
        .iter()
        .map(|s| {
            let at = s["updatedAt"].as_str().expect("updatedAt");
            // RFC 3339 in UTC, whole seconds: 2026-12-01T14:05:00Z.
            assert!(
                at.len() == 20 && at.ends_with('Z') && at.as_bytes()[10] == b'T',
                "{at}"
            );
            json!({"sessionId": s["sessionId"], "cwd": s["cwd"], "title": s["title"]})
        })
        .collect()
}

fn prompt(client: &mut Client, id: u64, session: &str, text: &str) -> Vec<Value> {
    client.request(id, "session/prompt", prompt_of(session, text));
    client.until_response(id)
}

fn reply(session: &str, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})
}

fn ok(id: u64, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

#[test]
fn sessions_are_listed_closed_resumed_without_replay_and_deleted() {
    let dir = temp_dir("lifecycle");
    let mut client = Client::start(counting, acp::Options::new().session_dir(&dir));
    let a = client.new_session(1);
    client.request(
        2,
        "session/new",
        json!({"cwd": "/elsewhere", "mcpServers": []}),
    );
    let b = client.recv()["result"]["sessionId"]
        .as_str()
        .expect("an id")
        .to_owned();
    prompt(&mut client, 3, &a, "\n  Fix the build\nplease");
    // Most recently used first; the title is the first prompt's first line.
    assert_eq!(
        list(&mut client, 4, json!({})),
        [
            json!({"sessionId": a, "cwd": "/tmp", "title": "Fix the build"}),
            json!({"sessionId": b, "cwd": "/elsewhere", "title": null}),
        ]
    );
    assert_eq!(
        list(&mut client, 5, json!({"cwd": "/elsewhere"})),
        [json!({"sessionId": b, "cwd": "/elsewhere", "title": null})]
    );
    // Closed: no longer live (a prompt gets -32002), still saved and listed.
    client.request(6, "session/close", json!({"sessionId": a}));
    assert_eq!(client.recv(), ok(6, json!({})));
    client.request(7, "session/prompt", prompt_of(&a, "hello?"));
    assert_eq!(error_code(&client.recv()), acp::codes::RESOURCE_NOT_FOUND);
    assert_eq!(list(&mut client, 8, json!({"cwd": "/tmp"})).len(), 1);
    // Resumed: answered with nothing replayed, and the model sees the old transcript.
    client.request(
        9,
        "session/resume",
        json!({"sessionId": a, "cwd": "/tmp", "mcpServers": []}),
    );
    assert_eq!(client.recv(), ok(9, super::opened()));
    assert_eq!(
        prompt(&mut client, 10, &a, "again"),
        [
            reply(&a, "2 prompts"),
            ok(10, json!({"stopReason": "end_turn"}))
        ]
    );
    // A live session resumes from its own transcript, without a session directory too.
    client.request(11, "session/resume", json!({"sessionId": a, "cwd": "/tmp"}));
    assert_eq!(client.recv(), ok(11, super::opened()));
    assert_eq!(
        prompt(&mut client, 12, &a, "more")[0],
        reply(&a, "3 prompts")
    );
    // Deleted: gone from the list, and neither resumed nor deleted again.
    client.request(13, "session/delete", json!({"sessionId": a}));
    assert_eq!(client.recv(), ok(13, json!({})));
    assert_eq!(
        list(&mut client, 14, json!({"cwd": "/tmp"})),
        Vec::<Value>::new()
    );
    for (id, method) in [
        (15, "session/resume"),
        (16, "session/delete"),
        (17, "session/close"),
    ] {
        client.request(id, method, json!({"sessionId": a, "cwd": "/tmp"}));
        assert_eq!(
            error_code(&client.recv()),
            acp::codes::RESOURCE_NOT_FOUND,
            "{method}"
        );
    }
    client.close().expect("a clean end");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn closing_a_session_whose_prompt_runs_cancels_the_prompt() {
    let mut client = Client::start(super::stalling, acp::Options::new());
    let session = client.new_session(1);
    client.request(2, "session/prompt", prompt_of(&session, "go"));
    let _chunk = client.recv();
    client.request(3, "session/close", json!({"sessionId": session}));
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let m = client.recv();
        if m.get("id").is_some() {
            seen.push(m);
        }
    }
    seen.sort_by_key(|m| m["id"].as_u64());
    assert_eq!(
        seen,
        [ok(2, json!({"stopReason": "cancelled"})), ok(3, json!({}))]
    );
    client.close().expect("a clean end");
}

#[test]
fn without_a_session_directory_only_live_sessions_are_listed_and_delete_is_not_offered() {
    let mut client = Client::start(counting, acp::Options::new());
    client.request(1, "initialize", json!({"protocolVersion": 1}));
    let caps = client.recv()["result"]["agentCapabilities"]["sessionCapabilities"].clone();
    assert_eq!(caps, json!({"list": {}, "resume": {}, "close": {}}));
    let session = client.new_session(2);
    client.request(3, "session/close", json!({"sessionId": session}));
    assert_eq!(client.recv(), ok(3, json!({})));
    assert_eq!(list(&mut client, 4, json!({})), Vec::<Value>::new());
    client.request(
        5,
        "session/resume",
        json!({"sessionId": session, "cwd": "/tmp"}),
    );
    assert_eq!(error_code(&client.recv()), acp::codes::RESOURCE_NOT_FOUND);
    client.request(6, "session/delete", json!({"sessionId": session}));
    assert_eq!(error_code(&client.recv()), acp::codes::METHOD_NOT_FOUND);
    client.request(7, "session/list", json!({"cursor": "next"}));
    assert_eq!(error_code(&client.recv()), acp::codes::INVALID_PARAMS);
    client.close().expect("a clean end");
}

#[test]
fn an_idle_session_expires_and_stays_resumable() {
    let dir = temp_dir("expiry");
    let options = acp::Options::new()
        .session_dir(&dir)
        .idle_timeout(Duration::from_millis(500));
    let mut client = Client::start(counting, options);
    let session = client.new_session(1);
    // Long enough that a loaded machine does not expire the session before its first prompt
    // is read (it was 50 ms, and the prompt then found no session).
    let answered = prompt(&mut client, 2, &session, "hello");
    assert_eq!(
        answered.last().unwrap()["result"]["stopReason"],
        "end_turn",
        "{answered:?}"
    );
    std::thread::sleep(Duration::from_millis(1_200));
    // Expired as the next request is read: not live, still listed (saved).
    client.request(3, "session/prompt", prompt_of(&session, "still there?"));
    assert_eq!(error_code(&client.recv()), acp::codes::RESOURCE_NOT_FOUND);
    assert_eq!(
        list(&mut client, 4, json!({})),
        [json!({"sessionId": session, "cwd": "/tmp", "title": "hello"})]
    );
    client.request(
        5,
        "session/resume",
        json!({"sessionId": session, "cwd": "/tmp"}),
    );
    assert_eq!(client.recv(), ok(5, super::opened()));
    assert_eq!(
        prompt(&mut client, 6, &session, "back")[0],
        reply(&session, "2 prompts")
    );
    client.close().expect("a clean end");
    std::fs::remove_dir_all(&dir).ok();
}
