// SPDX-License-Identifier: GPL-2.0

//! The table of the virtqueues vhost has shown the module, and of the
//! threads that poll them.
//!
//! An entry is here while its vq is in notification mode, and in its
//! thread's ring while polled (`ring.rs`): the slot then says which thread
//! has it. So a thread's pass costs the vqs it polls and takes no lock but
//! its own; attach finds a free slot and its device's number without a
//! scan, and detach finds its entry by the slot kept with it. Start
//! requests come with their slot (`requests.rs`). Only the counters
//! (debugfs), and serving requests after their queue overflowed, walk
//! the whole table.
//!
//! Lock order: the table's lock, then one ring's lock (never two rings).
//! Both are spinlocks (`shared.rs`): what leaves the table is dropped
//! after the lock is released.

use crate::entry::Entry;
use crate::policy::{Exit, Jiffy, Params, Spinner, THREADS_MAX};
use crate::ring::{Member, Ring};
use crate::slots::{self, Slots};
use crate::vq_state::VqState;
use core::sync::atomic::Ordering::Relaxed;
use kernel::{
    alloc::{flags::GFP_NOWAIT, KVec},
    prelude::*,
    sync::Arc,
};

/// Where a virtqueue's entry is.
pub(crate) enum Place {
    /// Here: the vq is in notification mode.
    Here(KBox<Entry>),
    /// In thread `thread`'s ring, at `pos`.
    Polled {
        thread: usize,
        pos: usize,
        vq: Arc<VqState>,
    },
}

impl Place {
    fn vq(&self) -> &VqState {
        match self {
            Place::Here(e) => e.vq(),
            Place::Polled { vq, .. } => vq,
        }
    }
}

/// What [`Table::forget`] took out of the table and a thread's ring.
#[derive(Default)]
pub(crate) struct Forgotten {
    _place: Option<Place>,
    _polled: Option<KBox<Entry>>,
}

/// Room for more slots, allocated with the table's lock released.
pub(crate) type Spare = slots::Spare<Place>;

/// The table, behind `Shared::table`.
///
/// # Invariants
///
/// Each attached virtqueue the module follows has exactly one slot, from
/// its `attach` until its `detach`, the one its `VqState::slot` names.
/// A `Place::Here` entry is in notification mode. A `Place::Polled` slot
/// names a thread that is in `threads`, whose ring has the entry at `pos`
/// (`Ring`'s invariant).
///
/// `threads[0]` is the first thread, always there; `threads[i]` is there from
/// the spawn of thread `i`'s thread (before it first runs) until the first
/// thread retires it, its thread stopped and its ring emptied
/// (`Shared::retire`).
pub(crate) struct Table {
    slots: Slots<Place>,
    threads: [Option<Arc<Ring>>; THREADS_MAX],
    /// The last device number given out, for the counters.
    next_dev: u32,
    /// The device of the last attach, and its number: vhost attaches a
    /// device's virtqueues one after the other.
    last_device: Option<(usize, u32)>,
}

impl Table {
    /// A table with no virtqueue, and the first thread `first`.
    pub(crate) fn new(first: Arc<Ring>) -> Self {
        let mut threads: [Option<Arc<Ring>>; THREADS_MAX] = core::array::from_fn(|_| None);
        threads[0] = Some(first);
        // INVARIANT: No virtqueue is followed yet, and none is polled.
        Self {
            slots: Slots::new(),
            threads,
            next_dev: 0,
            last_device: None,
        }
    }

    /// The threads, in order; `None` where thread `i`'s thread is not running.
    pub(crate) fn threads(&self) -> &[Option<Arc<Ring>>; THREADS_MAX] {
        &self.threads
    }

    /// Records that thread `i` (not the first) runs, or, with `None`, that
    /// its thread stopped, after handing back its vqs. Returns what was
    /// there, for the caller to drop without the table's lock.
    #[must_use = "dropped without the table's lock"]
    pub(crate) fn set_thread(&mut self, i: usize, ring: Option<Arc<Ring>>) -> Option<Arc<Ring>> {
        match self.threads.get_mut(i).filter(|_| i > 0) {
            Some(slot) => core::mem::replace(slot, ring),
            None => ring,
        }
    }

    /// Whether one more entry fits without an allocation; if not, how
    /// many slots a [`Spare`] should have room for.
    pub(crate) fn room(&self) -> Result<(), usize> {
        self.slots.room()
    }

