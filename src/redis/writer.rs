//! The worker's connection and the fenced writes of its runs: the transcript and the event
//! log, in batches, pipelined.
//!
//! One script ([`scripts::WRITE`]) appends a batch: the messages that ended since the last
//! batch to the transcript, and the event lines since then, in the order they happened, as
//! one entry of the event stream (one `XADD` a batch, not one an event), checked against the lease token
//! and numbered, so a worker that lost its lease writes nothing anywhere (neither the
//! transcript nor the event stream), and no batch lands after one that failed. Batches are
//! sent without waiting for their reply (pipelined on the worker's connection, which Redis
//! runs in order); the replies are read when the worker needs to know (before tools run,
//! and before the run is recorded done, which checks the last batch landed). A connection
//! that fails with batches unread is replaced and the unread batches sent again: a batch
//! applied already is recognised by its number and not applied twice.
//!
//! When to send: a reply with tool calls and a tool's end go at once, and the run's end
//! goes with the script that ends the run; the events that open a run, a turn or a prompt
//! wait for what follows at once; a message's end, streaming deltas and the other live
//! events go within [`LINGER`] of the last batch, together with what came meanwhile, or at
//! once when the last batch went longer ago than that (a lingering thread sends what is
//! left when nothing follows). The run's start counts as a batch sent: a run that ends
//! within [`LINGER`] of its start (a fast model) is written whole by its end, in one round
//! trip, and a reply that starts later starts its batches at once.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::conn::{Again, Conn, reply};
use super::wire::Wire;
use super::{Redis, scripts};
use crate::agent::AgentHandle;
use crate::error::Error;
use crate::event::AgentEvent;
use crate::message::Message;

/// How long a live event (a streaming delta) may wait for others to share its batch.
pub(crate) const LINGER: Duration = Duration::from_millis(5);

/// What a command sent ahead answers.
enum Sent {
    /// A batch of writes: 1 applied, 0 lease lost, -1 an earlier batch missing.
    Write(Vec<u8>),
    /// The end of a run ([`scripts::END`], may carry its last batch): sent again like a
    /// write after a break (it applies once). Its reply is returned by [`Link::end`], or,
    /// for an end not waited for ([`Link::end_later`]), kept as a [`Later`] of its run.
    End(Vec<u8>, Option<Box<Ended>>),
    /// A read of the next queue entries: not sent again after a break; its reply (none when
    /// it was lost) handed to the link's `on_read` as soon as it is read.
    Read,
    /// The start of the next conversation's run ([`scripts::BEGIN`]) under this lease
    /// token, sent ahead while the current run goes on: its reply is kept for that run
    /// ([`Link::take_begun`]). Not sent again after a break (the run then sends it itself).
    Begin(String, Instant),
    /// A command whose reply does not matter (`CLIENT UNBLOCK`).
    Ignore,
}

impl Sent {
    /// The command, when it must be sent again after a break.
    fn again(&self) -> Option<&[u8]> {
        match self {
            Sent::Write(packed) | Sent::End(packed, _) => Some(packed),
            Sent::Read | Sent::Begin(..) | Sent::Ignore => None,
        }
    }
}

/// The run whose end was not waited for: what its failure needs to free its lease.
pub(crate) struct Ended {
    pub(crate) conversation: String,
    pub(crate) token: String,
}

/// The reply of an end not waited for ([`Link::end_later`]), or its failure (that of a
/// batch of its run, when one failed), read with a later reply, for the worker to act on.
pub(crate) struct Later {
    pub(crate) run: Box<Ended>,
    pub(crate) reply: Result<::redis::Value, Error>,
}

/// What takes the reply of a read of the queue sent ahead (none when it was lost), as soon
/// as it is read: the entries go into the worker's hands at once, however long the run
/// that read them goes on.
pub(crate) type OnRead = Box<dyn Fn(Option<::redis::Value>) + Send>;

/// The worker's connection, with the commands sent ahead whose replies were not read yet.
pub(crate) struct Link {
    pub(crate) conn: Conn,
    sent: VecDeque<Sent>,
    /// The replies of the [`Sent::Begin`]s read and not taken yet, in order: each one's
    /// token, when it was sent, the reply.
    begun: VecDeque<(String, Instant, ::redis::Value)>,
    /// The replies of ends not waited for, in order.
    later: Vec<Later>,
    on_read: OnRead,
}

