//! What the providers share to send images, documents and audio: what a model takes
//! ([`Accepts`]), the check of a request against it before anything is sent, and the
//! pieces of a body that write a part's bytes straight into it.

use std::fmt;

use super::Request;
use crate::Error;
pub(crate) use crate::content::DocumentText;
use crate::content::{Part, Source, joined_text};
use crate::message::{ContentBlock, Message};

/// What a model takes besides text, as its provider was told: images, documents (PDF),
/// audio, and images or documents by URL. Text, and documents of text (see
/// [`Document::is_text`](crate::Document::is_text)), every model takes.
///
/// Each provider checks every request against it before the request is sent: a part the
/// model does not take, or that the provider's API cannot carry (a document by URL in Chat
/// Completions, audio in Anthropic's Messages), fails the model call with
/// [`Error::UnsupportedContent`] naming the message and the part, and no request leaves
/// (never a 400 from the server, and nothing retried). The run then ends with that error,
/// its transcript as it was.
///
/// Defaults to [`Accepts::all`] (what the API can carry): tell the provider when the model
/// behind it lacks vision (a text-only model on llama.cpp, Ollama or vLLM), or when the
/// server does not fetch URLs.
///
/// ```
/// use pagent::llm::{Accepts, OpenAiCompat};
///
/// // A text-only model: an image in a prompt or a tool result is refused before sending.
/// let local = OpenAiCompat::new("http://127.0.0.1:8080/v1").accepts(Accepts::text());
/// // Vision, but no PDFs, and only inline bytes (the server fetches no URLs).
/// let vision = Accepts::all().documents(false).urls(false);
/// assert!(vision.takes_images() && !vision.takes_documents());
/// ```
///
/// A tool that may return images to a model without vision: replace its images in an
/// `after_tool_call` hook, or give it a flag; the error says which message and part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Accepts {
    images: bool,
    documents: bool,
    audio: bool,
    urls: bool,
}

impl Default for Accepts {
    fn default() -> Accepts {
        Accepts::all()
    }
}

impl Accepts {
    /// Images, documents, audio and URLs: whatever the provider's API can carry.
    pub const fn all() -> Accepts {
        Accepts {
            images: true,
            documents: true,
            audio: true,
            urls: true,
        }
    }

    /// Text only (and documents of text, sent as text where the API has no document of
    /// its own).
    pub const fn text() -> Accepts {
        Accepts {
            images: false,
            documents: false,
            audio: false,
            urls: false,
        }
    }

    /// Whether the model sees images. Defaults to `true`.
    #[must_use]
    pub const fn images(mut self, on: bool) -> Accepts {
        self.images = on;
        self
    }

    /// Whether the model reads documents that are not text (PDF). Defaults to `true`.
    /// Documents of text go either way: as the API's own documents when this is on, else
    /// as text.
    #[must_use]
    pub const fn documents(mut self, on: bool) -> Accepts {
        self.documents = on;
        self
    }

    /// Whether the model hears audio. Defaults to `true`.
    #[must_use]
    pub const fn audio(mut self, on: bool) -> Accepts {
        self.audio = on;
        self
    }

    /// Whether the server fetches images and documents by URL ([`Source::Url`]); else only
    /// inline bytes go. Defaults to `true`.
    #[must_use]
    pub const fn urls(mut self, on: bool) -> Accepts {
        self.urls = on;
        self
    }

    /// True when the model sees images.
    pub const fn takes_images(&self) -> bool {
        self.images
    }

    /// True when the model reads documents that are not text (PDF).
    pub const fn takes_documents(&self) -> bool {
        self.documents
    }

    /// True when the model hears audio.
    pub const fn takes_audio(&self) -> bool {
        self.audio
    }

    /// True when the server fetches sources by URL.
    pub const fn takes_urls(&self) -> bool {
        self.urls
    }

