//! The HTTP transport on the run thread, against loopback servers that misbehave: abort and
//! every timeout close the connection at once, the run deadline ends a run in any phase,
//! configuration mistakes fail at once and say what was tried, replies that are not event
//! streams are named, and no part of an API key ever shows.

mod support;

// No part of a key in any text: the read limits, the message limits, both providers.
#[path = "transport/config.rs"]
mod config;
#[path = "transport/redaction.rs"]
mod redaction;
#[path = "transport/tls.rs"]
mod tls;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pagent::hooks::ToolDecision;
use pagent::llm::{Anthropic, Faux, FauxReply, OpenAiCompat, Provider, RetryPolicy};
use pagent::{Agent, AgentEvent, Error, ErrorKind, RunStopReason, TimeoutPhase, ToolOutput, tool};
use support::{Act, City, Probe, Server, pagent_threads, weather};

/// A bound no healthy run comes near and a loaded 2-core machine cannot miss; the old
/// transport left its thread and socket for up to 305 s.
const BOUND: Duration = Duration::from_secs(1);

const SSE_TEXT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n\
                        data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                        data: [DONE]\n\n";

fn openai(url: &str) -> OpenAiCompat {
    OpenAiCompat::new(format!("{url}/v1")).retry(support::fast_retries())
}

fn anthropic(url: &str) -> Anthropic {
    Anthropic::new(url).retry(support::fast_retries())
}

fn agent_on(provider: impl Provider + 'static) -> Agent {
    Agent::builder()
        .provider(provider)
        .model("m")
        .tool(weather())
        .build()
        .unwrap()
}

/// Runs `prompt` while another thread calls `abort()` once `ready` says so; returns the
/// result, when the abort was sent and when `prompt` returned.
fn prompt_and_abort(
    agent: &Agent,
    ready: impl FnOnce() + Send + 'static,
) -> (pagent::RunResult, Instant, Instant) {
    let handle = agent.handle();
    let aborter = std::thread::spawn(move || {
        ready();
        let at = Instant::now();
        assert!(handle.abort(), "the run is active");
        at
    });
    let result = agent.prompt("Hi").unwrap();
    let returned = Instant::now();
    (result, aborter.join().unwrap(), returned)
}

/// Waits (at most 5 s) until `probe` read `n` requests, then a little longer.
fn after_requests(probe: &Probe, n: usize) -> impl FnOnce() + Send + 'static {
    let requests = probe_counter(probe);
    move || {
        let until = Instant::now() + Duration::from_secs(5);
        while requests() < n && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn probe_counter(probe: &Probe) -> impl Fn() -> usize + Send + 'static {
    let probe = probe.clone();
    move || probe.requests()
}

/// Asserts that `prompt` returned and the server saw the connection close within
/// [`BOUND`] of `at`, printing both figures.
fn assert_prompt_and_close_follow(what: &str, probe: &Probe, at: Instant, returned: Instant) {
    let back = returned.saturating_duration_since(at);
    let closed = probe
        .wait_closed(1)
        .expect("the server saw the connection close");
    let seen = closed.saturating_duration_since(at);
    println!("{what}: prompt returned after {back:?}, the server saw the close after {seen:?}");
    assert!(back < BOUND, "{what}: prompt returned after {back:?}");
    assert!(
        seen < BOUND,
        "{what}: the server saw the close after {seen:?}"
    );
}

fn assert_cancelled(result: &pagent::RunResult) {
    assert_eq!(result.stop_reason, RunStopReason::Cancelled, "{result:?}");
}

// ---- abort, in every phase ----

/// A listener whose accept queue is full: a new connect to it stays in SYN_SENT.
fn full_backlog() -> (socket2::Socket, Vec<socket2::Socket>, std::net::SocketAddr) {
    use socket2::{Domain, Socket, Type};
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    listener
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    // Fill the queue: connects that are never accepted (nonblocking, so that this does not
    // wait for the ones the kernel leaves pending).
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&addr.into());
        fillers.push(s);
    }
    std::thread::sleep(Duration::from_millis(50));
    (listener, fillers, addr)
}

