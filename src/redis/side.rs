//! The worker's side thread: renews the lease of the conversation it runs, and follows that
//! conversation's inbox, handing steering, follow-ups and aborts to the running agent.
//!
//! One thread per worker, for its whole life, on a connection of its own; the worker thread
//! tells it what to follow without a round trip, and wakes it from a blocking read with
//! `CLIENT UNBLOCK` sent ahead on its own connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::wire::Wire;
use super::{Redis, scripts};
use crate::agent::AgentHandle;
use crate::message::Message;

/// How long one read of the inbox blocks at most.
const FOLLOW_BLOCK: Duration = Duration::from_millis(200);

/// How long a run goes before its inbox is followed: a shorter run (a fast model) costs no
/// read and no wake-up; a request that arrives meanwhile waits at most this long, or runs
/// after the run when it has ended by then (see `Worker`'s docs).
pub(crate) const FOLLOW_AFTER: Duration = Duration::from_millis(5);

/// The conversation the worker holds, and what its side thread does for it.
pub(crate) struct Follow {
    pub(crate) inbox: String,
    pub(crate) lease: String,
    pub(crate) token: String,
    /// The queue entry kept fresh while the conversation runs.
    pub(crate) entry: String,
    pub(crate) lease_for: Duration,
}

struct Job {
    follow: Follow,
    /// The inbox entries after this one are read.
    after: String,
    /// The running agent; none between runs (nothing is read then).
    agent: Option<AgentHandle>,
    /// The control requests handed to the current run: (entry id, kind).
    handed: Vec<(String, String)>,
    /// A prompt was read: nothing more for the current run.
    parked: bool,
    /// When the current run started.
    since: Instant,
    next_renewal: Instant,
    /// The lease was found lost.
    lost: bool,
}

#[derive(Default)]
struct State {
    job: Option<Job>,
    /// Bumped at each change of run, so a read started for another one is dropped.
    generation: u64,
    /// The side connection's `CLIENT ID`, while it is open.
    client: Option<i64>,
    /// Queue entries read ahead, in the worker's hands until the held conversation is
    /// done: kept fresh with its lease.
    ahead: Vec<String>,
    /// A read of the inbox is (about to be) under way.
    reading: bool,
    /// Until when the side thread sleeps, while it does (it looks at the state again
    /// before it sleeps next): it is woken only for what is due before then, so a busy
    /// worker (runs shorter than [`FOLLOW_AFTER`]) wakes it about once per
    /// [`FOLLOW_AFTER`], not twice per run.
    asleep_until: Option<Instant>,
    stop: bool,
}

impl State {
    /// Wakes the side thread when it sleeps past `due`.
    fn wake_for(&self, due: Instant, wake: &Condvar) {
        if self.asleep_until.is_some_and(|t| t > due) {
            wake.notify_all();
        }
    }
}

/// Sleeps on `wake` for at most `d`, saying so in the state.
fn sleep(state: &mut parking_lot::MutexGuard<'_, State>, wake: &Condvar, d: Duration) {
    state.asleep_until = Some(Instant::now() + d);
    wake.wait_for(state, d);
    state.asleep_until = None;
}

pub(crate) struct Side {
    shared: Arc<(Mutex<State>, Condvar)>,
}

impl Drop for Side {
    fn drop(&mut self) {
        self.shared.0.lock().stop = true;
        self.shared.1.notify_all();
    }
}

impl Side {
    /// Starts the side thread of worker `name`.
    pub(crate) fn start(redis: &Redis, name: &str, group: &'static str) -> Side {
        let shared: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let (s, redis, name) = (shared.clone(), redis.clone(), name.to_owned());
        let _ = std::thread::Builder::new()
            .name("pagent-redis-side".into())
            .spawn(move || run(&s, &redis, &name, group));
        Side { shared }
    }

    /// Holds `follow`'s conversation from now on: renews its lease.
    pub(crate) fn begin(&self, follow: Follow) {
        let mut state = self.shared.0.lock();
        let next_renewal = Instant::now() + follow.lease_for / 3;
        // Kept fresh as the conversation's own from now on.
        state.ahead.retain(|e| *e != follow.entry);
        state.generation += 1;
        state.job = Some(Job {
            after: String::new(),
            follow,
            agent: None,
            handed: Vec::new(),
            parked: true,
            since: Instant::now(),
            next_renewal,
            lost: false,
        });
        state.wake_for(next_renewal, &self.shared.1);
    }

