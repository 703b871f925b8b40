//! `OpenAiCompat`: the OpenAI Chat Completions API, as OpenAI, Ollama, vLLM, llama.cpp,
//! LM Studio, OpenRouter, DeepSeek and others serve it.

use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{self, Call, Decode, Emitter, Endpoint};
use super::{CancelToken, Provider, Request, StreamEvent, ThinkingLevel};
use crate::Error;
use crate::message::{AssistantMessage, Message, StopReason, Usage};
use crate::partial::PartialMessage;

/// The default base URL, OpenAI's.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// A provider for OpenAI-compatible Chat Completions servers (`POST {base_url}/chat/completions`,
/// streamed).
///
/// What it sends: the system prompt as a `system` message, user messages, assistant messages
/// with their text and `tool_calls`, tool results as `tool` messages, the tools as
/// `function` tools, the model, `reasoning_effort` for a thinking level other than `Off`,
/// `stream: true` with `stream_options.include_usage`, plus [`OpenAiCompat::temperature`],
/// [`OpenAiCompat::max_tokens`] and [`OpenAiCompat::extra_body`] when set. Reasoning text
/// of earlier replies is not sent back (Chat Completions has no field for it).
///
/// What it reads: text deltas, reasoning deltas (`reasoning_content`, or `reasoning`), tool
/// calls keyed by `index` with arguments in fragments (a repeated id or name, as some servers
/// send, is ignored), usage (with cached and reasoning tokens where reported) from the chunk
/// that carries it, `finish_reason` (`stop`, `length`, `tool_calls`; `content_filter` fails
/// the reply with an [`Error::Api`] of kind `content_filter`), and `data: [DONE]`.
///
/// Failures: HTTP errors become [`Error::Http`] with the server's own message; an `error`
/// object in the stream becomes [`Error::Api`]; a stream that ends before `finish_reason`,
/// or carries malformed JSON, becomes [`Error::Stream`]; a connection that drops mid-reply
/// becomes [`Error::Connection`]. What streamed before the failure was already delivered as
/// events, so the agent keeps it as the partial reply. Retries and timeouts: see
/// [`OpenAiCompat::retry`] and the timeout setters.
///
/// `Debug` never shows the API key, and errors never contain it.
///
/// ```no_run
/// use pagent::Agent;
/// use pagent::llm::OpenAiCompat;
///
/// // A local llama.cpp or Ollama server needs no key.
/// let provider = OpenAiCompat::new("http://127.0.0.1:8080/v1").temperature(0.0);
/// let agent = Agent::builder().provider(provider).model("smollm2").build()?;
/// println!("{}", agent.prompt("Say hi")?.text());
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct OpenAiCompat {
    endpoint: Endpoint,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    extra_body: serde_json::Map<String, Value>,
}

impl OpenAiCompat {
    /// A provider for the server at `base_url` (the part before `/chat/completions`, such as
    /// `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`), without a key.
    pub fn new(base_url: impl Into<String>) -> OpenAiCompat {
        OpenAiCompat::with_endpoint(Endpoint::new(base_url))
    }

    fn with_endpoint(endpoint: Endpoint) -> OpenAiCompat {
        OpenAiCompat {
            endpoint,
            temperature: None,
            max_tokens: None,
            extra_body: serde_json::Map::new(),
        }
    }

    /// A provider configured from `OPENAI_BASE_URL` (default [`OPENAI_BASE_URL`]) and
    /// `OPENAI_API_KEY`. Empty variables count as unset.
    ///
    /// # Errors
    /// [`Error::Config`] when neither variable is set: OpenAI itself needs a key, a local
    /// server needs its URL.
    pub fn from_env() -> Result<OpenAiCompat, Error> {
        Endpoint::from_env(
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            OPENAI_BASE_URL,
            "set OPENAI_API_KEY, or OPENAI_BASE_URL for a local server",
        )
        .map(OpenAiCompat::with_endpoint)
    }

    /// The sampling temperature. Defaults to the server's default (not sent).
    #[must_use]
    pub fn temperature(mut self, temperature: f32) -> OpenAiCompat {
        self.temperature = Some(temperature);
        self
    }

    /// The most tokens a reply may have (`max_tokens`). Defaults to the server's limit (not
    /// sent).
    #[must_use]
    pub fn max_tokens(mut self, tokens: u32) -> OpenAiCompat {
        self.max_tokens = Some(tokens);
        self
    }

    /// Extra top-level fields merged into every request body (`top_p`, `seed`,
    /// `parallel_tool_calls`, a server's own options...); they override what the provider
    /// writes. Non-object values are ignored. Defaults to none.
    #[must_use]
    pub fn extra_body(mut self, fields: Value) -> OpenAiCompat {
        if let Value::Object(map) = fields {
            self.extra_body.extend(map);
        }
        self
    }

    /// The request body for `request`, as sent.
    pub fn request_body(&self, request: &Request) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if !request.system_prompt.is_empty() {
            messages.push(json!({"role": "system", "content": request.system_prompt}));
        }
        messages.extend(request.messages.iter().filter_map(message_json));
        let mut body = json!({
            "model": request.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        let obj = body
            .as_object_mut()
            .expect("OK because it is an object literal");
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    }})
                })
                .collect();
            obj.insert("tools".into(), tools.into());
        }
        let effort = match request.thinking {
            ThinkingLevel::Off => None,
            ThinkingLevel::Minimal => Some("minimal"),
            ThinkingLevel::Low => Some("low"),
            ThinkingLevel::Medium => Some("medium"),
            ThinkingLevel::High => Some("high"),
        };
        if let Some(effort) = effort {
            obj.insert("reasoning_effort".into(), effort.into());
        }
        if let Some(t) = self.temperature {
            obj.insert("temperature".into(), t.into());
        }
        if let Some(n) = self.max_tokens {
            obj.insert("max_tokens".into(), n.into());
        }
        obj.extend(self.extra_body.clone());
        body
    }
}

