//! A loopback HTTP server that replays scripted responses byte for byte, and a recording
//! listener that renders every agent event on one line.

#![allow(dead_code)]

pub mod answers;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pagent::llm::{OpenAiCompat, Provider, RetryPolicy};
use pagent::{Agent, AgentEvent, Message, RunError, RunResult, ToolOutput, tool};
use schemars::JsonSchema;
use serde::Deserialize;

/// How long a server thread lives at most, whatever the test does.
const SERVER_LIFETIME: Duration = Duration::from_secs(30);

/// One scripted response.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Bytes per write (0: the whole body in one write).
    pub chunk: usize,
    /// Pause before each write.
    pub delay: Duration,
    /// Send the headers and `body`, then nothing for this long, holding the connection
    /// (less if the client closes it first: [`Server::hung_up`] counts those).
    pub stall: Option<Duration>,
    /// Close the connection without ending the chunked body (a dropped connection).
    pub cut: bool,
}

impl Reply {
    /// A 200 event stream with this body.
    pub fn sse(body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            body: body.into(),
            chunk: 0,
            delay: Duration::ZERO,
            stall: None,
            cut: false,
        }
    }

    /// A file of `tests/data` replayed as an event stream.
    pub fn sse_file(path: &str) -> Reply {
        Reply::sse(data(path))
    }

    /// A JSON response with this status.
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            ..Reply::sse(body)
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn chunked(mut self, bytes: usize, delay: Duration) -> Reply {
        self.chunk = bytes;
        self.delay = delay;
        self
    }

    pub fn stall(mut self, time: Duration) -> Reply {
        self.stall = Some(time);
        self
    }

    pub fn cut(mut self) -> Reply {
        self.cut = true;
        self
    }
}

/// The bytes of a file under `tests/data`.
pub fn data(path: &str) -> Vec<u8> {
    let full = format!("{}/tests/data/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Serves `replies` in order, one per connection, on 127.0.0.1; then stops accepting.
pub struct Server {
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    hung_up: Arc<Mutex<usize>>,
    _thread: JoinHandle<()>,
}

impl Server {
    pub fn start(replies: Vec<Reply>) -> Server {
        Server::serve(replies, false)
    }

    /// As [`Server::start`], but the listener closes as soon as the last reply was handed
    /// out (later connections are refused), so that a test that runs many servers leaves
    /// no thread polling behind.
    pub fn start_exact(replies: Vec<Reply>) -> Server {
        Server::serve(replies, true)
    }

    fn serve(replies: Vec<Reply>, exact: bool) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        listener.set_nonblocking(true).unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = requests.clone();
        let hung_up = Arc::new(Mutex::new(0));
        let closed = hung_up.clone();
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + SERVER_LIFETIME;
            let mut replies = replies.into_iter();
            while Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let Some(reply) = replies.next() else { return };
                        let (log, closed) = (log.clone(), closed.clone());
                        std::thread::spawn(move || serve(stream, &reply, &log, &closed));
                        if exact && replies.len() == 0 {
                            return;
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Server {
            url,
            requests,
            hung_up,
            _thread: thread,
        }
    }

    /// How many connections the client closed while their reply was stalled, or before the
    /// reply reached its stall.
    pub fn hung_up(&self) -> usize {
        *self.hung_up.lock().unwrap()
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, reply: &Reply, log: &Mutex<Vec<Recorded>>, hung_up: &Mutex<usize>) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let Some(request) = read_request(&stream) else {
        return;
    };
    log.lock().unwrap().push(request);
    let wrote = write_reply(stream, reply, hung_up);
    // A client that leaves before a stalled reply reached its stall (the test saw the request
    // logged and closed at once) makes a write fail instead of the stall's read: the same
    // hang-up.
    if reply.stall.is_some_and(|s| !s.is_zero()) && wrote.is_err_and(|e| gone(&e)) {
        *hung_up.lock().unwrap() += 1;
    }
}

/// True when a write failed because the peer closed the connection.
fn gone(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    matches!(e.kind(), BrokenPipe | ConnectionReset | ConnectionAborted)
}

/// Reads one request (its head and a `content-length` body) from `stream` (bytes past it
/// are not kept: the client waits for the reply before it sends another).
pub fn read_request(stream: impl Read) -> Option<Recorded> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':')?;
        headers.push((n.trim().to_owned(), v.trim().to_owned()));
    }
    let len = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn write_reply(
    mut stream: TcpStream,
    reply: &Reply,
    hung_up: &Mutex<usize>,
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {} Scripted\r\n", reply.status);
    for (n, v) in &reply.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes())?;
    stream.flush()?;
    let size = if reply.chunk == 0 {
        reply.body.len().max(1)
    } else {
        reply.chunk
    };
    for piece in reply.body.chunks(size) {
        if !reply.delay.is_zero() {
            std::thread::sleep(reply.delay);
        }
        stream.write_all(format!("{:x}\r\n", piece.len()).as_bytes())?;
        stream.write_all(piece)?;
        stream.write_all(b"\r\n")?;
        stream.flush()?;
    }
    if let Some(stall) = reply.stall.filter(|s| !s.is_zero()) {
        // Nothing is sent; a read wakes when the client closes the connection (the client
        // sends nothing more after its request: the reply says `Connection: close`).
        // A close with unread bytes in the client's buffer arrives as a reset.
        stream.set_read_timeout(Some(stall))?;
        if closed((&stream).read(&mut [0; 64])) {
            *hung_up.lock().unwrap() += 1;
            return Ok(());
        }
    }
    if !reply.cut {
        stream.write_all(b"0\r\n\r\n")?;
    }
    stream.flush()
}

