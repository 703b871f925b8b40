//! `Anthropic`: the Anthropic Messages API, streamed.

use std::borrow::Cow;
use std::sync::Arc;

use serde::de::IgnoredAny;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::http::{self, Call, Decode, Emitter, Endpoint};
use super::parts::{Base64, Collected, DocumentText};
use super::pieces::{self, Builder, Dialect, Kind, Payload, Piece, Side};
use super::tagged::{Borrowed, Raw, event_type, required, string};
use super::{
    CancelToken, OnEvent, Provider, ReplyEnd, Request, StreamEvent, TextParts, ThinkingLevel,
    ToolDefinition,
};
use crate::Error;
use crate::content::{Part, Source, is_text_media_type};
use crate::message::{ContentBlock, Message, StopReason, Usage};

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
/// `cache_read_input_tokens` plus `cache_creation_input_tokens`), like OpenAI's;
/// `cache_read` and `cache_write` say what of it came from the prompt cache and went into it.
///
/// Prompt caching is on by default: `cache_control` breakpoints after the tools, the system
/// prompt (then sent as a text block) and in the transcript, at most four; see
/// [`PromptCache`] and [`Anthropic::prompt_cache`].
///
/// A structured answer (a request with an [`OutputRequest`](super::OutputRequest)) is asked
/// for as [`Anthropic::output_mode`] says: by default with the API's structured outputs,
/// `output_config.format` (`json_schema`, the schema in the form Anthropic takes, see
/// [`OutputSchema::anthropic_schema`](crate::OutputSchema::anthropic_schema)), or with a
/// forced tool whose input is the answer ([`AnthropicOutput::ForcedTool`]), whose input the
/// reply hands over as its text. When the model is to answer now, the tools stay listed
/// with `tool_choice: {"type": "none"}`.
///
/// Failures, retries and timeouts behave as for [`OpenAiCompat`](super::OpenAiCompat).
/// `Debug` never shows the API key, and errors never contain it.
#[derive(Clone, Debug)]
pub struct Anthropic {
    endpoint: Endpoint,
    max_tokens: u32,
    temperature: Option<f32>,
    cache: PromptCache,
    output: AnthropicOutput,
}

