//! The agent: builder, blocking runs, listeners, snapshots and the handle other threads use.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

use crossbeam_channel::Receiver;
use parking_lot::Mutex;

use crate::cancel::CancelToken;
use crate::elicit::{AnswerRefused, ElicitationAnswer};
use crate::event::{AgentEvent, RunStopReason};
use crate::llm::ThinkingLevel;
use crate::message::{AssistantMessage, Message, Usage};
use crate::state::{ChannelPolicy, State};
use crate::tool::Tool;
use crate::tool::ask::Waiting;
use crate::{Error, RunError};

mod builder;
mod channel;
mod claim;
mod context;
pub(crate) mod dispatch;
pub(crate) mod guard;
pub(crate) mod hooks;
mod output;
mod queues;
mod repair;
mod run;
mod stream;
mod tools;
#[cfg(feature = "tracing")]
pub(crate) use tools::{CANCELLED, SKIPPED};

pub use builder::AgentBuilder;
use builder::Config;
use channel::Channel;
pub use claim::ClaimedRun;
use dispatch::{Shared, Sink};
pub use output::{OutputTurn, TypedRun};
pub use stream::{RunMessages, RunStream, TextChunks, WireLines, run_loop};

/// An LLM agent driven from ordinary blocking code.
///
/// `Agent` is `Send + Sync`: share it (in an `Arc`, or by reference with scoped threads) and
/// call [`Agent::prompt`] on one thread while others read [`Agent::snapshot`] or steer and abort
/// through an [`AgentHandle`]. One run at a time: a second `prompt` while a run is active
/// returns an `Err` with [`Error::Busy`] at once, it never queues.
///
/// # Control
/// From any thread (a listener included), while a run is active:
/// - [`AgentHandle::steer`] queues a message for the next model call of the run; which tool
///   calls still run first is the [`SteeringPolicy`]; how many queued messages one call takes
///   is the steering [`QueueMode`].
/// - [`AgentHandle::follow_up`] queues a message for when the run would otherwise stop: it
///   then starts a new turn of the same run.
/// - [`AgentHandle::abort`] ends the run promptly with `RunStopReason::Cancelled`.
///
/// Queued messages are visible in `State::steering_queue` and `State::follow_up_queue` until
/// a turn takes them, and the agent never drops them: a message that arrives too late for a
/// run (after its last decision, or once it was aborted) stays queued, and the next `prompt`
/// or [`Agent::continue_run`] delivers it. Only [`AgentHandle::clear_steering_queue`],
/// [`AgentHandle::clear_follow_up_queue`], [`AgentHandle::clear_queues`] (from any thread, at
/// any time) and [`Agent::reset`] remove them, and give them back.
///
/// # Between runs
/// While no run is active, [`Agent::reset`] starts a new conversation and
/// [`Agent::replace_messages`] puts another transcript in place (a restored session, a
/// compacted or edited history); both return [`Error::Busy`] during a run and emit
/// [`AgentEvent::MessagesReplaced`].
pub struct Agent {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    shared: Arc<Shared>,
    config: Mutex<Config>,
    // True while `cancel` holds a token (both change under the `cancel` lock); readable
    // without the lock.
    running: AtomicBool,
    // The claim: the token of the run whose outcome is still open. `abort()` cancels it.
    cancel: Mutex<Option<CancelToken>>,
    // Held by a run from before its `AgentStart` to after its `AgentEnd` listeners returned:
    // the next run waits on it, so the events of two runs never interleave at a listener.
    gate: Mutex<()>,
    // The thread holding `gate`: a `prompt` from that thread (an `AgentEnd` listener) would
    // wait for itself, and returns `Busy` instead.
    gate_owner: Mutex<Option<ThreadId>>,
    // What the agent knows of its context between runs (the ledger of the transcript, the
    // window): a run takes it and puts it back.
    context: Mutex<context::Memory>,
    // The questions of running tool calls that wait for an answer through the agent
    // (`answer_elicitation`).
    elicitations: Arc<Waiting>,
    // The request JSON of the transcript's messages, handed to the provider with each
    // request so that a model call serializes only what was appended (`llm::BodyCache`).
    body_cache: crate::llm::BodyCache,
}

impl Drop for Inner {
    /// Releases the listeners, so that one holding an `AgentHandle` (which shares `Shared`)
    /// does not keep the transcript, the listeners and the channel senders alive.
    fn drop(&mut self) {
        self.shared.close();
    }
}

/// When queued steering interrupts a batch of tool calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SteeringPolicy {
    /// The current reply's tool calls all finish; the steering message goes in before the
    /// next model call.
    #[default]
    AfterBatch,
    /// Tool calls of the batch not yet started are skipped, each with a result that says the
    /// user sent a new message; calls already running finish.
    AtToolBoundary,
}

