//! The dashboard in a real browser against real control planes: `kubectl clusternet dashboard`
//! serves the hub's pages on 127.0.0.1 with the user's kubeconfig, and headless Chromium (Debian's
//! `chromium-headless-shell`; `CLUSTERNET_CHROMIUM` names another) renders them. Screenshots of
//! each page are saved under `target/test-artifacts/`.

mod support;

use std::process::Command;
use std::time::Duration;

use clusternet::apis::{HelmChart, Subscription};
use kube::api::{Api, PostParams};
use serde_json::json;
use support::browser::{Dashboard, LivePage, dom, reqwest_like_get, screenshot};
use support::{TestEnv, TestNamespace, create_manifests, register, uid, wait_for};

/// Two Pull children with a Subscription deployed to both: the Clusters page shows both Ready
/// with their capacity and tunnel, the Subscriptions page shows it bound to both with their
/// ready counts; the local server's root leads to the Clusters page.
#[tokio::test]
async fn the_pages_show_the_fleet_and_its_subscriptions() {
    let env = TestEnv::get();
    env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 2], "Pull", &[]).await;
    let appns = format!("dash-{id}");
    create_manifests(
        &parent,
        &[json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hello", "namespace": appns},
                 "data": {"greeting": "hi"}}),
          json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns}})],
    )
    .await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "dashboard").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    subs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "hello", "namespace": ns.name},
            "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
                     "feeds": [{"apiVersion": "v1", "kind": "Namespace", "name": appns},
                               {"apiVersion": "v1", "kind": "ConfigMap", "namespace": appns, "name": "hello"}]}}))
        .expect("a Subscription"),
    )
    .await
    .expect("creating the Subscription");
    wait_for(
        "the Subscription available in both children",
        Duration::from_secs(60),
        || async {
            let s = subs.get("hello").await.map_err(|e| e.to_string())?;
            let st = s.status.unwrap_or_default();
            let all = st.aggregated_statuses.len() == 2
                && st.aggregated_statuses.iter().all(|a| {
                    a.feed_status_details.len() == 2
                        && a.feed_status_details
                            .iter()
                            .all(|d| d.feed_status.available)
                });
            if all {
                Ok(())
            } else {
                Err(format!("{:?}", st.aggregated_statuses))
            }
        },
    )
    .await;

    // a HelmChart whose repository does not answer: the controller's check fails it
    let charts: Api<HelmChart> = Api::namespaced(parent.clone(), &ns.name);
    charts
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                "metadata": {"name": format!("nowhere-{id}"), "namespace": ns.name},
                "spec": {"repo": "http://127.0.0.1:1/charts", "chart": "hello", "version": "0.1.0",
                         "targetNamespace": appns}}),
            )
            .expect("a HelmChart"),
        )
        .await
        .expect("creating the HelmChart");
    let chart_phase = wait_for("the HelmChart checked", Duration::from_secs(60), || async {
        let c = charts
            .get(&format!("nowhere-{id}"))
            .await
            .map_err(|e| e.to_string())?;
        c.status
            .and_then(|s| s.phase)
            .map(|p| p.to_string())
            .ok_or_else(|| "no phase yet".to_string())
    })
    .await;

    let dash = Dashboard::start(env, &[]);
    // the parent holds many clusters from other tests: the filter picks this test's
    let filtered = format!("clusters?q=e2e%3D{id}");
    let page = dom(&dash.page(&filtered));
    assert!(page.contains("2 of "), "the filter's summary: {page}");
    for c in &clusters {
        let row = format!(
            "data-cluster=\"{}/{}\" class=\"ready\"",
            c.dedicated, c.name
        );
        assert!(
            page.contains(&row),
            "{row} missing from the Clusters page:\n{page}"
        );
    }
    for want in [
        "<td class=\"state\">Ready</td>",
        "allocatable of",
        "Pull",
        "<meter",
    ] {
        assert!(
            page.contains(want),
            "{want:?} missing from the Clusters page:\n{page}"
        );
    }
    // the root of the local server is the Clusters page, and the page's own links stay on the
    // local server (the stylesheet loads through it too)
    assert!(dom(&format!("{}/", dash.url)).contains("<h1>Clusters</h1>"));
    assert!(
        page.contains("<a href=\"subscriptions\">Subscriptions</a>")
            && page.contains("href=\"assets/dashboard.css\""),
        "links are relative: {page}"
    );
    let css = reqwest_like_get(&dash.page("assets/dashboard.css"));
    assert!(css.contains("font:"), "the stylesheet: {css}");
    // no script, no framing, through the aggregator and the local server alike
    let raw = reqwest_like_get(&dash.page("clusters")).to_lowercase();
    for header in [
        "content-security-policy: default-src 'none'; style-src 'self'",
        "x-frame-options: deny",
        "x-content-type-options: nosniff",
    ] {
        assert!(raw.contains(header), "{header} missing: {raw}");
    }
    // the one script is the hub's own file, nothing inline (the aggregator re-serialises the
    // HTML it proxies, `defer` comes back as `defer=""`)
    assert_eq!(raw.matches("<script").count(), 1, "{raw}");
    assert!(raw.contains("<script src=\"assets/dashboard.js\""), "{raw}");
    let js = reqwest_like_get(&dash.page("assets/dashboard.js"));
    assert!(js.contains("new EventSource(\"events\")"), "{js}");
    let page = dom(&dash.page(&format!("subscriptions?q={}", ns.name)));
    let row = format!("data-subscription=\"{}/hello\"", ns.name);
    assert!(page.contains(&row), "{row} missing:\n{page}");
    for c in &clusters {
        let bound = format!(
            "<div class=\"bound ready\" data-cluster=\"{}/{}\">",
            c.dedicated, c.name
        );
        assert!(page.contains(&bound), "{bound} missing:\n{page}");
    }
    assert!(page.contains("2/2 ready"), "{page}");
    screenshot(&dash.page(&filtered), "dashboard-clusters.png");
    screenshot(
        &dash.page(&format!("subscriptions?q={}", ns.name)),
        "dashboard-subscriptions.png",
    );

    // a cluster's page: what is deployed there, object by object, and its events
    let c = &clusters[0];
    let cluster_page = format!("cluster?namespace={}&name={}", c.dedicated, c.name);
    let page = dom(&dash.page(&cluster_page));
    for want in [
        format!("<h1>Cluster {}</h1>", c.name),
        "Deployed here".to_string(),
        format!("ConfigMap {appns}/hello: <span class=\"status\">applied</span>"),
        format!("{}/hello", ns.name),
        "Recent events".to_string(),
    ] {
        assert!(
            page.contains(&want),
            "{want:?} missing from {cluster_page}:\n{page}"
        );
    }
    screenshot(&dash.page(&cluster_page), "dashboard-cluster.png");

    // a Subscription's page: its Bases and Descriptions per cluster, the kept decision, events
    let sub_page = format!("subscription?namespace={}&name=hello", ns.name);
    let page = dom(&dash.page(&sub_page));
    for want in [
        "<h1>Subscription hello</h1>".to_string(),
        "Bases and Descriptions per cluster".to_string(),
        clusters[0].name.clone(),
        clusters[1].name.clone(),
        "Explain its placement now".to_string(),
        "BaseCreated".to_string(),
    ] {
        assert!(
            page.contains(&want),
            "{want:?} missing from {sub_page}:\n{page}"
        );
    }
    assert!(
        !page.contains("has kept no decision"),
        "the scheduler's kept decision is shown: {page}"
    );
    screenshot(&dash.page(&sub_page), "dashboard-subscription.png");
    // the what-if run now: the same table `kubectl clusternet placement subscription` prints,
    // on a page that stays as it is (no live refresh re-running it)
    let page = dom(&dash.page(&format!("{sub_page}&explain=1")));
    assert!(page.contains("Scheduled now:"), "{page}");
    assert!(page.contains("data-kinds=\"\""), "{page}");
    for c in &clusters {
        assert!(
            page.contains(&c.name),
            "{} missing from the what-if: {page}",
            c.name
        );
    }
    // pages that ask for what does not exist say so
    let missing = reqwest_like_get(&dash.page("subscription?namespace=nowhere&name=nothing"));
    assert!(
        missing.contains(" 404 ") && missing.contains("There is no"),
        "{missing}"
    );

    // the other lists: registration requests, Manifests, HelmCharts with their phase
    let page = dom(&dash.page(&format!("registrations?q=e2e%3D{id}")));
    for c in &clusters {
        assert!(
            page.contains(&format!("{}/{}</a>", c.dedicated, c.name)),
            "{}'s request links to its ManagedCluster: {page}",
            c.name
        );
    }
    assert!(page.contains("Approved"), "{page}");
    let page = dom(&dash.page(&format!("manifests?q={appns}")));
    assert!(
        page.contains(&format!("ConfigMap {appns}/hello")) && page.contains("1 Subscription"),
        "{page}"
    );
    let page = dom(&dash.page(&format!("helmcharts?q=nowhere-{id}")));
    assert!(
        page.contains(&format!("data-helmchart=\"{}/nowhere-{id}\"", ns.name))
            && page.contains(&chart_phase),
        "the HelmChart with its phase {chart_phase}: {page}"
    );
}

