//! `List`: the read-only, cheaply cloned list type of [`crate::State`].
//!
//! A snapshot's transcript, queues and pending calls are persistent vectors (`imbl`), so that
//! folding one event never copies them. The vector stays private: `List` shows only reading,
//! and a new `imbl` release cannot break a user of pagent.

use std::fmt;
use std::iter::FusedIterator;
use std::ops::Index;
use std::sync::Arc;

use imbl::Vector;

/// A read-only list, shared between snapshots.
///
/// [`crate::State`] keeps its transcript and queues in `List`s. It reads like a slice
/// (`len`, `get`, `list[i]`, `first`, `last`, `iter`, `for x in &list`); there is no way to
/// change one from outside pagent: a new state is made by the agent's fold.
///
/// ```
/// let list: pagent::List<u32> = (1..=3).collect();
/// assert_eq!(list.len(), 3);
/// assert_eq!(list[1], 2);
/// assert_eq!(list.last(), Some(&3));
/// assert_eq!(list.iter().rev().copied().collect::<Vec<_>>(), [3, 2, 1]);
/// ```
///
/// # Performance
/// `clone` is O(1) (the elements are shared, not copied); `get`, `list[i]` and `last` are
/// O(log n) with a small constant, iteration is O(1) per element. Elements larger than two
/// pointers are kept behind an `Arc` each: the persistent vector's chunk holds 64 elements
/// and is copied whole when it is first written (and when a shared one is), which for a
/// pending tool call of about 200 bytes was a 12 KB copy per event.
pub struct List<T>(Repr<T>);

/// How a [`List`] holds its elements: in the vector's chunks when they are small, else one
/// `Arc` each. Which one is a constant of `T` ([`List::boxed`]).
enum Repr<T> {
    Inline(Vector<T>),
    Boxed(Vector<Arc<T>>),
}

/// The iterator of a [`List`]: front to back, or back to front with `rev()`.
pub struct ListIter<'a, T>(IterRepr<'a, T>);

enum IterRepr<'a, T> {
    Inline(imbl::vector::Iter<'a, T, imbl::shared_ptr::DefaultSharedPtr>),
    Boxed(imbl::vector::Iter<'a, Arc<T>, imbl::shared_ptr::DefaultSharedPtr>),
}

impl<T: Clone> List<T> {
    /// True when `T` is kept behind an `Arc`: larger than two pointers.
    const fn boxed() -> bool {
        std::mem::size_of::<T>() > 2 * std::mem::size_of::<usize>()
    }

    /// An empty list.
    #[must_use]
    pub fn new() -> List<T> {
        if List::<T>::boxed() {
            List(Repr::Boxed(Vector::new()))
        } else {
            List(Repr::Inline(Vector::new()))
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Inline(v) => v.len(),
            Repr::Boxed(v) => v.len(),
        }
    }

    /// True when the list has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element at `index`, or `None` past the end.
    pub fn get(&self, index: usize) -> Option<&T> {
        match &self.0 {
            Repr::Inline(v) => v.get(index),
            Repr::Boxed(v) => v.get(index).map(|e| &**e),
        }
    }

    /// The first element.
    pub fn first(&self) -> Option<&T> {
        self.get(0)
    }

    /// The last element.
    pub fn last(&self) -> Option<&T> {
        match &self.0 {
            Repr::Inline(v) => v.back(),
            Repr::Boxed(v) => v.back().map(|e| &**e),
        }
    }

    /// The elements in order.
    pub fn iter(&self) -> ListIter<'_, T> {
        ListIter(match &self.0 {
            Repr::Inline(v) => IterRepr::Inline(v.iter()),
            Repr::Boxed(v) => IterRepr::Boxed(v.iter()),
        })
    }

    /// The elements copied into a `Vec` (each element cloned; for `Arc`s that is O(1) each).
    pub fn to_vec(&self) -> Vec<T> {
        self.iter().cloned().collect()
    }

    pub(crate) fn push_back(&mut self, value: T) {
        match &mut self.0 {
            Repr::Inline(v) => v.push_back(value),
            Repr::Boxed(v) => v.push_back(Arc::new(value)),
        }
    }

    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        match &mut self.0 {
            Repr::Inline(v) => v.get_mut(index),
            Repr::Boxed(v) => v.get_mut(index).map(Arc::make_mut),
        }
    }

    pub(crate) fn insert(&mut self, index: usize, value: T) {
        match &mut self.0 {
            Repr::Inline(v) => v.insert(index, value),
            Repr::Boxed(v) => v.insert(index, Arc::new(value)),
        }
    }

    pub(crate) fn remove(&mut self, index: usize) -> T {
        match &mut self.0 {
            Repr::Inline(v) => v.remove(index),
            Repr::Boxed(v) => Arc::unwrap_or_clone(v.remove(index)),
        }
    }

    /// The elements from `start` on, as a list of their own: O(log n), nothing copied.
    pub(crate) fn skip(&self, start: usize) -> List<T> {
        let start = start.min(self.len());
        List(match &self.0 {
            Repr::Inline(v) => Repr::Inline(v.skip(start)),
            Repr::Boxed(v) => Repr::Boxed(v.skip(start)),
        })
    }

    /// Takes the first `n` elements out, leaving the rest.
    pub(crate) fn take_front(&mut self, n: usize) -> List<T> {
        List(match &mut self.0 {
            Repr::Inline(v) => {
                let rest = v.split_off(n);
                Repr::Inline(std::mem::replace(v, rest))
            }
            Repr::Boxed(v) => {
                let rest = v.split_off(n);
                Repr::Boxed(std::mem::replace(v, rest))
            }
        })
    }
}

