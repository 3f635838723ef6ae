//! Unit tests of `assigner.rs`.

use super::*;
use crate::apis::{
    DividingScheduling, DynamicDividing, FeedInventorySpec, FeedOrder, SchedulingStrategy,
    SubscriptionSpec, SubscriptionStatus,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[test]
fn static_vectors() {
    // algorithm_test.go
    assert_eq!(static_divide_replicas(5, &[2, 1, 0, 2]), [2, 1, 0, 2]);
    assert_eq!(static_divide_replicas(10, &[2, 1, 2]), [4, 2, 4]);
    assert_eq!(static_divide_replicas(6, &[2, 1, 0, 2]), [3, 1, 0, 2]);
    assert_eq!(static_divide_replicas(5, &[5, 1, 0, 2]), [4, 0, 0, 1]);
    assert_eq!(static_divide_replicas(12, &[1, 2]), [4, 8]);
    assert_eq!(static_divide_replicas(12, &[1, 2, 1]), [3, 6, 3]);
    assert_eq!(static_divide_replicas(3, &[0, 0]), [0, 0]);
}

#[test]
fn dynamic_divide_vectors() {
    let w = [3, 6, 9];
    assert_eq!(dynamic_divide_replicas(6, &w), [1, 2, 3]);
    assert_eq!(dynamic_divide_replicas(2, &w), [0, 1, 1]);
    assert_eq!(dynamic_divide_replicas(3, &w), [1, 1, 1]);
    assert_eq!(dynamic_divide_replicas(-6, &w), [-1, -2, -3]);
    assert_eq!(dynamic_divide_replicas(-2, &w), [0, -1, -1]);
    assert_eq!(dynamic_divide_replicas(3, &[0, 0, 0]), [0, 0, 0]);
    assert_eq!(dynamic_divide_replicas(6, &[1, 2, 2]), [1, 2, 2]);
    // Where Go's int32 product would wrap.
    assert_eq!(
        dynamic_divide_replicas(50_000, &[50_000, 50_000]),
        [25_000, 25_000]
    );
}

fn deploy(name: &str) -> Feed {
    Feed::new("apps/v1", "Deployment", "default", name)
}

fn service(name: &str) -> Feed {
    Feed::new("v1", "Service", "default", name)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// dynamic_test.go's template: c1..c3 with f1=[1,3,0], f2=[], f3=[1,1,1].
fn template() -> Subscription {
    let mut sub = Subscription::new(
        "sub",
        SubscriptionSpec {
            scheduling_strategy: Some(SchedulingStrategy::Dividing),
            dividing_scheduling: Some(DividingScheduling {
                type_: ReplicaDividingType::Dynamic,
                dynamic_dividing: Some(DynamicDividing::default()),
            }),
            feeds: vec![deploy("f1"), service("f2"), deploy("f3")],
            ..Default::default()
        },
    );
    sub.status = Some(SubscriptionStatus {
        binding_clusters: strings(&["c1", "c2", "c3"]),
        replicas: BTreeMap::from([
            (deploy("f1").key(), vec![1, 3, 0]),
            (service("f2").key(), vec![]),
            (deploy("f3").key(), vec![1, 1, 1]),
        ]),
        ..Default::default()
    });
    sub
}

fn inventory(f1: i32, f3: i32) -> FeedInventory {
    FeedInventory::new(
        "sub",
        FeedInventorySpec {
            feeds: vec![
                FeedOrder {
                    feed: deploy("f1"),
                    desired_replicas: Some(f1),
                    ..Default::default()
                },
                FeedOrder {
                    feed: service("f2"),
                    ..Default::default()
                },
                FeedOrder {
                    feed: deploy("f3"),
                    desired_replicas: Some(f3),
                    ..Default::default()
                },
            ],
        },
    )
}

fn available(clusters: &[&str], f1: &[i32], f3: &[i32]) -> TargetClusters {
    TargetClusters::new(
        strings(clusters),
        BTreeMap::from([
            (deploy("f1").key(), f1.to_vec()),
            (service("f2").key(), vec![]),
            (deploy("f3").key(), f3.to_vec()),
        ]),
    )
}

fn expected(clusters: &[&str], f1: &[i32], f3: &[i32]) -> TargetClusters {
    available(clusters, f1, f3)
}

fn run_dynamic(sub: &Subscription, inv: &FeedInventory, avail: &TargetClusters) -> TargetClusters {
    let state = CycleState::new();
    DynamicAssigner
        .pre_assign(&state, sub, inv, avail, &[])
        .expect("pre-assign");
    DynamicAssigner
        .assign(&state, sub, inv, avail, &[])
        .expect("assign")
}

#[test]
fn dynamic_assigner_scenarios() {
    let sub = template();
    let three = ["c1", "c2", "c3"];
    let tens = [10, 10, 10];
    // scale up f1
    assert_eq!(
        run_dynamic(&sub, &inventory(8, 3), &available(&three, &tens, &tens)),
        expected(&three, &[3, 4, 1], &[1, 1, 1])
    );
    // scale up f1 and f3
    assert_eq!(
        run_dynamic(
            &sub,
            &inventory(8, 9),
            &available(&three, &tens, &[10, 20, 30])
        ),
        expected(&three, &[3, 4, 1], &[2, 3, 4])
    );
    // scale down f1 (no available replicas needed)
    assert_eq!(
        run_dynamic(&sub, &inventory(2, 3), &TargetClusters::default()),
        expected(&three, &[0, 2, 0], &[1, 1, 1])
    );
    // scale down f1 and f3
    assert_eq!(
        run_dynamic(&sub, &inventory(2, 1), &TargetClusters::default()),
        expected(&three, &[0, 2, 0], &[0, 0, 1])
    );
    // scale up with a new candidate cluster
    let new = ["c1", "c2", "c4"];
    assert_eq!(
        run_dynamic(
            &sub,
            &inventory(8, 9),
            &available(&new, &tens, &[10, 20, 30])
        ),
        expected(&["c1", "c2", "c3", "c4"], &[3, 4, 0, 1], &[2, 3, 1, 3])
    );
    // scale up f1 with a new candidate, scale down f3
    assert_eq!(
        run_dynamic(
            &sub,
            &inventory(8, 1),
            &available(&new, &tens, &[10, 20, 30])
        ),
        expected(&["c1", "c2", "c3", "c4"], &[3, 4, 0, 1], &[0, 0, 1, 0])
    );
    // desired equal to current: nothing moves, not even the clusters
    assert_eq!(
        run_dynamic(
            &sub,
            &inventory(4, 3),
            &available(&new, &tens, &[10, 20, 30])
        ),
        expected(&three, &[1, 3, 0], &[1, 1, 1])
    );
}

#[test]
fn dynamic_new_non_workload_feed_gets_an_empty_list() {
    let mut sub = template();
    sub.spec.feeds.push(service("f4"));
    let mut inv = inventory(4, 3);
    inv.spec.feeds.push(FeedOrder {
        feed: service("f4"),
        ..Default::default()
    });
    let got = run_dynamic(
        &sub,
        &inv,
        &available(&["c1", "c2", "c4"], &[10; 3], &[10, 20, 30]),
    );
    let mut want = expected(&["c1", "c2", "c3"], &[1, 3, 0], &[1, 1, 1]);
    want.replicas.insert(service("f4").key(), vec![]);
    assert_eq!(got, want);
}

#[test]
fn dynamic_first_schedule_divides_the_full_count() {
    let mut sub = template();
    sub.status = None;
    let got = run_dynamic(
        &sub,
        &inventory(6, 2),
        &available(&["a", "b"], &[1, 2], &[5, 5]),
    );
    assert_eq!(got, expected(&["a", "b"], &[1, 2], &[1, 1]));
}

#[test]
fn dynamic_requires_dynamic_dividing() {
    let mut sub = template();
    if let Some(d) = sub.spec.dividing_scheduling.as_mut() {
        d.dynamic_dividing = None;
    }
    let state = CycleState::new();
    let err = DynamicAssigner
        .pre_assign(
            &state,
            &sub,
            &inventory(1, 1),
            &TargetClusters::default(),
            &[],
        )
        .expect_err("must fail");
    assert_eq!(err.message(), MISSING_DYNAMIC_DIVIDING);
    // Static subscriptions are not the dynamic assigner's business.
    let mut sub = template();
    sub.spec.dividing_scheduling = Some(DividingScheduling::default());
    assert!(
        DynamicAssigner
            .pre_assign(
                &state,
                &sub,
                &inventory(1, 1),
                &TargetClusters::default(),
                &[]
            )
            .is_ok()
    );
    assert_eq!(
        DynamicAssigner
            .assign(
                &state,
                &sub,
                &inventory(1, 1),
                &TargetClusters::default(),
                &[]
            )
            .expect_err("skips")
            .code(),
        crate::scheduler::framework::Code::Skip
    );
}

#[test]
fn binpack_changes_nothing() {
    let sub = template();
    let devs = vec![Deviation {
        feed: deploy("f1"),
        replicas: Some(4),
    }];
    let avail = available(&["c1", "c2", "c3"], &[10; 3], &[10; 3]);
    let got = dynamic_assign(&sub, DynamicDividingStrategy::Binpack, &devs, &avail);
    assert_eq!(got, expected(&["c1", "c2", "c3"], &[1, 3, 0], &[1, 1, 1]));
}

proptest! {
    /// Static division: sums to D, each share is floor(w*D/S) or one more, weight-0
    /// clusters get nothing (the remainder is handed out by weight, and it is smaller than
    /// the number of positive-weight clusters), and the result is deterministic.
    #[test]
    fn static_division_properties(
        desired in 0..100_000_i32,
        weights in proptest::collection::vec(0..1_000_i64, 1..20),
    ) {
        let total: i64 = weights.iter().sum();
        prop_assume!(total > 0);
        let r = static_divide_replicas(desired, &weights);
        prop_assert_eq!(r.len(), weights.len());
        prop_assert_eq!(r.iter().map(|&x| i64::from(x)).sum::<i64>(), i64::from(desired));
        for (x, w) in r.iter().zip(&weights) {
            // upstream hands the remainder out by weight, not by fraction, so a share is its
            // floor or one more (even when the exact share happens to be whole)
            let floor = *w * i64::from(desired) / total;
            prop_assert!(i64::from(*x) == floor || i64::from(*x) == floor + 1, "{} vs floor {}", x, floor);
            if *w == 0 {
                prop_assert_eq!(*x, 0);
            }
            prop_assert!(*x >= 0);
        }
        prop_assert_eq!(static_divide_replicas(desired, &weights), r);
    }

    /// Dynamic division with 0 < D <= S: sums to D, never exceeds a cluster's capacity, each
    /// share within 1 of the exact proportion.
    #[test]
    fn dynamic_division_properties(
        capacity in proptest::collection::vec(0..10_000_i32, 1..20),
        fraction in 0.0..=1.0_f64,
    ) {
        let total: i64 = capacity.iter().map(|&c| i64::from(c)).sum();
        prop_assume!(total > 0);
        #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
        let desired = ((total as f64 * fraction).round() as i64).clamp(1, total);
        let desired = i32::try_from(desired).unwrap_or(i32::MAX);
        let r = dynamic_divide_replicas(desired, &capacity);
        prop_assert_eq!(r.iter().map(|&x| i64::from(x)).sum::<i64>(), i64::from(desired));
        for (x, c) in r.iter().zip(&capacity) {
            prop_assert!(*x >= 0 && x <= c, "{} of {}", x, c);
        }
        prop_assert_eq!(dynamic_divide_replicas(desired, &capacity), r);
    }

    /// More desired than capacity: everyone gets exactly their capacity.
    #[test]
    fn dynamic_division_saturates(capacity in proptest::collection::vec(0..1_000_i32, 1..10), extra in 1..1_000_i32) {
        let total: i32 = capacity.iter().sum();
        prop_assert_eq!(dynamic_divide_replicas(total + extra, &capacity), capacity);
    }
}

/// Numbers that break arithmetic: small ones, zero, any, and the limits.
fn edgy_i32() -> impl Strategy<Value = i32> {
    prop_oneof![
        4 => 0..100_i32,
        2 => any::<i32>(),
        1 => Just(0),
        1 => Just(i32::MAX),
        1 => Just(i32::MIN),
        1 => i32::MAX - 10..=i32::MAX,
    ]
}

fn edgy_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 0..100_i64,
        2 => any::<i64>(),
        1 => Just(0),
        1 => Just(i64::from(i32::MAX)),
        1 => Just(i64::MAX),
        1 => Just(i64::MIN),
        1 => i64::MAX / 2..=i64::MAX,
    ]
}

