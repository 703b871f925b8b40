//! Streamable HTTP as the spec has it: redirects followed to the same origin only, the
//! server's stream open before `connect` returns, a request's stream resumed with
//! `Last-Event-ID`, an error with a `null` id reported to its request, and the server's
//! requests answered without a thread each. Against scripted servers
//! ([`super::scripted`]) and the official Python SDK.

use std::sync::atomic::AtomicUsize;

use super::scripted::{Scripted, Seen, Step, json_reply, plain, result_of, sse_head};
use super::*;

/// `(method, path, JSON-RPC method)` of each request.
fn route(seen: &[Seen]) -> Vec<(String, String, String)> {
    seen.iter()
        .map(|s| (s.method.clone(), s.path.clone(), s.rpc().to_owned()))
        .collect()
}

fn expected(rows: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    rows.iter()
        .map(|(m, p, r)| ((*m).to_owned(), (*p).to_owned(), (*r).to_owned()))
        .collect()
}

#[test]
fn a_307_to_the_same_origin_is_followed_with_the_method_body_and_headers() {
    let server = Scripted::start(|seen| match seen.path.as_str() {
        "/mcp/" => vec![Step::Head(307, vec![("location", "/mcp".into())])],
        _ => plain(seen),
    });
    let client = Client::http(format!("{}/mcp/", server.url))
        .era(Era::Session)
        .header("authorization", "Bearer t0ken")
        .connect()
        .unwrap();
    client.ping().unwrap();
    client.close();
    let seen = server.wait_seen(10);
    // Each request twice: answered 307 at `/mcp/`, then sent again to `/mcp`.
    assert_eq!(
        route(&seen),
        expected(&[
            ("POST", "/mcp/", "initialize"),
            ("POST", "/mcp", "initialize"),
            ("POST", "/mcp/", "notifications/initialized"),
            ("POST", "/mcp", "notifications/initialized"),
            ("GET", "/mcp/", ""),
            ("GET", "/mcp", ""),
            ("POST", "/mcp/", "ping"),
            ("POST", "/mcp", "ping"),
            ("DELETE", "/mcp/", ""),
            ("DELETE", "/mcp", ""),
        ])
    );
    for pair in seen.chunks(2) {
        let (first, again) = (&pair[0], &pair[1]);
        assert_eq!(again.body, first.body, "{}", first.rpc());
        for name in ["authorization", "accept", "content-type", "mcp-session-id"] {
            assert_eq!(again.header(name), first.header(name), "{name}");
        }
        assert_eq!(again.header("authorization"), Some("Bearer t0ken"));
    }
}

#[test]
fn a_308_moves_every_later_request_to_its_target() {
    let server = Scripted::start(|seen| match seen.path.as_str() {
        "/old" => vec![Step::Head(308, vec![("location", "/mcp".into())])],
        _ => plain(seen),
    });
    let client = Client::http(format!("{}/old", server.url))
        .era(Era::Session)
        .connect()
        .unwrap();
    client.ping().unwrap();
    client.close();
    let paths: Vec<String> = server.wait_seen(6).iter().map(|s| s.path.clone()).collect();
    assert_eq!(paths, ["/old", "/mcp", "/mcp", "/mcp", "/mcp", "/mcp"]);
}

#[test]
fn a_redirect_to_another_origin_is_an_error_and_the_other_host_receives_nothing() {
    let other = Scripted::start(plain);
    let to = format!("{}/mcp?token=secret", other.url);
    let first = Scripted::start(move |_| vec![Step::Head(307, vec![("location", to.clone())])]);
    let err = Client::http(format!("{}/mcp", first.url))
        .era(Era::Session)
        .header("authorization", "Bearer t0ken")
        .connect()
        .unwrap_err();
    assert_eq!(
        err,
        McpError::Redirected {
            status: 307,
            location: format!("{}/mcp", other.url)
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the mcp server redirected (status 307) to {}/mcp, which is not followed: only up \
             to five 307 or 308 redirects to the same origin are",
            other.url
        )
    );
    assert_eq!(first.wait_seen(1).len(), 1);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        route(&other.seen()),
        Vec::new(),
        "the other host received nothing"
    );
}

