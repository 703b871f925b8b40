//! The assistant reply while it streams, built with structural sharing.
//!
//! A [`PartialMessage`] is a persistent value: [`PartialMessage::apply`] returns a new partial
//! that shares everything but the touched path with the old one. Appending a delta costs
//! O(size of the delta) (plus a small constant), however long the reply already is, so every
//! snapshot and every `MessageUpdate` event can hold the whole partial without copying it.

use std::fmt;
use std::sync::Arc;

use imbl::Vector;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;

use crate::message::{AssistantMessage, ContentBlock, StopReason, ToolCall, Usage};
use crate::types::StreamEvent;

/// Text that grows by appending, shared between snapshots.
///
/// Short appends go into a small tail (at most [`Text::TAIL`] bytes), appended in place while
/// no other clone holds it and copied on write when one does; a full tail is sealed into a
/// persistent vector of pieces. Cloning is O(1) and appending costs O(size of the piece +
/// `TAIL`), never O(length of the text). Read it with `to_string()` (via `Display`) or walk
/// [`Text::chunks`]. Equality compares the characters, not how they were cut.
#[derive(Default)]
pub struct Text {
    // Behind one `Arc` (and absent for short texts) to keep `Text` small: it is moved and
    // cloned with every event that carries a partial reply.
    sealed: Option<Arc<Vector<Arc<str>>>>,
    // `None` while empty. The agent lets go of the published state's share before each
    // delta (see `PartialMessage::release_for`), so a streaming reply's tail is nearly
    // always appended to where it is: no allocation and no copy of what it holds.
    tail: Option<Arc<String>>,
    len: usize,
}

impl Clone for Text {
    fn clone(&self) -> Text {
        Text {
            sealed: self.sealed.clone(),
            tail: self.tail.clone(),
            len: self.len,
        }
    }

    /// Takes only the pieces that differ: the state's copy of a streaming reply is refreshed
    /// from the next partial at every delta, and all but the tail are the same `Arc`s (each
    /// skipped saves two atomic reference-count operations).
    fn clone_from(&mut self, source: &Text) {
        clone_arc_from(&mut self.sealed, &source.sealed);
        clone_arc_from(&mut self.tail, &source.tail);
        self.len = source.len;
    }
}

/// `target.clone_from(source)` for an optional `Arc`, without touching the count of one
/// that is already the same.
fn clone_arc_from<T: ?Sized>(target: &mut Option<Arc<T>>, source: &Option<Arc<T>>) {
    match (&*target, source) {
        (Some(a), Some(b)) if Arc::ptr_eq(a, b) => {}
        (None, None) => {}
        _ => *target = source.clone(),
    }
}

impl Text {
    /// The most bytes the tail holds before it is sealed.
    pub const TAIL: usize = 256;

    /// Empty text.
    pub fn new() -> Text {
        Text::default()
    }

    fn tail(&self) -> &str {
        self.tail.as_deref().map_or("", String::as_str)
    }

    /// Appends `piece`.
    pub fn push_str(&mut self, piece: &str) {
        if piece.is_empty() {
            return;
        }
        self.len += piece.len();
        let joined_len = self.tail().len() + piece.len();
        if joined_len <= Text::TAIL {
            if let Some(tail) = self.tail.as_mut().and_then(Arc::get_mut) {
                tail.push_str(piece);
                return;
            }
            // Shared (or none yet): a new tail, with room to grow in place after.
            let mut joined = String::with_capacity((2 * joined_len).clamp(32, Text::TAIL));
            joined.push_str(self.tail());
            joined.push_str(piece);
            self.tail = Some(Arc::new(joined));
            return;
        }
        let sealed = Arc::make_mut(self.sealed.get_or_insert_default());
        if let Some(tail) = self.tail.take() {
            sealed.push_back(Arc::from(tail.as_str()));
        }
        if piece.len() > Text::TAIL {
            sealed.push_back(Arc::from(piece));
        } else {
            let mut tail = String::with_capacity(Text::TAIL);
            tail.push_str(piece);
            self.tail = Some(Arc::new(tail));
        }
    }

