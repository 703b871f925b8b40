//! The ACP server: reads requests, keeps the sessions, runs prompts on threads of a scope.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, ErrorKind as IoKind, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use super::input::{self, McpServer};
use super::map::{self, Refusal, ToolCallUpdate, ToolStatus, Update};
use super::{Options, PROTOCOL_VERSION, SessionInfo, ToolKind, codes};
use crate::cancel::CancelToken;
use crate::hooks::{ToolCallRequest, ToolDecision};
use crate::jsonrpc::{Call, LineOut, LinkError, Peer, Pool, Reply, RpcError};
use crate::message::ToolCall;
use crate::tool::Tool;
use crate::{Agent, AgentBuilder, Error, session};

/// One ACP session: its agent, and whether a prompt of it is running.
struct Session {
    agent: Agent,
    busy: AtomicBool,
    /// The session's MCP servers, closed when the session ends (after its agent).
    _mcp: McpConnections,
}

/// What a session's permission hook shares with the server.
struct Shared {
    peer: Arc<Peer>,
    options: Options,
}

/// The most prompts running at once, over all sessions; one more is refused.
const MAX_RUNS: usize = 64;

pub(super) fn serve<F>(
    factory: &F,
    input: impl BufRead,
    output: impl Write + Send + 'static,
    options: &Options,
) -> Result<(), Error>
where
    F: Fn(&SessionInfo) -> Result<AgentBuilder, Error> + Sync,
{
    let out = Arc::new(LineOut::spawn("pagent-acp-out", output, options.output)?);
    let shared = Arc::new(Shared {
        peer: Arc::new(Peer::new(out.clone())),
        options: options.clone(),
    });
    let server = Server {
        factory,
        shared: &shared,
        sessions: Mutex::new(HashMap::new()),
        next_session: AtomicU64::new(0),
    };
    let read = std::thread::scope(|scope| {
        let runs = Pool::scoped(scope, "pagent-acp-run", MAX_RUNS);
        let read = shared
            .peer
            .serve_lines(input, options.max_line_len, |call| {
                server.handle(&runs, call);
            });
        // Nobody is left to read the runs' updates or answer their permission requests: end
        // them all, so that the pool's threads end and no thread outlives `serve`. Each
        // prompt claimed its agent when it was read, so one abort reaches every run, also
        // one whose thread has not started yet.
        shared.peer.close(LinkError::Closed);
        for session in server.sessions.lock().values() {
            session.agent.abort();
        }
        read
    });
    // Every run has ended: the sessions end, and with them their MCP servers.
    server.sessions.lock().clear();
    let written = out.finish();
    read?;
    match written {
        Err(LinkError::Io(e)) if e.io_kind() != Some(IoKind::BrokenPipe) => Err(e),
        Err(e @ LinkError::Stalled { .. }) => Err(e.to_error()),
        _ => Ok(()),
    }
}

struct Server<'a, F> {
    factory: &'a F,
    shared: &'a Arc<Shared>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    next_session: AtomicU64,
}

