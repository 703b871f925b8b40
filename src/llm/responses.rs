//! `OpenAiResponses`: the OpenAI Responses API (`POST /responses`, streamed), as OpenAI,
//! Azure OpenAI, xAI and the Open Responses servers (Ollama, vLLM, LM Studio, llama.cpp)
//! serve it.
//!
//! The request is written from the transcript each turn (`store: false`, stateless): user
//! messages and tool results as input items, each reply as the items it streamed (reasoning,
//! text, function calls). The reply streams as typed events, read in [`Decoder`].

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::http::{Call, Decode, Emitter, Endpoint};
use super::parts::{Collected, DataUrl, DocumentText};
use super::pieces::{self, Builder, Dialect, Payload, Side, element};
use super::tagged::{Borrowed, Raw, event_type, field, string, text};
use super::{
    CancelToken, OnEvent, Provider, ReplyEnd, Request, StreamEvent, ThinkingLevel, ToolDefinition,
};
use crate::Error;
use crate::content::{Part, Source};
use crate::message::{AssistantMessage, ContentBlock, Message, StopReason, Usage};
use crate::output::OpenAiFormat;

/// A provider for the OpenAI Responses API (`POST {base_url}/responses`, streamed).
///
/// What it sends: the system prompt as `instructions`; user messages as `message` items
/// (`input_text`, `input_image`, `input_file` parts); each earlier reply as its items, in
/// order: its reasoning (the `reasoning` item it streamed, sent back opaque: see below), its
/// text as an `assistant` message, its tool calls as `function_call` items; tool results as
/// `function_call_output` items; the tools as `function` tools; a structured answer's schema
/// as `text.format` (`json_schema`, with `strict: true` where the schema has a strict form,
/// and `tool_choice: "none"` beside the tools when the model is to answer now; see
/// [`OutputRequest`](super::OutputRequest)); `reasoning` with the effort
/// of the thinking level (`minimal`, `low`, `medium`, `high`; nothing for `Off`) and
/// `summary: "auto"`, `stream: true`, `store` ([`OpenAiResponses::store`], default `false`)
/// with `include: ["reasoning.encrypted_content"]`, plus [`OpenAiResponses::temperature`],
/// [`OpenAiResponses::max_output_tokens`], [`OpenAiResponses::prompt_cache_key`],
/// [`OpenAiResponses::prompt_cache_retention`] and [`OpenAiResponses::extra_body`] when set.
///
/// # Reasoning across turns
/// A reasoning model keeps its reasoning between turns only when it gets it back. With
/// `store: false` (the default: nothing is kept on the server) the server sends each
/// reasoning item encrypted; the reply keeps it as a [`ContentBlock::Thinking`] whose text
/// is the reasoning summary and whose `signature` is the item's id and encrypted content
/// (a JSON object, opaque to everything but this provider), and the next request sends the
/// item back as it came. Thinking blocks of other providers are not sent (Chat Completions'
/// reasoning text, Anthropic's signed thinking), and a reasoning item is sent only before
/// the reply's output it belongs to (the API refuses one without it).
///
/// # Chaining
/// With [`OpenAiResponses::previous_response_id`] on (and `store: true`, which it turns on),
/// a request after a reply of this API sends that reply's id as `previous_response_id` and
/// only the messages after it: the server holds the rest. Without it (the default), each
/// request carries the whole transcript, so `transform_context`, a context policy, retries
/// and a switch of provider all work as with the other providers.
///
/// What it reads: `response.created` (the id and model), `response.output_item.added` /
/// `.done` (function calls start; a reasoning item's encrypted content; whole items a server
/// did not stream as deltas), `response.output_text.delta`, `response.refusal.delta` (as
/// text), `response.reasoning_summary_text.delta` and `response.reasoning_text.delta` (as
/// thinking; summary parts separated by a blank line), `response.function_call_arguments`
/// `.delta` / `.done`, and the end: `response.completed`, `response.incomplete`
/// (`max_output_tokens` is `Length`; `content_filter` fails the reply with an
/// [`Error::Api`] of kind `content_filter`), `response.failed` and `error` (an
/// [`Error::Api`] with the server's code and message). Usage comes from the final response:
/// `input_tokens` (cached ones included, with `cached_tokens` as `cache_read` and
/// `cache_write_tokens` as `cache_write`),
/// `output_tokens` (with `reasoning_tokens`). Other event types are ignored. A stream that
/// ends before its final event is an [`Error::Stream`]; what streamed before is kept as the
/// partial reply.
///
/// Failures, retries, timeouts and redaction behave as for
/// [`OpenAiCompat`](super::OpenAiCompat). `Debug` never shows the API key.
///
/// ```no_run
/// use pagent::Agent;
/// use pagent::llm::OpenAiResponses;
///
/// let provider = OpenAiResponses::new("https://api.openai.com/v1")
///     .api_key(std::env::var("OPENAI_API_KEY").unwrap_or_default())
///     .prompt_cache_key("my-app-v1");
/// let agent = Agent::builder().provider(provider).model("gpt-5-mini").build()?;
/// println!("{}", agent.prompt("Say hi")?.text());
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct OpenAiResponses {
    endpoint: Endpoint,
    temperature: Option<f32>,
    max_output_tokens: Option<u32>,
    store: bool,
    chain: bool,
    encrypted_reasoning: bool,
    summary: Option<String>,
    cache_key: Option<String>,
    cache_retention: Option<String>,
    extra_body: serde_json::Map<String, Value>,
}

