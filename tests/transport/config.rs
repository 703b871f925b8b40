//! Configuration mistakes fail at build, typed and never retried (a bad base URL, a header
//! that cannot be sent, TLS spoken to a plain server), a query string in the base URL goes
//! after the path and never shows, and redirects are never followed.

use super::*;

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

/// A line of the request head must fit the connection's output buffer (8 KiB, as most
/// servers' limit): a longer custom header is refused when the provider is built; one just
/// under it goes out whole.
#[test]
fn a_header_longer_than_8_kib_is_refused_at_build_and_a_shorter_one_is_sent_whole() {
    let long = "v".repeat(8 * 1024);
    assert_eq!(
        build_error(OpenAiCompat::new("http://127.0.0.1:9/v1").header("x-long", &long)),
        "the header `x-long` is longer than 8 KiB"
    );
    let server = Server::start(vec![support::Reply::sse(SSE_TEXT)]);
    let fits = "v".repeat(8 * 1024 - "x-long".len() - 4);
    let agent = agent_on(openai(&server.url).header("x-long", &fits));
    assert_eq!(agent.prompt("Hi").unwrap().text(), "Hello");
    assert_eq!(server.requests()[0].header("x-long"), Some(fits.as_str()));
}

/// A reply whose head is over the 16 KiB the connection reads, or that is not HTTP at all,
/// would be the same again: one request, an `Error::Stream` naming it, no retry.
#[test]
fn a_reply_head_too_large_or_not_http_is_a_stream_error_never_retried() {
    let mut large = support::Reply::sse(SSE_TEXT);
    large
        .headers
        .push(("x-large".into(), "v".repeat(17 * 1024)));
    let server = Server::start(vec![large, support::Reply::sse(SSE_TEXT)]);
    let error = agent_on(openai(&server.url)).prompt("Hi").unwrap_err();
    assert!(
        matches!(error.error(), Error::Stream(m) if m.contains("the reply's head cannot be read")),
        "{error:?}"
    );
    assert_eq!(server.requests().len(), 1);

    // A server that answers with something else than HTTP, to every connection.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(8) {
            let Ok(mut stream) = stream else { return };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = std::io::Write::write_all(&mut stream, b"SSH-2.0-OpenSSH_9.2\r\n");
            // Held until the client hangs up, so the reply is what it reads.
            let _ = std::io::Read::read(&mut stream, &mut [0; 64 * 1024]);
            let _ = std::io::Read::read(&mut stream, &mut [0; 64]);
        }
    });
    let error = agent_on(openai(&url)).prompt("Hi").unwrap_err();
    assert!(
        matches!(error.error(), Error::Stream(m) if m.contains("the reply's head cannot be read")),
        "{error:?}"
    );
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
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

/// A plain server on 127.0.0.1 that reads what comes first on each connection (a TLS hello,
/// here) and answers it with `answer` then closes (`None`: it says nothing and waits for the
/// client to close); its address and how many connections it took.
fn plain_server(
    answer: Option<&'static [u8]>,
) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = taken.clone();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = stream.read(&mut [0; 4096]);
            match answer {
                Some(answer) => {
                    let _ = stream.write_all(answer);
                }
                // Held by a thread of its own until the client closes.
                None => {
                    std::thread::spawn(move || {
                        while matches!(stream.read(&mut [0; 64]), Ok(n) if n > 0) {}
                    });
                }
            }
        }
    });
    (addr, taken)
}

