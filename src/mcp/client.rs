//! A connection to one server: its requests, its tools, its end.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

use super::builder::Kind;
use super::session::Session;
use super::{
    CallResult, ClientBuilder, McpError, McpTool, Progress, ServerInfo, ToolInfo, http, protocol,
    stdio,
};
use crate::Tool;
use crate::cancel::CancelToken;

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
    pub(super) session: Session,
    pub(super) handle: Handle,
    pub(super) pid: Option<u32>,
    pub(super) info: ServerInfo,
    pub(super) prefix: String,
    pub(super) call_timeout: Duration,
    /// The most bytes every page of one list may hold together.
    pub(super) max_list_bytes: usize,
    /// The names of the tools last handed out, for `sync_tools`.
    pub(super) given: Mutex<Vec<String>>,
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
    /// The pages together may hold at most [`ClientBuilder::max_list_bytes`], in at most
    /// 1000 pages.
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
        let mut cursor: Option<String> = None;
        let mut bytes = 0;
        // Bounded: a server that hands out cursors forever is broken.
        for pages in 1..=MAX_PAGES {
            let params = cursor.as_ref().map(|c| serde_json::json!({"cursor": c}));
            let page = self.request("tools/list", params, cancel, None)?;
            bytes += protocol::json_size(&page);
            if bytes > self.inner.max_list_bytes {
                return Err(McpError::ListTooLarge {
                    method: "tools/list".into(),
                    limit: self.inner.max_list_bytes,
                    pages,
                });
            }
            let page: protocol::ToolsPage = serde_json::from_value(page)
                .map_err(|e| McpError::Protocol(format!("a malformed tools/list page ({e})")))?;
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) if !next.is_empty() => cursor = Some(next),
                _ => return Ok(tools),
            }
        }
        Err(McpError::ListTooLarge {
            method: "tools/list".into(),
            limit: self.inner.max_list_bytes,
            pages: MAX_PAGES,
        })
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
        self.inner.session.router.close(McpError::Closed);
        self.inner.session.transport.close();
    }
}
