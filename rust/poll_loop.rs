// SPDX-License-Identifier: GPL-2.0

//! The polling threads: `vhost-poll` and, when `poll_threads` asks for
//! more, `vhost-poll/1` and on, each visiting the rings of the virtqueues
//! it polls, round robin. The first thread also serves the start requests
//! (`Shared::serve`), and starts and stops the other threads; each
//! thread settles the vqs vhost took back from it, at its next visit.
//!
//! A pass walks the ring of the vqs the thread polls (`ring.rs`), with that
//! ring's lock only, so it costs those vqs, however many others are
//! attached, and waits for no other thread.
//!
//! A thread runs no handler. When a ring has buffers it queues the vq's
//! kick handler to the vq's own vhost worker, as a kick would; starts and
//! stops are carried out by that worker too. A worker on the thread's own
//! CPU (an I/O core whose admin placed the workers there) is then given
//! that CPU (`Pass::hand`): the handler runs at once, charged to its
//! owner, with no wake-up crossing CPUs. So nothing an owner does to
//! its rings, its memory or its vq mutex (a fault that does not resolve,
//! a blocked ioctl, a busy loop) holds a thread up: it holds up that
//! owner's own worker, as it would without polling. See "Isolation and
//! trust" in Documentation/design.rst.
//!
//! Every decision is the policy's (`crate::policy`); this file carries
//! them out: it sleeps, passes, pauses and hands back as told.

use crate::clock;
use crate::compat::{self, ARef};
use crate::handoff::Handoff;
use crate::mm_cursor::{drive, Step, Stepper};
use crate::placement::Placement;
use crate::policy::{Exit, Params, PassSeen, Pause, ThreadPolicy, THREADS_MAX};
use crate::ring::Ring;
use crate::shared::Shared;
use crate::thread::{Thread, NAMES};
use crate::visit::{visit, Visit};
use core::sync::atomic::Ordering::Relaxed;
use kernel::{
    kthread,
    kthread::{KThread, MmScope},
    prelude::*,
    sync::Arc,
    task::Task,
    vhost_poller::{self, Quiescent},
};

/// Another thread, as the first thread keeps it.
struct Helper {
    kthread: KThread,
    thread: Arc<Thread>,
}

/// The other threads, kept by the first thread: `[0]`, the first
/// thread's own place, stays empty.
type Helpers = [Option<Helper>; THREADS_MAX];

/// What a pass found so far, and where it goes on.
#[derive(Default)]
struct Pass {
    found: bool,
    paid: bool,
    /// The next slot of the thread's ring to visit, once begun; `left`
    /// visits at most (the vqs the thread polled when the pass began).
    next: Option<usize>,
    left: u32,
    /// Visits made, and when the first began (`compat::now_ns`; 0 before it).
    visits: u32,
    started_ns: i64,
    /// Visits that queued a handler.
    queued: u32,
    /// Visits that only counted a vq its own worker polls.
    counted: u32,
    /// A visit found a vq vhost's watchdog had taken back.
    stalled: bool,
    /// Every vq it began with was visited: not cut short.
    whole: bool,
    /// The last workers on the thread's CPU it queued a handler to
    /// (`OWN_KEPT`, the oldest replaced): tasks that wait for the CPU
    /// because of the thread, not others it holds up.
    own: [Option<ARef<Task>>; OWN_KEPT],
    own_next: usize,
}

/// The workers on its CPU a pass remembers handing a handler to. A hint:
/// a pass that handed more may count one still waiting as another task.
const OWN_KEPT: usize = 4;

impl Pass {
    /// Gives the thread's CPU to `worker`, which a visit queued a handler
    /// to: the handler runs now, where the thread polled, charged to its
    /// owner, and the thread runs again when it sleeps or its turn ends.
    fn hand(&mut self, worker: ARef<Task>) {
        kthread::yield_to(&worker);
        self.own[self.own_next] = Some(worker);
        self.own_next = (self.own_next + 1) % OWN_KEPT;
    }

    /// A worker it handed a handler to that still waits for the thread's
    /// CPU (a handler longer than its turn), if any.
    fn own_waiting(&self) -> Option<&Task> {
        self.own
            .iter()
            .flatten()
            .map(|w| &**w)
            .find(|w| vhost_poller::waits_here(w))
    }
}

