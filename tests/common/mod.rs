//! Scenarios shared by the wire tests: scripted runs that cover every event path of the loop
//! (text, reasoning, tools, tool failures, max turns, length cuts, provider errors, aborts,
//! steering, follow-ups, hooks, tool progress, listener panics), each recorded three ways:
//! the events and snapshots a listener saw, and the native and pagent wire lines.

#![allow(dead_code)] // Each test binary uses a part of this module.

use std::sync::Arc;
use std::time::Duration;

use pagent::hooks::ToolDecision;
use pagent::llm::{Faux, FauxReply};
use pagent::wire::{Dialect, Writer};
use pagent::{
    Agent, AgentBuilder, AgentEvent, Document, Elicitation, ElicitationAnswer, ErrorKind,
    FinalTurn, Image, OutputSchema, OutputTurn, State, SteeringPolicy, ToolError, ToolOutput,
    UserMessage, tool,
};
use parking_lot::Mutex;
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    /// What to echo.
    pub text: String,
}

/// A structured answer.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    /// From 0 to 10.
    pub score: u8,
    pub reasons: Vec<String>,
}

/// The bytes of a tiny PNG image (a header and some bytes: nothing decodes it here).
pub const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06";

/// `echo`: returns its text. `fail` fails, `boom` panics, `slow` waits (abortably), `progress`
/// publishes two updates, `screenshot` returns an image (and publishes one as progress),
/// `ask` asks the user their name (an elicitation) and returns the answer.
pub fn echo() -> impl pagent::Tool {
    tool::typed("echo", "Echoes the text.", |a: EchoArgs, ctx| {
        match a.text.as_str() {
            "fail" => Err(ToolError::new("echo refused: fail")),
            "boom" => panic!("echo exploded"),
            "slow" => {
                ctx.sleep(Duration::from_secs(5));
                Ok(ToolOutput::text("slow done"))
            }
            "progress" => {
                ctx.update("half");
                ctx.update("almost");
                Ok(ToolOutput::text("progress done").with_details(json!({"steps": 2})))
            }
            "screenshot" => {
                ctx.update(ToolOutput::image(Image::new("image/png", PNG)));
                Ok(ToolOutput::text("the screen:").with_part(Image::new("image/png", PNG)))
            }
            "ask" => {
                let form = json!({"type": "object",
                    "properties": {"name": {"type": "string"}, "polite": {"type": "boolean", "default": true}},
                    "required": ["name"]});
                let answer = ctx.elicit(Elicitation::form("echo", "Your name?", form));
                Ok(ToolOutput::text(format!("{answer:?}")))
            }
            t => Ok(ToolOutput::text(t)),
        }
    })
}

/// What a scenario run left behind.
pub struct Recorded {
    pub name: &'static str,
    /// The state before the run (as a mirror starts).
    pub initial: State,
    /// Each event with the snapshot a listener read while handling it.
    pub events: Vec<(AgentEvent, State)>,
    pub native: String,
    pub v1: String,
    pub v4: String,
    pub agent: Agent,
}

pub type Action = fn(&Agent);

fn prompt(agent: &Agent) {
    // A scenario that fails on purpose (a provider error) returns its run inside the `Err`.
    if let Err(failed) = agent.prompt("Say hello.") {
        assert_ne!(failed.kind(), ErrorKind::Busy, "the run starts");
    }
}

/// A prompt with an image, a document by URL and an inline text document.
fn prompt_with_parts(agent: &Agent) {
    let message = UserMessage::new("What is on the screen?")
        .with_part(Image::new("image/png", PNG))
        .with_part(Document::url("https://example.com/spec.pdf"))
        .with_part(Document::text("notes.txt", "a \"note\"\n"));
    agent.prompt(message).unwrap();
}

fn faux_echo(text: &str) -> FauxReply {
    FauxReply::tool_call("echo", json!({ "text": text }))
}

