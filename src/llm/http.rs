//! What the HTTP providers share: the client settings, sending a request with retries, and
//! (in [`super::body`]) a body reader that an abort or a timeout interrupts at once.
//!
//! # On the run thread
//! The request is sent and its reply read on the run thread itself: no helper thread, no
//! hand-off of chunks. A blocking socket call cannot be woken by a flag, so the sockets are
//! our own ([`super::transport`]): every connect, write and read is bounded by the deadline
//! of its phase (and the run deadline), and cancelling the token shuts the socket of the
//! request in flight down from the cancelling thread, which wakes the blocked call at
//! once. Either way the connection is closed, so the server learns at once that the client
//! left, and no thread or socket is left behind.

use std::io;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use super::error_text::{
    ERROR_MESSAGE_LIMIT, clip, error_message, gave_up, is_credential_header, scrub_event,
};
// The MCP client's HTTP transport scrubs its errors as the providers do.
pub(crate) use super::error_text::{Secrets, scrub, scrub_error};
use super::pieces::Payload;
use super::retry::{RetryPolicy, parse_retry_after};
use super::sse;
// In-stream errors are decoded by the providers as `http::api_error`.
pub(crate) use super::body::{Body, for_each_event};
pub(crate) use super::error_text::api_error;
use super::tls::TlsSettings;
use super::transport::{Ctx, Ready, Resolve, Stage, Tcp};
pub(crate) use super::url::BaseUrl;
pub(crate) use super::url::Target;
use super::url::debug_unparsed;

/// `url` as `Debug` shows a base URL: without user info or query (the MCP client's).
#[cfg(feature = "mcp")]
pub(crate) fn debug_url(url: &str) -> String {
    match BaseUrl::parse(url) {
        Ok(base) => format!("{base:?}"),
        Err(_) => debug_unparsed(url),
    }
}
use super::{CancelToken, OnEvent, ReplyEnd, StreamEvent};
use crate::{Error, TimeoutPhase};
use ureq::unversioned::transport::{
    ConnectProxyConnector, ConnectionDetails, Connector, RustlsConnector, Transport,
};

/// The most of an error body we read (of it, at most `ERROR_MESSAGE_LIMIT` bytes go into
/// the error message).
const ERROR_BODY_LIMIT: u64 = 64 * 1024;
/// The buffers of ureq's TLS layer, each way (see `HttpClient::agent`).
const TLS_BUFFER: usize = 16 * 1024;
/// The most of a body that is not an event stream shown in the error.
const CONTENT_TYPE_SNIPPET: usize = 200;
/// The `user-agent` of every request.
const USER_AGENT: &str = concat!("pagent/", env!("CARGO_PKG_VERSION"));

/// The `host` header of a request to `uri`, as ureq writes it: the host, with the port
/// when it is not the scheme's.
fn host_header(uri: &ureq::http::Uri) -> Option<String> {
    let host = uri.host()?;
    let default = super::url::default_port(uri.scheme_str()?)?;
    Some(match uri.port_u16() {
        Some(port) if port != default => format!("{host}:{port}"),
        _ => host.to_owned(),
    })
}

/// Client settings common to the HTTP providers, and the ureq agent built from them.
#[derive(Clone)]
pub(crate) struct HttpClient {
    pub(crate) connect_timeout: Duration,
    pub(crate) first_byte_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) max_event_bytes: usize,
    /// Roots and a client certificate for `https`, when given.
    pub(crate) tls: TlsSettings,
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
            tls: TlsSettings::default(),
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
            .field("custom_tls", &self.tls.is_custom())
            .finish_non_exhaustive()
    }
}

/// Where requests go, with which key and headers: the part of a provider's settings that
/// holds secrets, so that its `Debug` is written once, redacted.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// As given (without surrounding whitespace and trailing slashes), for `base_url()`.
    pub(crate) base_url: String,
    /// Parsed once, here: requests go where it says, and a URL that does not parse fails
    /// `check` (the agent's `build`) and every request at once, without retries.
    base: Result<BaseUrl, Error>,
    pub(crate) api_key: Option<String>,
    /// Sent with every request, after the provider's own headers, each replacing a provider
    /// header of the same name (names compared without case).
    pub(crate) headers: Vec<(String, String)>,
    /// What the model takes besides text; checked before each request is sent.
    pub(crate) accepts: super::Accepts,
    pub(crate) http: HttpClient,
    /// The URL and target of the model calls' path, made at the first call (see
    /// [`Prepared`]); emptied when the key or a header changes (the target is scrubbed of
    /// them).
    prepared: OnceLock<Prepared>,
}

