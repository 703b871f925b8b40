//! Checks a JSON value against a JSON Schema: the subset schemars emits, and the rest of
//! the keywords a hand-written schema for a model's answer uses. The one check of the crate:
//! structured answers (`output`) and MCP tools' structured results (`mcp`) both use it.
//!
//! Checked: `type` (one or a list), `enum`, `const`, `properties`, `patternProperties`,
//! `required`, `additionalProperties`, `propertyNames`, `minProperties`, `maxProperties`,
//! `items`, `prefixItems` (and draft 7's list form of `items` with `additionalItems`),
//! `minItems`, `maxItems`, `uniqueItems`, `contains`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum` (the number form, and draft 4's boolean form),
//! `multipleOf`, `minLength`, `maxLength`, `pattern`, `anyOf`, `oneOf`, `allOf`, `not`,
//! `if` / `then` / `else`, `dependentRequired`, and `$ref` to the schema itself (`#`) or into
//! it (`#/$defs/Name`, `#/definitions/Name`, any JSON pointer), beside the other keywords of
//! its schema as in draft 2020-12. Not checked: `format` (an annotation, as the
//! specification makes it by default), and annotations.
//!
//! Patterns are regular expressions as `regex_lite` reads them, which covers what schemas
//! use (classes, anchors, repetition, alternation, groups); a pattern it cannot read (a
//! lookaround, a backreference, a Unicode property class, or one past the size limits)
//! constrains nothing, and with such a pattern in `patternProperties`,
//! `additionalProperties` is not checked either. A pattern matches anywhere in the string
//! unless anchored, as in ECMA-262.
//!
//! Numbers compare by value (`1` equals `1.0`), as JSON Schema says.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use regex_lite::{Regex, RegexBuilder};
use serde_json::{Map, Value};

/// How many problems one check reports at most: enough to fix an answer, short enough for a
/// repair message.
const MAX_PROBLEMS: usize = 8;

/// How deep `$ref`s may nest without the value getting deeper: a schema that refers to
/// itself in a loop stops here.
const MAX_DEPTH: usize = 64;

/// The size of a compiled pattern, at most: a schema's pattern past it constrains nothing.
const MAX_PATTERN_SIZE: usize = 1 << 20;

/// Each pattern of a schema, compiled once per check and shared by its branches (`None`:
/// the pattern cannot be read).
type Patterns<'s> = Rc<RefCell<HashMap<&'s str, Option<Rc<Regex>>>>>;

/// What a `$ref` the check cannot follow (one to another document, one that points nowhere,
/// a loop that never reaches the value) makes of the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unfollowed {
    /// A problem: the schema is the program's own (a structured answer's), so it is wrong.
    Fails,
    /// Nothing: the schema is another party's (an MCP tool's), whose other documents are
    /// never fetched, and a value is refused only for what is sure.
    Accepts,
}

/// The problems of `value` against `schema` (whose `$ref`s resolve in `schema` itself), each
/// as `at <pointer>: <what>`; empty when it matches.
pub(crate) fn problems(schema: &Value, value: &Value) -> Vec<String> {
    problems_with(schema, value, Unfollowed::Fails)
}

/// [`problems`], with the `$ref`s it cannot follow taken as `unfollowed` says.
pub(crate) fn problems_with(schema: &Value, value: &Value, unfollowed: Unfollowed) -> Vec<String> {
    let mut check = Check {
        root: schema,
        path: Vec::new(),
        problems: Vec::new(),
        depth: 0,
        unfollowed,
        patterns: Rc::default(),
    };
    check.value(schema, value);
    check.problems
}

/// Where a `$ref` points in `root`, if anywhere.
pub(crate) fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    // `Value::pointer` unescapes `~1` and `~0`.
    root.pointer(pointer)
}

struct Check<'s> {
    root: &'s Value,
    path: Vec<String>,
    problems: Vec<String>,
    depth: usize,
    unfollowed: Unfollowed,
    patterns: Patterns<'s>,
}

