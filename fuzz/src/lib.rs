//! What the fuzz targets share: a loopback server that answers every request with the
//! current input as an event stream, and the check every provider's reply must pass.
//!
//! The providers' stream decoders are private to the library, so the targets drive them the
//! way a program does: a provider pointed at `127.0.0.1`. The tests' `Server`
//! (tests/support) serves one scripted reply per connection and polls for connections;
//! this one keeps connections alive and serves whatever the target set last, so that one
//! input costs one request on a pooled connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use pagent::llm::{Provider, Request, RetryPolicy, StreamEvent};
use pagent::{CancelToken, Message, PartialMessage};

/// The body the server sends next.
static BODY: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// The base URL of the loopback server, started on first use; it lives as long as the
/// process (libFuzzer runs one input after another on one thread).
pub fn server_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("a local address"));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || serve_connection(stream));
            }
        });
        url
    })
}

/// Answers requests on one connection until the client closes it or a read fails.
fn serve_connection(stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    loop {
        // The request line and headers; only the body length matters.
        let mut length = 0usize;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut request_body = vec![0; length];
        if reader.read_exact(&mut request_body).is_err() {
            return;
        }
        let body = BODY.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // One write: a second small one would wait for the client's delayed ACK (~40 ms).
        let mut reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        reply.extend_from_slice(&body);
        if (&stream).write_all(&reply).is_err() {
            return;
        }
    }
}

/// Streams a reply from `provider` (pointed at [`server_url`]) whose body is `body`, and
/// checks the provider's contract on it: the events fold into a message (as the agent
/// assembles it) that a session or the wire carries without loss. Errors are fine (the body
/// is arbitrary); panics and mismatches are not.
pub fn check_stream(provider: &dyn Provider, body: &[u8]) {
    *BODY.lock().unwrap_or_else(|e| e.into_inner()) = body.to_vec();
    let request = Request::new("m", vec![Message::user("hi").into()]);
    let mut built = PartialMessage::new("m");
    let mut calls = 0;
    let reply = provider.stream(&request, &CancelToken::new(), &mut |event| {
        match &event {
            StreamEvent::ToolCallStart { .. } => calls += 1,
            StreamEvent::ToolCallDelta { index, .. } => assert!(
                *index < calls,
                "a fragment of call {index} when {calls} calls started"
            ),
            _ => {}
        }
        built.push(&event);
        Ok(())
    });
    if let Ok(end) = reply {
        let message = Message::Assistant(built.to_message(end.stop_reason));
        let json = serde_json::to_string(&message).expect("a message serializes");
        let back: Message = serde_json::from_str(&json).expect("a message reads back");
        assert_eq!(back, message, "the assembled reply does not round-trip");
        assert_eq!(message.as_assistant().map_or(0, |m| m.tool_calls().count()), calls);
    }
}

/// A provider's settings for fuzzing: no retries (a retry would only replay the same body)
/// and timeouts that a loopback server answering at once never reaches, so that one
/// is a hang worth reporting.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// See [`TIMEOUT`].
pub fn no_retry() -> RetryPolicy {
    RetryPolicy::none()
}

/// The bytes after the first, and the first as a number from 1 to 256 (a chunk size, a
/// limit): the targets let the fuzzer choose how their input is cut.
pub fn split_first(data: &[u8]) -> (usize, &[u8]) {
    match data.split_first() {
        Some((&b, rest)) => (usize::from(b) + 1, rest),
        None => (1, data),
    }
}
