// SPDX-License-Identifier: GPL-2.0

//! Start requests on their way to the first thread: the table slots of the
//! virtqueues whose kicks asked for polling, in a bounded queue that any
//! context fills without a lock (the kick hook) and the first thread
//! empties, so that serving costs the requests, not the table. When the
//! queue is full, a flag says so, and the first thread walks the whole
//! table once instead.
//!
//! The queue is a ring of cells, each with a sequence number that says
//! whose turn it is: the pusher that wins position `pos` (a
//! compare-exchange on `tail`) writes the cell and then its sequence,
//! `pos + 1`, which gives the cell to the first thread; the first thread reads
//! it and sets the sequence to `pos + CAP`, which gives the cell to the
//! pusher of the next round. A pusher between its two steps holds up the
//! first thread at that cell only until it wakes it, which every pusher
//! does after its push (`ask`).

use crate::waker::Waker;
use core::sync::atomic::{
    AtomicBool, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use kernel::{alloc::flags::GFP_KERNEL, prelude::*, sync::Arc};

struct Cell {
    /// `pos + 1` when the request pushed at `pos` is in it; `pos` when the
    /// cell is free for the push at `pos`.
    seq: AtomicUsize,
    /// The slot of the vq that asked.
    slot: AtomicUsize,
}

/// What [`Requests::take`] found.
pub(crate) enum Asked {
    /// The vq in this slot asked (or did: the slot may have been reused
    /// since; the vq's own flag, `VqState::want_poll`, tells).
    Slot(usize),
    /// The queue overflowed since the last take: every vq may have asked.
    Any,
}

/// The start requests, and the first thread's waker.
///
/// # Invariants
///
/// `cells` has [`Requests::CAP`] cells. Only the first thread takes, under the table's
/// lock: `head` has one writer.
pub(crate) struct Requests {
    cells: KVec<Cell>,
    /// The next position to push to.
    tail: AtomicUsize,
    /// The next position to take from.
    head: AtomicUsize,
    /// A push found the queue full.
    overflow: AtomicBool,
    /// The first thread's.
    waker: Arc<Waker>,
}

impl Requests {
    /// Requests the queue holds before it overflows: one per vq that asked
    /// since the first thread last served, which is more than a few only in
    /// a storm of new owners, where a walk of the table costs little
    /// beside it.
    pub(crate) const CAP: usize = 256;

    /// An empty queue whose requests wake `waker`'s thread.
    pub(crate) fn new(waker: Arc<Waker>) -> Result<Arc<Self>> {
        let mut cells = KVec::with_capacity(Self::CAP, GFP_KERNEL)?;
        for pos in 0..Self::CAP {
            cells.push(
                Cell {
                    seq: AtomicUsize::new(pos),
                    slot: AtomicUsize::new(usize::MAX),
                },
                GFP_KERNEL,
            )?;
        }
        // INVARIANT: `CAP` cells, and no taker yet.
        Ok(Arc::new(
            Self {
                cells,
                tail: AtomicUsize::new(0),
                head: AtomicUsize::new(0),
                overflow: AtomicBool::new(false),
                waker,
            },
            GFP_KERNEL,
        )?)
    }

    /// Asks the first thread to serve the vq in table slot `slot`, and wakes
    /// it. Any context: no lock, no allocation, no wait but for other
    /// pushers' compare-exchanges.
    pub(crate) fn ask(&self, slot: usize) {
        if slot == usize::MAX || !self.push(slot) {
            // Not in the table yet (cannot be: vhost kicks a vq only after
            // its attach), or no room: the first thread walks the table.
            self.overflow.store(true, Relaxed);
        }
        // Its `Release` orders the push, or the flag, before the wake-up,
        // for `Waker::take`'s `Acquire` (see there).
        self.waker.wake();
    }

    fn push(&self, slot: usize) -> bool {
        let mut pos = self.tail.load(Relaxed);
        loop {
            let Some(cell) = self.cells.get(pos % Self::CAP) else {
                return false;
            };
            // Acquire: pairs with `take`'s `Release`, which freed the cell
            // after it read it.
            let seq = cell.seq.load(Acquire);
            if seq == pos {
                match self
                    .tail
                    .compare_exchange_weak(pos, pos.wrapping_add(1), Relaxed, Relaxed)
                {
                    Ok(_) => {
                        cell.slot.store(slot, Relaxed);
                        // Release: the slot before the cell is the taker's.
                        cell.seq.store(pos.wrapping_add(1), Release);
                        return true;
                    }
                    Err(now) => pos = now,
                }
            } else if seq.wrapping_sub(pos) as isize > 0 {
                // Another pusher took `pos` since we read `tail`.
                pos = self.tail.load(Relaxed);
            } else {
                // Still the taker's from the last round: full.
                return false;
            }
        }
    }

    /// Takes the next request, if any: the first thread, with the table
    /// locked, after `Waker::take`. `None` when the queue is empty, or its
    /// next cell is still being written (its pusher wakes the thread after).
    pub(crate) fn take(&self) -> Option<Asked> {
        if self.overflow.swap(false, Relaxed) {
            // The walk that follows serves what the queue holds too; what
            // stays in it is served again, for nothing, at the next take.
            return Some(Asked::Any);
        }
        let pos = self.head.load(Relaxed);
        let cell = self.cells.get(pos % Self::CAP)?;
        // Acquire: pairs with `push`'s `Release`.
        if cell.seq.load(Acquire) != pos.wrapping_add(1) {
            return None;
        }
        let slot = cell.slot.load(Relaxed);
        // Release: the read above before the cell goes back to pushers.
        cell.seq.store(pos.wrapping_add(Self::CAP), Release);
        self.head.store(pos.wrapping_add(1), Relaxed);
        Some(Asked::Slot(slot))
    }
}