/// True when a read's result says the peer closed the connection: an end of file, or a reset
/// (a peer that closes with bytes it never read sends a reset instead of a FIN).
pub fn closed(read: std::io::Result<usize>) -> bool {
    match read {
        Ok(n) => n == 0,
        Err(e) => gone(&e),
    }
}

// ---- an agent with one tool, on a provider pointed at the loopback server ----

#[derive(Deserialize, JsonSchema)]
pub struct City {
    pub city: String,
}

pub fn weather() -> impl pagent::Tool {
    tool::typed(
        "get_weather",
        "Get the current weather for a city",
        |args: City, _| Ok(ToolOutput::text(format!("{}: 21 C, sunny", args.city))),
    )
}

pub fn fast_retries() -> RetryPolicy {
    RetryPolicy::new().initial_delay(Duration::from_millis(5))
}

pub fn openai(server: &Server) -> OpenAiCompat {
    OpenAiCompat::new(format!("{}/v1", server.url)).retry(fast_retries())
}

pub fn agent(provider: impl Provider + 'static, model: &str) -> (Agent, Recorder) {
    let agent = Agent::builder()
        .provider(provider)
        .model(model)
        .tool(weather())
        // One tool at a time, so that `ToolEnd`s (in completion order) come in call order.
        .max_parallel_tools(1)
        .build()
        .unwrap();
    let recorder = Recorder::attach(&agent);
    (agent, recorder)
}

/// Replays `replies` to a fresh agent on an OpenAI-compatible provider and sends `prompt`;
/// returns the event lines, what the run returned, and the server (for the requests it got).
pub fn replay(
    model: &str,
    replies: Vec<Reply>,
    prompt: &str,
) -> (Vec<String>, Result<RunResult, RunError>, Server) {
    let server = Server::start(replies);
    let (agent, rec) = agent(openai(&server), model);
    let result = agent.prompt(prompt);
    (rec.lines(), result, server)
}

pub fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

/// The events of a prompt that ended with an assistant reply after a plain prompt.
pub const PROMPT: [&str; 5] = [
    "AgentStart",
    "TurnStart 1",
    "MessageStart user",
    "MessageEnd user",
    "MessageStart assistant",
];

pub fn with_prompt(rest: &[&str]) -> Vec<String> {
    lines(&PROMPT).into_iter().chain(lines(rest)).collect()
}

/// Every event an agent emits, in order.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<AgentEvent>>>);

impl Recorder {
    pub fn attach(agent: &Agent) -> Recorder {
        let r = Recorder::default();
        let sink = r.0.clone();
        // Kept for the agent's lifetime, not for this function's.
        agent
            .subscribe(move |e: &AgentEvent| sink.lock().unwrap().push(e.clone()))
            .keep();
        r
    }

    pub fn events(&self) -> Vec<AgentEvent> {
        self.0.lock().unwrap().clone()
    }

