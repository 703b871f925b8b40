//! Transcript repair: every tool call gets a result before the model sees it.
//!
//! Providers reject a request in which an assistant message calls a tool and no result for
//! that call follows it (OpenAI wants a `tool` message per call right after the assistant
//! message; Anthropic a `tool_result` block in the next user message). The loop gives every
//! call of its own runs a result, but a transcript can still have holes: a session file cut
//! in the middle of a tool batch (a crash, a kill), messages handed to
//! [`crate::AgentBuilder::messages`], or a `transform_context` hook that pruned a result.
//!
//! Two repairs, both placing a synthesized error result ([`NO_RESULT`]) right after the
//! assistant message's existing results, in call order, and both off with
//! `repair_requests(false)`:
//! - [`Run::repair_request`] runs on the messages of every model request, after `transform_context`, so
//!   the request is always valid. It never changes the transcript. A request whose messages
//!   are the context policy's view as the last request's was cut, of the transcript grown
//!   since, is checked from where the last check's verdict could change ([`Checked`]): a
//!   turn costs O(what it appended), not O(transcript).
//! - At the start of a run, when the transcript ends with an assistant message whose calls
//!   are not all answered (only results after it), [`Run::answer_unanswered`] appends the
//!   missing results as real messages (`MessageStart` / `MessageEnd` in the first turn,
//!   before the run's input), so the state, a session writer and the next request agree.
//!   A hole earlier in the transcript cannot be filled by appending; it stays in the
//!   transcript (the state shows what was handed over) and is repaired in each request.

use std::collections::HashSet;
use std::sync::Arc;

use super::run::Run;
use crate::context::ledger::ViewKey;
use crate::message::{Message, ToolCall, ToolResultMessage};

/// The text of a result synthesized for a call that has none.
pub(crate) const NO_RESULT: &str = "no result: this tool call was never answered (the run that \
                                    made it ended before its result was recorded)";

/// `messages` with the results of `holes` put in place: a synthesized error result for every
/// tool call that has none, right after that assistant message's existing results. Returns
/// `messages` itself, unchanged, when nothing is missing (the common case: no allocation).
fn fill(messages: Vec<Arc<Message>>, holes: Vec<(usize, ToolResultMessage)>) -> Vec<Arc<Message>> {
    if holes.is_empty() {
        return messages;
    }
    let mut out = Vec::with_capacity(messages.len() + holes.len());
    let mut holes = holes.into_iter().peekable();
    for (i, m) in messages.into_iter().enumerate() {
        while let Some((_, result)) = holes.next_if(|(at, _)| *at == i) {
            out.push(Arc::new(Message::ToolResult(result)));
        }
        out.push(m);
    }
    out.extend(holes.map(|(_, result)| Arc::new(Message::ToolResult(result))));
    out
}

/// The missing results of the calls of `messages[from..]`, each with the index it goes in
/// front of (the length, for the end), in order.
fn holes(messages: &[Arc<Message>], from: usize) -> Vec<(usize, ToolResultMessage)> {
    let mut holes = Vec::new();
    for (i, m) in messages.iter().enumerate().skip(from) {
        let Some(reply) = m.as_assistant() else {
            continue;
        };
        if reply.tool_calls().next().is_none() {
            continue;
        }
        let results = &messages[i + 1..];
        let results = match results
            .iter()
            .position(|m| !matches!(&**m, Message::ToolResult(_)))
        {
            Some(n) => &results[..n],
            None => results,
        };
        // The common case, and the loop's own order: one result per call, in call order.
        let in_order = reply.tool_calls().count() <= results.len()
            && reply.tool_calls().zip(results).all(
                |(call, m)| matches!(&**m, Message::ToolResult(r) if r.tool_call_id == call.id),
            );
        if in_order {
            continue;
        }
        let at = i + 1 + results.len();
        for call in unanswered(reply.tool_calls(), results.iter().map(|m| &**m)) {
            holes.push((at, Run::tool_result(call, NO_RESULT, true)));
        }
    }
    holes
}

/// What the last repair check of a run found: a view of the context policy's (no
/// `transform_context`) without a hole but maybe at its end, which the next check reads only
/// from `resume` on when its view has the same key and grew from this one.
///
/// Sound because the verdict on an assistant message depends only on the messages after it
/// up to the first one that is not a tool result: for every message before `resume` (the
/// last one that is not a tool result) those lie in the prefix checked, which a view with
/// the same key of a grown transcript repeats unchanged (see [`ViewKey`]). Within a run the
/// transcript only grows; the ledger's key changes when it starts over, slides, or gains a
/// summary.
#[derive(Debug)]
pub(crate) struct Checked {
    key: ViewKey,
    len: usize,
    /// The last message of the prefix checked, to tell a grown view from another one.
    last: Arc<Message>,
    resume: usize,
}

