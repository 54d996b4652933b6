// SPDX-License-Identifier: GPL-2.0

//! The polling policy, with no kernel types: when a virtqueue starts and
//! stops being polled, and in which order the polled ones are visited.
//!
//! The module includes this file as `mod policy`; `rust/Cargo.toml` builds
//! it as a host crate too, so `cargo test` checks it in milliseconds.
//! Time is in jiffies, as [`Jiffy`]: a counter that wraps, compared only
//! the way `time_after()` compares.

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

/// A point in time, in jiffies.
///
/// The counter wraps, so two jiffies are ordered only by their distance:
/// [`Jiffy::since`] and [`Jiffy::is_after`] are right whenever the two are
/// less than half the counter's range apart (`time_after()`'s rule). The
/// kernel's `kernel::time::JiffiesInstant` has the same rule; this file
/// builds on the host too, so it has its own, and `clock::now()` makes one
/// from the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Jiffy(usize);

impl Jiffy {
    /// The jiffy whose counter reads `raw`.
    pub const fn from_raw(raw: usize) -> Self {
        Self(raw)
    }

    /// The counter's value.
    pub const fn raw(self) -> usize {
        self.0
    }

    /// Jiffies from `earlier` to `self`; 0 if `earlier` is the later one.
    pub const fn since(self, earlier: Jiffy) -> usize {
        if earlier.is_after(self) {
            0
        } else {
            self.0.wrapping_sub(earlier.0)
        }
    }

    /// Whether `self` comes after `other`.
    pub const fn is_after(self, other: Jiffy) -> bool {
        // The two's complement difference is negative exactly when `self`
        // is ahead of `other` by less than half the range.
        (other.0.wrapping_sub(self.0) as isize) < 0
    }
}

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
    pub fn record(&self, now: Jiffy) -> u32 {
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
    last_work: Jiffy,
    empty_visits: u32,
    /// Whether any visit of this poll period took buffers.
    took: bool,
}

impl Idle {
    /// A virtqueue entering poll mode at jiffy `now` counts as busy then.
    pub fn new(now: Jiffy) -> Self {
        Self {
            last_work: now,
            empty_visits: 0,
            took: false,
        }
    }

    /// A visit at jiffy `now` found work.
    pub fn work(&mut self, now: Jiffy) {
        self.last_work = now;
        self.empty_visits = 0;
        self.took = true;
    }

    /// A visit found no work.
    pub fn empty(&mut self) {
        self.empty_visits = self.empty_visits.saturating_add(1);
    }

    /// Whether a virtqueue without work for `window` jiffies, and found
    /// empty at least once since its last work, stops being polled at
    /// jiffy `now`.
    pub fn stops(&self, now: Jiffy, window: u32) -> bool {
        self.empty_visits > 0 && now.since(self.last_work) >= window as usize
    }

    /// Whether a visit of this poll period took buffers: whether polling
    /// paid at all.
    pub fn took(&self) -> bool {
        self.took
    }
}

/// The bounds of the idle window: the `poll_stop_idle` and
/// `poll_stop_idle_max` parameters, read when used.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// The shortest window, and the first of every virtqueue.
    pub min: u32,
    /// The longest; below `min` it is `min`, and the window does not move.
    pub max: u32,
}

impl Bounds {
    fn clamp(self, jiffies: u32) -> u32 {
        jiffies.clamp(self.min, self.max.max(self.min))
    }
}

/// How many jiffies without work end a virtqueue's poll period: its idle
/// window. It moves between [`Bounds::min`] and [`Bounds::max`], the way
/// KVM's halt polling moves its window:
///
/// - It doubles (0 becomes 1) when the virtqueue enters poll mode again
///   within `max` jiffies of leaving it for want of work: it left too
///   soon, and each such exit cost kicks again.
/// - It halves when the virtqueue comes back later than that, and when a
///   whole poll period took no buffer: polling did not pay.
/// - It halves after every [`Window::DECAY`] times `max` jiffies a
///   virtqueue stays in poll mode with work: the churn that grew it is
///   that long past, and the window is what an idle virtqueue costs
///   before the thread can sleep.
/// - Exits for other reasons (quiesce, switched off, an error) leave it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    /// The window, before clamping to the bounds of the moment.
    jiffies: u32,
    /// When the virtqueue last left poll mode for want of work, after a
    /// period that paid.
    idle_exit: Option<Jiffy>,
    /// When the window last moved, or the virtqueue entered poll mode.
    moved: Option<Jiffy>,
}

impl Window {
    /// How many times `max` jiffies of work in poll mode halve the window.
    pub const DECAY: usize = 4;

    /// A virtqueue's first window: `Bounds::min`.
    pub const fn new() -> Self {
        Self {
            jiffies: 0,
            idle_exit: None,
            moved: None,
        }
    }

