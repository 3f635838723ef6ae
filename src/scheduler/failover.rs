//! Failover and fail-back (#16, gate FailOver): what a Subscription's scheduling cycle does
//! about the clusters that are lost or come back. Upstream reschedules at once, so a heartbeat
//! hiccup moves workloads; here a not-ready cluster stays in the binding for a grace period
//! (`--cluster-failover-grace`, or the Subscription's `clusterTolerations` `tolerationSeconds` on
//! the not-ready taint, as pods do with node taints), and only then is it failed over: dropped
//! from the binding, its replicas divided among the remaining clusters. Lost clusters are
//! admitted for failover at `--failover-eviction-rate` clusters per second (as nodes are evicted
//! by kube-controller-manager). When more than half of the clusters a Subscription selects
//! turned not ready at once, nothing fails over (that looks like the parent's own network, not
//! the children): the cycle says so instead.
//!
//! A failed-over cluster that is Ready again gets its share back only once it has been Ready for
//! `--cluster-failback-stable` (so a flapping cluster never bounces replicas, and one cluster is
//! failed back at most once per stable period: each fail-back needs that long of readiness), and
//! make-before-break: [`step`] adds replicas to it first, at most `--failback-max-surge` above the
//! Subscription's count, and takes them from the others only as far as the replicas reported
//! available allow. `apps.clusternet.io/failback: Manual` on a Subscription turns it off.
//!
//! Pure: the scheduler feeds it what its cache holds and the [`Memory`] it keeps between cycles.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tracing::{debug, info};

use crate::apis::SchedulingStrategy;
use crate::apis::known;
use crate::apis::{ManagedCluster, Subscription, SubscriptionStatus};
use crate::runtime::ratelimit::Tokens;
use crate::scheduler::framework::{TargetClusters, cluster_key};

/// The scheduler's failover settings.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub grace: Duration,
    pub stable: Duration,
    pub surge: Surge,
    /// Lost clusters per second admitted for failover.
    pub eviction_rate: f64,
}

pub use crate::config::Surge;

/// What the scheduler remembers between cycles (the leader's memory: a new leader starts without
/// it, and then treats a returning cluster as a new one).
#[derive(Debug, Default)]
pub struct Memory {
    /// Subscription -> cluster -> when it was failed over from it.
    failed_over: HashMap<String, BTreeMap<String, Timestamp>>,
    /// Lost clusters admitted for failover, and when.
    admitted: HashMap<String, Timestamp>,
    /// Admissions at `--failover-eviction-rate` (burst one), made when the first lost cluster is.
    pace: Option<Tokens>,
    /// Subscriptions whose fail-back is under way (make-before-break steps).
    stepping: HashSet<String>,
}

impl Memory {
    pub fn failed_over(&mut self, sub: &str, cluster: &str, now: Timestamp) {
        self.failed_over
            .entry(sub.to_string())
            .or_default()
            .insert(cluster.to_string(), now);
    }

    /// `cluster` is bound to `sub` again.
    pub fn failed_back(&mut self, sub: &str, cluster: &str) {
        if let Some(m) = self.failed_over.get_mut(sub) {
            m.remove(cluster);
            if m.is_empty() {
                self.failed_over.remove(sub);
            }
        }
    }

    pub fn forget_subscription(&mut self, sub: &str) {
        self.failed_over.remove(sub);
        self.stepping.remove(sub);
    }

    pub fn is_stepping(&self, sub: &str) -> bool {
        self.stepping.contains(sub)
    }

    pub fn set_stepping(&mut self, sub: &str, on: bool) {
        if on {
            self.stepping.insert(sub.to_string());
        } else {
            self.stepping.remove(sub);
        }
    }

    /// Admits lost `cluster` for failover, or says how long until its turn.
    fn admit(&mut self, cluster: &str, now: Timestamp, rate: f64) -> Result<(), Duration> {
        if self.admitted.contains_key(cluster) {
            return Ok(());
        }
        // at most one admission an hour, however small the rate
        let pace = self
            .pace
            .get_or_insert_with(|| Tokens::new(rate.max(1.0 / 3600.0), 1.0));
        let at = now.as_millisecond() as f64 / 1000.0;
        pace.try_take(at)
            .map_err(|wait| wait + Duration::from_millis(50))?;
        self.admitted.insert(cluster.to_string(), now);
        Ok(())
    }
}

