//! The ACP server (`pagent::acp`, feature `acp`): bad input on the stream, a client that
//! disappears, cancels and permissions driven from another thread over real pipes, and the
//! official TypeScript SDK's client driving the `acp_agent` example.
//!
//! The SDK test needs node and the pinned SDK: `.ci/acp.sh` installs it and prints the
//! `node_modules` directory, which the test reads from `PAGENT_ACP_NODE_PATH`:
//!
//! ```sh
//! PAGENT_ACP_NODE_PATH=$(.ci/acp.sh) cargo test --features acp --test acp -- --include-ignored
//! cargo test --features acp,mcp --test acp   # sessions with MCP servers: needs python3
//! ```

use std::io::{BufRead, BufReader, PipeReader, PipeWriter, Write};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use pagent::acp::{self, SessionInfo};
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, AgentBuilder, ToolOutput, tool};
use serde_json::{Value, json};

#[path = "acp/client_tools.rs"]
mod client_tools;
#[path = "acp/config.rs"]
mod config;
#[cfg(feature = "mcp")]
#[path = "acp/elicitation.rs"]
mod elicitation;
#[path = "acp/lifecycle.rs"]
mod lifecycle;
#[path = "acp/steering.rs"]
mod steering;
#[path = "acp/updates.rs"]
mod updates;

/// No answer of the server may take longer than this, however loaded the machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// A client on the far end of two pipes, with `serve` on a thread of its own.
struct Client {
    input: Option<PipeWriter>,
    lines: Receiver<Value>,
    served: JoinHandle<Result<(), pagent::Error>>,
    /// Whether `recv` returns `session_info_update`s (a session's title, sent with its first
    /// prompt): only the tests of updates (tests/acp/updates.rs) want them.
    titles: bool,
}

impl Client {
    fn start<F>(factory: F, options: acp::Options) -> Client
    where
        F: Fn(&SessionInfo) -> Result<AgentBuilder, pagent::Error> + Send + Sync + 'static,
    {
        let (input_reader, input) = std::io::pipe().expect("a pipe");
        let (output_reader, output) = std::io::pipe().expect("a pipe");
        let served = thread::spawn(move || {
            acp::serve(factory, BufReader::new(input_reader), output, options)
        });
        Client {
            input: Some(input),
            lines: read_lines(output_reader),
            served,
            titles: false,
        }
    }

    fn send_raw(&mut self, line: &str) {
        let input = self.input.as_mut().expect("input open");
        input.write_all(line.as_bytes()).expect("the server reads");
        input.write_all(b"\n").expect("the server reads");
    }

    fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string());
    }

    fn request(&mut self, id: u64, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }

    fn recv(&self) -> Value {
        loop {
            let m = self
                .lines
                .recv_timeout(PATIENCE)
                .expect("the server answers in time");
            if self.titles || m["params"]["update"]["sessionUpdate"] != "session_info_update" {
                return m;
            }
        }
    }

    /// Messages up to and including the response with `id`, chunks without their
    /// `messageId` (see [`without_message_id`]).
    fn until_response(&self, id: u64) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let m = without_message_id(self.recv());
            let done = m.get("method").is_none() && m["id"] == json!(id);
            seen.push(m);
            if done {
                return seen;
            }
        }
    }

    /// Sends a request the server answers as it reads it (`logout`, id `id`) and takes its
    /// answer: every line sent before it has been handled (a prompt for a running session
    /// is queued into the run), though the runs themselves may not have got to it.
    fn read_so_far(&mut self, id: u64) {
        self.request(id, "logout", json!({}));
        assert_eq!(
            self.recv(),
            json!({"jsonrpc": "2.0", "id": id, "result": {}})
        );
    }

    fn new_session(&mut self, id: u64) -> String {
        self.request(id, "session/new", json!({"cwd": "/tmp", "mcpServers": []}));
        let answer = self.recv();
        answer["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session id in {answer}"))
            .to_owned()
    }

    /// Closes the input and waits for `serve` to return.
    fn close(mut self) -> Result<(), pagent::Error> {
        drop(self.input.take());
        let deadline = Instant::now() + PATIENCE;
        while !self.served.is_finished() {
            assert!(Instant::now() < deadline, "serve did not return");
            thread::sleep(Duration::from_millis(5));
        }
        self.served.join().expect("serve does not panic")
    }
}

/// `m` without the `messageId` of its chunk, which must have one (`m<index>`): the tests of
/// updates (tests/acp/updates.rs) check the ids themselves.
fn without_message_id(mut m: Value) -> Value {
    let Some(update) = m.pointer_mut("/params/update") else {
        return m;
    };
    if update["sessionUpdate"]
        .as_str()
        .is_some_and(|u| u.ends_with("_chunk"))
    {
        let id = update
            .as_object_mut()
            .and_then(|u| u.remove("messageId"))
            .unwrap_or_else(|| panic!("a messageId in {update}"));
        assert!(id.as_str().is_some_and(|id| id.starts_with('m')), "{id}");
    }
    m
}

fn read_lines(output: PipeReader) -> Receiver<Value> {
    let (tx, rx) = crossbeam_channel::unbounded();
    thread::spawn(move || {
        for line in BufReader::new(output).lines() {
            let Ok(line) = line else { return };
            let value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("the server wrote a JSON line: {e}: {line}"));
            if tx.send(value).is_err() {
                return;
            }
        }
    });
    rx
}

/// A factory of agents on a scripted model that answers "hi".
fn hello(_: &SessionInfo) -> Result<AgentBuilder, pagent::Error> {
    Ok(Agent::builder().provider(Faux::default().otherwise(|_| FauxReply::text("hi"))))
}

/// What `session/load` and `session/resume` answer for a session with no models or modes:
/// the thinking level picker.
fn opened() -> Value {
    let levels: Vec<Value> = ["off", "minimal", "low", "medium", "high"]
        .iter()
        .map(|v| {
            let mut name = v.to_string();
            name[..1].make_ascii_uppercase();
            json!({"value": v, "name": name})
        })
        .collect();
    json!({"configOptions": [{"id": "thinking", "name": "Thinking", "category": "thought_level",
        "type": "select", "currentValue": "off", "options": levels}]})
}

fn error_code(m: &Value) -> i64 {
    m["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error in {m}"))
}