    /// Drops this clone's share of the tail, and of the sealed pieces too when appending
    /// `added` bytes will seal the tail (the pieces are then pushed to), leaving the text
    /// without them (its `len` still counting them) until `clone_from` makes it whole
    /// again: only for a copy that is refreshed right after, so that the clone being
    /// appended to holds what it writes to alone. (Shared, the sealed pieces would be
    /// copied at every seal: for the persistent vector, its chunks of up to 64 pieces, a
    /// reference count each.)
    fn release_for(&mut self, added: usize) {
        if self.tail().len() + added > Text::TAIL {
            self.sealed = None;
        }
        self.tail = None;
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The text as one `String`, allocated once at its length (`to_string` goes through
    /// the formatter and grows its buffer).
    pub(crate) fn joined(&self) -> String {
        let mut out = String::with_capacity(self.len);
        self.chunks().for_each(|c| out.push_str(c));
        out
    }

    /// True when no byte was appended.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces in order; concatenated they are the text.
    pub fn chunks(&self) -> impl Iterator<Item = &str> {
        self.sealed
            .iter()
            .flat_map(|v| v.iter())
            .map(|c| &**c)
            .chain(std::iter::once(self.tail()))
            .filter(|c| !c.is_empty())
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.chunks().try_for_each(|c| f.write_str(c))
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string(), f)
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        self.len == other.len
            && self
                .chunks()
                .flat_map(str::bytes)
                .eq(other.chunks().flat_map(str::bytes))
    }
}

impl Eq for Text {}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        let mut t = Text::new();
        t.push_str(s);
        t
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Text::from(s.as_str()))
    }
}

/// One block of a streaming reply.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartialBlock {
    /// Visible text.
    Text(Text),
    /// Reasoning text, with the provider's signature once it arrived.
    Thinking {
        /// The reasoning so far.
        text: Text,
        /// The signature (Anthropic), if it arrived.
        signature: Option<Arc<str>>,
    },
    /// A tool call whose arguments are still arriving.
    ToolCall {
        /// The call id.
        id: Arc<str>,
        /// The tool name.
        name: Arc<str>,
        /// The raw JSON argument text so far.
        arguments: Text,
    },
}

impl Clone for PartialBlock {
    fn clone(&self) -> PartialBlock {
        match self {
            PartialBlock::Text(t) => PartialBlock::Text(t.clone()),
            PartialBlock::Thinking { text, signature } => PartialBlock::Thinking {
                text: text.clone(),
                signature: signature.clone(),
            },
            PartialBlock::ToolCall {
                id,
                name,
                arguments,
            } => PartialBlock::ToolCall {
                id: id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
            },
        }
    }

    /// As [`Text::clone_from`]: a block of the same kind keeps the pieces it shares.
    fn clone_from(&mut self, source: &PartialBlock) {
        match (self, source) {
            (PartialBlock::Text(t), PartialBlock::Text(s)) => t.clone_from(s),
            (
                PartialBlock::Thinking { text, signature },
                PartialBlock::Thinking {
                    text: t,
                    signature: s,
                },
            ) => {
                text.clone_from(t);
                clone_arc_from(signature, s);
            }
            (
                PartialBlock::ToolCall {
                    id,
                    name,
                    arguments,
                },
                PartialBlock::ToolCall {
                    id: i,
                    name: n,
                    arguments: a,
                },
            ) if Arc::ptr_eq(id, i) && Arc::ptr_eq(name, n) => arguments.clone_from(a),
            (target, source) => *target = source.clone(),
        }
    }
}

/// An assistant reply as far as it has streamed.
///
/// # Performance
/// `clone` is O(1) and [`PartialMessage::apply`] is O(size of the delta): a million deltas into
/// one reply stay linear in total. `clone_from` onto the partial of the previous delta costs
/// the pieces that changed (the text's tail, nearly always).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PartialMessage {
    // Shared with the state's `model` (see `PartialMessage::from_message_in`).
    model: Arc<str>,
    // `None` exactly when it would be empty (no block but the last, no call, no usage),
    // which keeps the derived equality meaningful: a reply of text alone never needs one,
    // and a new partial costs no allocation.
    settled: Option<Arc<Settled>>,
    // The last block, on its own. Deltas nearly always go to it, and the partial is shared
    // with every snapshot and event that holds it: in the persistent vector, each delta
    // would copy the vector's whole leaf (dozens of blocks) to write one of them. Invariant,
    // which keeps the derived equality meaningful: `last` is `Some` exactly when there is a
    // block, and it is the last one.
    last: Option<PartialBlock>,
}

