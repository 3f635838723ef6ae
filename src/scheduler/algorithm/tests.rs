//! Unit tests of `algorithm.rs`.

use super::*;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, Time,
};
use proptest::prelude::*;

use crate::apis::{
    DividingScheduling, DynamicDividing, Feed, FeedInventorySpec, FeedOrder, ManagedClusterStatus,
    SubGroupStrategy, Subscriber, SubscriptionSpec,
};
use crate::scheduler::config::{Profiles, SchedulerConfiguration};
use crate::scheduler::framework::{ExtensionPoint, Registry};
use crate::scheduler::plugins::testing::{FakePredictor, fake_registry};

fn cluster(ns: &str, name: &str, labels: &[(&str, &str)]) -> ManagedCluster {
    let mut c = ManagedCluster::new(name, Default::default());
    c.metadata.namespace = Some(ns.into());
    c.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    c
}

fn tainted(mut c: ManagedCluster, key: &str, effect: &str) -> ManagedCluster {
    c.spec.taints.push(Taint {
        key: key.into(),
        value: None,
        effect: effect.into(),
        time_added: None,
    });
    c
}

fn predicting(mut c: ManagedCluster) -> ManagedCluster {
    c.status = Some(ManagedClusterStatus {
        predictor_enabled: true,
        predictor_direct_access: true,
        ..Default::default()
    });
    c
}

fn affinity(labels: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        match_expressions: None,
    }
}

fn subscriber(labels: &[(&str, &str)], weight: i32) -> Subscriber {
    Subscriber {
        cluster_affinity: affinity(labels),
        weight,
        sub_group_strategy: None,
    }
}

fn subscription(subscribers: Vec<Subscriber>) -> Subscription {
    let mut spec = SubscriptionSpec {
        subscribers,
        feeds: vec![Feed::new("v1", "Namespace", "", "web")],
        ..Default::default()
    };
    spec.apply_crd_defaults();
    let mut sub = Subscription::new("web", spec);
    sub.metadata.namespace = Some("default".into());
    sub
}

fn deploy() -> Feed {
    Feed::new("apps/v1", "Deployment", "web", "nginx")
}

fn dividing(
    mut sub: Subscription,
    type_: ReplicaDividingType,
    desired: i32,
) -> (Subscription, FeedInventory) {
    sub.spec.scheduling_strategy = Some(SchedulingStrategy::Dividing);
    sub.spec.dividing_scheduling = Some(DividingScheduling {
        type_,
        dynamic_dividing: (type_ == ReplicaDividingType::Dynamic).then(DynamicDividing::default),
    });
    sub.spec.feeds.push(deploy());
    let inv = FeedInventory::new(
        "web",
        FeedInventorySpec {
            feeds: vec![
                FeedOrder {
                    feed: sub.spec.feeds[0].clone(),
                    ..Default::default()
                },
                FeedOrder {
                    feed: deploy(),
                    desired_replicas: Some(desired),
                    ..Default::default()
                },
            ],
        },
    );
    (sub, inv)
}

fn profile_with(registry: &Registry, yaml: &str, gate: bool) -> Arc<Framework> {
    let config = SchedulerConfiguration::from_yaml(yaml).expect("config parses");
    let profiles = Profiles::new(&config, registry, gate).expect("config valid");
    let name = config.profiles[0].scheduler_name.clone();
    Arc::clone(profiles.get(&name).expect("profile"))
}

fn default_profile() -> Arc<Framework> {
    profile_with(&fake_registry(), "", false)
}

async fn run(
    fwk: &Framework,
    sub: &Subscription,
    clusters: &[ManagedCluster],
    inv: Option<&FeedInventory>,
) -> Result<ScheduleResult, ScheduleError> {
    let mut offset = FilterOffset::default();
    schedule(fwk, &CycleState::new(), &mut offset, sub, clusters, inv).await
}

fn names(r: &ScheduleResult) -> Vec<&str> {
    r.suggested
        .binding_clusters
        .iter()
        .map(String::as_str)
        .collect()
}

#[tokio::test]
async fn no_clusters_at_all() {
    let err = run(&default_profile(), &subscription(vec![]), &[], None)
        .await
        .expect_err("no clusters");
    assert_eq!(err, ScheduleError::NoClustersAvailable);
    assert_eq!(
        err.to_string(),
        "no clusters available to schedule subscriptions"
    );
    assert!(err.should_requeue() && !err.to_string().contains("clusters are available"));
}

