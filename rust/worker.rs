// SPDX-License-Identifier: GPL-2.0

//! The shared workers: kernel threads, `vhost-poll` and, when
//! `poll_threads` asks for more, `vhost-poll/1` and on, each watching the
//! rings of the virtqueues of many devices in poll mode, round robin. The
//! first thread also serves the requests (starts, and the books of vqs
//! vhost took back), places each vq it starts on the thread that polls
//! the fewest (`policy::place`), and starts and stops the others.
//!
//! The worker runs no handler. When a ring has buffers it queues the
//! vq's kick handler to the vq's own vhost worker, as a kick would; its
//! starts and stops are carried out by that worker too. So nothing an
//! owner does to its rings, its memory or its vq mutex (a fault that does
//! not resolve, a blocked ioctl, a busy loop) holds the shared thread up:
//! it holds up that owner's own worker, as it would without polling. See
//! "Isolation and trust" in Documentation/design.rst.
//!
//! Locking: `inner` is held by a thread for each step (serving requests,
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
use crate::policy::{
    place, threads_wanted, Contention, Pause, RoundRobin, StepAside, ThreadLoad, THREADS_MAX,
};
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
    c_str, kthread,
    kthread::KThread,
    new_mutex,
    prelude::*,
    str::CStr,
    sync::{Arc, Mutex},
    task::Task,
    time::Ktime,
    types::ARef,
    vhost_poller::StopReason,
};

/// The names of the polling threads, by index.
const NAMES: [&CStr; THREADS_MAX] = [
    c_str!("vhost-poll"),
    c_str!("vhost-poll/1"),
    c_str!("vhost-poll/2"),
    c_str!("vhost-poll/3"),
    c_str!("vhost-poll/4"),
    c_str!("vhost-poll/5"),
    c_str!("vhost-poll/6"),
    c_str!("vhost-poll/7"),
];

/// One polling thread, as the others, placement and the counters see it.
///
/// # Invariants
///
/// `waker` wakes the thread that runs `run` with this lane.
pub(crate) struct Lane {
    /// The thread's number: 0 for the first.
    pub(crate) index: usize,
    pub(crate) waker: Arc<Waker>,
    pub(crate) counters: WorkerCounters,
    /// Its recent passes competed for its CPU (`Contention`), as it last
    /// saw: placement gives it no vq meanwhile.
    contended: AtomicBool,
}

