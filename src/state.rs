//! `State`: what an agent looks like at one instant, and the pure fold of events into it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::context::ContextUsage;
use crate::elicit::PendingElicitation;
use crate::event::{AgentEvent, RunStopReason};
use crate::kind::ErrorKind;
use crate::list::List;
use crate::message::{Message, StopReason, ToolCall, ToolResultMessage, Usage};
use crate::output::OutputCheck;
use crate::partial::PartialMessage;
use crate::types::{StreamEvent, ThinkingLevel, ToolDefinition, ToolOutput};

/// An immutable snapshot of an agent.
///
/// The agent publishes a new `State` for every event (see [`State::apply`]) and whenever a
/// queue or setting changes; [`crate::Agent::snapshot`] returns the latest one from any thread
/// without waiting.
///
/// # Consistency
/// A snapshot is one instant: the transcript, the partial reply, the pending tool calls and
/// the flags always belong together (for example `is_streaming_reply` is true exactly when
/// `streaming_message` is `Some`, and `pending_tool_calls` lists exactly the calls that had a
/// `ToolStart` and no `ToolEnd`). The state a listener reads while handling an event already
/// includes that event.
///
/// # Polling
/// A UI thread that draws the state once a frame compares [`State::generation`] with the
/// one it drew to know whether anything changed, and a [`crate::Waker`] wakes it when the
/// state changes, so an idle UI draws nothing. What a UI shows is here, computed once by the
/// fold rather than by every UI: the retry being waited out with its start
/// ([`StreamEvent::retry_ends_at`]), each tool call's start and duration, the results of the
/// turn's tool calls beside their calls, each channel's dropped updates.
///
/// # Performance
/// Cloning is O(1) in the transcript: `messages`, the partial reply and the other
/// [`List`]s are persistent structures shared between snapshots.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct State {
    /// The system prompt.
    pub system_prompt: Arc<str>,
    /// The model of the next (or current) request.
    pub model: Arc<str>,
    /// The thinking level of the next (or current) request.
    pub thinking: ThinkingLevel,
    /// The tools the model may call.
    pub tools: Arc<[ToolDefinition]>,
    /// The transcript: every finished message, oldest first.
    pub messages: List<Arc<Message>>,
    /// True while a run is going on: from its `AgentStart` to its `AgentEnd`, that is for
    /// the whole of a [`crate::Agent::prompt`] or [`crate::Agent::continue_run`] (the
    /// meaning of the Go seed's `IsStreaming`). Tool calls, hooks and turns between replies
    /// all count; use `is_streaming_reply` for the reply alone.
    pub is_streaming: bool,
    /// True while an assistant reply streams: from its `MessageStart` to its `MessageEnd`,
    /// exactly when `streaming_message` is `Some`.
    pub is_streaming_reply: bool,
    /// The reply as far as it streamed, while `is_streaming_reply`.
    pub streaming_message: Option<PartialMessage>,
    /// Tool calls that started and have not ended, in start order, with their latest progress.
    pub pending_tool_calls: List<PendingToolCall>,
    /// Questions of running tool calls waiting for the user's answer (elicitation), in the
    /// order they were asked: from each one's `ElicitationStart` to its `ElicitationEnd`.
    /// What a UI shows as a form (or a link) to fill in; answer with
    /// [`crate::AgentHandle::answer_elicitation`].
    pub elicitations: List<PendingElicitation>,
    /// Results of the current turn's tool calls that already ended, in completion order.
    /// Readable as soon as a tool ends, before its result message is appended.
    pub tool_results: List<Arc<ToolResultMessage>>,
    /// The current turn's tool calls that ended, in completion order, each with its call,
    /// the arguments it ran with, its result and how long it took: `tool_results` with what
    /// a UI shows beside each result. Emptied when a turn starts.
    pub finished_tool_calls: List<FinishedToolCall>,
    /// What went wrong in the last run, if it failed; cleared when a run starts. Set as the
    /// failed reply ends, then to the message of the run's error by `AgentEnd`.
    pub error_message: Option<Arc<str>>,
    /// The kind of the last run's error, if it failed: set by `AgentEnd` (with the message
    /// in `error_message`), cleared when a run starts.
    pub error_kind: Option<ErrorKind>,
    /// The current turn of the run, from 1; 0 before the first turn.
    pub turn: u32,
    /// Why the last run ended; `None` while a run is active or before the first run.
    pub stop_reason: Option<RunStopReason>,
    /// Usage of the current (or last) run.
    pub run_usage: Usage,
    /// The latest structured answer of the current (or last) run, as checked against its
    /// [`OutputSchema`](crate::OutputSchema): its value, or what was wrong with it while a
    /// repair turn follows (see [`AgentEvent::OutputChecked`]). `None` in a run without a
    /// schema and until its first answer; cleared when a run starts.
    pub output: Option<Arc<OutputCheck>>,
    /// Usage summed over every run of this agent.
    pub usage: Usage,
    /// How full the model's context is: the tokens of what the next request sends, the
    /// window and the share (see [`ContextUsage`]). Set by each `TurnEnd` and
    /// `CompactionEnd`; after `MessagesReplaced`, the built-in estimate of the new transcript
    /// until the next turn ends.
    pub context: ContextUsage,
    /// True while a compaction runs: from its `CompactionStart` to its `CompactionEnd`.
    pub compacting: bool,
    /// The last retry of the current request (a [`StreamEvent::Retry`]), from the moment it
    /// is announced, while the agent waits, until the retried request's reply begins (its
    /// first delta) or the reply ends. Its `at` is when the wait began, and
    /// [`StreamEvent::retry_ends_at`] when it ends, for a countdown.
    pub retry: Option<StreamEvent>,
    /// Steering messages waiting for the next model call.
    pub steering_queue: List<Arc<Message>>,
    /// Follow-up messages waiting for the run to finish its current work.
    pub follow_up_queue: List<Arc<Message>>,
    /// How many listener calls panicked (the run went on each time).
    pub listener_panics: u64,
    /// The message of the last listener panic.
    pub last_listener_panic: Option<Arc<str>>,
    /// How many `MessageUpdate` and `ToolUpdate` events channel subscriptions under
    /// [`crate::ChannelPolicy::DropUpdates`] did not receive because their channel was full,
    /// all channels together (each channel's own count is in `channels`).
    pub updates_dropped: u64,
    /// The agent's channel subscriptions, in subscription order, each with its own count of
    /// dropped updates. A channel leaves the list when its listener is removed.
    pub channels: List<ChannelStats>,
    /// Changes with every published state: each event folded and each change outside
    /// events (queues, settings, counters). A poller that drew the state of one generation
    /// has nothing new to draw while it reads the same number.
    pub generation: u64,
}

