//! Request bodies in O(new bytes): each message's JSON is written once per dialect and kept
//! in the transcript's [`BodyCache`], keyed by the message's `Arc`, so that a model call
//! serializes only the messages it has not sent before; the body is sent as a list of
//! pieces ([`Payload`]), never copied into one buffer first.
//!
//! # What a piece is
//! A message's piece is what it adds to an array of its dialect: its elements, each written
//! after a comma (`,{..},{..}`; empty for a message that sends nothing), so that pieces
//! join without knowing their neighbours. Whatever depends on more than the message itself
//! is written around the pieces, fresh for each request: the turns Anthropic groups
//! messages into and its `cache_control` breakpoints, the user message Chat Completions
//! writes after a run of tool results, the fields of the body. What a dialect's pieces
//! depend on besides the message (whether documents go as documents) is part of the
//! [`Dialect`]: a cache that wrote pieces of another dialect is emptied first. So a cached
//! piece is always the bytes a fresh serialization writes (tested for every dialect in
//! `tests/bodies.rs`).
//!
//! # Why keyed by the `Arc`, holding a `Weak`
//! Messages are immutable and shared: the transcript, the state, a `transform_context` hook
//! and the context policy all hand the same `Arc<Message>` on, so its address names its
//! content. A cached piece holds a `Weak` of its message: while it lives, the allocation is
//! not freed, so no other message can take the address (and `Arc::get_mut` refuses to
//! change a message that has one), yet the message itself is freed with the transcript.
//! Each body keeps only the pieces its request used, so the cache holds at most the pieces
//! of the last request: bounded by the transcript, and freed with the agent that owns it.
//!
//! # Why in order
//! The cache keeps the last request's pieces in its order, and a body takes them out as it
//! goes (and gives them back when it is dropped), so that a turn that appended to the
//! transcript matches each message against the next piece, without hashing, without a
//! reference count touched per message, reading the pieces it sends in the order it sends
//! them. Where the order changed (a slide dropped the oldest, a hook rewrote one) an index
//! of the addresses is built once for that request. A message not found is written anew:
//! a miss costs time, never correctness.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Read, Write};
use std::ops::Range;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use serde_json::value::RawValue;

use super::parts::{Accepts, Carry};
use crate::message::Message;
use crate::types::ToolDefinition;

/// The request JSON of each message of one transcript, kept between model calls so that a
/// call serializes only what was appended since the last one.
///
/// An agent keeps one for its transcript and hands it to its provider with every
/// [`Request`](super::Request) ([`Request::body_cache`](super::Request::body_cache)); a
/// program that calls a provider itself can do the same with
/// [`Request::with_body_cache`](super::Request::with_body_cache). Clones share the same
/// cache. It never changes what is sent: a body built with it is byte for byte the body
/// built without.
///
/// # Performance
/// A model call writes the JSON of the messages the cache does not hold yet (the ones
/// appended since the last call, or changed by a `transform_context` hook) and takes each
/// other message's from the cache, matched by its address in the order the last call sent
/// them (a hash lookup only where the order changed): O(new bytes) plus a few nanoseconds
/// per message, instead of serializing the whole transcript again (see the README's
/// benchmarks). Retries send the same pieces again. The cache holds the pieces of the last
/// request only (about the size of its body, images as base64) and drops the rest at each
/// call; pieces written for another provider's dialect (a provider switched between
/// turns) are dropped first. While a call is being sent its pieces are out of the cache: a
/// second call with the same cache at that moment writes its own (the same bytes).
#[derive(Clone, Default)]
pub struct BodyCache {
    entries: Arc<Mutex<Entries>>,
}

impl BodyCache {
    /// An empty cache.
    pub fn new() -> BodyCache {
        BodyCache::default()
    }

    /// How many messages it holds pieces of.
    pub fn len(&self) -> usize {
        self.entries.lock().slots.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many bytes of JSON it holds.
    pub fn bytes(&self) -> usize {
        self.entries.lock().bytes
    }

    /// Drops every piece (a transcript replaced, for one).
    pub fn clear(&self) {
        let mut entries = self.entries.lock();
        entries.slots = Vec::new();
        entries.spare_slots = Vec::new();
        entries.spare_chunks = Vec::new();
        entries.scratch = Vec::new();
        entries.spare_arena = Vec::new();
        entries.bytes = 0;
        entries.epoch += 1;
        entries.tools = None;
        entries.system = None;
    }
}

impl std::fmt::Debug for BodyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = self.entries.lock();
        f.debug_struct("BodyCache")
            .field("messages", &entries.slots.len())
            .field("bytes", &entries.bytes)
            .finish()
    }
}

