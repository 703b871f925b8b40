//! Model providers: the blocking, streaming [`Provider`] trait and its request and stream types.
//!
//! A provider turns one [`Request`] into a sequence of [`StreamEvent`]s, handed to a callback
//! as they arrive, and a [`ReplyEnd`] saying how the reply ended. The agent alone assembles
//! the reply from the events. A provider runs on the agent's run thread and blocks it until
//! the reply is complete, failed, or cancelled through the [`CancelToken`].
//!
//! This layer knows nothing of agents: it imports only the message types.
//!
//! # Real model servers
//!
//! [`OpenAiCompat`] speaks OpenAI's Chat Completions (OpenAI, Ollama, vLLM, llama.cpp,
//! LM Studio, OpenRouter, DeepSeek...), [`OpenAiResponses`] OpenAI's Responses API (OpenAI,
//! Azure, xAI, and the Open Responses servers: Ollama, vLLM, LM Studio, llama.cpp),
//! [`Anthropic`] the Anthropic Messages API. All stream over blocking HTTP (ureq, no async
//! runtime), and share these behaviours:
//!
//! - **Errors** are typed: [`Error::Http`] with the status and the server's own message,
//!   [`Error::Timeout`] naming the phase, [`Error::Connection`], [`Error::Stream`] for a
//!   malformed or truncated stream, [`Error::Api`] for an error the server reports inside
//!   the stream. [`Error::is_context_overflow`] recognises a prompt too long for the model.
//! - **Retries**: HTTP 408, 409, 429, 5xx, connection failures and connect timeouts are retried
//!   while nothing of the reply has arrived, per a [`RetryPolicy`], honouring `Retry-After`
//!   and `retry-after-ms`. Each retry is first announced as a [`StreamEvent::Retry`], which
//!   the agent publishes as a `MessageUpdate` whose delta is the retry (and which sets
//!   `State::retry`), so a UI can say "rate limited, retrying in 2 s".
//! - **Timeouts** per phase, each enforced on the socket itself: connect (default 10 s, TCP
//!   and TLS); first byte (default 300 s, time for a slow prompt or a reasoning model),
//!   counted from sending the request to the first *event* of the stream; and idle (default
//!   120 s), the longest gap between two reads, which also covers the gap between the
//!   response headers and the first body byte. Keep-alive comments (`:` lines) count as
//!   progress for the idle timeout (a server that sends them is alive) but never as the
//!   first byte: a server that sends only comments fails with the first-byte timeout. The
//!   agent's `run_timeout` bounds the whole run on top of these, comments or not. A timeout
//!   never fires early; it may fire up to 1/64 of its length late, at most 50 ms (the
//!   socket's timeout is set again only when it is off by more than that).
//! - **Retried only before the reply**: once the server answered with its headers, the
//!   request is never sent again (a close after a 200 is an error, not a retry), since the
//!   server may already be working on it.
//! - **Abort**: the request is sent and its reply read on the run thread, with no helper
//!   thread. Cancelling the token (the agent's `abort()`) from any thread shuts the socket of
//!   the request in flight down, which wakes a blocked connect, write or read at once; the
//!   connection is closed, so the server sees the client leave at once, and nothing is left
//!   running. A timeout closes the connection the same way. Only replies that ended
//!   normally leave their connection in the pool for the next request.
//! - **Configuration mistakes** fail at once and are not retried. The base URL is parsed
//!   and checked once, when the provider is made: a URL without a scheme or with another
//!   than `http`/`https`, without a host, with a port that is not a number in 1-65535, or
//!   with characters a URL cannot hold is an [`Error::Config`] from
//!   [`Provider::check`], which `AgentBuilder::build` calls (and from `from_env`). So are
//!   TLS spoken to a plain HTTP server (within the connect timeout) and a header that
//!   cannot be sent; a reply that is not an event stream is an [`Error::ContentType`],
//!   with the start of the body. Every HTTP-level error names the method and URL tried
//!   (`POST http://127.0.0.1:8080/v1/chat/completions`), without user info or query string.
//!   A query string in the base URL (`?api-version=..`) goes after each request's path.
//! - **Redirects are never followed**: a 3xx is an [`Error::Http`] with its status, naming
//!   where the `Location` points (origin and path, no query string), and is not retried
//!   ([`ErrorKind::InvalidRequest`](crate::ErrorKind::InvalidRequest)). A redirect would
//!   send the request, and the key in its headers, to a host the base URL does not name;
//!   point the base URL at the server itself instead.
//! - **Custom headers** (`header(name, value)` on each provider, `OPENAI_CUSTOM_HEADERS` /
//!   `ANTHROPIC_CUSTOM_HEADERS` from the environment) go with every request, each replacing
//!   a provider header of its name; one named like a credential is a secret as the key is.
//! - **Request bodies in O(new bytes)**: each message's JSON is written once and kept in the
//!   request's [`BodyCache`] (an agent hands its transcript's own with every request), so a
//!   model call serializes only the messages it has not sent before; the body goes to the
//!   socket as its pieces, never joined into one buffer, and a retry sends the same pieces.
//!   A cached body is byte for byte the body written without the cache.
//! - **TLS**: `https` trusts Mozilla's roots, shared by every client of the process;
//!   `root_certificates(pem)` trusts a private authority (or a self-signed server) instead,
//!   `client_certificate(pem)` answers a server that asks for one (mutual TLS). A
//!   certificate refused on either side is an [`Error::Config`] that says which setting it
//!   wants, never retried.
//! - **Prompt caching**: [`Anthropic`] places `cache_control` breakpoints by default
//!   ([`PromptCache`]); the OpenAI providers take a `prompt_cache_key`. Each reply's
//!   [`Usage`](crate::Usage) has the cache reads and writes the server reported.
//! - **Secrets**: API keys never appear in `Debug`, errors or events, not even in part: no
//!   8 consecutive characters of the key reach any text of an error or a retry notice
//!   (hence `AgentEnd`, the state and the wire), wherever a limit cut the server's text; a
//!   body read that stopped inside the key loses its start too. The same holds for the
//!   values of credential headers and for the credentials of the base URL (its user info's
//!   password, and the values of query parameters named like a credential, such as
//!   `?api-key=`), which a server that echoes the request's URL would show. `Debug` shows
//!   the base URL without user info and query string.
//! - **Configuration** from the environment: see [`from_env`].

