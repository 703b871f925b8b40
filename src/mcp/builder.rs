//! The settings of a connection, and starting it: spawn or connect, then `initialize`.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use serde_json::Value;

use super::client::{Handle, Inner};
use super::elicit::{Answerer, Answers, Elicitation, ElicitationAnswer, Root};
use super::era::{self, Choice};
use super::sampling::{Sampler, SamplingReply, SamplingRequest};
use super::session::{NotificationHook, Router, Session, Trace, Transport};
use super::{Client, Direction, Era, McpError, http, stdio};
use crate::cancel::CancelToken;
use crate::llm::tls::TlsSettings;

pub(super) enum Kind {
    Stdio(stdio::Spawn),
    Http {
        url: String,
        headers: Vec<(String, String)>,
        tls: TlsSettings,
    },
}

/// Settings of a connection to one server; [`ClientBuilder::connect`] starts it.
pub struct ClientBuilder {
    kind: Kind,
    prefix: String,
    call_timeout: Duration,
    init_timeout: Duration,
    max_message_bytes: usize,
    max_list_bytes: usize,
    trace: Option<Trace>,
    era: Choice,
    answers: Answers,
    notifications: Option<NotificationHook>,
    oauth: Option<super::OAuth>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ClientBuilder");
        match &self.kind {
            Kind::Stdio(spawn) => d
                .field("program", &spawn.program)
                .field("args", &spawn.args),
            // Header values may be credentials, and so may the URL's user info and query
            // (shown as the providers show their base URL).
            Kind::Http { url, headers, .. } => {
                d.field("url", &crate::llm::http::debug_url(url)).field(
                    "headers",
                    &headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                )
            }
        };
        d.field("oauth", &self.oauth)
            .field("prefix", &self.prefix)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    pub(super) fn new(kind: Kind) -> ClientBuilder {
        ClientBuilder {
            kind,
            prefix: String::new(),
            call_timeout: Duration::from_secs(120),
            init_timeout: Duration::from_secs(30),
            max_message_bytes: 16 * 1024 * 1024,
            max_list_bytes: 16 * 1024 * 1024,
            trace: None,
            era: Choice::Auto,
            answers: Answers::default(),
            notifications: None,
            oauth: None,
        }
    }

    fn spawn_mut(&mut self) -> Option<&mut stdio::Spawn> {
        match &mut self.kind {
            Kind::Stdio(spawn) => Some(spawn),
            Kind::Http { .. } => None,
        }
    }

