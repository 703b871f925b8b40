//! Offloading a slow listener to its own thread through `subscribe_channel`.
//!
//! ```sh
//! cargo run --example offload
//! cargo run --example offload -- --capacity 8 --delay-ms 2 --log wire.jsonl
//! ```
//!
//! A consumer thread writes every event to a wire log (JSON-RPC lines, see `pagent::wire`) and prints progress, slowly (it
//! sleeps `--delay-ms` per event). The run never waits for it while the channel has room: it
//! gets at most `--capacity` events ahead, then it waits for the consumer, so nothing is ever
//! dropped. At the end the example reads the log back through a `wire::Mirror`, and checks
//! that it holds the same transcript as the agent.

use std::error::Error;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use pagent::llm::{Faux, FauxReply, FromEnv};
use pagent::{Agent, AgentEvent, State, ToolOutput, tool, wire};
// `schemars` in scope for the derive: pagent's own, so no version to match by hand.
use pagent::schemars::{self, JsonSchema};
use serde::Deserialize;
use serde_json::json;

fn main() -> Result<(), Box<dyn Error>> {
    let options = Options::parse(std::env::args().skip(1))?;
    let agent = agent();

    // Counted on the run thread as each event is produced, against what the consumer has
    // finished: the difference is how far the run is ahead.
    let produced = Arc::new(AtomicU64::new(0));
    let consumed = Arc::new(AtomicU64::new(0));
    let max_lead = Arc::new(AtomicU64::new(0));
    let _counter = agent.subscribe({
        let (produced, consumed, max_lead) = (produced.clone(), consumed.clone(), max_lead.clone());
        move |_: &AgentEvent| {
            let p = produced.fetch_add(1, Ordering::SeqCst) + 1;
            let lead = p.saturating_sub(consumed.load(Ordering::SeqCst));
            max_lead.fetch_max(lead, Ordering::SeqCst);
        }
    });
    // Registered after the counter, so the counter sees each event before it is sent.
    let events = agent.subscribe_channel(options.capacity);

    let log_path = options.log.clone();
    let delay = options.delay;
    let consumer = thread::spawn(move || -> Result<(u64, Instant), String> {
        let file = File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mut log = BufWriter::new(file);
        let mut written = 0;
        // Ends when the agent is dropped (the channel's sender goes with it).
        for event in events {
            // One JSON-RPC line per event, the wire format (a delta line holds only the delta).
            writeln!(log, "{}", wire::encode_event_line(&event)).map_err(|e| e.to_string())?;
            written += 1;
            match &event {
                AgentEvent::TurnEnd { turn, .. } => {
                    println!("consumer: turn {turn} written ({written} events)")
                }
                AgentEvent::AgentEnd { stop_reason, .. } => {
                    println!("consumer: run end written ({written} events, {stop_reason})")
                }
                _ => {}
            }
            thread::sleep(delay);
            consumed.fetch_add(1, Ordering::SeqCst);
        }
        log.flush().map_err(|e| e.to_string())?;
        Ok((written, Instant::now()))
    });

    let started = Instant::now();
    let result = agent.prompt("How many apples and pears are in stock?")?;
    let run_done = Instant::now();
    println!(
        "run: ended ({}) after {:.0} ms: {}",
        result.stop_reason,
        (run_done - started).as_secs_f64() * 1e3,
        result.text().chars().take(43).collect::<String>()
    );
    let state = agent.snapshot();
    drop(agent); // closes the channel once the consumer has taken what is in it

    let (written, consumer_done) = consumer.join().map_err(|_| "the consumer panicked")??;
    let produced = produced.load(Ordering::SeqCst);
    let max_lead = max_lead.load(Ordering::SeqCst);
    println!(
        "consumer: done {:.0} ms after the run",
        consumer_done
            .saturating_duration_since(run_done)
            .as_secs_f64()
            * 1e3
    );
    // Ahead by at most the channel's capacity, plus the event the consumer holds and the
    // one the run is sending.
    println!(
        "the run was at most {max_lead} events ahead of the consumer (channel capacity {})",
        options.capacity
    );
    if max_lead > options.capacity as u64 + 2 {
        return Err(format!("the run got {max_lead} events ahead").into());
    }

    let mirror = fold(&options.log)?;
    let same = mirror.messages == state.messages && mirror.run_usage == state.run_usage;
    println!(
        "nothing lost: {produced} events produced, {written} written to {}, the log folds into \
         the same transcript ({} messages): {}",
        options.log.display(),
        mirror.messages.len(),
        if same { "yes" } else { "NO" }
    );
    if produced != written || !same {
        return Err("the log does not match the run".into());
    }
    Ok(())
}

/// Reads the log back and folds every line into a state, as a remote viewer would.
fn fold(path: &PathBuf) -> Result<State, Box<dyn Error>> {
    let mut mirror = wire::Mirror::new();
    for line in BufReader::new(File::open(path)?).lines() {
        mirror.apply_line(&line?)?;
    }
    Ok((**mirror.state()).clone())
}

#[derive(Deserialize, JsonSchema)]
struct StockArgs {
    /// The item to count.
    item: String,
}

/// A run of a few hundred events: thinking, two tool calls, a long streamed answer.
fn agent() -> Agent {
    let stock = tool::typed(
        "stock",
        "How many of an item are in stock.",
        |args: StockArgs, _| {
            let count = args.item.len() * 7;
            Ok(ToolOutput::text(format!("{count} {}", args.item)))
        },
    );
    let answer = "There are 42 apples and 35 pears in stock. ".repeat(8);
    let faux = Faux::default()
        .chunk_chars(2)
        .reply(
            FauxReply::default()
                .then_thinking("Two items: ask the stock tool about each, in parallel.")
                .then_tool_call("stock", json!({ "item": "apples" }))
                .then_tool_call("stock", json!({ "item": "pears" })),
        )
        .reply(FauxReply::text(answer.trim_end()));
    // A server named in the environment (OPENAI_*, ANTHROPIC_*, PAGENT_MODEL), else the
    // scripted demo (no model name: "" is the provider's default).
    let chosen = pagent::llm::from_env_or(|| FromEnv::new(faux, ""))
        // OK because a variable set wrong is a mistake the demo reports.
        .unwrap_or_else(|e| panic!("{e}"));
    let builder = Agent::builder()
        .provider(chosen.provider)
        .model(chosen.model);
    builder
        .tool(stock)
        .build()
        // OK because the builder has a provider and one tool.
        .expect("the demo agent builds")
}

struct Options {
    capacity: usize,
    delay: Duration,
    log: PathBuf,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut options = Options {
            capacity: 32,
            delay: Duration::from_millis(1),
            log: std::env::temp_dir().join(format!("pagent-offload-{}.jsonl", std::process::id())),
        };
        while let Some(arg) = args.next() {
            let value = args.next().ok_or(format!("{arg} needs a value"))?;
            match arg.as_str() {
                "--capacity" => {
                    options.capacity = value.parse().map_err(|e| format!("--capacity: {e}"))?
                }
                "--delay-ms" => {
                    let ms = value.parse().map_err(|e| format!("--delay-ms: {e}"))?;
                    options.delay = Duration::from_millis(ms);
                }
                "--log" => options.log = PathBuf::from(value),
                _ => {
                    return Err(format!(
                        "unknown argument {arg}; usage: offload [--capacity N] [--delay-ms MS] [--log PATH]"
                    ));
                }
            }
        }
        Ok(options)
    }
}
