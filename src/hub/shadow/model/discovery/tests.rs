//! Unit tests of `discovery.rs`.

use super::*;

// ---- versions -----------------------------------------------------------------------------

#[test]
fn kube_version_order() {
    let ordered = ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "bar", "foo"];
    for (i, a) in ordered.iter().enumerate() {
        for b in &ordered[i + 1..] {
            assert_eq!(compare_kube_versions(a, b), Ordering::Greater, "{a} vs {b}");
            assert_eq!(compare_kube_versions(b, a), Ordering::Less, "{b} vs {a}");
        }
    }
    assert_eq!(compare_kube_versions("v1", "v1"), Ordering::Equal);
    assert_eq!(compare_kube_versions("v10", "v2"), Ordering::Greater);
    assert_eq!(compare_kube_versions("v2alpha1", "v1beta1"), Ordering::Less);
    assert_eq!(
        compare_kube_versions("v1beta10", "v1beta2"),
        Ordering::Greater
    );
    assert_eq!(
        compare_kube_versions("v1gamma1", "v1alpha1"),
        Ordering::Less
    );
    assert_eq!(compare_kube_versions("v1beta", "v1alpha1"), Ordering::Less);
    assert_eq!(
        compare_kube_versions("v99999999999999999999", "v1"),
        Ordering::Less
    );
    let mut versions = vec!["foo", "v1alpha1", "v1", "v1beta1", "v2", "v1beta2", "bar"];
    versions.sort_by(|a, b| compare_kube_versions(b, a));
    assert_eq!(versions, ordered);
}

// ---- resource selection -------------------------------------------------------------------

fn res(name: &str, kind: &str, namespaced: bool) -> DiscoveredResource {
    DiscoveredResource {
        name: name.into(),
        singular_name: String::new(),
        namespaced,
        kind: kind.into(),
        verbs: vec!["get".into(), "list".into()],
        short_names: vec![],
        categories: vec!["all".into()],
        storage_version_hash: String::new(),
    }
}

fn group(
    name: &str,
    preferred: &str,
    versions: Vec<(&str, Vec<DiscoveredResource>)>,
) -> DiscoveredGroup {
    DiscoveredGroup {
        name: name.into(),
        preferred_version: preferred.into(),
        versions: versions
            .into_iter()
            .map(|(v, resources)| DiscoveredVersion {
                version: v.into(),
                resources,
            })
            .collect(),
    }
}

fn picked(resources: &[ShadowResource]) -> Vec<(String, String, String)> {
    resources
        .iter()
        .map(|r| (r.name.clone(), r.group.clone(), r.version.clone()))
        .collect()
}

fn triple(name: &str, group: &str, version: &str) -> (String, String, String) {
    (name.into(), group.into(), version.into())
}

#[test]
fn normalize_matches_upstream_test() {
    let batch = group(
        "batch",
        "v1",
        vec![
            ("v2alpha1", vec![res("xyz", "Xyz", true)]),
            (
                "v1",
                vec![
                    res("xyz", "Xyz", true),
                    res("jobs", "Job", true),
                    res("jobs/status", "Job", true),
                ],
            ),
            (
                "v1beta1",
                vec![
                    res("cronjobs", "CronJob", true),
                    res("cronjobs/status", "CronJob", true),
                    res("scenarios", "Scenario", true),
                ],
            ),
            ("v1alpha1", vec![res("scenarios", "Scenario", true)]),
        ],
    );
    assert_eq!(
        picked(&normalize_group_resources(&batch)),
        vec![
            triple("jobs", "batch", "v1"),
            triple("jobs/status", "batch", "v1"),
            triple("xyz", "batch", "v1"),
            triple("cronjobs", "batch", "v1beta1"),
            triple("cronjobs/status", "batch", "v1beta1"),
            triple("scenarios", "batch", "v1beta1"),
        ]
    );
    // without a preferred version the highest wins
    let no_pref = group(
        "x.io",
        "",
        vec![
            ("v1beta1", vec![res("a", "A", true)]),
            ("v2", vec![res("a", "A", true)]),
        ],
    );
    assert_eq!(
        picked(&normalize_group_resources(&no_pref)),
        vec![triple("a", "x.io", "v2")]
    );
}