impl OpenAiResponses {
    /// A provider for the server at `base_url` (the part before `/responses`, such as
    /// `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`), without a key.
    pub fn new(base_url: impl Into<String>) -> OpenAiResponses {
        OpenAiResponses::with_endpoint(Endpoint::new(base_url))
    }

    fn with_endpoint(endpoint: Endpoint) -> OpenAiResponses {
        OpenAiResponses {
            endpoint,
            temperature: None,
            max_output_tokens: None,
            store: false,
            chain: false,
            encrypted_reasoning: true,
            summary: Some("auto".to_owned()),
            cache_key: None,
            cache_retention: None,
            extra_body: serde_json::Map::new(),
        }
    }

    /// A provider configured from `OPENAI_BASE_URL` (default
    /// [`OPENAI_BASE_URL`](super::OPENAI_BASE_URL)), `OPENAI_API_KEY` and
    /// `OPENAI_CUSTOM_HEADERS`, as [`OpenAiCompat::from_env`](super::OpenAiCompat::from_env)
    /// reads them. [`from_env`](super::from_env) picks this provider when `OPENAI_API` is
    /// `responses`.
    ///
    /// # Errors
    /// [`Error::NotConfigured`] when neither the base URL nor the key is set;
    /// [`Error::Config`] naming the variable whose value cannot be used.
    pub fn from_env() -> Result<OpenAiResponses, Error> {
        Endpoint::from_env(
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            Some(super::OPENAI_HEADERS_VAR),
            super::OPENAI_BASE_URL,
            "set OPENAI_API_KEY, or OPENAI_BASE_URL for a local server",
        )
        .map(OpenAiResponses::with_endpoint)
    }

    /// The sampling temperature. Defaults to the server's default (not sent).
    #[must_use]
    pub fn temperature(mut self, temperature: f32) -> OpenAiResponses {
        self.temperature = Some(temperature);
        self
    }

    /// The most tokens a reply may have, reasoning included (`max_output_tokens`). Defaults
    /// to the server's limit (not sent).
    #[must_use]
    pub fn max_output_tokens(mut self, tokens: u32) -> OpenAiResponses {
        self.max_output_tokens = Some(tokens);
        self
    }

    /// Whether the server keeps each response (`store`). Defaults to `false`: nothing is
    /// kept, and the reasoning comes back encrypted in the reply, for the next request (see
    /// the type's docs). `true` lets the server keep them (for its dashboards, evals, or
    /// [`OpenAiResponses::previous_response_id`]).
    #[must_use]
    pub fn store(mut self, store: bool) -> OpenAiResponses {
        self.store = store;
        self
    }

    /// Whether a request after a reply of this API names it as `previous_response_id` and
    /// sends only the messages after it (the server keeps the rest). Defaults to `false`.
    /// `true` turns [`OpenAiResponses::store`] on, which chaining needs.
    #[must_use]
    pub fn previous_response_id(mut self, chain: bool) -> OpenAiResponses {
        self.chain = chain;
        if chain {
            self.store = true;
        }
        self
    }

    /// Whether a stateless request (`store: false`) asks for the encrypted reasoning
    /// (`include: ["reasoning.encrypted_content"]`), so that the reasoning survives between
    /// turns. Defaults to `true`; turn it off for a server that refuses the field.
    #[must_use]
    pub fn encrypted_reasoning(mut self, on: bool) -> OpenAiResponses {
        self.encrypted_reasoning = on;
        self
    }

    /// The reasoning summary asked for with a thinking level other than `Off`
    /// (`reasoning.summary`: `auto`, `concise`, `detailed`), streamed as thinking; `None`
    /// asks for none. Defaults to `auto`.
    #[must_use]
    pub fn reasoning_summary(mut self, summary: Option<&str>) -> OpenAiResponses {
        self.summary = summary.map(str::to_owned);
        self
    }

    /// The key the server groups requests by for its prompt cache (`prompt_cache_key`):
    /// requests with the same key and the same prompt start are routed to the same cache.
    /// Use one key per agent (or per user) and prompt. Defaults to none (not sent).
    #[must_use]
    pub fn prompt_cache_key(mut self, key: impl Into<String>) -> OpenAiResponses {
        self.cache_key = Some(key.into());
        self
    }

    /// How long the server keeps a cached prompt (`prompt_cache_retention`: `in_memory` or
    /// `24h`, where the model offers it). Defaults to the server's default (not sent).
    #[must_use]
    pub fn prompt_cache_retention(mut self, retention: impl Into<String>) -> OpenAiResponses {
        self.cache_retention = Some(retention.into());
        self
    }

    /// Extra top-level fields merged into every request body (`parallel_tool_calls`,
    /// `service_tier`, `text`, `truncation`, a server's own options...); they override
    /// what the provider writes. Non-object values are ignored. Defaults to none.
    #[must_use]
    pub fn extra_body(mut self, fields: Value) -> OpenAiResponses {
        if let Value::Object(map) = fields {
            self.extra_body.extend(map);
        }
        self
    }

    /// The request body for `request`, as sent (parsed back from the bytes it writes).
    pub fn request_body(&self, request: &Request) -> Value {
        // OK because the bytes were written by serde_json from JSON values.
        serde_json::from_slice(&self.payload(request).to_vec()).expect("the body is valid JSON")
    }

