//! The Streamable HTTP transport: every message is a POST to one endpoint, answered with
//! `202 Accepted` (a notification), one JSON message, or an event stream of messages that
//! ends with the response.
//!
//! A request is sent and its reply read on a short-lived thread of its own (so that the
//! caller sees progress while the reply streams), over the same sockets as the model
//! providers (`llm::http`): an abort or the call's deadline shuts the socket down at once,
//! which also tells the server that the client left; `notifications/cancelled` follows on
//! another short-lived thread, so the caller waits for neither. The
//! session id the server hands out in its answer to `initialize` (`Mcp-Session-Id`) goes
//! with every later request, with the agreed protocol version (`MCP-Protocol-Version`);
//! shutdown ends the session with a DELETE.
//!
//! # The server's own stream
//! After `initialize`, a thread of its own opens the optional GET stream on which the server
//! sends what it says unasked (`notifications/tools/list_changed`, log messages, its own
//! requests): `Accept: text/event-stream` with the session header. Its messages are handled
//! as those of a POST's reply (the server's requests are answered by a POST). A server that
//! offers no such stream answers `405 Method Not Allowed` (or another error status), and
//! the thread ends there: such a server can only speak in the replies to requests. When the
//! stream drops while the client is open, it is opened again, once, with `Last-Event-ID`
//! when the server gave its events ids; a stream that delivered a message earns another
//! retry. The stream waits on its socket with no idle timeout (a server may stay silent for
//! hours); `close()` and drop shut the socket down at once through its cancel token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::McpError;
use super::session::{Router, Transport};
use crate::cancel::CancelToken;
use crate::llm::http::{HttpClient, Method, Post, Reply, Target, cancelled, for_each_event};

/// How long the detached `notifications/cancelled` and the closing DELETE may take.
const SIDE_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the server's stream waits before it is opened again after it dropped.
const RECONNECT_PAUSE: Duration = Duration::from_millis(250);

/// How long the server's stream may stay silent: it has no idle timeout in practice.
const LISTEN_IDLE: Duration = Duration::from_secs(24 * 60 * 60);

pub(crate) struct HttpTransport {
    inner: Arc<Inner>,
    /// Cancelled on close: ends the server's stream (its socket is shut down at once).
    listening: CancelToken,
}

struct Inner {
    url: String,
    headers: Vec<(String, String)>,
    http: HttpClient,
    max_message_bytes: usize,
    router: Arc<Router>,
    session: Mutex<Option<String>>,
    protocol_version: Mutex<Option<String>>,
}

impl HttpTransport {
    /// # Errors
    /// [`McpError::Transport`] for a URL that is not http or https.
    pub(crate) fn new(
        url: String,
        headers: Vec<(String, String)>,
        max_message_bytes: usize,
        router: &Arc<Router>,
    ) -> Result<HttpTransport, McpError> {
        // Checked once here; `Target` itself is per request (it is not `Send`).
        Target::parse(&url, None).map_err(McpError::Transport)?;
        let mut http = HttpClient::default();
        http.max_event_bytes = max_message_bytes;
        Ok(HttpTransport {
            inner: Arc::new(Inner {
                url,
                headers,
                http: http.changed(),
                max_message_bytes,
                router: router.clone(),
                session: Mutex::new(None),
                protocol_version: Mutex::new(None),
            }),
            listening: CancelToken::new(),
        })
    }

    /// Opens the server's stream on a thread of its own (see the module docs). Called once,
    /// after `initialize`.
    pub(crate) fn listen(&self) {
        let inner = self.inner.clone();
        let stop = self.listening.clone();
        let mut http = self.inner.http.clone();
        http.first_byte_timeout = LISTEN_IDLE;
        http.idle_timeout = LISTEN_IDLE;
        let http = http.changed();
        // Without the thread the client works as before: the server speaks only in replies.
        let _ = std::thread::Builder::new()
            .name("pagent-mcp-listen".into())
            .spawn(move || inner.listen(&http, &stop));
    }

