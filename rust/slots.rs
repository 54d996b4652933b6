// SPDX-License-Identifier: GPL-2.0

//! Slots: items kept at indices that do not change while they are kept,
//! added with no allocation while there is room, and linked in a circle
//! through the occupied slots, so that a walk of the items costs the
//! items, however many slots were ever used. The table keeps its entries
//! in slots, and each thread the entries it polls (`ring.rs`).

use kernel::{
    alloc::{
        flags::{GFP_KERNEL, GFP_NOWAIT},
        Flags, KVec,
    },
    prelude::*,
};

/// A slot: an item or none; while it has one, its neighbours in the
/// circle; while it is free, `next` is the next free slot.
struct Slot<T> {
    item: Option<T>,
    prev: usize,
    next: usize,
}

/// Room for more slots, allocated before the lock of the [`Slots`] is
/// taken ([`Slots::room`], [`Slots::grow`]).
pub(crate) struct Spare<T>(KVec<Slot<T>>);

impl<T> Spare<T> {
    /// Room for `len` slots; may sleep.
    pub(crate) fn new(len: usize) -> Result<Self> {
        Self::with(len, GFP_KERNEL)
    }

    /// Room for `len` slots, without sleeping: for a caller that holds a
    /// lock a thread takes.
    pub(crate) fn new_nowait(len: usize) -> Result<Self> {
        Self::with(len, GFP_NOWAIT)
    }

    fn with(len: usize, flags: Flags) -> Result<Self> {
        Ok(Self(KVec::with_capacity(len, flags)?))
    }
}

/// The slots.
///
/// # Invariants
///
/// `count` slots have an item, and they, and only they, are in the circle:
/// `head` is one of them (`None` when there is none), and `prev` and
/// `next` link them. Every other slot is on the free list (`free`, then
/// each one's `next`; the last links to itself).
pub(crate) struct Slots<T> {
    slots: KVec<Slot<T>>,
    free: Option<usize>,
    head: Option<usize>,
    count: usize,
}

impl<T> Slots<T> {
    /// No slot.
    pub(crate) const fn new() -> Self {
        // INVARIANT: No item, no slot.
        Self {
            slots: KVec::new(),
            free: None,
            head: None,
            count: 0,
        }
    }

    /// The number of slots, used or free: the indices are below it.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether one more item fits without an allocation; if not, how many
    /// slots a [`Spare`] should have room for.
    pub(crate) fn room(&self) -> Result<(), usize> {
        let len = self.slots.len();
        if self.free.is_some() || len < self.slots.capacity() {
            Ok(())
        } else {
            Err(len.saturating_mul(2).max(8))
        }
    }

    /// Moves the slots into `spare`, if it has more room: the indices stay.
    /// O(slots), with no allocation.
    pub(crate) fn grow(&mut self, spare: Spare<T>) {
        let mut slots = spare.0;
        if slots.capacity() <= self.slots.capacity() {
            return;
        }
        for slot in core::mem::take(&mut self.slots) {
            // Within capacity: cannot fail, allocates nothing.
            let _ = slots.push(slot, GFP_NOWAIT);
        }
        self.slots = slots;
    }

    /// Keeps `item` in a free slot, last in the circle, and returns its
    /// index; gives it back when there is no room without an allocation
    /// ([`Slots::room`]).
    pub(crate) fn insert(&mut self, item: T) -> Result<usize, T> {
        if self.room().is_err() {
            return Err(item);
        }
        let i = match self.free {
            Some(i) => {
                let Some(s) = self.slots.as_mut_slice().get_mut(i) else {
                    return Err(item);
                };
                self.free = (s.next != i).then_some(s.next);
                s.item = Some(item);
                i
            }
            None => {
                let i = self.slots.len();
                let new = Slot {
                    item: Some(item),
                    prev: i,
                    next: i,
                };
                // Within capacity (`room`): cannot fail, allocates nothing.
                let _ = self.slots.push(new, GFP_NOWAIT);
                i
            }
        };
        // INVARIANT: One more item, and it joins the circle.
        self.count += 1;
        self.link(i);
        Ok(i)
    }

    /// Takes the item of slot `i` out, if it has one; the slot is free.
    pub(crate) fn remove(&mut self, i: usize) -> Option<T> {
        let item = self.slots.as_mut_slice().get_mut(i)?.item.take()?;
        // INVARIANT: One fewer, out of the circle and on the free list.
        self.count -= 1;
        self.unlink(i);
        let free = self.free.unwrap_or(i);
        if let Some(s) = self.slots.as_mut_slice().get_mut(i) {
            s.next = free;
        }
        self.free = Some(i);
        Some(item)
    }

    /// Puts `item` in slot `i` in place of the one there, and returns
    /// that; gives `item` back if the slot is free.
    pub(crate) fn replace(&mut self, i: usize, item: T) -> Result<T, T> {
        match self.slots.as_mut_slice().get_mut(i) {
            Some(Slot { item: Some(x), .. }) => Ok(core::mem::replace(x, item)),
            _ => Err(item),
        }
    }

    /// The item of slot `i`, if any.
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.slots.as_slice().get(i)?.item.as_ref()
    }

    /// The item of slot `i`, if any, to change.
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.as_mut_slice().get_mut(i)?.item.as_mut()
    }

    /// The items, in the order of their slots.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.as_slice().iter().filter_map(|s| s.item.as_ref())
    }

    /// The first slot of the circle, and the circle turned by one, so that
    /// the next walk begins one further: no item always comes first.
    pub(crate) fn turn(&mut self) -> Option<usize> {
        let head = self.head?;
        self.head = Some(self.next(head));
        Some(head)
    }

    /// The slot after `i` in the circle (`i` itself when it is alone, or
    /// free).
    pub(crate) fn next(&self, i: usize) -> usize {
        match self.slots.as_slice().get(i) {
            Some(s) if s.item.is_some() => s.next,
            _ => i,
        }
    }

    /// Puts slot `i` in the circle, before the head: the last of it.
    fn link(&mut self, i: usize) {
        let s = self.slots.as_mut_slice();
        match self.head {
            None => {
                self.head = Some(i);
                if let Some(x) = s.get_mut(i) {
                    x.prev = i;
                    x.next = i;
                }
            }
            Some(h) => {
                let last = s.get(h).map_or(h, |x| x.prev);
                if let Some(x) = s.get_mut(i) {
                    x.prev = last;
                    x.next = h;
                }
                if let Some(x) = s.get_mut(last) {
                    x.next = i;
                }
                if let Some(x) = s.get_mut(h) {
                    x.prev = i;
                }
            }
        }
    }

    /// Takes slot `i` out of the circle.
    fn unlink(&mut self, i: usize) {
        let s = self.slots.as_mut_slice();
        let Some((prev, next)) = s.get(i).map(|x| (x.prev, x.next)) else {
            return;
        };
        if next == i {
            self.head = None;
        } else {
            if let Some(x) = s.get_mut(prev) {
                x.next = next;
            }
            if let Some(x) = s.get_mut(next) {
                x.prev = prev;
            }
            if self.head == Some(i) {
                self.head = Some(next);
            }
        }
        if let Some(x) = s.get_mut(i) {
            x.prev = i;
            x.next = i;
        }
    }
}
