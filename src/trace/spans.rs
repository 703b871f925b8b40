//! The spans of one run, opened and closed where the loop emits the events they stand for.
//!
//! [`RunTrace::observe`] sees every event the run emits, before it is folded: a start event
//! opens its span (so the listeners of that event already run inside it), an end event
//! records what it carries on its span and hands the span back in a [`Closing`], which the
//! loop drops once the event's listeners returned. What a span says therefore comes from the
//! events themselves, and cannot disagree with what listeners, the wire and the state saw.
//! Three things no event carries are handed over by the loop directly: the start of a model
//! call ([`RunTrace::open_chat`]), the request it sends (for the opt-in contents), and the
//! error that ended a reply (for its kind).
//!
//! Everything lives on the run thread (hence the cells). A span nobody records is disabled
//! at creation, and every later call on it returns at once.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::time::Instant;

use tracing::field::Empty;
use tracing::span::EnteredSpan;
use tracing::{Dispatch, Id, Level, Span};

use super::{Settings, content};
use crate::event::AgentEvent;
use crate::llm::{Provider, Request, ServerAddress, StreamEvent, ToolDefinition};
use crate::message::{AssistantMessage, StopReason, ToolCall, ToolResultMessage, Usage};
use crate::{Error, ErrorInfo};

/// The target of every span and event, for filters (`pagent=info`).
pub(super) const TARGET: &str = "pagent";

pub(crate) struct RunTrace {
    // Fields drop in order: a chat span is entered inside the run's, so it is left first.
    chat: RefCell<Option<Chat>>,
    tools: RefCell<Vec<ToolSpan>>,
    run: RefCell<Option<EnteredSpan>>,
    provider: String,
    // Where the provider's requests go (`server.address`, `server.port` of `chat`).
    server: Option<ServerAddress>,
    model: String,
    settings: Settings,
    // The system prompt, kept only when contents are recorded.
    system_prompt: Option<String>,
    turns: Cell<u32>,
    // Read on every delta: a plain flag, no borrow.
    awaiting_first_chunk: Cell<bool>,
}

/// The model call under way.
struct Chat {
    span: EnteredSpan,
    opened: Instant,
    // The error that ended the reply, handed over before its `MessageEnd`.
    error: Option<ErrorInfo>,
}

/// A tool call between its `ToolStart` and its `ToolEnd`.
struct ToolSpan {
    call_id: String,
    span: Span,
    // Its `ToolExecute` came: the tool ran.
    executed: bool,
}

/// A span whose operation ended, closed when this is dropped (after the event's listeners).
pub(crate) enum Closing {
    Nothing,
    Entered(#[allow(dead_code)] EnteredSpan),
    Open(#[allow(dead_code)] Span),
}

/// A span and the subscriber it belongs to, to carry to another thread: what runs in
/// [`Scope::in_scope`] there runs inside that span, and its own spans and events go to that
/// subscriber (also when it is a thread's default, set with `with_default`).
pub(crate) struct Scope {
    span: Span,
    dispatch: Dispatch,
}

impl Scope {
    /// The current span and subscriber of this thread.
    pub(crate) fn current() -> Scope {
        Scope {
            span: Span::current(),
            dispatch: tracing::dispatcher::get_default(Dispatch::clone),
        }
    }

    /// Runs `f` inside the span, with the subscriber as this thread's default.
    ///
    /// The span is let go of in there too. When this was its last handle, the span closes
    /// here, and a registry then lets go of its parent through the thread's *default*
    /// subscriber: outside, that would be another one (the global no-op), the parent would
    /// never close, and neither would the run's span above it.
    pub(crate) fn in_scope<R>(self, f: impl FnOnce() -> R) -> R {
        let Scope { span, dispatch } = self;
        tracing::dispatcher::with_default(&dispatch, move || {
            let r = span.in_scope(f);
            drop(span);
            r
        })
    }
}

/// `{operation}` or `{operation} {target}`: a span name as the conventions write it.
struct SpanName<'a>(&'static str, Option<&'a str>);

impl fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(target) if !target.is_empty() => write!(f, "{} {target}", self.0),
            _ => f.write_str(self.0),
        }
    }
}

