//! Plain data shared by the layers: what a provider streams ([`StreamEvent`]), how hard the
//! model thinks ([`ThinkingLevel`]), a tool as the model sees it ([`ToolDefinition`]) and what a
//! tool returns ([`ToolOutput`]).
//!
//! They live here, with the messages, rather than beside the behaviour that produces them, so
//! that the data layer (`message`, `partial`, `event`, `state`) imports nothing that carries
//! behaviour. Each is re-exported from its public path (`pagent::llm::StreamEvent`,
//! `pagent::llm::ThinkingLevel`, `pagent::llm::ToolDefinition`, `pagent::tool::ToolOutput`).

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::content::{self, Part};
use crate::message::Usage;
use crate::tag::tagged_enum;

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

tagged_enum! {
    tag = "type", remote = "StreamEvent";
    /// One piece of a streaming reply.
    ///
    /// The same type is the `delta` of [`crate::AgentEvent::MessageUpdate`], so what a listener
    /// sees is exactly what the provider produced.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize)]
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
            /// When the wait began, on the provider's clock, in whole milliseconds: the retry
            /// is sent at [`StreamEvent::retry_ends_at`]. `None` from a provider that does not
            /// say. On the wire, milliseconds since the Unix epoch (`"at_ms"`), left out when
            /// `None`.
            #[serde(
                default,
                rename = "at_ms",
                skip_serializing_if = "Option::is_none",
                with = "unix_ms"
            )]
            at: Option<SystemTime>,
        },
    }
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

    /// A [`StreamEvent::Retry`] announced now: the wait of `delay` begins at this instant.
    pub fn retry(attempt: u32, delay: Duration, error: impl Into<String>) -> StreamEvent {
        StreamEvent::Retry {
            attempt,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            error: error.into(),
            at: Some(now_ms()),
        }
    }

    /// When the wait of a [`StreamEvent::Retry`] ends and the request is sent again: its
    /// `at` plus its delay. `None` for other events and for a retry without `at`.
    pub fn retry_ends_at(&self) -> Option<SystemTime> {
        match self {
            StreamEvent::Retry {
                delay_ms,
                at: Some(at),
                ..
            } => at.checked_add(Duration::from_millis(*delay_ms)),
            _ => None,
        }
    }

    /// The retry delay as a `Duration`, for [`StreamEvent::Retry`].
    pub fn retry_delay(&self) -> Option<Duration> {
        match self {
            StreamEvent::Retry { delay_ms, .. } => Some(Duration::from_millis(*delay_ms)),
            _ => None,
        }
    }
}

/// What a tool returns: what the model sees (text, images, documents) and optional structured
/// details for programs.
///
/// ```
/// use pagent::{Image, ToolOutput};
///
/// let screenshot: Vec<u8> = b"\x89PNG\r\n\x1a\n...".to_vec();
/// let output = ToolOutput::text("The screen now:").with_part(Image::new("image/png", screenshot));
/// assert_eq!(output.to_text(), "The screen now:");
/// assert_eq!(output.content.len(), 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolOutput {
    /// What the model sees: text, images, documents. Serialized as a string when it is one
    /// text part (`{"content":".."}`), else as the list of parts.
    #[serde(with = "content::parts")]
    pub content: Vec<Part>,
    /// Data for programs and UIs (not sent to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ToolOutput {
    /// Output with this text.
    pub fn text(content: impl Into<String>) -> ToolOutput {
        ToolOutput::from_parts([Part::text(content)])
    }

    /// Output of these parts.
    pub fn from_parts(parts: impl IntoIterator<Item = Part>) -> ToolOutput {
        ToolOutput {
            content: parts.into_iter().collect(),
            details: None,
        }
    }

    /// Output of one image (a screenshot, a chart).
    pub fn image(image: crate::content::Image) -> ToolOutput {
        ToolOutput::from_parts([Part::Image(image)])
    }

    /// The same output with `part` (an [`Image`](crate::Image), a
    /// [`Document`](crate::Document), text) added at the end.
    #[must_use]
    pub fn with_part(mut self, part: impl Into<Part>) -> ToolOutput {
        self.content.push(part.into());
        self
    }

    /// Adds structured details.
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> ToolOutput {
        self.details = Some(details);
        self
    }

    /// The text parts joined; images and documents left out.
    pub fn to_text(&self) -> String {
        content::joined_text(&self.content)
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

/// The time now, in whole milliseconds: what events carry, so that the wire (which writes
/// milliseconds) gives a mirror the very same instant.
pub(crate) fn now_ms() -> SystemTime {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(since.as_millis()).unwrap_or(0))
}

/// `duration` in whole microseconds: what events carry, for the same reason as [`now_ms`].
pub(crate) fn whole_micros(duration: Duration) -> Duration {
    Duration::from_micros(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
}

/// `Option<SystemTime>` as milliseconds since the Unix epoch, for the wire.
pub(crate) mod unix_ms {
    use std::time::{Duration, SystemTime};

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        at: &Option<SystemTime>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        // A time before 1970 is written as 0.
        let ms = at
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        s.serialize_u64(ms)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<SystemTime>, D::Error> {
        let ms = Option::<u64>::deserialize(d)?;
        Ok(ms.and_then(|ms| SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms))))
    }
}

/// `Option<Duration>` as whole microseconds, for the wire.
pub(crate) mod micros {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        let us = d.map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        s.serialize_u64(us)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_micros))
    }
}
