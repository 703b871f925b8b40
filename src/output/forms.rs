//! The forms of an answer's schema that providers send: OpenAI's strict form and the
//! subset Anthropic's structured outputs take.
//!
//! Both are made once, when the [`OutputSchema`](super::OutputSchema) is, and only ever
//! sent: answers are checked against the schema as given, so what a form leaves out (a
//! `maxLength` Anthropic cannot constrain, say) is still checked, and a violation gets a
//! repair turn.

use serde_json::{Map, Value};

use super::validate::resolve;

/// Keywords that say nothing to the model's decoder: dropped from both forms.
const ANNOTATIONS: [&str; 9] = [
    "$schema",
    "$id",
    "$comment",
    "title",
    "default",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
];

/// OpenAI's string formats in strict mode; schemars' numeric formats (`uint8`, `double`)
/// are not among them, and their ranges are in `minimum` / `maximum` anyway.
const OPENAI_FORMATS: [&str; 9] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Anthropic's string formats.
const ANTHROPIC_FORMATS: [&str; 10] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords OpenAI's strict mode does not take and that only narrow what is valid: left out
/// of the strict form and written into the description instead, so that the model may still
/// follow them (the check of the answer enforces them).
const OPENAI_HINTS: [&str; 6] = [
    "minLength",
    "maxLength",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "propertyNames",
];

/// Keywords with no strict form: a schema that uses them is sent without `strict`.
const OPENAI_REFUSED: [&str; 14] = [
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "patternProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "prefixItems",
    "additionalItems",
];

/// Keywords Anthropic's structured outputs do not take: written into the description.
const ANTHROPIC_HINTS: [&str; 14] = [
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "contains",
];

/// The most nested objects and properties OpenAI's strict mode takes.
const OPENAI_MAX_DEPTH: usize = 10;
const OPENAI_MAX_PROPERTIES: usize = 5000;

/// The schema in OpenAI's strict form, or why it has none.
///
/// Strict mode wants the root to be an object, every object closed (`additionalProperties:
/// false`) with every property in `required`, and a subset of the keywords. What changes:
/// every property becomes required (a field the model may leave out must now be given:
/// still a valid value, and an `Option` field stays nullable), objects are closed (serde
/// ignores unknown fields, so closing loses nothing), `oneOf` becomes `anyOf` (the answer is
/// still checked against `oneOf`), a `$ref` with keywords beside it is inlined, annotations
/// and unknown formats go, and the keywords of [`OPENAI_HINTS`] move into the description.
/// A map (`additionalProperties` with a schema), a tuple (`prefixItems`), a schema that
/// accepts anything, and the keywords of [`OPENAI_REFUSED`] have no strict form.
pub(crate) fn openai_strict(schema: &Value) -> Result<Value, String> {
    let root_type = resolve_root(schema).and_then(|s| s.get("type"));
    if root_type != Some(&Value::String("object".into())) {
        return Err("its root is not an object".into());
    }
    let mut form = Form {
        root: schema,
        strict: true,
        properties: 0,
    };
    let mut out = form.node(schema, 0)?;
    let defs = defs_of(schema);
    if !defs.is_empty() {
        let mut strict_defs = Map::new();
        for (name, def) in defs {
            strict_defs.insert(name.to_owned(), form.node(def, 1)?);
        }
        if let Value::Object(o) = &mut out {
            o.insert("$defs".into(), Value::Object(strict_defs));
        }
    }
    if form.properties > OPENAI_MAX_PROPERTIES {
        return Err(format!(
            "it has {} properties, over strict mode's {OPENAI_MAX_PROPERTIES}",
            form.properties
        ));
    }
    // References into `definitions` now point into `$defs`.
    Ok(rename_definitions(out))
}

