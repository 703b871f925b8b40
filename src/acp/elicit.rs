//! Elicitation relayed to the client: when the client advertises `elicitation` in its
//! capabilities, the MCP servers it lists for a session ask their questions through the
//! session's agent ([`ClientBuilder::elicit_through_agent`]), and each question a tool call
//! asks ([`AgentEvent::ElicitationStart`]) is sent to the client as ACP's
//! `elicitation/create`, scoped to the session and the tool call. The client's answer goes
//! back to the server ([`AgentHandle::answer_elicitation`]); a question given up meanwhile
//! (the prompt cancelled, the server gone: its `ElicitationEnd`) is withdrawn with
//! `$/cancel_request`. When the server says a URL-mode question it asked is complete
//! (`notifications/elicitation/complete`), the client is told with ACP's
//! `elicitation/complete`, for the URL questions sent to it only.
//!
//! [`ClientBuilder::elicit_through_agent`]: crate::mcp::ClientBuilder::elicit_through_agent
//! [`AgentHandle::answer_elicitation`]: crate::AgentHandle::answer_elicitation

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::server::Shared;
use crate::cancel::CancelToken;
use crate::elicit::{AnswerRefused, Elicitation, ElicitationAnswer, ElicitationMode};
use crate::jsonrpc::Reply;
use crate::{Agent, AgentEvent, AgentHandle};

/// The elicitation modes the client advertised (`clientCapabilities.elicitation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Modes {
    form: bool,
    url: bool,
}

impl Modes {
    /// The modes of the `clientCapabilities` of `initialize`.
    pub(super) fn of(capabilities: &Value) -> Modes {
        let caps = &capabilities["elicitation"];
        let on = |mode: &str| caps.get(mode).is_some_and(Value::is_object);
        Modes {
            form: on("form"),
            url: on("url"),
        }
    }

    /// True when the client answers some kind of question.
    pub(super) fn any(self) -> bool {
        self.form || self.url
    }

    fn takes(self, question: &Elicitation) -> bool {
        match question.mode {
            ElicitationMode::Form { .. } => self.form,
            ElicitationMode::Url { .. } => self.url,
        }
    }
}

/// A question sent to the client: the token that gives its wait up, and the id of the
/// `elicitation/create` request once it is sent.
struct Asked {
    given_up: CancelToken,
    request: Option<u64>,
}

/// The questions of one session sent and not answered yet, by question id.
type Open = Arc<Mutex<HashMap<String, Asked>>>;

/// The `elicitationId`s of the servers' URL questions sent to the client in one session,
/// whose completion the client is told of (once). Holds the connection weakly: the MCP
/// clients that report completions belong to the session, which the connection holds.
#[derive(Clone, Default)]
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(super) struct Completions {
    sent: Arc<Mutex<HashSet<String>>>,
    shared: Weak<Shared>,
}

impl Completions {
    pub(super) fn new(shared: &Arc<Shared>) -> Completions {
        Completions {
            sent: Arc::default(),
            shared: Arc::downgrade(shared),
        }
    }

    /// A server said the URL question `id` is complete: the client is told when it was
    /// shown that question (an id it never saw is not passed on).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(super) fn complete(&self, id: &str) {
        if !self.sent.lock().remove(id) {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            let _ = shared
                .peer
                .notify("elicitation/complete", &json!({ "elicitationId": id }));
        }
    }
}