/// One thread's loop, as its thread runs it.
struct ThreadLoop<'a> {
    shared: &'a Arc<Shared>,
    ring: &'a Arc<Ring>,
    thread: &'a Arc<Thread>,
    /// The first thread's: the other threads.
    helpers: Option<&'a mut Helpers>,
    /// The number of threads the first one last started or stopped for.
    running: usize,
    /// The first thread's: no thread it asked to retire is still running.
    settled: bool,
    policy: ThreadPolicy,
    /// The pass under way, if any.
    pass: Option<Pass>,
    /// The slot whose visit waits for its address space to be entered.
    pending: Option<usize>,
    /// The last step found nothing to poll and left the address space:
    /// the next one sleeps.
    sleep_next: bool,
    /// Where its thread runs (`poll_cpus`).
    placement: Placement,
    /// When the last pass's pause ended (`compat::now_ns`), or 0 after a sleep:
    /// the thread's time per pass is counted from there.
    since_pass_ns: i64,
    /// Its reports of RCU quiescent states while it spins.
    quiescent: Quiescent,
}

impl ThreadLoop<'_> {
    /// Nothing to poll: sleeps until a kick reaches the rate or vhost
    /// asks for something (the first thread), or a vq is placed on this
    /// thread (the others), or `poll_cpus` is written. Not while a thread it
    /// asked to retire has finished (the first thread: it stops that
    /// thread first), nor once asked to retire (the others). In no
    /// address space.
    fn sleep(&mut self) {
        let c = &self.thread.counters;
        c.period(true);
        kthread::sleep_unless(|| {
            self.thread.waker.is_pending()
                || self.placement.is_stale()
                || self.thread.retiring()
                || self.reap_due()
        });
        c.period(false);
    }

    /// The first thread's: a thread it asked to retire, or that retired
    /// itself, has finished, and its thread is to be stopped.
    fn reap_due(&self) -> bool {
        self.helpers
            .as_deref()
            .is_some_and(|h| h.iter().flatten().any(|x| x.thread.finished()))
    }

    /// Between passes: keeps the wanted threads running (the first thread),
    /// hands back a thread no longer wanted, serves the requests. Returns
    /// how many vqs this thread polls.
    fn between_passes(&mut self) -> u32 {
        if self.placement.follow(self.thread.index) && self.helpers.is_some() {
            // `poll_cpus` or the online CPUs changed: the other threads may
            // be asleep.
            self.shared.for_each_thread(|thread| {
                if thread.index != 0 {
                    thread.waker.wake();
                }
            });
        }
        let p = crate::param_snapshot::now();
        let wanted = p.threads();
        let due = self.reap_due();
        if let Some(helpers) = self.helpers.as_deref_mut() {
            if wanted != self.running || !self.settled || due {
                self.settled = resize(self.shared, helpers, &p, wanted != self.running);
                self.running = wanted;
            }
        } else if ThreadPolicy::retired(self.thread.index, &p) {
            // Fewer threads wanted, whether or not the first thread is awake
            // to ask: this one hands back and returns (`step`), and the
            // first thread, woken as it finishes, stops its thread.
            self.thread.retire();
        }
        if self.helpers.is_none() {
            // Another thread's wake-ups ask only for a pass (and the looks
            // at placement and `poll_threads` above): no lock.
            self.thread.waker.take();
        } else if self.thread.waker.is_pending() {
            // Requests to serve, under the table's lock; not on every
            // pass, so that a walk of the table (the counters' snapshot)
            // holds up no pass (a wake-up after this read is seen at
            // the next one).
            let mut table = self.shared.table.lock();
            self.shared.serve(&mut table, &p);
        }
        self.thread.polled_vqs()
    }

    /// After a pass: counts it, and pauses and hands back as the policy
    /// says.
    fn after_pass(&mut self, pass: Pass) {
        let c = &self.thread.counters;
        c.passes.fetch_add(1, Relaxed);
        let p = crate::param_snapshot::now();
        let empty = !pass.found && pass.visits > 0;
        let timed = p.max_kick_cost_us != 0;
        // One read of the clock, before the pause, and only where a figure
        // needs it: a pass is a few microseconds.
        let end_ns = if empty || timed { compat::now_ns() } else { 0 };
        if empty {
            // Before the pause: the visits' cost, not the wait after them.
            let spent = end_ns - pass.started_ns;
            c.empty_visits.fetch_add(pass.visits.into(), Relaxed);
            c.empty_visit_ns
                .fetch_add(u64::try_from(spent).unwrap_or(0), Relaxed);
        }
        let from = if self.since_pass_ns != 0 {
            self.since_pass_ns
        } else {
            pass.started_ns
        };
        // A worker of the thread's still waiting for its CPU is given it
        // again. Whoever waits once it has run is another task the thread
        // holds up; while one still waits (a handler longer than its
        // turn), the thread cannot tell, and counts nobody.
        let mut own = pass.own_waiting();
        if let Some(worker) = own {
            kthread::yield_to(worker);
            own = pass.own_waiting();
        }
        let others_waiting = !kthread::single_task_running() && own.is_none();
        let seen = PassSeen {
            paid: pass.paid,
            found: pass.found,
            others_waiting,
            // Only `poll_max_kick_cost` reads it; none if no pass began (a
            // wake-up ended it first).
            ns: if !timed || from == 0 {
                0
            } else {
                u64::try_from(end_ns - from).unwrap_or(0)
            },
            queued: pass.queued,
            // Read for an empty pass: what a quiet thread's nap needs.
            end_ns: if empty {
                u64::try_from(end_ns).unwrap_or(0)
            } else {
                0
            },
            // A nap is not cut short: none while a wake-up or a stop waits.
            asked: self.thread.waker.is_pending()
                || kthread::should_stop()
                || self.thread.retiring(),
            counted_only: pass.visits > 0 && pass.counted == pass.visits,
            stalled: pass.stalled,
            whole: pass.whole,
        };
        let now = clock::now();
        let after = self.policy.after_pass(now, seen, &p);
        self.thread.set_contended(self.policy.contended());
        self.thread.set_held(self.policy.held_until(now));
        if let Some(why) = after.hand_back {
            match why {
                Exit::Stalled => c.stalled.fetch_add(1, Relaxed),
                _ => c.contended.fetch_add(1, Relaxed),
            };
            self.shared.hand_back(self.thread, why);
            // Its slot is free, or another vq's: the next pass begins at
            // the ring's head.
            self.pending = None;
        }
        match after.pause {
            Pause::None => {}
            Pause::Busy => clock::pause(),
            Pause::Nap(us) => {
                clock::nap(us);
                c.naps.fetch_add(1, Relaxed);
                c.nap_us.fetch_add(us.into(), Relaxed);
            }
            Pause::Tick => clock::tick(),
            Pause::Yield => {
                let t0 = compat::now_ns();
                clock::give_way(pass.found);
                let spent = (compat::now_ns() - t0) / 1000;
                c.yields.fetch_add(1, Relaxed);
                c.yield_us
                    .fetch_add(u64::try_from(spent).unwrap_or(0), Relaxed);
            }
        }
        kthread::cond_resched();
        self.quiescent.report();
        // The next pass's time counts from here; time given to others
        // after a yield is not the thread's.
        self.since_pass_ns =
            if timed && !matches!(after.pause, Pause::Yield | Pause::Nap(_) | Pause::Tick) {
                compat::now_ns()
            } else {
                0
            };
    }
}

