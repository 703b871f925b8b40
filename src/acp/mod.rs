//! The Agent Client Protocol (ACP): serve pagent agents to editors (Zed, JetBrains IDEs,
//! Neovim plugins...) over stdio. Behind the `acp` cargo feature.
//!
//! [`serve`] speaks ACP protocol version [`PROTOCOL_VERSION`] (1) as the agent side: the
//! editor starts the program, sends line-delimited JSON-RPC 2.0 on its stdin and reads the
//! answers, updates and permission requests on its stdout. Each ACP session gets an agent of
//! its own, built by a factory you give; sessions run concurrently.
//!
//! ```no_run
//! use pagent::acp;
//! use pagent::llm::{Faux, FauxReply};
//!
//! let options = acp::Options::new().agent_info("my-agent", "My agent", "0.1.0");
//! acp::serve_stdio(
//!     |_session: &acp::SessionInfo| {
//!         let model = Faux::default().otherwise(|_| FauxReply::text("Hello from pagent."));
//!         Ok(pagent::Agent::builder().provider(model))
//!     },
//!     options,
//! )?;
//! # Ok::<(), pagent::Error>(())
//! ```
//!
//! # What is served
//!
//! | method | what it does |
//! |---|---|
//! | `initialize` | answers protocol version 1 (the only one), the agent's info and capabilities: prompts of text, resource links and embedded text resources; `loadSession` when [`Options::session_dir`] is set; MCP over stdio, and over HTTP with the `mcp` feature (see below); keeps the client's `clientCapabilities` for [`SessionInfo::client_tools`] |
//! | `session/new` | connects the MCP servers it lists (see below), builds a session's agent with the factory: `{"sessionId": ".."}`; `cwd` must be an absolute path |
//! | `session/load` | with [`Options::session_dir`]: rebuilds the agent on the saved transcript, replays it as `session/update`s, then answers `{}`; refused while a prompt of that session runs (see [Sessions](#sessions)) |
//! | `session/resume` | as `session/load`, without the replay: a live session (idle) goes on from its own transcript, with the MCP servers now listed; another one from its saved transcript (with [`Options::session_dir`]); answers `{}` |
//! | `session/list` | the live sessions and, with [`Options::session_dir`], the saved ones: `sessionId`, `cwd`, `title` (the first line of the session's first prompt), `updatedAt` (RFC 3339, UTC), most recently used first; `cwd` filters; one page (a `cursor` is refused) |
//! | `session/close` | ends a live session: its running prompt answers `cancelled`, its agent and MCP servers end; a saved one stays saved (resumable); `{}` |
//! | `session/delete` | with [`Options::session_dir`]: closes the session if it is live and removes its saved files; `{}` |
//! | `session/prompt` | runs the agent on the prompt's text; answers `{"stopReason": ..}` when the run ends, after every update of the run |
//! | `session/cancel` | (a notification) aborts the session's run: its prompt (and every prompt queued into it) answers `cancelled`, a permission request waiting for an answer is released and given up with `$/cancel_request` |
//! | `_session/steering` | (the steering convention of other ACP agents, advertised as `_meta.steering.supported` in `initialize`'s answer) puts `prompt` into the running turn as steering: `{"outcome": "injected"}`; on an idle session starts a turn (`startedNewTurn`), or with `_meta.steering.idleBehavior` `"promptRequired"` does nothing (`promptRequired`) |
//! | `$/cancel_request` | (a notification, both ways) for a running prompt: ends its run as `session/cancel` does; for a prompt still queued into a run: takes it out, it answers `cancelled`; for a `session/new` or `session/load` being set up: gives the setup up, answered [`codes::REQUEST_CANCELLED`]. The agent sends it for a permission request it gave up |
//! | `authenticate` | answers `{}` (no authentication methods are offered) |
//! | `logout` | answers `{}` (nothing to log out of; `agentCapabilities.auth.logout` says it is served) |
//! | `session/set_config_option` | sets a config option (below) for the session's next run and answers every option as it now is; a mode set this way is also sent as `current_mode_update` |
//! | `session/set_mode` | switches the session to a [`Mode`] (its system prompt and tools from the next run, its approval policy at once); sends `current_mode_update` and `config_option_update`, answers `{}` |
//!
//! `session/new`, `session/load` and `session/resume` answer the session's `configOptions`
//! (and `modes` when the program defines any): `mode` (the [`Mode`]s of
//! [`Options::mode`], the first to begin with), `model` (the models of [`Options::model`];
//! a provider's own list is not asked for) and `thinking` (the [`crate::llm::ThinkingLevel`]s,
//! category `thought_level`).
//!
//! # Prompts while a turn runs
//!
//! A `session/prompt` for a session whose prompt runs is not refused: its content goes into
//! the running agent, as steering by default ([`crate::Agent::steer`]: before the next model
//! call, after the tool calls running) or as a follow-up ([`crate::Agent::follow_up`]: when
//! the agent would otherwise stop), as [`Options::prompt_while_running`] says
//! ([`WhileRunning::Refuse`] keeps the plain lifecycle: -32600). Each prompt is answered when
//! its content was answered:
//!
//! - steering joins the prompt it steers: both are answered together, when the run ends;
//! - a follow-up starts when the reply before it was the last of its prompts: those prompts
//!   are answered `end_turn` right then, before the follow-up's first update, and the
//!   follow-up is answered when the run ends (or the next follow-up starts);
//! - a `session/cancel` answers all of them `cancelled`, and what was still queued never
//!   runs; a run that fails answers them all with its error;
//! - steering that comes as the run ends (too late for its last model call) is not lost:
//!   the run goes on with it.
//!
//! A session's steering and follow-up queues are filled only by these prompts: the factory's
//! agent should not queue its own (the answers are matched to the queue's messages by
//! order).
//!
//! # Sessions
//!
//! A `session/new` or `session/load` is checked on the reading thread (its params, a free
//! id, room under the cap) and then set up on a worker thread: its MCP servers connect, the
//! factory builds its agent, and the worker answers. The reading thread never waits for a
//! session to be set up, so the other sessions' prompts and cancels are read meanwhile. At
//! most 8 sessions are set up at once (one more is refused with -32603), and at most 64
//! prompts run at once over all sessions; no request gets a thread of its own.
//!
//! - **One writer per session file.** With [`Options::session_dir`] each live session
//!   appends its messages to `<id>.jsonl` (opened to append: every write goes to the end of
//!   the file). An id is live once at most: a `session/load` of a session whose prompt runs
//!   is refused with [`codes::INVALID_REQUEST`] (cancel the prompt and wait for its answer,
//!   then load); a load of an idle live session replaces it: the old one is taken out at
//!   once (a prompt for it then gets -32002 until the load answers) and ends before the new
//!   one opens the file.
//! - **A cap on live sessions** ([`Options::max_sessions`], 64): a `session/new`,
//!   `session/load` or `session/resume` that finds that many closes the idle session used
//!   longest ago, as `session/close` does (its agent and MCP servers end; a later request
//!   for it gets -32002; with a session directory it stays in `session/list` and can be
//!   resumed or loaded). When every one runs a prompt, the request is refused with -32603.
//! - **Idle expiry** ([`Options::idle_timeout`], off by default): a session unused that long
//!   is closed the same way, as the next request is read.
//! - **What `session/list` lists.** Each saved session has, beside `<id>.jsonl`,
//!   `<id>.meta.json` (its `cwd` and title); its time is the transcript's. A transcript
//!   without one (saved before it existed) is not listed (the protocol needs its `cwd`) but
//!   loads by id.
//! - **Cancels are never lost.** A `session/prompt` on an idle session claims its agent as it is read
//!   ([`crate::Agent::claim_run`]), before its worker starts the run: a `session/cancel`
//!   read after it always cancels that prompt, which answers `cancelled`.
//!
//! # MCP servers
//!
//! With the `mcp` feature, the MCP servers a client lists in `session/new` or `session/load`
//! are connected through `pagent::mcp` before the session's agent is built, in list order,
//! and the tools of each are added to the builder the factory returned. `initialize` says
//! so: `mcpCapabilities` is `{"http": true, "sse": false}`.
//!
//! | entry | connection |
//! |---|---|
//! | stdio (`command`, `args`, `env`) | `pagent::mcp::Client::stdio`, started in the session's `cwd` when that is a directory, with the `env` the client lists and, of this process's environment, only [`PASSED_ENV`] and what [`Options::pass_env`] adds (never our API keys; the client's values win) |
//! | `"type": "http"` (`url`, `headers`) | `pagent::mcp::Client::http`, Streamable HTTP |
//! | `"type": "sse"` | refused with [`codes::INVALID_PARAMS`]: the old SSE transport is not spoken |
//!
//! Each server has [`Options::mcp_timeout`] (30 s) to start, initialize and list its tools.
//! A server that fails to, in time or at all, refuses the session with
//! [`codes::INTERNAL_ERROR`] and a message that names it and gives the text of the
//! `pagent::mcp::McpError` ("MCP server \`files\` could not be connected: .."); the
//! servers already started for that session are ended, and the agent serves on. The servers
//! of a session end with it (once: its last handles to them are dropped): when a
//! `session/load` of the same id replaces it, when the cap drops it, and when [`serve`]
//! returns (no child process is left behind). The session keeps the tools listed when it
//! started (a server's `notifications/tools/list_changed` is not followed).
//!
//! Tool names: the tools of a server keep the names the server gives them, unless the
//! program set a prefix for that server ([`Options::mcp_prefix`]), or one of its names is a
//! name of another listed server's tool: then every tool of each server of the collision is
//! named `<server name>_<tool name>` (the characters of the server's name other than
//! letters, digits, `_` and `-` become `_`). Names that still collide refuse the session
//! with [`codes::INVALID_PARAMS`].
//!
//! Without the `mcp` feature a list with any server is refused with
//! [`codes::INVALID_PARAMS`] ("MCP servers are not supported"), and `mcpCapabilities` is
//! `{"http": false, "sse": false}`.
//!
//! # Updates
//!
//! While a prompt runs, the agent's events become `session/update` notifications, in order:
//!
//! | event | update |
//! |---|---|
//! | a text delta | `agent_message_chunk` (a `text` content block) |
//! | a thinking delta | `agent_thought_chunk` |
//! | `ToolStart` | `tool_call`: `toolCallId`, `title` (the tool's name), `kind` ([`Options::tool_kind`]), `status: "pending"`, `rawInput` (the arguments); `locations` for the client's file tools (see [The client's files and terminals](#the-clients-files-and-terminals)) |
//! | `ToolExecute` (the call runs: allowed, or permitted by the client) | `tool_call_update`, `status: "in_progress"`, and `rawInput` with the arguments it runs with when a `before_tool_call` hook rewrote them |
//! | `ToolUpdate` | `tool_call_update` with the progress text as content |
//! | `ToolEnd` | `tool_call_update`, `status` `completed` or `failed`, the result text as content, `rawOutput` (the result's details) |
//! | a `ToolUpdate` or `ToolEnd` of one of the agent's own tools (not an MCP server's: its results are the server's) whose details hold `{"plan": [{"content","priority","status"}..]}` | a `plan` update with those entries, after the tool's own |
//! | a `ToolUpdate` or `ToolEnd` of one of the agent's own tools whose details hold `{"terminalId": ".."}`, `{"diff": {"path", "oldText", "newText"}}` or `{"locations": [{"path", "line"}..]}` | its `tool_call_update` embeds them: a `terminal` and a `diff` content block before the text (an empty text left out), `locations`; what a call embedded stays in its last update when that embeds nothing of its own (an error result keeps the terminal the command ran in) |
//! | `CompactionStart` / `CompactionEnd` (the context policy compacted the transcript) | to a client that advertised `session.compaction`: `compaction_update` with `compactionId` (`c1`, `c2`.. in the session) and `status: "in_progress"`, then `completed` with the `summary` the compaction wrote (or `failed` with the `error`); to any other, an `agent_thought_chunk` each saying so |
//! | the end of a reply (`MessageEnd`), when the window is known ([`Options::context_window`], else the agent's own, `State::context`'s `window`) | `usage_update`: `used` (the reply's prompt and generated tokens), `size` (the window), `cost` (the session's so far, with [`Options::prices`]) |
//!
//! Each chunk carries a `messageId`: `m<index>`, the message's place in the transcript
//! (the same in a `session/load` replay). Beside the run's own updates: a
//! `session_info_update` with the session's title (the program's through
//! [`Options::session_title`], else the first prompt's first line) when its first prompt
//! comes, and an `available_commands_update` listing the program's [`Command`]s after each
//! session is set up; a prompt starting with `/<name>` runs what the command's handler makes
//! of it.
//!
//! Other events (turns, message starts, retries) have no update; the prompt's
//! answer says how the run ended:
//!
//! | the run | `stopReason` |
//! |---|---|
//! | ended by `session/cancel` (an abort) | `cancelled` |
//! | made `max_turns` model calls | `max_turn_requests` |
//! | its last reply was cut at the token limit | `max_tokens` |
//! | ended as asked | `end_turn` |
//! | failed because the provider refused (an error of kind `refusal` or `content_filter`) | `refusal` |
//! | failed otherwise | no stop reason: a JSON-RPC error [`codes::INTERNAL_ERROR`] with the error's text |
//!
//! # The client's files and terminals
//!
//! A client says in `initialize` what it can do for the agent (`clientCapabilities`:
//! `fs.readTextFile`, `fs.writeTextFile`, `terminal`); the factory reads it
//! ([`SessionInfo::client_capabilities`]) and gets ready tools for what was offered
//! ([`SessionInfo::client_tools`]), whose calls are requests to the client:
//!
//! ```no_run
//! use pagent::acp;
//! use pagent::llm::{Faux, FauxReply};
//!
//! acp::serve_stdio(
//!     |session: &acp::SessionInfo| {
//!         let model = Faux::default().otherwise(|_| FauxReply::text("Hello."));
//!         let mut builder = pagent::Agent::builder().provider(model);
//!         // The editor's buffers and terminal, as far as it offers them.
//!         for tool in session.client_tools() {
//!             builder = builder.tool_arc(tool);
//!         }
//!         Ok(builder)
//!     },
//!     acp::Options::new(),
//! )?;
//! # Ok::<(), pagent::Error>(())
//! ```
//!
//! The program decides whether its agent gets them (a session's agent may have file tools
//! of its own instead), and they are tools like any other: the permission policy, hooks and
//! modes apply to them by their names, [`READ_TOOL`], [`WRITE_TOOL`] and [`TERMINAL_TOOL`].
//! A permission request for one of the file tools names its file (`locations`), and for a
//! write shows the `diff` it would make (the old text read through the client first, when it
//! reads).
//!
//! | tool | requests | the call shows |
//! |---|---|---|
//! | `editor_read_file` (`path`, `line`, `limit`) | `fs/read_text_file` | kind `read`, `locations` |
//! | `editor_write_file` (`path`, `content`) | `fs/read_text_file` for the old text (when the client reads; an error answer is taken as a new file), `fs/write_text_file` | kind `edit`, `locations`, a `diff` (`oldText` null for a new file) |
//! | `editor_run_command` (`command`, `args`, `cwd`, `env`) | `terminal/create` (`outputByteLimit` [`TERMINAL_OUTPUT_LIMIT`]), `terminal/wait_for_exit`, `terminal/output`, `terminal/release`; `terminal/kill` first when the command may still run | kind `execute`, the `terminal` from its creation on; the result is the output and the exit status (a nonzero status is no error) |
//!
//! - **Paths** are absolute for the client, as ACP requires: the model's relative paths
//!   resolve against the session's `cwd`.
//! - **Cancellation.** Each request waits with the run's cancel token: a `session/cancel`
//!   (or any abort) gives it up with `$/cancel_request`; a running command is then killed
//!   and its terminal released (each of these waits at most 2 s), and the call ends
//!   `cancelled`.
//! - **Timeouts.** A request waits at most [`Options::client_timeout`] (30 s), a command
//!   [`Options::command_timeout`] (10 minutes: then it is killed, and its output so far is in
//!   the error).
//! - **Bad clients.** An error answer, an answer of the wrong shape, no answer in time, or a
//!   client gone gives the call an error result that names the method (`the client did not
//!   answer fs/read_text_file within 30 s`); the run goes on, and the transcript has the call's
//!   one result. A terminal is released on every path once created.
//!
//! # Permission
//!
//! Before each tool call runs, the session's agent asks the client with a
//! `session/request_permission` request (options `allow_once`, `allow_always`, `reject_once`)
//! when [`Options::ask_permission`] says the call needs it, and waits for the answer. An
//! `allow_always` answer holds for that tool for the rest of the session. A `before_tool_call`
//! hook the factory set is asked first: a call it blocks is blocked without asking, and the
//! client sees the arguments it would run. A `session/cancel` (or the client leaving) ends the
//! wait: the call gets a "cancelled" result and the run ends. So does the `cancelled` outcome
//! (the client's answer when it cancelled the prompt turn): the prompt answers `cancelled`.
//!
//! # Performance
//!
//! An update is written and flushed on the run's thread as the event happens, before the
//! run goes on: from a model's text delta to the client having read its `session/update`
//! line takes a median of 5.6-7.3 µs over OS pipes when the CPUs are busy or the threads
//! share one, 36-38 µs on an idle 2-core machine whose CPUs wake from idle for each hand-off
//! (`cargo bench -p pagent-benches --features acp --bench acp`; README, "Benchmarks"). A `session/cancel` ends the prompt as fast as an abort ends the run: from
//! the client writing it while a reply streams to the client having read the `cancelled`
//! answer takes a median of 0.15 ms in the same bench (about a millisecond measured by the
//! SDK client).
//!
//! # Errors on the stream
//!
//! A malformed line is answered with a JSON-RPC error ([`codes`]) and the server reads on: a
//! line that is not JSON gets -32700 (`id` null), a line that is no request -32600, an unknown
//! method -32601, bad params -32602, an unknown session -32002. Nothing a client sends stops
//! it but the end of its input.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::message::ToolCall;
use crate::wire::MAX_LINE_LEN;
use crate::{AgentBuilder, Error};

