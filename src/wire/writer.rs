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

/// Encodes an agent's events one at a time as the lines of a [`Dialect`]: the per-event
/// encoder behind [`Writer`], for a program that moves the lines itself (over a socket it
/// owns, into a log with its own framing), as pagent's `encode_event_line` (`pagent.wire`,
/// `pagentv4.adapters.acp`) does for its events.
///
/// An event becomes zero or more lines. The native dialect writes one line per event
/// ([`super::encode_event_line`]); the pagent dialects need context, so the encoder keeps
/// some: pagent's `RunBegin` waits for the prompt text (which comes after our `TurnStart`),
/// the tool pairs are written in call order, and a `TurnEnd` or `AgentEnd` may close what the
/// run left open (see the [module docs](super#the-pagent-dialects)). Hand it every event of
/// an agent, in order, from the first `AgentStart` on; one encoder per stream.
///
/// ```
/// use pagent::llm::{Faux, FauxReply};
/// use pagent::wire::{Dialect, DialectEncoder};
/// use pagent::Agent;
///
/// let agent = Agent::builder().provider(Faux::default().reply(FauxReply::text("Hi!"))).build()?;
/// let mut encoder = DialectEncoder::new(Dialect::PagentV4);
/// let mut lines = Vec::new();
/// for event in agent.prompt_stream("Hello")? {
///     lines.extend(encoder.encode_event_line(&event));
/// }
/// assert_eq!(lines[0], r#"{"jsonrpc": "2.0", "method": "RunBegin", "params": {"user_input": "Hello"}}"#);
/// assert_eq!(lines.last().unwrap(), r#"{"jsonrpc": "2.0", "method": "RunEnd", "params": {"turn": 0, "stop_reason": "no_tool_calls"}}"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DialectEncoder {
    dialect: Dialect,
    pagent: Option<Encoder>,
}

impl DialectEncoder {
    /// An encoder of `dialect`, before any event.
    pub fn new(dialect: Dialect) -> DialectEncoder {
        let pagent = match dialect {
            Dialect::Native => None,
            Dialect::PagentV1 => Some(Encoder::new(Version::V1)),
            Dialect::PagentV4 => Some(Encoder::new(Version::V4)),
        };
        DialectEncoder { dialect, pagent }
    }

    /// The dialect it writes.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The lines `event` becomes, in order, each without its line break (zero or more: a
    /// pagent dialect writes nothing for some events, and more than one line for others).
    /// pagent's own `encode_event_line` returns the same text with a `\n` after it.
    pub fn encode_event_line(&mut self, event: &AgentEvent) -> Vec<String> {
        let mut buf = Vec::new();
        self.encode_event_to(event, &mut buf);
        // OK because the encoders write JSON, which is UTF-8.
        let text = String::from_utf8(buf).expect("JSON is UTF-8");
        text.lines().map(str::to_owned).collect()
    }

    /// Appends the lines of `event` to `out`, each with its `\n`: what a [`Writer`] writes.
    pub fn encode_event_to(&mut self, event: &AgentEvent, out: &mut Vec<u8>) {
        match &mut self.pagent {
            None => write_event(out, event),
            Some(encoder) => encoder.encode(event, out),
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
    sink: LineSink<W, DialectEncoder>,
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
        let dialect = self.sink.with_state(|encoder| encoder.dialect());
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
        Writer {
            sink: LineSink::new(out, DialectEncoder::new(dialect)),
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
        self.sink
            .write(|encoder, buf| encoder.encode_event_to(event, buf))
    }

    /// A listener for [`crate::Agent::subscribe`] that writes every event (see
    /// [`Writer::write_event`]; errors are kept in [`Writer::error`]).
    pub fn listener(&self) -> impl Fn(&AgentEvent) + Send + Sync + 'static {
        self.sink.listener(DialectEncoder::encode_event_to)
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
