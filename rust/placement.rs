// SPDX-License-Identifier: GPL-2.0

//! Where a polling thread runs: on the CPU `poll_cpus` gives it
//! (`policy::thread_cpu`), or, with the list empty, wherever the scheduler
//! and the administrator put it.
//!
//! Each thread places itself, between passes: so a change reaches a
//! thread that polls within one pass. A write of `poll_cpus`, and a CPU
//! that comes online or starts going offline, change the list's
//! generation and wake the first thread (`CpuListParam::watch`), which
//! wakes the others (`Placement::follow` says when); so a thread with
//! nothing to poll moves too. A CPU on its way offline counts as offline
//! already, so its threads leave it before it goes; and a thread the
//! scheduler moved off its CPU anyway is seen where it runs, and placed
//! again. No more threads run than the list has CPUs online (`Params::cpus`,
//! published here by the first thread): two threads on one CPU would each
//! see the other as contention, and both hand everything back. With none
//! of the listed CPUs online there is no bound and no placement: the
//! threads run where the scheduler puts them.

use crate::compat;
use crate::policy::{cpus_online, thread_cpu, Params};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use kernel::prelude::*;

/// `poll_cpus` listed CPUs when the first thread last read it.
static CPUS_GIVEN: AtomicBool = AtomicBool::new(false);

/// Whether CPUs are given to polling (`poll_cpus` not empty), as the first
/// thread last read the list: virtqueues are then polled by the threads on
/// those CPUs, and otherwise by their own workers.
pub(crate) fn cpus_given() -> bool {
    CPUS_GIVEN.load(Relaxed)
}

/// How many of the CPUs `poll_cpus` lists were online when the first thread
/// last read the list (`Params::cpus`).
static CPUS_ONLINE: AtomicU32 = AtomicU32::new(0);

/// The most threads that may run, one per CPU given to polling and online;
/// 0 for no bound (the list empty, or none of its CPUs online).
pub(crate) fn cpus_online_given() -> u32 {
    CPUS_ONLINE.load(Relaxed)
}

/// The most vhost workers that may poll their own virtqueues at once,
/// with `p`: `poll_max_workers`, or with it 0 the CPUs online now (each
/// polling worker spins up to a CPU). Walks the CPU numbers: for start
/// requests, not for every kick.
pub(crate) fn max_workers(p: &Params) -> usize {
    let n = match p.max_workers {
        0 => (0..compat::nr_cpu_ids())
            .filter(|&c| compat::cpu_online(c))
            .count(),
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    n.max(1)
}

/// What a thread last saw of the list and the CPUs.
pub(crate) struct Placement {
    /// The list's generation it was placed for, and whether that
    /// placement worked; `None` before the first.
    seen: Option<(u32, bool)>,
    /// Whether the thread's affinity is this module's: it was placed on
    /// a list, and not let go since the list emptied.
    placed: bool,
    /// The CPU it was placed on, if one.
    cpu: Option<u32>,
}

impl Placement {
    /// A thread not placed yet.
    pub(crate) const fn new() -> Self {
        Self {
            seen: None,
            placed: false,
            cpu: None,
        }
    }

    /// Whether `poll_cpus` was written, or a CPU came or started going,
    /// since the thread last placed itself: then it must not sleep before
    /// it places itself again (a wake-up just before it sleeps finds it
    /// running).
    pub(crate) fn is_stale(&self) -> bool {
        self.seen.map(|(g, _)| g) != Some(crate::module_parameters::poll_cpus.generation())
    }

    /// Places the thread of thread `index`, if the list or the online CPUs
    /// changed since it last did, or its last placement failed, or it no
    /// longer runs where it was placed. Returns whether the list or the
    /// online CPUs changed: the first thread then wakes the others, which
    /// may be asleep. May sleep.
    pub(crate) fn follow(&mut self, index: usize) -> bool {
        let param = &crate::module_parameters::poll_cpus;
        let now = param.generation();
        let moved = self.cpu.is_some_and(|c| c != compat::current_cpu());
        if self.seen == Some((now, true)) && !moved {
            return false;
        }
        let changed = self.seen.map(|(g, _)| g) != Some(now);
        // The list may change again after `now` was read: then its
        // generation changed too, and the next call places again.
        let set = match param.cpus(compat::this_module()) {
            Ok(set) => set,
            Err(e) => {
                pr_warn!("poll_cpus: cannot read the list: {:?}\n", e);
                self.seen = Some((now, false));
                return changed;
            }
        };
        if index == 0 {
            CPUS_GIVEN.store(!set.is_empty(), Relaxed);
            CPUS_ONLINE.store(
                cpus_online(compat::listed(&set), |c| compat::listed_online(param, c)),
                Relaxed,
            );
        }
        if set.is_empty() && !self.placed {
            // Never placed: where the thread runs is the administrator's.
            self.seen = Some((now, true));
            return changed;
        }
        let target = thread_cpu(index, compat::listed(&set), |c| {
            compat::listed_online(param, c)
        });
        match compat::run_on(target) {
            Ok(()) => {
                self.seen = Some((now, true));
                self.placed = !set.is_empty();
                self.cpu = target;
            }
            Err(_) => {
                // `target` went offline since it was chosen: the next
                // call places again.
                self.seen = Some((now, false));
                self.cpu = None;
            }
        }
        changed
    }
}
