//! Sampling: a server asks the client for a model reply (`sampling/createMessage`), as a
//! request of its own in the session era or an input request of an `input_required` result
//! in the stateless one. Answered by the program's hook, or through a provider of the
//! program's ([`crate::llm::Provider`]), only when the program configured one of them.

use std::fmt;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::cancel::CancelToken;
use crate::content::{Blob, Image, Part};
use crate::jsonrpc::{RpcError, codes};
use crate::llm::{Provider, Request};
use crate::message::{
    AssistantMessage, ContentBlock, Message, StopReason, ToolCall, ToolResultMessage, UserMessage,
};
use crate::types::{StreamEvent, ToolDefinition};

/// A server's request for a model reply (`sampling/createMessage`), as the client read it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SamplingRequest {
    /// The name of the server that asks.
    pub server: String,
    /// The conversation to reply to, oldest first: `user` and `assistant` messages of text
    /// and images (audio and any other content as a note of what it was), an assistant's
    /// `tool_use` as its [`ToolCall`], and a user's `tool_result`s as
    /// [`Message::ToolResult`]s (2025-11-25's sampling with tools).
    pub messages: Vec<Message>,
    /// The tools the model may call (`tools`, 2025-11-25), as pagent's tool definitions.
    pub tools: Vec<ToolDefinition>,
    /// The server's `toolChoice.mode` (`"auto"`, `"required"`, `"none"`), if any.
    pub tool_choice: Option<String>,
    /// The system prompt the server asks for, if any.
    pub system_prompt: Option<String>,
    /// The most tokens the reply may have (`maxTokens`).
    pub max_tokens: u64,
    /// The temperature the server asks for, if any.
    pub temperature: Option<f64>,
    /// Where the reply should stop (`stopSequences`).
    pub stop_sequences: Vec<String>,
    /// The names of the models the server would like, in its order of preference
    /// (`modelPreferences.hints`): advice only, the client picks the model.
    pub model_hints: Vec<String>,
    /// The server's `modelPreferences` as it sent them (its cost, speed and intelligence
    /// priorities), `Null` for none.
    pub model_preferences: Value,
    /// The `includeContext` the server asked for (`"none"`, `"thisServer"`,
    /// `"allServers"`), if any. The client adds no context of its own whatever it says.
    pub include_context: Option<String>,
}

/// A reply to a [`SamplingRequest`]: what the model said, the model that said it and why
/// it stopped.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SamplingReply {
    /// The reply's text.
    pub text: String,
    /// The model that made it.
    pub model: String,
    /// The tools the model called (sent as `tool_use` blocks after the text).
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped: `"endTurn"`, `"stopSequence"`, `"maxTokens"`, `"toolUse"` or the
    /// client's own.
    pub stop_reason: String,
}

impl SamplingReply {
    /// A reply of `text` by `model` that ended its turn (`"endTurn"`).
    pub fn new(model: impl Into<String>, text: impl Into<String>) -> SamplingReply {
        SamplingReply {
            text: text.into(),
            model: model.into(),
            tool_calls: Vec::new(),
            stop_reason: "endTurn".into(),
        }
    }

    /// The reply with a call of a tool of the request, and the stop reason `"toolUse"`.
    #[must_use]
    pub fn tool_call(mut self, call: ToolCall) -> SamplingReply {
        self.tool_calls.push(call);
        self.stop_reason = "toolUse".into();
        self
    }

    /// The reply with another stop reason (`"stopSequence"`, `"maxTokens"`, ...).
    #[must_use]
    pub fn stop_reason(mut self, reason: impl Into<String>) -> SamplingReply {
        self.stop_reason = reason.into();
        self
    }

    /// The `CreateMessageResult`.
    fn to_json(&self) -> Value {
        let text = json!({"type": "text", "text": self.text});
        let content = if self.tool_calls.is_empty() {
            text
        } else {
            let calls = self.tool_calls.iter().map(|call| {
                json!({
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": call.parse_arguments().unwrap_or_else(|_| json!({})),
                })
            });
            let text = (!self.text.is_empty()).then_some(text);
            Value::Array(text.into_iter().chain(calls).collect())
        };
        json!({
            "role": "assistant",
            "content": content,
            "model": self.model,
            "stopReason": self.stop_reason,
        })
    }
}

/// The program's hook that answers sampling: a reply, or `Err` with the reason it refused.
pub(crate) type SamplingHook =
    Arc<dyn Fn(&SamplingRequest, &CancelToken) -> Result<SamplingReply, String> + Send + Sync>;

/// Who answers the server's sampling requests.
#[derive(Clone)]
pub(crate) enum Sampler {
    /// The program's hook ([`ClientBuilder::on_sampling`](super::ClientBuilder::on_sampling)).
    Hook(SamplingHook),
    /// A provider and the model to ask
    /// ([`ClientBuilder::sample_with`](super::ClientBuilder::sample_with)).
    Provider(Arc<dyn Provider>, String),
}

