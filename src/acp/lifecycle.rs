//! The session lifecycle past `session/new`: `session/list`, `session/close`,
//! `session/delete`, and the sessions the server ends by itself (the cap, idle expiry), which
//! end as a `session/close` ends them. (`session/resume` opens a session as `session/load`
//! does, without the replay: see `Server::opening`.)

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::listing::{self, Listed};
use super::super::map::Refusal;
use super::super::sessions::Session;
use super::super::{Options, SessionInfo, codes};
use super::{Server, bad_params};
use crate::jsonrpc::Pool;
use crate::{AgentBuilder, Error};

/// `sessionCapabilities` in `initialize`'s answer: list, resume and close always (live
/// sessions, and saved ones with a session directory); delete with a session directory.
pub(super) fn capabilities(options: &Options) -> Value {
    let mut caps = json!({"list": {}, "resume": {}, "close": {}});
    if options.session_dir.is_some() {
        caps["delete"] = json!({});
    }
    caps
}

/// Ends sessions taken out of the table, on a worker when one is free (their MCP servers
/// may take a moment to end): a run of one still going is aborted first, and the session
/// ends when that run lets go of it.
fn end<'scope>(setups: &Pool<'scope>, sessions: Vec<Arc<Session>>) {
    if sessions.is_empty() {
        return;
    }
    for session in &sessions {
        session.agent.abort();
    }
    // When every worker is busy the job is dropped here, and the sessions with it.
    let _ = setups.submit(move || drop(sessions));
}

impl<'a, F> Server<'a, F>
where
    F: Fn(&SessionInfo) -> Result<AgentBuilder, Error> + Sync,
{
    /// Idle expiry ([`Options::idle_timeout`]): checked as each request is read, before it
    /// is served; the sessions unused that long end as a `session/close` ends them.
    pub(super) fn expire<'scope>(&'scope self, setups: &Pool<'scope>) {
        if let Some(timeout) = self.shared.options.idle_timeout {
            end(setups, self.sessions.expire(timeout));
        }
    }

    /// `session/list`: the live sessions and, with a session directory, the saved ones,
    /// most recently used first; `cwd` keeps those of that directory. One page: a `cursor`
    /// (never given out) is refused.
    pub(super) fn list(&self, params: &Value) -> Result<Option<Value>, Refusal> {
        if params.get("cursor").is_some_and(|c| !c.is_null()) {
            return Err(bad_params(
                "no such cursor: session/list answers in one page",
            ));
        }
        let cwd = match params.get("cwd") {
            None | Some(Value::Null) => None,
            Some(Value::String(cwd)) => Some(std::path::PathBuf::from(cwd)),
            Some(_) => return Err(bad_params("`cwd` must be a string")),
        };
        let live = self.sessions.live_by_id();
        let mut all: Vec<Listed> = live.iter().map(|(id, s)| s.listed(id)).collect();
        if let Some(dir) = &self.shared.options.session_dir {
            let is_live = |id: &str| live.iter().any(|(live, _)| live == id);
            all.extend(listing::saved(dir, &is_live));
        }
        all.retain(|l| cwd.as_ref().is_none_or(|cwd| l.meta.cwd == *cwd));
        all.sort_by(|a, b| b.updated.cmp(&a.updated).then_with(|| a.id.cmp(&b.id)));
        let sessions: Vec<Value> = all.iter().map(Listed::to_json).collect();
        Ok(Some(json!({ "sessions": sessions })))
    }

    /// `session/close`: the live session ends (a prompt of it is cancelled and answers
    /// `cancelled`; its agent and MCP servers end). A saved session stays saved: it can be
    /// resumed or loaded. Answers `{}` once the session is out; an id no live session has
    /// gets -32002.
    pub(super) fn close<'scope>(
        &'scope self,
        setups: &Pool<'scope>,
        params: &Value,
    ) -> Result<Option<Value>, Refusal> {
        let id = session_id(params)?;
        let Some(session) = self.sessions.remove(id) else {
            return Err((codes::RESOURCE_NOT_FOUND, format!("no live session `{id}`")));
        };
        end(setups, vec![session]);
        Ok(Some(json!({})))
    }

    /// `session/delete` (with a session directory): closes the session if it is live and
    /// removes its saved files, so that `session/list` no longer shows it.
    pub(super) fn delete<'scope>(
        &'scope self,
        setups: &Pool<'scope>,
        params: &Value,
    ) -> Result<Option<Value>, Refusal> {
        let id = session_id(params)?;
        let Some(dir) = &self.shared.options.session_dir else {
            return Err((
                codes::METHOD_NOT_FOUND,
                "session/delete is not offered: this agent saves no sessions".into(),
            ));
        };
        let live = self.sessions.remove(id);
        let was_live = live.is_some();
        end(setups, live.into_iter().collect());
        let deleted = listing::plain_id(id) && listing::delete(dir, id);
        if !deleted && !was_live {
            return Err((codes::RESOURCE_NOT_FOUND, format!("no session `{id}`")));
        }
        Ok(Some(json!({})))
    }
}

fn session_id(params: &Value) -> Result<&str, Refusal> {
    params
        .get("sessionId")
        .and_then(Value::as_str)
        .ok_or_else(|| bad_params("`sessionId` must be a string"))
}