impl<'a, F> Server<'a, F>
where
    F: Fn(&SessionInfo) -> Result<AgentBuilder, Error> + Sync,
{
    fn handle<'scope>(&'scope self, runs: &Pool<'scope>, call: Call) {
        let Call { id, method, params } = call;
        let params = &params.unwrap_or_else(|| Value::Object(Map::new()));
        let answer = match method.as_str() {
            "initialize" => self.initialize(params),
            "authenticate" => Ok(Some(json!({}))),
            "session/new" => self.new_session(params, false),
            "session/load" => self.new_session(params, true),
            "session/prompt" => self.prompt(runs, params, id.clone()),
            "session/cancel" => self.cancel(params),
            other => Err((codes::METHOD_NOT_FOUND, format!("unknown method `{other}`"))),
        };
        self.shared
            .peer
            .answer(id.as_ref(), answer.map_err(RpcError::from));
    }

    fn initialize(&self, params: &Value) -> Result<Option<Value>, Refusal> {
        if !params.get("protocolVersion").is_some_and(Value::is_u64) {
            return Err(bad_params("initialize needs `protocolVersion`, an integer"));
        }
        let options = &self.shared.options;
        // One version is spoken, 1. A client asking for a later one gets the latest we speak,
        // as the protocol's negotiation says, and so does one asking for an earlier one: it
        // decides whether to go on.
        Ok(Some(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": options.session_dir.is_some(),
                "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                // Stdio servers need no capability; HTTP ones the MCP client (feature `mcp`).
                "mcpCapabilities": {"http": cfg!(feature = "mcp"), "sse": false},
            },
            "agentInfo": {"name": options.name, "title": options.title, "version": options.version},
            "authMethods": [],
        })))
    }

    fn new_session(&self, params: &Value, load: bool) -> Result<Option<Value>, Refusal> {
        let method = if load { "session/load" } else { "session/new" };
        let Some(cwd) = params.get("cwd").and_then(Value::as_str) else {
            return Err(bad_params(&format!("{method} needs `cwd`, a string")));
        };
        let servers = match params.get("mcpServers") {
            None => Vec::new(),
            Some(Value::Array(list)) => list
                .iter()
                .map(McpServer::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|why| bad_params(&why))?,
            Some(_) => return Err(bad_params("`mcpServers` must be a list")),
        };
        let (id, saved) = if load {
            let Some(id) = params.get("sessionId").and_then(Value::as_str) else {
                return Err(bad_params("session/load needs `sessionId`, a string"));
            };
            (id.to_owned(), Some(self.saved(id)?))
        } else {
            (self.new_id(), None)
        };
        let (tools, mcp) = connect_mcp_servers(&servers, Path::new(cwd))?;
        let info = SessionInfo {
            id: id.clone(),
            cwd: PathBuf::from(cwd),
            loaded: load,
        };
        let failed = |e: Error| {
            (
                codes::INTERNAL_ERROR,
                format!("no agent for the session: {e}"),
            )
        };
        let mut builder = (self.factory)(&info).map_err(failed)?;
        for tool in tools {
            builder = builder.tool_arc(tool);
        }
        if let Some(saved) = &saved {
            builder = builder.messages(saved.iter().cloned());
        }
        let builder = permission_hook(builder, self.shared, &id);
        let agent = builder.build().map_err(failed)?;
        if let Some(dir) = &self.shared.options.session_dir {
            let path = dir.join(format!("{id}.jsonl"));
            let writer = if load {
                session::Writer::append(&path)
            } else {
                session::Writer::create(&path)
            };
            agent.subscribe(writer.map_err(failed)?.listener()).keep();
        }
        let shared = self.shared.clone();
        let session_id = id.clone();
        agent
            .subscribe(move |event| {
                let kind_of = |name: &str| shared.options.kind_of(name);
                for update in map::updates(event, &kind_of) {
                    send_update(&shared.peer, &session_id, &update);
                }
            })
            .keep();
        if let Some(saved) = &saved {
            let kind_of = |name: &str| self.shared.options.kind_of(name);
            for update in map::replay(saved, &kind_of) {
                send_update(&self.shared.peer, &id, &update);
            }
        }
        let session = Arc::new(Session {
            agent,
            busy: AtomicBool::new(false),
            _mcp: mcp,
        });
        // A loaded session replaces one of the same id in this process, and ends its run.
        if let Some(old) = self.sessions.lock().insert(id.clone(), session) {
            old.agent.abort();
        }
        Ok(Some(if load {
            json!({})
        } else {
            json!({ "sessionId": id })
        }))
    }

    /// The transcript saved for session `id`.
    fn saved(&self, id: &str) -> Result<Vec<crate::Message>, Refusal> {
        let Some(dir) = &self.shared.options.session_dir else {
            return Err((
                codes::METHOD_NOT_FOUND,
                "session/load is not offered: this agent saves no sessions".into(),
            ));
        };
        // The id names a file: nothing but the characters our ids have.
        let plain = !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        let path = dir.join(format!("{id}.jsonl"));
        if !plain || !path.is_file() {
            return Err((
                codes::RESOURCE_NOT_FOUND,
                format!("no saved session `{id}`"),
            ));
        }
        session::load(&path)
            .map(|loaded| loaded.messages)
            .map_err(|e| (codes::INTERNAL_ERROR, format!("session `{id}`: {e}")))
    }

    /// A session id no other session of this process has, and unlikely to be one of an
    /// earlier process (saved sessions share a directory).
    fn new_id(&self) -> String {
        let n = self.next_session.fetch_add(1, Ordering::Relaxed) + 1;
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        format!("{stamp:x}-{:x}-{n}", std::process::id())
    }

    fn session(&self, params: &Value) -> Result<Arc<Session>, Refusal> {
        let Some(id) = params.get("sessionId").and_then(Value::as_str) else {
            return Err(bad_params("`sessionId` must be a string"));
        };
        self.sessions
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| (codes::RESOURCE_NOT_FOUND, format!("no session `{id}`")))
    }

    /// Claims the session's agent now, on the reading thread, and runs the prompt on a
    /// thread of the pool; it answers when the run ends. The claim taken here is what a
    /// `session/cancel` read next cancels.
    fn prompt<'scope>(
        &'scope self,
        runs: &Pool<'scope>,
        params: &Value,
        id: Option<Value>,
    ) -> Result<Option<Value>, Refusal> {
        let session = self.session(params)?;
        let text = input::prompt_text(params.get("prompt").unwrap_or(&Value::Null))?;
        let still_running = || {
            (
                codes::INVALID_REQUEST,
                "a prompt of this session is still running".to_owned(),
            )
        };
        if session.busy.swap(true, Ordering::AcqRel) {
            return Err(still_running());
        }
        let Ok(claimed) = session.agent.claim_run() else {
            session.busy.store(false, Ordering::Release);
            return Err(still_running());
        };
        let peer = &self.shared.peer;
        let job_session = session.clone();
        let run = move || {
            let session = job_session;
            let outcome = claimed.prompt(text);
            // Free before answering, so a client that prompts again on the answer is served.
            session.busy.store(false, Ordering::Release);
            let Some(id) = id else { return };
            let _ = match map::prompt_answer(&outcome) {
                Ok(stop) => peer.respond(&id, &json!({ "stopReason": stop })),
                Err(refusal) => peer.respond_error(&id, &RpcError::from(refusal)),
            };
        };
        if runs.submit(run).is_err() {
            session.busy.store(false, Ordering::Release);
            return Err((
                codes::INTERNAL_ERROR,
                format!("{MAX_RUNS} prompts are running already; send this one again later"),
            ));
        }
        Ok(None)
    }

    fn cancel(&self, params: &Value) -> Result<Option<Value>, Refusal> {
        self.session(params)?.agent.abort();
        Ok(Some(json!({})))
    }
}

