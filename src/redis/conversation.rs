//! One conversation in a worker's hands: its lease taken and `meta`, inbox and transcript
//! read in one script, its inbox entries run in order (each run's writes fenced, see
//! [`super::writer`]), a failing entry counted or dead-lettered, and the end recorded with
//! the lease released and the queue entry acknowledged.

use std::sync::atomic::Ordering;

use super::conn::Again;
use super::fleet::{GROUP, Worker};
use super::side::{Follow, millis};
use super::writer::{self, Batch, Ended, Later, RunWrites};
use super::{check_name, scripts};
use crate::agent::guard;
use crate::error::Error;
use crate::event::RunStopReason;
use crate::message::Message;

/// How many starts of the next entries' runs a worker has sent ahead at most: two, so that
/// while one run goes on Redis has the start of the one after next to run, and never waits
/// for the worker between two runs.
const BEGUN_AHEAD: usize = 2;

/// How many transcript elements the script that starts a conversation returns; a longer
/// transcript is read on in pages of this size.
const PAGE: usize = 500;

/// How a conversation's handling ended, short of success.
pub(super) enum Failure {
    /// The inbox entry could not run (the factory failed or panicked): counted against it.
    Entry(Error),
    /// Redis failed, or the lease was lost: the entry is tried again, as it is.
    Redis(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Redis(e)
    }
}

/// What follows the end of a run.
enum After {
    /// The lease was released and the queue entry acknowledged.
    Released,
    /// Inbox entries left to do (the lease is kept).
    More(Vec<::redis::streams::StreamId>),
    /// Sent without waiting: its reply comes later ([`Worker::take_later`]).
    NotWaited,
}

/// What the end of a run ([`scripts::END`]) answered: `None` released (or handed back),
/// else the inbox entries left to do.
fn end_status(reply: ::redis::Value) -> Result<Option<Vec<::redis::streams::StreamId>>, Error> {
    let reply: Vec<::redis::Value> = ::redis::from_redis_value(reply).map_err(|e| Error::Io {
        kind: std::io::ErrorKind::InvalidData,
        message: format!("redis: the end of a run answered {e}"),
    })?;
    let status = reply
        .first()
        .and_then(|v| ::redis::from_redis_value_ref::<i64>(v).ok());
    match status {
        Some(1 | 2) => Ok(None),
        Some(0) => {
            let more: ::redis::streams::StreamRangeReply = reply
                .get(1)
                .and_then(|v| ::redis::from_redis_value_ref(v).ok())
                .unwrap_or_default();
            Ok(Some(more.ids))
        }
        Some(-1) => Err(Error::LeaseLost),
        _ => Err(Error::Io {
            kind: std::io::ErrorKind::Other,
            message: "redis: a write of the run did not land".into(),
        }),
    }
}

/// What the script that starts a conversation read.
struct Begun {
    started: String,
    inbox: Vec<::redis::streams::StreamId>,
    messages: Vec<Message>,
}

impl Worker {
    /// Handles one queue entry: leases the conversation and drains its inbox, then
    /// acknowledges. Returns false when the entry was left pending, or when the end of its
    /// run was not waited for (it is counted once its reply is read, see
    /// [`Worker::take_later`]).
    pub(super) fn handle(
        &self,
        conversation: &str,
        entry: &str,
        reclaimed: bool,
        begun: Option<String>,
    ) -> Result<bool, Failure> {
        let shared = &self.shared;
        let redis = &shared.redis;
        if check_name(conversation).is_err() {
            // Not one a `Queue` sends: nothing to run.
            self.ack(entry)?;
            return Ok(true);
        }
        let key = |what| redis.key(conversation, what);
        // The start of this entry's run may have been sent ahead, under a token of its own,
        // while the runs before went on.
        let token = begun.unwrap_or_else(|| self.new_token());
        let begun = self.begin(conversation, &token);
        // The run before's end, read on the way, is acted on first.
        self.take_later();
        let Some(begun) = begun? else {
            // Another worker holds the conversation. It holds an entry of its own that it
            // acknowledges only after draining the inbox, which this request is already in:
            // a new entry can go. A reclaimed one stays pending: its holder may be the dead
            // worker whose lease has not expired yet, and it comes back after `claim_after`.
            if reclaimed {
                return Ok(false);
            }
            self.ack(entry)?;
            return Ok(true);
        };
        shared.side.begin(Follow {
            inbox: key("inbox"),
            lease: key("lease"),
            token: token.clone(),
            entry: entry.into(),
            lease_for: self.config.lease,
        });
        let drained = self.drain(conversation, &token, entry, begun);
        let client = shared.side.end();
        let mut writer = shared.writer.lock();
        if let Some(id) = client {
            writer.link.unblock(id);
        }
        drop(writer);
        match drained {
            Ok(waited) => Ok(waited),
            Err(Failure::Entry(e)) => Err(Failure::Entry(e)),
            Err(Failure::Redis(e)) => {
                if !matches!(e, Error::LeaseLost) {
                    self.drop_lease(conversation, &token);
                }
                Err(Failure::Redis(e))
            }
        }
    }