impl<'s> Check<'s> {
    fn fail(&mut self, what: impl Into<String>) {
        if self.problems.len() < MAX_PROBLEMS {
            let at = if self.path.is_empty() {
                "at the top level".to_owned()
            } else {
                format!("at `/{}`", self.path.join("/"))
            };
            self.problems.push(format!("{at}: {}", what.into()));
        }
    }

    /// Whether `value` matches `schema`, without recording anything.
    fn matches(&self, schema: &'s Value, value: &Value) -> bool {
        self.branch(schema, value).is_empty()
    }

    /// The problems of `value` against `schema`, checked on its own (an `anyOf` branch).
    fn branch(&self, schema: &'s Value, value: &Value) -> Vec<String> {
        let mut sub = Check {
            root: self.root,
            path: self.path.clone(),
            problems: Vec::new(),
            depth: self.depth,
            unfollowed: self.unfollowed,
            patterns: self.patterns.clone(),
        };
        sub.value(schema, value);
        sub.problems
    }

    fn at(&mut self, segment: impl Into<String>, schema: &'s Value, value: &Value) {
        // A JSON pointer escapes `~` and `/`.
        let segment = segment.into().replace('~', "~0").replace('/', "~1");
        self.path.push(segment);
        let depth = std::mem::replace(&mut self.depth, 0);
        self.value(schema, value);
        self.depth = depth;
        self.path.pop();
    }

    fn value(&mut self, schema: &'s Value, value: &Value) {
        let s = match schema {
            Value::Bool(true) => return,
            Value::Bool(false) => return self.fail("no value is allowed here"),
            Value::Object(s) => s,
            // Not a schema: `OutputSchema::new` refuses such schemas, so only a nested
            // keyword of the wrong shape gets here; it constrains nothing.
            _ => return,
        };
        if let Some(Value::String(reference)) = s.get("$ref") {
            self.reference(reference, value);
        }
        if let Some(types) = s.get("type")
            && !type_matches(types, value)
        {
            return self.fail(format!(
                "expected {}, got {}",
                type_names(types),
                describe(value)
            ));
        }
        if let Some(Value::Array(allowed)) = s.get("enum")
            && !allowed.iter().any(|a| json_eq(a, value))
        {
            self.fail(format!(
                "{} is not one of {}",
                short(value),
                short(&Value::Array(allowed.clone()))
            ));
        }
        if let Some(expected) = s.get("const")
            && !json_eq(expected, value)
        {
            self.fail(format!(
                "expected {}, got {}",
                short(expected),
                short(value)
            ));
        }
        match value {
            Value::Object(object) => self.object(s, object),
            Value::Array(items) => self.array(s, items),
            Value::String(text) => self.string(s, text),
            Value::Number(_) => self.number(s, value),
            Value::Bool(_) | Value::Null => {}
        }
        self.combinations(s, value);
    }

    fn reference(&mut self, reference: &str, value: &Value) {
        let lenient = self.unfollowed == Unfollowed::Accepts;
        let Some(target) = resolve(self.root, reference) else {
            if lenient {
                return;
            }
            return self.fail(format!("the schema's `$ref` `{reference}` points nowhere"));
        };
        if self.depth >= MAX_DEPTH {
            if lenient {
                return;
            }
            return self.fail("the schema's `$ref`s loop without end");
        }
        self.depth += 1;
        self.value(target, value);
        self.depth -= 1;
    }

    fn combinations(&mut self, s: &'s Map<String, Value>, value: &Value) {
        if let Some(Value::Array(all)) = s.get("allOf") {
            for branch in all {
                self.value(branch, value);
            }
        }
        if let Some(Value::Array(any)) = s.get("anyOf") {
            self.alternatives(any, value, false);
        }
        if let Some(Value::Array(one)) = s.get("oneOf") {
            self.alternatives(one, value, true);
        }
        if let Some(not) = s.get("not")
            && self.matches(not, value)
        {
            self.fail(format!("{} matches a schema it must not", short(value)));
        }
        if let Some(condition) = s.get("if") {
            let then = if self.matches(condition, value) {
                s.get("then")
            } else {
                s.get("else")
            };
            if let Some(then) = then {
                self.value(then, value);
            }
        }
    }

