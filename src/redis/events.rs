//! Live events: each event's wire line in a capped stream per conversation, and a remote
//! mirror that follows it.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::conn::{Again, Conn};
use super::{Redis, check_name, scripts};
use crate::error::{Error, TimeoutPhase};
use crate::event::AgentEvent;
use crate::state::State;
use crate::wire::codec::write_event;
use crate::wire::{Decoder, Mirror};

/// How many entries one read of a [`RemoteMirror`] asks for.
const READ_COUNT: usize = 256;

/// A listener that appends each event's native [wire](crate::wire) line to the
/// conversation's event stream (`<prefix>:{<conversation>}:events`, field `lines`, the line
/// and its `\n`), capped at [`EventLog::max_len`] entries.
///
/// One `XADD` per event, sent on the run thread before the next listener runs, so a
/// [`RemoteMirror`] sees the events in order and as they happen. (A
/// [`Worker`](super::Worker) writes its runs' events its own way, into the same stream: in
/// batches, together with the transcript, fenced by its lease, each batch's lines in one
/// entry; see the module docs.) A cheap `Clone` handle;
/// clones share the connection and the error. The first failure makes it silent from then
/// on (a follower never sees a stream with a hole in the middle): check
/// [`EventLog::error`].
///
/// It does not reconnect and go on writing after a failure (a Redis restart in the middle
/// of a run): the events lost meanwhile (a `MessageEnd`, a `ToolEnd`) would be missing from
/// every follower's fold with nothing to tell it, so a [`RemoteMirror`] would end that run
/// with a state that differs from the agent's; and while Redis is away each event would
/// block the run for a connection attempt. Use one log per run instead, as a
/// [`Worker`](super::Worker) does with its own: a follower sees the failed run break off without its
/// `AgentEnd`, and the run that the worker resumes from the stored transcript after the
/// restart writes to a new log, whose `AgentEnd` [`RemoteMirror::follow_run`] returns
/// (its state equals the agent's when the follower had folded in every message stored
/// before the failure; one that Redis stored in the transcript but lost from the event
/// stream is in [`Store::load`](super::Store::load), which a follower that must be sure
/// reads after the run).
#[derive(Clone)]
pub struct EventLog {
    inner: Arc<Mutex<LogInner>>,
    /// Each handle's own: setting it on a clone leaves the original as it was.
    max_len: usize,
}

struct LogInner {
    conn: Conn,
    key: String,
    error: Option<Error>,
}

impl fmt::Debug for EventLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("EventLog")
            .field("key", &inner.key)
            .field("max_len", &self.max_len)
            .field("error", &inner.error)
            .finish_non_exhaustive()
    }
}

impl EventLog {
    /// The event log of `conversation`. Does not connect (the first event does). A name with
    /// `{` or `}` makes every write fail with [`Error::Config`].
    pub fn new(redis: &Redis, conversation: &str) -> EventLog {
        EventLog {
            inner: Arc::new(Mutex::new(LogInner {
                conn: Conn::new(redis, &[]),
                key: redis.key(conversation, "events"),
                error: check_name(conversation).err(),
            })),
            max_len: 10_000,
        }
    }

    /// Keeps about the last `entries` events (`XADD .. MAXLEN ~ entries`: Redis trims in
    /// whole blocks, so a few more may stay). A follower further behind than that gets
    /// [`Error::Behind`] (see [`RemoteMirror::resync`]). Defaults to 10,000. Changes only
    /// this handle (and the listeners made from it later), not its clones.
    #[must_use]
    pub fn max_len(mut self, entries: usize) -> EventLog {
        self.max_len = entries.max(1);
        self
    }