fn discovery() -> Vec<DiscoveredGroup> {
    vec![
        group(
            "",
            "v1",
            vec![(
                "v1",
                vec![
                    res("pods", "Pod", true),
                    res("events", "Event", true),
                    res("namespaces", "Namespace", false),
                ],
            )],
        ),
        group(
            "apps",
            "v1",
            vec![(
                "v1",
                vec![
                    res("deployments", "Deployment", true),
                    res("deployments/scale", "Scale", true),
                ],
            )],
        ),
        group(
            "events.k8s.io",
            "v1",
            vec![("v1", vec![res("events", "Event", true)])],
        ),
        group(
            "apiregistration.k8s.io",
            "v1",
            vec![(
                "v1",
                vec![
                    res("apiservices", "APIService", false),
                    res("apiservices/status", "APIService", false),
                ],
            )],
        ),
        group(
            "apps.clusternet.io",
            "v1alpha1",
            vec![("v1alpha1", vec![res("manifests", "Manifest", true)])],
        ),
        group(
            "shadow",
            "v1alpha1",
            vec![("v1alpha1", vec![res("widgets", "Widget", true)])],
        ),
        group(
            "metrics.k8s.io",
            "v1beta1",
            vec![("v1beta1", vec![res("pods", "PodMetrics", true)])],
        ),
        group(
            "custom.metrics.k8s.io",
            "v1beta1",
            vec![("v1beta1", vec![res("gauges", "MetricValueList", true)])],
        ),
        group(
            "stable.example.com",
            "v1",
            vec![("v1", vec![res("crontabs", "CronTab", true)])],
        ),
    ]
}

fn real_priorities(group: &str, version: &str) -> Option<i32> {
    match (group, version) {
        ("", "v1") => Some(18000),
        ("apps", "v1") => Some(17800),
        ("events.k8s.io", "v1") => Some(17750),
        ("apiregistration.k8s.io", "v1") => Some(18000),
        _ => None,
    }
}

#[test]
fn selection_skips_and_resolves_collisions() {
    let crds: BTreeSet<String> = ["stable.example.com".to_string()].into();
    let mut tracker = PriorityTracker::new();
    let selected = select_shadow_resources(&discovery(), &crds, &mut tracker, real_priorities);
    assert_eq!(
        picked(&selected),
        vec![
            triple("events", "", "v1"),
            triple("namespaces", "", "v1"),
            triple("pods", "", "v1"),
            triple("deployments", "apps", "v1"),
            triple("deployments/scale", "apps", "v1"),
        ]
    );
    assert_eq!(tracker.holder("events"), Some(("v1.", 18000)));
    assert!(selected.iter().all(|r| r.origin == ResourceOrigin::BuiltIn));
}

#[test]
fn selection_newcomer_replaces_on_equal_or_higher_priority() {
    let crds = BTreeSet::new();
    let mut tracker = PriorityTracker::new();
    let equal = |g: &str, _: &str| (g.is_empty() || g == "events.k8s.io").then_some(100);
    let selected = select_shadow_resources(&discovery(), &crds, &mut tracker, equal);
    let events: Vec<_> = selected.iter().filter(|r| r.name == "events").collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].group, "events.k8s.io");
    // CRD-owned group not excluded here, so its resource is served
    assert!(selected.iter().any(|r| r.name == "crontabs"));
    // apiservices never
    assert!(!selected.iter().any(|r| r.name.starts_with("apiservices")));
}

#[test]
fn missing_apiservice_admits_without_recording() {
    let mut tracker = PriorityTracker::new();
    assert!(tracker.admit("", "v1", "events", Some(18000)));
    // not found: added even though a higher-priority holder exists, holder unchanged
    assert!(tracker.admit("events.k8s.io", "v1", "events", None));
    assert_eq!(tracker.holder("events"), Some(("v1.", 18000)));
    assert!(!tracker.admit("events.k8s.io", "v1", "events", Some(17750)));
    assert!(tracker.admit("events.k8s.io", "v1", "events", Some(18000)));
    assert_eq!(tracker.holder("events"), Some(("v1.events.k8s.io", 18000)));
    assert!(!tracker.admit("apiregistration.k8s.io", "v1", "apiservices", None));
    assert!(!tracker.admit(
        "apiregistration.k8s.io",
        "v1",
        "apiservices/status",
        Some(1)
    ));
    assert!(tracker.admit("apiregistration.k8s.io", "v1beta1", "apiservices", None));
}

