//! Following a Python pagent agent from Rust: its wire lines in, the mirrored state out.
//!
//! ```sh
//! python my_pagent_agent.py | cargo run --example pagent_mirror
//! cargo run --example pagent_mirror < tests/data/pagent-wire/captures/v4_tool.jsonl
//! ```
//!
//! Reads lines from stdin as they come: pagent v1 (`Agent.arun_wire`) or v4
//! (`Runner.run(return_type="acp")`) lines, or our own native ones; a `wire::Mirror` tells
//! the dialect from the first line and maps pagent's lines onto our events. After each event
//! it prints one line: the event, whether a run is going, the turn, the transcript's length
//! and last message, the reply as far as it streamed, the tool calls running, and the stop
//! reason once the run ended. Output is flushed per line, so a program reading it follows
//! the run live. A line that does not decode ends the example with the error.

use std::error::Error;
use std::io::Write;

use pagent::wire::Mirror;
use pagent::{AgentEvent, State};

fn main() -> Result<(), Box<dyn Error>> {
    let mut mirror = Mirror::new();
    let mut out = std::io::stdout().lock();
    let mut failed = None;
    // Blocks until stdin ends, calling back with each event and the state after it as each
    // line arrives. At the end it calls `Mirror::finish`: a pagent run whose lines break off
    // before its `RunEnd` failed, and the events that say so come last.
    let read = mirror.read_lines(std::io::stdin().lock(), |event, state| {
        if failed.is_none()
            && let Err(e) = writeln!(out, "{}", describe(event, state)).and_then(|()| out.flush())
        {
            failed = Some(e);
        }
    });
    if let Some(e) = failed {
        return Err(e.into());
    }
    read?;
    Ok(())
}

/// One line for the state after `event`.
fn describe(event: &AgentEvent, state: &State) -> String {
    let mut line = format!(
        "{} {} turn={} messages={}",
        event.name(),
        if state.is_streaming {
            "running"
        } else {
            "idle"
        },
        state.turn,
        state.messages.len()
    );
    if let Some(last) = state.messages.last() {
        line += &format!(" last={}:{}", last.role(), last.text());
    }
    if let Some(reply) = &state.streaming_message {
        line += &format!(" streaming={:?}", reply.text());
    }
    if !state.pending_tool_calls.is_empty() {
        let names: Vec<&str> = state
            .pending_tool_calls
            .iter()
            .map(|p| p.call.name.as_str())
            .collect();
        line += &format!(" pending={}", names.join(","));
    }
    if !state.is_streaming
        && let Some(stop) = state.stop_reason
    {
        line += &format!(" stop={stop}");
    }
    line
}
