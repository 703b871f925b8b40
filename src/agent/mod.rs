//! The agent: builder, blocking runs, listeners, snapshots and the handle other threads use.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use crossbeam_channel::Receiver;
use parking_lot::Mutex;

use crate::Error;
use crate::cancel::CancelToken;
use crate::event::{AgentEvent, RunStopReason};
use crate::llm::ThinkingLevel;
use crate::message::{Message, Usage};
use crate::state::State;
use crate::tool::Tool;

mod builder;
pub(crate) mod dispatch;
pub(crate) mod guard;
pub(crate) mod hooks;
mod repair;
mod run;
mod tools;

pub use builder::AgentBuilder;
use builder::Config;
use dispatch::{Shared, Sink};

/// An LLM agent driven from ordinary blocking code.
///
/// `Agent` is `Send + Sync`: share it (in an `Arc`, or by reference with scoped threads) and
/// call [`Agent::prompt`] on one thread while others read [`Agent::snapshot`] or steer and abort
/// through an [`AgentHandle`]. One run at a time: a second `prompt` while a run is active
/// returns [`Error::Busy`] at once, it never queues.
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
/// a turn takes them, and are never dropped: a message that arrives too late for a run (after
/// its last decision, or once it was aborted) stays queued, and the next `prompt` or
/// [`Agent::continue_run`] delivers it.
pub struct Agent {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    shared: Arc<Shared>,
    config: Mutex<Config>,
    running: AtomicBool,
    cancel: Mutex<Option<CancelToken>>,
}

/// When queued steering interrupts a batch of tool calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SteeringPolicy {
    /// The current reply's tool calls all finish; the steering message goes in before the
    /// next model call.
    #[default]
    AfterBatch,
    /// Tool calls of the batch not yet started are skipped, each with a result that says the
    /// user sent a new message; calls already running finish.
    AtToolBoundary,
}

/// How many queued messages are taken at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
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
/// `String`, a [`Message`] or a `Vec<Message>`.
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