/// What the cycle does about lost and returning clusters.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Bound, not ready, still within their grace (or failover suppressed, or waiting for their
    /// turn under the eviction rate): scheduled as if they were ready, so the binding keeps them.
    pub hold: Vec<String>,
    /// Bound, not ready beyond their grace: failed over (the cycle must run even for a Dividing
    /// Subscription whose spec did not change).
    pub lost: Vec<String>,
    /// Ready, schedulable, matching the Subscription and not bound: the cycle must run (a
    /// Dividing Subscription gives it its share, make-before-break).
    pub returned: Vec<String>,
    /// Of `returned`, those that had been failed over (a fail-back).
    pub failing_back: Vec<String>,
    /// Failed over and not given back (yet): no candidates of this cycle.
    pub damped: Vec<String>,
    /// When to look again (a held cluster's grace ends, a returning one is stable).
    pub recheck: Option<Duration>,
    /// Why nothing fails over although clusters are lost.
    pub suppressed: Option<String>,
}

impl Plan {
    fn look_again_in(&mut self, after: Duration) {
        self.recheck = Some(self.recheck.map_or(after, |r| r.min(after)));
    }
}

fn ready_since(mc: &ManagedCluster) -> (bool, Option<Timestamp>) {
    let cond = mc.status.as_ref().and_then(|s| s.condition("Ready"));
    (
        cond.is_some_and(|c| c.status == "True"),
        cond.map(|c| c.last_transition_time.0),
    )
}

fn key(mc: &ManagedCluster) -> String {
    format!("{}/{}", mc.namespace().unwrap_or_default(), mc.name_any())
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::from_secs(now.duration_since(since).as_secs().max(0) as u64)
}

/// The grace `sub` gives a not-ready cluster: the smallest `tolerationSeconds` of its cluster
/// tolerations of the not-ready taint, else `default`.
pub fn grace(sub: &Subscription, default: Duration) -> Duration {
    sub.spec
        .cluster_tolerations
        .iter()
        .filter(|t| {
            let key = t.key.as_deref().unwrap_or_default();
            (key.is_empty() && t.operator.as_deref() == Some("Exists"))
                || key == known::TAINT_CLUSTER_UNSCHEDULABLE
        })
        .filter_map(|t| t.toleration_seconds)
        .min()
        .map_or(default, |s| Duration::from_secs(s.max(0) as u64))
}

/// Whether `sub` turned automatic fail-back off.
pub fn manual_failback(sub: &Subscription) -> bool {
    sub.annotations()
        .get(known::FAILBACK_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case("manual"))
}

pub fn plan(
    sub: &Subscription,
    clusters: &[Arc<ManagedCluster>],
    settings: &Settings,
    memory: &mut Memory,
    now: Timestamp,
) -> Plan {
    let mut out = Plan::default();
    let sub_key = format!("{}/{}", sub.namespace().unwrap_or_default(), sub.name_any());
    let grace = grace(sub, settings.grace);
    // the fleet is judged per Subscription: the clusters it selects (a partition of the
    // parent's network takes all of them at once)
    let live: Vec<&Arc<ManagedCluster>> = clusters
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            crate::kube_ext::labels::any_matches(
                sub.spec.subscribers.iter().map(|s| &s.cluster_affinity),
                c.labels(),
            )
        })
        .collect();
    memory.follow(&sub_key, &live);
    let (fleet, not_ready) = fleet(&live, grace, now);
    let bound = sub
        .status
        .as_ref()
        .map(|s| s.binding_clusters.clone())
        .unwrap_or_default();
    let manual = manual_failback(sub);
    let mut lost = Vec::new();
    for c in &live {
        let k = key(c);
        if bound.contains(&k) {
            lost.extend(judge_bound(k, c, grace, now, &mut out));
        } else {
            let was_failed_over = memory
                .failed_over
                .get(&sub_key)
                .is_some_and(|m| m.contains_key(&k));
            let back = Back {
                was_failed_over,
                manual,
                stable: settings.stable,
            };
            judge_unbound(k, c, &back, now, &mut out);
        }
    }
    // with fewer than three clusters there is no majority to tell a parent-side problem by
    if !lost.is_empty() && fleet >= 3 && not_ready * 2 > fleet {
        out.suppressed = Some(format!(
            "{not_ready} of {fleet} clusters turned not ready at once (a problem of the parent's \
             network looks like that): not failing over {}",
            lost.join(", ")
        ));
        out.hold.extend(lost);
        // look again now and then: the suppression lifts when enough clusters are back
        out.look_again_in(SUPPRESSED_RECHECK);
        return out;
    }
    for k in lost {
        match memory.admit(&k, now, settings.eviction_rate) {
            Ok(()) => out.lost.push(k),
            Err(wait) => {
                // its turn comes: held until then
                out.hold.push(k);
                out.look_again_in(wait);
            }
        }
    }
    out
}

