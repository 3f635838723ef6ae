//! The standards other tools read (docs/spec/deployer.md §17), checked by their consumers on real
//! control planes: a parent and two children.
//!
//! kstatus (sigs.k8s.io/cli-utils, what Flux's health checks run, built by tests/env/k8s-bin.sh)
//! judges a Subscription: `Current` once both children run its Deployment available,
//! `InProgress` while a change is on its way, `Failed` when a child's Deployment cannot become
//! available (its pods stay Pending: the test environment's kwok never makes that image's pods
//! ready, and the Deployment passes its progress deadline); `kubectl wait --for=condition=Ready` returns when, and only when, the
//! children run it.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clusternet::apis::{Description, Subscription};
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::{TestEnv, TestNamespace, register, uid, wait_for};

/// The controller of this binary: with the alpha gate PlacementDecision on (the tests of one
/// binary share one controller, started by the first).
const GATES: &[&str] = &["--feature-gates=PlacementDecision=true"];

fn deployment_yaml(ns: &str, image: &str, node_selector: Option<&str>) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n{}",
        support::web_deployment_yaml(ns, image, node_selector, 1, Some(10))
    )
}

/// Runs `bin args` with `input` on stdin; its stdout, trimmed (it must succeed).
fn pipe(bin: &Path, args: &[&str], input: &[u8]) -> String {
    use std::io::Write;
    let mut run = Command::new(bin)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    run.stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("writing stdin");
    let out = run.wait_with_output().expect("waiting");
    assert!(
        out.status.success(),
        "{}: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

struct Kstatus {
    bin: PathBuf,
    lua: PathBuf,
    kubectl: PathBuf,
    kubeconfig: PathBuf,
}

impl Kstatus {
    fn new(env: &TestEnv) -> Kstatus {
        Kstatus {
            bin: env.bin("kstatus"),
            lua: env.bin("luahealth"),
            kubectl: env.bin("kubectl"),
            kubeconfig: env.parent_kubeconfig(),
        }
    }

    /// The object as JSON, read live with kubectl.
    fn live(&self, resource: &str, ns: &str, name: &str) -> Vec<u8> {
        let got = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["get", resource, name, "-n", ns, "-o", "json"])
            .output()
            .expect("kubectl get");
        assert!(
            got.status.success(),
            "kubectl get: {}",
            String::from_utf8_lossy(&got.stderr)
        );
        got.stdout
    }

    /// kstatus's status and message of an object's JSON.
    fn kstatus_of(&self, json: &[u8]) -> (String, String) {
        let line = pipe(&self.bin, &[], json);
        let mut parts = line.splitn(3, ' ');
        let _ = parts.next();
        (
            parts.next().unwrap_or_default().to_string(),
            parts.next().unwrap_or_default().to_string(),
        )
    }

    /// kstatus's status and message of the Subscription, read live with kubectl, and what Argo
    /// CD's health script says of the same JSON (which must agree: Current is Healthy,
    /// InProgress Progressing or Suspended, Failed Degraded, with the same message).
    fn of(&self, ns: &str, name: &str) -> (String, String) {
        let json = self.live("subscriptions.apps.clusternet.io", ns, name);
        let line = pipe(&self.bin, &[], &json);
        // "Subscription/<name> <status> <message>"
        let mut parts = line.splitn(3, ' ');
        let _ = parts.next();
        let (status, message) = (
            parts.next().unwrap_or_default().to_string(),
            parts.next().unwrap_or_default().to_string(),
        );
        let (argo, argo_message) = self.argo_of("apps.clusternet.io/Subscription", &json);
        // before the aggregator's first status write (milliseconds) kstatus, which reads an object
        // without status or conditions as Current, and the script (Progressing) cannot agree
        let written = serde_json::from_slice::<serde_json::Value>(&json)
            .ok()
            .is_some_and(|v| v["status"]["conditions"].is_array());
        let agree = !written
            || matches!(
                (status.as_str(), argo.as_str()),
                ("Current", "Healthy")
                    | ("InProgress", "Progressing" | "Suspended")
                    | ("Failed", "Degraded")
            );
        assert!(
            agree,
            "kstatus says {status} ({message}), Argo CD's script {argo} ({argo_message})"
        );
        (status, message)
    }

    fn argo_of(&self, script: &str, json: &[u8]) -> (String, String) {
        let path = repo(&format!(
            "deploy/argocd/resource_customizations/{script}/health.lua"
        ));
        let line = pipe(&self.lua, &["run", &path.to_string_lossy()], json);
        let (status, message) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        (status.to_string(), message.to_string())
    }

    /// What Argo CD's health script for `group/Kind` (deploy/argocd) says of a live object.
    fn argo(&self, script: &str, resource: &str, ns: &str, name: &str) -> (String, String) {
        self.argo_of(script, &self.live(resource, ns, name))
    }

    /// Waits until kstatus says `want`, returning its message.
    async fn wait(&self, ns: &str, want: &str, within: Duration) -> String {
        wait_for(&format!("kstatus {want}"), within, || async {
            let (status, message) = self.of(ns, "app");
            if status == want {
                Ok(message)
            } else {
                Err(format!("{status}: {message}"))
            }
        })
        .await
    }

    /// `kubectl wait --for=condition=Ready subscription/app` in the background; the moment it
    /// returns, whether every child runs `image` available (None: it did not return success).
    fn kubectl_wait(
        &self,
        ns: &str,
        timeout: &str,
        children: &[kube::Client],
        appns: &str,
        image: &str,
    ) -> tokio::task::JoinHandle<Option<bool>> {
        let mut cmd = tokio::process::Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args([
                "wait",
                "--for=condition=Ready",
                "subscriptions.apps.clusternet.io/app",
                "-n",
                ns,
                &format!("--timeout={timeout}"),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let (children, appns, image) = (children.to_vec(), appns.to_string(), image.to_string());
        tokio::spawn(async move {
            let ok = cmd.status().await.map(|s| s.success()).unwrap_or(false);
            if !ok {
                return None;
            }
            Some(available_everywhere(&children, &appns, &image).await)
        })
    }
}

/// Whether every child runs the Deployment with this image, available.
async fn available_everywhere(children: &[kube::Client], ns: &str, image: &str) -> bool {
    for c in children {
        let d = match Api::<Deployment>::namespaced(c.clone(), ns)
            .get_opt("web")
            .await
        {
            Ok(Some(d)) => d,
            _ => return false,
        };
        let spec_image = d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        let st = d.status.unwrap_or_default();
        let current = st.observed_generation == d.metadata.generation
            && st.updated_replicas == Some(1)
            && st.available_replicas == Some(1)
            && st.replicas == Some(1);
        if spec_image != image || !current {
            return false;
        }
    }
    true
}

#[tokio::test]
async fn kstatus_and_kubectl_wait_see_the_fleet_as_it_is() {
    let env = TestEnv::get();
    env.with_hub();
    env.with_controller_args(GATES);
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 2], "Push", &[]).await;
    let children: Vec<kube::Client> = clusters.iter().map(|c| c.child.clone()).collect();
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "kstatus").await;
    let appns = format!("ks-{id}");
    let apply = |image: &str, node_selector: Option<&str>| {
        let out = env.plugin_with_stdin(
            &["apply", "-f", "-"],
            Some(&deployment_yaml(&appns, image, node_selector)),
        );
        assert!(
            out.status.success(),
            "kubectl clusternet apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ks = Kstatus::new(env);
    apply("nginx:1.26", None);
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
        "metadata": {"name": "app"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
                 "feeds": [{"apiVersion": "v1", "kind": "Namespace", "name": appns},
                           {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                            "namespace": appns}]}
    }))
    .expect("a Subscription");
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    subs.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");

    // kubectl wait, started now, returns once both children run it available, not before
    let waiting = ks.kubectl_wait(&ns.name, "120s", &children, &appns, "nginx:1.26");
    ks.wait(&ns.name, "Current", Duration::from_secs(120)).await;
    let w = waiting.await.expect("kubectl wait");
    assert_eq!(
        w,
        Some(true),
        "kubectl wait --for=condition=Ready returned (Some) before both children ran it available, or failed (None)"
    );
    let s = subs.get("app").await.expect("the Subscription");
    let st = s.status.expect("a status");
    assert_eq!(st.observed_generation, s.metadata.generation);
    let ready = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    assert_eq!(
        (ready.status.as_str(), ready.observed_generation),
        ("True", s.metadata.generation)
    );
    assert!(
        st.conditions.iter().any(|c| c.type_ == "FeedsResolved"),
        "the aggregator's other condition stays beside Ready"
    );
    // Argo CD's scripts on the objects under it: every Description and ManagedCluster Healthy
    let uid = s.metadata.uid.clone().unwrap_or_default();
    let argo_of_descriptions = || async {
        let list = Api::<Description>::all(parent.clone())
            .list(&ListParams::default().labels(&format!("apps.clusternet.io/subs.uid={uid}")))
            .await
            .expect("listing Descriptions");
        assert_eq!(list.items.len(), 2, "a Description per child");
        list.items
            .iter()
            .map(|d| {
                let (ns, name) = (d.namespace().unwrap_or_default(), d.name_any());
                // one read for both judges: kstatus reads the Description's own Ready/Stalled,
                // and agrees with Argo CD's script
                let json = ks.live("descriptions.apps.clusternet.io", &ns, &name);
                let argo = ks.argo_of("apps.clusternet.io/Description", &json);
                let (kstatus, said) = ks.kstatus_of(&json);
                let agree = matches!(
                    (kstatus.as_str(), argo.0.as_str()),
                    ("Current", "Healthy") | ("InProgress", "Progressing") | ("Failed", "Degraded")
                );
                assert!(
                    agree,
                    "Description {ns}/{name}: kstatus {kstatus} ({said}), Argo CD {argo:?}"
                );
                argo
            })
            .collect::<Vec<_>>()
    };
    for (status, message) in argo_of_descriptions().await {
        assert_eq!(status, "Healthy", "{message}");
    }
    // kstatus on the Bases under it (Ready from their Descriptions, written a moment after
    // theirs)
    let bases_say = || async {
        let list = Api::<clusternet::apis::Base>::all(parent.clone())
            .list(&ListParams::default().labels(&format!("apps.clusternet.io/subs.uid={uid}")))
            .await
            .expect("listing Bases");
        assert_eq!(list.items.len(), 2, "a Base per child");
        list.items
            .iter()
            .map(|b| {
                let json = ks.live(
                    "bases.apps.clusternet.io",
                    &b.namespace().unwrap_or_default(),
                    &b.name_any(),
                );
                ks.kstatus_of(&json)
            })
            .collect::<Vec<_>>()
    };
    wait_for(
        "kstatus Current on both Bases",
        Duration::from_secs(30),
        || async {
            let said = bases_say().await;
            if said.iter().all(|(s, _)| s == "Current") {
                Ok(())
            } else {
                Err(format!("{said:?}"))
            }
        },
    )
    .await;
    // a RolloutStrategy is Ready when its stages can be read, Stalled saying why when not
    let strategies: Api<clusternet::apis::RolloutStrategy> =
        Api::namespaced(parent.clone(), &ns.name);
    for (name, stage) in [
        ("good", json!({"name": "one", "minSuccessTime": "10s"})),
        (
            "bad",
            json!({"name": "one", "minSuccessTime": "ten seconds"}),
        ),
    ] {
        strategies
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "RolloutStrategy",
                    "metadata": {"name": name}, "spec": {"stages": [stage]}}))
                .expect("a RolloutStrategy"),
            )
            .await
            .expect("creating a RolloutStrategy");
    }
    let waited = Command::new(env.bin("kubectl"))
        .arg("--kubeconfig")
        .arg(env.parent_kubeconfig())
        .args([
            "wait",
            "--for=condition=Ready",
            "rolloutstrategies.apps.clusternet.io/good",
            "-n",
            &ns.name,
            "--timeout=30s",
        ])
        .output()
        .expect("kubectl wait");
    assert!(
        waited.status.success(),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    let bad = wait_for(
        "kstatus Failed on the bad strategy",
        Duration::from_secs(30),
        || async {
            let json = ks.live("rolloutstrategies.apps.clusternet.io", &ns.name, "bad");
            match ks.kstatus_of(&json) {
                (s, m) if s == "Failed" => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(bad.contains("minSuccessTime"), "{bad}");
    for c in &clusters {
        let (status, message) = ks.argo(
            "clusters.clusternet.io/ManagedCluster",
            "managedclusters.clusters.clusternet.io",
            &c.dedicated,
            &c.name,
        );
        assert_eq!(status, "Healthy", "{message}");
    }

    // a change whose pods never become ready (a kwok stage leaves the image's pods Pending):
    // InProgress while it is on its way, Failed once the children's Deployments pass their 10 s
    // progress deadline
    let t0 = Instant::now();
    apply(support::NEVER_READY_IMAGE, None);
    let seen = ks
        .wait(&ns.name, "InProgress", Duration::from_secs(60))
        .await;
    let message = ks.wait(&ns.name, "Failed", Duration::from_secs(120)).await;
    assert!(
        message.contains("cluster") && message.contains("progress deadline exceeded"),
        "the failure says where and why: {message} (in progress was: {seen})"
    );
    assert!(
        t0.elapsed() >= Duration::from_secs(10),
        "failed before the progress deadline"
    );
    wait_for(
        "kstatus Failed on a Base",
        Duration::from_secs(30),
        || async {
            let said = bases_say().await;
            if said
                .iter()
                .any(|(s, m)| s == "Failed" && m.contains("progress deadline exceeded"))
            {
                Ok(())
            } else {
                Err(format!("{said:?}"))
            }
        },
    )
    .await;
    let degraded: Vec<(String, String)> = argo_of_descriptions()
        .await
        .into_iter()
        .filter(|(s, _)| s == "Degraded")
        .collect();
    assert!(
        degraded
            .iter()
            .any(|(_, m)| m.contains("progress deadline exceeded")),
        "Argo CD sees the failed Description: {degraded:?}"
    );
    // not Ready, so kubectl wait gives up
    let gave_up = ks
        .kubectl_wait(&ns.name, "5s", &children, &appns, "nginx:1.27")
        .await
        .expect("kubectl wait");
    assert_eq!(
        gave_up, None,
        "kubectl wait said Ready while the children's Deployments failed"
    );

    // mended: Current again, kubectl wait returns
    apply("nginx:1.27", None);
    let waiting = ks.kubectl_wait(&ns.name, "120s", &children, &appns, "nginx:1.27");
    ks.wait(&ns.name, "Current", Duration::from_secs(120)).await;
    assert_eq!(
        waiting.await.expect("kubectl wait"),
        Some(true),
        "kubectl wait after the mend"
    );

    // a feed that does not exist: Failed (Stalled), saying which
    let mut bad = subs.get("app").await.expect("the Subscription");
    bad.spec.feeds.push(
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "name": "missing", "namespace": appns}))
        .expect("a feed"),
    );
    subs.replace("app", &PostParams::default(), &bad)
        .await
        .expect("adding a missing feed");
    let message = ks.wait(&ns.name, "Failed", Duration::from_secs(60)).await;
    assert!(message.contains("missing"), "{message}");
}