    /// The window, within `b`.
    pub fn jiffies(&self, b: Bounds) -> u32 {
        b.clamp(self.jiffies)
    }

    /// The virtqueue enters poll mode at `now`.
    pub fn enter(&mut self, now: Jiffy, b: Bounds) {
        let w = self.jiffies(b);
        self.jiffies = b.clamp(match self.idle_exit.take() {
            Some(exit) if now.since(exit) <= b.max as usize => w.saturating_mul(2).max(1),
            Some(_) => w / 2,
            None => w,
        });
        self.moved = Some(now);
    }

    /// A visit at `now` found work, in poll mode.
    pub fn work(&mut self, now: Jiffy, b: Bounds) {
        let decay = Self::DECAY.saturating_mul(b.max as usize).max(1);
        if self.moved.is_some_and(|m| now.since(m) >= decay) {
            self.jiffies = b.clamp(self.jiffies(b) / 2);
            self.moved = Some(now);
        }
    }

    /// The virtqueue left poll mode at `now`: for want of work if `idle`;
    /// `idle_state` is the period's.
    pub fn exit(&mut self, now: Jiffy, idle: bool, idle_state: &Idle, b: Bounds) {
        let w = self.jiffies(b);
        if !idle_state.took() {
            self.jiffies = b.clamp(w / 2);
        }
        self.idle_exit = (idle && idle_state.took()).then_some(now);
    }
}

/// How the worker pauses after a pass: it steps aside when other tasks
/// wait for its CPU and its passes do not pay, the way KVM's halt polling
/// shrinks its window when polling does not pay, and polls flat out again
/// once they do.
///
/// A pass *pays* when it queued a handler: buffers were waiting and no
/// handler was running or queued for them, so the poller did what a kick
/// would have done. A pass that found handlers busy, or nothing, did not.
///
/// - A pass that pays ends the backoff, and does not pause.
/// - One that does not pay, with other tasks waiting for the CPU, sleeps:
///   [`StepAside::MIN_US`] the first time, twice as long each next time,
///   up to [`StepAside::MAX_US`].
/// - One that does not pay, with the CPU to itself, halves the backoff; it
///   pauses briefly, busy, if it found no work at all (as before).
#[derive(Debug, Default)]
pub struct StepAside {
    us: u32,
}

/// What the worker does after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Goes on at once.
    None,
    /// Waits a moment, keeping the CPU.
    Busy,
    /// Sleeps this many microseconds: the CPU is others'.
    Sleep(u32),
}

impl StepAside {
    /// The first sleep of a backoff, in microseconds.
    pub const MIN_US: u32 = 16;
    /// The longest, well under a jiffy at any `HZ`, so that an idle
    /// window is still measured in visits.
    pub const MAX_US: u32 = 512;

    /// A worker that has not stepped aside.
    pub const fn new() -> Self {
        Self { us: 0 }
    }

    /// The pause after a pass that `paid` (queued a handler), `found_work`
    /// (some handler took buffers), while other tasks were or were not
    /// waiting for the CPU (`contended`).
    pub fn after_pass(&mut self, paid: bool, found_work: bool, contended: bool) -> Pause {
        if paid {
            self.us = 0;
            return Pause::None;
        }
        if contended {
            self.us = self.us.saturating_mul(2).clamp(Self::MIN_US, Self::MAX_US);
            return Pause::Sleep(self.us);
        }
        self.us /= 2;
        if found_work {
            Pause::None
        } else {
            Pause::Busy
        }
    }
}

/// Whether the worker has CPU time left for more virtqueues.
///
/// It has none, it is *saturated*, when for [`Saturation::JIFFIES`] jiffies
/// in a row every pass found work, none paused or stepped aside, and
/// other tasks were waiting for its CPU at the end of each: it competes
/// for the CPU and never runs out of work. A virtqueue that then reaches
/// `poll_start_rate` is left in notification mode, where its own worker
/// serves it in parallel, and counted as refused.
#[derive(Debug, Default)]
pub struct Saturation {
    /// Since when every pass was busy and contended.
    busy_since: Option<Jiffy>,
}

impl Saturation {
    /// How long the worker must be busy and contended to be saturated.
    pub const JIFFIES: usize = 2;

    /// Not saturated.
    pub const fn new() -> Self {
        Self { busy_since: None }
    }

    /// A pass ended at `now`: it `rested` (paused or stepped aside) or
    /// not, with others waiting for the CPU (`contended`) or not.
    pub fn after_pass(&mut self, now: Jiffy, rested: bool, contended: bool) {
        if rested || !contended {
            self.busy_since = None;
        } else if self.busy_since.is_none() {
            self.busy_since = Some(now);
        }
    }