impl Memory {
    /// What a cycle learns of the clusters a Subscription selects: one Ready again has a later
    /// loss admitted (and rate-limited) afresh; one deleted or no longer selected is no
    /// fail-back's business.
    fn follow(&mut self, sub_key: &str, live: &[&Arc<ManagedCluster>]) {
        for c in live {
            if ready_since(c).0 {
                self.admitted.remove(&key(c));
            }
        }
        if let Some(m) = self.failed_over.get_mut(sub_key) {
            m.retain(|k, _| live.iter().any(|c| key(c) == *k));
        }
    }
}

/// The size of the fleet a Subscription selects and how many of it turned not ready "at once":
/// clusters long gone (a dead agent never cleaned up) are neither counted as lost now nor as
/// part of the fleet.
fn fleet(live: &[&Arc<ManagedCluster>], grace: Duration, now: Timestamp) -> (usize, usize) {
    let at_once = grace.max(AT_ONCE);
    let recently_lost = |c: &&&Arc<ManagedCluster>| {
        let (ready, since) = ready_since(c);
        !ready && since.is_none_or(|t| now.duration_since(t).as_secs() < at_once.as_secs() as i64)
    };
    let not_ready = live.iter().filter(recently_lost).count();
    (
        live.iter().filter(|c| ready_since(c).0).count() + not_ready,
        not_ready,
    )
}

/// How a selected cluster the binding does not have may come back.
struct Back {
    /// This Subscription failed over from it.
    was_failed_over: bool,
    /// The Subscription turned automatic fail-back off.
    manual: bool,
    /// `--cluster-failback-stable`.
    stable: Duration,
}

/// A selected cluster the binding does not have: a candidate again when schedulable, unless
/// this Subscription failed over from it; then it comes back only once Ready for the stable
/// period (and never when fail-back is manual): damped until then.
fn judge_unbound(k: String, c: &ManagedCluster, back: &Back, now: Timestamp, out: &mut Plan) {
    if !back.was_failed_over {
        if schedulable(c) {
            out.returned.push(k);
        }
        return;
    }
    let ready_for = ready_since(c).1.map_or(Duration::ZERO, |t| elapsed(t, now));
    if !schedulable(c) || back.manual {
        out.damped.push(k);
    } else if ready_for < back.stable {
        out.damped.push(k);
        out.look_again_in(back.stable - ready_for + Duration::from_millis(100));
    } else {
        out.returned.push(k.clone());
        out.failing_back.push(k);
    }
}

/// A bound cluster: nothing when Ready; held for the grace period when not, then lost.
fn judge_bound(
    k: String,
    c: &ManagedCluster,
    grace: Duration,
    now: Timestamp,
    out: &mut Plan,
) -> Option<String> {
    let (ready, since) = ready_since(c);
    if ready {
        return None;
    }
    let down_for = since.map_or(grace, |t| elapsed(t, now));
    if down_for < grace {
        out.hold.push(k);
        out.look_again_in(grace - down_for);
        return None;
    }
    Some(k)
}

const SUPPRESSED_RECHECK: Duration = Duration::from_secs(30);
/// Losses within this long of each other (or of the grace, when longer) count as "at once".
const AT_ONCE: Duration = Duration::from_secs(300);

/// Ready and without a NoSchedule/NoExecute taint.
fn schedulable(mc: &ManagedCluster) -> bool {
    ready_since(mc).0
        && !mc
            .spec
            .taints
            .iter()
            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
}

/// `mc` as a held cluster is scheduled: without the not-ready taint.
pub fn as_if_ready(mc: &ManagedCluster) -> ManagedCluster {
    let mut c = mc.clone();
    c.spec
        .taints
        .retain(|t| t.key != known::TAINT_CLUSTER_UNSCHEDULABLE);
    c
}

/// One make-before-break step from the binding in `current` towards `target` (both Dividing,
/// replicas per feed in binding order), given the replicas each cluster reports available per
/// feed (`available[(cluster, feed)]`). Per feed: replicas above a cluster's target are removed
/// only as far as the available replicas stay at the feed's count (unavailable ones go first:
/// they cost nothing), then replicas are added to clusters below their target up to the count
/// plus the surge. A cluster of `current` left with nothing leaves the binding. Repeated as
/// availability is reported, it reaches `target`; the fleet is never short meanwhile.
pub fn step(
    current: &SubscriptionStatus,
    target: &TargetClusters,
    available: &HashMap<(String, String), i32>,
    surge: Surge,
) -> TargetClusters {
    let mut clusters = target.binding_clusters.clone();
    for c in &current.binding_clusters {
        if !clusters.contains(c) {
            clusters.push(c.clone());
        }
    }
    let n_target = target.binding_clusters.len();
    let mut replicas = BTreeMap::new();
    for (feed, wanted) in &target.replicas {
        if wanted.len() != n_target {
            // not a workload feed (an empty list): nothing to step
            replicas.insert(feed.clone(), wanted.clone());
            continue;
        }
        let next: Vec<i32> = clusters
            .iter()
            .map(|c| crate::scheduler::binder::assigned(current, c, feed))
            .collect();
        let avail: Vec<i32> = clusters
            .iter()
            .zip(&next)
            .map(|(c, n)| {
                available
                    .get(&(c.clone(), feed.clone()))
                    .copied()
                    .unwrap_or(0)
                    .clamp(0, (*n).max(0))
            })
            .collect();
        let next = step_feed(next, wanted, &avail, surge);
        replicas.insert(feed.clone(), next);
    }
    without_emptied(clusters, replicas, n_target)
}

