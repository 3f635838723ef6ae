//! The hub's security matrix (issue #21): every endpoint the hub serves, asked through the
//! parent's aggregator by every kind of caller, gets the answer it must: a bad token is 401, no
//! credentials are the parent's anonymous user (403: the API server's default anonymous auth), a
//! user without RBAC is 403, another cluster's agent credentials are 403 on this cluster's tunnel,
//! an admin gets through. The proxy into a child is upstream's design: the parent lets every
//! caller through (`clusternet:system:socketsproxy`) and the child authorizes the credentials the
//! caller hands over in its `clusternet-token` user extra, or, without them, the caller itself
//! (impersonated by the hub), so here the child says 403 to everyone without them (no caller is
//! granted anything in the child) and 200 with them. Straight at the hub's own port (skipping the
//! aggregator), no credentials and a bad token are 401.

mod support;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::json;
use support::{TestEnv, TestNamespace, cluster_id, register, uid};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Caller {
    NoCredentials,
    BadToken,
    /// child2's agent, with the dedicated credentials the parent gave it
    OtherClustersAgent,
    /// an authenticated user bound to nothing
    UserWithoutRbac,
    Admin,
}

use Caller::*;

const CALLERS: [Caller; 5] = [
    NoCredentials,
    BadToken,
    OtherClustersAgent,
    UserWithoutRbac,
    Admin,
];

/// One request: method, path (`{A}` is child1's cluster ID, `{NS}` a test namespace, `{CHILD}`
/// child1's API server address), body.
struct Endpoint {
    what: &'static str,
    method: &'static str,
    path: &'static str,
    body: Option<serde_json::Value>,
    upgrade: bool,
    /// hand child1's admin token over as the `clusternet-token` user extra (`{CHILD_TOKEN}`)
    child_token: bool,
}

/// What each caller must get, in CALLERS order (`None`: not asked, see the comment).
struct Row {
    endpoint: Endpoint,
    expect: [Option<u16>; 5],
}

fn matrix() -> Vec<Row> {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "matrix"}, "data": {"a": "b"}});
    let review = json!({"apiVersion": "placement.clusternet.io/v1alpha1", "kind": "PlacementReview",
        "spec": {"subscription": {"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "matrix"}, "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"matrix": "none"}}}],
            "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "matrix"}]}}}});
    let row = |what, method, path, body: Option<serde_json::Value>, expect| Row {
        endpoint: Endpoint {
            what,
            method,
            path,
            body,
            upgrade: false,
            child_token: false,
        },
        expect,
    };
    vec![
        // discovery is every authenticated user's (system:discovery), as for any API group
        row(
            "discovery of shadow",
            "GET",
            "/apis/shadow/v1alpha1",
            None,
            [Some(403), Some(401), Some(200), Some(200), Some(200)],
        ),
        row(
            "discovery of proxies",
            "GET",
            "/apis/proxies.clusternet.io/v1alpha1",
            None,
            [Some(403), Some(401), Some(200), Some(200), Some(200)],
        ),
        row(
            "shadow list",
            "GET",
            "/apis/shadow/v1alpha1/namespaces/{NS}/configmaps",
            None,
            [Some(403), Some(401), Some(403), Some(403), Some(200)],
        ),
        row(
            "shadow create",
            "POST",
            "/apis/shadow/v1alpha1/namespaces/{NS}/configmaps",
            Some(cm),
            [Some(403), Some(401), Some(403), Some(403), Some(201)],
        ),
        row(
            "shadow get",
            "GET",
            "/apis/shadow/v1alpha1/namespaces/{NS}/configmaps/matrix",
            None,
            [Some(403), Some(401), Some(403), Some(403), Some(200)],
        ),
        row(
            "shadow delete",
            "DELETE",
            "/apis/shadow/v1alpha1/namespaces/{NS}/configmaps/matrix",
            None,
            [Some(403), Some(401), Some(403), Some(403), Some(200)],
        ),
        // the parent passes everyone on; with no credentials handed over the hub goes in as the
        // caller (hub.md §2.3.1: its name and groups, never the parent's system:masters), whom the
        // child's RBAC grants nothing, and the anonymous caller stays anonymous
        row(
            "proxy direct, no child credentials",
            "GET",
            "/apis/proxies.clusternet.io/v1alpha1/sockets/{A}/proxy/direct/api/v1/namespaces/default/configmaps",
            None,
            [Some(403), Some(401), Some(403), Some(403), Some(403)],
        ),
        row(
            "proxy https/host:port, no child credentials",
            "GET",
            "/apis/proxies.clusternet.io/v1alpha1/sockets/{A}/proxy/https/{CHILD}/api/v1/namespaces/default/configmaps",
            None,
            [Some(403), Some(401), Some(403), Some(403), Some(403)],
        ),
        // with the child's token in the clusternet-token extra the child's own RBAC decides
        Row {
            endpoint: Endpoint {
                what: "proxy direct, child token in the extras",
                method: "GET",
                path: "/apis/proxies.clusternet.io/v1alpha1/sockets/{A}/proxy/direct/api/v1/namespaces/default/configmaps",
                body: None,
                upgrade: false,
                child_token: true,
            },
            // (the user without RBAC is an impersonated one, who cannot impersonate again)
            expect: [Some(200), Some(401), Some(200), None, Some(200)],
        },
        // the admin's positive answer (101) is every tunnel test's: here an admin would take
        // child1's tunnel over
        Row {
            endpoint: Endpoint {
                what: "tunnel upgrade sockets/<id>",
                method: "GET",
                path: "/apis/proxies.clusternet.io/v1alpha1/sockets/{A}",
                body: None,
                upgrade: true,
                child_token: false,
            },
            expect: [Some(403), Some(401), Some(403), Some(403), None],
        },
        row(
            "placementreviews create",
            "POST",
            "/apis/placement.clusternet.io/v1alpha1/namespaces/{NS}/placementreviews",
            Some(review),
            [Some(403), Some(401), Some(403), Some(403), Some(201)],
        ),
        row(
            "dashboard page",
            "GET",
            "/apis/dashboard.clusternet.io/v1alpha1/pages/clusters",
            None,
            [Some(403), Some(401), Some(403), Some(403), Some(200)],
        ),
    ]
}

