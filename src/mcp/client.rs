//! A connection to one server: its requests, its tools, its end.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::builder::Kind;
use super::session::{Request, Session};
use super::{
    CallResult, ClientBuilder, Era, McpError, McpTool, Progress, ServerInfo, ToolInfo, http,
    protocol, stdio,
};
use crate::Tool;
use crate::cancel::CancelToken;
use crate::output::validate::{self, Unfollowed};

/// The most pages of one list: a server that hands out cursors forever is broken.
const MAX_PAGES: usize = 1000;

pub(super) enum Handle {
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
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) session: Arc<Session>,
    pub(super) handle: Handle,
    pub(super) pid: Option<u32>,
    pub(super) info: ServerInfo,
    pub(super) prefix: String,
    pub(super) call_timeout: Duration,
    /// The most bytes every page of one list may hold together.
    pub(super) max_list_bytes: usize,
    /// The names of the tools last handed out, for `sync_tools`.
    pub(super) given: Mutex<Vec<String>>,
    /// The output schema of each tool that declared one, from the last list of the tools.
    pub(super) schemas: Mutex<HashMap<String, Value>>,
    /// The stateless era's `subscriptions/listen` stream.
    pub(super) listening: Listening,
}

/// The stateless era's stream of change notifications: what it listens for, and the token
/// that ends the one open now.
#[derive(Default)]
pub(super) struct Listening {
    state: Mutex<ListenState>,
}

#[derive(Default)]
struct ListenState {
    /// The resources subscribed to (`resourceSubscriptions`).
    resources: BTreeSet<String>,
    /// Cancels the stream open now (a new one replaces it when the filter changes).
    stop: Option<CancelToken>,
    closed: bool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_listening();
        self.session.router.close(McpError::Closed);
        self.session.transport.close();
    }
}

impl Inner {
    fn stop_listening(&self) {
        let mut state = self.listening.state.lock();
        state.closed = true;
        if let Some(stop) = state.stop.take() {
            stop.cancel();
        }
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
            env_clear: false,
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
            tls: crate::llm::tls::TlsSettings::default(),
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

    /// Checks that the server answers: `ping`, or in the stateless era (which has no
    /// `ping`) `server/discover`.
    ///
    /// Blocks until the server answers, at most [`ClientBuilder::call_timeout`].
    ///
    /// # Errors
    /// Any error of the request (see [`McpError`]).
    pub fn ping(&self) -> Result<(), McpError> {
        let method = match self.inner.info.era {
            Era::Stateless => "server/discover",
            _ => "ping",
        };
        self.request(method, None, &CancelToken::new(), None)
            .map(drop)
    }

    /// Lists every tool of the server, following `nextCursor` through every page.
    ///
    /// Blocks until the last page comes; each page may take [`ClientBuilder::call_timeout`].
    /// The pages together may hold at most [`ClientBuilder::max_list_bytes`], in at most
    /// 1000 pages.
    ///
    /// A tool whose `x-mcp-header` annotations are invalid (the 2026-07-28 revision says
    /// a client must not call it) is left out.
    ///
    /// # Errors
    /// Any error of a request, a malformed page ([`McpError::Protocol`]), or a list over the
    /// limits ([`McpError::ListTooLarge`]).
    pub fn list_tools(&self) -> Result<Vec<ToolInfo>, McpError> {
        self.list_tools_with(&CancelToken::new())
    }

    /// [`Client::list_tools`], given up when `cancel` is cancelled or its deadline passes
    /// ([`CancelToken::with_deadline`]): a bound on the whole list, however many pages.
    ///
    /// # Errors
    /// As [`Client::list_tools`]; [`McpError::Aborted`] once `cancel` is cancelled (its
    /// deadline included: [`CancelToken::is_timed_out`] tells).
    pub fn list_tools_with(&self, cancel: &CancelToken) -> Result<Vec<ToolInfo>, McpError> {
        let mut tools = Vec::new();
        let mut headers = HashMap::new();
        let mut schemas = HashMap::new();
        for item in self.list("tools/list", "tools", cancel)? {
            let tool: ToolInfo = serde_json::from_value(item)
                .map_err(|e| McpError::Protocol(format!("a malformed tool in tools/list ({e})")))?;
            match tool.header_params() {
                Ok(params) if !params.is_empty() => {
                    headers.insert(tool.name.clone(), params);
                }
                Ok(_) => {}
                Err(_) => continue,
            }
            if let Some(schema) = &tool.output_schema {
                schemas.insert(tool.name.clone(), schema.clone());
            }
            tools.push(tool);
        }
        if let Handle::Http(http) = &self.inner.handle {
            http.set_tool_headers(headers);
        }
        *self.inner.schemas.lock() = schemas;
        Ok(tools)
    }

    /// Every item of the paginated list `method` (the items under `key` of each page).
    pub(super) fn list(
        &self,
        method: &str,
        key: &str,
        cancel: &CancelToken,
    ) -> Result<Vec<Value>, McpError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let mut bytes = 0;
        let too_large = |pages| McpError::ListTooLarge {
            method: method.to_owned(),
            limit: self.inner.max_list_bytes,
            pages,
        };
        // Bounded: a server that hands out cursors forever is broken.
        for pages in 1..=MAX_PAGES {
            let params = cursor.as_ref().map(|c| json!({"cursor": c}));
            let page = self.request(method, params, cancel, None)?;
            bytes += protocol::json_size(&page);
            if bytes > self.inner.max_list_bytes {
                return Err(too_large(pages));
            }
            let Value::Object(mut page) = page else {
                return Err(McpError::Protocol(format!(
                    "a {method} page is not an object"
                )));
            };
            match page.remove(key) {
                Some(Value::Array(list)) => items.extend(list),
                _ => {
                    return Err(McpError::Protocol(format!(
                        "a malformed {method} page (no list {key:?})"
                    )));
                }
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(items),
            }
        }
        Err(too_large(MAX_PAGES))
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
        let params = json!({"name": name, "arguments": arguments});
        let result = self.request("tools/call", Some(params), cancel, Some(on_progress))?;
        let result = CallResult::from_value(result).map_err(McpError::Protocol)?;
        let schema = self.inner.schemas.lock().get(name).cloned();
        if let (Some(schema), false) = (schema, result.is_error) {
            let checked = match &result.structured {
                Some(value) => {
                    let problems = validate::problems_with(&schema, value, Unfollowed::Accepts);
                    if problems.is_empty() {
                        Ok(())
                    } else {
                        Err(problems.join("; "))
                    }
                }
                None => {
                    Err("no structuredContent, though the tool declares an outputSchema".into())
                }
            };
            if let Err(reason) = checked {
                return Err(McpError::BadResult {
                    tool: name.to_owned(),
                    reason,
                });
            }
        }
        Ok(result)
    }

