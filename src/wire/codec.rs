//! The native dialect: one event to one JSON-RPC 2.0 notification line, and back.
//!
//! Encoding serializes param structs that borrow the event's fields straight into the
//! output buffer (no intermediate `serde_json::Value` or `String`, no copy of a delta);
//! decoding is strict: the envelope is checked member by member, then
//! the params of the named method are deserialized into the same structs. A native line is
//! read in one pass from its text (`Decoder::in_one_pass`: the envelope with its params
//! kept as text, then the params as the method's struct); a line that reading refuses is
//! read again from a `serde_json::Value` of the line, which decides what is accepted and
//! names what is wrong, so both readings accept the same lines with the same events.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::context::{CompactionReason, ContextUsage};
use crate::elicit::{Elicitation, ElicitationAnswer};
use crate::event::{AgentEvent, RunStopReason};
use crate::llm::StreamEvent;
use crate::message::{Message, ToolCall, ToolResultMessage, Usage};
use crate::output::OutputCheck;
use crate::partial::PartialMessage;
use crate::tool::ToolOutput;
use crate::{Error, ErrorInfo};

// The envelope of every line is the JSON-RPC peer's.
pub(crate) use crate::jsonrpc::{check_jsonrpc, notification_to, parse_object, write_json};

use super::pagent_read::{PAGENT_METHODS, Reader};
use super::writer::Dialect;

/// The longest line [`Decoder`] accepts by default, in bytes (64 MiB), line break excluded.
///
/// A line is one event. Text alone rarely comes near it; inline images and documents do, as
/// their bytes ride in every line that carries their message (see the [size
/// policy](super#images-and-documents-the-size-policy)): an `AgentEnd` carries every message
/// of its run, so a run of 10 screenshots of 3 MB writes an `AgentEnd` of 40 MB. Raise it
/// with [`Decoder::max_line_len`] if your runs carry more.
pub const MAX_LINE_LEN: usize = 64 * 1024 * 1024;

/// Every method of the native dialect, in lifecycle order.
pub const METHODS: [&str; 17] = [
    "AgentStart",
    "TurnStart",
    "MessageStart",
    "MessageUpdate",
    "MessageEnd",
    "CompactionStart",
    "CompactionEnd",
    "ToolStart",
    "ToolExecute",
    "ToolUpdate",
    "ElicitationStart",
    "ElicitationEnd",
    "ToolEnd",
    "OutputChecked",
    "TurnEnd",
    "AgentEnd",
    "MessagesReplaced",
];

// The params of each method. The structs are generic over how a field is held: encoding
// borrows from the event (a `&T` serializes as `T`), decoding owns.

#[derive(Serialize, Deserialize)]
struct Empty {}

#[derive(Serialize, Deserialize)]
struct TurnParams {
    turn: u32,
}

#[derive(Serialize, Deserialize)]
struct MessageParams<M> {
    message: M,
}

#[derive(Serialize, Deserialize)]
struct UpdateParams<D> {
    delta: D,
}

#[derive(Serialize, Deserialize)]
struct ToolStartParams<C> {
    call: C,
    #[serde(
        default,
        rename = "at_ms",
        skip_serializing_if = "Option::is_none",
        with = "crate::types::unix_ms"
    )]
    at: Option<SystemTime>,
}

#[derive(Serialize, Deserialize)]
struct ToolExecuteParams<S, V> {
    call_id: S,
    tool_name: S,
    arguments: V,
    rewritten: bool,
}

#[derive(Serialize, Deserialize)]
struct ToolUpdateParams<S, O> {
    call_id: S,
    tool_name: S,
    partial: O,
}

/// `ElicitationStart` (`body` the question) and `ElicitationEnd` (`body` the answer), each in
/// the shape of `Elicitation::to_json` / `ElicitationAnswer::to_json`.
#[derive(Serialize, Deserialize)]
struct ElicitationParams<S> {
    id: S,
    tool_call_id: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    answer: Option<Value>,
}

#[derive(Serialize, Deserialize)]
struct ToolEndParams<R> {
    result: R,
    #[serde(
        default,
        rename = "duration_us",
        skip_serializing_if = "Option::is_none",
        with = "crate::types::micros"
    )]
    duration: Option<Duration>,
}

