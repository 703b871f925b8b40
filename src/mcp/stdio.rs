//! The stdio transport: a child process that reads newline-delimited JSON-RPC on its stdin
//! and writes it on its stdout.
//!
//! Three threads per child, none of which the caller ever waits on: a writer (the crate's
//! [`LineOut`]: callers queue their messages and go on, and an abort's
//! `notifications/cancelled` is queued and returns at once), a reader of stdout (it hands
//! each message to the router, which answers the server's requests through the writer, and
//! ends the session with the reason when stdout closes or breaks the protocol), and a
//! reader of stderr that keeps its last bytes for error messages.
//!
//! # Bounded
//! The writer's queue holds at most [`MAX_QUEUED_BYTES`]. A sender that finds it full
//! waits for room, at most [`STALL`]: a server that sends requests but reads nothing fills
//! its pipe, then the queue with our answers, and then the connection ends with
//! [`McpError::NotReading`] instead of growing the client's memory with every request it
//! sends. (The reader waits with its answer meanwhile, so the server's messages are not
//! read either: nothing grows.) An abort's `notifications/cancelled` never waits: queued
//! when it fits at once, else dropped, so the run that gave its call up ends at once
//! even when the server stopped reading.
//!
//! # Shutdown
//! On unix the child starts in a process group of its own (`process_group(0)`), so that a
//! server started through a wrapper (`npx`, a shell script, `uv run`) ends with it: the
//! wrapper's children are in the group too, where ending the child by its pid would leave
//! them running. Shutdown closes the child's stdin (the spec's way to ask a stdio server to
//! exit) and waits for the child to exit for at most the grace period; then, when anything
//! of the group still runs, it sends `SIGTERM` to the whole group (`kill(-pgid)`), waits up
//! to a second for the group to end, sends `SIGKILL` to whatever is left, and reaps the
//! child. The group is signalled only while the child is not reaped, and shutdown runs
//! once however often `close` is called (see [`super::process`]). Elsewhere the child is
//! killed by its own handle after the grace period, and its own children are left running.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio as Pipe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::McpError;
use super::process::Process;
use super::session::{Router, Transport};
use crate::cancel::CancelToken;
use crate::jsonrpc::{Limits, LineOut};

/// How to start a stdio server.
#[derive(Clone, Debug)]
pub(crate) struct Spawn {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    /// Whether the program starts with no variable of this process's environment.
    pub(crate) env_clear: bool,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) max_message_bytes: usize,
    pub(crate) stderr_limit: usize,
    pub(crate) shutdown_grace: Duration,
}

/// The last bytes a child wrote to its stderr.
struct Tail {
    bytes: VecDeque<u8>,
    limit: usize,
}

impl Tail {
    fn push(&mut self, data: &[u8]) {
        self.bytes.extend(data);
        let extra = self.bytes.len().saturating_sub(self.limit);
        self.bytes.drain(..extra);
    }

    fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut bytes = a.to_vec();
        bytes.extend_from_slice(b);
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }
}

/// The most bytes waiting for the server to read them, besides what its pipe holds.
pub(crate) const MAX_QUEUED_BYTES: usize = 1024 * 1024;

/// How long a full queue waits for the server to read before the connection ends.
pub(crate) const STALL: Duration = Duration::from_secs(10);

pub(crate) struct StdioTransport {
    process: Arc<Process>,
    /// The writer; taken on close, which closes the child's stdin once what is queued was
    /// written.
    out: Mutex<Option<Arc<LineOut>>>,
    stderr: Arc<Mutex<Tail>>,
    /// Disconnects when the stderr reader ends (the child closed its stderr).
    stderr_done: Receiver<()>,
    grace: Duration,
}

