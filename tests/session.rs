//! Sessions: a transcript saved as the run goes, a crash in the middle of a write, restore
//! and continue.

mod common;

use std::path::PathBuf;

use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, Message, session};

fn temp(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "pagent-session-{}-{name}.jsonl",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    path
}

fn transcript(agent: &Agent) -> Vec<Message> {
    agent
        .snapshot()
        .messages
        .iter()
        .map(|m| (**m).clone())
        .collect()
}

#[test]
fn a_run_saved_as_it_goes_loads_back_whole() {
    for (name, builder, action) in common::scenarios() {
        let path = temp(name);
        let agent = builder.build().unwrap();
        let writer = session::Writer::create(&path).unwrap();
        let _sub = agent.subscribe(writer.listener());
        action(&agent);
        assert!(writer.error().is_none());
        let loaded = session::load(&path).unwrap();
        assert!(loaded.warnings.is_empty(), "{name}: {:?}", loaded.warnings);
        assert_eq!(loaded.messages, transcript(&agent), "{name}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.lines().count(),
            loaded.messages.len(),
            "{name}: one message per line"
        );
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn save_writes_a_whole_transcript() {
    let path = temp("save");
    let messages = vec![Message::user("one"), Message::user("two\nlines")];
    session::save(&path, &messages).unwrap();
    assert_eq!(session::load(&path).unwrap().messages, messages);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn crash_mid_write_then_restore_and_continue() {
    let path = temp("crash");
    let (_, builder, action) = common::scenarios()
        .into_iter()
        .find(|(n, ..)| *n == "tool")
        .unwrap();
    let agent = builder.build().unwrap();
    let _sub = agent.subscribe(session::Writer::create(&path).unwrap().listener());
    action(&agent);
    let saved = transcript(&agent);
    assert_eq!(saved.len(), 4);

    // The process dies while writing the last message: half of its line reached the file.
    let bytes = std::fs::read(&path).unwrap();
    let last_start = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    let torn = last_start + (bytes.len() - last_start) / 2;
    std::fs::write(&path, &bytes[..torn]).unwrap();

    let loaded = session::load(&path).unwrap();
    assert_eq!(loaded.messages, saved[..3]);
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(
        loaded.warnings[0].starts_with("line 4: torn last line"),
        "{}",
        loaded.warnings[0]
    );

    // Restore into a new agent and go on, appending to the same file.
    let faux = Faux::default().reply(FauxReply::text("Picking up where we left off."));
    let agent = Agent::builder()
        .provider(faux.clone())
        .messages(loaded.messages)
        .build()
        .unwrap();
    let _sub = agent.subscribe(session::Writer::append(&path).unwrap().listener());
    agent.prompt("Where were we?").unwrap();
    let sent: Vec<Message> = faux.requests()[0]
        .messages
        .iter()
        .map(|m| Message::clone(m))
        .collect();
    assert_eq!(
        sent[..3],
        saved[..3],
        "the restored transcript is sent to the model"
    );
    assert_eq!(sent[3], Message::user("Where were we?"));

    // The torn line was cut off before appending: the file loads clean.
    let reloaded = session::load(&path).unwrap();
    assert!(reloaded.warnings.is_empty(), "{:?}", reloaded.warnings);
    assert_eq!(reloaded.messages, transcript(&agent));
    assert_eq!(reloaded.messages.len(), 5);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_damaged_line_in_the_middle_is_skipped_not_fatal() {
    let path = temp("damaged");
    let good = serde_json::to_string(&Message::user("kept")).unwrap();
    std::fs::write(
        &path,
        format!("{good}\n{{\"role\":\"wizard\"}}\n\n{good}\n"),
    )
    .unwrap();
    let loaded = session::load(&path).unwrap();
    assert_eq!(
        loaded.messages,
        [Message::user("kept"), Message::user("kept")]
    );
    assert_eq!(loaded.warnings.len(), 1);
    assert!(
        loaded.warnings[0].starts_with("line 2: not a message"),
        "{}",
        loaded.warnings[0]
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn append_keeps_a_whole_last_message_without_its_line_end() {
    let path = temp("no-newline");
    std::fs::write(
        &path,
        serde_json::to_string(&Message::user("kept")).unwrap(),
    )
    .unwrap();
    session::Writer::append(&path)
        .unwrap()
        .write_message(&Message::user("next"))
        .unwrap();
    let loaded = session::load(&path).unwrap();
    assert_eq!(
        loaded.messages,
        [Message::user("kept"), Message::user("next")]
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn loading_a_missing_file_is_an_io_error() {
    let err = session::load(temp("missing")).unwrap_err();
    assert!(matches!(err, pagent::Error::Io { .. }), "{err}");
    assert_eq!(err.io_kind(), Some(std::io::ErrorKind::NotFound), "{err}");
}

#[test]
fn an_over_long_line_is_skipped_not_fatal() {
    let path = temp("over-long");
    let short = serde_json::to_string(&Message::user("kept")).unwrap();
    let long = serde_json::to_string(&Message::user("x".repeat(500))).unwrap();
    std::fs::write(&path, format!("{short}\n{long}\n{short}\n{long}")).unwrap();
    let loaded = session::load_with_limit(&path, 100).unwrap();
    assert_eq!(
        loaded.messages,
        [Message::user("kept"), Message::user("kept")]
    );
    assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
    for (warning, line) in loaded.warnings.iter().zip([2, 4]) {
        assert!(
            warning.starts_with(&format!(
                "line {line}: line of {} bytes is over the limit of 100 bytes",
                long.len()
            )),
            "{warning}"
        );
    }
    // Within the default limit the same file loads whole.
    let loaded = session::load(&path).unwrap();
    assert_eq!(loaded.messages.len(), 4);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn append_reads_back_past_a_long_last_line() {
    // Last lines longer than the blocks `append` scans back in, with and without an earlier
    // line before them.
    let long = Message::user("y".repeat(20_000));
    let line = serde_json::to_string(&long).unwrap();
    let first = serde_json::to_string(&Message::user("first")).unwrap();
    for before in ["", &format!("{first}\n")] {
        let path = temp("long-tail");
        let kept = if before.is_empty() {
            vec![]
        } else {
            vec![Message::user("first")]
        };

        // A whole message without its line end is kept.
        std::fs::write(&path, format!("{before}{line}")).unwrap();
        session::Writer::append(&path)
            .unwrap()
            .write_message(&Message::user("next"))
            .unwrap();
        let loaded = session::load(&path).unwrap();
        let mut expected = kept.clone();
        expected.extend([long.clone(), Message::user("next")]);
        assert_eq!(loaded.messages, expected);
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);

        // A torn one is cut off.
        std::fs::write(&path, format!("{before}{}", &line[..15_000])).unwrap();
        session::Writer::append(&path)
            .unwrap()
            .write_message(&Message::user("next"))
            .unwrap();
        let loaded = session::load(&path).unwrap();
        let mut expected = kept;
        expected.push(Message::user("next"));
        assert_eq!(loaded.messages, expected);
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn append_to_a_clean_file_changes_nothing_before_its_message() {
    let path = temp("clean-append");
    session::save(&path, &[Message::user("one")]).unwrap();
    let before = std::fs::read(&path).unwrap();
    session::Writer::append(&path)
        .unwrap()
        .write_message(&Message::user("two"))
        .unwrap();
    let after = std::fs::read(&path).unwrap();
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(
        session::load(&path).unwrap().messages,
        [Message::user("one"), Message::user("two")]
    );
    // A new, empty file.
    let empty = temp("empty-append");
    session::Writer::append(&empty).unwrap();
    assert_eq!(std::fs::read(&empty).unwrap(), b"");
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&empty).unwrap();
}
