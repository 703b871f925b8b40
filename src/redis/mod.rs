//! Agents beyond one machine, on Redis (or Valkey): a session store, live event streams
//! with remote mirrors, and a fleet of workers fed by a stream and a consumer group.
//! Behind the cargo feature `redis`.
//!
//! - [`Store`]: each conversation's transcript in Redis, one message per list element,
//!   appended at each `MessageEnd` ([`Store::transcript`] gives the listener), loaded by any
//!   process with [`Store::load`] to build or resume an agent. The same guarantee as
//!   [`crate::session`]: a message that ended and was acknowledged by Redis is never lost.
//! - [`EventLog`]: a listener that appends each event's native [wire](crate::wire) line to a
//!   capped stream per conversation; [`RemoteMirror`] follows that stream from another
//!   process (blocking reads, resumable from the last entry id it saw) and folds the lines
//!   with [`crate::wire::Mirror`], so it rebuilds the snapshots the agent published.
//! - [`Queue`] and [`Worker`]: prompts, steering, follow-ups and aborts for a conversation
//!   are entries in that conversation's inbox stream; a fleet of workers reads a shared
//!   queue stream through a consumer group, runs each conversation where it holds the
//!   conversation's lease, and acknowledges after `AgentEnd`. A dead worker's entries are
//!   claimed by another after a timeout, which resumes from the stored transcript.
//!
//! Everything blocks the calling thread (the `redis` crate's blocking client, no async
//! runtime); every call has a timeout ([`Redis::timeout`]), so an unreachable or restarting
//! server gives a typed error ([`Error::Connection`], [`Error::Timeout`]) and never a hang.
//!
//! ```no_run
//! use pagent::llm::{Faux, FauxReply};
//! use pagent::redis::{Queue, Redis, Worker};
//! use pagent::Agent;
//! use std::time::Duration;
//!
//! let redis = Redis::open("redis://127.0.0.1:6379/")?;
//! // A client somewhere: a prompt for conversation "alice".
//! Queue::new(&redis).prompt("alice", "Hello")?;
//! // A worker somewhere else: builds the conversation's agent from its stored transcript.
//! let worker = Worker::new(&redis, "worker-1", |_conversation, messages| {
//!     Agent::builder()
//!         .provider(Faux::default().reply(FauxReply::text("Hi!")))
//!         .messages(messages)
//!         .build()
//! })?;
//! worker.run_for(Duration::from_secs(10))?;
//! # Ok::<(), pagent::Error>(())
//! ```
//!
//! # What the fleet needs from Redis
//! - **One Redis server** (Redis 7 or Valkey 7.2 and later; a primary with replicas is
//!   fine). The fleet's scripts touch a conversation's keys together with the fleet-wide
//!   queue and dead-letter streams (ending a run releases the lease and acknowledges the
//!   queue entry in one atomic step), which Redis Cluster does not allow across slots: the
//!   fleet does not run on Redis Cluster. Beyond what one server carries, run several
//!   fleets, each on its own server.
//! - **`maxmemory-policy noeviction`** (the default) when `maxmemory` is set. An evicted key
//!   loses what the guarantees rest on (a lease evicted lets two workers run a conversation,
//!   a `meta` evicted runs its last prompt again, a transcript evicted starts it over), so
//!   a [`Worker`] checks the policy at its first step (`CONFIG GET`, where the server allows
//!   it) and refuses to run on an evicting server unless told to
//!   ([`Worker::allow_eviction`]). With `noeviction`, a full Redis refuses writes (`OOM`):
//!   workers wait that out, and go on once memory is freed.
//! - Persistence as durable as the transcripts must be (`appendonly yes`; `appendfsync
//!   always` for every acknowledged write).
//!
//! # Keys
//! All keys start with a prefix ([`Redis::prefix`], default `pagent`). A conversation's keys
//! share the hash tag `{<conversation>}`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `pagent:{c}:messages` | list | the transcript, one message (JSON, the session format) per element |
//! | `pagent:{c}:events` | stream, capped | the native wire lines of the events (field `lines`: one or more lines, each ending in `\n`; an [`EventLog`] writes one event per entry, a [`Worker`] the events of a batch of writes) |
//! | `pagent:{c}:inbox` | stream | requests: field `kind` (`prompt`, `steer`, `follow_up`, `abort`), `text`, `request` (the request's own id) |
//! | `pagent:{c}:meta` | hash | `done`: the last inbox entry handled; `started`: the inbox entry whose prompt is the last one in the transcript; `wrote`: the last write batch of the lease (`<token> <n>`); `failed`: the entry failing and how often; `ended`: the last lease released |
//! | `pagent:{c}:lease` | string, expiring | the token of the worker that runs the conversation |
//! | `pagent:{queue}` | stream + group `workers` | one entry per request: field `conversation`; handled entries are trimmed in whole stream nodes (see below) |
//! | `pagent:{dead}` | stream | dead letters: fields `conversation`, `entry`, `kind`, `text`, `error`, `failures` |
//!
//! A conversation's name is any string without `{` or `}` (every call refuses them with
//! [`Error::Config`]). The queue is the one key every worker reads: its entries only say
//! "look at conversation c", each a few dozen bytes. A handled entry is acknowledged, and
//! at every 16th end of a run a worker trims the queue (`XTRIM MINID ~`) up to the oldest
//! entry still pending under any worker: handled entries go in whole stream nodes, not one
//! by one, so the queue's length (`XLEN`) counts up to a node of them
//! (`stream-node-max-entries`, 100 by default) and 15 more per worker beside what is left
//! to do. What is left to do is the group's pending count plus its lag
//! (`XINFO GROUPS`).
//!
//! # Guarantees
//! - **One run per conversation at a time, across the fleet, and a worker that lost its
//!   lease writes nothing anywhere.** A worker runs a conversation only while it holds the
//!   conversation's lease (`SET PX`), renewed every third of [`Worker::lease`]. Every write
//!   of a run, to the transcript, to the event stream and to `meta`, is a script that first
//!   checks the lease token: a worker that lost its lease (paused longer than the lease)
//!   writes nothing more, its run is aborted, and its error is [`Error::LeaseLost`]. The
//!   messages and the event lines of a run go in numbered batches, each applied whole or
//!   not at all and only after the one before it, so the event stream never holds a message
//!   the transcript does not, and a mirror never shows one prompt answered twice.
//! - **Connections checked, not trusted.** A connection that sat idle is checked before it
//!   carries a command (a server `timeout`, a NAT or a restart closes connections without
//!   a sign), and a dead one is replaced before anything was sent on it. A write whose
//!   connection broke mid-way is sent again on a new one: every write of a worker, and
//!   every [`Queue`] request, applies once however often it is sent; writes that could not
//!   be sent again are given up with their run, and never land later. A worker that failed
//!   takes its own pending entries up again at its next step, and the lease its broken run
//!   left (one it could not drop while Redis was away or full), never waiting
//!   [`Worker::claim_after`] or [`Worker::lease`] for itself.
//! - **Requests of one conversation in order.** The inbox is a stream: a worker takes its
//!   entries in id order after `done`. Steering, follow-ups and aborts that arrive while a
//!   run is active (once it has run for 5 ms: a request that comes within a shorter run
//!   waits for it to end) are routed to it; arriving while no run is active, a steer or
//!   follow-up is run as a prompt and an abort is skipped. A steer or follow-up handed to a
//!   run is marked done only once the run took it: one that came as the run ended is run
//!   then, in the same agent; one left queued by an abort runs after it, as a prompt.
//! - **At least once, answered once.** A queue entry is acknowledged only after the
//!   conversation's inbox was drained up to it and each run ended (`AgentEnd`) with `done`
//!   set to its inbox entry id. A worker that dies leaves its queue entries pending; after
//!   [`Worker::claim_after`] (longer than the lease, so the lease has expired) another worker
//!   claims them (`XAUTOCLAIM`), takes the lease and reads `done` and `started`: an entry at
//!   or before `done` is never run again (duplicates are detected by entry id); an entry
//!   equal to `started` already has its prompt in the transcript, so the new worker resumes
//!   with [`Agent::continue_run`](crate::Agent::continue_run) (which runs nothing when the
//!   answer was already stored) instead of prompting again. A transcript thus never loses an
//!   ended message and never gets a second answer to one prompt. What is at least once is
//!   the model call of a reply that was streaming when its worker died (it is asked
//!   again), and a steering or follow-up message that the dead worker had handed to its
//!   run (the resumed run is handed it again).
//! - **What passes is waited out.** Redis away or restarting, `LOADING` its data, `BUSY`
//!   with a script, `TRYAGAIN`, out of memory (`OOM`), a stream deleted or evicted under a
//!   blocking read (`UNBLOCKED`), the consumer group gone with the data (`NOGROUP`): each is
//!   a retryable error ([`Error::Connection`]) that [`Worker::run_for`] and
//!   [`RemoteMirror::follow_run`] wait out. `run_for` returns only for what another try
//!   cannot cure (an evicting Redis, a queue key of the wrong type).
//! - **Poison entries end.** An inbox entry whose agent cannot be built (the factory returns
//!   an error or panics: the panic is caught) frees the lease and is tried again after
//!   [`Worker::claim_after`]; at its [`Worker::max_failures`]th failure in a row it is moved
//!   to the dead-letter stream with its error, recorded done, and the conversation goes on.
//! - **Mirrors never fold a stream with a hole.** A [`RemoteMirror`] that fell behind the
//!   stream's cap, or follows a stream whose data was lost, gets [`Error::Behind`] (saying
//!   how many entries it missed, when it knows) and [`RemoteMirror::resync`]s from the store.
//! - **Acknowledged writes survive what Redis makes durable.** A message is in the
//!   transcript once its write was acknowledged; whether that survives a restart of Redis
//!   is Redis's persistence setting (`appendonly yes`, `appendfsync always` for every write).
//!
//! # Capacity
//! Round trips per prompt, for a worker on a short reply (one prompt per queue entry), with
//! or without the event log: none waited for while the queue has work (one for the first
//! prompt, three when it waits for some). One script takes the lease and reads `meta`, the
//! inbox and the transcript; one script appends the run's last batch of writes, checks
//! that the earlier batches landed, records the run done, releases the lease and
//! acknowledges the queue entry. While one run goes on, the scripts that start the next
//! two entries' runs (each of a conversation of its own) are sent ahead (at each run's
//! start, those not sent yet), and [`Worker::run_for`] reads the next queue entries in
//! the same piece (`XREADGROUP` without blocking, two at once when two are left in hand, so that
//! every other start reads and two to four are in hand; when there is none, the next step
//! waits for one with a blocking `XREADGROUP`): Redis runs them meanwhile, the next run
//! starts at once (its lease was taken then, and is renewed from its start; a reply older
//! than a third of the lease, when the runs before took that long, is not trusted: the
//! script is sent again), and Redis has the start of the run after it to run already, so
//! it never waits for the worker between two runs. The script that ends a run
//! is then not waited for: the next run starts while Redis ends this one, and its reply,
//! read with the next ones, is acted on then (an end that failed frees the lease and its
//! entry is tried again, as when it is waited for; inbox entries that came in the
//! meantime hand the conversation back to the queue, announced again behind what is
//! queued, where an end waited for runs them at once). So a prompt waits for no round trip
//! of its own, and Redis's work for the start and the end of a run overlaps the worker's
//! for the runs beside it. The first run of a `run_for`, and a run whose next entry is of
//! the same conversation or not read yet, waits for its end.
//! The earlier batches (a message that waited 5 ms; with the event log, the
//! events of a reply that streams on longer than that, at most 5 ms apart, the first at
//! once when it comes 5 ms or more after the run's start, so that mirrors see it start
//! then) are sent ahead without waiting, and the last script goes behind them without
//! waiting for their replies either. What is not sent yet when the run ends goes with that
//! last script: the whole run, its events too, on a fast model (one that answers within
//! 5 ms), else at least the final reply, the turn's end and `AgentEnd`. A
//! [`Worker::on_end`] callback adds a round trip (it is called once the run's writes
//! landed, before the end is recorded), and so does
//! [`Worker::step`] called on its own (it reads no entry ahead: the one it would read
//! could wait in its hands until the next call). A run that calls tools also waits for
//! its batch at each reply with tool calls (tools run only while the lease is known to be
//! ours). A streaming reply's deltas go in batches at most 5 ms apart: one script call per
//! batch, not per event.
//!
//! Counted with `INFO commandstats` over `cargo run --release --features redis --example
//! fleet -- bench 1 2000 [nolog]` (one worker, 2,000 prompts, each its own conversation,
//! Faux): per prompt, half an `XREADGROUP` and two scripts with the event log off (14.6
//! commands in all, the scripts' own counted; 16.5 with the queue trimmed at every end, 17
//! with an `XREADGROUP` per prompt too), and the same two scripts with it on (15.6
//! commands: the run's events go in one `XADD` within the end; 21.6 when the prompt and the
//! reply's first events went in a script of their own, 23.5 and 24 as before, 36.5 with
//! one `XADD` per event). The
//! scripts go by their SHA1 (`EVALSHA`: each connection loads them when it opens, and a
//! flushed script cache is loaded again), so a call carries its arguments, not the
//! script's 1-2 KB of text for Redis to hash again; the script that starts a run
//! runs four commands on a free conversation, the one that ends it eight (the transcript's
//! messages with one `RPUSH`, `meta` read with one `HMGET` and written with one `HSET`, the
//! queue entry acknowledged), and two more at every 16th end of a worker, which trims the
//! queue in whole nodes (an `XDEL` of the queue's first entry made Redis scan the node for
//! the next one, a trim of whole nodes scans nothing; the oldest pending entry, which the
//! trim must keep, is found with an `XPENDING`: the two cost Redis about 38,000
//! instructions, a tenth of a prompt, when every end trimmed). It was 16 / 35 commands with an `XDEL` per entry, 25 / 43.5 before
//! `EVALSHA`, and four round trips with 27 / 49.5 before the end took the last writes and
//! the next entry along.
//!
//! Throughput, one prompt per queue entry, Faux, Redis 7.0 on a quiet 2-core virtual
//! machine (Intel Xeon; `vmstat` 100% idle before the rounds). After a `FLUSHALL`, each of
//! 5 rounds ran, for W = 1, 2 and 4, `redis-benchmark -p PORT -c 1` and `-c W -n 20000 -q
//! XADD rb '*' f v` (the stream deleted after each), then `fleet -- bench W 3000` and
//! `fleet -- bench W 3000 nolog`, then both `XADD`s again; the table gives the medians, the
//! range in brackets (the CPU column as the bench prints it, median of the same runs: the
//! whole process, the bench's own polling included, and Redis). `XADD -c 1` ran at 20,356/s
//! (17,746-22,002) over the round's 30 runs:
//!
//! | workers | event log | commands per prompt | prompts/s (5 rounds) | `XADD -c W` /s | prompts / `XADD -c W` | prompts / `XADD -c 1` | CPU per prompt: process, Redis |
//! |---|---|---|---|---|---|---|---|
//! | 1 | off | 14.6 | **17,359** (16,206-17,988) | 20,121 | 86% | 85% | 30 µs, 39 µs |
//! | 1 | on | 15.6 | **14,533** (13,850-15,153) | 20,121 | 72% | 71% | 37 µs, 48 µs |
//! | 2 | off | 14.6 | **31,755** (26,237-32,874) | 38,648 | 82% | 156% | 23 µs, 30 µs |
//! | 2 | on | 15.6 | **25,829** (17,507-26,406) | 38,648 | 67% | 127% | 23 µs, 37 µs |
//! | 4 | off | 14.6 | **31,728** (27,126-33,094) | 96,156 | 33% | 156% | 23 µs, 30 µs |
//! | 4 | on | 15.6 | **26,588** (22,735-29,632) | 96,156 | 28% | 131% | 27 µs, 36 µs |
//!
//! One worker's figure moves with what ran before it: in ten more rounds that day without
//! the `FLUSHALL` and the deletes (the `XADD` stream grew to 5 million entries), it ran
//! 17,889 / 15,269 prompts/s (log off / on), 88% / 76% of `XADD -c 1`, and alternating with
//! the build before it, with no `redis-benchmark` between, 17,941-19,193 / 17,577-18,319.
//! The build before a prompt stopped waiting for its run's end and for the start of the
//! next run (three rounds the same day, the stream kept) ran 11,795 / 8,893 with one worker
//! (59% / 44% of `XADD -c 1`), 24,377 / 15,619 with two and 28,340 / 19,363 with four. On
//! the same machine under load on an earlier day (its host took a third of its CPU time,
//! and figures swung by up to five times between rounds a minute apart), an earlier build
//! ran 2,860 / 2,450 prompts/s with one worker against `XADD` at 20,400/s: what a build
//! gains is told apart by the instruction counts below, which no load disturbs.
//!
//! Counted in instructions (callgrind, which no load disturbs; the difference of `bench 1
//! 1300` and `bench 1 300` on a `redis-server` under callgrind): Redis runs 389,000 per
//! prompt with the log off (433,000 with the queue trimmed at every end, -10%; 462,000 with
//! an `XREADGROUP` per prompt too, -6%; 535,000 before `EVALSHA`) and 512,000 with it on
//! (551,000, -7%; 581,000, -5%; 716,000 with an `XADD` per event, 862,000 before
//! `EVALSHA`), the prompt's queueing and the bench's reading back included.
//! Of that, when it read one entry per prompt, the prompt's three scripts and its
//! `XREADGROUP` cost 350,000 with the log off and 614,000 with it on (an `XADD` per event):
//! the commands the scripts run 77,000, the Lua around them 207,000 (each `EVALSHA` about
//! 7,700 before its script runs, each argument of a call about 1,200, each `redis.call`
//! about 2,600 beside the command's own work: measured on one call each under callgrind),
//! the `XREADGROUP` 50,000 (Redis walks the stream node from its start to the group's
//! position; half of it now, with two entries read at once). The
//! worker's thread ran 169,000 per prompt with the log off, a quarter of it in the `redis`
//! crate's reply parser; its connections now read replies with a small RESP2 reader of
//! this module's own (a malformed, cut or oversized reply is an error that closes the
//! connection, never a panic or an allocation of what was only announced), and key names
//! are put together without `format!`: it runs 118,000 (-30%; callgrind on the worker's
//! thread, `bench 1 700` less `bench 1 200`), a quarter of it the agent factory, a quarter
//! the run, an eighth reading replies, a tenth packing commands.
//!
//! A prompt's round trips are 2.5 commands from outside (the two scripts and half a read),
//! none of them waited for, so the floor they imply, `XADD -c 1` over 2.5, is about 8,100
//! prompts/s on this machine: every row of the table is over twice that. Even measured
//! against `XADD -c 1` itself (a whole prompt against one bare round trip), one worker
//! reaches 85% with the log off and 71-76% with it on, and two or four workers more than
//! one client's `XADD` rate. What bounds one worker is Redis's CPU: one bare `XADD` round
//! trip costs Redis about 11,400 instructions (callgrind, over `redis-benchmark -c 1
//! XADD`), a prompt (queued, run, read back) about 34 times that (40 before the two
//! changes above), and Redis's CPU per prompt is 30-39 µs with the log off and 36-48 µs
//! with it on (the table), over half of it in the kernel (`perf`: loopback sends and
//! wake-ups), so one Redis serves at most about 25,000-33,000 prompts/s of this kind
//! whatever its clients do (two workers reached 31,755, at best 32,874). The prompt's own commands
//! cost Redis about 31 bare `XADD` round trips of work (350,000 instructions when each end
//! trimmed the queue and read one entry; about 280,000 now, by the totals above), three
//! fifths of it Lua around the commands: the scripts are what fence every write and keep
//! each step atomic, and Redis Functions (`FCALL`) run through the same Lua calling code in
//! Redis 7, so they would not cost less. A prompt must at least take the lease and read the
//! conversation (one script), record it done, release the lease and acknowledge its queue
//! entry (a second), and read the next entry: 2.5 commands from outside and 12 inside the
//! scripts, each of them dearer than the bare `XADD`. What is left is CPU on both sides,
//! the worker's (its Redis client first) and Redis's scripts and sockets, which now
//! overlap: a prompt waits for neither its end nor the next start.
//!
//! Memory per conversation (`MEMORY USAGE`, Redis 7, measured with `fleet memory`):
//! - the transcript: the messages' JSON plus a few bytes each (about 3.2 KB for 10 short
//!   turns: 20 messages of about 150 bytes);
//! - the inbox: a stream costs about 4.7 KB even when nearly empty (one listpack node,
//!   `stream-node-max-bytes` 4096); the worker trims it up to `done` after each run;
//! - `meta` about 170 bytes, the lease (while running) about 100;
//! - the event stream: about 200 bytes per event, up to [`EventLog::max_len`] events
//!   (10,000 by default: about 2 MB while a long run is followed; 35 KB after 10 short
//!   turns). Lower the cap, or delete the stream after the run when no one follows it, for
//!   many idle conversations.
//!
//! So an idle conversation of 10 short turns without its event stream takes about 8 KB: a
//! million of them fit in 8 GB.

