//! The client's files and terminals as tools: what `initialize`'s `clientCapabilities`
//! advertise (`fs.readTextFile`, `fs.writeTextFile`, `terminal`) becomes a tool whose calls
//! are requests to the client (`fs/*`, `terminal/*`), waited for with the run's cancel token
//! and a timeout, and given up with `$/cancel_request`.
//!
//! Every way a request can go wrong (an error answer, an answer of the wrong shape, no
//! answer in time, the client gone, the run aborted) becomes a [`ToolError`] naming the
//! method, so the call gets an error result and the transcript stays whole. A terminal the
//! client created is released on every path out, and killed first when the command may
//! still run.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use super::map::{Location, ToolContent};
use super::{SessionInfo, ToolKind};
use crate::cancel::CancelToken;
use crate::jsonrpc::{CallError, Peer};
use crate::message::ToolCall;
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput};

/// The name of the tool that reads a text file through the client (`fs/read_text_file`).
pub const READ_TOOL: &str = "editor_read_file";
/// The name of the tool that writes a text file through the client (`fs/write_text_file`).
pub const WRITE_TOOL: &str = "editor_write_file";
/// The name of the tool that runs a command in the client's terminal (`terminal/*`).
pub const TERMINAL_TOOL: &str = "editor_run_command";

/// The most bytes of a command's output the client keeps for the tool
/// (`terminal/create`'s `outputByteLimit`): the client drops the oldest beyond it.
pub const TERMINAL_OUTPUT_LIMIT: u64 = 64 * 1024;

/// The default of [`super::Options::client_timeout`].
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The default of [`super::Options::command_timeout`].
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// How long the requests that clean a terminal up after an abort (`terminal/kill`,
/// `terminal/release`) are waited for at most, so that an abort stays prompt with a client
/// that does not answer them.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);

/// What the client said it can do in `initialize` (its `clientCapabilities`), as
/// [`SessionInfo::client_capabilities`] gives it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientCapabilities {
    /// `fs.readTextFile`: the client reads text files for the agent, unsaved editor
    /// buffers included.
    pub read_text_file: bool,
    /// `fs.writeTextFile`: the client writes text files for the agent.
    pub write_text_file: bool,
    /// `terminal`: the client runs commands in terminals of its own.
    pub terminal: bool,
}

impl ClientCapabilities {
    /// The capabilities `initialize`'s `clientCapabilities` advertise: only a `true` counts.
    pub(super) fn from_initialize(capabilities: &Value) -> ClientCapabilities {
        let yes = |pointer: &str| capabilities.pointer(pointer) == Some(&Value::Bool(true));
        ClientCapabilities {
            read_text_file: yes("/fs/readTextFile"),
            write_text_file: yes("/fs/writeTextFile"),
            terminal: yes("/terminal"),
        }
    }
}

/// What a session's client tools need: the connection, the session, and how long to wait.
#[derive(Clone)]
pub(super) struct ClientLink {
    pub(super) peer: Arc<Peer>,
    pub(super) capabilities: ClientCapabilities,
    pub(super) timeout: Duration,
    pub(super) command_timeout: Duration,
}

impl fmt::Debug for ClientLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientLink")
            .field("capabilities", &self.capabilities)
            .field("timeout", &self.timeout)
            .field("command_timeout", &self.command_timeout)
            .finish_non_exhaustive()
    }
}

impl SessionInfo {
    /// What the client advertised in `initialize` (its files, its terminals).
    pub fn client_capabilities(&self) -> ClientCapabilities {
        self.client.capabilities
    }

