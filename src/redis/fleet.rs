//! Work distribution: a `Queue` of requests per conversation, and `Worker`s that run them.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Redis;
use super::events::EventLog;
use super::store::{Fence, Store, Transcript, with_conn, with_conn_read};
use crate::agent::{Agent, AgentHandle};
use crate::error::Error;
use crate::message::Message;
use crate::state::State;

/// The consumer group of the queue stream.
const GROUP: &str = "workers";

/// Takes the lease back when the inbox has nothing after `done`, else keeps it (more work
/// arrived). KEYS: lease, inbox, meta. ARGV: token. Returns 1 released, 0 more work, -1 the
/// lease is not ours.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #last == 0 then redis.call('DEL', KEYS[1]) return 1 end
local done = redis.call('HGET', KEYS[3], 'done')
local function parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
if done then
  local lm, ls = parts(last[1][1])
  local dm, ds = parts(done)
  if lm < dm or (lm == dm and ls <= ds) then redis.call('DEL', KEYS[1]) return 1 end
end
return 0
";

/// Records that the inbox entries up to ARGV[2] are handled, and drops those before it
/// from the inbox (the last one stays, so the inbox's end is never before `done`). KEYS:
/// lease, meta, inbox. ARGV: token, entry id. Returns 0 when the lease is not ours.
const DONE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'done', ARGV[2])
redis.call('XTRIM', KEYS[3], 'MINID', ARGV[2])
return 1
";

/// Extends the lease if it is still ours. KEYS: lease. ARGV: token, milliseconds.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// Deletes the lease if it is still ours. KEYS: lease. ARGV: token.
const DROP_LEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
";

/// Sends requests to a fleet of [`Worker`]s: prompts, steering, follow-ups and aborts for
/// a conversation, each an entry of the conversation's inbox stream, announced on the
/// fleet's queue stream.
///
/// A cheap `Clone` handle; clones share one connection (opened at the first call, and again
/// at the next call after one failed).
///
/// # Consistency
/// The inbox entry is written first, then the queue entry. A request whose call returned
/// `Ok` will be run. A call that failed in between (Redis went away) leaves the inbox entry
/// without its announcement: it runs with the conversation's next request; send it again
/// only if it must run before that (it then runs twice).
#[derive(Clone)]
pub struct Queue {
    redis: Redis,
    conn: Arc<Mutex<Option<::redis::Connection>>>,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("redis", &self.redis)
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// A queue on `redis`. Does not connect.
    pub fn new(redis: &Redis) -> Queue {
        Queue {
            redis: redis.clone(),
            conn: Arc::default(),
        }
    }

    /// Asks the fleet to run `text` as the next prompt of `conversation`. Returns the inbox
    /// entry id, by which the run is known (see the module's guarantees).
    ///
    /// Blocks for one round trip.
    ///
    /// # Errors
    /// [`Error::Connection`] or [`Error::Timeout`] when Redis cannot be reached or does not
    /// answer in time, [`Error::Io`] when it answers with an error.
    pub fn prompt(&self, conversation: &str, text: &str) -> Result<String, Error> {
        self.request(conversation, "prompt", text)
    }

    /// Steers the run of `conversation` that is active when a worker reads the request
    /// ([`Agent::steer`]); with no run active, it runs as a prompt. Returns the entry id.
    ///
    /// # Errors
    /// As [`Queue::prompt`].
    pub fn steer(&self, conversation: &str, text: &str) -> Result<String, Error> {
        self.request(conversation, "steer", text)
    }

    /// Queues a follow-up for the active run of `conversation` ([`Agent::follow_up`]); with
    /// no run active, it runs as a prompt. Returns the entry id.
    ///
    /// # Errors
    /// As [`Queue::prompt`].
    pub fn follow_up(&self, conversation: &str, text: &str) -> Result<String, Error> {
        self.request(conversation, "follow_up", text)
    }

    /// Aborts the active run of `conversation`, wherever it runs; with no run active it is
    /// skipped. Returns the entry id.
    ///
    /// # Errors
    /// As [`Queue::prompt`].
    pub fn abort(&self, conversation: &str) -> Result<String, Error> {
        self.request(conversation, "abort", "")
    }

