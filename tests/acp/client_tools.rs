//! The client's files and terminal as the agent's tools (`SessionInfo::client_tools`): a
//! scripted client answers the `fs/*` and `terminal/*` requests, and every message of a
//! prompt is asserted, the requests and the answers among them; an abort during a command
//! kills and releases its terminal; each way a client can fail a request gives the call an
//! error result, and the run goes on.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use pagent::acp::{self, SessionInfo};
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, AgentBuilder, Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};

use super::{Client, PATIENCE, prompt_of, without_message_id};

const CWD: &str = "/work/project";

/// Every capability a client can advertise.
fn all() -> Value {
    json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true})
}

/// A client that advertised `capabilities`, and the id of its session, whose agent has the
/// client tools and calls each of `calls` (name, arguments) in a reply of its own, then
/// answers "done". Permission is never asked.
fn session_with(
    capabilities: Value,
    calls: &[(&str, Value)],
    options: acp::Options,
) -> (Client, String) {
    session_of(capabilities, calls, options.ask_permission(|_| false))
}

/// As [`session_with`], with the permission policy of `options`.
fn session_of(
    capabilities: Value,
    calls: &[(&str, Value)],
    options: acp::Options,
) -> (Client, String) {
    let calls: Vec<(String, Value)> = (calls.iter())
        .map(|(name, args)| ((*name).to_owned(), args.clone()))
        .collect();
    let factory = move |session: &SessionInfo| -> Result<AgentBuilder, pagent::Error> {
        let mut model = Faux::default();
        for (n, (name, args)) in calls.iter().enumerate() {
            let id = format!("c{}", n + 1);
            model = model.reply(FauxReply::tool_call(name.clone(), args.clone()).with_id(id));
        }
        let mut builder = Agent::builder().provider(model.otherwise(|_| FauxReply::text("done")));
        for tool in session.client_tools() {
            builder = builder.tool_arc(tool);
        }
        Ok(builder)
    };
    let mut client = Client::start(factory, options);
    client.request(
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": capabilities}),
    );
    assert!(client.recv()["result"].is_object());
    client.request(2, "session/new", json!({"cwd": CWD, "mcpServers": []}));
    let answer = client.recv();
    let session = answer["result"]["sessionId"]
        .as_str()
        .expect("an id")
        .to_owned();
    (client, session)
}

/// The messages up to the answer of prompt `id`, with what `answer` sends on each request
/// of the agent among them: a response (`{"result": ..}` or `{"error": ..}`, its id the
/// request's) shown as `{"answered": ..}`, or a message of its own (with a `method`) shown
/// as `{"sent": ..}`.
fn drive(client: &mut Client, id: u64, mut answer: impl FnMut(&Value) -> Vec<Value>) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let m = without_message_id(client.recv());
        let done = m.get("method").is_none() && m["id"] == json!(id);
        let asked = m.get("method").is_some() && m.get("id").is_some();
        seen.push(m.clone());
        for mut reply in if asked { answer(&m) } else { Vec::new() } {
            reply["jsonrpc"] = json!("2.0");
            let how = if reply.get("method").is_some() {
                "sent"
            } else {
                reply["id"] = m["id"].clone();
                "answered"
            };
            client.send(reply.clone());
            seen.push(json!({ how: reply }));
        }
        if done {
            return seen;
        }
    }
}

fn result(value: Value) -> Vec<Value> {
    vec![json!({ "result": value })]
}

fn update(session: &str, update: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}})
}

/// The agent's request `method` with `params` (its id as the agent numbered it).
fn asked(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn answered(id: u64, result: Value) -> Value {
    json!({"answered": {"jsonrpc": "2.0", "id": id, "result": result}})
}

fn running(session: &str, call: &str) -> Value {
    update(
        session,
        json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "in_progress"}),
    )
}

fn failed(session: &str, call: &str, why: &str) -> Value {
    update(
        session,
        json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": why}}]}),
    )
}

fn done(session: &str, prompt: u64) -> [Value; 2] {
    [
        update(
            session,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "done"}}),
        ),
        json!({"jsonrpc": "2.0", "id": prompt, "result": {"stopReason": "end_turn"}}),
    ]
}

