//! The protocol's shapes for the subset pagent serves, and the mapping from our events,
//! messages and run outcomes to them. Pure: nothing here reads or writes a stream.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ToolKind, codes};
use crate::event::{AgentEvent, RunStopReason};
use crate::message::{ContentBlock, Message, StopReason as ReplyStop, ToolCall, ToolResultMessage};
use crate::types::{StreamEvent, ToolOutput};
use crate::{Error, RunError, RunResult};

/// A request that cannot be served: its error code and message.
pub(crate) type Refusal = (i64, String);

/// One `session/update`'s `update` object, tagged by `sessionUpdate`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
pub(crate) enum Update {
    UserMessageChunk { content: Content },
    AgentMessageChunk { content: Content },
    AgentThoughtChunk { content: Content },
    ToolCall(ToolCallStart),
    ToolCallUpdate(ToolCallUpdate),
    Plan { entries: Vec<PlanEntry> },
}

/// A content block the agent sends: text is all pagent produces.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Content {
    Text { text: String },
}

fn text(s: impl Into<String>) -> Content {
    Content::Text { text: s.into() }
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
    pub(crate) raw_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) raw_output: Option<Value>,
}

/// What a tool call shows: pagent's tool output is text.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ToolContent {
    Content { content: Content },
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
    })
}

fn tool_content(s: &str) -> Option<Vec<ToolContent>> {
    Some(vec![ToolContent::Content { content: text(s) }])
}