/// What a model call to one path needs of the base URL, made once per endpoint: the URL,
/// parsed as ureq takes it, and the target errors name, scrubbed of the secrets. Neither
/// changes between calls, so a call clones them instead of writing, scrubbing and parsing
/// them again.
#[derive(Clone)]
struct Prepared {
    path: &'static str,
    url: Url,
    target: Target,
    /// The call's headers as ureq takes them, in the order they are sent (see
    /// [`Endpoint::model_headers`]); `None` when one does not convert, which the call then
    /// sends as text for ureq to refuse by name, as before.
    headers: Option<Built>,
}

/// Headers made into ureq's map once, with a `content-length` for the body's to replace: a
/// call clones the map (no name parsed or hashed, no value copied).
pub(crate) type Built = Arc<ureq::http::HeaderMap>;

/// `headers` as ureq's map, or `None` when one does not convert.
fn built(headers: &[(&str, String)]) -> Option<Built> {
    let mut map = ureq::http::HeaderMap::with_capacity(headers.len() + 1);
    for (name, value) in headers {
        let name = ureq::http::HeaderName::from_bytes(name.as_bytes()).ok()?;
        map.append(name, ureq::http::HeaderValue::from_str(value).ok()?);
    }
    map.insert(
        ureq::http::header::CONTENT_LENGTH,
        ureq::http::HeaderValue::from_static("0"),
    );
    Some(Arc::new(map))
}

/// Where a request goes: the URL as text (ureq parses it), or parsed once already.
#[derive(Clone)]
pub(crate) enum Url {
    Text(String),
    Parsed(ureq::http::Uri),
}

impl From<String> for Url {
    fn from(url: String) -> Url {
        Url::Text(url)
    }
}

impl Url {
    /// The URL of a model call: parsed now, if it parses (else as text, so that ureq's
    /// error names it, as for any request).
    fn parsed(url: String) -> Url {
        match url.parse::<ureq::http::Uri>() {
            Ok(uri) => Url::Parsed(uri),
            Err(_) => Url::Text(url),
        }
    }
}

impl Endpoint {
    pub(crate) fn new(base_url: impl Into<String>) -> Endpoint {
        let base_url = base_url.into().trim().trim_end_matches('/').to_owned();
        Endpoint {
            base: BaseUrl::parse(&base_url),
            base_url,
            api_key: None,
            headers: Vec::new(),
            accepts: super::Accepts::all(),
            http: HttpClient::default(),
            prepared: OnceLock::new(),
        }
    }

    /// Sets the key sent with every request.
    pub(crate) fn set_api_key(&mut self, key: String) {
        self.api_key = Some(key);
        self.prepared = OnceLock::new();
    }

    /// The URL, target and headers of a model call to `path` below the base URL, with the
    /// provider's headers `own`: made at the first call to the endpoint's path and kept (a
    /// call to another path makes its own).
    fn prepared(
        &self,
        base: &BaseUrl,
        path: &'static str,
        own: OwnHeaders,
        secret: Option<&Secrets<'_>>,
    ) -> Prepared {
        let make = || {
            let url = Url::parsed(base.request_url(path));
            Prepared {
                path,
                headers: built(&self.model_headers(own, &url)),
                url,
                target: base.target(path, secret),
            }
        };
        let prepared = self.prepared.get_or_init(make);
        if prepared.path == path {
            return prepared.clone();
        }
        make()
    }

    /// The host and port of the base URL (none for one that did not parse).
    pub(crate) fn server_address(&self) -> Option<super::ServerAddress> {
        self.base.as_ref().ok().map(BaseUrl::server_address)
    }

