// SPDX-License-Identifier: GPL-2.0

//! The polling threads (lanes): how many, and which one a virtqueue goes
//! to. (The order of visits within a pass is the table's: each lane's
//! ring turns by one a pass, `table.rs`.)

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
}