/// What a channel subscription does when its channel is full.
///
/// See [`crate::Agent::subscribe_channel_with`] for the exact guarantees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChannelPolicy {
    /// Lossless: the run waits while the channel holds `capacity` events. An abort releases
    /// the wait: the few events the aborted run still emits go in beyond `capacity` (see
    /// [`crate::Agent::subscribe_channel`] for the bound), so the consumer receives every
    /// event of every run, in order, and the channel serves the next runs.
    #[default]
    Block,
    /// Never slows the run: while the channel holds `capacity` events or more, `MessageUpdate`
    /// and `ToolUpdate` events are dropped (counted in the channel's
    /// [`ChannelStats::updates_dropped`] and in `State::updates_dropped`); every other event
    /// is always delivered, beyond `capacity` if need be.
    DropUpdates,
}

/// One channel subscription of an agent, in [`State::channels`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelStats {
    /// The listener id ([`crate::Agent::subscribe_channel_with_id`] returns it).
    pub id: u64,
    /// The capacity it was made with.
    pub capacity: usize,
    /// Its policy.
    pub policy: ChannelPolicy,
    /// How many `MessageUpdate` and `ToolUpdate` events it did not receive because it was
    /// full (always 0 under [`ChannelPolicy::Block`]).
    pub updates_dropped: u64,
}

impl ChannelStats {
    pub(crate) fn new(id: u64, capacity: usize, policy: ChannelPolicy) -> ChannelStats {
        ChannelStats {
            id,
            capacity,
            policy,
            updates_dropped: 0,
        }
    }
}

/// A tool call of the current turn that ended, in [`State::finished_tool_calls`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct FinishedToolCall {
    /// The call, as the model made it.
    pub call: ToolCall,
    /// The arguments the tool ran with (see [`PendingToolCall::arguments`]); `None` for a
    /// call that did not run.
    pub arguments: Option<serde_json::Value>,
    /// True when `before_tool_call` rewrote `arguments`.
    pub rewritten: bool,
    /// The result the model sees.
    pub result: Arc<ToolResultMessage>,
    /// When the call started (its `ToolStart`).
    pub started_at: Option<SystemTime>,
    /// How long it took, from its `ToolStart` to its `ToolEnd`.
    pub duration: Option<Duration>,
}

