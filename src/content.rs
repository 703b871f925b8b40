//! What a user message, a steering or follow-up message and a tool result carry: [`Part`]s of
//! text, images and documents.
//!
//! Inline bytes live in a [`Blob`]: shared, never copied. A message is cloned into every
//! snapshot, every request and every retry of a request by its `Arc`, and the bytes of its
//! images by the `Arc` inside the blob; `Debug` prints their length, never the bytes.
//!
//! # The JSON shapes
//!
//! A list of parts that is one text part is written as that text, a plain string, so
//! text-only messages keep the shape they always had (`"content":"hi"`); any other list is
//! an array of parts, each tagged by `type`:
//!
//! ```text
//! {"type":"text","text":".."}
//! {"type":"image","source":{"type":"url","url":"https://.."}}
//! {"type":"image","source":{"type":"inline","media_type":"image/png","data":"<base64>"}}
//! {"type":"document","source":{..},"name":"report.pdf" (optional)}
//! ```
//!
//! Inline bytes are standard base64 with padding (a reader also takes them unpadded). Both
//! forms read back: a string is one text part.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::tag::tagged_enum;

/// Bytes shared by every clone: the data of an inline image or document.
///
/// Cloning costs one reference count, whatever the size, so a 5 MB screenshot sits in memory
/// once however many snapshots, requests and retries hold the message. Built from a
/// `Vec<u8>` without copying it.
///
/// `Debug` prints the length only (`Blob(5242880 bytes)`). Two blobs are equal when their
/// bytes are (the same allocation is equal at once). Serialized as a base64 string.
#[derive(Clone, Default)]
pub struct Blob(Arc<Vec<u8>>);

impl Blob {
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when both share one allocation: one of them is a clone of the other.
    pub fn ptr_eq(a: &Blob, b: &Blob) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// The bytes of standard base64, padded or not (as MCP and ACP carry them).
    pub(crate) fn from_base64(text: &str) -> Result<Blob, String> {
        decode_base64(text).map(Blob::from)
    }

    /// The bytes as standard base64 with padding, written straight to `f` without an
    /// intermediate string.
    pub(crate) fn base64(&self) -> impl fmt::Display + '_ {
        base64::display::Base64Display::new(
            self.as_bytes(),
            &base64::engine::general_purpose::STANDARD,
        )
    }
}

impl From<Vec<u8>> for Blob {
    fn from(bytes: Vec<u8>) -> Blob {
        Blob(Arc::new(bytes))
    }
}

impl From<&[u8]> for Blob {
    fn from(bytes: &[u8]) -> Blob {
        Blob::from(bytes.to_vec())
    }
}

impl From<String> for Blob {
    fn from(text: String) -> Blob {
        Blob::from(text.into_bytes())
    }
}

impl From<&str> for Blob {
    fn from(text: &str) -> Blob {
        Blob::from(text.as_bytes())
    }
}

impl std::ops::Deref for Blob {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for Blob {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Blob {
    fn eq(&self, other: &Blob) -> bool {
        Blob::ptr_eq(self, other) || self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Blob {}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Blob({} bytes)", self.len())
    }
}

impl Serialize for Blob {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.base64())
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Blob, D::Error> {
        struct Visit;
        impl Visitor<'_> for Visit {
            type Value = Blob;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("base64 text")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Blob, E> {
                Blob::from_base64(text).map_err(E::custom)
            }
        }
        d.deserialize_str(Visit)
    }
}

/// Standard base64, padded or not.
fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    LENIENT
        .decode(text)
        .map_err(|e| format!("invalid base64 data: {e}"))
}

tagged_enum! {
    tag = "type", remote = "Source";
    /// Where the bytes of an image or a document are: at a URL the provider fetches, or inline.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize)]
    #[non_exhaustive]
    pub enum Source {
        /// At this URL (`https://..`), fetched by the provider's server.
        Url {
            /// The URL.
            url: String,
        },
        /// These bytes, of this media type.
        Inline {
            /// The IANA media type: `image/png`, `application/pdf`, `text/plain`...
            media_type: String,
            /// The bytes, shared.
            data: Blob,
        },
    }
}

impl Source {
    /// The media type of inline bytes; `None` for a URL.
    pub fn media_type(&self) -> Option<&str> {
        match self {
            Source::Inline { media_type, .. } => Some(media_type),
            Source::Url { .. } => None,
        }
    }

