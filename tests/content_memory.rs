//! A 5 MB image is held once: counted by an allocator that tallies the bytes each thread
//! allocates, a run whose prompt carries the image allocates what the same run without it
//! does (plus the request bodies that carry its base64), however many snapshots a listener
//! keeps, and a retried request allocates its body once. Its own test binary, for the
//! allocator.

#[path = "alloc/counting.rs"]
mod counting;
mod support;

use std::sync::{Arc, Mutex};

use counting::allocated_by;
use pagent::llm::{Faux, FauxReply, OpenAiCompat};
use pagent::{Agent, AgentEvent, Blob, Image, State, ToolOutput, UserMessage, tool};
use serde_json::json;
use support::{Reply, Server, fast_retries};

const FIVE_MB: usize = 5 * 1024 * 1024;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// A run of three turns (two tool calls, then a long streamed answer) whose listener keeps
/// every snapshot it reads; the prompt carries `image` when given. Returns the snapshots and
/// the bytes the run thread allocated.
fn run(image: Option<Blob>) -> (Vec<Arc<State>>, usize) {
    let faux = Faux::default()
        .reply(FauxReply::tool_call("look", json!({})))
        .reply(FauxReply::tool_call("look", json!({})))
        .reply(FauxReply::text("a long answer ".repeat(200)));
    let agent = Agent::builder()
        .provider(faux)
        .tool(tool::typed("look", "Looks.", |_: NoArgs, _| {
            Ok(ToolOutput::text("seen"))
        }))
        .build()
        .unwrap();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let sink = kept.clone();
    let handle = agent.handle();
    agent
        .subscribe(move |_: &AgentEvent| sink.lock().unwrap().push(handle.snapshot()))
        .keep();
    let mut prompt = UserMessage::new("What is on the screen?");
    if let Some(image) = image {
        prompt = prompt.with_part(Image::new("image/png", image));
    }
    let (_, bytes) = allocated_by(|| agent.prompt(prompt).unwrap());
    let snapshots = std::mem::take(&mut *kept.lock().unwrap());
    (snapshots, bytes)
}

#[test]
fn a_5_mb_image_is_held_once_however_many_snapshots_hold_it() {
    let image = Blob::from(vec![7u8; FIVE_MB]);
    // Warm up once (thread-locals, lazy statics), then measure both runs.
    let _ = run(None);
    let (plain, without) = run(None);
    let (snapshots, with) = run(Some(image.clone()));
    assert_eq!(snapshots.len(), plain.len());
    assert!(snapshots.len() > 400, "{}", snapshots.len());
    // Every snapshot holds the caller's allocation.
    for state in &snapshots[4..] {
        let held = state.messages[0].parts()[1].data().unwrap();
        assert!(Blob::ptr_eq(held, &image));
    }
    // What the image added to the run: a few small allocations (its part in the message),
    // never a copy of its 5 MB (one copy alone would be 5,242,880 bytes).
    let extra = with.saturating_sub(without);
    assert!(
        extra < 64 * 1024,
        "the image added {extra} bytes ({without} without it)"
    );
}

#[test]
fn a_retried_request_with_a_5_mb_image_builds_its_body_once() {
    let server = Server::start(vec![
        Reply::json(503, r#"{"error":{"message":"overloaded"}}"#),
        Reply::json(503, r#"{"error":{"message":"overloaded"}}"#),
        Reply::sse(support::data("written/openai_vision_reply.sse")),
    ]);
    let agent = Agent::builder()
        .provider(OpenAiCompat::new(format!("{}/v1", server.url)).retry(fast_retries()))
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    let image = Blob::from(vec![7u8; FIVE_MB]);
    let prompt = UserMessage::new("What is it?").with_part(Image::new("image/png", image));
    let (_, bytes) = allocated_by(|| agent.prompt(prompt).unwrap());
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let body = requests[0].body.len();
    assert!(body > FIVE_MB * 4 / 3, "{body}");
    assert!(requests.iter().all(|r| r.body == requests[0].body));
    // One body for the three attempts, written into a buffer sized for it at once (a
    // buffer that grew by doubling would allocate about twice the body; three bodies three
    // times it).
    assert!(
        bytes < body + body / 4,
        "the run allocated {bytes} bytes for a body of {body}"
    );
}
