//! Channel subscriptions: the sending side of `subscribe_channel`.
//!
//! # Lossless channels
//! A lossless channel ([`ChannelPolicy::Block`]) is a bounded crossbeam channel of the
//! subscription's capacity (a rendezvous channel for 0). While it is full the run blocks in
//! crossbeam's own `send`, beside the run's cancel token in a `select!`: the consumer's
//! `recv` wakes the run at once, and a run that waits burns no CPU.
//!
//! An abort releases that wait without closing the channel. The few events the run still
//! emits (bounded by the run's structure, see `Agent::subscribe_channel`) cannot go into a
//! full bounded channel, so they wait in the subscription's backlog, and a thread of the
//! subscription hands them over in order, blocking in `send` as the run did, until the
//! backlog is empty (or the receiver is gone); then it ends. While a backlog exists every
//! later event goes behind it: events of the aborted run at once, events of a later run
//! after waiting, as for room in the channel, until the backlog was handed over.
//!
//! The channel used to be unbounded, its bound kept by polling its length (16 yields,
//! then sleeps of 20 µs doubling to 2 ms): a consumer that freed room was noticed up to a
//! pause later, and a run held by a slow consumer woke several times per event. Measured
//! by `benches/channel.rs` (both waits in the same run, the same events from one thread to
//! a consumer sleeping `c` µs per event, capacities 0, 1, 4, 64; the 2-core build machine,
//! shared and loaded), producer CPU per event, blocking against polled: 6-8 against 10-12
//! µs at `c` = 50, 6-9 against 19-24 µs at 200; a consumer taking 1.5 ms per event got one
//! every 1.8-3.9 ms (median) blocking and every 5.0-7.5 ms polled at capacities 0-4. The
//! price is a consumer that keeps up with a channel of 0 or 1: each event then parks and
//! wakes the run (3-6 µs of CPU an event, against under 1 µs for the polled wait's yields);
//! from capacity 4 both cost under 1 µs an event. Wall time per event was otherwise the same
//! within the noise.
//!
//! # Dropping updates
//! A [`ChannelPolicy::DropUpdates`] channel is unbounded: updates stop going in once
//! `capacity` events wait, while lifecycle events always go in (as many as the run's
//! structure makes, not one per streamed delta).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, SendTimeoutError, Sender, select};
use parking_lot::Mutex;

use crate::cancel::CancelToken;
use crate::event::AgentEvent;
use crate::state::ChannelPolicy;

/// The sending side of a channel subscription.
pub(crate) struct Channel {
    tx: Sender<AgentEvent>,
    pub(crate) capacity: usize,
    pub(crate) policy: ChannelPolicy,
    /// Lossless channels: what an aborted run emitted while the channel was full.
    backlog: Arc<Mutex<Backlog>>,
}

/// Events waiting to go into a full lossless channel, and whether a thread hands them over.
#[derive(Default)]
struct Backlog {
    events: VecDeque<AgentEvent>,
    /// While a thread hands the backlog over: disconnects when that thread ends.
    handing_over: Option<Receiver<()>>,
}

/// What happened to one event sent into a channel.
pub(crate) enum Sent {
    Delivered,
    Dropped,
    Gone,
}

impl Channel {
    pub(crate) fn new(capacity: usize, policy: ChannelPolicy) -> (Channel, Receiver<AgentEvent>) {
        let (tx, rx) = match policy {
            ChannelPolicy::Block => crossbeam_channel::bounded(capacity),
            _ => crossbeam_channel::unbounded(),
        };
        let channel = Channel {
            tx,
            capacity,
            policy,
            backlog: Arc::default(),
        };
        (channel, rx)
    }

    /// Sends `event`; `token` gives the token of the run being dispatched, asked only when
    /// a lossless channel is full (none outside a run: the bench emitter).
    pub(crate) fn send(&self, event: &AgentEvent, token: impl Fn() -> Option<CancelToken>) -> Sent {
        match self.policy {
            ChannelPolicy::Block => self.send_lossless(event, token),
            _ => {
                let update = matches!(
                    event,
                    AgentEvent::MessageUpdate { .. } | AgentEvent::ToolUpdate { .. }
                );
                if update && self.tx.len() >= self.capacity {
                    return Sent::Dropped;
                }
                // Unbounded: never blocks.
                match self.tx.send(event.clone()) {
                    Ok(()) => Sent::Delivered,
                    Err(_) => Sent::Gone,
                }
            }
        }
    }

