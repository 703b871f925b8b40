//! A connection that is checked, not trusted: what every type of `pagent::redis` talks
//! through.
//!
//! A connection kept between calls can be dead without any sign on our side: the server
//! closed it after its `timeout`, a NAT or a managed service dropped it, Redis restarted.
//! The first command sent on it then fails after it was written, when nothing tells whether
//! the server ran it. So a connection that sat idle for [`IDLE_CHECK`] or more is checked
//! with a `PING` before it carries a command (a dead one is replaced, and the command has
//! not been sent yet), and a connection that failed is dropped, the next call opening a new
//! one. What a failure mid-command means is the caller's to say: [`Conn::call`] retries
//! once on a new connection only the commands that may run twice.
//!
//! A connection loads the scripts its user runs when it opens ([`scripts::load`]); a
//! script call answered `NOSCRIPT` (the server's script cache was emptied) ran nothing, and
//! is sent again once on a new connection, which loads them again.

use std::time::{Duration, Instant};

use ::redis::ConnectionLike;

use super::wire::Wire;

use super::scripts::{self, Script};
use super::{Redis, map_err};
use crate::error::Error;

/// How long a connection may sit unused before it is checked with a `PING`: well under the
/// shortest server `timeout` (1 second), so a connection the server closed for idleness
/// is found dead before a command is written to it. A busy connection is never checked.
pub(crate) const IDLE_CHECK: Duration = Duration::from_millis(500);

/// Whether a command may be sent again after a failure that leaves its fate unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Again {
    /// It may run twice (a read, or a script made idempotent): retried once on a new
    /// connection after the kept one failed.
    Safe,
    /// It has effects but applies once however often it is sent (a script that recognises
    /// its own request): retried once like [`Again::Safe`]; when that try too broke after
    /// it was sent, the error says it may have been applied. (Calling again is a new
    /// request, which is why the error does not invite it.)
    Idempotent,
    /// Running it twice would do it twice (an `XADD`): a failure after it was written says
    /// that it may have been applied.
    Unsafe,
}

/// One connection to Redis, opened on first use and again after a failure.
pub(crate) struct Conn {
    redis: Redis,
    conn: Option<Wire>,
    used: Instant,
    /// Loaded on each new connection.
    scripts: &'static [&'static Script],
}

impl Conn {
    /// A connection to `redis` that runs `scripts` (loaded on each new connection).
    pub(crate) fn new(redis: &Redis, scripts: &'static [&'static Script]) -> Conn {
        Conn {
            redis: redis.clone(),
            conn: None,
            used: Instant::now(),
            scripts,
        }
    }

    pub(crate) fn redis(&self) -> &Redis {
        &self.redis
    }

    /// The connection, ready for a command: opened when there is none, checked with a
    /// `PING` (and replaced when it is dead) when it sat idle for [`IDLE_CHECK`]. Returns
    /// whether it is one kept from before (not opened by this call).
    ///
    /// # Errors
    /// [`Error::Connection`] or [`Error::Timeout`] when no connection could be made: nothing
    /// was sent.
    pub(crate) fn ready(&mut self) -> Result<(&mut Wire, bool), Error> {
        let mut kept = self.conn.is_some();
        if kept && self.used.elapsed() >= IDLE_CHECK {
            let alive = self
                .conn
                .as_mut()
                .is_some_and(|c| ::redis::cmd("PING").query::<String>(c).is_ok() && c.is_open());
            if !alive {
                self.conn = None;
                kept = false;
            }
        }
        if self.conn.is_none() {
            self.conn = Some(self.redis.connect_with(self.scripts)?);
        }
        self.used = Instant::now();
        let conn = self.conn.as_mut().expect("OK because it was just filled");
        Ok((conn, kept))
    }

    /// Runs `f` on the ready connection. A failure that may have left the connection
    /// unusable drops it; when it was a kept one and `again` is [`Again::Safe`], `f` runs
    /// once more on a new connection. An [`Again::Unsafe`] command whose connection failed
    /// after it was sent gives an [`Error::Connection`] that says it may have been applied.
    ///
    /// # Errors
    /// As [`map_err`], after the retry.
    pub(crate) fn call<T>(
        &mut self,
        again: Again,
        mut f: impl FnMut(&mut Wire) -> ::redis::RedisResult<T>,
    ) -> Result<T, Error> {
        let (conn, kept) = self.ready()?;
        match f(conn) {
            Ok(v) => Ok(v),
            Err(e) if scripts::missing(&e) => {
                // Nothing ran: once more, on a connection that loads the scripts.
                self.conn = None;
                let (conn, _) = self.ready()?;
                f(conn).map_err(|e| self.failed(&e))
            }
            Err(e) if broken(&e, conn) => {
                self.conn = None;
                let mut error = map_err(&e, false);
                if kept && again != Again::Unsafe {
                    // The first send may have reached Redis: whatever happens to this one,
                    // the outcome stays unknown when it fails.
                    match self.ready() {
                        Ok((conn, _)) => match f(conn) {
                            Ok(v) => return Ok(v),
                            Err(e) if broken(&e, conn) => {
                                self.conn = None;
                                error = map_err(&e, false);
                            }
                            Err(e) => return Err(self.failed(&e)),
                        },
                        Err(e) => error = e,
                    }
                }
                Err(match (again, error) {
                    (Again::Unsafe, Error::Connection(why)) => Error::Connection(format!(
                        "{why} (after the request was sent: it may have been applied)"
                    )),
                    (
                        Again::Idempotent,
                        Error::Connection(why) | Error::Io { message: why, .. },
                    ) => Error::Connection(format!(
                        "{why} (after the request was sent twice: it may have been applied)"
                    )),
                    (_, error) => error,
                })
            }
            Err(e) => Err(map_err(&e, false)),
        }
    }

    /// Maps `e`, dropping the connection when `e` may have left it unusable.
    pub(crate) fn failed(&mut self, e: &::redis::RedisError) -> Error {
        if let Some(conn) = &self.conn
            && broken(e, conn)
        {
            self.conn = None;
        }
        map_err(e, false)
    }

    /// Forgets the connection (the next call opens a new one).
    pub(crate) fn reset(&mut self) {
        self.conn = None;
    }

    /// The open connection, if any, as it is (no check).
    pub(crate) fn current(&mut self) -> Option<&mut Wire> {
        self.conn.as_mut()
    }
}

/// Whether `e` may have left `conn` unusable (a half-read reply, a closed socket).
fn broken(e: &::redis::RedisError, conn: &Wire) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || !conn.is_open()
}

/// Reads one reply of a command sent with `send_packed_command`, as `T`.
pub(crate) fn reply<T: ::redis::FromRedisValue>(conn: &mut Wire) -> ::redis::RedisResult<T> {
    let value = conn.recv_response()?.extract_error()?;
    Ok(::redis::from_redis_value(value)?)
}
