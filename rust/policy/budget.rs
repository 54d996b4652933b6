// SPDX-License-Identifier: GPL-2.0

//! The host-wide budget of polling workers: how many vhost workers may
//! poll their own virtqueues at once (`poll_max_workers`), and which of
//! them keep polling when more want to.
//!
//! A worker that polls spins whenever it is alone on its CPU, so the
//! budget's unit is a worker: each costs up to a CPU. When the budget is
//! full, polling goes to the devices that save the most kicks a jiffy:
//! a new one whose kicks reached the rate displaces the polled device
//! that saves the fewest, if it kicks more than [`Budget::MARGIN`] times
//! as often as that one saves, and that one has polled for
//! [`Budget::TENURE_JIFFIES`] at least (the floor: a device that pays
//! keeps its turn long enough to show it, and two devices do not swap
//! at every kick). Otherwise the start is refused for
//! [`Budget::RETRY_JIFFIES`].

use super::time::Jiffy;

/// A device whose worker polls, as the budget sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spinner {
    /// Which device: its virtqueues share one worker.
    pub key: u32,
    /// Kicks its worker's polling saved a jiffy, lately, all its polled
    /// virtqueues together ([`Saves`]).
    pub saves: u32,
    /// Whether it has polled for [`Budget::TENURE_JIFFIES`], and may be
    /// displaced.
    pub settled: bool,
}

/// What the budget says to a start in a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Room, or its worker polls already: start.
    Yes,
    /// Start, once the device `key` has been handed back.
    Displace(u32),
    /// No room: refused until the jiffy given.
    No(Jiffy),
}

/// The budget's rules.
pub struct Budget;

impl Budget {
    /// How long a device polls before another may displace it.
    pub const TENURE_JIFFIES: usize = 16;
    /// How long a refused or displaced device waits before asking again:
    /// twice the tenure, so that two devices that both save little do not
    /// swap the place at every tenure.
    pub const RETRY_JIFFIES: usize = 32;
    /// How many times the saves of the device it displaces a new one's
    /// kick rate must be.
    pub const MARGIN: u32 = 2;

    /// Whether device `key`, whose kicks reached `rate` in a jiffy, may
    /// start polling in its worker at `now`, with `spinners` polling and
    /// room for `max` (at least 1).
    pub fn admit(spinners: &[Spinner], key: u32, rate: u32, max: usize, now: Jiffy) -> Admit {
        if spinners.len() < max.max(1) || spinners.iter().any(|s| s.key == key) {
            return Admit::Yes;
        }
        let weakest = spinners
            .iter()
            .filter(|s| s.settled)
            .min_by_key(|s| s.saves);
        match weakest {
            Some(w) if rate > w.saves.saturating_mul(Self::MARGIN) => Admit::Displace(w.key),
            _ => Admit::No(now.plus(Self::RETRY_JIFFIES)),
        }
    }
}

/// The kicks a polled virtqueue's polling saved a jiffy, lately: an
/// average over about eight counts, each a jiffy's (a worker's polling is
/// counted once a jiffy).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Saves {
    /// Eight times the average.
    x8: u32,
}

impl Saves {
    /// None yet.
    pub(super) const fn new() -> Self {
        Self { x8: 0 }
    }

    /// A count found `queued` handler runs queued by polling.
    pub(super) fn count(&mut self, queued: u32) {
        self.x8 = self.x8 - self.x8 / 8 + queued.min(u32::MAX / 16);
    }

    /// Kicks saved a jiffy.
    pub(super) fn per_jiffy(&self) -> u32 {
        self.x8 / 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(n: usize) -> Jiffy {
        Jiffy::from_raw(n)
    }

    fn s(key: u32, saves: u32, settled: bool) -> Spinner {
        Spinner {
            key,
            saves,
            settled,
        }
    }

    #[test]
    fn room_or_its_own_worker_polling_admits() {
        assert_eq!(Budget::admit(&[], 1, 1, 2, j(0)), Admit::Yes);
        assert_eq!(Budget::admit(&[s(1, 50, true)], 2, 1, 2, j(0)), Admit::Yes);
        // Full, but its device's worker polls already: no new spinner.
        let full = [s(1, 50, true), s(2, 50, true)];
        assert_eq!(Budget::admit(&full, 2, 1, 2, j(0)), Admit::Yes);
        // A budget of 0 counts as 1.
        assert_eq!(Budget::admit(&[], 7, 1, 0, j(0)), Admit::Yes);
    }

    #[test]
    fn a_full_budget_goes_to_the_device_that_saves_the_most() {
        let full = [s(1, 90, true), s(2, 10, true), s(3, 40, true)];
        // Kicks 25 times a jiffy: more than twice what device 2 saves.
        assert_eq!(Budget::admit(&full, 4, 25, 3, j(5)), Admit::Displace(2));
        // 20 is not more than twice 10: refused, asks again later.
        assert_eq!(
            Budget::admit(&full, 4, 20, 3, j(5)),
            Admit::No(j(5 + Budget::RETRY_JIFFIES))
        );
    }

    #[test]
    fn a_device_polled_for_less_than_its_tenure_is_not_displaced() {
        let full = [s(1, 0, false), s(2, 30, true)];
        assert_eq!(Budget::admit(&full, 3, 1000, 2, j(0)), Admit::Displace(2));
        let young = [s(1, 0, false), s(2, 0, false)];
        assert!(matches!(
            Budget::admit(&young, 3, 1000, 2, j(0)),
            Admit::No(_)
        ));
    }

    #[test]
    fn saves_average_the_recent_counts() {
        let mut v = Saves::new();
        assert_eq!(v.per_jiffy(), 0);
        for _ in 0..64 {
            v.count(40);
        }
        assert!((38..=40).contains(&v.per_jiffy()), "{}", v.per_jiffy());
        // It stopped saving: within a few dozen jiffies it shows.
        for _ in 0..32 {
            v.count(0);
        }
        assert!(v.per_jiffy() <= 1, "{}", v.per_jiffy());
        // No overflow at absurd counts.
        for _ in 0..64 {
            v.count(u32::MAX);
        }
        assert!(v.per_jiffy() > 0);
    }
}
