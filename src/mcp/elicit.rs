//! What a server asks of the client: elicitation (a question for the user, in a form or at a
//! URL) and the list of roots, answered by the program's hook; and the checks of an answer
//! against the schema the server asked with.
//!
//! The same questions come two ways: as a request of the server's own (`elicitation/create`,
//! `roots/list`) in the session era, and inside an `input_required` result (MRTR) in the
//! stateless era. Both go through [`Answers::answer`], so the hook sees one kind of
//! question whichever era the server speaks.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::cancel::CancelToken;
use crate::jsonrpc::{RpcError, codes};

/// A question a server asks the user (`elicitation/create`), for the hook set with
/// [`ClientBuilder::on_elicitation`](super::ClientBuilder::on_elicitation).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Elicitation {
    /// The name of the server that asks (its `serverInfo.name`).
    pub server: String,
    /// The question, for people.
    pub message: String,
    /// A form to fill in, or a page to visit.
    pub mode: ElicitationMode,
}

/// How the user answers an [`Elicitation`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ElicitationMode {
    /// Fill in a form: `schema` is a flat JSON Schema object whose properties are strings,
    /// numbers, integers, booleans or enums. The answer's values are checked against it.
    Form {
        /// The requested schema, as the server sent it.
        schema: Value,
    },
    /// Visit `url` (the server's page for a sign-in, a payment, anything that must not pass
    /// through the client). Accepting means the user agreed to go there; nothing else is
    /// sent. Never open it without the user's consent.
    Url {
        /// The page.
        url: String,
        /// The server's id of this elicitation (2025-11-25; none in 2026-07-28).
        id: Option<String>,
    },
}

/// The user's answer to an [`Elicitation`].
#[derive(Clone, Debug, PartialEq)]
pub enum ElicitationAnswer {
    /// The user answered: the form's values (an object), or for a URL any value (ignored).
    Accept(Value),
    /// The user said no.
    Decline,
    /// The user dismissed the question without choosing.
    Cancel,
}

impl ElicitationAnswer {
    fn action(&self) -> &'static str {
        match self {
            ElicitationAnswer::Accept(_) => "accept",
            ElicitationAnswer::Decline => "decline",
            ElicitationAnswer::Cancel => "cancel",
        }
    }
}

/// The program's answerer of elicitations.
pub(crate) type ElicitationHook =
    Arc<dyn Fn(&Elicitation, &CancelToken) -> ElicitationAnswer + Send + Sync>;

/// A root: a directory or file the server may work in (`roots/list`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Root {
    pub(crate) uri: String,
    pub(crate) name: Option<String>,
}

/// Everything the client answers the server with.
#[derive(Clone, Default)]
pub(crate) struct Answers {
    pub(crate) elicitation: Option<ElicitationHook>,
    pub(crate) roots: Option<Vec<Root>>,
}

impl fmt::Debug for Answers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answers")
            .field("elicitation", &self.elicitation.is_some())
            .field("roots", &self.roots)
            .finish()
    }
}

impl Answers {
    /// What the client declares: elicitation (form and URL) when a hook answers it, roots
    /// when a list was given. Never sampling: the client does not implement it.
    pub(crate) fn capabilities(&self) -> Value {
        let mut caps = Map::new();
        if self.elicitation.is_some() {
            caps.insert("elicitation".into(), json!({"form": {}, "url": {}}));
        }
        if self.roots.is_some() {
            caps.insert("roots".into(), json!({"listChanged": false}));
        }
        Value::Object(caps)
    }

    /// Whether `method` is a question this client answers.
    pub(crate) fn answers(&self, method: &str) -> bool {
        match method {
            "elicitation/create" => self.elicitation.is_some(),
            "roots/list" => self.roots.is_some(),
            _ => false,
        }
    }

    /// Answers one question of the server `server` (a request of its own, or an input
    /// request of an `input_required` result).
    ///
    /// Blocks while the hook does (a user answering).
    ///
    /// # Errors
    /// `-32601` for a question the client does not answer; `-32602` for a malformed one.
    pub(crate) fn answer(
        &self,
        server: &str,
        method: &str,
        params: Option<&Value>,
        cancel: &CancelToken,
    ) -> Result<Value, RpcError> {
        let not_supported = || {
            RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("{method} is not supported by the client"),
            )
        };
        match method {
            "elicitation/create" => {
                let hook = self.elicitation.as_ref().ok_or_else(not_supported)?;
                let question = elicitation(server, params)?;
                let answer = if cancel.is_cancelled() {
                    ElicitationAnswer::Cancel
                } else {
                    hook(&question, cancel)
                };
                Ok(answer_value(&question, answer))
            }
            "roots/list" => {
                let roots = self.roots.as_ref().ok_or_else(not_supported)?;
                let roots: Vec<Value> = roots
                    .iter()
                    .map(|r| match &r.name {
                        Some(name) => json!({"uri": r.uri, "name": name}),
                        None => json!({"uri": r.uri}),
                    })
                    .collect();
                Ok(json!({"roots": roots}))
            }
            _ => Err(not_supported()),
        }
    }
}

