//! How fast a running agent obeys: abort latency in each phase, and the wall time of a batch
//! of parallel tools against the same batch run one at a time.
//!
//! `cargo bench --bench control`
//!
//! Groups:
//! - `abort/waiting_for_first_byte`, `abort/streaming`, `abort/during_tool`: time from
//!   `abort()` on another thread to `prompt` returning, while the scripted provider waits
//!   before its first byte, while it streams (paced at 1000 chunks/s), and while a tool that
//!   honours its cancel token runs.
//! - `tools/parallel_3`, `tools/sequential_3`: a whole run whose reply calls three tools
//!   that sleep 10, 20 and 30 ms (parallel: close to the longest, 30 ms; sequential: the sum,
//!   60 ms), plus the scripted replies around them.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use crossbeam_channel::{Receiver, Sender};
use pagent::llm::{Faux, FauxReply};
use pagent::tool::{self, ToolOutput};
use pagent::{Agent, AgentEvent, RunStopReason};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, schemars::JsonSchema)]
struct Sleep {
    ms: u64,
}

/// A tool that says when it started, then sleeps (abortable).
fn sleeper(started: Option<Sender<()>>) -> impl pagent::Tool {
    tool::typed("sleep", "Sleeps.", move |a: Sleep, ctx| {
        if let Some(tx) = &started {
            let _ = tx.send(());
        }
        ctx.sleep(Duration::from_millis(a.ms));
        Ok(ToolOutput::text("done"))
    })
}

/// Runs `agent.prompt` and aborts it from another thread once `ready` fires; returns the
/// time from the abort to `prompt` returning.
fn abort_latency(agent: &Agent, ready: &Receiver<()>) -> Duration {
    let handle = agent.handle();
    std::thread::scope(|s| {
        let aborter = s.spawn(|| {
            ready
                .recv_timeout(Duration::from_secs(10))
                .expect("the phase was reached");
            let at = Instant::now();
            assert!(handle.abort());
            at
        });
        let result = agent.prompt("go").unwrap();
        let returned = Instant::now();
        assert_eq!(result.stop_reason, RunStopReason::Cancelled);
        returned - aborter.join().unwrap()
    })
}

/// Sums `abort_latency` over `iters` fresh agents built by `make`.
fn abort_bench(iters: u64, make: impl Fn(Sender<()>) -> Agent) -> Duration {
    (0..iters)
        .map(|_| {
            let (tx, rx) = crossbeam_channel::bounded(1);
            let agent = make(tx);
            abort_latency(&agent, &rx)
        })
        .sum()
}

fn abort(c: &mut Criterion) {
    let mut g = c.benchmark_group("abort");
    g.bench_function("waiting_for_first_byte", |b| {
        b.iter_custom(|iters| {
            abort_bench(iters, |tx| {
                let faux = Faux::default().reply_with(move |_| {
                    let _ = tx.send(());
                    FauxReply::text("late").delay(Duration::from_secs(30))
                });
                Agent::builder().provider(faux).build().unwrap()
            })
        })
    });
    g.bench_function("streaming", |b| {
        b.iter_custom(|iters| {
            abort_bench(iters, |tx| {
                let faux = Faux::default()
                    .tokens_per_second(1000.0)
                    .reply(FauxReply::text("word ".repeat(500)));
                let agent = Agent::builder().provider(faux).build().unwrap();
                agent
                    .subscribe(move |e: &AgentEvent| {
                        if let AgentEvent::MessageUpdate { .. } = e {
                            let _ = tx.try_send(());
                        }
                    })
                    .keep();
                agent
            })
        })
    });
    g.bench_function("during_tool", |b| {
        b.iter_custom(|iters| {
            abort_bench(iters, |tx| {
                let faux =
                    Faux::default().reply(FauxReply::tool_call("sleep", json!({"ms": 30_000})));
                Agent::builder()
                    .provider(faux)
                    .tool(sleeper(Some(tx)))
                    .build()
                    .unwrap()
            })
        })
    });
    g.finish();
}

fn tools(c: &mut Criterion) {
    let mut g = c.benchmark_group("tools");
    for (name, cap) in [("parallel_3", 8), ("sequential_3", 1)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let faux = Faux::default()
                    .reply(
                        FauxReply::tool_call("sleep", json!({"ms": 10}))
                            .then_tool_call("sleep", json!({"ms": 20}))
                            .then_tool_call("sleep", json!({"ms": 30})),
                    )
                    .reply(FauxReply::text("ok"));
                let agent = Agent::builder()
                    .provider(faux)
                    .tool(sleeper(None))
                    .max_parallel_tools(cap)
                    .build()
                    .unwrap();
                agent.prompt("go").unwrap()
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3));
    targets = abort, tools
}
criterion_main!(benches);