impl Link {
    pub(crate) fn new(redis: &Redis, on_read: OnRead) -> Link {
        Link {
            conn: Conn::new(redis, scripts::FOR_WORKER),
            sent: VecDeque::new(),
            begun: VecDeque::new(),
            later: Vec::new(),
            on_read,
        }
    }

    /// Sends `read` (a read of the next queue entries, its reply handed to `on_read`)
    /// and `begins`, starts of runs each under a token of its own ([`scripts::BEGIN`]),
    /// ahead, in one piece: Redis runs them while the current run goes on, and their
    /// replies are read with the next ones (the read's first).
    pub(crate) fn begin_ahead(&mut self, read: Option<Vec<u8>>, begins: Vec<(String, Vec<u8>)>) {
        let mut sent = Vec::new();
        let mut packed = Vec::new();
        if let Some(read) = read {
            sent.push(Sent::Read);
            packed.extend_from_slice(&read);
        }
        for (token, begin) in begins {
            sent.push(Sent::Begin(token, Instant::now()));
            packed.extend_from_slice(&begin);
        }
        if !sent.is_empty() {
            // A failure gave up what was sent ahead with the connection: each run sends its
            // own start.
            let _ = self.send_all(sent, &packed);
        }
    }

    /// The reply of the start sent ahead under `token`, if it came and was sent less than
    /// `fresh` ago (the lease it took still holds then, so what it read is as it is: no
    /// other worker can have written since). Reads the replies sent ahead up to it (those
    /// sent after it, the run before's writes and end, the next start, are read later).
    ///
    /// # Errors
    /// As [`Link::settle`].
    pub(crate) fn take_begun(
        &mut self,
        token: &str,
        fresh: Duration,
    ) -> Result<Option<::redis::Value>, Error> {
        self.read_replies(Until::Begin(token))?;
        let at = self.begun.iter().position(|(t, _, _)| t == token);
        Ok(at
            .and_then(|at| self.begun.remove(at))
            .filter(|(_, sent, _)| sent.elapsed() < fresh)
            .map(|(_, _, reply)| reply))
    }

    /// Reads the replies sent ahead up to that of the first read of the queue among them,
    /// if any (its entries go into the worker's hands).
    ///
    /// # Errors
    /// As [`Link::settle`].
    pub(crate) fn take_read(&mut self) -> Result<(), Error> {
        self.read_replies(Until::Read).map(|_| ())
    }

    /// Forgets the starts sent ahead (another entry is handled first).
    pub(crate) fn forget_begun(&mut self) {
        self.begun.clear();
        for sent in &mut self.sent {
            if let Sent::Begin(token, _) = sent {
                // Its reply, still to come, is not kept.
                token.clear();
            }
        }
    }

    /// Whether a read of the queue was sent whose reply was not read yet.
    pub(crate) fn reading(&self) -> bool {
        self.sent.iter().any(|s| matches!(s, Sent::Read))
    }

    /// The replies of ends not waited for read so far, in order.
    pub(crate) fn take_later(&mut self) -> Vec<Later> {
        std::mem::take(&mut self.later)
    }

    /// Sends `packed` without reading its reply. A failed send replaces the connection and
    /// sends the unread batches again first (each applies at most once).
    fn send(&mut self, sent: Sent, packed: &[u8]) -> Result<(), Error> {
        self.send_all([sent], packed)
    }

    /// Sends `packed`, the commands `sent` one after the other, in one piece.
    fn send_all(
        &mut self,
        sent: impl IntoIterator<Item = Sent>,
        packed: &[u8],
    ) -> Result<(), Error> {
        let unread = self.sent.len();
        self.sent.extend(sent);
        let ok = if unread == 0 {
            // Nothing unread: the connection may be checked first (a PING's reply is read).
            match self.conn.ready() {
                Ok((conn, _)) => conn.send_packed_command(packed).is_ok(),
                Err(e) => {
                    // Nothing went: an end not waited for and a read among them are
                    // answered so (the end's entry is then taken up again at once).
                    self.give_up(&e);
                    return Err(e);
                }
            }
        } else {
            self.conn
                .current()
                .is_some_and(|c| c.send_packed_command(packed).is_ok())
        };
        if !ok {
            self.conn.reset();
            self.resend()?;
        }
        Ok(())
    }

