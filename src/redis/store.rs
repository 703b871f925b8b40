//! `Store`: conversations' transcripts in Redis lists, appended as messages end.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use redis::ConnectionLike;

use super::{Redis, map_err};
use crate::error::Error;
use crate::event::AgentEvent;
use crate::message::Message;
use crate::session::Loaded;

/// How many list elements one `LRANGE` of [`Store::load`] asks for: a long transcript comes
/// in pieces, so no single reply is huge.
const LOAD_PAGE: isize = 500;

/// Appends a message if the caller still holds the conversation's lease, and records the
/// inbox entry whose prompt it is (when given). KEYS: lease, messages, meta. ARGV: token,
/// message, entry id or "".
pub(crate) const FENCED_APPEND: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[3], 'started', ARGV[3]) end
return 1
";

/// Conversations' transcripts in Redis: one list per conversation, one message per element
/// as JSON (the [session](crate::session) format).
///
/// A cheap `Clone` handle; clones share one connection, opened at the first call and opened
/// again at the next call after it failed.
///
/// ```no_run
/// use pagent::llm::{Faux, FauxReply};
/// use pagent::redis::{Redis, Store};
/// use pagent::Agent;
///
/// let store = Store::new(&Redis::open("redis://127.0.0.1:6379/")?);
/// let loaded = store.load("alice")?;
/// let agent = Agent::builder()
///     .provider(Faux::default().reply(FauxReply::text("Hi!")))
///     .messages(loaded.messages)
///     .build()?;
/// let transcript = store.transcript("alice");
/// let _sub = agent.subscribe(transcript.listener());
/// agent.prompt("Hello")?;
/// assert!(transcript.error().is_none());
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Clone)]
pub struct Store {
    redis: Redis,
    conn: Arc<Mutex<Option<::redis::Connection>>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("redis", &self.redis)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A store on `redis`. Does not connect.
    pub fn new(redis: &Redis) -> Store {
        Store {
            redis: redis.clone(),
            conn: Arc::default(),
        }
    }

    /// Runs `f` on the shared connection (opening it first if needed); a connection whose
    /// call failed is dropped, so the next call opens a new one.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut ::redis::Connection) -> ::redis::RedisResult<T>,
    ) -> Result<T, Error> {
        with_conn(&self.redis, &mut self.conn.lock(), f)
    }

    fn read<T>(
        &self,
        f: impl FnMut(&mut ::redis::Connection) -> ::redis::RedisResult<T>,
    ) -> Result<T, Error> {
        with_conn_read(&self.redis, &mut self.conn.lock(), f)
    }

    /// The transcript of `conversation`, in order. Elements that are not a message are
    /// skipped with a warning, as [`crate::session::load`] skips damaged lines. An unknown
    /// conversation has an empty transcript.
    ///
    /// Blocks for one round trip per 500 messages.
    ///
    /// # Errors
    /// [`Error::Connection`] or [`Error::Timeout`] when Redis cannot be reached or does not
    /// answer in time, [`Error::Io`] when it answers with an error.
    pub fn load(&self, conversation: &str) -> Result<Loaded, Error> {
        let key = self.redis.key(conversation, "messages");
        let mut loaded = Loaded::default();
        let mut start = 0isize;
        loop {
            let page: Vec<Vec<u8>> = self.read(|c| {
                ::redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(start)
                    .arg(start + LOAD_PAGE - 1)
                    .query(c)
            })?;
            for (i, element) in page.iter().enumerate() {
                match serde_json::from_slice::<Message>(element) {
                    Ok(m) => loaded.messages.push(m),
                    Err(e) => loaded.warnings.push(format!(
                        "element {}: not a message, skipped: {e}",
                        start + i as isize
                    )),
                }
            }
            if page.len() < LOAD_PAGE as usize {
                return Ok(loaded);
            }
            start += LOAD_PAGE;
        }
    }

    /// Appends `message` to the transcript of `conversation`.
    ///
    /// # Errors
    /// As [`Store::load`].
    pub fn append(&self, conversation: &str, message: &Message) -> Result<(), Error> {
        let key = self.redis.key(conversation, "messages");
        let json = serde_json::to_vec(message).expect("OK because a message always serializes");
        self.with(|c| ::redis::cmd("RPUSH").arg(&key).arg(json).query::<i64>(c))
            .map(drop)
    }

    /// Replaces the transcript of `conversation` with `messages`, atomically (`MULTI`).
    ///
    /// # Errors
    /// As [`Store::load`].
    pub fn save<'a>(
        &self,
        conversation: &str,
        messages: impl IntoIterator<Item = &'a Message>,
    ) -> Result<(), Error> {
        let key = self.redis.key(conversation, "messages");
        let mut pipe = ::redis::pipe();
        pipe.atomic().del(&key).ignore();
        for m in messages {
            let json = serde_json::to_vec(m).expect("OK because a message always serializes");
            pipe.rpush(&key, json).ignore();
        }
        self.with(|c| pipe.query::<()>(c))
    }

    /// Deletes every key of `conversation`: transcript, event stream, inbox, meta, lease.
    ///
    /// # Errors
    /// As [`Store::load`].
    pub fn delete(&self, conversation: &str) -> Result<(), Error> {
        let keys: Vec<String> = ["messages", "events", "inbox", "meta", "lease"]
            .iter()
            .map(|what| self.redis.key(conversation, what))
            .collect();
        self.with(|c| ::redis::cmd("DEL").arg(&keys).query::<i64>(c))
            .map(drop)
    }

    /// A writer that appends the messages of `conversation` as they end: register
    /// [`Transcript::listener`] with [`crate::Agent::subscribe`]. It has a connection of
    /// its own, opened at the first message.
    pub fn transcript(&self, conversation: &str) -> Transcript {
        Transcript::new(&self.redis, conversation, None)
    }
}