/// Which writer made a cache's pieces, with the options its pieces depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dialect {
    /// The API (`"chat"`, `"anthropic"`, `"responses"`).
    pub(crate) api: &'static str,
    /// Whether documents of text go as documents (else as text).
    pub(crate) documents: bool,
    /// What the model takes: a piece's mark (see [`Slot::refused`]) holds for these, and
    /// for the API's own limits (one per `api`).
    pub(crate) accepts: Accepts,
}

#[derive(Default)]
struct Entries {
    dialect: Option<Dialect>,
    /// The pieces of the last request, in its order.
    slots: Vec<Slot>,
    /// Empty, with the room a body needs: the next body's lists, so that a turn allocates
    /// none as long as the transcript.
    spare_slots: Vec<Slot>,
    spare_chunks: Vec<Chunk>,
    /// The buffer small pieces are written into (see [`Bytes`]).
    scratch: Vec<u8>,
    /// The last body's arena, emptied: the next body's (see [`SPARE_ARENA`]).
    spare_arena: Vec<u8>,
    bytes: usize,
    /// Counts the clears: a body built before one does not bring its pieces back.
    epoch: u64,
    /// The JSON of the tools the last request sent.
    tools: Option<Kept<Weak<[ToolDefinition]>>>,
    /// The JSON of the system prompt the last request sent.
    system: Option<Kept<String>>,
    /// How many bytes the last request wrote for itself alone (its glue): about what the
    /// next writes, so its arena is allocated at that size (a small allocation is cheaper
    /// than the first guess's 4 KiB).
    arena: usize,
}

/// JSON kept beside the pieces (a request's tools', its system prompt's) with what it was
/// written of, in which dialect and form: written again only when one of them changes.
/// The tools are the agent's `Arc` of its definitions, unchanged from turn to turn (a
/// `Weak` keeps the address taken, as a slot's does; never upgraded); the system prompt is
/// each request's own copy of the text, compared, which costs a fraction of escaping it
/// again.
struct Kept<K> {
    of: K,
    dialect: Dialect,
    /// What else the writer put in (an Anthropic cache breakpoint, say).
    form: &'static str,
    json: Arc<RawValue>,
}

/// One message's piece, kept.
struct Slot {
    /// Keeps the address taken (see the module docs); never upgraded.
    message: Weak<Message>,
    bytes: Bytes,
    /// Where the main piece ends and the second (Chat's attached parts) begins.
    split: usize,
    kind: Kind,
    /// Whether the message has a part the dialect's model or API refuses
    /// ([`super::parts::refused`]), worked out once, when the piece was written.
    refused: bool,
}

/// A piece's bytes. A small piece is copied into the `Arc`'s own allocation, from a buffer
/// the cache keeps for writing them (one allocation per new message, where a `Vec` in an
/// `Arc` takes two); a large one stays in the `Vec` it was written into, as copying it (a
/// 5 MB image's base64) would cost more than the allocation saved.
enum Bytes {
    Small(Arc<[u8]>),
    Large(Arc<Vec<u8>>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Small(bytes) => bytes,
            Bytes::Large(bytes) => bytes,
        }
    }
}

/// The largest piece written into the cache's buffer and copied (see [`Bytes`]).
const SMALL_PIECE: usize = 16 * 1024;

/// The largest arena a cache keeps for the next body: a turn's body then allocates none for
/// its glue (the fields, the system prompt and the tools' JSON, written again each call).
const SPARE_ARENA: usize = 256 * 1024;

/// What a message is, as the dialects group them (kept with its piece, so that a cached
/// message is not read at all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    User,
    Assistant,
    ToolResult,
}

impl Kind {
    fn of(message: &Message) -> Kind {
        match message {
            Message::User(_) => Kind::User,
            Message::Assistant(_) => Kind::Assistant,
            Message::ToolResult(_) => Kind::ToolResult,
        }
    }
}

