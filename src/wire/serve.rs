//! `serve`: an agent driven over line-delimited JSON-RPC 2.0 (stdin/stdout or any pipe).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::codec::{
    MAX_LINE_LEN, Malformed, check_jsonrpc, error_to, parse_object, request_to, result_to,
    write_event,
};
use super::lines::{Line, LineSink, read_line};
use crate::agent::Queue;
use crate::hooks::{ToolCallRequest, ToolDecision};
use crate::message::{Message, ToolCall};
use crate::state::State;
use crate::{Agent, AgentBuilder, Error, ErrorInfo, List, RunResult};

/// The protocol version `initialize` reports.
pub const PROTOCOL_VERSION: &str = "pagent-wire/1";

/// The methods a client may call, as `initialize` lists them.
const METHODS: [&str; 11] = [
    "initialize",
    "prompt",
    "steer",
    "follow_up",
    "abort",
    "snapshot",
    "reset",
    "replace_messages",
    "clear_steering_queue",
    "clear_follow_up_queue",
    "clear_queues",
];

/// JSON-RPC error codes of [`serve`]: the standard ones, and one of ours.
pub mod codes {
    /// The line is not JSON (or not UTF-8).
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON is not a request: not an object, `jsonrpc` not `"2.0"`, no string `method`,
    /// a bad `id`, or a line over the length limit.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params are missing, not an object, or lack a field.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The agent failed in a way that is not a run's stop reason.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// `prompt`, `reset` or `replace_messages` while a run is active (our code, in the range
    /// JSON-RPC leaves to servers).
    pub const RUN_ACTIVE: i64 = -32000;
    /// `steer` or `follow_up` while that queue is full (see [`super::ServeOptions::max_queued`]):
    /// the message was not queued; send it again once the run has taken some.
    pub const QUEUE_FULL: i64 = -32001;
}

/// The default of [`ServeOptions::max_queued`]: messages waiting in each of the steering and
/// follow-up queues.
pub const MAX_QUEUED: usize = 64;

/// The default of [`ServeOptions::max_queued_bytes`]: text waiting in each of the steering
/// and follow-up queues, in bytes.
pub const MAX_QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// Options of [`serve`].
#[derive(Clone, Debug)]
#[must_use]
pub struct ServeOptions {
    approve_tools: bool,
    max_line_len: usize,
    max_queued: usize,
    max_queued_bytes: usize,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            approve_tools: false,
            max_line_len: MAX_LINE_LEN,
            max_queued: MAX_QUEUED,
            max_queued_bytes: MAX_QUEUED_BYTES,
        }
    }
}

impl ServeOptions {
    /// The defaults: no tool approval, lines up to [`MAX_LINE_LEN`].
    pub fn new() -> ServeOptions {
        ServeOptions::default()
    }

    /// Asks the client to approve each tool call (an `approve_tool_call` request) before it
    /// runs. Defaults to false (every call runs).
    pub fn approve_tools(mut self, ask: bool) -> ServeOptions {
        self.approve_tools = ask;
        self
    }

    /// The longest request line accepted, in bytes. Defaults to [`MAX_LINE_LEN`].
    pub fn max_line_len(mut self, bytes: usize) -> ServeOptions {
        self.max_line_len = bytes;
        self
    }

    /// The most messages each of the steering and follow-up queues holds: a `steer` (or
    /// `follow_up`) that finds its queue this full is refused with [`codes::QUEUE_FULL`], and
    /// the server goes on serving. Defaults to [`MAX_QUEUED`].
    ///
    /// The queues empty only as runs take their messages, so without a cap a client that
    /// steers faster than the model answers (or steers with no run active) grows them
    /// without bound.
    pub fn max_queued(mut self, messages: usize) -> ServeOptions {
        self.max_queued = messages;
        self
    }

    /// The most text, in bytes, each of the steering and follow-up queues holds: a message
    /// that would take its queue past it is refused with [`codes::QUEUE_FULL`] (one larger
    /// than this on its own always is). Defaults to [`MAX_QUEUED_BYTES`].
    pub fn max_queued_bytes(mut self, bytes: usize) -> ServeOptions {
        self.max_queued_bytes = bytes;
        self
    }
}

/// Where every line goes: responses, requests to the client and event notifications, each
/// written whole and flushed under one lock. After a write error nothing more is written;
/// `serve` returns the error when its input ends. (The ACP server writes through one too.)
pub(crate) struct Out(pub(crate) LineSink<Box<dyn Write + Send>>);