/// How [`Anthropic`] asks for a structured answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AnthropicOutput {
    /// The API's structured outputs: `output_config: {"format": {"type": "json_schema",
    /// "schema": ..}}`, which constrains the reply's text to the schema. The default: the
    /// way the current API and models (Claude Sonnet 4.5, Opus 4.5, Haiku 4.5 and later)
    /// take a schema. Sent with every request that asks for the answer, beside the tools
    /// where the agent sends it so ([`OutputTurn::Every`](crate::OutputTurn::Every)).
    #[default]
    Format,
    /// A tool whose input is the answer, forced with `tool_choice: {"type": "tool", "name":
    /// ..}`, for models and compatible servers without structured outputs (llama.cpp's
    /// `/v1/messages` takes this one). The tool is named after the schema (`Verdict`, or
    /// `Verdict_answer` when a tool of the agent has that name), listed after the agent's
    /// own tools, and its input, the answer, comes as the reply's text. Only a request on
    /// which the model is to answer can force it: a tool turn under
    /// [`OutputTurn::Every`](crate::OutputTurn::Every) goes without the schema. The API
    /// refuses a forced tool with extended thinking, so such a request asks for no thinking;
    /// and a tool's input is an object, so the schema's root must be one (else the request
    /// fails before it is sent, with [`Error::Config`]).
    ForcedTool,
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
            cache: PromptCache::default(),
            output: AnthropicOutput::default(),
        }
    }

    /// A provider configured from `ANTHROPIC_BASE_URL` (default [`ANTHROPIC_BASE_URL`]),
    /// `ANTHROPIC_API_KEY` and `ANTHROPIC_CUSTOM_HEADERS` (one `Name: Value` per line, such
    /// as `anthropic-beta: ...`; see [`Anthropic::header`]). Empty variables count as unset.
    ///
    /// # Errors
    /// [`Error::NotConfigured`] when neither the base URL nor the key is set;
    /// [`Error::Config`] naming `ANTHROPIC_BASE_URL` when its URL does not parse, or
    /// `ANTHROPIC_CUSTOM_HEADERS` when a header cannot be sent.
    pub fn from_env() -> Result<Anthropic, Error> {
        Endpoint::from_env(
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_API_KEY",
            Some(super::ANTHROPIC_HEADERS_VAR),
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

    /// Where the prompt cache breakpoints (`cache_control`) go. Defaults to
    /// [`PromptCache::auto`]: the tools, the system prompt and the transcript, so that each
    /// turn of an agent reads the prompt the turn before wrote. [`PromptCache::off`] sends
    /// none.
    #[must_use]
    pub fn prompt_cache(mut self, cache: PromptCache) -> Anthropic {
        self.cache = cache;
        self
    }

    /// How a structured answer is asked for. Defaults to [`AnthropicOutput::Format`].
    #[must_use]
    pub fn output_mode(mut self, mode: AnthropicOutput) -> Anthropic {
        self.output = mode;
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
    /// they go to the socket, never joined into one buffer first. The breakpoints are written around the pieces, so a
    /// piece stays what it was when they move.
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

    /// The forced tool of a request whose answer it carries: its name, and the schema.
    fn answer_tool<'r>(&self, request: &'r Request) -> Option<(String, &'r Value)> {
        let output = request.output.as_ref()?;
        if self.output != AnthropicOutput::ForcedTool || !output.answer_now {
            return None;
        }
        let schema = &output.schema;
        let mut name = schema.name().to_owned();
        if request.tools.iter().any(|t| t.name == name) {
            name.push_str("_answer");
        }
        Some((name, schema.schema()))
    }

    /// The request body for `request`, its messages' JSON from the request's cache.
    fn payload(&self, request: &Request) -> Payload {
        let answer_tool = self.answer_tool(request);
        let output_config = match &request.output {
            Some(output) if self.output == AnthropicOutput::Format => Some(OutputConfig {
                format: JsonFormat {
                    kind: "json_schema",
                    schema: output.schema.anthropic_schema(),
                },
            }),
            _ => None,
        };
        let answer_now = request.output.as_ref().is_some_and(|o| o.answer_now);
        let tool_choice = match &answer_tool {
            Some((name, _)) => Some(ToolChoice {
                kind: "tool",
                name: Some(name),
            }),
            None if answer_now && !request.tools.is_empty() => Some(ToolChoice {
                kind: "none",
                name: None,
            }),
            None => None,
        };
        // The API refuses a forced tool with extended thinking.
        let thinking = match answer_tool {
            Some(_) => ThinkingLevel::Off,
            None => request.thinking,
        };
        let budget = match thinking {
            ThinkingLevel::Off => None,
            ThinkingLevel::Minimal => Some(1024),
            ThinkingLevel::Low => Some(4096),
            ThinkingLevel::Medium => Some(10_000),
            ThinkingLevel::High => Some(32_000),
        };
        let head = Head {
            model: &request.model,
            max_tokens: match budget {
                Some(b) => self.max_tokens.max(b + 4096),
                None => self.max_tokens,
            },
        };
        let turns = Turns {
            messages: &request.messages,
            cache: self.cache.transcript.then_some(self.cache.control()),
            documents: self.endpoint.accepts.takes_documents(),
        };
        let dialect = Dialect {
            api: "anthropic",
            documents: turns.documents,
            accepts: self.endpoint.accepts,
        };
        let capacity = super::parts::arena_capacity(request);
        let mut b = Builder::new(request.body_cache.as_ref(), dialect, cannot_carry, capacity);
        // The system prompt's and the tools' JSON come from the body cache while the agent
        // hands the same ones (but with a structured answer's tool, written after them).
        let system_cache = self.cache.system.then_some(self.cache.control());
        let system = (!request.system_prompt.is_empty()).then(|| {
            b.system_json(&request.system_prompt, form(system_cache), |text| {
                let system = System {
                    text,
                    cache: system_cache,
                };
                // OK because writing to a String cannot fail.
                serde_json::to_string(&system).expect("the system prompt serializes")
            })
        });
        let tools_cache = self.cache.tools.then_some(self.cache.control());
        let cached_tools = (!request.tools.is_empty() && answer_tool.is_none()).then(|| {
            b.tools_json(&request.tools, form(tools_cache), |tools| {
                let tools = Tools {
                    tools,
                    cache: tools_cache,
                    answer: None,
                };
                // OK because writing to a String cannot fail, and the tools serialize.
                serde_json::to_string(&tools).expect("the tools serialize")
            })
        });
        let written_tools = answer_tool.as_ref().map(|(name, schema)| Tools {
            tools: &request.tools,
            cache: tools_cache,
            answer: Some(WireTool {
                name,
                description: "Give your final answer: its input is the answer.",
                input_schema: schema,
                cache_control: None,
            }),
        });
        let tail = Tail {
            stream: true,
            system: system.as_deref(),
            tools: match (cached_tools.as_deref(), written_tools) {
                (Some(json), _) => Some(ToolsField::Cached(json)),
                (None, Some(tools)) => Some(ToolsField::Written(tools)),
                (None, None) => None,
            },
            tool_choice,
            output_config,
            thinking: budget.map(|budget_tokens| Thinking {
                kind: "enabled",
                budget_tokens,
            }),
            // The API accepts no temperature with extended thinking.
            temperature: self.temperature.filter(|_| budget.is_none()),
        };
        let messages = |b: &mut Builder| turns.write(b);
        pieces::object(&mut b, &head, "messages", Some(&messages), &tail);
        b.finish()
    }
}

super::http_setters!(Anthropic, "The key sent as `x-api-key`. Defaults to none.");

/// The fields of the Messages body before its messages.
#[derive(Serialize)]
struct Head<'a> {
    model: &'a str,
    max_tokens: u32,
}

