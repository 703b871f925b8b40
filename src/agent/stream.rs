//! Consuming a run as it proceeds: iterators over its events, text chunks and wire lines, and
//! the stateless loop over a message list.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Receiver;

use super::run::{self, Start};
use super::{Agent, AgentBuilder, Prompt, RunResult};
use crate::cancel::CancelToken;
use crate::event::AgentEvent;
use crate::llm::StreamEvent;
use crate::message::Message;
use crate::wire::{Dialect, DialectEncoder};
use crate::{Error, RunError};

/// How many events wait in a stream's channel before the run waits for its consumer.
const CAPACITY: usize = 64;

/// A run in progress, as an iterator over its events: what [`Agent::prompt_stream`] returns.
///
/// The run goes on on a thread of its own (named `pagent-run`) while the caller iterates; the
/// iterator yields every event of that run, from `AgentStart` to `AgentEnd`, in order and
/// live, and ends after `AgentEnd` (after an abort too, see [`RunStream::abort`]). [`RunStream::text`] and [`RunStream::wire_lines`] turn it
/// into an iterator over the reply's text chunks or over native wire lines. Once the iterator
/// ended, [`RunStream::finish`] returns what [`Agent::prompt`] would have returned.
///
/// # Blocking
/// `next` blocks until the run produces its next event. The run waits for the consumer when
/// 64 events wait unread (the channel is lossless: see [`Agent::subscribe_channel`]).
///
/// # Dropping
/// Dropping the stream before the run ended aborts the run (it ends `Cancelled`) and waits for
/// its thread to finish: no thread outlives the stream. [`RunStream::finish`] instead waits
/// for the run to end on its own.
pub struct RunStream {
    events: Receiver<AgentEvent>,
    token: CancelToken,
    thread: Option<JoinHandle<Result<RunResult, RunError>>>,
    started: bool,
    ended: bool,
}

impl fmt::Debug for RunStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunStream")
            .field("started", &self.started)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts a run on `input`, as [`Agent::prompt`] does, on a thread of its own, and returns
    /// at once an iterator over the run's events. See [`RunStream`].
    ///
    /// ```
    /// use pagent::llm::{Faux, FauxReply};
    /// use pagent::{Agent, AgentEvent};
    ///
    /// let agent = Agent::builder().provider(Faux::default().reply(FauxReply::text("hi there"))).build()?;
    /// let mut run = agent.prompt_stream("hello")?;
    /// let names: Vec<&str> = run.by_ref().map(|e| e.name()).collect();
    /// assert_eq!(names.first(), Some(&"AgentStart"));
    /// assert_eq!(names.last(), Some(&"AgentEnd"));
    /// assert_eq!(run.finish()?.text(), "hi there");
    ///
    /// // Or the text as it streams:
    /// let agent = Agent::builder().provider(Faux::default().reply(FauxReply::text("hi there"))).build()?;
    /// let text: String = agent.prompt_stream("hello")?.text().collect();
    /// assert_eq!(text, "hi there");
    /// # Ok::<(), pagent::Error>(())
    /// ```
    ///
    /// # Errors
    /// At once, with an empty result and no event: [`Error::Busy`] when a run is already
    /// active (or when called from a listener of this agent), [`Error::NothingToContinue`] for
    /// an empty prompt, [`Error::Io`] when the thread cannot be spawned. A run that fails
    /// does not fail here: its stream ends and [`RunStream::finish`] returns the [`RunError`].
    pub fn prompt_stream(&self, input: impl Into<Prompt>) -> Result<RunStream, RunError> {
        let input = input.into().0;
        if input.is_empty() {
            return Err(RunError::refused(Error::NothingToContinue(
                "the prompt has no message".into(),
            )));
        }
        let claimed = run::claim(&self.inner).map_err(RunError::refused)?;
        let token = claimed.token();
        // Subscribed before the run starts: no event of it is missed. The previous run may
        // still be dispatching its `AgentEnd`; the stream skips what comes before `AgentStart`.
        let events = self.subscribe_channel(CAPACITY);
        // The run's span is a child of the caller's current one (feature `tracing`).
        let scope = crate::trace::Scope::current();
        let thread = std::thread::Builder::new()
            .name("pagent-run".into())
            .spawn(move || scope.in_scope(|| run::run_claimed(claimed, Start::Prompt(input))))
            .map_err(|e| {
                RunError::refused(Error::Io {
                    kind: e.kind(),
                    message: format!("cannot spawn the run's thread: {e}"),
                })
            })?;
        Ok(RunStream {
            events,
            token,
            thread: Some(thread),
            started: false,
            ended: false,
        })
    }
}

