//! A cancel token: set once from any thread, observed by providers, tools and hooks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

/// A flag that one thread sets and others observe, including threads blocked in a wait.
///
/// Cheap to clone (an `Arc`). Every run gets a fresh token; [`crate::AgentHandle::abort`]
/// cancels the token of the run that is active at that moment, so an abort that arrives when
/// no run is active never leaks into the next one.
///
/// Waiting code can block on [`CancelToken::wait_timeout`], or put [`CancelToken::receiver`]
/// in a `crossbeam_channel::select!`: the receiver disconnects (and so becomes ready) the
/// moment the token is cancelled.
///
/// # Deadline
/// A token may carry a deadline ([`CancelToken::with_deadline`]; the agent's
/// `run_timeout` sets one): once it has passed the token counts as cancelled, and
/// [`CancelToken::is_timed_out`] says that the deadline, not a `cancel()`, ended it. No
/// thread watches the clock: the token turns cancelled when someone looks at it
/// ([`CancelToken::is_cancelled`], [`CancelToken::wait_timeout`], which never sleeps past
/// the deadline) and wakes the other waiters then. Code that waits in a `select!` adds
/// [`CancelToken::timer`] to it, so that it wakes at the deadline too.
#[derive(Clone)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

/// Why a token is cancelled (`Inner::reason`).
const NOT_CANCELLED: u8 = 0;
const ABORTED: u8 = 1;
const DEADLINE: u8 = 2;

/// What runs when the token is cancelled: shuts down the socket of a request in flight.
type Hook = Box<dyn FnOnce() + Send>;

struct Inner {
    // Set first on cancel (before the hooks run), so that `is_cancelled` is true as soon as
    // any effect of the cancel can be seen.
    cancelled: AtomicBool,
    reason: AtomicU8,
    deadline: Option<Instant>,
    // Dropping the sender disconnects every clone of `rx`, which wakes all waiters at once.
    tx: Mutex<Option<Sender<()>>>,
    rx: Receiver<()>,
    hooks: Mutex<Vec<(u64, Hook)>>,
    next_hook: AtomicU64,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::build(None)
    }

    /// A token that cancels itself at `deadline`; see the type's docs.
    pub fn with_deadline(deadline: Instant) -> CancelToken {
        CancelToken::build(Some(deadline))
    }

    fn build(deadline: Option<Instant>) -> CancelToken {
        let (tx, rx) = crossbeam_channel::bounded(0);
        CancelToken {
            inner: Arc::new(Inner {
                cancelled: AtomicBool::new(false),
                reason: AtomicU8::new(NOT_CANCELLED),
                deadline,
                tx: Mutex::new(Some(tx)),
                rx,
                hooks: Mutex::new(Vec::new()),
                next_hook: AtomicU64::new(0),
            }),
        }
    }

    /// Cancels the token and wakes everything waiting on it; a request in flight has its
    /// socket shut down at once. Calling it again does nothing.
    pub fn cancel(&self) {
        self.cancel_for(ABORTED);
    }

    fn cancel_for(&self, reason: u8) {
        let _ = self.inner.reason.compare_exchange(
            NOT_CANCELLED,
            reason,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.inner.tx.lock().take();
        let hooks = std::mem::take(&mut *self.inner.hooks.lock());
        for (_, hook) in hooks {
            hook();
        }
    }

    /// True once [`CancelToken::cancel`] was called or the deadline passed.
    pub fn is_cancelled(&self) -> bool {
        if self.inner.cancelled.load(Ordering::SeqCst) {
            return true;
        }
        match self.inner.deadline {
            Some(deadline) if Instant::now() >= deadline => {
                self.cancel_for(DEADLINE);
                true
            }
            _ => false,
        }
    }

    /// True when the token is cancelled because its deadline passed (and not by a
    /// [`CancelToken::cancel`] that came first).
    pub fn is_timed_out(&self) -> bool {
        self.is_cancelled() && self.inner.reason.load(Ordering::SeqCst) == DEADLINE
    }

    /// The deadline the token was made with, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.inner.deadline
    }

    /// Sleeps for `timeout` or until the token is cancelled (or its deadline passes),
    /// whichever comes first. Returns true when the token is cancelled.
    ///
    /// Blocks the current thread for at most `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        if self.is_cancelled() {
            return true;
        }
        let timeout = match self.inner.deadline {
            Some(deadline) => timeout.min(deadline.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        let _ = self.inner.rx.recv_timeout(timeout);
        self.is_cancelled()
    }

    /// A receiver that never yields a message and disconnects when the token is cancelled;
    /// use it in `crossbeam_channel::select!` next to other channels.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.inner.rx
    }

    /// A receiver that yields once, at the token's deadline (never, without one). Put it in
    /// a `select!` next to [`CancelToken::receiver`], and call
    /// [`CancelToken::is_cancelled`] when it fires: that cancels the token for everyone.
    pub fn timer(&self) -> Receiver<Instant> {
        match self.inner.deadline {
            Some(deadline) => crossbeam_channel::at(deadline),
            None => crossbeam_channel::never(),
        }
    }

    /// Runs `hook` when the token is cancelled, or at once if it already is (then returns
    /// `None`). Remove it with [`CancelToken::remove_hook`] once it no longer applies.
    pub(crate) fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) -> Option<u64> {
        let mut hooks = self.inner.hooks.lock();
        // Checked under the lock that `cancel_for` takes after setting the flag: either
        // this sees the flag, or `cancel_for` sees the hook.
        if self.inner.cancelled.load(Ordering::SeqCst) {
            drop(hooks);
            hook();
            return None;
        }
        let id = self.inner.next_hook.fetch_add(1, Ordering::Relaxed);
        hooks.push((id, Box::new(hook)));
        Some(id)
    }

    /// Removes a hook added by [`CancelToken::on_cancel`] (dropping it without running it).
    pub(crate) fn remove_hook(&self, id: u64) {
        self.inner.hooks.lock().retain(|(h, _)| *h != id);
    }
}

