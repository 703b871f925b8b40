//! Structured answers: the [`OutputSchema`] a run's answer must match, the
//! [`OutputRequest`] a provider gets for a model call that asks for it, and the
//! [`OutputCheck`] of an answer that events, the state and the wire carry.
//!
//! The agent loop's part (when the schema is sent, repair turns) is in `agent::output`;
//! this module is plain data, which `llm` and `state` may use.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Error;

mod forms;
pub(crate) mod validate;

/// The JSON Schema a structured answer must match, with the forms each provider sends.
///
/// Made from a type with [`OutputSchema::of`] (its `schemars::JsonSchema` derive gives the
/// schema; answers must also deserialize into the type), or from a schema of your own with
/// [`OutputSchema::new`] (for schemas known only at run time). Cheap to clone (shared).
///
/// An answer is checked against the schema as given (see [`OutputSchema::check`]); what
/// the providers send is derived from it once, here:
/// - [`strict_schema`](OutputSchema::strict_schema): OpenAI's strict form (Chat Completions
///   `response_format` and the Responses API's `text.format` with `strict: true`), when the
///   schema has one: its root is an object, and it uses no map, tuple or keyword strict
///   mode refuses (see [`why_not_strict`](OutputSchema::why_not_strict)). In it every
///   property is required (an `Option` field stays nullable) and every object closed;
///   constraints strict mode cannot express move into descriptions.
/// - [`anthropic_schema`](OutputSchema::anthropic_schema): the subset Anthropic's
///   structured outputs take (no numeric or length constraints, which move into
///   descriptions, as Anthropic's own SDKs do).
///
/// `Debug` shows the name and the schema; two `OutputSchema`s are equal when their names,
/// descriptions and schemas are.
///
/// ```
/// use pagent::OutputSchema;
/// use pagent::schemars::{self, JsonSchema};
/// use serde::Deserialize;
///
/// /// How good the text is.
/// #[derive(Deserialize, JsonSchema)]
/// struct Verdict {
///     /// From 0 to 10.
///     score: u8,
///     reasons: Vec<String>,
/// }
///
/// let schema = OutputSchema::of::<Verdict>();
/// assert_eq!(schema.name(), "Verdict");
/// assert!(schema.strict_schema().is_some());
/// assert_eq!(
///     schema.check(r#"{"score": 11, "reasons": []}"#),
///     Ok(serde_json::json!({"score": 11, "reasons": []})),
/// );
/// let wrong = schema.check(r#"{"score": 300}"#).unwrap_err();
/// assert!(wrong.contains("the property `reasons` is missing"), "{wrong}");
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Clone)]
pub struct OutputSchema {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    description: Option<String>,
    schema: Value,
    strict: Result<Value, String>,
    anthropic: Value,
    /// The type's own check (it deserializes), for a schema made with `of`.
    parse: Option<TypeCheck>,
}

/// A type's own check of an answer: that it deserializes, or why not.
type TypeCheck = fn(&Value) -> Result<(), String>;

impl OutputSchema {
    /// The schema of `T` (its `schemars::JsonSchema` derive), named after the type. An
    /// answer must match the schema and deserialize into `T`. The type's doc comment, if
    /// any, is the description.
    pub fn of<T: DeserializeOwned + schemars::JsonSchema>() -> OutputSchema {
        let mut schema = serde_json::to_value(schemars::schema_for!(T))
            // OK because a derived schema is plain JSON data.
            .expect("a JSON Schema serializes");
        let name = schema
            .get("title")
            .and_then(Value::as_str)
            .map(sanitize)
            .unwrap_or_else(|| "answer".to_owned());
        let description = schema
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(obj) = schema.as_object_mut() {
            obj.remove("$schema");
            obj.remove("title");
        }
        let mut out = OutputSchema::build(name, description, schema);
        // OK because `build` returned the only handle to `inner`.
        Arc::get_mut(&mut out.inner)
            .expect("a fresh schema is not shared")
            .parse = Some(|value| T::deserialize(value).map(drop).map_err(|e| e.to_string()));
        out
    }