/// The fields of the Messages body after its messages.
#[derive(Serialize)]
struct Tail<'a> {
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<ToolsField<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<OutputConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

/// `{"type": "none"}`, or `{"type": "tool", "name": ..}`.
#[derive(Serialize)]
struct ToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

/// `output_config` with the format of a structured answer.
#[derive(Serialize)]
struct OutputConfig<'a> {
    format: JsonFormat<'a>,
}

#[derive(Serialize)]
struct JsonFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: &'a Value,
}

#[derive(Serialize)]
struct Thinking {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

/// Where [`Anthropic`] puts its prompt cache breakpoints (`cache_control`), at most the
/// API's four: after the tools, after the system prompt, and in the transcript at the newest
/// stable point (the end of the last message sent) and at the end of what the previous
/// request sent (the user turn before the last reply), so that a turn that added more than
/// the API looks back over (20 blocks, as many tool results do) still reads the prompt the
/// turn before wrote.
///
/// On by default ([`PromptCache::auto`]): an agent loop sends the same system prompt, tools
/// and transcript every turn, and without breakpoints pays for all of it every turn.
/// A prompt shorter than the model's minimum (1024 to 4096 tokens) is not cached, whatever
/// the breakpoints; the usage of each reply says what was read (`cache_read`) and written
/// (`cache_write`).
///
/// ```
/// use pagent::llm::{Anthropic, PromptCache};
///
/// let cached = Anthropic::new("https://api.anthropic.com"); // PromptCache::auto()
/// let off = Anthropic::new("https://api.anthropic.com").prompt_cache(PromptCache::off());
/// let long = Anthropic::new("https://api.anthropic.com")
///     .prompt_cache(PromptCache::auto().transcript(false).one_hour(true));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptCache {
    tools: bool,
    system: bool,
    transcript: bool,
    one_hour: bool,
}

impl Default for PromptCache {
    fn default() -> PromptCache {
        PromptCache::auto()
    }
}

impl PromptCache {
    /// Breakpoints after the tools, the system prompt and the transcript, cached for the
    /// API's default 5 minutes.
    pub const fn auto() -> PromptCache {
        PromptCache {
            tools: true,
            system: true,
            transcript: true,
            one_hour: false,
        }
    }

    /// No breakpoints: nothing is cached.
    pub const fn off() -> PromptCache {
        PromptCache {
            tools: false,
            system: false,
            transcript: false,
            one_hour: false,
        }
    }

    /// Whether a breakpoint follows the tools. Defaults to `true`.
    #[must_use]
    pub const fn tools(mut self, on: bool) -> PromptCache {
        self.tools = on;
        self
    }

    /// Whether a breakpoint follows the system prompt. Defaults to `true`.
    #[must_use]
    pub const fn system(mut self, on: bool) -> PromptCache {
        self.system = on;
        self
    }

    /// Whether the transcript gets its two breakpoints (the newest message, and the end of
    /// the previous request). Defaults to `true`.
    #[must_use]
    pub const fn transcript(mut self, on: bool) -> PromptCache {
        self.transcript = on;
        self
    }

    /// Whether what is cached lives an hour (`"ttl": "1h"`, written at a higher price)
    /// instead of 5 minutes, for agents whose turns come further apart. Defaults to `false`.
    #[must_use]
    pub const fn one_hour(mut self, on: bool) -> PromptCache {
        self.one_hour = on;
        self
    }

    fn control(self) -> CacheControl {
        CacheControl {
            kind: "ephemeral",
            ttl: self.one_hour.then_some("1h"),
        }
    }
}

/// `{"type":"ephemeral"}`, with a `ttl` when it is not the default.
#[derive(Clone, Copy, Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'static str>,
}

/// The system prompt: a string, or a text block that ends with a breakpoint.
struct System<'a> {
    text: &'a str,
    cache: Option<CacheControl>,
}

impl Serialize for System<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.cache {
            None => s.serialize_str(self.text),
            Some(cache) => s.collect_seq([Marked {
                block: WireBlock::Text { text: self.text },
                cache_control: cache,
            }]),
        }
    }
}

/// The body's tools: their JSON from the body cache, or written now (with a structured
/// answer's tool after them).
enum ToolsField<'a> {
    Cached(&'a RawValue),
    Written(Tools<'a>),
}

impl Serialize for ToolsField<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolsField::Cached(json) => json.serialize(s),
            ToolsField::Written(tools) => tools.serialize(s),
        }
    }
}

