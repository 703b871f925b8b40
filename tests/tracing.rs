//! The spans of the `tracing` feature, in OpenTelemetry's GenAI conventions: a layer of our
//! own on tracing-subscriber's registry records every span (its parent, its fields, the
//! events in it, the threads it was entered on), and each test asserts the whole tree.
//!
//! Each test installs its subscriber for its own thread only (`with_default`): the spans
//! made on pagent's other threads (tool workers, `prompt_stream`'s run thread) reach it only
//! because pagent carries the subscriber there, which these tests prove as well.

mod support;
// Trace context to and from other processes (`params._meta`).
#[path = "tracing/propagation.rs"]
mod propagation;
// The MCP client's requests.
#[cfg(feature = "mcp")]
#[path = "tracing/mcp.rs"]
mod mcp;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use pagent::hooks::ToolDecision;
use pagent::llm::{Faux, FauxReply, OpenAiCompat};
use pagent::{
    Agent, AgentEvent, AgentHandle, Document, Image, RunStopReason, StreamEvent, ToolOutput, Usage,
    UserMessage, tool,
};
use serde_json::json;
use support::{Reply, Server, fast_retries};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

// ---- the recording layer ----

#[derive(Default)]
struct SpanRec {
    name: &'static str,
    parent: Option<usize>,
    fields: BTreeMap<&'static str, String>,
    events: Vec<String>,
    threads: BTreeSet<String>,
    closed: bool,
}

#[derive(Default)]
struct Recorded {
    spans: Vec<SpanRec>,
    // The registry reuses the ids of closed spans: an id names the latest span given it.
    by_id: HashMap<u64, usize>,
    // Events outside any span.
    loose: Vec<String>,
}

#[derive(Clone, Default)]
struct Recording(Arc<Mutex<Recorded>>, SlowToolExit);

/// When set, a tool worker leaving its `execute_tool` span waits a while first, so that the
/// run thread lets go of the span before the worker does.
#[derive(Clone, Copy, Default)]
struct SlowToolExit(bool);

