//! The MCP layer of one connection, on the crate's one JSON-RPC peer ([`crate::jsonrpc`]):
//! what the server's messages mean to the client (its requests answered, progress and
//! tool-list changes used), and our requests with their timeouts and cancellations. Ids,
//! the waiting requests, classification and the reason the connection ended are the peer's.
//!
//! # How a request waits
//! The peer hands out the id (which is also the progress token), the transport sends the
//! message, and the caller waits on its ticket, the cancel token and the call's deadline at
//! once. Whoever reads the server's messages ([`Router::deliver`]: the stdio reader thread,
//! or the HTTP transport's thread of the request, and its thread of the server's own GET
//! stream) hands them to the peer, which routes the response to its ticket; progress goes
//! to it as a notice. When the connection ends, every waiter wakes at once with the reason.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::McpError;
use super::protocol::{self, Progress};
use crate::cancel::CancelToken;
use crate::jsonrpc::{self, CallError, Delivered, Link, LinkError, Peer, RpcError};

/// Sees every message that goes out or comes in, as a line of JSON (for logs and tests).
pub(crate) type Trace = Arc<dyn Fn(super::Direction, &str) + Send + Sync>;

/// How messages reach the server.
pub(crate) trait Transport: Send + Sync {
    /// Sends one message. For a request (`id` is `Some`), the answer may be delivered to the
    /// router before this returns (HTTP) or later (stdio). Blocks at most until `cancel` is
    /// cancelled, or as the transport documents.
    ///
    /// # Errors
    /// The message could not be sent.
    fn send(&self, message: Vec<u8>, id: Option<u64>, cancel: &CancelToken)
    -> Result<(), McpError>;

    /// Sends a notification without waiting for it to be sent (a cancellation).
    fn send_detached(&self, message: Vec<u8>);

    /// Ends the connection: the child process, or the HTTP session.
    fn close(&self);

    /// Why the connection ended, when it did on its own (the child's exit and stderr).
    fn ended(&self) -> McpError;

    /// Whether an error of [`Transport::send`] ends the connection.
    fn ends_connection(&self, error: &McpError) -> bool;
}

impl From<LinkError> for McpError {
    fn from(e: LinkError) -> McpError {
        match e {
            LinkError::Stalled { after, waiting } => McpError::NotReading { after, waiting },
            LinkError::Io(_) | LinkError::Closed => McpError::Closed,
        }
    }
}

/// The peer's way out: the transport, made after the router it delivers to (and held
/// weakly, as the transport's threads hold the router).
#[derive(Clone, Default)]
struct Late(Arc<OnceLock<Weak<dyn Transport>>>);

impl Late {
    fn transport(&self) -> Option<Arc<dyn Transport>> {
        self.0.get().and_then(Weak::upgrade)
    }
}

impl Link<McpError> for Late {
    fn send(
        &self,
        message: Vec<u8>,
        request: Option<u64>,
        cancel: &CancelToken,
    ) -> Result<(), McpError> {
        match self.transport() {
            Some(t) => t.send(message, request, cancel),
            None => Err(McpError::Closed),
        }
    }

    fn ends_connection(&self, error: &McpError) -> bool {
        self.transport().is_some_and(|t| t.ends_connection(error))
    }
}

/// The MCP layer over the peer, shared by the client and the transport's threads.
pub(crate) struct Router {
    peer: Peer<McpError>,
    link: Late,
    tools_changed: AtomicBool,
    trace: Option<Trace>,
}

impl Router {
    pub(crate) fn new(trace: Option<Trace>) -> Router {
        let link = Late::default();
        let peer_trace = trace.clone().map(|trace| -> jsonrpc::Trace {
            Arc::new(move |direction, message| {
                let direction = match direction {
                    jsonrpc::Direction::In => super::Direction::In,
                    jsonrpc::Direction::Out => super::Direction::Out,
                };
                trace(direction, &String::from_utf8_lossy(message));
            })
        });
        Router {
            peer: Peer::new(link.clone()).trace(peer_trace),
            link,
            tools_changed: AtomicBool::new(false),
            trace,
        }
    }

    /// Gives the peer its way out, once the transport exists.
    pub(crate) fn attach(&self, transport: &Arc<dyn Transport>) {
        let _ = self.link.0.set(Arc::downgrade(transport));
    }

    fn trace(&self, direction: super::Direction, message: &[u8]) {
        if let Some(trace) = &self.trace {
            trace(direction, &String::from_utf8_lossy(message));
        }
    }

    /// Takes one message of the server. Returns true when it was the response to `expect`
    /// (the request whose HTTP reply carried it). A request of the server is answered
    /// through the transport, on this thread.
    ///
    /// An error response with a `null` id (the server could not read a message of ours and
    /// cannot say which) is the error of `expect`; without one it belongs to no request and
    /// is only traced. Neither ends the connection.
    ///
    /// # Errors
    /// A message that breaks the protocol: not JSON, not JSON-RPC, or a response to an id
    /// this client never sent; or the failure to answer (a server that does not read). The
    /// connection cannot be trusted after it.
    pub(crate) fn deliver(&self, bytes: &[u8], expect: Option<u64>) -> Result<bool, McpError> {
        let delivered = self.peer.deliver(bytes).map_err(|violation| {
            McpError::Protocol(format!(
                "the server sent a message that is not JSON-RPC ({}): {}",
                violation.error.message,
                protocol::snippet(bytes)
            ))
        })?;
        match delivered {
            Delivered::Answered(n) | Delivered::Late(n) => Ok(expect == Some(n)),
            Delivered::Unknown(id) => Err(McpError::Protocol(format!(
                "the server answered a request that was never sent (id {id})"
            ))),
            Delivered::Unaddressed(error) => Ok(match expect {
                Some(n) => {
                    self.peer.resolve(n, Err(error));
                    true
                }
                None => false,
            }),
            Delivered::Blank => Ok(false),
            Delivered::Call(call) => {
                match (&call.id, call.method.as_str()) {
                    (None, "notifications/progress") => self.progress(call.params),
                    (None, "notifications/tools/list_changed") => {
                        self.tools_changed.store(true, Ordering::SeqCst);
                    }
                    // Logging, resource updates, cancellations of our answers: nothing to do.
                    (None, _) => {}
                    (Some(id), "ping") => self.peer.respond(id, &serde_json::json!({}))?,
                    (Some(id), _) => self.peer.respond_error(
                        id,
                        &RpcError::new(
                            jsonrpc::codes::METHOD_NOT_FOUND,
                            "method not supported by the client",
                        ),
                    )?,
                }
                Ok(false)
            }
        }
    }

