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
use crate::message::{AssistantMessage, ContentBlock, Message, StopReason, UserMessage};
use crate::types::StreamEvent;

/// A server's request for a model reply (`sampling/createMessage`), as the client read it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SamplingRequest {
    /// The name of the server that asks.
    pub server: String,
    /// The conversation to reply to, oldest first: `user` and `assistant` messages of text
    /// and images (audio and any other content as a note of what it was).
    pub messages: Vec<Message>,
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
    /// Why it stopped: `"endTurn"`, `"stopSequence"`, `"maxTokens"` or the client's own.
    pub stop_reason: String,
}

impl SamplingReply {
    /// A reply of `text` by `model` that ended its turn (`"endTurn"`).
    pub fn new(model: impl Into<String>, text: impl Into<String>) -> SamplingReply {
        SamplingReply {
            text: text.into(),
            model: model.into(),
            stop_reason: "endTurn".into(),
        }
    }

    /// The reply with another stop reason (`"stopSequence"`, `"maxTokens"`, ...).
    #[must_use]
    pub fn stop_reason(mut self, reason: impl Into<String>) -> SamplingReply {
        self.stop_reason = reason.into();
        self
    }

    /// The `CreateMessageResult`.
    fn to_json(&self) -> Value {
        json!({
            "role": "assistant",
            "content": {"type": "text", "text": self.text},
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
    let mut text = String::new();
    let end = provider
        .stream(&asked, cancel, &mut |event| {
            if let StreamEvent::TextDelta { text: piece } = event {
                text.push_str(&piece);
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    let mut reason = match end.stop_reason {
        StopReason::Length => "maxTokens",
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
    Ok(SamplingReply::new(end.model.unwrap_or_else(|| model.to_owned()), text).stop_reason(reason))
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
    for m in listed {
        let parts = content(
            m.get("content")
                .ok_or_else(|| bad("a message without content"))?,
        )
        .map_err(|why| bad(&why))?;
        messages.push(match m.get("role").and_then(Value::as_str) {
            Some("user") => Message::User(UserMessage::from_parts(parts)),
            Some("assistant") => {
                let text: Vec<String> = parts
                    .iter()
                    .map(|p| match p.as_text() {
                        Some(t) => t.to_owned(),
                        None => "[an image]".to_owned(),
                    })
                    .collect();
                Message::Assistant(AssistantMessage::new(
                    vec![ContentBlock::text(text.join("\n"))],
                    StopReason::Stop,
                ))
            }
            _ => return Err(bad("a message whose role is neither user nor assistant")),
        });
    }
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

/// One message's content (a block, or a list of them, as 2025-11-25 allows) as parts.
fn content(content: &Value) -> Result<Vec<Part>, String> {
    let blocks: Vec<&Value> = match content {
        Value::Array(list) => list.iter().collect(),
        one => vec![one],
    };
    blocks
        .into_iter()
        .map(|block| {
            let s = |key: &str| block.get(key).and_then(Value::as_str);
            match s("type") {
                Some("text") => Ok(Part::text(s("text").ok_or("a text block without text")?)),
                Some("image") => {
                    let data = Blob::from_base64(s("data").ok_or("an image without data")?)
                        .map_err(|e| format!("an image whose data is not base64: {e}"))?;
                    let mime = s("mimeType").ok_or("an image without its mimeType")?;
                    Ok(Image::new(mime, data).into())
                }
                Some(other) => Ok(Part::text(format!("[{other} content]"))),
                None => Err("a content block without a type".to_owned()),
            }
        })
        .collect()
}
