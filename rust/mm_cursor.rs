// SPDX-License-Identifier: GPL-2.0

//! The address space a thread polls in. A thread reads the rings of many
//! owners; each ring is in its owner's address space, which the thread's
//! thread must use to read it (`kthread::with_mm`), unless vhost can tell
//! without it (`VqGuard::peek`: the avail index through a pinned page,
//! the idle ring's case). The thread stays in one address space as long as
//! the next virtqueue to visit is in it too or needs none, so a pass over
//! one owner's vqs, or over idle ones, costs no switch; it enters and
//! leaves with no lock held, and the reference it held is put
//! asynchronously (`mmput_async`, on an unbound worker), so that the last
//! reference of an exiting owner is never torn down in the thread,
//! nor by a worker bound to the thread's CPU.

use crate::compat::ARef;
use crate::counters::ThreadCounters;
use core::sync::atomic::Ordering::Relaxed;
use kernel::{
    kthread::{with_mm, MmScope},
    mm::MmWithUser,
};

/// What a thread's loop does after a step.
pub(crate) enum Step {
    /// Another step, in the same address space (or none).
    Again,
    /// Another step, in address space `mm` (the thread's own reference).
    Enter(ARef<MmWithUser>),
    /// Another step, in no address space (the thread is about to sleep).
    Leave,
    /// The thread is being stopped.
    Done,
}

/// A thread's loop, one step at a time. `Send`: its steps run in the
/// closure `with_mm` takes (a closure that could not be sent could keep
/// something of the thread, such as its address space, past the scope).
pub(crate) trait Stepper: Send {
    /// One step, in `scope`'s address space, or in none.
    fn step(&mut self, scope: Option<&MmScope<'_>>) -> Step;

    /// The address space the last step asked for could not be entered.
    fn cannot_enter(&mut self);
}

/// Runs `thread`'s steps until one returns [`Step::Done`], each in the
/// address space the one before asked for.
pub(crate) fn drive(counters: &ThreadCounters, thread: &mut impl Stepper) {
    let mut next = thread.step(None);
    loop {
        next = match next {
            Step::Done => return,
            Step::Again | Step::Leave => thread.step(None),
            Step::Enter(mm) => {
                counters.mm_switches.fetch_add(1, Relaxed);
                let next = with_mm(&mm, |scope| loop {
                    match thread.step(Some(scope)) {
                        Step::Again => continue,
                        next => break next,
                    }
                });
                // Out of the address space, with no lock held: the
                // reference goes back without tearing anything down here.
                drop(MmWithUser::into_mmput_async(mm));
                match next {
                    Ok(next) => next,
                    Err(_) => {
                        thread.cannot_enter();
                        Step::Again
                    }
                }
            }
        };
    }
}