impl<T: Clone> Clone for List<T> {
    /// O(1): the elements are shared.
    fn clone(&self) -> List<T> {
        List(match &self.0 {
            Repr::Inline(v) => Repr::Inline(v.clone()),
            Repr::Boxed(v) => Repr::Boxed(v.clone()),
        })
    }
}

impl<T: Clone> Default for List<T> {
    fn default() -> List<T> {
        List::new()
    }
}

impl<T: Clone + fmt::Debug> fmt::Debug for List<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Clone + PartialEq> PartialEq for List<T> {
    fn eq(&self, other: &List<T>) -> bool {
        match (&self.0, &other.0) {
            (Repr::Inline(a), Repr::Inline(b)) => a == b,
            (Repr::Boxed(a), Repr::Boxed(b)) => a == b,
            // Not made: the representation is a constant of `T`.
            _ => self.len() == other.len() && self.iter().eq(other.iter()),
        }
    }
}

impl<T: Clone + Eq> Eq for List<T> {}

impl<T: Clone> Index<usize> for List<T> {
    type Output = T;

    /// # Panics
    /// When `index` is past the end.
    fn index(&self, index: usize) -> &T {
        match &self.0 {
            Repr::Inline(v) => &v[index],
            Repr::Boxed(v) => &v[index],
        }
    }
}

impl<T: Clone> FromIterator<T> for List<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> List<T> {
        List(if List::<T>::boxed() {
            Repr::Boxed(iter.into_iter().map(Arc::new).collect())
        } else {
            Repr::Inline(iter.into_iter().collect())
        })
    }
}

impl<'a, T: Clone> IntoIterator for &'a List<T> {
    type Item = &'a T;
    type IntoIter = ListIter<'a, T>;

    fn into_iter(self) -> ListIter<'a, T> {
        self.iter()
    }
}

impl<'a, T: Clone> Iterator for ListIter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        match &mut self.0 {
            IterRepr::Inline(i) => i.next(),
            IterRepr::Boxed(i) => i.next().map(|e| &**e),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            IterRepr::Inline(i) => i.size_hint(),
            IterRepr::Boxed(i) => i.size_hint(),
        }
    }
}

impl<T: Clone> DoubleEndedIterator for ListIter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            IterRepr::Inline(i) => i.next_back(),
            IterRepr::Boxed(i) => i.next_back().map(|e| &**e),
        }
    }
}

impl<T: Clone> ExactSizeIterator for ListIter<'_, T> {}

impl<T: Clone> FusedIterator for ListIter<'_, T> {}

impl<T: Clone> Clone for ListIter<'_, T> {
    fn clone(&self) -> Self {
        ListIter(match &self.0 {
            IterRepr::Inline(i) => IterRepr::Inline(i.clone()),
            IterRepr::Boxed(i) => IterRepr::Boxed(i.clone()),
        })
    }
}

impl<T> fmt::Debug for ListIter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ListIter")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_a_slice() {
        let mut list: List<u32> = (0..100).collect();
        assert_eq!(list.len(), 100);
        assert_eq!(list.get(100), None);
        assert_eq!((list.first(), list.last()), (Some(&0), Some(&99)));
        let it = list.iter();
        assert_eq!(it.len(), 100);
        assert_eq!((&list).into_iter().next_back(), Some(&99));
        let copy = list.clone();
        list.push_back(100);
        assert_eq!((copy.len(), list.len()), (100, 101));
        let front = list.take_front(2);
        assert_eq!(front.to_vec(), [0, 1]);
        assert_eq!(list[0], 2);
        assert_eq!(format!("{:?}", front), "[0, 1]");
    }

    /// Elements larger than two pointers are kept behind an `Arc` each; the list reads and
    /// changes the same.
    #[test]
    fn large_elements_read_and_change_as_small_ones() {
        type Big = (u64, u64, u64, String);
        assert!(List::<Big>::boxed() && !List::<Arc<u32>>::boxed());
        let big = |i: u64| (i, i, i, i.to_string());
        let mut list: List<Big> = (0..100).map(big).collect();
        let copy = list.clone();
        list.push_back(big(100));
        list.insert(0, big(1000));
        list.get_mut(1).unwrap().3.push('!');
        assert_eq!(list.remove(0), big(1000));
        assert_eq!((copy.len(), list.len()), (100, 101));
        assert_eq!(copy[0].3, "0");
        assert_eq!(list[0].3, "0!");
        assert_eq!(list.get(100), Some(&big(100)));
        assert_eq!(list.last(), Some(&big(100)));
        assert_eq!(list.iter().rev().nth(1), Some(&big(99)));
        let front = list.take_front(2);
        assert_eq!(front.to_vec(), [(0, 0, 0, "0!".to_owned()), big(1)]);
        assert_eq!(list.skip(98).to_vec(), [big(100)]);
        assert_eq!(list, (2..=100).map(big).collect::<List<Big>>());
        assert_ne!(list, copy);
    }
}