impl StdioTransport {
    /// Starts the child and its threads.
    ///
    /// # Errors
    /// [`McpError::Spawn`] when the program cannot be started.
    pub(crate) fn spawn(spec: &Spawn, router: &Arc<Router>) -> Result<StdioTransport, McpError> {
        let mut command = Command::new(&spec.program);
        if spec.env_clear {
            command.env_clear();
        }
        command
            .args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Pipe::piped())
            .stdout(Pipe::piped())
            .stderr(Pipe::piped());
        if let Some(dir) = &spec.cwd {
            command.current_dir(dir);
        }
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            // A group of its own, led by the child (pgid = its pid): see the module docs.
            command.process_group(0);
        }
        let mut child = command
            .spawn()
            .map_err(|e| McpError::Spawn(format!("could not start `{}`: {e}", spec.program)))?;
        // OK because all three were asked for as pipes just above.
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr_pipe = child.stderr.take().expect("piped stderr");
        let process = Arc::new(Process::new(child));
        let stderr = Arc::new(Mutex::new(Tail {
            bytes: VecDeque::new(),
            limit: spec.stderr_limit,
        }));
        let (done_tx, stderr_done) = crossbeam_channel::bounded::<()>(0);
        let limits = Limits {
            max_bytes: MAX_QUEUED_BYTES,
            stall: STALL,
        };
        let out = match LineOut::spawn("pagent-mcp-writer", stdin, limits) {
            Ok(out) => Arc::new(out),
            Err(e) => {
                process.end(Duration::ZERO);
                return Err(McpError::Spawn(format!("could not start a thread: {e}")));
            }
        };
        let transport = StdioTransport {
            process: process.clone(),
            out: Mutex::new(Some(out)),
            stderr: stderr.clone(),
            stderr_done: stderr_done.clone(),
            grace: spec.shutdown_grace,
        };
        let threads = [
            spawn_thread("pagent-mcp-stderr", {
                let stderr = stderr.clone();
                move || read_stderr(stderr_pipe, &stderr, done_tx)
            }),
            spawn_thread("pagent-mcp-reader", {
                let router = router.clone();
                let max = spec.max_message_bytes;
                let ended = Ended {
                    process,
                    stderr,
                    stderr_done,
                };
                move || read_messages(stdout, &router, max, &ended)
            }),
        ];
        if let Some(e) = threads.into_iter().find_map(Result::err) {
            transport.close();
            return Err(McpError::Spawn(format!("could not start a thread: {e}")));
        }
        Ok(transport)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().text()
    }

    /// Queues one message; blocks while the queue is full, at most [`STALL`] (see the
    /// module docs). The handle is cloned out of the lock, so that `close` never waits.
    fn send_line(&self, message: &[u8]) -> Result<(), McpError> {
        let out = self.out.lock().clone().ok_or(McpError::Closed)?;
        out.send(message).map_err(McpError::from)
    }
}

fn spawn_thread(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .map(drop)
}

fn read_stderr(mut pipe: impl Read, tail: &Mutex<Tail>, _done: Sender<()>) {
    let mut buf = [0u8; 4096];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => tail.lock().push(&buf[..n]),
        }
    }
}

/// What the reader needs to say why the child's stdout ended.
struct Ended {
    process: Arc<Process>,
    stderr: Arc<Mutex<Tail>>,
    stderr_done: Receiver<()>,
}

