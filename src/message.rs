//! The transcript: messages, content blocks, tool calls, usage and the stop reason of one reply.
//!
//! Every type here is plain data with serde round-trips, so a transcript can be saved, sent over
//! the wire and loaded again without loss.

use serde::{Deserialize, Serialize};

use crate::content::{self, Part};
use crate::context::Summary;
use crate::tag::tagged_enum;

tagged_enum! {
    tag = "role", remote = "Message";
    /// One message of the transcript.
    ///
    /// Serialized with a `role` tag: `{"role":"user",..}`, `{"role":"assistant",..}`,
    /// `{"role":"tool_result",..}`.
    #[derive(Clone, Debug, PartialEq, Serialize)]
    #[non_exhaustive]
    pub enum Message {
        /// What the user (or the program on its behalf) said.
        User(UserMessage),
        /// One model reply.
        Assistant(AssistantMessage),
        /// The result of one tool call.
        ToolResult(ToolResultMessage),
    }
}

impl Message {
    /// A user message with this text.
    pub fn user(text: impl Into<String>) -> Message {
        Message::User(UserMessage::new(text))
    }

    /// The assistant reply, if this is one.
    pub fn as_assistant(&self) -> Option<&AssistantMessage> {
        match self {
            Message::Assistant(m) => Some(m),
            _ => None,
        }
    }

    /// The tool result, if this is one.
    pub fn as_tool_result(&self) -> Option<&ToolResultMessage> {
        match self {
            Message::ToolResult(m) => Some(m),
            _ => None,
        }
    }

    /// The message's role as written on the wire: `user`, `assistant` or `tool_result`.
    pub fn role(&self) -> &'static str {
        match self {
            Message::User(_) => "user",
            Message::Assistant(_) => "assistant",
            Message::ToolResult(_) => "tool_result",
        }
    }

    /// The plain text of the message: the text parts of a user message or a tool result
    /// joined (its images and documents left out), or the assistant's text blocks joined.
    pub fn text(&self) -> String {
        match self {
            Message::User(m) => m.text(),
            Message::Assistant(m) => m.text(),
            Message::ToolResult(m) => m.text(),
        }
    }

    /// The parts of a user message or a tool result (text, images, documents); empty for an
    /// assistant reply, whose content is [`AssistantMessage::content`].
    pub fn parts(&self) -> &[Part] {
        match self {
            Message::User(m) => &m.content,
            Message::ToolResult(m) => &m.content,
            Message::Assistant(_) => &[],
        }
    }
}

impl From<UserMessage> for Message {
    fn from(message: UserMessage) -> Message {
        Message::User(message)
    }
}

impl From<&str> for Message {
    fn from(text: &str) -> Message {
        Message::user(text)
    }
}

impl From<String> for Message {
    fn from(text: String) -> Message {
        Message::user(text)
    }
}

/// A user message (also what steering and follow-ups send): text, images and documents.
/// Build one with [`Message::user`] or [`UserMessage::new`], and add images and documents with
/// [`UserMessage::with_part`].
///
/// Serialized as `{"content":"the text"}` when it is one text part, else with the list of
/// parts (see [`Part`]).
///
/// ```
/// use pagent::{Document, Image, Message, Part, UserMessage};
///
/// let message = UserMessage::new("Compare the chart with the report.")
///     .with_part(Image::url("https://example.com/chart.png"))
///     .with_part(Document::pdf(b"%PDF-1.7 ...".to_vec()).with_name("report.pdf"));
/// assert_eq!(message.content.len(), 3);
/// assert_eq!(message.text(), "Compare the chart with the report.");
/// let message = Message::from(message);
/// assert!(matches!(message.parts()[1], Part::Image(_)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct UserMessage {
    /// The parts, in order: text, images, documents.
    #[serde(with = "content::parts")]
    pub content: Vec<Part>,
    /// Set on the summary a compaction wrote: the message then stands for the first messages
    /// of the transcript in what is sent to the model (see [`Summary`]). `None` for
    /// everything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
}

impl UserMessage {
    /// A user message with this text: one text part.
    pub fn new(text: impl Into<String>) -> UserMessage {
        UserMessage {
            content: vec![Part::text(text)],
            summary: None,
        }
    }

    /// A user message of these parts.
    pub fn from_parts(parts: impl IntoIterator<Item = Part>) -> UserMessage {
        UserMessage {
            content: parts.into_iter().collect(),
            summary: None,
        }
    }

