//! The Chat Completions event stream, decoded: each `data:` chunk of an
//! [`OpenAiCompat`](super::OpenAiCompat) reply becomes the stream events it carries.
//!
//! # Why the chunk is read in place
//! A chunk is read by visitors that write each field where it stays (the [`Chunk`] on the
//! decoder's stack), not by derived `Deserialize` types that return each level by value.
//! Returned by value, every level (delta, choice, list of choices, chunk) was stored field
//! by field and then copied as a whole by the level above: each copy reads back what was
//! just written in wider loads, which the CPU cannot forward from the stores (a stall of a
//! dozen cycles or more each time, on every delta). Profiled, those copies were most of the
//! time serde's struct code took for a text delta. Written in place, nothing is copied
//! until the text goes into its event.
//!
//! What is read is what the derived types read, with the same meaning: unknown fields are
//! skipped, `null` is an absent field, a field given twice is an error, a value of the wrong
//! type is an error, and a chunk is emitted only once it parsed whole (a malformed chunk
//! emits nothing of itself, and fails the reply with [`Error::Stream`]). The reply's `id`
//! and `model` are read from the first chunk in the same pass (they were a second parse of
//! it: per tool turn, most of the cost of its chunks), leniently: a value that is not a
//! string is ignored, as it was.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use smallvec::SmallVec;

use super::http::{self, Decode, Emitter};
use super::{ReplyEnd, StreamEvent};
use crate::Error;
use crate::message::{StopReason, Usage};

#[derive(Default)]
pub(super) struct Decoder {
    // The server's `index` of each call we started, in our call order.
    calls: Keys,
    finish: Option<Finish>,
    head_read: bool,
    id: Option<String>,
    model: Option<String>,
}

/// One chunk, as far as the decoder reads it: filled in place (see the module docs).
#[derive(Default)]
struct Chunk<'a> {
    /// The first of the `choices` (nearly always the only one).
    first: Choice<'a>,
    /// Any more choices, in order.
    rest: Vec<Choice<'a>>,
    // Boxed: they come once a reply (or never).
    usage: Option<Box<WireUsage>>,
    error: Option<Box<Value>>,
    /// Whether to read what the chunk says of the whole reply, its `id` and `model`: in the
    /// first chunk only (later ones repeat them, and skipping a field costs less than
    /// reading it). Read in the same pass; a value that is not a string is ignored.
    head: bool,
    id: Option<String>,
    model: Option<String>,
}

/// A choice and its delta together: an absent or `null` delta has no field set. Strings are
/// borrowed from the chunk's text unless they hold escapes.
#[derive(Default)]
struct Choice<'a> {
    content: Option<Cow<'a, str>>,
    reasoning_content: Option<Cow<'a, str>>,
    reasoning: Option<Cow<'a, str>>,
    // The first in place: no allocation but for a delta of several calls.
    tool_calls: Calls<'a>,
    finish_reason: Option<Cow<'a, str>>,
}

/// The call deltas of a choice, in order: the first in place.
type Calls<'a> = SmallVec<[ToolDelta<'a>; 1]>;

/// A call delta and its `function` together: an absent or `null` function has no field set.
#[derive(Default)]
struct ToolDelta<'a> {
    index: Option<u64>,
    id: Option<Cow<'a, str>>,
    name: Option<Cow<'a, str>>,
    arguments: Option<Cow<'a, str>>,
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

/// The fields a level reads, by position; any other key is skipped. A type per level, so
/// that each level's key lookup is compiled with its own names as constants (compared
/// inline, with their lengths known), however the compiler inlines serde's code around it:
/// a list passed as a value was compared with `memcmp` calls, a tenth of a delta's
/// instructions, whenever the key reader was not inlined into the level's visitor.
trait Fields {
    const NAMES: &'static [&'static str];
}

