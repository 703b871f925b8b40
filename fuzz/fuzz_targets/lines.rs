//! The line reader of the wire and session readers: never panics, never holds a line over
//! its limit, and finds the lines a plain split finds (the limit and the lengths leave out
//! the line end, `\n` and `\r\n` alike), however the reads are cut.
#![no_main]

use std::io::{BufReader, Read};

use libfuzzer_sys::fuzz_target;
use pagent::fuzz_support::read_lines;

/// Hands out `bytes` in pieces of at most `step` bytes, as a pipe or socket does.
struct Chunked<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.bytes.len().min(self.step).min(out.len());
        out[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

/// The lines of `bytes` by the reader's documented rules, computed on the whole input.
fn expected(bytes: &[u8], max: usize) -> Vec<Result<Vec<u8>, usize>> {
    let mut lines = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let line = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let line = &rest[..i];
                rest = &rest[i + 1..];
                line.strip_suffix(b"\r").unwrap_or(line)
            }
            // A last line without its `\n` has no line end: a `\r` there is its own.
            None => std::mem::take(&mut rest),
        };
        lines.push(if line.len() <= max {
            Ok(line.to_vec())
        } else {
            Err(line.len())
        });
    }
    lines
}

fuzz_target!(|data: &[u8]| {
    let (step, bytes) = pagent_fuzz::split_first(data);
    let (max, bytes) = pagent_fuzz::split_first(bytes);
    let max = max - 1;
    let want = expected(bytes, max);
    let got = read_lines(BufReader::with_capacity(step, Chunked { bytes, step }), max)
        .expect("reading from memory does not fail");
    assert_eq!(got, want, "pieces of {step}, limit {max}");
});