    /// Ready tools whose calls go to the client, one for each capability it advertised
    /// (none when it advertised none), for the factory to add to its agent
    /// (`builder.tool_arc(tool)`):
    ///
    /// | tool | with | does |
    /// |---|---|---|
    /// | [`READ_TOOL`] (`editor_read_file`: `path`, `line`, `limit`) | `fs.readTextFile` | `fs/read_text_file`: the file as the editor has it, unsaved changes included; kind `read` |
    /// | [`WRITE_TOOL`] (`editor_write_file`: `path`, `content`) | `fs.writeTextFile` | reads the old text first (`fs/read_text_file`, when the client can read; none for a new file), then `fs/write_text_file`; its result shows the `diff`; kind `edit` |
    /// | [`TERMINAL_TOOL`] (`editor_run_command`: `command`, `args`, `cwd`, `env`) | `terminal` | `terminal/create`, shows the `terminal` in the call, `terminal/wait_for_exit`, `terminal/output`, `terminal/release`; the result is the output and the exit status; kind `execute` |
    ///
    /// Paths are the model's, absolute or relative to the session's [`cwd`](Self::cwd)
    /// (the client is sent absolute ones, as ACP requires); the call's `locations` name them.
    /// Each request waits at most [`Options::client_timeout`](super::Options::client_timeout)
    /// for its answer, a command at most
    /// [`Options::command_timeout`](super::Options::command_timeout) (then it is killed and
    /// its output so far is the error). An abort (`session/cancel`) during a request gives it
    /// up with `$/cancel_request`, and kills and releases a running command. A client that
    /// answers with an error, with something that is no answer, not in time, or that goes
    /// away gives the call an error result that says so. A command that exits with a
    /// nonzero status is no error: its result says the status.
    ///
    /// The permission policy ([`Options::ask_permission`](super::Options::ask_permission))
    /// applies to these tools as to any other.
    pub fn client_tools(&self) -> Vec<Arc<dyn Tool>> {
        let caps = self.client.capabilities;
        let link = Arc::new(Session {
            link: self.client.clone(),
            id: self.id.clone(),
            cwd: self.cwd.clone(),
        });
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for (which, offered) in [
            (Which::Read, caps.read_text_file),
            (Which::Write, caps.write_text_file),
            (Which::Terminal, caps.terminal),
        ] {
            if offered {
                tools.push(Arc::new(EditorTool {
                    which,
                    session: link.clone(),
                }));
            }
        }
        tools
    }
}

/// What a permission request shows of a call of a client tool, before it runs: its
/// `locations`, and for a write the `diff` it would make (the old text read through the
/// client first, when the client reads; none shown when that read fails otherwise than as a
/// missing file).
pub(super) struct Preview(Session);

impl Preview {
    pub(super) fn new(info: &SessionInfo) -> Preview {
        Preview(Session {
            link: info.client.clone(),
            id: info.id.clone(),
            cwd: info.cwd.clone(),
        })
    }

    /// The `locations` and the content of `call` for its permission request; waits for
    /// the client's read at most [`super::Options::client_timeout`], or until `cancel`.
    pub(super) fn show(
        &self,
        call: &ToolCall,
        cancel: &CancelToken,
    ) -> (Option<Vec<Location>>, Option<Vec<ToolContent>>) {
        let session = &self.0;
        let located = locations(call, &session.cwd);
        let write = (call.name == WRITE_TOOL && session.link.capabilities.read_text_file)
            .then(|| call.parse_arguments().ok())
            .flatten()
            .and_then(|args| WriteArgs::deserialize(args).ok());
        let Some(write) = write else {
            return (located, None);
        };
        let path = session.path(&write.path);
        let method = "fs/read_text_file";
        let read = session.call(
            method,
            json!({ "path": path }),
            cancel,
            session.link.timeout,
        );
        let old_text = match read {
            Ok(answer) => match answer.get("content") {
                Some(Value::String(old)) => Some(old.clone()),
                _ => return (located, None),
            },
            Err(Failure::Refused(_)) => None,
            Err(_) => return (located, None),
        };
        let diff = ToolContent::Diff {
            path,
            old_text,
            new_text: write.content,
        };
        (located, Some(vec![diff]))
    }
}

/// The kind of a client tool's name (for [`super::Options::tool_kind`]'s default).
pub(super) fn kind_of(name: &str) -> Option<ToolKind> {
    match name {
        READ_TOOL => Some(ToolKind::Read),
        WRITE_TOOL => Some(ToolKind::Edit),
        TERMINAL_TOOL => Some(ToolKind::Execute),
        _ => None,
    }
}

/// The `locations` of a call of a client file tool: its `path`, made absolute against
/// `cwd`, with the `line` it reads from.
pub(super) fn locations(call: &ToolCall, cwd: &Path) -> Option<Vec<Location>> {
    if call.name != READ_TOOL && call.name != WRITE_TOOL {
        return None;
    }
    let args = call.parse_arguments().ok()?;
    let path = args.get("path")?.as_str()?;
    let line = args.get("line").and_then(Value::as_u64);
    Some(vec![Location {
        path: absolute(cwd, path).display().to_string(),
        line,
    }])
}

