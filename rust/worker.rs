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

use crate::policy::{Idle, RoundRobin};
use crate::vq::{VqCounters, VqState};
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64};
use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    kthread::{self, MmUse},
    mm::MmWithUser,
    new_mutex,
    prelude::*,
    sync::{Arc, ArcBorrow, Mutex},
    task::Task,
    time::{delay, jiffies, Ktime},
    types::ARef,
    vhost_poller::{Poller, StopReason, Vq},
};

/// How long a pass that found no work pauses, in microseconds.
const EMPTY_PASS_PAUSE_US: u32 = 2;

/// Lets a pass's pause go by. A busy wait on hardware: a sleep would cost
/// a wake-up, and the thread polls to be there at once. A sleep on UML:
/// with simulated time (`time-travel=inf-cpu`) a busy wait charges the
/// time to this thread, which the scheduler then keeps off the CPU for as
/// long as tasks that ran in no simulated time stay runnable, while a sleep
/// moves the clock, and so `jiffies`, charged to no task. The worker is a
/// kernel thread outside atomic context: it may sleep.
fn pause() {
    if cfg!(CONFIG_UML) {
        delay::usleep_idle(EMPTY_PASS_PAUSE_US);
    } else {
        delay::ndelay(EMPTY_PASS_PAUSE_US * 1000);
    }
}

/// The current jiffy, as the policy counts time.
pub(crate) fn now() -> usize {
    jiffies().raw() as usize
}

/// The worker's bookkeeping for one virtqueue.
struct Entry {
    vq: Arc<VqState>,
    /// In poll mode (the worker's view; `vq.polled` mirrors it for kicks).
    polled: bool,
    idle: Idle,
}

struct Inner {
    /// Slots of the virtqueues vhost has shown us; `None` once detached.
    entries: KVec<Option<Entry>>,
    /// Next device number for the counters.
    next_dev: u32,
}

impl Inner {
    fn find(&self, vq: &VqState) -> Option<usize> {
        self.entries
            .as_slice()
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| core::ptr::eq(&*e.vq, vq)))
    }
}

/// Counters of the worker, as `/sys/kernel/debug/vhost_poll/worker` shows
/// them.
#[derive(Default)]
pub(crate) struct WorkerCounters {
    pub(crate) pid: AtomicI64,
    pub(crate) passes: AtomicU64,
    pub(crate) busy_ns: AtomicU64,
    pub(crate) idle_ns: AtomicU64,
    pub(crate) mm_switches: AtomicU64,
    pub(crate) polled_vqs: AtomicU32,
    /// When the current busy or idle period began, and which it is.
    pub(crate) since_ns: AtomicI64,
    pub(crate) asleep: AtomicBool,
}

/// What the worker, the kick hook, vhost's callbacks and the counters
/// share.
#[pin_data]
pub(crate) struct Shared {
    #[pin]
    inner: Mutex<Inner>,
    /// A kick reached the rate, or a request waits: the worker has work.
    pending: AtomicBool,
    /// The worker thread, to wake.
    task: ARef<Task>,
    pub(crate) counters: WorkerCounters,
}

impl Shared {
    /// The state shared with worker thread `task`, which `Handoff` then
    /// gives it.
    pub(crate) fn new(task: ARef<Task>) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                inner <- new_mutex!(
                    Inner { entries: KVec::new(), next_dev: 0 },
                    "vhost_poll::inner"
                ),
                pending: AtomicBool::new(false),
                task,
                counters: WorkerCounters::default(),
            }),
            GFP_KERNEL,
        )
    }

    /// Wakes the worker, for the requests the caller made before (a
    /// `want_poll` set, a mark on an entry). Any context.
    pub(crate) fn wake(&self) {
        // Release, and a read-modify-write, pairing with the `Acquire` swap
        // in `serve`. That swap reads the last value of `pending`: if it
        // reads ours, or that of an RMW after ours (RMWs continue a release
        // sequence; a plain store would end it), our requests are visible
        // to the worker's loads that follow it; if it comes before ours in
        // `pending`'s order, `pending` stays set and the worker serves
        // again before it sleeps. A plain store here would let the worker's
        // swap read another waker's `true` and miss our request for good.
        self.pending.swap(true, Release);
        // `wake_up_process()` orders the swap above before its read of the
        // task's state (a full barrier), as `set_current_state()` in
        // `sleep_unless` orders the worker's state before its read of
        // `pending`: the worker sees `pending` or is woken.
        self.task.wake_up();
    }

    /// Calls `f` for each virtqueue, in table order, under the lock, with
    /// whether it is polled (not if vhost took it back meanwhile).
    pub(crate) fn for_each_vq(&self, mut f: impl FnMut(&VqState, bool)) {
        let inner = self.inner.lock();
        for e in inner.entries.as_slice().iter().flatten() {
            f(&e.vq, e.polled && e.vq.polled.load(Relaxed));
        }
    }
}

