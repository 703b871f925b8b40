//! Wire replay for any test scenario: record each event's wire line with the snapshot the
//! agent published for it, then check that a `wire::Mirror` rebuilds every one of them.

use std::sync::{Arc, Mutex};

use pagent::{Agent, State, wire};

/// A wire line and the snapshot the agent published with its event.
type Published = (String, Arc<State>);

/// Subscribes to an agent; when dropped at the end of a passing test it replays the wire
/// lines through a `wire::Mirror` and asserts that, line by line, the mirror holds the
/// snapshot the agent published with that event (compared as `State::timeline`).
pub struct MirrorCheck {
    published: Arc<Mutex<Vec<Published>>>,
    start: Arc<State>,
}

impl MirrorCheck {
    pub fn attach(agent: &Agent) -> MirrorCheck {
        let published = Arc::new(Mutex::new(Vec::new()));
        let (sink, handle) = (published.clone(), agent.handle());
        agent
            .subscribe(move |e| {
                let line = wire::encode_event_line(e);
                sink.lock().unwrap().push((line, handle.snapshot()));
            })
            .keep();
        MirrorCheck {
            published,
            start: agent.snapshot(),
        }
    }
}

impl Drop for MirrorCheck {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let mut mirror = wire::Mirror::from_state(self.start.timeline());
        for (i, (line, published)) in self.published.lock().unwrap().iter().enumerate() {
            mirror.apply_line(line).unwrap();
            assert_eq!(
                mirror.state().timeline(),
                published.timeline(),
                "the mirror differs from the published snapshot after line {i}: {line}"
            );
        }
    }
}