#[tokio::test]
async fn replication_binds_every_matching_untainted_cluster() {
    let clusters = [
        cluster("ns-b", "east", &[("region", "east")]),
        cluster("ns-a", "east2", &[("region", "east")]),
        cluster("ns-c", "west", &[("region", "west")]),
        tainted(
            cluster("ns-d", "sick", &[("region", "east")]),
            "clusters.clusternet.io/unschedulable",
            "NoSchedule",
        ),
    ];
    let sub = subscription(vec![subscriber(&[("region", "east")], 0)]);
    let result = run(&default_profile(), &sub, &clusters, None)
        .await
        .expect("schedules");
    // Equal scores: namespace/name order.
    assert_eq!(names(&result), ["ns-a/east2", "ns-b/east"]);
    assert!(result.suggested.replicas.is_empty());
    assert_eq!(
        (result.evaluated_clusters, result.feasible_clusters),
        (3, 2)
    );
}

#[tokio::test]
async fn fit_error_message() {
    let clusters = [
        tainted(cluster("a", "c1", &[]), "k1", "NoSchedule"),
        tainted(cluster("a", "c2", &[]), "k1", "NoExecute"),
        tainted(cluster("a", "c3", &[]), "k2", "NoSchedule"),
        cluster("a", "c4", &[("other", "x")]),
    ];
    let mut sub = subscription(vec![subscriber(&[], 0)]);
    sub.spec.subscribers[0].cluster_affinity = LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "other".into(),
            operator: "DoesNotExist".into(),
            values: None,
        }]),
    };
    let err = run(&default_profile(), &sub, &clusters, None)
        .await
        .expect_err("nothing fits");
    assert!(err.is_fit_error() && !err.should_requeue());
    assert_eq!(
        err.to_string(),
        "0/4 clusters are available: 1 clusters(s) had taint {k2: }, that the subscription didn't tolerate, \
             2 clusters(s) had taint {k1: }, that the subscription didn't tolerate."
    );
    // No candidate at all: an empty histogram, still a fit error.
    let sub = subscription(vec![subscriber(&[("nobody", "here")], 0)]);
    let err = run(&default_profile(), &sub, &clusters, None)
        .await
        .expect_err("no candidate");
    assert_eq!(err.to_string(), "0/4 clusters are available: .");
}

#[tokio::test]
async fn tolerations_and_deleting_clusters() {
    let mut deleting = cluster("a", "gone", &[]);
    deleting.metadata.deletion_timestamp = Some(Time(Default::default()));
    let clusters = [
        tainted(cluster("a", "c1", &[]), "dedicated", "NoSchedule"),
        cluster("a", "c2", &[]),
        deleting,
    ];
    let mut sub = subscription(vec![subscriber(&[], 0)]);
    sub.spec.cluster_tolerations = vec![Toleration {
        key: Some("dedicated".into()),
        operator: Some("Exists".into()),
        ..Default::default()
    }];
    let result = run(&default_profile(), &sub, &clusters, None)
        .await
        .expect("schedules");
    assert_eq!(names(&result), ["a/c1", "a/c2"]);
}

#[tokio::test]
async fn prefer_no_schedule_orders_by_score() {
    let clusters = [
        tainted(cluster("a", "c1", &[]), "soft", "PreferNoSchedule"),
        cluster("b", "c2", &[]),
    ];
    let sub = subscription(vec![subscriber(&[], 0)]);
    let result = run(&default_profile(), &sub, &clusters, None)
        .await
        .expect("schedules");
    assert_eq!(names(&result), ["b/c2", "a/c1"]);
}

/// A score plugin returning a fixed score per cluster name.
struct Fixed(BTreeMap<String, i64>);

