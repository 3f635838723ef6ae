//! One Lease per role: of two scheduler processes exactly one leads, and when the leader dies
//! without releasing (kill -9) the standby takes over within the lease duration.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use support::{Clusternet, TestEnv, TestNamespace, wait_for};

const IS_LEADER: &str = "clusternet_leader_election_is_leader{role=\"scheduler\"}";

#[tokio::test]
async fn one_scheduler_leads_and_a_standby_takes_over_after_kill() {
    let env = TestEnv::get();
    let parent = env.parent().await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "lease").await;
    let kubeconfig = env.parent_kubeconfig().display().to_string();
    let args = [
        "--role=scheduler",
        &format!("--kubeconfig={kubeconfig}"),
        &format!("--leader-elect-resource-namespace={}", ns.name),
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=500ms",
    ];
    let mut a = Clusternet::start("scheduler-a", &args);
    let mut b = Clusternet::start("scheduler-b", &args);
    let leases: Api<Lease> = Api::namespaced(parent, &ns.name);

    let holder = wait_for(
        "a holder of the clusternet-scheduler lease",
        Duration::from_secs(30),
        || async {
            let lease = leases
                .get("clusternet-scheduler")
                .await
                .map_err(|e| e.to_string())?;
            match lease
                .spec
                .and_then(|s| s.holder_identity)
                .filter(|h| !h.is_empty())
            {
                Some(h) => Ok(h),
                None => Err("no holder yet".into()),
            }
        },
    )
    .await;
    // both processes expose whether they lead; exactly one does
    let (la, lb) = wait_for(
        "both schedulers to report leadership",
        Duration::from_secs(15),
        || async {
            match (a.metric(IS_LEADER).await, b.metric(IS_LEADER).await) {
                (Some(x), Some(y)) if x + y == 1.0 => Ok((x, y)),
                other => Err(format!("is_leader (a, b) = {other:?}")),
            }
        },
    )
    .await;
    assert_eq!(la + lb, 1.0, "exactly one leader");
    let (leader, standby) = if la == 1.0 {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert!(
        leader.log_text().contains(&holder),
        "the lease names the leading process: holder {holder}, log:\n{}",
        leader.log_text()
    );

    leader.kill();
    let killed_at = Instant::now();
    let new_holder = wait_for(
        "the standby to take the lease over",
        Duration::from_secs(20),
        || async {
            let lease = leases
                .get("clusternet-scheduler")
                .await
                .map_err(|e| e.to_string())?;
            match lease.spec.and_then(|s| s.holder_identity) {
                Some(h) if !h.is_empty() && h != holder => Ok(h),
                other => Err(format!("holder {other:?}")),
            }
        },
    )
    .await;
    let took = killed_at.elapsed();
    assert!(
        took <= Duration::from_secs(4) + Duration::from_secs(2),
        "takeover took {took:?}, more than the 4s lease duration plus retry slack"
    );
    // the process writes the lease before it logs that it acquired it: wait for the line
    wait_for(
        "the standby to log that it holds the lease",
        Duration::from_secs(5),
        || async {
            if standby.log_text().contains(&new_holder) {
                Ok(())
            } else {
                Err(format!("{new_holder} not in the standby's log yet"))
            }
        },
    )
    .await;
    wait_for(
        "the standby to report leadership",
        Duration::from_secs(5),
        || async {
            match standby.metric(IS_LEADER).await {
                Some(1.0) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_stopped_leader_releases_its_lease_at_once() {
    let env = TestEnv::get();
    let parent = env.parent().await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "release").await;
    let kubeconfig = env.parent_kubeconfig().display().to_string();
    let mut p = Clusternet::start(
        "controller-release",
        &[
            "--role=controller-manager",
            &format!("--kubeconfig={kubeconfig}"),
            &format!("--leader-elect-resource-namespace={}", ns.name),
        ],
    );
    let leases: Api<Lease> = Api::namespaced(parent, &ns.name);
    wait_for(
        "the controller to lead",
        Duration::from_secs(30),
        || async {
            let lease = leases
                .get("clusternet-controller-manager")
                .await
                .map_err(|e| e.to_string())?;
            match lease
                .spec
                .and_then(|s| s.holder_identity)
                .filter(|h| !h.is_empty())
            {
                Some(h) => Ok(h),
                None => Err("no holder".into()),
            }
        },
    )
    .await;
    // SIGTERM: graceful shutdown releases the lease instead of letting it expire
    let pid = p.child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let exit = wait_for("the process to exit", Duration::from_secs(20), || {
        let r = p.child.try_wait().map_err(|e| e.to_string());
        async move {
            match r? {
                Some(s) => Ok(s),
                None => Err("still running".into()),
            }
        }
    })
    .await;
    assert!(exit.success(), "clean exit on SIGTERM, got {exit}");
    let lease = leases
        .get("clusternet-controller-manager")
        .await
        .expect("the lease");
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert_eq!(holder, "", "the lease is released on shutdown");
}
