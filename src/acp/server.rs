//! The ACP server: reads requests on the peer, keeps the sessions, sets sessions up and runs
//! prompts on bounded pools of threads, so that the reading thread never waits.

use std::io::{BufRead, ErrorKind as IoKind, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::input::{self, McpServer};
use super::map::{self, Refusal, Update};
use super::permission::permission_hook;
use super::servers;
use super::sessions::{Session, Sessions};
use super::{Options, PROTOCOL_VERSION, SessionInfo, codes};
use crate::cancel::CancelToken;
use crate::jsonrpc::{Call, LineOut, LinkError, Peer, Pool, RpcError};
use crate::trace::Served;
use crate::{AgentBuilder, Error, Message, session};

/// What a session's listeners and permission hook share with the server.
pub(super) struct Shared {
    pub(super) peer: Arc<Peer>,
    pub(super) options: Options,
}

/// The most prompts running at once, over all sessions; one more is refused.
const MAX_RUNS: usize = 64;

/// The most sessions being set up at once (their MCP servers connecting); one more is
/// refused.
const MAX_SETUPS: usize = 8;

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
        sessions: Sessions::new(options.max_sessions),
        next_session: AtomicU64::new(0),
    };
    let read = std::thread::scope(|scope| {
        let pools = Pools {
            runs: Pool::scoped(scope, "pagent-acp-run", MAX_RUNS),
            setups: Pool::scoped(scope, "pagent-acp-setup", MAX_SETUPS),
        };
        let read = shared
            .peer
            .serve_lines(input, options.max_line_len, |call| {
                server.handle(&pools, call);
            });
        // Nobody is left to read the runs' updates or answer their permission requests: end
        // them all, and the setups under way, so that the pools' threads end and no thread
        // outlives `serve`.
        shared.peer.close(LinkError::Closed);
        server.sessions.end_all();
        read
    });
    // Every run has ended: the sessions end, and with them their MCP servers.
    drop(server.sessions.take_all());
    let written = out.finish();
    read?;
    match written {
        Err(LinkError::Io(e)) if e.io_kind() != Some(IoKind::BrokenPipe) => Err(e),
        Err(e @ LinkError::Stalled { .. }) => Err(e.to_error()),
        _ => Ok(()),
    }
}

struct Pools<'scope> {
    runs: Pool<'scope>,
    setups: Pool<'scope>,
}

struct Server<'a, F> {
    factory: &'a F,
    shared: &'a Arc<Shared>,
    sessions: Sessions,
    next_session: AtomicU64,
}

/// A `session/new` or `session/load` read and checked, to be set up on a worker.
struct Opening {
    id: String,
    cwd: PathBuf,
    servers: Vec<McpServer>,
    /// The saved transcript of a `session/load`.
    saved: Option<Vec<Message>>,
}