/// Argo CD's health scripts (deploy/argocd, in the layout of Argo CD's own resource_customizations)
/// pass their health_test.yaml cases when gopher-lua runs them in Argo CD's sandbox, and the
/// argocd-cm patch carries each script verbatim.
#[test]
fn argo_cd_health_scripts_pass_their_own_cases() {
    let base = repo("deploy/argocd/resource_customizations");
    let out = Command::new(support::cached_bin("luahealth"))
        .arg("test")
        .arg(&base)
        .output()
        .expect("luahealth");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let patch: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo("deploy/argocd/argocd-cm-patch.yaml")).expect("the patch"),
    )
    .expect("YAML");
    let data = patch["data"].as_object().expect("data");
    let mut kinds = 0;
    for group in std::fs::read_dir(&base).expect("groups") {
        let group = group.expect("a group").path();
        for kind in std::fs::read_dir(&group).expect("kinds") {
            let kind = kind.expect("a kind").path();
            let key = format!(
                "resource.customizations.health.{}_{}",
                group.file_name().unwrap_or_default().to_string_lossy(),
                kind.file_name().unwrap_or_default().to_string_lossy()
            );
            let script = std::fs::read_to_string(kind.join("health.lua")).expect("health.lua");
            assert_eq!(
                data.get(&key).and_then(|v| v.as_str()),
                Some(script.as_str()),
                "{key} in argocd-cm-patch.yaml is not {}/health.lua",
                kind.display()
            );
            kinds += 1;
        }
    }
    assert_eq!(data.len(), kinds, "the patch has a script no directory has");
    assert!(
        said.contains("Healthy") && said.contains("Progressing") && said.contains("Degraded"),
        "{said}"
    );
}