/// Relays the questions of `agent`'s tool calls to the client, for the session `session_id`.
pub(super) fn relay(
    agent: &Agent,
    shared: &Arc<Shared>,
    session_id: &str,
    modes: Modes,
    completions: &Completions,
) {
    if !modes.any() {
        return;
    }
    let completions = completions.clone();
    let open: Open = Arc::default();
    let (shared, session_id, handle) = (shared.clone(), session_id.to_owned(), agent.handle());
    agent
        .subscribe(move |event| match event {
            AgentEvent::ElicitationStart {
                id,
                tool_call_id,
                request,
            } => {
                if !modes.takes(request) {
                    // A mode the client does not show: nobody can answer it.
                    let _ = handle.answer_elicitation(id, ElicitationAnswer::Cancel);
                    return;
                }
                let given_up = CancelToken::new();
                open.lock().insert(
                    id.clone(),
                    Asked {
                        given_up: given_up.clone(),
                        request: None,
                    },
                );
                if let ElicitationMode::Url {
                    id: Some(server_id),
                    ..
                } = &request.mode
                {
                    completions.sent.lock().insert(server_id.clone());
                }
                let params = params(&session_id, tool_call_id, id, request);
                let (shared, handle, open, id) =
                    (shared.clone(), handle.clone(), open.clone(), id.clone());
                // The client may take minutes: never on the run thread.
                let started = std::thread::Builder::new()
                    .name("pagent-acp-elicitation".into())
                    .spawn({
                        let handle = handle.clone();
                        let id = id.clone();
                        move || ask(&shared, &params, &given_up, &open, &handle, &id)
                    });
                if started.is_err() {
                    let _ = handle.answer_elicitation(&id, ElicitationAnswer::Cancel);
                }
            }
            AgentEvent::ElicitationEnd { id, .. } => {
                // Withdrawn here, on the run thread, so the client reads the withdrawal
                // before the prompt's answer.
                if let Some(asked) = open.lock().remove(id) {
                    asked.given_up.cancel();
                    if let Some(request) = asked.request {
                        withdraw(&shared, request);
                    }
                }
            }
            _ => {}
        })
        .keep();
}

/// Tells the client that the question of the request `request` is no longer asked.
fn withdraw(shared: &Shared, request: u64) {
    let _ = shared
        .peer
        .notify("$/cancel_request", &json!({ "requestId": request }));
}

/// The `elicitation/create` params of `question`.
fn params(session_id: &str, tool_call_id: &str, id: &str, question: &Elicitation) -> Value {
    let mut params = json!({
        "sessionId": session_id,
        "toolCallId": tool_call_id,
        "message": question.message,
    });
    match &question.mode {
        ElicitationMode::Form { schema } => {
            params["mode"] = json!("form");
            params["requestedSchema"] = schema.clone();
        }
        ElicitationMode::Url { url, id: server_id } => {
            params["mode"] = json!("url");
            params["url"] = json!(url);
            params["elicitationId"] = json!(server_id.as_deref().unwrap_or(id));
        }
    }
    params
}

/// Asks the client and hands its answer to the waiting call; the question's
/// `ElicitationEnd` withdraws it when it is given up first.
fn ask(
    shared: &Shared,
    params: &Value,
    given_up: &CancelToken,
    open: &Open,
    handle: &AgentHandle,
    id: &str,
) {
    let Ok(ticket) = shared
        .peer
        .request("elicitation/create", Some(params), &CancelToken::new())
    else {
        let _ = handle.answer_elicitation(id, ElicitationAnswer::Cancel);
        return;
    };
    match open.lock().get_mut(id) {
        Some(asked) => asked.request = Some(ticket.id()),
        // Given up while it was being sent: the `ElicitationEnd` found no request to
        // withdraw.
        None => {
            withdraw(shared, ticket.id());
            return;
        }
    }
    crossbeam_channel::select! {
        recv(ticket.replies()) -> reply => {
            let answer = match reply {
                Ok(Reply::Response(Ok(result))) => {
                    ElicitationAnswer::from_json(&result).unwrap_or(ElicitationAnswer::Cancel)
                }
                // An error answer, or the client gone: nobody answers.
                _ => ElicitationAnswer::Cancel,
            };
            // Values that do not fit the form cannot go to the server: the question is
            // dismissed instead (the client had its one chance).
            if let Err(AnswerRefused::Invalid(_)) = handle.answer_elicitation(id, answer) {
                let _ = handle.answer_elicitation(id, ElicitationAnswer::Cancel);
            }
        }
        recv(given_up.receiver()) -> _ => {}
    }
}
