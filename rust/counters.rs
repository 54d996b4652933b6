// SPDX-License-Identifier: GPL-2.0

//! The worker's counters, as `/sys/kernel/debug/vhost_poll/worker` shows
//! them. Each is a relaxed atomic: read for display only, never to decide.

use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};
use kernel::time::Ktime;

#[derive(Default)]
pub(crate) struct WorkerCounters {
    pub(crate) pid: AtomicI64,
    pub(crate) passes: AtomicU64,
    pub(crate) busy_ns: AtomicU64,
    pub(crate) idle_ns: AtomicU64,
    pub(crate) mm_switches: AtomicU64,
    pub(crate) polled_vqs: AtomicU32,
    /// Passes after which the worker yielded to tasks waiting for its CPU.
    pub(crate) asides: AtomicU64,
    /// The time until it ran again, in microseconds.
    pub(crate) aside_us: AtomicU64,
    /// Starts refused: the worker was contended (`Contention`), or the vq
    /// cooling down (`CoolDown`).
    pub(crate) refused: AtomicU64,
    /// When the current busy or idle period began, and which it is.
    pub(crate) since_ns: AtomicI64,
    pub(crate) asleep: AtomicBool,
}

impl WorkerCounters {
    /// Ends the current busy or idle period and starts one of the other
    /// kind (`asleep`).
    pub(crate) fn period(&self, asleep: bool) {
        let now = Ktime::ktime_get().to_ns();
        let since = self.since_ns.swap(now, Relaxed);
        let spent = u64::try_from(now - since).unwrap_or(0);
        if self.asleep.swap(asleep, Relaxed) {
            self.idle_ns.fetch_add(spent, Relaxed);
        } else {
            self.busy_ns.fetch_add(spent, Relaxed);
        }
    }
}
