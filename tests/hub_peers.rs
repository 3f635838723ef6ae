//! Peer hubs (docs/spec/hub.md §2.6): a second hub replica, which no agent is connected to,
//! proxies into a child whose tunnel landed on the first hub, through the peer tunnel between
//! the two; and it stops doing so once it can no longer tell which peer has the agent.

mod support;

use std::time::Duration;

use clusternet::apis::ManagedCluster;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use support::{Clusternet, TestEnv, free_port, register, uid, wait_for};

const SYSTEM_NS: &str = "clusternet-system";

fn admin_token(env: &TestEnv) -> String {
    support::kubeconfig_token(&env.parent_kubeconfig())
}

async fn get_from_hub(port: u16, token: &str, path: &str) -> Result<(u16, String), String> {
    support::get_from_hub(port, Some(token), path).await
}

#[tokio::test]
async fn a_second_hub_reaches_a_child_through_its_peer() {
    let env = TestEnv::get();
    let hub_a = env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let token = admin_token(env);

    let port_b = free_port();
    let peer_port_b = free_port();
    let kubeconfig = format!("--kubeconfig={}", env.parent_kubeconfig().display());
    let secure = format!("--secure-port={port_b}");
    let peer = format!("--peer-port={peer_port_b}");
    let mut hub_b = Clusternet::start(
        "hub-b",
        &[
            "--role=hub",
            "--bind-address=127.0.0.1",
            &secure,
            &peer,
            &kubeconfig,
        ],
    );

    let id = uid();
    let clusters = register(env, &id, &[1], "Pull", &[]).await;
    let c = &clusters[0];
    let cluster = wait_for("the ManagedCluster", Duration::from_secs(60), || async {
        let list = Api::<ManagedCluster>::namespaced(parent.clone(), &c.dedicated)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find(|m| {
                m.status
                    .as_ref()
                    .is_some_and(|s| !s.apiserver_url.is_empty())
            })
            .ok_or_else(|| "no ManagedCluster with an apiserverURL yet".to_string())
    })
    .await;
    let cid = cluster.spec.cluster_id.clone();
    assert!(
        cluster.status.as_ref().is_some_and(|s| s.use_socket),
        "the child uses the tunnel, so hub B cannot simply dial it directly"
    );

    // both replicas advertise themselves
    let leases: Api<Lease> = Api::namespaced(parent.clone(), SYSTEM_NS);
    wait_for("two peer leases", Duration::from_secs(30), || async {
        let names: Vec<String> = leases
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .filter_map(|l| l.metadata.name)
            .filter(|n| n.starts_with("clusternet-hub-peer-"))
            .collect();
        (names.len() >= 2)
            .then_some(())
            .ok_or_else(|| format!("peer leases: {names:?}"))
    })
    .await;

    // the agent's tunnel lands on hub A (the aggregator's backend); hub B has none of its own
    // and must go through A
    let path = format!("/apis/proxies.clusternet.io/v1alpha1/sockets/{cid}/proxy/direct/version");
    let body = wait_for(
        "hub B to proxy through its peer",
        Duration::from_secs(60),
        || async {
            match get_from_hub(port_b, &token, &path).await? {
                (200, body) => Ok(body),
                (code, body) => Err(format!("{code}: {body}")),
            }
        },
    )
    .await;
    assert!(body.contains("gitVersion"), "{body}");
    let log_b = hub_b.log_text();
    assert!(
        log_b.contains("peer hub connected"),
        "hub B accepted hub A's peer session; log:\n{log_b}"
    );
    assert!(
        log_b.contains("dialing through a peer hub"),
        "hub B used the peer session; log:\n{log_b}"
    );
    assert!(
        !log_b.contains("agent tunnel connected"),
        "the agent's tunnel is on hub A, not B; log:\n{log_b}"
    );
    assert!(
        hub_a.log_text().contains("connected to peer hub"),
        "hub A dialed hub B"
    );

    // a cluster nobody has is still refused
    let (code, body) = get_from_hub(
        port_b,
        &token,
        "/apis/proxies.clusternet.io/v1alpha1/sockets/no-such-cluster/proxy/direct/version",
    )
    .await
    .expect("hub B answers");
    assert_eq!(code, 400, "{body}");

    hub_b.kill();
    drop(clusters);
}
