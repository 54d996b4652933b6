// SPDX-License-Identifier: GPL-2.0

//! The shared worker: one kernel thread, `vhost-poll`, that polls the
//! virtqueues of all devices in poll mode, round robin.
//!
//! All changes of mode happen in the worker, in the owner's address space:
//! entering poll mode when a kick reached the rate, leaving it when idle,
//! and handing a vq back when vhost asks (quiesce, detach). Other threads
//! post requests and wait for the worker to serve them.
//!
//! Locking: `inner` is held by the worker for each step (serving requests,
//! one visit of one vq) and released between steps. A visit runs the vq's
//! handler, which takes the vq's mutex: the order is `inner`, then vq
//! mutex. vhost calls quiesce and detach without the vq mutex held.

use crate::policy::{Idle, RoundRobin};
use crate::vq::{VqCounters, VqState};
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize};
use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    kthread::{self, MmUse},
    new_condvar, new_mutex,
    prelude::*,
    sync::{Arc, ArcBorrow, CondVar, Mutex},
    task::Task,
    time::{jiffies, Ktime},
    vhost_poller::{Poller, Vq},
};

/// How long a pass that found no work pauses: a busy wait on hardware, a
/// short sleep on UML, where under `time-travel=inf-cpu` it is what moves
/// simulated time, and so `jiffies`, while the worker polls.
const EMPTY_PASS_DELAY_NS: usize = 2_000;

/// The current jiffy, as the policy counts time.
pub(crate) fn now() -> usize {
    jiffies() as usize
}

/// The worker's bookkeeping for one virtqueue.
struct Entry {
    vq: Arc<VqState>,
    /// In poll mode (the worker's view; `vq.polled` mirrors it for kicks).
    polled: bool,
    idle: Idle,
    /// vhost asked for the vq back (quiesce) or for it to be forgotten.
    quiesce: bool,
    detach: bool,
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
    /// Signalled when the worker has served a request.
    #[pin]
    served: CondVar,
    /// A kick reached the rate, or a request waits: the worker has work.
    pending: AtomicBool,
    /// The worker thread, set once before vhost can call us.
    task: AtomicPtr<Task>,
    /// The address space the worker uses, if any (as an address).
    worker_mm: AtomicUsize,
    pub(crate) counters: WorkerCounters,
}

impl Shared {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                inner <- new_mutex!(Inner { entries: KVec::new(), next_dev: 0 }, "vhost_poll::inner"),
                served <- new_condvar!("vhost_poll::served"),
                pending: AtomicBool::new(false),
                task: AtomicPtr::new(core::ptr::null_mut()),
                worker_mm: AtomicUsize::new(0),
                counters: WorkerCounters::default(),
            }),
            GFP_KERNEL,
        )
    }

    /// Records the worker thread, which must outlive the registration with
    /// vhost.
    pub(crate) fn set_task(&self, task: &Task) {
        self.task.store((task as *const Task).cast_mut(), Release);
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
        let task = self.task.load(Acquire);
        if !task.is_null() {
            // `wake_up_process()` orders the swap above before its read of
            // the task's state (a full barrier), as `set_current_state()` in
            // `sleep_unless` orders the worker's state before its read of
            // `pending`: the worker sees `pending` or is woken.
            // SAFETY: `set_task` stored a task that outlives the vhost
            // registration, and only vhost's callbacks, which end with the
            // registration, and the worker itself call `wake`.
            unsafe { (*task).wake_up() };
        }
    }

    /// Calls `f` for each virtqueue, in table order, under the lock.
    pub(crate) fn for_each_vq(&self, mut f: impl FnMut(&VqState, bool)) {
        let inner = self.inner.lock();
        for e in inner.entries.as_slice().iter().flatten() {
            f(&e.vq, e.polled);
        }
    }

    /// Has the worker serve the request `mark` puts on the entry of `vq`,
    /// and waits for it; `fast` handles it here when it needs neither the
    /// worker nor the address space.
    fn request(
        &self,
        vq: &VqState,
        mark: impl Fn(&mut Entry),
        done: impl Fn(&Entry) -> bool,
        fast: impl FnOnce(&mut Inner, usize) -> bool,
    ) {
        let mut inner = self.inner.lock();
        let Some(i) = inner.find(vq) else { return };
        if fast(&mut inner, i) {
            return;
        }
        if let Some(e) = inner.entries.as_mut_slice()[i].as_mut() {
            mark(e);
        }
        self.wake();
        loop {
            match inner.find(vq) {
                Some(i) => match inner.entries.as_slice()[i].as_ref() {
                    Some(e) if !done(e) => self.served.wait(&mut inner),
                    _ => return,
                },
                None => return,
            }
        }
    }
}

impl Poller for Shared {
    type Data = VqState;