impl crate::scheduler::framework::Plugin for Fixed {
    fn name(&self) -> &str {
        "Fixed"
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn crate::scheduler::framework::ScorePlugin>> {
        Some(self)
    }
}

impl crate::scheduler::framework::ScorePlugin for Fixed {
    fn score(&self, _: &CycleState, _: &Subscription, c: &ManagedCluster) -> Result<i64, Status> {
        Ok(self.0.get(&cluster_key(c)).copied().unwrap_or(0))
    }
}

fn fixed_registry(scores: &[(&str, i64)]) -> Registry {
    let scores: BTreeMap<String, i64> = scores.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
    let mut registry = fake_registry();
    registry
        .register("Fixed", move |_: &serde_json::Value| {
            Ok(Arc::new(Fixed(scores.clone())) as Arc<dyn crate::scheduler::framework::Plugin>)
        })
        .expect("registers");
    registry
}

#[tokio::test]
async fn weighted_scores_add_up() {
    let clusters = [
        cluster("a", "c1", &[]),
        tainted(cluster("a", "c2", &[]), "soft", "PreferNoSchedule"),
        cluster("a", "c3", &[]),
    ];
    let sub = subscription(vec![subscriber(&[], 0)]);
    // c1: 3*100 + 2*10 = 320; c2: 3*0 + 2*100 = 200; c3: 3*100 + 2*60 = 420.
    let registry = fixed_registry(&[("a/c1", 10), ("a/c2", 100), ("a/c3", 60)]);
    let yaml = "profiles: [{plugins: {score: {enabled: [{name: Fixed, weight: 2}]}}}]";
    let result = run(&profile_with(&registry, yaml, false), &sub, &clusters, None)
        .await
        .expect("schedules");
    assert_eq!(names(&result), ["a/c3", "a/c1", "a/c2"]);
    // Scores outside [0, 100] after normalization fail the cycle.
    let registry = fixed_registry(&[("a/c1", 150)]);
    let err = run(&profile_with(&registry, yaml, false), &sub, &clusters, None)
        .await
        .expect_err("invalid score");
    assert_eq!(
        err.to_string(),
        "running Score plugins: plugin \"Fixed\" failed with: invalid score 150, it should be in the range of [0, 100] after normalizing"
    );
    // Without score plugins everyone scores 1: namespace/name order.
    let yaml = "profiles: [{plugins: {score: {disabled: [{name: '*'}]}}}]";
    let result = run(&profile_with(&registry, yaml, false), &sub, &clusters, None)
        .await
        .expect("schedules");
    assert_eq!(names(&result), ["a/c1", "a/c2", "a/c3"]);
}

#[tokio::test]
async fn invalid_affinity_is_an_error() {
    let mut sub = subscription(vec![subscriber(&[], 0)]);
    sub.spec.subscribers[0].cluster_affinity.match_expressions =
        Some(vec![LabelSelectorRequirement {
            key: "k".into(),
            operator: "In".into(),
            values: None,
        }]);
    let err = run(&default_profile(), &sub, &[cluster("a", "c", &[])], None)
        .await
        .expect_err("invalid");
    assert!(matches!(
        err,
        ScheduleError::InvalidClusterAffinity { index: 0, .. }
    ));
}

#[tokio::test]
async fn static_dividing_end_to_end() {
    let clusters = [
        cluster("ns", "east", &[("region", "east")]),
        cluster("ns", "west", &[("region", "west")]),
    ];
    let (sub, inv) = dividing(
        subscription(vec![
            subscriber(&[("region", "east")], 1),
            subscriber(&[("region", "west")], 2),
        ]),
        ReplicaDividingType::Static,
        12,
    );
    let result = run(&default_profile(), &sub, &clusters, Some(&inv))
        .await
        .expect("schedules");
    assert_eq!(names(&result), ["ns/east", "ns/west"]);
    assert_eq!(result.suggested.replicas[&deploy().key()], [4, 8]);
    assert_eq!(
        result.suggested.replicas["v1/Namespace/web"],
        Vec::<i32>::new()
    );

    // Without the inventory the caller is wrong.
    let err = run(&default_profile(), &sub, &clusters, None)
        .await
        .expect_err("needs inventory");
    assert_eq!(
        err,
        ScheduleError::MissingFeedInventory("default/web".into())
    );

    // Weights summing to zero: clusters but no replicas.
    let (sub, inv) = dividing(
        subscription(vec![subscriber(&[], 0)]),
        ReplicaDividingType::Static,
        12,
    );
    let result = run(&default_profile(), &sub, &clusters, Some(&inv))
        .await
        .expect("schedules");
    assert_eq!(result.suggested.binding_clusters.len(), 2);
    assert!(result.suggested.replicas.is_empty());
}

#[tokio::test]
async fn dividing_without_dividing_scheduling_skips_every_assigner() {
    let (mut sub, inv) = dividing(
        subscription(vec![subscriber(&[], 1)]),
        ReplicaDividingType::Static,
        2,
    );
    sub.spec.dividing_scheduling = None;
    let err = run(
        &default_profile(),
        &sub,
        &[cluster("a", "c", &[])],
        Some(&inv),
    )
    .await
    .expect_err("no assigner applies");
    assert_eq!(err.to_string(), "assign status: Skip, ");
}

#[tokio::test]
async fn dynamic_dividing_with_predictor() {
    let fake = FakePredictor::with(&[("a/c1", Ok(10)), ("a/c2", Ok(20)), ("a/c3", Ok(30))]);
    let registry = Registry::in_tree(fake);
    let fwk = profile_with(&registry, "", false);
    let clusters = [
        predicting(cluster("a", "c1", &[])),
        predicting(cluster("a", "c2", &[])),
        predicting(cluster("a", "c3", &[])),
    ];
    let (sub, inv) = dividing(
        subscription(vec![subscriber(&[], 0)]),
        ReplicaDividingType::Dynamic,
        6,
    );
    let result = run(&fwk, &sub, &clusters, Some(&inv))
        .await
        .expect("schedules");
    assert_eq!(names(&result), ["a/c1", "a/c2", "a/c3"]);
    assert_eq!(result.suggested.replicas[&deploy().key()], [1, 2, 3]);
    assert_eq!(
        result.suggested.replicas["v1/Namespace/web"],
        Vec::<i32>::new()
    );

    // Missing dynamicDividing fails at PreAssign.
    let mut broken = sub.clone();
    if let Some(d) = broken.spec.dividing_scheduling.as_mut() {
        d.dynamic_dividing = None;
    }
    let err = run(&fwk, &broken, &clusters, Some(&inv))
        .await
        .expect_err("fails");
    assert_eq!(
        err.to_string(),
        "running PreAssign plugin \"DynamicAssigner\": must specify field DynamicDividing when dividing type is dynamic"
    );
}

#[tokio::test]
async fn predictor_failures_and_the_toleration_gate() {
    let fake = FakePredictor::with(&[("a/c1", Ok(10)), ("a/c2", Err("connection refused"))]);
    let clusters = [
        predicting(cluster("a", "c1", &[])),
        predicting(cluster("a", "c2", &[])),
    ];
    let (sub, inv) = dividing(
        subscription(vec![subscriber(&[], 0)]),
        ReplicaDividingType::Dynamic,
        4,
    );
    // Gate off: the first failure fails the cycle.
    let fwk = profile_with(&Registry::in_tree(fake.clone()), "", false);
    let err = run(&fwk, &sub, &clusters, Some(&inv))
        .await
        .expect_err("fails");
    assert!(matches!(&err, ScheduleError::Plugin(f) if f.point == ExtensionPoint::Predict));
    assert_eq!(
        err.to_string(),
        "running Predict plugins: plugin \"Predictor\" failed with: connection refused"
    );
    // Gate on: tolerated (2 * 10 > 1), but the missing prediction fails selection.
    let fwk = profile_with(&Registry::in_tree(fake.clone()), "", true);
    let err = run(&fwk, &sub, &clusters, Some(&inv))
        .await
        .expect_err("fails later");
    assert_eq!(
        err,
        ScheduleError::ReplicasUnavailable {
            feed: deploy().key(),
            cluster: "a/c2".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "unable to get replicas for feed \"apps/v1/Deployment/web/nginx\" in cluster \"a/c2\""
    );
    // Gate on with 0 tolerated: fails at prediction again.
    let fwk = profile_with(
        &Registry::in_tree(fake),
        "percentageofclusterstotolerate: 0",
        true,
    );
    let err = run(&fwk, &sub, &clusters, Some(&inv))
        .await
        .expect_err("fails");
    assert!(matches!(err, ScheduleError::Plugin(_)));
    // A disabled predictor is a failure too (Skip).
    let fake = FakePredictor::with(&[]);
    let fwk = profile_with(&Registry::in_tree(fake), "", false);
    let err = run(&fwk, &sub, &[cluster("a", "c1", &[])], Some(&inv))
        .await
        .expect_err("fails");
    assert!(
        err.to_string()
            .ends_with("failed with: predictor is disabled"),
        "{err}"
    );
    // No predict plugins: every workload feed lacks a prediction.
    let fwk = profile_with(
        &fake_registry(),
        "profiles: [{plugins: {predict: {disabled: [{name: '*'}]}}}]",
        false,
    );
    let err = run(&fwk, &sub, &clusters, Some(&inv))
        .await
        .expect_err("fails");
    assert!(matches!(err, ScheduleError::ReplicasUnavailable { .. }));
}

#[tokio::test]
async fn several_predictors_take_the_minimum() {
    use crate::scheduler::framework::{BoxFuture, FeedReplicas, Plugin, PredictPlugin};
    struct Cap(i32);
    impl Plugin for Cap {
        fn name(&self) -> &str {
            "Cap"
        }
        fn as_predict(self: Arc<Self>) -> Option<Arc<dyn PredictPlugin>> {
            Some(self)
        }
    }
    impl PredictPlugin for Cap {
        fn predict<'a>(
            &'a self,
            _: &'a CycleState,
            _: &'a Subscription,
            inv: &'a FeedInventory,
            _: &'a ManagedCluster,
        ) -> BoxFuture<'a, Result<FeedReplicas, Status>> {
            let n = inv.spec.feeds.len();
            Box::pin(async move { Ok(vec![Some(self.0); n]) })
        }
    }
    let fake = FakePredictor::with(&[("a/c1", Ok(10)), ("a/c2", Ok(1))]);
    let mut registry = Registry::in_tree(fake);
    registry
        .register("Cap", |args: &serde_json::Value| {
            let cap = args
                .get("cap")
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0);
            Ok(Arc::new(Cap(i32::try_from(cap).map_err(|e| e.to_string())?)) as Arc<dyn Plugin>)
        })
        .expect("registers");
    let fwk = profile_with(
        &registry,
        "profiles: [{plugins: {predict: {enabled: [{name: Cap}]}}, pluginConfig: [{name: Cap, args: {cap: 3}}]}]",
        false,
    );
    let clusters = [
        predicting(cluster("a", "c1", &[])),
        predicting(cluster("a", "c2", &[])),
    ];
    let (sub, inv) = dividing(
        subscription(vec![subscriber(&[], 0)]),
        ReplicaDividingType::Dynamic,
        100,
    );
    let result = run(&fwk, &sub, &clusters, Some(&inv))
        .await
        .expect("schedules");
    // min(10, 3) and min(1, 3); 100 > 4, so everyone gets their capacity.
    assert_eq!(result.suggested.replicas[&deploy().key()], [3, 1]);
}