    /// The configuration error of the base URL, if it has one, with the key scrubbed.
    ///
    /// # Errors
    /// [`Error::Config`] for a base URL that did not parse (see [`BaseUrl::parse`]).
    pub(crate) fn check(&self) -> Result<(), Error> {
        let secrets = self.secrets();
        if let Err(e) = &self.base {
            return Err(scrub_error(e.clone(), Some(&secrets)));
        }
        self.http.tls.check()?;
        for (name, value) in &self.headers {
            let bad = |why: &str| {
                let shown = clip(name.clone(), Some(&secrets), 60);
                Err(Error::Config(format!("the header `{shown}` {why}")))
            };
            if name.is_empty() || !name.bytes().all(is_token_byte) {
                return bad("is not a valid header name");
            }
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return bad("has a line break or a NUL in its value");
            }
            // A line of the request head must fit the output buffer (most servers refuse
            // one past 8 KiB anyway).
            if name.len() + value.len() + 4 > super::sockbuf::OUTPUT_MIN {
                return bad("is longer than 8 KiB");
            }
        }
        Ok(())
    }

    /// Adds a header sent with every request (see [`Endpoint::headers`]).
    pub(crate) fn add_header(&mut self, name: String, value: String) {
        self.headers
            .push((name.trim().to_owned(), value.trim().to_owned()));
        self.prepared = OnceLock::new();
    }

    /// Whether a custom header replaces the provider's header `name` (names compared
    /// without case).
    fn replaced(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(custom, _)| custom.eq_ignore_ascii_case(name))
    }

    /// A model call's headers, in the order they are sent: [`Endpoint::provider_headers`],
    /// then the custom headers.
    fn model_headers(&self, own: OwnHeaders, url: &Url) -> Vec<(&str, String)> {
        let mut headers: Vec<(&str, String)> = self.provider_headers(own, url);
        headers.extend(self.headers.iter().map(|(n, v)| (n.as_str(), v.clone())));
        headers
    }

    /// The headers of a model call to `url` besides the custom ones: the user agent,
    /// `accept` and `host` that ureq would add (made here once per endpoint, where ureq
    /// formats them for every request), the provider's own (`own`) and the content type,
    /// each left out when a custom header has its name.
    fn provider_headers(&self, own: OwnHeaders, url: &Url) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("user-agent", USER_AGENT.to_owned()),
            ("accept", "*/*".to_owned()),
        ];
        if let Url::Parsed(uri) = url
            && let Some(host) = host_header(uri)
        {
            headers.push(("host", host));
        }
        headers.extend(own(self));
        headers.push(("content-type", "application/json".to_owned()));
        headers.retain(|(name, _)| !self.replaced(name));
        headers
    }

    /// What no text may show: the key, the credential headers' values and the credentials
    /// of the base URL (see [`BaseUrl::credentials`]).
    fn secrets(&self) -> Secrets<'_> {
        let url = self
            .base
            .as_ref()
            .ok()
            .into_iter()
            .flat_map(BaseUrl::credentials);
        Secrets::new(self.api_key.as_deref(), &self.headers).and(url)
    }

    /// The endpoint the environment names: the base URL from `base_var` (else `default`),
    /// the key from `key_var` and custom headers from `headers_var`.
    ///
    /// # Errors
    /// [`Error::NotConfigured`] saying `hint` when neither variable is set; [`Error::Config`]
    /// naming `base_var` when its URL does not parse, or `headers_var` when its headers
    /// cannot be sent (see [`super::env::headers`]).
    pub(crate) fn from_env(
        base_var: &str,
        key_var: &str,
        headers_var: Option<&str>,
        default: &str,
        hint: &str,
    ) -> Result<Endpoint, Error> {
        let (base, key) = super::env::base_and_key(base_var, key_var, default, hint)?;
        let named = |var: &str| {
            let var = var.to_owned();
            move |e| match e {
                Error::Config(why) => Error::Config(format!("{var}: {why}")),
                other => other,
            }
        };
        let mut endpoint = Endpoint {
            api_key: key,
            ..Endpoint::new(base)
        };
        endpoint.check().map_err(named(base_var))?;
        if let Some(var) = headers_var {
            for (name, value) in super::env::headers(var)? {
                endpoint.add_header(name, value);
            }
            endpoint.check().map_err(named(var))?;
        }
        Ok(endpoint)
    }

    /// Sends `call` and decodes its event stream with `decoder`, handing each event to
    /// `on_event` as it comes; see [`HttpClient::open`] for the retries. Returns how the
    /// reply ended, as the decoder says.
    ///
    /// Every error returned, and every retry announced, has the API key and the credential
    /// headers scrubbed from it: a server may echo them in an error body, an in-stream error
    /// or a broken reply.
    pub(crate) fn stream(
        &self,
        call: Call,
        decoder: impl Decode,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, Error> {
        let secrets = self.secrets();
        let secret = Some(&secrets);
        let mut on_event = |event| on_event(scrub_event(event, secret));
        self.stream_unscrubbed(call, decoder, secret, cancel, &mut on_event)
            .map_err(|e| scrub_error(e, secret))
    }

    fn stream_unscrubbed(
        &self,
        call: Call,
        mut decoder: impl Decode,
        secret: Option<&Secrets<'_>>,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, Error> {
        self.check()?;
        let base = self.base.as_ref().map_err(Clone::clone)?;
        // The body bytes move into the request as they are: serialized once per model call,
        // and every attempt sends these same bytes.
        let Prepared {
            url,
            target,
            headers,
            ..
        } = self.prepared(base, call.path, call.headers, secret);
        let (headers, built, extra) = match headers {
            Some(built) => (Vec::new(), Some(built), &[][..]),
            None => (
                self.provider_headers(call.headers, &url),
                None,
                &self.headers[..],
            ),
        };
        let post = Post {
            url,
            headers,
            built,
            body: call.body,
        };
        let to = Redirects {
            base,
            path: call.path,
        };
        // A retry notice adds nothing to the reply, so the agent never refuses one.
        let mut body =
            self.http
                .open(&post, extra, &target, &to, secret, cancel, &mut |event| {
                    let _ = on_event(event);
                })?;
        let mut out = Emitter { on_event };
        let ended = for_each_event(&mut body, self.http.max_event_bytes, cancel, |event| {
            decoder.event(event.data, &mut out)
        })?;
        decoder.finish(ended)
    }
}

