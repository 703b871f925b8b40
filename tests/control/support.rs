//! Helpers for the control tests: a recording listener that renders whole event sequences,
//! a tool built from a closure, and bounded waits.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pagent::llm::StreamEvent;
use pagent::{Agent, AgentEvent, Message, Tool, ToolContext, ToolError, ToolOutput};
use serde_json::Value;

use crate::replay::MirrorCheck;

/// The text of the results the agent synthesizes for calls that never ran.
pub const SKIPPED: &str = "skipped: the user sent a new message before this tool call ran";
pub const CANCELLED: &str = "cancelled: the run was aborted before this tool call ran";

/// How long any wait of a test may take before the test fails instead of hanging.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Captures every event a run emits. Every scenario is also a
/// wire replay test: when the last clone is dropped, its `MirrorCheck` replays the run's
/// wire lines and compares the mirror with each published snapshot.
#[derive(Clone)]
pub struct Recorder {
    events: Arc<Mutex<Vec<AgentEvent>>>,
    _mirror: Arc<MirrorCheck>,
}

impl Recorder {
    /// A recorder subscribed to `agent` (register it first so it sees events before any
    /// listener that reacts to them).
    pub fn attach(agent: &Agent) -> Recorder {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        agent
            .subscribe(move |e: &AgentEvent| {
                sink.lock().unwrap().push(e.clone());
            })
            .keep();
        Recorder {
            events,
            _mirror: Arc::new(MirrorCheck::attach(agent)),
        }
    }

    pub fn events(&self) -> Vec<AgentEvent> {
        self.events.lock().unwrap().clone()
    }

    /// The whole sequence, one line per event (see [`render`]).
    pub fn lines(&self) -> Vec<String> {
        render(&self.events())
    }
}

/// One line per event. A run of `MessageUpdate`s becomes one line holding the concatenation
/// of its deltas: text as is, `[id:name]` for a tool-call start followed by its argument
/// fragments, `~thinking~` for reasoning.
pub fn render(events: &[AgentEvent]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut deltas: Option<String> = None;
    for e in events {
        if let AgentEvent::MessageUpdate { delta, .. } = e {
            let acc = deltas.get_or_insert_with(String::new);
            match delta {
                StreamEvent::TextDelta { text } => acc.push_str(text),
                StreamEvent::ThinkingDelta { text } => write!(acc, "~{text}~").unwrap(),
                StreamEvent::ToolCallStart { id, name } => write!(acc, "[{id}:{name}]").unwrap(),
                StreamEvent::ToolCallDelta { arguments, .. } => acc.push_str(arguments),
                _ => {}
            }
            continue;
        }
        if let Some(acc) = deltas.take() {
            lines.push(format!("MessageUpdate*({acc})"));
        }
        lines.push(render_one(e));
    }
    if let Some(acc) = deltas.take() {
        lines.push(format!("MessageUpdate*({acc})"));
    }
    lines
}

fn render_one(e: &AgentEvent) -> String {
    match e {
        AgentEvent::AgentStart => "AgentStart".into(),
        AgentEvent::TurnStart { turn } => format!("TurnStart({turn})"),
        AgentEvent::MessageStart { message } => format!("MessageStart({})", message.role()),
        AgentEvent::MessageUpdate { .. } => "MessageUpdate".into(),
        AgentEvent::MessageEnd { message } => format!("MessageEnd({})", describe(message)),
        AgentEvent::ToolStart { call, .. } => format!("ToolStart({})", call.id),
        AgentEvent::ToolExecute {
            call_id, rewritten, ..
        } => {
            let rewritten = if *rewritten { " rewritten" } else { "" };
            format!("ToolExecute({call_id}{rewritten})")
        }
        AgentEvent::ToolUpdate {
            call_id, partial, ..
        } => format!("ToolUpdate({call_id} {:?})", partial.to_text()),
        AgentEvent::ToolEnd { result, .. } => {
            let error = if result.is_error { " error" } else { "" };
            format!(
                "ToolEnd({}{error} {:?})",
                result.tool_call_id,
                result.text()
            )
        }
        AgentEvent::TurnEnd {
            turn, stop_reason, ..
        } => format!("TurnEnd({turn} {stop_reason})"),
        AgentEvent::AgentEnd { stop_reason, .. } => format!("AgentEnd({stop_reason})"),
        AgentEvent::MessagesReplaced { messages } => {
            let texts: Vec<String> = messages.iter().map(|m| format!("{:?}", m.text())).collect();
            format!("MessagesReplaced([{}])", texts.join(" "))
        }
        AgentEvent::ElicitationStart {
            tool_call_id,
            request,
            ..
        } => format!("ElicitationStart({tool_call_id} {:?})", request.message),
        AgentEvent::ElicitationEnd {
            tool_call_id,
            answer,
            ..
        } => match answer {
            pagent::ElicitationAnswer::Accept(content) => {
                format!("ElicitationEnd({tool_call_id} accept {content})")
            }
            other => format!("ElicitationEnd({tool_call_id} {other:?})"),
        },
        other => other.name().into(),
    }
}

