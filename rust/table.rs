// SPDX-License-Identifier: GPL-2.0

//! The table of the virtqueues vhost has shown the module, and of the
//! lanes that poll them.

use crate::entry::Entry;
use crate::lane::Lane;
use crate::policy::THREADS_MAX;
use crate::vq::VqState;
use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    prelude::*,
    sync::Arc,
};

/// The table, behind `Shared::table`.
///
/// # Invariants
///
/// Each attached virtqueue the module follows has exactly one entry,
/// from its `attach` until its `detach`; a slot is `None` once its
/// virtqueue was detached, and is reused by a later attach. Every lane's
/// `Lane::polled` is the number of entries it polls (`Entry`'s invariant:
/// only `Entry::start` and `Entry::stop` change either, under the lock).
/// `lanes[0]` is the first lane, always there; `lanes[i]` is there while
/// lane `i`'s thread runs.
pub(crate) struct Table {
    entries: KVec<Option<Entry>>,
    lanes: [Option<Arc<Lane>>; THREADS_MAX],
    /// The last device number given out, for the counters.
    next_dev: u32,
}

impl Table {
    /// A table with no virtqueue, and the first lane `first`.
    pub(crate) fn new(first: Arc<Lane>) -> Self {
        let mut lanes: [Option<Arc<Lane>>; THREADS_MAX] = core::array::from_fn(|_| None);
        lanes[0] = Some(first);
        // INVARIANT: No virtqueue is followed yet, and none is polled.
        Self {
            entries: KVec::new(),
            lanes,
            next_dev: 0,
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

    /// The entries, with the lanes, to place vqs while iterating.
    pub(crate) fn entries_and_lanes(
        &mut self,
    ) -> (
        impl Iterator<Item = &mut Entry>,
        &[Option<Arc<Lane>>; THREADS_MAX],
    ) {
        (
            self.entries.as_mut_slice().iter_mut().flatten(),
            &self.lanes,
        )
    }

    /// The slot of `vq`'s entry.
    pub(crate) fn find(&self, vq: &VqState) -> Option<usize> {
        self.entries
            .as_slice()
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| core::ptr::eq(e.vq(), vq)))
    }

    /// The counters' number of device `device` (as `VqGuard::device`
    /// gives it): the one its other virtqueues have, or a new one.
    pub(crate) fn dev_number(&mut self, device: usize) -> u32 {
        let known = self
            .iter()
            .find(|e| {
                e.vq()
                    .handle
                    .access()
                    .is_some_and(|vq| vq.device() == device)
            })
            .map(|e| e.vq().dev);
        known.unwrap_or_else(|| {
            // A number for the counters only: after 2^32 devices it
            // wraps, and two devices may then share one.
            self.next_dev = self.next_dev.wrapping_add(1);
            self.next_dev
        })
    }

    /// Adds the entry of a virtqueue being attached, in a free slot if
    /// there is one.
    pub(crate) fn insert(&mut self, entry: Entry) -> Result {
        // INVARIANT: Called once per attach, with an entry not polled.
        if let Some(slot) = self.entries.as_mut_slice().iter_mut().find(|e| e.is_none()) {
            *slot = Some(entry);
            return Ok(());
        }
        self.entries.push(Some(entry), GFP_KERNEL)?;
        Ok(())
    }

    /// The entry in `slot`, if any.
    pub(crate) fn get_mut(&mut self, slot: usize) -> Option<&mut Entry> {
        self.entries.as_mut_slice().get_mut(slot)?.as_mut()
    }

    /// Forgets the entry in `slot` (its virtqueue is being detached). The
    /// caller stopped polling it first.
    pub(crate) fn remove(&mut self, slot: usize) {
        if let Some(slot) = self.entries.as_mut_slice().get_mut(slot) {
            // INVARIANT: The entry is not polled (the caller stopped it),
            // so no lane's count changes.
            *slot = None;
        }
    }

    /// The number of slots, for the round robin.
    pub(crate) fn slots(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.as_slice().iter().flatten()
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.entries.as_mut_slice().iter_mut().flatten()
    }
}
