//! A typed tool: its arguments are a struct deriving `Deserialize + JsonSchema`, which gives
//! the schema the model sees and the validation of what the model sends back.
//!
//! ```sh
//! cargo run --example typed_tool          # asks you to approve each call
//! cargo run --example typed_tool -- --yes # approves every call
//! ```
//!
//! The scripted model makes the mistakes real models make: a string where a number belongs
//! (serde rejects it, and the model reads why), a number out of range (the tool rejects it),
//! then a good call, which a `before_tool_call` hook puts to you on the terminal before it
//! runs, reporting its progress as it goes. Then it asks for a file you should decline.

use std::collections::HashMap;
use std::error::Error;
use std::io::{self, BufRead, IsTerminal, Write};
use std::thread;
use std::time::Duration;

use pagent::hooks::{ToolCallRequest, ToolDecision};
use pagent::llm::{Faux, FauxReply, FromEnv, Request};
use pagent::{Agent, AgentEvent, ToolError, ToolOutput, crossbeam_channel, tool};
// `schemars` in scope for the derive: pagent's own, so no version to match by hand.
use pagent::schemars::{self, JsonSchema};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::json;

/// The arguments of `word_stats`. The doc comments become the schema's descriptions.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WordStats {
    /// The text file to read, relative to the current directory.
    path: String,
    /// How many of the most frequent words to list, from 1 to 20.
    #[serde(deserialize_with = "one_to_twenty")]
    #[schemars(range(min = 1, max = 20))]
    top: u8,
}

/// What the type alone cannot say, the deserializer checks: the call never reaches the
/// approval prompt or the tool, and the model reads the message.
fn one_to_twenty<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    let n = u8::deserialize(d)?;
    if (1..=20).contains(&n) {
        Ok(n)
    } else {
        Err(D::Error::custom(format!(
            "`top` must be from 1 to 20, not {n}"
        )))
    }
}

fn word_stats() -> impl pagent::Tool {
    tool::typed(
        "word_stats",
        "Counts the words of a text file and lists the most frequent ones.",
        |args: WordStats, ctx| {
            // An `Err` is an error result the model reads; the run goes on.
            let text = std::fs::read_to_string(&args.path)
                .map_err(|e| ToolError::new(format!("cannot read {}: {e}", args.path)))?;
            let lines: Vec<&str> = text.lines().collect();
            let mut counts: HashMap<String, usize> = HashMap::new();
            let mut done = 0;
            for chunk in lines.chunks(10) {
                // A pause per chunk, as if the file were large; abort ends it at once.
                if ctx.sleep(Duration::from_millis(20)) {
                    return Err(ToolError::new("aborted"));
                }
                for word in chunk
                    .iter()
                    .flat_map(|l| l.split(|c: char| !c.is_alphanumeric()))
                {
                    if word.len() > 2 {
                        *counts.entry(word.to_lowercase()).or_default() += 1;
                    }
                }
                done += chunk.len();
                ctx.update(format!("{done} of {} lines", lines.len()));
            }
            let total: usize = counts.values().sum();
            let mut ranked: Vec<(String, usize)> = counts.into_iter().collect();
            ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            ranked.truncate(usize::from(args.top));
            let list: Vec<String> = ranked.iter().map(|(w, n)| format!("{w} ({n})")).collect();
            Ok(
                ToolOutput::text(format!("{total} words; most frequent: {}", list.join(", ")))
                    .with_details(json!({ "total": total, "top": ranked })),
            )
        },
    )
}

