// SPDX-License-Identifier: GPL-2.0

//! One virtqueue's life between notification mode and poll mode, as the
//! threads decide it: which start request goes where, what a visit
//! decides, and what an exit leaves for the next start.

use super::budget::{Budget, Saves};
use super::cpu::Contention;
use super::gain::{CoolDown, Gain};
use super::params::Params;
use super::threads::{place, ThreadLoad};
use super::time::Jiffy;
use super::window::{Idle, Window};

/// Why a virtqueue leaves poll mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// No work for its idle window.
    Idle,
    /// Polling was switched off (`poll_start_rate` 0), its thread is no
    /// longer wanted (`poll_threads` lowered), or the module unloads.
    Off,
    /// Its ring cannot be read now, or it has no owner.
    Error,
    /// vhost took it back to reconfigure it.
    Quiesce,
    /// vhost tears it down.
    Detach,
    /// Polling it saves too few kicks to pay for itself.
    Gain,
    /// Its thread's CPU is wanted by other tasks: a verdict about the CPU,
    /// not about this virtqueue.
    Contended,
    /// vhost's watchdog took it back: its thread had not visited it for
    /// `poll_stall_us` (its thread kept off its CPU); or its thread was
    /// stalled so again and again (`Stalls`).
    Stalled,
    /// Its worker's polling went to a device that saves more kicks: the
    /// budget of polling workers (`poll_max_workers`) was full.
    Budget,
}

/// A virtqueue's mode, with what only poll mode has.
#[derive(Clone, Debug)]
pub(super) enum Mode<L> {
    /// Notifications on: its own worker runs at each kick.
    Notify,
    /// Notifications off, thread `thread` visits its ring.
    Polled {
        /// The thread that polls it.
        thread: L,
        /// This poll period's last work.
        idle: Idle,
        /// This poll period's gain.
        gain: Gain,
        /// When this poll period began.
        since: Jiffy,
        /// The kicks it saved a jiffy, lately.
        saves: Saves,
    },
}

/// Where a start request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Nothing to do: polled already, or polling is off.
    Ignore,
    /// Start polling it on thread `n`.
    On(usize),
    /// Refused: it stays with its own worker, and its kicks need not ask
    /// again before `until`.
    Refuse {
        /// When a start may be granted again.
        until: Jiffy,
    },
}

/// What a visit saw of the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Its handlers took `taken` buffers since the last visit, and
    /// polling queued the handler `queued` times (buffers waited and none
    /// was running): a thread's visit queues it once at most, a vq's own
    /// worker as often as its polling found work since the last count.
    Ring {
        /// Buffers the handlers took.
        taken: u32,
        /// Handler runs polling queued: each did what a kick would have.
        queued: u32,
    },
    /// The ring could not be read (no owner, a fault, vhost took it back
    /// between the check and the read, its owner was killed).
    Failed,
}

/// Which counter a visit adds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tally {
    /// Nothing: the visit ended poll mode before it counted.
    Nothing,
    /// Work found by polling.
    Work,
    /// An empty poll.
    Empty,
}

/// What a visit decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Visited {
    /// Some handler took buffers since the last visit.
    pub work: bool,
    /// The visit queued the handler: the poll paid.
    pub queued: bool,
    /// The counter it adds to.
    pub tally: Tally,
    /// Leave poll mode, and why.
    pub exit: Option<Exit>,
}

impl Visited {
    /// Nothing seen or counted: the visit ended poll mode before it looked.
    pub const NOTHING: Self = Self {
        work: false,
        queued: false,
        tally: Tally::Nothing,
        exit: None,
    };
}

/// One virtqueue's policy: its mode, its idle window, and its cool-down
/// after a hand-back for want of gain. `L` is how the caller names a
/// thread; the policy only keeps it.
///
/// # Invariants
///
/// `mode` is `Polled` from [`VqPolicy::started`] to [`VqPolicy::stopped`],
/// and only then.
#[derive(Clone, Debug)]
pub struct VqPolicy<L> {
    mode: Mode<L>,
    window: Window,
    cool: CoolDown,
}

impl<L> VqPolicy<L> {
    /// A virtqueue vhost just showed: in notification mode, never polled.
    pub const fn new() -> Self {
        Self {
            mode: Mode::Notify,
            window: Window::new(),
            cool: CoolDown::new(),
        }
    }

    /// The thread that polls it, in poll mode.
    pub fn thread(&self) -> Option<&L> {
        match &self.mode {
            Mode::Polled { thread, .. } => Some(thread),
            Mode::Notify => None,
        }
    }

    /// In poll mode, for the budget: the kicks its polling saved a jiffy
    /// lately, and whether it has polled for the budget's tenure at `now`.
    pub fn saves(&self, now: Jiffy) -> Option<(u32, bool)> {
        match &self.mode {
            Mode::Polled { since, saves, .. } => Some((
                saves.per_jiffy(),
                now.since(*since) >= Budget::TENURE_JIFFIES,
            )),
            Mode::Notify => None,
        }
    }

    /// Whether it is in poll mode.
    pub fn is_polled(&self) -> bool {
        matches!(self.mode, Mode::Polled { .. })
    }

    /// Its idle window now, in jiffies (for the counters).
    pub fn window(&self, p: &Params) -> u32 {
        self.window.jiffies(p.bounds)
    }

    /// Its current cool-down, in jiffies (0: never handed back).
    pub fn cool_down(&self) -> u32 {
        self.cool.jiffies()
    }