    /// A schema of your own, named `name` (the name providers see: 1 to 64 of `a-z`,
    /// `A-Z`, `0-9`, `_` and `-`). An answer must match it (see [`OutputSchema::check`]).
    ///
    /// # Errors
    /// [`Error::Config`] when the name is not such a name, the schema is neither an object
    /// nor a boolean, or a `$ref` in it points nowhere in it (only references inside the
    /// schema are followed: `#`, `#/$defs/..`, any JSON pointer).
    pub fn new(name: impl Into<String>, schema: Value) -> Result<OutputSchema, Error> {
        let name = name.into();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(Error::Config(format!(
                "the output schema's name `{name}` is not 1 to 64 of a-z, A-Z, 0-9, _ and -"
            )));
        }
        if !schema.is_object() && !schema.is_boolean() {
            return Err(Error::Config(format!(
                "the output schema `{name}` is not a JSON Schema (an object or a boolean)"
            )));
        }
        if let Some(dangling) = dangling_ref(&schema, &schema) {
            return Err(Error::Config(format!(
                "the output schema `{name}` has a `$ref` `{dangling}` that points nowhere in it"
            )));
        }
        Ok(OutputSchema::build(name, None, schema))
    }

    fn build(name: String, description: Option<String>, schema: Value) -> OutputSchema {
        let strict = forms::openai_strict(&schema);
        let anthropic = forms::anthropic(&schema);
        OutputSchema {
            inner: Arc::new(Inner {
                name,
                description,
                schema,
                strict,
                anthropic,
                parse: None,
            }),
        }
    }

    /// The same schema with this description (what providers show the model beside the
    /// name). Defaults to the type's doc comment for [`OutputSchema::of`], else none.
    #[must_use]
    pub fn with_description(self, description: impl Into<String>) -> OutputSchema {
        self.edit(|i| i.description = Some(description.into()))
    }

    /// The same schema, sent without `strict` even where it has a strict form (for a
    /// server that refuses strict mode). Defaults to strict wherever the schema allows.
    #[must_use]
    pub fn not_strict(self) -> OutputSchema {
        self.edit(|i| i.strict = Err("strict mode was turned off".into()))
    }

    fn edit(self, f: impl FnOnce(&mut Inner)) -> OutputSchema {
        let mut inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => Inner {
                name: shared.name.clone(),
                description: shared.description.clone(),
                schema: shared.schema.clone(),
                strict: shared.strict.clone(),
                anthropic: shared.anthropic.clone(),
                parse: shared.parse,
            },
        };
        f(&mut inner);
        OutputSchema {
            inner: Arc::new(inner),
        }
    }

    /// The name providers see (`Verdict`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The description providers see, if any.
    pub fn description(&self) -> Option<&str> {
        self.inner.description.as_deref()
    }

    /// The schema answers are checked against, as given (for [`OutputSchema::of`], as
    /// derived, without its `$schema` and `title`).
    pub fn schema(&self) -> &Value {
        &self.inner.schema
    }

    /// OpenAI's strict form of the schema, sent with `strict: true`; `None` when the schema
    /// has none (then [`OutputSchema::schema`] is sent with `strict: false`).
    pub fn strict_schema(&self) -> Option<&Value> {
        self.inner.strict.as_ref().ok()
    }

    /// Why the schema has no strict form (`"its root is not an object"`), or `None` when it
    /// has one.
    pub fn why_not_strict(&self) -> Option<&str> {
        self.inner.strict.as_ref().err().map(String::as_str)
    }

    /// The form of the schema Anthropic's structured outputs (`output_config.format`)
    /// take.
    pub fn anthropic_schema(&self) -> &Value {
        &self.inner.anthropic
    }

    /// Checks an answer, the text of a reply: parses it as JSON (once a Markdown code fence
    /// around it is taken off), checks the value against the schema (see below), and for a
    /// schema made with [`OutputSchema::of`], that it deserializes into the type. Returns
    /// the value, or what is wrong with it: the text a repair turn shows the model.
    ///
    /// The JSON Schema check covers the keywords schemars emits and most others: `type`,
    /// `enum`, `const`, the object, array, string-length and number keywords, `pattern` and
    /// `patternProperties`, `anyOf`, `oneOf`, `allOf`, `not`, `if`/`then`/`else`, and `$ref`s
    /// inside the schema. It does not check `format` (an annotation), and a pattern with a
    /// lookaround, a backreference or a Unicode class constrains nothing (patterns are read
    /// by `regex_lite`); a type's own deserialization still checks what its `Deserialize`
    /// checks.
    ///
    /// # Errors
    /// What is wrong, in a few lines: `the answer is not JSON: ..`, or each problem as `at
    /// <JSON pointer>: <what>` (at most 8), or the type's deserialization error.
    pub fn check(&self, text: &str) -> Result<Value, String> {
        let json = unfenced(text);
        if json.is_empty() {
            return Err("the answer is empty".into());
        }
        let value: Value =
            serde_json::from_str(json).map_err(|e| format!("the answer is not JSON: {e}"))?;
        self.check_value(&value)?;
        Ok(value)
    }

    /// Checks a value already parsed, as [`OutputSchema::check`] does after parsing.
    ///
    /// # Errors
    /// As [`OutputSchema::check`].
    pub fn check_value(&self, value: &Value) -> Result<(), String> {
        let problems = validate::problems(&self.inner.schema, value);
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        match self.inner.parse {
            Some(parse) => parse(value).map_err(|e| format!("the answer does not fit: {e}")),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputSchema")
            .field("name", &self.inner.name)
            .field("strict", &self.inner.strict.is_ok())
            .field("schema", &self.inner.schema)
            .finish_non_exhaustive()
    }
}