/// What a cache breakpoint adds to the JSON it ends, as the body cache keys that JSON (see
/// `Builder::tools_json`): nothing, a breakpoint, or one with its ttl (`1h`).
fn form(cache: Option<CacheControl>) -> &'static str {
    match cache {
        None => "",
        Some(CacheControl { ttl: None, .. }) => "breakpoint",
        Some(CacheControl { ttl: Some(ttl), .. }) => ttl,
    }
}

struct Tools<'a> {
    tools: &'a [ToolDefinition],
    cache: Option<CacheControl>,
    /// The forced tool of a structured answer, after the breakpoint: the agent's tools stay
    /// a cached prefix.
    answer: Option<WireTool<'a>>,
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let last = self.tools.len().saturating_sub(1);
        let mut seq = s.serialize_seq(Some(self.tools.len() + 1))?;
        for (i, t) in self.tools.iter().enumerate() {
            seq.serialize_element(&WireTool {
                name: &t.name,
                description: &t.description,
                input_schema: &t.parameters,
                cache_control: self.cache.filter(|_| i == last),
            })?;
        }
        if let Some(answer) = &self.answer {
            seq.serialize_element(answer)?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

/// A block that ends a cached prefix.
#[derive(Serialize)]
struct Marked<'a> {
    #[serde(flatten)]
    block: WireBlock<'a>,
    cache_control: CacheControl,
}

/// The transcript as Anthropic messages: user turns and assistant turns alternate, so
/// consecutive user-side messages (user text, tool results) share one turn. Messages with
/// nothing to send (an empty reply) are left out before turns are joined.
struct Turns<'a> {
    messages: &'a [Arc<Message>],
    /// The breakpoint of the transcript, when it gets them.
    cache: Option<CacheControl>,
    /// Whether documents of text go as `document` blocks (else as text).
    documents: bool,
}

impl Turns<'_> {
    /// Writes the turns, each one's blocks the pieces of its messages (the blocks they
    /// send, see [`blocks`]): user turns and assistant turns alternate, so consecutive
    /// messages of one side that send something share a turn. The breakpoint is written
    /// after the piece that ends its turn.
    fn write(&self, b: &mut Builder) {
        let documents = self.documents;
        let write = move |m: &Message, out: &mut Vec<u8>| {
            for block in blocks(m, documents) {
                pieces::element(out, &block);
            }
            out.len()
        };
        let sent: Vec<Piece> = self
            .messages
            .iter()
            .map(|m| b.piece(m, &write))
            .filter(Piece::sends)
            .collect();
        let user = |p: &Piece| p.kind() != Kind::Assistant;
        // Each turn's pieces.
        let mut turns: Vec<std::ops::Range<usize>> = Vec::new();
        for (i, piece) in sent.iter().enumerate() {
            match turns.last_mut() {
                Some(turn) if user(&sent[turn.start]) == user(piece) => turn.end = i + 1,
                _ => turns.push(i..i + 1),
            }
        }
        // The user turns that end a cached prefix: the last one (the newest stable point),
        // and the one before the last reply (where the previous request ended).
        let mut marks = [None, None];
        if self.cache.is_some() {
            let mut users = (0..turns.len())
                .rev()
                .filter(|&t| user(&sent[turns[t].start]));
            marks = [users.next(), users.next()];
        }
        b.raw(b"[");
        for (t, turn) in turns.into_iter().enumerate() {
            let role = if user(&sent[turn.start]) {
                "user"
            } else {
                "assistant"
            };
            b.glue(|out| {
                if t > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(br#"{"role":""#);
                out.extend_from_slice(role.as_bytes());
                out.extend_from_slice(br#"","content":["#);
            });
            let cache = self.cache.filter(|_| marks.contains(&Some(t)));
            let last = turn.end - 1;
            let mut first = true;
            for i in turn {
                let mark = cache.filter(|_| i == last);
                b.push(&sent[i], Side::Main, &mut first, mark.is_some());
                if let Some(mark) = mark {
                    b.glue(|out| {
                        out.extend_from_slice(br#","cache_control":"#);
                        // OK because a CacheControl is two strings.
                        serde_json::to_writer(&mut *out, &mark).expect("strings serialize");
                        out.push(b'}');
                    });
                }
            }
            b.raw(b"]}");
        }
        b.raw(b"]");
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text {
        text: &'a str,
    },
    #[serde(rename = "text")]
    UserText {
        #[serde(rename = "text")]
        parts: TextParts<'a>,
    },
    #[serde(rename = "text")]
    DocumentText {
        text: Collected<DocumentText<'a>>,
    },
    Image {
        source: WireSource<'a>,
    },
    Document {
        source: WireSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<&'a str>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a RawValue,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ToolContent<'a>,
        is_error: bool,
    },
}

/// The blocks a message sends; `documents` says whether documents of text go as `document`
/// blocks (else as text).
fn blocks(message: &Message, documents: bool) -> impl Iterator<Item = WireBlock<'_>> {
    let (one, parts, reply) = match message {
        // Text only: one text block, as a text prompt always was.
        Message::User(m) if m.content.iter().all(|p| matches!(p, Part::Text { .. })) => (
            Some(WireBlock::UserText {
                parts: TextParts(&m.content),
            }),
            None,
            None,
        ),
        Message::User(m) => (
            None,
            Some(
                m.content
                    .iter()
                    .filter_map(move |p| part_block(p, documents)),
            ),
            None,
        ),
        Message::ToolResult(r) => (
            Some(WireBlock::ToolResult {
                tool_use_id: &r.tool_call_id,
                content: ToolContent {
                    parts: &r.content,
                    documents,
                },
                is_error: r.is_error,
            }),
            None,
            None,
        ),
        Message::Assistant(m) => (
            None,
            None,
            Some(m.content.iter().filter_map(assistant_block)),
        ),
    };
    one.into_iter()
        .chain(parts.into_iter().flatten())
        .chain(reply.into_iter().flatten())
}

/// The block of one part of a user message or a tool result: text (none for empty text,
/// which the API rejects), `image`, `document` (a PDF, or text as a `text` source; a
/// document of text is a text block when `documents` is off).
fn part_block(part: &Part, documents: bool) -> Option<WireBlock<'_>> {
    Some(match part {
        Part::Text { text } if text.is_empty() => return None,
        Part::Text { text } => WireBlock::Text { text },
        Part::Document(d) if d.is_text() && !documents => WireBlock::DocumentText {
            text: Collected(DocumentText(d)),
        },
        Part::Image(image) => WireBlock::Image {
            source: WireSource(&image.source),
        },
        Part::Document(d) => WireBlock::Document {
            source: WireSource(&d.source),
            title: d.name.as_deref(),
        },
        // Refused by the check before the body is built.
        Part::Audio(_) => return None,
    })
}

/// A tool result's content: its text as a string when it is text only, else its blocks.
struct ToolContent<'a> {
    parts: &'a [Part],
    documents: bool,
}