/// What a run does when it reaches [`max_turns`](AgentBuilder::max_turns) after a turn whose
/// tools ran: pagent's `max_turns` semantics, where the limit counts the turns that may run
/// tools and the model may then give one final answer.
///
/// The final answer turn is one more model call, made with the tool results of the last
/// allowed turn in the transcript. It is a turn like any other (`TurnStart`, the reply,
/// `TurnEnd`), except that its tool calls, if the model makes any, are not run: they get
/// error results saying so, appended as tool result messages (`MessageStart` /
/// `MessageEnd`, no `ToolStart` / `ToolEnd`, since no tool starts), and the run ends with
/// [`RunStopReason::MaxTurns`](crate::RunStopReason::MaxTurns). When it answers without tool
/// calls the run ends as any answer does (`NoToolCalls`, or `EmptyResponse`), as pagent's
/// does. A turn at the limit that answered without calling tools needs no final turn: the run
/// ends there (with `MaxTurns` when a steering or follow-up message waits, which stays
/// queued).
///
/// With `max_turns = n` a run therefore makes at most n + 1 model calls (n with
/// [`FinalTurn::Off`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FinalTurn {
    /// The final turn offers the tools as every turn does, and does not run the calls the
    /// model makes (pagent v4's `Runner`, `pagentv4` in pagent 0.7.30: its "synthesis"
    /// turn). The default: it works with every server (some reject a request whose history
    /// holds tool calls when it declares no tools), and it is what the
    /// [`PagentV4`](crate::wire::Dialect::PagentV4) dialect's runs do, line for line.
    #[default]
    ToolsNotRun,
    /// The final turn sends no tools, so the model can only answer (pagent v5's `Runner`).
    /// Calls the model makes all the same are not run, as with `ToolsNotRun`. Best for a
    /// final answer from servers that accept a history with tool calls and no tools
    /// (OpenAI-compatible servers do).
    ToolsWithheld,
    /// No final turn: the run ends with `MaxTurns` right after the tools of the last allowed
    /// turn ran, so the last reply's tool calls have their results and no answer follows
    /// (pagent v1's `Agent`, and this crate's loop until this option came). The
    /// [`PagentV1`](crate::wire::Dialect::PagentV1) dialect's runs do this, line for line.
    Off,
}

/// Which of the agent's two message queues: named, so a call site never passes a bare `bool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queue {
    /// `State::steering_queue`, filled by [`AgentHandle::steer`].
    Steering,
    /// `State::follow_up_queue`, filled by [`AgentHandle::follow_up`].
    FollowUp,
}

/// How many queued messages are taken at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueueMode {
    /// One message per model call (or per new turn, for follow-ups).
    #[default]
    OneAtATime,
    /// Every queued message at once.
    All,
}

/// A message an agent did not take: the agent is gone. Holds the message, given back (boxed,
/// to keep `Result`s small).
#[derive(Clone, Debug, PartialEq)]
pub struct Refused(pub Box<Message>);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the agent is gone; the message was not queued")
    }
}

impl std::error::Error for Refused {}

/// What `prompt` or `continue_run` sends: one message or several. Built from a `&str`, a
/// `String`, a [`UserMessage`](crate::UserMessage) (text with images and documents), a
/// [`Message`] or a `Vec<Message>`.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompt(pub Vec<Message>);

impl From<&str> for Prompt {
    fn from(s: &str) -> Prompt {
        Prompt(vec![Message::user(s)])
    }
}

impl From<String> for Prompt {
    fn from(s: String) -> Prompt {
        Prompt(vec![Message::user(s)])
    }
}

impl From<Message> for Prompt {
    fn from(m: Message) -> Prompt {
        Prompt(vec![m])
    }
}

impl From<crate::message::UserMessage> for Prompt {
    fn from(m: crate::message::UserMessage) -> Prompt {
        Prompt(vec![Message::User(m)])
    }
}

impl From<Vec<Message>> for Prompt {
    fn from(m: Vec<Message>) -> Prompt {
        Prompt(m)
    }
}

/// How a run ended: what [`Agent::prompt`] and [`Agent::continue_run`] return, in `Ok` for a
/// run that ended as asked, inside the [`RunError`] for a run that failed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RunResult {
    /// Every message the run appended to the transcript, in order.
    pub messages: Vec<Arc<Message>>,
    /// Why the run stopped.
    pub stop_reason: RunStopReason,
    /// Usage summed over the run's replies.
    pub usage: Usage,
    /// The structured answer, parsed and matching the run's
    /// [`OutputSchema`](crate::OutputSchema) (see [`AgentBuilder::output_schema`],
    /// [`Agent::prompt_with_output`]): the last reply's text as JSON. `None` for a run
    /// without a schema, and for one that ended without a valid answer (aborted, failed, or
    /// at `max_turns` with [`FinalTurn::Off`]). [`RunResult::output_as`] deserializes it.
    pub output: Option<serde_json::Value>,
}

impl RunResult {
    /// The text of the last assistant message of the run.
    pub fn text(&self) -> String {
        self.messages
            .iter()
            .rev()
            .find_map(|m| m.as_assistant())
            .map(|m| m.text())
            .unwrap_or_default()
    }

    /// The last assistant message of the run: its final message (pagent v4's
    /// `return_type="message"` result, whole), or `None` when the run made no model call.
    pub fn final_message(&self) -> Option<&AssistantMessage> {
        self.messages.iter().rev().find_map(|m| m.as_assistant())
    }
}

/// A listener registration, a guard: dropping it removes the listener (as
/// [`Subscription::unsubscribe`] does). Call [`Subscription::keep`] to keep the listener for
/// the agent's life instead; [`Agent::unsubscribe`] with its id still removes it.
///
/// A channel listener ([`Agent::subscribe_channel`]) has no `Subscription`: its receiver is
/// the guard, and dropping the receiver removes the listener at the next event.
///
/// ```
/// use pagent::Agent;
/// use pagent::llm::{Faux, FauxReply};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
///
/// let agent = Agent::builder()
///     .provider(Faux::default().reply(FauxReply::text("a")).reply(FauxReply::text("b")))
///     .build()?;
/// let count = Arc::new(AtomicUsize::new(0));
/// let seen = count.clone();
/// let subscription = agent.subscribe(move |_| {
///     seen.fetch_add(1, Ordering::Relaxed);
/// });
/// agent.prompt("one")?;
/// let during_first = count.load(Ordering::Relaxed);
/// drop(subscription); // the listener is gone
/// agent.prompt("two")?;
/// assert_eq!(count.load(Ordering::Relaxed), during_first);
///
/// // A listener for the agent's whole life:
/// let _id = agent.subscribe(|e| eprintln!("{e:?}")).keep();
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "dropping a Subscription removes the listener; call .keep() to keep it for the agent's life"]
pub struct Subscription {
    id: u64,
    // Empty once the listener was kept or removed: the drop then does nothing.
    shared: Weak<Shared>,
}