    /// Sends the unread writes again on a new connection (their earlier sends may or may
    /// not have been applied; a batch is applied once). When that fails too, the unread
    /// writes are given up with the connection: the run they belong to fails, and they
    /// must not land later (sent again at the next command, once Redis is back, they
    /// would append to the transcript of a run that was reported broken off).
    fn resend(&mut self) -> Result<(), Error> {
        for _ in self.sent.iter().filter(|s| matches!(s, Sent::Read)) {
            (self.on_read)(None);
        }
        self.sent.retain(|s| s.again().is_some());
        let sent = self.conn.ready().and_then(|(conn, _)| {
            self.sent
                .iter()
                .filter_map(Sent::again)
                .try_for_each(|packed| {
                    conn.send_packed_command(packed)
                        .map_err(|e| super::map_err(&e, false))
                })
        });
        if let Err(e) = &sent {
            self.give_up(e);
            self.conn.reset();
        }
        sent
    }

    /// Forgets every command sent ahead (the connection is gone): the ends not waited for
    /// and the reads among them are answered `error` and nothing.
    fn give_up(&mut self, error: &Error) {
        for sent in self.sent.drain(..) {
            match sent {
                Sent::End(_, Some(run)) => self.later.push(Later {
                    run,
                    reply: Err(error.clone()),
                }),
                Sent::Read => (self.on_read)(None),
                _ => {}
            }
        }
    }

    /// Reads the replies of everything sent ahead. Returns the first failure among the
    /// writes: [`Error::LeaseLost`], an earlier batch missing, or the error Redis answered
    /// (out of memory, say). A connection that breaks meanwhile is replaced once and the
    /// unread writes sent again.
    pub(crate) fn settle(&mut self) -> Result<(), Error> {
        self.read_replies(Until::All).map(|_| ())
    }

    /// Sends the end of a run ([`scripts::END`]) behind the writes sent ahead, without
    /// waiting for their replies first (it checks itself that the last of them landed),
    /// and reads every reply: one round trip for the run's last writes and its end.
    /// Returns the end's reply, or the first failure as [`Link::settle`] does.
    pub(crate) fn end(&mut self, packed: Vec<u8>) -> Result<::redis::Value, Error> {
        self.send(Sent::End(packed.clone(), None), &packed)?;
        self.read_replies(Until::All)?
            .ok_or_else(|| Error::Connection("redis: connection lost".into()))
    }

    /// Sends the end of the run `ended` as [`Link::end`] does, without waiting for its
    /// reply: it is read with a later one, and kept as a [`Later`] (a failure to send
    /// it too). So the next run starts while Redis ends this one.
    pub(crate) fn end_later(&mut self, packed: Vec<u8>, ended: Ended) {
        let sent = Sent::End(packed.clone(), Some(Box::new(ended)));
        // A failure is kept as the end's answer.
        let _ = self.send(sent, &packed);
    }

    /// Reads the replies of what was sent ahead, all of them or `until` one. Returns the
    /// reply of an end waited for, or the first failure among the writes as
    /// [`Link::settle`] does.
    fn read_replies(&mut self, until: Until<'_>) -> Result<Option<::redis::Value>, Error> {
        let awaited = |s: &Sent| match (until, s) {
            (Until::Begin(token), Sent::Begin(t, _)) => t == token,
            (Until::Read, Sent::Read) => true,
            _ => false,
        };
        if until != Until::All && !self.sent.iter().any(awaited) {
            // Read already, or never sent.
            return Ok(None);
        }
        let mut first: Option<Error> = None;
        let mut end = None;
        let mut retried = false;
        while !self.sent.is_empty() {
            let Some(conn) = self.conn.current() else {
                // Lost before its replies were read.
                let error = Error::Connection("redis: connection lost".into());
                if retried {
                    self.give_up(&error);
                    return Err(error);
                }
                retried = true;
                self.resend()?;
                continue;
            };
            let value = match reply::<::redis::Value>(conn) {
                Ok(value) => Ok(value),
                // `NOSCRIPT`: the script cache was emptied, and this command ran nothing
                // (nor did any batch or end behind it, each of which waits for this one):
                // as after a break, they all go again on a connection that loads them.
                Err(e)
                    if e.is_io_error()
                        || e.is_timeout()
                        || e.is_connection_dropped()
                        || scripts::missing(&e) =>
                {
                    let error = self.conn.failed(&e);
                    self.conn.reset();
                    if retried {
                        self.give_up(&error);
                        return Err(error);
                    }
                    retried = true;
                    self.resend()?;
                    continue;
                }
                Err(e) => Err(super::map_err(&e, false)),
            };
            let sent = self
                .sent
                .pop_front()
                .expect("OK because the loop runs while a command is unread");
            let last = awaited(&sent);
            match (sent, value) {
                (Sent::End(_, None), Ok(value)) => end = Some(value),
                (Sent::End(_, Some(run)), reply) => {
                    // A batch of its run that failed is the end's failure.
                    let reply = match first.take() {
                        Some(e) => Err(e),
                        None => reply,
                    };
                    self.later.push(Later { run, reply });
                }
                (Sent::Read, value) => (self.on_read)(value.ok()),
                (Sent::Begin(token, at), value) => {
                    if let (false, Ok(value)) = (token.is_empty(), value) {
                        self.begun.push_back((token, at, value));
                    }
                }
                (Sent::Write(_), Ok(value)) => {
                    let failed = match ::redis::from_redis_value_ref::<i64>(&value).unwrap_or(-1) {
                        1 => None,
                        0 => Some(Error::LeaseLost),
                        _ => Some(Error::Io {
                            kind: std::io::ErrorKind::Other,
                            message: "redis: an earlier write of the run did not land".into(),
                        }),
                    };
                    first = first.or(failed);
                }
                (Sent::Write(_) | Sent::End(_, None), Err(e)) => first = first.or(Some(e)),
                (Sent::Ignore, _) => {}
            }
            if last {
                break;
            }
        }
        first.map_or(Ok(end), Err)
    }