    /// The same message with `part` (an [`Image`](crate::Image), a
    /// [`Document`](crate::Document), text) added at the end.
    #[must_use]
    pub fn with_part(mut self, part: impl Into<Part>) -> UserMessage {
        self.content.push(part.into());
        self
    }

    /// The text parts joined; images and documents left out.
    pub fn text(&self) -> String {
        content::joined_text(&self.content)
    }
}

/// One model reply: text, thinking and tool calls in the order the model produced them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AssistantMessage {
    /// The content blocks in the order they were streamed.
    pub content: Vec<ContentBlock>,
    /// Why the reply ended.
    pub stop_reason: StopReason,
    /// Token usage the provider reported for this reply.
    #[serde(default)]
    pub usage: Usage,
    /// The model that produced the reply: the one the server reported, else the one asked
    /// for.
    #[serde(default)]
    pub model: String,
    /// The server's id of the response (`chatcmpl-...`, `msg_...`), when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// What went wrong, when `stop_reason` is [`StopReason::Error`] or [`StopReason::Aborted`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

impl AssistantMessage {
    /// A reply with these blocks that ended with `stop_reason`; no usage, model, id or error
    /// (add them with the `with_` methods).
    ///
    /// ```
    /// use pagent::{AssistantMessage, ContentBlock, StopReason, Usage};
    ///
    /// let reply = AssistantMessage::new(vec![ContentBlock::text("hi")], StopReason::Stop)
    ///     .with_model("m")
    ///     .with_usage(Usage::new(10, 2));
    /// assert_eq!((reply.text().as_str(), reply.usage.output), ("hi", 2));
    /// ```
    pub fn new(content: Vec<ContentBlock>, stop_reason: StopReason) -> AssistantMessage {
        AssistantMessage {
            content,
            stop_reason,
            ..AssistantMessage::default()
        }
    }

    /// The same reply with this usage.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> AssistantMessage {
        self.usage = usage;
        self
    }

    /// The same reply, produced by this model.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> AssistantMessage {
        self.model = model.into();
        self
    }

    /// The same reply with the server's response id.
    #[must_use]
    pub fn with_response_id(mut self, id: impl Into<String>) -> AssistantMessage {
        self.response_id = Some(id.into());
        self
    }

    /// The same reply with what went wrong (for [`StopReason::Error`] or
    /// [`StopReason::Aborted`]).
    #[must_use]
    pub fn with_error_message(mut self, message: impl Into<String>) -> AssistantMessage {
        self.error_message = Some(message.into());
        self
    }

    /// The text blocks joined, without thinking.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The thinking (reasoning) blocks joined.
    pub fn thinking(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The tool calls in call order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolCall(call) => Some(call),
            _ => None,
        })
    }

    /// True when the reply has no text, no thinking and no tool call.
    pub fn is_empty(&self) -> bool {
        self.content.iter().all(|b| match b {
            ContentBlock::Text { text } => text.is_empty(),
            ContentBlock::Thinking { thinking, .. } => thinking.is_empty(),
            ContentBlock::ToolCall(_) => false,
        })
    }
}

tagged_enum! {
    tag = "type", remote = "ContentBlock";
    /// One block of an assistant reply.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize)]
    #[non_exhaustive]
    pub enum ContentBlock {
        /// Visible text.
        Text {
            /// The text.
            text: String,
        },
        /// Reasoning the model shows before it answers.
        Thinking {
            /// The reasoning text.
            thinking: String,
            /// An opaque signature some providers (Anthropic) require back in the next request.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            signature: Option<String>,
        },
        /// A request to run a tool.
        ToolCall(ToolCall),
    }
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text { text: text.into() }
    }

    /// A thinking block without a signature.
    pub fn thinking(thinking: impl Into<String>) -> ContentBlock {
        ContentBlock::Thinking {
            thinking: thinking.into(),
            signature: None,
        }
    }
}

/// A tool call the model asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCall {
    /// The provider's id for the call; the result message refers to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the raw JSON text the model produced (possibly invalid JSON).
    pub arguments: String,
}

