//! The ACP server: reads requests on the peer, keeps the sessions, sets sessions up and runs
//! prompts on bounded pools of threads, so that the reading thread never waits.

use std::collections::HashMap;
use std::io::{BufRead, ErrorKind as IoKind, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use super::client_tools::{self, ClientCapabilities};
use super::commands;
use super::config::Settings;
use super::elicit;
use super::input::{self, McpServer};
use super::listing::{self, Meta};
use super::map::{self, Refusal, Update};
use super::permission::permission_hook;
use super::servers;
use super::sessions::{Session, Sessions};
use super::turns::{Asker, Found, Prompts, Queued};
use super::{Options, PROTOCOL_VERSION, SessionInfo, WhileRunning, codes};
use crate::cancel::CancelToken;
use crate::event::{AgentEvent, RunStopReason};
use crate::jsonrpc::{Call, LineOut, LinkError, Peer, Pool, RpcError};
use crate::trace::Served;
use crate::{
    Agent, AgentBuilder, AgentHandle, ClaimedRun, Error, Message, RunError, RunResult, UserMessage,
    session,
};

/// What a session's listeners and permission hook share with the server.
pub(super) struct Shared {
    pub(super) peer: Arc<Peer>,
    pub(super) options: Options,
    /// `initialize`'s `clientCapabilities`, as the client sent them (`{}` before).
    pub(super) client_capabilities: Mutex<Value>,
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
        client_capabilities: Mutex::new(json!({})),
    });
    let server = Server {
        factory,
        shared: &shared,
        sessions: Sessions::new(options.max_sessions),
        next_session: AtomicU64::new(0),
        setups: Mutex::new(HashMap::new()),
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
    /// The setups under way by the id of their request, for `$/cancel_request`.
    setups: Mutex<HashMap<String, CancelToken>>,
}

/// The requests that open a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    New,
    /// `session/load`: the saved transcript, replayed as updates.
    Load,
    /// `session/resume`: the transcript (a live session's or a saved one), not replayed.
    Resume,
}

impl Open {
    fn method(self) -> &'static str {
        match self {
            Open::New => "session/new",
            Open::Load => "session/load",
            Open::Resume => "session/resume",
        }
    }
}

/// A `session/new`, `session/load` or `session/resume` read and checked, to be set up on a
/// worker.
struct Opening {
    id: String,
    cwd: PathBuf,
    servers: Vec<McpServer>,
    /// The transcript of a `session/load` or `session/resume`.
    saved: Option<Vec<Message>>,
    /// Replay `saved` as updates (`session/load`).
    replay: bool,
    /// The title it had.
    title: Option<String>,
}

#[path = "lifecycle.rs"]
mod lifecycle;

