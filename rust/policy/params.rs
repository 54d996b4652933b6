// SPDX-License-Identifier: GPL-2.0

//! The module parameters as one decision sees them.

use super::lanes::threads_wanted;
use super::window::Bounds;

/// The parameters, read once for one decision: a write from user space
/// takes effect at the next decision, and no decision sees half of one.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// `poll_start_rate`: kicks in one jiffy that start polling a
    /// virtqueue; 0 switches polling off.
    pub start_rate: u32,
    /// `poll_stop_idle` and `poll_stop_idle_max`: the idle window's bounds.
    pub bounds: Bounds,
    /// `poll_min_gain`: kicks per 1000 buffers polling must save; 0 keeps
    /// every polled virtqueue, and refuses no start.
    pub min_gain: u32,
    /// `poll_threads`, as written.
    pub threads: u32,
    /// `poll_max_kick_cost`: the most CPU, in microseconds, a lane may
    /// spend per kick it saves while others want its CPU; 0, no limit.
    pub max_kick_cost_us: u32,
    /// `poll_max_nap`: the longest nap, in microseconds, of a lane whose
    /// rings have been quiet (`Quiet`); 0, it never naps.
    pub max_nap_us: u32,
    /// `poll_in_worker`, and no CPU given to polling (`poll_cpus` empty):
    /// a virtqueue started now is polled by its own vhost worker, and its
    /// lane only counts its work.
    pub in_worker: bool,
    /// `poll_max_workers`: the most vhost workers that may poll their own
    /// virtqueues at once, host-wide; 0, one per online CPU.
    pub max_workers: u32,
}

impl Params {
    /// The defaults of the module parameters.
    pub const DEFAULT: Self = Self {
        start_rate: 0,
        bounds: Bounds { min: 2, max: 16 },
        min_gain: 16,
        threads: 1,
        max_kick_cost_us: 0,
        max_nap_us: 0,
        in_worker: true,
        max_workers: 0,
    };

    /// Whether virtqueues may be polled at all.
    pub fn polling_on(&self) -> bool {
        self.start_rate != 0
    }

    /// Whether what does not pay goes back to notification mode (and a
    /// start that would not pay is refused): not with `poll_min_gain` 0.
    pub fn hands_back(&self) -> bool {
        self.min_gain != 0
    }

    /// How many lanes (polling threads) should run.
    pub fn lanes(&self) -> usize {
        threads_wanted(self.threads)
    }
}

impl Default for Params {
    fn default() -> Self {
        Self::DEFAULT
    }
}
