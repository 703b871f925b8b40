//! `Faux`: a deterministic scripted provider for tests, examples and offline demos.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::{Accepts, CancelToken, OnEvent, Provider, ReplyEnd, Request, StreamEvent};
use crate::Error;
use crate::message::{StopReason, Usage};

/// A scripted provider: each call takes the next reply from a queue and streams it in small
/// chunks, exactly as a real server would, so the agent's events, state and tools behave the
/// same as in production.
///
/// `Faux` is a cheap handle (clone it to keep one for assertions): [`Faux::requests`] tells
/// what the agent sent (the last [`Faux::DEFAULT_RECORDED`] requests, or as many as
/// [`Faux::record_requests`] says), and replies can be pushed while a run is going on.
///
/// ```
/// use pagent::llm::{Faux, FauxReply};
/// use serde_json::json;
///
/// let simple = Faux::new([FauxReply::text("Hello!"), FauxReply::text("Bye.")]);
/// assert_eq!(simple.remaining(), 2);
///
/// let faux = Faux::default()
///     .reply(FauxReply::tool_call("add", json!({"a": 1, "b": 2})))
///     .reply_with(|request| {
///         // Answer from the tool result the agent sent back.
///         let last = request.messages.last().map(|m| m.text()).unwrap_or_default();
///         FauxReply::text(format!("The sum is {last}."))
///     });
/// assert_eq!(faux.remaining(), 2);
/// ```
#[derive(Clone)]
pub struct Faux {
    inner: Arc<Inner>,
    chunk_chars: usize,
    tokens_per_second: Option<f64>,
    otherwise: Option<Arc<ReplyFn>>,
    accepts: Accepts,
}

type ReplyFn = dyn Fn(&Request) -> FauxReply + Send + Sync;

enum Scripted {
    Fixed(FauxReply),
    Dynamic(Box<ReplyFn>),
}

struct Inner {
    queue: Mutex<VecDeque<Scripted>>,
    requests: Mutex<Recorded>,
    // Tool call ids are unique over the provider's life, as a real server's are.
    calls_made: AtomicUsize,
}

/// The requests kept for [`Faux::requests`]: the newest `limit`.
struct Recorded {
    limit: usize,
    kept: VecDeque<Request>,
}

impl Default for Inner {
    fn default() -> Inner {
        Inner {
            queue: Mutex::default(),
            requests: Mutex::new(Recorded {
                limit: Faux::DEFAULT_RECORDED,
                kept: VecDeque::new(),
            }),
            calls_made: AtomicUsize::new(0),
        }
    }
}

impl Faux {
    /// How many requests [`Faux::requests`] keeps unless told otherwise.
    pub const DEFAULT_RECORDED: usize = 64;

    /// A provider that plays `script`, one reply per model call, in order
    /// (`Faux::default()` starts with an empty script). Defaults to chunks of 4 characters and
    /// no pacing.
    pub fn new(script: impl IntoIterator<Item = FauxReply>) -> Faux {
        let faux = Faux {
            inner: Arc::default(),
            chunk_chars: 4,
            tokens_per_second: None,
            otherwise: None,
            accepts: Accepts::all(),
        };
        for reply in script {
            faux.push(reply);
        }
        faux
    }

    /// Adds a reply to the end of the script.
    #[must_use]
    pub fn reply(self, reply: FauxReply) -> Faux {
        self.push(reply);
        self
    }

    /// Adds a reply computed from the request when its turn comes.
    #[must_use]
    pub fn reply_with(self, f: impl Fn(&Request) -> FauxReply + Send + Sync + 'static) -> Faux {
        self.push_with(f);
        self
    }

    /// Adds a reply to the end of the script, through a shared handle.
    pub fn push(&self, reply: FauxReply) {
        self.inner.queue.lock().push_back(Scripted::Fixed(reply));
    }

    /// Adds a reply computed from the request, through a shared handle.
    pub fn push_with(&self, f: impl Fn(&Request) -> FauxReply + Send + Sync + 'static) {
        self.inner
            .queue
            .lock()
            .push_back(Scripted::Dynamic(Box::new(f)));
    }

