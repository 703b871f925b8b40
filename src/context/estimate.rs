//! The built-in token estimate: what a message, a text or a request costs, without the model's
//! tokenizer.
//!
//! The figures are per character class, in quarter tokens: a letter a quarter (English words
//! run about four letters to a token), a digit or a punctuation mark three quarters (most
//! tokenizers split numbers and JSON punctuation finely), a space nothing (it joins the next
//! word), a CJK character one and a half, any other non-ASCII character one. Each message adds
//! the few tokens of its chat-template framing (role markers, tool-call tags). Images count by
//! their size where the bytes say it (Anthropic's `width * height / 750`, at most 1,600),
//! 1,000 otherwise; PDFs 2,000 a page.
//!
//! The agent corrects the estimate with the server's own counts (see [`super`]), so what
//! matters here is that it is cheap, never wildly off, and the same everywhere (the state's
//! fold uses it too).

use crate::content::{Blob, Part};
use crate::llm::TokenCounter;
use crate::message::{ContentBlock, Message};
use crate::types::ToolDefinition;

/// Quarter tokens of one character.
const fn quarters(c: char) -> u64 {
    match c {
        ' ' => 0,
        'a'..='z' | 'A'..='Z' => 1,
        '\n' | '\t' | '\r' => 1,
        '0'..='9' => 3,
        c if c.is_ascii() => 3,
        '\u{2E80}'..='\u{9FFF}' | '\u{AC00}'..='\u{D7AF}' | '\u{F900}'..='\u{FAFF}' => 6,
        '\u{FF00}'..='\u{FFEF}' => 6,
        _ => 4,
    }
}

/// The estimated tokens of `text`.
///
/// ```
/// assert_eq!(pagent::context::estimate_text(""), 0);
/// // About four letters to a token.
/// assert_eq!(pagent::context::estimate_text("It was a dark and stormy night"), 6);
/// ```
pub fn estimate_text(text: &str) -> u64 {
    let quarters: u64 = if text.is_ascii() {
        // Every byte of every message is read once: a table, not a `char` decoded and
        // matched per byte.
        text.bytes()
            .map(|b| u64::from(ASCII_QUARTERS[usize::from(b)]))
            .sum()
    } else {
        text.chars().map(quarters).sum()
    };
    quarters.div_ceil(4)
}

/// [`quarters`] of each ASCII character.
const ASCII_QUARTERS: [u8; 128] = {
    let mut table = [0; 128];
    let mut b = 0;
    while b < 128 {
        table[b] = quarters(b as u8 as char) as u8;
        b += 1;
    }
    table
};

/// Tokens of the chat-template framing of one message (`<|im_start|>user\n ... <|im_end|>`).
pub(crate) const MESSAGE_OVERHEAD: u64 = 4;
/// Tokens of the framing of one tool call or tool result (`<tool_call>`, the id, the name).
const CALL_OVERHEAD: u64 = 8;
/// Tokens of an image whose size is unknown (a URL, bytes we cannot read).
const IMAGE_DEFAULT: u64 = 1_000;
/// Tokens of one PDF page (text and the page's image, as Anthropic counts it).
const PDF_PAGE: u64 = 2_000;

/// Text through `counter` when it counts text, else the built-in estimate.
pub(crate) fn text_with(counter: Option<&dyn TokenCounter>, text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    counter
        .and_then(|c| c.text_tokens(text))
        .unwrap_or_else(|| estimate_text(text))
}

/// The estimated tokens of `message` as a request carries it, with the built-in estimate.
///
/// An assistant reply that ended empty (aborted or failed before anything arrived) counts 0:
/// providers leave it out of requests.
///
/// ```
/// use pagent::Message;
/// let n = pagent::context::estimate_message(&Message::user("It was a dark and stormy night"));
/// assert!(n > 7);
/// ```
pub fn estimate_message(message: &Message) -> u64 {
    message_with(None, message)
}

/// The tokens of `message`, its texts counted by `counter` when it counts text.
pub(crate) fn message_with(counter: Option<&dyn TokenCounter>, message: &Message) -> u64 {
    let text = |t: &str| text_with(counter, t);
    match message {
        Message::User(m) => MESSAGE_OVERHEAD + parts_with(counter, &m.content),
        Message::ToolResult(r) => {
            MESSAGE_OVERHEAD + CALL_OVERHEAD + parts_with(counter, &r.content)
        }
        Message::Assistant(m) => {
            if m.is_empty() {
                return 0;
            }
            let blocks: u64 = m
                .content
                .iter()
                .map(|b| match b {
                    ContentBlock::Text { text: t } => text(t),
                    ContentBlock::Thinking { thinking, .. } => text(thinking),
                    ContentBlock::ToolCall(call) => {
                        CALL_OVERHEAD + text(&call.name) + text(&call.arguments)
                    }
                })
                .sum();
            MESSAGE_OVERHEAD + blocks
        }
    }
}

