//! Live events: each event's wire line in a capped stream per conversation, and a remote
//! mirror that follows it.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Redis;
use super::store::{with_conn, with_conn_read};
use crate::error::{Error, TimeoutPhase};
use crate::event::AgentEvent;
use crate::state::State;
use crate::wire::{Decoder, Mirror, encode_event_line};

/// How many entries one read of a [`RemoteMirror`] asks for.
const READ_COUNT: usize = 256;

/// A listener that appends each event's native [wire](crate::wire) line to the
/// conversation's event stream (`<prefix>:{<conversation>}:events`, field `line`), capped at
/// [`EventLog::max_len`] entries.
///
/// One `XADD` per event, sent on the run thread before the next listener runs, so a
/// [`RemoteMirror`] sees the events in order and as they happen. A cheap `Clone` handle;
/// clones share the connection and the error. The first failure makes it silent from then
/// on (a follower never sees a stream with a hole in the middle): check
/// [`EventLog::error`].
///
/// It does not reconnect and go on writing after a failure (a Redis restart in the middle
/// of a run): the events lost meanwhile (a `MessageEnd`, a `ToolEnd`) would be missing from
/// every follower's fold with nothing to tell it, so a [`RemoteMirror`] would end that run
/// with a state that differs from the agent's; and while Redis is away each event would
/// block the run for a connection attempt. Use one log per run instead, as a
/// [`Worker`](super::Worker) does: a follower sees the failed run break off without its
/// `AgentEnd`, and the run that the worker resumes from the stored transcript after the
/// restart writes to a new log, whose `AgentEnd` [`RemoteMirror::follow_run`] returns
/// (its state equals the agent's when the follower had folded in every message stored
/// before the failure; one that Redis stored in the transcript but lost from the event
/// stream is in [`Store::load`](super::Store::load), which a follower that must be sure
/// reads after the run).
#[derive(Clone)]
pub struct EventLog {
    inner: Arc<Mutex<LogInner>>,
}

struct LogInner {
    redis: Redis,
    conn: Option<::redis::Connection>,
    key: String,
    max_len: usize,
    error: Option<Error>,
}

impl fmt::Debug for EventLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("EventLog")
            .field("key", &inner.key)
            .field("max_len", &inner.max_len)
            .field("error", &inner.error)
            .finish_non_exhaustive()
    }
}

impl EventLog {
    /// The event log of `conversation`. Does not connect (the first event does).
    pub fn new(redis: &Redis, conversation: &str) -> EventLog {
        EventLog {
            inner: Arc::new(Mutex::new(LogInner {
                redis: redis.clone(),
                conn: None,
                key: redis.key(conversation, "events"),
                max_len: 10_000,
                error: None,
            })),
        }
    }

    /// Keeps about the last `entries` events (`XADD .. MAXLEN ~ entries`: Redis trims in
    /// whole blocks, so a few more may stay). A follower further behind than that misses
    /// the oldest. Defaults to 10,000.
    #[must_use]
    pub fn max_len(self, entries: usize) -> EventLog {
        self.inner.lock().max_len = entries.max(1);
        self
    }

    /// Uses `conn` (a connection the worker keeps between runs) instead of opening one.
    pub(crate) fn set_conn(&self, conn: Option<::redis::Connection>) {
        self.inner.lock().conn = conn;
    }

    /// The connection, for the next run (none after a failure).
    pub(crate) fn take_conn(&self) -> Option<::redis::Connection> {
        self.inner.lock().conn.take()
    }

    /// Appends `event`'s line, blocking for one round trip; returns the entry id.
    ///
    /// # Errors
    /// This write's error or an earlier one: [`Error::Connection`] or [`Error::Timeout`]
    /// when Redis cannot be reached or does not answer in time, [`Error::Io`] when it
    /// answers with an error.
    pub fn write_event(&self, event: &AgentEvent) -> Result<String, Error> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if let Some(e) = &inner.error {
            return Err(e.clone());
        }
        let line = encode_event_line(event);
        let result = with_conn(&inner.redis, &mut inner.conn, |c| {
            ::redis::cmd("XADD")
                .arg(&inner.key)
                .arg("MAXLEN")
                .arg("~")
                .arg(inner.max_len)
                .arg("*")
                .arg("line")
                .arg(&line)
                .query::<String>(c)
        });
        if let Err(e) = &result {
            inner.error = Some(e.clone());
        }
        result
    }

    /// A listener that appends every event; errors are kept in [`EventLog::error`].
    pub fn listener(&self) -> impl Fn(&AgentEvent) + Send + Sync + 'static {
        let this = self.clone();
        move |event| {
            let _ = this.write_event(event);
        }
    }

    /// The first write error, if writing failed.
    pub fn error(&self) -> Option<Error> {
        self.inner.lock().error.clone()
    }
}