impl Default for CancelToken {
    fn default() -> CancelToken {
        CancelToken::new()
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .field("deadline", &self.inner.deadline)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn cancel_wakes_a_waiting_thread() {
        let token = CancelToken::new();
        let t2 = token.clone();
        let start = Instant::now();
        let waiter = std::thread::spawn(move || t2.wait_timeout(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        token.cancel();
        assert!(waiter.join().unwrap());
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(token.is_cancelled());
        assert!(!token.is_timed_out());
    }

    #[test]
    fn wait_times_out_when_not_cancelled() {
        let token = CancelToken::new();
        assert!(!token.wait_timeout(Duration::from_millis(5)));
    }

    #[test]
    fn a_deadline_cancels_a_wait_and_says_so() {
        let token = CancelToken::with_deadline(Instant::now() + Duration::from_millis(20));
        let start = Instant::now();
        assert!(token.wait_timeout(Duration::from_secs(30)));
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(token.is_timed_out());
        // A later cancel keeps the first reason.
        token.cancel();
        assert!(token.is_timed_out());
    }

    #[test]
    fn hooks_run_once_on_cancel_and_at_once_after_it() {
        let ran = Arc::new(AtomicUsize::new(0));
        let token = CancelToken::new();
        let r = ran.clone();
        let removed = token.on_cancel(move || {
            r.fetch_add(100, Ordering::SeqCst);
        });
        token.remove_hook(removed.unwrap());
        let r = ran.clone();
        assert!(
            token
                .on_cancel(move || {
                    r.fetch_add(1, Ordering::SeqCst);
                })
                .is_some()
        );
        token.cancel();
        token.cancel();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        let r = ran.clone();
        assert!(
            token
                .on_cancel(move || {
                    r.fetch_add(1, Ordering::SeqCst);
                })
                .is_none()
        );
        assert_eq!(ran.load(Ordering::SeqCst), 2);
    }
}
