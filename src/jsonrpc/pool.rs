//! A bounded pool of threads for the requests that cannot be answered inline (a prompt that
//! runs for minutes, a session whose MCP servers start): never a thread per request.
//!
//! Threads are started as jobs come, up to the pool's maximum, and end after
//! [`KEEP_ALIVE`] without work (or at once when the pool closes). A job that finds every
//! thread busy is refused ([`Pool::submit`] returns [`Full`]): the caller answers its
//! request with an error instead of queueing work a peer could pile up without bound. A
//! panicking job is caught; its thread goes on.
//!
//! A pool's threads are threads of a `std::thread::scope` ([`Pool::scoped`]): its jobs may
//! borrow what the scope borrows, and the scope joins them at its end.

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
#[cfg(test)]
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

/// How long a thread waits for another job before it ends.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// One unit of work.
pub(crate) type Job<'a> = Box<dyn FnOnce() + Send + 'a>;

type Spawn<'a> = Box<dyn Fn(Job<'a>) -> io::Result<()> + Send + Sync + 'a>;

/// Every thread of the pool is busy (or the pool is closed): the job was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Full;

struct State {
    threads: usize,
    /// Threads waiting for a job, less the jobs already handed to them.
    idle: usize,
    closed: bool,
}

struct Inner<'a> {
    max: usize,
    keep_alive: Duration,
    state: Mutex<State>,
    /// A thread ended.
    ended: Condvar,
    /// Taken at close: the waiting threads then see the channel disconnect.
    jobs: Mutex<Option<Sender<Job<'a>>>>,
    queue: Receiver<Job<'a>>,
    spawn: Spawn<'a>,
}

/// A bounded pool (see the module docs). Dropping it closes it.
pub(crate) struct Pool<'a> {
    inner: Arc<Inner<'a>>,
}

// Plain (not scoped) threads: a pool that outlives any scope (the MCP client's answers to
// its server's questions; the tests).
#[cfg(any(test, feature = "mcp"))]
impl Pool<'static> {
    /// A pool of at most `max` plain threads named `name`.
    pub(crate) fn new(name: &str, max: usize) -> Pool<'static> {
        Pool::named(name, max, |builder, job| builder.spawn(job).map(drop))
    }
}

impl<'a> Pool<'a> {
    /// A pool of at most `max` threads of `scope`, named `name`.
    pub(crate) fn scoped<'env>(
        scope: &'a std::thread::Scope<'a, 'env>,
        name: &str,
        max: usize,
    ) -> Pool<'a> {
        Pool::named(name, max, move |builder, job| {
            builder.spawn_scoped(scope, job).map(drop)
        })
    }

    /// A pool whose threads, named `name`, `spawn` starts.
    fn named(
        name: &str,
        max: usize,
        spawn: impl Fn(std::thread::Builder, Job<'a>) -> io::Result<()> + Send + Sync + 'a,
    ) -> Pool<'a> {
        let name = name.to_owned();
        Pool::with_spawner(
            max,
            KEEP_ALIVE,
            Box::new(move |job| spawn(std::thread::Builder::new().name(name.clone()), job)),
        )
    }

    fn with_spawner(max: usize, keep_alive: Duration, spawn: Spawn<'a>) -> Pool<'a> {
        let (jobs, queue) = crossbeam_channel::unbounded();
        Pool {
            inner: Arc::new(Inner {
                max,
                keep_alive,
                state: Mutex::new(State {
                    threads: 0,
                    idle: 0,
                    closed: false,
                }),
                ended: Condvar::new(),
                jobs: Mutex::new(Some(jobs)),
                queue,
                spawn,
            }),
        }
    }

    /// Runs `job` on a thread of the pool: an idle one, or a new one while there are fewer
    /// than the maximum. Never blocks on a busy thread.
    ///
    /// # Errors
    /// [`Full`] when every thread is busy, the pool is closed, or no thread can be started;
    /// the job is dropped then.
    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'a) -> Result<(), Full> {
        let inner = &self.inner;
        let mut state = inner.state.lock();
        if state.closed {
            return Err(Full);
        }
        if state.idle > 0 {
            // The channel is unbounded and a waiting thread takes the job: the send never
            // blocks, and the job is never left without a thread (see `work`).
            let jobs = inner.jobs.lock();
            let Some(jobs) = jobs.as_ref() else {
                return Err(Full);
            };
            state.idle -= 1;
            let _ = jobs.send(Box::new(job));
            return Ok(());
        }
        if state.threads >= inner.max {
            return Err(Full);
        }
        state.threads += 1;
        let worker = {
            let inner = inner.clone();
            let first: Job<'a> = Box::new(job);
            Box::new(move || work(&inner, first))
        };
        if (inner.spawn)(worker).is_err() {
            state.threads -= 1;
            return Err(Full);
        }
        Ok(())
    }

    /// Threads started and not yet ended.
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.inner.state.lock().threads
    }

    /// Takes no more jobs; idle threads end at once, busy ones after their job.
    pub(crate) fn close(&self) {
        self.inner.state.lock().closed = true;
        self.inner.jobs.lock().take();
    }

    /// Closes the pool and waits until its threads ended, at most `timeout`. Returns false
    /// when some are still running then.
    #[cfg(test)]
    pub(crate) fn join(&self, timeout: Duration) -> bool {
        self.close();
        let until = Instant::now() + timeout;
        let mut state = self.inner.state.lock();
        while state.threads > 0 {
            if self.inner.ended.wait_until(&mut state, until).timed_out() {
                return state.threads == 0;
            }
        }
        true
    }
}