/// The most of a reply to [`Endpoint::json`] read: a `/tokenize` of a long prompt is a big
/// array.
const JSON_REPLY_LIMIT: u64 = 32 * 1024 * 1024;

impl Endpoint {
    /// One JSON exchange beside the model calls (a token count, the server's properties): a
    /// POST of `body` to `path`, or a GET when `body` is `None`, below the base URL or, with
    /// `root`, below the server's root (the base URL without a last `/v1`); once, without
    /// retries, the connect and first-byte timeouts and `cancel` bounding it. `Ok(None)`
    /// when the server has no such endpoint (404, 405, 501). The key is scrubbed from errors.
    ///
    /// # Errors
    /// [`Error::Http`] for another status of 300 and above, [`Error::Stream`] for a body
    /// that is not JSON, and the errors of [`HttpClient::exchange`].
    pub(crate) fn json(
        &self,
        path: &str,
        root: bool,
        mut headers: Vec<(&'static str, String)>,
        body: Option<Vec<u8>>,
        cancel: &CancelToken,
    ) -> Result<Option<serde_json::Value>, Error> {
        let secrets = self.secrets();
        let secret = Some(&secrets);
        let exchange = || {
            self.check()?;
            let base = self.base.as_ref().map_err(Clone::clone)?;
            let base = if root { base.root() } else { base.clone() };
            let method = if body.is_some() {
                headers.push(("content-type", "application/json".to_owned()));
                Method::Post
            } else {
                Method::Get
            };
            // A custom header replaces the provider's own of the same name, as on a model
            // call.
            headers.retain(|(name, _)| !self.replaced(name));
            let post = Post {
                url: base.request_url(path).into(),
                headers,
                built: None,
                body: body.unwrap_or_default(),
            };
            let target = base.target(path, secret);
            let Reply {
                status, mut body, ..
            } = self
                .http
                .exchange(method, &post, &self.headers, &target, secret, cancel)?;
            if matches!(status, 404 | 405 | 501) {
                return Ok(None);
            }
            if status >= 300 {
                let text = body.read_text(ERROR_BODY_LIMIT, secret)?;
                let message = clip(error_message(status, &text), secret, ERROR_MESSAGE_LIMIT);
                return Err(Error::Http {
                    status,
                    message: format!("{message} ({target})"),
                    retry_after: None,
                });
            }
            // Data, not a message: read as it is (the errors made of it are scrubbed below).
            let text = body.read_text(JSON_REPLY_LIMIT, None)?;
            serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| Error::Stream(format!("{target}: the reply is not JSON ({e})")))
        };
        exchange().map_err(|e| scrub_error(e, secret))
    }
}

/// The headers a provider sends with every model call, made of its endpoint (the key).
pub(crate) type OwnHeaders = fn(&Endpoint) -> Vec<(&'static str, String)>;

/// The headers of the OpenAI APIs (Chat Completions, Responses): the key as a bearer token,
/// when there is one.
pub(crate) fn bearer(endpoint: &Endpoint) -> Vec<(&'static str, String)> {
    let key = endpoint.api_key.as_ref();
    key.map(|key| ("authorization", format!("Bearer {key}")))
        .into_iter()
        .collect()
}

/// One streamed request of a provider: what differs between providers.
pub(crate) struct Call {
    /// Appended to the base URL.
    pub(crate) path: &'static str,
    /// The provider's headers; the content type and the custom headers are added. Asked
    /// once per endpoint and path (see [`Endpoint::model_headers`]).
    pub(crate) headers: OwnHeaders,
    /// The JSON body, as its pieces.
    pub(crate) body: Payload,
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
    /// The base URL without user info and query string (they may hold keys), the key and
    /// the values of credential headers as `<redacted>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Endpoint");
        match &self.base {
            Ok(base) => d.field("base_url", base),
            Err(_) => d.field("base_url", &debug_unparsed(&self.base_url)),
        };
        let secrets = self.secrets();
        let headers: Vec<(&str, String)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let shown = if is_credential_header(name) {
                    "<redacted>".to_owned()
                } else {
                    scrub(value.clone(), Some(&secrets))
                };
                (name.as_str(), shown)
            })
            .collect();
        d.field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("headers", &headers)
            .field("accepts", &self.accepts)
            .field("http", &self.http)
            .finish()
    }
}

