//! The OpenAiCompat provider's stream decoder, on an arbitrary response body served over loopback
//! HTTP: never panics or hangs, and a reply it returns is what its events built.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pagent::llm::OpenAiCompat;
use pagent_fuzz::{TIMEOUT, check_stream, no_retry, server_url};

fuzz_target!(|data: &[u8]| {
    static PROVIDER: OnceLock<OpenAiCompat> = OnceLock::new();
    let provider = PROVIDER.get_or_init(|| {
        OpenAiCompat::new(format!("{}/v1", server_url()))
            .retry(no_retry())
            .first_byte_timeout(TIMEOUT)
            .idle_timeout(TIMEOUT)
            // Small, so that the fuzzer reaches it.
            .max_event_bytes(4096)
    });
    check_stream(provider, data);
});
