//! The spans of the MCP client's requests (features `tracing` and `mcp`), against the fake
//! stdio server of tests/mcp (python3's standard library only): a span per request in the
//! conventions' MCP client shape, a tool call of an agent adding to its `execute_tool`
//! span, and the context of each in the `params._meta` the server received.

use std::path::Path;
use std::time::Duration;

use pagent::CancelToken;
use pagent::mcp::Client;
use serde_json::Value;

use super::propagation::propagate;
use super::*;

/// The fake server, well behaved.
fn fake() -> Client {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fake_server.py");
    Client::stdio("python3")
        .arg(script.display().to_string())
        .arg("ok")
        .shutdown_grace(Duration::from_millis(200))
        .connect()
        .expect("the fake server answers")
}

/// What the server received so far: each message's method and the `tracestate` of its
/// `_meta` (the name of the span whose context it carries, see [`super::propagation::Ids`]),
/// with a check that its `traceparent` is one.
fn received(client: &Client) -> Vec<String> {
    let result = client
        .call_tool("metas", json!({}), &CancelToken::new(), &mut |_| {})
        .unwrap();
    let metas: Vec<Value> = serde_json::from_str(&result.text()).unwrap();
    metas
        .iter()
        .map(|m| {
            let meta = &m["_meta"];
            let parent = meta["traceparent"].as_str().unwrap_or("");
            assert!(
                parent.is_empty() || parent.starts_with(&format!("00-{}-", "1".repeat(32))),
                "{m}"
            );
            format!(
                "{} {}",
                m["method"].as_str().unwrap_or("?"),
                meta["tracestate"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

/// The line of the span of a request `method` (`id`) to the fake server, at the root,
/// with these fields too; after the greeting, in the version the server chose.
fn request(method: &str, id: u32, fields: &[&str]) -> String {
    let name = format!("otel.name={method}");
    let method = format!("mcp.method.name={method}");
    let id = format!("jsonrpc.request.id={id}");
    let mut all = vec![
        name.as_str(),
        method.as_str(),
        id.as_str(),
        "network.transport=pipe",
        "otel.kind=client",
    ];
    if !fields
        .iter()
        .any(|f| f.starts_with("mcp.protocol.version="))
    {
        all.push("mcp.protocol.version=2025-03-26");
    }
    all.extend(fields);
    span(0, "mcp", &[], &all)
}

/// The spans of `connect` to the fake server: the stateless era's `server/discover`, which
/// it refuses, then the greeting of the session era.
fn connected() -> [String; 2] {
    [
        request(
            "server/discover",
            1,
            &[
                "error.type=-32601",
                "mcp.protocol.version=2026-07-28",
                "otel.status_code=error",
                "otel.status_description=the mcp server answered server/discover with error -32601: Method not found",
                "rpc.response.status_code=-32601",
            ],
        ),
        request("initialize", 2, &["mcp.protocol.version=2025-11-25"]),
    ]
}

/// The span of a `tools/call` of `tool` that is not an agent's.
fn tool_call(tool: &str, id: u32, fields: &[&str]) -> String {
    let name = format!("gen_ai.tool.name={tool}");
    let line = request(
        "tools/call",
        id,
        &[
            &["gen_ai.operation.name=execute_tool", name.as_str()],
            fields,
        ]
        .concat(),
    );
    line.replace(
        "otel.name=tools/call",
        &format!("otel.name=tools/call {tool}"),
    )
}

#[test]
fn an_agents_mcp_tool_call_adds_to_its_execute_tool_span_and_sends_that_spans_context() {
    propagate();
    let (recorded, rec) = traced(|| {
        let client = fake();
        let mut builder = Agent::builder()
            .provider(
                Faux::default()
                    .reply(FauxReply::tool_call("echo", json!({"text": "hi"})).with_id("c1"))
                    .reply(FauxReply::text("It said hi.")),
            )
            .model("faux-1");
        for tool in client.tools().unwrap() {
            builder = builder.tool_arc(tool);
        }
        let agent = builder.build().unwrap();
        assert_eq!(agent.prompt("Echo hi").unwrap().text(), "It said hi.");
        let recorded = received(&client);
        client.close();
        recorded
    });
    let [discover, initialize] = connected();
    assert_eq!(
        rec.tree(),
        lines(&[
            &discover,
            &initialize,
            // One tool a page.
            &request("tools/list", 3, &[]),
            &request("tools/list", 4, &[]),
            &request("tools/list", 5, &[]),
            &root_run(&[
                "gen_ai.usage.input_tokens=3",
                "gen_ai.usage.output_tokens=5",
                "pagent.run.stop_reason=no_tool_calls",
                "pagent.run.turns=2",
            ]),
            &span(
                1,
                "chat",
                CHAT,
                &[
                    "gen_ai.response.finish_reasons=[\"tool_call\"]",
                    "gen_ai.response.time_to_first_chunk=<secs>",
                    "gen_ai.usage.input_tokens=1",
                    "gen_ai.usage.output_tokens=3",
                    "pagent.turn=1",
                ]
            ),
            // No span of its own: the tool call's, with what the request adds.
            &span(
                1,
                "execute_tool",
                &[],
                &[
                    "gen_ai.operation.name=execute_tool",
                    "gen_ai.tool.call.id=c1",
                    "gen_ai.tool.description=Echoes its text.",
                    "gen_ai.tool.name=echo",
                    "gen_ai.tool.type=function",
                    "jsonrpc.request.id=6",
                    "mcp.method.name=tools/call",
                    "mcp.protocol.version=2025-03-26",
                    "network.transport=pipe",
                    "otel.kind=internal",
                    "otel.name=execute_tool echo",
                ]
            ),
            &span(
                1,
                "chat",
                CHAT,
                &[
                    "gen_ai.response.finish_reasons=[\"stop\"]",
                    "gen_ai.response.time_to_first_chunk=<secs>",
                    "gen_ai.usage.input_tokens=2",
                    "gen_ai.usage.output_tokens=2",
                    "pagent.turn=2",
                ]
            ),
            &tool_call("metas", 7, &[]),
        ])
    );
    // Each request carried the context of its span; the notification, sent outside any
    // span, none.
    assert_eq!(
        recorded,
        lines(&[
            "server/discover pagent-test=mcp",
            "initialize pagent-test=mcp",
            "notifications/initialized -",
            "tools/list pagent-test=mcp",
            "tools/list pagent-test=mcp",
            "tools/list pagent-test=mcp",
            "tools/call pagent-test=execute_tool",
            "tools/call pagent-test=mcp",
        ])
    );
    assert!(rec.all_closed());
}

#[test]
fn a_request_outside_an_agents_tool_is_a_span_of_its_own_and_an_error_answer_fails_it() {
    propagate();
    let ((), rec) = traced(|| {
        let client = fake();
        let cancel = CancelToken::new();
        client
            .call_tool("echo", json!({"text": "hi"}), &cancel, &mut |_| {})
            .unwrap();
        let e = client
            .call_tool("nope", json!({}), &cancel, &mut |_| {})
            .unwrap_err();
        assert!(e.to_string().contains("unknown tool nope"), "{e}");
        client.close();
    });
    let [discover, initialize] = connected();
    assert_eq!(
        rec.tree(),
        lines(&[
            &discover,
            &initialize,
            &tool_call("echo", 3, &[]),
            &tool_call(
                "nope",
                4,
                &[
                    "error.type=-32602",
                    "otel.status_code=error",
                    "otel.status_description=the mcp server answered tools/call with error -32602: unknown tool nope",
                    "rpc.response.status_code=-32602",
                ]
            ),
        ])
    );
}

#[test]
fn a_tool_of_the_programs_that_calls_an_mcp_server_gets_a_request_span_under_its_own() {
    propagate();
    let ((), rec) = traced(|| {
        let client = fake();
        let relay = {
            let client = client.clone();
            tool::typed("relay", "", move |_: City, ctx| {
                let result = client
                    .call_tool("echo", json!({"text": "hi"}), ctx.cancel(), &mut |_| {})
                    .map_err(|e| pagent::ToolError::new(e.to_string()))?;
                Ok(ToolOutput::text(result.text()))
            })
        };
        let agent = Agent::builder()
            .provider(
                Faux::default()
                    .reply(FauxReply::tool_call("relay", json!({"city": "Oslo"})).with_id("c1"))
                    .reply(FauxReply::text("Relayed.")),
            )
            .model("faux-1")
            .tool(relay)
            .build()
            .unwrap();
        agent.prompt("Relay").unwrap();
        client.close();
    });
    let tree = rec.tree();
    let tool = tree
        .iter()
        .position(|l| l.starts_with("  execute_tool "))
        .unwrap_or_else(|| panic!("{tree:#?}"));
    assert!(!tree[tool].contains("mcp.method.name"), "{tree:#?}");
    assert_eq!(
        tree[tool + 1],
        format!("    {}", tool_call("echo", 3, &[])),
        "{tree:#?}"
    );
}