impl<'a, F> Server<'a, F>
where
    F: Fn(&SessionInfo) -> Result<AgentBuilder, Error> + Sync,
{
    fn handle<'scope>(&'scope self, pools: &Pools<'scope>, call: Call) {
        let Call { id, method, params } = call;
        let params = &params.unwrap_or_else(|| Value::Object(Map::new()));
        let answer = match method.as_str() {
            "initialize" => self.initialize(params),
            "authenticate" => Ok(Some(json!({}))),
            "session/new" => self.open_session(&pools.setups, params, false, id.clone()),
            "session/load" => self.open_session(&pools.setups, params, true, id.clone()),
            "session/prompt" => self.prompt(&pools.runs, params, id.clone()),
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

    /// Checks a `session/new` or `session/load` and reserves its id on the reading thread,
    /// then sets the session up on a worker, which answers: connecting its MCP servers may
    /// take a while, and the other sessions' requests are read meanwhile.
    fn open_session<'scope>(
        &'scope self,
        setups: &Pool<'scope>,
        params: &Value,
        load: bool,
        request: Option<Value>,
    ) -> Result<Option<Value>, Refusal> {
        let opening = self.opening(params, load)?;
        let setup = CancelToken::new();
        let replaced = self.sessions.reserve(&opening.id, load, setup.clone())?;
        let id = opening.id.clone();
        let job = move || {
            // The sessions taken out end here, off the reading thread (their MCP servers may
            // take a moment), and before a loaded session opens its file again.
            drop(replaced);
            let made = self.set_up(&opening, &setup);
            let peer = &self.shared.peer;
            let answer = match made {
                Ok(session) => {
                    self.sessions.settle(&opening.id, Some(session));
                    Ok(if load {
                        json!({})
                    } else {
                        json!({ "sessionId": opening.id })
                    })
                }
                Err(refusal) => {
                    self.sessions.settle(&opening.id, None);
                    Err(RpcError::from(refusal))
                }
            };
            peer.answer(request.as_ref(), answer.map(Some));
        };
        if setups.submit(job).is_err() {
            self.sessions.settle(&id, None);
            return Err((
                codes::INTERNAL_ERROR,
                format!("{MAX_SETUPS} sessions are being set up already; try again later"),
            ));
        }
        Ok(None)
    }

    /// The checked params of a `session/new` or `session/load`.
    fn opening(&self, params: &Value, load: bool) -> Result<Opening, Refusal> {
        let method = if load { "session/load" } else { "session/new" };
        let Some(cwd) = params.get("cwd").and_then(Value::as_str) else {
            return Err(bad_params(&format!("{method} needs `cwd`, a string")));
        };
        if !Path::new(cwd).is_absolute() {
            return Err(bad_params(&format!(
                "{method} needs `cwd`, an absolute path, not `{cwd}`"
            )));
        }
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
        Ok(Opening {
            id,
            cwd: PathBuf::from(cwd),
            servers,
            saved,
        })
    }

    /// Connects the session's MCP servers, builds its agent and opens its file; for a load,
    /// replays the saved transcript. On a worker thread.
    fn set_up(&self, opening: &Opening, setup: &CancelToken) -> Result<Arc<Session>, Refusal> {
        let Opening {
            id,
            cwd,
            servers,
            saved,
        } = opening;
        let shared = self.shared;
        let connected = servers::connect(servers, cwd, &shared.options, setup)?;
        let info = SessionInfo {
            id: id.clone(),
            cwd: cwd.clone(),
            loaded: saved.is_some(),
        };
        let failed = |e: Error| {
            (
                codes::INTERNAL_ERROR,
                format!("no agent for the session: {e}"),
            )
        };
        let mut builder = (self.factory)(&info).map_err(failed)?;
        for tool in connected.tools {
            builder = builder.tool_arc(tool);
        }
        if let Some(saved) = saved {
            builder = builder.messages(saved.iter().cloned());
        }
        let agent = permission_hook(builder, shared, id)
            .build()
            .map_err(failed)?;
        if let Some(dir) = &shared.options.session_dir {
            // One writer per file (the session's id is live once only), appending: every
            // write goes to the end of the file, whoever else has it open.
            let writer = session::Writer::append(dir.join(format!("{id}.jsonl")));
            agent.subscribe(writer.map_err(failed)?.listener()).keep();
        }
        let mcp_tools = connected.names;
        let (listening, session_id, handle) = (shared.clone(), id.clone(), agent.handle());
        agent
            .subscribe(move |event| {
                let kind_of = |name: &str| listening.options.kind_of(name);
                // A plan is the agent's own: what an MCP server's tool returns is not one.
                let plans_from = |tool: &str| !mcp_tools.contains(tool);
                for update in map::updates(event, &kind_of, &plans_from) {
                    if send_update(&listening.peer, &session_id, &update).is_err() {
                        // The client stopped reading: the connection is closed, and the run
                        // has nobody to tell.
                        handle.abort();
                        return;
                    }
                }
            })
            .keep();
        if let Some(saved) = saved {
            let kind_of = |name: &str| shared.options.kind_of(name);
            for update in map::replay(saved, &kind_of) {
                let _ = send_update(&shared.peer, id, &update);
            }
        }
        Ok(Arc::new(Session::new(agent, connected.connections)))
    }

    /// The transcript saved for session `id`.
    fn saved(&self, id: &str) -> Result<Vec<Message>, Refusal> {
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
        self.sessions.get(id)
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
        session.touch();
        let peer = &self.shared.peer;
        let job_session = session.clone();
        // The run's spans (feature `tracing`) go under the request's, whose parent is the
        // trace context the client sent in `params._meta`.
        let served = Served::open("session/prompt", id.as_ref(), Some(params));
        let run = move |served: &Served| {
            let session = job_session;
            let outcome = claimed.prompt(text);
            session.touch();
            // Free before answering, so a client that prompts again on the answer is served.
            session.busy.store(false, Ordering::Release);
            let Some(id) = id else { return };
            let _ = match map::prompt_answer(&outcome) {
                Ok(stop) => peer.respond(&id, &json!({ "stopReason": stop })),
                Err(refusal) => {
                    served.failed(refusal.0, &refusal.1);
                    peer.respond_error(&id, &RpcError::from(refusal))
                }
            };
        };
        if runs.submit(move || served.run(run)).is_err() {
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

fn send_update(peer: &Peer, session_id: &str, update: &Update) -> Result<(), LinkError> {
    let params = json!({ "sessionId": session_id, "update": update });
    peer.notify("session/update", &params)
}
