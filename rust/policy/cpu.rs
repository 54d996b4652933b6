// SPDX-License-Identifier: GPL-2.0

//! The polling thread's CPU: whether it competes for it, and how it
//! pauses after a pass.

use super::time::{Backoff, Jiffy};

/// How a thread pauses after a pass: it steps aside for the tasks
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
///   a turn given, after which the thread polls again as soon as the CPU
///   is free.
/// - Otherwise it goes on at once if it found work (some handler took
///   buffers since the last visit), and pauses briefly if it found none,
///   as before this rule: a pass that only queued handlers for buffers
///   nobody takes (a hostile ring) must not spin.
#[derive(Debug, Default)]
pub(super) struct StepAside;

/// What a thread does after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Goes on at once.
    None,
    /// Waits a moment, keeping the CPU.
    Busy,
    /// Lets the tasks waiting for the CPU run first.
    Yield,
    /// Sleeps this many microseconds: the rings have been quiet
    /// ([`Quiet`]).
    Nap(u32),
    /// Sleeps to the next jiffy: the virtqueues' own workers poll them,
    /// and the thread only counts their work, once a jiffy.
    Tick,
}

impl StepAside {
    /// The pause after a pass that `paid` (queued a handler), `found_work`
    /// (some handler took buffers), while other tasks were or were not
    /// waiting for the CPU (`contended`).
    pub(super) fn after_pass(paid: bool, found_work: bool, contended: bool) -> Pause {
        if contended && !paid {
            Pause::Yield
        } else if found_work {
            Pause::None
        } else {
            Pause::Busy
        }
    }
}

/// Whether a thread competes for its CPU: polling then costs the
/// other tasks (the devices' own workers, the guests) more than it saves.
///
/// Polling pays on a CPU of its own, or one with time to spare: the
/// thread notices a ring's buffers and wakes its worker while the
/// guest goes on. On a CPU that the guests and the workers need, each
/// pass of the thread is time they wait for, and a ring that fills waits
/// for the thread's next turn where a kick would have woken its worker at
/// once. So the thread measures, over windows of [`Contention::JIFFIES`]
/// jiffies, how many of its passes ended with other tasks waiting for its
/// CPU. When at least half did, the thread is *contended*: it hands its
/// virtqueues back to notification mode (`Exit::Contended`; each then
/// cools down, as after `Exit::Gain`) and is given no others until a
/// window says otherwise. With
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

    /// The thread slept with nothing to poll: measure afresh.
    pub fn rested(&mut self) {
        *self = Self::new();
    }

    /// Whether the last whole window found the thread contended.
    pub fn contended(&self) -> bool {
        self.contended
    }
}

/// When a thread naps between passes: once its rings have been quiet.
///
/// A thread spins between passes so that it sees a buffer the moment it is
/// posted, and that spin is almost all of its CPU where buffers come
/// seldom: a guest that kicks every few milliseconds, a driver that
/// trickles a buffer per idle window. Its CPU then buys nothing the next
/// request would notice. So once no pass has found work for
/// [`Quiet::AFTER_US`], a pass that finds none is followed by a sleep of
/// a quarter of the quiet time so far, at most `poll_max_nap`: the next
/// buffer waits at most a quarter longer than the ring had already been
/// quiet, and the thread's CPU falls as the gaps grow. A queue whose
/// requests come closer than [`Quiet::AFTER_US`] apart never has its thread
/// nap; notifications stay off during a nap, which saves the kicks a
/// spin would. No nap is longer than [`Quiet::LIMIT_US`] whatever
/// `poll_max_nap` says (0, no nap, is the default), nor half of vhost's
/// watchdog bound (`poll_stall_us`, `ThreadPolicy::after_pass`). A nap is
/// not cut short: a start request or a stop waits for its end.
#[derive(Debug, Default)]
pub(super) struct Quiet {
    /// When the first pass that found no work since the last that did
    /// ended (`Ktime` ns).
    since_ns: Option<u64>,
}

