// SPDX-License-Identifier: GPL-2.0

//! The polling threads (lanes): how many, which one a virtqueue goes
//! to, and the order of visits within a pass.

/// Visits `len` items once per pass, each pass starting one further than
/// the last, so that no item is always served first.
#[derive(Debug, Default)]
pub struct RoundRobin {
    start: usize,
    step: usize,
}

impl RoundRobin {
    /// A round robin at its first pass.
    pub const fn new() -> Self {
        Self { start: 0, step: 0 }
    }

    /// The index to visit next among `len` items, or `None` at the end of
    /// a pass (the next call begins the next pass). `len` may change
    /// between passes; within a pass the caller keeps it fixed.
    pub fn next(&mut self, len: usize) -> Option<usize> {
        if len == 0 || self.step >= len {
            self.step = 0;
            // `start < len` after the first pass, so `start + 1 <= len`.
            self.start = if len == 0 {
                0
            } else {
                (self.start % len + 1) % len
            };
            return None;
        }
        let index = (self.start % len + self.step) % len;
        // `step < len` (checked above): the sum cannot overflow.
        self.step += 1;
        Some(index)
    }
}

/// The most polling threads there may be (`poll_threads` above this
/// counts as this).
pub const THREADS_MAX: usize = 8;

/// How many polling threads `poll_threads` asks for: 0 counts as 1 (there
/// is always the first thread, which takes the kicks), and anything above
/// [`THREADS_MAX`] as [`THREADS_MAX`].
pub(super) fn threads_wanted(poll_threads: u32) -> usize {
    usize::try_from(poll_threads)
        .unwrap_or(THREADS_MAX)
        .clamp(1, THREADS_MAX)
}

/// One polling thread as placement sees it.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadLoad {
    /// Virtqueues it polls.
    pub polled: u32,
    /// Its recent passes competed for its CPU (see [`Contention`](super::Contention)): it has
    /// no time to spare for another virtqueue.
    pub contended: bool,
}

/// Which thread a virtqueue that reached the rate goes to: the one that
/// polls the fewest virtqueues among those with time to spare, the first
/// of them on a tie; `None` when every thread is contended, and the vq
/// stays with its own worker.
pub(super) fn place(threads: impl IntoIterator<Item = ThreadLoad>) -> Option<usize> {
    threads
        .into_iter()
        .enumerate()
        .filter(|(_, t)| !t.contended)
        .min_by_key(|&(i, t)| (t.polled, i))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(polled: u32, contended: bool) -> ThreadLoad {
        ThreadLoad { polled, contended }
    }

    #[test]
    fn threads_wanted_is_one_to_max() {
        assert_eq!(threads_wanted(0), 1);
        assert_eq!(threads_wanted(1), 1);
        assert_eq!(threads_wanted(3), 3);
        assert_eq!(threads_wanted(THREADS_MAX as u32), THREADS_MAX);
        assert_eq!(threads_wanted(u32::MAX), THREADS_MAX);
    }

    #[test]
    fn place_picks_the_least_loaded_first() {
        assert_eq!(
            place([load(2, false), load(1, false), load(1, false)]),
            Some(1)
        );
        assert_eq!(place([load(0, false), load(0, false)]), Some(0));
        assert_eq!(place([load(5, false)]), Some(0));
    }

    #[test]
    fn place_skips_contended_threads() {
        assert_eq!(place([load(0, true), load(3, false)]), Some(1));
        assert_eq!(place([load(0, true), load(0, true)]), None);
        assert_eq!(place([]), None);
    }

    #[test]
    fn round_robin_visits_each_once_per_pass() {
        let mut rr = RoundRobin::new();
        for _ in 0..5 {
            let mut seen: Vec<usize> = std::iter::from_fn(|| rr.next(4)).collect();
            seen.sort();
            assert_eq!(seen, [0, 1, 2, 3]);
        }
    }

    #[test]
    fn round_robin_rotates_the_first() {
        let mut rr = RoundRobin::new();
        let firsts: Vec<usize> = (0..6)
            .map(|_| {
                let first = rr.next(3).unwrap();
                while rr.next(3).is_some() {}
                first
            })
            .collect();
        assert_eq!(firsts, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn round_robin_handles_changing_and_empty_lists() {
        let mut rr = RoundRobin::new();
        assert_eq!(rr.next(0), None);
        assert_eq!(rr.next(0), None);
        let pass: Vec<usize> = std::iter::from_fn(|| rr.next(1)).collect();
        assert_eq!(pass, [0]);
        let mut pass: Vec<usize> = std::iter::from_fn(|| rr.next(5)).collect();
        pass.sort();
        assert_eq!(pass, [0, 1, 2, 3, 4]);
    }
}
