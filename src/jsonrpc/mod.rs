//! The one JSON-RPC 2.0 peer under the wire server ([`crate::wire::serve`]), the ACP server
//! ([`crate::acp`]) and the MCP client ([`crate::mcp`]): framing, classification, our
//! requests and their answers, the way out, and the threads that answer the other side.
//!
//! A protocol on the peer is a thin layer: it says which methods it answers and what they
//! do, and the peer does the rest, the same way for all three.
//!
//! # The parts
//! - [`Peer`]: one connection. [`Peer::deliver`] takes one message of the other side
//!   (a line, an HTTP body, the data of a server-sent event: the peer core never reads a
//!   stream itself) and classifies it ([`message::parse`]): a [`Call`] (a request, or a
//!   notification when its `id` is `None`) goes back to the layer, a response goes to the
//!   request of ours that waits for it, and what breaks the protocol comes back as a
//!   [`Violation`], which a server answers ([`Peer::refuse`]) and a client may take as the
//!   end of the connection. [`Peer::serve_lines`] is the reading loop of a server on a
//!   line-delimited stream.
//! - Our requests ([`Peer::request`], [`Peer::request_with`]): an id (1, 2, 3...), a channel the
//!   reply comes on, and a wait on that channel, the caller's [`CancelToken`] and a timeout
//!   at once ([`Ticket::wait`]); a request given up (cancelled, timed out, its [`Ticket`]
//!   dropped) is forgotten, and its late answer is reported ([`Delivered::Late`]), never
//!   mistaken for another's. When the connection ends ([`Peer::close`], or the way out
//!   failing) every waiting request wakes at once with the reason.
//! - The way out, a [`Link`]: for a line-delimited stream, a [`LineOut`] (a bounded queue and
//!   the one thread that writes it, see [`out`]); for HTTP, the MCP client's transport. A
//!   peer that stops reading gets its connection closed with [`LinkError::Stalled`] after
//!   [`out::STALL`] with [`out::MAX_QUEUED_BYTES`] waiting, not our memory grown.
//! - A bounded [`Pool`] of threads for the requests that cannot be answered inline (a prompt,
//!   a session's setup): a request that finds every thread busy is refused, never given a
//!   thread of its own.
//!
//! # Errors
//! The peer is generic over `E`, the layer's error for a connection that ended (the MCP
//! client's carries the server's exit status and stderr); the way out's own errors convert
//! into it ([`LinkError`]). Error codes are JSON-RPC's ([`codes`]); each protocol adds its own.
//!
//! # Ids
//! Our ids are numbers from 1. A response to an id never handed out is
//! [`Delivered::Unknown`]; an error response with a `null` id (the other side could not read
//! something we sent, and cannot say what) is [`Delivered::Unaddressed`]: reported, never
//! fatal. A request's own id may be any number or string (and `null` where the layer
//! accepts it, [`Peer::accept_null_id`]); it is given back unchanged in the answer.

// The client's side of the peer (notices, failed requests, waits) serves the MCP client,
// which is behind its feature.
#![cfg_attr(not(feature = "mcp"), allow(dead_code))]

use std::io::BufRead;
use std::sync::Arc;
#[cfg(test)]
use std::time::Duration;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::Error;
use crate::cancel::CancelToken;
use crate::wire::lines::{Line, read_line};

pub(crate) mod message;
pub(crate) mod out;
mod pending;
pub(crate) mod pool;

pub(crate) use message::{
    Call, RpcError, Violation, check_jsonrpc, codes, error_to, notification_to, parse_object,
    request_to, result_to, write_json,
};
pub(crate) use out::{Limits, LineOut, LinkError};
pub(crate) use pending::Reply;
pub(crate) use pool::Pool;

use message::Parsed;
use pending::{Pending, Routed};

/// Which way a message went, for a [`Trace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    In,
    Out,
}

/// Sees every message that goes out or comes in (for logs and tests), on the thread that
/// sends or delivers it.
pub(crate) type Trace = Arc<dyn Fn(Direction, &[u8]) + Send + Sync>;