#[test]
fn tls_spoken_to_a_plain_http_server_fails_at_once_naming_the_scheme_unless_it_is_silent() {
    // As nginx, Node and Go answer bytes that are not HTTP.
    let (addr, taken) = plain_server(Some(
        b"HTTP/1.1 400 Bad Request\r\ncontent-length: 11\r\nconnection: close\r\n\r\nBad Request",
    ));
    let provider = OpenAiCompat::new(format!("https://{addr}/v1")).retry(support::fast_retries());
    let message = config_error(provider);
    assert_eq!(
        message,
        format!(
            "POST https://{addr}/v1/chat/completions: the TLS handshake failed (io: received \
             corrupt message of type InvalidContentType): the server may not speak TLS (check \
             http:// vs https:// in the base URL)"
        )
    );
    assert_eq!(
        taken.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "not retried"
    );

    // One that says nothing is not told from a TLS server too busy to answer yet: a connect
    // timeout, retried as one.
    let (addr, taken) = plain_server(None);
    let provider = OpenAiCompat::new(format!("https://{addr}/v1"))
        .connect_timeout(Duration::from_millis(300))
        .retry(support::fast_retries().max_retries(1));
    let failed = agent_on(provider).prompt("Hi").unwrap_err().into_error();
    assert!(
        matches!(failed, Error::Timeout(pagent::TimeoutPhase::Connect)),
        "{failed:?}"
    );
    assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[test]
fn a_server_that_closes_in_the_tls_handshake_is_retried_as_a_failed_connection() {
    // A plain server that closes on bytes it cannot read, or an overloaded TLS one: the
    // client cannot tell them apart, and a connection closed is retried.
    let (addr, taken) = plain_server(Some(b""));
    let provider = OpenAiCompat::new(format!("https://{addr}/v1")).retry(support::fast_retries());
    let failed = agent_on(provider).prompt("Hi").unwrap_err();
    assert_eq!(failed.kind(), ErrorKind::Connection);
    let Error::Connection(message) = failed.into_error() else {
        panic!("a connection error")
    };
    assert_eq!(
        message,
        format!(
            "POST https://{addr}/v1/chat/completions: unexpected end of file in the TLS \
             handshake (gave up after 7 attempts)"
        )
    );
    assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 7);
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

/// A server on 127.0.0.1 whose first connection answers one request, is kept, and is closed
/// by the server as the next request on it comes (read, then no reply: the race of a server
/// closing an idle connection with a request under way); later connections answer each
/// request. `fresh_too`: the first request of the second connection is closed on too. Its
/// address, the connections it took and the requests it read.
fn closing_kept_server(
    fresh_too: bool,
) -> (
    std::net::SocketAddr,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::io::Write;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const REPLY: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n\
                         data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                         data: [DONE]\n\n";
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (taken, read) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (connections, requests) = (taken.clone(), read.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(8) {
            let Ok(mut stream) = stream else { return };
            let n = connections.fetch_add(1, Ordering::SeqCst);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            for i in 0.. {
                if support::read_request(&stream).is_none() {
                    break;
                }
                requests.fetch_add(1, Ordering::SeqCst);
                if (n == 0 && i == 1) || (fresh_too && n == 1 && i == 0) {
                    break;
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
                    REPLY.len()
                );
                if stream.write_all(head.as_bytes()).is_err()
                    || stream.write_all(REPLY.as_bytes()).is_err()
                {
                    break;
                }
            }
        }
    });
    (addr, taken, read)
}

#[test]
fn a_kept_connection_the_server_closes_as_a_request_goes_out_is_resent_on_a_new_one() {
    use std::sync::atomic::Ordering;
    let (addr, taken, read) = closing_kept_server(false);
    let provider = OpenAiCompat::new(format!("http://{addr}/v1")).retry(support::fast_retries());
    let (agent, rec) = support::agent(provider, "m");
    assert_eq!(agent.prompt("one").unwrap().text(), "Hello");
    assert_eq!(agent.prompt("two").unwrap().text(), "Hello");
    // Silently: no retry announced, the retry policy's count untouched.
    assert_eq!(rec.retried(), Vec::<String>::new());
    assert_eq!(taken.load(Ordering::SeqCst), 2);
    assert_eq!(read.load(Ordering::SeqCst), 3);

    // A new connection closed so is a failed connection, for the retry policy to judge.
    let (addr, taken, read) = closing_kept_server(true);
    let provider = OpenAiCompat::new(format!("http://{addr}/v1")).retry(support::fast_retries());
    let (agent, rec) = support::agent(provider, "m");
    assert_eq!(agent.prompt("one").unwrap().text(), "Hello");
    assert_eq!(agent.prompt("two").unwrap().text(), "Hello");
    let target = format!("POST http://{addr}/v1/chat/completions");
    assert_eq!(
        rec.retried(),
        [format!("connection failed: {target}: Peer disconnected")]
    );
    assert_eq!(taken.load(Ordering::SeqCst), 3);
    assert_eq!(read.load(Ordering::SeqCst), 4);
}

