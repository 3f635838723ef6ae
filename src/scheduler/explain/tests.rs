//! Unit tests of `explain.rs`.

use super::*;

#[test]
fn summaries_name_the_step_and_its_reason() {
    let filtered = Verdict::Filtered {
        plugin: Some("TaintToleration".into()),
        reasons: vec!["cluster(s) had untolerated taint {tier: bronze}".into()],
    };
    assert_eq!(
        filtered.summary(),
        "dropped by TaintToleration: cluster(s) had untolerated taint {tier: bronze}"
    );
    let missed = Verdict::AffinityMissed {
        terms: vec![
            "tier in (bronze,gold)".into(),
            "tier in (bronze,gold)".into(),
        ],
    };
    assert_eq!(
        missed.summary(),
        "dropped by clusterAffinity: tier in (bronze,gold)"
    );
    let selected = Verdict::Selected {
        replicas: BTreeMap::from([("apps/v1/Deployment/demo/web".into(), 6)]),
    };
    assert_eq!(
        selected.summary(),
        "selected: apps/v1/Deployment/demo/web=6"
    );
}

fn verdict(cluster: &str, verdict: Verdict) -> ClusterVerdict {
    ClusterVerdict {
        cluster: cluster.into(),
        verdict,
        predicted: None,
        score: None,
    }
}

fn at() -> Time {
    Time("2026-12-02T15:00:00Z".parse().expect("a time"))
}

/// A fleet of 40: two bound (with score and prediction), 30 missing the same affinity term,
/// 8 tainted; one failed over outside the cycle. Grouped by reason, the bulk first, names
/// bounded, nothing counted twice.
#[test]
fn the_kept_decision_groups_dropped_clusters_by_reason() {
    let feed = "apps/v1/Deployment/demo/web";
    let mut clusters = Vec::new();
    for i in 0..40 {
        let name = format!("ns/c{i:02}");
        clusters.push(match i {
            0 | 1 => ClusterVerdict {
                predicted: Some(vec![Some(4 + i), None]),
                score: Some(100 - i64::from(i)),
                ..verdict(
                    &name,
                    Verdict::Selected {
                        replicas: BTreeMap::new(),
                    },
                )
            },
            2..32 => verdict(
                &name,
                Verdict::AffinityMissed {
                    terms: vec!["tier in (gold)".into()],
                },
            ),
            _ => verdict(
                &name,
                Verdict::Filtered {
                    plugin: Some("TaintToleration".into()),
                    reasons: vec!["cluster(s) had untolerated taint {x: y}".into()],
                },
            ),
        });
    }
    let explanation = Explanation {
        strategy: "Dividing".into(),
        clusters,
        ..Explanation::default()
    };
    let status = SubscriptionStatus {
        binding_clusters: vec!["ns/c00".into(), "ns/c01".into()],
        ..SubscriptionStatus::default()
    };
    let inventory: FeedInventory = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "FeedInventory",
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {"feeds": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web",
             "desiredReplicas": 6, "replicaJsonPath": "/spec/replicas"},
            {"apiVersion": "v1", "kind": "Namespace", "name": "demo"}]}
    }))
    .expect("an inventory");
    let lost = vec!["ns/gone".to_string()];
    let d = decision_record(
        &explanation,
        &status,
        Some(&inventory),
        &[("failed over", &lost), ("damped", &[])],
        at(),
    );
    assert_eq!(d.decided_at, Some(at()));
    assert_eq!(d.strategy, "Dividing");
    let selected: Vec<(&str, Option<i64>, Option<i32>)> = d
        .selected
        .iter()
        .map(|s| (s.cluster.as_str(), s.score, s.predicted.get(feed).copied()))
        .collect();
    assert_eq!(
        selected,
        [
            ("ns/c00", Some(100), Some(4)),
            ("ns/c01", Some(99), Some(5))
        ]
    );
    assert_eq!(d.selected[0].predicted.len(), 1, "no prediction, no entry");
    let groups: Vec<(&str, i32, usize)> = d
        .dropped
        .iter()
        .map(|g| (g.reason.as_str(), g.count, g.clusters.len()))
        .collect();
    assert_eq!(
        groups,
        [
            ("dropped by clusterAffinity: tier in (gold)", 30, 10),
            (
                "dropped by TaintToleration: cluster(s) had untolerated taint {x: y}",
                8,
                8
            ),
            ("failed over", 1, 1),
        ]
    );
    assert_eq!(d.dropped[0].clusters[0], "ns/c02", "sorted names");
    assert_eq!(d.omitted, 0);
    assert_eq!(d.error, None);
}