/// Reads an `elicitation/create`.
fn elicitation(server: &str, params: Option<&Value>) -> Result<Elicitation, RpcError> {
    let bad =
        |why: &str| RpcError::new(codes::INVALID_PARAMS, format!("elicitation/create: {why}"));
    let params = params.ok_or_else(|| bad("no params"))?;
    let message = params
        .get("message")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no message"))?
        .to_owned();
    let mode = match params.get("mode").and_then(Value::as_str) {
        Some("url") => ElicitationMode::Url {
            url: params
                .get("url")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("a url-mode question without its url"))?
                .to_owned(),
            id: params
                .get("elicitationId")
                .and_then(Value::as_str)
                .map(str::to_owned),
        },
        None | Some("form") => ElicitationMode::Form {
            schema: params
                .get("requestedSchema")
                .cloned()
                .ok_or_else(|| bad("a form without its requestedSchema"))?,
        },
        Some(other) => return Err(bad(&format!("the mode {other:?} is not known"))),
    };
    Ok(Elicitation {
        server: server.to_owned(),
        message,
        mode,
    })
}

/// The `ElicitResult` for `answer`: a form's values with the schema's defaults filled in
/// and checked against it. Values that do not fit are never sent: the answer becomes
/// `cancel` (the user's input cannot be what the server asked for).
fn answer_value(question: &Elicitation, answer: ElicitationAnswer) -> Value {
    match (&question.mode, answer) {
        (ElicitationMode::Form { schema }, ElicitationAnswer::Accept(content)) => {
            match checked(schema, content) {
                Ok(content) => json!({"action": "accept", "content": content}),
                Err(_) => json!({"action": "cancel"}),
            }
        }
        (ElicitationMode::Url { .. }, ElicitationAnswer::Accept(_)) => json!({"action": "accept"}),
        (_, answer) => json!({"action": answer.action()}),
    }
}

/// `content` with the defaults of `schema` for the properties it lacks, if it fits the
/// schema of an elicitation form (a flat object of primitive properties).
///
/// # Errors
/// What does not fit, for people.
pub(crate) fn checked(schema: &Value, content: Value) -> Result<Value, String> {
    let Value::Object(mut content) = content else {
        return Err("the answer is not an object".into());
    };
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (name, property) in &properties {
        if !content.contains_key(name)
            && let Some(default) = property.get("default")
        {
            content.insert(name.clone(), default.clone());
        }
    }
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for name in required.iter().filter_map(Value::as_str) {
        if !content.contains_key(name) {
            return Err(format!("{name:?} is required"));
        }
    }
    for (name, value) in &content {
        let Some(property) = properties.get(name) else {
            return Err(format!("{name:?} is not a field of the form"));
        };
        check_value(name, property, value)?;
    }
    Ok(Value::Object(content))
}