/// An [`OutputCheck`]: its `value`, or the `error` that says what was wrong, never both.
#[derive(Serialize, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de>, V: Deserialize<'de>"))]
struct OutputParams<S, V> {
    turn: u32,
    schema: S,
    attempt: u32,
    raw: S,
    // Present even when it is `null` (a valid answer to a schema that allows it): absent
    // and `null` differ here.
    #[serde(
        default = "none",
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    value: Option<V>,
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    error: Option<S>,
}

/// A member that is present, `null` included.
fn present<'de, D: serde::Deserializer<'de>, V: Deserialize<'de>>(
    d: D,
) -> Result<Option<V>, D::Error> {
    V::deserialize(d).map(Some)
}

#[derive(Serialize, Deserialize)]
struct TurnEndParams<M, R> {
    turn: u32,
    message: M,
    tool_results: R,
    stop_reason: RunStopReason,
    // A line written before the context figures existed has none.
    #[serde(default)]
    context: ContextUsage,
}

#[derive(Serialize, Deserialize)]
struct CompactionStartParams {
    reason: CompactionReason,
    messages: u64,
    context: ContextUsage,
}

#[derive(Serialize, Deserialize)]
struct CompactionEndParams<E> {
    reason: CompactionReason,
    context: ContextUsage,
    usage: Usage,
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    error: Option<E>,
}

#[derive(Serialize, Deserialize)]
struct MessagesParams<M> {
    messages: M,
}

#[derive(Serialize, Deserialize)]
struct AgentEndParams<M, E> {
    messages: M,
    stop_reason: RunStopReason,
    usage: Usage,
    // `default = "none"`: a plain `default` would ask `E: Default` of the error type.
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    error: Option<E>,
}

fn none<E>() -> Option<E> {
    None
}

/// Encodes `event` as one line of the native dialect, without the line break.
///
/// The line is `{"jsonrpc":"2.0","method":"<EventName>","params":{..}}` (see the
/// [module docs](super) for every method's params). It never contains a line break: JSON
/// escapes those inside strings. A `MessageUpdate` line carries only its delta, so a reply
/// of n deltas costs O(n) bytes on the wire.
pub fn encode_event_line(event: &AgentEvent) -> String {
    let mut line = Vec::new();
    write_event(&mut line, event);
    line.pop();
    String::from_utf8(line).expect("JSON is UTF-8")
}

/// Appends the line of `event` and its `\n` to `buf`, serializing the event's fields in
/// place: nothing is copied on the way.
pub(crate) fn write_event(buf: &mut Vec<u8>, event: &AgentEvent) {
    let method = event.name();
    match event {
        AgentEvent::AgentStart => notification_to(buf, method, &Empty {}),
        AgentEvent::TurnStart { turn } => notification_to(buf, method, &TurnParams { turn: *turn }),
        AgentEvent::MessageStart { message } | AgentEvent::MessageEnd { message } => {
            notification_to(buf, method, &MessageParams { message });
        }
        AgentEvent::MessageUpdate { delta, .. } => match delta {
            // Most lines of a run: their bytes put in as serde writes them, the text
            // escaped by serde_json.
            StreamEvent::TextDelta { text } => text_line(buf, "text_delta", text),
            StreamEvent::ThinkingDelta { text } => text_line(buf, "thinking_delta", text),
            _ => notification_to(buf, method, &UpdateParams { delta }),
        },
        AgentEvent::ToolStart { call, at } => {
            notification_to(buf, method, &ToolStartParams { call, at: *at });
        }
        AgentEvent::ToolExecute {
            call_id,
            tool_name,
            arguments,
            rewritten,
        } => notification_to(
            buf,
            method,
            &ToolExecuteParams {
                call_id,
                tool_name,
                arguments,
                rewritten: *rewritten,
            },
        ),
        AgentEvent::ToolUpdate {
            call_id,
            tool_name,
            partial,
        } => notification_to(
            buf,
            method,
            &ToolUpdateParams {
                call_id,
                tool_name,
                partial,
            },
        ),
        AgentEvent::ElicitationStart {
            id,
            tool_call_id,
            request,
        } => notification_to(
            buf,
            method,
            &ElicitationParams {
                id,
                tool_call_id,
                request: Some(request.to_json()),
                answer: None,
            },
        ),
        AgentEvent::ElicitationEnd {
            id,
            tool_call_id,
            answer,
        } => notification_to(
            buf,
            method,
            &ElicitationParams {
                id,
                tool_call_id,
                request: None,
                answer: Some(answer.to_json()),
            },
        ),
        AgentEvent::ToolEnd { result, duration } => notification_to(
            buf,
            method,
            &ToolEndParams {
                result,
                duration: *duration,
            },
        ),
        AgentEvent::OutputChecked { turn, check } => notification_to(
            buf,
            method,
            &OutputParams {
                turn: *turn,
                schema: &check.schema,
                attempt: check.attempt,
                raw: &check.raw,
                value: check.value.as_ref().ok(),
                error: check.value.as_ref().err(),
            },
        ),
        AgentEvent::TurnEnd {
            turn,
            message,
            tool_results,
            stop_reason,
            context,
        } => notification_to(
            buf,
            method,
            &TurnEndParams {
                turn: *turn,
                message,
                tool_results,
                stop_reason: *stop_reason,
                context: *context,
            },
        ),
        AgentEvent::CompactionStart {
            reason,
            messages,
            context,
        } => notification_to(
            buf,
            method,
            &CompactionStartParams {
                reason: *reason,
                messages: *messages,
                context: *context,
            },
        ),
        AgentEvent::CompactionEnd {
            reason,
            context,
            usage,
            error,
        } => notification_to(
            buf,
            method,
            &CompactionEndParams {
                reason: *reason,
                context: *context,
                usage: *usage,
                error: error.as_ref(),
            },
        ),
        AgentEvent::MessagesReplaced { messages } => {
            notification_to(buf, method, &MessagesParams { messages });
        }
        AgentEvent::AgentEnd {
            messages,
            stop_reason,
            usage,
            error,
        } => notification_to(
            buf,
            method,
            &AgentEndParams {
                messages,
                stop_reason: *stop_reason,
                usage: *usage,
                error: error.as_ref(),
            },
        ),
    }
}