mod client_tools;
mod commands;
mod config;
mod elicit;
mod input;
mod listing;
mod map;
mod permission;
mod server;
mod servers;
mod sessions;
mod turns;

pub use client_tools::{
    CLIENT_TIMEOUT, COMMAND_TIMEOUT, ClientCapabilities, READ_TOOL, TERMINAL_OUTPUT_LIMIT,
    TERMINAL_TOOL, WRITE_TOOL,
};
pub use commands::Command;
pub use config::Mode;

/// The ACP protocol version [`serve`] speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// The JSON-RPC error codes [`serve`] answers with: the standard ones and ACP's own.
pub mod codes {
    /// The line is not JSON (or not UTF-8).
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON is not a request: not an object, `jsonrpc` not `"2.0"`, no string `method`,
    /// a bad `id`, or a line over the length limit.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params are missing or malformed, or ask for what this agent does not support.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The agent failed: the factory refused to build one, or a run failed.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// No session (or saved session) has this id (ACP's `resource_not_found`).
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// The request was cancelled by a `$/cancel_request` before it was done.
    pub const REQUEST_CANCELLED: i64 = -32800;
}

/// What a tool does, for the client's icon and grouping (ACP's `ToolKind`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolKind {
    /// Reads files or data.
    Read,
    /// Changes files or content.
    Edit,
    /// Removes files or data.
    Delete,
    /// Moves or renames.
    Move,
    /// Searches.
    Search,
    /// Runs a command or code.
    Execute,
    /// Thinks or plans.
    Think,
    /// Fetches from the network.
    Fetch,
    /// Anything else.
    #[default]
    Other,
}

