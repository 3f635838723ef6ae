//! A count or a percentage of a total, as Kubernetes writes them in `intstr` fields (`3`,
//! `25%`: `maxSurge`, `maxUnavailable`), scaled as Kubernetes scales a surge (rounded up).

/// A number or a percentage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountOrPercent {
    Count(u64),
    Percent(u64),
}

impl CountOrPercent {
    /// `"3"` or `"25%"` (spaces around allowed); `None` when it is neither.
    pub fn parse(s: &str) -> Option<CountOrPercent> {
        let t = s.trim();
        match t.strip_suffix('%') {
            Some(p) => p.trim().parse().ok().map(CountOrPercent::Percent),
            None => t.parse().ok().map(CountOrPercent::Count),
        }
    }

    /// How many of `total`: a percentage rounded up.
    pub fn of(self, total: u64) -> u64 {
        match self {
            CountOrPercent::Count(n) => n,
            CountOrPercent::Percent(p) => total.saturating_mul(p).div_ceil(100),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_percentages_round_up() {
        assert_eq!(CountOrPercent::parse(" 3 "), Some(CountOrPercent::Count(3)));
        assert_eq!(
            CountOrPercent::parse("25 %"),
            Some(CountOrPercent::Percent(25))
        );
        assert_eq!(CountOrPercent::parse("-1"), None);
        assert_eq!(CountOrPercent::parse("x%"), None);
        assert_eq!(CountOrPercent::Percent(25).of(5), 2);
        assert_eq!(CountOrPercent::Percent(50).of(0), 0);
        assert_eq!(CountOrPercent::Count(3).of(1), 3);
    }
}
