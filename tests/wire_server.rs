//! The stdio agent server, end to end: `wire::serve` in-process over pipes, and the Python
//! client against the example binary.

mod common;

use std::io::{BufReader, Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use pagent::hooks::ToolDecision;
use pagent::llm::{Faux, FauxReply};
use pagent::wire::{self, ServeOptions, codes};
use pagent::{Agent, AgentBuilder, Error};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(10);

/// The read end of a pipe fed by the test.
struct PipeIn {
    rx: Receiver<Vec<u8>>,
    buf: Vec<u8>,
    pos: usize,
}

impl Read for PipeIn {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.buf.len() {
            match self.rx.recv() {
                Ok(bytes) => (self.buf, self.pos) = (bytes, 0),
                Err(_) => return Ok(0), // the test closed its end
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The write end of the server's output: complete lines go to the test.
struct PipeOut {
    tx: Sender<String>,
    pending: Vec<u8>,
}

impl Write for PipeOut {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(bytes);
        while let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=i).collect();
            let _ = self
                .tx
                .send(String::from_utf8(line).expect("the server writes UTF-8"));
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Client {
    input: Option<Sender<Vec<u8>>>,
    output: Receiver<String>,
    server: Option<JoinHandle<Result<(), Error>>>,
}

impl Client {
    fn start(builder: AgentBuilder, options: ServeOptions) -> Client {
        let (in_tx, in_rx) = crossbeam_channel::unbounded();
        let (out_tx, out_rx) = crossbeam_channel::unbounded();
        let server = std::thread::spawn(move || {
            let input = BufReader::new(PipeIn {
                rx: in_rx,
                buf: Vec::new(),
                pos: 0,
            });
            wire::serve(
                builder,
                input,
                PipeOut {
                    tx: out_tx,
                    pending: Vec::new(),
                },
                options,
            )
        });
        Client {
            input: Some(in_tx),
            output: out_rx,
            server: Some(server),
        }
    }

    fn send_raw(&self, line: &str) {
        self.input
            .as_ref()
            .unwrap()
            .send(format!("{line}\n").into_bytes())
            .unwrap();
    }

    fn request(&self, id: u64, method: &str, params: Value) {
        self.send_raw(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
    }

    fn next(&self) -> Value {
        match self.output.recv_timeout(PATIENCE) {
            Ok(line) => {
                assert!(
                    line.ends_with('\n') && !line[..line.len() - 1].contains('\n'),
                    "{line:?}"
                );
                serde_json::from_str(&line).unwrap()
            }
            Err(RecvTimeoutError::Timeout) => panic!("no line from the server in {PATIENCE:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the server closed its output"),
        }
    }

    /// Reads until the response to `id`; returns the lines before it and the response.
    fn until_response(&self, id: u64) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        for _ in 0..10_000 {
            let line = self.next();
            if line.get("method").is_none() && line["id"] == id {
                return (before, line);
            }
            before.push(line);
        }
        panic!("no response to {id} in 10000 lines");
    }

    /// Reads until a line with this method; returns it.
    fn until_method(&self, method: &str) -> Value {
        self.lines_until_method(method).pop().unwrap()
    }

    /// Reads until a line with this method; returns the lines read, that one last.
    fn lines_until_method(&self, method: &str) -> Vec<Value> {
        let mut lines = Vec::new();
        for _ in 0..10_000 {
            let line = self.next();
            let found = line["method"] == method;
            lines.push(line);
            if found {
                return lines;
            }
        }
        panic!("no {method} in 10000 lines");
    }

    /// Closes the server's input and waits (bounded) for `serve` to return.
    fn close(mut self) -> Result<(), Error> {
        self.input = None;
        let server = self.server.take().unwrap();
        for _ in 0..200 {
            if server.is_finished() {
                return server.join().unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("serve did not return after its input closed");
    }
}

/// One entry per line the server wrote: a notification's method (with the role, call or turn
/// it is about), a request's `request <method>`, a response's `response <id>`. A run of
/// `MessageUpdate`s is one entry holding its deltas joined: text as is, `[id:name]` for a
/// tool-call start followed by its argument fragments.
fn sequence(lines: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    let mut deltas: Option<String> = None;
    for line in lines {
        let p = &line["params"];
        if line["method"] == "MessageUpdate" {
            let acc = deltas.get_or_insert_with(String::new);
            let d = &p["delta"];
            match d["type"].as_str().unwrap() {
                "text_delta" => acc.push_str(d["text"].as_str().unwrap()),
                "tool_call_start" => {
                    let (id, name) = (d["id"].as_str().unwrap(), d["name"].as_str().unwrap());
                    acc.push_str(&format!("[{id}:{name}]"));
                }
                "tool_call_delta" => acc.push_str(d["arguments"].as_str().unwrap()),
                other => acc.push_str(&format!("<{other}>")),
            }
            continue;
        }
        if let Some(acc) = deltas.take() {
            out.push(format!("MessageUpdate*({acc})"));
        }
        let Some(method) = line["method"].as_str() else {
            out.push(format!("response {}", line["id"]));
            continue;
        };
        out.push(match method {
            _ if line.get("id").is_some() => format!("request {method}"),
            "TurnStart" | "TurnEnd" => format!("{method}({})", p["turn"]),
            "MessageStart" | "MessageEnd" => {
                format!("{method}({})", p["message"]["role"].as_str().unwrap())
            }
            "ToolStart" => format!("{method}({})", p["call"]["id"].as_str().unwrap()),
            "ToolExecute" => format!("{method}({})", p["call_id"].as_str().unwrap()),
            "ToolEnd" => format!(
                "{method}({})",
                p["result"]["tool_call_id"].as_str().unwrap()
            ),
            _ => method.to_owned(),
        });
    }
    if let Some(acc) = deltas.take() {
        out.push(format!("MessageUpdate*({acc})"));
    }
    out
}

/// The [`sequence`] of a prompted run up to its reply's `MessageStart`, then `rest`.
fn prompted(rest: &[&str]) -> Vec<String> {
    [
        "AgentStart",
        "TurnStart(1)",
        "MessageStart(user)",
        "MessageEnd(user)",
        "MessageStart(assistant)",
    ]
    .iter()
    .chain(rest)
    .map(|s| (*s).to_owned())
    .collect()
}

fn agent(faux: Faux) -> AgentBuilder {
    Agent::builder()
        .provider(faux)
        .model("faux-1")
        .tool(common::echo())
}

fn echo_then_answer() -> Faux {
    Faux::default()
        .reply(FauxReply::tool_call("echo", json!({"text": "ping"})))
        .reply_with(|r| {
            let users = r.messages.iter().filter(|m| m.role() == "user").count();
            FauxReply::text(format!("pong; user messages: {users}"))
        })
}

#[test]
fn initialize_reports_the_protocol() {
    let c = Client::start(
        agent(Faux::default()),
        ServeOptions::new().approve_tools(true),
    );
    c.request(1, "initialize", json!({}));
    let (_, r) = c.until_response(1);
    assert_eq!(r["result"]["protocol_version"], wire::PROTOCOL_VERSION);
    assert_eq!(r["result"]["capabilities"]["tool_approval"], true);
    assert_eq!(r["result"]["capabilities"]["events"], "native");
    c.close().unwrap();
}

#[test]
fn prompt_streams_events_then_answers_with_the_stop_reason() {
    let c = Client::start(agent(echo_then_answer()), ServeOptions::new());
    c.request(1, "prompt", json!({"text": "Say hello."}));
    let (events, r) = c.until_response(1);
    assert_eq!(r["result"]["stop_reason"], "no_tool_calls");
    assert_eq!(r["result"]["text"], "pong; user messages: 1");
    assert_eq!(
        sequence(&[&events[..], &[r]].concat()),
        prompted(&[
            r#"MessageUpdate*([call_1:echo]{"text":"ping"}<usage>)"#,
            "MessageEnd(assistant)",
            "ToolStart(call_1)",
            "ToolExecute(call_1)",
            "ToolEnd(call_1)",
            "MessageStart(tool_result)",
            "MessageEnd(tool_result)",
            "TurnEnd(1)",
            "TurnStart(2)",
            "MessageStart(assistant)",
            "MessageUpdate*(pong; user messages: 1<usage>)",
            "MessageEnd(assistant)",
            "TurnEnd(2)",
            "AgentEnd",
            "response 1",
        ])
    );
    // The notifications are native wire lines: a mirror rebuilds the run from them.
    let mut mirror = wire::Mirror::new();
    for e in &events {
        mirror.apply_line(&e.to_string()).unwrap();
    }
    assert_eq!(mirror.state().messages.len(), 4);
    assert_eq!(mirror.state().messages[3].text(), "pong; user messages: 1");
    c.request(2, "snapshot", json!({}));
    let (_, s) = c.until_response(2);
    assert_eq!(s["result"]["messages"].as_array().unwrap().len(), 4);
    assert_eq!(s["result"]["is_streaming"], false);
    assert_eq!(s["result"]["stop_reason"], "no_tool_calls");
    c.close().unwrap();
}

#[test]
fn approval_approve_runs_the_tool_and_reject_blocks_it() {
    for (answer, content, is_error) in [
        (json!({"decision": "approve"}), "ping", false),
        (
            json!({"decision": "reject", "reason": "too risky"}),
            "blocked: too risky",
            true,
        ),
    ] {
        let c = Client::start(
            agent(echo_then_answer()),
            ServeOptions::new().approve_tools(true),
        );
        c.request(1, "prompt", json!({"text": "Say hello."}));
        let ask = c.until_method("approve_tool_call");
        assert_eq!(ask["params"]["call"]["name"], "echo");
        assert_eq!(ask["params"]["call"]["arguments"], r#"{"text":"ping"}"#);
        c.send_raw(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}).to_string());
        let end = c.until_method("ToolEnd");
        assert_eq!(end["params"]["result"]["content"], content);
        assert_eq!(end["params"]["result"]["is_error"], is_error);
        let (_, r) = c.until_response(1);
        assert_eq!(r["result"]["stop_reason"], "no_tool_calls");
        c.close().unwrap();
    }
}

#[test]
fn approval_asks_the_users_own_hook_first_then_the_client() {
    // The user's hook blocks one call and rewrites another; only the calls it lets run reach
    // the client, with the arguments that would run.
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("echo", json!({"text": "secret"}))
                .then_tool_call("echo", json!({"text": "draft"}))
                .then_tool_call("echo", json!({"text": "ping"})),
        )
        .reply(FauxReply::text("done"));
    let builder = agent(faux)
        .max_parallel_tools(1)
        .before_tool_call(|request| match request.args["text"].as_str() {
            Some("secret") => ToolDecision::Block("not this one".into()),
            Some("draft") => ToolDecision::Rewrite(json!({"text": "final"})),
            _ => ToolDecision::Allow,
        });
    let c = Client::start(builder, ServeOptions::new().approve_tools(true));
    c.request(1, "prompt", json!({"text": "Go."}));
    let (mut asked, mut seen) = (Vec::new(), Vec::new());
    for answer in [
        json!({"decision": "approve"}),
        json!({"decision": "reject", "reason": "no"}),
    ] {
        let mut lines = c.lines_until_method("approve_tool_call");
        let ask = lines.pop().unwrap();
        seen.extend(lines);
        asked.push(ask["params"]["call"]["arguments"].clone());
        c.send_raw(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}).to_string());
    }
    assert_eq!(asked, [r#"{"text":"final"}"#, r#"{"text":"ping"}"#]);
    let (before, r) = c.until_response(1);
    assert_eq!(r["result"]["stop_reason"], "no_tool_calls");
    assert!(!before.iter().any(|l| l["method"] == "approve_tool_call"));
    seen.extend(before);
    let results: Vec<(Value, Value)> = seen
        .iter()
        .filter(|l| l["method"] == "ToolEnd")
        .map(|l| {
            let result = &l["params"]["result"];
            (result["content"].clone(), result["is_error"].clone())
        })
        .collect();
    assert_eq!(
        results,
        [
            (json!("blocked: not this one"), json!(true)),
            (json!("final"), json!(false)),
            (json!("blocked: no"), json!(true)),
        ]
    );
    c.close().unwrap();
}

#[test]
fn steer_during_a_run_reaches_the_next_model_call() {
    // The approval request holds the run inside its tool batch while the client steers.
    let c = Client::start(
        agent(echo_then_answer()),
        ServeOptions::new().approve_tools(true),
    );
    c.request(1, "prompt", json!({"text": "Say hello."}));
    let ask = c.until_method("approve_tool_call");
    c.request(2, "steer", json!({"text": "Also say goodbye."}));
    let (_, r) = c.until_response(2);
    assert_eq!(r["result"]["queued"], true);
    c.request(3, "snapshot", json!({}));
    let (_, s) = c.until_response(3);
    assert_eq!(
        s["result"]["steering_queue"][0]["content"],
        "Also say goodbye."
    );
    c.send_raw(
        &json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"decision": "approve"}}).to_string(),
    );
    let (_, r) = c.until_response(1);
    assert_eq!(r["result"]["text"], "pong; user messages: 2");
    c.close().unwrap();
}

#[test]
fn abort_ends_a_stalled_run_as_cancelled() {
    // One chunk: the whole text is streamed before the abort can land.
    let faux = Faux::default()
        .chunk_chars(64)
        .reply(FauxReply::text("thinking...").then_stall(Duration::from_secs(30)));
    let c = Client::start(agent(faux), ServeOptions::new());
    c.request(1, "prompt", json!({"text": "Say hello."}));
    let before = c.lines_until_method("MessageUpdate");
    c.request(2, "abort", json!({}));
    let (mut events, r) = c.until_response(1);
    assert_eq!(r["result"]["stop_reason"], "cancelled");
    // The abort is answered at once, the prompt when its run has ended: either may come first.
    let a = match events.iter().position(|l| l["id"] == 2) {
        Some(i) => events.remove(i),
        None => c.until_response(2).1,
    };
    assert_eq!(a["result"]["aborted"], true);
    assert_eq!(
        sequence(&[&before[..], &events[..], &[r]].concat()),
        prompted(&[
            "MessageUpdate*(thinking...)",
            "MessageEnd(assistant)",
            "TurnEnd(1)",
            "AgentEnd",
            "response 1",
        ])
    );
    c.request(3, "abort", json!({}));
    assert_eq!(c.until_response(3).1["result"]["aborted"], false);
    c.close().unwrap();
}

#[test]
fn an_abort_right_behind_its_prompt_always_cancels_that_run() {
    // Both lines in one write. The abort used to reach the agent before the run claimed
    // it, answer `aborted: false`, and let the run go on to its answer. The model waits
    // (abortably) before it answers, so that no run can end before its abort is read.
    let faux = Faux::default().otherwise(|_| FauxReply::text("ok").delay(Duration::from_secs(5)));
    let c = Client::start(agent(faux), ServeOptions::new());
    let started = std::time::Instant::now();
    let mut rounds = 0;
    // Thousands of rounds (the abort was lost in most tries); the time only bounds a slow
    // machine.
    for round in 0..2_000u64 {
        // The first thousand always run; the time only stops the rest on a slow machine.
        if round >= 1_000 && started.elapsed() > Duration::from_secs(20) {
            break;
        }
        let (prompt, abort) = (2 * round + 1, 2 * round + 2);
        let line = |id: u64, method: &str, params: Value| {
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
        };
        c.send_raw(&format!(
            "{}\n{}",
            line(prompt, "prompt", json!({"text": "go"})),
            line(abort, "abort", json!({}))
        ));
        let (mut lines, answer) = c.until_response(prompt);
        let aborted = match lines.iter().position(|l| l["id"] == abort) {
            Some(i) => lines.remove(i),
            None => c.until_response(abort).1,
        };
        assert_eq!(aborted["result"], json!({"aborted": true}), "round {round}");
        assert_eq!(
            answer["result"]["stop_reason"], "cancelled",
            "round {round}: {answer}"
        );
        let end = lines
            .iter()
            .find(|l| l["method"] == "AgentEnd")
            .expect("an AgentEnd");
        assert_eq!(end["params"]["stop_reason"], "cancelled", "round {round}");
        rounds += 1;
    }
    assert!(rounds >= 1_000, "{rounds} rounds");
    c.close().unwrap();
}

#[test]
fn a_client_that_reads_nothing_has_its_connection_closed_and_serve_returns_timed_out() {
    // The model streams without end and the client never reads: the run used to block in
    // a write for good, and `serve` with it, even once the client closed its input.
    let faux = Faux::default()
        .chunk_chars(16)
        .otherwise(|_| FauxReply::text("x".repeat(1 << 20)));
    let (output_reader, output) = std::io::pipe().unwrap();
    let (in_tx, in_rx) = crossbeam_channel::unbounded();
    let options = ServeOptions::new()
        .max_unread_bytes(64 * 1024)
        .stall_timeout(Duration::from_millis(300));
    let server = std::thread::spawn(move || {
        let input = BufReader::new(PipeIn {
            rx: in_rx,
            buf: Vec::new(),
            pos: 0,
        });
        wire::serve(agent(faux), input, output, options)
    });
    let prompt = json!({"jsonrpc": "2.0", "id": 1, "method": "prompt", "params": {"text": "go"}});
    in_tx.send(format!("{prompt}\n").into_bytes()).unwrap();
    // The input stays open for as long as a loaded machine may take to fill the pipe and the
    // queue (a fixed two seconds were not always enough, and an input closed first ends
    // `serve` cleanly).
    let filled = std::time::Instant::now() + Duration::from_secs(10);
    while !server.is_finished() && std::time::Instant::now() < filled {
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(in_tx);
    let deadline = std::time::Instant::now() + PATIENCE;
    while !server.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "serve did not return: the run blocked in a write"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let error = server
        .join()
        .unwrap()
        .expect_err("the client stopped reading");
    assert_eq!(
        error.io_kind(),
        Some(std::io::ErrorKind::TimedOut),
        "{error}"
    );
    drop(output_reader);
}

#[test]
fn abort_releases_a_pending_approval() {
    let c = Client::start(
        agent(echo_then_answer()),
        ServeOptions::new().approve_tools(true),
    );
    c.request(1, "prompt", json!({"text": "Say hello."}));
    c.until_method("approve_tool_call");
    c.request(2, "abort", json!({}));
    let end = c.until_method("ToolEnd");
    assert_eq!(end["params"]["result"]["is_error"], true);
    let (_, r) = c.until_response(1);
    assert_eq!(r["result"]["stop_reason"], "cancelled");
    c.close().unwrap();
}

#[test]
fn prompt_while_busy_is_refused_with_the_documented_code() {
    let faux = Faux::default().reply(FauxReply::text("slow").delay(Duration::from_secs(30)));
    let c = Client::start(agent(faux), ServeOptions::new());
    c.request(1, "prompt", json!({"text": "first"}));
    c.until_method("AgentStart");
    c.request(2, "prompt", json!({"text": "second"}));
    let (_, r) = c.until_response(2);
    assert_eq!(r["error"]["code"], codes::RUN_ACTIVE);
    assert_eq!(r["error"]["message"], "a run is already active");
    c.request(3, "abort", json!({}));
    assert_eq!(c.until_response(1).1["result"]["stop_reason"], "cancelled");
    c.close().unwrap();
}

#[test]
fn malformed_lines_get_errors_and_the_server_reads_on() {
    let c = Client::start(
        agent(Faux::default().reply(FauxReply::text("still here"))),
        ServeOptions::new().max_line_len(4096),
    );
    let error = |c: &Client| {
        let e = c.next();
        (
            e["id"].clone(),
            e["error"]["code"].as_i64().unwrap(),
            e["error"]["message"].as_str().unwrap().to_owned(),
        )
    };
    c.send_raw("this is not json");
    assert_eq!(error(&c).1, codes::PARSE_ERROR);
    c.send_raw(r#"{"jsonrpc":"2.0","id":1,"method":"prompt""#);
    let (id, code, _) = error(&c);
    assert_eq!((id, code), (Value::Null, codes::PARSE_ERROR));
    c.send_raw("[1,2,3]");
    assert_eq!(
        error(&c),
        (
            Value::Null,
            codes::INVALID_REQUEST,
            "the line is not a JSON object".to_owned()
        )
    );
    c.send_raw(r#"{"jsonrpc":"1.0","id":2,"method":"initialize"}"#);
    assert_eq!(
        error(&c),
        (
            json!(2),
            codes::INVALID_REQUEST,
            r#"`jsonrpc` is "1.0", not "2.0""#.to_owned()
        )
    );
    c.send_raw(r#"{"jsonrpc":"2.0","id":3,"method":7}"#);
    assert_eq!(error(&c).1, codes::INVALID_REQUEST);
    c.send_raw(r#"{"jsonrpc":"2.0","id":3}"#);
    assert_eq!(
        error(&c),
        (
            json!(3),
            codes::INVALID_REQUEST,
            "`method` must be a string".to_owned()
        )
    );
    c.request(4, "dance", json!({}));
    let (id, code, why) = error(&c);
    assert_eq!((id, code), (json!(4), codes::METHOD_NOT_FOUND));
    assert!(why.contains("`dance`"), "{why}");
    c.request(5, "prompt", json!({"txt": "typo"}));
    assert_eq!(
        error(&c),
        (
            json!(5),
            codes::INVALID_PARAMS,
            "prompt needs params {\"text\": string} or {\"content\": parts}".to_owned()
        )
    );
    c.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"steer","params":{{"text":"{}"}}}}"#,
        "x".repeat(5000)
    ));
    let (id, code, why) = error(&c);
    assert_eq!((id, code), (Value::Null, codes::INVALID_REQUEST));
    assert!(why.contains("over the limit of 4096 bytes"), "{why}");
    c.input
        .as_ref()
        .unwrap()
        .send(vec![0xff, 0xfe, b'\n'])
        .unwrap();
    assert_eq!(error(&c).1, codes::PARSE_ERROR);
    // A notification (no id) is never answered, even when it fails.
    c.send_raw(r#"{"jsonrpc":"2.0","method":"dance"}"#);
    c.send_raw("");
    c.request(7, "prompt", json!({"text": "Still there?"}));
    let (before, r) = c.until_response(7);
    assert!(
        before.iter().all(|l| l.get("error").is_none()),
        "{before:?}"
    );
    assert_eq!(r["result"]["text"], "still here");
    c.close().unwrap();
}

#[test]
fn closing_the_input_rejects_a_pending_approval_and_serve_returns() {
    let c = Client::start(
        agent(echo_then_answer()),
        ServeOptions::new().approve_tools(true),
    );
    c.request(1, "prompt", json!({"text": "Say hello."}));
    c.until_method("approve_tool_call");
    let output = c.output.clone();
    c.close().unwrap();
    let lines: Vec<Value> = output
        .try_iter()
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    let end = lines
        .iter()
        .find(|l| l["method"] == "ToolEnd")
        .expect("the call ended");
    assert!(
        end["params"]["result"]["content"]
            .as_str()
            .unwrap()
            .starts_with("blocked: no approval")
    );
    assert!(
        lines
            .iter()
            .any(|l| l["id"] == 1 && l["result"]["stop_reason"] == "no_tool_calls")
    );
}

/// The example binary, built if this test run did not build it.
fn example_binary() -> PathBuf {
    // target/<profile>/deps/wire_server-<hash> -> target/<profile>/examples/wire_server
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let binary = profile_dir
        .join("examples")
        .join(format!("wire_server{}", std::env::consts::EXE_SUFFIX));
    if !binary.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--example", "wire_server"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("runs cargo");
        assert!(status.success());
    }
    binary
}

#[test]
fn python_client_drives_the_example_server_through_an_approved_tool_call() {
    let python = std::env::var("PAGENT_WIRE_PYTHON").unwrap_or_else(|_| "python3".into());
    if Command::new(&python).arg("--version").output().is_err() {
        eprintln!("no {python}: skipping the Python client");
        return;
    }
    let binary = example_binary();
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wire_client.py");
    for extra in [&[][..], &["--reject", "not today"][..]] {
        let out = Command::new(&python)
            .arg(client)
            .args(extra)
            .arg(&binary)
            .arg("--ask")
            .output()
            .expect("runs the client");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("[approve? add("), "{stdout}");
        assert!(stdout.trim_end().ends_with("ok"), "{stdout}");
    }
}

/// An output that refuses every write.
struct Broken;

impl Write for Broken {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "the client is gone",
        ))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failing_output_is_returned_when_the_input_ends() {
    let input = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"snapshot"}"#,
        "\n"
    );
    let result = wire::serve(
        agent(Faux::default()),
        input.as_bytes(),
        Broken,
        ServeOptions::new(),
    );
    match result {
        Err(Error::Io { kind, message }) => {
            assert_eq!(kind, std::io::ErrorKind::BrokenPipe);
            assert!(message.contains("the client is gone"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn steering_past_the_queue_cap_is_refused_and_the_server_serves_on() {
    // With no run active nothing takes the queues: before the cap, a client could grow them
    // without bound.
    let faux = Faux::default().otherwise(|_| FauxReply::text("ok"));
    let c = Client::start(agent(faux), ServeOptions::new().max_queued(2));
    for (id, method) in [(1, "steer"), (2, "steer"), (3, "follow_up")] {
        c.request(id, method, json!({"text": format!("m{id}")}));
        assert_eq!(c.until_response(id).1["result"], json!({"queued": true}));
    }
    c.request(4, "steer", json!({"text": "m4"}));
    let (_, r) = c.until_response(4);
    assert_eq!(r["error"]["code"], codes::QUEUE_FULL);
    assert_eq!(
        r["error"]["message"],
        "the steering queue is full (2 of 2 messages, 4 of 16777216 bytes waiting): this \
         message of 2 bytes was not queued"
    );
    // The follow-up queue has a cap of its own, and still room.
    c.request(5, "follow_up", json!({"text": "m5"}));
    assert_eq!(c.until_response(5).1["result"], json!({"queued": true}));
    c.request(6, "follow_up", json!({"text": "m6"}));
    assert_eq!(c.until_response(6).1["error"]["code"], codes::QUEUE_FULL);
    c.request(7, "snapshot", json!({}));
    let (_, r) = c.until_response(7);
    let texts = |queue: &Value| -> Vec<String> {
        queue
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(texts(&r["result"]["steering_queue"]), ["m1", "m2"]);
    assert_eq!(texts(&r["result"]["follow_up_queue"]), ["m3", "m5"]);

    // A run takes them all; the queues then have room again.
    c.request(8, "prompt", json!({"text": "go"}));
    let (_, r) = c.until_response(8);
    assert_eq!(r["result"]["stop_reason"], "no_tool_calls");
    c.request(9, "steer", json!({"text": "m9"}));
    assert_eq!(c.until_response(9).1["result"], json!({"queued": true}));
    c.close().unwrap();
}

/// A prompt, a steering message and a follow-up may carry images and documents (the native
/// parts): the model gets them as parts, the snapshot lists them, and the byte cap counts
/// their bytes.
#[test]
fn prompts_and_steering_carry_images_as_parts() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("echo", json!({"text": "ping"})))
        .otherwise(|r| {
            let said: Vec<String> = r
                .messages
                .iter()
                .filter(|m| m.role() == "user")
                .flat_map(|m| m.parts().iter())
                .map(|p| match p {
                    pagent::Part::Text { text } => text.clone(),
                    p => format!("<{} bytes>", p.data().map_or(0, |d| d.len())),
                })
                .collect();
            FauxReply::text(said.join(" "))
        });
    let c = Client::start(agent(faux), ServeOptions::new().approve_tools(true));
    let png = "iVBORw0KGgoAAAANSUhEUg==";
    let image = json!({"type": "image", "source": {"type": "inline", "media_type": "image/png", "data": png}});
    c.request(
        1,
        "prompt",
        json!({"content": [{"type": "text", "text": "Look:"}, image]}),
    );
    let ask = c.until_method("approve_tool_call");
    c.request(
        2,
        "steer",
        json!({"content": [image, {"type": "text", "text": "and this"}]}),
    );
    assert_eq!(c.until_response(2).1["result"], json!({"queued": true}));
    c.request(3, "snapshot", json!({}));
    let (_, s) = c.until_response(3);
    assert_eq!(s["result"]["steering_queue"][0]["content"][0], image);
    c.send_raw(
        &json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"decision": "approve"}}).to_string(),
    );
    let (_, r) = c.until_response(1);
    assert_eq!(r["result"]["text"], "Look: <16 bytes> <16 bytes> and this");
    // Inline bytes count against the byte cap; an empty list and a bad part are refused.
    c.request(4, "follow_up", json!({"content": []}));
    assert_eq!(
        c.until_response(4).1["error"]["code"],
        codes::INVALID_PARAMS
    );
    c.request(5, "follow_up", json!({"content": [{"type": "image", "source": {"type": "inline", "media_type": "image/png", "data": "%%"}}]}));
    let (_, r) = c.until_response(5);
    assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid base64"),
        "{r}"
    );
    c.close().unwrap();
    let c = Client::start(
        agent(Faux::default()),
        ServeOptions::new().max_queued_bytes(20),
    );
    c.request(1, "follow_up", json!({"content": [image]}));
    assert_eq!(c.until_response(1).1["result"], json!({"queued": true}));
    c.request(2, "follow_up", json!({"content": [image]}));
    let (_, r) = c.until_response(2);
    assert_eq!(
        r["error"]["message"],
        "the follow-up queue is full (1 of 64 messages, 16 of 20 bytes waiting): this message \
         of 16 bytes was not queued"
    );
    c.close().unwrap();
}

