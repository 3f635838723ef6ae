//! The parent registers itself as a child: one process with every role against the parent
//! (docs/spec/registration.md §9).

mod support;

use std::time::Duration;

use clusternet::apis::{ManagedCluster, known};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use support::{Clusternet, TestEnv, wait_for};

fn all_in_one(env: &TestEnv, name: &str) -> Clusternet {
    Clusternet::start(
        "all-in-one",
        &[
            "--role=hub,scheduler,controller,agent",
            &format!("--kubeconfig={}", env.parent_kubeconfig().display()),
            &format!("--cluster-reg-parent-url={}", env.parent_url()),
            &format!("--cluster-reg-token={}", env.bootstrap_token()),
            &format!("--cluster-reg-name={name}"),
            "--leader-elect-lease-duration=4s",
            "--leader-elect-renew-deadline=3s",
            "--leader-elect-retry-period=500ms",
            "--cluster-status-collect-frequency=500ms",
        ],
    )
}

/// The cluster ID (the UID of the agent's Lease in the child, here the parent) and the Ready
/// ManagedCluster carrying it.
async fn ready_cluster(parent: &kube::Client, process: &Clusternet) -> (String, ManagedCluster) {
    let leases: Api<Lease> = Api::namespaced(parent.clone(), known::CLUSTERNET_SYSTEM_NAMESPACE);
    let cluster_id = wait_for("the agent's Lease", Duration::from_secs(30), || async {
        let lease = leases
            .get_opt(known::CLUSTERNET_AGENT_LEASE_NAME)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| process.log_text())?;
        lease
            .metadata
            .uid
            .ok_or_else(|| "a Lease without uid".to_string())
    })
    .await;
    let mc = wait_for(
        "the parent's own ManagedCluster to be Ready",
        Duration::from_secs(30),
        || async {
            let list = Api::<ManagedCluster>::all(parent.clone())
                .list(
                    &ListParams::default()
                        .labels(&format!("{}={cluster_id}", known::CLUSTER_ID_LABEL)),
                )
                .await
                .map_err(|e| e.to_string())?;
            let mc = list
                .items
                .into_iter()
                .next()
                .ok_or_else(|| process.log_text())?;
            match mc
                .status
                .as_ref()
                .and_then(|s| s.condition("Ready"))
                .map(|c| c.status.clone())
            {
                Some(s) if s == "True" => Ok(mc),
                other => Err(format!("Ready {other:?}\n{}", process.log_text())),
            }
        },
    )
    .await;
    (cluster_id, mc)
}

#[tokio::test]
async fn one_process_with_every_role_registers_the_parent_as_a_child() {
    let env = TestEnv::get();
    env.with_controller(); // CRDs; its approver and this process's share the one controller Lease
    let parent = env.parent().await;
    let name = format!("parent-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    // the API server's seconds: a cluster created in this second counts as this run's
    let started =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(1);
    let mut first = all_in_one(env, &name);
    // the cluster is found by its ID: in an environment an earlier run used, that Lease and its
    // registration (under the earlier run's name) are still there, and the agent takes that
    // cluster up again
    let (cluster_id, mc) = ready_cluster(&parent, &first).await;
    // a cluster this run registered carries the name it asked for
    let registered_now = mc
        .metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|t| t.0 >= started);
    if registered_now {
        assert_eq!(
            mc.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(known::CLUSTER_NAME_LABEL)),
            Some(&name)
        );
    }
    let status = mc.status.unwrap_or_default();
    assert_eq!(status.k8s_version, "v1.36.3");
    assert_eq!(
        status.capacity.get("cpu").map(|q| q.0.as_str()),
        Some("16"),
        "the parent's two fake nodes"
    );

    // The agent's Lease deleted while the process is down: the next one is a new cluster (a new
    // ID) whose stored credentials are still the old cluster's. They can read its new request
    // but nothing in its new namespace: once the parent rejects them, the agent registers with
    // the bootstrap token instead of taking them up again (it used to loop on them every 70 ms,
    // never Ready).
    first.kill();
    Api::<Lease>::namespaced(parent.clone(), known::CLUSTERNET_SYSTEM_NAMESPACE)
        .delete(known::CLUSTERNET_AGENT_LEASE_NAME, &Default::default())
        .await
        .expect("deleting the agent's Lease");
    let second = all_in_one(env, &format!("{name}-again"));
    let (again, _) = ready_cluster(&parent, &second).await;
    assert_ne!(again, cluster_id, "a new Lease is a new cluster ID");
    let rounds = second
        .log_text()
        .matches("pausing before registering again")
        .count();
    assert!(rounds <= 1, "{rounds} short rounds:\n{}", second.log_text());
}
