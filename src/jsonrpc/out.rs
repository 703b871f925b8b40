//! The way out of a line-delimited connection: a bounded queue of bytes and the one thread
//! that writes it.
//!
//! Whoever sends (a run's thread with its events, the reading thread with its answers)
//! appends whole lines to the queue and goes on; the writer thread takes everything queued
//! at once, writes it in one `write_all` and flushes. So no sender ever blocks in a
//! `write` the other side does not read, and a slow reader gets batched writes.
//!
//! # Bounded
//! The queue holds at most [`Limits::max_bytes`] (one line larger than that is taken alone
//! into an empty queue). A sender that finds it full waits for the writer to make room,
//! which is backpressure for a reader that is only slow; when no room is made for
//! [`Limits::stall`], the other side is taken to have stopped reading: the connection fails
//! with [`LinkError::Stalled`], every sender from then on gets that error, and what is
//! queued is dropped. The writer thread may stay blocked in its `write` until the other
//! side reads or closes; it owns nothing else.

use std::io::{ErrorKind, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::Error;

/// The default of [`Limits::max_bytes`]: bytes waiting for the other side to read them.
pub(crate) const MAX_QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// The default of [`Limits::stall`]: how long a full queue may wait for the other side.
pub(crate) const STALL: Duration = Duration::from_secs(30);

/// How much an output holds for a reader that does not read, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) max_bytes: usize,
    pub(crate) stall: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bytes: MAX_QUEUED_BYTES,
            stall: STALL,
        }
    }
}

/// Why messages no longer go out.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LinkError {
    /// The other side read nothing for `after` while `waiting` bytes were queued for it:
    /// the connection was closed, not our memory grown.
    Stalled { after: Duration, waiting: usize },
    /// Writing failed ([`Error::Io`]).
    Io(Error),
    /// The connection was closed on our side.
    Closed,
}

impl LinkError {
    /// As the crate's error: a stall is an [`Error::Io`] of kind `TimedOut`.
    pub(crate) fn to_error(&self) -> Error {
        match self {
            LinkError::Stalled { after, waiting } => Error::Io {
                kind: ErrorKind::TimedOut,
                message: format!(
                    "the other side read nothing for {after:?} while {waiting} bytes waited for it: \
                     the connection was closed"
                ),
            },
            LinkError::Io(e) => e.clone(),
            LinkError::Closed => Error::Io {
                kind: ErrorKind::NotConnected,
                message: "the connection is closed".into(),
            },
        }
    }
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_error().fmt(f)
    }
}

struct State {
    queued: Vec<u8>,
    /// No more lines are taken; the writer ends once the queue is written.
    closing: bool,
    /// Sticky: the first reason lines stopped going out.
    failed: Option<LinkError>,
    /// The writer thread has ended.
    done: bool,
}

struct Shared {
    state: Mutex<State>,
    /// The writer made room (or failed): senders waiting for room look again.
    room: Condvar,
    /// Lines were queued (or the output closes): the writer looks again.
    work: Condvar,
    limits: Limits,
}

