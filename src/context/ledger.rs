//! The ledger: what each message of the transcript costs, kept as the transcript grows, and
//! what the next request sends.
//!
//! Every message is counted once, when the ledger first sees it (`sync`), into prefix sums,
//! so the tokens of any range of the transcript cost O(1) and a turn costs O(new messages).
//! The server's counts (the usage of each reply, an exact count) anchor the figure: `used` is
//! the last count plus the estimate of what changed since, scaled by how far the estimate
//! was off the last time the server counted a whole request (`ratio`).
//!
//! What is sent (the view) is: the first user message when it is pinned and would otherwise
//! be left out, then the latest summary, then the transcript from `start` on, every summary
//! left out there. `start` is the later of where the sliding window begins and what the
//! latest summary replaces; it only moves forward (a slide, a compaction), except when the
//! transcript is replaced.

use std::sync::Arc;

use super::estimate;
use super::usage::ContextUsage;
use crate::list::List;
use crate::llm::TokenCounter;
use crate::message::Message;
use crate::types::ToolDefinition;

/// What the ledger needs to know of a message to cut the transcript safely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    User,
    /// A user message marked as a compaction's summary.
    Summary,
    Assistant,
    /// A reply that ended before anything arrived (aborted, failed): requests leave it out.
    Empty,
    /// A tool result: a view never starts with one (its call would be left out).
    ToolResult,
}

impl Kind {
    fn of(message: &Message) -> Kind {
        match message {
            Message::User(m) if m.summary.is_some() => Kind::Summary,
            Message::User(_) => Kind::User,
            Message::Assistant(m) if m.is_empty() => Kind::Empty,
            Message::Assistant(_) => Kind::Assistant,
            Message::ToolResult(_) => Kind::ToolResult,
        }
    }
}

/// A count of the server's, and the estimate of the same context.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Anchor {
    tokens: u64,
    estimate: u64,
}

/// The bounds of the ratio of the server's count to the estimate: a count that far off is a
/// server that counts something else (a vision model's image), not a better estimate.
const RATIO_BOUNDS: (f64, f64) = (0.25, 4.0);

/// What a slide brings the view down to, as a share of its budget.
pub(crate) const SLIDE_TO: f64 = 0.8;

#[derive(Clone, Debug)]
pub(crate) struct Ledger {
    /// `sums[i]`: the estimated tokens of the first `i` messages.
    sums: Vec<u64>,
    kinds: Vec<Kind>,
    /// The summaries: their index and how many messages they replace (at most their index).
    summaries: Vec<(usize, usize)>,
    first_user: Option<usize>,
    /// The last message counted, to tell a transcript that grew from one that was replaced.
    last: Option<Arc<Message>>,
    /// The system prompt and the tool definitions, and what they were counted from.
    fixed: u64,
    fixed_of: Option<(String, Arc<[ToolDefinition]>)>,
    anchor: Option<Anchor>,
    ratio: f64,
    /// Where the sliding window starts.
    slide: usize,
    /// Whether the first user message is sent when it falls out of the view.
    pub(crate) keep_first_user: bool,
    /// How many times the ledger started over on a transcript that did not grow from the
    /// one counted (see [`Ledger::view_key`]).
    restarts: u64,
}

/// What a view is cut with besides the transcript (see [`Ledger::view_key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ViewKey {
    restarts: u64,
    start: usize,
    pinned: Option<usize>,
    summary: Option<usize>,
}

impl Default for Ledger {
    fn default() -> Ledger {
        Ledger {
            sums: vec![0],
            kinds: Vec::new(),
            summaries: Vec::new(),
            first_user: None,
            last: None,
            fixed: 0,
            fixed_of: None,
            anchor: None,
            ratio: 1.0,
            slide: 0,
            keep_first_user: false,
            restarts: 0,
        }
    }
}

