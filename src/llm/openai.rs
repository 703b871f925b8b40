//! `OpenAiCompat`: the OpenAI Chat Completions API, as OpenAI, Ollama, vLLM, llama.cpp,
//! LM Studio, OpenRouter, DeepSeek and others serve it.

use std::fmt;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::chat_stream::Decoder;
use super::http::{Call, Endpoint};
use super::parts::{Base64, Collected, DataUrl, DocumentText};
use super::pieces::{self, Builder, Dialect, Kind, Payload, Piece, Side, element};
use super::{
    CancelToken, OnEvent, Provider, ReplyEnd, Request, TextParts, ThinkingLevel, ToolDefinition,
};
use crate::Error;
use crate::content::{Part, Source};
use crate::message::{AssistantMessage, ContentBlock, Message};
use crate::output::OpenAiFormat;

/// The default base URL, OpenAI's.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// A provider for OpenAI-compatible Chat Completions servers (`POST {base_url}/chat/completions`,
/// streamed).
///
/// What it sends: the system prompt as a `system` message, user messages, assistant messages
/// with their text and `tool_calls`, tool results as `tool` messages, the tools as
/// `function` tools, the model, `reasoning_effort` for a thinking level other than `Off`,
/// `stream: true` with `stream_options.include_usage`, a structured answer's schema as
/// `response_format` (`json_schema`, with `strict: true` where the schema has a strict form,
/// and `tool_choice: "none"` beside the tools when the model is to answer now; see
/// [`OutputRequest`](super::OutputRequest)), plus [`OpenAiCompat::temperature`],
/// [`OpenAiCompat::max_tokens`], [`OpenAiCompat::prompt_cache_key`],
/// [`OpenAiCompat::prompt_cache_retention`] and [`OpenAiCompat::extra_body`] when set. Reasoning text
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
    cache_key: Option<String>,
    cache_retention: Option<String>,
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
            cache_key: None,
            cache_retention: None,
            extra_body: serde_json::Map::new(),
        }
    }

    /// A provider configured from `OPENAI_BASE_URL` (default [`OPENAI_BASE_URL`]),
    /// `OPENAI_API_KEY` and `OPENAI_CUSTOM_HEADERS` (one `Name: Value` per line, see
    /// [`OpenAiCompat::header`]). Empty variables count as unset (`OPENAI_BASE_URL=""` with a
    /// key set is OpenAI's own URL; see [`from_env`](super::from_env)).
    ///
    /// # Errors
    /// [`Error::NotConfigured`] when neither variable is set: OpenAI itself needs a key, a local
    /// server needs its URL. [`Error::Config`] naming `OPENAI_BASE_URL` when its URL does not
    /// parse (no scheme, no host, a port outside 1-65535...), or `OPENAI_CUSTOM_HEADERS` when
    /// a header cannot be sent.
    pub fn from_env() -> Result<OpenAiCompat, Error> {
        Endpoint::from_env(
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            Some(super::OPENAI_HEADERS_VAR),
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

    /// The key OpenAI groups requests by for its prompt cache (`prompt_cache_key`):
    /// requests with the same key and the same prompt start are routed to the same cache,
    /// so use one per agent (or per user) and prompt. Defaults to none (not sent). OpenAI
    /// caches prompts of 1024 tokens or more by itself; the key raises the share of hits.
    #[must_use]
    pub fn prompt_cache_key(mut self, key: impl Into<String>) -> OpenAiCompat {
        self.cache_key = Some(key.into());
        self
    }

    /// How long OpenAI keeps a cached prompt (`prompt_cache_retention`: `in_memory` or
    /// `24h`, where the model offers it). Defaults to the server's default (not sent).
    #[must_use]
    pub fn prompt_cache_retention(mut self, retention: impl Into<String>) -> OpenAiCompat {
        self.cache_retention = Some(retention.into());
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
        let dialect = Dialect {
            api: "chat",
            documents: false,
            accepts: self.endpoint.accepts,
        };
        let capacity = super::parts::arena_capacity(request);
        let mut b = Builder::new(request.body_cache.as_ref(), dialect, cannot_carry, capacity);
        let tools = (!request.tools.is_empty()).then(|| {
            b.tools_json(&request.tools, "", |tools| {
                // OK because writing to a String cannot fail, and the tools serialize.
                serde_json::to_string(&Tools(tools)).expect("the tools serialize")
            })
        });
        let head = Body {
            provider: self,
            request,
            tools: tools.as_deref(),
            head: true,
        };
        let messages = |b: &mut Builder| write_messages(b, request);
        let messages = (!self.extra_body.contains_key("messages")).then_some(&messages as _);
        pieces::object(
            &mut b,
            &head,
            "messages",
            messages,
            &Body {
                head: false,
                ..head
            },
        );
        b.finish()
    }
}

super::http_setters!(
    OpenAiCompat,
    "The key sent as `Authorization: Bearer <key>`. Defaults to none (local servers)."
);

/// The fields of the Chat Completions body of one request around its messages, borrowing
/// from it: the head (the model) or the tail (the rest, then `extra_body`), written field by
/// field, each known field left out when `extra_body` has the same key (the extra value
/// wins).
#[derive(Clone, Copy)]
struct Body<'a> {
    provider: &'a OpenAiCompat,
    request: &'a Request,
    /// The request's tools as JSON, from the body cache (`None` for no tools).
    tools: Option<&'a RawValue>,
    head: bool,
}