impl Quiet {
    /// How long (µs) no pass found work before a thread naps.
    pub(super) const AFTER_US: u64 = 1000;

    /// The longest nap (µs), whatever `poll_max_nap` says.
    pub(super) const LIMIT_US: u32 = 2000;

    /// Not quiet.
    pub(super) const fn new() -> Self {
        Self { since_ns: None }
    }

    /// A pass ended at `end_ns` (`Ktime` ns; 0 if the clock was not
    /// read), having found `work` (a handler took buffers, or the pass
    /// queued one) or not. Returns how long to nap, in µs (0: no nap),
    /// with `max_us` the longest (`poll_max_nap`; 0, never).
    pub(super) fn after_pass(&mut self, end_ns: u64, work: bool, max_us: u32) -> u32 {
        if work || max_us == 0 {
            self.since_ns = None;
            return 0;
        }
        if end_ns == 0 {
            return 0;
        }
        let since = *self.since_ns.get_or_insert(end_ns);
        let quiet_us = end_ns.saturating_sub(since) / 1000;
        if quiet_us < Self::AFTER_US {
            return 0;
        }
        u32::try_from(quiet_us / 4)
            .unwrap_or(u32::MAX)
            .min(max_us)
            .min(Self::LIMIT_US)
    }

    /// The thread slept with nothing to poll: quiet from its next pass on.
    pub(super) fn rested(&mut self) {
        *self = Self::new();
    }
}

/// What a kick saved costs a thread's CPU, while others want that CPU.
///
/// A visit that queues a handler does what a kick would have done: the
/// thread's CPU over those visits is what each saved kick cost. Where the
/// thread has its CPU to itself that costs nobody anything. Where others
/// want it (a pass ended with tasks waiting), every microsecond of it is
/// taken from them: from a guest's vCPU thread, the vhost workers, the
/// drivers. So over windows of [`KickCost::JIFFIES`] jiffies, a thread
/// whose CPU per queued handler exceeded `poll_max_kick_cost` while
/// others waited at least once is *over*: it hands its virtqueues back
/// (`Exit::Contended`) and takes no others until a window says
/// otherwise. Per-pass contention ([`Contention`]) misses this case: a
/// thread whose empty passes are short sees others waiting at few of them,
/// though it keeps half of a CPU they need.
#[derive(Debug, Default)]
pub(super) struct KickCost {
    start: Option<Jiffy>,
    ns: u64,
    queued: u64,
    waited: bool,
    over: bool,
}

impl KickCost {
    /// The length of a window.
    pub(super) const JIFFIES: usize = 16;

    /// Not over.
    pub(super) const fn new() -> Self {
        Self {
            start: None,
            ns: 0,
            queued: 0,
            waited: false,
            over: false,
        }
    }

    /// A pass ended at `now`: it took `ns` of the thread's time, queued
    /// `queued` handlers, and found others waiting for the CPU or not.
    /// `max_us` is `poll_max_kick_cost`.
    pub(super) fn after_pass(
        &mut self,
        now: Jiffy,
        ns: u64,
        queued: u32,
        others_waiting: bool,
        max_us: u32,
    ) {
        let start = *self.start.get_or_insert(now);
        if now.since(start) >= Self::JIFFIES {
            let budget = u64::from(max_us)
                .saturating_mul(1000)
                .saturating_mul(self.queued.max(1));
            self.over = max_us != 0 && self.waited && self.ns > budget;
            self.start = Some(now);
            self.ns = 0;
            self.queued = 0;
            self.waited = false;
        }
        self.ns = self.ns.saturating_add(ns);
        self.queued = self.queued.saturating_add(queued.into());
        self.waited |= others_waiting;
    }

    /// The thread slept with nothing to poll: measure afresh.
    pub(super) fn rested(&mut self) {
        *self = Self::new();
    }

    /// Whether the last whole window cost more per saved kick than allowed.
    pub(super) fn over(&self) -> bool {
        self.over
    }
}