/// `user "hi"`, `assistant tool_use "text" [call_1 call_2]`, `tool_result call_1`.
pub fn describe(m: &Message) -> String {
    match m {
        Message::User(u) => format!("user {:?}", u.text()),
        Message::Assistant(a) => {
            let stop = serde_json::to_value(a.stop_reason).unwrap();
            let mut s = format!("assistant {} {:?}", stop.as_str().unwrap(), a.text());
            let ids: Vec<_> = a.tool_calls().map(|c| c.id.as_str()).collect();
            if !ids.is_empty() {
                write!(s, " [{}]", ids.join(" ")).unwrap();
            }
            s
        }
        Message::ToolResult(r) => format!("tool_result {}", r.tool_call_id),
        other => other.role().into(),
    }
}

/// Lines from string literals, for readable expected sequences.
pub fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| (*s).to_owned()).collect()
}

/// The start of a run prompted with `text`: up to its `MessageEnd`.
pub fn opening(text: &str) -> Vec<String> {
    let mut v = lines(&["AgentStart", "TurnStart(1)"]);
    v.extend(user(text));
    v
}

/// A user message appended whole.
pub fn user(text: &str) -> Vec<String> {
    vec![
        "MessageStart(user)".into(),
        format!("MessageEnd(user {text:?})"),
    ]
}

/// A streamed text reply that ends with `Stop`.
pub fn text_reply(text: &str) -> Vec<String> {
    vec![
        "MessageStart(assistant)".into(),
        format!("MessageUpdate*({text})"),
        format!("MessageEnd(assistant stop {text:?})"),
    ]
}

/// The result messages of these calls, in this order.
pub fn results(ids: &[&str]) -> Vec<String> {
    ids.iter()
        .flat_map(|id| {
            [
                "MessageStart(tool_result)".to_owned(),
                format!("MessageEnd(tool_result {id})"),
            ]
        })
        .collect()
}

type ToolFn = dyn Fn(Value, &ToolContext) -> Result<ToolOutput, ToolError> + Send + Sync;

/// A tool from a closure that gets the raw JSON arguments.
pub struct FnTool {
    name: String,
    sequential: bool,
    run: Box<ToolFn>,
}

pub fn fn_tool(
    name: &str,
    run: impl Fn(Value, &ToolContext) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
) -> FnTool {
    FnTool {
        name: name.into(),
        sequential: false,
        run: Box::new(run),
    }
}

/// `echo`: returns its `x` argument as text.
pub fn echo() -> FnTool {
    fn_tool("echo", |args, _| {
        Ok(ToolOutput::text(args["x"].to_string()))
    })
}

impl FnTool {
    pub fn sequential(mut self) -> FnTool {
        self.sequential = true;
        self
    }
}

impl Tool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "a test tool"
    }
    fn parameters(&self) -> Value {
        serde_json::json!({"type": "object"})
    }
    fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        (self.run)(args, ctx)
    }
    fn sequential(&self) -> bool {
        self.sequential
    }
}

/// Runs `f` on its own thread and fails the test, instead of hanging it, when `f` takes
/// longer than [`PATIENCE`] (a deadlock, a lost wake-up).
pub fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(PATIENCE)
        .expect("the run neither ended nor panicked in time: a hang or a deadlock")
}