#[test]
fn the_clients_files_and_terminal_are_tools_whose_calls_show_their_diff_and_terminal() {
    let calls = [
        (
            "editor_read_file",
            json!({"path": "src/main.rs", "line": 2, "limit": 1}),
        ),
        (
            "editor_write_file",
            json!({"path": "notes.txt", "content": "new\n"}),
        ),
        (
            "editor_write_file",
            json!({"path": "/etc/motd", "content": "hi\n"}),
        ),
        (
            "editor_run_command",
            json!({"command": "cargo", "args": ["test"], "cwd": "build", "env": {"RUST_LOG": "1"}}),
        ),
    ];
    let (mut client, s) = session_with(all(), &calls, acp::Options::new());
    client.request(3, "session/prompt", prompt_of(&s, "work"));
    let seen = drive(&mut client, 3, |m| {
        match (m["method"].as_str(), m["params"]["path"].as_str()) {
            (Some("fs/read_text_file"), Some("/work/project/src/main.rs")) => {
                result(json!({"content": "    println!(\"hi\");\n"}))
            }
            // A new file: the client answers the read with an error.
            (Some("fs/read_text_file"), Some("/work/project/notes.txt")) => {
                vec![json!({"error": {"code": -32002, "message": "no such file"}})]
            }
            (Some("fs/read_text_file"), Some("/etc/motd")) => result(json!({"content": "old\n"})),
            (Some("fs/write_text_file"), _) => result(json!({})),
            (Some("terminal/create"), _) => result(json!({"terminalId": "term-1"})),
            (Some("terminal/wait_for_exit"), _) => result(json!({"exitCode": 3, "signal": null})),
            (Some("terminal/output"), _) => result(json!({"output": "1 failed", "truncated": true,
            "exitStatus": {"exitCode": 3, "signal": null}})),
            (Some("terminal/release"), _) => result(json!(null)),
            other => panic!("unexpected request {other:?}"),
        }
    });
    let main = "/work/project/src/main.rs";
    let notes = "/work/project/notes.txt";
    let terminal = json!({"type": "terminal", "terminalId": "term-1"});
    let mut expected = vec![
        update(
            &s,
            json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "editor_read_file",
            "kind": "read", "status": "pending", "rawInput": calls[0].1,
            "locations": [{"path": main, "line": 2}]}),
        ),
        running(&s, "c1"),
        asked(
            1,
            "fs/read_text_file",
            json!({"sessionId": s, "path": main, "line": 2, "limit": 1}),
        ),
        answered(1, json!({"content": "    println!(\"hi\");\n"})),
        update(
            &s,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "    println!(\"hi\");\n"}}],
            "locations": [{"path": main, "line": 2}],
            "rawOutput": {"locations": [{"path": main, "line": 2}]}}),
        ),
        update(
            &s,
            json!({"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "editor_write_file",
            "kind": "edit", "status": "pending", "rawInput": calls[1].1,
            "locations": [{"path": notes}]}),
        ),
        running(&s, "c2"),
        asked(
            2,
            "fs/read_text_file",
            json!({"sessionId": s, "path": notes}),
        ),
        json!({"answered": {"jsonrpc": "2.0", "id": 2, "error": {"code": -32002, "message": "no such file"}}}),
        asked(
            3,
            "fs/write_text_file",
            json!({"sessionId": s, "path": notes, "content": "new\n"}),
        ),
        answered(3, json!({})),
        update(
            &s,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "completed",
            "content": [
                {"type": "diff", "path": notes, "oldText": null, "newText": "new\n"},
                {"type": "content", "content": {"type": "text", "text": "Created /work/project/notes.txt (4 bytes)."}},
            ],
            "locations": [{"path": notes}],
            "rawOutput": {"diff": {"path": notes, "oldText": null, "newText": "new\n"}, "locations": [{"path": notes}]}}),
        ),
        update(
            &s,
            json!({"sessionUpdate": "tool_call", "toolCallId": "c3", "title": "editor_write_file",
            "kind": "edit", "status": "pending", "rawInput": calls[2].1,
            "locations": [{"path": "/etc/motd"}]}),
        ),
        running(&s, "c3"),
        asked(
            4,
            "fs/read_text_file",
            json!({"sessionId": s, "path": "/etc/motd"}),
        ),
        answered(4, json!({"content": "old\n"})),
        asked(
            5,
            "fs/write_text_file",
            json!({"sessionId": s, "path": "/etc/motd", "content": "hi\n"}),
        ),
        answered(5, json!({})),
        update(
            &s,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c3", "status": "completed",
            "content": [
                {"type": "diff", "path": "/etc/motd", "oldText": "old\n", "newText": "hi\n"},
                {"type": "content", "content": {"type": "text", "text": "Wrote /etc/motd (3 bytes)."}},
            ],
            "locations": [{"path": "/etc/motd"}],
            "rawOutput": {"diff": {"path": "/etc/motd", "oldText": "old\n", "newText": "hi\n"}, "locations": [{"path": "/etc/motd"}]}}),
        ),
        update(
            &s,
            json!({"sessionUpdate": "tool_call", "toolCallId": "c4", "title": "editor_run_command",
            "kind": "execute", "status": "pending", "rawInput": calls[3].1}),
        ),
        running(&s, "c4"),
        asked(
            6,
            "terminal/create",
            json!({"sessionId": s, "command": "cargo", "args": ["test"],
            "env": [{"name": "RUST_LOG", "value": "1"}], "cwd": "/work/project/build", "outputByteLimit": 65536}),
        ),
        answered(6, json!({"terminalId": "term-1"})),
        // The call shows the terminal while the command runs.
        update(
            &s,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c4", "content": [terminal]}),
        ),
        asked(
            7,
            "terminal/wait_for_exit",
            json!({"sessionId": s, "terminalId": "term-1"}),
        ),
        answered(7, json!({"exitCode": 3, "signal": null})),
        asked(
            8,
            "terminal/output",
            json!({"sessionId": s, "terminalId": "term-1"}),
        ),
        answered(
            8,
            json!({"output": "1 failed", "truncated": true, "exitStatus": {"exitCode": 3, "signal": null}}),
        ),
        asked(
            9,
            "terminal/release",
            json!({"sessionId": s, "terminalId": "term-1"}),
        ),
        answered(9, json!(null)),
        update(
            &s,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c4", "status": "completed",
            "content": [terminal, {"type": "content", "content": {"type": "text",
                "text": "1 failed\n[exit code 3 (the beginning of the output was cut)]"}}],
            "rawOutput": {"terminalId": "term-1", "exitStatus": {"exitCode": 3, "signal": null}, "truncated": true}}),
        ),
    ];
    expected.extend(done(&s, 3));
    assert_eq!(seen, expected);
    client.close().expect("a clean end");
}

