//! A blocking client for the [Model Context Protocol](https://modelcontextprotocol.io): the
//! tools of any MCP server as pagent [`Tool`]s. Behind the `mcp` feature.
//!
//! ```no_run
//! use pagent::mcp::Client;
//! use pagent::Agent;
//! # use pagent::llm::Faux;
//!
//! // A stdio server: a child process speaking JSON-RPC on its stdin and stdout.
//! let files = Client::stdio("npx")
//!     .args(["-y", "@modelcontextprotocol/server-filesystem", "/tmp/work"])
//!     .prefix("fs_")
//!     .connect()?;
//! let mut builder = Agent::builder();
//! # builder = builder.provider(Faux::default());
//! for tool in files.tools()? {
//!     builder = builder.tool_arc(tool);
//! }
//! let agent = builder.build()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Transports
//! - **stdio** ([`Client::stdio`]): starts the program with its arguments, environment and
//!   working directory, and speaks newline-delimited JSON-RPC on its stdin and stdout. Its
//!   stderr is kept, the last [`ClientBuilder::stderr_limit`] bytes of it, for the error
//!   that says why it exited ([`Client::stderr`]).
//! - **Streamable HTTP** ([`Client::http`]): each message is a POST to the endpoint over
//!   `ureq`, answered with JSON or an event stream; the session id and the protocol version
//!   go with every request after `initialize`, and shutdown ends the session with a DELETE.
//!
//! # Lifecycle
//! [`ClientBuilder::connect`] starts the server, sends `initialize` (asking for protocol
//! revision 2025-06-18 and accepting 2025-03-26 and 2024-11-05 in the answer), then
//! `notifications/initialized`. [`Client::ping`] checks that the server answers.
//! [`Client::close`], or dropping the last handle (the client and every tool it made),
//! ends the connection: for stdio it closes the child's stdin, waits up to
//! [`ClientBuilder::shutdown_grace`] for it to exit, then kills it by its own pid and reaps
//! it. (A child started through a wrapper such as `npx` or a shell may leave its own
//! children running: start the server's program itself where you can.)
//!
//! # Never a hang
//! Every request waits for its answer, the caller's [`CancelToken`], its timeout and the end
//! of the connection at once. A server that exits or closes its output wakes every waiting
//! request with [`McpError::Exited`] (its exit status and the end of its stderr); a server
//! that writes something that is not a JSON-RPC message, answers a request never sent, or
//! sends a message over [`ClientBuilder::max_message_bytes`] ends the connection with
//! [`McpError::Protocol`] or [`McpError::TooLarge`]; a server that stays silent runs into
//! the timeout ([`McpError::Timeout`]). The server's own requests are answered (`ping`; an
//! error for the others), its notifications of progress and tool-list changes are used,
//! and the rest are ignored.
//!
//! # Tools
//! [`Client::tools`] lists the server's tools (every page of `tools/list`) and makes each
//! a pagent tool: its name (after the optional [`ClientBuilder::prefix`]), its description,
//! and its input schema passed through unchanged. A call sends `tools/call` and maps the
//! result to a [`ToolOutput`](crate::ToolOutput) ([`CallResult::to_output`]: the text of
//! each piece of content for the model, the whole result as details); a result with
//! `isError` becomes an error result the model sees. Progress notifications become
//! `ToolUpdate` events in the order they came. `abort()` (the tool's cancel token) sends
//! `notifications/cancelled` and the call returns at once with [`McpError::Aborted`];
//! [`ClientBuilder::call_timeout`] bounds each call the same way.
//!
//! When the server announces that its tools changed (`notifications/tools/list_changed`),
//! [`Client::sync_tools`] in a `before_turn` hook gives the agent the new list from the next
//! turn on:
//!
//! ```no_run
//! # use pagent::mcp::Client;
//! # use pagent::Agent;
//! # let server = Client::stdio("my-server").connect()?;
//! let sync = server.clone();
//! let mut builder = Agent::builder().before_turn(move |setup| {
//!     let _ = sync.sync_tools(&mut setup.tools);
//! });
//! # builder = builder.provider(pagent::llm::Faux::default());
//! for tool in server.tools()? {
//!     builder = builder.tool_arc(tool);
//! }
//! let agent = builder.build()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

use crate::Tool;
use crate::cancel::CancelToken;

mod http;
mod protocol;
mod session;
mod stdio;
mod tool;