/// A tool call between its `ToolStart` and `ToolEnd`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PendingToolCall {
    /// The call, as the model made it (its `arguments` are the model's raw JSON text).
    pub call: ToolCall,
    /// The arguments the tool runs with, once its `ToolExecute` came: the model's, parsed
    /// and validated, or those `before_tool_call` put in their place. `None` while the call
    /// is checked (validation, an approval hook waiting) and for a call that does not run.
    pub arguments: Option<serde_json::Value>,
    /// True when `before_tool_call` rewrote `arguments` (set with them).
    pub rewritten: bool,
    /// The latest progress the tool published.
    pub progress: Option<ToolOutput>,
    /// When the call started, from its `ToolStart` (the agent's clock); `None` when the
    /// event did not say (a wire line of another dialect). A UI shows how long it has been
    /// running with `SystemTime::now().duration_since(started_at)`.
    pub started_at: Option<SystemTime>,
}

impl State {
    /// The state after `event`. A pure function: the same events from the same state give the
    /// same state, which is how a wire mirror rebuilds the snapshots an agent published.
    ///
    /// # Performance
    /// O(size of the event): neither the transcript nor the partial reply is copied.
    #[must_use]
    pub fn apply(&self, event: &AgentEvent) -> State {
        let mut s = self.clone();
        s.fold(event);
        s
    }

    /// Folds `event` into this state in place: `s.fold(e)` leaves `s` equal to
    /// `s.apply(e)`. The agent uses it when no snapshot of the previous state is held
    /// anywhere, which saves the clone of every field (and dropping them again).
    pub(crate) fn fold(&mut self, event: &AgentEvent) {
        let s = self;
        s.generation += 1;
        match event {
            AgentEvent::AgentStart => {
                s.is_streaming = true;
                s.error_message = None;
                s.error_kind = None;
                s.stop_reason = None;
                s.turn = 0;
                s.run_usage = Usage::default();
                s.retry = None;
                s.output = None;
            }
            AgentEvent::TurnStart { turn } => {
                s.turn = *turn;
                s.tool_results = List::new();
                s.finished_tool_calls = List::new();
                // A turn after a failed reply: the run recovers from it (an overflow,
                // compacted and sent again), so the failure no longer describes the run.
                s.error_message = None;
            }
            AgentEvent::MessageStart { message } => {
                if let Message::Assistant(m) = &**message {
                    s.is_streaming_reply = true;
                    if !m.model.is_empty() && *s.model != *m.model {
                        s.model = Arc::from(m.model.as_str());
                    }
                    // Sharing the state's model, the reply's nearly always.
                    s.streaming_message = Some(PartialMessage::from_message_in(m, &s.model));
                }
            }
            AgentEvent::MessageUpdate { message, delta } => {
                // Onto the partial of the previous delta: only what changed is taken.
                match &mut s.streaming_message {
                    Some(p) => p.clone_from(message),
                    None => s.streaming_message = Some(message.clone()),
                }
                if let StreamEvent::Retry { .. } = delta {
                    s.retry = Some(delta.clone());
                } else if s.retry.is_some() {
                    // The retried request answers: the wait is over.
                    s.retry = None;
                }
            }
            AgentEvent::MessageEnd { message } => {
                s.messages.push_back(message.clone());
                if let Message::Assistant(m) = &**message {
                    s.is_streaming_reply = false;
                    s.streaming_message = None;
                    s.retry = None;
                    s.run_usage += m.usage;
                    s.usage += m.usage;
                    if matches!(m.stop_reason, StopReason::Error) {
                        s.error_message = m.error_message.as_deref().map(Arc::from);
                    }
                }
            }
            AgentEvent::ToolStart { call, at } => {
                s.pending_tool_calls.push_back(PendingToolCall {
                    call: call.clone(),
                    arguments: None,
                    rewritten: false,
                    progress: None,
                    started_at: *at,
                });
            }
            AgentEvent::ToolExecute {
                call_id,
                arguments,
                rewritten,
                ..
            } => {
                if let Some(i) = s.pending_index(call_id)
                    && let Some(p) = s.pending_tool_calls.get_mut(i)
                {
                    p.arguments = Some(arguments.clone());
                    p.rewritten = *rewritten;
                }
            }
            AgentEvent::ToolUpdate {
                call_id, partial, ..
            } => {
                if let Some(i) = s.pending_index(call_id)
                    && let Some(p) = s.pending_tool_calls.get_mut(i)
                {
                    p.progress = Some(partial.clone());
                }
            }
            AgentEvent::ElicitationStart {
                id,
                tool_call_id,
                request,
            } => s.elicitations.push_back(PendingElicitation {
                id: id.clone(),
                tool_call_id: tool_call_id.clone(),
                request: request.clone(),
            }),
            AgentEvent::ElicitationEnd { id, .. } => {
                if let Some(i) = s.elicitations.iter().position(|e| e.id == *id) {
                    s.elicitations.remove(i);
                }
            }
            AgentEvent::ToolEnd { result, duration } => {
                // A call's questions end before it does; a mirror that missed an end
                // forgets them with the call.
                if s.elicitations
                    .iter()
                    .any(|e| e.tool_call_id == result.tool_call_id)
                {
                    s.elicitations = s
                        .elicitations
                        .iter()
                        .filter(|e| e.tool_call_id != result.tool_call_id)
                        .cloned()
                        .collect();
                }
                let pending = s
                    .pending_index(&result.tool_call_id)
                    .map(|i| s.pending_tool_calls.remove(i));
                s.tool_results.push_back(result.clone());
                // A call whose start was not seen (a mirror that joined mid-run) keeps what
                // its result says of it.
                let (call, arguments, rewritten, started_at) = match pending {
                    Some(p) => (p.call, p.arguments, p.rewritten, p.started_at),
                    None => (
                        ToolCall {
                            id: result.tool_call_id.clone(),
                            name: result.tool_name.clone(),
                            arguments: String::new(),
                        },
                        None,
                        false,
                        None,
                    ),
                };
                s.finished_tool_calls.push_back(FinishedToolCall {
                    call,
                    arguments,
                    rewritten,
                    result: result.clone(),
                    started_at,
                    duration: *duration,
                });
            }
            AgentEvent::OutputChecked { check, .. } => s.output = Some(check.clone()),
            AgentEvent::TurnEnd { context, .. } => s.context = *context,
            AgentEvent::CompactionStart { .. } => s.compacting = true,
            AgentEvent::CompactionEnd { context, usage, .. } => {
                s.compacting = false;
                s.context = *context;
                s.run_usage += *usage;
                s.usage += *usage;
            }
            AgentEvent::MessagesReplaced { messages } => {
                s.messages = messages.iter().cloned().collect();
                s.context = crate::context::ledger::estimate_of(&s.messages, s.context.window);
                s.output = None;
                s.error_message = None;
                s.error_kind = None;
                s.stop_reason = None;
                s.turn = 0;
                s.run_usage = Usage::default();
                s.tool_results = List::new();
                s.finished_tool_calls = List::new();
            }
            AgentEvent::AgentEnd {
                stop_reason, error, ..
            } => {
                s.is_streaming = false;
                s.is_streaming_reply = false;
                s.compacting = false;
                s.streaming_message = None;
                s.pending_tool_calls = List::new();
                s.elicitations = List::new();
                s.retry = None;
                s.stop_reason = Some(*stop_reason);
                if let Some(e) = error {
                    s.error_message = Some(Arc::from(e.message.as_str()));
                    s.error_kind = Some(e.kind);
                }
            }
        }
    }

