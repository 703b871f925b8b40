//! An incremental Server-Sent-Events parser: bytes in, events out.
//!
//! Feed the body of a `text/event-stream` response to [`Parser::push`] in whatever pieces the
//! network hands over, and take the complete events with [`Parser::next_event`]. The parser
//! follows the [WHATWG event-stream rules]: lines end with LF, CRLF or a lone CR; `data:`
//! lines of one event are joined with `\n`; `event:` names the event; `id:` and `retry:` (the
//! reconnection time, digits only) are kept for the events after them; lines
//! starting with `:` are comments (keep-alives such as `: ping`) and are skipped; one space
//! after the colon is removed; a blank line ends the event. An event with no `data` line is
//! not dispatched.
//!
//! # Consistency
//! The events do not depend on how the input is cut into pieces: a CRLF split between two
//! pushes is one line end, and a UTF-8 character split across two pushes is decoded whole.
//!
//! # Limits
//! One event (its field lines, including the line being read) may hold at most
//! [`Parser::max_event_bytes`] bytes, [`DEFAULT_MAX_EVENT_BYTES`] unless set otherwise. Past
//! it, and for a line that is not UTF-8, [`Parser::next_event`] returns [`Error::Stream`]
//! and the parser stays failed: the stream cannot be trusted after that.
//!
//! ```
//! use pagent::llm::sse::Parser;
//!
//! let mut parser = Parser::new();
//! parser.push(b"event: delta\r\ndata: {\"a\":");
//! assert!(parser.next_event()?.is_none()); // not complete yet
//! parser.push(b"1}\r\n\r\n: ping\n\n");
//! let event = parser.next_event()?.expect("one event");
//! assert_eq!(event.event, "delta");
//! assert_eq!(event.data, "{\"a\":1}");
//! assert!(parser.next_event()?.is_none()); // the comment is no event
//! # Ok::<(), pagent::Error>(())
//! ```
//!
//! [WHATWG event-stream rules]: https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation

use std::collections::VecDeque;

use crate::Error;

/// The default limit on one event's size: 8 MiB, room for a whole file in one tool call.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// One event of the stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// The `event:` name; empty when the server gave none (the spec's `message`).
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last `id:` the stream set, if any.
    pub id: Option<String>,
    /// The last `retry:` the stream set, in milliseconds: how long a client should wait
    /// before it reconnects, if the stream said.
    pub retry: Option<u64>,
}

/// The incremental parser. See the [module docs](self).
#[derive(Debug)]
pub struct Parser {
    // Bytes of the line being read (no line end yet).
    line: Vec<u8>,
    // The previous push ended with CR: an LF at the start of the next one belongs to it.
    after_cr: bool,
    // Inside a comment line, whose bytes are skipped.
    in_comment: bool,
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
    retry: Option<u64>,
    // Bytes held by the event being built, to enforce the limit.
    event_bytes: usize,
    max_event_bytes: usize,
    ready: VecDeque<Event>,
    failed: Option<Error>,
    // The data buffers of events given back (`recycle`), for the data of the next ones.
    spare: Vec<String>,
}

/// The most buffers [`Parser::recycle`] keeps, and the largest it keeps: a few hundred events
/// a read at most, of a few hundred bytes each.
const MAX_SPARE: usize = 256;
const MAX_SPARE_BYTES: usize = 4 * 1024;

impl Default for Parser {
    fn default() -> Parser {
        Parser::new()
    }
}

impl Parser {
    /// A parser with the default size limit ([`DEFAULT_MAX_EVENT_BYTES`]).
    pub fn new() -> Parser {
        Parser {
            line: Vec::new(),
            after_cr: false,
            in_comment: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            id: None,
            retry: None,
            event_bytes: 0,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            ready: VecDeque::new(),
            failed: None,
            spare: Vec::new(),
        }
    }

    /// Limits one event to `bytes` bytes of field lines. Defaults to
    /// [`DEFAULT_MAX_EVENT_BYTES`].
    #[must_use]
    pub fn max_event_bytes(mut self, bytes: usize) -> Parser {
        self.max_event_bytes = bytes;
        self
    }

