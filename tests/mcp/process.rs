//! A stdio server's process group is signalled only while its leader is ours (not reaped),
//! and closing twice ends it once.
//!
//! Each test runs one ignored test of this binary again in a pid namespace of its own
//! (`unshare --pid --fork --mount-proc`, where pids are handed out in order and
//! `/proc/sys/kernel/ns_last_pid` says which comes next), under `strace`, which logs every
//! `kill` the whole run makes. The inner test gives the pid its server had to a bystander
//! (a `sleep` leading a group of its own) once the client reaped the server, and checks
//! that the bystander lives on; the outer test checks the exact list of signals sent.
//!
//! Outside CI the tests print a note and pass where `unshare` or `strace` cannot run (they
//! need root, or the capabilities to make namespaces and trace).

use std::process::{Child, Command};

use super::*;

/// Set in the environment of the run inside the namespace.
const INSIDE: &str = "PAGENT_MCP_IN_PID_NAMESPACE";

/// What a run inside printed (its `pagent-test:` lines) and every signal the run sent, as
/// strace writes them (`kill(-5, SIGTERM)`; the probes `kill(pid, 0)` are not signals).
struct Inside {
    printed: Vec<String>,
    signals: Vec<String>,
}

impl Inside {
    /// The number the inner test printed as `pagent-test: {name} N`.
    fn number(&self, name: &str) -> u32 {
        let prefix = format!("{name} ");
        self.printed
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no `{name}` in {:?}", self.printed))
    }
}

