//! `ErrorKind` and `ErrorInfo`: what went wrong, in a form a program (a GUI, a wire client)
//! can act on without reading the message.

use serde::{Deserialize, Serialize};

use crate::error::{Error, TimeoutPhase};

/// The machine-readable kind of an [`Error`], from [`Error::kind`].
///
/// It is what a program decides on: ask for a new key (`Auth`), wait (`RateLimited`), compact
/// the transcript (`ContextOverflow`), report a bug (`Panic`)... It travels with the message
/// in [`ErrorInfo`]: in `AgentEvent::AgentEnd`, in `State::error_kind` and on the native wire,
/// so a listener, a snapshot reader and a wire client see the same kind as the caller of
/// `prompt`.
///
/// # Mapping
/// | `Error` | kind |
/// |---|---|
/// | `Http` whose message says the context window is exceeded ([`Error::is_context_overflow`]), whatever its status | `ContextOverflow` |
/// | `Http` 401, 403 | `Auth` |
/// | `Http` 429 | `RateLimited` |
/// | `Http` 408, 409, 5xx, and any status outside 300..=499 | `Server(Some(status))` |
/// | `Http` any other 4xx (400, 404, 405, 413, 422...), and a redirect (3xx, never followed: the base URL points at the wrong place) | `InvalidRequest(Some(status))` |
/// | `Api` (an error event inside a stream: overloaded, a server fault mid-reply) | `ContextOverflow` when its message says so, else `Server(None)` |
/// | `Config`, `NotConfigured`, `NothingToContinue` | `InvalidRequest(None)` |
/// | `Timeout(phase)` | `Timeout(phase)` |
/// | `Connection` | `Connection` |
/// | `Stream`, `ContentType`, `Behind` | `Stream` |
/// | `ReplyTooLarge` | `ReplyTooLarge` |
/// | `Aborted` | `Aborted` |
/// | `Busy`, `LeaseLost` | `Busy` |
/// | `Provider`, `ScriptExhausted` | `Provider` |
/// | `Panic` (a hook, a tool definition, the agent loop itself) | `Panic` |
/// | `Wire` | `Wire` |
/// | `Io` | `Io` |
///
/// New kinds may be added in a minor release (the enum is `#[non_exhaustive]`): match with a
/// `_` arm. The wire writes a kind with [`ErrorKind::as_str`] (see [`ErrorInfo`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The server refused the credentials: HTTP 401 or 403. A new key, not a retry.
    Auth,
    /// Too many requests: HTTP 429. Retry later (`Error::Http`'s `retry_after` says when, if
    /// the server said).
    RateLimited,
    /// No answer in time; the phase says which wait ran out.
    Timeout(TimeoutPhase),
    /// The connection could not be opened or dropped.
    Connection,
    /// The server failed: an HTTP 5xx (or 408, 409, or a status outside 4xx) with its status,
    /// or an error the provider reported inside a stream that had started (`None`).
    Server(Option<u16>),
    /// The request was larger than the model's context window: compact or prune the
    /// transcript rather than retry as is.
    ContextOverflow,
    /// The request or the configuration is wrong: an HTTP 4xx not named above or a redirect
    /// (3xx), with its status (400, 404, 422, 302...), or a configuration error, nothing to
    /// continue or content the provider cannot take (`None`).
    InvalidRequest(Option<u16>),
    /// The reply broke the provider's protocol: malformed JSON, a cut stream, a body that is
    /// not an event stream.
    Stream,
    /// The reply grew past the agent's `max_reply_bytes`.
    ReplyTooLarge,
    /// The run or the call was aborted.
    Aborted,
    /// A run is already active.
    Busy,
    /// A provider failed otherwise: a custom provider's error, the scripted provider's
    /// scripted failures.
    Provider,
    /// Code that had to succeed panicked: a hook, a tool definition, the agent loop.
    Panic,
    /// A wire line could not be decoded.
    Wire,
    /// Reading or writing a file or stream failed.
    Io,
    /// The run's structured answer did not match its schema after the repair turns, or
    /// there was none.
    InvalidOutput,
}