#[test]
fn only_the_advertised_capabilities_become_tools() {
    let names = |capabilities: Value| {
        let (tx, rx) = crossbeam_channel::unbounded();
        let factory = move |session: &SessionInfo| -> Result<AgentBuilder, pagent::Error> {
            let tools = session.client_tools();
            let names: Vec<String> = tools.iter().map(|t| t.name().to_owned()).collect();
            tx.send((session.client_capabilities(), names))
                .expect("the test waits");
            Ok(Agent::builder().provider(Faux::default()))
        };
        let mut client = Client::start(factory, acp::Options::new());
        if !capabilities.is_null() {
            client.request(
                1,
                "initialize",
                json!({"protocolVersion": 1, "clientCapabilities": capabilities}),
            );
            client.recv();
        }
        client.new_session(2);
        client.close().expect("a clean end");
        let (caps, names) = rx.recv_timeout(PATIENCE).expect("the factory ran");
        (
            [caps.read_text_file, caps.write_text_file, caps.terminal],
            names,
        )
    };
    assert_eq!(names(Value::Null), ([false; 3], vec![]));
    assert_eq!(names(json!({})), ([false; 3], vec![]));
    assert_eq!(
        names(json!({"fs": {"readTextFile": true, "writeTextFile": false}, "terminal": "yes"})),
        ([true, false, false], vec!["editor_read_file".to_owned()])
    );
    assert_eq!(
        names(json!({"fs": {"writeTextFile": true}, "terminal": true})),
        (
            [false, true, true],
            vec![
                "editor_write_file".to_owned(),
                "editor_run_command".to_owned()
            ]
        )
    );
}