/// The estimated tokens of a whole request, with the built-in estimate: its system prompt,
/// its tool definitions and its messages, each with its chat-template framing.
///
/// ```
/// use std::sync::Arc;
/// use pagent::Message;
/// use pagent::llm::Request;
/// let request = Request::new("m", vec![Arc::new(Message::user("hi"))]).with_system_prompt("Be brief.");
/// assert!(pagent::context::estimate_request(&request) > pagent::context::estimate_text("hi"));
/// ```
pub fn estimate_request(request: &crate::llm::Request) -> u64 {
    fixed_with(None, &request.system_prompt, &request.tools)
        + request
            .messages
            .iter()
            .map(|m| estimate_message(m))
            .sum::<u64>()
}

/// The tokens of the parts of a user message or a tool result: texts through `counter`,
/// images by their size, PDFs by their pages, a text document as its text.
fn parts_with(counter: Option<&dyn TokenCounter>, parts: &[Part]) -> u64 {
    parts
        .iter()
        .map(|p| match p {
            Part::Text { text } => text_with(counter, text),
            Part::Image(image) => image_tokens(image.source.data().map(Blob::as_bytes)),
            Part::Document(d) => {
                let bytes = d.source.data().map(Blob::as_bytes);
                let name = d.name.as_deref().map_or(0, |n| text_with(counter, n));
                match d.source.media_type() {
                    Some(t) if t.starts_with("text/") => {
                        let text = String::from_utf8_lossy(bytes.unwrap_or_default());
                        name + text_with(counter, &text)
                    }
                    _ => name + pdf_tokens(bytes),
                }
            }
            // About 32 tokens a second of 16 kHz 16-bit speech (32,000 bytes): one per
            // kilobyte; a URL as a small clip.
            Part::Audio(audio) => audio
                .source
                .data()
                .map_or(64, |d| d.len() as u64 / 1000 + 1),
        })
        .sum()
}

/// The tokens of the system prompt and the tool definitions, as a request carries them.
pub(crate) fn fixed_with(
    counter: Option<&dyn TokenCounter>,
    system_prompt: &str,
    tools: &[ToolDefinition],
) -> u64 {
    let system = if system_prompt.is_empty() {
        0
    } else {
        MESSAGE_OVERHEAD + text_with(counter, system_prompt)
    };
    let tools: u64 = tools
        .iter()
        .map(|t| {
            // The schema as JSON, the way requests carry it.
            let schema = t.parameters.to_string();
            CALL_OVERHEAD
                + text_with(counter, &t.name)
                + text_with(counter, &t.description)
                + text_with(counter, &schema)
        })
        .sum();
    system + tools
}

/// The tokens of an image of these bytes: Anthropic's `width * height / 750`, at most 1,600,
/// when the bytes are a PNG, GIF, JPEG or WebP whose size can be read; 1,000 otherwise.
fn image_tokens(bytes: Option<&[u8]>) -> u64 {
    match bytes.and_then(image_size) {
        Some((w, h)) => (w * h / 750).clamp(1, 1_600),
        None => IMAGE_DEFAULT,
    }
}

/// The tokens of a PDF of these bytes: 2,000 a page (its pages counted from the `/Type
/// /Page` objects), at least one page.
fn pdf_tokens(bytes: Option<&[u8]>) -> u64 {
    let pages = bytes.map_or(1, |b| count_pages(b).max(1));
    pages * PDF_PAGE
}

fn count_pages(pdf: &[u8]) -> u64 {
    let needle = b"/Type";
    let mut n = 0;
    let mut i = 0;
    while i + needle.len() <= pdf.len() {
        if &pdf[i..i + needle.len()] == needle {
            let mut j = i + needle.len();
            while j < pdf.len() && (pdf[j] == b' ' || pdf[j] == b'\n' || pdf[j] == b'\r') {
                j += 1;
            }
            if pdf[j..].starts_with(b"/Page") && !pdf[j..].starts_with(b"/Pages") {
                n += 1;
            }
            i = j;
        } else {
            i += 1;
        }
    }
    n
}

