//! The errors of the MCP client, and the direction of a traced message.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

#[cfg(doc)]
use super::ClientBuilder;

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
    /// The stdio server read nothing of what the client writes for `after` while `waiting`
    /// bytes waited for it (the pipe and the client's queue full): the connection is closed
    /// rather than let the queue grow.
    NotReading {
        /// How long nothing was read.
        after: Duration,
        /// The bytes that waited, in the client's queue.
        waiting: usize,
    },
    /// A paginated list (`tools/list`) went over [`ClientBuilder::max_list_bytes`] in all
    /// its pages together, or over 1000 pages; nothing of it is kept.
    ListTooLarge {
        /// The method of the list.
        method: String,
        /// The limit, in bytes.
        limit: usize,
        /// How many pages had come.
        pages: usize,
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
    /// A tool's result does not fit the tool's `outputSchema` (or lacks the
    /// `structuredContent` the schema promises). The connection goes on.
    BadResult {
        /// The tool's name on the server.
        tool: String,
        /// What does not fit.
        reason: String,
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
    /// The HTTP server redirected a request where this client does not follow: only a
    /// `307` or `308` to the same origin (scheme, host and port) is followed, at most five
    /// times. The other host was sent nothing.
    Redirected {
        /// The status of the redirect.
        status: u16,
        /// Where it pointed: its origin and path, without user info or query string.
        location: String,
    },
    /// The HTTP server refused the request for want of authorization (`401`, or `403`
    /// with `insufficient_scope`), and no OAuth is configured ([`ClientBuilder::oauth`]) or
    /// the authorizations it got were still refused: its `WWW-Authenticate` challenge,
    /// parsed, for a program that runs a flow of its own.
    Unauthorized {
        /// `401` or `403`.
        status: u16,
        /// The challenge (its `resource_metadata`, `scope`, `error`...).
        challenge: super::Challenge,
    },
    /// The OAuth flow could not get a token: discovery, the client's registration, the
    /// user's authorization or the token endpoint failed, or a check of the flow did not
    /// pass (a resource that is not this server, an issuer that is not the one named, a
    /// `state` that does not match).
    Auth(String),
    /// The OAuth token store ([`super::OAuth::store`]) could not read what it keeps (a
    /// corrupt file: the connect fails) or save new tokens (the request that got them:
    /// the connection keeps them and goes on): its reason.
    TokenStore(String),
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
            McpError::NotReading { after, waiting } => write!(
                f,
                "the mcp server read nothing of its input for {after:?} while {waiting} bytes waited for it"
            ),
            McpError::ListTooLarge {
                method,
                limit,
                pages,
            } => write!(
                f,
                "the mcp server's {method} went over {limit} bytes or 1000 pages ({pages} pages came)"
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
            McpError::BadResult { tool, reason } => write!(
                f,
                "the result of the mcp tool {tool} does not fit its output schema: {reason}"
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
            McpError::Redirected { status, location } => write!(
                f,
                "the mcp server redirected (status {status}) to {location}, which is not followed: \
                 only up to five 307 or 308 redirects to the same origin are"
            ),
            McpError::Unauthorized { status, challenge } => write!(
                f,
                "the mcp server refused the request for want of authorization (status {status}): {challenge}"
            ),
            McpError::Auth(m) => write!(f, "mcp authorization failed: {m}"),
            McpError::TokenStore(m) => write!(f, "the mcp token store failed: {m}"),
            McpError::SessionExpired => f.write_str("the mcp server no longer knows the session"),
            McpError::Closed => f.write_str("the mcp client is closed"),
        }
    }
}

impl std::error::Error for McpError {}

impl McpError {
    /// This error without `secrets` in any of its texts (the server's messages and error
    /// data, which may echo a request's headers or URL), as the providers scrub theirs.
    pub(crate) fn scrubbed(self, secrets: &crate::llm::http::Secrets<'_>) -> McpError {
        use crate::llm::http::{scrub, scrub_error};
        let s = |text: String| scrub(text, Some(secrets));
        match self {
            McpError::Spawn(m) => McpError::Spawn(s(m)),
            McpError::Exited { status, stderr } => McpError::Exited {
                status,
                stderr: s(stderr),
            },
            McpError::Protocol(m) => McpError::Protocol(s(m)),
            McpError::Rpc {
                method,
                code,
                message,
                data,
            } => McpError::Rpc {
                method,
                code,
                message: s(message),
                data: data.map(|d| scrub_value(d, &s)),
            },
            McpError::BadResult { tool, reason } => McpError::BadResult {
                tool,
                reason: s(reason),
            },
            McpError::UnsupportedVersion(v) => McpError::UnsupportedVersion(s(v)),
            McpError::Transport(e) => McpError::Transport(scrub_error(e, Some(secrets))),
            McpError::Unauthorized {
                status,
                mut challenge,
            } => {
                challenge.scrub(&s);
                McpError::Unauthorized { status, challenge }
            }
            McpError::Auth(m) => McpError::Auth(s(m)),
            McpError::TokenStore(m) => McpError::TokenStore(s(m)),
            other => other,
        }
    }
}

/// `value` with every string in it scrubbed by `s`.
fn scrub_value(value: Value, s: &impl Fn(String) -> String) -> Value {
    match value {
        Value::String(text) => Value::String(s(text)),
        Value::Array(items) => Value::Array(items.into_iter().map(|v| scrub_value(v, s)).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, scrub_value(v, s)))
                .collect(),
        ),
        other => other,
    }
}

/// Which way a traced message went ([`ClientBuilder::trace`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the server.
    Out,
    /// From the server to the client.
    In,
}