// ---- the request head, and where it goes ----

/// The head of a model call as ureq wrote it when it added the user agent, `accept` and
/// `host` itself, in the same order: pagent now makes them once per endpoint.
#[test]
fn a_model_call_sends_the_head_ureq_wrote_in_its_order() {
    let server = Server::start(vec![support::Reply::sse(SSE_TEXT)]);
    let chat = openai(&server.url).header("X-Title", "pagent");
    assert_eq!(agent_on(chat).prompt("Hi").unwrap().text(), "Hello");
    let request = &server.requests()[0];
    let names: Vec<String> = request
        .headers
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect();
    assert_eq!(
        names,
        [
            "user-agent",
            "accept",
            "host",
            "content-type",
            "x-title",
            "content-length"
        ]
    );
    assert_eq!(
        request.header("user-agent"),
        Some(concat!("pagent/", env!("CARGO_PKG_VERSION")))
    );
    assert_eq!(request.header("accept"), Some("*/*"));
    assert_eq!(
        request.header("host"),
        Some(server.url.trim_start_matches("http://"))
    );
    assert_eq!(
        request.header("content-length"),
        Some(&*request.body.len().to_string())
    );
}

/// A custom `host`, `user-agent` or `accept` replaces pagent's own, as it replaced ureq's.
#[test]
fn custom_host_user_agent_and_accept_headers_replace_the_defaults() {
    let server = Server::start(vec![support::Reply::sse(SSE_TEXT)]);
    let chat = openai(&server.url)
        .header("Host", "gateway.example")
        .header("User-Agent", "app/1")
        .header("Accept", "text/event-stream");
    assert_eq!(agent_on(chat).prompt("Hi").unwrap().text(), "Hello");
    let request = &server.requests()[0];
    for (name, value) in [
        ("host", "gateway.example"),
        ("user-agent", "app/1"),
        ("accept", "text/event-stream"),
    ] {
        let all: Vec<&str> = request
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(all, [value], "{name}");
    }
}

/// An IPv6 address in the base URL is connected to as it is (no lookup), and the `host`
/// header names it in brackets with its port.
#[test]
fn an_ipv6_address_is_connected_to_and_named_in_the_host_header() {
    use std::io::Write;
    let Ok(listener) = std::net::TcpListener::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    };
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let request = support::read_request(&stream).unwrap();
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n\
             {SSE_TEXT}",
            SSE_TEXT.len()
        );
        stream.write_all(reply.as_bytes()).unwrap();
        request
    });
    let agent = agent_on(openai(&format!("http://[::1]:{port}")));
    assert_eq!(agent.prompt("Hi").unwrap().text(), "Hello");
    let request = server.join().unwrap();
    assert_eq!(request.header("host"), Some(&*format!("[::1]:{port}")));
}

/// A host name that does not resolve is a failed connection naming the URL, retried as
/// one.
#[test]
fn a_host_name_that_does_not_resolve_is_a_failed_connection_naming_the_url() {
    let url = "http://no-such-host.invalid:9/v1";
    let agent = agent_on(OpenAiCompat::new(url).retry(RetryPolicy::none()));
    let error = agent.prompt("Hi").unwrap_err().into_error();
    assert_eq!(error.kind(), ErrorKind::Connection, "{error}");
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("connection failed: POST {url}/chat/completions: ")),
        "{text}"
    );
    let agent = agent_on(OpenAiCompat::new(url).retry(support::fast_retries()));
    let error = agent.prompt("Hi").unwrap_err().into_error();
    assert_eq!(error.kind(), ErrorKind::Connection, "{error}");
    assert!(error.to_string().contains("(gave up after "), "{error}");
}
