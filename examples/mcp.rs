//! An agent with the tools of an MCP server given on the command line.
//!
//! ```sh
//! mkdir -p /tmp/notes
//! cargo run --example mcp --features mcp -- npx -y @modelcontextprotocol/server-filesystem /tmp/notes
//! cargo run --example mcp --features mcp -- npx -y @modelcontextprotocol/server-everything
//! cargo run --example mcp --features mcp -- http://127.0.0.1:8000/mcp   # Streamable HTTP
//! ```
//!
//! (Through `npx` the server runs as a grandchild; the client ends it with its whole process
//! group on unix.)
//!
//! With a model server named in the environment (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`,
//! `OPENAI_BASE_URL`..., as for the chat example) the model decides what to call. Offline
//! it runs on the scripted `Faux` provider, which calls the server's tools itself: with the
//! filesystem server it writes a note into the first allowed directory and reads it back;
//! with any other server it calls `echo`, or else the first tool whose required arguments
//! are strings or numbers.

use std::sync::Arc;

use pagent::llm::{Faux, FauxReply, FromEnv, Request};
use pagent::mcp::Client;
use pagent::{Agent, AgentEvent, Message, Tool};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: mcp <program> [args...] | mcp <http://host:port/mcp>");
        std::process::exit(2);
    };
    let builder = if program.starts_with("http://") || program.starts_with("https://") {
        Client::http(program.clone())
    } else {
        Client::stdio(program.clone()).args(rest.iter().cloned())
    };
    let client = builder.connect()?;
    let info = client.server_info();
    eprintln!(
        "connected to {} {} (protocol {})",
        info.name, info.version, info.protocol_version
    );
    let tools = client.tools()?;
    let names: Vec<String> = tools.iter().map(|t| t.name().to_owned()).collect();
    eprintln!("tools: {}", names.join(", "));

    let configured = pagent::llm::from_env_or(|| {
        eprintln!("offline: the scripted provider calls the tools");
        FromEnv::new(offline(&tools), "faux")
    })?;
    let sync = client.clone();
    let mut agent = Agent::builder()
        .provider(configured.provider)
        .model(configured.model)
        // A server may change its tools; the model sees the new list from the next turn.
        .before_turn(move |setup| {
            let _ = sync.sync_tools(&mut setup.tools);
        });
    for tool in tools {
        agent = agent.tool_arc(tool);
    }
    let agent = agent.build()?;
    let _printer = agent.subscribe(|event: &AgentEvent| match event {
        AgentEvent::ToolStart { call, .. } => println!("-> {} {}", call.name, call.arguments),
        AgentEvent::ToolUpdate { partial, .. } => println!("   .. {}", partial.to_text()),
        AgentEvent::ToolEnd { result, .. } => {
            let mark = if result.is_error { "error" } else { "ok" };
            println!("<- {mark}: {}", first_lines(&result.text(), 6));
        }
        AgentEvent::MessageEnd { message } => {
            if let Message::Assistant(reply) = &**message
                && !reply.text().is_empty()
            {
                println!("{}", reply.text());
            }
        }
        _ => {}
    });
    let prompt = "Use the tools to show what this server can do.";
    println!("> {prompt}");
    agent.prompt(prompt)?;
    client.close();
    Ok(())
}

/// The scripted model: a plan of tool calls made from the server's tool list.
fn offline(tools: &[Arc<dyn Tool>]) -> Faux {
    let has = |name: &str| tools.iter().any(|t| t.name() == name);
    let faux = Faux::default();
    if has("list_allowed_directories") && has("write_file") && has("read_text_file") {
        return faux
            .reply(FauxReply::tool_call("list_allowed_directories", json!({})))
            .reply_with(|request: &Request| {
                // The first line after the heading names a directory the server allows.
                let listing = last_result(request);
                let dir = listing
                    .lines()
                    .find(|l| l.starts_with('/'))
                    .unwrap_or(".")
                    .trim()
                    .to_owned();
                let path = format!("{dir}/pagent-mcp-note.txt");
                FauxReply::tool_call(
                    "write_file",
                    json!({"path": path, "content": "written by pagent through MCP\n"}),
                )
            })
            // The next turn, so that it reads what the write left (calls of one reply may
            // run in parallel).
            .reply_with(|request: &Request| {
                let path = last_result(request)
                    .rsplit(' ')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                FauxReply::tool_call("read_text_file", json!({"path": path}))
            })
            .reply_with(|request: &Request| {
                FauxReply::text(format!("The note reads: {}", last_result(request).trim()))
            });
    }
    // `echo` if there is one, else the first tool whose required arguments are all strings
    // or numbers (leaving out any that would print the environment).
    let simple = |t: &&Arc<dyn Tool>| {
        let schema = t.parameters();
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        !t.name().contains("env")
            && required.iter().all(|name| {
                let kind = &schema["properties"][name.as_str().unwrap_or("")]["type"];
                kind == "string" || kind == "number" || kind == "integer"
            })
    };
    let Some(tool) = tools
        .iter()
        .find(|t| t.name() == "echo")
        .or_else(|| tools.iter().find(simple))
    else {
        return faux.reply(FauxReply::text(
            "No tool here takes simple arguments; set a model server to choose them.",
        ));
    };
    let schema = tool.parameters();
    let mut args = serde_json::Map::new();
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap_or_default();
        let value = match schema["properties"][name]["type"].as_str() {
            Some("string") => json!("hello from pagent"),
            _ => json!(1),
        };
        args.insert(name.to_owned(), value);
    }
    faux.reply(FauxReply::tool_call(tool.name(), args.into()))
        .reply_with(|request: &Request| {
            FauxReply::text(format!(
                "The server answered: {}",
                first_lines(&last_result(request), 3)
            ))
        })
}

/// The text of the last tool result the model was sent.
fn last_result(request: &Request) -> String {
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match &**m {
            Message::ToolResult(r) => Some(r.text()),
            _ => None,
        })
        .unwrap_or_default()
}

fn first_lines(text: &str, n: usize) -> String {
    let mut lines: Vec<&str> = text.lines().take(n).collect();
    if text.lines().count() > n {
        lines.push("...");
    }
    lines.join("\n   ")
}