    /// Moves the slots into `spare`, if it has more room.
    pub(crate) fn grow(&mut self, spare: Spare) {
        self.slots.grow(spare);
    }

    /// The counters' number of device `device` (as `VqGuard::device`
    /// gives it): the one its other virtqueues have, or a new one.
    pub(crate) fn dev_number(&mut self, device: usize) -> u32 {
        match self.last_device {
            Some((last, number)) if last == device => number,
            _ => {
                // A number for the counters only: after 2^32 devices it
                // wraps, and two devices may then share one.
                self.next_dev = self.next_dev.wrapping_add(1);
                self.last_device = Some((device, self.next_dev));
                self.next_dev
            }
        }
    }

    /// Adds the entry of a virtqueue being attached, in a free slot, and
    /// records the slot in its `VqState`. Gives the entry back when there
    /// is no room without an allocation ([`Table::room`]).
    pub(crate) fn insert(&mut self, entry: KBox<Entry>) -> Result<(), KBox<Entry>> {
        // INVARIANT: Called once per attach, with an entry not polled.
        match self.slots.insert(Place::Here(entry)) {
            Ok(slot) => {
                if let Some(p) = self.slots.get(slot) {
                    p.vq().slot.store(slot, Relaxed);
                }
                Ok(())
            }
            Err(Place::Here(entry)) => Err(entry),
            // Only what was given comes back.
            Err(Place::Polled { .. }) => Ok(()),
        }
    }

    /// The number of slots, for a walk of the whole table.
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// What slot `slot` has, if anything.
    pub(crate) fn get(&self, slot: usize) -> Option<&Place> {
        self.slots.get(slot)
    }

    /// Starts polling the entry in `slot` on thread `thread` (running):
    /// [`Entry::start`], and the entry moves to the thread's ring. Returns
    /// whether it did; not when the ring has no room and none can be had
    /// without sleeping (the next kick at the rate asks again).
    pub(crate) fn start(&mut self, slot: usize, thread: usize, now: Jiffy, p: &Params) -> bool {
        let Some(Some(ring)) = self.threads.get(thread).cloned() else {
            return false;
        };
        let Some(Place::Here(e)) = self.slots.get_mut(slot) else {
            return false;
        };
        let mut polled = ring.members.lock();
        if let Err(len) = polled.room() {
            // A pointer and three indices a slot: small, but without
            // sleeping, under the locks the threads take.
            match slots::Spare::new_nowait(len) {
                Ok(spare) => polled.grow(spare),
                Err(_) => return false,
            }
        }
        if !e.start(&ring.thread, now, p) {
            return false;
        }
        let moved = Place::Polled {
            thread,
            pos: usize::MAX,
            vq: e.vq_arc(),
        };
        let Ok(Place::Here(entry)) = self.slots.replace(slot, moved) else {
            return false;
        };
        match polled.insert(Member { slot, entry }) {
            Ok(at) => {
                // INVARIANT: In poll mode, in `thread`'s ring at `at`.
                if let Some(Place::Polled { pos, .. }) = self.slots.get_mut(slot) {
                    *pos = at;
                }
                true
            }
            Err(mut back) => {
                // Cannot happen (room above); leave it as it was.
                back.entry.stop(Exit::Error, now, p);
                let _ = self.slots.replace(slot, Place::Here(back.entry));
                false
            }
        }
    }

    /// Moves the entries thread `thread` no longer polls back here, after
    /// stopping every one for `why` if given (a hand-back). Calls `ask`
    /// with the slot of each that has a start request waiting, which the
    /// first thread skipped while a thread had it.
    pub(crate) fn settle(
        &mut self,
        thread: usize,
        why: Option<Exit>,
        now: Jiffy,
        p: &Params,
        mut ask: impl FnMut(usize),
    ) {
        let Some(Some(ring)) = self.threads.get(thread).cloned() else {
            return;
        };
        let mut polled = ring.members.lock();
        for pos in 0..polled.len() {
            let Some(x) = polled.get_mut(pos) else {
                continue;
            };
            if let Some(why) = why {
                x.entry.stop(why, now, p);
            }
            if x.entry.polled_by(&ring.thread) {
                continue;
            }
            let Some(back) = polled.remove(pos) else {
                continue;
            };
            let waiting = back.entry.vq().want_poll.load(Relaxed);
            // INVARIANT: Not polled; here again.
            let _ = self.slots.replace(back.slot, Place::Here(back.entry));
            if waiting {
                ask(back.slot);
            }
        }
    }

