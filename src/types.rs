//! Plain data shared by the layers: what a provider streams ([`StreamEvent`]), how hard the
//! model thinks ([`ThinkingLevel`]), a tool as the model sees it ([`ToolDefinition`]) and what a
//! tool returns ([`ToolOutput`]).
//!
//! They live here, with the messages, rather than beside the behaviour that produces them, so
//! that the data layer (`message`, `partial`, `event`, `state`) imports nothing that carries
//! behaviour. Each is re-exported from its public path (`pagent::llm::StreamEvent`,
//! `pagent::llm::ThinkingLevel`, `pagent::llm::ToolDefinition`, `pagent::tool::ToolOutput`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::message::Usage;

/// A tool as the model sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

impl ToolDefinition {
    /// A tool named `name` described by `description`, whose arguments follow the JSON
    /// Schema `parameters`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: serde_json::Value,
    ) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// How much reasoning to ask for. Providers map it to their own knobs (`reasoning_effort`,
/// a thinking budget); `Off` sends nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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
#[non_exhaustive]
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

/// What a tool returns: text for the model and optional structured details for programs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolOutput {
    /// The text the model sees.
    pub content: String,
    /// Data for programs and UIs (not sent to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ToolOutput {
    /// Output with this text.
    pub fn text(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            details: None,
        }
    }

    /// Adds structured details.
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> ToolOutput {
        self.details = Some(details);
        self
    }
}

impl From<String> for ToolOutput {
    fn from(s: String) -> ToolOutput {
        ToolOutput::text(s)
    }
}

impl From<&str> for ToolOutput {
    fn from(s: &str) -> ToolOutput {
        ToolOutput::text(s)
    }
}
