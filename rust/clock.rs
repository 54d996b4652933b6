// SPDX-License-Identifier: GPL-2.0

//! Time as the module counts it, and how an empty pass lets it go by.

use crate::{compat, policy::Jiffy};
use kernel::{
    kthread,
    time::{delay, jiffies},
};

/// How long a pass that found no work pauses, in microseconds.
const EMPTY_PASS_PAUSE_US: u32 = 2;

/// The same on UML, where the pause is a sleep and each pass costs real
/// time through the host: under `time-travel=inf-cpu` one idle polled vq
/// cost 2.4 s of real time per simulated second with 2 µs pauses
/// (307,000 passes of 7.8 µs each), 0.2 s with 50 µs; under real time
/// the host's timer already stretched a 2 µs sleep to about 35 µs.
const UML_EMPTY_PASS_PAUSE_US: u32 = 50;

/// Lets a pass's pause go by. A busy wait on hardware: a sleep would cost
/// a wake-up, and the thread polls to be there at once. A sleep on UML:
/// with simulated time (`time-travel=inf-cpu`) a busy wait charges the
/// time to this thread, which the scheduler then keeps off the CPU for as
/// long as tasks that ran in no simulated time stay runnable, while a sleep
/// moves the clock, and so `jiffies`, charged to no task. A thread is a
/// kernel thread outside atomic context: it may sleep.
pub(crate) fn pause() {
    if cfg!(CONFIG_UML) {
        compat::sleep_idle_us(UML_EMPTY_PASS_PAUSE_US);
    } else {
        compat::busy_wait_us(EMPTY_PASS_PAUSE_US);
    }
}

/// Sleeps `us` microseconds between passes, the rings being quiet
/// (`Pause::Nap`), in the idle state: a nap adds nothing to the load
/// average. A wake-up does not end it early; it is short (`poll_max_nap`).
pub(crate) fn nap(us: u32) {
    compat::sleep_idle_us(us);
}

/// Sleeps to the next jiffy (`Pause::Tick`): the thread only counts the
/// work of virtqueues their own workers poll, once a jiffy.
pub(crate) fn tick() {
    delay::sleep_jiffy();
}

/// Lets the tasks waiting for the CPU run first (`Pause::Yield`) after a
/// pass that `found` work or not: a yield, so that the thread polls again
/// as soon as the CPU is free. On UML, whose one CPU always has others
/// waiting, the rule before the yield: a pause (a sleep) after a pass
/// that found nothing, for under simulated time a task that never sleeps
/// stops the clock, and `jiffies` with it.
pub(crate) fn give_way(found: bool) {
    if cfg!(CONFIG_UML) {
        if !found {
            pause();
        }
    } else {
        kthread::yield_now();
    }
}

/// The current jiffy, as the policy counts time: the policy builds on the
/// host too, so it has its own `Jiffy`, with `JiffiesInstant`'s rule.
pub(crate) fn now() -> Jiffy {
    // `unsigned long` is as wide as `usize` on every Linux architecture.
    Jiffy::from_raw(jiffies().raw() as usize)
}
