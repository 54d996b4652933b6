// SPDX-License-Identifier: GPL-2.0

//! Entering, visiting and leaving poll mode: what the worker does to one
//! virtqueue, and the address space it does it in.

use crate::clock::{idle_bounds, now};
use crate::counters::WorkerCounters;
use crate::policy::{Gain, Idle};
use crate::table::Entry;
use crate::worker::Lane;
use core::sync::atomic::Ordering::Relaxed;
use kernel::{
    kthread::MmUse, mm::MmWithUser, prelude::*, sync::Arc, types::ARef, vhost_poller::StopReason,
};

/// The address space the worker is in, switched only when the next vq
/// needs another one. It holds a user reference on it.
pub(crate) struct MmCursor<'a> {
    counters: &'a WorkerCounters,
    current: Option<MmUse>,
}

impl<'a> MmCursor<'a> {
    pub(crate) fn new(counters: &'a WorkerCounters) -> Self {
        Self {
            counters,
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
            self.counters.mm_switches.fetch_add(1, Relaxed);
            self.current = MmUse::new(mm).ok();
        }
        self.current.as_ref()
    }

    /// Leaves the address space. May sleep, as `enter`.
    pub(crate) fn leave(&mut self) {
        self.current = None;
    }
}

/// Puts `e` in poll mode, polled by `lane`'s thread: its own worker turns
/// notifications off. Returns whether it did.
pub(crate) fn start(e: &mut Entry, lane: &Arc<Lane>) -> bool {
    // Detached meanwhile, or no worker: leave it alone.
    if !e.vq.vq.access().is_some_and(|vq| vq.start().is_ok()) {
        return false;
    }
    e.polled = true;
    e.lane = lane.clone();
    e.vq.polled.store(true, Relaxed);
    // Kicks that reached the rate while polling was being started asked
    // for what just happened; kicks from now on do not count. Left set, the
    // request would start polling again right after the next exit.
    e.vq.want_poll.store(false, Relaxed);
    let t = now();
    e.idle = Idle::new(t);
    e.window.enter(t, idle_bounds());
    e.gain = Gain::new();
    e.vq.counters.enters.fetch_add(1, Relaxed);
    lane.counters.polled_vqs.fetch_add(1, Relaxed);
    true
}

/// Returns `e` to notification mode. Its own worker turns notifications
/// back on and runs its handler once, for what came in while they were off
/// (the classic race) and what a run left; vhost does the same when it
/// takes a vq back (quiesce, detach), and then this only settles the books.
pub(crate) fn stop(e: &mut Entry, why: StopReason) {
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
    let t = now();
    let idle = matches!(why, StopReason::Idle);
    e.window.exit(t, idle, &e.idle, idle_bounds());
    if matches!(why, StopReason::Gain) {
        e.cool.hand_back(t);
        // Its kicks need not ask before the cool-down ends.
        if let Some(until) = e.cool.until() {
            e.vq.gate.defer_until(until);
        }
    } else if e.gain.paid(crate::module_parameters::poll_min_gain.value()) {
        e.cool.paid();
    }
    e.vq.counters.exits.fetch_add(1, Relaxed);
    e.lane.counters.polled_vqs.fetch_sub(1, Relaxed);
}

/// What one visit saw, for the pause after the pass.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Visit {
    /// The vq's handlers took buffers since the last visit.
    pub(crate) work: bool,
    /// The visit queued the vq's handler: buffers were waiting and no
    /// handler was running or queued for them. The poll paid.
    pub(crate) queued: bool,
}

/// Visits polled `e` once: queues its handler if its ring has buffers,
/// and returns it to notification mode when idle long enough, when
/// polling was switched off, or when vhost took it back.
#[must_use = "the pause after a pass depends on what its visits saw"]
pub(crate) fn visit(e: &mut Entry, mm: &mut MmCursor<'_>) -> Visit {
    // Switched off, or taken back by vhost (quiesce).
    if crate::module_parameters::poll_start_rate.value() == 0 {
        stop(e, StopReason::Off);
        return Visit::default();
    }
    if !e.vq.polled.load(Relaxed) {
        stop(e, StopReason::Quiesce);
        return Visit::default();
    }
    // The owner's address space, entered without a guard held (it may
    // sleep); then the ring, under a guard. Detached in between: gone.
    let owner_mm = e.vq.vq.access().and_then(|vq| vq.mm());
    let Some(mmu) = owner_mm.and_then(|owner_mm| mm.enter(owner_mm)) else {
        // No owner, so no ring: nothing to poll.
        stop(e, StopReason::Error);
        return Visit::default();
    };
    let c = &e.vq.counters;
    let polled = e.vq.vq.access().map(|vq| vq.poll(mmu));
    let (taken, queued) = match polled.unwrap_or(Err(ENODEV)) {
        // Work is buffers taken, not buffers seen: a hostile driver can
        // show buffers nobody can take (an invalid head) at every visit.
        // A vq that was held (its handler running, an ioctl, a handler
        // blocked in a fault) counts by what its handlers took too: a busy
        // ring keeps its handler, and so its mutex, nearly all the time,
        // while one held by a blocked ioctl takes nothing, so the pass
        // pauses and the vq leaves poll mode once idle.
        Ok(polled) => {
            if polled.queued {
                c.queued.fetch_add(1, Relaxed);
            }
            if polled.held {
                c.held.fetch_add(1, Relaxed);
            }
            (polled.taken, polled.queued)
        }
        // vhost took the vq back (quiesce), its owner was killed (vhost
        // runs none of its handlers again), or its ring cannot be read now
        // without a fault: hand it back. A handler run in its own worker
        // meets the fault or the error, once, as after a kick.
        Err(_) => {
            stop(e, StopReason::Error);
            return Visit::default();
        }
    };
    if e.gain.visit(
        taken,
        queued,
        crate::module_parameters::poll_min_gain.value(),
    ) {
        // Polling it saves next to no kicks: vhost's own suppression
        // while its handler runs does nearly as well (see `Gain`).
        stop(e, StopReason::Gain);
        return Visit {
            work: taken > 0,
            queued,
        };
    }
    if taken > 0 {
        c.poll_work.fetch_add(1, Relaxed);
        let t = now();
        e.idle.work(t);
        e.window.work(t, idle_bounds());
        return Visit { work: true, queued };
    }
    c.empty_polls.fetch_add(1, Relaxed);
    e.idle.empty();
    if e.idle.stops(now(), e.window.jiffies(idle_bounds())) {
        stop(e, StopReason::Idle);
    }
    Visit {
        work: false,
        queued,
    }
}