/// The part of a partial that few deltas change, behind one `Arc` so that the partial (which
/// every `MessageUpdate` carries) stays small.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Settled {
    // Every block but the last.
    done: Vector<PartialBlock>,
    // Block index of each tool call, by call order, so argument fragments find their block.
    calls: Vector<usize>,
    usage: Usage,
}

impl Settled {
    fn is_empty(&self) -> bool {
        self.done.is_empty() && self.calls.is_empty() && self.usage == Usage::default()
    }
}

impl Clone for PartialMessage {
    fn clone(&self) -> PartialMessage {
        PartialMessage {
            model: self.model.clone(),
            settled: self.settled.clone(),
            last: self.last.clone(),
        }
    }

    fn clone_from(&mut self, source: &PartialMessage) {
        if !Arc::ptr_eq(&self.model, &source.model) {
            self.model = source.model.clone();
        }
        clone_arc_from(&mut self.settled, &source.settled);
        // `Option::clone_from` hands both `Some` to `PartialBlock::clone_from`.
        self.last.clone_from(&source.last);
    }
}

impl PartialMessage {
    /// An empty reply from `model`.
    pub fn new(model: &str) -> PartialMessage {
        PartialMessage::with_model(Arc::from(model))
    }

    /// An empty reply from `model`, sharing it.
    pub(crate) fn with_model(model: Arc<str>) -> PartialMessage {
        PartialMessage {
            model,
            settled: None,
            last: None,
        }
    }

    fn settled_mut(&mut self) -> &mut Settled {
        Arc::make_mut(self.settled.get_or_insert_default())
    }

    fn done_len(&self) -> usize {
        self.settled.as_ref().map_or(0, |s| s.done.len())
    }

    fn block_len(&self) -> usize {
        self.done_len() + usize::from(self.last.is_some())
    }

    fn push_block(&mut self, block: PartialBlock) {
        if let Some(previous) = self.last.replace(block) {
            self.settled_mut().done.push_back(previous);
        }
    }

    fn push_call(&mut self, block: PartialBlock) {
        let index = self.block_len();
        self.settled_mut().calls.push_back(index);
        self.push_block(block);
    }

    fn block_mut(&mut self, index: usize) -> Option<&mut PartialBlock> {
        if index == self.done_len() {
            self.last.as_mut()
        } else {
            self.settled_mut().done.get_mut(index)
        }
    }

    /// Drops this copy's share of what `delta` writes to in the last block's text: its
    /// tail, the piece a delta appends to, and its sealed pieces when the delta seals the
    /// tail (see `Text::release_for`). For the published state's copy of the reply, under
    /// the publication lock and refreshed with `clone_from` right after, so that the
    /// partial the delta goes into holds those alone and writes to them in place (see
    /// `dispatch`).
    pub(crate) fn release_for(&mut self, delta: &StreamEvent) {
        let added = match delta {
            StreamEvent::TextDelta { text } | StreamEvent::ThinkingDelta { text } => text.len(),
            StreamEvent::ToolCallDelta { arguments, .. } => arguments.len(),
            _ => 0,
        };
        match &mut self.last {
            Some(PartialBlock::Text(text))
            | Some(PartialBlock::Thinking { text, .. })
            | Some(PartialBlock::ToolCall {
                arguments: text, ..
            }) => text.release_for(added),
            None => {}
        }
    }

    /// The reply with `event` applied. Events that do not change the content (`Retry`) give
    /// back an equal partial.
    #[must_use]
    pub fn apply(&self, event: &StreamEvent) -> PartialMessage {
        let mut next = self.clone();
        next.push(event);
        next
    }

