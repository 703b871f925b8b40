//! Trace context across processes: what a client of the wire server (or of the ACP server)
//! sends in `params._meta` becomes the remote parent of the span its request is served in,
//! and the run's spans nest under that span.
//!
//! The program's propagator is the test's own [`Ids`]: it writes what it was given as an
//! event of the span (so the tree shows which span got which context), and for a span it
//! injects, its registry id and name.

use pagent::trace::{Carrier, Propagator, set_propagator};
use pagent::wire::{self, ServeOptions};
use serde_json::Value;
use tracing::Span;

use super::*;

/// A client's context: the example of the W3C Trace Context specification.
pub(crate) const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The test's propagator (see the module docs). Set for the whole test binary: every test
/// sets the same one, and a test that sends nothing in `_meta` gets nothing from it.
pub(crate) struct Ids;

impl Propagator for Ids {
    fn inject(&self, span: &Span, carrier: &mut Carrier) {
        if let Some(id) = span.id() {
            carrier.set(
                "traceparent",
                format!("00-{}-{:016x}-01", "1".repeat(32), id.into_u64()),
            );
            let name = span.metadata().map_or("?", |m| m.name());
            carrier.set("tracestate", format!("pagent-test={name}"));
        }
    }

    fn extract(&self, carrier: &Carrier, span: &Span) {
        let keys = carrier.keys().collect::<Vec<_>>().join(",");
        tracing::info!(
            name: "remote.parent",
            parent: span,
            keys = keys.as_str(),
            traceparent = carrier.get("traceparent"),
            tracestate = carrier.get("TraceState"),
        );
    }
}

pub(crate) fn propagate() {
    set_propagator(Ids);
}

fn hello() -> pagent::AgentBuilder {
    Agent::builder()
        .provider(Faux::default().otherwise(|_| FauxReply::text("hi").usage(Usage::new(3, 1))))
        .model("faux-1")
}

/// The `serve` span of a request `method` with `id`, at the root.
fn served(method: &str, id: &str, more: &[&str]) -> String {
    let name = format!("otel.name={method}");
    let rpc = format!("rpc.method={method}");
    let id = format!("jsonrpc.request.id={id}");
    span(
        0,
        "serve",
        &[
            &name,
            "otel.kind=server",
            &rpc,
            "rpc.system.name=jsonrpc",
            &id,
        ],
        more,
    )
}

/// Serves `lines` with the wire server on this thread, until they end.
fn serve_wire(lines: &[Value]) {
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    wire::serve(
        hello(),
        input.as_bytes(),
        std::io::sink(),
        ServeOptions::new(),
    )
    .expect("served");
}

#[test]
fn a_wire_prompt_is_served_in_a_span_whose_remote_parent_the_client_sent_in_meta() {
    propagate();
    let prompt = json!({"jsonrpc": "2.0", "id": 7, "method": "prompt", "params": {
        "text": "hello",
        "_meta": {"traceparent": TRACEPARENT, "tracestate": "rojo=00f067aa0ba902b7", "other": 3},
    }});
    let ((), rec) = traced(|| serve_wire(&[prompt]));
    let [run, chat] = hello_run(0);
    assert_eq!(
        rec.tree(),
        lines(&[
            &served("prompt", "7", &[]),
            // Only the string fields: what a text-map propagator can read.
            &format!(
                "  ! remote.parent [test] keys=traceparent,tracestate traceparent={TRACEPARENT} tracestate=rojo=00f067aa0ba902b7"
            ),
            &run,
            &chat,
        ])
    );
    assert!(rec.all_closed());
}

#[test]
fn a_wire_prompt_without_meta_is_served_under_the_span_current_where_it_was_read() {
    propagate();
    let prompt =
        json!({"jsonrpc": "2.0", "id": "p-1", "method": "prompt", "params": {"text": "hello"}});
    let ((), rec) = traced(|| {
        let _server = tracing::info_span!("server_main").entered();
        serve_wire(&[prompt]);
    });
    let [run, chat] = hello_run(1);
    assert_eq!(
        rec.tree(),
        lines(&[
            "server_main",
            &format!("  {}", served("prompt", "p-1", &[])),
            &run,
            &chat,
        ])
    );
}

