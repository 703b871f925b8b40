//! Traces in OpenTelemetry's GenAI conventions: spans of runs, model calls and tool calls on
//! the [`tracing`](https://docs.rs/tracing) crate (feature `tracing`).
//!
//! With the feature on, every run is an `invoke_agent` span, each model call in it a `chat`
//! span and each tool call an `execute_tool` span, named and attributed as the
//! [OpenTelemetry semantic conventions for generative AI](https://github.com/open-telemetry/semantic-conventions-genai)
//! say (status *development*; the names of the `semantic-conventions-genai` repository as
//! of August 2026, which kept those of semantic-conventions v1.41.1, the last release that
//! carried them). pagent only creates the spans: the program chooses a subscriber, for
//! example `tracing-opentelemetry` with the OpenTelemetry SDK to export them over OTLP
//! (`examples/otlp` does so without an async runtime), or `tracing-subscriber`'s `fmt` to
//! print them. With no subscriber, or one not interested in the target `pagent` at level
//! `INFO`, a span costs one check of an atomic per call; nothing is done per streamed delta.
//!
//! # Performance
//!
//! Spans are per call, never per delta: a streamed delta costs two checks more than without
//! the feature (is it the reply's first piece, is it a retry). Counted with callgrind on
//! `benches/trace.rs` (20 replies of 2,000 one-character deltas on the scripted provider),
//! a delta costs about 1,414 instructions without the feature and 30 more with it (+2.1%),
//! whether no subscriber is installed, one filters pagent's spans out, or a registry
//! records every span; a turn (a tool call, its tool, the answer) costs about 62,000
//! instructions without it, 2,700 more with no subscriber (+4.4%) and 6,700 more when
//! every span is recorded (+11%).
//!
//! # Spans
//!
//! | span (`otel.name`) | kind | from, to | attributes |
//! |---|---|---|---|
//! | `invoke_agent` (`invoke_agent {name}` with [`AgentBuilder::name`](crate::AgentBuilder::name)) | internal | `AgentStart`, after the `AgentEnd` listeners | `gen_ai.operation.name` = `invoke_agent`, `gen_ai.provider.name`, `gen_ai.agent.name`, `gen_ai.request.model`; at the end the run's `gen_ai.usage.*` (summed over its replies), `pagent.run.stop_reason`, `pagent.run.turns`, `error.type` |
//! | `chat` (`chat {model}`) | client | the reply's `MessageStart`, after its `MessageEnd` listeners | `gen_ai.operation.name` = `chat`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.request.stream` = true, `pagent.turn`, `server.address` and `server.port` (where the requests go: [`Provider::server_address`](crate::llm::Provider::server_address), the base URL of the HTTP providers); `gen_ai.response.time_to_first_chunk` (seconds, to the first delta of the reply); at the end `gen_ai.response.model`, `gen_ai.response.id`, `gen_ai.response.finish_reasons`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens`, `gen_ai.usage.reasoning.output_tokens`, `error.type` |
//! | `execute_tool` (`execute_tool {tool}`) | internal | `ToolStart`, after the `ToolEnd` listeners | `gen_ai.operation.name` = `execute_tool`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type` = `function`, `gen_ai.tool.description`; at the end `error.type` |
//!
//! `chat` and `execute_tool` spans are children of their run's `invoke_agent` span, which is
//! a child of the span that was current where the run started (the caller's of
//! [`Agent::prompt`](crate::Agent::prompt); [`Agent::prompt_stream`](crate::Agent::prompt_stream)
//! carries it to the run's thread). A tool runs inside its `execute_tool` span, on whatever
//! thread runs it (parallel calls run on scoped threads), and so does the
//! `before_tool_call` hook for that call: spans and events the tool makes (an HTTP client's,
//! another agent's `invoke_agent`) nest under it. The subscriber in effect where the run
//! started is carried to those threads too, so a subscriber set for one thread only
//! (`tracing::subscriber::with_default`) sees the whole run.
//!
//! Attributes follow the names above exactly. `tracing` has no list values, so
//! `gen_ai.response.finish_reasons` is the JSON text of the list (`["tool_call"]`). The
//! usage attributes are set only when the provider reported a count above zero. Span name,
//! kind and status are written as `tracing-opentelemetry` reads them: fields `otel.name`,
//! `otel.kind`, `otel.status_code` (`error`) and `otel.status_description` (the error's message).
//!
//! # Finish reasons and errors
//!
//! A reply's [`StopReason`](crate::StopReason) is its finish reason: `Stop` is `stop`,
//! `Length` is `length`, `ToolUse` is `tool_call`, `Error` is `error`, and a reply cut by an
//! abort is `aborted`.
//!
//! A span whose operation failed has the status `error`, its message, and `error.type`:
//!
//! - `chat` and `invoke_agent`: the [`ErrorKind::as_str`](crate::ErrorKind::as_str) of the
//!   error (`rate_limited`, `timeout`, `server`, `auth`, `stream`, ...). A failed `chat` also
//!   records the error once as a `gen_ai.client.operation.exception` event (level `WARN`,
//!   `exception.message`). An abort is not an error: the run ends as asked
//!   ([`RunStopReason::Cancelled`](crate::RunStopReason::Cancelled)), and so do its spans.
//! - `execute_tool`, when the call's result is an error result (the model is told so):
//!   `tool_error` (the tool ran and failed, panicked, or `after_tool_call` made its result
//!   an error), `blocked` (`before_tool_call` blocked it), `cancelled` (the run was aborted
//!   before it ran), `skipped` (steering arrived first, with
//!   [`SteeringPolicy::AtToolBoundary`](crate::SteeringPolicy::AtToolBoundary)), `not_run`
//!   (an unknown tool, invalid arguments, a reply that was cut, a hook that panicked).
//!
//! A transient failure that the provider retries does not fail the `chat` span (the call
//! goes on): each retry is a `pagent.retry` event on it (level `WARN`) with
//! `pagent.retry.attempt`, `pagent.retry.delay_ms` and `exception.message`, the error that
//! was retried.
//!
//! # Contents
//!
//! Messages, instructions, tool arguments and results are sensitive and large, so the spans
//! carry none by default, as the conventions ask. Opt in with
//! [`AgentBuilder::trace_content`](crate::AgentBuilder::trace_content) (or the environment
//! variable `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`) to add, as JSON text in
//! the conventions' message format: `gen_ai.system_instructions`, `gen_ai.input.messages`
//! (what the model was sent, as `transform_context` left it) and `gen_ai.output.messages`
//! (the reply) on `chat`; the run's input and last reply on `invoke_agent`;
//! `gen_ai.tool.call.arguments` (as validated and as a hook rewrote them) and
//! `gen_ai.tool.call.result` on `execute_tool` (its text). Images and documents in user
//! messages and tool results are `blob` parts (`modality` `image` or `document`,
//! `mime_type`, the bytes whole in base64) or, when given by URL, `uri` parts; a tool
//! result is a `tool_call_response` whose `response` is its text, or its parts when it
//! holds more than text. API keys are never in any span: no
//! attribute holds a header or a setting, and error messages have the key removed, as
//! everywhere in pagent.
//!
//! # Propagation
//!
//! A trace goes on in the processes pagent talks to, as the conventions say it does, in
//! `params._meta` of each JSON-RPC request (the keys of W3C Trace Context, `traceparent`
//! and `tracestate`, unprefixed, and `baggage` with a baggage propagator):
//!
//! - Out: every request the MCP client sends carries the context of its span (see
//!   *MCP requests* below), so the server's spans join the run's trace. A key the caller
//!   put in `_meta` already is never replaced.
//! - In: the wire server's `prompt` and the ACP server's `session/prompt` are served in a
//!   span of their own (`serve`, kind server, named by the method, with
//!   `rpc.system.name` = `jsonrpc`, `rpc.method`, `jsonrpc.request.id`; a request answered
//!   with an error has `rpc.response.status_code` and `error.type` = the code). Its parent
//!   is the context the client sent in `params._meta`, else the span current on the thread
//!   that reads the requests; the run's `invoke_agent` span is its child.
//!
//! `tracing` knows nothing of trace ids: the context of a span lives in the program's
//! subscriber. So the program says how to read and write it, once, with
//! [`set_propagator`]; without a propagator nothing is sent and what clients send is
//! ignored. With `tracing-opentelemetry`, a propagator is a few lines over OpenTelemetry's
//! own (`Fields` is the program's adapter of a [`Carrier`] to OpenTelemetry's `Injector`
//! and `Extractor`: `set` and `get` of the carrier):
//!
//! ```ignore
//! use opentelemetry::propagation::TextMapPropagator;
//! use opentelemetry_sdk::propagation::TraceContextPropagator;
//! use tracing_opentelemetry::OpenTelemetrySpanExt;
//!
//! struct W3c(TraceContextPropagator);
//!
//! impl pagent::trace::Propagator for W3c {
//!     fn inject(&self, span: &tracing::Span, carrier: &mut pagent::trace::Carrier) {
//!         self.0.inject_context(&span.context(), &mut Fields(carrier));
//!     }
//!     fn extract(&self, carrier: &pagent::trace::Carrier, span: &tracing::Span) {
//!         let _ = span.set_parent(self.0.extract(&Fields(carrier)));
//!     }
//! }
//! ```
//!
//! # MCP requests
//!
//! Each request of the MCP client is a span of kind client named `{mcp.method.name}
//! {target}` (`tools/call get_weather`, `initialize`), with `mcp.method.name`,
//! `jsonrpc.request.id`, `mcp.protocol.version`, `mcp.session.id`, `network.transport`
//! (`pipe` for stdio, `tcp` for HTTP), `server.address` and `server.port` (HTTP),
//! `gen_ai.tool.name` and `gen_ai.operation.name` = `execute_tool` for a tool call,
//! `gen_ai.prompt.name` and `mcp.resource.uri` where they apply, and on failure
//! `error.type` (the JSON-RPC error code of an error answer, the HTTP status of a refused
//! authorization, `timeout`, `cancelled`, `closed`, `protocol`, `tool_error` for a result
//! with `isError`) with the status and its message, and `rpc.response.status_code` (the
//! code). The span is named `mcp` for `tracing` filters. A `tools/call` that an agent makes
//! for an MCP tool does not make a span of its own: as the conventions ask, it adds the
//! request's attributes to the tool call's `execute_tool` span (whose `error.type` stays
//! the tool call's), and the context sent is that span's. A program's own tool that calls
//! an MCP server gets a request span under its `execute_tool` span.
//!
//! ```
//! # // The module is private without the feature, and its doctests run all the same.
//! # #[cfg(feature = "tracing")] {
//! use pagent::Agent;
//! use pagent::llm::{Faux, FauxReply};
//!
//! // With a subscriber installed (tracing-opentelemetry, tracing-subscriber's fmt, ...),
//! // this run is one `invoke_agent triage` span holding one `chat faux-model` span.
//! let agent = Agent::builder()
//!     .provider(Faux::default().reply(FauxReply::text("Sorted.")))
//!     .model("faux-model")
//!     .name("triage")
//!     .build()?;
//! agent.prompt("Sort the inbox.")?;
//! # }
//! # Ok::<(), pagent::Error>(())
//! ```

