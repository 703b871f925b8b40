//! pagent's spans exported over OTLP by the OpenTelemetry SDK for Rust, from a blocking
//! program: no async runtime anywhere.
//!
//! ```text
//! cargo run -p pagent-otlp-example                  # three scripted runs, offline
//! cargo run -p pagent-otlp-example -- "a question"  # one run on the model of the environment
//! ```
//!
//! The spans go to `OTEL_EXPORTER_OTLP_ENDPOINT` (default `http://localhost:4318`; the
//! exporter posts to `/v1/traces`), protobuf over HTTP, sent by the official exporter
//! (`opentelemetry-otlp`) through [`UreqClient`], a blocking HTTP client of a few lines.
//! The SDK's batch processor exports on a thread of its own and awaits each export with a
//! `block_on` there, so a client that blocks is exactly what it needs.
//!
//! The three scripted runs, each an `invoke_agent` span of its own name:
//! - `weather-desk`: two tool calls run in parallel, then the answer; with contents (the
//!   messages and the tools' arguments and results are on the spans);
//! - `failing`: the model call fails;
//! - `interrupted`: the run is aborted while its first tool runs, so the second never runs.

use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, AgentEvent, AgentHandle, ToolError, ToolOutput, Usage, tool};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

/// OTLP over blocking HTTP: ureq, which pagent already uses for its providers.
#[derive(Debug)]
struct UreqClient(ureq::Agent);

impl UreqClient {
    fn new() -> UreqClient {
        let config = ureq::Agent::config_builder()
            // The exporter reads the status itself (and retries what it may).
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build();
        UreqClient(config.into())
    }
}

#[async_trait]
impl HttpClient for UreqClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        // Done at once, on the exporter's own thread (see the module docs).
        let (parts, body) = request.into_parts();
        let response = self.0.run(Request::from_parts(parts, body.to_vec()))?;
        let (parts, mut body) = response.into_parts();
        let body = body.with_config().limit(4 << 20).read_to_vec()?;
        Ok(Response::from_parts(parts, Bytes::from(body)))
    }
}

fn tracer_provider() -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(UreqClient::new())
        .build()?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name("pagent-otlp-example")
                .build(),
        )
        .build())
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Zone {
    zone: String,
}

fn weather() -> impl pagent::Tool {
    tool::typed("get_weather", "The weather in a city", |a: City, _| {
        Ok(ToolOutput::text(format!("{}: 21 C, sunny", a.city)))
    })
}

fn clock() -> impl pagent::Tool {
    tool::typed("get_time", "The time in a zone", |a: Zone, _| {
        Ok(ToolOutput::text(format!("12:00 {}", a.zone)))
    })
}

/// A tool that works until the run is aborted, and then says it was interrupted.
fn slow_search() -> impl pagent::Tool {
    tool::typed("search", "Searches the archive", |_: City, ctx| {
        if ctx.sleep(Duration::from_secs(10)) {
            return Err(ToolError::new("interrupted"));
        }
        Ok(ToolOutput::text("nothing found"))
    })
}

/// Two tool calls of one reply, run in parallel, then the answer; contents on the spans.
fn tool_run() -> Result<String, pagent::Error> {
    let model = Faux::default()
        .reply(
            FauxReply::tool_call("get_weather", json!({"city": "Oslo"}))
                .with_id("call_weather")
                .then_tool_call("get_time", json!({"zone": "CET"}))
                .with_id("call_time")
                .usage(Usage::new(120, 30).with_cache(100, 0)),
        )
        .reply(FauxReply::text("Sunny, and it is noon.").usage(Usage::new(180, 8)));
    let agent = Agent::builder()
        .provider(model)
        .model("faux-1")
        .name("weather-desk")
        .system_prompt("You are a weather desk.")
        .tool(weather())
        .tool(clock())
        .trace_content(true)
        .build()?;
    Ok(agent.prompt("Weather and time in Oslo?")?.text())
}

/// A model call that fails.
fn failed_run() -> String {
    let agent = Agent::builder()
        .provider(Faux::default().reply(FauxReply::fail("the model server is down")))
        .model("faux-1")
        .name("failing")
        .build();
    match agent.map(|a| a.prompt("Anyone there?")) {
        Ok(Err(e)) => e.to_string(),
        other => format!("unexpected: {other:?}"),
    }
}

/// A run aborted while its first tool runs: the second call is never run.
fn aborted_run() -> Result<String, pagent::Error> {
    let model = Faux::default().reply(
        FauxReply::tool_call("search", json!({"city": "Oslo"}))
            .with_id("call_search")
            .then_tool_call("get_weather", json!({"city": "Oslo"}))
            .with_id("call_weather"),
    );
    let agent = Agent::builder()
        .provider(model)
        .model("faux-1")
        .name("interrupted")
        .tool(slow_search())
        .tool(weather())
        .max_parallel_tools(1)
        .build()?;
    // What a user's "stop" button does, from the listener that sees the search start.
    let handle: Arc<OnceLock<AgentHandle>> = Arc::default();
    let h = handle.clone();
    let _sub = agent.subscribe(move |e| {
        if let AgentEvent::ToolExecute { tool_name, .. } = e
            && tool_name == "search"
        {
            h.get().map(AgentHandle::abort);
        }
    });
    let _ = handle.set(agent.handle());
    Ok(format!(
        "{:?}",
        agent.prompt("Search the archive")?.stop_reason
    ))
}

fn main() -> ExitCode {
    let provider = match tracer_provider() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("no OTLP exporter: {e}");
            return ExitCode::FAILURE;
        }
    };
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("pagent-otlp-example")));
    if tracing::subscriber::set_global_default(subscriber).is_err() {
        eprintln!("a global subscriber was already set");
        return ExitCode::FAILURE;
    }

    let mut ok = true;
    match std::env::args().nth(1) {
        Some(prompt) => match on_the_environments_model(&prompt) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("the run failed: {e}");
                ok = false;
            }
        },
        None => {
            match tool_run() {
                Ok(text) => println!("weather-desk: {text}"),
                Err(e) => {
                    eprintln!("weather-desk failed: {e}");
                    ok = false;
                }
            }
            println!("failing: {}", failed_run());
            match aborted_run() {
                Ok(stop) => println!("interrupted: {stop}"),
                Err(e) => {
                    eprintln!("interrupted failed: {e}");
                    ok = false;
                }
            }
        }
    }

    // Exports what is still queued and stops the exporter's thread.
    if let Err(e) = provider.shutdown() {
        eprintln!("exporting the spans failed: {e}");
        ok = false;
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One run on the provider and model the environment names (see `pagent::llm::from_env`).
fn on_the_environments_model(prompt: &str) -> Result<String, pagent::Error> {
    let chosen = pagent::llm::from_env()?;
    let agent = Agent::builder()
        .provider(chosen.provider)
        .model(chosen.model)
        .name("assistant")
        .build()?;
    Ok(agent.prompt(prompt)?.text())
}
