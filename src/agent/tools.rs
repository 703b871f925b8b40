//! Running the tool calls of one reply: hooks, validation, parallel workers, results.
//!
//! Calls that run one at a time (a reply with one call, or a sequential batch) run on the
//! run thread itself: no thread to start, no hand-off, and each update is published as it
//! is made. Otherwise each call runs on a worker, a scoped thread that never emits events:
//! workers send progress and their outcome over one channel (so a tool's updates always
//! arrive before its end), and the run thread turns those into `ToolUpdate` / `ToolEnd`
//! events in the order they arrive. With a run deadline, calls always run on workers: the
//! run thread then waits for them with the deadline's timer, and cancels the token at the
//! deadline for a tool that waits on `CancelToken::receiver` (nobody would, were the tool
//! running on the run thread).
//!
//! Every call into a tool (`name`, `sequential`, `validate`, `execute`) and into the tool
//! hooks goes through [`guard::catch`]: a panic becomes that call's error result, and each
//! worker owns a [`guard::Worker`] that reports the call done whatever happens, so every
//! call of the batch gets exactly one result.

use std::sync::Arc;
use std::thread::Scope;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::SteeringPolicy;
use super::guard::{self, ToolMsg, Worker};
use super::hooks::{ToolCallRequest, ToolDecision};
use super::run::Run;
use crate::event::AgentEvent;
use crate::message::{AssistantMessage, Message, StopReason, ToolCall, ToolResultMessage};
use crate::tool::ask::Asker;
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput, Updates};

/// Text of the results synthesized for calls that never ran.
pub(crate) const CANCELLED: &str = "cancelled: the run was aborted before this tool call ran";
pub(crate) const SKIPPED: &str = "skipped: the user sent a new message before this tool call ran";
const CUT_BY_LENGTH: &str = "not run: the reply was cut at the output token limit before this \
                             tool call was complete; make the call again, shorter";
const CUT_BY_ERROR: &str = "not run: the reply failed before this tool call was complete";
const FINAL_TURN: &str = "not run: the run reached its max_turns limit, and this \
                         was its final answer turn";

