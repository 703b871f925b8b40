//! The texts of the errors that leave an HTTP provider: the server's own message picked
//! from an error body or an in-stream error, the API key scrubbed from every text, each text
//! cut to a limit (in this order, so a cut never leaves a part of the key), and the note of
//! how many attempts were made.

use super::StreamEvent;
use crate::Error;

/// The most of an error body's message put into an error message.
pub(super) const ERROR_MESSAGE_LIMIT: usize = 1000;
/// The cap on every text of an error that leaves a provider: room for a message cut at
/// [`ERROR_MESSAGE_LIMIT`] and the notes appended to it (the request, the attempts).
pub(super) const FINAL_MESSAGE_LIMIT: usize = 4 * ERROR_MESSAGE_LIMIT;

/// The provider's own message from an error body: `error.message` (OpenAI, Anthropic,
/// llama.cpp), a string `error`, `message` or `detail`, else the body itself. Not cut: cut
/// it with [`clip`], which removes the key first.
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
    message
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
    // Not cut here: `Endpoint::stream` removes the key and then cuts (`scrub_error`).
    Error::Api { kind, message }
}

/// `text` without the key, then cut to `limit` bytes on a character boundary: in this order,
/// so that a cut can never leave a part of the key behind.
pub(crate) fn clip(text: String, secret: Option<&str>, limit: usize) -> String {
    truncate(scrub(text, secret), limit)
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

/// `e` with the key scrubbed from every text it holds, then each text cut to
/// [`FINAL_MESSAGE_LIMIT`] (texts built here are shorter already; in-stream errors are not).
pub(super) fn scrub_error(mut e: Error, secret: Option<&str>) -> Error {
    let texts = match &mut e {
        Error::Api { kind, message } => vec![kind, message],
        Error::ContentType {
            content_type,
            message,
        } => vec![content_type, message],
        Error::Http { message, .. }
        | Error::NothingToContinue(message)
        | Error::Config(message)
        | Error::NotConfigured(message)
        | Error::Connection(message)
        | Error::Stream(message)
        | Error::Provider(message)
        | Error::Wire(message)
        | Error::Io { message, .. }
        | Error::Panic { message, .. } => vec![message],
        Error::Busy
        | Error::Aborted
        | Error::Timeout(_)
        | Error::ScriptExhausted
        | Error::ReplyTooLarge { .. } => vec![],
    };
    for text in texts {
        *text = clip(std::mem::take(text), secret, FINAL_MESSAGE_LIMIT);
    }
    e
}

/// `event` with the key scrubbed from the error text of a retry (built redacted already:
/// see `HttpClient::open`; this is the second line of defence).
pub(super) fn scrub_event(event: StreamEvent, secret: Option<&str>) -> StreamEvent {
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
pub(super) fn gave_up(error: Error, attempts: u32) -> Error {
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
        let long = clip(
            error_message(500, "é".repeat(2000).as_bytes()),
            None,
            ERROR_MESSAGE_LIMIT,
        );
        assert!(long.ends_with("...") && long.len() <= ERROR_MESSAGE_LIMIT + 3);
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
    fn a_cut_never_leaves_a_part_of_the_key() {
        let key = "sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        for offset in 0..40 {
            let text = format!("{}{key}{}", "x".repeat(offset), "y".repeat(40));
            for limit in 0..text.len() {
                let cut = clip(text.clone(), Some(key), limit);
                assert!(!cut.contains("sk-A"), "{offset} {limit}: {cut}");
                assert!(!cut.contains("WXYZ"), "{offset} {limit}: {cut}");
            }
        }
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
