//! `Mirror`: rebuilds an agent's snapshots from its wire lines with the same fold.

use std::io::BufRead;
use std::sync::Arc;

use super::codec::Decoder;
use super::lines::{Line, read_line};
use crate::Error;
use crate::event::AgentEvent;
use crate::message::ToolCall;
use crate::state::{PendingToolCall, State};

/// A remote copy of an agent's [`State`], rebuilt from wire lines: native ones, or pagent v1
/// or v4 ones (a Python pagent agent's `arun_wire` output, say).
///
/// Each line is decoded with a [`Decoder`] and folded with [`State::apply`], the fold the
/// agent itself uses, so after each line the mirror holds the snapshot the agent published
/// for that event.
///
/// # Consistency
/// The mirror knows what the events say. Queues (`steering_queue`, `follow_up_queue`) and
/// listener-panic counters are not events and stay empty; settings (`set_system_prompt`,
/// `set_model`, `set_tools`, what a `before_turn` hook changes) are not on the wire either,
/// except the model of each reply, which its `MessageStart` carries. Start the mirror from a
/// snapshot of the agent ([`Mirror::from_state`]) to include the settings as they were, and
/// compare with [`State::timeline`], which leaves out all of the above:
/// `mirror.state().timeline() == agent_snapshot.timeline()`.
///
/// A mirror may join a stream in the middle of a run (a client attaching to a running
/// agent). It then keeps the invariants [`State`] documents, from what the lines it read say:
/// - `is_streaming` is true from the first line that is not an `AgentEnd` or a
///   `MessagesReplaced` (every other event happens inside a run), and `turn` is set by a `TurnEnd` as well as by a `TurnStart`;
/// - a `MessageUpdate` without its `MessageStart` starts the streaming reply (`is_streaming_reply`
///   agrees with `streaming_message`), which holds what streamed since the mirror joined: the
///   [`Decoder`] has not seen the reply's start, so the text before it and the model are
///   missing until the `MessageEnd`, which carries the whole message;
/// - a `ToolUpdate` or `ToolExecute` for a call the mirror did not see start adds it to
///   `pending_tool_calls` (before the calls it saw start, since it started earlier) with the
///   name and progress (or arguments) the event carries and an empty raw `arguments` text in
///   its `call`; a `ToolEnd` for such a call removes it. A call that
///   started before the mirror joined and publishes no progress stays unknown until its
///   `ToolEnd`, whose result lands in `tool_results` as usual.
///
/// A pagent stream carries less than ours: the mirror holds what its lines say, mapped as the
/// [wire docs](super#reading-pagent-lines) describe (no model, no tool progress, no
/// messages pagent adds without a line).
///
/// The transcript holds the messages that ended after the mirror joined; `AgentEnd` and
/// `TurnEnd` carry the messages, so a client that needs the whole transcript reads them there.
///
/// ```
/// use pagent::llm::{Faux, FauxReply};
/// use pagent::{Agent, wire};
///
/// let agent = Agent::builder().provider(Faux::default().reply(FauxReply::text("Hi!"))).build()?;
/// let log = wire::Writer::new(Vec::new());
/// let _sub = agent.subscribe(log.listener());
/// let mut mirror = wire::Mirror::from_state(agent.snapshot().timeline());
/// agent.prompt("Hello")?;
///
/// let bytes = log.with_output(|b| b.clone());
/// mirror.read_lines(&bytes[..], |_event, _state| {})?;
/// assert_eq!(mirror.state().timeline(), agent.snapshot().timeline());
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Mirror {
    decoder: Decoder,
    state: Arc<State>,
    /// How many of the first pending tool calls the mirror learnt of from a `ToolUpdate`
    /// alone (they started before it joined, so they come first).
    joined_calls: usize,
}

impl Default for Mirror {
    fn default() -> Mirror {
        Mirror::from_state(State::default())
    }
}

impl Mirror {
    /// A mirror of a fresh agent (`State::default()`). It reads any dialect, told by the
    /// first line ([`Decoder::detecting`]): native lines, or pagent v1 or v4 lines, which it
    /// maps onto our events (see the [wire docs](super#reading-pagent-lines)).
    pub fn new() -> Mirror {
        Mirror::default()
    }

    /// A mirror that starts from `state`, usually the agent's snapshot before the lines. It
    /// reads any dialect, as [`Mirror::new`].
    ///
    /// A snapshot taken while a reply streamed (`streaming_message` is `Some`) is continued:
    /// the native `MessageUpdate` lines that follow advance that reply, text and model
    /// included, as the agent's own did.
    pub fn from_state(state: State) -> Mirror {
        Mirror {
            decoder: Decoder::detecting().continuing(state.streaming_message.as_ref()),
            state: Arc::new(state),
            joined_calls: 0,
        }
    }

    /// Uses `decoder` (to choose the dialect, or raise the line limit). Defaults to
    /// [`Decoder::detecting`]. A decoder at the start of its stream continues the reply of
    /// the state, as [`Mirror::from_state`] says.
    #[must_use]
    pub fn decoder(mut self, decoder: Decoder) -> Mirror {
        self.decoder = match decoder.partial() {
            None => decoder.continuing(self.state.streaming_message.as_ref()),
            Some(_) => decoder,
        };
        self
    }

    /// The mirrored state after the last line.
    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// Decodes `line`, folds in the events it stands for, and returns them: one for a native
    /// line, zero or more for a pagent line.
    ///
    /// # Errors
    /// [`Error::Wire`] when the line does not decode (see [`Decoder::decode_events`]); the
    /// state is then unchanged.
    pub fn apply_line(&mut self, line: &str) -> Result<Vec<AgentEvent>, Error> {
        let events = self.decoder.decode_events(line)?;
        for event in &events {
            self.apply(event);
        }
        Ok(events)
    }

