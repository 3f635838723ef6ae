//! The placement what-if against real control planes: `kubectl clusternet placement` asks the
//! hub's `placement.clusternet.io` reviews, which run the scheduler's cycle and the controller's
//! rendering over the parent's state and write nothing; applying the Subscription afterwards
//! must give exactly what the explanation said.

mod support;

use std::time::Duration;

use clusternet::apis::placement::PlacementReview;
use clusternet::apis::placement::Verdict;
use clusternet::apis::{Description, ManagedCluster, Subscription};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Cluster, TestEnv, TestNamespace, create_manifests, register, uid, wait_for};

fn key(c: &Cluster) -> String {
    format!("{}/{}", c.dedicated, c.name)
}

fn deployment(ns: &str, replicas: i32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
}

fn subscription(name: &str, ns: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// Runs `kubectl clusternet placement ARGS` with `file` (YAML) as `-f -` when given.
fn placement(env: &TestEnv, args: &[&str], file: Option<&Value>) -> (bool, String, String) {
    let mut all = vec!["placement"];
    if file.is_some() {
        all.extend(["-f", "-"]);
    }
    all.extend(args);
    let text = file.map(|f| serde_yaml::to_string(f).expect("yaml"));
    let out = env.plugin_with_stdin(&all, text.as_deref());
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn review(env: &TestEnv, args: &[&str], file: Option<&Value>) -> PlacementReview {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (ok, out, err) = placement(env, &all, file);
    assert!(ok, "placement {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("placement -o json: {e}: {out}"))
}

fn verdict(r: &PlacementReview, c: &Cluster) -> Verdict {
    let status = r.status.as_ref().expect("a status");
    status
        .explanation
        .clusters
        .iter()
        .find(|v| v.cluster == key(c))
        .unwrap_or_else(|| panic!("no verdict for {}: {:?}", key(c), status.explanation))
        .verdict
        .clone()
}

async fn create(parent: &kube::Client, sub: &Value) -> Api<Subscription> {
    let ns = sub["metadata"]["namespace"].as_str().expect("namespace");
    let api: Api<Subscription> = Api::namespaced(parent.clone(), ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(sub.clone()).expect("a Subscription"),
    )
    .await
    .expect("creating the Subscription");
    api
}

async fn status_when(
    api: &Api<Subscription>,
    name: &str,
    done: impl Fn(&clusternet::apis::SubscriptionStatus) -> bool,
) -> clusternet::apis::SubscriptionStatus {
    wait_for(
        "the scheduler's decision",
        Duration::from_secs(40),
        || async {
            let s = api.get(name).await.map_err(|e| e.to_string())?;
            let st = s.status.unwrap_or_default();
            if done(&st) {
                Ok(st)
            } else {
                Err(format!("{st:?}"))
            }
        },
    )
    .await
}

#[tokio::test]
async fn explains_affinity_and_taints_then_binds_exactly_that() {
    let env = TestEnv::get();
    env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(
        env,
        &id,
        &[1, 2, 3],
        "Pull",
        &["tier=gold", "tier=silver", "tier=bronze"],
    )
    .await;
    let (gold, silver, bronze) = (&clusters[0], &clusters[1], &clusters[2]);
    Api::<ManagedCluster>::namespaced(parent.clone(), &bronze.dedicated)
        .patch(
            &bronze.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [{"key": "e2e/maintenance", "value": "yes", "effect": "NoSchedule"}]}})),
        )
        .await
        .expect("tainting bronze");
    let appns = format!("what-if-{id}");
    create_manifests(&parent, &[deployment(&appns, 1)]).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "placement").await;
    let sub = subscription(
        "tiers",
        &ns.name,
        json!({
        "subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold", "bronze"]}]}}],
        "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": appns, "name": "web"}]}),
    );

    // before it exists
    let r = review(env, &[], Some(&sub));
    assert!(
        matches!(verdict(&r, gold), Verdict::Selected { .. }),
        "{r:?}"
    );
    match verdict(&r, silver) {
        Verdict::AffinityMissed { terms } => {
            assert_eq!(terms, vec!["tier in (bronze,gold)".to_string()])
        }
        other => panic!("silver: {other:?}"),
    }
    match verdict(&r, bronze) {
        Verdict::Filtered { plugin, reasons } => {
            assert_eq!(plugin.as_deref(), Some("TaintToleration"));
            assert!(
                reasons.iter().any(|r| r.contains("e2e/maintenance")),
                "{reasons:?}"
            );
        }
        other => panic!("bronze: {other:?}"),
    }
    let explained = r
        .status
        .clone()
        .unwrap_or_default()
        .explanation
        .binding_clusters;
    assert_eq!(explained, vec![key(gold)]);
    // the table says the same in words, and nothing was created
    let (ok, table, err) = placement(env, &[], Some(&sub));
    assert!(ok, "{err}");
    for want in [
        "dropped by clusterAffinity: tier in (bronze,gold)",
        "dropped by TaintToleration",
        "e2e/maintenance",
        &format!("bound to {}", key(gold)),
    ] {
        assert!(table.contains(want), "{want:?} missing from:\n{table}");
    }
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    assert!(
        subs.get_opt("tiers").await.expect("reading").is_none(),
        "a what-if creates nothing"
    );

    // applied: the scheduler binds exactly what was explained
    let api = create(&parent, &sub).await;
    let st = status_when(&api, "tiers", |s| !s.binding_clusters.is_empty()).await;
    assert_eq!(st.binding_clusters, explained);
    // and the live one is explained by name, matching its state
    let r = review(env, &["subscription", "tiers", "-n", &ns.name], None);
    let status = r.status.expect("status");
    assert_eq!(status.would_change, Some(false));
    let current = status.current.expect("current");
    assert_eq!(current.binding_clusters, explained);
    // the scheduler kept why: gold selected, silver and bronze dropped with their reasons
    let decided = current.last_decision.expect("the kept decision");
    let selected: Vec<&str> = decided
        .selected
        .iter()
        .map(|s| s.cluster.as_str())
        .collect();
    assert_eq!(selected, [key(gold).as_str()]);
    let dropped_for = |c: &Cluster| {
        decided
            .dropped
            .iter()
            .find(|g| g.clusters.contains(&key(c)))
            .map(|g| g.reason.clone())
            .unwrap_or_else(|| panic!("{} not in {:?}", key(c), decided.dropped))
    };
    assert_eq!(
        dropped_for(silver),
        "dropped by clusterAffinity: tier in (bronze,gold)"
    );
    assert!(
        dropped_for(bronze).contains("TaintToleration")
            && dropped_for(bronze).contains("e2e/maintenance"),
        "{:?}",
        decided.dropped
    );
    let (ok, table, err) = placement(env, &["subscription", "tiers", "-n", &ns.name], None);
    assert!(ok, "{err}");
    for want in [
        "the scheduler decided that at ",
        &format!("selected {}", key(gold)),
        "dropped by clusterAffinity: tier in (bronze,gold) (",
    ] {
        assert!(table.contains(want), "{want:?} missing from:\n{table}");
    }
    // a state change the scheduler has not acted on yet: untainting bronze makes a fresh
    // decision differ until the scheduler catches up
    Api::<ManagedCluster>::namespaced(parent.clone(), &bronze.dedicated)
        .patch(
            &bronze.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await
        .expect("untainting bronze");
    let mut both = vec![key(gold), key(bronze)];
    both.sort();
    let st = status_when(&api, "tiers", |s| s.binding_clusters.len() == 2).await;
    let mut bound = st.binding_clusters.clone();
    bound.sort();
    assert_eq!(bound, both);
    let r = review(env, &["subscription", "tiers", "-n", &ns.name], None);
    let status = r.status.expect("status");
    assert_eq!(status.would_change, Some(false));
    // the new decision replaced the kept one: bronze is selected now, its taint gone from it
    let decided = status
        .current
        .and_then(|c| c.last_decision)
        .expect("the kept decision");
    let mut selected: Vec<String> = decided.selected.iter().map(|s| s.cluster.clone()).collect();
    selected.sort();
    assert_eq!(selected, both);
    assert!(
        decided
            .dropped
            .iter()
            .all(|g| !g.reason.contains("TaintToleration")),
        "{:?}",
        decided.dropped
    );
}

