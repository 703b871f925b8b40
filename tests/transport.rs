//! The HTTP transport on the run thread, against loopback servers that misbehave: abort and
//! every timeout close the connection at once, the run deadline ends a run in any phase,
//! configuration mistakes fail at once and say what was tried, replies that are not event
//! streams are named, and no part of an API key ever shows.

mod support;

// No part of a key in any text: the read limits, the message limits, both providers.
#[path = "transport/redaction.rs"]
mod redaction;

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

// ---- configuration mistakes ----

/// The configuration error a prompt ends with, at once.
fn config_error(provider: impl Provider + 'static) -> String {
    let start = Instant::now();
    let failed = agent_on(provider).prompt("Hi").unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(failed.kind(), ErrorKind::InvalidRequest(None));
    match failed.into_error() {
        Error::Config(message) => message,
        other => panic!("not a configuration error: {other:?}"),
    }
}

/// The configuration error of a provider whose base URL does not parse: `build` fails with
/// it, and a call made without an agent fails with it at once, without a retry notice.
fn build_error(provider: impl Provider + Clone + 'static) -> String {
    let Err(Error::Config(message)) = Agent::builder().provider(provider.clone()).build() else {
        panic!("the agent was built");
    };
    let mut events = Vec::new();
    let request = pagent::llm::Request::new("m", vec![Arc::new(pagent::Message::user("Hi"))]);
    let called = provider.stream(&request, &pagent::CancelToken::new(), &mut |e| {
        events.push(e);
        Ok(())
    });
    assert_eq!(called, Err(Error::Config(message.clone())));
    assert_eq!(events, vec![], "not retried");
    message
}

#[test]
fn a_base_url_without_a_scheme_fails_at_build_and_says_so() {
    assert_eq!(
        build_error(OpenAiCompat::new("127.0.0.1:9/v1")),
        "the base URL `127.0.0.1:9/v1` has no scheme: start it with http:// or https://"
    );
}

#[test]
fn an_unknown_scheme_fails_at_build_and_says_so() {
    assert_eq!(
        build_error(Anthropic::new("ftp://127.0.0.1:9/v1?key=sk-x")),
        "the base URL `ftp://127.0.0.1:9/v1` has the unknown scheme `ftp`: use http:// or https://"
    );
}

/// ureq reads a port it cannot parse as none: the POST went to port 80 while the error named
/// `:99999`.
#[test]
fn a_port_out_of_range_fails_at_build_instead_of_going_to_port_80() {
    assert_eq!(
        build_error(OpenAiCompat::new("http://127.0.0.1:99999/v1")),
        "the base URL `http://127.0.0.1:99999/v1` has the port `99999`, outside 1-65535"
    );
    assert_eq!(
        build_error(Anthropic::new("http://user:pw@127.0.0.1:65536")),
        "the base URL `http://127.0.0.1:65536` has the port `65536`, outside 1-65535"
    );
    assert_eq!(
        build_error(OpenAiCompat::new("http://localhost:80a/v1")),
        "the base URL `http://localhost:80a/v1` has the port `80a`, not a number"
    );
}

/// A URL ureq could not parse was a `Connection` error, retried three times, at the first
/// prompt.
#[test]
fn a_malformed_url_fails_at_build_instead_of_as_a_retried_connection_error() {
    assert_eq!(
        build_error(OpenAiCompat::new("http://exa mple.com/v1")),
        "the base URL `http://exa mple.com/v1` is not a valid URL (invalid uri character)"
    );
    assert_eq!(
        build_error(Anthropic::new("https:///v1")),
        "the base URL `https:///v1` has no host"
    );
    assert_eq!(
        build_error(OpenAiCompat::new("http://[::1:8080/v1")),
        "the base URL `http://[::1:8080/v1` has an IPv6 host without its closing `]`"
    );
}

