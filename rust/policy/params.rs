// SPDX-License-Identifier: GPL-2.0

//! The module parameters as one decision sees them.

use super::threads::threads_wanted;
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
    pub threads_written: u32,
    /// The CPUs `poll_cpus` lists that are online (as the first thread last
    /// read them): the most threads that may run, one per CPU. 0 (the list
    /// empty, or none of its CPUs online), no such bound.
    pub cpus: u32,
    /// `poll_max_kick_cost`: the most CPU, in microseconds, a thread may
    /// spend per kick it saves while others want its CPU; 0, no limit.
    pub max_kick_cost_us: u32,
    /// `poll_max_nap`: the longest nap, in microseconds, of a thread whose
    /// rings have been quiet (`Quiet`); 0, it never naps.
    pub max_nap_us: u32,
    /// `poll_stall_us`, as written (see [`Params::stall_us`]).
    pub stall_us_written: u32,
    /// No CPU given to polling (`poll_cpus` empty):
    /// a virtqueue started now is polled by its own vhost worker, and its
    /// thread only counts its work.
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
        threads_written: 1,
        cpus: 0,
        max_kick_cost_us: 0,
        max_nap_us: 0,
        stall_us_written: 5000,
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

    /// The shortest bound of vhost's watchdog (µs).
    pub const STALL_US_MIN: u32 = 100;
    /// The longest.
    pub const STALL_US_MAX: u32 = 1_000_000;

    /// The longest a thread may leave a virtqueue it polls without a look
    /// before vhost's watchdog hands it back, in µs: `poll_stall_us`, a
    /// value out of [`Params::STALL_US_MIN`] to [`Params::STALL_US_MAX`]
    /// counting as the nearer of the two. Taken at each start.
    pub fn stall_us(&self) -> u32 {
        self.stall_us_written
            .clamp(Self::STALL_US_MIN, Self::STALL_US_MAX)
    }

    /// How many polling threads should run: `poll_threads`, but
    /// no more than the CPUs given to them, so that two never share one
    /// (each would see the other as contention, and both hand everything
    /// back).
    pub fn threads(&self) -> usize {
        let wanted = threads_wanted(self.threads_written);
        match usize::try_from(self.cpus) {
            Ok(0) | Err(_) => wanted,
            Ok(cpus) => wanted.min(cpus),
        }
    }
}

impl Default for Params {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_bounded_by_the_online_listed_cpus() {
        let mut p = Params {
            threads_written: 4,
            ..Default::default()
        };
        assert_eq!(p.threads(), 4, "no list: poll_threads alone");
        p.cpus = 2;
        assert_eq!(p.threads(), 2);
        p.cpus = 8;
        assert_eq!(p.threads(), 4);
        p.threads_written = 0;
        assert_eq!(p.threads(), 1);
    }

    #[test]
    fn stall_bound_out_of_range_counts_as_the_nearer_limit() {
        let mut p = Params::DEFAULT;
        assert_eq!(p.stall_us(), 5000);
        p.stall_us_written = 0;
        assert_eq!(p.stall_us(), Params::STALL_US_MIN);
        p.stall_us_written = u32::MAX;
        assert_eq!(p.stall_us(), Params::STALL_US_MAX);
    }
}
