//! The cost of checking a structured answer (`OutputSchema::check`: parse the text, check the
//! value against the JSON Schema, deserialize it into the type), against parsing the same
//! text with serde_json alone (what a user parsing the reply by hand pays).
//!
//! `cargo bench --bench output`
//!
//! Groups (each for a small answer, a `Verdict` of 46 bytes, and a large one, a `Report` of
//! 200 findings, 19 KB):
//! - `check/{verdict,report}`: `OutputSchema::check`, as the run does once per answer.
//! - `parse/{verdict,report}`: `serde_json::from_str::<Value>` of the same text, the floor.
//! - `schema/report`: building the `OutputSchema` of the type (its strict and Anthropic
//!   forms), done once per `prompt_as`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use pagent::OutputSchema;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Verdict {
    /// From 0 to 10.
    #[schemars(range(max = 10))]
    score: u8,
    reasons: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Report {
    #[schemars(length(max = 80))]
    title: String,
    mood: Mood,
    note: Option<String>,
    findings: Vec<Finding>,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
enum Mood {
    Good,
    Bad,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Finding {
    line: u32,
    severity: u8,
    text: String,
    tags: Vec<String>,
}

fn report_text() -> String {
    let findings: Vec<Value> = (0..200)
        .map(|i| {
            json!({"line": i * 7, "severity": i % 5, "text": format!("finding number {i}, a line of text"),
                   "tags": ["style", "naming"]})
        })
        .collect();
    json!({"title": "Review", "mood": "Good", "note": null, "findings": findings}).to_string()
}

fn bench(c: &mut Criterion) {
    let verdict = OutputSchema::of::<Verdict>();
    let verdict_text = json!({"score": 7, "reasons": ["short", "clear", "kind"]}).to_string();
    let report = OutputSchema::of::<Report>();
    let report_text = report_text();
    assert!(verdict.check(&verdict_text).is_ok());
    assert!(report.check(&report_text).is_ok());
    println!(
        "answer sizes: verdict {} bytes, report {} bytes",
        verdict_text.len(),
        report_text.len()
    );
    c.bench_function("check/verdict", |b| {
        b.iter(|| black_box(verdict.check(black_box(&verdict_text))))
    });
    c.bench_function("parse/verdict", |b| {
        b.iter(|| black_box(serde_json::from_str::<Value>(black_box(&verdict_text))))
    });
    c.bench_function("check/report", |b| {
        b.iter(|| black_box(report.check(black_box(&report_text))))
    });
    c.bench_function("parse/report", |b| {
        b.iter(|| black_box(serde_json::from_str::<Value>(black_box(&report_text))))
    });
    c.bench_function("schema/report", |b| {
        b.iter(|| black_box(OutputSchema::of::<Report>()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