    /// The inline bytes; `None` for a URL.
    pub fn data(&self) -> Option<&Blob> {
        match self {
            Source::Inline { data, .. } => Some(data),
            Source::Url { .. } => None,
        }
    }

    /// The URL; `None` for inline bytes.
    pub fn url(&self) -> Option<&str> {
        match self {
            Source::Url { url } => Some(url),
            Source::Inline { .. } => None,
        }
    }
}

/// An image for the model to see.
///
/// ```
/// use pagent::{Image, Message, UserMessage};
///
/// let png: Vec<u8> = b"\x89PNG\r\n\x1a\n...".to_vec();
/// let image = Image::new("image/png", png);
/// let message: Message = UserMessage::new("What is in this picture?").with_part(image).into();
/// assert_eq!(message.text(), "What is in this picture?");
/// assert!(format!("{message:?}").contains("Blob(11 bytes)"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Image {
    /// Where the image is.
    pub source: Source,
}

impl Image {
    /// An image of these bytes, of this media type (`image/png`, `image/jpeg`, `image/gif`,
    /// `image/webp`).
    pub fn new(media_type: impl Into<String>, data: impl Into<Blob>) -> Image {
        Image {
            source: Source::Inline {
                media_type: media_type.into(),
                data: data.into(),
            },
        }
    }

    /// The image at `url`, fetched by the provider's server.
    pub fn url(url: impl Into<String>) -> Image {
        Image {
            source: Source::Url { url: url.into() },
        }
    }

    /// An image of these bytes, its media type told from their first bytes (PNG, JPEG,
    /// GIF, WebP).
    ///
    /// # Errors
    /// [`Error::UnsupportedContent`] when the bytes are none of these.
    pub fn from_bytes(data: impl Into<Blob>) -> Result<Image, Error> {
        let data = data.into();
        match sniff(&data) {
            Some(media_type) if media_type.starts_with("image/") => {
                Ok(Image::new(media_type, data))
            }
            _ => Err(Error::UnsupportedContent(format!(
                "{} bytes that are not a PNG, JPEG, GIF or WebP image",
                data.len()
            ))),
        }
    }

    /// The image in the file at `path`, its media type told from its first bytes (see
    /// [`Image::from_bytes`]). Reads the whole file.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::UnsupportedContent`] when it is
    /// not a PNG, JPEG, GIF or WebP image.
    pub fn load(path: impl AsRef<Path>) -> Result<Image, Error> {
        let path = path.as_ref();
        Image::from_bytes(read(path)?).map_err(|e| named(path, e))
    }
}

/// A document for the model to read: a PDF or a text file.
///
/// ```
/// use pagent::{Document, ToolOutput};
///
/// let notes = Document::text("notes.txt", "Buy milk.");
/// assert_eq!(notes.source.media_type(), Some("text/plain"));
/// let output = ToolOutput::text("Here are the notes.").with_part(notes);
/// assert_eq!(output.content.len(), 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Document {
    /// Where the document is.
    pub source: Source,
    /// Its name, such as a file name (`report.pdf`): sent as the file name (Chat
    /// Completions) or the title (Anthropic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Document {
    /// A document of these bytes, of this media type (`application/pdf`, `text/plain`...).
    pub fn new(media_type: impl Into<String>, data: impl Into<Blob>) -> Document {
        Document {
            source: Source::Inline {
                media_type: media_type.into(),
                data: data.into(),
            },
            name: None,
        }
    }

    /// A PDF document of these bytes.
    pub fn pdf(data: impl Into<Blob>) -> Document {
        Document::new("application/pdf", data)
    }

    /// A plain text document named `name` (`notes.txt`).
    pub fn text(name: impl Into<String>, text: impl Into<String>) -> Document {
        Document::new("text/plain", text.into()).with_name(name)
    }

    /// The document at `url` (a PDF), fetched by the provider's server.
    pub fn url(url: impl Into<String>) -> Document {
        Document {
            source: Source::Url { url: url.into() },
            name: None,
        }
    }

    /// The document in the file at `path`, named by its file name: a PDF when its first
    /// bytes say so, else plain text when it is valid UTF-8. Reads the whole file.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::UnsupportedContent`] when it is
    /// neither a PDF nor UTF-8 text.
    pub fn load(path: impl AsRef<Path>) -> Result<Document, Error> {
        let path = path.as_ref();
        let bytes = read(path)?;
        let media_type = match sniff(&bytes) {
            Some("application/pdf") => "application/pdf",
            _ if std::str::from_utf8(&bytes).is_ok() => "text/plain",
            _ => {
                return Err(Error::UnsupportedContent(format!(
                    "{}: neither a PDF nor UTF-8 text",
                    path.display()
                )));
            }
        };
        let document = Document::new(media_type, bytes);
        Ok(match path.file_name() {
            Some(name) => document.with_name(name.to_string_lossy()),
            None => document,
        })
    }

    /// The same document with this name.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Document {
        self.name = Some(name.into());
        self
    }

    /// True when the document is text held inline: a media type `text/*`,
    /// `application/json` or `application/xml` (with parameters such as `; charset=utf-8`
    /// or not). A provider without documents of its own sends it as text.
    pub fn is_text(&self) -> bool {
        self.source.media_type().is_some_and(is_text_media_type)
    }

    /// The text of a document of text ([`Document::is_text`]) whose bytes are UTF-8.
    pub fn as_text(&self) -> Option<&str> {
        match &self.source {
            Source::Inline { media_type, data } if is_text_media_type(media_type) => {
                std::str::from_utf8(data).ok()
            }
            _ => None,
        }
    }
}