#[test]
fn abort_during_connect_wakes_the_blocked_connect() {
    let (_listener, _fillers, addr) = full_backlog();
    let provider = openai(&format!("http://{addr}")).connect_timeout(Duration::from_secs(60));
    let agent = agent_on(provider);
    let (result, at, returned) = prompt_and_abort(&agent, || {
        std::thread::sleep(Duration::from_millis(300));
    });
    assert_cancelled(&result);
    let back = returned.saturating_duration_since(at);
    println!("abort during connect: prompt returned after {back:?}");
    assert!(back < BOUND, "{back:?}");
    assert!(pagent_threads().iter().all(|t| t != "pagent-http"));
}

#[test]
fn abort_while_waiting_for_the_headers_closes_the_connection() {
    let probe = Probe::start(vec![Act::Silent]);
    let agent = agent_on(openai(&probe.url));
    let (result, at, returned) = prompt_and_abort(&agent, after_requests(&probe, 1));
    assert_cancelled(&result);
    assert_prompt_and_close_follow("abort waiting for the headers", &probe, at, returned);
}

#[test]
fn abort_before_the_first_body_byte_closes_the_connection() {
    let probe = Probe::start(vec![Act::HeadersOnly]);
    let agent = agent_on(openai(&probe.url));
    let (result, at, returned) = prompt_and_abort(&agent, after_requests(&probe, 1));
    assert_cancelled(&result);
    assert_prompt_and_close_follow("abort before the first byte", &probe, at, returned);
}

#[test]
fn abort_mid_stream_keeps_what_streamed_and_closes_the_connection() {
    let event = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_vec();
    let probe = Probe::start(vec![Act::Then(event)]);
    let agent = agent_on(openai(&probe.url));
    let (result, at, returned) = prompt_and_abort(&agent, after_requests(&probe, 1));
    assert_cancelled(&result);
    assert_eq!(result.text(), "Hel");
    assert_prompt_and_close_follow("abort mid-stream", &probe, at, returned);
}

#[test]
fn abort_during_a_retry_wait_returns_at_once() {
    let probe = Probe::start(vec![
        Act::whole(503, "application/json", "{}").header("retry-after-ms", "20000"),
    ]);
    let agent = agent_on(openai(&probe.url));
    let (result, at, returned) = prompt_and_abort(&agent, after_requests(&probe, 1));
    assert_cancelled(&result);
    // The connection of the 503 was closed when its reply was read, before the wait.
    assert_prompt_and_close_follow("abort during a retry wait", &probe, at, returned);
}

// ---- timeouts close the connection too ----

fn timed_out(provider: OpenAiCompat, probe: &Probe, phase: TimeoutPhase) {
    let agent = agent_on(provider);
    let start = Instant::now();
    let failed = agent.prompt("Hi").unwrap_err();
    assert_eq!(failed.result().stop_reason, RunStopReason::Error);
    assert_eq!(failed.error(), &Error::Timeout(phase), "{phase:?}");
    assert_eq!(failed.kind(), ErrorKind::Timeout(phase));
    let back = start.elapsed();
    let closed = probe.wait_closed(1).expect("closed");
    let after_return = closed.saturating_duration_since(start + back);
    println!("{phase:?} timeout: returned after {back:?}, closed {after_return:?} after that");
    assert!(back < Duration::from_secs(5), "{back:?}");
    assert!(after_return < BOUND, "{after_return:?}");
    assert_eq!(probe.requests(), 1, "a timed-out request is not sent again");
}

#[test]
fn a_first_byte_timeout_closes_the_connection() {
    let probe = Probe::start(vec![Act::Silent]);
    let provider = openai(&probe.url).first_byte_timeout(Duration::from_millis(300));
    timed_out(provider, &probe, TimeoutPhase::FirstByte);
}