impl Out {
    pub(crate) fn new(output: impl Write + Send + 'static) -> Out {
        Out(LineSink::new(Box::new(output), ()))
    }

    /// Writes what `encode` appends (whole lines) and flushes.
    pub(crate) fn lines(&self, encode: impl FnOnce(&mut Vec<u8>)) {
        // The error is kept in the sink, for `serve` to return.
        let _ = self.0.write(|(), bytes| encode(bytes));
    }

    pub(crate) fn result(&self, id: &Value, result: &impl serde::Serialize) {
        self.lines(|bytes| result_to(bytes, id, result));
    }

    pub(crate) fn error(&self, id: &Value, code: i64, message: impl AsRef<str>) {
        self.lines(|bytes| error_to(bytes, id, code, message.as_ref()));
    }

    /// Answers request `id` with `answer`, its result or its error code and message. Nothing
    /// is written for a notification (no `id`) nor for `Ok(None)`, a request answered later
    /// (a prompt answers when its run ends).
    pub(crate) fn answer(&self, id: Option<Value>, answer: Result<Option<Value>, (i64, String)>) {
        match (answer, id) {
            (Ok(Some(result)), Some(id)) => self.result(&id, &result),
            (Err((code, why)), Some(id)) => self.error(&id, code, why),
            _ => {}
        }
    }
}

/// Reads `input` line by line until it ends, holding at most `max_line_len` bytes of a
/// line: a longer line is answered with an [`codes::INVALID_REQUEST`] error, and every other
/// line goes to `handle`. (The ACP server reads its input so too.)
///
/// # Errors
/// Reading the input failed.
pub(crate) fn read_lines(
    mut input: impl BufRead,
    max_line_len: usize,
    out: &Out,
    mut handle: impl FnMut(&[u8]),
) -> Result<(), Error> {
    let mut buf = Vec::new();
    loop {
        match read_line(&mut input, &mut buf, max_line_len) {
            Ok(Line::End) => return Ok(()),
            Ok(Line::TooLong(n)) => out.error(
                &Value::Null,
                codes::INVALID_REQUEST,
                format!("line of {n} bytes is over the limit of {max_line_len} bytes"),
            ),
            Ok(Line::Whole { .. }) => handle(&buf),
            Err(e) => return Err(Error::from(e)),
        }
    }
}

/// A JSON-RPC request (or notification) read off a line.
pub(crate) struct Request {
    /// `None` for a notification.
    pub(crate) id: Option<Value>,
    pub(crate) method: String,
    pub(crate) params: Option<Value>,
}

/// Reads one line as a JSON-RPC message. A request comes back; for anything else `None`
/// does: a blank line is passed over, a response to one of our requests goes to
/// `requests`, and a line that is no request is answered with its error. `null_id`: whether
/// an `id` of `null` is taken (as the id of a request) rather than refused.
pub(crate) fn request(
    line: &[u8],
    out: &Out,
    requests: &Requests,
    null_id: bool,
) -> Option<Request> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let mut message = match parse_object(line) {
        Ok(m) => m,
        Err(bad) => {
            let code = match bad {
                Malformed::NotJson(_) => codes::PARSE_ERROR,
                Malformed::NotObject => codes::INVALID_REQUEST,
            };
            out.error(&Value::Null, code, bad.message());
            return None;
        }
    };
    let id = message.get("id").cloned();
    let is_response = message.contains_key("result") || message.contains_key("error");
    if !message.contains_key("method") && id.is_some() && is_response {
        requests.answer(&message);
        return None;
    }
    let reply_id = id.clone().unwrap_or(Value::Null);
    if let Err(why) = check_jsonrpc(&message) {
        out.error(&reply_id, codes::INVALID_REQUEST, why);
        return None;
    }
    let id_ok = match id {
        None | Some(Value::Number(_) | Value::String(_)) => true,
        Some(Value::Null) => null_id,
        Some(_) => false,
    };
    if !id_ok {
        out.error(
            &Value::Null,
            codes::INVALID_REQUEST,
            "`id` must be a number or a string",
        );
        return None;
    }
    let Some(Value::String(method)) = message.remove("method") else {
        out.error(
            &reply_id,
            codes::INVALID_REQUEST,
            "`method` must be a string",
        );
        return None;
    };
    Some(Request {
        id,
        method,
        params: message.remove("params"),
    })
}

enum Answer {
    Approve,
    Reject(String),
}