/// The final `tool_call_update` of a call: its status, its text and its details.
pub(crate) fn tool_result(result: &ToolResultMessage) -> Update {
    Update::ToolCallUpdate(ToolCallUpdate {
        tool_call_id: result.tool_call_id.clone(),
        status: Some(if result.is_error {
            ToolStatus::Failed
        } else {
            ToolStatus::Completed
        }),
        content: tool_content(&result.content),
        raw_output: result.details.clone(),
        ..ToolCallUpdate::default()
    })
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
/// | `ToolStart` | `tool_call`, status `pending` (the run's hook moves it to `in_progress`) |
/// | `ToolUpdate` | `tool_call_update` with the progress as content; a `plan` when its details carry one |
/// | `ToolEnd` | `tool_call_update`, status `completed` or `failed`, content and `rawOutput`; a `plan` when its details carry one |
/// | everything else | nothing: the prompt's answer carries how the run ended |
pub(crate) fn updates(event: &AgentEvent, kind_of: &dyn Fn(&str) -> ToolKind) -> Vec<Update> {
    match event {
        AgentEvent::MessageUpdate { delta, .. } => match delta {
            StreamEvent::TextDelta { text: t } => vec![Update::AgentMessageChunk {
                content: text(t.as_str()),
            }],
            StreamEvent::ThinkingDelta { text: t } => vec![Update::AgentThoughtChunk {
                content: text(t.as_str()),
            }],
            // Tool calls are shown once their arguments are whole (`ToolStart`); signatures,
            // usage and retries have no update of their own.
            _ => Vec::new(),
        },
        AgentEvent::ToolStart { call } => {
            vec![tool_call(call, kind_of(&call.name), ToolStatus::Pending)]
        }
        AgentEvent::ToolUpdate {
            call_id, partial, ..
        } => {
            let ToolOutput { content, details } = partial;
            let mut out = vec![Update::ToolCallUpdate(ToolCallUpdate {
                tool_call_id: call_id.clone(),
                content: tool_content(content),
                ..ToolCallUpdate::default()
            })];
            out.extend(plan(details.as_ref()));
            out
        }
        AgentEvent::ToolEnd { result } => {
            let mut out = vec![tool_result(result)];
            out.extend(plan(result.details.as_ref()));
            out
        }
        _ => Vec::new(),
    }
}

/// The updates that replay a saved transcript for `session/load`, in transcript order.
pub(crate) fn replay(messages: &[Message], kind_of: &dyn Fn(&str) -> ToolKind) -> Vec<Update> {
    let mut out = Vec::new();
    for message in messages {
        match message {
            Message::User(_) => out.push(Update::UserMessageChunk {
                content: text(message.text()),
            }),
            Message::Assistant(a) => {
                for block in &a.content {
                    out.push(match block {
                        ContentBlock::Text { text: t } => Update::AgentMessageChunk {
                            content: text(t.as_str()),
                        },
                        ContentBlock::Thinking { thinking, .. } => Update::AgentThoughtChunk {
                            content: text(thinking.as_str()),
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

/// An MCP server the client asks a session to connect, as `session/new` and `session/load`
/// list them.
#[derive(Clone, Debug, PartialEq)]
#[allow(dead_code)] // Read by the MCP client once it plugs in (see `connect_mcp_servers`).
pub(crate) enum McpServer {
    /// A program to start, speaking MCP on its stdio.
    Stdio {
        name: String,
        command: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// A server over HTTP (`"type": "http"`) or server-sent events (`"type": "sse"`).
    Http {
        name: String,
        url: String,
        headers: Vec<(String, String)>,
        sse: bool,
    },
}

#[derive(Deserialize)]
struct NameValue {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StdioShape {
    name: String,
    command: PathBuf,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<NameValue>,
}

#[derive(Deserialize)]
struct HttpShape {
    name: String,
    url: String,
    #[serde(default)]
    headers: Vec<NameValue>,
}

fn pairs(v: Vec<NameValue>) -> Vec<(String, String)> {
    v.into_iter().map(|p| (p.name, p.value)).collect()
}

impl McpServer {
    pub(crate) fn parse(v: &Value) -> Result<McpServer, String> {
        let kind = v.get("type").and_then(Value::as_str);
        let shape = |e: serde_json::Error| format!("an MCP server entry is malformed: {e}");
        match kind {
            Some(k @ ("http" | "sse")) => {
                let s = HttpShape::deserialize(v).map_err(shape)?;
                Ok(McpServer::Http {
                    name: s.name,
                    url: s.url,
                    headers: pairs(s.headers),
                    sse: k == "sse",
                })
            }
            None | Some("stdio") => {
                let s = StdioShape::deserialize(v).map_err(shape)?;
                Ok(McpServer::Stdio {
                    name: s.name,
                    command: s.command,
                    args: s.args,
                    env: pairs(s.env),
                })
            }
            Some(other) => Err(format!("MCP server type `{other}` is unknown")),
        }
    }
}

/// The text of a prompt's content blocks, in order: `text` as it is, a `resource_link` as a
/// markdown link, an embedded text `resource` as its text under its URI. Images, audio and
/// binary resources are refused (the agent's capabilities say so).
pub(crate) fn prompt_text(blocks: &Value) -> Result<String, Refusal> {
    let bad = |why: String| (codes::INVALID_PARAMS, why);
    let Some(blocks) = blocks.as_array() else {
        return Err(bad(
            "session/prompt needs `prompt`, a list of content blocks".into(),
        ));
    };
    let mut out = String::new();
    for block in blocks {
        let field = |name: &str| block.get(name).and_then(Value::as_str);
        let piece = match field("type") {
            Some("text") => field("text").map(str::to_owned),
            Some("resource_link") => field("uri").map(|uri| {
                let name = field("name").unwrap_or(uri);
                format!("[{name}]({uri})")
            }),
            Some("resource") => {
                let r = block.get("resource");
                let get = |n: &str| r.and_then(|r| r.get(n)).and_then(Value::as_str);
                match (get("uri"), get("text")) {
                    (Some(uri), Some(t)) => {
                        Some(format!("<context uri=\"{uri}\">\n{t}\n</context>"))
                    }
                    _ => return Err(bad("only text resources can be embedded".into())),
                }
            }
            Some(other @ ("image" | "audio")) => {
                return Err(bad(format!(
                    "{other} content is not supported by this agent"
                )));
            }
            _ => None,
        };
        let Some(piece) = piece else {
            return Err(bad(format!("a prompt content block is malformed: {block}")));
        };
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&piece);
    }
    if out.is_empty() {
        return Err(bad("the prompt is empty".into()));
    }
    Ok(out)
}