    /// Streams in chunks of `chars` characters (at least 1). Defaults to 4.
    #[must_use]
    pub fn chunk_chars(mut self, chars: usize) -> Faux {
        self.chunk_chars = chars.max(1);
        self
    }

    /// Paces the stream at about `tokens` chunks per second, for demos. Defaults to no
    /// pacing (as fast as the agent takes them). The pauses end early on abort.
    #[must_use]
    pub fn tokens_per_second(mut self, tokens: f64) -> Faux {
        self.tokens_per_second = (tokens > 0.0).then_some(tokens);
        self
    }

    /// Answers with `f` whenever the script is empty, instead of failing with
    /// [`Error::ScriptExhausted`]: a demo that replies to whatever it is asked, for as long
    /// as it is asked. Defaults to none.
    ///
    /// ```
    /// use pagent::llm::{Faux, FauxReply};
    /// use pagent::Agent;
    ///
    /// let echo = Faux::default().otherwise(|request| {
    ///     let said = request.messages.last().map(|m| m.text()).unwrap_or_default();
    ///     FauxReply::text(format!("You said: {said}"))
    /// });
    /// let agent = Agent::builder().provider(echo).build()?;
    /// assert_eq!(agent.prompt("hi")?.text(), "You said: hi");
    /// assert_eq!(agent.prompt("again")?.text(), "You said: again");
    /// # Ok::<(), pagent::Error>(())
    /// ```
    #[must_use]
    pub fn otherwise(mut self, f: impl Fn(&Request) -> FauxReply + Send + Sync + 'static) -> Faux {
        self.otherwise = Some(Arc::new(f));
        self
    }

    /// What the scripted model takes besides text, checked as a real provider checks it:
    /// a request with a part it does not take fails with
    /// [`Error::UnsupportedContent`] before the script is read (the request is not
    /// recorded, and no reply is used up). Defaults to [`Accepts::all`]: images, documents
    /// and audio reach [`Faux::requests`] and `reply_with` closures as the agent sent them,
    /// their bytes shared with the transcript.
    ///
    /// ```
    /// use pagent::llm::{Accepts, Faux, FauxReply};
    /// use pagent::{Agent, Error, Image, UserMessage};
    ///
    /// let text_only = Faux::new([FauxReply::text("unused")]).accepts(Accepts::text());
    /// let agent = Agent::builder().provider(text_only.clone()).build()?;
    /// let prompt = UserMessage::new("What is this?").with_part(Image::new("image/png", vec![0u8; 4]));
    /// let e = agent.prompt(prompt).unwrap_err();
    /// assert!(matches!(e.error(), Error::UnsupportedContent(_)));
    /// assert_eq!(text_only.remaining(), 1);
    /// # Ok::<(), pagent::Error>(())
    /// ```
    #[must_use]
    pub fn accepts(mut self, accepts: Accepts) -> Faux {
        self.accepts = accepts;
        self
    }

    /// How many scripted replies are left.
    pub fn remaining(&self) -> usize {
        self.inner.queue.lock().len()
    }

    /// Keeps the newest `n` requests for [`Faux::requests`] (0 keeps none), dropping the
    /// oldest beyond that, so a long-running demo holds bounded memory. Applies to every
    /// clone of this handle. Defaults to [`Faux::DEFAULT_RECORDED`].
    ///
    /// A kept request shares its messages with the agent's transcript (`Arc`s), so each one
    /// costs a pointer per message, not a copy of the transcript.
    #[must_use]
    pub fn record_requests(self, n: usize) -> Faux {
        let mut recorded = self.inner.requests.lock();
        recorded.limit = n;
        while recorded.kept.len() > n {
            recorded.kept.pop_front();
        }
        drop(recorded);
        self
    }

    /// The requests received so far, oldest first: the newest [`Faux::DEFAULT_RECORDED`]
    /// of them, or as many as [`Faux::record_requests`] set.
    pub fn requests(&self) -> Vec<Request> {
        self.inner.requests.lock().kept.iter().cloned().collect()
    }

    fn pause(&self, cancel: &CancelToken) -> bool {
        match self.tokens_per_second {
            Some(tps) => cancel.wait_timeout(Duration::from_secs_f64(1.0 / tps)),
            None => cancel.is_cancelled(),
        }
    }
}

impl Default for Faux {
    fn default() -> Faux {
        Faux::new([])
    }
}