impl Run<'_> {
    /// Runs (or settles without running) every call of `reply`; emits the tool events and the
    /// result messages; returns the results in call order.
    pub(crate) fn run_tools(
        &mut self,
        calls: &[&ToolCall],
        reply: &AssistantMessage,
    ) -> Vec<Arc<ToolResultMessage>> {
        if calls.is_empty() {
            return Vec::new();
        }
        let not_run = not_run(reply);
        // Asked once per call, before any runs. A tool whose `sequential()` panics makes the
        // batch sequential (the cautious answer), and its calls get an error result.
        let slots: Vec<Slot> = calls
            .iter()
            .map(|c| Slot {
                asked: self.find_tool(&c.name).map(|(tool, name)| {
                    guard::catch(|| tool.sequential()).map_err(|panic| {
                        format!("the tool `{name}` panicked in `sequential()`: {panic}")
                    })
                }),
                started: None,
                id: None,
                name: None,
                result: None,
            })
            .collect();
        let sequential = self.config.max_parallel_tools <= 1
            || slots
                .iter()
                .any(|s| !matches!(s.asked, None | Some(Ok(false))));
        let cap = if sequential {
            1
        } else {
            self.config.max_parallel_tools
        };
        let inline = (cap == 1 || calls.len() == 1) && self.cancel.deadline().is_none();
        // Workers report over this channel; calls run on this thread need none.
        let (tx, rx) = if inline {
            (None, crossbeam_channel::never())
        } else {
            let (tx, rx) = crossbeam_channel::unbounded::<ToolMsg>();
            (Some(tx), rx)
        };
        let mut batch = Batch {
            rx,
            calls,
            slots,
            running: 0,
        };
        match &tx {
            // Calls run on this thread start no thread: no scope either.
            None => self.start_calls(&mut batch, cap, not_run, None),
            Some(tx) => std::thread::scope(|scope| {
                self.start_calls(&mut batch, cap, not_run, Some((tx, scope)));
                while batch.running > 0 {
                    self.receive(&mut batch);
                }
            }),
        }
        for (slot, call) in batch.slots.iter_mut().zip(calls) {
            // Every call was either settled or its worker reported Done: this is a
            // safety net.
            slot.result
                .get_or_insert_with(|| Arc::new(Run::tool_result(call, CANCELLED, true)));
        }
        // In place: the list of the calls becomes the list of results `TurnEnd` carries.
        let results: Vec<Arc<ToolResultMessage>> = batch
            .slots
            .into_iter()
            // OK because every slot was filled just above.
            .map(|s| s.result.expect("every call has a result"))
            .collect();
        for r in &results {
            self.append(Message::ToolResult(ToolResultMessage::clone(r)));
        }
        results
    }

    /// Starts (or settles) each call of the batch in order: its `ToolStart`, its checks, its
    /// `ToolExecute`, then its tool, on this thread or, with `workers`, on a scoped thread.
    fn start_calls<'scope, 'env>(
        &mut self,
        batch: &mut Batch<'_>,
        cap: usize,
        not_run: Option<&'static str>,
        workers: Option<(&Sender<ToolMsg>, &'scope Scope<'scope, 'env>)>,
    ) {
        let calls = batch.calls;
        for (index, call) in calls.iter().enumerate() {
            // Wait for a free slot, publishing what finished meanwhile.
            while batch.running >= cap {
                self.receive(batch);
            }
            batch.slots[index].started = Some(Instant::now());
            let start = self.emit_back(AgentEvent::ToolStart {
                call: ToolCall::clone(call),
                at: Some(crate::types::now_ms()),
            });
            // The event's copy of the id and name goes on into the call's next event and
            // its result, rather than being copied again.
            if let AgentEvent::ToolStart { call: started, .. } = start {
                batch.slots[index].id = Some(started.id);
                batch.slots[index].name = Some(started.name);
            }
            let settled = if let Some(text) = not_run {
                Err(text.to_owned())
            } else if let Some(Err(text)) = &batch.slots[index].asked {
                Err(text.clone())
            } else if self.cancel.is_cancelled() {
                Err(CANCELLED.to_owned())
            } else if self.config.steering_policy == SteeringPolicy::AtToolBoundary
                && self.steering_queued()
            {
                Err(SKIPPED.to_owned())
            } else {
                self.prepare(call, batch)
            };
            let (tool, args, rewritten) = match settled {
                Ok(ready) => ready,
                Err(text) => {
                    let result = batch.result(index, text, true);
                    self.finish(index, result, false, batch);
                    continue;
                }
            };
            let (call_id, tool_name) = batch.names(index);
            let execute = self.emit_back(AgentEvent::ToolExecute {
                call_id,
                tool_name,
                arguments: args,
                rewritten,
            });
            // The tool gets the arguments the event carried (no copy of them either).
            let AgentEvent::ToolExecute {
                call_id,
                tool_name,
                arguments: args,
                ..
            } = execute
            else {
                unreachable!("emit_back gives back the event it was given")
            };
            batch.slots[index].id = Some(call_id);
            batch.slots[index].name = Some(tool_name);
            let Some((tx, scope)) = workers else {
                self.run_here(index, &tool, args, batch);
                continue;
            };
            let call_id = self.call_id(index, call);
            let (updates, update_id) = (tx.clone(), call_id.clone());
            let events = tx.clone();
            let ctx = ToolContext::new(
                call_id.clone(),
                self.cancel.clone(),
                Updates::Sink(Box::new(move |output| {
                    // The run thread may be gone only after the tool returned; ignore
                    // then.
                    let _ = updates.send(ToolMsg::Update {
                        call_id: update_id.to_string(),
                        output,
                    });
                })),
            )
            .with_asker(Asker::new(
                call_id,
                self.inner.elicitations.clone(),
                Arc::new(move |event| {
                    let _ = events.send(ToolMsg::Event(event));
                }),
            ));
            let worker = Worker::new(index, tx.clone());
            let name = call.name.clone();
            // The worker runs the tool inside the call's span (feature `tracing`).
            let span = self.trace.tool(&call.id);
            batch.running += 1;
            // `work` catches the tool's panics, and `worker` reports the call done
            // whatever happens: also when the thread cannot start (the closure, and the
            // worker in it, are dropped then), so that error needs no handling here.
            // The catch keeps a panic of our own code from reaching the scope, which
            // would raise it again on this thread.
            let _ = std::thread::Builder::new()
                .name("pagent-tool".into())
                .spawn_scoped(scope, move || {
                    let _ =
                        guard::catch(|| span.in_scope(|| work(worker, &name, &tool, args, ctx)));
                });
        }
    }

    /// Settles the calls of the final answer turn after `max_turns` (see `FinalTurn`)
    /// without running them: each gets an error result, appended as a message. No tool
    /// starts, so there is no `ToolStart` / `ToolEnd`. Returns the results in call order.
    pub(crate) fn settle_final(
        &mut self,
        calls: &[&ToolCall],
        reply: &AssistantMessage,
    ) -> Vec<Arc<ToolResultMessage>> {
        let text = not_run(reply).unwrap_or(if self.answering() {
            super::output::NOT_RUN
        } else {
            FINAL_TURN
        });
        let results: Vec<_> = calls
            .iter()
            .map(|call| Arc::new(Run::tool_result(call, text, true)))
            .collect();
        for r in &results {
            self.append(Message::ToolResult(ToolResultMessage::clone(r)));
        }
        results
    }

    /// The id of call `index` of the reply, as the reply's partial shared it (see
    /// `Spares::call_ids`); a copy when it is not that one.
    fn call_id(&self, index: usize, call: &ToolCall) -> Arc<str> {
        match self.spares.call_ids.get(index) {
            Some(id) if **id == *call.id => id.clone(),
            _ => Arc::from(call.id.as_str()),
        }
    }

    /// The tool the model calls `name`, and that name. The tools' names are asked once per
    /// run (see `Config::tool_names`), never under a lock.
    fn find_tool<'n>(&self, name: &'n str) -> Option<(Arc<dyn Tool>, &'n str)> {
        let names = self.config.tool_names.get(&self.config.tools);
        names
            .iter()
            .position(|n| n.as_deref() == Ok(name))
            .map(|i| (self.config.tools[i].clone(), name))
    }

    /// Looks the tool up, parses and validates the arguments, asks `before_tool_call` (and
    /// validates rewritten arguments again). Returns the tool, the arguments it runs with,
    /// and whether the hook rewrote them; or the text of the call's error result.
    fn prepare(
        &mut self,
        call: &ToolCall,
        batch: &mut Batch<'_>,
    ) -> Result<(Arc<dyn Tool>, serde_json::Value, bool), String> {
        let Some((tool, name)) = self.find_tool(&call.name) else {
            let names = self.config.tool_names.get(&self.config.tools);
            // pagent's wording, byte for byte: the names as Python writes a sorted list of
            // strings (`error: unknown tool 'nope'; available: ['echo']`).
            let mut known: Vec<&str> = names.iter().filter_map(|n| n.as_deref().ok()).collect();
            known.sort_unstable();
            let known: Vec<String> = known.into_iter().map(py_repr).collect();
            let mut text = format!(
                "error: unknown tool {}; available: [{}]",
                py_repr(&call.name),
                known.join(", ")
            );
            for panic in names.iter().filter_map(|n| n.as_ref().err()) {
                text.push_str(&format!(" (and one whose `name()` panicked: {panic})"));
            }
            return Err(text);
        };
        let mut args = call.parse_arguments().map_err(|e| {
            format!(
                "invalid JSON in the arguments of `{}`: {e}; the arguments must be one JSON object",
                call.name
            )
        })?;
        let validate = |args: &serde_json::Value| match guard::catch(|| tool.validate(args)) {
            Ok(checked) => checked,
            Err(panic) => Err(format!(
                "the tool `{name}` panicked while validating its arguments: {panic}"
            )),
        };
        // Before the hook: nobody is asked to approve a call that cannot run.
        validate(&args)?;
        let mut rewritten = false;
        if let Some(decision) = self.ask_before_tool_call(call, &args, batch) {
            let decision = decision?;
            if self.cancel.is_cancelled() {
                return Err(CANCELLED.to_owned());
            }
            match decision {
                ToolDecision::Allow => {}
                ToolDecision::Block(reason) => {
                    return Err(format!("blocked: {reason}"));
                }
                ToolDecision::Rewrite(new_args) => {
                    validate(&new_args)?;
                    args = new_args;
                    rewritten = true;
                }
            }
        }
        Ok((tool, args, rewritten))
    }

    /// Calls `before_tool_call`, if set; `Err` holds the text of the call's error result (the
    /// hook panicked). While calls of the batch are running, the hook runs on a helper thread
    /// and this (run) thread keeps publishing their progress and ends, so an approval prompt
    /// does not hold back the results of tools that already finished.
    fn ask_before_tool_call(
        &mut self,
        call: &ToolCall,
        args: &serde_json::Value,
        batch: &mut Batch<'_>,
    ) -> Option<Result<ToolDecision, String>> {
        let hook = self.config.hooks.before_tool_call.clone()?;
        let cancel = self.cancel.clone();
        let request = ToolCallRequest::new(call, args, &cancel);
        // Inside the call's span, on whichever thread asks.
        let span = self.trace.tool(&call.id);
        let ask = move || {
            span.in_scope(|| guard::catch(|| hook(&request)))
                .map_err(|panic| format!("the before_tool_call hook panicked: {panic}"))
        };
        if batch.running == 0 {
            return Some(ask());
        }
        Some(std::thread::scope(|scope| {
            let (done_tx, done_rx) = crossbeam_channel::bounded(1);
            let helper = std::thread::Builder::new()
                .name("pagent-hook".into())
                .spawn_scoped(scope, move || {
                    let _ = done_tx.send(ask());
                });
            if let Err(e) = helper {
                return Err(format!(
                    "no thread could start for the before_tool_call hook: {e}"
                ));
            }
            loop {
                crossbeam_channel::select! {
                    // The helper catches the hook's panic and always answers; were it to end
                    // without an answer all the same, the call gets an error result.
                    recv(done_rx) -> answer => return answer.unwrap_or_else(|_| {
                        Err("the before_tool_call hook's thread ended without an answer".into())
                    }),
                    recv(batch.rx) -> msg => {
                        // OK because the run thread holds a sender for the whole batch.
                        let msg = msg.expect("the tool channel stays open");
                        self.handle(msg, batch);
                    }
                }
            }
        }))
    }

    /// Waits for one message from a worker and handles it.
    fn receive(&mut self, batch: &mut Batch<'_>) {
        // OK because the run thread holds a sender for the whole scope, so this never
        // disconnects, and every running worker sends Done before it exits.
        let timer = self.cancel.timer();
        let msg = crossbeam_channel::select! {
            recv(batch.rx) -> msg => msg.expect("the tool channel stays open"),
            recv(timer) -> _ => {
                // The run deadline: cancel the token, so that the tools see it, and keep
                // waiting for them (a tool that ignores its token holds the run).
                self.cancel.is_cancelled();
                batch.rx.recv().expect("the tool channel stays open")
            }
        };
        self.handle(msg, batch);
    }

    /// Turns one message from a worker into a `ToolUpdate`, or a result and its `ToolEnd`.
    fn handle(&mut self, msg: ToolMsg, batch: &mut Batch<'_>) {
        match msg {
            ToolMsg::Update { call_id, output } => {
                let tool_name = batch.tool_name(&call_id);
                self.emit(AgentEvent::ToolUpdate {
                    call_id,
                    tool_name,
                    partial: output,
                });
            }
            ToolMsg::Event(event) => self.emit(event),
            ToolMsg::Done { index, outcome } => {
                batch.running -= 1;
                self.ran(index, outcome, batch);
            }
        }
    }

    /// Runs call `index` on this (the run) thread: its updates are published as they are
    /// made, then its result and `ToolEnd`.
    fn run_here(
        &mut self,
        index: usize,
        tool: &Arc<dyn Tool>,
        args: serde_json::Value,
        batch: &mut Batch<'_>,
    ) {
        let call = batch.calls[index];
        // One copy of the id for the context, its updates and its questions.
        let call_id = self.call_id(index, call);
        // The name goes with the updates, and comes back for the result.
        let tool_name = match batch.calls.iter().position(|c| c.id == call.id) {
            Some(first) if first != index => batch.tool_name(&call.id),
            _ => batch.slots[index]
                .name
                .take()
                .unwrap_or_else(|| call.name.clone()),
        };
        let emit = self.emit_here();
        let asker = Asker::here(
            call_id.clone(),
            self.inner.elicitations.clone(),
            emit.clone(),
        );
        let updates = Updates::direct(emit, tool_name);
        let ctx = ToolContext::new(call_id, self.cancel.clone(), updates).with_asker(asker);
        let scope = self.trace.tool(&call.id);
        let outcome = scope.in_scope(|| guard::catch(|| tool.execute(args, &ctx)));
        let outcome = outcome.unwrap_or_else(|panic| {
            Err(ToolError(format!(
                "the tool `{}` panicked: {panic}",
                call.name
            )))
        });
        ctx.publish_pending();
        // The context goes before the result is recorded (its name with it).
        let name = ctx.into_tool_name();
        let slot = &mut batch.slots[index];
        if slot.name.is_none() {
            slot.name = name.filter(|n| *n == call.name);
        }
        self.ran(index, outcome, batch);
    }

    /// Records the outcome of call `index`, whose tool ran: its result and `ToolEnd`.
    fn ran(&mut self, index: usize, outcome: Result<ToolOutput, ToolError>, batch: &mut Batch<'_>) {
        let result = match outcome {
            Ok(out) => {
                let (tool_call_id, tool_name) = batch.names(index);
                ToolResultMessage {
                    tool_call_id,
                    tool_name,
                    content: out.content,
                    is_error: false,
                    details: out.details,
                }
            }
            Err(e) => batch.result(index, e.0, true),
        };
        self.finish(index, result, true, batch);
    }

    /// Applies `after_tool_call` (to calls whose tool ran), emits `ToolEnd`, records the result.
    fn finish(
        &mut self,
        index: usize,
        mut result: ToolResultMessage,
        ran: bool,
        batch: &mut Batch<'_>,
    ) {
        let call = batch.calls[index];
        if ran && let Some(hook) = &self.config.hooks.after_tool_call {
            let given = result.clone();
            result = guard::catch(|| hook(call, given)).unwrap_or_else(|panic| {
                Run::tool_result(
                    call,
                    format!("the after_tool_call hook panicked: {panic}"),
                    true,
                )
            });
        }
        let result = Arc::new(result);
        self.emit(AgentEvent::ToolEnd {
            result: result.clone(),
            duration: batch.slots[index]
                .started
                .map(|t| crate::types::whole_micros(t.elapsed())),
        });
        batch.slots[index].result = Some(result);
    }
}

