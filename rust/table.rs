// SPDX-License-Identifier: GPL-2.0

//! The worker's table of the virtqueues vhost has shown the module.

use crate::policy::{CoolDown, Gain, Idle, Window, THREADS_MAX};
use crate::vq::VqState;
use crate::worker::Lane;
use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    prelude::*,
    sync::Arc,
};

/// The worker's bookkeeping for one virtqueue.
pub(crate) struct Entry {
    pub(crate) vq: Arc<VqState>,
    /// In poll mode (the worker's view; `vq.polled` mirrors it for kicks).
    pub(crate) polled: bool,
    /// The polling thread that polls it, or did last.
    pub(crate) lane: Arc<Lane>,
    /// The current (or last) poll period's work.
    pub(crate) idle: Idle,
    /// The idle window, kept from one poll period to the next.
    pub(crate) window: Window,
    /// Whether polling saves kicks, over the current poll period.
    pub(crate) gain: Gain,
    /// The wait after a hand-back for want of gain.
    pub(crate) cool: CoolDown,
}

/// The table, behind `Shared::inner`.
///
/// # Invariants
///
/// Each attached virtqueue the module follows has exactly one entry,
/// from its `attach` until its `detach`; a slot is `None` once its
/// virtqueue was detached, and is reused by a later attach. The number
/// of entries with `polled` set and `lane` pointing to a thread is that
/// thread's `WorkerCounters::polled_vqs`. `lanes[0]` is the first thread's,
/// always there; `lanes[i]` is there while polling thread `i` runs.
pub(crate) struct Inner {
    entries: KVec<Option<Entry>>,
    lanes: [Option<Arc<Lane>>; THREADS_MAX],
    /// The last device number given out, for the counters.
    next_dev: u32,
}

impl Inner {
    /// A table with no virtqueue, and the first thread's `first`.
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

    /// The polling threads, in order; `None` where thread `i` is not
    /// running.
    pub(crate) fn lanes(&self) -> &[Option<Arc<Lane>>; THREADS_MAX] {
        &self.lanes
    }

    /// Records that polling thread `i` (not the first) runs with `lane`,
    /// or, with `None`, that it stopped, after handing back its vqs.
    pub(crate) fn set_lane(&mut self, i: usize, lane: Option<Arc<Lane>>) {
        if let Some(slot) = self.lanes.get_mut(i).filter(|_| i > 0) {
            *slot = lane;
        }
    }

    /// The entries, with the polling threads, to place vqs while
    /// iterating.
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
            .position(|e| e.as_ref().is_some_and(|e| core::ptr::eq(&*e.vq, vq)))
    }

    /// The counters' number of device `device` (as `VqGuard::device`
    /// gives it): the one its other virtqueues have, or a new one.
    pub(crate) fn dev_number(&mut self, device: usize) -> u32 {
        let known = self
            .iter()
            .find(|e| e.vq.vq.access().is_some_and(|vq| vq.device() == device))
            .map(|e| e.vq.dev);
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
            // so the count of polled entries is unchanged.
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
