//! An ACP agent: editors (Zed, JetBrains IDEs, Neovim plugins) start it and talk the Agent
//! Client Protocol with it over stdio.
//!
//! ```sh
//! cargo build --example acp_agent --features acp     # then point the editor at the binary
//! ```
//!
//! Offline it talks to a scripted demo model (the `Faux` provider) that thinks aloud, streams
//! its answers, and asks for the `write_file` tool when told to write (which asks the editor
//! for permission first); "tell me a story" starts a reply that never ends until it is
//! cancelled; "use the editor" reads `notes.md` through the editor, writes it back with a line
//! more (asking first, with the diff) and runs a command in the editor's terminal, when the editor offers its files and
//! terminals (`acp::SessionInfo::client_tools`), and "run a long command" runs one there
//! until it is cancelled; "ask me my name" asks the editor's user through a form
//! (`ToolContext::elicit`, relayed as `elicitation/create` when the editor shows forms); a
//! prompt with images or embedded resources is answered with what it holds, and the model
//! picker offers two demo models ("which model are you?"). With a
//! server named in the environment it
//! talks to that server instead (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `ANTHROPIC_API_KEY`,
//! `PAGENT_MODEL`, as the chat example). Sessions are saved under `$PAGENT_ACP_SESSIONS` when
//! that is set, and can then be loaded again. Logs go to stderr: stdout belongs to the protocol.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pagent::acp::{self, SessionInfo, ToolKind};
use pagent::llm::{Faux, FauxReply, Provider, Request};
use pagent::{Agent, AgentBuilder, Elicitation, ElicitationAnswer, Message, ToolOutput, tool};
use pagent::{Part, Source};
// `schemars` in scope for the derive: pagent's own, so no version to match by hand.
use pagent::schemars::{self, JsonSchema};
use serde::Deserialize;
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (provider, model) = provider()?;
    let mut options = acp::Options::new()
        .agent_info(
            "pagent-acp-agent",
            "pagent ACP agent",
            env!("CARGO_PKG_VERSION"),
        )
        .tool_kind("write_file", ToolKind::Edit)
        .tool_kind("read_file", ToolKind::Read)
        // Reading is harmless; writing asks the editor first (which shows the diff of a
        // write through the editor).
        .ask_permission(|call| call.name == "write_file" || call.name == acp::WRITE_TOOL)
        // `usage_update` after each reply needs the window; the demo's is made up.
        .context_window(8_192)
        // Two modes: the first holds in each new session.
        .mode(acp::Mode::new("code", "Code").description("Reads and writes files"))
        .mode(
            acp::Mode::new("ask", "Ask")
                .description("Reads files, changes nothing")
                .tools(["read_file"]),
        )
        .command(acp::Command::new("greet", "Says hello", |rest: &str| {
            format!("hello {rest}")
        }));
    if model == DEMO_MODEL {
        // The model picker: the demo answers as either (a real server's models are the
        // program's to list).
        options = options
            .model(DEMO_MODEL, "Demo")
            .model("pagent-demo-large", "Demo, large");
    }
    if let Some(dir) = std::env::var_os("PAGENT_ACP_SESSIONS").filter(|d| !d.is_empty()) {
        std::fs::create_dir_all(&dir)?;
        options = options.session_dir(dir);
    }
    let factory = |session: &SessionInfo| -> Result<AgentBuilder, pagent::Error> {
        eprintln!(
            "pagent acp: session {} in {}",
            session.id(),
            session.cwd().display()
        );
        let mut builder = Agent::builder()
            .provider(provider.clone())
            .model(model.clone())
            .system_prompt("You are a coding agent. Use the tools to read and write files.")
            .tool(write_file(session.cwd()))
            .tool(read_file(session.cwd()))
            .tool(ask_user());
        // The editor's own files (its unsaved buffers too) and terminal, as far as it
        // offers them: `editor_read_file`, `editor_write_file`, `editor_run_command`.
        for tool in session.client_tools() {
            builder = builder.tool_arc(tool);
        }
        Ok(builder)
    };
    acp::serve_stdio(factory, options)?;
    Ok(())
}

/// The model server and model the environment names, else the offline demo.
fn provider() -> Result<(Arc<dyn Provider>, String), pagent::Error> {
    match pagent::llm::from_env() {
        Ok(configured) => {
            eprintln!(
                "pagent acp: {} model `{}`, configured from the environment",
                configured.provider.name(),
                configured.model
            );
            return Ok((configured.provider, configured.model));
        }
        Err(e) if e.is_not_configured() => {}
        Err(e) => return Err(e),
    }
    eprintln!("pagent acp: offline demo on the scripted provider");
    Ok((
        Arc::new(Faux::default().otherwise(demo_reply)),
        DEMO_MODEL.into(),
    ))
}

const DEMO_MODEL: &str = "pagent-demo";

/// What the demo sees in a prompt besides its words: its images, documents and audio, and
/// the resources the editor embedded (`<context uri="..">`).
fn attachments(user: &pagent::UserMessage) -> Vec<String> {
    let mut seen: Vec<String> = user
        .content
        .iter()
        .filter_map(|part| {
            let kind = match part {
                Part::Image(_) => "an image",
                Part::Document(_) => "a document",
                Part::Audio(_) => "audio",
                _ => return None,
            };
            let what = part
                .source()
                .and_then(Source::media_type)
                .unwrap_or("by URL");
            Some(format!("{kind} ({what})"))
        })
        .collect();
    let text = user.text();
    seen.extend(
        text.split("<context uri=\"")
            .skip(1)
            .filter_map(|after| after.split_once('"'))
            .map(|(uri, _)| format!("the context of {uri}")),
    );
    seen
}