/// What a `session/prompt` read while a prompt of the same session runs becomes (see
/// [`Options::prompt_while_running`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WhileRunning {
    /// Steering of the running turn ([`crate::Agent::steer`]): delivered before the next
    /// model call, after the tool calls running.
    #[default]
    Steer,
    /// A follow-up ([`crate::Agent::follow_up`]): delivered when the agent would otherwise
    /// have stopped.
    FollowUp,
    /// Refused with [`codes::INVALID_REQUEST`], as ACP's plain prompt lifecycle has it.
    Refuse,
}

/// The session a factory builds an agent for.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    id: String,
    cwd: PathBuf,
    loaded: bool,
    /// The client, for [`SessionInfo::client_tools`].
    client: client_tools::ClientLink,
}

impl SessionInfo {
    /// The session's id, as the client sees it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The working directory the client gave (an absolute path): where the agent's file
    /// tools should work.
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// True for `session/load` and `session/resume`: [`serve`] puts the saved transcript
    /// into the builder after the factory returns, so the factory builds as for a new
    /// session.
    pub fn is_loaded(&self) -> bool {
        self.loaded
    }
}

type AskFn = dyn Fn(&ToolCall) -> bool + Send + Sync;

/// Options of [`serve`].
#[derive(Clone)]
#[must_use]
pub struct Options {
    name: String,
    title: Option<String>,
    version: String,
    session_dir: Option<PathBuf>,
    ask: Arc<AskFn>,
    kinds: HashMap<String, ToolKind>,
    max_line_len: usize,
    output: crate::jsonrpc::Limits,
    max_sessions: usize,
    mcp_timeout: Duration,
    passed_env: Vec<String>,
    mcp_prefixes: HashMap<String, String>,
    while_running: WhileRunning,
    idle_timeout: Option<Duration>,
    context_window: Option<u64>,
    prices: Option<Prices>,
    session_title: Option<Arc<TitleFn>>,
    commands: Vec<Command>,
    models: Vec<(String, String)>,
    modes: Vec<Mode>,
    client_timeout: Duration,
    command_timeout: Duration,
}

