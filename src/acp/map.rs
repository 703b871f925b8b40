//! The protocol's shapes for the subset pagent serves, and the mapping from our events,
//! messages and run outcomes to them. Pure: nothing here reads or writes a stream.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ToolKind, codes};
use crate::content::{Blob, Part, Source};
use crate::event::{AgentEvent, RunStopReason};
use crate::message::{ContentBlock, Message, StopReason as ReplyStop, ToolCall, ToolResultMessage};
use crate::types::StreamEvent;
use crate::{Error, RunError, RunResult};

/// A request that cannot be served: its error code and message.
pub(crate) type Refusal = (i64, String);

/// One `session/update`'s `update` object, tagged by `sessionUpdate`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
// The variants are named as the protocol names the updates (`usage_update`, ...).
#[allow(clippy::enum_variant_names)]
pub(crate) enum Update {
    UserMessageChunk {
        content: Content,
        #[serde(rename = "messageId", skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },
    AgentMessageChunk {
        content: Content,
        #[serde(rename = "messageId", skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },
    AgentThoughtChunk {
        content: Content,
        #[serde(rename = "messageId", skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },
    ToolCall(ToolCallStart),
    ToolCallUpdate(ToolCallUpdate),
    Plan {
        entries: Vec<PlanEntry>,
    },
    /// The context's use after a reply, and the session's cost so far.
    UsageUpdate {
        used: u64,
        size: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        cost: Option<Cost>,
    },
    SessionInfoUpdate {
        title: Option<String>,
        #[serde(rename = "updatedAt")]
        updated_at: String,
    },
    AvailableCommandsUpdate {
        #[serde(rename = "availableCommands")]
        available_commands: Vec<Value>,
    },
    CurrentModeUpdate {
        #[serde(rename = "currentModeId")]
        current_mode_id: Value,
    },
    ConfigOptionUpdate {
        #[serde(rename = "configOptions")]
        config_options: Vec<Value>,
    },
    /// A compaction of the context, to a client that advertised `session.compaction`: its
    /// start (`in_progress`), then its end with the summary, or `failed` with the error.
    CompactionUpdate {
        #[serde(rename = "compactionId")]
        compaction_id: String,
        status: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        summary: Option<Vec<Content>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

/// A session's cost (`usage_update`'s `cost`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Cost {
    pub(crate) amount: f64,
    pub(crate) currency: String,
}

impl Update {
    /// The update with `locations` on a `tool_call` (other updates have none).
    pub(crate) fn with_locations(mut self, locations: Option<Vec<Location>>) -> Update {
        if let Update::ToolCall(call) = &mut self {
            call.locations = locations;
        }
        self
    }

    /// The update with `id` as the `messageId` of a chunk (other updates have none).
    pub(crate) fn in_message(mut self, id: &str) -> Update {
        if let Update::UserMessageChunk { message_id, .. }
        | Update::AgentMessageChunk { message_id, .. }
        | Update::AgentThoughtChunk { message_id, .. } = &mut self
        {
            *message_id = Some(id.to_owned());
        }
        self
    }
}

/// A chunk's `messageId`: the message's place in the transcript (`m0` the first message),
/// unique in the session however often it is resumed.
pub(crate) fn message_id(index: usize) -> String {
    format!("m{index}")
}

/// A content block the agent sends: the text of replies, and the parts of prompts and tool
/// results (images, audio, documents as embedded resources, URLs as links).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Content {
    Text {
        text: String,
    },
    Image {
        data: Blob,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    Audio {
        data: Blob,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    Resource {
        resource: EmbeddedBlob,
    },
    ResourceLink {
        uri: String,
        name: String,
    },
}

/// The `resource` of an embedded binary resource.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EmbeddedBlob {
    uri: String,
    mime_type: String,
    blob: Blob,
}

fn text(s: impl Into<String>) -> Content {
    Content::Text { text: s.into() }
}

/// A part as a content block: its bytes shared, written as base64 when the update is.
fn part_content(part: &Part) -> Content {
    let (kind, source, name) = match part {
        Part::Image(i) => ("image", &i.source, None),
        Part::Audio(a) => ("audio", &a.source, None),
        Part::Document(d) => ("document", &d.source, d.name.as_deref()),
        part => return text(part.as_text().unwrap_or_default()),
    };
    match (kind, source) {
        (_, Source::Url { url }) => Content::ResourceLink {
            uri: url.clone(),
            name: name.unwrap_or(url).to_owned(),
        },
        ("image", Source::Inline { media_type, data }) => Content::Image {
            data: data.clone(),
            mime_type: media_type.clone(),
        },
        ("audio", Source::Inline { media_type, data }) => Content::Audio {
            data: data.clone(),
            mime_type: media_type.clone(),
        },
        (_, Source::Inline { media_type, data }) => Content::Resource {
            resource: EmbeddedBlob {
                uri: format!("pagent:document/{}", name.unwrap_or("document")),
                mime_type: media_type.clone(),
                blob: data.clone(),
            },
        },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ToolStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
}

/// The `tool_call` update: a call the client has not seen yet.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolCallStart {
    pub(crate) tool_call_id: String,
    pub(crate) title: String,
    pub(crate) kind: ToolKind,
    pub(crate) status: ToolStatus,
    /// The arguments as parsed JSON, or the raw text when they are not JSON.
    pub(crate) raw_input: Value,
    /// The files the call works on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) locations: Option<Vec<Location>>,
}

/// A file a tool call works on (and the line), for the client to follow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Location {
    pub(crate) path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) line: Option<u64>,
}

/// The `tool_call_update` update, and the `toolCall` of a permission request: only the fields
/// that changed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolCallUpdate {
    pub(crate) tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<ToolStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<ToolKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) content: Option<Vec<ToolContent>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) locations: Option<Vec<Location>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) raw_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) raw_output: Option<Value>,
}