pub use protocol::{CallResult, Content, Progress, ServerInfo, ToolInfo};
pub use tool::McpTool;

use session::{Router, Session, Trace, Transport};

/// What can go wrong talking to an MCP server.
///
/// `Display` is lowercase without a final period, like [`crate::Error`]. In a tool call it
/// becomes the error result the model sees.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum McpError {
    /// The server's program could not be started (not found, not executable...).
    Spawn(String),
    /// The server's process closed its output or exited.
    Exited {
        /// Its exit status, when it had exited (`exit status: 1`, `signal: 9`...).
        status: Option<String>,
        /// The last bytes it wrote to its stderr.
        stderr: String,
    },
    /// The server broke the protocol: a message that is not JSON or not JSON-RPC, a response
    /// to a request never sent, an HTTP reply without the response. The connection is
    /// closed: nothing after such a message can be trusted.
    Protocol(String),
    /// A message of the server was larger than [`ClientBuilder::max_message_bytes`].
    /// Reading stops at the limit, so a message without end fails at once.
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
        /// How much of the message was read when it passed the limit, in bytes.
        size: usize,
    },
    /// The server answered with a JSON-RPC error.
    Rpc {
        /// The method of the request.
        method: String,
        /// The error code.
        code: i64,
        /// The server's message.
        message: String,
        /// The error's data, if any.
        data: Option<Value>,
    },
    /// The server speaks none of the protocol revisions this client does.
    UnsupportedVersion(String),
    /// No answer within the timeout; the server was sent `notifications/cancelled`.
    Timeout {
        /// The method of the request.
        method: String,
        /// The timeout.
        after: Duration,
    },
    /// The caller's cancel token was cancelled; the server was sent
    /// `notifications/cancelled`.
    Aborted,
    /// The Streamable HTTP transport failed: an HTTP status, a connection that failed or
    /// broke off, a timeout of a phase.
    Transport(crate::Error),
    /// The HTTP server no longer knows the session (404): connect again.
    SessionExpired,
    /// The client was closed.
    Closed,
}

impl fmt::Display for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpError::Spawn(m) => write!(f, "mcp server: {m}"),
            McpError::Exited { status, stderr } => {
                f.write_str("the mcp server exited")?;
                if let Some(status) = status {
                    write!(f, " ({status})")?;
                }
                if !stderr.is_empty() {
                    write!(f, "; its stderr ends: {stderr}")?;
                }
                Ok(())
            }
            McpError::Protocol(m) => write!(f, "mcp protocol error: {m}"),
            McpError::TooLarge { limit, size } => write!(
                f,
                "the mcp server sent a message over the limit of {limit} bytes ({size} bytes read)"
            ),
            McpError::Rpc {
                method,
                code,
                message,
                ..
            } => write!(
                f,
                "the mcp server answered {method} with error {code}: {message}"
            ),
            McpError::UnsupportedVersion(v) => write!(
                f,
                "the mcp server speaks protocol revision {v}, which this client does not"
            ),
            McpError::Timeout { method, after } => {
                write!(f, "the mcp server did not answer {method} within {after:?}")
            }
            McpError::Aborted => f.write_str("aborted"),
            McpError::Transport(e) => write!(f, "mcp over http: {e}"),
            McpError::SessionExpired => f.write_str("the mcp server no longer knows the session"),
            McpError::Closed => f.write_str("the mcp client is closed"),
        }
    }
}

impl std::error::Error for McpError {}

/// Which way a traced message went ([`ClientBuilder::trace`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the server.
    Out,
    /// From the server to the client.
    In,
}

enum Kind {
    Stdio(stdio::Spawn),
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// Settings of a connection to one server; [`ClientBuilder::connect`] starts it.
pub struct ClientBuilder {
    kind: Kind,
    prefix: String,
    call_timeout: Duration,
    init_timeout: Duration,
    max_message_bytes: usize,
    trace: Option<Trace>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ClientBuilder");
        match &self.kind {
            Kind::Stdio(spawn) => d
                .field("program", &spawn.program)
                .field("args", &spawn.args),
            // Header values may be credentials.
            Kind::Http { url, headers } => d.field("url", url).field(
                "headers",
                &headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ),
        };
        d.field("prefix", &self.prefix)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    fn new(kind: Kind) -> ClientBuilder {
        ClientBuilder {
            kind,
            prefix: String::new(),
            call_timeout: Duration::from_secs(120),
            init_timeout: Duration::from_secs(30),
            max_message_bytes: 16 * 1024 * 1024,
            trace: None,
        }
    }

