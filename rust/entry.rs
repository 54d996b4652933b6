// SPDX-License-Identifier: GPL-2.0

//! A thread's bookkeeping for one virtqueue: its policy (mode, idle window,
//! cool-down) and the transitions between the modes, which carry out
//! what the policy decided.

use crate::policy::{Exit, Jiffy, Params, Seen, Start, ThreadLoad, Visited, VqPolicy};
use crate::thread::Thread;
use crate::vq_state::VqState;
use core::sync::atomic::Ordering::{Acquire, Relaxed};
use kernel::{
    sync::Arc,
    vhost_poller::{PolledBy, StopReason},
};

/// The table's entry for one virtqueue.
///
/// # Invariants
///
/// While `policy` is in poll mode its thread counts this entry in
/// `Thread::polled`, once (and the entry is in the thread's ring:
/// `Table::start`, `Table::settle`); `vq.poll_mode` is set only in poll mode
/// (vhost may clear it first: quiesce, watchdog).
pub(crate) struct Entry {
    vq: Arc<VqState>,
    policy: VqPolicy<Arc<Thread>>,
    /// The thread that polls it, or did last (for the counters).
    last_thread: usize,
    /// Its own worker polls it, and its thread only counts its work: as
    /// `poll_cpus` said at its last start (empty: its own worker polls).
    in_worker: bool,
}

impl Entry {
    /// The entry of a virtqueue vhost is attaching: in notification mode.
    pub(crate) fn new(vq: Arc<VqState>) -> Self {
        // INVARIANT: Not polled.
        Self {
            vq,
            policy: VqPolicy::new(),
            last_thread: 0,
            in_worker: false,
        }
    }

    /// The virtqueue.
    pub(crate) fn vq(&self) -> &VqState {
        &self.vq
    }

    /// The virtqueue, to keep beyond the table's lock (the counters).
    pub(crate) fn vq_arc(&self) -> Arc<VqState> {
        self.vq.clone()
    }

    /// Whether it is in poll mode, as the threads see it.
    pub(crate) fn is_polled(&self) -> bool {
        self.policy.is_polled()
    }

    /// Whether `thread` polls it.
    pub(crate) fn polled_by(&self, thread: &Thread) -> bool {
        self.policy
            .thread()
            .is_some_and(|l| core::ptr::eq(&**l, thread))
    }

    /// The thread that polls it, or did last.
    pub(crate) fn last_thread(&self) -> usize {
        self.last_thread
    }

    /// Whether its own worker polls it (or did, at its last start).
    pub(crate) fn in_worker(&self) -> bool {
        self.in_worker
    }

    /// Its idle window and its cool-down, in jiffies, for the counters.
    pub(crate) fn window_and_cool(&self, p: &Params) -> (u32, u32) {
        (self.policy.window(p), self.policy.cool_down())
    }

    /// Its kicks asked for a start, at `now`: the policy's answer, given
    /// the wanted threads' loads.
    pub(crate) fn start_request(
        &self,
        now: Jiffy,
        loads: impl IntoIterator<Item = ThreadLoad>,
        p: &Params,
    ) -> Start {
        self.policy.start_request(now, loads, p)
    }

    /// A start was refused: kicks before `until` need not ask again; with
    /// `firm` (no room in the budget of polling workers), whatever
    /// `poll_min_gain` says.
    pub(crate) fn refuse(&self, until: Jiffy, firm: bool) {
        let vq = &self.vq;
        vq.kicks.close_until(until, firm);
        vq.counters.refused.fetch_add(1, Relaxed);
    }

    /// Polled by its own worker: the kicks its polling saved a jiffy
    /// lately, and whether it has polled for the budget's tenure at `now`.
    pub(crate) fn saves(&self, now: Jiffy) -> Option<(u32, bool)> {
        self.policy.saves(now).filter(|_| self.in_worker)
    }

