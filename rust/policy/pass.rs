// SPDX-License-Identifier: GPL-2.0

//! One polling thread as the policy sees it: what it does after
//! each pass, whether it has time to spare for another virtqueue, and
//! whether it should run at all.

use super::cpu::{Contention, KickCost, Pause, Quiet, Stalls, StepAside};
use super::params::Params;
use super::threads::ThreadLoad;
use super::time::Jiffy;
use super::vq::Exit;

/// What a pass saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassSeen {
    /// A visit queued a handler (did what a kick would have done).
    pub paid: bool,
    /// Some handler took buffers since the last visit.
    pub found: bool,
    /// Other tasks waited for the thread's CPU when the pass ended.
    pub others_waiting: bool,
    /// The thread's time since the last pass's pause ended, in ns: this
    /// pass, and what kept it from starting; not the time it gave way to
    /// others after a yield.
    pub ns: u64,
    /// Visits that queued a handler.
    pub queued: u32,
    /// The clock when the pass ended (`Ktime` ns), or 0 where no rule
    /// needed it: a pass that found work reads none.
    pub end_ns: u64,
    /// Something waits for the thread (a wake-up, a stop): it must not nap.
    pub asked: bool,
    /// Every visit only counted a virtqueue whose own worker polls it.
    pub counted_only: bool,
    /// A visit found a virtqueue vhost's watchdog had taken back: the thread
    /// was kept off its CPU for `poll_stall_us` ([`Stalls`]).
    pub stalled: bool,
    /// The pass visited every virtqueue the thread polled when it began
    /// (not cut short by a wake-up or a hand-back).
    pub whole: bool,
}

/// What the thread does after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfterPass {
    /// How it pauses.
    pub pause: Pause,
    /// Hand every virtqueue of the thread back, for this reason.
    ///
    /// Every one, not only some, is what contention must take: a thread
    /// spins as long as it polls one virtqueue, its passes only shorter
    /// with fewer, so only a thread that polls none gives its CPU back to
    /// the tasks that wait for it. The virtqueues that keep reaching the
    /// rate come back after their cool-down, on a thread whose CPU is not
    /// wanted (placement passes over a contended one, `ThreadLoad`).
    pub hand_back: Option<Exit>,
}

/// A thread's policy, kept by its thread.
#[derive(Debug, Default)]
pub struct ThreadPolicy {
    contention: Contention,
    kick_cost: KickCost,
    quiet: Quiet,
    stalls: Stalls,
}

impl ThreadPolicy {
    /// A thread that has not polled yet.
    pub const fn new() -> Self {
        Self {
            contention: Contention::new(),
            kick_cost: KickCost::new(),
            quiet: Quiet::new(),
            stalls: Stalls::new(),
        }
    }

    /// A pass ended at `now` having seen `seen`.
    ///
    /// A pass followed by a nap does not count as one the others waited
    /// for ([`Contention`]): for the nap, the thread's CPU is theirs. A
    /// thread that naps through its quiet stretches spends a fraction of
    /// the CPU it spins with (`naps` and `nap_us` in the `worker` file),
    /// and handing its virtqueues back for the tasks that wait at the end
    /// of a nap would only bring their kicks back. The passes that found
    /// work, or that it does not nap after, count as before; so does
    /// every pass for `poll_max_kick_cost`, which weighs the thread's time.
    ///
    /// A pass that only counted the work of virtqueues their own workers
    /// poll is followed by a sleep to the next jiffy, and by no verdict
    /// on the thread's CPU: the thread does not spin, the workers do, each in
    /// its owner's cgroup.
    pub fn after_pass(&mut self, now: Jiffy, seen: PassSeen, p: &Params) -> AfterPass {
        if seen.counted_only {
            self.rested();
            return AfterPass {
                pause: Pause::Tick,
                hand_back: None,
            };
        }
        // Not asked for anything: a quiet thread naps, for less than half of
        // the watchdog's bound.
        let max_nap_us = if seen.asked {
            0
        } else {
            p.max_nap_us.min(p.stall_us() / 2)
        };
        let nap = self
            .quiet
            .after_pass(seen.end_ns, seen.found || seen.paid, max_nap_us);
        self.contention
            .after_pass(now, seen.others_waiting && nap == 0);
        self.kick_cost.after_pass(
            now,
            seen.ns,
            seen.queued,
            seen.others_waiting,
            p.max_kick_cost_us,
        );
        // With `poll_min_gain` 0 contention hands nothing back; stalls,
        // which leave rings unwatched, hand everything back whatever it is.
        let hand_back = if self.stalls.after_pass(now, seen.stalled, seen.whole) {
            Some(Exit::Stalled)
        } else {
            (self.contended() && p.hands_back()).then_some(Exit::Contended)
        };
        let pause = if nap != 0 && hand_back.is_none() {
            // Its CPU is free during the nap, for whoever waits.
            Pause::Nap(nap)
        } else {
            StepAside::after_pass(seen.paid, seen.found, seen.others_waiting)
        };
        AfterPass { pause, hand_back }
    }