fn bad_params(why: &str) -> Refusal {
    (codes::INVALID_PARAMS, why.to_owned())
}

fn send_update(peer: &Peer, session_id: &str, update: &Update) {
    let params = json!({ "sessionId": session_id, "update": update });
    // A client that stopped reading closed the connection: nobody to tell.
    let _ = peer.notify("session/update", &params);
}

/// The MCP connections of one session. Dropping it (when the session ends: replaced by a
/// `session/load` of the same id, or at the end of `serve`) closes them, which ends the
/// servers' processes.
#[derive(Default)]
struct McpConnections {
    #[cfg(feature = "mcp")]
    clients: Vec<crate::mcp::Client>,
}

impl Drop for McpConnections {
    fn drop(&mut self) {
        #[cfg(feature = "mcp")]
        for client in &self.clients {
            client.close();
        }
    }
}

/// THE place where the MCP servers a client lists for a session become tools of its agent.
///
/// Without the `mcp` feature there is no MCP client, so a list with any server is refused,
/// as the protocol lets an agent do; an empty list gives no tools.
#[cfg(not(feature = "mcp"))]
fn connect_mcp_servers(
    servers: &[McpServer],
    _cwd: &std::path::Path,
) -> Result<(Vec<Arc<dyn Tool>>, McpConnections), Refusal> {
    if servers.is_empty() {
        return Ok((Vec::new(), McpConnections::default()));
    }
    Err((
        codes::INVALID_PARAMS,
        format!(
            "MCP servers are not supported by this agent ({} listed): it was built without an MCP client",
            servers.len()
        ),
    ))
}

