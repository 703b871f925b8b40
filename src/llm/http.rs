//! What the HTTP providers share: the client settings, sending a request with retries, and
//! a body reader that an abort interrupts at once.
//!
//! # Why a reader thread
//! A blocking socket read cannot be interrupted from another thread. So each request runs
//! on a helper thread that sends it and forwards the body in chunks through a channel; the
//! run thread waits on that channel, the cancel token and a timer together
//! (`crossbeam_channel::select!`), so `abort()` and the idle timeout take effect within
//! microseconds whatever the network does.
//!
//! After an abort or a timeout the run thread drops the channel and returns. The helper
//! thread then ends on its own: its next send fails as soon as a chunk arrives, and if the
//! server sends nothing at all, ureq's per-read timeout (the longer of the first-byte and
//! idle timeouts, plus 5 s) ends its blocked read; dropping the response closes the
//! connection.

use std::io::Read;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender};

use super::retry::{RetryPolicy, parse_retry_after};
use super::sse;
use super::{CancelToken, OnEvent, ReplyEnd, StreamEvent};
use crate::{Error, TimeoutPhase};

/// The most of an error body we read, and of it the most we put into an error message.
const ERROR_BODY_LIMIT: u64 = 64 * 1024;
const ERROR_MESSAGE_LIMIT: usize = 1000;
const READ_BUFFER: usize = 16 * 1024;

/// Client settings common to the HTTP providers, and the ureq agent built from them.
#[derive(Clone)]
pub(crate) struct HttpClient {
    pub(crate) connect_timeout: Duration,
    pub(crate) first_byte_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) max_event_bytes: usize,
    // Built on first use so that the setters above can change it; shared by clones after.
    agent: OnceLock<ureq::Agent>,
}

impl Default for HttpClient {
    fn default() -> HttpClient {
        HttpClient {
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(120),
            retry: RetryPolicy::new(),
            max_event_bytes: sse::DEFAULT_MAX_EVENT_BYTES,
            agent: OnceLock::new(),
        }
    }
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("connect_timeout", &self.connect_timeout)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("retry", &self.retry)
            .field("max_event_bytes", &self.max_event_bytes)
            .finish_non_exhaustive()
    }
}

/// Where requests go and with which key: the part of a provider's settings that holds the
/// secret, so that its `Debug` is written once, redacted.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) base_url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) http: HttpClient,
}

impl Endpoint {
    pub(crate) fn new(base_url: impl Into<String>) -> Endpoint {
        Endpoint {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            http: HttpClient::default(),
        }
    }

    /// The endpoint the environment names: the base URL from `base_var` (else `default`) and
    /// the key from `key_var`.
    ///
    /// # Errors
    /// [`Error::Config`] saying `hint` when neither variable is set.
    pub(crate) fn from_env(
        base_var: &str,
        key_var: &str,
        default: &str,
        hint: &str,
    ) -> Result<Endpoint, Error> {
        let (base, key) = super::env::base_and_key(base_var, key_var, default, hint)?;
        Ok(Endpoint {
            api_key: key,
            ..Endpoint::new(base)
        })
    }