impl ToolCall {
    /// A call of tool `name` with id `id` and the raw JSON argument text `arguments`.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The arguments parsed as JSON. An empty string counts as `{}`.
    ///
    /// # Errors
    /// When the model's text is not valid JSON: the parser's message, such as "EOF while
    /// parsing a value at line 1 column 8".
    pub fn parse_arguments(&self) -> Result<serde_json::Value, String> {
        if self.arguments.trim().is_empty() {
            return Ok(serde_json::Value::Object(Default::default()));
        }
        serde_json::from_str(&self.arguments).map_err(|e| e.to_string())
    }
}

/// The result of one tool call, sent back to the model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolResultMessage {
    /// The id of the call this answers.
    pub tool_call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// What the model sees: text, images, documents. Serialized as a string when it is one
    /// text part, as [`UserMessage::content`] is.
    #[serde(with = "content::parts")]
    pub content: Vec<Part>,
    /// True when the call failed (unknown tool, invalid arguments, tool error or panic, blocked,
    /// skipped, cancelled).
    #[serde(default)]
    pub is_error: bool,
    /// Structured data for programs and UIs; not sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ToolResultMessage {
    /// A successful result of the call `tool_call_id` to `tool_name`, with the text the model
    /// sees and no details.
    ///
    /// An `after_tool_call` hook usually changes the result it gets instead:
    /// `result.with_content("...")`.
    pub fn new(
        tool_call_id: impl Into<String>,
        tool_name: impl Into<String>,
        content: impl Into<String>,
    ) -> ToolResultMessage {
        ToolResultMessage {
            tool_call_id: tool_call_id.into(),
            tool_name: tool_name.into(),
            content: vec![Part::text(content)],
            is_error: false,
            details: None,
        }
    }

    /// A failed result (`is_error` set) of the call `tool_call_id` to `tool_name`.
    pub fn error(
        tool_call_id: impl Into<String>,
        tool_name: impl Into<String>,
        content: impl Into<String>,
    ) -> ToolResultMessage {
        ToolResultMessage::new(tool_call_id, tool_name, content).with_is_error(true)
    }

    /// The same result with this text for the model, in place of its content (images and
    /// documents included).
    #[must_use]
    pub fn with_content(mut self, content: impl Into<String>) -> ToolResultMessage {
        self.content = vec![Part::text(content)];
        self
    }

    /// The same result with these parts for the model, in place of its content.
    #[must_use]
    pub fn with_parts(mut self, parts: impl IntoIterator<Item = Part>) -> ToolResultMessage {
        self.content = parts.into_iter().collect();
        self
    }

    /// The text parts joined; images and documents left out.
    pub fn text(&self) -> String {
        content::joined_text(&self.content)
    }

    /// The same result, marked failed (`true`) or not.
    #[must_use]
    pub fn with_is_error(mut self, is_error: bool) -> ToolResultMessage {
        self.is_error = is_error;
        self
    }

    /// The same result with these details (for programs; not sent to the model).
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> ToolResultMessage {
        self.details = Some(details);
        self
    }
}

/// Token counts of one reply, or summed over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Prompt tokens, including cached ones where the provider counts them so.
    #[serde(default)]
    pub input: u64,
    /// Generated tokens, reasoning included.
    #[serde(default)]
    pub output: u64,
    /// Prompt tokens read from the provider's cache.
    #[serde(default)]
    pub cache_read: u64,
    /// Prompt tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write: u64,
    /// Generated tokens spent on reasoning.
    #[serde(default)]
    pub reasoning: u64,
    /// All tokens as the provider counts them.
    #[serde(default)]
    pub total: u64,
}

impl Usage {
    /// `input` prompt tokens and `output` generated tokens, `total` their sum, the other
    /// counts 0 (add them with the `with_` methods).
    pub fn new(input: u64, output: u64) -> Usage {
        Usage {
            input,
            output,
            total: input.saturating_add(output),
            ..Usage::default()
        }
    }

    /// The same usage with these cache counts: tokens read from and written to the
    /// provider's prompt cache.
    #[must_use]
    pub fn with_cache(mut self, read: u64, write: u64) -> Usage {
        self.cache_read = read;
        self.cache_write = write;
        self
    }

    /// The same usage with this many reasoning tokens (part of `output`).
    #[must_use]
    pub fn with_reasoning(mut self, reasoning: u64) -> Usage {
        self.reasoning = reasoning;
        self
    }

    /// The same usage with this total, as the provider counts it.
    #[must_use]
    pub fn with_total(mut self, total: u64) -> Usage {
        self.total = total;
        self
    }
}