    /// Puts it in poll mode, polled by `thread`, or by its own worker where
    /// `p` says so (`thread` then counts its work): its own worker turns
    /// notifications off. Returns whether it did.
    pub(crate) fn start(&mut self, thread: &Arc<Thread>, now: Jiffy, p: &Params) -> bool {
        // Detached meanwhile, or no worker: leave it alone.
        let started = matches!(self.vq.handle.access(), Some(vq) if vq.start(polled_by(p)).is_ok());
        if !started {
            return false;
        }
        self.in_worker = p.in_worker;
        self.vq.stalled.store(false, Relaxed);
        self.vq.poll_mode.store(true, Relaxed);
        // Kicks that reached the rate while polling was being started asked
        // for what just happened; kicks from now on do not count. Left set,
        // the request would start polling again right after the next exit.
        self.vq.want_poll.store(false, Relaxed);
        thread.add_polled();
        self.last_thread = thread.index;
        // INVARIANT: In poll mode, counted once by `thread`, just above.
        self.policy.started(thread.clone(), now, p);
        self.vq.counters.enters.fetch_add(1, Relaxed);
        true
    }

    /// Returns it to notification mode, for `why`. Its own worker turns
    /// notifications back on and runs its handler once, for what came in
    /// while they were off (the classic race) and what a run left; vhost
    /// does the same when it takes a vq back (quiesce, detach), and then
    /// this only settles the books. Returns the number of the thread that
    /// polled it; a no-op in notification mode.
    pub(crate) fn stop(&mut self, why: Exit, now: Jiffy, p: &Params) -> Option<usize> {
        if !self.policy.is_polled() {
            return None;
        }
        // Detached meanwhile: vhost took it out of poll mode itself.
        if let Some(vq) = self.vq.handle.access() {
            vq.stop(reason(why));
        }
        // Kicks from here on are notifications, and count toward a start.
        // Until now they were kicks of a polled vq, which count for nothing.
        self.vq.poll_mode.store(false, Relaxed);
        // INVARIANT: Back in notification mode, and no longer counted by
        // its thread (below).
        let thread = self.policy.stopped(now, why, p).map(|(thread, closed)| {
            thread.remove_polled();
            // Its kicks need not ask before the cool-down ends.
            if let Some(until) = closed {
                self.vq.kicks.close_until(until, why == Exit::Budget);
            }
            thread.index
        });
        self.vq.counters.exits.fetch_add(1, Relaxed);
        thread
    }

    /// Before a visit: the reason to leave poll mode without one, if any.
    pub(crate) fn before_visit(&self, p: &Params) -> Option<Exit> {
        self.policy.before_visit(self.taken_back(), p)
    }

    /// Whether vhost took it back while polled, and why: to reconfigure
    /// it, or from its watchdog (`VqState::stalled`).
    pub(crate) fn taken_back(&self) -> Option<Exit> {
        // Acquire: pairs with the hook's Release, which set `stalled` first.
        if !self.policy.is_polled() || self.vq.poll_mode.load(Acquire) {
            None
        } else if self.vq.stalled.swap(false, Relaxed) {
            Some(Exit::Stalled)
        } else {
            Some(Exit::Quiesce)
        }
    }

    /// A visit at `now` saw `seen`: what the policy decided.
    pub(crate) fn visited(&mut self, now: Jiffy, seen: Seen, p: &Params) -> Visited {
        self.policy.visited(now, seen, p)
    }
}

/// Who polls a virtqueue started with `p`: its own worker, or a thread's
/// thread with `poll_stall_us` as the watchdog's bound.
fn polled_by(p: &Params) -> PolledBy {
    if p.in_worker {
        PolledBy::Worker
    } else {
        PolledBy::Thread {
            stall_us: p.stall_us(),
        }
    }
}

/// The reason vhost's trace event shows for `why`.
fn reason(why: Exit) -> StopReason {
    match why {
        Exit::Idle => StopReason::Idle,
        Exit::Off => StopReason::Off,
        Exit::Error => StopReason::Error,
        Exit::Quiesce => StopReason::Quiesce,
        Exit::Detach => StopReason::Detach,
        Exit::Gain => StopReason::Gain,
        Exit::Contended => StopReason::Contended,
        Exit::Stalled => StopReason::Stalled,
        Exit::Budget => StopReason::Budget,
    }
}
