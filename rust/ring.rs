// SPDX-License-Identifier: GPL-2.0

//! A thread's ring: the entries of the virtqueues it polls (its members),
//! in a circle it turns by one a pass; not a virtqueue's ring. Behind a
//! lock of the thread's own: a thread visits its vqs holding that lock
//! only, so threads do not wait for each other, nor for the table (attach, detach, the
//! counters, start requests). An entry moves here when it starts being
//! polled and back to the table when it stops (`Table::start`,
//! `Table::settle`), both with the table's lock and this one held.
//!
//! The lock is a spinlock, held for one visit at a time: its holder runs
//! with preemption off and cannot be kept off its CPU while it holds it,
//! so detach, which takes it, waits for one visit at most, whatever runs
//! beside the thread (see `shared.rs`).

use crate::entry::Entry;
use crate::slots::Slots;
use crate::thread::Thread;
use kernel::{alloc::flags::GFP_KERNEL, new_spinlock, prelude::*, sync::Arc, sync::SpinLock};

/// A member of a ring: an entry the thread polls, and its slot in the
/// table.
pub(crate) struct Member {
    pub(crate) slot: usize,
    pub(crate) entry: KBox<Entry>,
}

/// A thread and what it polls.
///
/// # Invariants
///
/// `members` holds the entries `thread` polls, and those it stopped polling
/// since it last took the table's lock (a visit decided so: the thread
/// settles them next, `Table::settle`). For each, the table's slot
/// `slot` is `Place::Polled` with this thread's index and its index here.
#[pin_data]
pub(crate) struct Ring {
    pub(crate) thread: Arc<Thread>,
    #[pin]
    pub(crate) members: SpinLock<Slots<Member>>,
}

impl Ring {
    /// Thread `thread`, polling nothing yet.
    pub(crate) fn new(thread: Arc<Thread>) -> Result<Arc<Self>> {
        // INVARIANT: Nothing polled, nothing here.
        Arc::pin_init(
            pin_init!(Self {
                thread,
                members <- new_spinlock!(Slots::new(), "vhost_poll::ring"),
            }),
            GFP_KERNEL,
        )
    }
}