/// True for the media types of text: `text/*`, `application/json`, `application/xml`.
pub(crate) fn is_text_media_type(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or("").trim();
    let essence = essence.to_ascii_lowercase();
    essence.starts_with("text/") || essence == "application/json" || essence == "application/xml"
}

/// Audio for the model to hear: a recording (WAV, MP3...).
///
/// ```
/// use pagent::{Audio, ToolOutput};
///
/// let wav: Vec<u8> = b"RIFF\0\0\0\0WAVEfmt ...".to_vec();
/// let clip = Audio::from_bytes(wav)?;
/// assert_eq!(clip.source.media_type(), Some("audio/wav"));
/// let output = ToolOutput::text("The recording:").with_part(clip);
/// assert_eq!(output.content.len(), 2);
/// # Ok::<(), pagent::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Audio {
    /// Where the audio is.
    pub source: Source,
}

impl Audio {
    /// Audio of these bytes, of this media type (`audio/wav`, `audio/mpeg`...).
    pub fn new(media_type: impl Into<String>, data: impl Into<Blob>) -> Audio {
        Audio {
            source: Source::Inline {
                media_type: media_type.into(),
                data: data.into(),
            },
        }
    }

    /// Audio of these bytes, its media type told from their first bytes (WAV, MP3).
    ///
    /// # Errors
    /// [`Error::UnsupportedContent`] when the bytes are neither.
    pub fn from_bytes(data: impl Into<Blob>) -> Result<Audio, Error> {
        let data = data.into();
        match sniff(&data) {
            Some(media_type) if media_type.starts_with("audio/") => {
                Ok(Audio::new(media_type, data))
            }
            _ => Err(Error::UnsupportedContent(format!(
                "{} bytes that are not WAV or MP3 audio",
                data.len()
            ))),
        }
    }

    /// The audio in the file at `path`, its media type told from its first bytes (see
    /// [`Audio::from_bytes`]). Reads the whole file.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::UnsupportedContent`] when it is
    /// neither WAV nor MP3.
    pub fn load(path: impl AsRef<Path>) -> Result<Audio, Error> {
        let path = path.as_ref();
        Audio::from_bytes(read(path)?).map_err(|e| named(path, e))
    }
}

/// `e` with the file it is about, when it is an [`Error::UnsupportedContent`].
fn named(path: &Path, e: Error) -> Error {
    match e {
        Error::UnsupportedContent(why) => {
            Error::UnsupportedContent(format!("{}: {why}", path.display()))
        }
        e => e,
    }
}

/// The bytes of the file at `path`; an error names the file.
fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::Io {
        kind: e.kind(),
        message: format!("reading {}: {e}", path.display()),
    })
}

/// The media type the first bytes of a file say: PNG, JPEG, GIF, WebP, PDF, WAV or MP3.
fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WAVE" {
        Some("audio/wav")
    } else if bytes.starts_with(b"ID3")
        || (bytes.len() >= 2 && bytes[0] == 0xFF && bytes[1] & 0xE0 == 0xE0 && bytes[1] & 0x06 != 0)
    {
        // An ID3 tag, or an MPEG audio frame header (sync bits, a layer).
        Some("audio/mpeg")
    } else if bytes.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else {
        None
    }
}