    fn request(&self, conversation: &str, kind: &str, text: &str) -> Result<String, Error> {
        let inbox = self.redis.key(conversation, "inbox");
        let queue = self.redis.queue_key();
        // One round trip, two commands in this order (not atomic: the keys are in two
        // slots; see the type's `# Consistency`).
        let (id, _queued): (String, String) = with_conn(&self.redis, &mut self.conn.lock(), |c| {
            ::redis::pipe()
                .cmd("XADD")
                .arg(&inbox)
                .arg("*")
                .arg("kind")
                .arg(kind)
                .arg("text")
                .arg(text)
                .cmd("XADD")
                .arg(&queue)
                .arg("*")
                .arg("conversation")
                .arg(conversation)
                .query(c)
        })?;
        Ok(id)
    }
}

/// Builds the agent of a conversation from its stored transcript.
type Factory = dyn Fn(&str, Vec<Message>) -> Result<Agent, Error> + Send + Sync;
/// Called after each run with the conversation, the inbox entry id and the final state.
type OnEnd = dyn Fn(&str, &str, &State) + Send + Sync;

/// Runs the conversations of a fleet: reads the queue stream in the consumer group
/// `workers` under its own name, runs each conversation it can lease, acknowledges after
/// `AgentEnd`, and claims the entries of dead workers. See the [module](super) for the
/// guarantees.
///
/// One worker runs one conversation at a time, on the thread that calls
/// [`Worker::run_for`] or [`Worker::step`]; start several workers (threads or processes,
/// each with its own name) for more at once. A cheap `Clone` handle: [`Worker::stop`] from
/// another thread ends `run_for`.
///
/// For each run it builds the agent with the factory from the stored transcript,
/// subscribes a fenced [`Transcript`] (so a worker that lost its lease cannot write) and,
/// unless turned off, an [`EventLog`] for [`super::RemoteMirror`]s, and follows the
/// conversation's inbox on a thread of its own, handing steering, follow-ups and aborts to
/// the running agent.
#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

struct Inner {
    redis: Redis,
    name: String,
    factory: Box<Factory>,
    on_end: Option<Box<OnEnd>>,
    lease: Duration,
    claim_after: Duration,
    events: Option<usize>,
    stop: AtomicBool,
    tokens: AtomicU64,
    /// The worker thread's connection.
    conn: Mutex<Option<::redis::Connection>>,
    /// The heartbeat's connection.
    beat: Mutex<Option<::redis::Connection>>,
    /// The inbox follower's connection, between runs.
    side: Mutex<Option<::redis::Connection>>,
    /// Loads transcripts (a connection of its own).
    store: Store,
    /// The connections of a run's transcript and event log, between runs.
    spare: Mutex<(Option<::redis::Connection>, Option<::redis::Connection>)>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("name", &self.inner.name)
            .field("lease", &self.inner.lease)
            .field("claim_after", &self.inner.claim_after)
            .finish_non_exhaustive()
    }
}

/// One run to do: an inbox entry and how to start it.
struct Job {
    id: String,
    text: String,
}

impl Worker {
    /// A worker named `name` (unique in the fleet: it is its consumer name) that builds a
    /// conversation's agent with `factory(conversation, stored_messages)`.
    ///
    /// The factory is called on the worker's thread before each run, with the transcript
    /// as stored (a new agent per run: the transcript in Redis is the conversation's state).
    /// An `Err` from it fails that run's [`Worker::step`] and leaves the queue entry pending,
    /// to be tried again after [`Worker::claim_after`].
    ///
    /// Creates the consumer group if there is none yet (blocks for one round trip).
    ///
    /// # Errors
    /// [`Error::Connection`] or [`Error::Timeout`] when Redis cannot be reached or does not
    /// answer in time, [`Error::Io`] when it answers with an error.
    pub fn new(
        redis: &Redis,
        name: &str,
        factory: impl Fn(&str, Vec<Message>) -> Result<Agent, Error> + Send + Sync + 'static,
    ) -> Result<Worker, Error> {
        let worker = Worker {
            inner: Arc::new(Inner {
                redis: redis.clone(),
                name: name.into(),
                factory: Box::new(factory),
                on_end: None,
                lease: Duration::from_secs(10),
                claim_after: Duration::from_secs(30),
                events: Some(10_000),
                stop: AtomicBool::new(false),
                tokens: AtomicU64::new(0),
                conn: Mutex::new(None),
                beat: Mutex::new(None),
                side: Mutex::new(None),
                store: Store::new(redis),
                spare: Mutex::new((None, None)),
            }),
        };
        worker.ensure_group()?;
        Ok(worker)
    }

