// SPDX-License-Identifier: GPL-2.0

//! vhost-poll: per-virtqueue adaptive polling for vhost.
//!
//! A virtqueue whose driver kicks at least `poll_start_rate` times in one
//! jiffy is switched from notifications to polling, by its own vhost
//! worker or, on the CPUs `poll_cpus` lists, by a polling thread of this
//! module, and back after `poll_stop_idle` jiffies without new work. See
//! Documentation/admin-guide.rst and Documentation/design.rst.

use kernel::{
    c_str, kthread::KThread, module_param::CpuListWatch, prelude::*, vhost_poller::Registration,
};

// From the top layer down: each file imports only files below it (`make
// lint` checks it).
mod poll_loop;
mod poller;
mod stats;

mod shared;
mod visit;

mod table;

mod ring;

mod entry;

mod mm_cursor;
mod vq_state;

mod requests;
mod thread;

mod clock;
mod compat;
mod counters;
mod handoff;
mod param_snapshot;
mod placement;
mod slots;
mod waker;

pub mod policy;

compat::module_with_authors! {
    type: VhostPoll,
    name: "vhost_poll",
    authors: "The vhost-poll developers",
    description: "Per-virtqueue adaptive polling for vhost",
    license: "GPL",
    params: {
        poll_start_rate: u32 {
            default: 0,
            permissions: 0o644,
            description: "Kicks in one jiffy that start polling a virtqueue (0 = never poll)",
        },
        poll_stop_idle: u32 {
            default: 2,
            permissions: 0o644,
            description: "Stop polling a virtqueue after this many jiffies without new work",
        },
        poll_stop_idle_max: u32 {
            default: 16,
            permissions: 0o644,
            description: "Longest idle window (jiffies) of a vq that keeps coming back to polling",
        },
        poll_threads: u32 {
            default: 1,
            permissions: 0o644,
            description: "Polling threads that may share the polled vqs (1 to 8)",
        },
        poll_min_gain: u32 {
            default: 16,
            permissions: 0o644,
            description: "Kicks per 1000 buffers polling must save to keep a vq (0 = keep all)",
        },
        poll_max_kick_cost: u32 {
            default: 0,
            permissions: 0o644,
            description: "Most CPU (us) per kick saved while others want the CPU (0 = no limit)",
        },
        poll_max_nap: u32 {
            default: 0,
            permissions: 0o644,
            description: "Longest sleep (us) between passes once the rings are quiet (0 = spin)",
        },
        poll_stall_us: u32 {
            default: 5000,
            permissions: 0o644,
            description: "Longest (us) a polling thread may leave a vq unwatched (100 to 1000000)",
        },
        poll_max_workers: u32 {
            default: 0,
            permissions: 0o644,
            description: "Most vhost workers polling at once, host-wide (0 = one per online CPU)",
        },
        poll_cpus: cpulist {
            default: "",
            permissions: 0o644,
            description: "CPUs of the polling threads, one per CPU in order (empty = anywhere)",
        },
    },
}

/// The module. Fields drop in order: vhost first (every vq back to
/// notification mode, by the still running threads), then the wake-ups on
/// a write of `poll_cpus` or a CPU going or coming, then the first thread's
/// thread (which stops the others), then the counters.
struct VhostPoll {
    _registration: Registration<shared::Shared>,
    _cpus_watch: CpuListWatch,
    _first: KThread,
    _stats: Option<stats::Stats>,
}

impl kernel::Module for VhostPoll {
    fn init(module: &'static ThisModule) -> Result<Self> {
        compat::init();
        // The thread first: the shared state keeps its task, to wake it.
        let handoff = handoff::Handoff::new()?;
        let thread_handoff = handoff.clone();
        let first = KThread::run(c_str!("vhost-poll"), move || {
            poll_loop::run_first(thread_handoff)
        })
        .inspect_err(|e| pr_err!("cannot start the vhost-poll thread: {:?}\n", e))?;
        let shared = shared::Shared::new(first.task().into())?;
        handoff.give(shared.clone());
        shared.first.thread.waker.wake();
        let cpus_watch = module_parameters::poll_cpus
            .watch(module, first.task().into())
            .inspect_err(|e| pr_err!("cannot follow poll_cpus and CPU hotplug: {:?}\n", e))?;
        let stats = stats::Stats::new(&shared)
            .inspect_err(|e| pr_warn!("no counters in debugfs: {:?}\n", e))
            .ok();
        let registration = Registration::new(shared).inspect_err(|e| {
            pr_err!(
                "cannot register with vhost (another poller loaded?): {:?}\n",
                e
            )
        })?;
        pr_info!(
            "loaded: poll_start_rate={} poll_stop_idle={}\n",
            module_parameters::poll_start_rate.value(),
            module_parameters::poll_stop_idle.value()
        );
        Ok(VhostPoll {
            _registration: registration,
            _cpus_watch: cpus_watch,
            _first: first,
            _stats: stats,
        })
    }
}

impl Drop for VhostPoll {
    fn drop(&mut self) {
        pr_info!("unloaded\n");
    }
}