impl Lane {
    /// The lane of thread number `index`, whose task is `task`.
    fn new(index: usize, task: ARef<Task>) -> Result<Arc<Self>> {
        // INVARIANT: The caller gives this lane to `task`'s `run`.
        Ok(Arc::new(
            Self {
                index,
                waker: Arc::new(Waker::new(task), GFP_KERNEL)?,
                counters: WorkerCounters::default(),
                contended: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?)
    }

    fn load(&self) -> ThreadLoad {
        ThreadLoad {
            polled: self.counters.polled_vqs.load(Relaxed),
            // With `poll_min_gain` 0 contention hands nothing back and
            // refuses nothing.
            contended: self.contended.load(Relaxed) && hands_back(),
        }
    }
}

/// What the polling threads, the kick hook, vhost's callbacks and the
/// counters share.
///
/// # Invariants
///
/// `first` is `inner`'s first lane, and its waker is the one every
/// `VqState` of the table holds: kicks and vhost wake the first thread.
#[pin_data]
pub(crate) struct Shared {
    #[pin]
    pub(crate) inner: Mutex<Inner>,
    pub(crate) first: Arc<Lane>,
}

impl Shared {
    /// The state shared with the first thread, `task`, which `Handoff`
    /// then gives it.
    pub(crate) fn new(task: ARef<Task>) -> Result<Arc<Self>> {
        let first = Lane::new(0, task)?;
        // INVARIANT: `first` is the table's first lane.
        Arc::pin_init(
            pin_init!(Self {
                inner <- new_mutex!(Inner::new(first.clone()), "vhost_poll::inner"),
                first,
            }),
            GFP_KERNEL,
        )
    }

    /// Calls `f` for each virtqueue, in table order, under the lock, with
    /// whether it is polled (not if vhost took it back meanwhile), its
    /// idle window, its cool-down after a hand-back for want of gain, and
    /// the polling thread that polls it or did last.
    pub(crate) fn for_each_vq(&self, mut f: impl FnMut(&VqState, bool, u32, u32, usize)) {
        let inner = self.inner.lock();
        let bounds = crate::clock::idle_bounds();
        for e in inner.iter() {
            f(
                &e.vq,
                e.polled && e.vq.polled.load(Relaxed),
                e.window.jiffies(bounds),
                e.cool.jiffies(),
                e.lane.index,
            );
        }
    }

    /// Calls `f` for each running polling thread, in order, under the lock.
    pub(crate) fn for_each_lane(&self, mut f: impl FnMut(&Lane)) {
        let inner = self.inner.lock();
        for lane in inner.lanes().iter().flatten() {
            f(lane);
        }
    }

    /// Settles the books of the vqs vhost took back and starts polling
    /// those whose kicks reached the rate, each on the polling thread that
    /// polls the fewest among the `wanted` first, leaving out contended
    /// ones. A vq that no thread can take, or that is cooling down after a
    /// hand-back for want of gain, stays with its own worker and counts as
    /// refused. The first thread calls it, with `inner` held.
    fn serve(&self, inner: &mut Inner, wanted: usize) {
        let now = crate::clock::now();
        // With `poll_min_gain` 0 nothing is handed back, and nothing waits
        // out a cool-down from before.
        let cool_downs = hands_back();
        self.first.waker.take();
        let rate_on = crate::module_parameters::poll_start_rate.value() != 0;
        let (entries, lanes) = inner.entries_and_lanes();
        let lanes = &lanes[..wanted];
        for e in entries {
            if e.polled && !e.vq.polled.load(Relaxed) {
                // vhost took it back (quiesce): settle the books.
                stop(e, StopReason::Quiesce);
            }
            if e.polled || !e.vq.want_poll.swap(false, Relaxed) || !rate_on {
                continue;
            }
            let loads = lanes.iter().map(|l| {
                l.as_ref().map_or(
                    // Not running (it could not be started): no room.
                    ThreadLoad {
                        polled: 0,
                        contended: true,
                    },
                    |l| l.load(),
                )
            });
            let lane = place(loads).and_then(|i| lanes[i].as_ref());
            let cooling = cool_downs && !e.cool.allows(now);
            match lane {
                Some(lane) if !cooling => {
                    if start(e, lane) && lane.index != 0 {
                        lane.waker.wake();
                    }
                }
                _ => {
                    // Its kicks ask again once the cool-down ends, or
                    // after a contention window.
                    let until = match e.cool.until() {
                        Some(until) if cooling => until,
                        _ => now.plus(Contention::JIFFIES),
                    };
                    e.vq.gate.defer_until(until);
                    e.vq.counters.refused.fetch_add(1, Relaxed);
                    self.first.counters.refused.fetch_add(1, Relaxed);
                }
            }
        }
    }

    /// Returns `lane`'s polled vqs to notification mode, for `why`.
    fn hand_back(&self, lane: &Lane, why: StopReason) {
        let mut inner = self.inner.lock();
        for e in inner.iter_mut() {
            if core::ptr::eq(&*e.lane, lane) {
                stop(e, why);
            }
        }
    }

    /// Starts and stops polling threads so that `wanted` run, with
    /// `helpers[i]` running thread `i` (`helpers[0]`, the first thread's
    /// place, stays empty). A thread stopped first returns its vqs to
    /// notification mode. The first thread calls it, holding no lock.
    fn resize(self: &Arc<Self>, helpers: &mut [Option<KThread>; THREADS_MAX], wanted: usize) {
        for i in (wanted.max(1)..THREADS_MAX).rev() {
            if let Some(thread) = helpers[i].take() {
                // Waits for it to hand its vqs back and return.
                thread.stop();
                self.inner.lock().set_lane(i, None);
            }
        }
        for (i, place) in helpers.iter_mut().enumerate().take(wanted).skip(1) {
            if place.is_some() {
                continue;
            }
            match self.spawn(i) {
                Ok(thread) => *place = Some(thread),
                Err(e) => {
                    // Its place stays empty, and gets no vq, until
                    // `poll_threads` is written again.
                    pr_warn!("cannot start polling thread {}: {:?}\n", i, e);
                    break;
                }
            }
        }
    }

    /// Starts polling thread `i`, with a lane of its own in the table.
    fn spawn(self: &Arc<Self>, i: usize) -> Result<KThread> {
        let handoff = Handoff::new()?;
        let (shared, thread_handoff) = (self.clone(), handoff.clone());
        let thread = KThread::run(NAMES[i], move || {
            if let Some(lane) = thread_handoff.wait() {
                run(&shared, &lane, None);
            }
        })?;
        // On error, dropping `thread` stops it before it got a lane.
        let lane = Lane::new(i, thread.task().into())?;
        self.inner.lock().set_lane(i, Some(lane.clone()));
        handoff.give(lane.clone());
        lane.waker.wake();
        Ok(thread)
    }
}

/// Whether polled vqs that do not pay go back to notification mode: not
/// with `poll_min_gain` 0, which keeps every polled vq (and refuses no
/// start, so no vq's gate is closed).
pub(crate) fn hands_back() -> bool {
    crate::module_parameters::poll_min_gain.value() != 0
}

/// How many polling threads `poll_threads` asks for now.
fn wanted() -> usize {
    threads_wanted(crate::module_parameters::poll_threads.value())
}

/// The loop of polling thread `lane`. The first thread passes `helpers`,
/// the others' places: it serves the requests and keeps `wanted()`
/// threads running, and stops them all before it returns.
fn run(
    shared: &Arc<Shared>,
    lane: &Arc<Lane>,
    mut helpers: Option<&mut [Option<KThread>; THREADS_MAX]>,
) {
    let c = &lane.counters;
    let pid = current!().pid();
    c.pid.store(pid.into(), Relaxed);
    c.since_ns.store(Ktime::ktime_get().to_ns(), Relaxed);
    let mut mm = MmCursor::new(c);
    let mut rr = RoundRobin::new();
    let mut contention = Contention::new();
    // The number of threads the first one last started or stopped for.
    let mut running = 1;
    while !kthread::should_stop() {
        let wanted = wanted();
        if let Some(helpers) = helpers.as_deref_mut() {
            if wanted != running {
                shared.resize(helpers, wanted);
                running = wanted;
            }
        } else if lane.index >= wanted {
            // Fewer threads wanted: this one's vqs go back, and the first
            // thread stops it when it next wakes.
            shared.hand_back(lane, StopReason::Off);
        }
        let polled = {
            let mut inner = shared.inner.lock();
            if helpers.is_some() {
                shared.serve(&mut inner, wanted);
            } else {
                lane.waker.take();
            }
            c.polled_vqs.load(Relaxed)
        };
        if polled == 0 {
            contention.rested();
            lane.contended.store(false, Relaxed);
            // Nothing to poll: sleep until a kick reaches the rate or vhost
            // asks for something (the first thread), or a vq is placed on
            // this thread (the others).
            mm.leave();
            c.period(true);
            kthread::sleep_unless(|| lane.waker.is_pending());
            c.period(false);
            continue;
        }
        // One pass: each vq this thread polls once, one handler run each.
        let (mut found, mut paid) = (false, false);
        loop {
            if lane.waker.is_pending() || kthread::should_stop() {
                break;
            }
            let mut inner = shared.inner.lock();
            let Some(i) = rr.next(inner.slots()) else {
                break;
            };
            if let Some(e) = inner.get_mut(i) {
                if e.polled && core::ptr::eq(&*e.lane, &**lane) {
                    let v = visit(e, &mut mm);
                    found |= v.work;
                    paid |= v.queued;
                }
            }
            drop(inner);
            kthread::cond_resched();
        }
        c.passes.fetch_add(1, Relaxed);
        // Others waiting for this CPU, and a pass that queued nothing:
        // step aside for a while (see `StepAside`).
        let contended = !kthread::single_task_running();
        let pause = StepAside::after_pass(paid, found, contended);
        contention.after_pass(crate::clock::now(), contended);
        lane.contended.store(contention.contended(), Relaxed);
        if contention.contended() && hands_back() {
            shared.hand_back(lane, StopReason::Gain);
        }
        match pause {
            Pause::None => {}
            Pause::Busy => crate::clock::pause(),
            Pause::Yield => {
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
    if let Some(helpers) = helpers {
        // The others first: each returns its vqs as it stops.
        shared.resize(helpers, 0);
    }
    shared.hand_back(lane, StopReason::Off);
    mm.leave();
    c.period(true);
}

/// How a polling thread gets what needs its task (its waker's), and so
/// is made after the thread.
#[pin_data]
pub(crate) struct Handoff<T> {
    #[pin]
    value: Mutex<Option<T>>,
    given: AtomicBool,
}

impl<T: Send> Handoff<T> {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                value <- new_mutex!(None, "vhost_poll::handoff"),
                given: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )
    }

    /// Gives the thread `value`; the caller then wakes it.
    pub(crate) fn give(&self, value: T) {
        *self.value.lock() = Some(value);
        // Release: the store above before the flag the thread checks.
        self.given.store(true, Release);
    }

    /// Waits for the value; `None` if the thread is stopped before.
    fn wait(&self) -> Option<T> {
        loop {
            // Acquire: pairs with `give`'s `Release` store.
            if self.given.load(Acquire) {
                if let Some(value) = self.value.lock().take() {
                    return Some(value);
                }
            }
            if kthread::should_stop() {
                return None;
            }
            kthread::sleep_unless(|| self.given.load(Acquire));
        }
    }
}

/// The first thread's body: waits for its `Shared`, then runs, starting
/// and stopping the others; returns at once if stopped before it got one.
pub(crate) fn run_first(handoff: Arc<Handoff<Arc<Shared>>>) {
    if let Some(shared) = handoff.wait() {
        let mut helpers: [Option<KThread>; THREADS_MAX] = core::array::from_fn(|_| None);
        let first = shared.first.clone();
        run(&shared, &first, Some(&mut helpers));
    }
}