/// Dynamic dividing: the what-if shows each child's predicted capacity (child1 mostly full: 4
/// replicas of 1 CPU fit, child3: 16) and the split that follows; applied, the scheduler binds
/// the same split and keeps the predictions it decided on.
#[tokio::test]
async fn dynamic_dividing_shows_each_childs_predicted_capacity() {
    let env = TestEnv::get();
    env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let _ballast = support::fill_child1(env).await;
    let (clusters, _) = support::register_with_predictors(env, &id, &[1, 3], "dyn", true).await;
    let (busy, free) = (&clusters[0], &clusters[1]);
    let appns = format!("what-if-dyn-{id}");
    let mut web = deployment(&appns, 6);
    web["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "1", "memory": "64Mi"}});
    create_manifests(&parent, &[web]).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "placement").await;
    let sub = subscription(
        "dynamic",
        &ns.name,
        json!({
        "schedulingStrategy": "Dividing",
        "dividingScheduling": {"type": "Dynamic", "dynamicDividing": {"strategy": "Spread"}},
        "subscribers": [{"clusterAffinity": {"matchLabels": {"dyn": id}}}],
        "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": appns, "name": "web"}]}),
    );
    let feed_key = format!("apps/v1/Deployment/{appns}/web");
    // the agents' predictors see the ballast a moment after it is created
    let explained = wait_for(
        "the what-if to predict 4 and 16",
        Duration::from_secs(40),
        || async {
            let r = review(env, &[], Some(&sub));
            let e = r.status.unwrap_or_default().explanation;
            let predicted = |c: &Cluster| {
                e.clusters
                    .iter()
                    .find(|v| v.cluster == key(c))
                    .and_then(|v| v.predicted.clone())
            };
            match (predicted(busy), predicted(free)) {
                (Some(a), Some(b)) if a == [Some(4)] && b == [Some(16)] => Ok(e),
                other => Err(format!("predicted {other:?}")),
            }
        },
    )
    .await;
    let split = |binding: &[String], replicas: &[i32], c: &Cluster| {
        binding
            .iter()
            .position(|b| *b == key(c))
            .and_then(|i| replicas.get(i).copied())
    };
    let shares = &explained.replicas[&feed_key];
    // 6 x 4/20 and 6 x 16/20
    assert_eq!(split(&explained.binding_clusters, shares, busy), Some(1));
    assert_eq!(split(&explained.binding_clusters, shares, free), Some(5));
    let (ok, table, err) = placement(env, &[], Some(&sub));
    assert!(ok, "{err}");
    let row = |c: &Cluster| {
        table
            .lines()
            .find(|l| l.starts_with(&key(c)))
            .unwrap_or_else(|| panic!("no row for {} in:\n{table}", key(c)))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // CLUSTER SCORE PREDICTED VERDICT...
    assert_eq!(row(busy)[2], "4", "{table}");
    assert_eq!(row(free)[2], "16", "{table}");

    let api = create(&parent, &sub).await;
    let st = status_when(&api, "dynamic", |s| {
        s.replicas
            .get(&feed_key)
            .is_some_and(|r| r.iter().sum::<i32>() == 6)
    })
    .await;
    assert_eq!(st.binding_clusters, explained.binding_clusters);
    assert_eq!(st.replicas[&feed_key], *shares);
    let decided = st.last_decision.expect("the kept decision");
    let predicted: Vec<(String, Option<i32>)> = decided
        .selected
        .iter()
        .map(|s| (s.cluster.clone(), s.predicted.get(&feed_key).copied()))
        .collect();
    let mut want = vec![(key(busy), Some(4)), (key(free), Some(16))];
    want.sort();
    assert_eq!(predicted, want);
    let (ok, table, err) = placement(env, &["subscription", "dynamic", "-n", &ns.name], None);
    assert!(ok, "{err}");
    assert!(
        table.contains(&format!("selected {}", key(busy)))
            && table.contains(&format!("predicted 4 of {feed_key}")),
        "{table}"
    );
}