fn absolute(cwd: &Path, path: &str) -> PathBuf {
    let path = Path::new(path);
    if path.is_absolute() {
        path.to_owned()
    } else {
        cwd.join(path)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Read,
    Write,
    Terminal,
}

/// The session a client tool works for.
struct Session {
    link: ClientLink,
    id: String,
    cwd: PathBuf,
}

struct EditorTool {
    which: Which,
    session: Arc<Session>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    #[serde(default)]
    line: Option<u32>,
    #[serde(default)]
    limit: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

impl Tool for EditorTool {
    fn name(&self) -> &str {
        match self.which {
            Which::Read => READ_TOOL,
            Which::Write => WRITE_TOOL,
            Which::Terminal => TERMINAL_TOOL,
        }
    }

    fn description(&self) -> &str {
        match self.which {
            Which::Read => {
                "Reads a text file as the user's editor has it (unsaved changes included). \
                 `path` is absolute or relative to the project's directory; `line` (1-based) \
                 and `limit` read only part of it."
            }
            Which::Write => {
                "Writes a text file through the user's editor, replacing its whole content \
                 (the file is created when it does not exist). `path` is absolute or \
                 relative to the project's directory."
            }
            Which::Terminal => {
                "Runs a command in the user's editor's terminal and returns its output and \
                 exit status. `command` is the program, `args` its arguments (for a shell \
                 line: `sh` with `[\"-c\", line]`), `cwd` where it runs (the project's \
                 directory by default), `env` extra environment variables."
            }
        }
    }

    fn parameters(&self) -> Value {
        let path = json!({"type": "string", "description": "The file's path: absolute, or relative to the project's directory."});
        match self.which {
            Which::Read => json!({
                "type": "object",
                "properties": {
                    "path": path,
                    "line": {"type": "integer", "minimum": 1, "description": "The line to start at (1-based)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "The most lines to read."},
                },
                "required": ["path"],
                "additionalProperties": false,
            }),
            Which::Write => json!({
                "type": "object",
                "properties": {
                    "path": path,
                    "content": {"type": "string", "description": "The file's whole new content."},
                },
                "required": ["path", "content"],
                "additionalProperties": false,
            }),
            Which::Terminal => json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The program to run."},
                    "args": {"type": "array", "items": {"type": "string"}, "description": "Its arguments."},
                    "cwd": {"type": "string", "description": "Where it runs: absolute, or relative to the project's directory."},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Environment variables to set."},
                },
                "required": ["command"],
                "additionalProperties": false,
            }),
        }
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        let parsed = match self.which {
            Which::Read => ReadArgs::deserialize(args).map(drop),
            Which::Write => WriteArgs::deserialize(args).map(drop),
            Which::Terminal => RunArgs::deserialize(args).map(drop),
        };
        parsed.map_err(|e| format!("invalid arguments: {e}"))
    }

    fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let bad = |e: serde_json::Error| ToolError::new(format!("invalid arguments: {e}"));
        let session = &*self.session;
        match self.which {
            Which::Read => session.read(ReadArgs::deserialize(args).map_err(bad)?, ctx),
            Which::Write => session.write(WriteArgs::deserialize(args).map_err(bad)?, ctx),
            Which::Terminal => session.run(RunArgs::deserialize(args).map_err(bad)?, ctx),
        }
        .map_err(ToolError::new)
    }
}

/// Why a request to the client got no answer to use.
enum Failure {
    /// The client answered with an error.
    Refused(String),
    /// The run was aborted while it waited.
    Cancelled,
    /// No answer in time: the message for the model.
    TimedOut(String),
    /// Anything else: the message for the model.
    Other(String),
}

impl Failure {
    fn into_message(self, method: &str) -> String {
        match self {
            Failure::Refused(why) => format!("the client refused {method}: {why}"),
            Failure::Cancelled => format!("cancelled: the run was aborted during {method}"),
            Failure::TimedOut(why) | Failure::Other(why) => why,
        }
    }
}

