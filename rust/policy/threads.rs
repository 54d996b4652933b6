// SPDX-License-Identifier: GPL-2.0

//! The polling threads: how many, and which one a virtqueue goes
//! to. (The order of visits within a pass is the thread's own: its ring
//! turns by one a pass, `ring.rs` and `Slots::turn`.)

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

/// Which CPU thread `thread` runs on, with `poll_cpus` listing `listed` (in
/// ascending order) and `online` telling which CPUs are online now: the
/// threads go one per online listed CPU, in order. `None` (anywhere a kernel
/// thread may run) for an empty list, one with no CPU online, or a thread
/// beyond the online listed CPUs: no more threads run than there are
/// (`Params::threads`), so such a thread is on its way out, and is given no
/// CPU that another thread polls on.
///
/// So a CPU going offline moves the threads after it down the list, and the
/// last one stops; its coming back starts it again.
pub fn thread_cpu<I>(thread: usize, listed: I, online: impl Fn(u32) -> bool) -> Option<u32>
where
    I: Iterator<Item = u32> + Clone,
{
    listed.filter(|&cpu| online(cpu)).nth(thread)
}

/// How many of the CPUs `listed` are online, as `online` says: the most
/// threads that may run ([`Params::cpus`](super::Params::cpus)).
pub fn cpus_online<I>(listed: I, online: impl Fn(u32) -> bool) -> u32
where
    I: Iterator<Item = u32>,
{
    u32::try_from(listed.filter(|&cpu| online(cpu)).count()).unwrap_or(u32::MAX)
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
    fn threads_go_one_per_listed_cpu_in_order_and_never_share_one() {
        let listed = [2u32, 3, 5];
        let all = |_| true;
        let cpus: Vec<_> = (0..5)
            .map(|l| thread_cpu(l, listed.iter().copied(), all))
            .collect();
        assert_eq!(cpus, [Some(2), Some(3), Some(5), None, None]);
        assert_eq!(cpus_online(listed.iter().copied(), all), 3);
    }

    #[test]
    fn no_list_or_nothing_online_is_anywhere() {
        assert_eq!(thread_cpu(0, [].iter().copied(), |_| true), None);
        assert_eq!(thread_cpu(1, [1u32, 2].iter().copied(), |_| false), None);
        assert_eq!(cpus_online([1u32, 2].iter().copied(), |_| false), 0);
    }

    #[test]
    fn an_offline_cpu_leaves_one_thread_fewer_and_none_stacked() {
        let listed = [0u32, 1, 2];
        let up = |cpu| cpu != 1;
        let cpus: Vec<_> = (0..3)
            .map(|l| thread_cpu(l, listed.iter().copied(), up))
            .collect();
        assert_eq!(cpus, [Some(0), Some(2), None]);
        assert_eq!(cpus_online(listed.iter().copied(), up), 2);
        // And back once it is online again.
        assert_eq!(thread_cpu(1, listed.iter().copied(), |_| true), Some(1));
        assert_eq!(thread_cpu(2, listed.iter().copied(), |_| true), Some(2));
    }
}