/// Decodes one line of the native dialect on its own.
///
/// The stateless form of [`Decoder::decode_line`]: it uses a fresh decoder, so a
/// `MessageUpdate` decoded alone carries a partial message built from its own delta only
/// (empty model, no earlier text). Every other event decodes to exactly what was encoded.
///
/// # Errors
/// [`Error::Wire`] naming the problem: not JSON or trailing garbage, a `jsonrpc` other than
/// `"2.0"`, an `id` member (events are notifications), a missing or unknown method, params
/// that are not an object, a missing or mistyped field, a line break inside the line, a line
/// over [`MAX_LINE_LEN`].
pub fn decode_event_line(line: &str) -> Result<AgentEvent, Error> {
    Decoder::new().decode_line(line)
}

/// A stateful decoder of a wire stream: gives back exactly the events the agent emitted,
/// `MessageUpdate` partials included.
///
/// [`Decoder::new`] reads the native dialect, where each line is one event
/// ([`Decoder::decode_line`]). [`Decoder::for_dialect`] reads the dialect named, and
/// [`Decoder::detecting`] any of the three, told by the first line; a pagent line may stand
/// for several events or none, so read those with [`Decoder::decode_events`] (see the [wire
/// docs](super#reading-pagent-lines) for the mapping), and call [`Decoder::finish`] at the
/// end of the stream.
///
/// A `MessageUpdate` line carries only its delta. The decoder keeps the reply being
/// streamed: an assistant `MessageStart` sets it, each `MessageUpdate` advances it with
/// [`PartialMessage::apply`], `MessageEnd` and `AgentEnd` clear it. Feed it every line of a
/// stream, in order.
#[derive(Clone, Debug)]
pub struct Decoder {
    partial: Option<PartialMessage>,
    max_line_len: usize,
    mode: Mode,
}

/// What a decoder reads.
#[derive(Clone, Debug)]
enum Mode {
    Native,
    Pagent(Box<Reader>),
    /// No line yet: the first one tells.
    Detect,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder of the native dialect at the start of a stream. Lines up to
    /// [`MAX_LINE_LEN`] bytes.
    pub fn new() -> Decoder {
        Decoder::for_dialect(Dialect::Native)
    }

