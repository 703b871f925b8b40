//! The stdio server on arbitrary request lines, with a scripted model: never panics,
//! returns once its input ends (every run it started goes to its end), and writes only
//! whole JSON lines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagent::llm::{Faux, FauxReply};
use pagent::wire::{ServeOptions, serve};
use pagent::{Agent, Message, Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};

/// Returns its arguments as text.
struct Echo;

impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Returns its arguments."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    fn execute(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(args.to_string()))
    }
}

/// A shared output the target reads after `serve` returned.
#[derive(Clone, Default)]
struct Output(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Output {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let (options, input) = pagent_fuzz::split_first(data);
    // The model calls `echo` after each user message, then answers: bounded turns per run.
    let model = Faux::default().otherwise(|request| match request.messages.last().map(|m| &**m) {
        Some(Message::User(_)) => FauxReply::tool_call("echo", json!({"n": 1})),
        _ => FauxReply::text("done"),
    });
    let builder = Agent::builder().provider(model).tool(Echo).max_turns(4);
    let options = ServeOptions::new()
        .approve_tools(options & 1 == 1)
        .max_line_len(options * 16);
    let output = Output::default();
    serve(builder, input, output.clone(), options).expect("serving from memory does not fail");
    let written = output.0.lock().unwrap().clone();
    let written = std::str::from_utf8(&written).expect("the server writes utf-8");
    for line in written.lines() {
        let value: Value = serde_json::from_str(line).expect("every line is JSON");
        assert_eq!(value["jsonrpc"], "2.0", "{line}");
    }
});
