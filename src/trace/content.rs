//! The opt-in contents of the spans, as JSON text in the conventions' message format
//! (`gen-ai-input-messages.json`, `gen-ai-output-messages.json`,
//! `gen-ai-system-instructions.json`): messages of a role and a list of parts.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::content::{Part, Source};
use crate::message::{AssistantMessage, ContentBlock, Message, StopReason};

/// `gen_ai.input.messages` of a model call: the messages it sent.
pub(super) fn input(messages: &[Arc<Message>]) -> String {
    Value::Array(messages.iter().map(|m| message(m)).collect()).to_string()
}

/// `gen_ai.input.messages` of a run: the messages it was given, those it appended before
/// its first reply.
pub(super) fn run_input(appended: &[Arc<Message>]) -> String {
    let given = appended
        .iter()
        .take_while(|m| m.as_assistant().is_none())
        .map(|m| message(m));
    Value::Array(given.collect()).to_string()
}

/// `gen_ai.output.messages`: the reply, with its finish reason.
pub(super) fn output(reply: &AssistantMessage) -> String {
    json!([{
        "role": "assistant",
        "parts": assistant_parts(reply),
        "finish_reason": finish_reason(reply.stop_reason),
    }])
    .to_string()
}

/// A reply's finish reason, in the names of the conventions' `FinishReason` (and
/// `aborted` for a reply an abort cut).
pub(super) fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::Stop => "stop",
        StopReason::Length => "length",
        StopReason::ToolUse => "tool_call",
        StopReason::Error => "error",
        StopReason::Aborted => "aborted",
    }
}

/// `gen_ai.system_instructions`: the system prompt as one text part.
pub(super) fn system(prompt: &str) -> String {
    json!([{"type": "text", "content": prompt}]).to_string()
}

fn message(m: &Message) -> Value {
    match m {
        Message::Assistant(reply) => json!({"role": "assistant", "parts": assistant_parts(reply)}),
        // The conventions' `response` is any value: the text, or the parts when the
        // result holds more than text.
        Message::ToolResult(result) => json!({
            "role": "tool",
            "parts": [{
                "type": "tool_call_response",
                "id": result.tool_call_id,
                "response": if result.content.iter().all(|p| p.as_text().is_some()) {
                    Value::String(m.text())
                } else {
                    Value::Array(parts(&result.content))
                },
            }],
        }),
        Message::User(user) => json!({"role": "user", "parts": parts(&user.content)}),
    }
}

/// Parts of a user message or a tool result: text as `text`, inline bytes as a `blob`
/// (base64, whole), a URL as a `uri`, with the conventions' modality and the media type.
fn parts(parts: &[Part]) -> Vec<Value> {
    parts
        .iter()
        .map(|part| {
            let (modality, source) = match part {
                Part::Text { text } => return json!({"type": "text", "content": text}),
                Part::Image(image) => ("image", &image.source),
                Part::Document(document) => ("document", &document.source),
                Part::Audio(audio) => ("audio", &audio.source),
            };
            match source {
                Source::Inline { media_type, data } => json!({
                    "type": "blob",
                    "modality": modality,
                    "mime_type": media_type,
                    "content": data.base64().to_string(),
                }),
                Source::Url { url } => json!({"type": "uri", "modality": modality, "uri": url}),
            }
        })
        .collect()
}

fn assistant_parts(reply: &AssistantMessage) -> Vec<Value> {
    reply
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => json!({"type": "text", "content": text}),
            // The signature is opaque, for the provider only.
            ContentBlock::Thinking { thinking, .. } => {
                json!({"type": "reasoning", "content": thinking})
            }
            // The arguments as the object they are, or as the text the model wrote when it
            // is not JSON.
            ContentBlock::ToolCall(call) => json!({
                "type": "tool_call",
                "id": call.id,
                "name": call.name,
                "arguments": serde_json::from_str::<Value>(&call.arguments)
                    .unwrap_or_else(|_| Value::String(call.arguments.clone())),
            }),
        })
        .collect()
}
