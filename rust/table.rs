// SPDX-License-Identifier: GPL-2.0

//! The table of the virtqueues vhost has shown the module, and of the
//! lanes that poll them.
//!
//! What a lane does at each step costs the virtqueues it polls, not the
//! table: each lane's polled entries are a ring of their own (`Slot::prev`,
//! `Slot::next`), which its passes walk; attach finds a free slot and its
//! device's number without a scan, and detach finds its entry by the slot
//! kept with it. Only the counters (debugfs) and serving start requests,
//! which happens when a kick asked for one, walk the whole table.

use crate::entry::Entry;
use crate::lane::Lane;
use crate::policy::{Exit, Jiffy, Params, THREADS_MAX};
use crate::vq::VqState;
use core::sync::atomic::Ordering::Relaxed;
use kernel::{
    alloc::{flags::GFP_KERNEL, flags::GFP_NOWAIT, KVec},
    prelude::*,
    sync::Arc,
};

/// A slot: an entry or none; while its entry is polled, its neighbours
/// in its lane's ring; while it is free, `next` is the next free slot.
struct Slot {
    entry: Option<Entry>,
    prev: usize,
    next: usize,
}

/// Room for more slots, allocated with the table's lock released
/// ([`Table::room`], [`Table::grow`]).
pub(crate) struct Spare(KVec<Slot>);

impl Spare {
    /// Room for `len` slots.
    pub(crate) fn new(len: usize) -> Result<Self> {
        Ok(Self(KVec::with_capacity(len, GFP_KERNEL)?))
    }
}

/// The table, behind `Shared::table`.
///
/// # Invariants
///
/// Each attached virtqueue the module follows has exactly one entry,
/// from its `attach` until its `detach`, in the slot its `VqState::slot`
/// names; a slot is `None` once its virtqueue was detached, is then on
/// the list of free slots (`free`, then each one's `next`), and is reused
/// by a later attach.
///
/// Every lane's `Lane::polled` is the number of entries it polls, and
/// those entries, and only those, are in its ring: `heads[i]` is one of
/// them (`None` when there is none), and `prev` and `next` link them in a
/// circle. Only [`Table::start`] and [`Table::stop`] change either, under
/// the lock (`Entry`'s invariant).
///
/// `lanes[0]` is the first lane, always there; `lanes[i]` is there while
/// lane `i`'s thread runs.
pub(crate) struct Table {
    slots: KVec<Slot>,
    free: Option<usize>,
    heads: [Option<usize>; THREADS_MAX],
    lanes: [Option<Arc<Lane>>; THREADS_MAX],
    /// The last device number given out, for the counters.
    next_dev: u32,
    /// The device of the last attach, and its number: vhost attaches a
    /// device's virtqueues one after the other.
    last_device: Option<(usize, u32)>,
}

impl Table {
    /// A table with no virtqueue, and the first lane `first`.
    pub(crate) fn new(first: Arc<Lane>) -> Self {
        let mut lanes: [Option<Arc<Lane>>; THREADS_MAX] = core::array::from_fn(|_| None);
        lanes[0] = Some(first);
        // INVARIANT: No virtqueue is followed yet, and none is polled.
        Self {
            slots: KVec::new(),
            free: None,
            heads: [None; THREADS_MAX],
            lanes,
            next_dev: 0,
            last_device: None,
        }
    }

    /// The lanes, in order; `None` where lane `i`'s thread is not running.
    pub(crate) fn lanes(&self) -> &[Option<Arc<Lane>>; THREADS_MAX] {
        &self.lanes
    }

    /// Records that lane `i` (not the first) runs, or, with `None`, that
    /// its thread stopped, after handing back its vqs.
    pub(crate) fn set_lane(&mut self, i: usize, lane: Option<Arc<Lane>>) {
        if let Some(slot) = self.lanes.get_mut(i).filter(|_| i > 0) {
            *slot = lane;
        }
    }