/// The offline demo model: answers from the last message of the request.
fn demo_reply(request: &Request) -> FauxReply {
    match request.messages.last().map(|m| &**m) {
        // "use the editor": read a file through the editor, write it back, run a command
        // in the editor's terminal, one call after another.
        Some(Message::ToolResult(result)) if result.tool_name == acp::READ_TOOL => {
            FauxReply::tool_call(
                acp::WRITE_TOOL,
                json!({"path": "notes.md", "content": format!("{}and a line from pagent\n", result.text())}),
            )
        }
        Some(Message::ToolResult(result)) if result.tool_name == acp::WRITE_TOOL => {
            FauxReply::tool_call(
                acp::TERMINAL_TOOL,
                json!({"command": "sh", "args": ["-c", "echo hello from the terminal; exit 3"]}),
            )
        }
        Some(Message::ToolResult(result)) if result.is_error => {
            FauxReply::text(format!("I did not write the file: {}.", result.text()))
        }
        Some(Message::ToolResult(result)) => FauxReply::text(format!("Done: {}.", result.text())),
        Some(Message::User(user)) => {
            let said = user.text().to_lowercase();
            let seen = attachments(user);
            if !seen.is_empty() {
                FauxReply::text(format!("I see {}.", seen.join(" and ")))
            } else if said.contains("which model") {
                FauxReply::text(format!("I am {}.", request.model))
            } else if said.contains("write") {
                FauxReply::default()
                    .then_thinking("I will write the file.")
                    .then_tool_call(
                        "write_file",
                        json!({"path": "notes.txt", "content": "hello from pagent\n"}),
                    )
            } else if said.contains("long command") {
                // A command that runs until the editor's user cancels the prompt.
                FauxReply::tool_call(
                    acp::TERMINAL_TOOL,
                    json!({"command": "sleep", "args": ["30"]}),
                )
            } else if said.contains("ask me my name") {
                FauxReply::tool_call("ask_user", json!({"question": "What is your name?"}))
            } else if said.contains("use the editor") {
                FauxReply::tool_call(acp::READ_TOOL, json!({"path": "notes.md"}))
            } else if said.contains("story") {
                // A reply that stalls until the editor cancels it.
                FauxReply::text("Once upon a time, ").then_stall(Duration::from_secs(60))
            } else {
                FauxReply::default()
                    .then_thinking("The user says hello.")
                    .then_text("Hello! I am a pagent agent.")
            }
        }
        _ => FauxReply::text("Hello."),
    }
}

#[derive(Deserialize, JsonSchema)]
struct AskArgs {
    /// The question for the user.
    question: String,
}

/// Asks the user a question through a form: the run shows it as an `ElicitationStart`, and
/// the ACP server sends it to an editor that shows forms (else the answer is `cancel`).
fn ask_user() -> impl pagent::Tool {
    tool::typed(
        "ask_user",
        "Asks the user a question.",
        |a: AskArgs, ctx| {
            let form = json!({"type": "object", "properties": {"answer": {"type": "string"}},
                          "required": ["answer"]});
            let question = Elicitation::form("pagent-acp-agent", a.question, form);
            Ok(ToolOutput::text(match ctx.elicit(question) {
                ElicitationAnswer::Accept(values) => format!("the user says {}", values["answer"]),
                ElicitationAnswer::Decline => "the user declined to answer".to_owned(),
                _ => "nobody answered".to_owned(),
            }))
        },
    )
}

#[derive(Deserialize, JsonSchema)]
struct WriteArgs {
    /// The file's path, relative to the session's directory.
    path: String,
    /// The new content of the file.
    content: String,
}

#[derive(Deserialize, JsonSchema)]
struct ReadArgs {
    /// The file's path, relative to the session's directory.
    path: String,
}

/// `relative` inside `root`, or an error for a path that would leave it.
fn inside(root: &Path, relative: &str) -> Result<PathBuf, String> {
    let path = Path::new(relative);
    if path.components().all(|c| matches!(c, Component::Normal(_))) {
        Ok(root.join(path))
    } else {
        Err(format!(
            "`{relative}` is not a path inside the session's directory"
        ))
    }
}

fn write_file(root: &Path) -> impl pagent::Tool + use<> {
    let root = root.to_owned();
    tool::typed(
        "write_file",
        "Writes a text file.",
        move |args: WriteArgs, _ctx| {
            let path = inside(&root, &args.path)?;
            std::fs::write(&path, &args.content).map_err(|e| e.to_string())?;
            Ok(ToolOutput::text(format!(
                "wrote {} bytes to {}",
                args.content.len(),
                args.path
            )))
        },
    )
}

fn read_file(root: &Path) -> impl pagent::Tool + use<> {
    let root = root.to_owned();
    tool::typed(
        "read_file",
        "Reads a text file.",
        move |args: ReadArgs, _ctx| {
            let path = inside(&root, &args.path)?;
            Ok(ToolOutput::text(
                std::fs::read_to_string(path).map_err(|e| e.to_string())?,
            ))
        },
    )
}