impl Drop for Pool<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

/// A thread of the pool: its first job, then what comes, until it waited `keep_alive` for
/// nothing or the pool closed.
fn work(inner: &Inner<'_>, first: Job<'_>) {
    let mut job = Some(first);
    loop {
        if let Some(job) = job.take() {
            // The job's own code: a panic there ends the job, not the thread.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
        }
        inner.state.lock().idle += 1;
        match inner.queue.recv_timeout(inner.keep_alive) {
            // A job handed to an idle thread: `submit` took that one off `idle`.
            Ok(next) => job = Some(next),
            Err(_) => {
                let mut state = inner.state.lock();
                // A job sent between the timeout and the lock was counted off `idle`
                // already: it is this thread's.
                if let Ok(next) = inner.queue.try_recv() {
                    job = Some(next);
                    continue;
                }
                state.idle -= 1;
                state.threads -= 1;
                inner.ended.notify_all();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn jobs_beyond_the_busy_threads_are_refused_and_threads_are_reused() {
        let pool = Pool::new("test-pool", 2);
        let (release, gate) = crossbeam_channel::unbounded::<()>();
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..2 {
            let (gate, ran) = (gate.clone(), ran.clone());
            pool.submit(move || {
                let _ = gate.recv();
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        }
        assert_eq!(pool.submit(|| {}), Err(Full));
        assert_eq!(pool.threads(), 2);
        drop(release);
        // Both threads come back idle, and take the next jobs without a third thread.
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.inner.state.lock().idle < 2 {
            assert!(Instant::now() < deadline, "the threads never came back");
            std::thread::sleep(Duration::from_millis(1));
        }
        for _ in 0..2 {
            let ran = ran.clone();
            pool.submit(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        }
        assert!(pool.join(Duration::from_secs(10)));
        assert_eq!(ran.load(Ordering::SeqCst), 4);
        assert_eq!(pool.submit(|| {}), Err(Full), "closed");
    }

    #[test]
    fn a_panicking_job_leaves_its_thread_working() {
        let pool = Pool::new("test-pool", 1);
        pool.submit(|| panic!("a job's own bug")).unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let tx = tx.clone();
            if pool.submit(move || tx.send(()).unwrap()).is_ok() {
                break;
            }
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(1));
        }
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(pool.threads(), 1);
    }

    #[test]
    fn idle_threads_end_after_their_keep_alive_and_jobs_racing_it_still_run() {
        let ran = Arc::new(AtomicUsize::new(0));
        let pool = Pool::with_spawner(
            4,
            Duration::from_micros(50),
            Box::new(|job| std::thread::Builder::new().spawn(job).map(drop)),
        );
        let mut taken = 0;
        for _ in 0..2000 {
            let ran = ran.clone();
            if pool
                .submit(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                })
                .is_ok()
            {
                taken += 1;
            }
        }
        assert!(pool.join(Duration::from_secs(20)));
        assert_eq!(ran.load(Ordering::SeqCst), taken);
    }

    #[test]
    fn scoped_jobs_borrow_and_the_scope_joins_them() {
        let count = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let pool = Pool::scoped(scope, "test-scoped", 3);
            for _ in 0..3 {
                pool.submit(|| {
                    count.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
            }
        });
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }
}