impl Serialize for ToolContent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.parts.iter().all(|p| matches!(p, Part::Text { .. })) {
            return TextParts(self.parts).serialize(s);
        }
        s.collect_seq(
            self.parts
                .iter()
                .filter_map(|p| part_block(p, self.documents)),
        )
    }
}

/// A source as the Messages API has it: `{"type":"url","url":..}`, `{"type":"base64",
/// "media_type":..,"data":..}` (the base64 written straight into the body), or for a
/// document of text `{"type":"text","media_type":"text/plain","data":"<the text>"}`.
struct WireSource<'a>(&'a Source);

impl Serialize for WireSource<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        match self.0 {
            Source::Url { url } => {
                map.serialize_entry("type", "url")?;
                map.serialize_entry("url", url)?;
            }
            Source::Inline { media_type, data } if is_text_media_type(media_type) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("media_type", "text/plain")?;
                // The check refused text that is not UTF-8 before the body is built.
                map.serialize_entry("data", std::str::from_utf8(data).unwrap_or_default())?;
            }
            Source::Inline { media_type, data } => {
                map.serialize_entry("type", "base64")?;
                map.serialize_entry("media_type", media_type)?;
                map.serialize_entry("data", &Base64(data))?;
            }
        }
        map.end()
    }
}

/// The media types of the Messages API's images.
const IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// Why the Messages API cannot carry `part`, when it cannot.
fn cannot_carry(part: &Part) -> Option<&'static str> {
    match part {
        Part::Audio(_) => Some("which the Anthropic Messages API cannot carry: it takes no audio"),
        Part::Image(image) => match image.source.media_type() {
            Some(media_type) if !IMAGE_TYPES.contains(&media_type) => Some(
                "which the Anthropic Messages API cannot carry: its images are JPEG, PNG, GIF \
                 or WebP",
            ),
            _ => None,
        },
        Part::Document(d) => match d.source.media_type() {
            Some(media_type) if !d.is_text() && media_type != "application/pdf" => {
                Some("which the Anthropic Messages API cannot carry: its documents are PDF or text")
            }
            _ => None,
        },
        Part::Text { .. } => None,
    }
}

fn assistant_block(block: &ContentBlock) -> Option<WireBlock<'_>> {
    match block {
        // The API rejects empty text and unsigned thinking.
        ContentBlock::Text { text } if text.is_empty() => None,
        ContentBlock::Text { text } => Some(WireBlock::Text { text }),
        // A reasoning item of the Responses API is no Anthropic signature.
        ContentBlock::Thinking {
            thinking,
            signature: Some(signature),
        } if !super::responses::is_reasoning_item(signature) => Some(WireBlock::Thinking {
            thinking,
            signature,
        }),
        ContentBlock::Thinking { .. } => None,
        ContentBlock::ToolCall(call) => Some(WireBlock::ToolUse {
            id: &call.id,
            name: &call.name,
            input: tool_input(&call.arguments),
        }),
    }
}

