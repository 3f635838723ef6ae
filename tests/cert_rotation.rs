//! Certificates that age or rotate never take the system down (issue #21): the hub serves a
//! renewed `--tls-cert-file`/`--tls-private-key-file` pair within seconds, without a restart,
//! reports each certificate's notAfter in `clusternet_certificate_expiration_timestamp_seconds`,
//! and keeps serving the last good pair when the files turn to garbage; an agent whose stored
//! parent credentials (Secret `parent-cluster`) are rotated switches to them without a restart,
//! and ignores (with a warning) credentials the parent does not accept.

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{Clusternet, TestEnv, free_port, register, uid, wait_for};

const WAIT: Duration = Duration::from_secs(30);
const EXPIRY: &str =
    "clusternet_certificate_expiration_timestamp_seconds{certificate=\"hub-serving\"}";

/// A self-signed serving pair for localhost: (certificate PEM, key PEM, notAfter in Unix
/// seconds).
fn pair(cn: &str, serial: u8, year: i32) -> (String, String, i64) {
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).expect("SANs");
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(year, 1, 1);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&[serial]));
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = params.self_signed(&key).expect("a certificate");
    let not_after = chrono::NaiveDate::from_ymd_opt(year, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .expect("a date")
        .and_utc()
        .timestamp();
    (cert.pem(), key.serialize_pem(), not_after)
}

/// Replaces `path` at once (write aside, rename), as a kubelet updates a mounted Secret.
fn replace(path: &Path, text: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, text).expect("writing");
    std::fs::rename(&aside, path).expect("renaming");
}

/// The serial and notAfter of the certificate a new TLS connection to the hub gets.
async fn served(port: u16) -> Result<(String, i64), String> {
    let stream = support::tls_to_hub(port).await?;
    let leaf = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first().cloned())
        .ok_or("no certificate served")?;
    let info = clusternet::runtime::certs::parse_der(leaf.as_ref(), "served")
        .map_err(|e| e.to_string())?;
    Ok((info.serial, info.not_after))
}

async fn wait_served(port: u16, serial: &str, hub: &Clusternet) {
    wait_for(
        &format!("the hub to serve serial {serial}"),
        WAIT,
        || async {
            match served(port).await {
                Ok((s, _)) if s == serial => Ok(()),
                other => Err(format!("{other:?}; log {}", hub.log.display())),
            }
        },
    )
    .await;
}

