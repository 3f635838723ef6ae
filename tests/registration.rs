//! Children join the parent (docs/spec/registration.md, status.md) with real agents against real
//! child API servers and the controller role against the real parent.

mod support;

use std::time::{Duration, Instant};

use clusternet::apis::{ClusterRegistrationRequest, ManagedCluster};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use support::{Clusternet, TestEnv, TestNamespace, agent_args, wait_for};

/// The Ready ManagedCluster of a cluster ID, or why not yet.
async fn ready_cluster(parent: &kube::Client, id: &str) -> Result<ManagedCluster, String> {
    let all: Api<ManagedCluster> = Api::all(parent.clone());
    let list = all
        .list(&ListParams::default().labels(&format!("clusters.clusternet.io/cluster-id={id}")))
        .await
        .map_err(|e| e.to_string())?;
    let mc = list
        .items
        .into_iter()
        .next()
        .ok_or("no ManagedCluster yet")?;
    let status = mc.status.clone().unwrap_or_default();
    match status.condition("Ready") {
        Some(c) if c.status == "True" && !status.k8s_version.is_empty() => Ok(mc),
        other => Err(format!(
            "Ready condition {other:?}, k8sVersion {:?}",
            status.k8s_version
        )),
    }
}

/// The cluster ID an agent uses: the UID of its Lease in the child.
async fn cluster_id(child: &kube::Client, ns: &str) -> Result<String, String> {
    let lease = Api::<Lease>::namespaced(child.clone(), ns)
        .get("clusternet-agent")
        .await
        .map_err(|e| e.to_string())?;
    lease.uid().ok_or_else(|| "lease without uid".into())
}

fn cpu_and_memory(mc: &ManagedCluster) -> (String, String) {
    let cap = mc.status.clone().unwrap_or_default().capacity;
    (
        cap.get("cpu").map(|q| q.0.clone()).unwrap_or_default(),
        cap.get("memory").map(|q| q.0.clone()).unwrap_or_default(),
    )
}

