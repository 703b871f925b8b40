//! Where every event goes: folded into the published `State`, then handed to the listeners.
//!
//! This is the one place an event travels through: `Shared::emit` folds it (writers are
//! serialized, so queue updates from other threads never interleave with a fold), publishes
//! the new snapshot, and only then calls the listeners in registration order on the calling
//! (run) thread, with no lock held.
//!
//! # Why a lock and not `ArcSwap`
//! The snapshot lives in a `parking_lot::RwLock<Arc<State>>`. It used to live in an
//! `arc_swap::ArcSwap`, whose loads are a few nanoseconds faster, but whose default strategy
//! makes every `store` walk a process-wide list with one node for every thread that ever
//! loaded any `ArcSwap` (the nodes are reused, never freed). A run stores once per event, so
//! with one thread per agent the cost of each event grew with the number of threads in the
//! process: at 1,000 agents 83% of all CPU went to `Debt::pay_all`, and a 100,000-delta run
//! cost 11x more after 1,000 idle threads had each read one snapshot of another agent, and
//! stayed that slow after they exited. arc-swap's other strategies do not help:
//! `IndependentStrategy` is the same strategy, and the `RwLock<()>` one (behind a feature)
//! is a std lock around the same pointer.
//!
//! Measured on the 2-core build machine (a store of a small state, then `load` from another
//! thread while a writer stores in a loop):
//!
//! | cell                    | store alone | store, 1,000 threads had loaded | load under writer |
//! |-------------------------|-------------|---------------------------------|-------------------|
//! | `ArcSwap` (default)     | 93 ns       | 19,000-23,000 ns                | 9 ns              |
//! | `Mutex<Arc<_>>`         | 60 ns       | 71 ns                           | 10 ns (p90 41 ns) |
//! | `RwLock<Arc<_>>`        | 89 ns       | 47 ns                           | 9 ns (p90 9 ns)   |
//!
//! The lock's cost does not depend on other threads at all, and a reader holds it only for
//! the `Arc` clone (one atomic increment), so `snapshot()` stays a cheap read. The read-write
//! lock lets readers share it: many UI threads never queue behind one another. A writer takes
//! the write lock and folds the event in place when no snapshot of the state is held anywhere
//! (nobody could see the change but through the lock); else it steps down to an *upgradable*
//! read while it folds a copy (so readers go on reading the previous state meanwhile, and two
//! writers never fold at once), then upgrades for the pointer swap alone. The previous state
//! is dropped after the lock is released.
//!
//! # Channels
//! A channel subscription's sending side, and how a lossless one waits for room without
//! losing the end of an aborted run, is `super::channel`; this module only hands it each
//! event with the token of the run being dispatched.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock, RwLockUpgradableReadGuard, RwLockWriteGuard};

use super::channel::{Channel, Sent};
use crate::cancel::CancelToken;
use crate::event::AgentEvent;
use crate::state::{ChannelStats, State};

pub(crate) type Callback = dyn Fn(&AgentEvent) + Send + Sync;

/// What a [`Waker`](super::Waker) calls.
pub(crate) type Wake = dyn Fn() + Send + Sync;

pub(crate) enum Sink {
    Callback(Box<Callback>),
    Channel(Channel),
    /// A waker: `wake` runs when the state changed and `armed` was set (by a look at the
    /// state); it clears `armed`, so one look gets at most one wake.
    Wake {
        wake: Box<Wake>,
        armed: Arc<AtomicBool>,
    },
}

pub(crate) struct Listener {
    id: u64,
    active: AtomicBool,
    sink: Sink,
}

type List = Arc<Vec<Arc<Listener>>>;

/// The listener list as a run's last event read it: each event of the run thread uses it
/// again while no `subscribe`, `unsubscribe` or `close` changed the list (a load of the
/// list's version, where the list's lock and `Arc` cost four atomic read-modify-writes per
/// event; a turn of a tool loop publishes about ten events, a reply one per delta).
///
/// Which listeners are called is the same either way: a listener removed since is still
/// in the copy but marked inactive at once, so it is never called again. Only its drop
/// waits: the copy keeps it until the run's next event or the run's end, whichever comes
/// first, and drops it then on the run thread, with no lock held (as a dispatch under way
/// does for the event it is delivering).
#[derive(Default)]
pub(crate) struct Listeners(Option<(u64, List)>);