    fn pending_index(&self, call_id: &str) -> Option<usize> {
        self.pending_tool_calls
            .iter()
            .position(|p| p.call.id == call_id)
    }

    /// The last message of the transcript.
    pub fn last_message(&self) -> Option<&Arc<Message>> {
        self.messages.last()
    }

    /// The state with everything that does not come from events reset: the settings
    /// (`system_prompt`, `model`, `thinking`, `tools`), the queues, the listener-panic
    /// counters, the channels and their counters, and `generation` (which also counts the
    /// changes outside events). This is what the events alone determine, and so what a wire
    /// mirror can rebuild: compare `mirror.timeline() == agent_snapshot.timeline()`.
    #[must_use]
    pub fn timeline(&self) -> State {
        State {
            system_prompt: Arc::default(),
            model: Arc::default(),
            thinking: ThinkingLevel::default(),
            tools: Arc::default(),
            steering_queue: List::new(),
            follow_up_queue: List::new(),
            listener_panics: 0,
            last_listener_panic: None,
            updates_dropped: 0,
            channels: List::new(),
            generation: 0,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::AssistantMessage;

    fn assistant(text: &str) -> Arc<Message> {
        let mut p = PartialMessage::new("m");
        p.push(&StreamEvent::text(text));
        Arc::new(Message::Assistant(p.to_message(StopReason::Stop)))
    }

    #[test]
    fn a_streamed_reply_folds_into_the_transcript() {
        let start = Arc::new(Message::Assistant(AssistantMessage {
            model: "m".into(),
            ..Default::default()
        }));
        let mut s = State::default()
            .apply(&AgentEvent::AgentStart)
            .apply(&AgentEvent::TurnStart { turn: 1 })
            .apply(&AgentEvent::MessageStart { message: start });
        assert!(s.is_streaming_reply);
        assert_eq!(&*s.model, "m");
        let mut partial = s.streaming_message.clone().unwrap();
        for piece in ["Hel", "lo"] {
            let delta = StreamEvent::text(piece);
            partial = partial.apply(&delta);
            s = s.apply(&AgentEvent::MessageUpdate {
                message: partial.clone(),
                delta,
            });
        }
        assert_eq!(s.streaming_message.as_ref().unwrap().text(), "Hello");
        s = s.apply(&AgentEvent::MessageEnd {
            message: assistant("Hello"),
        });
        assert!(!s.is_streaming_reply && s.streaming_message.is_none());
        assert_eq!(s.messages.len(), 1);
        assert_eq!(s.messages[0].text(), "Hello");
    }

    #[test]
    fn tool_events_track_pending_calls() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
        };
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let s = State::default()
            .apply(&AgentEvent::ToolStart {
                call: call("a"),
                at: None,
            })
            .apply(&AgentEvent::ToolStart {
                call: call("b"),
                at: Some(at),
            })
            .apply(&AgentEvent::ToolExecute {
                call_id: "b".into(),
                tool_name: "t".into(),
                arguments: serde_json::json!({"x": 1}),
                rewritten: true,
            })
            .apply(&AgentEvent::ToolUpdate {
                call_id: "b".into(),
                tool_name: "t".into(),
                partial: ToolOutput::text("50%"),
            });
        assert_eq!(s.pending_tool_calls.len(), 2);
        assert_eq!(
            s.pending_tool_calls[1].progress.as_ref().unwrap().to_text(),
            "50%"
        );
        // The raw text stays as the model wrote it; the arguments the tool runs with sit
        // next to it once the call runs.
        assert_eq!(s.pending_tool_calls[1].call.arguments, "{}");
        assert_eq!(
            s.pending_tool_calls[1].arguments,
            Some(serde_json::json!({"x": 1}))
        );
        assert!(s.pending_tool_calls[1].rewritten);
        assert_eq!(s.pending_tool_calls[0].arguments, None);
        assert_eq!(s.pending_tool_calls[1].started_at, Some(at));
        let result = Arc::new(ToolResultMessage {
            tool_call_id: "b".into(),
            ..Default::default()
        });
        let s = s.apply(&AgentEvent::ToolEnd {
            result: result.clone(),
            duration: Some(Duration::from_millis(1_500)),
        });
        assert_eq!(s.pending_tool_calls.len(), 1);
        assert_eq!(s.pending_tool_calls[0].call.id, "a");
        assert_eq!(s.tool_results.len(), 1);
        // The result beside its call, with what the pending call knew and how long it took.
        assert_eq!(
            s.finished_tool_calls.to_vec(),
            [FinishedToolCall {
                call: call("b"),
                arguments: Some(serde_json::json!({"x": 1})),
                rewritten: true,
                result,
                started_at: Some(at),
                duration: Some(Duration::from_millis(1_500)),
            }]
        );
        let s = s.apply(&AgentEvent::TurnStart { turn: 2 });
        assert!(s.finished_tool_calls.is_empty() && s.tool_results.is_empty());
    }

