//! Sessions: save a transcript as JSONL, append to it as a run goes, restore it into a new
//! agent.
//!
//! A session file holds one [`Message`] per line, as JSON (`{"role":"user","content":".."}`,
//! the same shapes as on the [wire](crate::wire)), in transcript order. A [`Writer`] registered
//! as a listener appends each message when it ends (`MessageEnd`) and flushes it to the
//! operating system at once, so a crash loses at most the message in flight; [`load`] skips a
//! torn last line with a warning and returns everything before it.
//!
//! Images and documents are saved with their message: inline bytes as base64 (a 3 MB
//! screenshot takes a 4 MB line, well under [`MAX_MESSAGE_LINE_LEN`]), a URL as the URL. A
//! loaded message holds its bytes once, shared by every snapshot and request after it.
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
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::Error;
use crate::event::AgentEvent;
use crate::message::Message;
use crate::wire::codec::write_json;
use crate::wire::lines::{Line, LineSink, read_line};

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
    Error::from(e)
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
        end_last_line(&mut file).map_err(io)?;
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
    /// [`Writer::error`]). The file only grows: a `MessagesReplaced`
    /// ([`crate::Agent::reset`], [`crate::Agent::replace_messages`]) is not written; give the
    /// new transcript a new file ([`Writer::create`], or [`save`] it whole).
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

/// The longest line [`load`] reads: 256 MiB. A session is the program's own file and one
/// message may hold a large tool output, so the limit is far above the wire's; it only
/// guards against a file that is not a session at all.
pub const MAX_MESSAGE_LINE_LEN: usize = 256 * 1024 * 1024;

/// Reads a session file, with lines up to [`MAX_MESSAGE_LINE_LEN`] bytes.
///
/// Lines that are not a message are skipped with a warning, never a failure: a torn last
/// line (the process died in the middle of a write), a damaged line elsewhere, or a line
/// over the limit (see [`load_with_limit`] to raise it). Empty lines are skipped silently.
/// The file is read line by line: it is never held in memory whole.
///
/// # Errors
/// [`Error::Io`] only when the file cannot be read.
pub fn load(path: impl AsRef<Path>) -> Result<Loaded, Error> {
    load_with_limit(path, MAX_MESSAGE_LINE_LEN)
}

/// [`load`] with lines up to `max_line_len` bytes, line end excluded; a longer line is
/// skipped with a warning.
///
/// # Errors
/// [`Error::Io`] only when the file cannot be read.
pub fn load_with_limit(path: impl AsRef<Path>, max_line_len: usize) -> Result<Loaded, Error> {
    let mut input = BufReader::new(File::open(path).map_err(io)?);
    let mut buf = Vec::new();
    let mut loaded = Loaded::default();
    for number in 1u64.. {
        match read_line(&mut input, &mut buf, max_line_len).map_err(io)? {
            Line::End => break,
            Line::TooLong(n) => loaded.warnings.push(format!(
                "line {number}: line of {n} bytes is over the limit of {max_line_len} bytes, skipped"
            )),
            Line::Whole { .. } if buf.iter().all(u8::is_ascii_whitespace) => {}
            Line::Whole { ended } => match serde_json::from_slice::<Message>(&buf) {
                Ok(m) => loaded.messages.push(m),
                Err(e) if !ended => loaded.warnings.push(format!(
                    "line {number}: torn last line ({} bytes, no line end), skipped: {e}",
                    buf.len()
                )),
                Err(e) => loaded
                    .warnings
                    .push(format!("line {number}: not a message, skipped: {e}")),
            },
        }
    }
    Ok(loaded)
}

/// Makes a non-empty session file end with a line end, reading only its last line: a whole
/// message without its line end gets one, a torn last line is cut off.
fn end_last_line(file: &mut File) -> std::io::Result<()> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 || last_byte(file, len)? == b'\n' {
        return Ok(());
    }
    // Where the last line starts: after the last '\n', scanning back a block at a time.
    let mut block = [0u8; 8192];
    let mut start = len;
    while start > 0 {
        let n = start.min(block.len() as u64);
        file.seek(SeekFrom::Start(start - n))?;
        let block = &mut block[..n as usize];
        file.read_exact(block)?;
        if let Some(i) = block.iter().rposition(|&b| b == b'\n') {
            start = start - n + i as u64 + 1;
            break;
        }
        start -= n;
    }
    file.seek(SeekFrom::Start(start))?;
    let last = BufReader::new(Read::by_ref(file).take(len - start));
    if serde_json::from_reader::<_, Message>(last).is_ok() {
        // A whole message without its line end (written by hand): keep it.
        file.write_all(b"\n")
    } else {
        file.set_len(start)?;
        file.seek(SeekFrom::End(0)).map(drop)
    }
}

fn last_byte(file: &mut File, len: u64) -> std::io::Result<u8> {
    let mut byte = [0u8];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut byte)?;
    Ok(byte[0])
}
