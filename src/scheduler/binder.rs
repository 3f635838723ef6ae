//! Pure pieces around a scheduling cycle: the admission gate (scheduler.md §4.3-4.4), the status
//! DefaultBinder writes (§6), and the event texts (§4.5, §4.8).
//!
//! Upstream: `pkg/scheduler/scheduler.go` (`admit`, `isFeedChanged`, the feed comparison in
//! `scheduleOne`, `truncateMessage`) and `framework/plugins/defaultbinder`.

use crate::apis::{
    FeedInventory, SchedulingStrategy, Subscription, SubscriptionStatus, hash_subscription_spec,
};
use crate::scheduler::framework::TargetClusters;

/// Event reason of a failed cycle (Warning).
pub const REASON_FAILED_SCHEDULING: &str = "FailedScheduling";
/// Event reason of a successful binding (Normal).
pub const REASON_SCHEDULED: &str = "Scheduled";
/// Longest event message (`known.NoteLengthLimit`).
pub const EVENT_MESSAGE_LIMIT: usize = 1024;

/// §4.3: the inventory's feeds (in order) equal `spec.feeds`. When they do not, the cycle is
/// dropped: the FeedInventory controller will catch up and trigger another.
pub fn feeds_match_inventory(sub: &Subscription, inventory: &FeedInventory) -> bool {
    sub.spec.feeds.len() == inventory.spec.feeds.len()
        && sub
            .spec
            .feeds
            .iter()
            .zip(&inventory.spec.feeds)
            .all(|(a, b)| *a == b.feed)
}

/// Go's `isFeedChanged`: the feed count differs from the number of `status.replicas` entries, a
/// feed key is missing there, or some inventory feed's assigned replicas do not add up to its
/// `desiredReplicas` (unset = 0).
pub fn feeds_changed(sub: &Subscription, inventory: Option<&FeedInventory>) -> bool {
    let empty = Default::default();
    let replicas = sub.status.as_ref().map_or(&empty, |s| &s.replicas);
    replicas_differ(sub, replicas, inventory)
}

/// [`feeds_changed`] with the assignment `replicas` in place of the recorded one.
fn replicas_differ(
    sub: &Subscription,
    replicas: &std::collections::BTreeMap<String, Vec<i32>>,
    inventory: Option<&FeedInventory>,
) -> bool {
    if sub.spec.feeds.len() != replicas.len() {
        return true;
    }
    if sub
        .spec
        .feeds
        .iter()
        .any(|f| !replicas.contains_key(&f.key()))
    {
        return true;
    }
    inventory.is_some_and(|inv| {
        inv.spec.feeds.iter().any(|order| {
            // Go sums in int32; wrapping keeps the comparison identical.
            let assigned = replicas
                .get(&order.feed.key())
                .map_or(0, |v| v.iter().fold(0_i32, |a, b| a.wrapping_add(*b)));
            assigned != order.desired_replicas.unwrap_or(0)
        })
    })
}

/// Whether the assignment in `status` falls short of (or exceeds) the desired replicas of
/// `inventory` for some feed: [`feeds_changed`] of `sub` as it will be once `status` is written.
pub fn feeds_changed_with(
    status: &SubscriptionStatus,
    sub: &Subscription,
    inventory: &FeedInventory,
) -> bool {
    replicas_differ(sub, &status.replicas, Some(inventory))
}

/// The replicas of `feed` that `status` assigns to `cluster` (0 when it assigns none).
pub fn assigned(status: &SubscriptionStatus, cluster: &str, feed: &str) -> i32 {
    status
        .binding_clusters
        .iter()
        .position(|c| c == cluster)
        .and_then(|i| status.replicas.get(feed)?.get(i).copied())
        .unwrap_or(0)
}

/// §4.4 admission gate: `Replication` Subscriptions are always scheduled; `Dividing` ones only if
/// the spec hash differs from `status.specHash` or [`feeds_changed`]. Pass the FeedInventory for
/// `Dividing` (without it only the hash and feed keys are compared).
///
/// Consequence (as upstream): Dividing Subscriptions are not re-divided when clusters come, go or
/// fail unless the spec or the desired replica counts change; with the FailOver gate the
/// scheduler also re-divides when a bound cluster is failed over or a matching one is schedulable
/// and unbound (see `failover::plan`).
pub fn needs_scheduling(sub: &Subscription, inventory: Option<&FeedInventory>) -> bool {
    if sub.spec.effective_scheduling_strategy() == SchedulingStrategy::Replication {
        return true;
    }
    let recorded = sub.status.as_ref().map_or(0, |s| s.spec_hash);
    hash_subscription_spec(&sub.spec) != recorded || feeds_changed(sub, inventory)
}

