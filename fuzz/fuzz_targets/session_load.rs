//! The session loader on an arbitrary file: never panics nor fails (a damaged line is a
//! warning), gives at most one message or warning per line, and what it loads saves and
//! loads back the same.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pagent::session;

/// A file of this process's own under the fuzz crate's (ignored) `target/`, reused for
/// every input: nothing is left behind elsewhere.
fn path(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("target/session_load")
            .join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        dir
    });
    dir.join(name)
}

fuzz_target!(|data: &[u8]| {
    let (limit, bytes) = pagent_fuzz::split_first(data);
    let file = path("input.jsonl");
    std::fs::write(&file, bytes).expect("write the input");
    let lines = bytes.split(|&b| b == b'\n').count();
    for loaded in [
        session::load(&file).expect("loading never fails on a readable file"),
        session::load_with_limit(&file, limit * 8).expect("loading never fails on a readable file"),
    ] {
        assert!(loaded.messages.len() + loaded.warnings.len() <= lines);
        let again = path("again.jsonl");
        session::save(&again, &loaded.messages).expect("save");
        let reloaded = session::load(&again).expect("load what was saved");
        assert!(reloaded.warnings.is_empty(), "{:?}", reloaded.warnings);
        assert_eq!(reloaded.messages, loaded.messages);
    }
});