    /// Runs a command whose reply is needed now, after reading the replies sent ahead
    /// (their failure is returned first).
    pub(crate) fn call<T>(
        &mut self,
        again: Again,
        f: impl FnMut(&mut Wire) -> ::redis::RedisResult<T>,
    ) -> Result<T, Error> {
        self.settle()?;
        self.conn.call(again, f)
    }

    /// Sends `CLIENT UNBLOCK id` ahead (its reply is read with the next command).
    pub(crate) fn unblock(&mut self, id: i64) {
        let packed = ::redis::cmd("CLIENT")
            .arg("UNBLOCK")
            .arg(id)
            .get_packed_command();
        // A failure gave up what was sent ahead with the connection.
        let _ = self.send(Sent::Ignore, &packed);
    }
}

/// Which replies [`Link::read_replies`] reads.
#[derive(Clone, Copy, PartialEq)]
enum Until<'a> {
    All,
    /// Up to that of the start sent ahead under this token.
    Begin(&'a str),
    /// Up to that of the first read of the queue.
    Read,
}

/// How an event is sent.
#[derive(PartialEq)]
enum When {
    /// With the next batch, which follows at once.
    Later,
    /// Within [`LINGER`].
    Soon,
    /// At once.
    Now,
}

/// The writes of one run.
pub(crate) struct RunWrites {
    keys: [String; 4],
    token: String,
    /// The number of the last batch sent.
    batch: u64,
    /// The inbox entry to record as `started` with the first user message.
    started: Option<String>,
    /// Whether a user message is among the buffered ops.
    user_buffered: bool,
    events: Option<usize>,
    /// The buffered messages' JSON, in order.
    messages: Vec<Vec<u8>>,
    /// The buffered events' wire lines, each ending in a newline, in order.
    lines: Vec<u8>,
    /// When the oldest buffered live event came.
    due: Option<Instant>,
    /// When the last batch went, or the run started: a live event waits for others only
    /// within [`LINGER`] of it.
    last_send: Instant,
    error: Option<Error>,
    abort: AgentHandle,
}

impl RunWrites {
    /// The writes of a run of `conversation` under the lease `token`. Batches are numbered
    /// after `batch` (the last batch of this lease so far).
    pub(crate) fn new(
        redis: &Redis,
        conversation: &str,
        token: &str,
        batch: u64,
        started: Option<String>,
        events: Option<usize>,
        abort: AgentHandle,
    ) -> RunWrites {
        RunWrites {
            keys: ["lease", "messages", "events", "meta"].map(|w| redis.key(conversation, w)),
            token: token.into(),
            batch,
            started,
            user_buffered: false,
            events,
            messages: Vec::new(),
            lines: Vec::new(),
            due: None,
            // A run that ends within `LINGER` of its start (a fast model) goes whole with
            // its end; a reply that starts later starts its batches at once, as before.
            last_send: Instant::now(),
            error: None,
            abort,
        }
    }

