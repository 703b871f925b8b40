//! The Streamable HTTP transport: every message is a POST to one endpoint, answered with
//! `202 Accepted` (a notification), one JSON message, or an event stream of messages that
//! ends with the response.
//!
//! A request is sent and its reply read on a short-lived thread of its own (so that the
//! caller sees progress while the reply streams), over the same sockets as the model
//! providers (`llm::http`): an abort or the call's deadline shuts the socket down at once,
//! which also tells the server that the client left. The session id the server hands out
//! in its answer to `initialize` (`Mcp-Session-Id`) goes with every later request, with the
//! agreed protocol version (`MCP-Protocol-Version`); shutdown ends the session with a
//! DELETE.
//!
//! # Redirects
//! A `307` or `308` to the same origin (scheme, host and port) is followed, at most
//! [`MAX_REDIRECTS`] times, with the same method, body and headers: the Python SDK and
//! fastmcp answer `POST /mcp/` with a `307` to `/mcp`. A `308` is permanent: later requests
//! go to its target at once. Any other redirect, and one to another origin, is
//! [`McpError::Redirected`], and the other host is sent nothing: the session id and the
//! headers (credentials among them) go only where the URL says.
//!
//! # The server's own stream
//! After `initialize`, a thread of its own opens the optional GET stream on which the server
//! sends what it says unasked (`notifications/tools/list_changed`, log messages, its own
//! requests): `Accept: text/event-stream` with the session header. `connect` returns only
//! once the server answered that GET (or the init timeout passed): a server that sends a
//! message right after `initialize` finds the stream open. A server that offers no stream
//! answers `405 Method Not Allowed` (or another error status), and the thread ends there:
//! such a server can only speak in the replies to requests. When the stream drops while the
//! client is open, it is opened again after the server's `retry` delay (else
//! [`RECONNECT_PAUSE`]), once, with `Last-Event-ID` when the server gave its events ids; a
//! stream that delivered a message earns another retry. The stream waits on its socket with
//! no idle timeout (a server may stay silent for hours); `close()` and drop shut the socket
//! down at once through its cancel token.
//!
//! # Resumption
//! A request's event stream that ends (or breaks) before the response, after the server
//! gave its events ids, is resumed as the spec says: after the server's `retry` delay, a GET
//! with `Last-Event-ID` opens a stream on which the server goes on, until the response comes
//! (each resumed stream may be resumed in turn; [`MAX_IDLE_RESUMES`] in a row without a new
//! event end it). The call's timeout and cancel token bound the whole. A stream without
//! event ids cannot be resumed: ending it before the response is a protocol error.
//!
//! # Bounded
//! The server's requests (on any stream) are answered inline, by the thread that read them,
//! one at a time: a server that sends thousands gets them answered in turn, never a thread
//! each. The cancellations a caller sends without waiting go to one thread through a queue
//! of [`SIDE_QUEUE`]; one that finds it full is dropped (the call has returned already, and
//! the server sees its socket closed).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use serde_json::Value;

use super::McpError;
use super::oauth::OAuth;
use super::oauth_flow::Auth;
use super::session::{Router, Transport};
use crate::cancel::CancelToken;
use crate::llm::http::{
    BaseUrl, Body, HttpClient, Method, Post, Reply, Secrets, Target, cancelled, for_each_event,
    scrub,
};
use crate::llm::sse;
use crate::llm::tls::TlsSettings;

/// How long an answer to the server, a detached `notifications/cancelled` and the closing
/// DELETE may take.
const SIDE_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a dropped stream waits before it is opened again, when the server set no
/// `retry`.
const RECONNECT_PAUSE: Duration = Duration::from_millis(250);

/// The longest `retry` honoured; the call's own timeout bounds a resumption anyway.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// How long the server's stream may stay silent: it has no idle timeout in practice.
const LISTEN_IDLE: Duration = Duration::from_secs(24 * 60 * 60);

/// How many redirects one request follows.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// How many times in a row a request's stream is resumed without a new event.
pub(crate) const MAX_IDLE_RESUMES: usize = 3;

/// How many times one request is authorized again after a refusal (a step-up that never
/// satisfies the server ends there).
pub(crate) const MAX_AUTHORIZATIONS: usize = 3;

/// How many detached messages (cancellations) may wait for their thread.
pub(crate) const SIDE_QUEUE: usize = 64;