    /// Checks every part of every message of `request`, as the built-in providers do
    /// before they send it (a provider of your own may call it too).
    ///
    /// # Errors
    /// [`Error::UnsupportedContent`] naming the first message and part the model does not
    /// take, or a part that is wrong whatever the model: an image whose media type is not
    /// `image/*`, a document of text whose bytes are not UTF-8.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use pagent::llm::{Accepts, Request};
    /// use pagent::{Error, Image, Message, UserMessage};
    ///
    /// let message: Message = UserMessage::new("What is this?")
    ///     .with_part(Image::new("image/png", vec![0u8; 8]))
    ///     .into();
    /// let request = Request::new("m", vec![Arc::new(message)]);
    /// assert!(Accepts::all().check(&request).is_ok());
    /// let e = Accepts::text().check(&request).unwrap_err();
    /// assert!(matches!(e, Error::UnsupportedContent(_)));
    /// assert_eq!(
    ///     e.to_string(),
    ///     "unsupported content: message 0 (user), part 1: an image (image/png, 8 bytes), \
    ///      which the model does not take (Accepts::images is off)"
    /// );
    /// ```
    pub fn check(&self, request: &Request) -> Result<(), Error> {
        check(request, *self, |_| None)
    }

    /// Why the model does not take `part`, when it does not.
    fn refuses(&self, part: &Part) -> Option<&'static str> {
        let url = matches!(part.source(), Some(Source::Url { .. }));
        match part {
            Part::Text { .. } => None,
            Part::Image(_) if !self.images => Some("Accepts::images is off"),
            Part::Document(d) if !d.is_text() && !self.documents => {
                Some("Accepts::documents is off")
            }
            Part::Audio(_) if !self.audio => Some("Accepts::audio is off"),
            _ if url && !self.urls => Some("Accepts::urls is off: send the bytes inline"),
            _ => None,
        }
    }
}

/// Checks every part of `request` against `accepts`, and against what the provider's API
/// cannot carry (`api` says why not, naming the API, or `None`). Text is never refused and
/// every API carries it: only the other parts are asked about. The HTTP providers run it
/// only when the body they built holds a message that [`refused`] marked, for the error
/// that names it: the body cache keeps each message's mark with its JSON, so that a turn
/// does not read every message of the transcript again.
pub(crate) fn check(
    request: &Request,
    accepts: Accepts,
    api: impl Fn(&Part) -> Option<&'static str>,
) -> Result<(), Error> {
    for (i, message) in request.messages.iter().enumerate() {
        for (j, part) in message.parts().iter().enumerate() {
            let Some((why, taken)) = verdict(part, accepts, &api) else {
                continue;
            };
            let place = match &**message {
                Message::ToolResult(r) => format!("tool_result of `{}`", r.tool_name),
                m => m.role().to_owned(),
            };
            let what = Described(part);
            let why = if taken {
                format!("which the model does not take ({why})")
            } else {
                why.to_owned()
            };
            return Err(Error::UnsupportedContent(format!(
                "message {i} ({place}), part {j}: {what}, {why}"
            )));
        }
    }
    Ok(())
}

/// Why `part` cannot go (and whether it is the model that does not take it), or `None`.
fn verdict(
    part: &Part,
    accepts: Accepts,
    api: impl Fn(&Part) -> Option<&'static str>,
) -> Option<(&'static str, bool)> {
    if let Part::Text { .. } = part {
        return None;
    }
    match (accepts.refuses(part), api(part), malformed(part)) {
        (_, _, Some(why)) => Some((why, false)),
        (Some(why), _, _) => Some((why, true)),
        (None, Some(why), None) => Some((why, false)),
        (None, None, None) => None,
    }
}

/// Whether [`check`] refuses a part of `message`: the body cache asks it once per message,
/// when the message's JSON is written, and keeps the answer with it.
pub(crate) fn refused(message: &Message, accepts: Accepts, api: Carry) -> bool {
    message
        .parts()
        .iter()
        .any(|part| verdict(part, accepts, api).is_some())
}