impl RunTrace {
    /// The trace of a run of `provider` on `model` (the system prompt is recorded when
    /// contents are).
    pub(crate) fn new(
        settings: &Settings,
        provider: &dyn Provider,
        model: &str,
        system_prompt: &str,
    ) -> RunTrace {
        // `name` is the provider's own code: a panic there costs the attribute, not the run.
        let (provider, server) =
            crate::agent::guard::catch(|| (provider.name().to_owned(), provider.server_address()))
                .unwrap_or_else(|_| ("provider".to_owned(), None));
        RunTrace {
            chat: RefCell::new(None),
            tools: RefCell::new(Vec::new()),
            run: RefCell::new(None),
            provider,
            server,
            model: model.to_owned(),
            settings: settings.clone(),
            system_prompt: (settings.content && !system_prompt.is_empty())
                .then(|| system_prompt.to_owned()),
            turns: Cell::new(0),
            awaiting_first_chunk: Cell::new(false),
        }
    }

    /// Sees `event` before it is published; `tools` are the run's tool definitions (for the
    /// description of a called tool). Drop the result after the event's listeners returned.
    ///
    /// # Performance
    /// Inlined into the loop's `emit`: a streamed delta costs two checks here (not the
    /// first piece of the reply, not a retry), and no call.
    #[inline(always)]
    pub(crate) fn observe(&self, event: &AgentEvent, tools: &[ToolDefinition]) -> Closing {
        if let AgentEvent::MessageUpdate { delta, .. } = event
            && !self.awaiting_first_chunk.get()
            && !matches!(delta, StreamEvent::Retry { .. })
        {
            return Closing::Nothing;
        }
        self.observe_event(event, tools)
    }

    fn observe_event(&self, event: &AgentEvent, tools: &[ToolDefinition]) -> Closing {
        match event {
            AgentEvent::MessageUpdate { delta, .. } => {
                self.delta(delta);
                Closing::Nothing
            }
            AgentEvent::AgentStart => {
                self.open_run();
                Closing::Nothing
            }
            AgentEvent::TurnStart { turn } => {
                self.turns.set(*turn);
                Closing::Nothing
            }
            AgentEvent::MessageEnd { message } => match message.as_assistant() {
                Some(reply) => self.close_chat(reply),
                None => Closing::Nothing,
            },
            AgentEvent::ToolStart { call, .. } => {
                self.open_tool(call, tools);
                Closing::Nothing
            }
            AgentEvent::ToolExecute {
                call_id, arguments, ..
            } => {
                self.executing(call_id, arguments);
                Closing::Nothing
            }
            AgentEvent::ToolEnd { result, .. } => self.close_tool(result),
            AgentEvent::AgentEnd {
                messages,
                stop_reason,
                usage,
                error,
            } => {
                // A loop that panicked mid-reply left its spans open: they end with the run.
                self.chat.borrow_mut().take();
                self.tools.borrow_mut().clear();
                let Some(run) = self.run.borrow_mut().take() else {
                    return Closing::Nothing;
                };
                if !run.is_disabled() {
                    record_usage(&run, usage);
                    run.record("pagent.run.stop_reason", stop_reason.as_str());
                    run.record("pagent.run.turns", int(self.turns.get()));
                    if let Some(e) = error {
                        record_error(&run, e.kind.as_str(), Some(&e.message));
                    }
                    if self.settings.content {
                        let input = content::run_input(messages);
                        if input != "[]" {
                            run.record("gen_ai.input.messages", input.as_str());
                        }
                        if let Some(last) = messages.iter().rev().find_map(|m| m.as_assistant()) {
                            run.record("gen_ai.output.messages", content::output(last).as_str());
                        }
                    }
                }
                Closing::Entered(run)
            }
            _ => Closing::Nothing,
        }
    }

    fn open_run(&self) {
        let span = tracing::info_span!(
            target: TARGET,
            "invoke_agent",
            otel.name = %SpanName("invoke_agent", self.settings.name.as_deref()),
            otel.kind = "internal",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.provider.name = self.provider.as_str(),
            gen_ai.agent.name = self.settings.name.as_deref(),
            gen_ai.request.model = self.model.as_str(),
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.usage.cache_read.input_tokens = Empty,
            gen_ai.usage.cache_creation.input_tokens = Empty,
            gen_ai.usage.reasoning.output_tokens = Empty,
            pagent.run.stop_reason = Empty,
            pagent.run.turns = Empty,
            error.type = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
            gen_ai.system_instructions = self.system_prompt.as_deref().map(content::system).as_deref(),
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
        );
        *self.run.borrow_mut() = Some(span.entered());
    }

    /// The run's span, as the parent of the spans in it; the current span when it records
    /// nothing (a filter let it through but not the run).
    fn parent(&self) -> Option<Id> {
        let run = self.run.borrow();
        run.as_ref()
            .and_then(|s| s.id())
            .or_else(|| Span::current().id())
    }

