//! Typed structured output: which requests carry the schema, the check of the answer, the
//! answer and repair turns, the typed error; exact event sequences on the scripted provider.

use std::sync::Arc;

use pagent::llm::{Faux, FauxReply, Request};
use pagent::schemars::{self, JsonSchema};
use pagent::{
    Agent, AgentBuilder, AgentEvent, Error, ErrorKind, FinalTurn, Message, OutputSchema,
    OutputTurn, RunStopReason, ToolOutput, tool,
};
use serde::Deserialize;
use serde_json::json;

mod support;
use support::{Recorder, lines};

/// How good the text is.
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Verdict {
    /// From 0 to 10.
    score: u8,
    reasons: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
struct Word {
    word: String,
}

fn lookup() -> impl pagent::Tool {
    tool::typed("lookup", "Looks a word up.", |a: Word, _| {
        Ok(ToolOutput::text(format!("{} is a fine word", a.word)))
    })
}

fn builder(faux: &Faux) -> AgentBuilder {
    Agent::builder().provider(faux.clone()).model("m")
}

fn verdict_json() -> serde_json::Value {
    json!({"score": 7, "reasons": ["fine"]})
}

/// What each request asked of the answer: `None`, or the schema's name and `answer_now`.
fn asked(requests: &[Request]) -> Vec<Option<(String, bool)>> {
    requests
        .iter()
        .map(|r| {
            r.output
                .as_ref()
                .map(|o| (o.schema.name().to_owned(), o.answer_now))
        })
        .collect()
}

#[test]
fn without_tools_the_first_reply_is_the_answer() {
    let faux = Faux::default().reply(FauxReply::json(verdict_json()));
    let agent = builder(&faux).build().unwrap();
    let rec = Recorder::attach(&agent);
    let typed = agent.prompt_as::<Verdict>("Judge it.").unwrap();
    assert_eq!(
        typed.value,
        Verdict {
            score: 7,
            reasons: vec!["fine".into()]
        }
    );
    assert_eq!(typed.result.output, Some(verdict_json()));
    assert_eq!(typed.result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(asked(&faux.requests()), [Some(("Verdict".into(), true))]);
    assert_eq!(
        rec.lines(),
        lines(&[
            "AgentStart",
            "TurnStart 1",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "text x8 \"{\\\"reasons\\\":[\\\"fine\\\"],\\\"score\\\":7}\"",
            "usage in=2 out=7 cache_read=0 cache_write=0 reasoning=0 total=9",
            "MessageEnd assistant Stop calls=0",
            "OutputChecked 1 #1 ok {\"reasons\":[\"fine\"],\"score\":7}",
            "TurnEnd 1 no_tool_calls",
            "AgentEnd no_tool_calls in=2 out=7",
        ])
    );
    // The state keeps the check, shared with the event.
    let state = agent.snapshot();
    let check = state.output.clone().unwrap();
    assert_eq!(check.value, Ok(verdict_json()));
    assert_eq!((check.schema.as_str(), check.attempt), ("Verdict", 1));
    let from_event = rec.events().into_iter().find_map(|e| match e {
        AgentEvent::OutputChecked { check, .. } => Some(check),
        _ => None,
    });
    assert!(Arc::ptr_eq(&from_event.unwrap(), &check));
    // A plain prompt after it asks for no schema, and its state has no answer.
    faux.push(FauxReply::text("hi"));
    let plain = agent.prompt("Hello").unwrap();
    assert_eq!(plain.output, None);
    assert_eq!(faux.requests()[1].output, None);
    assert_eq!(agent.snapshot().output, None);
}

/// The trap of schemas sent with tools: the tool turns go without the schema, so a server
/// that turns it into a grammar still calls the tools. The answer in prose then gets one
/// answer turn (not a repair), which asks for the schema with the tools listed but not to
/// be called.
#[test]
fn tool_turns_keep_their_tools_and_the_answer_turn_asks_for_the_schema() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("lookup", json!({"word": "fine"})).with_id("c1"))
        .reply(FauxReply::text("It is a 7."))
        .reply(FauxReply::json(verdict_json()));
    let agent = builder(&faux)
        .tool(lookup())
        .output_repairs(0)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let typed = agent.prompt_as::<Verdict>("Judge the word fine.").unwrap();
    assert_eq!(typed.value.score, 7);
    let requests = faux.requests();
    assert_eq!(
        asked(&requests),
        [None, None, Some(("Verdict".into(), true))]
    );
    // The tools stay in the answer turn's request (the provider asks for no call).
    assert_eq!(requests[2].tools.len(), 1);
    let ask = requests[2].messages.last().unwrap().text();
    assert!(
        ask.starts_with(
            "Now give your final answer as only a JSON value that matches the JSON Schema \
             `Verdict`, with no other text.\n\n{"
        ),
        "{ask}"
    );
    assert!(ask.ends_with(&OutputSchema::of::<Verdict>().schema().to_string()));
    let got = rec.lines();
    let tail: Vec<&str> = got.iter().map(String::as_str).skip(5).collect();
    assert_eq!(got[..5], support::PROMPT);
    assert_eq!(
        tail,
        [
            "call c1 lookup",
            "args[0] x4 \"{\\\"word\\\":\\\"fine\\\"}\"",
            "usage in=5 out=3 cache_read=0 cache_write=0 reasoning=0 total=8",
            "MessageEnd assistant ToolUse calls=1",
            "ToolStart c1 lookup {\"word\":\"fine\"}",
            "ToolExecute c1 {\"word\":\"fine\"}",
            "ToolEnd c1 ok fine is a fine word",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "TurnEnd 1 continuing",
            "TurnStart 2",
            "MessageStart assistant",
            "text x3 \"It is a 7.\"",
            "usage in=9 out=2 cache_read=0 cache_write=0 reasoning=0 total=11",
            "MessageEnd assistant Stop calls=0",
            "OutputChecked 2 #1 err the answer is not JSON: expected value at line 1 column 1",
            "TurnEnd 2 continuing",
            "TurnStart 3",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "text x8 \"{\\\"reasons\\\":[\\\"fine\\\"],\\\"score\\\":7}\"",
            // Faux counts four characters a token: the answer turn's message holds the schema.
            "usage in=103 out=7 cache_read=0 cache_write=0 reasoning=0 total=110",
            "MessageEnd assistant Stop calls=0",
            "OutputChecked 3 #2 ok {\"reasons\":[\"fine\"],\"score\":7}",
            "TurnEnd 3 no_tool_calls",
            "AgentEnd no_tool_calls in=117 out=12",
        ]
    );
}

