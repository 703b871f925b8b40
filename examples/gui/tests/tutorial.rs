//! The tutorial's GUI section is this package's `minimal` binary, line for line: the program a
//! reader copies from the docs is one that builds against eframe 0.37 (CI builds and lints the
//! binary) and repaints by the rule the docs give.

/// The code block of the tutorial's "Polling from a GUI" section.
fn tutorial_block() -> String {
    let tutorial = include_str!("../../../docs/tutorial.md");
    let section = tutorial
        .split("\n## Polling from a GUI\n")
        .nth(1)
        .expect("the tutorial has its GUI section");
    let block = section
        .split("```rust,ignore\n")
        .nth(1)
        .expect("the section has its program");
    block
        .split("\n```\n")
        .next()
        .expect("the block ends")
        .to_owned()
}

/// `src/bin/minimal.rs` without its file comment.
fn minimal() -> String {
    let file = include_str!("../src/bin/minimal.rs");
    let body: Vec<&str> = file
        .lines()
        .skip_while(|l| l.starts_with("//!"))
        .skip_while(|l| l.is_empty())
        .collect();
    body.join("\n")
}

#[test]
fn the_tutorials_gui_program_is_the_minimal_binary() {
    assert_eq!(tutorial_block(), minimal());
}

#[test]
fn the_tutorials_gui_program_repaints_with_the_waker() {
    let block = tutorial_block();
    assert!(block.contains("agent.waker(move || ctx.request_repaint())"));
    assert!(block.contains("self.waker.snapshot()"));
    // eframe 0.37's `App`: the frame draws into a `Ui`.
    assert!(block.contains("fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame)"));
    assert!(
        !block.contains("if state.is_streaming {"),
        "the old rule missed a run's start"
    );
}
