//! Writing a summary: the messages to summarize rendered as text, in pieces that fit the
//! window, each summarized by one model call that also gets the summary so far.

use std::fmt::Write as _;
use std::sync::Arc;

use super::estimate::estimate_text;
use super::usage::Summary;
use crate::Error;
use crate::cancel::CancelToken;
use crate::content::Part;
use crate::llm::{Provider, Request};
use crate::message::{ContentBlock, Message, Usage, UserMessage};
use crate::types::{StreamEvent, ThinkingLevel};

/// What a summary message's text starts with, so that a model (and a reader of the
/// transcript) sees what it is; Python pagent's compaction writes the same.
pub(crate) const SUMMARY_PREFIX: &str = "[Previous conversation summary]\n";

/// The summary message standing for the first `replaces` messages, which held `tokens`.
pub(crate) fn summary_message(text: &str, replaces: usize, tokens: u64) -> Message {
    Message::User(UserMessage {
        summary: Some(Summary::new(replaces as u64, tokens)),
        ..UserMessage::new(format!("{SUMMARY_PREFIX}{}", text.trim()))
    })
}

/// The summary text of a summary message, without its prefix.
pub(crate) fn summary_text(message: &Message) -> Option<&str> {
    match message {
        Message::User(m) if m.summary.is_some() => {
            let text = m.content.iter().find_map(Part::as_text).unwrap_or_default();
            Some(text.strip_prefix(SUMMARY_PREFIX).unwrap_or(text))
        }
        _ => None,
    }
}

/// `text` cut to about `tokens` tokens, its start and end kept.
fn clip(text: &str, tokens: u64) -> String {
    if estimate_text(text) <= tokens {
        return text.to_owned();
    }
    // Three characters a token at worst for prose; cut on character boundaries.
    let keep = usize::try_from(tokens.saturating_mul(3) / 2).unwrap_or(usize::MAX);
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 2 * keep {
        return text.to_owned();
    }
    let head: String = chars[..keep].iter().collect();
    let tail: String = chars[chars.len() - keep..].iter().collect();
    format!(
        "{head}\n[... {} characters left out ...]\n{tail}",
        chars.len() - 2 * keep
    )
}

/// The text of `parts`, an image or a document written as a mention of it (the summary
/// request is text only: a model that cannot see images writes it too).
fn with_media(parts: &[Part]) -> String {
    let mut out = String::new();
    for part in parts {
        match part {
            Part::Text { text } => out.push_str(text),
            Part::Image(_) => out.push_str("[an image]"),
            Part::Document(d) => match &d.name {
                Some(name) => {
                    let _ = write!(out, "[a document: {name}]");
                }
                None => out.push_str("[a document]"),
            },
            Part::Audio(_) => out.push_str("[audio]"),
        }
    }
    out
}

/// One message as the summary request shows it; each text at most `tokens` tokens.
pub(crate) fn render(message: &Message, tokens: u64) -> String {
    let mut out = String::new();
    match message {
        Message::User(m) => {
            let _ = write!(out, "[user] {}", clip(&with_media(&m.content), tokens));
        }
        Message::ToolResult(r) => {
            let what = if r.is_error { "error" } else { "result" };
            let _ = write!(
                out,
                "[{} {what}] {}",
                r.tool_name,
                clip(&with_media(&r.content), tokens)
            );
        }
        Message::Assistant(m) => {
            for block in &m.content {
                if !out.is_empty() {
                    out.push('\n');
                }
                match block {
                    ContentBlock::Text { text } if !text.is_empty() => {
                        let _ = write!(out, "[assistant] {}", clip(text, tokens));
                    }
                    ContentBlock::ToolCall(call) => {
                        let _ = write!(
                            out,
                            "[assistant calls {}] {}",
                            call.name,
                            clip(&call.arguments, tokens)
                        );
                    }
                    // Reasoning and empty text are not part of the conversation.
                    _ => {}
                }
            }
        }
    }
    out
}

/// The pieces of what to summarize: consecutive rendered messages, each piece at most
/// `tokens` tokens (one message over that is clipped to it).
pub(crate) fn pieces<'a>(messages: impl Iterator<Item = &'a Message>, tokens: u64) -> Vec<String> {
    let mut out = Vec::new();
    let mut piece = String::new();
    let mut size = 0;
    for m in messages {
        let text = render(m, tokens);
        if text.is_empty() {
            continue;
        }
        let n = estimate_text(&text) + 1;
        if size + n > tokens && !piece.is_empty() {
            out.push(std::mem::take(&mut piece));
            size = 0;
        }
        piece.push_str(&text);
        piece.push('\n');
        size += n;
    }
    if !piece.is_empty() {
        out.push(piece);
    }
    out
}

/// What a compaction's model calls share.
pub(crate) struct Summarizer<'a> {
    pub(crate) provider: &'a dyn Provider,
    pub(crate) model: &'a str,
    pub(crate) prompt: &'a str,
    pub(crate) cancel: &'a CancelToken,
    /// The most bytes of one summary: a model that rambles is cut there.
    pub(crate) max_bytes: usize,
}

