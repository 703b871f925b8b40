//! Prompts sent while a turn runs: steering, follow-ups, `_session/steering`, and
//! `$/cancel_request` both ways.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use pagent::acp::{self, SessionInfo, WhileRunning};
use pagent::llm::{Faux, FauxReply, Request};
use pagent::{Agent, AgentBuilder, Message, ToolOutput, tool};
use serde_json::{Value, json};

use super::{Client, PATIENCE, prompt_of};

/// The user texts the model was sent after its last reply, joined by `+`.
fn unanswered(request: &Request) -> String {
    let mut texts: Vec<String> = request
        .messages
        .iter()
        .rev()
        .take_while(|m| !matches!(***m, Message::Assistant(_)))
        .filter(|m| matches!(***m, Message::User(_)))
        .map(|m| m.text())
        .collect();
    texts.reverse();
    texts.join("+")
}

/// A factory whose model first calls `wait` (which runs until the test lets it go, or the
/// run is aborted), then answers "seen <the user texts since its last reply>".
fn waiting(release: Receiver<()>) -> impl Fn(&SessionInfo) -> Result<AgentBuilder, pagent::Error> {
    let release = Arc::new(release);
    move |_: &SessionInfo| {
        let release = release.clone();
        let wait = tool::typed(
            "wait",
            "Waits.",
            move |_: serde_json::Map<String, Value>, ctx| {
                let until = Instant::now() + PATIENCE;
                while Instant::now() < until && !ctx.cancel().is_cancelled() {
                    if release.recv_timeout(Duration::from_millis(5)).is_ok() {
                        return Ok(ToolOutput::text("waited"));
                    }
                }
                Ok(ToolOutput::text("gave up"))
            },
        );
        Ok(Agent::builder()
            .provider(
                Faux::default()
                    .chunk_chars(1000)
                    .reply(FauxReply::tool_call("wait", json!({})).with_id("w1"))
                    .otherwise(|r| FauxReply::text(format!("seen {}", unanswered(r)))),
            )
            .tool(wait))
    }
}

fn start(options: acp::Options) -> (Client, String, Sender<()>) {
    let (release, released) = crossbeam_channel::unbounded();
    let mut client = Client::start(waiting(released), options.ask_permission(|_| false));
    let session = client.new_session(1);
    client.request(2, "session/prompt", prompt_of(&session, "first"));
    // The tool runs: its call and its `in_progress` came.
    for status in ["pending", "in_progress"] {
        let m = client.recv();
        assert_eq!(m["params"]["update"]["status"], status, "{m}");
    }
    (client, session, release)
}

fn update(session: &str, update: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}})
}

fn chunk(session: &str, text: &str) -> Value {
    update(
        session,
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
    )
}

fn waited(session: &str) -> Value {
    update(
        session,
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "w1", "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "waited"}}]}),
    )
}

fn answer(id: u64, stop: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": stop}})
}

#[test]
fn a_prompt_while_a_turn_runs_steers_it_and_both_are_answered_by_the_reply_to_both() {
    let (mut client, session, release) = start(acp::Options::new());
    client.request(3, "session/prompt", prompt_of(&session, "also this"));
    client.read_so_far(9);
    release.send(()).unwrap();
    assert_eq!(
        client.until_response(3),
        vec![
            waited(&session),
            chunk(&session, "seen also this"),
            answer(2, "end_turn"),
            answer(3, "end_turn"),
        ]
    );
    client.close().expect("a clean end");
}

#[test]
fn as_a_follow_up_the_first_prompt_is_answered_before_the_follow_up_runs() {
    let (mut client, session, release) =
        start(acp::Options::new().prompt_while_running(WhileRunning::FollowUp));
    client.request(3, "session/prompt", prompt_of(&session, "then this"));
    client.request(4, "session/prompt", prompt_of(&session, "and this"));
    client.read_so_far(9);
    release.send(()).unwrap();
    assert_eq!(
        client.until_response(4),
        vec![
            waited(&session),
            chunk(&session, "seen "),
            answer(2, "end_turn"),
            chunk(&session, "seen then this"),
            answer(3, "end_turn"),
            chunk(&session, "seen and this"),
            answer(4, "end_turn"),
        ]
    );
    client.close().expect("a clean end");
}