    /// Hands a progress notification to the request whose id is its token.
    fn progress(&self, params: Option<Value>) {
        let Some(params) = params else { return };
        if let Some(token) = params.get("progressToken").and_then(Value::as_u64) {
            self.peer.notice(token, params);
        }
    }

    /// Fails the request `id` with `e`, if it still waits.
    pub(crate) fn fail(&self, id: u64, e: McpError) {
        self.peer.fail(id, e);
    }

    /// Ends the connection with `why`: every waiting request wakes with it (the first reason
    /// given wins).
    pub(crate) fn close(&self, why: McpError) {
        self.peer.close(why);
    }

    pub(crate) fn closed(&self) -> Option<McpError> {
        self.peer.closed()
    }

    /// True (and reset) when the server said its tools changed since the last call.
    pub(crate) fn take_tools_changed(&self) -> bool {
        self.tools_changed.swap(false, Ordering::SeqCst)
    }

    pub(crate) fn tools_changed(&self) -> bool {
        self.tools_changed.load(Ordering::SeqCst)
    }
}

/// A connection: a transport and its router.
pub(crate) struct Session {
    pub(crate) router: Arc<Router>,
    pub(crate) transport: Arc<dyn Transport>,
}

impl Session {
    pub(crate) fn new(router: Arc<Router>, transport: Arc<dyn Transport>) -> Session {
        router.attach(&transport);
        Session { router, transport }
    }

    /// Sends a request and waits for its answer, handing progress to `on_progress` (and
    /// asking the server for progress only when there is one).
    ///
    /// Blocks until the answer comes, `timeout` passes, `cancel` is cancelled or the
    /// connection ends. On a cancel or a timeout the server is sent `notifications/cancelled`
    /// (unless the method is `initialize`, which must not be cancelled) and this returns at
    /// once, without waiting for the server.
    ///
    /// # Errors
    /// [`McpError::Aborted`], [`McpError::Timeout`], [`McpError::Rpc`] for an error answer,
    /// and whatever ended the connection.
    pub(crate) fn request(
        &self,
        method: &str,
        params: Option<Value>,
        cancel: &CancelToken,
        timeout: Duration,
        mut on_progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<Value, McpError> {
        let started = Instant::now();
        // One token for the transport: cancelled by the caller's token or at the deadline.
        // The caller's own deadline (a run timeout) bounds it too.
        let deadline = match cancel.deadline() {
            Some(d) => d.min(started + timeout),
            None => started + timeout,
        };
        let call = CancelToken::with_deadline(deadline);
        let hook = {
            let call = call.clone();
            cancel.on_cancel(move || call.cancel())
        };
        let progress = on_progress.is_some();
        let mut id = None;
        let outcome = self
            .router
            .peer
            .request_with(
                method,
                |n| {
                    id = Some(n);
                    match progress {
                        true => Some(protocol::with_progress_token(params, n)),
                        false => params,
                    }
                },
                &call,
            )
            .map_err(CallError::Failed)
            .and_then(|ticket| {
                ticket.wait(&call, None, &mut |notice| {
                    if let (Some(f), Ok(p)) = (on_progress.as_mut(), serde_json::from_value(notice))
                    {
                        f(p);
                    }
                })
            });
        if let Some(hook) = hook {
            cancel.remove_hook(hook);
        }
        match outcome {
            Ok(result) => return Ok(result),
            Err(CallError::Rpc(e)) => {
                return Err(McpError::Rpc {
                    method: method.to_owned(),
                    code: e.code,
                    message: e.message,
                    data: e.data,
                });
            }
            // A send that failed because the call was given up is a give-up too.
            Err(CallError::Failed(e)) if !call.is_cancelled() => return Err(e),
            Err(_) => {}
        }
        if let Some(id) = id.filter(|_| method != "initialize") {
            let message = protocol::notification(
                "notifications/cancelled",
                Some(serde_json::json!({
                    "requestId": id,
                    "reason": if call.is_timed_out() { "timed out" } else { "aborted" },
                })),
            );
            self.router.trace(super::Direction::Out, &message);
            self.transport.send_detached(message);
        }
        if !cancel.is_cancelled() && call.is_timed_out() {
            Err(McpError::Timeout {
                method: method.to_owned(),
                after: timeout,
            })
        } else {
            Err(McpError::Aborted)
        }
    }

    /// Sends a notification, waiting at most until `cancel` is cancelled.
    pub(crate) fn notify(
        &self,
        method: &str,
        params: Option<Value>,
        cancel: &CancelToken,
    ) -> Result<(), McpError> {
        let message = protocol::notification(method, params);
        self.router.trace(super::Direction::Out, &message);
        self.transport.send(message, None, cancel)
    }

    /// The reason the connection ended (asks the transport when the router has none yet).
    pub(crate) fn ended(&self) -> McpError {
        self.router
            .closed()
            .unwrap_or_else(|| self.transport.ended())
    }
}