impl Ledger {
    /// How many messages are counted.
    pub(crate) fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Counts the messages of `messages` not counted yet. When `messages` is not the
    /// transcript counted so far grown by some messages (it was replaced), starts over.
    pub(crate) fn sync(
        &mut self,
        messages: &List<Arc<Message>>,
        counter: Option<&dyn TokenCounter>,
    ) {
        let n = self.len();
        let grown = messages.len() >= n
            && match (&self.last, n.checked_sub(1).and_then(|i| messages.get(i))) {
                (None, _) => n == 0,
                (Some(last), Some(m)) => Arc::ptr_eq(last, m),
                (Some(_), None) => false,
            };
        if !grown {
            *self = Ledger {
                keep_first_user: self.keep_first_user,
                fixed: self.fixed,
                fixed_of: self.fixed_of.take(),
                restarts: self.restarts + 1,
                ..Ledger::default()
            };
        }
        // By index: a turn appends a few messages, and `skip` would build a list of them.
        for i in self.len()..messages.len() {
            if let Some(m) = messages.get(i) {
                self.push(m, counter);
            }
        }
    }

    /// Counts one more message.
    pub(crate) fn push(&mut self, message: &Arc<Message>, counter: Option<&dyn TokenCounter>) {
        let i = self.len();
        let kind = Kind::of(message);
        let tokens = estimate::message_with(counter, message);
        // OK because `sums` always holds one more entry than `kinds`.
        let total = *self.sums.last().expect("sums starts with 0");
        self.sums.push(total + tokens);
        self.kinds.push(kind);
        match kind {
            Kind::Summary => {
                let replaces = match &**message {
                    Message::User(m) => m.summary.map_or(0, |s| s.replaces),
                    _ => 0,
                };
                let replaces = usize::try_from(replaces).unwrap_or(usize::MAX).min(i);
                self.summaries.push((i, replaces));
            }
            Kind::User if self.first_user.is_none() => self.first_user = Some(i),
            _ => {}
        }
        self.last = Some(message.clone());
    }

    /// Counts the system prompt and the tools, when they changed.
    pub(crate) fn set_fixed(
        &mut self,
        system_prompt: &str,
        tools: &Arc<[ToolDefinition]>,
        counter: Option<&dyn TokenCounter>,
    ) {
        let same = self
            .fixed_of
            .as_ref()
            .is_some_and(|(s, t)| s == system_prompt && Arc::ptr_eq(t, tools));
        if !same {
            self.fixed = estimate::fixed_with(counter, system_prompt, tools);
            self.fixed_of = Some((system_prompt.to_owned(), tools.clone()));
        }
    }

    /// The estimated tokens of message `i`.
    pub(crate) fn tokens(&self, i: usize) -> u64 {
        self.sums[i + 1] - self.sums[i]
    }

    /// The estimated tokens of messages `a..b`.
    fn range(&self, a: usize, b: usize) -> u64 {
        self.sums[b] - self.sums[a]
    }

    /// The latest summary: its index and what it replaces.
    fn summary(&self) -> Option<(usize, usize)> {
        self.summaries.last().copied()
    }

    /// Where the view's run of transcript messages starts.
    pub(crate) fn start(&self) -> usize {
        let replaced = self.summary().map_or(0, |(_, r)| r);
        self.slide.max(replaced).min(self.len())
    }

    /// The first user message, when it is pinned in front of the view.
    fn pinned(&self) -> Option<usize> {
        self.first_user
            .filter(|i| self.keep_first_user && *i < self.start())
    }

    /// The tokens of the summaries among messages `a..`, which the view leaves out there.
    fn summaries_from(&self, a: usize) -> (u64, usize) {
        self.summaries
            .iter()
            .rev()
            .take_while(|(i, _)| *i >= a)
            .fold((0, 0), |(t, n), (i, _)| (t + self.tokens(*i), n + 1))
    }

    /// The estimated tokens of messages `a..` as the view sends them.
    fn tail(&self, a: usize) -> u64 {
        self.range(a, self.len()) - self.summaries_from(a).0
    }

    /// The estimated tokens of the view: what the next request sends.
    pub(crate) fn estimate(&self) -> u64 {
        let front = self.pinned().map_or(0, |i| self.tokens(i))
            + self.summary().map_or(0, |(i, _)| self.tokens(i));
        self.fixed + front + self.tail(self.start())
    }

    /// `estimate` tokens of the view as the server would count them: the last count plus
    /// the estimate of what changed since, scaled by the ratio.
    fn anchored(&self, estimate: u64) -> u64 {
        match self.anchor {
            None => (estimate as f64 * self.ratio).round() as u64,
            Some(a) => {
                let delta = (estimate as f64 - a.estimate as f64) * self.ratio;
                (a.tokens as f64 + delta).round().max(0.0) as u64
            }
        }
    }