/// What the client answered to one of our requests: its `result`, or its `error` object
/// (`Value::Null` for a response with neither).
pub(crate) type Response = Result<Value, Value>;

/// Requests sent to the client and waiting for its answer, by request id (the wire's
/// approvals, ACP's permission requests).
///
/// Bounded by its users: each waits for its answer before it asks again, and a client's
/// responses only remove entries (an unknown id is ignored).
#[derive(Default)]
pub(crate) struct Requests {
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Sender<Response>>>,
    closed: AtomicBool,
}

impl Requests {
    /// A new request id and the channel its answer comes on; `None` once the client is gone.
    pub(crate) fn open(&self) -> Option<(u64, crossbeam_channel::Receiver<Response>)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut pending = self.pending.lock();
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        pending.insert(id, tx);
        Some((id, rx))
    }

    /// Drops request `id` (answered, or no longer waited for).
    pub(crate) fn forget(&self, id: u64) {
        self.pending.lock().remove(&id);
    }

    /// Routes a response of the client; false when no request has this id.
    pub(crate) fn answer(&self, response: &Map<String, Value>) -> bool {
        let Some(tx) = response
            .get("id")
            .and_then(Value::as_u64)
            .and_then(|id| self.pending.lock().remove(&id))
        else {
            return false;
        };
        let answer = match (response.get("result"), response.get("error")) {
            (Some(r), _) => Ok(r.clone()),
            (None, Some(e)) => Err(e.clone()),
            (None, None) => Err(Value::Null),
        };
        let _ = tx.send(answer);
        true
    }

    /// The client is gone: every waiting request, and every later one, gets no answer.
    pub(crate) fn close(&self) {
        let mut pending = self.pending.lock();
        self.closed.store(true, Ordering::Release);
        pending.clear();
    }
}

/// The wire's reading of an answer to `approve_tool_call`.
fn approval(response: Response) -> Answer {
    match response {
        Ok(r) if r["decision"] == "approve" => Answer::Approve,
        Ok(r) if r["decision"] == "reject" => Answer::Reject(
            r["reason"]
                .as_str()
                .unwrap_or("rejected by the client")
                .to_owned(),
        ),
        Ok(r) => Answer::Reject(format!("the client's answer {r} is not a decision")),
        Err(Value::Null) => Answer::Reject("the client's answer is empty".into()),
        Err(e) => Answer::Reject(format!(
            "the client answered with an error: {}",
            e["message"].as_str().unwrap_or("no message")
        )),
    }
}

