//! No over-commit (#16; upstream #345, karmada#1385). A child's predictor counts only the pods it
//! runs: replicas the scheduler has just assigned are invisible to it until the agent has
//! applied them and the child has scheduled their pods, so Dynamic-dividing Subscriptions
//! scheduled back to back would each be offered the same free room. The scheduler therefore holds
//! what it assigned to a cluster and subtracts it from the cluster's predicted capacity, until
//! the cluster reports those replicas available (then the predictor counts them) or
//! [`HOLD_TIMEOUT`] has passed. Holds are in resources per replica, so Subscriptions of other
//! shapes are charged what the hold takes of the resources they ask for (a conservative
//! estimate: a hold may cost a little room that is free, never room that is not).
//! Pure; the scheduler keeps one `Reservations` and tells it what it saw (the functions at the
//! end: what a Dynamic cycle takes from the holds and holds after its decision).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};

use super::binder;
use super::framework::{CycleState, cluster_key};
use crate::apis::{
    FeedInventory, ManagedCluster, ReplicaRequirements, Subscription, SubscriptionStatus,
};
use crate::kube_ext::quantity;

/// How long a hold lasts at most (a child that never reports its replicas).
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(120);

/// Requests of one replica in milli-units per resource (`pods` is always 1000: one pod).
pub type Request = BTreeMap<String, i128>;

/// The request of one replica of `req`; a resource whose quantity does not parse is left out
/// (the predictor reports it as an error of its own).
pub fn request_of(req: &ReplicaRequirements) -> Request {
    let mut out: Request = req
        .resources
        .requests
        .iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), quantity::milli(q).ok()?)))
        .filter(|(_, v)| *v > 0)
        .collect();
    out.insert("pods".into(), 1000);
    out
}

#[derive(Debug, Clone, PartialEq)]
struct Hold {
    replicas: i32,
    /// The Subscription's whole assignment there when last held: reported available, it is in.
    assigned: i32,
    request: Request,
    at: Timestamp,
}

/// (cluster, Subscription, feed) keys of what is held.
type HoldKey = (String, String, String);

#[derive(Debug, Default)]
pub struct Reservations {
    holds: HashMap<HoldKey, Hold>,
}

impl Reservations {
    pub fn is_empty(&self) -> bool {
        self.holds.is_empty()
    }

    /// `added` more replicas of `feed` of `sub` assigned to `cluster` at `now`, `assigned` in all.
    #[allow(clippy::too_many_arguments)]
    pub fn hold(
        &mut self,
        cluster: &str,
        sub: &str,
        feed: &str,
        added: i32,
        assigned: i32,
        request: Request,
        now: Timestamp,
    ) {
        let key = (cluster.to_string(), sub.to_string(), feed.to_string());
        if added < 0 {
            // taken away before the cluster reported it: that much is not held any more
            if let Some(h) = self.holds.get_mut(&key) {
                h.replicas = h.replicas.saturating_add(added);
                h.assigned = assigned;
                if h.replicas <= 0 {
                    self.holds.remove(&key);
                }
            }
            return;
        }
        if added == 0 {
            return;
        }
        let h = self.holds.entry(key).or_insert(Hold {
            replicas: 0,
            assigned,
            request: request.clone(),
            at: now,
        });
        h.replicas = h.replicas.saturating_add(added);
        h.assigned = assigned;
        h.request = request;
        h.at = now;
    }

    /// Drops the holds that timed out or that `reflected(cluster, sub, feed, assigned)` says
    /// the cluster now reports (`assigned` replicas available), or that no longer stand (the
    /// Subscription is gone).
    pub fn release(&mut self, now: Timestamp, reflected: impl Fn(&str, &str, &str, i32) -> bool) {
        self.holds.retain(|(cluster, sub, feed), h| {
            let age = now.duration_since(h.at).as_secs().max(0) as u64;
            age < HOLD_TIMEOUT.as_secs() && !reflected(cluster, sub, feed, h.assigned)
        });
    }