#[test]
fn a_redirect_that_is_not_307_or_308_is_not_followed_even_to_the_same_origin() {
    let server = Scripted::start(|seen| match seen.path.as_str() {
        "/mcp" => vec![Step::Head(302, vec![("location", "/elsewhere".into())])],
        _ => plain(seen),
    });
    let err = Client::http(format!("{}/mcp", server.url))
        .era(Era::Session)
        .connect()
        .unwrap_err();
    assert_eq!(
        err,
        McpError::Redirected {
            status: 302,
            location: format!("{}/elsewhere", server.url)
        }
    );
    assert_eq!(
        route(&server.wait_seen(1)),
        expected(&[("POST", "/mcp", "initialize")])
    );
}

#[test]
fn python_sdk_server_at_a_url_with_a_trailing_slash_is_reached_through_its_307() {
    let Some(dir) = installed() else { return };
    let server = PyServer::start(&dir, &[]);
    let client = Client::http(format!("{}/", server.url)).connect().unwrap();
    let tools = client.tools().unwrap();
    let sum = call(find(&tools, "add"), json!({"a": 2, "b": 3})).unwrap();
    assert_eq!(sum.to_text(), "5");
    client.close();
}

#[test]
fn connect_returns_once_the_servers_stream_is_open_so_its_first_message_is_not_lost() {
    let slot = Arc::new(Mutex::new(None));
    let stream = slot.clone();
    let server = Scripted::start(move |seen| match seen.method.as_str() {
        // The server answers its stream a moment late; a message it sends before the
        // stream is open is lost, as the TypeScript SDK's server loses it.
        "GET" => vec![
            Step::Pause(Duration::from_millis(300)),
            sse_head(),
            Step::Open(stream.clone()),
        ],
        _ => plain(seen),
    });
    let client = Client::http(format!("{}/mcp", server.url))
        .era(Era::Session)
        .connect()
        .unwrap();
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    let sent = slot
        .lock()
        .unwrap()
        .as_ref()
        .map(|tx: &crossbeam_channel::Sender<String>| tx.send(format!("data: {changed}\n\n")))
        .is_some();
    assert!(sent, "connect returned before the server's stream was open");
    let until = Instant::now() + Duration::from_secs(5);
    while !client.tools_changed() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(client.tools_changed());
    client.close();
}

/// The event stream of a request that the server closes after a priming event (`id`,
/// `retry: 300`), expecting a GET with `Last-Event-ID` on which it sends the response.
fn resumable() -> Scripted {
    let call = Arc::new(Mutex::new(Value::Null));
    Scripted::start(move |seen| match (seen.method.as_str(), seen.rpc()) {
        ("POST", "tools/call") if seen.body["params"]["name"] == "plain" => {
            // No ids: nothing to resume.
            vec![sse_head(), Step::Data(": hello\n\n".into())]
        }
        ("POST", "tools/call") => {
            *call.lock().unwrap() = seen.body["id"].clone();
            vec![
                sse_head(),
                Step::Data("id: e1\nretry: 300\ndata: \n\n".into()),
                Step::Pause(Duration::from_millis(50)),
            ]
        }
        ("GET", _) if seen.header("last-event-id") == Some("e1") => {
            let id = call.lock().unwrap().clone();
            let result = json!({"jsonrpc": "2.0", "id": id,
                                "result": {"content": [{"type": "text", "text": "resumed"}]}});
            vec![
                sse_head(),
                Step::Data(format!("id: e2\ndata: {result}\n\n")),
                Step::Hold(Duration::from_secs(10)),
            ]
        }
        _ => plain(seen),
    })
}