/// Every scenario: a name, a builder and what to do with the agent.
pub fn scenarios() -> Vec<(&'static str, AgentBuilder, Action)> {
    let b = || {
        Agent::builder()
            .model("faux-1")
            .system_prompt("Be brief.")
            .tool(echo())
    };
    // A model that always calls `echo`.
    let always = || {
        (0..4).fold(Faux::default(), |f, i| {
            f.reply(faux_echo(&format!("again {i}")).with_id(format!("call_{i}")))
        })
    };
    vec![
        (
            "text",
            b().provider(Faux::default().reply(FauxReply::text("Hello, world!"))),
            prompt,
        ),
        (
            "reasoning",
            b().provider(
                Faux::default().reply(
                    FauxReply::default()
                        .then_thinking("thinking")
                        .then_text("Done."),
                ),
            ),
            prompt,
        ),
        (
            "tool",
            b().provider(
                Faux::default()
                    .reply(faux_echo("ping").with_id("call_0"))
                    .reply(FauxReply::text("echo said: ping")),
            ),
            prompt,
        ),
        (
            "tool2",
            b().provider(
                Faux::default()
                    .reply(
                        faux_echo("a")
                            .with_id("call_a")
                            .then_tool_call("echo", json!({"text": "b"}))
                            .with_id("call_b"),
                    )
                    .reply(FauxReply::text("both done")),
            ),
            prompt,
        ),
        (
            "images",
            b().provider(
                Faux::default()
                    .reply(faux_echo("screenshot"))
                    .reply(FauxReply::text("a tiny picture")),
            ),
            prompt_with_parts,
        ),
        (
            "tool_error",
            b().provider(
                Faux::default()
                    .reply(FauxReply::tool_call("nope", json!({})).with_id("call_x"))
                    .reply(FauxReply::text("recovered")),
            ),
            prompt,
        ),
        // pagent v1's max_turns: no final answer turn.
        (
            "maxturns",
            b().provider(always())
                .max_turns(2)
                .final_turn(FinalTurn::Off),
            prompt,
        ),
        // The default, pagent v4's: a final answer turn whose calls are not run.
        (
            "maxturns_final",
            b().provider(always()).max_turns(2),
            prompt,
        ),
        // pagent v5's: a final answer turn without tools.
        (
            "maxturns_withheld",
            b().provider(always())
                .max_turns(2)
                .final_turn(FinalTurn::ToolsWithheld),
            prompt,
        ),
        (
            "failing_tool",
            b().provider(
                Faux::default()
                    .reply(faux_echo("fail"))
                    .reply(FauxReply::text("it failed")),
            ),
            prompt,
        ),
        (
            "tool_panic",
            b().provider(
                Faux::default()
                    .reply(faux_echo("boom"))
                    .reply(FauxReply::text("it broke")),
            ),
            prompt,
        ),
        (
            "invalid_args",
            b().provider(
                Faux::default()
                    .reply(FauxReply::default().then_tool_call_raw("echo", "{not json"))
                    .reply(FauxReply::default().then_tool_call_raw("echo", "{\"txt\":1}"))
                    .reply(FauxReply::text("fixed")),
            ),
            prompt,
        ),
        (
            "tool_progress",
            b().provider(
                Faux::default()
                    .reply(faux_echo("progress").then_tool_call("echo", json!({"text": "x"})))
                    .reply(FauxReply::text("done")),
            ),
            prompt,
        ),
        (
            "cut_by_length",
            b().provider(
                Faux::default()
                    .reply(
                        FauxReply::text("Let me call")
                            .then_tool_call("echo", json!({"text": "long"}))
                            .cut_by_length(),
                    )
                    .reply(FauxReply::text("short answer")),
            ),
            prompt,
        ),
        (
            "provider_error",
            b().provider(
                Faux::default()
                    .reply(FauxReply::text("partial repl").then_error("connection reset")),
            ),
            prompt,
        ),
        (
            "fail_at_once",
            b().provider(Faux::default().reply(FauxReply::fail("503 from upstream"))),
            prompt,
        ),
        (
            "empty_response",
            b().provider(Faux::default().reply(FauxReply::empty())),
            prompt,
        ),
        (
            "unicode_newlines",
            b().provider(Faux::default().reply(FauxReply::text(
                "line one\nline \"two\"\r\n\u{2028}é😀\u{0}",
            ))),
            prompt,
        ),
        (
            "blocked_by_hook",
            b().provider(
                Faux::default()
                    .reply(faux_echo("rm -rf"))
                    .reply(FauxReply::text("ok, I won't")),
            )
            .before_tool_call(|r| {
                if r.args["text"] == "rm -rf" {
                    ToolDecision::Block("not allowed".into())
                } else {
                    ToolDecision::Allow
                }
            }),
            prompt,
        ),
        (
            "abort_mid_stream",
            b().provider(
                Faux::default()
                    .reply(FauxReply::text("a reply that will be cut short"))
                    .chunk_chars(2),
            ),
            |agent| {
                let h = agent.handle();
                let sub = agent.subscribe(move |e| {
                    if let AgentEvent::MessageUpdate { message, .. } = e
                        && message.text().len() >= 6
                    {
                        h.abort();
                    }
                });
                prompt(agent);
                sub.unsubscribe();
            },
        ),
        (
            "elicitation",
            b().provider(
                Faux::default()
                    .reply(faux_echo("ask"))
                    .reply(FauxReply::text("Hello.")),
            ),
            |agent| {
                // Answered as it is asked (an answer never blocks): from the run thread.
                let h = agent.handle();
                let sub = agent.subscribe(move |e| {
                    if let AgentEvent::ElicitationStart { id, .. } = e {
                        h.answer_elicitation(id, ElicitationAnswer::Accept(json!({"name": "Ann"})))
                            .unwrap();
                    }
                });
                prompt(agent);
                sub.unsubscribe();
            },
        ),
        (
            "abort_in_elicitation",
            b().provider(Faux::default().reply(faux_echo("ask"))),
            |agent| {
                let h = agent.handle();
                let sub = agent.subscribe(move |e| {
                    if let AgentEvent::ElicitationStart { .. } = e {
                        h.abort();
                    }
                });
                prompt(agent);
                sub.unsubscribe();
            },
        ),
        (
            "abort_in_tool",
            b().provider(
                Faux::default()
                    .reply(faux_echo("slow").then_tool_call("echo", json!({"text": "z"}))),
            ),
            |agent| {
                let h = agent.handle();
                let sub = agent.subscribe(move |e| {
                    if let AgentEvent::ToolStart { .. } = e {
                        h.abort();
                    }
                });
                prompt(agent);
                sub.unsubscribe();
            },
        ),
        (
            "steer",
            b().provider(Faux::default().reply(faux_echo("ping")).reply_with(|r| {
                FauxReply::text(format!(
                    "user messages: {}",
                    r.messages.iter().filter(|m| m.role() == "user").count()
                ))
            })),
            |agent| {
                let h = agent.handle();
                let sub = agent.subscribe(move |e| {
                    if let AgentEvent::ToolEnd { .. } = e {
                        h.steer("Also say goodbye.").unwrap();
                    }
                });
                prompt(agent);
                sub.unsubscribe();
            },
        ),
        (
            "steer_at_tool_boundary",
            b().provider(
                Faux::default()
                    .reply(faux_echo("one").then_tool_call("echo", json!({"text": "two"})))
                    .reply(FauxReply::text("stopped")),
            )
            .steering_policy(SteeringPolicy::AtToolBoundary)
            .max_parallel_tools(1),
            |agent| {
                let h = agent.handle();
                let sub = agent.subscribe(move |e| {
                    if let AgentEvent::ToolEnd { .. } = e {
                        let _ = h.steer("Stop that.");
                    }
                });
                prompt(agent);
                sub.unsubscribe();
            },
        ),
        (
            "follow_up",
            b().provider(
                Faux::default()
                    .reply(FauxReply::text("first"))
                    .reply(FauxReply::text("second")),
            ),
            |agent| {
                agent.follow_up("And then?").unwrap();
                prompt(agent);
            },
        ),
        (
            "listener_panic",
            b().provider(
                Faux::default()
                    .reply(faux_echo("ping"))
                    .reply(FauxReply::text("fine")),
            ),
            |agent| {
                let sub = agent.subscribe(|e| {
                    if let AgentEvent::ToolStart { .. } = e {
                        panic!("a listener bug");
                    }
                });
                prompt(agent);
                sub.unsubscribe();
            },
        ),
        (
            // The context reaches the policy's threshold after the tool ran: the first
            // messages are summarized (by the second scripted reply) before the next call.
            "compaction",
            b().context_window(4096)
                .context_policy(
                    pagent::context::Compaction::new()
                        .threshold_tokens(1)
                        .keep_recent_tokens(1),
                )
                .provider(
                    Faux::default()
                        .reply(faux_echo("ping").with_id("call_0"))
                        .reply(FauxReply::text("The user said hello; echo was called."))
                        .reply(FauxReply::text("echo said: ping")),
                ),
            prompt,
        ),
        (
            // A tool turn without the schema, an answer in prose, the answer turn.
            "structured",
            b().output_schema(OutputSchema::of::<Verdict>()).provider(
                Faux::default()
                    .reply(faux_echo("ping").with_id("call_0"))
                    .reply(FauxReply::text("A 7, since it answered."))
                    .reply(FauxReply::json(json!({"score": 7, "reasons": ["ping"]}))),
            ),
            prompt,
        ),
        (
            // The schema beside the tools; an answer of `null` and one out of range get
            // their repairs, and the run fails.
            "structured_fails",
            b().output_schema(OutputSchema::of::<Verdict>())
                .output_turn(OutputTurn::Every)
                .output_repairs(1)
                .provider(
                    Faux::default()
                        .reply(FauxReply::json(json!(null)))
                        .reply(FauxReply::json(json!({"score": 70, "reasons": []}))),
                ),
            prompt,
        ),
        (
            "two_runs",
            b().provider(
                Faux::default()
                    .reply(FauxReply::text("one"))
                    .reply(faux_echo("x"))
                    .reply(FauxReply::text("two")),
            ),
            |agent| {
                prompt(agent);
                agent.prompt("Again.").unwrap();
            },
        ),
    ]
}