impl Ended {
    /// The child's exit status and the end of its stderr, waiting briefly for both: a
    /// child that closed its stdout is usually exiting. A child that exited with nothing of
    /// its group left is reaped here, so that no zombie waits for the shutdown.
    fn exited(&self) -> McpError {
        let until = Instant::now() + Duration::from_millis(500);
        let _ = self.stderr_done.recv_deadline(until);
        let mut status = None;
        while status.is_none() && Instant::now() < until {
            status = self.process.exit_status();
            if status.is_none() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.process.reap_if_done();
        McpError::Exited {
            status: status.map(|s| s.to_string()),
            stderr: self.stderr.lock().text(),
        }
    }
}

/// One line of the server's output.
enum Line {
    /// A whole line in the buffer (its `\n` removed); the last line may lack it.
    Whole,
    /// The output ended.
    End,
    /// The line passed `max` bytes; reading stopped there.
    TooLong(usize),
}

/// Reads one line into `buf`, failing as soon as it passes `max` bytes.
///
/// Not the wire's `read_line`, which reads an overlong line to its end to go on with the
/// next one: a server's overlong message ends the connection, so reading stops at the limit
/// (a server that writes one endless line fails at once instead of at the call's timeout).
fn read_line(input: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Line> {
    buf.clear();
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                Line::End
            } else {
                Line::Whole
            });
        }
        let (used, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        let piece = &available[..if done { used - 1 } else { used }];
        if buf.len() + piece.len() > max {
            let seen = buf.len() + piece.len();
            input.consume(used);
            return Ok(Line::TooLong(seen));
        }
        buf.extend_from_slice(piece);
        input.consume(used);
        if done {
            return Ok(Line::Whole);
        }
    }
}

fn read_messages(stdout: impl Read, router: &Router, max: usize, ended: &Ended) {
    let mut input = BufReader::with_capacity(64 * 1024, stdout);
    let mut buf = Vec::new();
    let why = loop {
        match read_line(&mut input, &mut buf, max) {
            Ok(Line::End) => break ended.exited(),
            Err(e) => {
                break McpError::Protocol(format!("reading the server's output failed: {e}"));
            }
            Ok(Line::TooLong(size)) => break McpError::TooLarge { limit: max, size },
            Ok(Line::Whole) => {
                if buf.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                if let Err(e) = router.deliver(&buf, None) {
                    break e;
                }
            }
        }
    };
    // Nothing after a broken message can be trusted: the session ends here, and the child
    // is ended by the session's owner (`close`, or its drop).
    router.close(why);
}

impl Transport for StdioTransport {
    fn send(
        &self,
        message: Vec<u8>,
        _id: Option<u64>,
        cancel: &CancelToken,
    ) -> Result<(), McpError> {
        let _ = cancel;
        self.send_line(&message)
    }

    /// Never waits: a cancellation that does not fit the queue at once is dropped (the
    /// server is not reading, so it would not see it soon anyway), and the run that gave
    /// its call up goes on at once. The connection is not failed by it.
    fn send_detached(&self, message: Vec<u8>) {
        if let Some(out) = self.out.lock().clone() {
            let _ = out.try_send(&message);
        }
    }

    /// Every error of the writer ends the connection: it stays failed.
    fn ends_connection(&self, _error: &McpError) -> bool {
        true
    }

    /// Closes the child's stdin (which asks the server to exit) and ends it; a second call
    /// does nothing (see [`Process::end`]).
    fn close(&self) {
        // Dropping the last handle of the writer closes it once the queue is written.
        self.out.lock().take();
        self.process.end(self.grace);
    }

    fn ended(&self) -> McpError {
        Ended {
            process: self.process.clone(),
            stderr: self.stderr.clone(),
            stderr_done: self.stderr_done.clone(),
        }
        .exited()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_whole_and_an_overlong_one_stops_at_the_limit() {
        let mut input = BufReader::with_capacity(4, &b"ab\r\n\nlast"[..]);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line(&mut input, &mut buf, 8),
            Ok(Line::Whole)
        ));
        assert_eq!(buf, b"ab\r");
        assert!(matches!(
            read_line(&mut input, &mut buf, 8),
            Ok(Line::Whole)
        ));
        assert_eq!(buf, b"");
        assert!(matches!(
            read_line(&mut input, &mut buf, 8),
            Ok(Line::Whole)
        ));
        assert_eq!(buf, b"last");
        assert!(matches!(read_line(&mut input, &mut buf, 8), Ok(Line::End)));
        // An endless line: the reader stops once it passed the limit.
        let mut endless = BufReader::with_capacity(4, std::io::repeat(b'x'));
        assert!(matches!(
            read_line(&mut endless, &mut buf, 10),
            Ok(Line::TooLong(n)) if (11..=14).contains(&n)
        ));
    }
}
