//! The hub's costs against real control planes: a create through the shadow API (dry run in the
//! parent + a Manifest) against a plain create in the parent, and a request into a child through
//! the agent's tunnel against the same request sent to the child directly (small answers for
//! latency, a large list for throughput).
//! Run with `just bench` (reuses CLUSTERNET_TEST_ENV when set, else starts its own environment).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use clusternet::apis::{ManagedCluster, Manifest};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::{TestEnv, TestNamespace, register, uid, wait_for};

const N: usize = 100;

async fn send(client: &kube::Client, method: &str, path: &str, body: Vec<u8>) -> (u16, usize) {
    send_as(client, method, path, body, &[]).await
}

async fn send_as(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> (u16, usize) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(kube::client::Body::from(body)).expect("request");
    let resp = client.send(req).await.expect("send");
    let code = resp.status().as_u16();
    let len = resp
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes().len())
        .unwrap_or(0);
    (code, len)
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn timed<F, Fut>(n: usize, mut f: F) -> Vec<Duration>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f(i).await;
        out.push(t.elapsed());
    }
    out
}

#[tokio::main]
async fn main() {
    let env = TestEnv::get();
    env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();

    // 1. create: shadow API vs the parent itself
    let shadow_ns = format!("bench-{id}");
    let shadow = timed(N, |i| {
        let parent = parent.clone();
        let path = format!("/apis/shadow/v1alpha1/namespaces/{shadow_ns}/configmaps");
        async move {
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}")}, "data": {"k": "v"}});
            let (code, _) = send(&parent, "POST", &path, body.to_string().into_bytes()).await;
            assert_eq!(code, 201, "shadow create");
        }
    })
    .await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "benchhub").await;
    let cms: Api<ConfigMap> = Api::namespaced(parent.clone(), &ns.name);
    let direct = timed(N, |i| {
        let cms = cms.clone();
        async move {
            let cm: ConfigMap = serde_json::from_value(
                json!({"metadata": {"name": format!("cm-{i}")}, "data": {"k": "v"}}),
            )
            .expect("cm");
            cms.create(&PostParams::default(), &cm)
                .await
                .expect("create");
        }
    })
    .await;
    let manifests: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    for i in 0..N {
        let _ = manifests
            .delete(
                &format!("configmaps.{shadow_ns}.cm-{i}"),
                &DeleteParams::default(),
            )
            .await;
    }

    // 2. a child through the tunnel vs directly
    let clusters = register(env, &id, &[1], "Pull", &[]).await;
    let cid = Api::<ManagedCluster>::namespaced(parent.clone(), &clusters[0].dedicated)
        .list(&ListParams::default())
        .await
        .expect("ManagedClusters")
        .items[0]
        .spec
        .cluster_id
        .clone();
    let proxy = format!("/apis/proxies.clusternet.io/v1alpha1/sockets/{cid}/proxy/direct");
    wait_for("the tunnel", Duration::from_secs(30), || async {
        match send(&parent, "GET", &format!("{proxy}/version"), vec![]).await {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let child = clusters[0].child.clone();
    let child_cms: Api<ConfigMap> = Api::namespaced(child.clone(), &clusters[0].ns.name);
    let payload = "x".repeat(10 * 1024);
    for i in 0..200 {
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": format!("big-{i}")}, "data": {"k": payload}}),
        )
        .expect("cm");
        child_cms
            .create(&PostParams::default(), &cm)
            .await
            .expect("create in child");
    }
    let list_path = format!("/api/v1/namespaces/{}/configmaps", clusters[0].ns.name);
    let via_tunnel = timed(N, |_| {
        let parent = parent.clone();
        let p = format!("{proxy}/version");
        async move {
            assert_eq!(send(&parent, "GET", &p, vec![]).await.0, 200);
        }
    })
    .await;
    let to_child = timed(N, |_| {
        let child = child.clone();
        async move {
            assert_eq!(send(&child, "GET", "/version", vec![]).await.0, 200);
        }
    })
    .await;
    let bytes = send(&child, "GET", &list_path, vec![]).await.1;
    // the child's own credentials travel as user extras of the impersonated `clusternet` user
    let child_token = std::fs::read_to_string(env.child_kubeconfig(1))
        .ok()
        .and_then(|k| {
            k.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("token:")
                    .map(|t| t.trim().to_string())
            })
        })
        .expect("a token in the child kubeconfig");
    let big_tunnel = timed(10, |_| {
        let parent = parent.clone();
        let p = format!("{proxy}{list_path}");
        let token = child_token.clone();
        async move {
            let headers = [
                ("Impersonate-User", "clusternet"),
                ("Impersonate-Extra-Clusternet-Token", token.as_str()),
            ];
            assert_eq!(send_as(&parent, "GET", &p, vec![], &headers).await.0, 200);
        }
    })
    .await;
    let big_direct = timed(10, |_| {
        let child = child.clone();
        let p = list_path.clone();
        async move {
            assert_eq!(send(&child, "GET", &p, vec![]).await.0, 200);
        }
    })
    .await;
    let mbps = |d: &Vec<Duration>| {
        let total: f64 = d.iter().map(Duration::as_secs_f64).sum();
        (bytes as f64 * d.len() as f64) / total / 1_048_576.0
    };

    println!("| measurement ({N} sequential requests) | p50 | p99 |");
    println!("|---|---|---|");
    for (what, v) in [
        (
            "create through the shadow API (dry run + Manifest)",
            &shadow,
        ),
        ("create in the parent directly", &direct),
        ("GET /version of a child through the tunnel", &via_tunnel),
        ("GET /version of the child directly", &to_child),
    ] {
        println!(
            "| {what} | {} | {} |",
            ms(pct(v.clone(), 0.5)),
            ms(pct(v.clone(), 0.99))
        );
    }
    println!(
        "shadow create / direct create (p50): {:.2}x; tunnel / direct GET (p50): {:.2}x",
        pct(shadow.clone(), 0.5).as_secs_f64() / pct(direct.clone(), 0.5).as_secs_f64(),
        pct(via_tunnel.clone(), 0.5).as_secs_f64() / pct(to_child.clone(), 0.5).as_secs_f64()
    );
    println!(
        "list of 200 x 10 KiB ConfigMaps ({:.1} MiB): through the tunnel {:.1} MiB/s, directly {:.1} MiB/s",
        bytes as f64 / 1_048_576.0,
        mbps(&big_tunnel),
        mbps(&big_direct)
    );
}
