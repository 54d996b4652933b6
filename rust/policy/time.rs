// SPDX-License-Identifier: GPL-2.0

//! Time as the policy counts it: jiffies, a counter that wraps.

/// A point in time, in jiffies.
///
/// The counter wraps, so two jiffies are ordered only by their distance:
/// [`Jiffy::since`] and [`Jiffy::is_after`] are right whenever the two are
/// less than half the counter's range apart (`time_after()`'s rule). The
/// kernel's `kernel::time::JiffiesInstant` has the same rule; this file
/// builds on the host too, so it has its own, and `clock::now()` makes one
/// from the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Jiffy(usize);

impl Jiffy {
    /// The jiffy whose counter reads `raw`.
    pub const fn from_raw(raw: usize) -> Self {
        Self(raw)
    }

    /// The counter's value.
    pub const fn raw(self) -> usize {
        self.0
    }

    /// Jiffies from `earlier` to `self`; 0 if `earlier` is the later one.
    pub const fn since(self, earlier: Jiffy) -> usize {
        if earlier.is_after(self) {
            0
        } else {
            self.0.wrapping_sub(earlier.0)
        }
    }

    /// Whether `self` comes after `other`.
    pub const fn is_after(self, other: Jiffy) -> bool {
        // The two's complement difference is negative exactly when `self`
        // is ahead of `other` by less than half the range.
        (other.0.wrapping_sub(self.0) as isize) < 0
    }

    /// The jiffy `n` jiffies after `self`.
    pub const fn plus(self, n: usize) -> Self {
        Self(self.0.wrapping_add(n))
    }
}

/// A wait in jiffies that grows while it is asked for again and again:
/// `min` the first time, twice the last wait each time it is asked for
/// again before as long again as that wait has passed since it ended, up
/// to `max`; `min` again after that. The cool-down of a virtqueue handed
/// back (`CoolDown`) and the hold of a thread stalled again and again
/// (`Stalls`) are such waits.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Backoff {
    jiffies: u32,
    until: Option<Jiffy>,
}

impl Backoff {
    /// Never asked for.
    pub(super) const fn new() -> Self {
        Self {
            jiffies: 0,
            until: None,
        }
    }

    /// A wait asked for at `now`, of `min` to `max` jiffies (see above).
    pub(super) fn start(&mut self, now: Jiffy, min: u32, max: u32) {
        let again = self
            .until
            .is_some_and(|u| !now.is_after(u.plus(self.jiffies as usize)));
        self.jiffies = if again {
            self.jiffies.saturating_mul(2).clamp(min, max)
        } else {
            min
        };
        self.until = Some(now.plus(self.jiffies as usize));
    }

    /// The last wait, in jiffies (0: never asked for).
    pub(super) fn jiffies(&self) -> u32 {
        self.jiffies
    }

    /// The end of the last wait, if there was one.
    pub(super) fn until(&self) -> Option<Jiffy> {
        self.until
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The jiffy whose counter reads `raw`, for the policy's tests.
    pub(in super::super) fn j(raw: usize) -> Jiffy {
        Jiffy::from_raw(raw)
    }

    #[test]
    fn jiffies_compare_across_the_wrap() {
        assert!(j(0).is_after(j(usize::MAX)));
        assert!(!j(usize::MAX).is_after(j(0)));
        assert!(!j(5).is_after(j(5)));
        assert_eq!(j(1).since(j(usize::MAX - 1)), 3);
        // Earlier than what it is measured from: no time has passed.
        assert_eq!(j(5).since(j(6)), 0);
    }
}