tagged_enum! {
    tag = "type", remote = "Part";
    /// One part of what a user message, a steering or follow-up message or a tool result
    /// carries: text, an image, a document or audio.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize)]
    #[non_exhaustive]
    pub enum Part {
        /// Text.
        Text {
            /// The text.
            text: String,
        },
        /// An image.
        Image(Image),
        /// A document (PDF or text).
        Document(Document),
        /// Audio.
        Audio(Audio),
    }
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Part {
        Part::Text { text: text.into() }
    }

    /// The text of a text part.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Part::Text { text } => Some(text),
            _ => None,
        }
    }

    /// The inline bytes of an image, a document or audio; `None` for text and for a URL.
    pub fn data(&self) -> Option<&Blob> {
        self.source().and_then(Source::data)
    }

    /// Where the bytes of an image, a document or audio are; `None` for text.
    pub fn source(&self) -> Option<&Source> {
        match self {
            Part::Image(i) => Some(&i.source),
            Part::Document(d) => Some(&d.source),
            Part::Audio(a) => Some(&a.source),
            Part::Text { .. } => None,
        }
    }

    /// True for a text part, and for a document of text (see [`Document::is_text`]): what
    /// every provider can send, as text where its API has no document of its own.
    pub fn is_text_like(&self) -> bool {
        match self {
            Part::Text { .. } => true,
            Part::Document(d) => d.is_text(),
            _ => false,
        }
    }
}

impl From<Audio> for Part {
    fn from(audio: Audio) -> Part {
        Part::Audio(audio)
    }
}

impl From<Image> for Part {
    fn from(image: Image) -> Part {
        Part::Image(image)
    }
}

impl From<Document> for Part {
    fn from(document: Document) -> Part {
        Part::Document(document)
    }
}

impl From<&str> for Part {
    fn from(text: &str) -> Part {
        Part::text(text)
    }
}

impl From<String> for Part {
    fn from(text: String) -> Part {
        Part::text(text)
    }
}

/// The text parts of `parts` joined, without separator; images and documents left out.
pub(crate) fn joined_text(parts: &[Part]) -> String {
    match parts {
        [Part::Text { text }] => text.clone(),
        _ => parts.iter().filter_map(Part::as_text).collect(),
    }
}

/// A document of text as text, for an API without documents of its own (or a model without
/// them): `<document name="notes.txt">` (or `<document>`), its text, `</document>`.
pub(crate) struct DocumentText<'a>(pub(crate) &'a Document);

impl fmt::Display for DocumentText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.name {
            Some(name) => writeln!(f, "<document name=\"{name}\">")?,
            None => writeln!(f, "<document>")?,
        }
        // The check refused a document of text that is not UTF-8 before the body is built.
        f.write_str(self.0.as_text().unwrap_or_default())?;
        f.write_str("\n</document>")
    }
}

/// The parts as one text for a reader of text alone (the pagent dialects): the text parts
/// as [`joined_text`] joins them, a document of text as its text ([`DocumentText`]), and
/// for each image, other document or audio a note on a line of its own:
/// `[image: image/png, 5242880 bytes]`, `[image: https://example.com/a.png]`,
/// `[document report.pdf: application/pdf, 1234 bytes]`, `[audio: audio/wav, 96000 bytes]`.
pub(crate) struct TextWithNotes<'a>(pub(crate) &'a [Part]);

impl fmt::Display for TextWithNotes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last_text = None;
        for (i, part) in self.0.iter().enumerate() {
            let text = matches!(part, Part::Text { .. });
            // Text parts run on as they are joined everywhere; anything else on its own line.
            if i > 0 && !(text && last_text == Some(true)) {
                f.write_str("\n")?;
            }
            last_text = Some(text);
            let (kind, name) = match part {
                Part::Text { text } => {
                    f.write_str(text)?;
                    continue;
                }
                Part::Document(d) if d.is_text() && d.as_text().is_some() => {
                    write!(f, "{}", DocumentText(d))?;
                    continue;
                }
                Part::Image(_) => ("image", None),
                Part::Document(d) => ("document", d.name.as_deref()),
                Part::Audio(_) => ("audio", None),
            };
            f.write_str("[")?;
            f.write_str(kind)?;
            if let Some(name) = name {
                write!(f, " {name}")?;
            }
            match part.source() {
                Some(Source::Inline { media_type, data }) => {
                    write!(f, ": {media_type}, {} bytes]", data.len())?
                }
                Some(Source::Url { url }) => write!(f, ": {url}]")?,
                None => f.write_str("]")?,
            }
        }
        Ok(())
    }
}