/// Serves `builder`'s agent over line-delimited JSON-RPC 2.0: requests are read from
/// `input`, responses, event notifications and approval requests are written to `output`.
///
/// Blocks the current thread until `input` ends (the client closed it); a run still active
/// then goes on to its end (its pending approvals are rejected) before `serve` returns. Runs
/// happen on a thread of their own, so `steer`, `abort` and `snapshot` are answered while a
/// `prompt` runs.
///
/// # Protocol
///
/// Every line is a JSON-RPC 2.0 message. The client sends requests (with an `id`, answered)
/// or notifications (without, never answered):
///
/// | method | params | result |
/// |---|---|---|
/// | `initialize` | none | `{"protocol_version":"pagent-wire/1","server":{"name","version"},"capabilities":{"methods":[..],"events":"native","tool_approval":bool}}` |
/// | `prompt` | `{"text":".."}` | when the run ends: `{"stop_reason":"no_tool_calls","text":"<last reply>","usage":{..},"error":null}`; for a run that failed, `"stop_reason":"error"` and `"error"` the error object of the wire (`{"kind":"rate_limited","message":".."}`, see the [wire docs](super)) |
/// | `steer` | `{"text":".."}` | `{"queued":true}`: delivered before the next model call |
/// | `follow_up` | `{"text":".."}` | `{"queued":true}`: delivered when the run would stop |
/// | `abort` | none | `{"aborted":bool}` (false when no run is active) |
/// | `snapshot` | none | the agent's state: `system_prompt`, `model`, `thinking`, `tools` (names), `messages`, `is_streaming` (a run is going on, from its `AgentStart` to its `AgentEnd`), `is_streaming_reply` (an assistant reply is streaming now, shown in `streaming_message`), `streaming_message`, `pending_tool_calls` (each `{"call","arguments","rewritten","progress"}`), `tool_results`, `error_message`, `error` (the error object of the last run's `AgentEnd`, or null), `turn`, `stop_reason`, `run_usage`, `usage`, `steering_queue`, `follow_up_queue` |
/// | `reset` | none | between runs ([`Agent::reset`]): a new conversation, the transcript and both queues emptied; `{"removed":[message..]}`, the queued messages it removed (steering first, then follow-ups) |
/// | `replace_messages` | `{"messages":[message..]}` (messages in the wire's shape) | between runs ([`Agent::replace_messages`]): the transcript replaced; `{"replaced":<n>}`, the number of messages now in it |
/// | `clear_steering_queue` | none | `{"removed":[message..]}`: the steering messages that were waiting, never delivered now ([`Agent::clear_steering_queue`]); at any time |
/// | `clear_follow_up_queue` | none | `{"removed":[message..]}`, the same for the follow-up queue |
/// | `clear_queues` | none | `{"removed":[message..]}`: both queues emptied in one change, the steering messages first |
///
/// `reset` and `replace_messages` are refused with -32000 while a run is active (from the
/// `prompt` request until its answer); each emits a `MessagesReplaced` notification (its
/// `messages` the whole new transcript) before its response, as it clears what the last run
/// left in the state. Clearing a queue emits nothing: a `snapshot` shows it.
///
/// While a run is active, each event is written as a notification line of the native
/// dialect (see the [wire docs](super)), in order; the `prompt` response comes after the
/// run's `AgentEnd`.
///
/// With [`ServeOptions::approve_tools`], the server asks before each tool call runs, with
/// a request of its own: `{"jsonrpc":"2.0","id":<n>,"method":"approve_tool_call",
/// "params":{"call":{"id","name","arguments"}}}`. The client answers with
/// `{"jsonrpc":"2.0","id":<n>,"result":{"decision":"approve"}}` or
/// `{"result":{"decision":"reject","reason":".."}}`; the model sees a rejected call as an
/// error result `blocked: <reason>`. An error response rejects too. `abort` ends the wait.
/// A `before_tool_call` hook set on `builder` is kept and asked first: a call it blocks is
/// blocked without asking the client, and the client is asked about the calls it allows or
/// rewrites, with the arguments that would run (a rewrite that the client approves runs
/// rewritten). The program's own policy thus always holds, and the client only narrows it.
///
/// Errors use the codes in [`codes`]: -32700 parse error (`id` null), -32600 invalid
/// request, -32601 unknown method, -32602 invalid params, -32603 internal error, -32000
/// for a `prompt`, `reset` or `replace_messages` while a run is active, and -32001 for a
/// `steer` or `follow_up` whose queue is full. A malformed line is answered with an error and the server reads on:
/// nothing a client sends stops it but the end of its input.
///
/// # Memory
///
/// What a client sends is bounded: a request line by [`ServeOptions::max_line_len`] (a
/// longer one is read through and refused, never held), the steering and follow-up queues
/// by [`ServeOptions::max_queued`] messages and [`ServeOptions::max_queued_bytes`] bytes
/// each (past either, the message is refused with -32001 `queue full`), one run at a time,
/// and at most one approval request waiting for an answer.
///
/// # Errors
/// [`Error::Config`] when the builder cannot build an agent; [`Error::Io`] when reading
/// `input` or writing `output` fails.
pub fn serve(
    builder: AgentBuilder,
    mut input: impl BufRead,
    output: impl Write + Send + 'static,
    options: ServeOptions,
) -> Result<(), Error> {
    let out = Arc::new(Out::new(output));
    let approvals = Arc::new(Requests::default());
    let builder = if options.approve_tools {
        let (out, approvals) = (out.clone(), approvals.clone());
        // The user's own hook decides first; the client is asked only about the calls it
        // lets run, and sees the arguments that would run.
        builder.ask_before_tool_call(move |request, call| {
            match ask_client(&out, &approvals, request, call) {
                ToolDecision::Allow => None,
                refused => Some(refused),
            }
        })
    } else {
        builder
    };
    let agent = builder.build()?;
    let _events = agent.subscribe(out.0.listener(|(), event, bytes| write_event(bytes, event)));
    let server = Server {
        agent: &agent,
        out: &out,
        approvals: &approvals,
        busy: AtomicBool::new(false),
        options: &options,
    };
    let read = std::thread::scope(|scope| {
        let read = read_lines(&mut input, options.max_line_len, &out, |line| {
            server.handle(scope, line);
        });
        approvals.close();
        read
    });
    read?;
    match out.0.error() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct Server<'a> {
    agent: &'a Agent,
    out: &'a Out,
    approvals: &'a Requests,
    busy: AtomicBool,
    options: &'a ServeOptions,
}