pub(crate) struct HttpTransport {
    inner: Arc<Inner>,
    /// Cancelled on close: ends the server's stream (its socket is shut down at once).
    listening: CancelToken,
    /// The queue of the thread that posts detached messages; taken on close, which ends it.
    side: Mutex<Option<Sender<Vec<u8>>>>,
}

struct Inner {
    /// Where requests go: the URL given, or where a `308` moved it.
    url: Mutex<String>,
    headers: Vec<(String, String)>,
    http: HttpClient,
    max_message_bytes: usize,
    router: Arc<Router>,
    session: Mutex<Option<String>>,
    protocol_version: Mutex<Option<String>>,
    /// The server speaks the stateless era: no session, no stream of its own, no
    /// resumption, and cancellation by closing a request's stream.
    stateless: AtomicBool,
    /// For each tool (by its name on the server), the arguments it mirrors into headers
    /// (`x-mcp-header`): the header's name part and the argument's name.
    tool_headers: Mutex<HashMap<String, Vec<(String, String)>>>,
    /// OAuth, when configured: the token of every request, and the flow a refusal starts.
    auth: Option<Auth>,
}

/// What a request's event stream said about resuming it.
#[derive(Default)]
struct Resume {
    /// The id of the last event, for `Last-Event-ID`.
    last_event_id: Option<String>,
    /// The server's `retry`, in milliseconds.
    retry: Option<u64>,
}

impl Resume {
    fn note(&mut self, event: &sse::EventRef<'_>) {
        if let Some(id) = event.id {
            self.last_event_id = Some(id.to_owned());
        }
        if event.retry.is_some() {
            self.retry = event.retry;
        }
    }

    fn pause(&self) -> Duration {
        self.retry
            .map_or(RECONNECT_PAUSE, Duration::from_millis)
            .min(MAX_RETRY)
    }
}

impl HttpTransport {
    /// # Errors
    /// [`McpError::Transport`] for a URL that is not http or https.
    pub(crate) fn new(
        url: String,
        headers: Vec<(String, String)>,
        tls: TlsSettings,
        max_message_bytes: usize,
        router: &Arc<Router>,
        oauth: Option<OAuth>,
    ) -> Result<HttpTransport, McpError> {
        // Checked once here; `Target` itself is per request (it is not `Send`).
        BaseUrl::parse(&url).map_err(McpError::Transport)?;
        tls.check().map_err(McpError::Transport)?;
        let mut http = HttpClient::default();
        http.max_event_bytes = max_message_bytes;
        http.tls = tls.clone();
        // The authorization server is reached with the same certificates.
        let mut for_auth = HttpClient::default();
        for_auth.tls = tls;
        let auth = oauth
            .map(|o| Auth::new(o, &url, for_auth.changed()))
            .transpose()?;
        let inner = Arc::new(Inner {
            url: Mutex::new(url),
            headers,
            http: http.changed(),
            max_message_bytes,
            router: router.clone(),
            session: Mutex::new(None),
            protocol_version: Mutex::new(None),
            stateless: AtomicBool::new(false),
            tool_headers: Mutex::new(HashMap::new()),
            auth,
        });
        let (side, queue) = crossbeam_channel::bounded::<Vec<u8>>(SIDE_QUEUE);
        let worker = inner.clone();
        std::thread::Builder::new()
            .name("pagent-mcp-notify".into())
            .spawn(move || worker.post_detached(&queue))
            .map_err(|e| McpError::Spawn(format!("could not start a thread: {e}")))?;
        Ok(HttpTransport {
            inner,
            listening: CancelToken::new(),
            side: Mutex::new(Some(side)),
        })
    }

    /// Opens the server's stream on a thread of its own (see the module docs), and waits
    /// until the server answered the GET, at most until `until`. Called once, after
    /// `initialize`.
    pub(crate) fn listen(&self, until: Instant) {
        let inner = self.inner.clone();
        let stop = self.listening.clone();
        let mut http = self.inner.http.clone();
        http.first_byte_timeout = LISTEN_IDLE;
        http.idle_timeout = LISTEN_IDLE;
        let http = http.changed();
        let (opened, answered) = crossbeam_channel::bounded::<()>(1);
        // Without the thread the client works as before: the server speaks only in replies.
        let started = std::thread::Builder::new()
            .name("pagent-mcp-listen".into())
            .spawn(move || inner.listen(&http, &stop, opened));
        if started.is_ok() {
            // A message (the GET was answered) or a disconnection (the thread ended first).
            let _ = answered.recv_deadline(until);
        }
    }