    /// The thread slept with nothing to poll: its CPU is measured afresh.
    pub fn rested(&mut self) {
        self.contention.rested();
        self.kick_cost.rested();
        self.quiet.rested();
    }

    /// Whether its last whole contention window found its CPU wanted by
    /// others, or its last kick-cost window found each saved kick too
    /// dear (`poll_max_kick_cost`): placement then gives it no virtqueue.
    pub fn contended(&self) -> bool {
        self.contention.contended() || self.kick_cost.over()
    }

    /// The end of the hold that stalls put the thread under at `now`, if one
    /// is under way ([`Stalls`]): placement gives it no virtqueue until
    /// then, whatever `poll_min_gain` says.
    pub fn held_until(&self, now: Jiffy) -> Option<Jiffy> {
        self.stalls.held_until(now)
    }

    /// A running thread as placement sees it, polling `polled` virtqueues,
    /// its CPU last found `contended` or not, and `held` for stalls or
    /// not. With `poll_min_gain` 0 contention refuses nothing; a hold
    /// refuses everything.
    pub fn load(polled: u32, contended: bool, held: bool, p: &Params) -> ThreadLoad {
        ThreadLoad {
            polled,
            contended: (contended && p.hands_back()) || held,
        }
    }

    /// A thread whose thread is not running (it could not be started): no
    /// room, whatever the parameters.
    pub const ABSENT: ThreadLoad = ThreadLoad {
        polled: 0,
        contended: true,
    };

    /// Whether thread `index` is one too many for `poll_threads`: its
    /// virtqueues go back ([`Exit::Off`]) and the first thread stops it.
    pub fn retired(index: usize, p: &Params) -> bool {
        index >= p.threads()
    }
}

#[cfg(test)]
mod tests {
    use super::super::time::tests::j;
    use super::*;

    /// The default parameters, with naps of at most `max_nap_us`.
    fn napping(max_nap_us: u32) -> Params {
        Params {
            max_nap_us,
            ..Params::DEFAULT
        }
    }

    #[test]
    fn a_pass_that_only_counted_sleeps_a_tick_and_hands_nothing_back() {
        let mut l = ThreadPolicy::new();
        let p = Params::DEFAULT;
        // Contended passes of a spinning thread hand everything back...
        let busy = PassSeen {
            others_waiting: true,
            ..PassSeen::default()
        };
        let mut handed = None;
        for j in 0..1000 {
            if let Some(why) = l.after_pass(Jiffy::from_raw(j), busy, &p).hand_back {
                handed = Some(why);
                break;
            }
        }
        assert_eq!(handed, Some(Exit::Contended));
        // ...a thread that only counts for the workers does not spin: no
        // verdict, and a tick's sleep after each pass.
        let mut l = ThreadPolicy::new();
        let counted = PassSeen {
            counted_only: true,
            ..busy
        };
        for j in 0..1000 {
            let a = l.after_pass(Jiffy::from_raw(j), counted, &p);
            assert_eq!(a.pause, Pause::Tick);
            assert_eq!(a.hand_back, None);
        }
        assert!(!l.contended());
    }

    /// An empty pass that ended at `ms` milliseconds, others waiting.
    fn empty_at(ms: u64, asked: bool) -> PassSeen {
        PassSeen {
            others_waiting: true,
            end_ns: 1_000_000_000 + ms * 1_000_000,
            asked,
            ..PassSeen::default()
        }
    }