/// Hashes an address: the allocator's alignment leaves the low bits zero, and a multiply
/// spreads the rest over the bits the table uses (SipHash would cost more than the lookup).
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = ((n as u64) >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The size of ureq's output buffer, which [`Payload::write_to`] writes through as ureq does.
const SEND_BUFFER: usize = 128 * 1024;

/// Where a chunk's bytes are: the arena, or the slot of that index.
const ARENA: usize = usize::MAX;

/// A request body as the pieces it is sent as: bytes written for this request alone (the
/// arena) and the cached pieces, in order. Dropped, it gives its pieces back to the cache
/// they came from.
#[derive(Default)]
pub(crate) struct Payload {
    arena: Vec<u8>,
    slots: Vec<Slot>,
    chunks: Vec<Chunk>,
    len: usize,
    /// The last request's list, emptied: it goes back as the next body's.
    spare: Vec<Slot>,
    /// Where new small pieces are written before they are copied (see [`Bytes`]); goes
    /// back to the cache with the slots.
    scratch: Vec<u8>,
    /// The cache the slots go back to, its epoch and the dialect they were written in.
    home: Option<(Arc<Mutex<Entries>>, u64, Dialect)>,
    /// Whether a message of the body has a part its dialect refuses (see [`Slot::refused`]).
    refused: bool,
}

/// A run of bytes of a body: of the arena, or of a slot's piece.
struct Chunk {
    slot: usize,
    range: Range<usize>,
}

impl Drop for Payload {
    fn drop(&mut self) {
        let Some((home, epoch, dialect)) = self.home.take() else {
            return;
        };
        let mut entries = home.lock();
        // Unless the cache was cleared, or written in another dialect, meanwhile.
        if entries.epoch == epoch && entries.dialect == Some(dialect) {
            entries.bytes = self.slots.iter().map(|s| s.bytes.len()).sum();
            entries.arena = self.arena.len();
            entries.slots = std::mem::take(&mut self.slots);
            entries.spare_slots = std::mem::take(&mut self.spare);
            self.chunks.clear();
            entries.spare_chunks = std::mem::take(&mut self.chunks);
            entries.scratch = std::mem::take(&mut self.scratch);
            if self.arena.capacity() <= SPARE_ARENA {
                self.arena.clear();
                entries.spare_arena = std::mem::take(&mut self.arena);
            }
        }
    }
}

impl Payload {
    /// The body, or the content check's error ([`super::parts::check`], which names the
    /// message and part) when a message of it has a part its dialect's model or API
    /// refuses. Only then is the request's every part read.
    pub(crate) fn checked(
        self,
        request: &super::Request,
        accepts: Accepts,
        carry: Carry,
    ) -> Result<Payload, crate::Error> {
        if self.refused {
            super::parts::check(request, accepts, carry)?;
        }
        Ok(self)
    }

    /// The body's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn bytes<'a>(&'a self, chunk: &'a Chunk) -> &'a [u8] {
        match chunk.slot {
            ARENA => &self.arena[chunk.range.clone()],
            slot => &self.slots[slot].bytes[chunk.range.clone()],
        }
    }

    /// The body in one buffer.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for chunk in &self.chunks {
            out.extend_from_slice(self.bytes(chunk));
        }
        out
    }

    /// Writes the body to `out` as it goes to the socket: the pieces copied into a buffer
    /// of ureq's size (its output buffer, 128 KB), written a buffer at a time. (Vectored
    /// writes of the pieces themselves cost more on a socket: a turn's pieces are a few
    /// hundred bytes each, and the kernel's work per slice outweighs the copy.)
    pub(crate) fn write_to(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut buf = vec![0; SEND_BUFFER.min(self.len.max(1))];
        let mut reader = self.reader();
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            out.write_all(&buf[..n])?;
        }
    }

    /// A reader of the body, from its start: what ureq sends (it copies the bytes into its
    /// own output buffer, so the body is copied once on its way to the socket, as a single
    /// buffer would be, without being joined into one first).
    pub(crate) fn reader(&self) -> PayloadReader<'_> {
        PayloadReader {
            payload: self,
            chunk: 0,
            at: 0,
        }
    }

    fn push(&mut self, slot: usize, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        self.len += range.len();
        if let Some(last) = self.chunks.last_mut()
            && last.slot == slot
            && last.range.end == range.start
        {
            last.range.end = range.end;
            return;
        }
        self.chunks.push(Chunk { slot, range });
    }
}

