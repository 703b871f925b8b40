//! One JSON-RPC 2.0 message: what a line (or an HTTP body, or an event's data) is, and the
//! encoders of what goes out. Pure: nothing here reads or writes a stream.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Error;

/// The error codes of JSON-RPC 2.0 itself; each protocol on the peer adds its own (the
/// wire's and ACP's public `codes` modules repeat these, checked equal at compile time).
pub(crate) mod codes {
    /// The message is not JSON (or not UTF-8).
    pub(crate) const PARSE_ERROR: i64 = -32700;
    /// The JSON is not a request: not an object, `jsonrpc` not `"2.0"`, no string `method`,
    /// a bad `id`, or a line over the length limit.
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    /// The params are missing or malformed.
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    /// The receiver failed.
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
}

/// A JSON-RPC error object: what an error response carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

impl From<(i64, String)> for RpcError {
    fn from((code, message): (i64, String)) -> RpcError {
        RpcError::new(code, message)
    }
}

/// A request (with an `id`, to be answered) or a notification (without) of the other side.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Call {
    /// `None` for a notification.
    pub(crate) id: Option<Value>,
    pub(crate) method: String,
    pub(crate) params: Option<Value>,
}

/// A message that breaks JSON-RPC: the error to answer it with, when it is one that gets an
/// answer (a broken response does not: nobody waits for the answer to a response).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Violation {
    /// The message's `id` when it had a usable one, else `null`.
    pub(crate) id: Value,
    pub(crate) error: RpcError,
    /// False for a broken response, which the spec leaves unanswered.
    pub(crate) answerable: bool,
}

impl Violation {
    fn new(id: Value, code: i64, message: impl Into<String>) -> Violation {
        Violation {
            id,
            error: RpcError::new(code, message),
            answerable: true,
        }
    }
}

/// One message, classified.
#[derive(Debug, PartialEq)]
pub(crate) enum Parsed {
    /// Nothing but whitespace: passed over.
    Blank,
    Call(Call),
    /// A response to a request: its `result`, or its `error`.
    Response {
        id: Value,
        outcome: Result<Value, RpcError>,
    },
}

/// Classifies one message. `null_id`: whether a request's `id` may be `null` (the spec
/// allows it and discourages it; the wire server takes it, ACP does not).
///
/// A response is told apart by having no `method` and a `result` or an `error`, and is read
/// leniently (its `jsonrpc` is not checked): it only ever reaches the request that waits for
/// it. A request or notification is checked in this order: `jsonrpc` is `"2.0"`, the `id`
/// is a number or a string, `method` is a string.
///
/// # Errors
/// The [`Violation`]: -32700 for what is not JSON (or not UTF-8), -32600 for JSON that is
/// no JSON-RPC message; a response whose `error` is not an error object is a violation that
/// gets no answer.
pub(crate) fn parse(message: &[u8], null_id: bool) -> Result<Parsed, Violation> {
    if message.iter().all(u8::is_ascii_whitespace) {
        return Ok(Parsed::Blank);
    }
    let mut object = parse_object(message).map_err(|bad| {
        let code = match bad {
            Malformed::NotJson(_) => codes::PARSE_ERROR,
            Malformed::NotObject => codes::INVALID_REQUEST,
        };
        Violation::new(Value::Null, code, bad.message())
    })?;
    let id = object.remove("id");
    let is_response = object.contains_key("result") || object.contains_key("error");
    if !object.contains_key("method") && is_response {
        let id = id.unwrap_or(Value::Null);
        let outcome = match (object.remove("result"), object.remove("error")) {
            (_, Some(error)) => Err(RpcError::deserialize(&error).map_err(|e| Violation {
                answerable: false,
                ..Violation::new(
                    id.clone(),
                    codes::INVALID_REQUEST,
                    format!("the error of a response is not an error object ({e}): {error}"),
                )
            })?),
            (Some(result), None) => Ok(result),
            // Taken apart above: one of the two is there.
            (None, None) => unreachable!("a response has a result or an error"),
        };
        return Ok(Parsed::Response { id, outcome });
    }
    let reply_id = id.clone().unwrap_or(Value::Null);
    check_jsonrpc(&object)
        .map_err(|why| Violation::new(reply_id.clone(), codes::INVALID_REQUEST, why))?;
    let id_ok = match &id {
        None | Some(Value::Number(_) | Value::String(_)) => true,
        Some(Value::Null) => null_id,
        Some(_) => false,
    };
    if !id_ok {
        return Err(Violation::new(
            Value::Null,
            codes::INVALID_REQUEST,
            "`id` must be a number or a string",
        ));
    }
    let Some(Value::String(method)) = object.remove("method") else {
        return Err(Violation::new(
            reply_id,
            codes::INVALID_REQUEST,
            "`method` must be a string",
        ));
    };
    Ok(Parsed::Call(Call {
        id,
        method,
        params: object.remove("params"),
    }))
}

