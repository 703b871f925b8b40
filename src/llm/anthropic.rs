//! `Anthropic`: the Anthropic Messages API, streamed.

use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{self, Call, Decode, Emitter, Endpoint};
use super::{CancelToken, Provider, Request, StreamEvent, ThinkingLevel};
use crate::Error;
use crate::message::{AssistantMessage, ContentBlock, Message, StopReason, Usage};
use crate::partial::PartialMessage;

/// The default base URL, Anthropic's.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The `anthropic-version` header sent with each request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A provider for the Anthropic Messages API (`POST {base_url}/v1/messages`, streamed).
///
/// What it sends: `x-api-key` and `anthropic-version` headers; the model, `max_tokens`, the
/// system prompt, the tools (`input_schema`), and the messages: consecutive user and tool
/// result messages are merged into one user turn (tool results as `tool_result` blocks),
/// assistant replies as `thinking` (only those with a signature, as the API requires),
/// `text` and `tool_use` blocks. A thinking level other than `Off` turns on extended
/// thinking with a budget of 1024 (`Minimal`), 4096 (`Low`), 10000 (`Medium`) or 32000
/// (`High`) tokens; `max_tokens` is raised above the budget when needed.
///
/// What it reads: `message_start` (input usage), `content_block_start` / `_delta` / `_stop`
/// for `text`, `thinking` (with `signature_delta`, kept in the reply for the next request)
/// and `tool_use` (with `input_json_delta` fragments), `message_delta` (stop reason, output
/// usage), `message_stop`, `ping`, and `error` (which becomes [`Error::Api`]). Stop reasons:
/// `end_turn` and `stop_sequence` are `Stop`, `max_tokens` is `Length`, `tool_use` is
/// `ToolUse`, `refusal` fails the reply with an [`Error::Api`] of kind `refusal`.
///
/// Usage: `input` counts all prompt tokens, cached ones included (`input_tokens` plus
/// `cache_read_input_tokens` plus `cache_creation_input_tokens`), like OpenAI's.
///
/// Failures, retries and timeouts behave as for [`OpenAiCompat`](super::OpenAiCompat).
/// `Debug` never shows the API key, and errors never contain it.
#[derive(Clone, Debug)]
pub struct Anthropic {
    endpoint: Endpoint,
    max_tokens: u32,
    temperature: Option<f32>,
}

impl Anthropic {
    /// A provider for the server at `base_url` (the part before `/v1/messages`), without a
    /// key.
    pub fn new(base_url: impl Into<String>) -> Anthropic {
        Anthropic::with_endpoint(Endpoint::new(base_url))
    }

    fn with_endpoint(endpoint: Endpoint) -> Anthropic {
        Anthropic {
            endpoint,
            max_tokens: 8192,
            temperature: None,
        }
    }

    /// A provider configured from `ANTHROPIC_BASE_URL` (default [`ANTHROPIC_BASE_URL`]) and
    /// `ANTHROPIC_API_KEY`. Empty variables count as unset.
    ///
    /// # Errors
    /// [`Error::Config`] when neither variable is set.
    pub fn from_env() -> Result<Anthropic, Error> {
        Endpoint::from_env(
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_API_KEY",
            ANTHROPIC_BASE_URL,
            "set ANTHROPIC_API_KEY, or ANTHROPIC_BASE_URL for a compatible server",
        )
        .map(Anthropic::with_endpoint)
    }

    /// The most tokens a reply may have (`max_tokens`, required by the API). Defaults to
    /// 8192.
    #[must_use]
    pub fn max_tokens(mut self, tokens: u32) -> Anthropic {
        self.max_tokens = tokens;
        self
    }

    /// The sampling temperature. Defaults to the server's default (not sent). The API
    /// accepts none with extended thinking, so it is left out then.
    #[must_use]
    pub fn temperature(mut self, temperature: f32) -> Anthropic {
        self.temperature = Some(temperature);
        self
    }

    /// The request body for `request`, as sent.
    pub fn request_body(&self, request: &Request) -> Value {
        let budget = match request.thinking {
            ThinkingLevel::Off => None,
            ThinkingLevel::Minimal => Some(1024),
            ThinkingLevel::Low => Some(4096),
            ThinkingLevel::Medium => Some(10_000),
            ThinkingLevel::High => Some(32_000),
        };
        let max_tokens = match budget {
            Some(b) => self.max_tokens.max(b + 4096),
            None => self.max_tokens,
        };
        let mut body = json!({
            "model": request.model,
            "max_tokens": max_tokens,
            "messages": messages_json(&request.messages),
            "stream": true,
        });
        let obj = body
            .as_object_mut()
            .expect("OK because it is an object literal");
        if !request.system_prompt.is_empty() {
            obj.insert("system".into(), request.system_prompt.clone().into());
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            obj.insert("tools".into(), tools.into());
        }
        match (budget, self.temperature) {
            (Some(b), _) => {
                obj.insert(
                    "thinking".into(),
                    json!({"type": "enabled", "budget_tokens": b}),
                );
            }
            (None, Some(t)) => {
                obj.insert("temperature".into(), t.into());
            }
            (None, None) => {}
        }
        body
    }
}