/// Reads a [`Payload`] from its start.
pub(crate) struct PayloadReader<'a> {
    payload: &'a Payload,
    chunk: usize,
    at: usize,
}

impl Read for PayloadReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            let Some(chunk) = self.payload.chunks.get(self.chunk) else {
                break;
            };
            let rest = &self.payload.bytes(chunk)[self.at..];
            let take = rest.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&rest[..take]);
            n += take;
            if take == rest.len() {
                self.chunk += 1;
                self.at = 0;
            } else {
                self.at += take;
            }
        }
        Ok(n)
    }
}

/// Where a message's piece lies: in a slot of the body, or in its arena.
#[derive(Clone)]
pub(crate) struct Piece {
    slot: usize,
    main: Range<usize>,
    second: Range<usize>,
    kind: Kind,
}

impl Piece {
    /// Whether the message sends anything (its main piece holds an element).
    pub(crate) fn sends(&self) -> bool {
        !self.main.is_empty()
    }

    /// Whether it has a second piece (Chat's attached parts).
    pub(crate) fn has_second(&self) -> bool {
        !self.second.is_empty()
    }

    /// What message it is the piece of.
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }
}

/// Which of a piece's two parts to write.
#[derive(Clone, Copy)]
pub(crate) enum Side {
    Main,
    Second,
}

/// Builds one body: the dialect writes its glue and asks for each message's piece, which
/// comes from the cache or is written now (and kept, with a cache).
pub(crate) struct Builder {
    body: Payload,
    /// The last request's pieces, each taken out when this one uses it; `None` without a
    /// cache.
    old: Option<Vec<Option<Slot>>>,
    /// Where in `old` the next message is looked for first.
    cursor: usize,
    /// How many of `old`'s pieces are still there: none left, a message is new (the
    /// messages a turn appended come after all the cached ones), no index is built.
    left: usize,
    /// Where each of `old`'s messages is, built at the first message out of order.
    index: Option<HashMap<usize, usize, BuildHasherDefault<AddressHasher>>>,
    /// What the model takes, and what the API cannot carry: what a new piece's mark says.
    accepts: Accepts,
    carry: Carry,
}

/// Writes one message's piece (its elements, each after a comma; see [`element`]) at the end
/// of the buffer, and returns the length the buffer had where its main piece ended (what
/// follows is its second piece).
pub(crate) type WriteMessage<'a> = dyn Fn(&Message, &mut Vec<u8>) -> usize + 'a;

impl Builder {
    /// A body of `dialect`, its pieces taken from and given back to `cache` when there is
    /// one; `carry` says what the dialect's API cannot carry (see [`Payload::checked`]).
    pub(crate) fn new(
        cache: Option<&BodyCache>,
        dialect: Dialect,
        carry: Carry,
        capacity: usize,
    ) -> Builder {
        let mut body = Payload::default();
        let old = cache.map(|c| {
            let mut entries = c.entries.lock();
            if entries.arena > 0 {
                body.arena = std::mem::take(&mut entries.spare_arena);
                body.arena.reserve(entries.arena + entries.arena / 4 + 64);
            }
            let old = match entries.dialect == Some(dialect) {
                true => std::mem::take(&mut entries.slots),
                false => Vec::new(),
            };
            entries.bytes = 0;
            entries.dialect = Some(dialect);
            body.home = Some((c.entries.clone(), entries.epoch, dialect));
            body.slots = std::mem::take(&mut entries.spare_slots);
            body.slots.reserve(old.len() + 4);
            body.chunks = std::mem::take(&mut entries.spare_chunks);
            body.scratch = std::mem::take(&mut entries.scratch);
            // In place (`Option<Slot>` has the size of a `Slot`): no allocation.
            old.into_iter().map(Some).collect()
        });
        if body.arena.capacity() == 0 {
            body.arena.reserve(capacity);
        }
        Builder {
            left: old.as_ref().map_or(0, Vec::len),
            body,
            old,
            cursor: 0,
            index: None,
            accepts: dialect.accepts,
            carry,
        }
    }

