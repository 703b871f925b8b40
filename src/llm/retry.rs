//! The backoff policy for transient HTTP failures.

use std::time::{Duration, SystemTime};

use crate::Error;

/// How a provider retries a request that failed before any byte of the reply arrived.
///
/// Retried: HTTP 408, 409, 429 and 5xx, connection failures and connect timeouts
/// ([`Error::is_retryable`]; a first-byte timeout is not retried). Never retried: anything after the first byte of the reply
/// arrived (the reply is already partly delivered to listeners), other statuses, an abort.
///
/// A connection that failed before any byte of the reply ([`Error::Connection`]: refused,
/// reset or closed by the server) has a count of its own, [`max_connect_retries`], larger
/// by default: it is what a server whose accept queue is full does to a burst of
/// connections (on Linux a listener past its backlog drops the handshake's last packet,
/// and resets the connection when the client's next packet fails its SYN-cookie check), or
/// a server restarting, and riding it out takes longer than a status retry.
///
/// [`max_connect_retries`]: RetryPolicy::max_connect_retries
///
/// Not counted, and not announced: a kept connection that the server closed as the request
/// went out on it (its idle timeout, a restart), before any byte of the reply. The server
/// dropped the connection, not the request, so the request goes again at once on a new
/// connection (at most 3 times), as browsers resend on a reused connection; the same on a
/// connection made for the request is a failed connection as above. MCP's requests over
/// HTTP are resent so too.
///
/// The wait before retry `n` (from 1) is `initial_delay * 2^(n-1)`, capped at `max_delay`,
/// with jitter: a random point in its upper half, so that many clients that failed together
/// do not come back together. When the server says how long to wait (`retry-after-ms`, or
/// `Retry-After` in seconds or as an HTTP date) that wait is used instead, as long as it is
/// at most `max_retry_after`; a longer one gives up at once and returns the error, whose
/// [`Error::Http`] `retry_after` tells the caller how long the server asked for.
///
/// Each retry is announced before the wait as a [`StreamEvent::Retry`](super::StreamEvent)
/// event (the agent turns it into a `MessageUpdate` and sets `State::retry`), and the wait
/// ends early on abort.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    max_retries: u32,
    max_connect_retries: u32,
    initial_delay: Duration,
    max_delay: Duration,
    max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy::new()
    }
}