type TitleFn = dyn Fn(&str) -> Option<String> + Send + Sync;

/// What a million tokens cost, for the `cost` of `usage_update` (see [`Options::prices`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Prices {
    /// The ISO 4217 currency code (`USD`).
    pub currency: String,
    /// A million prompt tokens.
    pub input: f64,
    /// A million generated tokens.
    pub output: f64,
}

/// The default of [`Options::max_sessions`].
pub const MAX_SESSIONS: usize = 64;

/// The default of [`Options::mcp_timeout`].
pub const MCP_TIMEOUT: Duration = Duration::from_secs(30);

/// The variables of this process's environment that the stdio MCP servers a client lists
/// get by default (see [`Options::pass_env`]): what programs need to run (`PATH`, the home
/// and temporary directories, the user, the locale, the terminal, the time zone, and their
/// Windows counterparts), never a key or a token.
pub const PASSED_ENV: [&str; 24] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "SYSTEMROOT",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "USERPROFILE",
    "APPDATA",
];

impl Default for Options {
    fn default() -> Options {
        Options {
            name: "pagent".into(),
            title: None,
            version: env!("CARGO_PKG_VERSION").into(),
            session_dir: None,
            ask: Arc::new(|_| true),
            kinds: HashMap::new(),
            max_line_len: MAX_LINE_LEN,
            output: crate::jsonrpc::Limits::default(),
            max_sessions: MAX_SESSIONS,
            mcp_timeout: MCP_TIMEOUT,
            passed_env: PASSED_ENV.iter().map(|&s| s.to_owned()).collect(),
            mcp_prefixes: HashMap::new(),
            while_running: WhileRunning::default(),
            idle_timeout: None,
            context_window: None,
            prices: None,
            session_title: None,
            commands: Vec::new(),
            models: Vec::new(),
            modes: Vec::new(),
            client_timeout: CLIENT_TIMEOUT,
            command_timeout: COMMAND_TIMEOUT,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("name", &self.name)
            .field("title", &self.title)
            .field("version", &self.version)
            .field("session_dir", &self.session_dir)
            .field("kinds", &self.kinds)
            .field("max_line_len", &self.max_line_len)
            .field("max_unread_bytes", &self.output.max_bytes)
            .field("stall_timeout", &self.output.stall)
            .field("max_sessions", &self.max_sessions)
            .field("mcp_timeout", &self.mcp_timeout)
            .field("passed_env", &self.passed_env)
            .field("mcp_prefixes", &self.mcp_prefixes)
            .field("while_running", &self.while_running)
            .field("idle_timeout", &self.idle_timeout)
            .field("context_window", &self.context_window)
            .field("prices", &self.prices)
            .field("commands", &self.commands)
            .field("models", &self.models)
            .field("modes", &self.modes)
            .field("client_timeout", &self.client_timeout)
            .field("command_timeout", &self.command_timeout)
            .finish_non_exhaustive()
    }
}

impl Options {
    /// The defaults (see each setter).
    pub fn new() -> Options {
        Options::default()
    }