use crate::Error;
use crate::cancel::CancelToken;
use crate::message::{Message, StopReason};
pub use crate::output::OutputRequest;
pub use crate::types::{StreamEvent, ThinkingLevel, ToolDefinition};
use std::sync::Arc;

/// The key and client setters every HTTP provider has, and its base URL, delegating to its
/// `endpoint: Endpoint` field; `$key_doc` documents `api_key` (how the key is sent).
macro_rules! http_setters {
    ($provider:ty, $key_doc:literal) => {
        impl $provider {
            #[doc = $key_doc]
            #[must_use]
            pub fn api_key(mut self, key: impl Into<String>) -> $provider {
                self.endpoint.set_api_key(key.into());
                self
            }

            /// A header sent with every request, after the provider's own: an Azure
            /// `api-key`, `anthropic-beta`, OpenRouter's `HTTP-Referer` and `X-Title`, a
            /// gateway's token. It replaces a header of the provider of the same name (names
            /// compared without case), the key's header included; add it again to send a
            /// name twice. The value of a header named like a credential (a name holding
            /// `auth`, `key`, `token`, `secret`, `password`, `cookie`, `credential`,
            /// `session` or `signature`) is redacted as the key is: never in `Debug`,
            /// errors or events, not even in part. Defaults to none.
            ///
            /// A name that is not an HTTP token, a value with a line break, or a header
            /// longer than 8 KiB (name and value: a line of the request head, which most
            /// servers refuse past that), fails
            /// [`Provider::check`](crate::llm::Provider::check) (and so the agent's
            /// `build`) with [`Error::Config`](crate::Error::Config).
            #[must_use]
            pub fn header(
                mut self,
                name: impl Into<String>,
                value: impl Into<String>,
            ) -> $provider {
                self.endpoint.add_header(name.into(), value.into());
                self
            }

            /// What the model behind the provider takes besides text (images, documents,
            /// audio, URLs): a part it does not take fails the model call with
            /// [`Error::UnsupportedContent`](crate::Error::UnsupportedContent) before the
            /// request is sent. Defaults to [`Accepts::all`](crate::llm::Accepts::all),
            /// whatever the API can carry; tell a text-only model with
            /// [`Accepts::text`](crate::llm::Accepts::text).
            #[must_use]
            pub fn accepts(mut self, accepts: $crate::llm::Accepts) -> $provider {
                self.endpoint.accepts = accepts;
                self
            }

            /// The base URL requests go to.
            pub fn base_url(&self) -> &str {
                &self.endpoint.base_url
            }

            /// How long connecting (TCP and TLS) may take. Defaults to 10 s. A connect or a
            /// TLS handshake not done in this time is a connect timeout
            /// ([`TimeoutPhase::Connect`](crate::TimeoutPhase::Connect)), retried as the
            /// retry policy says (a server too busy to accept or to answer the handshake yet
            /// is not told from one that never will). A DNS lookup is not bounded by it (nor
            /// interrupted by an abort).
            #[must_use]
            pub fn connect_timeout(mut self, timeout: std::time::Duration) -> $provider {
                self.endpoint.http.connect_timeout = timeout;
                self.endpoint.http = self.endpoint.http.changed();
                self
            }

            /// How long the reply may take to start: from sending the request to the first
            /// event of the stream. Defaults to 300 s. Keep-alive comments (`:` lines) do
            /// not count, so a server that sends only comments fails with
            /// [`TimeoutPhase::FirstByte`](crate::TimeoutPhase::FirstByte). The connection is
            /// closed when it passes.
            #[must_use]
            pub fn first_byte_timeout(mut self, timeout: std::time::Duration) -> $provider {
                self.endpoint.http.first_byte_timeout = timeout;
                self.endpoint.http = self.endpoint.http.changed();
                self
            }

            /// How long the reply may stay silent between two reads, from its headers on
            /// (so it also covers the gap between the headers and the first body byte).
            /// Defaults to 120 s. Any bytes count as progress, keep-alive comments included:
            /// a server that sends them is alive; the agent's `run_timeout` bounds a run
            /// whatever the server sends. The connection is closed when it passes.
            #[must_use]
            pub fn idle_timeout(mut self, timeout: std::time::Duration) -> $provider {
                self.endpoint.http.idle_timeout = timeout;
                self.endpoint.http = self.endpoint.http.changed();
                self
            }

            /// Trusts only the certificates in `pem` (one or more PEM `CERTIFICATE`
            /// sections, as in a CA bundle file) for `https`, in place of the built-in roots
            /// (Mozilla's): a server behind a private authority, or a self-signed one (give
            /// its own certificate). Defaults to the built-in roots. A text with no
            /// certificate, or one that is not a valid X.509 certificate, fails
            /// [`Provider::check`](crate::llm::Provider::check) (and so the agent's `build`)
            /// with [`Error::Config`](crate::Error::Config) naming it.
            #[must_use]
            pub fn root_certificates(mut self, pem: impl AsRef<[u8]>) -> $provider {
                self.endpoint.http.tls.set_roots(pem.as_ref());
                self.endpoint.http = self.endpoint.http.changed();
                self
            }

            /// A certificate to present to a server that asks for one (mutual TLS, as some
            /// gateways require): `pem` holds the certificate, the chain up to the
            /// authority if any, and the private key (PKCS#8, PKCS#1 or SEC1). Defaults to
            /// none. A text without a certificate or a key fails
            /// [`Provider::check`](crate::llm::Provider::check) with
            /// [`Error::Config`](crate::Error::Config).
            #[must_use]
            pub fn client_certificate(mut self, pem: impl AsRef<[u8]>) -> $provider {
                self.endpoint.http.tls.set_client(pem.as_ref());
                self.endpoint.http = self.endpoint.http.changed();
                self
            }

            /// How transient failures are retried. Defaults to
            /// [`RetryPolicy::new`](crate::llm::RetryPolicy::new).
            #[must_use]
            pub fn retry(mut self, policy: $crate::llm::RetryPolicy) -> $provider {
                self.endpoint.http.retry = policy;
                self
            }

            /// The size limit of one server-sent event. Defaults to
            /// [`sse::DEFAULT_MAX_EVENT_BYTES`](crate::llm::sse::DEFAULT_MAX_EVENT_BYTES).
            #[must_use]
            pub fn max_event_bytes(mut self, bytes: usize) -> $provider {
                self.endpoint.http.max_event_bytes = bytes;
                self
            }
        }
    };
}
pub(crate) use http_setters;

