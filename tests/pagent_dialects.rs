//! The pagent dialects: accepted by pagent's own decoder, with the method sequences pagent
//! itself writes for the same runs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use common::Recorded;
use pagent::llm::{Faux, FauxReply};
use pagent::wire::{Dialect, Writer};
use pagent::{Agent, AgentEvent, RunStopReason, Usage};
use serde_json::{Value, json};

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

/// Aborts the run when `at` holds for an event, from the listener that sees it.
fn abort_when(agent: &Agent, at: fn(&AgentEvent) -> bool) {
    let h = agent.handle();
    let sub = agent.subscribe(move |e| {
        if at(e) {
            h.abort();
        }
    });
    let _ = agent.prompt("Say hello.");
    sub.unsubscribe();
}

fn continuing_turn_end(e: &AgentEvent) -> bool {
    matches!(
        e,
        AgentEvent::TurnEnd {
            stop_reason: RunStopReason::Continuing,
            ..
        }
    )
}

/// The scenarios that abort at each checkpoint of a run, beside those of `common` (which
/// abort mid-reply and while a tool runs).
fn abort_scenarios() -> Vec<Recorded> {
    let b = || {
        Agent::builder()
            .model("faux-1")
            .system_prompt("Be brief.")
            .tool(common::echo())
            .provider(
                Faux::default()
                    .reply(FauxReply::tool_call("echo", json!({"text": "ping"})).with_id("call_0"))
                    .reply(FauxReply::text("echo said: ping")),
            )
    };
    vec![
        common::record("abort_after_run_begin", b(), |agent| {
            abort_when(agent, |e| matches!(e, AgentEvent::AgentStart))
        }),
        common::record("abort_after_turn_begin", b(), |agent| {
            abort_when(agent, |e| matches!(e, AgentEvent::TurnStart { .. }))
        }),
        common::record("abort_after_tool_begin", b(), |agent| {
            abort_when(agent, |e| matches!(e, AgentEvent::ToolStart { .. }))
        }),
        common::record("abort_after_continuing_turn_end", b(), |agent| {
            abort_when(agent, continuing_turn_end)
        }),
        // Another thread aborts while the continuing `TurnEnd` is being dispatched.
        common::record("abort_from_thread_at_continuing_turn_end", b(), |agent| {
            let h = agent.handle();
            let (tx, rx) = mpsc::channel::<()>();
            let (done_tx, done_rx) = mpsc::channel::<()>();
            let aborter = std::thread::spawn(move || {
                if rx.recv_timeout(Duration::from_secs(10)).is_ok() {
                    h.abort();
                    let _ = done_tx.send(());
                }
            });
            let tx = parking_lot::Mutex::new(Some(tx));
            let done_rx = parking_lot::Mutex::new(done_rx);
            let sub = agent.subscribe(move |e| {
                if continuing_turn_end(e)
                    && let Some(tx) = tx.lock().take()
                {
                    let _ = tx.send(());
                    let _ = done_rx.lock().recv_timeout(Duration::from_secs(10));
                }
            });
            let _ = agent.prompt("Say hello.");
            sub.unsubscribe();
            aborter.join().unwrap();
        }),
    ]
}

/// Whether the scenario's last run failed (a provider error).
fn failed(r: &Recorded) -> bool {
    matches!(
        r.events.last(),
        Some((
            AgentEvent::AgentEnd {
                stop_reason: RunStopReason::Error,
                ..
            },
            _
        ))
    )
}

/// A reply with cache-read and reasoning counts, then one whose provider reported no usage.
fn usage_scenario() -> Recorded {
    let builder = Agent::builder()
        .model("faux-1")
        .tool(common::echo())
        .provider(
            Faux::default()
                .reply(
                    FauxReply::tool_call("echo", json!({"text": "ping"}))
                        .with_id("call_0")
                        .usage(Usage::new(10, 3).with_cache(4, 0).with_reasoning(2)),
                )
                .reply(FauxReply::text("done").usage(Usage::default())),
        );
    common::record("usage_details", builder, |agent| {
        agent.prompt("Say hello.").unwrap();
    })
}