    /// `anyOf` (`exactly_one` false) or `oneOf`: the problems of the branch that came
    /// closest tell what to fix.
    fn alternatives(&mut self, branches: &'s [Value], value: &Value, exactly_one: bool) {
        let mut passed = 0;
        let mut closest: Option<Vec<String>> = None;
        for branch in branches {
            let problems = self.branch(branch, value);
            if problems.is_empty() {
                passed += 1;
            } else if closest.as_ref().is_none_or(|c| problems.len() < c.len()) {
                closest = Some(problems);
            }
        }
        if passed == 0 {
            let closest = closest.unwrap_or_default();
            // A branch that fails only on its type says nothing the summary does not.
            let hint = match closest.first() {
                Some(first) if closest.len() == 1 && first.contains(": expected ") => String::new(),
                Some(_) => format!(" (the closest: {})", closest.join("; ")),
                None => String::new(),
            };
            let kinds: Vec<String> = branches.iter().map(|b| alternative(self.root, b)).collect();
            self.fail(format!(
                "{} matches none of the alternatives: {}{hint}",
                short(value),
                kinds.join(", or ")
            ));
        } else if exactly_one && passed > 1 {
            self.fail(format!(
                "{} matches {passed} of the alternatives, and must match exactly one",
                short(value)
            ));
        }
    }

    /// The compiled `pattern`, or `None` when it cannot be read (then it constrains nothing).
    fn pattern(&self, pattern: &'s str) -> Option<Rc<Regex>> {
        self.patterns
            .borrow_mut()
            .entry(pattern)
            .or_insert_with(|| {
                RegexBuilder::new(pattern)
                    .size_limit(MAX_PATTERN_SIZE)
                    .build()
                    .ok()
                    .map(Rc::new)
            })
            .clone()
    }

