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
//! lock lets readers share it: many UI threads never queue behind one another. Writers take
//! it as an *upgradable* read while they fold (so readers go on reading the previous state
//! meanwhile, and two writers never fold at once), then upgrade for the pointer swap alone.
//! The previous state is dropped after the lock is released.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use parking_lot::{Mutex, RwLock, RwLockUpgradableReadGuard, RwLockWriteGuard};

use crate::cancel::CancelToken;
use crate::event::AgentEvent;
use crate::state::State;

pub(crate) type Callback = dyn Fn(&AgentEvent) + Send + Sync;

/// What a channel subscription does when its channel is full.
///
/// See [`crate::Agent::subscribe_channel_with`] for the exact guarantees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChannelPolicy {
    /// Lossless: the run waits while the channel holds `capacity` events. An abort releases
    /// the wait by closing the channel: the consumer receives every event queued before, in
    /// order, then the channel disconnects. A lossless channel never has a gap.
    #[default]
    Block,
    /// Never slows the run: while the channel holds `capacity` events or more, `MessageUpdate`
    /// and `ToolUpdate` events are dropped (counted in `State::updates_dropped`); every other
    /// event is always delivered, beyond `capacity` if need be.
    DropUpdates,
}

pub(crate) enum Sink {
    Callback(Box<Callback>),
    Channel(Channel),
}

/// The sending side of a channel subscription. The sender sits in a slot, so that closing the
/// channel (after an abort) disconnects the consumer at once, even while an older listener
/// list still holds this listener.
pub(crate) struct Channel {
    tx: Mutex<Option<Sender<AgentEvent>>>,
    capacity: usize,
    policy: ChannelPolicy,
}

impl Channel {
    pub(crate) fn new(capacity: usize, policy: ChannelPolicy) -> (Channel, Receiver<AgentEvent>) {
        let (tx, rx) = match policy {
            ChannelPolicy::Block => crossbeam_channel::bounded(capacity),
            // The bound is ours: updates stop going in at `capacity`; lifecycle events always
            // do (how many the run's structure makes, not how many deltas streamed).
            ChannelPolicy::DropUpdates => crossbeam_channel::unbounded(),
        };
        let channel = Channel {
            tx: Mutex::new(Some(tx)),
            capacity,
            policy,
        };
        (channel, rx)
    }
}

/// What happened to one event sent into a channel.
enum Sent {
    Delivered,
    Dropped,
    Closed,
    Gone,
}

pub(crate) struct Listener {
    id: u64,
    active: AtomicBool,
    sink: Sink,
}

type List = Arc<Vec<Arc<Listener>>>;