/// The outcome of a summary: the text, and the usage of its calls (also when it failed).
pub(crate) struct Summarized {
    pub(crate) text: Result<String, Error>,
    pub(crate) usage: Usage,
}

impl Summarizer<'_> {
    /// Summarizes `pieces` in order, starting from `previous` (an earlier summary): one model
    /// call per piece, each given the summary so far.
    pub(crate) fn run(&self, previous: Option<&str>, pieces: &[String]) -> Summarized {
        let mut usage = Usage::default();
        let mut summary = previous.map(str::to_owned);
        for piece in pieces {
            match self.call(summary.as_deref(), piece, &mut usage) {
                Ok(text) => summary = Some(text),
                Err(e) => {
                    return Summarized {
                        text: Err(e),
                        usage,
                    };
                }
            }
        }
        let text = summary
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| Error::Provider("the model wrote an empty summary".into()));
        Summarized { text, usage }
    }

    fn call(
        &self,
        previous: Option<&str>,
        piece: &str,
        usage: &mut Usage,
    ) -> Result<String, Error> {
        let mut ask = String::from("Summarize the conversation below.");
        if let Some(previous) = previous {
            let _ = write!(
                ask,
                " It continues an earlier part, summarized as:\n\n{previous}\n\nWrite one \
                 summary of both."
            );
        }
        let _ = write!(ask, "\n\nThe conversation:\n\n{piece}");
        let request = Request {
            system_prompt: self.prompt.to_owned(),
            messages: vec![Arc::new(Message::user(ask))],
            tools: Arc::from([]),
            model: self.model.to_owned(),
            thinking: ThinkingLevel::Off,
            // A summary or a count asks for no structured answer.
            output: None,
            // Its messages are not the next model call's: the transcript's cache keeps
            // what that call sends.
            body_cache: None,
        };
        let mut text = String::new();
        let mut reply_usage = Usage::default();
        let max = self.max_bytes;
        let cut = std::cell::Cell::new(false);
        let ended = self.provider.stream(&request, self.cancel, &mut |event| {
            match event {
                StreamEvent::TextDelta { text: t } => {
                    if text.len() + t.len() > max {
                        cut.set(true);
                        return Err(Error::ReplyTooLarge { limit: max as u64 });
                    }
                    text.push_str(&t);
                }
                StreamEvent::Usage { usage } => reply_usage = usage,
                _ => {}
            }
            Ok(())
        });
        *usage += reply_usage;
        match ended {
            Ok(end) if end.stop_reason == crate::message::StopReason::Error => Err(
                Error::Provider("the provider ended the summary with an error".into()),
            ),
            Ok(_) => Ok(text),
            // A summary cut at its size is kept as far as it went.
            Err(_) if cut.get() => Ok(text),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, StopReason, ToolCall, ToolResultMessage};

    #[test]
    fn messages_render_as_lines_of_the_conversation() {
        let call = Message::Assistant(AssistantMessage::new(
            vec![
                ContentBlock::thinking("hmm"),
                ContentBlock::text("Let me look."),
                ContentBlock::ToolCall(ToolCall::new("c1", "read", "{\"page\":2}")),
            ],
            StopReason::ToolUse,
        ));
        assert_eq!(
            render(&call, 100),
            "[assistant] Let me look.\n[assistant calls read] {\"page\":2}"
        );
        let result = Message::ToolResult(ToolResultMessage::error("c1", "read", "no page 2"));
        assert_eq!(render(&result, 100), "[read error] no page 2");
        assert_eq!(render(&Message::user("hi"), 100), "[user] hi");
    }

    #[test]
    fn long_texts_are_clipped_and_pieces_fit_their_budget() {
        let long = "word ".repeat(1000);
        let clipped = render(&Message::user(long), 50);
        assert!(clipped.contains("characters left out"), "{clipped}");
        assert!(estimate_text(&clipped) < 120, "{}", estimate_text(&clipped));
        let messages: Vec<Message> = (0..20)
            .map(|i| Message::user(format!("message {i} ").repeat(10)))
            .collect();
        let pieces = pieces(messages.iter(), 100);
        assert!(pieces.len() > 1);
        assert!(pieces.iter().all(|p| estimate_text(p) <= 100 + 40));
        assert!(pieces.concat().contains("message 19"));
    }

    #[test]
    fn a_summary_message_carries_its_mark_and_prefix() {
        let m = summary_message(" the story so far ", 7, 900);
        assert_eq!(summary_text(&m), Some("the story so far"));
        assert_eq!(
            m.text(),
            "[Previous conversation summary]\nthe story so far"
        );
        let Message::User(u) = &m else { panic!() };
        assert_eq!(u.summary, Some(Summary::new(7, 900)));
        assert_eq!(summary_text(&Message::user("x")), None);
    }
}