/// The schema as Anthropic's structured outputs (`output_config.format`) take it: objects
/// closed, `oneOf` as `anyOf`, a list of types as an `anyOf` of each, `$ref`s with keywords
/// beside them inlined, annotations gone, and the constraints it does not take
/// ([`ANTHROPIC_HINTS`], formats it does not know, `minItems` above 1) moved into the
/// description, as Anthropic's own SDKs do. A map (`additionalProperties` with a schema)
/// stays as it is.
pub(crate) fn anthropic(schema: &Value) -> Value {
    let mut form = Form {
        root: schema,
        strict: false,
        properties: 0,
    };
    // The lenient form fails only on a `$ref` that points nowhere, which
    // `OutputSchema::new` refuses: the schema is then sent as it is.
    let mut out = form.node(schema, 0).unwrap_or_else(|_| schema.clone());
    let defs = defs_of(schema);
    if !defs.is_empty() {
        let mut converted = Map::new();
        for (name, def) in defs {
            converted.insert(
                name.to_owned(),
                form.node(def, 1).unwrap_or_else(|_| def.clone()),
            );
        }
        if let Value::Object(o) = &mut out {
            o.insert("$defs".into(), Value::Object(converted));
        }
    }
    rename_definitions(out)
}

/// The schema at the root, through a `$ref` the root is made of.
fn resolve_root(schema: &Value) -> Option<&Value> {
    let mut at = schema;
    for _ in 0..8 {
        match at.get("$ref").and_then(Value::as_str) {
            Some(r) if at.get("type").is_none() => at = resolve(schema, r)?,
            _ => return Some(at),
        }
    }
    Some(at)
}

/// The definitions of the root, in `$defs` and in draft 7's `definitions` (the forms keep
/// them all in `$defs`; a node loses both containers).
fn defs_of(schema: &Value) -> Vec<(&str, &Value)> {
    let mut out = Vec::new();
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = schema.get(key) {
            out.extend(defs.iter().map(|(name, def)| (name.as_str(), def)));
        }
    }
    out
}

/// Moves `#/definitions/..` references to `#/$defs/..`, where the forms keep them.
fn rename_definitions(value: Value) -> Value {
    match value {
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        let r = match r.strip_prefix("#/definitions/") {
                            Some(rest) => format!("#/$defs/{rest}"),
                            None => r,
                        };
                        (k, Value::String(r))
                    }
                    (_, v) => (k, rename_definitions(v)),
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(rename_definitions).collect()),
        other => other,
    }
}

struct Form<'a> {
    root: &'a Value,
    /// OpenAI's strict form (fails on what it cannot take), or Anthropic's (never fails).
    strict: bool,
    properties: usize,
}