    /// A decoder of `dialect`: [`Dialect::Native`] as [`Decoder::new`], or one of the pagent
    /// dialects, whose lines are mapped onto our events (read them with
    /// [`Decoder::decode_events`]). A line of another dialect is an error.
    pub fn for_dialect(dialect: Dialect) -> Decoder {
        let mode = match dialect {
            Dialect::PagentV1 | Dialect::PagentV4 => {
                Mode::Pagent(Box::new(Reader::new(Some(dialect))))
            }
            Dialect::Native => Mode::Native,
        };
        Decoder {
            partial: None,
            max_line_len: MAX_LINE_LEN,
            mode,
        }
    }

    /// A decoder that tells the dialect from the lines: the method of the first line that
    /// decodes says native or pagent (`TurnEnd`, a method of both, by its params: pagent's
    /// has `stopped`), and the first pagent line that differs between v1 and
    /// v4 (`StepEnd` or `TurnResult`, a `TurnEnd` or `RunEnd` with or without
    /// `stop_reason`) says which pagent; until then the lines common to both decode the same
    /// way in either. [`Mirror::new`](super::Mirror::new) uses one.
    pub fn detecting() -> Decoder {
        Decoder {
            mode: Mode::Detect,
            ..Decoder::new()
        }
    }

    /// The dialect being read: `None` while a detecting decoder has not yet seen a line
    /// that tells it.
    pub fn dialect(&self) -> Option<Dialect> {
        match &self.mode {
            Mode::Native => Some(Dialect::Native),
            Mode::Pagent(reader) => reader.dialect(),
            Mode::Detect => None,
        }
    }

    /// The longest line accepted, in bytes, line break excluded. Defaults to
    /// [`MAX_LINE_LEN`].
    #[must_use]
    pub fn max_line_len(mut self, bytes: usize) -> Decoder {
        self.max_line_len = bytes;
        self
    }

    pub(crate) fn line_limit(&self) -> usize {
        self.max_line_len
    }

    /// This decoder, going on with `reply` as the reply being streamed (a native stream
    /// joined at a snapshot taken in the middle of a reply).
    pub(crate) fn continuing(mut self, reply: Option<&PartialMessage>) -> Decoder {
        if !matches!(self.mode, Mode::Pagent(_)) {
            self.partial = reply.cloned();
        }
        self
    }

    /// The reply being streamed, as far as the decoded lines tell.
    pub fn partial(&self) -> Option<&PartialMessage> {
        match &self.mode {
            Mode::Pagent(reader) => reader.partial(),
            _ => self.partial.as_ref(),
        }
    }

    /// Decodes the next line of a native stream, one event. One trailing `\n` (or `\r\n`)
    /// is allowed.
    ///
    /// A line that fails to decode leaves the decoder as it was.
    ///
    /// # Errors
    /// As [`decode_event_line`]; also a pagent line (on a decoder of a pagent dialect, or a
    /// detecting one that found pagent), which may stand for several events or none: read
    /// those with [`Decoder::decode_events`].
    pub fn decode_line(&mut self, line: &str) -> Result<AgentEvent, Error> {
        let line = self.checked(line)?;
        if let Some(event) = self.in_one_pass(line) {
            return Ok(event);
        }
        let (method, params) = parse_notification(line)?;
        let pagent = match &self.mode {
            Mode::Native => false,
            Mode::Pagent(_) => true,
            Mode::Detect => pagent_line(&method, &params).unwrap_or(false),
        };
        if pagent {
            return Err(Error::Wire(format!(
                "{method} is read as a pagent line, which may stand for several events or none: \
                 decode it with Decoder::decode_events"
            )));
        }
        let event = self.native(&method, Params::Tree(params))?;
        self.mode = Mode::Native;
        Ok(event)
    }