#[tokio::test]
async fn subgroups_truncate_in_score_order() {
    let clusters = [
        cluster("sh", "a", &[("region", "sh")]),
        tainted(
            cluster("sh", "b", &[("region", "sh")]),
            "soft",
            "PreferNoSchedule",
        ),
        cluster("sh", "c", &[("region", "sh")]),
        cluster("bj", "d", &[("region", "bj"), ("both", "y")]),
        cluster("bj", "e", &[("region", "bj")]),
    ];
    let mut sub = subscription(vec![
        subscriber(&[("region", "sh")], 0),
        subscriber(&[("region", "bj")], 0),
        subscriber(&[("both", "y")], 0),
    ]);
    sub.spec.scheduling_by_sub_group = Some(true);
    sub.spec.subscribers[0].sub_group_strategy = Some(SubGroupStrategy { min_clusters: 2 });
    sub.spec.subscribers[1].sub_group_strategy = Some(SubGroupStrategy { min_clusters: 5 });
    sub.spec.subscribers[2].sub_group_strategy = Some(SubGroupStrategy { min_clusters: 1 });
    let result = run(&default_profile(), &sub, &clusters, None)
        .await
        .expect("schedules");
    // sh: a, c (b scores lower); bj: both; then d again for the third subscriber.
    assert_eq!(names(&result), ["sh/a", "sh/c", "bj/d", "bj/e", "bj/d"]);

    // minClusters omitted (0) everywhere: nothing left.
    for s in &mut sub.spec.subscribers {
        s.sub_group_strategy = Some(SubGroupStrategy::default());
    }
    let err = run(&default_profile(), &sub, &clusters, None)
        .await
        .expect_err("empty");
    assert_eq!(err.to_string(), "empty clusterScoreList");

    sub.spec.subscribers[1].sub_group_strategy = None;
    let err = run(&default_profile(), &sub, &clusters, None)
        .await
        .expect_err("missing strategy");
    assert_eq!(err.to_string(), "subGroupStrategy filed can not be Empty");
}

