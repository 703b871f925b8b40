//! User code that panics anywhere, and transcripts with holes: every tool call still gets
//! exactly one result, every request sent to a model is valid, and the whole event sequence
//! is what the docs promise.

#[path = "support/mod.rs"]
mod http;
mod replay;
#[allow(dead_code)] // This binary uses a part of the control helpers.
#[path = "control/support.rs"]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pagent::llm::{Faux, FauxReply, ToolDefinition};
use pagent::{
    Agent, AssistantMessage, ContentBlock, Error, ErrorKind, Message, RunStopReason, StopReason,
    Tool, ToolCall, ToolContext, ToolError, ToolOutput, ToolResultMessage, session,
};
use serde_json::{Value, json};
use support::*;

/// The text of a result the agent synthesizes for a call that has none.
const NO_RESULT: &str = "no result: this tool call was never answered (the run that made it \
                         ended before its result was recorded)";

/// A tool named `fragile` whose method `panics_in` panics once it was called `after` times.
struct Fragile {
    panics_in: &'static str,
    after: usize,
    calls: AtomicUsize,
}

fn fragile(panics_in: &'static str, after: usize) -> Fragile {
    Fragile {
        panics_in,
        after,
        calls: AtomicUsize::new(0),
    }
}

impl Fragile {
    fn maybe_panic(&self, method: &str) {
        if method == self.panics_in && self.calls.fetch_add(1, Ordering::SeqCst) >= self.after {
            panic!("{method} boom");
        }
    }
}

impl Tool for Fragile {
    fn name(&self) -> &str {
        self.maybe_panic("name");
        "fragile"
    }
    fn description(&self) -> &str {
        "breaks"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    fn execute(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.maybe_panic("execute");
        Ok(ToolOutput::text("fragile ran"))
    }
    fn sequential(&self) -> bool {
        self.maybe_panic("sequential");
        false
    }
    fn validate(&self, _: &Value) -> Result<(), String> {
        self.maybe_panic("validate");
        Ok(())
    }
    fn definition(&self) -> ToolDefinition {
        self.maybe_panic("definition");
        ToolDefinition::new(self.name(), self.description(), self.parameters())
    }
}

/// A scripted provider that keeps every request it gets.
/// What one model call was sent.
struct Sent {
    messages: Vec<Message>,
}

/// The agent's transcript, owned, for comparisons.
fn transcript(agent: &Agent) -> Vec<Message> {
    agent
        .snapshot()
        .messages
        .iter()
        .map(|m| (**m).clone())
        .collect()
}

/// A Faux playing `replies`, and a log of the messages each call was sent.
fn faux_with_log(replies: Vec<FauxReply>) -> (Faux, Arc<Mutex<Vec<Sent>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let faux = Faux::default();
    for reply in replies {
        let log = log.clone();
        faux.push_with(move |request| {
            log.lock().unwrap().push(Sent {
                messages: request.messages.iter().map(|m| (**m).clone()).collect(),
            });
            reply.clone()
        });
    }
    (faux, log)
}

fn described(messages: &[Message]) -> Vec<String> {
    messages.iter().map(describe).collect()
}

/// Whether `fragile`'s `execute` is called (the panic comes from it) or the call is settled
/// before (its `ToolStart` then has no `ToolExecute`).
#[derive(PartialEq)]
enum Reaches {
    Execute,
    NotExecute,
}

/// A run whose first reply calls `fragile` then `echo`, with the whole expected sequence for
/// `fragile`'s call ending with `error`.
fn run_fragile_batch(tool: Fragile, parallel: usize, reaches: Reaches, error: &str) {
    let (faux, _) = faux_with_log(vec![
        FauxReply::tool_call("fragile", json!({})).then_tool_call("echo", json!({"x": 1})),
        FauxReply::text("ok"),
    ]);
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .tool(tool)
        .tool(echo())
        .max_parallel_tools(parallel)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let result = bounded(move || agent.prompt("go").unwrap());
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        [
            opening("go"),
            lines(&[
                "MessageStart(assistant)",
                r#"MessageUpdate*([call_1:fragile]{}[call_2:echo]{"x":1})"#,
                r#"MessageEnd(assistant tool_use "" [call_1 call_2])"#,
                "ToolStart(call_1)",
            ]),
            if reaches == Reaches::Execute {
                lines(&["ToolExecute(call_1)"])
            } else {
                Vec::new()
            },
            lines(&[
                &format!("ToolEnd(call_1 error {error:?})"),
                "ToolStart(call_2)",
                "ToolExecute(call_2)",
                r#"ToolEnd(call_2 "1")"#,
            ]),
            results(&["call_1", "call_2"]),
            lines(&["TurnEnd(1 continuing)", "TurnStart(2)"]),
            text_reply("ok"),
            lines(&["TurnEnd(2 no_tool_calls)", "AgentEnd(no_tool_calls)"]),
        ]
        .concat()
    );
}