impl fmt::Debug for Sampler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sampler::Hook(_) => f.write_str("Hook"),
            Sampler::Provider(p, model) => write!(f, "Provider({}, {model})", p.name()),
        }
    }
}

/// The code of a sampling request the user (or the program) refused, as the spec's examples
/// give it.
const REFUSED: i64 = -1;

impl Sampler {
    /// Answers one `sampling/createMessage` of `server`.
    ///
    /// Blocks while the hook or the model does; the model call is given up when `cancel` is.
    ///
    /// # Errors
    /// `-32602` for a malformed request; `-1` for one the hook refused; `-32603` for a
    /// model call that failed.
    pub(crate) fn answer(
        &self,
        server: &str,
        params: Option<&Value>,
        cancel: &CancelToken,
    ) -> Result<Value, RpcError> {
        let request = read(server, params)?;
        let reply = match self {
            Sampler::Hook(hook) => hook(&request, cancel)
                .map_err(|why| RpcError::new(REFUSED, format!("sampling refused: {why}")))?,
            Sampler::Provider(provider, model) => {
                sample(provider.as_ref(), model, &request, cancel).map_err(|why| {
                    RpcError::new(codes::INTERNAL_ERROR, format!("sampling failed: {why}"))
                })?
            }
        };
        Ok(reply.to_json())
    }
}