#[tokio::test]
async fn three_agents_register_and_become_ready_within_10s() {
    let env = TestEnv::get();
    assert!(
        env.children >= 3,
        "this test needs 3 children, the environment has {}",
        env.children
    );
    env.with_controller();
    let parent = env.parent().await;
    let mut agents = Vec::new();
    let mut namespaces = Vec::new();
    let mut children = Vec::new();
    for i in 1..=3 {
        let child = env.child(i).await;
        let ns = TestNamespace::create(&child, &env.child_kubeconfig(i), "agent").await;
        let name = format!("three-{i}-{}", &ns.name[6..]);
        let args = agent_args(
            env,
            i,
            &ns.name,
            &name,
            &["--cluster-labels=env=test,tier=gold"],
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = Instant::now();
        agents.push((
            Clusternet::start(&format!("agent-child{i}"), &args),
            started,
        ));
        namespaces.push(ns);
        children.push(child);
    }
    let mut dedicated = std::collections::BTreeSet::new();
    for (i, ((agent, started), ns)) in agents.iter().zip(&namespaces).enumerate() {
        let id = wait_for("the agent's Lease", Duration::from_secs(10), || {
            cluster_id(&children[i], &ns.name)
        })
        .await;
        let mc = wait_for(
            &format!("a Ready ManagedCluster for child{}", i + 1),
            Duration::from_secs(10),
            || ready_cluster(&parent, &id),
        )
        .await;
        assert!(
            started.elapsed() <= Duration::from_secs(12),
            "child{} took {:?}",
            i + 1,
            started.elapsed()
        );
        // capacity matches the fake nodes env-up made: 2 nodes x (8 cpu, 32Gi)
        assert_eq!(
            cpu_and_memory(&mc),
            ("16".to_string(), "64Gi".to_string()),
            "{:?}",
            mc.status
        );
        let labels = mc.labels();
        assert_eq!(labels.get("clusters.clusternet.io/cluster-id"), Some(&id));
        assert_eq!(
            labels.get("env").map(String::as_str),
            Some("test"),
            "--cluster-labels reach the ManagedCluster"
        );
        assert_eq!(
            mc.status
                .clone()
                .unwrap_or_default()
                .node_statistics
                .ready_nodes,
            2
        );
        dedicated.insert(mc.namespace().unwrap_or_default());
        assert!(
            agent.log_text().contains("registered with the parent"),
            "{}",
            agent.log_text()
        );
    }
    assert_eq!(
        dedicated.len(),
        3,
        "three distinct dedicated namespaces: {dedicated:?}"
    );
    for ns in &dedicated {
        assert!(ns.starts_with("clusternet-"), "{ns}");
    }
}

#[tokio::test]
async fn a_restarted_agent_keeps_its_cluster_id_request_and_namespace() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let child = env.child(1).await;
    let ns = TestNamespace::create(&child, &env.child_kubeconfig(1), "restart").await;
    let args = agent_args(env, 1, &ns.name, &format!("restart-{}", &ns.name[8..]), &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut agent = Clusternet::start("agent-restart-1", &args);
    let id = wait_for("the agent's Lease", Duration::from_secs(10), || {
        cluster_id(&child, &ns.name)
    })
    .await;
    let first = wait_for("Ready", Duration::from_secs(15), || {
        ready_cluster(&parent, &id)
    })
    .await;
    let crr: Api<ClusterRegistrationRequest> = Api::all(parent.clone());
    let crr_uid = crr
        .get(&format!("clusternet-{id}"))
        .await
        .expect("the request")
        .uid();
    // the credentials were stored in the child
    let stored = Api::<Secret>::namespaced(child.clone(), &ns.name)
        .get("parent-cluster")
        .await
        .expect("parent-cluster Secret");
    assert!(stored.data.unwrap_or_default().contains_key("token"));

    agent.kill();
    // a restart must not wait out the old holder's lease for the test to be meaningful: 4s lease
    let again = Clusternet::start("agent-restart-2", &args);
    wait_for(
        "the restarted agent to report",
        Duration::from_secs(20),
        || async {
            let t = again.log_text();
            if t.contains("registered with the parent") {
                Ok(())
            } else {
                Err(t.lines().last().unwrap_or("").to_string())
            }
        },
    )
    .await;
    assert!(
        !again
            .log_text()
            .contains("filed a ClusterRegistrationRequest"),
        "no new request:\n{}",
        again.log_text()
    );
    assert_eq!(
        cluster_id(&child, &ns.name).await.as_deref(),
        Ok(id.as_str()),
        "same cluster ID"
    );
    assert_eq!(
        crr.get(&format!("clusternet-{id}"))
            .await
            .expect("the request")
            .uid(),
        crr_uid,
        "same request"
    );
    let second = wait_for("Ready again", Duration::from_secs(10), || {
        ready_cluster(&parent, &id)
    })
    .await;
    assert_eq!(
        second.namespace(),
        first.namespace(),
        "same dedicated namespace"
    );
    let all_ns = Api::<Namespace>::all(parent.clone())
        .list(&ListParams::default().labels(&format!("clusters.clusternet.io/cluster-id={id}")))
        .await
        .expect("namespaces");
    assert_eq!(all_ns.items.len(), 1, "no second dedicated namespace");
}

#[tokio::test]
async fn a_silent_cluster_turns_unknown_and_tainted_then_recovers() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let child = env.child(2.min(env.children)).await;
    let i = 2.min(env.children);
    let ns = TestNamespace::create(&child, &env.child_kubeconfig(i), "silent").await;
    // heartbeat every 2s: the controller counts the cluster lost after 3 periods (6s)
    let args = agent_args(
        env,
        i,
        &ns.name,
        &format!("silent-{}", &ns.name[7..]),
        &["--cluster-status-update-frequency=2s"],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut agent = Clusternet::start("agent-silent-1", &args);
    let id = wait_for("the agent's Lease", Duration::from_secs(10), || {
        cluster_id(&child, &ns.name)
    })
    .await;
    let mc = wait_for("Ready", Duration::from_secs(15), || {
        ready_cluster(&parent, &id)
    })
    .await;
    let api: Api<ManagedCluster> =
        Api::namespaced(parent.clone(), &mc.namespace().unwrap_or_default());
    let name = mc.name_any();
    agent.kill();
    let stopped = Instant::now();
    wait_for(
        "Ready=Unknown and the unschedulable taint",
        Duration::from_secs(20),
        || async {
            let mc = api.get(&name).await.map_err(|e| e.to_string())?;
            let status = mc.status.clone().unwrap_or_default();
            let ready = status.condition("Ready").map(|c| c.status.clone());
            let tainted = mc.spec.taints.iter().any(|t| {
                t.key == "clusters.clusternet.io/unschedulable" && t.effect == "NoSchedule"
            });
            if ready.as_deref() == Some("Unknown") && tainted && !status.readyz {
                Ok(())
            } else {
                Err(format!(
                    "Ready {ready:?}, taints {:?}, readyz {}",
                    mc.spec.taints, status.readyz
                ))
            }
        },
    )
    .await;
    assert!(
        stopped.elapsed() >= Duration::from_secs(5),
        "not before the grace period: {:?}",
        stopped.elapsed()
    );

    let _again = Clusternet::start("agent-silent-2", &args);
    wait_for(
        "Ready=True and no taint",
        Duration::from_secs(25),
        || async {
            let mc = api.get(&name).await.map_err(|e| e.to_string())?;
            let ready = mc
                .status
                .clone()
                .unwrap_or_default()
                .condition("Ready")
                .map(|c| c.status.clone());
            if ready.as_deref() == Some("True") && mc.spec.taints.is_empty() {
                Ok(())
            } else {
                Err(format!("Ready {ready:?}, taints {:?}", mc.spec.taints))
            }
        },
    )
    .await;
}

async fn can(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    ns: Option<&str>,
) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: ns.map(str::to_string),
                ..Default::default()
            }),
            non_resource_attributes: None,
        },
        ..Default::default()
    };
    let r = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("a SelfSubjectAccessReview");
    r.status.map(|s| s.allowed).unwrap_or(false)
}