    fn object(&mut self, s: &'s Map<String, Value>, object: &Map<String, Value>) {
        if let Some(Value::Array(required)) = s.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    self.fail(format!("the property `{name}` is missing"));
                }
            }
        }
        if let Some(Value::Object(dependent)) = s.get("dependentRequired") {
            for (name, needs) in dependent {
                if !object.contains_key(name) {
                    continue;
                }
                for need in needs
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    if !object.contains_key(need) {
                        self.fail(format!(
                            "the property `{need}` is missing (`{name}` needs it)"
                        ));
                    }
                }
            }
        }
        let properties = s.get("properties").and_then(Value::as_object);
        let additional = s.get("additionalProperties");
        let mut patterned = Vec::new();
        // Whether every pattern could be read: a name one that cannot be read might cover is
        // not judged by `additionalProperties`.
        let mut readable = true;
        if let Some(Value::Object(patterns)) = s.get("patternProperties") {
            for (pattern, schema) in patterns {
                match self.pattern(pattern) {
                    Some(re) => patterned.push((re, schema)),
                    None => readable = false,
                }
            }
        }
        for (name, item) in object {
            let named = properties.and_then(|p| p.get(name));
            if let Some(schema) = named {
                self.at(name.as_str(), schema, item);
            }
            let mut matched = false;
            for (re, schema) in &patterned {
                if re.is_match(name) {
                    matched = true;
                    self.at(name.as_str(), schema, item);
                }
            }
            if named.is_some() || matched {
                // Not an additional property.
            } else if let Some(additional) = additional
                && readable
            {
                if additional == &Value::Bool(false) {
                    self.fail(format!("the property `{name}` is not allowed"));
                } else {
                    self.at(name.as_str(), additional, item);
                }
            }
            if let Some(names) = s.get("propertyNames") {
                let key = Value::String(name.clone());
                if !self.matches(names, &key) {
                    self.fail(format!("the property name `{name}` is not allowed"));
                }
            }
        }
        let len = object.len() as f64;
        if let Some(min) = s.get("minProperties").and_then(Value::as_f64)
            && len < min
        {
            self.fail(format!("expected at least {min} properties, got {len}"));
        }
        if let Some(max) = s.get("maxProperties").and_then(Value::as_f64)
            && len > max
        {
            self.fail(format!("expected at most {max} properties, got {len}"));
        }
    }

    fn array(&mut self, s: &'s Map<String, Value>, items: &[Value]) {
        // The schemas of the leading items (2020-12's `prefixItems`, or draft 7's list form
        // of `items`), then the schema of every item after them.
        let (prefix, rest) = match (s.get("prefixItems"), s.get("items")) {
            (Some(Value::Array(prefix)), rest) => (prefix.as_slice(), rest),
            (None, Some(Value::Array(prefix))) => (prefix.as_slice(), s.get("additionalItems")),
            (_, rest) => (&[][..], rest),
        };
        for (i, item) in items.iter().enumerate() {
            match prefix.get(i).or(rest) {
                Some(Value::Bool(false)) => {
                    self.fail(format!(
                        "expected at most {} items, got {}",
                        prefix.len(),
                        items.len()
                    ));
                    break;
                }
                Some(schema) => self.at(i.to_string(), schema, item),
                None => {}
            }
        }
        let len = items.len() as f64;
        if let Some(min) = s.get("minItems").and_then(Value::as_f64)
            && len < min
        {
            self.fail(format!("expected at least {min} items, got {len}"));
        }
        if let Some(max) = s.get("maxItems").and_then(Value::as_f64)
            && len > max
        {
            self.fail(format!("expected at most {max} items, got {len}"));
        }
        if s.get("uniqueItems") == Some(&Value::Bool(true)) {
            'outer: for (i, a) in items.iter().enumerate() {
                for b in &items[i + 1..] {
                    if json_eq(a, b) {
                        self.fail(format!("the items must be unique; {} repeats", short(a)));
                        break 'outer;
                    }
                }
            }
        }
        if let Some(contains) = s.get("contains")
            && !items.iter().any(|item| self.matches(contains, item))
        {
            self.fail("no item matches the schema of `contains`");
        }
    }

    fn string(&mut self, s: &'s Map<String, Value>, text: &str) {
        let len = text.chars().count() as f64;
        if let Some(min) = s.get("minLength").and_then(Value::as_f64)
            && len < min
        {
            self.fail(format!("expected at least {min} characters, got {len}"));
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_f64)
            && len > max
        {
            self.fail(format!("expected at most {max} characters, got {len}"));
        }
        if let Some(Value::String(pattern)) = s.get("pattern")
            && let Some(re) = self.pattern(pattern)
            && !re.is_match(text)
        {
            self.fail(format!(
                "{} does not match the pattern `{pattern}`",
                short(&Value::String(text.to_owned()))
            ));
        }
    }

    fn number(&mut self, s: &'s Map<String, Value>, value: &Value) {
        let Some(n) = value.as_f64() else { return };
        let shown = short(value);
        let bound = |key: &str| s.get(key).and_then(Value::as_f64);
        // Draft 4 writes an exclusive bound as a boolean beside `minimum` / `maximum`.
        let flag = |key: &str| s.get(key) == Some(&Value::Bool(true));
        if let Some(min) = bound("minimum") {
            if flag("exclusiveMinimum") && n <= min {
                self.fail(format!("{shown} is not above the minimum {min}"));
            } else if n < min {
                self.fail(format!("{shown} is below the minimum {min}"));
            }
        }
        if let Some(max) = bound("maximum") {
            if flag("exclusiveMaximum") && n >= max {
                self.fail(format!("{shown} is not below the maximum {max}"));
            } else if n > max {
                self.fail(format!("{shown} is above the maximum {max}"));
            }
        }
        if let Some(min) = bound("exclusiveMinimum")
            && n <= min
        {
            self.fail(format!("{shown} must be greater than {min}"));
        }
        if let Some(max) = bound("exclusiveMaximum")
            && n >= max
        {
            self.fail(format!("{shown} must be less than {max}"));
        }
        if let Some(m) = bound("multipleOf")
            && m > 0.0
            && !is_multiple(value, n, s.get("multipleOf"), m)
        {
            self.fail(format!("{shown} is not a multiple of {m}"));
        }
    }
}

