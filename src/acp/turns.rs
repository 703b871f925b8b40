//! The prompts of one session and when each is answered.
//!
//! A `session/prompt` read while the session's agent runs does not wait and is not refused
//! (unless [`Options::prompt_while_running`](super::Options::prompt_while_running) says
//! so): its content goes into the running agent as steering or as a follow-up, and the
//! request is answered when its content was answered:
//!
//! - the prompts whose content is in the transcript form one *answering group* (the run's
//!   own prompt, and the steering delivered since);
//! - a follow-up is delivered when the agent would otherwise have stopped: everything before
//!   it was answered, so the group is answered `end_turn` right then, before the
//!   follow-up's first update, and the follow-up starts the next group;
//! - when the run ends, the group and whatever is still queued get the run's answer
//!   (`cancelled` for all after a `session/cancel`).
//!
//! Which user message of the run is a queued one is read from the agent's state: when a
//! user message starts and the agent's follow-up (or steering) queue holds fewer messages
//! than were queued here, that message is the oldest of them (the queues are FIFO, and a
//! session's queues are filled only here).

use std::collections::VecDeque;

use serde_json::Value;

/// How a prompt's content went into the running agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Queued {
    Steering,
    FollowUp,
}

/// The request a prompt answers: `None` for content sent by `_session/steering`, which is
/// answered at once (its content is answered through the running prompt's answer).
pub(super) type Asker = Option<Value>;

/// What a `$/cancel_request` for a prompt found.
#[derive(Debug, PartialEq)]
pub(super) enum Found {
    /// No prompt of this session has that request id.
    Nothing,
    /// Its content is in the transcript: the run is to be aborted.
    Delivered,
    /// It was still queued: it is taken out; its message is the `index`th of that queue.
    Queued(Queued, usize),
}

#[derive(Debug, Default)]
pub(super) struct Prompts {
    /// From a `session/prompt` accepted on an idle session to its run's answer (and the
    /// runs that take what was queued meanwhile).
    pub(super) running: bool,
    answering: Vec<Asker>,
    steering: VecDeque<Asker>,
    follow_ups: VecDeque<Asker>,
}

impl Prompts {
    /// A run starts for `asker`'s prompt.
    pub(super) fn start(&mut self, asker: Asker) {
        self.running = true;
        self.answering.push(asker);
    }

    /// `asker`'s content was queued into the running agent.
    pub(super) fn queue(&mut self, asker: Asker, how: Queued) {
        match how {
            Queued::Steering => self.steering.push_back(asker),
            Queued::FollowUp => self.follow_ups.push_back(asker),
        }
    }

    /// How many messages queued here the agent still holds: those the agent took since
    /// are being delivered.
    #[cfg(test)]
    pub(super) fn queued(&self) -> (usize, usize) {
        (self.steering.len(), self.follow_ups.len())
    }

    /// A user message of the run starts, with this many messages left in the agent's
    /// steering and follow-up queues. Returns the prompts answered now (`end_turn`): the
    /// group before a follow-up.
    pub(super) fn user_message(
        &mut self,
        steering_left: usize,
        follow_ups_left: usize,
    ) -> Vec<Asker> {
        // The agent may take several at once (`QueueMode::All`): they start one by one, and
        // the first of them moves them all.
        let taken = self.follow_ups.len().saturating_sub(follow_ups_left);
        if taken > 0 {
            let next = self.follow_ups.drain(..taken).collect();
            return std::mem::replace(&mut self.answering, next);
        }
        let taken = self.steering.len().saturating_sub(steering_left);
        self.answering.extend(self.steering.drain(..taken));
        Vec::new()
    }

    /// The runs ended: every prompt left is answered with their outcome.
    pub(super) fn finish(&mut self) -> Vec<Asker> {
        self.running = false;
        let mut all = std::mem::take(&mut self.answering);
        all.extend(self.steering.drain(..));
        all.extend(self.follow_ups.drain(..));
        all
    }

    /// Finds the prompt of request `id` for a `$/cancel_request`, with this many messages
    /// left in the agent's queues (those taken and not yet seen starting count as
    /// delivered).
    pub(super) fn cancel(
        &mut self,
        id: &Value,
        steering_left: usize,
        follow_ups_left: usize,
    ) -> Found {
        let mine = |a: &Asker| a.as_ref() == Some(id);
        if self.answering.iter().any(mine) {
            return Found::Delivered;
        }
        for (how, queue, left) in [
            (Queued::Steering, &mut self.steering, steering_left),
            (Queued::FollowUp, &mut self.follow_ups, follow_ups_left),
        ] {
            if let Some(i) = queue.iter().position(mine) {
                let taken = queue.len().saturating_sub(left);
                if i < taken {
                    return Found::Delivered;
                }
                queue.remove(i);
                return Found::Queued(how, i - taken);
            }
        }
        Found::Nothing
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ids(askers: Vec<Asker>) -> Vec<Value> {
        askers
            .into_iter()
            .map(|a| a.unwrap_or(Value::Null))
            .collect()
    }

    #[test]
    fn a_follow_up_answers_the_group_before_it_and_steering_joins_the_group() {
        let mut p = Prompts::default();
        p.start(Some(json!(1)));
        p.queue(Some(json!(2)), Queued::Steering);
        p.queue(Some(json!(3)), Queued::FollowUp);
        p.queue(None, Queued::Steering);
        // The run's own prompt: nothing taken from the queues.
        assert_eq!(ids(p.user_message(2, 1)), Vec::<Value>::new());
        // Both steering messages are taken at once (`QueueMode::All`), then start one by one.
        assert_eq!(ids(p.user_message(0, 1)), Vec::<Value>::new());
        assert_eq!(ids(p.user_message(0, 1)), Vec::<Value>::new());
        assert_eq!(p.queued(), (0, 1));
        // The follow-up: prompts 1 and 2 (and the steering request's content) were answered.
        assert_eq!(ids(p.user_message(0, 0)), [json!(1), json!(2), Value::Null]);
        assert_eq!(ids(p.finish()), [json!(3)]);
        assert!(!p.running);
    }

    #[test]
    fn what_is_still_queued_at_the_end_gets_the_runs_answer() {
        let mut p = Prompts::default();
        p.start(Some(json!("a")));
        p.queue(Some(json!("b")), Queued::FollowUp);
        p.queue(Some(json!("c")), Queued::Steering);
        assert_eq!(ids(p.finish()), [json!("a"), json!("c"), json!("b")]);
        assert_eq!(p.queued(), (0, 0));
    }

    #[test]
    fn a_cancel_request_finds_a_delivered_or_a_queued_prompt() {
        let mut p = Prompts::default();
        p.start(Some(json!(1)));
        p.queue(Some(json!(2)), Queued::Steering);
        p.queue(Some(json!(3)), Queued::Steering);
        p.queue(Some(json!(4)), Queued::FollowUp);
        assert_eq!(p.cancel(&json!(1), 2, 1), Found::Delivered);
        assert_eq!(p.cancel(&json!(9), 2, 1), Found::Nothing);
        // The agent took prompt 2's message and has not started it yet: it is delivered.
        assert_eq!(p.cancel(&json!(2), 1, 1), Found::Delivered);
        assert_eq!(
            p.cancel(&json!(3), 1, 1),
            Found::Queued(Queued::Steering, 0)
        );
        assert_eq!(
            p.cancel(&json!(4), 1, 1),
            Found::Queued(Queued::FollowUp, 0)
        );
        assert_eq!(p.queued(), (1, 0));
    }
}
