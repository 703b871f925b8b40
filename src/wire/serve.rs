//! `serve`: an agent driven over line-delimited JSON-RPC 2.0 (stdin/stdout or any pipe).

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use super::codec::{MAX_LINE_LEN, write_event};
use crate::agent::Queue;
use crate::cancel::CancelToken;
use crate::hooks::{ToolCallRequest, ToolDecision};
use crate::jsonrpc::{self, Call, LineOut, LinkError, Peer, Pool, Reply, RpcError, out};
use crate::message::{Message, ToolCall, UserMessage};
use crate::state::State;
use crate::trace::Served;
use crate::{Agent, AgentBuilder, ElicitationAnswer, Error, ErrorInfo, List, RunResult};

/// The protocol version `initialize` reports.
pub const PROTOCOL_VERSION: &str = "pagent-wire/1";

/// The methods a client may call, as `initialize` lists them.
const METHODS: [&str; 12] = [
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
    "elicitation/answer",
];

/// JSON-RPC error codes of [`serve`]: the standard ones, and one of ours.
pub mod codes {
    /// The line is not JSON (or not UTF-8).
    pub const PARSE_ERROR: i64 = crate::jsonrpc::codes::PARSE_ERROR;
    /// The JSON is not a request: not an object, `jsonrpc` not `"2.0"`, no string `method`,
    /// a bad `id`, or a line over the length limit.
    pub const INVALID_REQUEST: i64 = crate::jsonrpc::codes::INVALID_REQUEST;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = crate::jsonrpc::codes::METHOD_NOT_FOUND;
    /// The params are missing, not an object, or lack a field.
    pub const INVALID_PARAMS: i64 = crate::jsonrpc::codes::INVALID_PARAMS;
    /// The agent failed in a way that is not a run's stop reason.
    pub const INTERNAL_ERROR: i64 = crate::jsonrpc::codes::INTERNAL_ERROR;
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
    output: jsonrpc::Limits,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            approve_tools: false,
            max_line_len: MAX_LINE_LEN,
            max_queued: MAX_QUEUED,
            max_queued_bytes: MAX_QUEUED_BYTES,
            output: jsonrpc::Limits::default(),
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

    /// The most bytes (text, and the inline bytes of images and documents) each of the
    /// steering and follow-up queues holds: a message
    /// that would take its queue past it is refused with [`codes::QUEUE_FULL`] (one larger
    /// than this on its own always is). Defaults to [`MAX_QUEUED_BYTES`].
    pub fn max_queued_bytes(mut self, bytes: usize) -> ServeOptions {
        self.max_queued_bytes = bytes;
        self
    }

    /// The most bytes written for the client and not yet read by it: while this much
    /// waits, the run that writes (its events, the answers) waits for the client to read.
    /// Defaults to [`MAX_UNREAD_BYTES`] (16 MiB).
    pub fn max_unread_bytes(mut self, bytes: usize) -> ServeOptions {
        self.output.max_bytes = bytes;
        self
    }

    /// How long the output may stay full (see [`ServeOptions::max_unread_bytes`]) before
    /// the client is taken to have stopped reading: the connection is then closed, the run
    /// aborted, and `serve` returns an [`Error::Io`] of kind `TimedOut` when the input ends.
    /// Defaults to [`STALL_TIMEOUT`] (30 s).
    pub fn stall_timeout(mut self, timeout: Duration) -> ServeOptions {
        self.output.stall = timeout;
        self
    }
}

/// The default of [`ServeOptions::max_unread_bytes`].
pub const MAX_UNREAD_BYTES: usize = out::MAX_QUEUED_BYTES;

/// The default of [`ServeOptions::stall_timeout`].
pub const STALL_TIMEOUT: Duration = out::STALL;

enum Answer {
    Approve,
    Reject(String),
}

