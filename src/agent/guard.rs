//! The one place user code runs: tools (every trait method), hooks, and, by adoption, the
//! listeners and the provider.
//!
//! [`catch`] runs a closure and turns a panic into its message, so that no panic of user
//! code ever unwinds through the loop. What a caught panic becomes depends on who asked:
//! an error result for a tool call (its call still gets exactly one result), a typed
//! [`Error::Panic`] ending the run for a hook that must succeed (`before_turn`,
//! `transform_context`, a tool definition a hook put in place).
//!
//! [`Worker`] is owned by each tool worker thread: whatever happens in that thread, its
//! `Drop` reports the call as done, so the run thread never waits for a result that cannot
//! come.
//!
//! Two call sites still catch panics on their own and can adopt [`catch`] with a one-line
//! change each: the listener call in `dispatch.rs` (`if let Err(message) = guard::catch(||
//! f(&event)) { self.record_panic(l.id, &event, message) }`) and the provider call in
//! `run.rs` (`guard::catch(|| provider.stream(..))`, mapping `Err(message)` to
//! `Error::Panic { source: "the provider", message }`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use crossbeam_channel::Sender;

use crate::Error;
use crate::event::AgentEvent;
use crate::tool::{ToolError, ToolOutput};

/// Runs `f`, user code, catching a panic: `Err` holds the panic's message.
///
/// The payload is dropped here too, under a catch of its own: a payload whose own `Drop`
/// panics (user code again) is forgotten rather than let loose.
pub(crate) fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let message = panic_message(&*payload);
        if let Err(again) = catch_unwind(AssertUnwindSafe(|| drop(payload))) {
            std::mem::forget(again);
        }
        message
    })
}

/// The message a panic carries (`&str` or `String`), or a placeholder.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// Runs `f`, user code that must succeed for the run to go on; a panic becomes
/// [`Error::Panic`] naming `source` ("the before_turn hook").
pub(crate) fn must<R>(source: &'static str, f: impl FnOnce() -> R) -> Result<R, Error> {
    catch(f).map_err(|message| Error::Panic { source, message })
}

/// What a tool worker tells the run thread: the agent's own protocol with its workers. A
/// tool sees none of it; its [`ToolContext`](crate::ToolContext) hands progress to a sink
/// that sends `Update`s here.
pub(crate) enum ToolMsg {
    /// Progress of the call `call_id`, from `ToolContext::update`.
    Update { call_id: String, output: ToolOutput },
    /// An event the call's tool made to be published as it is (a question it asks the
    /// user: `ElicitationStart` / `ElicitationEnd`).
    Event(AgentEvent),
    /// The outcome of the call at `index` in the batch, sent once by its [`Worker`].
    Done {
        index: usize,
        outcome: Result<ToolOutput, ToolError>,
    },
}

/// Owned by a tool worker thread: reports the call's outcome to the run thread when dropped,
/// so a call is reported done whatever its worker did (returned, panicked, or failed in our
/// own code after the tool returned). Without an outcome set, the call gets an error result.
pub(crate) struct Worker {
    index: usize,
    tx: Sender<ToolMsg>,
    outcome: Option<Result<ToolOutput, ToolError>>,
}

/// The result of a call whose worker ended without reporting an outcome.
pub(crate) const WORKER_LOST: &str = "the tool's worker ended without a result (its thread \
                                       could not start, or failed outside the tool's own code)";

impl Worker {
    pub(crate) fn new(index: usize, tx: Sender<ToolMsg>) -> Worker {
        Worker {
            index,
            tx,
            outcome: None,
        }
    }

    /// The outcome to report when the worker ends.
    pub(crate) fn set(&mut self, outcome: Result<ToolOutput, ToolError>) {
        self.outcome = Some(outcome);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let outcome = self
            .outcome
            .take()
            .unwrap_or_else(|| Err(ToolError(WORKER_LOST.to_owned())));
        // The run thread holds the receiver until every worker of the batch reported; a
        // failed send means it is gone already, and nobody waits for this call.
        let _ = self.tx.send(ToolMsg::Done {
            index: self.index,
            outcome,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_returns_the_value_or_the_message() {
        assert_eq!(catch(|| 7), Ok(7));
        assert_eq!(catch(|| -> u8 { panic!("boom") }), Err("boom".to_owned()));
        let n = 3;
        assert_eq!(
            catch(|| -> u8 { panic!("boom {n}") }),
            Err("boom 3".to_owned())
        );
        assert_eq!(
            catch(|| std::panic::panic_any(5_u32)),
            Err("a panic without a message".to_owned())
        );
    }

    #[test]
    fn a_payload_that_panics_when_dropped_is_contained() {
        struct Nasty;
        impl Drop for Nasty {
            fn drop(&mut self) {
                panic!("dropping the payload");
            }
        }
        assert_eq!(
            catch(|| std::panic::panic_any(Nasty)),
            Err("a panic without a message".to_owned())
        );
    }

    #[test]
    fn must_names_the_source() {
        let e = must("the before_turn hook", || -> u8 { panic!("no") }).unwrap_err();
        assert_eq!(e.to_string(), "the before_turn hook panicked: no");
        assert!(e.is_panic());
    }

    #[test]
    fn a_worker_reports_done_even_without_an_outcome() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let handle = std::thread::spawn(move || {
            let _worker = Worker::new(4, tx);
            panic!("after the tool returned");
        });
        assert!(handle.join().is_err());
        match rx.try_recv() {
            Ok(ToolMsg::Done {
                index: 4,
                outcome: Err(e),
            }) => assert_eq!(e.0, WORKER_LOST),
            _ => panic!("no Done from the worker"),
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut worker = Worker::new(1, tx);
        worker.set(Ok(ToolOutput::text("ok")));
        drop(worker);
        assert!(matches!(
            rx.try_recv(),
            Ok(ToolMsg::Done { index: 1, outcome: Ok(o) }) if o.to_text() == "ok"
        ));
    }
}
