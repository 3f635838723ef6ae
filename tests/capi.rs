//! Cluster API discovery (#17, docs/spec/agent.md §7) against real control planes: child2 plays
//! the Cluster API management cluster (Cluster API's own CRDs from the sigs.k8s.io/cluster-api
//! module), the controller watches its Clusters with `--cluster-api-kubeconfig`, and the bundle it
//! writes for a provisioned Cluster is applied to child3 as Cluster API's ClusterResourceSet
//! controller would; the agent it describes, started with the bundle's arguments and its own
//! ServiceAccount, registers child3 and turns Ready.

mod support;

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use support::{Clusternet, TestEnv, uid, wait_for};

const MANAGEMENT: usize = 2;
const WORKLOAD: usize = 3;

fn kubectl(env: &TestEnv, i: usize, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut cmd = Command::new(env.bin("kubectl"));
    cmd.arg("--kubeconfig")
        .arg(env.child_kubeconfig(i))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(std::process::Stdio::piped());
    }
    let mut child = cmd.spawn().expect("kubectl");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("kubectl stdin")
            .write_all(text.as_bytes())
            .expect("writing to kubectl");
    }
    let out = child.wait_with_output().expect("kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn capi(kind: &str, plural: &str) -> ApiResource {
    let group = if kind == "Cluster" {
        "cluster.x-k8s.io"
    } else {
        "addons.cluster.x-k8s.io"
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1beta1", kind), plural)
}

async fn create_cluster(mgmt: &kube::Client, ns: &str, name: &str, phase: Option<&str>) {
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(mgmt.clone(), ns, &capi("Cluster", "clusters"));
    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {}
    }))
    .expect("a Cluster");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("creating a Cluster");
    if let Some(phase) = phase {
        set_phase(mgmt, ns, name, phase).await;
    }
}

async fn set_phase(mgmt: &kube::Client, ns: &str, name: &str, phase: &str) {
    Api::<DynamicObject>::namespaced_with(mgmt.clone(), ns, &capi("Cluster", "clusters"))
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .expect("setting the Cluster's phase");
}

async fn bundle_in(mgmt: &kube::Client, ns: &str) -> Option<(String, String, DynamicObject)> {
    let cms: Api<ConfigMap> = Api::namespaced(mgmt.clone(), ns);
    let data = |cm: Option<ConfigMap>, key: &str| {
        cm.and_then(|c| c.data).and_then(|d| d.get(key).cloned())
    };
    let deploy = data(
        cms.get_opt("clusternet-agent-deploy").await.ok()?,
        "clusternet-agent-deploy",
    )?;
    let rbac = data(
        cms.get_opt("clusternet-agent-rbac").await.ok()?,
        "clusternet-agent-rbac",
    )?;
    let crs = Api::<DynamicObject>::namespaced_with(
        mgmt.clone(),
        ns,
        &capi("ClusterResourceSet", "clusterresourcesets"),
    )
    .get_opt("clusternet-cluster-api")
    .await
    .ok()??;
    Some((deploy, rbac, crs))
}