    /// Adds the next bytes of the stream. Complete events become available to
    /// [`Parser::next_event`]; errors are reported there too, after the events before them.
    pub fn push(&mut self, mut bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        // An empty push says nothing about the byte after a CR: keep waiting for it.
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while !bytes.is_empty() && self.failed.is_none() {
            if self.line.is_empty() && !self.in_comment && bytes[0] == b':' {
                self.in_comment = true;
            }
            let Some(end) = line_end(bytes) else {
                if !self.in_comment && self.grow(bytes.len()) {
                    self.line.extend_from_slice(bytes);
                }
                return;
            };
            if self.in_comment {
                // A comment (keep-alive such as `: ping`): skipped, not counted.
                self.in_comment = false;
            } else if !self.grow(end) {
                return;
            } else if self.line.is_empty() {
                self.line_done(&bytes[..end]);
            } else {
                self.line.extend_from_slice(&bytes[..end]);
                let line = std::mem::take(&mut self.line);
                self.line_done(&line);
                // Keep the allocation for the next line.
                self.line = line;
                self.line.clear();
            }
            let is_cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if is_cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
    }

    /// The next complete event, if one is ready.
    ///
    /// # Errors
    /// [`Error::Stream`] when an event grew past the size limit or a line was not UTF-8;
    /// from then on every call returns that error.
    pub fn next_event(&mut self) -> Result<Option<Event>, Error> {
        if let Some(event) = self.ready.pop_front() {
            return Ok(Some(event));
        }
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(None),
        }
    }

    /// True when bytes of an unfinished event are held: the stream ended in the middle of
    /// an event if this is true at its end. Per the spec such an event is never dispatched.
    pub fn has_pending(&self) -> bool {
        !self.line.is_empty() || self.event_bytes > 0
    }

    /// Counts `n` more bytes of the event; false (and failed) past the limit.
    fn grow(&mut self, n: usize) -> bool {
        self.event_bytes += n;
        if self.event_bytes > self.max_event_bytes {
            self.failed = Some(Error::Stream(format!(
                "an event is larger than the limit of {} bytes",
                self.max_event_bytes
            )));
            self.line = Vec::new();
            return false;
        }
        true
    }

    fn line_done(&mut self, line: &[u8]) {
        if line.is_empty() {
            self.dispatch();
            return;
        }
        let Ok(line) = std::str::from_utf8(line) else {
            self.failed = Some(Error::Stream("the event stream is not valid utf-8".into()));
            return;
        };
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => value.clone_into(&mut self.event),
            // An id with NUL is ignored, per the spec.
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            // Only digits, per the spec; anything else is ignored.
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry = value.parse().ok();
            }
            // Unknown fields: nothing for us to do.
            _ => {}
        }
    }

    fn dispatch(&mut self) {
        self.event_bytes = 0;
        if !self.has_data {
            self.event.clear();
            return;
        }
        self.has_data = false;
        let spare = self.spare.pop().unwrap_or_default();
        self.ready.push_back(Event {
            event: std::mem::take(&mut self.event),
            data: std::mem::replace(&mut self.data, spare),
            id: self.id.clone(),
            retry: self.retry,
        });
    }

    /// Takes back an event handed out by [`Parser::next_event`] once it is read: its data
    /// buffer holds the data of a later event, so that a stream of events costs no
    /// allocation per event.
    pub(crate) fn recycle(&mut self, event: Event) {
        let mut data = event.data;
        if self.spare.len() < MAX_SPARE && data.capacity() <= MAX_SPARE_BYTES {
            data.clear();
            self.spare.push(data);
        }
    }
}