impl Stepper for ThreadLoop<'_> {
    fn step(&mut self, scope: Option<&MmScope<'_>>) -> Step {
        let mut pass = match self.pass.take() {
            Some(pass) => pass,
            None => {
                if core::mem::take(&mut self.sleep_next) {
                    self.sleep();
                    return Step::Again;
                }
                if kthread::should_stop() {
                    return Step::Done;
                }
                // A thread asked to retire, or that sees itself retired
                // there, hands back and returns (`run`).
                let polled = self.between_passes();
                if self.thread.retiring() {
                    return Step::Done;
                }
                if polled == 0 {
                    self.pending = None;
                    self.since_pass_ns = 0;
                    self.policy.rested();
                    self.thread.set_contended(false);
                    if scope.is_some() {
                        self.sleep_next = true;
                        return Step::Leave;
                    }
                    self.sleep();
                    return Step::Again;
                }
                Pass::default()
            }
        };
        // One pass: each vq this thread polls once, one handler run each.
        loop {
            if self.thread.waker.is_pending() || kthread::should_stop() {
                break;
            }
            let mut polled = self.ring.members.lock();
            let pos = match (self.pending.take(), pass.next) {
                (Some(pos), Some(_)) => pos,
                (Some(pos), None) => {
                    // The visit that waited for its address space, when a
                    // wake-up ended its pass: it begins this one.
                    pass.left = self.thread.polled_vqs();
                    pass.started_ns = compat::now_ns();
                    pos
                }
                (None, Some(_)) if pass.left == 0 => {
                    pass.whole = true;
                    break;
                }
                (None, Some(pos)) => pos,
                (None, None) => {
                    pass.left = self.thread.polled_vqs();
                    pass.started_ns = compat::now_ns();
                    match polled.turn() {
                        Some(pos) => pos,
                        None => {
                            pass.whole = true;
                            break;
                        }
                    }
                }
            };
            // Read before the visit, whose exit the thread settles next.
            let after = polled.next(pos);
            let Some(x) = polled
                .get_mut(pos)
                .filter(|x| x.entry.polled_by(self.thread))
            else {
                // Stopped since the last step (detach, a hand-back): the
                // pass ends here, and the next begins at the ring's head.
                break;
            };
            let mut stopped = false;
            let here = match visit(&mut x.entry, scope) {
                Visit::Made(v, counted, worker) => {
                    pass.visits += 1;
                    pass.counted += u32::from(counted);
                    pass.found |= v.work;
                    pass.paid |= v.queued;
                    pass.queued += u32::from(v.queued);
                    if let Some(why) = v.exit {
                        pass.stalled |= why == Exit::Stalled;
                        x.entry
                            .stop(why, clock::now(), &crate::param_snapshot::now());
                        stopped = true;
                    }
                    pass.next = Some(after);
                    pass.left = pass.left.saturating_sub(1);
                    worker
                }
                Visit::Needs(mm) => {
                    // Visited again, first, in that address space.
                    self.pending = Some(pos);
                    pass.next = Some(pos);
                    self.pass = Some(pass);
                    drop(polled);
                    return Step::Enter(mm);
                }
            };
            drop(polled);
            if stopped {
                // Back to the table, with its lock: not held above.
                self.shared.settle(self.thread);
            }
            // With no lock held: the worker may run for a while.
            if let Some(worker) = here {
                pass.hand(worker);
            }
            kthread::cond_resched();
        }
        self.after_pass(pass);
        Step::Again
    }

    fn cannot_enter(&mut self) {
        let Some(pos) = self.pending.take() else {
            return;
        };
        let mut polled = self.ring.members.lock();
        if let Some(x) = polled
            .get_mut(pos)
            .filter(|x| x.entry.polled_by(self.thread))
        {
            x.entry
                .stop(Exit::Error, clock::now(), &crate::param_snapshot::now());
        }
        drop(polled);
        self.shared.settle(self.thread);
    }
}