    /// Adds an argument of the program (stdio only).
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.args.push(arg.into());
        }
        self
    }

    /// Adds arguments of the program (stdio only).
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let Some(s) = self.spawn_mut() {
            s.args.extend(args.into_iter().map(Into::into));
        }
        self
    }

    /// Sets an environment variable of the program, on top of this process's environment
    /// (stdio only).
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.env.push((key.into(), value.into()));
        }
        self
    }

    /// Starts the program with no variable of this process's environment: only those given
    /// with [`ClientBuilder::env`] (stdio only). Defaults to off: the program inherits this
    /// process's environment, API keys included.
    #[must_use]
    pub fn env_clear(mut self) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.env_clear = true;
        }
        self
    }

    /// The program's working directory (stdio only). Defaults to this process's.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.cwd = Some(dir.into());
        }
        self
    }

    /// How much of the program's stderr is kept, in bytes (stdio only). Defaults to 8 KiB.
    #[must_use]
    pub fn stderr_limit(mut self, bytes: usize) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.stderr_limit = bytes;
        }
        self
    }

    /// How long shutdown waits for the program to exit after its stdin is closed, before it
    /// ends it (stdio only; on unix `SIGTERM` to its process group, `SIGKILL` up to a second
    /// later). Defaults to 1 s.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> ClientBuilder {
        if let Some(s) = self.spawn_mut() {
            s.shutdown_grace = grace;
        }
        self
    }

    /// Adds a header to every request, such as `authorization` (HTTP only).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> ClientBuilder {
        if let Kind::Http { headers, .. } = &mut self.kind {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// Trusts only the certificates in `pem` (PEM `CERTIFICATE` sections) for an `https`
    /// server, and its authorization server, in place of the built-in roots (Mozilla's): a
    /// server behind a private authority, or a self-signed one (HTTP only). A text with no
    /// certificate, or one that is not a valid X.509 certificate, fails
    /// [`ClientBuilder::connect`] with [`McpError::Transport`] naming it.
    #[must_use]
    pub fn root_certificates(mut self, pem: impl AsRef<[u8]>) -> ClientBuilder {
        if let Kind::Http { tls, .. } = &mut self.kind {
            tls.set_roots(pem.as_ref());
        }
        self
    }

    /// A certificate (its chain and private key, in `pem`) to present to a server that asks
    /// for one (mutual TLS; HTTP only). A text without a certificate or a key fails
    /// [`ClientBuilder::connect`] with [`McpError::Transport`].
    #[must_use]
    pub fn client_certificate(mut self, pem: impl AsRef<[u8]>) -> ClientBuilder {
        if let Kind::Http { tls, .. } = &mut self.kind {
            tls.set_client(pem.as_ref());
        }
        self
    }

    /// Authorizes with the server through OAuth 2.1 when it refuses a request (`401`, or
    /// `403` with `insufficient_scope`): discovery, the client's registration, the grant
    /// (the user's authorization through the program's hook, or client credentials), and
    /// the token on every request from then on, refreshed when it expires (HTTP only; see
    /// [`super::OAuth`]). Defaults to none: a refusal is [`McpError::Unauthorized`] with
    /// the server's challenge.
    #[must_use]
    pub fn oauth(mut self, oauth: super::OAuth) -> ClientBuilder {
        if let Kind::Http { .. } = self.kind {
            self.oauth = Some(oauth);
        }
        self
    }

    /// A prefix for the names of this server's tools as the model sees them (`fs_` turns
    /// `read_file` into `fs_read_file`), so that two servers' tools never collide. Defaults
    /// to none.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> ClientBuilder {
        self.prefix = prefix.into();
        self
    }

    /// How long one tool call (and any other request after `initialize`) may take.
    /// Defaults to 120 s.
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.call_timeout = timeout;
        self
    }

    /// How long starting the server and `initialize` may take. Defaults to 30 s.
    #[must_use]
    pub fn init_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.init_timeout = timeout;
        self
    }

    /// The largest message accepted from the server, in bytes. Defaults to 16 MiB.
    #[must_use]
    pub fn max_message_bytes(mut self, bytes: usize) -> ClientBuilder {
        self.max_message_bytes = bytes;
        self
    }

    /// The most bytes all the pages of one list ([`Client::list_tools`]) may hold together,
    /// as JSON, so that a server cannot make the client hold a thousand pages of the largest
    /// message. Defaults to 16 MiB.
    #[must_use]
    pub fn max_list_bytes(mut self, bytes: usize) -> ClientBuilder {
        self.max_list_bytes = bytes;
        self
    }

    /// Hands every message sent and received to `trace`, as a line of JSON, on the thread
    /// that sends or reads it (for logs and tests). It must return quickly. Defaults to none.
    #[must_use]
    pub fn trace(
        mut self,
        trace: impl Fn(Direction, &str) + Send + Sync + 'static,
    ) -> ClientBuilder {
        self.trace = Some(Arc::new(trace));
        self
    }

    /// Speaks only this era of the protocol with the server. Defaults to choosing per
    /// server, as the 2026-07-28 revision's compatibility section says: a stateless probe
    /// (`server/discover`) first, and `initialize` when the answer shows a session-era
    /// server (see the [module docs](super#eras)). [`Era::Session`] skips the probe (a
    /// server known to be of that era is greeted at once); [`Era::Stateless`] fails with the
    /// probe's error instead of falling back.
    #[must_use]
    pub fn era(mut self, era: Era) -> ClientBuilder {
        self.era = Choice::Only(era);
        self
    }

    /// Answers the server's questions for the user (elicitation, form and URL mode) with
    /// `hook`, and declares the capability. Defaults to none: the capability is not
    /// declared, and a server that asks anyway is told the method is not supported.
    ///
    /// # Contract
    /// Called once per question, on a thread of the client's (the thread of the request
    /// the question came with, or one of a small pool for a question that came alone),
    /// never on a thread that reads the server's messages: it may block while a person
    /// answers. Return [`ElicitationAnswer::Accept`] with the form's values (an object),
    /// [`ElicitationAnswer::Decline`] or [`ElicitationAnswer::Cancel`]. Accepted values are
    /// completed with the schema's defaults and checked against it; values that do not fit
    /// are never sent: the server is answered `cancel`. The token is cancelled when the
    /// request the question belongs to is given up. For a URL, ask the user before opening
    /// it. A panic in the hook is caught and answered as `cancel`.
    #[must_use]
    pub fn on_elicitation(
        mut self,
        hook: impl Fn(&Elicitation, &CancelToken) -> ElicitationAnswer + Send + Sync + 'static,
    ) -> ClientBuilder {
        self.answers.elicitation = Some(Answerer::Hook(Arc::new(
            move |question: &Elicitation, cancel: &CancelToken| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(question, cancel)))
                    .unwrap_or(ElicitationAnswer::Cancel)
            },
        )));
        self
    }

    /// Answers the server's questions for the user (elicitation, form and URL mode) through
    /// the agent whose tool call asks, and declares the capability: the program's UI, the
    /// wire server's client or an ACP client answers, instead of a hook of the program.
    /// Defaults to off (see [`ClientBuilder::on_elicitation`]; the last of the two called
    /// wins).
    ///
    /// # Contract
    /// A question that comes while a run's tool call (an [`McpTool`](super::McpTool) of this
    /// client) waits for the server becomes an
    /// [`AgentEvent::ElicitationStart`](crate::AgentEvent::ElicitationStart), is listed in
    /// [`State::elicitations`](crate::State::elicitations), and waits until
    /// [`AgentHandle::answer_elicitation`](crate::AgentHandle::answer_elicitation) answers
    /// it (values checked against the form; one that does not fit is refused there and the
    /// question still waits), the run is aborted, the call's timeout passes or the server
    /// leaves: the server is then answered `cancel`. The matching `ElicitationEnd` always
    /// follows, before the call's `ToolEnd`. A question outside a run's tool call (a
    /// direct [`Client::call_tool`](super::Client::call_tool), a question no request
    /// carries) has nobody to answer it and is answered `cancel`.
    #[must_use]
    pub fn elicit_through_agent(mut self) -> ClientBuilder {
        self.answers.elicitation = Some(Answerer::Agent);
        self
    }

    /// Answers the server's requests for a model reply (`sampling/createMessage`) with
    /// `hook`, and declares the `sampling` capability. Defaults to none: the capability is
    /// not declared, and a server that asks anyway is told the method is not supported.
    /// (Sampling is deprecated in the 2026-07-28 revision; servers of that era ask in their
    /// `input_required` results, answered the same way.)
    ///
    /// # Contract
    /// Called once per request, on a thread of the client's, as
    /// [`ClientBuilder::on_elicitation`]'s hook is: it may block while a person approves
    /// the request or a model replies. Return the reply, or `Err` with the reason to refuse
    /// it (the server gets error `-1`). The token is cancelled when the request it came with
    /// is given up (an abort of the run). The request's `modelPreferences` are advice; its
    /// `includeContext` is the hook's to honour or not. A panic is a refusal.
    #[must_use]
    pub fn on_sampling(
        mut self,
        hook: impl Fn(&SamplingRequest, &CancelToken) -> Result<SamplingReply, String>
        + Send
        + Sync
        + 'static,
    ) -> ClientBuilder {
        self.answers.sampling = Some(Sampler::Hook(Arc::new(
            move |request: &SamplingRequest, cancel: &CancelToken| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(request, cancel)))
                    .unwrap_or_else(|_| Err("the sampling hook panicked".into()))
            },
        )));
        self
    }

    /// Answers the server's requests for a model reply (`sampling/createMessage`) by
    /// asking `provider` for `model` (the agent's own provider, shared, for instance), and
    /// declares the `sampling` capability. Defaults to none (see
    /// [`ClientBuilder::on_sampling`]; the last of the two called wins).
    ///
    /// # Contract
    /// The provider is sent the request's messages (text and images) and its system prompt,
    /// for `model` whatever the server's `modelPreferences` hint at; the reply's text, cut
    /// at the first of the request's `stopSequences` (then `stopReason: "stopSequence"`),
    /// goes back with the model the provider named and `"maxTokens"` for a reply cut by
    /// its length, else `"endTurn"`. `maxTokens` and `temperature` are not passed on (a
    /// provider's request has no such settings: configure the provider); `includeContext`
    /// adds nothing (as `"none"`). No person approves the request: use
    /// [`ClientBuilder::on_sampling`] to ask one first. A failed model call is error
    /// `-32603` to the server; an abort of the run gives the model call up.
    #[must_use]
    pub fn sample_with(
        mut self,
        provider: impl crate::llm::Provider + 'static,
        model: impl Into<String>,
    ) -> ClientBuilder {
        self.answers.sampling = Some(Sampler::Provider(Arc::new(provider), model.into()));
        self
    }

    /// Adds a root, a directory or file the server may work in (`file:///home/me/project`),
    /// listed to the server when it asks (`roots/list`), and declares the capability.
    /// Defaults to none. (Roots are deprecated in the 2026-07-28 revision; servers of that
    /// era ask for them in their `input_required` results.)
    #[must_use]
    pub fn root(mut self, uri: impl Into<String>, name: Option<&str>) -> ClientBuilder {
        self.answers.roots.get_or_insert_with(Vec::new).push(Root {
            uri: uri.into(),
            name: name.map(str::to_owned),
        });
        self
    }

    /// Hands every notification of the server the client does not use itself to `hook`:
    /// `notifications/resources/updated` for a subscribed resource, the list changes of
    /// resources and prompts, log messages... with its method and params. Called on the
    /// thread that read it: it must return quickly. Defaults to none.
    #[must_use]
    pub fn on_notification(
        mut self,
        hook: impl Fn(&str, &Value) + Send + Sync + 'static,
    ) -> ClientBuilder {
        self.notifications = Some(Arc::new(hook));
        self
    }

    /// Starts the server and agrees on the protocol with it.
    ///
    /// Blocks until the server answered the probe or `initialize`, at most
    /// [`ClientBuilder::init_timeout`].
    ///
    /// # Errors
    /// [`McpError::Spawn`] when the program cannot start, [`McpError::Exited`] when it exits
    /// before answering, [`McpError::Timeout`], [`McpError::UnsupportedVersion`], and any
    /// error of the transport or the protocol. The child process is ended in every case.
    pub fn connect(self) -> Result<Client, McpError> {
        let router = Arc::new(Router::new(
            self.trace.clone(),
            self.answers.clone(),
            self.notifications.clone(),
        ));
        let (transport, pid, http): (Arc<dyn Transport>, _, _) = match &self.kind {
            Kind::Stdio(spawn) => {
                let mut spawn = spawn.clone();
                spawn.max_message_bytes = self.max_message_bytes;
                let t = stdio::StdioTransport::spawn(&spawn, &router)?;
                let pid = t.pid();
                let t = Arc::new(t);
                (t.clone(), Some(pid), Handle::Stdio(t))
            }
            Kind::Http { url, headers, tls } => {
                let t = http::HttpTransport::new(
                    url.clone(),
                    headers.clone(),
                    tls.clone(),
                    self.max_message_bytes,
                    &router,
                    self.oauth.clone(),
                )?;
                let t = Arc::new(t);
                (t.clone(), None, Handle::Http(t))
            }
        };
        let proposal = era::proposal(&router.capabilities());
        let session = Arc::new(Session::new(router, transport, proposal));
        let info = match era::agree(&session, &http, self.era, self.init_timeout) {
            Ok(info) => info,
            Err(e) => {
                session.router.close(McpError::Closed);
                session.transport.close();
                return Err(e);
            }
        };
        session.router.set_server(&info.name);
        let client = Client {
            inner: Arc::new(Inner {
                session,
                handle: http,
                pid,
                info,
                prefix: self.prefix,
                call_timeout: self.call_timeout,
                max_list_bytes: self.max_list_bytes,
                given: Mutex::new(Vec::new()),
                schemas: Mutex::new(Default::default()),
                listening: super::client::Listening::default(),
            }),
        };
        client.listen();
        Ok(client)
    }
}