mod conn;
mod conversation;
mod events;
mod fleet;
mod queue;
mod scripts;
mod side;
mod store;
mod wire;
mod writer;

pub use events::{EventLog, RemoteMirror};
pub use fleet::Worker;
pub use queue::Queue;
pub use store::{Store, Transcript};

use std::fmt;
use std::time::Duration;

use crate::error::{Error, TimeoutPhase};

/// Where Redis is and how long to wait for it: a cheap `Clone` handle that every type of
/// this module is made from. Opening it does not connect; each user opens its own
/// connections.
#[derive(Clone)]
pub struct Redis {
    client: ::redis::Client,
    prefix: String,
    timeout: Duration,
}

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The address only: a URL may hold a password.
        let info = self.client.get_connection_info();
        f.debug_struct("Redis")
            .field("addr", &info.addr().to_string())
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Redis {
    /// A handle for the server at `url` (`redis://host:port/db`, `redis://:password@host/`,
    /// `redis+unix:///path`; no TLS). Does not connect. Connections speak RESP2 whatever
    /// the URL asks (`?protocol=resp3`).
    ///
    /// # Errors
    /// [`Error::Config`] when the URL does not parse.
    pub fn open(url: &str) -> Result<Redis, Error> {
        let client = ::redis::Client::open(url).map_err(|e| {
            Error::Config(format!(
                "redis url: {}",
                e.to_string().replace(url, "<url>")
            ))
        })?;
        Ok(Redis {
            client,
            prefix: "pagent".into(),
            timeout: Duration::from_secs(5),
        })
    }

    /// Starts every key with `prefix` (several independent fleets on one server). Defaults
    /// to `pagent`.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Redis {
        self.prefix = prefix.into();
        self
    }

    /// How long to wait to connect and for each reply (a blocking read waits this much longer
    /// than it asked the server to block). Defaults to 5 seconds.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Redis {
        self.timeout = timeout;
        self
    }

    /// A new connection, with the timeouts set, that loaded `scripts`.
    pub(crate) fn connect_with(&self, scripts: &[&scripts::Script]) -> Result<wire::Wire, Error> {
        let mut conn = wire::Wire::connect(self.client.get_connection_info(), self.timeout)
            .map_err(|e| map_err(&e, true))?;
        scripts::load(&mut conn, scripts).map_err(|e| map_err(&e, false))?;
        Ok(conn)
    }

    pub(crate) fn call_timeout(&self) -> Duration {
        self.timeout
    }

    /// The key `<prefix>:{<conversation>}:<what>`.
    pub(crate) fn key(&self, conversation: &str, what: &str) -> String {
        // Not `format!`: a worker makes a score of keys per prompt, and formatting them
        // cost it a seventh of its instructions.
        [self.prefix.as_str(), ":{", conversation, "}:", what].concat()
    }

    /// The fleet's queue stream.
    pub(crate) fn queue_key(&self) -> String {
        [self.prefix.as_str(), ":{queue}"].concat()
    }

    /// The fleet's dead-letter stream.
    pub(crate) fn dead_key(&self) -> String {
        format!("{}:{{dead}}", self.prefix)
    }
}