/// Where a peer's messages go.
pub(crate) trait Link<E>: Send + Sync {
    /// Hands one message (a JSON text; a line link ends it with `\n`) to the other side.
    /// `request` is the id when it is a request of ours: a transport that carries the answer
    /// in its reply (HTTP) delivers it through [`Peer::deliver`], before or after this
    /// returns. Blocks at most until `cancel` is cancelled, or as the link documents.
    ///
    /// # Errors
    /// The message did not go out.
    fn send(&self, message: Vec<u8>, request: Option<u64>, cancel: &CancelToken) -> Result<(), E>;

    /// Whether `error` of [`Link::send`] ends the connection (every waiting request then
    /// fails with it). Defaults to true: a line output that failed stays failed.
    fn ends_connection(&self, _error: &E) -> bool {
        true
    }

    /// Hands `messages` over in order, none of them a request of ours, with no message of
    /// another thread between them where the link can promise it (a line link queues them
    /// at once). Defaults to one [`Link::send`] after another.
    ///
    /// # Errors
    /// The first message that did not go out; those after it are not sent.
    #[cfg_attr(not(feature = "acp"), allow(dead_code))]
    fn send_together(&self, messages: Vec<Vec<u8>>) -> Result<(), E> {
        let cancel = CancelToken::new();
        messages
            .into_iter()
            .try_for_each(|message| self.send(message, None, &cancel))
    }
}

impl<E: From<LinkError>> Link<E> for Arc<LineOut> {
    /// Queues the line; blocks while the queue is full, at most the output's stall time.
    fn send(&self, message: Vec<u8>, _: Option<u64>, _: &CancelToken) -> Result<(), E> {
        LineOut::send(self, &message).map_err(E::from)
    }

    /// Queues the lines as one piece, so no other thread's line comes between them.
    fn send_together(&self, messages: Vec<Vec<u8>>) -> Result<(), E> {
        let mut lines = Vec::with_capacity(messages.iter().map(|m| m.len() + 1).sum());
        for message in messages {
            lines.extend_from_slice(&message);
            if !message.ends_with(b"\n") {
                lines.push(b'\n');
            }
        }
        LineOut::send(self, &lines).map_err(E::from)
    }
}

/// What [`Peer::deliver`] made of one message.
#[derive(Debug, PartialEq)]
pub(crate) enum Delivered {
    /// Nothing but whitespace.
    Blank,
    /// A request or notification of the other side, for the layer to handle.
    Call(Call),
    /// A response, handed to our request with this id.
    Answered(u64),
    /// A response to our request with this id, which no longer waits for it.
    Late(u64),
    /// A response to an id we never sent.
    Unknown(Value),
    /// An error response with a `null` id: the other side could not read a message of ours.
    Unaddressed(RpcError),
}

/// Why [`Ticket::wait`] got no result.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum CallError<E> {
    /// The other side answered with an error.
    Rpc(RpcError),
    /// The request could not be sent, the transport failed it, or the connection ended.
    Failed(E),
    /// The caller's token was cancelled (an abort, or its own deadline).
    Cancelled,
    /// The request's own timeout passed.
    TimedOut,
}

/// One connection (see the module docs). `Send + Sync`: share it in an `Arc`; every method
/// may be called from any thread.
pub(crate) struct Peer<E = LinkError> {
    link: Box<dyn Link<E>>,
    pending: Pending<E>,
    null_id: bool,
    trace: Option<Trace>,
}