/// Follows a conversation's event stream from anywhere and rebuilds the agent's snapshots
/// with [`crate::wire::Mirror`]: after each event, [`RemoteMirror::state`] is the snapshot
/// the agent published for it (see the `# Consistency` of [`crate::wire::Mirror`] for what
/// events do not carry, such as the settings; compare with [`State::timeline`]).
///
/// It reads with `XREAD BLOCK`, remembers the id of the last entry it folded in
/// ([`RemoteMirror::last_id`]) and goes on from there: after a failed read (Redis
/// unreachable, restarted) the next call connects again and resumes where it stopped, so
/// no event is folded twice or skipped (as long as the stream still holds it: see
/// [`EventLog::max_len`], and keep Redis's persistence on for a restart).
///
/// ```no_run
/// use pagent::redis::{Redis, RemoteMirror};
/// use std::time::Duration;
///
/// let mut mirror = RemoteMirror::new(&Redis::open("redis://127.0.0.1:6379/")?, "alice");
/// let end = mirror.follow_run(Duration::from_secs(60))?;
/// println!("{} messages", end.messages.len());
/// # Ok::<(), pagent::Error>(())
/// ```
pub struct RemoteMirror {
    redis: Redis,
    conn: Option<::redis::Connection>,
    key: String,
    mirror: Mirror,
    last_id: String,
    buffered: VecDeque<(String, String)>,
}

impl fmt::Debug for RemoteMirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteMirror")
            .field("key", &self.key)
            .field("last_id", &self.last_id)
            .finish_non_exhaustive()
    }
}

impl RemoteMirror {
    /// A mirror of `conversation` that starts at the oldest event the stream holds, from
    /// `State::default()`. Does not connect (the first read does).
    pub fn new(redis: &Redis, conversation: &str) -> RemoteMirror {
        RemoteMirror {
            redis: redis.clone(),
            conn: None,
            key: redis.key(conversation, "events"),
            // The log holds native lines only: one event each.
            mirror: Mirror::new().decoder(Decoder::new()),
            last_id: "0-0".into(),
            buffered: VecDeque::new(),
        }
    }

    /// Starts from `state` (the agent's snapshot, or a state built from the stored
    /// transcript) instead of `State::default()`.
    #[must_use]
    pub fn from_state(mut self, state: State) -> RemoteMirror {
        self.mirror = Mirror::from_state(state).decoder(Decoder::new());
        self
    }

    /// Reads only the entries after `id` (a [`RemoteMirror::last_id`] saved earlier, or
    /// `"$"` for only what is appended from now on). Defaults to `"0-0"`: the whole stream.
    #[must_use]
    pub fn after(mut self, id: impl Into<String>) -> RemoteMirror {
        self.last_id = id.into();
        self
    }

    /// The mirrored state after the last event folded in.
    pub fn state(&self) -> &Arc<State> {
        self.mirror.state()
    }

    /// The id of the last entry folded in (`"0-0"` or what [`RemoteMirror::after`] set
    /// before the first).
    pub fn last_id(&self) -> &str {
        &self.last_id
    }

    /// The next event, folded in: waits up to `wait` for one to be appended. `Ok(None)`
    /// when none came in time.
    ///
    /// Blocks the current thread up to `wait` plus [`Redis::timeout`].
    ///
    /// # Errors
    /// [`Error::Connection`] or [`Error::Timeout`] when Redis cannot be reached or does not
    /// answer in time (the next call connects again and resumes after
    /// [`RemoteMirror::last_id`]); [`Error::Io`] when it answers with an error;
    /// [`Error::Wire`] for an entry that does not decode (it is skipped: the next call goes
    /// on after it).
    pub fn next_event(&mut self, wait: Duration) -> Result<Option<AgentEvent>, Error> {
        if self.buffered.is_empty() {
            self.read(wait)?;
        }
        let Some((id, line)) = self.buffered.pop_front() else {
            return Ok(None);
        };
        self.last_id = id;
        Ok(self.mirror.apply_line(&line)?.pop())
    }

    fn read(&mut self, wait: Duration) -> Result<(), Error> {
        let block = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let timeout = self.redis.call_timeout() + wait;
        let (key, last) = (&self.key, &self.last_id);
        let reply: Option<::redis::streams::StreamReadReply> =
            with_conn_read(&self.redis, &mut self.conn, |c| {
                c.set_read_timeout(Some(timeout))?;
                ::redis::cmd("XREAD")
                    .arg("COUNT")
                    .arg(READ_COUNT)
                    .arg("BLOCK")
                    .arg(block)
                    .arg("STREAMS")
                    .arg(key)
                    .arg(last)
                    .query(c)
            })?;
        for stream in reply.into_iter().flat_map(|r| r.keys) {
            for entry in stream.ids {
                let line: String = entry.get("line").unwrap_or_default();
                self.buffered.push_back((entry.id, line));
            }
        }
        Ok(())
    }

    /// Follows until the next `AgentEnd` and returns the state after it, going on through
    /// connection failures (a Redis restart) by connecting again, until `limit` has passed.
    ///
    /// Blocks the current thread until an `AgentEnd` arrives or `limit` has passed.
    ///
    /// # Errors
    /// [`Error::Timeout`] (phase `Run`) when no `AgentEnd` came within `limit`;
    /// [`Error::Io`] when Redis answers with an error. Entries that do not decode are
    /// skipped.
    pub fn follow_run(&mut self, limit: Duration) -> Result<Arc<State>, Error> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(TimeoutPhase::Run));
            }
            match self.next_event(left.min(Duration::from_millis(500))) {
                Ok(Some(AgentEvent::AgentEnd { .. })) => return Ok(self.state().clone()),
                Ok(_) | Err(Error::Wire(_)) => {}
                Err(Error::Connection(_) | Error::Timeout(_)) => {
                    // Redis is away (restarting): try again shortly, within the limit.
                    std::thread::sleep(left.min(Duration::from_millis(100)));
                }
                Err(e) => return Err(e),
            }
        }
    }
}