/// A request that cannot be served: its error code and message.
type Refusal = (i64, String);

impl<'a> Server<'a> {
    fn handle<'scope>(&'scope self, scope: &'scope std::thread::Scope<'scope, '_>, line: &[u8]) {
        // A response to one of our requests is an approval.
        let Some(Request { id, method, params }) = request(line, self.out, self.approvals, true)
        else {
            return;
        };
        let params = params.as_ref();
        let answer = match method.as_str() {
            "prompt" => self.prompt(scope, params, id.clone()),
            _ => self.call(&method, params),
        };
        self.out.answer(id, answer);
    }

    fn call(&self, method: &str, params: Option<&Value>) -> Result<Option<Value>, Refusal> {
        Ok(Some(match method {
            "initialize" => json!({
                "protocol_version": PROTOCOL_VERSION,
                "server": {"name": "pagent", "version": env!("CARGO_PKG_VERSION")},
                "capabilities": {
                    "methods": METHODS,
                    "events": "native",
                    "tool_approval": self.options.approve_tools,
                },
            }),
            "steer" => {
                let text = text_param(method, params)?;
                self.room_for(&text, Queue::Steering)?;
                // Refused only when the agent is gone, and it lives as long as `serve`.
                let _ = self.agent.steer(text);
                json!({"queued": true})
            }
            "follow_up" => {
                let text = text_param(method, params)?;
                self.room_for(&text, Queue::FollowUp)?;
                let _ = self.agent.follow_up(text);
                json!({"queued": true})
            }
            "abort" => json!({"aborted": self.agent.abort()}),
            "snapshot" => snapshot_json(&self.agent.snapshot()),
            "reset" => {
                self.idle()?;
                let removed = self.agent.reset().map_err(refusal)?;
                json!({ "removed": removed })
            }
            "replace_messages" => {
                let messages = messages_param(params)?;
                self.idle()?;
                let n = messages.len();
                self.agent.replace_messages(messages).map_err(refusal)?;
                json!({ "replaced": n })
            }
            "clear_steering_queue" => json!({"removed": self.agent.clear_steering_queue()}),
            "clear_follow_up_queue" => json!({"removed": self.agent.clear_follow_up_queue()}),
            "clear_queues" => json!({"removed": self.agent.clear_queues()}),
            other => {
                return Err((
                    codes::METHOD_NOT_FOUND,
                    format!(
                        "unknown method `{other}`; the methods are {}",
                        METHODS.join(", ")
                    ),
                ));
            }
        }))
    }

    /// Refuses a change between runs while a `prompt` of the client is in progress: from
    /// its request to its answer, even before its run claimed the agent (the prompt came
    /// first, so it is the one that runs).
    fn idle(&self) -> Result<(), Refusal> {
        if self.busy.load(Ordering::Acquire) {
            return Err((codes::RUN_ACTIVE, Error::Busy.to_string()));
        }
        Ok(())
    }

    /// Refuses `text` when the steering (or follow-up) queue has no room for it. The reading
    /// thread is the only one that queues messages from the client, and runs only take them
    /// out, so the room seen here is still there when the message goes in.
    fn room_for(&self, text: &str, which: Queue) -> Result<(), Refusal> {
        let state = self.agent.snapshot();
        let (queue, name) = match which {
            Queue::Steering => (&state.steering_queue, "steering"),
            Queue::FollowUp => (&state.follow_up_queue, "follow-up"),
        };
        let bytes: usize = queue.iter().map(|m| m.text().len()).sum();
        let (max, max_bytes) = (self.options.max_queued, self.options.max_queued_bytes);
        if queue.len() < max && bytes.saturating_add(text.len()) <= max_bytes {
            return Ok(());
        }
        Err((
            codes::QUEUE_FULL,
            format!(
                "the {name} queue is full ({} of {max} messages, {bytes} of {max_bytes} bytes \
                 waiting): this message of {} bytes was not queued",
                queue.len(),
                text.len()
            ),
        ))
    }

    /// Starts a run on a thread of the scope; it answers when the run ends.
    fn prompt<'scope>(
        &'scope self,
        scope: &'scope std::thread::Scope<'scope, '_>,
        params: Option<&Value>,
        id: Option<Value>,
    ) -> Result<Option<Value>, Refusal> {
        let text = text_param("prompt", params)?;
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err((codes::RUN_ACTIVE, Error::Busy.to_string()));
        }
        scope.spawn(move || {
            let outcome = self.agent.prompt(text);
            // Free before answering, so a client that prompts again on the answer is served.
            self.busy.store(false, Ordering::Release);
            let Some(id) = id else { return };
            let answer = |r: &RunResult, error: Option<ErrorInfo>| {
                json!({
                    "stop_reason": r.stop_reason,
                    "text": r.text(),
                    "usage": r.usage,
                    "error": error,
                })
            };
            match outcome {
                Ok(r) => self.out.result(&id, &answer(&r, None)),
                // Refused before it started (a run begun outside the server): no run to report.
                Err(e) if e.error() == &Error::Busy => {
                    self.out
                        .error(&id, codes::RUN_ACTIVE, Error::Busy.to_string());
                }
                Err(e) => self
                    .out
                    .result(&id, &answer(e.result(), Some(ErrorInfo::from(e.error())))),
            }
        });
        Ok(None)
    }
}