    /// Appends `event`'s line, blocking for one round trip; returns the entry id.
    ///
    /// # Errors
    /// This write's error or an earlier one: [`Error::Config`] for a conversation name with
    /// `{` or `}`; [`Error::Connection`] or [`Error::Timeout`] when Redis cannot be reached
    /// or does not answer in time, [`Error::Io`] when it answers with an error.
    pub fn write_event(&self, event: &AgentEvent) -> Result<String, Error> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if let Some(e) = &inner.error {
            return Err(e.clone());
        }
        let mut line = Vec::new();
        write_event(&mut line, event);
        let key = &inner.key;
        let result = inner.conn.call(Again::Unsafe, |c| {
            ::redis::cmd("XADD")
                .arg(key)
                .arg("MAXLEN")
                .arg("~")
                .arg(self.max_len)
                .arg("*")
                .arg("lines")
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
/// It remembers the id of the last entry it folded in ([`RemoteMirror::last_id`]) and goes
/// on from there: after a failed read (Redis unreachable, restarted) the next call connects
/// again and resumes where it stopped, so no event is folded twice or skipped.
///
/// # Consistency
/// A mirror never folds a stream with a hole. Each read checks, in the same script as the
/// read, that the stream still holds everything after [`RemoteMirror::last_id`]: when the
/// stream was trimmed past it (the mirror fell further behind than [`EventLog::max_len`])
/// or no longer holds it although it never deleted it (Redis lost its data, or the
/// conversation was deleted and started again), the read returns [`Error::Behind`] (with
/// how many entries were missed, when the mirror knows its place in the stream) and the
/// state stays as it was; [`RemoteMirror::resync`] then starts again from the store.
///
/// ```no_run
/// use pagent::redis::{Redis, RemoteMirror};
/// use pagent::Error;
/// use std::time::Duration;
///
/// let mut mirror = RemoteMirror::new(&Redis::open("redis://127.0.0.1:6379/")?, "alice");
/// let end = match mirror.follow_run(Duration::from_secs(60)) {
///     Err(Error::Behind { .. }) => {
///         // Start again from the stored transcript, and follow from there.
///         mirror.resync()?;
///         mirror.follow_run(Duration::from_secs(60))?
///     }
///     other => other?,
/// };
/// println!("{} messages", end.messages.len());
/// # Ok::<(), pagent::Error>(())
/// ```
pub struct RemoteMirror {
    conn: Conn,
    messages: String,
    key: String,
    name: Result<(), Error>,
    mirror: Mirror,
    last_id: String,
    /// How many entries the stream had received up to and including `last_id`, once known.
    offset: Option<u64>,
    /// After a resync in the middle of a reply: its deltas are skipped until the next
    /// message starts (the mirror never saw the reply's start).
    skip_deltas: bool,
    buffered: VecDeque<Line>,
}

/// An event line read and not folded in yet, with its place in the stream.
struct Line {
    /// The entry it is in.
    entry: Arc<str>,
    /// Its number among the entry's lines, from 1.
    index: usize,
    /// Whether it is the entry's last line.
    last: bool,
    /// The line ('' for an entry with none).
    text: String,
}

impl fmt::Debug for RemoteMirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteMirror")
            .field("key", &self.key)
            .field("last_id", &self.last_id)
            .finish_non_exhaustive()
    }
}

/// What one checked read found.
struct Read {
    exists: bool,
    length: u64,
    first: String,
    max_deleted: String,
    added: u64,
    present: bool,
    entries: Vec<(String, String)>,
}

/// The event lines of a stream entry: its field `lines` (one or more lines, each ending in a
/// newline), or `line` (one line without it, as this module wrote them before 0.6).
fn entry_lines(entry: &::redis::streams::StreamId) -> String {
    entry
        .get("lines")
        .or_else(|| entry.get::<String>("line"))
        .unwrap_or_default()
}

impl RemoteMirror {
    /// A mirror of `conversation` that starts at the oldest event the stream holds, from
    /// `State::default()`. Does not connect (the first read does).
    pub fn new(redis: &Redis, conversation: &str) -> RemoteMirror {
        RemoteMirror {
            conn: Conn::new(redis, scripts::FOR_MIRROR),
            messages: redis.key(conversation, "messages"),
            key: redis.key(conversation, "events"),
            name: check_name(conversation),
            // The log holds native lines only: one event each.
            mirror: Mirror::new().decoder(Decoder::new()),
            last_id: "0-0".into(),
            offset: Some(0),
            skip_deltas: false,
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

    /// Reads only the events after `id` (a [`RemoteMirror::last_id`] saved earlier, which
    /// may name a place inside an entry, or `"$"` for only what is appended from now on:
    /// resolved at the first read to the stream's last entry then, once). Defaults to
    /// `"0-0"`: the whole stream.
    #[must_use]
    pub fn after(mut self, id: impl Into<String>) -> RemoteMirror {
        self.last_id = id.into();
        self.offset = (self.last_id == "0-0").then_some(0);
        self
    }

    /// The mirrored state after the last event folded in.
    pub fn state(&self) -> &Arc<State> {
        self.mirror.state()
    }

    /// Where the mirror is: the id of the last entry folded in (`"0-0"` or what
    /// [`RemoteMirror::after`] set before the first; `"$"` resolved at the first read), or
    /// `"<id>#<k>"` while only the first `k` events of entry `<id>` are (an entry a
    /// [`Worker`](super::Worker) writes holds a batch of events). Give it to
    /// [`RemoteMirror::after`], with [`RemoteMirror::from_state`] and the state saved with
    /// it, to go on from the next event.
    pub fn last_id(&self) -> &str {
        &self.last_id
    }

    /// Buffers the lines of `entries` (read after or, when part of it was folded, from the
    /// entry [`place`] names), leaving out the lines already folded in.
    fn buffer(&mut self, entries: impl IntoIterator<Item = (String, String)>) {
        let (entry, folded) = place(&self.last_id);
        let (partial, mut skip) = (entry.to_owned(), folded);
        for (id, text) in entries {
            let skip = if id == partial {
                std::mem::take(&mut skip)
            } else {
                0
            };
            let entry: Arc<str> = id.into();
            let count = text.split('\n').filter(|l| !l.is_empty()).count();
            let before = self.buffered.len();
            for (i, line) in text.split('\n').filter(|l| !l.is_empty()).enumerate() {
                if i >= skip {
                    self.buffered.push_back(Line {
                        entry: entry.clone(),
                        index: i + 1,
                        last: i + 1 == count,
                        text: line.to_owned(),
                    });
                }
            }
            if self.buffered.len() == before {
                // Nothing to fold in: the entry is passed over all the same.
                self.buffered.push_back(Line {
                    entry,
                    index: count,
                    last: true,
                    text: String::new(),
                });
            }
        }
    }

    /// The next event, folded in: waits up to `wait` for one to be appended. `Ok(None)`
    /// when none came in time.
    ///
    /// Blocks the current thread up to `wait` plus [`Redis::timeout`].
    ///
    /// # Errors
    /// [`Error::Behind`] when the stream no longer holds entries after
    /// [`RemoteMirror::last_id`] that this mirror did not read (see the type's
    /// `# Consistency`; [`RemoteMirror::resync`] cures it); [`Error::Config`] for a
    /// conversation name with `{` or `}`; [`Error::Connection`] or [`Error::Timeout`] when
    /// Redis cannot be reached or does not answer in time (the next call connects again and
    /// resumes after [`RemoteMirror::last_id`]); [`Error::Io`] when it answers with an
    /// error; [`Error::Wire`] for an entry that does not decode (it is skipped: the next
    /// call goes on after it).
    pub fn next_event(&mut self, wait: Duration) -> Result<Option<AgentEvent>, Error> {
        self.name.clone()?;
        let deadline = Instant::now() + wait;
        loop {
            if self.buffered.is_empty() {
                self.read(deadline.saturating_duration_since(Instant::now()))?;
            }
            let Some(Line {
                entry,
                index,
                last,
                text: line,
            }) = self.buffered.pop_front()
            else {
                return Ok(None);
            };
            if last {
                self.last_id = entry.to_string();
                self.offset = self.offset.map(|n| n + 1);
            } else {
                self.last_id = format!("{entry}#{index}");
            }
            if line.is_empty() {
                continue;
            }
            if self.skip_deltas {
                // A delta of the reply a resync came in the middle of: not folded, and not
                // an answer either (`None` means nothing came in time): on to the next,
                // within the wait.
                if line.contains(r#""method":"MessageUpdate""#) {
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    continue;
                }
                if line.contains(r#""method":"MessageStart""#)
                    || line.contains(r#""method":"AgentEnd""#)
                {
                    self.skip_deltas = false;
                }
            }
            return Ok(self.mirror.apply_line(&line)?.pop());
        }
    }

    fn read(&mut self, wait: Duration) -> Result<(), Error> {
        if self.last_id == "$" {
            let (last, added, _) = self.snapshot(false)?;
            self.last_id = last;
            self.offset = Some(added);
        }
        let read = self.checked_read()?;
        if read.exists {
            self.check(&read)?;
        } else if place(&self.last_id).0 != "0-0" {
            return Err(Error::Behind {
                missed: None,
                message: format!(
                    "the stream is gone (deleted, evicted or lost with the server's data), \
                     the mirror read up to {}",
                    self.last_id
                ),
            });
        }
        if !read.entries.is_empty() {
            if read.entries.len() < READ_COUNT {
                // The read reached the stream's end: the mirror knows its place.
                self.offset = Some(read.added - read.entries.len() as u64);
            }
            self.buffer(read.entries);
            return Ok(());
        }
        // Nothing after `last_id` yet: wait for what comes next (appended after the check,
        // so nothing can be missing before it).
        let block = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let timeout = self.conn.redis().call_timeout() + wait;
        let (key, last) = (&self.key, place(&self.last_id).0);
        let reply: Option<::redis::streams::StreamReadReply> =
            self.conn.call(Again::Safe, |c| {
                c.set_read_timeout(Some(timeout))?;
                let reply = ::redis::cmd("XREAD")
                    .arg("COUNT")
                    .arg(READ_COUNT)
                    .arg("BLOCK")
                    .arg(block)
                    .arg("STREAMS")
                    .arg(key)
                    .arg(last)
                    .query(c);
                c.set_read_timeout(Some(timeout - wait))?;
                reply
            })?;
        let entries = reply
            .into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|stream| stream.ids)
            .map(|e| {
                let lines = entry_lines(&e);
                (e.id, lines)
            });
        self.buffer(entries.collect::<Vec<_>>());
        Ok(())
    }

    /// The entries after `last_id`, read with what tells whether some are missing.
    fn checked_read(&mut self) -> Result<Read, Error> {
        let (last, folded) = place(&self.last_id);
        let (key, from) = (&self.key, if folded > 0 { "1" } else { "0" });
        let reply: Vec<::redis::Value> = self.conn.call(Again::Safe, |c| {
            scripts::eval(&scripts::READ, &[key])
                .arg(last)
                .arg(READ_COUNT)
                .arg(from)
                .query(c)
        })?;
        let get = |i: usize| reply.get(i);
        let int = |i: usize| {
            get(i)
                .and_then(|v| ::redis::from_redis_value_ref::<u64>(v).ok())
                .unwrap_or(0)
        };
        let text = |i: usize| {
            get(i)
                .and_then(|v| ::redis::from_redis_value_ref::<String>(v).ok())
                .unwrap_or_else(|| "0-0".into())
        };
        let range: ::redis::streams::StreamRangeReply = get(7)
            .and_then(|v| ::redis::from_redis_value_ref(v).ok())
            .unwrap_or_default();
        Ok(Read {
            exists: int(0) == 1,
            length: int(1),
            first: text(2),
            max_deleted: text(3),
            added: int(4),
            present: int(6) == 1,
            entries: range
                .ids
                .into_iter()
                .map(|e| {
                    let lines = entry_lines(&e);
                    (e.id, lines)
                })
                .collect(),
        })
    }

    /// [`Error::Behind`] when the stream lost entries after `last_id`. A stream is only
    /// ever trimmed from its start, so what was deleted is counted by `entries-added` minus
    /// `length`, and compared with the mirror's place in it.
    fn check(&self, read: &Read) -> Result<(), Error> {
        let deleted = read.added.saturating_sub(read.length);
        let holds = format!(
            "the stream holds {} entries from {} (of {} appended), the mirror read up to {}",
            read.length, read.first, read.added, self.last_id
        );
        let (entry, folded) = place(&self.last_id);
        let at = if entry == "0-0" { Some(0) } else { self.offset };
        let xdel = parse_id(&read.max_deleted) > parse_id(entry);
        if read.present && !xdel {
            return Ok(());
        }
        // Part of the entry folded in: the rest of it is missed when it is gone.
        let partial = u64::from(folded > 0);
        match at {
            Some(at) if deleted < at + partial && !read.present => Err(Error::Behind {
                missed: None,
                message: format!("{holds}, which the stream lost with its data"),
            }),
            Some(at) if deleted > at || xdel => Err(Error::Behind {
                missed: Some(deleted - at.min(deleted)),
                message: format!("{holds}; the entries before {} were trimmed", read.first),
            }),
            Some(_) => Ok(()),
            None => Err(Error::Behind {
                missed: None,
                message: format!("{holds}, which the stream no longer holds"),
            }),
        }
    }

    /// The stream's last id, its entries added and (when `messages`) the transcript, read
    /// at one instant.
    fn snapshot(&mut self, messages: bool) -> Result<(String, u64, Vec<Vec<u8>>), Error> {
        let (events, list) = (&self.key, &self.messages);
        let (last, added, elements): (String, u64, Vec<Vec<u8>>) =
            self.conn.call(Again::Safe, |c| {
                scripts::eval(&scripts::SNAPSHOT, &[list, events])
                    .arg(if messages { "1" } else { "0" })
                    .query(c)
            })?;
        Ok((last, added, elements))
    }

    /// Starts again from the store: the state becomes the stored transcript (as
    /// [`AgentEvent::MessagesReplaced`] folds it, with no run streaming), and the mirror
    /// follows the event stream from the entry appended last when the transcript was read
    /// (one script reads both at one instant, so no message is missed or folded twice for a
    /// [`Worker`](super::Worker)'s conversation, whose messages and events are written
    /// together). A reply streaming then shows from its end (its `MessageEnd`), its deltas
    /// skipped. Returns the new state.
    ///
    /// Blocks for one round trip.
    ///
    /// # Errors
    /// As [`RemoteMirror::next_event`] for a read; elements of the transcript that are not a
    /// message are skipped.
    pub fn resync(&mut self) -> Result<Arc<State>, Error> {
        self.name.clone()?;
        let (last, added, elements) = self.snapshot(true)?;
        let messages = elements
            .iter()
            .filter_map(|e| serde_json::from_slice::<crate::message::Message>(e).ok())
            .map(Arc::new)
            .collect();
        let mut state = self
            .state()
            .apply(&AgentEvent::MessagesReplaced { messages });
        state.is_streaming = false;
        state.is_streaming_reply = false;
        state.streaming_message = None;
        state.pending_tool_calls = Default::default();
        self.mirror = Mirror::from_state(state).decoder(Decoder::new());
        self.last_id = last;
        self.offset = Some(added);
        self.skip_deltas = true;
        self.buffered.clear();
        Ok(self.state().clone())
    }

    /// Follows until the next `AgentEnd` and returns the state after it, going on through
    /// connection failures and what passes (a Redis restart, loading its data) by reading
    /// again, until `limit` has passed.
    ///
    /// Blocks the current thread until an `AgentEnd` arrives or `limit` has passed.
    ///
    /// # Errors
    /// [`Error::Timeout`] (phase `Run`) when no `AgentEnd` came within `limit`;
    /// [`Error::Behind`] when the mirror fell behind the stream (see
    /// [`RemoteMirror::resync`]); [`Error::Io`] when Redis answers with an error. Entries
    /// that do not decode are skipped.
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

/// The entry a [`RemoteMirror::last_id`] names, and how many of its events were folded in
/// when not all of them were (0 when all were).
fn place(last_id: &str) -> (&str, usize) {
    match last_id.split_once('#') {
        Some((entry, k)) => (entry, k.parse().unwrap_or(0)),
        None => (last_id, 0),
    }
}

/// A stream entry id as a comparable pair (`"0-0"` for anything else).
fn parse_id(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}
