//! A stdio agent server: JSON-RPC 2.0 requests on stdin, responses and events on stdout.
//!
//! ```sh
//! cargo run --example wire_server            # every tool call runs
//! cargo run --example wire_server -- --ask   # the client approves each tool call
//! python3 examples/wire_client.py target/debug/examples/wire_server --ask
//! ```
//!
//! It runs offline on a scripted demo model with one tool, `add`: a prompt with two numbers
//! ("What is 2 + 3?") makes it call `add`, and it answers from the result; any other prompt
//! is echoed. `--tokens-per-second N` paces the stream, to try `steer` and `abort` by hand.
//! See `pagent::wire::serve` for the protocol.

use std::io::{BufReader, stdin, stdout};

use pagent::llm::{Faux, FauxReply, Request};
use pagent::wire::{ServeOptions, serve};
use pagent::{Agent, Error, Message, ToolOutput, tool};
use serde_json::json;

#[derive(serde::Deserialize, pagent::schemars::JsonSchema)]
#[schemars(crate = "pagent::schemars")]
struct Add {
    /// The first term.
    a: f64,
    /// The second term.
    b: f64,
}

/// The scripted demo model: calls `add` for two numbers, answers from a tool result.
fn demo_reply(request: &Request) -> FauxReply {
    match request.messages.last().map(|m| &**m) {
        Some(Message::ToolResult(r)) if r.is_error => {
            FauxReply::text(format!("I could not add them: {}", r.text()))
        }
        Some(Message::ToolResult(r)) => FauxReply::text(format!("The sum is {}.", r.text())),
        Some(m) => {
            let text = m.text();
            let numbers: Vec<f64> = text
                .split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter_map(|w| w.parse().ok())
                .collect();
            match numbers[..] {
                [a, b, ..] => FauxReply::text("Let me add those.")
                    .then_tool_call("add", json!({ "a": a, "b": b })),
                _ => FauxReply::text(format!("You said: {text}")),
            }
        }
        None => FauxReply::text("Hello."),
    }
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ask = args.iter().any(|a| a == "--ask");
    let tokens_per_second: Option<f64> = args
        .iter()
        .position(|a| a == "--tokens-per-second")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok());
    let add = tool::typed("add", "Adds two numbers.", |args: Add, _ctx| {
        Ok(ToolOutput::text((args.a + args.b).to_string()))
    });
    // The scripted demo answers every request with `demo_reply`.
    let demo = Faux::default().otherwise(demo_reply);
    let demo = match tokens_per_second {
        Some(tps) => demo.tokens_per_second(tps),
        None => demo,
    };
    let builder = Agent::builder()
        .provider(demo)
        .model("demo")
        .system_prompt("You add numbers.")
        .tool(add);
    let options = ServeOptions::new().approve_tools(ask);
    serve(builder, BufReader::new(stdin().lock()), stdout(), options)
}