/// §6.1: `bindingClusters` stably sorted ascending, and every replicas list whose length equals
/// the cluster count permuted the same way (other lists, e.g. `[]`, are left alone).
pub fn sorted_target(target: &TargetClusters) -> TargetClusters {
    let n = target.binding_clusters.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| target.binding_clusters[a].cmp(&target.binding_clusters[b]));
    let permute = |list: &Vec<i32>| -> Vec<i32> {
        if list.len() == n {
            order.iter().map(|&i| list[i]).collect()
        } else {
            list.clone()
        }
    };
    TargetClusters {
        binding_clusters: order
            .iter()
            .map(|&i| target.binding_clusters[i].clone())
            .collect(),
        replicas: target
            .replicas
            .iter()
            .map(|(k, v)| (k.clone(), permute(v)))
            .collect(),
    }
}

/// §6.2: the status DefaultBinder writes: the old status with the sorted result,
/// `specHash` = hash of the current spec and `desiredReleases` = number of binding clusters.
/// Send it as a JSON merge patch (old object vs new) to the `status` subresource.
pub fn binding_status(sub: &Subscription, target: &TargetClusters) -> SubscriptionStatus {
    let sorted = sorted_target(target);
    let mut status = sub.status.clone().unwrap_or_default();
    status.desired_releases = i64::try_from(sorted.binding_clusters.len()).unwrap_or(i64::MAX);
    status.binding_clusters = sorted.binding_clusters;
    status.replicas = sorted.replicas;
    status.spec_hash = hash_subscription_spec(&sub.spec);
    status
}

/// Message of the `Scheduled` event: `Successfully bound <ns>/<name> to <c1,c2,...>` (use the
/// sorted clusters, as Go's binder sorts the result in place before the event).
pub fn scheduled_event_message(sub: &Subscription, binding_clusters: &[String]) -> String {
    let ns = sub.metadata.namespace.as_deref().unwrap_or_default();
    let name = sub.metadata.name.as_deref().unwrap_or_default();
    let key = if ns.is_empty() {
        name.to_owned()
    } else {
        format!("{ns}/{name}")
    };
    format!("Successfully bound {key} to {}", binding_clusters.join(","))
}