async fn send(
    client: &kube::Client,
    e: &Endpoint,
    vars: &BTreeMap<&str, String>,
) -> Result<u16, String> {
    let mut path = e.path.to_string();
    for (k, v) in vars {
        path = path.replace(k, v);
    }
    let mut req = http::Request::builder()
        .method(e.method)
        .uri(&path)
        .header("content-type", "application/json");
    if e.upgrade {
        req = req
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
    }
    if e.child_token {
        req = req
            .header("impersonate-user", "clusternet")
            .header("impersonate-extra-clusternet-token", &vars["{CHILD_TOKEN}"]);
    }
    let body = e
        .body
        .as_ref()
        .map(|b| serde_json::to_vec(b).unwrap_or_default())
        .unwrap_or_default();
    let req = req
        .body(kube::client::Body::from(body))
        .map_err(|e| e.to_string())?;
    let resp = client.send(req).await.map_err(|e| e.to_string())?;
    Ok(resp.status().as_u16())
}

async fn client_with(url: &str, token: Option<&str>, impersonate: Option<&str>) -> kube::Client {
    let mut cfg =
        clusternet::runtime::token_config(url, token.unwrap_or("x"), None).expect("a config");
    if token.is_none() {
        cfg.auth_info.token = None;
    }
    cfg.accept_invalid_certs = true;
    if let Some(user) = impersonate {
        cfg.auth_info.impersonate = Some(user.to_string());
    }
    kube::Client::try_from(cfg).expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hub_endpoint_answers_every_caller_as_it_must() {
    let env = TestEnv::get();
    let hub = env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 2], "Pull", &[]).await;
    let a = cluster_id(&parent, &clusters[0]).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "matrix").await;
    let url = env.parent_url();
    let admin_token = support::kubeconfig_token(&env.parent_kubeconfig());
    // child2's agent's dedicated credentials, as it stored them in its child
    let stored = Api::<Secret>::namespaced(clusters[1].child.clone(), &clusters[1].ns.name)
        .get(clusternet::apis::known::PARENT_CLUSTER_SECRET_NAME)
        .await
        .expect("the agent's stored credentials");
    let agent_token = stored
        .data
        .as_ref()
        .and_then(|d| d.get("token"))
        .map(|t| String::from_utf8_lossy(&t.0).into_owned())
        .expect("a token in the stored credentials");
    let callers: BTreeMap<Caller, kube::Client> = [
        (NoCredentials, client_with(&url, None, None).await),
        (BadToken, client_with(&url, Some("bad.token"), None).await),
        (
            OtherClustersAgent,
            client_with(&url, Some(&agent_token), None).await,
        ),
        (
            UserWithoutRbac,
            client_with(&url, Some(&admin_token), Some("nobody-at-all")).await,
        ),
        (Admin, client_with(&url, Some(&admin_token), None).await),
    ]
    .into();
    let child = support::kubeconfig_server(&env.child_kubeconfig(1)).to_string();
    let vars: BTreeMap<&str, String> = [
        ("{A}", a),
        ("{NS}", ns.name.clone()),
        ("{CHILD}", child),
        (
            "{CHILD_TOKEN}",
            support::kubeconfig_token(&env.child_kubeconfig(1)),
        ),
    ]
    .into();

    let mut wrong = Vec::new();
    let mut table = String::new();
    for row in matrix() {
        let mut cells = Vec::new();
        for (caller, want) in CALLERS.iter().zip(row.expect) {
            let Some(want) = want else {
                cells.push("-".to_string());
                continue;
            };
            let got = send(&callers[caller], &row.endpoint, &vars).await;
            cells.push(format!("{got:?}"));
            if got != Ok(want) {
                wrong.push(format!(
                    "{} as {caller:?}: got {got:?}, want {want}",
                    row.endpoint.what
                ));
            }
        }
        table.push_str(&format!(
            "| {} | {} |\n",
            row.endpoint.what,
            cells.join(" | ")
        ));
    }
    eprintln!("| endpoint | {CALLERS:?} |\n{table}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // straight at the hub, skipping the aggregator: the hub authenticates itself
    let paths = [
        format!("/apis/shadow/v1alpha1/namespaces/{}/configmaps", ns.name),
        format!(
            "/apis/proxies.clusternet.io/v1alpha1/sockets/{}/proxy/direct/version",
            vars["{A}"]
        ),
    ];
    for token in [None, Some("bad.token")] {
        for path in &paths {
            let got = support::get_from_hub(hub.port, token, path).await;
            assert_eq!(
                got.as_ref().map(|(code, _)| *code),
                Ok(401),
                "{path} straight at the hub with {token:?}: {got:?}"
            );
        }
    }
}