impl std::ops::Add for Usage {
    type Output = Usage;

    /// The field-wise sum, saturating: counts come from servers and must not overflow.
    fn add(self, other: Usage) -> Usage {
        Usage {
            input: self.input.saturating_add(other.input),
            output: self.output.saturating_add(other.output),
            cache_read: self.cache_read.saturating_add(other.cache_read),
            cache_write: self.cache_write.saturating_add(other.cache_write),
            reasoning: self.reasoning.saturating_add(other.reasoning),
            total: self.total.saturating_add(other.total),
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        *self = *self + other;
    }
}

/// Why one model reply ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model finished its answer.
    #[default]
    Stop,
    /// The reply was cut at the output token limit.
    Length,
    /// The model stopped to have tools run.
    ToolUse,
    /// The provider failed; `error_message` says how. What was streamed before is kept.
    Error,
    /// The run was aborted while the reply streamed. What was streamed before is kept.
    Aborted,
}

impl StopReason {
    /// The snake_case name, as messages serialize it (`"tool_use"`).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Stop => "stop",
            StopReason::Length => "length",
            StopReason::ToolUse => "tool_use",
            StopReason::Error => "error",
            StopReason::Aborted => "aborted",
        }
    }
}

impl std::fmt::Display for StopReason {
    /// The name ([`StopReason::as_str`]), as [`RunStopReason`](crate::RunStopReason) shows
    /// its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: &Message) {
        let json = serde_json::to_string(m).unwrap();
        let back: Message = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, m, "{json}");
    }

    #[test]
    fn every_message_kind_round_trips() {
        round_trip(&Message::user("hi"));
        round_trip(&Message::Assistant(AssistantMessage {
            content: vec![
                ContentBlock::Thinking {
                    thinking: "hmm".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::Text { text: "a".into() },
                ContentBlock::ToolCall(ToolCall {
                    id: "c1".into(),
                    name: "calc".into(),
                    arguments: "{\"x\":1".into(),
                }),
            ],
            stop_reason: StopReason::Length,
            usage: Usage {
                input: 1,
                output: 2,
                cache_read: 3,
                cache_write: 4,
                reasoning: 5,
                total: 6,
            },
            model: "m".into(),
            response_id: Some("r1".into()),
            error_message: Some("boom".into()),
        }));
        round_trip(&Message::ToolResult(ToolResultMessage {
            tool_call_id: "c1".into(),
            tool_name: "calc".into(),
            content: vec![Part::text("2")],
            is_error: true,
            details: Some(serde_json::json!({"k": [1, 2]})),
        }));
        round_trip(&Message::from(
            UserMessage::new("look")
                .with_part(crate::Image::new("image/png", vec![1u8, 2, 3]))
                .with_part(crate::Document::url("https://example.com/a.pdf")),
        ));
        round_trip(&Message::ToolResult(
            ToolResultMessage::new("c2", "shot", "the screen").with_parts([
                Part::text("the screen"),
                crate::Image::new("image/jpeg", vec![0xFFu8, 0xD8, 0xFF]).into(),
            ]),
        ));
        round_trip(&Message::from(UserMessage::from_parts([])));
        for reason in [
            StopReason::Stop,
            StopReason::Length,
            StopReason::ToolUse,
            StopReason::Error,
            StopReason::Aborted,
        ] {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(serde_json::from_str::<StopReason>(&json).unwrap(), reason);
        }
    }

    #[test]
    fn message_json_is_tagged_by_role() {
        let json = serde_json::to_value(Message::user("hi")).unwrap();
        assert_eq!(json, serde_json::json!({"role": "user", "content": "hi"}));
    }

    #[test]
    fn text_leaves_images_out_and_joins_the_text_parts() {
        let m = Message::from(
            UserMessage::new("a")
                .with_part(crate::Image::url("https://example.com/x.png"))
                .with_part("b"),
        );
        assert_eq!(m.text(), "ab");
        assert_eq!(m.parts().len(), 3);
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(
            json["content"][1]["source"]["url"],
            "https://example.com/x.png"
        );
    }

    #[test]
    fn empty_arguments_parse_as_empty_object() {
        let call = ToolCall::default();
        assert_eq!(call.parse_arguments().unwrap(), serde_json::json!({}));
    }
}