    /// The tokens of the next request, as the server would count them.
    pub(crate) fn used(&self) -> u64 {
        self.anchored(self.estimate())
    }

    /// The figures of the context, against `window`.
    pub(crate) fn usage(&self, window: Option<u64>) -> ContextUsage {
        let estimate = self.estimate();
        let used = self.anchored(estimate);
        let estimated = match self.anchor {
            None => used,
            Some(a) => ((estimate as f64 - a.estimate as f64).abs() * self.ratio).round() as u64,
        };
        let start = self.start();
        let (_, summaries_in_view) = self.summaries_from(start);
        let sent = (self.len() - start - summaries_in_view)
            + usize::from(self.pinned().is_some())
            + usize::from(self.summary().is_some());
        ContextUsage::new(
            used,
            window,
            estimated,
            self.len().saturating_sub(sent) as u64,
        )
    }

    /// What the view is cut with besides the transcript: where its run of transcript
    /// messages starts, what goes in front of it, and the transcript it counts. Two views of
    /// one ledger with the same key, the second of a transcript grown from the first's, are
    /// the same messages, the second followed by what the transcript grew by.
    pub(crate) fn view_key(&self) -> ViewKey {
        ViewKey {
            restarts: self.restarts,
            start: self.start(),
            pinned: self.pinned(),
            summary: self.summary().map(|(i, _)| i),
        }
    }

    /// The messages the next request sends, shared with `messages` (the transcript the
    /// ledger counted).
    pub(crate) fn view(&self, messages: &List<Arc<Message>>) -> Vec<Arc<Message>> {
        let mut out = Vec::new();
        self.view_into(messages, &mut out);
        out
    }

    /// As [`Ledger::view`], into `out`: the list of the last request, as it was sent. What
    /// it holds in the same places as this view stays (compared by pointer), the rest is
    /// replaced, so a turn counts up the `Arc`s of what it appended only, and fills the
    /// list without a new allocation.
    pub(crate) fn view_into(&self, messages: &List<Arc<Message>>, out: &mut Vec<Arc<Message>>) {
        let start = self.start();
        let mut kept = 0;
        let mut place = |m: &Arc<Message>| {
            if !out.get(kept).is_some_and(|o| Arc::ptr_eq(o, m)) {
                out.truncate(kept);
                out.push(m.clone());
            }
            kept += 1;
        };
        if let Some(m) = self.pinned().and_then(|i| messages.get(i)) {
            place(m);
        }
        if let Some(m) = self.summary().and_then(|(i, _)| messages.get(i)) {
            place(m);
        }
        let mut skip = self
            .summaries
            .iter()
            .map(|(i, _)| *i)
            .filter(|i| *i >= start)
            .peekable();
        for (i, m) in (start..).zip(messages.skip(start).iter()) {
            if skip.next_if_eq(&i).is_some() {
                continue;
            }
            place(m);
        }
        out.truncate(kept);
    }

    /// Notes the server's count of a request whose view was estimated at `estimate`, and of
    /// the reply it gave (`output` tokens, estimated at `reply` as the transcript holds it).
    pub(crate) fn counted(&mut self, estimate: u64, input: u64, output: u64, reply: u64) {
        if input == 0 || estimate == 0 {
            return;
        }
        self.ratio = (input as f64 / estimate as f64).clamp(RATIO_BOUNDS.0, RATIO_BOUNDS.1);
        self.anchor = Some(Anchor {
            tokens: input + output,
            estimate: estimate + reply,
        });
    }

    /// Notes an exact count of the view as it is now.
    pub(crate) fn exact(&mut self, tokens: u64) {
        let estimate = self.estimate();
        self.counted(estimate, tokens, 0, 0);
    }

    /// Whether message `i` may start the view: a user message or a reply, never a tool
    /// result (its call would be left out) nor a summary (sent in front anyway).
    fn safe(&self, i: usize) -> bool {
        matches!(self.kinds.get(i), Some(Kind::User | Kind::Assistant))
    }