mod anthropic;
mod body;
mod chat_stream;
mod count;
mod env;
mod error_text;
mod faux;
pub(crate) mod http;
mod openai;
mod parts;
mod pieces;
mod responses;
mod retry;
mod sockbuf;
pub mod sse;
mod tagged;
pub(crate) mod tls;
mod transport;
mod url;

pub use anthropic::{
    ANTHROPIC_BASE_URL, ANTHROPIC_VERSION, Anthropic, AnthropicOutput, PromptCache,
};
pub use count::TokenCounter;
pub use env::{
    ANTHROPIC_HEADERS_VAR, FromEnv, MAX_TOKENS_VAR, OPENAI_API_VAR, OPENAI_HEADERS_VAR, from_env,
    from_env_or,
};
pub use faux::{Faux, FauxReply};
pub use openai::{OPENAI_BASE_URL, OpenAiCompat};
pub use parts::Accepts;
pub(crate) use parts::TextParts;
pub use pieces::BodyCache;
pub use responses::OpenAiResponses;
pub use retry::RetryPolicy;
/// Frees the connection buffers the thread kept for its next request (a run ended).
pub(crate) use sockbuf::release_thread as release_thread_buffers;

/// What one model call gets.
///
/// Two requests are equal when they ask for the same thing: [`Request::body_cache`], which
/// never changes what is sent, is not compared.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Request {
    /// The system prompt; empty for none.
    pub system_prompt: String,
    /// The conversation so far, oldest first: the transcript's own messages, shared, not
    /// copied (see `AgentBuilder::transform_context` to send others).
    pub messages: Vec<Arc<Message>>,
    /// The tools the model may call: the agent's own list, shared, not copied.
    pub tools: Arc<[ToolDefinition]>,
    /// The model id, as the provider names it.
    pub model: String,
    /// How hard the model should think, where it can.
    pub thinking: ThinkingLevel,
    /// The structured answer this call asks for, if any: the provider sends the schema as
    /// its API's structured-output request (see [`OutputRequest`]) and hands the answer
    /// over as the reply's text. `None` for a plain reply.
    pub output: Option<OutputRequest>,
    /// Where the HTTP providers keep the request JSON of each message between calls, so
    /// that a call serializes only the messages it has not sent before (see
    /// [`BodyCache`]). The agent sets its transcript's own. Defaults to `None`: every
    /// message is serialized on every call.
    pub body_cache: Option<BodyCache>,
}