impl PartialEq for OutputSchema {
    fn eq(&self, other: &OutputSchema) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
            || self.inner.name == other.inner.name
                && self.inner.description == other.inner.description
                && self.inner.schema == other.inner.schema
    }
}

/// The text inside a Markdown code fence around the whole answer (```` ```json .. ``` ````),
/// as small models and some servers write it; else the text, trimmed.
fn unfenced(text: &str) -> &str {
    let text = text.trim();
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // The info string (`json`) runs to the end of the first line.
    match body.split_once('\n') {
        Some((info, rest)) if !info.trim_start().starts_with(['{', '[', '"']) => rest.trim(),
        _ => body.trim(),
    }
}

/// The first `$ref` in `node` that points nowhere in `root`.
fn dangling_ref(root: &Value, node: &Value) -> Option<String> {
    match node {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get("$ref")
                && validate::resolve(root, r).is_none()
            {
                return Some(r.clone());
            }
            o.iter()
                // `enum` and `const` hold values, not schemas.
                .filter(|(k, _)| *k != "enum" && *k != "const")
                .find_map(|(_, v)| dangling_ref(root, v))
        }
        Value::Array(a) => a.iter().find_map(|v| dangling_ref(root, v)),
        _ => None,
    }
}

/// A type's schema title as a name providers take: `Array_of_Inner` as is, anything else
/// outside `a-zA-Z0-9_-` as `_`, at most 64 bytes.
fn sanitize(title: &str) -> String {
    let mut name: String = title
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(64);
    if name.is_empty() {
        "answer".to_owned()
    } else {
        name
    }
}

/// OpenAI's JSON Schema format object: `{name, description?, schema, strict}`, the strict
/// form with `strict: true` where the schema has one. Chat Completions nests it as
/// `response_format.json_schema`; the Responses API writes it as `text.format` with
/// `"type": "json_schema"` first (`tagged`).
#[derive(serde::Serialize)]
pub(crate) struct OpenAiFormat<'a> {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    schema: &'a Value,
    strict: bool,
}

impl<'a> OpenAiFormat<'a> {
    /// The object for `schema`; `tagged` adds `"type": "json_schema"`.
    pub(crate) fn new(schema: &'a OutputSchema, tagged: bool) -> OpenAiFormat<'a> {
        OpenAiFormat {
            kind: tagged.then_some("json_schema"),
            name: schema.name(),
            description: schema.description(),
            schema: schema.strict_schema().unwrap_or(schema.schema()),
            strict: schema.strict_schema().is_some(),
        }
    }
}

/// What a model call asks of the answer, in [`Request::output`](crate::llm::Request):
/// the schema, and whether the call is the answer turn.
///
/// A provider writes the schema as its API's structured-output request (Chat Completions
/// `response_format`, Anthropic `output_config.format` or a forced tool, the Responses
/// API's `text.format`). When [`answer_now`](OutputRequest::answer_now) is true the model is
/// to answer on this call and the agent runs none of the tools it would call: a provider
/// whose API can say so (`tool_choice: "none"`) does, so that a request that still offers
/// the tools (keeping the prompt cache's prefix) gets an answer and not a call.
///
/// A provider hands the answer over as the reply's text, whatever carried it (a forced
/// tool's input included).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OutputRequest {
    /// The schema the answer must match (shared, not copied per request).
    pub schema: OutputSchema,
    /// True when the model is to answer now: the call's tool calls, if any, are not run.
    pub answer_now: bool,
}

