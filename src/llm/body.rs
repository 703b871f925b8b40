//! The body of a reply, read on the run thread: each read bounded by the deadline of its
//! phase (first byte, idle, the run's) and woken at once by a cancel (see the `http`
//! module's docs), its event stream handed on event by event.

use std::io::Read;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::CancelToken;
use super::error_text::{Secrets, scrub_read};
use super::http::cancelled;
use super::sockbuf;
use super::sse;
use super::transport::Ctx;
use super::url::Target;
use crate::{Error, TimeoutPhase};

/// 8 KiB: the size of a request's first output buffer, so that the two are one spare.
const READ_BUFFER: usize = sockbuf::OUTPUT_MIN;
/// How long the rest of a reply (the end of its chunked body) may take once its last event
/// came, to keep the connection for the next request; past it the connection is dropped.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(250);

/// A reply body being received on the run thread; see the module docs.
pub(crate) struct Body {
    reader: ureq::BodyReader<'static>,
    target: Target,
    /// Deadlines and the cancel token, for the sockets.
    ctx: Rc<Ctx>,
    /// When the first event is due (the first-byte timeout).
    first: Instant,
    idle: Duration,
    seen_event: bool,
    ended: bool,
    buf: ReadBuffer,
}

/// A reply's read buffer: [`READ_BUFFER`] bytes, taken from the thread's spare buffers and
/// given back when the reply is dropped (see `sockbuf`), so that a run reuses the same
/// buffers for all its model calls: this one is the request's output buffer, given back as
/// the reply was awaited (a fresh one is zeroed, which costs more than the reads of a
/// short reply).
struct ReadBuffer(Vec<u8>);

impl ReadBuffer {
    fn take() -> ReadBuffer {
        ReadBuffer(sockbuf::take(READ_BUFFER))
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        sockbuf::give(std::mem::take(&mut self.0));
    }
}

impl std::ops::Deref for ReadBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for ReadBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("seen_event", &self.seen_event)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl Body {
    /// The body `reader` of a request to `target`, whose first event is due within
    /// `first_byte` and each next bytes within `idle`.
    pub(crate) fn new(
        reader: ureq::BodyReader<'static>,
        target: Target,
        ctx: Rc<Ctx>,
        first_byte: Duration,
        idle: Duration,
    ) -> Body {
        Body {
            reader,
            target,
            first: Instant::now() + first_byte,
            ctx,
            idle,
            seen_event: false,
            ended: false,
            buf: ReadBuffer::take(),
        }
    }

    /// The next bytes of the body, `None` at its end.
    ///
    /// Blocks until bytes arrive, the body ends, the idle timeout passes (or, before the
    /// first event, the first-byte timeout), the run deadline passes, or the token is
    /// cancelled.
    pub(crate) fn next_chunk(&mut self) -> Result<Option<&[u8]>, Error> {
        if self.ended {
            return Ok(None);
        }
        let idle = Instant::now() + self.idle;
        if !self.seen_event && self.first < idle {
            self.ctx.set_deadline(self.first, TimeoutPhase::FirstByte);
        } else {
            self.ctx.set_deadline(idle, TimeoutPhase::Idle);
        }
        let n = self.read()?;
        if n == 0 {
            self.ended = true;
            self.ctx.keep_connection();
            return Ok(None);
        }
        Ok(Some(&self.buf[..n]))
    }