#[test]
fn feasible_cluster_counts() {
    use SchedulingStrategy::{Dividing, Replication};
    assert_eq!(num_feasible_clusters_to_find(99, 0, Dividing), 99);
    assert_eq!(num_feasible_clusters_to_find(5000, 0, Replication), 5000);
    assert_eq!(num_feasible_clusters_to_find(500, 100, Dividing), 500);
    // Adaptive: 50 - 1000/125 = 42%.
    assert_eq!(num_feasible_clusters_to_find(1000, 0, Dividing), 420);
    // Adaptive floor of 5%, then at least 100.
    assert_eq!(num_feasible_clusters_to_find(10_000, 0, Dividing), 500);
    assert_eq!(num_feasible_clusters_to_find(1000, 5, Dividing), 100);
    assert_eq!(num_feasible_clusters_to_find(1000, 30, Dividing), 300);
}

#[tokio::test]
async fn filtering_stops_early_and_rotates() {
    let clusters: Vec<ManagedCluster> = (0..200)
        .map(|i| cluster("ns", &format!("c{i:03}"), &[]))
        .collect();
    let (sub, inv) = dividing(
        subscription(vec![subscriber(&[], 1)]),
        ReplicaDividingType::Static,
        200,
    );
    let fwk = profile_with(&fake_registry(), "percentageofclusterstoscore: 50", false);
    let state = CycleState::new();
    let mut offset = FilterOffset::default();
    let first = schedule(&fwk, &state, &mut offset, &sub, &clusters, Some(&inv))
        .await
        .expect("schedules");
    assert_eq!(first.feasible_clusters, 100);
    assert_eq!(first.suggested.binding_clusters[0], "ns/c000");
    assert_eq!(offset.get(), 100);
    let second = schedule(&fwk, &state, &mut offset, &sub, &clusters, Some(&inv))
        .await
        .expect("schedules");
    assert_eq!(second.suggested.binding_clusters[0], "ns/c100");
    assert_eq!(
        second.suggested.replicas[&deploy().key()]
            .iter()
            .sum::<i32>(),
        200
    );
    assert_eq!(offset.get(), 0);
}