#[test]
fn the_idle_timeout_covers_the_gap_between_the_headers_and_the_first_byte() {
    let probe = Probe::start(vec![Act::HeadersOnly]);
    let provider = openai(&probe.url).idle_timeout(Duration::from_millis(300));
    timed_out(provider, &probe, TimeoutPhase::Idle);
}

#[test]
fn an_idle_timeout_mid_stream_closes_the_connection() {
    let event = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_vec();
    let probe = Probe::start(vec![Act::Then(event)]);
    let provider = openai(&probe.url).idle_timeout(Duration::from_millis(300));
    timed_out(provider, &probe, TimeoutPhase::Idle);
}

#[test]
fn keep_alive_comments_never_count_as_the_first_byte() {
    let probe = Probe::start(vec![Act::Comments(Duration::from_millis(20))]);
    let provider = openai(&probe.url)
        .first_byte_timeout(Duration::from_millis(400))
        .idle_timeout(Duration::from_secs(60));
    timed_out(provider, &probe, TimeoutPhase::FirstByte);
}

#[test]
fn a_close_after_the_headers_is_not_retried() {
    // The server took the request (200) and then dropped the connection: sending the POST
    // again could do its work twice.
    let server = Server::start(vec![
        support::Reply::sse(Vec::new()).cut(),
        support::Reply::sse(SSE_TEXT),
    ]);
    let agent = agent_on(openai(&server.url));
    let failed = agent.prompt("Hi").unwrap_err();
    assert_eq!(failed.result().stop_reason, RunStopReason::Error);
    assert_eq!(server.requests().len(), 1);
}

// ---- the run deadline, in every phase ----

/// A model that calls `get_weather` for Paris, then (if it is asked again) answers.
fn calls_the_tool() -> Faux {
    Faux::default()
        .reply(FauxReply::tool_call(
            "get_weather",
            serde_json::json!({"city": "Paris"}),
        ))
        .reply(FauxReply::text("never"))
}

fn assert_run_timed_out(agent: &Agent, timeout: Duration) {
    let start = Instant::now();
    let failed = agent.prompt("Hi").unwrap_err();
    let took = start.elapsed();
    println!("run_timeout {timeout:?}: the run took {took:?}");
    assert_eq!(
        failed.result().stop_reason,
        RunStopReason::Error,
        "{failed:?}"
    );
    assert_eq!(failed.error(), &Error::Timeout(TimeoutPhase::Run));
    assert!(took >= timeout, "{took:?}");
    assert!(took < timeout + BOUND, "{took:?}");
    // A valid transcript: every tool call has its result, the last message is the failed
    // reply or a tool result, and the run is over.
    let snapshot = agent.snapshot();
    assert!(!snapshot.is_streaming);
    let messages: Vec<_> = snapshot.messages.iter().cloned().collect();
    let calls: usize = messages
        .iter()
        .filter_map(|m| m.as_assistant())
        .map(|a| a.tool_calls().count())
        .sum();
    let results = messages
        .iter()
        .filter(|m| matches!(&***m, pagent::Message::ToolResult(_)))
        .count();
    assert_eq!(calls, results, "{messages:?}");
    let last_reply = messages
        .iter()
        .rev()
        .find_map(|m| m.as_assistant())
        .unwrap();
    if results == 0 {
        assert_eq!(last_reply.stop_reason, pagent::StopReason::Error);
        assert_eq!(
            last_reply.error_message.as_deref(),
            Some("timed out at the run deadline")
        );
    }
}

#[test]
fn run_timeout_while_connecting() {
    let (_listener, _fillers, addr) = full_backlog();
    let provider = openai(&format!("http://{addr}")).connect_timeout(Duration::from_secs(60));
    let timeout = Duration::from_millis(400);
    let agent = Agent::builder()
        .provider(provider)
        .run_timeout(timeout)
        .build()
        .unwrap();
    assert_run_timed_out(&agent, timeout);
}