/// The error codes of conditions that pass, which Redis says to wait out: a server
/// `LOADING` its data after a restart, `BUSY` running a long script, `TRYAGAIN` and
/// `MASTERDOWN`/`CLUSTERDOWN` during a failover, `READONLY` on a replica just demoted,
/// `OOM` when `maxmemory` is reached (with `noeviction`: until memory is freed), and
/// `UNBLOCKED` when the key a blocked read waited on was deleted or evicted.
const PASSING: [&str; 9] = [
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "READONLY",
    "OOM",
    "UNBLOCKED",
    "NOSCRIPT",
];

/// A Redis error as one of ours: no connection, a dropped one, or a condition that passes
/// (see [`PASSING`]: a server not ready yet, out of memory, a key deleted under a blocked
/// read) is [`Error::Connection`] (retryable: workers and mirrors wait it out), no reply in
/// time is [`Error::Timeout`], anything else (a server error reply such as `WRONGTYPE`, a
/// reply of an unexpected shape) is [`Error::Io`] with its text.
pub(crate) fn map_err(e: &::redis::RedisError, connecting: bool) -> Error {
    if e.is_timeout() {
        Error::Timeout(if connecting {
            TimeoutPhase::Connect
        } else {
            TimeoutPhase::FirstByte
        })
    } else if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || matches!(e.retry_method(), ::redis::RetryMethod::WaitAndRetry)
        || e.code().is_some_and(|code| PASSING.contains(&code))
    {
        Error::Connection(format!("redis: {e}"))
    } else {
        Error::Io {
            kind: std::io::ErrorKind::Other,
            message: format!("redis: {e}"),
        }
    }
}

