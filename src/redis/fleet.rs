//! `Worker`: runs the conversations of a fleet, fed by the queue stream.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::conn::Again;
use super::conversation::Failure;
use super::side::{Side, millis};
use super::writer::{Link, Writer};
use super::{Redis, scripts};
use crate::agent::Agent;
use crate::error::Error;
use crate::message::Message;
use crate::state::State;

/// The consumer group of the queue stream.
pub(super) const GROUP: &str = "workers";

/// The most queue entries [`Worker::run_for`] holds read ahead (see `read_ahead`).
const READ_AHEAD: usize = 4;

/// A worker trims the queue's handled entries at every this many ends of a run, the first
/// one included (see `scripts::END`): a trim costs Redis about 38,000 instructions, near a
/// tenth of a prompt's, and leaves at most one less than this many handled entries more
/// per worker.
const TRIM_EVERY: usize = 16;

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
/// [`Worker::run_for`] or [`Worker::step`] (calls from two threads at once take turns);
/// start several workers (threads or processes, each with its own name) for more at once.
/// A cheap `Clone` handle: [`Worker::stop`] from another thread ends `run_for`. The
/// setters change only the handle they are called on (and the clones made from it later).
///
/// For each run it builds the agent with the factory from the stored transcript and writes
/// the run's messages and (unless turned off) its events, fenced by the lease, for
/// [`super::RemoteMirror`]s; a thread of its own renews the lease and follows the
/// conversation's inbox, handing steering, follow-ups and aborts to the running agent.
#[derive(Clone)]
pub struct Worker {
    pub(super) shared: Arc<Shared>,
    pub(super) config: Arc<Config>,
}

#[derive(Clone)]
pub(super) struct Config {
    pub(super) factory: Arc<Factory>,
    pub(super) on_end: Option<Arc<OnEnd>>,
    pub(super) lease: Duration,
    pub(super) claim_after: Duration,
    pub(super) events: Option<usize>,
    pub(super) max_failures: u32,
    pub(super) allow_eviction: bool,
}

pub(super) struct Shared {
    pub(super) redis: Redis,
    pub(super) name: String,
    /// The start of every lease token of this worker (its clones included): its name (after
    /// its length, so no name is the start of another's), the process and the instance, so
    /// no other worker, even one named alike in this process, makes a token that starts
    /// the same.
    pub(super) owner: String,
    pub(super) stop: AtomicBool,
    pub(super) tokens: AtomicU64,
    /// One step at a time.
    pub(super) busy: Mutex<()>,
    /// The worker thread's connection and its runs' writes.
    pub(super) writer: Arc<Writer>,
    /// Renews the lease and follows the inbox.
    pub(super) side: Side,
    /// Whether Redis's eviction policy was checked.
    pub(super) checked: AtomicBool,
    /// A failure left this worker's own entries pending: read them again at once.
    pub(super) retry_own: AtomicBool,
    pub(super) last_claim: Mutex<Option<Instant>>,
    /// How many [`Worker::run_for`] calls are under way: while one is, the start of each
    /// run reads the next queue entries in the same round trip as the next run's start, and
    /// the end of a run is not waited for when the next run's start is under way.
    pub(super) reading_ahead: AtomicUsize,
    /// Ends not waited for whose reply said they landed, not counted by a step yet.
    pub(super) ended_later: AtomicU64,
    /// Queue entries this worker acknowledged with a run's end: every [`TRIM_EVERY`]th end
    /// trims the queue too.
    pub(super) ends: AtomicUsize,
    /// Queue entries read ahead, in order, handled one per step; each with the lease token
    /// its run's start was sent ahead under, if it was ([`Held`]).
    pub(super) ahead: Mutex<Vec<Held>>,
}

/// A queue entry in a worker's hands, read ahead.
pub(super) struct Held {
    pub(super) entry: ::redis::streams::StreamId,
    /// The lease token its run's start was sent ahead under ([`Worker::begin_ahead`]): kept
    /// with the entry, so that the two cannot part (an entry let go forgets its start).
    pub(super) begun: Option<String>,
}

