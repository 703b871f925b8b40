//! Elicitation as events of the run: a server's question during a tool call becomes an
//! `ElicitationStart` / `ElicitationEnd` pair inside the call, listed in the state while it
//! waits, answered from another thread through the agent (or by the program's hook), over the
//! wire server, and given up on an abort or when the server leaves. Against a small
//! session-era server (tests/mcp/elicit_server.py) and the official Python SDK 2 in the
//! stateless era (an `input_required` result).

use std::io::{BufRead, BufReader, Write};

use pagent::mcp::ElicitationMode;
use pagent::wire::{self, ServeOptions};
use pagent::{AgentHandle, AnswerRefused, ElicitationAnswer, PendingElicitation};

use super::*;

fn asker() -> ClientBuilder {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/elicit_server.py");
    Client::stdio("python3")
        .arg(script.display().to_string())
        .call_timeout(Duration::from_secs(30))
        .shutdown_grace(Duration::from_millis(200))
}

/// The questions the state lists once it lists `n` of them (bounded wait).
fn pending(handle: &AgentHandle, n: usize) -> Vec<PendingElicitation> {
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        let state = handle.snapshot();
        if state.elicitations.len() == n {
            return state.elicitations.to_vec();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("the state never listed {n} questions");
}

/// The run's lines around one call of `ask`: `inside` between its `ToolExecute` and its
/// `ToolEnd`, whose text is `result`.
fn asked(args: &str, inside: &[String], end: &str) -> Vec<String> {
    asked_of("ask", args, inside, end)
}

/// [`asked`] of the tool `tool`.
fn asked_of(tool: &str, args: &str, inside: &[String], end: &str) -> Vec<String> {
    [
        opening("go"),
        vec![
            "MessageStart(assistant)".into(),
            format!("MessageUpdate*([call_1:{tool}]{args})"),
            "MessageEnd(assistant tool_use \"\" [call_1])".into(),
            "ToolStart(call_1)".into(),
            "ToolExecute(call_1)".into(),
        ],
        inside.to_vec(),
        vec![end.to_owned()],
        results(&["call_1"]),
        lines(&["TurnEnd(1 continuing)", "TurnStart(2)"]),
        text_reply("done"),
        lines(&["TurnEnd(2 no_tool_calls)", "AgentEnd(no_tool_calls)"]),
    ]
    .concat()
}

fn ask_agent(client: &Client, args: Value) -> Agent {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("ask", args))
        .reply(FauxReply::text("done"));
    agent_with(&faux, client.tools().unwrap())
}

/// What the server got back for its questions, as its tool result says it (compact JSON).
fn got(answers: Value) -> String {
    format!("ToolEnd(call_1 {:?})", answers.to_string())
}

#[test]
fn a_question_during_a_tool_call_waits_in_the_state_and_is_answered_from_another_thread() {
    let client = asker().elicit_through_agent().connect().unwrap();
    let agent = ask_agent(&client, json!({}));
    let rec = Recorder::attach(&agent);
    let handle = agent.handle();
    let answerer = std::thread::spawn(move || {
        let waiting = pending(&handle, 1);
        let question = &waiting[0];
        assert_eq!(question.tool_call_id, "call_1");
        assert_eq!(question.request.server, "asker");
        assert_eq!(question.request.message, "What is your name? (1)");
        assert!(matches!(&question.request.mode,
            ElicitationMode::Form { schema } if schema["required"] == json!(["name"])));
        // The run waits meanwhile: the call is pending, the run streaming.
        let state = handle.snapshot();
        assert!(state.is_streaming && state.pending_tool_calls.len() == 1);
        // Values that do not fit are refused, and the question still waits.
        assert_eq!(
            handle.answer_elicitation(&question.id, ElicitationAnswer::Accept(json!({"name": ""}))),
            Err(AnswerRefused::Invalid(
                "at `/name`: expected at least 1 characters, got 0".into()
            ))
        );
        assert_eq!(pending(&handle, 1)[0].id, question.id);
        handle
            .answer_elicitation(
                &question.id,
                ElicitationAnswer::Accept(json!({"name": "Ann"})),
            )
            .unwrap();
        // Answered once only.
        assert_eq!(
            handle.answer_elicitation(&question.id, ElicitationAnswer::Decline),
            Err(AnswerRefused::NotWaiting(question.id.clone()))
        );
    });
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    answerer.join().unwrap();
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        asked(
            "{}",
            &lines(&[
                "ElicitationStart(call_1 \"What is your name? (1)\")",
                "ElicitationEnd(call_1 accept {\"name\":\"Ann\",\"polite\":true})",
            ]),
            &got(json!([{"action": "accept", "content": {"name": "Ann", "polite": true}}])),
        )
    );
    client.close();
}