impl Serialize for Body<'_> {
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
            return map.end();
        }
        field!("stream", &true);
        field!(
            "stream_options",
            &StreamOptions {
                include_usage: true
            }
        );
        if let Some(tools) = self.tools {
            field!("tools", tools);
        }
        if let Some(output) = &r.output {
            field!(
                "response_format",
                &ResponseFormat {
                    kind: "json_schema",
                    json_schema: OpenAiFormat::new(&output.schema, false),
                }
            );
            // The tools stay listed (the prompt cache keeps its prefix), and are not called.
            if output.answer_now && !r.tools.is_empty() {
                field!("tool_choice", "none");
            }
        }
        let effort = match r.thinking {
            ThinkingLevel::Off => None,
            ThinkingLevel::Minimal => Some("minimal"),
            ThinkingLevel::Low => Some("low"),
            ThinkingLevel::Medium => Some("medium"),
            ThinkingLevel::High => Some("high"),
        };
        if let Some(effort) = effort {
            field!("reasoning_effort", &effort);
        }
        if let Some(t) = p.temperature {
            field!("temperature", &t);
        }
        if let Some(n) = p.max_tokens {
            field!("max_tokens", &n);
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

/// `response_format` for a structured answer.
#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: OpenAiFormat<'a>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The system prompt and the transcript as Chat Completions messages.
///
/// A `tool` message takes text only, so the images, documents (not of text) and audio of
/// the tool results follow them in one `user` message (each result's under a line naming
/// its tool and call), written after the last of those consecutive results; the tool
/// message says where they went. A tool result's piece holds its message, its second
/// piece what it adds to that user message.
fn write_messages(b: &mut Builder, r: &Request) {
    b.raw(b"[");
    let mut first = true;
    if !r.system_prompt.is_empty() {
        let system = b.system_json(&r.system_prompt, "", |content| {
            // OK because writing to a String cannot fail.
            serde_json::to_string(&Wire::System { content }).expect("a message serializes")
        });
        b.raw(system.get().as_bytes());
        first = false;
    }
    // The tool results of the current run that have attached parts.
    let mut attached: Vec<Piece> = Vec::new();
    for message in &r.messages {
        let piece = b.piece(message, &write_message);
        if piece.kind() != Kind::ToolResult {
            attachments(b, &mut attached, &mut first);
        }
        b.push(&piece, Side::Main, &mut first, false);
        if piece.has_second() {
            attached.push(piece);
        }
    }
    attachments(b, &mut attached, &mut first);
    b.raw(b"]");
}

/// The user message after a run of tool results that holds their images, documents and
/// audio, each result's under a line naming its tool and call.
fn attachments(b: &mut Builder, attached: &mut Vec<Piece>, first: &mut bool) {
    if attached.is_empty() {
        return;
    }
    if !std::mem::take(first) {
        b.raw(b",");
    }
    b.raw(br#"{"role":"user","content":["#);
    let mut first_part = true;
    for piece in attached.drain(..) {
        b.push(&piece, Side::Second, &mut first_part, false);
    }
    b.raw(b"]}");
}

/// The piece of one message (see [`super::pieces`]): its message, if it sends one; then,
/// for a tool result, the parts it attaches to the user message after the results.
fn write_message(message: &Message, out: &mut Vec<u8>) -> usize {
    if let Some(wire) = wire(message) {
        element(out, &wire);
    }
    let split = out.len();
    if let Some(result) = message.as_tool_result()
        && result.content.iter().any(attached)
    {
        let heading = format!(
            "Attached to the result of `{}` (call {}):",
            result.tool_name, result.tool_call_id
        );
        element(out, &ChatPart(&Part::text(heading)));
        for part in result.content.iter().filter(|p| attached(p)) {
            element(out, &ChatPart(part));
        }
    }
    split
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Wire<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        content: JoinedText<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool_calls: Option<ToolCalls<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: ToolText<'a>,
    },
}

fn wire(message: &Message) -> Option<Wire<'_>> {
    match message {
        Message::User(m) => Some(Wire::User {
            content: UserContent(&m.content),
        }),
        Message::ToolResult(r) => Some(Wire::Tool {
            tool_call_id: &r.tool_call_id,
            content: ToolText(&r.content),
        }),
        Message::Assistant(m) => {
            let has_text = m
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::Text { text } if !text.is_empty()));
            let has_calls = m.tool_calls().next().is_some();
            // An empty reply (aborted or failed before anything arrived) says nothing and
            // some servers reject an empty assistant message.
            if !has_text && !has_calls {
                return None;
            }
            Some(Wire::Assistant {
                content: JoinedText(&m.content),
                tool_calls: has_calls.then_some(ToolCalls(m)),
            })
        }
    }
}