#[test]
fn skipped_groups() {
    for g in [
        "apps.clusternet.io",
        "proxies.clusternet.io",
        "shadow",
        "metrics.k8s.io",
        "custom.metrics.k8s.io",
    ] {
        assert!(is_skipped_group(g), "{g}");
    }
    for g in ["", "apps", "clusternet.io", "external.metrics.k8s.io"] {
        assert!(!is_skipped_group(g), "{g}");
    }
    assert_eq!(apiservice_name("", "v1"), "v1.");
    assert_eq!(apiservice_name("apps", "v1"), "v1.apps");
}

// ---- CRDs and discovery -------------------------------------------------------------------

fn crontab_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com", "resourceVersion": "10"},
        "spec": {
            "group": "stable.example.com",
            "names": {
                "plural": "crontabs",
                "singular": "crontab",
                "kind": "CronTab",
                "listKind": "CronTabList",
                "shortNames": ["ct"],
            },
            "scope": "Namespaced",
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                {
                    "name": "v1",
                    "served": true,
                    "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                    "subresources": {
                        "status": {},
                        "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
                    },
                    "additionalPrinterColumns": [{"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"}],
                },
            ],
        },
        "status": {"storedVersions": ["v1"], "acceptedNames": {"plural": "crontabs", "kind": "CronTab"}},
    })
}

#[test]
fn crd_resource_from_realistic_crd() {
    let r = crd_shadow_resource(&crontab_crd()).unwrap();
    assert_eq!(r.group, "stable.example.com");
    assert_eq!(r.version, "v1");
    assert_eq!(r.name, "crontabs");
    assert_eq!(r.singular_name, "crontab");
    assert_eq!(r.kind, "CronTab");
    assert!(r.namespaced);
    assert_eq!(r.verbs, CRD_VERBS.to_vec());
    assert_eq!(
        r.origin,
        ResourceOrigin::Crd {
            has_status: true,
            has_scale: true
        }
    );
    assert_eq!(
        r.storage_version_hash,
        storage_version_hash("stable.example.com", "v1", "CronTab")
    );
    assert_eq!(r.api_version(), "stable.example.com/v1");
    assert_eq!(r.list_kind(), "CronTabList");
    assert_eq!(r.manifest_name("qux", "c1"), "crontabs.qux.c1");
}