impl PartialEq for Request {
    fn eq(&self, other: &Request) -> bool {
        // Every field but the body cache.
        let Request {
            system_prompt,
            messages,
            tools,
            model,
            thinking,
            output,
            body_cache: _,
        } = self;
        *system_prompt == other.system_prompt
            && *messages == other.messages
            && *tools == other.tools
            && *model == other.model
            && *thinking == other.thinking
            && *output == other.output
    }
}

impl Request {
    /// A request to `model` with these messages: no system prompt, no tools, thinking off
    /// (add them with the `with_` methods). For calling a provider directly, as a test does.
    pub fn new(model: impl Into<String>, messages: Vec<Arc<Message>>) -> Request {
        Request {
            model: model.into(),
            messages,
            ..Request::default()
        }
    }

    /// The same request with this system prompt.
    #[must_use]
    pub fn with_system_prompt(mut self, system_prompt: impl Into<String>) -> Request {
        self.system_prompt = system_prompt.into();
        self
    }

    /// The same request offering these tools.
    #[must_use]
    pub fn with_tools(mut self, tools: impl Into<Arc<[ToolDefinition]>>) -> Request {
        self.tools = tools.into();
        self
    }

    /// The same request with this thinking level.
    #[must_use]
    pub fn with_thinking(mut self, thinking: ThinkingLevel) -> Request {
        self.thinking = thinking;
        self
    }

