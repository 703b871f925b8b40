//! Hooks seen from a user's program.

use std::sync::{Arc, Mutex};

use pagent::hooks::ToolDecision;
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, ToolOutput, tool};
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Args {
    n: u32,
}

#[test]
fn before_tool_call_is_not_asked_about_invalid_arguments() {
    let double = tool::typed("double", "Doubles n.", |a: Args, _| {
        Ok(ToolOutput::text((a.n * 2).to_string()))
    });
    let faux = Faux::default()
        .reply(
            FauxReply::tool_call("double", json!({ "n": "two" }))
                .then_tool_call("double", json!({ "n": 2 }))
                .then_tool_call("double", json!({ "n": 3 })),
        )
        .reply(FauxReply::text("done"));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let agent = Agent::builder()
        .provider(faux)
        .tool(double)
        .max_parallel_tools(1)
        .before_tool_call(move |request| {
            seen.lock().unwrap().push(request.args.clone());
            match request.args["n"].as_u64() {
                // A rewrite is validated like the model's own arguments.
                Some(3) => ToolDecision::Rewrite(json!({ "n": -3 })),
                _ => ToolDecision::Allow,
            }
        })
        .build()
        .unwrap();
    let result = agent.prompt("go").unwrap();
    assert_eq!(
        *asked.lock().unwrap(),
        [json!({ "n": 2 }), json!({ "n": 3 })]
    );
    let results: Vec<_> = result
        .messages
        .iter()
        .filter_map(|m| m.as_tool_result())
        .map(|r| {
            (
                r.is_error,
                r.text().split(':').next().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            (true, "invalid arguments for `double`".to_owned()),
            (false, "4".to_owned()),
            (true, "invalid arguments for `double`".to_owned()),
        ]
    );
}