    /// Whether one more entry fits without an allocation; if not, how
    /// many slots a [`Spare`] should have room for.
    pub(crate) fn room(&self) -> Result<(), usize> {
        let len = self.slots.len();
        if self.free.is_some() || len < self.slots.capacity() {
            Ok(())
        } else {
            Err(len.saturating_mul(2).max(8))
        }
    }

    /// Moves the slots into `spare`, if it has more room. O(slots), with
    /// no allocation: the caller allocated `spare` without the lock.
    pub(crate) fn grow(&mut self, spare: Spare) {
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

    /// The counters' number of device `device` (as `VqGuard::device`
    /// gives it): the one its other virtqueues have, or a new one.
    pub(crate) fn dev_number(&mut self, device: usize) -> u32 {
        match self.last_device {
            Some((last, number)) if last == device => number,
            _ => {
                // A number for the counters only: after 2^32 devices it
                // wraps, and two devices may then share one.
                self.next_dev = self.next_dev.wrapping_add(1);
                self.last_device = Some((device, self.next_dev));
                self.next_dev
            }
        }
    }

    /// Adds the entry of a virtqueue being attached, in a free slot, and
    /// records the slot in its `VqState`. Gives the entry back when there
    /// is no room without an allocation ([`Table::room`]).
    pub(crate) fn insert(&mut self, entry: Entry) -> Result<(), Entry> {
        if self.room().is_err() {
            return Err(entry);
        }
        // INVARIANT: Called once per attach, with an entry not polled: it
        // is in no ring (its links point at itself).
        let slot = match self.free {
            Some(slot) => {
                let Some(s) = self.slots.as_mut_slice().get_mut(slot) else {
                    return Err(entry);
                };
                self.free = (s.next != slot).then_some(s.next);
                *s = Slot {
                    entry: Some(entry),
                    prev: slot,
                    next: slot,
                };
                slot
            }
            None => {
                let slot = self.slots.len();
                let new = Slot {
                    entry: Some(entry),
                    prev: slot,
                    next: slot,
                };
                // Within capacity (`room`): cannot fail, allocates nothing.
                let _ = self.slots.push(new, GFP_NOWAIT);
                slot
            }
        };
        if let Some(e) = self.get(slot) {
            e.vq().slot.store(slot, Relaxed);
        }
        Ok(())
    }

    /// The slot of `vq`'s entry.
    pub(crate) fn find(&self, vq: &VqState) -> Option<usize> {
        let slot = vq.slot.load(Relaxed);
        self.get(slot)
            .filter(|e| core::ptr::eq(e.vq(), vq))
            .map(|_| slot)
    }

    /// The entry in `slot`, if any.
    pub(crate) fn get(&self, slot: usize) -> Option<&Entry> {
        self.slots.as_slice().get(slot)?.entry.as_ref()
    }

    /// Forgets the entry in `slot` (its virtqueue is being detached). The
    /// caller stopped polling it first.
    pub(crate) fn remove(&mut self, slot: usize) {
        let Some(s) = self.slots.as_mut_slice().get_mut(slot) else {
            return;
        };
        if s.entry.take().is_some() {
            // INVARIANT: The entry is not polled (the caller stopped it),
            // so no lane's count or ring changes. On the free list, whose
            // end is the slot that links to itself.
            s.next = self.free.unwrap_or(slot);
            self.free = Some(slot);
        }
    }

    /// The number of slots, for a walk of the whole table.
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.slots
            .as_slice()
            .iter()
            .filter_map(|s| s.entry.as_ref())
    }

    /// Starts polling the entry in `slot` on lane `lane` (running):
    /// [`Entry::start`], and the entry joins the lane's ring. Returns
    /// whether it did.
    pub(crate) fn start(&mut self, slot: usize, lane: usize, now: Jiffy, p: &Params) -> bool {
        let Some(Some(l)) = self.lanes.get(lane).cloned() else {
            return false;
        };
        let started = self
            .slots
            .as_mut_slice()
            .get_mut(slot)
            .and_then(|s| s.entry.as_mut())
            .is_some_and(|e| e.start(&l, now, p));
        if started {
            self.link(slot, lane);
        }
        started
    }

