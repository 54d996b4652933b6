// SPDX-License-Identifier: GPL-2.0

//! What the threads, the kick hook, vhost's callbacks and the counters
//! share: the table behind one lock, and the first thread.
//!
//! Locking: a thread visits the vqs it polls holding its own ring's lock
//! only (`ring.rs`), one visit at a time, so threads do not wait for each
//! other. `table` is held to serve requests, to move an entry between
//! the table and a ring (start, stop, hand-back), by attach and detach,
//! and for the counters' snapshot. A visit only tries the vq's mutex and
//! reads the ring with page faults off; an address space is entered and
//! left with the lock released (`mm_cursor.rs`). Kicks and quiesce take
//! no lock. A vq is reached only through its handle's guard
//! (`Vq::access`), which vhost's detach revokes: the order is `table`,
//! then one ring's lock, then the guard's lock, then (tried only) the
//! vq's mutex.
//!
//! All three are spinlocks, and nothing under them sleeps or allocates
//! but without sleeping: a holder runs with preemption off until it lets
//! go, a step of one visit, one request's start, one entry's move, or
//! the copy of the counters' rows. So vhost's attach and detach (under
//! the mutex every vhost open and close takes) and the first thread wait
//! for such a step at most, never for a thread that a task of a higher
//! class keeps off its CPU (`preempt=full`): a thread is preempted only
//! between visits, holding nothing. With `PREEMPT_RT` these locks sleep
//! (priority inheritance lifts their holder only to the waiter's own
//! priority), and a real-time task above both can hold them up.

use crate::compat::ARef;
use crate::policy::{Admit, Budget, Exit, Jiffy, Params, Start, ThreadPolicy};
use crate::requests::{Asked, Requests};
use crate::ring::Ring;
use crate::table::{Place, Table};
use crate::thread::Thread;
use crate::vq_state::VqState;
use core::sync::atomic::Ordering::Relaxed;
use kernel::{
    alloc::{
        flags::{GFP_KERNEL, GFP_NOWAIT},
        KVec,
    },
    new_spinlock,
    prelude::*,
    sync::{Arc, SpinLock},
    task::Task,
};

/// Snapshots of the table [`Shared::for_each_vq`] takes before it gives up
/// on one that keeps growing.
const SNAPSHOT_TRIES: u32 = 4;

/// One virtqueue's row of the counters, as the table had it.
struct VqRow {
    vq: Arc<VqState>,
    polled: bool,
    window: u32,
    cool: u32,
    thread: usize,
}

/// The shared state.
///
/// # Invariants
///
/// `first` is `table`'s first thread, and `requests` the queue every
/// `VqState` of the table holds, whose waker is the first thread's: kicks
/// and vhost ask the first thread.
#[pin_data]
pub(crate) struct Shared {
    #[pin]
    pub(crate) table: SpinLock<Table>,
    pub(crate) first: Arc<Ring>,
    pub(crate) requests: Arc<Requests>,
}

impl Shared {
    /// The state shared with the first thread, `task`, which a
    /// `Handoff` then gives it.
    pub(crate) fn new(task: ARef<Task>) -> Result<Arc<Self>> {
        let first = Ring::new(Thread::new(0, task)?)?;
        let requests = Requests::new(first.thread.waker.clone())?;
        // INVARIANT: `first` is the table's first thread, `requests` wakes it.
        Arc::pin_init(
            pin_init!(Self {
                table <- new_spinlock!(Table::new(first.clone()), "vhost_poll::table"),
                first,
                requests,
            }),
            GFP_KERNEL,
        )
    }

