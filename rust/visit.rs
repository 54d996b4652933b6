// SPDX-License-Identifier: GPL-2.0

//! One visit of one polled virtqueue by its thread: what the thread reads of
//! the ring, handed to the policy, and its decision carried out. Of a vq
//! its own worker polls, the thread reads the count of its work only.

use crate::compat::ARef;
use crate::entry::Entry;
use crate::policy::{Exit, Seen, Tally, Visited};
use core::sync::atomic::Ordering::Relaxed;
use kernel::{
    kthread::MmScope,
    mm::MmWithUser,
    prelude::*,
    task::Task,
    vhost_poller::{Polled, Work},
};

/// How a visit ended.
pub(crate) enum Visit {
    /// It was made: what it saw and decided, whether it only counted the
    /// work of a vq its own worker polls, and the worker it queued the
    /// handler to if that waits on the thread's CPU, to give the CPU to
    /// once the thread holds no lock.
    Made(Visited, bool, Option<ARef<Task>>),
    /// Its ring is in address space `mm`, which the thread does not use now:
    /// visit again from there.
    Needs(ARef<MmWithUser>),
}

/// Visits polled `e`: queues its handler if its ring has buffers,
/// looking at the ring in no address space where vhost can
/// (`VqGuard::peek`), else in `scope`'s (`VqGuard::poll`). When the policy says it goes
/// back to notification mode, the caller stops it (`Visited::exit`:
/// `Entry::stop`, then `Shared::settle`, which takes it out of its
/// thread's ring).
#[must_use = "the exit, and the pause after a pass, depend on what the visit saw"]
pub(crate) fn visit(e: &mut Entry, scope: Option<&MmScope<'_>>) -> Visit {
    let p = crate::param_snapshot::now();
    let in_worker = e.in_worker();
    let exit = |why| {
        Visit::Made(
            Visited {
                exit: Some(why),
                ..Visited::NOTHING
            },
            in_worker,
            None,
        )
    };
    // Switched off, or taken back by vhost (quiesce, watchdog).
    if let Some(why) = e.before_visit(&p) {
        return exit(why);
    }
    // First the look that needs no address space (the avail index through
    // the page vhost pinned for it); the one in the owner's only where
    // that cannot tell. One guard for both: neither sleeps.
    let polled = match e.vq().handle.access() {
        // vhost detached it.
        None => Err(ENODEV),
        // Its own worker polls it: the count of its work is all there is
        // to see, in no address space.
        Some(vq) if in_worker => vq.count().map(Looked::from),
        Some(vq) => match vq.peek() {
            Ok(Some(polled)) => Ok(Looked::from(polled)),
            Err(err) => Err(err),
            Ok(None) => match scope {
                Some(scope) if vq.in_mm(scope) => vq.poll(scope).map(Looked::from),
                _ => {
                    return match vq.mm() {
                        Some(mm) => Visit::Needs(mm),
                        // No owner (or it is exiting), so no ring: nothing
                        // to poll.
                        None => exit(Exit::Error),
                    };
                }
            },
        },
    };
    let c = &e.vq().counters;
    let mut here = None;
    let seen = match polled {
        Ok(looked) => {
            if looked.crossed {
                c.crossed.fetch_add(1, Relaxed);
            }
            if looked.here.is_some() {
                c.handed.fetch_add(1, Relaxed);
            }
            here = looked.here;
            c.queued.fetch_add(looked.queued.into(), Relaxed);
            c.spin_ns.fetch_add(looked.spin_ns, Relaxed);
            // A run queued to take a fault or ask for a translation is not
            // a kick's work: it saves no kick, and a vq whose mappings
            // change often must not look as if polling paid.
            if looked.retry {
                c.retries.fetch_add(1, Relaxed);
            }
            if looked.held {
                c.busy.fetch_add(1, Relaxed);
            }
            Seen::Ring {
                taken: looked.taken,
                queued: looked.queued,
            }
        }
        // vhost took the vq back (quiesce), its owner was killed (vhost
        // runs none of its handlers again), or its ring cannot be read now
        // without a fault: hand it back. A handler run in its own worker
        // meets the fault or the error, once, as after a kick.
        Err(_) => Seen::Failed,
    };
    let now = crate::clock::now();
    let v = e.visited(now, seen, &p);
    let c = &e.vq().counters;
    match v.tally {
        Tally::Work => c.poll_work.fetch_add(1, Relaxed),
        Tally::Empty => c.empty_polls.fetch_add(1, Relaxed),
        Tally::Nothing => 0,
    };
    Visit::Made(v, in_worker, here)
}

/// What a visit found, from the thread's look at the ring or the count of
/// the worker's own polling.
struct Looked {
    taken: u32,
    /// Handler runs queued by polling: kicks saved.
    queued: u32,
    retry: bool,
    held: bool,
    spin_ns: u64,
    /// The handler went to a worker on another CPU.
    crossed: bool,
    /// The handler went to this worker, on the thread's CPU.
    here: Option<ARef<Task>>,
}

impl From<Polled> for Looked {
    fn from(p: Polled) -> Self {
        Self {
            taken: p.taken,
            queued: p.queued.into(),
            retry: p.retry,
            held: p.held,
            spin_ns: 0,
            crossed: p.crossed,
            here: p.here,
        }
    }
}

impl From<Work> for Looked {
    fn from(w: Work) -> Self {
        Self {
            taken: w.taken,
            queued: w.queued,
            retry: false,
            held: false,
            spin_ns: w.spin_ns,
            crossed: false,
            here: None,
        }
    }
}
