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

use parking_lot::{Mutex, RwLock};
use serde_json::{Map, Value, json};

use super::McpError;
use super::elicit::Answers;
use super::protocol::{self, Agreed, Progress};
use crate::cancel::CancelToken;
use crate::jsonrpc::{self, CallError, Delivered, Link, LinkError, Peer, Pool, RpcError};

/// Sees every notification of the server that the client does not use itself (resource
/// updates, list changes of prompts and resources, log messages): its method and params.
pub(crate) type NotificationHook = Arc<dyn Fn(&str, &Value) + Send + Sync>;

/// The key of a notice that hands a server's question to the request it belongs to.
const ASK: &str = "pagent/ask";

/// How many questions of the server, not tied to a request of ours, are answered at once.
const ANSWERING: usize = 4;

/// How many times one request is sent again with the input its server asked for.
pub(crate) const MAX_ROUNDS: usize = 16;

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

    /// Whether a request given up is told to the server with `notifications/cancelled`
    /// (stdio, and HTTP in the session era); over stateless HTTP closing the request's
    /// stream is the cancellation.
    fn cancels_with_notice(&self) -> bool {
        true
    }

    /// `error` without the secrets of the connection in its texts (HTTP: the credential
    /// headers, the URL's, the OAuth tokens).
    fn scrub(&self, error: McpError) -> McpError {
        error
    }

    /// The connection, as the spans of the `tracing` feature describe it.
    fn trace_peer(&self) -> crate::trace::McpPeer {
        crate::trace::McpPeer::stdio()
    }
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
    answers: Answers,
    notifications: Option<NotificationHook>,
    /// The server's name, for the questions it asks.
    server: OnceLock<String>,
    /// Our requests in flight whose waiting threads answer the server's questions
    /// themselves, the latest last.
    asking: Mutex<Vec<u64>>,
    /// The threads that answer the questions no request of ours waits for.
    pool: Pool<'static>,
    /// Cancelled when the connection ends: a question being answered is given up then.
    closing: CancelToken,
    /// The ids of the URL-mode elicitations the server said are complete
    /// (`notifications/elicitation/complete`), the latest [`COMPLETIONS_KEPT`].
    completed: Mutex<std::collections::VecDeque<String>>,
    /// Woken when an elicitation completes or the connection ends.
    completing: parking_lot::Condvar,
}

/// How many completed elicitation ids the router remembers.
const COMPLETIONS_KEPT: usize = 64;

/// The code of `URLElicitationRequiredError` (2025-11-25): a request that can go on only
/// once the user has been to the URLs in its `data.elicitations`.
pub(crate) const URL_ELICITATION_REQUIRED: i64 = -32042;