macro_rules! fields {
    ($($(#[$doc:meta])* $level:ident = [$($name:literal),+];)+) => {$(
        $(#[$doc])*
        struct $level;
        impl Fields for $level {
            const NAMES: &'static [&'static str] = &[$($name),+];
        }
    )+};
}

fields! {
    ChunkFields = ["choices", "usage", "error"];
    /// The first chunk's: those of every chunk, then the reply's.
    HeadFields = ["choices", "usage", "error", "id", "model"];
    ChoiceFields = ["delta", "finish_reason"];
    DeltaFields = ["content", "reasoning_content", "reasoning", "tool_calls"];
    CallFields = ["index", "id", "function"];
    FunctionFields = ["name", "arguments"];
}

/// The position of a map key in `F::NAMES`, `F::NAMES.len()` for any other key.
struct Key<F>(std::marker::PhantomData<F>);

impl<F> Key<F> {
    fn new() -> Key<F> {
        Key(std::marker::PhantomData)
    }
}

impl<'de, F: Fields> DeserializeSeed<'de> for Key<F> {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de, F: Fields> Visitor<'de> for Key<F> {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<usize, E> {
        Ok(F::NAMES
            .iter()
            .position(|f| *f == key)
            .unwrap_or(F::NAMES.len()))
    }
}

/// Marks field `i` of `fields` as read; an error if it was already (as derived types do).
fn first_time<E: de::Error>(
    seen: &mut u8,
    i: usize,
    fields: &'static [&'static str],
) -> Result<(), E> {
    if *seen & (1 << i) != 0 {
        return Err(E::duplicate_field(fields[i]));
    }
    *seen |= 1 << i;
    Ok(())
}

/// Reads a map whose keys are `F`'s: `field(map, i)` reads the value of field `i`; the
/// values of other keys are skipped.
fn read_map<'de, F: Fields, A: MapAccess<'de>>(
    map: &mut A,
    mut field: impl FnMut(&mut A, usize) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    let fields = F::NAMES;
    let mut seen = 0u8;
    while let Some(i) = map.next_key_seed(Key::<F>::new())? {
        if i == fields.len() {
            map.next_value::<IgnoredAny>()?;
            continue;
        }
        first_time(&mut seen, i, fields)?;
        field(map, i)?;
    }
    Ok(())
}

/// Fills a chunk; `HEAD`: the first one, with the reply's `id` and `model` (a visitor of
/// its own, so that the others look for none of these keys).
struct InChunk<'c, 'a, const HEAD: bool>(&'c mut Chunk<'a>);

impl<'de, const HEAD: bool> Visitor<'de> for InChunk<'_, 'de, HEAD> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a chunk")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let chunk = self.0;
        let fields = if HEAD {
            HeadFields::NAMES
        } else {
            ChunkFields::NAMES
        };
        let mut seen = 0;
        loop {
            let key = if HEAD {
                map.next_key_seed(Key::<HeadFields>::new())?
            } else {
                map.next_key_seed(Key::<ChunkFields>::new())?
            };
            let Some(i) = key else { break };
            match i {
                // `id` and `model` are not checked for repeats: the chunk's own fields are.
                0..3 => {
                    first_time(&mut seen, i, fields)?;
                    match i {
                        0 => map.next_value_seed(OrNull(InChoices(&mut *chunk)))?,
                        1 => chunk.usage = map.next_value()?,
                        _ => chunk.error = map.next_value()?,
                    }
                }
                3 | 4 if HEAD => {
                    if let Value::String(text) = map.next_value()? {
                        *(if i == 3 {
                            &mut chunk.id
                        } else {
                            &mut chunk.model
                        }) = Some(text);
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Fills a chunk's choices (a list).
struct InChoices<'c, 'a>(&'c mut Chunk<'a>);

impl<'de> Read<'de> for InChoices<'_, 'de> {
    fn read<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for InChoices<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of choices")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let chunk = self.0;
        if seq.next_element_seed(InChoice(&mut chunk.first))?.is_none() {
            return Ok(());
        }
        loop {
            let mut choice = Choice::default();
            if seq.next_element_seed(InChoice(&mut choice))?.is_none() {
                return Ok(());
            }
            chunk.rest.push(choice);
        }
    }
}

/// Fills a choice (a JSON object).
struct InChoice<'c, 'a>(&'c mut Choice<'a>);

impl<'de> DeserializeSeed<'de> for InChoice<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for InChoice<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a choice")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let choice = self.0;
        read_map::<ChoiceFields, _>(&mut map, |map, i| match i {
            0 => map.next_value_seed(OrNull(InDelta(&mut *choice))),
            _ => map.next_value_seed(text(&mut choice.finish_reason)),
        })
    }
}

/// `null` (which leaves the field unset), or what `V` reads.
struct OrNull<V>(V);

/// A visitor that reads its value itself (what `deserialize_*` it asks for).
trait Read<'de>: Visitor<'de, Value = ()> {
    fn read<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error>;
}

impl<'de, V: Read<'de>> DeserializeSeed<'de> for OrNull<V> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, V: Read<'de>> Visitor<'de> for OrNull<V> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)?;
        f.write_str(" or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.0.read(d)
    }
}