    /// The `agentInfo` `initialize` reports: a name, a title for people, a version. Defaults
    /// to `pagent`, no title, and pagent's version.
    pub fn agent_info(
        mut self,
        name: impl Into<String>,
        title: impl Into<String>,
        version: impl Into<String>,
    ) -> Options {
        self.name = name.into();
        self.title = Some(title.into());
        self.version = version.into();
        self
    }

    /// Saves each session's transcript in this directory (`<session id>.jsonl`, the
    /// [`crate::session`] format) and offers `session/load`, which restores one. Defaults to
    /// none: sessions live as long as the process, and `loadSession` is false.
    pub fn session_dir(mut self, dir: impl Into<PathBuf>) -> Options {
        self.session_dir = Some(dir.into());
        self
    }

    /// Which tool calls need the client's permission before they run. Called on a run's
    /// thread (or a helper thread of it) with the call about to run. Defaults to every call.
    pub fn ask_permission(
        mut self,
        ask: impl Fn(&ToolCall) -> bool + Send + Sync + 'static,
    ) -> Options {
        self.ask = Arc::new(ask);
        self
    }

    /// The kind the client shows for tool `name`. Defaults to [`ToolKind::Other`] for every
    /// tool but the client's own ([`SessionInfo::client_tools`]): `read` for [`READ_TOOL`],
    /// `edit` for [`WRITE_TOOL`], `execute` for [`TERMINAL_TOOL`].
    pub fn tool_kind(mut self, name: impl Into<String>, kind: ToolKind) -> Options {
        self.kinds.insert(name.into(), kind);
        self
    }