    fn read(&mut self) -> Result<usize, Error> {
        let _entered = self.ctx.enter();
        loop {
            match self.reader.read(&mut self.buf) {
                Ok(_) | Err(_) if self.ctx.cancel.is_cancelled() => {
                    return Err(cancelled(&self.ctx.cancel));
                }
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) if self.ctx.timed_out().is_some() => {
                    // OK because the arm's guard just saw it set.
                    return Err(Error::Timeout(self.ctx.timed_out().expect("a phase")));
                }
                Err(e) => {
                    return Err(Error::Connection(format!(
                        "{}: the reply broke off: {e}",
                        self.target
                    )));
                }
            }
        }
    }

    /// Up to `limit` bytes of the body, each read bounded by the idle timeout; what
    /// arrived before a failure is kept. Fails only when the request is cancelled.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn read_some(&mut self, limit: u64) -> Result<Vec<u8>, Error> {
        self.read_up_to(limit).map(|(bytes, _)| bytes)
    }

    /// The text of up to `limit` bytes of the body (as [`Body::read_some`]), without the key
    /// `secret`, also when the read stopped in the middle of it (see
    /// [`scrub_read`](super::error_text::scrub_read)).
    pub(crate) fn read_text(
        &mut self,
        limit: u64,
        secret: Option<&Secrets<'_>>,
    ) -> Result<String, Error> {
        let (bytes, ended) = self.read_up_to(limit)?;
        Ok(scrub_read(&bytes, !ended, secret))
    }

    /// Up to `limit` bytes, and whether the body ended there (else a limit, a timeout or a
    /// failure stopped the read, and more of the body may have followed).
    fn read_up_to(&mut self, limit: u64) -> Result<(Vec<u8>, bool), Error> {
        let mut out = Vec::new();
        while (out.len() as u64) < limit {
            self.ctx
                .set_deadline(Instant::now() + self.idle, TimeoutPhase::Idle);
            match self.read() {
                Ok(0) => return Ok((out, true)),
                Ok(n) => {
                    let room = usize::try_from(limit).unwrap_or(usize::MAX) - out.len();
                    out.extend_from_slice(&self.buf[..n.min(room)]);
                }
                Err(e @ (Error::Aborted | Error::Timeout(TimeoutPhase::Run))) => return Err(e),
                Err(_) => break,
            }
        }
        Ok((out, false))
    }

    /// Reads what is left of a reply whose last event came, briefly, so that its
    /// connection goes back to the pool; a server that holds the stream open after its
    /// last event costs at most [`DRAIN_TIMEOUT`] and its connection.
    fn drain(&mut self) {
        let until = Instant::now() + DRAIN_TIMEOUT.min(self.idle);
        for _ in 0..16 {
            self.ctx.set_deadline(until, TimeoutPhase::Idle);
            match self.read() {
                Ok(0) => {
                    self.ctx.keep_connection();
                    break;
                }
                Err(_) => break,
                Ok(_) => {}
            }
        }
        self.ended = true;
    }
}

/// Sends the SSE body of `body` through a parser and hands each event to `f` until `f`
/// says it has seen the end (`Ok(true)`) or the body ends. Returns whether `f` saw the end.
/// Each event is borrowed from the bytes just read where it lies whole within them (see
/// [`sse::EventRef`]): a stream of events is neither copied nor allocated event by event,
/// and none waits in a queue, so a read goes to the parser whole (what the parser holds
/// between reads is the event it is in the middle of). Events come without their
/// `event:` name, which no reader takes.
///
/// The first event stops the first-byte timeout; keep-alive comments (`:` lines) are not
/// events, so a server that sends only comments times out there. After it, any bytes,
/// comments included, count as progress for the idle timeout.
pub(crate) fn for_each_event(
    body: &mut Body,
    max_event_bytes: usize,
    cancel: &CancelToken,
    mut f: impl FnMut(&sse::EventRef<'_>) -> Result<bool, Error>,
) -> Result<bool, Error> {
    // The readers take the data, the id and the retry of an event, never its name.
    let mut parser = sse::Parser::new()
        .max_event_bytes(max_event_bytes)
        .without_names();
    while let Some(bytes) = body.next_chunk()? {
        let mut seen = false;
        let ended = parser.feed(bytes, &mut |event| {
            seen = true;
            f(&event)
        });
        body.seen_event |= seen;
        if ended? {
            body.drain();
            return Ok(true);
        }
        if cancel.is_cancelled() {
            return Err(cancelled(cancel));
        }
    }
    Ok(false)
}
