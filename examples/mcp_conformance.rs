//! The client program the official MCP conformance suite (`@modelcontextprotocol/conformance`)
//! drives: for each client scenario the suite starts a server, runs this program with the
//! server's URL as its last argument (the scenario's name in `MCP_CONFORMANCE_SCENARIO`, its
//! settings, such as the tool calls to make or an OAuth client's credentials, as JSON in
//! `MCP_CONFORMANCE_CONTEXT`), and judges what the client sent. `.ci/conformance.sh` runs
//! every scenario.
//!
//! ```sh
//! cargo run --features mcp --example mcp_conformance -- http://localhost:3000/mcp
//! ```
//!
//! Whatever the scenario, it does what a program using `pagent::mcp` does: connect over
//! Streamable HTTP (either era of the protocol), list the tools, call each one (with the
//! arguments the context names, or arguments made from its input schema), and close. The
//! user's answers to the server's questions are scripted: a form is accepted with nothing
//! filled in, so the schema's defaults go back. It exits with 1 (saying why on stderr) when
//! any step fails.

use std::process::ExitCode;
use std::time::Duration;

use pagent::CancelToken;
use pagent::mcp::{Client, ElicitationAnswer, McpError};
use serde_json::{Map, Value, json};

fn main() -> ExitCode {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: mcp_conformance <server-url>");
        return ExitCode::from(2);
    };
    match run(&url, &scenario, &context) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{scenario}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(url: &str, scenario: &str, context: &Value) -> Result<(), McpError> {
    let client = Client::http(url)
        .call_timeout(Duration::from_secs(20))
        .on_elicitation(|question, _| {
            println!("asked: {}", question.message);
            ElicitationAnswer::Accept(json!({}))
        })
        .root("file:///tmp/conformance", Some("conformance"))
        .connect()?;
    let info = client.server_info();
    println!(
        "connected to {} (protocol {}, {:?} era)",
        info.name, info.protocol_version, info.era
    );
    let tools = client.list_tools()?;
    let calls: Vec<(String, Value)> = match context["toolCalls"].as_array() {
        Some(calls) => calls
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_owned(),
                    c["arguments"].clone(),
                )
            })
            .collect(),
        None => tools
            .iter()
            .map(|tool| {
                let arguments = if scenario == "json-schema-2020-12-preservation"
                    && tool.input_schema["required"] == json!(["schema"])
                {
                    // Hands back what the client kept of the other tool's schema.
                    tools
                        .iter()
                        .find(|t| t.name != tool.name)
                        .map_or(json!({}), |t| json!({"schema": t.input_schema}))
                } else {
                    arguments_for(&tool.input_schema)
                };
                (tool.name.clone(), arguments)
            })
            .collect(),
    };
    for (name, arguments) in calls {
        let result = client.call_tool(&name, arguments, &CancelToken::new(), &mut |p| {
            println!("progress: {}", p.to_output().to_text());
        });
        match result {
            Ok(result) => println!("{name}: {}", result.text()),
            // The server refused the call: what a program shows its user, then goes on.
            Err(e @ McpError::Rpc { .. }) => println!("{name}: {e}"),
            Err(e) => return Err(e),
        }
    }
    client.close();
    Ok(())
}

/// A value for each required property of an object schema, by its type.
fn arguments_for(schema: &Value) -> Value {
    let mut arguments = Map::new();
    let required = schema["required"].as_array().cloned().unwrap_or_default();
    for name in required.iter().filter_map(Value::as_str) {
        let value = match schema["properties"][name]["type"].as_str() {
            Some("number" | "integer") => json!(1),
            Some("boolean") => json!(true),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => json!("x"),
        };
        arguments.insert(name.to_owned(), value);
    }
    Value::Object(arguments)
}