/// What a tool call shows: its output's parts, and what its details embed (a diff, a
/// terminal of the client).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ToolContent {
    Content {
        content: Content,
    },
    Diff {
        path: String,
        #[serde(rename = "oldText")]
        old_text: Option<String>,
        #[serde(rename = "newText")]
        new_text: String,
    },
    Terminal {
        #[serde(rename = "terminalId")]
        terminal_id: String,
    },
}

/// The `diff` a tool's details may carry (see [`embedded`]).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiffDetails {
    path: String,
    #[serde(default)]
    old_text: Option<String>,
    new_text: String,
}

/// What a tool's details embed in its call, before its text: `{"terminalId": ".."}` the
/// client's terminal, `{"diff": {"path", "oldText", "newText"}}` a diff (the client's file
/// tools write them, and any tool of the agent's own may), and where it works:
/// `{"locations": [{"path", "line"}]}`. Malformed ones are left out.
fn embedded(details: Option<&Value>) -> (Vec<ToolContent>, Option<Vec<Location>>) {
    let Some(details) = details else {
        return (Vec::new(), None);
    };
    let mut content = Vec::new();
    if let Some(Value::String(id)) = details.get("terminalId") {
        content.push(ToolContent::Terminal {
            terminal_id: id.clone(),
        });
    }
    if let Some(Ok(diff)) = details.get("diff").map(DiffDetails::deserialize) {
        content.push(ToolContent::Diff {
            path: diff.path,
            old_text: diff.old_text,
            new_text: diff.new_text,
        });
    }
    let locations = (details.get("locations"))
        .and_then(|l| Vec::<Location>::deserialize(l).ok())
        .filter(|l| !l.is_empty());
    (content, locations)
}

/// `update` with what `details` embed (see [`embedded`]): their blocks go before the
/// text, which stays unless it is empty.
fn with_embedded(mut update: ToolCallUpdate, details: Option<&Value>) -> ToolCallUpdate {
    let (mut blocks, locations) = embedded(details);
    if blocks.is_empty() && locations.is_none() {
        return update;
    }
    let text_is_empty = |c: &ToolContent| matches!(c, ToolContent::Content { content: Content::Text { text } } if text.is_empty());
    blocks.extend(
        update
            .content
            .take()
            .into_iter()
            .flatten()
            .filter(|c| !text_is_empty(c)),
    );
    update.content = Some(blocks);
    update.locations = locations;
    update
}