#[test]
fn an_abort_while_a_question_waits_gives_it_up_and_no_event_is_missing() {
    let client = asker().elicit_through_agent().connect().unwrap();
    let agent = ask_agent(&client, json!({}));
    let rec = Recorder::attach(&agent);
    let handle = agent.handle();
    let aborter = std::thread::spawn(move || {
        let id = pending(&handle, 1)[0].id.clone();
        assert!(handle.abort());
        id
    });
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    let id = aborter.join().unwrap();
    assert_eq!(result.unwrap(), RunStopReason::Cancelled);
    let events = rec.lines();
    let end = events
        .iter()
        .position(|l| l.starts_with("ToolEnd"))
        .unwrap();
    assert_eq!(
        events[..end],
        [
            opening("go"),
            vec![
                "MessageStart(assistant)".into(),
                "MessageUpdate*([call_1:ask]{})".into(),
                "MessageEnd(assistant tool_use \"\" [call_1])".into(),
                "ToolStart(call_1)".into(),
                "ToolExecute(call_1)".into(),
                "ElicitationStart(call_1 \"What is your name? (1)\")".into(),
                "ElicitationEnd(call_1 Cancel)".into(),
            ],
        ]
        .concat()[..]
    );
    given_up(&events[end]);
    assert_eq!(
        events[end + 1..],
        [
            results(&["call_1"]),
            lines(&["TurnEnd(1 cancelled)", "AgentEnd(cancelled)"])
        ]
        .concat()[..]
    );
    assert_eq!(
        agent_answer(&client, &id),
        Err(AnswerRefused::NotWaiting(id.clone()))
    );
    client.close();
}

/// The `ToolEnd` of a call aborted while its question waited: the call given up (an error
/// result), or, when the server's answer to the `cancel` it was sent came in the same
/// instant as the abort, that answer.
fn given_up(line: &str) {
    assert!(
        line.starts_with("ToolEnd(call_1 error") || line == got(json!([{"action": "cancel"}])),
        "{line}"
    );
}

/// An answer to a question nobody asks any more: refused.
fn agent_answer(client: &Client, id: &str) -> Result<(), AnswerRefused> {
    let agent = ask_agent(client, json!({}));
    agent.answer_elicitation(id, ElicitationAnswer::Cancel)
}

#[test]
fn the_programs_hook_answers_and_the_question_is_an_event_of_the_run_all_the_same() {
    let client = asker()
        .on_elicitation(|question, _| {
            assert_eq!(question.server, "asker");
            ElicitationAnswer::Accept(json!({"name": "Bo", "polite": false}))
        })
        .connect()
        .unwrap();
    let agent = ask_agent(&client, json!({"schema": "url"}));
    let rec = Recorder::attach(&agent);
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    // A URL's accept carries no values.
    assert_eq!(
        rec.lines(),
        asked(
            r#"{"schema":"url"}"#,
            &lines(&[
                "ElicitationStart(call_1 \"Sign in (1)\")",
                "ElicitationEnd(call_1 accept null)",
            ]),
            &got(json!([{"action": "accept"}])),
        )
    );
    client.close();
}

