// SPDX-License-Identifier: GPL-2.0

//! One lane (polling thread) as the policy sees it: what it does after
//! each pass, whether it has time to spare for another virtqueue, and
//! whether it should run at all.

use super::cpu::{Contention, Pause, StepAside};
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
}

/// What the lane does after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfterPass {
    /// How it pauses.
    pub pause: Pause,
    /// Hand every virtqueue of the lane back, for this reason.
    pub hand_back: Option<Exit>,
}

/// A lane's policy, kept by its thread.
#[derive(Debug, Default)]
pub struct LanePolicy {
    contention: Contention,
}

impl LanePolicy {
    /// A lane that has not polled yet.
    pub const fn new() -> Self {
        Self {
            contention: Contention::new(),
        }
    }

    /// A pass ended at `now` having seen `seen`.
    pub fn after_pass(&mut self, now: Jiffy, seen: PassSeen, p: &Params) -> AfterPass {
        let pause = StepAside::after_pass(seen.paid, seen.found, seen.others_waiting);
        self.contention.after_pass(now, seen.others_waiting);
        let _ = p;
        AfterPass {
            pause,
            // Each vq leaves by its own verdict at the lane's price
            // (`VqPolicy::visited_at`): nothing is handed back wholesale.
            hand_back: None,
        }
    }

    /// The lane slept with nothing to poll: its CPU is measured afresh.
    pub fn rested(&mut self) {
        self.contention.rested();
    }

    /// Whether its last whole contention window found its CPU wanted by
    /// others (placement then gives it no virtqueue).
    pub fn contended(&self) -> bool {
        self.contention.contended()
    }

    /// What a visit of this lane costs the other tasks, as a factor on
    /// what a vq must save (`Contention::price`): 1 on a free CPU.
    pub fn price(&self) -> u32 {
        self.contention.price()
    }

    /// A running lane as placement sees it, polling `polled` virtqueues,
    /// at `price`. It has no room when no vq could pay at that price (one
    /// whose every visit queues its handler saves 1000 kicks per thousand
    /// buffers); with `poll_min_gain` 0 it always has.
    pub fn load(polled: u32, price: u32, p: &Params) -> ThreadLoad {
        let need = u64::from(p.min_gain).saturating_mul(price.into());
        ThreadLoad {
            polled,
            contended: p.hands_back() && need > 1000,
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
