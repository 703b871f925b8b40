//! `pagent::redis` against a real redis-server: the session store, live events and remote
//! mirrors, and a fleet of worker processes (this test binary, started again in a worker
//! or mirror role), with a worker killed by SIGKILL and Redis restarted mid-run.
//!
//! Needs `redis-server` (`.ci/redis.sh install`). The shared server's URL comes from
//! `PAGENT_REDIS_URL` (`.ci/run` starts one with `.ci/redis.sh start`); without it the tests
//! start one of their own. Tests that restart Redis start their own server on another port.
//! Every test uses its own key prefix, so they run in parallel on one server.

// Shared with the other test binaries; only some of each is used here.
#[allow(dead_code)]
#[path = "control/support.rs"]
mod control;
#[path = "redis/faults.rs"]
mod faults;
#[path = "redis/fleet.rs"]
mod fleet;
#[path = "support/mod.rs"]
mod http;
#[path = "redis/mirrors.rs"]
mod mirrors;
#[path = "redis/proxy.rs"]
mod proxy;
#[allow(dead_code)]
mod replay;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pagent::llm::{Faux, FauxReply, OpenAiCompat};
use pagent::redis::{EventLog, Queue, Redis, RemoteMirror, Store, Worker};
use pagent::{Agent, AgentHandle, Error, Message, ToolOutput};
use serde_json::json;

use control::{describe, fn_tool};

/// How long any wait of these tests may take before the test fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(120);

// ---- servers and processes ----

/// A redis-server of a test's own, stopped (by its pid) when dropped.
struct RedisServer {
    port: u16,
    dir: PathBuf,
    aof: bool,
    /// Arguments of every start.
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one on a free loopback port, with append-only persistence (every write synced)
    /// when `aof`, so that a restart keeps what it acknowledged.
    fn start(aof: bool) -> RedisServer {
        RedisServer::start_with(aof, &[])
    }