    fn spawn_mut(&mut self) -> Option<&mut stdio::Spawn> {
        match &mut self.kind {
            Kind::Stdio(spawn) => Some(spawn),
            Kind::Http { .. } => None,
        }
    }

    /// Adds an argument of the program (stdio only).
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.args.push(arg.into());
        }
        self
    }

    /// Adds arguments of the program (stdio only).
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let Some(s) = self.spawn_mut() {
            s.args.extend(args.into_iter().map(Into::into));
        }
        self
    }

    /// Sets an environment variable of the program, on top of this process's environment
    /// (stdio only).
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.env.push((key.into(), value.into()));
        }
        self
    }

    /// The program's working directory (stdio only). Defaults to this process's.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.cwd = Some(dir.into());
        }
        self
    }

    /// How much of the program's stderr is kept, in bytes (stdio only). Defaults to 8 KiB.
    #[must_use]
    pub fn stderr_limit(mut self, bytes: usize) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.stderr_limit = bytes;
        }
        self
    }

    /// How long shutdown waits for the program to exit after its stdin is closed, before it
    /// kills it (stdio only). Defaults to 1 s.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.shutdown_grace = grace;
        }
        self
    }

    /// Adds a header to every request, such as `authorization` (HTTP only).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> ClientBuilder {
        if let Kind::Http { headers, .. } = &mut self.kind {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// A prefix for the names of this server's tools as the model sees them (`fs_` turns
    /// `read_file` into `fs_read_file`), so that two servers' tools never collide. Defaults
    /// to none.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> ClientBuilder {
        self.prefix = prefix.into();
        self
    }

    /// How long one tool call (and any other request after `initialize`) may take.
    /// Defaults to 120 s.
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.call_timeout = timeout;
        self
    }

    /// How long starting the server and `initialize` may take. Defaults to 30 s.
    #[must_use]
    pub fn init_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.init_timeout = timeout;
        self
    }

    /// The largest message accepted from the server, in bytes. Defaults to 16 MiB.
    #[must_use]
    pub fn max_message_bytes(mut self, bytes: usize) -> ClientBuilder {
        self.max_message_bytes = bytes;
        self
    }

    /// Hands every message sent and received to `trace`, as a line of JSON, on the thread
    /// that sends or reads it (for logs and tests). It must return quickly. Defaults to none.
    #[must_use]
    pub fn trace(
        mut self,
        trace: impl Fn(Direction, &str) + Send + Sync + 'static,
    ) -> ClientBuilder {
        self.trace = Some(Arc::new(trace));
        self
    }

    /// Starts the server and initializes the connection.
    ///
    /// Blocks until the server answered `initialize`, at most [`ClientBuilder::init_timeout`].
    ///
    /// # Errors
    /// [`McpError::Spawn`] when the program cannot start, [`McpError::Exited`] when it exits
    /// before answering, [`McpError::Timeout`], [`McpError::UnsupportedVersion`], and any
    /// error of the transport or the protocol. The child process is ended in every case.
    pub fn connect(self) -> Result<Client, McpError> {
        let router = Arc::new(Router::new(self.trace.clone()));
        let (transport, pid, http): (Box<dyn Transport>, _, _) = match &self.kind {
            Kind::Stdio(spawn) => {
                let mut spawn = spawn.clone();
                spawn.max_message_bytes = self.max_message_bytes;
                let t = stdio::StdioTransport::spawn(&spawn, &router)?;
                let pid = t.pid();
                let t = Arc::new(t);
                (Box::new(Shared(t.clone())), Some(pid), Handle::Stdio(t))
            }
            Kind::Http { url, headers } => {
                let t = http::HttpTransport::new(
                    url.clone(),
                    headers.clone(),
                    self.max_message_bytes,
                    &router,
                )?;
                let t = Arc::new(t);
                (Box::new(Shared(t.clone())), None, Handle::Http(t))
            }
        };
        let session = Session { router, transport };
        let info = match initialize(&session, &http, self.init_timeout) {
            Ok(info) => info,
            Err(e) => {
                session.router.close(McpError::Closed);
                session.transport.close();
                return Err(e);
            }
        };
        Ok(Client {
            inner: Arc::new(Inner {
                session,
                handle: http,
                pid,
                info,
                prefix: self.prefix,
                call_timeout: self.call_timeout,
                given: Mutex::new(Vec::new()),
            }),
        })
    }
}