    /// Applies `event` in place.
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta { text } => match &mut self.last {
                Some(PartialBlock::Text(t)) => t.push_str(text),
                _ => self.push_block(PartialBlock::Text(Text::from(text.as_str()))),
            },
            // A signature closes its thinking block: reasoning after it is a new block, with
            // a signature of its own (Anthropic's interleaved thinking, the items of the
            // Responses API).
            StreamEvent::ThinkingDelta { text } => match &mut self.last {
                Some(PartialBlock::Thinking {
                    text: t,
                    signature: None,
                }) => t.push_str(text),
                _ => self.push_block(PartialBlock::Thinking {
                    text: Text::from(text.as_str()),
                    signature: None,
                }),
            },
            StreamEvent::ThinkingSignature { signature } => match &mut self.last {
                Some(PartialBlock::Thinking { signature: s, .. }) if s.is_none() => {
                    *s = Some(Arc::from(signature.as_str()))
                }
                // A reasoning block with no text to show, only its signature.
                _ => self.push_block(PartialBlock::Thinking {
                    text: Text::new(),
                    signature: Some(Arc::from(signature.as_str())),
                }),
            },
            StreamEvent::ToolCallStart { id, name } => self.push_call(PartialBlock::ToolCall {
                id: Arc::from(id.as_str()),
                name: Arc::from(name.as_str()),
                arguments: Text::new(),
            }),
            StreamEvent::ToolCallDelta { index, arguments } => {
                let block = self
                    .settled
                    .as_ref()
                    .and_then(|s| s.calls.get(*index).copied());
                match block.and_then(|b| self.block_mut(b)) {
                    Some(PartialBlock::ToolCall { arguments: a, .. }) => a.push_str(arguments),
                    // A fragment for a call that never started: keep the text rather than
                    // lose it, under an empty id and name.
                    _ => self.push_call(PartialBlock::ToolCall {
                        id: Arc::from(""),
                        name: Arc::from(""),
                        arguments: Text::from(arguments.as_str()),
                    }),
                }
            }
            StreamEvent::Usage { usage } => {
                if self.settled.is_some() || *usage != Usage::default() {
                    self.settled_mut().usage = *usage;
                }
                // Kept absent when empty (see `PartialMessage::settled`).
                if self.settled.as_ref().is_some_and(|s| s.is_empty()) {
                    self.settled = None;
                }
            }
            StreamEvent::Retry { .. } => {}
        }
    }

    /// The blocks so far.
    pub fn blocks(&self) -> impl Iterator<Item = &PartialBlock> {
        self.settled
            .iter()
            .flat_map(|s| s.done.iter())
            .chain(self.last.as_ref())
    }

    /// The number of blocks.
    pub fn block_count(&self) -> usize {
        self.block_len()
    }

    /// The visible text so far.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for b in self.blocks() {
            if let PartialBlock::Text(t) = b {
                out.extend(t.chunks());
            }
        }
        out
    }

    /// The reasoning text so far.
    pub fn thinking(&self) -> String {
        let mut out = String::new();
        for b in self.blocks() {
            if let PartialBlock::Thinking { text, .. } = b {
                out.extend(text.chunks());
            }
        }
        out
    }

    /// Bytes of text, reasoning and arguments so far.
    pub fn len(&self) -> usize {
        self.blocks()
            .map(|b| match b {
                PartialBlock::Text(t) => t.len(),
                PartialBlock::Thinking { text, .. } => text.len(),
                PartialBlock::ToolCall { arguments, .. } => arguments.len(),
            })
            .sum()
    }

    /// True when nothing streamed yet.
    pub fn is_empty(&self) -> bool {
        self.last.is_none()
    }

    /// The tool calls so far, arguments possibly incomplete.
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.blocks()
            .filter_map(|b| match b {
                PartialBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } => Some(ToolCall {
                    id: id.to_string(),
                    name: name.to_string(),
                    arguments: arguments.to_string(),
                }),
                _ => None,
            })
            .collect()
    }

    /// The ids of the tool calls so far, in call order, as the partial shares them.
    pub(crate) fn call_ids(&self) -> impl Iterator<Item = &Arc<str>> {
        self.blocks().filter_map(|b| match b {
            PartialBlock::ToolCall { id, .. } => Some(id),
            _ => None,
        })
    }

    /// The usage reported so far.
    pub fn usage(&self) -> Usage {
        self.settled
            .as_ref()
            .map_or_else(Usage::default, |s| s.usage)
    }

    /// The model that produces the reply.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The finished message with `stop_reason`.
    pub fn to_message(&self, stop_reason: StopReason) -> AssistantMessage {
        self.to_message_with(stop_reason, &mut KeptCalls::default())
    }

    /// As [`PartialMessage::to_message`], its calls taken from `kept` where it holds them
    /// as this partial does (rather than copied from the partial's).
    pub(crate) fn to_message_with(
        &self,
        stop_reason: StopReason,
        kept: &mut KeptCalls,
    ) -> AssistantMessage {
        let mut call = 0;
        let content = self
            .blocks()
            .map(|b| match b {
                PartialBlock::Text(t) => ContentBlock::Text { text: t.joined() },
                PartialBlock::Thinking { text, signature } => ContentBlock::Thinking {
                    thinking: text.joined(),
                    signature: signature.as_deref().map(str::to_owned),
                },
                PartialBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    call += 1;
                    ContentBlock::ToolCall(kept.take(call - 1, id, name, arguments).unwrap_or_else(
                        || ToolCall {
                            id: String::from(&**id),
                            name: String::from(&**name),
                            arguments: arguments.joined(),
                        },
                    ))
                }
            })
            .collect();
        AssistantMessage {
            content,
            stop_reason,
            usage: self.usage(),
            model: String::from(&*self.model),
            response_id: None,
            error_message: None,
        }
    }

    /// The partial that holds everything `message` holds (its stop reason aside).
    pub fn from_message(message: &AssistantMessage) -> PartialMessage {
        PartialMessage::from_message_with(message, Arc::from(message.model.as_str()))
    }

    /// As [`PartialMessage::from_message`], sharing `model` when it is the message's (the
    /// state's model, as a `MessageStart` is folded: no copy of it for each reply).
    pub(crate) fn from_message_in(message: &AssistantMessage, model: &Arc<str>) -> PartialMessage {
        if **model == *message.model {
            PartialMessage::from_message_with(message, model.clone())
        } else {
            PartialMessage::from_message(message)
        }
    }

    /// The partial of `message`, whose model is `model`.
    fn from_message_with(message: &AssistantMessage, model: Arc<str>) -> PartialMessage {
        let mut p = PartialMessage::with_model(model);
        for block in &message.content {
            match block {
                ContentBlock::Text { text } => {
                    p.push_block(PartialBlock::Text(Text::from(text.as_str())))
                }
                ContentBlock::Thinking {
                    thinking,
                    signature,
                } => p.push_block(PartialBlock::Thinking {
                    text: Text::from(thinking.as_str()),
                    signature: signature.as_deref().map(Arc::from),
                }),
                ContentBlock::ToolCall(call) => p.push_call(PartialBlock::ToolCall {
                    id: Arc::from(call.id.as_str()),
                    name: Arc::from(call.name.as_str()),
                    arguments: Text::from(call.arguments.as_str()),
                }),
            }
        }
        if message.usage != Usage::default() {
            p.settled_mut().usage = message.usage;
        }
        p
    }
}