proptest! {
    #![proptest_config(crate::fuzz_support::config(crate::fuzz_support::DEFAULT_CASES))]

    /// Static and Dynamic division with any replicas (0, negative, near the limits), any
    /// weights and capacities: no overflow (debug builds panic on one), one share per
    /// cluster, and all of the desired replicas handed out whenever that is possible.
    #[test]
    fn random_divisions_never_overflow(
        desired in edgy_i32(),
        weights in proptest::collection::vec(edgy_i64(), 0..8),
        capacity in proptest::collection::vec(edgy_i32(), 0..8),
    ) {
        crate::fuzzing::check_divisions(
            desired,
            &weights,
            &capacity,
            static_divide_replicas(desired, &weights),
            dynamic_divide_replicas(desired, &capacity),
        );
    }

    /// The Static assigner with subscriber weights up to `i32::MAX` (several matching
    /// the same cluster): no overflow, and every workload feed gets exactly its replicas.
    #[test]
    fn random_static_assignments_add_up(
        weights in proptest::collection::vec(edgy_i32(), 1..5),
        desired in prop_oneof![0..1_000_i32, Just(i32::MAX)],
        clusters in 1..5_usize,
    ) {
        let spec = SubscriptionSpec {
            scheduling_strategy: Some(SchedulingStrategy::Dividing),
            dividing_scheduling: Some(DividingScheduling {
                type_: ReplicaDividingType::Static,
                dynamic_dividing: None,
            }),
            subscribers: weights
                .iter()
                .map(|&weight| Subscriber { weight, ..Default::default() })
                .collect(),
            feeds: vec![deploy("f1")],
            ..Default::default()
        };
        let sub = Subscription::new("sub", spec);
        let inv = FeedInventory::new(
            "sub",
            FeedInventorySpec {
                feeds: vec![FeedOrder {
                    feed: deploy("f1"),
                    desired_replicas: Some(desired),
                    ..Default::default()
                }],
            },
        );
        let names: Vec<String> = (0..clusters).map(|i| format!("c{i}")).collect();
        let managed: Vec<ManagedCluster> = names
            .iter()
            .map(|n| ManagedCluster::new(n, Default::default()))
            .collect();
        let refs: Vec<&ManagedCluster> = managed.iter().collect();
        let avail = TargetClusters::new(names.clone(), BTreeMap::new());
        let out = StaticAssigner
            .assign(&CycleState::new(), &sub, &inv, &avail, &refs)
            .expect("static assigns");
        if weights.iter().any(|&w| w > 0) {
            let got = &out.replicas[&deploy("f1").key()];
            prop_assert_eq!(got.len(), clusters);
            prop_assert_eq!(got.iter().map(|&x| i64::from(x)).sum::<i64>(), i64::from(desired));
        }
    }

    /// The Dynamic assigner from any current assignment (sums near `i32::MAX` included) to
    /// any desired count with any capacities: no overflow; and from a sane state (no
    /// negative counts, totals within `i32`) Spread reaches exactly the desired replicas
    /// whenever the capacity allows it.
    #[test]
    fn random_dynamic_assignments_add_up(
        current in proptest::collection::vec(edgy_i32(), 0..4),
        capacity in proptest::collection::vec(edgy_i32(), 1..4),
        desired in edgy_i32(),
        spread in prop::bool::weighted(0.8),
    ) {
        let bound: Vec<String> = (0..current.len()).map(|i| format!("c{i}")).collect();
        let avail_names: Vec<String> = (0..capacity.len()).map(|i| format!("c{}", i + 1)).collect();
        let mut sub = template();
        if let Some(d) = sub.spec.dividing_scheduling.as_mut() {
            d.dynamic_dividing = Some(DynamicDividing {
                strategy: if spread {
                    DynamicDividingStrategy::Spread
                } else {
                    DynamicDividingStrategy::Binpack
                },
                ..Default::default()
            });
        }
        sub.spec.feeds = vec![deploy("f1")];
        sub.status = Some(SubscriptionStatus {
            binding_clusters: bound.clone(),
            replicas: if current.is_empty() {
                BTreeMap::new()
            } else {
                BTreeMap::from([(deploy("f1").key(), current.clone())])
            },
            ..Default::default()
        });
        let inv = FeedInventory::new(
            "sub",
            FeedInventorySpec {
                feeds: vec![FeedOrder {
                    feed: deploy("f1"),
                    desired_replicas: Some(desired),
                    ..Default::default()
                }],
            },
        );
        let avail = TargetClusters::new(
            avail_names,
            BTreeMap::from([(deploy("f1").key(), capacity.clone())]),
        );
        let out = run_dynamic(&sub, &inv, &avail);
        let assigned: i64 = current.iter().map(|&x| i64::from(x)).sum();
        let cap: i64 = capacity.iter().map(|&x| i64::from(x)).sum();
        let sane = current.iter().all(|&x| x >= 0)
            && capacity.iter().all(|&x| x >= 0)
            && desired >= 0
            && i32::try_from(assigned).is_ok()
            && i32::try_from(cap).is_ok();
        let deviation = i64::from(desired) - assigned;
        if sane && spread && (deviation <= 0 || (cap > 0 && deviation <= cap)) {
            let total: i64 = out.replicas[&deploy("f1").key()].iter().map(|&x| i64::from(x)).sum();
            prop_assert_eq!(total, i64::from(desired), "{:?}", out);
        }
    }
}

