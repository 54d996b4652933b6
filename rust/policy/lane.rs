// SPDX-License-Identifier: GPL-2.0

//! One lane (polling thread) as the policy sees it: what it does after
//! each pass, whether it has time to spare for another virtqueue, and
//! whether it should run at all.

use super::cpu::{Contention, KickCost, Pause, Quiet, StepAside};
use super::lanes::ThreadLoad;
use super::params::Params;
use super::time::Jiffy;
use super::vq::Exit;

/// What a pass saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassSeen {
    /// A visit queued a handler (did what a kick would have done).
    pub paid: bool,
    /// Some handler took buffers since the last visit.
    pub found: bool,
    /// Other tasks waited for the lane's CPU when the pass ended.
    pub others_waiting: bool,
    /// The lane's time since the last pass's pause ended, in ns: this
    /// pass, and what kept it from starting; not the time it gave way to
    /// others after a yield.
    pub ns: u64,
    /// Visits that queued a handler.
    pub queued: u32,
    /// The clock when the pass ended (`Ktime` ns), or 0 where no rule
    /// needed it: a pass that found work reads none.
    pub end_ns: u64,
}

/// What the lane does after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfterPass {
    /// How it pauses.
    pub pause: Pause,
    /// Hand every virtqueue of the lane back, for this reason.
    ///
    /// Every one, not only some, is what contention must take: a lane
    /// spins as long as it polls one virtqueue, its passes only shorter
    /// with fewer, so only a lane that polls none gives its CPU back to
    /// the tasks that wait for it. The virtqueues that keep reaching the
    /// rate come back after their cool-down, on a lane whose CPU is not
    /// wanted (placement passes over a contended one, `ThreadLoad`).
    pub hand_back: Option<Exit>,
}

/// A lane's policy, kept by its thread.
#[derive(Debug, Default)]
pub struct LanePolicy {
    contention: Contention,
    kick_cost: KickCost,
    quiet: Quiet,
}

impl LanePolicy {
    /// A lane that has not polled yet.
    pub const fn new() -> Self {
        Self {
            contention: Contention::new(),
            kick_cost: KickCost::new(),
            quiet: Quiet::new(),
        }
    }

    /// A pass ended at `now` having seen `seen`.
    pub fn after_pass(&mut self, now: Jiffy, seen: PassSeen, p: &Params) -> AfterPass {
        let nap = self
            .quiet
            .after_pass(seen.end_ns, seen.found || seen.paid, p.max_nap_us);
        let pause = if nap != 0 {
            // Its CPU is free during the nap, for whoever waits.
            Pause::Nap(nap)
        } else {
            StepAside::after_pass(seen.paid, seen.found, seen.others_waiting)
        };
        self.contention.after_pass(now, seen.others_waiting);
        self.kick_cost.after_pass(
            now,
            seen.ns,
            seen.queued,
            seen.others_waiting,
            p.max_kick_cost_us,
        );
        AfterPass {
            pause,
            // With `poll_min_gain` 0 contention hands nothing back.
            hand_back: (self.contended() && p.hands_back()).then_some(Exit::Contended),
        }
    }

    /// The lane slept with nothing to poll: its CPU is measured afresh.
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

    /// A running lane as placement sees it, polling `polled` virtqueues,
    /// its CPU last found `contended` or not. With `poll_min_gain` 0
    /// contention refuses nothing.
    pub fn load(polled: u32, contended: bool, p: &Params) -> ThreadLoad {
        ThreadLoad {
            polled,
            contended: contended && p.hands_back(),
        }
    }

    /// A lane whose thread is not running (it could not be started): no
    /// room, whatever the parameters.
    pub const ABSENT: ThreadLoad = ThreadLoad {
        polled: 0,
        contended: true,
    };

    /// Whether lane `index` is one too many for `poll_threads`: its
    /// virtqueues go back ([`Exit::Off`]) and the first lane stops it.
    pub fn retired(index: usize, p: &Params) -> bool {
        index >= p.lanes()
    }
}