impl<E> Peer<E>
where
    E: Clone + Send + From<LinkError> + 'static,
{
    /// A peer whose messages go out through `link`.
    pub(crate) fn new(link: impl Link<E> + 'static) -> Peer<E> {
        Peer {
            link: Box::new(link),
            pending: Pending::new(),
            null_id: false,
            trace: None,
        }
    }

    /// Takes a request whose `id` is `null` (the spec allows it, and discourages it).
    /// Defaults to refusing it with -32600.
    #[must_use]
    pub(crate) fn accept_null_id(mut self) -> Peer<E> {
        self.null_id = true;
        self
    }

    /// Hands every message in and out to `trace`. Defaults to none.
    #[must_use]
    pub(crate) fn trace(mut self, trace: Option<Trace>) -> Peer<E> {
        self.trace = trace;
        self
    }

    fn traced(&self, direction: Direction, message: &[u8]) {
        if let Some(trace) = &self.trace {
            trace(direction, message);
        }
    }

    /// Takes one message of the other side: a response goes to the request that waits for
    /// it, a request or notification comes back for the layer.
    ///
    /// # Errors
    /// The [`Violation`] of a message that breaks JSON-RPC; a server answers it with
    /// [`Peer::refuse`].
    pub(crate) fn deliver(&self, message: &[u8]) -> Result<Delivered, Violation> {
        self.traced(Direction::In, message);
        Ok(match message::parse(message, self.null_id)? {
            Parsed::Blank => Delivered::Blank,
            Parsed::Call(call) => Delivered::Call(call),
            Parsed::Response {
                id: Value::Null,
                outcome: Err(error),
            } => Delivered::Unaddressed(error),
            Parsed::Response { id, outcome } => match self.pending.answer(&id, outcome) {
                Routed::Answered(n) => Delivered::Answered(n),
                Routed::Late(n) => Delivered::Late(n),
                Routed::Unknown(id) => Delivered::Unknown(id),
            },
        })
    }

    /// Reads `input` line by line until it ends, as the serving side of a line-delimited
    /// connection, holding at most `max_line_len` bytes of a line: every request and
    /// notification goes to `on_call`, in order, on this thread; responses go to our
    /// requests; a line over the limit and a line that breaks JSON-RPC are answered with
    /// their error (-32600 and `id` null for the first), and the reading goes on.
    ///
    /// Blocks until `input` ends.
    ///
    /// # Errors
    /// Reading `input` failed.
    pub(crate) fn serve_lines(
        &self,
        mut input: impl BufRead,
        max_line_len: usize,
        mut on_call: impl FnMut(Call),
    ) -> Result<(), Error> {
        let mut buf = Vec::new();
        loop {
            match read_line(&mut input, &mut buf, max_line_len).map_err(Error::from)? {
                Line::End => return Ok(()),
                Line::TooLong(n) => {
                    let _ = self.respond_error(
                        &Value::Null,
                        &RpcError::new(
                            codes::INVALID_REQUEST,
                            format!("line of {n} bytes is over the limit of {max_line_len} bytes"),
                        ),
                    );
                }
                Line::Whole { .. } => match self.deliver(&buf) {
                    Ok(Delivered::Call(call)) => on_call(call),
                    // Answers to our requests were routed; strays are nobody's.
                    Ok(_) => {}
                    Err(violation) => self.refuse(&violation),
                },
            }
        }
    }

    /// Sends one message as it is (a JSON text).
    ///
    /// # Errors
    /// The message did not go out (see [`Link::send`]); when that ends the connection, the
    /// peer is closed with the error.
    pub(crate) fn send(&self, message: Vec<u8>) -> Result<(), E> {
        self.send_to_link(message, None, &CancelToken::new())
    }

    /// Sends what `encode` appends to an empty buffer (one JSON text, or one line).
    ///
    /// # Errors
    /// As [`Peer::send`].
    pub(crate) fn send_with(&self, encode: impl FnOnce(&mut Vec<u8>)) -> Result<(), E> {
        let mut message = Vec::new();
        encode(&mut message);
        self.send(message)
    }

    fn send_to_link(
        &self,
        message: Vec<u8>,
        request: Option<u64>,
        cancel: &CancelToken,
    ) -> Result<(), E> {
        self.traced(Direction::Out, &message);
        self.link.send(message, request, cancel).inspect_err(|e| {
            if self.link.ends_connection(e) {
                self.close(e.clone());
            }
        })
    }

    /// Sends the notification `method` with `params`.
    ///
    /// # Errors
    /// As [`Peer::send`].
    #[cfg_attr(not(feature = "acp"), allow(dead_code))]
    pub(crate) fn notify(&self, method: &str, params: &impl Serialize) -> Result<(), E> {
        self.send_with(|buf| notification_to(buf, method, params))
    }

    /// Answers the request `id` with `result`.
    ///
    /// # Errors
    /// As [`Peer::send`].
    pub(crate) fn respond(&self, id: &Value, result: &impl Serialize) -> Result<(), E> {
        self.send_with(|buf| result_to(buf, id, result))
    }

    /// Answers the request `id` with `error`.
    ///
    /// # Errors
    /// As [`Peer::send`].
    pub(crate) fn respond_error(&self, id: &Value, error: &RpcError) -> Result<(), E> {
        self.send_with(|buf| error_to(buf, id, error))
    }

    /// Answers a call as a layer decided: its result or its error. Nothing is sent for a
    /// notification (`id` is `None`), nor for `Ok(None)` (a request answered later, as a
    /// prompt is when its run ends). A failure to send closed the peer already: nobody is
    /// left to tell.
    pub(crate) fn answer(&self, id: Option<&Value>, answer: Result<Option<Value>, RpcError>) {
        let Some(id) = id else { return };
        let _ = match answer {
            Ok(Some(result)) => self.respond(id, &result),
            Ok(None) => return,
            Err(error) => self.respond_error(id, &error),
        };
    }

    /// Answers a call as [`Peer::answer`] does, then sends the notification `method` with
    /// `params`, with no message of another thread between the two: what the other side
    /// may do once it has the answer (a request whose handling notifies, too) comes after
    /// the notification. Nothing is sent for a notification call (`id` is `None`) nor for
    /// `Ok(None)`; a failure to send closed the peer already.
    #[cfg_attr(not(feature = "acp"), allow(dead_code))]
    pub(crate) fn answer_then_notify(
        &self,
        id: Option<&Value>,
        answer: Result<Option<Value>, RpcError>,
        method: &str,
        params: &impl Serialize,
    ) {
        let Some(id) = id else { return };
        let mut first = Vec::new();
        match answer {
            Ok(Some(result)) => result_to(&mut first, id, &result),
            Ok(None) => return,
            Err(error) => error_to(&mut first, id, &error),
        }
        let mut then = Vec::new();
        notification_to(&mut then, method, params);
        self.traced(Direction::Out, &first);
        self.traced(Direction::Out, &then);
        let _ = self.link.send_together(vec![first, then]).inspect_err(|e| {
            if self.link.ends_connection(e) {
                self.close(e.clone());
            }
        });
    }

    /// Answers `violation` with its error, unless it is a broken response (which gets none).
    pub(crate) fn refuse(&self, violation: &Violation) {
        if violation.answerable {
            let _ = self.respond_error(&violation.id, &violation.error);
        }
    }

    /// Sends the request `method` with `params` and returns its [`Ticket`], on which its
    /// reply comes. `params` of `None` sends no `params` member.
    ///
    /// # Errors
    /// The reason the connection ended, or the send's error.
    pub(crate) fn request(
        &self,
        method: &str,
        params: Option<&Value>,
        cancel: &CancelToken,
    ) -> Result<Ticket<'_, E>, E> {
        self.request_with(method, |_| params.cloned(), cancel)
    }

    /// As [`Peer::request`], with the params made from the request's id, for a protocol
    /// that names the request in them (MCP's progress token is the request's id).
    ///
    /// # Errors
    /// As [`Peer::request`].
    pub(crate) fn request_with(
        &self,
        method: &str,
        params: impl FnOnce(u64) -> Option<Value>,
        cancel: &CancelToken,
    ) -> Result<Ticket<'_, E>, E> {
        let (id, replies) = self.pending.open()?;
        let ticket = Ticket {
            id,
            replies,
            pending: &self.pending,
        };
        let mut message = Vec::new();
        request_to(&mut message, &Value::from(id), method, params(id).as_ref());
        self.send_to_link(message, Some(id), cancel)?;
        Ok(ticket)
    }

    /// Answers our request `id` with `outcome` as if the response had come with its id, if
    /// it still waits: for a response the layer knows to be that request's although it
    /// does not say so (an HTTP reply's error with a `null` id).
    pub(crate) fn resolve(&self, id: u64, outcome: Result<Value, RpcError>) -> bool {
        matches!(
            self.pending.answer(&Value::from(id), outcome),
            Routed::Answered(_)
        )
    }

    /// Sends a request and waits for its result (see [`Ticket::wait`]).
    #[cfg(test)]
    ///
    /// Blocks until the answer comes, `cancel` is cancelled, `timeout` passes or the
    /// connection ends.
    ///
    /// # Errors
    /// See [`CallError`].
    pub(crate) fn call(
        &self,
        method: &str,
        params: Option<&Value>,
        cancel: &CancelToken,
        timeout: Option<Duration>,
        on_notice: &mut dyn FnMut(Value),
    ) -> Result<Value, CallError<E>> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        self.request(method, params, cancel)
            .map_err(CallError::Failed)?
            .wait(cancel, deadline, on_notice)
    }

    /// Hands `notice` to our request `id` while it waits (MCP's progress); false when it
    /// no longer waits or has [`pending::MAX_NOTICES`] unread.
    pub(crate) fn notice(&self, id: u64, notice: Value) -> bool {
        self.pending.notice(id, notice)
    }

    /// Fails our request `id` with `why`, if it still waits (an HTTP POST that failed).
    pub(crate) fn fail(&self, id: u64, why: E) {
        self.pending.fail(id, why);
    }

    /// Ends the connection with `why` (the first reason given wins): every waiting request
    /// wakes with it, and every later one fails with it. Sending is the link's own: a
    /// [`LineOut`] is finished by its owner.
    pub(crate) fn close(&self, why: E) {
        self.pending.close(why);
    }

    /// Why the connection ended, once it did.
    pub(crate) fn closed(&self) -> Option<E> {
        self.pending.closed()
    }

    /// How many of our requests wait for their answer.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.pending.len()
    }
}