    /// Opens (and enters) the span of the model call of `turn` to `model`, right before the
    /// reply's `MessageStart`.
    pub(crate) fn open_chat(&self, model: &str, turn: u32) {
        let span = tracing::info_span!(
            target: TARGET,
            parent: self.parent(),
            "chat",
            otel.name = %SpanName("chat", Some(model)),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = self.provider.as_str(),
            gen_ai.request.model = model,
            gen_ai.request.stream = true,
            server.address = self.server.as_ref().map(|s| s.host.as_str()),
            server.port = self.server.as_ref().map(|s| int(s.port)),
            pagent.turn = int(turn),
            gen_ai.response.time_to_first_chunk = Empty,
            gen_ai.response.model = Empty,
            gen_ai.response.id = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.usage.cache_read.input_tokens = Empty,
            gen_ai.usage.cache_creation.input_tokens = Empty,
            gen_ai.usage.reasoning.output_tokens = Empty,
            error.type = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
            gen_ai.system_instructions = Empty,
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
        );
        self.awaiting_first_chunk.set(!span.is_disabled());
        *self.chat.borrow_mut() = Some(Chat {
            span: span.entered(),
            opened: Instant::now(),
            error: None,
        });
    }

    /// The request the model call sends: recorded when contents are.
    pub(crate) fn request(&self, request: &Request) {
        if !self.settings.content {
            return;
        }
        let chat = self.chat.borrow();
        let Some(chat) = chat.as_ref().filter(|c| !c.span.is_disabled()) else {
            return;
        };
        if !request.system_prompt.is_empty() {
            let system = content::system(&request.system_prompt);
            chat.span
                .record("gen_ai.system_instructions", system.as_str());
        }
        chat.span.record(
            "gen_ai.input.messages",
            content::input(&request.messages).as_str(),
        );
    }

    /// The error that ended the reply of the model call under way, if any.
    pub(crate) fn reply_failed(&self, error: Option<&Error>) {
        if let (Some(chat), Some(error)) = (self.chat.borrow_mut().as_mut(), error) {
            chat.error = Some(ErrorInfo::from(error));
        }
    }

    /// One delta of the reply: a retry is an event of the call; the first piece of the
    /// reply gives the time to first chunk. Anything else costs two checks.
    fn delta(&self, delta: &StreamEvent) {
        if let StreamEvent::Retry {
            attempt,
            delay_ms,
            error,
            ..
        } = delta
        {
            if let Some(chat) = self.chat.borrow().as_ref() {
                tracing::event!(
                    name: "pagent.retry",
                    target: TARGET,
                    parent: &*chat.span,
                    Level::WARN,
                    pagent.retry.attempt = int(*attempt),
                    pagent.retry.delay_ms = int(*delay_ms),
                    exception.message = error.as_str(),
                );
            }
            return;
        }
        if self.awaiting_first_chunk.get() && !matches!(delta, StreamEvent::Usage { .. }) {
            self.awaiting_first_chunk.set(false);
            if let Some(chat) = self.chat.borrow().as_ref() {
                let secs = chat.opened.elapsed().as_secs_f64();
                chat.span
                    .record("gen_ai.response.time_to_first_chunk", secs);
            }
        }
    }

    /// The reply's `MessageEnd`: what it says goes on the chat span, which ends.
    fn close_chat(&self, reply: &AssistantMessage) -> Closing {
        // An assistant message appended from the input (no model call) finds no chat open.
        let Some(chat) = self.chat.borrow_mut().take() else {
            return Closing::Nothing;
        };
        self.awaiting_first_chunk.set(false);
        let span = &*chat.span;
        if span.is_disabled() {
            return Closing::Entered(chat.span);
        }
        if !reply.model.is_empty() {
            span.record("gen_ai.response.model", reply.model.as_str());
        }
        if let Some(id) = &reply.response_id {
            span.record("gen_ai.response.id", id.as_str());
        }
        span.record(
            "gen_ai.response.finish_reasons",
            finish_reasons(reply.stop_reason).as_str(),
        );
        record_usage(span, &reply.usage);
        if self.settings.content {
            span.record("gen_ai.output.messages", content::output(reply).as_str());
        }
        if reply.stop_reason == StopReason::Error {
            let message = chat
                .error
                .as_ref()
                .map(|e| e.message.as_str())
                .or(reply.error_message.as_deref())
                .unwrap_or("the reply failed");
            let kind = chat.error.as_ref().map_or("provider", |e| e.kind.as_str());
            record_error(span, kind, Some(message));
            tracing::event!(
                name: "gen_ai.client.operation.exception",
                target: TARGET,
                parent: span,
                Level::WARN,
                exception.message = message,
            );
        }
        Closing::Entered(chat.span)
    }