    /// The JSON of `tools` as `write` writes it in its `form` (what else it writes that the
    /// dialect does not say, `""` for nothing): kept in the cache and written again only
    /// when the request hands another list (or another dialect or form asks); written each
    /// time without a cache.
    pub(crate) fn tools_json(
        &self,
        tools: &Arc<[ToolDefinition]>,
        form: &'static str,
        write: impl FnOnce(&[ToolDefinition]) -> String,
    ) -> Arc<RawValue> {
        self.kept(
            |entries| &mut entries.tools,
            |kept: &Weak<[ToolDefinition]>| {
                std::ptr::addr_eq(kept.as_ptr(), Arc::as_ptr(tools))
                    && kept.as_ptr().len() == tools.len()
            },
            || Arc::downgrade(tools),
            form,
            || write(tools),
        )
    }

    /// The JSON of the system prompt `text` as `write` writes it in its `form` (see
    /// [`Builder::tools_json`]): kept in the cache and written again only for another text,
    /// dialect or form; written each time without a cache.
    pub(crate) fn system_json(
        &self,
        text: &str,
        form: &'static str,
        write: impl FnOnce(&str) -> String,
    ) -> Arc<RawValue> {
        self.kept(
            |entries| &mut entries.system,
            |kept: &String| kept == text,
            || text.to_owned(),
            form,
            || write(text),
        )
    }

    /// The JSON `write` writes, from the cache's `slot` when it was written of the same
    /// thing (`same`), dialect and form, else written and kept there with `of()`.
    fn kept<K>(
        &self,
        slot: impl FnOnce(&mut Entries) -> &mut Option<Kept<K>>,
        same: impl FnOnce(&K) -> bool,
        of: impl FnOnce() -> K,
        form: &'static str,
        write: impl FnOnce() -> String,
    ) -> Arc<RawValue> {
        let Some((home, _, dialect)) = &self.body.home else {
            return raw(write());
        };
        let mut entries = home.lock();
        let slot = slot(&mut entries);
        if let Some(kept) = slot
            && kept.dialect == *dialect
            && kept.form == form
            && same(&kept.of)
        {
            return kept.json.clone();
        }
        let json = raw(write());
        *slot = Some(Kept {
            of: of(),
            dialect: *dialect,
            form,
            json: json.clone(),
        });
        json
    }

    /// Appends glue: whatever `write` writes, for this request alone.
    pub(crate) fn glue(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.body.arena.len();
        write(&mut self.body.arena);
        let end = self.body.arena.len();
        self.body.push(ARENA, start..end);
    }

    /// Appends these bytes as glue.
    pub(crate) fn raw(&mut self, bytes: &[u8]) {
        self.glue(|out| out.extend_from_slice(bytes));
    }