impl OutputRequest {
    /// A request for an answer matching `schema`; `answer_now` as the field says.
    pub fn new(schema: OutputSchema, answer_now: bool) -> OutputRequest {
        OutputRequest { schema, answer_now }
    }
}

/// A structured answer as the agent checked it: what [`AgentEvent::OutputChecked`]
/// carries and [`State::output`] keeps.
///
/// [`AgentEvent::OutputChecked`]: crate::AgentEvent::OutputChecked
/// [`State::output`]: crate::State::output
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OutputCheck {
    /// The name of the schema ([`OutputSchema::name`]).
    pub schema: String,
    /// Which answer of the run this is: 1 for the first checked, then one more for each
    /// answer and repair turn.
    pub attempt: u32,
    /// The answer as the model wrote it (the reply's text; empty for a reply that called
    /// tools instead of answering).
    pub raw: String,
    /// The value, parsed and matching the schema, or what is wrong with the answer (what
    /// the next repair turn tells the model).
    pub value: Result<Value, String>,
}

impl OutputCheck {
    /// A check of the answer `raw`, attempt `attempt`, against `schema`.
    pub fn new(schema: &OutputSchema, attempt: u32, raw: impl Into<String>) -> OutputCheck {
        let raw = raw.into();
        OutputCheck {
            schema: schema.name().to_owned(),
            attempt,
            value: schema.check(&raw),
            raw,
        }
    }

    /// True when the answer matched the schema.
    pub fn is_valid(&self) -> bool {
        self.value.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Verdict {
        score: u8,
        reasons: Vec<String>,
    }

    #[test]
    fn a_fenced_answer_is_read() {
        let schema = OutputSchema::of::<Verdict>();
        let v = json!({"score": 3, "reasons": ["a"]});
        for text in [
            r#"{"score": 3, "reasons": ["a"]}"#,
            "```json\n{\"score\": 3, \"reasons\": [\"a\"]}\n```",
            "  ```\n{\"score\": 3, \"reasons\": [\"a\"]}```  ",
        ] {
            assert_eq!(schema.check(text), Ok(v.clone()), "{text}");
        }
        assert_eq!(schema.check("  "), Err("the answer is empty".into()));
        let e = schema.check("The score is 3.").unwrap_err();
        assert!(e.starts_with("the answer is not JSON: "), "{e}");
    }

    #[test]
    fn the_type_checks_what_the_schema_cannot() {
        // The schema says an integer from 0 to 255; a float that is whole passes the
        // schema (JSON Schema's integers are numbers) and the type reads it... or not.
        let schema = OutputSchema::of::<Verdict>();
        let e = schema
            .check(r#"{"score": 3.0, "reasons": []}"#)
            .unwrap_err();
        assert!(
            e.starts_with("the answer does not fit: invalid type"),
            "{e}"
        );
        // The same schema by hand checks the schema only.
        let plain = OutputSchema::new("Verdict", schema.schema().clone()).unwrap();
        assert!(plain.check(r#"{"score": 3.0, "reasons": []}"#).is_ok());
    }

    #[test]
    fn a_schema_of_your_own_is_checked_when_made() {
        for (name, schema, why) in [
            ("", json!({}), "is not 1 to 64"),
            ("a b", json!({}), "is not 1 to 64"),
            ("ok", json!([1]), "is not a JSON Schema"),
            ("ok", json!({"$ref": "#/$defs/Gone"}), "points nowhere"),
        ] {
            let e = OutputSchema::new(name, schema).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        // `enum` values are not schemas.
        assert!(OutputSchema::new("ok", json!({"enum": [{"$ref": "x"}]})).is_ok());
        let list = OutputSchema::new("list", json!({"type": "array"})).unwrap();
        assert_eq!(list.why_not_strict(), Some("its root is not an object"));
        assert_eq!(
            list.not_strict().why_not_strict(),
            Some("strict mode was turned off")
        );
    }

    #[test]
    fn names_come_from_the_type() {
        assert_eq!(
            OutputSchema::of::<Vec<Verdict>>().name(),
            "Array_of_Verdict"
        );
        assert_eq!(sanitize("Pair<a, b>"), "Pair_a__b_");
        let described = OutputSchema::of::<Verdict>().with_description("How good.");
        assert_eq!(described.description(), Some("How good."));
        assert_eq!(described.name(), "Verdict");
    }
}
