//! The transcript: messages, content blocks, tool calls, usage and the stop reason of one reply.
//!
//! Every type here is plain data with serde round-trips, so a transcript can be saved, sent over
//! the wire and loaded again without loss.

use serde::{Deserialize, Serialize};

/// One message of the transcript.
///
/// Serialized with a `role` tag: `{"role":"user",..}`, `{"role":"assistant",..}`,
/// `{"role":"tool_result",..}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// What the user (or the program on its behalf) said.
    User(UserMessage),
    /// One model reply.
    Assistant(AssistantMessage),
    /// The result of one tool call.
    ToolResult(ToolResultMessage),
}

impl Message {
    /// A user message with this text.
    pub fn user(text: impl Into<String>) -> Message {
        Message::User(UserMessage {
            content: text.into(),
        })
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

    /// The plain text of the message: the user's text, the assistant's text blocks joined, or
    /// the tool result's content.
    pub fn text(&self) -> String {
        match self {
            Message::User(m) => m.content.clone(),
            Message::Assistant(m) => m.text(),
            Message::ToolResult(m) => m.content.clone(),
        }
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

/// A user message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The text.
    pub content: String,
}

/// One model reply: text, thinking and tool calls in the order the model produced them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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

/// One block of an assistant reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
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

/// A tool call the model asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call; the result message refers to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the raw JSON text the model produced (possibly invalid JSON).
    pub arguments: String,
}

impl ToolCall {
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
pub struct ToolResultMessage {
    /// The id of the call this answers.
    pub tool_call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// The text the model sees.
    pub content: String,
    /// True when the call failed (unknown tool, invalid arguments, tool error or panic, blocked,
    /// skipped, cancelled).
    #[serde(default)]
    pub is_error: bool,
    /// Structured data for programs and UIs; not sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

/// Token counts of one reply, or summed over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
            content: "2".into(),
            is_error: true,
            details: Some(serde_json::json!({"k": [1, 2]})),
        }));
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
    fn empty_arguments_parse_as_empty_object() {
        let call = ToolCall::default();
        assert_eq!(call.parse_arguments().unwrap(), serde_json::json!({}));
    }
}