    /// Decodes the next line of the stream into the events it stands for: exactly one for a
    /// native line, zero or more for a pagent line (see the [wire
    /// docs](super#reading-pagent-lines)). One trailing `\n` (or `\r\n`) is allowed.
    ///
    /// A line that fails to decode leaves the decoder as it was.
    ///
    /// # Errors
    /// [`Error::Wire`] naming the problem, as [`decode_event_line`] for a native line; for a
    /// pagent line: the envelope as for a native line, an unknown method (or one of the other
    /// pagent version when the dialect was chosen), a missing field that pagent's own decoder
    /// requires, a field of the wrong type, an unknown `stop_reason`.
    pub fn decode_events(&mut self, line: &str) -> Result<Vec<AgentEvent>, Error> {
        let line = self.checked(line)?;
        if let Some(event) = self.in_one_pass(line) {
            return Ok(vec![event]);
        }
        let (method, params) = parse_notification(line)?;
        let mut out = Vec::with_capacity(1);
        let detected = match &mut self.mode {
            Mode::Pagent(reader) => {
                reader.decode(&method, params, &mut out)?;
                return Ok(out);
            }
            Mode::Native => Mode::Native,
            Mode::Detect if pagent_line(&method, &params) == Some(false) => Mode::Native,
            Mode::Detect if pagent_line(&method, &params) == Some(true) => {
                let mut reader = Reader::new(None);
                reader.decode(&method, params, &mut out)?;
                self.mode = Mode::Pagent(Box::new(reader));
                return Ok(out);
            }
            Mode::Detect => {
                return Err(Error::Wire(format!(
                    "unknown method `{method}`; the methods are {}, or pagent's {}",
                    METHODS.join(", "),
                    PAGENT_METHODS.join(", ")
                )));
            }
        };
        out.push(self.native(&method, Params::Tree(params))?);
        self.mode = detected;
        Ok(out)
    }

    /// The end of the stream. A pagent run still open then has broken off, which is how
    /// pagent's stream tells of a failed run: the events returned end it (its turn and the
    /// run end with [`RunStopReason::Error`]; see the [wire docs](super#reading-pagent-lines)).
    /// Nothing for a native stream, whose `AgentEnd` carries its error itself.
    #[must_use = "the events end the run that broke off"]
    pub fn finish(&mut self) -> Vec<AgentEvent> {
        let mut out = Vec::new();
        if let Mode::Pagent(reader) = &mut self.mode {
            reader.finish(&mut out);
        }
        out
    }