/// The part of an agent that handles and threads share: the published state, the queues and
/// the listeners.
pub(crate) struct Shared {
    // See the module docs for why a lock, and how writers hold it.
    state: RwLock<Arc<State>>,
    // Read once per event; `subscribe` and `unsubscribe` swap in a new list under an
    // upgradable read, so two of them never lose each other's change.
    listeners: RwLock<List>,
    // Set when the agent is dropped: the listeners are released and none is added again, so
    // a listener holding a handle never keeps the agent's listeners and channels alive.
    closed: AtomicBool,
    // Bumped with every change of `listeners` (under its lock): a stream of deltas reads the
    // list again only when it changed (see `Listeners`).
    version: AtomicU64,
    next_id: AtomicU64,
    // How many wakers are subscribed: a change outside events (`update`) looks for them only
    // when there is one.
    wakers: AtomicUsize,
    // The token of the run whose events are being dispatched (from `AgentStart` to the end of
    // `AgentEnd`): a lossless channel that is full waits on it.
    run_token: Mutex<Option<CancelToken>>,
}

impl Shared {
    pub(crate) fn new(state: State) -> Shared {
        Shared {
            state: RwLock::new(Arc::new(state)),
            listeners: RwLock::new(Arc::new(Vec::new())),
            closed: AtomicBool::new(false),
            version: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            wakers: AtomicUsize::new(0),
            run_token: Mutex::new(None),
        }
    }

    pub(crate) fn snapshot(&self) -> Arc<State> {
        self.state.read().clone()
    }