impl fmt::Debug for Faux {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faux")
            .field("remaining", &self.remaining())
            .field("chunk_chars", &self.chunk_chars)
            .field("tokens_per_second", &self.tokens_per_second)
            .field("otherwise", &self.otherwise.is_some())
            .field("accepts", &self.accepts)
            .finish()
    }
}

impl Provider for Faux {
    fn stream(
        &self,
        request: &Request,
        cancel: &CancelToken,
        on_event: &mut OnEvent<'_>,
    ) -> Result<ReplyEnd, Error> {
        self.accepts.check(request)?;
        let mut recorded = self.inner.requests.lock();
        if recorded.limit > 0 {
            if recorded.kept.len() == recorded.limit {
                recorded.kept.pop_front();
            }
            recorded.kept.push_back(request.clone());
        }
        drop(recorded);
        // Take the reply out before running a closure, so the closure may push more.
        let next = self.inner.queue.lock().pop_front();
        let reply = match next {
            Some(Scripted::Fixed(r)) => r,
            Some(Scripted::Dynamic(f)) => f(request),
            None => match &self.otherwise {
                Some(f) => f(request),
                None => return Err(Error::ScriptExhausted),
            },
        };
        if let Some(delay) = reply.delay
            && cancel.wait_timeout(delay)
        {
            return Err(Error::Aborted);
        }
        if let Some(message) = reply.fail_at_once {
            return Err(Error::Provider(message));
        }
        let mut calls = 0;
        // Bytes of text, reasoning and arguments streamed, for the usage estimate.
        let mut streamed = 0;
        for part in &reply.parts {
            let pieces: Vec<StreamEvent> = match part {
                Part::Text(t) => chunks(t, self.chunk_chars).map(StreamEvent::text).collect(),
                Part::Thinking(t) => chunks(t, self.chunk_chars)
                    .map(StreamEvent::thinking)
                    .collect(),
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    let index = calls;
                    calls += 1;
                    let n = self.inner.calls_made.fetch_add(1, Ordering::Relaxed) + 1;
                    let id = id.clone().unwrap_or_else(|| format!("call_{n}"));
                    std::iter::once(StreamEvent::ToolCallStart {
                        id,
                        name: name.clone(),
                    })
                    .chain(chunks(arguments, self.chunk_chars).map(|a| {
                        StreamEvent::ToolCallDelta {
                            index,
                            arguments: a.to_owned(),
                        }
                    }))
                    .collect()
                }
            };
            streamed += match part {
                Part::Text(t) | Part::Thinking(t) => t.len(),
                Part::ToolCall { arguments, .. } => arguments.len(),
            };
            for piece in pieces {
                if self.pause(cancel) {
                    return Err(Error::Aborted);
                }
                on_event(piece)?;
            }
        }
        if let Some(stall) = reply.stall_after
            && cancel.wait_timeout(stall)
        {
            return Err(Error::Aborted);
        }
        if let Some(message) = reply.error {
            return Err(Error::Provider(message));
        }
        let usage = reply
            .usage
            .unwrap_or_else(|| estimate_usage(request, streamed));
        on_event(StreamEvent::Usage { usage })?;
        let stop = reply.stop.unwrap_or(if calls > 0 {
            StopReason::ToolUse
        } else {
            StopReason::Stop
        });
        Ok(ReplyEnd::new(stop))
    }

    fn name(&self) -> &str {
        "faux"
    }
}

/// Splits `s` into pieces of `n` characters (never inside a character).
fn chunks(s: &str, n: usize) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest
            .char_indices()
            .nth(n)
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let (head, tail) = rest.split_at(end);
        rest = tail;
        Some(head)
    })
}

/// About four characters a token, like the tokenizers of common models.
fn estimate_usage(request: &Request, reply_bytes: usize) -> Usage {
    let prompt_chars: usize = request.system_prompt.len()
        + request
            .messages
            .iter()
            .map(|m| m.text().len())
            .sum::<usize>();
    let input = (prompt_chars / 4).max(1) as u64;
    let output = (reply_bytes / 4).max(1) as u64;
    Usage {
        input,
        output,
        total: input + output,
        ..Usage::default()
    }
}