impl Subscription {
    /// The listener's id, for [`Agent::unsubscribe`].
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Removes the listener. It is not called again, not even for an event being dispatched
    /// right now. Returns false when it was already removed (by [`Agent::unsubscribe`], or
    /// because the agent is gone). Dropping the `Subscription` does the same.
    pub fn unsubscribe(mut self) -> bool {
        std::mem::take(&mut self.shared)
            .upgrade()
            .is_some_and(|s| s.unsubscribe(self.id))
    }

    /// Keeps the listener for the agent's life: the `Subscription` is given up and dropping
    /// the agent drops the listener. Returns the listener's id, for [`Agent::unsubscribe`].
    pub fn keep(mut self) -> u64 {
        self.shared = Weak::new();
        self.id
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(shared) = std::mem::take(&mut self.shared).upgrade() {
            shared.unsubscribe(self.id);
        }
    }
}

/// A cheap `Clone + Send + Sync` handle for other threads: snapshot, steer, follow up, abort.
///
/// The handle does not keep the agent alive, also when a listener of the agent holds it: once
/// the last `Agent` is dropped, its listeners and channel senders are dropped (each channel
/// receiver disconnects), and the handle answers like one to an idle agent that refuses
/// work: `steer` and `follow_up` give the message back as [`Refused`], `abort` and
/// `is_running` return false, `subscribe` registers nothing (a channel receiver comes back
/// disconnected), while `snapshot` still returns the last state.
#[derive(Clone)]
pub struct AgentHandle {
    shared: Arc<Shared>,
    agent: Weak<Inner>,
}

impl Agent {
    /// A builder. Only the provider is required.
    pub fn builder() -> AgentBuilder {
        AgentBuilder::default()
    }

    pub(crate) fn from_config(config: Config, messages: Vec<Message>) -> Agent {
        let messages = messages.into_iter().map(Arc::new).collect();
        let window = config
            .context_window
            .or_else(|| crate::context::known_window(&config.model));
        let state = State {
            system_prompt: Arc::from(config.system_prompt.as_str()),
            model: Arc::from(config.model.as_str()),
            thinking: config.thinking,
            tools: config.tool_defs.clone(),
            context: crate::context::ledger::estimate_of(&messages, window),
            messages,
            ..State::default()
        };
        Agent {
            inner: Arc::new(Inner {
                shared: Arc::new(Shared::new(state)),
                config: Mutex::new(config),
                running: AtomicBool::new(false),
                cancel: Mutex::new(None),
                gate: Mutex::new(()),
                gate_owner: Mutex::new(None),
                context: Mutex::new(context::Memory::default()),
                elicitations: Arc::default(),
                body_cache: crate::llm::BodyCache::new(),
            }),
        }
    }

    /// Runs the agent on `input` (a `&str`, a `String`, a [`Message`] or several) until it
    /// stops: streams the reply, runs the tools it asks for, and goes on for more turns.
    ///
    /// Blocks the current thread until the run ends or [`AgentHandle::abort`] is called from
    /// another thread (or from a listener). Listeners are called on this thread.
    ///
    /// # Ok or Err
    /// A run that ends as asked returns `Ok`: the model answered (`NoToolCalls`), its reply
    /// was empty (`EmptyResponse`), `max_turns` was reached (`MaxTurns`), or
    /// [`AgentHandle::abort`] ended it (`Cancelled`). A run that fails returns `Err`: the
    /// provider failed (HTTP status, connection, stream), a timeout ran out (`run_timeout`
    /// included), a reply grew too large, or code the run depends on panicked (a hook, the
    /// agent loop). The [`RunError`] holds the [`Error`] and the [`RunResult`] of what the run
    /// produced: its messages (the failed reply last, with what streamed before the failure),
    /// usage, and `RunStopReason::Error`. Either way `AgentEnd` is emitted exactly once, with
    /// the error's [`ErrorInfo`](crate::ErrorInfo) when it failed, and the state keeps the
    /// kind and the message (`State::error_kind`, `State::error_message`).
    ///
    /// `?` converts a [`RunError`] into its [`Error`], so `agent.prompt("..")?` works in a
    /// function returning `Result<_, pagent::Error>`; match on [`RunError::kind`] to decide.
    ///
    /// # Consistency
    /// Once a snapshot shows `is_streaming == false` after a run, that run no longer holds the
    /// agent: a `prompt` from another thread does not return `Busy` (unless yet another
    /// `prompt` claimed the agent first, or a [`Agent::reset`] or
    /// [`Agent::replace_messages`] holds it for the instant it publishes). If the run that just ended is still calling its
    /// `AgentEnd` listeners, the new run waits for them before its `AgentStart`, so no
    /// listener ever sees the events of two runs interleaved. On the run thread itself (from
    /// a listener, `AgentEnd`'s included) `prompt` returns `Busy`: the run that calls the
    /// listener has not returned yet. Queue a follow-up or call `prompt` once it returned.
    ///
    /// # Errors
    /// A [`RunError`] when the run failed (see above). With an empty result and no event:
    /// [`Error::Busy`] when a run is already active, or when called from a listener of this
    /// agent; [`Error::NothingToContinue`] for an empty prompt.
    pub fn prompt(&self, input: impl Into<Prompt>) -> Result<RunResult, RunError> {
        let input = input.into().0;
        if input.is_empty() {
            return Err(RunError::refused(Error::NothingToContinue(
                "the prompt has no message".into(),
            )));
        }
        run::run(&self.inner, run::Start::Prompt(input))
    }

