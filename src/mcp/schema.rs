//! A check of a JSON value against a JSON Schema, for the structured results of tools
//! (`structuredContent` against the tool's `outputSchema`).
//!
//! The keywords that say what a value is: `type`, `enum`, `const`, `properties`,
//! `required`, `additionalProperties`, `patternProperties` (names only as present), `items`,
//! `prefixItems`, `minItems`, `maxItems`, `minLength`, `maxLength`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum`, `allOf`, `anyOf`, `oneOf`, `not`, and `$ref` to a
//! place in the same document (`#/$defs/...`). Other keywords (formats, patterns,
//! annotations) are accepted as they are: a value is refused only for what is sure. A
//! `$ref` to another document is never fetched (the schema's author could point the client
//! anywhere): such a part accepts every value. References are followed at most
//! [`MAX_DEPTH`] deep, so a schema that refers to itself ends.

use serde_json::Value;

/// How deep schemas are followed into each other.
const MAX_DEPTH: usize = 64;

/// Checks `value` against `schema`.
///
/// # Errors
/// Where and why the value does not fit, for people (`at /items/0: not a string`).
pub(crate) fn check(schema: &Value, value: &Value) -> Result<(), String> {
    Checker { root: schema }.check(schema, value, "", 0)
}

struct Checker<'a> {
    root: &'a Value,
}

impl Checker<'_> {
    fn check(&self, schema: &Value, value: &Value, at: &str, depth: usize) -> Result<(), String> {
        let fail = |why: String| {
            Err(format!(
                "at {}: {why}",
                if at.is_empty() { "/" } else { at }
            ))
        };
        if depth > MAX_DEPTH {
            return Ok(());
        }
        let schema = match schema {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return fail("no value is allowed here".into()),
            Value::Object(map) => map,
            _ => return Ok(()),
        };
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str)
            && let Some(target) = reference
                .strip_prefix('#')
                .and_then(|pointer| self.root.pointer(pointer))
        {
            self.check(target, value, at, depth + 1)?;
        }
        if let Some(types) = schema.get("type") {
            let names: Vec<&str> = match types {
                Value::String(t) => vec![t.as_str()],
                Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !names.is_empty() && !names.iter().any(|t| is_type(t, value)) {
                return fail(format!("not {}", names.join(" or ")));
            }
        }
        if let Some(Value::Array(choices)) = schema.get("enum")
            && !choices.iter().any(|c| same(c, value))
        {
            return fail("not one of the allowed values".into());
        }
        if let Some(constant) = schema.get("const")
            && !same(constant, value)
        {
            return fail(format!("not {constant}"));
        }
        let number = |key: &str| schema.get(key).and_then(Value::as_f64);
        if let Some(n) = value.as_f64() {
            if number("minimum").is_some_and(|m| n < m) {
                return fail(format!("{n} is below the minimum"));
            }
            if number("maximum").is_some_and(|m| n > m) {
                return fail(format!("{n} is above the maximum"));
            }
            if number("exclusiveMinimum").is_some_and(|m| n <= m) {
                return fail(format!("{n} is not above the exclusive minimum"));
            }
            if number("exclusiveMaximum").is_some_and(|m| n >= m) {
                return fail(format!("{n} is not below the exclusive maximum"));
            }
        }
        let count = |key: &str| schema.get(key).and_then(Value::as_u64);
        if let Some(text) = value.as_str() {
            let chars = text.chars().count() as u64;
            if count("minLength").is_some_and(|m| chars < m) {
                return fail("shorter than the minimum length".into());
            }
            if count("maxLength").is_some_and(|m| chars > m) {
                return fail("longer than the maximum length".into());
            }
        }
        if let Some(items) = value.as_array() {
            let n = items.len() as u64;
            if count("minItems").is_some_and(|m| n < m) {
                return fail(format!("{n} items, fewer than the minimum"));
            }
            if count("maxItems").is_some_and(|m| n > m) {
                return fail(format!("{n} items, more than the maximum"));
            }
            let prefix = schema.get("prefixItems").and_then(Value::as_array);
            let skip = prefix.map_or(0, Vec::len);
            for (i, item) in items.iter().enumerate() {
                let path = format!("{at}/{i}");
                match prefix.and_then(|p| p.get(i)) {
                    Some(s) => self.check(s, item, &path, depth + 1)?,
                    None if i >= skip => {
                        if let Some(s) = schema.get("items") {
                            self.check(s, item, &path, depth + 1)?;
                        }
                    }
                    None => {}
                }
            }
        }
        if let Some(object) = value.as_object() {
            if let Some(Value::Array(required)) = schema.get("required") {
                for name in required.iter().filter_map(Value::as_str) {
                    if !object.contains_key(name) {
                        return fail(format!("{name:?} is required"));
                    }
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let patterned = schema.get("patternProperties").is_some();
            for (name, item) in object {
                let path = format!("{at}/{name}");
                match properties.and_then(|p| p.get(name)) {
                    Some(s) => self.check(s, item, &path, depth + 1)?,
                    // A name a pattern may cover is not judged: patterns are not checked.
                    None if patterned => {}
                    None => {
                        if let Some(extra) = schema.get("additionalProperties") {
                            self.check(extra, item, &path, depth + 1)?;
                        }
                    }
                }
            }
        }
        if let Some(Value::Array(all)) = schema.get("allOf") {
            for s in all {
                self.check(s, value, at, depth + 1)?;
            }
        }
        if let Some(Value::Array(any)) = schema.get("anyOf")
            && !any
                .iter()
                .any(|s| self.check(s, value, at, depth + 1).is_ok())
        {
            return fail("fits none of anyOf".into());
        }
        if let Some(Value::Array(one)) = schema.get("oneOf") {
            let fits = one
                .iter()
                .filter(|s| self.check(s, value, at, depth + 1).is_ok())
                .count();
            if fits != 1 {
                return fail(format!("fits {fits} of oneOf, not exactly one"));
            }
        }
        if let Some(not) = schema.get("not")
            && self.check(not, value, at, depth + 1).is_ok()
        {
            return fail("fits the schema of not".into());
        }
        Ok(())
    }
}

fn is_type(name: &str, value: &Value) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
}