#[test]
fn an_abort_gives_up_a_hook_that_never_returns() {
    let (release, stuck) = crossbeam_channel::bounded::<()>(0);
    let client = asker()
        .on_elicitation(move |_, _| {
            // Ignores its token: only the end of the test lets it go.
            let _ = stuck.recv();
            ElicitationAnswer::Decline
        })
        .connect()
        .unwrap();
    let agent = ask_agent(&client, json!({}));
    let rec = Recorder::attach(&agent);
    let handle = agent.handle();
    let aborter = std::thread::spawn(move || {
        pending(&handle, 1);
        handle.abort()
    });
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    assert!(aborter.join().unwrap());
    assert_eq!(result.unwrap(), RunStopReason::Cancelled);
    let events = rec.lines();
    let i = events
        .iter()
        .position(|l| l.starts_with("ElicitationStart"))
        .unwrap();
    assert_eq!(events[i + 1], "ElicitationEnd(call_1 Cancel)");
    given_up(&events[i + 2]);
    drop(release);
    client.close();
}

#[test]
fn a_question_with_a_schema_that_is_no_form_is_refused_to_the_server_and_never_shown() {
    let client = asker().elicit_through_agent().connect().unwrap();
    let agent = ask_agent(&client, json!({"schema": "bad"}));
    let rec = Recorder::attach(&agent);
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    let why = "elicitation/create: the requestedSchema is not a form: the property \"address\" \
               is of type \"object\": a form holds strings, numbers, integers, booleans and \
               lists of choices";
    assert_eq!(
        rec.lines(),
        asked(
            r#"{"schema":"bad"}"#,
            &[],
            &got(json!([{"error": {"code": -32602, "message": why}}])),
        )
    );
    client.close();
}