    fn configure(mut self, f: impl FnOnce(&mut Inner)) -> Worker {
        f(Arc::get_mut(&mut self.inner).expect("OK because builder setters run before any clone"));
        self
    }

    /// How long a conversation's lease lasts without renewal; the worker renews it every
    /// third of that while it runs the conversation. Defaults to 10 seconds.
    ///
    /// # Panics
    /// When called on a clone of the worker.
    #[must_use]
    pub fn lease(self, lease: Duration) -> Worker {
        self.configure(|i| i.lease = lease.max(Duration::from_millis(30)))
    }

    /// How long a queue entry stays pending (its worker silent) before another worker claims
    /// it; keep it longer than [`Worker::lease`], so that the dead worker's lease has expired
    /// by then. Defaults to 30 seconds.
    ///
    /// # Panics
    /// When called on a clone of the worker.
    #[must_use]
    pub fn claim_after(self, after: Duration) -> Worker {
        self.configure(|i| i.claim_after = after)
    }

    /// Records each run's events in the conversation's [`EventLog`] capped at `max_len`
    /// entries, or not at all with `None`. Defaults to `Some(10_000)`.
    ///
    /// # Panics
    /// When called on a clone of the worker.
    #[must_use]
    pub fn events(self, max_len: Option<usize>) -> Worker {
        self.configure(|i| i.events = max_len)
    }

    /// Calls `f(conversation, inbox_entry_id, final_state)` on the worker's thread after
    /// each run, before the run is recorded as done.
    ///
    /// # Panics
    /// When called on a clone of the worker.
    #[must_use]
    pub fn on_end(self, f: impl Fn(&str, &str, &State) + Send + Sync + 'static) -> Worker {
        self.configure(|i| i.on_end = Some(Box::new(f)))
    }