/// The entries a step handles: each with the token its run's start was sent ahead under.
type Entries = Vec<(::redis::streams::StreamId, Option<String>)>;

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("name", &self.shared.name)
            .field("lease", &self.config.lease)
            .field("claim_after", &self.config.claim_after)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker named `name` (unique in the fleet: it is its consumer name) that builds a
    /// conversation's agent with `factory(conversation, stored_messages)`.
    ///
    /// The factory is called on the worker's thread before each run, with the transcript
    /// as stored (a new agent per run: the transcript in Redis is the conversation's state).
    /// An `Err` from it, or a panic (caught), fails that inbox entry: the lease is freed and
    /// the queue entry stays pending, to be tried again after [`Worker::claim_after`]; at the
    /// [`Worker::max_failures`]th failure in a row the entry is moved to the dead-letter
    /// stream (see the module docs) and the conversation goes on with its next request.
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
        static INSTANCES: AtomicU64 = AtomicU64::new(0);
        let instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let worker = Worker {
            shared: Arc::new_cyclic(|me: &Weak<Shared>| Shared {
                redis: redis.clone(),
                name: name.into(),
                owner: format!("{}:{name}:{}:{instance}:", name.len(), std::process::id()),
                stop: AtomicBool::new(false),
                tokens: AtomicU64::new(0),
                busy: Mutex::new(()),
                writer: Writer::new(redis, {
                    let me = me.clone();
                    Box::new(move |read| {
                        if let Some(shared) = me.upgrade() {
                            keep_ahead(&shared, read);
                        }
                    })
                }),
                side: Side::start(redis, name, GROUP),
                checked: AtomicBool::new(false),
                retry_own: AtomicBool::new(true),
                last_claim: Mutex::new(None),
                reading_ahead: AtomicUsize::new(0),
                ended_later: AtomicU64::new(0),
                ends: AtomicUsize::new(0),
                ahead: Mutex::new(Vec::new()),
            }),
            config: Arc::new(Config {
                factory: Arc::new(factory),
                on_end: None,
                lease: Duration::from_secs(10),
                claim_after: Duration::from_secs(30),
                events: Some(10_000),
                max_failures: 3,
                allow_eviction: false,
            }),
        };
        worker.ensure_group()?;
        Ok(worker)
    }

    fn configure(mut self, f: impl FnOnce(&mut Config)) -> Worker {
        f(Arc::make_mut(&mut self.config));
        self
    }

    /// How long a conversation's lease lasts without renewal; the worker renews it every
    /// third of that while it holds the conversation. Defaults to 10 seconds; at least
    /// 300 ms.
    #[must_use]
    pub fn lease(self, lease: Duration) -> Worker {
        self.configure(|c| c.lease = lease.max(Duration::from_millis(300)))
    }

    /// How long a queue entry stays pending (its worker silent) before another worker claims
    /// it; keep it longer than [`Worker::lease`], so that the dead worker's lease has expired
    /// by then. A live worker never waits this long for its own entries: after a failure
    /// (Redis away, out of memory) it takes them up again at its next step. Defaults to
    /// 30 seconds.
    #[must_use]
    pub fn claim_after(self, after: Duration) -> Worker {
        self.configure(|c| c.claim_after = after)
    }

    /// Records each run's events in the conversation's event stream (for
    /// [`super::RemoteMirror`]s) capped at about `max_len` entries, or not at all with
    /// `None`. Defaults to `Some(10_000)`.
    ///
    /// Each entry holds the events of one batch of the run's writes (see the module docs):
    /// one or a few for a run's start and each message's end, those of up to 5 ms for a
    /// streaming reply. So the cap keeps at least `max_len` events, usually several times
    /// that.
    #[must_use]
    pub fn events(self, max_len: Option<usize>) -> Worker {
        self.configure(|c| c.events = max_len.map(|n| n.max(1)))
    }

    /// How many times in a row an inbox entry may fail (its agent could not be built) before
    /// it is moved to the dead-letter stream. Defaults to 3; at least 1.
    #[must_use]
    pub fn max_failures(self, failures: u32) -> Worker {
        self.configure(|c| c.max_failures = failures.max(1))
    }

    /// Runs even when Redis may evict keys (a `maxmemory-policy` other than `noeviction`
    /// with `maxmemory` set), which [`Worker::step`] otherwise refuses: an evicted key loses
    /// what it held (a lease evicted lets two workers run one conversation, a `meta` hash
    /// evicted runs its last prompt again, a transcript evicted starts it over). Defaults to
    /// `false`.
    #[must_use]
    pub fn allow_eviction(self, allow: bool) -> Worker {
        self.configure(|c| c.allow_eviction = allow)
    }

    /// Calls `f(conversation, inbox_entry_id, final_state)` on the worker's thread after
    /// each run that ran (not after a resumed one that found its answer already stored),
    /// once the run's writes landed and before it is recorded as done. A panic in it is
    /// caught; the run is still recorded as done.
    ///
    /// It costs a round trip per run: without it, a run's last writes go with the script
    /// that records it done (see the module's "Capacity"); with it, they are sent and their
    /// reply read first, so that `f` sees them stored.
    #[must_use]
    pub fn on_end(self, f: impl Fn(&str, &str, &State) + Send + Sync + 'static) -> Worker {
        self.configure(|c| c.on_end = Some(Arc::new(f)))
    }

    /// Makes [`Worker::run_for`] return after the entry it is handling (and the ones it
    /// read ahead, at most four; within a second when it is waiting for work).
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
    }

    fn ensure_group(&self) -> Result<(), Error> {
        let queue = self.shared.redis.queue_key();
        let result = self.shared.writer.lock().link.call(Again::Safe, |c| {
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

    /// Refuses an evicting Redis (unless allowed), once.
    fn check_eviction(&self) -> Result<(), Error> {
        if self.shared.checked.load(Ordering::Acquire) {
            return Ok(());
        }
        let config: Result<Vec<String>, Error> =
            self.shared.writer.lock().link.call(Again::Safe, |c| {
                ::redis::cmd("CONFIG").arg("GET").arg("maxmemory*").query(c)
            });
        // `CONFIG` renamed or not allowed (a managed service): nothing to check against.
        if let Ok(pairs) = config {
            let get = |name: &str| {
                pairs
                    .chunks(2)
                    .find(|p| p[0] == name)
                    .and_then(|p| p.get(1).cloned())
                    .unwrap_or_default()
            };
            let policy = get("maxmemory-policy");
            let limited = get("maxmemory").parse::<u64>().unwrap_or(0) > 0;
            if limited && policy != "noeviction" && !self.config.allow_eviction {
                return Err(Error::Config(format!(
                    "redis evicts keys (maxmemory-policy {policy}): the fleet needs \
                     noeviction (or Worker::allow_eviction)"
                )));
            }
        }
        self.shared.checked.store(true, Ordering::Release);
        Ok(())
    }

    /// Handles queue entries until `limit` has passed or [`Worker::stop`] was called, going
    /// on through what passes: Redis away or restarting, loading its data, out of memory,
    /// a key deleted under a blocking read, a lost lease, an entry that failed. Returns how
    /// many queue entries it handled.
    ///
    /// Blocks the current thread for up to `limit` (plus the run in progress then).
    ///
    /// # Errors
    /// Only what another try will not cure: [`Error::Config`] when Redis evicts keys (see
    /// [`Worker::allow_eviction`]), [`Error::Io`] when the queue stream itself is not one
    /// (a wrong key type) or the server refuses the fleet's commands (no permission).
    pub fn run_for(&self, limit: Duration) -> Result<u64, Error> {
        /// Reads ahead while it lives.
        struct Ahead<'a>(&'a AtomicUsize);
        impl Drop for Ahead<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.shared.reading_ahead.fetch_add(1, Ordering::AcqRel);
        let ahead = Ahead(&self.shared.reading_ahead);
        let result = self.run_until(Instant::now() + limit);
        drop(ahead);
        let mut handled = result.inspect_err(|_| {
            // The ends not waited for are acted on; the entries read ahead are left pending
            // under this worker: read again as its own at its next step.
            self.settle_later();
            self.shared.retry_own.store(true, Ordering::Release);
        })?;
        // The replies not waited for are read, and the entries read ahead are handled, not
        // left pending (bounded: a step may take claimed entries first).
        for _ in 0..=READ_AHEAD {
            handled += self.settle_later();
            if self.shared.ahead.lock().is_empty() {
                break;
            }
            handled += self.step(Duration::ZERO).unwrap_or(0);
        }
        Ok(handled + self.settle_later())
    }

    /// Reads every reply sent ahead and acts on those not waited for; returns how many
    /// ends among them landed.
    fn settle_later(&self) -> u64 {
        let _one = self.shared.busy.lock();
        // A failure is acted on as the replies it concerns are (`take_later`).
        let _ = self.shared.writer.lock().link.settle();
        self.take_later();
        self.shared.ended_later.swap(0, Ordering::AcqRel)
    }

    fn run_until(&self, deadline: Instant) -> Result<u64, Error> {
        let mut handled = 0;
        while !self.shared.stop.load(Ordering::Acquire) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.step(left.min(Duration::from_millis(500))) {
                Ok(n) => handled += n,
                Err(Error::Connection(_) | Error::Timeout(_)) => {
                    std::thread::sleep(left.min(Duration::from_millis(100)));
                }
                Err(Error::Io { message, .. }) if message.contains("NOGROUP") => {
                    // The queue came back without the group (no persistence, evicted,
                    // deleted): make it again.
                    let _ = self.ensure_group();
                }
                Err(e @ Error::Config(_)) if !self.shared.checked.load(Ordering::Acquire) => {
                    return Err(e);
                }
                // The rest concerned one conversation or entry, which is tried again or
                // moved to the dead letters.
                Err(Error::Io { message, .. }) if message.contains("queue stream") => {
                    return Err(Error::Io {
                        kind: std::io::ErrorKind::Other,
                        message,
                    });
                }
                Err(_) => {}
            }
        }
        Ok(handled)
    }

    /// Handles at most one batch of queue entries: first this worker's own entries left
    /// pending by a failure, then (every quarter of [`Worker::claim_after`]) those of dead
    /// workers, then one [`Worker::run_for`] read ahead, else waits up to `wait` for a new
    /// one. Returns how many it handled.
    ///
    /// Blocks the current thread up to `wait` plus the runs it does.
    ///
    /// # Errors
    /// [`Error::Config`] when Redis evicts keys (checked at the first step, see
    /// [`Worker::allow_eviction`]); [`Error::Connection`] or [`Error::Timeout`] when Redis
    /// cannot be reached, does not answer in time or cannot take writes now (out of
    /// memory); [`Error::Io`] when it answers with an error; [`Error::LeaseLost`] when the
    /// worker lost a conversation's lease during its run (it was paused longer than the
    /// lease; the run was aborted, nothing more of it was written, and its entry is left to
    /// the worker that holds the conversation now); the factory's error. Entries not
    /// acknowledged stay pending for another try.
    pub fn step(&self, wait: Duration) -> Result<u64, Error> {
        let _one = self.shared.busy.lock();
        self.check_eviction()?;
        let read = self.read_queue(wait);
        // Ends not waited for that the reads met are acted on now, not after the next wait.
        self.take_later();
        let (entries, reclaimed) = read?;
        let mut handled = 0;
        for (entry, begun) in entries {
            let conversation: String = entry.get("conversation").unwrap_or_default();
            match self.handle(&conversation, &entry.id, reclaimed, begun) {
                Ok(true) => handled += 1,
                Ok(false) => {}
                Err(Failure::Redis(e)) => {
                    if matches!(e, Error::Connection(_) | Error::Timeout(_)) {
                        self.shared.retry_own.store(true, Ordering::Release);
                    }
                    return Err(e);
                }
                // The entry's own failure (its factory's error, whatever it looks like):
                // counted, and tried again after `claim_after`, not at once.
                Err(Failure::Entry(e)) => return Err(e),
            }
        }
        Ok(handled + self.shared.ended_later.swap(0, Ordering::AcqRel))
    }

    /// The next queue entries: own pending ones after a failure, claimed ones of dead
    /// workers when due, one read ahead, else new ones.
    fn read_queue(&self, wait: Duration) -> Result<(Entries, bool), Error> {
        let shared = &self.shared;
        // What came back for ends not waited for: a failed one asks for this worker's own
        // entries again.
        self.take_later();
        let queue = shared.redis.queue_key();
        let mut writer = shared.writer.lock();
        let link = &mut writer.link;
        if shared.retry_own.swap(false, Ordering::AcqRel) {
            // Those read ahead are among them, and their starts sent ahead go with them.
            link.forget_begun();
            shared.ahead.lock().clear();
            shared.side.hold(Vec::new(), true);
            let own: Option<::redis::streams::StreamReadReply> = link.call(Again::Safe, |c| {
                ::redis::cmd("XREADGROUP")
                    .arg("GROUP")
                    .arg(GROUP)
                    .arg(&shared.name)
                    .arg("COUNT")
                    .arg(16)
                    .arg("STREAMS")
                    .arg(&queue)
                    .arg("0")
                    .query(c)
            })?;
            let own = ids(own);
            if !own.is_empty() {
                return Ok((own.into_iter().map(|e| (e, None)).collect(), true));
            }
        }
        let claim_every = (self.config.claim_after / 4).max(Duration::from_millis(10));
        let due = shared
            .last_claim
            .lock()
            .is_none_or(|t| t.elapsed() >= claim_every);
        if due {
            *shared.last_claim.lock() = Some(Instant::now());
            let claimed: ::redis::streams::StreamAutoClaimReply = link.call(Again::Safe, |c| {
                ::redis::cmd("XAUTOCLAIM")
                    .arg(&queue)
                    .arg(GROUP)
                    .arg(&shared.name)
                    .arg(millis(self.config.claim_after))
                    .arg("0-0")
                    .arg("COUNT")
                    .arg(16)
                    .query(c)
            })?;
            if !claimed.claimed.is_empty() {
                // Run before those in hand, they may share a conversation with one whose
                // start was sent ahead: those starts are of no use now.
                link.forget_begun();
                for held in shared.ahead.lock().iter_mut() {
                    held.begun = None;
                }
                let claimed = claimed.claimed.into_iter().map(|e| (e, None));
                return Ok((claimed.collect(), true));
            }
        }
        let mut ahead = shared.ahead.lock();
        if !ahead.is_empty() {
            // One at a time: while it runs, the starts of the next ones' runs go ahead.
            let held = ahead.iter().map(|h| h.entry.id.clone()).collect();
            shared.side.hold(held, true);
            let next = ahead.remove(0);
            return Ok((vec![(next.entry, next.begun)], false));
        }
        drop(ahead);
        let block = millis(wait).max(1);
        let timeout = shared.redis.call_timeout() + wait;
        // Not retried on a new connection: the entries it was given before the connection
        // broke are pending under this worker, and read again as its own at the next step.
        let read: Option<::redis::streams::StreamReadReply> = link
            .call(Again::Unsafe, |c| {
                c.set_read_timeout(Some(timeout))?;
                let reply = ::redis::cmd("XREADGROUP")
                    .arg("GROUP")
                    .arg(GROUP)
                    .arg(&shared.name)
                    .arg("COUNT")
                    .arg(1)
                    .arg("BLOCK")
                    .arg(block)
                    .arg("STREAMS")
                    .arg(&queue)
                    .arg(">")
                    .query(c);
                c.set_read_timeout(Some(shared.redis.call_timeout()))?;
                reply
            })
            .inspect_err(|_| shared.retry_own.store(true, Ordering::Release))
            .map_err(|e| match e {
                Error::Io { kind, message } if message.contains("WRONGTYPE") => Error::Io {
                    kind,
                    message: format!("{message} (the queue stream)"),
                },
                e => e,
            })?;
        Ok((ids(read).into_iter().map(|e| (e, None)).collect(), false))
    }

    /// The command that reads the next new queue entries without blocking, when the start
    /// of a run is to read ahead (a [`Worker::run_for`] is under way and not told to stop,
    /// and no read sent on `link` is still to be taken).
    ///
    /// It keeps two to four entries in hand: the next two to run (whose runs' starts go
    /// ahead while the current one runs, see `begin_ahead`) and up to two after them. It
    /// reads when two are left, two at once: one `XREADGROUP` for every two prompts (Redis
    /// walks the stream's node up to the group's place for each, 50,000 instructions of a
    /// prompt's 462,000 when it read one per prompt).
    pub(super) fn read_ahead(&self, link: &Link) -> Option<::redis::Cmd> {
        let shared = &self.shared;
        let held = shared.ahead.lock().len();
        if shared.reading_ahead.load(Ordering::Acquire) == 0
            || shared.stop.load(Ordering::Acquire)
            || held + 1 >= READ_AHEAD
            || link.reading()
        {
            return None;
        }
        let mut cmd = ::redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(&shared.name)
            .arg("COUNT")
            .arg(READ_AHEAD - held)
            .arg("STREAMS")
            .arg(shared.redis.queue_key())
            .arg(">");
        Some(cmd)
    }

    /// Whether the end of a run about to be sent trims the queue (every [`TRIM_EVERY`]th).
    pub(super) fn trims(&self) -> bool {
        self.shared
            .ends
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(TRIM_EVERY)
    }

    pub(super) fn ack(&self, entry: &str) -> Result<(), Error> {
        let queue = self.shared.redis.queue_key();
        self.shared.writer.lock().link.call(Again::Safe, |c| {
            scripts::eval(&scripts::ACK, &[&queue])
                .arg(GROUP)
                .arg(entry)
                .query::<()>(c)
        })
    }
}

/// Keeps what a read ahead returned; when its fate is unknown (no reply), the entries it
/// may have taken are pending under this worker, and read again as its own.
fn keep_ahead(shared: &Shared, read: Option<::redis::Value>) {
    match read.map(::redis::from_redis_value::<Option<::redis::streams::StreamReadReply>>) {
        Some(Ok(read)) => {
            let read = ids(read);
            // They wait while the conversation in hand runs on (its inbox may hold more):
            // kept fresh with its lease, past `claim_after` if need be.
            let held = read.iter().map(|e| e.id.clone()).collect();
            shared.side.hold(held, false);
            shared
                .ahead
                .lock()
                .extend(read.into_iter().map(|entry| Held { entry, begun: None }));
        }
        _ => shared.retry_own.store(true, Ordering::Release),
    }
}

fn ids(read: Option<::redis::streams::StreamReadReply>) -> Vec<::redis::streams::StreamId> {
    read.into_iter()
        .flat_map(|r| r.keys)
        .flat_map(|k| k.ids)
        .collect()
}
