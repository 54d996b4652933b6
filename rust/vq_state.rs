// SPDX-License-Identifier: GPL-2.0

//! What the module keeps for each virtqueue vhost shows it, and the kick
//! hook.

use crate::counters::VqCounters;
use crate::policy::Kicks;
use crate::requests::Requests;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};
use kernel::{sync::Arc, vhost_poller::Vq};

/// The module's view of one virtqueue: what the kick hook and vhost's
/// callbacks reach without the table's lock.
pub(crate) struct VqState {
    /// vhost's virtqueue: a handle, revoked when vhost detaches it.
    pub(crate) handle: Vq,
    /// The device's number in the counters, the same for all its vqs: set
    /// under the table's lock at attach, for display only.
    pub(crate) dev: AtomicU32,
    /// Index of the vq in its device.
    pub(crate) index: u32,
    /// Its entry's slot in the table (`Table::insert`), read under the
    /// table's lock, and by its kicks to ask for a start.
    pub(crate) slot: AtomicUsize,
    /// Its kicks' rate, and the gate a refused start closes.
    pub(crate) kicks: Kicks,
    /// In poll mode, as kicks see it: set by a thread when it starts the vq,
    /// cleared when it stops it, and by vhost when it takes the vq back
    /// (quiesce). The entry's mode is the thread's view (`Entry`).
    pub(crate) poll_mode: AtomicBool,
    /// Set by a kick that asked for a start, taken by the first thread.
    pub(crate) want_poll: AtomicBool,
    /// Set when vhost's watchdog took it back (`poll_mode` cleared with
    /// it); taken by the thread that settles the books (`Entry::taken_back`).
    pub(crate) stalled: AtomicBool,
    pub(crate) counters: VqCounters,
    /// Where its kicks ask the first thread for a start.
    pub(crate) requests: Arc<Requests>,
}

impl VqState {
    /// The kick hook: counts the kick and, in notification mode, asks the
    /// first thread for a start when the policy says so (`Kicks::kick`).
    /// Atomic context: no lock, no allocation, O(1).
    pub(crate) fn kick(&self) {
        let c = &self.counters;
        c.kicks.fetch_add(1, Relaxed);
        if self.poll_mode.load(Relaxed) {
            return;
        }
        c.notify_work.fetch_add(1, Relaxed);
        let p = crate::param_snapshot::now();
        // Relaxed: `Waker::wake`'s `Release` swap orders this store before
        // it, for the thread's `Acquire` swap in `Waker::take`. Only the kick
        // that sets the flag asks and wakes the thread; that is safe because
        // the thread cannot miss a request whose asker woke it (see `wake`).
        // The slot was stored before vhost could kick (attach).
        if self.kicks.kick(crate::clock::now(), &p) && !self.want_poll.swap(true, Relaxed) {
            self.requests.ask(self.slot.load(Relaxed));
        }
    }
}
