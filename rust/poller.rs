// SPDX-License-Identifier: GPL-2.0

//! vhost's callbacks: a virtqueue shown (attach), kicked, taken back
//! (quiesce) or gone (detach). The request protocol with the first thread
//! is a flag per virtqueue (`want_poll`, `poll_mode`), the queue of
//! requests (`requests.rs`) and the waker:
//! kicks and quiesce take no lock; attach and detach change the table
//! under its lock, for one short step of a thread at most.

use crate::counters::VqCounters;
use crate::entry::Entry;
use crate::policy::Kicks;
use crate::shared::Shared;
use crate::table::Spare;
use crate::vq_state::VqState;
use core::sync::atomic::{
    AtomicBool, AtomicU32, AtomicUsize,
    Ordering::{Relaxed, Release},
};
use kernel::{
    alloc::flags::GFP_KERNEL,
    prelude::*,
    sync::{Arc, ArcBorrow},
    vhost_poller::{Poller, StopReason, Vq},
};

impl Poller for Shared {
    type Data = VqState;

    fn attach(this: ArcBorrow<'_, Self>, vq: Vq) -> Option<Arc<VqState>> {
        // vhost is attaching `vq`: it is alive.
        let (device, index) = vq.access().map(|vq| (vq.device(), vq.index()))?;
        // Allocated before the table's lock, which the threads take between
        // passes: an allocation may wait for reclaim.
        let state = Arc::new(
            VqState {
                handle: vq,
                dev: AtomicU32::new(0),
                index,
                slot: AtomicUsize::new(usize::MAX),
                kicks: Kicks::new(),
                poll_mode: AtomicBool::new(false),
                want_poll: AtomicBool::new(false),
                stalled: AtomicBool::new(false),
                counters: VqCounters::default(),
                requests: this.requests.clone(),
            },
            GFP_KERNEL,
        )
        .ok()?;
        // Boxed, so that moving it between the table and a thread's ring is
        // a pointer's move, and their slots stay small.
        let mut entry = KBox::new(Entry::new(state.clone()), GFP_KERNEL).ok()?;
        loop {
            let mut table = this.table.lock();
            let room = match table.room() {
                Ok(()) => {
                    state.dev.store(table.dev_number(device), Relaxed);
                    match table.insert(entry) {
                        Ok(()) => return Some(state),
                        Err(back) => {
                            entry = back;
                            table.room().err().unwrap_or(8)
                        }
                    }
                }
                Err(room) => room,
            };
            drop(table);
            // More slots, allocated without the lock; whoever gets the lock
            // first with a bigger table keeps it.
            match Spare::new(room) {
                Ok(spare) => this.table.lock().grow(spare),
                Err(_) => {
                    pr_warn!("out of memory: vq {} will not be polled\n", index);
                    return None;
                }
            }
        }
    }

    fn kick(_this: ArcBorrow<'_, Self>, data: ArcBorrow<'_, VqState>) {
        data.kick();
    }

    fn quiesce(_this: ArcBorrow<'_, Self>, data: ArcBorrow<'_, VqState>, why: StopReason) {
        // vhost took the vq back already: from now on its kicks are
        // notifications, and count toward a start; those counted before
        // must not start polling again. A thread settles the books at its
        // next step (`Shared::serve`, `visit`), when its thread runs: the
        // watchdog's reason waits for it in `stalled`, set first.
        if why == StopReason::Stalled {
            data.counters.stalls.fetch_add(1, Relaxed);
            data.stalled.store(true, Relaxed);
        }
        // Release: `stalled` before it, for `Entry::taken_back`'s Acquire.
        data.poll_mode.store(false, Release);
        data.want_poll.store(false, Relaxed);
    }

    fn detach(this: ArcBorrow<'_, Self>, data: ArcBorrow<'_, VqState>) {
        // A thread may still be in the owner's address space: it holds a
        // user reference of its own, so vhost may let go of its own now,
        // and the thread leaves at its next switch or sleep.
        this.forget(&data);
    }
}
