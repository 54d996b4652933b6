// SPDX-License-Identifier: GPL-2.0

//! Whether polling a virtqueue pays, and how long one that did not
//! waits before it may be polled again.

use super::time::{Backoff, Jiffy};

/// Whether polling a virtqueue pays: how many kicks it saves for the
/// buffers its handlers take.
///
/// A visit that queues the handler does what a kick would have done: the
/// ring had buffers and no handler was running or queued. A ring whose
/// handler is nearly always running when visited gains little from
/// polling, because vhost turns a driver's notifications off while a
/// handler runs anyway: its driver kicked seldom per buffer even before.
/// Such a virtqueue costs the poller's CPU and, when the ring drains, the
/// wait for the next visit, and saves next to nothing: polling it is a
/// loss. So over every [`Gain::SAMPLE`] buffers taken in poll mode, a
/// virtqueue whose visits queued its handler fewer than `min_per_1k`
/// times per thousand buffers (the `poll_min_gain` parameter; 0 never)
/// goes back to notification mode, and is not polled again for a while
/// ([`CoolDown`]).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Gain {
    taken: u64,
    queued: u64,
}

impl Gain {
    /// Buffers taken between two verdicts.
    pub(super) const SAMPLE: u64 = 4096;

    /// No buffer seen yet.
    pub(super) const fn new() -> Self {
        Self {
            taken: 0,
            queued: 0,
        }
    }

    /// A visit saw `taken` buffers taken and the handler queued by
    /// polling `queued` times. Returns whether the virtqueue should go
    /// back to notification mode: polling saved fewer than `min_per_1k`
    /// kicks per thousand buffers.
    pub(super) fn visit(&mut self, taken: u32, queued: u32, min_per_1k: u32) -> bool {
        self.taken = self.taken.saturating_add(taken.into());
        self.queued = self.queued.saturating_add(queued.into());
        if self.taken < Self::SAMPLE {
            return false;
        }
        let min = u64::from(min_per_1k);
        let low = self.queued.saturating_mul(1000) < min.saturating_mul(self.taken);
        *self = Self::new();
        low
    }

    /// Whether the buffers taken since the last verdict show that polling
    /// paid: visits queued the handler at least `min_per_1k` times per
    /// thousand buffers, and at least once. A poll period that ends for
    /// another reason (idle, say) with this true ends the cool-down
    /// ([`CoolDown::paid`]); one that took buffers without it leaves the
    /// cool-down as it is, so that a stream that pauses now and then
    /// does not start its probing over.
    pub(super) fn paid(&self, min_per_1k: u32) -> bool {
        self.queued > 0
            && self.queued.saturating_mul(1000) >= u64::from(min_per_1k).saturating_mul(self.taken)
    }
}

/// How long a virtqueue handed back for want of gain waits before it may
/// be polled again: [`CoolDown::MIN_JIFFIES`] the first time, twice as long
/// each time it is handed back again within the next wait, up to
/// [`CoolDown::MAX_JIFFIES`]; back to the minimum once a poll period ends
/// otherwise (idle, quiesce, off) having paid ([`Gain::paid`]). A
/// [`Backoff`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct CoolDown {
    wait: Backoff,
}

impl CoolDown {
    /// The first wait.
    pub(super) const MIN_JIFFIES: u32 = 16;
    /// The longest.
    pub(super) const MAX_JIFFIES: u32 = 4096;

    /// Never handed back.
    pub(super) const fn new() -> Self {
        Self {
            wait: Backoff::new(),
        }
    }

    /// Handed back at `now` for want of gain.
    pub(super) fn hand_back(&mut self, now: Jiffy) {
        self.wait.start(now, Self::MIN_JIFFIES, Self::MAX_JIFFIES);
    }

    /// A poll period ended for another reason: polling paid.
    pub(super) fn paid(&mut self) {
        *self = Self::new();
    }

    /// Whether the virtqueue may enter poll mode at `now`.
    pub(super) fn allows(&self, now: Jiffy) -> bool {
        !matches!(self.wait.until(), Some(u) if u.is_after(now))
    }

    /// The current wait in jiffies (0: never handed back).
    pub(super) fn jiffies(&self) -> u32 {
        self.wait.jiffies()
    }

