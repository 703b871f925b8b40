//! No part of an API key reaches a text a user or the wire can see, wherever a limit cut
//! the server's text: the read limits of an error body (64 KiB) and of a body that is not an
//! event stream (800 bytes), the limits of a message (1,000 bytes, 200 for the start of a
//! body, 4,000 for any error text), with both providers and retries on.

use std::sync::Arc;

use pagent::llm::Provider;
use pagent::{Agent, Error, RunError};

use super::support::{self, Recorder, Reply, Server};
use super::{anthropic, openai};

/// The read limit of an error body.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// The read limit of a body that is not an event stream.
const SNIPPET_READ_LIMIT: usize = 800;
/// The cut of the start of such a body in its error.
const SNIPPET_LIMIT: usize = 200;
/// The cut of a server's message in an error.
const MESSAGE_LIMIT: usize = 1000;
/// The cut of every text of an error that leaves a provider.
const FINAL_LIMIT: usize = 4000;

/// Every text of a failed run that a user or the wire can see: the error (`Display` and
/// `Debug`), every event (`Debug`, which shows retry notices and `AgentEnd`'s error) and its
/// wire line, and the state (`Debug`: its error message, its retry notice).
fn visible(agent: &Agent, rec: &Recorder, failed: &RunError) -> Vec<String> {
    let mut texts = vec![failed.to_string(), format!("{failed:?}")];
    for event in rec.events() {
        texts.push(format!("{event:?}"));
        texts.push(pagent::wire::encode_event_line(&event));
    }
    texts.push(format!("{:?}", agent.snapshot()));
    texts
}

/// The first run of `run` bytes of `key` that `text` holds.
fn leaked(text: &str, key: &str, run: usize) -> Option<String> {
    key.as_bytes()
        .windows(run.min(key.len()))
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .find(|part| text.contains(part.as_str()))
}

fn provider(anthropic_api: bool, server: &Server, key: &str) -> Arc<dyn Provider> {
    if anthropic_api {
        Arc::new(anthropic(&server.url).api_key(key))
    } else {
        Arc::new(openai(&server.url).api_key(key))
    }
}

/// Runs one prompt against `replies` and returns the error and every visible text.
fn run(anthropic_api: bool, key: &str, replies: Vec<Reply>) -> (Error, Vec<String>) {
    let server = Server::start_exact(replies);
    let (agent, rec) = support::agent(provider(anthropic_api, &server, key), "m");
    let failed = agent.prompt("Hi").unwrap_err();
    let texts = visible(&agent, &rec, &failed);
    (failed.into_error(), texts)
}

/// The issue's own bodies: the read stopped 16 and 15 bytes into the key, and the start of
/// the key showed (`http status 500: sk-accept-SECRET (POST ...)`, `"sk-accept-SECRE"`).
const KEY: &str = "sk-accept-SECRET-Q7W3E9R2T5Y8U1I4";

fn assert_no_part_of(texts: &[String], key: &str) {
    for text in texts {
        assert_eq!(leaked(text, key, 8), None, "{text}");
        // The start of the key, cut by the read, from 4 bytes on.
        assert!(!text.contains(&key[..4]), "{text}");
    }
}

#[test]
fn a_500_whose_body_read_stops_inside_the_key_shows_none_of_it() {
    let body = format!("{}{KEY}", " ".repeat(ERROR_BODY_LIMIT - 16));
    for anthropic_api in [false, true] {
        let reply = Reply::json(500, body.clone());
        let (error, texts) = run(
            anthropic_api,
            KEY,
            vec![reply.clone(), reply.clone(), reply],
        );
        assert_eq!(error.status(), Some(500), "{error}");
        assert!(
            error
                .to_string()
                .starts_with("http status 500: <redacted> (POST"),
            "{error}"
        );
        assert!(
            texts.iter().any(|t| t.contains("retry")),
            "retries announced"
        );
        assert_no_part_of(&texts, KEY);
    }
}

#[test]
fn an_html_reply_whose_read_stops_inside_the_key_shows_none_of_it() {
    let body = format!("{}{KEY}", " ".repeat(SNIPPET_READ_LIMIT - 15));
    for anthropic_api in [false, true] {
        let reply = Reply {
            headers: vec![("Content-Type".into(), "text/html".into())],
            ..Reply::sse(body.clone())
        };
        let (error, texts) = run(anthropic_api, KEY, vec![reply]);
        let Error::ContentType { message, .. } = &error else {
            panic!("{error:?}");
        };
        assert!(
            message.ends_with("the body starts: \"<redacted>\""),
            "{message}"
        );
        assert_no_part_of(&texts, KEY);
    }
}

/// The deterministic sweep the property below samples: the key at every offset around a
/// message cut, with both providers.
#[test]
fn no_part_of_a_key_shows_when_it_sits_at_the_message_cut() {
    for offset in (MESSAGE_LIMIT - KEY.len() - 2..=MESSAGE_LIMIT + 2).step_by(3) {
        for anthropic_api in [false, true] {
            let message = format!("{}{KEY} tail", "x ".repeat(offset).split_at(offset).0);
            let body = serde_json::json!({"error": {"message": message}}).to_string();
            let (error, texts) = run(anthropic_api, KEY, vec![Reply::json(401, body)]);
            assert_eq!(error.status(), Some(401));
            assert_no_part_of(&texts, KEY);
        }
    }
}