#[test]
fn a_requests_stream_closed_after_its_priming_event_is_resumed_with_last_event_id_after_retry() {
    let server = resumable();
    let client = Client::http(format!("{}/mcp", server.url))
        .era(Era::Session)
        .connect()
        .unwrap();
    let result = client
        .call_tool("resume", json!({}), &CancelToken::new(), &mut |_| {})
        .unwrap();
    assert_eq!(result.text(), "resumed");
    let seen = server.seen();
    let post = seen.iter().find(|s| s.rpc() == "tools/call").unwrap();
    let get = seen
        .iter()
        .find(|s| s.header("last-event-id").is_some())
        .unwrap();
    assert_eq!(
        (get.method.as_str(), get.header("mcp-session-id")),
        ("GET", Some("s1"))
    );
    // The server's retry delay was waited out (after the stream's 50 ms).
    assert!(get.at - post.at >= Duration::from_millis(300));
    // A stream without event ids that ends early cannot be resumed.
    let err = client
        .call_tool("plain", json!({}), &CancelToken::new(), &mut |_| {})
        .unwrap_err();
    assert_eq!(
        err,
        McpError::Protocol(
            "the server's reply (status 200) ended without the response to the request".into()
        )
    );
    client.ping().unwrap();
    client.close();
}

#[test]
fn an_error_with_a_null_id_fails_its_request_and_the_connection_lives_on() {
    let unaddressed = json!({"jsonrpc": "2.0", "id": null,
                             "error": {"code": -32700, "message": "Parse error"}});
    let server = Scripted::start(move |seen| match seen.rpc() {
        "tools/call" if seen.body["params"]["name"] == "json" => json_reply(200, &unaddressed),
        "tools/call" => vec![sse_head(), Step::Data(format!("data: {unaddressed}\n\n"))],
        _ => plain(seen),
    });
    let client = Client::http(format!("{}/mcp", server.url))
        .era(Era::Session)
        .connect()
        .unwrap();
    for reply in ["json", "stream"] {
        let err = client
            .call_tool(reply, json!({}), &CancelToken::new(), &mut |_| {})
            .unwrap_err();
        assert_eq!(
            err,
            McpError::Rpc {
                method: "tools/call".into(),
                code: -32700,
                message: "Parse error".into(),
                data: None
            },
            "{reply}"
        );
        client.ping().unwrap();
    }
    client.close();
}