#[tokio::test]
async fn a_clusters_credentials_reach_nothing_outside_its_namespace() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let mut reg = Vec::new();
    let mut keep = Vec::new();
    for i in [1, 3.min(env.children)] {
        let child = env.child(i).await;
        let ns = TestNamespace::create(&child, &env.child_kubeconfig(i), "rbac").await;
        let args = agent_args(env, i, &ns.name, &format!("rbac-{}", &ns.name[5..]), &[]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let agent = Clusternet::start(&format!("agent-rbac-{i}"), &args);
        let id = wait_for("the agent's Lease", Duration::from_secs(10), || {
            cluster_id(&child, &ns.name)
        })
        .await;
        let mc = wait_for("Ready", Duration::from_secs(15), || {
            ready_cluster(&parent, &id)
        })
        .await;
        let stored = Api::<Secret>::namespaced(child.clone(), &ns.name)
            .get("parent-cluster")
            .await
            .expect("stored credentials");
        reg.push((stored, mc.namespace().unwrap_or_default()));
        keep.push((agent, ns));
    }
    let data = reg[0].0.data.clone().unwrap_or_default();
    let token = String::from_utf8_lossy(&data["token"].0).to_string();
    let creds =
        clusternet::runtime::token_client(&env.parent_url(), &token, Some(&data["ca.crt"].0))
            .expect("a client with the agent's credentials");
    let (own, other) = (reg[0].1.as_str(), reg[1].1.as_str());

    let mut wrong = Vec::new();
    let mut check =
        async |verb: &str, group: &str, resource: &str, ns: Option<&str>, expect: bool| {
            let got = can(&creds, verb, group, resource, ns).await;
            if got != expect {
                wrong.push(format!(
                    "{verb} {group}/{resource} in {ns:?}: allowed={got}, expected {expect}"
                ));
            }
        };
    // its own namespace: everything (upstream's clusternet-managedcluster-role)
    check("get", "", "secrets", Some(own), true).await;
    check(
        "list",
        "apps.clusternet.io",
        "descriptions",
        Some(own),
        true,
    )
    .await;
    check(
        "update",
        "clusters.clusternet.io",
        "managedclusters",
        Some(own),
        true,
    )
    .await;
    check(
        "create",
        "clusters.clusternet.io",
        "clusterregistrationrequests",
        None,
        true,
    )
    .await;
    // another cluster's namespace: nothing
    for (verb, group, resource) in [
        ("get", "", "secrets"),
        ("list", "", "secrets"),
        ("get", "apps.clusternet.io", "bases"),
        ("list", "apps.clusternet.io", "descriptions"),
        ("update", "clusters.clusternet.io", "managedclusters"),
        ("create", "", "pods"),
    ] {
        check(verb, group, resource, Some(other), false).await;
    }
    // cluster-wide: nothing beyond its request
    check("list", "", "secrets", None, false).await;
    check("create", "", "namespaces", None, false).await;
    check(
        "list",
        "clusters.clusternet.io",
        "managedclusters",
        None,
        false,
    )
    .await;
    check(
        "delete",
        "clusters.clusternet.io",
        "clusterregistrationrequests",
        None,
        false,
    )
    .await;
    check("get", "", "secrets", Some("kube-system"), false).await;
    assert!(
        wrong.is_empty(),
        "RBAC matrix mismatches:\n{}",
        wrong.join("\n")
    );

    // and for real: reading the other cluster's Secrets is refused
    let denied = Api::<Secret>::namespaced(creds.clone(), other)
        .list(&ListParams::default())
        .await;
    assert!(
        matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 403),
        "{denied:?}"
    );
}