/// `initialize`, then `notifications/initialized`.
fn initialize(
    session: &Session,
    handle: &Handle,
    timeout: Duration,
) -> Result<ServerInfo, McpError> {
    let never = CancelToken::new();
    let result = session
        .request(
            "initialize",
            Some(protocol::initialize_params(protocol::PROTOCOL_VERSIONS[0])),
            &never,
            timeout,
            None,
        )
        .map_err(|e| match e {
            // The child's exit says more than the closed pipe.
            McpError::Closed => session.ended(),
            e => e,
        })?;
    let info = protocol::server_info(result).map_err(|e| {
        if e.contains(' ') {
            McpError::Protocol(e)
        } else {
            McpError::UnsupportedVersion(e)
        }
    })?;
    if let Handle::Http(http) = handle {
        http.set_protocol_version(&info.protocol_version);
    }
    let deadline = CancelToken::with_deadline(std::time::Instant::now() + timeout);
    session.notify("notifications/initialized", None, &deadline)?;
    Ok(info)
}

/// The transport, shared by the session and the client's typed handle.
struct Shared<T>(Arc<T>);

impl<T: Transport> Transport for Shared<T> {
    fn send(
        &self,
        message: Vec<u8>,
        id: Option<u64>,
        cancel: &CancelToken,
    ) -> Result<(), McpError> {
        self.0.send(message, id, cancel)
    }
    fn send_detached(&self, message: Vec<u8>) {
        self.0.send_detached(message);
    }
    fn close(&self) {
        self.0.close();
    }
    fn ended(&self) -> McpError {
        self.0.ended()
    }
}

enum Handle {
    Stdio(Arc<stdio::StdioTransport>),
    Http(Arc<http::HttpTransport>),
}