/// An open Clusters page follows the fleet: the agent of a child stops, and its row turns
/// not ready in the page that stays loaded (the same document: no reload), fed by the hub's
/// server-sent events.
#[tokio::test]
async fn an_open_page_follows_the_fleet_without_a_reload() {
    let env = TestEnv::get();
    env.with_hub();
    env.with_controller();
    let id = uid();
    let mut clusters = support::register_with(
        env,
        &id,
        &[2],
        "Pull",
        &[],
        &["--cluster-status-update-frequency=2s"],
    )
    .await;
    let c = &mut clusters[0];
    let dash = Dashboard::start(env, &[]);
    let mut page = LivePage::open_live(&dash.page(&format!("clusters?q=e2e%3D{id}"))).await;
    let row = format!(
        "document.querySelector('tr[data-cluster=\"{}/{}\"]')?.className ?? 'missing'",
        c.dedicated, c.name
    );
    page.wait_until(
        "the cluster to show ready",
        &row,
        json!("ready"),
        Duration::from_secs(30),
    )
    .await;
    // a mark only this document carries: a reload would lose it
    assert_eq!(page.eval("window.clusternetTestMark = 42").await, json!(42));
    c.agent.kill();
    page.wait_until(
        "the row to turn not ready",
        &row,
        json!("not-ready"),
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(
        page.eval("window.clusternetTestMark").await,
        json!(42),
        "the page was updated in place, not reloaded"
    );
    let state = format!(
        "document.querySelector('tr[data-cluster=\"{}/{}\"] td.state')?.textContent",
        c.dedicated, c.name
    );
    let text = page.eval(&state).await;
    assert!(
        text.as_str().is_some_and(|t| t.starts_with("NotReady")),
        "the state cell: {text}"
    );
}

/// A user who may open the pages but not list ManagedClusters sees a clear message and none
/// of them; one who may not open the pages gets the parent's own refusal.
#[tokio::test]
async fn a_user_without_rights_sees_a_message_not_the_data() {
    let env = TestEnv::get();
    env.with_hub();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[3], "Pull", &[]).await;
    let user = format!("dash-viewer-{id}");
    let rbac = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": format!("pages-{id}")},
               "rules": [{"apiGroups": ["dashboard.clusternet.io"], "resources": ["pages"], "verbs": ["get"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": format!("pages-{id}")},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("pages-{id}")},
               "subjects": [{"kind": "User", "name": user}]}),
    ];
    for obj in &rbac {
        env.kubectl_apply(obj);
    }
    let as_user = format!("--as={user}");
    let dash = Dashboard::start(env, &[&as_user]);
    let page = wait_for("the RBAC to apply", Duration::from_secs(20), || async {
        let page = dom(&dash.page("clusters"));
        if page.contains("class=\"denied\"") {
            Ok(page)
        } else {
            Err(page)
        }
    })
    .await;
    assert!(
        page.contains("may not see this page") && page.contains("managedclusters"),
        "{page}"
    );
    assert!(!page.contains("data-cluster="), "no cluster shown: {page}");
    assert!(
        !page.contains(&clusters[0].dedicated),
        "nothing of the fleet: {page}"
    );
    screenshot(&dash.page("clusters"), "dashboard-denied.png");

    // without the pages' own right, the parent refuses before the hub is asked
    let nobody = Dashboard::start(env, &["--as=nobody-at-all"]);
    let page = dom(&nobody.page("clusters"));
    assert!(
        page.contains("Forbidden") || page.contains("forbidden"),
        "{page}"
    );
    assert!(!page.contains("data-cluster="), "{page}");

    let cleanup = |kind: &str| {
        let _ = Command::new(env.bin("kubectl"))
            .arg("--kubeconfig")
            .arg(env.parent_kubeconfig())
            .args(["delete", kind, &format!("pages-{id}"), "--ignore-not-found"])
            .output();
    };
    cleanup("clusterrolebinding");
    cleanup("clusterrole");
    let _ = parent;
}