#[tokio::test]
async fn a_bad_bootstrap_token_is_reported_and_files_no_request() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let child = env.child(1).await;
    let ns = TestNamespace::create(&child, &env.child_kubeconfig(1), "badtoken").await;
    let mut args = agent_args(env, 1, &ns.name, "badtoken", &[]);
    // well-formed but unknown to the parent
    args.retain(|a| !a.starts_with("--cluster-reg-token="));
    args.push("--cluster-reg-token=abcdef.0123456789abcdef".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = Clusternet::start("agent-badtoken", &args);
    let id = wait_for("the agent's Lease", Duration::from_secs(10), || {
        cluster_id(&child, &ns.name)
    })
    .await;
    wait_for(
        "a clear error in the agent's log",
        Duration::from_secs(15),
        || async {
            let t = agent.log_text();
            if t.contains("rejected the bootstrap token (401 Unauthorized)") {
                Ok(())
            } else {
                Err(t)
            }
        },
    )
    .await;
    let crr = Api::<ClusterRegistrationRequest>::all(parent.clone())
        .get_opt(&format!("clusternet-{id}"))
        .await
        .expect("GET");
    assert!(crr.is_none(), "no request is filed with a rejected token");

    // a malformed token fails at once, before anything is sent
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_clusternet"))
        .args([
            "--role=agent",
            "--cluster-reg-parent-url=https://127.0.0.1:1",
            "--cluster-reg-token=nonsense",
        ])
        .arg(format!(
            "--kubeconfig={}",
            env.child_kubeconfig(1).display()
        ))
        .arg("--health-bind-address=127.0.0.1:0")
        .output()
        .expect("running clusternet");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success() || text.contains("bootstrap token"),
        "{text}"
    );
    assert!(
        text.contains("--cluster-reg-token is not a bootstrap token"),
        "{text}"
    );
}

#[tokio::test]
async fn deleting_a_cluster_removes_its_namespace_rbac_and_the_agent_says_why() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let i = 3.min(env.children);
    let child = env.child(i).await;
    let ns = TestNamespace::create(&child, &env.child_kubeconfig(i), "dereg").await;
    let args = agent_args(
        env,
        i,
        &ns.name,
        &format!("dereg-{}", &ns.name[6..]),
        &["--cluster-status-update-frequency=2s"],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = Clusternet::start("agent-dereg", &args);
    let id = wait_for("the agent's Lease", Duration::from_secs(10), || {
        cluster_id(&child, &ns.name)
    })
    .await;
    let mc = wait_for("Ready", Duration::from_secs(15), || {
        ready_cluster(&parent, &id)
    })
    .await;
    let dedicated = mc.namespace().unwrap_or_default();
    Api::<ManagedCluster>::namespaced(parent.clone(), &dedicated)
        .delete(&mc.name_any(), &DeleteParams::default())
        .await
        .expect("deleting the ManagedCluster");
    wait_for(
        "the dedicated namespace and RBAC to go",
        Duration::from_secs(30),
        || async {
            let ns = Api::<Namespace>::all(parent.clone())
                .get_opt(&dedicated)
                .await
                .map_err(|e| e.to_string())?;
            let role = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(parent.clone())
                .get_opt(&format!("clusternet-{id}"))
                .await
                .map_err(|e| e.to_string())?;
            let ns_gone = ns.is_none_or(|n| n.metadata.deletion_timestamp.is_some());
            if ns_gone && role.is_none() {
                Ok(())
            } else {
                Err(format!(
                    "namespace gone: {ns_gone}, ClusterRole present: {}",
                    role.is_some()
                ))
            }
        },
    )
    .await;
    wait_for(
        "the agent to say the cluster was deleted",
        Duration::from_secs(60),
        || async {
            let t = agent.log_text();
            if t.contains("was deleted in the parent") {
                Ok(())
            } else {
                Err(t.lines().rev().take(3).collect::<Vec<_>>().join("\n"))
            }
        },
    )
    .await;
    let crr = Api::<ClusterRegistrationRequest>::all(parent.clone())
        .get(&format!("clusternet-{id}"))
        .await
        .expect("request");
    let status = crr.status.unwrap_or_default();
    assert_eq!(
        status.result.map(|r| r.as_str().to_string()).as_deref(),
        Some("Denied")
    );
    assert!(
        status.token.is_none(),
        "no credentials are left in the request"
    );
}