/// One feed's step: `next` (what each cluster has now, binding order, the target's clusters
/// first) towards `wanted`, with `avail` replicas available in each.
fn step_feed(mut next: Vec<i32>, wanted: &[i32], avail: &[i32], surge: Surge) -> Vec<i32> {
    let target_of = |i: usize| wanted.get(i).copied().unwrap_or(0);
    let count: i32 = wanted.iter().sum();
    let mut budget = (avail.iter().sum::<i32>() - count).max(0);
    for (i, n) in next.iter_mut().enumerate() {
        let excess = *n - target_of(i);
        if excess <= 0 {
            continue;
        }
        let free = excess.min(*n - avail[i]);
        let paid = (excess - free).min(budget);
        budget -= paid;
        *n -= free + paid;
    }
    let mut room = (count + surge.of(count) - next.iter().sum::<i32>()).max(0);
    for (i, n) in next.iter_mut().enumerate() {
        let short = target_of(i) - *n;
        if short > 0 && room > 0 {
            let add = short.min(room);
            *n += add;
            room -= add;
        }
    }
    next
}

/// The step's binding: a cluster beyond the target's first `n_target` leaves it once it has
/// nothing of any feed.
fn without_emptied(
    clusters: Vec<String>,
    mut replicas: BTreeMap<String, Vec<i32>>,
    n_target: usize,
) -> TargetClusters {
    let width = clusters.len();
    let keep: Vec<bool> = (0..width)
        .map(|i| {
            i < n_target
                || replicas
                    .values()
                    .any(|l: &Vec<i32>| l.len() == width && l[i] > 0)
        })
        .collect();
    for list in replicas.values_mut() {
        if list.len() == width {
            *list = list
                .iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(v, _)| *v)
                .collect();
        }
    }
    TargetClusters {
        binding_clusters: clusters
            .into_iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(c, _)| c)
            .collect(),
        replicas,
    }
}

// ---- what a scheduling cycle does with the plan -------------------------------------------

/// A word for the people watching a Subscription (an Event), decided by a cycle and written by
/// the scheduler's loop.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Note {
    pub fn warning(reason: &'static str, message: impl Into<String>) -> Note {
        Note {
            warning: true,
            reason,
            message: message.into(),
        }
    }

    pub fn normal(reason: &'static str, message: impl Into<String>) -> Note {
        Note {
            warning: false,
            reason,
            message: message.into(),
        }
    }
}

/// The clusters a cycle may bind: a failed-over cluster (or one not given back yet) is no
/// candidate, whatever toleration (with tolerationSeconds) it had; one within its failover
/// grace is scheduled as if still ready (only those are copied).
pub(crate) fn candidates(
    mut all: Vec<Arc<ManagedCluster>>,
    failover: &Plan,
) -> Vec<Arc<ManagedCluster>> {
    if !failover.lost.is_empty() || !failover.damped.is_empty() {
        all.retain(|c| {
            let k = cluster_key(c);
            !failover.lost.contains(&k) && !failover.damped.contains(&k)
        });
    }
    if failover.hold.is_empty() {
        return all;
    }
    all.into_iter()
        .map(|c| {
            if failover.hold.contains(&cluster_key(&c)) {
                Arc::new(as_if_ready(&c))
            } else {
                c
            }
        })
        .collect()
}

/// The clusters a decision left out for failover (lost, damped), with why, for
/// `status.lastDecision`.
pub(crate) fn left_out<'a>(
    lost: &'a [String],
    damped: &'a [String],
) -> [(&'static str, &'a [String]); 2] {
    [
        (
            "failed over: not ready for longer than its failover grace",
            lost,
        ),
        (
            "failed over, not given back yet: a fail-back waits until it has been Ready for the stable period",
            damped,
        ),
    ]
}

