//! The one backoff policy of the process: per consecutive failure, a first wait that doubles up to
//! a cap. Every retry loop names its own two numbers: a reconcile 5 ms..5 min (client-go's item
//! rate limiter), a scheduling attempt 1 s..10 s (Go Clusternet's pod backoff), a Helm release
//! 2 s..5 min (a helm run costs a second of CPU). Integer arithmetic: backon's exponential
//! iterator (which kube's watchers take, [`crate::runtime::cache::watch_backoff`]) multiplies in
//! `f32`, and a 2,560 ms wait came out as 2,559.99 ms.

use std::time::Duration;

/// First wait and cap of an exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exponential {
    pub first: Duration,
    pub max: Duration,
}

impl Exponential {
    pub const fn new(first: Duration, max: Duration) -> Self {
        Exponential { first, max }
    }

    /// The wait after `failures` failures in a row (1 is the first): `first`, twice that, four
    /// times, ... never more than `max` (and `first` for 0).
    pub fn after(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.first
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.max)
            .min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_the_first_up_to_the_cap() {
        let b = Exponential::new(Duration::from_millis(5), Duration::from_secs(300));
        let ms = |n| b.after(n).as_millis();
        assert_eq!((ms(0), ms(1), ms(2), ms(3), ms(10)), (5, 5, 10, 20, 2560));
        assert_eq!(b.after(16), Duration::from_millis(163_840));
        assert_eq!(b.after(17), b.max);
        assert_eq!(b.after(u32::MAX), b.max);
        // a first wait so long that doubling overflows is the cap, not a panic
        let huge = Exponential::new(Duration::MAX / 2, Duration::MAX);
        assert_eq!(huge.after(40), Duration::MAX);
    }
}