    /// The end of the stream: folds in and returns what [`Decoder::finish`] gives, the end
    /// of a pagent run that broke off (a failed run, as pagent's stream tells it). Nothing
    /// for a native stream. [`Mirror::read_lines`] calls it at the end of its reader.
    pub fn finish(&mut self) -> Vec<AgentEvent> {
        let events = self.decoder.finish();
        for event in &events {
            self.apply(event);
        }
        events
    }

    /// Folds an already decoded event in, as [`State::apply`] does, and, for a mirror that
    /// joined mid-run, what its events imply (see the type's `# Consistency`).
    pub fn apply(&mut self, event: &AgentEvent) {
        let before = &self.state;
        // A call the mirror learnt of from its progress alone, now ending.
        if let AgentEvent::ToolEnd { result, .. } = event
            && let Some(i) = before
                .pending_tool_calls
                .iter()
                .position(|p| p.call.id == result.tool_call_id)
            && i < self.joined_calls
        {
            self.joined_calls -= 1;
        }
        // In place while no one holds the state the mirror handed out (a copy else, as
        // `State::apply` makes): a delta's fold then copies none of the state's fields.
        let state = Arc::make_mut(&mut self.state);
        state.fold(event);
        let joined_calls = &mut self.joined_calls;
        match event {
            AgentEvent::AgentEnd { .. } => *joined_calls = 0,
            AgentEvent::MessageUpdate { .. } => state.is_streaming_reply = true,
            AgentEvent::TurnEnd { turn, .. } => state.turn = *turn,
            AgentEvent::ToolUpdate {
                call_id,
                tool_name,
                partial,
            } => {
                if let Some(p) = join_call(joined_calls, state, call_id, tool_name, false) {
                    p.progress = Some(partial.clone());
                }
            }
            AgentEvent::ToolExecute {
                call_id,
                tool_name,
                arguments,
                rewritten,
            } => {
                // Calls start one at a time, each checked before the next starts: a call
                // whose `ToolExecute` comes before its `ToolStart` was seen is the last one
                // that started before the mirror joined.
                if let Some(p) = join_call(joined_calls, state, call_id, tool_name, true) {
                    p.arguments = Some(arguments.clone());
                    p.rewritten = *rewritten;
                }
            }
            _ => {}
        }
        // Every event but `AgentEnd` and `MessagesReplaced` happens inside a run.
        if !matches!(
            event,
            AgentEvent::AgentEnd { .. } | AgentEvent::MessagesReplaced { .. }
        ) {
            state.is_streaming = true;
        }
    }

    /// Reads lines from `reader` until it ends, folding each in and calling `on_line` with
    /// each event and the state after it (a pagent line may stand for several events or
    /// none). Empty lines are skipped. At the end it calls [`Mirror::finish`], and `on_line`
    /// for the events that gives.
    ///
    /// Blocks until `reader` reaches its end (a closed pipe or socket, the end of a file).
    ///
    /// # Errors
    /// [`Error::Io`] when reading fails, [`Error::Wire`] (with the line number) at the first
    /// line that does not decode; the lines before it stay folded in.
    pub fn read_lines(
        &mut self,
        mut reader: impl BufRead,
        mut on_line: impl FnMut(&AgentEvent, &Arc<State>),
    ) -> Result<(), Error> {
        let mut buf = Vec::new();
        let mut number = 0u64;
        loop {
            // Bounded: a hostile stream cannot make the mirror hold more than one line limit.
            let found =
                read_line(&mut reader, &mut buf, self.decoder.line_limit()).map_err(Error::from)?;
            number += 1;
            let line = match found {
                Line::End => {
                    let events = self.decoder.finish();
                    for event in &events {
                        self.apply(event);
                        on_line(event, &self.state);
                    }
                    return Ok(());
                }
                Line::TooLong(n) => {
                    return Err(Error::Wire(format!(
                        "line {number}: line of {n} bytes is over the limit of {} bytes",
                        self.decoder.line_limit()
                    )));
                }
                Line::Whole { .. } => std::str::from_utf8(&buf)
                    .map_err(|_| Error::Wire(format!("line {number}: not valid utf-8")))?,
            };
            if line.trim().is_empty() {
                continue;
            }
            let events = self.decoder.decode_events(line).map_err(|e| match e {
                Error::Wire(why) => Error::Wire(format!("line {number}: {why}")),
                other => other,
            })?;
            for event in &events {
                self.apply(event);
                on_line(event, &self.state);
            }
        }
    }
}

/// Adds to `state` a pending call the mirror did not see start (it started before the
/// mirror joined), before the calls it saw start, and returns it; `None` when the call
/// is known (the fold already updated it). A call that is the `last` to start before the
/// mirror joined goes after the other such calls, also those learnt of later.
fn join_call<'s>(
    joined_calls: &mut usize,
    state: &'s mut State,
    call_id: &str,
    tool_name: &str,
    last: bool,
) -> Option<&'s mut PendingToolCall> {
    if state
        .pending_tool_calls
        .iter()
        .any(|p| p.call.id == call_id)
    {
        return None;
    }
    let call = ToolCall {
        id: call_id.to_owned(),
        name: tool_name.to_owned(),
        arguments: String::new(),
    };
    state.pending_tool_calls.insert(
        *joined_calls,
        PendingToolCall {
            call,
            arguments: None,
            rewritten: false,
            progress: None,
            started_at: None,
        },
    );
    let at = *joined_calls;
    // The joined calls before `joined_calls` come before it; the last one stays right
    // after them, so that calls learnt of later are put before it.
    if !last {
        *joined_calls += 1;
    }
    state.pending_tool_calls.get_mut(at)
}