    /// Writes the request body for `request` to `out`, as it is sent: the JSON of the
    /// messages the request's [`BodyCache`](super::BodyCache) holds comes from it, the rest
    /// is serialized (and kept there), and the pieces go out through a buffer of 128 KB as
    /// they go to the socket, never joined into one buffer first.
    ///
    /// # Errors
    /// The errors of `out`.
    pub fn write_body(
        &self,
        request: &Request,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        self.payload(request).write_to(out)
    }

    /// The request body for `request`, its messages' JSON from the request's cache.
    fn payload(&self, request: &Request) -> Payload {
        let documents = self.endpoint.accepts.takes_documents();
        let dialect = Dialect {
            api: "responses",
            documents,
            accepts: self.endpoint.accepts,
        };
        let capacity = super::parts::arena_capacity(request);
        let mut b = Builder::new(request.body_cache.as_ref(), dialect, cannot_carry, capacity);
        let (previous, messages) = match self.chain {
            true => chained(&request.messages),
            false => (None, &request.messages[..]),
        };
        let tools = (!request.tools.is_empty()).then(|| {
            b.tools_json(&request.tools, "", |tools| {
                // OK because writing to a String cannot fail, and the tools serialize.
                serde_json::to_string(&Tools(tools)).expect("the tools serialize")
            })
        });
        let system = (!request.system_prompt.is_empty()).then(|| {
            b.system_json(&request.system_prompt, "", |text| {
                // OK because writing to a String cannot fail.
                serde_json::to_string(text).expect("a string serializes")
            })
        });
        let head = Body {
            provider: self,
            request,
            previous,
            tools: tools.as_deref(),
            system: system.as_deref(),
            head: true,
        };
        let input = |b: &mut Builder| write_input(b, messages, documents);
        let input = (!self.extra_body.contains_key("input")).then_some(&input as _);
        pieces::object(
            &mut b,
            &head,
            "input",
            input,
            &Body {
                head: false,
                ..head
            },
        );
        b.finish()
    }
}

super::http_setters!(
    OpenAiResponses,
    "The key sent as `Authorization: Bearer <key>`. Defaults to none (local servers). For \
     Azure OpenAI, send it as `api-key` with [`OpenAiResponses::header`] instead."
);

/// The fields of the Responses body of one request around its input, borrowing from it: the
/// head (the model and instructions) or the tail (the rest, then `extra_body`), written field
/// by field, each known field left out when `extra_body` has the same key (the extra value
/// wins).
#[derive(Clone, Copy)]
struct Body<'a> {
    provider: &'a OpenAiResponses,
    request: &'a Request,
    /// The reply chained from.
    previous: Option<&'a str>,
    /// The request's tools as JSON, from the body cache (`None` for no tools).
    tools: Option<&'a RawValue>,
    /// The system prompt as JSON, from the body cache (`None` for none).
    system: Option<&'a RawValue>,
    head: bool,
}

impl serde::Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (p, r) = (self.provider, self.request);
        let extra = &p.extra_body;
        let mut map = s.serialize_map(None)?;
        macro_rules! field {
            ($key:literal, $value:expr) => {
                if !extra.contains_key($key) {
                    map.serialize_entry($key, $value)?;
                }
            };
        }
        if self.head {
            field!("model", &r.model);
            if let Some(system) = self.system {
                field!("instructions", system);
            }
            return map.end();
        }
        if let Some(id) = self.previous {
            field!("previous_response_id", id);
        }
        if let Some(tools) = self.tools {
            field!("tools", tools);
        }
        if let Some(output) = &r.output {
            field!(
                "text",
                &TextFormat {
                    format: OpenAiFormat::new(&output.schema, true),
                }
            );
            // The tools stay listed (the prompt cache keeps its prefix), and are not called.
            if output.answer_now && !r.tools.is_empty() {
                field!("tool_choice", "none");
            }
        }
        field!("stream", &true);
        field!("store", &p.store);
        if !p.store && p.encrypted_reasoning {
            field!("include", &["reasoning.encrypted_content"]);
        }
        if let Some(effort) = effort(r.thinking) {
            field!(
                "reasoning",
                &Reasoning {
                    effort,
                    summary: p.summary.as_deref(),
                }
            );
        }
        if let Some(t) = p.temperature {
            field!("temperature", &t);
        }
        if let Some(n) = p.max_output_tokens {
            field!("max_output_tokens", &n);
        }
        if let Some(key) = &p.cache_key {
            field!("prompt_cache_key", key);
        }
        if let Some(retention) = &p.cache_retention {
            field!("prompt_cache_retention", retention);
        }
        for (key, value) in extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// `text` for a structured answer: `{"format": {"type": "json_schema", ..}}`.
#[derive(serde::Serialize)]
struct TextFormat<'a> {
    format: OpenAiFormat<'a>,
}

fn effort(thinking: ThinkingLevel) -> Option<&'static str> {
    match thinking {
        ThinkingLevel::Off => None,
        ThinkingLevel::Minimal => Some("minimal"),
        ThinkingLevel::Low => Some("low"),
        ThinkingLevel::Medium => Some("medium"),
        ThinkingLevel::High => Some("high"),
    }
}

#[derive(serde::Serialize)]
struct Reasoning<'a> {
    effort: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<&'a str>,
}

/// The id of the newest reply to chain from, and the messages after it: the last assistant
/// message, when this API produced it (its id starts `resp_`); else none and all of them.
fn chained(messages: &[Arc<Message>]) -> (Option<&str>, &[Arc<Message>]) {
    let last = messages.iter().rposition(|m| m.as_assistant().is_some());
    let Some(at) = last else {
        return (None, messages);
    };
    match messages[at]
        .as_assistant()
        .and_then(|m| m.response_id.as_deref())
    {
        Some(id) if id.starts_with("resp_") => (Some(id), &messages[at + 1..]),
        _ => (None, messages),
    }
}

