//! The loop: where every event of a run is born.
//!
//! `run` claims the agent, emits `AgentStart`, drives turns (input messages, one streamed
//! model reply, its tool calls) until a stop reason, and always emits exactly one `AgentEnd`.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::builder::{Config, ToolNames};
use super::context::RunContext;
use super::dispatch::Listeners;
use super::guard;
use super::hooks::TurnSetup;
use super::output::RunOutput;
use super::repair;
use super::{FinalTurn, Inner, Queue, QueueMode, RunResult};
use crate::cancel::CancelToken;
use crate::event::{AgentEvent, RunStopReason};
use crate::llm::{Request, StreamEvent};
use crate::message::{AssistantMessage, Message, StopReason, ToolCall, ToolResultMessage, Usage};
use crate::output::OutputSchema;
use crate::partial::{KeptCalls, PartialMessage};
use crate::trace::RunTrace;
use crate::{Error, ErrorInfo, RunError, TimeoutPhase};

pub(crate) enum Start {
    Prompt(Vec<Message>),
    Continue,
}

/// A run's hold on the agent, in two parts released at different instants:
///
/// - the claim (the cancel token in `Inner::cancel`, with `running`): taken under the cancel
///   lock, so an `abort()` that sees the run always reaches its token; given up by
///   [`Claim::release`] right before `AgentEnd` is folded, so a snapshot that shows
///   `is_streaming == false` never answers a `prompt` with `Busy`;
/// - the gate (`Inner::gate`): held from before `AgentStart` to after the last `AgentEnd`
///   listener returned, so the next run's events never interleave with this run's.
///
/// Dropping it releases what is still held, even when the loop panicked.
struct Claim<'a> {
    inner: &'a Inner,
    gate: Option<parking_lot::MutexGuard<'a, ()>>,
    claimed: bool,
}

