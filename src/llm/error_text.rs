//! The texts of the errors that leave an HTTP provider: the server's own message picked
//! from an error body or an in-stream error, the API key scrubbed from every text, each text
//! cut to a limit (in this order, so a cut never leaves a part of the key), and the note of
//! how many attempts were made.
//!
//! # Redaction
//! A text that leaves a provider never holds [`KEY_RUN`] consecutive bytes of the API key:
//! every run of the text made of pieces of the key that long is replaced by `<redacted>`.
//! Whatever cut a text (a read limit in the middle of a body, a message limit, a broken
//! connection, a limit of ureq's), what is left of a key is too short to be a run, so no
//! cut can leave a usable part of it. On top of that, a body whose read stopped before its
//! end loses the start of the key it ends with from [`MIN_KEY_PREFIX`] bytes on.
//! [`scrub_error`] and [`scrub_event`] apply the rule to every error and retry notice on
//! its way out.

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
pub(crate) fn error_message(status: u16, text: &str) -> String {
    let json: Option<serde_json::Value> = serde_json::from_str(text).ok();
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
pub(crate) fn clip(text: String, secret: Option<&Secrets<'_>>, limit: usize) -> String {
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
/// The shortest run of the key's bytes that is removed wherever it shows (a key shorter
/// than this is removed where it shows whole). Eight: no 8 characters of a key leave a
/// provider, while the words around it (shorter pieces of a key prefix such as `sk-`) stay.
pub(crate) const KEY_RUN: usize = 8;
/// The shortest start of the key that is removed from the end of a body cut short.
const MIN_KEY_PREFIX: usize = 4;

/// What must never show in a text that leaves a provider: the API key, and the values of the
/// custom headers named like a credential (see [`is_credential_header`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Secrets<'a> {
    keys: Vec<&'a str>,
}

impl<'a> Secrets<'a> {
    /// The key `key` and the credentials among `headers`. A header value with a scheme
    /// (`Bearer <token>`) counts by its credential, the last word: the scheme is a word of
    /// the protocol, and a key is matched in runs of its own bytes.
    pub(crate) fn new(key: Option<&'a str>, headers: &'a [(String, String)]) -> Secrets<'a> {
        let credentials = headers
            .iter()
            .filter(|(name, _)| is_credential_header(name))
            .map(|(_, value)| value.trim().rsplit(' ').next().unwrap_or(""));
        Secrets {
            keys: key
                .into_iter()
                .chain(credentials)
                .filter(|k| !k.is_empty())
                .collect(),
        }
    }

    /// These secrets and `more` (the credentials a base URL holds, say).
    pub(crate) fn and(mut self, more: impl IntoIterator<Item = &'a str>) -> Secrets<'a> {
        self.keys.extend(more.into_iter().filter(|k| !k.is_empty()));
        self
    }

    /// Only this key.
    #[cfg(test)]
    pub(crate) fn key(key: &'a str) -> Secrets<'a> {
        Secrets::new(Some(key), &[])
    }
}

/// True for a header whose value is a credential, by its name: `authorization`, `api-key`,
/// `x-api-key`, `x-auth-token`, `cookie`, `ocp-apim-subscription-key`... (any name holding
/// `auth`, `key`, `token`, `secret`, `password`, `cookie`, `credential`, `session` or
/// `signature`, in any case).
pub(crate) fn is_credential_header(name: &str) -> bool {
    const WORDS: [&str; 10] = [
        "auth",
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "cookie",
        "credential",
        "session",
        "signature",
    ];
    let name = name.to_ascii_lowercase();
    WORDS.iter().any(|word| name.contains(word))
}

/// `text` without the secrets: every run of [`KEY_RUN`] or more bytes made of pieces of a
/// key (the key whole, a cut part of it, its characters echoed in a longer token) replaced
/// by `<redacted>`.
pub(crate) fn scrub(text: String, secret: Option<&Secrets<'_>>) -> String {
    let Some(secrets) = secret else { return text };
    secrets
        .keys
        .iter()
        .fold(text, |text, key| scrub_key(text, key))
}

fn scrub_key(text: String, key: &str) -> String {
    if key.is_empty() {
        return text;
    }
    let spans = key_runs(text.as_bytes(), key.as_bytes());
    if spans.is_empty() {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in spans {
        // A key that is not ASCII may match from inside a character: the whole characters.
        let start = floor_char_boundary(&text, start);
        let end = ceil_char_boundary(&text, end);
        if start < at {
            at = at.max(end);
            continue;
        }
        out.push_str(&text[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// The spans of `text` (start, end) covered by windows of `KEY_RUN` bytes (or the whole key,
/// when shorter) that occur in the key, merged where they touch or overlap.
fn key_runs(text: &[u8], key: &[u8]) -> Vec<(usize, usize)> {
    let width = KEY_RUN.min(key.len());
    if text.len() < width {
        return Vec::new();
    }
    let windows: std::collections::HashSet<&[u8]> = key.windows(width).collect();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for (i, window) in text.windows(width).enumerate() {
        if !windows.contains(window) {
            continue;
        }
        match spans.last_mut() {
            Some((_, end)) if *end >= i => *end = i + width,
            _ => spans.push((i, i + width)),
        }
    }
    spans
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The text of the bytes a body read gave, without the key (see [`scrub`]). When the read
/// stopped before the body's end (`cut`: a limit, a timeout, a broken connection), a start
/// of the key of [`MIN_KEY_PREFIX`] bytes or more at the very end goes too: the rest of the
/// key was in the part not read.
pub(crate) fn scrub_read(bytes: &[u8], cut: bool, secret: Option<&Secrets<'_>>) -> String {
    let keys = secret.map_or(&[][..], |s| &s.keys[..]);
    // The longest start of any key the bytes end with.
    let prefix = keys
        .iter()
        .filter(|_| cut)
        .filter_map(|key| {
            let key = key.as_bytes();
            (MIN_KEY_PREFIX..key.len())
                .rev()
                .find(|&n| bytes.ends_with(&key[..n]))
        })
        .max();
    let text = match prefix {
        Some(n) => String::from_utf8_lossy(&bytes[..bytes.len() - n]).into_owned() + REDACTED,
        None => String::from_utf8_lossy(bytes).into_owned(),
    };
    scrub(text, secret)
}

/// `e` with the key scrubbed from every text it holds, then each text cut to
/// [`FINAL_MESSAGE_LIMIT`] (texts built here are shorter already; in-stream errors are not).
pub(crate) fn scrub_error(mut e: Error, secret: Option<&Secrets<'_>>) -> Error {
    let texts = match &mut e {
        Error::Api { kind, message } => vec![kind, message],
        Error::ContentType {
            content_type,
            message,
        } => vec![content_type, message],
        Error::InvalidOutput { message, raw } => vec![message, raw],
        Error::Http { message, .. }
        | Error::NothingToContinue(message)
        | Error::Config(message)
        | Error::NotConfigured(message)
        | Error::Connection(message)
        | Error::Stream(message)
        | Error::Provider(message)
        | Error::Wire(message)
        | Error::UnsupportedContent(message)
        | Error::Io { message, .. }
        | Error::Behind { message, .. }
        | Error::Panic { message, .. } => vec![message],
        Error::Busy
        | Error::LeaseLost
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
/// see `HttpClient::open`; this is the second line of defence, as `scrub_error` is for
/// errors).
pub(super) fn scrub_event(event: StreamEvent, secret: Option<&Secrets<'_>>) -> StreamEvent {
    match event {
        StreamEvent::Retry {
            attempt,
            delay_ms,
            error,
            at,
        } => StreamEvent::Retry {
            attempt,
            delay_ms,
            error: scrub(error, secret),
            at,
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
        let llama = r#"{"error":{"code":400,"message":"request (5033 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error"}}"#;
        assert!(error_message(400, llama).starts_with("request (5033 tokens) exceeds"));
        let anthropic =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(error_message(529, anthropic), "Overloaded");
        assert_eq!(error_message(404, r#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(error_message(502, "  Bad Gateway\n"), "Bad Gateway");
        assert_eq!(
            error_message(503, ""),
            "the server gave no reason for status 503"
        );
        let long = clip(
            error_message(500, &"é".repeat(2000)),
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
    fn the_key_is_scrubbed_from_messages() {
        let m = scrub(
            "Incorrect API key provided: sk-secret".into(),
            Some(&Secrets::key("sk-secret")),
        );
        assert_eq!(m, "Incorrect API key provided: <redacted>");
        assert_eq!(scrub("x".into(), Some(&Secrets::key(""))), "x");
        let key = Secrets::key("sk-accept-SECRET-0123456789");
        let cut = |text: &str| scrub(text.into(), Some(&key));
        // Eight bytes of the key or more, wherever they are, whole or in pieces.
        assert_eq!(cut("key sk-accept-SECRE..."), "key <redacted>...");
        assert_eq!(cut("a CRET-012 b"), "a <redacted> b");
        assert_eq!(
            cut("x sk-accept-SECRET-0123456789sk-accept y"),
            "x <redacted> y"
        );
        // Fewer stay: they are no part of a key anyone can use.
        assert_eq!(cut("key sk-acce..."), "key sk-acce...");
        // A key shorter than the run is removed where it is whole.
        assert_eq!(
            scrub("k=abc, ab".into(), Some(&Secrets::key("abc"))),
            "k=<redacted>, ab"
        );
        // A key that is not ASCII is removed by whole characters.
        assert_eq!(
            scrub(
                "é-clé-secrète-42!".into(),
                Some(&Secrets::key("clé-secrète-42"))
            ),
            "é-<redacted>!"
        );
    }

    #[test]
    fn a_body_cut_inside_the_key_loses_the_start_of_the_key() {
        let key = Secrets::key("sk-accept-SECRET-0123456789");
        let read = |bytes: &str, cut| scrub_read(bytes.as_bytes(), cut, Some(&key));
        // The read stopped after 5 bytes of the key: fewer than a run, gone all the same.
        assert_eq!(read("   sk-ac", true), "   <redacted>");
        assert_eq!(read("   sk-a", true), "   <redacted>");
        assert_eq!(read("   sk-", true), "   sk-");
        // A body that ended there is what the server meant to say.
        assert_eq!(read("   sk-ac", false), "   sk-ac");
        assert_eq!(read("x sk-accept-SECRET", false), "x <redacted>");
    }

    /// Every offset of the key across every cut of the text: at most `KEY_RUN - 1` bytes of
    /// the key remain, and none when the cut came from a read.
    #[test]
    fn no_cut_leaves_a_run_of_the_key() {
        let key = "sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let runs = |text: &str| key_runs(text.as_bytes(), key.as_bytes());
        for offset in 0..40 {
            let body = format!("{}{key}{}", " ".repeat(offset), "y".repeat(40));
            for limit in 0..body.len() {
                let cut = clip(body.clone(), Some(&Secrets::key(key)), limit);
                assert_eq!(runs(&cut), vec![], "{offset} {limit}: {cut}");
                let read = scrub_read(&body.as_bytes()[..limit], true, Some(&Secrets::key(key)));
                assert!(!read.contains("sk-A"), "{offset} {limit}: {read}");
                assert_eq!(runs(&read), vec![], "{offset} {limit}: {read}");
            }
        }
    }

    #[test]
    fn credential_headers_are_secrets_as_the_key_is() {
        let headers = [
            ("api-key".to_owned(), "azure-0123456789abcdef".to_owned()),
            (
                "Authorization".to_owned(),
                "Bearer gw-token-ABCDEFGHIJ".to_owned(),
            ),
            (
                "anthropic-beta".to_owned(),
                "prompt-caching-2024-07-31".to_owned(),
            ),
            ("X-Title".to_owned(), "my app title".to_owned()),
        ];
        let secrets = Secrets::new(Some("sk-main-key-987654321"), &headers);
        let text = "k sk-main-key-987654321 a azure-0123456789abcdef b gw-token-ABCDEFGHIJ \
                    c prompt-caching-2024-07-31 my app title Bearer"
            .to_owned();
        assert_eq!(
            scrub(text, Some(&secrets)),
            "k <redacted> a <redacted> b <redacted> \
             c prompt-caching-2024-07-31 my app title Bearer"
        );
        // A read cut inside a header's credential loses its start too.
        assert_eq!(
            scrub_read(b"echo: gw-tok", true, Some(&secrets)),
            "echo: <redacted>"
        );
        for name in [
            "x-api-key",
            "Cookie",
            "X-Auth-Token",
            "ocp-apim-subscription-key",
        ] {
            assert!(is_credential_header(name), "{name}");
        }
        for name in [
            "anthropic-beta",
            "openai-organization",
            "x-title",
            "user-agent",
        ] {
            assert!(!is_credential_header(name), "{name}");
        }
    }
}