#[test]
fn a_write_without_read_has_no_old_text_and_sends_no_read() {
    let calls = [(
        "editor_write_file",
        json!({"path": "a.txt", "content": "x"}),
    )];
    let caps = json!({"fs": {"writeTextFile": true}});
    let (mut client, s) = session_with(caps, &calls, acp::Options::new());
    client.request(3, "session/prompt", prompt_of(&s, "write"));
    let seen = drive(&mut client, 3, |m| {
        assert_eq!(m["method"], "fs/write_text_file");
        result(json!(null))
    });
    assert_eq!(seen[2]["method"], "fs/write_text_file");
    assert_eq!(
        seen[4]["params"]["update"]["content"][0],
        json!({"type": "diff", "path": "/work/project/a.txt", "oldText": null, "newText": "x"})
    );
    assert_eq!(seen.len(), 7, "{seen:#?}");
    client.close().expect("a clean end");
}

fn cancel_of(session: &str) -> Value {
    json!({"method": "session/cancel", "params": {"sessionId": session}})
}

fn cancel_request(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": id}})
}

fn terminal_call(s: &str, args: &Value) -> [Value; 2] {
    [
        update(
            s,
            json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "editor_run_command",
            "kind": "execute", "status": "pending", "rawInput": args}),
        ),
        running(s, "c1"),
    ]
}

fn created(s: &str, args: &[&str]) -> [Value; 3] {
    [
        asked(
            1,
            "terminal/create",
            json!({"sessionId": s, "command": "sleep", "args": args,
            "env": [], "cwd": CWD, "outputByteLimit": 65536}),
        ),
        answered(1, json!({"terminalId": "t"})),
        update(
            s,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1",
            "content": [{"type": "terminal", "terminalId": "t"}]}),
        ),
    ]
}

fn terminal_request(s: &str, id: u64, method: &str) -> Value {
    asked(id, method, json!({"sessionId": s, "terminalId": "t"}))
}

#[test]
fn a_cancel_during_a_command_kills_and_releases_its_terminal_and_the_prompt_answers_cancelled() {
    let args = json!({"command": "sleep", "args": ["600"]});
    let (mut client, s) = session_with(
        all(),
        &[("editor_run_command", args.clone())],
        acp::Options::new(),
    );
    client.request(3, "session/prompt", prompt_of(&s, "run"));
    let seen = drive(&mut client, 3, |m| match m["method"].as_str() {
        Some("terminal/create") => result(json!({"terminalId": "t"})),
        // The command runs: no answer, and the user cancels the prompt.
        Some("terminal/wait_for_exit") => vec![cancel_of(&s)],
        Some("terminal/kill" | "terminal/release") => result(json!({})),
        other => panic!("unexpected request {other:?}"),
    });
    let mut expected = terminal_call(&s, &args).to_vec();
    expected.extend(created(&s, &["600"]));
    expected.extend([
        terminal_request(&s, 2, "terminal/wait_for_exit"),
        json!({"sent": {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": s}}}),
        // The wait is given up, the command killed, its terminal released.
        cancel_request(2),
        terminal_request(&s, 3, "terminal/kill"),
        answered(3, json!({})),
        terminal_request(&s, 4, "terminal/release"),
        answered(4, json!({})),
        update(&s, json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "failed",
            "content": [{"type": "terminal", "terminalId": "t"}, {"type": "content", "content": {"type": "text",
                "text": "cancelled: the run was aborted during terminal/wait_for_exit"}}]})),
        json!({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "cancelled"}}),
    ]);
    assert_eq!(seen, expected);
    // The session prompts again as usual.
    client.request(4, "session/prompt", prompt_of(&s, "again"));
    assert_eq!(drive(&mut client, 4, |_| Vec::new()), done(&s, 4));
    client.close().expect("a clean end");
}

/// What a read of `a.txt` shows when the client answers it with `answer` (`None`: never);
/// the run goes on to "done" either way.
fn read_answered(answer: Option<Value>, options: acp::Options) -> (String, Vec<Value>) {
    let args = json!({"path": "a.txt"});
    let caps = json!({"fs": {"readTextFile": true}});
    let (mut client, s) = session_with(caps, &[("editor_read_file", args)], options);
    client.request(3, "session/prompt", prompt_of(&s, "read"));
    let seen = drive(&mut client, 3, |m| {
        assert_eq!(m["method"], "fs/read_text_file");
        answer.clone().into_iter().collect()
    });
    client.close().expect("a clean end");
    let path = "/work/project/a.txt";
    assert_eq!(
        seen[..3],
        [
            update(
                &s,
                json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "editor_read_file",
                "kind": "read", "status": "pending", "rawInput": {"path": "a.txt"}, "locations": [{"path": path}]})
            ),
            running(&s, "c1"),
            asked(
                1,
                "fs/read_text_file",
                json!({"sessionId": s, "path": path})
            ),
        ]
    );
    assert_eq!(seen[seen.len() - 2..], done(&s, 3));
    (s, seen[3..seen.len() - 2].to_vec())
}

