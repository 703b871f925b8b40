//! Lines in and out: reading input line by line without ever holding more than the line
//! limit, and a shared sink that writes whole lines (the wire writer, the stdio server and
//! the session writer all write through one).

use std::io::{self, BufRead, Write};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::Error;
use crate::event::AgentEvent;

/// What [`read_line`] found.
pub(crate) enum Line {
    End,
    /// A line within the limit; `ended` is false for a last line without its line end.
    Whole {
        ended: bool,
    },
    TooLong(usize),
}

/// Reads one line into `buf` (without its line end), never holding more than `max` bytes: a
/// longer line is consumed and reported with its length.
///
/// The limit and the reported length leave out the line end, `\n` and `\r\n` alike, so a
/// line of `max` bytes is accepted whichever ending it has. A last line without a `\n` has no
/// line end: a `\r` there is part of the line.
pub(crate) fn read_line(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    buf.clear();
    let mut dropped = 0usize;
    let mut seen = false;
    // Whether the last byte taken (of this line, before its `\n`) was a `\r`.
    let mut ends_cr = false;
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(match (seen, dropped) {
                (false, _) => Line::End,
                // Only the held-back `\r` of a would-be CRLF can take `buf` past `max`.
                (true, 0) if buf.len() > max => {
                    let n = buf.len();
                    buf.clear();
                    Line::TooLong(n)
                }
                (true, 0) => Line::Whole { ended: false },
                (true, n) => Line::TooLong(n),
            });
        }
        seen = true;
        let (used, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        let piece = &available[..used];
        let piece = if done {
            &piece[..piece.len() - 1]
        } else {
            piece
        };
        if let Some(&last) = piece.last() {
            ends_cr = last == b'\r';
        }
        let total = buf.len() + piece.len();
        // One byte over the limit fits while it is a `\r`: it may be the first half of a
        // CRLF ending, which the limit does not count, and the next byte tells.
        let fits = total <= max || (total == max + 1 && ends_cr);
        if dropped == 0 && fits {
            buf.extend_from_slice(piece);
        } else {
            dropped += total;
            buf.clear();
        }
        input.consume(used);
        if done {
            if buf.ends_with(b"\r") {
                buf.pop();
            }
            return Ok(if dropped == 0 {
                Line::Whole { ended: true }
            } else {
                Line::TooLong(dropped - usize::from(ends_cr))
            });
        }
    }
}

/// A buffer that grew past this is dropped after its write, so one huge line does not pin
/// its memory for the rest of the stream.
const KEEP_BUFFER: usize = 1 << 20;

/// A shared, flushed line output with a sticky error: each write encodes whole lines into a
/// reused buffer, hands them to `W` in one `write_all` and flushes. After the first write or
/// flush error nothing more is written, since a stream with a hole in it would mislead its
/// reader. `S` is encoder state kept under the same lock. A cheap `Clone` handle.
pub(crate) struct LineSink<W, S = ()> {
    inner: Arc<Mutex<SinkInner<W, S>>>,
}

struct SinkInner<W, S> {
    out: W,
    state: S,
    error: Option<Error>,
    buf: Vec<u8>,
}

impl<W, S> Clone for LineSink<W, S> {
    fn clone(&self) -> Self {
        LineSink {
            inner: self.inner.clone(),
        }
    }
}

impl<W, S> LineSink<W, S> {
    pub(crate) fn new(out: W, state: S) -> Self {
        LineSink {
            inner: Arc::new(Mutex::new(SinkInner {
                out,
                state,
                error: None,
                buf: Vec::new(),
            })),
        }
    }

    /// The first write error, if writing failed.
    pub(crate) fn error(&self) -> Option<Error> {
        self.inner.lock().error.clone()
    }

    /// Runs `f` on the output, holding the lock.
    pub(crate) fn with_output<R>(&self, f: impl FnOnce(&mut W) -> R) -> R {
        f(&mut self.inner.lock().out)
    }

    /// Runs `f` on the state, holding the lock.
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.inner.lock().state)
    }
}

