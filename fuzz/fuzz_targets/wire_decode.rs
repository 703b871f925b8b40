//! The wire decoder and `Mirror` on arbitrary lines: never panic; every event but a
//! `MessageUpdate` decodes alone to what it re-encodes to; a mirror keeps the state's
//! invariants after every line it folds in, whatever the lines say (a mirror may join a
//! stream anywhere, so no order of events is "wrong" for it). The decoders detect the
//! dialect, so pagent v1 and v4 lines are read too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagent::wire::{Decoder, Mirror, decode_event_line, encode_event_line};
use pagent::{AgentEvent, State};

fn check_invariants(state: &State) {
    assert_eq!(
        state.is_streaming_reply,
        state.streaming_message.is_some(),
        "is_streaming_reply disagrees with streaming_message"
    );
    if !state.is_streaming {
        assert!(!state.is_streaming_reply, "streaming outside a run");
        assert!(
            state.pending_tool_calls.is_empty(),
            "a call pending outside a run"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let (limit, bytes) = pagent_fuzz::split_first(data);
    let limit = limit * 64;

    // The reader: the first line that does not decode ends it, with the lines before it
    // folded in.
    let mut mirror = Mirror::new().decoder(Decoder::detecting().max_line_len(limit));
    let _ = mirror.read_lines(bytes, |_, state| check_invariants(state));
    check_invariants(mirror.state());

    // Line by line, going on past the lines that do not decode.
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let mut mirror = Mirror::new();
    let mut decoder = Decoder::detecting();
    for line in text.split_inclusive('\n') {
        if let Ok(event) = decode_event_line(line)
            && !matches!(event, AgentEvent::MessageUpdate { .. })
        {
            let again = encode_event_line(&event);
            assert_eq!(
                decode_event_line(&again).as_ref(),
                Ok(&event),
                "{again} does not decode back"
            );
        }
        let from_decoder = decoder.decode_events(line);
        let from_mirror = mirror.apply_line(line);
        assert_eq!(
            from_decoder, from_mirror,
            "the mirror decodes as its decoder does"
        );
        check_invariants(mirror.state());
    }
});