/// One scripted reply: parts streamed in order, then a stop reason, usage, or an error.
#[derive(Clone, Debug, Default)]
pub struct FauxReply {
    parts: Vec<Part>,
    stop: Option<StopReason>,
    usage: Option<Usage>,
    error: Option<String>,
    fail_at_once: Option<String>,
    delay: Option<Duration>,
    stall_after: Option<Duration>,
}

#[derive(Clone, Debug)]
enum Part {
    Text(String),
    Thinking(String),
    ToolCall {
        id: Option<String>,
        name: String,
        arguments: String,
    },
}

impl FauxReply {
    /// An empty reply (the agent ends such a run with `EmptyResponse`).
    pub fn empty() -> FauxReply {
        FauxReply::default()
    }

    /// A reply that streams `text`.
    pub fn text(text: impl Into<String>) -> FauxReply {
        FauxReply::default().then_text(text)
    }

    /// A reply that streams `value` as JSON text: the answer to a request for a structured
    /// answer (see [`Request::output`]), as a server that constrains its output writes it.
    pub fn json(value: serde_json::Value) -> FauxReply {
        FauxReply::text(value.to_string())
    }

    /// A reply that calls `name` with `arguments`.
    pub fn tool_call(name: impl Into<String>, arguments: serde_json::Value) -> FauxReply {
        FauxReply::default().then_tool_call(name, arguments)
    }

    /// A reply that fails before anything streams.
    pub fn fail(message: impl Into<String>) -> FauxReply {
        FauxReply {
            fail_at_once: Some(message.into()),
            ..FauxReply::default()
        }
    }

    /// Streams `text` after what is already scripted.
    #[must_use]
    pub fn then_text(mut self, text: impl Into<String>) -> FauxReply {
        self.parts.push(Part::Text(text.into()));
        self
    }

    /// Streams reasoning text after what is already scripted.
    #[must_use]
    pub fn then_thinking(mut self, text: impl Into<String>) -> FauxReply {
        self.parts.push(Part::Thinking(text.into()));
        self
    }

    /// Calls `name` with `arguments` after what is already scripted. Ids are `call_1`,
    /// `call_2`... counted over the provider's life, unless set with [`FauxReply::with_id`].
    #[must_use]
    pub fn then_tool_call(
        self,
        name: impl Into<String>,
        arguments: serde_json::Value,
    ) -> FauxReply {
        self.then_tool_call_raw(name, arguments.to_string())
    }

    /// Calls `name` with raw argument text, which need not be valid JSON.
    #[must_use]
    pub fn then_tool_call_raw(
        mut self,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> FauxReply {
        self.parts.push(Part::ToolCall {
            id: None,
            name: name.into(),
            arguments: arguments.into(),
        });
        self
    }

    /// Sets the id of the last scripted tool call.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> FauxReply {
        if let Some(Part::ToolCall { id: slot, .. }) = self.parts.last_mut() {
            *slot = Some(id.into());
        }
        self
    }

    /// Ends the reply with `stop` instead of `Stop` (or `ToolUse` when it calls tools).
    #[must_use]
    pub fn stop(mut self, stop: StopReason) -> FauxReply {
        self.stop = Some(stop);
        self
    }

    /// Ends the reply as cut at the output token limit (`Length`).
    #[must_use]
    pub fn cut_by_length(self) -> FauxReply {
        self.stop(StopReason::Length)
    }

    /// Reports `usage` instead of an estimate of about four characters a token.
    #[must_use]
    pub fn usage(mut self, usage: Usage) -> FauxReply {
        self.usage = Some(usage);
        self
    }

    /// Streams what is scripted, then fails with `message`, as a connection that drops
    /// mid-reply would.
    #[must_use]
    pub fn then_error(mut self, message: impl Into<String>) -> FauxReply {
        self.error = Some(message.into());
        self
    }

    /// Waits `delay` before the first chunk, as a server that is slow to answer (abortable).
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> FauxReply {
        self.delay = Some(delay);
        self
    }

    /// After the scripted parts, waits `stall` before finishing, as a server that stops
    /// sending mid-reply (abortable).
    #[must_use]
    pub fn then_stall(mut self, stall: Duration) -> FauxReply {
        self.stall_after = Some(stall);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, ContentBlock};
    use crate::partial::PartialMessage;