#[test]
fn steering_past_the_byte_cap_is_refused() {
    let c = Client::start(
        agent(Faux::default()),
        ServeOptions::new().max_queued_bytes(10),
    );
    c.request(1, "steer", json!({"text": "12345678"}));
    assert_eq!(c.until_response(1).1["result"], json!({"queued": true}));
    c.request(2, "steer", json!({"text": "abc"}));
    let (_, r) = c.until_response(2);
    assert_eq!(r["error"]["code"], codes::QUEUE_FULL);
    assert_eq!(
        r["error"]["message"],
        "the steering queue is full (1 of 64 messages, 8 of 10 bytes waiting): this message of \
         3 bytes was not queued"
    );
    c.request(3, "steer", json!({"text": "ab"}));
    assert_eq!(c.until_response(3).1["result"], json!({"queued": true}));
    c.request(4, "follow_up", json!({"text": "x".repeat(11)}));
    assert_eq!(c.until_response(4).1["error"]["code"], codes::QUEUE_FULL);
    c.close().unwrap();
}

#[test]
fn a_failed_prompt_answers_with_the_run_and_its_error_kind() {
    let c = Client::start(
        agent(Faux::default().reply(FauxReply::text("Half").then_error("connection reset"))),
        ServeOptions::new(),
    );
    c.request(1, "prompt", json!({"text": "Say hello."}));
    let (events, r) = c.until_response(1);
    let error = json!({"kind": "provider", "message": "provider error: connection reset"});
    // A result, not an error response: the run happened, and the answer says how it failed.
    assert_eq!(
        r["result"],
        json!({
            "stop_reason": "error",
            "text": "Half",
            "usage": r["result"]["usage"],
            "error": error,
        })
    );
    let end = events.last().unwrap();
    assert_eq!(end["method"], "AgentEnd");
    assert_eq!(end["params"]["error"], error);
    c.request(2, "snapshot", json!({}));
    let (_, s) = c.until_response(2);
    assert_eq!(s["result"]["error"], error);
    assert_eq!(
        s["result"]["error_message"],
        "provider error: connection reset"
    );
    c.close().unwrap();
}