/// One JSON-RPC 2.0 message, members in the order written: `jsonrpc`, `id`, `method`,
/// `params`, `result`, `error` (each but `jsonrpc` left out when absent).
#[derive(Serialize)]
struct Envelope<'a, P, R> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a R>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RpcError>,
}

impl<'a, P: Serialize, R: Serialize> Envelope<'a, P, R> {
    fn new(id: Option<&'a Value>) -> Self {
        Envelope {
            jsonrpc: "2.0",
            id,
            method: None,
            params: None,
            result: None,
            error: None,
        }
    }

    /// Appends the message and its line end to `buf`.
    fn write_line(&self, buf: &mut Vec<u8>) {
        write_json(buf, self);
        buf.push(b'\n');
    }
}

/// Appends `value` as JSON to `buf`.
pub(crate) fn write_json<T: Serialize + ?Sized>(buf: &mut Vec<u8>, value: &T) {
    // OK because every type we encode serializes to JSON: string keys only, no fallible
    // custom `Serialize`, and writing to a `Vec` cannot fail.
    serde_json::to_writer(buf, value).expect("wire types always serialize");
}

/// Appends the notification line `{"jsonrpc":"2.0","method":..,"params":..}` and its `\n`:
/// the same bytes as the [`Envelope`] writes, its fixed members put in as they are (a
/// streamed delta's line is mostly them).
pub(crate) fn notification_to(buf: &mut Vec<u8>, method: &str, params: &impl Serialize) {
    buf.extend_from_slice(br#"{"jsonrpc":"2.0","method":"#);
    write_json(buf, method);
    buf.extend_from_slice(br#","params":"#);
    write_json(buf, params);
    buf.extend_from_slice(b"}\n");
}

/// Appends the request line `{"jsonrpc":"2.0","id":..,"method":..,"params":..}` and its `\n`,
/// with no `params` member when `params` is `None`.
pub(crate) fn request_to(buf: &mut Vec<u8>, id: &Value, method: &str, params: Option<&Value>) {
    Envelope::<_, ()> {
        method: Some(method),
        params,
        ..Envelope::new(Some(id))
    }
    .write_line(buf);
}

/// Appends the response line `{"jsonrpc":"2.0","id":..,"result":..}` and its `\n`.
pub(crate) fn result_to(buf: &mut Vec<u8>, id: &Value, result: &impl Serialize) {
    Envelope::<(), _> {
        result: Some(result),
        ..Envelope::new(Some(id))
    }
    .write_line(buf);
}

/// Appends the error response line
/// `{"jsonrpc":"2.0","id":..,"error":{"code":..,"message":..}}` (and the error's `data`, when
/// it has some) and its `\n`.
pub(crate) fn error_to(buf: &mut Vec<u8>, id: &Value, error: &RpcError) {
    Envelope::<(), ()> {
        error: Some(error),
        ..Envelope::new(Some(id))
    }
    .write_line(buf);
}

/// Why a line is not a JSON-RPC message: it is not JSON at all, or JSON but not an object.
/// JSON-RPC answers the two with different codes.
pub(crate) enum Malformed {
    NotJson(String),
    NotObject,
}

impl Malformed {
    pub(crate) fn message(&self) -> String {
        match self {
            Malformed::NotJson(why) => why.clone(),
            Malformed::NotObject => "the line is not a JSON object".into(),
        }
    }
}

impl From<Malformed> for Error {
    fn from(m: Malformed) -> Error {
        Error::Wire(m.message())
    }
}

/// Parses `line` as one JSON object and nothing after it (UTF-8 is checked on the way).
pub(crate) fn parse_object(line: &[u8]) -> Result<Map<String, Value>, Malformed> {
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(Malformed::NotObject),
        Err(e) if e.is_eof() => Err(Malformed::NotJson(format!("incomplete JSON: {e}"))),
        // serde_json names trailing characters as such ("trailing characters at line 1
        // column 40"), so the message says what is wrong.
        Err(e) => Err(Malformed::NotJson(format!("invalid JSON: {e}"))),
    }
}

/// `jsonrpc` must be the string `"2.0"`.
pub(crate) fn check_jsonrpc(object: &Map<String, Value>) -> Result<(), String> {
    match object.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => Ok(()),
        Some(other) => Err(format!("`jsonrpc` is {other}, not \"2.0\"")),
        None => Err("no `jsonrpc` member".into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn violation(line: &str) -> (Value, i64, String, bool) {
        match parse(line.as_bytes(), false) {
            Err(v) => (v.id, v.error.code, v.error.message, v.answerable),
            Ok(p) => panic!("{line} parsed as {p:?}"),
        }
    }

    #[test]
    fn every_kind_of_message_is_told_apart() {
        let call = |id: Option<Value>, method: &str, params: Option<Value>| {
            Ok(Parsed::Call(Call {
                id,
                method: method.into(),
                params,
            }))
        };
        let cases = [
            ("  \t", Ok(Parsed::Blank)),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}"#,
                call(Some(json!(1)), "m", Some(json!({"a": 1}))),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"x","method":"m"}"#,
                call(Some(json!("x")), "m", None),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"n","params":[1]}"#,
                call(None, "n", Some(json!([1]))),
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#,
                Ok(Parsed::Response {
                    id: json!(7),
                    outcome: Ok(json!({"ok": true})),
                }),
            ),
            // A response is read leniently: no `jsonrpc`, a `result` of null.
            (
                r#"{"id":7,"result":null}"#,
                Ok(Parsed::Response {
                    id: json!(7),
                    outcome: Ok(Value::Null),
                }),
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}"#,
                Ok(Parsed::Response {
                    id: Value::Null,
                    outcome: Err(RpcError::new(-32700, "bad")),
                }),
            ),
            (
                r#"{"jsonrpc":"2.0","error":{"code":1,"message":"no id","data":[2]}}"#,
                Ok(Parsed::Response {
                    id: Value::Null,
                    outcome: Err(RpcError {
                        code: 1,
                        message: "no id".into(),
                        data: Some(json!([2])),
                    }),
                }),
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(parse(line.as_bytes(), false), expected, "{line}");
        }
        // A null request id only when asked for.
        let null = r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#;
        assert_eq!(
            parse(null.as_bytes(), true),
            call(Some(Value::Null), "m", None)
        );
        assert_eq!(violation(null).1, codes::INVALID_REQUEST);
    }

    #[test]
    fn violations_carry_their_code_and_the_id_to_answer() {
        let invalid = codes::INVALID_REQUEST;
        assert_eq!(violation("nope").1, codes::PARSE_ERROR);
        assert_eq!(violation(r#"{"a":1"#).0, Value::Null);
        assert_eq!(
            violation("[1]"),
            (
                Value::Null,
                invalid,
                "the line is not a JSON object".into(),
                true
            )
        );
        assert_eq!(
            violation(r#"{"jsonrpc":"1.0","id":2,"method":"m"}"#),
            (
                json!(2),
                invalid,
                r#"`jsonrpc` is "1.0", not "2.0""#.into(),
                true
            )
        );
        assert_eq!(
            violation(r#"{"jsonrpc":"2.0","id":[1],"method":"m"}"#),
            (
                Value::Null,
                invalid,
                "`id` must be a number or a string".into(),
                true
            )
        );
        assert_eq!(
            violation(r#"{"jsonrpc":"2.0","id":3}"#),
            (json!(3), invalid, "`method` must be a string".into(), true)
        );
        assert_eq!(
            violation(r#"{"jsonrpc":"2.0","id":3,"method":7}"#).1,
            invalid
        );
        // A broken response gets no answer.
        let (id, code, _, answerable) = violation(r#"{"jsonrpc":"2.0","id":4,"error":"oops"}"#);
        assert_eq!((id, code, answerable), (json!(4), invalid, false));
    }

    #[test]
    fn encoded_messages_are_exact_lines() {
        let mut buf = Vec::new();
        request_to(&mut buf, &json!(1), "m", Some(&json!({"a": 1})));
        request_to(&mut buf, &json!(2), "p", None);
        notification_to(&mut buf, "n", &json!([]));
        result_to(&mut buf, &json!("x"), &json!(null));
        error_to(&mut buf, &Value::Null, &RpcError::new(-32700, "bad"));
        let mut with_data = RpcError::new(-1, "d");
        with_data.data = Some(json!({"k": 2}));
        error_to(&mut buf, &json!(2), &with_data);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            concat!(
                r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}"#,
                "\n",
                r#"{"jsonrpc":"2.0","id":2,"method":"p"}"#,
                "\n",
                r#"{"jsonrpc":"2.0","method":"n","params":[]}"#,
                "\n",
                r#"{"jsonrpc":"2.0","id":"x","result":null}"#,
                "\n",
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}"#,
                "\n",
                r#"{"jsonrpc":"2.0","id":2,"error":{"code":-1,"message":"d","data":{"k":2}}}"#,
                "\n",
            )
        );
    }

    #[test]
    fn a_notification_is_the_envelopes_bytes() {
        for (method, params) in [
            (
                "MessageUpdate",
                json!({"delta": {"type": "text_delta", "text": "a\"b\n\u{1}"}}),
            ),
            ("notifications/progress", json!({"progress": 0.5})),
            ("odd \"method\" \u{e9}\t", json!({})),
        ] {
            let mut written = Vec::new();
            notification_to(&mut written, method, &params);
            let mut envelope = Vec::new();
            Envelope::<_, ()> {
                method: Some(method),
                params: Some(&params),
                ..Envelope::new(None)
            }
            .write_line(&mut envelope);
            assert_eq!(
                String::from_utf8(written).unwrap(),
                String::from_utf8(envelope).unwrap()
            );
        }
    }
}