impl<'a, F> Server<'a, F>
where
    F: Fn(&SessionInfo) -> Result<AgentBuilder, Error> + Sync,
{
    fn handle<'scope>(&'scope self, pools: &Pools<'scope>, call: Call) {
        let Call { id, method, params } = call;
        let params = &params.unwrap_or_else(|| Value::Object(Map::new()));
        self.expire(&pools.setups);
        let answer = match method.as_str() {
            "initialize" => self.initialize(params),
            "authenticate" => Ok(Some(json!({}))),
            "session/new" => self.open_session(&pools.setups, params, Open::New, id.clone()),
            "session/load" => self.open_session(&pools.setups, params, Open::Load, id.clone()),
            "session/resume" => self.open_session(&pools.setups, params, Open::Resume, id.clone()),
            "session/list" => self.list(params),
            "session/set_mode" => self.set_mode(params),
            "session/set_config_option" => self.set_config_option(params),
            // No authentication is offered, so none is left: answered as `authenticate` is.
            "logout" => Ok(Some(json!({}))),
            "session/close" => self.close(&pools.setups, params),
            "session/delete" => self.delete(&pools.setups, params),
            "session/prompt" => self.prompt(&pools.runs, params, id.clone()),
            "session/cancel" => self.cancel(params),
            STEERING => self.steering(&pools.runs, params),
            "$/cancel_request" => self.cancel_request(params),
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
        let capabilities = params.get("clientCapabilities").cloned();
        *self.shared.client_capabilities.lock() = capabilities.unwrap_or_else(|| json!({}));
        let options = &self.shared.options;
        // One version is spoken, 1. A client asking for a later one gets the latest we speak,
        // as the protocol's negotiation says, and so does one asking for an earlier one: it
        // decides whether to go on.
        Ok(Some(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": options.session_dir.is_some(),
                "sessionCapabilities": lifecycle::capabilities(options),
                "auth": {"logout": {}},
                // Images, audio and embedded resources become parts of the prompt; a model
                // that cannot take one is told by its provider's check, before any request.
                "promptCapabilities": {"image": true, "audio": true, "embeddedContext": true},
                // Stdio servers need no capability; HTTP ones the MCP client (feature `mcp`).
                "mcpCapabilities": {"http": cfg!(feature = "mcp"), "sse": false},
            },
            "agentInfo": {"name": options.name, "title": options.title, "version": options.version},
            "authMethods": [],
            // The convention of other ACP agents for steering a running turn: the
            // `_session/steering` method (see `steering`).
            "_meta": {"steering": {"supported": true}},
        })))
    }

    /// Checks a `session/new`, `session/load` or `session/resume` and reserves its id on the
    /// reading thread, then sets the session up on a worker, which answers: connecting its
    /// MCP servers may take a while, and the other sessions' requests are read meanwhile.
    fn open_session<'scope>(
        &'scope self,
        setups: &Pool<'scope>,
        params: &Value,
        open: Open,
        request: Option<Value>,
    ) -> Result<Option<Value>, Refusal> {
        let opening = self.opening(params, open)?;
        let setup = CancelToken::new();
        let replace = open != Open::New;
        let replaced = self.sessions.reserve(&opening.id, replace, setup.clone())?;
        let id = opening.id.clone();
        let key = request.as_ref().map(Value::to_string);
        if let Some(key) = &key {
            self.setups.lock().insert(key.clone(), setup.clone());
        }
        let job_key = key.clone();
        let job = move || {
            let key = job_key;
            // The sessions taken out end here, off the reading thread (their MCP servers may
            // take a moment), and before a loaded session opens its file again.
            drop(replaced);
            let made = self.set_up(&opening, &setup);
            if let Some(key) = &key {
                self.setups.lock().remove(key);
            }
            let peer = &self.shared.peer;
            let answer = match made {
                Ok(session) => {
                    let mut answer = config_of(&self.shared.options, &session);
                    if open == Open::New {
                        answer["sessionId"] = json!(opening.id);
                    }
                    self.sessions.settle(&opening.id, Some(session));
                    Ok(answer)
                }
                Err(_) if setup.is_cancelled() => {
                    self.sessions.settle(&opening.id, None);
                    Err(RpcError::new(codes::REQUEST_CANCELLED, "request cancelled"))
                }
                Err(refusal) => {
                    self.sessions.settle(&opening.id, None);
                    Err(RpcError::from(refusal))
                }
            };
            let commands = &self.shared.options.commands;
            if answer.is_err() || commands.is_empty() {
                peer.answer(request.as_ref(), answer.map(Some));
                return;
            }
            // The slash commands follow the answer at once: a prompt the client sends on
            // the answer cannot have an update of its own run written before them.
            let update = Update::AvailableCommandsUpdate {
                available_commands: commands::listed(commands),
            };
            let params = json!({"sessionId": opening.id, "update": update});
            peer.answer_then_notify(
                request.as_ref(),
                answer.map(Some),
                "session/update",
                &params,
            );
        };
        if setups.submit(job).is_err() {
            self.sessions.settle(&id, None);
            if let Some(key) = &key {
                self.setups.lock().remove(key);
            }
            return Err((
                codes::INTERNAL_ERROR,
                format!("{MAX_SETUPS} sessions are being set up already; try again later"),
            ));
        }
        Ok(None)
    }

    /// The checked params of a `session/new`, `session/load` or `session/resume`.
    fn opening(&self, params: &Value, open: Open) -> Result<Opening, Refusal> {
        let method = open.method();
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
        if open == Open::New {
            return Ok(Opening {
                id: self.new_id(),
                cwd: PathBuf::from(cwd),
                servers,
                saved: None,
                replay: false,
                title: None,
            });
        }
        let Some(id) = params.get("sessionId").and_then(Value::as_str) else {
            return Err(bad_params(&format!("{method} needs `sessionId`, a string")));
        };
        let (saved, title) = match self.sessions.get(id) {
            // A live session resumes from its own transcript.
            Ok(live) if open == Open::Resume => {
                let state = live.agent.snapshot();
                let messages = state.messages.iter().map(|m| Message::clone(m)).collect();
                (messages, live.meta.lock().title.clone())
            }
            _ => {
                let saved = self.saved(id, method)?;
                let dir = self.shared.options.session_dir.as_deref();
                let meta = dir.and_then(|dir| listing::load_meta(dir, id));
                (saved, meta.and_then(|m| m.title))
            }
        };
        Ok(Opening {
            id: id.to_owned(),
            cwd: PathBuf::from(cwd),
            servers,
            saved: Some(saved),
            replay: open == Open::Load,
            title,
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
            replay,
            title,
        } = opening;
        let shared = self.shared;
        let modes = elicit::Modes::of(&shared.client_capabilities.lock());
        let completions = elicit::Completions::new(shared);
        let connected = servers::connect(
            servers,
            cwd,
            &shared.options,
            setup,
            modes.any().then_some(&completions),
        )?;
        let info = SessionInfo {
            id: id.clone(),
            cwd: cwd.clone(),
            loaded: saved.is_some(),
            client: client_tools::ClientLink {
                peer: shared.peer.clone(),
                capabilities: ClientCapabilities::from_initialize(
                    &shared.client_capabilities.lock(),
                ),
                timeout: shared.options.client_timeout,
                command_timeout: shared.options.command_timeout,
            },
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
        let mode_ask = Arc::new(Mutex::new(None));
        let agent = permission_hook(builder, shared, &info, mode_ask.clone())
            .build()
            .map_err(failed)?;
        elicit::relay(&agent, shared, id, modes, &completions);
        let settings = Settings::new(&shared.options, &agent, mode_ask);
        let meta = Meta {
            cwd: cwd.clone(),
            title: title.clone(),
        };
        if let Some(dir) = &shared.options.session_dir {
            // One writer per file (the session's id is live once only), appending: every
            // write goes to the end of the file, whoever else has it open.
            let writer = session::Writer::append(dir.join(format!("{id}.jsonl")));
            agent.subscribe(writer.map_err(failed)?.listener()).keep();
            listing::save_meta(dir, id, &meta);
        }
        let mcp_tools = connected.names;
        let prompts = Arc::new(Mutex::new(Prompts::default()));
        let (listening, session_id, handle) = (shared.clone(), id.clone(), agent.handle());
        let cwd = cwd.clone();
        let shown = Mutex::new(map::Shown::default());
        // A client that shows compactions gets `compaction_update`s, numbered in the session.
        let compactions = shared.client_capabilities.lock()["session"]["compaction"]
            .is_object()
            .then(|| AtomicUsize::new(0));
        let answering = prompts.clone();
        // The transcript index of the reply streaming: its chunks' `messageId`.
        let reply = AtomicUsize::new(0);
        agent
            .subscribe(move |event| {
                if let AgentEvent::MessageStart { message } = event
                    && matches!(**message, Message::Assistant(_))
                {
                    reply.store(handle.snapshot().messages.len(), Ordering::Relaxed);
                }
                if let AgentEvent::MessageStart { message } = event
                    && matches!(**message, Message::User(_))
                {
                    // A follow-up starts: the prompts before it were answered.
                    let state = handle.snapshot();
                    let answered = answering
                        .lock()
                        .user_message(state.steering_queue.len(), state.follow_up_queue.len());
                    for asker in answered.into_iter().flatten() {
                        let _ = listening
                            .peer
                            .respond(&asker, &json!({ "stopReason": "end_turn" }));
                    }
                }
                let kind_of = |name: &str| listening.options.kind_of(name);
                // A plan is the agent's own: what an MCP server's tool returns is not one.
                let plans_from = |tool: &str| !mcp_tools.contains(tool);
                let in_reply = map::message_id(reply.load(Ordering::Relaxed));
                let usage = usage_update(&listening.options, event, &handle);
                let located = match event {
                    AgentEvent::ToolStart { call, .. } => client_tools::locations(call, &cwd),
                    _ => None,
                };
                let compacted = compactions.as_ref().and_then(|n| {
                    if matches!(event, AgentEvent::CompactionStart { .. }) {
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                    let id = format!("c{}", n.load(Ordering::Relaxed));
                    map::compaction(event, &id, written_summary(event, &handle))
                });
                let updates = match compacted {
                    Some(update) => vec![update],
                    None => map::updates(event, &kind_of, &plans_from),
                }
                .into_iter();
                let mut shown = shown.lock();
                let updates = updates
                    .map(|u| shown.keep(u.in_message(&in_reply).with_locations(located.clone())));
                for update in updates.chain(usage) {
                    if send_update(&listening.peer, &session_id, &update).is_err() {
                        // The client stopped reading: the connection is closed, and the run
                        // has nobody to tell.
                        handle.abort();
                        return;
                    }
                }
            })
            .keep();
        if let Some(saved) = saved.as_ref().filter(|_| *replay) {
            let kind_of = |name: &str| shared.options.kind_of(name);
            for update in map::replay(saved, &kind_of) {
                let _ = send_update(&shared.peer, id, &update);
            }
        }
        Ok(Arc::new(Session::new(
            agent,
            prompts,
            connected.connections,
            meta,
            settings,
        )))
    }

    /// The transcript saved for session `id`, for `method`.
    fn saved(&self, id: &str, method: &str) -> Result<Vec<Message>, Refusal> {
        let Some(dir) = &self.shared.options.session_dir else {
            return Err(if method == "session/load" {
                (
                    codes::METHOD_NOT_FOUND,
                    "session/load is not offered: this agent saves no sessions".into(),
                )
            } else {
                (
                    codes::RESOURCE_NOT_FOUND,
                    format!("no session `{id}` (this agent saves no sessions)"),
                )
            });
        };
        // The id names a file: nothing but the characters our ids have.
        let path = dir.join(format!("{id}.jsonl"));
        if !listing::plain_id(id) || !path.is_file() {
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

    /// A `session/prompt`. On an idle session: claims its agent now, on the reading
    /// thread, and runs the prompt on a thread of the pool, which answers when the run ends
    /// (the claim taken here is what a `session/cancel` read next cancels). While a prompt
    /// of the session runs: its content goes into that run as steering or as a follow-up
    /// ([`Options::prompt_while_running`]), and it is answered when its content was (see
    /// `turns`).
    fn prompt<'scope>(
        &'scope self,
        runs: &Pool<'scope>,
        params: &Value,
        id: Option<Value>,
    ) -> Result<Option<Value>, Refusal> {
        let session = self.session(params)?;
        let text = self.prompt_message(params)?;
        let mut prompts = session.prompts.lock();
        if prompts.running {
            let how = match self.shared.options.while_running {
                WhileRunning::Refuse => return Err(still_running()),
                WhileRunning::Steer => Queued::Steering,
                WhileRunning::FollowUp => Queued::FollowUp,
            };
            queue_into(&session.agent, &mut prompts, text, id, how);
            return Ok(None);
        }
        self.start_run(
            runs,
            &session,
            &mut prompts,
            text,
            id,
            ("session/prompt", params),
        )?;
        Ok(None)
    }

    /// `_session/steering`, the convention of other ACP agents (advertised in `initialize`
    /// as `_meta.steering.supported`): `{sessionId, prompt}` goes into the running turn as
    /// steering and answers `{"outcome": "injected"}` at once (its content is answered
    /// through the running prompt's answer). On an idle session it starts a turn of its own
    /// (`startedNewTurn`, whose updates come as a prompt's do, and no answer), unless
    /// `_meta.steering.idleBehavior` is `promptRequired`: then nothing runs and it answers
    /// `{"outcome": "promptRequired"}`.
    fn steering<'scope>(
        &'scope self,
        runs: &Pool<'scope>,
        params: &Value,
    ) -> Result<Option<Value>, Refusal> {
        let session = self.session(params)?;
        let text = self.prompt_message(params)?;
        let mut prompts = session.prompts.lock();
        if prompts.running {
            queue_into(&session.agent, &mut prompts, text, None, Queued::Steering);
            return Ok(Some(json!({ "outcome": "injected" })));
        }
        let idle = params.pointer("/_meta/steering/idleBehavior");
        if idle.and_then(Value::as_str) == Some("promptRequired") {
            return Ok(Some(json!({
                "outcome": "promptRequired",
                "reason": "no turn of this session is running: send it as session/prompt",
            })));
        }
        self.start_run(runs, &session, &mut prompts, text, None, (STEERING, params))?;
        Ok(Some(json!({ "outcome": "startedNewTurn" })))
    }

    /// `session/set_mode`: the session switches to the mode (its system prompt and tools
    /// from the next run, its approval policy at once), then
    /// `current_mode_update` and `config_option_update` tell the client.
    fn set_mode(&self, params: &Value) -> Result<Option<Value>, Refusal> {
        let session = self.session(params)?;
        let Some(mode) = params.get("modeId").and_then(Value::as_str) else {
            return Err(bad_params("session/set_mode needs `modeId`, a string"));
        };
        let options = &self.shared.options;
        session
            .settings
            .lock()
            .set_mode(options, &session.agent, mode)?;
        self.mode_changed(params, &session, true);
        Ok(Some(json!({})))
    }

    /// `session/set_config_option`: answers every config option as it now is; a mode
    /// changed this way is also sent as `current_mode_update`.
    fn set_config_option(&self, params: &Value) -> Result<Option<Value>, Refusal> {
        let session = self.session(params)?;
        let Some(config) = params.get("configId").and_then(Value::as_str) else {
            return Err(bad_params(
                "session/set_config_option needs `configId`, a string",
            ));
        };
        let value = params.get("value").unwrap_or(&Value::Null);
        let options = &self.shared.options;
        let mode_changed = session
            .settings
            .lock()
            .set(options, &session.agent, config, value)?;
        if mode_changed {
            self.mode_changed(params, &session, false);
        }
        let config = session.settings.lock().options(options);
        Ok(Some(json!({ "configOptions": config })))
    }

    /// Tells the client a session's mode changed (and its config options, unless they are
    /// in the answer).
    fn mode_changed(&self, params: &Value, session: &Session, with_options: bool) {
        let id = params["sessionId"].as_str().unwrap_or_default();
        let (mode, config) = {
            let settings = session.settings.lock();
            (
                settings.modes(&self.shared.options),
                settings.options(&self.shared.options),
            )
        };
        let current = mode.map(|m| m["currentModeId"].clone()).unwrap_or_default();
        let _ = send_update(
            &self.shared.peer,
            id,
            &Update::CurrentModeUpdate {
                current_mode_id: current,
            },
        );
        if with_options {
            let update = Update::ConfigOptionUpdate {
                config_options: config,
            };
            let _ = send_update(&self.shared.peer, id, &update);
        }
    }

    /// The text of a prompt's content, rewritten by the slash command it invokes.
    fn prompt_message(&self, params: &Value) -> Result<UserMessage, Refusal> {
        let mut parts = input::prompt_parts(params.get("prompt").unwrap_or(&Value::Null))?;
        // A command is the prompt's first text; images and files after it stay as they are.
        if let Some(crate::Part::Text { text }) = parts.first_mut() {
            *text = commands::rewrite(&self.shared.options.commands, std::mem::take(text))
                .map_err(|why| (codes::INTERNAL_ERROR, why))?;
        }
        Ok(UserMessage::from_parts(parts))
    }

    /// Claims the idle session's agent and runs `text` on a thread of the pool.
    fn start_run<'scope>(
        &'scope self,
        runs: &Pool<'scope>,
        session: &Arc<Session>,
        prompts: &mut Prompts,
        text: UserMessage,
        asker: Asker,
        (method, params): (&'static str, &Value),
    ) -> Result<(), Refusal> {
        let Ok(claimed) = session.agent.claim_run() else {
            return Err(still_running());
        };
        // The run's spans (feature `tracing`) go under the request's, whose parent is the
        // trace context the client sent in `params._meta`.
        let served = Served::open(method, asker.as_ref(), Some(params));
        prompts.start(asker);
        let id = params["sessionId"].as_str().unwrap_or_default().to_owned();
        let titled = title_from(&self.shared.options, session, &text.text());
        session.touch();
        let peer = &self.shared.peer;
        let job_session = session.clone();
        let run = move |served: &Served| {
            let session = job_session;
            if titled {
                let meta = session.meta.lock().clone();
                if let Some(dir) = &self.shared.options.session_dir {
                    listing::save_meta(dir, &id, &meta);
                }
                let info = Update::SessionInfoUpdate {
                    title: meta.title,
                    updated_at: listing::rfc3339(SystemTime::now()),
                };
                let _ = send_update(peer, &id, &info);
            }
            let (answered, outcome) = run_session(&session, claimed, text);
            for asker in answered.into_iter().flatten() {
                let _ = match map::prompt_answer(&outcome) {
                    Ok(stop) => peer.respond(&asker, &json!({ "stopReason": stop })),
                    Err(refusal) => {
                        served.failed(refusal.0, &refusal.1);
                        peer.respond_error(&asker, &RpcError::from(refusal))
                    }
                };
            }
        };
        if runs.submit(move || served.run(run)).is_err() {
            // Nothing was queued meanwhile: this is the reading thread.
            prompts.finish();
            return Err((
                codes::INTERNAL_ERROR,
                format!("{MAX_RUNS} prompts are running already; send this one again later"),
            ));
        }
        Ok(())
    }

    /// `$/cancel_request`: a prompt of ours whose content is in the transcript ends its
    /// run as `session/cancel` does; one still queued is taken out of the queue and
    /// answered `cancelled`; a session being set up gives its setup up (answered -32800).
    /// Any other id is ignored, as the protocol says.
    fn cancel_request(&self, params: &Value) -> Result<Option<Value>, Refusal> {
        let Some(id) = params.get("requestId") else {
            return Err(bad_params("$/cancel_request needs `requestId`"));
        };
        if let Some(setup) = self.setups.lock().get(&id.to_string()) {
            setup.cancel();
            return Ok(None);
        }
        for session in self.sessions.live() {
            let mut prompts = session.prompts.lock();
            let state = session.agent.snapshot();
            let (steering, follow_ups) = (state.steering_queue.len(), state.follow_up_queue.len());
            match prompts.cancel(id, steering, follow_ups) {
                Found::Nothing => continue,
                Found::Delivered => {
                    session.agent.abort();
                }
                Found::Queued(how, index) => {
                    let agent = &session.agent;
                    let mut queue = match how {
                        Queued::Steering => agent.clear_steering_queue(),
                        Queued::FollowUp => agent.clear_follow_up_queue(),
                    };
                    if index < queue.len() {
                        queue.remove(index);
                    }
                    for message in queue {
                        let _ = match how {
                            Queued::Steering => agent.steer(message),
                            Queued::FollowUp => agent.follow_up(message),
                        };
                    }
                    let _ = self
                        .shared
                        .peer
                        .respond(id, &json!({ "stopReason": "cancelled" }));
                }
            }
            return Ok(None);
        }
        Ok(None)
    }

    fn cancel(&self, params: &Value) -> Result<Option<Value>, Refusal> {
        self.session(params)?.agent.abort();
        Ok(Some(json!({})))
    }
}

/// A session's `modes` and `configOptions`, for the answer that opens it.
fn config_of(options: &Options, session: &Session) -> Value {
    let settings = session.settings.lock();
    let mut answer = json!({ "configOptions": settings.options(options) });
    if let Some(modes) = settings.modes(options) {
        answer["modes"] = modes;
    }
    answer
}

/// Gives the session its title from its first prompt (the program's, else the prompt's
/// first line), unless it has one: true when it got one now.
fn title_from(options: &Options, session: &Session, text: &str) -> bool {
    let mut meta = session.meta.lock();
    if meta.title.is_some() {
        return false;
    }
    let program = options.session_title.as_ref().and_then(|title| title(text));
    meta.title = program.or_else(|| listing::title_of(text));
    meta.title.is_some()
}

/// The `usage_update` after a reply, when the context window is known
/// ([`Options::context_window`], else the agent's own: `State::context`'s `window`).
fn usage_update(options: &Options, event: &AgentEvent, handle: &AgentHandle) -> Option<Update> {
    let AgentEvent::MessageEnd { message } = event else {
        return None;
    };
    let usage = message.as_assistant()?.usage;
    // The state includes this reply (listeners run after the fold).
    let size = (options.context_window).or_else(|| handle.snapshot().context.window)?;
    if usage.input + usage.output == 0 {
        // A reply cut before the provider counted it (aborted): nothing known to report.
        return None;
    }
    let cost = options.prices.as_ref().map(|prices| {
        let total = handle.snapshot().usage;
        map::Cost {
            amount: (total.input as f64 * prices.input + total.output as f64 * prices.output) / 1e6,
            currency: prices.currency.clone(),
        }
    });
    Some(Update::UsageUpdate {
        used: usage.input + usage.output,
        size,
        cost,
    })
}

/// The method of other ACP agents' steering convention (see `Server::steering`).
const STEERING: &str = "_session/steering";

fn still_running() -> Refusal {
    (
        codes::INVALID_REQUEST,
        "a prompt of this session is still running".to_owned(),
    )
}

/// Queues `text` into the running agent of `prompts`, for `asker`.
fn queue_into(agent: &Agent, prompts: &mut Prompts, text: UserMessage, asker: Asker, how: Queued) {
    // The agent lives (the session holds it): neither refuses.
    let _ = match how {
        Queued::Steering => agent.steer(text),
        Queued::FollowUp => agent.follow_up(text),
    };
    prompts.queue(asker, how);
}

/// Runs the claimed prompt, then, while what was queued into it is left over (steering
/// that came as the run ended, or past `max_turns`), goes on with it. Returns the prompts
/// to answer and the last run's outcome. On a run's thread.
fn run_session(
    session: &Session,
    claimed: ClaimedRun,
    text: UserMessage,
) -> (Vec<Asker>, Result<RunResult, RunError>) {
    let agent = &session.agent;
    let mut outcome = claimed.prompt(text);
    loop {
        session.touch();
        let mut prompts = session.prompts.lock();
        let as_asked = matches!(&outcome, Ok(r) if r.stop_reason != RunStopReason::Cancelled);
        let state = agent.snapshot();
        let left = !state.steering_queue.is_empty() || !state.follow_up_queue.is_empty();
        if as_asked
            && left
            && let Ok(next) = agent.claim_run()
        {
            drop(prompts);
            outcome = next.continue_run();
            continue;
        }
        if !as_asked {
            // Cancelled or failed: what was queued is answered with it, and never runs.
            agent.clear_queues();
        }
        // Free before answering, so a client that prompts again on the answer is served.
        return (prompts.finish(), outcome);
    }
}

fn bad_params(why: &str) -> Refusal {
    (codes::INVALID_PARAMS, why.to_owned())
}

/// The summary a compaction that just ended wrote (the transcript's summary message).
fn written_summary(event: &AgentEvent, handle: &AgentHandle) -> Option<String> {
    let AgentEvent::CompactionEnd { error: None, .. } = event else {
        return None;
    };
    handle.snapshot().messages.iter().find_map(|m| match &**m {
        Message::User(user) if user.summary.is_some() => {
            // The summary as the compaction wrote it, without the line that tells the
            // model what it is.
            let text = user.text();
            Some(
                match text.strip_prefix(crate::context::summarize::SUMMARY_PREFIX) {
                    Some(summary) => summary.to_owned(),
                    None => text,
                },
            )
        }
        _ => None,
    })
}

fn send_update(peer: &Peer, session_id: &str, update: &Update) -> Result<(), LinkError> {
    let params = json!({ "sessionId": session_id, "update": update });
    peer.notify("session/update", &params)
}