impl RetryPolicy {
    /// The default policy: 2 retries (3 attempts), 6 after a failed connection, 500 ms
    /// doubling up to 8 s, server waits honoured up to 60 s.
    pub fn new() -> RetryPolicy {
        RetryPolicy {
            max_retries: 2,
            max_connect_retries: 6,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }

    /// A policy that never retries.
    pub fn none() -> RetryPolicy {
        RetryPolicy::new().max_retries(0).max_connect_retries(0)
    }

    /// How many times a request is sent again after the first attempt failed with a status
    /// or a connect timeout. Defaults to 2.
    #[must_use]
    pub fn max_retries(mut self, retries: u32) -> RetryPolicy {
        self.max_retries = retries;
        self
    }

    /// How many times a request is sent again after its connection failed before any byte
    /// of the reply came (refused, reset or closed: [`Error::Connection`]). Defaults to 6:
    /// with the default delays, the waits add up to 12 to 24 s, which rides out a server's
    /// full accept queue under a burst of thousands of connections. The attempts of both
    /// kinds count together: a request gives up when the count of the kind that failed last
    /// is spent.
    #[must_use]
    pub fn max_connect_retries(mut self, retries: u32) -> RetryPolicy {
        self.max_connect_retries = retries;
        self
    }

    /// The wait before the first retry, doubled for each next one. Defaults to 500 ms.
    #[must_use]
    pub fn initial_delay(mut self, delay: Duration) -> RetryPolicy {
        self.initial_delay = delay;
        self
    }

    /// The cap of the computed wait. Defaults to 8 s.
    #[must_use]
    pub fn max_delay(mut self, delay: Duration) -> RetryPolicy {
        self.max_delay = delay;
        self
    }

    /// The longest server-requested wait that is honoured; longer ones give up at once.
    /// Defaults to 60 s.
    #[must_use]
    pub fn max_retry_after(mut self, wait: Duration) -> RetryPolicy {
        self.max_retry_after = wait;
        self
    }

    /// The number of retries allowed after a status or a connect timeout.
    pub fn retries(&self) -> u32 {
        self.max_retries
    }

    /// The number of retries allowed after a failed connection.
    pub fn connect_retries(&self) -> u32 {
        self.max_connect_retries
    }

    /// How long to wait before retry `attempt` (from 1) after `error`, or `None` to give up.
    pub(crate) fn delay(&self, attempt: u32, error: &Error) -> Option<Duration> {
        let allowed = match error {
            Error::Connection(_) => self.max_connect_retries,
            _ => self.max_retries,
        };
        if attempt > allowed || !error.is_retryable() {
            return None;
        }
        if let Error::Http {
            retry_after: Some(wait),
            ..
        } = error
        {
            return (*wait <= self.max_retry_after).then_some(*wait);
        }
        let doubled = self
            .initial_delay
            .saturating_mul(1 << (attempt - 1).min(20))
            .min(self.max_delay);
        Some(doubled.mul_f64(0.5 + 0.5 * random_unit()))
    }
}

/// A number in [0, 1), different on every call; good enough for jitter.
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    // `RandomState` is seeded randomly per process and varies per instance.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// The wait a server asked for: `retry-after-ms` (milliseconds, OpenAI), else `Retry-After`
/// in seconds or as an HTTP date (relative to `now`; a date in the past means no wait).
pub(crate) fn parse_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: SystemTime,
) -> Option<Duration> {
    // `try_from_secs_f64` refuses what is negative, not finite or too large for a
    // `Duration` (`Retry-After: 1e300`), where `from_secs_f64` would panic.
    if let Some(wait) = retry_after_ms
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok())
    {
        return Some(wait);
    }
    let value = retry_after?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absurd_retry_after_is_ignored_not_a_panic() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after(Some("1e300"), None, now), None);
        assert_eq!(parse_retry_after(None, Some("1e300"), now), None);
        assert_eq!(parse_retry_after(None, Some("-3"), now), None);
        assert_eq!(parse_retry_after(None, Some("inf"), now), None);
        assert_eq!(
            parse_retry_after(Some("1e300"), Some("2"), now),
            Some(Duration::from_secs(2))
        );
    }

    fn http(status: u16, retry_after: Option<Duration>) -> Error {
        Error::Http {
            status,
            message: "x".into(),
            retry_after,
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        let p = RetryPolicy::new()
            .max_retries(10)
            .initial_delay(Duration::from_millis(100))
            .max_delay(Duration::from_millis(350));
        let e = http(503, None);
        for (attempt, full) in [(1, 100), (2, 200), (3, 350), (9, 350)] {
            let d = p.delay(attempt, &e).unwrap();
            assert!(d >= Duration::from_millis(full / 2), "{attempt}: {d:?}");
            assert!(d <= Duration::from_millis(full), "{attempt}: {d:?}");
        }
        assert_eq!(p.delay(11, &e), None);
    }

    #[test]
    fn only_transient_failures_are_retried() {
        let p = RetryPolicy::new();
        for status in [408, 409, 429, 500, 502, 503, 529] {
            assert!(p.delay(1, &http(status, None)).is_some(), "{status}");
        }
        for status in [400, 401, 403, 404, 422] {
            assert_eq!(p.delay(1, &http(status, None)), None, "{status}");
        }
        assert!(p.delay(1, &Error::Connection("refused".into())).is_some());
        assert_eq!(p.delay(1, &Error::Aborted), None);
        assert_eq!(RetryPolicy::none().delay(1, &http(503, None)), None);
        let reset = Error::Connection("reset".into());
        assert_eq!(RetryPolicy::none().delay(1, &reset), None);
    }

    #[test]
    fn a_failed_connection_has_a_count_of_its_own() {
        let p = RetryPolicy::new();
        let reset = Error::Connection("reset".into());
        let connect = Error::Timeout(crate::TimeoutPhase::Connect);
        for attempt in 1..=6 {
            assert!(p.delay(attempt, &reset).is_some(), "{attempt}");
        }
        assert_eq!(p.delay(7, &reset), None);
        assert!(p.delay(2, &connect).is_some());
        assert_eq!(p.delay(3, &connect), None);
        assert_eq!(p.delay(3, &http(503, None)), None);
        let p = p.max_connect_retries(1).max_retries(4);
        assert_eq!(p.delay(2, &reset), None);
        assert!(p.delay(4, &http(503, None)).is_some());
        // The default waits add up to 12 to 24 s (jitter in the upper half of each).
        let p = RetryPolicy::new();
        let total: Duration = (1..=6).map(|a| p.delay(a, &reset).unwrap()).sum();
        assert!(total >= Duration::from_millis(11_750), "{total:?}");
        assert!(total <= Duration::from_millis(23_500), "{total:?}");
    }

    #[test]
    fn server_wait_is_honoured_up_to_the_limit() {
        let p = RetryPolicy::new().max_retry_after(Duration::from_secs(5));
        let wait = Duration::from_secs(3);
        assert_eq!(p.delay(1, &http(429, Some(wait))), Some(wait));
        assert_eq!(p.delay(1, &http(429, Some(Duration::from_secs(6)))), None);
    }

    #[test]
    fn retry_after_forms_parse() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        let p = |ms, ra| parse_retry_after(ms, ra, now);
        assert_eq!(p(None, Some("2")), Some(Duration::from_secs(2)));
        assert_eq!(p(None, Some("1.5")), Some(Duration::from_millis(1500)));
        assert_eq!(p(Some("250"), Some("9")), Some(Duration::from_millis(250)));
        // Sun, 06 Nov 1994 08:49:37 GMT is 784111777; ten seconds later:
        assert_eq!(
            p(None, Some("Sun, 06 Nov 1994 08:49:47 GMT")),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            p(None, Some("Sun, 06 Nov 1994 08:49:00 GMT")),
            Some(Duration::ZERO)
        );
        assert_eq!(p(None, Some("soon")), None);
        assert_eq!(p(None, Some("-1")), None);
        assert_eq!(p(None, None), None);
    }
}