/// The strings of a reply's call deltas, kept once their listeners returned: the finished
/// reply's calls take them (see [`PartialMessage::to_message_with`]) rather than copies of
/// the partial's. Files the deltas as [`PartialMessage::push`] does, by call order; the
/// first call in place (a reply nearly always has at most one).
#[derive(Debug, Default)]
pub(crate) struct KeptCalls(SmallVec<[Option<ToolCall>; 1]>);

impl KeptCalls {
    /// Keeps what `delta` (pushed into the partial) holds of a call.
    pub(crate) fn keep(&mut self, delta: StreamEvent) {
        match delta {
            StreamEvent::ToolCallStart { id, name } => self.push(ToolCall {
                id,
                name,
                arguments: String::new(),
            }),
            StreamEvent::ToolCallDelta { index, arguments } => match self.get_mut(index) {
                Some(call) if call.arguments.is_empty() => call.arguments = arguments,
                Some(call) => call.arguments.push_str(&arguments),
                // As the partial does: a fragment of a call that never started.
                None => self.push(ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments,
                }),
            },
            _ => {}
        }
    }

    fn push(&mut self, call: ToolCall) {
        self.0.push(Some(call));
    }

    fn get_mut(&mut self, index: usize) -> Option<&mut ToolCall> {
        self.0.get_mut(index).and_then(Option::as_mut)
    }

    /// The call at `index`, when it is the one the partial holds (else the partial's is
    /// copied: nothing kept is ever trusted blindly).
    fn take(&mut self, index: usize, id: &str, name: &str, arguments: &Text) -> Option<ToolCall> {
        let slot = self.0.get_mut(index)?;
        let same = slot.as_ref().is_some_and(|c| {
            c.id == id
                && c.name == name
                && c.arguments.len() == arguments.len()
                && arguments
                    .chunks()
                    .flat_map(str::bytes)
                    .eq(c.arguments.bytes())
        });
        if same { slot.take() } else { None }
    }
}

