//! The client program the official MCP conformance suite (`@modelcontextprotocol/conformance`)
//! drives: for each client scenario the suite starts a server, runs this program with the
//! server's URL as its last argument (the scenario's name in `MCP_CONFORMANCE_SCENARIO`, its
//! settings, such as the tool calls to make or an OAuth client's credentials, as JSON in
//! `MCP_CONFORMANCE_CONTEXT`), and judges what the client sent. `.ci/conformance.sh` runs
//! every scenario.
//!
//! ```sh
//! cargo run --features mcp --example mcp_conformance -- http://localhost:3000/mcp
//! ```
//!
//! Whatever the scenario, it does what a program using `pagent::mcp` does: connect over
//! Streamable HTTP (either era of the protocol), list the tools, call each one (with the
//! arguments the context names, or arguments made from its input schema), and close. The
//! user's answers to the server's questions are scripted: a form is accepted with nothing
//! filled in, so the schema's defaults go back. It exits with 1 (saying why on stderr) when
//! any step fails.

use std::process::ExitCode;
use std::time::Duration;

use pagent::CancelToken;
use pagent::mcp::{Client, ElicitationAnswer, McpError, OAuth};
use serde_json::{Map, Value, json};

fn main() -> ExitCode {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: mcp_conformance <server-url>");
        return ExitCode::from(2);
    };
    match run(&url, &scenario, &context) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{scenario}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// OAuth as a program sets it up: the client credentials of the context for the
/// machine-to-machine scenarios, else the authorization code flow whose browser step is
/// automated (the suite's authorization server redirects at once: the hook reads where),
/// with the context's preregistered client when it names one, and a Client ID Metadata
/// Document for servers that take one.
fn oauth(scenario: &str, context: &Value) -> OAuth {
    let id = context["client_id"].as_str();
    if scenario.starts_with("auth/client-credentials") {
        return match (
            id,
            context["private_key_pem"].as_str(),
            context["client_secret"].as_str(),
        ) {
            (Some(id), Some(pem), _) => OAuth::new().client_credentials_jwt(id, pem),
            (Some(id), None, Some(secret)) => OAuth::new().client_credentials(id, secret),
            _ => OAuth::new(),
        };
    }
    // Workload identity: the workload's token from the platform (here the context).
    if let Some(jwt) = context["valid_jwt"].as_str() {
        let jwt = jwt.to_owned();
        let oauth = OAuth::new().workload_identity(move || Ok(jwt.clone()));
        return match id {
            Some(id) => oauth.client(id, None),
            None => oauth,
        };
    }
    // Enterprise-managed: the user's ID token from the enterprise's identity provider.
    if let (Some(endpoint), Some(idp_client), Some(id_token)) = (
        context["idp_token_endpoint"].as_str(),
        context["idp_client_id"].as_str(),
        context["idp_id_token"].as_str(),
    ) {
        let id_token = id_token.to_owned();
        return OAuth::new()
            .client(id.unwrap_or_default(), context["client_secret"].as_str())
            .enterprise_managed(endpoint, idp_client, None, move || Ok(id_token.clone()));
    }
    let mut oauth = OAuth::new()
        .client_name("pagent-conformance")
        .client_metadata_url("https://conformance-test.local/client-metadata.json")
        .authorize("http://127.0.0.1:3000/callback", |request, _| {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .max_redirects(0)
                .http_status_as_error(false)
                .build()
                .into();
            let reply = agent.get(&request.url).call().map_err(|e| e.to_string())?;
            reply
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .ok_or_else(|| format!("the authorization server answered {}", reply.status()))
        });
    if let Some(id) = id {
        oauth = oauth.client(id, context["client_secret"].as_str());
    }
    oauth
}

fn run(url: &str, scenario: &str, context: &Value) -> Result<(), McpError> {
    let client = Client::http(url)
        .call_timeout(Duration::from_secs(20))
        .oauth(oauth(scenario, context))
        .on_elicitation(|question, _| {
            println!("asked: {}", question.message);
            ElicitationAnswer::Accept(json!({}))
        })
        .root("file:///tmp/conformance", Some("conformance"))
        .connect()?;
    let info = client.server_info();
    println!(
        "connected to {} (protocol {}, {:?} era)",
        info.name, info.protocol_version, info.era
    );
    let tools = client.list_tools()?;
    let calls: Vec<(String, Value)> = match context["toolCalls"].as_array() {
        Some(calls) => calls
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_owned(),
                    c["arguments"].clone(),
                )
            })
            .collect(),
        None => tools
            .iter()
            .map(|tool| {
                let arguments = if scenario == "json-schema-2020-12-preservation"
                    && tool.input_schema["required"] == json!(["schema"])
                {
                    // Hands back what the client kept of the other tool's schema.
                    tools
                        .iter()
                        .find(|t| t.name != tool.name)
                        .map_or(json!({}), |t| json!({"schema": t.input_schema}))
                } else {
                    arguments_for(&tool.input_schema)
                };
                (tool.name.clone(), arguments)
            })
            .collect(),
    };
    for (name, arguments) in calls {
        let result = client.call_tool(&name, arguments, &CancelToken::new(), &mut |p| {
            println!("progress: {}", p.to_output().to_text());
        });
        match result {
            Ok(result) => println!("{name}: {}", result.text()),
            // The server refused the call: what a program shows its user, then goes on.
            Err(e @ McpError::Rpc { .. }) => println!("{name}: {e}"),
            Err(e) => return Err(e),
        }
    }
    client.close();
    Ok(())
}

/// A value for each required property of an object schema, by its type.
fn arguments_for(schema: &Value) -> Value {
    let mut arguments = Map::new();
    let required = schema["required"].as_array().cloned().unwrap_or_default();
    for name in required.iter().filter_map(Value::as_str) {
        let value = match schema["properties"][name]["type"].as_str() {
            Some("number" | "integer") => json!(1),
            Some("boolean") => json!(true),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => json!("x"),
        };
        arguments.insert(name.to_owned(), value);
    }
    Value::Object(arguments)
}