    /// Checks a line's length, and that it is one line; returns it without its line end.
    fn checked<'a>(&self, line: &'a str) -> Result<&'a str, Error> {
        let line = line
            .strip_suffix('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .unwrap_or(line);
        if line.len() > self.max_line_len {
            return Err(Error::Wire(format!(
                "line of {} bytes is over the limit of {} bytes",
                line.len(),
                self.max_line_len
            )));
        }
        if line.contains('\n') {
            return Err(Error::Wire(
                "a line break inside the line: one event per line".into(),
            ));
        }
        Ok(line)
    }

    /// A native line read in one pass, from its text: the envelope, then the params as the
    /// method's struct. `None` for anything else (a pagent line, or one the decoder must
    /// tell apart: `TurnEnd` while it detects the dialect) and for a line this reading
    /// refuses (an `id`, another member, a member twice, an escape in `method` or
    /// `jsonrpc`, params that do not read), which is read again through [`parse_notification`]:
    /// what that reading accepts and the errors it gives are the decoder's.
    fn in_one_pass(&mut self, line: &str) -> Option<AgentEvent> {
        let detecting = match self.mode {
            Mode::Native => false,
            Mode::Detect => true,
            Mode::Pagent(_) => return None,
        };
        let envelope: Envelope<'_> = serde_json::from_str(line).ok()?;
        let params = match envelope.params {
            None => "{}",
            Some(params) if params.get().starts_with('{') => params.get(),
            Some(_) => return None,
        };
        let method = envelope.method;
        if envelope.jsonrpc.get() != "\"2.0\""
            || !METHODS.contains(&method)
            || detecting && method == "TurnEnd"
        {
            return None;
        }
        let event = self.native(method, Params::Text(params)).ok()?;
        self.mode = Mode::Native;
        Some(event)
    }

    /// Decodes a native line's method and params, keeping the partial reply.
    fn native(&mut self, method: &str, params: Params<'_>) -> Result<AgentEvent, Error> {
        let event = self.event(method, params)?;
        match &event {
            AgentEvent::MessageStart { message } => {
                if let Message::Assistant(m) = &**message {
                    self.partial = Some(PartialMessage::from_message(m));
                }
            }
            AgentEvent::MessageEnd { .. } | AgentEvent::AgentEnd { .. } => self.partial = None,
            AgentEvent::MessageUpdate { message, .. } => self.partial = Some(message.clone()),
            _ => {}
        }
        Ok(event)
    }

    fn event(&self, method: &str, params: Params<'_>) -> Result<AgentEvent, Error> {
        Ok(match method {
            "AgentStart" => {
                let Empty {} = params_of(method, params)?;
                AgentEvent::AgentStart
            }
            "TurnStart" => {
                let p: TurnParams = params_of(method, params)?;
                AgentEvent::TurnStart { turn: p.turn }
            }
            "MessageStart" => {
                let p: MessageParams<Arc<Message>> = params_of(method, params)?;
                AgentEvent::MessageStart { message: p.message }
            }
            "MessageUpdate" => {
                let p: UpdateParams<StreamEvent> = params_of(method, params)?;
                let message = match &self.partial {
                    Some(partial) => partial.apply(&p.delta),
                    None => PartialMessage::default().apply(&p.delta),
                };
                AgentEvent::MessageUpdate {
                    message,
                    delta: p.delta,
                }
            }
            "MessageEnd" => {
                let p: MessageParams<Arc<Message>> = params_of(method, params)?;
                AgentEvent::MessageEnd { message: p.message }
            }
            "ToolStart" => {
                let p: ToolStartParams<ToolCall> = params_of(method, params)?;
                AgentEvent::ToolStart {
                    call: p.call,
                    at: p.at,
                }
            }
            "ToolExecute" => {
                let p: ToolExecuteParams<String, Value> = params_of(method, params)?;
                AgentEvent::ToolExecute {
                    call_id: p.call_id,
                    tool_name: p.tool_name,
                    arguments: p.arguments,
                    rewritten: p.rewritten,
                }
            }
            "ToolUpdate" => {
                let p: ToolUpdateParams<String, ToolOutput> = params_of(method, params)?;
                AgentEvent::ToolUpdate {
                    call_id: p.call_id,
                    tool_name: p.tool_name,
                    partial: p.partial,
                }
            }
            "ElicitationStart" | "ElicitationEnd" => {
                let p: ElicitationParams<String> = params_of(method, params)?;
                let invalid =
                    |why: String| Error::Wire(format!("invalid params of {method}: {why}"));
                if method == "ElicitationStart" {
                    let request = p
                        .request
                        .ok_or_else(|| invalid("missing field `request`".into()))?;
                    AgentEvent::ElicitationStart {
                        id: p.id,
                        tool_call_id: p.tool_call_id,
                        request: Arc::new(Elicitation::from_json(&request).map_err(invalid)?),
                    }
                } else {
                    let answer = p
                        .answer
                        .ok_or_else(|| invalid("missing field `answer`".into()))?;
                    AgentEvent::ElicitationEnd {
                        id: p.id,
                        tool_call_id: p.tool_call_id,
                        answer: ElicitationAnswer::from_json(&answer).map_err(invalid)?,
                    }
                }
            }
            "ToolEnd" => {
                let p: ToolEndParams<Arc<ToolResultMessage>> = params_of(method, params)?;
                AgentEvent::ToolEnd {
                    result: p.result,
                    duration: p.duration,
                }
            }
            "OutputChecked" => {
                let p: OutputParams<String, Value> = params_of(method, params)?;
                let value = match (p.value, p.error) {
                    (Some(value), None) => Ok(value),
                    (None, Some(error)) => Err(error),
                    _ => {
                        return Err(Error::Wire(
                            "invalid params of OutputChecked: exactly one of `value` and \
                             `error` is needed"
                                .into(),
                        ));
                    }
                };
                AgentEvent::OutputChecked {
                    turn: p.turn,
                    check: Arc::new(OutputCheck {
                        schema: p.schema,
                        attempt: p.attempt,
                        raw: p.raw,
                        value,
                    }),
                }
            }
            "TurnEnd" => {
                let p: TurnEndParams<Arc<Message>, Vec<Arc<ToolResultMessage>>> =
                    params_of(method, params)?;
                AgentEvent::TurnEnd {
                    turn: p.turn,
                    message: p.message,
                    tool_results: p.tool_results,
                    stop_reason: p.stop_reason,
                    context: p.context,
                }
            }
            "CompactionStart" => {
                let p: CompactionStartParams = params_of(method, params)?;
                AgentEvent::CompactionStart {
                    reason: p.reason,
                    messages: p.messages,
                    context: p.context,
                }
            }
            "CompactionEnd" => {
                let p: CompactionEndParams<ErrorInfo> = params_of(method, params)?;
                AgentEvent::CompactionEnd {
                    reason: p.reason,
                    context: p.context,
                    usage: p.usage,
                    error: p.error,
                }
            }
            "AgentEnd" => {
                let p: AgentEndParams<Vec<Arc<Message>>, ErrorInfo> = params_of(method, params)?;
                AgentEvent::AgentEnd {
                    messages: p.messages,
                    stop_reason: p.stop_reason,
                    usage: p.usage,
                    error: p.error,
                }
            }
            "MessagesReplaced" => {
                let p: MessagesParams<Vec<Arc<Message>>> = params_of(method, params)?;
                AgentEvent::MessagesReplaced {
                    messages: p.messages,
                }
            }
            other => {
                return Err(Error::Wire(format!(
                    "unknown method `{other}`; the methods are {}",
                    METHODS.join(", ")
                )));
            }
        })
    }
}