/// How often a thread's CPU is taken from it for longer than vhost's
/// watchdog allows (`poll_stall_us`).
///
/// One stall (the watchdog took a ring back because the thread had not
/// looked at it for the bound) cools that ring down, as a verdict on the
/// thread's CPU. But a neighbour that takes the CPU again and again (a
/// real-time task 10 ms on, 10 ms off) would stall every ring the thread
/// takes next, and delay each one's requests by up to its bursts, while
/// the thread, seeing no one waiting whenever it runs, finds no contention.
/// So a thread that was kept off its CPU so in [`Stalls::EPISODES`]
/// episodes within [`Stalls::WINDOW_JIFFIES`] hands every ring back
/// (`Exit::Stalled`) and takes none for a hold:
/// [`Stalls::HOLD_MIN_JIFFIES`] the first time, twice as long each time
/// the verdict falls again within the hold after the last one ended, up
/// to [`Stalls::HOLD_MAX_JIFFIES`]. Not reset when the thread rests: its
/// CPU is the same.
///
/// An episode is one time off the CPU, not one pass: the rings it stalled
/// are found by the passes after it, and a pass cut short (a wake-up,
/// which kicks on the rings taken back bring) finds only some of them. So
/// the passes that find stalled rings are one episode until a whole pass
/// (every ring the thread polls visited) finds none, or for
/// [`Stalls::EPISODE_MAX_JIFFIES`] at most: a thread whose passes a
/// flood of wake-ups kept cutting short still counts a neighbour's next
/// burst. Counted by passes, one stretch of a few milliseconds (a vCPU
/// its host did not run, an interrupt storm) could make the verdict
/// alone, and hold a thread that nothing keeps from its CPU any longer.
#[derive(Debug, Default)]
pub(super) struct Stalls {
    /// The current window's start and the episodes in it.
    window: Option<(Jiffy, u32)>,
    /// The start of the episode under way (no whole pass since its stalls
    /// were found), if one is.
    episode: Option<Jiffy>,
    /// The holds, a [`Backoff`].
    hold: Backoff,
}

impl Stalls {
    /// Episodes within a window that make the verdict.
    pub(super) const EPISODES: u32 = 3;
    /// The window, in jiffies.
    pub(super) const WINDOW_JIFFIES: usize = 256;
    /// The first hold, in jiffies.
    pub(super) const HOLD_MIN_JIFFIES: u32 = 256;
    /// The longest.
    pub(super) const HOLD_MAX_JIFFIES: u32 = 16384;
    /// The longest an episode lasts.
    pub(super) const EPISODE_MAX_JIFFIES: usize = 2;

    /// Never stalled.
    pub(super) const fn new() -> Self {
        Self {
            window: None,
            episode: None,
            hold: Backoff::new(),
        }
    }

    /// A pass ended at `now`, having found a ring the watchdog took back
    /// (`stalled`) or not, having visited every ring (`whole`) or not.
    /// Returns whether the verdict fell now: the thread hands everything
    /// back, and is held.
    pub(super) fn after_pass(&mut self, now: Jiffy, stalled: bool, whole: bool) -> bool {
        if !stalled {
            if whole {
                self.episode = None;
            }
            return false;
        }
        match self.episode {
            Some(start) if now.since(start) < Self::EPISODE_MAX_JIFFIES => return false,
            _ => self.episode = Some(now),
        }
        let (start, n) = match self.window {
            Some((start, n)) if now.since(start) < Self::WINDOW_JIFFIES => (start, n + 1),
            _ => (now, 1),
        };
        if n < Self::EPISODES {
            self.window = Some((start, n));
            return false;
        }
        self.window = None;
        self.hold
            .start(now, Self::HOLD_MIN_JIFFIES, Self::HOLD_MAX_JIFFIES);
        true
    }

    /// The end of the hold under way at `now`, if one is.
    pub(super) fn held_until(&self, now: Jiffy) -> Option<Jiffy> {
        self.hold.until().filter(|u| u.is_after(now))
    }
}