#[tokio::test]
async fn prefilter_unschedulable_marks_every_candidate() {
    use crate::scheduler::framework::{Plugin, PreFilterPlugin};
    struct Closed;
    impl Plugin for Closed {
        fn name(&self) -> &str {
            "Closed"
        }
        fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
            Some(self)
        }
    }
    impl PreFilterPlugin for Closed {
        fn pre_filter(&self, _: &CycleState, _: &Subscription) -> Result<(), Status> {
            Err(Status::unschedulable("window closed"))
        }
    }
    let mut registry = fake_registry();
    registry
        .register("Closed", |_: &serde_json::Value| {
            Ok(Arc::new(Closed) as Arc<dyn Plugin>)
        })
        .expect("registers");
    let fwk = profile_with(
        &registry,
        "profiles: [{plugins: {preFilter: {enabled: [{name: Closed}]}}}]",
        false,
    );
    let clusters = [cluster("a", "c1", &[]), cluster("a", "c2", &[])];
    let err = run(
        &fwk,
        &subscription(vec![subscriber(&[], 0)]),
        &clusters,
        None,
    )
    .await
    .expect_err("closed");
    assert_eq!(
        err.to_string(),
        "0/2 clusters are available: 2 window closed."
    );
}

fn arb_cluster(i: usize) -> impl Strategy<Value = ManagedCluster> {
    (
        prop::sample::select(vec!["east", "west"]),
        prop::option::of(prop::sample::select(vec![
            ("hard", "NoSchedule"),
            ("hard", "NoExecute"),
            ("soft", "PreferNoSchedule"),
            ("ok", "NoSchedule"),
        ])),
    )
        .prop_map(move |(region, taint)| {
            let c = cluster(
                &format!("ns{}", i % 3),
                &format!("c{i}"),
                &[("region", region)],
            );
            match taint {
                Some((key, effect)) => tainted(c, key, effect),
                None => c,
            }
        })
}

fn arb_clusters() -> impl Strategy<Value = Vec<ManagedCluster>> {
    (1..12_usize).prop_flat_map(|n| (0..n).map(arb_cluster).collect::<Vec<_>>())
}

async fn explain(
    fwk: &Framework,
    sub: &Subscription,
    clusters: &[ManagedCluster],
    inv: Option<&FeedInventory>,
) -> (Result<ScheduleResult, ScheduleError>, Explanation) {
    let mut explanation = Explanation::default();
    let mut offset = FilterOffset::default();
    let result = schedule_explained(
        fwk,
        &CycleState::new(),
        &mut offset,
        sub,
        clusters,
        inv,
        Some(&mut explanation),
    )
    .await;
    (result, explanation)
}

fn verdict_of<'a>(e: &'a Explanation, cluster: &str) -> &'a Verdict {
    &e.clusters
        .iter()
        .find(|c| c.cluster == cluster)
        .expect("every cluster is explained")
        .verdict
}

/// The fleet: gold kept, silver dropped by affinity (naming the term), bronze
/// dropped by its taint (naming it).
#[tokio::test]
async fn explains_affinity_and_taint_drops_by_name() {
    let clusters = [
        cluster("c-bronze", "bronze", &[("tier", "bronze")]),
        cluster("c-gold", "gold", &[("tier", "gold")]),
        cluster("c-silver", "silver", &[("tier", "silver")]),
    ];
    let clusters = [
        tainted(clusters[0].clone(), "maintenance", "NoSchedule"),
        clusters[1].clone(),
        clusters[2].clone(),
    ];
    let sub = subscription(vec![Subscriber {
        cluster_affinity: LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["gold".into(), "bronze".into()]),
            }]),
        },
        weight: 0,
        sub_group_strategy: None,
    }]);
    let fwk = default_profile();
    let (result, e) = explain(&fwk, &sub, &clusters, None).await;
    let result = result.expect("gold fits");
    assert_eq!(names(&result), ["c-gold/gold"]);
    assert_eq!(e.binding_clusters, result.suggested.binding_clusters);
    assert_eq!(e.strategy, "Replication");
    assert!(matches!(
        verdict_of(&e, "c-gold/gold"),
        Verdict::Selected { .. }
    ));
    assert_eq!(
        verdict_of(&e, "c-silver/silver"),
        &Verdict::AffinityMissed {
            terms: vec!["tier in (bronze,gold)".into()]
        }
    );
    match verdict_of(&e, "c-bronze/bronze") {
        Verdict::Filtered { plugin, reasons } => {
            assert_eq!(plugin.as_deref(), Some("TaintToleration"));
            assert!(
                reasons.iter().any(|r| r.contains("maintenance")),
                "names the taint: {reasons:?}"
            );
        }
        other => panic!("bronze: {other:?}"),
    }
    assert_eq!(e.error, None);
}