#[tokio::test]
async fn the_agent_publishes_the_child_deployer_credentials() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let child = env.child(2).await;
    let ns = TestNamespace::create(&child, &env.child_kubeconfig(2), "deployer").await;
    // what deploy/overlays/child installs: the app deployer ServiceAccount and its token Secret
    Api::<ServiceAccount>::namespaced(child.clone(), &ns.name)
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                serde_json::json!({"metadata": {"name": "clusternet-app-deployer"}}),
            )
            .expect("SA"),
        )
        .await
        .expect("creating the ServiceAccount");
    Api::<Secret>::namespaced(child.clone(), &ns.name)
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "clusternet-app-deployer",
                             "annotations": {"kubernetes.io/service-account.name": "clusternet-app-deployer"}},
                "type": "kubernetes.io/service-account-token"}))
            .expect("Secret"),
        )
        .await
        .expect("creating the token Secret");
    let args = agent_args(
        env,
        2,
        &ns.name,
        &format!("deployer-{}", &ns.name[9..]),
        &[],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _agent = Clusternet::start("agent-deployer", &args);
    let id = wait_for("the agent's Lease", Duration::from_secs(10), || {
        cluster_id(&child, &ns.name)
    })
    .await;
    let mc = wait_for("Ready", Duration::from_secs(15), || {
        ready_cluster(&parent, &id)
    })
    .await;
    let secrets: Api<Secret> = Api::namespaced(parent.clone(), &mc.namespace().unwrap_or_default());
    let published = wait_for(
        "Secret child-cluster-deployer in the parent",
        Duration::from_secs(20),
        || async {
            secrets
                .get_opt("child-cluster-deployer")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    let data = published.data.clone().unwrap_or_default();
    for key in [
        "ca.crt",
        "token",
        "service-account.name",
        "service-account.uid",
        "apiserver-advertise-url",
    ] {
        assert!(
            data.get(key).is_some_and(|v| !v.0.is_empty()),
            "{key} missing: {:?}",
            data.keys()
        );
    }
    assert_eq!(
        published.labels().get("clusters.clusternet.io/cluster-id"),
        Some(&id)
    );
    assert_eq!(
        published
            .annotations()
            .get("clusternet.io/autoupdate")
            .map(String::as_str),
        Some("true")
    );
    // the published token really works against the child
    let token = String::from_utf8_lossy(&data["token"].0).to_string();
    let url = String::from_utf8_lossy(&data["apiserver-advertise-url"].0).to_string();
    let deployer = clusternet::runtime::token_client(&url, &token, Some(&data["ca.crt"].0))
        .expect("deployer client");
    // authenticated (it is the child's RBAC, not installed here, that decides what it may do)
    match Api::<ServiceAccount>::namespaced(deployer, &ns.name)
        .get("clusternet-app-deployer")
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) => assert_ne!(
            s.code, 401,
            "the published token is not accepted by the child: {s:?}"
        ),
        Err(e) => panic!("reaching the child with the published credentials: {e}"),
    }
    // the finalizer keeps it while HelmReleases may need it
    assert!(
        published
            .finalizers()
            .iter()
            .any(|f| f == "apps.clusternet.io/finalizer")
    );
}

#[tokio::test]
async fn an_agent_whose_request_was_deleted_registers_again() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let child = env.child(2).await;
    let ns = TestNamespace::create(&child, &env.child_kubeconfig(2), "rereg").await;
    let args = agent_args(env, 2, &ns.name, &format!("rereg-{}", &ns.name[6..]), &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut agent = Clusternet::start("agent-rereg-1", &args);
    let id = wait_for("the agent's Lease", Duration::from_secs(10), || {
        cluster_id(&child, &ns.name)
    })
    .await;
    wait_for("Ready", Duration::from_secs(15), || {
        ready_cluster(&parent, &id)
    })
    .await;
    agent.kill();
    // the stored credentials still work, but the request they registered with is gone
    let crr: Api<ClusterRegistrationRequest> = Api::all(parent.clone());
    let name = format!("clusternet-{id}");
    crr.delete(&name, &kube::api::DeleteParams::default())
        .await
        .expect("deleting the request");
    wait_for("the request gone", Duration::from_secs(15), || async {
        match crr.get_opt(&name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
    let again = Clusternet::start("agent-rereg-2", &args);
    wait_for(
        "a new request, approved",
        Duration::from_secs(30),
        || async {
            let t = again.log_text();
            if t.contains("filed a ClusterRegistrationRequest")
                && t.contains("registered with the parent")
            {
                Ok(())
            } else {
                Err(t.lines().last().unwrap_or("").to_string())
            }
        },
    )
    .await;
    assert!(crr.get_opt(&name).await.expect("reading").is_some());
    wait_for("Ready again", Duration::from_secs(20), || {
        ready_cluster(&parent, &id)
    })
    .await;
}