    /// A request, sent again with the input its server asks for when it answers
    /// `input_required` (a tool call, a prompt, a resource; see the module docs).
    pub(super) fn request(
        &self,
        method: &str,
        params: Option<Value>,
        cancel: &CancelToken,
        on_progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<Value, McpError> {
        self.inner.session.call(
            Request {
                method,
                params,
                cancel,
                timeout: self.inner.call_timeout,
            },
            on_progress,
        )
    }

    /// Opens the stateless era's stream of change notifications (`subscriptions/listen`)
    /// on a thread of its own, for what the server can announce: its tools, prompts and
    /// resources changing, and updates of the resources subscribed to. A stream already
    /// open is closed first. The session era's server speaks on its own stream (HTTP) or
    /// the connection (stdio) without being asked: nothing to do then.
    pub(super) fn listen(&self) {
        if self.inner.info.era != Era::Stateless {
            return;
        }
        let caps = &self.inner.info.capabilities;
        let changes = |what: &str| caps[what]["listChanged"].as_bool().unwrap_or(false);
        let mut state = self.inner.listening.state.lock();
        if state.closed {
            return;
        }
        if let Some(old) = state.stop.take() {
            old.cancel();
        }
        let mut filter = serde_json::Map::new();
        for (what, key) in [
            ("tools", "toolsListChanged"),
            ("prompts", "promptsListChanged"),
            ("resources", "resourcesListChanged"),
        ] {
            if changes(what) {
                filter.insert(key.into(), true.into());
            }
        }
        if !state.resources.is_empty() {
            filter.insert(
                "resourceSubscriptions".into(),
                state.resources.iter().cloned().collect::<Vec<_>>().into(),
            );
        }
        if filter.is_empty() {
            return;
        }
        let stop = CancelToken::new();
        state.stop = Some(stop.clone());
        drop(state);
        // The thread holds the session, not the client: dropping the last handle of the
        // client still ends the connection (and cancels `stop`).
        let session = self.inner.session.clone();
        let params = json!({"notifications": filter});
        let _ = std::thread::Builder::new()
            .name("pagent-mcp-listen".into())
            .spawn(move || listen_until(&session, &params, &stop));
    }
    /// The server's tools as pagent tools, named with the prefix.
    ///
    /// Blocks while the tools are listed (see [`Client::list_tools`]).
    ///
    /// # Errors
    /// Any error of [`Client::list_tools`].
    pub fn tools(&self) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        self.tools_with(&CancelToken::new())
    }