/// Remembers (and counts) the failovers and fail-backs a new binding carries out: a lost
/// cluster it no longer binds, a returning one it binds again; the notes say so.
pub(crate) fn record_moves(
    key: &str,
    status: &SubscriptionStatus,
    failover: &Plan,
    settings: &Settings,
    memory: &mut Memory,
    notes: &mut Vec<Note>,
) {
    let now = Timestamp::now();
    for lost in &failover.lost {
        if !status.binding_clusters.contains(lost) {
            memory.failed_over(key, lost, now);
            metrics::counter!("clusternet_scheduler_failover_total").increment(1);
            let message = format!(
                "cluster {lost} has not been ready for longer than its failover grace: failed over to {}",
                if status.binding_clusters.is_empty() {
                    "no cluster (none fits)".to_string()
                } else {
                    status.binding_clusters.join(", ")
                }
            );
            info!(subscription = %key, %message, "FailedOver");
            notes.push(Note::warning("FailedOver", message));
        }
    }
    for back in &failover.failing_back {
        if status.binding_clusters.contains(back) {
            memory.failed_back(key, back);
            metrics::counter!("clusternet_scheduler_failback_total").increment(1);
            let message = format!(
                "cluster {back} has been Ready for {:?} or longer: it gets its share back, \
                 make-before-break (replicas leave the others only once it reports them \
                 available)",
                settings.stable
            );
            info!(subscription = %key, %message, "FailedBack");
            notes.push(Note::normal("FailedBack", message));
        }
    }
}

/// How often a fail-back under way looks at the replicas reported available.
pub(crate) const STEP_RECHECK: Duration = Duration::from_secs(2);

/// A Dividing binding that changes because clusters returned (not because its spec changed,
/// not because one was lost: those move at once) moves make-before-break, one [`step`] a cycle,
/// looked at again every [`STEP_RECHECK`] until it is done.
pub(crate) fn make_before_break(
    sub: &Subscription,
    target: TargetClusters,
    plan: &Plan,
    (settings, memory): (&Settings, &mut Memory),
    clusters: &[Arc<ManagedCluster>],
    recheck: &mut Option<Duration>,
) -> TargetClusters {
    let key = &format!("{}/{}", sub.namespace().unwrap_or_default(), sub.name_any());
    let gradual = sub.spec.effective_scheduling_strategy() == SchedulingStrategy::Dividing
        && plan.lost.is_empty()
        && (!plan.returned.is_empty() || memory.is_stepping(key));
    let status = sub.status.as_ref().filter(|s| {
        gradual
            && !s.binding_clusters.is_empty()
            && s.spec_hash == crate::apis::hash_subscription_spec(&sub.spec)
    });
    let Some(status) = status else {
        memory.set_stepping(key, false);
        return target;
    };
    let available = available_replicas(status, clusters);
    let next = step(status, &target, &available, settings.surge);
    let done = super::binder::sorted_target(&next) == super::binder::sorted_target(&target);
    memory.set_stepping(key, !done);
    if !done {
        debug!(subscription = %key, ?next, "fail-back: make-before-break step");
        *recheck = Some(recheck.map_or(STEP_RECHECK, |r| r.min(STEP_RECHECK)));
    }
    next
}

