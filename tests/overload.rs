//! A server that takes fewer connections than come: a full accept queue under a burst of
//! agents, connections reset or refused before any byte of the reply. Every run rides it
//! out (a failed connection has retries of its own, more than a status), each retry
//! announced; apart from the retries, each run's events are exactly a healthy run's.
//!
//! Why: on Linux a listener past its backlog drops the connects it cannot queue (the client
//! sends its SYN again, 1 s later, then 3 s...), and one whose handshake it answered with a
//! SYN cookie but could not queue is reset when the client's next packet (the request's
//! second segment) fails the cookie check. 10,000 agents at once against a server of
//! backlog 128 had a few of their runs fail so, after the 2 retries a status gets.

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use pagent::llm::{OpenAiCompat, RetryPolicy};
use pagent::{Agent, Error};
use support::{Recorder, Reply, Server, read_request};

const SSE_TEXT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n\
                        data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                        data: [DONE]\n\n";

fn answer(stream: TcpStream) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    if read_request(&stream).is_none() {
        return;
    }
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
        SSE_TEXT.len()
    );
    let _ = (&stream).write_all(head.as_bytes());
    let _ = (&stream).write_all(SSE_TEXT.as_bytes());
}

fn agent_at(url: &str, retry: RetryPolicy) -> (Agent, Recorder) {
    let agent = Agent::builder()
        .provider(OpenAiCompat::new(format!("{url}/v1")).retry(retry))
        .model("m")
        .build()
        .unwrap();
    let rec = Recorder::attach(&agent);
    (agent, rec)
}

/// The event lines of a healthy run of "Hi" against `url` (the server's address shows in
/// no event of a run that succeeds, so they are the same at any address).
fn healthy_lines() -> Vec<String> {
    let server = Server::start(vec![Reply::sse(SSE_TEXT)]);
    let (agent, rec) = agent_at(&server.url, RetryPolicy::none());
    agent.prompt("Hi").unwrap();
    rec.lines()
}

/// `lines` without its retry lines, and the retry lines.
fn split_retries(lines: Vec<String>) -> (Vec<String>, Vec<String>) {
    lines.into_iter().partition(|l| !l.starts_with("retry "))
}

/// The retry lines with their random delays left out.
fn without_delays(retries: &[String]) -> Vec<String> {
    retries
        .iter()
        .map(|l| match (l.find(" after "), l.find(" ms: ")) {
            (Some(a), Some(b)) => format!("{}{}", &l[..a], &l[b + 3..]),
            _ => l.clone(),
        })
        .collect()
}