#[tokio::test]
async fn provisioned_clusters_get_the_agent_bundle_and_it_registers_a_child() {
    let env = TestEnv::get();
    // Cluster API's CRDs into the management cluster, before the controller looks for them
    let crds = env.bin("capi-crds");
    kubectl(
        env,
        MANAGEMENT,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &crds.display().to_string(),
        ],
        None,
    );
    for crd in [
        "clusters.cluster.x-k8s.io",
        "clusterresourcesets.addons.cluster.x-k8s.io",
    ] {
        kubectl(
            env,
            MANAGEMENT,
            &[
                "wait",
                "--for=condition=Established",
                &format!("crd/{crd}"),
                "--timeout=60s",
            ],
            None,
        );
    }
    let mgmt_kubeconfig = env.child_kubeconfig(MANAGEMENT);
    let controller = env.with_controller_args(&[&format!(
        "--cluster-api-kubeconfig={}",
        mgmt_kubeconfig.display()
    )]);
    let mgmt = env.child(MANAGEMENT).await;
    let parent = env.parent().await;
    let id = uid();
    let (ready_ns, later_ns) = (format!("capi-{id}"), format!("capi-{id}-later"));
    for ns in [&ready_ns, &later_ns] {
        support::ensure_namespace(&mgmt, ns).await;
    }
    // the settings Secret may already exist from an earlier run: start without it
    support::ensure_namespace(&mgmt, "capi-system").await;
    let secrets: Api<Secret> = Api::namespaced(mgmt.clone(), "capi-system");
    let _ = secrets
        .delete("clusternet-cluster-api", &Default::default())
        .await;
    create_cluster(&mgmt, &ready_ns, "workload", Some("Provisioned")).await;
    create_cluster(&mgmt, &later_ns, "pending", Some("Provisioning")).await;

    // without the settings Secret: said plainly in the log, nothing written, no crash
    wait_for(
        "the controller naming the missing settings Secret",
        Duration::from_secs(60),
        || async {
            let log = std::fs::read_to_string(&controller.log).unwrap_or_default();
            if log.contains("capi-system/clusternet-cluster-api") && log.contains("does not exist")
            {
                Ok(())
            } else {
                Err("not said yet".to_string())
            }
        },
    )
    .await;
    assert!(bundle_in(&mgmt, &ready_ns).await.is_none());

    let reg_token = env.bootstrap_token();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "clusternet-cluster-api", "namespace": "capi-system"},
        "stringData": {"image": "clusternet:test", "parentURL": env.parent_url(),
            "regToken": reg_token}
    }))
    .expect("a Secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating the settings Secret");
    let (deploy, rbac, crs) = wait_for(
        "the bundle of the provisioned Cluster",
        Duration::from_secs(60),
        || async {
            bundle_in(&mgmt, &ready_ns)
                .await
                .ok_or("not yet".to_string())
        },
    )
    .await;
    assert_eq!(
        crs.labels()
            .get("clusternet.io/created-by")
            .map(String::as_str),
        Some("clusternet-controller-manager")
    );
    assert_eq!(
        crs.data["spec"]["clusterSelector"]["matchExpressions"][0],
        json!({"key": "cluster.x-k8s.io/cluster-name", "operator": "Exists"})
    );
    assert_eq!(
        crs.data["spec"]["resources"],
        json!([{"kind": "ConfigMap", "name": "clusternet-agent-deploy"},
            {"kind": "ConfigMap", "name": "clusternet-agent-rbac"}])
    );
    // the unprovisioned Cluster's namespace stays empty until its phase changes
    assert!(bundle_in(&mgmt, &later_ns).await.is_none());
    set_phase(&mgmt, &later_ns, "pending", "Provisioned").await;
    wait_for(
        "the bundle once the Cluster is provisioned",
        Duration::from_secs(60),
        || async {
            bundle_in(&mgmt, &later_ns)
                .await
                .map(|_| ())
                .ok_or("not yet".to_string())
        },
    )
    .await;

    // what Cluster API's ClusterResourceSet controller does: apply both ConfigMaps' content
    // (in the ClusterResourceSet's order)
    kubectl(env, WORKLOAD, &["apply", "-f", "-"], Some(&deploy));
    kubectl(env, WORKLOAD, &["apply", "-f", "-"], Some(&rbac));
    let objects: Vec<Value> = serde_yaml::Deserializer::from_str(&deploy)
        .filter_map(|d| serde::Deserialize::deserialize(d).ok())
        .collect();
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the agent Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "clusternet:test");
    // the agent as its Deployment would run it: its ServiceAccount's token, its arguments with
    // the environment the pod would get
    let token = kubectl(
        env,
        WORKLOAD,
        &[
            "create",
            "token",
            "clusternet-agent",
            "-n",
            "clusternet-system",
            "--duration=1h",
        ],
        None,
    );
    let mut kubeconfig: Value = serde_yaml::from_str(
        &std::fs::read_to_string(env.child_kubeconfig(WORKLOAD)).expect("child3's kubeconfig"),
    )
    .expect("a kubeconfig");
    kubeconfig["users"][0]["user"] = json!({"token": token.trim()});
    let dir = tempfile::tempdir().expect("a directory");
    let agent_kubeconfig = dir.path().join("agent.kubeconfig");
    std::fs::write(
        &agent_kubeconfig,
        serde_yaml::to_string(&kubeconfig).expect("YAML"),
    )
    .expect("writing the agent's kubeconfig");
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .map(|a| {
            a.replace("$(REG_TOKEN)", &reg_token)
                .replace("$(PARENT_URL)", &env.parent_url())
                .replace("$(AGENT_NAMESPACE)", "clusternet-system")
        })
        // the predictor's port is shared by every process on this host
        .map(|a| {
            if a.starts_with("--predictor-port=") {
                "--predictor-port=0".into()
            } else {
                a
            }
        })
        .chain([
            format!("--kubeconfig={}", agent_kubeconfig.display()),
            "--leader-elect-lease-duration=4s".into(),
            "--leader-elect-renew-deadline=3s".into(),
            "--leader-elect-retry-period=500ms".into(),
        ])
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = Clusternet::start("agent-capi", &args);
    let workload = env.child(WORKLOAD).await;
    let cluster_id = wait_for(
        "the agent's Lease in child3",
        Duration::from_secs(60),
        || async {
            Api::<Lease>::namespaced(workload.clone(), "clusternet-system")
                .get_opt("clusternet-agent")
                .await
                .map_err(|e| e.to_string())?
                .and_then(|l| l.uid())
                .ok_or("no Lease yet".to_string())
        },
    )
    .await;
    // child3 registered through the bundle and Ready
    let mc = support::wait_cluster_ready(
        &parent,
        &format!("clusters.clusternet.io/cluster-id={cluster_id}"),
        Duration::from_secs(90),
    )
    .await;
    let ns = mc.namespace().unwrap_or_default();
    // the bundle's app-deployer token reached the parent (Dual mode deploys from there)
    wait_for(
        "the child-cluster-deployer credentials in the parent",
        Duration::from_secs(60),
        || async {
            Api::<Secret>::namespaced(parent.clone(), &ns)
                .get_opt("child-cluster-deployer")
                .await
                .map_err(|e| e.to_string())?
                .map(|_| ())
                .ok_or("not yet".to_string())
        },
    )
    .await;
    drop(agent);
}
