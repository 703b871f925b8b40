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

/// One event of the stream as [`Parser::feed`] hands it on: borrowed from the bytes being
/// fed when its lines lie whole within them (the common case: a read holds many events), else
/// from the parser's own buffers. Nothing is copied or allocated for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EventRef<'a> {
    /// The `event:` name; empty when the server gave none.
    pub(crate) event: &'a str,
    /// The `data:` lines joined with `\n`.
    pub(crate) data: &'a str,
    /// The last `id:` the stream set, if any.
    pub(crate) id: Option<&'a str>,
    /// The last `retry:` the stream set, in milliseconds.
    pub(crate) retry: Option<u64>,
}

/// Where the data of the event being built is: in the parser's buffer, or (not yet copied,
/// not yet checked to be UTF-8) at this range of the bytes being fed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    Owned,
    In(usize, usize),
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
    // Whether `event:` names are kept (else only checked to be text, and events name none).
    names: bool,
    // The data of the event being built: in this buffer, or where `data_at` says in the bytes
    // being fed (copied here only if the event does not end within them).
    data: String,
    data_at: Held,
    has_data: bool,
    id: Option<String>,
    retry: Option<u64>,
    // Bytes held by the event being built, to enforce the limit.
    event_bytes: usize,
    max_event_bytes: usize,
    ready: VecDeque<Event>,
    failed: Option<Error>,
}

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
            names: true,
            data: String::new(),
            data_at: Held::Owned,
            has_data: false,
            id: None,
            retry: None,
            event_bytes: 0,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            ready: VecDeque::new(),
            failed: None,
        }
    }

    /// Limits one event to `bytes` bytes of field lines. Defaults to
    /// [`DEFAULT_MAX_EVENT_BYTES`].
    #[must_use]
    pub fn max_event_bytes(mut self, bytes: usize) -> Parser {
        self.max_event_bytes = bytes;
        self
    }

    /// Leaves the `event:` names out: each line is still checked to be text, but not
    /// copied, and every event names none (for readers of the data alone: a Responses
    /// stream names each of its events, which costs a copy per delta).
    #[must_use]
    pub(crate) fn without_names(mut self) -> Parser {
        self.names = false;
        self
    }

    /// Adds the next bytes of the stream. Complete events become available to
    /// [`Parser::next_event`]; errors are reported there too, after the events before them.
    pub fn push(&mut self, bytes: &[u8]) {
        let mut ready = std::mem::take(&mut self.ready);
        // The error, if any, stays in `failed` for `next_event`.
        let _ = self.feed(bytes, &mut |e| {
            ready.push_back(Event {
                event: e.event.to_owned(),
                data: e.data.to_owned(),
                id: e.id.map(str::to_owned),
                retry: e.retry,
            });
            Ok(false)
        });
        self.ready = ready;
    }

    /// Adds the next bytes of the stream and hands each event they complete to `sink`, in
    /// order, as it completes (see [`EventRef`]), until `sink` says it has seen the end
    /// (`Ok(true)`, returned at once: the rest of `bytes` is not read).
    ///
    /// # Errors
    /// The error of `sink`; [`Error::Stream`] when an event grew past the size limit or a
    /// line was not UTF-8, after the events before it (the parser then stays failed).
    pub(crate) fn feed(
        &mut self,
        input: &[u8],
        sink: &mut dyn FnMut(EventRef<'_>) -> Result<bool, Error>,
    ) -> Result<bool, Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut at = 0;
        // An empty push says nothing about the byte after a CR: keep waiting for it.
        if self.after_cr && !input.is_empty() {
            self.after_cr = false;
            if input[0] == b'\n' {
                at = 1;
            }
        }
        let ended = self.lines(input, &mut at, sink);
        // What the event being built still has in `input` is copied before it goes.
        self.own(input);
        match (ended, &self.failed) {
            (Ok(false), Some(e)) => Err(e.clone()),
            (ended, _) => ended,
        }
    }

    /// The lines of `input` from `at`: see [`Parser::feed`].
    fn lines(
        &mut self,
        input: &[u8],
        at: &mut usize,
        sink: &mut dyn FnMut(EventRef<'_>) -> Result<bool, Error>,
    ) -> Result<bool, Error> {
        while *at < input.len() && self.failed.is_none() {
            let bytes = &input[*at..];
            if self.line.is_empty() && !self.in_comment && bytes[0] == b':' {
                self.in_comment = true;
            }
            let Some(end) = line_end(bytes) else {
                if !self.in_comment && self.grow(bytes.len()) {
                    self.line.extend_from_slice(bytes);
                }
                return Ok(false);
            };
            if self.in_comment {
                // A comment (keep-alive such as `: ping`): skipped, not counted.
                self.in_comment = false;
            } else if !self.grow(end) {
                return Ok(false);
            } else if end == 0 && self.line.is_empty() {
                if self.dispatch(input, sink)? {
                    return Ok(true);
                }
            } else if self.line.is_empty() {
                self.field(input, *at, &bytes[..end]);
            } else {
                self.line.extend_from_slice(&bytes[..end]);
                let line = std::mem::take(&mut self.line);
                self.field(input, usize::MAX, &line);
                // Keep the allocation for the next line.
                self.line = line;
                self.line.clear();
            }
            let is_cr = bytes[end] == b'\r';
            *at += end + 1;
            if is_cr {
                match input.get(*at) {
                    Some(b'\n') => *at += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        Ok(false)
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

    /// Copies the data that is still where it is in `input` into the parser's buffer.
    fn own(&mut self, input: &[u8]) {
        if let Held::In(a, b) = std::mem::replace(&mut self.data_at, Held::Owned) {
            match self.checked(&input[a..b]) {
                Some(value) => self.data.push_str(value),
                None => self.data.clear(),
            }
        }
    }

    /// `bytes` as text; `None` (and failed) when they are not UTF-8.
    fn checked<'b>(&mut self, bytes: &'b [u8]) -> Option<&'b str> {
        let text = std::str::from_utf8(bytes).ok();
        if text.is_none() {
            self.failed = Some(Error::Stream("the event stream is not valid utf-8".into()));
        }
        text
    }

    /// One field line (not empty). `start` is where it begins in `input`, `usize::MAX` when
    /// it is not there (joined from pieces of several pushes). The value of the event's
    /// first `data` line is left where it is, and checked to be UTF-8 when the event is
    /// dispatched (or copied): so the data of most events is checked once and never copied.
    fn field(&mut self, input: &[u8], start: usize, line: &[u8]) {
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &line[line.len()..]),
        };
        match field {
            b"data" if !self.has_data && start != usize::MAX => {
                let from = start + (line.len() - value.len());
                self.data_at = Held::In(from, start + line.len());
                self.has_data = true;
            }
            b"data" => {
                self.own(input);
                let Some(value) = self.checked(value) else {
                    return;
                };
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // Without names, a name of ASCII (they all are) needs no more than that check.
            b"event" if !self.names => {
                if !value.is_ascii() {
                    self.checked(value);
                }
            }
            b"event" => {
                if let Some(value) = self.checked(value) {
                    value.clone_into(&mut self.event);
                }
            }
            // An id with NUL is ignored, per the spec.
            b"id" => {
                if let Some(value) = self.checked(value)
                    && !value.contains('\0')
                {
                    self.id = Some(value.to_owned());
                }
            }
            // Only digits, per the spec; anything else is ignored.
            b"retry" => {
                if let Some(value) = self.checked(value)
                    && !value.is_empty()
                    && value.bytes().all(|b| b.is_ascii_digit())
                {
                    self.retry = value.parse().ok();
                }
            }
            // Unknown fields: nothing for us to do, but the stream must still be text.
            _ => {
                self.checked(line);
            }
        }
    }

    /// A blank line: the event built so far goes to `sink`, if it has data.
    fn dispatch(
        &mut self,
        input: &[u8],
        sink: &mut dyn FnMut(EventRef<'_>) -> Result<bool, Error>,
    ) -> Result<bool, Error> {
        self.event_bytes = 0;
        let data_at = std::mem::replace(&mut self.data_at, Held::Owned);
        let mut ended = Ok(false);
        if std::mem::take(&mut self.has_data) {
            let data = match data_at {
                Held::In(a, b) => self.checked(&input[a..b]),
                Held::Owned => Some(""),
            };
            if let Some(data) = data {
                let data = if data_at == Held::Owned {
                    &self.data
                } else {
                    data
                };
                ended = sink(EventRef {
                    event: &self.event,
                    data,
                    id: self.id.as_deref(),
                    retry: self.retry,
                });
            }
        }
        self.event.clear();
        self.data.clear();
        ended
    }
}

/// The index of the first `\n` or `\r` in `bytes`: the lines of a model's stream are a few
/// hundred bytes long, and looking for their ends was most of the parser's work (memchr
/// looks at 16 bytes at a time).
fn line_end(bytes: &[u8]) -> Option<usize> {
    memchr::memchr2(b'\n', b'\r', bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
    fn feeding_stops_at_the_event_that_ends_the_stream() {
        let mut p = Parser::new();
        let mut seen = Vec::new();
        let ended = p.feed(b"data: a\n\ndata: end\n\ndata: after\n\n", &mut |e| {
            seen.push(e.data.to_owned());
            Ok(e.data == "end")
        });
        assert!(ended.unwrap());
        assert_eq!(seen, ["a", "end"]);
    }

    #[test]
    fn a_fed_line_that_is_not_utf8_fails_after_the_events_before_it() {
        for input in [
            &b"data: ok\n\ndata: \xff\n\ndata: later\n\n"[..],
            b"data: ok\n\nevent: \xff\ndata: x\n\n",
            b"data: ok\n\ndata: a\ndata: \xff\n\n",
            b"data: ok\n\nother\xff: x\n\n",
        ] {
            for names in [true, false] {
                let mut p = match names {
                    true => Parser::new(),
                    false => Parser::new().without_names(),
                };
                let mut seen = Vec::new();
                let result = p.feed(input, &mut |e| {
                    seen.push(e.data.to_owned());
                    Ok(false)
                });
                assert!(
                    matches!(&result, Err(Error::Stream(m)) if m.contains("utf-8")),
                    "{result:?}"
                );
                assert_eq!(seen, ["ok"]);
                assert!(p.feed(b"data: x\n\n", &mut |_| Ok(false)).is_err());
            }
        }
    }

    #[test]
    fn a_parser_without_names_hands_on_the_rest_of_each_event() {
        let mut p = Parser::new().without_names();
        let mut seen = Vec::new();
        let input = b"event: one\nid: 7\nretry: 20\ndata: a\n\nevent: two\ndata: b\n\n";
        p.feed(input, &mut |e| {
            seen.push((
                e.event.to_owned(),
                e.data.to_owned(),
                e.id.map(str::to_owned),
                e.retry,
            ));
            Ok(false)
        })
        .unwrap();
        let id = Some("7".to_owned());
        assert_eq!(
            seen,
            [
                (String::new(), "a".to_owned(), id.clone(), Some(20)),
                (String::new(), "b".to_owned(), id, Some(20)),
            ]
        );
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
        // `push` hands `feed`'s events on: this covers the events borrowed from the input
        // and those copied across pushes alike.
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