    /// Sends `call` and decodes its event stream with `decoder`, handing each event to
    /// `on_event` as it comes; see [`HttpClient::open`] for the retries. Returns how the
    /// reply ended, as the decoder says.
    ///
    /// Every error returned, and every retry announced, has the API key scrubbed from it: a
    /// server may echo the key in an error body, an in-stream error or a broken reply.
    pub(crate) fn stream(
        &self,
        call: Call<'_>,
        decoder: impl Decode,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, Error> {
        let secret = self.api_key.as_deref();
        let mut on_event = |event| on_event(scrub_event(event, secret));
        self.stream_unscrubbed(call, decoder, cancel, &mut on_event)
            .map_err(|e| scrub_error(e, secret))
    }

    fn stream_unscrubbed(
        &self,
        mut call: Call<'_>,
        mut decoder: impl Decode,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, Error> {
        call.headers
            .push(("content-type", "application/json".to_owned()));
        // The body bytes move into the request as they are: serialized once per model call,
        // and every attempt sends these same bytes.
        let post = Post {
            url: format!("{}{}", self.base_url, call.path),
            headers: call.headers,
            body: call.body,
        };
        // A retry notice adds nothing to the reply, so the agent never refuses one.
        let mut body = self.http.open(&post, cancel, &mut |event| {
            let _ = on_event(event);
        })?;
        let mut out = Emitter { on_event };
        let ended = for_each_event(&mut body, self.http.max_event_bytes, cancel, |event| {
            decoder.event(&event.data, &mut out)
        })?;
        decoder.finish(ended)
    }
}

/// One streamed request of a provider: what differs between providers.
pub(crate) struct Call<'a> {
    /// Appended to the base URL.
    pub(crate) path: &'a str,
    /// The provider's headers; the content type is added.
    pub(crate) headers: Vec<(&'static str, String)>,
    /// The JSON body, serialized.
    pub(crate) body: Vec<u8>,
}

/// A provider's decoder of its event stream.
pub(crate) trait Decode {
    /// Handles the `data` of one event, emitting what it carries through `out`; true when
    /// the event ends the reply.
    ///
    /// # Errors
    /// A malformed event, an error the server reports in the stream, or the refusal of
    /// `out` (the agent's reply limit).
    fn event(&mut self, data: &str, out: &mut Emitter<'_, '_>) -> Result<bool, Error>;

    /// How the reply ended, once the stream is over: `ended` says whether an event ended
    /// the reply (else the body just stopped).
    ///
    /// # Errors
    /// A stream cut short, or a reply the server stopped (a content filter, a refusal).
    fn finish(self, ended: bool) -> Result<ReplyEnd, Error>;
}

/// Where a decoder's events go: to the caller, which assembles the reply.
pub(crate) struct Emitter<'a, 'b> {
    on_event: &'a mut OnEvent<'b>,
}

impl Emitter<'_, '_> {
    /// Hands `event` on.
    ///
    /// # Errors
    /// The caller refused it: the reply must stop with this error.
    pub(crate) fn emit(&mut self, event: StreamEvent) -> Result<(), Error> {
        (self.on_event)(event)
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("http", &self.http)
            .finish()
    }
}

/// What a request sends.
pub(crate) struct Post {
    pub(crate) url: String,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
}

enum Msg {
    Head,
    Chunk(Vec<u8>),
    End,
    Status {
        status: u16,
        body: Vec<u8>,
        retry_after: Option<Duration>,
    },
    Fail(Error),
}

impl HttpClient {
    /// Call after changing a setting, so the next request builds an agent with it.
    pub(crate) fn changed(mut self) -> HttpClient {
        self.agent = OnceLock::new();
        self
    }

    fn agent(&self) -> &ureq::Agent {
        self.agent.get_or_init(|| {
            // Longer than the timeouts the run thread keeps, so that those fire first and
            // name their phase; this one only bounds a helper thread after an abort.
            let slowest = self.first_byte_timeout.max(self.idle_timeout) + Duration::from_secs(5);
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(self.connect_timeout))
                .timeout_send_request(Some(self.first_byte_timeout))
                .timeout_send_body(Some(self.first_byte_timeout))
                .timeout_recv_response(Some(self.first_byte_timeout))
                .timeout_per_read(Some(slowest))
                .user_agent(concat!("pagent/", env!("CARGO_PKG_VERSION")))
                .build()
                .into()
        })
    }

    /// Sends `post` and waits for the first byte of the reply body, retrying transient
    /// failures per the policy and announcing each retry through `on_event`.
    pub(crate) fn open(
        &self,
        post: &Post,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Body, Error> {
        let mut attempt = 0;
        loop {
            let error = match self.attempt(post, cancel) {
                Ok(body) => return Ok(body),
                Err(e) => e,
            };
            attempt += 1;
            let Some(delay) = self.retry.delay(attempt, &error) else {
                return Err(gave_up(error, attempt));
            };
            on_event(StreamEvent::Retry {
                attempt,
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error: error.to_string(),
            });
            if cancel.wait_timeout(delay) {
                return Err(Error::Aborted);
            }
        }
    }

    fn attempt(&self, post: &Post, cancel: &CancelToken) -> Result<Body, Error> {
        if cancel.is_cancelled() {
            return Err(Error::Aborted);
        }
        let start = Instant::now();
        let (tx, rx) = crossbeam_channel::bounded(32);
        let agent = self.agent().clone();
        let (url, headers, body) = (post.url.clone(), post.headers.clone(), post.body.clone());
        std::thread::Builder::new()
            .name("pagent-http".into())
            .spawn(move || request_thread(&agent, &url, &headers, &body, &tx))
            .map_err(|e| Error::Io(format!("cannot start the http thread: {e}")))?;
        let mut body = Body {
            rx,
            idle: self.idle_timeout,
            first: None,
            ended: false,
        };
        let deadline = start + self.first_byte_timeout;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match body.recv(cancel, wait, TimeoutPhase::FirstByte)? {
                Msg::Head => {}
                Msg::Chunk(bytes) => {
                    body.first = Some(bytes);
                    return Ok(body);
                }
                Msg::End => {
                    body.ended = true;
                    return Ok(body);
                }
                Msg::Status {
                    status,
                    body,
                    retry_after,
                } => {
                    return Err(Error::Http {
                        status,
                        message: error_message(status, &body),
                        retry_after,
                    });
                }
                Msg::Fail(Error::Timeout(TimeoutPhase::Idle)) => {
                    return Err(Error::Timeout(TimeoutPhase::FirstByte));
                }
                Msg::Fail(e) => return Err(e),
            }
        }
    }
}

/// A reply body being received; see the module docs for how it stays abortable.
#[derive(Debug)]
pub(crate) struct Body {
    rx: Receiver<Msg>,
    idle: Duration,
    first: Option<Vec<u8>>,
    ended: bool,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

impl Body {
    /// The next bytes of the body, `None` at its end.
    ///
    /// Blocks until bytes arrive, the body ends, the idle timeout passes, or `cancel` fires.
    pub(crate) fn next_chunk(&mut self, cancel: &CancelToken) -> Result<Option<Vec<u8>>, Error> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        if self.ended {
            return Ok(None);
        }
        match self.recv(cancel, self.idle, TimeoutPhase::Idle)? {
            Msg::Chunk(bytes) => Ok(Some(bytes)),
            Msg::End => {
                self.ended = true;
                Ok(None)
            }
            Msg::Fail(e) => Err(e),
            Msg::Head | Msg::Status { .. } => Err(Error::Stream("unexpected response".into())),
        }
    }