/// The messages as input items; `documents` says whether documents of text go as
/// `input_file` (else as `input_text`).
fn write_input(b: &mut Builder, messages: &[Arc<Message>], documents: bool) {
    let write = move |m: &Message, out: &mut Vec<u8>| {
        write_items(m, documents, out);
        out.len()
    };
    b.raw(b"[");
    let mut first = true;
    for message in messages {
        let piece = b.piece(message, &write);
        b.push(&piece, Side::Main, &mut first, false);
    }
    b.raw(b"]");
}

/// The input items of one message (see [`super::pieces`]).
fn write_items(message: &Message, documents: bool, out: &mut Vec<u8>) {
    match message {
        Message::User(m) => element(
            out,
            &InputMessage {
                role: "user",
                parts: Parts(&m.content, documents),
            },
        ),
        Message::ToolResult(r) => element(
            out,
            &ToolOutput {
                call_id: &r.tool_call_id,
                parts: Parts(&r.content, documents),
            },
        ),
        Message::Assistant(m) => reply_items(m, out),
    }
}

/// The items of one earlier reply, in the order it streamed them.
fn reply_items(m: &AssistantMessage, out: &mut Vec<u8>) {
    let blocks = &m.content[..];
    let mut i = 0;
    while i < blocks.len() {
        match &blocks[i] {
            ContentBlock::Text { .. } => {
                // Consecutive text blocks are one message.
                let end = blocks[i..]
                    .iter()
                    .position(|b| !matches!(b, ContentBlock::Text { .. }))
                    .map_or(blocks.len(), |n| i + n);
                let text = &blocks[i..end];
                if text
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Text { text } if !text.is_empty()))
                {
                    element(out, &AssistantText(text));
                }
                i = end;
                continue;
            }
            ContentBlock::Thinking {
                thinking,
                signature: Some(signature),
            } => {
                // A reasoning item goes only before an output item of its reply.
                let followed = blocks[i + 1..].iter().any(|b| match b {
                    ContentBlock::Text { text } => !text.is_empty(),
                    ContentBlock::ToolCall(_) => true,
                    _ => false,
                });
                if let (true, Some(item)) = (followed, ReasoningItem::parse(signature)) {
                    element(
                        out,
                        &SentReasoning {
                            item,
                            summary: thinking,
                        },
                    );
                }
            }
            ContentBlock::Thinking { .. } => {}
            ContentBlock::ToolCall(call) => element(
                out,
                &FunctionCall {
                    kind: "function_call",
                    call_id: &call.id,
                    name: &call.name,
                    arguments: if call.arguments.trim().is_empty() {
                        "{}"
                    } else {
                        &call.arguments
                    },
                },
            ),
        }
        i += 1;
    }
}

/// A user message item: `{"type":"message","role":"user","content":[parts]}`.
struct InputMessage<'a> {
    role: &'static str,
    parts: Parts<'a>,
}

impl serde::Serialize for InputMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("type", "message")?;
        map.serialize_entry("role", self.role)?;
        map.serialize_entry("content", &self.parts)?;
        map.end()
    }
}

/// A tool result item: its output is the text when the result is text only, else the list
/// of parts.
struct ToolOutput<'a> {
    call_id: &'a str,
    parts: Parts<'a>,
}

impl serde::Serialize for ToolOutput<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("type", "function_call_output")?;
        map.serialize_entry("call_id", self.call_id)?;
        if self.parts.0.iter().all(|p| matches!(p, Part::Text { .. })) {
            map.serialize_entry("output", &super::TextParts(self.parts.0))?;
        } else {
            map.serialize_entry("output", &self.parts)?;
        }
        map.end()
    }
}

/// Parts as Responses content: `input_text`, `input_image` (a URL or a `data:` URL),
/// `input_file` (`file_url`, or `file_data` as a `data:` URL with its file name); a
/// document of text is `input_text` when the flag (documents) is off.
#[derive(Clone, Copy)]
struct Parts<'a>(&'a [Part], bool);

impl serde::Serialize for Parts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for part in self.0 {
            seq.serialize_element(&WirePart(part, self.1))?;
        }
        seq.end()
    }
}

struct WirePart<'a>(&'a Part, bool);

impl serde::Serialize for WirePart<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        match self.0 {
            Part::Text { text } => {
                map.serialize_entry("type", "input_text")?;
                map.serialize_entry("text", text)?;
            }
            Part::Document(d) if d.is_text() && !self.1 => {
                map.serialize_entry("type", "input_text")?;
                map.serialize_entry("text", &Collected(DocumentText(d)))?;
            }
            Part::Image(image) => {
                map.serialize_entry("type", "input_image")?;
                map.serialize_entry("detail", "auto")?;
                map.serialize_entry("image_url", &DataUrl(&image.source))?;
            }
            // Refused by the check before the body is built.
            Part::Audio(_) => return Err(serde::ser::Error::custom("audio")),
            Part::Document(document) => {
                map.serialize_entry("type", "input_file")?;
                match &document.source {
                    Source::Url { url } => map.serialize_entry("file_url", url)?,
                    source => {
                        let name = document
                            .name
                            .as_deref()
                            .unwrap_or(match source.media_type() {
                                Some("application/pdf") => "document.pdf",
                                _ => "document.txt",
                            });
                        map.serialize_entry("filename", name)?;
                        map.serialize_entry("file_data", &DataUrl(source))?;
                    }
                }
            }
        }
        map.end()
    }
}