    /// The protocol version to send in `MCP-Protocol-Version` from now on.
    pub(crate) fn set_protocol_version(&self, version: &str) {
        *self.inner.protocol_version.lock() = Some(version.to_owned());
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

    fn target(&self) -> Target {
        // OK because `new` parsed the same URL.
        Target::parse(&self.url, None).expect("the URL was checked")
    }

    fn post(&self, body: Vec<u8>) -> Post {
        Post {
            url: self.url.clone(),
            headers: vec![
                ("content-type", "application/json".to_owned()),
                ("accept", "application/json, text/event-stream".to_owned()),
            ],
            body,
        }
    }

    /// Posts one message and routes every message of the reply; for a request, fails unless
    /// the reply held its response.
    fn send(
        &self,
        message: Vec<u8>,
        id: Option<u64>,
        cancel: &CancelToken,
    ) -> Result<(), McpError> {
        let post = self.post(message);
        let Reply {
            status,
            headers,
            mut body,
        } = self
            .http
            .exchange(
                Method::Post,
                &post,
                &self.headers(),
                &self.target(),
                None,
                cancel,
            )
            .map_err(|e| transport_error(e, cancel))?;
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        if let Some(session) = header("mcp-session-id") {
            self.session.lock().get_or_insert(session);
        }
        if status == 404 && self.session.lock().is_some() {
            return Err(McpError::SessionExpired);
        }
        if status >= 400 {
            let bytes = body.read_some(2000).unwrap_or_default();
            return Err(McpError::Transport(crate::Error::Http {
                status,
                message: format!(
                    "{} ({})",
                    String::from_utf8_lossy(&bytes).trim(),
                    self.target()
                ),
                retry_after: None,
            }));
        }
        let content_type = header("content-type").unwrap_or_default();
        let media = content_type.split(';').next().unwrap_or("").trim();
        let reply = |message: Vec<u8>| {
            self.send_detached_inner(message);
            Ok(())
        };
        let answered = if status == 202 || id.is_none() {
            // A notification's answer has no body worth reading.
            false
        } else if media.eq_ignore_ascii_case("text/event-stream") {
            let mut answered = false;
            let mut failure = None;
            for_each_event(&mut body, self.max_message_bytes, cancel, |event| {
                if event.data.trim().is_empty() {
                    return Ok(false);
                }
                match self.router.deliver(event.data.as_bytes(), id, &reply) {
                    Ok(done) => {
                        answered |= done;
                        Ok(done)
                    }
                    Err(e) => {
                        failure = Some(e);
                        Ok(true)
                    }
                }
            })
            .map_err(|e| transport_error(e, cancel))?;
            if let Some(e) = failure {
                return Err(e);
            }
            answered
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
            self.router.deliver(&bytes, id, &reply)?
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

    /// Posts a message on a thread of its own, bounded in time, without waiting for it.
    fn send_detached_inner(&self, message: Vec<u8>) {
        let post = self.post(message);
        let headers = self.headers();
        let http = self.http.clone();
        let url = self.url.clone();
        let _ = std::thread::Builder::new()
            .name("pagent-mcp-notify".into())
            .spawn(move || {
                let Ok(target) = Target::parse(&url, None) else {
                    return;
                };
                let token = CancelToken::with_deadline(Instant::now() + SIDE_REQUEST_TIMEOUT);
                if let Ok(mut reply) =
                    http.exchange(Method::Post, &post, &headers, &target, None, &token)
                {
                    let _ = reply.body.read_some(4096);
                }
            });
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
    /// the connection ends or the server refuses it.
    fn listen(&self, http: &HttpClient, stop: &CancelToken) {
        let mut last_event_id = None;
        let mut retry = true;
        loop {
            match self.listen_once(http, stop, &mut last_event_id) {
                Listened::Refused => return,
                Listened::Dropped(delivered) => retry |= delivered,
            }
            if !retry || stop.is_cancelled() || self.router.closed().is_some() {
                return;
            }
            retry = false;
            let _ = stop.receiver().recv_timeout(RECONNECT_PAUSE);
            if stop.is_cancelled() {
                return;
            }
        }
    }

    fn listen_once(
        &self,
        http: &HttpClient,
        stop: &CancelToken,
        last_event_id: &mut Option<String>,
    ) -> Listened {
        let get = Post {
            url: self.url.clone(),
            headers: vec![("accept", "text/event-stream".to_owned())],
            body: Vec::new(),
        };
        let mut headers = self.headers();
        if let Some(id) = last_event_id.as_ref() {
            headers.push(("last-event-id".into(), id.clone()));
        }
        let Ok(Reply {
            status,
            headers: reply_headers,
            mut body,
        }) = http.exchange(Method::Get, &get, &headers, &self.target(), None, stop)
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
        let reply = |message: Vec<u8>| {
            self.send_detached_inner(message);
            Ok(())
        };
        let mut delivered = false;
        let _ = for_each_event(&mut body, self.max_message_bytes, stop, |event| {
            if let Some(id) = &event.id {
                *last_event_id = Some(id.clone());
            }
            if event.data.trim().is_empty() {
                return Ok(false);
            }
            delivered = true;
            match self.router.deliver(event.data.as_bytes(), None, &reply) {
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

    fn send_detached(&self, message: Vec<u8>) {
        self.inner.send_detached_inner(message);
    }

    fn close(&self) {
        self.listening.cancel();
        let Some(session) = self.inner.session.lock().take() else {
            return;
        };
        let mut headers = self.inner.headers.clone();
        headers.push(("mcp-session-id".into(), session));
        let post = self.inner.post(Vec::new());
        let token = CancelToken::with_deadline(Instant::now() + SIDE_REQUEST_TIMEOUT);
        if let Ok(mut reply) = self.inner.http.exchange(
            Method::Delete,
            &post,
            &headers,
            &self.inner.target(),
            None,
            &token,
        ) {
            let _ = reply.body.read_some(4096);
        }
    }

    fn ended(&self) -> McpError {
        McpError::Closed
    }
}
