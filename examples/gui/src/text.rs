//! What the app writes for each part of a state: plain functions of the snapshot (and of the
//! clock, for what counts down or up), so the tests compare the window with the same text.

use std::time::{Duration, SystemTime};

use pagent::llm::StreamEvent;
use pagent::{FinishedToolCall, PartialBlock, PendingToolCall, RunStopReason, State};

/// The run's status: idle, what a run is doing, or how the last one ended.
pub fn status(state: &State) -> String {
    if state.is_streaming_reply {
        format!("Status: streaming the reply (turn {})", state.turn)
    } else if !state.pending_tool_calls.is_empty() {
        format!("Status: running tools (turn {})", state.turn)
    } else if state.is_streaming {
        format!("Status: running (turn {})", state.turn)
    } else {
        match state.stop_reason {
            None => "Status: idle".to_owned(),
            Some(RunStopReason::NoToolCalls) => "Status: answered".to_owned(),
            Some(reason) => format!("Status: stopped ({reason})"),
        }
    }
}

/// Tokens of the current (or last) run and of the agent's whole life.
pub fn usage(state: &State) -> String {
    format!(
        "Tokens: {} in, {} out this run; {} in, {} out in all",
        state.run_usage.input, state.run_usage.output, state.usage.input, state.usage.output
    )
}

/// The retry being waited out, with the seconds left at `now`.
pub fn retry(retry: &StreamEvent, now: SystemTime) -> String {
    let StreamEvent::Retry { attempt, error, .. } = retry else {
        return String::new();
    };
    match retry.retry_ends_at() {
        Some(ends) => match ends.duration_since(now) {
            Ok(left) => format!("Retry {attempt} in {}: {error}", seconds(left)),
            Err(_) => format!("Retry {attempt}: sent again, waiting for the answer ({error})"),
        },
        None => format!("Retry {attempt}: {error}"),
    }
}

/// A tool call that runs (or waits for approval): its name, its arguments, for how long it
/// has run at `now`, its latest progress.
pub fn pending(call: &PendingToolCall, now: SystemTime) -> String {
    let mut line = format!("Running {} {}", call.call.name, call.call.arguments);
    if let Some(started) = call.started_at {
        let running = now.duration_since(started).unwrap_or_default();
        line.push_str(&format!(" for {}", seconds(running)));
    }
    if let Some(progress) = &call.progress {
        line.push_str(&format!(": {}", progress.to_text()));
    }
    line
}

/// A tool call of this turn that ended: its call, its result, how long it took.
pub fn finished(done: &FinishedToolCall) -> String {
    let outcome = if done.result.is_error {
        "failed"
    } else {
        "done"
    };
    let took = done
        .duration
        .map(|d| format!(" in {}", seconds(d)))
        .unwrap_or_default();
    format!(
        "{} {} {outcome}{took}: {}",
        done.call.name,
        done.call.arguments,
        done.result.text()
    )
}

/// One block of the streaming reply as the app shows it; a tool call shows its arguments as
/// far as they streamed.
pub fn block(block: &PartialBlock) -> String {
    match block {
        PartialBlock::Text(text) => text.to_string(),
        PartialBlock::Thinking { text, .. } => format!("Thinking: {text}"),
        PartialBlock::ToolCall {
            name, arguments, ..
        } => format!("Calling {name} {arguments}"),
        _ => String::new(),
    }
}

/// The error of the last run, with its kind.
pub fn error(state: &State) -> Option<String> {
    let message = state.error_message.as_deref()?;
    Some(match state.error_kind {
        Some(kind) => format!("Error ({kind}): {message}"),
        None => format!("Error: {message}"),
    })
}

/// `d` in seconds with one decimal ("1.4 s").
fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_counts_down_to_its_end() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let r = StreamEvent::Retry {
            attempt: 2,
            delay_ms: 3_000,
            error: "http status 429".into(),
            at: Some(at),
        };
        assert_eq!(
            retry(&r, at + Duration::from_millis(1_600)),
            "Retry 2 in 1.4 s: http status 429"
        );
        assert_eq!(
            retry(&r, at + Duration::from_secs(4)),
            "Retry 2: sent again, waiting for the answer (http status 429)"
        );
    }
}