/// Refuses a conversation name with `{` or `}`: they would move the hash tag that keeps a
/// conversation's keys together.
pub(crate) fn check_name(conversation: &str) -> Result<(), Error> {
    if conversation.contains(['{', '}']) {
        return Err(Error::Config(format!(
            "conversation name {conversation:?}: `{{` and `}}` are not allowed"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversations_keys_share_its_hash_tag() {
        let redis = Redis::open("redis://127.0.0.1:1/").unwrap().prefix("p");
        assert_eq!(redis.key("alice", "messages"), "p:{alice}:messages");
        assert_eq!(redis.key("alice", "lease"), "p:{alice}:lease");
        assert_eq!(redis.queue_key(), "p:{queue}");
    }

    #[test]
    fn a_server_still_loading_its_data_is_a_retryable_error() {
        use ::redis::{ErrorKind, RedisError, ServerErrorKind};
        for kind in [
            ServerErrorKind::BusyLoading,
            ServerErrorKind::TryAgain,
            ServerErrorKind::MasterDown,
            ServerErrorKind::ClusterDown,
        ] {
            let e = RedisError::from((ErrorKind::Server(kind), "not ready"));
            assert!(matches!(map_err(&e, false), Error::Connection(_)), "{e}");
        }
        let e = RedisError::from((ErrorKind::Server(ServerErrorKind::ResponseError), "ERR x"));
        assert!(matches!(map_err(&e, false), Error::Io { .. }), "{e}");
    }

    #[test]
    fn debug_shows_the_address_not_the_password() {
        let redis = Redis::open("redis://:secret@127.0.0.1:6380/").unwrap();
        let shown = format!("{redis:?}");
        assert!(shown.contains("127.0.0.1:6380"), "{shown}");
        assert!(!shown.contains("secret"), "{shown}");
    }
}