    fn recv(
        &self,
        cancel: &CancelToken,
        wait: Duration,
        phase: TimeoutPhase,
    ) -> Result<Msg, Error> {
        if cancel.is_cancelled() {
            return Err(Error::Aborted);
        }
        crossbeam_channel::select! {
            recv(self.rx) -> msg => msg.map_err(|_| {
                Error::Connection("the http thread ended without a reply".into())
            }),
            // The cancel receiver never yields a message; it disconnects on cancel.
            recv(cancel.receiver()) -> _ => Err(Error::Aborted),
            default(wait) => Err(Error::Timeout(phase)),
        }
    }
}

/// Sends the SSE body of `body` through a parser and hands each event to `f` until `f`
/// says it has seen the end (`Ok(true)`) or the body ends. Returns whether `f` saw the end.
fn for_each_event(
    body: &mut Body,
    max_event_bytes: usize,
    cancel: &CancelToken,
    mut f: impl FnMut(sse::Event) -> Result<bool, Error>,
) -> Result<bool, Error> {
    let mut parser = sse::Parser::new().max_event_bytes(max_event_bytes);
    while let Some(bytes) = body.next_chunk(cancel)? {
        parser.push(&bytes);
        while let Some(event) = parser.next_event()? {
            if f(event)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

fn request_thread(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&'static str, String)],
    body: &[u8],
    tx: &Sender<Msg>,
) {
    let mut request = agent.post(url);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = match request.send(body) {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Msg::Fail(from_ureq(e)));
            return;
        }
    };
    let status = response.status().as_u16();
    if status >= 400 {
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok());
        let retry_after = parse_retry_after(
            header("retry-after-ms"),
            header("retry-after"),
            SystemTime::now(),
        );
        let mut bytes = Vec::new();
        // A body that fails half-way still says something; keep what arrived.
        let _ = response
            .into_body()
            .into_reader()
            .take(ERROR_BODY_LIMIT)
            .read_to_end(&mut bytes);
        let _ = tx.send(Msg::Status {
            status,
            body: bytes,
            retry_after,
        });
        return;
    }
    if tx.send(Msg::Head).is_err() {
        return;
    }
    let mut reader = response.into_body().into_reader();
    // One buffer for every read; each chunk sent on is a copy of just the bytes read, as a
    // model server's chunks are usually a few hundred bytes.
    let mut buf = vec![0; READ_BUFFER];
    loop {
        let msg = match reader.read(&mut buf) {
            Ok(0) => Msg::End,
            Ok(n) => Msg::Chunk(buf[..n].to_vec()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => Msg::Fail(Error::Timeout(TimeoutPhase::Idle)),
            Err(e) => Msg::Fail(Error::Connection(format!("the reply broke off: {e}"))),
        };
        let last = !matches!(msg, Msg::Chunk(_));
        // A failed send means the run thread went away (abort, timeout): stop reading.
        if tx.send(msg).is_err() || last {
            return;
        }
    }
}

/// A read error that is a timeout, as the OS or ureq (wrapped in the io error) says.
fn is_timeout(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::TimedOut
        || e.get_ref()
            .and_then(|inner| inner.downcast_ref::<ureq::Error>())
            .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)))
}