#[test]
fn garbage_lines_and_unknown_methods_get_errors_and_the_server_reads_on() {
    let mut client = Client::start(hello, acp::Options::new().max_line_len(300));
    client.send_raw("this is not json");
    let m = client.recv();
    assert_eq!(
        (m["id"].clone(), error_code(&m)),
        (Value::Null, acp::codes::PARSE_ERROR)
    );
    client.send_raw("[1, 2]");
    assert_eq!(error_code(&client.recv()), acp::codes::INVALID_REQUEST);
    client.send_raw(&format!("{{\"pad\": \"{}\"}}", "x".repeat(400)));
    assert_eq!(error_code(&client.recv()), acp::codes::INVALID_REQUEST);
    client.send(json!({"jsonrpc": "1.0", "id": 1, "method": "initialize"}));
    assert_eq!(error_code(&client.recv()), acp::codes::INVALID_REQUEST);
    client.request(2, "session/fly", json!({}));
    let m = client.recv();
    assert_eq!(
        (m["id"].clone(), error_code(&m)),
        (json!(2), acp::codes::METHOD_NOT_FOUND)
    );
    client.request(3, "initialize", json!({"protocolVersion": "one"}));
    assert_eq!(error_code(&client.recv()), acp::codes::INVALID_PARAMS);
    client.request(
        4,
        "session/prompt",
        json!({"sessionId": "nope", "prompt": []}),
    );
    assert_eq!(error_code(&client.recv()), acp::codes::RESOURCE_NOT_FOUND);
    let session = client.new_session(5);
    client.request(6, "session/prompt", json!({"sessionId": session, "prompt": [{"type": "image", "data": "", "mimeType": "image/png"}]}));
    assert_eq!(error_code(&client.recv()), acp::codes::INVALID_PARAMS);
    client.request(7, "session/new", json!({"cwd": "/tmp", "mcpServers": [{"name": "x", "command": "/bin/true", "args": [], "env": []}]}));
    // Without an MCP client every server is refused; with one, this one exits at once.
    let refused = if cfg!(feature = "mcp") {
        acp::codes::INTERNAL_ERROR
    } else {
        acp::codes::INVALID_PARAMS
    };
    assert_eq!(error_code(&client.recv()), refused);
    client.request(
        8,
        "session/load",
        json!({"sessionId": session, "cwd": "/tmp", "mcpServers": []}),
    );
    assert_eq!(error_code(&client.recv()), acp::codes::METHOD_NOT_FOUND);
    // Still serving: a prompt after all of that.
    client.request(
        9,
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}),
    );
    let seen = client.until_response(9);
    assert_eq!(
        seen,
        vec![
            json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}}}),
            json!({"jsonrpc": "2.0", "id": 9, "result": {"stopReason": "end_turn"}}),
        ]
    );
    client.close().expect("a clean end");
}

#[test]
fn initialize_answers_version_1_with_the_agents_capabilities_and_info() {
    let mut client = Client::start(
        hello,
        acp::Options::new()
            .agent_info("tester", "A tester", "9.9.9")
            .session_dir(std::env::temp_dir()),
    );
    // A client asking for a later version gets the one the agent speaks; so does one
    // asking for an earlier one.
    for (id, asked) in [(1, 7), (2, 0), (3, 1)] {
        client.request(
            id,
            "initialize",
            json!({"protocolVersion": asked, "clientCapabilities": {}}),
        );
        assert_eq!(
            client.recv(),
            json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": true,
                    "auth": {"logout": {}},
                    "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}},
                    "promptCapabilities": {"image": true, "audio": true, "embeddedContext": true},
                    "mcpCapabilities": {"http": cfg!(feature = "mcp"), "sse": false},
                },
                "agentInfo": {"name": "tester", "title": "A tester", "version": "9.9.9"},
                "authMethods": [],
                "_meta": {"steering": {"supported": true}},
            }})
        );
    }
    client.close().expect("a clean end");
}

/// A factory of agents whose model says what the last user message held.
fn describing(_: &SessionInfo) -> Result<AgentBuilder, pagent::Error> {
    let faux = Faux::default().otherwise(|request| {
        let last = request.messages.iter().rev().find_map(|m| match &**m {
            pagent::Message::User(u) => Some(u),
            _ => None,
        });
        let said: Vec<String> = last
            .map(|u| u.content.iter().map(describe).collect())
            .unwrap_or_default();
        FauxReply::text(said.join(" | "))
    });
    Ok(Agent::builder().provider(faux))
}

fn describe(part: &pagent::Part) -> String {
    match part {
        pagent::Part::Text { text } => format!("text {text:?}"),
        pagent::Part::Image(i) => match &i.source {
            pagent::Source::Inline { media_type, data } => {
                format!("image {media_type} {} bytes", data.len())
            }
            pagent::Source::Url { url } => format!("image {url}"),
            _ => "image?".into(),
        },
        pagent::Part::Document(d) => format!(
            "document {:?} {:?} {} bytes",
            d.name,
            d.source.media_type(),
            part.data().map_or(0, |b| b.len())
        ),
        pagent::Part::Audio(a) => format!("audio {:?}", a.source.media_type()),
        _ => "other".into(),
    }
}