/// `Busy` (a run begun outside the server) as the server refuses a prompt; anything else as
/// an internal error.
fn refusal(e: Error) -> Refusal {
    match e {
        Error::Busy => (codes::RUN_ACTIVE, e.to_string()),
        e => (codes::INTERNAL_ERROR, e.to_string()),
    }
}

fn messages_param(params: Option<&Value>) -> Result<Vec<Message>, Refusal> {
    let bad = |why: String| {
        (
            codes::INVALID_PARAMS,
            format!("replace_messages needs params {{\"messages\": [message..]}}: {why}"),
        )
    };
    match params.and_then(|p| p.get("messages")) {
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, m)| Message::deserialize(m).map_err(|e| bad(format!("message {i}: {e}"))))
            .collect(),
        Some(_) => Err(bad("`messages` is not an array".into())),
        None => Err(bad("`messages` is missing".into())),
    }
}

fn text_param(method: &str, params: Option<&Value>) -> Result<String, Refusal> {
    match params.and_then(|p| p.get("text")) {
        Some(Value::String(t)) => Ok(t.clone()),
        _ => Err((
            codes::INVALID_PARAMS,
            format!("{method} needs params {{\"text\": string}}"),
        )),
    }
}

/// Asks the client to approve `call` (an `approve_tool_call` request) and waits for the
/// answer: `Allow` or `Block`. `abort()` and a client that left end the wait with `Block`.
fn ask_client(
    out: &Out,
    approvals: &Requests,
    request: &ToolCallRequest<'_>,
    call: &ToolCall,
) -> ToolDecision {
    let Some((id, rx)) = approvals.open() else {
        return ToolDecision::Block("the client is gone; nobody can approve".into());
    };
    let params = json!({ "call": call });
    out.lines(|bytes| request_to(bytes, &id.into(), "approve_tool_call", &params));
    let answer = request.wait_for(&rx).map(approval);
    approvals.forget(id);
    match answer {
        Some(Answer::Approve) => ToolDecision::Allow,
        Some(Answer::Reject(reason)) => ToolDecision::Block(reason),
        None => ToolDecision::Block("no approval: the run was aborted or the client left".into()),
    }
}

fn snapshot_json(s: &State) -> Value {
    let messages = |v: &List<Arc<Message>>| v.iter().map(|m| json!(**m)).collect::<Vec<_>>();
    json!({
        "system_prompt": &*s.system_prompt,
        "model": &*s.model,
        "thinking": s.thinking,
        "tools": s.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        "messages": messages(&s.messages),
        "is_streaming": s.is_streaming,
        "is_streaming_reply": s.is_streaming_reply,
        "streaming_message": s.streaming_message,
        "pending_tool_calls": s.pending_tool_calls.iter()
            .map(|p| json!({"call": p.call, "arguments": p.arguments, "rewritten": p.rewritten, "progress": p.progress}))
            .collect::<Vec<_>>(),
        "tool_results": s.tool_results.iter().map(|r| json!(**r)).collect::<Vec<_>>(),
        "error_message": s.error_message.as_deref(),
        "error": s.error_kind.zip(s.error_message.as_deref())
            .map(|(kind, message)| ErrorInfo::new(kind, message)),
        "turn": s.turn,
        "stop_reason": s.stop_reason,
        "run_usage": s.run_usage,
        "usage": s.usage,
        "steering_queue": messages(&s.steering_queue),
        "follow_up_queue": messages(&s.follow_up_queue),
    })
}