/// The arguments as sent: the model's own JSON text when it is an object; else `{}`, as
/// invalid arguments still need an object here (the tool result told the model what was
/// wrong).
fn tool_input(arguments: &str) -> &RawValue {
    let empty: &RawValue = serde_json::from_str("{}").expect("OK because `{}` is JSON");
    let arguments = arguments.trim();
    if !arguments.starts_with('{') {
        return empty;
    }
    serde_json::from_str::<&RawValue>(arguments).unwrap_or(empty)
}

/// The headers of every Messages call: the API version, and the key when there is one.
fn own_headers(endpoint: &Endpoint) -> Vec<(&'static str, String)> {
    let mut headers = vec![("anthropic-version", ANTHROPIC_VERSION.to_owned())];
    if let Some(key) = &endpoint.api_key {
        headers.push(("x-api-key", key.clone()));
    }
    headers
}

impl Provider for Anthropic {
    /// Streams one Messages reply. Blocks until the reply ends, fails, times out, or
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
        let answer = self.answer_tool(request);
        if let Some((name, schema)) = &answer
            && schema.get("type").and_then(Value::as_str) != Some("object")
        {
            return Err(Error::Config(format!(
                "the forced tool of a structured answer takes an object, and the schema \
                 `{name}` is not one: use AnthropicOutput::Format"
            )));
        }
        let decoder = Decoder {
            answer: answer.map(|(name, _)| name),
            ..Decoder::default()
        };
        let call = Call {
            path: "/v1/messages",
            headers: own_headers,
            body,
        };
        self.endpoint.stream(call, decoder, cancel, on_event)
    }

    fn name(&self) -> &str {
        "anthropic"
    }

    /// The base URL, parsed when the provider was made.
    fn check(&self) -> Result<(), Error> {
        self.endpoint.check()
    }

    /// The base URL's host and port.
    fn server_address(&self) -> Option<super::ServerAddress> {
        self.endpoint.server_address()
    }

    /// Counts a request with `POST /v1/messages/count_tokens`.
    fn token_counter(&self) -> Option<std::sync::Arc<dyn super::TokenCounter>> {
        Some(std::sync::Arc::new(super::count::AnthropicCounter::new(
            self.clone(),
            self.endpoint.clone(),
            ANTHROPIC_VERSION,
        )))
    }
}

#[derive(Default)]
struct Decoder {
    // The server's block index of each tool_use block, with our call index.
    blocks: Vec<(u64, usize)>,
    calls: usize,
    /// The forced tool of a structured answer: its input is handed over as text.
    answer: Option<String>,
    /// The block indexes of that tool's calls.
    answer_blocks: Vec<u64>,
    stop: Option<String>,
    usage: Usage,
    id: Option<String>,
    model: Option<String>,
}

// The events are read by their type (see `tagged`): each as the struct of its type, and the
// block and delta inside as their type says. Their strings borrow from the event's text: a
// delta's strings are copied once, into the event handed on.

#[derive(Deserialize)]
struct MessageStart<'a> {
    #[serde(borrow)]
    message: StartMessage<'a>,
}

#[derive(Deserialize)]
struct StartMessage<'a> {
    #[serde(borrow)]
    id: Option<Borrowed<'a>>,
    #[serde(borrow)]
    model: Option<Borrowed<'a>>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct BlockStart<'a> {
    index: u64,
    #[serde(borrow)]
    content_block: Block<'a>,
}

#[derive(Deserialize)]
struct BlockDelta<'a> {
    index: u64,
    #[serde(borrow)]
    delta: Delta<'a>,
}

#[derive(Deserialize)]
struct MessageDeltaEvent<'a> {
    #[serde(borrow)]
    delta: MessageDelta<'a>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct ErrorEvent {
    error: Value,
}

/// A content block as it starts.
enum Block<'a> {
    Text {
        text: Cow<'a, str>,
    },
    Thinking {
        thinking: Cow<'a, str>,
    },
    ToolUse {
        id: Cow<'a, str>,
        name: Cow<'a, str>,
    },
    /// A block of another type (a server tool's, a redacted thinking block).
    Other,
}

/// A block's or a delta's type and the fields the decoder may read of either, as their JSON
/// text.
#[derive(Deserialize)]
struct Flat<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Raw<'a>,
    #[serde(default, borrow)]
    thinking: Raw<'a>,
    #[serde(default, borrow)]
    signature: Raw<'a>,
    #[serde(default, borrow)]
    partial_json: Raw<'a>,
    #[serde(default, borrow)]
    id: Raw<'a>,
    #[serde(default, borrow)]
    name: Raw<'a>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Block<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let block = Flat::deserialize(d)?;
        Ok(match &*block.kind {
            "text" => Block::Text {
                text: string(block.text)?,
            },
            "thinking" => Block::Thinking {
                thinking: string(block.thinking)?,
            },
            "tool_use" => Block::ToolUse {
                id: required(block.id, "id")?,
                name: required(block.name, "name")?,
            },
            _ => Block::Other,
        })
    }
}