    /// The devices whose own workers poll, each once, as the budget of
    /// polling workers weighs them at `now`: the kicks their polled vqs
    /// saved a jiffy lately, together, and whether one has polled for
    /// the budget's tenure. Fails only for want of memory (allocated
    /// without sleeping, under the table's lock).
    pub(crate) fn spinners(&self, now: Jiffy) -> Result<KVec<Spinner>> {
        let mut spinners = KVec::<Spinner>::new();
        for ring in self.threads.iter().flatten() {
            let polled = ring.members.lock();
            for x in polled.iter() {
                let Some((saves, settled)) = x.entry.saves(now) else {
                    continue;
                };
                let key = x.entry.vq().dev.load(Relaxed);
                match spinners.iter_mut().find(|s| s.key == key) {
                    Some(s) => {
                        s.saves = s.saves.saturating_add(saves);
                        s.settled |= settled;
                    }
                    None => spinners.push(
                        Spinner {
                            key,
                            saves,
                            settled,
                        },
                        GFP_NOWAIT,
                    )?,
                }
            }
        }
        Ok(spinners)
    }

    /// Hands back, for the budget, every vq of device `key` its own
    /// worker polls, and moves their entries back here (as
    /// [`Table::settle`]).
    pub(crate) fn displace(
        &mut self,
        key: u32,
        now: Jiffy,
        p: &Params,
        mut ask: impl FnMut(usize),
    ) {
        for thread in 0..THREADS_MAX {
            let Some(Some(ring)) = self.threads.get(thread).cloned() else {
                continue;
            };
            let mut stopped = false;
            {
                let mut polled = ring.members.lock();
                for pos in 0..polled.len() {
                    let Some(x) = polled.get_mut(pos) else {
                        continue;
                    };
                    if x.entry.saves(now).is_some() && x.entry.vq().dev.load(Relaxed) == key {
                        stopped |= x.entry.stop(Exit::Budget, now, p).is_some();
                    }
                }
            }
            if stopped {
                self.settle(thread, None, now, p, &mut ask);
            }
        }
    }

    /// Forgets `vq`'s entry (vhost detaches it): out of poll mode first,
    /// to keep the counts right. Returns what it took out, for the caller
    /// to drop without the table's lock.
    #[must_use = "dropped without the table's lock"]
    pub(crate) fn forget(&mut self, vq: &VqState, now: Jiffy, p: &Params) -> Forgotten {
        let slot = vq.slot.load(Relaxed);
        let (thread, pos) = match self.slots.get(slot) {
            Some(place) if core::ptr::eq(place.vq(), vq) => match place {
                Place::Here(_) => (None, 0),
                Place::Polled { thread, pos, .. } => (Some(*thread), *pos),
            },
            _ => return Forgotten::default(),
        };
        let mut polled_entry = None;
        if let Some(ring) = thread.and_then(|l| self.threads.get(l).cloned().flatten()) {
            let mut polled = ring.members.lock();
            // Only this slot's own entry: `pos` is in this ring.
            let ours = polled.get(pos).is_some_and(|x| x.slot == slot);
            if let Some(mut gone) = ours.then(|| polled.remove(pos)).flatten() {
                // vhost takes the vq out of poll mode itself; this keeps
                // the counters right.
                gone.entry.stop(Exit::Detach, now, p);
                polled_entry = Some(gone.entry);
            }
        }
        Forgotten {
            _place: self.slots.remove(slot),
            _polled: polled_entry,
        }
    }

    /// Calls `f` with each entry, in slot order, and its thread's ring
    /// locked for those a thread polls.
    pub(crate) fn for_each_entry(&self, mut f: impl FnMut(&Entry)) {
        for place in self.slots.iter() {
            match place {
                Place::Here(e) => f(e),
                Place::Polled { thread, pos, .. } => {
                    let Some(Some(ring)) = self.threads.get(*thread) else {
                        continue;
                    };
                    if let Some(x) = ring.members.lock().get(*pos) {
                        f(&x.entry);
                    }
                }
            }
        }
    }
}