    /// The piece of `message`, from the cache or written by `write` now.
    #[inline]
    pub(crate) fn piece(&mut self, message: &Arc<Message>, write: &WriteMessage<'_>) -> Piece {
        let (accepts, carry) = (self.accepts, self.carry);
        let refused = |message: &Message| super::parts::refused(message, accepts, carry);
        let Some(old) = &mut self.old else {
            self.body.refused |= refused(message);
            let arena = &mut self.body.arena;
            let start = arena.len();
            let split = write(message, arena);
            return Piece {
                slot: ARENA,
                main: start..split,
                second: split..arena.len(),
                kind: Kind::of(message),
            };
        };
        let address = Arc::as_ptr(message) as usize;
        let next = old
            .get(self.cursor)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.message.as_ptr() as usize == address);
        let at = match next {
            true => Some(self.cursor),
            false if self.left == 0 => None,
            false => {
                let index = self.index.get_or_insert_with(|| {
                    let mut index = HashMap::default();
                    index.reserve(old.len());
                    for (i, slot) in old.iter().enumerate() {
                        if let Some(slot) = slot {
                            index.insert(slot.message.as_ptr() as usize, i);
                        }
                    }
                    index
                });
                index.get(&address).copied()
            }
        };
        let slot = match at.and_then(|i| old[i].take().map(|slot| (i, slot))) {
            Some((i, slot)) => {
                self.cursor = i + 1;
                self.left -= 1;
                slot
            }
            None => {
                let capacity = super::parts::message_capacity(message);
                let (split, bytes) = if capacity <= SMALL_PIECE {
                    let out = &mut self.body.scratch;
                    out.clear();
                    let split = write(message, out);
                    let bytes = Bytes::Small(Arc::from(&out[..]));
                    // A piece far past the estimate does not keep the buffer that large.
                    if out.capacity() > 4 * SMALL_PIECE {
                        *out = Vec::new();
                    }
                    (split, bytes)
                } else {
                    let mut out = Vec::with_capacity(capacity);
                    let split = write(message, &mut out);
                    // The estimate leaves room for escapes; what stays unused is given back
                    // when it is much.
                    if out.capacity() - out.len() > out.len() / 8 + 64 {
                        out.shrink_to_fit();
                    }
                    (split, Bytes::Large(Arc::new(out)))
                };
                Slot {
                    message: Arc::downgrade(message),
                    bytes,
                    split,
                    kind: Kind::of(message),
                    refused: refused(message),
                }
            }
        };
        self.body.refused |= slot.refused;
        let piece = Piece {
            slot: self.body.slots.len(),
            main: 0..slot.split,
            second: slot.split..slot.bytes.len(),
            kind: slot.kind,
        };
        self.body.slots.push(slot);
        piece
    }

    /// Appends a part of `piece` as elements of an array: without its leading comma when
    /// `first` says no element came before in the array (and then clears it); without its
    /// last byte with `open` (the `}` of its last element, which the caller then closes).
    pub(crate) fn push(&mut self, piece: &Piece, side: Side, first: &mut bool, open: bool) {
        let mut range = match side {
            Side::Main => piece.main.clone(),
            Side::Second => piece.second.clone(),
        };
        if range.is_empty() {
            return;
        }
        if std::mem::take(first) {
            range.start += 1;
        }
        if open {
            range.end -= 1;
        }
        self.body.push(piece.slot, range);
    }

    /// The body. The pieces of the last request it did not use are dropped; its own go
    /// back to the cache when it is dropped.
    pub(crate) fn finish(mut self) -> Payload {
        if let Some(mut old) = self.old.take() {
            old.clear();
            // In place again: the list goes back empty, for the next body. (`flatten` would
            // not collect in place, and allocate the list anew each turn.)
            #[allow(clippy::filter_map_identity)]
            let spare = old.into_iter().filter_map(|slot| slot).collect();
            self.body.spare = spare;
        }
        self.body
    }
}

/// `json` as a value to write as it is.
fn raw(json: String) -> Arc<RawValue> {
    // OK because the writers write JSON, which `from_string` only checks.
    RawValue::from_string(json)
        .expect("the tools and the system prompt serialize as JSON")
        .into()
}

/// Writes `value` as one element of a piece: a comma, then its JSON.
pub(crate) fn element(out: &mut Vec<u8>, value: &impl serde::Serialize) {
    out.push(b',');
    // OK because writing to a Vec cannot fail, and every value here serializes.
    serde_json::to_writer(out, value).expect("the body serializes");
}

/// Writes `{<head's fields>,"<key>":<value>,<tail's fields>}` from `head` and `tail`
/// serialized as JSON objects (either may be empty); `value` writes the value, or nothing
/// is written for the key when it is `None` (a field of `extra_body` replaced it).
pub(crate) fn object(
    b: &mut Builder,
    head: &impl serde::Serialize,
    key: &str,
    value: Option<&dyn Fn(&mut Builder)>,
    tail: &impl serde::Serialize,
) {
    let mut fields = false;
    b.glue(|out| {
        let start = out.len();
        // OK because writing to a Vec cannot fail, and every value here serializes.
        serde_json::to_writer(&mut *out, head).expect("the body serializes");
        out.pop(); // its `}`
        fields = out.len() > start + 1;
    });
    if let Some(value) = value {
        b.glue(|out| {
            if fields {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, key).expect("a key serializes");
            out.push(b':');
        });
        value(b);
        fields = true;
    }
    b.glue(|out| {
        let start = out.len();
        serde_json::to_writer(&mut *out, tail).expect("the body serializes");
        if out.len() == start + 2 {
            // `{}`: no fields after the key.
            out.truncate(start);
            out.push(b'}');
        } else if fields {
            out[start] = b',';
        } else {
            out.remove(start);
        }
    });
}