    /// [`Client::tools`], given up when `cancel` is cancelled or its deadline passes (see
    /// [`Client::list_tools_with`]).
    ///
    /// # Errors
    /// Any error of [`Client::list_tools_with`].
    pub fn tools_with(&self, cancel: &CancelToken) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        // Reset before listing: a change announced while the list is made is seen next time.
        self.inner.session.router.take_tools_changed();
        let tools: Vec<Arc<dyn Tool>> = self
            .list_tools_with(cancel)?
            .into_iter()
            .map(|info| Arc::new(McpTool::new(self.clone(), info)) as Arc<dyn Tool>)
            .collect();
        *self.inner.given.lock() = tools.iter().map(|t| t.name().to_owned()).collect();
        Ok(tools)
    }

    /// True once the server said that the URL-mode elicitation `id` (its `elicitationId`) is
    /// complete (`notifications/elicitation/complete`): the interaction the user started at
    /// its URL is over, and a UI that still shows it may close it. The client remembers the
    /// latest 64 such ids; the notification also reaches [`ClientBuilder::on_notification`].
    /// A request the server refused with a `URLElicitationRequiredError` waits for these
    /// itself and is sent again (see the [module docs](super#elicitation)).
    pub fn elicitation_completed(&self, id: &str) -> bool {
        self.inner.session.router.is_complete(id)
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
    /// [module docs](super)).
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

    /// Ends the connection now: the child process is ended (see the [module docs](super)),
    /// or the HTTP session deleted. Every request in flight, and every later one, fails
    /// with [`McpError::Closed`].
    ///
    /// Blocks for at most [`ClientBuilder::shutdown_grace`] and a kill (stdio), or a DELETE
    /// of at most 5 s (HTTP).
    pub fn close(&self) {
        self.inner.stop_listening();
        self.inner.session.router.close(McpError::Closed);
        self.inner.session.transport.close();
    }

    /// Subscribes to updates of the resource `uri`: the server sends
    /// `notifications/resources/updated` when it changes, which reaches the hook of
    /// [`ClientBuilder::on_notification`]. In the session era this is `resources/subscribe`;
    /// in the stateless era the `subscriptions/listen` stream is opened again with the URI
    /// in its filter.
    ///
    /// Blocks until the server answered (session era), at most
    /// [`ClientBuilder::call_timeout`].
    ///
    /// # Errors
    /// Any error of the request.
    pub fn subscribe_resource(&self, uri: &str) -> Result<(), McpError> {
        if self.inner.info.era == Era::Stateless {
            self.inner
                .listening
                .state
                .lock()
                .resources
                .insert(uri.to_owned());
            self.listen();
            return Ok(());
        }
        self.request(
            "resources/subscribe",
            Some(json!({"uri": uri})),
            &CancelToken::new(),
            None,
        )
        .map(drop)
    }

    /// Ends a subscription of [`Client::subscribe_resource`].
    ///
    /// Blocks as [`Client::subscribe_resource`] does.
    ///
    /// # Errors
    /// Any error of the request.
    pub fn unsubscribe_resource(&self, uri: &str) -> Result<(), McpError> {
        if self.inner.info.era == Era::Stateless {
            self.inner.listening.state.lock().resources.remove(uri);
            self.listen();
            return Ok(());
        }
        self.request(
            "resources/unsubscribe",
            Some(json!({"uri": uri})),
            &CancelToken::new(),
            None,
        )
        .map(drop)
    }
}

/// How long a listen stream that ended waits before it is opened again.
const LISTEN_PAUSE: Duration = Duration::from_secs(1);

/// How long one listen request may stay open: as long as the client does.
const LISTEN_OPEN: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// The listen stream's thread: the request stays open, its notifications routed as any
/// other, until `stop` is cancelled or the connection ends. A stream the server ended is
/// opened again after [`LISTEN_PAUSE`], as long as the last one lasted longer than that (a
/// server that ends each at once is not asked forever).
fn listen_until(session: &Session, params: &Value, stop: &CancelToken) {
    loop {
        if session.router.closed().is_some() || stop.is_cancelled() {
            return;
        }
        let started = std::time::Instant::now();
        let outcome = session.request(
            Request {
                method: "subscriptions/listen",
                params: Some(params.clone()),
                cancel: stop,
                timeout: LISTEN_OPEN,
            },
            None,
        );
        if stop.is_cancelled() || matches!(outcome, Err(McpError::Closed)) {
            return;
        }
        if started.elapsed() < LISTEN_PAUSE || stop.wait_timeout(LISTEN_PAUSE) {
            return;
        }
    }
}