#[tokio::test]
async fn explains_static_replicas_and_a_failed_attempt() {
    let clusters = [
        cluster("a", "c1", &[("region", "east")]),
        cluster("b", "c2", &[("region", "east")]),
    ];
    let sub = subscription(vec![subscriber(&[("region", "east")], 3)]);
    let (sub, inv) = dividing(sub, ReplicaDividingType::Static, 10);
    let fwk = default_profile();
    let (result, e) = explain(&fwk, &sub, &clusters, Some(&inv)).await;
    let result = result.expect("static dividing fits");
    assert_eq!(e.replicas, result.suggested.replicas);
    let total: i32 = e
        .clusters
        .iter()
        .map(|c| match &c.verdict {
            Verdict::Selected { replicas } => replicas.get(&deploy().key()).copied().unwrap_or(0),
            _ => 0,
        })
        .sum();
    assert_eq!(total, 10, "{e:?}");

    // nothing fits: the error is the scheduler's FailedScheduling text
    let west = subscription(vec![subscriber(&[("region", "west")], 1)]);
    let (result, e) = explain(&fwk, &west, &clusters, None).await;
    let err = result.expect_err("no west cluster");
    assert_eq!(e.error, Some(err.to_string()));
    assert!(e.binding_clusters.is_empty());
    assert!(
        e.clusters
            .iter()
            .all(|c| matches!(c.verdict, Verdict::AffinityMissed { .. }))
    );
}

/// The property tests' Subscription: region=east, tolerating the `ok` taint (not `hard`),
/// Replication or Static dividing of `desired` replicas.
fn east_tolerating_ok(desired: i32, dividing_on: bool) -> (Subscription, Option<FeedInventory>) {
    let mut sub = subscription(vec![subscriber(&[("region", "east")], 2)]);
    sub.spec.cluster_tolerations = vec![Toleration {
        key: Some("ok".into()),
        operator: Some("Exists".into()),
        ..Default::default()
    }];
    if dividing_on {
        let (s, i) = dividing(sub, ReplicaDividingType::Static, desired);
        (s, Some(i))
    } else {
        (sub, None)
    }
}

proptest! {
    /// The explanation never changes the decision, and says exactly what was decided:
    /// the same binding as the plain cycle, every bound cluster Selected, nothing else.
    #[test]
    fn an_explained_cycle_decides_what_the_real_one_does(clusters in arb_clusters(), desired in 0..50_i32, dividing_on in any::<bool>()) {
        let (sub, inv) = east_tolerating_ok(desired, dividing_on);
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let fwk = default_profile();
        let real = rt.block_on(run(&fwk, &sub, &clusters, inv.as_ref()));
        let (explained, e) = rt.block_on(explain(&fwk, &sub, &clusters, inv.as_ref()));
        prop_assert_eq!(&real, &explained);
        prop_assert_eq!(e.clusters.len(), clusters.len());
        let bound: Vec<String> = real.as_ref().map(|r| r.suggested.binding_clusters.clone()).unwrap_or_default();
        prop_assert_eq!(&e.binding_clusters, &bound);
        for c in &e.clusters {
            let selected = matches!(c.verdict, Verdict::Selected { .. });
            prop_assert_eq!(selected, bound.contains(&c.cluster), "{:?}", c);
        }
        if let Err(err) = &real {
            prop_assert_eq!(e.error.clone(), Some(err.to_string()));
        }
    }

    /// Whatever the clusters, never bind one with an untolerated NoSchedule/NoExecute taint
    /// or one outside the affinity; static replicas always add up.
    #[test]
    fn never_binds_filtered_out_clusters(clusters in arb_clusters(), desired in 0..50_i32, dividing_on in any::<bool>()) {
        let (sub, inv) = east_tolerating_ok(desired, dividing_on);
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let fwk = default_profile();
        let outcome = rt.block_on(run(&fwk, &sub, &clusters, inv.as_ref()));
        let allowed: BTreeSet<String> = clusters
            .iter()
            .filter(|c| labels_of(c).get("region").is_some_and(|r| r == "east"))
            .filter(|c| !c.spec.taints.iter().any(|t| t.key == "hard"))
            .map(cluster_key)
            .collect();
        match outcome {
            Ok(result) => {
                let bound: BTreeSet<String> = result.suggested.binding_clusters.iter().cloned().collect();
                prop_assert_eq!(&bound, &allowed);
                if dividing_on {
                    let replicas = &result.suggested.replicas[&deploy().key()];
                    prop_assert_eq!(replicas.iter().sum::<i32>(), desired);
                }
            }
            Err(e) => {
                prop_assert!(e.is_fit_error(), "{}", e);
                prop_assert!(allowed.is_empty());
            }
        }
    }
}