#[test]
fn refused_while_running_when_the_program_says_so() {
    let (mut client, session, release) =
        start(acp::Options::new().prompt_while_running(WhileRunning::Refuse));
    client.request(3, "session/prompt", prompt_of(&session, "no"));
    let refused = client.recv();
    assert_eq!(
        (refused["id"].clone(), refused["error"]["code"].clone()),
        (json!(3), json!(acp::codes::INVALID_REQUEST))
    );
    release.send(()).unwrap();
    assert_eq!(
        client.until_response(2).last(),
        Some(&answer(2, "end_turn"))
    );
    client.close().expect("a clean end");
}

#[test]
fn a_cancel_answers_the_queued_prompts_cancelled_too_and_they_never_run() {
    let (mut client, session, _release) =
        start(acp::Options::new().prompt_while_running(WhileRunning::FollowUp));
    client.request(3, "session/prompt", prompt_of(&session, "later"));
    super::cancel(&mut client, &session);
    let seen = client.until_response(3);
    assert_eq!(
        seen[seen.len() - 2..],
        [answer(2, "cancelled"), answer(3, "cancelled")]
    );
    // The session's next prompt sees only itself: the follow-up was dropped.
    client.request(5, "session/prompt", prompt_of(&session, "fresh"));
    let seen = client.until_response(5);
    assert_eq!(
        seen,
        vec![chunk(&session, "seen fresh"), answer(5, "end_turn")]
    );
    client.close().expect("a clean end");
}

fn cancel_request(client: &mut Client, id: u64) {
    client
        .send(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": id}}));
}

#[test]
fn a_cancel_request_for_a_queued_prompt_takes_it_out_and_the_turn_goes_on() {
    let (mut client, session, release) =
        start(acp::Options::new().prompt_while_running(WhileRunning::FollowUp));
    client.request(3, "session/prompt", prompt_of(&session, "not this"));
    client.request(4, "session/prompt", prompt_of(&session, "but this"));
    cancel_request(&mut client, 3);
    assert_eq!(client.recv(), answer(3, "cancelled"));
    release.send(()).unwrap();
    assert_eq!(
        client.until_response(4),
        vec![
            waited(&session),
            chunk(&session, "seen "),
            answer(2, "end_turn"),
            chunk(&session, "seen but this"),
            answer(4, "end_turn"),
        ]
    );
    // An id no request of the client has is ignored.
    cancel_request(&mut client, 99);
    client.close().expect("a clean end");
}

#[test]
fn a_cancel_request_for_the_running_prompt_ends_it_cancelled() {
    let (mut client, _session, _release) = start(acp::Options::new());
    cancel_request(&mut client, 2);
    let seen = client.until_response(2);
    assert_eq!(seen.last(), Some(&answer(2, "cancelled")), "{seen:?}");
    client.close().expect("a clean end");
}

#[test]
fn session_steering_injects_into_a_running_turn_and_on_an_idle_session_starts_one_or_not() {
    let (mut client, session, release) = start(acp::Options::new());
    let steer = |text: &str, meta: Value| json!({"sessionId": session, "prompt": [{"type": "text", "text": text}], "_meta": meta});
    client.request(3, "_session/steering", steer("steered", json!({})));
    assert_eq!(
        client.recv(),
        json!({"jsonrpc": "2.0", "id": 3, "result": {"outcome": "injected"}})
    );
    release.send(()).unwrap();
    assert_eq!(
        client.until_response(2),
        vec![
            waited(&session),
            chunk(&session, "seen steered"),
            answer(2, "end_turn")
        ]
    );
    client.request(
        4,
        "_session/steering",
        steer(
            "idle",
            json!({"steering": {"idleBehavior": "promptRequired"}}),
        ),
    );
    let m = client.recv();
    assert_eq!(
        (m["id"].clone(), m["result"]["outcome"].clone()),
        (json!(4), json!("promptRequired"))
    );
    client.request(5, "_session/steering", steer("idle", json!({})));
    assert_eq!(
        client.recv(),
        json!({"jsonrpc": "2.0", "id": 5, "result": {"outcome": "startedNewTurn"}})
    );
    // The turn it started streams as a prompt's does; nothing answers it.
    assert_eq!(
        super::without_message_id(client.recv()),
        chunk(&session, "seen idle")
    );
    client.close().expect("a clean end");
}