#[test]
fn run_timeout_while_waiting_for_the_reply() {
    let probe = Probe::start(vec![Act::Silent]);
    let timeout = Duration::from_millis(400);
    let agent = Agent::builder()
        .provider(openai(&probe.url))
        .run_timeout(timeout)
        .build()
        .unwrap();
    assert_run_timed_out(&agent, timeout);
    assert!(probe.wait_closed(1).is_some());
}

#[test]
fn run_timeout_bounds_a_stream_of_keep_alive_comments_after_the_first_event() {
    let mut first = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_vec();
    first.extend_from_slice(b":\n\n");
    let probe = Probe::start(vec![Act::Then(first)]);
    let timeout = Duration::from_millis(400);
    let agent = Agent::builder()
        .provider(openai(&probe.url).idle_timeout(Duration::from_secs(60)))
        .run_timeout(timeout)
        .build()
        .unwrap();
    assert_run_timed_out(&agent, timeout);
    assert!(probe.wait_closed(1).is_some());
}

#[test]
fn run_timeout_during_a_retry_wait() {
    let probe = Probe::start(vec![
        Act::whole(503, "application/json", "{}").header("retry-after-ms", "20000"),
    ]);
    let timeout = Duration::from_millis(400);
    let agent = Agent::builder()
        .provider(openai(&probe.url))
        .run_timeout(timeout)
        .build()
        .unwrap();
    assert_run_timed_out(&agent, timeout);
}

#[test]
fn run_timeout_in_a_tool_that_honours_its_token() {
    let slow = tool::typed("get_weather", "Waits.", |_: City, ctx| {
        ctx.sleep(Duration::from_secs(30));
        Ok(ToolOutput::text("late"))
    });
    let timeout = Duration::from_millis(400);
    let agent = Agent::builder()
        .provider(calls_the_tool())
        .tool(slow)
        .run_timeout(timeout)
        .build()
        .unwrap();
    assert_run_timed_out(&agent, timeout);
}

#[test]
fn run_timeout_wakes_a_lone_tool_waiting_on_its_cancel_receiver() {
    // A lone call runs on the run thread when no deadline is set; with one, it runs where
    // the run thread can cancel the token at the deadline, which wakes this wait.
    let waiting = tool::typed("get_weather", "Waits.", |_: City, ctx| {
        crossbeam_channel::select! {
            recv(ctx.cancel().receiver()) -> _ => Ok(ToolOutput::text("woken")),
            default(Duration::from_secs(30)) => Ok(ToolOutput::text("late")),
        }
    });
    let timeout = Duration::from_millis(400);
    let agent = Agent::builder()
        .provider(calls_the_tool())
        .tool(waiting)
        .run_timeout(timeout)
        .build()
        .unwrap();
    assert_run_timed_out(&agent, timeout);
    let snapshot = agent.snapshot();
    let result = snapshot
        .messages
        .iter()
        .find_map(|m| match &**m {
            pagent::Message::ToolResult(r) => Some(r.text()),
            _ => None,
        })
        .unwrap();
    assert_eq!(result, "woken");
}

#[test]
fn run_timeout_in_a_before_tool_call_hook_waiting_for_an_answer() {
    let (_never, answers) = crossbeam_channel::bounded::<bool>(1);
    let timeout = Duration::from_millis(400);
    let agent = Agent::builder()
        .provider(calls_the_tool())
        .tool(weather())
        .before_tool_call(move |req| match req.wait_for(&answers) {
            Some(true) => ToolDecision::Allow,
            _ => ToolDecision::Block("no answer".into()),
        })
        .run_timeout(timeout)
        .build()
        .unwrap();
    assert_run_timed_out(&agent, timeout);
}

#[test]
fn run_timeout_leaves_a_run_that_ends_in_time_alone() {
    let probe = Probe::start(vec![Act::sse(SSE_TEXT)]);
    let agent = Agent::builder()
        .provider(openai(&probe.url))
        .run_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let result = agent.prompt("Hi").unwrap();
    assert_eq!(result.stop_reason, RunStopReason::NoToolCalls);
    assert_eq!(result.text(), "Hello");
}

// ---- replies that are not event streams ----