/// Fills the delta fields of a choice (an object).
struct InDelta<'c, 'a>(&'c mut Choice<'a>);

impl<'de> Read<'de> for InDelta<'_, 'de> {
    fn read<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for InDelta<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a delta")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let choice = self.0;
        read_map::<DeltaFields, _>(&mut map, |map, i| match i {
            0 => map.next_value_seed(text(&mut choice.content)),
            1 => map.next_value_seed(text(&mut choice.reasoning_content)),
            2 => map.next_value_seed(text(&mut choice.reasoning)),
            _ => map.next_value_seed(OrNull(InCalls(&mut choice.tool_calls))),
        })
    }
}

/// Fills the call deltas of a choice (a list).
struct InCalls<'c, 'a>(&'c mut Calls<'a>);

impl<'de> Read<'de> for InCalls<'_, 'de> {
    fn read<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for InCalls<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of tool calls")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let calls = self.0;
        loop {
            let mut call = ToolDelta::default();
            if seq.next_element_seed(InCall(&mut call))?.is_none() {
                return Ok(());
            }
            calls.push(call);
        }
    }
}

/// Fills a call delta (an object).
struct InCall<'c, 'a>(&'c mut ToolDelta<'a>);

impl<'de> DeserializeSeed<'de> for InCall<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for InCall<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tool call")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let call = self.0;
        read_map::<CallFields, _>(&mut map, |map, i| match i {
            0 => {
                call.index = map.next_value()?;
                Ok(())
            }
            1 => map.next_value_seed(text(&mut call.id)),
            _ => map.next_value_seed(OrNull(InFunction(&mut *call))),
        })
    }
}

/// Fills the `function` fields of a call delta (an object).
struct InFunction<'c, 'a>(&'c mut ToolDelta<'a>);

impl<'de> Read<'de> for InFunction<'_, 'de> {
    fn read<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for InFunction<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a function")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let call = self.0;
        read_map::<FunctionFields, _>(&mut map, |map, i| match i {
            0 => map.next_value_seed(text(&mut call.name)),
            _ => map.next_value_seed(text(&mut call.arguments)),
        })
    }
}

/// Fills an optional string: `null`, or a string (borrowed unless it holds escapes).
fn text<'c, 'a>(field: &'c mut Option<Cow<'a, str>>) -> OrNull<Text<'c, 'a>> {
    OrNull(Text(field))
}

/// Fills a string field.
struct Text<'c, 'a>(&'c mut Option<Cow<'a, str>>);

impl<'de> Read<'de> for Text<'_, 'de> {
    fn read<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Text<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<(), E> {
        *self.0 = Some(Cow::Borrowed(text));
        Ok(())
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<(), E> {
        *self.0 = Some(Cow::Owned(text.to_owned()));
        Ok(())
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<(), E> {
        *self.0 = Some(Cow::Owned(text));
        Ok(())
    }
}

/// Reads `data` into `chunk`, whole: trailing characters are an error.
fn read_chunk<'a>(data: &'a str, chunk: &mut Chunk<'a>) -> serde_json::Result<()> {
    let mut d = serde_json::Deserializer::from_str(data);
    if chunk.head {
        d.deserialize_map(InChunk::<true>(chunk))?;
    } else {
        d.deserialize_map(InChunk::<false>(chunk))?;
    }
    d.end()
}

impl Decode for Decoder {
    /// Handles one `data:` payload; true at `[DONE]`.
    fn event(&mut self, data: &str, out: &mut Emitter<'_, '_>) -> Result<bool, Error> {
        // A chunk is longer: the common case costs a length check.
        if data.len() < 16 && data.trim() == "[DONE]" {
            return Ok(true);
        }
        let mut chunk = Chunk {
            head: !self.head_read,
            ..Chunk::default()
        };
        read_chunk(data, &mut chunk)
            .map_err(|e| Error::Stream(format!("a chunk is not valid json ({e})")))?;
        if let Some(error) = &chunk.error {
            return Err(http::api_error(error));
        }
        if chunk.head {
            self.head_read = true;
            self.id = chunk.id.take();
            self.model = chunk.model.take().filter(|m| !m.is_empty());
        }
        self.choice(&mut chunk.first, out)?;
        for choice in &mut chunk.rest {
            self.choice(choice, out)?;
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
            out.emit(StreamEvent::Usage { usage })?;
        }
        Ok(false)
    }

