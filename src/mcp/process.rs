//! A stdio server's process and, on unix, its process group: signalled only while the
//! process is ours.
//!
//! # Why a pid is only signalled while unreaped
//! A process id names our child only until the child is reaped (`wait`): from then on the
//! kernel may hand it to any new process, and a new process that leads its own group gets
//! it as its group id too. A `kill(-pgid)` after the reap can so end a stranger's whole
//! group. Until the reap, the id is held even after the child exited (a zombie holds its
//! pid), so the group id cannot be anyone else's, and the group's other processes, such as
//! the children of a wrapper that exited, can still be ended through it.
//!
//! So the child lives in one [`State`]: `Live` owns the [`Child`] and is the only state in
//! which anything is signalled, `Reaped` keeps the exit status and nothing else. The one
//! transition is the reap, made once under the state's lock, which every signal also
//! holds: no signal can pass a reap. Whether the child exited is asked without reaping it
//! (`waitid` with `WNOWAIT`), so that asking never gives the pid away. The child is reaped
//! when the shutdown is over, or as soon as it exited with nothing of its group left
//! running (there is nothing to signal then).
//!
//! [`Process::end`] is the shutdown, run once: a second call, from another thread too,
//! waits for the first and returns; after it, nothing is ever signalled again.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long the process group has to end after `SIGTERM` before it gets `SIGKILL`.
const TERM_GRACE: Duration = Duration::from_millis(1000);

/// How often a shutdown looks again whether the child, or its group, has ended.
const POLL: Duration = Duration::from_millis(5);

/// A child process started in a process group of its own (on unix, `process_group(0)`:
/// its group id is its pid).
pub(crate) struct Process {
    pid: u32,
    state: Mutex<State>,
    /// Held for the whole of [`Process::end`], so that a second shutdown waits for the
    /// first and then finds the child reaped.
    ending: Mutex<()>,
}

enum State {
    /// Not reaped: its pid, and so its group id, is still ours, whether or not it exited.
    Live(Child),
    /// Reaped: its pid may be anyone's now, and nothing is signalled any more. The status is
    /// `None` only if `wait` failed, which it cannot for our own child.
    Reaped(Option<ExitStatus>),
}