    /// Calls `f` for each virtqueue, in table order, with whether it is
    /// polled (not if vhost took it back meanwhile), its idle window, its
    /// cool-down after a hand-back for want of gain, and the thread that
    /// polls it or did last: from a snapshot taken under the lock, which
    /// `f` runs without (a reader of the counters holds up no thread for
    /// more than the copy). `ENOMEM` if there is no room for one; `EAGAIN`
    /// if the table outgrew [`SNAPSHOT_TRIES`] snapshots in a row.
    pub(crate) fn for_each_vq(&self, mut f: impl FnMut(&VqState, bool, u32, u32, usize)) -> Result {
        let mut tries = 0;
        let p = crate::param_snapshot::now();
        let rows = loop {
            tries += 1;
            let len = self.table.lock().slots();
            // Room for some attaches between the two locks: each one
            // that outgrows it costs another allocation.
            let mut rows = KVec::with_capacity(len + len / 4 + 16, GFP_KERNEL)?;
            let table = self.table.lock();
            if table.slots() > rows.capacity() {
                // Grown meanwhile: a bigger snapshot, a few times at most,
                // for devices opened without end would keep this reader
                // allocating for ever.
                if tries >= SNAPSHOT_TRIES {
                    return Err(EAGAIN);
                }
                continue;
            }
            let mut res = Ok(());
            table.for_each_entry(|e| {
                let (window, cool) = e.window_and_cool(&p);
                let row = VqRow {
                    vq: e.vq_arc(),
                    polled: e.is_polled() && e.vq().poll_mode.load(Relaxed),
                    window,
                    cool,
                    thread: e.last_thread(),
                };
                // Within capacity (at most `slots()` entries): no allocation.
                if res.is_ok() {
                    res = rows.push(row, GFP_NOWAIT);
                }
            });
            res?;
            break rows;
        };
        for (i, r) in rows.iter().enumerate() {
            f(&r.vq, r.polled, r.window, r.cool, r.thread);
            // Formatting a thousand rows takes milliseconds: on a kernel
            // without preemption, the thread on this CPU would wait for all.
            if i % 32 == 31 {
                kernel::kthread::cond_resched();
            }
        }
        Ok(())
    }

    /// Calls `f` for each running thread, in order: the threads as the table
    /// had them, which `f` runs without its lock.
    pub(crate) fn for_each_thread(&self, mut f: impl FnMut(&Thread)) {
        let threads = self.table.lock().threads().clone();
        for ring in threads.iter().flatten() {
            f(&ring.thread);
        }
    }

    /// Serves the start requests, each as the policy decides
    /// (`VqPolicy::start_request`) among the threads `p` wants, if a kick or
    /// vhost woke the first thread since it last served: the requests in the
    /// queue, each by its slot, or the whole table after the queue
    /// overflowed (`requests.rs`). A vq vhost took back while polled is
    /// settled by its thread, at its next visit, and asks again then if a
    /// request waits. The first thread calls it, with the table locked.
    pub(crate) fn serve(&self, table: &mut Table, p: &Params) {
        if !self.first.thread.waker.take() {
            return;
        }
        let now = crate::clock::now();
        let mut threads = table.threads().clone();
        // A thread asked to retire takes no vq, even if wanted again since:
        // it hands back and a new thread takes its place.
        for ring in threads.iter_mut() {
            if ring.as_ref().is_some_and(|r| r.thread.retiring()) {
                *ring = None;
            }
        }
        let threads = threads.get(..p.threads()).unwrap_or(&threads);
        let mut looked = 0;
        // One queue's worth at most: a storm of kicks that keeps asking
        // wakes the thread again, for its next step, and the table's lock
        // is not held for ever.
        for _ in 0..Requests::CAP {
            let Some(asked) = self.requests.take() else {
                break;
            };
            let slots = match asked {
                Asked::Slot(slot) => slot..slot.saturating_add(1),
                Asked::Any => 0..table.slots(),
            };
            for slot in slots {
                looked += 1;
                self.serve_slot(table, slot, threads, now, p);
            }
        }
        self.first.thread.counters.served.fetch_add(looked, Relaxed);
    }