/// Cuts an event message to [`EVENT_MESSAGE_LIMIT`] bytes, ending in ` ...` when cut (Go's
/// `truncateMessage`, but never inside a UTF-8 character).
pub fn truncate_event_message(message: &str) -> String {
    if message.len() <= EVENT_MESSAGE_LIMIT {
        return message.to_owned();
    }
    const SUFFIX: &str = " ...";
    let mut end = EVENT_MESSAGE_LIMIT - SUFFIX.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{SUFFIX}", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::{DividingScheduling, Feed, FeedInventorySpec, FeedOrder, SubscriptionSpec};
    use std::collections::BTreeMap;

    fn deploy() -> Feed {
        Feed::new("apps/v1", "Deployment", "web", "nginx")
    }

    fn ns() -> Feed {
        Feed::new("v1", "Namespace", "", "web")
    }

    fn dividing_sub() -> Subscription {
        let mut spec = SubscriptionSpec {
            scheduling_strategy: Some(SchedulingStrategy::Dividing),
            dividing_scheduling: Some(DividingScheduling::default()),
            feeds: vec![ns(), deploy()],
            ..Default::default()
        };
        spec.apply_crd_defaults();
        let mut sub = Subscription::new("web", spec);
        sub.metadata.namespace = Some("default".into());
        sub
    }

    fn inventory(desired: Option<i32>) -> FeedInventory {
        FeedInventory::new(
            "web",
            FeedInventorySpec {
                feeds: vec![
                    FeedOrder {
                        feed: ns(),
                        ..Default::default()
                    },
                    FeedOrder {
                        feed: deploy(),
                        desired_replicas: desired,
                        ..Default::default()
                    },
                ],
            },
        )
    }

    #[test]
    fn sorting_permutes_matching_lists() {
        let target = TargetClusters::new(
            vec!["ns-b/x".into(), "ns-a/y".into(), "ns-a/x".into()],
            BTreeMap::from([
                ("deploy".to_owned(), vec![1, 2, 3]),
                ("svc".to_owned(), vec![]),
                ("odd".to_owned(), vec![9, 8]),
            ]),
        );
        let sorted = sorted_target(&target);
        assert_eq!(sorted.binding_clusters, ["ns-a/x", "ns-a/y", "ns-b/x"]);
        assert_eq!(sorted.replicas["deploy"], [3, 2, 1]);
        assert_eq!(sorted.replicas["svc"], Vec::<i32>::new());
        assert_eq!(sorted.replicas["odd"], [9, 8]);
        // Stable: duplicates (subgroups) keep their relative order.
        let dup = TargetClusters::new(
            vec!["b".into(), "a".into(), "b".into()],
            BTreeMap::from([("f".to_owned(), vec![1, 2, 3])]),
        );
        assert_eq!(sorted_target(&dup).replicas["f"], [2, 1, 3]);
    }

    #[test]
    fn binding_status_fields() {
        let mut sub = dividing_sub();
        sub.status = Some(SubscriptionStatus {
            completed_releases: 7,
            binding_clusters: vec!["old".into()],
            ..Default::default()
        });
        let target = TargetClusters::new(
            vec!["c2".into(), "c1".into()],
            BTreeMap::from([(deploy().key(), vec![4, 2]), (ns().key(), vec![])]),
        );
        let status = binding_status(&sub, &target);
        assert_eq!(status.binding_clusters, ["c1", "c2"]);
        assert_eq!(status.replicas[&deploy().key()], [2, 4]);
        assert_eq!(status.spec_hash, hash_subscription_spec(&sub.spec));
        assert_eq!(status.desired_releases, 2);
        assert_eq!(status.completed_releases, 7, "other fields are kept");
        // A fit error binds nothing: everything is cleared.
        let cleared = binding_status(&sub, &TargetClusters::default());
        assert!(cleared.binding_clusters.is_empty() && cleared.replicas.is_empty());
        assert_eq!(cleared.desired_releases, 0);
    }

    #[test]
    fn admission_gate() {
        let mut sub = dividing_sub();
        let inv = inventory(Some(6));
        // Never scheduled.
        assert!(needs_scheduling(&sub, Some(&inv)));
        // Bound with the current spec and 6 replicas: nothing to do.
        sub.status = Some(binding_status(
            &sub,
            &TargetClusters::new(
                vec!["a".into(), "b".into()],
                BTreeMap::from([(deploy().key(), vec![2, 4]), (ns().key(), vec![])]),
            ),
        ));
        assert!(!needs_scheduling(&sub, Some(&inv)));
        // Desired replicas changed.
        assert!(needs_scheduling(&sub, Some(&inventory(Some(7)))));
        // Spec changed.
        let mut changed = sub.clone();
        changed.spec.priority = Some(3);
        assert!(needs_scheduling(&changed, Some(&inv)));
        // A feed key missing from status.replicas.
        let mut missing = sub.clone();
        if let Some(s) = missing.status.as_mut() {
            s.replicas.remove(&ns().key());
            s.replicas.insert("other".into(), vec![]);
        }
        assert!(needs_scheduling(&missing, Some(&inv)));
        // Replication is always scheduled.
        let mut rep = sub.clone();
        rep.spec.scheduling_strategy = Some(SchedulingStrategy::Replication);
        rep.status = Some(binding_status(&rep, &TargetClusters::default()));
        assert!(needs_scheduling(&rep, None));
        // Unset desired replicas count as 0.
        let mut zero = sub.clone();
        if let Some(s) = zero.status.as_mut() {
            s.replicas.insert(deploy().key(), vec![0, 0]);
        }
        assert!(!feeds_changed(&zero, Some(&inventory(None))));
    }

    #[test]
    fn feed_equality() {
        let sub = dividing_sub();
        assert!(feeds_match_inventory(&sub, &inventory(Some(1))));
        let mut reordered = inventory(Some(1));
        reordered.spec.feeds.reverse();
        assert!(!feeds_match_inventory(&sub, &reordered));
        let mut shorter = inventory(Some(1));
        shorter.spec.feeds.pop();
        assert!(!feeds_match_inventory(&sub, &shorter));
    }

    #[test]
    fn event_messages() {
        let sub = dividing_sub();
        assert_eq!(
            scheduled_event_message(&sub, &["ns1/c1".into(), "ns2/c2".into()]),
            "Successfully bound default/web to ns1/c1,ns2/c2"
        );
        assert_eq!(truncate_event_message("short"), "short");
        let long = "é".repeat(600);
        let cut = truncate_event_message(&long);
        assert!(cut.len() <= EVENT_MESSAGE_LIMIT && cut.ends_with(" ..."));
        let ascii = "x".repeat(2000);
        assert_eq!(truncate_event_message(&ascii).len(), EVENT_MESSAGE_LIMIT);
    }
}
