//! Sessions: save a transcript as JSONL, append to it as a run goes, restore it into a new
//! agent.
//!
//! A session file holds one [`Message`] per line, as JSON (`{"role":"user","content":".."}`,
//! the same shapes as on the [wire](crate::wire)), in transcript order. A [`Writer`] registered
//! as a listener appends each message when it ends (`MessageEnd`) and flushes it to the
//! operating system at once, so a crash loses at most the message in flight; [`load`] skips a
//! torn last line with a warning and returns everything before it.
//!
//! The transcript is not the wire log: the wire log ([`crate::wire::Writer`]) records every
//! event for a UI or a replay, the session records what the model will be sent next time.
//! Keep them in separate files.
//!
//! ```
//! use pagent::llm::{Faux, FauxReply};
//! use pagent::{Agent, session};
//!
//! let path = std::env::temp_dir().join(format!("pagent-doc-session-{}.jsonl", std::process::id()));
//! let agent = Agent::builder().provider(Faux::default().reply(FauxReply::text("Hi!"))).build()?;
//! let transcript = session::Writer::create(&path)?;
//! let _sub = agent.subscribe(transcript.listener());
//! agent.prompt("Hello")?;
//!
//! // Later, maybe in another process: restore and go on, appending to the same file.
//! let loaded = session::load(&path)?;
//! assert!(loaded.warnings.is_empty());
//! let agent = Agent::builder()
//!     .provider(Faux::default().reply(FauxReply::text("Welcome back.")))
//!     .messages(loaded.messages)
//!     .build()?;
//! let _sub = agent.subscribe(session::Writer::append(&path)?.listener());
//! agent.prompt("Still there?")?;
//! assert_eq!(session::load(&path)?.messages.len(), 4);
//! # std::fs::remove_file(&path).ok();
//! # Ok::<(), pagent::Error>(())
//! ```

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::Error;
use crate::event::AgentEvent;
use crate::message::Message;
use crate::wire::codec::write_json;
use crate::wire::lines::LineSink;

/// Appends messages to a session file, one line each, flushed per message.
///
/// A cheap `Clone` handle; clones share the file. Register [`Writer::listener`] with
/// [`crate::Agent::subscribe`] to record a run as it goes.
#[derive(Clone)]
pub struct Writer {
    sink: LineSink<File>,
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("error", &self.sink.error())
            .finish_non_exhaustive()
    }
}

fn io(e: std::io::Error) -> Error {
    Error::Io(e.to_string())
}

/// Appends `message` as one line, with its `\n`.
fn message_line(buf: &mut Vec<u8>, message: &Message) {
    write_json(buf, message);
    buf.push(b'\n');
}

impl Writer {
    /// Creates (or empties) the session file at `path`.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be created.
    pub fn create(path: impl AsRef<Path>) -> Result<Writer, Error> {
        let file = File::create(path).map_err(io)?;
        Ok(Writer::from_file(file))
    }

    /// Opens the session file at `path` to append to it, creating it if needed.
    ///
    /// A torn last line (a crash in the middle of a write) is cut off first, so that the
    /// next message starts on a line of its own; [`load`] would skip it anyway. A last line
    /// that is a whole message without its line end gets the line end.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be opened, read or truncated.
    pub fn append(path: impl AsRef<Path>) -> Result<Writer, Error> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            if serde_json::from_slice::<Message>(&bytes[keep..]).is_ok() {
                // A whole message without its line end (written by hand): keep it.
                file.write_all(b"\n").map_err(io)?;
            } else {
                file.set_len(keep as u64).map_err(io)?;
                file.seek(SeekFrom::End(0)).map_err(io)?;
            }
        }
        Ok(Writer::from_file(file))
    }

    fn from_file(file: File) -> Writer {
        Writer {
            sink: LineSink::new(file, ()),
        }
    }

    /// Appends `message` as one line and flushes it.
    ///
    /// The line goes to the operating system in one write, so a crash of this process leaves
    /// whole lines and at most one torn last line. (It is not synced to the disk: a power
    /// failure may lose more.)
    ///
    /// # Errors
    /// [`Error::Io`] when writing fails, now or at an earlier message (the writer then stays
    /// silent, so the file never has a hole in the middle).
    pub fn write_message(&self, message: &Message) -> Result<(), Error> {
        self.sink.write(|(), buf| message_line(buf, message))
    }

    /// A listener that appends each message at its `MessageEnd` (errors are kept in
    /// [`Writer::error`]).
    pub fn listener(&self) -> impl Fn(&AgentEvent) + Send + Sync + 'static {
        self.sink.listener(|(), event, buf| {
            if let AgentEvent::MessageEnd { message } = event {
                message_line(buf, message);
            }
        })
    }

    /// The first write error, if writing failed.
    pub fn error(&self) -> Option<Error> {
        self.sink.error()
    }
}

/// Writes `messages` to a new session file at `path` (replacing it).
///
/// # Errors
/// [`Error::Io`] when the file cannot be created or written.
pub fn save<'a>(
    path: impl AsRef<Path>,
    messages: impl IntoIterator<Item = &'a Message>,
) -> Result<(), Error> {
    let writer = Writer::create(path)?;
    messages
        .into_iter()
        .try_for_each(|m| writer.write_message(m))
}

/// What [`load`] read.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Loaded {
    /// The messages, in file order, without the lines that were skipped.
    pub messages: Vec<Message>,
    /// One text per skipped line, naming the line and why ("line 7: torn last line ...").
    pub warnings: Vec<String>,
}

/// Reads a session file.
///
/// Lines that are not a message are skipped with a warning, never a failure: a torn last
/// line (the process died in the middle of a write), or a damaged line elsewhere. Empty lines
/// are skipped silently.
///
/// # Errors
/// [`Error::Io`] only when the file cannot be read.
pub fn load(path: impl AsRef<Path>) -> Result<Loaded, Error> {
    let bytes = std::fs::read(path).map_err(io)?;
    let mut loaded = Loaded::default();
    let complete = bytes.ends_with(b"\n");
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    // `split` yields an empty piece after a final '\n'.
    let count = if complete {
        lines.len() - 1
    } else {
        lines.len()
    };
    for (i, line) in lines.iter().take(count).enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Message>(line) {
            Ok(m) => loaded.messages.push(m),
            Err(e) if i + 1 == count && !complete => loaded.warnings.push(format!(
                "line {}: torn last line ({} bytes, no line end), skipped: {e}",
                i + 1,
                line.len()
            )),
            Err(e) => loaded
                .warnings
                .push(format!("line {}: not a message, skipped: {e}", i + 1)),
        }
    }
    Ok(loaded)
}
