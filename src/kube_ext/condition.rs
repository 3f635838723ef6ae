//! Building a `metav1.Condition` the way Kubernetes' conventions ask: `lastTransitionTime` moves
//! only when the status does, so "Ready since" can be read from it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// What a condition says, before its transition time is known.
pub struct Said<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
    pub observed_generation: Option<i64>,
}

/// The condition `said` describes, keeping the transition time of `previous`'s condition of the
/// same type when its status is the same (else `now`).
pub fn condition(said: Said<'_>, previous: &[Condition], now: Timestamp) -> Condition {
    let since = previous
        .iter()
        .find(|c| c.type_ == said.type_ && c.status == said.status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: said.type_.into(),
        status: said.status.into(),
        reason: said.reason.into(),
        message: said.message.into(),
        last_transition_time: since,
        observed_generation: said.observed_generation,
    }
}

/// kstatus's condition types (sigs.k8s.io/cli-utils `pkg/kstatus`): `Ready` always, and while
/// true `Reconciling` (kstatus: `InProgress`) or `Stalled` (kstatus: `Failed`).
pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";
/// The condition types [`kstatus_conditions`] owns.
pub const KSTATUS_TYPES: [&str; 3] = [READY, RECONCILING, STALLED];

/// Where an object is, with kstatus's three outcomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Everything it stands for is there and healthy (the message says what).
    Ready(String),
    /// Still changing towards Ready: reason, message.
    Progressing(&'static str, String),
    /// Cannot get Ready without a hand: reason, message.
    Stalled(String, String),
}

/// `Ready` and, while true, `Reconciling` or `Stalled`, for `verdict`, each keeping its
/// transition time from `previous` when its status stays.
pub fn kstatus_conditions(
    verdict: &Verdict,
    generation: Option<i64>,
    previous: &[Condition],
    now: Timestamp,
) -> Vec<Condition> {
    let make = |type_: &str, status: &str, reason: &str, message: &str| {
        condition(
            Said {
                type_,
                status,
                reason,
                message,
                observed_generation: generation,
            },
            previous,
            now,
        )
    };
    match verdict {
        Verdict::Ready(message) => vec![make(READY, "True", "Ready", message)],
        Verdict::Progressing(reason, message) => vec![
            make(READY, "False", reason, message),
            make(RECONCILING, "True", reason, message),
        ],
        Verdict::Stalled(reason, message) => vec![
            make(READY, "False", reason, message),
            make(STALLED, "True", reason, message),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let t0 = Timestamp::from_second(1_000).expect("time");
        let t1 = Timestamp::from_second(2_000).expect("time");
        let said = |status| Said {
            type_: "Ready",
            status,
            reason: "R",
            message: "m",
            observed_generation: Some(1),
        };
        let first = condition(said("False"), &[], t0);
        assert_eq!(first.last_transition_time, Time(t0));
        let same = condition(said("False"), std::slice::from_ref(&first), t1);
        assert_eq!(same.last_transition_time, Time(t0));
        let flipped = condition(said("True"), &[first], t1);
        assert_eq!(flipped.last_transition_time, Time(t1));
    }
}