super::http_setters!(Anthropic, "The key sent as `x-api-key`. Defaults to none.");

/// The transcript as Anthropic messages: user turns and assistant turns alternate, so
/// consecutive user-side messages (user text, tool results) share one turn.
fn messages_json(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            Message::User(m) => ("user", vec![json!({"type": "text", "text": m.content})]),
            Message::ToolResult(r) => (
                "user",
                vec![json!({"type": "tool_result", "tool_use_id": r.tool_call_id,
                            "content": r.content, "is_error": r.is_error})],
            ),
            Message::Assistant(m) => ("assistant", assistant_blocks(m)),
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

fn assistant_blocks(m: &AssistantMessage) -> Vec<Value> {
    m.content
        .iter()
        .filter_map(|block| match block {
            // The API rejects empty text and unsigned thinking.
            ContentBlock::Text { text } if text.is_empty() => None,
            ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
            ContentBlock::Thinking {
                thinking,
                signature: Some(signature),
            } => Some(json!({"type": "thinking", "thinking": thinking, "signature": signature})),
            ContentBlock::Thinking { .. } => None,
            ContentBlock::ToolCall(call) => {
                // Invalid arguments still need an object here; the tool result told the
                // model what was wrong.
                let input = call
                    .parse_arguments()
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}));
                Some(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}))
            }
        })
        .collect()
}

impl Provider for Anthropic {
    /// Streams one Messages reply. Blocks until the reply ends, fails, times out, or
    /// `cancel` fires (which returns [`Error::Aborted`] at once).
    fn stream(
        &self,
        request: &Request,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<AssistantMessage, Error> {
        let mut headers = vec![("anthropic-version", ANTHROPIC_VERSION.to_owned())];
        if let Some(key) = &self.endpoint.api_key {
            headers.push(("x-api-key", key.clone()));
        }
        let call = Call {
            path: "/v1/messages",
            headers,
            body: self.request_body(request),
            model: &request.model,
        };
        self.endpoint
            .stream(call, Decoder::default(), cancel, on_event)
    }

    fn name(&self) -> &str {
        "anthropic"
    }
}

#[derive(Default)]
struct Decoder {
    // The server's block index of each tool_use block, with our call index.
    blocks: Vec<(u64, usize)>,
    calls: usize,
    stop: Option<String>,
    usage: Usage,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: Block,
    },
    ContentBlockDelta {
        index: u64,
        delta: Delta,
    },
    ContentBlockStop {},
    MessageDelta {
        delta: MessageDelta,
        usage: Option<WireUsage>,
    },
    MessageStop {},
    Ping {},
    Error {
        error: Value,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartMessage {
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    #[serde(other)]
    Other,
}

// The variant names are the wire's type names (`text_delta`...).
#[allow(clippy::enum_variant_names)]
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDelta {
    stop_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

impl Decode for Decoder {
    /// Handles one event; true at `message_stop`.
    fn event(&mut self, data: &str, out: &mut Emitter<'_>) -> Result<bool, Error> {
        let event: Event = serde_json::from_str(data)
            .map_err(|e| Error::Stream(format!("an event is not valid json ({e})")))?;
        match event {
            Event::MessageStart { message } => self.usage(message.usage, out),
            Event::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                Block::Text { text } if !text.is_empty() => out.emit(StreamEvent::text(text)),
                Block::Thinking { thinking } if !thinking.is_empty() => {
                    out.emit(StreamEvent::thinking(thinking))
                }
                Block::ToolUse { id, name } => {
                    self.blocks.push((index, self.calls));
                    self.calls += 1;
                    out.emit(StreamEvent::ToolCallStart { id, name });
                }
                _ => {}
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                Delta::TextDelta { text } => out.emit(StreamEvent::TextDelta { text }),
                Delta::ThinkingDelta { thinking } => out.emit(StreamEvent::thinking(thinking)),
                Delta::SignatureDelta { signature } => {
                    out.emit(StreamEvent::ThinkingSignature { signature })
                }
                Delta::InputJsonDelta { partial_json } => {
                    let call = self.blocks.iter().find(|(i, _)| *i == index).map(|b| b.1);
                    let Some(index) = call else {
                        return Err(Error::Stream(format!(
                            "input_json_delta for block {index}, which is no tool_use"
                        )));
                    };
                    if !partial_json.is_empty() {
                        out.emit(StreamEvent::ToolCallDelta {
                            index,
                            arguments: partial_json,
                        });
                    }
                }
                Delta::Other => {}
            },
            Event::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop = delta.stop_reason;
                }
                self.usage(usage, out);
            }
            Event::MessageStop {} => return Ok(true),
            Event::Error { error } => return Err(http::api_error(&error)),
            Event::ContentBlockStop {} | Event::Ping {} | Event::Unknown => {}
        }
        Ok(false)
    }