/// Whether `value` (`n` as a float) is a multiple of `m`: exactly for integers, within a
/// float's precision otherwise.
fn is_multiple(value: &Value, n: f64, of: Option<&Value>, m: f64) -> bool {
    if let (Some(a), Some(b)) = (value.as_i64(), of.and_then(Value::as_i64))
        && b != 0
    {
        return a % b == 0;
    }
    let q = n / m;
    (q - q.round()).abs() <= 1e-9 * q.abs().max(1.0)
}

fn type_matches(types: &Value, value: &Value) -> bool {
    match types {
        Value::String(t) => is_type(t, value),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .any(|t| is_type(t, value)),
        _ => true,
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
        "integer" => is_integer(value),
        // A type this check does not know constrains nothing.
        _ => true,
    }
}

fn is_integer(value: &Value) -> bool {
    match value {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// `"a string"`, `"an integer or null"`.
fn type_names(types: &Value) -> String {
    let article = |t: &str| match t {
        "integer" | "object" | "array" => format!("an {t}"),
        "null" => "null".to_owned(),
        _ => format!("a {t}"),
    };
    match types {
        Value::String(t) => article(t),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(article)
            .collect::<Vec<_>>()
            .join(" or "),
        other => other.to_string(),
    }
}

/// What a value is, for "expected X, got Y".
fn describe(value: &Value) -> String {
    let kind = match value {
        Value::Null => return "null".to_owned(),
        Value::Bool(_) => "a boolean",
        Value::Number(_) if is_integer(value) => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => return "an array".to_owned(),
        Value::Object(_) => return "an object".to_owned(),
    };
    format!("{kind} ({})", short(value))
}

/// A value as JSON, cut to a length a message can quote.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= 80 {
        return text;
    }
    let mut end = 77;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// One alternative of an `anyOf` / `oneOf` in a few words: its constant, its type, or the
/// properties an object of it has.
fn alternative(root: &Value, branch: &Value) -> String {
    let mut branch = branch;
    for _ in 0..8 {
        match branch.get("$ref").and_then(Value::as_str) {
            Some(r) if branch.get("type").is_none() => match resolve(root, r) {
                Some(target) => branch = target,
                None => break,
            },
            _ => break,
        }
    }
    if let Some(c) = branch.get("const") {
        return short(c);
    }
    if let Some(Value::Array(values)) = branch.get("enum") {
        return format!("one of {}", short(&Value::Array(values.clone())));
    }
    match branch.get("type") {
        Some(Value::String(t)) if t == "object" => {
            let tag = branch
                .get("properties")
                .and_then(Value::as_object)
                .and_then(|p| p.iter().find_map(|(k, v)| v.get("const").map(|c| (k, c))));
            let required: Vec<&str> = branch
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match tag {
                Some((key, c)) => format!("an object with `{key}`: {}", short(c)),
                None if !required.is_empty() => format!(
                    "an object with {}",
                    required
                        .iter()
                        .map(|r| format!("`{r}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => "an object".to_owned(),
            }
        }
        Some(types) => type_names(types),
        None => "a value of another schema".to_owned(),
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn verdict() -> Value {
        json!({
            "type": "object",
            "properties": {
                "score": {"type": "integer", "format": "uint8", "minimum": 0, "maximum": 255},
                "reasons": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "note": {"type": ["string", "null"]},
                "kind": {"$ref": "#/$defs/Kind"},
                "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                         "items": false},
            },
            "required": ["score", "reasons", "kind"],
            "$defs": {"Kind": {"type": "string", "enum": ["good", "bad"]}},
        })
    }

    #[test]
    fn a_valid_value_has_no_problems() {
        let v = json!({"score": 7.0, "reasons": ["a"], "note": null, "kind": "good",
                       "pair": [1, "x"], "extra": true});
        assert_eq!(problems(&verdict(), &v), Vec::<String>::new());
    }

    #[test]
    fn each_problem_names_where_and_what() {
        let v = json!({"score": 300, "reasons": [], "note": 3, "kind": "meh",
                       "pair": [1, "x", 2]});
        assert_eq!(
            problems(&verdict(), &v),
            [
                "at `/kind`: \"meh\" is not one of [\"good\",\"bad\"]",
                "at `/note`: expected a string or null, got an integer (3)",
                "at `/pair`: expected at most 2 items, got 3",
                "at `/reasons`: expected at least 1 items, got 0",
                "at `/score`: 300 is above the maximum 255",
            ]
        );
        assert_eq!(
            problems(&verdict(), &json!({"score": 1.5, "kind": "good"})),
            [
                "at the top level: the property `reasons` is missing",
                "at `/score`: expected an integer, got a number (1.5)",
            ]
        );
        assert_eq!(
            problems(&verdict(), &json!([1])),
            ["at the top level: expected an object, got an array"]
        );
    }

    #[test]
    fn alternatives_say_what_was_allowed_and_what_came_closest() {
        // An internally tagged enum as schemars writes it: a variant is a `$ref` beside the
        // tag's properties.
        let schema = json!({
            "oneOf": [
                {"type": "object", "properties": {"t": {"const": "A"}, "a": {"type": "integer"}},
                 "required": ["t", "a"]},
                {"type": "object", "properties": {"t": {"const": "B"}}, "$ref": "#/$defs/Inner",
                 "required": ["t"]},
            ],
            "$defs": {"Inner": {"type": "object", "properties": {"x": {"type": "integer"}},
                                "required": ["x"]}},
        });
        assert!(problems(&schema, &json!({"t": "B", "x": 1})).is_empty());
        assert_eq!(
            problems(&schema, &json!({"t": "B"})),
            [concat!(
                "at the top level: {\"t\":\"B\"} matches none of the alternatives: an object with ",
                "`t`: \"A\", or an object with `t`: \"B\" (the closest: at the top level: the ",
                "property `x` is missing)"
            )]
        );
        let both = json!({"oneOf": [{"type": "integer"}, {"type": "number"}]});
        assert_eq!(
            problems(&both, &json!(1)),
            ["at the top level: 1 matches 2 of the alternatives, and must match exactly one"]
        );
        assert!(problems(&both, &json!(1.5)).is_empty());
    }

    #[test]
    fn the_rest_of_the_keywords() {
        let schema = json!({
            "type": "object",
            "properties": {
                "tags": {"type": "array", "uniqueItems": true, "contains": {"const": "x"}},
                "name": {"type": "string", "minLength": 2, "maxLength": 3},
                "step": {"type": "number", "multipleOf": 0.5, "exclusiveMinimum": 0},
                "rest": {"not": {"type": "null"}},
                "map": {"type": "object", "additionalProperties": {"type": "integer"},
                        "propertyNames": {"maxLength": 2}, "maxProperties": 2},
            },
            "additionalProperties": false,
            "dependentRequired": {"name": ["step"]},
        });
        let v = json!({"tags": ["y", "y"], "name": "ñandú", "step": 0.7, "rest": null,
                       "map": {"ab": 1, "abc": "no", "c": 2}, "other": 1});
        assert_eq!(
            problems(&schema, &v),
            [
                "at `/map/abc`: expected an integer, got a string (\"no\")",
                "at `/map`: the property name `abc` is not allowed",
                "at `/map`: expected at most 2 properties, got 3",
                "at `/name`: expected at most 3 characters, got 5",
                "at the top level: the property `other` is not allowed",
                "at `/rest`: null matches a schema it must not",
                "at `/step`: 0.7 is not a multiple of 0.5",
                "at `/tags`: the items must be unique; \"y\" repeats",
            ]
        );
        let ok = json!({"tags": ["x", "y"], "name": "ab", "step": 1.5, "rest": 0,
                        "map": {"a": 1}});
        assert_eq!(problems(&schema, &ok), Vec::<String>::new());
        assert_eq!(
            problems(&schema, &json!({"name": "ab"})),
            ["at the top level: the property `step` is missing (`name` needs it)"]
        );
    }

    #[test]
    fn a_looping_reference_ends() {
        let schema = json!({"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
                            "$ref": "#/$defs/A"});
        let p = problems(&schema, &json!(1));
        assert_eq!(
            p,
            ["at the top level: the schema's `$ref`s loop without end"]
        );
        // A recursive schema on a finite value is fine.
        let tree = json!({"type": "object", "properties": {
            "children": {"type": "array", "items": {"$ref": "#"}}}});
        let v = json!({"children": [{"children": []}, {"children": [{"children": 1}]}]});
        assert_eq!(
            problems(&tree, &v),
            ["at `/children/1/children/0/children`: expected an array, got an integer (1)"]
        );
    }

    #[test]
    fn patterns_constrain_strings_and_the_names_they_cover() {
        let schema = json!({
            "type": "object",
            "properties": {
                "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"},
                "word": {"type": "string", "pattern": "ab+"},
            },
            "patternProperties": {"^x-": {"type": "integer"}, "^y-": {"type": "string"}},
            "additionalProperties": false,
        });
        let ok = json!({"code": "ABC-12", "word": "--abbb--", "x-a": 1, "y-b": "s"});
        assert_eq!(problems(&schema, &ok), Vec::<String>::new());
        let bad = json!({"code": "abc-12", "word": "a", "x-a": "one", "z": 1});
        assert_eq!(
            problems(&schema, &bad),
            [
                "at `/code`: \"abc-12\" does not match the pattern `^[A-Z]{3}-[0-9]+$`",
                "at `/word`: \"a\" does not match the pattern `ab+`",
                "at `/x-a`: expected an integer, got a string (\"one\")",
                "at the top level: the property `z` is not allowed",
            ]
        );
        // A pattern the engine cannot read (a lookahead) constrains nothing, and the names
        // it might cover are not judged as additional.
        let unread = json!({"type": "string", "pattern": "^(?=a)"});
        assert!(problems(&unread, &json!("b")).is_empty());
        let unread_names = json!({"patternProperties": {"^(?!x)": {"type": "integer"}},
                                  "additionalProperties": false});
        assert!(problems(&unread_names, &json!({"q": "s"})).is_empty());
    }

    #[test]
    fn another_partys_schema_accepts_what_its_refs_cannot_say() {
        // An MCP tool's output schema: other documents are never fetched, and a reference
        // that points nowhere or loops refuses nothing; the rest is checked as always.
        let schema = json!({
            "type": "object",
            "properties": {
                "far": {"$ref": "https://example.invalid/schema.json"},
                "gone": {"$ref": "#/$defs/missing"},
                "loop": {"$ref": "#/properties/loop"},
                "n": {"type": "integer"},
            },
        });
        let value = json!({"far": [1], "gone": {}, "loop": 3, "n": "x"});
        assert_eq!(
            problems_with(&schema, &value, Unfollowed::Accepts),
            ["at `/n`: expected an integer, got a string (\"x\")"]
        );
        assert_eq!(
            problems_with(&schema, &value, Unfollowed::Fails),
            [
                "at `/far`: the schema's `$ref` `https://example.invalid/schema.json` points nowhere",
                "at `/gone`: the schema's `$ref` `#/$defs/missing` points nowhere",
                "at `/loop`: the schema's `$ref`s loop without end",
                "at `/n`: expected an integer, got a string (\"x\")",
            ]
        );
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(json_eq(&json!(1), &json!(1.0)));
        assert!(json_eq(&json!({"a": [2]}), &json!({"a": [2.0]})));
        assert!(!json_eq(&json!(1), &json!("1")));
        assert!(problems(&json!({"enum": [1, 2]}), &json!(2.0)).is_empty());
    }
}