/// `s` as Python's `repr` writes a string: in single quotes, or in double quotes when it
/// holds a single quote and no double quote; backslashes, the quote, `\n`, `\r`, `\t` and
/// other control characters escaped.
fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Why the calls of `reply` cannot run, whatever the run does: the reply did not end well.
fn not_run(reply: &AssistantMessage) -> Option<&'static str> {
    match reply.stop_reason {
        StopReason::Length => Some(CUT_BY_LENGTH),
        StopReason::Error => Some(CUT_BY_ERROR),
        StopReason::Aborted => Some(CANCELLED),
        StopReason::Stop | StopReason::ToolUse => None,
    }
}

/// The calls of one reply while they are handled: the workers' channel, what is known of
/// each call, the results so far (by call index), and how many workers are running.
struct Batch<'c> {
    rx: Receiver<ToolMsg>,
    calls: &'c [&'c ToolCall],
    slots: Vec<Slot>,
    running: usize,
}

/// One call of a batch while it is handled.
struct Slot {
    /// Its tool's answer to `sequential()` (`None`: no such tool).
    asked: Option<Result<bool, String>>,
    /// When its `ToolStart` went out (for its `ToolEnd`'s duration).
    started: Option<Instant>,
    /// The call's id and name as its last event carried them, given back once its
    /// listeners returned: the call's next event, then its result, take them from here
    /// rather than copy the call's again.
    id: Option<String>,
    name: Option<String>,
    /// Its result, once it has one.
    result: Option<Arc<ToolResultMessage>>,
}