    /// Makes [`Worker::run_for`] return after the entry it is handling (within a second
    /// when it is waiting for work).
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::Release);
    }

    fn ensure_group(&self) -> Result<(), Error> {
        let queue = self.inner.redis.queue_key();
        let result = with_conn(&self.inner.redis, &mut self.inner.conn.lock(), |c| {
            ::redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&queue)
                .arg(GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query::<()>(c)
        });
        match result {
            Err(Error::Io { message, .. }) if message.contains("BUSYGROUP") => Ok(()),
            other => other,
        }
    }

    /// Handles queue entries until `limit` has passed or [`Worker::stop`] was called, going
    /// on through Redis failures (it waits and connects again). Returns how many queue
    /// entries it handled.
    ///
    /// Blocks the current thread for up to `limit` (plus the run in progress then).
    ///
    /// # Errors
    /// Never for Redis being away; [`Error::Io`] when Redis answers with an error that
    /// another try will not cure (a wrong key type, say).
    pub fn run_for(&self, limit: Duration) -> Result<u64, Error> {
        let deadline = Instant::now() + limit;
        let mut handled = 0;
        while !self.inner.stop.load(Ordering::Acquire) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.step(left.min(Duration::from_millis(500))) {
                Ok(n) => handled += n,
                Err(Error::Connection(_) | Error::Timeout(_) | Error::Busy) => {
                    std::thread::sleep(left.min(Duration::from_millis(100)));
                }
                Err(Error::Io { message, .. }) if message.contains("NOGROUP") => {
                    // Redis came back without the group (no persistence): make it again.
                    let _ = self.ensure_group();
                }
                // A conversation whose agent cannot be built: its entry stays pending and
                // is tried again after `claim_after`.
                Err(Error::Config(_) | Error::NotConfigured(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(handled)
    }

    /// Handles at most one batch of queue entries: first those of dead workers (pending
    /// longer than [`Worker::claim_after`]), else waits up to `wait` for a new one. Returns
    /// how many it handled.
    ///
    /// Blocks the current thread up to `wait` plus the runs it does.
    ///
    /// # Errors
    /// [`Error::Connection`] or [`Error::Timeout`] when Redis cannot be reached or does not
    /// answer in time, [`Error::Io`] when it answers with an error, [`Error::Busy`] when the
    /// worker lost a conversation's lease during its run (it was paused longer than the
    /// lease; the run was aborted and its entry is left to another worker), and the
    /// factory's error. Entries not acknowledged stay pending for another try.
    pub fn step(&self, wait: Duration) -> Result<u64, Error> {
        let inner = &self.inner;
        let queue = inner.redis.queue_key();
        let claimed: ::redis::streams::StreamAutoClaimReply =
            with_conn_read(&inner.redis, &mut inner.conn.lock(), |c| {
                ::redis::cmd("XAUTOCLAIM")
                    .arg(&queue)
                    .arg(GROUP)
                    .arg(&inner.name)
                    .arg(millis(inner.claim_after))
                    .arg("0-0")
                    .arg("COUNT")
                    .arg(16)
                    .query(c)
            })?;
        let (entries, reclaimed) = if claimed.claimed.is_empty() {
            let block = millis(wait).max(1);
            let timeout = inner.redis.call_timeout() + wait;
            let read: Option<::redis::streams::StreamReadReply> =
                with_conn(&inner.redis, &mut inner.conn.lock(), |c| {
                    c.set_read_timeout(Some(timeout))?;
                    let reply = ::redis::cmd("XREADGROUP")
                        .arg("GROUP")
                        .arg(GROUP)
                        .arg(&inner.name)
                        .arg("COUNT")
                        .arg(1)
                        .arg("BLOCK")
                        .arg(block)
                        .arg("STREAMS")
                        .arg(&queue)
                        .arg(">")
                        .query(c);
                    c.set_read_timeout(Some(inner.redis.call_timeout()))?;
                    reply
                })?;
            let entries = read
                .into_iter()
                .flat_map(|r| r.keys)
                .flat_map(|k| k.ids)
                .collect::<Vec<_>>();
            (entries, false)
        } else {
            (claimed.claimed, true)
        };
        let mut handled = 0;
        for entry in entries {
            let conversation: String = entry.get("conversation").unwrap_or_default();
            if self.handle(&conversation, &entry.id, reclaimed)? {
                handled += 1;
            }
        }
        Ok(handled)
    }

    /// Handles one queue entry: leases the conversation and drains its inbox, then
    /// acknowledges. Returns false when the entry was left pending.
    fn handle(&self, conversation: &str, entry: &str, reclaimed: bool) -> Result<bool, Error> {
        let inner = &self.inner;
        let redis = &inner.redis;
        let lease_key = redis.key(conversation, "lease");
        let token = format!(
            "{}:{}:{}",
            inner.name,
            std::process::id(),
            inner.tokens.fetch_add(1, Ordering::Relaxed)
        );
        let acquired: Option<String> = with_conn(redis, &mut inner.conn.lock(), |c| {
            ::redis::cmd("SET")
                .arg(&lease_key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(millis(inner.lease))
                .query(c)
        })?;
        if acquired.is_none() {
            // Another worker holds the conversation. It holds an entry of its own that it
            // acknowledges only after draining the inbox, which this request is already in:
            // a new entry can go. A reclaimed one stays pending: its holder may be the dead
            // worker whose lease has not expired yet, and it comes back after `claim_after`.
            if reclaimed {
                return Ok(false);
            }
            self.ack(entry)?;
            return Ok(true);
        }
        let current: Mutex<Option<AgentHandle>> = Mutex::new(None);
        // Dropping the sender ends the heartbeat at once.
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let drained = std::thread::scope(|scope| {
            scope.spawn(|| self.heartbeat(&lease_key, &token, entry, &stopped, &current));
            let drained = self.drain(conversation, &token, &current);
            drop(stop);
            drained
        });
        if let Err(e) = drained {
            // Leave the entry pending for another try; free the conversation at once when
            // the lease is still ours (a Redis failure: it may not be reachable).
            let _ = with_conn(redis, &mut inner.conn.lock(), |c| {
                ::redis::cmd("EVAL")
                    .arg(DROP_LEASE)
                    .arg(1)
                    .arg(&lease_key)
                    .arg(&token)
                    .query::<i64>(c)
            });
            return Err(e);
        }
        self.ack(entry)?;
        Ok(true)
    }

    fn ack(&self, entry: &str) -> Result<(), Error> {
        let queue = self.inner.redis.queue_key();
        with_conn(&self.inner.redis, &mut self.inner.conn.lock(), |c| {
            ::redis::pipe()
                .cmd("XACK")
                .arg(&queue)
                .arg(GROUP)
                .arg(entry)
                .ignore()
                .cmd("XDEL")
                .arg(&queue)
                .arg(entry)
                .ignore()
                .query::<()>(c)
        })
    }

    /// Renews the lease and keeps the queue entry fresh (so no one claims it) while the
    /// conversation runs; aborts the run when the lease was lost.
    fn heartbeat(
        &self,
        lease_key: &str,
        token: &str,
        entry: &str,
        stopped: &crossbeam_channel::Receiver<()>,
        current: &Mutex<Option<AgentHandle>>,
    ) {
        let inner = &self.inner;
        let period = inner.lease / 3;
        while let Err(crossbeam_channel::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
            let queue = inner.redis.queue_key();
            // Renew first: an entry is taken back (XCLAIM) only while the lease is ours,
            // never from a worker that claimed it after this one was paused too long.
            let renewed = with_conn(&inner.redis, &mut inner.beat.lock(), |c| {
                let renewed = ::redis::cmd("EVAL")
                    .arg(RENEW)
                    .arg(1)
                    .arg(lease_key)
                    .arg(token)
                    .arg(millis(inner.lease))
                    .query::<i64>(c)?;
                if renewed == 1 {
                    ::redis::cmd("XCLAIM")
                        .arg(&queue)
                        .arg(GROUP)
                        .arg(&inner.name)
                        .arg(0)
                        .arg(entry)
                        .arg("JUSTID")
                        .query::<::redis::Value>(c)?;
                }
                Ok(renewed)
            });
            if renewed == Ok(0) {
                // Lost (paused too long): the fenced writes fail anyway; stop at once.
                if let Some(h) = &*current.lock() {
                    h.abort();
                }
            }
        }
    }

    /// Runs the conversation's inbox entries after `done`, in order, until none is left and
    /// the lease is released.
    fn drain(
        &self,
        conversation: &str,
        token: &str,
        current: &Mutex<Option<AgentHandle>>,
    ) -> Result<(), Error> {
        let inner = &self.inner;
        let redis = &inner.redis;
        let keys = |what| redis.key(conversation, what);
        // Bounded: a conversation that keeps getting requests is handed back to the queue
        // after this many, so one worker never holds it forever.
        for _ in 0..64 {
            let (done, started): (Option<String>, Option<String>) =
                with_conn_read(redis, &mut inner.conn.lock(), |c| {
                    ::redis::cmd("HMGET")
                        .arg(keys("meta"))
                        .arg("done")
                        .arg("started")
                        .query(c)
                })?;
            let from = done.as_ref().map_or("-".to_string(), |d| format!("({d}"));
            let entries: ::redis::streams::StreamRangeReply =
                with_conn_read(redis, &mut inner.conn.lock(), |c| {
                    ::redis::cmd("XRANGE")
                        .arg(keys("inbox"))
                        .arg(&from)
                        .arg("+")
                        .arg("COUNT")
                        .arg(16)
                        .query(c)
                })?;
            let mut skipped = None;
            let mut job = None;
            for e in entries.ids {
                let kind: String = e.get("kind").unwrap_or_default();
                if kind == "abort" {
                    // Nothing runs: an abort that came when no run was active.
                    skipped = Some(e.id);
                    continue;
                }
                let text: String = e.get("text").unwrap_or_default();
                job = Some(Job { id: e.id, text });
                break;
            }
            if let Some(job) = job {
                let resume = started.as_deref() == Some(job.id.as_str());
                self.run(conversation, token, &job, resume, current)?;
                continue;
            }
            if let Some(id) = skipped {
                self.mark_done(conversation, token, &id)?;
                continue;
            }
            let released: i64 = with_conn(redis, &mut inner.conn.lock(), |c| {
                ::redis::cmd("EVAL")
                    .arg(RELEASE)
                    .arg(3)
                    .arg(keys("lease"))
                    .arg(keys("inbox"))
                    .arg(keys("meta"))
                    .arg(token)
                    .query(c)
            })?;
            match released {
                1 => return Ok(()),
                0 => continue,
                _ => return Err(Error::Busy),
            }
        }
        // Hand the conversation back: announce it again, then free the lease.
        announce(redis, &mut inner.conn.lock(), conversation);
        Err(Error::Busy)
    }

    fn mark_done(&self, conversation: &str, token: &str, id: &str) -> Result<(), Error> {
        let redis = &self.inner.redis;
        let ok: i64 = with_conn(redis, &mut self.inner.conn.lock(), |c| {
            ::redis::cmd("EVAL")
                .arg(DONE)
                .arg(3)
                .arg(redis.key(conversation, "lease"))
                .arg(redis.key(conversation, "meta"))
                .arg(redis.key(conversation, "inbox"))
                .arg(token)
                .arg(id)
                .query(c)
        })?;
        if ok == 1 { Ok(()) } else { Err(Error::Busy) }
    }

    /// One run: the agent from the stored transcript, a prompt (or `continue_run` when the
    /// prompt is already stored), the inbox followed for steering, then `done`.
    fn run(
        &self,
        conversation: &str,
        token: &str,
        job: &Job,
        resume: bool,
        current: &Mutex<Option<AgentHandle>>,
    ) -> Result<(), Error> {
        let inner = &self.inner;
        let redis = &inner.redis;
        let loaded = inner.store.load(conversation)?;
        let agent = (inner.factory)(conversation, loaded.messages)?;
        let fence = Fence {
            token: token.into(),
            entry: (!resume).then(|| job.id.clone()),
        };
        let transcript = Transcript::new(redis, conversation, Some(fence));
        let (spare_transcript, spare_log) = std::mem::take(&mut *inner.spare.lock());
        transcript.set_conn(spare_transcript);
        let handle = agent.handle();
        transcript.on_error(move || {
            handle.abort();
        });
        let _transcript = agent.subscribe(transcript.listener());
        let log = inner.events.map(|n| {
            let log = EventLog::new(redis, conversation).max_len(n);
            log.set_conn(spare_log);
            log
        });
        let _log = log.as_ref().map(|log| agent.subscribe(log.listener()));
        *current.lock() = Some(agent.handle());

        let last_control = self.follow_inbox(conversation, &job.id, &agent, || {
            if resume {
                agent.continue_run()
            } else {
                agent.prompt(job.text.as_str())
            }
        })?;
        *current.lock() = None;
        *inner.spare.lock() = (
            transcript.take_conn(),
            log.as_ref().and_then(EventLog::take_conn),
        );
        if let Some(e) = transcript.error() {
            return Err(e);
        }
        if let Some(f) = &inner.on_end {
            f(conversation, &job.id, &agent.snapshot());
        }
        self.mark_done(
            conversation,
            token,
            last_control.as_deref().unwrap_or(&job.id),
        )
    }

    /// Runs `run` while a thread follows the conversation's inbox after `after` and hands
    /// steering, follow-ups and aborts to `agent`, up to the next prompt. Returns the id of
    /// the last request it handed over.
    fn follow_inbox(
        &self,
        conversation: &str,
        after: &str,
        agent: &Agent,
        run: impl FnOnce() -> Result<crate::RunResult, crate::RunError>,
    ) -> Result<Option<String>, Error> {
        let inner = &self.inner;
        let redis = &inner.redis;
        let inbox = redis.key(conversation, "inbox");
        let taken = inner.side.lock().take();
        let mut watcher = match taken {
            Some(c) => c,
            None => redis.connect()?,
        };
        let watcher_id: i64 = ::redis::cmd("CLIENT")
            .arg("ID")
            .query(&mut watcher)
            .map_err(|e| super::map_err(&e, false))?;
        let running = AtomicBool::new(true);
        let handle = agent.handle();
        let (last, watcher) = std::thread::scope(|scope| {
            let follower = scope.spawn(|| {
                follow(
                    watcher,
                    &inbox,
                    after,
                    &running,
                    &handle,
                    redis.call_timeout(),
                )
            });
            // A failed run still ended (`AgentEnd`, its error in the transcript): the
            // prompt is answered. Nothing to continue on a resume: it was answered before.
            let _ = run();
            running.store(false, Ordering::Release);
            // Wake the follower from its blocking read, again until it is gone: one sent
            // while it was between two reads finds nothing to unblock. Bounded: it stops
            // within its block time anyway.
            for _ in 0..2000 {
                let _ = with_conn(redis, &mut inner.conn.lock(), |c| {
                    ::redis::cmd("CLIENT")
                        .arg("UNBLOCK")
                        .arg(watcher_id)
                        .query::<i64>(c)
                });
                if follower.is_finished() {
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            follower.join().unwrap_or((None, None))
        });
        if let Some(conn) = watcher {
            *inner.side.lock() = Some(conn);
        }
        Ok(last)
    }
}

/// Announces `conversation` on the queue again (its worker hands it back).
fn announce(redis: &Redis, conn: &mut Option<::redis::Connection>, conversation: &str) {
    let _ = with_conn(redis, conn, |c| {
        ::redis::cmd("XADD")
            .arg(redis.queue_key())
            .arg("*")
            .arg("conversation")
            .arg(conversation)
            .query::<String>(c)
    });
}

/// How long one read of the inbox follower blocks at most.
const FOLLOW_BLOCK: Duration = Duration::from_millis(200);

/// Follows `inbox` after `after` while `running`, handing each control request to the
/// agent, and stops at the next prompt. Returns the last id handed over and the connection
/// (none after a failure).
fn follow(
    mut conn: ::redis::Connection,
    inbox: &str,
    after: &str,
    running: &AtomicBool,
    agent: &AgentHandle,
    timeout: Duration,
) -> (Option<String>, Option<::redis::Connection>) {
    let mut last: Option<String> = None;
    if conn.set_read_timeout(Some(timeout + FOLLOW_BLOCK)).is_err() {
        return (None, None);
    }
    while running.load(Ordering::Acquire) {
        let from = last.as_deref().unwrap_or(after);
        let read: ::redis::RedisResult<Option<::redis::streams::StreamReadReply>> =
            ::redis::cmd("XREAD")
                .arg("COUNT")
                .arg(16)
                .arg("BLOCK")
                .arg(millis(FOLLOW_BLOCK))
                .arg("STREAMS")
                .arg(inbox)
                .arg(from)
                .query(&mut conn);
        let Ok(read) = read else {
            // Redis went away: the run's own writes report it.
            return (last, None);
        };
        for entry in read.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
            let kind: String = entry.get("kind").unwrap_or_default();
            let text: String = entry.get("text").unwrap_or_default();
            match kind.as_str() {
                "steer" => drop(agent.steer(Message::user(text))),
                "follow_up" => drop(agent.follow_up(Message::user(text))),
                "abort" => {
                    // The run may not have started yet: try until it has, or has ended.
                    for _ in 0..200 {
                        if agent.abort() || !running.load(Ordering::Acquire) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                // The next prompt: it runs after this one.
                _ => return (last, Some(conn)),
            }
            last = Some(entry.id);
        }
    }
    let _ = conn.set_read_timeout(Some(timeout));
    (last, Some(conn))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
