//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

use crate::agent::RunResult;
use crate::event::RunStopReason;
use crate::kind::ErrorKind;

/// Everything that can go wrong in pagent.
///
/// `Display` is lowercase without a final period ("http status 429: rate limited"), so it
/// composes into larger messages. Decide on [`Error::kind`] (an [`ErrorKind`]: auth, rate
/// limited, timeout and its phase...) or the predicates ([`Error::is_retryable`],
/// [`Error::is_aborted`], [`Error::status`]) rather than on the text.
///
/// # A failed run
/// [`Agent::prompt`](crate::Agent::prompt) and [`Agent::continue_run`](crate::Agent::continue_run)
/// return a [`RunError`]: this error together with the [`RunResult`] of what the run produced
/// before it failed. `?` turns it into an `Error` (dropping the result), so
/// `agent.prompt("..")?` works in a function returning `Result<_, pagent::Error>`:
///
/// ```
/// use pagent::llm::{Faux, FauxReply};
/// use pagent::{Agent, Error, ErrorKind};
///
/// fn ask(agent: &Agent) -> Result<String, Error> {
///     Ok(agent.prompt("Hello")?.text())
/// }
///
/// let agent = Agent::builder()
///     .provider(Faux::default().reply(FauxReply::fail("out of tokens")))
///     .build()?;
/// let error = ask(&agent).unwrap_err();
/// assert_eq!(error, Error::Provider("out of tokens".into()));
/// assert_eq!(error.kind(), ErrorKind::Provider);
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `prompt` or `continue_run` was called while a run is active, or `reset` or
    /// `replace_messages`, which need an idle agent.
    Busy,
    /// (`pagent::redis`, feature `redis`) A worker lost a conversation's lease (it was
    /// paused longer than the lease): another worker runs the conversation now, and nothing
    /// more of this run was written.
    LeaseLost,
    /// (`pagent::redis`, feature `redis`) A follower of an event stream fell behind it: the
    /// stream no longer holds entries it had not read yet (trimmed to the stream's cap, or
    /// lost with the server's data), so folding on would show a wrong state. Resynchronize
    /// from the store (`RemoteMirror::resync`).
    Behind {
        /// How many entries it missed, when that is known.
        missed: Option<u64>,
        /// What the stream holds now, and the last entry the follower read.
        message: String,
    },
    /// `continue_run` found nothing to continue from.
    NothingToContinue(String),
    /// The agent or a provider is not configured right (a missing provider, a bad URL...).
    Config(String),
    /// Nothing is configured where pagent looked: [`crate::llm::from_env`] (or a provider's
    /// `from_env`) found none of its variables set. The text says what to set. Distinct from
    /// [`Error::Config`] so a program can fall back to something else (see
    /// [`Error::is_not_configured`] and [`crate::llm::from_env_or`]).
    NotConfigured(String),
    /// The run, or a provider call, was aborted.
    Aborted,
    /// The server answered with an HTTP error status, or with a redirect (3xx), which is
    /// never followed (see [`crate::llm`]).
    Http {
        /// The HTTP status code.
        status: u16,
        /// The provider's own error message (or the body when it had none, cut to 1,000
        /// bytes after the API key was removed), then the request in parentheses: the method
        /// and the URL tried (scheme, host, port, path; never a query string), as in
        /// `Not Found (POST http://127.0.0.1:8080/v1/chat/completions)`. For a redirect it
        /// says where the `Location` points, origin and path without the query string:
        /// `redirected to https://elsewhere.example:443/v1, not followed: ..`.
        message: String,
        /// How long the server asked us to wait before trying again, if it said.
        retry_after: Option<Duration>,
    },
    /// No answer in time.
    Timeout(TimeoutPhase),
    /// The connection failed or dropped. The text names the request (method and URL).
    Connection(String),
    /// The server answered a streamed request with something other than an event stream
    /// (an HTML error page, plain JSON): nothing of it is a reply.
    ContentType {
        /// The `Content-Type` the server sent (empty when it sent none).
        content_type: String,
        /// The request (method and URL) and the start of the body, secrets removed.
        message: String,
    },
    /// The stream broke the provider's protocol: malformed JSON, a stream that ends before
    /// its `finish_reason` (or `message_stop`), invalid UTF-8, an event over the size limit.
    Stream(String),
    /// The provider reported an error inside a stream that had started (an `error` event or
    /// object): overloaded, a server fault mid-reply... What streamed before is kept.
    Api {
        /// The provider's error type or code (`overloaded_error`, `server_error`...).
        kind: String,
        /// The provider's own message.
        message: String,
    },
    /// A provider failed in a way that is neither HTTP nor the stream (the scripted provider's
    /// scripted errors, for instance).
    Provider(String),
    /// The scripted provider was asked for a reply it does not have.
    ScriptExhausted,
    /// A reply grew past the agent's size limit (`AgentBuilder::max_reply_bytes`), counted
    /// over its text, thinking and tool-call arguments. The reply was ended there; what
    /// arrived before the limit is kept. Not retryable as is: the same request would likely
    /// grow as large again.
    ReplyTooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// A wire line could not be decoded; the text names the problem.
    Wire(String),
    /// Content the provider (or the model behind it, as the provider was configured) cannot
    /// take: an image for a text-only model, a document by URL where only inline documents
    /// go, a media type the API refuses. Found before the request is sent; the text names
    /// the message and the part. Also a file that is not the kind of content asked for
    /// ([`Image::load`](crate::Image::load)).
    UnsupportedContent(String),
    /// The run's structured answer did not match its [`OutputSchema`](crate::OutputSchema)
    /// once the repair turns were spent (see
    /// [`AgentBuilder::output_repairs`](crate::AgentBuilder::output_repairs)), or the run
    /// ended without an answer ([`Agent::prompt_as`](crate::Agent::prompt_as) on a run that
    /// stopped at `max_turns`).
    InvalidOutput {
        /// What is wrong with the last answer (as the repair turns told the model), or why
        /// there is none.
        message: String,
        /// The last answer as the model wrote it (empty when there is none).
        raw: String,
    },
    /// Reading or writing a file or stream failed.
    Io {
        /// The kind of the underlying [`std::io::Error`] (`NotFound`, `BrokenPipe`...), kept so
        /// code can react to it without reading the text; see also [`Error::io_kind`].
        kind: std::io::ErrorKind,
        /// The underlying error's text, sometimes with what was being done.
        message: String,
    },
    /// Code that must succeed for the run to go on panicked: the `before_turn` or
    /// `transform_context` hook, the definition of a tool a hook put in place, the provider,
    /// or the agent loop itself. Tool code that panics does not end the run: its call gets an
    /// error result instead.
    Panic {
        /// Whose code panicked: `"the before_turn hook"`, `"the transform_context hook"`,
        /// `"the provider"`, `"the agent loop"`...
        source: &'static str,
        /// The panic's message.
        message: String,
    },
}