#[test]
fn a_panicking_validate_left_its_call_without_a_result() {
    run_fragile_batch(
        fragile("validate", 0),
        1,
        Reaches::NotExecute,
        "the tool `fragile` panicked while validating its arguments: validate boom",
    );
}

#[test]
fn a_panicking_sequential_left_the_batch_without_results() {
    // Its calls get an error result; the batch runs one call at a time (the cautious
    // answer), so the order of the `ToolEnd`s is the call order even with 8 workers.
    run_fragile_batch(
        fragile("sequential", 0),
        8,
        Reaches::NotExecute,
        "the tool `fragile` panicked in `sequential()`: sequential boom",
    );
}

#[test]
fn a_panicking_execute_is_an_error_result() {
    run_fragile_batch(
        fragile("execute", 0),
        1,
        Reaches::Execute,
        "the tool `fragile` panicked: execute boom",
    );
}

#[test]
fn a_panicking_name_is_refused_by_build() {
    let err = Agent::builder()
        .provider(Faux::default())
        .tool(echo())
        .tool(fragile("name", 0))
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        Error::Config("the `name()` of tool 2 panicked: name boom".into())
    );
}

#[test]
fn a_name_that_panics_during_a_run_makes_its_calls_unknown() {
    // `build` asks the name twice (the duplicate check, the definition); the run asks once
    // more, for every lookup of the run, and that answer panics.
    run_fragile_batch(
        fragile("name", 2),
        1,
        Reaches::NotExecute,
        "error: unknown tool 'fragile'; available: ['echo'] (and one whose `name()` panicked: name boom)",
    );
}

#[test]
fn a_panicking_definition_is_refused_by_build() {
    let err = Agent::builder()
        .provider(Faux::default())
        .tool(fragile("definition", 0))
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        Error::Config("the `definition()` of tool `fragile` panicked: definition boom".into())
    );
}

#[test]
fn a_panicking_definition_put_in_place_by_before_turn_ends_the_run() {
    let (faux, log) = faux_with_log(vec![FauxReply::text("unused")]);
    let broken: Arc<dyn Tool> = Arc::new(fragile("definition", 0));
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .tool(echo())
        .before_turn(move |setup| setup.tools.push(broken.clone()))
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let failed = agent.prompt("go").unwrap_err();
    assert_eq!(failed.result().stop_reason, RunStopReason::Error);
    assert_eq!(failed.kind(), ErrorKind::Panic);
    let error = failed.error();
    assert!(error.is_panic());
    assert_eq!(
        error.to_string(),
        "a tool's definition panicked: definition boom (tool `fragile`, put in place by \
         before_turn)"
    );
    assert!(log.lock().unwrap().is_empty(), "no model call");
    assert_eq!(
        rec.lines(),
        [
            opening("go"),
            lines(&[
                "MessageStart(assistant)",
                r#"MessageEnd(assistant error "")"#,
                "TurnEnd(1 error)",
                "AgentEnd(error)",
            ]),
        ]
        .concat()
    );
    // The agent keeps the tools it had.
    let names: Vec<_> = agent
        .snapshot()
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["echo"]);
}

#[test]
fn debug_of_an_agent_with_a_panicking_name_does_not_panic() {
    let agent = Agent::builder()
        .provider(Faux::default())
        .tool(fragile("name", 2))
        .build()
        .unwrap();
    let text = format!("{agent:?}");
    assert!(text.contains("<name() panicked>"), "{text}");
}

// ---------------------------------------------------------------------------------------
// Transcripts with holes

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall::new(id, name, "{}")
}

fn calls_reply(ids: &[&str]) -> Message {
    Message::Assistant(
        AssistantMessage::new(
            ids.iter()
                .map(|id| ContentBlock::ToolCall(call(id, "echo")))
                .collect(),
            StopReason::ToolUse,
        )
        .with_model("m"),
    )
}

fn result(id: &str, content: &str, is_error: bool) -> Message {
    Message::ToolResult(ToolResultMessage::new(id, "echo", content).with_is_error(is_error))
}

fn session_path(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "pagent-robustness-{}-{name}.jsonl",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    path
}