#[test]
fn crd_resource_rejections() {
    let mut deleting = crontab_crd();
    deleting["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    assert!(crd_shadow_resource(&deleting).is_none());

    let mut unserved = crontab_crd();
    unserved["spec"]["versions"][1]["served"] = json!(false);
    assert!(crd_shadow_resource(&unserved).is_none());

    let mut ours = crontab_crd();
    ours["spec"]["group"] = json!("apps.clusternet.io");
    assert!(crd_shadow_resource(&ours).is_none());

    let mut cluster = crontab_crd();
    cluster["spec"]["scope"] = json!("Cluster");
    cluster["spec"]["versions"][1]
        .as_object_mut()
        .unwrap()
        .remove("subresources");
    let r = crd_shadow_resource(&cluster).unwrap();
    assert!(!r.namespaced);
    assert_eq!(
        r.origin,
        ResourceOrigin::Crd {
            has_status: false,
            has_scale: false
        }
    );
    assert_eq!(r.manifest_name("ignored", "c1"), "crontabs.c1");
}

#[test]
fn crd_priority_and_resync() {
    let mut tracker = PriorityTracker::new();
    assert!(tracker.admit("", "v1", "crontabs", Some(18000)));
    assert!(admit_crd(&crontab_crd(), &mut tracker, |_, _| Some(1000)).is_none());
    let mut fresh = PriorityTracker::new();
    assert!(admit_crd(&crontab_crd(), &mut fresh, |_, _| Some(1000)).is_some());

    let old = crontab_crd();
    let mut new = crontab_crd();
    assert!(!crd_update_needs_resync(&old, &new));
    new["spec"]["names"]["shortNames"] = json!(["ct", "cts"]);
    assert!(crd_update_needs_resync(&old, &new));
    new["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    assert!(!crd_update_needs_resync(&old, &new));

    let crds = [crontab_crd()];
    assert_eq!(crd_groups(&crds), ["stable.example.com".to_string()].into());
}

#[test]
fn discovery_document() {
    let crds = BTreeSet::new();
    let mut tracker = PriorityTracker::new();
    let mut discovered = discovery();
    discovered[1].versions[0].resources[0].short_names = vec!["deploy".into()];
    discovered[1].versions[0].resources[0].singular_name = "deployment".into();
    discovered[1].versions[0].resources[0].storage_version_hash = "8aSe+NMegvE=".into();
    let mut resources: Vec<ShadowResource> =
        select_shadow_resources(&discovered, &crds, &mut tracker, real_priorities)
            .into_iter()
            .filter(|r| r.group == "apps")
            .collect();
    resources.push(crd_shadow_resource(&crontab_crd()).unwrap());
    let doc = discovery_resource_list(&resources);
    assert_eq!(doc["kind"], "APIResourceList");
    assert_eq!(doc["groupVersion"], "shadow/v1alpha1");
    assert_eq!(
        doc["resources"],
        json!([
            {
                "name": "deployments", "singularName": "deployment", "namespaced": true,
                "group": "apps", "version": "v1", "kind": "Deployment", "verbs": ["get", "list"],
                "categories": ["clusternet.shadow"],
                "storageVersionHash": "8aSe+NMegvE=",
            },
            {
                "name": "deployments/scale", "singularName": "", "namespaced": true,
                "group": "apps", "version": "v1", "kind": "Scale", "verbs": ["get", "list"],
                "categories": ["clusternet.shadow"],
            },
            {
                "name": "crontabs", "singularName": "crontab", "namespaced": true,
                "kind": "CronTab", "verbs": CRD_VERBS,
                "categories": ["clusternet.shadow"],
                "storageVersionHash": storage_version_hash("stable.example.com", "v1", "CronTab"),
            },
            {
                "name": "crontabs/scale", "singularName": "crontab", "namespaced": true,
                "group": "autoscaling", "version": "v1", "kind": "Scale",
                "verbs": ["get", "patch", "update"],
                "categories": ["clusternet.shadow"],
            },
        ])
    );
    assert_eq!(
        shadow_api_group()["preferredVersion"]["groupVersion"],
        "shadow/v1alpha1"
    );
}

#[test]
fn discovered_resource_deserializes_from_api_resource_json() {
    let r: DiscoveredResource = serde_json::from_value(json!({
            "name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment",
            "verbs": ["create", "get"], "shortNames": ["deploy"], "categories": ["all"],
            "storageVersionHash": "8aSe+NMegvE=",
        }))
        .unwrap();
    assert_eq!(r.short_names, vec!["deploy"]);
    let sub: DiscoveredResource = serde_json::from_value(
        json!({"name": "deployments/scale", "group": "autoscaling", "kind": "Scale"}),
    )
    .unwrap();
    assert!(sub.verbs.is_empty());
}

#[test]
fn storage_version_hashes() {
    let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(
        hex(sha256(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    // two-block message (padding crosses a block boundary)
    assert_eq!(
        hex(sha256(
            b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
        )),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
    assert_eq!(
        hex(sha256(b"")),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(base64_std(b""), "");
    assert_eq!(base64_std(b"f"), "Zg==");
    assert_eq!(base64_std(b"foo"), "Zm9v");
    assert_eq!(base64_std(b"foob"), "Zm9vYg==");
    assert_eq!(base64_std(&[0xfb, 0xff]), "+/8=");
    assert_eq!(base64_std(b"fooba"), "Zm9vYmE=");
    // values served by real kube-apiservers
    assert_eq!(
        storage_version_hash("apps", "v1", "Deployment"),
        "8aSe+NMegvE="
    );
    assert_eq!(storage_version_hash("", "v1", "Pod"), "xPOwRZ+Yhw8=");
    assert_eq!(storage_version_hash("apps", "v1", ""), "");
}