    fn open_tool(&self, call: &ToolCall, tools: &[ToolDefinition]) {
        let description = tools
            .iter()
            .find(|d| d.name == call.name)
            .map(|d| d.description.as_str())
            .filter(|d| !d.is_empty());
        let span = tracing::info_span!(
            target: TARGET,
            parent: self.parent(),
            "execute_tool",
            otel.name = %SpanName("execute_tool", Some(&call.name)),
            otel.kind = "internal",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = call.name.as_str(),
            gen_ai.tool.call.id = call.id.as_str(),
            gen_ai.tool.type = "function",
            gen_ai.tool.description = description,
            gen_ai.tool.call.arguments = Empty,
            gen_ai.tool.call.result = Empty,
            // What an MCP tool's `tools/call` adds (see `super::mcp`).
            mcp.method.name = Empty,
            jsonrpc.request.id = Empty,
            mcp.protocol.version = Empty,
            mcp.session.id = Empty,
            network.transport = Empty,
            server.address = Empty,
            server.port = Empty,
            rpc.response.status_code = Empty,
            error.type = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
        );
        if !span.is_disabled() {
            self.tools.borrow_mut().push(ToolSpan {
                call_id: call.id.clone(),
                span,
                executed: false,
            });
        }
    }

    /// The span of the tool call `call_id` and the current subscriber, for the thread that
    /// runs the tool (or its `before_tool_call` hook).
    pub(crate) fn tool(&self, call_id: &str) -> Scope {
        let span = self
            .tools
            .borrow()
            .iter()
            .find(|t| t.call_id == call_id)
            .map_or_else(Span::none, |t| t.span.clone());
        Scope {
            span,
            dispatch: tracing::dispatcher::get_default(Dispatch::clone),
        }
    }

    fn executing(&self, call_id: &str, arguments: &serde_json::Value) {
        let mut tools = self.tools.borrow_mut();
        if let Some(tool) = tools.iter_mut().find(|t| t.call_id == call_id) {
            tool.executed = true;
            if self.settings.content {
                let arguments = arguments.to_string();
                tool.span
                    .record("gen_ai.tool.call.arguments", arguments.as_str());
            }
        }
    }

    fn close_tool(&self, result: &ToolResultMessage) -> Closing {
        let mut tools = self.tools.borrow_mut();
        let Some(i) = tools.iter().position(|t| t.call_id == result.tool_call_id) else {
            return Closing::Nothing;
        };
        let tool = tools.remove(i);
        if self.settings.content {
            tool.span
                .record("gen_ai.tool.call.result", result.text().as_str());
        }
        if result.is_error {
            let kind = tool_error_type(result, tool.executed);
            let text = result.text();
            let message = self.settings.content.then_some(text.as_str());
            record_error(&tool.span, kind, message);
        }
        Closing::Open(tool.span)
    }
}

/// `error.type` of a tool call whose result is an error (see the module docs).
fn tool_error_type(result: &ToolResultMessage, executed: bool) -> &'static str {
    use crate::agent::{CANCELLED, SKIPPED};
    if executed {
        return "tool_error";
    }
    match result.text().as_str() {
        CANCELLED => "cancelled",
        SKIPPED => "skipped",
        text if text.starts_with("blocked: ") => "blocked",
        _ => "not_run",
    }
}

/// `gen_ai.response.finish_reasons` of a reply: the JSON text of the list (`tracing` has no
/// list values).
fn finish_reasons(stop: StopReason) -> String {
    format!(r#"["{}"]"#, content::finish_reason(stop))
}

/// The counts the provider reported (a zero is a count it did not report).
fn record_usage(span: &Span, usage: &Usage) {
    let counts = [
        ("gen_ai.usage.input_tokens", usage.input),
        ("gen_ai.usage.output_tokens", usage.output),
        ("gen_ai.usage.cache_read.input_tokens", usage.cache_read),
        (
            "gen_ai.usage.cache_creation.input_tokens",
            usage.cache_write,
        ),
        ("gen_ai.usage.reasoning.output_tokens", usage.reasoning),
    ];
    for (field, count) in counts {
        if count > 0 {
            span.record(field, int(count));
        }
    }
}

/// A count as the conventions' `int`: `tracing-opentelemetry` writes a `u64` as text.
fn int(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// Marks the operation of `span` failed: `error.type`, the status, its message.
pub(super) fn record_error(span: &Span, kind: &str, message: Option<&str>) {
    span.record("error.type", kind);
    // The code first: `tracing-opentelemetry` takes a later code without a message.
    span.record("otel.status_code", "error");
    if let Some(message) = message {
        span.record("otel.status_description", message);
    }
}