impl<W: Write, S> LineSink<W, S> {
    /// Writes the lines `encode` appends (each with its `\n`; none is fine) and flushes.
    ///
    /// # Errors
    /// [`Error::Io`] when writing or flushing fails, now or at an earlier write.
    pub(crate) fn write(&self, encode: impl FnOnce(&mut S, &mut Vec<u8>)) -> Result<(), Error> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if let Some(e) = &inner.error {
            return Err(e.clone());
        }
        inner.buf.clear();
        encode(&mut inner.state, &mut inner.buf);
        if inner.buf.is_empty() {
            return Ok(());
        }
        let written = inner
            .out
            .write_all(&inner.buf)
            .and_then(|()| inner.out.flush());
        if inner.buf.capacity() > KEEP_BUFFER {
            inner.buf = Vec::new();
        }
        written.map_err(|e| {
            let e = Error::from(e);
            inner.error = Some(e.clone());
            e
        })
    }

    /// A listener that writes what `encode` makes of each event (errors are kept for
    /// [`LineSink::error`]; a listener has nobody to return them to).
    pub(crate) fn listener(
        &self,
        encode: impl Fn(&mut S, &AgentEvent, &mut Vec<u8>) + Send + Sync + 'static,
    ) -> impl Fn(&AgentEvent) + Send + Sync + 'static
    where
        W: Send + 'static,
        S: Send + 'static,
    {
        let sink = self.clone();
        move |event| {
            let _ = sink.write(|state, buf| encode(state, event, buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Hands out `bytes` in pieces of at most `step` bytes, as a pipe or socket does.
    struct Chunked<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl io::Read for Chunked<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.bytes.len().min(self.step).min(out.len());
            out[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    /// Every line of `bytes`, read in pieces of `step` bytes, with what `read_line` found.
    fn lines(bytes: &[u8], step: usize, max: usize) -> Vec<(String, Vec<u8>)> {
        let mut input = io::BufReader::with_capacity(step, Chunked { bytes, step });
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for _ in 0..=bytes.len() {
            let found = match read_line(&mut input, &mut buf, max).unwrap() {
                Line::End => return out,
                Line::Whole { ended } => format!("whole, ended {ended}"),
                Line::TooLong(n) => format!("too long: {n}"),
            };
            out.push((found, buf.clone()));
        }
        panic!("read_line did not reach the end");
    }

    #[test]
    fn crlf_line_exactly_at_the_limit_is_accepted() {
        for step in [1, 2, 3, 4, 5, 64] {
            let whole = |line: &[u8]| ("whole, ended true".to_string(), line.to_vec());
            assert_eq!(
                lines(b"abcd\r\nabcd\nab\r\n", step, 4),
                [whole(b"abcd"), whole(b"abcd"), whole(b"ab")],
                "pieces of {step}"
            );
            // One byte more is over the limit with either ending, and the length is the
            // line's without its ending.
            let too_long = |n: usize| (format!("too long: {n}"), Vec::new());
            assert_eq!(
                lines(b"abcde\r\nabcde\nabcd\r\r\n", step, 4),
                [too_long(5), too_long(5), too_long(5)],
                "pieces of {step}"
            );
            // Without a `\n` there is no line end: a `\r` is part of the line.
            assert_eq!(lines(b"abcd\r", step, 4), [too_long(5)], "pieces of {step}");
            assert_eq!(
                lines(b"abc\r", step, 4),
                [("whole, ended false".to_string(), b"abc\r".to_vec())],
                "pieces of {step}"
            );
        }
    }

    proptest! {
        /// The limit means the same for LF and CRLF endings, wherever the reads split.
        #[test]
        fn crlf_and_lf_lines_read_alike(
            body in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'\r')], 0..12),
                0..6,
            ),
            step in 1usize..9,
            max in 0usize..10,
        ) {
            // A line ending in `\r` would read as a CRLF line once LF-ended: not the same line.
            let body: Vec<&[u8]> = body
                .iter()
                .map(|l| &l[..l.iter().rposition(|&b| b != b'\r').map_or(0, |i| i + 1)])
                .collect();
            let join = |end: &[u8]| body.iter().flat_map(|l| [l, end].concat()).collect::<Vec<u8>>();
            prop_assert_eq!(lines(&join(b"\n"), step, max), lines(&join(b"\r\n"), step, max));
            for (found, line) in lines(&join(b"\r\n"), step, max) {
                prop_assert!(line.len() <= max, "{} {:?}", found, line);
            }
        }
    }

    /// Accepts `ok` writes, then fails every one; counts the attempts.
    struct Flaky {
        ok: usize,
        attempts: usize,
        written: Vec<u8>,
    }

    impl Write for Flaky {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.attempts += 1;
            if self.attempts > self.ok {
                return Err(io::Error::other("disk full"));
            }
            self.written.extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn sink_writes_whole_lines_then_stays_silent_after_an_error() {
        let sink = LineSink::new(
            Flaky {
                ok: 1,
                attempts: 0,
                written: Vec::new(),
            },
            0u32,
        );
        let line = |n: &mut u32, buf: &mut Vec<u8>| {
            *n += 1;
            buf.extend_from_slice(format!("line {n}\n").as_bytes());
        };
        sink.write(line).unwrap();
        // Nothing to write: no write at all.
        sink.write(|_, _| {}).unwrap();
        let err = sink.write(line).unwrap_err();
        assert_eq!(
            err,
            Error::Io {
                kind: io::ErrorKind::Other,
                message: "disk full".into()
            }
        );
        assert_eq!(sink.write(line).unwrap_err(), err);
        assert_eq!(sink.error(), Some(err));
        assert_eq!(
            sink.with_output(|f| (f.attempts, f.written.clone())),
            (2, b"line 1\n".to_vec())
        );
        // The third write was refused before encoding.
        assert_eq!(sink.with_state(|n| *n), 2);
    }

    #[test]
    fn read_line_tells_a_last_line_without_its_end() {
        let mut input = &b"one\r\ntwo"[..];
        let mut buf = Vec::new();
        let mut read = || read_line(&mut input, &mut buf, 10).unwrap();
        assert!(matches!(read(), Line::Whole { ended: true }));
        assert!(matches!(read(), Line::Whole { ended: false }));
        assert!(matches!(read(), Line::End));
        let mut input = &b"far too long\nok"[..];
        assert!(matches!(
            read_line(&mut input, &mut buf, 4).unwrap(),
            Line::TooLong(12)
        ));
        assert!(matches!(
            read_line(&mut input, &mut buf, 4).unwrap(),
            Line::Whole { ended: false }
        ));
        assert_eq!(buf, b"ok");
    }
}