/// A line output with its writer thread (see the module docs). Dropping it closes it
/// gracefully: what is queued is still written, by the writer thread, which then ends.
pub(crate) struct LineOut {
    shared: Arc<Shared>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl LineOut {
    /// Starts the writer thread (named `name`) of `output`.
    ///
    /// # Errors
    /// [`Error::Io`] when the thread cannot be started.
    pub(crate) fn spawn(
        name: &str,
        output: impl Write + Send + 'static,
        limits: Limits,
    ) -> Result<LineOut, Error> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queued: Vec::new(),
                closing: false,
                failed: None,
                done: false,
            }),
            room: Condvar::new(),
            work: Condvar::new(),
            limits,
        });
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || write_queued(&shared, output))
                .map_err(|e| Error::Io {
                    kind: e.kind(),
                    message: format!("cannot start the writer thread: {e}"),
                })?
        };
        Ok(LineOut {
            shared,
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Queues `line` (a `\n` is added when it does not end with one).
    ///
    /// Blocks while the queue is full, at most [`Limits::stall`].
    ///
    /// # Errors
    /// The reason the output failed or closed: [`LinkError::Stalled`] when this very line
    /// waited for room in vain.
    pub(crate) fn send(&self, line: &[u8]) -> Result<(), LinkError> {
        let shared = &*self.shared;
        let size = line.len() + usize::from(!line.ends_with(b"\n"));
        let mut state = shared.state.lock();
        let mut deadline = None;
        loop {
            if let Some(e) = &state.failed {
                return Err(e.clone());
            }
            if state.closing {
                return Err(LinkError::Closed);
            }
            let fits = state.queued.is_empty()
                || state.queued.len().saturating_add(size) <= shared.limits.max_bytes;
            if fits {
                break;
            }
            let until = *deadline.get_or_insert_with(|| Instant::now() + shared.limits.stall);
            if shared.room.wait_until(&mut state, until).timed_out() && state.failed.is_none() {
                let stalled = LinkError::Stalled {
                    after: shared.limits.stall,
                    waiting: state.queued.len(),
                };
                state.failed = Some(stalled.clone());
                // What waits will never be read: it is let go now.
                state.queued = Vec::new();
                shared.room.notify_all();
                shared.work.notify_one();
                return Err(stalled);
            }
        }
        state.queued.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            state.queued.push(b'\n');
        }
        shared.work.notify_one();
        Ok(())
    }

    /// Queues `line` when it fits now, never waiting for room: for a message that is only a
    /// courtesy to the other side (a cancellation), sent by a thread that must not block.
    /// A line that does not fit is dropped and the output goes on as it was (a full queue
    /// means the other side is not reading, so it would not see the line soon anyway).
    ///
    /// Returns whether the line was queued.
    ///
    /// # Errors
    /// The reason the output failed or closed.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn try_send(&self, line: &[u8]) -> Result<bool, LinkError> {
        let shared = &*self.shared;
        let size = line.len() + usize::from(!line.ends_with(b"\n"));
        let mut state = shared.state.lock();
        if let Some(e) = &state.failed {
            return Err(e.clone());
        }
        if state.closing {
            return Err(LinkError::Closed);
        }
        let fits = state.queued.is_empty()
            || state.queued.len().saturating_add(size) <= shared.limits.max_bytes;
        if !fits {
            return Ok(false);
        }
        state.queued.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            state.queued.push(b'\n');
        }
        shared.work.notify_one();
        Ok(true)
    }

    /// The first reason lines stopped going out, if they did.
    #[cfg(test)]
    pub(crate) fn error(&self) -> Option<LinkError> {
        self.shared.state.lock().failed.clone()
    }

    /// Takes no more lines, waits until what is queued was written (at most
    /// [`Limits::stall`] while the other side reads nothing), and ends the writer thread.
    ///
    /// # Errors
    /// The first reason lines stopped going out, [`LinkError::Stalled`] when the queue was
    /// not written in time (the writer thread is then left to end on its own, when its
    /// `write` returns).
    pub(crate) fn finish(&self) -> Result<(), LinkError> {
        let shared = &*self.shared;
        let mut state = shared.state.lock();
        state.closing = true;
        shared.work.notify_one();
        let until = Instant::now() + shared.limits.stall;
        while !state.done {
            if shared.room.wait_until(&mut state, until).timed_out() && !state.done {
                let stalled = LinkError::Stalled {
                    after: shared.limits.stall,
                    waiting: state.queued.len(),
                };
                state.failed.get_or_insert(stalled.clone());
                state.queued = Vec::new();
                return Err(stalled);
            }
        }
        let failed = state.failed.clone();
        drop(state);
        if let Some(writer) = self.writer.lock().take() {
            // It has ended (`done`): this returns at once.
            let _ = writer.join();
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for LineOut {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.closing = true;
        self.shared.work.notify_one();
    }
}

/// The writer thread: everything queued, at once, until the output closes or fails.
fn write_queued(shared: &Shared, mut output: impl Write) {
    let mut batch = Vec::new();
    let mut state = shared.state.lock();
    loop {
        while state.queued.is_empty() && !state.closing && state.failed.is_none() {
            shared.work.wait(&mut state);
        }
        if state.failed.is_some() || state.queued.is_empty() {
            break;
        }
        std::mem::swap(&mut batch, &mut state.queued);
        drop(state);
        let written = output.write_all(&batch).and_then(|()| output.flush());
        batch.clear();
        // A huge batch does not pin its memory for the rest of the connection.
        if batch.capacity() > 1 << 20 {
            batch = Vec::new();
        }
        state = shared.state.lock();
        if let Err(e) = written {
            state.failed.get_or_insert(LinkError::Io(Error::from(e)));
            state.queued = Vec::new();
        }
        shared.room.notify_all();
    }
    state.done = true;
    shared.room.notify_all();
    drop(state);
    // The output is closed here, on this thread (a pipe's reader then sees its end).
    drop(output);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes what is written, as a channel of chunks; blocks on a gate while it is closed.
    struct Gated {
        written: crossbeam_channel::Sender<Vec<u8>>,
        open: crossbeam_channel::Receiver<()>,
    }

    impl Write for Gated {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            // Blocks until the test lets one write through (or lets go of the gate).
            let _ = self.open.recv();
            let _ = self.written.send(bytes.to_vec());
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn gated(
        limits: Limits,
    ) -> (
        LineOut,
        crossbeam_channel::Receiver<Vec<u8>>,
        crossbeam_channel::Sender<()>,
    ) {
        let (written, chunks) = crossbeam_channel::unbounded();
        let (open, gate) = crossbeam_channel::unbounded();
        let out = LineOut::spawn(
            "test-writer",
            Gated {
                written,
                open: gate,
            },
            limits,
        )
        .unwrap();
        (out, chunks, open)
    }

    #[test]
    fn lines_are_written_whole_and_in_order() {
        let (out, chunks, open) = gated(Limits::default());
        out.send(b"one").unwrap();
        out.send(b"two\n").unwrap();
        drop(open);
        out.finish().unwrap();
        let all: Vec<u8> = chunks.try_iter().flatten().collect();
        assert_eq!(all, b"one\ntwo\n");
        assert_eq!(out.send(b"late"), Err(LinkError::Closed));
    }

    #[test]
    fn a_reader_that_reads_nothing_fails_the_output_with_stalled_not_memory() {
        let limits = Limits {
            max_bytes: 64,
            stall: Duration::from_millis(50),
        };
        let (out, chunks, _gate) = gated(limits);
        // The first line goes to the writer, which blocks in its write; the queue then fills.
        out.send(&[b'a'; 40]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut sent = 0;
        let error = loop {
            assert!(Instant::now() < deadline, "never stalled");
            match out.send(&[b'b'; 20]) {
                Ok(()) => sent += 1,
                Err(e) => break e,
            }
        };
        assert!(sent <= 4, "{sent} lines were queued past the limit");
        assert!(
            matches!(error, LinkError::Stalled { after, waiting } if after == limits.stall && waiting <= 64),
            "{error:?}"
        );
        // Sticky, and a typed error of the crate.
        assert_eq!(out.send(b"x"), Err(error.clone()));
        assert_eq!(out.error(), Some(error.clone()));
        assert!(matches!(
            error.to_error(),
            Error::Io {
                kind: ErrorKind::TimedOut,
                ..
            }
        ));
        assert!(chunks.try_recv().is_err(), "nothing was read");
        assert!(matches!(out.finish(), Err(LinkError::Stalled { .. })));
    }

    #[test]
    fn try_send_drops_a_line_that_does_not_fit_at_once_and_the_output_goes_on() {
        let limits = Limits {
            max_bytes: 64,
            // Far longer than the test: a try_send that waited would show.
            stall: Duration::from_secs(600),
        };
        let (out, chunks, open) = gated(limits);
        out.send(&[b'a'; 40]).unwrap();
        // Queued once the writer took the first line and blocked in its write.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !out.shared.state.lock().queued.is_empty() {
            assert!(Instant::now() < deadline, "the writer never took the line");
            std::thread::yield_now();
        }
        out.send(&[b'b'; 40]).unwrap();
        assert_eq!(out.try_send(&[b'c'; 40]), Ok(false));
        assert_eq!(out.error(), None, "a dropped line does not fail the output");
        assert_eq!(out.try_send(b"d"), Ok(true), "a line that fits is queued");
        drop(open);
        out.finish().unwrap();
        let all: Vec<u8> = chunks.try_iter().flatten().collect();
        let mut want = [b'a'; 40].to_vec();
        want.push(b'\n');
        want.extend_from_slice(&[b'b'; 40]);
        want.extend_from_slice(b"\nd\n");
        assert_eq!(all, want);
        assert_eq!(out.try_send(b"late"), Err(LinkError::Closed));
    }

    #[test]
    fn a_slow_reader_gets_backpressure_and_every_line() {
        let limits = Limits {
            max_bytes: 32,
            stall: Duration::from_secs(20),
        };
        let (out, chunks, open) = gated(limits);
        let reader = std::thread::spawn(move || {
            for _ in 0..200 {
                if open.send(()).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let lines: Vec<String> = (0..100).map(|i| format!("line {i:03}")).collect();
        for line in &lines {
            out.send(line.as_bytes()).unwrap();
        }
        out.finish().unwrap();
        reader.join().unwrap();
        let all: Vec<u8> = chunks.try_iter().flatten().collect();
        assert_eq!(String::from_utf8(all).unwrap(), lines.join("\n") + "\n");
    }

    #[test]
    fn a_write_error_is_sticky() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::new(ErrorKind::BrokenPipe, "gone"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let out = LineOut::spawn("test-writer", Broken, Limits::default()).unwrap();
        out.send(b"one").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while out.error().is_none() {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(1));
        }
        let Err(LinkError::Io(e)) = out.send(b"two") else {
            panic!("not the write error");
        };
        assert_eq!(e.io_kind(), Some(ErrorKind::BrokenPipe));
        assert!(matches!(out.finish(), Err(LinkError::Io(_))));
    }
}
