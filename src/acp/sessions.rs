//! The live sessions of one connection: at most [`Options::max_sessions`] of them, one per
//! id, and the ids being set up (their MCP servers connecting) in between.
//!
//! Every change is made on the reading thread, under one lock, in the order the requests
//! were read: so a `session/prompt` either finds its session or does not, a `session/load`
//! of an id finds it idle (and takes it out at once, before its setup starts) or running
//! (and is refused), and no two setups of one id overlap. A session taken out (replaced,
//! dropped for the cap) is handed back to the caller, which drops it on a worker thread:
//! dropping a session ends its MCP servers, which may take a moment.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use super::codes;
use super::config::Settings;
use super::listing::{Listed, Meta};
use super::map::Refusal;
use super::servers::McpConnections;
use super::turns::Prompts;
use crate::Agent;
use crate::cancel::CancelToken;

/// One ACP session: its agent, whether a prompt of it is running, and when it was last used.
pub(super) struct Session {
    pub(super) agent: Agent,
    /// Its prompts: whether one runs, and those queued into it (see `turns`).
    pub(super) prompts: Arc<Mutex<Prompts>>,
    last_used: Mutex<(Instant, SystemTime)>,
    /// Its working directory and title, as `session/list` shows them.
    pub(super) meta: Mutex<Meta>,
    /// Its model, thinking level and mode (the config options).
    pub(super) settings: Mutex<Settings>,
    /// The session's MCP servers; the agent (and its tools, which share the connections)
    /// goes first, then these, which ends the servers, once.
    _mcp: McpConnections,
}

impl Session {
    pub(super) fn new(
        agent: Agent,
        prompts: Arc<Mutex<Prompts>>,
        mcp: McpConnections,
        meta: Meta,
        settings: Settings,
    ) -> Session {
        Session {
            agent,
            prompts,
            last_used: Mutex::new((Instant::now(), SystemTime::now())),
            meta: Mutex::new(meta),
            settings: Mutex::new(settings),
            _mcp: mcp,
        }
    }

    /// Marks the session used now (for the choice of the oldest idle one, idle expiry and
    /// `session/list`).
    pub(super) fn touch(&self) {
        *self.last_used.lock() = (Instant::now(), SystemTime::now());
    }

    fn used(&self) -> Instant {
        self.last_used.lock().0
    }

    /// The session as `session/list` shows it.
    pub(super) fn listed(&self, id: &str) -> Listed {
        Listed {
            id: id.to_owned(),
            meta: self.meta.lock().clone(),
            updated: self.last_used.lock().1,
        }
    }

    fn is_busy(&self) -> bool {
        self.prompts.lock().running
    }
}

struct Table {
    live: HashMap<String, Arc<Session>>,
    /// Ids being set up, with the token that gives their setup up (at the end of `serve`).
    setting_up: HashMap<String, CancelToken>,
}

pub(super) struct Sessions {
    table: Mutex<Table>,
    max: usize,
}

impl Sessions {
    pub(super) fn new(max: usize) -> Sessions {
        Sessions {
            table: Mutex::new(Table {
                live: HashMap::new(),
                setting_up: HashMap::new(),
            }),
            max: max.max(1),
        }
    }

    /// The live session `id`.
    pub(super) fn get(&self, id: &str) -> Result<Arc<Session>, Refusal> {
        let table = self.table.lock();
        if let Some(session) = table.live.get(id) {
            return Ok(session.clone());
        }
        let why = if table.setting_up.contains_key(id) {
            format!("session `{id}` is being set up; wait for the answer to its request")
        } else {
            format!("no session `{id}`")
        };
        Err((codes::RESOURCE_NOT_FOUND, why))
    }

    /// Reserves `id` for a session being set up (`replace`: a `session/load`, which takes
    /// a live session of that id out, unless a prompt of it runs). Makes room under the cap
    /// by taking out the idle session used longest ago. Returns the sessions taken out, for
    /// the caller to drop.
    ///
    /// # Errors
    /// A prompt of session `id` runs; `id` is being set up already; every one of the
    /// `max` sessions runs a prompt or is being set up.
    pub(super) fn reserve(
        &self,
        id: &str,
        replace: bool,
        setup: CancelToken,
    ) -> Result<Vec<Arc<Session>>, Refusal> {
        let mut table = self.table.lock();
        if table.setting_up.contains_key(id) {
            return Err((
                codes::INVALID_REQUEST,
                format!("session `{id}` is being set up already"),
            ));
        }
        let mut out = Vec::new();
        if replace && let Some(old) = table.live.get(id) {
            if old.is_busy() {
                return Err((
                    codes::INVALID_REQUEST,
                    format!(
                        "session `{id}` has a prompt running: cancel it (session/cancel) and \
                         wait for its answer before loading the session again"
                    ),
                ));
            }
            out.extend(table.live.remove(id));
        }
        while table.live.len() + table.setting_up.len() >= self.max {
            let oldest = (table.live.iter())
                .filter(|(_, s)| !s.is_busy())
                .min_by_key(|(_, s)| s.used())
                .map(|(id, _)| id.clone());
            let Some(oldest) = oldest else {
                // Nothing taken out is put back: a replaced session stays replaced.
                return Err((
                    codes::INTERNAL_ERROR,
                    format!(
                        "{} sessions are live and none is idle: no room for another",
                        self.max
                    ),
                ));
            };
            out.extend(table.live.remove(&oldest));
        }
        table.setting_up.insert(id.to_owned(), setup);
        Ok(out)
    }

    /// Ends the setup of `id`: its session goes live, or (`None`) the id is free again.
    pub(super) fn settle(&self, id: &str, session: Option<Arc<Session>>) {
        let mut table = self.table.lock();
        table.setting_up.remove(id);
        if let Some(session) = session {
            table.live.insert(id.to_owned(), session);
        }
    }

    /// The connection ends: every run is aborted (each prompt claimed its agent when it was
    /// read, so this reaches runs whose thread has not started yet) and every setup given up.
    pub(super) fn end_all(&self) {
        let table = self.table.lock();
        for session in table.live.values() {
            session.agent.abort();
        }
        for setup in table.setting_up.values() {
            setup.cancel();
        }
    }

    /// Takes the live session `id` out (`session/close`, `session/delete`): the caller
    /// ends it. `None` when no session of that id is live.
    pub(super) fn remove(&self, id: &str) -> Option<Arc<Session>> {
        self.table.lock().live.remove(id)
    }

    /// Takes out the idle sessions unused for `timeout` (idle expiry), for the caller to end.
    pub(super) fn expire(&self, timeout: Duration) -> Vec<Arc<Session>> {
        let mut table = self.table.lock();
        let Some(before) = Instant::now().checked_sub(timeout) else {
            return Vec::new();
        };
        let expired: Vec<String> = (table.live.iter())
            .filter(|(_, s)| !s.is_busy() && s.used() < before)
            .map(|(id, _)| id.clone())
            .collect();
        expired
            .iter()
            .filter_map(|id| table.live.remove(id))
            .collect()
    }

    /// Every live session, still live.
    pub(super) fn live(&self) -> Vec<Arc<Session>> {
        self.table.lock().live.values().cloned().collect()
    }

    /// Every live session with its id.
    pub(super) fn live_by_id(&self) -> Vec<(String, Arc<Session>)> {
        let table = self.table.lock();
        table
            .live
            .iter()
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect()
    }

    /// Every live session, taken out (to be dropped once every run has ended).
    pub(super) fn take_all(&self) -> Vec<Arc<Session>> {
        self.table.lock().live.drain().map(|(_, s)| s).collect()
    }
}