/// A delta of a content block.
// The variant names are the wire's type names (`text_delta`...).
#[allow(clippy::enum_variant_names)]
enum Delta<'a> {
    TextDelta {
        text: Cow<'a, str>,
    },
    ThinkingDelta {
        thinking: Cow<'a, str>,
    },
    SignatureDelta {
        signature: Cow<'a, str>,
    },
    InputJsonDelta {
        partial_json: Cow<'a, str>,
    },
    /// A delta of another type (citations).
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Delta<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let delta = Flat::deserialize(d)?;
        Ok(match &*delta.kind {
            "text_delta" => Delta::TextDelta {
                text: required(delta.text, "text")?,
            },
            "thinking_delta" => Delta::ThinkingDelta {
                thinking: required(delta.thinking, "thinking")?,
            },
            "signature_delta" => Delta::SignatureDelta {
                signature: required(delta.signature, "signature")?,
            },
            "input_json_delta" => Delta::InputJsonDelta {
                partial_json: required(delta.partial_json, "partial_json")?,
            },
            _ => Delta::Other,
        })
    }
}

#[derive(Deserialize)]
struct MessageDelta<'a> {
    #[serde(borrow)]
    stop_reason: Option<Borrowed<'a>>,
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
    fn event(&mut self, data: &str, out: &mut Emitter<'_, '_>) -> Result<bool, Error> {
        fn parse<'a, T: Deserialize<'a>>(data: &'a str) -> Result<T, Error> {
            serde_json::from_str(data)
                .map_err(|e| Error::Stream(format!("an event is not valid json ({e})")))
        }
        match &*event_type(data)? {
            "content_block_delta" => {
                let BlockDelta { index, delta } = parse(data)?;
                self.delta(index, delta, out)?;
            }
            "message_start" => {
                let MessageStart { message } = parse(data)?;
                self.id = message.id.map(|id| id.0.into_owned());
                self.model = message
                    .model
                    .filter(|m| !m.0.is_empty())
                    .map(|m| m.0.into_owned());
                self.usage(message.usage, out)?;
            }
            "content_block_start" => {
                let BlockStart {
                    index,
                    content_block,
                } = parse(data)?;
                self.block_start(index, content_block, out)?;
            }
            "message_delta" => {
                let MessageDeltaEvent { delta, usage } = parse(data)?;
                if let Some(stop) = delta.stop_reason {
                    self.stop = Some(stop.0.into_owned());
                }
                self.usage(usage, out)?;
            }
            "error" => {
                let ErrorEvent { error } = parse(data)?;
                return Err(http::api_error(&error));
            }
            // What is not read is still JSON, or the reply fails, as every event's text.
            "message_stop" => {
                parse::<IgnoredAny>(data)?;
                return Ok(true);
            }
            // `content_block_stop`, `ping`, and types the API may add.
            _ => {
                parse::<IgnoredAny>(data)?;
            }
        }
        Ok(false)
    }

    fn finish(self, ended: bool) -> Result<ReplyEnd, Error> {
        if !ended {
            return Err(Error::Stream("the stream ended before message_stop".into()));
        }
        let stop = match self.stop.as_deref() {
            Some("max_tokens") => StopReason::Length,
            // The forced answer tool alone: the reply is the answer.
            Some("tool_use") if self.calls == 0 && !self.answer_blocks.is_empty() => {
                StopReason::Stop
            }
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
        Ok(ReplyEnd {
            stop_reason: stop,
            response_id: self.id,
            model: self.model,
        })
    }
}

impl Decoder {
    fn block_start(
        &mut self,
        index: u64,
        block: Block<'_>,
        out: &mut Emitter<'_, '_>,
    ) -> Result<(), Error> {
        match block {
            Block::Text { text } if !text.is_empty() => {
                out.emit(StreamEvent::text(text.into_owned()))
            }
            Block::Thinking { thinking } if !thinking.is_empty() => {
                out.emit(StreamEvent::thinking(thinking.into_owned()))
            }
            Block::ToolUse { name, .. } if self.answer.as_deref() == Some(&*name) => {
                self.answer_blocks.push(index);
                Ok(())
            }
            Block::ToolUse { id, name } => {
                self.blocks.push((index, self.calls));
                self.calls += 1;
                out.emit(StreamEvent::ToolCallStart {
                    id: id.into_owned(),
                    name: name.into_owned(),
                })
            }
            _ => Ok(()),
        }
    }