impl<'a> Claim<'a> {
    /// Claims the agent for a run with `token`, or `Busy`.
    fn take(inner: &'a Inner, token: &CancelToken) -> Result<Claim<'a>, Error> {
        let mut slot = inner.cancel.lock();
        // On the thread that holds the gate (an `AgentEnd` listener), waiting for the gate
        // would wait for ourselves.
        let here = std::thread::current().id();
        if slot.is_some() || *inner.gate_owner.lock() == Some(here) {
            return Err(Error::Busy);
        }
        *slot = Some(token.clone());
        inner.running.store(true, Ordering::Release);
        Ok(Claim {
            inner,
            gate: None,
            claimed: true,
        })
    }

    /// Waits until the previous run's `AgentEnd` listeners returned, then lets the events of
    /// this run (cancelled through `token`) flow.
    fn enter(&mut self, token: &CancelToken) {
        self.gate = Some(self.inner.gate.lock());
        *self.inner.gate_owner.lock() = Some(std::thread::current().id());
        self.inner.shared.set_run_token(Some(token.clone()));
    }

    /// Gives up the claim. Returns true when the run was aborted up to this instant; an
    /// `abort()` after it returns false. From here on `Inner::configure` publishes a change
    /// at once (it reads `running` under the config lock, as this does).
    fn release(&mut self) -> bool {
        let _config = self.inner.config.lock();
        let token = {
            let mut slot = self.inner.cancel.lock();
            self.inner.running.store(false, Ordering::Release);
            slot.take()
        };
        self.claimed = false;
        token.is_some_and(|t| t.is_cancelled())
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.claimed {
            self.release();
        }
        // The settings changed while the run went on show once its `AgentEnd` listeners ran
        // (and before the next run, which waits for the gate, starts).
        self.inner.publish_settings(&self.inner.config.lock());
        if self.gate.is_some() {
            self.inner.shared.set_run_token(None);
            *self.inner.gate_owner.lock() = None;
            self.gate = None;
        }
    }
}

/// A claim taken on one thread for a run that goes on another (see `Agent::prompt_stream`):
/// `Busy` is decided at once, on the caller's thread. Dropping it unused gives the claim up.
pub(crate) struct Claimed {
    inner: Arc<Inner>,
    token: Option<CancelToken>,
}

impl Claimed {
    /// The cancel token of the claimed run: cancelling it aborts that run and no other.
    pub(crate) fn token(&self) -> CancelToken {
        self.token.clone().expect("an unused claim holds its token")
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        if self.token.take().is_some() {
            drop(Claim {
                inner: &self.inner,
                gate: None,
                claimed: true,
            });
        }
    }
}

/// Claims `inner` for a run (its `run_timeout` deadline starts now), or `Busy`.
pub(crate) fn claim(inner: &Arc<Inner>) -> Result<Claimed, Error> {
    // With a `run_timeout` the token carries the run's deadline (see `CancelToken`).
    let deadline = inner
        .config
        .lock()
        .run_timeout
        .and_then(|t| std::time::Instant::now().checked_add(t));
    let cancel = deadline.map_or_else(CancelToken::new, CancelToken::with_deadline);
    let claim = Claim::take(inner, &cancel)?;
    // The `Claimed` releases it from here on.
    std::mem::forget(claim);
    Ok(Claimed {
        inner: inner.clone(),
        token: Some(cancel),
    })
}

pub(crate) fn run(inner: &Arc<Inner>, start: Start) -> Result<RunResult, RunError> {
    run_with(inner, start, None)
}

/// A run whose structured answer matches `output` (instead of the agent's own schema, if
/// any).
pub(crate) fn run_with(
    inner: &Arc<Inner>,
    start: Start,
    output: Option<OutputSchema>,
) -> Result<RunResult, RunError> {
    let claimed = claim(inner).map_err(RunError::refused)?;
    run_claimed_with(claimed, start, output)
}

/// Runs on the current thread a run whose claim was taken by [`claim`].
pub(crate) fn run_claimed(claimed: Claimed, start: Start) -> Result<RunResult, RunError> {
    run_claimed_with(claimed, start, None)
}

fn run_claimed_with(
    mut claimed: Claimed,
    start: Start,
    output: Option<OutputSchema>,
) -> Result<RunResult, RunError> {
    let inner = &claimed.inner.clone();
    let cancel = claimed
        .token
        .take()
        .expect("an unused claim holds its token");
    drop(claimed);
    let mut claim = Claim {
        inner,
        gate: None,
        claimed: true,
    };
    claim.enter(&cancel);
    let input = match start {
        Start::Prompt(messages) => messages,
        Start::Continue => continue_input(inner).map_err(RunError::refused)?,
    };
    let config = inner.config.lock().clone();
    let trace = RunTrace::new(
        &config.trace,
        &*config.provider,
        &config.model,
        &config.system_prompt,
    );
    let memory = std::mem::take(&mut *inner.context.lock());
    let output = output
        .or_else(|| config.output.clone())
        .map(|schema| RunOutput::new(schema, config.output_turn, config.output_repairs));
    let mut run = Run {
        inner,
        trace,
        config,
        cancel,
        appended: Vec::new(),
        usage: Usage::default(),
        turn: 0,
        final_turn: false,
        retried: 0,
        context: RunContext::new(memory),
        output,
        emit_here: None,
        empty_reply: None,
        spares: Spares::default(),
        listeners: RefCell::default(),
    };
    run.emit(AgentEvent::AgentStart);
    let (mut stop_reason, error) = match guard::must("the agent loop", || run.turns(input)) {
        Ok(r) => r,
        Err(e) => (RunStopReason::Error, Some(e)),
    };
    *inner.context.lock() = std::mem::take(&mut run.context).into_memory();
    // The connection buffers this thread reused from turn to turn go now: an idle agent
    // holds none.
    crate::llm::release_thread_buffers();
    // The outcome is decided here, as the claim goes: an abort that landed after the loop's
    // last check (in a `TurnEnd` listener, say) still makes the run `Cancelled`, so an
    // `abort()` that returned true is never lost.
    if claim.release() && stop_reason != RunStopReason::Error {
        stop_reason = RunStopReason::Cancelled;
    }
    // A run that ends with `Error` returns one (the loop always pairs them; this keeps the
    // rule when it did not); a run that ends otherwise ended as asked and is `Ok`.
    let error = match (stop_reason, error) {
        (RunStopReason::Error, None) => Some(Error::Provider("the run failed".to_owned())),
        (RunStopReason::Error, error) => error,
        (_, _) => None,
    };
    let result = RunResult {
        messages: run.appended.clone(),
        stop_reason,
        usage: run.usage,
        // A failed run has no answer, whatever it checked before it failed.
        output: match stop_reason {
            RunStopReason::Error => None,
            _ => run.output.take().and_then(RunOutput::into_value),
        },
    };
    let messages = std::mem::take(&mut run.appended);
    run.emit(AgentEvent::AgentEnd {
        messages,
        stop_reason,
        usage: run.usage,
        error: error.as_ref().map(ErrorInfo::from),
    });
    drop(claim);
    match error {
        Some(error) => Err(RunError::new(error, result)),
        None => Ok(result),
    }
}

/// Emits `event` between runs (a `MessagesReplaced`), with the change `before` in the same
/// publication, holding the agent as a run would: `Busy` while a run holds it (or on the
/// thread of a run's `AgentEnd` listeners); otherwise it waits for the last run's `AgentEnd`
/// listeners to return, so that no listener sees this event among a run's. No run can start
/// meanwhile.
pub(crate) fn between_runs<R>(
    inner: &Inner,
    event: AgentEvent,
    before: impl FnOnce(&mut crate::state::State) -> R,
) -> Result<R, Error> {
    let token = CancelToken::new();
    let mut claim = Claim::take(inner, &token)?;
    claim.enter(&token);
    let out = inner.shared.emit_with(&event, before);
    // The transcript was replaced: its pieces go with it.
    inner.body_cache.clear();
    Ok(out)
}

/// What `continue_run` sends: nothing when the model is due to answer (a user or tool-result
/// tail) or when steering is queued (the first turn takes it, as for a prompt), else the
/// queued follow-ups.
fn continue_input(inner: &Inner) -> Result<Vec<Message>, Error> {
    let state = inner.shared.snapshot();
    // A reply whose calls lack results is not the end: the run answers them first (see
    // `repair`), and the model is then due to answer; unless repairs are off, when the
    // calls stay unanswered and the reply is the end, as any other.
    let last_is_assistant = match state.last_message() {
        None => true,
        Some(m) => {
            matches!(**m, Message::Assistant(_))
                && (!inner.config.lock().repair_requests
                    || repair::unanswered_tail(state.messages.iter()).is_empty())
        }
    };
    if !last_is_assistant || !state.steering_queue.is_empty() {
        return Ok(Vec::new());
    }
    let mode = inner.config.lock().follow_up_mode;
    let taken = take_queued(inner, Queue::FollowUp, mode);
    if !taken.is_empty() {
        return Ok(taken);
    }
    Err(Error::NothingToContinue(
        "the transcript ends with an assistant message and no steering or follow-up is queued"
            .into(),
    ))
}

/// Takes queued steering (or follow-up) messages and publishes the shorter queue. An empty
/// queue (the common case, checked on a snapshot) publishes nothing: a message queued after
/// that look goes to a later take, as it would had it come a moment later.
fn take_queued(inner: &Inner, which: Queue, mode: QueueMode) -> Vec<Message> {
    let empty = inner.shared.read(|state| match which {
        Queue::Steering => state.steering_queue.is_empty(),
        Queue::FollowUp => state.follow_up_queue.is_empty(),
    });
    if empty {
        return Vec::new();
    }
    inner.shared.update(|next| {
        let queue = match which {
            Queue::Steering => &mut next.steering_queue,
            Queue::FollowUp => &mut next.follow_up_queue,
        };
        let n = match mode {
            QueueMode::OneAtATime => queue.len().min(1),
            QueueMode::All => queue.len(),
        };
        queue
            .take_front(n)
            .iter()
            .map(|m| Message::clone(m))
            .collect()
    })
}

pub(crate) struct Run<'a> {
    pub(crate) inner: &'a Inner,
    /// The run's spans (feature `tracing`; nothing without it): it sees every event.
    pub(crate) trace: RunTrace,
    pub(crate) config: Config,
    pub(crate) cancel: CancelToken,
    /// What the run appended to the transcript, in order: within a run the transcript
    /// changes only by these (`replace_messages` waits for the run).
    pub(crate) appended: Vec<Arc<Message>>,
    usage: Usage,
    pub(crate) turn: u32,
    /// Whether this turn is the final answer turn after `max_turns` (see [`FinalTurn`]), or
    /// a structured answer's answer or repair turn: its tool calls are not run.
    pub(crate) final_turn: bool,
    /// How many turns sent an overflowed request again: they do not count against
    /// `max_turns`.
    pub(crate) retried: u32,
    /// The context ledger and what the current model call needs of it.
    pub(crate) context: RunContext,
    /// The structured answer of a run with an output schema (see `agent::output`).
    pub(crate) output: Option<RunOutput>,
    /// How a tool run on this thread publishes its events: made for the run's first such
    /// call, shared by all of them.
    emit_here: Option<crate::tool::Emit>,
    /// The empty reply a `MessageStart` announces, of the model in `Config::model`, and
    /// that model shared, for the reply's partial: made again only when the model changes
    /// (their own for each reply cost three allocations a turn).
    empty_reply: Option<(Arc<Message>, Arc<str>)>,
    /// What one turn's model call leaves for the next (see [`Spares`]).
    pub(crate) spares: Spares,
    /// The listener list the run's last event was delivered to, used again while it is
    /// the current one (see `dispatch::Listeners`).
    listeners: RefCell<Listeners>,
}