impl Batch<'_> {
    /// The id and name of call `index` for its next event or its result.
    fn names(&mut self, index: usize) -> (String, String) {
        let (call, slot) = (self.calls[index], &mut self.slots[index]);
        (
            slot.id.take().unwrap_or_else(|| call.id.clone()),
            slot.name.take().unwrap_or_else(|| call.name.clone()),
        )
    }

    /// The result of call `index` with this text.
    fn result(&mut self, index: usize, content: String, is_error: bool) -> ToolResultMessage {
        let (id, name) = self.names(index);
        ToolResultMessage::new(id, name, content).with_is_error(is_error)
    }

    /// The name a `ToolUpdate` of the call `call_id` carries: that of the first call with
    /// this id.
    fn tool_name(&self, call_id: &str) -> String {
        self.calls
            .iter()
            .find(|c| c.id == call_id)
            .map(|c| c.name.clone())
            .unwrap_or_default()
    }
}

/// A worker: runs one tool, catching a panic; `worker` reports the outcome when it drops
/// (here, or while unwinding should anything below fail).
fn work(
    mut worker: Worker,
    name: &str,
    tool: &Arc<dyn Tool>,
    args: serde_json::Value,
    ctx: ToolContext,
) {
    let outcome = guard::catch(|| tool.execute(args, &ctx))
        .unwrap_or_else(|panic| Err(ToolError(format!("the tool `{name}` panicked: {panic}"))));
    // The context holds a sender of the batch channel: gone before `Done` is sent.
    drop(ctx);
    worker.set(outcome);
}

#[cfg(test)]
mod tests {
    use super::py_repr;

    /// What Python 3 prints for `repr(s)`.
    #[test]
    fn py_repr_writes_strings_as_python_does() {
        assert_eq!(py_repr("nope"), "'nope'");
        assert_eq!(py_repr("it's"), r#""it's""#);
        assert_eq!(py_repr(r#"a'b"c"#), r#"'a\'b"c'"#);
        assert_eq!(py_repr("a\\b\n\t\u{1}é"), r"'a\\b\n\t\x01é'");
    }
}