fn from_ureq(e: ureq::Error) -> Error {
    use ureq::Timeout as T;
    match e {
        ureq::Error::Timeout(T::Connect | T::Resolve) => Error::Timeout(TimeoutPhase::Connect),
        ureq::Error::Timeout(_) => Error::Timeout(TimeoutPhase::FirstByte),
        ureq::Error::BadUri(uri) => Error::Config(format!("bad url: {uri}")),
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            Error::Timeout(TimeoutPhase::FirstByte)
        }
        other => Error::Connection(other.to_string()),
    }
}

/// The provider's own message from an error body: `error.message` (OpenAI, Anthropic,
/// llama.cpp), a string `error`, `message` or `detail`, else the body itself.
pub(crate) fn error_message(status: u16, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
    let message = json
        .as_ref()
        .and_then(pick_message)
        .unwrap_or_else(|| text.trim().to_owned());
    if message.is_empty() {
        return format!("the server gave no reason for status {status}");
    }
    truncate(message, ERROR_MESSAGE_LIMIT)
}

/// The message of an error object or body: `error.message`, a string `error`, `message` or
/// `detail`, or the value itself when it is a string.
fn pick_message(v: &serde_json::Value) -> Option<String> {
    let pick = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    v.pointer("/error/message")
        .and_then(pick)
        .or_else(|| v.get("error").and_then(pick))
        .or_else(|| v.get("message").and_then(pick))
        .or_else(|| v.get("detail").and_then(pick))
        .or_else(|| pick(v))
}

/// An error the server reports inside a stream, as an [`Error::Api`]: the `error` object
/// (`{"type" or "code", "message"}`) or a bare string.
pub(crate) fn api_error(error: &serde_json::Value) -> Error {
    let kind = ["type", "code"]
        .iter()
        .find_map(|key| match error.get(key)? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| "error".into());
    let message = pick_message(error).unwrap_or_else(|| error.to_string());
    Error::Api {
        kind,
        message: truncate(message, ERROR_MESSAGE_LIMIT),
    }
}