/// What a turn's model call leaves for the next turn's, to be filled again rather than
/// allocated: the request's message list (as it was sent) and model name, and the shared ids of
/// the reply's calls (in call order), which their tool contexts take.
#[derive(Default)]
pub(crate) struct Spares {
    pub(crate) messages: Vec<Arc<Message>>,
    model: Option<String>,
    pub(crate) call_ids: Vec<Arc<str>>,
}

impl Run<'_> {
    // Inlined: an event is built where it is handed to the dispatch (no copy of the event on
    // its way), and with the `tracing` feature costs two checks more.
    #[inline(always)]
    pub(crate) fn emit(&self, event: AgentEvent) {
        // A span the event ends closes once its listeners returned.
        let _closing = self.trace.observe(&event, &self.config.tool_defs);
        self.inner
            .shared
            .emit_cached(&event, &mut self.listeners.borrow_mut());
    }

    /// As [`Run::emit`], giving the event back once its listeners returned: what it owns
    /// (a call's id and name, its arguments) goes on into the next event or the result,
    /// rather than being copied again.
    #[inline(always)]
    pub(crate) fn emit_back(&self, event: AgentEvent) -> AgentEvent {
        let _closing = self.trace.observe(&event, &self.config.tool_defs);
        self.inner
            .shared
            .emit_cached(&event, &mut self.listeners.borrow_mut());
        event
    }

    /// How a tool run on this thread publishes its events (see `emit_here`).
    pub(crate) fn emit_here(&mut self) -> crate::tool::Emit {
        self.emit_here
            .get_or_insert_with(|| {
                let shared = self.inner.shared.clone();
                Arc::new(move |event| shared.emit(&event))
            })
            .clone()
    }

    /// The empty reply of `Config::model`, as a `MessageStart` announces it, and the model.
    fn empty_reply(&mut self) -> (Arc<Message>, Arc<str>) {
        let model = &self.config.model;
        match &self.empty_reply {
            Some((m, name)) if **name == **model => (m.clone(), name.clone()),
            _ => {
                let m = Arc::new(Message::Assistant(AssistantMessage {
                    model: model.clone(),
                    ..AssistantMessage::default()
                }));
                let made = (m, Arc::from(model.as_str()));
                self.empty_reply = Some(made.clone());
                made
            }
        }
    }

    /// As [`Run::emit`] for a delta of the reply, by reference (its partial is taken back
    /// after).
    #[inline(always)]
    fn emit_update(&self, event: &mut AgentEvent, push: impl FnOnce(&mut AgentEvent)) {
        // The spans read only the delta, which the event holds already.
        let _closing = self.trace.observe(event, &self.config.tool_defs);
        self.inner
            .shared
            .emit_update(event, push, &mut self.listeners.borrow_mut());
    }

    /// Counts `usage` (of a model call outside the replies: a compaction's) in the run's.
    pub(crate) fn add_usage(&mut self, usage: Usage) {
        self.usage += usage;
    }

    pub(crate) fn steering_queued(&self) -> bool {
        !self.inner.shared.read(|s| s.steering_queue.is_empty())
    }

    /// Appends a whole (non-streamed) message: `MessageStart` then `MessageEnd`.
    pub(crate) fn append(&mut self, message: Message) {
        let message = Arc::new(message);
        self.emit(AgentEvent::MessageStart {
            message: message.clone(),
        });
        self.emit(AgentEvent::MessageEnd {
            message: message.clone(),
        });
        self.appended.push(message);
    }

    fn turns(&mut self, mut input: Vec<Message>) -> (RunStopReason, Option<Error>) {
        self.answer_unanswered(&mut input);
        let mut follow_up_due = false;
        loop {
            // An abort that landed after a turn ended (in a `TurnEnd` listener, say) starts
            // no new turn: no further model call, and queued steering and follow-ups stay
            // queued (they are taken only below, once the turn is sure to start).
            if self.turn > 0 && self.cancel.is_cancelled() {
                return self.cancelled();
            }
            self.turn += 1;
            // Only a turn at the limit that ran tools goes on past it (see `decide`); an
            // answer or repair turn runs no tools either.
            self.final_turn = self.turn - self.retried > self.config.max_turns || self.answering();
            if std::mem::take(&mut follow_up_due) {
                input.extend(take_queued(
                    self.inner,
                    Queue::FollowUp,
                    self.config.follow_up_mode,
                ));
            }
            self.emit(AgentEvent::TurnStart { turn: self.turn });
            for m in input.drain(..) {
                self.append(m);
            }
            if let Err(e) = self.before_turn() {
                return self.end_turn_early(e);
            }
            // Steering goes in right before the model call, so it includes what arrived up to
            // this instant (queued before the prompt, or sent by a listener of this turn's
            // first events or by the `before_turn` hook). An aborted turn makes no model call
            // and takes none: it stays queued.
            if !self.cancel.is_cancelled() {
                for m in take_queued(self.inner, Queue::Steering, self.config.steering_mode) {
                    self.append(m);
                }
            }
            self.prepare_context();
            let (reply, error) = self.stream_reply();
            let usage = reply.usage;
            let reply_msg = Arc::new(Message::Assistant(reply));
            self.emit(AgentEvent::MessageEnd {
                message: reply_msg.clone(),
            });
            self.appended.push(reply_msg.clone());
            self.usage += usage;
            // OK because `reply_msg` was built from an assistant message just above.
            let reply = reply_msg.as_assistant().expect("an assistant reply");
            // Borrowed from the reply, which the transcript shares; in a list only when
            // there are two or more.
            let (first, many): (Option<&ToolCall>, Vec<&ToolCall>);
            let calls: &[&ToolCall] = if reply.tool_calls().nth(1).is_some() {
                many = reply.tool_calls().collect();
                &many
            } else {
                first = reply.tool_calls().next();
                first.as_slice()
            };
            let results = if self.final_turn {
                self.settle_final(calls, reply)
            } else {
                self.run_tools(calls, reply)
            };

            let stop = self.decide(reply, !calls.is_empty(), &mut follow_up_due);
            let (stop, mut error) = self.after_reply(reply, stop, error);
            let stop = self.settle_answer(reply, !calls.is_empty(), stop, &mut input, &mut error);
            let context = self.context_usage();
            self.emit(AgentEvent::TurnEnd {
                turn: self.turn,
                message: reply_msg,
                tool_results: results,
                stop_reason: stop,
                context,
            });
            if stop != RunStopReason::Continuing {
                // A deadline that passed after the reply came still ends the run with its error.
                return match error {
                    None if self.cancel.is_timed_out() => self.cancelled(),
                    error => (stop, error),
                };
            }
        }
    }

    /// Why the run stops after this turn, or `Continuing`; `follow_up_due` tells the next turn
    /// to take queued follow-ups (the agent would otherwise have stopped).
    fn decide(
        &mut self,
        reply: &AssistantMessage,
        had_calls: bool,
        follow_up_due: &mut bool,
    ) -> RunStopReason {
        if self.cancel.is_timed_out() {
            return RunStopReason::Error;
        }
        if self.cancel.is_cancelled() || reply.stop_reason == StopReason::Aborted {
            return RunStopReason::Cancelled;
        }
        if reply.stop_reason == StopReason::Error {
            return RunStopReason::Error;
        }
        let out_of_turns = self.turn - self.retried >= self.config.max_turns;
        if had_calls {
            // The final turn's calls did not run; at the limit, the tools ran and the final
            // answer turn follows, unless there is none.
            return if self.final_turn || out_of_turns && self.config.final_turn == FinalTurn::Off {
                RunStopReason::MaxTurns
            } else {
                RunStopReason::Continuing
            };
        }
        let natural = if reply.is_empty() {
            RunStopReason::EmptyResponse
        } else {
            RunStopReason::NoToolCalls
        };
        if out_of_turns {
            return if self.steering_queued()
                || !self.inner.shared.read(|s| s.follow_up_queue.is_empty())
            {
                RunStopReason::MaxTurns
            } else {
                natural
            };
        }
        if self.steering_queued() {
            return RunStopReason::Continuing;
        }
        if !self.inner.shared.read(|s| s.follow_up_queue.is_empty()) {
            *follow_up_due = true;
            return RunStopReason::Continuing;
        }
        natural
    }

    /// How the run ends once its token is cancelled: by an abort, or at the run deadline
    /// (`run_timeout`) with its timeout error.
    fn cancelled(&self) -> (RunStopReason, Option<Error>) {
        if self.cancel.is_timed_out() {
            (
                RunStopReason::Error,
                Some(Error::Timeout(TimeoutPhase::Run)),
            )
        } else {
            (RunStopReason::Cancelled, None)
        }
    }

    /// Runs the `before_turn` hook and publishes what it changed.
    fn before_turn(&mut self) -> Result<(), Error> {
        let Some(hook) = self.config.hooks.before_turn.clone() else {
            return Ok(());
        };
        let mut setup = TurnSetup::from_config(self.turn, &self.config);
        guard::must("the before_turn hook", || hook(&mut setup))?;
        let tools_changed = setup.tools.len() != self.config.tools.len()
            || setup
                .tools
                .iter()
                .zip(&self.config.tools)
                .any(|(a, b)| !Arc::ptr_eq(a, b));
        let model_changed = setup.model != self.config.model;
        let thinking_changed = setup.thinking != self.config.thinking;
        if !(model_changed || thinking_changed || tools_changed) {
            return Ok(());
        }
        self.config.model = setup.model;
        self.config.thinking = setup.thinking;
        if tools_changed {
            // Worked out here, with no lock held: `definition()` is the tools' own code. A
            // tool that cannot describe itself is refused, as `build` refuses it.
            self.config.tool_defs =
                super::builder::try_definitions(&setup.tools).map_err(|(name, panic)| {
                    Error::Panic {
                        source: "a tool's definition",
                        message: format!("{panic} (tool `{name}`, put in place by before_turn)"),
                    }
                })?;
            self.config.tools = setup.tools;
            self.config.tool_names = ToolNames::default();
        }
        // The switch sticks, so that the state (which shows it) and the next run agree. Only
        // what the hook changed is written back: a `set_*` made meanwhile from another
        // thread keeps its other settings.
        let mut agent = self.inner.config.lock();
        if model_changed {
            agent.model = self.config.model.clone();
        }
        if thinking_changed {
            agent.thinking = self.config.thinking;
        }
        if tools_changed {
            agent.tools = self.config.tools.clone();
            agent.tool_defs = self.config.tool_defs.clone();
        }
        drop(agent);
        let run = &self.config;
        self.inner.shared.update(|next| {
            next.model = Arc::from(run.model.as_str());
            next.thinking = run.thinking;
            next.tools = run.tool_defs.clone();
        });
        Ok(())
    }

    /// Ends a turn that failed before its model call, with an error reply so the transcript
    /// shows what happened.
    fn end_turn_early(&mut self, error: Error) -> (RunStopReason, Option<Error>) {
        let reply = AssistantMessage {
            stop_reason: StopReason::Error,
            model: self.config.model.clone(),
            error_message: Some(error.to_string()),
            ..AssistantMessage::default()
        };
        let msg = Arc::new(Message::Assistant(reply));
        let (message, _) = self.empty_reply();
        self.emit(AgentEvent::MessageStart { message });
        self.emit(AgentEvent::MessageEnd {
            message: msg.clone(),
        });
        self.appended.push(msg.clone());
        let context = self.context_usage();
        self.emit(AgentEvent::TurnEnd {
            turn: self.turn,
            message: msg,
            tool_results: Vec::new(),
            stop_reason: RunStopReason::Error,
            context,
        });
        (RunStopReason::Error, Some(error))
    }

    /// The request of this turn: the transcript's own messages (shared, never copied) as
    /// the context policy sends them, then as `transform_context` leaves them.
    fn request(&mut self) -> Result<Request, Error> {
        let mut messages = self.context_view();
        // The view's key, while `messages` is that view (see `repair::Checked`).
        let mut view = Some(self.view_key());
        if let Some(hook) = &self.config.hooks.transform_context {
            messages = guard::must("the transform_context hook", || hook(messages))?;
            view = None;
        }
        if self.config.repair_requests {
            messages = self.repair_request(messages, view);
        }
        // pagent v5 withholds the tools from its final answer turn.
        let tools = if self.final_turn && self.config.final_turn == FinalTurn::ToolsWithheld {
            Arc::from([])
        } else {
            self.config.tool_defs.clone()
        };
        let output = self.output_request(!tools.is_empty());
        let model = match self.spares.model.take() {
            Some(m) if m == self.config.model => m,
            _ => self.config.model.clone(),
        };
        Ok(Request {
            system_prompt: self.config.system_prompt.clone(),
            messages,
            tools,
            model,
            thinking: self.config.thinking,
            output,
            body_cache: Some(self.inner.body_cache.clone()),
        })
    }

    /// Streams one reply: `MessageStart`, a `MessageUpdate` per piece. Returns the finished
    /// reply (the caller emits `MessageEnd`) and the error that cut it, if any. What streamed
    /// before an error or abort is kept in the reply.
    ///
    /// The reply is assembled here and only here, from the events the provider handed over
    /// (each one folded into the partial that its `MessageUpdate` carries); the provider adds
    /// only how it ended. So the message always equals what the events showed.
    fn stream_reply(&mut self) -> (AssistantMessage, Option<Error>) {
        let (message, shared_model) = self.empty_reply();
        self.trace.open_chat(&self.config.model, self.turn);
        self.emit(AgentEvent::MessageStart { message });
        // In `Some` but while a `MessageUpdate` carries it to the listeners.
        let mut partial = Some(PartialMessage::with_model(shared_model.clone()));
        // The strings of the call deltas, for the finished reply (see `KeptCalls`).
        let mut kept = KeptCalls::default();
        let limit = self.config.max_reply_bytes;
        // Set when the reply reached its size limit: from then on every event is refused
        // and dropped, whatever the provider does, and the reply ends with that error.
        let mut too_large = false;
        let outcome = match self.request() {
            Err(e) => Ok(Err(e)),
            Ok(request) if self.cancel.is_cancelled() => {
                drop(request);
                Ok(Err(Error::Aborted))
            }
            Ok(request) => {
                self.trace.request(&request);
                let provider = self.config.provider.clone();
                let cancel = self.cancel.clone();
                let partial = &mut partial;
                let kept = &mut kept;
                let too_large = &mut too_large;
                let mut size = 0u64;
                let outcome = guard::catch(|| {
                    provider.stream(&request, &cancel, &mut |delta| {
                        // Nothing of the reply is taken after an abort (or the run deadline):
                        // what a run emits once aborted is bounded by its structure, which
                        // lossless channels rely on (see `dispatch`).
                        if cancel.is_cancelled() {
                            return Err(Error::Aborted);
                        }
                        size = size.saturating_add(content_bytes(&delta));
                        if *too_large || size > limit {
                            *too_large = true;
                            return Err(Error::ReplyTooLarge { limit });
                        }
                        // OK because it is put back below, after every event.
                        let message = partial.take().expect("the partial between deltas");
                        // Built where it stays: handed on by reference, and only the
                        // partial moves out again (the whole event is 144 bytes).
                        let mut event = AgentEvent::MessageUpdate { message, delta };
                        // The delta goes into the partial as the event is published (see
                        // `Shared::emit_update`: in place, nearly always).
                        let push = |event: &mut AgentEvent| {
                            if let AgentEvent::MessageUpdate { message, delta } = event {
                                message.push(delta);
                            }
                        };
                        self.emit_update(&mut event, push);
                        if let AgentEvent::MessageUpdate { message, delta } = event {
                            *partial = Some(message);
                            kept.keep(delta);
                        }
                        Ok(())
                    })
                });
                // The request's list (as it was sent: the next view keeps what it sends
                // again) and model name serve the next request.
                let Request {
                    messages, model, ..
                } = request;
                self.spares.messages = messages;
                self.spares.model = Some(model);
                outcome
            }
        };
        let outcome = match outcome {
            Ok(_) if too_large => Ok(Err(Error::ReplyTooLarge { limit })),
            other => other,
        };
        let model = &self.config.model;
        let partial = partial.unwrap_or_else(|| PartialMessage::with_model(shared_model));
        let (mut reply, error) = match outcome {
            Ok(Ok(end)) => {
                let mut reply = partial.to_message_with(end.stop_reason, &mut kept);
                reply.response_id = end.response_id;
                if let Some(model) = end.model {
                    reply.model = model;
                }
                // A reply the provider ended with `Error` without failing (a scripted `Faux`
                // reply, a custom provider): the run ends with `Error`, so it carries one.
                let error = (end.stop_reason == StopReason::Error).then(|| {
                    Error::Provider("the provider ended the reply with an error".to_owned())
                });
                (reply, error)
            }
            // The run deadline passed: whatever the provider made of it, the turn failed.
            Ok(Err(_)) if self.cancel.is_timed_out() => {
                let e = Error::Timeout(TimeoutPhase::Run);
                let mut reply = partial.to_message_with(StopReason::Error, &mut kept);
                reply.error_message = Some(e.to_string());
                (reply, Some(e))
            }
            Ok(Err(e)) if e.is_aborted() || self.cancel.is_cancelled() => {
                let mut reply = partial.to_message_with(StopReason::Aborted, &mut kept);
                reply.error_message = Some(Error::Aborted.to_string());
                (reply, None)
            }
            Ok(Err(e)) => {
                let mut reply = partial.to_message_with(StopReason::Error, &mut kept);
                reply.error_message = Some(e.to_string());
                (reply, Some(e))
            }
            Err(message) => {
                let e = Error::Panic {
                    source: "the provider",
                    message,
                };
                let mut reply = partial.to_message_with(StopReason::Error, &mut kept);
                reply.error_message = Some(e.to_string());
                (reply, Some(e))
            }
        };
        if reply.model.is_empty() {
            reply.model = model.clone();
        }
        // Shared with the contexts of the calls (see `Spares`).
        self.spares.call_ids.clear();
        self.spares.call_ids.extend(partial.call_ids().cloned());
        self.trace.reply_failed(error.as_ref());
        (reply, error)
    }

    pub(crate) fn tool_result(
        call: &crate::message::ToolCall,
        content: impl Into<String>,
        is_error: bool,
    ) -> ToolResultMessage {
        ToolResultMessage::new(call.id.clone(), call.name.clone(), content).with_is_error(is_error)
    }
}

/// The bytes `event` adds to a reply: its text, reasoning or argument text.
fn content_bytes(event: &StreamEvent) -> u64 {
    let bytes = match event {
        StreamEvent::TextDelta { text } | StreamEvent::ThinkingDelta { text } => text.len(),
        StreamEvent::ToolCallDelta { arguments, .. } => arguments.len(),
        StreamEvent::ThinkingSignature { signature } => signature.len(),
        StreamEvent::ToolCallStart { id, name } => id.len() + name.len(),
        StreamEvent::Usage { .. } | StreamEvent::Retry { .. } => 0,
    };
    bytes as u64
}