#[test]
fn many_questions_at_once_are_asked_one_after_another_each_with_its_events() {
    let client = asker().elicit_through_agent().connect().unwrap();
    let agent = ask_agent(&client, json!({"questions": 3}));
    let rec = Recorder::attach(&agent);
    let handle = agent.handle();
    let answerer = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for n in 1..=3 {
            // One at a time: the next is asked once this one is answered.
            let waiting = pending(&handle, 1);
            assert!(!seen.contains(&waiting[0].id));
            assert_eq!(
                waiting[0].request.message,
                format!("What is your name? ({n})")
            );
            seen.push(waiting[0].id.clone());
            let answer = match n {
                2 => ElicitationAnswer::Decline,
                _ => ElicitationAnswer::Accept(json!({"name": format!("N{n}")})),
            };
            handle.answer_elicitation(&waiting[0].id, answer).unwrap();
            let until = Instant::now() + Duration::from_secs(15);
            while handle
                .snapshot()
                .elicitations
                .iter()
                .any(|e| e.id == waiting[0].id)
            {
                assert!(Instant::now() < until, "the answered question stays listed");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    answerer.join().unwrap();
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        asked(
            r#"{"questions":3}"#,
            &lines(&[
                "ElicitationStart(call_1 \"What is your name? (1)\")",
                "ElicitationEnd(call_1 accept {\"name\":\"N1\",\"polite\":true})",
                "ElicitationStart(call_1 \"What is your name? (2)\")",
                "ElicitationEnd(call_1 Decline)",
                "ElicitationStart(call_1 \"What is your name? (3)\")",
                "ElicitationEnd(call_1 accept {\"name\":\"N3\",\"polite\":true})",
            ]),
            &got(json!([
                {"action": "accept", "content": {"name": "N1", "polite": true}},
                {"action": "decline"},
                {"action": "accept", "content": {"name": "N3", "polite": true}},
            ])),
        )
    );
    client.close();
}

#[test]
fn a_server_that_leaves_while_the_user_answers_ends_the_wait_and_the_run_goes_on() {
    let client = asker().elicit_through_agent().connect().unwrap();
    let agent = ask_agent(&client, json!({"leave": true}));
    let rec = Recorder::attach(&agent);
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    let events = rec.lines();
    let end = events
        .iter()
        .position(|l| l.starts_with("ToolEnd"))
        .unwrap();
    assert!(
        events[end].starts_with("ToolEnd(call_1 error"),
        "{events:?}"
    );
    let mut expected = asked(
        r#"{"leave":true}"#,
        &lines(&[
            "ElicitationStart(call_1 \"What is your name? (1)\")",
            "ElicitationEnd(call_1 Cancel)",
        ]),
        &events[end],
    );
    expected[end] = events[end].clone();
    assert_eq!(events, expected);
}

/// The wire server's client answers: it sees `ElicitationStart`, finds the question in a
/// `snapshot`, answers with `elicitation/answer` (a value that does not fit first), and the
/// run goes on. Over real pipes.
#[test]
fn a_wire_client_answers_the_question_over_the_wire_server() {
    let client = asker().elicit_through_agent().connect().unwrap();
    let faux = Faux::default()
        .reply(FauxReply::tool_call("ask", json!({})))
        .reply(FauxReply::text("done"));
    let builder = client
        .tools()
        .unwrap()
        .into_iter()
        .fold(Agent::builder().provider(faux).model("m"), |b, t| {
            b.tool_arc(t)
        });
    let (input, mut to_server) = std::io::pipe().unwrap();
    let (from_server, output) = std::io::pipe().unwrap();
    let server = std::thread::spawn(move || {
        wire::serve(builder, BufReader::new(input), output, ServeOptions::new())
    });
    let (line_tx, lines_rx) = crossbeam_channel::unbounded::<Value>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(from_server).lines().take(10_000) {
            let Ok(line) = line else { break };
            let _ = line_tx.send(serde_json::from_str(&line).unwrap());
        }
    });
    let mut send = |message: Value| {
        writeln!(to_server, "{message}").unwrap();
    };
    let next = || {
        lines_rx
            .recv_timeout(Duration::from_secs(15))
            .expect("a line from the wire server")
    };
    let mut methods = Vec::new();
    // Reads until the response to `id`, noting the events on the way.
    let until = |id: u64, methods: &mut Vec<String>| {
        for _ in 0..10_000 {
            let line = next();
            match line["method"].as_str() {
                Some(m) => methods.push(m.to_owned()),
                None if line["id"] == id => return line,
                None => {}
            }
        }
        panic!("no response to {id}");
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "prompt", "params": {"text": "go"}}));
    let start = loop {
        let line = next();
        let method = line["method"].as_str().unwrap().to_owned();
        methods.push(method.clone());
        if method == "ElicitationStart" {
            break line["params"].clone();
        }
    };
    assert_eq!(start["tool_call_id"], "call_1");
    assert_eq!(start["request"]["server"], "asker");
    assert_eq!(start["request"]["mode"], "form");
    assert_eq!(
        start["request"]["requested_schema"]["required"],
        json!(["name"])
    );
    let id = start["id"].as_str().unwrap().to_owned();
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "snapshot"}));
    let snapshot = until(2, &mut methods);
    assert_eq!(
        snapshot["result"]["elicitations"],
        json!([{"id": id, "tool_call_id": "call_1", "request": start["request"]}])
    );
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "elicitation/answer",
                "params": {"id": id, "action": "accept", "content": {"name": 7}}}),
    );
    let refused = until(3, &mut methods);
    assert_eq!(refused["error"]["code"], -32602);
    assert_eq!(
        refused["error"]["message"],
        "the answer does not fit the form: at `/name`: expected a string, got an integer (7)"
    );
    send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "elicitation/answer",
                "params": {"id": "elicitation-0", "action": "decline"}}),
    );
    assert_eq!(
        until(4, &mut methods)["error"]["message"],
        "no elicitation \"elicitation-0\" waits for an answer"
    );
    send(
        json!({"jsonrpc": "2.0", "id": 5, "method": "elicitation/answer",
                "params": {"id": id, "action": "accept", "content": {"name": "Wyn"}}}),
    );
    assert_eq!(until(5, &mut methods)["result"], json!({}));
    let answer = until(1, &mut methods);
    assert_eq!(answer["result"]["stop_reason"], "no_tool_calls");
    // However the reply streamed: a run of updates is one entry.
    methods.dedup_by(|a, b| a == "MessageUpdate" && b == "MessageUpdate");
    assert_eq!(
        methods,
        [
            "AgentStart",
            "TurnStart",
            "MessageStart",
            "MessageEnd",
            "MessageStart",
            "MessageUpdate",
            "MessageEnd",
            "ToolStart",
            "ToolExecute",
            "ElicitationStart",
            "ElicitationEnd",
            "ToolEnd",
            "MessageStart",
            "MessageEnd",
            "TurnEnd",
            "TurnStart",
            "MessageStart",
            "MessageUpdate",
            "MessageEnd",
            "TurnEnd",
            "AgentEnd",
        ]
    );
    drop(to_server);
    server.join().unwrap().unwrap();
    reader.join().unwrap();
    client.close();
}