#[test]
fn a_reply_that_is_not_an_event_stream_fails_at_once_and_names_it() {
    let html = "<html><body><h1>Welcome to nginx!</h1></body></html>";
    let json = r#"{"id":"x","choices":[{"message":{"content":"Hello"}}]}"#;
    for (content_type, body) in [
        ("text/html; charset=utf-8", html),
        ("application/json", json),
    ] {
        let probe = Probe::start(vec![Act::whole(200, content_type, body)]);
        let start = Instant::now();
        let failed = agent_on(openai(&probe.url)).prompt("Hi").unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(failed.kind(), ErrorKind::Stream);
        assert_eq!(
            failed.error(),
            &(Error::ContentType {
                content_type: content_type.into(),
                message: format!(
                    "status 200 from POST {}/v1/chat/completions; the body starts: {body:?}",
                    probe.url
                ),
            })
        );
        assert_eq!(probe.requests(), 1, "not retried");
    }
}

// ---- pooling and threads ----

/// Also to a host name (`localhost`, whose first address may be refused: the next one
/// answers), looked up for the new connection and not for the kept one.
#[test]
fn replies_that_ended_normally_keep_their_connection_for_the_next_request() {
    for host in ["127.0.0.1", "localhost"] {
        let probe = Probe::start(vec![Act::sse(SSE_TEXT), Act::sse(SSE_TEXT)]);
        let agent = agent_on(openai(&probe.url.replace("127.0.0.1", host)));
        assert_eq!(agent.prompt("Hi").unwrap().text(), "Hello");
        assert_eq!(agent.prompt("Again").unwrap().text(), "Hello");
        assert_eq!(probe.requests(), 2, "{host}");
        assert_eq!(probe.accepted(), 1, "{host}: two prompts, one connection");
    }
}

#[test]
fn chunked_replies_that_ended_normally_keep_their_connection_too() {
    let body = SSE_TEXT.as_bytes().to_vec();
    let probe = Probe::start(vec![Act::SseChunked(body.clone()), Act::SseChunked(body)]);
    let agent = agent_on(openai(&probe.url));
    assert_eq!(agent.prompt("Hi").unwrap().text(), "Hello");
    assert_eq!(agent.prompt("Again").unwrap().text(), "Hello");
    assert_eq!(probe.requests(), 2);
    assert_eq!(probe.accepted(), 1, "two prompts, one connection");
}

#[test]
fn no_pagent_thread_runs_beside_a_stream_and_none_outlives_the_run() {
    let probe = Probe::start(vec![Act::sse(SSE_TEXT)]);
    let agent = agent_on(openai(&probe.url));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let _sub = agent.subscribe(move |e: &AgentEvent| {
        if let AgentEvent::MessageUpdate { .. } = e {
            log.lock().unwrap().extend(pagent_threads());
        }
    });
    agent.prompt("Hi").unwrap();
    // Tool threads of other tests running at the same time are allowed; nothing else.
    let not_tools = |names: Vec<String>| -> Vec<String> {
        names
            .into_iter()
            .filter(|n| n != "pagent-tool" && n != "pagent-hook")
            .collect()
    };
    assert_eq!(
        not_tools(seen.lock().unwrap().clone()),
        Vec::<String>::new()
    );
    assert_eq!(not_tools(pagent_threads()), Vec::<String>::new());
}

#[test]
fn a_cut_connection_is_never_reused() {
    // The first reply is cut mid-stream; the second prompt must open a new connection.
    let event = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_vec();
    let probe = Probe::start(vec![Act::Then(event), Act::sse(SSE_TEXT)]);
    let agent = agent_on(openai(&probe.url).idle_timeout(Duration::from_millis(200)));
    let first = agent.prompt("Hi").unwrap_err();
    assert_eq!(first.error(), &Error::Timeout(TimeoutPhase::Idle));
    assert_eq!(agent.prompt("Again").unwrap().text(), "Hello");
    assert_eq!(probe.accepted(), 2);
}