impl Session {
    /// Sends `method` and waits for its answer, the run's abort and `timeout` at once; a
    /// request given up is cancelled with `$/cancel_request`.
    fn call(
        &self,
        method: &str,
        mut params: Value,
        cancel: &CancelToken,
        timeout: Duration,
    ) -> Result<Value, Failure> {
        params["sessionId"] = json!(self.id);
        let peer = &self.link.peer;
        let gone = || Failure::Other(format!("the client is gone: {method} got no answer"));
        let ticket = peer
            .request(method, Some(&params), cancel)
            .map_err(|_| gone())?;
        let id = ticket.id();
        let deadline = Instant::now().checked_add(timeout);
        let given_up = |failure| {
            let _ = peer.notify("$/cancel_request", &json!({ "requestId": id }));
            failure
        };
        match ticket.wait(cancel, deadline, &mut |_| {}) {
            Ok(answer) => Ok(answer),
            Err(CallError::Rpc(e)) => Err(Failure::Refused(format!("{} ({})", e.message, e.code))),
            Err(CallError::Failed(_)) => Err(gone()),
            Err(CallError::Cancelled) => Err(given_up(Failure::Cancelled)),
            Err(CallError::TimedOut) => Err(given_up(Failure::TimedOut(format!(
                "the client did not answer {method} within {}",
                seconds(timeout)
            )))),
        }
    }

    /// As [`Session::call`], with the message of a failure for the model.
    fn ask(&self, method: &str, params: Value, ctx: &ToolContext) -> Result<Value, String> {
        self.call(method, params, ctx.cancel(), self.link.timeout)
            .map_err(|f| f.into_message(method))
    }

    fn path(&self, path: &str) -> String {
        absolute(&self.cwd, path).display().to_string()
    }

    fn read(&self, args: ReadArgs, ctx: &ToolContext) -> Result<ToolOutput, String> {
        let path = self.path(&args.path);
        let mut params = json!({ "path": path });
        if let Some(line) = args.line {
            params["line"] = json!(line);
        }
        if let Some(limit) = args.limit {
            params["limit"] = json!(limit);
        }
        let method = "fs/read_text_file";
        let answer = self.ask(method, params, ctx)?;
        let content = text_of(&answer, "content", method)?;
        let mut location = json!({ "path": path });
        if let Some(line) = args.line {
            location["line"] = json!(line);
        }
        Ok(ToolOutput::text(content).with_details(json!({ "locations": [location] })))
    }

    fn write(&self, args: WriteArgs, ctx: &ToolContext) -> Result<ToolOutput, String> {
        let path = self.path(&args.path);
        // The old text for the diff, as the editor has it. An error answer is taken as a
        // file that does not exist yet (ACP names no error for that).
        let old = if self.link.capabilities.read_text_file {
            let method = "fs/read_text_file";
            match self.call(
                method,
                json!({ "path": path }),
                ctx.cancel(),
                self.link.timeout,
            ) {
                Ok(answer) => Some(text_of(&answer, "content", method)?),
                Err(Failure::Refused(_)) => None,
                Err(failure) => return Err(failure.into_message(method)),
            }
        } else {
            None
        };
        let method = "fs/write_text_file";
        let params = json!({ "path": path, "content": args.content });
        let answer = self.ask(method, params, ctx)?;
        if !(answer.is_object() || answer.is_null()) {
            return Err(format!(
                "the client's answer to {method} is not one: {}; the file may or may not be written",
                shown(&answer)
            ));
        }
        let said = match &old {
            None => format!("Created {path} ({} bytes).", args.content.len()),
            Some(_) => format!("Wrote {path} ({} bytes).", args.content.len()),
        };
        Ok(ToolOutput::text(said).with_details(json!({
            "diff": {"path": path, "oldText": old, "newText": args.content},
            "locations": [{"path": path}],
        })))
    }