impl Router {
    pub(crate) fn new(
        trace: Option<Trace>,
        answers: Answers,
        notifications: Option<NotificationHook>,
    ) -> Router {
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
            answers,
            notifications,
            server: OnceLock::new(),
            asking: Mutex::new(Vec::new()),
            pool: Pool::new("pagent-mcp-answer", ANSWERING),
            closing: CancelToken::new(),
            completed: Mutex::new(std::collections::VecDeque::new()),
            completing: parking_lot::Condvar::new(),
        }
    }

    /// Notes that the URL-mode elicitation `id` completed and wakes who waits for it.
    fn complete(&self, params: Option<&Value>) {
        let Some(id) = params
            .and_then(|p| p.get("elicitationId"))
            .and_then(Value::as_str)
        else {
            return;
        };
        let mut completed = self.completed.lock();
        if !completed.iter().any(|c| c == id) {
            if completed.len() == COMPLETIONS_KEPT {
                completed.pop_front();
            }
            completed.push_back(id.to_owned());
        }
        self.completing.notify_all();
    }

    /// Whether the server said the URL-mode elicitation `id` is complete.
    pub(crate) fn is_complete(&self, id: &str) -> bool {
        self.completed.lock().iter().any(|c| c == id)
    }

    /// Waits until the server said every elicitation of `ids` is complete; false when
    /// `cancel` is cancelled, `until` passes or the connection ends first.
    fn wait_complete(&self, ids: &[String], cancel: &CancelToken, until: Instant) -> bool {
        let mut completed = self.completed.lock();
        let done = loop {
            if ids.iter().all(|id| completed.iter().any(|c| c == id)) {
                break true;
            }
            let now = Instant::now();
            if cancel.is_cancelled() || self.closing.is_cancelled() || now >= until {
                break false;
            }
            // Woken by a completion; the cancel tokens are looked at every 50 ms.
            let step = (until - now).min(Duration::from_millis(50));
            self.completing.wait_for(&mut completed, step);
        };
        drop(completed);
        done
    }

    /// The capabilities the client declares.
    pub(crate) fn capabilities(&self) -> Value {
        self.answers.capabilities()
    }

    /// Names the server, once known.
    pub(crate) fn set_server(&self, name: &str) {
        let _ = self.server.set(name.to_owned());
    }

    fn server(&self) -> &str {
        self.server.get().map_or("", String::as_str)
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
                match (call.id, call.method.as_str()) {
                    (None, "notifications/progress") => self.progress(call.params),
                    (None, "notifications/tools/list_changed") => {
                        self.tools_changed.store(true, Ordering::SeqCst);
                    }
                    // Noted for the request that waits for it, and the program's hook sees it.
                    (None, method @ "notifications/elicitation/complete") => {
                        self.complete(call.params.as_ref());
                        if let Some(hook) = &self.notifications {
                            hook(method, call.params.as_ref().unwrap_or(&Value::Null));
                        }
                    }
                    // Acknowledgments, cancellations of our answers: nothing to do.
                    (
                        None,
                        "notifications/subscriptions/acknowledged" | "notifications/cancelled",
                    ) => {}
                    (None, method) => {
                        if let Some(hook) = &self.notifications {
                            hook(method, call.params.as_ref().unwrap_or(&Value::Null));
                        }
                    }
                    (Some(id), "ping") => self.peer.respond(&id, &json!({}))?,
                    (Some(id), method) if self.answers.answers(method) => {
                        self.question(id, method, call.params, expect);
                    }
                    (Some(id), _) => self.peer.respond_error(
                        &id,
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

    /// A question of the server (`elicitation/create`, `roots/list`): handed to the request
    /// of ours it came with (over HTTP, the one whose reply carried it; over stdio, the
    /// latest one in flight), whose thread answers it; else answered on a thread of the
    /// pool, or refused when every one is busy. Never on the reading thread: a user may
    /// take minutes to answer.
    fn question(&self, id: Value, method: &str, params: Option<Value>, expect: Option<u64>) {
        let target = {
            let asking = self.asking.lock();
            match expect {
                Some(n) if asking.contains(&n) => Some(n),
                Some(_) => None,
                None => asking.last().copied(),
            }
        };
        let notice = json!({ASK: {"id": id, "method": method, "params": params}});
        if let Some(n) = target
            && self.peer.notice(n, notice.clone())
        {
            return;
        }
        let answer = {
            let answers = self.answers.clone();
            let server = self.server().to_owned();
            let peer = self.link.clone();
            let trace = self.trace.clone();
            let method = method.to_owned();
            let id = id.clone();
            move || {
                let outcome =
                    answers.answer(&server, &method, params.as_ref(), &CancelToken::new());
                let mut message = Vec::new();
                match &outcome {
                    Ok(result) => jsonrpc::result_to(&mut message, &id, result),
                    Err(e) => jsonrpc::error_to(&mut message, &id, e),
                }
                if let Some(trace) = &trace {
                    trace(super::Direction::Out, &String::from_utf8_lossy(&message));
                }
                let _ = peer.send(message, None, &CancelToken::new());
            }
        };
        if self.pool.submit(answer).is_err() {
            let _ = self.peer.respond_error(
                &id,
                &RpcError::new(
                    jsonrpc::codes::INTERNAL_ERROR,
                    "the client is answering too many questions at once",
                ),
            );
        }
    }

    /// Answers a question handed to a waiting request, on its thread.
    fn answer_notice(&self, ask: &Value, cancel: &CancelToken) {
        let id = ask.get("id").cloned().unwrap_or(Value::Null);
        let method = ask.get("method").and_then(Value::as_str).unwrap_or("");
        let outcome = self.ask_user(method, ask.get("params"), cancel);
        self.peer.answer(Some(&id), outcome.map(Some));
    }

    /// Answers one question of the server ([`Answers::answer`]) on this thread, giving it up
    /// (answered `cancel`) when `cancel` is cancelled or the connection ends: a user's
    /// answer is not waited for when nobody can receive it.
    fn ask_user(
        &self,
        method: &str,
        params: Option<&Value>,
        cancel: &CancelToken,
    ) -> Result<Value, RpcError> {
        let asked = match cancel.deadline() {
            Some(d) => CancelToken::with_deadline(d),
            None => CancelToken::new(),
        };
        let hooks = [&self.closing, cancel].map(|t| {
            let asked = asked.clone();
            t.on_cancel(move || asked.cancel())
        });
        let outcome = self.answers.answer(self.server(), method, params, &asked);
        for (token, hook) in [&self.closing, cancel].into_iter().zip(hooks) {
            if let Some(hook) = hook {
                token.remove_hook(hook);
            }
        }
        outcome
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
        self.closing.cancel();
        self.completing.notify_all();
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

/// A connection: a transport and its router, and the protocol agreed with the server.
pub(crate) struct Session {
    pub(crate) router: Arc<Router>,
    pub(crate) transport: Arc<dyn Transport>,
    agreed: RwLock<Agreed>,
}

/// A request to send: its method and params, as the caller made them.
pub(crate) struct Request<'a> {
    pub(crate) method: &'a str,
    pub(crate) params: Option<Value>,
    pub(crate) cancel: &'a CancelToken,
    pub(crate) timeout: Duration,
}

impl Session {
    pub(crate) fn new(
        router: Arc<Router>,
        transport: Arc<dyn Transport>,
        agreed: Agreed,
    ) -> Session {
        router.attach(&transport);
        Session {
            router,
            transport,
            agreed: RwLock::new(agreed),
        }
    }

    /// The protocol as agreed (or, before it is, as the client proposes it).
    pub(crate) fn agreed(&self) -> Agreed {
        self.agreed.read().clone()
    }

    pub(crate) fn set_agreed(&self, agreed: Agreed) {
        *self.agreed.write() = agreed;
    }

    /// Sends a request and waits for its final result: when the server answers with an
    /// `input_required` result (the stateless era's way to ask the client something), its
    /// questions are answered ([`Answers`]) and the request sent again, with a new id, the
    /// answers (`inputResponses`) and the server's `requestState` exactly as it came, at
    /// most [`MAX_ROUNDS`] times. Each round has the whole `timeout`: the time a user takes
    /// to answer is not the server's.
    ///
    /// Blocks as [`Session::request`] does, and while the questions are answered.
    ///
    /// # Errors
    /// As [`Session::request`]; [`McpError::Protocol`] for a server that still asks after
    /// [`MAX_ROUNDS`] rounds, or for a malformed `input_required` result.
    pub(crate) fn call(
        &self,
        request: Request<'_>,
        mut on_progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<Value, McpError> {
        let Request {
            method,
            params,
            cancel,
            timeout,
        } = request;
        let mut retry = params.clone();
        for _ in 0..MAX_ROUNDS {
            let result = match self.request(
                Request {
                    method,
                    params: retry.take(),
                    cancel,
                    timeout,
                },
                match on_progress {
                    Some(ref mut f) => Some(&mut **f as &mut dyn FnMut(Progress)),
                    None => None,
                },
            ) {
                Err(
                    e @ McpError::Rpc {
                        code: URL_ELICITATION_REQUIRED,
                        ..
                    },
                ) => {
                    self.visit_urls(e, cancel, timeout)?;
                    retry = params.clone();
                    continue;
                }
                outcome => outcome?,
            };
            if !protocol::needs_input(method, &result)? {
                return Ok(result);
            }
            if !matches!(method, "tools/call" | "prompts/get" | "resources/read") {
                return Err(McpError::Protocol(format!(
                    "the server answered {method} with input_required, which only a tool call, a prompt or a resource may get"
                )));
            }
            retry = Some(self.retry_with_input(method, params.clone(), &result, cancel)?);
        }
        Err(McpError::Protocol(format!(
            "the server still asked for input after {MAX_ROUNDS} rounds of {method}"
        )))
    }

    /// After a `URLElicitationRequiredError` (`error`): each URL of its `data.elicitations`
    /// is shown to the user as a URL-mode elicitation (by the hook, or as events of the run
    /// inside a tool call), and once every one was accepted and the server said each is
    /// complete (`notifications/elicitation/complete`, waited for at most `timeout`), the
    /// request may be sent again.
    ///
    /// # Errors
    /// `error` itself when the client does not answer elicitations, the error names no URL,
    /// the user did not accept one, or the server did not say each is complete within
    /// `timeout`; [`McpError::Aborted`] when `cancel` is cancelled.
    fn visit_urls(
        &self,
        error: McpError,
        cancel: &CancelToken,
        timeout: Duration,
    ) -> Result<(), McpError> {
        let McpError::Rpc {
            data: Some(data), ..
        } = &error
        else {
            return Err(error);
        };
        let asked: Vec<Value> = match data.get("elicitations").and_then(Value::as_array) {
            Some(list) if !list.is_empty() => list.clone(),
            _ => return Err(error),
        };
        if !self.router.answers.answers("elicitation/create") {
            return Err(error);
        }
        let mut ids = Vec::new();
        for question in &asked {
            let mut question = question.clone();
            if let Some(q) = question.as_object_mut() {
                q.entry("mode").or_insert_with(|| "url".into());
            }
            let answer = self
                .router
                .ask_user("elicitation/create", Some(&question), cancel);
            if cancel.is_cancelled() {
                return Err(McpError::Aborted);
            }
            match answer {
                Ok(answer) if answer["action"] == "accept" => {}
                _ => return Err(error),
            }
            if let Some(id) = question.get("elicitationId").and_then(Value::as_str) {
                ids.push(id.to_owned());
            }
        }
        let now = Instant::now();
        let until = now
            .checked_add(timeout)
            .unwrap_or(now + Duration::from_secs(86_400));
        if self.router.wait_complete(&ids, cancel, until) {
            Ok(())
        } else if cancel.is_cancelled() {
            Err(McpError::Aborted)
        } else {
            Err(self.router.closed().unwrap_or(error))
        }
    }

    /// The params of the retry of `method` after the `input_required` result `interim`.
    fn retry_with_input(
        &self,
        method: &str,
        params: Option<Value>,
        interim: &Value,
        cancel: &CancelToken,
    ) -> Result<Value, McpError> {
        let malformed = |why: &str| {
            McpError::Protocol(format!(
                "the server's input_required answer to {method} {why}"
            ))
        };
        let mut responses = Map::new();
        if let Some(requests) = interim.get("inputRequests") {
            let requests = requests
                .as_object()
                .ok_or_else(|| malformed("has inputRequests that are not a map"))?;
            for (key, question) in requests {
                let asked = question
                    .get("method")
                    .and_then(Value::as_str)
                    .ok_or_else(|| malformed("has an input request without a method"))?;
                let answer = self
                    .router
                    .ask_user(asked, question.get("params"), cancel)
                    .map_err(|e| {
                        McpError::Protocol(format!(
                            "the server asked for {asked} in its answer to {method}, which the client cannot give: {}",
                            e.message
                        ))
                    })?;
                responses.insert(key.clone(), answer);
            }
        }
        let mut map = match params {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        };
        map.insert("inputResponses".into(), Value::Object(responses));
        // Echoed exactly, or left out when the server gave none.
        match interim.get("requestState") {
            Some(state) => map.insert("requestState".into(), state.clone()),
            None => map.remove("requestState"),
        };
        Ok(Value::Object(map))
    }

    /// Sends a request and waits for its answer, handing progress to `on_progress` (and
    /// asking the server for progress only when there is one). With the `tracing` feature
    /// the request is a span ([`crate::trace::McpCall`]), current while it is sent, so the
    /// context `stamp` puts in `_meta` is the request's. The params get the `_meta`
    /// of the agreed protocol ([`Agreed::stamp`]). Questions of the server that come with
    /// the request are answered on this thread.
    ///
    /// Blocks until the answer comes, `timeout` passes, `cancel` is cancelled or the
    /// connection ends. On a cancel or a timeout the server is told (`notifications/cancelled`,
    /// unless the method is `initialize`, which must not be cancelled, or the transport
    /// cancels by closing the request's stream) and this returns at once, without waiting
    /// for the server.
    ///
    /// # Errors
    /// [`McpError::Aborted`], [`McpError::Timeout`], [`McpError::Rpc`] for an error answer,
    /// and whatever ended the connection.
    pub(crate) fn request(
        &self,
        request: Request<'_>,
        on_progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<Value, McpError> {
        let traced = crate::trace::McpCall::open(
            request.method,
            request.params.as_ref(),
            &self.agreed.read().version,
            || self.transport.trace_peer(),
        );
        // The span records the error as the caller gets it: scrubbed of the secrets.
        let outcome = traced
            .in_scope(|| self.request_unscrubbed(request, on_progress, &traced))
            .map_err(|e| self.transport.scrub(e));
        traced.finish(&outcome);
        outcome
    }

    /// [`Session::request`] inside its span, its errors not scrubbed yet.
    fn request_unscrubbed(
        &self,
        request: Request<'_>,
        mut on_progress: Option<&mut dyn FnMut(Progress)>,
        traced: &crate::trace::McpCall,
    ) -> Result<Value, McpError> {
        let Request {
            method,
            params,
            cancel,
            timeout,
        } = request;
        let started = Instant::now();
        // One token for the transport: cancelled by the caller's token or at the deadline.
        // The caller's own deadline (a run timeout) bounds it too.
        let deadline = started.checked_add(timeout).map_or(cancel.deadline(), |d| {
            Some(cancel.deadline().map_or(d, |c| c.min(d)))
        });
        let call = match deadline {
            Some(d) => CancelToken::with_deadline(d),
            None => CancelToken::new(),
        };
        let hook = {
            let call = call.clone();
            cancel.on_cancel(move || call.cancel())
        };
        let agreed = self.agreed();
        let progress = on_progress.is_some();
        let mut id = None;
        let router = &self.router;
        let outcome = router
            .peer
            .request_with(
                method,
                |n| {
                    id = Some(n);
                    traced.sent(n);
                    router.asking.lock().push(n);
                    agreed.stamp(params, progress.then_some(n))
                },
                &call,
            )
            .map_err(CallError::Failed)
            .and_then(|ticket| {
                ticket.wait(&call, None, &mut |notice| {
                    if let Some(ask) = notice.get(ASK) {
                        router.answer_notice(ask, &call);
                        return;
                    }
                    if let (Some(f), Ok(p)) = (on_progress.as_mut(), serde_json::from_value(notice))
                    {
                        f(p);
                    }
                })
            });
        if let Some(n) = id {
            router.asking.lock().retain(|&a| a != n);
        }
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
        // Neither greeting is cancelled: a session-era server would read the notification
        // of a request it never knew before its `initialize`.
        let notify = !matches!(method, "initialize" | "server/discover")
            && self.transport.cancels_with_notice();
        if let Some(id) = id.filter(|_| notify) {
            let message = protocol::notification(
                "notifications/cancelled",
                Some(json!({
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
        let message = protocol::notification(method, self.agreed().stamp(params, None));
        self.router.trace(super::Direction::Out, &message);
        self.transport
            .send(message, None, cancel)
            .map_err(|e| self.transport.scrub(e))
    }

    /// The reason the connection ended (asks the transport when the router has none yet).
    pub(crate) fn ended(&self) -> McpError {
        self.router
            .closed()
            .unwrap_or_else(|| self.transport.ended())
    }
}