    /// The protocol version to send in `MCP-Protocol-Version` from now on, and whether it
    /// is of the stateless era.
    pub(crate) fn set_protocol_version(&self, version: &str, stateless: bool) {
        *self.inner.protocol_version.lock() = Some(version.to_owned());
        self.inner.stateless.store(stateless, Ordering::SeqCst);
        if stateless {
            // A session id a server handed out is not echoed in this era.
            self.inner.session.lock().take();
        }
    }

    /// The arguments each tool mirrors into headers, from the last list of the tools.
    pub(crate) fn set_tool_headers(&self, headers: HashMap<String, Vec<(String, String)>>) {
        *self.inner.tool_headers.lock() = headers;
    }

    pub(crate) fn session_id(&self) -> Option<String> {
        self.inner.session.lock().clone()
    }
}

impl Inner {
    fn headers(&self) -> Vec<(String, String)> {
        let mut headers = self.headers.clone();
        if let Some(session) = &*self.session.lock() {
            headers.push(("mcp-session-id".into(), session.clone()));
        }
        if let Some(version) = &*self.protocol_version.lock() {
            headers.push(("mcp-protocol-version".into(), version.clone()));
        }
        headers
    }

    /// The headers of the POST of `message`. A message with the stateless era's `_meta`
    /// gets that era's headers, mirrored from its body: `MCP-Protocol-Version` as its
    /// `_meta` says, `Mcp-Method`, `Mcp-Name` (the tool's or prompt's name, the resource's
    /// URI) and an `Mcp-Param-{Name}` for each argument its tool marks with `x-mcp-header`;
    /// a value that is not plain visible ASCII goes as `=?base64?...?=`.
    fn headers_for(&self, message: &[u8]) -> (Vec<(String, String)>, bool) {
        let mut headers = self.headers.clone();
        let parsed: Option<Value> = serde_json::from_slice(message).ok();
        let initialize = parsed
            .as_ref()
            .is_some_and(|m| m.get("method").and_then(Value::as_str) == Some("initialize"));
        let modern = parsed.as_ref().and_then(|m| {
            m.pointer("/params/_meta")
                .and_then(|meta| meta.get(super::protocol::META_VERSION))
                .and_then(Value::as_str)
                .map(|v| (m, v.to_owned()))
        });
        let Some((message, version)) = modern else {
            // The session era's: the session and the agreed version.
            if let Some(session) = &*self.session.lock() {
                headers.push(("mcp-session-id".into(), session.clone()));
            }
            if let Some(version) = &*self.protocol_version.lock() {
                headers.push(("mcp-protocol-version".into(), version.clone()));
            }
            return (headers, initialize);
        };
        headers.push(("mcp-protocol-version".into(), version));
        let method = message.get("method").and_then(Value::as_str).unwrap_or("");
        if !method.is_empty() {
            headers.push(("mcp-method".into(), header_value(method)));
        }
        let params = message.get("params");
        let name = match method {
            "tools/call" | "prompts/get" => params.and_then(|p| p.get("name")),
            "resources/read" => params.and_then(|p| p.get("uri")),
            _ => None,
        };
        if let Some(name) = name.and_then(Value::as_str) {
            headers.push(("mcp-name".into(), header_value(name)));
        }
        if method == "tools/call" {
            let arguments = params.and_then(|p| p.get("arguments"));
            let tools = self.tool_headers.lock();
            let marked = name
                .and_then(Value::as_str)
                .and_then(|n| tools.get(n))
                .map_or(&[][..], Vec::as_slice);
            for (header, argument) in marked {
                let text = match arguments.and_then(|a| a.get(argument)) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Bool(b)) => b.to_string(),
                    Some(Value::Number(n)) => n.to_string(),
                    // Null or absent: no header.
                    _ => continue,
                };
                headers.push((format!("mcp-param-{header}"), header_value(&text)));
            }
        }
        (headers, false)
    }

    fn url(&self) -> String {
        self.url.lock().clone()
    }

    /// Calls `f` with what no text of an error may show: the credentials among the headers
    /// given (`authorization`, `x-api-key`...), those of the URL (its user info, the keys
    /// of its query), as the providers scrub theirs.
    fn with_secrets<T>(&self, f: impl FnOnce(&Secrets<'_>) -> T) -> T {
        let url = self.url();
        let base = BaseUrl::parse(&url).ok();
        let oauth = self.auth.as_ref().map(Auth::secrets).unwrap_or_default();
        let secrets = Secrets::new(None, &self.headers)
            .and(base.iter().flat_map(BaseUrl::credentials))
            .and(oauth.iter().map(String::as_str));
        f(&secrets)
    }

    /// Sends one request and waits for the headers of its reply, with the OAuth token when
    /// there is one: a refusal (`401`, or `403` with `insufficient_scope`) runs the flow and
    /// sends the request again, at most [`MAX_AUTHORIZATIONS`] times.
    ///
    /// # Errors
    /// [`McpError::Unauthorized`] for a refusal without OAuth (or still refused), the flow's
    /// [`McpError::Auth`], and those of [`Inner::exchange_once`].
    fn exchange(
        &self,
        http: &HttpClient,
        method: Method,
        body: &[u8],
        extra: &[(String, String)],
        cancel: &CancelToken,
    ) -> Result<Reply, McpError> {
        let mut authorizations = 0;
        if let Some(auth) = &self.auth {
            auth.refresh_if_expired(cancel)?;
        }
        let verb = match method {
            Method::Post => "POST",
            Method::Get => "GET",
            Method::Delete => "DELETE",
        };
        loop {
            let presented = match &self.auth {
                Some(auth) => auth.credentials(verb, &self.url())?,
                None => None,
            };
            let (bearer, reply) = match presented {
                Some((token, headers)) => {
                    let mut with = extra.to_vec();
                    with.extend(headers);
                    (
                        Some(token),
                        self.exchange_once(http, method, body, &with, cancel)?,
                    )
                }
                None => (None, self.exchange_once(http, method, body, extra, cancel)?),
            };
            let new_nonce = self.auth.as_ref().is_some_and(|auth| {
                auth.server_nonce(
                    reply
                        .headers
                        .get("dpop-nonce")
                        .and_then(|v| v.to_str().ok()),
                )
            });
            let challenge = || {
                super::Challenge::parse(
                    reply
                        .headers
                        .get("www-authenticate")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or(""),
                )
            };
            let refused = match reply.status {
                401 => Some(challenge()),
                403 => Some(challenge()).filter(|c| c.error() == Some("insufficient_scope")),
                _ => None,
            };
            let Some(challenge) = refused else {
                return Ok(reply);
            };
            let status = reply.status;
            // The server wants its nonce in the DPoP proof (RFC 9449 §9): the same token
            // again with a proof that carries it.
            if status == 401
                && new_nonce
                && challenge.error() == Some("use_dpop_nonce")
                && authorizations < MAX_AUTHORIZATIONS
            {
                drop(reply);
                authorizations += 1;
                continue;
            }
            match &self.auth {
                Some(auth) if authorizations < MAX_AUTHORIZATIONS => {
                    drop(reply);
                    authorizations += 1;
                    auth.refused(status, &challenge, bearer.as_deref(), cancel)?;
                }
                _ => return Err(McpError::Unauthorized { status, challenge }),
            }
        }
    }

    /// Sends one request and waits for the headers of its reply, following `307` and `308`
    /// to the same origin (see the module docs).
    ///
    /// # Errors
    /// [`McpError::Redirected`] for a redirect not followed, [`McpError::Transport`] for a
    /// request that failed, [`McpError::Aborted`] when `cancel` is cancelled.
    fn exchange_once(
        &self,
        http: &HttpClient,
        method: Method,
        body: &[u8],
        extra: &[(String, String)],
        cancel: &CancelToken,
    ) -> Result<Reply, McpError> {
        let mut url = self.url();
        let mut hops = 0;
        loop {
            let accept = match method {
                Method::Post => "application/json, text/event-stream",
                Method::Get => "text/event-stream",
                Method::Delete => "application/json",
            };
            let mut headers = vec![("accept", accept.to_owned())];
            if method == Method::Post {
                headers.push(("content-type", "application/json".to_owned()));
            }
            let post = Post {
                url: url.clone().into(),
                headers,
                built: None,
                body: body.to_vec(),
            };
            let reply = self.with_secrets(|secrets| {
                let target = Target::parse(&url, Some(secrets)).map_err(McpError::Transport)?;
                http.exchange(method, &post, extra, &target, Some(secrets), cancel)
                    .map_err(|e| transport_error(e, cancel))
            })?;
            if !(300..400).contains(&reply.status) {
                return Ok(reply);
            }
            let location = reply
                .headers
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if hops == MAX_REDIRECTS {
                let from = BaseUrl::parse(&url).map_err(McpError::Transport)?;
                return Err(McpError::Redirected {
                    status: reply.status,
                    location: from.redirect_target("", location.as_deref()),
                });
            }
            url = redirected(&url, reply.status, location.as_deref())?;
            hops += 1;
            if reply.status == 308 {
                // Permanent: the endpoint moved for every later request.
                self.url.lock().clone_from(&url);
            }
        }
    }

    /// Posts one message and routes every message of the reply; for a request, fails unless
    /// the reply (or its resumption) held its response.
    fn send(
        &self,
        message: Vec<u8>,
        id: Option<u64>,
        cancel: &CancelToken,
    ) -> Result<(), McpError> {
        let (extra, initialize) = self.headers_for(&message);
        let Reply {
            status,
            headers,
            mut body,
        } = self.exchange(&self.http, Method::Post, &message, &extra, cancel)?;
        let stateless = self.stateless.load(Ordering::SeqCst);
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        // Only the answer to `initialize` opens a session (a stateless probe's answer may
        // carry an id a session-era server made for nothing).
        if let Some(session) = header("mcp-session-id").filter(|_| initialize && !stateless) {
            self.session.lock().get_or_insert(session);
        }
        if status == 404 && self.session.lock().is_some() {
            return Err(McpError::SessionExpired);
        }
        let content_type = header("content-type").unwrap_or_default();
        let media = content_type.split(';').next().unwrap_or("").trim();
        if status >= 400 {
            // A stateless server answers with a JSON-RPC error in a 4xx (an unsupported
            // version, a header mismatch): it is the request's answer.
            if id.is_some() && media.eq_ignore_ascii_case("application/json") {
                let bytes = body
                    .read_some(64 * 1024)
                    .map_err(|e| transport_error(e, cancel))?;
                if let Ok(true) = self.router.deliver(&bytes, id) {
                    return Ok(());
                }
                return Err(self.status_text_error(status, &bytes));
            }
            return Err(self.status_error(status, &mut body));
        }
        let answered = if status == 202 || id.is_none() {
            // A notification's answer has no body worth reading.
            false
        } else if media.eq_ignore_ascii_case("text/event-stream") {
            let mut resume = Resume::default();
            match self.read_stream(&mut body, id, cancel, &mut resume) {
                Ok(true) => true,
                // Ended or broken before the response: resumable when its events had ids.
                Ok(false) | Err(McpError::Transport(_))
                    if resume.last_event_id.is_some() && !stateless =>
                {
                    self.resume(id, cancel, resume)?
                }
                Ok(false) => false,
                Err(e) => return Err(e),
            }
        } else if media.eq_ignore_ascii_case("application/json") {
            let limit = self.max_message_bytes as u64 + 1;
            let bytes = body
                .read_some(limit)
                .map_err(|e| transport_error(e, cancel))?;
            if bytes.len() as u64 >= limit {
                return Err(McpError::TooLarge {
                    limit: self.max_message_bytes,
                    size: bytes.len(),
                });
            }
            self.router.deliver(&bytes, id)?
        } else {
            return Err(McpError::Protocol(format!(
                "the server answered a request with the content type {content_type:?} (status {status}), \
                 neither JSON nor an event stream"
            )));
        };
        if id.is_some() && !answered {
            return Err(McpError::Protocol(format!(
                "the server's reply (status {status}) ended without the response to the request"
            )));
        }
        Ok(())
    }

    /// An error status of the server, with the start of its body.
    fn status_error(&self, status: u16, body: &mut Body) -> McpError {
        let text = self
            .with_secrets(|secrets| body.read_text(2000, Some(secrets)))
            .unwrap_or_default();
        self.status_text_error(status, text.as_bytes())
    }

    /// An error status of the server, with `text`, the start of its body.
    fn status_text_error(&self, status: u16, text: &[u8]) -> McpError {
        let text = String::from_utf8_lossy(&text[..text.len().min(2000)]);
        self.with_secrets(|secrets| {
            let target = Target::parse(&self.url(), Some(secrets))
                .map_or_else(|_| String::new(), |t| t.to_string());
            McpError::Transport(crate::Error::Http {
                status,
                message: scrub(format!("{} ({target})", text.trim()), Some(secrets)),
                retry_after: None,
            })
        })
    }

    /// Routes every message of an event stream; true once the response to `id` came.
    fn read_stream(
        &self,
        body: &mut Body,
        id: Option<u64>,
        cancel: &CancelToken,
        resume: &mut Resume,
    ) -> Result<bool, McpError> {
        let mut failure = None;
        let answered = for_each_event(body, self.max_message_bytes, cancel, |event| {
            resume.note(event);
            if event.data.trim().is_empty() {
                // A priming event (an id and a retry, no message) or a keep-alive.
                return Ok(false);
            }
            match self.router.deliver(event.data.as_bytes(), id) {
                Ok(done) => Ok(done),
                Err(e) => {
                    failure = Some(e);
                    Ok(true)
                }
            }
        })
        .map_err(|e| transport_error(e, cancel))?;
        match failure {
            Some(e) => Err(e),
            None => Ok(answered),
        }
    }

    /// Resumes a request's stream with GETs carrying `Last-Event-ID`, each after the
    /// server's `retry` delay, until the response to `id` comes; true when it did.
    fn resume(
        &self,
        id: Option<u64>,
        cancel: &CancelToken,
        mut resume: Resume,
    ) -> Result<bool, McpError> {
        let mut idle = 0;
        while idle < MAX_IDLE_RESUMES {
            if cancel.wait_timeout(resume.pause()) {
                return Err(transport_error(cancelled(cancel), cancel));
            }
            let before = resume.last_event_id.clone();
            let mut headers = self.headers();
            if let Some(last) = &before {
                headers.push(("last-event-id".into(), last.clone()));
            }
            let Reply {
                status, mut body, ..
            } = self.exchange(&self.http, Method::Get, &[], &headers, cancel)?;
            if status >= 400 {
                return Err(self.status_error(status, &mut body));
            }
            match self.read_stream(&mut body, id, cancel, &mut resume) {
                Ok(true) => return Ok(true),
                Ok(false) | Err(McpError::Transport(_)) => {}
                Err(e) => return Err(e),
            }
            idle = if resume.last_event_id == before {
                idle + 1
            } else {
                0
            };
        }
        Ok(false)
    }

    /// Posts a message bounded in time, its reply read briefly and dropped; a failure is
    /// the server's to notice (it waits for an answer that does not come).
    fn post_quietly(&self, message: Vec<u8>) {
        let token = CancelToken::with_deadline(Instant::now() + SIDE_REQUEST_TIMEOUT);
        if let Ok(mut reply) =
            self.exchange(&self.http, Method::Post, &message, &self.headers(), &token)
        {
            let _ = reply.body.read_some(4096);
        }
    }

    /// The thread of detached messages: posts each in turn until the queue closes.
    fn post_detached(&self, queue: &Receiver<Vec<u8>>) {
        for message in queue {
            self.post_quietly(message);
        }
    }
}

