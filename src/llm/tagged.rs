//! Reading the JSON objects of a provider's stream that say what they are in a `type` field
//! (the Responses API's events and output items, Anthropic's events, content blocks and
//! deltas), by that type.
//!
//! # Not as serde's internally tagged enums
//! serde reads an enum tagged by a field (`#[serde(tag = "type")]`) by buffering the whole
//! object into a tree of its own first, to find the tag wherever it stands, and reading the
//! variant out of that tree: every string of the object copied or kept, every nested object
//! a map of its own, once per object, on every delta of a reply. The decoders here read the
//! type first instead:
//! - an event, with [`event_type`]: from the start of its text when the server wrote it first
//!   (as OpenAI, Anthropic and llama.cpp do), else parsed; then the event is read as the
//!   struct of that type, in one pass;
//! - an object inside an event (an item, a block, a delta), in one pass into a struct of its
//!   `type` and of the fields the decoder reads, each kept as the JSON text it is
//!   ([`Raw`], borrowed, not parsed) and read with [`field`], [`text`] or [`required`] once
//!   the type is known. So a field of another shape in an object of a type the decoder skips is no
//!   error, as with the tagged enum, and nothing is copied or buffered.
//!
//! What a decoder reads is what the tagged enums read, with the same meaning: unknown fields
//! and types are skipped, a missing or `null` optional field is absent, a value of the wrong
//! type in an object of a known type is an error.
//!
//! pagent's own data model (`Message`, `ContentBlock`, `Part`, `Source`, `StreamEvent`),
//! whose unknown variants are errors and which any serde format reads, has its one-pass
//! reading in `crate::tag`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::Error;

/// Any event whose `type` was not the first field.
#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
}

/// A string borrowed from the event's text unless it has escapes. serde borrows a
/// `Cow<str>` field only where it is the field's whole type: an `Option<Cow<str>>` is always
/// copied into a `String` (an allocation per delta for an item id), an `Option<Borrowed>`
/// is not.
#[derive(Deserialize, Default)]
pub(super) struct Borrowed<'a>(#[serde(borrow)] pub(super) Cow<'a, str>);

/// The event's `type`: read from the start of the text when the server wrote it first,
/// which saves parsing the event twice; else parsed. Text that is not a JSON object with a
/// string `type` is an [`Error::Stream`].
pub(super) fn event_type(data: &str) -> Result<Cow<'_, str>, Error> {
    if let Some(rest) = data.strip_prefix("{\"type\":\"")
        // 16 bytes at a time (`str::find` looks at one word at a time), once per event, for
        // the closing quote or an escape before it (then the text is not the type).
        && let Some(end) = memchr::memchr2(b'"', b'\\', rest.as_bytes())
        && rest.as_bytes()[end] == b'"'
    {
        return Ok(Cow::Borrowed(&rest[..end]));
    }
    serde_json::from_str::<Typed<'_>>(data)
        .map(|t| t.kind)
        .map_err(|e| Error::Stream(format!("an event is not valid json ({e})")))
}

/// A field of an object read by its type, as the JSON text it is (borrowed from the event's
/// text), `null` included; `None` when the object has no such field. Declared
/// `#[serde(default, borrow)]`.
#[derive(Default, Clone, Copy)]
pub(super) struct Raw<'a>(Option<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'a RawValue>::deserialize(d).map(|raw| Raw(Some(raw)))
    }
}

/// Reads `raw` (a field of an object whose type is known now) as `T`; a missing field as
/// `T::default()` (and `null` as an `Option`'s `None`, as serde reads it).
pub(super) fn field<'a, T: Deserialize<'a> + Default, E: serde::de::Error>(
    raw: Raw<'a>,
) -> Result<T, E> {
    match raw.0 {
        Some(raw) => serde_json::from_str(raw.get()).map_err(E::custom),
        None => Ok(T::default()),
    }
}

/// Reads `raw` as a string, borrowed unless it has escapes; a missing or `null` field as
/// `None`.
pub(super) fn text<'a, E: serde::de::Error>(raw: Raw<'a>) -> Result<Option<Cow<'a, str>>, E> {
    field::<Option<Borrowed<'a>>, E>(raw).map(|s| s.map(|s| s.0))
}

/// As [`text`], for a string field that is empty when missing (`null` is a value of the
/// wrong type).
pub(super) fn string<'a, E: serde::de::Error>(raw: Raw<'a>) -> Result<Cow<'a, str>, E> {
    field::<Borrowed<'a>, E>(raw).map(|s| s.0)
}

/// As [`text`], for a field the object's type requires: missing is an error that names it,
/// and `null` is a value of the wrong type.
pub(super) fn required<'a, E: serde::de::Error>(
    raw: Raw<'a>,
    name: &'static str,
) -> Result<Cow<'a, str>, E> {
    match raw.0 {
        Some(raw) => serde_json::from_str::<Borrowed<'a>>(raw.get())
            .map(|s| s.0)
            .map_err(E::custom),
        None => Err(E::missing_field(name)),
    }
}