impl Run<'_> {
    /// The messages of this turn's request, repaired (see [`fill`]); `view` is the key
    /// of the context policy's view when `messages` is that view, untransformed.
    pub(crate) fn repair_request(
        &mut self,
        messages: Vec<Arc<Message>>,
        view: Option<ViewKey>,
    ) -> Vec<Arc<Message>> {
        let checked = self.context.checked.take();
        let from = match (&checked, view) {
            (Some(c), Some(key))
                if c.key == key
                    && messages
                        .get(c.len - 1)
                        .is_some_and(|m| Arc::ptr_eq(m, &c.last)) =>
            {
                c.resume
            }
            _ => 0,
        };
        let holes = holes(&messages, from);
        // Kept only for a view with no hole but at its end: one before would have to be
        // found again, and the skip would miss it.
        let n = messages.len();
        if let (Some(key), Some(last)) = (view, messages.last())
            && holes.iter().all(|(at, _)| *at == n)
        {
            let resume = messages
                .iter()
                .rposition(|m| !matches!(&**m, Message::ToolResult(_)))
                .unwrap_or(0);
            self.context.checked = Some(Checked {
                key,
                len: n,
                last: last.clone(),
                resume,
            });
        }
        fill(messages, holes)
    }
}

/// The calls among `calls` whose id none of `results` answers, in call order.
fn unanswered<'c, 'r>(
    calls: impl Iterator<Item = &'c ToolCall>,
    results: impl IntoIterator<Item = &'r Message>,
) -> impl Iterator<Item = &'c ToolCall> {
    let answered: HashSet<&str> = results
        .into_iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some(r.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    calls
        .filter(move |c| !answered.contains(c.id.as_str()))
        .collect::<Vec<_>>()
        .into_iter()
}

/// The results missing at the end of `transcript`: for the calls of its last message, or of
/// the assistant message that only tool results follow.
pub(crate) fn unanswered_tail<'t>(
    transcript: impl DoubleEndedIterator<Item = &'t Arc<Message>>,
) -> Vec<ToolResultMessage> {
    let mut results = Vec::new();
    for m in transcript.rev() {
        match &**m {
            Message::ToolResult(_) => results.push(&**m),
            Message::Assistant(reply) => {
                return unanswered(reply.tool_calls(), results)
                    .map(|call| Run::tool_result(call, NO_RESULT, true))
                    .collect();
            }
            Message::User(_) => break,
        }
    }
    Vec::new()
}

impl Run<'_> {
    /// At the start of a run: puts the results missing at the end of the transcript in front
    /// of the run's first input, so the first turn appends them (with their events) before
    /// anything else. Nothing when repairs are off (`repair_requests(false)`): the calls stay
    /// unanswered, as the history means them.
    pub(crate) fn answer_unanswered(&self, input: &mut Vec<Message>) {
        if !self.config.repair_requests {
            return;
        }
        let state = self.inner.shared.snapshot();
        let missing = unanswered_tail(state.messages.iter());
        if !missing.is_empty() {
            input.splice(0..0, missing.into_iter().map(Message::ToolResult));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, ContentBlock, StopReason};

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
        }
    }

    fn reply(ids: &[&str]) -> Message {
        Message::Assistant(AssistantMessage {
            content: ids
                .iter()
                .map(|id| ContentBlock::ToolCall(call(id)))
                .collect(),
            stop_reason: StopReason::ToolUse,
            ..AssistantMessage::default()
        })
    }

    fn result(id: &str) -> Message {
        Message::ToolResult(Run::tool_result(&call(id), "ok", false))
    }

    /// The repair of owned messages, for readable expectations.
    fn fix(messages: Vec<Message>) -> Vec<Message> {
        let messages: Vec<_> = messages.into_iter().map(Arc::new).collect();
        let holes = holes(&messages, 0);
        fill(messages, holes)
            .into_iter()
            .map(Arc::unwrap_or_clone)
            .collect()
    }

    fn synthesized(id: &str) -> Message {
        Message::ToolResult(Run::tool_result(&call(id), NO_RESULT, true))
    }

    #[test]
    fn a_whole_transcript_is_left_as_is() {
        let messages = vec![
            Message::user("hi"),
            reply(&["a", "b"]),
            result("b"),
            result("a"),
            Message::user("more"),
        ];
        assert_eq!(fix(messages.clone()), messages);
        assert!(
            unanswered_tail(
                messages
                    .iter()
                    .cloned()
                    .map(Arc::new)
                    .collect::<Vec<_>>()
                    .iter()
            )
            .is_empty()
        );
    }

    #[test]
    fn holes_get_results_after_the_existing_ones() {
        let messages = vec![
            Message::user("hi"),
            reply(&["a", "b", "c"]),
            result("b"),
            Message::user("more"),
            reply(&["d"]),
        ];
        assert_eq!(
            fix(messages),
            vec![
                Message::user("hi"),
                reply(&["a", "b", "c"]),
                result("b"),
                synthesized("a"),
                synthesized("c"),
                Message::user("more"),
                reply(&["d"]),
                synthesized("d"),
            ]
        );
    }

    #[test]
    fn the_tail_is_the_last_reply_and_the_results_after_it() {
        let tail = |messages: Vec<Message>| {
            let arcs: Vec<_> = messages.into_iter().map(Arc::new).collect();
            unanswered_tail(arcs.iter())
                .into_iter()
                .map(|r| r.tool_call_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(tail(vec![reply(&["a", "b"]), result("a")]), ["b"]);
        assert_eq!(tail(vec![reply(&["a", "b"])]), ["a", "b"]);
        assert!(tail(vec![reply(&["a"]), Message::user("x")]).is_empty());
        assert!(tail(vec![reply(&["a"]), result("a")]).is_empty());
        assert!(tail(vec![]).is_empty());
    }
}
