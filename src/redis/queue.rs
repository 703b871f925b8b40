//! `Queue`: the requests of conversations, sent to a fleet of workers.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::conn::{Again, Conn};
use super::{Redis, check_name, scripts};
use crate::error::Error;

/// Sends requests to a fleet of [`Worker`](super::Worker)s: prompts, steering, follow-ups
/// and aborts for a conversation, each an entry of the conversation's inbox stream,
/// announced on the fleet's queue stream.
///
/// A cheap `Clone` handle; clones share one connection (opened at the first call, checked
/// with a `PING` before a call when it sat idle, and opened again after a failure).
///
/// # Consistency
/// A request is one script, one round trip: the inbox entry and its announcement on the
/// queue are written together, and each request carries an id of its own, so sending it
/// again applies it once. A request whose call returned `Ok` will be run. A call whose kept
/// connection turned out dead (the server closed it while idle, or restarted) is sent again
/// on a new connection, whether or not the first send reached Redis. Only when the second
/// send too broke after it was sent is the outcome unknown: its [`Error::Connection`] then
/// says "it may have been applied". An [`Error::Timeout`] of phase `FirstByte` (sent, no
/// reply in time) leaves it unknown too; one of phase `Connect` sent nothing. Calling again
/// with the same arguments then queues a second request (the id is per call); a request
/// that was applied runs.
#[derive(Clone)]
pub struct Queue {
    redis: Redis,
    conn: Arc<Mutex<Conn>>,
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
            conn: Arc::new(Mutex::new(Conn::new(redis, scripts::FOR_QUEUE))),
        }
    }

    /// Asks the fleet to run `text` as the next prompt of `conversation`. Returns the inbox
    /// entry id, by which the run is known (see the module's guarantees).
    ///
    /// Blocks for one round trip (two after the connection sat idle: it is checked first,
    /// or when it broke: the request is sent again on a new one).
    ///
    /// # Errors
    /// [`Error::Config`] for a conversation name with `{` or `}`; [`Error::Connection`] or
    /// [`Error::Timeout`] when Redis cannot be reached, does not answer in time or cannot
    /// take the request now (out of memory, loading its data: see the type's
    /// `# Consistency` for what was sent); [`Error::Io`] when it answers with an error.
    pub fn prompt(&self, conversation: &str, text: &str) -> Result<String, Error> {
        self.request(conversation, "prompt", text)
    }

    /// Steers the run of `conversation` that is active when a worker reads the request
    /// ([`Agent::steer`](crate::Agent::steer)); with no run active, it runs as a prompt.
    /// Returns the entry id.
    ///
    /// # Errors
    /// As [`Queue::prompt`].
    pub fn steer(&self, conversation: &str, text: &str) -> Result<String, Error> {
        self.request(conversation, "steer", text)
    }

    /// Queues a follow-up for the active run of `conversation`
    /// ([`Agent::follow_up`](crate::Agent::follow_up)); with no run active, it runs as a
    /// prompt. Returns the entry id.
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
        check_name(conversation)?;
        let inbox = self.redis.key(conversation, "inbox");
        let queue = self.redis.queue_key();
        let request = request_id();
        self.conn.lock().call(Again::Idempotent, |c| {
            scripts::eval(&scripts::REQUEST, &[&inbox, &queue])
                .arg(&request)
                .arg(kind)
                .arg(text)
                .arg(conversation)
                .query(c)
        })
    }
}

/// An id no other request has: this process, the time, and a counter.
fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
