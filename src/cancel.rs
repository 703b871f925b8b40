//! A cancel token: set once from any thread, observed by providers, tools and hooks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
#[derive(Clone)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

struct Inner {
    cancelled: AtomicBool,
    // Dropping the sender disconnects every clone of `rx`, which wakes all waiters at once.
    tx: Mutex<Option<Sender<()>>>,
    rx: Receiver<()>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> CancelToken {
        let (tx, rx) = crossbeam_channel::bounded(0);
        CancelToken {
            inner: Arc::new(Inner {
                cancelled: AtomicBool::new(false),
                tx: Mutex::new(Some(tx)),
                rx,
            }),
        }
    }

    /// Cancels the token and wakes everything waiting on it. Calling it again does nothing.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.inner.tx.lock().take();
    }

    /// True once [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Sleeps for `timeout` or until the token is cancelled, whichever comes first.
    /// Returns true when the token is cancelled.
    ///
    /// Blocks the current thread for at most `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        if self.is_cancelled() {
            return true;
        }
        let _ = self.inner.rx.recv_timeout(timeout);
        self.is_cancelled()
    }

    /// A receiver that never yields a message and disconnects when the token is cancelled;
    /// use it in `crossbeam_channel::select!` next to other channels.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.inner.rx
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
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

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
    }

    #[test]
    fn wait_times_out_when_not_cancelled() {
        let token = CancelToken::new();
        assert!(!token.wait_timeout(Duration::from_millis(5)));
    }
}