#[tokio::test]
async fn static_dividing_explains_the_split_and_overrides_name_the_field_they_set() {
    let env = TestEnv::get();
    env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 2], "Pull", &["tier=gold", "tier=silver"]).await;
    let (gold, silver) = (&clusters[0], &clusters[1]);
    let appns = format!("split-{id}");
    create_manifests(&parent, &[deployment(&appns, 10)]).await;
    let feed =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": appns, "name": "web"});
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "placement").await;
    let sub = subscription(
        "split",
        &ns.name,
        json!({
        "schedulingStrategy": "Dividing",
        "dividingScheduling": {"type": "Static"},
        "subscribers": [
            {"clusterAffinity": {"matchLabels": {"e2e": id, "tier": "gold"}}, "weight": 3},
            {"clusterAffinity": {"matchLabels": {"e2e": id, "tier": "silver"}}, "weight": 2}],
        "feeds": [feed]}),
    );
    let r = review(env, &[], Some(&sub));
    let feed_key = format!("apps/v1/Deployment/{appns}/web");
    let replicas_of = |v: Verdict| match v {
        Verdict::Selected { replicas } => replicas.get(&feed_key).copied(),
        other => panic!("not selected: {other:?}"),
    };
    assert_eq!(replicas_of(verdict(&r, gold)), Some(6));
    assert_eq!(replicas_of(verdict(&r, silver)), Some(4));
    let explained = r.status.clone().unwrap_or_default().explanation;

    // a Globalization at 400 and, for gold only, a Localization at 700 on the same field: gold
    // gets 700, named; silver 400 (both are overridden by nothing else: a Static split's own
    // priority-1000 replicas win over both)
    let globalizations: Api<clusternet::apis::Globalization> = Api::all(parent.clone());
    let gname = format!("replicas-{id}");
    globalizations
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Globalization",
                "metadata": {"name": gname},
                "spec": {"priority": 400, "feed": feed, "overrides": [{"name": "four-hundred", "type": "MergePatch",
                    "value": "{\"metadata\":{\"labels\":{\"size\":\"400\"}}}"}]}}))
            .expect("a Globalization"),
        )
        .await
        .expect("creating the Globalization");
    let localizations: Api<clusternet::apis::Localization> =
        Api::namespaced(parent.clone(), &gold.dedicated);
    localizations
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
                "metadata": {"name": "gold-size"},
                "spec": {"priority": 700, "feed": feed, "overrides": [{"name": "seven-hundred", "type": "MergePatch",
                    "value": "{\"metadata\":{\"labels\":{\"size\":\"700\"}}}"}]}}))
            .expect("a Localization"),
        )
        .await
        .expect("creating the Localization");
    let r = review(env, &["--show-objects"], Some(&sub));
    let objects = r.status.clone().unwrap_or_default().objects;
    let rendered = |c: &Cluster| {
        objects
            .iter()
            .find(|o| o.cluster == key(c))
            .and_then(|o| o.objects.first().cloned())
            .unwrap_or_else(|| panic!("no objects for {}: {objects:?}", key(c)))
    };
    let g = rendered(gold);
    let obj = g.object.clone().expect("gold's object");
    assert_eq!(obj["metadata"]["labels"]["size"], "700");
    assert_eq!(obj["spec"]["replicas"], 6);
    let size = g
        .changes
        .iter()
        .find(|c| c.path == "/metadata/labels/size")
        .expect("the size label is attributed");
    assert_eq!(
        (
            size.source.kind.as_str(),
            size.source.name.as_str(),
            size.source.priority
        ),
        ("Localization", "gold-size", 700)
    );
    let s = rendered(silver);
    assert_eq!(
        s.object.expect("silver's object")["metadata"]["labels"]["size"],
        "400"
    );
    let (ok, diff, err) = placement(env, &["--diff"], Some(&sub));
    assert!(ok, "{err}");
    for want in [
        "/metadata/labels/size: (unset) -> \"700\"   Localization",
        &format!(
            "{}/gold-size (priority 700, rule \"seven-hundred\", MergePatch)",
            gold.dedicated
        ),
        "/spec/replicas: 10 -> 6",
        "/spec/replicas: 10 -> 4",
        &format!("Globalization {gname} (priority 400"),
    ] {
        assert!(diff.contains(want), "{want:?} missing from:\n{diff}");
    }

    // applied: the split and gold's object are what the what-if said
    let api = create(&parent, &sub).await;
    let st = status_when(&api, "split", |s| !s.replicas.is_empty()).await;
    assert_eq!(st.binding_clusters, explained.binding_clusters);
    assert_eq!(st.replicas, explained.replicas);
    let descriptions: Api<Description> = Api::namespaced(parent.clone(), &gold.dedicated);
    let deployed = wait_for("gold's Description", Duration::from_secs(40), || async {
        let list = descriptions
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .iter()
            .flat_map(|d| d.spec.raw.iter())
            .filter_map(|raw| serde_json::from_slice::<Value>(&raw.0).ok())
            .find(|o| {
                o["metadata"]["namespace"] == appns.as_str()
                    && o["spec"]["replicas"] == 6
                    && o["metadata"]["labels"]["size"] == "700"
            })
            .ok_or_else(|| "not rendered yet".to_string())
    })
    .await;
    assert_eq!(
        deployed, obj,
        "the Description carries what the what-if rendered"
    );

    // a whole file reviewed before any of it is applied: a new Deployment, a Localization for
    // gold and the Subscription; the file's Localization wins over the parent's (higher
    // priority) and nothing of the file is created
    let docs = [
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": appns},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                        "template": {"metadata": {"labels": {"app": "api"}},
                                     "spec": {"containers": [{"name": "api", "image": "nginx:1.27"}]}}}}),
        json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
               "metadata": {"name": "file-size", "namespace": gold.dedicated},
               "spec": {"priority": 800, "feed": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": appns, "name": "api"},
                        "overrides": [{"name": "eight-hundred", "type": "MergePatch",
                                       "value": "{\"metadata\":{\"labels\":{\"size\":\"800\"}}}"}]}}),
        subscription(
            "from-file",
            &ns.name,
            json!({
            "subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id, "tier": "gold"}}}],
            "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": appns, "name": "api"}]}),
        ),
    ];
    let text: String = docs
        .iter()
        .map(|d| format!("---\n{}", serde_yaml::to_string(d).expect("yaml")))
        .collect();
    let out = env.plugin_with_stdin(&["placement", "-f", "-", "--diff"], Some(&text));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    for want in [
        format!("bound to {}", key(gold)),
        format!("Deployment {appns}/api"),
        format!(
            "/metadata/labels/size: (unset) -> \"800\"   Localization {}/file-size (priority 800",
            gold.dedicated
        ),
    ] {
        assert!(stdout.contains(&want), "{want:?} missing from:\n{stdout}");
    }
    let manifests: Api<clusternet::apis::Manifest> =
        Api::namespaced(parent.clone(), "clusternet-reserved");
    assert!(
        manifests
            .get_opt(&format!("deployments.{appns}.api"))
            .await
            .expect("reading")
            .is_none()
            && localizations
                .get_opt("file-size")
                .await
                .expect("reading")
                .is_none(),
        "a what-if creates nothing"
    );
    let _ = globalizations.delete(&gname, &Default::default()).await;
}