impl From<Vec<Message>> for Prompt {
    fn from(m: Vec<Message>) -> Prompt {
        Prompt(m)
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    /// Every message the run appended to the transcript, in order.
    pub messages: Vec<Arc<Message>>,
    /// Why the run stopped.
    pub stop_reason: RunStopReason,
    /// Usage summed over the run's replies.
    pub usage: Usage,
    /// The failure, when `stop_reason` is `Error`.
    pub error: Option<Error>,
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

    /// `Err` with the failure when the run stopped with `RunStopReason::Error`, so that `?`
    /// can surface provider errors.
    ///
    /// # Errors
    /// The provider's error, when the run ended with `Error`.
    pub fn ok(self) -> Result<RunResult, Error> {
        match self.error {
            Some(e) if self.stop_reason == RunStopReason::Error => Err(e),
            _ => Ok(self),
        }
    }
}

/// A listener registration. Dropping it keeps the listener; call
/// [`Subscription::unsubscribe`] (or [`Agent::unsubscribe`] with its id) to remove it.
#[derive(Debug)]
#[must_use = "dropping a Subscription keeps the listener; keep it to unsubscribe later"]
pub struct Subscription {
    id: u64,
    shared: Weak<Shared>,
}

impl Subscription {
    /// The listener's id, for [`Agent::unsubscribe`].
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Removes the listener. It is not called again, not even for an event being dispatched
    /// right now. Returns false when it was already removed.
    pub fn unsubscribe(self) -> bool {
        self.shared
            .upgrade()
            .is_some_and(|s| s.unsubscribe(self.id))
    }
}

/// A cheap `Clone + Send + Sync` handle for other threads: snapshot, steer, follow up, abort.
///
/// The handle does not keep the agent alive: once the `Agent` is dropped, `steer` and
/// `follow_up` give the message back as [`Refused`] and `abort` does nothing, while
/// `snapshot` still returns the last state.
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
        let state = State {
            system_prompt: Arc::from(config.system_prompt.as_str()),
            model: Arc::from(config.model.as_str()),
            thinking_level: config.thinking,
            tools: config.tool_defs.clone(),
            messages: messages.into_iter().map(Arc::new).collect(),
            ..State::default()
        };
        Agent {
            inner: Arc::new(Inner {
                shared: Arc::new(Shared::new(state)),
                config: Mutex::new(config),
                running: AtomicBool::new(false),
                cancel: Mutex::new(None),
            }),
        }
    }

    /// Runs the agent on `input` (a `&str`, a `String`, a [`Message`] or several) until it
    /// stops: streams the reply, runs the tools it asks for, and goes on for more turns.
    ///
    /// Blocks the current thread until the run ends or [`AgentHandle::abort`] is called from
    /// another thread (or from a listener). Listeners are called on this thread.
    ///
    /// A run that started always returns `Ok`, whatever its stop reason; a provider failure
    /// is `RunStopReason::Error` with the error in [`RunResult::error`] (use
    /// [`RunResult::ok`] to turn it into an `Err`).
    ///
    /// # Errors
    /// [`Error::Busy`] when a run is already active; [`Error::NothingToContinue`] for an empty
    /// prompt.
    pub fn prompt(&self, input: impl Into<Prompt>) -> Result<RunResult, Error> {
        let input = input.into().0;
        if input.is_empty() {
            return Err(Error::NothingToContinue("the prompt has no message".into()));
        }
        run::run(&self.inner, run::Start::Prompt(input))
    }

    /// Resumes from the transcript: a new turn if the last message is a user or tool-result
    /// message (queued steering rides along, as with a prompt). After an assistant message,
    /// the queued steering is delivered (per the steering [`QueueMode`]), else the queued
    /// follow-ups (per the follow-up mode).
    ///
    /// Blocks like [`Agent::prompt`].
    ///
    /// # Errors
    /// [`Error::Busy`] when a run is active; [`Error::NothingToContinue`] when the transcript
    /// ends with an assistant message (or is empty) and nothing is queued.
    pub fn continue_run(&self) -> Result<RunResult, Error> {
        run::run(&self.inner, run::Start::Continue)
    }

    /// Registers a listener, called for every event after it was folded into the state.
    ///
    /// # Contract
    /// Listeners run synchronously on the run thread, in registration order; a slow listener
    /// slows the run (use [`Agent::subscribe_channel`] to offload). A listener may call
    /// `snapshot`, `steer`, `follow_up`, `abort`, `subscribe` and `unsubscribe`; it must not
    /// call `prompt` (that returns `Busy`). A panic is caught: the run goes on, the other
    /// listeners still get the event, and the state counts it in `listener_panics` with the
    /// message in `last_listener_panic`.
    pub fn subscribe(
        &self,
        listener: impl Fn(&AgentEvent) + Send + Sync + 'static,
    ) -> Subscription {
        self.handle().subscribe(listener)
    }

    /// Registers a channel listener: every event is sent, cloned, into a bounded channel of
    /// `capacity` (0 makes a rendezvous channel).
    ///
    /// When the channel is full the run waits until the consumer takes an event: nothing is
    /// ever dropped, and the run never gets more than `capacity` events ahead of the
    /// consumer. (`abort()` does not release that wait, since it would lose events.) When the
    /// receiver is dropped, the listener removes itself at the next event.
    pub fn subscribe_channel(&self, capacity: usize) -> Receiver<AgentEvent> {
        self.handle().subscribe_channel(capacity)
    }

    /// Removes the listener with this id. Returns false when there is none.
    pub fn unsubscribe(&self, id: u64) -> bool {
        self.inner.shared.unsubscribe(id)
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

    /// True while a run is active.
    pub fn is_running(&self) -> bool {
        self.inner.running.load(Ordering::Acquire)
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
        let defs = config.tool_defs.clone();
        self.shared.update(|next| {
            next.system_prompt = Arc::from(config.system_prompt.as_str());
            next.model = Arc::from(config.model.as_str());
            next.thinking_level = config.thinking;
            next.tools = defs;
        });
    }

    fn abort(&self) -> bool {
        match &*self.cancel.lock() {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
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
        self.enqueue(message.into(), true)
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
        self.enqueue(message.into(), false)
    }

    fn enqueue(&self, message: Message, steering: bool) -> Result<(), Refused> {
        if self.agent.upgrade().is_none() {
            return Err(Refused(Box::new(message)));
        }
        self.shared.update(|next| {
            let queue = if steering {
                &mut next.steering_queue
            } else {
                &mut next.follow_up_queue
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

    /// True while a run is active.
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

    /// Registers a channel listener; see [`Agent::subscribe_channel`].
    pub fn subscribe_channel(&self, capacity: usize) -> Receiver<AgentEvent> {
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        self.shared.subscribe(Sink::Channel(tx));
        rx
    }

    /// Removes the listener with this id. Returns false when there is none.
    pub fn unsubscribe(&self, id: u64) -> bool {
        self.shared.unsubscribe(id)
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
