//! A loopback MCP server over HTTP whose every answer a test writes: each request is logged
//! (with the time it came) and handed to the test's handler, whose steps are played on the
//! connection as they are (status and headers, events, pauses, a stream held open or fed
//! by the test). One request per connection (`Connection: close`); the server lives at most
//! [`LIFETIME`].

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde_json::{Value, json};

/// How long the server and each of its connections live at most, whatever the test does.
const LIFETIME: Duration = Duration::from_secs(30);

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// The body as text (a form's).
    pub text: String,
    pub at: Instant,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC method of a POST, or `""` (a response, or no body).
    pub fn rpc(&self) -> &str {
        self.body["method"].as_str().unwrap_or("")
    }
}

/// What the server does on a connection, in order.
pub enum Step {
    /// The status line and these headers (chunked transfer and `Connection: close` added).
    Head(u16, Vec<(&'static str, String)>),
    /// One chunk of the body.
    Data(String),
    Pause(Duration),
    /// Writes every text sent to a channel whose sender goes into this slot (so a test
    /// writes to the stream only while it is open), until the client leaves. The sender is
    /// in the slot before the reply's head is written: a client that saw the head finds it.
    Open(Arc<Mutex<Option<Sender<String>>>>),
    /// Sends nothing for this long, or until the client closes the connection.
    Hold(Duration),
}

pub struct Scripted {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

type Handler = dyn Fn(&Seen) -> Vec<Step> + Send + Sync;

impl Scripted {
    pub fn start(handler: impl Fn(&Seen) -> Vec<Step> + Send + Sync + 'static) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        listener.set_nonblocking(true).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let handler: Arc<Handler> = Arc::new(handler);
        std::thread::spawn(move || {
            let until = Instant::now() + LIFETIME;
            while Instant::now() < until {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (log, handler) = (log.clone(), handler.clone());
                        std::thread::spawn(move || serve(stream, &log, &*handler));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Scripted { url, seen }
    }

    /// The requests received so far, in the order they came.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits (bounded) until `n` requests came; the requests.
    pub fn wait_seen(&self, n: usize) -> Vec<Seen> {
        let until = Instant::now() + Duration::from_secs(10);
        while self.seen().len() < n && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.seen()
    }
}

fn serve(stream: TcpStream, log: &Mutex<Vec<Seen>>, handler: &Handler) {
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(LIFETIME)).unwrap();
    let Some(seen) = read_request(&stream) else {
        return;
    };
    log.lock().unwrap().push(seen.clone());
    let _ = play(stream, &handler(&seen));
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    let request = super::loopback::read_request(stream)?;
    Some(Seen {
        body: serde_json::from_slice(&request.body).unwrap_or(Value::Null),
        text: String::from_utf8_lossy(&request.body).into_owned(),
        method: request.method,
        path: request.path,
        headers: request.headers,
        at: Instant::now(),
    })
}

fn play(mut stream: TcpStream, steps: &[Step]) -> std::io::Result<()> {
    let chunk = |stream: &mut TcpStream, text: &str| -> std::io::Result<()> {
        write!(stream, "{:x}\r\n{text}\r\n", text.len())?;
        stream.flush()
    };
    // The stream counts as open from its head on: the slot is filled before the head leaves.
    let mut open = None;
    for step in steps {
        match step {
            Step::Head(status, headers) => {
                for step in steps {
                    if let Step::Open(slot) = step {
                        let (tx, rx) = crossbeam_channel::unbounded::<String>();
                        *slot.lock().unwrap() = Some(tx);
                        open = Some(rx);
                    }
                }
                let mut head = format!("HTTP/1.1 {status} Scripted\r\n");
                for (n, v) in headers {
                    head.push_str(&format!("{n}: {v}\r\n"));
                }
                head.push_str("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
                stream.write_all(head.as_bytes())?;
                stream.flush()?;
            }
            Step::Data(text) if text.is_empty() => {}
            Step::Data(text) => chunk(&mut stream, text)?,
            Step::Pause(time) => std::thread::sleep(*time),
            Step::Open(slot) => {
                let rx = open.take().unwrap_or_else(|| {
                    let (tx, rx) = crossbeam_channel::unbounded::<String>();
                    *slot.lock().unwrap() = Some(tx);
                    rx
                });
                let until = Instant::now() + LIFETIME;
                while Instant::now() < until {
                    if let Ok(text) = rx.recv_timeout(Duration::from_millis(50)) {
                        chunk(&mut stream, &text)?;
                    } else if hung_up(&stream) {
                        return Ok(());
                    }
                }
            }
            Step::Hold(time) => {
                stream.set_read_timeout(Some(*time))?;
                if super::loopback::closed((&stream).read(&mut [0; 64])) {
                    return Ok(());
                }
            }
        }
    }
    stream.write_all(b"0\r\n\r\n")?;
    stream.flush()
}

/// True when the client closed the connection (it sends nothing after its request).
fn hung_up(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let closed = super::loopback::closed((&*stream).read(&mut [0; 64]));
    stream.set_nonblocking(false).unwrap();
    closed
}

/// A JSON reply with the session id `s1`.
pub fn json_reply(status: u16, body: &Value) -> Vec<Step> {
    vec![
        Step::Head(
            status,
            vec![
                ("content-type", "application/json".into()),
                ("mcp-session-id", "s1".into()),
            ],
        ),
        Step::Data(body.to_string()),
    ]
}

/// The head of an event stream.
pub fn sse_head() -> Step {
    Step::Head(200, vec![("content-type", "text/event-stream".into())])
}

/// The result of request `seen` as JSON-RPC.
pub fn result_of(seen: &Seen, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": seen.body["id"], "result": result})
}

/// A server that answers as a plain one does: `initialize` (with a session), `202` for
/// notifications and answers, `{}` for other requests, no tools, `405` for GET, `200` for
/// DELETE.
pub fn plain(seen: &Seen) -> Vec<Step> {
    match (seen.method.as_str(), seen.rpc()) {
        ("POST", "initialize") => json_reply(
            200,
            &result_of(
                seen,
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "serverInfo": {"name": "scripted", "version": "1"}}),
            ),
        ),
        ("POST", "tools/list") => json_reply(200, &result_of(seen, json!({"tools": []}))),
        ("POST", _) if seen.body.get("id").is_none() || seen.rpc().is_empty() => {
            vec![Step::Head(202, vec![])]
        }
        ("POST", _) => json_reply(200, &result_of(seen, json!({}))),
        ("GET", _) => vec![Step::Head(405, vec![("allow", "POST, DELETE".into())])],
        _ => vec![Step::Head(200, vec![])],
    }
}