/// The phase of a request that ran out of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimeoutPhase {
    /// Opening the connection: the TCP connect and, for `https`, the TLS handshake.
    Connect,
    /// Waiting for the reply to start: from sending the request to the first event of the
    /// stream (keep-alive comments do not count).
    FirstByte,
    /// Waiting for the next chunk: between two reads of the body, and between the
    /// response headers and the first body byte.
    Idle,
    /// The whole run took longer than its `run_timeout`.
    Run,
}

impl Error {
    /// True for failures worth trying again: HTTP 408, 409, 429 and 5xx, connection
    /// failures and connect timeouts.
    ///
    /// A first-byte timeout is not: the server took the request and stayed silent for the
    /// whole first-byte window (minutes, by default), so sending it again would double the
    /// wait and likely the server's work. An idle timeout comes after the reply started, when
    /// nothing is retried anyway.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Http { status, .. } => matches!(status, 408 | 409 | 429 | 500..=599),
            Error::Timeout(TimeoutPhase::Connect) | Error::Connection(_) => true,
            _ => false,
        }
    }

    /// True for [`Error::NotConfigured`]: the environment names no provider, the cue to fall
    /// back to another one (an offline demo, a default server).
    pub fn is_not_configured(&self) -> bool {
        matches!(self, Error::NotConfigured(_))
    }

    /// The [`std::io::ErrorKind`] of an [`Error::Io`] (`NotFound` for a missing session file,
    /// `BrokenPipe` for a wire client that went away...); `None` for every other error.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            Error::Io { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// True when the request was larger than the model's context window, as OpenAI,
    /// Anthropic, llama.cpp, vLLM and Ollama word it: the cue to compact or prune the
    /// transcript (in `transform_context`) rather than to retry as is.
    pub fn is_context_overflow(&self) -> bool {
        let message = match self {
            Error::Http { message, .. } | Error::Api { message, .. } => message.to_lowercase(),
            _ => return false,
        };
        [
            "context size",
            "context length",
            "context window",
            "context_length_exceeded",
            "prompt is too long",
            "too many tokens",
            "maximum context",
        ]
        .iter()
        .any(|cue| message.contains(cue))
    }

    /// True when the run or call was aborted.
    pub fn is_aborted(&self) -> bool {
        matches!(self, Error::Aborted)
    }

    /// True when user code (a hook, a tool's definition) panicked: [`Error::Panic`].
    pub fn is_panic(&self) -> bool {
        matches!(self, Error::Panic { .. })
    }

    /// The HTTP status, for HTTP errors.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Http { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Busy => f.write_str("a run is already active"),
            Error::LeaseLost => f.write_str("the conversation's lease was lost to another worker"),
            Error::Behind {
                missed: Some(n),
                message,
            } => write!(f, "fell behind the stream by {n} entries: {message}"),
            Error::Behind { message, .. } => write!(f, "fell behind the stream: {message}"),
            Error::NothingToContinue(why) => write!(f, "nothing to continue: {why}"),
            Error::Config(why) => write!(f, "configuration: {why}"),
            Error::NotConfigured(why) => write!(f, "not configured: {why}"),
            Error::Aborted => f.write_str("aborted"),
            Error::Http {
                status, message, ..
            } => write!(f, "http status {status}: {message}"),
            Error::Timeout(phase) => write!(f, "timed out {phase}"),
            Error::Connection(why) => write!(f, "connection failed: {why}"),
            Error::ContentType {
                content_type,
                message,
            } => write!(
                f,
                "unexpected content type `{content_type}` (expected text/event-stream): {message}"
            ),
            Error::Stream(why) => write!(f, "malformed stream: {why}"),
            Error::Api { kind, message } => write!(f, "provider reported {kind}: {message}"),
            Error::Provider(why) => write!(f, "provider error: {why}"),
            Error::ScriptExhausted => f.write_str("the scripted provider has no reply left"),
            Error::ReplyTooLarge { limit } => {
                write!(f, "the reply grew past the limit of {limit} bytes")
            }
            Error::Wire(why) => write!(f, "wire: {why}"),
            Error::UnsupportedContent(why) => write!(f, "unsupported content: {why}"),
            Error::InvalidOutput { message, .. } => write!(f, "invalid output: {message}"),
            Error::Io { message, .. } => write!(f, "io: {message}"),
            Error::Panic { source, message } => write!(f, "{source} panicked: {message}"),
        }
    }
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Connect => "connecting",
            TimeoutPhase::FirstByte => "waiting for the first byte",
            TimeoutPhase::Idle => "waiting for the next chunk",
            TimeoutPhase::Run => "at the run deadline",
        })
    }
}