/// [`TextWithNotes`] as a string; the text itself when the parts are all text.
pub(crate) fn text_with_notes(parts: &[Part]) -> String {
    if parts.iter().all(|p| matches!(p, Part::Text { .. })) {
        return joined_text(parts);
    }
    TextWithNotes(parts).to_string()
}

/// The parts as written in a message: one text part as a plain string, anything else as an
/// array of parts; either reads back (`#[serde(with = "crate::content::parts")]`).
pub(crate) mod parts {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(parts: &[Part], s: S) -> Result<S::Ok, S::Error> {
        match parts {
            [Part::Text { text }] => s.serialize_str(text),
            _ => s.collect_seq(parts),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Part>, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Vec<Part>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of content parts")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<Part>, E> {
                Ok(vec![Part::text(text)])
            }

            fn visit_string<E: de::Error>(self, text: String) -> Result<Vec<Part>, E> {
                Ok(vec![Part::text(text)])
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Part>, A::Error> {
                let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(parts)
            }
        }
        d.deserialize_any(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder {
        #[serde(with = "parts")]
        content: Vec<Part>,
    }

    fn round_trip(parts: Vec<Part>) -> serde_json::Value {
        let holder = Holder { content: parts };
        let json = serde_json::to_value(&holder).unwrap();
        let back: Holder = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, holder);
        let text = serde_json::to_string(&holder).unwrap();
        assert_eq!(serde_json::from_str::<Holder>(&text).unwrap(), holder);
        json["content"].clone()
    }

    #[test]
    fn one_text_part_is_a_plain_string_and_everything_else_a_list() {
        assert_eq!(round_trip(vec![Part::text("hi")]), json!("hi"));
        assert_eq!(round_trip(vec![]), json!([]));
        assert_eq!(
            round_trip(vec![
                Part::text("see"),
                Image::new("image/png", vec![0u8, 1, 2, 255]).into(),
                Image::url("https://example.com/a.png").into(),
                Document::pdf(b"%PDF-1.4".to_vec())
                    .with_name("a.pdf")
                    .into(),
            ]),
            json!([
                {"type": "text", "text": "see"},
                {"type": "image", "source": {"type": "inline", "media_type": "image/png", "data": "AAEC/w=="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                {"type": "document", "source": {"type": "inline", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}, "name": "a.pdf"},
            ])
        );
    }

    #[test]
    fn base64_reads_padded_and_unpadded_and_refuses_garbage() {
        let read =
            |data: &str| serde_json::from_value::<Blob>(json!(data)).map(|b| b.as_bytes().to_vec());
        assert_eq!(read("AAEC/w==").unwrap(), vec![0, 1, 2, 255]);
        assert_eq!(read("AAEC/w").unwrap(), vec![0, 1, 2, 255]);
        let e = read("not base64!").unwrap_err().to_string();
        assert!(e.starts_with("invalid base64 data"), "{e}");
        assert_eq!(
            Blob::from(vec![1u8; 10]).base64().to_string(),
            "AQEBAQEBAQEBAQ=="
        );
    }

    #[test]
    fn a_clone_shares_the_bytes_and_debug_prints_only_the_length() {
        let blob = Blob::from(vec![7u8; 5 * 1024 * 1024]);
        let image = Image::new("image/png", blob.clone());
        let copy = image.clone();
        assert!(Blob::ptr_eq(copy.source.data().unwrap(), &blob));
        let debug = format!("{copy:?}");
        assert!(debug.contains("Blob(5242880 bytes)"), "{debug}");
        assert!(debug.len() < 200, "{debug}");
        // Equal bytes in another allocation are equal.
        assert_eq!(Blob::from(vec![7u8; 5 * 1024 * 1024]), blob);
    }

    #[test]
    fn media_types_are_told_from_the_first_bytes() {
        assert_eq!(
            Image::from_bytes(b"\x89PNG\r\n\x1a\nrest".to_vec())
                .unwrap()
                .source
                .media_type(),
            Some("image/png")
        );
        assert_eq!(
            Image::from_bytes(b"RIFF\0\0\0\0WEBPVP8 ".to_vec())
                .unwrap()
                .source
                .media_type(),
            Some("image/webp")
        );
        let e = Image::from_bytes(b"%PDF-1.7".to_vec()).unwrap_err();
        assert!(matches!(e, Error::UnsupportedContent(_)), "{e}");
    }
}
