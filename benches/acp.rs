//! ACP streaming latency: from a model delta to its `session/update` line at the client.
//!
//! `cargo bench -p pagent-benches --features acp --bench acp`
//!
//! `acp::serve` runs on its own thread between two OS pipes (the loopback an editor and its
//! agent share); the client on the bench thread opens a session and starts one prompt. The
//! model is a provider that hands the agent one text delta each time the bench asks for one,
//! stamping the moment it does; the bench reads the `session/update` line the delta became
//! and measures from the stamp to the line read: fold, listeners, mapping, JSON, the write and
//! flush, the pipe, and the client's read. Criterion reports the per-delta time (its median
//! is the median latency).
//!
//! `acp/cancel_to_cancelled_answer`: a prompt whose reply has streamed its first delta and
//! then waits (a model that stalls until aborted), measured from the client writing
//! `session/cancel` to it reading the prompt's `{"stopReason": "cancelled"}` answer.

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use crossbeam_channel::{Receiver, Sender};
use pagent::acp::{self, SessionInfo};
use pagent::llm::{OnEvent, Provider, ReplyEnd, Request, StreamEvent};
use pagent::{Agent, CancelToken, StopReason};
use serde_json::{Value, json};

/// A model that streams one delta per request of the bench, and says when it sent it.
struct OnDemand {
    go: Receiver<()>,
    sent: Sender<Instant>,
}

impl Provider for OnDemand {
    fn stream(
        &self,
        _request: &Request,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, pagent::Error> {
        while self.go.recv().is_ok() {
            if cancel.is_cancelled() {
                return Err(pagent::Error::Aborted);
            }
            let _ = self.sent.send(Instant::now());
            on_event(StreamEvent::text("token "))?;
        }
        Ok(ReplyEnd::new(StopReason::Stop))
    }
}

/// `acp::serve` on a thread of its own between two OS pipes, with a session open, and the
/// client's ends of the pipes on the bench thread.
struct Served {
    input: std::io::PipeWriter,
    lines: BufReader<std::io::PipeReader>,
    line: String,
    served: std::thread::JoinHandle<Result<(), pagent::Error>>,
    session: Value,
}

impl Served {
    fn start<F>(factory: F) -> Served
    where
        F: Fn(&SessionInfo) -> Result<pagent::AgentBuilder, pagent::Error> + Send + Sync + 'static,
    {
        let (input_reader, input) = std::io::pipe().expect("a pipe");
        let (output_reader, output) = std::io::pipe().expect("a pipe");
        let served = std::thread::spawn(move || {
            acp::serve(
                factory,
                BufReader::new(input_reader),
                output,
                acp::Options::new(),
            )
        });
        let mut served = Served {
            input,
            lines: BufReader::new(output_reader),
            line: String::new(),
            served,
            session: Value::Null,
        };
        served.send(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
            "params": {"cwd": "/tmp", "mcpServers": []}}));
        served.session = served.read()["result"]["sessionId"].clone();
        served
    }

    fn send(&mut self, v: Value) {
        writeln!(self.input, "{v}").expect("the server reads");
    }

    fn read(&mut self) -> Value {
        self.line.clear();
        self.lines
            .read_line(&mut self.line)
            .expect("the server writes");
        serde_json::from_str(&self.line).expect("a JSON line")
    }

    fn prompt(&mut self, id: u64) {
        let session = self.session.clone();
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}}),
        );
    }

    /// Closes the client's input: `serve` ends cleanly.
    fn finish(self) {
        drop(self.input);
        self.served.join().expect("serve ends").expect("cleanly");
    }
}

fn latency(c: &mut Criterion) {
    let (go_tx, go) = crossbeam_channel::unbounded();
    let (sent, stamps) = crossbeam_channel::unbounded();
    let model = Arc::new(OnDemand { go, sent });
    let mut served = Served::start(move |_| Ok(Agent::builder().provider(model.clone())));
    served.prompt(2);

    c.bench_function("acp/delta_to_update_line", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                go_tx.send(()).expect("the model waits");
                let update = served.read();
                let arrived = Instant::now();
                let stamp = stamps.recv().expect("the model stamped its delta");
                debug_assert_eq!(update["method"], "session/update");
                total += arrived - stamp;
            }
            total
        })
    });

    drop(go_tx);
    let answer = served.read();
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    served.finish();
}

/// A model that streams one delta, then stalls until the run is aborted.
struct Stalls;

impl Provider for Stalls {
    fn stream(
        &self,
        _request: &Request,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, pagent::Error> {
        on_event(StreamEvent::text("Once upon a time, "))?;
        let _ = cancel.receiver().recv_timeout(Duration::from_secs(60));
        Err(pagent::Error::Aborted)
    }
}

fn cancel(c: &mut Criterion) {
    let mut served = Served::start(|_| Ok(Agent::builder().provider(Stalls)));
    let mut id = 1u64;

    c.bench_function("acp/cancel_to_cancelled_answer", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                id += 1;
                served.prompt(id);
                // The first delta has streamed: the model now stalls.
                let chunk = served.read();
                debug_assert_eq!(chunk["method"], "session/update");
                let cancelled = Instant::now();
                let session = served.session.clone();
                served.send(json!({"jsonrpc": "2.0", "method": "session/cancel",
                    "params": {"sessionId": session}}));
                let answer = loop {
                    let m = served.read();
                    if m["id"] == json!(id) {
                        break m;
                    }
                };
                total += cancelled.elapsed();
                assert_eq!(answer["result"]["stopReason"], "cancelled");
            }
            total
        })
    });

    served.finish();
}

criterion_group!(benches, latency, cancel);
criterion_main!(benches);
