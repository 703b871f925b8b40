//! Elicitation: a question for the user, in a form or at a URL, that a tool call asks while
//! it runs (an MCP server's `elicitation/create`, or its `input_required` result), and the
//! user's answer, checked against the form's schema.
//!
//! The types are plain data of the event layer: [`AgentEvent::ElicitationStart`] carries the
//! question, [`AgentEvent::ElicitationEnd`] the answer, and [`State::elicitations`] lists the
//! questions waiting. Who asks and who answers is the agent's (src/agent/elicit.rs) and the MCP
//! client's business.
//!
//! [`AgentEvent::ElicitationStart`]: crate::AgentEvent::ElicitationStart
//! [`AgentEvent::ElicitationEnd`]: crate::AgentEvent::ElicitationEnd
//! [`State::elicitations`]: crate::State::elicitations

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::cancel::CancelToken;
use crate::output::validate;

/// The program's answerer of elicitations.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) type ElicitationHook =
    Arc<dyn Fn(&Elicitation, &CancelToken) -> ElicitationAnswer + Send + Sync>;

/// Why [`AgentHandle::answer_elicitation`](crate::AgentHandle::answer_elicitation) refused an
/// answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnswerRefused {
    /// No question with this id waits for an answer through the agent: it was answered
    /// already, given up (the run was aborted), never asked, or a hook of the program
    /// answers it.
    NotWaiting(String),
    /// The values do not fit the form: the question still waits, answer it again.
    Invalid(String),
}

impl fmt::Display for AnswerRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnswerRefused::NotWaiting(id) => {
                write!(f, "no elicitation {id:?} waits for an answer")
            }
            AnswerRefused::Invalid(why) => write!(f, "the answer does not fit the form: {why}"),
        }
    }
}

impl std::error::Error for AnswerRefused {}

/// A question a server asks the user (`elicitation/create`), for the hook set with
/// `mcp::ClientBuilder::on_elicitation` (feature `mcp`), in
/// [`AgentEvent::ElicitationStart`](crate::AgentEvent::ElicitationStart) and in
/// [`State::elicitations`](crate::State::elicitations).
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
    /// The answer's action as MCP and ACP write it: `"accept"`, `"decline"` or `"cancel"`.
    pub fn action(&self) -> &'static str {
        match self {
            ElicitationAnswer::Accept(_) => "accept",
            ElicitationAnswer::Decline => "decline",
            ElicitationAnswer::Cancel => "cancel",
        }
    }
}

/// A question waiting for its answer, in [`State::elicitations`](crate::State::elicitations):
/// from its [`AgentEvent::ElicitationStart`](crate::AgentEvent::ElicitationStart) to its
/// [`AgentEvent::ElicitationEnd`](crate::AgentEvent::ElicitationEnd).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PendingElicitation {
    /// The id an answer names ([`crate::AgentHandle::answer_elicitation`], the wire server's
    /// `elicitation/answer`).
    pub id: String,
    /// The tool call that asks.
    pub tool_call_id: String,
    /// The question.
    pub request: Arc<Elicitation>,
}

impl ElicitationAnswer {
    /// The answer as it is sent for `mode`: a form's values completed with the schema's
    /// defaults and checked against it; for a URL, `Accept` carries no values (`Null`).
    ///
    /// # Errors
    /// What does not fit the form, for people.
    pub(crate) fn fitted(self, mode: &ElicitationMode) -> Result<ElicitationAnswer, String> {
        match (mode, self) {
            (ElicitationMode::Form { schema }, ElicitationAnswer::Accept(content)) => {
                checked(schema, content).map(ElicitationAnswer::Accept)
            }
            (ElicitationMode::Url { .. }, ElicitationAnswer::Accept(_)) => {
                Ok(ElicitationAnswer::Accept(Value::Null))
            }
            (_, answer) => Ok(answer),
        }
    }

    /// The answer as MCP's `ElicitResult` (and ACP's and the wire's) writes it:
    /// `{"action":"accept","content":{..}}`, `content` left out when it is `Null`.
    pub(crate) fn to_json(&self) -> Value {
        match self {
            ElicitationAnswer::Accept(content) if !content.is_null() => {
                json!({"action": "accept", "content": content})
            }
            answer => json!({"action": answer.action()}),
        }
    }

    /// Reads `{"action": .., "content": ..}` (MCP's, ACP's and the wire's shape).
    ///
    /// # Errors
    /// A missing or unknown action, for people.
    pub(crate) fn from_json(value: &Value) -> Result<ElicitationAnswer, String> {
        match value.get("action").and_then(Value::as_str) {
            Some("accept") => Ok(ElicitationAnswer::Accept(
                value.get("content").cloned().unwrap_or(Value::Null),
            )),
            Some("decline") => Ok(ElicitationAnswer::Decline),
            Some("cancel") => Ok(ElicitationAnswer::Cancel),
            Some(other) => Err(format!(
                "the action {other:?} is not one of accept, decline, cancel"
            )),
            None => Err("an answer needs an action: accept, decline or cancel".into()),
        }
    }
}

impl Elicitation {
    /// A form to fill in: `schema` a flat JSON Schema object whose properties are strings,
    /// numbers, integers, booleans or lists of choices. `server` names who asks (an MCP
    /// server's name; a tool of the program may put its own).
    pub fn form(
        server: impl Into<String>,
        message: impl Into<String>,
        schema: Value,
    ) -> Elicitation {
        Elicitation {
            server: server.into(),
            message: message.into(),
            mode: ElicitationMode::Form { schema },
        }
    }