impl Poller for Shared {
    type Data = VqState;

    fn attach(this: ArcBorrow<'_, Self>, vq: Vq) -> Option<Arc<VqState>> {
        let mut inner = this.inner.lock();
        // vhost is attaching `vq`: it is alive.
        let (device, index) = vq.access().map(|vq| (vq.device(), vq.index()))?;
        let dev = inner
            .entries
            .as_slice()
            .iter()
            .flatten()
            .find(|e| e.vq.vq.access().is_some_and(|vq| vq.device() == device))
            .map(|e| e.vq.dev)
            .unwrap_or_else(|| {
                // A number for the counters only: after 2^32 devices it
                // wraps, and two devices may then share one.
                inner.next_dev = inner.next_dev.wrapping_add(1);
                inner.next_dev
            });
        let state = Arc::new(
            VqState {
                vq,
                dev,
                index,
                rate: crate::policy::RateTracker::new(),
                polled: AtomicBool::new(false),
                want_poll: AtomicBool::new(false),
                counters: VqCounters::default(),
                shared: this.into(),
            },
            GFP_KERNEL,
        )
        .ok()?;
        let entry = Entry {
            vq: state.clone(),
            polled: false,
            idle: Idle::new(now()),
        };
        // Reuse a free slot before growing the table.
        if let Some(slot) = inner
            .entries
            .as_mut_slice()
            .iter_mut()
            .find(|e| e.is_none())
        {
            *slot = Some(entry);
        } else if inner.entries.push(Some(entry), GFP_KERNEL).is_err() {
            pr_warn!(
                "out of memory: vq {} of device {} will not be polled\n",
                index,
                dev
            );
            return None;
        }
        Some(state)
    }

    fn kick(data: ArcBorrow<'_, VqState>) {
        data.kick();
    }

    fn quiesce(data: ArcBorrow<'_, VqState>) {
        // vhost took the vq back already: from now on its kicks are
        // notifications, and count toward a start; those counted before
        // must not start polling again. The worker settles its own books
        // at its next step (`serve`, `visit`).
        data.polled.store(false, Relaxed);
        data.want_poll.store(false, Relaxed);
    }

    fn detach(data: ArcBorrow<'_, VqState>) {
        let shared = &data.shared;
        let mut inner = shared.inner.lock();
        let Some(i) = inner.find(&data) else { return };
        if let Some(slot) = inner.entries.as_mut_slice().get_mut(i) {
            if let Some(e) = slot.as_mut() {
                // vhost takes the vq out of poll mode itself; this keeps
                // the counters right.
                stop(shared, e, StopReason::Detach);
            }
            // The worker may still be in the owner's address space: it
            // holds a user reference of its own, so vhost may let go of
            // its own now, and the worker leaves at its next switch or
            // sleep.
            *slot = None;
        }
    }
}

/// The address space the worker is in, switched only when the next vq
/// needs another one. It holds a user reference on it.
struct MmCursor<'a> {
    shared: &'a Shared,
    current: Option<MmUse>,
}

impl<'a> MmCursor<'a> {
    fn new(shared: &'a Shared) -> Self {
        Self {
            shared,
            current: None,
        }
    }

