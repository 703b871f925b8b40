//! Every Rust block of pagent's documentation, built and run as a user's code (see
//! `build.rs`): each test is named after the file and the line where its block starts.

use std::process::{ExitCode, Termination};

/// What a block (or its `main`) returned reports success, as a doctest's must.
fn check<T: Termination>(outcome: T) {
    let code = outcome.report();
    assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::SUCCESS));
}

include!(concat!(env!("OUT_DIR"), "/blocks.rs"));

#[test]
fn the_documentation_has_its_blocks() {
    let blocks: usize = env!("PAGENT_DOC_BLOCKS").parse().unwrap();
    assert!(
        blocks > 50,
        "only {blocks} blocks found: is the extraction broken?"
    );
}
