//! The SSE parser: never panics, and gives the same events (and the same error after them)
//! whichever way the input is cut into pushes, as its `# Consistency` promises.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagent::llm::sse::Parser;

/// Every event `parser` gives for `pieces`, then its error if it failed.
fn parse<'a>(pieces: impl Iterator<Item = &'a [u8]>, limit: usize) -> Vec<Result<String, String>> {
    let mut parser = Parser::new().max_event_bytes(limit);
    let mut out = Vec::new();
    for piece in pieces {
        parser.push(piece);
        loop {
            match parser.next_event() {
                Ok(Some(e)) => out.push(Ok(format!("{:?}", (e.event, e.data, e.id)))),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let (step, bytes) = pagent_fuzz::split_first(data);
    // A small limit, so that the fuzzer reaches it; the step doubles as the limit's seed.
    let limit = step * 16;
    let whole = parse(std::iter::once(bytes), limit);
    let cut = parse(bytes.chunks(step), limit);
    // Empty pushes between the pieces change nothing either.
    let with_empty = parse(bytes.chunks(step).flat_map(|c| [c, &[][..]]), limit);
    assert_eq!(whole, cut, "cut into pieces of {step}");
    assert_eq!(whole, with_empty, "with empty pushes");
});