/// What a provider's API cannot carry (see [`check`]).
pub(crate) type Carry = fn(&Part) -> Option<&'static str>;

/// What is wrong with `part` whatever the model.
fn malformed(part: &Part) -> Option<&'static str> {
    match part {
        Part::Image(image) => match image.source.media_type() {
            Some(media_type) if !media_type.starts_with("image/") => {
                Some("whose media type is not an image's")
            }
            _ => None,
        },
        Part::Document(d) if d.is_text() && d.as_text().is_none() => {
            Some("whose bytes are not UTF-8")
        }
        Part::Audio(audio) => match audio.source.media_type() {
            Some(media_type) if !media_type.starts_with("audio/") => {
                Some("whose media type is not audio's")
            }
            _ => None,
        },
        _ => None,
    }
}

/// A part as an error names it: `an image (image/png, 5242880 bytes)`, `a document by URL`.
struct Described<'a>(&'a Part);

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.0 {
            Part::Text { .. } => return f.write_str("text"),
            Part::Image(_) => "an image",
            Part::Document(d) if d.is_text() => "a document of text",
            Part::Document(_) => "a document",
            Part::Audio(_) => "audio",
        };
        f.write_str(kind)?;
        if let Part::Document(d) = self.0
            && let Some(name) = &d.name
        {
            write!(f, " `{name}`")?;
        }
        match self.0.source() {
            Some(Source::Inline { media_type, data }) => {
                write!(f, " ({media_type}, {} bytes)", data.len())
            }
            _ => f.write_str(" by URL"),
        }
    }
}

/// The text parts of a message joined, written as one JSON string without joining them first.
pub(crate) struct TextParts<'a>(pub(crate) &'a [Part]);

impl serde::Serialize for TextParts<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            [Part::Text { text }] => s.serialize_str(text),
            parts => s.collect_str(&joined_text(parts)),
        }
    }
}

/// A source as a URL: its own, or a `data:` URL of its bytes (`data:image/png;base64,..`),
/// the base64 written straight into the body.
pub(crate) struct DataUrl<'a>(pub(crate) &'a Source);

impl serde::Serialize for DataUrl<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Source::Url { url } => s.serialize_str(url),
            Source::Inline { media_type, data } => {
                s.collect_str(&format_args!("data:{media_type};base64,{}", data.base64()))
            }
        }
    }
}

/// A `Display` written as a JSON string, straight into the body.
pub(crate) struct Collected<T>(pub(crate) T);

impl<T: fmt::Display> serde::Serialize for Collected<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// Inline bytes as base64, written straight into the body.
pub(crate) struct Base64<'a>(pub(crate) &'a crate::Blob);

impl serde::Serialize for Base64<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0.base64())
    }
}

/// About how many bytes the body of `request` takes: what its inline bytes take as base64,
/// its texts and arguments, and room for the JSON around them. A body written into a buffer
/// this big is written once, without the copies of a buffer that grows (a 5 MB image
/// copied again at each doubling).
pub(crate) fn body_capacity(request: &Request) -> usize {
    let mut n = 1024 + text_capacity(&request.system_prompt) + request.tools.len() * 512;
    for message in &request.messages {
        n += message_capacity(message);
    }
    n
}

/// The room the arena of a body needs at first (see [`super::pieces`]): the whole body
/// without a cache; with one, the glue and the new messages, for which it grows.
pub(crate) fn arena_capacity(request: &Request) -> usize {
    match request.body_cache {
        None => body_capacity(request),
        Some(_) => 4096,
    }
}

fn text_capacity(t: &str) -> usize {
    t.len() + t.len() / 8 + 32
}