    /// The longest request line accepted, in bytes; a longer one is read through and refused
    /// with [`codes::INVALID_REQUEST`]. Defaults to [`MAX_LINE_LEN`].
    pub fn max_line_len(mut self, bytes: usize) -> Options {
        self.max_line_len = bytes;
        self
    }

    /// The most bytes written for the client and not yet read by it: while this much
    /// waits, the runs that write (their updates, the answers) wait for the client to read.
    /// Defaults to 16 MiB ([`crate::wire::MAX_UNREAD_BYTES`]).
    pub fn max_unread_bytes(mut self, bytes: usize) -> Options {
        self.output.max_bytes = bytes;
        self
    }

    /// How long the output may stay full (see [`Options::max_unread_bytes`]) before the
    /// client is taken to have stopped reading: the connection is then closed, every run
    /// aborted, and [`serve`] returns an [`Error::Io`] of kind `TimedOut` when the input
    /// ends. Defaults to 30 s ([`crate::wire::STALL_TIMEOUT`]).
    pub fn stall_timeout(mut self, timeout: Duration) -> Options {
        self.output.stall = timeout;
        self
    }

    /// What a `session/prompt` becomes when it comes while a prompt of the same session
    /// runs: steering of that run, a follow-up, or a refusal. Defaults to
    /// [`WhileRunning::Steer`]. Either way it is answered when its content was answered
    /// (see [Prompts while a turn runs](self#prompts-while-a-turn-runs)).
    pub fn prompt_while_running(mut self, what: WhileRunning) -> Options {
        self.while_running = what;
        self
    }