/// A byte of an HTTP header name (a `token` of RFC 9110).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The HTTP method of an [`HttpClient::exchange`]. The providers POST their model calls and
/// GET a server's properties ([`Endpoint::json`]); DELETE is for `pagent::mcp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) enum Method {
    Post,
    Get,
    Delete,
}

/// What a request sends: its body one buffer, or a model call's pieces.
pub(crate) struct Post<B = Vec<u8>> {
    pub(crate) url: Url,
    pub(crate) headers: Vec<(&'static str, String)>,
    /// Headers sent before `headers`, made into ureq's types already (a model call's, which
    /// then has no others).
    pub(crate) built: Option<Built>,
    pub(crate) body: B,
}

/// A body [`HttpClient::exchange`] can send.
pub(crate) trait SendBytes {
    /// Sends `request` through `agent` with these bytes as its body.
    fn send(
        &self,
        agent: &ureq::Agent,
        request: ureq::http::Request<()>,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error>;
}

impl SendBytes for Vec<u8> {
    fn send(
        &self,
        agent: &ureq::Agent,
        request: ureq::http::Request<()>,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        agent.run(request.map(|()| &self[..]))
    }
}

impl SendBytes for Payload {
    /// Read from the pieces into ureq's output buffer, with their length: the body is never
    /// joined into one buffer.
    fn send(
        &self,
        agent: &ureq::Agent,
        mut request: ureq::http::Request<()>,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        // In place of the built headers' (see [`Built`]).
        request.headers_mut().insert(
            ureq::http::header::CONTENT_LENGTH,
            content_length(self.len()),
        );
        let mut reader = self.reader();
        agent.run(request.map(|()| ureq::SendBody::from_reader(&mut reader)))
    }
}

/// The `content-length` of a body of `len` bytes, made in one allocation (`http`'s
/// `From<u64>` makes two).
fn content_length(len: usize) -> ureq::http::HeaderValue {
    let mut digits = [0; 20];
    let mut at = digits.len();
    let mut n = len;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // OK because digits are visible ASCII, which a header value takes.
    ureq::http::HeaderValue::from_bytes(&digits[at..]).expect("digits are a header value")
}

/// A POST of `post`'s URL with its headers (the built ones, then `headers`), without a body
/// yet: made as `http`'s request directly (ureq's builder moves itself at each header), with
/// the errors ureq's builder gives for a URL that does not parse or a header that does not
/// convert.
fn post_request<'h, B>(
    post: &Post<B>,
    headers: impl Iterator<Item = (&'h str, &'h str)>,
) -> Result<ureq::http::Request<()>, ureq::Error> {
    let uri = match &post.url {
        Url::Text(url) => url
            .parse::<ureq::http::Uri>()
            .map_err(ureq::http::Error::from)?,
        Url::Parsed(uri) => uri.clone(),
    };
    let mut request = ureq::http::Request::new(());
    *request.method_mut() = ureq::http::Method::POST;
    *request.uri_mut() = uri;
    let map = request.headers_mut();
    if let Some(built) = &post.built {
        map.clone_from(built);
    }
    for (name, value) in headers {
        let name =
            ureq::http::HeaderName::from_bytes(name.as_bytes()).map_err(ureq::http::Error::from)?;
        let value = ureq::http::HeaderValue::from_str(value).map_err(ureq::http::Error::from)?;
        map.append(name, value);
    }
    Ok(request)
}

/// Where the redirect of a provider's request points, for its error: the base URL and the
/// request's path, against which a relative `Location` is read.
pub(crate) struct Redirects<'a> {
    base: &'a BaseUrl,
    path: &'a str,
}

impl HttpClient {
    /// Call after changing a setting, so the next request builds an agent with it.
    pub(crate) fn changed(mut self) -> HttpClient {
        self.agent = OnceLock::new();
        self
    }