/// (cluster key, feed key) -> the replicas the cluster reports available, from the
/// Subscription's aggregated status (clusters matched by cluster ID).
fn available_replicas(
    status: &SubscriptionStatus,
    clusters: &[Arc<ManagedCluster>],
) -> HashMap<(String, String), i32> {
    let by_id: HashMap<&str, String> = clusters
        .iter()
        .map(|c| (c.spec.cluster_id.as_str(), cluster_key(c)))
        .collect();
    super::reservation::reported_available(status)
        .filter_map(|(id, feed, available)| Some(((by_id.get(id)?.clone(), feed), available)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(name: &str, ready: bool, since: &str) -> Arc<ManagedCluster> {
        let taints = if ready {
            json!([])
        } else {
            json!([{"key": known::TAINT_CLUSTER_UNSCHEDULABLE, "effect": "NoSchedule"}])
        };
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
                "metadata": {"name": name, "namespace": format!("clusternet-{name}")},
                "spec": {"clusterId": name, "syncMode": "Pull", "taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "Unknown" },
                    "reason": "R", "message": "", "lastTransitionTime": since}]}}))
            .expect("a ManagedCluster"),
        )
    }

    fn sub(tolerations: serde_json::Value) -> Subscription {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "s", "namespace": "default"},
            "spec": {"subscribers": [{"clusterAffinity": {}}], "feeds": [], "clusterTolerations": tolerations},
            "status": {"bindingClusters": ["clusternet-a/a", "clusternet-b/b", "clusternet-c/c"]}}))
        .expect("a Subscription")
    }

    const SETTINGS: Settings = Settings {
        grace: Duration::from_secs(60),
        stable: Duration::from_secs(300),
        surge: Surge::Percent(25),
        eviction_rate: 1000.0,
    };

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a time")
    }

    #[test]
    fn a_lost_cluster_is_held_for_the_grace_then_failed_over() {
        let clusters = vec![
            cluster("a", false, "2026-12-01T10:00:00Z"),
            cluster("b", true, "2026-12-01T09:00:00Z"),
            cluster("c", true, "2026-12-01T09:00:00Z"),
        ];
        let s = sub(json!([]));
        let p = plan(
            &s,
            &clusters,
            &SETTINGS,
            &mut Memory::default(),
            at("2026-12-01T10:00:20Z"),
        );
        assert_eq!(p.hold, ["clusternet-a/a"]);
        assert!(p.lost.is_empty());
        assert_eq!(p.recheck, Some(Duration::from_secs(40)));
        let p = plan(
            &s,
            &clusters,
            &SETTINGS,
            &mut Memory::default(),
            at("2026-12-01T10:01:00Z"),
        );
        assert_eq!(
            (p.hold.len(), p.lost.as_slice()),
            (0, &["clusternet-a/a".to_string()][..])
        );
        assert_eq!(p.suppressed, None);
        // as pods: tolerationSeconds on the not-ready taint shortens (or lengthens) the grace
        let quick = sub(
            json!([{"key": known::TAINT_CLUSTER_UNSCHEDULABLE, "operator": "Exists", "tolerationSeconds": 5}]),
        );
        let p = plan(
            &quick,
            &clusters,
            &SETTINGS,
            &mut Memory::default(),
            at("2026-12-01T10:00:06Z"),
        );
        assert_eq!(p.lost, ["clusternet-a/a"]);
        // a held cluster is scheduled without its not-ready taint
        assert!(as_if_ready(&clusters[0]).spec.taints.is_empty());
    }

    #[test]
    fn losing_more_than_half_at_once_fails_nothing_over() {
        let clusters = vec![
            cluster("a", false, "2026-12-01T10:00:00Z"),
            cluster("b", false, "2026-12-01T10:00:00Z"),
            cluster("c", true, "2026-12-01T09:00:00Z"),
        ];
        let p = plan(
            &sub(json!([])),
            &clusters,
            &SETTINGS,
            &mut Memory::default(),
            at("2026-12-01T10:02:00Z"),
        );
        assert!(p.lost.is_empty());
        assert_eq!(p.hold, ["clusternet-a/a", "clusternet-b/b"]);
        assert!(
            p.suppressed
                .as_deref()
                .is_some_and(|r| r.contains("2 of 3")),
            "{p:?}"
        );
        assert_eq!(p.recheck, Some(SUPPRESSED_RECHECK));
    }

    #[test]
    fn clusters_lost_long_ago_do_not_make_a_new_loss_look_like_a_partition() {
        let clusters = vec![
            cluster("a", false, "2026-12-01T10:00:00Z"),
            cluster("old1", false, "2026-11-01T10:00:00Z"),
            cluster("old2", false, "2026-11-01T10:00:00Z"),
            cluster("b", true, "2026-12-01T09:00:00Z"),
            cluster("c", true, "2026-12-01T09:00:00Z"),
        ];
        let p = plan(
            &sub(json!([])),
            &clusters,
            &SETTINGS,
            &mut Memory::default(),
            at("2026-12-01T10:02:00Z"),
        );
        assert_eq!(
            (p.lost.as_slice(), p.suppressed),
            (&["clusternet-a/a".to_string()][..], None)
        );
        // and with fewer than three clusters there is no majority to judge by
        let two = vec![
            cluster("a", false, "2026-12-01T10:00:00Z"),
            cluster("b", true, "2026-12-01T09:00:00Z"),
        ];
        assert_eq!(
            plan(
                &sub(json!([])),
                &two,
                &SETTINGS,
                &mut Memory::default(),
                at("2026-12-01T10:02:00Z")
            )
            .lost,
            ["clusternet-a/a"]
        );
    }

    #[test]
    fn unbound_or_ready_clusters_are_not_its_business() {
        let clusters = vec![
            cluster("a", true, "2026-12-01T10:00:00Z"),
            cluster("z", false, "2026-12-01T10:00:00Z"),
        ];
        assert_eq!(
            plan(
                &sub(json!([])),
                &clusters,
                &SETTINGS,
                &mut Memory::default(),
                at("2026-12-01T11:00:00Z")
            ),
            Plan::default()
        );
    }

    fn sub_bound(bound: &[&str]) -> Subscription {
        let mut s = sub(json!([]));
        if let Some(st) = s.status.as_mut() {
            st.binding_clusters = bound.iter().map(|b| b.to_string()).collect();
        }
        s
    }

    #[test]
    fn a_failed_over_cluster_comes_back_only_once_stable_and_not_when_manual() {
        let mut memory = Memory::default();
        memory.failed_over("default/s", "clusternet-a/a", at("2026-12-01T10:01:00Z"));
        let back = vec![
            cluster("a", true, "2026-12-01T10:05:00Z"),
            cluster("b", true, "2026-12-01T09:00:00Z"),
            cluster("c", true, "2026-12-01T09:00:00Z"),
        ];
        let s = sub_bound(&["clusternet-b/b", "clusternet-c/c"]);
        // Ready for 2 minutes of the 5: kept out, looked at again when stable
        let p = plan(
            &s,
            &back,
            &SETTINGS,
            &mut memory,
            at("2026-12-01T10:07:00Z"),
        );
        assert_eq!(p.damped, ["clusternet-a/a"]);
        assert!(p.returned.is_empty());
        assert_eq!(p.recheck, Some(Duration::from_millis(180_100)));
        // stable: it returns, as a fail-back
        let p = plan(
            &s,
            &back,
            &SETTINGS,
            &mut memory,
            at("2026-12-01T10:10:00Z"),
        );
        assert_eq!(
            (p.returned.as_slice(), p.failing_back.as_slice()),
            (
                &["clusternet-a/a".to_string()][..],
                &["clusternet-a/a".to_string()][..]
            )
        );
        // a flap resets the clock: Ready again 10 s ago, kept out again
        let flapped = vec![
            cluster("a", true, "2026-12-01T10:09:50Z"),
            back[1].clone(),
            back[2].clone(),
        ];
        let p = plan(
            &s,
            &flapped,
            &SETTINGS,
            &mut memory,
            at("2026-12-01T10:10:00Z"),
        );
        assert_eq!(p.damped, ["clusternet-a/a"]);
        // opted out: never given back automatically
        let mut manual = s.clone();
        manual
            .annotations_mut()
            .insert(known::FAILBACK_ANNOTATION.into(), "Manual".into());
        let p = plan(
            &manual,
            &back,
            &SETTINGS,
            &mut memory,
            at("2026-12-01T11:00:00Z"),
        );
        assert_eq!((p.damped.len(), p.returned.len()), (1, 0));
        // bound again: no longer a fail-back; a cluster never failed over is simply new
        memory.failed_back("default/s", "clusternet-a/a");
        let p = plan(
            &s,
            &back,
            &SETTINGS,
            &mut memory,
            at("2026-12-01T10:07:00Z"),
        );
        assert_eq!(
            (p.returned.as_slice(), p.failing_back.len()),
            (&["clusternet-a/a".to_string()][..], 0)
        );
    }

    #[test]
    fn lost_clusters_fail_over_at_the_eviction_rate() {
        let clusters = vec![
            cluster("a", false, "2026-12-01T10:00:00Z"),
            cluster("b", false, "2026-12-01T10:00:00Z"),
            cluster("c", true, "2026-12-01T09:00:00Z"),
            cluster("d", true, "2026-12-01T09:00:00Z"),
            cluster("e", true, "2026-12-01T09:00:00Z"),
        ];
        let slow = Settings {
            eviction_rate: 0.1,
            ..SETTINGS
        };
        let mut memory = Memory::default();
        let s = sub_bound(&["clusternet-a/a", "clusternet-b/b", "clusternet-c/c"]);
        let p = plan(
            &s,
            &clusters,
            &slow,
            &mut memory,
            at("2026-12-01T10:02:00Z"),
        );
        assert_eq!(p.lost, ["clusternet-a/a"]);
        assert_eq!(p.hold, ["clusternet-b/b"]);
        assert_eq!(p.recheck, Some(Duration::from_millis(10_050)));
        // admitted once, a lost cluster stays admitted for every Subscription
        let p = plan(
            &s,
            &clusters,
            &slow,
            &mut memory,
            at("2026-12-01T10:02:05Z"),
        );
        assert_eq!(p.lost, ["clusternet-a/a"]);
        let p = plan(
            &s,
            &clusters,
            &slow,
            &mut memory,
            at("2026-12-01T10:02:10Z"),
        );
        assert_eq!(p.lost, ["clusternet-a/a", "clusternet-b/b"]);
    }

    fn status(clusters: &[&str], replicas: &[i32]) -> SubscriptionStatus {
        SubscriptionStatus {
            binding_clusters: clusters.iter().map(|c| c.to_string()).collect(),
            replicas: [
                ("d".to_string(), replicas.to_vec()),
                ("ns".to_string(), vec![]),
            ]
            .into(),
            ..Default::default()
        }
    }

    fn target(clusters: &[&str], replicas: &[i32]) -> TargetClusters {
        let s = status(clusters, replicas);
        TargetClusters {
            binding_clusters: s.binding_clusters,
            replicas: s.replicas,
        }
    }

    fn avail(pairs: &[(&str, i32)]) -> HashMap<(String, String), i32> {
        pairs
            .iter()
            .map(|(c, n)| ((c.to_string(), "d".to_string()), *n))
            .collect()
    }

    #[test]
    fn fail_back_adds_first_and_removes_only_what_is_available_elsewhere() {
        let now = status(&["b", "c"], &[3, 3]);
        let want = target(&["a", "b", "c"], &[2, 2, 2]);
        let surge = Surge::parse("25%").expect("a surge");
        // nothing available in a yet: a gets 2 (25% of 6, rounded up), b and c keep 3
        let first = step(&now, &want, &avail(&[("b", 3), ("c", 3)]), surge);
        assert_eq!(first, target(&["a", "b", "c"], &[2, 3, 3]));
        let first_status = status(&["a", "b", "c"], &[2, 3, 3]);
        // a reports 1 available: one replica may go
        let second = step(
            &first_status,
            &want,
            &avail(&[("a", 1), ("b", 3), ("c", 3)]),
            surge,
        );
        assert_eq!(second, target(&["a", "b", "c"], &[2, 2, 3]));
        // both: done
        let done = step(
            &first_status,
            &want,
            &avail(&[("a", 2), ("b", 3), ("c", 3)]),
            surge,
        );
        assert_eq!(done, want);
        // a cluster that is to have nothing leaves once what it has is not needed
        let away = step(
            &status(&["a", "b"], &[3, 3]),
            &target(&["b"], &[6]),
            &avail(&[("a", 3), ("b", 3)]),
            Surge::Replicas(3),
        );
        assert_eq!(away, target(&["b", "a"], &[6, 3]));
        let gone = step(
            &status(&["a", "b"], &[3, 6]),
            &target(&["b"], &[6]),
            &avail(&[("a", 3), ("b", 6)]),
            Surge::Replicas(3),
        );
        assert_eq!(gone, target(&["b"], &[6]));
        assert_eq!(
            Surge::parse("0%").map_err(|e| e.contains("percentage")),
            Err(true)
        );
        assert!(Surge::parse("x").is_err() && Surge::parse("0").is_err());
        assert_eq!(
            (Surge::Percent(25).of(1), Surge::Percent(25).of(12)),
            (1, 3)
        );
    }

    proptest::proptest! {
        /// Whatever the binding, the target and what is available: a step never leaves fewer
        /// replicas available than before (up to the count), never places more than the count
        /// plus the surge unless it already did, and repeated as replicas become available it
        /// reaches the target.
        #[test]
        fn steps_keep_the_fleet_whole_and_arrive(
            cur in proptest::collection::vec(0i32..8, 3),
            want in proptest::collection::vec(0i32..8, 3),
            up in proptest::collection::vec(0i32..8, 3),
            surge in 1i32..4,
        ) {
            let names = ["a", "b", "c"];
            let mut now = status(&names, &cur);
            let wanted = target(&names, &want);
            let count: i32 = want.iter().sum();
            let surge = Surge::Replicas(surge);
            let up: Vec<(&str, i32)> = names.iter().zip(&up).map(|(n, u)| (*n, (*u).min(cur[names.iter().position(|x| x == n).unwrap_or(0)]))).collect();
            let available = avail(&up);
            let next = step(&now, &wanted, &available, surge);
            let d = |t: &TargetClusters, n: &str| t.binding_clusters.iter().position(|c| c == n).map_or(0, |i| t.replicas["d"][i]);
            let before: i32 = up.iter().map(|(_, u)| *u).sum();
            let after: i32 = up.iter().map(|(n, u)| (*u).min(d(&next, n))).sum();
            proptest::prop_assert!(after >= before.min(count), "{before} -> {after}: {next:?}");
            let placed: i32 = next.replicas["d"].iter().sum();
            proptest::prop_assert!(placed <= (count + surge.of(count)).max(cur.iter().sum()));
            // everything placed becomes available: the target is reached
            for _ in 0..20 {
                let t = step(&now, &wanted, &avail(&names.map(|n| (n, d(&TargetClusters { binding_clusters: now.binding_clusters.clone(), replicas: now.replicas.clone() }, n)))), surge);
                now = SubscriptionStatus { binding_clusters: t.binding_clusters, replicas: t.replicas, ..Default::default() };
            }
            let reached = TargetClusters { binding_clusters: now.binding_clusters.clone(), replicas: now.replicas.clone() };
            for n in names {
                proptest::prop_assert_eq!(d(&reached, n), d(&wanted, n));
            }
        }
    }
}
