//! The span of each request the MCP client sends, in the conventions' MCP client shape;
//! a `tools/call` an agent makes for an MCP tool adds to that tool's `execute_tool` span
//! instead (see the [module docs](super#mcp-requests)).

use std::cell::Cell;

use serde_json::Value;
use tracing::Span;
use tracing::field::Empty;

use super::spans::{TARGET, record_error};
use crate::llm::ServerAddress;
use crate::mcp::McpError;

/// Where the requests of one MCP connection go: what every span of them says of it.
#[derive(Clone, Debug)]
pub(crate) struct McpPeer {
    /// `network.transport`: `pipe` (stdio) or `tcp` (HTTP).
    transport: &'static str,
    /// `server.address` and `server.port` (HTTP).
    address: Option<ServerAddress>,
    /// `mcp.session.id`: the HTTP server's `Mcp-Session-Id`.
    session: Option<String>,
}

impl McpPeer {
    /// A server on the pipes of its process.
    pub(crate) fn stdio() -> McpPeer {
        McpPeer {
            transport: "pipe",
            address: None,
            session: None,
        }
    }

    /// A server at `url`, in the session `session` when it keeps one.
    pub(crate) fn http(url: &str, session: Option<String>) -> McpPeer {
        McpPeer {
            transport: "tcp",
            address: crate::llm::http::BaseUrl::parse(url)
                .ok()
                .map(|u| u.server_address()),
            session,
        }
    }
}

thread_local! {
    // Set while an MCP tool runs on this thread (see `in_tool`).
    static IN_TOOL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, the execution of an MCP tool, so that its `tools/call` adds to the current
/// `execute_tool` span rather than making one of its own.
pub(crate) fn in_tool<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_TOOL.with(|t| t.set(self.0));
        }
    }
    let _reset = Reset(IN_TOOL.with(|t| t.replace(true)));
    f()
}

/// The span of one request: its own, or the `execute_tool` span it adds to.
pub(crate) struct McpCall {
    span: Span,
    // The span is the tool call's: what it says of the outcome is the tool's to say.
    merged: bool,
}

impl McpCall {
    /// The span of the request `method` with `params`, in the protocol revision `protocol`
    /// (`mcp.protocol.version`), to the server `peer` describes (asked only when the span
    /// records anything).
    pub(crate) fn open(
        method: &str,
        params: Option<&Value>,
        protocol: &str,
        peer: impl FnOnce() -> McpPeer,
    ) -> McpCall {
        let param = |key| params.and_then(|p| p.get(key)).and_then(Value::as_str);
        let (tool, prompt, uri) = match method {
            "tools/call" => (param("name"), None, None),
            "prompts/get" => (None, param("name"), None),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                (None, None, param("uri"))
            }
            _ => (None, None, None),
        };
        let current = Span::current();
        let merged = method == "tools/call"
            && IN_TOOL.with(Cell::get)
            && current
                .metadata()
                .is_some_and(|m| m.name() == "execute_tool" && m.target() == TARGET);
        let span = if merged {
            current
        } else {
            let name = match tool.or(prompt) {
                Some(target) => format!("{method} {target}"),
                None => method.to_owned(),
            };
            tracing::info_span!(
                target: TARGET,
                "mcp",
                otel.name = name.as_str(),
                otel.kind = "client",
                mcp.method.name = Empty,
                jsonrpc.request.id = Empty,
                mcp.protocol.version = Empty,
                mcp.session.id = Empty,
                network.transport = Empty,
                server.address = Empty,
                server.port = Empty,
                gen_ai.operation.name = tool.map(|_| "execute_tool"),
                gen_ai.tool.name = tool,
                gen_ai.prompt.name = prompt,
                mcp.resource.uri = uri,
                rpc.response.status_code = Empty,
                error.type = Empty,
                otel.status_code = Empty,
                otel.status_description = Empty,
            )
        };
        if !span.is_disabled() {
            let peer = peer();
            span.record("mcp.method.name", method);
            span.record("mcp.protocol.version", protocol);
            span.record("network.transport", peer.transport);
            if let Some(session) = &peer.session {
                span.record("mcp.session.id", session.as_str());
            }
            if let Some(address) = &peer.address {
                span.record("server.address", address.host.as_str());
                span.record("server.port", i64::from(address.port));
            }
        }
        McpCall { span, merged }
    }

    /// Runs `f` (the request's sending and its wait) inside the span: the context sent in
    /// `params._meta` is this span's.
    pub(crate) fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        self.span.in_scope(f)
    }

    /// The request went out with the id `id`.
    pub(crate) fn sent(&self, id: u64) {
        self.span
            .record("jsonrpc.request.id", id.to_string().as_str());
    }

    /// How the request ended: an error answer's code, and for a span of its own the kind of
    /// failure (a result with `isError` is `tool_error`, as the conventions say).
    pub(crate) fn finish(&self, outcome: &Result<Value, McpError>) {
        if self.span.is_disabled() {
            return;
        }
        if let Err(McpError::Rpc { code, .. }) = outcome {
            self.span
                .record("rpc.response.status_code", code.to_string().as_str());
        }
        if self.merged {
            return;
        }
        let (kind, message) = match outcome {
            Ok(result) if result.get("isError") == Some(&Value::Bool(true)) => {
                ("tool_error".to_owned(), None)
            }
            Ok(_) => return,
            Err(e) => (error_type(e), Some(e.to_string())),
        };
        record_error(&self.span, &kind, message.as_deref());
    }
}

/// `error.type` of a failed request: the JSON-RPC error code of an error answer, else the
/// kind of failure.
fn error_type(e: &McpError) -> String {
    match e {
        McpError::Rpc { code, .. } => return code.to_string(),
        McpError::Timeout { .. } => "timeout",
        McpError::Aborted => "cancelled",
        McpError::Closed | McpError::Exited { .. } | McpError::SessionExpired => "closed",
        McpError::Protocol(_) | McpError::BadResult { .. } => "protocol",
        McpError::Transport(e) => return e.kind().as_str().to_owned(),
        McpError::Unauthorized { status, .. } => return status.to_string(),
        _ => "_OTHER",
    }
    .to_owned()
}