async fn wait_expiry_metric(hub: &Clusternet, not_after: i64) {
    wait_for(&format!("{EXPIRY} = {not_after}"), WAIT, || async {
        match hub.metric(EXPIRY).await {
            Some(v) if v == not_after as f64 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn the_hub_serves_a_renewed_certificate_and_keeps_it_when_the_files_break() {
    let env = TestEnv::get();
    env.install_crds();
    let dir = tempfile::tempdir().expect("a temp dir");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let (a_cert, a_key, a_not_after) = pair("hub-a.example", 0xA1, 2031);
    replace(&cert, &a_cert);
    replace(&key, &a_key);

    let port = free_port();
    let args = [
        "--role=hub".to_string(),
        format!("--kubeconfig={}", env.parent_kubeconfig().display()),
        "--bind-address=127.0.0.1".to_string(),
        format!("--secure-port={port}"),
        "--leader-elect=false".to_string(),
        format!("--tls-cert-file={}", cert.display()),
        format!("--tls-private-key-file={}", key.display()),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut hub = Clusternet::start("hub-certs", &args);
    wait_served(port, "A1", &hub).await;
    let (_, served_not_after) = served(port).await.expect("served");
    assert_eq!(served_not_after, a_not_after);
    wait_expiry_metric(&hub, a_not_after).await;

    // renewed: key first, then the certificate (in between the pair does not match)
    let (b_cert, b_key, b_not_after) = pair("hub-b.example", 0xB2, 2032);
    replace(&key, &b_key);
    replace(&cert, &b_cert);
    wait_served(port, "B2", &hub).await;
    wait_expiry_metric(&hub, b_not_after).await;
    let loaded = hub.log_text();
    assert!(
        loaded.contains("certificate loaded") && loaded.contains("hub-b.example"),
        "{loaded}"
    );

    // broken: the hub says so, keeps B and stays up
    std::fs::write(&cert, "garbage").expect("writing");
    std::fs::write(&key, "more garbage").expect("writing");
    wait_for("the hub to refuse the broken pair", WAIT, || async {
        let log = hub.log_text();
        if log.contains("cannot be used; still serving the previous certificate") {
            Ok(())
        } else {
            Err(log.lines().last().unwrap_or_default().to_string())
        }
    })
    .await;
    assert_eq!(served(port).await.expect("served").0, "B2");
    assert_eq!(hub.metric(EXPIRY).await, Some(b_not_after as f64));
    assert!(
        hub.child.try_wait().expect("the hub process").is_none(),
        "the hub exited: {}",
        hub.log_text()
    );
    assert!(!hub.log_text().contains("panicked"), "{}", hub.log_text());
    hub.kill();
}

/// A token the parent issues for ServiceAccount `sa` in `ns` (a second token Secret, filled in
/// by the parent's kube-controller-manager).
async fn another_token(parent: &kube::Client, ns: &str, sa: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(parent.clone(), ns);
    let name = format!("rotated-{}", uid());
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": sa}},
        "type": "kubernetes.io/service-account-token"
    }))
    .expect("a Secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating a token Secret");
    wait_for("the second token", WAIT, || async {
        let s = secrets.get(&name).await.map_err(|e| e.to_string())?;
        s.data
            .and_then(|d| d.get("token").cloned())
            .map(|t| String::from_utf8_lossy(&t.0).into_owned())
            .ok_or_else(|| "not filled in yet".to_string())
    })
    .await
}

async fn set_stored_token(child: &kube::Client, ns: &str, token: &str) {
    let patch = json!({"data": {"token": ByteString(token.as_bytes().to_vec())}});
    Api::<Secret>::namespaced(child.clone(), ns)
        .patch(
            "parent-cluster",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("patching parent-cluster");
}

async fn stored_token(child: &kube::Client, ns: &str) -> String {
    let s = Api::<Secret>::namespaced(child.clone(), ns)
        .get("parent-cluster")
        .await
        .expect("parent-cluster");
    s.data
        .and_then(|d| d.get("token").cloned())
        .map(|t| String::from_utf8_lossy(&t.0).into_owned())
        .unwrap_or_default()
}

fn count(log: &str, what: &str) -> usize {
    log.matches(what).count()
}

#[tokio::test]
async fn an_agent_switches_to_rotated_stored_credentials_without_a_restart() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1], "Pull", &[]).await;
    let c = &clusters[0];

    // the cluster's ServiceAccount in its dedicated namespace, from the token the approver issued
    let issued = Api::<Secret>::namespaced(parent.clone(), &c.dedicated)
        .list(&ListParams::default().fields("type=kubernetes.io/service-account-token"))
        .await
        .expect("token Secrets");
    let sa = issued
        .items
        .iter()
        .find_map(|s| {
            s.annotations()
                .get("kubernetes.io/service-account.name")
                .cloned()
        })
        .expect("the cluster's ServiceAccount");
    let rotated = another_token(&parent, &c.dedicated, &sa).await;
    let before = count(&c.agent.log_text(), "registered with the parent");

    set_stored_token(&c.child, &c.ns.name, &rotated).await;
    wait_for("the agent to switch to the rotated token", WAIT, || async {
        let log = c.agent.log_text();
        if log.contains("switching to them") && count(&log, "registered with the parent") > before {
            Ok(())
        } else {
            Err(log.lines().last().unwrap_or_default().to_string())
        }
    })
    .await;
    // the proven credentials stay: the agent did not write the approval's token back
    assert_eq!(stored_token(&c.child, &c.ns.name).await, rotated);

    // a token the parent refuses is said and ignored: the agent goes on with the working one
    let registered = count(&c.agent.log_text(), "registered with the parent");
    let rounds = count(&c.agent.log_text(), "registering again");
    set_stored_token(&c.child, &c.ns.name, "abcdef.0123456789abcdef").await;
    wait_for("the agent to refuse the bad token", WAIT, || async {
        let log = c.agent.log_text();
        if log.contains("do not work; going on with the current ones") {
            Ok(())
        } else {
            Err(log.lines().last().unwrap_or_default().to_string())
        }
    })
    .await;
    let log = c.agent.log_text();
    assert_eq!(
        count(&log, "registered with the parent"),
        registered,
        "{log}"
    );
    assert_eq!(count(&log, "registering again"), rounds, "{log}");
    assert!(!log.contains("panicked"), "{log}");
}