    fn agent(&self) -> &ureq::Agent {
        self.agent.get_or_init(|| {
            // No ureq timeouts: the sockets enforce ours (see `transport`). No resolve
            // timeout either, as ureq would start a thread for it.
            // No redirects: ureq would follow a 301/302/303 as a GET to wherever the server
            // says, with every header but `authorization` and `cookie` (Anthropic's
            // `x-api-key`, a custom header, an MCP session id). The reply of a 3xx is
            // returned as it is; providers make it an error (`attempt`), the MCP client
            // decides for itself.
            // The buffers of ureq's TLS layer (a plain connection has its own, small and
            // freed while pooled: `sockbuf`): 16 KiB each way, a TLS record's most, where
            // ureq's default (128 KiB each way) would be resident per connection. A
            // response head must fit the input: a larger one is refused by name, not taken
            // for a closed connection.
            // Certificates of its own need a TLS configuration of its own.
            let own_tls = self.tls.connector();
            let config = ureq::Agent::config_builder()
                .tls_config(self.tls.config())
                .input_buffer_size(TLS_BUFFER)
                .output_buffer_size(TLS_BUFFER)
                .max_response_header_size(TLS_BUFFER - 1)
                .max_redirects(0)
                .http_status_as_error(false)
                .user_agent(USER_AGENT)
                .build();
            // ureq's default chain, with our TCP link and the `Ready` mark (no SOCKS: that
            // feature of ureq is off).
            let connector = ConnectProxyConnector::default()
                .chain(Tcp)
                .chain(Tls(own_tls))
                .chain(Ready);
            ureq::Agent::with_parts(config, connector, Resolve::default())
        })
    }

    /// Sends `post` and waits for the headers of the reply, retrying transient failures
    /// per the policy and announcing each retry through `on_event`. Only failures before
    /// the server accepted the request are retried: once a reply started (a 200), the
    /// request is never sent again.
    ///
    /// Every message is built redacted: the key is removed from the server's text before
    /// it is cut, and notes are appended after.
    ///
    /// A redirect (3xx) is never followed: it is an [`Error::Http`] naming where it points
    /// (`to` resolves a relative `Location`), without its query string.
    #[allow(clippy::too_many_arguments)] // OK because each is one part of the request.
    pub(crate) fn open(
        &self,
        post: &Post<Payload>,
        extra: &[(String, String)],
        target: &Target,
        to: &Redirects<'_>,
        secret: Option<&Secrets<'_>>,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Body, Error> {
        self.tls.check()?;
        let mut attempt = 0;
        loop {
            let error = match self.attempt(post, extra, target, to, secret, cancel) {
                Ok(body) => return Ok(body),
                Err(e) => e,
            };
            attempt += 1;
            let Some(delay) = self.retry.delay(attempt, &error) else {
                return Err(gave_up(error, attempt));
            };
            on_event(StreamEvent::retry(attempt, delay, error.to_string()));
            if cancel.wait_timeout(delay) {
                return Err(cancelled(cancel));
            }
        }
    }

    fn attempt(
        &self,
        post: &Post<Payload>,
        extra: &[(String, String)],
        target: &Target,
        to: &Redirects<'_>,
        secret: Option<&Secrets<'_>>,
        cancel: &CancelToken,
    ) -> Result<Body, Error> {
        let Reply {
            status,
            headers,
            mut body,
        } = self.exchange(Method::Post, post, extra, target, secret, cancel)?;
        // Borrowed from the reply's head: read once per model call.
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let content_type = header("content-type").unwrap_or_default();
        if (300..400).contains(&status) {
            let location = to.base.redirect_target(to.path, header("location"));
            let location = clip(location, secret, ERROR_MESSAGE_LIMIT);
            return Err(Error::Http {
                status,
                message: format!(
                    "redirected to {location}, not followed: a request and its key go only \
                     where the base URL says ({target})"
                ),
                retry_after: None,
            });
        }
        if status >= 400 {
            // Read only for a failure: a reply that streams has no use for it.
            let retry_after = parse_retry_after(
                header("retry-after-ms"),
                header("retry-after"),
                SystemTime::now(),
            );
            let text = body.read_text(ERROR_BODY_LIMIT, secret)?;
            let message = clip(error_message(status, &text), secret, ERROR_MESSAGE_LIMIT);
            return Err(Error::Http {
                status,
                message: format!("{message} ({target})"),
                retry_after,
            });
        }
        let media = content_type.split(';').next().unwrap_or("").trim();
        if !media.eq_ignore_ascii_case("text/event-stream") {
            let text = body.read_text(CONTENT_TYPE_SNIPPET as u64 * 4, secret)?;
            let start = clip(text.trim().to_owned(), secret, CONTENT_TYPE_SNIPPET);
            return Err(Error::ContentType {
                content_type: clip(content_type.to_owned(), secret, 100),
                message: format!("status {status} from {target}; the body starts: {start:?}"),
            });
        }
        Ok(body)
    }
    /// Sends one request (`method`: a POST of `post.body`, or a GET or a DELETE without a
    /// body) with `post.headers` and `extra` headers, and waits for the headers of its reply,
    /// without retries (but for a kept connection found closed by the server as the request
    /// went out, which is resent on a new one): the status, the headers, and the body to read.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad URL, [`Error::Timeout`] naming the phase,
    /// [`Error::Connection`], [`Error::Aborted`] when `cancel` is cancelled.
    pub(crate) fn exchange<B: SendBytes>(
        &self,
        method: Method,
        post: &Post<B>,
        extra: &[(String, String)],
        target: &Target,
        secret: Option<&Secrets<'_>>,
        cancel: &CancelToken,
    ) -> Result<Reply, Error> {
        if cancel.is_cancelled() {
            return Err(cancelled(cancel));
        }
        let mut resent = 0;
        let (ctx, response) = loop {
            let ctx = Ctx::new(cancel, self.connect_timeout, self.first_byte_timeout);
            let entered = ctx.enter();
            let sent = self.send_once(method, post, extra);
            drop(entered);
            match sent {
                Ok(response) => break (ctx, response),
                // A kept connection the server closed as the request went out (its idle
                // timeout, a restart), before a byte of the reply: the server dropped the
                // connection, not the request, so it goes again on a new one, as browsers
                // resend on a reused connection. A connection made for this request is not.
                Err(e)
                    if resent < MAX_RESENDS
                        && ctx.stage() == Stage::Idle
                        && !cancel.is_cancelled()
                        && dropped_connection(&e) =>
                {
                    resent += 1;
                }
                Err(e) => return Err(failed(&ctx, e, target, secret, &self.tls)),
            }
        };
        let status = response.status().as_u16();
        let (parts, body) = response.into_parts();
        Ok(Reply {
            status,
            headers: parts.headers,
            body: Body::new(
                body.into_reader(),
                target.clone(),
                ctx,
                self.first_byte_timeout,
                self.idle_timeout,
            ),
        })
    }