/// Runs one scenario with a recorder and three wire writers attached.
pub fn record(name: &'static str, builder: AgentBuilder, action: Action) -> Recorded {
    let agent = builder.build().expect("the scenario builds");
    let initial = agent.snapshot().timeline();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let h = agent.handle();
    let _rec = agent.subscribe(move |e| sink.lock().push((e.clone(), h.snapshot().timeline())));
    let native = Writer::new(Vec::new());
    let v1 = Writer::with_dialect(Vec::new(), Dialect::PagentV1);
    let v4 = Writer::with_dialect(Vec::new(), Dialect::PagentV4);
    let _native = agent.subscribe(native.listener());
    let _v1 = agent.subscribe(v1.listener());
    let _v4 = agent.subscribe(v4.listener());
    action(&agent);
    let text = |w: &Writer<Vec<u8>>| {
        assert!(w.error().is_none());
        w.with_output(|b| String::from_utf8(b.clone()).expect("utf-8"))
    };
    let events = std::mem::take(&mut *events.lock());
    Recorded {
        name,
        initial,
        events,
        native: text(&native),
        v1: text(&v1),
        v4: text(&v4),
        agent,
    }
}

pub fn record_all() -> Vec<Recorded> {
    scenarios()
        .into_iter()
        .map(|(name, b, action)| record(name, b, action))
        .collect()
}
