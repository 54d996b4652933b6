// SPDX-License-Identifier: GPL-2.0

//! vhost's callbacks: a virtqueue shown (attach), kicked, taken back
//! (quiesce) or gone (detach). The request protocol with the first lane
//! is a flag per virtqueue (`want_poll`, `poll_mode`) and the waker:
//! kicks and quiesce take no lock; attach and detach change the table
//! under its lock, for one short step of a lane at most.

use crate::counters::VqCounters;
use crate::entry::Entry;
use crate::policy::Kicks;
use crate::shared::Shared;
use crate::vq::VqState;
use core::sync::atomic::{
    AtomicBool,
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
        let mut table = this.table.lock();
        // vhost is attaching `vq`: it is alive.
        let (device, index) = vq.access().map(|vq| (vq.device(), vq.index()))?;
        let dev = table.dev_number(device);
        let state = Arc::new(
            VqState {
                handle: vq,
                dev,
                index,
                kicks: Kicks::new(),
                poll_mode: AtomicBool::new(false),
                want_poll: AtomicBool::new(false),
                stalled: AtomicBool::new(false),
                counters: VqCounters::default(),
                waker: this.first.waker.clone(),
            },
            GFP_KERNEL,
        )
        .ok()?;
        if table.insert(Entry::new(state.clone())).is_err() {
            pr_warn!(
                "out of memory: vq {} of device {} will not be polled\n",
                index,
                dev
            );
            return None;
        }
        Some(state)
    }

    fn kick(_this: ArcBorrow<'_, Self>, data: ArcBorrow<'_, VqState>) {
        data.kick();
    }

    fn quiesce(_this: ArcBorrow<'_, Self>, data: ArcBorrow<'_, VqState>, why: StopReason) {
        // vhost took the vq back already: from now on its kicks are
        // notifications, and count toward a start; those counted before
        // must not start polling again. A lane settles the books at its
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
        // A lane may still be in the owner's address space: it holds a
        // user reference of its own, so vhost may let go of its own now,
        // and the lane leaves at its next switch or sleep.
        this.forget(&data);
    }
}
