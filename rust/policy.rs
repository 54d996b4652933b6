// SPDX-License-Identifier: GPL-2.0

//! The polling policy, with no kernel types: when a virtqueue starts and
//! stops being polled, and in which order the polled ones are visited.
//!
//! The module includes this file as `mod policy`; `rust/Cargo.toml` builds
//! it as a host crate too, so `cargo test` checks it in milliseconds.
//! Time is in jiffies, as [`Jiffy`]: a counter that wraps, compared only
//! the way `time_after()` compares.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};

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

    /// The jiffy `n` jiffies after `self`.
    pub const fn plus(self, n: usize) -> Self {
        Self(self.0.wrapping_add(n))
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

/// Whether a virtqueue's kicks may ask the worker to start polling it:
/// not before a jiffy the worker set when it refused a start (the
/// virtqueue cools down, or every polling thread is contended). Without
/// it, each kick that reaches the rate while a start would be refused
/// wakes the worker for nothing: at a rate of 1, once a jiffy per
/// virtqueue or more, which cost the thread 10% of a CPU in streams it
/// did not poll. Lock-free, from any context.
///
/// The two atomics are read apart: a kick racing with
/// [`StartGate::defer_until`] may ask once more, or not ask in the jiffy
/// it races in; the worker is not asked anything it cannot decide, and a
/// later kick asks again.
pub struct StartGate {
    deferred: AtomicBool,
    not_before: AtomicUsize,
}

impl StartGate {
    /// A gate that lets every kick ask.
    pub const fn new() -> Self {
        Self {
            deferred: AtomicBool::new(false),
            not_before: AtomicUsize::new(0),
        }
    }

    /// Kicks before `until` do not ask (the worker refused a start).
    pub fn defer_until(&self, until: Jiffy) {
        self.not_before.store(until.raw(), Relaxed);
        self.deferred.store(true, Relaxed);
    }

    /// Whether a kick at `now` may ask; `enforced` false (`poll_min_gain`
    /// 0: nothing is refused for want of gain) lets every kick ask.
    pub fn allows(&self, now: Jiffy, enforced: bool) -> bool {
        if !enforced || !self.deferred.load(Relaxed) {
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

/// How the worker pauses after a pass: it steps aside for the tasks
/// waiting for its CPU when its passes do not pay, the way KVM's halt
/// polling stops polling when polling does not pay.
///
/// A pass *pays* when it queued a handler: buffers were waiting and no
/// handler was running or queued for them, so the poller did what a kick
/// would have done. A pass that found handlers busy, or nothing, did not.
///
/// - One that does not pay, with other tasks waiting for the CPU, yields
///   to them: not a sleep with a timer, which would add its length to the
///   wait of every ring that fills meanwhile (notifications are off), but
///   a turn given, after which the worker polls again as soon as the CPU
///   is free.
/// - Otherwise it goes on at once if it found work (some handler took
///   buffers since the last visit), and pauses briefly if it found none,
///   as before this rule: a pass that only queued handlers for buffers
///   nobody takes (a hostile ring) must not spin.
#[derive(Debug, Default)]
pub struct StepAside;

/// What the worker does after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Goes on at once.
    None,
    /// Waits a moment, keeping the CPU.
    Busy,
    /// Lets the tasks waiting for the CPU run first.
    Yield,
}

impl StepAside {
    /// The pause after a pass that `paid` (queued a handler), `found_work`
    /// (some handler took buffers), while other tasks were or were not
    /// waiting for the CPU (`contended`).
    pub fn after_pass(paid: bool, found_work: bool, contended: bool) -> Pause {
        if contended && !paid {
            Pause::Yield
        } else if found_work {
            Pause::None
        } else {
            Pause::Busy
        }
    }
}

/// Whether the worker competes for its CPU: polling then costs the
/// other tasks (the devices' own workers, the guests) more than it saves.
///
/// Polling pays on a CPU of its own, or one with time to spare: the
/// shared thread notices a ring's buffers and wakes its worker while the
/// guest goes on. On a CPU that the guests and the workers need, each
/// pass of the thread is time they wait for, and a ring that fills waits
/// for the thread's next turn where a kick would have woken its worker at
/// once. So the worker measures, over windows of [`Contention::JIFFIES`]
/// jiffies, how many of its passes ended with other tasks waiting for its
/// CPU. When at least half did, the worker is *contended*: it hands its
/// virtqueues back to notification mode (each then cools down, see
/// [`CoolDown`]) and starts no others until a window says otherwise. With
/// its own CPU (taskset, isolcpus: the "I/O core" of the shared-thread
/// design) it is never contended.
#[derive(Debug, Default)]
pub struct Contention {
    /// The window being measured: its start, its passes, and how many of
    /// them ended with others waiting.
    start: Option<Jiffy>,
    passes: u32,
    waited: u32,
    /// The verdict of the last whole window.
    contended: bool,
}

impl Contention {
    /// The length of a window.
    pub const JIFFIES: usize = 2;

    /// Not contended.
    pub const fn new() -> Self {
        Self {
            start: None,
            passes: 0,
            waited: 0,
            contended: false,
        }
    }

    /// A pass ended at `now`, with others waiting for the CPU or not.
    pub fn after_pass(&mut self, now: Jiffy, others_waiting: bool) {
        let start = *self.start.get_or_insert(now);
        if now.since(start) >= Self::JIFFIES {
            self.contended = self.passes > 0 && self.waited.saturating_mul(2) >= self.passes;
            self.start = Some(now);
            self.passes = 0;
            self.waited = 0;
        }
        self.passes = self.passes.saturating_add(1);
        self.waited = self.waited.saturating_add(others_waiting.into());
    }

    /// The worker slept with nothing to poll: measure afresh.
    pub fn rested(&mut self) {
        *self = Self::new();
    }

    /// Whether the last whole window found the worker contended.
    pub fn contended(&self) -> bool {
        self.contended
    }
}

/// Whether polling a virtqueue pays: how many kicks it saves for the
/// buffers its handlers take.
///
/// A visit that queues the handler does what a kick would have done: the
/// ring had buffers and no handler was running or queued. A ring whose
/// handler is nearly always running when visited gains little from
/// polling, because vhost turns a driver's notifications off while a
/// handler runs anyway: its driver kicked seldom per buffer even before.
/// Such a virtqueue costs the poller's CPU and, when the ring drains, the
/// wait for the next visit, and saves next to nothing: polling it is a
/// loss. So over every [`Gain::SAMPLE`] buffers taken in poll mode, a
/// virtqueue whose visits queued its handler fewer than `min_per_1k`
/// times per thousand buffers (the `poll_min_gain` parameter; 0 never)
/// goes back to notification mode, and is not polled again for a while
/// ([`CoolDown`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Gain {
    taken: u64,
    queued: u64,
}

impl Gain {
    /// Buffers taken between two verdicts.
    pub const SAMPLE: u64 = 4096;

    /// No buffer seen yet.
    pub const fn new() -> Self {
        Self {
            taken: 0,
            queued: 0,
        }
    }

    /// A visit saw `taken` buffers taken and queued the handler or not.
    /// Returns whether the virtqueue should go back to notification mode:
    /// its visits saved fewer than `min_per_1k` kicks per thousand buffers.
    pub fn visit(&mut self, taken: u32, queued: bool, min_per_1k: u32) -> bool {
        self.taken = self.taken.saturating_add(taken.into());
        self.queued = self.queued.saturating_add(queued.into());
        if self.taken < Self::SAMPLE {
            return false;
        }
        let min = u64::from(min_per_1k);
        let low = self.queued.saturating_mul(1000) < min.saturating_mul(self.taken);
        *self = Self::new();
        low
    }

    /// Whether the buffers taken since the last verdict show that polling
    /// paid: visits queued the handler at least `min_per_1k` times per
    /// thousand buffers, and at least once. A poll period that ends for
    /// another reason (idle, say) with this true ends the cool-down
    /// ([`CoolDown::paid`]); one that took buffers without it leaves the
    /// cool-down as it is, so that a stream that pauses now and then
    /// does not start its probing over.
    pub fn paid(&self, min_per_1k: u32) -> bool {
        self.queued > 0
            && self.queued.saturating_mul(1000) >= u64::from(min_per_1k).saturating_mul(self.taken)
    }
}

/// How long a virtqueue handed back for want of gain waits before it may
/// be polled again: [`CoolDown::MIN_JIFFIES`] the first time, twice as long
/// each time it is handed back again within the next wait, up to
/// [`CoolDown::MAX_JIFFIES`]; back to the minimum once a poll period ends
/// otherwise (idle, quiesce, off) having paid ([`Gain::paid`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct CoolDown {
    jiffies: u32,
    until: Option<Jiffy>,
}

impl CoolDown {
    /// The first wait.
    pub const MIN_JIFFIES: u32 = 16;
    /// The longest.
    pub const MAX_JIFFIES: u32 = 4096;

    /// Never handed back.
    pub const fn new() -> Self {
        Self {
            jiffies: 0,
            until: None,
        }
    }

    /// Handed back at `now` for want of gain.
    pub fn hand_back(&mut self, now: Jiffy) {
        let again = self.until.is_some_and(|u| {
            !now.is_after(Jiffy::from_raw(u.raw().wrapping_add(self.jiffies as usize)))
        });
        self.jiffies = if again {
            self.jiffies
                .saturating_mul(2)
                .clamp(Self::MIN_JIFFIES, Self::MAX_JIFFIES)
        } else {
            Self::MIN_JIFFIES
        };
        self.until = Some(Jiffy::from_raw(
            now.raw().wrapping_add(self.jiffies as usize),
        ));
    }

    /// A poll period ended for another reason: polling paid.
    pub fn paid(&mut self) {
        *self = Self::new();
    }

    /// Whether the virtqueue may enter poll mode at `now`.
    pub fn allows(&self, now: Jiffy) -> bool {
        self.until.map_or(true, |u| !u.is_after(now))
    }

    /// The current wait in jiffies (0: never handed back).
    pub fn jiffies(&self) -> u32 {
        self.jiffies
    }

    /// The end of the current wait, if there is one.
    pub fn until(&self) -> Option<Jiffy> {
        self.until
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

/// The most polling threads there may be (`poll_threads` above this
/// counts as this).
pub const THREADS_MAX: usize = 8;

/// How many polling threads `poll_threads` asks for: 0 counts as 1 (there
/// is always the first thread, which takes the kicks), and anything above
/// [`THREADS_MAX`] as [`THREADS_MAX`].
pub fn threads_wanted(poll_threads: u32) -> usize {
    usize::try_from(poll_threads)
        .unwrap_or(THREADS_MAX)
        .clamp(1, THREADS_MAX)
}

/// One polling thread as placement sees it.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadLoad {
    /// Virtqueues it polls.
    pub polled: u32,
    /// Its recent passes competed for its CPU (see [`Contention`]): it has
    /// no time to spare for another virtqueue.
    pub contended: bool,
}

/// Which thread a virtqueue that reached the rate goes to: the one that
/// polls the fewest virtqueues among those with time to spare, the first
/// of them on a tie; `None` when every thread is contended, and the vq
/// stays with its own worker.
pub fn place(threads: impl IntoIterator<Item = ThreadLoad>) -> Option<usize> {
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

    #[test]
    fn step_aside_only_when_contended_and_not_paying() {
        // The CPU to itself: never yields.
        assert_eq!(StepAside::after_pass(false, false, false), Pause::Busy);
        assert_eq!(StepAside::after_pass(false, true, false), Pause::None);
        assert_eq!(StepAside::after_pass(true, true, false), Pause::None);
        // Others wait, and the pass queued nothing: yields to them.
        assert_eq!(StepAside::after_pass(false, true, true), Pause::Yield);
        assert_eq!(StepAside::after_pass(false, false, true), Pause::Yield);
        // A pass that pays does not yield, whoever waits; with no work
        // taken yet it still pauses (a hostile ring shows buffers at every
        // visit that nobody takes).
        assert_eq!(StepAside::after_pass(true, true, true), Pause::None);
        assert_eq!(StepAside::after_pass(true, false, true), Pause::Busy);
        assert_eq!(StepAside::after_pass(true, false, false), Pause::Busy);
    }

    #[test]
    fn contended_when_half_the_passes_of_a_window_had_others_waiting() {
        let mut c = Contention::new();
        assert!(!c.contended());
        // Jiffies 10 and 11: 3 of 4 passes with others waiting.
        for w in [true, true, false, true] {
            c.after_pass(j(10), w);
        }
        assert!(!c.contended());
        c.after_pass(j(12), false);
        assert!(c.contended());
        // Jiffies 12 and 13: 1 of 4.
        for w in [false, false, true] {
            c.after_pass(j(13), w);
        }
        c.after_pass(j(14), true);
        assert!(!c.contended());
        // Exactly half is contended.
        c.after_pass(j(15), true);
        c.after_pass(j(16), false);
        assert!(c.contended());
    }

    #[test]
    fn contention_starts_afresh_after_a_rest() {
        let mut c = Contention::new();
        c.after_pass(j(0), true);
        c.after_pass(j(2), true);
        assert!(c.contended());
        c.rested();
        assert!(!c.contended());
        c.after_pass(j(usize::MAX), true);
        // Across the wrap, a window still takes two jiffies.
        c.after_pass(j(0), true);
        assert!(!c.contended());
        c.after_pass(j(1), false);
        assert!(c.contended());
    }

    #[test]
    fn gain_hands_back_a_ring_that_polling_barely_helps() {
        let mut g = Gain::new();
        // A stream: handler busy at nearly every visit, 2 kicks saved per
        // thousand buffers.
        let mut verdicts = Vec::new();
        for i in 0..2048u32 {
            verdicts.push(g.visit(2, i % 256 == 0, 16));
        }
        assert!(verdicts[..2047].iter().all(|v| !v));
        assert!(verdicts[2047]);
    }

    #[test]
    fn gain_keeps_a_request_response_ring() {
        let mut g = Gain::new();
        // One buffer per request, the handler queued by the poller each time.
        for _ in 0..100_000 {
            assert!(!g.visit(1, true, 16));
        }
        // Exactly at the threshold: kept.
        let mut g = Gain::new();
        let mut low = false;
        for i in 0..4096u32 {
            low |= g.visit(1, i % 62 == 0 && i < 62 * 66, 16);
        }
        assert!(!low);
    }

    #[test]
    fn gain_paid_needs_a_queued_visit_at_the_rate() {
        let mut g = Gain::new();
        assert!(!g.paid(16), "nothing seen: no proof it paid");
        assert!(!g.visit(100, false, 16));
        assert!(!g.paid(16), "buffers taken, no handler queued");
        assert!(!g.visit(1, true, 16));
        assert!(!g.paid(16), "1 queued in 101 buffers is under 16 per 1000");
        assert!(g.paid(1) && g.paid(0));
        assert!(!g.visit(1, true, 16));
        assert!(g.paid(16), "2 queued in 102 buffers: about 19.6 per 1000");
    }

    #[test]
    fn gate_holds_kicks_until_the_jiffy() {
        let g = StartGate::new();
        assert!(g.allows(j(5), true));
        g.defer_until(j(10));
        assert!(!g.allows(j(5), true));
        assert!(!g.allows(j(9), true));
        // Not enforced (poll_min_gain 0): every kick asks.
        assert!(g.allows(j(9), false));
        assert!(g.allows(j(10), true));
        // Once passed, open until deferred again, whatever the jiffy.
        assert!(g.allows(j(3), true));
        g.defer_until(j(usize::MAX).plus(2));
        assert!(!g.allows(j(usize::MAX), true));
        assert!(g.allows(j(1), true));
    }

    #[test]
    fn gain_zero_never_hands_back() {
        let mut g = Gain::new();
        for _ in 0..100_000 {
            assert!(!g.visit(4, false, 0));
        }
    }

    #[test]
    fn cool_down_doubles_when_handed_back_again_soon() {
        let mut c = CoolDown::new();
        assert!(c.allows(j(0)));
        c.hand_back(j(100));
        assert_eq!(c.jiffies(), 16);
        assert!(!c.allows(j(115)));
        assert!(c.allows(j(116)));
        // Handed back again within the next wait: twice as long.
        c.hand_back(j(120));
        assert_eq!(c.jiffies(), 32);
        assert!(!c.allows(j(151)));
        assert!(c.allows(j(152)));
        for t in 0..20 {
            c.hand_back(j(200 + t));
        }
        assert_eq!(c.jiffies(), CoolDown::MAX_JIFFIES);
        // A period that ended otherwise resets it.
        c.paid();
        assert!(c.allows(j(221)));
        c.hand_back(j(300));
        assert_eq!(c.jiffies(), 16);
    }

    #[test]
    fn cool_down_starts_over_after_a_long_quiet() {
        let mut c = CoolDown::new();
        c.hand_back(j(0));
        c.hand_back(j(20));
        assert_eq!(c.jiffies(), 32);
        // Long after the wait ended, plus as long again: the minimum.
        c.hand_back(j(1000));
        assert_eq!(c.jiffies(), 16);
    }

    #[test]
    fn cool_down_across_the_wrap() {
        let mut c = CoolDown::new();
        c.hand_back(j(usize::MAX - 4));
        assert!(!c.allows(j(5)));
        assert!(c.allows(j(11)));
    }
}