/// The text blocks of a reply as an assistant message.
struct AssistantText<'a>(&'a [ContentBlock]);

impl serde::Serialize for AssistantText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("type", "message")?;
        map.serialize_entry("role", "assistant")?;
        map.serialize_entry("content", &Joined(self.0))?;
        map.end()
    }
}

struct Joined<'a>(&'a [ContentBlock]);

impl serde::Serialize for Joined<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            [ContentBlock::Text { text }] => s.serialize_str(text),
            blocks => s.collect_str(&super::openai::JoinedText(blocks)),
        }
    }
}

#[derive(serde::Serialize)]
struct FunctionCall<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    call_id: &'a str,
    name: &'a str,
    arguments: &'a str,
}

/// A reasoning item as the reply kept it in a thinking block's signature.
#[derive(Deserialize, serde::Serialize)]
struct ReasoningItem<'a> {
    #[serde(rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    encrypted_content: Option<Cow<'a, str>>,
}

impl<'a> ReasoningItem<'a> {
    /// The item a signature holds, if this provider wrote it.
    fn parse(signature: &'a str) -> Option<ReasoningItem<'a>> {
        if !signature.starts_with('{') {
            return None;
        }
        serde_json::from_str::<ReasoningItem<'_>>(signature)
            .ok()
            .filter(|item| item.kind == "reasoning")
    }

    /// The signature that keeps the item `id` (with its encrypted content) in a reply.
    fn signature(id: &str, encrypted_content: Option<&str>) -> String {
        // OK because the item is strings only.
        serde_json::to_string(&ReasoningItem {
            kind: Cow::Borrowed("reasoning"),
            id: Cow::Borrowed(id),
            encrypted_content: encrypted_content.map(Cow::Borrowed),
        })
        .expect("strings serialize")
    }
}

/// True when `signature` is a reasoning item of the Responses API (which other providers
/// must not send as their own signature).
pub(crate) fn is_reasoning_item(signature: &str) -> bool {
    ReasoningItem::parse(signature).is_some()
}

/// A reasoning item sent back: its id, its summary and its encrypted content.
struct SentReasoning<'a> {
    item: ReasoningItem<'a>,
    summary: &'a str,
}

impl serde::Serialize for SentReasoning<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("type", "reasoning")?;
        map.serialize_entry("id", &self.item.id)?;
        let summary: &[Summary<'_>] = if self.summary.is_empty() {
            &[]
        } else {
            &[Summary {
                kind: "summary_text",
                text: self.summary,
            }]
        };
        map.serialize_entry("summary", summary)?;
        if let Some(content) = &self.item.encrypted_content {
            map.serialize_entry("encrypted_content", content)?;
        }
        map.end()
    }
}

#[derive(serde::Serialize)]
struct Summary<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

struct Tools<'a>(&'a [ToolDefinition]);

impl serde::Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|t| WireTool {
            kind: "function",
            name: &t.name,
            description: &t.description,
            parameters: &t.parameters,
            // Strict mode needs every property required and no others allowed, which
            // schemas written for other providers rarely say.
            strict: false,
        }))
    }
}

#[derive(serde::Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
    strict: bool,
}

/// Why the Responses API cannot carry `part`, when it cannot.
fn cannot_carry(part: &Part) -> Option<&'static str> {
    match part {
        Part::Audio(_) => Some("which the Responses API cannot carry: its input takes no audio"),
        _ => None,
    }
}

impl Provider for OpenAiResponses {
    /// Streams one Responses reply. Blocks until the reply ends, fails, times out, or
    /// `cancel` fires (which returns [`Error::Aborted`] at once).
    fn stream(
        &self,
        request: &Request,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, Error> {
        let body = self
            .payload(request)
            .checked(request, self.endpoint.accepts, cannot_carry)?;
        let call = Call {
            path: "/responses",
            headers: super::http::bearer,
            body,
        };
        self.endpoint
            .stream(call, Decoder::default(), cancel, on_event)
    }

    fn name(&self) -> &str {
        "openai-responses"
    }

    /// The base URL and headers, checked when the provider was made.
    fn check(&self) -> Result<(), Error> {
        self.endpoint.check()
    }

    /// The base URL's host and port.
    fn server_address(&self) -> Option<super::ServerAddress> {
        self.endpoint.server_address()
    }

    /// Asks llama.cpp's `GET /props`, else `GET /v1/models` (vLLM, LM Studio, OpenRouter),
    /// as [`OpenAiCompat`](super::OpenAiCompat) does.
    fn context_window(&self, model: &str, cancel: &CancelToken) -> Option<u64> {
        super::count::openai_window(&self.endpoint, model, cancel)
    }

    /// Counts a request with `POST /responses/input_tokens`; a server without it (llama.cpp
    /// answers 404) is not asked again.
    fn token_counter(&self) -> Option<std::sync::Arc<dyn super::TokenCounter>> {
        Some(std::sync::Arc::new(super::count::ResponsesCounter::new(
            self.clone(),
            self.endpoint.clone(),
        )))
    }
}

/// One output item of the reply, as far as the decoder follows it.
enum Item {
    Message { text: bool },
    Reasoning { text: bool, parts: u64 },
    Call { index: usize, arguments: bool },
}

#[derive(Default)]
struct Decoder {
    /// The output items by id, in the order they were added.
    items: Vec<(Box<str>, Item)>,
    calls: usize,
    /// The terminal event's stop reason, once it came.
    stop: Option<StopReason>,
    id: Option<String>,
    model: Option<String>,
}

// The event types borrow from the event's text: a delta's strings are copied once, into the
// event handed on, and fields we do not need are skipped without being stored.

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    item_id: Option<Borrowed<'a>>,
    #[serde(borrow)]
    delta: Cow<'a, str>,
}