    fn finish(self, _ended: bool) -> Result<ReplyEnd, Error> {
        let Some(reason) = self.finish else {
            return Err(Error::Stream(
                "the stream ended before a finish_reason".into(),
            ));
        };
        let stop = match reason {
            Finish::Length => StopReason::Length,
            Finish::ToolCalls => StopReason::ToolUse,
            Finish::ContentFilter => {
                return Err(Error::Api {
                    kind: "content_filter".to_owned(),
                    message: "the reply was stopped by the content filter".into(),
                });
            }
            // Some servers say `stop` for a reply that calls tools.
            Finish::Other if !self.calls.is_empty() => StopReason::ToolUse,
            Finish::Other => StopReason::Stop,
        };
        Ok(ReplyEnd {
            stop_reason: stop,
            response_id: self.id,
            model: self.model,
        })
    }
}

/// A `finish_reason`, as far as the end of the reply depends on it (kept as it comes, a
/// copy of its text a reply).
#[derive(Clone, Copy)]
enum Finish {
    Length,
    ToolCalls,
    ContentFilter,
    Other,
}

impl Finish {
    fn of(reason: &str) -> Finish {
        match reason {
            "length" => Finish::Length,
            "tool_calls" | "function_call" => Finish::ToolCalls,
            "content_filter" => Finish::ContentFilter,
            _ => Finish::Other,
        }
    }
}

/// The server's `index` of each call started, in call order: the first one in place (a
/// reply nearly always has at most one call, and then no list is allocated).
type Keys = SmallVec<[u64; 1]>;

impl Decoder {
    /// Emits what one choice carries: its reasoning, text and call deltas, in that order,
    /// then keeps its finish reason. Its fields are taken one by one, where they lie.
    fn choice(&mut self, choice: &mut Choice<'_>, out: &mut Emitter<'_, '_>) -> Result<(), Error> {
        for text in [choice.reasoning_content.take(), choice.reasoning.take()]
            .into_iter()
            .flatten()
        {
            if !text.is_empty() {
                out.emit(StreamEvent::ThinkingDelta {
                    text: text.into_owned(),
                })?;
            }
        }
        if let Some(text) = choice.content.take().filter(|t| !t.is_empty()) {
            out.emit(StreamEvent::TextDelta {
                text: text.into_owned(),
            })?;
        }
        // Looked at first: even an empty `drain` costs its drop.
        if !choice.tool_calls.is_empty() {
            for call in choice.tool_calls.drain(..) {
                self.call(call, out)?;
            }
        }
        if let Some(reason) = choice.finish_reason.take() {
            self.finish = Some(Finish::of(&reason));
        }
        Ok(())
    }

    /// A call delta: the start of a call the first time its `index` comes, then its
    /// argument fragment.
    fn call(&mut self, call: ToolDelta<'_>, out: &mut Emitter<'_, '_>) -> Result<(), Error> {
        // Servers that send one call per delta may leave out `index`.
        let key = call
            .index
            .unwrap_or(self.calls.len().saturating_sub(1) as u64);
        let ToolDelta {
            id,
            name,
            arguments,
            ..
        } = call;
        let index = match self.calls.iter().position(|&k| k == key) {
            Some(i) => i,
            None => {
                self.calls.push(key);
                let id = match id {
                    Some(id) => id.into_owned(),
                    None => format!("call_{key}"),
                };
                let name = name.map(Cow::into_owned).unwrap_or_default();
                out.emit(StreamEvent::ToolCallStart { id, name })?;
                self.calls.len() - 1
            }
        };
        if let Some(arguments) = arguments.filter(|a| !a.is_empty()) {
            out.emit(StreamEvent::ToolCallDelta {
                index,
                arguments: arguments.into_owned(),
            })?;
        }
        Ok(())
    }
}