    /// A page for the user to visit.
    pub fn url(
        server: impl Into<String>,
        message: impl Into<String>,
        url: impl Into<String>,
    ) -> Elicitation {
        Elicitation {
            server: server.into(),
            message: message.into(),
            mode: ElicitationMode::Url {
                url: url.into(),
                id: None,
            },
        }
    }

    /// The question in the native wire's shape: `{"server","message","mode":"form",
    /// "requested_schema"}` or `{"server","message","mode":"url","url","elicitation_id"?}`.
    pub(crate) fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("server".into(), json!(self.server));
        map.insert("message".into(), json!(self.message));
        match &self.mode {
            ElicitationMode::Form { schema } => {
                map.insert("mode".into(), json!("form"));
                map.insert("requested_schema".into(), schema.clone());
            }
            ElicitationMode::Url { url, id } => {
                map.insert("mode".into(), json!("url"));
                map.insert("url".into(), json!(url));
                if let Some(id) = id {
                    map.insert("elicitation_id".into(), json!(id));
                }
            }
        }
        Value::Object(map)
    }

    /// Reads the native wire's shape ([`Elicitation::to_json`]).
    ///
    /// # Errors
    /// A missing or mistyped member, for people.
    pub(crate) fn from_json(value: &Value) -> Result<Elicitation, String> {
        let text = |name: &str| {
            value
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("the elicitation has no string `{name}`"))
        };
        let mode = match value.get("mode").and_then(Value::as_str) {
            Some("form") => ElicitationMode::Form {
                schema: value
                    .get("requested_schema")
                    .cloned()
                    .ok_or("a form elicitation has no `requested_schema`")?,
            },
            Some("url") => ElicitationMode::Url {
                url: text("url")?,
                id: value
                    .get("elicitation_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
            _ => return Err("the elicitation's `mode` is not \"form\" or \"url\"".into()),
        };
        Ok(Elicitation {
            server: text("server")?,
            message: text("message")?,
            mode,
        })
    }
}

/// Whether `schema` is the schema of an elicitation form: an object schema whose
/// properties are strings, numbers, integers, booleans or lists of choices (no nesting), and
/// whose `required` names some of them.
///
/// # Errors
/// What is wrong, for people.
pub(crate) fn check_form(schema: &Value) -> Result<(), String> {
    let Value::Object(schema) = schema else {
        return Err("it is not an object".into());
    };
    match schema.get("type") {
        None => {}
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => return Err(format!("its type is {other}, not \"object\"")),
    }
    let empty = Map::new();
    let properties = match schema.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err("its properties are not an object".into()),
    };
    for (name, property) in properties {
        let kind = property.get("type").and_then(Value::as_str);
        let choices = property.get("enum").is_some() || property.get("oneOf").is_some();
        match kind {
            Some("string" | "number" | "integer" | "boolean" | "array") => {}
            None if choices => {}
            Some(other) => {
                return Err(format!(
                    "the property {name:?} is of type {other:?}: a form holds strings, numbers, integers, booleans and lists of choices"
                ));
            }
            None => return Err(format!("the property {name:?} has no type")),
        }
    }
    match schema.get("required") {
        None | Some(Value::Null) => {}
        Some(Value::Array(names)) => {
            for name in names {
                match name.as_str() {
                    Some(n) if properties.contains_key(n) => {}
                    _ => {
                        return Err(format!(
                            "it requires {name}, which is not one of its properties"
                        ));
                    }
                }
            }
        }
        Some(_) => return Err("its required is not a list".into()),
    }
    Ok(())
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
    for name in content.keys() {
        if !properties.contains_key(name) {
            return Err(format!("{name:?} is not a field of the form"));
        }
    }
    let content = Value::Object(content);
    // The crate's one JSON Schema check, then the formats (an annotation to that check, a
    // promise of a form's).
    let mut problems = validate::problems(schema, &content);
    for (name, property) in &properties {
        if let (Some(format), Some(text)) = (
            property.get("format").and_then(Value::as_str),
            content.get(name).and_then(Value::as_str),
        ) && !fits_format(format, text)
        {
            problems.push(format!(
                "at `/{name}`: {text:?} is not of the format {format}"
            ));
        }
    }
    if problems.is_empty() {
        Ok(content)
    } else {
        Err(problems.join("; "))
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
pub(crate) mod tests {
    use super::*;

    pub(crate) fn form() -> Value {
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
            (json!({}), "at the top level: the property `age` is missing"),
            (
                json!({"age": 1.5}),
                "at `/age`: expected an integer, got a number (1.5)",
            ),
            (
                json!({"age": 200}),
                "at `/age`: 200 is above the maximum 150",
            ),
            (
                json!({"age": 1, "color": "blue"}),
                "at `/color`: \"blue\" is not one of [\"red\",\"green\"]",
            ),
            (
                json!({"age": 1, "name": ""}),
                "at `/name`: expected at least 1 characters, got 0",
            ),
            (
                json!({"age": 1, "ok": "yes"}),
                "at `/ok`: expected a boolean, got a string (\"yes\")",
            ),
            (
                json!({"age": 1, "mail": "nobody"}),
                "at `/mail`: \"nobody\" is not of the format email",
            ),
            (
                json!({"age": 1, "tags": ["c"]}),
                "at `/tags/0`: \"c\" is not one of [\"a\",\"b\"]",
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
}
