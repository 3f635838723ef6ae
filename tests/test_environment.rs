//! The test environment itself works: children run workloads to Available through kwok,
//! kube-controller-manager and kube-scheduler, and the parent's aggregator reaches an API server
//! listening on 127.0.0.1 (the way the hub will be registered).

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::{TestEnv, TestNamespace, wait_for};
use tokio_util::sync::CancellationToken;
use warp::Filter;

#[tokio::test]
async fn deployment_in_a_child_becomes_available() {
    let env = TestEnv::get();
    let child = env.child(env.children).await;
    let ns = TestNamespace::create(&child, &env.child_kubeconfig(env.children), "deploy").await;
    let deploy: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
            }
        }
    }))
    .expect("a valid Deployment");
    let api: Api<Deployment> = Api::namespaced(child, &ns.name);
    api.create(&PostParams::default(), &deploy)
        .await
        .expect("creating the Deployment");
    let available = wait_for(
        "3/3 available replicas",
        Duration::from_secs(90),
        || async {
            let d = api.get("web").await.map_err(|e| e.to_string())?;
            let status = d.status.clone().unwrap_or_default();
            match status.available_replicas {
                Some(3) => Ok(3),
                _ => Err(format!("{status:?}")),
            }
        },
    )
    .await;
    assert_eq!(available, 3);
}

#[tokio::test]
async fn parent_aggregator_reaches_an_api_server_on_loopback() {
    let env = TestEnv::get();
    let parent = env.parent().await;
    let group = format!(
        "t{}.test.clusternet.io",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );

    // A tiny aggregated API server on 127.0.0.1 that records the identity the front proxy sends.
    let seen_users: Arc<Mutex<Vec<String>>> = Arc::default();
    let discovery_group = group.clone();
    let discovery = warp::path!("apis" / String / "v1alpha1").map(move |g: String| {
        let body = if g == discovery_group {
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{g}/v1alpha1"),
                   "resources": [{"name": "hellos", "namespaced": false, "kind": "Hello", "verbs": ["get"]}]})
        } else {
            json!({})
        };
        warp::reply::json(&body)
    });
    let users = seen_users.clone();
    let hello = warp::path!("apis" / String / "v1alpha1" / "hellos" / String)
        .and(warp::header::optional::<String>("x-remote-user"))
        .map(move |_g: String, name: String, user: Option<String>| {
            let user = user.unwrap_or_default();
            users.lock().map(|mut u| u.push(user.clone())).ok();
            warp::reply::json(
                &json!({"kind": "Hello", "apiVersion": "v1", "name": name, "user": user}),
            )
        });
    let pair = clusternet::runtime::serving::self_signed(&["localhost", "127.0.0.1"])
        .expect("self-signed cert");
    let tls = clusternet::runtime::serving::server_config(&pair).expect("TLS config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding 127.0.0.1:0");
    let stop = CancellationToken::new();
    let addr =
        clusternet::runtime::serving::serve_tls(listener, tls, hello.or(discovery), stop.clone())
            .expect("serving");

    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "aggr").await;
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "backend"},
        "spec": {"type": "ExternalName", "externalName": "127.0.0.1",
                 "ports": [{"name": "https", "port": addr.port(), "protocol": "TCP"}]}
    }))
    .expect("a valid Service");
    Api::<Service>::namespaced(parent.clone(), &ns.name)
        .create(&PostParams::default(), &svc)
        .await
        .expect("creating the ExternalName Service");
    let apiservice: APIService = serde_json::from_value(json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": format!("v1alpha1.{group}")},
        "spec": {"group": group, "version": "v1alpha1", "groupPriorityMinimum": 1000, "versionPriority": 100,
                 "insecureSkipTLSVerify": true,
                 "service": {"namespace": ns.name, "name": "backend", "port": addr.port()}}
    }))
    .expect("a valid APIService");
    let apiservices: Api<APIService> = Api::all(parent.clone());
    apiservices
        .create(&PostParams::default(), &apiservice)
        .await
        .expect("creating the APIService");
    let name = format!("v1alpha1.{group}");

    let outcome = async {
        wait_for(
            "the APIService to be Available",
            Duration::from_secs(60),
            || async {
                let a = apiservices.get(&name).await.map_err(|e| e.to_string())?;
                let conditions = a.status.and_then(|s| s.conditions).unwrap_or_default();
                let available = conditions.iter().find(|c| c.type_ == "Available");
                match available {
                    Some(c) if c.status == "True" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        let req = http::Request::get(format!("/apis/{group}/v1alpha1/hellos/world"))
            .body(Vec::new())
            .expect("a request");
        let reply: BTreeMap<String, String> = parent
            .request(req)
            .await
            .expect("a request through the parent's aggregator");
        reply
    }
    .await;
    // an unavailable APIService would stall namespace deletion in the parent: remove it first
    let _ = apiservices.delete(&name, &DeleteParams::default()).await;
    stop.cancel();

    assert_eq!(
        outcome.get("name").map(String::as_str),
        Some("world"),
        "{outcome:?}"
    );
    assert_eq!(
        outcome.get("user").map(String::as_str),
        Some("kubernetes-admin"),
        "the front proxy carries the caller's identity: {outcome:?}"
    );
    let seen = seen_users.lock().map(|u| u.clone()).unwrap_or_default();
    assert!(
        seen.iter().any(|u| u == "kubernetes-admin"),
        "backend saw {seen:?}"
    );
}
