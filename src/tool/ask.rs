//! Questions a running tool call asks the user (elicitation), as events of the run.
//!
//! The tool layer's side of it, beside the progress updates of [`super::Updates`]: the agent
//! makes each call's asker, the MCP client asks through it.
//!
//! A tool that may ask (an MCP tool: its server sends `elicitation/create`, or answers
//! `input_required`) runs inside [`within`], which makes the call's [`Asker`] current on the
//! tool's thread. The MCP client answers the server's questions on the thread of the request
//! they came with, that thread, so it finds the asker with [`current`] and asks through it:
//! the asker publishes `ElicitationStart` (through the tool's own way to the run thread, the
//! one its progress takes, so the events keep their place between the call's `ToolExecute`
//! and `ToolEnd`), waits for the answer, and publishes `ElicitationEnd`.
//!
//! The answer comes from the program's hook when there is one, else from
//! [`AgentHandle::answer_elicitation`](crate::AgentHandle::answer_elicitation) (a UI, the
//! wire server's `elicitation/answer`, an ACP client): [`Waiting`] holds the open questions
//! of the agent. An abort (or the request's deadline) ends every wait with `Cancel`.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::ToolContext;
use crate::cancel::CancelToken;
use crate::elicit::{
    AnswerRefused, Elicitation, ElicitationAnswer, ElicitationHook, ElicitationMode,
};
use crate::event::AgentEvent;

/// The questions of an agent that wait for an answer through it.
#[derive(Default)]
pub(crate) struct Waiting {
    slots: Mutex<Vec<Slot>>,
}

struct Slot {
    id: String,
    mode: ElicitationMode,
    answer: Sender<ElicitationAnswer>,
}

impl Waiting {
    fn open(&self, id: &str, mode: &ElicitationMode) -> Receiver<ElicitationAnswer> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.slots.lock().push(Slot {
            id: id.to_owned(),
            mode: mode.clone(),
            answer: tx,
        });
        rx
    }

    fn close(&self, id: &str) {
        self.slots.lock().retain(|s| s.id != id);
    }

    /// Answers the question `id`: checked against its form, then handed to the waiting
    /// call; the question no longer waits.
    pub(crate) fn answer(&self, id: &str, answer: ElicitationAnswer) -> Result<(), AnswerRefused> {
        let mut slots = self.slots.lock();
        let Some(i) = slots.iter().position(|s| s.id == id) else {
            return Err(AnswerRefused::NotWaiting(id.to_owned()));
        };
        let fitted = answer
            .fitted(&slots[i].mode)
            .map_err(AnswerRefused::Invalid)?;
        let slot = slots.remove(i);
        // The capacity is 1 and this is the only send: it never fails but when the asker
        // stopped waiting (aborted) a moment ago, and then nobody needs it.
        let _ = slot.answer.try_send(fitted);
        Ok(())
    }
}

/// How one tool call asks: its id, its way to publish events, the agent's open questions.
#[derive(Clone)]
pub(crate) struct Asker {
    call_id: Arc<str>,
    // Shared: a call run on the run thread uses the run's, made once for all its calls.
    emit: super::Emit,
    // A call run on the run thread publishes its events there, and only from there.
    thread: Option<ThreadId>,
    waiting: Arc<Waiting>,
}

impl Asker {
    /// An asker for a call run on a worker: `emit` sends the events to the run thread.
    pub(crate) fn new(call_id: Arc<str>, waiting: Arc<Waiting>, emit: super::Emit) -> Asker {
        Asker {
            call_id,
            emit,
            thread: None,
            waiting,
        }
    }

    /// An asker for a call run on this (the run) thread: `emit` publishes at once.
    pub(crate) fn here(call_id: Arc<str>, waiting: Arc<Waiting>, emit: super::Emit) -> Asker {
        Asker {
            thread: Some(std::thread::current().id()),
            ..Asker::new(call_id, waiting, emit)
        }
    }

    /// True when this thread may ask: any thread for a call on a worker, the run thread for
    /// a call run there.
    pub(crate) fn may_ask(&self) -> bool {
        self.thread.is_none_or(|t| t == std::thread::current().id())
    }

    /// Asks `question` as an event of the run and waits for the answer: `hook`'s, or one
    /// given through the agent when there is no hook. Returns the answer as it is to be
    /// sent (see [`ElicitationAnswer::fitted`]; a hook's answer that does not fit becomes
    /// `Cancel`).
    ///
    /// Blocks until the answer comes or `cancel` is cancelled (or its deadline passes): the
    /// wait is then given up, a hook still running left to return on its own, and the
    /// answer is `Cancel`.
    pub(crate) fn ask(
        &self,
        question: Elicitation,
        hook: Option<&ElicitationHook>,
        cancel: &CancelToken,
    ) -> ElicitationAnswer {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = format!("elicitation-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let request = Arc::new(question);
        let answers = match hook {
            Some(hook) => by_hook(hook, &request, cancel),
            None => self.waiting.open(&id, &request.mode),
        };
        (self.emit)(AgentEvent::ElicitationStart {
            id: id.clone(),
            tool_call_id: self.call_id.to_string(),
            request: request.clone(),
        });
        let timer = cancel.timer();
        let answer = if cancel.is_cancelled() {
            ElicitationAnswer::Cancel
        } else {
            crossbeam_channel::select! {
                recv(answers) -> answer => answer.unwrap_or(ElicitationAnswer::Cancel),
                recv(cancel.receiver()) -> _ => ElicitationAnswer::Cancel,
                recv(timer) -> _ => ElicitationAnswer::Cancel,
            }
        };
        if hook.is_none() {
            self.waiting.close(&id);
        }
        let answer = answer
            .fitted(&request.mode)
            .unwrap_or(ElicitationAnswer::Cancel);
        (self.emit)(AgentEvent::ElicitationEnd {
            id,
            tool_call_id: self.call_id.to_string(),
            answer: answer.clone(),
        });
        answer
    }
}

/// Runs `hook` on a thread of its own, so that an abort gives the wait up without waiting
/// for the hook: its answer comes on the receiver (`Cancel` for a panic or a thread that
/// cannot start).
fn by_hook(
    hook: &ElicitationHook,
    question: &Arc<Elicitation>,
    cancel: &CancelToken,
) -> Receiver<ElicitationAnswer> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let (hook, question, cancel) = (hook.clone(), question.clone(), cancel.clone());
    let started = std::thread::Builder::new()
        .name("pagent-elicitation".into())
        .spawn({
            let tx = tx.clone();
            move || {
                let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    hook(&question, &cancel)
                }))
                .unwrap_or(ElicitationAnswer::Cancel);
                let _ = tx.send(answer);
            }
        });
    if started.is_err() {
        let _ = tx.send(ElicitationAnswer::Cancel);
    }
    rx
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Asker>>> = const { RefCell::new(None) };
}

/// Runs `f` with the asker of `ctx`'s call current on this thread (none for a detached
/// context, or for a call of the run thread run from another thread: its events could not
/// be published from here).
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) fn within<R>(ctx: &ToolContext, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<Arc<Asker>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
    let asker = ctx.asker().filter(|a| a.may_ask()).cloned().map(Arc::new);
    let _reset = Reset(CURRENT.with(|c| c.replace(asker)));
    f()
}

/// The asker of the tool call running on this thread, if any.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) fn current() -> Option<Arc<Asker>> {
    CURRENT.with(|c| c.borrow().clone())
}