/// The wire's reading of an answer to `approve_tool_call`.
fn approval(reply: Reply<LinkError>) -> Answer {
    match reply {
        Reply::Response(Ok(r)) if r["decision"] == "approve" => Answer::Approve,
        Reply::Response(Ok(r)) if r["decision"] == "reject" => Answer::Reject(
            r["reason"]
                .as_str()
                .unwrap_or("rejected by the client")
                .to_owned(),
        ),
        Reply::Response(Ok(r)) => {
            Answer::Reject(format!("the client's answer {r} is not a decision"))
        }
        Reply::Response(Err(e)) => {
            Answer::Reject(format!("the client answered with an error: {}", e.message))
        }
        Reply::Notice(_) | Reply::Failed(_) => {
            Answer::Reject("the client's answer never came".into())
        }
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
/// | `prompt` | `{"text":".."}`, or `{"content":<parts>}` (the native wire's parts: images and documents inline or by URL) | when the run ends: `{"stop_reason":"no_tool_calls","text":"<last reply>","usage":{..},"error":null}`; for a run that failed, `"stop_reason":"error"` and `"error"` the error object of the wire (`{"kind":"rate_limited","message":".."}`, see the [wire docs](super)) |
/// | `steer` | `{"text":".."}` or `{"content":<parts>}` | `{"queued":true}`: delivered before the next model call |
/// | `follow_up` | `{"text":".."}` or `{"content":<parts>}` | `{"queued":true}`: delivered when the run would stop |
/// | `abort` | none | `{"aborted":bool}` (false when no run is active) |
/// | `snapshot` | none | the agent's state: `system_prompt`, `model`, `thinking`, `tools` (names), `messages`, `is_streaming` (a run is going on, from its `AgentStart` to its `AgentEnd`), `is_streaming_reply` (an assistant reply is streaming now, shown in `streaming_message`), `streaming_message`, `pending_tool_calls` (each `{"call","arguments","rewritten","progress"}`), `tool_results`, `error_message`, `error` (the error object of the last run's `AgentEnd`, or null), `turn`, `stop_reason`, `run_usage`, `usage`, `context` (the context figures: `used`, `window`, `share`, `estimated`, `omitted`), `compacting`, `elicitations` (the questions waiting, each `{"id","tool_call_id","request"}`, `request` as in `ElicitationStart`), `steering_queue`, `follow_up_queue` |
/// | `reset` | none | between runs ([`Agent::reset`]): a new conversation, the transcript and both queues emptied; `{"removed":[message..]}`, the queued messages it removed (steering first, then follow-ups) |
/// | `replace_messages` | `{"messages":[message..]}` (messages in the wire's shape) | between runs ([`Agent::replace_messages`]): the transcript replaced; `{"replaced":<n>}`, the number of messages now in it |
/// | `clear_steering_queue` | none | `{"removed":[message..]}`: the steering messages that were waiting, never delivered now ([`Agent::clear_steering_queue`]); at any time |
/// | `clear_follow_up_queue` | none | `{"removed":[message..]}`, the same for the follow-up queue |
/// | `clear_queues` | none | `{"removed":[message..]}`: both queues emptied in one change, the steering messages first |
/// | `elicitation/answer` | `{"id":"elicitation-1","action":"accept","content":{..}}` (`action` `accept`, `decline` or `cancel`; `content` the form's values, for `accept` of a form) | `{}`: the question of that `ElicitationStart` is answered ([`Agent::answer_elicitation`]); -32602 when no question with this id waits for an answer through the agent, or when the values do not fit its form (the question then still waits) |
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
/// and at most one approval request waiting for an answer. What the server writes for a
/// client that reads slowly is bounded too: one writer thread writes the lines, and while
/// [`ServeOptions::max_unread_bytes`] wait unread the run waits for the client; a client
/// that reads nothing for [`ServeOptions::stall_timeout`] has its connection closed (the
/// run is aborted, its approval released), never our memory grown.
///
/// # Cancels
///
/// A `prompt` claims the agent as it is read ([`Agent::claim_run`]), before its run's
/// thread starts: an `abort` read after it always finds that run, answers
/// `{"aborted":true}`, and the run ends `cancelled`, whichever thread gets ahead.
///
/// # Errors
/// [`Error::Config`] when the builder cannot build an agent; [`Error::Io`] when reading
/// `input` or writing `output` fails, or when the client stopped reading (kind `TimedOut`,
/// see above).
pub fn serve(
    builder: AgentBuilder,
    input: impl BufRead,
    output: impl Write + Send + 'static,
    options: ServeOptions,
) -> Result<(), Error> {
    let out = Arc::new(LineOut::spawn("pagent-wire-out", output, options.output)?);
    let peer = Arc::new(Peer::new(out.clone()).accept_null_id());
    let builder = if options.approve_tools {
        let peer = peer.clone();
        // The user's own hook decides first; the client is asked only about the calls it
        // lets run, and sees the arguments that would run.
        builder.ask_before_tool_call(
            move |request, call| match ask_client(&peer, request, call) {
                ToolDecision::Allow => None,
                refused => Some(refused),
            },
        )
    } else {
        builder
    };
    let agent = builder.build()?;
    let _events = agent.subscribe({
        let (peer, agent) = (peer.clone(), agent.handle());
        move |event| {
            // A client that stopped reading has no use for the rest of the run.
            if peer.send_with(|buf| write_event(buf, event)).is_err() {
                agent.abort();
            }
        }
    });
    let server = Server {
        agent: &agent,
        peer: &peer,
        busy: AtomicBool::new(false),
        options: &options,
    };
    let read = std::thread::scope(|scope| {
        // One run at a time; the second thread takes a prompt sent on the answer of the
        // last one while that one's thread is still on its way back.
        let runs = Pool::scoped(scope, "pagent-wire-run", 2);
        let read = peer.serve_lines(input, options.max_line_len, |call| {
            server.handle(&runs, call);
        });
        // Nobody is left to answer: approvals waiting, and later ones, are rejected.
        peer.close(LinkError::Closed);
        read
    });
    // The run has ended (the scope joined it): what it wrote goes out before `serve` returns.
    let written = out.finish();
    read?;
    written.map_err(|e| e.to_error())
}

struct Server<'a> {
    agent: &'a Agent,
    peer: &'a Peer,
    /// From a `prompt` request to its answer (see `Server::idle`).
    busy: AtomicBool,
    options: &'a ServeOptions,
}

fn refused(code: i64, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message)
}

