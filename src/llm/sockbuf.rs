//! The buffers of one plain TCP connection under ureq: as small as the traffic allows.
//!
//! ureq's own buffers are 128 KiB each way, allocated and zeroed whole on a connection's
//! first use and kept while it waits in the pool: 256 KiB resident per connection, for
//! replies that are mostly a few hundred bytes per read. These start small, grow (doubling,
//! up to [`MAX`]) only when the traffic fills them, and are freed while the connection is
//! idle in the pool ([`SockBuffers::release`]). The input's size is remembered for the
//! connection's next request (a server that sent bulk replies will likely do so again);
//! the output starts small again.
//!
//! - **Input**: starts at [`INPUT_MIN`]. It doubles when one read filled all of it (the
//!   server had at least that much waiting: a bulk reply then reads in fewer calls) and
//!   when a response head does not fit (ureq refuses heads past its own limit, below
//!   [`MAX`]).
//! - **Output**: starts at [`OUTPUT_MIN`], which bounds one line of the request head (the
//!   providers refuse a longer header when they are built, as most servers would). It
//!   doubles when a write sent it full (a body larger than the buffer: fewer, larger
//!   writes), and is freed as soon as the reply is awaited: a request is sent whole before
//!   its reply is read, and the reply may stream for minutes.
//!
//! # Reused while a run goes on
//! A freed buffer is not given back to the allocator at once: the thread keeps it as a
//! spare ([`take`], [`give`]) for its next request, until its run ends
//! ([`release_thread`]). A turn's buffers are then the last turn's, not allocated and
//! zeroed again (zeroing a fresh 12 KiB cost more than sending a short request). The
//! reply's read buffer (`body`) takes from the same spares: the output, given back as the
//! reply is awaited, is the read buffer of that reply, and the read buffer, given back when
//! the reply is dropped, is the next request's output. So the spares add nothing to what a
//! request holds at its peak: one output or read buffer, and the input. The spares are
//! per thread, at most [`SPARES`] of them, none larger than [`SPARE_MAX`]; an idle agent
//! holds none (its run ended), and a thread that ends drops its own.

use std::cell::RefCell;

use ureq::unversioned::transport::Buffers;

/// The input buffer's first size: a response head and the first events.
pub(crate) const INPUT_MIN: usize = 4 * 1024;
/// The output buffer's first size, and so the longest line of a request head.
pub(crate) const OUTPUT_MIN: usize = 8 * 1024;
/// The most either buffer grows to (ureq's own size).
pub(crate) const MAX: usize = 128 * 1024;
/// The least scratch space given to ureq for a request body beside the output (ureq reads
/// into it only a chunked body, which pagent never sends: its bodies have a length).
const MIN_TMP: usize = 1024;
/// How many freed buffers a thread keeps for its next request: the input, and the output
/// or the read buffer.
const SPARES: usize = 2;
/// The largest buffer kept as a spare (a larger one, grown by a bulk reply, is freed).
pub(crate) const SPARE_MAX: usize = 32 * 1024;

thread_local! {
    /// The thread's spare buffers (empty `Vec`s for none), see the module docs.
    static SPARE: RefCell<[Vec<u8>; SPARES]> = const { RefCell::new([Vec::new(), Vec::new()]) };
}

/// A buffer of `len` bytes: a spare of the thread of that length (its old bytes still in
/// it: every user writes before it reads), else a new one.
pub(crate) fn take(len: usize) -> Vec<u8> {
    let spare = SPARE.try_with(|spare| {
        let mut spare = spare.borrow_mut();
        spare
            .iter_mut()
            .find(|b| b.len() == len)
            .map(std::mem::take)
    });
    match spare {
        Ok(Some(buf)) => buf,
        _ => vec![0; len],
    }
}

/// Keeps `buf` as one of the thread's spares when there is room and it is not too large;
/// else frees it.
pub(crate) fn give(buf: Vec<u8>) {
    if buf.is_empty() || buf.len() > SPARE_MAX {
        return;
    }
    // `try_with`: the thread may be ending, its spares already gone.
    let _ = SPARE.try_with(|spare| {
        if let Some(slot) = spare.borrow_mut().iter_mut().find(|b| b.is_empty()) {
            *slot = buf;
        }
    });
}

/// Frees the thread's spares (its run ended).
pub(crate) fn release_thread() {
    let _ = SPARE.try_with(|spare| *spare.borrow_mut() = [Vec::new(), Vec::new()]);
}

