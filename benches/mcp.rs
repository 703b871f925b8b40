//! What the MCP client costs: starting and initializing a server, one tool call over stdio
//! against the same round trip without the client, and how fast an abort ends a call.
//!
//! ```sh
//! PAGENT_MCP_DIR=$(.ci/mcp.sh | tail -n 1) \
//!   cargo bench -p pagent-benches --features mcp --bench mcp -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Groups (the node and Python servers only when `PAGENT_MCP_DIR` names the install):
//! - `start_initialize/{fake_python,everything,filesystem}`: spawn the server, `initialize`,
//!   `notifications/initialized`, then close (the close is outside the measured time).
//! - `start_initialize/python_sdk_http`: `initialize` of a session with the running Python
//!   SDK server over Streamable HTTP on loopback.
//! - `call/...`: one `tools/call` of an echo tool, the connection already up: against
//!   `tests/mcp/fake_server.py` (python3 stdlib), server-everything's `echo`, and the Python
//!   SDK server's `add` over HTTP.
//! - `loopback/...`: the baselines without the client: the same request line written to the
//!   fake server's stdin and its answer line read back by hand (`python_raw`), and a line
//!   echoed by `cat` (`cat`, the pipe round trip of a child process alone). `call/fake_python`
//!   minus `loopback/python_raw` is the client's overhead per call.
//! - `abort/everything_long_running`: from `cancel()` on another thread to `call_tool`
//!   returning, while server-everything's long-running operation reports progress.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use pagent::CancelToken;
use pagent::mcp::{Client, ClientBuilder};
use serde_json::json;

fn fake() -> ClientBuilder {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/fake_server.py");
    Client::stdio("python3")
        .arg(script.display().to_string())
        .arg("ok")
}

fn installed() -> Option<PathBuf> {
    std::env::var_os("PAGENT_MCP_DIR").map(PathBuf::from)
}

fn node(dir: &Path, package: &str, args: &[&str]) -> ClientBuilder {
    let script = dir.join(format!(
        "node_modules/@modelcontextprotocol/{package}/dist/index.js"
    ));
    Client::stdio("node")
        .arg(script.display().to_string())
        .args(args.iter().map(|a| (*a).to_owned()))
}

/// Connects `iters` times; the time of `connect` only.
fn connects(make: impl Fn() -> ClientBuilder, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let builder = make();
        let started = Instant::now();
        let client = builder.connect().unwrap();
        total += started.elapsed();
        client.close();
    }
    total
}

struct PyServer(Child, String);

impl PyServer {
    fn start(dir: &Path) -> PyServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/http_server.py");
        let child = Command::new(dir.join("venv/bin/python"))
            .arg(script)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "the Python server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        PyServer(child, format!("http://127.0.0.1:{port}/mcp"))
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child that answers each line it reads with one line, driven by hand.
struct RawChild {
    child: Child,
    input: std::process::ChildStdin,
    output: BufReader<std::process::ChildStdout>,
}

impl RawChild {
    fn start(command: &mut Command) -> RawChild {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        RawChild {
            input: child.stdin.take().unwrap(),
            output: BufReader::new(child.stdout.take().unwrap()),
            child,
        }
    }

    fn round_trip(&mut self, line: &[u8], buf: &mut String) {
        self.input.write_all(line).unwrap();
        self.input.flush().unwrap();
        buf.clear();
        self.output.read_line(buf).unwrap();
    }
}

impl Drop for RawChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench(c: &mut Criterion) {
    let dir = installed();
    if dir.is_none() {
        eprintln!("PAGENT_MCP_DIR is not set: only the fake server and the baselines run");
    }
    let never = CancelToken::new();

    let mut start = c.benchmark_group("start_initialize");
    start.sample_size(10);
    start.bench_function("fake_python", |b| b.iter_custom(|n| connects(fake, n)));
    if let Some(dir) = &dir {
        start.bench_function("everything", |b| {
            b.iter_custom(|n| connects(|| node(dir, "server-everything", &["stdio"]), n))
        });
        let root = std::env::temp_dir();
        let root = root.display().to_string();
        start.bench_function("filesystem", |b| {
            b.iter_custom(|n| connects(|| node(dir, "server-filesystem", &[&root]), n))
        });
    }
    let py = dir.as_deref().map(PyServer::start);
    if let Some(py) = &py {
        start.bench_function("python_sdk_http", |b| {
            b.iter_custom(|n| connects(|| Client::http(&py.1), n))
        });
    }
    start.finish();

    let mut call = c.benchmark_group("call");
    let client = fake().connect().unwrap();
    call.bench_function("fake_python", |b| {
        b.iter(|| {
            client
                .call_tool("echo", json!({"text": "hi"}), &never, &mut |_| {})
                .unwrap()
        })
    });
    client.close();
    if let Some(dir) = &dir {
        let client = node(dir, "server-everything", &["stdio"])
            .connect()
            .unwrap();
        call.bench_function("everything_echo", |b| {
            b.iter(|| {
                client
                    .call_tool("echo", json!({"message": "hi"}), &never, &mut |_| {})
                    .unwrap()
            })
        });
        client.close();
    }
    if let Some(py) = &py {
        let client = Client::http(&py.1).connect().unwrap();
        call.bench_function("python_sdk_http_add", |b| {
            b.iter(|| {
                client
                    .call_tool("add", json!({"a": 1, "b": 2}), &never, &mut |_| {})
                    .unwrap()
            })
        });
        client.close();
    }
    call.finish();

    let mut loopback = c.benchmark_group("loopback");
    // The line the client sends for `call/fake_python`, byte for byte in size.
    let request = br#"{"id":2,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"progressToken":2},"arguments":{"text":"hi"},"name":"echo"}}
"#;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/fake_server.py");
    let mut python = RawChild::start(Command::new("python3").arg(script).arg("ok"));
    let mut buf = String::new();
    loopback.bench_function("python_raw", |b| {
        b.iter(|| python.round_trip(request, &mut buf))
    });
    let mut cat = RawChild::start(&mut Command::new("cat"));
    loopback.bench_function("cat", |b| b.iter(|| cat.round_trip(request, &mut buf)));
    loopback.finish();

    if let Some(dir) = &dir {
        let mut abort = c.benchmark_group("abort");
        abort.sample_size(10);
        let client = node(dir, "server-everything", &["stdio"])
            .connect()
            .unwrap();
        abort.bench_function("everything_long_running", |b| {
            b.iter_custom(|n| {
                let mut total = Duration::ZERO;
                for _ in 0..n {
                    let cancel = CancelToken::new();
                    let (tx, rx) = crossbeam_channel::bounded(1);
                    let canceller = {
                        let cancel = cancel.clone();
                        std::thread::spawn(move || {
                            rx.recv().unwrap();
                            let at = Instant::now();
                            cancel.cancel();
                            at
                        })
                    };
                    let args = json!({"duration": 100, "steps": 1000});
                    let result = client.call_tool(
                        "trigger-long-running-operation",
                        args,
                        &cancel,
                        &mut |_| {
                            let _ = tx.try_send(());
                        },
                    );
                    let returned = Instant::now();
                    assert!(result.is_err());
                    total += returned - canceller.join().unwrap();
                }
                total
            })
        });
        client.close();
        abort.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
