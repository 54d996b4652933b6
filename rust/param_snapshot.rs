// SPDX-License-Identifier: GPL-2.0

//! The module parameters, read into one snapshot per decision.

use crate::policy::{Bounds, Params};

/// The parameters as they are now. Each is read once: a decision made with
/// the snapshot sees no half of a concurrent write to several.
pub(crate) fn now() -> Params {
    use crate::module_parameters as m;
    Params {
        start_rate: m::poll_start_rate.value(),
        bounds: Bounds {
            min: m::poll_stop_idle.value(),
            max: m::poll_stop_idle_max.value(),
        },
        min_gain: m::poll_min_gain.value(),
        threads_written: m::poll_threads.value(),
        cpus: crate::placement::cpus_online_given(),
        max_kick_cost_us: m::poll_max_kick_cost.value(),
        max_nap_us: m::poll_max_nap.value(),
        stall_us_written: m::poll_stall_us.value(),
        in_worker: !crate::placement::cpus_given(),
        max_workers: m::poll_max_workers.value(),
    }
}
