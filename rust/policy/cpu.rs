// SPDX-License-Identifier: GPL-2.0

//! The polling thread's CPU: whether it competes for it, and how it
//! pauses after a pass.

use super::time::Jiffy;

/// How a lane pauses after a pass: it steps aside for the tasks
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
///   a turn given, after which the lane polls again as soon as the CPU
///   is free.
/// - Otherwise it goes on at once if it found work (some handler took
///   buffers since the last visit), and pauses briefly if it found none,
///   as before this rule: a pass that only queued handlers for buffers
///   nobody takes (a hostile ring) must not spin.
#[derive(Debug, Default)]
pub(super) struct StepAside;

/// What a lane does after a pass.
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

/// Whether a lane competes for its CPU: polling then costs the
/// other tasks (the devices' own workers, the guests) more than it saves.
///
/// Polling pays on a CPU of its own, or one with time to spare: the
/// lane notices a ring's buffers and wakes its worker while the
/// guest goes on. On a CPU that the guests and the workers need, each
/// pass of the lane is time they wait for, and a ring that fills waits
/// for the lane's next turn where a kick would have woken its worker at
/// once. So the lane measures, over windows of [`Contention::JIFFIES`]
/// jiffies, how many of its passes ended with other tasks waiting for its
/// CPU. When at least half did, the lane is *contended*: it hands its
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

    /// The lane slept with nothing to poll: measure afresh.
    pub fn rested(&mut self) {
        *self = Self::new();
    }

    /// Whether the last whole window found the lane contended.
    pub fn contended(&self) -> bool {
        self.contended
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
}