/// Every scenario the dialect tests check: `common`'s, the aborts and the usage details.
fn all_scenarios() -> Vec<Recorded> {
    let mut all = common::record_all();
    all.extend(abort_scenarios());
    all.push(usage_scenario());
    all
}

/// pagent's `user_input` and `ToolResult.content` are strings: a prompt's and a result's
/// text go there with a note for each image and document (its media type and size, or its
/// URL) and a document of text as its text, never the bytes.
#[test]
fn images_and_documents_are_noted_in_the_pagent_strings() {
    let all = common::record_all();
    let r = all.iter().find(|r| r.name == "images").unwrap();
    for (dialect, stream) in [("v1", &r.v1), ("v4", &r.v4)] {
        let lines: Vec<Value> = stream
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let param = |method: &str, key: &str| {
            lines.iter().find(|v| v["method"] == method).unwrap()["params"][key].clone()
        };
        assert_eq!(
            param("RunBegin", "user_input"),
            json!(format!(
                "What is on the screen?\n[image: image/png, {} bytes]\n[document: https://example.com/spec.pdf]\n<document name=\"notes.txt\">\na \"note\"\n\n</document>",
                common::PNG.len()
            )),
            "{dialect}"
        );
        assert_eq!(
            param("ToolResult", "content"),
            json!(format!(
                "the screen:\n[image: image/png, {} bytes]",
                common::PNG.len()
            )),
            "{dialect}"
        );
    }
}

/// A regression test: the detail objects were always `null` and a reply without usage read
/// as zeros. pagent writes the OpenAI SDK's `model_dump()` of the usage it got, `null` when
/// it got none.
#[test]
fn usage_is_written_as_pagent_writes_it() {
    let r = usage_scenario();
    let details = json!({
        "completion_tokens": 3, "prompt_tokens": 10, "total_tokens": 13,
        "completion_tokens_details": {
            "accepted_prediction_tokens": null, "audio_tokens": null, "reasoning_tokens": 2,
            "rejected_prediction_tokens": null, "text_tokens": null,
        },
        "prompt_tokens_details": {
            "audio_tokens": null, "cache_write_tokens": null, "cached_tokens": 4,
            "image_tokens": null, "text_tokens": null,
        },
    });
    for (dialect, stream, summary) in [("v1", &r.v1, "StepEnd"), ("v4", &r.v4, "TurnResult")] {
        let usages: Vec<Value> = stream
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["method"] == summary)
            .map(|v| v["params"]["usage"].clone())
            .collect();
        assert_eq!(usages, [details.clone(), Value::Null], "{dialect}");
    }
    // v1's `RunEnd` repeats the last `StepEnd`.
    let run_end: Value = serde_json::from_str(r.v1.lines().last().unwrap()).unwrap();
    assert_eq!(run_end["params"]["usage"], Value::Null);
}