#[tokio::test]
async fn a_user_who_cannot_read_managedclusters_gets_403() {
    let env = TestEnv::get();
    env.with_hub();
    let parent = env.parent().await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "placement").await;
    let user = format!("what-if-{}", uid());
    // may create reviews in the namespace, may not read ManagedClusters
    let rbac = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "reviews", "namespace": ns.name},
               "rules": [{"apiGroups": ["placement.clusternet.io"], "resources": ["placementreviews"], "verbs": ["create"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "reviews", "namespace": ns.name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reviews"},
               "subjects": [{"kind": "User", "name": user}]}),
    ];
    for obj in &rbac {
        env.kubectl_apply(obj);
    }
    let sub = subscription(
        "app",
        &ns.name,
        json!({
        "subscribers": [{"clusterAffinity": {}}],
        "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns.name, "name": "x"}]}),
    );
    let as_user = format!("--as={user}");
    let (ok, out, err) = placement(env, &[&as_user], Some(&sub));
    assert!(!ok, "no explanation without rights: {out}");
    assert!(out.is_empty(), "nothing explained: {out}");
    assert!(
        err.contains("Forbidden") && err.contains("managedclusters"),
        "{err}"
    );
    // without even the review's own right
    let (ok, _, err) = placement(env, &["--as=nobody-at-all"], Some(&sub));
    assert!(!ok);
    assert!(
        err.contains("Forbidden") && err.contains("placementreviews"),
        "{err}"
    );
}

#[tokio::test]
async fn mistakes_get_clear_errors() {
    let env = TestEnv::get();
    env.with_hub();
    let parent = env.parent().await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "placement").await;
    let (ok, _, err) = placement(env, &["subscription", "missing", "-n", &ns.name], None);
    assert!(!ok);
    assert!(
        err.contains("NotFound") && err.contains("\"missing\""),
        "{err}"
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    let (ok, _, err) = placement(env, &[], Some(&cm));
    assert!(!ok);
    assert!(err.contains("no Subscription in -"), "{err}");
    // a feed that does not exist is the Dividing explanation's error, not a failure
    let sub = subscription(
        "divided",
        &ns.name,
        json!({
        "schedulingStrategy": "Dividing", "dividingScheduling": {"type": "Static"},
        "subscribers": [{"clusterAffinity": {"matchLabels": {"nobody": "here"}}, "weight": 1}],
        "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns.name, "name": "absent"}]}),
    );
    let r = review(env, &[], Some(&sub));
    let error = r
        .status
        .unwrap_or_default()
        .explanation
        .error
        .unwrap_or_default();
    assert!(error.contains("absent"), "{error}");
}
