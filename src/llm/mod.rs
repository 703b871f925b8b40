//! Model providers: the blocking, streaming [`Provider`] trait and its request and stream types.
//!
//! A provider turns one [`Request`] into a sequence of [`StreamEvent`]s, handed to a callback
//! as they arrive, and a final [`AssistantMessage`]. It runs on the agent's run thread and
//! blocks it until the reply is complete, failed, or cancelled through the [`CancelToken`].
//!
//! This layer knows nothing of agents: it imports only the message types.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Error;
pub use crate::cancel::CancelToken;
use crate::message::{AssistantMessage, Message, Usage};

mod faux;

pub use faux::{Faux, FauxReply};

/// What one model call gets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    /// The system prompt; empty for none.
    pub system_prompt: String,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    pub tools: Vec<ToolDefinition>,
    /// The model id, as the provider names it.
    pub model: String,
    /// How hard the model should think, where it can.
    pub thinking: ThinkingLevel,
}

/// A tool as the model sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// How much reasoning to ask for. Providers map it to their own knobs (`reasoning_effort`,
/// a thinking budget); `Off` sends nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingLevel {
    /// No reasoning requested.
    #[default]
    Off,
    /// The least reasoning the provider offers.
    Minimal,
    /// Some reasoning.
    Low,
    /// More reasoning.
    Medium,
    /// The most reasoning.
    High,
}

/// One piece of a streaming reply.
///
/// The same type is the `delta` of [`crate::AgentEvent::MessageUpdate`], so what a listener
/// sees is exactly what the provider produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Visible text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// Reasoning text.
    ThinkingDelta {
        /// The new reasoning text.
        text: String,
    },
    /// The signature of the reasoning block (Anthropic), to send back in the next request.
    ThinkingSignature {
        /// The opaque signature.
        signature: String,
    },
    /// A tool call begins; its arguments follow as [`StreamEvent::ToolCallDelta`]s.
    ToolCallStart {
        /// The provider's call id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// A fragment of a tool call's JSON arguments.
    ToolCallDelta {
        /// Which call of this reply, counting [`StreamEvent::ToolCallStart`]s from 0.
        index: usize,
        /// The next piece of the raw argument text.
        arguments: String,
    },
    /// Token usage so far (each report replaces the previous one).
    Usage {
        /// The counts.
        usage: Usage,
    },
    /// The request failed with a transient error and will be sent again after `delay_ms`.
    /// Nothing of the reply had arrived.
    Retry {
        /// 1 for the first retry.
        attempt: u32,
        /// How long the provider waits before it tries again.
        delay_ms: u64,
        /// What failed.
        error: String,
    },
}

impl StreamEvent {
    /// A text delta.
    pub fn text(text: impl Into<String>) -> StreamEvent {
        StreamEvent::TextDelta { text: text.into() }
    }

    /// A reasoning delta.
    pub fn thinking(text: impl Into<String>) -> StreamEvent {
        StreamEvent::ThinkingDelta { text: text.into() }
    }

    /// The retry delay as a `Duration`, for [`StreamEvent::Retry`].
    pub fn retry_delay(&self) -> Option<Duration> {
        match self {
            StreamEvent::Retry { delay_ms, .. } => Some(Duration::from_millis(*delay_ms)),
            _ => None,
        }
    }
}

/// A model server: blocking and streaming.
///
/// # Contract
/// - `stream` is called on the agent's run thread and blocks it until the reply ends.
/// - It calls `on_event` for each piece as it arrives, in order, on the calling thread.
/// - It returns the final message: the same content the events built, with the stop reason
///   and usage. On error it returns `Err`; the agent keeps what the events delivered so far as
///   the partial reply, so a provider need not assemble it again.
/// - It checks `cancel` while it waits on the network or sleeps before a retry, and returns
///   `Err(Error::Aborted)` promptly once it is cancelled.
/// - A panic inside it is caught by the agent and ends the run with an error.
pub trait Provider: Send + Sync {
    /// Streams the reply to `request`.
    ///
    /// # Errors
    /// [`Error::Aborted`] once `cancel` is cancelled; HTTP, timeout, connection and stream
    /// errors as they happen; whatever the provider's own protocol reports.
    fn stream(
        &self,
        request: &Request,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<AssistantMessage, Error>;

    /// A short name for logs and `Debug` (`"openai"`, `"anthropic"`, `"faux"`).
    fn name(&self) -> &str {
        "provider"
    }
}

impl<P: Provider + ?Sized> Provider for std::sync::Arc<P> {
    fn stream(
        &self,
        request: &Request,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<AssistantMessage, Error> {
        (**self).stream(request, cancel, on_event)
    }

    fn name(&self) -> &str {
        (**self).name()
    }
}