    fn attach(this: ArcBorrow<'_, Self>, vq: Vq) -> Option<Arc<VqState>> {
        let mut inner = this.inner.lock();
        // SAFETY: vhost is attaching `vq`: it is alive.
        let (device, index) = unsafe { (vq.device(), vq.index()) };
        let dev = inner
            .entries
            .as_slice()
            .iter()
            .flatten()
            // SAFETY: Entries in the table are attached: detach removes
            // them under `inner`, which we hold.
            .find(|e| unsafe { e.vq.vq.device() } == device)
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
            quiesce: false,
            detach: false,
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
        let shared = &data.shared;
        shared.request(
            &data,
            |e| e.quiesce = true,
            |e| !e.quiesce,
            |inner, i| {
                let Some(e) = inner.entries.as_mut_slice()[i].as_mut() else {
                    return true;
                };
                // A vq in notification mode is already as vhost wants it;
                // it must not enter poll mode from a kick counted before.
                data.want_poll.store(false, Relaxed);
                !e.polled
            },
        );
    }

    fn detach(data: ArcBorrow<'_, VqState>) {
        let shared = &data.shared;
        shared.request(
            &data,
            |e| e.detach = true,
            |_| false,
            |inner, i| {
                let slot = &mut inner.entries.as_mut_slice()[i];
                let polled = slot.as_ref().is_some_and(|e| e.polled);
                // SAFETY: vhost is detaching the vq: it is still alive.
                let mm = unsafe { data.vq.mm() }.map_or(0, |mm| mm.as_ptr() as usize);
                // The worker must hand the vq back, or stop using the
                // address space vhost is about to release.
                if polled || (mm != 0 && shared.worker_mm.load(Acquire) == mm) {
                    return false;
                }
                *slot = None;
                true
            },
        );
    }
}

/// The address space the worker is in, switched only when the next vq
/// needs another one.
struct MmCursor<'a> {
    shared: &'a Shared,
    current: Option<MmUse<'static>>,
}

impl<'a> MmCursor<'a> {
    fn new(shared: &'a Shared) -> Self {
        Self {
            shared,
            current: None,
        }
    }

    /// Enters the address space of `vq`, if it has one.
    ///
    /// # Safety
    ///
    /// `vq` is attached, and the worker leaves its address space (`leave`)
    /// before acknowledging the vq's detach.
    unsafe fn enter(&mut self, vq: &VqState) -> Option<&MmUse<'static>> {
        // SAFETY: Per the function's safety requirements, `vq.vq` is alive.
        let mm = unsafe { vq.vq.mm() }?;
        if self.current.as_ref().is_some_and(|u| u.mm() == mm) {
            return self.current.as_ref();
        }
        self.leave();
        self.shared.counters.mm_switches.fetch_add(1, Relaxed);
        self.shared.worker_mm.store(mm.as_ptr() as usize, Release);
        // SAFETY: The worker is a kernel thread using no address space
        // (`leave` above); vhost holds a user reference on `mm` until the
        // vq is detached, and per this function's safety requirements the
        // worker has left `mm` before then.
        self.current = Some(unsafe { MmUse::new(mm) });
        self.current.as_ref()
    }

    fn leave(&mut self) {
        self.current = None;
        self.shared.worker_mm.store(0, Release);
    }
}