#[test]
fn image_and_resource_prompts_reach_the_model_as_parts_and_replay_on_load() {
    let dir = std::env::temp_dir().join(format!("pagent-acp-parts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut client = Client::start(describing, acp::Options::new().session_dir(&dir));
    let session = client.new_session(1);
    let png = "iVBORw0KGgoAAAANSUhEUg==";
    client.request(
        2,
        "session/prompt",
        json!({"sessionId": session, "prompt": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "data": png, "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///work/r.pdf", "blob": "JVBERi0xLjc=", "mimeType": "application/pdf"}},
            {"type": "resource", "resource": {"uri": "file:///work/a.rs", "text": "fn a() {}"}},
        ]}),
    );
    let seen = client.until_response(2);
    let said: String = seen
        .iter()
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(
        said,
        "text \"What is this?\" | image image/png 16 bytes | document Some(\"r.pdf\") Some(\"application/pdf\") 8 bytes | text \"<context uri=\\\"file:///work/a.rs\\\">\\nfn a() {}\\n</context>\""
    );
    assert_eq!(seen.last().unwrap()["result"]["stopReason"], "end_turn");
    client.close().expect("a clean end");

    // The saved session replays the prompt's parts as the blocks they came in.
    let mut client = Client::start(describing, acp::Options::new().session_dir(&dir));
    client.request(
        3,
        "session/load",
        json!({"sessionId": session, "cwd": "/tmp", "mcpServers": []}),
    );
    let replayed: Vec<Value> = client
        .until_response(3)
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .map(|m| m["params"]["update"]["content"].clone())
        .collect();
    assert_eq!(
        replayed,
        vec![
            json!({"type": "text", "text": "What is this?"}),
            json!({"type": "image", "data": png, "mimeType": "image/png"}),
            json!({"type": "resource", "resource": {"uri": "pagent:document/r.pdf", "mimeType": "application/pdf", "blob": "JVBERi0xLjc="}}),
            json!({"type": "text", "text": "<context uri=\"file:///work/a.rs\">\nfn a() {}\n</context>"}),
        ]
    );
    client.close().expect("a clean end");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_that_disappears_mid_run_ends_serve_and_every_agent() {
    // One session waits for permission to run its tool, the other's model stalls for a
    // minute: both must end when the client goes. The model is shared: its first reply
    // (session 1's) calls the tool, every later one stalls.
    let model = Arc::new(
        Faux::default()
            .reply(FauxReply::tool_call("touch", json!({})))
            .otherwise(|_| {
                FauxReply::text("thinking about it").then_stall(Duration::from_secs(60))
            }),
    );
    let held = model.clone();
    let factory = move |_: &SessionInfo| {
        let touch = tool::typed(
            "touch",
            "Touches.",
            |_: serde_json::Map<String, Value>, _| Ok(ToolOutput::text("touched")),
        );
        Ok(Agent::builder().provider(held.clone()).tool(touch))
    };
    let mut client = Client::start(factory, acp::Options::new());
    let waiting = client.new_session(1);
    client.request(
        2,
        "session/prompt",
        json!({"sessionId": waiting, "prompt": [{"type": "text", "text": "touch it"}]}),
    );
    assert_eq!(
        client.recv()["params"]["update"]["sessionUpdate"],
        "tool_call"
    );
    assert_eq!(client.recv()["method"], "session/request_permission");
    let stalled = client.new_session(3);
    client.request(
        4,
        "session/prompt",
        json!({"sessionId": stalled, "prompt": [{"type": "text", "text": "go"}]}),
    );
    let first = client.recv();
    assert_eq!(
        (
            first["params"]["sessionId"].as_str(),
            first["params"]["update"]["sessionUpdate"].as_str()
        ),
        (Some(stalled.as_str()), Some("agent_message_chunk"))
    );
    let started = Instant::now();
    // `serve` returns only once every prompt's thread (threads of a scope) has ended.
    client.close().expect("a clean end");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the stalled run and the permission wait were ended"
    );
    // Every agent (and the run thread that held one) is gone: only this test holds the model.
    assert_eq!(Arc::strong_count(&model), 1);
}

#[test]
fn two_sessions_wait_for_permission_at_once_and_each_ends_on_its_own_answer() {
    let mut client = Client::start(touching, acp::Options::new());
    let first = client.new_session(1);
    let second = client.new_session(2);
    let touch_it = |session: &str| json!({"sessionId": session, "prompt": [{"type": "text", "text": "touch it"}]});
    // Both runs reach their permission request; neither is answered yet.
    let mut asks = Vec::new();
    for (id, session) in [(3, &first), (4, &second)] {
        client.request(id, "session/prompt", touch_it(session));
        let call = client.recv();
        assert_eq!(call["params"]["sessionId"], json!(session));
        assert_eq!(call["params"]["update"]["sessionUpdate"], "tool_call");
        let ask = client.recv();
        assert_eq!(
            (ask["method"].as_str(), ask["params"]["sessionId"].as_str()),
            (Some("session/request_permission"), Some(session.as_str()))
        );
        asks.push((
            ask["id"].clone(),
            call["params"]["update"]["toolCallId"].clone(),
        ));
    }
    let update = |session: &str, update: Value| {
        json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": session, "update": update}})
    };
    let text = |t: &str| json!([{"type": "content", "content": {"type": "text", "text": t}}]);
    let done = json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "done"}});
    // The second session is allowed and runs to its end while the first still waits.
    let (ask, call_id) = &asks[1];
    client.send(json!({"jsonrpc": "2.0", "id": ask, "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}));
    assert_eq!(
        client.until_response(4),
        vec![
            update(
                &second,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"})
            ),
            update(
                &second,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed",
                    "content": text("touched")})
            ),
            update(&second, done.clone()),
            json!({"jsonrpc": "2.0", "id": 4, "result": {"stopReason": "end_turn"}}),
        ]
    );
    // Then the first is rejected.
    let (ask, call_id) = &asks[0];
    client.send(json!({"jsonrpc": "2.0", "id": ask, "result": {"outcome": {"outcome": "selected", "optionId": "reject_once"}}}));
    assert_eq!(
        client.until_response(3),
        vec![
            update(
                &first,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "failed",
                    "content": text("blocked: the user rejected this call")})
            ),
            update(&first, done),
            json!({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}}),
        ]
    );
    client.close().expect("a clean end");
}

#[test]
fn a_prompt_sent_right_before_the_client_leaves_is_aborted_too() {
    let model = Arc::new(
        Faux::default().otherwise(|_| FauxReply::text("slow").then_stall(Duration::from_secs(60))),
    );
    let held = model.clone();
    let factory = move |_: &SessionInfo| Ok(Agent::builder().provider(held.clone()));
    for _ in 0..5 {
        let mut client = Client::start(factory.clone(), acp::Options::new());
        let session = client.new_session(1);
        client.request(
            2,
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
        );
        // No wait for the run to start: the input ends at once.
        let started = Instant::now();
        client.close().expect("a clean end");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the run was aborted"
        );
    }
    drop(factory);
    assert_eq!(Arc::strong_count(&model), 1);
}

#[test]
fn a_client_whose_output_closed_ends_serve_without_an_error() {
    let (input_reader, mut input) = std::io::pipe().expect("a pipe");
    let (output_reader, output) = std::io::pipe().expect("a pipe");
    drop(output_reader);
    let served = thread::spawn(move || {
        acp::serve(
            hello,
            BufReader::new(input_reader),
            output,
            acp::Options::new(),
        )
    });
    writeln!(
        input,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":1}}}}"#
    )
    .expect("the server reads");
    drop(input);
    served
        .join()
        .expect("no panic")
        .expect("a broken pipe is the client leaving");
}

/// A factory of agents whose model calls `touch` (which needs permission), then answers
/// "done".
fn touching(_: &SessionInfo) -> Result<AgentBuilder, pagent::Error> {
    let touch = tool::typed(
        "touch",
        "Touches.",
        |_: serde_json::Map<String, Value>, _| Ok(ToolOutput::text("touched")),
    );
    Ok(Agent::builder()
        .provider(
            Faux::default()
                .reply(FauxReply::tool_call("touch", json!({})))
                .otherwise(|_| FauxReply::text("done")),
        )
        .tool(touch))
}

