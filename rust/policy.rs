// SPDX-License-Identifier: GPL-2.0

//! The polling policy, with no kernel types: when a virtqueue starts and
//! stops being polled, and in which order the polled ones are visited.
//!
//! The module includes this file as `mod policy`; `rust/Cargo.toml` builds
//! it as a host crate too, so `cargo test` checks it in milliseconds.
//! Time is in jiffies, as a wrapping `usize`.

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

/// Counts events (kicks) per jiffy, lock-free, from any context.
///
/// One jiffy is the window: the count restarts at the first event of a
/// new jiffy. Concurrent events at a jiffy boundary may be undercounted
/// by the events that race with the restart; the rate is a trigger, not
/// an account.
pub struct RateTracker {
    window: AtomicUsize,
    count: AtomicU32,
}

impl RateTracker {
    /// A tracker that has seen no event.
    pub const fn new() -> Self {
        Self {
            // Not a jiffy any first event can have: the first event always
            // opens a window (see `record`).
            window: AtomicUsize::new(usize::MAX),
            count: AtomicU32::new(0),
        }
    }

    /// Records one event at jiffy `now` and returns how many events the
    /// jiffy `now` has had, this one included.
    ///
    /// Only equality of jiffies is compared, so wrap-around is harmless.
    pub fn record(&self, now: usize) -> u32 {
        let window = self.window.load(Relaxed);
        if window == now && self.count.load(Relaxed) != 0 {
            return self.count.fetch_add(1, Relaxed).saturating_add(1);
        }
        if self
            .window
            .compare_exchange(window, now, Relaxed, Relaxed)
            .is_ok()
        {
            self.count.store(1, Relaxed);
            1
        } else {
            // Another event opened the window of `now` first.
            self.count.fetch_add(1, Relaxed).saturating_add(1)
        }
    }
}

impl Default for RateTracker {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether `count` events in one jiffy start polling at `poll_start_rate`.
/// A rate of 0 never does.
pub fn starts_polling(count: u32, poll_start_rate: u32) -> bool {
    poll_start_rate != 0 && count >= poll_start_rate
}

/// When a polled virtqueue had its last work, to decide when it stops.
#[derive(Clone, Copy, Debug)]
pub struct Idle {
    last_work: usize,
    empty_visits: u32,
}

impl Idle {
    /// A virtqueue entering poll mode at jiffy `now` counts as busy then.
    pub fn new(now: usize) -> Self {
        Self {
            last_work: now,
            empty_visits: 0,
        }
    }

    /// A visit at jiffy `now` found work.
    pub fn work(&mut self, now: usize) {
        self.last_work = now;
        self.empty_visits = 0;
    }

    /// A visit found no work.
    pub fn empty(&mut self) {
        self.empty_visits = self.empty_visits.saturating_add(1);
    }

    /// Whether a virtqueue without work for `poll_stop_idle` jiffies, and
    /// found empty at least once since its last work, stops being polled
    /// at jiffy `now`. Differences of jiffies wrap, like `time_after()`.
    pub fn stops(&self, now: usize, poll_stop_idle: u32) -> bool {
        self.empty_visits > 0 && now.wrapping_sub(self.last_work) >= poll_stop_idle as usize
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_counts_within_one_jiffy() {
        let r = RateTracker::new();
        assert_eq!(r.record(100), 1);
        assert_eq!(r.record(100), 2);
        assert_eq!(r.record(100), 3);
    }

    #[test]
    fn rate_restarts_at_a_new_jiffy() {
        let r = RateTracker::new();
        for _ in 0..10 {
            r.record(5);
        }
        assert_eq!(r.record(6), 1);
        assert_eq!(r.record(6), 2);
        // Going back (a stale reader) also opens a fresh window.
        assert_eq!(r.record(5), 1);
    }

    #[test]
    fn rate_survives_jiffies_wrap() {
        let r = RateTracker::new();
        assert_eq!(r.record(usize::MAX - 1), 1);
        assert_eq!(r.record(usize::MAX), 1);
        assert_eq!(r.record(usize::MAX), 2);
        assert_eq!(r.record(0), 1);
        assert_eq!(r.record(0), 2);
        assert_eq!(r.record(1), 1);
    }

    #[test]
    fn rate_first_event_at_initial_window_value() {
        // The initial window is usize::MAX: an event at that jiffy must
        // still count from 1, not continue a count that never started.
        let r = RateTracker::new();
        assert_eq!(r.record(usize::MAX), 1);
        assert_eq!(r.record(usize::MAX), 2);
    }

    #[test]
    fn rate_exactly_at_threshold_starts() {
        let r = RateTracker::new();
        let rate = 4;
        let counts: Vec<u32> = (0..4).map(|_| r.record(7)).collect();
        assert_eq!(counts, [1, 2, 3, 4]);
        assert!(!starts_polling(counts[2], rate));
        assert!(starts_polling(counts[3], rate));
    }

    #[test]
    fn rate_zero_never_starts() {
        assert!(!starts_polling(0, 0));
        assert!(!starts_polling(u32::MAX, 0));
        assert!(starts_polling(1, 1));
    }

    #[test]
    fn rate_below_threshold_across_jiffies_never_starts() {
        // 3 per jiffy for 1000 jiffies against a rate of 4.
        let r = RateTracker::new();
        for j in 0..1000usize {
            for _ in 0..3 {
                assert!(!starts_polling(r.record(j), 4));
            }
        }
    }

    #[test]
    fn parameter_change_mid_stream() {
        // The rate is read per event: lowering it starts polling at once,
        // raising it stops the next trigger, 0 disables.
        let r = RateTracker::new();
        let mut rate = 10;
        assert!(!starts_polling(r.record(1), rate));
        assert!(!starts_polling(r.record(1), rate));
        rate = 3;
        assert!(starts_polling(r.record(1), rate));
        rate = 0;
        assert!(!starts_polling(r.record(1), rate));
        rate = 100;
        assert!(!starts_polling(r.record(1), rate));
    }

    #[test]
    fn rate_counts_from_many_threads() {
        use std::sync::Arc;
        let r = Arc::new(RateTracker::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let r = Arc::clone(&r);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        r.record(42);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Within one jiffy no event is lost.
        assert_eq!(r.record(42), 4001);
    }

    #[test]
    fn idle_stops_after_poll_stop_idle_jiffies() {
        let mut idle = Idle::new(1000);
        idle.empty();
        assert!(!idle.stops(1000, 2));
        assert!(!idle.stops(1001, 2));
        assert!(idle.stops(1002, 2));
        idle.work(1002);
        assert!(!idle.stops(1003, 2));
        idle.empty();
        assert!(idle.stops(1004, 2));
    }

    #[test]
    fn idle_needs_an_empty_visit() {
        let mut idle = Idle::new(0);
        // Work at every visit: never stops, however long.
        idle.work(50);
        assert!(!idle.stops(500, 2));
        idle.empty();
        assert!(idle.stops(500, 2));
    }

    #[test]
    fn idle_zero_stops_at_first_empty_visit() {
        let mut idle = Idle::new(9);
        assert!(!idle.stops(9, 0));
        idle.empty();
        assert!(idle.stops(9, 0));
    }

    #[test]
    fn idle_survives_jiffies_wrap() {
        let mut idle = Idle::new(usize::MAX);
        idle.empty();
        assert!(!idle.stops(usize::MAX, 2));
        assert!(!idle.stops(0, 2));
        assert!(idle.stops(1, 2));
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