/// A request that cannot be built (a key with a line break cannot be a header) was a
/// `Connection` error, retried.
#[test]
fn a_header_that_cannot_be_sent_is_a_configuration_error_never_retried() {
    let probe = Probe::start(vec![]);
    let provider = openai(&probe.url).api_key("sk-pasted\nwith a line break");
    let (agent, rec) = support::agent(provider, "m");
    let failed = agent.prompt("Hi").unwrap_err();
    assert_eq!(failed.kind(), ErrorKind::InvalidRequest(None), "{failed}");
    let Error::Config(message) = failed.into_error() else {
        panic!("a configuration error");
    };
    assert!(
        message.starts_with(&format!(
            "POST {}/v1/chat/completions: the request cannot be sent: ",
            probe.url
        )),
        "{message}"
    );
    assert!(
        !rec.lines().iter().any(|l| l.starts_with("retry")),
        "{:?}",
        rec.lines()
    );
    assert_eq!(probe.requests(), 0);
}

/// The base URL's query string went into the middle of the request's URL
/// (`/v1?key=..`+`/chat/completions`), and `Debug` showed it.
#[test]
fn a_query_in_the_base_url_goes_after_the_path_and_never_shows() {
    let server = Server::start(vec![support::Reply::sse(SSE_TEXT)]);
    let key = "sk-in-the-query-0123456789";
    let base = format!(
        "{}/v1?api-version=2024-10-21&api-key={key}",
        server.url.replace("http://", "http://user:pass-in-url@")
    );
    let provider = OpenAiCompat::new(base).api_key("sk-header-key-0123456789");
    let shown = format!("{provider:?}");
    for secret in [key, "api-version", "pass-in-url", "user", "sk-header-key"] {
        assert!(!shown.contains(secret), "{secret}: {shown}");
    }
    assert!(
        shown.contains(&format!(
            "base_url: \"http://<redacted>@{}/v1?<redacted>\"",
            server.url.trim_start_matches("http://")
        )),
        "{shown}"
    );
    assert_eq!(agent_on(provider).prompt("Hi").unwrap().text(), "Hello");
    let request = &server.requests()[0];
    assert_eq!(
        request.path,
        format!("/v1/chat/completions?api-version=2024-10-21&api-key={key}")
    );
    // User info is sent as basic authentication, unless the key takes that header.
    assert_eq!(
        request.header("authorization"),
        Some("Bearer sk-header-key-0123456789")
    );
}