/// One ClusterProfile per ManagedCluster (KEP-4322), in the namespace of the ClusterSet, with
/// what the KEP names (cluster manager, version, the cluster's ID as `cluster.clusterset.k8s.io`,
/// ControlPlaneHealthy), kept immutable where the KEP says so, and gone with its cluster.
#[tokio::test]
async fn cluster_profiles_follow_the_fleet() {
    use clusternet::apis::ManagedCluster;
    use clusternet::apis::inventory::ClusterProfile;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::DeleteParams;

    let env = TestEnv::get();
    env.with_hub();
    env.with_controller_args(GATES);
    let parent = env.parent().await;
    let id = uid();
    let mut clusters = register(env, &id, &[1, 2], "Pull", &[]).await;
    let profiles: Api<ClusterProfile> = Api::namespaced(parent.clone(), "clusternet-system");
    let mut ids = Vec::new();
    for c in &clusters {
        let cluster_id = support::cluster_id(&parent, c).await;
        let p = wait_for(
            &format!("the ClusterProfile of {}", c.name),
            Duration::from_secs(60),
            || async {
                let p = profiles
                    .get_opt(&c.name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("not there yet")?;
                let healthy = p.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "ControlPlaneHealthy" && c.status == "True")
                });
                if healthy {
                    Ok(p)
                } else {
                    Err(format!("{:?}", p.status))
                }
            },
        )
        .await;
        assert_eq!(p.spec.cluster_manager.name, "clusternet");
        assert_eq!(p.spec.display_name, c.name);
        assert_eq!(
            p.labels()
                .get("x-k8s.io/cluster-manager")
                .map(String::as_str),
            Some("clusternet")
        );
        let st = p.status.expect("a status");
        // its agent's Ready speaks for its generation, as kstatus expects of a condition (the
        // parent may change the spec's taints just before: the next heartbeat catches up)
        let mc = wait_for(
            "Ready's observedGeneration on the ManagedCluster",
            Duration::from_secs(30),
            || async {
                let mc = Api::<ManagedCluster>::namespaced(parent.clone(), &c.dedicated)
                    .get(&c.name)
                    .await
                    .map_err(|e| e.to_string())?;
                let ready_generation = mc
                    .status
                    .as_ref()
                    .and_then(|s| s.condition("Ready"))
                    .and_then(|c| c.observed_generation);
                if ready_generation.is_some() && ready_generation == mc.metadata.generation {
                    Ok(mc)
                } else {
                    Err(format!(
                        "{ready_generation:?} of {:?}",
                        mc.metadata.generation
                    ))
                }
            },
        )
        .await;
        let version = mc.status.map(|s| s.k8s_version).unwrap_or_default();
        assert!(version.starts_with("v1."), "{version}");
        assert_eq!(st.version.kubernetes, version);
        let prop = |name: &str| {
            st.properties
                .iter()
                .find(|p| p.name == name)
                .map(|p| p.value.clone())
        };
        assert_eq!(prop("cluster.clusterset.k8s.io"), Some(cluster_id.clone()));
        assert_eq!(prop("clusterset.k8s.io").as_deref(), Some("clusternet"));
        assert_eq!(prop("clusternet.io/sync-mode").as_deref(), Some("Pull"));
        assert!(
            prop("resources.clusternet.io/allocatable-cpu").is_some(),
            "{:?}",
            st.properties
        );
        assert!(
            st.conditions
                .iter()
                .any(|c| c.type_ == "Joined" && c.status == "True")
        );
        ids.push(cluster_id);
    }
    let ns = Api::<Namespace>::all(parent.clone())
        .get("clusternet-system")
        .await
        .expect("the namespace");
    assert_eq!(
        ns.labels()
            .get("multicluster.x-k8s.io/clusterset")
            .map(String::as_str),
        Some("clusternet"),
        "the KEP's ClusterSet label on the profiles' namespace"
    );
    // the KEP's rule: the cluster manager cannot change
    let refused = Command::new(env.bin("kubectl"))
        .arg("--kubeconfig")
        .arg(env.parent_kubeconfig())
        .args([
            "patch",
            "clusterprofiles.multicluster.x-k8s.io",
            &clusters[0].name,
            "-n",
            "clusternet-system",
            "--type=merge",
            "-p",
            r#"{"spec":{"clusterManager":{"name":"someone-else"}}}"#,
        ])
        .output()
        .expect("kubectl patch");
    assert!(
        !refused.status.success()
            && String::from_utf8_lossy(&refused.stderr).contains("ClusterManager is immutable"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // a consumer with nothing but a profile and a parent identity of its own reaches each child
    for (i, c) in clusters.iter().enumerate() {
        reach_through_the_access_provider(env, &profiles, &c.name, i + 1).await;
    }

    // deregistered: its profile goes, the other stays
    clusters[0].kill_agent();
    Api::<ManagedCluster>::namespaced(parent.clone(), &clusters[0].dedicated)
        .delete(&clusters[0].name, &DeleteParams::default())
        .await
        .expect("deleting the ManagedCluster");
    wait_for(
        "the deregistered cluster's ClusterProfile to go",
        Duration::from_secs(60),
        || async {
            match profiles.get_opt(&clusters[0].name).await {
                Ok(None) => Ok(()),
                Ok(Some(_)) => Err("still there".to_string()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    let other = profiles
        .get(&clusters[1].name)
        .await
        .expect("the other cluster's ClusterProfile stays");
    assert_eq!(
        other.labels().get("clusters.clusternet.io/cluster-id"),
        Some(&ids[1])
    );
}

/// What a ClusterProfile consumer does (KEP-5339, as the SIG's `credentials` library does): its
/// provider file maps access provider `clusternet` to `kubectl clusternet credentials`; the
/// kubeconfig is built from nothing but the profile's access provider (server, CA data, the
/// exec-plugin extension) and that exec config. The consumer is a parent ServiceAccount: the
/// child refuses it by name until the child's RBAC grants it, then kubectl lists the child's
/// `kube-system` through the hub and the agent's tunnel.
async fn reach_through_the_access_provider(
    env: &TestEnv,
    profiles: &Api<clusternet::apis::inventory::ClusterProfile>,
    profile: &str,
    child: usize,
) {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;

    let parent = env.parent().await;
    let consumers = TestNamespace::create(&parent, &env.parent_kubeconfig(), "consumer").await;
    let user = format!("system:serviceaccount:{}:multikueue", consumers.name);
    let sas: Api<ServiceAccount> = Api::namespaced(parent.clone(), &consumers.name);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "multikueue"}})).expect("SA"),
    )
    .await
    .expect("creating the consumer's ServiceAccount");
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).expect("request");
    let token = sas
        .create_token_request("multikueue", &PostParams::default(), &request)
        .await
        .expect("a token")
        .status
        .and_then(|s| s.token)
        .expect("a token in the status");
    let dir = tempfile::tempdir().expect("a directory");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).expect("writing the token");

    let p = wait_for(
        &format!("the access provider of {profile}"),
        Duration::from_secs(30),
        || async {
            let p = profiles.get(profile).await.map_err(|e| e.to_string())?;
            p.status
                .and_then(|s| {
                    s.access_providers
                        .into_iter()
                        .find(|a| a.name == "clusternet")
                })
                .ok_or_else(|| "no access provider yet".to_string())
        },
    )
    .await;
    assert!(
        p.cluster
            .server
            .contains("/apis/proxies.clusternet.io/v1alpha1/sockets/")
            && p.cluster.certificate_authority_data.is_some(),
        "{p:?}"
    );
    // the consumer's provider file (the SIG's format) and the kubeconfig built from the two
    let providers = json!({"providers": [{"name": "clusternet", "execConfig": {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": support::clusternet_bin(),
        "args": ["kubectl-clusternet", "credentials", "--token-file", token_file],
        "provideClusterInfo": true, "interactiveMode": "Never"}}]});
    let exec = providers["providers"][0]["execConfig"].clone();
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": profile, "cluster": p.cluster}],
        "users": [{"name": "consumer", "user": {"exec": exec}}],
        "contexts": [{"name": profile, "context": {"cluster": profile, "user": "consumer"}}],
        "current-context": profile,
    });
    let kubeconfig_file = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig_file, kubeconfig.to_string()).expect("writing the kubeconfig");
    let kubectl = |args: &[&str]| {
        Command::new(env.bin("kubectl"))
            .arg("--kubeconfig")
            .arg(&kubeconfig_file)
            .args(args)
            // nothing of the test's own configuration may help
            .env_remove("KUBECONFIG")
            .output()
            .expect("kubectl")
    };

    let refused = kubectl(&["get", "namespace", "kube-system", "-o", "name"]);
    let said = String::from_utf8_lossy(&refused.stderr).to_string();
    assert!(
        !refused.status.success() && said.contains("forbidden") && said.contains(&user),
        "the child decides, for the consumer's own name: {said}"
    );
    let child_client = env.child(child).await;
    let binding = format!("consumer-{}", consumers.name);
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(&());
    Api::<kube::core::DynamicObject>::all_with(child_client.clone(), &ar)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": binding},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
            }))
            .expect("ClusterRoleBinding"),
        )
        .await
        .expect("granting the consumer in the child");
    let listed = wait_for(
        &format!("kubectl through {profile}'s access provider"),
        Duration::from_secs(30),
        || async {
            let out = kubectl(&["get", "namespace", "kube-system", "-o", "name"]);
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).to_string())
            }
        },
    )
    .await;
    assert_eq!(listed, "namespace/kube-system");
    let _ = Api::<kube::core::DynamicObject>::all_with(child_client, &ar)
        .delete(&binding, &Default::default())
        .await;
}