#[derive(Deserialize)]
struct SummaryPart<'a> {
    #[serde(borrow)]
    item_id: Option<Borrowed<'a>>,
    #[serde(default)]
    summary_index: u64,
}

#[derive(Deserialize)]
struct ArgumentsDone<'a> {
    #[serde(borrow)]
    item_id: Option<Borrowed<'a>>,
    #[serde(borrow)]
    arguments: Cow<'a, str>,
}

#[derive(Deserialize)]
struct ItemEvent<'a> {
    #[serde(borrow)]
    item: OutputItem<'a>,
}

/// An output item, as far as the decoder reads it: read by its type, through [`FlatItem`]
/// (see `tagged`).
enum OutputItem<'a> {
    Message {
        id: Option<Cow<'a, str>>,
        content: Vec<OutputPart<'a>>,
    },
    Reasoning {
        id: Option<Cow<'a, str>>,
        summary: Vec<TextPart<'a>>,
        content: Option<Vec<TextPart<'a>>>,
        encrypted_content: Option<Cow<'a, str>>,
    },
    FunctionCall {
        id: Option<Cow<'a, str>>,
        call_id: Option<Cow<'a, str>>,
        name: Cow<'a, str>,
        arguments: Cow<'a, str>,
    },
    /// An item of another type (a web search, an MCP call), whatever its fields hold.
    Other,
}

/// An item's type and the fields the decoder may read, as their JSON text.
#[derive(Deserialize)]
struct FlatItem<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    id: Raw<'a>,
    #[serde(default, borrow)]
    call_id: Raw<'a>,
    #[serde(default, borrow)]
    name: Raw<'a>,
    #[serde(default, borrow)]
    arguments: Raw<'a>,
    #[serde(default, borrow)]
    content: Raw<'a>,
    #[serde(default, borrow)]
    summary: Raw<'a>,
    #[serde(default, borrow)]
    encrypted_content: Raw<'a>,
}

impl<'de: 'a, 'a> Deserialize<'de> for OutputItem<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let item = FlatItem::deserialize(d)?;
        let text = text::<D::Error>;
        Ok(match &*item.kind {
            "message" => OutputItem::Message {
                id: text(item.id)?,
                content: field(item.content)?,
            },
            "reasoning" => OutputItem::Reasoning {
                id: text(item.id)?,
                summary: field(item.summary)?,
                content: field(item.content)?,
                encrypted_content: text(item.encrypted_content)?,
            },
            "function_call" => OutputItem::FunctionCall {
                id: text(item.id)?,
                call_id: text(item.call_id)?,
                name: string(item.name)?,
                arguments: string(item.arguments)?,
            },
            _ => OutputItem::Other,
        })
    }
}

/// A part of a message item, read as [`OutputItem`] is (see [`FlatPart`]).
enum OutputPart<'a> {
    OutputText { text: Cow<'a, str> },
    Refusal { refusal: Cow<'a, str> },
    Other,
}

#[derive(Deserialize)]
struct FlatPart<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Raw<'a>,
    #[serde(default, borrow)]
    refusal: Raw<'a>,
}

impl<'de: 'a, 'a> Deserialize<'de> for OutputPart<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let part = FlatPart::deserialize(d)?;
        Ok(match &*part.kind {
            "output_text" => OutputPart::OutputText {
                text: string(part.text)?,
            },
            "refusal" => OutputPart::Refusal {
                refusal: string(part.refusal)?,
            },
            _ => OutputPart::Other,
        })
    }
}

#[derive(Deserialize)]
struct TextPart<'a> {
    #[serde(default, borrow)]
    text: Cow<'a, str>,
}

#[derive(Deserialize)]
struct ResponseEvent<'a> {
    #[serde(borrow)]
    response: WireResponse<'a>,
}

#[derive(Deserialize)]
struct WireResponse<'a> {
    #[serde(borrow)]
    id: Option<Borrowed<'a>>,
    #[serde(borrow)]
    model: Option<Borrowed<'a>>,
    #[serde(borrow)]
    status: Option<Borrowed<'a>>,
    usage: Option<WireUsage>,
    #[serde(borrow)]
    incomplete_details: Option<Incomplete<'a>>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Incomplete<'a> {
    #[serde(borrow)]
    reason: Option<Borrowed<'a>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    total_tokens: u64,
    input_tokens_details: Option<InputDetails>,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: u64,
    #[serde(default)]
    cache_write_tokens: u64,
}

#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: u64,
}

fn parse<'a, T: Deserialize<'a>>(data: &'a str, kind: &str) -> Result<T, Error> {
    serde_json::from_str(data)
        .map_err(|e| Error::Stream(format!("a {kind} event is not as the API defines it ({e})")))
}