    /// Frees the conversation at once when the lease `token` is still ours (after a Redis
    /// failure: it may not be reachable; the entry is tried again).
    fn drop_lease(&self, conversation: &str, token: &str) {
        let lease = self.shared.redis.key(conversation, "lease");
        let _ = self.shared.writer.lock().link.call(Again::Safe, |c| {
            scripts::eval(&scripts::DROP_LEASE, &[&lease])
                .arg(token)
                .query::<i64>(c)
        });
    }

    /// Acts on the replies of ends not waited for read so far: one that failed frees its
    /// lease (its entry is tried again, as when its end is waited for). Those that landed
    /// are counted by the next [`Worker::step`] (`ended_later`).
    pub(super) fn take_later(&self) {
        let later = self.shared.writer.lock().link.take_later();
        let mut ended = 0;
        for Later { run, reply } in later {
            // An end not waited for hands the conversation back rather than keep the
            // lease for entries left to do: one that kept it did not end the run.
            let reply = reply.and_then(end_status).and_then(|more| match more {
                None => Ok(()),
                Some(_) => Err(Error::Io {
                    kind: std::io::ErrorKind::Other,
                    message: "redis: the end of a run kept the lease".into(),
                }),
            });
            match reply {
                Ok(()) => ended += 1,
                Err(Error::LeaseLost) => {}
                Err(e) => {
                    if matches!(e, Error::Connection(_) | Error::Timeout(_)) {
                        self.shared.retry_own.store(true, Ordering::Release);
                    }
                    self.drop_lease(&run.conversation, &run.token);
                }
            }
        }
        self.shared.ended_later.fetch_add(ended, Ordering::AcqRel);
    }

    /// Takes the lease and reads `meta`, the inbox after `done` and the transcript, in one
    /// round trip (more for a transcript longer than a page). `None` when another worker
    /// holds the lease.
    ///
    /// When this start was sent ahead under `token` ([`Worker::begin_ahead`]) less than a
    /// third of the lease ago, its reply is taken instead: the lease it took holds at least
    /// two thirds of the lease longer, so no other worker wrote the conversation since (and
    /// this worker ran only the conversation it had in hand, another one). Older, it is
    /// sent again (with the same token: it takes the lease again, or keeps it).
    fn begin(&self, conversation: &str, token: &str) -> Result<Option<Begun>, Error> {
        let redis = &self.shared.redis;
        let keys = ["lease", "meta", "inbox", "messages"].map(|w| redis.key(conversation, w));
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut writer = self.shared.writer.lock();
        let link = &mut writer.link;
        let reply: Vec<::redis::Value> = match link.take_begun(token, self.config.lease / 3)? {
            Some(reply) => ::redis::from_redis_value(reply).map_err(|e| Error::Io {
                kind: std::io::ErrorKind::InvalidData,
                message: format!("redis: the start of a run answered {e}"),
            })?,
            None => link.call(Again::Safe, |c| self.begin_cmd(&keys, token).query(c))?,
        };
        let int = |v: Option<&::redis::Value>| {
            v.and_then(|v| ::redis::from_redis_value_ref::<i64>(v).ok())
                .unwrap_or(0)
        };
        let text = |v: Option<&::redis::Value>| {
            v.and_then(|v| ::redis::from_redis_value_ref::<String>(v).ok())
                .unwrap_or_default()
        };
        if int(reply.first()) != 1 {
            return Ok(None);
        }
        let inbox: ::redis::streams::StreamRangeReply = reply
            .get(4)
            .and_then(|v| ::redis::from_redis_value_ref(v).ok())
            .unwrap_or_default();
        let mut elements: Vec<Vec<u8>> = reply
            .get(5)
            .and_then(|v| ::redis::from_redis_value_ref(v).ok())
            .unwrap_or_default();
        // A full page may have more after it.
        let mut last = elements.len();
        while !inbox.ids.is_empty() && last == PAGE {
            let start = elements.len();
            let page: Vec<Vec<u8>> = link.call(Again::Safe, |c| {
                ::redis::cmd("LRANGE")
                    .arg(keys[3])
                    .arg(start)
                    .arg(start + PAGE - 1)
                    .query(c)
            })?;
            last = page.len();
            elements.extend(page);
        }
        // Elements that are not a message are skipped, as `Store::load` skips them.
        let messages = elements
            .iter()
            .filter_map(|e| serde_json::from_slice::<Message>(e).ok())
            .collect();
        Ok(Some(Begun {
            started: text(reply.get(2)),
            inbox: inbox.ids,
            messages,
        }))
    }