/// Custom headers go with every request of every provider, after the provider's own; one
/// of the same name replaces the provider's (here the key's `authorization`, for a gateway
/// that takes its own token there), and a bad one fails at build, before any request.
#[test]
fn custom_headers_are_sent_and_replace_the_provider_headers_of_their_name() {
    let server = Server::start(vec![
        support::Reply::sse(SSE_TEXT),
        support::Reply::sse_file("written/anthropic_text.sse"),
    ]);
    let chat = openai(&server.url)
        .api_key("sk-replaced")
        .header("Authorization", "Bearer gateway-token")
        .header("HTTP-Referer", "https://example.com/app")
        .header("X-Title", "pagent");
    assert_eq!(agent_on(chat).prompt("Hi").unwrap().text(), "Hello");
    let messages = anthropic(&server.url)
        .api_key("sk-ant")
        .header("anthropic-beta", "context-1m-2025-08-07")
        .header("anthropic-version", "2099-01-01");
    agent_on(messages).prompt("Hi").unwrap();
    let requests = server.requests();
    let all = |i: usize, name: &str| -> Vec<&str> {
        requests[i]
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(all(0, "authorization"), ["Bearer gateway-token"]);
    assert_eq!(all(0, "http-referer"), ["https://example.com/app"]);
    assert_eq!(all(0, "x-title"), ["pagent"]);
    assert_eq!(all(0, "content-type"), ["application/json"]);
    assert_eq!(all(1, "x-api-key"), ["sk-ant"]);
    assert_eq!(all(1, "anthropic-beta"), ["context-1m-2025-08-07"]);
    assert_eq!(all(1, "anthropic-version"), ["2099-01-01"]);
    for (name, value) in [("Bad Name", "v"), ("x-ok", "sk-value\nbreak"), ("", "v")] {
        let probe = Probe::start(vec![]);
        let built = Agent::builder()
            .provider(openai(&probe.url).header(name, value))
            .build();
        let Err(Error::Config(message)) = built else {
            panic!("{name:?}: a configuration error");
        };
        assert!(message.starts_with("the header `"), "{message}");
        assert!(
            !message.contains("sk-value"),
            "the value is not shown: {message}"
        );
        assert_eq!(probe.requests(), 0);
    }
}

#[test]
fn a_provider_debug_shows_no_user_info_query_or_key_even_for_a_bad_url() {
    let anthropic = Anthropic::new("https://me:sk-pw-0123456789@h.example:99999/?k=sk-q-0123")
        .api_key("sk-ant-key-0123456789");
    let openai = OpenAiCompat::new("h.example/v1?api-key=sk-q-0123").api_key("sk-key-0123");
    for shown in [format!("{anthropic:?}"), format!("{openai:?}")] {
        for secret in ["sk-pw", "me:", "sk-q", "sk-ant-key", "sk-key", "k="] {
            assert!(!shown.contains(secret), "{secret}: {shown}");
        }
        assert!(shown.contains("h.example"), "{shown}");
    }
}

#[test]
fn tls_spoken_to_a_plain_http_server_fails_within_the_connect_timeout() {
    for act in [Act::Silent, Act::whole(400, "text/plain", "bad request")] {
        let probe = Probe::start(vec![act]);
        let url = probe.url.replace("http://", "https://");
        let provider = OpenAiCompat::new(format!("{url}/v1"))
            .connect_timeout(Duration::from_millis(500))
            .retry(support::fast_retries());
        let message = config_error(provider);
        assert!(
            message.starts_with(&format!(
                "POST https://127.0.0.1:{}/v1/chat/completions: the TLS handshake failed",
                probe.addr.port()
            )),
            "{message}"
        );
        assert!(message.contains("may not speak TLS"), "{message}");
        assert!(message.contains("http:// vs https://"), "{message}");
        assert!(probe.accepted() <= 1, "not retried");
    }
}

#[test]
fn a_404_names_the_method_and_the_url_and_is_not_retried() {
    let probe = Probe::start(vec![Act::whole(
        404,
        "application/json",
        "{\"detail\":\"Not Found\"}",
    )]);
    let error = agent_on(openai(&format!("{}/wrong", probe.url)))
        .prompt("Hi")
        .unwrap_err()
        .into_error();
    assert_eq!(error.kind(), ErrorKind::InvalidRequest(Some(404)));
    assert_eq!(
        error.to_string(),
        format!(
            "http status 404: Not Found (POST http://127.0.0.1:{}/wrong/v1/chat/completions)",
            probe.addr.port()
        )
    );
    assert_eq!(probe.requests(), 1);
}

/// The README's "from the environment" snippet printed an empty line and exited 0 against a
/// refused port: the failed run was an `Ok`.
#[test]
fn a_refused_port_is_an_err_not_an_empty_reply() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let agent = agent_on(
        OpenAiCompat::new(format!("http://127.0.0.1:{port}/v1")).retry(RetryPolicy::none()),
    );
    // As the README writes it: `?` in a function returning `Result<_, pagent::Error>`.
    let say_hi = |agent: &Agent| -> Result<String, Error> { Ok(agent.prompt("Say hi")?.text()) };
    let error = say_hi(&agent).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Connection, "{error}");
    assert_eq!(agent.snapshot().error_kind, Some(ErrorKind::Connection));
    // The prompt and the failed reply stay in the transcript.
    assert_eq!(agent.snapshot().messages.len(), 2);
}