    /// The same request asking for a structured answer.
    #[must_use]
    pub fn with_output(mut self, output: OutputRequest) -> Request {
        self.output = Some(output);
        self
    }

    /// The same request keeping its messages' JSON in `cache` (see [`BodyCache`]): hand
    /// the same cache to each call of one conversation.
    #[must_use]
    pub fn with_body_cache(mut self, cache: BodyCache) -> Request {
        self.body_cache = Some(cache);
        self
    }
}

/// How a reply ended, as the provider reports it: what the [`StreamEvent`]s cannot carry.
///
/// The reply's content and usage travel as events; the agent assembles the message from them
/// and takes from here only the stop reason, the server's id of the response and the model
/// the server says answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplyEnd {
    /// Why the reply ended. [`StopReason::Error`] ends the run with an error (a provider
    /// that can say why returns `Err` instead).
    pub stop_reason: StopReason,
    /// The server's id of the response (`chatcmpl-...`, `msg_...`), if it sent one.
    pub response_id: Option<String>,
    /// The model the server says produced the reply, when it names one; the message then
    /// carries it instead of the requested model.
    pub model: Option<String>,
}

impl ReplyEnd {
    /// A reply that ended with `stop_reason`, with no id and no model reported.
    pub fn new(stop_reason: StopReason) -> ReplyEnd {
        ReplyEnd {
            stop_reason,
            response_id: None,
            model: None,
        }
    }

    /// The same end, with the server's response id.
    #[must_use]
    pub fn response_id(mut self, id: impl Into<String>) -> ReplyEnd {
        self.response_id = Some(id.into());
        self
    }

    /// The same end, with the model the server reported.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> ReplyEnd {
        self.model = Some(model.into());
        self
    }
}

/// Where a provider hands each [`StreamEvent`]: returns `Err` when the reply must stop (the
/// agent's reply size limit was reached, for instance); the provider then returns that error
/// at once.
pub type OnEvent<'a> = dyn FnMut(StreamEvent) -> Result<(), Error> + 'a;