    /// A run of the held conversation starts, for the inbox entry `after`: the entries after
    /// it go to `agent`, up to the next prompt.
    pub(crate) fn run_started(&self, agent: AgentHandle, after: &str) {
        let mut state = self.shared.0.lock();
        state.generation += 1;
        if let Some(job) = &mut state.job {
            job.agent = Some(agent);
            after.clone_into(&mut job.after);
            job.handed.clear();
            job.parked = false;
            job.since = Instant::now();
        }
        state.wake_for(Instant::now() + FOLLOW_AFTER, &self.shared.1);
    }

    /// The run ended: nothing more is handed to it. Returns the requests it was handed.
    pub(crate) fn run_ended(&self) -> Vec<(String, String)> {
        let mut state = self.shared.0.lock();
        state.generation += 1;
        match &mut state.job {
            Some(job) => {
                job.agent = None;
                job.parked = true;
                std::mem::take(&mut job.handed)
            }
            None => Vec::new(),
        }
    }

    /// The conversation is let go. Returns the side connection's id when it is reading the
    /// conversation's inbox, to wake it.
    pub(crate) fn end(&self) -> Option<i64> {
        let mut state = self.shared.0.lock();
        state.generation += 1;
        state.job = None;
        if state.reading { state.client } else { None }
    }

    /// Keeps the queue entries `ahead` fresh with the lease from now on, besides those
    /// already kept (or instead of them, with `replace`).
    pub(crate) fn hold(&self, ahead: Vec<String>, replace: bool) {
        let mut state = self.shared.0.lock();
        if replace {
            state.ahead = ahead;
        } else {
            state.ahead.extend(ahead);
        }
    }

    /// Whether the lease was found lost since [`Side::begin`].
    pub(crate) fn lost(&self) -> bool {
        self.shared.0.lock().job.as_ref().is_some_and(|j| j.lost)
    }
}

/// The side connection and its id.
struct Conn {
    redis: Redis,
    conn: Option<Wire>,
    used: Instant,
}

impl Conn {
    fn get(&mut self, shared: &Mutex<State>) -> Option<&mut Wire> {
        if self.used.elapsed() >= super::conn::IDLE_CHECK
            && let Some(c) = &mut self.conn
            && ::redis::cmd("PING").query::<String>(c).is_err()
        {
            self.conn = None;
        }
        if self.conn.is_none() {
            shared.lock().client = None;
            let mut c = self.redis.connect_with(scripts::FOR_SIDE).ok()?;
            let id: i64 = ::redis::cmd("CLIENT").arg("ID").query(&mut c).ok()?;
            shared.lock().client = Some(id);
            self.conn = Some(c);
        }
        self.used = Instant::now();
        self.conn.as_mut()
    }

    fn drop_conn(&mut self, shared: &Mutex<State>) {
        self.conn = None;
        shared.lock().client = None;
    }
}

