//! `Store`: conversations' transcripts in Redis lists, appended as messages end.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

use super::conn::{Again, Conn};
use super::wire::Wire;
use super::{Redis, check_name};
use crate::error::Error;
use crate::event::AgentEvent;
use crate::message::Message;
use crate::session::Loaded;

/// How many list elements one `LRANGE` of [`Store::load`] asks for: a long transcript comes
/// in pieces, so no single reply is huge.
const LOAD_PAGE: isize = 500;

/// Conversations' transcripts in Redis: one list per conversation, one message per element
/// as JSON (the [session](crate::session) format).
///
/// A cheap `Clone` handle; clones share one connection, opened at the first call, checked
/// with a `PING` before a call when it sat idle, and opened again after a failure.
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
    conn: Arc<Mutex<Conn>>,
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
            conn: Arc::new(Mutex::new(Conn::new(redis, &[]))),
        }
    }

    /// Runs `f` on the shared connection (see [`Conn::call`]).
    fn call<T>(
        &self,
        again: Again,
        f: impl FnMut(&mut Wire) -> ::redis::RedisResult<T>,
    ) -> Result<T, Error> {
        self.conn.lock().call(again, f)
    }

    /// The transcript of `conversation`, in order. Elements that are not a message are
    /// skipped with a warning, as [`crate::session::load`] skips damaged lines. An unknown
    /// conversation has an empty transcript.
    ///
    /// Blocks for one round trip per 500 messages.
    ///
    /// # Errors
    /// [`Error::Config`] for a conversation name with `{` or `}`; [`Error::Connection`] or
    /// [`Error::Timeout`] when Redis cannot be reached or does not answer in time,
    /// [`Error::Io`] when it answers with an error.
    pub fn load(&self, conversation: &str) -> Result<Loaded, Error> {
        check_name(conversation)?;
        let key = self.redis.key(conversation, "messages");
        let mut loaded = Loaded::default();
        let mut start = 0isize;
        loop {
            let page: Vec<Vec<u8>> = self.call(Again::Safe, |c| {
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
    /// As [`Store::load`]; an [`Error::Connection`] that says the message may have been
    /// appended when the connection broke after it was sent.
    pub fn append(&self, conversation: &str, message: &Message) -> Result<(), Error> {
        check_name(conversation)?;
        let key = self.redis.key(conversation, "messages");
        let json = serde_json::to_vec(message).expect("OK because a message always serializes");
        self.call(Again::Unsafe, |c| {
            ::redis::cmd("RPUSH").arg(&key).arg(&json).query::<i64>(c)
        })
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
        check_name(conversation)?;
        let key = self.redis.key(conversation, "messages");
        let mut pipe = ::redis::pipe();
        pipe.atomic().del(&key).ignore();
        for m in messages {
            let json = serde_json::to_vec(m).expect("OK because a message always serializes");
            pipe.rpush(&key, json).ignore();
        }
        // Replaces the whole list: running it twice leaves the same transcript.
        self.call(Again::Safe, |c| pipe.query::<()>(c))
    }

    /// Deletes every key of `conversation`: transcript, event stream, inbox, meta, lease.
    ///
    /// # Errors
    /// As [`Store::load`].
    pub fn delete(&self, conversation: &str) -> Result<(), Error> {
        check_name(conversation)?;
        let keys: Vec<String> = ["messages", "events", "inbox", "meta", "lease"]
            .iter()
            .map(|what| self.redis.key(conversation, what))
            .collect();
        self.call(Again::Safe, |c| {
            ::redis::cmd("DEL").arg(&keys).query::<i64>(c)
        })
        .map(drop)
    }

    /// A writer that appends the messages of `conversation` as they end: register
    /// [`Transcript::listener`] with [`crate::Agent::subscribe`]. It has a connection of
    /// its own, opened at the first message.
    pub fn transcript(&self, conversation: &str) -> Transcript {
        Transcript::new(&self.redis, conversation)
    }
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
    conn: Conn,
    messages: String,
    error: Option<Error>,
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
    pub(crate) fn new(redis: &Redis, conversation: &str) -> Transcript {
        Transcript {
            inner: Arc::new(Mutex::new(Inner {
                conn: Conn::new(redis, &[]),
                messages: redis.key(conversation, "messages"),
                error: check_name(conversation).err(),
            })),
        }
    }

    /// Appends `message`, blocking for one round trip.
    ///
    /// # Errors
    /// The error of this write or of an earlier one (see the type's docs):
    /// [`Error::Config`] for a conversation name with `{` or `}`; [`Error::Connection`] or
    /// [`Error::Timeout`] when Redis cannot be reached or does not answer in time (or,
    /// when the connection broke after the message was sent, it says the message may have
    /// been appended), [`Error::Io`] when it answers with an error.
    pub fn write_message(&self, message: &Message) -> Result<(), Error> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if let Some(e) = &inner.error {
            return Err(e.clone());
        }
        let json = serde_json::to_vec(message).expect("OK because a message always serializes");
        let key = &inner.messages;
        let result = inner.conn.call(Again::Unsafe, |c| {
            ::redis::cmd("RPUSH").arg(key).arg(&json).query::<i64>(c)
        });
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                inner.error = Some(e.clone());
                Err(e)
            }
        }
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