#[test]
fn the_servers_requests_are_answered_in_turn_never_a_thread_each() {
    const PINGS: usize = 40;
    let (busy, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (now, peak) = (busy.clone(), most.clone());
    let server = Scripted::start(move |seen| {
        if seen.body.get("result").is_some() {
            // An answer of the client: held a while, counting how many are held at once.
            let held = now.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(held, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(50));
            now.fetch_sub(1, Ordering::SeqCst);
            return vec![Step::Head(202, vec![])];
        }
        match seen.rpc() {
            "tools/call" => {
                let mut events: String = (0..PINGS)
                    .map(|n| {
                        format!(
                            "data: {}\n\n",
                            json!({"jsonrpc": "2.0", "id": format!("p{n}"), "method": "ping"})
                        )
                    })
                    .collect();
                let done = result_of(seen, json!({"content": [{"type": "text", "text": "done"}]}));
                events.push_str(&format!("data: {done}\n\n"));
                vec![sse_head(), Step::Data(events)]
            }
            _ => plain(seen),
        }
    });
    let client = Client::http(format!("{}/mcp", server.url))
        .era(Era::Session)
        .connect()
        .unwrap();
    let result = bounded({
        let client = client.clone();
        move || client.call_tool("pings", json!({}), &CancelToken::new(), &mut |_| {})
    })
    .unwrap();
    assert_eq!(result.text(), "done");
    let answers: Vec<Value> = server
        .seen()
        .iter()
        .filter(|s| s.body.get("result").is_some())
        .map(|s| s.body["id"].clone())
        .collect();
    assert_eq!(
        answers,
        (0..PINGS)
            .map(|n| json!(format!("p{n}")))
            .collect::<Vec<_>>()
    );
    // Before, each answer had a thread of its own: all 40 were held at once.
    assert_eq!(most.load(Ordering::SeqCst), 1);
    client.close();
}

#[test]
fn error_texts_never_show_the_authorization_header_or_the_urls_secrets() {
    const TOKEN: &str = "tok-HEADER-SECRET-5678";
    const URL_KEY: &str = "sk-URL-SECRET-1234";
    // A server that echoes what it was sent in its errors: the headers in a 500's body,
    // and the token in a JSON-RPC error of a call (message and data).
    let server = Scripted::start(|seen| match (seen.method.as_str(), seen.rpc()) {
        ("POST", "tools/call") if seen.body["params"]["name"] == "fail" => json_reply(
            200,
            &json!({"jsonrpc": "2.0", "id": seen.body["id"], "error": {
                "code": -32000,
                "message": format!("refused {}", seen.header("authorization").unwrap_or("")),
                "data": {"echo": [seen.header("authorization").unwrap_or("")]},
            }}),
        ),
        ("POST", "tools/call") => vec![
            Step::Head(500, vec![("content-type", "text/plain".into())]),
            Step::Data(format!(
                "cannot serve {} with authorization: {}",
                seen.path,
                seen.header("authorization").unwrap_or("")
            )),
        ],
        _ => plain(seen),
    });
    let client = Client::http(format!("{}/mcp?api_key={URL_KEY}", server.url))
        .era(Era::Session)
        .header("authorization", format!("Bearer {TOKEN}"))
        .connect()
        .unwrap();
    let call = |name: &str| {
        client
            .call_tool(name, json!({}), &CancelToken::new(), &mut |_| {})
            .unwrap_err()
    };
    let status = call("echo");
    let rpc = call("fail");
    for err in [&status, &rpc] {
        let text = format!("{err} {err:?}");
        assert!(
            !text.contains(TOKEN) && !text.contains("HEADER-SECRET"),
            "{text}"
        );
        assert!(
            !text.contains(URL_KEY) && !text.contains("URL-SECRET"),
            "{text}"
        );
        assert!(text.contains("<redacted>"), "{text}");
    }
    assert!(
        matches!(
            &status,
            McpError::Transport(pagent::Error::Http { status: 500, .. })
        ),
        "{status:?}"
    );
    let McpError::Rpc { message, data, .. } = &rpc else {
        panic!("{rpc:?}")
    };
    assert_eq!(message, "refused Bearer <redacted>");
    assert_eq!(data, &Some(json!({"echo": ["Bearer <redacted>"]})));
    // The server did get them: only the texts of the errors lose them.
    let seen = server.seen();
    let last = seen.last().unwrap();
    assert_eq!(
        last.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert!(
        last.path.ends_with(&format!("?api_key={URL_KEY}")),
        "{}",
        last.path
    );
    client.close();
}

#[test]
fn a_builders_debug_shows_neither_header_values_nor_the_urls_secrets() {
    let builder =
        Client::http("http://user:pa55-SECRET-word@127.0.0.1:9/mcp?api_key=sk-URL-SECRET-1234")
            .header("authorization", "Bearer tok-HEADER-SECRET-5678");
    let shown = format!("{builder:?}");
    assert!(!shown.contains("SECRET"), "{shown}");
    assert!(shown.contains("authorization"), "{shown}");
}

#[test]
fn a_401_without_oauth_is_unauthorized_with_the_servers_challenge_parsed() {
    let server = Scripted::start(|seen| {
        match seen.method.as_str() {
        "POST" => vec![
            Step::Head(
                401,
                vec![(
                    "www-authenticate",
                    r#"Bearer error="invalid_token", scope="mcp:read mcp:write", resource_metadata="http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp""#.into(),
                )],
            ),
            Step::Data("{}".into()),
        ],
        _ => plain(seen),
    }
    });
    let err = Client::http(format!("{}/mcp", server.url))
        .connect()
        .unwrap_err();
    let McpError::Unauthorized { status, challenge } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*status, 401);
    assert_eq!(challenge.scheme(), "Bearer");
    assert_eq!(challenge.error(), Some("invalid_token"));
    assert_eq!(challenge.scope(), Some("mcp:read mcp:write"));
    assert_eq!(
        challenge.resource_metadata(),
        Some("http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp")
    );
    assert_eq!(
        err.to_string(),
        r#"the mcp server refused the request for want of authorization (status 401): Bearer error="invalid_token", scope="mcp:read mcp:write", resource_metadata="http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp""#
    );
}

/// A tool's `structuredContent` is checked against its `outputSchema` with the crate's one
/// schema check: patterns and closed objects refuse, a `$ref` to another document (never
/// fetched) refuses nothing, and a result without the structured part is refused too.
#[test]
fn structured_results_are_checked_against_the_tools_output_schema() {
    let server = Scripted::start(|seen| match seen.rpc() {
        "tools/list" => json_reply(
            200,
            &result_of(
                seen,
                json!({"tools": [{"name": "code", "inputSchema": {"type": "object"},
                    "outputSchema": {"type": "object", "required": ["code"],
                        "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"},
                                       "far": {"$ref": "https://example.invalid/s.json"}},
                        "additionalProperties": false}}]}),
            ),
        ),
        "tools/call" => {
            let structured = seen.body["params"]["arguments"]["give"].clone();
            let mut result = json!({"content": [{"type": "text", "text": "done"}]});
            if !structured.is_null() {
                result["structuredContent"] = structured;
            }
            json_reply(200, &result_of(seen, result))
        }
        _ => plain(seen),
    });
    let client = Client::http(format!("{}/mcp", server.url))
        .era(Era::Session)
        .connect()
        .unwrap();
    client.list_tools().unwrap();
    let call = |give: Value| {
        client.call_tool(
            "code",
            json!({ "give": give }),
            &CancelToken::new(),
            &mut |_| {},
        )
    };
    let fine = call(json!({"code": "ABC", "far": [1]})).unwrap();
    assert_eq!(fine.structured, Some(json!({"code": "ABC", "far": [1]})));
    for (give, reason) in [
        (
            json!({"code": "abc"}),
            "at `/code`: \"abc\" does not match the pattern `^[A-Z]+$`",
        ),
        (
            json!({"code": "A", "extra": 1}),
            "at the top level: the property `extra` is not allowed",
        ),
        (
            Value::Null,
            "no structuredContent, though the tool declares an outputSchema",
        ),
    ] {
        assert_eq!(
            call(give.clone()).unwrap_err(),
            McpError::BadResult {
                tool: "code".into(),
                reason: reason.into()
            },
            "{give}"
        );
    }
    client.close();
}