#[test]
fn an_error_answer_a_garbage_answer_and_no_answer_each_give_an_error_result_and_the_run_goes_on() {
    let error = json!({"error": {"code": -32002, "message": "no such file"}});
    let (s, seen) = read_answered(Some(error.clone()), acp::Options::new());
    let mut error = error;
    error["jsonrpc"] = json!("2.0");
    error["id"] = json!(1);
    assert_eq!(
        seen,
        [
            json!({ "answered": error }),
            failed(
                &s,
                "c1",
                "the client refused fs/read_text_file: no such file (-32002)"
            ),
        ]
    );
    for garbage in [
        json!({"content": 42}),
        json!("text"),
        json!(null),
        json!([1, 2]),
    ] {
        let (s, seen) = read_answered(Some(json!({ "result": garbage })), acp::Options::new());
        let why = format!(
            "the client's answer to fs/read_text_file is not one: {garbage} (no `content` string)"
        );
        assert_eq!(seen, [answered(1, garbage), failed(&s, "c1", &why)]);
    }
    // A long garbage answer is shown cut.
    let long = json!({"content": null, "junk": "x".repeat(10_000)});
    let (_, seen) = read_answered(Some(json!({ "result": long })), acp::Options::new());
    let text = seen[1]["params"]["update"]["content"][0]["content"]["text"]
        .as_str()
        .expect("a text");
    assert!(text.len() < 300, "{text}");
    // No answer: given up after the timeout, with `$/cancel_request`.
    let options = acp::Options::new().client_timeout(Duration::from_millis(200));
    let (s, seen) = read_answered(None, options);
    assert_eq!(
        seen,
        [
            cancel_request(1),
            failed(
                &s,
                "c1",
                "the client did not answer fs/read_text_file within 0.2 s"
            ),
        ]
    );
}

#[test]
fn a_permission_request_for_a_write_shows_its_locations_and_diff() {
    let args = json!({"path": "notes.txt", "content": "new\n"});
    let (mut client, s) = session_of(
        all(),
        &[("editor_write_file", args.clone())],
        acp::Options::new(),
    );
    client.request(3, "session/prompt", prompt_of(&s, "write"));
    let seen = drive(&mut client, 3, |m| match m["method"].as_str() {
        Some("fs/read_text_file") => result(json!({"content": "old\n"})),
        Some("session/request_permission") => {
            result(json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}))
        }
        _ => result(json!({})),
    });
    let notes = "/work/project/notes.txt";
    let diff = json!({"type": "diff", "path": notes, "oldText": "old\n", "newText": "new\n"});
    let mut expected = vec![
        update(
            &s,
            json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "editor_write_file",
            "kind": "edit", "status": "pending", "rawInput": args, "locations": [{"path": notes}]}),
        ),
        // The old text for the diff the client is asked about.
        asked(
            1,
            "fs/read_text_file",
            json!({"sessionId": s, "path": notes}),
        ),
        answered(1, json!({"content": "old\n"})),
    ];
    let ask = &seen[3];
    assert_eq!(ask["method"], "session/request_permission", "{seen:#?}");
    assert_eq!(
        ask["params"]["toolCall"],
        json!({"toolCallId": "c1", "status": "pending", "title": "editor_write_file", "kind": "edit",
            "content": [diff], "locations": [{"path": notes}], "rawInput": args})
    );
    expected.extend([
        ask.clone(),
        answered(
            2,
            json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}),
        ),
        running(&s, "c1"),
        asked(
            3,
            "fs/read_text_file",
            json!({"sessionId": s, "path": notes}),
        ),
        answered(3, json!({"content": "old\n"})),
        asked(
            4,
            "fs/write_text_file",
            json!({"sessionId": s, "path": notes, "content": "new\n"}),
        ),
        answered(4, json!({})),
    ]);
    assert_eq!(seen[..expected.len()], expected[..]);
    assert_eq!(seen[expected.len()]["params"]["update"]["content"][0], diff);
    client.close().expect("a clean end");
}