    fn delta(
        &mut self,
        index: u64,
        delta: Delta<'_>,
        out: &mut Emitter<'_, '_>,
    ) -> Result<(), Error> {
        match delta {
            Delta::TextDelta { text } => out.emit(StreamEvent::TextDelta {
                text: text.into_owned(),
            }),
            Delta::ThinkingDelta { thinking } => {
                out.emit(StreamEvent::thinking(thinking.into_owned()))
            }
            Delta::SignatureDelta { signature } => out.emit(StreamEvent::ThinkingSignature {
                signature: signature.into_owned(),
            }),
            Delta::InputJsonDelta { partial_json } if self.answer_blocks.contains(&index) => {
                if partial_json.is_empty() {
                    return Ok(());
                }
                out.emit(StreamEvent::TextDelta {
                    text: partial_json.into_owned(),
                })
            }
            Delta::InputJsonDelta { partial_json } => {
                let call = self.blocks.iter().find(|(i, _)| *i == index).map(|b| b.1);
                let Some(index) = call else {
                    return Err(Error::Stream(format!(
                        "input_json_delta for block {index}, which is no tool_use"
                    )));
                };
                if partial_json.is_empty() {
                    return Ok(());
                }
                out.emit(StreamEvent::ToolCallDelta {
                    index,
                    arguments: partial_json.into_owned(),
                })
            }
            Delta::Other => Ok(()),
        }
    }

    /// Merges a usage report (`message_start` has the input, `message_delta` the output;
    /// each field, when present, is the running total).
    fn usage(&mut self, wire: Option<WireUsage>, out: &mut Emitter<'_, '_>) -> Result<(), Error> {
        let Some(w) = wire else { return Ok(()) };
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
        out.emit(StreamEvent::Usage { usage: u })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, ToolCall, ToolResultMessage};
    use serde_json::json;

    #[test]
    fn request_body_has_system_tools_and_alternating_turns() {
        let request = Request {
            system_prompt: "Be terse.".into(),
            model: "claude".into(),
            tools: vec![ToolDefinition {
                name: "f".into(),
                description: "does f".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
            messages: [
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
                    content: vec![crate::Part::text("bad arguments")],
                    is_error: true,
                    details: None,
                }),
                Message::user("and now?"),
            ]
            .into_iter()
            .map(Arc::new)
            .collect(),
            thinking: ThinkingLevel::Off,
            output: None,
            body_cache: None,
        };
        let body = Anthropic::new("http://x")
            .temperature(0.5)
            .prompt_cache(PromptCache::off())
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

    /// The breakpoints go after the tools, after the system prompt, on the last block of
    /// the newest turn and of the user turn before the last reply: four, the API's most.
    #[test]
    fn prompt_cache_breakpoints_follow_tools_system_and_the_transcript() {
        let call = |id: &str| {
            Message::Assistant(AssistantMessage {
                content: vec![ContentBlock::ToolCall(ToolCall::new(id, "f", "{}"))],
                ..AssistantMessage::default()
            })
        };
        let result = |id: &str| Message::ToolResult(ToolResultMessage::new(id, "f", "done"));
        let request = Request::new(
            "claude",
            [
                Message::user("one"),
                call("t1"),
                result("t1"),
                call("t2"),
                result("t2"),
                Message::user("and now?"),
            ]
            .into_iter()
            .map(Arc::new)
            .collect(),
        )
        .with_system_prompt("Be terse.")
        .with_tools(vec![
            ToolDefinition::new("f", "does f", json!({"type": "object"})),
            ToolDefinition::new("g", "does g", json!({"type": "object"})),
        ]);
        let mark = json!({"type": "ephemeral"});
        let body = Anthropic::new("http://x").request_body(&request);
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "Be terse.", "cache_control": mark}])
        );
        assert_eq!(body["tools"][0].get("cache_control"), None);
        assert_eq!(body["tools"][1]["cache_control"], mark);
        let marked: Vec<(usize, usize)> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .flat_map(|(t, turn)| {
                let blocks = turn["content"].as_array().unwrap().clone();
                blocks
                    .into_iter()
                    .enumerate()
                    .filter(|(_, b)| b.get("cache_control").is_some())
                    .map(move |(b, _)| (t, b))
            })
            .collect();
        // Turns: user, assistant, user (t1), assistant, user (t2 + "and now?").
        assert_eq!(marked, [(2, 0), (4, 1)]);
        assert_eq!(body["messages"][4]["content"][1]["cache_control"], mark);
        let hour = Anthropic::new("http://x")
            .prompt_cache(
                PromptCache::auto()
                    .tools(false)
                    .transcript(false)
                    .one_hour(true),
            )
            .request_body(&request);
        assert_eq!(
            hour["system"][0]["cache_control"],
            json!({"type": "ephemeral", "ttl": "1h"})
        );
        assert_eq!(hour["tools"][1].get("cache_control"), None);
        assert!(!hour["messages"].to_string().contains("cache_control"));
        let off = Anthropic::new("http://x")
            .prompt_cache(PromptCache::off())
            .request_body(&request);
        assert_eq!(off["system"], json!("Be terse."));
        assert!(!off.to_string().contains("cache_control"));
    }
}