    /// How long a live session may stay unused (no prompt running, none sent) before it
    /// ends as a `session/close` ends it: its agent and MCP servers end, a later request for
    /// it gets -32002, and with [`Options::session_dir`] it stays listed and can be resumed
    /// or loaded. Checked as each request is read (no thread waits for it). Defaults to none:
    /// sessions end only when closed, dropped for the cap, or when [`serve`] returns.
    pub fn idle_timeout(mut self, timeout: Duration) -> Options {
        self.idle_timeout = Some(timeout);
        self
    }

    /// The context window of the sessions' model, in tokens: each reply is then followed by
    /// a `usage_update` (`used`: the reply's prompt and generated tokens, what the context
    /// holds now; `size`: this; `cost` with [`Options::prices`]). Defaults to none: the
    /// agent's own window is taken (`State::context`'s `window`: set on its builder, read
    /// from the server or known for its model), and with none known no `usage_update` is
    /// sent (the protocol needs the window's size).
    pub fn context_window(mut self, tokens: u64) -> Options {
        self.context_window = Some(tokens);
        self
    }

    /// Prices of the sessions' model: `usage_update` then carries the session's cost so far
    /// (its agent's summed usage: prompt tokens at `input`, generated ones at `output`, per
    /// million; cached tokens are not priced apart). Defaults to none: no cost.
    pub fn prices(mut self, prices: Prices) -> Options {
        self.prices = Some(prices);
        self
    }