    /// Enters address space `mm` (the worker's own reference on it), or
    /// stays in it. May sleep (a reference dropped may be the last): call
    /// it holding no vq guard.
    fn enter(&mut self, mm: ARef<MmWithUser>) -> Option<&MmUse> {
        if !self
            .current
            .as_ref()
            .is_some_and(|u| core::ptr::eq(u.mm(), &*mm))
        {
            self.leave();
            self.shared.counters.mm_switches.fetch_add(1, Relaxed);
            self.current = MmUse::new(mm).ok();
        }
        self.current.as_ref()
    }

    /// Leaves the address space. May sleep, as `enter`.
    fn leave(&mut self) {
        self.current = None;
    }
}

/// Puts `e` in poll mode: its own worker turns notifications off.
fn start(shared: &Shared, e: &mut Entry) {
    // Detached meanwhile, or no worker: leave it alone.
    if !e.vq.vq.access().is_some_and(|vq| vq.start().is_ok()) {
        return;
    }
    e.polled = true;
    e.vq.polled.store(true, Relaxed);
    // Kicks that reached the rate while polling was being started asked
    // for what just happened; kicks from now on do not count. Left set, the
    // request would start polling again right after the next exit.
    e.vq.want_poll.store(false, Relaxed);
    e.idle = Idle::new(now());
    e.vq.counters.enters.fetch_add(1, Relaxed);
    shared.counters.polled_vqs.fetch_add(1, Relaxed);
}

/// Returns `e` to notification mode. Its own worker turns notifications
/// back on and runs its handler once, for what came in while they were off
/// (the classic race) and what a run left; vhost does the same when it
/// takes a vq back (quiesce, detach), and then this only settles the books.
fn stop(shared: &Shared, e: &mut Entry, why: StopReason) {
    if !e.polled {
        return;
    }
    // Detached meanwhile: vhost took it out of poll mode itself.
    if let Some(vq) = e.vq.vq.access() {
        vq.stop(why);
    }
    // Kicks from here on are notifications, and count toward a start.
    // Until now they were kicks of a polled vq, which count for nothing.
    e.vq.polled.store(false, Relaxed);
    e.polled = false;
    e.vq.counters.exits.fetch_add(1, Relaxed);
    shared.counters.polled_vqs.fetch_sub(1, Relaxed);
}

/// Visits polled `e` once: queues its handler if its ring has buffers,
/// and returns it to notification mode when idle long enough, when
/// polling was switched off, or when vhost took it back. Returns whether
/// its handlers took buffers since the last visit.
fn visit(shared: &Shared, e: &mut Entry, mm: &mut MmCursor<'_>) -> bool {
    // Switched off, or taken back by vhost (quiesce).
    if crate::module_parameters::poll_start_rate.value() == 0 {
        stop(shared, e, StopReason::Off);
        return false;
    }
    if !e.vq.polled.load(Relaxed) {
        stop(shared, e, StopReason::Quiesce);
        return false;
    }
    // The owner's address space, entered without a guard held (it may
    // sleep); then the ring, under a guard. Detached in between: gone.
    let owner_mm = e.vq.vq.access().and_then(|vq| vq.mm());
    let Some(mmu) = owner_mm.and_then(|owner_mm| mm.enter(owner_mm)) else {
        // No owner, so no ring: nothing to poll.
        stop(shared, e, StopReason::Error);
        return false;
    };
    let c = &e.vq.counters;
    let polled = e.vq.vq.access().map(|vq| vq.poll(mmu));
    let taken = match polled.unwrap_or(Err(ENODEV)) {
        // Work is buffers taken, not buffers seen: a hostile driver can
        // show buffers nobody can take (an invalid head) at every visit.
        // A vq that was held (its handler running, an ioctl, a handler
        // blocked in a fault) counts by what its handlers took too: a busy
        // ring keeps its handler, and so its mutex, nearly all the time,
        // while one held by a blocked ioctl takes nothing, so the pass
        // pauses and the vq leaves poll mode once idle.
        Ok(polled) => polled.taken,
        // vhost took the vq back (quiesce), its owner was killed (vhost
        // runs none of its handlers again), or its ring cannot be read now
        // without a fault: hand it back. A handler run in its own worker
        // meets the fault or the error, once, as after a kick.
        Err(_) => {
            stop(shared, e, StopReason::Error);
            return false;
        }
    };
    if taken > 0 {
        c.poll_work.fetch_add(1, Relaxed);
        e.idle.work(now());
        return true;
    }
    c.empty_polls.fetch_add(1, Relaxed);
    e.idle.empty();
    if e.idle
        .stops(now(), crate::module_parameters::poll_stop_idle.value())
    {
        stop(shared, e, StopReason::Idle);
    }
    false
}

