//! The CPU cost of the `tracing` feature, per streamed delta and per turn.
//!
//! The same runs on the scripted provider, timed as CPU time of the whole process (tool
//! workers included), built without the feature (`trace/*/off`) and with it
//! (`--features tracing`):
//!
//! - `on_none`: no subscriber at all: every span is disabled at its creation;
//! - `on_filtered`: a subscriber that records nothing of pagent's: a registry behind a
//!   `WARN` level filter (pagent's spans are `INFO`), as a program that traces only warnings;
//! - `on_registry`: a registry that records every span (no exporter): the cost of the spans
//!   themselves.
//!
//! `trace/delta/*`: one reply of `DELTAS` one-character text deltas; the figure is per delta.
//! `trace/turn/*`: a run of two turns (a tool call, its tool, the answer); per turn.
//!
//! ```text
//! cargo bench --bench trace                      # off
//! cargo bench --bench trace --features tracing   # on_none, on_filtered, on_registry
//! ```
//!
//! With `PAGENT_TRACE_BENCH_ONCE=delta/off` (or `turn/on_filtered`, ...) the binary runs that
//! case 20 times and exits, without criterion: what `valgrind --tool=callgrind` counts, the
//! same instructions run after run, so builds with and without the feature compare exactly.
//!
//! Instructions counted so (`valgrind --tool=callgrind`, 20 runs of each case, December
//! 2026): per delta, off 1,414; on_none 1,443 (+2.1%); on_filtered 1,443; on_registry 1,440.
//! Per turn, off 62,000; on_none 64,700 (+4.4%); on_filtered 64,400; on_registry 68,700.

mod cpu;
use cpu::cpu_ns;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group};
use pagent::llm::{Faux, FauxReply, Request};
use pagent::{Agent, Message, ToolOutput, tool};
use serde_json::json;

const DELTAS: usize = 2000;

fn delta_agent() -> Agent {
    let text = "x".repeat(DELTAS);
    Agent::builder()
        .provider(
            Faux::default()
                .chunk_chars(1)
                .otherwise(move |_| FauxReply::text(text.clone())),
        )
        .model("faux-1")
        .build()
        .unwrap()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

/// Two turns a prompt: the model calls the tool, then answers.
fn turn_agent() -> Agent {
    let reply = |request: &Request| match request.messages.last().map(|m| &**m) {
        Some(Message::ToolResult(_)) => FauxReply::text("Sunny."),
        _ => FauxReply::tool_call("get_weather", json!({"city": "Oslo"})),
    };
    Agent::builder()
        .provider(Faux::default().otherwise(reply))
        .model("faux-1")
        .tool(tool::typed("get_weather", "The weather", |a: City, _| {
            Ok(ToolOutput::text(format!("{}: sunny", a.city)))
        }))
        .build()
        .unwrap()
}

/// One prompt on a fresh conversation.
fn prompt(agent: &Agent) {
    agent.reset().unwrap();
    agent.prompt("go").unwrap();
}

/// The subscribers of the cases built with the feature; none without it.
#[cfg(feature = "tracing")]
fn cases() -> Vec<(&'static str, Option<tracing::Dispatch>)> {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::layer::SubscriberExt;
    vec![
        ("on_none", None),
        (
            "on_filtered",
            Some(tracing::Dispatch::new(
                tracing_subscriber::registry().with(LevelFilter::WARN),
            )),
        ),
        (
            "on_registry",
            Some(tracing::Dispatch::new(tracing_subscriber::registry())),
        ),
    ]
}

#[cfg(not(feature = "tracing"))]
fn cases() -> Vec<(&'static str, Option<()>)> {
    vec![("off", None)]
}

/// Runs `f` with the case's subscriber as this thread's default (pagent carries it to its
/// own threads).
#[cfg(feature = "tracing")]
fn with<R>(dispatch: &Option<tracing::Dispatch>, f: impl FnOnce() -> R) -> R {
    match dispatch {
        Some(d) => tracing::dispatcher::with_default(d, f),
        None => f(),
    }
}

#[cfg(not(feature = "tracing"))]
fn with<R>(_: &Option<()>, f: impl FnOnce() -> R) -> R {
    f()
}

fn bench(c: &mut Criterion) {
    for (what, per, agent) in [
        ("delta", DELTAS as u64, delta_agent()),
        ("turn", 2, turn_agent()),
    ] {
        let mut group = c.benchmark_group(format!("trace/{what}"));
        group.throughput(Throughput::Elements(per));
        group.measurement_time(Duration::from_secs(8));
        for (case, dispatch) in cases() {
            group.bench_function(case, |b| {
                with(&dispatch, || {
                    b.iter_custom(|iters| {
                        let start = cpu_ns(libc::RUSAGE_SELF);
                        for _ in 0..iters {
                            prompt(&agent);
                        }
                        Duration::from_nanos(cpu_ns(libc::RUSAGE_SELF) - start)
                    })
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);

fn main() {
    if let Ok(once) = std::env::var("PAGENT_TRACE_BENCH_ONCE") {
        let (what, case) = once
            .split_once('/')
            .expect("PAGENT_TRACE_BENCH_ONCE=delta/off");
        let agent = if what == "delta" {
            delta_agent()
        } else {
            turn_agent()
        };
        let (_, dispatch) = cases()
            .into_iter()
            .find(|(name, _)| *name == case)
            .expect("a case of this build");
        with(&dispatch, || (0..20).for_each(|_| prompt(&agent)));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