/// Found by `random_static_assignments_add_up`: two subscribers of weight `i32::MAX`
/// matching the same cluster give it weight 2^32, and `w * D` overflowed `i64` for a
/// Subscription asking for `i32::MAX` replicas (a debug build panicked, a release build
/// handed out garbage).
#[test]
fn huge_static_weights_do_not_overflow() {
    let w = 2 * i64::from(i32::MAX);
    assert_eq!(
        static_divide_replicas(i32::MAX, &[w, w])
            .iter()
            .map(|&x| i64::from(x))
            .sum::<i64>(),
        i64::from(i32::MAX)
    );
    assert_eq!(static_divide_replicas(7, &[i64::MAX, i64::MAX]), [4, 3]);
}

/// Found by `random_dynamic_assignments_add_up`: a current assignment summing past
/// `i32::MAX` (the status is written back by anyone with access to it) wraps the deviation
/// to a positive number, and adding the new shares to the current ones overflowed `i32`.
#[test]
fn overflowing_current_assignment_does_not_overflow_the_merge() {
    let mut sub = template();
    sub.spec.feeds = vec![deploy("f1")];
    sub.status = Some(SubscriptionStatus {
        binding_clusters: strings(&["c1", "c2"]),
        replicas: BTreeMap::from([(deploy("f1").key(), vec![i32::MAX, i32::MAX])]),
        ..Default::default()
    });
    let inv = FeedInventory::new(
        "sub",
        FeedInventorySpec {
            feeds: vec![FeedOrder {
                feed: deploy("f1"),
                desired_replicas: Some(3),
                ..Default::default()
            }],
        },
    );
    let avail = TargetClusters::new(
        strings(&["c1", "c2"]),
        BTreeMap::from([(deploy("f1").key(), vec![10, 10])]),
    );
    let out = run_dynamic(&sub, &inv, &avail);
    assert_eq!(out.replicas[&deploy("f1").key()], [i32::MAX, i32::MAX]);
}
