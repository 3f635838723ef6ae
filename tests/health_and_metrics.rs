//! `/readyz` turns 200 only once the shared informer cache has synced, and `/metrics` shows
//! process and per-subsystem metrics.

mod support;

use std::time::Duration;

use support::{Clusternet, TestEnv, wait_for};

#[tokio::test]
async fn readyz_waits_for_the_informer_cache_and_metrics_show_subsystems() {
    let env = TestEnv::get();
    env.with_controller(); // installs the CRDs the scheduler's caches watch
    let dir = tempfile::tempdir().expect("temp dir");

    // An API server that never answers: the caches cannot sync, so the process is not ready.
    let unreachable = dir.path().join("unreachable.kubeconfig");
    std::fs::write(
        &unreachable,
        "apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n\
         users: [{name: x, user: {token: x}}]\ncontexts: [{name: x, context: {cluster: x, user: x}}]\ncurrent-context: x\n",
    )
    .expect("writing a kubeconfig");
    let stuck = Clusternet::start(
        "readyz-unreachable",
        &[
            "--role=scheduler",
            &format!("--kubeconfig={}", unreachable.display()),
        ],
    );
    let (status, body) = wait_for("the health port", Duration::from_secs(10), || {
        stuck.get("/readyz?verbose")
    })
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("[-] informer-sync:apps.clusternet.io/v1alpha1/Subscription"),
        "{body}"
    );
    let (status, _) = stuck.get("/healthz").await.expect("healthz");
    assert_eq!(status, 200, "alive even when not ready");

    let ns = format!(
        "metrics-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    let ok = Clusternet::start(
        "readyz-parent",
        &[
            "--role=scheduler",
            &format!("--kubeconfig={}", env.parent_kubeconfig().display()),
            &format!("--leader-elect-resource-namespace={ns}"),
        ],
    );
    let body = wait_for("/readyz to answer 200", Duration::from_secs(20), || async {
        match ok.get("/readyz?verbose").await? {
            (200, body) => Ok(body),
            (code, body) => Err(format!("{code}: {body}")),
        }
    })
    .await;
    for kind in ["Subscription", "ManagedCluster", "FeedInventory"] {
        assert!(
            body.lines()
                .any(|l| l.starts_with("[+] informer-sync:") && l.ends_with(&format!("/{kind}"))),
            "{body}"
        );
    }
    assert!(body.contains("[+] role:scheduler"), "{body}");

    let metrics = wait_for("leader metrics", Duration::from_secs(20), || async {
        let (_, m) = ok.get("/metrics").await?;
        if m.contains("clusternet_leader_election_is_leader{role=\"scheduler\"} 1") {
            Ok(m)
        } else {
            Err(m)
        }
    })
    .await;
    for needle in [
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "clusternet_role_running{role=\"scheduler\"} 1",
        "clusternet_cache_objects{kind=\"apps.clusternet.io/v1alpha1/Subscription\"}",
    ] {
        assert!(
            metrics.contains(needle),
            "/metrics lacks {needle}:\n{metrics}"
        );
    }
    // the namespace the Lease was created in
    let _ = std::process::Command::new(env.bin("kubectl"))
        .arg("--kubeconfig")
        .arg(env.parent_kubeconfig())
        .args(["delete", "namespace", &ns, "--wait=false"])
        .output();
}

#[tokio::test]
async fn reconcilers_report_controller_runtime_metrics() {
    use kube::api::{Api, DeleteParams, PostParams};
    let env = TestEnv::get();
    env.install_crds();
    let parent = env.parent().await;
    let ns = support::TestNamespace::create(&parent, &env.parent_kubeconfig(), "crmetrics").await;
    // the only controller of this test binary: its own Lease namespace
    let controller = Clusternet::start(
        "controller-metrics",
        &[
            "--role=controller",
            &format!("--kubeconfig={}", env.parent_kubeconfig().display()),
            &format!("--leader-elect-resource-namespace={}", ns.name),
        ],
    );
    let subs: Api<clusternet::apis::Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let sub = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": "counted"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"nobody": "here"}}}],
                 "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "x", "name": "y"}]}}))
    .expect("a Subscription");
    subs.create(&PostParams::default(), &sub)
        .await
        .expect("creating a Subscription");
    let value = |m: &str, prefix: &str| {
        m.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let metrics = wait_for("controller-runtime series", Duration::from_secs(30), || async {
        let (_, m) = controller.get("/metrics").await?;
        let done = value(
            &m,
            "controller_runtime_reconcile_total{controller=\"subscription\",result=\"success\"}",
        );
        let added = value(&m, "workqueue_adds_total{name=\"subscription\"}");
        if done.is_some_and(|v| v >= 1.0) && added.is_some_and(|v| v >= 1.0) {
            Ok(m)
        } else {
            Err(m)
        }
    })
    .await;
    for needle in [
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"subscription\"",
        "controller_runtime_active_workers{controller=\"subscription\"}",
        "controller_runtime_max_concurrent_reconciles{controller=\"subscription\"} 8",
        "workqueue_depth{name=\"subscription\"}",
        "workqueue_queue_duration_seconds_bucket{name=\"subscription\"",
        "workqueue_work_duration_seconds_bucket{name=\"subscription\"",
        "rest_client_requests_total{code=\"200\",method=\"GET\"",
    ] {
        assert!(
            metrics.contains(needle),
            "/metrics lacks {needle}:\n{metrics}"
        );
    }
    let _ = subs.delete("counted", &DeleteParams::default()).await;
    // its finalizer is the controller's to release: wait before the controller stops
    wait_for("the Subscription gone", Duration::from_secs(30), || async {
        match subs.get_opt("counted").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
}