    /// The error each retry announced, in order (the text after `retry N after M ms: `).
    pub fn retried(&self) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.starts_with("retry "))
            .map(|l| l.split_once(" ms: ").unwrap().1.to_owned())
            .collect()
    }

    /// One line per event; runs of deltas of one kind are merged into one line with their
    /// count and joined text, so long streams compare exactly yet briefly.
    pub fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut run: Option<(String, usize, String)> = None;
        let flush = |run: &mut Option<(String, usize, String)>, out: &mut Vec<String>| {
            if let Some((kind, n, text)) = run.take() {
                out.push(format!("{kind} x{n} {text:?}"));
            }
        };
        for e in self.events() {
            if let AgentEvent::MessageUpdate { delta, .. } = &e {
                let (kind, text) = match delta {
                    pagent::llm::StreamEvent::TextDelta { text } => ("text".to_owned(), text),
                    pagent::llm::StreamEvent::ThinkingDelta { text } => {
                        ("thinking".to_owned(), text)
                    }
                    pagent::llm::StreamEvent::ToolCallDelta { index, arguments } => {
                        (format!("args[{index}]"), arguments)
                    }
                    other => {
                        flush(&mut run, &mut out);
                        out.push(render_delta(other));
                        continue;
                    }
                };
                match &mut run {
                    Some((k, n, t)) if *k == kind => {
                        *n += 1;
                        t.push_str(text);
                    }
                    _ => {
                        flush(&mut run, &mut out);
                        run = Some((kind, 1, text.clone()));
                    }
                }
                continue;
            }
            flush(&mut run, &mut out);
            out.push(render(&e));
        }
        flush(&mut run, &mut out);
        out
    }
}

fn render_delta(delta: &pagent::llm::StreamEvent) -> String {
    use pagent::llm::StreamEvent as S;
    match delta {
        S::ToolCallStart { id, name } => format!("call {id} {name}"),
        S::ThinkingSignature { signature } => format!("signature {signature}"),
        S::Usage { usage: u } => format!(
            "usage in={} out={} cache_read={} cache_write={} reasoning={} total={}",
            u.input, u.output, u.cache_read, u.cache_write, u.reasoning, u.total
        ),
        S::Retry {
            attempt,
            delay_ms,
            error,
            ..
        } => format!("retry {attempt} after {delay_ms} ms: {error}"),
        other => format!("{other:?}"),
    }
}

fn render(e: &AgentEvent) -> String {
    match e {
        AgentEvent::AgentStart => "AgentStart".into(),
        AgentEvent::TurnStart { turn } => format!("TurnStart {turn}"),
        AgentEvent::MessageStart { message } => format!("MessageStart {}", message.role()),
        AgentEvent::MessageEnd { message } => match &**message {
            Message::Assistant(m) => format!(
                "MessageEnd assistant {:?} calls={}{}",
                m.stop_reason,
                m.tool_calls().count(),
                m.error_message
                    .as_ref()
                    .map(|e| format!(" error={e}"))
                    .unwrap_or_default()
            ),
            other => format!("MessageEnd {}", other.role()),
        },
        AgentEvent::ToolStart { call, .. } => {
            format!("ToolStart {} {} {}", call.id, call.name, call.arguments)
        }
        AgentEvent::ToolExecute {
            call_id,
            arguments,
            rewritten,
            ..
        } => format!(
            "ToolExecute {call_id} {arguments}{}",
            if *rewritten { " rewritten" } else { "" }
        ),
        AgentEvent::ToolEnd { result, .. } => format!(
            "ToolEnd {} {} {}",
            result.tool_call_id,
            if result.is_error { "err" } else { "ok" },
            result.text()
        ),
        AgentEvent::TurnEnd {
            turn, stop_reason, ..
        } => format!("TurnEnd {turn} {stop_reason}"),
        AgentEvent::OutputChecked { turn, check } => match &check.value {
            Ok(value) => format!("OutputChecked {turn} #{} ok {value}", check.attempt),
            Err(problem) => format!("OutputChecked {turn} #{} err {problem}", check.attempt),
        },
        AgentEvent::AgentEnd {
            stop_reason, usage, ..
        } => format!(
            "AgentEnd {stop_reason} in={} out={}",
            usage.input, usage.output
        ),
        other => other.name().into(),
    }
}

// ---- a fault-injecting server that records when the client's connection closed ----

/// What a [`Probe`] does with one request.
#[derive(Clone, Debug)]
pub enum Act {
    /// Answers nothing; holds the connection until the client closes it.
    Silent,
    /// Sends the 200 headers of an event stream, then nothing.
    HeadersOnly,
    /// Sends the headers and these bytes as one chunk, then nothing.
    Then(Vec<u8>),
    /// Sends the headers, then an SSE comment (`:` line) every period.
    Comments(Duration),
    /// Sends a whole event stream in chunked encoding (as model servers do), ends it, and
    /// keeps the connection for the next request.
    SseChunked(Vec<u8>),
    /// Sends a whole reply with a `Content-Length` and keeps the connection for the next
    /// request.
    Whole {
        status: u16,
        content_type: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
}

impl Act {
    pub fn sse(body: impl Into<Vec<u8>>) -> Act {
        Act::whole(200, "text/event-stream", body)
    }