    #[test]
    fn a_quiet_thread_naps_unless_asked_or_handing_back() {
        let p = napping(1000);
        let mut l = ThreadPolicy::new();
        // Quiet for less than a millisecond: yields to the others waiting.
        assert_eq!(
            l.after_pass(j(0), empty_at(0, false), &p).pause,
            Pause::Yield
        );
        assert_eq!(
            l.after_pass(j(0), empty_at(0, false), &p).pause,
            Pause::Yield
        );
        // Quiet for 2 ms: naps a quarter of it, rather than yield.
        let after = l.after_pass(j(0), empty_at(2, false), &p);
        assert_eq!(after.pause, Pause::Nap(500));
        assert_eq!(after.hand_back, None);
        // Something waits for the thread: no nap.
        assert_eq!(
            l.after_pass(j(0), empty_at(3, true), &p).pause,
            Pause::Yield
        );
        // A pass that queued a handler is work: quiet from scratch.
        let paid = PassSeen {
            paid: true,
            found: true,
            queued: 1,
            ..PassSeen::default()
        };
        assert_eq!(l.after_pass(j(0), paid, &p).pause, Pause::None);
        assert_eq!(
            l.after_pass(j(0), empty_at(4, false), &p).pause,
            Pause::Yield
        );
        assert_eq!(
            l.after_pass(j(0), empty_at(8, false), &p).pause,
            Pause::Nap(1000)
        );
        // Contended over a whole window: hands back, and does not nap.
        let after = l.after_pass(j(Contention::JIFFIES), empty_at(20, false), &p);
        assert_eq!(after.hand_back, Some(Exit::Contended));
        assert_ne!(after.pause, Pause::Nap(1000));
        // `poll_max_nap` 0: never.
        let spin = napping(0);
        let mut l = ThreadPolicy::new();
        l.after_pass(j(0), empty_at(0, false), &spin);
        assert_eq!(
            l.after_pass(j(0), empty_at(5, false), &spin).pause,
            Pause::Yield
        );
    }

    #[test]
    fn a_napping_thread_leaves_its_cpu_to_the_others() {
        // Quiet rings, others waiting at the end of every pass, over
        // three contention windows: passes 1 ms apart.
        let run = |max_nap_us| {
            let p = napping(max_nap_us);
            let mut l = ThreadPolicy::new();
            let mut handed_back = false;
            for ms in 0..40u64 {
                let now = j((ms / 4) as usize);
                let after = l.after_pass(now, empty_at(ms, false), &p);
                handed_back |= after.hand_back.is_some();
            }
            (handed_back, l.contended())
        };
        // Spinning, it competes for the CPU: contention hands back.
        assert_eq!(run(0), (true, true));
        // Napping after its first millisecond of quiet: the CPU is the
        // others' for the nap, so the passes do not count as waited for.
        assert_eq!(run(1000), (false, false));
        // A napping thread whose window is mostly passes that found work
        // or yielded, others waiting, is still contended.
        let p = napping(1000);
        let mut l = ThreadPolicy::new();
        let found = PassSeen {
            found: true,
            others_waiting: true,
            ..PassSeen::default()
        };
        let mut handed_back = false;
        for i in 0..12u64 {
            let now = j((i / 4) as usize);
            // A buffer, then a yield, then a nap: two in three waited.
            let after = match i % 3 {
                0 => l.after_pass(now, found, &p),
                1 => l.after_pass(now, empty_at(10 * i, false), &p),
                _ => l.after_pass(now, empty_at(10 * i + 2, false), &p),
            };
            handed_back |= after.hand_back == Some(Exit::Contended);
        }
        assert!(handed_back);
    }

    #[test]
    fn repeated_stalls_hand_everything_back_and_hold_the_thread() {
        let mut l = ThreadPolicy::new();
        // poll_min_gain 0: contention would hand nothing back; stalls do.
        let p = Params {
            min_gain: 0,
            ..Params::DEFAULT
        };
        let stalled = PassSeen {
            stalled: true,
            found: true,
            whole: true,
            ..PassSeen::default()
        };
        let quiet = PassSeen {
            found: true,
            whole: true,
            ..PassSeen::default()
        };
        let mut handed = Vec::new();
        for t in 0..40 {
            // A burst every 5 jiffies stalls the thread's rings.
            let seen = if t % 5 == 0 { stalled } else { quiet };
            if let Some(why) = l.after_pass(Jiffy::from_raw(t), seen, &p).hand_back {
                handed.push((t, why));
            }
        }
        assert_eq!(handed[0], (10, Exit::Stalled), "at the third stall");
        let now = Jiffy::from_raw(11);
        assert!(l.held_until(now).is_some());
        assert!(ThreadPolicy::load(0, false, true, &p).contended);
        assert!(!ThreadPolicy::load(0, false, false, &p).contended);
    }
}