    /// The worker slept: it had time left.
    pub fn rested(&mut self) {
        self.busy_since = None;
    }

    /// Whether the worker is saturated at `now`.
    pub fn saturated(&self, now: Jiffy) -> bool {
        self.busy_since
            .is_some_and(|since| now.since(since) >= Self::JIFFIES)
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

    fn j(raw: usize) -> Jiffy {
        Jiffy::from_raw(raw)
    }

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
        // Within one jiffy no event is lost.
        assert_eq!(r.record(j(42)), 4001);
    }

    #[test]
    fn idle_stops_after_poll_stop_idle_jiffies() {
        let mut idle = Idle::new(j(1000));
        idle.empty();
        assert!(!idle.stops(j(1000), 2));
        assert!(!idle.stops(j(1001), 2));
        assert!(idle.stops(j(1002), 2));
        idle.work(j(1002));
        assert!(!idle.stops(j(1003), 2));
        idle.empty();
        assert!(idle.stops(j(1004), 2));
    }

    #[test]
    fn idle_needs_an_empty_visit() {
        let mut idle = Idle::new(j(0));
        // Work at every visit: never stops, however long.
        idle.work(j(50));
        assert!(!idle.stops(j(500), 2));
        idle.empty();
        assert!(idle.stops(j(500), 2));
    }

    #[test]
    fn idle_zero_stops_at_first_empty_visit() {
        let mut idle = Idle::new(j(9));
        assert!(!idle.stops(j(9), 0));
        idle.empty();
        assert!(idle.stops(j(9), 0));
    }