fn main() -> Result<(), Box<dyn Error>> {
    let approve_all = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--yes") => true,
        Some(other) => {
            return Err(format!("unknown argument {other}; usage: typed_tool [--yes]").into());
        }
    };
    // Lines from stdin arrive on a channel, so the hook can wait for one and still be
    // released by `abort()` (see `ToolCallRequest::wait_for`).
    let (line_tx, lines) = crossbeam_channel::unbounded();
    thread::spawn(move || {
        for line in io::stdin().lock().lines().map_while(Result::ok) {
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });

    // A server named in the environment (OPENAI_*, ANTHROPIC_*, PAGENT_MODEL), else the
    // scripted demo (no model name: "" is the provider's default).
    let chosen = pagent::llm::from_env_or(|| FromEnv::new(script(), ""))?;
    let builder = Agent::builder()
        .provider(chosen.provider)
        .model(chosen.model);
    let agent = builder
        .tool(word_stats())
        .before_tool_call(move |request: &ToolCallRequest<'_>| {
            if approve_all {
                return ToolDecision::Allow;
            }
            // Runs on the run thread; the run waits here until the person answers.
            print!("  allow {} {}? [y/N] ", request.call.name, request.args);
            let _ = io::stdout().flush();
            let answer = request.wait_for(&lines);
            if !io::stdin().is_terminal() {
                // Piped answers are not echoed by the terminal; echo them for the transcript.
                println!("{}", answer.as_deref().unwrap_or(""));
            }
            match answer {
                Some(answer) if matches!(answer.trim(), "y" | "Y" | "yes") => ToolDecision::Allow,
                Some(_) => ToolDecision::Block("the user declined".into()),
                None => ToolDecision::Block("nobody answered".into()),
            }
        })
        .build()?;
    let _printer = agent.subscribe(print_event);
    let result = agent.prompt("Which words does Cargo.toml use most? And /etc/passwd?")?;
    println!("run ended: {}", result.stop_reason);
    Ok(())
}

fn print_event(event: &AgentEvent) {
    match event {
        AgentEvent::MessageEnd { message } => {
            if let Some(reply) = message.as_assistant().filter(|r| !r.text().is_empty()) {
                println!("model: {}", reply.text());
            }
        }
        AgentEvent::ToolStart { call, .. } => println!("  call {} {}", call.name, call.arguments),
        AgentEvent::ToolUpdate { partial, .. } => println!("    progress: {}", partial.to_text()),
        AgentEvent::ToolEnd { result, .. } => {
            // The schema that follows a validation error is for the model, not for people.
            let text = result.text();
            let shown = text.split(". Expected arguments").next().unwrap_or("");
            let kind = if result.is_error { "error" } else { "result" };
            println!("  {kind}: {shown}");
        }
        _ => {}
    }
}

/// The scripted model: each reply reads the last tool result, as a real model would.
fn script() -> Faux {
    let last_result = |request: &Request| {
        let text = request
            .messages
            .last()
            .map(|m| m.text())
            .unwrap_or_default();
        text.split(". Expected arguments")
            .next()
            .unwrap_or("")
            .to_owned()
    };
    Faux::default()
        .reply(
            FauxReply::text("Let me count the words in Cargo.toml.")
                .then_tool_call("word_stats", json!({ "path": "Cargo.toml", "top": "five" })),
        )
        .reply_with(move |request| {
            FauxReply::text(format!(
                "The tool said: {}. Retrying.",
                last_result(request)
            ))
            .then_tool_call("word_stats", json!({ "path": "Cargo.toml", "top": 50 }))
        })
        .reply_with(move |request| {
            FauxReply::text(format!(
                "The tool said: {}. Asking for 5.",
                last_result(request)
            ))
            .then_tool_call("word_stats", json!({ "path": "Cargo.toml", "top": 5 }))
        })
        .reply_with(|_| {
            FauxReply::text("Now /etc/passwd.")
                .then_tool_call("word_stats", json!({ "path": "/etc/passwd", "top": 3 }))
        })
        .reply_with(|_| {
            FauxReply::text("And the file my notes mention.").then_tool_call(
                "word_stats",
                json!({ "path": "no/such/file.txt", "top": 3 }),
            )
        })
        .reply_with(|request| {
            let results: Vec<String> = request
                .messages
                .iter()
                .filter_map(|m| m.as_tool_result())
                .map(|r| r.text())
                .collect();
            let n = results.len();
            let nth_last = |k: usize| n.checked_sub(k).map_or("-", |i| results[i].as_str());
            FauxReply::text(format!(
                "Cargo.toml: {}. /etc/passwd: {}. The notes' file: {}.",
                nth_last(3),
                nth_last(2),
                nth_last(1)
            ))
        })
}