impl Decode for Decoder {
    /// Handles one event; true at the reply's final event.
    fn event(&mut self, data: &str, out: &mut Emitter<'_, '_>) -> Result<bool, Error> {
        let kind = event_type(data)?;
        match &*kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                let d: Delta<'_> = parse(data, &kind)?;
                if let Some(Item::Message { text }) = self.item(d.item_id.as_ref().map(|id| &*id.0))
                {
                    *text = true;
                }
                if !d.delta.is_empty() {
                    out.emit(StreamEvent::TextDelta {
                        text: d.delta.into_owned(),
                    })?;
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let d: Delta<'_> = parse(data, &kind)?;
                if let Some(Item::Reasoning { text, .. }) =
                    self.item(d.item_id.as_ref().map(|id| &*id.0))
                {
                    *text = true;
                }
                if !d.delta.is_empty() {
                    out.emit(StreamEvent::thinking(d.delta.into_owned()))?;
                }
            }
            "response.reasoning_summary_part.added" => {
                let p: SummaryPart<'_> = parse(data, &kind)?;
                if let Some(Item::Reasoning { text, parts }) =
                    self.item(p.item_id.as_ref().map(|id| &*id.0))
                {
                    *parts = (*parts).max(p.summary_index + 1);
                    // Parts of a summary are paragraphs.
                    if p.summary_index > 0 && *text {
                        out.emit(StreamEvent::thinking("\n\n"))?;
                    }
                }
            }
            "response.function_call_arguments.delta" => {
                let d: Delta<'_> = parse(data, &kind)?;
                let index = self.call(d.item_id.as_ref().map(|id| &*id.0), &kind)?;
                if !d.delta.is_empty() {
                    out.emit(StreamEvent::ToolCallDelta {
                        index,
                        arguments: d.delta.into_owned(),
                    })?;
                }
            }
            "response.function_call_arguments.done" => {
                let d: ArgumentsDone<'_> = parse(data, &kind)?;
                let index = self.call(d.item_id.as_ref().map(|id| &*id.0), &kind)?;
                self.whole_arguments(index, &d.arguments, out)?;
            }
            "response.output_item.added" => {
                let e: ItemEvent<'_> = parse(data, &kind)?;
                self.item_added(e.item, out)?;
            }
            "response.output_item.done" => {
                let e: ItemEvent<'_> = parse(data, &kind)?;
                self.item_done(e.item, out)?;
            }
            "response.created" | "response.in_progress" => {
                let e: ResponseEvent<'_> = parse(data, &kind)?;
                self.head(&e.response);
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let e: ResponseEvent<'_> = parse(data, &kind)?;
                self.end(e.response, out)?;
                return Ok(true);
            }
            "error" => {
                let error: Value = parse(data, &kind)?;
                return Err(api_error(&error));
            }
            _ => {}
        }
        Ok(false)
    }

    fn finish(self, ended: bool) -> Result<ReplyEnd, Error> {
        let Some(stop) = self.stop.filter(|_| ended) else {
            return Err(Error::Stream(
                "the stream ended before response.completed".into(),
            ));
        };
        Ok(ReplyEnd {
            stop_reason: stop,
            response_id: self.id,
            model: self.model,
        })
    }
}

/// An `error` event or a failed response's `error` as an [`Error::Api`]: its `code` (else
/// `type`) and `message`.
fn api_error(error: &Value) -> Error {
    let kind = ["code", "type"]
        .iter()
        .find_map(|key| match error.get(key)? {
            Value::String(s) if !s.is_empty() && s != "error" => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| "error".into());
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_owned);
    Error::Api { kind, message }
}

impl Decoder {
    /// The item `id`, when it was added.
    fn item(&mut self, id: Option<&str>) -> Option<&mut Item> {
        let id = id?;
        self.items
            .iter_mut()
            .rev()
            .find(|(i, _)| &**i == id)
            .map(|(_, item)| item)
    }

    /// The call index of the function call item `id`.
    fn call(&mut self, id: Option<&str>, kind: &str) -> Result<usize, Error> {
        match self.item(id) {
            Some(Item::Call { index, arguments }) => {
                *arguments = true;
                Ok(*index)
            }
            _ => Err(Error::Stream(format!(
                "{kind} for the item {}, which is no function call",
                id.unwrap_or("(none)")
            ))),
        }
    }