impl std::error::Error for Error {}

/// An I/O error becomes [`Error::Io`], keeping its [`std::io::ErrorKind`] and its text.
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// A run that failed: the [`Error`], and the [`RunResult`] of everything the run produced
/// before it failed. Returned by [`Agent::prompt`](crate::Agent::prompt) and
/// [`Agent::continue_run`](crate::Agent::continue_run).
///
/// The result holds the messages the run appended (the prompt, the finished turns, and the
/// reply that failed, ended with `StopReason::Error` and holding what streamed before the
/// failure), the usage of the run, and `RunStopReason::Error`. A call refused before the run
/// started ([`Error::Busy`], [`Error::NothingToContinue`]) has an empty result: no message,
/// no usage, and no event was emitted.
///
/// `?` converts it into the [`Error`] alone (`From<RunError> for Error`), as
/// `tempfile::PersistError` converts into the `io::Error` it carries. `Display` is the
/// error's. Match on [`RunError::kind`] or on [`RunError::error`]; take the parts with
/// [`RunError::into_parts`].
///
/// ```
/// use pagent::llm::{Faux, FauxReply};
/// use pagent::{Agent, ErrorKind};
///
/// let agent = Agent::builder()
///     .provider(Faux::default().reply(FauxReply::fail("out of tokens")))
///     .build()?;
/// match agent.prompt("Hello") {
///     Ok(result) => println!("{}", result.text()),
///     Err(failed) => {
///         assert_eq!(failed.kind(), ErrorKind::Provider);
///         // The prompt and the failed reply are in the transcript and in the result.
///         assert_eq!(failed.result().messages.len(), 2);
///     }
/// }
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RunError {
    // Boxed: a `Result<RunResult, RunError>` stays the size of a `RunResult`.
    inner: Box<(Error, RunResult)>,
}

