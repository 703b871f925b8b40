//! Typed tools: the argument struct gives the schema and the validation.

use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use super::{Tool, ToolContext, ToolError, ToolOutput};

/// A tool whose arguments are the struct `A` (deriving `serde::Deserialize` and
/// `schemars::JsonSchema`; pagent re-exports the schemars it uses as [`crate::schemars`], see
/// [`typed`]), run by the closure `F`.
///
/// The schema sent to the model comes from `A`. Arguments that do not deserialize into `A`
/// never reach `F`: they become an error result naming what was wrong (a missing field, a
/// wrong type) together with the expected schema, so the model can correct its call.
pub struct TypedTool<A, F> {
    name: String,
    description: String,
    schema: serde_json::Value,
    sequential: bool,
    run: F,
    _args: PhantomData<fn(A)>,
}

/// A tool from an argument struct and a closure.
///
/// The struct derives `serde::Deserialize` and `schemars::JsonSchema`. The schemars is
/// pagent's own ([`crate::schemars`], 1.x), so the derive needs no dependency of yours and
/// always matches pagent's version: `use pagent::schemars::{self, JsonSchema};` puts
/// `schemars` in scope for the derive (which names its items `schemars::..`). With a full path
/// instead, tell the derive where it is: `#[derive(pagent::schemars::JsonSchema)]
/// #[schemars(crate = "pagent::schemars")]`. A crate that depends on `schemars = "1"` itself
/// may use its own: it is the same crate.
///
/// ```
/// use pagent::schemars::{self, JsonSchema};
/// use pagent::tool::{self, ToolOutput};
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Add {
///     /// The first term.
///     a: f64,
///     /// The second term.
///     b: f64,
/// }
///
/// let add = tool::typed("add", "Adds two numbers.", |args: Add, _ctx| {
///     Ok(ToolOutput::text((args.a + args.b).to_string()))
/// });
/// # use pagent::Tool;
/// assert_eq!(add.name(), "add");
/// ```
pub fn typed<A, F>(
    name: impl Into<String>,
    description: impl Into<String>,
    run: F,
) -> TypedTool<A, F>
where
    A: DeserializeOwned + schemars::JsonSchema,
    F: Fn(A, &ToolContext) -> Result<ToolOutput, ToolError> + Send + Sync,
{
    let mut schema = serde_json::to_value(schemars::schema_for!(A))
        // OK because a derived schema is plain JSON data.
        .expect("a JSON Schema serializes");
    if let Some(obj) = schema.as_object_mut() {
        // Models do not need the meta-schema URL or the Rust type's name.
        obj.remove("$schema");
        obj.remove("title");
    }
    TypedTool {
        name: name.into(),
        description: description.into(),
        schema,
        sequential: false,
        run,
        _args: PhantomData,
    }
}

impl<A, F> TypedTool<A, F> {
    /// Makes every reply that calls this tool run its calls one after another. Defaults to
    /// false (parallel).
    #[must_use]
    pub fn sequential(mut self, yes: bool) -> TypedTool<A, F> {
        self.sequential = yes;
        self
    }

    fn parse(&self, args: &serde_json::Value) -> Result<A, String>
    where
        A: DeserializeOwned,
    {
        A::deserialize(args).map_err(|e| {
            format!(
                "invalid arguments for `{}`: {e}. Expected arguments matching this JSON Schema: {}",
                self.name, self.schema
            )
        })
    }
}

impl<A, F> Tool for TypedTool<A, F>
where
    A: DeserializeOwned,
    F: Fn(A, &ToolContext) -> Result<ToolOutput, ToolError> + Send + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> serde_json::Value {
        self.schema.clone()
    }

    fn validate(&self, args: &serde_json::Value) -> Result<(), String> {
        self.parse(args).map(drop)
    }

    fn execute(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args = self.parse(&args).map_err(ToolError)?;
        (self.run)(args, ctx)
    }

    fn sequential(&self) -> bool {
        self.sequential
    }
}

impl<A, F> fmt::Debug for TypedTool<A, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedTool")
            .field("name", &self.name)
            .field("sequential", &self.sequential)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cancel::CancelToken;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, schemars::JsonSchema)]
    struct Args {
        /// A number.
        x: i64,
    }

    fn tool() -> impl Tool {
        typed("double", "Doubles x.", |a: Args, _| {
            Ok(ToolOutput::text((a.x * 2).to_string()))
        })
    }

    #[test]
    fn schema_comes_from_the_struct() {
        let schema = tool().parameters();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["properties"]["x"]["type"], "integer");
        assert_eq!(schema["required"], json!(["x"]));
        assert!(schema.get("$schema").is_none());
    }

    #[test]
    fn bad_arguments_tell_the_model_what_was_wrong() {
        let err = tool().validate(&json!({"x": "ten"})).unwrap_err();
        assert!(
            err.starts_with(
                "invalid arguments for `double`: invalid type: string \"ten\", expected i64"
            ),
            "{err}"
        );
        let err = tool().validate(&json!({})).unwrap_err();
        assert!(err.contains("missing field `x`"), "{err}");
        let ctx = ToolContext::detached(CancelToken::new());
        assert_eq!(
            tool().execute(json!({"x": 21}), &ctx).unwrap().to_text(),
            "42"
        );
    }
}