    /// The title of a session, from its first prompt's text; `None` keeps the default, the
    /// prompt's first line with text (at most 80 characters). Sent as a
    /// `session_info_update` when the first prompt comes, and listed by `session/list`.
    /// Called on a run's thread. Defaults to none.
    pub fn session_title(
        mut self,
        title: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Options {
        self.session_title = Some(Arc::new(title));
        self
    }

    /// Adds a slash command: listed to the client in an `available_commands_update` after
    /// each session is set up; a prompt starting with `/<name>` runs what its handler makes
    /// of it. Defaults to none.
    pub fn command(mut self, command: Command) -> Options {
        self.commands.push(command);
        self
    }

    /// Adds a model the client may pick (the `model` config option): its id, as the
    /// provider names it, and a name to show. The session's agent starts on the model its
    /// factory gave (listed first when it is not one of these). Defaults to none: no model
    /// picker (a provider's own list is not asked for).
    pub fn model(mut self, id: impl Into<String>, name: impl Into<String>) -> Options {
        self.models.push((id.into(), name.into()));
        self
    }

    /// Adds a mode (see [`Mode`]): the client picks one with `session/set_mode` or the
    /// `mode` config option, and each session starts in the first. Defaults to none: no
    /// modes.
    pub fn mode(mut self, mode: Mode) -> Options {
        self.modes.push(mode);
        self
    }

    /// The most sessions live at once. A `session/new` or `session/load` that finds this
    /// many drops the idle one (no prompt running) used longest ago: its agent and its MCP
    /// servers end, and a later request for it gets -32002, as for an unknown session (with
    /// [`Options::session_dir`] it can be loaded again). When all of them run a prompt, the
    /// request is refused with -32603. Defaults to [`MAX_SESSIONS`] (64).
    pub fn max_sessions(mut self, sessions: usize) -> Options {
        self.max_sessions = sessions;
        self
    }

    /// How long each MCP server a session lists has to start, initialize and list its
    /// tools; past it the session is refused, naming the server. Defaults to
    /// [`MCP_TIMEOUT`] (30 s).
    pub fn mcp_timeout(mut self, timeout: Duration) -> Options {
        self.mcp_timeout = timeout;
        self
    }

    /// Lets the stdio MCP servers a client lists get this variable of this process's
    /// environment, besides [`PASSED_ENV`] and the variables the client lists (which win).
    /// No other variable of ours reaches them: API keys stay ours.
    pub fn pass_env(mut self, name: impl Into<String>) -> Options {
        self.passed_env.push(name.into());
        self
    }

    /// The prefix the tools of the MCP server that clients list as `server` get (`fs_`
    /// turns `read_file` into `fs_read_file`). Without one, a server's tools keep their
    /// names unless they collide with another listed server's: each server of the collision
    /// then gets its own name and `_` as the prefix of all its tools (see
    /// [MCP servers](self#mcp-servers)). Defaults to none.
    pub fn mcp_prefix(mut self, server: impl Into<String>, prefix: impl Into<String>) -> Options {
        self.mcp_prefixes.insert(server.into(), prefix.into());
        self
    }

    /// How long each request of the client tools ([`SessionInfo::client_tools`]) waits
    /// for the client's answer (a command's end excepted: [`Options::command_timeout`]);
    /// past it the request is given up with `$/cancel_request` and the call gets an error
    /// result. Defaults to [`CLIENT_TIMEOUT`] (30 s).
    pub fn client_timeout(mut self, timeout: Duration) -> Options {
        self.client_timeout = timeout;
        self
    }

    /// How long a command run in the client's terminal ([`TERMINAL_TOOL`]) may take; past
    /// it the command is killed and the call gets an error result with its output so far.
    /// Defaults to [`COMMAND_TIMEOUT`] (10 minutes).
    pub fn command_timeout(mut self, timeout: Duration) -> Options {
        self.command_timeout = timeout;
        self
    }

    fn kind_of(&self, name: &str) -> ToolKind {
        (self.kinds.get(name).copied())
            .or_else(|| client_tools::kind_of(name))
            .unwrap_or_default()
    }
}

/// Serves ACP on `input` and `output`: requests and responses of the client are read from
/// `input`, responses, `session/update` notifications and permission requests are written to
/// `output`, one JSON-RPC message a line, each line flushed.
///
/// `factory` is called once per `session/new` (and `session/load`), on a worker thread of
/// `serve` (never the reading one, see [Sessions](self#sessions)), with the session it
/// builds for; it returns the builder of the session's agent
/// (provider, model, tools, hooks). `serve` adds to it the permission hook around the
/// factory's own `before_tool_call`, and for `session/load` the saved transcript, then builds.
/// With the `mcp` feature it first connects the MCP servers the session lists and adds their
/// tools (see [MCP servers](self#mcp-servers)); they end with the session.
/// An `Err` (or a builder that fails to build) answers the request with
/// [`codes::INTERNAL_ERROR`].
///
/// Blocks the current thread until `input` ends (the client closed it or went away). Each
/// prompt runs on a worker thread, so cancels and other sessions are served meanwhile. At
/// the end of input every run still active is aborted, every permission request released
/// and every setup given up (a server still initializing is waited for, at most its
/// [`Options::mcp_timeout`]), and `serve` returns once all of them have ended: no thread is
/// left behind.
///
/// The output is written by one writer thread: a client that reads slowly holds the runs
/// back once [`Options::max_unread_bytes`] wait unread, and a client that reads nothing for
/// [`Options::stall_timeout`] has its connection closed (every run is aborted), never our
/// memory grown.
///
/// # Errors
/// [`Error::Io`] when reading `input` fails, when writing `output` failed for another reason
/// than the client having gone (a broken pipe ends the session quietly), or, of kind
/// `TimedOut`, when the client stopped reading.
pub fn serve<F>(
    factory: F,
    input: impl BufRead,
    output: impl Write + Send + 'static,
    options: Options,
) -> Result<(), Error>
where
    F: Fn(&SessionInfo) -> Result<AgentBuilder, Error> + Sync,
{
    server::serve(&factory, input, output, &options)
}

/// [`serve`] on the process's stdin and stdout, the way editors start ACP agents.
///
/// Blocks until stdin ends. Nothing else may write to stdout meanwhile: print logs to stderr.
///
/// # Errors
/// As [`serve`].
pub fn serve_stdio<F>(factory: F, options: Options) -> Result<(), Error>
where
    F: Fn(&SessionInfo) -> Result<AgentBuilder, Error> + Sync,
{
    serve(factory, std::io::stdin().lock(), std::io::stdout(), options)
}
