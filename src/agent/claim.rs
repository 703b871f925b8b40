//! A run claimed on one thread and run on another: how a server accepts a request on its
//! reading thread, so that a cancel read next always finds the run.

use std::fmt;

use super::run;
use super::{Agent, Prompt, RunResult};
use crate::{Error, RunError};

impl Agent {
    /// Claims the agent for a run now, to run it later, on this thread or another, with
    /// [`ClaimedRun::prompt`] or [`ClaimedRun::continue_run`].
    ///
    /// From this instant the agent is taken as if the run had started: [`Agent::is_running`]
    /// is true, a `prompt` elsewhere returns `Busy`, and an [`AgentHandle::abort`](super::AgentHandle::abort) returns
    /// true and cancels the claimed run: once it runs, it ends at once with
    /// `RunStopReason::Cancelled`. A server uses it to accept a request on its reading
    /// thread and run it on a worker: a cancel read right after the request always cancels
    /// that run, whichever thread gets ahead.
    ///
    /// ```
    /// use pagent::llm::{Faux, FauxReply};
    /// use pagent::{Agent, RunStopReason};
    ///
    /// let agent = Agent::builder().provider(Faux::default().otherwise(|_| FauxReply::text("hi"))).build()?;
    /// let claimed = agent.claim_run()?;
    /// assert!(agent.is_running());
    /// assert!(agent.abort()); // before the run's thread even started
    /// let result = std::thread::spawn(move || claimed.prompt("hello")).join().unwrap()?;
    /// assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    /// # Ok::<(), pagent::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Busy`] when a run is already active, or when called from a listener of this
    /// agent.
    pub fn claim_run(&self) -> Result<ClaimedRun, Error> {
        Ok(ClaimedRun {
            claimed: run::claim(&self.inner)?,
        })
    }
}

/// A run claimed by [`Agent::claim_run`] and not started yet: `Send`, so that it runs on
/// another thread than the one that claimed it. Dropping it unused gives the claim up (an
/// abort that landed on it then cancelled nothing).
#[must_use = "dropping a ClaimedRun gives up its claim without running"]
pub struct ClaimedRun {
    claimed: run::Claimed,
}

impl fmt::Debug for ClaimedRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimedRun")
            .field("aborted", &self.claimed.token().is_cancelled())
            .finish()
    }
}

impl ClaimedRun {
    /// Runs the claimed run on `input`, as [`Agent::prompt`] does, on the current thread.
    ///
    /// Blocks like [`Agent::prompt`]. A run aborted while it was claimed ends at once with
    /// `RunStopReason::Cancelled`: its first turn starts (the prompt is appended, a
    /// `before_turn` hook is called) and ends with an empty reply stopped as `Aborted`,
    /// without a model call, as every run aborted before its first model call does.
    ///
    /// # Errors
    /// As [`Agent::prompt`]: a [`RunError`] for a run that failed; [`Error::NothingToContinue`]
    /// for an empty prompt (the claim is given up, nothing runs).
    pub fn prompt(self, input: impl Into<Prompt>) -> Result<RunResult, RunError> {
        let input = input.into().0;
        if input.is_empty() {
            return Err(RunError::refused(Error::NothingToContinue(
                "the prompt has no message".into(),
            )));
        }
        run::run_claimed(self.claimed, run::Start::Prompt(input))
    }

    /// Resumes from the transcript, as [`Agent::continue_run`] does, on the current thread.
    ///
    /// # Errors
    /// As [`Agent::continue_run`].
    pub fn continue_run(self) -> Result<RunResult, RunError> {
        run::run_claimed(self.claimed, run::Start::Continue)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::Agent;
    use crate::llm::{Faux, FauxReply};

    #[test]
    fn an_abort_that_returns_false_never_cancels_a_run_that_claims_the_agent_meanwhile() {
        // The interleaving that lost it, held still: an abort finds no run, then must
        // release a lossless channel through the dispatched run's token, whose lock the
        // test holds. A run that claims the agent meanwhile used to get its token cancelled
        // by that abort, which returned false. Now the abort holds the claim's lock to its
        // end: the run claims after it, untouched.
        let agent = Arc::new(
            Agent::builder()
                .provider(Faux::default().otherwise(|_| FauxReply::text("ok")))
                .build()
                .unwrap(),
        );
        let shared = agent.inner.shared.clone();
        let mut dispatched = shared.lock_run_token();
        let aborter = {
            let agent = agent.clone();
            std::thread::spawn(move || agent.abort())
        };
        // Time for the aborter to reach the lock the test holds (it cannot get past it).
        std::thread::sleep(Duration::from_millis(50));
        let (claims, claimed) = crossbeam_channel::bounded(1);
        let claimer = {
            let agent = agent.clone();
            std::thread::spawn(move || {
                let claim = agent.claim_run().expect("nothing else holds the agent");
                let _ = claims.send(claim.claimed.token());
                claim
            })
        };
        // A claim that gets through now enters its run as a run would: its token becomes
        // the dispatched one (under the lock the test holds).
        if let Ok(token) = claimed.recv_timeout(Duration::from_millis(200)) {
            *dispatched = Some(token);
        }
        drop(dispatched);
        let hit = aborter.join().unwrap();
        let claim = claimer.join().unwrap();
        assert!(!hit, "no run held the agent when the abort came");
        assert!(
            !claim.claimed.token().is_cancelled(),
            "an abort that returned false cancelled the run that claimed the agent"
        );
        assert_eq!(
            claim.prompt("hi").unwrap().stop_reason,
            crate::RunStopReason::NoToolCalls
        );
    }
}