    /// The last message that may start the view: the newest user message or reply, so that
    /// the model always sees what it answers.
    fn last_safe(&self) -> Option<usize> {
        (0..self.len()).rev().find(|i| self.safe(*i))
    }

    /// Whether a compaction or a slide could make the view smaller: something is sent
    /// before the newest user message or reply.
    pub(crate) fn can_shrink(&self) -> bool {
        self.last_safe().is_some_and(|l| l > self.start())
    }

    /// Moves the start of the sliding window forward, when the view is over `budget` tokens (as
    /// the server would count them), as little as it takes to bring it to `SLIDE_TO` of the
    /// budget, never past the newest user message or reply. Returns how many messages left
    /// the view.
    pub(crate) fn slide(&mut self, budget: u64) -> usize {
        let start = self.start();
        let Some(last) = self.last_safe().filter(|l| *l > start) else {
            return 0;
        };
        let used = self.used();
        if used <= budget {
            return 0;
        }
        // Down to a share of the budget, not to the budget itself: the turns after it append
        // to the same first messages (the server's prompt cache keeps them) until the budget
        // is reached again, instead of moving the start, and sending a new prefix, every turn.
        let target = (budget as f64 * SLIDE_TO) as u64;
        let over = (used - target) as f64 / self.ratio;
        let pinned = self.first_user.filter(|_| self.keep_first_user);
        let summary_at = |i: usize| self.summaries.iter().any(|(s, _)| *s == i);
        let mut dropped = 0u64;
        let mut to = start;
        for i in start..last {
            // A pinned message or a summary leaves the run but stays in the view.
            if Some(i) != pinned && !summary_at(i) {
                dropped += self.tokens(i);
            }
            to = i + 1;
            if dropped as f64 >= over && self.safe(to) {
                break;
            }
        }
        while !self.safe(to) && to < last {
            to += 1;
        }
        self.slide = to;
        to - start
    }

