//! Clearing the steering and follow-up queues, from any thread.

use std::sync::Arc;

use super::{AgentHandle, Queue};
use crate::list::List;
use crate::message::Message;

impl AgentHandle {
    /// Removes every queued steering message and returns them, in order: a UI puts them back
    /// in its input box, say. Works at any time, from any
    /// thread (a listener included), also while a run is active: a message a turn already
    /// took is in the transcript and not returned; the others are never delivered. The
    /// shorter queue is published at once (no event). Returns nothing once the agent is gone.
    pub fn clear_steering_queue(&self) -> Vec<Message> {
        self.clear(&[Queue::Steering])
    }

    /// Removes every queued follow-up and returns them, in order; as
    /// [`AgentHandle::clear_steering_queue`] for the follow-up queue.
    pub fn clear_follow_up_queue(&self) -> Vec<Message> {
        self.clear(&[Queue::FollowUp])
    }

    /// Empties both queues in one state change and returns what they held, the steering
    /// messages first, then the follow-ups, each queue in order.
    /// Otherwise as [`AgentHandle::clear_steering_queue`].
    pub fn clear_queues(&self) -> Vec<Message> {
        self.clear(&[Queue::Steering, Queue::FollowUp])
    }

    fn clear(&self, queues: &[Queue]) -> Vec<Message> {
        if self.agent.upgrade().is_none() {
            return Vec::new();
        }
        // The empty case publishes nothing (a snapshot tells, as for a turn's take).
        let state = self.shared.snapshot();
        let empty = queues.iter().all(|q| match q {
            Queue::Steering => state.steering_queue.is_empty(),
            Queue::FollowUp => state.follow_up_queue.is_empty(),
        });
        drop(state);
        if empty {
            return Vec::new();
        }
        self.shared.update(|next| {
            let mut removed = Vec::new();
            for q in queues {
                removed.extend(take_queue(match q {
                    Queue::Steering => &mut next.steering_queue,
                    Queue::FollowUp => &mut next.follow_up_queue,
                }));
            }
            removed
        })
    }
}

/// Empties `queue` and returns its messages, in order.
pub(super) fn take_queue(queue: &mut List<Arc<Message>>) -> Vec<Message> {
    std::mem::take(queue)
        .iter()
        .map(|m| Message::clone(m))
        .collect()
}