/// A connection to one MCP server. Cheap to clone (an `Arc`): clones, and the tools made by
/// [`Client::tools`], share the connection, which ends when the last of them is dropped or
/// [`Client::close`] is called.
///
/// Every method may be called from any thread, and requests from several threads run at
/// the same time over the one connection.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    session: Session,
    handle: Handle,
    pid: Option<u32>,
    info: ServerInfo,
    prefix: String,
    call_timeout: Duration,
    /// The names of the tools last handed out, for `sync_tools`.
    given: Mutex<Vec<String>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.session.router.close(McpError::Closed);
        self.session.transport.close();
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.inner.info.name)
            .field("pid", &self.inner.pid)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Settings for a server started as `program`, spoken to over its stdin and stdout.
    pub fn stdio(program: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(Kind::Stdio(stdio::Spawn {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            max_message_bytes: 0,
            stderr_limit: 8 * 1024,
            shutdown_grace: Duration::from_secs(1),
        }))
    }

    /// Settings for a server at `url` (its MCP endpoint, such as `http://127.0.0.1:8000/mcp`),
    /// spoken to over Streamable HTTP.
    pub fn http(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(Kind::Http {
            url: url.into(),
            headers: Vec::new(),
        })
    }

    /// What the server said about itself when the connection was initialized.
    pub fn server_info(&self) -> &ServerInfo {
        &self.inner.info
    }

    /// The process id of a stdio server; `None` over HTTP.
    pub fn pid(&self) -> Option<u32> {
        self.inner.pid
    }

    /// The last bytes the stdio server wrote to its stderr (empty over HTTP).
    pub fn stderr(&self) -> String {
        match &self.inner.handle {
            Handle::Stdio(t) => t.stderr(),
            Handle::Http(_) => String::new(),
        }
    }

    /// The session id the HTTP server gave (`Mcp-Session-Id`); `None` over stdio or when
    /// the server keeps no sessions.
    pub fn session_id(&self) -> Option<String> {
        match &self.inner.handle {
            Handle::Http(t) => t.session_id(),
            Handle::Stdio(_) => None,
        }
    }

    /// Sends `ping` and waits for the answer.
    ///
    /// Blocks until the server answers, at most [`ClientBuilder::call_timeout`].
    ///
    /// # Errors
    /// Any error of the request (see [`McpError`]).
    pub fn ping(&self) -> Result<(), McpError> {
        self.request("ping", None, &CancelToken::new(), None)
            .map(drop)
    }

    /// Lists every tool of the server, following `nextCursor` through every page.
    ///
    /// Blocks until the last page comes; each page may take [`ClientBuilder::call_timeout`].
    ///
    /// # Errors
    /// Any error of a request, or a malformed page ([`McpError::Protocol`]).
    pub fn list_tools(&self) -> Result<Vec<ToolInfo>, McpError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        // Bounded: a server that hands out cursors forever is broken.
        for _ in 0..1000 {
            let params = cursor.as_ref().map(|c| serde_json::json!({"cursor": c}));
            let page = self.request("tools/list", params, &CancelToken::new(), None)?;
            let page: protocol::ToolsPage = serde_json::from_value(page)
                .map_err(|e| McpError::Protocol(format!("a malformed tools/list page ({e})")))?;
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) if !next.is_empty() => cursor = Some(next),
                _ => return Ok(tools),
            }
        }
        Err(McpError::Protocol(
            "tools/list went on for more than 1000 pages".into(),
        ))
    }

    /// Calls a tool by its name on the server (without the prefix) and waits for its result.
    /// Progress notifications go to `on_progress` as they come, on the calling thread.
    ///
    /// Blocks until the result comes, `cancel` is cancelled, or
    /// [`ClientBuilder::call_timeout`] passes. On a cancel or a timeout the server is sent
    /// `notifications/cancelled` and this returns at once.
    ///
    /// # Errors
    /// [`McpError::Aborted`], [`McpError::Timeout`], and any other error of the request. A
    /// tool that reports a failure is not an error here: see [`CallResult::is_error`].
    pub fn call_tool(
        &self,
        name: &str,
        arguments: Value,
        cancel: &CancelToken,
        on_progress: &mut dyn FnMut(Progress),
    ) -> Result<CallResult, McpError> {
        let params = serde_json::json!({"name": name, "arguments": arguments});
        let result = self.request("tools/call", Some(params), cancel, Some(on_progress))?;
        CallResult::from_value(result).map_err(McpError::Protocol)
    }

    fn request(
        &self,
        method: &str,
        params: Option<Value>,
        cancel: &CancelToken,
        on_progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<Value, McpError> {
        self.inner
            .session
            .request(method, params, cancel, self.inner.call_timeout, on_progress)
    }

    /// The server's tools as pagent tools, named with the prefix.
    ///
    /// Blocks while the tools are listed (see [`Client::list_tools`]).
    ///
    /// # Errors
    /// Any error of [`Client::list_tools`].
    pub fn tools(&self) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        // Reset before listing: a change announced while the list is made is seen next time.
        self.inner.session.router.take_tools_changed();
        let tools: Vec<Arc<dyn Tool>> = self
            .list_tools()?
            .into_iter()
            .map(|info| Arc::new(McpTool::new(self.clone(), info)) as Arc<dyn Tool>)
            .collect();
        *self.inner.given.lock() = tools.iter().map(|t| t.name().to_owned()).collect();
        Ok(tools)
    }

    /// True when the server announced that its tools changed
    /// (`notifications/tools/list_changed`) since they were last listed by
    /// [`Client::tools`] or [`Client::sync_tools`].
    pub fn tools_changed(&self) -> bool {
        self.inner.session.router.tools_changed()
    }

    /// When the server's tools changed, replaces this server's tools in `tools` (those named
    /// as [`Client::tools`] last named them) with the new list, and returns true; does
    /// nothing and returns false otherwise. Meant for a `before_turn` hook (see the
    /// [module docs](self)).
    ///
    /// Blocks while the tools are listed, only when they changed.
    ///
    /// # Errors
    /// Any error of [`Client::list_tools`]; `tools` is left as it was.
    pub fn sync_tools(&self, tools: &mut Vec<Arc<dyn Tool>>) -> Result<bool, McpError> {
        if !self.tools_changed() {
            return Ok(false);
        }
        let old = self.inner.given.lock().clone();
        let fresh = self.tools()?;
        tools.retain(|t| !old.iter().any(|name| name == t.name()));
        tools.extend(fresh);
        Ok(true)
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Ends the connection now: the child process is ended (see the [module docs](self)),
    /// or the HTTP session deleted. Every request in flight, and every later one, fails
    /// with [`McpError::Closed`].
    ///
    /// Blocks for at most [`ClientBuilder::shutdown_grace`] and a kill (stdio), or a DELETE
    /// of at most 5 s (HTTP).
    pub fn close(&self) {
        self.inner.session.router.close(McpError::Closed);
        self.inner.session.transport.close();
    }
}
