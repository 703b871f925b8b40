//! Our requests waiting for their answers: ids, the channel each answer comes on, and the
//! reason every one of them gets when the connection ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use serde_json::Value;

use super::RpcError;

/// What a waiting request receives on its channel.
#[derive(Debug, PartialEq)]
pub(crate) enum Reply<E> {
    /// The response: its `result` or its `error`.
    Response(Result<Value, RpcError>),
    /// Something the other side said about the request before answering it (MCP's
    /// progress), routed by the protocol's layer ([`super::Peer::notice`]).
    Notice(Value),
    /// The transport could not complete the request (an HTTP POST that failed).
    Failed(E),
}

/// The most notices waiting unread on one request's channel; more are dropped (they are
/// progress, and the next one says more), so a chatty peer cannot grow a waiter's queue.
pub(crate) const MAX_NOTICES: usize = 64;

/// How a response was routed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Routed {
    /// Handed to the request that waits for it.
    Answered(u64),
    /// The answer to a request of ours that no longer waits (it was cancelled or timed out).
    Late(u64),
    /// An id we never sent: not a number, or above the last id handed out.
    Unknown(Value),
}

struct Map<E> {
    waiting: HashMap<u64, Sender<Reply<E>>>,
    /// Set once the connection ended: the reason every later request gets.
    closed: Option<E>,
}

pub(crate) struct Pending<E> {
    /// The last id handed out (ids start at 1).
    last: AtomicU64,
    map: Mutex<Map<E>>,
}

impl<E: Clone> Pending<E> {
    pub(crate) fn new() -> Pending<E> {
        Pending {
            last: AtomicU64::new(0),
            map: Mutex::new(Map {
                waiting: HashMap::new(),
                closed: None,
            }),
        }
    }

    /// A new id and the channel its reply comes on.
    ///
    /// # Errors
    /// The reason the connection ended, once it did.
    pub(crate) fn open(&self) -> Result<(u64, Receiver<Reply<E>>), E> {
        // One response and up to `MAX_NOTICES` notices: the response always has room.
        let (tx, rx) = crossbeam_channel::bounded(MAX_NOTICES + 1);
        let mut map = self.map.lock();
        // Checked under the lock `close` clears under: a request either sees the reason or
        // is woken by the clearing.
        if let Some(why) = &map.closed {
            return Err(why.clone());
        }
        let id = self.last.fetch_add(1, Ordering::SeqCst) + 1;
        map.waiting.insert(id, tx);
        Ok((id, rx))
    }

    /// Routes the response to request `id`.
    pub(crate) fn answer(&self, id: &Value, outcome: Result<Value, RpcError>) -> Routed {
        let Some(n) = id.as_u64().filter(|&n| n >= 1 && n <= self.last_id()) else {
            return Routed::Unknown(id.clone());
        };
        match self.map.lock().waiting.remove(&n) {
            Some(tx) => {
                // Room is kept for it (see `open`); the waiter may have gone meanwhile.
                let _ = tx.try_send(Reply::Response(outcome));
                Routed::Answered(n)
            }
            None => Routed::Late(n),
        }
    }

    /// Hands `notice` to request `id` if it waits and has room; false otherwise.
    pub(crate) fn notice(&self, id: u64, notice: Value) -> bool {
        let map = self.map.lock();
        let Some(tx) = map.waiting.get(&id) else {
            return false;
        };
        // Under the map's lock, as every send is: the check and the send are one step.
        if tx.len() >= MAX_NOTICES {
            return false;
        }
        tx.try_send(Reply::Notice(notice)).is_ok()
    }

    /// Fails request `id` with `why`, if it still waits.
    pub(crate) fn fail(&self, id: u64, why: E) {
        if let Some(tx) = self.map.lock().waiting.remove(&id) {
            let _ = tx.try_send(Reply::Failed(why));
        }
    }

    /// The connection ended with `why`: every waiting request wakes (its channel
    /// disconnects) and every later one fails with the first reason given.
    pub(crate) fn close(&self, why: E) {
        let mut map = self.map.lock();
        map.closed.get_or_insert(why);
        map.waiting.clear();
    }

    pub(crate) fn closed(&self) -> Option<E> {
        self.map.lock().closed.clone()
    }

    pub(crate) fn last_id(&self) -> u64 {
        self.last.load(Ordering::SeqCst)
    }

    /// How many requests wait.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.lock().waiting.len()
    }
}

impl<E> Pending<E> {
    /// Drops request `id` (answered, or no longer waited for).
    pub(crate) fn forget(&self, id: u64) {
        self.map.lock().waiting.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn responses_reach_their_request_once_and_strays_are_told_apart() {
        let pending = Pending::<String>::new();
        let (one, rx1) = pending.open().unwrap();
        let (two, rx2) = pending.open().unwrap();
        assert_eq!((one, two), (1, 2));
        assert_eq!(
            pending.answer(&json!(2), Ok(json!("b"))),
            Routed::Answered(2)
        );
        assert_eq!(rx2.try_recv(), Ok(Reply::Response(Ok(json!("b")))));
        assert_eq!(
            pending.answer(&json!(2), Ok(json!("again"))),
            Routed::Late(2)
        );
        assert_eq!(
            pending.answer(&json!(3), Ok(json!(null))),
            Routed::Unknown(json!(3))
        );
        assert_eq!(
            pending.answer(&json!("1"), Ok(json!(null))),
            Routed::Unknown(json!("1"))
        );
        assert_eq!(
            pending.answer(&json!(0), Ok(json!(null))),
            Routed::Unknown(json!(0))
        );
        pending.forget(one);
        assert_eq!(pending.answer(&json!(1), Ok(json!(null))), Routed::Late(1));
        assert!(rx1.try_recv().is_err());
        assert_eq!(pending.len(), 0);
    }

    #[test]
    fn notices_are_bounded_and_the_response_always_has_room() {
        let pending = Pending::<String>::new();
        let (id, rx) = pending.open().unwrap();
        let taken = (0..1000).filter(|&i| pending.notice(id, json!(i))).count();
        assert_eq!(taken, MAX_NOTICES);
        assert_eq!(
            pending.answer(&json!(id), Err(RpcError::new(1, "no"))),
            Routed::Answered(id)
        );
        let replies: Vec<_> = rx.try_iter().collect();
        assert_eq!(replies.len(), MAX_NOTICES + 1);
        assert_eq!(
            replies.last(),
            Some(&Reply::Response(Err(RpcError::new(1, "no"))))
        );
        assert!(!pending.notice(id, json!("late")));
    }

    #[test]
    fn closing_wakes_every_waiter_and_refuses_later_requests_with_the_first_reason() {
        let pending = Pending::<String>::new();
        let (id, rx) = pending.open().unwrap();
        let (failed, rx_failed) = pending.open().unwrap();
        pending.fail(failed, "post failed".into());
        assert_eq!(
            rx_failed.try_recv(),
            Ok(Reply::Failed("post failed".into()))
        );
        pending.close("exited".into());
        pending.close("second".into());
        assert!(rx.recv().is_err(), "the waiter woke");
        assert_eq!(pending.open().map(|(id, _)| id), Err("exited".to_owned()));
        assert_eq!(pending.closed(), Some("exited".into()));
        assert_eq!(
            pending.answer(&json!(id), Ok(json!(null))),
            Routed::Late(id)
        );
    }
}