/// Where a redirect of a request to `url` goes: the URL `location` names (resolved against
/// `url` when relative) for a `307` or `308` to the same origin.
///
/// # Errors
/// [`McpError::Redirected`] for another status, another origin, or no usable `Location`.
fn redirected(url: &str, status: u16, location: Option<&str>) -> Result<String, McpError> {
    let from = BaseUrl::parse(url).map_err(McpError::Transport)?;
    let not_followed = || McpError::Redirected {
        status,
        location: from.redirect_target("", location),
    };
    let Some(location) = location.map(str::trim).filter(|l| !l.is_empty()) else {
        return Err(not_followed());
    };
    let location = location.split('#').next().unwrap_or(location);
    // The scheme and authority of `url`, and its path without the query.
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let path_start = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after_scheme + i);
    let (prefix, rest) = url.split_at(path_start);
    let path = rest.split(['?', '#']).next().unwrap_or("");
    let to = if location.contains("://") {
        location.to_owned()
    } else if let Some(rest) = location.strip_prefix("//") {
        format!("{}//{rest}", &url[..after_scheme.saturating_sub(2)])
    } else if location.starts_with('/') {
        format!("{prefix}{location}")
    } else {
        // Relative to the request's path: its last segment replaced.
        let dir = path.rfind('/').map_or("", |i| &path[..i]);
        format!("{prefix}{dir}/{location}")
    };
    let Ok(target) = BaseUrl::parse(&to) else {
        return Err(not_followed());
    };
    let same_origin = target.origin().eq_ignore_ascii_case(&from.origin());
    if matches!(status, 307 | 308) && same_origin {
        Ok(to)
    } else {
        Err(not_followed())
    }
}