impl ErrorKind {
    /// The kind's snake_case name, as the wire writes it (`"rate_limited"`). The phase of a
    /// timeout and the status of a server or request error are not part of it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Auth => "auth",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Timeout(_) => "timeout",
            ErrorKind::Connection => "connection",
            ErrorKind::Server(_) => "server",
            ErrorKind::ContextOverflow => "context_overflow",
            ErrorKind::InvalidRequest(_) => "invalid_request",
            ErrorKind::Stream => "stream",
            ErrorKind::ReplyTooLarge => "reply_too_large",
            ErrorKind::Aborted => "aborted",
            ErrorKind::Busy => "busy",
            ErrorKind::Provider => "provider",
            ErrorKind::Panic => "panic",
            ErrorKind::Wire => "wire",
            ErrorKind::Io => "io",
            ErrorKind::InvalidOutput => "invalid_output",
        }
    }

    /// The HTTP status the kind carries (`Server`, `InvalidRequest`).
    pub fn status(self) -> Option<u16> {
        match self {
            ErrorKind::Server(status) | ErrorKind::InvalidRequest(status) => status,
            _ => None,
        }
    }

    fn of_http(status: u16) -> ErrorKind {
        match status {
            401 | 403 => ErrorKind::Auth,
            429 => ErrorKind::RateLimited,
            408 | 409 => ErrorKind::Server(Some(status)),
            300..=499 => ErrorKind::InvalidRequest(Some(status)),
            _ => ErrorKind::Server(Some(status)),
        }
    }
}

impl std::fmt::Display for ErrorKind {
    /// The name ([`ErrorKind::as_str`]), then the phase or status if any: `timeout
    /// (first_byte)`, `server (503)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())?;
        match self {
            ErrorKind::Timeout(phase) => write!(f, " ({})", phase_str(*phase)),
            _ => match self.status() {
                Some(status) => write!(f, " ({status})"),
                None => Ok(()),
            },
        }
    }
}

impl Error {
    /// The machine-readable kind of this error; see [`ErrorKind`] for the mapping.
    pub fn kind(&self) -> ErrorKind {
        if self.is_context_overflow() {
            return ErrorKind::ContextOverflow;
        }
        match self {
            Error::Busy | Error::LeaseLost => ErrorKind::Busy,
            Error::NothingToContinue(_)
            | Error::Config(_)
            | Error::NotConfigured(_)
            | Error::UnsupportedContent(_) => ErrorKind::InvalidRequest(None),
            Error::Aborted => ErrorKind::Aborted,
            Error::Http { status, .. } => ErrorKind::of_http(*status),
            Error::Timeout(phase) => ErrorKind::Timeout(*phase),
            Error::Connection(_) => ErrorKind::Connection,
            Error::ContentType { .. } | Error::Stream(_) | Error::Behind { .. } => {
                ErrorKind::Stream
            }
            Error::Api { .. } => ErrorKind::Server(None),
            Error::Provider(_) | Error::ScriptExhausted => ErrorKind::Provider,
            Error::ReplyTooLarge { .. } => ErrorKind::ReplyTooLarge,
            Error::Wire(_) => ErrorKind::Wire,
            Error::Io { .. } => ErrorKind::Io,
            Error::InvalidOutput { .. } => ErrorKind::InvalidOutput,
            Error::Panic { .. } => ErrorKind::Panic,
        }
    }
}

fn phase_str(phase: TimeoutPhase) -> &'static str {
    match phase {
        TimeoutPhase::Connect => "connect",
        TimeoutPhase::FirstByte => "first_byte",
        TimeoutPhase::Idle => "idle",
        TimeoutPhase::Run => "run",
    }
}

/// An error as data: its kind and its message, what `AgentEvent::AgentEnd` carries and the
/// native wire writes.
///
/// Made from an [`Error`] with `ErrorInfo::from(&error)`: the message is the error's
/// `Display`. Unlike [`Error`] it can be rebuilt from the wire, where it is the object
/// `{"kind":"<kind>","message":".."}`, plus `"phase"` (`"connect"`, `"first_byte"`, `"idle"`,
/// `"run"`) for a `timeout` and `"status"` (an HTTP status) for a `server` or
/// `invalid_request` error that has one, as in
/// `{"kind":"timeout","phase":"first_byte","message":"timed out waiting for the first byte"}`.
///
/// Decoding is strict: a missing `kind` or `message`, an unknown kind or phase, a `phase`
/// missing from a timeout or given to another kind, a `status` given to a kind without one or
/// outside 100..=599 are errors. Unknown members are ignored, as everywhere inside the wire's
/// `params`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "InfoRepr", try_from = "InfoRepr")]
#[non_exhaustive]
pub struct ErrorInfo {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// The error's message (its `Display`).
    pub message: String,
}

impl ErrorInfo {
    /// An `ErrorInfo` of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ErrorInfo {
        ErrorInfo {
            kind,
            message: message.into(),
        }
    }
}

impl From<&Error> for ErrorInfo {
    fn from(e: &Error) -> ErrorInfo {
        ErrorInfo::new(e.kind(), e.to_string())
    }
}

impl From<Error> for ErrorInfo {
    fn from(e: Error) -> ErrorInfo {
        ErrorInfo::from(&e)
    }
}