/// Whether a line is a pagent one, for a decoder that detects the dialect: by its method,
/// or for `TurnEnd` (a method of both) by its params: pagent's has `stopped`, ours
/// `message` and `tool_results`. `None` for a method of neither.
fn pagent_line(method: &str, params: &Value) -> Option<bool> {
    if method == "TurnEnd" {
        Some(params.get("stopped").is_some())
    } else if METHODS.contains(&method) {
        Some(false)
    } else if PAGENT_METHODS.contains(&method) {
        Some(true)
    } else {
        None
    }
}

/// The line of a `MessageUpdate` whose delta is text of `kind` (`text_delta`,
/// `thinking_delta`): the bytes [`notification_to`] writes for its [`UpdateParams`].
fn text_line(buf: &mut Vec<u8>, kind: &str, text: &str) {
    buf.extend_from_slice(
        br#"{"jsonrpc":"2.0","method":"MessageUpdate","params":{"delta":{"type":""#,
    );
    buf.extend_from_slice(kind.as_bytes());
    buf.extend_from_slice(br#"","text":"#);
    write_json(buf, text);
    buf.extend_from_slice(b"}}}\n");
}

/// A native line's envelope, read in one pass, its params kept as the text they are.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: &'a RawValue,
    method: &'a str,
    /// Absent, or the value's text (`null` included, which is no object).
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
}

/// A native line's params: their text in the line, or the tree [`parse_notification`] made.
enum Params<'a> {
    Text(&'a str),
    Tree(Value),
}

fn params_of<T: for<'de> Deserialize<'de>>(method: &str, params: Params<'_>) -> Result<T, Error> {
    match params {
        Params::Text(text) => serde_json::from_str(text),
        Params::Tree(tree) => serde_json::from_value(tree),
    }
    .map_err(|e| Error::Wire(format!("invalid params of {method}: {e}")))
}