/// How one opening of the server's stream ended.
enum Listened {
    /// The server offers no stream, or refused it: not opened again.
    Refused,
    /// The stream ended or broke; true when it delivered a message.
    Dropped(bool),
}

impl Inner {
    /// The server's stream, opened again once each time it drops, until `stop` is cancelled,
    /// the connection ends or the server refuses it. `opened` is told when the first GET was
    /// answered (or failed).
    fn listen(&self, http: &HttpClient, stop: &CancelToken, opened: Sender<()>) {
        let mut resume = Resume::default();
        let mut retry = true;
        let mut opened = Some(opened);
        loop {
            match self.listen_once(http, stop, &mut resume, &mut opened) {
                Listened::Refused => return,
                Listened::Dropped(delivered) => retry |= delivered,
            }
            if !retry || stop.is_cancelled() || self.router.closed().is_some() {
                return;
            }
            retry = false;
            let _ = stop.receiver().recv_timeout(resume.pause());
            if stop.is_cancelled() {
                return;
            }
        }
    }

    fn listen_once(
        &self,
        http: &HttpClient,
        stop: &CancelToken,
        resume: &mut Resume,
        opened: &mut Option<Sender<()>>,
    ) -> Listened {
        let mut headers = self.headers();
        if let Some(id) = resume.last_event_id.as_ref() {
            headers.push(("last-event-id".into(), id.clone()));
        }
        let reply = self.exchange(http, Method::Get, &[], &headers, stop);
        // Answered or failed: `connect` waits no longer (dropping the sender tells it).
        opened.take();
        let Ok(Reply {
            status,
            headers: reply_headers,
            mut body,
        }) = reply
        else {
            return Listened::Dropped(false);
        };
        let media = reply_headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if !(200..300).contains(&status) || media != "text/event-stream" {
            // 405: the server offers no stream; 409: it has one open already; 404: the
            // session ended (the next request says so).
            return Listened::Refused;
        }
        let mut delivered = false;
        let _ = for_each_event(&mut body, self.max_message_bytes, stop, |event| {
            resume.note(event);
            if event.data.trim().is_empty() {
                return Ok(false);
            }
            delivered = true;
            match self.router.deliver(event.data.as_bytes(), None) {
                Ok(_) => Ok(false),
                Err(e) => {
                    // As over stdio: nothing after a broken message can be trusted.
                    self.router.close(e);
                    Ok(true)
                }
            }
        });
        Listened::Dropped(delivered)
    }
}

