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
    let sent = &faux.requests()[0].messages;
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
    assert!(matches!(err, pagent::Error::Io(_)), "{err}");
}
