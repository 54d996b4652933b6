// SPDX-License-Identifier: GPL-2.0

//! A thread: one polling thread, as the other threads, placement and the
//! counters see it. The first thread (`vhost-poll`) also takes the kicks'
//! start requests and vhost's callbacks; `poll_threads` adds threads
//! `vhost-poll/1` and on.

use crate::compat::ARef;
use crate::counters::ThreadCounters;
use crate::policy::{Jiffy, Params, ThreadLoad, ThreadPolicy, THREADS_MAX};
use crate::waker::Waker;
use core::sync::atomic::{
    AtomicBool, AtomicU32, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use kernel::{alloc::flags::GFP_KERNEL, c_str, prelude::*, str::CStr, sync::Arc, task::Task};

/// The names of the threads, by index.
pub(crate) const NAMES: [&CStr; THREADS_MAX] = [
    c_str!("vhost-poll"),
    c_str!("vhost-poll/1"),
    c_str!("vhost-poll/2"),
    c_str!("vhost-poll/3"),
    c_str!("vhost-poll/4"),
    c_str!("vhost-poll/5"),
    c_str!("vhost-poll/6"),
    c_str!("vhost-poll/7"),
];

/// One thread.
///
/// # Invariants
///
/// `waker` wakes the thread that runs this thread's loop.
pub(crate) struct Thread {
    /// The thread's number: 0 for the first.
    pub(crate) index: usize,
    pub(crate) waker: Arc<Waker>,
    pub(crate) counters: ThreadCounters,
    /// Virtqueues this thread polls: its ring's entries in poll mode,
    /// counted by `Entry::start` and `Entry::stop` under the ring's lock.
    polled: AtomicU32,
    /// Its last contention window found its CPU wanted by others, as its
    /// thread last saw (`ThreadPolicy::contended`).
    contended: AtomicBool,
    /// Held for stalls until the jiffy in `held_until`
    /// (`ThreadPolicy::held_until`), as its thread last saw.
    held: AtomicBool,
    held_until: AtomicUsize,
    /// The first thread asked its thread to hand back and return
    /// (`poll_threads` wants fewer threads); no vq is placed on it since.
    retiring: AtomicBool,
    /// Its thread handed everything back and is returning: stopping it
    /// waits only for the thread's last steps, not for a pass or a
    /// hand-back of a thread that may not get its CPU.
    finished: AtomicBool,
}

impl Thread {
    /// The thread of thread number `index`, whose task is `task`.
    pub(crate) fn new(index: usize, task: ARef<Task>) -> Result<Arc<Self>> {
        // INVARIANT: The caller gives this thread to `task`'s loop.
        Ok(Arc::new(
            Self {
                index,
                waker: Arc::new(Waker::new(task), GFP_KERNEL)?,
                counters: ThreadCounters::default(),
                polled: AtomicU32::new(0),
                contended: AtomicBool::new(false),
                held: AtomicBool::new(false),
                held_until: AtomicUsize::new(0),
                retiring: AtomicBool::new(false),
                finished: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?)
    }

    /// How many virtqueues it polls.
    pub(crate) fn polled_vqs(&self) -> u32 {
        // Relaxed: changed only under the thread's ring lock; a reader
        // without it (placement, the thread's own sleep check, the
        // counters) sees a value that was true a moment ago, and
        // the thread's waker covers a vq placed after the read.
        self.polled.load(Relaxed)
    }

    /// One more virtqueue polled (`Entry::start`, under the ring's lock).
    pub(crate) fn add_polled(&self) {
        self.polled.fetch_add(1, Relaxed);
    }

    /// One fewer (`Entry::stop`, under the ring's lock).
    pub(crate) fn remove_polled(&self) {
        self.polled.fetch_sub(1, Relaxed);
    }

    /// Records its thread's verdict on its CPU.
    pub(crate) fn set_contended(&self, contended: bool) {
        self.contended.store(contended, Relaxed);
    }

    /// Records the hold its stalls put it under, until a jiffy, if any. It
    /// ends by itself, whether or not the thread runs then.
    pub(crate) fn set_held(&self, until: Option<Jiffy>) {
        if let Some(until) = until {
            self.held_until.store(until.raw(), Relaxed);
        }
        self.held.store(until.is_some(), Relaxed);
    }

    /// Whether it is held for stalls at `now`.
    fn held(&self, now: Jiffy) -> bool {
        self.held.load(Relaxed) && Jiffy::from_raw(self.held_until.load(Relaxed)).is_after(now)
    }

    /// Asks its thread to hand its vqs back and return (the first thread,
    /// for a thread `poll_threads` no longer wants). Takes effect when the
    /// thread next runs; the watchdog covers its vqs until then.
    pub(crate) fn retire(&self) {
        self.retiring.store(true, Relaxed);
        // Every time: a wake-up its thread took before it saw the flag
        // is given again.
        self.waker.wake();
    }

    /// Whether it was asked to retire.
    pub(crate) fn retiring(&self) -> bool {
        self.retiring.load(Relaxed)
    }

    /// Its thread says it has handed everything back and is returning:
    /// stopping it then waits only for its last steps to `do_exit()`.
    pub(crate) fn finish(&self) {
        // Release: its hand-back happens before the first thread reads it.
        self.finished.store(true, Release);
    }

    /// Whether its thread is done but for returning (see `finished`).
    pub(crate) fn finished(&self) -> bool {
        self.finished.load(Acquire)
    }

    /// The thread as placement sees it, with parameters `p`.
    pub(crate) fn load(&self, p: &Params) -> ThreadLoad {
        ThreadPolicy::load(
            self.polled_vqs(),
            self.contended.load(Relaxed),
            self.held(crate::clock::now()),
            p,
        )
    }
}