/// `text` as a header value: as it is when it is plain visible ASCII (inner spaces and tabs
/// allowed), else `=?base64?<its UTF-8 in base64>?=`, as is a text that looks like that.
fn header_value(text: &str) -> String {
    let plain = text
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) || b == b' ' || b == b'\t');
    let edges = text.starts_with([' ', '\t']) || text.ends_with([' ', '\t']);
    let sentinel = text.starts_with("=?base64?") && text.ends_with("?=");
    if plain && !edges && !sentinel && !text.is_empty() {
        return text.to_owned();
    }
    if text.is_empty() {
        return String::new();
    }
    format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(text)
    )
}

/// A transport error, or the abort or deadline that caused it.
fn transport_error(e: crate::Error, cancel: &CancelToken) -> McpError {
    if cancel.is_cancelled() {
        return match cancelled(cancel) {
            crate::Error::Aborted => McpError::Aborted,
            _ => McpError::Transport(crate::Error::Timeout(crate::TimeoutPhase::Run)),
        };
    }
    McpError::Transport(e)
}

impl Inner {
    fn send_and_check(
        &self,
        message: Vec<u8>,
        id: Option<u64>,
        cancel: &CancelToken,
    ) -> Result<(), McpError> {
        let result = self.send(message, id, cancel);
        if let Err(e @ McpError::SessionExpired) = &result {
            // Every later request would fail the same way.
            self.router.close(e.clone());
        }
        result
    }
}