/// The index of the first `\n` or `\r` in `bytes`, found eight bytes at a time: the lines
/// of a model's stream are a few hundred bytes long, and looking for their ends byte by byte
/// was most of the parser's work.
fn line_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Non-zero when a byte of `word` equals `byte` (the classic zero-byte test on the xor;
    // exact as a yes or no, which is all that is asked of it).
    let has = |word: u64, byte: u8| {
        let x = word ^ (ONES * u64::from(byte));
        x.wrapping_sub(ONES) & !x & HIGHS
    };
    let is_end = |b: &u8| *b == b'\n' || *b == b'\r';
    let mut words = bytes.chunks_exact(8);
    let mut offset = 0;
    for word in &mut words {
        // OK because `chunks_exact(8)` yields 8 bytes.
        let w = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        if has(w, b'\n') | has(w, b'\r') != 0 {
            return word.iter().position(is_end).map(|i| offset + i);
        }
        offset += 8;
    }
    words
        .remainder()
        .iter()
        .position(is_end)
        .map(|i| offset + i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn recycled_buffers_carry_nothing_into_later_events() {
        let mut parser = Parser::new();
        parser.push(b"data: a long first event\n\ndata: b\n\n");
        let first = parser.next_event().unwrap().unwrap();
        assert_eq!(first.data, "a long first event");
        parser.recycle(first);
        let second = parser.next_event().unwrap().unwrap();
        assert_eq!(second.data, "b");
        parser.recycle(second);
        parser.push(b"data: c\ndata: d\n\ndata: e\n\n");
        let third = parser.next_event().unwrap().unwrap();
        assert_eq!(third.data, "c\nd");
        assert_eq!(parser.next_event().unwrap().unwrap().data, "e");
        assert_eq!(parser.next_event().unwrap(), None);
    }

    proptest! {
        #[test]
        fn line_end_finds_the_first_cr_or_lf(bytes in prop::collection::vec(
            prop::sample::select(vec![b'a', b'\n', b'\r', 0x8a, 0x0d ^ 0x80, 0]), 0..40)) {
            let expected = bytes.iter().position(|&b| b == b'\n' || b == b'\r');
            prop_assert_eq!(line_end(&bytes), expected);
        }
    }

    fn all(parser: &mut Parser) -> Result<Vec<Event>, Error> {
        let mut out = Vec::new();
        while let Some(e) = parser.next_event()? {
            out.push(e);
        }
        Ok(out)
    }

    fn parse(input: &[u8]) -> Result<Vec<Event>, Error> {
        let mut p = Parser::new();
        p.push(input);
        all(&mut p)
    }

    fn data(d: &str) -> Event {
        Event {
            data: d.into(),
            ..Event::default()
        }
    }

    #[test]
    fn every_line_end_style_is_one_line_end() {
        let expected = vec![data("a"), data("b")];
        assert_eq!(parse(b"data: a\n\ndata: b\n\n").unwrap(), expected);
        assert_eq!(parse(b"data: a\r\n\r\ndata: b\r\n\r\n").unwrap(), expected);
        assert_eq!(parse(b"data: a\r\rdata: b\r\r").unwrap(), expected);
        assert_eq!(parse(b"data: a\r\n\ndata: b\r\r\n").unwrap(), expected);
    }

    #[test]
    fn data_lines_join_and_fields_parse() {
        let events = parse(
            b"event: x\nid: 7\ndata: one\ndata:two\ndata\nretry: 5\n\nretry: 1.5\ndata: y\n\n",
        )
        .unwrap();
        assert_eq!(
            events,
            [
                Event {
                    event: "x".into(),
                    data: "one\ntwo\n".into(),
                    id: Some("7".into()),
                    retry: Some(5),
                },
                // A retry that is not all digits is ignored; id and retry carry on.
                Event {
                    event: String::new(),
                    data: "y".into(),
                    id: Some("7".into()),
                    retry: Some(5),
                },
            ]
        );
    }

    #[test]
    fn comments_and_events_without_data_are_skipped() {
        let events = parse(b": ping\n\nevent: ping\n\n:\ndata: x\n\n").unwrap();
        assert_eq!(events, [data("x")]);
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched() {
        let mut p = Parser::new();
        p.push(b"data: {\"trunc");
        assert_eq!(all(&mut p).unwrap(), []);
        assert!(p.has_pending());
        p.push(b"\n\n");
        assert!(!p.has_pending());
    }

    #[test]
    fn crlf_split_between_pushes_is_one_line_end() {
        let mut p = Parser::new();
        p.push(b"data: a\r");
        p.push(b"\n\r");
        p.push(b"\ndata: b\n\n");
        assert_eq!(all(&mut p).unwrap(), [data("a"), data("b")]);
    }

    #[test]
    fn utf8_split_across_pushes_is_decoded_whole() {
        let bytes = "data: h€llo\n\n".as_bytes();
        let mut p = Parser::new();
        p.push(&bytes[..8]); // inside the euro sign
        p.push(&bytes[8..]);
        assert_eq!(all(&mut p).unwrap(), [data("h€llo")]);
    }

    #[test]
    fn invalid_utf8_is_a_stream_error_after_earlier_events() {
        let mut p = Parser::new();
        p.push(b"data: ok\n\ndata: \xff\xfe\n\ndata: later\n\n");
        assert_eq!(p.next_event().unwrap(), Some(data("ok")));
        let err = p.next_event().unwrap_err();
        assert_eq!(
            err.to_string(),
            "malformed stream: the event stream is not valid utf-8"
        );
        assert!(p.next_event().is_err());
    }

    #[test]
    fn an_event_over_the_limit_is_a_stream_error() {
        let mut p = Parser::new().max_event_bytes(16);
        p.push(b"data: small\n\n");
        p.push(b"data: 0123456789");
        p.push(b"0123456789");
        assert_eq!(p.next_event().unwrap(), Some(data("small")));
        assert!(matches!(p.next_event(), Err(Error::Stream(m)) if m.contains("16 bytes")));
    }

    #[test]
    fn an_empty_push_between_cr_and_lf_keeps_them_one_line_end() {
        let mut p = Parser::new();
        p.push(b"data: a\r");
        p.push(b"");
        p.push(b"\ndata: b\n\n");
        assert_eq!(all(&mut p).unwrap(), [data("a\nb")]);
    }

    #[test]
    fn keep_alive_comments_do_not_count_toward_the_limit() {
        let mut p = Parser::new().max_event_bytes(16);
        for _ in 0..100 {
            p.push(b": keep-alive comment\n");
        }
        p.push(b"data: x\n\n");
        assert_eq!(all(&mut p).unwrap(), [data("x")]);
    }

    fn stream_strategy() -> impl Strategy<Value = Vec<u8>> {
        let line = prop_oneof![
            "[a-z€é{}\":, ]{0,12}".prop_map(|s| format!("data: {s}")),
            "[a-z]{0,6}".prop_map(|s| format!("event: {s}")),
            Just(": ping".to_owned()),
            Just(String::new()),
        ];
        let end = prop_oneof![Just("\n"), Just("\r\n"), Just("\r")];
        prop::collection::vec((line, end), 0..40).prop_map(|lines| {
            lines
                .into_iter()
                .flat_map(|(l, e)| format!("{l}{e}").into_bytes())
                .collect()
        })
    }

    proptest! {
        #[test]
        fn events_do_not_depend_on_how_input_is_cut(
            input in stream_strategy(),
            cuts in prop::collection::vec(0usize..400, 0..12),
        ) {
            let whole = parse(&input).unwrap();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(input.len())).collect();
            cuts.sort_unstable();
            let mut p = Parser::new();
            let mut start = 0;
            for c in cuts.into_iter().chain([input.len()]) {
                p.push(&input[start..c]);
                start = c;
            }
            prop_assert_eq!(all(&mut p).unwrap(), whole);
        }

        #[test]
        fn byte_by_byte_equals_whole(input in stream_strategy()) {
            let whole = parse(&input).unwrap();
            let mut p = Parser::new();
            for b in &input {
                p.push(std::slice::from_ref(b));
            }
            prop_assert_eq!(all(&mut p).unwrap(), whole);
        }
    }
}