    fn finish(self, ended: bool, partial: PartialMessage) -> Result<AssistantMessage, Error> {
        if !ended {
            return Err(Error::Stream("the stream ended before message_stop".into()));
        }
        let stop = match self.stop.as_deref() {
            Some("max_tokens") => StopReason::Length,
            Some("tool_use") => StopReason::ToolUse,
            Some("refusal") => {
                return Err(Error::Api {
                    kind: "refusal".into(),
                    message: "the model refused to answer".into(),
                });
            }
            Some(_) => StopReason::Stop,
            None if self.calls > 0 => StopReason::ToolUse,
            None => StopReason::Stop,
        };
        let message = partial.to_message(stop);
        Ok(message)
    }
}

impl Decoder {
    /// Merges a usage report (`message_start` has the input, `message_delta` the output;
    /// each field, when present, is the running total).
    fn usage(&mut self, wire: Option<WireUsage>, out: &mut Emitter<'_>) {
        let Some(w) = wire else { return };
        let mut u = self.usage;
        let fresh = w.input_tokens.unwrap_or(0);
        let read = w.cache_read_input_tokens.unwrap_or(0);
        let written = w.cache_creation_input_tokens.unwrap_or(0);
        if w.input_tokens.is_some() || w.cache_read_input_tokens.is_some() {
            u.input = fresh.saturating_add(read).saturating_add(written);
            u.cache_read = read;
            u.cache_write = written;
        }
        if let Some(out) = w.output_tokens {
            u.output = out;
        }
        u.total = u.input.saturating_add(u.output);
        self.usage = u;
        out.emit(StreamEvent::Usage { usage: u });
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolDefinition;
    use crate::message::{ToolCall, ToolResultMessage};

    #[test]
    fn request_body_has_system_tools_and_alternating_turns() {
        let request = Request {
            system_prompt: "Be terse.".into(),
            model: "claude".into(),
            tools: vec![ToolDefinition {
                name: "f".into(),
                description: "does f".into(),
                parameters: json!({"type": "object"}),
            }],
            messages: vec![
                Message::user("hi"),
                Message::Assistant(AssistantMessage {
                    content: vec![
                        // Unsigned thinking (from another provider) and empty text are dropped.
                        ContentBlock::Thinking {
                            thinking: "hmm".into(),
                            signature: None,
                        },
                        ContentBlock::Text { text: "".into() },
                        ContentBlock::ToolCall(ToolCall {
                            id: "t1".into(),
                            name: "f".into(),
                            arguments: "{not json".into(),
                        }),
                    ],
                    ..AssistantMessage::default()
                }),
                Message::ToolResult(ToolResultMessage {
                    tool_call_id: "t1".into(),
                    tool_name: "f".into(),
                    content: "bad arguments".into(),
                    is_error: true,
                    details: None,
                }),
                Message::user("and now?"),
            ],
            thinking: ThinkingLevel::Off,
        };
        let body = Anthropic::new("http://x")
            .temperature(0.5)
            .request_body(&request);
        assert_eq!(
            body,
            json!({
                "model": "claude",
                "max_tokens": 8192,
                "stream": true,
                "system": "Be terse.",
                "temperature": 0.5,
                "tools": [{"name": "f", "description": "does f", "input_schema": {"type": "object"}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "bad arguments",
                         "is_error": true},
                        {"type": "text", "text": "and now?"},
                    ]},
                ],
            })
        );
    }

    #[test]
    fn thinking_raises_max_tokens_above_the_budget_and_drops_temperature() {
        let request = Request {
            thinking: ThinkingLevel::High,
            ..Request::default()
        };
        let body = Anthropic::new("http://x")
            .max_tokens(1000)
            .temperature(0.5)
            .request_body(&request);
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 32000})
        );
        assert_eq!(body["max_tokens"], json!(36096));
        assert!(body.get("temperature").is_none());
    }
}