    /// The events of one call, and the reply they assemble into, as the agent does it.
    fn run(faux: &Faux) -> (Vec<StreamEvent>, Result<AssistantMessage, Error>) {
        let mut events = Vec::new();
        let r = faux.stream(&Request::default(), &CancelToken::new(), &mut |e| {
            events.push(e);
            Ok(())
        });
        let mut partial = PartialMessage::new("");
        events.iter().for_each(|e| partial.push(e));
        (events, r.map(|end| partial.to_message(end.stop_reason)))
    }

    #[test]
    fn streams_text_in_small_chunks() {
        let faux = Faux::default().reply(FauxReply::text("Hello, world"));
        let (events, reply) = run(&faux);
        let texts: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["Hell", "o, w", "orld"]);
        let reply = reply.unwrap();
        assert_eq!(reply.text(), "Hello, world");
        assert_eq!(reply.stop_reason, StopReason::Stop);
    }

    #[test]
    fn tool_call_arguments_arrive_in_fragments() {
        let faux = Faux::default().reply(FauxReply::tool_call("f", serde_json::json!({"x": 10})));
        let (events, reply) = run(&faux);
        assert_eq!(
            events[0],
            StreamEvent::ToolCallStart {
                id: "call_1".into(),
                name: "f".into()
            }
        );
        assert!(events.len() > 3);
        let reply = reply.unwrap();
        assert_eq!(reply.stop_reason, StopReason::ToolUse);
        assert!(
            matches!(&reply.content[0], ContentBlock::ToolCall(c) if c.arguments == "{\"x\":10}")
        );
    }

    #[test]
    fn empty_queue_is_a_clear_error() {
        let (_, r) = run(&Faux::default());
        assert_eq!(r.unwrap_err(), Error::ScriptExhausted);
    }

    #[test]
    fn otherwise_answers_once_the_script_is_empty() {
        let faux = Faux::default()
            .reply(FauxReply::text("scripted"))
            .otherwise(|_| FauxReply::text("fallback"));
        let texts: Vec<String> = (0..3).map(|_| run(&faux).1.unwrap().text()).collect();
        assert_eq!(texts, ["scripted", "fallback", "fallback"]);
        assert_eq!(faux.remaining(), 0);
    }

    #[test]
    fn cancelled_token_stops_between_chunks() {
        let faux = Faux::default().reply(FauxReply::text("a long reply"));
        let cancel = CancelToken::new();
        cancel.cancel();
        let r = faux.stream(&Request::default(), &cancel, &mut |_| Ok(()));
        assert_eq!(r.unwrap_err(), Error::Aborted);
    }

    #[test]
    fn faux_keeps_a_bounded_history_of_requests() {
        let faux = Faux::default().otherwise(|_| FauxReply::text("ok"));
        let request = |model: &str| Request {
            model: model.into(),
            ..Request::default()
        };
        for i in 0..Faux::DEFAULT_RECORDED + 10 {
            faux.stream(&request(&i.to_string()), &CancelToken::new(), &mut |_| {
                Ok(())
            })
            .unwrap();
        }
        let kept = faux.requests();
        assert_eq!(kept.len(), Faux::DEFAULT_RECORDED);
        assert_eq!(kept[0].model, "10", "the oldest are dropped");
        let faux = faux.record_requests(2);
        assert_eq!(faux.requests().len(), 2);
        faux.stream(&request("last"), &CancelToken::new(), &mut |_| Ok(()))
            .unwrap();
        let models: Vec<_> = faux.requests().into_iter().map(|r| r.model).collect();
        assert_eq!(
            models,
            [(Faux::DEFAULT_RECORDED + 9).to_string(), "last".into()]
        );
        let none = Faux::default()
            .otherwise(|_| FauxReply::text("ok"))
            .record_requests(0);
        none.stream(&request("x"), &CancelToken::new(), &mut |_| Ok(()))
            .unwrap();
        assert!(none.requests().is_empty());
    }

    #[test]
    fn chunks_never_split_a_character() {
        let pieces: Vec<_> = chunks("añb€c", 2).collect();
        assert_eq!(pieces, ["añ", "b€", "c"]);
    }
}