    /// Serves the start request of the vq in `slot`, if it has one and is
    /// in notification mode.
    fn serve_slot(
        &self,
        table: &mut Table,
        slot: usize,
        threads: &[Option<Arc<Ring>>],
        now: Jiffy,
        p: &Params,
    ) {
        let Some(Place::Here(e)) = table.get(slot) else {
            return;
        };
        if !e.vq().want_poll.swap(false, Relaxed) {
            return;
        }
        let loads = threads.iter().map(|r| {
            r.as_ref()
                .map_or(ThreadPolicy::ABSENT, |r| r.thread.load(p))
        });
        match e.start_request(now, loads, p) {
            Start::Ignore => {}
            Start::On(n) => {
                if p.in_worker && !self.admit(table, slot, now, p) {
                    return;
                }
                // `place` picked a running thread (absent ones have no room).
                if table.start(slot, n, now, p) && n != 0 {
                    if let Some(r) = threads.get(n).and_then(Option::as_ref) {
                        r.thread.waker.wake();
                    }
                }
            }
            Start::Refuse { until } => {
                e.refuse(until, false);
                self.first.thread.counters.refused.fetch_add(1, Relaxed);
            }
        }
    }

    /// Whether the vq in `slot` (here, asking to be polled by its own
    /// worker) fits the budget of polling workers (`policy::Budget`): it
    /// does if there is room or its worker polls already, or once the
    /// device that saves the fewest kicks, by far fewer than its kicks,
    /// is handed back; if not, its kicks hold their requests a while.
    fn admit(&self, table: &mut Table, slot: usize, now: Jiffy, p: &Params) -> bool {
        let Some(Place::Here(e)) = table.get(slot) else {
            return false;
        };
        let (key, rate) = (e.vq().dev.load(Relaxed), e.vq().kicks.rate(now));
        // No memory for the list now: its kicks ask again.
        let Ok(spinners) = table.spinners(now) else {
            return false;
        };
        let max = crate::placement::max_workers(p);
        match Budget::admit(&spinners, key, rate, max, now) {
            Admit::Yes => true,
            Admit::Displace(weakest) => {
                table.displace(weakest, now, p, |slot| self.requests.ask(slot));
                true
            }
            Admit::No(until) => {
                if let Some(Place::Here(e)) = table.get(slot) {
                    e.refuse(until, true);
                }
                self.first.thread.counters.refused.fetch_add(1, Relaxed);
                false
            }
        }
    }

    /// Moves back to the table the entries `thread` stopped polling, after
    /// a visit decided so; wakes the first thread if a start request waits.
    pub(crate) fn settle(&self, thread: &Thread) {
        self.settle_for(thread, None);
    }

    fn settle_for(&self, thread: &Thread, why: Option<Exit>) {
        let (now, p) = (crate::clock::now(), crate::param_snapshot::now());
        let mut table = self.table.lock();
        table.settle(thread.index, why, now, &p, |slot| self.requests.ask(slot));
    }

    /// Returns `thread`'s polled vqs to notification mode, for `why`.
    pub(crate) fn hand_back(&self, thread: &Thread, why: Exit) {
        self.settle_for(thread, Some(why));
    }

    /// Forgets thread `i` (not the first), whose thread stopped: what its
    /// ring still holds goes back to notification mode first (`Off`), as
    /// a thread stopped before it ever ran handed nothing back. The first
    /// thread calls it.
    pub(crate) fn retire(&self, i: usize) {
        let (now, p) = (crate::clock::now(), crate::param_snapshot::now());
        let mut table = self.table.lock();
        table.settle(i, Some(Exit::Off), now, &p, |slot| self.requests.ask(slot));
        let gone = table.set_thread(i, None);
        drop(table);
        // Freed without the lock.
        drop(gone);
    }

    /// Takes the entry of `vq` out of the table (vhost detaches it): out
    /// of poll mode first, to keep the counts right. It waits for one
    /// step of a thread at most, however long the thread is kept off its CPU
    /// after it.
    pub(crate) fn forget(&self, vq: &VqState) {
        let (now, p) = (crate::clock::now(), crate::param_snapshot::now());
        let gone = self.table.lock().forget(vq, now, &p);
        // Freed without the lock.
        drop(gone);
    }
}