#[test]
fn a_burst_of_agents_at_a_full_accept_queue_all_finish() {
    use socket2::{Domain, Socket, Type};
    // Backlog 1, filled by connections never sent a request: every connect of the burst
    // finds the queue full.
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    listener.bind(&any.into()).unwrap();
    listener.listen(1).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let fillers: Vec<TcpStream> = (0..3)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok())
        .collect();
    assert!(!fillers.is_empty(), "the queue takes the first connects");
    let healthy = healthy_lines();
    const AGENTS: usize = 24;
    let go = Arc::new(Barrier::new(AGENTS + 1));
    let url = format!("http://{addr}");
    let runs: Vec<_> = (0..AGENTS)
        .map(|_| {
            let (go, url) = (go.clone(), url.clone());
            std::thread::spawn(move || {
                // The default policy's counts, with shorter waits (at least 3.15 s in all,
                // well past the 1.2 s the server takes nothing).
                let retry = RetryPolicy::new().initial_delay(Duration::from_millis(100));
                let (agent, rec) = agent_at(&url, retry);
                go.wait();
                let result = agent.prompt("Hi");
                (result.map(|r| r.text()), rec.lines())
            })
        })
        .collect();
    go.wait();
    // The server takes nothing for a while, then answers every connection (the fillers
    // get nothing: they sent no request).
    std::thread::sleep(Duration::from_millis(1_200));
    let listener: TcpListener = listener.into();
    listener.set_nonblocking(true).unwrap();
    // Every connection is answered until the runs are over (a connect the client gave up
    // on may still be in the queue, so their number is not known).
    let over = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let served = std::thread::spawn({
        let over = over.clone();
        move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut answering = Vec::new();
            while Instant::now() < deadline && !over.load(std::sync::atomic::Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        stream.set_nonblocking(false).unwrap();
                        answering.push(std::thread::spawn(move || answer(stream)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            answering
        }
    });
    drop(fillers);
    let mut retried = 0;
    for run in runs {
        let (result, lines) = run.join().unwrap();
        assert_eq!(result.as_deref(), Ok("Hello"), "{lines:#?}");
        let (rest, retries) = split_retries(lines);
        assert_eq!(rest, healthy);
        for line in without_delays(&retries) {
            assert!(
                line.contains(": connection failed: ") || line.contains(": timeout"),
                "{line}"
            );
        }
        retried += retries.len();
    }
    println!("{AGENTS} agents at a full accept queue: {retried} retries in all");
    over.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(served.join());
}

/// A server that resets the first `resets` connections (SO_LINGER 0, then closed) as soon as
/// it accepts them, then answers.
fn resetting(resets: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut accepted = 0;
        while Instant::now() < deadline && accepted <= resets {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    accepted += 1;
                    if accepted <= resets {
                        socket2::SockRef::from(&stream)
                            .set_linger(Some(Duration::ZERO))
                            .unwrap();
                        drop(stream);
                    } else {
                        answer(stream);
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    });
    url
}

#[test]
fn connections_reset_before_the_reply_are_retried_past_the_count_of_a_status() {
    let healthy = healthy_lines();
    // Five resets: more than the two retries a status gets, fewer than the six of a failed
    // connection.
    let url = resetting(5);
    let (agent, rec) = agent_at(&url, support::fast_retries());
    assert_eq!(agent.prompt("Hi").unwrap().text(), "Hello");
    let (rest, retries) = split_retries(rec.lines());
    assert_eq!(rest, healthy);
    let retries = without_delays(&retries);
    assert_eq!(retries.len(), 5, "{retries:#?}");
    for (i, line) in retries.iter().enumerate() {
        assert!(
            line.starts_with(&format!("retry {}: connection failed: POST {url}", i + 1)),
            "{line}"
        );
    }
    // Seven: the six retries are spent, and the error says so.
    let url = resetting(7);
    let (agent, rec) = agent_at(&url, support::fast_retries());
    let error = agent.prompt("Hi").unwrap_err();
    assert!(
        matches!(error.error(), Error::Connection(m) if m.ends_with("(gave up after 7 attempts)")),
        "{error:?}"
    );
    assert_eq!(split_retries(rec.lines()).1.len(), 6);
    // With the count set to 2, the third reset is the last.
    let url = resetting(3);
    let retry = support::fast_retries().max_connect_retries(2);
    let (agent, _rec) = agent_at(&url, retry);
    let error = agent.prompt("Hi").unwrap_err();
    assert!(
        matches!(error.error(), Error::Connection(m) if m.ends_with("(gave up after 3 attempts)")),
        "{error:?}"
    );
}

#[test]
fn a_server_that_starts_listening_late_is_waited_for() {
    let healthy = healthy_lines();
    // A port bound but not listening: connects are refused until the server listens on
    // it, and no one else can take the port meanwhile.
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    socket.bind(&any.into()).unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let retry = RetryPolicy::new().initial_delay(Duration::from_millis(50));
    let (agent, rec) = agent_at(&url, retry);
    let run = std::thread::spawn(move || agent.prompt("Hi").map(|r| r.text()));
    // Refused at least once before the server is up: it listens after the first retry.
    let until = Instant::now() + Duration::from_secs(20);
    while !rec.lines().iter().any(|l| l.starts_with("retry ")) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
    socket.listen(128).unwrap();
    let listener: TcpListener = socket.into();
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && !run.is_finished() {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                answer(stream);
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    let result = run.join().unwrap();
    let lines = rec.lines();
    assert_eq!(result.as_deref(), Ok("Hello"), "{lines:#?}");
    let (rest, retries) = split_retries(lines);
    assert_eq!(rest, healthy);
    assert!(!retries.is_empty());
    for (i, line) in without_delays(&retries).iter().enumerate() {
        assert!(
            line.starts_with(&format!("retry {}: connection failed: POST {url}", i + 1))
                && line.contains("refused"),
            "{line}"
        );
    }
}