    /// What `f` reads of the published state, under the lock, with no snapshot taken (the
    /// snapshot's `Arc` would cost two atomic operations more): for the run's own short
    /// looks (are the queues empty? the transcript's view), never for user code, which
    /// could call back into the agent while the lock is held.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.state.read())
    }

    /// Publishes a state change that is not an event (queues, settings, counters).
    /// Returns what `f` returns.
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let r = self.publish(|state| {
            let r = f(state);
            state.generation += 1;
            r
        });
        if self.wakers.load(Ordering::Acquire) > 0 {
            let listeners = self.listeners.read().clone();
            for l in listeners.iter() {
                if l.active.load(Ordering::Acquire) {
                    Self::wake(&l.sink);
                }
            }
        }
        r
    }

    /// Publishes the state `f` makes of the current one: in place when no snapshot of the
    /// current state is held, as in `fold`.
    fn publish<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        // The write lock at once (one atomic operation less than an upgradable read
        // upgraded): the state is nearly always folded in place.
        let mut w = self.state.write();
        if let Some(state) = Arc::get_mut(&mut w) {
            return f(state);
        }
        let current = RwLockWriteGuard::downgrade_to_upgradable(w);
        let mut next = State::clone(&current);
        let r = f(&mut next);
        let old = Self::swap(current, next);
        drop(old);
        r
    }

    /// Calls a waker whose state was looked at since its last wake; nothing for other sinks.
    fn wake(sink: &Sink) {
        if let Sink::Wake { wake, armed } = sink
            && armed.swap(false, Ordering::AcqRel)
        {
            // A panicking waker is dropped silently: it has no event to report it against,
            // and the next look arms it again.
            let _ = super::guard::catch(wake);
        }
    }

    /// Publishes the state after `event`.
    ///
    /// When no snapshot of the current state is held anywhere (no reader kept the `Arc`, the
    /// common case while a run streams), the write lock makes this thread its only owner and
    /// the event is folded in place: nobody can see the change but through the lock, so this
    /// is the same as publishing a new state, without cloning every field and dropping them
    /// again. Otherwise the new state is built beside the old one, readers going on meanwhile.
    ///
    /// `before` changes the state first, in the same publication: what is not an event
    /// (the queues a reset empties) changes at the same instant as what the event says.
    fn fold<R>(&self, event: &AgentEvent, before: impl FnOnce(&mut State) -> R) -> R {
        self.publish(|state| {
            let r = before(state);
            state.fold(event);
            r
        })
    }

    /// Stores `next` and returns the previous state, to be dropped with no lock held.
    fn swap(current: RwLockUpgradableReadGuard<'_, Arc<State>>, next: State) -> Arc<State> {
        let mut w = RwLockUpgradableReadGuard::upgrade(current);
        std::mem::replace(&mut *w, Arc::new(next))
    }

    /// Sets (or clears) the token that releases a lossless channel's wait.
    pub(crate) fn set_run_token(&self, token: Option<CancelToken>) {
        *self.run_token.lock() = token;
    }

    /// Holds the lock of the dispatched run's token (a test's way to hold `abort()` in the
    /// middle of its work).
    #[cfg(test)]
    pub(crate) fn lock_run_token(&self) -> parking_lot::MutexGuard<'_, Option<CancelToken>> {
        self.run_token.lock()
    }

    /// Cancels the token of the run being dispatched, if any.
    pub(crate) fn cancel_dispatch(&self) {
        if let Some(t) = &*self.run_token.lock() {
            t.cancel();
        }
    }

    /// Folds `event` into the state, publishes it, then calls every listener.
    ///
    /// A tool's progress after an abort is not published: the run is ending, and what it
    /// still emits must stay within the bound that lossless channels rely on (see
    /// `Agent::subscribe_channel`). The reply's deltas stop at the source (the loop refuses them).
    pub(crate) fn emit(&self, event: &AgentEvent) {
        self.emit_cached(event, &mut Listeners::default());
    }

    /// As [`Shared::emit`], with the listener list `cache` holds while it is the current one
    /// (the run thread's events: see [`Listeners`]).
    pub(crate) fn emit_cached(&self, event: &AgentEvent, cache: &mut Listeners) {
        if let AgentEvent::ToolUpdate { .. } = event
            && self
                .run_token
                .lock()
                .as_ref()
                .is_some_and(|t| t.is_cancelled())
        {
            return;
        }
        self.fold(event, |_| ());
        self.deliver(event, self.listeners_in(cache));
    }

    /// The current listener list, from `cache` when no change was made since it was read
    /// (the list's version, a load), else read again into it.
    fn listeners_in<'c>(&self, cache: &'c mut Listeners) -> &'c List {
        let version = self.version.load(Ordering::Acquire);
        if cache.0.as_ref().is_none_or(|(v, _)| *v != version) {
            let fresh = {
                let current = self.listeners.read();
                // Read under the lock that every change holds: the pair is consistent.
                (self.version.load(Ordering::Acquire), current.clone())
            };
            // The list replaced (and a listener removed since) is dropped here, with no
            // lock held.
            cache.0 = Some(fresh);
        }
        // OK because it was filled just above when it was empty.
        &cache.0.as_ref().expect("the list just read").1
    }

    /// As [`Shared::emit`], with a change `before` the fold in the same publication; returns
    /// what `before` returns.
    pub(crate) fn emit_with<R>(
        &self,
        event: &AgentEvent,
        before: impl FnOnce(&mut State) -> R,
    ) -> R {
        let r = self.fold(event, before);
        let listeners = self.listeners.read().clone();
        self.deliver(event, &listeners);
        r
    }

    /// As [`Shared::emit`] for one of a stream of deltas (a `MessageUpdate`), which `push`
    /// completes first (it applies the delta to the partial the event carries), in the same
    /// publication: the listener list is read again only when it changed since the last
    /// delta of the same stream.
    ///
    /// The published state's copy of the partial lets go of its share of the text tail
    /// (and of the sealed pieces, when the delta seals the tail) before `push` runs, so
    /// that the partial `push` appends to holds them alone (unless a snapshot or an event
    /// kept elsewhere shares them) and appends in place; the fold then takes them back. The write lock is held from before the release to after the fold, and
    /// when the state is folded in place nobody else holds it: no one ever sees the copy
    /// without its tail. (When a copy of the state is folded, its release does nothing for
    /// the published state, which still shares the tail: the tail is copied on write.)
    pub(crate) fn emit_update(
        &self,
        event: &mut AgentEvent,
        push: impl FnOnce(&mut AgentEvent),
        cache: &mut Listeners,
    ) {
        self.publish(|state| {
            if let (Some(partial), AgentEvent::MessageUpdate { delta, .. }) =
                (&mut state.streaming_message, &*event)
            {
                partial.release_for(delta);
            }
            push(event);
            state.fold(event);
        });
        self.deliver(event, self.listeners_in(cache));
    }

    /// Calls every active listener with `event`, in registration order, no lock held.
    fn deliver(&self, event: &AgentEvent, listeners: &[Arc<Listener>]) {
        // The channels that dropped this event (at most one event each): rare, so no
        // allocation unless one did.
        let mut dropped: Vec<u64> = Vec::new();
        for l in listeners.iter() {
            if !l.active.load(Ordering::Acquire) {
                continue;
            }
            match &l.sink {
                Sink::Callback(f) => {
                    if let Err(message) = super::guard::catch(|| f(event)) {
                        self.record_panic(l.id, event, message);
                    }
                }
                Sink::Channel(c) => match c.send(event, || self.run_token.lock().clone()) {
                    Sent::Delivered => {}
                    Sent::Dropped => dropped.push(l.id),
                    Sent::Gone => {
                        self.unsubscribe(l.id);
                    }
                },
                sink @ Sink::Wake { .. } => Self::wake(sink),
            }
        }
        if !dropped.is_empty() {
            self.update(|next| {
                next.updates_dropped += dropped.len() as u64;
                for i in 0..next.channels.len() {
                    if let Some(stats) = next.channels.get_mut(i)
                        && dropped.contains(&stats.id)
                    {
                        stats.updates_dropped += 1;
                    }
                }
            });
        }
    }

    fn record_panic(&self, id: u64, event: &AgentEvent, message: String) {
        let text: Arc<str> = Arc::from(format!(
            "listener {id} panicked on {}: {message}",
            event.name()
        ));
        self.update(|next| {
            next.listener_panics += 1;
            next.last_listener_panic = Some(text);
        });
    }

    /// Adds a listener and returns its id. Once the agent is gone the sink is dropped at once
    /// (a channel's receiver disconnects) and the id names no listener.
    pub(crate) fn subscribe(&self, sink: Sink) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let stats = match &sink {
            Sink::Channel(c) => Some(ChannelStats::new(id, c.capacity, c.policy)),
            _ => None,
        };
        let waker = matches!(sink, Sink::Wake { .. });
        let listener = Arc::new(Listener {
            id,
            active: AtomicBool::new(true),
            sink,
        });
        let current = self.listeners.upgradable_read();
        if self.closed.load(Ordering::Acquire) {
            drop(current);
            drop(listener);
            return id;
        }
        let mut next = Vec::clone(&current);
        next.push(listener);
        if waker {
            self.wakers.fetch_add(1, Ordering::AcqRel);
        }
        let old = self.replace(current, next);
        drop(old);
        if let Some(stats) = stats {
            self.update(|next| next.channels.push_back(stats));
        }
        id
    }

    fn replace(
        &self,
        current: RwLockUpgradableReadGuard<'_, List>,
        next: Vec<Arc<Listener>>,
    ) -> List {
        let mut w = RwLockUpgradableReadGuard::upgrade(current);
        self.version.fetch_add(1, Ordering::AcqRel);
        std::mem::replace(&mut *w, Arc::new(next))
    }

    pub(crate) fn unsubscribe(&self, id: u64) -> bool {
        let current = self.listeners.upgradable_read();
        let Some(pos) = current.iter().position(|l| l.id == id) else {
            return false;
        };
        // A dispatch already under way holds the old list; the flag keeps it from calling
        // this listener again.
        current[pos].active.store(false, Ordering::Release);
        let (channel, waker) = match &current[pos].sink {
            Sink::Channel(_) => (true, false),
            Sink::Wake { .. } => (false, true),
            Sink::Callback(_) => (false, false),
        };
        if waker {
            self.wakers.fetch_sub(1, Ordering::AcqRel);
        }
        let mut next = Vec::clone(&current);
        next.remove(pos);
        // The removed listener (a closure and what it captured) is dropped with no lock held:
        // its drop is user code, which may subscribe or unsubscribe.
        let old = self.replace(current, next);
        drop(old);
        if channel {
            self.update(|next| {
                if let Some(i) = next.channels.iter().position(|c| c.id == id) {
                    next.channels.remove(i);
                }
            });
        }
        true
    }

    /// Releases every listener for good: called when the agent is dropped. Their closures
    /// (and any handle they hold) and the channels' senders are dropped, so each channel
    /// receiver disconnects once it has taken what is queued.
    pub(crate) fn close(&self) {
        let current = self.listeners.upgradable_read();
        self.closed.store(true, Ordering::Release);
        for l in current.iter() {
            l.active.store(false, Ordering::Release);
        }
        self.wakers.store(0, Ordering::Release);
        let old = self.replace(current, Vec::new());
        drop(old);
        // The state stays as the agent left it (`State::channels` included): a handle reads
        // its last snapshot.
    }
}