impl Transport for HttpTransport {
    /// A notification is posted on the calling thread. A request is posted on a thread of
    /// its own, which routes the messages of the reply as they come: the caller waits on
    /// its channel as over stdio, and so sees progress while the reply streams. An abort or
    /// the deadline cancels `cancel`, which shuts that request's socket down at once.
    fn send(
        &self,
        message: Vec<u8>,
        id: Option<u64>,
        cancel: &CancelToken,
    ) -> Result<(), McpError> {
        let Some(id) = id else {
            // A notification, or an answer to the server (on the thread that read its
            // request): on this thread, bounded in time.
            let bounded;
            let cancel = match cancel.deadline() {
                Some(_) => cancel,
                None => {
                    bounded = CancelToken::with_deadline(Instant::now() + SIDE_REQUEST_TIMEOUT);
                    &bounded
                }
            };
            return self.inner.send_and_check(message, None, cancel);
        };
        let inner = self.inner.clone();
        let cancel = cancel.clone();
        std::thread::Builder::new()
            .name("pagent-mcp-http".into())
            .spawn(move || {
                if let Err(e) = inner.send_and_check(message, Some(id), &cancel) {
                    inner.router.fail(id, e);
                }
            })
            .map(drop)
            .map_err(|e| McpError::Spawn(format!("could not start a thread: {e}")))
    }