    /// Resumes from the transcript: a new turn if the last message is a user or tool-result
    /// message (queued steering rides along, as with a prompt). After an assistant message,
    /// the queued steering is delivered (per the steering [`QueueMode`]), else the queued
    /// follow-ups (per the follow-up mode).
    ///
    /// Blocks like [`Agent::prompt`], and returns like it: `Ok` for a run that ended as asked,
    /// a [`RunError`] with what the run produced for a run that failed (see
    /// [`Agent::prompt`]'s "Ok or Err").
    ///
    /// # Errors
    /// A [`RunError`] when the run failed. With an empty result and no event: [`Error::Busy`]
    /// as for [`Agent::prompt`]; [`Error::NothingToContinue`] when the transcript ends with an
    /// assistant message (or is empty) and nothing is queued.
    pub fn continue_run(&self) -> Result<RunResult, RunError> {
        run::run(&self.inner, run::Start::Continue)
    }

    /// Registers a listener, called for every event after it was folded into the state.
    /// The returned [`Subscription`] is a guard: dropping it removes the listener;
    /// [`Subscription::keep`] keeps it for the agent's life.
    ///
    /// # Contract
    /// Listeners run synchronously on the run thread, in registration order; a slow listener
    /// slows the run (use [`Agent::subscribe_channel`] to offload). A listener may call
    /// `snapshot`, `steer`, `follow_up`, `abort`, `subscribe` and `unsubscribe`; `prompt`
    /// from a listener returns `Busy`. A listener may hold an [`AgentHandle`]: that does not
    /// keep the agent alive, and dropping the last `Agent` drops its listeners. A panic is caught: the run goes on, the other
    /// listeners still get the event, and the state counts it in `listener_panics` with the
    /// message in `last_listener_panic`.
    pub fn subscribe(
        &self,
        listener: impl Fn(&AgentEvent) + Send + Sync + 'static,
    ) -> Subscription {
        self.handle().subscribe(listener)
    }

    /// Registers a lossless channel listener: every event is sent, cloned, into a bounded
    /// channel of `capacity` (0 makes a rendezvous channel). The same as
    /// [`Agent::subscribe_channel_with`] with [`ChannelPolicy::Block`].
    ///
    /// Consume the receiver on another thread, never on the thread that calls `prompt`: the
    /// run waits while the channel is full, so a run of more than `capacity` events would
    /// wait for a consumer that only reads after it returned (an `abort()` from elsewhere
    /// still releases it, see below).
    ///
    /// # Guarantees
    /// - Lossless: while the channel is full the run waits until the consumer takes an
    ///   event; the consumer receives every event of every run, in order, each run's
    ///   `AgentEnd` included. At most `capacity` events wait in the channel; counting also the event the consumer is handling and the one the run
    ///   waits to send, the run is at most `capacity + 2` events ahead of what the consumer
    ///   finished. A rendezvous channel (`capacity` 0) holds one event at a time, and the
    ///   run goes on once the consumer took it.
    /// - `abort()` releases the wait at once, and the channel stays open: the run no longer
    ///   waits for the consumer, and what it still emits waits beside the full channel, in
    ///   order, while a thread of the subscription hands it over as the consumer makes room
    ///   (the channel itself never holds more than `capacity`). That is bounded by the run's
    ///   structure, not by what streamed: after the abort the run emits no `MessageUpdate`
    ///   and no `ToolUpdate`, and at most the `MessageStart` / `MessageEnd` of each message
    ///   of the turn's input not yet appended, the reply's `MessageStart` (when it had not
    ///   started) and `MessageEnd`, four events for each tool call of that reply
    ///   (`ToolStart`, `ToolEnd`, and its result's `MessageStart` and `MessageEnd`),
    ///   `TurnEnd` and `AgentEnd`. So at most `capacity + 1 + 2i + 4n + 4` events wait for
    ///   the consumer, `i` the input messages still to append (0 once the reply started),
    ///   `n` the reply's tool calls, the `1` the event the run was waiting to send when the
    ///   abort came. `prompt` may return before they all reached the channel: read the end
    ///   of an aborted run with `recv`, not `try_recv`. The next run waits until they were
    ///   handed over, then for room as before.
    /// - When the receiver is dropped, the listener removes itself at the next event (a run
    ///   waiting for room goes on). When the agent is dropped, the channel disconnects once
    ///   the consumer took what is queued.
    ///
    /// # Performance
    /// The run waits in crossbeam's blocking `send` (beside the run's cancel token in a
    /// `select!`): it takes no CPU while it waits, and the consumer's `recv` wakes it at
    /// once. An abort while the channel is full starts one short-lived thread per channel.
    pub fn subscribe_channel(&self, capacity: usize) -> Receiver<AgentEvent> {
        self.handle().subscribe_channel(capacity)
    }

