// SPDX-License-Identifier: GPL-2.0

//! The shared worker: one kernel thread, `vhost-poll`, that watches the
//! rings of the virtqueues of all devices in poll mode, round robin.
//!
//! The worker runs no handler. When a ring has buffers it queues the
//! vq's kick handler to the vq's own vhost worker, as a kick would; its
//! starts and stops are carried out by that worker too. So nothing an
//! owner does to its rings, its memory or its vq mutex (a fault that does
//! not resolve, a blocked ioctl, a busy loop) holds the shared thread up:
//! it holds up that owner's own worker, as it would without polling. See
//! "Isolation and trust" in Documentation/design.rst.
//!
//! Locking: `inner` is held by the worker for each step (serving requests,
//! one visit of one vq) and released between steps. No step sleeps or
//! waits: a visit only tries the vq's mutex and reads the ring with page
//! faults off. So vhost's detach, which takes the vq out of the table
//! (under the mutex every vhost open and close takes), waits for one short
//! step at most; it does not wait for the worker to leave the owner's
//! address space, on which the worker holds a user reference of its own.
//! Kicks and quiesce take no lock. A vq is reached only through its
//! handle's guard (`Vq::access`), which vhost's detach revokes: the order
//! is `inner`, then the guard's lock, then (tried only) the vq's mutex.

use crate::counters::WorkerCounters;
use crate::policy::{Contention, Pause, RoundRobin, StepAside};
use crate::table::Inner;
use crate::visit::{start, stop, visit, MmCursor};
use crate::vq::VqState;
use crate::waker::Waker;
use core::sync::atomic::{
    AtomicBool,
    Ordering::{Acquire, Relaxed, Release},
};
use kernel::{
    alloc::flags::GFP_KERNEL,
    kthread, new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
    task::Task,
    time::Ktime,
    types::ARef,
    vhost_poller::StopReason,
};

/// What the worker, the kick hook, vhost's callbacks and the counters
/// share.
///
/// # Invariants
///
/// `waker` wakes the thread that runs `run` with this `Shared`; it is the
/// one every `VqState` of the table holds.
#[pin_data]
pub(crate) struct Shared {
    #[pin]
    pub(crate) inner: Mutex<Inner>,
    pub(crate) waker: Arc<Waker>,
    pub(crate) counters: WorkerCounters,
}

impl Shared {
    /// The state shared with worker thread `task`, which `Handoff` then
    /// gives it.
    pub(crate) fn new(task: ARef<Task>) -> Result<Arc<Self>> {
        let waker = Arc::new(Waker::new(task), GFP_KERNEL)?;
        // INVARIANT: `waker` wakes `task`, which `Handoff` gives this.
        Arc::pin_init(
            pin_init!(Self {
                inner <- new_mutex!(Inner::new(), "vhost_poll::inner"),
                waker,
                counters: WorkerCounters::default(),
            }),
            GFP_KERNEL,
        )
    }

    /// Calls `f` for each virtqueue, in table order, under the lock, with
    /// whether it is polled (not if vhost took it back meanwhile), its
    /// idle window and its cool-down after a hand-back for want of gain.
    pub(crate) fn for_each_vq(&self, mut f: impl FnMut(&VqState, bool, u32, u32)) {
        let inner = self.inner.lock();
        let bounds = crate::clock::idle_bounds();
        for e in inner.iter() {
            f(
                &e.vq,
                e.polled && e.vq.polled.load(Relaxed),
                e.window.jiffies(bounds),
                e.cool.jiffies(),
            );
        }
    }

    /// Settles the books of the vqs vhost took back and starts polling
    /// those whose kicks reached the rate, unless the worker is
    /// `contended` or the vq is cooling down after a hand-back for want of
    /// gain: those it leaves to their own workers, and counts as refused.
    /// Called with `inner` held.
    fn serve(&self, inner: &mut Inner, contended: bool) {
        let now = crate::clock::now();
        // With `poll_min_gain` 0 nothing is handed back, and nothing waits
        // out a cool-down from before.
        let cool_downs = hands_back();
        self.waker.take();
        let rate_on = crate::module_parameters::poll_start_rate.value() != 0;
        for e in inner.iter_mut() {
            if e.polled && !e.vq.polled.load(Relaxed) {
                // vhost took it back (quiesce): settle the books.
                stop(&self.counters, e, StopReason::Quiesce);
            }
            if !e.polled && e.vq.want_poll.swap(false, Relaxed) && rate_on {
                if contended || (cool_downs && !e.cool.allows(now)) {
                    e.vq.counters.refused.fetch_add(1, Relaxed);
                    self.counters.refused.fetch_add(1, Relaxed);
                } else {
                    start(&self.counters, e);
                }
            }
        }
    }