/// Puts `e` in poll mode, if its ring is running and the rate is on.
fn start(shared: &Shared, e: &mut Entry, mm: &mut MmCursor<'_>) {
    // SAFETY: `e` is in the table, so attached; the worker leaves the
    // address space before acknowledging a detach (`serve`).
    let Some(mmu) = (unsafe { mm.enter(&e.vq) }) else {
        return;
    };
    // SAFETY: As above; `mmu` is the vq's address space.
    if unsafe { e.vq.vq.start(mmu) }.is_err() {
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

/// Returns `e` to notification mode, and runs its handler once there.
/// With `keep_if_racing`, a vq whose driver made buffers available while
/// notifications were being turned back on stays in poll mode instead
/// (nobody would kick for them), if a handler run takes some of them now.
fn stop(shared: &Shared, e: &mut Entry, mm: &mut MmCursor<'_>, keep_if_racing: bool) {
    if !e.polled {
        return;
    }
    // `vq.polled` stays set until the vq leaves poll mode for good: a kick
    // meanwhile (a driver may always kick) is a kick of a polled vq and
    // does not count toward the next start. Cleared here, such a kick
    // could set `want_poll`, which a kept vq would carry to its next real
    // exit and start polling again at once, with no new kick.
    // SAFETY: As in `start`. `None` when the owner, and the ring, are gone.
    let mmu = unsafe { mm.enter(&e.vq) };
    // SAFETY: As in `start`.
    let raced = mmu.is_some_and(|mmu| unsafe { e.vq.vq.stop(mmu) });
    if let (true, true, Some(mmu)) = (raced, keep_if_racing, mmu) {
        // SAFETY: As in `start`.
        if unsafe { e.vq.vq.start(mmu) }.is_ok() {
            // Polling goes on only for buffers a handler takes now. A ring
            // whose buffers cannot be taken (an invalid head, an index a
            // hostile driver moves back and forth) would otherwise be kept
            // at every stop, and the thread would never sleep.
            // SAFETY: As in `start`.
            if unsafe { e.vq.vq.run(mmu) } > 0 {
                e.idle.work(now());
                return;
            }
            // SAFETY: As in `start`. Whatever it reports, the run below
            // handles it, in notification mode, as upstream would: once,
            // then on the next kick.
            let _ = unsafe { e.vq.vq.stop(mmu) };
        }
    }
    // Kicks from here on are notifications, and count toward a start.
    e.vq.polled.store(false, Relaxed);
    // One handler run in notification mode, whatever the stop reported. It
    // takes buffers that slipped in, or that a run stopped at the device's
    // weight left (a polled ring is not requeued at the weight), and it
    // re-arms what such a run left disarmed: vhost-net's receive socket
    // wake-up, which only a handler that drains the socket turns back on.
    // On an empty ring it does nothing, at the cost of a mutex.
    if let Some(mmu) = mmu {
        // SAFETY: As in `start`.
        unsafe { e.vq.vq.run(mmu) };
    }
    e.polled = false;
    e.vq.counters.exits.fetch_add(1, Relaxed);
    shared.counters.polled_vqs.fetch_sub(1, Relaxed);
}

/// Visits polled `e` once: runs its handler if its ring has buffers,
/// and returns it to notification mode when idle long enough or when
/// polling was switched off. Returns whether it found work.
fn visit(shared: &Shared, e: &mut Entry, mm: &mut MmCursor<'_>) -> bool {
    if crate::module_parameters::poll_start_rate.get() == 0 {
        stop(shared, e, mm, false);
        return false;
    }
    // SAFETY: As in `start`.
    let Some(mmu) = (unsafe { mm.enter(&e.vq) }) else {
        return false;
    };
    let c = &e.vq.counters;
    // SAFETY: As in `start`.
    let found = match unsafe { e.vq.vq.has_work(mmu) } {
        // SAFETY: As in `start`.
        Ok(true) => (unsafe { e.vq.vq.run(mmu) }) > 0,
        Ok(false) => false,
        // Its mutex is held: someone else (its own worker after a stray
        // kick, an ioctl, a handler blocked in a fault) has the ring. That
        // is no work the poller found: an empty visit, so that the pass
        // pauses and the idle clock runs on. Once idle, the vq leaves poll
        // mode at the next visit that gets the mutex; this one does not
        // wait for it.
        Err(err) if err == EBUSY => {
            c.empty_polls.fetch_add(1, Relaxed);
            e.idle.empty();
            return false;
        }
        // Its owner was killed (`ENODEV`: as upstream, none of its handlers
        // runs again, and vhost neither starts it again nor passes its
        // kicks on), or its ring cannot be read (an index moved past the
        // ring, memory gone: vhost leaves such a ring until the next kick).
        // Hand it back rather than meet the error at every visit.
        Err(_) => {
            stop(shared, e, mm, false);
            return false;
        }
    };
    if found {
        c.poll_work.fetch_add(1, Relaxed);
        e.idle.work(now());
    } else {
        c.empty_polls.fetch_add(1, Relaxed);
        e.idle.empty();
        if e.idle
            .stops(now(), crate::module_parameters::poll_stop_idle.get())
        {
            stop(shared, e, mm, true);
        }
    }
    found
}

impl Shared {
    /// Serves the requests of vhost and starts polling the vqs whose kicks
    /// reached the rate. Called with `inner` held.
    fn serve(&self, inner: &mut Inner, mm: &mut MmCursor<'_>) {
        // Acquire, and a read-modify-write, pairing with the `Release` swap
        // in `wake`: see there. It must come before the reads of
        // `want_poll` below, which `Acquire` guarantees. The relaxed store
        // this replaces could be ordered after those reads on a weakly
        // ordered CPU (store buffering): a kick could set `want_poll` after
        // the read and `pending` before the store, which then cleared it,
        // and the worker slept with the request pending; later kicks see
        // `want_poll` set and do not wake it.
        self.pending.swap(false, Acquire);
        let rate_on = crate::module_parameters::poll_start_rate.get() != 0;
        let mut served = false;
        for slot in inner.entries.as_mut_slice() {
            let Some(e) = slot else { continue };
            if e.quiesce || e.detach {
                stop(self, e, mm, false);
                e.vq.want_poll.store(false, Relaxed);
                e.quiesce = false;
                served = true;
                if e.detach {
                    // vhost may release the address space once we answer.
                    mm.leave();
                    *slot = None;
                }
            } else if !e.polled && e.vq.want_poll.swap(false, Relaxed) && rate_on {
                start(self, e, mm);
            }
        }
        if served {
            self.served.notify_all();
        }
    }

    /// Returns every polled vq to notification mode (the module unloads).
    fn stop_all(&self, mm: &mut MmCursor<'_>) {
        let mut inner = self.inner.lock();
        for e in inner.entries.as_mut_slice().iter_mut().flatten() {
            stop(self, e, mm, false);
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

/// The worker thread's body.
pub(crate) fn run(shared: Arc<Shared>) {
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
            shared.serve(&mut inner, &mut mm);
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
            kthread::pause_ns(EMPTY_PASS_DELAY_NS);
        }
        kthread::cond_resched();
    }
    shared.stop_all(&mut mm);
    shared.period(true);
}