impl Process {
    pub(crate) fn new(child: Child) -> Process {
        Process {
            pid: child.id(),
            state: Mutex::new(State::Live(child)),
            ending: Mutex::new(()),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The child's exit status once it exited; `None` while it runs. Never reaps it, so
    /// its group can still be ended.
    pub(crate) fn exit_status(&self) -> Option<ExitStatus> {
        match &mut *self.state.lock() {
            State::Live(child) => exited(child),
            State::Reaped(status) => *status,
        }
    }

    /// Reaps the child when it exited and nothing of its group is left running, so that no
    /// zombie waits for the shutdown; does nothing otherwise.
    pub(crate) fn reap_if_done(&self) {
        let mut state = self.state.lock();
        if let State::Live(child) = &mut *state
            && exited(child).is_some()
            && !group_running(child)
        {
            reap(&mut state);
        }
    }

    /// Ends the child: waits up to `grace` for it to exit (its stdin is closed by then),
    /// then ends its process group (`SIGTERM`, up to [`TERM_GRACE`] for the group to end,
    /// `SIGKILL` for what is left) and reaps it. A group with nothing running gets no
    /// signal. Elsewhere than on unix the child is killed by its own handle after `grace`.
    ///
    /// Runs once: a later call, from any thread, returns when the first is done.
    pub(crate) fn end(&self, grace: Duration) {
        let _ending = self.ending.lock();
        if matches!(*self.state.lock(), State::Reaped(_)) {
            return;
        }
        self.wait_until(Instant::now() + grace, |child| exited(child).is_some());
        self.end_group();
        let mut state = self.state.lock();
        if let State::Live(child) = &mut *state
            && exited(child).is_none()
        {
            // The child left its group, or there are no groups here: by its own pid, which
            // is still ours (it is not reaped).
            let _ = child.kill();
        }
        reap(&mut state);
    }

    /// Waits until `done` holds for the live child, or `until`; the lock is taken for each
    /// look only.
    fn wait_until(&self, until: Instant, done: impl Fn(&mut Child) -> bool) -> bool {
        loop {
            let finished = match &mut *self.state.lock() {
                State::Live(child) => done(child),
                State::Reaped(_) => true,
            };
            if finished {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(POLL);
        }
    }

    #[cfg(unix)]
    fn end_group(&self) {
        use rustix::process::Signal;
        if !self.signal_if_running(Signal::TERM) {
            return;
        }
        let ended = self.wait_until(Instant::now() + TERM_GRACE, |child| !group_running(child));
        if !ended {
            self.signal_if_running(Signal::KILL);
        }
    }

    #[cfg(not(unix))]
    fn end_group(&self) {}

    /// Sends `signal` to the child's group when something of it runs; true when it did.
    /// Only a live (unreaped) child's group can be named here, under the lock that the
    /// reap takes.
    #[cfg(unix)]
    fn signal_if_running(&self, signal: rustix::process::Signal) -> bool {
        let state = self.state.lock();
        let State::Live(child) = &*state else {
            return false;
        };
        if !group_running(child) {
            return false;
        }
        let Some(group) = group_of(child) else {
            return false;
        };
        rustix::process::kill_process_group(group, signal).is_ok()
    }
}

/// Reaps a live child once (a no-op when it was reaped); `wait` returns at once for a child
/// that exited, and the callers end it first.
fn reap(state: &mut State) {
    if let State::Live(child) = state {
        // Reaped or not, a child `wait` failed for must not be signalled again.
        *state = State::Reaped(child.wait().ok());
    }
}

/// The group id of a live child: its pid (it leads its own group).
#[cfg(unix)]
fn group_of(child: &Child) -> Option<rustix::process::Pid> {
    i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
}

/// The exit status of a live child that exited, without reaping it (`waitid` with
/// `WNOWAIT`).
#[cfg(all(unix, not(target_os = "openbsd")))]
fn exited(child: &mut Child) -> Option<ExitStatus> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    use std::os::unix::process::ExitStatusExt;
    let pid = group_of(child)?;
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    let status = waitid(WaitId::Pid(pid), options).ok()??;
    // Rebuilt as `wait` reports it, for `ExitStatus`'s own text ("exit status: 3",
    // "signal: 9 (SIGKILL)").
    let raw = match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => (code & 0xff) << 8,
        (None, Some(signal)) => (signal & 0x7f) | if status.dumped() { 0x80 } else { 0 },
        (None, None) => return None,
    };
    Some(ExitStatus::from_raw(raw))
}

/// Without `waitid`: std's `try_wait`, which reaps. [`Process`] then holds the status as
/// std keeps it, and the child's group is not signalled after (see `group_running`).
#[cfg(any(not(unix), target_os = "openbsd"))]
fn exited(child: &mut Child) -> Option<ExitStatus> {
    child.try_wait().ok().flatten()
}

/// True while a process of the live child's group has not exited. On Linux `/proc` tells
/// exited processes (zombies, which wait to be reaped) from running ones, without sending
/// anything; elsewhere `kill(-pgid, 0)` asks, which counts zombies as running.
#[cfg(target_os = "linux")]
fn group_running(child: &Child) -> bool {
    let pgid = child.id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
        let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1);
        state.is_some_and(|s| s != "Z") && pgrp == Some(pgid.as_str())
    })
}

#[cfg(all(unix, not(target_os = "linux"), not(target_os = "openbsd")))]
fn group_running(child: &Child) -> bool {
    group_of(child).is_some_and(|g| rustix::process::test_kill_process_group(g).is_ok())
}

/// Where `exited` reaps: a reaped child's group is never signalled.
#[cfg(any(not(unix), target_os = "openbsd"))]
fn group_running(_child: &Child) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_is_seen_without_reaping() {
        let child = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap();
        let process = Process::new(child);
        let until = Instant::now() + Duration::from_secs(5);
        while process.exit_status().is_none() && Instant::now() < until {
            std::thread::sleep(POLL);
        }
        assert_eq!(
            process.exit_status().map(|s| s.to_string()),
            Some("exit status: 3".into())
        );
    }
}