    pub fn whole(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Act {
        Act::Whole {
            status,
            content_type: content_type.into(),
            headers: Vec::new(),
            body: body.into(),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Act {
        if let Act::Whole { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }
}

/// A loopback server that plays one [`Act`] per request (keeping connections alive across
/// whole replies), counting the connections it accepted and recording when each was closed
/// by the client. Clones share the counters.
#[derive(Clone)]
pub struct Probe {
    pub url: String,
    pub addr: std::net::SocketAddr,
    accepted: Arc<Mutex<usize>>,
    closed: Arc<Mutex<Vec<Instant>>>,
    requests: Arc<Mutex<usize>>,
}

impl Probe {
    pub fn start(acts: Vec<Act>) -> Probe {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let acts = Arc::new(Mutex::new(acts.into_iter()));
        let (accepted, closed, requests) = Default::default();
        let probe = Probe {
            url: format!("http://{addr}"),
            addr,
            accepted,
            closed,
            requests,
        };
        let (accepted, closed, requests) = (
            probe.accepted.clone(),
            probe.closed.clone(),
            probe.requests.clone(),
        );
        std::thread::spawn(move || {
            let deadline = Instant::now() + SERVER_LIFETIME;
            while Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => {
                        *accepted.lock().unwrap() += 1;
                        let (acts, closed, requests) =
                            (acts.clone(), closed.clone(), requests.clone());
                        std::thread::spawn(move || {
                            play(&stream, &acts, &requests);
                            closed.lock().unwrap().push(Instant::now());
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        probe
    }

    /// The connections accepted so far.
    pub fn accepted(&self) -> usize {
        *self.accepted.lock().unwrap()
    }

    /// The requests read so far.
    pub fn requests(&self) -> usize {
        *self.requests.lock().unwrap()
    }

    /// Waits (at most 5 s) until `n` connections were closed by the client; the time the
    /// last of them closed.
    pub fn wait_closed(&self, n: usize) -> Option<Instant> {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            let closed = self.closed.lock().unwrap();
            if closed.len() >= n {
                return closed.iter().max().copied();
            }
            drop(closed);
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }
}

/// Serves requests on one connection until the client closes it (or an act holds it).
fn play(stream: &TcpStream, acts: &Mutex<std::vec::IntoIter<Act>>, requests: &Mutex<usize>) {
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(SERVER_LIFETIME)).unwrap();
    let mut out = stream;
    loop {
        if read_request(stream).is_none() {
            return;
        }
        *requests.lock().unwrap() += 1;
        let Some(act) = acts.lock().unwrap().next() else {
            return;
        };
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                    Transfer-Encoding: chunked\r\n\r\n";
        match act {
            Act::Silent => {}
            Act::HeadersOnly => {
                let _ = out.write_all(head.as_bytes());
            }
            Act::Then(bytes) => {
                let _ = out.write_all(head.as_bytes());
                let _ = write!(out, "{:x}\r\n", bytes.len());
                let _ = out.write_all(&bytes);
                let _ = out.write_all(b"\r\n");
            }
            Act::Comments(period) => {
                let _ = out.write_all(head.as_bytes());
                let until = Instant::now() + SERVER_LIFETIME;
                while Instant::now() < until {
                    if out.write_all(b"3\r\n:\n\n\r\n").is_err() {
                        return;
                    }
                    std::thread::sleep(period);
                }
                return;
            }
            Act::SseChunked(body) => {
                let _ = out.write_all(head.as_bytes());
                let _ = write!(out, "{:x}\r\n", body.len());
                let _ = out.write_all(&body);
                let _ = out.write_all(b"\r\n0\r\n\r\n");
                continue;
            }
            Act::Whole {
                status,
                content_type,
                headers,
                body,
            } => {
                let mut head = format!(
                    "HTTP/1.1 {status} Scripted\r\nContent-Type: {content_type}\r\n\
                     Content-Length: {}\r\n",
                    body.len()
                );
                for (n, v) in headers {
                    head.push_str(&format!("{n}: {v}\r\n"));
                }
                head.push_str("\r\n");
                let _ = out.write_all(head.as_bytes());
                let _ = out.write_all(&body);
                continue;
            }
        }
        // Held: wait for the client to close.
        let mut buf = [0; 1024];
        while matches!((&*stream).read(&mut buf), Ok(n) if n > 0) {}
        return;
    }
}

/// The names of this process's threads that pagent started (`pagent-...`).
pub fn pagent_threads() -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) {
            let comm = comm.trim();
            if comm.starts_with("pagent-") {
                names.push(comm.to_owned());
            }
        }
    }
    names
}