/// Equality as JSON Schema means it: `1` and `1.0` are the same number.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_checked_against_the_keywords_that_say_what_they_are() {
        let schema = json!({
            "$defs": {"temp": {"type": "number", "minimum": -100}},
            "type": "object",
            "properties": {
                "t": {"$ref": "#/$defs/temp"},
                "unit": {"enum": ["C", "F"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "far": {"$ref": "https://example.invalid/schema.json"},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            },
            "required": ["t"],
            "additionalProperties": false,
        });
        assert_eq!(
            check(&schema, &json!({"t": 1.5, "unit": "C", "far": [1]})),
            Ok(())
        );
        for (value, why) in [
            (json!({}), "at /: \"t\" is required"),
            (json!({"t": "hot"}), "at /t: not number"),
            (json!({"t": -200}), "at /t: -200 is below the minimum"),
            (
                json!({"t": 1, "unit": "K"}),
                "at /unit: not one of the allowed values",
            ),
            (json!({"t": 1, "tags": ["a", 2]}), "at /tags/1: not string"),
            (
                json!({"t": 1, "tags": ["a", "b", "c"]}),
                "at /tags: 3 items, more than the maximum",
            ),
            (json!({"t": 1, "x": 1}), "at /x: no value is allowed here"),
            (
                json!({"t": 1, "either": 1.5}),
                "at /either: fits none of anyOf",
            ),
            (json!([]), "at /: not object"),
        ] {
            assert_eq!(check(&schema, &value).unwrap_err(), why, "{value}");
        }
    }

    #[test]
    fn a_schema_that_refers_to_itself_ends() {
        let schema = json!({"$ref": "#"});
        assert_eq!(check(&schema, &json!(1)), Ok(()));
        let list = json!({"type": "object", "properties": {"next": {"$ref": "#"}}});
        assert_eq!(check(&list, &json!({"next": {"next": {}}})), Ok(()));
        assert!(check(&list, &json!({"next": {"next": 3}})).is_err());
    }
}