/// One entry of a `plan` update, as a tool publishes it in its details (`{"plan": [..]}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanEntry {
    content: String,
    priority: PlanPriority,
    status: PlanStatus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum PlanPriority {
    High,
    Medium,
    Low,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum PlanStatus {
    Pending,
    InProgress,
    Completed,
}

/// The stop reasons of `session/prompt`'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

/// The arguments of `call` for `rawInput`: parsed JSON, or the raw text when it is not JSON.
pub(crate) fn raw_input(call: &ToolCall) -> Value {
    call.parse_arguments()
        .unwrap_or_else(|_| Value::String(call.arguments.clone()))
}

pub(crate) fn tool_call(call: &ToolCall, kind: ToolKind, status: ToolStatus) -> Update {
    Update::ToolCall(ToolCallStart {
        tool_call_id: call.id.clone(),
        title: call.name.clone(),
        kind,
        status,
        raw_input: raw_input(call),
        locations: None,
    })
}

fn tool_content(s: &str) -> Option<Vec<ToolContent>> {
    Some(vec![ToolContent::Content { content: text(s) }])
}

/// A result's content: its text, or with images and documents one block per part.
fn result_content(parts: &[Part]) -> Option<Vec<ToolContent>> {
    if parts.iter().all(|p| p.as_text().is_some()) {
        return tool_content(&crate::content::joined_text(parts));
    }
    let content = parts.iter().map(|p| ToolContent::Content {
        content: part_content(p),
    });
    Some(content.collect())
}

/// The final `tool_call_update` of a call: its status, its text and its details.
pub(crate) fn tool_result(result: &ToolResultMessage) -> Update {
    Update::ToolCallUpdate(result_update(result))
}

fn result_update(result: &ToolResultMessage) -> ToolCallUpdate {
    ToolCallUpdate {
        tool_call_id: result.tool_call_id.clone(),
        status: Some(if result.is_error {
            ToolStatus::Failed
        } else {
            ToolStatus::Completed
        }),
        content: result_content(&result.content),
        raw_output: result.details.clone(),
        ..ToolCallUpdate::default()
    }
}

/// What the calls of a live run embed (a terminal, a diff), remembered until each call
/// ends: a `tool_call_update`'s content replaces the call's, so a result that embeds
/// nothing of its own (an error) keeps what the call's progress showed, and the client
/// goes on showing the terminal the command ran in.
#[derive(Debug, Default)]
pub(crate) struct Shown {
    embedded: std::collections::HashMap<String, Vec<ToolContent>>,
}

impl Shown {
    /// `update`, with the blocks its call embedded before when it is the call's last and
    /// embeds none.
    pub(crate) fn keep(&mut self, mut update: Update) -> Update {
        let Update::ToolCallUpdate(call) = &mut update else {
            return update;
        };
        let is_embedded = |c: &ToolContent| !matches!(c, ToolContent::Content { .. });
        let blocks: Vec<ToolContent> = (call.content.iter().flatten())
            .filter(|c| is_embedded(c))
            .cloned()
            .collect();
        let last = matches!(
            call.status,
            Some(ToolStatus::Completed | ToolStatus::Failed)
        );
        if last {
            let before = self.embedded.remove(&call.tool_call_id);
            if let Some(before) = before.filter(|_| blocks.is_empty()) {
                let content = call.content.take().into_iter().flatten();
                call.content = Some(before.into_iter().chain(content).collect());
            }
        } else if !blocks.is_empty() {
            self.embedded.insert(call.tool_call_id.clone(), blocks);
        }
        update
    }
}

/// A `tool_call_update` of a tool's progress or result, and the `plan` its details carry.
/// Only the agent's own tools (`own`) embed what their details say (see [`embedded`]) and
/// give a plan: an MCP server's details are the server's, not meant for the client.
fn own_tool_updates(update: ToolCallUpdate, details: Option<&Value>, own: bool) -> Vec<Update> {
    if !own {
        return vec![Update::ToolCallUpdate(update)];
    }
    let mut out = vec![Update::ToolCallUpdate(with_embedded(update, details))];
    out.extend(plan(details));
    out
}

/// A `plan` update when `details` carries `{"plan": [entry..]}` with well-formed entries.
fn plan(details: Option<&Value>) -> Option<Update> {
    let entries = details?.get("plan")?;
    let entries = Vec::<PlanEntry>::deserialize(entries).ok()?;
    Some(Update::Plan { entries })
}

/// The updates one event of a live run becomes, in order. `kind_of` names a tool's kind.
///
/// | event | updates |
/// |---|---|
/// | `MessageUpdate` text / thinking delta | `agent_message_chunk` / `agent_thought_chunk` |
/// | `ToolStart` | `tool_call`, status `pending` |
/// | `ToolExecute` (the call runs: allowed, or permitted by the client) | `tool_call_update`, status `in_progress`; with `rawInput` (the arguments it runs with) when a `before_tool_call` hook rewrote them |
/// | `ToolUpdate` | `tool_call_update` with the progress as content; a `plan` when its details carry one |
/// | `ToolEnd` | `tool_call_update`, status `completed` or `failed`, content and `rawOutput`; a `plan` when its details carry one |
/// | `CompactionStart` / `CompactionEnd` | an `agent_thought_chunk` each, saying the context is being compacted and how it ended; to a client that advertised `session.compaction`, a `compaction_update` each instead ([`compaction`]) |
/// | everything else | nothing: the prompt's answer carries how the run ended |
///
/// Only the tools `plans_from` names give a `plan` (the agent's own, not those of an MCP
/// server, whose results are the server's).
pub(crate) fn updates(
    event: &AgentEvent,
    kind_of: &dyn Fn(&str) -> ToolKind,
    plans_from: &dyn Fn(&str) -> bool,
) -> Vec<Update> {
    match event {
        AgentEvent::MessageUpdate { delta, .. } => match delta {
            StreamEvent::TextDelta { text: t } => vec![Update::AgentMessageChunk {
                content: text(t.as_str()),
                message_id: None,
            }],
            StreamEvent::ThinkingDelta { text: t } => vec![Update::AgentThoughtChunk {
                content: text(t.as_str()),
                message_id: None,
            }],
            // Tool calls are shown once their arguments are whole (`ToolStart`); signatures,
            // usage and retries have no update of their own.
            _ => Vec::new(),
        },
        AgentEvent::ToolStart { call, .. } => {
            vec![tool_call(call, kind_of(&call.name), ToolStatus::Pending)]
        }
        AgentEvent::ToolExecute {
            call_id,
            arguments,
            rewritten,
            ..
        } => vec![Update::ToolCallUpdate(ToolCallUpdate {
            tool_call_id: call_id.clone(),
            status: Some(ToolStatus::InProgress),
            raw_input: rewritten.then(|| arguments.clone()),
            ..ToolCallUpdate::default()
        })],
        AgentEvent::ToolUpdate {
            call_id,
            tool_name,
            partial,
        } => {
            let update = ToolCallUpdate {
                tool_call_id: call_id.clone(),
                content: tool_content(&partial.to_text()),
                ..ToolCallUpdate::default()
            };
            own_tool_updates(update, partial.details.as_ref(), plans_from(tool_name))
        }
        AgentEvent::ToolEnd { result, .. } => {
            let own = plans_from(&result.tool_name);
            own_tool_updates(result_update(result), result.details.as_ref(), own)
        }
        AgentEvent::CompactionStart {
            messages, context, ..
        } => vec![Update::AgentThoughtChunk {
            content: text(format!(
                "Compacting the context ({} tokens): summarizing {messages} earlier messages.\n",
                context.used
            )),
            message_id: None,
        }],
        AgentEvent::CompactionEnd { context, error, .. } => {
            let said = match error {
                None => format!("Context compacted to {} tokens.\n", context.used),
                Some(e) => format!("The compaction failed: {}\n", e.message),
            };
            vec![Update::AgentThoughtChunk {
                content: text(said),
                message_id: None,
            }]
        }
        _ => Vec::new(),
    }
}

/// The `compaction_update` a `CompactionStart` or `CompactionEnd` becomes for a client that
/// advertised `session.compaction` (instead of the thought chunks of [`updates`]): `id` names
/// the compaction in the session, `summary` is the text the compaction wrote.
pub(crate) fn compaction(event: &AgentEvent, id: &str, summary: Option<String>) -> Option<Update> {
    let (status, error) = match event {
        AgentEvent::CompactionStart { .. } => ("in_progress", None),
        AgentEvent::CompactionEnd { error: None, .. } => ("completed", None),
        AgentEvent::CompactionEnd { error: Some(e), .. } => ("failed", Some(e.message.clone())),
        _ => return None,
    };
    Some(Update::CompactionUpdate {
        compaction_id: id.to_owned(),
        status,
        summary: summary.filter(|_| error.is_none()).map(|s| vec![text(s)]),
        error,
    })
}

/// The updates that replay a saved transcript for `session/load`, in transcript order.
pub(crate) fn replay(messages: &[Message], kind_of: &dyn Fn(&str) -> ToolKind) -> Vec<Update> {
    let mut out = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let message_id = Some(message_id(index));
        match message {
            Message::User(m) => out.extend(m.content.iter().map(|part| Update::UserMessageChunk {
                content: part_content(part),
                message_id: message_id.clone(),
            })),
            Message::Assistant(a) => {
                for block in &a.content {
                    let message_id = message_id.clone();
                    out.push(match block {
                        ContentBlock::Text { text: t } => Update::AgentMessageChunk {
                            content: text(t.as_str()),
                            message_id,
                        },
                        ContentBlock::Thinking { thinking, .. } => Update::AgentThoughtChunk {
                            content: text(thinking.as_str()),
                            message_id,
                        },
                        ContentBlock::ToolCall(call) => {
                            tool_call(call, kind_of(&call.name), ToolStatus::Pending)
                        }
                    });
                }
            }
            Message::ToolResult(r) => out.push(tool_result(r)),
        }
    }
    out
}