/// The width and height an image's first bytes give: PNG, GIF, JPEG, WebP.
fn image_size(b: &[u8]) -> Option<(u64, u64)> {
    let be16 = |i: usize| Some(u64::from(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?])));
    let le16 = |i: usize| Some(u64::from(u16::from_le_bytes([*b.get(i)?, *b.get(i + 1)?])));
    let be32 = |i: usize| {
        Some(u64::from(u32::from_be_bytes([
            *b.get(i)?,
            *b.get(i + 1)?,
            *b.get(i + 2)?,
            *b.get(i + 3)?,
        ])))
    };
    let le24 = |i: usize| {
        Some(
            u64::from(*b.get(i)?)
                | u64::from(*b.get(i + 1)?) << 8
                | u64::from(*b.get(i + 2)?) << 16,
        )
    };
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some((be32(16)?, be32(20)?));
    }
    if b.starts_with(b"GIF8") {
        return Some((le16(6)?, le16(8)?));
    }
    if b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WEBP") {
        return match b.get(12..16)? {
            b"VP8 " => Some((le16(26)? & 0x3FFF, le16(28)? & 0x3FFF)),
            b"VP8L" => {
                let bits = u64::from(*b.get(21)?)
                    | u64::from(*b.get(22)?) << 8
                    | u64::from(*b.get(23)?) << 16
                    | u64::from(*b.get(24)?) << 24;
                Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
            }
            b"VP8X" => Some((le24(24)? + 1, le24(27)? + 1)),
            _ => None,
        };
    }
    if b.starts_with(&[0xFF, 0xD8]) {
        // Walk the segments to the frame header (SOF0..SOF15 but DHT, JPG and DAC).
        let mut i = 2;
        while i + 4 <= b.len() {
            if b[i] != 0xFF {
                return None;
            }
            let marker = b[i + 1];
            if marker == 0xFF {
                i += 1;
                continue;
            }
            let len = usize::from(u16::from_be_bytes([b[i + 2], b[i + 3]]));
            if (0xC0..=0xCF).contains(&marker) && !matches!(marker, 0xC4 | 0xC8 | 0xCC) {
                return Some((be16(i + 7)?, be16(i + 5)?));
            }
            i += 2 + len;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, StopReason, ToolCall, ToolResultMessage};

    #[test]
    fn ascii_text_is_estimated_as_its_characters_are() {
        let by_chars = |t: &str| t.chars().map(quarters).sum::<u64>().div_ceil(4);
        let every: String = (0u8..128).map(char::from).collect();
        for text in [
            every.as_str(),
            "It was a dark and stormy night",
            "{\"city\": \"Paris 12\"}\n\t",
            "",
        ] {
            assert_eq!(estimate_text(text), by_chars(text), "{text:?}");
        }
        for b in 0u8..128 {
            assert_eq!(
                u64::from(ASCII_QUARTERS[usize::from(b)]),
                quarters(char::from(b))
            );
        }
    }

    #[test]
    fn text_estimates_follow_the_character_classes() {
        assert_eq!(estimate_text(""), 0);
        assert_eq!(estimate_text("abcd"), 1);
        assert_eq!(estimate_text("abcde"), 2);
        // Digits and punctuation cost more than letters, CJK more still.
        assert_eq!(estimate_text("1234"), 3);
        assert_eq!(estimate_text("{}"), 2);
        assert_eq!(estimate_text("我们"), 3);
        assert_eq!(estimate_text("    "), 0);
    }

    #[test]
    fn an_empty_reply_counts_nothing_and_a_call_its_name_and_arguments() {
        let empty = Message::Assistant(AssistantMessage::new(vec![], StopReason::Error));
        assert_eq!(estimate_message(&empty), 0);
        let call = Message::Assistant(AssistantMessage::new(
            vec![ContentBlock::ToolCall(ToolCall::new(
                "c1",
                "read",
                "{\"page\":1}",
            ))],
            StopReason::ToolUse,
        ));
        assert_eq!(
            estimate_message(&call),
            MESSAGE_OVERHEAD
                + CALL_OVERHEAD
                + estimate_text("read")
                + estimate_text("{\"page\":1}")
        );
        let result = Message::ToolResult(ToolResultMessage::new("c1", "read", "page one"));
        assert_eq!(
            estimate_message(&result),
            MESSAGE_OVERHEAD + CALL_OVERHEAD + estimate_text("page one")
        );
    }

    #[test]
    fn image_sizes_are_read_from_their_headers() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend(1500u32.to_be_bytes());
        png.extend(750u32.to_be_bytes());
        assert_eq!(image_size(&png), Some((1500, 750)));
        assert_eq!(image_tokens(Some(&png)), 1500);
        let mut gif = b"GIF89a".to_vec();
        gif.extend(100u16.to_le_bytes());
        gif.extend(75u16.to_le_bytes());
        assert_eq!(image_tokens(Some(&gif)), 10);
        // A JPEG: SOI, an APP0 segment, then SOF0 with height 600 and width 800.
        let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x00, 0x00];
        jpeg.extend([0xFF, 0xC0, 0x00, 0x11, 0x08]);
        jpeg.extend(600u16.to_be_bytes());
        jpeg.extend(800u16.to_be_bytes());
        assert_eq!(image_size(&jpeg), Some((800, 600)));
        assert_eq!(image_tokens(Some(b"not an image")), IMAGE_DEFAULT);
        assert_eq!(image_tokens(None), IMAGE_DEFAULT);
        // A huge image is resized by the provider: at most 1,600.
        let mut big = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        big.extend(8000u32.to_be_bytes());
        big.extend(8000u32.to_be_bytes());
        assert_eq!(image_tokens(Some(&big)), 1_600);
    }

    #[test]
    fn pdf_pages_are_counted() {
        let pdf = b"%PDF-1.4 1 0 obj <</Type /Pages /Count 2>> 2 0 obj <</Type /Page>> \
                    3 0 obj <</Type/Page>>";
        assert_eq!(pdf_tokens(Some(pdf)), 2 * PDF_PAGE);
        assert_eq!(pdf_tokens(Some(b"%PDF-1.4")), PDF_PAGE);
    }
}