/// THE place where the MCP servers a client lists for a session become tools of its agent.
///
/// Each server is connected through [`crate::mcp`] in list order (a stdio server started in
/// the session's working directory when that is a directory) and its tools listed, under the
/// names the server gives them. A server over SSE only is refused before anything starts;
/// a server that fails to start, initialize or list its tools refuses the session, naming
/// the server and the [`crate::mcp::McpError`], and the servers already connected are closed.
#[cfg(feature = "mcp")]
fn connect_mcp_servers(
    servers: &[McpServer],
    cwd: &std::path::Path,
) -> Result<(Vec<Arc<dyn Tool>>, McpConnections), Refusal> {
    use crate::mcp::Client;

    if let Some(McpServer::Http { name, .. }) = servers
        .iter()
        .find(|s| matches!(s, McpServer::Http { sse: true, .. }))
    {
        return Err((
            codes::INVALID_PARAMS,
            format!(
                "MCP server `{name}`: the SSE transport is not supported by this agent (stdio and http are)"
            ),
        ));
    }
    let mut tools = Vec::new();
    // Closes those connected so far when a later server fails.
    let mut connections = McpConnections::default();
    for server in servers {
        let (name, builder) = match server {
            McpServer::Stdio {
                name,
                command,
                args,
                env,
            } => {
                let mut builder =
                    Client::stdio(command.to_string_lossy()).args(args.iter().cloned());
                for (key, value) in env {
                    builder = builder.env(key.clone(), value.clone());
                }
                if cwd.is_dir() {
                    builder = builder.current_dir(cwd);
                }
                (name, builder)
            }
            McpServer::Http {
                name, url, headers, ..
            } => {
                let mut builder = Client::http(url.clone());
                for (key, value) in headers {
                    builder = builder.header(key.clone(), value.clone());
                }
                (name, builder)
            }
        };
        let failed = |e: crate::mcp::McpError| {
            (
                codes::INTERNAL_ERROR,
                format!("MCP server `{name}` could not be connected: {e}"),
            )
        };
        let client = builder.connect().map_err(failed)?;
        connections.clients.push(client.clone());
        tools.extend(client.tools().map_err(failed)?);
    }
    Ok((tools, connections))
}

/// The permission options offered for every call.
fn permission_options() -> Value {
    json!([
        {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
        {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
        {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
    ])
}

/// Puts the permission hook of session `id` around the factory's own `before_tool_call`.
fn permission_hook(builder: AgentBuilder, shared: &Arc<Shared>, id: &str) -> AgentBuilder {
    let shared = shared.clone();
    let id = id.to_owned();
    let always: Mutex<HashSet<String>> = Mutex::new(HashSet::new());
    // The client is asked about the arguments the call would run with.
    builder.ask_before_tool_call(move |request, call| {
        let kind = shared.options.kind_of(&call.name);
        let ask = (shared.options.ask)(call) && !always.lock().contains(&call.name);
        if ask {
            match ask_client(&shared, &id, request, call, kind) {
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
    kind: ToolKind,
) -> Permission {
    let params = json!({
        "sessionId": session_id,
        "toolCall": ToolCallUpdate {
            tool_call_id: call.id.clone(),
            status: Some(ToolStatus::Pending),
            title: Some(call.name.clone()),
            kind: Some(kind),
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
        None => Permission::Refused("cancelled: the prompt was cancelled".into()),
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