impl Form<'_> {
    /// One schema in the form, `depth` the objects around it.
    fn node(&mut self, schema: &Value, depth: usize) -> Result<Value, String> {
        let mut s = match schema {
            Value::Object(s) => s.clone(),
            Value::Bool(_) if self.strict => {
                return Err("a part of it accepts any value".into());
            }
            other => return Ok(other.clone()),
        };
        for key in ANNOTATIONS {
            s.remove(key);
        }
        s.remove("$defs");
        s.remove("definitions");
        // A `$ref` with keywords beside it applies both; neither form takes that, so the
        // target's keywords are merged in (the keywords beside it win, their properties
        // and required are joined).
        if let Some(Value::String(r)) = s.get("$ref").cloned()
            && s.len() > 1
        {
            let Some(Value::Object(target)) = resolve(self.root, &r) else {
                return Err(format!("its `$ref` `{r}` points nowhere"));
            };
            s.remove("$ref");
            merge(&mut s, target);
            return self.node(&Value::Object(s), depth);
        }
        if self.strict {
            if let Some(key) = OPENAI_REFUSED.iter().find(|k| s.contains_key(**k)) {
                return Err(format!("it uses `{key}`, which strict mode does not take"));
            }
            if s.get("items").is_some_and(Value::is_array) {
                return Err("it has a tuple (`items` as a list)".into());
            }
        }
        if let Some(one) = s.remove("oneOf") {
            s.insert("anyOf".into(), one);
        }
        if let Some(Value::Array(all)) = s.get("allOf").cloned() {
            if all.len() == 1 {
                s.remove("allOf");
                if let Value::Object(only) = &all[0] {
                    merge(&mut s, only);
                }
                return self.node(&Value::Object(s), depth);
            } else if self.strict {
                return Err("it uses `allOf`, which strict mode does not take".into());
            }
        }
        if !self.strict
            && let Some(Value::Array(types)) = s.get("type").cloned()
            && types.len() > 1
        {
            return self.split_types(s, &types, depth);
        }
        let is_object =
            s.get("type") == Some(&Value::String("object".into())) || s.contains_key("properties");
        if is_object {
            self.object(&mut s, depth)?;
        }
        if let Some(items) = s.get("items").cloned()
            && items.is_object()
        {
            s.insert("items".into(), self.node(&items, depth)?);
        } else if self.strict
            && s.get("type") == Some(&Value::String("array".into()))
            && !s.contains_key("items")
        {
            return Err("an array of it has no `items` schema".into());
        }
        for key in ["anyOf", "allOf"] {
            if let Some(Value::Array(branches)) = s.get(key).cloned() {
                let branches = branches
                    .iter()
                    .map(|b| self.node(b, depth))
                    .collect::<Result<Vec<_>, _>>()?;
                s.insert(key.into(), Value::Array(branches));
            }
        }
        self.hints(&mut s);
        Ok(Value::Object(s))
    }

    fn object(&mut self, s: &mut Map<String, Value>, depth: usize) -> Result<(), String> {
        if self.strict && depth >= OPENAI_MAX_DEPTH {
            return Err(format!(
                "its objects nest deeper than strict mode's {OPENAI_MAX_DEPTH} levels"
            ));
        }
        match s.get("additionalProperties") {
            None | Some(Value::Bool(_)) => {
                if self.strict && s.get("additionalProperties") == Some(&Value::Bool(true)) {
                    return Err("an object of it takes any property".into());
                }
                s.insert("additionalProperties".into(), Value::Bool(false));
            }
            Some(_) if self.strict => {
                return Err("it has a map (`additionalProperties` with a schema)".into());
            }
            Some(_) => {}
        }
        if let Some(Value::Object(properties)) = s.get("properties").cloned() {
            self.properties += properties.len();
            let mut converted = Map::new();
            for (name, property) in &properties {
                converted.insert(name.clone(), self.node(property, depth + 1)?);
            }
            if self.strict {
                let all = properties.keys().cloned().map(Value::String).collect();
                s.insert("required".into(), Value::Array(all));
            }
            s.insert("properties".into(), Value::Object(converted));
        } else if self.strict {
            s.insert("properties".into(), Value::Object(Map::new()));
            s.insert("required".into(), Value::Array(Vec::new()));
        }
        Ok(())
    }

    /// `{"type": ["string", "null"], ..}` as `{"anyOf": [{"type": "string", ..}, {"type":
    /// "null"}]}`: each branch keeps the keywords of its type.
    fn split_types(
        &mut self,
        mut s: Map<String, Value>,
        types: &[Value],
        depth: usize,
    ) -> Result<Value, String> {
        s.remove("type");
        let description = s.remove("description");
        let mut branches = Vec::new();
        for t in types.iter().filter_map(Value::as_str) {
            let mut branch = Map::new();
            branch.insert("type".into(), Value::String(t.to_owned()));
            for (key, value) in &s {
                if applies_to(key, t) {
                    branch.insert(key.clone(), value.clone());
                }
            }
            branches.push(self.node(&Value::Object(branch), depth)?);
        }
        let mut out = Map::new();
        if let Some(d) = description {
            out.insert("description".into(), d);
        }
        out.insert("anyOf".into(), Value::Array(branches));
        Ok(Value::Object(out))
    }

    /// Moves the keywords the form does not take into the description, and drops the
    /// formats it does not know.
    fn hints(&self, s: &mut Map<String, Value>) {
        let (hints, formats): (&[&str], &[&str]) = if self.strict {
            (&OPENAI_HINTS, &OPENAI_FORMATS)
        } else {
            (&ANTHROPIC_HINTS, &ANTHROPIC_FORMATS)
        };
        let mut moved = Vec::new();
        for key in hints {
            if let Some(value) = s.remove(*key) {
                moved.push(format!("{key}: {value}"));
            }
        }
        if !self.strict
            && let Some(min) = s.get("minItems").and_then(Value::as_u64)
            && min > 1
        {
            s.remove("minItems");
            moved.push(format!("minItems: {min}"));
        }
        if let Some(Value::String(format)) = s.get("format")
            && !formats.contains(&format.as_str())
        {
            // A numeric format (`uint8`) repeats the range; a string format it does not know
            // is worth saying.
            if s.get("type") == Some(&Value::String("string".into())) {
                moved.push(format!("format: {format}"));
            }
            s.remove("format");
        }
        if moved.is_empty() {
            return;
        }
        let note = format!("{{{}}}", moved.join(", "));
        let description = match s.remove("description") {
            Some(Value::String(d)) => format!("{d}\n\n{note}"),
            _ => note,
        };
        s.insert("description".into(), Value::String(description));
    }
}