/// True for a part of a tool result that a `tool` message cannot hold: it goes in the user
/// message after the results.
fn attached(part: &Part) -> bool {
    !part.is_text_like()
}

/// What a user message says: its text as a string when it is text only, else a list of
/// content parts.
struct UserContent<'a>(&'a [Part]);

impl Serialize for UserContent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.iter().all(|p| matches!(p, Part::Text { .. })) {
            return TextParts(self.0).serialize(s);
        }
        s.collect_seq(self.0.iter().map(ChatPart))
    }
}

/// What a tool message says: the text of the result, its documents of text in place, and
/// for each of its other parts a note saying that it follows in the next message.
struct ToolText<'a>(&'a [Part]);

impl Serialize for ToolText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.iter().all(|p| matches!(p, Part::Text { .. })) {
            return TextParts(self.0).serialize(s);
        }
        s.collect_str(self)
    }
}

impl fmt::Display for ToolText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last_text = None;
        for (i, part) in self.0.iter().enumerate() {
            let text = matches!(part, Part::Text { .. });
            // Text parts run on as they are joined everywhere; anything else on its own line.
            if i > 0 && !(text && last_text == Some(true)) {
                f.write_str("\n")?;
            }
            last_text = Some(text);
            match part {
                Part::Text { text } => f.write_str(text)?,
                Part::Document(d) if d.is_text() => write!(f, "{}", DocumentText(d))?,
                Part::Image(_) => f.write_str("[an image: in the next message]")?,
                Part::Document(d) => match &d.name {
                    Some(name) => write!(f, "[the document {name}: in the next message]")?,
                    None => f.write_str("[a document: in the next message]")?,
                },
                _ => f.write_str("[audio: in the next message]")?,
            }
        }
        Ok(())
    }
}

/// One content part: `text`, `image_url` (a URL or a `data:` URL), `file` (a PDF or another
/// document, as a `data:` URL with its file name), `input_audio` (WAV or MP3, base64); a
/// document of text is a `text` part (see [`DocumentText`]).
struct ChatPart<'a>(&'a Part);

#[derive(Serialize)]
struct ImageUrl<'a> {
    url: DataUrl<'a>,
}

#[derive(Serialize)]
struct FilePart<'a> {
    filename: &'a str,
    file_data: DataUrl<'a>,
}

#[derive(Serialize)]
struct InputAudio<'a> {
    data: Base64<'a>,
    format: &'static str,
}