fn truncate(mut s: String, limit: usize) -> String {
    if s.len() > limit {
        let mut end = limit;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

const REDACTED: &str = "<redacted>";
/// The shortest start of the key that is scrubbed from the end of a message cut short.
const MIN_KEY_PREFIX: usize = 4;

/// `text` with every occurrence of the key replaced, in case a server echoes it back; when
/// the text was cut short (it ends in `...`) right inside the key, the start of the key too.
pub(crate) fn scrub(text: String, secret: Option<&str>) -> String {
    let Some(key) = secret.filter(|k| !k.is_empty()) else {
        return text;
    };
    let text = if text.contains(key) {
        text.replace(key, REDACTED)
    } else {
        text
    };
    let Some(cut) = text.strip_suffix("...") else {
        return text;
    };
    let start = (MIN_KEY_PREFIX..key.len())
        .rev()
        .find(|&n| key.is_char_boundary(n) && cut.ends_with(&key[..n]));
    match start {
        Some(n) => format!("{}{REDACTED}...", &cut[..cut.len() - n]),
        None => text,
    }
}

/// `e` with the key scrubbed from every text it holds.
fn scrub_error(mut e: Error, secret: Option<&str>) -> Error {
    let texts = match &mut e {
        Error::Api { kind, message } => vec![kind, message],
        Error::Http { message, .. }
        | Error::NothingToContinue(message)
        | Error::Config(message)
        | Error::Connection(message)
        | Error::Stream(message)
        | Error::Provider(message)
        | Error::Wire(message)
        | Error::Io(message) => vec![message],
        Error::Busy
        | Error::Aborted
        | Error::Timeout(_)
        | Error::ScriptExhausted
        | Error::ReplyTooLarge { .. } => vec![],
    };
    for text in texts {
        *text = scrub(std::mem::take(text), secret);
    }
    e
}

/// `event` with the key scrubbed from the error text of a retry.
fn scrub_event(event: StreamEvent, secret: Option<&str>) -> StreamEvent {
    match event {
        StreamEvent::Retry {
            attempt,
            delay_ms,
            error,
        } => StreamEvent::Retry {
            attempt,
            delay_ms,
            error: scrub(error, secret),
        },
        other => other,
    }
}

/// The error after the last attempt, saying how many there were.
fn gave_up(error: Error, attempts: u32) -> Error {
    if attempts < 2 {
        return error;
    }
    let note = format!(" (gave up after {attempts} attempts)");
    match error {
        Error::Http {
            status,
            message,
            retry_after,
        } => Error::Http {
            status,
            message: message + &note,
            retry_after,
        },
        Error::Connection(m) => Error::Connection(m + &note),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_come_from_the_provider_body() {
        let llama = br#"{"error":{"code":400,"message":"request (5033 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error"}}"#;
        assert!(error_message(400, llama).starts_with("request (5033 tokens) exceeds"));
        let anthropic =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(error_message(529, anthropic), "Overloaded");
        assert_eq!(
            error_message(404, br#"{"detail":"Not Found"}"#),
            "Not Found"
        );
        assert_eq!(error_message(502, b"  Bad Gateway\n"), "Bad Gateway");
        assert_eq!(
            error_message(503, b""),
            "the server gave no reason for status 503"
        );
        assert!(error_message(500, "é".repeat(2000).as_bytes()).ends_with("..."));
    }

    #[test]
    fn in_stream_errors_name_their_type_or_code() {
        let api = |kind: &str, message: &str| Error::Api {
            kind: kind.into(),
            message: message.into(),
        };
        let error = |v: serde_json::Value| api_error(&v);
        assert_eq!(
            error(serde_json::json!({"type": "overloaded_error", "message": "Overloaded"})),
            api("overloaded_error", "Overloaded")
        );
        assert_eq!(
            error(serde_json::json!({"code": 500, "message": "boom"})),
            api("500", "boom")
        );
        assert_eq!(error(serde_json::json!("boom")), api("error", "boom"));
        assert_eq!(
            error(serde_json::json!({"code": true})),
            api("error", r#"{"code":true}"#)
        );
    }

    #[test]
    fn the_key_is_scrubbed_from_messages() {
        let m = scrub(
            "Incorrect API key provided: sk-secret".into(),
            Some("sk-secret"),
        );
        assert_eq!(m, "Incorrect API key provided: <redacted>");
        assert_eq!(scrub("x".into(), Some("")), "x");
        let cut = |text: &str| scrub(text.into(), Some("sk-secret"));
        assert_eq!(cut("key sk-sec..."), "key <redacted>...");
        assert_eq!(cut("key sk-..."), "key sk-...");
        assert_eq!(cut("key sk-sec"), "key sk-sec");
    }
}