/// A regression test: an abort after a continuing `TurnEnd` ended the v4 stream with
/// `RunEnd{stop_reason:"continuing"}`.
#[test]
fn abort_at_every_checkpoint_is_framed_as_pagent_cancels() {
    let all = all_scenarios();
    let get = |name: &str| all.iter().find(|r| r.name == name).unwrap();
    let seq = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_owned).collect() };
    // v1 knows no cancel: a run aborted after tool calls reads as a max_turns ending.
    let v1_empty = seq("RunBegin TurnBegin StepEnd TurnEnd RunEnd");
    let v1_tool = seq("RunBegin TurnBegin StepEnd ToolCallBegin ToolResult TurnEnd RunEnd");
    // pagent writes no `TurnResult` for a reply its cancel cut.
    let v4_empty = seq("RunBegin TurnBegin TurnEnd RunEnd");
    let v4_next = seq(
        "RunBegin TurnBegin TurnResult ToolCallBegin ToolResult TurnEnd TurnBegin TurnEnd RunEnd",
    );
    for (name, v1, v4) in [
        ("abort_after_run_begin", &v1_empty, &v4_empty),
        ("abort_after_turn_begin", &v1_empty, &v4_empty),
        (
            "abort_mid_stream",
            &seq("RunBegin TurnBegin TextDelta StepEnd TurnEnd RunEnd"),
            &seq("RunBegin TurnBegin TextDelta TurnEnd RunEnd"),
        ),
        (
            "abort_after_tool_begin",
            &v1_tool,
            &seq("RunBegin TurnBegin TurnResult ToolCallBegin ToolResult TurnEnd RunEnd"),
        ),
        (
            "abort_in_tool",
            &seq(
                "RunBegin TurnBegin StepEnd ToolCallBegin ToolResult ToolCallBegin ToolResult TurnEnd RunEnd",
            ),
            &seq(
                "RunBegin TurnBegin TurnResult ToolCallBegin ToolResult ToolCallBegin ToolResult TurnEnd RunEnd",
            ),
        ),
        ("abort_after_continuing_turn_end", &v1_tool, &v4_next),
        (
            "abort_from_thread_at_continuing_turn_end",
            &v1_tool,
            &v4_next,
        ),
    ] {
        let r = get(name);
        assert_eq!(&methods(&r.v1), v1, "v1 {name}");
        assert_eq!(&methods(&r.v4), v4, "v4 {name}");
        // Our own run ended `Cancelled`; between turns, right after the continuing `TurnEnd`
        // (the abort landed while that `TurnEnd` was dispatched, from a listener or from
        // another thread), with no turn started after it.
        let tail: Vec<String> = r.events[r.events.len() - 2..]
            .iter()
            .map(|(e, _)| match e {
                AgentEvent::TurnEnd { stop_reason, .. }
                | AgentEvent::AgentEnd { stop_reason, .. } => {
                    format!("{} {stop_reason:?}", e.name())
                }
                e => e.name().to_owned(),
            })
            .collect();
        let between_turns = name.ends_with("continuing_turn_end");
        let before_end = if between_turns {
            "TurnEnd Continuing"
        } else {
            "TurnEnd Cancelled"
        };
        assert_eq!(tail, [before_end, "AgentEnd Cancelled"], "{name}");
        // Every v4 abort ends with a stopped `cancelled` turn and a `cancelled` run.
        let lines: Vec<Value> =
            r.v4.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        let [.., turn_end, run_end] = &lines[..] else {
            panic!("{name}: {}", r.v4)
        };
        let k = turn_end["params"]["turn"].clone();
        assert_eq!(
            turn_end["params"],
            json!({"turn": k, "stopped": true, "stop_reason": "cancelled"}),
            "{name}"
        );
        assert_eq!(
            run_end["params"],
            json!({"turn": k, "stop_reason": "cancelled"}),
            "{name}"
        );
    }
}