#[cfg(test)]
mod tests {
    use super::super::time::tests::j;
    use super::*;

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
    fn naps_a_quarter_of_the_quiet_time_once_quiet_long_enough() {
        const US: u64 = 1000;
        let t0 = 5_000_000 * US;
        let mut q = Quiet::new();
        // The first empty pass starts the quiet time; none before
        // `AFTER_US` naps.
        assert_eq!(q.after_pass(t0, false, 1000), 0);
        assert_eq!(q.after_pass(t0 + 999 * US, false, 1000), 0);
        // Then a quarter of it, up to the limit.
        assert_eq!(q.after_pass(t0 + 1000 * US, false, 1000), 250);
        assert_eq!(q.after_pass(t0 + 2000 * US, false, 1000), 500);
        assert_eq!(q.after_pass(t0 + 9000 * US, false, 1000), 1000);
        assert_eq!(q.after_pass(t0 + 9000 * US, false, 300), 300);
        // A pass whose clock was not read says nothing.
        assert_eq!(q.after_pass(0, false, 1000), 0);
        assert_eq!(q.after_pass(t0 + 9000 * US, false, 1000), 1000);
        // Work ends the quiet time: it starts again at the next empty pass.
        assert_eq!(q.after_pass(0, true, 1000), 0);
        assert_eq!(q.after_pass(t0 + 9500 * US, false, 1000), 0);
        assert_eq!(q.after_pass(t0 + 10_000 * US, false, 1000), 0);
        assert_eq!(q.after_pass(t0 + 10_500 * US, false, 1000), 250);
        // `poll_max_nap` 0: never, and quiet from scratch after.
        assert_eq!(q.after_pass(t0 + 20_000 * US, false, 0), 0);
        assert_eq!(q.after_pass(t0 + 20_000 * US, false, 1000), 0);
        // A rest forgets the quiet time.
        assert_eq!(q.after_pass(t0 + 30_000 * US, false, 1500), 1500);
        q.rested();
        assert_eq!(q.after_pass(t0 + 30_000 * US, false, 1000), 0);
        // No longer than `LIMIT_US`, whatever `poll_max_nap` says.
        assert_eq!(
            q.after_pass(t0 + 60_000 * US, false, u32::MAX),
            Quiet::LIMIT_US
        );
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
    fn kick_cost_over_only_when_others_waited_and_each_kick_cost_too_much() {
        const MS: u64 = 1_000_000;
        // The verdict on one window of a single pass that took `ns` and
        // queued `queued` handlers, others waiting or not, at `max_us`.
        let window = |ns, queued, waited, max_us| {
            let mut k = KickCost::new();
            k.after_pass(j(0), ns, queued, waited, max_us);
            assert!(!k.over(), "no whole window yet");
            k.after_pass(j(KickCost::JIFFIES), 0, 0, false, max_us);
            k.over()
        };
        // 16 ms of CPU for 8 queued handlers, others waiting once: 2 ms a
        // kick, over a limit of 1 ms; not at 2 ms allowed, nor with no
        // limit, nor when nobody waited (the CPU was the thread's to spend).
        assert!(window(16 * MS, 8, true, 1000));
        assert!(!window(16 * MS, 8, true, 2000));
        assert!(!window(16 * MS, 8, true, 0));
        assert!(!window(16 * MS, 8, false, 1000));
        // Nothing queued and others waiting: over.
        assert!(window(2 * MS, 0, true, 1000));
        // A window under the limit clears it; a rest too.
        let mut k = KickCost::new();
        k.after_pass(j(0), 2 * MS, 0, true, 1000);
        k.after_pass(j(16), 0, 0, false, 1000);
        assert!(k.over());
        k.after_pass(j(20), MS / 2, 1, true, 1000);
        k.after_pass(j(32), 0, 0, false, 1000);
        assert!(!k.over());
        k.after_pass(j(33), 2 * MS, 0, true, 1000);
        k.after_pass(j(48), 0, 0, false, 1000);
        assert!(k.over());
        k.rested();
        assert!(!k.over());
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

    /// Stalls found at each jiffy of `at`, each an episode of its own
    /// (a whole pass with none between them); the verdicts.
    fn episodes(s: &mut Stalls, at: &[usize]) -> Vec<bool> {
        at.iter()
            .map(|&t| {
                let v = s.after_pass(j(t), true, true);
                assert!(!s.after_pass(j(t), false, true));
                v
            })
            .collect()
    }

    #[test]
    fn stalls_in_a_few_episodes_hold_the_thread_and_holds_grow() {
        let mut s = Stalls::new();
        assert!(!s.after_pass(j(0), false, true));
        assert_eq!(episodes(&mut s, &[1, 5]), [false, false]);
        assert!(!s.after_pass(j(7), false, true));
        assert!(
            s.after_pass(j(9), true, true),
            "the third within the window"
        );
        let first = s.held_until(j(9)).expect("held");
        assert_eq!(first.since(j(9)), Stalls::HOLD_MIN_JIFFIES as usize);
        assert_eq!(s.held_until(first), None, "the hold ends");
        assert!(!s.after_pass(first, false, true));
        // Again soon after: twice as long.
        let t = first.raw() + 10;
        assert_eq!(episodes(&mut s, &[t, t + 1, t + 2]), [false, false, true]);
        let second = s.held_until(j(t + 2)).expect("held");
        assert_eq!(
            second.since(j(t + 2)),
            2 * Stalls::HOLD_MIN_JIFFIES as usize
        );
    }

    #[test]
    fn stalls_far_apart_make_no_verdict_and_a_late_one_starts_small() {
        let mut s = Stalls::new();
        let w = Stalls::WINDOW_JIFFIES;
        let far: Vec<usize> = (0..10).map(|k| k * w).collect();
        assert!(episodes(&mut s, &far).iter().all(|v| !v), "one a window");
        let t = 10 * w;
        assert_eq!(episodes(&mut s, &[t, t + 1, t + 2]), [false, false, true]);
        let end = s.held_until(j(t + 2)).expect("held").raw();
        // Long after the hold and as long again: back to the first hold.
        let late = end + 3 * Stalls::HOLD_MIN_JIFFIES as usize;
        assert_eq!(
            episodes(&mut s, &[late, late + 1, late + 2]),
            [false, false, true]
        );
        assert_eq!(
            s.held_until(j(late + 2)).expect("held").since(j(late + 2)),
            Stalls::HOLD_MIN_JIFFIES as usize
        );
    }

    #[test]
    fn one_episode_found_in_many_passes_makes_no_verdict() {
        let mut s = Stalls::new();
        // A vCPU its host did not run: 16 rings stalled, found by passes
        // that kicks' wake-ups cut short, over two jiffies.
        for t in 0..16 {
            assert!(!s.after_pass(j(t / 8), true, false), "pass {t}");
            // Cut short before any stalled ring: not the episode's end.
            assert!(!s.after_pass(j(t / 8), false, false));
        }
        assert!(!s.after_pass(j(1), true, true));
        assert_eq!(s.held_until(j(1)), None);
        // A whole pass without a stall ends it; two more make the verdict.
        assert!(!s.after_pass(j(3), false, true));
        assert_eq!(episodes(&mut s, &[40]), [false]);
        assert_eq!(episodes(&mut s, &[80]), [true]);
    }

    #[test]
    fn an_episode_no_whole_pass_ends_still_ends_in_time() {
        let mut s = Stalls::new();
        // Every pass cut short, none whole.
        assert!(!s.after_pass(j(0), true, false));
        assert!(
            !s.after_pass(j(1), true, false),
            "within the bound: the same"
        );
        assert!(!s.after_pass(j(3), true, false), "3 jiffies on: the second");
        assert!(!s.after_pass(j(4), false, false));
        assert!(s.after_pass(j(6), true, false), "the third");
        assert!(s.held_until(j(6)).is_some());
    }
}
