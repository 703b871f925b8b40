//! An idle agent holds no thread: after runs that called a tool (on a thread of its own),
//! streamed (`prompt_stream`, a run thread) and fed a channel subscriber, over HTTP with
//! the connection kept alive, the process has exactly the threads it had before the agent
//! was built. What an idle agent keeps is its pooled connection (a socket), not a thread.
//!
//! A test binary of its own: no other test's threads come and go meanwhile.

mod support;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pagent::Agent;
use pagent::llm::OpenAiCompat;
use support::{data, read_request, weather};

/// The threads of the process, by name, sorted.
fn threads() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .map(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

/// A server on one thread that answers the requests of each connection in turn with the
/// next of `replies` (an event stream with its length: the connection stays open), and
/// counts the connections it accepted.
fn keep_alive_server(replies: Vec<Vec<u8>>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let mut replies = replies.into_iter();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            while read_request(&stream).is_some() {
                let Some(body) = replies.next() else { return };
                if !reply(&stream, &body) {
                    break;
                }
            }
        }
    });
    (url, accepted)
}

fn reply(mut stream: &TcpStream, body: &[u8]) -> bool {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).is_ok() && stream.write_all(body).is_ok()
}

#[test]
fn an_idle_agent_holds_no_thread() {
    let (url, accepted) = keep_alive_server(vec![
        data("llama-server/stream_tools_fewshot_usage.sse"),
        data("llama-server/stream_tool_result_followup.sse"),
        data("llama-server/stream_text_usage.sse"),
    ]);
    let before = threads();
    let agent = Agent::builder()
        .provider(OpenAiCompat::new(url))
        .model("m")
        .tool(weather())
        .build()
        .unwrap();
    let events = agent.subscribe_channel(1024);
    // A tool call and the answer after it: two requests on one connection.
    let first = agent.prompt("What is the weather in Paris?").unwrap();
    assert_eq!(first.messages.len(), 4, "{:?}", first.messages);
    // A streamed run: its events read to the end on this thread.
    let stream = agent.prompt_stream("And now?").unwrap();
    let mut chunks = stream.text();
    let text: String = chunks.by_ref().collect();
    chunks.finish().unwrap();
    assert!(!text.is_empty());
    assert!(events.try_iter().count() > 0);
    // Idle now. A run's threads are joined or end on their own as the run ends: give them
    // a moment (bounded), then the process has the threads it had before the agent.
    let deadline = Instant::now() + Duration::from_secs(10);
    while threads() != before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(threads(), before);
    // All three requests went over the one connection, now in the pool.
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    assert!(!agent.is_running());
    drop(agent);
}