#[test]
fn a_cancel_during_a_read_gives_the_read_up_and_the_prompt_answers_cancelled() {
    let args = json!({"path": "a.txt"});
    let caps = json!({"fs": {"readTextFile": true}});
    let (mut client, s) = session_with(caps, &[("editor_read_file", args)], acp::Options::new());
    client.request(3, "session/prompt", prompt_of(&s, "read"));
    let seen = drive(&mut client, 3, |_| vec![cancel_of(&s)]);
    assert_eq!(
        seen[2..],
        [
            asked(
                1,
                "fs/read_text_file",
                json!({"sessionId": s, "path": "/work/project/a.txt"})
            ),
            json!({"sent": {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": s}}}),
            cancel_request(1),
            failed(
                &s,
                "c1",
                "cancelled: the run was aborted during fs/read_text_file"
            ),
            json!({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "cancelled"}}),
        ]
    );
    // A late answer to the read given up is ignored; the session prompts again.
    client.send(json!({"jsonrpc": "2.0", "id": 1, "result": {"content": "late"}}));
    client.request(4, "session/prompt", prompt_of(&s, "again"));
    assert_eq!(drive(&mut client, 4, |_| Vec::new()), done(&s, 4));
    client.close().expect("a clean end");
}

/// What a `sleep` command shows when the client answers the terminal's requests with
/// `answer`; the run goes on to "done".
fn command_answered(
    answer: impl FnMut(&Value) -> Vec<Value>,
    options: acp::Options,
) -> (String, Vec<Value>) {
    let args = json!({"command": "sleep", "args": ["1"]});
    let (mut client, s) = session_with(all(), &[("editor_run_command", args.clone())], options);
    client.request(3, "session/prompt", prompt_of(&s, "run"));
    let seen = drive(&mut client, 3, answer);
    client.close().expect("a clean end");
    assert_eq!(seen[..2], terminal_call(&s, &args));
    assert_eq!(seen[seen.len() - 2..], done(&s, 3));
    (s, seen[2..seen.len() - 2].to_vec())
}

#[test]
fn a_terminal_is_released_on_every_failure_and_killed_when_its_command_may_run() {
    // No terminal id: nothing to release.
    let (s, seen) = command_answered(|_| result(json!({"terminalId": 7})), acp::Options::new());
    assert_eq!(
        seen[1..],
        [
            answered(1, json!({"terminalId": 7})),
            failed(
                &s,
                "c1",
                "the client's answer to terminal/create is not one: {\"terminalId\":7} (no `terminalId` string)"
            ),
        ]
    );
    // A wait answered with garbage: killed and released.
    let (s, seen) = command_answered(
        |m| match m["method"].as_str() {
            Some("terminal/create") => result(json!({"terminalId": "t"})),
            Some("terminal/wait_for_exit") => result(json!({"exitCode": "zero"})),
            _ => result(json!({})),
        },
        acp::Options::new(),
    );
    let mut expected = created(&s, &["1"]).to_vec();
    expected.extend([
        terminal_request(&s, 2, "terminal/wait_for_exit"),
        answered(2, json!({"exitCode": "zero"})),
        terminal_request(&s, 3, "terminal/kill"),
        answered(3, json!({})),
        terminal_request(&s, 4, "terminal/release"),
        answered(4, json!({})),
        update(&s, json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "failed",
            "content": [{"type": "terminal", "terminalId": "t"}, {"type": "content", "content": {"type": "text",
                "text": "the client's answer to terminal/wait_for_exit is not one: {\"exitCode\":\"zero\"}"}}]})),
    ]);
    assert_eq!(seen, expected);
    // A command past its time: killed, its output so far read, released.
    let options = acp::Options::new().command_timeout(Duration::from_millis(200));
    let (s, seen) = command_answered(
        |m| match m["method"].as_str() {
            Some("terminal/create") => result(json!({"terminalId": "t"})),
            Some("terminal/wait_for_exit") => Vec::new(),
            Some("terminal/output") => result(json!({"output": "so far", "truncated": false})),
            _ => result(json!({})),
        },
        options,
    );
    let mut expected = created(&s, &["1"]).to_vec();
    expected.extend([
        terminal_request(&s, 2, "terminal/wait_for_exit"),
        cancel_request(2),
        terminal_request(&s, 3, "terminal/kill"),
        answered(3, json!({})),
        terminal_request(&s, 4, "terminal/output"),
        answered(4, json!({"output": "so far", "truncated": false})),
        terminal_request(&s, 5, "terminal/release"),
        answered(5, json!({})),
        update(&s, json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "failed",
            "content": [{"type": "terminal", "terminalId": "t"}, {"type": "content", "content": {"type": "text",
                "text": "the command did not end within 0.2 s and was killed; its output: so far"}}]})),
    ]);
    assert_eq!(seen, expected);
    // The client refuses the output after a clean exit: released all the same.
    let (_, seen) = command_answered(
        |m| match m["method"].as_str() {
            Some("terminal/create") => result(json!({"terminalId": "t"})),
            Some("terminal/wait_for_exit") => result(json!({"exitCode": 0})),
            Some("terminal/output") => vec![json!({"error": {"code": -32603, "message": "gone"}})],
            _ => result(json!({})),
        },
        acp::Options::new(),
    );
    let methods: Vec<&str> = seen.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(
        methods,
        [
            "terminal/create",
            "session/update",
            "terminal/wait_for_exit",
            "terminal/output",
            "terminal/release",
            "session/update"
        ]
    );
    assert_eq!(
        seen.last().expect("the result")["params"]["update"]["content"][1]["content"]["text"],
        "the client refused terminal/output: gone (-32603)"
    );
}