/// How a `session/prompt` answers the run it started: a stop reason, or a JSON-RPC error.
///
/// | run | answer |
/// |---|---|
/// | ended by `abort()` (`session/cancel`) | `cancelled` |
/// | `MaxTurns` | `max_turn_requests` |
/// | any other end whose last reply was cut at the token limit | `max_tokens` |
/// | `NoToolCalls`, `EmptyResponse` | `end_turn` |
/// | failed: the provider refused (`refusal`, `content_filter`) | `refusal` |
/// | failed otherwise | error -32603 (internal error) with the error's text |
pub(crate) fn prompt_answer(outcome: &Result<RunResult, RunError>) -> Result<StopReason, Refusal> {
    let (result, error) = match outcome {
        Ok(r) => (r, None),
        Err(e) => (e.result(), Some(e.error())),
    };
    if let Some(error) = error {
        return match error {
            Error::Api { kind, .. } if kind == "refusal" || kind == "content_filter" => {
                Ok(StopReason::Refusal)
            }
            e if e.is_aborted() => Ok(StopReason::Cancelled),
            Error::Busy => Err((
                codes::INVALID_REQUEST,
                "a prompt of this session is still running".into(),
            )),
            e => Err((codes::INTERNAL_ERROR, e.to_string())),
        };
    }
    let cut = result
        .messages
        .iter()
        .rev()
        .find_map(|m| m.as_assistant())
        .is_some_and(|a| a.stop_reason == ReplyStop::Length);
    Ok(match result.stop_reason {
        RunStopReason::Cancelled => StopReason::Cancelled,
        RunStopReason::MaxTurns => StopReason::MaxTurnRequests,
        _ if cut => StopReason::MaxTokens,
        _ => StopReason::EndTurn,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::kind::ErrorInfo;
    use crate::message::{AssistantMessage, Usage};
    use crate::partial::PartialMessage;
    use crate::types::ToolOutput;

    fn kind_of(name: &str) -> ToolKind {
        if name == "edit" {
            ToolKind::Edit
        } else {
            ToolKind::Other
        }
    }

    fn json_of(event: &AgentEvent) -> Vec<Value> {
        updates(event, &kind_of, &|_| true)
            .iter()
            .map(|u| serde_json::to_value(u).unwrap())
            .collect()
    }

    fn delta(delta: StreamEvent) -> AgentEvent {
        AgentEvent::MessageUpdate {
            message: PartialMessage::new("m"),
            delta,
        }
    }

    fn reply(stop: ReplyStop) -> Arc<Message> {
        Arc::new(Message::Assistant(AssistantMessage::new(
            vec![ContentBlock::text("x")],
            stop,
        )))
    }

    #[test]
    fn every_event_maps_to_its_updates() {
        let call = ToolCall::new("c1", "edit", r#"{"path":"a"}"#);
        let result = ToolResultMessage::new("c1", "edit", "done").with_details(
            json!({"plan": [{"content": "step", "priority": "high", "status": "completed"}]}),
        );
        let failed = ToolResultMessage::new("c2", "other", "no such file").with_is_error(true);
        let cases: Vec<(AgentEvent, Vec<Value>)> = vec![
            (AgentEvent::AgentStart, vec![]),
            (AgentEvent::TurnStart { turn: 1 }, vec![]),
            (
                AgentEvent::MessageStart {
                    message: Arc::new(Message::user("hi")),
                },
                vec![],
            ),
            (
                delta(StreamEvent::text("Hel")),
                vec![
                    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hel"}}),
                ],
            ),
            (
                delta(StreamEvent::thinking("hmm")),
                vec![
                    json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}}),
                ],
            ),
            (
                delta(StreamEvent::ThinkingSignature {
                    signature: "s".into(),
                }),
                vec![],
            ),
            (
                delta(StreamEvent::ToolCallStart {
                    id: "c1".into(),
                    name: "edit".into(),
                }),
                vec![],
            ),
            (
                delta(StreamEvent::ToolCallDelta {
                    index: 0,
                    arguments: "{".into(),
                }),
                vec![],
            ),
            (
                delta(StreamEvent::Usage {
                    usage: Usage::new(1, 2),
                }),
                vec![],
            ),
            (
                delta(StreamEvent::Retry {
                    attempt: 1,
                    delay_ms: 5,
                    error: "busy".into(),
                    at: None,
                }),
                vec![],
            ),
            (
                AgentEvent::MessageEnd {
                    message: reply(ReplyStop::ToolUse),
                },
                vec![],
            ),
            (
                AgentEvent::ToolStart {
                    call: call.clone(),
                    at: None,
                },
                vec![
                    json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "edit",
                    "kind": "edit", "status": "pending", "rawInput": {"path": "a"}}),
                ],
            ),
            (
                AgentEvent::ToolStart {
                    call: ToolCall::new("c2", "other", "not json"),
                    at: None,
                },
                vec![
                    json!({"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "other",
                    "kind": "other", "status": "pending", "rawInput": "not json"}),
                ],
            ),
            (
                AgentEvent::ToolExecute {
                    call_id: "c1".into(),
                    tool_name: "edit".into(),
                    arguments: json!({"path": "a"}),
                    rewritten: false,
                },
                vec![
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress"}),
                ],
            ),
            (
                AgentEvent::ToolExecute {
                    call_id: "c1".into(),
                    tool_name: "edit".into(),
                    arguments: json!({"path": "b"}),
                    rewritten: true,
                },
                vec![
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress",
                    "rawInput": {"path": "b"}}),
                ],
            ),
            (
                AgentEvent::ToolUpdate {
                    call_id: "c1".into(),
                    tool_name: "edit".into(),
                    partial: ToolOutput::text("half"),
                },
                vec![
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1",
                    "content": [{"type": "content", "content": {"type": "text", "text": "half"}}]}),
                ],
            ),
            (
                AgentEvent::ToolEnd {
                    result: Arc::new(result.clone()),
                    duration: None,
                },
                vec![
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed",
                        "content": [{"type": "content", "content": {"type": "text", "text": "done"}}],
                        "rawOutput": {"plan": [{"content": "step", "priority": "high", "status": "completed"}]}}),
                    json!({"sessionUpdate": "plan", "entries": [{"content": "step", "priority": "high", "status": "completed"}]}),
                ],
            ),
            (
                AgentEvent::ToolEnd {
                    result: Arc::new(failed),
                    duration: None,
                },
                vec![
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "failed",
                    "content": [{"type": "content", "content": {"type": "text", "text": "no such file"}}]}),
                ],
            ),
            (
                AgentEvent::TurnEnd {
                    turn: 1,
                    message: reply(ReplyStop::Stop),
                    tool_results: vec![],
                    stop_reason: RunStopReason::NoToolCalls,
                    context: Default::default(),
                },
                vec![],
            ),
            (
                AgentEvent::CompactionStart {
                    reason: crate::context::CompactionReason::Threshold,
                    messages: 12,
                    context: crate::context::ContextUsage::new(1700, Some(2048), 0, 0),
                },
                vec![
                    json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text",
                    "text": "Compacting the context (1700 tokens): summarizing 12 earlier messages.\n"}}),
                ],
            ),
            (
                AgentEvent::CompactionEnd {
                    reason: crate::context::CompactionReason::Threshold,
                    context: crate::context::ContextUsage::new(600, Some(2048), 0, 12),
                    usage: Usage::default(),
                    error: None,
                },
                vec![
                    json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text",
                    "text": "Context compacted to 600 tokens.\n"}}),
                ],
            ),
            (
                AgentEvent::AgentEnd {
                    messages: vec![],
                    stop_reason: RunStopReason::Error,
                    usage: Usage::default(),
                    error: Some(ErrorInfo::from(&Error::Provider("x".into()))),
                },
                vec![],
            ),
        ];
        for (event, expected) in cases {
            assert_eq!(json_of(&event), expected, "{event:?}");
        }
    }

    #[test]
    fn a_plan_in_the_result_of_a_tool_not_the_agents_is_no_plan() {
        let plan = json!({"plan": [{"content": "step", "priority": "high", "status": "pending"}]});
        let end = AgentEvent::ToolEnd {
            result: Arc::new(
                ToolResultMessage::new("c1", "remote_tool", "done").with_details(plan.clone()),
            ),
            duration: None,
        };
        let update = AgentEvent::ToolUpdate {
            call_id: "c1".into(),
            tool_name: "remote_tool".into(),
            partial: ToolOutput::text("half").with_details(plan),
        };
        let not_remote = |tool: &str| tool != "remote_tool";
        for event in [end, update] {
            let kinds: Vec<Value> = updates(&event, &kind_of, &not_remote)
                .iter()
                .map(|u| serde_json::to_value(u).unwrap()["sessionUpdate"].clone())
                .collect();
            assert_eq!(kinds, [json!("tool_call_update")], "{event:?}");
        }
    }

    #[test]
    fn a_malformed_plan_in_details_is_no_plan() {
        let result = ToolResultMessage::new("c1", "edit", "done").with_details(
            json!({"plan": [{"content": "step", "priority": "urgent", "status": "completed"}]}),
        );
        assert_eq!(
            json_of(&AgentEvent::ToolEnd {
                result: Arc::new(result),
                duration: None,
            })
            .len(),
            1
        );
    }

    fn ended(stop_reason: RunStopReason, last: ReplyStop) -> Result<RunResult, RunError> {
        Ok(RunResult {
            messages: vec![Arc::new(Message::user("q")), reply(last)],
            stop_reason,
            usage: Usage::default(),
            output: None,
        })
    }

    fn failed(error: Error) -> Result<RunResult, RunError> {
        let Ok(result) = ended(RunStopReason::Error, ReplyStop::Error) else {
            unreachable!()
        };
        Err(RunError::new(error, result))
    }

    #[test]
    fn every_stop_reason_maps_exactly() {
        let api = |kind: &str| Error::Api {
            kind: kind.into(),
            message: "no".into(),
        };
        let cases = [
            (
                ended(RunStopReason::NoToolCalls, ReplyStop::Stop),
                Ok(StopReason::EndTurn),
            ),
            (
                ended(RunStopReason::EmptyResponse, ReplyStop::Stop),
                Ok(StopReason::EndTurn),
            ),
            (
                ended(RunStopReason::NoToolCalls, ReplyStop::Length),
                Ok(StopReason::MaxTokens),
            ),
            (
                ended(RunStopReason::MaxTurns, ReplyStop::ToolUse),
                Ok(StopReason::MaxTurnRequests),
            ),
            (
                ended(RunStopReason::MaxTurns, ReplyStop::Length),
                Ok(StopReason::MaxTurnRequests),
            ),
            (
                ended(RunStopReason::Cancelled, ReplyStop::Aborted),
                Ok(StopReason::Cancelled),
            ),
            (failed(Error::Aborted), Ok(StopReason::Cancelled)),
            (failed(api("refusal")), Ok(StopReason::Refusal)),
            (failed(api("content_filter")), Ok(StopReason::Refusal)),
            (
                failed(api("overloaded_error")),
                Err((
                    codes::INTERNAL_ERROR,
                    "provider reported overloaded_error: no".to_owned(),
                )),
            ),
            (
                failed(Error::Provider("down".into())),
                Err((codes::INTERNAL_ERROR, "provider error: down".to_owned())),
            ),
            (
                Err(RunError::refused(Error::Busy)),
                Err((
                    codes::INVALID_REQUEST,
                    "a prompt of this session is still running".to_owned(),
                )),
            ),
        ];
        for (outcome, expected) in cases {
            assert_eq!(prompt_answer(&outcome), expected, "{outcome:?}");
        }
        let names: Vec<Value> = [
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::MaxTurnRequests,
            StopReason::Refusal,
            StopReason::Cancelled,
        ]
        .iter()
        .map(|s| serde_json::to_value(s).unwrap())
        .collect();
        assert_eq!(
            names,
            [
                json!("end_turn"),
                json!("max_tokens"),
                json!("max_turn_requests"),
                json!("refusal"),
                json!("cancelled")
            ]
        );
    }

    #[test]
    fn a_saved_transcript_replays_in_order() {
        let call = ToolCall::new("c1", "edit", r#"{"path":"a"}"#);
        let messages = vec![
            Message::user("do it"),
            Message::Assistant(AssistantMessage::new(
                vec![
                    ContentBlock::thinking("plan"),
                    ContentBlock::text("ok"),
                    ContentBlock::ToolCall(call),
                ],
                ReplyStop::ToolUse,
            )),
            Message::ToolResult(ToolResultMessage::new("c1", "edit", "done")),
        ];
        let got: Vec<Value> = replay(&messages, &kind_of)
            .iter()
            .map(|u| serde_json::to_value(u).unwrap())
            .collect();
        assert_eq!(
            got,
            [
                json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "do it"}, "messageId": "m0"}),
                json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "plan"}, "messageId": "m1"}),
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "ok"}, "messageId": "m1"}),
                json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "edit", "kind": "edit",
                    "status": "pending", "rawInput": {"path": "a"}}),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed",
                    "content": [{"type": "content", "content": {"type": "text", "text": "done"}}]}),
            ]
        );
    }
}
