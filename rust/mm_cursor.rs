// SPDX-License-Identifier: GPL-2.0

//! The address space a lane polls in. A lane reads the rings of many
//! owners; each ring is in its owner's address space, which the lane's
//! thread must use to read it. The lane stays in one as long as the next
//! virtqueue to visit is in it too, so a pass over one owner's vqs costs
//! one switch, not one per visit; and it enters and leaves with no lock
//! held, so that a reference it puts (which may be the last) is put
//! outside the table's lock.

use crate::counters::LaneCounters;
use core::sync::atomic::Ordering::Relaxed;
use kernel::{kthread::MmUse, mm::MmWithUser, types::ARef};

/// Proof, lent to one step, that the lane's thread uses an address space.
pub(crate) struct MmScope<'a>(&'a MmUse);

impl MmScope<'_> {
    /// The address space in use.
    pub(crate) fn mm(&self) -> &MmWithUser {
        self.0.mm()
    }

    /// What `VqGuard::poll` takes as that proof.
    pub(crate) fn in_use(&self) -> &MmUse {
        self.0
    }
}

/// What a lane's loop does after a step.
pub(crate) enum Step {
    /// Another step, in the same address space (or none).
    Again,
    /// Another step, in address space `mm` (the lane's own reference).
    Enter(ARef<MmWithUser>),
    /// Another step, in no address space (the lane is about to sleep).
    Leave,
    /// The lane's thread is being stopped.
    Done,
}

/// A lane's loop, one step at a time.
pub(crate) trait Stepper {
    /// One step, in `scope`'s address space, or in none.
    fn step(&mut self, scope: Option<&MmScope<'_>>) -> Step;

    /// The address space the last step asked for could not be entered.
    fn cannot_enter(&mut self);
}

/// Runs `lane`'s steps until one returns [`Step::Done`], each in the
/// address space the one before asked for.
pub(crate) fn drive(counters: &LaneCounters, lane: &mut impl Stepper) {
    let mut next = lane.step(None);
    loop {
        next = match next {
            Step::Done => return,
            Step::Again | Step::Leave => lane.step(None),
            Step::Enter(mm) => {
                counters.mm_switches.fetch_add(1, Relaxed);
                match MmUse::new(mm) {
                    Ok(in_use) => {
                        let scope = MmScope(&in_use);
                        let next = loop {
                            match lane.step(Some(&scope)) {
                                Step::Again => continue,
                                next => break next,
                            }
                        };
                        // Leaves the address space and puts the reference,
                        // with no lock held.
                        drop(in_use);
                        next
                    }
                    Err(_) => {
                        lane.cannot_enter();
                        Step::Again
                    }
                }
            }
        };
    }
}