/// The stateless era's way: the official Python SDK 2 answers `tools/call` with
/// `input_required`; the question is an event of the run all the same, answered through
/// the agent, and the retried call gets the answer.
#[test]
fn an_input_required_question_of_the_python_sdk_is_an_event_of_the_run() {
    let Some(dir) = installed() else { return };
    let client = Client::stdio(dir.join("venv-2/bin/python").display().to_string())
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/mcp/sdk2_server.py")
                .display()
                .to_string(),
        )
        .arg("stdio")
        .call_timeout(Duration::from_secs(30))
        .elicit_through_agent()
        .connect()
        .unwrap();
    assert_eq!(client.server_info().era, Era::Stateless);
    let faux = Faux::default()
        .reply(FauxReply::tool_call("greet", json!({})))
        .reply(FauxReply::text("done"));
    let agent = agent_with(&faux, client.tools().unwrap());
    let rec = Recorder::attach(&agent);
    let handle = agent.handle();
    let answerer = std::thread::spawn(move || {
        let question = pending(&handle, 1).remove(0);
        assert_eq!(question.request.server, "sdk2-test");
        handle
            .answer_elicitation(
                &question.id,
                ElicitationAnswer::Accept(json!({"name": "Ann"})),
            )
            .unwrap();
    });
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    answerer.join().unwrap();
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    let mut expected = asked(
        "{}",
        &lines(&[
            "ElicitationStart(call_1 \"What is your name?\")",
            "ElicitationEnd(call_1 accept {\"name\":\"Ann\",\"polite\":true})",
        ]),
        "ToolEnd(call_1 \"Hello, Ann!\")",
    );
    // The model called `greet` (the SDK server's tool), not the scripted server's `ask`.
    for line in &mut expected {
        if line == "MessageUpdate*([call_1:ask]{})" {
            *line = "MessageUpdate*([call_1:greet]{})".into();
        }
    }
    assert_eq!(rec.lines(), expected);
    client.close();
}

/// A model that calls `sign_in` with `args`, then answers "done".
fn sign_in_agent(client: &Client, args: Value) -> Agent {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("sign_in", args))
        .reply(FauxReply::text("done"));
    agent_with(&faux, client.tools().unwrap())
}

/// The `tools/call` requests the server was sent, each as its params.
fn calls_sent(traffic: &Traffic) -> Vec<Value> {
    traffic
        .sent()
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .map(|m| m["params"].clone())
        .collect()
}

#[test]
fn a_url_the_server_requires_is_shown_and_the_call_sent_again_once_it_is_complete() {
    let traffic = Traffic::default();
    let client = traffic
        .attach(asker())
        .on_elicitation(|question, _| {
            assert!(
                matches!(&question.mode, ElicitationMode::Url { url, id: Some(id) }
                    if url == "https://example.com/sign-in" && id == "sign-in-1"),
                "{question:?}"
            );
            ElicitationAnswer::Accept(Value::Null)
        })
        .connect()
        .unwrap();
    let agent = sign_in_agent(&client, json!({}));
    let rec = Recorder::attach(&agent);
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        asked_of(
            "sign_in",
            "{}",
            &lines(&[
                "ElicitationStart(call_1 \"Sign in to go on\")",
                "ElicitationEnd(call_1 accept null)",
            ]),
            "ToolEnd(call_1 \"signed in after 1 refusals\")",
        )
    );
    // The same call twice: refused, then sent again after the completion.
    let calls: Vec<Value> = calls_sent(&traffic)
        .into_iter()
        .map(|mut c| {
            c.as_object_mut().unwrap().remove("_meta");
            c
        })
        .collect();
    assert_eq!(calls, vec![json!({"name": "sign_in", "arguments": {}}); 2]);
    assert!(client.elicitation_completed("sign-in-1"));
    assert!(!client.elicitation_completed("sign-in-2"));
    client.close();
}