/// Records a run of one two-call batch into a session file, then keeps its first `keep`
/// lines, as a crash in the middle of the batch leaves it.
fn session_cut_in_a_batch(name: &str, keep: usize) -> std::path::PathBuf {
    let path = session_path(name);
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("echo", json!({"x": 1})).then_tool_call("echo", json!({"x": 2})),
        )
        .reply(FauxReply::text("both ran"));
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .tool(echo())
        .max_parallel_tools(1)
        .build()
        .unwrap();
    let _sub = agent.subscribe(session::Writer::create(&path).unwrap().listener());
    agent.prompt("go").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 5);
    let cut: String = text.lines().take(keep).map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, cut).unwrap();
    path
}

#[test]
fn a_session_cut_in_the_middle_of_a_batch_continues_with_a_result_for_every_call() {
    let path = session_cut_in_a_batch("cut-batch", 3);
    let loaded = session::load(&path).unwrap();
    assert_eq!(
        described(&loaded.messages),
        [
            r#"user "go""#,
            r#"assistant tool_use "" [call_1 call_2]"#,
            "tool_result call_1"
        ]
    );
    let (faux, log) = faux_with_log(vec![FauxReply::text("done")]);
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .tool(echo())
        .messages(loaded.messages)
        .build()
        .unwrap();
    let _sub = agent.subscribe(session::Writer::append(&path).unwrap().listener());
    let rec = Recorder::attach(&agent);
    let run = agent.continue_run().unwrap();
    assert_eq!(run.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        [
            lines(&["AgentStart", "TurnStart(1)"]),
            results(&["call_2"]),
            text_reply("done"),
            lines(&["TurnEnd(1 no_tool_calls)", "AgentEnd(no_tool_calls)"]),
        ]
        .concat()
    );
    // The model got a valid request: the missing result right after the existing one.
    let sent = log.lock().unwrap()[0].messages.clone();
    assert_eq!(
        sent,
        [
            Message::user("go"),
            calls_reply_of(&sent[1]),
            result("call_1", "1", false),
            result("call_2", NO_RESULT, true),
        ]
    );
    // The transcript, and the session file, have it as a real message.
    let transcript = transcript(&agent);
    assert_eq!(transcript[..4], sent[..]);
    let reloaded = session::load(&path).unwrap();
    assert!(reloaded.warnings.is_empty(), "{:?}", reloaded.warnings);
    assert_eq!(reloaded.messages, transcript);
    std::fs::remove_file(&path).unwrap();
}