impl<'a> Server<'a> {
    fn handle<'scope>(&'scope self, runs: &Pool<'scope>, call: Call) {
        let Call { id, method, params } = call;
        let params = params.as_ref();
        let answer = match method.as_str() {
            "prompt" => self.prompt(runs, params, id.clone()),
            _ => self.call(&method, params),
        };
        self.peer.answer(id.as_ref(), answer);
    }

    fn call(&self, method: &str, params: Option<&Value>) -> Result<Option<Value>, RpcError> {
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
                let message = Message::User(message_param(method, params)?);
                self.room_for(&message, Queue::Steering)?;
                // Refused only when the agent is gone, and it lives as long as `serve`.
                let _ = self.agent.steer(message);
                json!({"queued": true})
            }
            "follow_up" => {
                let message = Message::User(message_param(method, params)?);
                self.room_for(&message, Queue::FollowUp)?;
                let _ = self.agent.follow_up(message);
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
            "elicitation/answer" => {
                let (id, answer) = elicitation_answer(params)?;
                self.agent
                    .answer_elicitation(&id, answer)
                    .map_err(|e| refused(codes::INVALID_PARAMS, e.to_string()))?;
                json!({})
            }
            other => {
                return Err(refused(
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
    /// its request to its answer.
    fn idle(&self) -> Result<(), RpcError> {
        if self.busy.load(Ordering::Acquire) {
            return Err(refused(codes::RUN_ACTIVE, Error::Busy.to_string()));
        }
        Ok(())
    }

    /// Refuses `text` when the steering (or follow-up) queue has no room for it. The reading
    /// thread is the only one that queues messages from the client, and runs only take them
    /// out, so the room seen here is still there when the message goes in.
    fn room_for(&self, message: &Message, which: Queue) -> Result<(), RpcError> {
        let size = queued_size(message);
        let state = self.agent.snapshot();
        let (queue, name) = match which {
            Queue::Steering => (&state.steering_queue, "steering"),
            Queue::FollowUp => (&state.follow_up_queue, "follow-up"),
        };
        let bytes: usize = queue.iter().map(|m| queued_size(m)).sum();
        let (max, max_bytes) = (self.options.max_queued, self.options.max_queued_bytes);
        if queue.len() < max && bytes.saturating_add(size) <= max_bytes {
            return Ok(());
        }
        Err(refused(
            codes::QUEUE_FULL,
            format!(
                "the {name} queue is full ({} of {max} messages, {bytes} of {max_bytes} bytes \
                 waiting): this message of {} bytes was not queued",
                queue.len(),
                size
            ),
        ))
    }

    /// Claims the agent now, on the reading thread, and runs the prompt on a thread of the
    /// pool; it answers when the run ends. The claim taken here is what an `abort` read
    /// next cancels.
    fn prompt<'scope>(
        &'scope self,
        runs: &Pool<'scope>,
        params: Option<&Value>,
        id: Option<Value>,
    ) -> Result<Option<Value>, RpcError> {
        let message = message_param("prompt", params)?;
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(refused(codes::RUN_ACTIVE, Error::Busy.to_string()));
        }
        let claimed = match self.agent.claim_run() {
            Ok(claimed) => claimed,
            // A run begun outside the server.
            Err(e) => {
                self.busy.store(false, Ordering::Release);
                return Err(refusal(e));
            }
        };
        // The run's spans (feature `tracing`) go under the request's, whose parent is the
        // trace context the client sent in `params._meta`.
        let served = Served::open("prompt", id.as_ref(), params);
        let run = move |_: &Served| {
            let outcome = claimed.prompt(message);
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
            let _ = match outcome {
                Ok(r) => self.peer.respond(&id, &answer(&r, None)),
                Err(e) => self
                    .peer
                    .respond(&id, &answer(e.result(), Some(ErrorInfo::from(e.error())))),
            };
        };
        // No run of the server's is active (`busy` was free), so a pool without a free thread
        // only has threads still returning from runs that answered already: a prompt sent on
        // the last answer waits for one of them (briefly, bounded), rather than be refused.
        let job: Box<dyn FnOnce() + Send + 'scope> = Box::new(move || served.run(run));
        let job = Arc::new(parking_lot::Mutex::new(Some(job)));
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            let slot = job.clone();
            let taken = runs.submit(move || {
                if let Some(job) = slot.lock().take() {
                    job();
                }
            });
            if taken.is_ok() {
                return Ok(None);
            }
            if Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Not taken: dropping the job gives its claim up.
        drop(job.lock().take());
        self.busy.store(false, Ordering::Release);
        Err(refused(
            codes::RUN_ACTIVE,
            "the last run's thread has not finished yet; send the prompt again",
        ))
    }
}

/// `Busy` (a run begun outside the server) as the server refuses a prompt; anything else as
/// an internal error.
fn refusal(e: Error) -> RpcError {
    match e {
        Error::Busy => refused(codes::RUN_ACTIVE, e.to_string()),
        e => refused(codes::INTERNAL_ERROR, e.to_string()),
    }
}

fn messages_param(params: Option<&Value>) -> Result<Vec<Message>, RpcError> {
    let bad = |why: String| {
        refused(
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

/// The user message of a `prompt`, `steer` or `follow_up`: `{"text": ".."}`, or
/// `{"content": <parts>}` (a string, or a list of parts in the native shape: images and
/// documents inline as base64 or by URL).
fn message_param(method: &str, params: Option<&Value>) -> Result<UserMessage, RpcError> {
    let needs = || {
        refused(
            codes::INVALID_PARAMS,
            format!("{method} needs params {{\"text\": string}} or {{\"content\": parts}}"),
        )
    };
    match (
        params.and_then(|p| p.get("text")),
        params.and_then(|p| p.get("content")),
    ) {
        (Some(Value::String(t)), None) => Ok(UserMessage::new(t.clone())),
        (None, Some(content)) => {
            let parts = crate::content::parts::deserialize(content).map_err(|e| {
                refused(
                    codes::INVALID_PARAMS,
                    format!("{method}: `content` is not a list of parts: {e}"),
                )
            })?;
            if parts.is_empty() {
                return Err(needs());
            }
            Ok(UserMessage::from_parts(parts))
        }
        _ => Err(needs()),
    }
}

/// The bytes a message holds in a queue: its text, inline bytes and URLs.
fn queued_size(message: &Message) -> usize {
    let part = |p: &crate::Part| match (p.as_text(), p.source()) {
        (Some(text), _) => text.len(),
        (_, Some(source)) => {
            source.data().map_or(0, |d| d.len()) + source.url().map_or(0, str::len)
        }
        _ => 0,
    };
    match message {
        Message::Assistant(_) => message.text().len(),
        m => m.parts().iter().map(part).sum(),
    }
}

/// Asks the client to approve `call` (an `approve_tool_call` request) and waits for the
/// answer: `Allow` or `Block`. `abort()` and a client that left end the wait with `Block`.
fn ask_client(peer: &Peer, request: &ToolCallRequest<'_>, call: &ToolCall) -> ToolDecision {
    let params = json!({ "call": call });
    // The wait below is the run's own (abort, run timeout); sending never blocks for long.
    let Ok(ticket) = peer.request("approve_tool_call", Some(&params), &CancelToken::new()) else {
        return ToolDecision::Block("the client is gone; nobody can approve".into());
    };
    match request.wait_for(ticket.replies()).map(approval) {
        Some(Answer::Approve) => ToolDecision::Allow,
        Some(Answer::Reject(reason)) => ToolDecision::Block(reason),
        None => ToolDecision::Block("no approval: the run was aborted or the client left".into()),
    }
}

/// The params of `elicitation/answer`: `{"id", "action", "content"?}`.
fn elicitation_answer(params: Option<&Value>) -> Result<(String, ElicitationAnswer), RpcError> {
    let invalid = |why: String| {
        refused(
            codes::INVALID_PARAMS,
            format!("invalid params of elicitation/answer: {why}"),
        )
    };
    let params = params.ok_or_else(|| invalid("none given".into()))?;
    let id = params
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("no string `id`".into()))?;
    let answer = ElicitationAnswer::from_json(params).map_err(invalid)?;
    Ok((id.to_owned(), answer))
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
        "context": s.context,
        "compacting": s.compacting,
        "elicitations": s.elicitations.iter()
            .map(|e| json!({"id": e.id, "tool_call_id": e.tool_call_id, "request": e.request.to_json()}))
            .collect::<Vec<_>>(),
        "steering_queue": messages(&s.steering_queue),
        "follow_up_queue": messages(&s.follow_up_queue),
    })
}