    /// Sends one request on a kept connection or a new one, within the call's context.
    fn send_once<B: SendBytes>(
        &self,
        method: Method,
        post: &Post<B>,
        extra: &[(String, String)],
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        let headers = post
            .headers
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .chain(
                extra
                    .iter()
                    .map(|(name, value)| (name.as_str(), value.as_str())),
            );
        match method {
            Method::Post => post_request(post, headers)
                .and_then(|request| post.body.send(self.agent(), request)),
            Method::Get | Method::Delete => {
                let url = match &post.url {
                    Url::Text(url) => url.clone(),
                    Url::Parsed(uri) => uri.to_string(),
                };
                let mut request = match method {
                    Method::Get => self.agent().get(url),
                    _ => self.agent().delete(url),
                };
                for (name, value) in headers {
                    request = request.header(name, value);
                }
                request.call()
            }
        }
    }
}

/// How many times one request goes again on a new connection after kept ones were found
/// closed by the server (as many as a pool may hold dead at once, bounded).
const MAX_RESENDS: u32 = 3;

/// The TLS link of every client in the process: one rustls configuration (its root
/// certificates, about 25 KB) built on the first `https` connection and shared, with its
/// cache of TLS sessions (a resumed session skips most of a handshake), where ureq's
/// connector per client built one per provider. Sound because it serves only clients whose
/// TLS settings are ureq's defaults: the connector keeps the first configuration it built.
static TLS: std::sync::LazyLock<RustlsConnector> =
    std::sync::LazyLock::new(RustlsConnector::default);

/// The TLS link of a client's chain: [`TLS`], or the connector of the clients given the
/// same certificates ([`TlsSettings::connector`]).
#[derive(Debug)]
struct Tls(Option<Arc<RustlsConnector>>);

impl<In: Transport> Connector<In> for Tls {
    type Out = <RustlsConnector as Connector<In>>::Out;

    fn connect(
        &self,
        details: &ConnectionDetails<'_>,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        match &self.0 {
            Some(own) => own.connect(details, chained),
            None => TLS.connect(details, chained),
        }
    }
}

/// The reply to one request, its body not yet read.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: ureq::http::HeaderMap,
    pub(crate) body: Body,
}

/// The error of a cancelled request: the run deadline's timeout, or an abort.
pub(crate) fn cancelled(cancel: &CancelToken) -> Error {
    if cancel.is_timed_out() {
        Error::Timeout(TimeoutPhase::Run)
    } else {
        Error::Aborted
    }
}

/// Whether `e` says the peer reset or closed the connection (and not the TLS layer refused
/// what it read).
fn dropped_connection(e: &ureq::Error) -> bool {
    let ureq::Error::Io(io) = e else {
        return false;
    };
    let from_tls = io
        .get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>());
    !from_tls
        && matches!(
            io.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::BrokenPipe
        )
}

