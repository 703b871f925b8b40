//! Where every event goes: folded into the published `State`, then handed to the listeners.
//!
//! This is the one place an event travels through: `Shared::emit` folds it (under the store
//! lock, so queue updates from other threads never interleave with a fold), stores the new
//! snapshot, and only then calls the listeners in registration order on the calling (run)
//! thread, with no lock held.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::event::AgentEvent;
use crate::state::State;

pub(crate) type Callback = dyn Fn(&AgentEvent) + Send + Sync;

pub(crate) enum Sink {
    Callback(Box<Callback>),
    Channel(Sender<AgentEvent>),
}

pub(crate) struct Listener {
    id: u64,
    active: AtomicBool,
    sink: Sink,
}

/// The part of an agent that handles and threads share: the published state, the queues and
/// the listeners.
pub(crate) struct Shared {
    state: ArcSwap<State>,
    // Serializes every store of `state`, so that a change made from another thread (a steer)
    // never interleaves with a fold and is never lost.
    store: Mutex<()>,
    // Read once per event without a lock; `subscribe` and `unsubscribe` swap in a new list
    // (under `edit`, so two of them never lose each other's change).
    listeners: ArcSwap<Vec<Arc<Listener>>>,
    edit: Mutex<()>,
    next_id: AtomicU64,
}

impl Shared {
    pub(crate) fn new(state: State) -> Shared {
        Shared {
            state: ArcSwap::from_pointee(state),
            store: Mutex::new(()),
            listeners: ArcSwap::from_pointee(Vec::new()),
            edit: Mutex::new(()),
            next_id: AtomicU64::new(1),
        }
    }

    pub(crate) fn snapshot(&self) -> Arc<State> {
        self.state.load_full()
    }

    /// Publishes a state change that is not an event (queues, settings, listener panics).
    /// Returns what `f` returns.
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let _store = self.store.lock();
        let mut next = State::clone(&self.state.load());
        let r = f(&mut next);
        self.state.store(Arc::new(next));
        r
    }

    /// Folds `event` into the state, publishes it, then calls every listener.
    pub(crate) fn emit(&self, event: AgentEvent) {
        {
            let _store = self.store.lock();
            let next = self.state.load().apply(&event);
            self.state.store(Arc::new(next));
        }
        let listeners = self.listeners.load_full();
        for l in listeners.iter() {
            if !l.active.load(Ordering::Acquire) {
                continue;
            }
            match &l.sink {
                Sink::Callback(f) => {
                    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(&event))) {
                        self.record_panic(l.id, &event, panic_message(&*payload));
                    }
                }
                Sink::Channel(tx) => {
                    // Blocks while the channel is full: the run waits, nothing is dropped.
                    if tx.send(event.clone()).is_err() {
                        self.unsubscribe(l.id);
                    }
                }
            }
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

    pub(crate) fn subscribe(&self, sink: Sink) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let _edit = self.edit.lock();
        let mut next = Vec::clone(&self.listeners.load());
        next.push(Arc::new(Listener {
            id,
            active: AtomicBool::new(true),
            sink,
        }));
        self.listeners.store(Arc::new(next));
        id
    }

    pub(crate) fn unsubscribe(&self, id: u64) -> bool {
        let _edit = self.edit.lock();
        let mut next = Vec::clone(&self.listeners.load());
        let Some(pos) = next.iter().position(|l| l.id == id) else {
            return false;
        };
        // A dispatch already under way holds the old list; the flag keeps it from calling
        // this listener again.
        next[pos].active.store(false, Ordering::Release);
        next.remove(pos);
        self.listeners.store(Arc::new(next));
        true
    }
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