    /// The end of the current wait, if there is one.
    pub(super) fn until(&self) -> Option<Jiffy> {
        self.wait.until()
    }
}

#[cfg(test)]
mod tests {
    use super::super::time::tests::j;
    use super::*;

    #[test]
    fn gain_hands_back_a_ring_that_polling_barely_helps() {
        let mut g = Gain::new();
        // A stream: handler busy at nearly every visit, 2 kicks saved per
        // thousand buffers.
        let mut verdicts = Vec::new();
        for i in 0..2048u32 {
            verdicts.push(g.visit(2, u32::from(i % 256 == 0), 16));
        }
        assert!(verdicts[..2047].iter().all(|v| !v));
        assert!(verdicts[2047]);
    }

    #[test]
    fn gain_keeps_a_request_response_ring() {
        let mut g = Gain::new();
        // One buffer per request, the handler queued by the poller each time.
        for _ in 0..100_000 {
            assert!(!g.visit(1, 1, 16));
        }
        // Exactly at the threshold: kept.
        let mut g = Gain::new();
        let mut low = false;
        for i in 0..4096u32 {
            low |= g.visit(1, u32::from(i % 62 == 0 && i < 62 * 66), 16);
        }
        assert!(!low);
    }

    #[test]
    fn gain_paid_needs_a_queued_visit_at_the_rate() {
        let mut g = Gain::new();
        assert!(!g.paid(16), "nothing seen: no proof it paid");
        assert!(!g.visit(100, 0, 16));
        assert!(!g.paid(16), "buffers taken, no handler queued");
        assert!(!g.visit(1, 1, 16));
        assert!(!g.paid(16), "1 queued in 101 buffers is under 16 per 1000");
        assert!(g.paid(1) && g.paid(0));
        assert!(!g.visit(1, 1, 16));
        assert!(g.paid(16), "2 queued in 102 buffers: about 19.6 per 1000");
    }

    #[test]
    fn gain_counts_every_run_a_worker_queued_between_two_counts() {
        // A vq its own worker polls, counted once a jiffy: 200 requests a
        // jiffy, each picked up by the worker's polling. Kept.
        let mut g = Gain::new();
        for _ in 0..1000 {
            assert!(!g.visit(200, 200, 16));
        }
        // Counted as one saved kick a count (what a bool could say), the
        // same vq would have been handed back at the first verdict.
        let mut g = Gain::new();
        let low = (0..21).map(|_| g.visit(200, 1, 16)).any(|v| v);
        assert!(low);
    }

    #[test]
    fn gain_zero_never_hands_back() {
        let mut g = Gain::new();
        for _ in 0..100_000 {
            assert!(!g.visit(4, 0, 0));
        }
    }

    #[test]
    fn cool_down_doubles_when_handed_back_again_soon() {
        let mut c = CoolDown::new();
        assert!(c.allows(j(0)));
        c.hand_back(j(100));
        assert_eq!(c.jiffies(), 16);
        assert!(!c.allows(j(115)));
        assert!(c.allows(j(116)));
        // Handed back again within the next wait: twice as long.
        c.hand_back(j(120));
        assert_eq!(c.jiffies(), 32);
        assert!(!c.allows(j(151)));
        assert!(c.allows(j(152)));
        for t in 0..20 {
            c.hand_back(j(200 + t));
        }
        assert_eq!(c.jiffies(), CoolDown::MAX_JIFFIES);
        // A period that ended otherwise resets it.
        c.paid();
        assert!(c.allows(j(221)));
        c.hand_back(j(300));
        assert_eq!(c.jiffies(), 16);
    }

    #[test]
    fn cool_down_starts_over_after_a_long_quiet() {
        let mut c = CoolDown::new();
        c.hand_back(j(0));
        c.hand_back(j(20));
        assert_eq!(c.jiffies(), 32);
        // Long after the wait ended, plus as long again: the minimum.
        c.hand_back(j(1000));
        assert_eq!(c.jiffies(), 16);
    }

    #[test]
    fn cool_down_across_the_wrap() {
        let mut c = CoolDown::new();
        c.hand_back(j(usize::MAX - 4));
        assert!(!c.allows(j(5)));
        assert!(c.allows(j(11)));
    }
}