impl Serialize for ChatPart<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        match self.0 {
            Part::Text { text } => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Part::Document(d) if d.is_text() => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", &Collected(DocumentText(d)))?;
            }
            Part::Image(image) => {
                map.serialize_entry("type", "image_url")?;
                map.serialize_entry(
                    "image_url",
                    &ImageUrl {
                        url: DataUrl(&image.source),
                    },
                )?;
            }
            Part::Document(d) => {
                map.serialize_entry("type", "file")?;
                let filename = d.name.as_deref().unwrap_or(match d.source.media_type() {
                    Some("application/pdf") | None => "document.pdf",
                    _ => "document",
                });
                map.serialize_entry(
                    "file",
                    &FilePart {
                        filename,
                        file_data: DataUrl(&d.source),
                    },
                )?;
            }
            Part::Audio(audio) => {
                map.serialize_entry("type", "input_audio")?;
                // The check let only inline WAV and MP3 through.
                let (data, format) = match &audio.source {
                    Source::Inline { media_type, data } => {
                        (data, audio_format(media_type).unwrap_or("wav"))
                    }
                    Source::Url { .. } => {
                        return Err(serde::ser::Error::custom("audio by URL"));
                    }
                };
                map.serialize_entry(
                    "input_audio",
                    &InputAudio {
                        data: Base64(data),
                        format,
                    },
                )?;
            }
        }
        map.end()
    }
}

/// The `format` of `input_audio` for an audio media type: `wav` or `mp3`.
fn audio_format(media_type: &str) -> Option<&'static str> {
    let essence = media_type.split(';').next().unwrap_or("").trim();
    match essence.to_ascii_lowercase().as_str() {
        "audio/wav" | "audio/x-wav" | "audio/wave" | "audio/vnd.wave" => Some("wav"),
        "audio/mpeg" | "audio/mp3" | "audio/mpeg3" | "audio/x-mpeg-3" => Some("mp3"),
        _ => None,
    }
}

/// Why Chat Completions cannot carry `part`, when it cannot.
fn cannot_carry(part: &Part) -> Option<&'static str> {
    match (part, part.source()) {
        (Part::Document(_), Some(Source::Url { .. })) => Some(
            "which Chat Completions cannot carry: its documents go inline (Document::pdf, \
             Document::load)",
        ),
        (Part::Audio(_), Some(Source::Url { .. })) => {
            Some("which Chat Completions cannot carry: its audio goes inline")
        }
        (Part::Audio(_), Some(Source::Inline { media_type, .. }))
            if audio_format(media_type).is_none() =>
        {
            Some("which Chat Completions cannot carry: its audio is WAV or MP3")
        }
        _ => None,
    }
}

/// The text blocks of a reply joined into one string, written without joining them first.
pub(super) struct JoinedText<'a>(pub(super) &'a [ContentBlock]);

impl Serialize for JoinedText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for JoinedText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| match b {
            ContentBlock::Text { text } => f.write_str(text),
            _ => Ok(()),
        })
    }
}

struct ToolCalls<'a>(&'a AssistantMessage);

impl Serialize for ToolCalls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.tool_calls().map(|c| WireCall {
            id: &c.id,
            kind: "function",
            function: WireFunction {
                name: &c.name,
                arguments: if c.arguments.trim().is_empty() {
                    "{}"
                } else {
                    &c.arguments
                },
            },
        }))
    }
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

struct Tools<'a>(&'a [ToolDefinition]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|t| WireTool {
            kind: "function",
            function: WireToolFunction {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
            },
        }))
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl Provider for OpenAiCompat {
    /// Streams one Chat Completions reply. Blocks until the reply ends, fails, times out, or
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
            path: "/chat/completions",
            headers: super::http::bearer,
            body,
        };
        self.endpoint
            .stream(call, Decoder::default(), cancel, on_event)
    }

    fn name(&self) -> &str {
        "openai"
    }

    /// The base URL, parsed when the provider was made.
    fn check(&self) -> Result<(), Error> {
        self.endpoint.check()
    }

    /// The base URL's host and port.
    fn server_address(&self) -> Option<super::ServerAddress> {
        self.endpoint.server_address()
    }

    /// Asks llama.cpp's `GET /props`, else `GET /v1/models` (vLLM, LM Studio, OpenRouter).
    fn context_window(&self, model: &str, cancel: &CancelToken) -> Option<u64> {
        super::count::openai_window(&self.endpoint, model, cancel)
    }

    /// Counts a request with llama.cpp's `/apply-template` and `/tokenize`; other servers
    /// answer 404 and are not asked again.
    fn token_counter(&self) -> Option<std::sync::Arc<dyn super::TokenCounter>> {
        Some(std::sync::Arc::new(super::count::LlamaCppCounter::new(
            self.clone(),
            self.endpoint.clone(),
        )))
    }
}