/// Asks `provider` for the reply: the messages and the system prompt as the request has
/// them; the reply's text cut at the first stop sequence.
fn sample(
    provider: &dyn Provider,
    model: &str,
    request: &SamplingRequest,
    cancel: &CancelToken,
) -> Result<SamplingReply, String> {
    let messages = request.messages.iter().cloned().map(Arc::new).collect();
    let mut asked = Request::new(model, messages);
    if let Some(system) = &request.system_prompt {
        asked = asked.with_system_prompt(system.clone());
    }
    if request.tool_choice.as_deref() != Some("none") {
        asked = asked.with_tools(request.tools.clone());
    }
    let mut text = String::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    let end = provider
        .stream(&asked, cancel, &mut |event| {
            match event {
                StreamEvent::TextDelta { text: piece } => text.push_str(&piece),
                StreamEvent::ToolCallStart { id, name } => {
                    calls.push(ToolCall::new(id, name, String::new()));
                }
                StreamEvent::ToolCallDelta { index, arguments } => {
                    if let Some(call) = calls.get_mut(index) {
                        call.arguments.push_str(&arguments);
                    }
                }
                _ => {}
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    let mut reason = match end.stop_reason {
        StopReason::Length => "maxTokens",
        _ if !calls.is_empty() => "toolUse",
        _ => "endTurn",
    };
    if let Some(at) = request
        .stop_sequences
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min()
    {
        text.truncate(at);
        reason = "stopSequence";
    }
    let mut reply = SamplingReply::new(end.model.unwrap_or_else(|| model.to_owned()), text);
    reply.tool_calls = calls;
    Ok(reply.stop_reason(reason))
}

/// Reads a `sampling/createMessage`.
fn read(server: &str, params: Option<&Value>) -> Result<SamplingRequest, RpcError> {
    let bad = |why: &str| {
        RpcError::new(
            codes::INVALID_PARAMS,
            format!("sampling/createMessage: {why}"),
        )
    };
    let params = params.ok_or_else(|| bad("no params"))?;
    let listed = params
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no messages"))?;
    let mut messages = Vec::with_capacity(listed.len());
    // The tools' names by the ids of their calls, for the results that name only the id.
    let mut called: Vec<(String, String)> = Vec::new();
    for m in listed {
        let blocks = content(
            m.get("content")
                .ok_or_else(|| bad("a message without content"))?,
        )
        .map_err(|why| bad(&why))?;
        match m.get("role").and_then(Value::as_str) {
            Some("user") => {
                let mut parts = Vec::new();
                for block in blocks {
                    match block {
                        Block::Part(part) => parts.push(part),
                        Block::Result { id, text, is_error } => {
                            let name = called
                                .iter()
                                .find(|(call, _)| *call == id)
                                .map(|(_, name)| name.clone())
                                .unwrap_or_default();
                            messages.push(Message::ToolResult(
                                ToolResultMessage::new(id, name, text).with_is_error(is_error),
                            ));
                        }
                        Block::Use(call) => parts.push(Part::text(format!(
                            "[a call of {}: {}]",
                            call.name, call.arguments
                        ))),
                    }
                }
                if !parts.is_empty() {
                    messages.push(Message::User(UserMessage::from_parts(parts)));
                }
            }
            Some("assistant") => {
                let mut said = Vec::new();
                let mut calls = Vec::new();
                for block in blocks {
                    match block {
                        Block::Part(part) => said.push(match part.as_text() {
                            Some(t) => t.to_owned(),
                            None => "[an image]".to_owned(),
                        }),
                        Block::Use(call) => {
                            called.push((call.id.clone(), call.name.clone()));
                            calls.push(ContentBlock::ToolCall(call));
                        }
                        Block::Result { text, .. } => said.push(text),
                    }
                }
                let mut content = Vec::new();
                if !said.is_empty() {
                    content.push(ContentBlock::text(said.join("\n")));
                }
                let stop = if calls.is_empty() {
                    StopReason::Stop
                } else {
                    StopReason::ToolUse
                };
                content.extend(calls);
                messages.push(Message::Assistant(AssistantMessage::new(content, stop)));
            }
            _ => return Err(bad("a message whose role is neither user nor assistant")),
        }
    }
    let tools = match params.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|t| {
                let name = t.get("name").and_then(Value::as_str);
                let name = name.ok_or_else(|| bad("a tool without its name"))?;
                let description = t.get("description").and_then(Value::as_str);
                let schema = t.get("inputSchema").cloned();
                Ok(ToolDefinition::new(
                    name,
                    description.unwrap_or_default(),
                    schema.unwrap_or_else(|| json!({"type": "object"})),
                ))
            })
            .collect::<Result<_, RpcError>>()?,
        Some(_) => return Err(bad("tools that are not a list")),
    };
    let max_tokens = params
        .get("maxTokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("no maxTokens"))?;
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let preferences = params
        .get("modelPreferences")
        .cloned()
        .unwrap_or(Value::Null);
    let model_hints = preferences
        .get("hints")
        .and_then(Value::as_array)
        .map(|hints| {
            hints
                .iter()
                .filter_map(|h| h.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(SamplingRequest {
        server: server.to_owned(),
        messages,
        tools,
        tool_choice: params
            .get("toolChoice")
            .and_then(|c| c.get("mode"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        system_prompt: params
            .get("systemPrompt")
            .and_then(Value::as_str)
            .map(str::to_owned),
        max_tokens,
        temperature: params.get("temperature").and_then(Value::as_f64),
        stop_sequences: strings(params.get("stopSequences")),
        model_hints,
        model_preferences: preferences,
        include_context: params
            .get("includeContext")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// One content block of a sampling message.
enum Block {
    /// Text or an image.
    Part(Part),
    /// An assistant's call of a tool (`tool_use`).
    Use(ToolCall),
    /// The result of a call (`tool_result`): the call's id, its text, whether it failed.
    Result {
        id: String,
        text: String,
        is_error: bool,
    },
}

/// One message's content (a block, or a list of them, as 2025-11-25 allows).
fn content(content: &Value) -> Result<Vec<Block>, String> {
    let blocks: Vec<&Value> = match content {
        Value::Array(list) => list.iter().collect(),
        one => vec![one],
    };
    blocks.into_iter().map(block).collect()
}

/// One content block.
fn block(block: &Value) -> Result<Block, String> {
    let s = |key: &str| block.get(key).and_then(Value::as_str);
    match s("type") {
        Some("text") => Ok(Block::Part(Part::text(
            s("text").ok_or("a text block without text")?,
        ))),
        Some("image") => {
            let data = Blob::from_base64(s("data").ok_or("an image without data")?)
                .map_err(|e| format!("an image whose data is not base64: {e}"))?;
            let mime = s("mimeType").ok_or("an image without its mimeType")?;
            Ok(Block::Part(Image::new(mime, data).into()))
        }
        Some("tool_use") => {
            let id = s("id").ok_or("a tool_use without its id")?;
            let name = s("name").ok_or("a tool_use without its name")?;
            let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
            Ok(Block::Use(ToolCall::new(id, name, input.to_string())))
        }
        Some("tool_result") => {
            let id = s("toolUseId").ok_or("a tool_result without its toolUseId")?;
            let inner = match block.get("content") {
                Some(inner) => content(inner)?,
                None => Vec::new(),
            };
            let text: Vec<String> = inner
                .into_iter()
                .map(|b| match b {
                    Block::Part(p) => p.as_text().unwrap_or("[an image]").to_owned(),
                    Block::Use(c) => format!("[a call of {}]", c.name),
                    Block::Result { text, .. } => text,
                })
                .collect();
            Ok(Block::Result {
                id: id.to_owned(),
                text: text.join("\n"),
                is_error: block.get("isError").and_then(Value::as_bool) == Some(true),
            })
        }
        Some(other) => Ok(Block::Part(Part::text(format!("[{other} content]")))),
        None => Err("a content block without a type".to_owned()),
    }
}
