//! `Mirror`: rebuilds an agent's snapshots from its wire lines with the same fold.

use std::io::BufRead;
use std::sync::Arc;

use super::codec::Decoder;
use super::lines::{Line, read_line};
use crate::Error;
use crate::event::AgentEvent;
use crate::state::State;

/// A remote copy of an agent's [`State`], rebuilt from native wire lines.
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
#[derive(Clone, Debug, Default)]
pub struct Mirror {
    decoder: Decoder,
    state: Arc<State>,
}

impl Mirror {
    /// A mirror of a fresh agent (`State::default()`).
    pub fn new() -> Mirror {
        Mirror::default()
    }

    /// A mirror that starts from `state`, usually the agent's snapshot before the lines.
    pub fn from_state(state: State) -> Mirror {
        Mirror {
            decoder: Decoder::new(),
            state: Arc::new(state),
        }
    }

    /// Uses `decoder` (to raise its line limit, say). Defaults to [`Decoder::new`].
    #[must_use]
    pub fn decoder(mut self, decoder: Decoder) -> Mirror {
        self.decoder = decoder;
        self
    }

    /// The mirrored state after the last line.
    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// Decodes `line`, folds it in, and returns the event.
    ///
    /// # Errors
    /// [`Error::Wire`] when the line does not decode; the state is then unchanged.
    pub fn apply_line(&mut self, line: &str) -> Result<AgentEvent, Error> {
        let event = self.decoder.decode_line(line)?;
        self.apply(&event);
        Ok(event)
    }

    /// Folds an already decoded event in.
    pub fn apply(&mut self, event: &AgentEvent) {
        self.state = Arc::new(self.state.apply(event));
    }

    /// Reads lines from `reader` until it ends, folding each in and calling `on_line` with
    /// the event and the state after it. Empty lines are skipped.
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
            let found = read_line(&mut reader, &mut buf, self.decoder.line_limit())
                .map_err(|e| Error::Io(e.to_string()))?;
            number += 1;
            let line = match found {
                Line::End => return Ok(()),
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
            let event = self.apply_line(line).map_err(|e| match e {
                Error::Wire(why) => Error::Wire(format!("line {number}: {why}")),
                other => other,
            })?;
            on_line(&event, &self.state);
        }
    }
}