    /// Where a compaction cuts: the first message kept as it is, such that what is kept
    /// fits `keep` tokens (as the server would count them), moved forward to a message that
    /// may start the view. `None` when nothing before it would be summarized.
    pub(crate) fn cut(&self, keep: u64) -> Option<usize> {
        let start = self.start();
        let n = self.len();
        let keep = (keep as f64 / self.ratio) as u64;
        // The tail shrinks as the cut moves forward: the first cut whose tail fits.
        let (mut lo, mut hi) = (start, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.tail(mid) <= keep {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let mut cut = lo;
        while cut < n && !self.safe(cut) {
            cut += 1;
        }
        // Keep at least the newest user message or reply (a call with its results): the
        // model answers it.
        if let Some(last) = self.last_safe() {
            cut = cut.min(last);
        }
        (cut > start).then_some(cut)
    }

    /// The messages a compaction cutting at `cut` summarizes: the indices from the start of
    /// the view to the cut, without the pinned first user message and the summaries.
    pub(crate) fn summarized(&self, cut: usize) -> impl Iterator<Item = usize> + '_ {
        let pinned = self.first_user.filter(|_| self.keep_first_user);
        (self.start()..cut)
            .filter(move |i| Some(*i) != pinned && !matches!(self.kinds[*i], Kind::Summary))
    }

    /// The latest summary's index, if any.
    pub(crate) fn latest_summary(&self) -> Option<usize> {
        self.summary().map(|(i, _)| i)
    }
}

/// The built-in estimate of the context `messages` make (summaries applied), against
/// `window`: what the state shows of a transcript put in place between runs.
pub(crate) fn estimate_of(messages: &List<Arc<Message>>, window: Option<u64>) -> ContextUsage {
    let mut ledger = Ledger::default();
    ledger.sync(messages, None);
    ledger.usage(window)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Summary;
    use crate::message::{
        AssistantMessage, ContentBlock, StopReason, ToolCall, ToolResultMessage, UserMessage,
    };

    fn user(text: &str) -> Arc<Message> {
        Arc::new(Message::user(text))
    }

    fn call(id: &str) -> Arc<Message> {
        Arc::new(Message::Assistant(AssistantMessage::new(
            vec![ContentBlock::ToolCall(ToolCall::new(id, "read", "{}"))],
            StopReason::ToolUse,
        )))
    }

    fn result(id: &str, text: &str) -> Arc<Message> {
        Arc::new(Message::ToolResult(ToolResultMessage::new(
            id, "read", text,
        )))
    }

    fn summary(text: &str, replaces: u64) -> Arc<Message> {
        Arc::new(Message::User(UserMessage {
            summary: Some(Summary::new(replaces, 0)),
            ..UserMessage::new(text)
        }))
    }

    /// A task, then `n` calls each with a result of `words` words.
    fn transcript(n: usize, words: usize) -> List<Arc<Message>> {
        let mut out = vec![user("Read the book.")];
        for i in 0..n {
            let id = format!("c{i}");
            out.push(call(&id));
            out.push(result(&id, &"word ".repeat(words)));
        }
        out.into_iter().collect()
    }

    #[test]
    fn sync_counts_only_what_was_appended_and_starts_over_on_a_new_transcript() {
        let t = transcript(3, 10);
        let mut l = Ledger::default();
        l.sync(&t, None);
        assert_eq!(l.len(), 7);
        let before = l.estimate();
        let mut grown = t.clone();
        grown.push_back(user("more"));
        l.sync(&grown, None);
        assert_eq!(l.len(), 8);
        assert_eq!(
            l.estimate(),
            before + estimate::estimate_message(&Message::user("more"))
        );
        // Another transcript of the same length: counted again from the start.
        let other = transcript(3, 1);
        let mut other2 = other.clone();
        other2.push_back(user("x"));
        l.sync(&other2, None);
        assert_eq!(l.len(), 8);
        assert!(l.estimate() < before);
    }

    #[test]
    fn the_server_count_anchors_the_estimate() {
        let t = transcript(2, 10);
        let mut l = Ledger::default();
        l.sync(&t, None);
        let e = l.estimate();
        // The server counted twice the estimate; the reply (not in the transcript here)
        // was 5 tokens, estimated at 4.
        l.counted(e, 2 * e, 5, 4);
        assert_eq!(l.used(), 2 * e + 5 - 2 * 4);
        // A result appended since counts at twice its estimate.
        let mut grown = t.clone();
        let r = result("c9", "word word word word");
        grown.push_back(r.clone());
        l.sync(&grown, None);
        let added = estimate::estimate_message(&r);
        assert_eq!(l.used(), 2 * e + 5 + 2 * added - 2 * 4);
        assert_eq!(l.usage(Some(1000)).estimated, 2 * (added - 4));
    }

    #[test]
    fn a_slide_never_starts_the_view_with_a_tool_result() {
        let t = transcript(10, 50);
        let mut l = Ledger::default();
        l.sync(&t, None);
        let total = l.used();
        let dropped = l.slide(total / 2);
        assert!(dropped > 0);
        let view = l.view(&t);
        assert!(view[0].as_assistant().is_some(), "{:?}", view[0]);
        assert!(l.used() <= total / 2 + 80, "{} of {}", l.used(), total / 2);
        assert_eq!(view.len(), t.len() - dropped);
        assert_eq!(l.usage(None).omitted, dropped as u64);
        // Already within the budget: nothing moves.
        assert_eq!(l.slide(total), 0);
    }

    /// The key stays while the transcript only grows, and a view with the same key of a
    /// grown transcript starts with the view before; a slide, a summary and a transcript
    /// counted from the start each change it.
    #[test]
    fn the_view_key_changes_whenever_the_view_is_cut_otherwise() {
        let mut t = transcript(10, 50);
        let mut l = Ledger::default();
        l.sync(&t, None);
        let key = l.view_key();
        let before = l.view(&t);
        t.push_back(user("more"));
        l.sync(&t, None);
        assert_eq!(l.view_key(), key);
        let grown = l.view(&t);
        assert!(before.iter().zip(&grown).all(|(a, b)| Arc::ptr_eq(a, b)));
        assert_eq!(grown.len(), before.len() + 1);
        let total = l.used();
        assert!(l.slide(total / 2) > 0);
        let slid = l.view_key();
        assert_ne!(slid, key);
        t.push_back(summary("so far", l.start() as u64 + 2));
        l.sync(&t, None);
        let summarized = l.view_key();
        assert_ne!(summarized, slid);
        // Another transcript (not grown from this one) of a greater length.
        let mut other = transcript(12, 50);
        other.push_back(user("x"));
        l.sync(&other, None);
        assert_ne!(l.view_key(), summarized);
        assert_ne!(
            l.view_key(),
            key,
            "counted from the start: another key than the first"
        );
    }

    /// Filled into the last request's list, the view is the same as one made afresh: the
    /// messages it sends again in the same places are kept (no `Arc` counted up again),
    /// whatever else the list held (a longer list, other messages, a slid view).
    #[test]
    fn a_view_into_the_last_list_keeps_what_it_sends_again() {
        let mut t = transcript(4, 20);
        let mut l = Ledger::default();
        l.sync(&t, None);
        let mut out = l.view(&t);
        let counts = |list: &List<Arc<Message>>| -> Vec<usize> {
            list.iter().map(Arc::strong_count).collect()
        };
        let before = counts(&t);
        t.push_back(user("more"));
        l.sync(&t, None);
        l.view_into(&t, &mut out);
        assert_eq!(out, l.view(&t));
        assert!(out.iter().zip(t.iter()).all(|(a, b)| Arc::ptr_eq(a, b)));
        // The messages kept were not counted up again (the one before last held by the
        // ledger no more); the new one is in the list (and in the ledger's hands).
        let n = before.len() - 1;
        assert_eq!(counts(&t)[..n], before[..n]);
        assert_eq!(counts(&t)[n..], [before[n] - 1, 3]);
        // A list that a hook changed: another message in the middle, one more at the end.
        out[3] = user("put in place by a hook");
        out.push(user("and one more"));
        l.view_into(&t, &mut out);
        assert_eq!(out, l.view(&t));
        assert!(out.iter().zip(t.iter()).all(|(a, b)| Arc::ptr_eq(a, b)));
        assert_eq!(out.len(), t.len());
        // A slid view drops the front: the list is cut to the view.
        let total = l.used();
        assert!(l.slide(total / 2) > 0);
        l.view_into(&t, &mut out);
        assert_eq!(out, l.view(&t));
        assert_eq!(out.len(), t.len() - l.start());
    }

    #[test]
    fn the_first_user_message_stays_when_pinned() {
        let t = transcript(10, 50);
        let mut l = Ledger {
            keep_first_user: true,
            ..Ledger::default()
        };
        l.sync(&t, None);
        let total = l.used();
        let dropped = l.slide(total / 2);
        let view = l.view(&t);
        assert!(Arc::ptr_eq(&view[0], &t[0]));
        assert!(view[1].as_assistant().is_some());
        assert_eq!(view.len(), t.len() - dropped + 1);
        assert_eq!(l.usage(None).omitted, dropped as u64 - 1);
    }

    #[test]
    fn a_summary_replaces_what_it_covers_and_goes_first() {
        let mut t = transcript(6, 50);
        let mut l = Ledger::default();
        l.sync(&t, None);
        let cut = l.cut(l.used() / 3).unwrap();
        assert!(l.safe(cut));
        assert!(l.summarized(cut).count() == cut);
        t.push_back(summary("the story so far", cut as u64));
        l.sync(&t, None);
        let view = l.view(&t);
        assert!(Arc::ptr_eq(&view[0], t.last().unwrap()));
        assert!(Arc::ptr_eq(&view[1], &t[cut]));
        assert_eq!(view.len(), 1 + (t.len() - 1 - cut));
        assert_eq!(l.usage(None).omitted, cut as u64);
        // A second summary supersedes the first, which leaves the view.
        t.push_back(user("go on"));
        let cut2 = cut + 2;
        t.push_back(summary("newer", cut2 as u64));
        l.sync(&t, None);
        let view = l.view(&t);
        assert!(Arc::ptr_eq(&view[0], t.last().unwrap()));
        assert!(
            view.iter()
                .skip(1)
                .all(|m| !matches!(&**m, Message::User(u) if u.summary.is_some()))
        );
    }

    #[test]
    fn nothing_to_cut_when_the_view_fits() {
        let t = transcript(2, 5);
        let mut l = Ledger::default();
        l.sync(&t, None);
        assert_eq!(l.cut(l.used() * 2), None);
    }
}
