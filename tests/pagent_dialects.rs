//! The pagent dialects: accepted by pagent's own decoder, with the method sequences pagent
//! itself writes for the same runs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pagent-wire");

/// The methods of a stream, with runs of the same delta method collapsed into one (how a
/// reply is cut into deltas is not part of the grammar).
fn methods(stream: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in stream.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let m = v["method"].as_str().unwrap().to_owned();
        if m.ends_with("Delta") && out.last() == Some(&m) {
            continue;
        }
        out.push(m);
    }
    out
}

/// pagent 0.7.30 leaves out the `TurnEnd` of the turn before a max_turns synthesis turn; our
/// streams are regular, so compare with the capture made regular.
fn regular(mut methods: Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut open = false;
    for m in methods.drain(..) {
        match m.as_str() {
            "TurnBegin" if open => out.push("TurnEnd".to_owned()),
            _ => {}
        }
        match m.as_str() {
            "TurnBegin" => open = true,
            "TurnEnd" => open = false,
            _ => {}
        }
        out.push(m);
    }
    out
}

fn capture(name: &str) -> Vec<String> {
    let path = Path::new(DATA)
        .join("captures")
        .join(format!("{name}.jsonl"));
    regular(methods(&std::fs::read_to_string(&path).unwrap()))
}

#[test]
fn method_sequences_match_the_pagent_captures() {
    let all = common::record_all();
    let get = |name: &str| all.iter().find(|r| r.name == name).unwrap();
    for name in [
        "text",
        "reasoning",
        "tool",
        "tool2",
        "tool_error",
        "maxturns",
    ] {
        assert_eq!(
            methods(&get(name).v1),
            capture(&format!("v1_{name}")),
            "v1 {name}"
        );
        // pagent v4 runs max_turns=2 as two tool turns and a synthesis turn: our max_turns=3.
        let ours = if name == "maxturns" {
            "maxturns3"
        } else {
            name
        };
        assert_eq!(
            methods(&get(ours).v4),
            capture(&format!("v4_{name}")),
            "v4 {name}"
        );
    }
    // A steering message sent while a tool runs rides into the next turn of the same run.
    assert_eq!(methods(&get("steer").v4), capture("v4_steer_after_turnend"));
}

#[test]
fn dialect_streams_are_regular() {
    for r in common::record_all() {
        for (dialect, stream) in [("v1", &r.v1), ("v4", &r.v4)] {
            let m = methods(stream);
            let count = |x: &str| m.iter().filter(|y| *y == x).count();
            assert_eq!(count("TurnBegin"), count("TurnEnd"), "{dialect} {}", r.name);
            assert_eq!(
                count("ToolCallBegin"),
                count("ToolResult"),
                "{dialect} {}",
                r.name
            );
            for (i, w) in m.iter().enumerate() {
                if w == "ToolCallBegin" {
                    assert_eq!(m[i + 1], "ToolResult", "{dialect} {}", r.name);
                }
            }
            assert_eq!(
                m.first().map(String::as_str),
                Some("RunBegin"),
                "{dialect} {}",
                r.name
            );
            assert_eq!(
                m.last().map(String::as_str),
                Some("RunEnd"),
                "{dialect} {}",
                r.name
            );
        }
    }
}

/// Runs only on request (`--ignored`, as `.ci/run` does), with `PAGENT_WIRE_PYTHON` naming a
/// python that has `pagent==0.7.30` installed.
#[test]
#[ignore = "needs pagent 0.7.30: PAGENT_WIRE_PYTHON=<python> cargo test --test pagent_dialects -- --ignored"]
fn pagent_decoder_accepts_both_dialects() {
    // OK to panic: the test runs only on request, and then needs that python.
    let python = std::env::var_os("PAGENT_WIRE_PYTHON")
        .expect("set PAGENT_WIRE_PYTHON to a python with pagent==0.7.30 installed");
    let dir = std::env::temp_dir().join(format!("pagent-dialects-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files: [Vec<PathBuf>; 2] = [Vec::new(), Vec::new()];
    for r in common::record_all() {
        for (i, (dialect, stream)) in [("v1", &r.v1), ("v4", &r.v4)].into_iter().enumerate() {
            let path = dir.join(format!("{dialect}_{}.jsonl", r.name));
            std::fs::write(&path, stream).unwrap();
            files[i].push(path);
        }
    }
    for (i, dialect) in ["v1", "v4"].into_iter().enumerate() {
        let out = Command::new(&python)
            .arg(Path::new(DATA).join("check_wire.py"))
            .args(["--dialect", dialect, "--strict-fields", "--quiet"])
            .args(&files[i])
            .output()
            .expect("runs the checker");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "check_wire.py --dialect {dialect} failed:\n{report}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(report.trim_end().ends_with(" 0 failed"), "{report}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