/// Checks the envelope of a notification; returns its method and params (`{}` when absent).
fn parse_notification(line: &str) -> Result<(String, Value), Error> {
    let mut object = parse_object(line.as_bytes())?;
    check_jsonrpc(&object).map_err(Error::Wire)?;
    if object.contains_key("id") {
        return Err(Error::Wire(
            "an event is a notification and must not have an `id`".into(),
        ));
    }
    let method = match object.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return Err(Error::Wire("`method` is not a string".into())),
        None => return Err(Error::Wire("no `method` member".into())),
    };
    let params = match object.remove("params") {
        None => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return Err(Error::Wire(format!("params of {method} is not an object")));
        }
    };
    if let Some(extra) = object.keys().find(|k| *k != "jsonrpc") {
        return Err(Error::Wire(format!(
            "unexpected member `{extra}` in a notification"
        )));
    }
    Ok((method, params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::AssistantMessage;

    #[test]
    fn a_text_delta_line_is_the_bytes_serde_writes() {
        for text in [
            "",
            "abcd",
            "a\"b\\c\n\r\t\u{1}\u{7f}",
            "\u{e9}\u{1f600} </script>",
        ] {
            for delta in [
                StreamEvent::TextDelta { text: text.into() },
                StreamEvent::ThinkingDelta { text: text.into() },
            ] {
                let mut written = Vec::new();
                write_event(
                    &mut written,
                    &AgentEvent::MessageUpdate {
                        message: PartialMessage::default(),
                        delta: delta.clone(),
                    },
                );
                let mut serialized = Vec::new();
                notification_to(
                    &mut serialized,
                    "MessageUpdate",
                    &UpdateParams { delta: &delta },
                );
                assert_eq!(
                    String::from_utf8(written).unwrap(),
                    String::from_utf8(serialized).unwrap()
                );
            }
        }
    }

    #[test]
    fn turn_start_line_is_exact() {
        let line = encode_event_line(&AgentEvent::TurnStart { turn: 3 });
        assert_eq!(
            line,
            r#"{"jsonrpc":"2.0","method":"TurnStart","params":{"turn":3}}"#
        );
        assert_eq!(
            decode_event_line(&line).unwrap(),
            AgentEvent::TurnStart { turn: 3 }
        );
    }

    #[test]
    fn agent_end_error_line_is_exact_and_decodes_strictly() {
        let event = AgentEvent::AgentEnd {
            messages: Vec::new(),
            stop_reason: RunStopReason::Error,
            usage: Usage::default(),
            error: Some(ErrorInfo::from(&Error::Timeout(
                crate::TimeoutPhase::FirstByte,
            ))),
        };
        let line = encode_event_line(&event);
        assert_eq!(
            line,
            concat!(
                r#"{"jsonrpc":"2.0","method":"AgentEnd","params":{"messages":[],"stop_reason":"error","#,
                r#""usage":{"input":0,"output":0,"cache_read":0,"cache_write":0,"reasoning":0,"total":0},"#,
                r#""error":{"kind":"timeout","phase":"first_byte","message":"timed out waiting for the first byte"}}}"#
            )
        );
        assert_eq!(decode_event_line(&line).unwrap(), event);
        // Without an error the member is left out, and reads back as none.
        let ok = AgentEvent::AgentEnd {
            messages: Vec::new(),
            stop_reason: RunStopReason::NoToolCalls,
            usage: Usage::default(),
            error: None,
        };
        let line = encode_event_line(&ok);
        assert!(!line.contains("error"), "{line}");
        assert_eq!(decode_event_line(&line).unwrap(), ok);
        let bad = line.replace(
            r#""stop_reason":"no_tool_calls""#,
            r#""stop_reason":"error","error":{"kind":"timeout","message":"x"}"#,
        );
        let e = decode_event_line(&bad).unwrap_err().to_string();
        assert!(e.contains("a timeout needs its `phase`"), "{e}");
    }

    #[test]
    fn tool_execute_line_is_exact_and_decodes_strictly() {
        let event = AgentEvent::ToolExecute {
            call_id: "call_1".into(),
            tool_name: "echo".into(),
            arguments: serde_json::json!({"text": "hi"}),
            rewritten: true,
        };
        let line = encode_event_line(&event);
        assert_eq!(
            line,
            concat!(
                r#"{"jsonrpc":"2.0","method":"ToolExecute","params":{"call_id":"call_1","#,
                r#""tool_name":"echo","arguments":{"text":"hi"},"rewritten":true}}"#
            )
        );
        assert_eq!(decode_event_line(&line).unwrap(), event);
        let missing = line.replace(r#","rewritten":true"#, "");
        let e = decode_event_line(&missing).unwrap_err().to_string();
        assert!(e.contains("missing field `rewritten`"), "{e}");
    }

    #[test]
    fn update_line_carries_only_the_delta() {
        let partial = PartialMessage::new("m").apply(&StreamEvent::text("a long reply so far"));
        let event = AgentEvent::MessageUpdate {
            message: partial.apply(&StreamEvent::text("!")),
            delta: StreamEvent::text("!"),
        };
        assert_eq!(
            encode_event_line(&event),
            r#"{"jsonrpc":"2.0","method":"MessageUpdate","params":{"delta":{"type":"text_delta","text":"!"}}}"#
        );
    }

    #[test]
    fn decoder_rebuilds_the_partial() {
        let start = AgentEvent::MessageStart {
            message: Arc::new(Message::Assistant(AssistantMessage {
                model: "m".into(),
                ..Default::default()
            })),
        };
        let mut d = Decoder::new();
        d.decode_line(&encode_event_line(&start)).unwrap();
        let mut partial = PartialMessage::new("m");
        for piece in ["Hel", "lo\n"] {
            let delta = StreamEvent::text(piece);
            partial = partial.apply(&delta);
            let event = AgentEvent::MessageUpdate {
                message: partial.clone(),
                delta,
            };
            let line = encode_event_line(&event);
            assert!(!line.contains('\n'));
            assert_eq!(d.decode_line(&line).unwrap(), event);
        }
    }
}