impl std::fmt::Display for ErrorInfo {
    /// The message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The wire shape of [`ErrorInfo`]: the kind flattened into `kind`, `phase` and `status`.
// Unknown members are ignored, as everywhere inside the wire's `params`, so a newer writer
// can add some.
#[derive(Clone, Serialize, Deserialize)]
struct InfoRepr {
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    message: String,
}

impl From<ErrorInfo> for InfoRepr {
    fn from(info: ErrorInfo) -> InfoRepr {
        let phase = match info.kind {
            ErrorKind::Timeout(phase) => Some(phase_str(phase).to_owned()),
            _ => None,
        };
        InfoRepr {
            kind: info.kind.as_str().to_owned(),
            phase,
            status: info.kind.status(),
            message: info.message,
        }
    }
}

impl TryFrom<InfoRepr> for ErrorInfo {
    type Error = String;

    fn try_from(r: InfoRepr) -> Result<ErrorInfo, String> {
        let kind = match r.kind.as_str() {
            "timeout" => {
                let phase = match r.phase.as_deref() {
                    Some("connect") => TimeoutPhase::Connect,
                    Some("first_byte") => TimeoutPhase::FirstByte,
                    Some("idle") => TimeoutPhase::Idle,
                    Some("run") => TimeoutPhase::Run,
                    Some(other) => return Err(format!("unknown timeout phase `{other}`")),
                    None => return Err("a timeout needs its `phase`".into()),
                };
                ErrorKind::Timeout(phase)
            }
            other if r.phase.is_some() => {
                return Err(format!("`phase` given to a `{other}` error"));
            }
            "server" | "invalid_request" => {
                if let Some(status) = r.status
                    && !(100..=599).contains(&status)
                {
                    return Err(format!("`status` {status} is not an HTTP status"));
                }
                if r.kind == "server" {
                    ErrorKind::Server(r.status)
                } else {
                    ErrorKind::InvalidRequest(r.status)
                }
            }
            other if r.status.is_some() => {
                return Err(format!("`status` given to a `{other}` error"));
            }
            "auth" => ErrorKind::Auth,
            "rate_limited" => ErrorKind::RateLimited,
            "connection" => ErrorKind::Connection,
            "context_overflow" => ErrorKind::ContextOverflow,
            "stream" => ErrorKind::Stream,
            "reply_too_large" => ErrorKind::ReplyTooLarge,
            "aborted" => ErrorKind::Aborted,
            "busy" => ErrorKind::Busy,
            "provider" => ErrorKind::Provider,
            "panic" => ErrorKind::Panic,
            "wire" => ErrorKind::Wire,
            "io" => ErrorKind::Io,
            "invalid_output" => ErrorKind::InvalidOutput,
            other => return Err(format!("unknown error kind `{other}`")),
        };
        Ok(ErrorInfo {
            kind,
            message: r.message,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn http(status: u16, message: &str) -> Error {
        Error::Http {
            status,
            message: message.into(),
            retry_after: Some(Duration::from_secs(1)),
        }
    }

    /// The table of [`ErrorKind`]'s docs, row by row.
    #[test]
    fn kind_mapping_table() {
        let overflow = "This model's maximum context length is 8192 tokens";
        let rows: Vec<(Error, ErrorKind)> = vec![
            (http(400, overflow), ErrorKind::ContextOverflow),
            (
                http(413, "prompt is too long: 9 tokens"),
                ErrorKind::ContextOverflow,
            ),
            (http(401, "bad key"), ErrorKind::Auth),
            (http(403, "forbidden"), ErrorKind::Auth),
            (http(429, "slow down"), ErrorKind::RateLimited),
            (http(408, "x"), ErrorKind::Server(Some(408))),
            (http(409, "x"), ErrorKind::Server(Some(409))),
            (http(500, "x"), ErrorKind::Server(Some(500))),
            (http(503, "x"), ErrorKind::Server(Some(503))),
            (http(302, "x"), ErrorKind::InvalidRequest(Some(302))),
            (http(400, "bad"), ErrorKind::InvalidRequest(Some(400))),
            (http(404, "Not Found"), ErrorKind::InvalidRequest(Some(404))),
            (http(422, "x"), ErrorKind::InvalidRequest(Some(422))),
            (
                Error::Api {
                    kind: "overloaded_error".into(),
                    message: "Overloaded".into(),
                },
                ErrorKind::Server(None),
            ),
            (
                Error::Api {
                    kind: "invalid_request_error".into(),
                    message: "prompt is too long: 208310 tokens > 200000 maximum".into(),
                },
                ErrorKind::ContextOverflow,
            ),
            (Error::Config("x".into()), ErrorKind::InvalidRequest(None)),
            (
                Error::NothingToContinue("x".into()),
                ErrorKind::InvalidRequest(None),
            ),
            (
                Error::Timeout(TimeoutPhase::Connect),
                ErrorKind::Timeout(TimeoutPhase::Connect),
            ),
            (
                Error::Timeout(TimeoutPhase::FirstByte),
                ErrorKind::Timeout(TimeoutPhase::FirstByte),
            ),
            (
                Error::Timeout(TimeoutPhase::Idle),
                ErrorKind::Timeout(TimeoutPhase::Idle),
            ),
            (
                Error::Timeout(TimeoutPhase::Run),
                ErrorKind::Timeout(TimeoutPhase::Run),
            ),
            (Error::Connection("refused".into()), ErrorKind::Connection),
            (Error::Stream("x".into()), ErrorKind::Stream),
            (
                Error::ContentType {
                    content_type: "text/html".into(),
                    message: "x".into(),
                },
                ErrorKind::Stream,
            ),
            (Error::ReplyTooLarge { limit: 1 }, ErrorKind::ReplyTooLarge),
            (Error::Aborted, ErrorKind::Aborted),
            (Error::Busy, ErrorKind::Busy),
            (Error::Provider("x".into()), ErrorKind::Provider),
            (Error::ScriptExhausted, ErrorKind::Provider),
            (
                Error::Panic {
                    source: "the before_turn hook",
                    message: "x".into(),
                },
                ErrorKind::Panic,
            ),
            (Error::Wire("x".into()), ErrorKind::Wire),
            (
                Error::Io {
                    kind: std::io::ErrorKind::NotFound,
                    message: "x".into(),
                },
                ErrorKind::Io,
            ),
            (
                Error::NotConfigured("x".into()),
                ErrorKind::InvalidRequest(None),
            ),
            (
                Error::InvalidOutput {
                    message: "x".into(),
                    raw: "{".into(),
                },
                ErrorKind::InvalidOutput,
            ),
        ];
        for (error, kind) in rows {
            assert_eq!(error.kind(), kind, "{error:?}");
            // Every kind goes over the wire and back.
            let info = ErrorInfo::from(&error);
            let json = serde_json::to_string(&info).unwrap();
            assert_eq!(
                serde_json::from_str::<ErrorInfo>(&json).unwrap(),
                info,
                "{json}"
            );
        }
    }

    #[test]
    fn error_info_json_is_exact() {
        let cases = [
            (
                ErrorInfo::from(Error::Timeout(TimeoutPhase::FirstByte)),
                r#"{"kind":"timeout","phase":"first_byte","message":"timed out waiting for the first byte"}"#,
            ),
            (
                ErrorInfo::from(http(503, "busy")),
                r#"{"kind":"server","status":503,"message":"http status 503: busy"}"#,
            ),
            (
                ErrorInfo::from(http(401, "bad key")),
                r#"{"kind":"auth","message":"http status 401: bad key"}"#,
            ),
            (
                ErrorInfo::from(Error::Config("no provider".into())),
                r#"{"kind":"invalid_request","message":"configuration: no provider"}"#,
            ),
        ];
        for (info, json) in cases {
            assert_eq!(serde_json::to_string(&info).unwrap(), json);
            assert_eq!(serde_json::from_str::<ErrorInfo>(json).unwrap(), info);
        }
    }

    #[test]
    fn error_info_decoding_is_strict() {
        for bad in [
            r#"{"kind":"timeout","message":"x"}"#,
            r#"{"kind":"timeout","phase":"later","message":"x"}"#,
            r#"{"kind":"auth","phase":"connect","message":"x"}"#,
            r#"{"kind":"auth","status":401,"message":"x"}"#,
            r#"{"kind":"server","status":700,"message":"x"}"#,
            r#"{"kind":"teapot","message":"x"}"#,
            r#"{"kind":"auth"}"#,
            r#"{"message":"x"}"#,
            r#"{"kind":"server","status":"503","message":"x"}"#,
        ] {
            assert!(serde_json::from_str::<ErrorInfo>(bad).is_err(), "{bad}");
        }
        let newer = r#"{"kind":"auth","message":"x","retry_after_ms":1}"#;
        assert_eq!(
            serde_json::from_str::<ErrorInfo>(newer).unwrap(),
            ErrorInfo::new(ErrorKind::Auth, "x")
        );
    }

    #[test]
    fn kind_display_names_phase_and_status() {
        assert_eq!(
            ErrorKind::Timeout(TimeoutPhase::FirstByte).to_string(),
            "timeout (first_byte)"
        );
        assert_eq!(ErrorKind::Server(Some(503)).to_string(), "server (503)");
        assert_eq!(ErrorKind::RateLimited.to_string(), "rate_limited");
    }
}
