//! Running the tool calls of one reply: hooks, validation, parallel workers, results.
//!
//! Workers are scoped threads; they never emit events. They send progress and their outcome
//! over one channel (so a tool's updates always arrive before its end), and the run thread
//! turns those into `ToolUpdate` / `ToolEnd` events in the order they arrive.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::SteeringPolicy;
use super::dispatch::panic_message;
use super::hooks::{ToolCallRequest, ToolDecision};
use super::run::Run;
use crate::event::AgentEvent;
use crate::message::{AssistantMessage, Message, StopReason, ToolCall, ToolResultMessage};
use crate::tool::{Tool, ToolContext, ToolError, ToolMsg, ToolOutput};

/// Text of the results synthesized for calls that never ran.
pub(crate) const CANCELLED: &str = "cancelled: the run was aborted before this tool call ran";
pub(crate) const SKIPPED: &str = "skipped: the user sent a new message before this tool call ran";
const CUT_BY_LENGTH: &str = "not run: the reply was cut at the output token limit before this \
                             tool call was complete; make the call again, shorter";
const CUT_BY_ERROR: &str = "not run: the reply failed before this tool call was complete";

impl Run<'_> {
    /// Runs (or settles without running) every call of `reply`; emits the tool events and the
    /// result messages; returns the results in call order.
    pub(crate) fn run_tools(
        &mut self,
        calls: &[ToolCall],
        reply: &AssistantMessage,
    ) -> Vec<Arc<ToolResultMessage>> {
        if calls.is_empty() {
            return Vec::new();
        }
        let not_run = match reply.stop_reason {
            StopReason::Length => Some(CUT_BY_LENGTH),
            StopReason::Error => Some(CUT_BY_ERROR),
            StopReason::Aborted => Some(CANCELLED),
            StopReason::Stop | StopReason::ToolUse => None,
        };
        let sequential = self.config.max_parallel_tools <= 1
            || calls
                .iter()
                .any(|c| self.find_tool(&c.name).is_some_and(|t| t.sequential()));
        let cap = if sequential {
            1
        } else {
            self.config.max_parallel_tools
        };
        let (tx, rx) = crossbeam_channel::unbounded::<ToolMsg>();
        let mut batch = Batch {
            rx,
            calls,
            results: vec![None; calls.len()],
            running: 0,
        };
        std::thread::scope(|scope| {
            for (index, call) in calls.iter().enumerate() {
                // Wait for a free slot, publishing what finished meanwhile.
                while batch.running >= cap {
                    self.receive(&mut batch);
                }
                self.emit(AgentEvent::ToolStart { call: call.clone() });
                let settled = if let Some(text) = not_run {
                    Err(Run::tool_result(call, text, true))
                } else if self.cancel.is_cancelled() {
                    Err(Run::tool_result(call, CANCELLED, true))
                } else if self.config.steering_policy == SteeringPolicy::AtToolBoundary
                    && self.steering_queued()
                {
                    Err(Run::tool_result(call, SKIPPED, true))
                } else {
                    self.prepare(call, &mut batch)
                };
                match settled {
                    Err(result) => self.finish(index, result, false, &mut batch),
                    Ok((tool, args)) => {
                        let ctx = ToolContext::new(
                            call.id.clone(),
                            self.cancel.clone(),
                            Some(tx.clone()),
                        );
                        let tx = tx.clone();
                        batch.running += 1;
                        // OK because spawning fails only when the OS is out of threads.
                        std::thread::Builder::new()
                            .name("pagent-tool".into())
                            .spawn_scoped(scope, move || work(index, tool, args, ctx, tx))
                            .expect("cannot start a tool thread");
                    }
                }
            }
            while batch.running > 0 {
                self.receive(&mut batch);
            }
        });
        let results: Vec<Arc<ToolResultMessage>> = batch
            .results
            .into_iter()
            .zip(calls)
            .map(|(r, call)| {
                // OK because every call was either settled or its worker reported Done.
                r.unwrap_or_else(|| Arc::new(Run::tool_result(call, CANCELLED, true)))
            })
            .collect();
        for r in &results {
            self.append(Message::ToolResult(ToolResultMessage::clone(r)));
        }
        results
    }

    fn find_tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.config.tools.iter().find(|t| t.name() == name).cloned()
    }

    /// Looks the tool up, parses and validates the arguments, asks `before_tool_call` (and
    /// validates rewritten arguments again).
    fn prepare(
        &mut self,
        call: &ToolCall,
        batch: &mut Batch<'_>,
    ) -> Result<(Arc<dyn Tool>, serde_json::Value), ToolResultMessage> {
        let fail = |text: String| Run::tool_result(call, text, true);
        let Some(tool) = self.find_tool(&call.name) else {
            let known: Vec<_> = self
                .config
                .tools
                .iter()
                .map(|t| t.name().to_owned())
                .collect();
            return Err(fail(format!(
                "unknown tool `{}`; the tools are: {}",
                call.name,
                known.join(", ")
            )));
        };
        let mut args = call.parse_arguments().map_err(|e| {
            fail(format!(
                "invalid JSON in the arguments of `{}`: {e}; the arguments must be one JSON object",
                call.name
            ))
        })?;
        // Before the hook: nobody is asked to approve a call that cannot run.
        tool.validate(&args).map_err(fail)?;
        if let Some(decision) = self.ask_before_tool_call(call, &args, batch) {
            let decision = decision
                .map_err(|panic| fail(format!("the before_tool_call hook panicked: {panic}")))?;
            if self.cancel.is_cancelled() {
                return Err(fail(CANCELLED.to_owned()));
            }
            match decision {
                ToolDecision::Allow => {}
                ToolDecision::Block(reason) => {
                    return Err(fail(format!("blocked: {reason}")));
                }
                ToolDecision::Rewrite(new_args) => {
                    tool.validate(&new_args).map_err(fail)?;
                    args = new_args;
                }
            }
        }
        Ok((tool, args))
    }

    /// Calls `before_tool_call`, if set; `Err` holds a panic's message. While calls of the
    /// batch are running, the hook runs on a helper thread and this (run) thread keeps
    /// publishing their progress and ends, so an approval prompt does not hold back the
    /// results of tools that already finished.
    fn ask_before_tool_call(
        &mut self,
        call: &ToolCall,
        args: &serde_json::Value,
        batch: &mut Batch<'_>,
    ) -> Option<Result<ToolDecision, String>> {
        let hook = self.config.hooks.before_tool_call.clone()?;
        let cancel = self.cancel.clone();
        let request = ToolCallRequest::new(call, args, &cancel);
        let ask =
            || catch_unwind(AssertUnwindSafe(|| hook(&request))).map_err(|p| panic_message(&*p));
        if batch.running == 0 {
            return Some(ask());
        }
        Some(std::thread::scope(|scope| {
            let (done_tx, done_rx) = crossbeam_channel::bounded(1);
            // OK because spawning fails only when the OS is out of threads.
            std::thread::Builder::new()
                .name("pagent-hook".into())
                .spawn_scoped(scope, move || {
                    let _ = done_tx.send(ask());
                })
                .expect("cannot start a hook thread");
            loop {
                crossbeam_channel::select! {
                    // OK because the helper catches the hook's panic and always sends.
                    recv(done_rx) -> answer => return answer.expect("the hook helper answers"),
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
                let tool_name = batch
                    .calls
                    .iter()
                    .find(|c| c.id == call_id)
                    .map(|c| c.name.clone())
                    .unwrap_or_default();
                self.emit(AgentEvent::ToolUpdate {
                    call_id,
                    tool_name,
                    partial: output,
                });
            }
            ToolMsg::Done { index, outcome } => {
                batch.running -= 1;
                let call = &batch.calls[index];
                let result = match outcome {
                    Ok(out) => ToolResultMessage {
                        details: out.details,
                        ..Run::tool_result(call, out.content, false)
                    },
                    Err(e) => Run::tool_result(call, e.0, true),
                };
                self.finish(index, result, true, batch);
            }
        }
    }

    /// Applies `after_tool_call` (to calls whose tool ran), emits `ToolEnd`, records the result.
    fn finish(
        &mut self,
        index: usize,
        mut result: ToolResultMessage,
        ran: bool,
        batch: &mut Batch<'_>,
    ) {
        let call = &batch.calls[index];
        if ran && let Some(hook) = &self.config.hooks.after_tool_call {
            let given = result.clone();
            result = catch_unwind(AssertUnwindSafe(|| hook(call, given))).unwrap_or_else(|p| {
                Run::tool_result(
                    call,
                    format!("the after_tool_call hook panicked: {}", panic_message(&*p)),
                    true,
                )
            });
        }
        let result = Arc::new(result);
        self.emit(AgentEvent::ToolEnd {
            result: result.clone(),
        });
        batch.results[index] = Some(result);
    }
}

/// The calls of one reply while they are handled: the workers' channel, the results so far
/// (by call index), and how many workers are running.
struct Batch<'c> {
    rx: Receiver<ToolMsg>,
    calls: &'c [ToolCall],
    results: Vec<Option<Arc<ToolResultMessage>>>,
    running: usize,
}

/// A worker: runs one tool, catching a panic, and reports the outcome.
fn work(
    index: usize,
    tool: Arc<dyn Tool>,
    args: serde_json::Value,
    ctx: ToolContext,
    tx: Sender<ToolMsg>,
) {
    let outcome: Result<ToolOutput, ToolError> =
        match catch_unwind(AssertUnwindSafe(|| tool.execute(args, &ctx))) {
            Ok(r) => r,
            Err(p) => Err(ToolError(format!(
                "the tool `{}` panicked: {}",
                tool.name(),
                panic_message(&*p)
            ))),
        };
    drop(ctx);
    let _ = tx.send(ToolMsg::Done { index, outcome });
}