#[test]
fn a_declined_url_or_one_never_completed_leaves_the_call_with_the_servers_error() {
    // A decline ends the call at once; a completion that never comes, at the call timeout
    // (which also bounds the Python server's answers: seconds, not less, on a slow machine).
    for (answer, args, timeout) in [
        (
            ElicitationAnswer::Decline,
            json!({}),
            Duration::from_secs(60),
        ),
        (
            ElicitationAnswer::Accept(Value::Null),
            json!({"complete": false}),
            Duration::from_secs(3),
        ),
    ] {
        let traffic = Traffic::default();
        let given = answer.clone();
        let client = traffic
            .attach(asker())
            .call_timeout(timeout)
            .on_elicitation(move |_, _| given.clone())
            .connect()
            .unwrap();
        let agent = sign_in_agent(&client, args.clone());
        let rec = Recorder::attach(&agent);
        let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
        assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
        let shown = format!(
            "ElicitationEnd(call_1 {})",
            if answer == ElicitationAnswer::Decline {
                "Decline"
            } else {
                "accept null"
            }
        );
        assert_eq!(
            rec.lines(),
            asked_of(
                "sign_in",
                &args.to_string(),
                &[
                    "ElicitationStart(call_1 \"Sign in to go on\")".to_owned(),
                    shown,
                ],
                "ToolEnd(call_1 error \"the mcp server answered tools/call with error -32042: Sign in first\")",
            ),
            "{answer:?}"
        );
        assert_eq!(calls_sent(&traffic).len(), 1, "{answer:?}: sent once");
        client.close();
    }
}

#[test]
fn an_abort_while_the_completion_is_awaited_ends_the_call_at_once() {
    let client = asker()
        .call_timeout(Duration::from_secs(60))
        .elicit_through_agent()
        .connect()
        .unwrap();
    let agent = sign_in_agent(&client, json!({"complete": false}));
    let rec = Recorder::attach(&agent);
    let handle = agent.handle();
    let aborter = std::thread::spawn(move || {
        let id = pending(&handle, 1)[0].id.clone();
        handle
            .answer_elicitation(&id, ElicitationAnswer::Accept(Value::Null))
            .unwrap();
        pending(&handle, 0);
        assert!(handle.abort());
    });
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    aborter.join().unwrap();
    assert_eq!(result.unwrap(), RunStopReason::Cancelled);
    assert_eq!(
        rec.lines(),
        [
            opening("go"),
            lines(&[
                "MessageStart(assistant)",
                "MessageUpdate*([call_1:sign_in]{\"complete\":false})",
                "MessageEnd(assistant tool_use \"\" [call_1])",
                "ToolStart(call_1)",
                "ToolExecute(call_1)",
                "ElicitationStart(call_1 \"Sign in to go on\")",
                "ElicitationEnd(call_1 accept null)",
                "ToolEnd(call_1 error \"aborted\")",
            ]),
            results(&["call_1"]),
            lines(&["TurnEnd(1 cancelled)", "AgentEnd(cancelled)"]),
        ]
        .concat()
    );
    client.close();
}

#[test]
fn the_python_sdks_url_elicitation_required_error_is_shown_and_the_call_sent_again() {
    let Some(dir) = installed() else { return };
    let server = PyServer::launch(&dir.join("venv/bin/python"), "url_server.py", &["{port}"]);
    let traffic = Traffic::default();
    let client = traffic
        .attach(Client::http(&server.url))
        .call_timeout(Duration::from_secs(30))
        .on_elicitation(|_, _| ElicitationAnswer::Accept(Value::Null))
        .connect()
        .unwrap();
    let agent = sign_in_agent(&client, json!({}));
    let rec = Recorder::attach(&agent);
    let result = bounded(move || agent.prompt("go").map(|r| r.stop_reason));
    assert_eq!(result.unwrap(), RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        asked_of(
            "sign_in",
            "{}",
            &lines(&[
                "ElicitationStart(call_1 \"Sign in to go on\")",
                "ElicitationEnd(call_1 accept null)",
            ]),
            "ToolEnd(call_1 \"signed in after 1 refusals\")",
        )
    );
    assert_eq!(calls_sent(&traffic).len(), 2);
    assert!(client.elicitation_completed("sdk-sign-in"));
    client.close();
}