/// A stateless server that answers the probe only after the probe gave up (a slow start) is
/// greeted with `initialize`, which it refuses naming the revisions it speaks: the client
/// asks it again statelessly and speaks that era from then on.
#[test]
fn a_stateless_server_too_slow_for_the_probe_is_asked_again_statelessly() {
    let discovers = Arc::new(AtomicUsize::new(0));
    let server = Scripted::start(move |seen| match seen.rpc() {
        "server/discover" => {
            let first = discovers.fetch_add(1, Ordering::SeqCst) == 0;
            // The probe waits half the init timeout (1 s here); the first answer comes later.
            let mut steps = if first {
                vec![Step::Pause(Duration::from_millis(1500))]
            } else {
                Vec::new()
            };
            steps.extend(json_reply(
                200,
                &result_of(
                    seen,
                    json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                           "serverInfo": {"name": "slow", "version": "1"}}),
                ),
            ));
            steps
        }
        "initialize" => json_reply(
            400,
            &json!({"jsonrpc": "2.0", "id": seen.body["id"], "error": {"code": -32022,
                "message": "unsupported protocol version",
                "data": {"supported": ["2026-07-28"], "requested": "2025-11-25"}}}),
        ),
        _ => plain(seen),
    });
    let client = Client::http(format!("{}/mcp", server.url))
        .init_timeout(Duration::from_secs(2))
        .connect()
        .unwrap();
    let info = client.server_info();
    assert_eq!(
        (info.era, info.name.as_str(), info.protocol_version.as_str()),
        (Era::Stateless, "slow", "2026-07-28")
    );
    client.ping().unwrap();
    client.close();
    let asked: Vec<String> = server
        .seen()
        .iter()
        .map(|s| s.rpc().to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    assert_eq!(
        &asked[..4],
        [
            "server/discover",
            "initialize",
            "server/discover",
            "server/discover"
        ],
        "{asked:?}"
    );
}
