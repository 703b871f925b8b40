//! Makes a test of every Rust code block of pagent's documentation: the README, the tutorial
//! (the crate's front page) and the doc comments of its sources, as rustdoc reads them.
//!
//! Each block becomes what rustdoc makes of it, but in this crate, which sees only the
//! dependencies a user has: hidden lines (`# ..`) are kept, a block with a `fn main` is a
//! module whose `main` the test calls, any other block is the body of a closure (so `?` works
//! with the block's own closing `Ok::<(), E>(())`), and what it returns must report success.
//! `no_run` blocks are compiled and not run, `should_panic` ones must panic, `ignore`,
//! `compile_fail` and non-Rust blocks are left out. The blocks of modules behind features
//! this crate does not turn on (`redis`, `tracing`) are left out too.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut sources: Vec<(String, Vec<Block>)> = Vec::new();
    for doc in ["README.md", "docs/tutorial.md"] {
        let path = root.join(doc);
        rerun(&path);
        let text = std::fs::read_to_string(&path).expect("a doc file");
        sources.push((doc.to_owned(), markdown_blocks(&text)));
    }
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    for file in files {
        rerun(&file);
        let rel = file
            .strip_prefix(&root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        if ["src/redis/", "src/trace/"]
            .iter()
            .any(|p| rel.starts_with(p))
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        sources.push((rel, markdown_blocks(&doc_comments(&text))));
    }
    let mut out = String::new();
    let mut count = 0;
    for (source, blocks) in &sources {
        for block in blocks {
            count += 1;
            emit(&mut out, source, block, count);
        }
    }
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("blocks.rs");
    std::fs::write(dest, out).expect("blocks.rs written");
    println!("cargo:rustc-env=PAGENT_DOC_BLOCKS={count}");
}

fn rerun(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    rerun(dir);
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// One Rust block: where it starts, how it runs, its code with the hidden lines shown.
struct Block {
    line: usize,
    mode: Mode,
    code: String,
}

#[derive(PartialEq)]
enum Mode {
    Run,
    NoRun,
    ShouldPanic,
}

/// The doc comments of a source file (`///` and `//!`), as the Markdown they are, with
/// everything else replaced by blank lines so that line numbers stay.
fn doc_comments(source: &str) -> String {
    let mut out = String::new();
    for line in source.lines() {
        let t = line.trim_start();
        let doc = t
            .strip_prefix("///")
            .filter(|rest| !rest.starts_with('/'))
            .or_else(|| t.strip_prefix("//!"));
        match doc {
            Some(rest) => out.push_str(rest.strip_prefix(' ').unwrap_or(rest)),
            None => {}
        }
        out.push('\n');
    }
    out
}

/// The Rust blocks of a Markdown text, as rustdoc tells them: a fence whose info string is
/// empty or made of rustdoc's attributes (and `rust`).
fn markdown_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let t = line.trim_start();
        let Some(info) = t.strip_prefix("```") else {
            continue;
        };
        let indent = line.len() - t.len();
        let mut code = Vec::new();
        for (_, body) in lines.by_ref() {
            if body.trim_start().starts_with("```") {
                break;
            }
            code.push(body.get(indent..).unwrap_or(body.trim_start()));
        }
        let Some(mode) = mode(info.trim()) else {
            continue;
        };
        let code = code.iter().map(|l| shown(l)).collect::<Vec<_>>().join("\n");
        blocks.push(Block {
            line: n + 1,
            mode,
            code,
        });
    }
    blocks
}

/// How rustdoc runs a block with this info string; `None` when it is not run Rust code.
fn mode(info: &str) -> Option<Mode> {
    let mut mode = Mode::Run;
    for word in info.split([',', ' ']).filter(|w| !w.is_empty()) {
        match word {
            "rust" | "edition2015" | "edition2018" | "edition2021" | "edition2024" => {}
            "no_run" => mode = Mode::NoRun,
            "should_panic" => mode = Mode::ShouldPanic,
            // Not compiled, not Rust, or compiled to fail: none of them is a user's code.
            _ => return None,
        }
    }
    Some(mode)
}

/// A line as the compiler sees it: rustdoc's hidden lines (`# ..`, a lone `#`) without
/// their mark, `##` for a line that starts with `#`.
fn shown(line: &str) -> String {
    let t = line.trim_start();
    let lead = &line[..line.len() - t.len()];
    if t == "#" {
        String::new()
    } else if let Some(rest) = t.strip_prefix("# ") {
        format!("{lead}{rest}")
    } else if let Some(rest) = t.strip_prefix("##") {
        format!("{lead}#{rest}")
    } else {
        line.to_owned()
    }
}

fn emit(out: &mut String, source: &str, block: &Block, n: usize) {
    let name: String = source
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("{name}_line_{}", block.line);
    let attrs = match block.mode {
        Mode::Run => "#[test]",
        Mode::ShouldPanic => "#[test]\n#[should_panic]",
        // Compiled and type-checked, never run (it talks to a network, waits for input).
        Mode::NoRun => "#[allow(dead_code)]",
    };
    let has_main = block.code.contains("fn main(");
    let _ = writeln!(out, "/// {source}, line {}", block.line);
    let _ = writeln!(
        out,
        "#[allow(unused, unexpected_cfgs, clippy::all)]\nmod block_{n} {{"
    );
    if has_main {
        let _ = writeln!(
            out,
            "{}\n{attrs}\nfn {name}() {{ crate::check(main()); }}",
            block.code
        );
    } else {
        let _ = writeln!(
            out,
            "{attrs}\nfn {name}() {{\nlet outcome = (|| {{\n{}\n}})();\ncrate::check(outcome);\n}}",
            block.code
        );
    }
    let _ = writeln!(out, "}}\n");
}