#[test]
fn an_answer_already_valid_costs_no_extra_call() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("lookup", json!({"word": "fine"})))
        .reply(FauxReply::text(format!("```json\n{}\n```", verdict_json())));
    let agent = builder(&faux).tool(lookup()).build().unwrap();
    let typed = agent.prompt_as::<Verdict>("Judge.").unwrap();
    assert_eq!(typed.value.reasons, ["fine"]);
    assert_eq!(faux.requests().len(), 2);
    assert_eq!(asked(&faux.requests()), [None, None]);
}

/// `OutputTurn::Every`: the schema goes with every request, beside the tools; an invalid
/// answer gets repair turns that say what was wrong, then the run fails with the answer's
/// text in the error.
#[test]
fn repairs_say_what_was_wrong_then_the_run_fails_with_the_answer() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("lookup", json!({"word": "fine"})))
        .reply(FauxReply::json(json!({"score": 300, "reasons": []})))
        .reply(FauxReply::json(json!({"score": 11})))
        .reply(FauxReply::text("no"));
    let agent = builder(&faux)
        .tool(lookup())
        .output_turn(OutputTurn::Every)
        .output_repairs(2)
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    let failed = agent.prompt_as::<Verdict>("Judge.").unwrap_err();
    assert_eq!(failed.kind(), ErrorKind::InvalidOutput);
    assert_eq!(
        failed.error(),
        &Error::InvalidOutput {
            message: "the answer is not JSON: expected ident at line 1 column 2".into(),
            raw: "no".into(),
        }
    );
    assert_eq!(failed.result().stop_reason, RunStopReason::Error);
    assert_eq!(failed.result().output, None);
    let requests = faux.requests();
    assert_eq!(
        asked(&requests),
        [
            Some(("Verdict".into(), false)),
            Some(("Verdict".into(), false)),
            Some(("Verdict".into(), true)),
            Some(("Verdict".into(), true)),
        ]
    );
    let first = requests[2].messages.last().unwrap().text();
    let (said, schema) = first.split_once("\n\n").unwrap();
    assert_eq!(
        said,
        "Your answer does not match the JSON Schema `Verdict`: at `/score`: 300 is above the \
         maximum 255. Answer again with only a JSON value that matches the schema, and no \
         other text."
    );
    assert_eq!(schema, OutputSchema::of::<Verdict>().schema().to_string());
    // The schema is shown once.
    assert_eq!(
        requests[3].messages.last().unwrap().text(),
        "Your answer does not match the JSON Schema `Verdict`: at the top level: the property \
         `reasons` is missing. Answer again with only a JSON value that matches the schema, \
         and no other text."
    );
    let checks: Vec<String> = rec
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("OutputChecked") || l.starts_with("TurnEnd"))
        .collect();
    assert_eq!(
        checks,
        [
            "TurnEnd 1 continuing",
            "OutputChecked 2 #1 err at `/score`: 300 is above the maximum 255",
            "TurnEnd 2 continuing",
            "OutputChecked 3 #2 err at the top level: the property `reasons` is missing",
            "TurnEnd 3 continuing",
            "OutputChecked 4 #3 err the answer is not JSON: expected ident at line 1 column 2",
            "TurnEnd 4 error",
        ]
    );
    let state = agent.snapshot();
    assert_eq!(state.error_kind, Some(ErrorKind::InvalidOutput));
    assert_eq!(
        state.error_message.as_deref(),
        Some("invalid output: the answer is not JSON: expected ident at line 1 column 2")
    );
    match rec.events().last() {
        Some(AgentEvent::AgentEnd { error: Some(e), .. }) => {
            assert_eq!(e.kind, ErrorKind::InvalidOutput)
        }
        other => panic!("{other:?}"),
    }
}