/// About how many bytes the JSON of `message` takes (see [`body_capacity`]).
pub(crate) fn message_capacity(message: &Message) -> usize {
    let text = text_capacity;
    let mut n = 64;
    match message {
        Message::Assistant(m) => {
            for block in &m.content {
                n += match block {
                    ContentBlock::Text { text: t } => text(t),
                    ContentBlock::Thinking {
                        thinking,
                        signature,
                    } => text(thinking) + signature.as_deref().map_or(0, text),
                    ContentBlock::ToolCall(c) => text(&c.arguments) + text(&c.id) + text(&c.name),
                };
            }
        }
        m => {
            for part in m.parts() {
                n += match part {
                    Part::Text { text: t } => text(t),
                    part => match part.source() {
                        Some(Source::Inline { data, .. }) => data.len().div_ceil(3) * 4 + 128,
                        Some(Source::Url { url }) => text(url),
                        None => 0,
                    },
                };
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::content::{Audio, Document, Image};
    use crate::message::{ToolResultMessage, UserMessage};

    fn request(parts: Vec<Part>) -> Request {
        let user = Message::User(UserMessage::from_parts(parts.clone()));
        let result =
            Message::ToolResult(ToolResultMessage::new("c1", "shot", "").with_parts(parts));
        Request::new("m", vec![Arc::new(user), Arc::new(result)])
    }

    #[test]
    fn each_kind_is_refused_when_the_model_does_not_take_it() {
        let cases: [(Part, Accepts, &str); 6] = [
            (
                Image::new("image/png", vec![1u8; 3]).into(),
                Accepts::all().images(false),
                "message 0 (user), part 0: an image (image/png, 3 bytes), which the model does not take (Accepts::images is off)",
            ),
            (
                Document::pdf(vec![1u8; 5]).with_name("a.pdf").into(),
                Accepts::all().documents(false),
                "message 0 (user), part 0: a document `a.pdf` (application/pdf, 5 bytes), which the model does not take (Accepts::documents is off)",
            ),
            (
                Audio::new("audio/wav", vec![1u8; 2]).into(),
                Accepts::all().audio(false),
                "message 0 (user), part 0: audio (audio/wav, 2 bytes), which the model does not take (Accepts::audio is off)",
            ),
            (
                Image::url("https://example.com/a.png").into(),
                Accepts::all().urls(false),
                "message 0 (user), part 0: an image by URL, which the model does not take (Accepts::urls is off: send the bytes inline)",
            ),
            (
                Image::new("application/pdf", vec![1u8]).into(),
                Accepts::all(),
                "message 0 (user), part 0: an image (application/pdf, 1 bytes), whose media type is not an image's",
            ),
            (
                Document::new("text/plain", vec![0xFFu8, 0xFE]).into(),
                Accepts::all(),
                "message 0 (user), part 0: a document of text (text/plain, 2 bytes), whose bytes are not UTF-8",
            ),
        ];
        for (part, accepts, message) in cases {
            let e = accepts.check(&request(vec![part.clone()])).unwrap_err();
            assert_eq!(e, Error::UnsupportedContent(message.into()), "{part:?}");
            assert!(
                Accepts::all()
                    .images(true)
                    .check(&request(vec![part]))
                    .is_err()
                    == message.contains("whose")
            );
        }
        // Text and documents of text go to a text-only model.
        let text = vec![Part::text("hi"), Document::text("n.txt", "notes").into()];
        assert_eq!(Accepts::text().check(&request(text)), Ok(()));
    }

    #[test]
    fn a_tool_result_is_named_by_its_tool() {
        let mut r = request(vec![Image::new("image/png", vec![1u8]).into()]);
        r.messages.remove(0);
        let e = Accepts::text().check(&r).unwrap_err().to_string();
        assert!(
            e.contains("message 0 (tool_result of `shot`), part 0: an image"),
            "{e}"
        );
    }

    #[test]
    fn the_capacity_holds_the_base64_of_the_bytes() {
        let r = request(vec![Image::new("image/png", vec![0u8; 3_000_000]).into()]);
        let n = body_capacity(&r);
        assert!((2 * 4_000_000..2 * 4_000_000 + 4096).contains(&n), "{n}");
    }
}
