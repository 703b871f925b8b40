//! What one more tool turn allocates on the run thread: counted by an allocator that tallies
//! the blocks each thread allocates, a run of many tool turns against one of few. Its own
//! test binary, for the allocator.

#[path = "alloc/counting.rs"]
mod counting;

use counting::blocks_by;
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, RunStopReason, ToolOutput, tool};
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// The blocks the run thread allocates in a run of `calls` turns that each call a tool
/// (on the run thread: one call a reply), then a turn that answers.
fn run(calls: usize) -> usize {
    let faux = Faux::new(
        (0..calls)
            .map(|_| FauxReply::tool_call("echo", json!({})))
            .chain([FauxReply::text("done")]),
    );
    let agent = Agent::builder()
        .provider(faux)
        .tool(tool::typed("echo", "Echoes.", |_: NoArgs, _| {
            Ok(ToolOutput::text("ok"))
        }))
        .max_turns(64)
        .build()
        .unwrap();
    let (result, blocks) = blocks_by(|| agent.prompt("go").unwrap());
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(result.messages.len(), 2 + 2 * calls);
    blocks
}

/// A tool turn's allocations are those of the objects it publishes (the reply, its call
/// in the events and the state, the result and its message) and of the scripted reply:
/// the batch of one call starts no thread scope and copies no id, name or arguments
/// twice, the reply's calls are not copied from the partial, the request's list and model
/// name are those of the last request. A copy come back shows here.
#[test]
fn one_more_tool_turn_allocates_a_bounded_number_of_blocks() {
    // Once first: what a first run sets up for good (thread-locals, lazy statics) does not
    // count.
    run(1);
    let (few, many) = (run(2), run(12));
    let per_turn = (many - few) as f64 / 10.0;
    assert!(
        per_turn <= BOUND,
        "{per_turn} blocks per extra tool turn (at most {BOUND})"
    );
}

/// Measured 39.6 per extra tool turn with the scripted provider, its own events included
/// (60.6 with the scope, the copies and the partial's own settled part of each reply; 42.6
/// before the request's list and model name and the calls' ids were reused).
const BOUND: f64 = 41.0;