/// The loop of `thread`'s thread. The first thread passes `helpers`, the
/// others' places: it serves the requests and keeps the wanted threads
/// running, and stops them all before it returns.
fn run(shared: &Arc<Shared>, ring: &Arc<Ring>, helpers: Option<&mut Helpers>) {
    let thread = &ring.thread;
    let c = &thread.counters;
    let pid = current!().pid();
    c.pid.store(pid.into(), Relaxed);
    c.since_ns.store(compat::now_ns(), Relaxed);
    let mut thread_loop = ThreadLoop {
        shared,
        ring,
        thread,
        helpers,
        running: 1,
        settled: true,
        policy: ThreadPolicy::new(),
        pass: None,
        pending: None,
        sleep_next: false,
        placement: Placement::new(),
        since_pass_ns: 0,
        quiescent: Quiescent::default(),
    };
    drive(c, &mut thread_loop);
    if let Some(helpers) = thread_loop.helpers.as_deref_mut() {
        // The others first: each returns its vqs as it stops.
        stop_all(shared, helpers);
    }
    shared.hand_back(thread, Exit::Off);
    c.period(true);
    if thread.index != 0 {
        // Retired or stopped: the first thread may stop it now without
        // waiting for it (`resize`).
        thread.finish();
        shared.first.thread.waker.wake();
    }
}

