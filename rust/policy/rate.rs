// SPDX-License-Identifier: GPL-2.0

//! What a kick decides, lock-free from any context: its rate in the
//! current jiffy, and whether it may ask for a start.

use super::params::Params;
use super::time::Jiffy;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};

/// Counts events (kicks) per jiffy, lock-free, from any context.
///
/// One jiffy is the window: the count restarts at the first event of a
/// new jiffy. Without a race the count is exact. Events that race with a
/// restart are not: one whose increment lands between the restart of the
/// window and the store of its first count is lost, and one that read
/// the previous jiffy's window just before the restart adds to the old
/// count, so that it may return more than the jiffy's events (the old
/// count plus its own). The two first events of a fresh tracker can both
/// store 1. So the count is a trigger, not an account: a start may come
/// a few kicks early or late at a jiffy's edge.
pub(super) struct RateTracker {
    window: AtomicUsize,
    count: AtomicU32,
}

impl RateTracker {
    /// A tracker that has seen no event.
    pub(super) const fn new() -> Self {
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
    pub(super) fn record(&self, now: Jiffy) -> u32 {
        let now = now.raw();
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

impl RateTracker {
    /// The events of the jiffy `now` or of the one before, whichever had
    /// the last; 0 if older. Racy as [`RateTracker::record`] is.
    pub(super) fn recent(&self, now: Jiffy) -> u32 {
        let window = Jiffy::from_raw(self.window.load(Relaxed));
        if now.since(window) <= 1 {
            self.count.load(Relaxed)
        } else {
            0
        }
    }
}

impl Default for RateTracker {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether a virtqueue's kicks may ask the first thread to start polling it:
/// not before a jiffy the first thread set when it refused a start (the
/// virtqueue cools down, or every polling thread is contended). Without
/// it, each kick that reaches the rate while a start would be refused
/// wakes the first thread for nothing: at a rate of 1, once a jiffy per
/// virtqueue or more, which cost the thread 10% of a CPU in streams it
/// did not poll. Lock-free, from any context.
///
/// The two atomics are read apart: a kick racing with
/// [`StartGate::defer_until`] may ask once more, or not ask in the jiffy
/// it races in; the thread is not asked anything it cannot decide, and a
/// later kick asks again.
pub(super) struct StartGate {
    deferred: AtomicBool,
    /// The refusal holds even where refusals for want of gain do not
    /// (`poll_min_gain` 0): the budget of polling workers was full.
    firm: AtomicBool,
    not_before: AtomicUsize,
}

impl StartGate {
    /// A gate that lets every kick ask.
    pub(super) const fn new() -> Self {
        Self {
            deferred: AtomicBool::new(false),
            firm: AtomicBool::new(false),
            not_before: AtomicUsize::new(0),
        }
    }

    /// Kicks before `until` do not ask (a start was refused); with
    /// `firm`, not even where refusals for want of gain are not enforced.
    pub(super) fn defer_until(&self, until: Jiffy, firm: bool) {
        self.not_before.store(until.raw(), Relaxed);
        self.firm.store(firm, Relaxed);
        self.deferred.store(true, Relaxed);
    }

    /// Whether a kick at `now` may ask; `enforced` false (`poll_min_gain`
    /// 0: nothing is refused for want of gain) lets every kick ask but
    /// for a firm refusal.
    pub(super) fn allows(&self, now: Jiffy, enforced: bool) -> bool {
        if !self.deferred.load(Relaxed) || !(enforced || self.firm.load(Relaxed)) {
            return true;
        }
        if Jiffy::from_raw(self.not_before.load(Relaxed)).is_after(now) {
            return false;
        }
        // Passed: later kicks need not read the jiffy.
        self.deferred.store(false, Relaxed);
        true
    }
}

impl Default for StartGate {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether `count` events in one jiffy start polling at `poll_start_rate`.
/// A rate of 0 never does.
pub(super) fn starts_polling(count: u32, poll_start_rate: u32) -> bool {
    poll_start_rate != 0 && count >= poll_start_rate
}

/// A virtqueue's kicks as the policy sees them: their rate, and the
/// gate the thread closes when it refuses a start. Lock-free, O(1), from
/// any context (the kick hook runs with interrupts possibly off).
#[derive(Default)]
pub struct Kicks {
    rate: RateTracker,
    gate: StartGate,
}

impl Kicks {
    /// A virtqueue that has not been kicked.
    pub const fn new() -> Self {
        Self {
            rate: RateTracker::new(),
            gate: StartGate::new(),
        }
    }

    /// A kick in notification mode at `now`: whether it asks the thread
    /// for a start. It does when the jiffy's kicks reach `poll_start_rate`
    /// and the gate is open (or not enforced: `poll_min_gain` 0). With
    /// polling off the rate is not even counted.
    pub fn kick(&self, now: Jiffy, p: &Params) -> bool {
        if !p.polling_on() {
            return false;
        }
        let count = self.rate.record(now);
        starts_polling(count, p.start_rate) && self.gate.allows(now, p.hands_back())
    }

    /// Kicks before `until` do not ask: a start now would be refused.
    /// With `firm` (the budget of polling workers is full) not even where
    /// refusals for want of gain are not enforced (`poll_min_gain` 0).
    pub fn close_until(&self, until: Jiffy, firm: bool) {
        self.gate.defer_until(until, firm);
    }

    /// Its kicks in the jiffy `now`, or the one before: the rate a start
    /// request came with.
    pub fn rate(&self, now: Jiffy) -> u32 {
        self.rate.recent(now)
    }
}

#[cfg(test)]
mod tests {
    use super::super::time::tests::j;
    use super::*;

    #[test]
    fn rate_counts_within_one_jiffy() {
        let r = RateTracker::new();
        assert_eq!(r.record(j(100)), 1);
        assert_eq!(r.record(j(100)), 2);
        assert_eq!(r.record(j(100)), 3);
    }

    #[test]
    fn rate_restarts_at_a_new_jiffy() {
        let r = RateTracker::new();
        for _ in 0..10 {
            r.record(j(5));
        }
        assert_eq!(r.record(j(6)), 1);
        assert_eq!(r.record(j(6)), 2);
        // Going back (a stale reader) also opens a fresh window.
        assert_eq!(r.record(j(5)), 1);
    }

    #[test]
    fn rate_survives_jiffies_wrap() {
        let r = RateTracker::new();
        assert_eq!(r.record(j(usize::MAX - 1)), 1);
        assert_eq!(r.record(j(usize::MAX)), 1);
        assert_eq!(r.record(j(usize::MAX)), 2);
        assert_eq!(r.record(j(0)), 1);
        assert_eq!(r.record(j(0)), 2);
        assert_eq!(r.record(j(1)), 1);
    }

    #[test]
    fn rate_first_event_at_initial_window_value() {
        // The initial window is usize::MAX: an event at that jiffy must
        // still count from 1, not continue a count that never started.
        let r = RateTracker::new();
        assert_eq!(r.record(j(usize::MAX)), 1);
        assert_eq!(r.record(j(usize::MAX)), 2);
    }

    #[test]
    fn rate_exactly_at_threshold_starts() {
        let r = RateTracker::new();
        let rate = 4;
        let counts: Vec<u32> = (0..4).map(|_| r.record(j(7))).collect();
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
        for t in 0..1000usize {
            for _ in 0..3 {
                assert!(!starts_polling(r.record(j(t)), 4));
            }
        }
    }

    #[test]
    fn parameter_change_mid_stream() {
        // The rate is read per event: lowering it starts polling at once,
        // raising it stops the next trigger, 0 disables.
        let r = RateTracker::new();
        let mut rate = 10;
        assert!(!starts_polling(r.record(j(1)), rate));
        assert!(!starts_polling(r.record(j(1)), rate));
        rate = 3;
        assert!(starts_polling(r.record(j(1)), rate));
        rate = 0;
        assert!(!starts_polling(r.record(j(1)), rate));
        rate = 100;
        assert!(!starts_polling(r.record(j(1)), rate));
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
                        r.record(j(42));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Within one jiffy only the first events can be lost: those of
        // the other threads that race with the first store of the count
        // (at most one each), never one counted twice.
        let n = r.record(j(42));
        assert!((4001 - 3..=4001).contains(&n), "counted {n}");
    }

    #[test]
    fn gate_holds_kicks_until_the_jiffy() {
        let g = StartGate::new();
        assert!(g.allows(j(5), true));
        g.defer_until(j(10), false);
        assert!(!g.allows(j(5), true));
        assert!(!g.allows(j(9), true));
        // Not enforced (poll_min_gain 0): every kick asks.
        assert!(g.allows(j(9), false));
        assert!(g.allows(j(10), true));
        // Once passed, open until deferred again, whatever the jiffy.
        assert!(g.allows(j(3), true));
        g.defer_until(j(usize::MAX).plus(2), false);
        assert!(!g.allows(j(usize::MAX), true));
        assert!(g.allows(j(1), true));
    }

    #[test]
    fn a_firm_refusal_holds_even_where_gain_is_not_enforced() {
        let g = StartGate::new();
        g.defer_until(j(10), true);
        assert!(!g.allows(j(9), false));
        assert!(!g.allows(j(9), true));
        assert!(g.allows(j(10), false));
        // The next refusal decides again.
        g.defer_until(j(20), false);
        assert!(g.allows(j(11), false));
    }

    #[test]
    fn the_rate_of_a_start_request_is_its_jiffy_or_the_one_before() {
        let k = Kicks::new();
        assert_eq!(k.rate(j(5)), 0);
        let p = Params {
            start_rate: 100,
            ..Params::DEFAULT
        };
        for _ in 0..7 {
            k.kick(j(5), &p);
        }
        assert_eq!(k.rate(j(5)), 7);
        assert_eq!(k.rate(j(6)), 7);
        assert_eq!(k.rate(j(7)), 0);
    }
}