impl RunStream {
    /// The text chunks of the run's replies (each `TextDelta`), as they stream.
    pub fn text(self) -> TextChunks {
        TextChunks(self)
    }

    /// The run's events as lines of the native wire dialect
    /// ([`wire::encode_event_line`](crate::wire::encode_event_line), no line break).
    pub fn wire_lines(self) -> WireLines {
        self.dialect_lines(Dialect::Native)
    }

    /// The run's events as lines of `dialect`, no line break, as a
    /// [`DialectEncoder`] writes them: [`Dialect::PagentV4`] gives what pagent v4's
    /// `Runner.run(return_type="acp")` yields, [`Dialect::PagentV1`] what pagent v1's
    /// `Agent.arun_wire` yields (each of those with a `\n` after it).
    pub fn dialect_lines(self, dialect: Dialect) -> WireLines {
        WireLines {
            stream: self,
            encoder: DialectEncoder::new(dialect),
            pending: VecDeque::new(),
        }
    }

    /// The messages of the run as each is complete and appended to the transcript (every
    /// `MessageEnd`): the prompt, each assistant reply, each tool result, in transcript
    /// order. pagent v4's `Runner.run(return_type="message")` counterpart: pagent yields a
    /// small message per text or reasoning piece and per tool call; ours come whole, once
    /// each. The last assistant one is the run's final message (see
    /// [`RunResult::final_message`]).
    pub fn messages(self) -> RunMessages {
        RunMessages(self)
    }

    /// Aborts the run (if it is still going) without waiting: the iterator then yields the
    /// rest of the run's events, up to its `AgentEnd`, also when 64 events waited unread at
    /// that moment (what the aborted run still emits waits behind them, as for
    /// [`Agent::subscribe_channel`]). [`RunStream::finish`] still returns the result.
    pub fn abort(&self) {
        self.token.cancel();
    }

    /// Waits for the run to end (taking the events not read yet) and returns what
    /// [`Agent::prompt`] returns.
    ///
    /// # Errors
    /// The [`RunError`] of a run that failed, as [`Agent::prompt`] returns it.
    pub fn finish(mut self) -> Result<RunResult, RunError> {
        for _ in self.by_ref() {}
        self.join()
    }

    fn join(&mut self) -> Result<RunResult, RunError> {
        let thread = self.thread.take().expect("the run is joined once");
        match thread.join() {
            Ok(result) => result,
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }
}

impl Iterator for RunStream {
    type Item = AgentEvent;

    fn next(&mut self) -> Option<AgentEvent> {
        while !self.ended {
            let Ok(event) = self.events.recv() else {
                // Closed: the run's thread is gone (the agent with it). Nothing more comes.
                self.ended = true;
                break;
            };
            match event {
                AgentEvent::AgentStart => self.started = true,
                _ if !self.started => continue,
                AgentEvent::AgentEnd { .. } => self.ended = true,
                _ => {}
            }
            return Some(event);
        }
        None
    }
}

impl Drop for RunStream {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.token.cancel();
            // Dropping the receiver releases a run waiting on a full channel.
            let (_, closed) = crossbeam_channel::bounded(0);
            drop(std::mem::replace(&mut self.events, closed));
            let _ = thread.join();
        }
    }
}

/// The text chunks of a run as they stream: [`RunStream::text`].
#[derive(Debug)]
pub struct TextChunks(RunStream);