    fn send_lossless(&self, event: &AgentEvent, token: impl Fn() -> Option<CancelToken>) -> Sent {
        // The run's token, asked once and only when needed.
        let mut run: Option<Option<CancelToken>> = None;
        // Behind a backlog: at once when the run was aborted, else once it was handed over.
        loop {
            let mut backlog = self.backlog.lock();
            let Some(handing_over) = backlog.handing_over.clone() else {
                break;
            };
            match run.get_or_insert_with(&token) {
                Some(t) if t.is_cancelled() => {
                    backlog.events.push_back(event.clone());
                    return Sent::Delivered;
                }
                Some(t) => {
                    drop(backlog);
                    let timer = t.timer();
                    select! {
                        recv(handing_over) -> _ => {}
                        recv(t.receiver()) -> _ => {}
                        recv(timer) -> _ => {}
                    }
                }
                None => {
                    drop(backlog);
                    let _ = handing_over.recv();
                }
            }
        }
        // A send with a deadline already passed is crossbeam's own `send` without its
        // parking: it retries a few times, spinning then yielding (a few µs), before it gives
        // up. A consumer that keeps up makes room meanwhile, and the run goes on without the
        // cost of parking and being woken (see the bench).
        let full = match self.tx.send_timeout(event.clone(), Duration::ZERO) {
            Ok(()) => return Sent::Delivered,
            Err(SendTimeoutError::Disconnected(_)) => return Sent::Gone,
            Err(SendTimeoutError::Timeout(full)) => full,
        };
        // Full: wait for the consumer, or for the end of the run, whichever comes first.
        let sent = match run.unwrap_or_else(&token) {
            None => self.tx.send(full),
            Some(t) if t.is_cancelled() => return self.defer(full),
            Some(t) => {
                // A run timeout's deadline cancels the token once someone asks it.
                let timer = t.timer();
                select! {
                    send(self.tx, full) -> sent => sent,
                    recv(t.receiver()) -> _ => return self.defer(event.clone()),
                    recv(timer) -> _ => {
                        t.is_cancelled();
                        return self.defer(event.clone());
                    }
                }
            }
        };
        match sent {
            Ok(()) => Sent::Delivered,
            Err(_) => Sent::Gone,
        }
    }

    /// Starts a backlog with `event`, and the thread that hands it over.
    fn defer(&self, event: AgentEvent) -> Sent {
        let (done, handing_over) = crossbeam_channel::bounded::<()>(0);
        {
            let mut backlog = self.backlog.lock();
            backlog.events.push_back(event);
            if backlog.handing_over.is_some() {
                return Sent::Delivered;
            }
            backlog.handing_over = Some(handing_over);
        }
        let (tx, backlog) = (self.tx.clone(), self.backlog.clone());
        let spawned = std::thread::Builder::new()
            .name("pagent-channel".into())
            .spawn(move || hand_over(&tx, &backlog, done));
        if spawned.is_err() {
            // No thread to be had (the closure and its `done` are dropped): the run hands
            // the backlog over itself, waiting for the consumer as it would without the
            // abort. Lossless first.
            let (done, _) = crossbeam_channel::bounded::<()>(0);
            hand_over(&self.tx, &self.backlog, done);
        }
        Sent::Delivered
    }
}

/// Sends the backlog's events in order until it is empty or the receiver is gone; then
/// marks it handed over (`done`, dropped on return, tells the waiters).
fn hand_over(tx: &Sender<AgentEvent>, backlog: &Mutex<Backlog>, done: Sender<()>) {
    loop {
        let next = {
            let mut b = backlog.lock();
            match b.events.pop_front() {
                Some(event) => event,
                None => {
                    b.handing_over = None;
                    break;
                }
            }
        };
        if tx.send(next).is_err() {
            // The receiver is gone: nobody will read the rest (the run's next send finds
            // the channel disconnected and removes the listener).
            let mut b = backlog.lock();
            b.events.clear();
            b.handing_over = None;
            break;
        }
    }
    drop(done);
}