/// Stops thread `i`'s thread, whose thread handed everything back or is
/// asked to (`kthread_stop()`), and forgets its thread: a thread stopped
/// before it ever ran handed nothing back, so what its ring still holds
/// goes back here.
fn reap(shared: &Arc<Shared>, helper: Helper, i: usize) {
    helper.kthread.stop();
    shared.retire(i);
}

/// Stops every other thread, waiting for each (the first thread's
/// thread returns).
fn stop_all(shared: &Arc<Shared>, helpers: &mut Helpers) {
    for i in (1..THREADS_MAX).rev() {
        if let Some(helper) = helpers[i].take() {
            reap(shared, helper, i);
        }
    }
}

/// Moves the threads towards what `p` wants, with `helpers[i]`
/// running thread `i`, and returns whether they are there. It does not wait
/// for a thread to run: a thread no longer wanted is asked to retire (it
/// hands its vqs back and returns when it next runs, and gets no vq
/// meanwhile), and its thread is stopped once it says it finished, which
/// wakes the first thread, the caller, holding no lock. (`kthread_stop()`
/// then waits for the thread's last steps, from `finish` to its exit: a
/// thread preempted just there for long would still hold it up.) A
/// thread kept off its CPU (a real-time task there) thus holds up
/// neither the first thread's requests nor its passes, and its vqs are the
/// watchdog's meanwhile.
/// New threads are started only when `changed` (`poll_threads` was
/// written) or a thread was just stopped: a start that failed waits for
/// the next write.
fn resize(shared: &Arc<Shared>, helpers: &mut Helpers, p: &Params, changed: bool) -> bool {
    let (mut settled, mut reaped) = (true, false);
    for (i, place) in helpers.iter_mut().enumerate().skip(1) {
        let Some(helper) = place.as_ref() else {
            continue;
        };
        if helper.thread.finished() {
            if let Some(helper) = place.take() {
                reap(shared, helper, i);
                reaped = true;
            }
        } else if ThreadPolicy::retired(i, p) || helper.thread.retiring() {
            // Wanted again before it finished: it finishes first, and a
            // new thread takes its place then.
            helper.thread.retire();
            settled = false;
        }
    }
    if !changed && !reaped {
        return settled;
    }
    for (i, place) in helpers.iter_mut().enumerate().take(p.threads()).skip(1) {
        if place.is_some() {
            continue;
        }
        match spawn(shared, i) {
            Ok(helper) => *place = Some(helper),
            Err(e) => {
                // Its place stays empty, and gets no vq, until
                // `poll_threads` is written again.
                pr_warn!("cannot start polling thread {}: {:?}\n", i, e);
                break;
            }
        }
    }
    settled
}

/// Starts thread `i`'s thread, with a thread of its own in the table.
fn spawn(shared: &Arc<Shared>, i: usize) -> Result<Helper> {
    let handoff = Handoff::new()?;
    let (thread_shared, thread_handoff) = (shared.clone(), handoff.clone());
    let name = NAMES.get(i).copied().ok_or(EINVAL)?;
    let kthread = KThread::run(name, move || {
        if let Some(ring) = thread_handoff.wait() {
            run(&thread_shared, &ring, None);
        }
    })?;
    // On error, dropping `kthread` stops it before it got a thread.
    let ring = Ring::new(Thread::new(i, kthread.task().into())?)?;
    let before = shared.table.lock().set_thread(i, Some(ring.clone()));
    // None (the place was free); dropped without the table's lock anyway.
    drop(before);
    handoff.give(ring.clone());
    ring.thread.waker.wake();
    Ok(Helper {
        kthread,
        thread: ring.thread.clone(),
    })
}

/// The first thread: waits for its `Shared`, then runs, starting
/// and stopping the others; returns at once if stopped before it got one.
pub(crate) fn run_first(handoff: Arc<Handoff<Arc<Shared>>>) {
    if let Some(shared) = handoff.wait() {
        let mut helpers: Helpers = core::array::from_fn(|_| None);
        let first = shared.first.clone();
        run(&shared, &first, Some(&mut helpers));
    }
}