/// The bytes the thread's spares hold (for tests).
#[cfg(test)]
fn spare_bytes() -> usize {
    SPARE.with(|spare| spare.borrow().iter().map(Vec::len).sum())
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct SockBuffers {
    /// `input[consumed..filled]` is what was read and not yet consumed; its length is the
    /// buffer's size once allocated (empty while released).
    input: Vec<u8>,
    filled: usize,
    consumed: usize,
    /// The size the input takes when next allocated or grown.
    input_size: usize,
    output: Vec<u8>,
    output_size: usize,
    /// The last consume was of more than nothing (see [`Buffers::can_use_input`]).
    progress: bool,
}

impl Default for SockBuffers {
    fn default() -> SockBuffers {
        SockBuffers {
            input: Vec::new(),
            filled: 0,
            consumed: 0,
            input_size: INPUT_MIN,
            output: Vec::new(),
            output_size: OUTPUT_MIN,
            progress: false,
        }
    }
}

impl SockBuffers {
    /// Frees both buffers unless unread input remains (then nothing changes); the next
    /// request allocates the input at the size it had, the output at its first size.
    pub(crate) fn release(&mut self) {
        if self.filled > self.consumed {
            return;
        }
        let input_size = self.input_size.max(self.input.len()).min(MAX);
        give(std::mem::take(&mut self.input));
        give(std::mem::take(&mut self.output));
        *self = SockBuffers {
            input_size,
            ..SockBuffers::default()
        };
    }

    /// Bytes allocated now (for tests).
    #[cfg(test)]
    fn allocated(&self) -> (usize, usize) {
        (self.input.len(), self.output.len())
    }

    /// Says that `amount` bytes of the output were sent: a full buffer doubles for the next.
    pub(crate) fn output_sent(&mut self, amount: usize) {
        if amount >= self.output.len() && self.output_size < MAX {
            self.output_size = (self.output_size * 2).min(MAX);
        }
    }

    /// Frees the output buffer (the request is sent; the next one starts small again).
    pub(crate) fn free_output(&mut self) {
        give(std::mem::take(&mut self.output));
        self.output_size = OUTPUT_MIN;
    }

    /// Moves the unconsumed input to the front (when it is all consumed, or past half the
    /// buffer), and makes room: the first allocation, or a doubling once the input is full.
    fn make_room(&mut self) {
        if self.consumed == self.filled {
            self.consumed = 0;
            self.filled = 0;
        } else if self.consumed > 0 && self.filled > self.input.len() / 2 {
            self.input.copy_within(self.consumed..self.filled, 0);
            self.filled -= self.consumed;
            self.consumed = 0;
        }
        if self.filled == self.input.len() && self.input.len() >= self.input_size {
            // Full (a head that does not fit yet): grow.
            self.input_size = (self.input.len() * 2).clamp(INPUT_MIN, MAX);
        }
        if self.input.is_empty() {
            self.input = take(self.input_size);
        } else if self.input.len() < self.input_size {
            self.input.resize(self.input_size, 0);
        }
    }

    /// The output buffer at its size: the one it has, or a spare or new one (grown: the old
    /// content is not needed, as ureq writes it from 0 each time).
    fn sized_output(&mut self) -> &mut [u8] {
        if self.output.len() != self.output_size {
            give(std::mem::take(&mut self.output));
            self.output = take(self.output_size);
        }
        &mut self.output
    }
}

impl Buffers for SockBuffers {
    fn output(&mut self) -> &mut [u8] {
        self.sized_output()
    }

    fn input(&self) -> &[u8] {
        &self.input[self.consumed..self.filled]
    }

    fn input_append_buf(&mut self) -> &mut [u8] {
        self.make_room();
        &mut self.input[self.filled..]
    }

    fn input_appended(&mut self, amount: usize) {
        assert!(
            amount <= self.input.len() - self.filled,
            "more appended than there was room for"
        );
        self.filled += amount;
        // One read filled the whole buffer: more was waiting, the next read gets twice.
        if amount == self.input.len() && amount > 0 {
            self.input_size = (self.input.len() * 2).min(MAX);
        }
    }

    fn input_consume(&mut self, amount: usize) {
        self.progress = amount > 0;
        self.consumed += amount;
        assert!(self.consumed <= self.filled, "more consumed than was read");
    }

    fn tmp_and_output(&mut self) -> (&mut [u8], &mut [u8]) {
        self.make_room();
        if self.input.len() - self.filled < MIN_TMP {
            let wanted = self.filled + MIN_TMP;
            self.input.resize(wanted, 0);
        }
        self.sized_output();
        (&mut self.input[self.filled..], &mut self.output)
    }

    fn can_use_input(&self) -> bool {
        self.filled > self.consumed && self.progress
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffers_start_small_grow_with_the_traffic_and_are_freed_when_released() {
        let mut b = SockBuffers::default();
        assert_eq!(b.allocated(), (0, 0));
        assert_eq!(b.output().len(), OUTPUT_MIN);
        assert_eq!(b.input_append_buf().len(), INPUT_MIN);
        // A short read: the size stays; so does a read that fills the room behind unread
        // input.
        b.input_appended(300);
        b.input_consume(300);
        assert_eq!(b.input_append_buf().len(), INPUT_MIN);
        b.input_appended(INPUT_MIN / 4);
        let room = b.input_append_buf().len();
        b.input_appended(room);
        b.input_consume(INPUT_MIN);
        assert_eq!(b.input_append_buf().len(), INPUT_MIN);
        // A read that fills the room: the next one gets twice the buffer.
        b.input_appended(INPUT_MIN);
        assert_eq!(b.input(), &[0; INPUT_MIN][..]);
        b.input_consume(INPUT_MIN);
        assert_eq!(b.input_append_buf().len(), 2 * INPUT_MIN);
        // A body that fills the output: the next output is twice as large; freed once the
        // request is sent.
        let full = b.output().len();
        b.output_sent(full);
        assert_eq!(b.output().len(), 2 * OUTPUT_MIN);
        b.free_output();
        assert_eq!(b.allocated().1, 0);
        assert_eq!(b.output().len(), OUTPUT_MIN);
        // Unread input keeps the buffers.
        b.input_appended(10);
        b.release();
        assert_eq!(b.input().len(), 10);
        b.input_consume(10);
        b.release();
        assert_eq!(b.allocated(), (0, 0));
        // The input comes back at the size it had grown to, the output at its first.
        assert_eq!(b.input_append_buf().len(), 2 * INPUT_MIN);
        assert_eq!(b.output().len(), OUTPUT_MIN);
        // Grown no further than the most.
        for _ in 0..10 {
            let room = b.input_append_buf().len();
            b.input_appended(room);
            b.input_consume(room);
        }
        assert_eq!(b.input_append_buf().len(), MAX);
    }

    #[test]
    fn a_turns_buffers_are_the_last_turns_until_the_run_ends() {
        release_thread();
        let mut b = SockBuffers::default();
        // A request: output, then input; the output goes when the reply is awaited, and is
        // the reply's read buffer; the input goes as the connection is pooled.
        let output = b.output().as_ptr();
        let input = b.input_append_buf().as_ptr();
        b.input_appended(100);
        b.free_output();
        assert_eq!(spare_bytes(), OUTPUT_MIN);
        let read = take(OUTPUT_MIN);
        assert_eq!(read.as_ptr(), output);
        b.input_consume(100);
        b.release();
        give(read);
        assert_eq!(spare_bytes(), OUTPUT_MIN + INPUT_MIN);
        // The next request takes the same two buffers, nothing allocated.
        assert_eq!(b.output().as_ptr(), output);
        assert_eq!(b.input_append_buf().as_ptr(), input);
        assert_eq!(spare_bytes(), 0);
        b.free_output();
        b.release();
        // At most two are kept, none larger than the most.
        give(vec![0; 100]);
        give(vec![0; SPARE_MAX + 1]);
        assert_eq!(spare_bytes(), OUTPUT_MIN + INPUT_MIN);
        release_thread();
        assert_eq!(spare_bytes(), 0);
        give(vec![0; SPARE_MAX + 1]);
        assert_eq!(spare_bytes(), 0);
        // A size no spare has is allocated anew.
        give(vec![0; INPUT_MIN]);
        assert_eq!(take(2 * INPUT_MIN).len(), 2 * INPUT_MIN);
        assert_eq!(spare_bytes(), INPUT_MIN);
        release_thread();
    }

    #[test]
    fn a_head_larger_than_the_buffer_grows_it_and_keeps_its_bytes() {
        let mut b = SockBuffers::default();
        let mut sent = Vec::new();
        // A head of 20,000 bytes, read in pieces, nothing consumed until it is whole.
        while sent.len() < 20_000 {
            let room = b.input_append_buf();
            assert!(!room.is_empty(), "no room for the rest of the head");
            let n = room.len().min(1_000).min(20_000 - sent.len());
            for (i, byte) in room[..n].iter_mut().enumerate() {
                *byte = ((sent.len() + i) % 251) as u8;
            }
            sent.extend_from_slice(&room[..n]);
            b.input_appended(n);
        }
        assert_eq!(b.input(), &sent[..]);
        // Half consumed, the rest moves to the front when room is made.
        b.input_consume(12_000);
        let _ = b.input_append_buf();
        assert_eq!(b.input(), &sent[12_000..]);
        assert!(b.can_use_input());
    }

    #[test]
    fn the_scratch_space_for_a_body_is_there_beside_unread_input() {
        let mut b = SockBuffers::default();
        let room = b.input_append_buf().len();
        b.input_appended(room - 100);
        let (tmp, output) = b.tmp_and_output();
        assert!(tmp.len() >= MIN_TMP);
        assert_eq!(output.len(), OUTPUT_MIN);
        assert_eq!(b.input().len(), room - 100);
        // The scratch space was added behind the unread input.
        assert_eq!(b.allocated().0, room - 100 + MIN_TMP);
    }
}
