//! The client's permission before a tool call runs: `session/request_permission`, and how
//! its answer decides the call.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::client_tools::Preview;
use super::map::{self, ToolCallUpdate, ToolStatus};
use super::server::Shared;
use super::{AskFn, SessionInfo, ToolKind};
use crate::AgentBuilder;
use crate::cancel::CancelToken;
use crate::hooks::{ToolCallRequest, ToolDecision};
use crate::jsonrpc::{LinkError, Reply};
use crate::message::ToolCall;

/// The permission options offered for every call.
fn permission_options() -> Value {
    json!([
        {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
        {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
        {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
    ])
}

/// Puts the permission hook of session `id` around the factory's own `before_tool_call`.
pub(super) fn permission_hook(
    builder: AgentBuilder,
    shared: &Arc<Shared>,
    info: &SessionInfo,
    mode_ask: Arc<Mutex<Option<Arc<AskFn>>>>,
) -> AgentBuilder {
    let shared = shared.clone();
    let id = info.id().to_owned();
    let preview = Preview::new(info);
    let always: Mutex<HashSet<String>> = Mutex::new(HashSet::new());
    // The client is asked about the arguments the call would run with.
    builder.ask_before_tool_call(move |request, call| {
        let kind = shared.options.kind_of(&call.name);
        // The mode's policy, else the options'; called without the lock held.
        let policy = mode_ask.lock().clone();
        let asked = match policy {
            Some(ask) => ask(call),
            None => (shared.options.ask)(call),
        };
        let ask = asked && !always.lock().contains(&call.name);
        if ask {
            match ask_client(&shared, &id, request, call, (kind, &preview)) {
                Permission::Once => {}
                Permission::Always => {
                    always.lock().insert(call.name.clone());
                }
                Permission::Refused(why) => return Some(ToolDecision::Block(why)),
                // The client cancelled the prompt turn: end the run as `session/cancel`
                // does (the call gets a "cancelled" result, the prompt answers `cancelled`).
                Permission::Cancelled => {
                    request.cancel().cancel();
                    return Some(ToolDecision::Block("cancelled by the client".into()));
                }
            }
        }
        // The call runs now: its `ToolExecute` shows it running (see `map::updates`).
        None
    })
}

enum Permission {
    Once,
    Always,
    Refused(String),
    /// The `cancelled` outcome: the client cancelled the prompt turn.
    Cancelled,
}

/// Sends `session/request_permission` for `call` and waits for the answer, or for an abort.
fn ask_client(
    shared: &Shared,
    session_id: &str,
    request: &ToolCallRequest<'_>,
    call: &ToolCall,
    (kind, preview): (ToolKind, &Preview),
) -> Permission {
    // The files a client tool works on, and the diff a write would make.
    let (locations, content) = preview.show(call, request.cancel());
    if request.cancel().is_cancelled() {
        return Permission::Refused("cancelled: the prompt was cancelled".into());
    }
    let params = json!({
        "sessionId": session_id,
        "toolCall": ToolCallUpdate {
            tool_call_id: call.id.clone(),
            status: Some(ToolStatus::Pending),
            title: Some(call.name.clone()),
            kind: Some(kind),
            content,
            locations,
            raw_input: Some(map::raw_input(call)),
            ..ToolCallUpdate::default()
        },
        "options": permission_options(),
    });
    // The wait below is the run's own (cancel, run timeout); sending never blocks for long.
    let Ok(ticket) = shared.peer.request(
        "session/request_permission",
        Some(&params),
        &CancelToken::new(),
    ) else {
        return Permission::Refused("the client is gone; nobody can permit the call".into());
    };
    match request.wait_for(ticket.replies()) {
        Some(reply) => permission(reply),
        None => {
            // Given up: the client learns it, and may close its dialog (a late answer is
            // ignored).
            let cancel = json!({ "requestId": ticket.id() });
            let _ = shared.peer.notify("$/cancel_request", &cancel);
            Permission::Refused("cancelled: the prompt was cancelled".into())
        }
    }
}

/// Reads the client's answer to `session/request_permission`.
fn permission(reply: Reply<LinkError>) -> Permission {
    let response = match reply {
        Reply::Response(Ok(result)) => result,
        Reply::Response(Err(e)) => {
            return Permission::Refused(format!(
                "the client answered with an error: {}",
                e.message
            ));
        }
        Reply::Notice(_) | Reply::Failed(_) => {
            return Permission::Refused("the client's answer never came".into());
        }
    };
    let outcome = &response["outcome"];
    match (outcome["outcome"].as_str(), outcome["optionId"].as_str()) {
        (Some("selected"), Some("allow_once")) => Permission::Once,
        (Some("selected"), Some("allow_always")) => Permission::Always,
        (Some("selected"), Some(_)) => Permission::Refused("the user rejected this call".into()),
        (Some("cancelled"), _) => Permission::Cancelled,
        _ => Permission::Refused(format!(
            "the client's answer {response} is not a permission outcome"
        )),
    }
}
