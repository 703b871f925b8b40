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
use crate::message::{AssistantMessage, StopReason, ToolCall, ToolResultMessage};
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
        let mut results: Vec<Option<Arc<ToolResultMessage>>> = vec![None; calls.len()];
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
        std::thread::scope(|scope| {
            let mut running = 0usize;
            for (index, call) in calls.iter().enumerate() {
                // Wait for a free slot, publishing what finished meanwhile.
                while running >= cap {
                    self.receive(&rx, calls, &mut results, &mut running);
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
                    self.prepare(call)
                };
                match settled {
                    Err(result) => self.finish(call, index, result, false, &mut results),
                    Ok((tool, args)) => {
                        let ctx = ToolContext::new(
                            call.id.clone(),
                            self.cancel.clone(),
                            Some(tx.clone()),
                        );
                        let tx = tx.clone();
                        running += 1;
                        scope.spawn(move || work(index, tool, args, ctx, tx));
                    }
                }
            }
            while running > 0 {
                self.receive(&rx, calls, &mut results, &mut running);
            }
        });
        let results: Vec<Arc<ToolResultMessage>> = results
            .into_iter()
            .zip(calls)
            .map(|(r, call)| {
                // OK because every call was either settled or its worker reported Done.
                r.unwrap_or_else(|| Arc::new(Run::tool_result(call, CANCELLED, true)))
            })
            .collect();
        for r in &results {
            self.push_result_message(r);
        }
        results
    }

    fn find_tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.config.tools.iter().find(|t| t.name() == name).cloned()
    }

    /// Looks the tool up, parses and vets the arguments, asks `before_tool_call`.
    fn prepare(
        &self,
        call: &ToolCall,
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
        if let Some(hook) = &self.config.hooks.before_tool_call {
            let request = ToolCallRequest::new(call, &args, &self.cancel);
            let decision = catch_unwind(AssertUnwindSafe(|| hook(&request))).map_err(|p| {
                fail(format!(
                    "the before_tool_call hook panicked: {}",
                    panic_message(&*p)
                ))
            })?;
            if self.cancel.is_cancelled() {
                return Err(fail(CANCELLED.to_owned()));
            }
            match decision {
                ToolDecision::Allow => {}
                ToolDecision::Block(reason) => {
                    return Err(fail(format!("blocked: {reason}")));
                }
                ToolDecision::Rewrite(new_args) => args = new_args,
            }
        }
        tool.validate(&args).map_err(fail)?;
        Ok((tool, args))
    }

    /// Handles one message from a worker.
    fn receive(
        &mut self,
        rx: &Receiver<ToolMsg>,
        calls: &[ToolCall],
        results: &mut [Option<Arc<ToolResultMessage>>],
        running: &mut usize,
    ) {
        // OK because the run thread holds a sender for the whole scope, so this never
        // disconnects, and every running worker sends Done before it exits.
        let msg = rx.recv().expect("the tool channel stays open");
        match msg {
            ToolMsg::Update { call_id, output } => {
                let tool_name = calls
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
                *running -= 1;
                let call = &calls[index];
                let result = match outcome {
                    Ok(out) => ToolResultMessage {
                        details: out.details,
                        ..Run::tool_result(call, out.content, false)
                    },
                    Err(e) => Run::tool_result(call, e.0, true),
                };
                self.finish(call, index, result, true, results);
            }
        }
    }

    /// Applies `after_tool_call` (to calls whose tool ran), emits `ToolEnd`, records the result.
    fn finish(
        &mut self,
        call: &ToolCall,
        index: usize,
        mut result: ToolResultMessage,
        ran: bool,
        results: &mut [Option<Arc<ToolResultMessage>>],
    ) {
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
        results[index] = Some(result);
    }
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
