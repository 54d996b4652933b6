// SPDX-License-Identifier: GPL-2.0

//! The counters users read in debugfs (`stats.rs`): a row per virtqueue
//! and a row per thread. Each is a relaxed atomic, read for display only:
//! no decision reads one.

use crate::compat;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

/// Counters of one virtqueue, as `/sys/kernel/debug/vhost_poll/vqs` shows
/// them.
#[derive(Default)]
pub(crate) struct VqCounters {
    /// Kicks received, in either mode.
    pub(crate) kicks: AtomicU64,
    /// Visits of a thread whose handler run took buffers.
    pub(crate) poll_work: AtomicU64,
    /// Kicks received in notification mode: each one woke the vq's handler.
    pub(crate) notify_work: AtomicU64,
    /// Visits of a thread that found nothing to take.
    pub(crate) empty_polls: AtomicU64,
    /// Entries into poll mode.
    pub(crate) enters: AtomicU64,
    /// Exits from poll mode.
    pub(crate) exits: AtomicU64,
    /// Starts refused: every thread was contended, or this vq cooling down.
    pub(crate) refused: AtomicU64,
    /// Visits that queued the handler: each did what a kick would have.
    pub(crate) queued: AtomicU64,
    /// Visits that found the vq busy: its mutex held, by its handler
    /// running most often.
    pub(crate) busy: AtomicU64,
    /// Hand-backs by vhost's watchdog: no visit for its bound.
    pub(crate) stalls: AtomicU64,
    /// Visits that queued the handler because the ring could not be read
    /// (a fault to take, an IOTLB translation to ask for): not a kick's
    /// work, so not in `queued`.
    pub(crate) retries: AtomicU64,
    /// Its share of the time its own worker spent polling, in
    /// nanoseconds (shown in microseconds): CPU its owner is charged for.
    pub(crate) spin_ns: AtomicU64,
    /// Handler runs a thread queued to a worker on another CPU than its
    /// own: wake-ups that crossed CPUs, unless the worker ran already
    /// (the owner's cpuset, or the admin's placement, keeps the worker
    /// off the thread's CPU).
    pub(crate) crossed: AtomicU64,
    /// Handler runs a thread queued to a worker on its own CPU, which it
    /// then gave the CPU to: no wake-up crossed CPUs.
    pub(crate) handed: AtomicU64,
}

/// Counters of one thread, as `/sys/kernel/debug/vhost_poll/threads` shows
/// them.
#[derive(Default)]
pub(crate) struct ThreadCounters {
    pub(crate) pid: AtomicI64,
    pub(crate) passes: AtomicU64,
    pub(crate) busy_ns: AtomicU64,
    pub(crate) idle_ns: AtomicU64,
    pub(crate) mm_switches: AtomicU64,
    /// Passes after which the thread yielded to tasks waiting for its CPU.
    pub(crate) yields: AtomicU64,
    /// The time until it ran again, in microseconds.
    pub(crate) yield_us: AtomicU64,
    /// Starts refused (the first thread serves them all).
    pub(crate) refused: AtomicU64,
    /// Visits made in passes that found no work, and those passes' time
    /// from their first visit to the end of their last, in ns: what an
    /// empty visit costs, address-space switches between owners included.
    pub(crate) empty_visits: AtomicU64,
    pub(crate) empty_visit_ns: AtomicU64,
    /// Entries the first thread looked at to serve start requests: one a
    /// request, or the whole table when the queue of requests overflowed.
    pub(crate) served: AtomicU64,
    /// Naps between passes, the rings being quiet, and their asked
    /// length in all, in microseconds.
    pub(crate) naps: AtomicU64,
    pub(crate) nap_us: AtomicU64,
    /// Times the thread handed every virtqueue back because others
    /// waited for its CPU (`Exit::Contended`), and because vhost's
    /// watchdog took its rings back again and again (`Exit::Stalled`).
    pub(crate) contended: AtomicU64,
    pub(crate) stalled: AtomicU64,
    /// When the current busy or idle period began, and which it is.
    pub(crate) since_ns: AtomicI64,
    pub(crate) asleep: AtomicBool,
}

impl ThreadCounters {
    /// Ends the current busy or idle period and starts one of the other
    /// kind (`asleep`).
    pub(crate) fn period(&self, asleep: bool) {
        let now = compat::now_ns();
        let since = self.since_ns.swap(now, Relaxed);
        let spent = u64::try_from(now - since).unwrap_or(0);
        if self.asleep.swap(asleep, Relaxed) {
            self.idle_ns.fetch_add(spent, Relaxed);
        } else {
            self.busy_ns.fetch_add(spent, Relaxed);
        }
    }
}