/// Checks one value against a primitive property schema of an elicitation form.
fn check_value(name: &str, property: &Value, value: &Value) -> Result<(), String> {
    let wrong = |what: &str| Err(format!("{name:?} {what}"));
    let choices: Option<Vec<&str>> = match (property.get("enum"), property.get("oneOf")) {
        (Some(Value::Array(list)), _) => Some(list.iter().filter_map(Value::as_str).collect()),
        (_, Some(Value::Array(list))) => Some(
            list.iter()
                .filter_map(|o| o.get("const").and_then(Value::as_str))
                .collect(),
        ),
        _ => None,
    };
    let number = |v: &Value| -> Result<(), String> {
        let n = v
            .as_f64()
            .ok_or_else(|| format!("{name:?} is not a number"))?;
        if property
            .get("minimum")
            .and_then(Value::as_f64)
            .is_some_and(|m| n < m)
        {
            return Err(format!("{name:?} is below its minimum"));
        }
        if property
            .get("maximum")
            .and_then(Value::as_f64)
            .is_some_and(|m| n > m)
        {
            return Err(format!("{name:?} is above its maximum"));
        }
        Ok(())
    };
    match property.get("type").and_then(Value::as_str) {
        Some("string") => {
            let Some(text) = value.as_str() else {
                return wrong("is not a string");
            };
            let chars = text.chars().count() as u64;
            if property
                .get("minLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| chars < m)
            {
                return wrong("is shorter than its minLength");
            }
            if property
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| chars > m)
            {
                return wrong("is longer than its maxLength");
            }
            if choices.is_some_and(|c| !c.contains(&text)) {
                return wrong("is not one of its choices");
            }
            if let Some(format) = property.get("format").and_then(Value::as_str)
                && !fits_format(format, text)
            {
                return wrong(&format!("is not of the format {format}"));
            }
            Ok(())
        }
        Some("integer") if value.as_i64().is_none() && value.as_u64().is_none() => {
            wrong("is not an integer")
        }
        Some("integer" | "number") => number(value),
        Some("boolean") if !value.is_boolean() => wrong("is not a boolean"),
        Some("array") => {
            let Some(items) = value.as_array() else {
                return wrong("is not a list");
            };
            let allowed: Option<Vec<&str>> = property.get("items").and_then(|items| {
                match (items.get("enum"), items.get("anyOf")) {
                    (Some(Value::Array(l)), _) => {
                        Some(l.iter().filter_map(Value::as_str).collect())
                    }
                    (_, Some(Value::Array(l))) => Some(
                        l.iter()
                            .filter_map(|o| o.get("const").and_then(Value::as_str))
                            .collect(),
                    ),
                    _ => None,
                }
            });
            for item in items {
                let ok = item
                    .as_str()
                    .is_some_and(|s| allowed.as_ref().is_none_or(|a| a.contains(&s)));
                if !ok {
                    return wrong("holds a value that is not one of its choices");
                }
            }
            let n = items.len() as u64;
            if property
                .get("minItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
            {
                return wrong("has fewer items than its minItems");
            }
            if property
                .get("maxItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
            {
                return wrong("has more items than its maxItems");
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A light check of the string formats an elicitation form may ask for.
fn fits_format(format: &str, text: &str) -> bool {
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    match format {
        "email" => text.split_once('@').is_some_and(|(user, host)| {
            !user.is_empty() && host.contains('.') && !text.contains(' ')
        }),
        "uri" => text.split_once(':').is_some_and(|(scheme, _)| {
            !scheme.is_empty()
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        }),
        "date" => {
            let parts: Vec<&str> = text.split('-').collect();
            parts.len() == 3 && digits(parts[0], 4) && digits(parts[1], 2) && digits(parts[2], 2)
        }
        "date-time" => text
            .split_once(['T', 't'])
            .is_some_and(|(date, time)| fits_format("date", date) && time.len() >= 8),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "default": "Ann"},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "color": {"type": "string", "enum": ["red", "green"], "default": "red"},
                "ok": {"type": "boolean", "default": true},
                "mail": {"type": "string", "format": "email"},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
            },
            "required": ["age"],
        })
    }

    #[test]
    fn a_form_answer_gets_its_defaults_and_is_checked_against_the_schema() {
        assert_eq!(
            checked(&form(), json!({"age": 3})).unwrap(),
            json!({"age": 3, "name": "Ann", "color": "red", "ok": true})
        );
        for (bad, why) in [
            (json!({}), "\"age\" is required"),
            (json!({"age": 1.5}), "\"age\" is not an integer"),
            (json!({"age": 200}), "\"age\" is above its maximum"),
            (
                json!({"age": 1, "color": "blue"}),
                "\"color\" is not one of its choices",
            ),
            (
                json!({"age": 1, "name": ""}),
                "\"name\" is shorter than its minLength",
            ),
            (json!({"age": 1, "ok": "yes"}), "\"ok\" is not a boolean"),
            (
                json!({"age": 1, "mail": "nobody"}),
                "\"mail\" is not of the format email",
            ),
            (
                json!({"age": 1, "tags": ["c"]}),
                "\"tags\" holds a value that is not one of its choices",
            ),
            (
                json!({"age": 1, "extra": 1}),
                "\"extra\" is not a field of the form",
            ),
            (json!([1]), "the answer is not an object"),
        ] {
            assert_eq!(checked(&form(), bad).unwrap_err(), why);
        }
    }

    #[test]
    fn an_answer_that_does_not_fit_is_sent_as_cancel() {
        let answers = Answers {
            elicitation: Some(Arc::new(|q: &Elicitation, _: &CancelToken| {
                assert_eq!(q.server, "s");
                ElicitationAnswer::Accept(json!({"age": "old"}))
            })),
            roots: None,
        };
        let params = json!({"message": "How old?", "requestedSchema": form()});
        let got = answers
            .answer(
                "s",
                "elicitation/create",
                Some(&params),
                &CancelToken::new(),
            )
            .unwrap();
        assert_eq!(got, json!({"action": "cancel"}));
        let url = json!({"mode": "url", "message": "Sign in", "url": "https://x/y", "elicitationId": "e1"});
        let answers = Answers {
            elicitation: Some(Arc::new(|q: &Elicitation, _: &CancelToken| {
                assert!(
                    matches!(&q.mode, ElicitationMode::Url { url, id: Some(id) } if url == "https://x/y" && id == "e1")
                );
                ElicitationAnswer::Accept(Value::Null)
            })),
            roots: None,
        };
        assert_eq!(
            answers
                .answer("s", "elicitation/create", Some(&url), &CancelToken::new())
                .unwrap(),
            json!({"action": "accept"})
        );
        assert_eq!(
            answers.capabilities(),
            json!({"elicitation": {"form": {}, "url": {}}})
        );
        assert_eq!(
            Answers::default()
                .answer("s", "sampling/createMessage", None, &CancelToken::new())
                .unwrap_err()
                .code,
            codes::METHOD_NOT_FOUND
        );
    }
}
