// SPDX-License-Identifier: GPL-2.0

//! What the module keeps for each virtqueue vhost shows it, and the kick
//! hook that counts its rate.

use crate::policy::{starts_polling, RateTracker, StartGate};
use crate::waker::Waker;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use kernel::{sync::Arc, vhost_poller::Vq};

/// Counters of one virtqueue, as `/sys/kernel/debug/vhost_poll/vqs` shows
/// them.
#[derive(Default)]
pub(crate) struct VqCounters {
    /// Kicks received, in either mode.
    pub(crate) kicks: AtomicU64,
    /// Visits of the poller whose handler run took buffers.
    pub(crate) poll_work: AtomicU64,
    /// Kicks received in notification mode: each one woke the vq's handler.
    pub(crate) notify_work: AtomicU64,
    /// Visits of the poller that found nothing to take.
    pub(crate) empty_polls: AtomicU64,
    /// Entries into poll mode.
    pub(crate) enters: AtomicU64,
    /// Exits from poll mode.
    pub(crate) exits: AtomicU64,
    /// Starts the worker refused: it was contended, or this vq cooling
    /// down.
    pub(crate) refused: AtomicU64,
    /// Visits that queued the handler: each did what a kick would have.
    pub(crate) queued: AtomicU64,
    /// Visits that found the vq held (its handler running, most often).
    pub(crate) held: AtomicU64,
}

/// The module's view of one virtqueue.
pub(crate) struct VqState {
    /// vhost's virtqueue: a handle, revoked when vhost detaches it.
    pub(crate) vq: Vq,
    /// The device's number in the counters, the same for all its vqs.
    pub(crate) dev: u32,
    /// Index of the vq in its device.
    pub(crate) index: u32,
    /// Kicks per jiffy.
    pub(crate) rate: RateTracker,
    /// Whether the worker polls this vq (kicks then count differently).
    pub(crate) polled: AtomicBool,
    /// Set by a kick that reached `poll_start_rate`, taken by the worker.
    pub(crate) want_poll: AtomicBool,
    /// Closed by the worker when it refuses a start, until it would not.
    pub(crate) gate: StartGate,
    pub(crate) counters: VqCounters,
    /// Wakes the worker when the rate is reached.
    pub(crate) waker: Arc<Waker>,
}

impl VqState {
    /// The kick hook: counts the kick and, in notification mode, its rate;
    /// wakes the worker the first time the rate reaches
    /// `poll_start_rate`. Atomic context: no lock, no allocation, O(1).
    pub(crate) fn kick(&self) {
        let c = &self.counters;
        c.kicks.fetch_add(1, Relaxed);
        if self.polled.load(Relaxed) {
            return;
        }
        c.notify_work.fetch_add(1, Relaxed);
        let rate = crate::module_parameters::poll_start_rate.value();
        if rate == 0 {
            return;
        }
        let now = crate::clock::now();
        let count = self.rate.record(now);
        // Relaxed: `Waker::wake`'s `Release` swap orders this store before
        // it, for the worker's `Acquire` swap in `Waker::take`. Only the
        // kick that sets the flag wakes the worker; that is safe because the
        // worker cannot miss a flag whose setter woke it (see `wake`).
        if starts_polling(count, rate)
            && self.gate.allows(now, crate::worker::hands_back())
            && !self.want_poll.swap(true, Relaxed)
        {
            self.waker.wake();
        }
    }
}
