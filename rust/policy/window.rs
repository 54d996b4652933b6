// SPDX-License-Identifier: GPL-2.0

//! When a polled virtqueue has been idle long enough: its last work and
//! its idle window.

use super::time::Jiffy;

/// When a polled virtqueue had its last work, to decide when it stops.
#[derive(Clone, Copy, Debug)]
pub(super) struct Idle {
    last_work: Jiffy,
    empty_visits: u32,
    /// Whether any visit of this poll period took buffers.
    took: bool,
}

impl Idle {
    /// A virtqueue entering poll mode at jiffy `now` counts as busy then.
    pub(super) fn new(now: Jiffy) -> Self {
        Self {
            last_work: now,
            empty_visits: 0,
            took: false,
        }
    }

    /// A visit at jiffy `now` found work.
    pub(super) fn work(&mut self, now: Jiffy) {
        self.last_work = now;
        self.empty_visits = 0;
        self.took = true;
    }

    /// A visit found no work.
    pub(super) fn empty(&mut self) {
        self.empty_visits = self.empty_visits.saturating_add(1);
    }

    /// Whether a virtqueue without work for `window` jiffies, and found
    /// empty at least once since its last work, stops being polled at
    /// jiffy `now`.
    pub(super) fn stops(&self, now: Jiffy, window: u32) -> bool {
        self.empty_visits > 0 && now.since(self.last_work) >= window as usize
    }

    /// Whether a visit of this poll period took buffers: whether polling
    /// paid at all.
    pub(super) fn took(&self) -> bool {
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
pub(super) struct Window {
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
    pub(super) const DECAY: usize = 4;

    /// A virtqueue's first window: `Bounds::min`.
    pub(super) const fn new() -> Self {
        Self {
            jiffies: 0,
            idle_exit: None,
            moved: None,
        }
    }

    /// The window, within `b`.
    pub(super) fn jiffies(&self, b: Bounds) -> u32 {
        b.clamp(self.jiffies)
    }

    /// The virtqueue enters poll mode at `now`.
    pub(super) fn enter(&mut self, now: Jiffy, b: Bounds) {
        let w = self.jiffies(b);
        self.jiffies = b.clamp(match self.idle_exit.take() {
            Some(exit) if now.since(exit) <= b.max as usize => w.saturating_mul(2).max(1),
            Some(_) => w / 2,
            None => w,
        });
        self.moved = Some(now);
    }

    /// A visit at `now` found work, in poll mode.
    pub(super) fn work(&mut self, now: Jiffy, b: Bounds) {
        let decay = Self::DECAY.saturating_mul(b.max as usize).max(1);
        if self.moved.is_some_and(|m| now.since(m) >= decay) {
            self.jiffies = b.clamp(self.jiffies(b) / 2);
            self.moved = Some(now);
        }
    }

    /// The virtqueue left poll mode at `now`: for want of work if `idle`;
    /// `idle_state` is the period's.
    pub(super) fn exit(&mut self, now: Jiffy, idle: bool, idle_state: &Idle, b: Bounds) {
        let w = self.jiffies(b);
        if !idle_state.took() {
            self.jiffies = b.clamp(w / 2);
        }
        self.idle_exit = (idle && idle_state.took()).then_some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::super::time::tests::j;
    use super::*;

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

    /// A window grown to `B.max` by quick returns, in poll mode since
    /// jiffy 30.
    fn grown_to_max() -> Window {
        let mut w = Window::new();
        for t in [0, 10, 20] {
            period(&mut w, t, true, t + 5, true);
        }
        w.enter(j(30), B);
        assert_eq!(w.jiffies(B), 16);
        w
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
        let mut w = grown_to_max();
        w.exit(j(40), true, &worked(40), B);
        // 100 jiffies later: more than `max` after the exit.
        w.enter(j(140), B);
        assert_eq!(w.jiffies(B), 8);
    }

    #[test]
    fn window_shrinks_when_polling_took_nothing() {
        let mut w = grown_to_max();
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
}