/// A reply that calls tools on an answer turn is no answer: its calls do not run (their
/// results say why) and a repair follows.
#[test]
fn tool_calls_on_an_answer_turn_do_not_run() {
    let faux = Faux::default()
        .reply(FauxReply::text("Let me think."))
        .reply(FauxReply::tool_call("lookup", json!({"word": "x"})).with_id("c9"))
        .reply(FauxReply::json(verdict_json()));
    let agent = builder(&faux).tool(lookup()).build().unwrap();
    let rec = Recorder::attach(&agent);
    let typed = agent.prompt_as::<Verdict>("Judge.").unwrap();
    assert_eq!(typed.value.score, 7);
    let got = rec.lines();
    let turn2: Vec<&str> = got
        .iter()
        .map(String::as_str)
        .skip_while(|l| *l != "TurnStart 2")
        .take_while(|l| *l != "TurnStart 3")
        .filter(|l| !l.starts_with("usage") && !l.starts_with("args") && !l.starts_with("call"))
        .collect();
    assert_eq!(
        turn2,
        [
            "TurnStart 2",
            "MessageStart user",
            "MessageEnd user",
            "MessageStart assistant",
            "MessageEnd assistant ToolUse calls=1",
            "MessageStart tool_result",
            "MessageEnd tool_result",
            "OutputChecked 2 #2 err the reply called tools instead of answering",
            "TurnEnd 2 continuing",
        ]
    );
    let result = typed
        .result
        .messages
        .iter()
        .find_map(|m| match &**m {
            Message::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert!(result.is_error);
    assert_eq!(
        result.text(),
        "not run: the answer was asked for on this turn, and its tool calls are not run"
    );
}

/// The final answer turn after `max_turns` is known to be final: it carries the schema.
/// Without a final turn there is no answer: `prompt_as` says so, `prompt` ends as asked.
#[test]
fn the_final_turn_carries_the_schema_and_without_one_there_is_no_answer() {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("lookup", json!({"word": "a"})))
        .reply(FauxReply::json(verdict_json()));
    let agent = builder(&faux).tool(lookup()).max_turns(1).build().unwrap();
    assert_eq!(agent.prompt_as::<Verdict>("Judge.").unwrap().value.score, 7);
    assert_eq!(
        asked(&faux.requests()),
        [None, Some(("Verdict".into(), true))]
    );

    let faux = Faux::default().reply(FauxReply::tool_call("lookup", json!({"word": "a"})));
    let agent = builder(&faux)
        .tool(lookup())
        .max_turns(1)
        .final_turn(FinalTurn::Off)
        .output_schema(OutputSchema::of::<Verdict>())
        .build()
        .unwrap();
    let result = agent.prompt("Judge.").unwrap();
    assert_eq!(
        (result.stop_reason, result.output),
        (RunStopReason::MaxTurns, None)
    );
    assert_eq!(agent.snapshot().output, None);
    faux.push(FauxReply::tool_call("lookup", json!({"word": "b"})));
    let failed = agent.prompt_as::<Verdict>("Again.").unwrap_err();
    assert_eq!(
        failed.error(),
        &Error::InvalidOutput {
            message: "the run ended (max_turns) without an answer".into(),
            raw: String::new(),
        }
    );
    assert_eq!(failed.result().stop_reason, RunStopReason::MaxTurns);
}

/// What the schema cannot say, the type's own deserialization checks, and a repair turn
/// tells the model.
#[test]
fn the_type_checks_the_answer_too() {
    let faux = Faux::default()
        .reply(FauxReply::json(json!({"score": 3.0, "reasons": []})))
        .reply(FauxReply::json(json!({"score": 3, "reasons": []})));
    let agent = builder(&faux).build().unwrap();
    let rec = Recorder::attach(&agent);
    assert_eq!(agent.prompt_as::<Verdict>("Judge.").unwrap().value.score, 3);
    let checks: Vec<String> = rec
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("OutputChecked"))
        .collect();
    assert_eq!(
        checks,
        [
            "OutputChecked 1 #1 err the answer does not fit: invalid type: floating point \
             `3.0`, expected u8",
            "OutputChecked 2 #2 ok {\"reasons\":[],\"score\":3}",
        ]
    );
}