/// A session of [`touching`] whose prompt (id 2) has reached its `tool_call` (returned).
fn touching_prompt() -> (Client, String, Value) {
    let mut client = Client::start(touching, acp::Options::new());
    let session = client.new_session(1);
    client.request(
        2,
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "touch it"}]}),
    );
    let call = client.recv();
    assert_eq!(call["params"]["update"]["sessionUpdate"], "tool_call");
    (client, session, call)
}

/// The prompt with id 2 ends `cancelled`, its call failed without running; `given_up` is
/// the `$/cancel_request` of a permission request the agent gave up.
fn assert_ended_cancelled_before_the_tool_ran(
    client: &Client,
    session: &str,
    call_id: &Value,
    given_up: Option<Value>,
) {
    let seen = client.until_response(2);
    let given_up = given_up.map(
        |id| json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": id}}),
    );
    assert_eq!(
        seen,
        given_up.into_iter().chain([
            json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": {
                "sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "failed",
                "content": [{"type": "content", "content": {"type": "text", "text": "cancelled: the run was aborted before this tool call ran"}}]}}}),
            json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "cancelled"}}),
        ]).collect::<Vec<_>>()
    );
}

/// The session's next prompt (id 3) runs as usual; then the client ends.
fn prompt_again_ends_the_turn(mut client: Client, session: &str) {
    client.request(
        3,
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "again"}]}),
    );
    let last = client.until_response(3);
    assert_eq!(
        last.last().expect("a response")["result"]["stopReason"],
        "end_turn"
    );
    client.close().expect("a clean end");
}

#[test]
fn cancel_releases_a_permission_request_and_the_prompt_answers_cancelled() {
    let (mut client, session, call) = touching_prompt();
    let ask = client.recv();
    assert_eq!(ask["method"], "session/request_permission");
    let call_id = call["params"]["update"]["toolCallId"].clone();
    assert_eq!(ask["params"]["toolCall"]["toolCallId"], call_id);
    // Cancel from the client, without answering the permission request.
    client.send(
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}),
    );
    assert_ended_cancelled_before_the_tool_ran(
        &client,
        &session,
        &call_id,
        Some(ask["id"].clone()),
    );
    // A late answer to the released request is ignored, and the session prompts again.
    client.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}));
    prompt_again_ends_the_turn(client, &session);
}

#[test]
fn a_cancelled_permission_outcome_ends_the_prompt_cancelled() {
    // The client answers `cancelled` (it cancelled the turn) before any `session/cancel`
    // reaches the agent: the run ends there, without another model call ("done").
    let (mut client, session, call) = touching_prompt();
    let call_id = call["params"]["update"]["toolCallId"].clone();
    let ask = client.recv();
    assert_eq!(ask["method"], "session/request_permission");
    client.send(
        json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "cancelled"}}}),
    );
    assert_ended_cancelled_before_the_tool_ran(&client, &session, &call_id, None);
    // The next prompt of the session runs as usual: the cancel ended only that turn.
    prompt_again_ends_the_turn(client, &session);
}

#[test]
fn a_cancel_right_behind_its_prompt_always_ends_that_prompt_cancelled() {
    // Both lines in one write. The cancel used to reach the agent before the prompt's
    // thread had claimed it, and the turn ran on to `end_turn`. The model waits (abortably)
    // before it answers, so that no turn can end before its cancel is read.
    let slow = |_: &SessionInfo| {
        Ok(Agent::builder().provider(
            Faux::default().otherwise(|_| FauxReply::text("hi").delay(Duration::from_secs(5))),
        ))
    };
    let mut client = Client::start(slow, acp::Options::new());
    let session = client.new_session(1);
    let started = Instant::now();
    let mut rounds = 0;
    // Thousands of rounds (the cancel was lost in most tries); the time only bounds a slow
    // machine.
    for round in 0..2_000u64 {
        // The first thousand always run; the time only stops the rest on a slow machine.
        if round >= 1_000 && started.elapsed() > Duration::from_secs(20) {
            break;
        }
        let id = round + 2;
        let prompt = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}});
        let cancel = json!({"jsonrpc": "2.0", "method": "session/cancel",
            "params": {"sessionId": session}});
        client.send_raw(&format!("{prompt}\n{cancel}"));
        let seen = client.until_response(id);
        assert_eq!(
            seen.last(),
            Some(&json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": "cancelled"}})),
            "round {round}: {seen:?}"
        );
        rounds += 1;
    }
    assert!(rounds >= 1_000, "{rounds} rounds");
    client.close().expect("a clean end");
}

/// A factory of agents whose model streams "thinking", then waits (abortably) a minute.
fn stalling(_: &SessionInfo) -> Result<AgentBuilder, pagent::Error> {
    Ok(Agent::builder().provider(
        Faux::default()
            .otherwise(|_| FauxReply::text("thinking").then_stall(Duration::from_secs(60))),
    ))
}

fn prompt_of(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

fn cancel(client: &mut Client, session: &str) {
    client.send(
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}),
    );
}

#[test]
fn a_relative_cwd_is_refused() {
    let mut client = Client::start(hello, acp::Options::new());
    for (id, cwd) in [(1, "work/project"), (2, "."), (3, "")] {
        client.request(id, "session/new", json!({"cwd": cwd, "mcpServers": []}));
        let answer = client.recv();
        assert_eq!(
            error_code(&answer),
            acp::codes::INVALID_PARAMS,
            "{cwd:?}: {answer}"
        );
    }
    client.new_session(4);
    client.close().expect("a clean end");
}