/// Writes each field as the text a reader would compare: strings bare, numbers and booleans
/// as written, seconds (the only floats) as `<secs>`.
struct Fields<'a>(&'a mut BTreeMap<&'static str, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name(), value.to_string());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name(), value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name(), value.to_string());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        assert!(value >= 0.0, "{} = {value}", field.name());
        self.0.insert(field.name(), "<secs>".to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

/// Where a span was entered or an event made: pagent's threads by name, the test's own
/// thread as `test`.
fn thread_label() -> String {
    match std::thread::current().name() {
        Some(name) if name.starts_with("pagent-") => name.to_owned(),
        _ => "test".to_owned(),
    }
}

fn line(fields: &BTreeMap<&'static str, String>) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recording {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut rec = self.0.lock().unwrap();
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .and_then(|p| rec.by_id.get(&p.id().into_u64()).copied());
        let mut span = SpanRec {
            name: attrs.metadata().name(),
            parent,
            ..SpanRec::default()
        };
        attrs.record(&mut Fields(&mut span.fields));
        let index = rec.spans.len();
        rec.spans.push(span);
        rec.by_id.insert(id.into_u64(), index);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut rec = self.0.lock().unwrap();
        let i = rec.by_id[&id.into_u64()];
        values.record(&mut Fields(&mut rec.spans[i].fields));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let text = format!(
            "{} [{}] {}",
            event.metadata().name(),
            thread_label(),
            line(&fields)
        );
        let mut rec = self.0.lock().unwrap();
        match ctx
            .event_span(event)
            .and_then(|s| rec.by_id.get(&s.id().into_u64()).copied())
        {
            Some(i) => rec.spans[i].events.push(text),
            None => rec.loose.push(text),
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let tool = ctx.span(id).is_some_and(|s| s.name() == "execute_tool");
        if self.1.0 && tool && thread_label() == "pagent-tool" {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn on_enter(&self, id: &Id, _ctx: Context<'_, S>) {
        let mut rec = self.0.lock().unwrap();
        let i = rec.by_id[&id.into_u64()];
        rec.spans[i].threads.insert(thread_label());
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let mut rec = self.0.lock().unwrap();
        let i = rec.by_id[&id.into_u64()];
        rec.spans[i].closed = true;
    }
}

impl Recording {
    /// The tree: one line per span (`name k=v ...`, fields sorted), its events under it
    /// (`! name [thread] k=v ...`), children indented, in the order the spans were made.
    fn tree(&self) -> Vec<String> {
        let rec = self.0.lock().unwrap();
        let mut out = Vec::new();
        fn walk(rec: &Recorded, i: usize, depth: usize, out: &mut Vec<String>) {
            let s = &rec.spans[i];
            let pad = "  ".repeat(depth);
            out.push(
                format!("{pad}{} {}", s.name, line(&s.fields))
                    .trim_end()
                    .to_owned(),
            );
            for e in &s.events {
                out.push(format!("{pad}  ! {e}").trim_end().to_owned());
            }
            for (c, child) in rec.spans.iter().enumerate() {
                if child.parent == Some(i) {
                    walk(rec, c, depth + 1, out);
                }
            }
        }
        for (i, s) in rec.spans.iter().enumerate() {
            if s.parent.is_none() {
                walk(&rec, i, 0, &mut out);
            }
        }
        for e in &rec.loose {
            out.push(format!("! {e}"));
        }
        out
    }

    /// Every span was closed.
    fn all_closed(&self) -> bool {
        self.0.lock().unwrap().spans.iter().all(|s| s.closed)
    }

    /// The names of the spans not closed.
    fn open(&self) -> Vec<String> {
        let rec = self.0.lock().unwrap();
        rec.spans
            .iter()
            .filter(|s| !s.closed)
            .map(|s| s.name.to_owned())
            .collect()
    }

    /// The threads the spans named `name` were entered on.
    fn threads_of(&self, name: &str) -> BTreeSet<String> {
        let rec = self.0.lock().unwrap();
        rec.spans
            .iter()
            .filter(|s| s.name == name)
            .flat_map(|s| s.threads.iter().cloned())
            .collect()
    }

    /// Every field value and event of every span, for searching.
    fn all_text(&self) -> String {
        self.tree().join("\n")
    }
}

/// Held shared by every test that records and alone by the one that runs without a
/// subscriber. tracing caches whether a span or event site is enabled once per process, when
/// it is first reached, and while at most one subscriber exists it asks only the reaching
/// thread's: a site first reached by the run without a subscriber, while one recording test
/// runs, stays disabled for that test (its spans went missing under load). Recording tests
/// may overlap (every one of them enables every site), and each subscriber made afterwards
/// asks every site again.
static SUBSCRIBERS: RwLock<()> = RwLock::new(());

/// Runs `f` with a recording subscriber as this thread's default; returns what `f` returned
/// and the recording.
fn traced<R>(f: impl FnOnce() -> R) -> (R, Recording) {
    record_with(Recording::default(), f)
}

/// As [`traced`], with tool workers that leave their span late (see [`SlowToolExit`]).
fn traced_slow_tool_exit<R>(f: impl FnOnce() -> R) -> (R, Recording) {
    record_with(Recording(Arc::default(), SlowToolExit(true)), f)
}

fn record_with<R>(recording: Recording, f: impl FnOnce() -> R) -> (R, Recording) {
    let _shared = SUBSCRIBERS.read().unwrap_or_else(|e| e.into_inner());
    let subscriber = tracing_subscriber::registry().with(recording.clone());
    let r = tracing::subscriber::with_default(subscriber, f);
    (r, recording)
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

/// The line of a span `name` at `depth` with these `key=value` fields (in any order; the
/// tree sorts them), and those of `base`.
fn span(depth: usize, name: &str, base: &[&str], fields: &[&str]) -> String {
    let mut all: Vec<&str> = base.iter().chain(fields).copied().collect();
    all.sort_by_key(|f| f.split_once('=').map_or(*f, |(k, _)| k));
    format!("{}{name} {}", "  ".repeat(depth), all.join(" "))
}

// ---- tools ----

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

/// A tool that emits a `tool.ran` event (inside its span, on its thread) and answers.
fn weather() -> impl pagent::Tool {
    tool::typed(
        "get_weather",
        "Get the current weather for a city",
        |args: City, _| {
            tracing::info!(name: "tool.ran", tool = "get_weather");
            Ok(ToolOutput::text(format!("{}: 21 C, sunny", args.city)))
        },
    )
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Zone {
    zone: String,
}

fn clock() -> impl pagent::Tool {
    tool::typed("get_time", "", |args: Zone, _| {
        tracing::info!(name: "tool.ran", tool = "get_time");
        Ok(ToolOutput::text(format!("12:00 in {}", args.zone)))
    })
}

fn two_calls() -> FauxReply {
    FauxReply::tool_call("get_weather", json!({"city": "Oslo"}))
        .with_id("call_w")
        .then_tool_call("get_time", json!({"zone": "CET"}))
        .with_id("call_t")
        .usage(Usage::new(120, 30).with_cache(100, 8).with_reasoning(12))
}

/// The line of an unnamed run's `invoke_agent` span at the root, with these fields too.
fn root_run(fields: &[&str]) -> String {
    span(
        0,
        "invoke_agent",
        RUN,
        &[&["otel.name=invoke_agent"], fields].concat(),
    )
}

/// What every `invoke_agent` / `chat` span of the scripted provider on `faux-1` says.
const RUN: &[&str] = &[
    "gen_ai.operation.name=invoke_agent",
    "gen_ai.provider.name=faux",
    "gen_ai.request.model=faux-1",
    "otel.kind=internal",
];
const CHAT: &[&str] = &[
    "gen_ai.operation.name=chat",
    "gen_ai.provider.name=faux",
    "gen_ai.request.model=faux-1",
    "gen_ai.request.stream=true",
    "otel.kind=client",
    "otel.name=chat faux-1",
    "gen_ai.response.model=faux-1",
];

/// The `invoke_agent` and `chat` lines of a run on `faux-1` that answers "hi" with 3 input
/// tokens and 1 output token, under a span at `depth`.
pub(crate) fn hello_run(depth: usize) -> [String; 2] {
    [
        span(
            depth + 1,
            "invoke_agent",
            RUN,
            &[
                "gen_ai.usage.input_tokens=3",
                "gen_ai.usage.output_tokens=1",
                "otel.name=invoke_agent",
                "pagent.run.stop_reason=no_tool_calls",
                "pagent.run.turns=1",
            ],
        ),
        span(
            depth + 2,
            "chat",
            CHAT,
            &[
                "gen_ai.response.finish_reasons=[\"stop\"]",
                "gen_ai.response.time_to_first_chunk=<secs>",
                "gen_ai.usage.input_tokens=3",
                "gen_ai.usage.output_tokens=1",
                "pagent.turn=1",
            ],
        ),
    ]
}

// ---- the span tree ----

#[test]
fn a_run_with_parallel_tools_is_one_tree_in_the_conventions_names() {
    let agent = Agent::builder()
        .provider(
            Faux::default()
                .reply(two_calls())
                .reply(FauxReply::text("Sunny, at noon.").usage(Usage::new(200, 6))),
        )
        .model("faux-1")
        .name("weather-desk")
        .tool(weather())
        .tool(clock())
        .build()
        .unwrap();
    let (result, rec) = traced(|| agent.prompt("Weather and time in Oslo?").unwrap());
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.tree(),
        lines(&[
            "invoke_agent gen_ai.agent.name=weather-desk gen_ai.operation.name=invoke_agent gen_ai.provider.name=faux gen_ai.request.model=faux-1 gen_ai.usage.cache_creation.input_tokens=8 gen_ai.usage.cache_read.input_tokens=100 gen_ai.usage.input_tokens=320 gen_ai.usage.output_tokens=36 gen_ai.usage.reasoning.output_tokens=12 otel.kind=internal otel.name=invoke_agent weather-desk pagent.run.stop_reason=no_tool_calls pagent.run.turns=2",
            &span(
                1,
                "chat",
                CHAT,
                &[
                    "gen_ai.response.finish_reasons=[\"tool_call\"]",
                    "gen_ai.response.time_to_first_chunk=<secs>",
                    "gen_ai.usage.cache_creation.input_tokens=8",
                    "gen_ai.usage.cache_read.input_tokens=100",
                    "gen_ai.usage.input_tokens=120",
                    "gen_ai.usage.output_tokens=30",
                    "gen_ai.usage.reasoning.output_tokens=12",
                    "pagent.turn=1",
                ]
            ),
            "  execute_tool gen_ai.operation.name=execute_tool gen_ai.tool.call.id=call_w gen_ai.tool.description=Get the current weather for a city gen_ai.tool.name=get_weather gen_ai.tool.type=function otel.kind=internal otel.name=execute_tool get_weather",
            "    ! tool.ran [pagent-tool] tool=get_weather",
            "  execute_tool gen_ai.operation.name=execute_tool gen_ai.tool.call.id=call_t gen_ai.tool.name=get_time gen_ai.tool.type=function otel.kind=internal otel.name=execute_tool get_time",
            "    ! tool.ran [pagent-tool] tool=get_time",
            &span(
                1,
                "chat",
                CHAT,
                &[
                    "gen_ai.response.finish_reasons=[\"stop\"]",
                    "gen_ai.response.time_to_first_chunk=<secs>",
                    "gen_ai.usage.input_tokens=200",
                    "gen_ai.usage.output_tokens=6",
                    "pagent.turn=2",
                ]
            ),
        ])
    );
    assert!(rec.all_closed());
    // Two calls of one reply run on workers, each inside its own span.
    assert_eq!(
        rec.threads_of("execute_tool"),
        BTreeSet::from(["pagent-tool".to_owned()])
    );
    assert_eq!(rec.threads_of("chat"), BTreeSet::from(["test".to_owned()]));
}

/// A tool worker that lets go of its call's span after the run thread did closes it, and
/// the run's span above it closes too. The registry lets go of a parent through the
/// thread's default subscriber: a worker that dropped the span after leaving the run's
/// subscriber left the run's span open for ever, so it was never exported.
#[test]
fn a_tool_span_let_go_of_last_by_its_worker_closes_and_so_does_the_run() {
    let agent = Agent::builder()
        .provider(
            Faux::default()
                .reply(two_calls())
                .reply(FauxReply::text("Sunny, at noon.")),
        )
        .model("faux-1")
        .tool(weather())
        .tool(clock())
        .build()
        .unwrap();
    let (result, rec) = traced_slow_tool_exit(|| agent.prompt("Weather and time?").unwrap());
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(
        rec.threads_of("execute_tool"),
        BTreeSet::from(["pagent-tool".to_owned()])
    );
    assert_eq!(rec.open(), Vec::<String>::new());
}

#[test]
fn the_run_span_is_a_child_of_the_callers_and_listeners_run_inside_it() {
    let agent = Agent::builder()
        .provider(Faux::default().reply(FauxReply::text("hi").usage(Usage::new(3, 1))))
        .model("faux-1")
        .build()
        .unwrap();
    let _sub = agent.subscribe(|e| {
        if matches!(e, AgentEvent::AgentEnd { .. }) {
            tracing::info!(name: "listener.saw_end", seen = true);
        }
        if let AgentEvent::MessageEnd { message } = e
            && message.as_assistant().is_some()
        {
            tracing::info!(name: "listener.saw_reply", seen = true);
        }
    });
    let (_, rec) = traced(|| {
        let _caller = tracing::info_span!("request_handler").entered();
        agent.prompt("hello").unwrap();
    });
    let [run, chat] = hello_run(0);
    assert_eq!(
        rec.tree(),
        lines(&[
            "request_handler",
            &run,
            "    ! listener.saw_end [test] seen=true",
            &chat,
            "      ! listener.saw_reply [test] seen=true",
        ])
    );
}

#[test]
fn prompt_stream_carries_the_callers_span_and_subscriber_to_the_run_thread() {
    let agent = Agent::builder()
        .provider(
            Faux::default()
                .reply(FauxReply::tool_call("get_weather", json!({"city": "Rome"})).with_id("c1"))
                .reply(FauxReply::text("Warm.").usage(Usage::new(9, 2))),
        )
        .model("faux-1")
        .tool(weather())
        .build()
        .unwrap();
    let (text, rec) = traced(|| {
        let _caller = tracing::info_span!("request_handler").entered();
        agent
            .prompt_stream("Rome?")
            .unwrap()
            .text()
            .collect::<String>()
    });
    assert_eq!(text, "Warm.");
    let tree = rec.tree();
    assert_eq!(tree[0], "request_handler");
    assert!(tree[1].starts_with("  invoke_agent "), "{tree:#?}");
    assert!(tree[2].starts_with("    chat "), "{tree:#?}");
    assert!(tree[3].starts_with("    execute_tool "), "{tree:#?}");
    // One call runs on the run thread itself, inside its span.
    assert_eq!(tree[4], "      ! tool.ran [pagent-run] tool=get_weather");
    assert!(tree[5].starts_with("    chat "), "{tree:#?}");
    assert_eq!(tree.len(), 6, "{tree:#?}");
    assert_eq!(
        rec.threads_of("invoke_agent"),
        BTreeSet::from(["pagent-run".to_owned()])
    );
    assert!(rec.all_closed());
}

#[test]
fn a_failed_model_call_fails_its_chat_span_and_the_run_with_the_error_kind() {
    let agent = Agent::builder()
        .provider(Faux::default().reply(FauxReply::fail("the model is down")))
        .model("faux-1")
        .build()
        .unwrap();
    let (result, rec) = traced(|| agent.prompt("hello"));
    let error = result.unwrap_err();
    assert_eq!(error.to_string(), "provider error: the model is down");
    assert_eq!(
        rec.tree(),
        lines(&[
            &root_run(&[
                "error.type=provider",
                "otel.status_code=error",
                "otel.status_description=provider error: the model is down",
                "pagent.run.stop_reason=error",
                "pagent.run.turns=1",
            ]),
            &span(
                1,
                "chat",
                CHAT,
                &[
                    "error.type=provider",
                    "gen_ai.response.finish_reasons=[\"error\"]",
                    "otel.status_code=error",
                    "otel.status_description=provider error: the model is down",
                    "pagent.turn=1",
                ]
            ),
            "    ! gen_ai.client.operation.exception [test] exception.message=provider error: the model is down",
        ])
    );
    assert!(rec.all_closed());
}

#[test]
fn an_http_error_is_its_kind_and_a_retry_is_an_event_and_no_key_is_in_any_span() {
    const KEY: &str = "sk-trace-test-0123456789abcdef";
    let echo = format!(r#"{{"error":{{"message":"bad key {KEY}","type":"auth"}}}}"#);
    let server = Server::start(vec![
        Reply::json(
            429,
            format!(r#"{{"error":{{"message":"slow down {KEY}"}}}}"#),
        ),
        Reply::sse_file("written/keepalive_crlf.sse"),
        Reply::json(401, echo),
    ]);
    let provider = OpenAiCompat::new(format!("{}/v1", server.url))
        .api_key(KEY)
        .retry(fast_retries());
    let agent = Agent::builder()
        .provider(provider)
        .model("gpt-test")
        .build()
        .unwrap();
    let (results, rec) = traced(|| (agent.prompt("one"), agent.prompt("two")));
    assert_eq!(results.0.unwrap().text(), "Hello");
    let error = results.1.unwrap_err();
    let tree = rec.tree();
    let run = &[
        "gen_ai.operation.name=invoke_agent",
        "gen_ai.provider.name=openai",
        "gen_ai.request.model=gpt-test",
        "otel.kind=internal",
        "otel.name=invoke_agent",
        "pagent.run.turns=1",
    ];
    // Where the requests went: the base URL's host and port.
    let port = format!(
        "server.port={}",
        server.url.rsplit(':').next().unwrap_or_default()
    );
    let chat = &[
        "gen_ai.operation.name=chat",
        "gen_ai.provider.name=openai",
        "gen_ai.request.model=gpt-test",
        "gen_ai.request.stream=true",
        "otel.kind=client",
        "otel.name=chat gpt-test",
        "pagent.turn=1",
        "server.address=127.0.0.1",
        &port,
    ];
    let failed = format!("otel.status_description={error}");
    // The 429's text, as the retry event carries it: the key is gone from it.
    let StreamEvent::Retry { error: retried, .. } = agent
        .snapshot()
        .messages
        .iter()
        .next()
        .map(|_| StreamEvent::Retry {
            attempt: 1,
            delay_ms: 0,
            error: String::new(),
            at: None,
        })
        .unwrap()
    else {
        unreachable!()
    };
    let _ = retried;
    assert_eq!(tree.len(), 6, "{tree:#?}");
    assert_eq!(
        tree[0],
        span(
            0,
            "invoke_agent",
            run,
            &["pagent.run.stop_reason=no_tool_calls"]
        )
    );
    assert_eq!(
        tree[1],
        span(
            1,
            "chat",
            chat,
            &[
                "gen_ai.response.finish_reasons=[\"stop\"]",
                // What the server said: the stream names its model and its response.
                "gen_ai.response.id=chatcmpl-AbC1",
                "gen_ai.response.model=gpt-4o-mini",
                "gen_ai.response.time_to_first_chunk=<secs>",
            ]
        )
    );
    assert!(
        tree[2]
            .starts_with("    ! pagent.retry [test] exception.message=http status 429: slow down ")
            && tree[2].contains(" pagent.retry.attempt=1 pagent.retry.delay_ms="),
        "{}",
        tree[2]
    );
    assert_eq!(
        tree[3],
        span(
            0,
            "invoke_agent",
            run,
            &[
                "error.type=auth",
                "otel.status_code=error",
                &failed,
                "pagent.run.stop_reason=error",
            ]
        )
    );
    assert_eq!(
        tree[4],
        span(
            1,
            "chat",
            chat,
            &[
                "error.type=auth",
                "gen_ai.response.finish_reasons=[\"error\"]",
                "gen_ai.response.model=gpt-test",
                "otel.status_code=error",
                &failed,
            ]
        )
    );
    assert_eq!(
        tree[5],
        format!("    ! gen_ai.client.operation.exception [test] exception.message={error}")
    );
    assert!(!rec.all_text().contains(KEY), "{tree:#?}");
    assert!(!rec.all_text().contains("0123456789abcdef"), "{tree:#?}");
}

#[test]
fn an_abort_mid_reply_is_an_aborted_finish_not_an_error() {
    let handle: Arc<OnceLock<AgentHandle>> = Arc::default();
    let agent = Agent::builder()
        .provider(
            Faux::default()
                .chunk_chars(2)
                .reply(FauxReply::text("Hello there, a long answer")),
        )
        .model("faux-1")
        .build()
        .unwrap();
    handle.set(agent.handle()).unwrap();
    let h = handle.clone();
    let _sub = agent.subscribe(move |e| {
        if let AgentEvent::MessageUpdate {
            delta: StreamEvent::TextDelta { .. },
            ..
        } = e
        {
            h.get().unwrap().abort();
        }
    });
    let (result, rec) = traced(|| agent.prompt("talk").unwrap());
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert_eq!(
        rec.tree(),
        lines(&[
            &root_run(&["pagent.run.stop_reason=cancelled", "pagent.run.turns=1",]),
            &span(
                1,
                "chat",
                CHAT,
                &[
                    "gen_ai.response.finish_reasons=[\"aborted\"]",
                    "gen_ai.response.time_to_first_chunk=<secs>",
                    "pagent.turn=1",
                ]
            ),
        ])
    );
    assert!(rec.all_closed());
}

#[test]
fn tool_errors_say_why_tool_error_blocked_cancelled_not_run() {
    let handle: Arc<OnceLock<AgentHandle>> = Arc::default();
    let h = handle.clone();
    let aborting = tool::typed("stop_all", "Stops", move |_: Zone, _| {
        h.get().unwrap().abort();
        Ok(ToolOutput::text("stopping"))
    });
    let failing = tool::typed("fail", "Fails", |_: Zone, _| {
        Err(pagent::ToolError::new("disk full"))
    });
    let agent = Agent::builder()
        .provider(
            Faux::default()
                .reply(
                    FauxReply::tool_call("fail", json!({"zone": "a"}))
                        .with_id("c_fail")
                        .then_tool_call("secret", json!({"zone": "b"}))
                        .with_id("c_blocked")
                        .then_tool_call("nope", json!({}))
                        .with_id("c_unknown")
                        .then_tool_call("stop_all", json!({"zone": "c"}))
                        .with_id("c_abort")
                        .then_tool_call("fail", json!({"zone": "d"}))
                        .with_id("c_late"),
                )
                .reply(FauxReply::text("unused")),
        )
        .model("faux-1")
        .tool(failing)
        .tool(aborting)
        .tool(tool::typed("secret", "Secret", |_: Zone, _| {
            Ok(ToolOutput::text("never"))
        }))
        .max_parallel_tools(1)
        .before_tool_call(|request| {
            tracing::info!(name: "hook.asked", call = request.call.id.as_str());
            if request.call.name == "secret" {
                ToolDecision::Block("not today".into())
            } else {
                ToolDecision::Allow
            }
        })
        .build()
        .unwrap();
    handle.set(agent.handle()).unwrap();
    let (result, rec) = traced(|| agent.prompt("go").unwrap());
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    let tools: Vec<String> = rec
        .tree()
        .into_iter()
        .filter(|l| l.starts_with("  execute_tool") || l.starts_with("    !"))
        .map(|l| {
            // Only what differs from call to call.
            let keep = [
                "gen_ai.tool.call.id=",
                "error.type=",
                "otel.status_code=",
                "call=",
            ];
            l.split(' ')
                .filter(|w| keep.iter().any(|k| w.starts_with(k)) || w.starts_with(['!', '[']))
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
                .trim()
                .to_owned()
        })
        .collect();
    assert_eq!(
        tools,
        lines(&[
            "error.type=tool_error gen_ai.tool.call.id=c_fail otel.status_code=error",
            "! [test] call=c_fail",
            "error.type=blocked gen_ai.tool.call.id=c_blocked otel.status_code=error",
            "! [test] call=c_blocked",
            "error.type=not_run gen_ai.tool.call.id=c_unknown otel.status_code=error",
            "gen_ai.tool.call.id=c_abort",
            "! [test] call=c_abort",
            "error.type=cancelled gen_ai.tool.call.id=c_late otel.status_code=error",
        ])
    );
    // Without contents, a tool's error text is not in the span.
    assert!(!rec.all_text().contains("disk full"));
    assert!(!rec.all_text().contains("not today"));
    assert!(rec.all_closed());
}

// ---- contents ----

const CONTENT_FIELDS: [&str; 6] = [
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "otel.status_description=Oslo",
];

fn content_agent(content: Option<bool>) -> Agent {
    let builder = Agent::builder()
        .provider(
            Faux::default()
                .reply(
                    FauxReply::tool_call("get_weather", json!({"city": "Oslo"}))
                        .with_id("c1")
                        .usage(Usage::new(5, 5)),
                )
                .reply(
                    FauxReply::default()
                        .then_thinking("Sunny it is.")
                        .then_text("Sunny in Oslo.")
                        .usage(Usage::new(9, 4)),
                ),
        )
        .model("faux-1")
        .system_prompt("You are a weather desk.")
        .tool(weather());
    match content {
        Some(on) => builder.trace_content(on),
        None => builder,
    }
    .build()
    .unwrap()
}

#[test]
fn contents_are_off_by_default() {
    let agent = content_agent(None);
    let (_, rec) = traced(|| agent.prompt("Weather in Oslo?").unwrap());
    let text = rec.all_text();
    for field in CONTENT_FIELDS {
        assert!(!text.contains(field), "{field} in {text}");
    }
    for secret in ["weather desk", "Weather in Oslo?", "21 C", "Sunny"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert_eq!(rec.tree().len(), 5);
}

/// The value of `field` in the tree's line `line`.
fn field_of(tree: &[String], line: usize, field: &str) -> serde_json::Value {
    let l = &tree[line];
    let start = l
        .find(&format!("{field}="))
        .unwrap_or_else(|| panic!("{field} in {l}"))
        + field.len()
        + 1;
    let rest = &l[start..];
    // The JSON text runs to the next ` key=` that follows a closing bracket.
    let end = rest.find("] ").map_or(rest.len(), |i| i + 1);
    serde_json::from_str(&rest[..end]).unwrap_or_else(|e| panic!("{e}: {rest}"))
}

#[test]
fn contents_opted_in_follow_the_conventions_message_format() {
    let agent = content_agent(Some(true));
    let (_, rec) = traced(|| agent.prompt("Weather in Oslo?").unwrap());
    let tree = rec.tree();
    assert!(tree[0].starts_with("invoke_agent "), "{tree:#?}");
    let system = json!([{"type": "text", "content": "You are a weather desk."}]);
    let prompt =
        json!({"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo?"}]});
    let call = json!({"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}
    ]});
    let answer = json!({"role": "assistant", "parts": [
        {"type": "reasoning", "content": "Sunny it is."},
        {"type": "text", "content": "Sunny in Oslo."},
    ]});
    let with_finish = |m: &serde_json::Value, f: &str| {
        let mut m = m.clone();
        m["finish_reason"] = json!(f);
        json!([m])
    };
    // The system prompt, the messages in and out of the span on line `line`.
    let contents = |line: usize, input: serde_json::Value, output: serde_json::Value| {
        assert_eq!(field_of(&tree, line, "gen_ai.system_instructions"), system);
        assert_eq!(field_of(&tree, line, "gen_ai.input.messages"), input);
        assert_eq!(field_of(&tree, line, "gen_ai.output.messages"), output);
    };
    // The run: what it was given, its last reply.
    contents(0, json!([prompt]), with_finish(&answer, "stop"));
    // The first call: what it sent and what came back.
    assert!(tree[1].starts_with("  chat "));
    contents(1, json!([prompt]), with_finish(&call, "tool_call"));
    // The tool: arguments as it ran with them, and its result.
    assert!(tree[2].starts_with("  execute_tool "));
    assert!(
        tree[2].contains(r#" gen_ai.tool.call.arguments={"city":"Oslo"} "#)
            && tree[2].contains(" gen_ai.tool.call.result=Oslo: 21 C, sunny "),
        "{}",
        tree[2]
    );
    // The second call sent the whole conversation.
    assert!(tree[4].starts_with("  chat "));
    let result = json!({"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "c1", "response": "Oslo: 21 C, sunny"}
    ]});
    assert_eq!(
        field_of(&tree, 4, "gen_ai.input.messages"),
        json!([prompt, call, result])
    );
    assert_eq!(
        field_of(&tree, 4, "gen_ai.output.messages"),
        with_finish(&answer, "stop")
    );
}

#[test]
fn contents_carry_images_and_documents_as_blob_and_uri_parts() {
    let png = b"\x89PNG\r\n\x1a\nIHDR".to_vec();
    let chart = tool::typed("get_chart", "", |_: City, _| {
        Ok(ToolOutput::text("the chart").with_part(Image::url("https://example.com/c.png")))
    });
    let agent = Agent::builder()
        .provider(
            Faux::default()
                .reply(FauxReply::tool_call("get_chart", json!({"city": "Oslo"})).with_id("c1"))
                .reply(FauxReply::text("A sunny chart.")),
        )
        .model("faux-1")
        .tool(chart)
        .trace_content(true)
        .build()
        .unwrap();
    let prompt = UserMessage::new("What are these?")
        .with_part(Image::new("image/png", png))
        .with_part(Document::url("https://example.com/report.pdf"))
        .with_part(Document::text("notes.txt", "hi"));
    let (_, rec) = traced(|| agent.prompt(prompt).unwrap());
    let tree = rec.tree();
    let user = json!({"role": "user", "parts": [
        {"type": "text", "content": "What are these?"},
        {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "iVBORw0KGgpJSERS"},
        {"type": "uri", "modality": "document", "uri": "https://example.com/report.pdf"},
        {"type": "blob", "modality": "document", "mime_type": "text/plain", "content": "aGk="},
    ]});
    let result = json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": [
        {"type": "text", "content": "the chart"},
        {"type": "uri", "modality": "image", "uri": "https://example.com/c.png"},
    ]}]});
    assert!(tree[3].starts_with("  chat "), "{tree:#?}");
    let sent = field_of(&tree, 3, "gen_ai.input.messages");
    assert_eq!((&sent[0], &sent[2]), (&user, &result));
}

#[test]
fn no_subscriber_no_spans_and_the_run_is_the_same() {
    // Spans made while nobody records are disabled, and the run does not change.
    let _alone = SUBSCRIBERS.write().unwrap_or_else(|e| e.into_inner());
    let agent = content_agent(Some(true));
    let result = agent.prompt("Weather in Oslo?").unwrap();
    assert_eq!(result.text(), "Sunny in Oslo.");
}