/// A key in the base URL (Azure's `?api-key=`, a password in its user info) is a key all
/// the same: a server that echoes the request's URL in its error shows none of it.
#[test]
fn a_key_in_the_base_urls_query_or_user_info_shows_nowhere_when_a_server_echoes_it() {
    let query_key = "azq-M1N3B5V7C9X1Z3L5K7";
    let password = "pw-H4J6K8L0Z2X4C6V8";
    for anthropic_api in [false, true] {
        let path = if anthropic_api {
            "/v1/messages"
        } else {
            "/v1/chat/completions"
        };
        let echo = format!(
            "Cannot POST {path}?api-version=2024-10-21&api-key={query_key} \
             (user me:{password}): no such deployment"
        );
        let server = Server::start_exact(vec![Reply::json(404, echo)]);
        let base = format!(
            "{}{}?api-version=2024-10-21&api-key={query_key}",
            server
                .url
                .replace("http://", &format!("http://me:{password}@")),
            if anthropic_api { "" } else { "/v1" }
        );
        let provider: Arc<dyn Provider> = if anthropic_api {
            Arc::new(pagent::llm::Anthropic::new(base).api_key(KEY))
        } else {
            Arc::new(pagent::llm::OpenAiCompat::new(base).api_key(KEY))
        };
        let (agent, rec) = support::agent(provider, "m");
        let failed = agent.prompt("Hi").unwrap_err();
        let texts = visible(&agent, &rec, &failed);
        assert_eq!(failed.error().status(), Some(404), "{failed}");
        // The server's words around them stay.
        assert!(texts[0].contains("no such deployment"), "{}", texts[0]);
        assert!(texts[0].contains("api-version=2024-10-21"), "{}", texts[0]);
        for secret in [query_key, password] {
            for text in &texts {
                assert_eq!(leaked(text, secret, 8), None, "{text}");
            }
        }
    }
}

mod property {
    use super::*;
    use proptest::prelude::*;

    /// What the server answers, each with the limits that cut it.
    #[derive(Clone, Copy, Debug)]
    enum Shape {
        /// A 500 (retried: three attempts, two retry notices) with an error body.
        Retried500,
        /// A 401 with an error body, not retried.
        Refused401,
        /// A 200 that is not an event stream.
        Html200,
        /// An event stream whose event is an error.
        StreamError,
    }

    impl Shape {
        /// The limits a key may straddle.
        fn limits(self) -> &'static [usize] {
            match self {
                Shape::Retried500 | Shape::Refused401 => &[ERROR_BODY_LIMIT, MESSAGE_LIMIT, 0],
                Shape::Html200 => &[SNIPPET_READ_LIMIT, SNIPPET_LIMIT, 0],
                Shape::StreamError => &[FINAL_LIMIT, MESSAGE_LIMIT, 0],
            }
        }
    }

    /// What fills the body around the key.
    #[derive(Clone, Copy, Debug)]
    enum Pad {
        Whitespace,
        Html,
        Json,
    }

    /// `n` bytes of filler of `pad`, never a character of a key (no upper case, no digit).
    fn filler(pad: Pad, n: usize) -> String {
        let unit = match pad {
            // Raw line breaks and tabs cannot sit in a JSON string: spaces only there.
            Pad::Whitespace => " \n \t  ",
            Pad::Html => "<p class=\"x\">lorem ipsum</p>\n",
            Pad::Json => "    ",
        };
        unit.chars().cycle().take(n).collect()
    }

    /// A body of `shape` with `key` at byte `offset` of the text the limits apply to (the
    /// body, or the message of a JSON body) and `tail` bytes of filler after it.
    fn body(
        shape: Shape,
        pad: Pad,
        anthropic_api: bool,
        key: &str,
        offset: usize,
        tail: usize,
    ) -> Reply {
        let text = |pad| format!("{}{key}{}", filler(pad, offset), filler(pad, tail));
        match (shape, pad) {
            (Shape::StreamError, pad) => {
                // The message of an in-stream error: its JSON holds no raw line break.
                let pad = if matches!(pad, Pad::Whitespace) {
                    Pad::Json
                } else {
                    pad
                };
                let message = text(pad);
                Reply::sse(if anthropic_api {
                    format!(
                        "event: error\ndata: {}\n\n",
                        serde_json::json!({"type": "error",
                            "error": {"type": "overloaded_error", "message": message}})
                    )
                } else {
                    format!(
                        "data: {}\n\n",
                        serde_json::json!({"error": {"message": message, "type": "server_error"}})
                    )
                })
            }
            (Shape::Html200, pad) => Reply {
                headers: vec![("Content-Type".into(), "text/html".into())],
                ..Reply::sse(text(pad))
            },
            (shape, pad) => {
                let status = if matches!(shape, Shape::Retried500) {
                    500
                } else {
                    401
                };
                let body = match pad {
                    Pad::Json => {
                        serde_json::json!({"error": {"message": text(Pad::Json)}}).to_string()
                    }
                    pad => text(pad),
                };
                Reply::json(status, body)
            }
        }
    }

    fn shape() -> impl Strategy<Value = Shape> {
        prop_oneof![
            Just(Shape::Retried500),
            Just(Shape::Refused401),
            Just(Shape::Html200),
            Just(Shape::StreamError),
        ]
    }

    fn pad() -> impl Strategy<Value = Pad> {
        prop_oneof![Just(Pad::Whitespace), Just(Pad::Html), Just(Pad::Json)]
    }

    proptest! {
        // Each case is one run against a loopback server (three requests for a 500, of up
        // to 130 KB): enough cases to meet every shape, padding and limit many times.
        #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

        /// The key starts anywhere from a key's length before a limit to a little after it
        /// (so the limit falls before, inside and after it), and the body goes on past the
        /// limit or ends right after the key.
        #[test]
        fn no_eight_characters_of_a_key_show_wherever_a_limit_cuts(
            anthropic_api in any::<bool>(),
            shape in shape(),
            pad in pad(),
            key in "sk-[A-Za-z0-9]{20,60}",
            limit_at in 0usize..3,
            before in 0usize..72,
            long_tail in any::<bool>(),
        ) {
            let limit = shape.limits()[limit_at];
            let offset = (limit + 8).saturating_sub(before);
            let tail = if long_tail { limit + 100 } else { before % 4 };
            let reply = body(shape, pad, anthropic_api, &key, offset, tail);
            let attempts = if matches!(shape, Shape::Retried500) { 3 } else { 1 };
            let (error, texts) = run(anthropic_api, &key, vec![reply; attempts]);
            // The run failed the way the body says, so the texts are the ones meant.
            let expected = match shape {
                Shape::Retried500 => matches!(error, Error::Http { status: 500, .. }),
                Shape::Refused401 => matches!(error, Error::Http { status: 401, .. }),
                Shape::Html200 => matches!(error, Error::ContentType { .. }),
                Shape::StreamError => matches!(error, Error::Api { .. } | Error::Stream(_)),
            };
            prop_assert!(expected, "{:?}", error);
            for text in &texts {
                prop_assert_eq!(leaked(text, &key, 8), None, "{}", text);
            }
        }
    }
}

