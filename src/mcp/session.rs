//! One connection's JSON-RPC bookkeeping, whatever the transport: request ids, the callers
//! waiting for their responses, progress, the server's own requests and notifications, and
//! the reason the connection ended.
//!
//! # How a request waits
//! The caller registers its id with a channel, hands the message to the transport, and waits
//! on the channel, the cancel token and the call's deadline at once (`select!`). Whoever
//! reads the server's messages ([`Router::deliver`]: the stdio reader thread, or the HTTP
//! transport's thread of the request, and its thread of the server's own GET stream) sends the response and the progress of that id to
//! its channel. When the connection ends, every channel is dropped, which wakes every waiter
//! at once with the reason.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use serde_json::Value;

use super::McpError;
use super::protocol::{self, Incoming, Progress, RpcError};
use crate::cancel::CancelToken;

/// What a waiting request receives.
pub(crate) enum Event {
    Response(Result<Value, RpcError>),
    Progress(Progress),
    /// The transport could not complete the request (HTTP: the POST failed).
    Failed(McpError),
}

/// Sees every message that goes out or comes in, as a line of JSON (for logs and tests).
pub(crate) type Trace = Arc<dyn Fn(super::Direction, &str) + Send + Sync>;

/// How messages reach the server.
pub(crate) trait Transport: Send + Sync {
    /// Sends one message. For a request (`id` is `Some`), the answer may be delivered to the
    /// router before this returns (HTTP) or later (stdio). Blocks at most until `cancel` is
    /// cancelled.
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
}

/// The requests in flight and what the server said unasked.
pub(crate) struct Router {
    pending: Mutex<HashMap<u64, Sender<Event>>>,
    /// Set once the connection ended; the error every later request gets.
    closed: Mutex<Option<McpError>>,
    /// The highest id handed out: a response to an id above it was never asked for.
    last_id: AtomicU64,
    tools_changed: AtomicBool,
    trace: Option<Trace>,
}

impl Router {
    pub(crate) fn new(trace: Option<Trace>) -> Router {
        Router {
            pending: Mutex::new(HashMap::new()),
            closed: Mutex::new(None),
            last_id: AtomicU64::new(0),
            tools_changed: AtomicBool::new(false),
            trace,
        }
    }

    pub(crate) fn trace(&self, direction: super::Direction, message: &[u8]) {
        if let Some(trace) = &self.trace {
            trace(direction, &String::from_utf8_lossy(message));
        }
    }

    /// Takes one message of the server. Returns true when it was the response to `expect`.
    /// A server request gets its answer through `reply`.
    ///
    /// # Errors
    /// A message that breaks the protocol: not JSON, not JSON-RPC, or a response to an id
    /// this client never sent; or the error of `reply` (a server that does not read). The
    /// connection cannot be trusted after it.
    pub(crate) fn deliver(
        &self,
        bytes: &[u8],
        expect: Option<u64>,
        reply: &dyn Fn(Vec<u8>) -> Result<(), McpError>,
    ) -> Result<bool, McpError> {
        self.trace(super::Direction::In, bytes);
        match protocol::parse(bytes).map_err(McpError::Protocol)? {
            // The server could not read a message of ours and cannot say which (JSON-RPC's
            // `null` id): in the reply to a request, the error is that request's; elsewhere
            // (stdio, the server's own stream) it belongs to none, and is only traced.
            Incoming::Response {
                id: Value::Null,
                outcome: Err(e),
            } => {
                let Some(n) = expect else {
                    return Ok(false);
                };
                if let Some(tx) = self.pending.lock().remove(&n) {
                    let _ = tx.send(Event::Response(Err(e)));
                }
                Ok(true)
            }
            Incoming::Response { id, outcome } => {
                let Some(n) = id.as_u64().filter(|&n| n >= 1 && n <= self.last_id()) else {
                    return Err(McpError::Protocol(format!(
                        "the server answered a request that was never sent (id {id})"
                    )));
                };
                // A response to a request that gave up (aborted, timed out) finds no one.
                if let Some(tx) = self.pending.lock().remove(&n) {
                    let _ = tx.send(Event::Response(outcome));
                }
                Ok(expect == Some(n))
            }
            Incoming::Notification { method, params } => {
                match method.as_str() {
                    "notifications/progress" => self.progress(params),
                    "notifications/tools/list_changed" => {
                        self.tools_changed.store(true, Ordering::SeqCst);
                    }
                    // Logging, resource updates, cancellations of our answers: nothing to do.
                    _ => {}
                }
                Ok(false)
            }
            Incoming::Request { id, method, .. } => {
                let answer = match method.as_str() {
                    "ping" => Ok(Value::Object(Default::default())),
                    _ => Err((
                        protocol::METHOD_NOT_FOUND,
                        "method not supported by the client",
                    )),
                };
                let message = protocol::response(&id, answer);
                self.trace(super::Direction::Out, &message);
                reply(message)?;
                Ok(false)
            }
        }
    }