#[cfg(feature = "tracing")]
mod content;
#[cfg(all(feature = "tracing", feature = "mcp"))]
mod mcp;
#[cfg(feature = "tracing")]
mod propagate;
#[cfg(feature = "tracing")]
mod serve;
#[cfg(feature = "tracing")]
mod spans;

#[cfg(all(feature = "tracing", feature = "mcp"))]
pub(crate) use mcp::{McpCall, McpPeer, in_tool};
#[cfg(all(feature = "tracing", feature = "mcp"))]
pub(crate) use propagate::inject_current;
#[cfg(feature = "tracing")]
pub use propagate::{Carrier, Propagator, set_propagator};
#[cfg(feature = "tracing")]
pub(crate) use serve::Served;
#[cfg(feature = "tracing")]
pub(crate) use spans::{RunTrace, Scope};

/// What the builder says about traces: the agent's name and whether contents are recorded.
#[cfg(feature = "tracing")]
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) name: Option<std::sync::Arc<str>>,
    pub(crate) content: bool,
}

#[cfg(feature = "tracing")]
impl Default for Settings {
    /// No name; contents only when `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is
    /// `true` (the switch OpenTelemetry's GenAI instrumentations read).
    fn default() -> Settings {
        let content = std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
        Settings {
            name: None,
            content,
        }
    }
}