    /// Hands every polled vq back for want of gain: the worker competes
    /// for its CPU (`Contention`). Each then cools down.
    fn hand_back_all(&self) {
        let mut inner = self.inner.lock();
        for e in inner.iter_mut() {
            stop(&self.counters, e, StopReason::Gain);
        }
    }

    /// Returns every polled vq to notification mode (the module unloads).
    fn stop_all(&self, mm: &mut MmCursor<'_>) {
        {
            let mut inner = self.inner.lock();
            for e in inner.iter_mut() {
                stop(&self.counters, e, StopReason::Off);
            }
        }
        mm.leave();
    }
}

/// Whether polled vqs that do not pay go back to notification mode: not
/// with `poll_min_gain` 0, which keeps every polled vq.
fn hands_back() -> bool {
    crate::module_parameters::poll_min_gain.value() != 0
}

/// The worker's loop.
fn run(shared: Arc<Shared>) {
    let pid = current!().pid();
    shared.counters.pid.store(pid.into(), Relaxed);
    shared
        .counters
        .since_ns
        .store(Ktime::ktime_get().to_ns(), Relaxed);
    let mut mm = MmCursor::new(&shared.counters);
    let mut rr = RoundRobin::new();
    let mut contention = Contention::new();
    while !kthread::should_stop() {
        let polled = {
            let mut inner = shared.inner.lock();
            shared.serve(&mut inner, contention.contended() && hands_back());
            shared.counters.polled_vqs.load(Relaxed)
        };
        if polled == 0 {
            contention.rested();
            // Nothing to poll: sleep until a kick reaches the rate or vhost
            // asks for something.
            mm.leave();
            shared.counters.period(true);
            kthread::sleep_unless(|| shared.waker.is_pending());
            shared.counters.period(false);
            continue;
        }
        // One pass: each polled vq once, one handler run each.
        let (mut found, mut paid) = (false, false);
        loop {
            if shared.waker.is_pending() || kthread::should_stop() {
                break;
            }
            let mut inner = shared.inner.lock();
            let Some(i) = rr.next(inner.slots()) else {
                break;
            };
            if let Some(e) = inner.get_mut(i) {
                if e.polled {
                    let v = visit(&shared.counters, e, &mut mm);
                    found |= v.work;
                    paid |= v.queued;
                }
            }
            drop(inner);
            kthread::cond_resched();
        }
        shared.counters.passes.fetch_add(1, Relaxed);
        // Others waiting for this CPU, and a pass that queued nothing:
        // step aside for a while (see `StepAside`).
        let contended = !kthread::single_task_running();
        let pause = StepAside::after_pass(paid, found, contended);
        contention.after_pass(crate::clock::now(), contended);
        if contention.contended() && hands_back() {
            shared.hand_back_all();
        }
        match pause {
            Pause::None => {}
            Pause::Busy => crate::clock::pause(),
            Pause::Yield => {
                let c = &shared.counters;
                let t0 = Ktime::ktime_get();
                crate::clock::give_way(found);
                let spent = (Ktime::ktime_get() - t0).to_ns() / 1000;
                c.asides.fetch_add(1, Relaxed);
                c.aside_us
                    .fetch_add(u64::try_from(spent).unwrap_or(0), Relaxed);
            }
        }
        kthread::cond_resched();
    }
    shared.stop_all(&mut mm);
    shared.counters.period(true);
}

/// How the worker thread gets its `Shared`, which needs the thread's task
/// (to wake it) and so is made after the thread.
#[pin_data]
pub(crate) struct Handoff {
    #[pin]
    shared: Mutex<Option<Arc<Shared>>>,
    given: AtomicBool,
}

impl Handoff {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                shared <- new_mutex!(None, "vhost_poll::handoff"),
                given: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )
    }

    /// Gives the worker `shared` and wakes it.
    pub(crate) fn give(&self, shared: Arc<Shared>) {
        *self.shared.lock() = Some(shared.clone());
        // Release: the store above before the flag the worker checks.
        self.given.store(true, Release);
        shared.waker.wake();
    }
}

/// The worker thread's body: waits for its `Shared`, then runs; returns
/// at once if stopped before it got one.
pub(crate) fn run_when_given(handoff: Arc<Handoff>) {
    loop {
        // Acquire: pairs with `give`'s `Release` store.
        if handoff.given.load(Acquire) {
            if let Some(shared) = handoff.shared.lock().take() {
                return run(shared);
            }
        }
        if kthread::should_stop() {
            return;
        }
        kthread::sleep_unless(|| handoff.given.load(Acquire));
    }
}