    fn push(&mut self, event: &AgentEvent) -> When {
        let mut when = match event {
            // The end of a run goes with the run's end (`scripts::END`), which follows at
            // once, or with the next run's first batch.
            AgentEvent::AgentStart | AgentEvent::TurnStart { .. } | AgentEvent::AgentEnd { .. } => {
                When::Later
            }
            // A reply with tool calls: the tools run once it landed.
            AgentEvent::MessageEnd { message }
                if message
                    .as_assistant()
                    .is_some_and(|m| m.tool_calls().next().is_some()) =>
            {
                When::Now
            }
            // A prompt, a steering message or a tool result: the model call follows, whose
            // reply (or first delta) takes it along. A final reply: the run's end follows,
            // which takes it along. If neither comes at once, within `LINGER`.
            AgentEvent::MessageEnd { .. } => When::Soon,
            AgentEvent::MessageStart { message } if !matches!(**message, Message::Assistant(_)) => {
                When::Later
            }
            AgentEvent::MessageStart { .. }
            | AgentEvent::MessageUpdate { .. }
            | AgentEvent::ToolStart { .. }
            | AgentEvent::ToolExecute { .. }
            | AgentEvent::ToolUpdate { .. }
            | AgentEvent::TurnEnd { .. } => When::Soon,
            _ => When::Now,
        };
        if let AgentEvent::MessageEnd { message } = event {
            let json =
                serde_json::to_vec(&**message).expect("OK because a message always serializes");
            self.messages.push(json);
            self.user_buffered |= matches!(**message, Message::User(_));
        } else if self.events.is_none() {
            return When::Later;
        }
        if self.events.is_some() {
            crate::wire::codec::write_event(&mut self.lines, event);
        }
        if when == When::Soon && matches!(event, AgentEvent::MessageEnd { .. }) {
            // A message waits at most `LINGER` from its end, whenever the last batch went.
            let due = Instant::now() + LINGER;
            self.due = Some(self.due.map_or(due, |d| d.min(due)));
        } else if when == When::Soon {
            if self.last_send.elapsed() >= LINGER {
                when = When::Now;
            } else if self.due.is_none() {
                self.due = Some(self.last_send + LINGER);
            }
        }
        when
    }

    /// What is buffered, as the batch numbered next.
    fn take(&mut self) -> Option<Batch> {
        if self.messages.is_empty() && self.lines.is_empty() {
            return None;
        }
        self.batch += 1;
        // The prompt's entry goes with the first user message: not with a tool result the
        // agent synthesized before it for calls a dead worker left unanswered.
        let started = if self.user_buffered {
            self.started.take().unwrap_or_default()
        } else {
            String::new()
        };
        self.user_buffered = false;
        self.due = None;
        self.last_send = Instant::now();
        Some(Batch {
            number: self.batch,
            cap: self.events.unwrap_or(1),
            started,
            messages: std::mem::take(&mut self.messages),
            lines: std::mem::take(&mut self.lines),
        })
    }

    /// The batch command ([`scripts::WRITE`]) of what is buffered, numbered next.
    fn batch(&mut self) -> Option<Vec<u8>> {
        let batch = self.take()?;
        let keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        let mut cmd = scripts::eval(&scripts::WRITE, &keys);
        cmd.arg(&self.token).arg(batch.number);
        batch.args(&mut cmd);
        Some(cmd.get_packed_command())
    }

    /// The value `meta.wrote` holds once every batch sent landed (`''` when none was).
    pub(crate) fn expected(&self) -> String {
        if self.batch == 0 {
            String::new()
        } else {
            format!("{} {}", self.token, self.batch)
        }
    }

    pub(crate) fn batches(&self) -> u64 {
        self.batch
    }
}

/// A run's batch of writes, numbered.
pub(crate) struct Batch {
    number: u64,
    cap: usize,
    started: String,
    messages: Vec<Vec<u8>>,
    /// The events' wire lines, each ending in a newline: one entry of the event stream.
    lines: Vec<u8>,
}

impl Batch {
    /// Appends the batch's arguments after its number, as [`scripts::WRITE`] and
    /// [`scripts::END`] take them: the event stream cap, the inbox entry whose prompt it
    /// stores (or ''), the event lines (or ''), then the messages.
    pub(crate) fn args(self, cmd: &mut ::redis::Cmd) {
        cmd.arg(self.cap).arg(self.started).arg(self.lines);
        for message in self.messages {
            cmd.arg(message);
        }
    }

    pub(crate) fn number(&self) -> u64 {
        self.number
    }
}

/// The worker's link and its current run's writes, shared by the run thread (the listener)
/// and the lingering thread.
pub(crate) struct Writer {
    state: Mutex<State>,
    wake: Condvar,
}