#[test]
fn a_refused_connection_names_the_url_without_its_query() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let provider = OpenAiCompat::new(format!("http://user:pw@127.0.0.1:{port}/v1?key=secret"))
        .retry(RetryPolicy::none());
    let error = agent_on(provider).prompt("Hi").unwrap_err().into_error();
    assert_eq!(error.kind(), ErrorKind::Connection);
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "connection failed: POST http://127.0.0.1:{port}/v1/chat/completions: "
        )),
        "{text}"
    );
    assert!(!text.contains("secret") && !text.contains("pw"), "{text}");
}

// ---- redirects ----

/// A provider POST answered with a redirect went, as a GET, to the host the `Location`
/// named, with every header but `authorization` and `cookie` (Anthropic's `x-api-key`
/// among them), and the error named the first URL. No redirect is followed now: the second
/// host receives nothing, the error names where the redirect pointed without its query,
/// and nothing is retried.
#[test]
fn a_redirect_is_an_error_naming_its_target_and_the_other_host_receives_nothing() {
    for status in [301, 302, 303, 307, 308] {
        for anthropic_api in [false, true] {
            let elsewhere = Server::start(vec![support::Reply::sse(SSE_TEXT)]);
            let first = Probe::start(vec![Act::whole(status, "text/plain", "moved").header(
                "Location",
                &format!(
                    "{}/v1/chat/completions?token=sk-in-the-location",
                    elsewhere.url
                ),
            )]);
            let (provider, path): (Arc<dyn Provider>, &str) = if anthropic_api {
                let p = anthropic(&first.url).api_key("sk-ant-R3d1r-0123456789");
                (Arc::new(p), "/v1/messages")
            } else {
                let p = openai(&first.url).api_key("sk-R3d1r-0123456789");
                (Arc::new(p), "/v1/chat/completions")
            };
            let (agent, rec) = support::agent(provider, "m");
            let failed = agent.prompt("Hi").unwrap_err();
            assert_eq!(failed.kind(), ErrorKind::InvalidRequest(Some(status)));
            assert_eq!(
                failed.error(),
                &Error::Http {
                    status,
                    message: format!(
                        "redirected to {}/v1/chat/completions, not followed: a request and \
                         its key go only where the base URL says (POST {}{path})",
                        elsewhere.url, first.url
                    ),
                    retry_after: None,
                },
                "{status} {anthropic_api}"
            );
            assert_eq!(
                elsewhere.requests().len(),
                0,
                "{status}: the other host was called"
            );
            assert_eq!(first.requests(), 1, "{status}: not retried");
            let lines = rec.lines();
            assert!(!lines.iter().any(|l| l.starts_with("retry")), "{lines:?}");
            assert!(!lines.iter().any(|l| l.contains("sk-in-the")), "{lines:?}");
        }
    }
}

#[test]
fn a_relative_redirect_is_named_against_the_request_url() {
    let probe = Probe::start(vec![
        Act::whole(308, "text/plain", "").header("Location", "/v1/chat/completions/?x=1"),
    ]);
    let error = agent_on(openai(&probe.url))
        .prompt("Hi")
        .unwrap_err()
        .into_error();
    assert_eq!(
        error.to_string(),
        format!(
            "http status 308: redirected to {url}/v1/chat/completions/, not followed: a request \
             and its key go only where the base URL says (POST {url}/v1/chat/completions)",
            url = probe.url
        )
    );
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

#[test]
fn replies_that_ended_normally_keep_their_connection_for_the_next_request() {
    let probe = Probe::start(vec![Act::sse(SSE_TEXT), Act::sse(SSE_TEXT)]);
    let agent = agent_on(openai(&probe.url));
    assert_eq!(agent.prompt("Hi").unwrap().text(), "Hello");
    assert_eq!(agent.prompt("Again").unwrap().text(), "Hello");
    assert_eq!(probe.requests(), 2);
    assert_eq!(probe.accepted(), 1, "two prompts, one connection");
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