/// The assistant message as it was (compared by the test as a whole).
fn calls_reply_of(m: &Message) -> Message {
    assert_eq!(describe(m), r#"assistant tool_use "" [call_1 call_2]"#);
    m.clone()
}

#[test]
fn a_session_cut_right_after_the_calls_can_be_continued() {
    // Before, `continue_run` refused: the transcript ended with an assistant message.
    let path = session_cut_in_a_batch("cut-reply", 2);
    let loaded = session::load(&path).unwrap();
    let (faux, log) = faux_with_log(vec![FauxReply::text("done")]);
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .messages(loaded.messages)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    agent.continue_run().unwrap();
    assert_eq!(
        rec.lines(),
        [
            lines(&["AgentStart", "TurnStart(1)"]),
            results(&["call_1", "call_2"]),
            text_reply("done"),
            lines(&["TurnEnd(1 no_tool_calls)", "AgentEnd(no_tool_calls)"]),
        ]
        .concat()
    );
    assert_eq!(
        log.lock().unwrap()[0].messages[2..],
        [
            result("call_1", NO_RESULT, true),
            result("call_2", NO_RESULT, true)
        ]
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_prompt_after_unanswered_calls_comes_after_their_results() {
    let (faux, log) = faux_with_log(vec![FauxReply::text("ok")]);
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .messages([
            Message::user("go"),
            calls_reply(&["a", "b"]),
            result("a", "1", false),
        ])
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    agent.prompt("next").unwrap();
    assert_eq!(
        rec.lines(),
        [
            lines(&["AgentStart", "TurnStart(1)"]),
            results(&["b"]),
            user("next"),
            text_reply("ok"),
            lines(&["TurnEnd(1 no_tool_calls)", "AgentEnd(no_tool_calls)"]),
        ]
        .concat()
    );
    assert_eq!(
        described(&log.lock().unwrap()[0].messages),
        [
            r#"user "go""#,
            r#"assistant tool_use "" [a b]"#,
            "tool_result a",
            "tool_result b",
            r#"user "next""#,
        ]
    );
}

const OPENAI_TEXT: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n\
                           data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                           data: [DONE]\n\n";

#[test]
fn messages_with_a_hole_in_the_middle_are_sent_repaired() {
    // Handed to the builder: the transcript keeps them as given (a hole in the middle cannot
    // be filled by appending), and every request carries the missing result in its place.
    let given = vec![
        Message::user("a"),
        calls_reply(&["c1", "c2"]),
        result("c1", "one", false),
        Message::user("b"),
        Message::Assistant(
            AssistantMessage::new(vec![ContentBlock::text("fine")], StopReason::Stop)
                .with_model("m"),
        ),
    ];
    let server = http::Server::start(vec![http::Reply::sse(OPENAI_TEXT)]);
    let agent = Agent::builder()
        .provider(http::openai(&server))
        .model("m")
        .messages(given.clone())
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let run = bounded(move || {
        let run = agent.prompt("next").unwrap();
        (run, agent)
    });
    let (run, agent) = run;
    assert_eq!(run.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.lines(),
        [
            opening("next"),
            text_reply("ok"),
            lines(&["TurnEnd(1 no_tool_calls)", "AgentEnd(no_tool_calls)"]),
        ]
        .concat()
    );
    let body = server.requests()[0].json();
    let sent: Vec<(String, String)> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["tool_call_id"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let expect = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect()
    };
    assert_eq!(
        sent,
        expect(&[
            ("user", ""),
            ("assistant", ""),
            ("tool", "c1"),
            ("tool", "c2"),
            ("user", ""),
            ("assistant", ""),
            ("user", ""),
        ])
    );
    assert!(
        body["messages"][3]["content"]
            .to_string()
            .contains("never answered"),
        "{}",
        body["messages"][3]
    );
    let transcript = transcript(&agent);
    assert_eq!(
        transcript[..5],
        given[..],
        "the transcript is left as given"
    );
}

#[test]
fn a_result_pruned_by_transform_context_is_sent_repaired() {
    let (faux, log) = faux_with_log(vec![
        FauxReply::tool_call("echo", json!({"x": 1})),
        FauxReply::text("ok"),
    ]);
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .tool(echo())
        .transform_context(|messages| {
            messages
                .into_iter()
                .filter(|m| !matches!(**m, Message::ToolResult(_)))
                .collect()
        })
        .build()
        .unwrap();
    agent.prompt("go").unwrap();
    assert_eq!(
        log.lock().unwrap()[1].messages[2],
        result("call_1", NO_RESULT, true)
    );
    assert_eq!(
        agent.snapshot().messages[2].text(),
        "1",
        "the transcript keeps the real result"
    );
}

#[test]
fn set_tools_leaves_out_a_tool_whose_definition_panics() {
    // `set_tools` cannot fail: the model is not offered the tool (the state shows what the
    // model is offered), and the agent goes on with the others.
    let agent = Agent::builder().provider(Faux::default()).build().unwrap();
    agent.set_tools(vec![
        Arc::new(fragile("definition", 0)),
        Arc::new(echo()) as Arc<dyn Tool>,
    ]);
    let names: Vec<_> = agent
        .snapshot()
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["echo"]);
}

#[test]
fn repair_requests_off_sends_unanswered_calls_as_given() {
    let (faux, log) = faux_with_log(vec![FauxReply::text("ok")]);
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .tool(echo())
        .repair_requests(false)
        .build()
        .unwrap();
    let call = Message::Assistant(AssistantMessage::new(
        vec![ContentBlock::ToolCall(ToolCall::new(
            "call_9", "echo", "{}",
        ))],
        StopReason::ToolUse,
    ));
    let few_shot = vec![Message::user("a"), call.clone(), Message::user("b")];
    agent.prompt(few_shot.clone()).unwrap();
    // Sent exactly as given: no synthesized result after the call.
    assert_eq!(log.lock().unwrap()[0].messages, few_shot);
}

/// The README's recipe for small local models: a few-shot history of questions and calls
/// without results, handed to the builder, then `prompt`. The run-start repair used to
/// append a synthesized result for the last example call (into the transcript and the
/// request) whatever `repair_requests` said.
#[test]
fn repair_requests_off_leaves_the_last_unanswered_call_of_a_history_alone() {
    let (faux, log) = faux_with_log(vec![FauxReply::text("ok")]);
    let call = |id: &str| {
        Message::Assistant(AssistantMessage::new(
            vec![ContentBlock::ToolCall(ToolCall::new(id, "echo", "{}"))],
            StopReason::ToolUse,
        ))
    };
    let history = vec![
        Message::user("a"),
        call("call_1"),
        Message::user("b"),
        call("call_2"),
    ];
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .tool(echo())
        .messages(history.clone())
        .repair_requests(false)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    agent.prompt("c").unwrap();
    let mut sent = history.clone();
    sent.push(Message::user("c"));
    assert_eq!(log.lock().unwrap()[0].messages, sent);
    assert_eq!(
        rec.lines(),
        [
            lines(&["AgentStart", "TurnStart(1)"]),
            user("c"),
            text_reply("ok"),
            lines(&["TurnEnd(1 no_tool_calls)", "AgentEnd(no_tool_calls)"]),
        ]
        .concat()
    );
    let transcript = transcript(&agent);
    assert_eq!(transcript[..5], sent[..], "no synthesized result appended");
    // With nothing queued, a transcript that ends with such a call has nothing to continue.
    let agent = Agent::builder()
        .provider(Faux::default())
        .messages(history)
        .repair_requests(false)
        .build()
        .unwrap();
    let refused = agent.continue_run().unwrap_err();
    assert!(
        matches!(refused.error(), pagent::Error::NothingToContinue(_)),
        "{refused}"
    );
}

/// A hole in the middle of a transcript handed over is repaired in every request of a tool
/// loop, not only in the first. Each request checks only what its view appended since the
/// last check (a turn costs O(new messages)), which holds only while the part checked
/// before had no hole: a check that kept going from there would send the later requests
/// with the call unanswered.
#[test]
fn a_hole_in_the_middle_is_repaired_in_every_request_of_a_tool_loop() {
    let (faux, log) = faux_with_log(vec![
        FauxReply::tool_call("echo", json!({"x": 1})),
        FauxReply::tool_call("echo", json!({"x": 2})),
        FauxReply::text("done"),
    ]);
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .tool(echo())
        .messages([
            Message::user("a"),
            calls_reply(&["c1", "c2"]),
            result("c1", "one", false),
            Message::user("b"),
        ])
        .build()
        .unwrap();
    agent.prompt("next").unwrap();
    let sent: Vec<Vec<String>> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| described(&s.messages))
        .collect();
    let head = [
        r#"user "a""#,
        r#"assistant tool_use "" [c1 c2]"#,
        "tool_result c1",
        "tool_result c2",
        r#"user "b""#,
        r#"user "next""#,
    ];
    let expect = |turns: usize| -> Vec<String> {
        let mut v = lines(&head);
        for n in 1..=turns {
            v.push(format!(r#"assistant tool_use "" [call_{n}]"#));
            v.push(format!("tool_result call_{n}"));
        }
        v
    };
    assert_eq!(sent, [expect(0), expect(1), expect(2)]);
    for (i, s) in log.lock().unwrap().iter().enumerate() {
        assert_eq!(s.messages[3], result("c2", NO_RESULT, true), "request {i}");
    }
    // The transcript keeps the hole: it is repaired in requests only.
    assert_eq!(described(&transcript(&agent)[..4])[3], r#"user "b""#);
}

/// A `transform_context` hook may hand back anything, turn after turn: its messages are
/// checked whole every time. Here it passes the view unchanged three times, then swaps the
/// first result for a note, so that the request has the length of a grown view and the same
/// message where the last check ended: it must still carry a result for that call.
#[test]
fn a_result_a_transform_swaps_out_after_some_turns_is_sent_repaired() {
    let (faux, log) = faux_with_log(vec![
        FauxReply::tool_call("echo", json!({"x": 1})),
        FauxReply::tool_call("echo", json!({"x": 2})),
        FauxReply::tool_call("echo", json!({"x": 3})),
        FauxReply::text("done"),
    ]);
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let agent = Agent::builder()
        .provider(faux)
        .model("m")
        .tool(echo())
        .transform_context(move |mut messages| {
            if seen.fetch_add(1, Ordering::SeqCst) == 3 {
                messages[2] = Arc::new(Message::user("pruned"));
            }
            messages
        })
        .build()
        .unwrap();
    agent.prompt("go").unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let sent = log.lock().unwrap()[3].messages.clone();
    assert_eq!(
        described(&sent),
        [
            r#"user "go""#,
            r#"assistant tool_use "" [call_1]"#,
            "tool_result call_1",
            r#"user "pruned""#,
            r#"assistant tool_use "" [call_2]"#,
            "tool_result call_2",
            r#"assistant tool_use "" [call_3]"#,
            "tool_result call_3",
        ]
    );
    assert_eq!(sent[2], result("call_1", NO_RESULT, true));
}