/// A regression test: a provider failure mid-reply read as a finished answer in v1 and as
/// `cancelled` in v4. pagent raises the provider's exception out of its event iterator, so its
/// lines break off: no summary of the failed reply, no `TurnEnd`, no `RunEnd`.
#[test]
fn a_failed_run_breaks_off_as_pagent_does() {
    let all = common::record_all();
    let get = |name: &str| all.iter().find(|r| r.name == name).unwrap();
    let seq = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_owned).collect() };
    for (name, expected) in [
        ("provider_error", seq("RunBegin TurnBegin TextDelta")),
        ("fail_at_once", seq("RunBegin TurnBegin")),
    ] {
        let r = get(name);
        assert!(failed(r), "{name}");
        assert_eq!(methods(&r.v1), expected, "v1 {name}");
        assert_eq!(methods(&r.v4), expected, "v4 {name}");
    }
    let failures: Vec<&str> = all.iter().filter(|r| failed(r)).map(|r| r.name).collect();
    // `steer_at_tool_boundary` steers twice, and its scripted provider has no reply left for
    // the second steering message's run.
    assert_eq!(
        failures,
        ["provider_error", "fail_at_once", "steer_at_tool_boundary"]
    );
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
        // pagent v4 runs max_turns=2 as two tool turns and a final answer turn whose calls
        // are not run (our default); pagent v1 as two tool turns (`FinalTurn::Off`).
        let ours = if name == "maxturns" {
            "maxturns_final"
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
    for r in all_scenarios() {
        for (dialect, stream) in [("v1", &r.v1), ("v4", &r.v4)] {
            let m = methods(stream);
            let count = |x: &str| m.iter().filter(|y| *y == x).count();
            // A failed run leaves its last turn and the run open (see
            // `a_failed_run_breaks_off_as_pagent_does`).
            let open = usize::from(failed(&r));
            assert_eq!(
                count("TurnBegin"),
                count("TurnEnd") + open,
                "{dialect} {}",
                r.name
            );
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
                m.last().map(String::as_str) == Some("RunEnd"),
                !failed(&r),
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
    // Per dialect: the streams of finished runs, and those of failed runs; and the v4
    // stream of a run with `FinalTurn::Off`.
    let mut files: [[Vec<PathBuf>; 2]; 2] = Default::default();
    let mut v4_off = None;
    for r in all_scenarios() {
        for (i, (dialect, stream)) in [("v1", &r.v1), ("v4", &r.v4)].into_iter().enumerate() {
            let path = dir.join(format!("{dialect}_{}.jsonl", r.name));
            std::fs::write(&path, stream).unwrap();
            if dialect == "v4" && r.name == "maxturns" {
                v4_off = Some(path);
            } else {
                files[i][usize::from(failed(&r))].push(path);
            }
        }
    }
    let check = |dialect: &str, files: &[PathBuf]| {
        let out = Command::new(&python)
            .arg(Path::new(DATA).join("check_wire.py"))
            .args([
                "--dialect",
                dialect,
                "--strict-fields",
                "--strict-turns",
                "--quiet",
            ])
            .args(files)
            .output()
            .expect("runs the checker");
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), format!("{report}{stderr}"))
    };
    for (i, dialect) in ["v1", "v4"].into_iter().enumerate() {
        let [finished, broken] = &files[i];
        let (ok, report) = check(dialect, finished);
        assert!(ok, "check_wire.py --dialect {dialect} failed:\n{report}");
        assert!(report.trim_end().ends_with(" 0 failed"), "{report}");
        // A failed run breaks off as pagent's own does: every line decodes, and the only
        // complaint is the missing `RunEnd` at the end of each stream.
        assert!(!broken.is_empty());
        let (ok, report) = check(dialect, broken);
        assert!(!ok, "{report}");
        let problems: Vec<&str> = report.lines().filter(|l| l.contains(": [")).collect();
        assert_eq!(problems.len(), broken.len(), "{report}");
        assert!(
            problems.iter().all(|l| l.contains("[R3 last-RunEnd]")),
            "{report}"
        );
        assert!(
            report
                .trim_end()
                .ends_with(&format!(" {} failed", broken.len())),
            "{report}"
        );
    }
    // pagent v4 never runs tools on a turn that stops, and has no `FinalTurn::Off`: the
    // turn at the limit keeps its tool pairs (tools that ran are always written) and ends
    // `max_turns`, which the grammar flags, and nothing else.
    let (ok, report) = check("v4", &[v4_off.expect("the maxturns scenario")]);
    assert!(!ok, "{report}");
    let problems: Vec<&str> = report.lines().filter(|l| l.contains(": [")).collect();
    assert_eq!(problems.len(), 1, "{report}");
    assert!(
        problems[0].contains("[C2 tool-plan] turn 1 stops (stopped=true) after executing tools"),
        "{report}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A regression test: at `max_turns` the v4 stream left out the tool pairs of the last turn,
/// whose tools ran. Tools that ran are always written; the calls of a final answer turn,
/// which do not run, are written as pagent writes them: v4 in the `TurnResult` only (its
/// synthesis turn), v1 with the results that say they did not run (v1 has no final turn).
#[test]
fn max_turns_tools_that_ran_are_in_the_dialect_streams() {
    let all = common::record_all();
    let get = |name: &str| all.iter().find(|r| r.name == name).unwrap();
    let seq = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_owned).collect() };
    let tool_turn = "TurnBegin StepEnd ToolCallBegin ToolResult TurnEnd";
    for (name, v1, v4) in [
        (
            "maxturns",
            format!("RunBegin {tool_turn} {tool_turn} RunEnd"),
            "RunBegin TurnBegin TurnResult ToolCallBegin ToolResult TurnEnd \
             TurnBegin TurnResult ToolCallBegin ToolResult TurnEnd RunEnd"
                .to_owned(),
        ),
        (
            "maxturns_final",
            format!("RunBegin {tool_turn} {tool_turn} {tool_turn} RunEnd"),
            "RunBegin TurnBegin TurnResult ToolCallBegin ToolResult TurnEnd \
             TurnBegin TurnResult ToolCallBegin ToolResult TurnEnd \
             TurnBegin TurnResult TurnEnd RunEnd"
                .to_owned(),
        ),
    ] {
        let r = get(name);
        assert_eq!(methods(&r.v1), seq(&v1), "v1 {name}");
        assert_eq!(methods(&r.v4), seq(&v4), "v4 {name}");
    }
    // The whole lines of the final answer turn (`FinalTurn::ToolsNotRun`), and the ends.
    let r = get("maxturns_final");
    let tail = |s: &str, n: usize| -> Vec<String> {
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len() - n..]
            .iter()
            .map(|l| l.to_string())
            .collect()
    };
    assert_eq!(
        tail(&r.v4, 5),
        [
            r#"{"jsonrpc": "2.0", "method": "TurnEnd", "params": {"turn": 1, "stopped": false, "stop_reason": "continuing"}}"#,
            r#"{"jsonrpc": "2.0", "method": "TurnBegin", "params": {"turn": 2}}"#,
            r#"{"jsonrpc": "2.0", "method": "TurnResult", "params": {"content": "", "tool_calls": [{"type": "function", "id": "call_2", "name": "echo", "arguments": "{\"text\":\"again 2\"}"}], "reasoning_content": "", "usage": {"completion_tokens": 4, "prompt_tokens": 8, "total_tokens": 12, "completion_tokens_details": null, "prompt_tokens_details": null}}}"#,
            r#"{"jsonrpc": "2.0", "method": "TurnEnd", "params": {"turn": 2, "stopped": true, "stop_reason": "max_turns"}}"#,
            r#"{"jsonrpc": "2.0", "method": "RunEnd", "params": {"turn": 2, "stop_reason": "max_turns"}}"#,
        ]
    );
    assert_eq!(
        tail(&r.v1, 6),
        [
            r#"{"jsonrpc": "2.0", "method": "TurnBegin", "params": {"turn": 2}}"#,
            r#"{"jsonrpc": "2.0", "method": "StepEnd", "params": {"content": "", "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"again 2\"}"}}], "reasoning_content": "", "usage": {"completion_tokens": 4, "prompt_tokens": 8, "total_tokens": 12, "completion_tokens_details": null, "prompt_tokens_details": null}}}"#,
            r#"{"jsonrpc": "2.0", "method": "ToolCallBegin", "params": {"tool_call_id": "call_2", "name": "echo", "arguments": "{\"text\":\"again 2\"}"}}"#,
            r#"{"jsonrpc": "2.0", "method": "ToolResult", "params": {"tool_call_id": "call_2", "name": "echo", "content": "not run: the run reached its max_turns limit, and this was its final answer turn", "ok": false}}"#,
            r#"{"jsonrpc": "2.0", "method": "TurnEnd", "params": {"turn": 2, "stopped": false}}"#,
            r#"{"jsonrpc": "2.0", "method": "RunEnd", "params": {"content": "", "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"again 2\"}"}}], "reasoning_content": "", "usage": {"completion_tokens": 4, "prompt_tokens": 8, "total_tokens": 12, "completion_tokens_details": null, "prompt_tokens_details": null}}}"#,
        ]
    );
    // `FinalTurn::ToolsWithheld`: the scripted model calls a tool all the same; the calls
    // are written as for `ToolsNotRun`, and the request had no tools.
    let r = get("maxturns_withheld");
    assert_eq!(methods(&r.v4), methods(&get("maxturns_final").v4));
    assert_eq!(methods(&r.v1), methods(&get("maxturns_final").v1));
}