/// Whether a keyword constrains values of JSON type `t`.
fn applies_to(key: &str, t: &str) -> bool {
    const STRING: &[&str] = &["minLength", "maxLength", "pattern", "format"];
    const NUMBER: &[&str] = &[
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "format",
    ];
    const ARRAY: &[&str] = &[
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "contains",
    ];
    const OBJECT: &[&str] = &[
        "properties",
        "required",
        "additionalProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
    ];
    match t {
        "string" => STRING.contains(&key),
        "integer" | "number" => NUMBER.contains(&key),
        "array" => ARRAY.contains(&key),
        "object" => OBJECT.contains(&key),
        _ => false,
    }
}

/// Merges `target`'s keywords into `s`: those of `s` win, `properties` and `required` are
/// joined.
fn merge(s: &mut Map<String, Value>, target: &Map<String, Value>) {
    for (key, value) in target {
        match (key.as_str(), s.get_mut(key)) {
            ("properties", Some(Value::Object(mine))) => {
                if let Value::Object(theirs) = value {
                    for (name, p) in theirs {
                        mine.entry(name.clone()).or_insert_with(|| p.clone());
                    }
                }
            }
            ("required", Some(Value::Array(mine))) => {
                for r in value.as_array().into_iter().flatten() {
                    if !mine.contains(r) {
                        mine.push(r.clone());
                    }
                }
            }
            (_, Some(_)) => {}
            (_, None) => {
                s.insert(key.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What schemars writes for a struct with an `Option`, a defaulted `Vec`, a `u8`, a
    /// unit enum, an internally tagged enum (a variant as a `$ref` beside its tag) and a
    /// set.
    fn derived() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Verdict",
            "description": "A verdict.",
            "type": "object",
            "properties": {
                "score": {"description": "The score.", "type": "integer", "format": "uint8",
                          "minimum": 0, "maximum": 255},
                "note": {"type": ["string", "null"], "maxLength": 40},
                "tags": {"type": "array", "default": [], "items": {"type": "string"},
                         "uniqueItems": true},
                "kind": {"$ref": "#/$defs/Kind"},
                "tagged": {"$ref": "#/$defs/Tagged"},
            },
            "required": ["score", "kind", "tagged"],
            "$defs": {
                "Kind": {"type": "string", "enum": ["Good", "Bad"]},
                "Inner": {"type": "object", "properties": {"x": {"type": "integer"}},
                          "required": ["x"]},
                "Tagged": {"oneOf": [
                    {"type": "object", "properties": {"t": {"type": "string", "const": "B"}},
                     "$ref": "#/$defs/Inner", "required": ["t"]},
                    {"type": "object", "properties": {"t": {"type": "string", "const": "C"}},
                     "required": ["t"]},
                ]},
            },
        })
    }

    #[test]
    fn the_strict_form_closes_objects_requires_every_property_and_moves_hints() {
        let strict = openai_strict(&derived()).unwrap();
        let closed = json!({"type": "object", "properties": {"x": {"type": "integer"}},
                            "required": ["x"], "additionalProperties": false});
        assert_eq!(
            strict,
            json!({
                "description": "A verdict.",
                "type": "object",
                "properties": {
                    "score": {"description": "The score.", "type": "integer",
                              "minimum": 0, "maximum": 255},
                    "note": {"type": ["string", "null"], "description": "{maxLength: 40}"},
                    "tags": {"type": "array", "items": {"type": "string"},
                             "description": "{uniqueItems: true}"},
                    "kind": {"$ref": "#/$defs/Kind"},
                    "tagged": {"$ref": "#/$defs/Tagged"},
                },
                "required": ["kind", "note", "score", "tagged", "tags"],
                "additionalProperties": false,
                "$defs": {
                    "Inner": closed,
                    "Kind": {"type": "string", "enum": ["Good", "Bad"]},
                    "Tagged": {"anyOf": [
                        {"type": "object",
                         "properties": {"t": {"type": "string", "const": "B"},
                                        "x": {"type": "integer"}},
                         "required": ["t", "x"], "additionalProperties": false},
                        {"type": "object", "properties": {"t": {"type": "string", "const": "C"}},
                         "required": ["t"], "additionalProperties": false},
                    ]},
                },
            })
        );
    }

    #[test]
    fn what_has_no_strict_form_says_why() {
        let cases = [
            (
                json!({"type": "array", "items": {"type": "string"}}),
                "its root is not an object",
            ),
            (
                json!({"type": "object", "properties": {"m": {"type": "object",
                    "additionalProperties": {"type": "number"}}}}),
                "it has a map (`additionalProperties` with a schema)",
            ),
            (
                json!({"type": "object", "properties": {"p": {"type": "array",
                    "prefixItems": [{"type": "integer"}], "items": false}}}),
                "it uses `prefixItems`, which strict mode does not take",
            ),
            (
                json!({"type": "object", "properties": {"any": true}}),
                "a part of it accepts any value",
            ),
            (
                json!({"type": "object", "properties": {"a": {"allOf": [{"type": "string"},
                    {"maxLength": 3}]}}}),
                "it uses `allOf`, which strict mode does not take",
            ),
        ];
        for (schema, why) in cases {
            assert_eq!(openai_strict(&schema).unwrap_err(), why, "{schema}");
        }
        // Eleven nested objects.
        let mut deep = json!({"type": "object", "properties": {}});
        for _ in 0..10 {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        assert_eq!(
            openai_strict(&deep).unwrap_err(),
            "its objects nest deeper than strict mode's 10 levels"
        );
    }

    #[test]
    fn anthropic_takes_no_ranges_and_no_lists_of_types() {
        let form = anthropic(&derived());
        assert_eq!(
            form["properties"]["score"],
            json!({"type": "integer", "description": "The score.\n\n{minimum: 0, maximum: 255}"})
        );
        assert_eq!(
            form["properties"]["note"],
            json!({"anyOf": [
                {"type": "string", "description": "{maxLength: 40}"},
                {"type": "null"},
            ]})
        );
        assert_eq!(form["additionalProperties"], json!(false));
        // Properties stay optional where they were.
        assert_eq!(form["required"], json!(["score", "kind", "tagged"]));
        assert_eq!(
            form["$defs"]["Tagged"]["anyOf"][0]["required"],
            json!(["t", "x"])
        );
        assert!(form.get("$schema").is_none() && form.get("title").is_none());
        // Draft 7's definitions move to $defs, with their references.
        let old = json!({"type": "object", "properties": {"k": {"$ref": "#/definitions/K"}},
                         "definitions": {"K": {"type": "integer"}}});
        let form = anthropic(&old);
        assert_eq!(form["properties"]["k"], json!({"$ref": "#/$defs/K"}));
        assert_eq!(form["$defs"]["K"], json!({"type": "integer"}));
        assert!(form.get("definitions").is_none());
        let strict = openai_strict(&old).unwrap();
        assert_eq!(strict["properties"]["k"], json!({"$ref": "#/$defs/K"}));
        assert!(strict.get("definitions").is_none());
    }
}