/// Whether `e` is a certificate the TLS layer refused, on either side: a server's the client
/// does not trust, or the client's (or its lack) the server did not take. With TLS 1.3 the
/// server checks the client's certificate after the client finished its handshake, so the
/// refusal comes as the first read's error, past the handshake stage. Trying again would
/// get the same answer.
fn refused_certificate(e: &ureq::Error) -> bool {
    use rustls::AlertDescription as Alert;
    let tls = match e {
        ureq::Error::Rustls(tls) => tls,
        ureq::Error::Io(io) => match io.get_ref().and_then(|e| e.downcast_ref()) {
            Some(tls) => tls,
            None => return false,
        },
        _ => return false,
    };
    match tls {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => true,
        rustls::Error::AlertReceived(alert) => matches!(
            alert,
            Alert::CertificateRequired
                | Alert::BadCertificate
                | Alert::UnsupportedCertificate
                | Alert::CertificateRevoked
                | Alert::CertificateExpired
                | Alert::CertificateUnknown
                | Alert::UnknownCA
                | Alert::AccessDenied
        ),
        _ => false,
    }
}

/// The error of a request that failed before its reply started.
fn failed(
    ctx: &Ctx,
    e: ureq::Error,
    target: &Target,
    secret: Option<&Secrets<'_>>,
    tls: &TlsSettings,
) -> Error {
    if ctx.cancel.is_cancelled() {
        return cancelled(&ctx.cancel);
    }
    // A connection reset or closed in the handshake is a failed connection like one reset
    // at its connect (a server's full accept queue, a restart), and a handshake that did not
    // end within the connect timeout is a connect timeout (a server too busy to answer yet):
    // both retried. A server that answers in something else than TLS, or a certificate
    // refused, is told at once.
    let dropped = ctx.timed_out().is_some() || dropped_connection(&e);
    if (ctx.stage() == Stage::Tls && !dropped) || refused_certificate(&e) {
        let why = clip(e.to_string(), secret, ERROR_MESSAGE_LIMIT);
        // A certificate the client refuses is a TLS server all the same.
        let lower = why.to_ascii_lowercase();
        let hint = if lower.contains("unknownissuer") {
            ": a server whose authority is not a public one needs its roots given \
             (`root_certificates`)"
        } else if lower.contains("certificaterequired") {
            ": the server asks for a client certificate (`client_certificate`)"
        } else if lower.contains("certificate") {
            ""
        } else {
            ": the server may not speak TLS (check http:// vs https:// in the base URL)"
        };
        return Error::Config(format!("{target}: the TLS handshake failed ({why}){hint}"));
    }
    if let Some(phase) = ctx.timed_out() {
        return Error::Timeout(phase);
    }
    let why = match e {
        // The URL was checked when the provider was made; a header value that cannot be
        // sent (a key with a line break) is a configuration mistake too: neither is retried.
        ureq::Error::BadUri(uri) => {
            return Error::Config(format!(
                "{target}: bad URL: {}",
                clip(uri, secret, ERROR_MESSAGE_LIMIT)
            ));
        }
        ureq::Error::Http(e) => {
            return Error::Config(format!(
                "{target}: the request cannot be sent: {}",
                clip(e.to_string(), secret, ERROR_MESSAGE_LIMIT)
            ));
        }
        // A reply that is not HTTP, or whose head is larger than the buffer: the same
        // request would get the same answer, so it is not a failed connection to retry.
        e @ (ureq::Error::Protocol(_) | ureq::Error::LargeResponseHeader(..)) => {
            return Error::Stream(format!(
                "{target}: the reply's head cannot be read: {}",
                clip(e.to_string(), secret, ERROR_MESSAGE_LIMIT)
            ));
        }
        ureq::Error::Io(io) => {
            let mut why = io.to_string();
            if ctx.stage() == Stage::Tls {
                why.push_str(" in the TLS handshake");
            }
            // A server that refuses the client for want of a certificate (with TLS 1.3, after
            // the client's handshake) may close before its alert is read: the request's
            // write then fails. Retried (a closed connection proves nothing), and named.
            let closed = matches!(
                io.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            );
            if closed && ctx.stage() == Stage::Http && target.is_https() && !tls.has_client() {
                why.push_str(
                    "; the server closed the connection right after the TLS handshake, as \
                     one that requires a client certificate does when it gets none \
                     (`client_certificate`)",
                );
            }
            why
        }
        other => other.to_string(),
    };
    Error::Connection(format!(
        "{target}: {}",
        clip(why, secret, ERROR_MESSAGE_LIMIT)
    ))
}