impl RunError {
    pub(crate) fn new(error: Error, result: RunResult) -> RunError {
        RunError {
            inner: Box::new((error, result)),
        }
    }

    /// A call refused before a run started: an empty result.
    pub(crate) fn refused(error: Error) -> RunError {
        RunError::new(
            error,
            RunResult {
                messages: Vec::new(),
                stop_reason: RunStopReason::Error,
                usage: Default::default(),
                output: None,
            },
        )
    }

    /// Why the run failed.
    pub fn error(&self) -> &Error {
        &self.inner.0
    }

    /// The machine-readable kind of the error (as [`Error::kind`]).
    pub fn kind(&self) -> ErrorKind {
        self.inner.0.kind()
    }

    /// What the run produced before it failed: its messages (the failed reply last), usage
    /// and stop reason (`RunStopReason::Error`).
    pub fn result(&self) -> &RunResult {
        &self.inner.1
    }

    /// The error, without the result.
    pub fn into_error(self) -> Error {
        self.inner.0
    }

    /// The result, without the error.
    pub fn into_result(self) -> RunResult {
        self.inner.1
    }

    /// The error and the result.
    pub fn into_parts(self) -> (Error, RunResult) {
        *self.inner
    }
}

impl From<RunError> for Error {
    fn from(e: RunError) -> Error {
        e.into_error()
    }
}

impl fmt::Display for RunError {
    /// The error's `Display`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.0.fmt(f)
    }
}

impl std::error::Error for RunError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_stays_small() {
        // Results of every call carry it; keep it within a few words.
        assert!(
            std::mem::size_of::<Error>() <= 64,
            "{}",
            std::mem::size_of::<Error>()
        );
        // Boxed, so that a failed run costs a `Result<RunResult, _>` nothing.
        assert_eq!(
            std::mem::size_of::<RunError>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn display_is_lowercase_without_period() {
        let e = Error::Http {
            status: 429,
            message: "rate limited".into(),
            retry_after: None,
        };
        assert_eq!(e.to_string(), "http status 429: rate limited");
        assert!(e.is_retryable());
        assert_eq!(
            Error::Timeout(TimeoutPhase::Idle).to_string(),
            "timed out waiting for the next chunk"
        );
        assert!(!Error::Stream("x".into()).is_retryable());
        assert!(Error::Timeout(TimeoutPhase::Connect).is_retryable());
        assert!(!Error::Timeout(TimeoutPhase::FirstByte).is_retryable());
        assert!(Error::Aborted.is_aborted());
        assert_eq!(
            Error::Timeout(TimeoutPhase::Run).to_string(),
            "timed out at the run deadline"
        );
        assert!(!Error::Timeout(TimeoutPhase::Run).is_retryable());
        let api = Error::Api {
            kind: "overloaded_error".into(),
            message: "Overloaded".into(),
        };
        assert_eq!(
            api.to_string(),
            "provider reported overloaded_error: Overloaded"
        );
        assert!(!api.is_retryable());
    }

    #[test]
    fn io_error_keeps_its_kind() {
        let e = Error::from(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no such file",
        ));
        assert_eq!(e.io_kind(), Some(std::io::ErrorKind::NotFound));
        assert_eq!(e.to_string(), "io: no such file");
        assert_eq!(Error::Aborted.io_kind(), None);
    }

    #[test]
    fn context_overflow_is_recognised_in_each_dialect() {
        let http = |message: &str| Error::Http {
            status: 400,
            message: message.into(),
            retry_after: None,
        };
        for m in [
            "request (5033 tokens) exceeds the available context size (4096 tokens), try increasing it",
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
            "prompt is too long: 208310 tokens > 200000 maximum",
        ] {
            assert!(http(m).is_context_overflow(), "{m}");
        }
        assert!(!http("invalid model").is_context_overflow());
        assert!(!Error::Aborted.is_context_overflow());
    }
}