    /// Its kicks reached the rate and asked for a start, at `now`, with
    /// the wanted threads' loads ([`ThreadPolicy::load`]). Goes to the thread
    /// that polls the fewest among those not contended; refused while it
    /// cools down (not with `poll_min_gain` 0), or when every thread is
    /// contended.
    ///
    /// [`ThreadPolicy::load`]: super::ThreadPolicy::load
    pub fn start_request(
        &self,
        now: Jiffy,
        loads: impl IntoIterator<Item = ThreadLoad>,
        p: &Params,
    ) -> Start {
        if self.is_polled() || !p.polling_on() {
            return Start::Ignore;
        }
        let thread = place(loads);
        let cooling = p.hands_back() && !self.cool.allows(now);
        match thread {
            Some(n) if !cooling => Start::On(n),
            _ => Start::Refuse {
                until: match self.cool.until() {
                    Some(until) if cooling => until,
                    // Every thread contended: ask again after a window.
                    _ => now.plus(Contention::JIFFIES),
                },
            },
        }
    }

    /// It entered poll mode on `thread` at `now` (its start was granted and
    /// carried out).
    pub fn started(&mut self, thread: L, now: Jiffy, p: &Params) {
        self.window.enter(now, p.bounds);
        // INVARIANT: Entered poll mode.
        self.mode = Mode::Polled {
            thread,
            idle: Idle::new(now),
            gain: Gain::new(),
            since: now,
            saves: Saves::new(),
        };
    }

    /// Before a visit: whether it must leave poll mode without one,
    /// because polling was switched off, or vhost took it back (`taken`:
    /// [`Exit::Quiesce`] or [`Exit::Stalled`]).
    pub fn before_visit(&self, taken: Option<Exit>, p: &Params) -> Option<Exit> {
        if !p.polling_on() {
            Some(Exit::Off)
        } else {
            taken
        }
    }

    /// A visit at `now` saw `seen`. Work is buffers taken, not buffers
    /// seen: a hostile driver can show buffers nobody can take at every
    /// visit. A vq that was held (its handler running, an ioctl, a handler
    /// blocked in a fault) counts by what its handlers took too.
    pub fn visited(&mut self, now: Jiffy, seen: Seen, p: &Params) -> Visited {
        let Mode::Polled {
            idle, gain, saves, ..
        } = &mut self.mode
        else {
            return Visited::NOTHING;
        };
        let (taken, queued) = match seen {
            Seen::Ring { taken, queued } => {
                saves.count(queued);
                (taken, queued)
            }
            Seen::Failed => {
                return Visited {
                    exit: Some(Exit::Error),
                    ..Visited::NOTHING
                }
            }
        };
        let queued_any = queued > 0;
        if gain.visit(taken, queued, p.min_gain) {
            // Polling it saves next to no kicks: vhost's own suppression
            // while its handler runs does nearly as well (see `Gain`).
            return Visited {
                work: taken > 0,
                queued: queued_any,
                tally: Tally::Nothing,
                exit: Some(Exit::Gain),
            };
        }
        if taken > 0 {
            idle.work(now);
            self.window.work(now, p.bounds);
            return Visited {
                work: true,
                queued: queued_any,
                tally: Tally::Work,
                exit: None,
            };
        }
        idle.empty();
        let window = self.window.jiffies(p.bounds);
        Visited {
            work: false,
            queued: queued_any,
            tally: Tally::Empty,
            exit: idle.stops(now, window).then_some(Exit::Idle),
        }
    }

    /// It left poll mode at `now`, for `why`. Returns its thread, and until
    /// when its kicks need not ask for a start (a cool-down began);
    /// `None` if it was not polled.
    pub fn stopped(&mut self, now: Jiffy, why: Exit, p: &Params) -> Option<(L, Option<Jiffy>)> {
        // INVARIANT: Back in notification mode.
        let Mode::Polled {
            thread, idle, gain, ..
        } = core::mem::replace(&mut self.mode, Mode::Notify)
        else {
            return None;
        };
        self.window.exit(now, why == Exit::Idle, &idle, p.bounds);
        let mut closed = None;
        if why == Exit::Budget {
            // Not a verdict on it: it asks again in a while, and may
            // displace a device that saves fewer kicks by then.
            closed = Some(now.plus(Budget::RETRY_JIFFIES));
        } else if Self::cools_down(why) {
            self.cool.hand_back(now);
            closed = self.cool.until();
        } else if gain.paid(p.min_gain) {
            self.cool.paid();
        }
        Some((thread, closed))
    }

    /// Whether an exit for `why` starts a cool-down. Contention is a
    /// verdict on the thread's CPU, not on this vq, yet it cools the vq
    /// down as a want of gain does: without it (a start as soon as a thread
    /// has room) streams churned in and out of poll mode on a contended
    /// CPU, and the A/B of that rule lost stream throughput (geometric
    /// mean of poll/notify 0.74 against 1.02, the thread at 13% of a CPU
    /// against 0.5%; Documentation/results/2026-12-01-contention-cool-down.rst).
    /// A stall is a verdict on the thread's CPU too, a harder one: a task
    /// that kept the thread off it for the watchdog's bound is likely to
    /// do it again.
    fn cools_down(why: Exit) -> bool {
        matches!(why, Exit::Gain | Exit::Contended | Exit::Stalled)
    }
}

impl<L> Default for VqPolicy<L> {
    fn default() -> Self {
        Self::new()
    }
}