/// Past the bounds: selected beyond 20 and reasons beyond 10 are counted in `omitted`, long
/// reasons are cut, a cluster the cycle selected but fail-back has not bound yet says so.
#[test]
fn the_kept_decision_stays_bounded() {
    let mut clusters: Vec<ClusterVerdict> = (0..25)
        .map(|i| {
            verdict(
                &format!("a/{i:02}"),
                Verdict::Selected {
                    replicas: BTreeMap::new(),
                },
            )
        })
        .collect();
    for i in 0..12 {
        clusters.push(verdict(
            &format!("b/{i:02}"),
            Verdict::Filtered {
                plugin: None,
                reasons: vec![format!("reason {i} {}", "é".repeat(400))],
            },
        ));
    }
    let status = SubscriptionStatus {
        binding_clusters: (0..23).map(|i| format!("a/{i:02}")).collect(),
        ..SubscriptionStatus::default()
    };
    let explanation = Explanation {
        clusters,
        error: Some("x".repeat(2000)),
        ..Explanation::default()
    };
    let d = decision_record(&explanation, &status, None, &[], at());
    assert_eq!(d.selected.len(), SchedulingDecision::MAX_SELECTED);
    assert_eq!(d.dropped.len(), SchedulingDecision::MAX_GROUPS);
    // 3 bound beyond 20; 13 groups (the two selected, unbound ones first, then 12 reasons
    // of one cluster each): 3 beyond 10
    assert_eq!(d.omitted, 3 + 3);
    assert!(
        d.dropped
            .iter()
            .all(|g| g.reason.len() <= SchedulingDecision::MAX_REASON)
    );
    assert!(d.dropped.iter().any(|g| g.reason.ends_with(" ...")));
    assert!(
        d.dropped
            .iter()
            .any(|g| g.reason.starts_with("selected, not bound yet")
                && g.clusters == ["a/23", "a/24"])
    );
    assert_eq!(
        d.error.as_deref().map(str::len),
        Some(SchedulingDecision::MAX_REASON)
    );
}

fn cluster(ns: &str, name: &str, tier: &str) -> ManagedCluster {
    serde_json::from_value(serde_json::json!({
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": name, "namespace": ns, "labels": {"tier": tier}},
            "spec": {"clusterId": format!("id-{name}"), "clusterType": "EdgeCluster", "syncMode": "Pull"}
        }))
        .expect("a ManagedCluster")
}

fn web_manifest(replicas: i32) -> Arc<Manifest> {
    crate::pipeline::feeds::test_manifest(serde_json::json!({"apiVersion": "apps/v1",
            "kind": "Deployment", "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))
}

fn fwk() -> Arc<Framework> {
    let registry = crate::scheduler::plugins::testing::fake_registry();
    let (_, profiles) = crate::scheduler::config::Profiles::from_yaml(None, &registry, false)
        .expect("default profile");
    Arc::clone(profiles.get("default").expect("the default profile"))
}

/// The Static 3:2 over 10 replicas, from YAML as a user writes it (no defaults, no
/// FeedInventory yet): 6 and 4.
#[tokio::test]
async fn what_if_divides_a_subscription_that_does_not_exist_yet() {
    let sub: Subscription = crate::kube_ext::yaml::from_str(
        "apiVersion: apps.clusternet.io/v1alpha1\nkind: Subscription\n\
             metadata: {name: web, namespace: default}\n\
             spec:\n  schedulingStrategy: Dividing\n  dividingScheduling: {type: Static}\n  \
             subscribers:\n  - {clusterAffinity: {matchLabels: {tier: gold}}, weight: 3}\n  \
             - {clusterAffinity: {matchLabels: {tier: silver}}, weight: 2}\n  \
             feeds:\n  - {apiVersion: apps/v1, kind: Deployment, name: web, namespace: demo}\n",
    )
    .expect("a Subscription");
    let clusters = [
        cluster("c-gold", "gold", "gold"),
        cluster("c-silver", "silver", "silver"),
    ];
    let e = what_if(
        &fwk(),
        &sub,
        &clusters,
        &[web_manifest(10)],
        "clusternet-reserved",
    )
    .await;
    assert_eq!(e.error, None, "{e:?}");
    assert_eq!(e.strategy, "Dividing");
    assert_eq!(e.binding_clusters, ["c-gold/gold", "c-silver/silver"]);
    assert_eq!(
        e.replicas.values().next().cloned(),
        Some(vec![6, 4]),
        "{:?}",
        e.replicas
    );

    // without the Manifest the what-if says so instead of guessing
    let e = what_if(&fwk(), &sub, &clusters, &[], "clusternet-reserved").await;
    assert!(
        e.error
            .as_deref()
            .is_some_and(|m| m.contains("has no Manifest")),
        "{e:?}"
    );
}

#[test]
fn the_table_has_a_row_per_cluster_and_the_decision() {
    let e = Explanation {
        strategy: "Dividing".into(),
        clusters: vec![
            ClusterVerdict {
                cluster: "c-gold/gold".into(),
                verdict: Verdict::Selected {
                    replicas: BTreeMap::from([("web".into(), 6)]),
                },
                predicted: Some(vec![None, Some(8)]),
                score: Some(100),
            },
            ClusterVerdict {
                cluster: "c-silver/silver".into(),
                verdict: Verdict::AffinityMissed {
                    terms: vec!["tier in (bronze,gold)".into()],
                },
                predicted: None,
                score: None,
            },
        ],
        binding_clusters: vec!["c-gold/gold".into()],
        replicas: BTreeMap::from([("web".into(), vec![6])]),
        error: None,
    };
    assert_eq!(
        e.table(),
        "CLUSTER           SCORE   PREDICTED   VERDICT\n\
             c-gold/gold       100     -,8         selected: web=6\n\
             c-silver/silver   -       -           dropped by clusterAffinity: tier in (bronze,gold)\n\
             \n\
             Dividing: bound to c-gold/gold\n"
    );
    let failed = Explanation {
        strategy: "Replication".into(),
        error: Some("0/1 clusters are available: .".into()),
        ..e
    };
    assert!(
        failed
            .table()
            .ends_with("\nnot scheduled (Replication): 0/1 clusters are available: .\n")
    );
}

#[test]
fn verdicts_serialise_with_their_step() {
    let v = serde_json::to_value(Verdict::AffinityMissed {
        terms: vec!["tier=gold".into()],
    })
    .expect("json");
    assert_eq!(
        v,
        serde_json::json!({"step": "affinityMissed", "terms": ["tier=gold"]})
    );
}