    #[test]
    fn idle_survives_jiffies_wrap() {
        let mut idle = Idle::new(j(usize::MAX));
        idle.empty();
        assert!(!idle.stops(j(usize::MAX), 2));
        assert!(!idle.stops(j(0), 2));
        assert!(idle.stops(j(1), 2));
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

    #[test]
    fn jiffies_compare_across_the_wrap() {
        assert!(j(0).is_after(j(usize::MAX)));
        assert!(!j(usize::MAX).is_after(j(0)));
        assert!(!j(5).is_after(j(5)));
        assert_eq!(j(1).since(j(usize::MAX - 1)), 3);
        // Earlier than what it is measured from: no time has passed.
        assert_eq!(j(5).since(j(6)), 0);
    }

    const B: Bounds = Bounds { min: 2, max: 16 };

    fn period(w: &mut Window, enter: usize, took: bool, exit: usize, idle: bool) {
        w.enter(j(enter), B);
        let mut state = Idle::new(j(enter));
        if took {
            state.work(j(enter));
        }
        w.exit(j(exit), idle, &state, B);
    }

    #[test]
    fn window_starts_at_the_minimum() {
        assert_eq!(Window::new().jiffies(B), 2);
        let zero = Bounds { min: 0, max: 8 };
        assert_eq!(Window::new().jiffies(zero), 0);
    }

    #[test]
    fn window_grows_when_the_vq_comes_back_soon() {
        let mut w = Window::new();
        period(&mut w, 100, true, 110, true);
        // Back 3 jiffies after an idle exit: left too soon.
        w.enter(j(113), B);
        assert_eq!(w.jiffies(B), 4);
        w.exit(j(120), true, &worked(120), B);
        w.enter(j(121), B);
        assert_eq!(w.jiffies(B), 8);
        w.exit(j(130), true, &worked(130), B);
        w.enter(j(131), B);
        assert_eq!(w.jiffies(B), 16);
        w.exit(j(140), true, &worked(140), B);
        w.enter(j(141), B);
        // Never past the maximum.
        assert_eq!(w.jiffies(B), 16);
    }

    fn worked(at: usize) -> Idle {
        let mut s = Idle::new(j(at));
        s.work(j(at));
        s
    }

    #[test]
    fn window_grows_from_zero() {
        let zero = Bounds { min: 0, max: 8 };
        let mut w = Window::new();
        w.enter(j(0), zero);
        w.exit(j(5), true, &worked(5), zero);
        w.enter(j(6), zero);
        assert_eq!(w.jiffies(zero), 1);
    }

    #[test]
    fn window_shrinks_when_the_vq_comes_back_late() {
        let mut w = Window::new();
        for t in [0, 10, 20] {
            period(&mut w, t, true, t + 5, true);
        }
        w.enter(j(30), B);
        assert_eq!(w.jiffies(B), 16);
        w.exit(j(40), true, &worked(40), B);
        // 100 jiffies later: more than `max` after the exit.
        w.enter(j(140), B);
        assert_eq!(w.jiffies(B), 8);
    }

    #[test]
    fn window_shrinks_when_polling_took_nothing() {
        let mut w = Window::new();
        for t in [0, 10, 20] {
            period(&mut w, t, true, t + 5, true);
        }
        w.enter(j(30), B);
        assert_eq!(w.jiffies(B), 16);
        // A period with no buffer taken: halves, and coming back soon
        // after it is no reason to grow.
        w.exit(j(50), true, &Idle::new(j(30)), B);
        assert_eq!(w.jiffies(B), 8);
        w.enter(j(51), B);
        assert_eq!(w.jiffies(B), 8);
        // Never below the minimum.
        for t in [60, 70, 80, 90] {
            period(&mut w, t, false, t + 5, true);
        }
        assert_eq!(w.jiffies(B), 2);
    }

    #[test]
    fn window_ignores_exits_not_for_idleness() {
        let mut w = Window::new();
        period(&mut w, 0, true, 5, false);
        w.enter(j(6), B);
        assert_eq!(w.jiffies(B), 2);
    }

    #[test]
    fn window_follows_the_bounds_of_the_moment() {
        let mut w = Window::new();
        for t in [0, 10, 20, 30] {
            period(&mut w, t, true, t + 5, true);
        }
        assert_eq!(w.jiffies(B), 16);
        // The maximum lowered: the window with it, at once.
        assert_eq!(w.jiffies(Bounds { min: 2, max: 4 }), 4);
        // A maximum below the minimum pins the window at the minimum.
        assert_eq!(w.jiffies(Bounds { min: 3, max: 0 }), 3);
    }

    #[test]
    fn step_aside_only_when_contended_and_not_paying() {
        let mut s = StepAside::new();
        // The CPU to itself: never sleeps.
        assert_eq!(s.after_pass(false, false, false), Pause::Busy);
        assert_eq!(s.after_pass(false, true, false), Pause::None);
        assert_eq!(s.after_pass(true, true, false), Pause::None);
        // Others wait, and passes queue nothing: sleeps, doubling.
        assert_eq!(s.after_pass(false, true, true), Pause::Sleep(16));
        assert_eq!(s.after_pass(false, false, true), Pause::Sleep(32));
        assert_eq!(s.after_pass(false, true, true), Pause::Sleep(64));
        // A pass that pays ends the backoff at once.
        assert_eq!(s.after_pass(true, true, true), Pause::None);
        assert_eq!(s.after_pass(false, true, true), Pause::Sleep(16));
    }

    #[test]
    fn step_aside_is_bounded_and_decays() {
        let mut s = StepAside::new();
        for _ in 0..20 {
            s.after_pass(false, false, true);
        }
        assert_eq!(
            s.after_pass(false, false, true),
            Pause::Sleep(StepAside::MAX_US)
        );
        // The CPU free again: the backoff halves at each pass.
        assert_eq!(s.after_pass(false, true, false), Pause::None);
        assert_eq!(
            s.after_pass(false, false, true),
            Pause::Sleep(StepAside::MAX_US)
        );
        for _ in 0..20 {
            s.after_pass(false, false, false);
        }
        assert_eq!(
            s.after_pass(false, false, true),
            Pause::Sleep(StepAside::MIN_US)
        );
    }

    #[test]
    fn saturated_only_when_busy_and_contended_long_enough() {
        let mut s = Saturation::new();
        assert!(!s.saturated(j(0)));
        s.after_pass(j(10), false, true);
        assert!(!s.saturated(j(11)));
        s.after_pass(j(11), false, true);
        assert!(s.saturated(j(12)));
        // One pass that rested, or found the CPU free, ends it.
        s.after_pass(j(12), true, true);
        assert!(!s.saturated(j(20)));
        s.after_pass(j(20), false, true);
        s.after_pass(j(30), false, false);
        assert!(!s.saturated(j(30)));
        // So does a sleep with nothing to poll.
        s.after_pass(j(40), false, true);
        s.rested();
        assert!(!s.saturated(j(50)));
    }

    #[test]
    fn saturation_across_the_wrap() {
        let mut s = Saturation::new();
        s.after_pass(j(usize::MAX), false, true);
        assert!(!s.saturated(j(0)));
        assert!(s.saturated(j(1)));
    }

    #[test]
    fn window_decays_while_busy_in_poll_mode() {
        let mut w = Window::new();
        for t in [0, 10, 20, 30] {
            period(&mut w, t, true, t + 5, true);
        }
        w.enter(j(40), B);
        assert_eq!(w.jiffies(B), 16);
        // Work at every visit: halves every DECAY * max = 64 jiffies.
        for t in 41..104 {
            w.work(j(t), B);
        }
        assert_eq!(w.jiffies(B), 16);
        w.work(j(104), B);
        assert_eq!(w.jiffies(B), 8);
        for t in 105..400 {
            w.work(j(t), B);
        }
        assert_eq!(w.jiffies(B), 2);
    }
}