fn run(shared: &(Mutex<State>, Condvar), redis: &Redis, name: &str, group: &'static str) {
    let (lock, wake) = shared;
    let mut conn = Conn {
        redis: redis.clone(),
        conn: None,
        used: Instant::now(),
    };
    let queue = redis.queue_key();
    loop {
        // What to do now, decided under the lock, done outside it.
        let (generation, inbox, after, renew, block) = {
            let mut state = lock.lock();
            loop {
                if state.stop {
                    return;
                }
                match &state.job {
                    None => sleep(&mut state, wake, Duration::from_secs(1)),
                    Some(job) => {
                        let now = Instant::now();
                        let renew_in = job.next_renewal.saturating_duration_since(now);
                        let follow_in = (job.since + FOLLOW_AFTER).saturating_duration_since(now);
                        if !renew_in.is_zero() && (job.parked || !follow_in.is_zero()) {
                            let wait = if job.parked {
                                renew_in
                            } else {
                                renew_in.min(follow_in)
                            };
                            sleep(&mut state, wake, wait);
                            continue;
                        }
                        break;
                    }
                }
            }
            let job = state.job.as_ref().expect("OK because the loop found one");
            let renew = (job.next_renewal <= Instant::now()).then(|| {
                (
                    job.follow.lease.clone(),
                    job.follow.token.clone(),
                    job.follow.entry.clone(),
                    job.follow.lease_for,
                    state.ahead.clone(),
                )
            });
            let block = job
                .next_renewal
                .saturating_duration_since(Instant::now())
                .min(FOLLOW_BLOCK);
            let reads =
                renew.is_none() && !job.parked && job.since + FOLLOW_AFTER <= Instant::now();
            state.reading = reads;
            let job = state.job.as_ref().expect("OK because the loop found one");
            (
                state.generation,
                job.follow.inbox.clone(),
                reads.then(|| job.after.clone()),
                renew,
                block,
            )
        };
        if let Some((lease, token, entry, lease_for, ahead)) = renew {
            let renewed = conn.get(lock).map(|c| {
                scripts::eval(&scripts::RENEW, &[&lease, &queue])
                    .arg(&token)
                    .arg(millis(lease_for))
                    .arg(group)
                    .arg(name)
                    .arg(&entry)
                    .arg(&ahead)
                    .query::<i64>(c)
            });
            let mut state = lock.lock();
            if let Some(job) = &mut state.job
                && job.follow.token == token
            {
                match renewed {
                    Some(Ok(0)) => {
                        // Lost (paused too long): the fenced writes fail anyway; stop at once.
                        job.lost = true;
                        if let Some(agent) = &job.agent {
                            agent.abort();
                        }
                        job.next_renewal = Instant::now() + lease_for;
                    }
                    Some(Ok(_)) => job.next_renewal = Instant::now() + lease_for / 3,
                    // Redis away: try again soon, within the lease.
                    _ => job.next_renewal = Instant::now() + (lease_for / 10).max(ms(5)),
                }
            }
            drop(state);
            if !matches!(renewed, Some(Ok(_))) {
                conn.drop_conn(lock);
            }
            continue;
        }
        let Some(after) = after else { continue };
        let Some(c) = conn.get(lock) else {
            lock.lock().reading = false;
            std::thread::sleep(ms(50));
            continue;
        };
        let block = block.max(ms(1));
        let _ = c.set_read_timeout(Some(redis.call_timeout() + block));
        let read: ::redis::RedisResult<Option<::redis::streams::StreamReadReply>> =
            ::redis::cmd("XREAD")
                .arg("COUNT")
                .arg(16)
                .arg("BLOCK")
                .arg(millis(block))
                .arg("STREAMS")
                .arg(&inbox)
                .arg(&after)
                .query(c);
        let _ = c.set_read_timeout(Some(redis.call_timeout()));
        lock.lock().reading = false;
        let read = match read {
            Ok(read) => read,
            // Woken by `CLIENT UNBLOCK` (an error reply) or the key is gone: read again.
            Err(e) if e.code() == Some("UNBLOCKED") => None,
            Err(_) => {
                conn.drop_conn(lock);
                std::thread::sleep(ms(20));
                continue;
            }
        };
        let entries: Vec<_> = read
            .into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|k| k.ids)
            .collect();
        if entries.is_empty() {
            continue;
        }
        let mut state = lock.lock();
        if state.generation != generation {
            continue;
        }
        let Some(job) = &mut state.job else { continue };
        let Some(agent) = job.agent.clone() else {
            continue;
        };
        let mut abort = false;
        for entry in entries {
            let kind: String = entry.get("kind").unwrap_or_default();
            let text: String = entry.get("text").unwrap_or_default();
            match kind.as_str() {
                "steer" => drop(agent.steer(Message::user(text))),
                "follow_up" => drop(agent.follow_up(Message::user(text))),
                "abort" => abort = true,
                // The next prompt: it runs after this run.
                _ => {
                    job.parked = true;
                    break;
                }
            }
            job.after.clone_from(&entry.id);
            job.handed.push((entry.id, kind));
        }
        drop(state);
        if abort {
            // The run may not have started yet: try until it has, or has ended.
            for _ in 0..200 {
                if agent.abort() || lock.lock().generation != generation {
                    break;
                }
                std::thread::sleep(ms(5));
            }
        }
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