    fn run(&self, args: RunArgs, ctx: &ToolContext) -> Result<ToolOutput, String> {
        let cwd = match &args.cwd {
            Some(cwd) => self.path(cwd),
            None => self.cwd.display().to_string(),
        };
        let env: Vec<Value> = (args.env.iter())
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        let params = json!({
            "command": args.command,
            "args": args.args,
            "env": env,
            "cwd": cwd,
            "outputByteLimit": TERMINAL_OUTPUT_LIMIT,
        });
        let method = "terminal/create";
        let answer = self.ask(method, params, ctx)?;
        // Without an id there is no terminal to release.
        let terminal = text_of(&answer, "terminalId", method)?;
        // The call shows the terminal while the command runs.
        ctx.update(ToolOutput::text("").with_details(json!({ "terminalId": terminal })));
        let outcome = self.follow(&terminal, ctx);
        // Released on every path: the command (killed when it may still run) and its
        // output go; the client keeps showing the output embedded in the call.
        self.cleanup("terminal/release", &terminal);
        outcome
    }

    /// Waits for the command in `terminal` to exit and reads its output; kills it when the
    /// wait ends otherwise.
    fn follow(&self, terminal: &str, ctx: &ToolContext) -> Result<ToolOutput, String> {
        let id = json!({ "terminalId": terminal });
        let method = "terminal/wait_for_exit";
        let waited = self.call(method, id.clone(), ctx.cancel(), self.link.command_timeout);
        let kill = || self.cleanup("terminal/kill", terminal);
        let status = match waited {
            Ok(status) => status,
            Err(Failure::TimedOut(_)) => {
                kill();
                let so_far = self.output(terminal, ctx).map(|(text, _)| text);
                return Err(format!(
                    "the command did not end within {} and was killed; its output: {}",
                    seconds(self.link.command_timeout),
                    so_far.unwrap_or_else(|why| format!("(none: {why})"))
                ));
            }
            Err(failure) => {
                kill();
                return Err(failure.into_message(method));
            }
        };
        let (Some(code), Some(signal)) = (
            exit_field(&status, "exitCode"),
            exit_field(&status, "signal"),
        ) else {
            kill();
            return Err(format!(
                "the client's answer to {method} is not one: {}",
                shown(&status)
            ));
        };
        let (output, truncated) = self.output(terminal, ctx)?;
        let ended = match (code.as_u64(), signal.as_str()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "ended".to_owned(),
        };
        let cut = if truncated {
            " (the beginning of the output was cut)"
        } else {
            ""
        };
        let mut text = output;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("[{ended}{cut}]"));
        Ok(ToolOutput::text(text).with_details(json!({
            "terminalId": terminal,
            "exitStatus": {"exitCode": code, "signal": signal},
            "truncated": truncated,
        })))
    }

    /// Sends `method` for `terminal` and waits a moment for its answer, whatever it is:
    /// after an abort too (the run's token is not the wait's), never long.
    fn cleanup(&self, method: &str, terminal: &str) {
        let wait = self.link.timeout.min(CLEANUP_TIMEOUT);
        let id = json!({ "terminalId": terminal });
        let _ = self.call(method, id, &CancelToken::new(), wait);
    }

    /// The command's output so far and whether the client cut it (`terminal/output`).
    fn output(&self, terminal: &str, ctx: &ToolContext) -> Result<(String, bool), String> {
        let method = "terminal/output";
        let answer = self.ask(method, json!({ "terminalId": terminal }), ctx)?;
        let output = text_of(&answer, "output", method)?;
        match answer.get("truncated") {
            Some(Value::Bool(truncated)) => Ok((output, *truncated)),
            _ => Err(format!(
                "the client's answer to {method} is not one: {}",
                shown(&answer)
            )),
        }
    }
}

/// The string `field` of the client's answer to `method`, or an error saying it is none.
fn text_of(answer: &Value, field: &str, method: &str) -> Result<String, String> {
    match answer.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(format!(
            "the client's answer to {method} is not one: {} (no `{field}` string)",
            shown(answer)
        )),
    }
}

/// An exit status field: a number or a string as the protocol has it, or null (absent
/// counts as null).
fn exit_field(status: &Value, field: &str) -> Option<Value> {
    match status.get(field) {
        None | Some(Value::Null) => Some(Value::Null),
        Some(v @ Value::Number(n)) if n.is_u64() && field == "exitCode" => Some(v.clone()),
        Some(v @ Value::String(_)) if field == "signal" => Some(v.clone()),
        Some(_) => None,
    }
}

/// A client's answer as the model is shown it: at most 200 characters of its JSON.
fn shown(answer: &Value) -> String {
    let text = answer.to_string();
    match text.char_indices().nth(200) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text,
    }
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}