pub(crate) struct State {
    pub(crate) link: Link,
    pub(crate) run: Option<RunWrites>,
    /// Until when the lingering thread sleeps, while it does: it is woken only for a batch
    /// due before then (a busy worker's runs, each with a prompt due within [`LINGER`],
    /// wake it about once per [`LINGER`], not once per run).
    asleep_until: Option<Instant>,
}

impl Writer {
    pub(crate) fn new(redis: &Redis, on_read: OnRead) -> Arc<Writer> {
        let writer = Arc::new(Writer {
            state: Mutex::new(State {
                link: Link::new(redis, on_read),
                run: None,
                asleep_until: None,
            }),
            wake: Condvar::new(),
        });
        let weak = Arc::downgrade(&writer);
        let _ = std::thread::Builder::new()
            .name("pagent-redis-linger".into())
            .spawn(move || linger(&weak));
        writer
    }

    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// A listener that buffers the run's events and sends them as [`RunWrites`] says.
    pub(crate) fn listener(self: &Arc<Writer>) -> impl Fn(&AgentEvent) + Send + Sync + 'static {
        let this = self.clone();
        move |event| {
            let mut guard = this.state.lock();
            let state = &mut *guard;
            let Some(run) = &mut state.run else { return };
            if run.error.is_some() {
                return;
            }
            let due = run.due;
            let when = run.push(event);
            let tools = matches!(event, AgentEvent::MessageEnd { message }
                if message.as_assistant().is_some_and(|m| m.tool_calls().next().is_some()));
            match when {
                When::Later => {}
                // The lingering thread sleeps until the batch is due: woken only when it
                // became due sooner than it wakes anyway (a wake per streaming delta, or
                // per run, would cost a thread switch each, on the run thread's path).
                When::Soon if run.due == due => {}
                When::Soon => {
                    if let (Some(until), Some(due)) = (state.asleep_until, run.due)
                        && until > due
                    {
                        this.wake.notify_one();
                    }
                }
                When::Now => {
                    let result = send_batch(state).and_then(|()| {
                        // Tools have effects: they run only once the lease is known to be
                        // ours at their reply's end.
                        if tools { state.link.settle() } else { Ok(()) }
                    });
                    if let Err(e) = result {
                        fail(state, e);
                    }
                }
            }
        }
    }
}

/// Sends the buffered batch of the current run, if any.
pub(crate) fn send_batch(state: &mut State) -> Result<(), Error> {
    let Some(run) = &mut state.run else {
        return Ok(());
    };
    match run.batch() {
        Some(packed) => state.link.send(Sent::Write(packed.clone()), &packed),
        None => Ok(()),
    }
}

/// Records the run's first write failure and aborts the run (it cannot be stored).
pub(crate) fn fail(state: &mut State, e: Error) {
    if let Some(run) = &mut state.run
        && run.error.is_none()
    {
        run.messages.clear();
        run.lines.clear();
        run.abort.abort();
        run.error = Some(e);
    }
}

/// Takes the current run's writes out; returns them (their first failure in `error`) and,
/// when `hold`, what was still buffered as the run's last batch, to go with the run's end
/// ([`scripts::END`]) instead of a batch of its own. Without `hold` that is sent now.
pub(crate) fn finish(state: &mut State, hold: bool) -> Option<(RunWrites, Option<Batch>)> {
    let mut held = None;
    if hold {
        if let Some(run) = &mut state.run
            && run.error.is_none()
        {
            held = run.take();
        }
    } else if let Err(e) = send_batch(state) {
        fail(state, e);
    }
    state.run.take().map(|run| (run, held))
}

impl RunWrites {
    /// The first failure of the run's writes seen so far.
    pub(crate) fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }
}

/// Sends the live events that waited [`LINGER`] with nothing after them.
fn linger(writer: &Weak<Writer>) {
    loop {
        let Some(writer) = writer.upgrade() else {
            return;
        };
        let mut state = writer.state.lock();
        let due = state.run.as_ref().and_then(|r| r.due);
        match due {
            Some(due) if due <= Instant::now() => {
                if let Err(e) = send_batch(&mut state) {
                    fail(&mut state, e);
                }
            }
            Some(due) => {
                state.asleep_until = Some(due);
                let _ = writer.wake.wait_until(&mut state, due);
                state.asleep_until = None;
            }
            None => {
                let until = Instant::now() + Duration::from_millis(200);
                state.asleep_until = Some(until);
                let _ = writer.wake.wait_until(&mut state, until);
                state.asleep_until = None;
            }
        }
    }
}