#[test]
fn meta_that_is_not_an_object_or_holds_no_string_is_no_context() {
    propagate();
    let prompts = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "prompt", "params": {"text": "a", "_meta": "00-x"}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "prompt", "params": {"text": "b", "_meta": {"traceparent": 5}}}),
    ];
    // One server each: a prompt read while the last one runs would be refused.
    let ((), rec) = traced(|| {
        for prompt in &prompts {
            serve_wire(std::slice::from_ref(prompt));
        }
    });
    let tree = rec.tree();
    assert!(!rec.all_text().contains("remote.parent"), "{tree:#?}");
    assert_eq!(tree[0], served("prompt", "1", &[]), "{tree:#?}");
    assert_eq!(tree[3], served("prompt", "3", &[]), "{tree:#?}");
    assert_eq!(tree.len(), 6, "{tree:#?}");
}

/// The ACP server (feature `acp`).
#[cfg(feature = "acp")]
mod acp {
    use std::io::{BufRead, BufReader, Write};

    use pagent::acp;

    use super::*;

    /// A factory of ACP sessions: [`hello`], or a model that fails when `fail` is set.
    fn acp_session(
        fail: bool,
    ) -> impl Fn(&acp::SessionInfo) -> Result<pagent::AgentBuilder, pagent::Error> + Sync {
        move |_| {
            Ok(if fail {
                Agent::builder()
                    .provider(Faux::default().reply(FauxReply::fail("the model is down")))
                    .model("faux-1")
            } else {
                hello()
            })
        }
    }

    /// Serves ACP on this thread to a client on another that opens a session, sends one
    /// prompt with `meta` and leaves once it is answered; returns the answer.
    fn serve_acp(fail: bool, meta: Value) -> Value {
        let (input_reader, mut input) = std::io::pipe().expect("a pipe");
        let (output_reader, output) = std::io::pipe().expect("a pipe");
        let client = std::thread::spawn(move || {
            let mut lines = BufReader::new(output_reader).lines();
            let mut until = |id: u64| loop {
                let line: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
                if line["id"] == id {
                    return line;
                }
            };
            let new = json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}});
            writeln!(input, "{new}").unwrap();
            let session = until(1)["result"]["sessionId"].clone();
            let prompt = json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {
                "sessionId": session,
                "prompt": [{"type": "text", "text": "hello"}],
                "_meta": meta,
            }});
            writeln!(input, "{prompt}").unwrap();
            until(2)
        });
        acp::serve(
            acp_session(fail),
            BufReader::new(input_reader),
            output,
            acp::Options::new(),
        )
        .expect("served");
        client.join().unwrap()
    }

    #[test]
    fn an_acp_prompt_is_served_in_a_span_whose_remote_parent_the_client_sent_in_meta() {
        propagate();
        let (answer, rec) = traced(|| serve_acp(false, json!({"traceparent": TRACEPARENT})));
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
        let [run, chat] = hello_run(0);
        assert_eq!(
            rec.tree(),
            lines(&[
                &served("session/prompt", "2", &[]),
                &format!("  ! remote.parent [test] keys=traceparent traceparent={TRACEPARENT}"),
                &run,
                &chat,
            ])
        );
        assert!(rec.all_closed());
    }

    #[test]
    fn an_acp_prompt_answered_with_an_error_fails_its_span_with_the_code() {
        propagate();
        let (answer, rec) = traced(|| serve_acp(true, json!({})));
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        let tree = rec.tree();
        assert_eq!(
            tree[0],
            served(
                "session/prompt",
                "2",
                &[
                    "error.type=-32603",
                    "otel.status_code=error",
                    "otel.status_description=provider error: the model is down",
                    "rpc.response.status_code=-32603",
                ]
            ),
            "{tree:#?}"
        );
        assert!(tree[1].starts_with("  invoke_agent "), "{tree:#?}");
    }
}