#[test]
fn loading_a_session_whose_prompt_runs_is_refused_and_its_file_stays_whole() {
    // A load of a running session used to put a second writer on its file (the first one
    // without O_APPEND, writing over the second's lines) and abort the run.
    let dir = std::env::temp_dir().join(format!("pagent-acp-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let mut client = Client::start(stalling, acp::Options::new().session_dir(&dir));
    let session = client.new_session(1);
    client.request(2, "session/prompt", prompt_of(&session, "first"));
    assert_eq!(
        client.recv()["params"]["update"]["sessionUpdate"],
        "agent_message_chunk"
    );
    let load = json!({"sessionId": session, "cwd": "/tmp", "mcpServers": []});
    client.request(3, "session/load", load.clone());
    let refused = client.until_response(3).pop().unwrap();
    assert_eq!(
        (refused["id"].clone(), error_code(&refused)),
        (json!(3), acp::codes::INVALID_REQUEST),
        "{refused}"
    );
    // The running prompt was left alone: it ends on its cancel, as usual.
    cancel(&mut client, &session);
    let seen = client.until_response(2);
    assert_eq!(seen.last().unwrap()["result"]["stopReason"], "cancelled");
    // Idle now: the load replaces the session and replays its one turn.
    client.request(4, "session/load", load);
    let replay = client.until_response(4);
    assert_eq!(
        replay.last().unwrap(),
        &json!({"jsonrpc": "2.0", "id": 4, "result": opened()})
    );
    assert_eq!(
        replay[0]["params"]["update"],
        json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "first"}})
    );
    client.request(5, "session/prompt", prompt_of(&session, "second"));
    assert_eq!(
        client.recv()["params"]["update"]["sessionUpdate"],
        "agent_message_chunk"
    );
    cancel(&mut client, &session);
    client.until_response(5);
    client.close().expect("a clean end");
    // Every line is a whole message, in order: both turns, nothing torn or lost.
    let file = dir.join(format!("{session}.jsonl"));
    let text = std::fs::read_to_string(&file).expect("the session file");
    let roles: Vec<String> = text
        .lines()
        .map(|line| {
            let message: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("a torn line {line:?}: {e}"));
            message["role"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"], "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn past_the_cap_the_idle_session_used_longest_ago_is_dropped() {
    let mut client = Client::start(hello, acp::Options::new().max_sessions(2));
    let first = client.new_session(1);
    let second = client.new_session(2);
    // The first is used again, so the second is the one used longest ago.
    client.request(3, "session/prompt", prompt_of(&first, "hello"));
    client.until_response(3);
    let third = client.new_session(4);
    client.request(5, "session/prompt", prompt_of(&second, "hello"));
    let gone = client.recv();
    assert_eq!(error_code(&gone), acp::codes::RESOURCE_NOT_FOUND, "{gone}");
    for (id, session) in [(6, &first), (7, &third)] {
        client.request(id, "session/prompt", prompt_of(session, "hello"));
        let seen = client.until_response(id);
        assert_eq!(seen.last().unwrap()["result"]["stopReason"], "end_turn");
    }
    client.close().expect("a clean end");
}

#[test]
fn past_the_cap_with_every_session_running_a_new_one_is_refused() {
    let mut client = Client::start(stalling, acp::Options::new().max_sessions(1));
    let only = client.new_session(1);
    client.request(2, "session/prompt", prompt_of(&only, "go"));
    client.recv();
    client.request(3, "session/new", json!({"cwd": "/tmp", "mcpServers": []}));
    let refused = client.until_response(3).pop().unwrap();
    assert_eq!(
        error_code(&refused),
        acp::codes::INTERNAL_ERROR,
        "{refused}"
    );
    cancel(&mut client, &only);
    client.until_response(2);
    // Idle now: it makes room for the next.
    client.new_session(4);
    client.close().expect("a clean end");
}

#[test]
fn a_client_that_reads_nothing_has_its_connection_closed_and_serve_returns_timed_out() {
    // The model streams without end; the client never reads its output. The run used to
    // block in a write for good, and `serve` with it.
    let endless = |_: &SessionInfo| {
        Ok(Agent::builder().provider(
            Faux::default()
                .otherwise(|_| FauxReply::text("x".repeat(1 << 20)))
                .chunk_chars(16),
        ))
    };
    let (input_reader, mut input) = std::io::pipe().expect("a pipe");
    let (output_reader, output) = std::io::pipe().expect("a pipe");
    let options = acp::Options::new()
        .max_unread_bytes(64 * 1024)
        .stall_timeout(Duration::from_millis(300));
    let served =
        thread::spawn(move || acp::serve(endless, BufReader::new(input_reader), output, options));
    writeln!(input, r#"{{"jsonrpc":"2.0","id":1,"method":"session/new","params":{{"cwd":"/tmp","mcpServers":[]}}}}"#).unwrap();
    // Read the answer (only it), to know the session id.
    let mut reader = BufReader::new(output_reader);
    let mut line = String::new();
    reader.read_line(&mut line).expect("the answer");
    let answer: Value = serde_json::from_str(&line).expect("JSON");
    let session = answer["result"]["sessionId"]
        .as_str()
        .expect("an id")
        .to_owned();
    let prompt = json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt_of(&session, "go")});
    writeln!(input, "{prompt}").unwrap();
    // Nothing more is read: the pipe, then the queue, fill; the connection is closed.
    // The input stays open for as long as a loaded machine may take to fill both (a fixed
    // two seconds were not always enough, and an input closed first ends `serve` cleanly).
    let deadline = Instant::now() + PATIENCE;
    let filled = Instant::now() + Duration::from_secs(10);
    while !served.is_finished() && Instant::now() < filled {
        thread::sleep(Duration::from_millis(10));
    }
    drop(input);
    while !served.is_finished() {
        assert!(
            Instant::now() < deadline,
            "serve did not return: a run blocked in a write"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let error = served
        .join()
        .expect("no panic")
        .expect_err("the client stopped reading");
    assert_eq!(
        error.io_kind(),
        Some(std::io::ErrorKind::TimedOut),
        "{error}"
    );
    drop(reader);
}

/// The example's binary, built with the feature (a no-op when it is up to date).
fn acp_agent() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--features",
            "acp",
            "--example",
            "acp_agent",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build --example acp_agent failed");
    let exe = std::env::current_exe().expect("the test binary has a path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join("acp_agent")
        .with_extension(std::env::consts::EXE_EXTENSION)
}

/// What the SDK's client receives, driving the example (tests/acp/client.mjs prints it).
const EXPECTED: &str = include_str!("acp/expected.txt");

#[test]
#[ignore = "needs node and the pinned SDK: PAGENT_ACP_NODE_PATH=$(.ci/acp.sh)"]
fn the_official_sdk_client_drives_the_example_agent() {
    let node_modules = std::env::var("PAGENT_ACP_NODE_PATH")
        .expect("PAGENT_ACP_NODE_PATH: the node_modules dir .ci/acp.sh prints");
    let agent = acp_agent();
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/acp/client.mjs");
    let mut child = Command::new("node")
        .arg(client)
        .arg(&agent)
        .env("PAGENT_ACP_NODE_PATH", node_modules)
        // The example talks to a real server when the environment names one.
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("PAGENT_MODEL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node starts");
    // The client gives up by itself after 60 s; this bound only guards against node hanging.
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("waits").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the SDK client hung");
        }
        thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stderr}");
    assert!(
        output.status.success(),
        "the client failed:\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.trim_end(), EXPECTED.trim_end());
}

/// Sessions with the MCP servers their client lists (features `acp` and `mcp`), on the fake
/// stdio server of tests/mcp (python3's standard library only).
#[cfg(feature = "mcp")]
mod mcp_servers {
    use std::path::{Path, PathBuf};

    use super::*;

    /// A stdio entry of `mcpServers` for the fake server, and the file it writes its pid to.
    fn fake_server(name: &str) -> (Value, PathBuf) {
        let pidfile =
            std::env::temp_dir().join(format!("pagent-acp-mcp-{name}-{}.pid", std::process::id()));
        let _ = std::fs::remove_file(&pidfile);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fake_server.py");
        let entry = json!({"name": name, "command": "python3",
            "args": [script.display().to_string(), "ok", pidfile.display().to_string()],
            "env": [{"name": "PAGENT_TEST", "value": "1"}]});
        (entry, pidfile)
    }

    fn pid_in(pidfile: &Path) -> u32 {
        let text = std::fs::read_to_string(pidfile).expect("the server wrote its pid");
        text.trim().parse().expect("a pid")
    }

    /// True once the process with this pid no longer exists (it exited and was reaped).
    fn gone(pid: u32) -> bool {
        if !Path::new("/proc/self").exists() {
            return true; // No procfs to look in: nothing to check on this system.
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return true;
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Agents on a model that calls the fake server's `echo`, then answers "ok".
    fn echoing(_: &SessionInfo) -> Result<AgentBuilder, pagent::Error> {
        Ok(Agent::builder().provider(
            Faux::default()
                .reply(FauxReply::tool_call("echo", json!({"text": "from mcp"})))
                .otherwise(|_| FauxReply::text("ok")),
        ))
    }

    fn update(session: &str, update: Value) -> Value {
        json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": session, "update": update}})
    }

    /// A stdio entry of `mcpServers` for tests/acp/mcp_server.py in `mode`, listing `tools`.
    fn test_server(name: &str, mode: &str, tools: &[&str]) -> Value {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp/mcp_server.py");
        let mut args = vec![script.display().to_string(), mode.to_owned()];
        args.extend(tools.iter().map(|t| (*t).to_owned()));
        json!({"name": name, "command": "python3", "args": args, "env": []})
    }

    /// Agents on a model that calls `tool` with `{}`, then answers "ok".
    fn calling(
        tool: &'static str,
    ) -> impl Fn(&SessionInfo) -> Result<AgentBuilder, pagent::Error> + Clone {
        move |_: &SessionInfo| {
            Ok(Agent::builder().provider(
                Faux::default()
                    .reply(FauxReply::tool_call(tool, json!({})))
                    .otherwise(|_| FauxReply::text("ok")),
            ))
        }
    }

    /// The session id of a `session/new` answer.
    fn session_of(answer: &Value) -> String {
        answer["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session id in {answer}"))
            .to_owned()
    }

    #[test]
    fn a_server_that_never_lists_its_tools_holds_up_no_other_session() {
        // `session/new` used to connect its servers on the reading thread: nothing else was
        // read until `tools/list` timed out (120 s, where the docs said 30).
        let options = acp::Options::new().mcp_timeout(Duration::from_secs(2));
        let mut client = Client::start(stalling, options);
        let other = client.new_session(1);
        let started = Instant::now();
        client.request(
            2,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [test_server("mute", "stall-list", &["echo"])]}),
        );
        // Served meanwhile: another session's prompt and its cancel.
        client.request(3, "session/prompt", prompt_of(&other, "go"));
        cancel(&mut client, &other);
        let mut seen = Vec::new();
        let mut refused = None;
        while refused.is_none() || !seen.iter().any(|m: &Value| m["id"] == 3) {
            let m = client.recv();
            if m["id"] == 2 {
                assert!(
                    seen.iter().any(|m: &Value| m["id"] == 3),
                    "the cancel was read only once the setup ended"
                );
                refused = Some(m);
            } else {
                seen.push(m);
            }
        }
        assert_eq!(
            seen.last().unwrap()["result"]["stopReason"],
            "cancelled",
            "{seen:?}"
        );
        let refused = refused.unwrap();
        assert_eq!(error_code(&refused), acp::codes::INTERNAL_ERROR);
        assert_eq!(
            refused["error"]["message"],
            "MCP server `mute` could not be connected: it did not list its tools within 2s"
        );
        assert!(started.elapsed() < Duration::from_secs(15));
        client.close().expect("a clean end");
    }

    #[test]
    fn two_servers_with_a_tool_of_one_name_get_their_names_as_prefixes() {
        // Two servers that both have `echo` used to make the session impossible ("two tools
        // are named echo").
        let options = acp::Options::new().ask_permission(|_| false);
        let mut client = Client::start(calling("second_echo"), options);
        let servers = [
            test_server("first", "ok", &["echo", "only_first"]),
            test_server("second", "ok", &["echo"]),
            test_server("third", "ok", &["unique"]),
        ];
        client.request(
            1,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": servers}),
        );
        let session = session_of(&client.recv());
        client.request(2, "session/prompt", prompt_of(&session, "echo it"));
        let seen = client.until_response(2);
        assert_eq!(
            seen[0]["params"]["update"]["title"], "second_echo",
            "{seen:?}"
        );
        assert_eq!(
            seen[2]["params"]["update"]["status"], "completed",
            "{seen:?}"
        );
        assert_eq!(seen.last().unwrap()["result"]["stopReason"], "end_turn");
        client.close().expect("a clean end");
        // A prefix the program gives a server is kept, and clears the clash.
        let options = acp::Options::new()
            .ask_permission(|_| false)
            .mcp_prefix("first", "f_");
        let mut client = Client::start(calling("echo"), options);
        let servers = [
            test_server("first", "ok", &["echo"]),
            test_server("second", "ok", &["echo"]),
        ];
        client.request(
            1,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": servers}),
        );
        let session = session_of(&client.recv());
        client.request(2, "session/prompt", prompt_of(&session, "echo it"));
        let seen = client.until_response(2);
        assert_eq!(
            seen[2]["params"]["update"]["status"], "completed",
            "{seen:?}"
        );
        client.close().expect("a clean end");
    }

    /// The environment the `env` tool of a listed server reports.
    fn environment_seen(options: acp::Options, entry: Value) -> serde_json::Map<String, Value> {
        let mut client = Client::start(calling("env"), options.ask_permission(|_| false));
        client.request(
            1,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [entry]}),
        );
        let session = session_of(&client.recv());
        client.request(2, "session/prompt", prompt_of(&session, "env"));
        let seen = client.until_response(2);
        client.close().expect("a clean end");
        let text = seen[2]["params"]["update"]["content"][0]["content"]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("the tool's text in {seen:?}"));
        serde_json::from_str(text).expect("the environment as JSON")
    }

    #[test]
    fn a_listed_stdio_server_gets_the_clients_env_and_the_allowed_few_never_ours() {
        // A listed server used to inherit this process's whole environment, API keys too.
        // Cargo sets `CARGO_MANIFEST_DIR` for this test: it stands for such a variable.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let mut entry = test_server("env", "ok", &["env"]);
        entry["env"] = json!([{"name": "FROM_CLIENT", "value": "yes"}, {"name": "HOME", "value": "/client/home"}]);
        let env = environment_seen(acp::Options::new(), entry.clone());
        assert_eq!(env.get("FROM_CLIENT"), Some(&json!("yes")));
        // The client's value wins over ours.
        assert_eq!(env.get("HOME"), Some(&json!("/client/home")));
        assert!(env.contains_key("PATH"), "{env:?}");
        // None of ours but the allowed few (a launcher such as pyenv's python3 shim, a bash
        // script, adds `PYENV_*` and bash's own `PWD`, `SHLVL`, `_` on the way).
        let launchers = ["PWD", "OLDPWD", "SHLVL", "_"];
        for (name, _) in std::env::vars() {
            let allowed = acp::PASSED_ENV.contains(&name.as_str())
                || name.starts_with("PYENV")
                || launchers.contains(&name.as_str());
            assert!(
                allowed || !env.contains_key(&name),
                "the server got our `{name}`"
            );
        }
        assert!(!env.contains_key("CARGO_MANIFEST_DIR"));
        // A program lets one more through.
        let env = environment_seen(acp::Options::new().pass_env("CARGO_MANIFEST_DIR"), entry);
        assert_eq!(
            env.get("CARGO_MANIFEST_DIR"),
            Some(&json!(env!("CARGO_MANIFEST_DIR")))
        );
    }

    #[test]
    fn a_plan_in_an_mcp_tool_result_is_no_plan_update() {
        // An MCP result with a `plan` member used to become an ACP plan update, as if the
        // agent planned it.
        let mut client = Client::start(
            calling("plan"),
            acp::Options::new().ask_permission(|_| false),
        );
        let entry = test_server("planner", "ok", &["plan"]);
        client.request(
            1,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [entry]}),
        );
        let session = session_of(&client.recv());
        client.request(2, "session/prompt", prompt_of(&session, "plan"));
        let seen = client.until_response(2);
        let kinds: Vec<&str> = seen
            .iter()
            .filter_map(|m| m["params"]["update"]["sessionUpdate"].as_str())
            .collect();
        assert_eq!(
            kinds,
            [
                "tool_call",
                "tool_call_update",
                "tool_call_update",
                "agent_message_chunk"
            ],
            "{seen:?}"
        );
        // The result is still shown whole, `plan` member and all.
        assert_eq!(
            seen[2]["params"]["update"]["rawOutput"]["plan"][0]["content"],
            "step one"
        );
        client.close().expect("a clean end");
    }

    /// Set in the environment of the run under strace.
    const TRACED: &str = "PAGENT_ACP_UNDER_STRACE";

    fn can_run(program: &str, args: &[&str]) -> bool {
        Command::new(program)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    #[test]
    fn every_session_end_signals_its_lingering_server_once() {
        // Every session end used to run the MCP shutdown twice (an explicit close, then the
        // client's drop): two `kill(-pgid, SIGTERM)`, the second to a group that might be
        // someone else's by then. The inner test runs in a pid namespace of its own under
        // strace, which logs every signal sent.
        let namespaces = can_run("unshare", &["--pid", "--fork", "--mount-proc", "true"]);
        let tracing = can_run("strace", &["-qq", "-e", "trace=none", "true"]);
        if !(namespaces && tracing) {
            let why = "needs `unshare --pid --fork --mount-proc` and `strace` (root)";
            assert!(std::env::var_os("CI").is_none(), "{why}");
            eprintln!("skipped: {why}");
            return;
        }
        let log = std::env::temp_dir().join(format!("pagent-acp-kills-{}", std::process::id()));
        let output = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "strace", "-f", "-qq"])
            .args(["-e", "trace=kill", "-e", "signal=none", "-o"])
            .arg(&log)
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "mcp_servers::inner_session_ends",
                "--include-ignored",
            ])
            .args(["--nocapture", "--test-threads", "1"])
            .env(TRACED, "1")
            .output()
            .expect("unshare runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the inner test: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let pid = |name: &str| -> u32 {
            let prefix = format!("pagent-test: {name} ");
            stdout
                .lines()
                .find_map(|l| {
                    l.find(&prefix)
                        .map(|i| l[i + prefix.len()..].trim().to_owned())
                })
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {stdout}"))
        };
        let (dropped, ended) = (pid("dropped"), pid("ended"));
        let kills = std::fs::read_to_string(&log).expect("the strace log");
        let signals: Vec<&str> = kills
            .lines()
            .filter_map(|line| {
                let call = &line[line.find("kill(")?..];
                let call = &call[..=call.find(')')?];
                call.contains(", SIG").then_some(call)
            })
            .collect();
        assert_eq!(
            signals,
            [
                format!("kill(-{dropped}, SIGTERM)"),
                format!("kill(-{ended}, SIGTERM)")
            ],
            "{kills}"
        );
        let _ = std::fs::remove_file(&log);
    }

    #[test]
    #[ignore = "run under strace by every_session_end_signals_its_lingering_server_once"]
    fn inner_session_ends() {
        assert!(
            std::env::var_os(TRACED).is_some(),
            "run by the outer test only"
        );
        let dir = std::env::temp_dir();
        let lingering = |name: &str| {
            let pidfile = dir.join(format!("pagent-acp-linger-{name}-{}", std::process::id()));
            let mut entry = test_server(name, "linger", &["echo"]);
            entry["env"] = json!([{"name": "PIDFILE", "value": pidfile.display().to_string()}]);
            (entry, pidfile)
        };
        let mut client = Client::start(echoing, acp::Options::new().max_sessions(1));
        // One session, dropped for the cap when the next one comes; the next one ends with
        // `serve`. Both servers stay up after their stdin closes: each needs its SIGTERM.
        let (entry, first) = lingering("dropped");
        client.request(
            1,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [entry]}),
        );
        session_of(&client.recv());
        let (entry, second) = lingering("ended");
        client.request(
            2,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [entry]}),
        );
        session_of(&client.recv());
        client.close().expect("a clean end");
        for (name, pidfile) in [("dropped", first), ("ended", second)] {
            let pid = pid_in(&pidfile);
            assert!(gone(pid), "the server {pid} outlived its session");
            println!("pagent-test: {name} {pid}");
            let _ = std::fs::remove_file(&pidfile);
        }
    }

    #[test]
    fn initialize_offers_http_mcp_servers_but_not_sse() {
        let mut client = Client::start(echoing, acp::Options::new());
        client.request(1, "initialize", json!({"protocolVersion": 1}));
        let answer = client.recv();
        assert_eq!(
            answer["result"]["agentCapabilities"]["mcpCapabilities"],
            json!({"http": true, "sse": false})
        );
        client.close().expect("a clean end");
    }

    #[test]
    fn a_listed_stdio_server_gives_its_tools_and_ends_with_the_session() {
        let (entry, pidfile) = fake_server("fake");
        let options = acp::Options::new().ask_permission(|_| false);
        let mut client = Client::start(echoing, options);
        client.request(
            1,
            "session/new",
            json!({"cwd": std::env::temp_dir(), "mcpServers": [entry]}),
        );
        let answer = client.recv();
        let session = answer["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session id in {answer}"))
            .to_owned();
        let pid = pid_in(&pidfile);
        client.request(
            2,
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "echo it"}]}),
        );
        let seen = client.until_response(2);
        let call_id = seen[0]["params"]["update"]["toolCallId"].clone();
        assert_eq!(
            seen,
            vec![
                update(
                    &session,
                    json!({"sessionUpdate": "tool_call", "toolCallId": call_id, "title": "echo",
                        "kind": "other", "status": "pending", "rawInput": {"text": "from mcp"}})
                ),
                update(
                    &session,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"})
                ),
                update(
                    &session,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed",
                        "content": [{"type": "content", "content": {"type": "text", "text": "from mcp"}}],
                        "rawOutput": {"content": [{"type": "text", "text": "from mcp"}]}})
                ),
                update(
                    &session,
                    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "ok"}})
                ),
                json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}),
            ]
        );
        client.close().expect("a clean end");
        assert!(gone(pid), "the MCP server {pid} outlived serve");
        let _ = std::fs::remove_file(&pidfile);
    }

    #[test]
    fn an_http_server_nobody_listens_on_refuses_the_session_naming_it() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
            listener.local_addr().expect("an address").port()
        };
        let mut client = Client::start(echoing, acp::Options::new());
        let web = json!({"type": "http", "name": "web", "url": format!("http://127.0.0.1:{port}/mcp"),
            "headers": [{"name": "authorization", "value": "Bearer x"}]});
        client.request(
            1,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [web]}),
        );
        let answer = client.recv();
        assert_eq!(error_code(&answer), acp::codes::INTERNAL_ERROR);
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("MCP server `web` could not be connected: "),
            "{message}"
        );
        client.new_session(2);
        client.close().expect("a clean end");
    }

    #[test]
    fn a_listed_server_that_does_not_start_refuses_the_session_and_the_next_one_works() {
        let options = acp::Options::new().ask_permission(|_| false);
        let mut client = Client::start(echoing, options);
        let missing = json!({"name": "ghost", "command": "/nonexistent/pagent-mcp-server",
            "args": [], "env": []});
        client.request(
            1,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [missing]}),
        );
        let answer = client.recv();
        assert_eq!(error_code(&answer), acp::codes::INTERNAL_ERROR);
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("MCP server `ghost` could not be connected: mcp server: "),
            "{message}"
        );
        // A server that started before the one that failed is ended with the refusal.
        let (entry, pidfile) = fake_server("first");
        let sse = json!({"type": "sse", "name": "events", "url": "http://127.0.0.1:1/sse", "headers": []});
        client.request(
            2,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [entry, sse]}),
        );
        let answer = client.recv();
        assert_eq!(
            answer["error"],
            json!({"code": acp::codes::INVALID_PARAMS,
                "message": "MCP server `events`: the SSE transport is not supported by this agent (stdio and http are)"})
        );
        assert!(!pidfile.exists(), "nothing starts when an entry is refused");
        let ghost = json!({"name": "ghost", "command": "/nonexistent/pagent-mcp-server"});
        client.request(
            3,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [entry, ghost]}),
        );
        assert_eq!(error_code(&client.recv()), acp::codes::INTERNAL_ERROR);
        assert!(
            gone(pid_in(&pidfile)),
            "the first server outlived the refusal"
        );
        // Still serving: a session with the fake server, and its prompt.
        let (entry, pidfile) = fake_server("second");
        client.request(
            4,
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [entry]}),
        );
        let answer = client.recv();
        let session = answer["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session id in {answer}"))
            .to_owned();
        client.request(
            5,
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "echo it"}]}),
        );
        let seen = client.until_response(5);
        assert_eq!(
            seen.last(),
            Some(&json!({"jsonrpc": "2.0", "id": 5, "result": {"stopReason": "end_turn"}}))
        );
        let pid = pid_in(&pidfile);
        client.close().expect("a clean end");
        assert!(gone(pid), "the MCP server {pid} outlived serve");
        let _ = std::fs::remove_file(&pidfile);
    }
}