/// The same calls with the feature off: empty types, so the loop's calls compile to nothing.
#[cfg(not(feature = "tracing"))]
mod off {
    use serde_json::Value;

    use crate::event::AgentEvent;
    use crate::llm::{Provider, Request, ToolDefinition};

    // Not a unit struct: the builder makes it with `default()` whichever the feature.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Settings {
        _none: (),
    }
    pub(crate) struct RunTrace;
    pub(crate) struct Closing;
    pub(crate) struct Scope;
    pub(crate) struct Served;

    impl Served {
        #[inline(always)]
        pub(crate) fn open(_: &str, _: Option<&Value>, _: Option<&Value>) -> Served {
            Served
        }
        #[inline(always)]
        pub(crate) fn run<R>(self, f: impl FnOnce(&Served) -> R) -> R {
            f(&self)
        }
        // Only the ACP server answers a prompt with an error.
        #[cfg_attr(not(feature = "acp"), allow(dead_code))]
        #[inline(always)]
        pub(crate) fn failed(&self, _code: i64, _message: &str) {}
    }

    #[cfg(feature = "mcp")]
    pub(crate) struct McpCall;
    #[cfg(feature = "mcp")]
    #[derive(Clone, Debug)]
    pub(crate) struct McpPeer;

    #[cfg(feature = "mcp")]
    impl McpPeer {
        #[inline(always)]
        pub(crate) fn stdio() -> McpPeer {
            McpPeer
        }
        #[inline(always)]
        pub(crate) fn http(_url: &str, _session: Option<String>) -> McpPeer {
            McpPeer
        }
    }

    #[cfg(feature = "mcp")]
    impl McpCall {
        #[inline(always)]
        pub(crate) fn open(
            _method: &str,
            _params: Option<&Value>,
            _protocol: &str,
            _peer: impl FnOnce() -> McpPeer,
        ) -> McpCall {
            McpCall
        }
        #[inline(always)]
        pub(crate) fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
            f()
        }
        #[inline(always)]
        pub(crate) fn sent(&self, _id: u64) {}
        #[inline(always)]
        pub(crate) fn finish(&self, _: &Result<Value, crate::mcp::McpError>) {}
    }

    #[cfg(feature = "mcp")]
    #[inline(always)]
    pub(crate) fn in_tool<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    #[cfg(feature = "mcp")]
    #[inline(always)]
    pub(crate) fn inject_current(params: Option<Value>) -> Option<Value> {
        params
    }

    impl RunTrace {
        #[inline(always)]
        pub(crate) fn new(_: &Settings, _: &dyn Provider, _model: &str, _system: &str) -> RunTrace {
            RunTrace
        }
        #[inline(always)]
        pub(crate) fn observe(&self, _: &AgentEvent, _: &[ToolDefinition]) -> Closing {
            Closing
        }
        #[inline(always)]
        pub(crate) fn open_chat(&self, _model: &str, _turn: u32) {}
        #[inline(always)]
        pub(crate) fn request(&self, _: &Request) {}
        #[inline(always)]
        pub(crate) fn reply_failed(&self, _: Option<&crate::Error>) {}
        #[inline(always)]
        pub(crate) fn tool(&self, _call_id: &str) -> Scope {
            Scope
        }
    }

    impl Scope {
        #[inline(always)]
        pub(crate) fn current() -> Scope {
            Scope
        }
        #[inline(always)]
        pub(crate) fn in_scope<R>(self, f: impl FnOnce() -> R) -> R {
            f()
        }
    }
}

#[cfg(all(not(feature = "tracing"), feature = "mcp"))]
pub(crate) use off::{McpCall, McpPeer, in_tool, inject_current};
#[cfg(not(feature = "tracing"))]
pub(crate) use off::{RunTrace, Scope, Served, Settings};
