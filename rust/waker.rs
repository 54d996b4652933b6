// SPDX-License-Identifier: GPL-2.0

//! Waking a thread: a flag for "there is something to serve", and the
//! thread. Kicks (any context) and vhost's callbacks wake; the
//! thread takes the flag before it serves and sleeps only while it is
//! clear.

use crate::compat::ARef;
use core::sync::atomic::{
    AtomicBool,
    Ordering::{Acquire, Release},
};
use kernel::task::Task;

pub(crate) struct Waker {
    /// A kick reached the rate, or a request waits: the thread has work.
    pending: AtomicBool,
    /// The thread.
    task: ARef<Task>,
}

impl Waker {
    pub(crate) fn new(task: ARef<Task>) -> Self {
        Self {
            pending: AtomicBool::new(false),
            task,
        }
    }

    /// Wakes the thread, for the requests the caller made before (a
    /// `want_poll` set). Any context.
    pub(crate) fn wake(&self) {
        // Release, and a read-modify-write, pairing with the `Acquire` swap
        // in `take`. That swap reads the last value of `pending`: if it
        // reads ours, or that of an RMW after ours (RMWs continue a release
        // sequence; a plain store would end it), our requests are visible
        // to the thread's loads that follow it; if it comes before ours in
        // `pending`'s order, `pending` stays set and the thread serves
        // again before it sleeps. A plain store here would let the thread's
        // swap read another waker's `true` and miss our request for good.
        self.pending.swap(true, Release);
        // `wake_up_process()` orders the swap above before its read of the
        // task's state (a full barrier), as `set_current_state()` in
        // `sleep_unless` orders the thread's state before its read of
        // `pending`: the thread sees `pending` or is woken.
        self.task.wake_up();
    }

    /// Takes the flag, before serving: the requests of every waker whose
    /// flag this takes are visible after it. Returns whether it was set:
    /// if not, no request came since the last take (a waker that made one
    /// sets the flag after it).
    pub(crate) fn take(&self) -> bool {
        // Acquire, and a read-modify-write, pairing with the `Release` swap
        // in `wake`: see there. It must come before the reads of the
        // requests (`want_poll`), which `Acquire` guarantees. A relaxed
        // store could be ordered after those reads on a weakly ordered CPU
        // (store buffering): a kick could set `want_poll` after the read and
        // `pending` before the store, which then cleared it, and the thread
        // would sleep with the request pending, while later kicks, seeing
        // `want_poll` set, would not wake it.
        self.pending.swap(false, Acquire)
    }

    /// Whether a wake is pending: the thread's condition to stay awake.
    pub(crate) fn is_pending(&self) -> bool {
        // Acquire: pairs with `wake`'s `Release`, as `take` does.
        self.pending.load(Acquire)
    }
}