#[test]
fn a_cut_answer_says_so() {
    let faux = Faux::default()
        .reply(FauxReply::text("{\"score\": 3, \"rea").cut_by_length())
        .reply(FauxReply::json(json!({"score": 3, "reasons": []})));
    let agent = builder(&faux).build().unwrap();
    agent.prompt_as::<Verdict>("Judge.").unwrap();
    let repair = faux.requests()[1].messages.last().unwrap().text();
    assert!(
        repair.starts_with(
            "Your answer does not match the JSON Schema `Verdict`: the answer is not JSON: \
             EOF while parsing a string at line 1 column 17 (the reply was cut at its output \
             token limit). Answer again"
        ),
        "{repair}"
    );
}

/// A schema known at run time: the answer is checked against it alone, and the value is in
/// the result. The agent's own schema is every run's; a run's own replaces it.
#[test]
fn dynamic_schemas_and_the_agents_own() {
    let schema = OutputSchema::new(
        "Colors",
        json!({"type": "array", "items": {"enum": ["red", "green"]}, "minItems": 1}),
    )
    .unwrap();
    assert_eq!(schema.why_not_strict(), Some("its root is not an object"));
    let faux = Faux::default()
        .reply(FauxReply::json(json!(["red", "blue"])))
        .reply(FauxReply::json(json!(["green"])))
        .reply(FauxReply::json(json!({"word": "x"})));
    let agent = builder(&faux).output_schema(schema).build().unwrap();
    let result = agent.prompt("Colors?").unwrap();
    assert_eq!(result.output, Some(json!(["green"])));
    assert_eq!(result.output_as::<Vec<String>>().unwrap(), ["green"]);
    let repair = faux.requests()[1].messages.last().unwrap().text();
    assert!(
        repair.contains(r#"at `/1`: "blue" is not one of ["red","green"]"#),
        "{repair}"
    );
    let word = agent
        .prompt_with_output("A word?", OutputSchema::of::<Word>())
        .unwrap();
    assert_eq!(word.output, Some(json!({"word": "x"})));
    assert_eq!(
        faux.requests()[2].output.as_ref().unwrap().schema.name(),
        "Word"
    );
}

#[test]
fn an_aborted_run_has_no_answer() {
    let faux =
        Faux::default().reply(FauxReply::text("{}").delay(std::time::Duration::from_secs(5)));
    let agent = builder(&faux).build().unwrap();
    let handle = agent.handle();
    let aborter = std::thread::spawn(move || {
        for _ in 0..500 {
            if handle.abort() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        false
    });
    let failed = agent.prompt_as::<Verdict>("Judge.").unwrap_err();
    assert!(aborter.join().unwrap());
    assert_eq!(failed.error(), &Error::Aborted);
    assert_eq!(failed.result().stop_reason, RunStopReason::Cancelled);
}

#[path = "structured/providers.rs"]
mod providers;

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Ticket {
    #[schemars(regex(pattern = r"^[A-Z]{3}-[0-9]+$"))]
    id: String,
}

/// A `pattern` of the schema is checked like every other keyword: an answer that breaks it
/// gets a repair turn that names the pattern.
#[test]
fn a_pattern_of_the_schema_is_checked_and_repaired() {
    let faux = Faux::default()
        .reply(FauxReply::json(json!({"id": "abc-1"})))
        .reply(FauxReply::json(json!({"id": "ABC-1"})));
    let agent = builder(&faux).build().unwrap();
    let typed = agent.prompt_as::<Ticket>("Which ticket?").unwrap();
    assert_eq!(typed.value, Ticket { id: "ABC-1".into() });
    let repair = faux.requests()[1].messages.last().unwrap().text();
    let (said, _schema) = repair.split_once("\n\n").unwrap();
    assert_eq!(
        said,
        "Your answer does not match the JSON Schema `Ticket`: at `/id`: \"abc-1\" does not \
         match the pattern `^[A-Z]{3}-[0-9]+$`. Answer again with only a JSON value that \
         matches the schema, and no other text."
    );
}