    fn head(&mut self, response: &WireResponse<'_>) {
        // `response.created` and `response.completed` both carry them, nearly always the
        // same: copied once.
        let keep = |kept: &mut Option<String>, new: Option<&Borrowed<'_>>| {
            if let Some(new) = new.filter(|new| !new.0.is_empty())
                && kept.as_deref() != Some(&*new.0)
            {
                *kept = Some(new.0.to_string());
            }
        };
        keep(&mut self.id, response.id.as_ref());
        keep(&mut self.model, response.model.as_ref());
    }

    fn item_added(&mut self, item: OutputItem<'_>, out: &mut Emitter<'_, '_>) -> Result<(), Error> {
        match item {
            OutputItem::Message { id, .. } => {
                self.track(id, Item::Message { text: false });
            }
            OutputItem::Reasoning { id, .. } => {
                self.track(
                    id,
                    Item::Reasoning {
                        text: false,
                        parts: 0,
                    },
                );
            }
            OutputItem::FunctionCall {
                id,
                call_id,
                name,
                arguments,
            } => {
                let index = self.start_call(id, call_id, name, out)?;
                self.whole_arguments(index, &arguments, out)?;
            }
            OutputItem::Other => {}
        }
        Ok(())
    }

    /// Follows the item `id` (an item without one cannot be referred to, and is not).
    fn track(&mut self, id: Option<Cow<'_, str>>, item: Item) {
        if let Some(id) = id {
            self.items.push((id.into(), item));
        }
    }

    fn start_call(
        &mut self,
        id: Option<Cow<'_, str>>,
        call_id: Option<Cow<'_, str>>,
        name: Cow<'_, str>,
        out: &mut Emitter<'_, '_>,
    ) -> Result<usize, Error> {
        let index = self.calls;
        self.calls += 1;
        let call_id = match (&call_id, &id) {
            (Some(c), _) => c.to_string(),
            (None, Some(id)) => id.to_string(),
            (None, None) => format!("call_{index}"),
        };
        self.track(
            id,
            Item::Call {
                index,
                arguments: false,
            },
        );
        out.emit(StreamEvent::ToolCallStart {
            id: call_id,
            name: name.into_owned(),
        })?;
        Ok(index)
    }

    /// The whole arguments of call `index`, when none of them streamed yet.
    fn whole_arguments(
        &mut self,
        index: usize,
        arguments: &str,
        out: &mut Emitter<'_, '_>,
    ) -> Result<(), Error> {
        let item = self
            .items
            .iter_mut()
            .rev()
            .find_map(|(_, item)| match item {
                Item::Call {
                    index: i,
                    arguments,
                } if *i == index => Some(arguments),
                _ => None,
            });
        let sent = match item {
            Some(sent) => sent,
            None => return Ok(()),
        };
        if *sent || arguments.is_empty() {
            return Ok(());
        }
        *sent = true;
        out.emit(StreamEvent::ToolCallDelta {
            index,
            arguments: arguments.to_owned(),
        })
    }

    /// A finished item: what it holds that no delta brought (a server that does not stream
    /// some kind of item sends it whole here), and a reasoning item's id and encrypted
    /// content, kept as the signature of its thinking block.
    fn item_done(&mut self, item: OutputItem<'_>, out: &mut Emitter<'_, '_>) -> Result<(), Error> {
        match item {
            OutputItem::Message { id, content } => {
                let streamed = match self.item(id.as_deref()) {
                    Some(Item::Message { text }) => *text,
                    _ => false,
                };
                if !streamed {
                    for part in content {
                        let text = match part {
                            OutputPart::OutputText { text } => text,
                            OutputPart::Refusal { refusal } => refusal,
                            OutputPart::Other => continue,
                        };
                        if !text.is_empty() {
                            out.emit(StreamEvent::text(text.into_owned()))?;
                        }
                    }
                }
            }
            OutputItem::Reasoning {
                id,
                summary,
                content,
                encrypted_content,
            } => {
                let streamed = match self.item(id.as_deref()) {
                    Some(Item::Reasoning { text, .. }) => *text,
                    _ => false,
                };
                if !streamed {
                    // The summary, else the reasoning text, paragraph by paragraph.
                    let parts = if summary.is_empty() {
                        content.unwrap_or_default()
                    } else {
                        summary
                    };
                    let mut first = true;
                    for part in parts.iter().filter(|p| !p.text.is_empty()) {
                        if !first {
                            out.emit(StreamEvent::thinking("\n\n"))?;
                        }
                        first = false;
                        out.emit(StreamEvent::thinking(part.text.to_string()))?;
                    }
                }
                if let Some(id) = id {
                    out.emit(StreamEvent::ThinkingSignature {
                        signature: ReasoningItem::signature(&id, encrypted_content.as_deref()),
                    })?;
                }
            }
            OutputItem::FunctionCall {
                id,
                call_id,
                name,
                arguments,
            } => {
                let index = match self.item(id.as_deref()) {
                    Some(Item::Call { index, .. }) => *index,
                    _ => self.start_call(id, call_id, name, out)?,
                };
                self.whole_arguments(index, &arguments, out)?;
            }
            OutputItem::Other => {}
        }
        Ok(())
    }

    /// The final response: usage, the id, and how it ended.
    fn end(&mut self, response: WireResponse<'_>, out: &mut Emitter<'_, '_>) -> Result<(), Error> {
        self.head(&response);
        if let Some(u) = response.usage {
            let (cache_read, cache_write) = u
                .input_tokens_details
                .map_or((0, 0), |d| (d.cached_tokens, d.cache_write_tokens));
            let usage = Usage {
                input: u.input_tokens,
                output: u.output_tokens,
                cache_read,
                cache_write,
                reasoning: u.output_tokens_details.map_or(0, |d| d.reasoning_tokens),
                total: u
                    .total_tokens
                    .max(u.input_tokens.saturating_add(u.output_tokens)),
                ..Usage::default()
            };
            out.emit(StreamEvent::Usage { usage })?;
        }
        let reason = response
            .incomplete_details
            .and_then(|d| d.reason)
            .map(|r| r.0)
            .unwrap_or_default();
        self.stop = Some(match response.status.as_ref().map(|s| &*s.0) {
            Some("failed") => {
                let error = response.error.unwrap_or(Value::Null);
                return Err(match error {
                    Value::Null => Error::Api {
                        kind: "failed".into(),
                        message: "the response failed without saying why".into(),
                    },
                    error => api_error(&error),
                });
            }
            Some("incomplete") if reason == "content_filter" => {
                return Err(Error::Api {
                    kind: "content_filter".into(),
                    message: "the reply was stopped by the content filter".into(),
                });
            }
            Some("incomplete") => StopReason::Length,
            _ if self.calls > 0 => StopReason::ToolUse,
            _ => StopReason::Stop,
        });
        Ok(())
    }
}