/// Whether `params` of the agent's `method` validate against the pinned SDK's schema (its
/// definition with that `x-method`, for the `side` that serves it: `client` for a request
/// the client answers, `protocol` for `$/` notifications); `Err` with ajv's reasons.
fn schema_check(method: &str, side: &str, suffix: &str, params: &Value) -> Result<(), String> {
    let node_modules = std::env::var("PAGENT_ACP_NODE_PATH")
        .expect("PAGENT_ACP_NODE_PATH: the node_modules dir .ci/acp.sh prints");
    let script = r#"
const { createRequire } = require("node:module");
const path = require("node:path");
const fs = require("node:fs");
const nm = process.env.PAGENT_ACP_NODE_PATH;
const Ajv = createRequire(path.join(nm, "resolve.js"))("ajv/dist/2020").default;
const schema = JSON.parse(fs.readFileSync(path.join(nm, "@agentclientprotocol/sdk/schema/v1/schema.json"), "utf8"));
const ajv = new Ajv({ strict: false, validateFormats: false });
ajv.addSchema(schema, "acp");
const [method, side, suffix, value] = process.argv.slice(1);
const name = Object.entries(schema.$defs)
  .find(([n, d]) => d["x-method"] === method && d["x-side"] === side && n.endsWith(suffix))?.[0];
if (!name) { console.log(`no definition for ${method}`); process.exit(1); }
const v = ajv.getSchema(`acp#/$defs/${name}`);
if (!v(JSON.parse(value))) { console.log(`not a ${name}: ${ajv.errorsText(v.errors)}`); process.exit(1); }
"#;
    let out = Command::new("node")
        .args(["-e", script, method, side, suffix, &params.to_string()])
        .env("PAGENT_ACP_NODE_PATH", node_modules)
        .output()
        .expect("node runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