    /// Registers a channel listener with a policy, as [`Agent::subscribe_channel_with`], and
    /// returns its listener id with the receiver: the id names the channel's entry in
    /// [`State::channels`] (its own count of dropped updates) and removes it with
    /// [`Agent::unsubscribe`].
    ///
    /// ```
    /// use pagent::llm::{Faux, FauxReply};
    /// use pagent::{Agent, ChannelPolicy};
    ///
    /// let agent = Agent::builder()
    ///     .provider(Faux::default().chunk_chars(1).reply(FauxReply::text("x".repeat(50))))
    ///     .build()?;
    /// let (id, log) = agent.subscribe_channel_with_id(4, ChannelPolicy::DropUpdates);
    /// // Nobody reads meanwhile: the five events before the reply fill the channel, so each
    /// // of the reply's updates is dropped (its 50 text deltas and its usage report).
    /// agent.prompt("hi")?;
    /// let state = agent.snapshot();
    /// let mine = state.channels.iter().find(|c| c.id == id).unwrap();
    /// assert_eq!(mine.updates_dropped, 51);
    /// assert_eq!(log.len(), 8); // the lifecycle events: those five, MessageEnd, TurnEnd, AgentEnd
    /// assert!(agent.unsubscribe(id));
    /// # Ok::<(), pagent::Error>(())
    /// ```
    pub fn subscribe_channel_with_id(
        &self,
        capacity: usize,
        policy: ChannelPolicy,
    ) -> (u64, Receiver<AgentEvent>) {
        self.handle().subscribe_channel_with_id(capacity, policy)
    }

    /// Registers a channel listener with a policy for a full channel.
    ///
    /// [`ChannelPolicy::Block`] is [`Agent::subscribe_channel`]. Under
    /// [`ChannelPolicy::DropUpdates`] the run never waits for the consumer:
    /// - while `capacity` or more events wait in the channel, `MessageUpdate` and
    ///   `ToolUpdate` events are not sent (each counted in `State::updates_dropped`);
    /// - every other event (`AgentStart`, `TurnStart`, `MessageStart`, `MessageEnd`,
    ///   `ToolStart`, `ToolExecute`, `ToolEnd`, `TurnEnd`, `AgentEnd`, `MessagesReplaced`) is
    ///   always sent, in order, even when `capacity` events already wait: the channel then
    ///   holds more than `capacity`, but
    ///   only as many more as the run has lifecycle events (a few per message and tool call,
    ///   never one per streamed delta).
    ///
    /// What a consumer receives is thus always consistent: each `MessageUpdate` carries the
    /// whole reply as far as it streamed, and `MessageEnd` the finished message, so a dropped
    /// update only means fewer intermediate steps. The deltas themselves are not all there,
    /// so do not build a wire log from such a channel (use `Block`).
    pub fn subscribe_channel_with(
        &self,
        capacity: usize,
        policy: ChannelPolicy,
    ) -> Receiver<AgentEvent> {
        self.handle().subscribe_channel_with(capacity, policy)
    }

    /// Removes the listener with this id. Returns false when there is none.
    pub fn unsubscribe(&self, id: u64) -> bool {
        self.inner.shared.unsubscribe(id)
    }

    /// A [`Waker`]: `wake` is called (on the thread that changed the state) when the state
    /// changes after the waker's last [`Waker::snapshot`], once until the next one. Made for
    /// a UI thread that draws the state: `wake` asks the toolkit for a frame, and the frame
    /// draws `waker.snapshot()`.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use pagent::llm::{Faux, FauxReply};
    /// use pagent::Agent;
    ///
    /// let agent = Agent::builder()
    ///     .provider(Faux::default().otherwise(|_| FauxReply::text("hi")))
    ///     .build()?;
    /// let frames_asked = Arc::new(AtomicUsize::new(0));
    /// let asked = frames_asked.clone();
    /// // With egui: `let ctx = ctx.clone(); agent.waker(move || ctx.request_repaint())`.
    /// let waker = agent.waker(move || {
    ///     asked.fetch_add(1, Ordering::SeqCst);
    /// });
    /// agent.prompt("hello")?; // the UI thread did not draw meanwhile: one wake in all
    /// assert_eq!(frames_asked.load(Ordering::SeqCst), 1);
    /// let state = waker.snapshot(); // a frame draws this, and arms the next wake
    /// assert_eq!(state.messages.len(), 2);
    /// agent.prompt("again")?;
    /// assert_eq!(frames_asked.load(Ordering::SeqCst), 2);
    /// # Ok::<(), pagent::Error>(())
    /// ```
    pub fn waker(&self, wake: impl Fn() + Send + Sync + 'static) -> Waker {
        self.handle().waker(wake)
    }

    /// The latest state. Never blocks; callable from any thread at any time.
    pub fn snapshot(&self) -> Arc<State> {
        self.inner.shared.snapshot()
    }

    /// A handle for other threads.
    pub fn handle(&self) -> AgentHandle {
        AgentHandle {
            shared: self.inner.shared.clone(),
            agent: Arc::downgrade(&self.inner),
        }
    }

    /// Queues a steering message (see [`AgentHandle::steer`]).
    ///
    /// # Errors
    /// Never: the agent is alive. The `Result` matches [`AgentHandle::steer`].
    pub fn steer(&self, message: impl Into<Message>) -> Result<(), Refused> {
        self.handle().steer(message)
    }

    /// Queues a follow-up message (see [`AgentHandle::follow_up`]).
    ///
    /// # Errors
    /// Never: the agent is alive. The `Result` matches [`AgentHandle::follow_up`].
    pub fn follow_up(&self, message: impl Into<Message>) -> Result<(), Refused> {
        self.handle().follow_up(message)
    }

    /// Aborts the active run (see [`AgentHandle::abort`]).
    pub fn abort(&self) -> bool {
        self.inner.abort()
    }

    /// Answers a question of a running tool call (see [`AgentHandle::answer_elicitation`]).
    ///
    /// # Errors
    /// As [`AgentHandle::answer_elicitation`].
    pub fn answer_elicitation(
        &self,
        id: &str,
        answer: ElicitationAnswer,
    ) -> Result<(), AnswerRefused> {
        self.inner.elicitations.answer(id, answer)
    }

