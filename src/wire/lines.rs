//! Reading wire input line by line without ever holding more than the line limit.

use std::io::{self, BufRead};

/// What [`read_line`] found.
pub(crate) enum Line {
    End,
    Whole,
    TooLong(usize),
}

/// Reads one line into `buf` (without its line end), never holding more than `max` bytes: a
/// longer line is consumed and reported with its length.
pub(crate) fn read_line(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    buf.clear();
    let mut dropped = 0usize;
    let mut seen = false;
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(match (seen, dropped) {
                (false, _) => Line::End,
                (true, 0) => Line::Whole,
                (true, n) => Line::TooLong(n),
            });
        }
        seen = true;
        let (used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        let piece = &available[..used];
        let piece = if done {
            &piece[..piece.len() - 1]
        } else {
            piece
        };
        if dropped == 0 && buf.len() + piece.len() <= max {
            buf.extend_from_slice(piece);
        } else {
            dropped += buf.len() + piece.len();
            buf.clear();
        }
        input.consume(used);
        if done {
            if buf.ends_with(b"\r") {
                buf.pop();
            }
            return Ok(if dropped == 0 {
                Line::Whole
            } else {
                Line::TooLong(dropped)
            });
        }
    }
}
