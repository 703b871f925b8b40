//! `Writer`: a listener that appends wire lines to any `io::Write`.

use std::fmt;
use std::io::Write;

use super::codec::write_event;
use super::lines::LineSink;
use super::pagent::{Encoder, Version};
use crate::Error;
use crate::event::AgentEvent;

/// The names and fields a [`Writer`] writes, and a [`Decoder`](super::Decoder) reads
/// ([`Decoder::for_dialect`](super::Decoder::for_dialect); a
/// [`Mirror`](super::Mirror) tells them apart itself).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// Our own events, one line each, decodable with [`super::Decoder`] and mirrorable with
    /// [`super::Mirror`].
    #[default]
    Native,
    /// The Python pagent v1 wire (`pagent.wire`): `RunBegin`, `TurnBegin`, `TextDelta`,
    /// `ReasoningDelta`, `StepEnd`, `ToolCallBegin`, `ToolResult`, `TurnEnd`, `RunEnd`.
    PagentV1,
    /// The Python pagent v4 wire (`pagentv4.adapters.acp`): as v1 with `TurnResult` instead of
    /// `StepEnd`, and `stop_reason` on `TurnEnd` and `RunEnd`.
    ///
    /// How a run's ending reads in the two pagent dialects (the [module
    /// docs](super#the-pagent-dialects) have the whole mapping):
    ///
    /// | our `RunStopReason` | v1 | v4 |
    /// |---|---|---|
    /// | `NoToolCalls`, `EmptyResponse` | last `TurnEnd` `stopped: true`, `RunEnd` | `TurnEnd` / `RunEnd` with that `stop_reason` |
    /// | `MaxTurns` | last `TurnEnd` `stopped: false`, `RunEnd` | `max_turns` |
    /// | `Cancelled` (an abort) | like `MaxTurns` after a turn with tool calls, else `stopped: true` | `TurnEnd` / `RunEnd` `cancelled`, also for an abort between turns |
    /// | `Error` (a provider error, a panic in the loop) | the stream breaks off: no `StepEnd` for the failed reply, no `TurnEnd`, no `RunEnd` | the same, no `TurnResult` / `TurnEnd` / `RunEnd` |
    ///
    /// A failed run breaks off because pagent's own stream does: its v1 `Agent.arun_wire` and
    /// v4 `Runner.run` raise the provider's exception out of the event iterator, and neither
    /// wire has an error event or stop reason. A pagent consumer tells a failed run by the
    /// missing `RunEnd`; the native dialect carries the error itself.
    PagentV4,
}

enum Format {
    Native,
    Pagent(Encoder),
}

impl Format {
    /// Appends the lines of `event`, each with its `\n`.
    fn encode(&mut self, event: &AgentEvent, buf: &mut Vec<u8>) {
        match self {
            Format::Native => write_event(buf, event),
            Format::Pagent(encoder) => encoder.encode(event, buf),
        }
    }
}

/// Writes an agent's events as wire lines to `W` (a file, a socket, stdout, a `Vec<u8>`).
///
/// Register it with `agent.subscribe(writer.listener())`. Each line is written whole, with
/// its `\n`, and `W` is flushed after each event, so a reader at the other end (or a crash)
/// sees whole lines only up to the last event. `Writer` is a cheap `Clone` handle; clones
/// share the output.
///
/// # Errors
/// A listener cannot return an error: the first write or flush error is kept (see
/// [`Writer::error`]) and the writer writes nothing after it, since a stream with a hole in
/// it would mislead its reader.
///
/// ```
/// use pagent::llm::{Faux, FauxReply};
/// use pagent::{Agent, wire};
///
/// let agent = Agent::builder().provider(Faux::default().reply(FauxReply::text("Hi!"))).build()?;
/// let log = wire::Writer::new(Vec::new());
/// let _sub = agent.subscribe(log.listener());
/// agent.prompt("Hello")?;
///
/// let text = log.with_output(|bytes| String::from_utf8(bytes.clone()).unwrap());
/// assert!(text.starts_with(r#"{"jsonrpc":"2.0","method":"AgentStart","params":{}}"#));
/// assert_eq!(text.lines().last().map(|l| l.contains(r#""method":"AgentEnd""#)), Some(true));
/// # Ok::<(), pagent::Error>(())
/// ```
pub struct Writer<W> {
    sink: LineSink<W, Format>,
}

impl<W> Clone for Writer<W> {
    fn clone(&self) -> Writer<W> {
        Writer {
            sink: self.sink.clone(),
        }
    }
}

impl<W> fmt::Debug for Writer<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dialect = self.sink.with_state(|format| match format {
            Format::Native => "native",
            Format::Pagent(_) => "pagent",
        });
        f.debug_struct("Writer")
            .field("dialect", &dialect)
            .field("error", &self.sink.error())
            .finish()
    }
}

impl<W: Write + Send + 'static> Writer<W> {
    /// A writer of the native dialect.
    pub fn new(out: W) -> Writer<W> {
        Writer::with_dialect(out, Dialect::Native)
    }

    /// A writer of `dialect`.
    pub fn with_dialect(out: W, dialect: Dialect) -> Writer<W> {
        let format = match dialect {
            Dialect::Native => Format::Native,
            Dialect::PagentV1 => Format::Pagent(Encoder::new(Version::V1)),
            Dialect::PagentV4 => Format::Pagent(Encoder::new(Version::V4)),
        };
        Writer {
            sink: LineSink::new(out, format),
        }
    }

    /// Writes the lines of `event` and flushes.
    ///
    /// Blocks while `W` blocks (a full pipe, a slow disk).
    ///
    /// # Errors
    /// [`Error::Io`] when writing or flushing fails, now or at an earlier event (the writer
    /// then stays silent).
    pub fn write_event(&self, event: &AgentEvent) -> Result<(), Error> {
        self.sink.write(|format, buf| format.encode(event, buf))
    }

    /// A listener for [`crate::Agent::subscribe`] that writes every event (see
    /// [`Writer::write_event`]; errors are kept in [`Writer::error`]).
    pub fn listener(&self) -> impl Fn(&AgentEvent) + Send + Sync + 'static {
        self.sink.listener(Format::encode)
    }

    /// The first write error, if writing failed.
    pub fn error(&self) -> Option<Error> {
        self.sink.error()
    }

    /// Runs `f` on the output (to read a `Vec<u8>` back, or sync a file). Holds the writer's
    /// lock meanwhile: an event being written waits for `f`.
    pub fn with_output<R>(&self, f: impl FnOnce(&mut W) -> R) -> R {
        self.sink.with_output(f)
    }
}