/// [`with_conn`] for a command that may run twice (a read): when a connection kept from
/// earlier turns out to be dead (the server restarted since), tries once more on a new one.
pub(crate) fn with_conn_read<T>(
    redis: &Redis,
    slot: &mut Option<::redis::Connection>,
    mut f: impl FnMut(&mut ::redis::Connection) -> ::redis::RedisResult<T>,
) -> Result<T, Error> {
    let reused = slot.is_some();
    match with_conn(redis, slot, &mut f) {
        Err(Error::Connection(_)) if reused => with_conn(redis, slot, f),
        other => other,
    }
}

/// Runs `f` on the connection in `slot`, opening one first if there is none; drops it when
/// the call fails for a reason that may have left it unusable.
pub(crate) fn with_conn<T>(
    redis: &Redis,
    slot: &mut Option<::redis::Connection>,
    f: impl FnOnce(&mut ::redis::Connection) -> ::redis::RedisResult<T>,
) -> Result<T, Error> {
    if slot.is_none() {
        *slot = Some(redis.connect()?);
    }
    let conn = slot.as_mut().expect("OK because it was just filled");
    match f(conn) {
        Ok(v) => Ok(v),
        Err(e) => {
            if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || !conn.is_open() {
                *slot = None;
            }
            Err(map_err(&e, false))
        }
    }
}

/// Whose lease a fenced transcript checks before each write, and which inbox entry the
/// first message starts.
#[derive(Debug)]
pub(crate) struct Fence {
    pub(crate) token: String,
    pub(crate) entry: Option<String>,
}

/// Appends a conversation's messages to its transcript in Redis as they end, one `RPUSH`
/// per message, sent before the next listener runs.
///
/// A cheap `Clone` handle; clones share the connection and the error. The first failure
/// makes it silent from then on (so the transcript never has a hole in the middle): check
/// [`Transcript::error`] after the run.
#[derive(Clone)]
pub struct Transcript {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    redis: Redis,
    conn: Option<::redis::Connection>,
    messages: String,
    lease: String,
    meta: String,
    fence: Option<Fence>,
    error: Option<Error>,
    on_error: Option<Box<dyn Fn() + Send + Sync>>,
}

impl fmt::Debug for Transcript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("Transcript")
            .field("key", &inner.messages)
            .field("error", &inner.error)
            .finish_non_exhaustive()
    }
}

impl Transcript {
    pub(crate) fn new(redis: &Redis, conversation: &str, fence: Option<Fence>) -> Transcript {
        Transcript {
            inner: Arc::new(Mutex::new(Inner {
                redis: redis.clone(),
                conn: None,
                messages: redis.key(conversation, "messages"),
                lease: redis.key(conversation, "lease"),
                meta: redis.key(conversation, "meta"),
                fence,
                error: None,
                on_error: None,
            })),
        }
    }

    /// Uses `conn` (a connection the worker keeps between runs) instead of opening one.
    pub(crate) fn set_conn(&self, conn: Option<::redis::Connection>) {
        self.inner.lock().conn = conn;
    }

    /// The connection, for the next run (none after a failure).
    pub(crate) fn take_conn(&self) -> Option<::redis::Connection> {
        self.inner.lock().conn.take()
    }

    /// Calls `f` once, at the first failure (the worker aborts its run there).
    pub(crate) fn on_error(&self, f: impl Fn() + Send + Sync + 'static) {
        self.inner.lock().on_error = Some(Box::new(f));
    }

    /// Appends `message`, blocking for one round trip.
    ///
    /// # Errors
    /// The error of this write or of an earlier one (see the type's docs):
    /// [`Error::Connection`] or [`Error::Timeout`] when Redis cannot be reached or does not
    /// answer in time, [`Error::Io`] when it answers with an error, and for a worker's
    /// transcript [`Error::Busy`] when its lease on the conversation was lost.
    pub fn write_message(&self, message: &Message) -> Result<(), Error> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if let Some(e) = &inner.error {
            return Err(e.clone());
        }
        let json = serde_json::to_vec(message).expect("OK because a message always serializes");
        let result = match &mut inner.fence {
            None => with_conn(&inner.redis, &mut inner.conn, |c| {
                ::redis::cmd("RPUSH")
                    .arg(&inner.messages)
                    .arg(&json)
                    .query::<i64>(c)
                    .map(|_| true)
            }),
            Some(fence) => {
                let entry = fence.entry.take().unwrap_or_default();
                with_conn(&inner.redis, &mut inner.conn, |c| {
                    ::redis::cmd("EVAL")
                        .arg(FENCED_APPEND)
                        .arg(3)
                        .arg(&inner.lease)
                        .arg(&inner.messages)
                        .arg(&inner.meta)
                        .arg(&fence.token)
                        .arg(&json)
                        .arg(entry)
                        .query::<i64>(c)
                        .map(|n| n == 1)
                })
            }
        };
        let error = match result {
            Ok(true) => return Ok(()),
            Ok(false) => Error::Busy,
            Err(e) => e,
        };
        inner.error = Some(error.clone());
        let on_error = inner.on_error.take();
        drop(guard);
        if let Some(f) = on_error {
            f();
        }
        Err(error)
    }

    /// A listener that appends each message at its `MessageEnd`; errors are kept in
    /// [`Transcript::error`]. It blocks the run thread for one round trip per message.
    pub fn listener(&self) -> impl Fn(&AgentEvent) + Send + Sync + 'static {
        let this = self.clone();
        move |event| {
            if let AgentEvent::MessageEnd { message } = event {
                let _ = this.write_message(message);
            }
        }
    }

    /// The first write error, if writing failed.
    pub fn error(&self) -> Option<Error> {
        self.inner.lock().error.clone()
    }
}