/// A custom header named like a credential (an Azure `api-key`, a gateway's bearer token) is
/// as secret as the key: a server that echoes it in an error body, retried or not, or in a
/// stream error shows none of it, and neither does `Debug`; other headers show.
#[test]
fn credential_headers_are_redacted_as_the_key_is() {
    const AZURE: &str = "azure-key-0f1e2d3c4b5a69788796a5b4";
    const GATEWAY: &str = "gw-token-Z9Y8X7W6V5U4T3S2R1";
    let echoed = format!("bad api-key {AZURE}; bad token Bearer {GATEWAY}");
    let error = format!(r#"{{"type":"x","message":"{echoed}"}}"#);
    let bodies = |anthropic_api: bool| {
        let in_stream = if anthropic_api {
            format!("event: error\ndata: {{\"type\":\"error\",\"error\":{error}}}\n\n")
        } else {
            format!("data: {{\"error\":{error}}}\n\n")
        };
        [
            Reply::json(500, format!(r#"{{"error":{error}}}"#)),
            Reply::json(401, format!(r#"{{"error":{error}}}"#)),
            Reply::sse(in_stream),
        ]
    };
    for anthropic_api in [false, true] {
        for reply in &bodies(anthropic_api) {
            let server = Server::start_exact(vec![reply.clone(), reply.clone(), reply.clone()]);
            let (provider, shown): (Arc<dyn Provider>, String) = if anthropic_api {
                let p = anthropic(&server.url)
                    .header("api-key", AZURE)
                    .header("Authorization", format!("Bearer {GATEWAY}"))
                    .header("X-Title", "pagent tests");
                let shown = format!("{p:?}");
                (Arc::new(p), shown)
            } else {
                let p = openai(&server.url)
                    .header("api-key", AZURE)
                    .header("Authorization", format!("Bearer {GATEWAY}"))
                    .header("X-Title", "pagent tests");
                let shown = format!("{p:?}");
                (Arc::new(p), shown)
            };
            assert!(shown.contains("(\"X-Title\", \"pagent tests\")"), "{shown}");
            let (agent, rec) = support::agent(provider, "m");
            let failed = agent.prompt("Hi").unwrap_err();
            let mut texts = visible(&agent, &rec, &failed);
            texts.push(shown);
            assert!(
                failed
                    .to_string()
                    .contains("bad api-key <redacted>; bad token Bearer <redacted>"),
                "{failed}"
            );
            assert_no_part_of(&texts, AZURE);
            assert_no_part_of(&texts, GATEWAY);
            // Both were sent as given.
            let request = &server.requests()[0];
            assert_eq!(request.header("api-key"), Some(AZURE));
            assert_eq!(
                request.header("authorization"),
                Some(format!("Bearer {GATEWAY}").as_str())
            );
        }
    }
}