/// A model server: blocking and streaming.
///
/// # Contract
/// - `stream` is called on the agent's run thread and blocks it until the reply ends.
/// - It calls `on_event` for each piece as it arrives, in order, on the calling thread. The
///   agent alone assembles the reply from these events: text, thinking and its signature,
///   tool calls and their argument fragments, usage. What the events did not show is not in
///   the message, so a provider never builds the message itself.
/// - When `on_event` returns `Err`, the provider stops reading and returns that error
///   (`on_event(event)?` does it). The agent ignores any event after such a refusal and ends
///   the reply with its own error whatever the provider returns.
/// - It returns a [`ReplyEnd`]: the stop reason, and the response id and model when the
///   server reports them. On error it returns `Err`; the agent keeps what the events
///   delivered so far as the partial reply.
/// - It checks `cancel` while it waits on the network or sleeps before a retry, and returns
///   `Err(Error::Aborted)` promptly once it is cancelled.
/// - A panic inside it is caught by the agent and ends the run with an error.
///
/// ```
/// use pagent::CancelToken;
/// use pagent::llm::{OnEvent, Provider, ReplyEnd, Request, StreamEvent};
/// use pagent::{Agent, Error, StopReason};
///
/// /// Answers every request with the same words, streamed one by one.
/// struct Parrot;
///
/// impl Provider for Parrot {
///     fn stream(
///         &self,
///         _request: &Request,
///         cancel: &CancelToken,
///         on_event: &mut OnEvent<'_>,
///     ) -> Result<ReplyEnd, Error> {
///         for word in ["Hello", " there"] {
///             if cancel.is_cancelled() {
///                 return Err(Error::Aborted);
///             }
///             on_event(StreamEvent::text(word))?;
///         }
///         Ok(ReplyEnd::new(StopReason::Stop))
///     }
/// }
///
/// let agent = Agent::builder().provider(Parrot).build()?;
/// assert_eq!(agent.prompt("hi")?.text(), "Hello there");
/// # Ok::<(), pagent::Error>(())
/// ```
pub trait Provider: Send + Sync {
    /// Streams the reply to `request`.
    ///
    /// # Errors
    /// [`Error::Aborted`] once `cancel` is cancelled; the error `on_event` returned; HTTP,
    /// timeout, connection and stream errors as they happen; whatever the provider's own
    /// protocol reports.
    fn stream(
        &self,
        request: &Request,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, Error>;

    /// A short name for logs and `Debug` (`"openai"`, `"anthropic"`, `"faux"`).
    fn name(&self) -> &str {
        "provider"
    }

    /// Checks the provider's own configuration, without any network: an HTTP provider's
    /// base URL (scheme, host, port). [`AgentBuilder::build`](crate::AgentBuilder::build)
    /// calls it once and fails with its error, so a mistake shows when the agent is made,
    /// not at the first prompt. The default accepts everything.
    ///
    /// # Errors
    /// [`Error::Config`] saying what is wrong.
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }

    /// The host and port the provider's requests go to, for traces: the `server.address`
    /// and `server.port` of a model call's span (feature `tracing`). The HTTP providers
    /// give their base URL's; defaults to `None` (a provider without a server, such as
    /// [`Faux`]).
    fn server_address(&self) -> Option<ServerAddress> {
        None
    }

    /// The context window of `model` in tokens, as the server reports it (llama.cpp's
    /// `/props`, vLLM's `/v1/models`); `None` when it does not say, or asking failed. The
    /// agent asks once per model, on the run thread, only when its context policy needs the
    /// window and neither the builder nor the table of known models
    /// ([`context::known_window`](crate::context::known_window)) gives it. It may block on
    /// the network and must honour `cancel`. Defaults to `None`.
    fn context_window(&self, model: &str, cancel: &CancelToken) -> Option<u64> {
        let _ = (model, cancel);
        None
    }

    /// A counter of the server's own token counts, when it has one (llama.cpp's
    /// `/tokenize`, Anthropic's `count_tokens`): the agent asks it for an exact count of a
    /// request when a decision of its context policy is near (see [`TokenCounter`]).
    /// Defaults to `None`.
    fn token_counter(&self) -> Option<Arc<dyn TokenCounter>> {
        None
    }
}

/// Where a provider's requests go: a host (a domain name, or an IP address without
/// brackets) and a port. See [`Provider::server_address`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerAddress {
    /// The host, as the URL names it.
    pub host: String,
    /// The port, the scheme's default when the URL writes none.
    pub port: u16,
}

impl ServerAddress {
    /// The address `host`:`port` (brackets around an IPv6 host are removed).
    pub fn new(host: impl Into<String>, port: u16) -> ServerAddress {
        let host = host.into();
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(inner) => inner.to_owned(),
            None => host,
        };
        ServerAddress { host, port }
    }
}

impl<P: Provider + ?Sized> Provider for std::sync::Arc<P> {
    fn stream(
        &self,
        request: &Request,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, Error> {
        (**self).stream(request, cancel, on_event)
    }

    fn name(&self) -> &str {
        (**self).name()
    }

    fn check(&self) -> Result<(), Error> {
        (**self).check()
    }

    fn server_address(&self) -> Option<ServerAddress> {
        (**self).server_address()
    }

    fn context_window(&self, model: &str, cancel: &CancelToken) -> Option<u64> {
        (**self).context_window(model, cancel)
    }

    fn token_counter(&self) -> Option<Arc<dyn TokenCounter>> {
        (**self).token_counter()
    }
}