    /// True while a run holds the agent: from the moment `prompt` claims it until the run's
    /// outcome is decided (just before `AgentEnd`); also for the instant a [`Agent::reset`]
    /// or [`Agent::replace_messages`] publishes. While it is true, `abort()` cancels that run
    /// and `prompt` returns `Busy`.
    pub fn is_running(&self) -> bool {
        self.inner.running.load(Ordering::Acquire)
    }

    /// Starts a new conversation: empties the transcript and both queues, and clears what the
    /// last run left in the state (`error_message`, `error_kind`, `stop_reason`, `turn`,
    /// `run_usage`, `tool_results`, `output`). The settings (system prompt, model, thinking
    /// level, tools), the listeners, `usage` (summed over the agent's life) and the listener and
    /// channel counters stay. Returns the queued messages it removed, the steering messages
    /// first, then the follow-ups, each queue in order.
    ///
    /// Emits [`AgentEvent::MessagesReplaced`] with no messages; the queues are emptied in
    /// the same state change. So listeners see it, `snapshot()` shows it from any thread,
    /// and a wire [`Mirror`](crate::wire::Mirror) follows it. (A
    /// [`session::Writer`](crate::session::Writer) only appends: give the new conversation a
    /// new file.)
    ///
    /// Does not block on a run (a run in progress makes it fail at once); right after a run,
    /// it waits for that run's `AgentEnd` listeners to return, as `prompt` does, and calls
    /// the listeners on the calling thread.
    ///
    /// # Consistency
    /// A reset holds the agent as a run does, for the instant it publishes: a `prompt`
    /// racing from another thread either runs on the transcript before the reset or after
    /// it, or returns `Busy`; never on a half-reset state. While it holds the agent,
    /// [`Agent::is_running`] is true (and an `abort()` in that instant returns true but
    /// cancels nothing).
    ///
    /// # Errors
    /// [`Error::Busy`] while a run is active, from a listener of the run too (its `AgentEnd`
    /// listeners included); nothing changes then.
    pub fn reset(&self) -> Result<Vec<Message>, Error> {
        let event = AgentEvent::MessagesReplaced {
            messages: Vec::new(),
        };
        run::between_runs(&self.inner, event, |next| {
            let mut removed = queues::take_queue(&mut next.steering_queue);
            removed.extend(queues::take_queue(&mut next.follow_up_queue));
            removed
        })
    }

    /// Replaces the transcript of an idle agent with `messages`, oldest first: a restored
    /// session, a compacted or edited history, a branch of the conversation. The next
    /// `prompt` or [`Agent::continue_run`] goes on from it. The state forgets what the last
    /// run left (see [`AgentEvent::MessagesReplaced`]); the queues and settings stay. Tool
    /// calls left without a result are answered by the next run, as for
    /// [`AgentBuilder::messages`].
    ///
    /// Emits [`AgentEvent::MessagesReplaced`]; blocks and holds the agent as
    /// [`Agent::reset`] does (see its `# Consistency`).
    ///
    /// # Errors
    /// [`Error::Busy`] while a run is active, from a listener of the run too; the
    /// transcript is then unchanged.
    pub fn replace_messages(
        &self,
        messages: impl IntoIterator<Item = Message>,
    ) -> Result<(), Error> {
        // Collected before the agent is held: the iterator is the caller's code.
        let messages: Vec<Arc<Message>> = messages.into_iter().map(Arc::new).collect();
        run::between_runs(
            &self.inner,
            AgentEvent::MessagesReplaced { messages },
            |_| (),
        )
    }

    /// Removes every queued steering message and returns them, in order (see
    /// [`AgentHandle::clear_steering_queue`]).
    pub fn clear_steering_queue(&self) -> Vec<Message> {
        self.handle().clear_steering_queue()
    }

    /// Removes every queued follow-up and returns them, in order (see
    /// [`AgentHandle::clear_follow_up_queue`]).
    pub fn clear_follow_up_queue(&self) -> Vec<Message> {
        self.handle().clear_follow_up_queue()
    }

    /// Empties both queues at once and returns what they held (see
    /// [`AgentHandle::clear_queues`]).
    pub fn clear_queues(&self) -> Vec<Message> {
        self.handle().clear_queues()
    }

    /// Changes the model for the next run. A run in progress keeps its own (unless a
    /// `before_turn` hook changes it); `State::model` shows the new one once that run ended.
    pub fn set_model(&self, model: impl Into<String>) {
        self.inner.configure(|c| c.model = model.into());
    }

    /// Changes the thinking level for the next run (shown in the state as for
    /// [`Agent::set_model`]).
    pub fn set_thinking(&self, level: ThinkingLevel) {
        self.inner.configure(|c| c.thinking = level);
    }

    /// Changes the system prompt for the next run (shown in the state as for
    /// [`Agent::set_model`]).
    pub fn set_system_prompt(&self, prompt: impl Into<String>) {
        self.inner.configure(|c| c.system_prompt = prompt.into());
    }

    /// The tools the next run offers: the builder's, or the last [`Agent::set_tools`]'s.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.inner.config.lock().tools.clone()
    }

    /// Replaces the tools for the next run (shown in the state as for [`Agent::set_model`]).
    pub fn set_tools(&self, tools: Vec<Arc<dyn Tool>>) {
        // Worked out before the lock is taken: `definition()` is the tools' own code.
        let defs = builder::definitions(&tools);
        self.inner.configure(|c| {
            c.tools = tools;
            c.tool_defs = defs;
        });
    }
}

impl Inner {
    /// Changes the settings; publishes them in the state at once when no run is active, else
    /// when the run ends (see `run::Claim`), so the state never shows a setting the run in
    /// progress does not use. Both sides hold the config lock, so no change is missed.
    fn configure(&self, f: impl FnOnce(&mut Config)) {
        let mut config = self.config.lock();
        f(&mut config);
        if !self.running.load(Ordering::Acquire) {
            self.publish_settings(&config);
        }
    }

