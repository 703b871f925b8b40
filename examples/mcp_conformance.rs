//! The client program the official MCP conformance suite (`@modelcontextprotocol/conformance`)
//! drives: for each client scenario the suite starts a server, runs this program with the
//! server's URL as its last argument (and the scenario's name in `MCP_CONFORMANCE_SCENARIO`),
//! and judges what the client sent. `.ci/conformance.sh` runs every scenario.
//!
//! ```sh
//! cargo run --features mcp --example mcp_conformance -- http://localhost:3000/mcp
//! ```
//!
//! Whatever the scenario, it does what a program using `pagent::mcp` does: connect over
//! Streamable HTTP, list the tools, call each one with arguments made from its input schema,
//! and close. It exits with 1 (saying why on stderr) when any step fails.

use std::process::ExitCode;
use std::time::Duration;

use pagent::CancelToken;
use pagent::mcp::{Client, McpError};
use serde_json::{Map, Value, json};

fn main() -> ExitCode {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: mcp_conformance <server-url>");
        return ExitCode::from(2);
    };
    match run(&url) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{scenario}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(url: &str) -> Result<(), McpError> {
    let client = Client::http(url)
        .call_timeout(Duration::from_secs(20))
        .connect()?;
    let info = client.server_info();
    println!(
        "connected to {} (protocol {})",
        info.name, info.protocol_version
    );
    for tool in client.list_tools()? {
        let arguments = arguments_for(&tool.input_schema);
        let result = client.call_tool(&tool.name, arguments, &CancelToken::new(), &mut |p| {
            println!("progress: {}", p.to_output().to_text());
        })?;
        println!("{}: {}", tool.name, result.text());
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