impl Shared {
    /// Serves the requests of vhost and starts polling the vqs whose kicks
    /// reached the rate. Called with `inner` held.
    fn serve(&self, inner: &mut Inner) {
        // Acquire, and a read-modify-write, pairing with the `Release` swap
        // in `wake`: see there. It must come before the reads of
        // `want_poll` below, which `Acquire` guarantees. The relaxed store
        // this replaces could be ordered after those reads on a weakly
        // ordered CPU (store buffering): a kick could set `want_poll` after
        // the read and `pending` before the store, which then cleared it,
        // and the worker slept with the request pending; later kicks see
        // `want_poll` set and do not wake it.
        self.pending.swap(false, Acquire);
        let rate_on = crate::module_parameters::poll_start_rate.value() != 0;
        for e in inner.entries.as_mut_slice().iter_mut().flatten() {
            if e.polled && !e.vq.polled.load(Relaxed) {
                // vhost took it back (quiesce): settle the books.
                stop(self, e, StopReason::Quiesce);
            }
            if !e.polled && e.vq.want_poll.swap(false, Relaxed) && rate_on {
                start(self, e);
            }
        }
    }

    /// Returns every polled vq to notification mode (the module unloads).
    fn stop_all(&self, mm: &mut MmCursor<'_>) {
        {
            let mut inner = self.inner.lock();
            for e in inner.entries.as_mut_slice().iter_mut().flatten() {
                stop(self, e, StopReason::Off);
            }
        }
        mm.leave();
    }

    fn period(&self, asleep: bool) {
        let now = Ktime::ktime_get().to_ns();
        let c = &self.counters;
        let since = c.since_ns.swap(now, Relaxed);
        let spent = u64::try_from(now - since).unwrap_or(0);
        if c.asleep.swap(asleep, Relaxed) {
            c.idle_ns.fetch_add(spent, Relaxed);
        } else {
            c.busy_ns.fetch_add(spent, Relaxed);
        }
    }
}

/// The worker's loop.
fn run(shared: Arc<Shared>) {
    let pid = current!().pid();
    shared.counters.pid.store(pid.into(), Relaxed);
    shared
        .counters
        .since_ns
        .store(Ktime::ktime_get().to_ns(), Relaxed);
    let mut mm = MmCursor::new(&shared);
    let mut rr = RoundRobin::new();
    while !kthread::should_stop() {
        let polled = {
            let mut inner = shared.inner.lock();
            shared.serve(&mut inner);
            shared.counters.polled_vqs.load(Relaxed)
        };
        if polled == 0 {
            // Nothing to poll: sleep until a kick reaches the rate or vhost
            // asks for something.
            mm.leave();
            shared.period(true);
            kthread::sleep_unless(|| shared.pending.load(Acquire));
            shared.period(false);
            continue;
        }
        // One pass: each polled vq once, one handler run each.
        let mut found = false;
        loop {
            if shared.pending.load(Acquire) || kthread::should_stop() {
                break;
            }
            let mut inner = shared.inner.lock();
            let Some(i) = rr.next(inner.entries.len()) else {
                break;
            };
            if let Some(e) = inner.entries.as_mut_slice()[i].as_mut() {
                if e.polled {
                    found |= visit(&shared, e, &mut mm);
                }
            }
            drop(inner);
            kthread::cond_resched();
        }
        shared.counters.passes.fetch_add(1, Relaxed);
        if !found {
            pause();
        }
        kthread::cond_resched();
    }
    shared.stop_all(&mut mm);
    shared.period(true);
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
        shared.task.wake_up();
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