    /// Queued for the thread of detached messages; dropped when its queue is full.
    fn send_detached(&self, message: Vec<u8>) {
        if let Some(side) = &*self.side.lock() {
            let _ = side.try_send(message);
        }
    }

    fn close(&self) {
        self.listening.cancel();
        // The thread of detached messages posts what it holds, then ends.
        self.side.lock().take();
        let Some(session) = self.inner.session.lock().take() else {
            return;
        };
        let mut headers = self.inner.headers.clone();
        headers.push(("mcp-session-id".into(), session));
        let token = CancelToken::with_deadline(Instant::now() + SIDE_REQUEST_TIMEOUT);
        if let Ok(mut reply) =
            self.inner
                .exchange(&self.inner.http, Method::Delete, &[], &headers, &token)
        {
            let _ = reply.body.read_some(4096);
        }
    }

    fn ended(&self) -> McpError {
        McpError::Closed
    }

    /// A POST that failed is its request's failure, not the connection's (an expired
    /// session closes it in `send_and_check`).
    fn ends_connection(&self, _error: &McpError) -> bool {
        false
    }

    /// Over stateless HTTP a request is cancelled by closing its stream (its socket is shut
    /// down at once); the session era still sends `notifications/cancelled`.
    fn cancels_with_notice(&self) -> bool {
        !self.inner.stateless.load(Ordering::SeqCst)
    }

    fn scrub(&self, error: McpError) -> McpError {
        self.inner.with_secrets(|secrets| error.scrubbed(secrets))
    }

    fn trace_peer(&self) -> crate::trace::McpPeer {
        crate::trace::McpPeer::http(&self.inner.url.lock(), self.session_id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_plain_ascii_or_base64() {
        assert_eq!(header_value("us-west1"), "us-west1");
        assert_eq!(header_value("us west 1"), "us west 1");
        assert_eq!(
            header_value("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(header_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            header_value("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
        assert_eq!(header_value(""), "");
    }

    #[test]
    fn redirects_are_followed_to_the_same_origin_only() {
        let go = |status, location| redirected("http://h:8000/mcp/?k=1", status, Some(location));
        assert_eq!(go(307, "/mcp").unwrap(), "http://h:8000/mcp");
        assert_eq!(
            go(308, "http://H:8000/x?y=2").unwrap(),
            "http://H:8000/x?y=2"
        );
        assert_eq!(go(307, "//h:8000/a").unwrap(), "http://h:8000/a");
        assert_eq!(go(307, "other").unwrap(), "http://h:8000/mcp/other");
        assert_eq!(
            go(307, "http://h:8001/mcp").unwrap_err(),
            McpError::Redirected {
                status: 307,
                location: "http://h:8001/mcp".into()
            }
        );
        assert_eq!(
            go(307, "https://h:8000/mcp").unwrap_err(),
            McpError::Redirected {
                status: 307,
                location: "https://h:8000/mcp".into()
            }
        );
        assert_eq!(
            go(302, "/mcp").unwrap_err(),
            McpError::Redirected {
                status: 302,
                location: "http://h:8000/mcp".into()
            }
        );
        assert!(matches!(
            redirected("http://h/mcp", 307, None),
            Err(McpError::Redirected { status: 307, .. })
        ));
    }
}