    /// How many replicas of `request` `cluster` has less room for than its predictor says: for
    /// each resource the replica asks for, what the holds take of it, in replicas of `request`
    /// (rounded up); the largest of those.
    pub fn taken(&self, cluster: &str, request: &Request) -> i32 {
        let mut held: Request = BTreeMap::new();
        for ((c, _, _), h) in &self.holds {
            if c != cluster {
                continue;
            }
            for (k, v) in &h.request {
                *held.entry(k.clone()).or_default() += v * i128::from(h.replicas);
            }
        }
        // pods bind only a replica that asks for nothing else (a node has room for 110 pods; CPU
        // and memory run out first)
        let only_pods = request.keys().all(|k| k == "pods");
        let most = request
            .iter()
            .filter(|(k, need)| **need > 0 && (only_pods || k.as_str() != "pods"))
            .map(|(k, need)| {
                let h = held.get(k).copied().unwrap_or(0);
                (h + need - 1) / need
            })
            .max()
            .unwrap_or(0);
        i32::try_from(most).unwrap_or(i32::MAX)
    }
}

/// What the holds take from the predicted capacity of this cycle's clusters, per
/// (cluster key, feed key); read by Dynamic selection from the cycle state.
#[derive(Debug, Default, Clone)]
pub struct Taken(pub HashMap<(String, String), i32>);

/// The cycle-state key of [`Taken`].
pub const TAKEN: &str = "clusternet.io/reservations";

// ---- what a Dynamic cycle does with the holds ---------------------------------------------

/// A Dynamic cycle's view of the holds: those the children now reflect (or that no longer
/// stand) are released, the rest are taken from the clusters' predicted room.
pub(crate) fn take_reservations(
    reservations: &mut Reservations,
    subs: &Store<Subscription>,
    all: &[Arc<ManagedCluster>],
    inventory: Option<&FeedInventory>,
    state: &CycleState,
) {
    if reservations.is_empty() {
        return;
    }
    reservations.release(Timestamp::now(), |cluster, held_by, feed, assigned| {
        reflected(subs, all, cluster, held_by, feed, assigned)
    });
    if let Some(inv) = inventory {
        state.write(TAKEN, taken_from(reservations, inv, all));
    }
}

/// Holds what a Dynamic decision assigned until the children reflect it. Short of its replicas
/// while holds take room (even when the binding is unchanged), the Subscription is looked at
/// again as they are released.
pub(crate) fn keep_holds(
    reservations: &mut Reservations,
    key: &str,
    sub: &Subscription,
    status: &SubscriptionStatus,
    inv: &FeedInventory,
    recheck: &mut Option<Duration>,
) {
    hold_assigned(reservations, key, sub.status.as_ref(), status, inv);
    if !reservations.is_empty() && binder::feeds_changed_with(status, sub, inv) {
        *recheck = Some(recheck.map_or(SHORT_RECHECK, |r| r.min(SHORT_RECHECK)));
    }
}

/// How often a Dynamic Subscription left short while holds take room is looked at again.
pub(crate) const SHORT_RECHECK: Duration = Duration::from_secs(5);

/// Whether `cluster` reports the `assigned` replicas of `feed` of `sub` available (so its
/// predictor counts them), or the hold no longer stands (the Subscription or the cluster is
/// gone). The binding in the cache may lag the one just decided: `assigned` is the decision's.
pub(crate) fn reflected(
    subs: &Store<Subscription>,
    clusters: &[Arc<ManagedCluster>],
    cluster: &str,
    sub: &str,
    feed: &str,
    assigned: i32,
) -> bool {
    let Some((ns, name)) = sub.split_once('/') else {
        return true;
    };
    let Some(found) = subs.get(&ObjectRef::new(name).within(ns)) else {
        return true;
    };
    let Some(status) = found.status.as_ref() else {
        return false;
    };
    let Some(id) = clusters
        .iter()
        .find(|c| cluster_key(c) == cluster)
        .map(|c| c.spec.cluster_id.as_str())
    else {
        return true;
    };
    reported_available(status)
        .any(|(i, f, available)| i == id && f == feed && available >= assigned)
}

