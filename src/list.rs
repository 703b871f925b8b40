//! `List`: the read-only, cheaply cloned list type of [`crate::State`].
//!
//! A snapshot's transcript, queues and pending calls are persistent vectors (`imbl`), so that
//! folding one event never copies them. The vector stays private: `List` shows only reading,
//! and a new `imbl` release cannot break a user of pagent.

use std::fmt;
use std::iter::FusedIterator;
use std::ops::Index;

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
/// O(log n) with a small constant, iteration is O(1) per element.
pub struct List<T>(Vector<T>);

/// The iterator of a [`List`]: front to back, or back to front with `rev()`.
pub struct ListIter<'a, T>(imbl::vector::Iter<'a, T, imbl::shared_ptr::DefaultSharedPtr>);

impl<T: Clone> List<T> {
    /// An empty list.
    #[must_use]
    pub fn new() -> List<T> {
        List(Vector::new())
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when the list has no element.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The element at `index`, or `None` past the end.
    pub fn get(&self, index: usize) -> Option<&T> {
        self.0.get(index)
    }

    /// The first element.
    pub fn first(&self) -> Option<&T> {
        self.0.front()
    }

    /// The last element.
    pub fn last(&self) -> Option<&T> {
        self.0.back()
    }

    /// The elements in order.
    pub fn iter(&self) -> ListIter<'_, T> {
        ListIter(self.0.iter())
    }

    /// The elements copied into a `Vec` (each element cloned; for `Arc`s that is O(1) each).
    pub fn to_vec(&self) -> Vec<T> {
        self.0.iter().cloned().collect()
    }

    pub(crate) fn push_back(&mut self, value: T) {
        self.0.push_back(value);
    }

    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.0.get_mut(index)
    }

    pub(crate) fn insert(&mut self, index: usize, value: T) {
        self.0.insert(index, value);
    }

    pub(crate) fn remove(&mut self, index: usize) -> T {
        self.0.remove(index)
    }

    /// The elements from `start` on, as a list of their own: O(log n), nothing copied.
    pub(crate) fn skip(&self, start: usize) -> List<T> {
        List(self.0.skip(start.min(self.0.len())))
    }

    /// Takes the first `n` elements out, leaving the rest.
    pub(crate) fn take_front(&mut self, n: usize) -> List<T> {
        let rest = self.0.split_off(n);
        List(std::mem::replace(&mut self.0, rest))
    }
}

impl<T: Clone> Clone for List<T> {
    /// O(1): the elements are shared.
    fn clone(&self) -> List<T> {
        List(self.0.clone())
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
        self.0 == other.0
    }
}

impl<T: Clone + Eq> Eq for List<T> {}

impl<T: Clone> Index<usize> for List<T> {
    type Output = T;

    /// # Panics
    /// When `index` is past the end.
    fn index(&self, index: usize) -> &T {
        &self.0[index]
    }
}

impl<T: Clone> FromIterator<T> for List<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> List<T> {
        List(iter.into_iter().collect())
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
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<T: Clone> DoubleEndedIterator for ListIter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back()
    }
}

impl<T: Clone> ExactSizeIterator for ListIter<'_, T> {}

impl<T: Clone> FusedIterator for ListIter<'_, T> {}

impl<T: Clone> Clone for ListIter<'_, T> {
    fn clone(&self) -> Self {
        ListIter(self.0.clone())
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
}