/// A PlacementDecision per Subscription (KEP-5313, gate PlacementDecision, on in this binary's
/// controller) names exactly its bound clusters by their ClusterProfiles: after it is created,
/// re-scheduled (its selector changed) and failed over (a cluster's agent lost).
#[tokio::test]
async fn a_placement_decision_lists_exactly_the_bound_clusters() {
    use clusternet::apis::inventory::PlacementDecision;

    let env = TestEnv::get();
    env.with_hub();
    env.with_controller_args(GATES);
    let parent = env.parent().await;
    let id = uid();
    let mut clusters = register(env, &id, &[1, 2], "Push", &["pick=a", "pick=b"]).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "decision").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let decisions: Api<PlacementDecision> = Api::namespaced(parent.clone(), &ns.name);
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
        "metadata": {"name": "app"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
                 "feeds": [{"apiVersion": "v1", "kind": "Namespace", "name": format!("pd-{id}")}]}
    }))
    .expect("a Subscription");
    let created = subs
        .create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    // the decision names what status.bindingClusters names, by ClusterProfile
    let decided = |want: Vec<String>| {
        let (subs, decisions) = (subs.clone(), decisions.clone());
        async move {
            wait_for(
                &format!("a PlacementDecision of {want:?}"),
                Duration::from_secs(150),
                || async {
                    let bound: Vec<String> = subs
                        .get("app")
                        .await
                        .map_err(|e| e.to_string())?
                        .status
                        .map(|s| s.binding_clusters)
                        .unwrap_or_default()
                        .iter()
                        .map(|b| b.split_once('/').map(|(_, n)| n).unwrap_or(b).to_string())
                        .collect();
                    let d = decisions
                        .get_opt("app")
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or("no PlacementDecision yet")?;
                    let named: Vec<String> = d
                        .spec
                        .decisions
                        .iter()
                        .map(|c| c.cluster_profile_ref.name.clone())
                        .collect();
                    let in_profiles_ns = d
                        .spec
                        .decisions
                        .iter()
                        .all(|c| c.cluster_profile_ref.namespace == "clusternet-system");
                    // in bindingClusters' order (sorted by namespace/name), the wanted set
                    let mut set = named.clone();
                    set.sort();
                    if named == bound && set == want && in_profiles_ns {
                        Ok(d)
                    } else {
                        Err(format!("decision {named:?}, bound {bound:?}"))
                    }
                },
            )
            .await
        }
    };
    let mut both: Vec<String> = clusters.iter().map(|c| c.name.clone()).collect();
    both.sort();
    let d = decided(both.clone()).await;
    assert_eq!(
        d.labels().get("multicluster.x-k8s.io/decision-key"),
        created.metadata.uid.as_ref()
    );
    assert_eq!(
        d.owner_references().first().map(|o| o.uid.clone()),
        created.metadata.uid,
        "owned by its Subscription"
    );

    // re-scheduled: only the cluster labelled pick=a
    let mut narrowed = subs.get("app").await.expect("the Subscription");
    narrowed.spec.subscribers[0].cluster_affinity =
        serde_json::from_value(json!({"matchLabels": {"e2e": id, "pick": "a"}}))
            .expect("a selector");
    subs.replace("app", &PostParams::default(), &narrowed)
        .await
        .expect("narrowing the Subscription");
    decided(vec![clusters[0].name.clone()]).await;

    // back to both, then the second cluster's agent is lost: it fails over
    let mut widened = subs.get("app").await.expect("the Subscription");
    widened.spec.subscribers[0].cluster_affinity =
        serde_json::from_value(json!({"matchLabels": {"e2e": id}})).expect("a selector");
    subs.replace("app", &PostParams::default(), &widened)
        .await
        .expect("widening the Subscription");
    decided(both).await;
    clusters[1].kill_agent();
    decided(vec![clusters[0].name.clone()]).await;
}