/// A request of ours in flight: its id and the channel its reply comes on. Dropping it
/// forgets the request: a late answer is then [`Delivered::Late`].
pub(crate) struct Ticket<'p, E> {
    id: u64,
    replies: crossbeam_channel::Receiver<Reply<E>>,
    pending: &'p Pending<E>,
}

impl<E> Ticket<'_, E>
where
    E: Clone + From<LinkError>,
{
    /// The request's id (for the protocol's cancellation notice once it is given up).
    #[cfg_attr(not(feature = "acp"), allow(dead_code))]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The channel the reply comes on, to wait on it in a `select!` of one's own (a hook's
    /// `wait_for`). It disconnects when the connection ends.
    pub(crate) fn replies(&self) -> &crossbeam_channel::Receiver<Reply<E>> {
        &self.replies
    }

    /// Waits for the response, handing each notice to `on_notice` on this thread.
    ///
    /// Blocks until the response comes, `cancel` is cancelled (its own deadline included),
    /// `deadline` passes, or the connection ends. The request is forgotten when this
    /// returns; telling the other side that it was given up is the protocol's part.
    ///
    /// # Errors
    /// See [`CallError`].
    pub(crate) fn wait(
        self,
        cancel: &CancelToken,
        deadline: Option<Instant>,
        on_notice: &mut dyn FnMut(Value),
    ) -> Result<Value, CallError<E>> {
        let at = deadline.map_or_else(crossbeam_channel::never, crossbeam_channel::at);
        let timer = cancel.timer();
        loop {
            crossbeam_channel::select! {
                recv(self.replies) -> reply => match reply {
                    Ok(Reply::Response(Ok(result))) => return Ok(result),
                    Ok(Reply::Response(Err(e))) => return Err(CallError::Rpc(e)),
                    Ok(Reply::Failed(e)) => return Err(CallError::Failed(e)),
                    Ok(Reply::Notice(notice)) => on_notice(notice),
                    Err(_) => {
                        let why = self.pending.closed().unwrap_or_else(|| LinkError::Closed.into());
                        return Err(CallError::Failed(why));
                    }
                },
                recv(cancel.receiver()) -> _ => return Err(CallError::Cancelled),
                recv(timer) -> _ => {
                    if cancel.is_cancelled() {
                        return Err(CallError::Cancelled);
                    }
                }
                recv(at) -> _ => return Err(CallError::TimedOut),
            }
        }
    }
}

impl<E> Drop for Ticket<'_, E> {
    fn drop(&mut self) {
        self.pending.forget(self.id);
    }
}

#[cfg(test)]
mod tests;