    fn progress(&self, params: Value) {
        let Some(token) = params.get("progressToken").and_then(Value::as_u64) else {
            return;
        };
        let Ok(progress) = serde_json::from_value::<Progress>(params) else {
            return;
        };
        if let Some(tx) = self.pending.lock().get(&token) {
            let _ = tx.send(Event::Progress(progress));
        }
    }

    /// Fails the request `id` with `e`, if it still waits.
    pub(crate) fn fail(&self, id: u64, e: McpError) {
        if let Some(tx) = self.pending.lock().remove(&id) {
            let _ = tx.send(Event::Failed(e));
        }
    }

    fn last_id(&self) -> u64 {
        self.last_id.load(Ordering::SeqCst)
    }

    /// Ends the connection with `why`: every waiting request wakes with it (the first reason
    /// given wins).
    pub(crate) fn close(&self, why: McpError) {
        self.closed.lock().get_or_insert(why);
        self.pending.lock().clear();
    }

    pub(crate) fn closed(&self) -> Option<McpError> {
        self.closed.lock().clone()
    }

    /// True (and reset) when the server said its tools changed since the last call.
    pub(crate) fn take_tools_changed(&self) -> bool {
        self.tools_changed.swap(false, Ordering::SeqCst)
    }

    pub(crate) fn tools_changed(&self) -> bool {
        self.tools_changed.load(Ordering::SeqCst)
    }

    fn register(&self) -> Result<(u64, Receiver<Event>), McpError> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut pending = self.pending.lock();
        // Checked under the lock that `close` clears under: a request either sees the
        // reason or is woken by the clearing.
        if let Some(why) = self.closed() {
            return Err(why);
        }
        let id = self.last_id.fetch_add(1, Ordering::SeqCst) + 1;
        pending.insert(id, tx);
        Ok((id, rx))
    }

    fn forget(&self, id: u64) {
        self.pending.lock().remove(&id);
    }
}

/// A connection: a transport and its router.
pub(crate) struct Session {
    pub(crate) router: Arc<Router>,
    pub(crate) transport: Box<dyn Transport>,
}

impl Session {
    /// Sends a request and waits for its answer, handing progress to `on_progress` (and
    /// asking the server for progress only when there is one).
    ///
    /// Blocks until the answer comes, `timeout` passes, `cancel` is cancelled or the
    /// connection ends. On a cancel or a timeout the server is sent `notifications/cancelled`
    /// (unless `cancellable` is false: `initialize` must not be cancelled) and this returns
    /// at once, without waiting for the server.
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
        let (id, rx) = self.router.register()?;
        let params = match on_progress {
            Some(_) => Some(protocol::with_progress_token(params, id)),
            None => params,
        };
        let message = protocol::request(id, method, params);
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
        let outcome = self.exchange(id, message, method, &call, &rx, &mut on_progress);
        if let Some(hook) = hook {
            cancel.remove_hook(hook);
        }
        self.router.forget(id);
        match outcome {
            Some(result) => result,
            None => {
                if method != "initialize" {
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
        }
    }

    /// Sends and waits; `None` when `call` was cancelled (by the caller or the deadline).
    fn exchange(
        &self,
        id: u64,
        message: Vec<u8>,
        method: &str,
        call: &CancelToken,
        rx: &Receiver<Event>,
        on_progress: &mut Option<&mut dyn FnMut(Progress)>,
    ) -> Option<Result<Value, McpError>> {
        self.router.trace(super::Direction::Out, &message);
        if let Err(e) = self.transport.send(message, Some(id), call) {
            return match call.is_cancelled() {
                true => None,
                false => Some(Err(e)),
            };
        }
        let timer = call.timer();
        loop {
            crossbeam_channel::select! {
                recv(rx) -> event => match event {
                    Ok(Event::Response(Ok(result))) => return Some(Ok(result)),
                    Ok(Event::Response(Err(e))) => {
                        return Some(Err(McpError::Rpc {
                            method: method.to_owned(),
                            code: e.code,
                            message: e.message,
                            data: e.data,
                        }));
                    }
                    Ok(Event::Failed(e)) => return Some(Err(e)),
                    Ok(Event::Progress(p)) => {
                        if let Some(f) = on_progress.as_mut() {
                            f(p);
                        }
                    }
                    Err(_) => return Some(Err(self.ended())),
                },
                recv(call.receiver()) -> _ => return None,
                recv(timer) -> _ => {
                    if call.is_cancelled() {
                        return None;
                    }
                }
            }
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