    /// The script that starts a run of the conversation of `keys` under `token`.
    fn begin_cmd(&self, keys: &[&str], token: &str) -> ::redis::Cmd {
        let mut cmd = scripts::eval(&scripts::BEGIN, keys);
        cmd.arg(token)
            .arg(millis(self.config.lease))
            .arg(PAGE)
            .arg(&self.shared.owner);
        cmd
    }

    /// A lease token no other run has.
    fn new_token(&self) -> String {
        let shared = &self.shared;
        format!(
            "{}{}",
            shared.owner,
            shared.tokens.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Sends the starts of the next queue entries' runs ahead, up to [`BEGUN_AHEAD`] of
    /// them in flight or in hand (the first entries read ahead, in order, each of a
    /// conversation of its own and not `current`'s), so that Redis runs them while this
    /// worker runs `current`'s: each next run starts without a round trip, and Redis, with
    /// the start after it to run already, does not wait for the worker between two runs. A
    /// read of the queue entries after them goes first, in the same piece, when one is due
    /// (see [`Worker::read_ahead`]); when none is left in hand to start and a read is on
    /// its way, its reply is read first.
    fn begin_ahead(&self, current: &str) {
        let shared = &self.shared;
        let mut writer = shared.writer.lock();
        let (begun, held) = {
            let ahead = shared.ahead.lock();
            (
                ahead.iter().filter(|h| h.begun.is_some()).count(),
                ahead.len(),
            )
        };
        if begun < BEGUN_AHEAD && held <= begun && writer.link.reading() {
            // A failure answered what was sent ahead: the ends among it as failed, the
            // read as lost (its entries are read again as this worker's own).
            let _ = writer.link.take_read();
        }
        let mut begins = Vec::new();
        {
            let mut ahead = shared.ahead.lock();
            let mut begun = begun;
            let mut conversations: Vec<String> = vec![current.to_owned()];
            for held in ahead.iter_mut() {
                let conversation: String = held.entry.get("conversation").unwrap_or_default();
                // Along the entries' order only: the next run takes the first one held.
                if held.begun.is_none() {
                    if begun >= BEGUN_AHEAD
                        || conversations.contains(&conversation)
                        || check_name(&conversation).is_err()
                    {
                        break;
                    }
                    let redis = &shared.redis;
                    let keys =
                        ["lease", "meta", "inbox", "messages"].map(|w| redis.key(&conversation, w));
                    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                    let token = self.new_token();
                    begins.push((
                        token.clone(),
                        self.begin_cmd(&keys, &token).get_packed_command(),
                    ));
                    held.begun = Some(token);
                    begun += 1;
                }
                conversations.push(conversation);
            }
        }
        let read = self
            .read_ahead(&writer.link)
            .map(|c| c.get_packed_command());
        if !begins.is_empty() || read.is_some() {
            writer.link.begin_ahead(read, begins);
        }
    }

    /// Runs the conversation's inbox entries after `done`, in order, until none is left and
    /// the lease is released (with the queue entry acknowledged).
    fn drain(
        &self,
        conversation: &str,
        token: &str,
        entry: &str,
        begun: Begun,
    ) -> Result<bool, Failure> {
        let Begun {
            started,
            mut inbox,
            mut messages,
        } = begun;
        let mut batches = 0;
        let mut expected = String::new();
        // The last run's last batch of writes, to go with its end.
        let mut held = None;
        // Bounded: a conversation that keeps getting requests is handed back to the queue
        // after this many, so one worker never holds it forever.
        for _ in 0..64 {
            let mut skipped = None;
            let mut job = None;
            for e in inbox.drain(..) {
                let kind: String = e.get("kind").unwrap_or_default();
                if kind == "abort" {
                    // Nothing runs: an abort that came when no run was active.
                    skipped = Some(e.id);
                    continue;
                }
                let text: String = e.get("text").unwrap_or_default();
                job = Some((e.id, kind, text));
                break;
            }
            let done_now = match job {
                Some((id, kind, text)) => {
                    self.begin_ahead(conversation);
                    let resume = started == id;
                    let ran = self.run(
                        conversation,
                        token,
                        (&id, &text),
                        resume,
                        &mut messages,
                        &mut batches,
                    );
                    match ran {
                        Ok((last, wrote, batch)) => {
                            expected = wrote;
                            held = batch;
                            Some(last)
                        }
                        Err(Failure::Entry(e)) => {
                            if self.fail(conversation, token, (&id, &kind, &text), &e)? {
                                // Dead-lettered: the conversation goes on.
                                Some(id)
                            } else {
                                return Err(Failure::Entry(e));
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
                None => skipped,
            };
            match self.end(
                conversation,
                token,
                (&expected, held.take()),
                done_now.as_deref(),
                entry,
            )? {
                After::Released => return Ok(true),
                After::NotWaited => return Ok(false),
                After::More(more) => inbox = more,
            }
        }
        // Hand the conversation back: announce it again, then free the lease.
        let queue = self.shared.redis.queue_key();
        let _ = self.shared.writer.lock().link.call(Again::Unsafe, |c| {
            ::redis::cmd("XADD")
                .arg(&queue)
                .arg("*")
                .arg("conversation")
                .arg(conversation)
                .query::<String>(c)
        });
        Err(Failure::Redis(Error::Connection(
            "redis: the conversation was handed back after 64 runs".into(),
        )))
    }

    /// Applies the run's last batch (when given), checks the run's writes landed (`meta.wrote`
    /// is `expected`), records `done` (when given) and either releases the lease and
    /// acknowledges `entry` ([`After::Released`]) or returns the inbox entries left to do.
    /// One round trip, sent behind the run's writes whose replies were not read yet.
    ///
    /// When the next entry's run was started ahead (a [`Worker::run_for`] under way), the
    /// end is not waited for ([`After::NotWaited`]): the next run starts while Redis ends
    /// this one, and the reply is acted on when it is read with a later one
    /// ([`Worker::take_later`]). Inbox entries left to do then hand the conversation back
    /// to the queue (announced again, the lease released), as a worker does after 64 runs.
    fn end(
        &self,
        conversation: &str,
        token: &str,
        (expected, batch): (&str, Option<Batch>),
        done: Option<&str>,
        entry: &str,
    ) -> Result<After, Error> {
        let shared = &self.shared;
        let redis = &shared.redis;
        let later = done.is_some()
            && !entry.is_empty()
            && shared.reading_ahead.load(Ordering::Acquire) > 0
            && !shared.stop.load(Ordering::Acquire)
            && shared.ahead.lock().iter().any(|h| h.begun.is_some());
        let keys =
            ["lease", "meta", "inbox", "messages", "events"].map(|w| redis.key(conversation, w));
        let queue = redis.queue_key();
        let mut cmd = scripts::eval(
            &scripts::END,
            &[&keys[0], &keys[1], &keys[2], &queue, &keys[3], &keys[4]],
        );
        cmd.arg(token)
            .arg(expected)
            .arg(done.unwrap_or(""))
            .arg(entry)
            .arg(GROUP)
            .arg(millis(self.config.lease))
            .arg(if entry.is_empty() || !self.trims() {
                ""
            } else {
                "1"
            })
            .arg(if later {
                format!(">{conversation}")
            } else {
                String::new()
            });
        if let Some(batch) = batch {
            cmd.arg(batch.number());
            batch.args(&mut cmd);
        }
        let mut writer = shared.writer.lock();
        if later {
            let ended = Ended {
                conversation: conversation.into(),
                token: token.into(),
            };
            writer.link.end_later(cmd.get_packed_command(), ended);
            return Ok(After::NotWaited);
        }
        let reply = writer.link.end(cmd.get_packed_command());
        drop(writer);
        Ok(match end_status(reply?)? {
            None => After::Released,
            Some(more) => After::More(more),
        })
    }

    /// Counts a failure of the inbox entry `job`; returns true when it was moved to the
    /// dead-letter stream (the lease is kept), false when it is to be tried again (the lease
    /// was freed).
    fn fail(
        &self,
        conversation: &str,
        token: &str,
        (id, kind, text): (&str, &str, &str),
        error: &Error,
    ) -> Result<bool, Error> {
        let redis = &self.shared.redis;
        let keys = ["lease", "meta", "inbox"].map(|w| redis.key(conversation, w));
        let dead = redis.dead_key();
        let reply: Vec<i64> = self.shared.writer.lock().link.call(Again::Unsafe, |c| {
            scripts::eval(&scripts::FAIL, &[&keys[0], &keys[1], &keys[2], &dead])
                .arg(token)
                .arg(id)
                .arg(error.to_string())
                .arg(self.config.max_failures)
                .arg(conversation)
                .arg(kind)
                .arg(text)
                .query(c)
        })?;
        match reply.first() {
            Some(2) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(Error::LeaseLost),
        }
    }

    /// One run of the inbox entry `job`: the agent from the transcript, the prompt (or
    /// `continue_run` when the prompt is already stored), the inbox followed for control
    /// requests. Returns the last inbox entry the run took, what `meta.wrote` must hold, and
    /// the run's last batch of writes when it is left to go with the run's end (no
    /// [`Worker::on_end`] to call once the writes landed).
    fn run(
        &self,
        conversation: &str,
        token: &str,
        (id, text): (&str, &str),
        resume: bool,
        messages: &mut Vec<Message>,
        batches: &mut u64,
    ) -> Result<(String, String, Option<Batch>), Failure> {
        let shared = &self.shared;
        let factory = &self.config.factory;
        let built = guard::must("the agent factory", || {
            factory(conversation, messages.clone())
        });
        let agent = match built.and_then(|built| built) {
            Ok(agent) => agent,
            Err(e) => return Err(Failure::Entry(e)),
        };
        shared.writer.lock().run = Some(RunWrites::new(
            &shared.redis,
            conversation,
            token,
            *batches,
            (!resume).then(|| id.to_owned()),
            self.config.events,
            agent.handle(),
        ));
        let sub = agent.subscribe(shared.writer.listener());
        shared.side.run_started(agent.handle(), id);
        let first = if resume {
            agent.continue_run()
        } else {
            agent.prompt(text)
        };
        let handed = shared.side.run_ended();
        // A resume that finds the answer stored runs nothing.
        let ran = !matches!(&first, Err(e) if matches!(e.error(), Error::NothingToContinue(_)));
        // Steering and follow-ups handed over as the run ended are still queued: they run
        // now, in this run's agent, so none is marked done without being taken.
        let mut stopped = match &first {
            Ok(r) => r.stop_reason,
            Err(e) => e.result().stop_reason,
        };
        for _ in 0..8 {
            let snapshot = agent.snapshot();
            let queued =
                !snapshot.steering_queue.is_empty() || !snapshot.follow_up_queue.is_empty();
            if !queued || stopped == RunStopReason::Cancelled || shared.side.lost() {
                break;
            }
            stopped = match agent.continue_run() {
                Ok(r) => r.stop_reason,
                Err(e) => e.result().stop_reason,
            };
        }
        let on_end = self.config.on_end.as_ref().filter(|_| ran);
        let writes = writer::finish(&mut shared.writer.lock(), on_end.is_none());
        drop(sub);
        let (writes, held) = writes.expect("OK because this run put them in place");
        if let Some(e) = writes.error() {
            return Err(Failure::Redis(e.clone()));
        }
        if shared.side.lost() {
            return Err(Failure::Redis(Error::LeaseLost));
        }
        let snapshot = agent.snapshot();
        // What the run did not take (aborted with messages queued) is not done: those
        // requests run again, as prompts.
        let untaken = snapshot.steering_queue.len() + snapshot.follow_up_queue.len();
        let taken = handed
            .iter()
            .filter(|(_, k)| k == "steer" || k == "follow_up")
            .count()
            .saturating_sub(untaken);
        let mut last = id.to_owned();
        let mut controls = 0;
        for (entry, k) in &handed {
            if k == "steer" || k == "follow_up" {
                if controls == taken {
                    break;
                }
                controls += 1;
            }
            last.clone_from(entry);
        }
        if let Some(f) = on_end {
            shared.writer.lock().link.settle()?;
            let _ = guard::catch(|| f(conversation, id, &snapshot));
        }
        *messages = snapshot.messages.iter().map(|m| (**m).clone()).collect();
        *batches = writes.batches();
        Ok((last, writes.expected(), held))
    }
}