/// pagent's scripted OpenAI-compatible server (`tests/data/pagent-wire/mock_openai_server.py`,
/// Python's standard library only), the one pagent's captures were made against. Killed (by
/// its own handle) when dropped.
struct MockServer {
    child: std::process::Child,
    base_url: String,
}

impl MockServer {
    /// Starts it, or `None` when there is no `python3` to run it.
    fn start() -> Option<MockServer> {
        use std::io::BufRead;
        let spawned = Command::new("python3")
            .arg(Path::new(DATA).join("mock_openai_server.py"))
            .args(["--host", "127.0.0.1", "--port", "0"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn();
        let mut child = match spawned {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            other => other.expect("python3 starts"),
        };
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut server = MockServer {
            child,
            base_url: String::new(),
        };
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the mock server says where it listens");
        let addr = line
            .trim()
            .strip_prefix("LISTENING ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        server.base_url = format!("http://{addr}/v1");
        Some(server)
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `make_captures.py` does from pagent's `event_handler` when it sees an event.
#[derive(Clone, Copy)]
enum Inbound {
    Cancel,
    Steer,
}

/// The scenarios of `make_captures.py`: capture name, mock model, `max_turns`, and for the
/// v4-only ones the inbound action and the event (ours for pagent's) that triggers it.
type Scenario = (
    &'static str,
    &'static str,
    u32,
    Option<(Inbound, fn(&AgentEvent) -> bool)>,
);

fn capture_scenarios() -> (Vec<Scenario>, Vec<Scenario>) {
    let both = vec![
        ("text", "text", 24, None),
        ("tool", "tool", 24, None),
        ("maxturns", "maxturns", 2, None),
        ("reasoning", "reasoning", 24, None),
        ("tool2", "tool2", 24, None),
        ("tool_error", "tool-unknown", 24, None),
    ];
    let run_begin: fn(&AgentEvent) -> bool = |e| matches!(e, AgentEvent::AgentStart);
    let turn_begin: fn(&AgentEvent) -> bool = |e| matches!(e, AgentEvent::TurnStart { .. });
    let tool_begin: fn(&AgentEvent) -> bool = |e| matches!(e, AgentEvent::ToolStart { .. });
    let turn_end: fn(&AgentEvent) -> bool = |e| matches!(e, AgentEvent::TurnEnd { .. });
    let v4_inbound = vec![
        (
            "cancel_after_runbegin",
            "tool",
            24,
            Some((Inbound::Cancel, run_begin)),
        ),
        (
            "cancel_after_turnbegin",
            "tool",
            24,
            Some((Inbound::Cancel, turn_begin)),
        ),
        (
            "cancel_after_toolcallbegin",
            "tool",
            24,
            Some((Inbound::Cancel, tool_begin)),
        ),
        (
            "cancel_after_turnend",
            "tool",
            24,
            Some((Inbound::Cancel, turn_end)),
        ),
        (
            "steer_after_turnend",
            "tool-users",
            24,
            Some((Inbound::Steer, turn_end)),
        ),
    ];
    (both, v4_inbound)
}

/// Our lines for one scenario against the mock, configured as pagent is: the same system
/// prompt, tool, prompt and `max_turns`; v1 with pagent v1's `max_turns` (no final turn) and
/// its request (no `stream_options`, so the server sends no usage), v4 with the default
/// final turn (pagent v4's).
fn our_lines(base_url: &str, dialect: Dialect, scenario: &Scenario) -> String {
    let (_, model, max_turns, inbound) = *scenario;
    let mut provider = pagent::llm::OpenAiCompat::new(base_url);
    let mut builder = Agent::builder()
        .model(model)
        .system_prompt("You are a test agent.")
        .tool(common::echo())
        .max_turns(max_turns);
    if dialect == Dialect::PagentV1 {
        provider = provider.extra_body(json!({"stream_options": {"include_usage": false}}));
        builder = builder.final_turn(pagent::FinalTurn::Off);
    }
    let agent = builder.provider(provider).build().unwrap();
    let writer = Writer::with_dialect(Vec::new(), dialect);
    let _lines = agent.subscribe(writer.listener());
    let _inbound = inbound.map(|(action, at)| {
        let h = agent.handle();
        let fired = std::sync::atomic::AtomicBool::new(false);
        agent.subscribe(move |e| {
            if at(e) && !fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
                match action {
                    Inbound::Cancel => {
                        h.abort();
                    }
                    Inbound::Steer => h.steer("steered text").unwrap(),
                }
            }
        })
    });
    agent.prompt("Say hello.").unwrap();
    assert!(writer.error().is_none());
    writer.with_output(|b| String::from_utf8(b.clone()).unwrap())
}

/// The text of the result our run gives a call that an abort cut short.
const CANCELLED: &str = "cancelled: the run was aborted before this tool call ran";

/// pagent's capture with its irregular framing made regular, as ours is (each rule is one
/// of the differences listed in the wire docs); every other line is kept as it is.
///
/// - v4, `max_turns`: the turn before the synthesis turn has no `TurnEnd`: one is added,
///   `{"turn": k, "stopped": false, "stop_reason": "continuing"}`.
/// - v4, a cancel right after `RunBegin`: its `TurnEnd` has no `TurnBegin`: one is added.
/// - v4, a cancel right after a continuing `TurnEnd`: pagent ends the same turn a second
///   time; ours opens the next turn and ends it `cancelled` (and `RunEnd` names it).
/// - v4, a cancel while a tool runs: its `ToolCallBegin` has no `ToolResult`; ours writes
///   the result the call got (`ok: false`).
fn regular_capture(capture: &str) -> String {
    let turn_begin = |k: u64| {
        format!(r#"{{"jsonrpc": "2.0", "method": "TurnBegin", "params": {{"turn": {k}}}}}"#)
    };
    let turn_end = |k: u64, stopped: bool, reason: &str| {
        format!(
            r#"{{"jsonrpc": "2.0", "method": "TurnEnd", "params": {{"turn": {k}, "stopped": {stopped}, "stop_reason": "{reason}"}}}}"#
        )
    };
    let mut out: Vec<String> = Vec::new();
    let mut open: Option<u64> = None;
    let mut last_end: Option<(u64, String)> = None;
    let mut tool: Option<(String, String)> = None;
    let mut run_end_turn: Option<u64> = None;
    for line in capture.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let p = &v["params"];
        match v["method"].as_str().unwrap() {
            "RunBegin" => (open, last_end) = (None, None),
            "TurnBegin" => {
                if let Some(k) = open {
                    out.push(turn_end(k, false, "continuing"));
                }
                open = p["turn"].as_u64();
            }
            "ToolCallBegin" => {
                let s = |k: &str| p[k].as_str().unwrap().to_owned();
                tool = Some((s("tool_call_id"), s("name")));
            }
            "ToolResult" => tool = None,
            "TurnEnd" => {
                if let Some((id, name)) = tool.take() {
                    out.push(format!(
                        r#"{{"jsonrpc": "2.0", "method": "ToolResult", "params": {{"tool_call_id": "{id}", "name": "{name}", "content": "{CANCELLED}", "ok": false}}}}"#
                    ));
                }
                let k = p["turn"].as_u64().unwrap();
                let reason = p["stop_reason"].as_str().unwrap_or_default().to_owned();
                if open.is_none() && reason == "cancelled" {
                    match &last_end {
                        None => out.push(turn_begin(k)),
                        Some((j, r)) if *j == k && r == "continuing" => {
                            out.push(turn_begin(k + 1));
                            out.push(turn_end(k + 1, true, "cancelled"));
                            run_end_turn = Some(k + 1);
                            continue;
                        }
                        Some(_) => {}
                    }
                }
                open = None;
                last_end = Some((k, reason));
            }
            "RunEnd" => {
                if let Some(k) = run_end_turn.take() {
                    out.push(format!(
                        r#"{{"jsonrpc": "2.0", "method": "RunEnd", "params": {{"turn": {k}, "stop_reason": "cancelled"}}}}"#
                    ));
                    continue;
                }
            }
            _ => {}
        }
        out.push(line.to_owned());
    }
    out.iter().map(|l| format!("{l}\n")).collect()
}

/// Our v1 and v4 lines for each scenario of `make_captures.py`, run against pagent's own
/// mock server, equal the lines pagent 0.7.30 wrote for the same runs, byte for byte (after
/// `regular_capture` for pagent's irregular v4 framing). Runs wherever `python3` is (the
/// mock needs only its standard library); says so and passes without it.
#[test]
fn lines_equal_pagents_own_byte_for_byte() {
    let Some(mock) = MockServer::start() else {
        eprintln!("lines_equal_pagents_own_byte_for_byte: no python3 to run the mock server");
        return;
    };
    let (both, v4_only) = capture_scenarios();
    let read = |name: &str| {
        std::fs::read_to_string(
            Path::new(DATA)
                .join("captures")
                .join(format!("{name}.jsonl")),
        )
        .unwrap()
    };
    let mut compared = 0;
    for (dialect, prefix, scenarios) in [
        (Dialect::PagentV1, "v1", &both),
        (Dialect::PagentV4, "v4", &both),
        (Dialect::PagentV4, "v4", &v4_only),
    ] {
        for scenario in scenarios.iter() {
            let name = format!("{prefix}_{}", scenario.0);
            let ours = our_lines(&mock.base_url, dialect, scenario);
            let theirs = regular_capture(&read(&name));
            assert_eq!(ours, theirs, "{name}:\nours:\n{ours}\npagent's:\n{theirs}");
            compared += 1;
        }
    }
    assert_eq!(compared, 17, "every capture of make_captures.py");
}

/// The committed captures are what pagent 0.7.30 writes today: `make_captures.py` runs
/// pagent itself against the mock server and writes them again. Runs only on request
/// (`--ignored`, as `.ci/run` does), with `PAGENT_WIRE_PYTHON` naming a python that has
/// `pagent==0.7.30` installed.
#[test]
#[ignore = "needs pagent 0.7.30: PAGENT_WIRE_PYTHON=<python> cargo test --test pagent_dialects -- --ignored"]
fn captures_are_what_pagent_writes() {
    let python = std::env::var_os("PAGENT_WIRE_PYTHON")
        .expect("set PAGENT_WIRE_PYTHON to a python with pagent==0.7.30 installed");
    let dir = std::env::temp_dir().join(format!("pagent-captures-{}", std::process::id()));
    let out = Command::new(&python)
        .arg(Path::new(DATA).join("make_captures.py"))
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("runs make_captures.py");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let committed = Path::new(DATA).join("captures");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names.len(), 17);
    for name in names {
        let fresh = std::fs::read_to_string(dir.join(&name)).unwrap();
        let kept = std::fs::read_to_string(committed.join(&name)).unwrap();
        assert_eq!(fresh, kept, "{name:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The per-event encoder writes, event by event, exactly what a `Writer` of the same dialect
/// wrote for every scenario.
#[test]
fn dialect_encoder_writes_what_the_writer_writes() {
    for r in all_scenarios() {
        for (dialect, written) in [
            (Dialect::Native, &r.native),
            (Dialect::PagentV1, &r.v1),
            (Dialect::PagentV4, &r.v4),
        ] {
            let mut encoder = pagent::wire::DialectEncoder::new(dialect);
            assert_eq!(encoder.dialect(), dialect);
            let lines: Vec<String> = r
                .events
                .iter()
                .flat_map(|(e, _)| encoder.encode_event_line(e))
                .collect();
            let expected: Vec<&str> = written.lines().collect();
            assert_eq!(lines, expected, "{dialect:?} {}", r.name);
        }
    }
}