/// A reply that counts what the model was sent: "users: <n>, messages: <m>".
fn counting() -> Faux {
    Faux::default().otherwise(|r| {
        let users = r.messages.iter().filter(|m| m.role() == "user").count();
        FauxReply::text(format!("users: {users}, messages: {}", r.messages.len()))
    })
}

fn contents(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn initialize_lists_every_method_the_server_answers() {
    let c = Client::start(agent(Faux::default()), ServeOptions::new());
    c.request(1, "initialize", json!({}));
    let (_, r) = c.until_response(1);
    assert_eq!(
        r["result"]["capabilities"]["methods"],
        json!([
            "initialize",
            "prompt",
            "steer",
            "follow_up",
            "abort",
            "snapshot",
            "reset",
            "replace_messages",
            "clear_steering_queue",
            "clear_follow_up_queue",
            "clear_queues",
            "elicitation/answer",
        ])
    );
    c.request(2, "nope", json!({}));
    let (_, r) = c.until_response(2);
    assert_eq!(r["error"]["code"], codes::METHOD_NOT_FOUND);
    assert_eq!(
        r["error"]["message"],
        "unknown method `nope`; the methods are initialize, prompt, steer, follow_up, abort, \
         snapshot, reset, replace_messages, clear_steering_queue, clear_follow_up_queue, \
         clear_queues, elicitation/answer"
    );
    c.close().unwrap();
}

/// `elicitation/answer` for a question that does not wait, or without its members: refused
/// with -32602, and the server reads on. (Answering a waiting question: tests/mcp.rs,
/// `elicitation::a_wire_client_answers_the_question_over_the_wire_server`.)
#[test]
fn an_answer_to_no_question_is_refused() {
    let c = Client::start(agent(Faux::default()), ServeOptions::new());
    for (id, params, message) in [
        (
            1,
            json!({"id": "elicitation-0", "action": "accept", "content": {}}),
            "no elicitation \"elicitation-0\" waits for an answer",
        ),
        (
            2,
            json!({"action": "decline"}),
            "invalid params of elicitation/answer: no string `id`",
        ),
        (
            3,
            json!({"id": "x", "action": "maybe"}),
            "invalid params of elicitation/answer: the action \"maybe\" is not one of accept, decline, cancel",
        ),
    ] {
        c.request(id, "elicitation/answer", params);
        let (_, r) = c.until_response(id);
        assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
        assert_eq!(r["error"]["message"], message);
    }
    c.request(4, "snapshot", json!({}));
    let (_, r) = c.until_response(4);
    assert_eq!(r["result"]["elicitations"], json!([]));
    c.close().unwrap();
}

/// A regression test: a wire client could not start a new conversation (`Agent::reset`).
#[test]
fn reset_starts_a_new_conversation_and_gives_back_the_queued_messages() {
    let c = Client::start(agent(counting()), ServeOptions::new());
    c.request(1, "prompt", json!({"text": "first"}));
    let (run, r) = c.until_response(1);
    assert_eq!(r["result"]["text"], "users: 1, messages: 1");
    let mut mirror = wire::Mirror::new();
    for line in &run {
        mirror.apply_line(&line.to_string()).unwrap();
    }
    assert_eq!(mirror.state().messages.len(), 2);
    c.request(2, "steer", json!({"text": "s1"}));
    c.request(3, "follow_up", json!({"text": "f1"}));
    c.until_response(3);
    c.request(4, "reset", json!({}));
    let (lines, r) = c.until_response(4);
    // The event comes before the answer, so a mirror of the notifications follows it.
    assert_eq!(
        lines,
        [json!({"jsonrpc": "2.0", "method": "MessagesReplaced", "params": {"messages": []}})]
    );
    assert_eq!(contents(&r["result"]["removed"]), ["s1", "f1"]);
    // A mirror of the notifications follows the reset.
    mirror.apply_line(&lines[0].to_string()).unwrap();
    assert!(mirror.state().messages.is_empty());
    assert_eq!(mirror.state().stop_reason, None);
    c.request(5, "snapshot", json!({}));
    let s = &c.until_response(5).1["result"];
    assert_eq!(s["messages"], json!([]));
    assert_eq!(s["steering_queue"], json!([]));
    assert_eq!(s["follow_up_queue"], json!([]));
    assert_eq!(s["stop_reason"], Value::Null);
    assert_eq!(s["turn"], 0);
    // The next prompt starts from nothing.
    c.request(6, "prompt", json!({"text": "second"}));
    assert_eq!(
        c.until_response(6).1["result"]["text"],
        "users: 1, messages: 1"
    );
    c.close().unwrap();
}

#[test]
fn reset_and_replace_while_a_run_is_active_are_refused_with_run_active() {
    let faux = Faux::default().reply(FauxReply::text("slow").delay(Duration::from_secs(30)));
    let c = Client::start(agent(faux), ServeOptions::new());
    c.request(1, "prompt", json!({"text": "first"}));
    c.until_method("AgentStart");
    c.request(2, "reset", json!({}));
    c.request(3, "replace_messages", json!({"messages": []}));
    for id in [2, 3] {
        let (lines, r) = c.until_response(id);
        // The run's own events go on; nothing was replaced.
        assert!(
            lines.iter().all(|l| l["method"] != "MessagesReplaced"),
            "{lines:?}"
        );
        assert_eq!(
            r["error"],
            json!({"code": codes::RUN_ACTIVE, "message": "a run is already active"})
        );
    }
    c.request(4, "abort", json!({}));
    let (_, r) = c.until_response(1);
    assert_eq!(r["result"]["stop_reason"], "cancelled");
    c.request(5, "snapshot", json!({}));
    // Nothing was reset: the run's prompt and its cut reply are still there.
    let (_, s) = c.until_response(5);
    let roles: Vec<&Value> = (s["result"]["messages"].as_array().unwrap().iter())
        .map(|m| &m["role"])
        .collect();
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(s["result"]["messages"][0]["content"], "first");
    c.close().unwrap();
}

/// A regression test: a wire client could not put a transcript in place
/// (`Agent::replace_messages`).
#[test]
fn replace_messages_puts_a_transcript_in_place() {
    let c = Client::start(agent(counting()), ServeOptions::new());
    let history = json!([
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": [{"type": "text", "text": "noted"}], "stop_reason": "stop"},
    ]);
    c.request(1, "replace_messages", json!({ "messages": history }));
    let (lines, r) = c.until_response(1);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["method"], "MessagesReplaced");
    let replaced = &lines[0]["params"]["messages"];
    assert_eq!(replaced[0], history[0]);
    assert_eq!(replaced[1]["content"], history[1]["content"]);
    assert_eq!(r["result"], json!({"replaced": 2}));
    c.request(2, "prompt", json!({"text": "now"}));
    assert_eq!(
        c.until_response(2).1["result"]["text"],
        "users: 2, messages: 3"
    );
    // Bad params are refused and change nothing.
    for (id, params, why) in [
        (3, json!({}), "`messages` is missing"),
        (4, json!({"messages": "x"}), "`messages` is not an array"),
        (
            5,
            json!({"messages": [{"role": "wizard"}]}),
            "message 0: unknown variant `wizard`",
        ),
    ] {
        c.request(id, "replace_messages", params);
        let (lines, r) = c.until_response(id);
        assert_eq!(lines, Vec::<Value>::new());
        assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
        let message = r["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "replace_messages needs params {{\"messages\": [message..]}}: {why}"
            )),
            "{message}"
        );
    }
    c.request(6, "snapshot", json!({}));
    assert_eq!(
        c.until_response(6).1["result"]["messages"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    c.close().unwrap();
}

/// A regression test: a wire client could not take back what it queued.
#[test]
fn clearing_the_queues_gives_back_what_they_held() {
    let c = Client::start(agent(counting()), ServeOptions::new());
    let queue = |id: u64, method: &str, text: &str| {
        c.request(id, method, json!({ "text": text }));
        assert_eq!(c.until_response(id).1["result"], json!({"queued": true}));
    };
    queue(1, "steer", "s1");
    queue(2, "steer", "s2");
    queue(3, "follow_up", "f1");
    let clear = |id: u64, method: &str| -> Vec<String> {
        c.request(id, method, json!({}));
        let (lines, r) = c.until_response(id);
        // No event: the queues change without one.
        assert_eq!(lines, Vec::<Value>::new(), "{method}");
        contents(&r["result"]["removed"])
    };
    assert_eq!(clear(4, "clear_steering_queue"), ["s1", "s2"]);
    assert_eq!(clear(5, "clear_steering_queue"), Vec::<String>::new());
    assert_eq!(clear(6, "clear_follow_up_queue"), ["f1"]);
    queue(7, "follow_up", "f2");
    queue(8, "steer", "s3");
    assert_eq!(clear(9, "clear_queues"), ["s3", "f2"]);
    c.request(10, "snapshot", json!({}));
    let s = &c.until_response(10).1["result"];
    assert_eq!(s["steering_queue"], json!([]));
    assert_eq!(s["follow_up_queue"], json!([]));
    // Nothing cleared is ever delivered.
    c.request(11, "prompt", json!({"text": "go"}));
    assert_eq!(
        c.until_response(11).1["result"]["text"],
        "users: 1, messages: 1"
    );
    c.close().unwrap();
}

/// The snapshot's flags have the state's names: `is_streaming` while a run goes on (the Go
/// seed's `IsStreaming`, once `is_running`), `is_streaming_reply` while a reply streams.
#[test]
fn snapshot_names_the_run_and_reply_flags_as_the_state_does() {
    let faux = Faux::default()
        .chunk_chars(64)
        .reply(FauxReply::text("thinking...").then_stall(Duration::from_secs(30)))
        .reply(FauxReply::tool_call("echo", json!({"text": "slow"})));
    let c = Client::start(agent(faux), ServeOptions::new());
    let flags = |id: u64| -> Value {
        c.request(id, "snapshot", json!({}));
        let (_, r) = c.until_response(id);
        let s = &r["result"];
        assert!(s.get("is_running").is_none(), "{s}");
        json!([
            s["is_streaming"],
            s["is_streaming_reply"],
            s["streaming_message"].is_object()
        ])
    };
    assert_eq!(flags(1), json!([false, false, false]));
    c.request(2, "prompt", json!({"text": "go"}));
    c.until_method("MessageUpdate");
    // The reply streams.
    assert_eq!(flags(3), json!([true, true, true]));
    c.request(4, "abort", json!({}));
    c.until_response(2);
    assert_eq!(flags(5), json!([false, false, false]));
    // A tool runs: the run goes on, no reply streams.
    c.request(6, "prompt", json!({"text": "again"}));
    c.until_method("ToolExecute");
    assert_eq!(flags(7), json!([true, false, false]));
    c.request(8, "abort", json!({}));
    c.until_response(6);
    c.close().unwrap();
}