    pub(crate) fn publish_settings(&self, config: &Config) {
        // Nothing changed (the common case at the end of each run): no new state, so that a
        // poller comparing generations has nothing to draw.
        let now = self.shared.snapshot();
        if *now.system_prompt == *config.system_prompt
            && *now.model == *config.model
            && now.thinking == config.thinking
            && Arc::ptr_eq(&now.tools, &config.tool_defs)
        {
            return;
        }
        drop(now);
        let defs = config.tool_defs.clone();
        self.shared.update(|next| {
            next.system_prompt = Arc::from(config.system_prompt.as_str());
            next.model = Arc::from(config.model.as_str());
            next.thinking = config.thinking;
            next.tools = defs;
        });
    }

    fn abort(&self) -> bool {
        // Everything under the claim's lock: while it is held no run can claim the agent, so
        // the token being dispatched is the claimed run's or one whose outcome is decided,
        // never the token of a run that claimed after this abort found none.
        let slot = self.cancel.lock();
        let cancelled = match &*slot {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        };
        // A run whose outcome is decided may still be sending its `AgentEnd` into a full
        // lossless channel (and a new run may be waiting for it): release that too.
        self.shared.cancel_dispatch();
        drop(slot);
        cancelled
    }
}

impl AgentHandle {
    /// The latest state. Never blocks.
    pub fn snapshot(&self) -> Arc<State> {
        self.shared.snapshot()
    }

    /// Queues a steering message: delivered while a run is active, before the next model call
    /// (as the agent's [`SteeringPolicy`] says), or with the next prompt when no run is active
    /// (after the prompt's messages, in the same turn). Visible in `State::steering_queue`
    /// until delivered.
    ///
    /// A run takes steering at the start of each turn, so a message queued while the model
    /// answers or tools run goes in after that turn's tool results. When the model gave its
    /// final answer and steering is queued, the run goes on with another turn instead of
    /// stopping (unless `max_turns` is reached: the message then stays queued).
    ///
    /// # Errors
    /// [`Refused`], holding the message, when the agent is gone.
    pub fn steer(&self, message: impl Into<Message>) -> Result<(), Refused> {
        self.enqueue(message.into(), Queue::Steering)
    }

    /// Queues a follow-up: delivered only when the run would otherwise stop (the model gave a
    /// final answer and no steering is queued), as the first message of a new turn in the
    /// same run. Queued while no run is active, it waits for the next run to reach that point,
    /// or for [`Agent::continue_run`]. Visible in `State::follow_up_queue` until delivered.
    /// An aborted run delivers none.
    ///
    /// # Errors
    /// [`Refused`], holding the message, when the agent is gone.
    pub fn follow_up(&self, message: impl Into<Message>) -> Result<(), Refused> {
        self.enqueue(message.into(), Queue::FollowUp)
    }

    fn enqueue(&self, message: Message, which: Queue) -> Result<(), Refused> {
        if self.agent.upgrade().is_none() {
            return Err(Refused(Box::new(message)));
        }
        self.shared.update(|next| {
            let queue = match which {
                Queue::Steering => &mut next.steering_queue,
                Queue::FollowUp => &mut next.follow_up_queue,
            };
            queue.push_back(Arc::new(message));
        });
        Ok(())
    }

    /// Aborts the active run: the in-flight model call, running tools (through their cancel
    /// token) and the loop stop promptly, and the run ends with `RunStopReason::Cancelled`.
    /// Returns false, and does nothing, when no run is active: an abort never carries over to
    /// a later run.
    ///
    /// # Consistency
    /// `true` means this run ends with `RunStopReason::Cancelled` (or `Error`, when it had
    /// already failed): the claim of a run and its cancel token are installed together, and
    /// the run decides its stop reason as it gives up the claim, so an abort that returns
    /// true is never lost, whatever instant it lands at. After that instant (while the
    /// `AgentEnd` listeners run) it returns false; it still releases a lossless channel the
    /// ending run waits on (see [`Agent::subscribe_channel`]).
    ///
    /// # Guarantees
    /// - Every phase ends: waiting for the first byte, streaming, a tool that honours its
    ///   cancel token, a `before_tool_call` hook waiting in
    ///   [`crate::hooks::ToolCallRequest::wait_for`]. (A tool or hook that ignores the token
    ///   keeps the run waiting until it returns.)
    /// - What streamed is kept: the reply ends with `StopReason::Aborted`, and its tool calls
    ///   get a "cancelled" result without running.
    /// - Tool calls of the batch not started yet get a "cancelled" result; tools already
    ///   running see their token cancelled, and whatever they return is kept.
    /// - No model call follows an abort, and queued steering and follow-ups stay queued.
    ///
    /// The latency from `abort()` to `prompt` returning is tens of microseconds on the
    /// scripted provider (`cargo bench --bench control`).
    pub fn abort(&self) -> bool {
        self.agent.upgrade().is_some_and(|a| a.abort())
    }

