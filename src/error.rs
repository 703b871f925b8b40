//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

/// Everything that can go wrong in pagent.
///
/// `Display` is lowercase without a final period ("http status 429: rate limited"), so it
/// composes into larger messages. Use the predicates ([`Error::is_retryable`],
/// [`Error::is_aborted`], [`Error::status`]) rather than matching on text.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `prompt` or `continue_run` was called while a run is active.
    Busy,
    /// `continue_run` found nothing to continue from.
    NothingToContinue(String),
    /// The agent or a provider is not configured right (a missing provider, a bad URL...).
    Config(String),
    /// The run, or a provider call, was aborted.
    Aborted,
    /// The server answered with an HTTP error status.
    Http {
        /// The HTTP status code.
        status: u16,
        /// The provider's own error message, or the body when it had none.
        message: String,
        /// How long the server asked us to wait before trying again, if it said.
        retry_after: Option<Duration>,
    },
    /// No answer in time.
    Timeout(TimeoutPhase),
    /// The connection failed or dropped.
    Connection(String),
    /// The stream broke the provider's protocol: malformed JSON, a missing `finish_reason`,
    /// an `error` event in the stream, invalid UTF-8, an event over the size limit.
    Stream(String),
    /// A provider failed in a way that is neither HTTP nor the stream (the scripted provider's
    /// scripted errors, for instance).
    Provider(String),
    /// The scripted provider was asked for a reply it does not have.
    ScriptExhausted,
    /// A wire line could not be decoded; the text names the problem.
    Wire(String),
    /// Reading or writing a file or stream failed.
    Io(String),
}

/// The phase of a request that ran out of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimeoutPhase {
    /// Opening the connection.
    Connect,
    /// Waiting for the first byte of the response.
    FirstByte,
    /// Waiting for the next chunk of a stream that already started.
    Idle,
}

impl Error {
    /// True for failures worth trying again: HTTP 408, 409, 429 and 5xx, timeouts and
    /// connection failures.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Http { status, .. } => matches!(status, 408 | 409 | 429 | 500..=599),
            Error::Timeout(_) | Error::Connection(_) => true,
            _ => false,
        }
    }

    /// True when the run or call was aborted.
    pub fn is_aborted(&self) -> bool {
        matches!(self, Error::Aborted)
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
            Error::NothingToContinue(why) => write!(f, "nothing to continue: {why}"),
            Error::Config(why) => write!(f, "configuration: {why}"),
            Error::Aborted => f.write_str("aborted"),
            Error::Http {
                status, message, ..
            } => write!(f, "http status {status}: {message}"),
            Error::Timeout(phase) => write!(f, "timed out {phase}"),
            Error::Connection(why) => write!(f, "connection failed: {why}"),
            Error::Stream(why) => write!(f, "malformed stream: {why}"),
            Error::Provider(why) => write!(f, "provider error: {why}"),
            Error::ScriptExhausted => f.write_str("the scripted provider has no reply left"),
            Error::Wire(why) => write!(f, "wire: {why}"),
            Error::Io(why) => write!(f, "io: {why}"),
        }
    }
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Connect => "connecting",
            TimeoutPhase::FirstByte => "waiting for the first byte",
            TimeoutPhase::Idle => "waiting for the next chunk",
        })
    }
}

impl std::error::Error for Error {}

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
        assert!(Error::Aborted.is_aborted());
    }
}