/// (cluster ID, feed key, available replicas) as the Subscription's aggregated status reports.
pub(crate) fn reported_available(
    status: &SubscriptionStatus,
) -> impl Iterator<Item = (&str, String, i32)> {
    status.aggregated_statuses.iter().flat_map(|agg| {
        let feed = agg.feed.key();
        agg.feed_status_details.iter().map(move |d| {
            (
                d.cluster_id.as_str(),
                feed.clone(),
                d.feed_status.replica_status.available_replicas,
            )
        })
    })
}

/// What the holds take, in replicas of each workload feed of `inventory`, per cluster.
pub(crate) fn taken_from(
    reservations: &Reservations,
    inventory: &FeedInventory,
    clusters: &[Arc<ManagedCluster>],
) -> Taken {
    let mut taken = Taken::default();
    for order in inventory
        .spec
        .feeds
        .iter()
        .filter(|o| o.desired_replicas.is_some())
    {
        let request = request_of(&order.replica_requirements);
        for c in clusters {
            let key = cluster_key(c);
            let n = reservations.taken(&key, &request);
            if n > 0 {
                taken.0.insert((key, order.feed.key()), n);
            }
        }
    }
    taken
}

/// Holds what the new binding assigns beyond the old one (and gives back what it takes away).
pub(crate) fn hold_assigned(
    reservations: &mut Reservations,
    key: &str,
    old: Option<&SubscriptionStatus>,
    new: &SubscriptionStatus,
    inventory: &FeedInventory,
) {
    let now = Timestamp::now();
    for order in inventory
        .spec
        .feeds
        .iter()
        .filter(|o| o.desired_replicas.is_some())
    {
        let feed = order.feed.key();
        let request = request_of(&order.replica_requirements);
        let old_clusters = old
            .map(|o| o.binding_clusters.as_slice())
            .unwrap_or_default();
        for cluster in new.binding_clusters.iter().chain(
            old_clusters
                .iter()
                .filter(|c| !new.binding_clusters.contains(c)),
        ) {
            let before = old.map_or(0, |o| binder::assigned(o, cluster, &feed));
            let after = binder::assigned(new, cluster, &feed);
            reservations.hold(
                cluster,
                key,
                &feed,
                after - before,
                after,
                request.clone(),
                now,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn req(cpu: &str) -> Request {
        request_of(&ReplicaRequirements {
            resources: ResourceRequirements {
                requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a time")
    }

    #[test]
    fn holds_take_room_in_the_shape_of_who_asks_until_reflected_or_timed_out() {
        let mut r = Reservations::default();
        let t0 = at("2026-12-01T10:00:00Z");
        r.hold("c1", "ns/a", "f", 6, 6, req("100m"), t0);
        r.hold("c1", "ns/a", "f", 4, 10, req("100m"), t0);
        r.hold("c2", "ns/a", "f", 4, 4, req("100m"), t0);
        // the same shape: replica for replica
        assert_eq!(r.taken("c1", &req("100m")), 10);
        // a bigger shape: 1 CPU held is one replica of 1 CPU; a smaller one: ten of 10m per 100m
        assert_eq!(r.taken("c1", &req("1")), 1);
        assert_eq!(r.taken("c1", &req("10m")), 100);
        // no requests: pods only
        assert_eq!(
            r.taken("c1", &request_of(&ReplicaRequirements::default())),
            10
        );
        assert_eq!(r.taken("elsewhere", &req("100m")), 0);
        // taken away again before it ran: held no more
        r.hold("c2", "ns/a", "f", -1, 3, req("100m"), t0);
        assert_eq!(r.taken("c2", &req("100m")), 3);
        // c1 reports all 10: released; c2's goes after the timeout
        r.release(at("2026-12-01T10:00:05Z"), |c, _, _, n| {
            c == "c1" && n == 10
        });
        assert_eq!(
            (r.taken("c1", &req("100m")), r.taken("c2", &req("100m"))),
            (0, 3)
        );
        r.release(at("2026-12-01T10:02:00Z"), |_, _, _, _| false);
        assert!(r.is_empty());
    }
}