/// The agent names its cluster in the child with the About API (KEP-2149): ClusterProperty
/// `cluster.clusterset.k8s.io` = the cluster's ID (the one its ClusterProfile carries) and
/// `clusterset.k8s.io`, served as v1alpha1 and v1beta1; a value someone else set is left alone.
/// Child 3 is this test's alone in this binary.
#[tokio::test]
async fn the_agent_names_its_cluster_with_cluster_properties() {
    use clusternet::apis::about::ClusterProperty;
    use clusternet::apis::inventory::ClusterProfile;
    use kube::api::DeleteParams;

    let env = TestEnv::get();
    env.with_hub();
    env.with_controller_args(GATES);
    support::install_mcs_crds(env, 3);
    let child = env.child(3).await;
    let props: Api<ClusterProperty> = Api::all(child.clone());
    for name in ["cluster.clusterset.k8s.io", "clusterset.k8s.io"] {
        // left by earlier agents of this child
        let _ = props.delete(name, &DeleteParams::default()).await;
    }
    // a property of another tool in the child: the parent's profile carries it too
    let id = uid();
    let zone = json!({"apiVersion": "about.k8s.io/v1beta1", "kind": "ClusterProperty",
        "metadata": {"name": "zone.clusternet.test"}, "spec": {"value": format!("zone-{id}")}});
    props
        .patch(
            "zone.clusternet.test",
            &kube::api::PatchParams::apply("e2e-other-tool").force(),
            &kube::api::Patch::Apply(&zone),
        )
        .await
        .expect("another tool's property");
    let parent = env.parent().await;
    let mut clusters = register(env, &id, &[3], "Pull", &[]).await;
    let cluster_id = support::cluster_id(&parent, &clusters[0]).await;
    let value = |name: &'static str| {
        let props = props.clone();
        async move {
            props
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .map(|p| p.spec.value)
        }
    };
    wait_for(
        "the agent's ClusterProperties",
        Duration::from_secs(60),
        || async {
            let (id_now, set_now) = (
                value("cluster.clusterset.k8s.io").await,
                value("clusterset.k8s.io").await,
            );
            if id_now.as_deref() == Some(cluster_id.as_str())
                && set_now.as_deref() == Some("clusternet")
            {
                Ok(())
            } else {
                Err(format!("{id_now:?} {set_now:?}"))
            }
        },
    )
    .await;
    // as v1alpha1 too, the version the mcs-api implementations read
    let alpha = Command::new(env.bin("kubectl"))
        .arg("--kubeconfig")
        .arg(env.child_kubeconfig(3))
        .args([
            "get",
            "clusterproperties.v1alpha1.about.k8s.io",
            "cluster.clusterset.k8s.io",
            "-o",
            "jsonpath={.spec.value}",
        ])
        .output()
        .expect("kubectl get");
    assert_eq!(String::from_utf8_lossy(&alpha.stdout), cluster_id);
    // the parent's ClusterProfile says the same, and carries the child's other properties
    let zone_value = format!("zone-{id}");
    let profile = wait_for("the ClusterProfile", Duration::from_secs(90), || async {
        let p = Api::<ClusterProfile>::namespaced(parent.clone(), "clusternet-system")
            .get_opt(&clusters[0].name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "not yet".to_string())?;
        let has_zone = p
            .status
            .iter()
            .flat_map(|s| s.properties.iter())
            .any(|p| p.name == "zone.clusternet.test" && p.value == zone_value);
        if has_zone {
            Ok(p)
        } else {
            Err(format!("no zone.clusternet.test yet: {:?}", p.status))
        }
    })
    .await;
    assert!(
        profile
            .status
            .iter()
            .flat_map(|s| s.properties.iter())
            .any(|p| p.name == "cluster.clusterset.k8s.io" && p.value == cluster_id),
        "{:?}",
        profile.status
    );

    // someone else's value stays, and the agent says so
    let theirs = json!({"apiVersion": "about.k8s.io/v1beta1", "kind": "ClusterProperty",
        "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": "someone-else"}});
    props
        .patch(
            "cluster.clusterset.k8s.io",
            &kube::api::PatchParams::apply("e2e-other-tool").force(),
            &kube::api::Patch::Apply(&theirs),
        )
        .await
        .expect("another tool's value");
    clusters[0].start_agent();
    wait_for(
        "the agent to say it left it",
        Duration::from_secs(60),
        || async {
            let log = clusters[0].agent.log_text();
            if log.contains("already says \\\"someone-else\\\"")
                || log.contains("already says \"someone-else\"")
            {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        },
    )
    .await;
    assert_eq!(
        value("cluster.clusterset.k8s.io").await.as_deref(),
        Some("someone-else")
    );
}