    /// Returns the entry in `slot` to notification mode, for `why`
    /// ([`Entry::stop`]), and takes it out of its lane's ring.
    pub(crate) fn stop(&mut self, slot: usize, why: Exit, now: Jiffy, p: &Params) {
        let lane = self
            .slots
            .as_mut_slice()
            .get_mut(slot)
            .and_then(|s| s.entry.as_mut())
            .and_then(|e| e.stop(why, now, p));
        if let Some(lane) = lane {
            self.unlink(slot, lane);
        }
    }

    /// Returns every entry lane `lane` polls to notification mode.
    pub(crate) fn stop_lane(&mut self, lane: usize, why: Exit, now: Jiffy, p: &Params) {
        while let Some(slot) = self.heads.get(lane).copied().flatten() {
            let before = self.heads.get(lane).copied();
            self.stop(slot, why, now, p);
            if self.heads.get(lane).copied() == before {
                // Not in poll mode after all: cannot happen (invariant).
                break;
            }
        }
    }

    /// The first slot of lane `lane`'s ring, and the ring turned by one,
    /// so that the next pass begins one further: no vq is always visited
    /// first.
    pub(crate) fn begin_pass(&mut self, lane: usize) -> Option<usize> {
        let head = self.heads.get(lane).copied().flatten()?;
        let next = self.slots.as_slice().get(head).map_or(head, |s| s.next);
        if let Some(h) = self.heads.get_mut(lane) {
            *h = Some(next);
        }
        Some(head)
    }

    /// The slot after `slot` in its lane's ring.
    pub(crate) fn next_polled(&self, slot: usize) -> usize {
        self.slots.as_slice().get(slot).map_or(slot, |s| s.next)
    }

    /// The entry in `slot` if `lane` polls it, to visit.
    pub(crate) fn polled_by(&mut self, slot: usize, lane: &Lane) -> Option<&mut Entry> {
        self.slots
            .as_mut_slice()
            .get_mut(slot)?
            .entry
            .as_mut()
            .filter(|e| e.polled_by(lane))
    }

    /// Puts `slot` in lane `lane`'s ring.
    fn link(&mut self, slot: usize, lane: usize) {
        let Some(head) = self.heads.get_mut(lane) else {
            return;
        };
        let s = self.slots.as_mut_slice();
        match *head {
            None => {
                *head = Some(slot);
                if let Some(x) = s.get_mut(slot) {
                    x.prev = slot;
                    x.next = slot;
                }
            }
            Some(h) => {
                // Before the head: the last of the ring.
                let last = s.get(h).map_or(h, |x| x.prev);
                if let Some(x) = s.get_mut(slot) {
                    x.prev = last;
                    x.next = h;
                }
                if let Some(x) = s.get_mut(last) {
                    x.next = slot;
                }
                if let Some(x) = s.get_mut(h) {
                    x.prev = slot;
                }
            }
        }
    }

    /// Takes `slot` out of lane `lane`'s ring.
    fn unlink(&mut self, slot: usize, lane: usize) {
        let Some(head) = self.heads.get_mut(lane) else {
            return;
        };
        let s = self.slots.as_mut_slice();
        let Some((prev, next)) = s.get(slot).map(|x| (x.prev, x.next)) else {
            return;
        };
        if next == slot {
            *head = None;
        } else {
            if let Some(x) = s.get_mut(prev) {
                x.next = next;
            }
            if let Some(x) = s.get_mut(next) {
                x.prev = prev;
            }
            if *head == Some(slot) {
                *head = Some(next);
            }
        }
        if let Some(x) = s.get_mut(slot) {
            x.prev = slot;
            x.next = slot;
        }
    }
}