impl TextChunks {
    /// See [`RunStream::finish`].
    ///
    /// # Errors
    /// The [`RunError`] of a run that failed.
    pub fn finish(self) -> Result<RunResult, RunError> {
        self.0.finish()
    }
}

impl Iterator for TextChunks {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        for event in self.0.by_ref() {
            if let AgentEvent::MessageUpdate {
                delta: StreamEvent::TextDelta { text, .. },
                ..
            } = event
            {
                return Some(text);
            }
        }
        None
    }
}

/// A run's events as wire lines: [`RunStream::wire_lines`], [`RunStream::dialect_lines`].
#[derive(Debug)]
pub struct WireLines {
    stream: RunStream,
    encoder: DialectEncoder,
    /// Lines of the last event not yet yielded (a pagent dialect may write several).
    pending: VecDeque<String>,
}

impl WireLines {
    /// See [`RunStream::finish`].
    ///
    /// # Errors
    /// The [`RunError`] of a run that failed.
    pub fn finish(self) -> Result<RunResult, RunError> {
        self.stream.finish()
    }
}

impl Iterator for WireLines {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        loop {
            if let Some(line) = self.pending.pop_front() {
                return Some(line);
            }
            let event = self.stream.next()?;
            self.pending.extend(self.encoder.encode_event_line(&event));
        }
    }
}

/// A run's messages as each is appended: [`RunStream::messages`].
#[derive(Debug)]
pub struct RunMessages(RunStream);

impl RunMessages {
    /// See [`RunStream::finish`].
    ///
    /// # Errors
    /// The [`RunError`] of a run that failed.
    pub fn finish(self) -> Result<RunResult, RunError> {
        self.0.finish()
    }
}

impl Iterator for RunMessages {
    type Item = Arc<Message>;

    fn next(&mut self) -> Option<Arc<Message>> {
        self.0.by_ref().find_map(|event| match event {
            AgentEvent::MessageEnd { message } => Some(message),
            _ => None,
        })
    }
}

/// The stateless agent loop: runs the agent that `builder` describes over `messages` (its
/// transcript, which must end with a message the model is due to answer) and returns the
/// messages the run appended, in order. `on_event` sees every event of the run, as a
/// listener does ([`Agent::subscribe`]): the events [`Agent::continue_run`] emits over the
/// same messages, which are those [`Agent::prompt`] emits with the last message as its
/// prompt, less that prompt's own `MessageStart` / `MessageEnd` (it is in `messages`
/// already, so the loop does not append it, and it is not among the messages returned).
///
/// This is the Go seed's `RunLoop`: no agent outlives the call, nothing is kept between calls;
/// append the returned messages to your list and call again. Messages set on the builder
/// with [`AgentBuilder::messages`] are replaced by `messages`.
///
/// Blocks the current thread until the run ends, like [`Agent::prompt`]; `on_event` runs on
/// this thread.
///
/// ```
/// use pagent::llm::{Faux, FauxReply};
/// use pagent::{Agent, Message};
///
/// let builder = Agent::builder().provider(Faux::default().reply(FauxReply::text("4")));
/// let appended = pagent::run_loop(builder, vec![Message::user("2 + 2?")], |_| {})?;
/// assert_eq!(appended.len(), 1);
/// assert_eq!(appended[0].as_assistant().unwrap().text(), "4");
/// # Ok::<(), pagent::Error>(())
/// ```
///
/// # Errors
/// With an empty result and no event: [`Error::Config`] when the builder does not build,
/// [`Error::NothingToContinue`] when `messages` ends with an assistant message (or is
/// empty). A [`RunError`] when the run failed, as [`Agent::continue_run`] returns it.
pub fn run_loop(
    builder: AgentBuilder,
    messages: Vec<Message>,
    on_event: impl Fn(&AgentEvent) + Send + Sync + 'static,
) -> Result<Vec<Arc<Message>>, RunError> {
    let agent = builder
        .messages(messages)
        .build()
        .map_err(RunError::refused)?;
    let _subscription = agent.subscribe(on_event);
    agent.continue_run().map(|r| r.messages)
}