impl Serialize for PartialMessage {
    /// Serialized as the assistant message it would become (stop reason `stop`).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_message(StopReason::Stop).serialize(s)
    }
}

impl<'de> Deserialize<'de> for PartialMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PartialMessage, D::Error> {
        let m = AssistantMessage::deserialize(d)?;
        Ok(PartialMessage::from_message(&m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_stays_small_as_every_update_event_carries_one() {
        assert!(std::mem::size_of::<PartialMessage>() <= 96);
    }

    fn text(t: &str) -> StreamEvent {
        StreamEvent::TextDelta { text: t.into() }
    }

    /// Reasoning in two pieces closed by its signature, then "Hello" in two.
    fn signed_thinking_then_hello() -> Vec<StreamEvent> {
        vec![
            StreamEvent::ThinkingDelta { text: "th".into() },
            StreamEvent::ThinkingDelta { text: "ink".into() },
            StreamEvent::ThinkingSignature {
                signature: "sig".into(),
            },
            text("Hel"),
            text("lo"),
        ]
    }

    fn tail_of(p: &PartialMessage) -> *const String {
        match &p.last {
            Some(PartialBlock::Text(t)) => t.tail.as_ref().map_or(std::ptr::null(), Arc::as_ptr),
            _ => std::ptr::null(),
        }
    }

    /// The agent's cycle per delta: the published copy lets go of the tail, the delta is
    /// pushed, the copy is refreshed. The tail then grows where it is (the same buffer until
    /// it is sealed), and a clone kept elsewhere (a snapshot, an event in a channel) still
    /// reads what it held: its tail is copied on write.
    #[test]
    fn a_tail_no_other_clone_holds_grows_in_place_and_a_held_one_is_copied() {
        let mut p = PartialMessage::new("m").apply(&text("a"));
        let mut published = p.clone();
        let mut expected = String::from("a");
        let mut in_place = 0;
        for i in 0..100 {
            published.release_for(&text("bc"));
            let before = tail_of(&p);
            p.push(&text("bc"));
            expected.push_str("bc");
            in_place += usize::from(tail_of(&p) == before);
            published.clone_from(&p);
            assert_eq!(published, p, "delta {i}");
            assert_eq!(p.text(), expected);
        }
        // All but the first (its tail was shared) and the seal.
        assert!(in_place >= 97, "{in_place} of 100 in place");
        let held = p.clone();
        p.push(&text("d"));
        assert_eq!(held.text(), expected);
        expected.push('d');
        assert_eq!(p.text(), expected);
        assert_ne!(tail_of(&held), tail_of(&p));
    }

    /// The sealed pieces of the last block's text, and how many there are.
    fn sealed_of(p: &PartialMessage) -> (*const Vector<Arc<str>>, usize) {
        match &p.last {
            Some(PartialBlock::Text(t)) => t
                .sealed
                .as_ref()
                .map_or((std::ptr::null(), 0), |v| (Arc::as_ptr(v), v.len())),
            _ => (std::ptr::null(), 0),
        }
    }

    /// The same cycle through seals: the published copy lets go of the sealed pieces too
    /// when the delta seals the tail, so the seal pushes to them where they are (no copy of
    /// the persistent vector's chunk of pieces, a reference count each); a clone kept
    /// elsewhere still reads what it held, its pieces copied on write.
    #[test]
    fn a_seal_no_other_clone_shares_pushes_in_place_and_a_held_one_is_copied() {
        let piece = "x".repeat(100);
        let mut p = PartialMessage::new("m");
        let mut published = p.clone();
        let mut expected = String::new();
        let (mut seals, mut in_place) = (0, 0);
        for i in 0..200 {
            let delta = text(&piece);
            published.release_for(&delta);
            let before = sealed_of(&p);
            p.push(&delta);
            expected.push_str(&piece);
            let after = sealed_of(&p);
            if after.1 != before.1 {
                seals += 1;
                in_place += usize::from(after.0 == before.0);
            }
            published.clone_from(&p);
            assert_eq!(published, p, "delta {i}");
            assert_eq!(p.text(), expected, "delta {i}");
        }
        // Every seal but the first, which makes the pieces.
        assert!(seals > 60, "{seals} seals");
        assert_eq!(in_place, seals - 1);
        let held = p.clone();
        let held_text = held.text();
        for _ in 0..3 {
            published.release_for(&text(&piece));
            p.push(&text(&piece));
            published.clone_from(&p);
        }
        assert_eq!(held.text(), held_text);
        assert_eq!(p.text(), held_text + &piece.repeat(3));
        assert_ne!(sealed_of(&held).0, sealed_of(&p).0);
    }

    /// `clone_from` onto the partial of the previous event (as the state's copy is
    /// refreshed at every delta) gives what `clone` gives, through every kind of change: a
    /// new block of each kind, appends, a tail that is sealed, a signature, usage, and
    /// arguments of an earlier call; and it keeps the pieces it already shared.
    #[test]
    fn clone_from_the_next_partial_equals_its_clone() {
        let mut events = signed_thinking_then_hello();
        events.push(text(&"y".repeat(Text::TAIL + 7)));
        events.extend((0..100).map(|i| text(&format!(" w{i}"))));
        events.extend([
            StreamEvent::ToolCallStart {
                id: "a".into(),
                name: "f".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"x\"".into(),
            },
            StreamEvent::ToolCallStart {
                id: "b".into(),
                name: "g".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: ":1}".into(),
            },
            StreamEvent::Usage {
                usage: Usage::default(),
            },
            text("after"),
        ]);
        let mut p = PartialMessage::new("m");
        let mut copy = p.clone();
        for (i, e) in events.iter().enumerate() {
            p.push(e);
            copy.clone_from(&p);
            assert_eq!(copy, p, "after event {i}");
            assert_eq!(copy.text(), p.text());
            let shared = match (&copy.settled, &p.settled) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (a, b) => a.is_none() && b.is_none(),
            };
            assert!(shared, "after event {i}");
        }
        // A copy of another reply altogether becomes this one.
        let mut other = PartialMessage::new("n").apply(&text("zzz"));
        other.clone_from(&p);
        assert_eq!(other, p);
        let mut empty = PartialMessage::new("n");
        empty.clone_from(&p);
        assert_eq!(empty, p);
        p.clone_from(&PartialMessage::new("n"));
        assert_eq!(p, PartialMessage::new("n"));
    }

    #[test]
    fn deltas_assemble_blocks_in_order() {
        let mut p = PartialMessage::new("m");
        for e in signed_thinking_then_hello().into_iter().chain([
            StreamEvent::ToolCallStart {
                id: "a".into(),
                name: "f".into(),
            },
            StreamEvent::ToolCallStart {
                id: "b".into(),
                name: "g".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 1,
                arguments: "{\"y\"".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{}".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 1,
                arguments: ":2}".into(),
            },
        ]) {
            p.push(&e);
        }
        let m = p.to_message(StopReason::ToolUse);
        assert_eq!(m.thinking(), "think");
        assert_eq!(m.text(), "Hello");
        let calls: Vec<_> = m.tool_calls().cloned().collect();
        assert_eq!(calls[0].arguments, "{}");
        assert_eq!(calls[1].arguments, "{\"y\":2}");
        assert_eq!(PartialMessage::from_message(&m), p);
    }

    #[test]
    fn apply_leaves_the_old_partial_untouched() {
        let a = PartialMessage::new("m").apply(&text("one"));
        let b = a.apply(&text(" two"));
        assert_eq!(a.text(), "one");
        assert_eq!(b.text(), "one two");
    }

    #[test]
    fn long_text_keeps_every_piece_in_order() {
        let mut t = Text::new();
        let mut expected = String::new();
        for i in 0..2_000 {
            let piece = format!("{i},");
            t.push_str(&piece);
            expected.push_str(&piece);
        }
        t.push_str(&"y".repeat(Text::TAIL + 1));
        expected.push_str(&"y".repeat(Text::TAIL + 1));
        t.push_str("z");
        expected.push('z');
        assert_eq!(t.to_string(), expected);
        assert_eq!(t.len(), expected.len());
        assert!(t.chunks().all(|c| !c.is_empty()));
    }

    #[test]
    fn text_equality_ignores_chunking() {
        let mut a = Text::new();
        a.push_str("ab");
        a.push_str("c");
        assert_eq!(a, Text::from("abc"));
        assert_ne!(a, Text::from("abd"));
    }

    /// Two reasoning items in one reply (or two signed thinking blocks) stayed apart: a
    /// signature closes its block, so the next reasoning starts another, and a signature
    /// with no reasoning text before it is a block of its own.
    #[test]
    fn a_signature_closes_its_thinking_block() {
        let mut p = PartialMessage::new("m");
        for e in [
            StreamEvent::thinking("one"),
            StreamEvent::ThinkingSignature {
                signature: "s1".into(),
            },
            StreamEvent::thinking("two"),
            StreamEvent::ThinkingSignature {
                signature: "s2".into(),
            },
            StreamEvent::ThinkingSignature {
                signature: "s3".into(),
            },
            text("answer"),
        ] {
            p.push(&e);
        }
        let m = p.to_message(StopReason::Stop);
        let thinking = |t: &str, s: &str| ContentBlock::Thinking {
            thinking: t.into(),
            signature: Some(s.into()),
        };
        assert_eq!(
            m.content,
            [
                thinking("one", "s1"),
                thinking("two", "s2"),
                thinking("", "s3"),
                ContentBlock::text("answer"),
            ]
        );
    }

    /// The finished reply takes the strings of the call deltas once their listeners
    /// returned (no copy of the partial's), and is the same reply `to_message` makes:
    /// calls in several fragments, two calls, a fragment of a call that never started.
    #[test]
    fn the_finished_reply_takes_the_kept_strings_of_its_calls() {
        let deltas = vec![
            text("Calling."),
            StreamEvent::ToolCallStart {
                id: "call_1".into(),
                name: "add".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"a\":".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "1}".into(),
            },
            StreamEvent::ToolCallStart {
                id: "call_2".into(),
                name: "echo".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 1,
                arguments: "{}".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 7,
                arguments: "lost".into(),
            },
        ];
        let mut p = PartialMessage::new("m");
        let mut kept = KeptCalls::default();
        let mut ids = Vec::new();
        for d in deltas {
            p.push(&d);
            if let StreamEvent::ToolCallStart { id, .. } = &d {
                ids.push(id.as_ptr());
            }
            kept.keep(d);
        }
        let copied = p.to_message(StopReason::ToolUse);
        let reply = p.to_message_with(StopReason::ToolUse, &mut kept);
        assert_eq!(reply, copied);
        let calls: Vec<&ToolCall> = reply.tool_calls().collect();
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0].arguments, "{\"a\":1}");
        assert_eq!(
            (calls[2].id.as_str(), calls[2].arguments.as_str()),
            ("", "lost")
        );
        // The deltas' own buffers, not copies.
        assert_eq!(calls[0].id.as_ptr(), ids[0]);
        assert_eq!(calls[1].id.as_ptr(), ids[1]);
    }

    /// What was kept is used only where it is what the partial holds.
    #[test]
    fn kept_strings_that_differ_from_the_partial_are_not_used() {
        let mut p = PartialMessage::new("m");
        p.push(&StreamEvent::ToolCallStart {
            id: "call_1".into(),
            name: "add".into(),
        });
        let mut kept = KeptCalls::default();
        kept.keep(StreamEvent::ToolCallStart {
            id: "other".into(),
            name: "add".into(),
        });
        let reply = p.to_message_with(StopReason::ToolUse, &mut kept);
        assert_eq!(reply, p.to_message(StopReason::ToolUse));
    }

    /// The settled part is absent exactly when empty, so that equality (derived) compares
    /// what the partials hold: a zero usage, or a usage set back to zero, changes nothing.
    #[test]
    fn a_zero_usage_leaves_a_partial_equal_to_one_without_it() {
        let zero = StreamEvent::Usage {
            usage: Usage::default(),
        };
        let a = PartialMessage::new("m").apply(&text("hi"));
        assert_eq!(a.apply(&zero), a);
        let some = StreamEvent::Usage {
            usage: Usage::new(1, 1),
        };
        assert_ne!(a.apply(&some), a);
        assert_eq!(a.apply(&some).apply(&zero), a);
        assert_eq!(
            PartialMessage::from_message(&a.to_message(StopReason::Stop)),
            a
        );
    }
}