fn can_run(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs the ignored test `process::{inner}` in a pid namespace of its own under strace;
/// `None` (with a note) where that cannot be done outside CI.
fn run_inside(inner: &str) -> Option<Inside> {
    let namespaces = can_run("unshare", &["--pid", "--fork", "--mount-proc", "true"]);
    let tracing = can_run("strace", &["-qq", "-e", "trace=none", "true"]);
    if !(namespaces && tracing) {
        let why = "needs `unshare --pid --fork --mount-proc` and `strace` (root)";
        assert!(std::env::var_os("CI").is_none(), "{inner}: {why}");
        eprintln!("skipped: {inner} {why}");
        return None;
    }
    let log = temp_dir("strace").join("kills");
    // strace is the namespace's first process (its init): the orphans of a server's group
    // are reparented to it, and it reaps them, so their pids go free.
    let output = bounded({
        let log = log.clone();
        let inner = format!("process::{inner}");
        move || {
            Command::new("unshare")
                .args(["--pid", "--fork", "--mount-proc", "strace", "-f", "-qq"])
                .args(["-e", "trace=kill", "-e", "signal=none", "-o"])
                .arg(&log)
                .arg(std::env::current_exe().unwrap())
                .args(["--exact", &inner, "--include-ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .env(INSIDE, "1")
                .output()
                .unwrap()
        }
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{inner} inside the namespace: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let log = std::fs::read_to_string(log).unwrap();
    let signals = log
        .lines()
        .filter_map(|line| {
            // `PID kill(-5, SIGTERM) = 0`
            let call = &line[line.find("kill(")?..];
            let call = &call[..=call.find(')')?];
            call.contains(", SIG").then(|| call.to_owned())
        })
        .collect();
    let printed = stdout
        .lines()
        .filter_map(|l| Some(&l[l.find("pagent-test: ")? + "pagent-test: ".len()..]))
        .map(str::to_owned)
        .collect();
    Some(Inside { printed, signals })
}

/// True in the run inside the namespace; the inner tests do nothing elsewhere.
fn inside() -> bool {
    let yes = std::env::var_os(INSIDE).is_some();
    if !yes {
        eprintln!("skipped: run by the test of the same name without `inner_`, in a pid namespace");
    }
    yes
}

/// Processes whose pid or process group is `pid`, zombies included.
fn holding(pid: u32) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            let own = stat.split_whitespace().next() == Some(&pid.to_string());
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let group = rest.split_whitespace().nth(2) == Some(&pid.to_string());
            own || group
        })
        .collect()
}

/// A `cat` that leads a process group of its own, started with the pid `pid` (which must be
/// free: its process reaped, its group empty). It ends when its stdin closes, so that the
/// test's own cleanup sends no signal.
fn bystander_at(pid: u32) -> Child {
    let until = Instant::now() + Duration::from_secs(5);
    while !holding(pid).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(holding(pid), Vec::<String>::new(), "pid {pid} is not free");
    std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
    let bystander = {
        use std::os::unix::process::CommandExt;
        Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap()
    };
    assert_eq!(bystander.id(), pid, "the bystander got the freed pid");
    bystander
}

/// Fails unless `bystander` still runs a moment after the client was done; then ends it.
fn assert_alive(mut bystander: Child) {
    std::thread::sleep(Duration::from_millis(300));
    let status = bystander.try_wait().unwrap();
    drop(bystander.stdin.take());
    let _ = bystander.wait();
    assert_eq!(status, None, "the bystander was killed");
}

/// Runs `process::{inner}` inside and gives the pid it printed and the signals of the run.
fn signals_of(inner: &str) -> Option<(u32, Vec<String>)> {
    let run = run_inside(inner)?;
    Some((run.number("pid"), run.signals))
}

/// Inside the namespace only: connects `builder` and prints the server's pid.
fn connect_inside(builder: ClientBuilder) -> Option<(Client, u32)> {
    if !inside() {
        return None;
    }
    let client = builder.connect().unwrap();
    let pid = client.pid().unwrap();
    println!("pagent-test: pid {pid}");
    Some((client, pid))
}

#[test]
fn a_server_that_exited_on_its_own_never_has_its_reused_pid_signalled() {
    if let Some((_, signals)) = signals_of("inner_exited_on_its_own") {
        // Nothing of the group was left when it exited: no signal at all.
        assert_eq!(signals, Vec::<String>::new());
    }
}

#[test]
#[ignore = "run in a pid namespace by the test without `inner_`"]
fn inner_exited_on_its_own() {
    let Some((client, pid)) = connect_inside(fake("ok").0) else {
        return;
    };
    let err = client
        .call_tool("die", json!({}), &CancelToken::new(), &mut |_| {})
        .unwrap_err();
    assert!(matches!(err, McpError::Exited { .. }), "{err:?}");
    // The client reaped it (nothing of its group was left), so its pid is free.
    assert!(gone(pid));
    let bystander = bystander_at(pid);
    client.close();
    drop(client);
    assert_alive(bystander);
}

#[test]
fn closing_then_dropping_the_client_ends_the_server_once() {
    if let Some((_, signals)) = signals_of("inner_close_then_drop") {
        // The server exits when its stdin closes: nothing to signal, at close or after.
        assert_eq!(signals, Vec::<String>::new());
    }
}

#[test]
#[ignore = "run in a pid namespace by the test without `inner_`"]
fn inner_close_then_drop() {
    let Some((client, pid)) = connect_inside(fake("ok").0) else {
        return;
    };
    client.close();
    assert!(gone(pid));
    let bystander = bystander_at(pid);
    // The last handle: a second close, which must do nothing.
    drop(client);
    assert_alive(bystander);
}

#[test]
fn a_wrapped_server_s_group_gets_one_sigterm_however_often_it_is_closed() {
    if let Some((group, signals)) = signals_of("inner_wrapped_close_then_drop") {
        // The shell waits for its `sleep`, which ignores the end of stdin: one SIGTERM to
        // the group ends both, and neither a second `close` nor the drop after sends more.
        assert_eq!(signals, [format!("kill(-{group}, SIGTERM)")]);
    }
}

#[test]
#[ignore = "run in a pid namespace by the test without `inner_`"]
fn inner_wrapped_close_then_drop() {
    let Some((client, group)) = connect_inside(wrapped().0) else {
        return;
    };
    client.close();
    assert_eq!(left_in_group(group), Vec::<String>::new());
    let bystander = bystander_at(group);
    client.close();
    drop(client);
    assert_alive(bystander);
}