super::http_setters!(
    OpenAiCompat,
    "The key sent as `Authorization: Bearer <key>`. Defaults to none (local servers)."
);

fn message_json(message: &Message) -> Option<Value> {
    match message {
        Message::User(m) => Some(json!({"role": "user", "content": m.content})),
        Message::ToolResult(r) => Some(json!({
            "role": "tool", "tool_call_id": r.tool_call_id, "content": r.content,
        })),
        Message::Assistant(m) => {
            let text = m.text();
            let calls: Vec<Value> = m
                .tool_calls()
                .map(|c| {
                    let args = if c.arguments.trim().is_empty() {
                        "{}"
                    } else {
                        &c.arguments
                    };
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": args}})
                })
                .collect();
            // An empty reply (aborted or failed before anything arrived) says nothing and
            // some servers reject an empty assistant message.
            if text.is_empty() && calls.is_empty() {
                return None;
            }
            let mut out = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                out["tool_calls"] = calls.into();
            }
            Some(out)
        }
    }
}

impl Provider for OpenAiCompat {
    /// Streams one Chat Completions reply. Blocks until the reply ends, fails, times out, or
    /// `cancel` fires (which returns [`Error::Aborted`] at once).
    fn stream(
        &self,
        request: &Request,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<AssistantMessage, Error> {
        let mut headers = Vec::new();
        if let Some(key) = &self.endpoint.api_key {
            headers.push(("authorization", format!("Bearer {key}")));
        }
        let call = Call {
            path: "/chat/completions",
            headers,
            body: self.request_body(request),
            model: &request.model,
        };
        self.endpoint
            .stream(call, Decoder::default(), cancel, on_event)
    }

    fn name(&self) -> &str {
        "openai"
    }
}

#[derive(Default)]
struct Decoder {
    // The server's `index` of each call we started, in our call order.
    calls: Vec<u64>,
    finish: Option<String>,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    tool_calls: Option<Vec<ToolDelta>>,
}

#[derive(Deserialize)]
struct ToolDelta {
    index: Option<u64>,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: u64,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: u64,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: u64,
}

impl Decode for Decoder {
    /// Handles one `data:` payload; true at `[DONE]`.
    fn event(&mut self, data: &str, out: &mut Emitter<'_>) -> Result<bool, Error> {
        if data.trim() == "[DONE]" {
            return Ok(true);
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| Error::Stream(format!("a chunk is not valid json ({e})")))?;
        if let Some(error) = chunk.error {
            return Err(http::api_error(&error));
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(reason);
            }
        }
        if let Some(u) = chunk.usage {
            let usage = Usage {
                input: u.prompt_tokens,
                output: u.completion_tokens,
                cache_read: u.prompt_tokens_details.map_or(0, |d| d.cached_tokens),
                reasoning: u
                    .completion_tokens_details
                    .map_or(0, |d| d.reasoning_tokens),
                total: u
                    .total_tokens
                    .max(u.prompt_tokens.saturating_add(u.completion_tokens)),
                ..Usage::default()
            };
            out.emit(StreamEvent::Usage { usage });
        }
        Ok(false)
    }

    fn finish(self, _ended: bool, partial: PartialMessage) -> Result<AssistantMessage, Error> {
        let Some(reason) = self.finish else {
            return Err(Error::Stream(
                "the stream ended before a finish_reason".into(),
            ));
        };
        let stop = match reason.as_str() {
            "length" => StopReason::Length,
            "tool_calls" | "function_call" => StopReason::ToolUse,
            "content_filter" => {
                return Err(Error::Api {
                    kind: reason,
                    message: "the reply was stopped by the content filter".into(),
                });
            }
            // Some servers say `stop` for a reply that calls tools.
            _ if !self.calls.is_empty() => StopReason::ToolUse,
            _ => StopReason::Stop,
        };
        let message = partial.to_message(stop);
        Ok(message)
    }
}

impl Decoder {
    fn delta(&mut self, delta: Delta, out: &mut Emitter<'_>) {
        for text in [delta.reasoning_content, delta.reasoning]
            .into_iter()
            .flatten()
        {
            if !text.is_empty() {
                out.emit(StreamEvent::ThinkingDelta { text });
            }
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            out.emit(StreamEvent::TextDelta { text });
        }
        for call in delta.tool_calls.into_iter().flatten() {
            // Servers that send one call per delta may leave out `index`.
            let key = call
                .index
                .unwrap_or(self.calls.len().saturating_sub(1) as u64);
            let (name, arguments) = match call.function {
                Some(f) => (f.name, f.arguments),
                None => (None, None),
            };
            let index = match self.calls.iter().position(|&k| k == key) {
                Some(i) => i,
                None => {
                    self.calls.push(key);
                    let id = call.id.unwrap_or_else(|| format!("call_{key}"));
                    let name = name.unwrap_or_default();
                    out.emit(StreamEvent::ToolCallStart { id, name });
                    self.calls.len() - 1
                }
            };
            if let Some(arguments) = arguments.filter(|a| !a.is_empty()) {
                out.emit(StreamEvent::ToolCallDelta { index, arguments });
            }
        }
    }
}