fn edgy_i32() -> impl Strategy<Value = i32> {
    prop_oneof![
        4 => 0..100_i32,
        2 => any::<i32>(),
        1 => Just(i32::MAX),
        1 => Just(i32::MIN),
        1 => i32::MIN..=i32::MIN + 10,
    ]
}

proptest! {
    #![proptest_config(crate::fuzz_support::config(64))]

    /// A whole Dynamic cycle with whatever the predictors answer (agents' predictor APIs
    /// are network input: negative and extreme numbers included) and whatever the
    /// reservations hold: no overflow anywhere in selection or division, and with sane
    /// numbers the desired replicas are all placed when the clusters have room.
    #[test]
    fn random_predictions_never_overflow_dynamic_selection(
        predictions in proptest::collection::vec(edgy_i32(), 1..5),
        taken in proptest::collection::vec(edgy_i32(), 1..5),
        desired in prop_oneof![0..100_i32, Just(i32::MAX)],
    ) {
        let answers: Vec<(String, Result<i32, &str>)> = predictions
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("a/c{i}"), Ok(*p)))
            .collect();
        let borrowed: Vec<(&str, Result<i32, &str>)> =
            answers.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let registry = Registry::in_tree(FakePredictor::with(&borrowed));
        let fwk = profile_with(&registry, "", false);
        let clusters: Vec<ManagedCluster> = (0..predictions.len())
            .map(|i| predicting(cluster("a", &format!("c{i}"), &[])))
            .collect();
        let (sub, inv) = dividing(
            subscription(vec![subscriber(&[], 0)]),
            ReplicaDividingType::Dynamic,
            desired,
        );
        let state = CycleState::new();
        let held: std::collections::HashMap<(String, String), i32> = taken
            .iter()
            .enumerate()
            .map(|(i, t)| ((format!("a/c{i}"), deploy().key()), *t))
            .collect();
        state.write(
            crate::scheduler::reservation::TAKEN,
            crate::scheduler::reservation::Taken(held),
        );
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let mut offset = FilterOffset::default();
        let outcome = rt.block_on(schedule(&fwk, &state, &mut offset, &sub, &clusters, Some(&inv)));
        match outcome {
            Ok(result) => {
                let replicas = &result.suggested.replicas[&deploy().key()];
                prop_assert!(replicas.iter().all(|&r| r >= 0), "{:?}", replicas);
                let room: i64 = predictions
                    .iter()
                    .enumerate()
                    .map(|(i, &p)| (i64::from(p) - i64::from(taken.get(i).copied().unwrap_or(0))).max(0))
                    .sum();
                let sane = predictions.iter().all(|&p| p >= 0) && taken.iter().all(|&t| t >= 0);
                let placed: i64 = replicas.iter().map(|&r| i64::from(r)).sum();
                if sane && room >= i64::from(desired) {
                    prop_assert_eq!(placed, i64::from(desired));
                } else {
                    prop_assert!(placed <= i64::from(desired));
                }
            }
            Err(e) => crate::fuzz_support::assert_readable(&e.to_string(), "a Dynamic cycle")?,
        }
    }
}

/// Found by `random_predictions_never_overflow_dynamic_selection`: a predictor answering
/// `i32::MIN` (an agent's API is network input) minus what reservations hold overflowed
/// `i32` in selection.
#[tokio::test]
async fn extreme_predictions_do_not_overflow_selection() {
    let registry = Registry::in_tree(FakePredictor::with(&[
        ("a/c1", Ok(i32::MIN)),
        ("a/c2", Ok(5)),
    ]));
    let fwk = profile_with(&registry, "", false);
    let clusters = [
        predicting(cluster("a", "c1", &[])),
        predicting(cluster("a", "c2", &[])),
    ];
    let (sub, inv) = dividing(
        subscription(vec![subscriber(&[], 0)]),
        ReplicaDividingType::Dynamic,
        4,
    );
    let state = CycleState::new();
    state.write(
        crate::scheduler::reservation::TAKEN,
        crate::scheduler::reservation::Taken(
            [(("a/c1".to_owned(), deploy().key()), 1)]
                .into_iter()
                .collect(),
        ),
    );
    let mut offset = FilterOffset::default();
    let result = schedule(&fwk, &state, &mut offset, &sub, &clusters, Some(&inv))
        .await
        .expect("schedules");
    assert_eq!(result.suggested.replicas[&deploy().key()], [0, 4]);
}
