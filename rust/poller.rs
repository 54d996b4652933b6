// SPDX-License-Identifier: GPL-2.0

//! vhost's callbacks: a virtqueue shown (attach), kicked, taken back
//! (quiesce) or gone (detach). The request protocol with the worker is a
//! flag per virtqueue (`want_poll`, `polled`) and the waker: kicks and
//! quiesce take no lock; attach and detach change the table under
//! `inner`, for one short step of the worker at most.

use crate::clock::now;
use crate::policy::{CoolDown, Gain, Idle, RateTracker, StartGate, Window};
use crate::table::Entry;
use crate::visit::stop;
use crate::vq::{VqCounters, VqState};
use crate::worker::Shared;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};
use kernel::{
    alloc::flags::GFP_KERNEL,
    prelude::*,
    sync::{Arc, ArcBorrow},
    vhost_poller::{Poller, StopReason, Vq},
};

impl Poller for Shared {
    type Data = VqState;

    fn attach(this: ArcBorrow<'_, Self>, vq: Vq) -> Option<Arc<VqState>> {
        let mut inner = this.inner.lock();
        // vhost is attaching `vq`: it is alive.
        let (device, index) = vq.access().map(|vq| (vq.device(), vq.index()))?;
        let dev = inner.dev_number(device);
        let state = Arc::new(
            VqState {
                vq,
                dev,
                index,
                rate: RateTracker::new(),
                polled: AtomicBool::new(false),
                want_poll: AtomicBool::new(false),
                gate: StartGate::new(),
                counters: VqCounters::default(),
                waker: this.first.waker.clone(),
            },
            GFP_KERNEL,
        )
        .ok()?;
        let entry = Entry {
            vq: state.clone(),
            polled: false,
            lane: this.first.clone(),
            idle: Idle::new(now()),
            window: Window::new(),
            gain: Gain::new(),
            cool: CoolDown::new(),
        };
        if inner.insert(entry).is_err() {
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

    fn quiesce(_this: ArcBorrow<'_, Self>, data: ArcBorrow<'_, VqState>) {
        // vhost took the vq back already: from now on its kicks are
        // notifications, and count toward a start; those counted before
        // must not start polling again. The worker settles its own books
        // at its next step (`serve`, `visit`).
        data.polled.store(false, Relaxed);
        data.want_poll.store(false, Relaxed);
    }

    fn detach(this: ArcBorrow<'_, Self>, data: ArcBorrow<'_, VqState>) {
        let mut inner = this.inner.lock();
        let Some(slot) = inner.find(&data) else {
            return;
        };
        if let Some(e) = inner.get_mut(slot) {
            // vhost takes the vq out of poll mode itself; this keeps the
            // counters right.
            stop(e, StopReason::Detach);
        }
        // The worker may still be in the owner's address space: it holds a
        // user reference of its own, so vhost may let go of its own now,
        // and the worker leaves at its next switch or sleep.
        inner.remove(slot);
    }
}