/// A client tool that reports each of its results on `results` (what the client cannot
/// see once it left).
struct Reported {
    tool: Arc<dyn Tool>,
    results: Sender<Result<String, String>>,
}

impl Tool for Reported {
    fn name(&self) -> &str {
        self.tool.name()
    }
    fn description(&self) -> &str {
        self.tool.description()
    }
    fn parameters(&self) -> Value {
        self.tool.parameters()
    }
    fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let result = self.tool.execute(args, ctx);
        let reported = result
            .as_ref()
            .map(|o| o.to_text())
            .map_err(|e| e.0.clone());
        let _ = self.results.send(reported);
        result
    }
}

#[test]
fn a_client_that_leaves_mid_call_gives_the_call_an_error_result_and_serve_returns() {
    for (name, args) in [
        ("editor_read_file", json!({"path": "a.txt"})),
        (
            "editor_run_command",
            json!({"command": "sleep", "args": ["600"]}),
        ),
    ] {
        let (tx, rx) = crossbeam_channel::unbounded();
        let factory = move |session: &SessionInfo| -> Result<AgentBuilder, pagent::Error> {
            let model = Faux::default()
                .reply(FauxReply::tool_call(name, args.clone()))
                .otherwise(|_| FauxReply::text("done"));
            let mut builder = Agent::builder().provider(model);
            for tool in session.client_tools() {
                let results = tx.clone();
                builder = builder.tool(Reported { tool, results });
            }
            Ok(builder)
        };
        let mut client = Client::start(factory, acp::Options::new().ask_permission(|_| false));
        client.request(
            1,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": all()}),
        );
        client.recv();
        client.request(2, "session/new", json!({"cwd": CWD, "mcpServers": []}));
        let s = client.recv()["result"]["sessionId"]
            .as_str()
            .expect("an id")
            .to_owned();
        client.request(3, "session/prompt", prompt_of(&s, "go"));
        // Up to the request the client will never answer: the read, or the command's wait.
        loop {
            let m = client.recv();
            match m["method"].as_str() {
                Some("terminal/create") => client
                    .send(json!({"jsonrpc": "2.0", "id": m["id"], "result": {"terminalId": "t"}})),
                Some("fs/read_text_file" | "terminal/wait_for_exit") => break,
                _ => {}
            }
        }
        // The client leaves: `serve` returns, and the call got its one result.
        client.close().expect("a clean end");
        let got = rx.recv_timeout(PATIENCE).expect("the call ended");
        let why = got.expect_err("an error result");
        let method = if name == "editor_read_file" {
            "fs/read_text_file"
        } else {
            "terminal/wait_for_exit"
        };
        // Which comes first, the connection's end or the abort of every run, is a race.
        assert!(
            why == format!("the client is gone: {method} got no answer")
                || why == format!("cancelled: the run was aborted during {method}"),
            "{why}"
        );
        assert!(rx.try_recv().is_err(), "one result");
    }
}
