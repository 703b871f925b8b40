//! Runs every example offline to completion, so none of them can rot.
//!
//! `cargo test` builds the examples before it runs this; when they are missing (under
//! `cargo test --test examples` from a clean tree), they are built first. The dashboard's
//! tests run with its feature: `cargo test --features dashboard` (CI does).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Once;
use std::thread;
use std::time::{Duration, Instant};

/// No example may take longer than this, however slow the machine.
const TIMEOUT: Duration = Duration::from_secs(120);

struct Ran {
    stdout: String,
    stderr: String,
    success: bool,
}

fn example(name: &str) -> PathBuf {
    // tests run from target/<profile>/deps/; the examples live in target/<profile>/examples/.
    let exe = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile_dir
        .join("examples")
        .join(name)
        .with_extension(std::env::consts::EXE_EXTENSION);
    static BUILD: Once = Once::new();
    if !path.exists() {
        BUILD.call_once(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "--examples", "--quiet"])
                .args(cfg!(feature = "dashboard").then_some("--features=dashboard"))
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("cargo runs");
            assert!(status.success(), "cargo build --examples failed");
        });
    }
    path
}

/// Example `name` with `args`, offline, its three pipes ours.
fn offline(name: &str, args: &[&str]) -> Command {
    let mut command = Command::new(example(name));
    command
        // The examples talk to a real server when the environment names one; these tests
        // check the offline demos.
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("PAGENT_MODEL")
        .env_remove("PAGENT_DEMO_SPEED")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs example `name` with `args`, feeding `stdin`, and kills it after `TIMEOUT`.
fn run(name: &str, args: &[&str], stdin: &str) -> Ran {
    let mut child = offline(name, args)
        .spawn()
        .unwrap_or_else(|e| panic!("example {name} starts: {e}"));
    let mut input = child.stdin.take().expect("piped stdin");
    let stdin = stdin.to_owned();
    // Writing and reading on their own threads, so a full pipe never deadlocks the test.
    let writer = thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read_all(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait on the example") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("example {name} {args:?} did not finish within {TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    writer.join().expect("stdin writer");
    let ran = Ran {
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
        success: status.success(),
    };
    assert!(
        ran.success,
        "example {name} {args:?} failed with {status}\n--- stdout\n{}\n--- stderr\n{}",
        ran.stdout, ran.stderr
    );
    ran
}

#[test]
fn chat_streams_replies_and_calls_real_tools_when_piped() {
    let ran = run("chat", &[], "hi\nwhat is 17*23?\nwhat time is it?\n");
    let out = &ran.stdout;
    assert!(out.starts_with("> hi\nYou said \"hi\"."), "{out}");
    assert!(
        out.contains(
            "> what is 17*23?\n(thinking) Arithmetic: the calculator gets it exactly right. \n  \
             [calculator] {\"expression\":\"17*23\"}\n  [calculator] = 391\nThe answer is 391.\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("> what time is it?\nLet me look at the clock.\n  [clock] {}\n  [clock] = "),
        "{out}"
    );
    assert!(out.trim_end().ends_with("UTC."), "{out}");
    // The hint about real servers comes once, on stderr.
    assert_eq!(
        ran.stderr.matches("OPENAI_API_KEY").count(),
        1,
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("ANTHROPIC_API_KEY") && ran.stderr.contains("PAGENT_MODEL"));
}

#[test]
fn chat_reports_tool_errors_and_exits_at_end_of_input() {
    let ran = run("chat", &[], "what is (2+3\n\n");
    assert!(
        ran.stdout.contains("  [calculator] failed a `(` is not closed\nThe calculator could not do that: a `(` is not closed.\n"),
        "{}",
        ran.stdout
    );
    let empty = run("chat", &[], "");
    assert_eq!(empty.stdout, "");
}

#[test]
fn chat_commands_start_a_new_conversation_help_and_quit() {
    let ran = run(
        "chat",
        &[],
        "hi\n/help\n/new\n/nope\nwhat is 2+2?\n/quit\nnever read\n",
    );
    let out = &ran.stdout;
    assert!(
        out.contains("> /help\nType a message and press Enter."),
        "{out}"
    );
    assert!(out.contains("> /new\n[a new conversation]\n"), "{out}");
    assert!(
        out.contains("> /nope\n[unknown command /nope; /help lists them]\n"),
        "{out}"
    );
    assert!(out.contains("The answer is 4.\n"), "{out}");
    assert!(out.trim_end().ends_with("> /quit"), "{out}");
    assert!(!out.contains("never read"), "{out}");
}

/// The chat on a slow demo model, its output read as it comes: returns the child, its
/// stdin, and the channel of its output.
fn slow_chat() -> (
    std::process::Child,
    std::process::ChildStdin,
    crossbeam_channel::Receiver<String>,
) {
    let mut child = offline("chat", &[])
        .env("PAGENT_DEMO_SPEED", "5")
        .spawn()
        .expect("the chat starts");
    let stdin = child.stdin.take().expect("piped stdin");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = crossbeam_channel::unbounded();
    thread::spawn(move || {
        let mut buf = [0u8; 256];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0
                || tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
            {
                return;
            }
        }
    });
    (child, stdin, rx)
}

/// What came on `output` until it holds `text` (bounded by `TIMEOUT`).
fn read_until(output: &crossbeam_channel::Receiver<String>, seen: &mut String, text: &str) {
    let deadline = Instant::now() + TIMEOUT;
    while !seen.contains(text) {
        let left = deadline.saturating_duration_since(Instant::now());
        match output.recv_timeout(left) {
            Ok(chunk) => seen.push_str(&chunk),
            Err(_) => panic!("no {text:?} in the output: {seen:?}"),
        }
    }
}

fn interrupt(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

fn wait_bounded(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().expect("wait on the chat") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the chat did not end within {TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Ctrl-C while a reply streams aborts that run only: the reply stops, the chat says so and
/// answers the next line as usual.
#[test]
fn chat_ctrl_c_interrupts_the_reply_and_the_chat_reads_on() {
    let (mut child, mut stdin, output) = slow_chat();
    let mut seen = String::new();
    stdin.write_all(b"hi\n").unwrap();
    // At 5 tokens a second the reply takes about 15 s: it has begun, and is far from done.
    read_until(&output, &mut seen, "You said");
    interrupt(&child);
    read_until(&output, &mut seen, "[interrupted]\n");
    assert!(
        !seen.contains("for real"),
        "the reply ran to its end: {seen:?}"
    );
    stdin.write_all(b"/quit\n").unwrap();
    assert!(wait_bounded(&mut child).success());
    let rest: String = output.iter().collect();
    assert_eq!(rest, "> /quit\n");
}

/// Ctrl-C at the prompt ends the chat, as it ends any program (status 130, 128 + SIGINT).
#[test]
fn chat_ctrl_c_at_the_prompt_ends_it() {
    let (mut child, mut stdin, output) = slow_chat();
    let mut seen = String::new();
    stdin.write_all(b"what is 1+1?\n").unwrap();
    read_until(&output, &mut seen, "The answer is 2.\n");
    // The reply's last line comes before its run ends: the chat answering a command proves
    // it is back at the prompt (a Ctrl-C before that interrupts the run ending).
    stdin.write_all(b"/help\n").unwrap();
    read_until(&output, &mut seen, "/quit  end the chat");
    interrupt(&child);
    assert_eq!(wait_bounded(&mut child).code(), Some(130));
    drop(stdin);
}

/// The summary line that starts with `label`, without the label.
fn field<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no `{label}` line in:\n{out}"))
}

#[test]
#[cfg(feature = "dashboard")]
fn dashboard_script_runs_a_prompt_through_the_drawing_loop() {
    let ran = run("dashboard", &["--script", "tell me about owls"], "");
    let out = &ran.stdout;
    assert_eq!(field(out, "stop reason: "), "no_tool_calls");
    // The prompt, the reply calling two tools, their results, the answer.
    assert_eq!(field(out, "messages: "), "5");
    assert_eq!(
        field(out, "last reply: "),
        "Here is what I found about \"tell me about owls\"."
    );
    // The frames drawn while the reply streamed are what the UI polled from snapshots.
    let streaming: u64 = field(out, "frames drawn: ")
        .split(['(', ' '])
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a frame count in:\n{out}"));
    assert!(streaming > 0, "{out}");
    let screen = out
        .split("--- last frame\n")
        .nth(1)
        .expect("the last frame");
    for shown in [
        "│you: tell me about owls",
        "│← survey: Read 8 sources about \"tell me about owls\".",
        "│← letter_count: The question has 15 letters.",
        "┌ thinking",
        "│The user asks about \"tell me about owls\".",
        "● idle │ turn 2 │ tokens ",
        "│ stop: no_tool_calls",
    ] {
        assert!(
            screen.contains(shown),
            "`{shown}` is not on the screen:\n{screen}"
        );
    }
}

#[test]
#[cfg(feature = "dashboard")]
fn dashboard_script_steers_while_tools_run() {
    let ran = run(
        "dashboard",
        &["--script", "owls", "--steer", "be brief"],
        "",
    );
    let out = &ran.stdout;
    assert_eq!(field(out, "stop reason: "), "no_tool_calls");
    assert_eq!(field(out, "messages: "), "6");
    assert!(
        field(out, "last reply: ").starts_with("You steered me: \"be brief\"."),
        "{out}"
    );
    assert!(out.contains("│you: be brief"), "{out}");
}

#[test]
#[cfg(feature = "dashboard")]
fn dashboard_script_queues_a_follow_up_into_the_same_run() {
    let ran = run(
        "dashboard",
        &["--script", "owls", "--follow-up", "and bats?"],
        "",
    );
    let out = &ran.stdout;
    assert_eq!(field(out, "stop reason: "), "no_tool_calls");
    // Two rounds of prompt, tool calls, results and answer.
    assert_eq!(field(out, "messages: "), "10");
    assert_eq!(
        field(out, "last reply: "),
        "Here is what I found about \"and bats?\"."
    );
}

#[test]
#[cfg(feature = "dashboard")]
fn dashboard_script_aborts_a_running_tool() {
    let ran = run("dashboard", &["--script", "owls", "--abort"], "");
    let out = &ran.stdout;
    assert_eq!(field(out, "stop reason: "), "cancelled");
    assert!(out.contains("│← survey: aborted"), "{out}");
    assert!(out.contains("stop: cancelled"), "{out}");
}

#[test]
fn offload_loses_nothing_and_stays_within_the_channel_capacity() {
    let log =
        std::env::temp_dir().join(format!("pagent-offload-test-{}.jsonl", std::process::id()));
    let log_arg = log.to_str().expect("a UTF-8 temp path");
    let ran = run(
        "offload",
        &["--capacity", "8", "--delay-ms", "1", "--log", log_arg],
        "",
    );
    let out = &ran.stdout;
    assert!(out.contains("run: ended (no_tool_calls)"), "{out}");
    assert!(out.contains("consumer: turn 1 written"), "{out}");
    assert!(out.contains("events, no_tool_calls)\n"), "{out}");
    let lead: usize = field(out, "the run was at most ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a lead in:\n{out}"));
    assert!(lead <= 8 + 2, "{out}");
    let lost = field(out, "nothing lost: ");
    assert!(
        lost.ends_with("the log folds into the same transcript (5 messages): yes"),
        "{out}"
    );
    let lines = std::fs::read_to_string(&log)
        .expect("the wire log")
        .lines()
        .count();
    assert!(
        lost.starts_with(&format!("{lines} events produced, {lines} written")),
        "{out}"
    );
    let _ = std::fs::remove_file(&log);
}

#[test]
fn typed_tool_shows_validation_errors_progress_and_asks_for_approval() {
    let ran = run("typed_tool", &[], "y\nn\ny\n");
    let out = &ran.stdout;
    // Invalid arguments never reach the approval prompt; the model reads what was wrong.
    assert!(
        out.contains(
            "  call word_stats {\"path\":\"Cargo.toml\",\"top\":\"five\"}\n  \
         error: invalid arguments for `word_stats`: invalid type: string \"five\", expected u8\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "  call word_stats {\"path\":\"Cargo.toml\",\"top\":50}\n  \
         error: invalid arguments for `word_stats`: `top` must be from 1 to 20, not 50\n"
        ),
        "{out}"
    );
    assert_eq!(out.matches("? [y/N] ").count(), 3, "{out}");
    assert!(
        out.contains(
            "  allow word_stats {\"path\":\"Cargo.toml\",\"top\":5}? [y/N] y\n    progress: 10 of "
        ),
        "{out}"
    );
    assert!(out.contains("\n  result: "), "{out}");
    assert!(out.contains("words; most frequent: "), "{out}");
    assert!(
        out.contains("[y/N] n\n  error: blocked: the user declined\n"),
        "{out}"
    );
    assert!(
        out.contains("  error: cannot read no/such/file.txt: "),
        "{out}"
    );
    assert!(out.ends_with("run ended: no_tool_calls\n"), "{out}");
}

#[test]
fn typed_tool_approves_everything_with_yes() {
    let ran = run("typed_tool", &["--yes"], "");
    assert!(!ran.stdout.contains("[y/N]"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("blocked"), "{}", ran.stdout);
    assert!(
        ran.stdout.ends_with("run ended: no_tool_calls\n"),
        "{}",
        ran.stdout
    );
}