    /// Answers the question `id` that a running tool call asks the user (an
    /// [`AgentEvent::ElicitationStart`], listed in [`State::elicitations`]): the values are
    /// completed with the form's defaults and checked against its schema, then handed to
    /// the waiting call, which goes on (its `ElicitationEnd` carries the answer as sent). For
    /// a URL, `Accept` means the user agreed to visit the page; its value is ignored. From
    /// any thread; never blocks.
    ///
    /// Only questions that wait for an answer through the agent are answered here: those of
    /// an MCP client made with
    /// `mcp::ClientBuilder::elicit_through_agent` (feature `mcp`).
    /// A hook of the program answers its own.
    ///
    /// # Errors
    /// [`AnswerRefused::NotWaiting`] when no such question waits (answered already, given
    /// up by an abort, answered by a hook, or the agent is gone);
    /// [`AnswerRefused::Invalid`] when the values do not fit the form: the question still
    /// waits, and may be answered again.
    pub fn answer_elicitation(
        &self,
        id: &str,
        answer: ElicitationAnswer,
    ) -> Result<(), AnswerRefused> {
        match self.agent.upgrade() {
            Some(agent) => agent.elicitations.answer(id, answer),
            None => Err(AnswerRefused::NotWaiting(id.to_owned())),
        }
    }

    /// True while a run holds the agent (see [`Agent::is_running`]); false once the agent is
    /// gone.
    pub fn is_running(&self) -> bool {
        self.agent
            .upgrade()
            .is_some_and(|a| a.running.load(Ordering::Acquire))
    }

    /// Registers a listener; see [`Agent::subscribe`].
    pub fn subscribe(
        &self,
        listener: impl Fn(&AgentEvent) + Send + Sync + 'static,
    ) -> Subscription {
        let id = self.shared.subscribe(Sink::Callback(Box::new(listener)));
        Subscription {
            id,
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Registers a channel listener; see [`Agent::subscribe_channel`]. Once the agent is
    /// gone the receiver is disconnected at once.
    pub fn subscribe_channel(&self, capacity: usize) -> Receiver<AgentEvent> {
        self.subscribe_channel_with(capacity, ChannelPolicy::Block)
    }

    /// Registers a channel listener with a policy; see [`Agent::subscribe_channel_with`].
    pub fn subscribe_channel_with(
        &self,
        capacity: usize,
        policy: ChannelPolicy,
    ) -> Receiver<AgentEvent> {
        self.subscribe_channel_with_id(capacity, policy).1
    }

    /// Registers a channel listener with a policy and returns its id; see
    /// [`Agent::subscribe_channel_with_id`].
    pub fn subscribe_channel_with_id(
        &self,
        capacity: usize,
        policy: ChannelPolicy,
    ) -> (u64, Receiver<AgentEvent>) {
        let (channel, rx) = Channel::new(capacity, policy);
        let id = self.shared.subscribe(Sink::Channel(channel));
        (id, rx)
    }

    /// Removes the listener with this id. Returns false when there is none.
    pub fn unsubscribe(&self, id: u64) -> bool {
        self.shared.unsubscribe(id)
    }

    /// A [`Waker`]; see [`Agent::waker`]. Once the agent is gone it is never called.
    pub fn waker(&self, wake: impl Fn() + Send + Sync + 'static) -> Waker {
        let armed = Arc::new(AtomicBool::new(true));
        let id = self.shared.subscribe(Sink::Wake {
            wake: Box::new(wake),
            armed: armed.clone(),
        });
        Waker {
            id,
            armed,
            shared: self.shared.clone(),
        }
    }
}

/// Wakes a thread that draws an agent's state (a UI thread) when that state changes: what
/// [`Agent::waker`] returns. Works with any toolkit: `wake` is any `Fn() + Send + Sync`
/// (egui's `Context::request_repaint`, a winit `EventLoopProxy::send_event`, a message to
/// an iced or GTK main loop).
///
/// # Contract
/// - `wake` is called after a change is published (an event folded, or a change outside
///   events: a queue, a setting, a counter), on the thread that made it (the run thread
///   for events, the caller's for `steer`, `follow_up`, `clear_*` and `set_*`), with no
///   lock held, so it may call anything on the agent. It should be quick: it runs inside
///   the run, as a listener does. A panic in it is caught and ignored.
/// - It is called at most once between two [`Waker::snapshot`]s (and once before the
///   first): a reply that streams a thousand deltas while the UI draws one frame asks for
///   one more frame, not a thousand. The toolkit coalesces the rest. A wake may ask for a
///   frame that then finds the state it already drew (a change that was published while
///   the snapshot was taken shows in it and also wakes); it never asks for more than one.
/// - No change is missed: a change published after a `snapshot` either shows in that
///   snapshot or calls `wake`. In particular a run's `AgentStart`, on another thread,
///   always wakes a UI whose last frame drew the idle agent: its first event is never lost,
///   and an idle agent costs the UI nothing.
///
/// Dropping the `Waker` removes it. It holds the agent's state, not the agent: like an
/// [`AgentHandle`], it does not keep the agent alive.
pub struct Waker {
    id: u64,
    armed: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

impl Waker {
    /// The latest state, as [`Agent::snapshot`]; the next change after it calls the wake
    /// function again. Never blocks.
    pub fn snapshot(&self) -> Arc<State> {
        // Armed before the state is read. A swap (not a store) reads the flag's latest
        // value: when the run's swap that disarmed it comes first, this synchronizes with
        // it, so the state read below includes the change that run published; when it
        // comes after, the run sees the flag set and wakes.
        self.armed.swap(true, Ordering::AcqRel);
        self.shared.snapshot()
    }

    /// The waker's listener id.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        self.shared.unsubscribe(self.id);
    }
}

impl fmt::Debug for Waker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waker")
            .field("id", &self.id)
            .field("armed", &self.armed.load(Ordering::Relaxed))
            .finish()
    }
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Cloned first, so that no lock is held while the tools' and provider's own `name()`
        // run.
        let config = self.inner.config.lock().clone();
        f.debug_struct("Agent")
            .field("config", &config)
            .field("running", &self.is_running())
            .finish()
    }
}

impl fmt::Debug for AgentHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentHandle")
            .field("running", &self.is_running())
            .finish()
    }
}