    #[test]
    fn every_event_moves_the_generation_on() {
        let s = State::default();
        let s1 = s.apply(&AgentEvent::AgentStart);
        let s2 = s1.apply(&AgentEvent::TurnStart { turn: 1 });
        assert_eq!((s.generation, s1.generation, s2.generation), (0, 1, 2));
        // Pure: the same events give the same generation.
        assert_eq!(s.apply(&AgentEvent::AgentStart), s1);
    }

    #[test]
    fn a_retry_lasts_until_the_retried_reply_begins() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(50);
        let retry = StreamEvent::Retry {
            attempt: 1,
            delay_ms: 2_000,
            error: "http status 429".into(),
            at: Some(at),
        };
        let partial = PartialMessage::new("m");
        let s = State::default().apply(&AgentEvent::MessageUpdate {
            message: partial.clone(),
            delta: retry.clone(),
        });
        assert_eq!(s.retry, Some(retry));
        assert_eq!(
            s.retry.as_ref().and_then(StreamEvent::retry_ends_at),
            Some(at + Duration::from_secs(2))
        );
        let delta = StreamEvent::text("hi");
        let s = s.apply(&AgentEvent::MessageUpdate {
            message: partial.apply(&delta),
            delta,
        });
        assert_eq!(s.retry, None);
    }
}