    /// As [`RedisServer::start`], with `extra` arguments at every start.
    fn start_with(aof: bool, extra: &[&str]) -> RedisServer {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let dir = std::env::temp_dir().join(format!("pagent-redis-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = RedisServer {
            port,
            dir,
            aof,
            extra: extra.iter().map(|a| a.to_string()).collect(),
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let extra = self.extra.clone();
        self.launch(&extra.iter().map(String::as_str).collect::<Vec<_>>());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if ping(self.port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not start on port {}", self.port);
    }

    /// Starts the server with `extra` arguments, without waiting for it to answer.
    fn launch(&mut self, extra: &[&str]) {
        let server = std::env::var("PAGENT_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(server)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", self.dir.to_str().unwrap(), "--save", ""])
            .args(["--appendonly", if self.aof { "yes" } else { "no" }])
            // The tests end the server with SIGKILL, not the machine: what Redis wrote to its
            // file before it answered survives in the page cache. `always` would wait for the
            // disk on every write, which a busy disk (a CI machine building) stretches past
            // the tests' 1 s command timeout.
            .args(["--appendfsync", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (.ci/redis.sh install)");
        self.child = Some(child);
    }

    /// Kills the server with SIGKILL (what it acknowledged is in its synced log).
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ping(port: u16) -> bool {
    answers(port, "PING", "+PONG")
}

/// Whether the server on `port` answers the inline `command` with a line starting with
/// `start`.
fn answers(port: u16, command: &str, start: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut line = String::new();
    s.write_all(format!("{command}\r\n").as_bytes()).is_ok()
        && BufReader::new(s).read_line(&mut line).is_ok()
        && line.starts_with(start)
}

/// The shared server: `PAGENT_REDIS_URL`, or one of this test binary's own. That one lives
/// in a static, which is never dropped: a shell started with it waits on a pipe from this
/// process and stops the server by its pid when the pipe closes, that is when this process
/// exits, however it ends.
fn shared_url() -> String {
    static OWN: OnceLock<(String, Mutex<Child>)> = OnceLock::new();
    if let Ok(url) = std::env::var("PAGENT_REDIS_URL") {
        return url;
    }
    let (url, _) = OWN.get_or_init(|| {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let server = std::env::var("PAGENT_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let watchdog = Command::new("sh")
            .args([
                "-c",
                r#""$0" "$@" >/dev/null 2>&1 & pid=$!; read _; kill "$pid"; wait "$pid""#,
            ])
            .arg(server)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir", "/tmp"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("sh runs");
        wait_until("the shared redis-server", || ping(port));
        (format!("redis://127.0.0.1:{port}/"), Mutex::new(watchdog))
    });
    url.clone()
}

/// A handle on the shared server with a key prefix of this test's own.
fn shared(test: &str) -> Redis {
    Redis::open(&shared_url())
        .unwrap()
        .prefix(format!("t{}-{test}", std::process::id()))
}

/// A child process of this test binary in a role (see `role_entry`), killed when dropped.
struct Role {
    child: Child,
}

impl Role {
    fn start(role: &str, env: &[(&str, String)]) -> Role {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "role_entry",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("PAGENT_REDIS_TEST_ROLE", role)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Role {
            child: cmd.spawn().unwrap(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its stdout, once it exited (bounded by `PATIENCE`).
    fn output(mut self) -> String {
        let deadline = Instant::now() + PATIENCE;
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "the child process did not end in time"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut out = String::new();
        std::io::Read::read_to_string(self.child.stdout.as_mut().unwrap(), &mut out).unwrap();
        out
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        self.kill();
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

fn env_ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(env(name).parse().unwrap_or(default))
}

/// The text of the last user message of a request.
fn last_user(messages: &[Arc<Message>]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| matches!(***m, Message::User(_)))
        .map(|m| m.text())
        .unwrap_or_default()
}

/// The agent every worker process builds: on Faux, answering "answer to <prompt>" in
/// pieces after `PAGENT_REDIS_TEST_DELAY_MS`; conversations named `http-*` on the loopback
/// model server at `PAGENT_REDIS_TEST_MODEL_URL`.
fn fleet_agent(conversation: &str, messages: Vec<Message>) -> Result<Agent, Error> {
    let builder = Agent::builder().model("m").messages(messages);
    if conversation.starts_with("http-") {
        let url = env("PAGENT_REDIS_TEST_MODEL_URL");
        return builder
            .provider(OpenAiCompat::new(format!("{url}/v1")).retry(http::fast_retries()))
            .build();
    }
    let delay = env_ms("PAGENT_REDIS_TEST_DELAY_MS", 0);
    builder.provider(answering(delay).chunk_chars(3)).build()
}

/// An agent on [`answering`] at once, from the stored `messages`.
fn answering_agent(messages: Vec<Message>) -> Result<Agent, Error> {
    Agent::builder()
        .provider(answering(Duration::ZERO))
        .messages(messages)
        .build()
}

/// A model that answers each prompt with "answer to <prompt>" after `delay`.
fn answering(delay: Duration) -> Faux {
    Faux::default().otherwise(move |request| {
        FauxReply::text(format!("answer to {}", last_user(&request.messages))).delay(delay)
    })
}

/// The child processes' roles, chosen by `PAGENT_REDIS_TEST_ROLE`; without it (the normal
/// test run) this test does nothing.
#[test]
fn role_entry() {
    let url = env("PAGENT_REDIS_TEST_URL");
    let redis = || {
        Redis::open(&url)
            .unwrap()
            .prefix(env("PAGENT_REDIS_TEST_PREFIX"))
            .timeout(Duration::from_secs(2))
    };
    match env("PAGENT_REDIS_TEST_ROLE").as_str() {
        "worker" => {
            let worker = Worker::new(&redis(), &env("PAGENT_REDIS_TEST_NAME"), fleet_agent)
                .unwrap()
                .lease(env_ms("PAGENT_REDIS_TEST_LEASE_MS", 1000))
                .claim_after(env_ms("PAGENT_REDIS_TEST_CLAIM_MS", 2000))
                .events(env("PAGENT_REDIS_TEST_EVENTS").parse().ok());
            // Until the test kills it; bounded all the same.
            worker.run_for(PATIENCE).unwrap();
        }
        "mirror" => {
            // Follows `PAGENT_REDIS_TEST_RUNS` runs, then prints how many events it folded
            // in and the state it ended with.
            let mut mirror = RemoteMirror::new(&redis(), "watched");
            let mut events = 0;
            let runs: usize = env("PAGENT_REDIS_TEST_RUNS").parse().unwrap();
            for _ in 0..runs {
                let deadline = Instant::now() + PATIENCE;
                loop {
                    assert!(Instant::now() < deadline, "no AgentEnd in time");
                    match mirror.next_event(Duration::from_millis(200)) {
                        Ok(Some(pagent::AgentEvent::AgentEnd { .. })) => {
                            events += 1;
                            break;
                        }
                        Ok(Some(_)) => events += 1,
                        Ok(None) => {}
                        // Redis restarting: the next call connects again.
                        Err(Error::Connection(_) | Error::Timeout(_)) => {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(e) => panic!("mirror: {e}"),
                    }
                }
                println!("ended {events}");
            }
            println!("events {events}");
            println!("state {:?}", mirror.state().timeline());
        }
        _ => {}
    }
}

/// Waits (bounded) until `done` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded by `within`) until `done` holds.
fn wait_within(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Each AgentStart/AgentEnd and every message of the conversation's whole event stream,
/// described.
fn runs_in_stream(redis: &Redis, conversation: &str) -> Vec<String> {
    let mut mirror = RemoteMirror::new(redis, conversation);
    let mut seen = Vec::new();
    while let Some(event) = mirror.next_event(Duration::from_millis(1)).unwrap() {
        match event {
            pagent::AgentEvent::AgentStart => seen.push("AgentStart".to_string()),
            pagent::AgentEvent::AgentEnd { stop_reason, .. } => {
                seen.push(format!("AgentEnd {stop_reason}"));
            }
            pagent::AgentEvent::MessageEnd { message } => seen.push(describe(&message)),
            _ => {}
        }
    }
    seen
}

/// A raw connection for what the tests inspect directly.
fn raw(url: &str) -> redis::Connection {
    let c = redis::Client::open(url).unwrap();
    let conn = c
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn
}

/// The `done` entry of a conversation's meta.
fn done_of(conn: &mut redis::Connection, prefix: &str, conversation: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(format!("{prefix}:{{{conversation}}}:meta"))
        .arg("done")
        .query(conn)
        .unwrap()
}

/// Who holds a conversation's lease: its token, or none.
fn lease_of(conn: &mut redis::Connection, prefix: &str, conversation: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(format!("{prefix}:{{{conversation}}}:lease"))
        .query(conn)
        .unwrap()
}

/// The fleet's dead letters, in order.
fn dead_letters(conn: &mut redis::Connection, prefix: &str) -> Vec<redis::streams::StreamId> {
    let dead: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(format!("{prefix}:{{dead}}"))
        .arg("-")
        .arg("+")
        .query(conn)
        .unwrap();
    dead.ids
}

/// How many entries of the fleet's queue are not handled yet: pending under a worker, or
/// not handed to one. (Handled entries are acknowledged and trimmed from the stream in whole
/// nodes, so its length counts some handled ones too.)
fn unhandled(conn: &mut redis::Connection, prefix: &str) -> usize {
    let queue = format!("{prefix}:{{queue}}");
    let groups: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(&queue)
        .query(conn)
        .unwrap();
    let group = groups
        .iter()
        .find(|g| g.get("name") == Some(&redis::Value::BulkString(b"workers".to_vec())))
        .expect("the queue has the workers' group");
    let pending: usize = redis::from_redis_value_ref(&group["pending"]).unwrap();
    let delivered: String = redis::from_redis_value_ref(&group["last-delivered-id"]).unwrap();
    let undelivered: Vec<redis::Value> = redis::cmd("XRANGE")
        .arg(&queue)
        .arg(format!("({delivered}"))
        .arg("+")
        .query(conn)
        .unwrap();
    pending + undelivered.len()
}

/// The transcript a conversation must end with: each prompt, then its one answer.
fn answered(prompts: &[String], answer: impl Fn(&str) -> String) -> Vec<String> {
    prompts
        .iter()
        .flat_map(|p| {
            [
                format!("user {p:?}"),
                format!("assistant stop {:?}", answer(p)),
            ]
        })
        .collect()
}

/// The prompts [`queue_prompts`] queues for `conversation`.
fn prompts_of(conversation: &str, prompts: usize) -> Vec<String> {
    (0..prompts)
        .map(|p| format!("{conversation} #{p}"))
        .collect()
}

/// Empties each conversation of `names`, then queues its `prompts` prompts, round by round
/// across the conversations; returns the id of each one's last prompt.
fn queue_prompts(
    redis: &Redis,
    store: &Store,
    names: &[String],
    prompts: usize,
) -> HashMap<String, String> {
    let queue = Queue::new(redis);
    let mut last = HashMap::new();
    for name in names {
        store.delete(name).unwrap();
    }
    for p in 0..prompts {
        for name in names {
            last.insert(
                name.clone(),
                queue.prompt(name, &format!("{name} #{p}")).unwrap(),
            );
        }
    }
    last
}

/// Starts worker processes `w0`, `w1` and `w2` on the shared server under `prefix`, with
/// `env` besides.
fn three_workers(prefix: &str, env: &[(&str, String)]) -> Vec<Role> {
    (0..3)
        .map(|i| {
            let mut vars = vec![
                ("PAGENT_REDIS_TEST_URL", shared_url()),
                ("PAGENT_REDIS_TEST_PREFIX", prefix.to_owned()),
                ("PAGENT_REDIS_TEST_NAME", format!("w{i}")),
            ];
            vars.extend_from_slice(env);
            Role::start("worker", &vars)
        })
        .collect()
}

/// Waits (bounded) until each conversation of `last` is done up to its prompt there.
fn wait_all_done(conn: &mut redis::Connection, prefix: &str, last: &HashMap<String, String>) {
    wait_until("every conversation", || {
        last.iter()
            .all(|(n, id)| done_of(conn, prefix, n).as_ref() == Some(id))
    });
}

/// The state a mirror of the conversation's whole event stream ends with, and how many
/// `AgentEnd`s it folded.
fn folded(redis: &Redis, conversation: &str) -> (Arc<pagent::State>, usize) {
    let mut mirror = RemoteMirror::new(redis, conversation);
    let mut ends = 0;
    while let Some(event) = mirror.next_event(Duration::from_millis(1)).unwrap() {
        if let pagent::AgentEvent::AgentEnd { .. } = event {
            ends += 1;
        }
    }
    (mirror.state().clone(), ends)
}

/// The stored transcript.
fn stored(store: &Store, conversation: &str) -> Vec<Message> {
    store.load(conversation).unwrap().messages
}

fn described(store: &Store, conversation: &str) -> Vec<String> {
    let loaded = store.load(conversation).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    loaded.messages.iter().map(describe).collect()
}

// ---- the session store ----

/// A transcript with an image in the prompt and a screenshot in a tool result goes to Redis
/// and comes back equal, the bytes as base64 in the stored JSON.
#[test]
fn a_transcript_with_images_round_trips_through_the_store() {
    let redis = shared("store-images");
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    let shot = png.clone();
    let tool =
        fn_tool("screenshot", move |_, _| {
            Ok(ToolOutput::text("the screen:")
                .with_part(pagent::Image::new("image/png", shot.clone())))
        });
    let faux = Faux::new([
        FauxReply::tool_call("screenshot", json!({})).with_id("call_1"),
        FauxReply::text("A square."),
    ]);
    let agent = Agent::builder().provider(faux).tool(tool).build().unwrap();
    let transcript = store.transcript("c");
    let _sub = agent.subscribe(transcript.listener());
    let prompt = pagent::UserMessage::new("What is this?")
        .with_part(pagent::Image::new("image/png", png.clone()))
        .with_part(pagent::Document::pdf(b"%PDF-1.7".to_vec()).with_name("a.pdf"));
    agent.prompt(prompt).unwrap();
    assert_eq!(transcript.error(), None);
    let loaded = store.load("c").unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let published: Vec<Message> = agent
        .snapshot()
        .messages
        .iter()
        .map(|m| (**m).clone())
        .collect();
    assert_eq!(loaded.messages, published);
    assert_eq!(
        loaded.messages[0].parts()[1].data().unwrap().as_bytes(),
        &png[..]
    );
    assert_eq!(
        loaded.messages[2].parts()[1].data().unwrap().as_bytes(),
        &png[..]
    );
    store.delete("c").unwrap();
}

#[test]
fn a_transcript_in_redis_holds_each_message_as_soon_as_it_ended() {
    let redis = shared("store");
    let store = Store::new(&redis);
    store.delete("c").unwrap();
    // The tool looks at Redis from outside the run: what ended before it is stored.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (reader, log) = (store.clone(), seen.clone());
    let tool = fn_tool("look", move |_, _| {
        log.lock().unwrap().extend(described(&reader, "c"));
        Ok(ToolOutput::text("looked"))
    });
    let faux = Faux::new([
        FauxReply::tool_call("look", json!({})).with_id("call_1"),
        FauxReply::text("Done."),
    ]);
    let agent = Agent::builder().provider(faux).tool(tool).build().unwrap();
    let transcript = store.transcript("c");
    let _sub = agent.subscribe(transcript.listener());
    agent.prompt("Look.").unwrap();
    assert_eq!(transcript.error(), None);
    assert_eq!(
        *seen.lock().unwrap(),
        ["user \"Look.\"", "assistant tool_use \"\" [call_1]"]
    );
    let stored = store.load("c").unwrap().messages;
    let published: Vec<Message> = agent
        .snapshot()
        .messages
        .iter()
        .map(|m| (**m).clone())
        .collect();
    assert_eq!(stored, published);

    // Any process resumes from it.
    let agent = Agent::builder()
        .provider(Faux::new([FauxReply::text("Again.")]))
        .messages(stored)
        .build()
        .unwrap();
    let _sub = agent.subscribe(store.transcript("c").listener());
    agent.prompt("Once more.").unwrap();
    assert_eq!(store.load("c").unwrap().messages.len(), 6);
    store.save("c", &[Message::user("reset")]).unwrap();
    assert_eq!(described(&store, "c"), ["user \"reset\""]);
}

#[test]
fn an_unreachable_redis_gives_typed_errors_without_hanging() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let redis = Redis::open(&format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .timeout(Duration::from_secs(1));
    let started = Instant::now();
    let store = Store::new(&redis);
    assert!(matches!(store.load("c"), Err(Error::Connection(_))));
    assert!(matches!(
        store.append("c", &Message::user("x")),
        Err(Error::Connection(_))
    ));
    assert!(matches!(
        Queue::new(&redis).prompt("c", "x"),
        Err(Error::Connection(_))
    ));
    assert!(matches!(
        Worker::new(&redis, "w", fleet_agent),
        Err(Error::Connection(_))
    ));
    let mut mirror = RemoteMirror::new(&redis, "c");
    assert!(matches!(
        mirror.next_event(Duration::from_millis(10)),
        Err(Error::Connection(_))
    ));
    assert_eq!(
        mirror.follow_run(Duration::from_millis(300)),
        Err(Error::Timeout(pagent::TimeoutPhase::Run))
    );
    // A run goes on without its transcript; the writer says why.
    let agent = Agent::builder()
        .provider(Faux::new([FauxReply::text("Hi.")]))
        .build()
        .unwrap();
    let transcript = store.transcript("c");
    let log = EventLog::new(&redis, "c");
    let _a = agent.subscribe(transcript.listener());
    let _b = agent.subscribe(log.listener());
    agent.prompt("Hello").unwrap();
    assert!(matches!(transcript.error(), Some(Error::Connection(_))));
    assert!(matches!(log.error(), Some(Error::Connection(_))));
    // Well under the timeouts' sum; the old way to find out was a hang.
    assert!(started.elapsed() < Duration::from_secs(20));
}

// ---- live events and remote mirrors ----

#[test]
fn a_remote_mirror_follows_a_run_live_and_ends_equal_to_the_agent_state() {
    let redis = shared("mirror");
    Store::new(&redis).delete("c").unwrap();
    let faux = Faux::new([
        FauxReply::tool_call("echo", json!({"x": 1})).with_id("call_1"),
        FauxReply::text("The echo said 1.").then_thinking("hm"),
    ]);
    let agent = Agent::builder()
        .provider(faux)
        .tool(control::echo())
        .build()
        .unwrap();
    let log = EventLog::new(&redis, "c");
    let _sub = agent.subscribe(log.listener());
    // Every published snapshot, to compare with the mirror's after each event.
    let published = Arc::new(Mutex::new(Vec::new()));
    let p = published.clone();
    let handle: AgentHandle = agent.handle();
    let _rec = agent.subscribe(move |_| p.lock().unwrap().push(handle.snapshot().timeline()));
    let mut mirror = RemoteMirror::new(&redis, "c").from_state(agent.snapshot().timeline());
    let follower = std::thread::spawn(move || {
        let mut states = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            match mirror.next_event(Duration::from_millis(200)).unwrap() {
                Some(pagent::AgentEvent::AgentEnd { .. }) => {
                    states.push(mirror.state().timeline());
                    break;
                }
                Some(_) => states.push(mirror.state().timeline()),
                None => {}
            }
        }
        (states, mirror.last_id().to_string())
    });
    agent.prompt("Echo 1.").unwrap();
    let (states, last_id) = follower.join().unwrap();
    assert_eq!(log.error(), None);
    assert_eq!(states, *published.lock().unwrap());
    assert_eq!(*states.last().unwrap(), agent.snapshot().timeline());
    // Resumable: after the last id there is nothing more.
    let mut again = RemoteMirror::new(&redis, "c").after(last_id);
    assert_eq!(again.next_event(Duration::from_millis(10)).unwrap(), None);
}

#[test]
fn a_remote_mirror_in_another_process_follows_runs_through_a_redis_restart() {
    let mut server = RedisServer::start(true);
    let prefix = "restart-mirror".to_string();
    let redis = Redis::open(&server.url()).unwrap().prefix(&prefix);
    let mirror = Role::start(
        "mirror",
        &[
            ("PAGENT_REDIS_TEST_URL", server.url()),
            ("PAGENT_REDIS_TEST_PREFIX", prefix.clone()),
            ("PAGENT_REDIS_TEST_RUNS", "2".into()),
        ],
    );
    let faux = Faux::new([
        FauxReply::text("First answer."),
        FauxReply::text("Second answer."),
    ])
    .chunk_chars(2);
    let agent = Agent::builder().provider(faux).build().unwrap();
    let count = Arc::new(Mutex::new(0usize));
    let c = count.clone();
    let _n = agent.subscribe(move |_| *c.lock().unwrap() += 1);
    {
        let log = EventLog::new(&redis, "watched");
        let _sub = agent.subscribe(log.listener());
        agent.prompt("One.").unwrap();
        assert_eq!(log.error(), None);
    }
    // The mirror is waiting for more (in a blocking read) when Redis goes away.
    std::thread::sleep(Duration::from_millis(300));
    server.restart();
    {
        let log = EventLog::new(&redis, "watched");
        let _sub = agent.subscribe(log.listener());
        agent.prompt("Two.").unwrap();
        assert_eq!(log.error(), None);
    }
    let out = mirror.output();
    let total = *count.lock().unwrap();
    assert!(out.contains(&format!("events {total}\n")), "{out}");
    let state = format!("state {:?}\n", agent.snapshot().timeline());
    assert!(out.contains(&state), "{out}\nexpected {state}");
}

#[test]
fn a_remote_mirror_waits_out_a_redis_still_loading_its_data_after_a_restart() {
    let mut server = RedisServer::start(true);
    let redis = Redis::open(&server.url())
        .unwrap()
        .prefix("loading")
        .timeout(Duration::from_secs(1));
    let agent = Agent::builder()
        .provider(Faux::new([FauxReply::text("Hi.")]))
        .build()
        .unwrap();
    let before = agent.snapshot().timeline();
    let log = EventLog::new(&redis, "c");
    let _sub = agent.subscribe(log.listener());
    agent.prompt("Hello").unwrap();
    assert_eq!(log.error(), None);
    // Enough keys that loading them back takes seconds (with a delay per key).
    let mut conn = raw(&server.url());
    let mut pipe = redis::pipe();
    for i in 0..5000 {
        pipe.cmd("SET").arg(format!("filler{i}")).arg("x").ignore();
    }
    pipe.query::<()>(&mut conn).unwrap();
    // Loaded back from a snapshot, which lets clients in between keys (an append-only
    // file only every 1024 commands: a connection's handshake would time out instead).
    redis::cmd("SAVE").query::<()>(&mut conn).unwrap();
    server.kill();
    server.launch(&[
        "--appendonly",
        "no",
        "--key-load-delay",
        "1000",
        "--loading-process-events-interval-bytes",
        "1024",
    ]);
    wait_until("the server loading", || {
        answers(server.port, "GET x", "-LOADING")
    });
    // Loading is a wait, not a failure: the mirror goes on once the data is back.
    let mut mirror = RemoteMirror::new(&redis, "c").from_state(before);
    let read = mirror.next_event(Duration::from_millis(10));
    assert!(matches!(read, Err(Error::Connection(_))), "{read:?}");
    let state = mirror.follow_run(PATIENCE).unwrap();
    assert_eq!(state.timeline(), agent.snapshot().timeline());
}

// ---- the queue and the workers ----

/// A worker on its own thread in this process, stopped and joined when dropped.
struct InProcess {
    worker: Worker,
    thread: Option<std::thread::JoinHandle<Result<u64, Error>>>,
}

impl InProcess {
    fn start(worker: Worker) -> InProcess {
        let w = worker.clone();
        let thread = std::thread::spawn(move || w.run_for(PATIENCE));
        InProcess {
            worker,
            thread: Some(thread),
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.worker.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