/// The part of an agent that handles and threads share: the published state, the queues and
/// the listeners.
pub(crate) struct Shared {
    // See the module docs for why a lock. Writers hold an upgradable read while they fold.
    state: RwLock<Arc<State>>,
    // Read once per event; `subscribe` and `unsubscribe` swap in a new list under an
    // upgradable read, so two of them never lose each other's change.
    listeners: RwLock<List>,
    // Set when the agent is dropped: the listeners are released and none is added again, so
    // a listener holding a handle never keeps the agent's listeners and channels alive.
    closed: AtomicBool,
    next_id: AtomicU64,
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
            next_id: AtomicU64::new(1),
            run_token: Mutex::new(None),
        }
    }

    pub(crate) fn snapshot(&self) -> Arc<State> {
        self.state.read().clone()
    }

    /// Publishes a state change that is not an event (queues, settings, counters).
    /// Returns what `f` returns.
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        // In place when no snapshot of the current state is held, as in `fold`.
        let current = self.state.upgradable_read();
        let mut w = RwLockUpgradableReadGuard::upgrade(current);
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
        let current = self.state.upgradable_read();
        let mut w = RwLockUpgradableReadGuard::upgrade(current);
        if let Some(state) = Arc::get_mut(&mut w) {
            let r = before(state);
            state.fold(event);
            return r;
        }
        let current = RwLockWriteGuard::downgrade_to_upgradable(w);
        let mut next = State::clone(&current);
        let r = before(&mut next);
        next.fold(event);
        let old = Self::swap(current, next);
        drop(old);
        r
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
    pub(crate) fn emit(&self, event: AgentEvent) {
        self.emit_with(event, |_| ());
    }

    /// As [`Shared::emit`], with a change `before` the fold in the same publication; returns
    /// what `before` returns.
    pub(crate) fn emit_with<R>(
        &self,
        event: AgentEvent,
        before: impl FnOnce(&mut State) -> R,
    ) -> R {
        let r = self.fold(&event, before);
        let listeners = self.listeners.read().clone();
        let (mut dropped, mut closed) = (0u64, 0u64);
        for l in listeners.iter() {
            if !l.active.load(Ordering::Acquire) {
                continue;
            }
            match &l.sink {
                Sink::Callback(f) => {
                    if let Err(message) = super::guard::catch(|| f(&event)) {
                        self.record_panic(l.id, &event, message);
                    }
                }
                Sink::Channel(c) => match self.send(c, &event) {
                    Sent::Delivered => {}
                    Sent::Dropped => dropped += 1,
                    Sent::Closed => {
                        closed += 1;
                        self.unsubscribe(l.id);
                    }
                    Sent::Gone => {
                        self.unsubscribe(l.id);
                    }
                },
            }
        }
        if dropped + closed > 0 {
            self.update(|next| {
                next.updates_dropped += dropped;
                next.channels_closed += closed;
            });
        }
        r
    }

    fn send(&self, channel: &Channel, event: &AgentEvent) -> Sent {
        let mut slot = channel.tx.lock();
        let Some(tx) = slot.as_ref() else {
            return Sent::Gone;
        };
        if channel.policy == ChannelPolicy::DropUpdates {
            let update = matches!(
                event,
                AgentEvent::MessageUpdate { .. } | AgentEvent::ToolUpdate { .. }
            );
            if update && tx.len() >= channel.capacity {
                return Sent::Dropped;
            }
            // Unbounded: never blocks.
            return match tx.send(event.clone()) {
                Ok(()) => Sent::Delivered,
                Err(_) => Sent::Gone,
            };
        }
        let event = match tx.try_send(event.clone()) {
            Ok(()) => return Sent::Delivered,
            Err(TrySendError::Disconnected(_)) => return Sent::Gone,
            Err(TrySendError::Full(e)) => e,
        };
        // Full: wait for the consumer, or for an abort of the run, whichever comes first.
        let token = self.run_token.lock().clone();
        let outcome = match &token {
            // Only the bench emitter dispatches outside a run.
            None => tx.send(event).map_err(|_| ()),
            Some(t) if t.is_cancelled() => return Self::close_channel(&mut slot),
            Some(t) => crossbeam_channel::select! {
                send(tx, event) -> r => r.map_err(|_| ()),
                recv(t.receiver()) -> _ => return Self::close_channel(&mut slot),
            },
        };
        match outcome {
            Ok(()) => Sent::Delivered,
            Err(()) => Sent::Gone,
        }
    }

    /// Drops the sender: the consumer receives what is queued, then the channel disconnects.
    fn close_channel(slot: &mut Option<Sender<AgentEvent>>) -> Sent {
        slot.take();
        Sent::Closed
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
        let old = Self::replace(current, next);
        drop(old);
        id
    }

    fn replace(current: RwLockUpgradableReadGuard<'_, List>, next: Vec<Arc<Listener>>) -> List {
        let mut w = RwLockUpgradableReadGuard::upgrade(current);
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
        let mut next = Vec::clone(&current);
        next.remove(pos);
        // The removed listener (a closure and what it captured) is dropped with no lock held:
        // its drop is user code, which may subscribe or unsubscribe.
        let old = Self::replace(current, next);
        drop(old);
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
        let old = Self::replace(current, Vec::new());
        drop(old);
    }
}
