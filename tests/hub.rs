//! The hub against real control planes (docs/spec/hub.md, cli.md): the shadow API behind the
//! parent's aggregator driven by `kubectl clusternet` and plain kubectl, a CRD created after the
//! hub started, children reached through the agents' reverse tunnels (kubectl get/logs/exec,
//! 403 for a user without rights in the child), bad input answered with Status errors, and a hub
//! restart that loses nothing.

mod support;

use std::time::{Duration, Instant};

use clusternet::apis::{Description, Manifest, Subscription};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use support::{TestEnv, TestNamespace, cluster_id, register, uid, wait_for};

const RESERVED: &str = "clusternet-reserved";

/// The restart test kills the shared hub: it runs alone, the others share it.
static HUB_LOCK: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn deployment_yaml(ns: &str, name: &str, replicas: i32, image: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}, labels: {{app: {name}}}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - {{name: web, image: \"{image}\", ports: [{{containerPort: 80}}]}}
"
    )
}

/// A raw request to the parent (the shadow and proxies groups are reached through its
/// aggregator): status and body.
async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, String) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body))
        .expect("a request");
    let resp = client.send(req).await.expect("sending the request");
    let code = resp.status().as_u16();
    use http_body_util::BodyExt;
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

async fn manifest(parent: &kube::Client, name: &str) -> Option<Manifest> {
    Api::<Manifest>::namespaced(parent.clone(), RESERVED)
        .get_opt(name)
        .await
        .expect("reading Manifests")
}

#[tokio::test]
async fn kubectl_clusternet_stores_plain_objects_as_manifests() {
    let _shared = HUB_LOCK.read().await;
    let env = TestEnv::get();
    env.with_hub();
    let parent = env.parent().await;
    let ns = format!("shadow-{}", uid());

    let out = env.plugin_with_stdin(
        &["apply", "-f", "-"],
        Some(&deployment_yaml(&ns, "web", 3, "nginx:1.25")),
    );
    assert!(out.status.success(), "apply: {}", stderr(&out));
    assert!(
        stdout(&out).contains("deployment.apps/web created"),
        "{}",
        stdout(&out)
    );

    let name = format!("deployments.{ns}.web");
    let m = manifest(&parent, &name).await.expect("the Manifest");
    let labels = m.labels();
    for (k, v) in [
        ("apps.clusternet.io/config.group", "apps"),
        ("apps.clusternet.io/config.version", "v1"),
        ("apps.clusternet.io/config.kind", "Deployment"),
        ("apps.clusternet.io/config.name", "web"),
        ("apps.clusternet.io/config.namespace", ns.as_str()),
        ("clusternet.io/created-by", "clusternet-hub"),
        ("app", "web"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
    }
    let template = serde_json::to_value(&m).expect("json")["template"].clone();
    assert_eq!(template["metadata"]["namespace"], json!(ns));
    assert_eq!(template["spec"]["replicas"], json!(3));
    assert!(template["status"].is_null(), "status is trimmed");
    assert!(
        template["spec"]["progressDeadlineSeconds"].is_number(),
        "the dry run's defaults are kept: {template}"
    );

    let out = env.plugin(&["get", "deploy", "-n", &ns]);
    assert!(out.status.success(), "get: {}", stderr(&out));
    assert!(stdout(&out).contains("web"), "{}", stdout(&out));
    // the short name resolves to the original kind without kubectl warning that it "could also
    // match lower priority resource deployments.shadow" (#44)
    assert!(
        stderr(&out).is_empty(),
        "kubectl clusternet get deploy warned: {}",
        stderr(&out)
    );

    // client-side apply of a change: a strategic merge patch on the template
    let out = env.plugin_with_stdin(
        &["apply", "-f", "-"],
        Some(&deployment_yaml(&ns, "web", 5, "nginx:1.27")),
    );
    assert!(out.status.success(), "re-apply: {}", stderr(&out));
    let t = serde_json::to_value(manifest(&parent, &name).await.expect("Manifest")).expect("json")
        ["template"]
        .clone();
    assert_eq!(t["spec"]["replicas"], json!(5));
    let containers = t["spec"]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(containers[0]["image"], json!("nginx:1.27"));

    let out = env.plugin(&["scale", "deploy/web", "-n", &ns, "--replicas=2"]);
    assert!(out.status.success(), "scale: {}", stderr(&out));
    let t = serde_json::to_value(manifest(&parent, &name).await.expect("Manifest")).expect("json")
        ["template"]
        .clone();
    assert_eq!(t["spec"]["replicas"], json!(2));

    // server-side apply
    let out = env.plugin_with_stdin(
        &["apply", "--server-side", "-f", "-"],
        Some(&deployment_yaml(&ns, "web", 4, "nginx:1.27")),
    );
    assert!(out.status.success(), "server-side apply: {}", stderr(&out));
    let t = serde_json::to_value(manifest(&parent, &name).await.expect("Manifest")).expect("json")
        ["template"]
        .clone();
    assert_eq!(t["spec"]["replicas"], json!(4));

    // plain kubectl pointed at the shadow group
    let plain = std::process::Command::new(env.bin("kubectl"))
        .arg("--kubeconfig")
        .arg(env.parent_kubeconfig())
        .args([
            "get",
            "deployments.v1alpha1.shadow",
            "-n",
            &ns,
            "-o",
            "name",
        ])
        .output()
        .expect("kubectl");
    assert!(plain.status.success(), "{}", stderr(&plain));
    assert!(stdout(&plain).contains("web"), "{}", stdout(&plain));

    // an invalid object is rejected with the API server's own message, and nothing is stored
    let out = env.plugin_with_stdin(
        &["apply", "-f", "-"],
        Some(&deployment_yaml(&ns, "broken", -1, "nginx")),
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("spec.replicas: Invalid value: -1"),
        "{}",
        stderr(&out)
    );
    assert!(
        manifest(&parent, &format!("deployments.{ns}.broken"))
            .await
            .is_none()
    );

    let out = env.plugin(&["delete", "deploy", "web", "-n", &ns]);
    assert!(out.status.success(), "delete: {}", stderr(&out));
    wait_for("the Manifest gone", Duration::from_secs(30), || async {
        match manifest(&parent, &name).await {
            None => Ok(()),
            Some(m) => Err(format!("still there: {:?}", m.metadata.finalizers)),
        }
    })
    .await;
}

#[tokio::test]
async fn custom_resources_of_a_crd_created_after_the_hub_started() {
    let _shared = HUB_LOCK.read().await;
    let env = TestEnv::get();
    env.with_hub();
    let parent = env.parent().await;
    let id = uid();
    let group = format!("e{id}.example.com");
    let crds: Api<CustomResourceDefinition> = Api::all(parent.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]}
    }))
    .expect("a CRD");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("creating the CRD");
    let ns = format!("widgets-{id}");
    let widget = |name: &str, size: &str| {
        format!(
            "apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{size: {size}}}\n"
        )
    };
    // discovery of a new CRD takes a moment in the parent and in kubectl
    let out = wait_for(
        "applying a Widget through the shadow API",
        Duration::from_secs(60),
        || async {
            let out = env.plugin_with_stdin(&["apply", "-f", "-"], Some(&widget("w1", "3")));
            if out.status.success() {
                Ok(out)
            } else {
                Err(stderr(&out))
            }
        },
    )
    .await;
    assert!(stdout(&out).contains("created"), "{}", stdout(&out));
    let m = manifest(&parent, &format!("widgets.{ns}.w1"))
        .await
        .expect("the Widget's Manifest");
    assert_eq!(
        m.labels()
            .get("apps.clusternet.io/config.group")
            .map(String::as_str),
        Some(group.as_str())
    );
    let out = env.plugin(&["get", &format!("widgets.{group}"), "-n", &ns]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("w1"), "{}", stdout(&out));

    let out = env.plugin_with_stdin(&["apply", "-f", "-"], Some(&widget("w2", "\"big\"")));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("spec.size"), "{}", stderr(&out));

    let _ = Api::<Manifest>::namespaced(parent.clone(), RESERVED)
        .delete(&format!("widgets.{ns}.w1"), &DeleteParams::default())
        .await;
    let _ = crds
        .delete(&format!("widgets.{group}"), &DeleteParams::default())
        .await;
}

#[tokio::test]
async fn bad_input_gets_kubernetes_status_errors() {
    let _shared = HUB_LOCK.read().await;
    let env = TestEnv::get();
    let hub = env.with_hub();
    let parent = env.parent().await;
    let ns = format!("bad-{}", uid());
    let cms = format!("/apis/shadow/v1alpha1/namespaces/{ns}/configmaps");
    let status_of = |body: &str| -> Value { serde_json::from_str(body).unwrap_or(Value::Null) };

    // (what, path, content type, body, expected code, expected reason)
    type Case<'a> = (&'a str, String, &'a str, Vec<u8>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            "malformed JSON",
            cms.clone(),
            "application/json",
            b"{not json".to_vec(),
            400,
            "BadRequest",
        ),
        (
            "not an object",
            cms.clone(),
            "application/json",
            b"[1,2]".to_vec(),
            400,
            "BadRequest",
        ),
        (
            "wrong kind for the resource",
            cms.clone(),
            "application/json",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})
                .to_string()
                .into_bytes(),
            400,
            "BadRequest",
        ),
        (
            "invalid name (the parent's validation)",
            cms.clone(),
            "application/json",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}})
                .to_string()
                .into_bytes(),
            422,
            "Invalid",
        ),
        (
            "unknown media type",
            cms.clone(),
            "application/xml",
            b"<x/>".to_vec(),
            415,
            "UnsupportedMediaType",
        ),
        (
            "oversized body",
            cms.clone(),
            "application/json",
            vec![b' '; 4 * 1024 * 1024],
            413,
            "RequestEntityTooLarge",
        ),
    ];
    for (what, path, ct, body, code, reason) in cases {
        let (got, body) = raw(&parent, "POST", &path, ct, body).await;
        assert_eq!(got, code, "{what}: {body}");
        let s = status_of(&body);
        assert_eq!(s["kind"], json!("Status"), "{what}: {body}");
        assert_eq!(s["reason"], json!(reason), "{what}: {body}");
    }
    let (code, body) = raw(
        &parent,
        "GET",
        "/apis/shadow/v1alpha1/nosuchthings",
        "application/json",
        vec![],
    )
    .await;
    assert_eq!(code, 404, "{body}");
    // a POST of a kind nothing serves is a 404 naming it, not a refusal to write Namespaces (#44)
    let (code, body) = raw(
        &parent,
        "POST",
        &format!("/apis/shadow/v1alpha1/namespaces/{ns}/widgets"),
        "application/json",
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(code, 404, "{body}");
    let s = status_of(&body);
    assert_eq!(s["reason"], json!("NotFound"), "{body}");
    assert!(
        s["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"widgets\"") && !m.contains("templates")),
        "{body}"
    );
    let (code, body) = raw(
        &parent,
        "GET",
        &format!("/apis/shadow/v1alpha1/namespaces/{ns}/configmaps/missing"),
        "application/json",
        vec![],
    )
    .await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(
        status_of(&body)["message"],
        json!("configmaps \"missing\" not found")
    );
    let (code, body) = raw(
        &parent,
        "GET",
        "/apis/proxies.clusternet.io/v1alpha1/sockets/no-such-cluster/proxy/direct/version",
        "application/json",
        vec![],
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("no cluster id is no-such-cluster"), "{body}");
    let (code, body) = raw(
        &parent,
        "GET",
        "/apis/proxies.clusternet.io/v1alpha1/sockets/some-id",
        "application/json",
        vec![],
    )
    .await;
    assert_eq!(code, 400, "tunnel path without an upgrade: {body}");

    // a user without rights: 403 from the parent's or the hub's authorization
    let out = std::process::Command::new(env.bin("kubectl"))
        .arg("--kubeconfig")
        .arg(env.parent_kubeconfig())
        .args(["--as=nobody", "get", "--raw", &cms])
        .output()
        .expect("kubectl");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("Forbidden"), "{}", stderr(&out));

    // straight at the hub: no client certificate and no token is 401, a bad token too
    let (code, body) = direct_to_hub(hub.port, None).await;
    assert_eq!(code, 401, "{body}");
    assert_eq!(status_of(&body)["reason"], json!("Unauthorized"));
    let (code, _) = direct_to_hub(hub.port, Some("not-a-token")).await;
    assert_eq!(code, 401);
    // a real token is checked with a TokenReview and works
    let token = support::kubeconfig_token(&env.parent_kubeconfig());
    let (code, body) = direct_to_hub(hub.port, Some(&token)).await;
    assert_eq!(code, 200, "{body}");
}

/// GET /apis/shadow/v1alpha1 on the hub itself over TLS, skipping the aggregator.
async fn direct_to_hub(port: u16, token: Option<&str>) -> (u16, String) {
    let (code, body) = support::get_from_hub(port, token, "/apis/shadow/v1alpha1")
        .await
        .expect("asking the hub");
    // chunked bodies carry a size line first; the JSON starts at the first brace
    let body = body
        .find('{')
        .map(|i| body[i..].to_string())
        .unwrap_or(body);
    (code, body)
}

async fn proxied_version(parent: &kube::Client, id: &str) -> (u16, String) {
    raw(
        parent,
        "GET",
        &format!("/apis/proxies.clusternet.io/v1alpha1/sockets/{id}/proxy/direct/version"),
        "application/json",
        vec![],
    )
    .await
}

#[tokio::test]
async fn children_are_reached_through_the_agents_tunnels() {
    let _shared = HUB_LOCK.read().await;
    let env = TestEnv::get();
    let hub = env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let mut clusters = register(env, &id, &[1], "Pull", &[]).await;
    let c = &clusters[0];
    let cid = cluster_id(&parent, c).await;
    wait_for(
        "the tunnel to carry requests",
        Duration::from_secs(30),
        || async {
            match proxied_version(&parent, &cid).await {
                (200, body) if body.contains("gitVersion") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        hub.metric("clusternet_socket_connections_count")
            .await
            .unwrap_or(0.0)
            >= 1.0,
        "the hub counts the tunnel"
    );

    // a pod in the child, listed through the proxy with kubectl clusternet
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("web-{id}")},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}
    }))
    .expect("a Pod");
    Api::<Pod>::namespaced(c.child.clone(), &c.ns.name)
        .create(&PostParams::default(), &pod)
        .await
        .expect("creating a pod in the child");
    let child_kc = env.child_kubeconfig(1);
    let child_mode = |extra: &[&str]| {
        let mut args = vec![
            format!("--cluster-id={cid}"),
            format!("--child-kubeconfig={}", child_kc.display()),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        env.plugin(&args)
    };
    let out = child_mode(&["get", "pods", "-A"]);
    assert!(out.status.success(), "get pods -A: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("web-{id}")),
        "{}",
        stdout(&out)
    );
    let out = child_mode(&["get", "nodes"]);
    assert!(stdout(&out).contains("child1-node-0"), "{}", stdout(&out));

    // logs and exec travel through the proxy and come back with the child's answer
    // (kwok's fake nodes have no kubelet, so the child's API server explains that)
    let out = child_mode(&["logs", &format!("web-{id}"), "-n", &c.ns.name]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Error from server"),
        "logs: {}",
        stderr(&out)
    );
    let out = child_mode(&["exec", &format!("web-{id}"), "-n", &c.ns.name, "--", "ls"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains("unable to upgrade connection") || e.contains("Error from server"),
        "exec: {e}"
    );

    // a user with no rights in the child gets the child's 403
    let out = child_mode(&["--clusternet-as=nobody", "get", "pods", "-A"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("User \"nobody\" cannot list resource \"pods\""),
        "{}",
        stderr(&out)
    );

    // the path really is the tunnel: without the agent the hub refuses to proxy
    clusters[0].agent.kill();
    wait_for(
        "the proxy to refuse a disconnected agent",
        Duration::from_secs(20),
        || async {
            match proxied_version(&parent, &cid).await {
                (400, body) if body.contains("whose agent is disconnected") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    clusters.clear();
}

#[tokio::test]
async fn a_restarted_hub_gets_every_agent_back_and_loses_nothing() {
    let _alone = HUB_LOCK.write().await;
    let env = TestEnv::get();
    let hub = env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 2], "Pull", &[]).await;
    let mut ids = Vec::new();
    for c in &clusters {
        ids.push(cluster_id(&parent, c).await);
    }
    for cid in &ids {
        wait_for("tunnel up", Duration::from_secs(30), || async {
            match proxied_version(&parent, cid).await {
                (200, _) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }

    // the main job through the shadow API: kubectl clusternet apply + a Subscription
    let appns = format!("hubapp-{id}");
    let out = env.plugin_with_stdin(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {appns}}}\n---\n{}",
            deployment_yaml(&appns, "web", 1, "nginx")
        )),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        manifest(&parent, &format!("namespaces.{appns}"))
            .await
            .is_some(),
        "a Namespace is stored as namespaces.<name>"
    );
    let subns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "hubsub").await;
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": "app"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
                 "feeds": [{"apiVersion": "v1", "kind": "Namespace", "name": appns},
                           {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": appns}]}
    }))
    .expect("a Subscription");
    let sub = Api::<Subscription>::namespaced(parent.clone(), &subns.name)
        .create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    let sel = ListParams::default().labels(&format!(
        "apps.clusternet.io/subs.uid={}",
        sub.uid().unwrap_or_default()
    ));
    let descriptions = wait_for("two Descriptions", Duration::from_secs(60), || async {
        let d = Api::<Description>::all(parent.clone())
            .list(&sel)
            .await
            .map_err(|e| e.to_string())?;
        if d.items.len() == 2 {
            Ok(d.items)
        } else {
            Err(format!("{} Descriptions", d.items.len()))
        }
    })
    .await;
    for c in &clusters {
        wait_for(
            "the Deployment in the child",
            Duration::from_secs(60),
            || async {
                Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(c.child.clone(), &appns)
                    .get_opt("web")
                    .await
                    .map_err(|e| e.to_string())?
                    .map(|_| ())
                    .ok_or("not yet".to_string())
            },
        )
        .await;
    }
    let manifest_uid = manifest(&parent, &format!("deployments.{appns}.web"))
        .await
        .and_then(|m| m.uid())
        .expect("the Manifest");
    let mut description_uids: Vec<String> = descriptions.iter().filter_map(|d| d.uid()).collect();
    description_uids.sort();

    let old = hub.kill();
    let new_up = wait_for("a new hub process", Duration::from_secs(30), || async {
        match hub.pid() {
            Some(p) if p != old => match hub.health_get("/healthz").await {
                Ok((200, _)) => Ok(Instant::now()),
                other => Err(format!("{other:?}")),
            },
            other => Err(format!("pid {other:?}")),
        }
    })
    .await;
    for cid in &ids {
        wait_for("the agent reconnected", Duration::from_secs(30), || async {
            match proxied_version(&parent, cid).await {
                (200, _) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }
    let took = new_up.elapsed();
    eprintln!("every agent back {took:?} after the new hub was up");
    assert!(
        took < Duration::from_secs(10),
        "agents took {took:?} to reconnect; hub log {}",
        hub.log.display()
    );

    assert_eq!(
        manifest(&parent, &format!("deployments.{appns}.web"))
            .await
            .and_then(|m| m.uid()),
        Some(manifest_uid),
        "the Manifest survived"
    );
    let mut after: Vec<String> = Api::<Description>::all(parent.clone())
        .list(&sel)
        .await
        .expect("Descriptions")
        .items
        .iter()
        .filter_map(|d| d.uid())
        .collect();
    after.sort();
    assert_eq!(after, description_uids, "the Descriptions survived");
    let out = env.plugin(&["get", "deploy", "web", "-n", &appns]);
    assert!(
        out.status.success(),
        "shadow API after the restart: {}",
        stderr(&out)
    );

    let _ = Api::<Subscription>::namespaced(parent.clone(), &subns.name)
        .delete("app", &DeleteParams::default())
        .await;
    for m in [
        format!("deployments.{appns}.web"),
        format!("namespaces.{appns}"),
    ] {
        let _ = Api::<Manifest>::namespaced(parent.clone(), RESERVED)
            .delete(&m, &DeleteParams::default())
            .await;
    }
}

/// The object a Manifest stores, as JSON.
fn template_of(m: &Manifest) -> Value {
    serde_json::to_value(m).expect("json")["template"].clone()
}

async fn delete_manifests(parent: &kube::Client, names: &[String]) {
    for m in names {
        let _ = Api::<Manifest>::namespaced(parent.clone(), RESERVED)
            .delete(m, &DeleteParams::default())
            .await;
    }
}

/// `kubectl create <kind>` sends built-in kinds as protobuf; the shadow API has the parent decode
/// them, so every create sub-command stores a Manifest as `apply` would.
#[tokio::test]
async fn kubectl_clusternet_create_stores_protobuf_objects_as_manifests() {
    let _shared = HUB_LOCK.read().await;
    let env = TestEnv::get();
    env.with_hub();
    let parent = env.parent().await;
    let id = uid();
    let ns = format!("pb-{id}");

    let out = env.plugin(&["create", "namespace", &ns]);
    assert!(out.status.success(), "create namespace: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("namespace/{ns} created")),
        "{}",
        stdout(&out)
    );
    let out = env.plugin(&[
        "create",
        "configmap",
        "cfg",
        "-n",
        &ns,
        "--from-literal=greeting=hello",
    ]);
    assert!(out.status.success(), "create configmap: {}", stderr(&out));
    let out = env.plugin(&[
        "create",
        "deployment",
        "web",
        "-n",
        &ns,
        "--image=nginx:1.25",
        "--replicas=2",
    ]);
    assert!(out.status.success(), "create deployment: {}", stderr(&out));
    // a Namespace the parent has too: the dry run must dodge the name clash
    let existing = TestNamespace::create(&parent, &env.parent_kubeconfig(), "pbclash").await;
    let out = env.plugin(&["create", "namespace", &existing.name]);
    assert!(
        out.status.success(),
        "create namespace that the parent has: {}",
        stderr(&out)
    );

    let m = manifest(&parent, &format!("namespaces.{ns}"))
        .await
        .expect("the Namespace's Manifest");
    let t = template_of(&m);
    assert_eq!(t["kind"], json!("Namespace"));
    assert_eq!(t["metadata"]["name"], json!(ns));
    assert!(t["metadata"]["namespace"].is_null(), "{t}");
    assert!(t["metadata"].get("generateName").is_none(), "{t}");
    let clash = template_of(
        &manifest(&parent, &format!("namespaces.{}", existing.name))
            .await
            .expect("the clashing Namespace's Manifest"),
    );
    assert_eq!(clash["metadata"]["name"], json!(existing.name));
    assert!(clash["metadata"].get("generateName").is_none(), "{clash}");

    let m = manifest(&parent, &format!("configmaps.{ns}.cfg"))
        .await
        .expect("the ConfigMap's Manifest");
    assert_eq!(
        m.labels()
            .get("clusternet.io/created-by")
            .map(String::as_str),
        Some("clusternet-hub")
    );
    let t = template_of(&m);
    assert_eq!(t["apiVersion"], json!("v1"));
    assert_eq!(t["kind"], json!("ConfigMap"));
    assert_eq!(t["metadata"]["namespace"], json!(ns), "{t}");
    assert_eq!(t["data"]["greeting"], json!("hello"));
    for server_set in ["resourceVersion", "creationTimestamp", "managedFields"] {
        assert!(t["metadata"].get(server_set).is_none(), "{server_set}: {t}");
    }

    let m = manifest(&parent, &format!("deployments.{ns}.web"))
        .await
        .expect("the Deployment's Manifest");
    assert_eq!(
        m.labels()
            .get("apps.clusternet.io/config.kind")
            .map(String::as_str),
        Some("Deployment")
    );
    let t = template_of(&m);
    assert_eq!(t["metadata"]["namespace"], json!(ns));
    assert_eq!(t["spec"]["replicas"], json!(2));
    assert_eq!(
        t["spec"]["template"]["spec"]["containers"][0]["image"],
        json!("nginx:1.25")
    );
    assert!(t["status"].is_null(), "status is trimmed: {t}");
    let out = env.plugin(&["get", "deploy", "web", "-n", &ns]);
    assert!(out.status.success(), "get: {}", stderr(&out));

    // a typed client's update (PUT) is protobuf too: the parent encodes a ConfigMap for us, the
    // version the shadow API gave out goes in, and the update lands in the template
    let shadow_cm = format!("/apis/shadow/v1alpha1/namespaces/{ns}/configmaps/cfg");
    let (code, body) = raw(&parent, "GET", &shadow_cm, "application/json", vec![]).await;
    assert_eq!(code, 200, "{body}");
    let rv = serde_json::from_str::<Value>(&body).expect("json")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let encoded = protobuf_config_map(&parent, &ns, "cfg", &rv).await;
    let (code, body) = raw(
        &parent,
        "PUT",
        &shadow_cm,
        "application/vnd.kubernetes.protobuf",
        encoded.clone(),
    )
    .await;
    assert_eq!(code, 200, "protobuf PUT: {body}");
    let t = template_of(
        &manifest(&parent, &format!("configmaps.{ns}.cfg"))
            .await
            .expect("Manifest"),
    );
    assert_eq!(t["data"]["greeting"], json!("updated"), "{t}");
    // the same bytes again carry a stale version now
    let (code, body) = raw(
        &parent,
        "PUT",
        &shadow_cm,
        "application/vnd.kubernetes.protobuf",
        encoded,
    )
    .await;
    assert_eq!(code, 409, "stale protobuf PUT: {body}");

    delete_manifests(
        &parent,
        &[
            format!("namespaces.{ns}"),
            format!("namespaces.{}", existing.name),
            format!("configmaps.{ns}.cfg"),
            format!("deployments.{ns}.web"),
        ],
    )
    .await;
}

/// `ConfigMap <ns>/<name>` with `data.greeting: updated` and `resourceVersion`, protobuf-encoded
/// by the parent itself (a dry-run create in the default namespace, read back as protobuf).
async fn protobuf_config_map(parent: &kube::Client, ns: &str, name: &str, rv: &str) -> Vec<u8> {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("pb-{}", uid())}, "data": {"greeting": "updated"}});
    let req = http::Request::builder()
        .method("POST")
        .uri("/api/v1/namespaces/default/configmaps?dryRun=All")
        .header("content-type", "application/json")
        .header("accept", "application/vnd.kubernetes.protobuf")
        .body(kube::client::Body::from(cm.to_string().into_bytes()))
        .expect("a request");
    let resp = parent.send(req).await.expect("the dry run");
    assert!(resp.status().is_success(), "{}", resp.status());
    use http_body_util::BodyExt;
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes().to_vec())
        .unwrap_or_default();
    let out = set_name_namespace_version(&bytes, name, ns, rv);
    let meta = clusternet::kube_ext::protobuf::read_meta(&out).expect("a protobuf ConfigMap");
    assert_eq!(
        (
            meta.name.as_str(),
            meta.namespace.as_str(),
            meta.resource_version.as_str()
        ),
        (name, ns, rv)
    );
    out
}

/// Sets metadata name/namespace/resourceVersion of a protobuf object (the crate's own editor only
/// clears and renames, so the test brings its own).
fn set_name_namespace_version(body: &[u8], name: &str, ns: &str, rv: &str) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn read_varint(buf: &[u8], pos: &mut usize) -> u64 {
        let mut v = 0u64;
        for i in 0..10 {
            let b = buf[*pos];
            *pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                break;
            }
        }
        v
    }
    fn len_field(out: &mut Vec<u8>, n: u64, payload: &[u8]) {
        varint(out, (n << 3) | 2);
        varint(out, payload.len() as u64);
        out.extend_from_slice(payload);
    }
    /// (number, wire, whole, payload) of each field; fixed-size wire types do not occur here
    fn fields(buf: &[u8]) -> Vec<(u64, u64, Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < buf.len() {
            let start = pos;
            let key = read_varint(buf, &mut pos);
            let payload = match key & 7 {
                0 => {
                    read_varint(buf, &mut pos);
                    vec![]
                }
                2 => {
                    let len = read_varint(buf, &mut pos) as usize;
                    pos += len;
                    buf[pos - len..pos].to_vec()
                }
                1 => {
                    pos += 8;
                    vec![]
                }
                5 => {
                    pos += 4;
                    vec![]
                }
                w => panic!("wire type {w}"),
            };
            out.push((key >> 3, key & 7, buf[start..pos].to_vec(), payload));
        }
        out
    }
    let mut out = body[..4].to_vec();
    for (n, w, whole, payload) in fields(&body[4..]) {
        if n != 2 || w != 2 {
            out.extend(whole);
            continue;
        }
        let mut object = Vec::new();
        for (on, ow, owhole, opayload) in fields(&payload) {
            if on != 1 || ow != 2 {
                object.extend(owhole);
                continue;
            }
            let mut meta = Vec::new();
            len_field(&mut meta, 1, name.as_bytes());
            len_field(&mut meta, 3, ns.as_bytes());
            len_field(&mut meta, 6, rv.as_bytes());
            for (mn, _, mwhole, _) in fields(&opayload) {
                if ![1, 2, 3, 6].contains(&mn) {
                    meta.extend(mwhole);
                }
            }
            len_field(&mut object, 1, &meta);
        }
        len_field(&mut out, 2, &object);
    }
    out
}

/// `kubectl describe` lists Events with an `involvedObject.*` field selector; the shadow API
/// filters the transformed objects instead of answering 500, so describe works and shows the
/// Events that belong to the object.
#[tokio::test]
async fn kubectl_clusternet_describe_and_field_selectors() {
    let _shared = HUB_LOCK.read().await;
    let env = TestEnv::get();
    env.with_hub();
    let parent = env.parent().await;
    let ns = format!("describe-{}", uid());
    let out = env.plugin_with_stdin(
        &["apply", "-f", "-"],
        Some(&deployment_yaml(&ns, "web", 2, "nginx:1.25")),
    );
    assert!(out.status.success(), "apply: {}", stderr(&out));
    let out = env.plugin(&[
        "get",
        "deploy",
        "web",
        "-n",
        &ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let web_uid = stdout(&out);
    assert!(!web_uid.is_empty());

    let event = |name: &str, object: &str, uid: &str, reason: &str| {
        format!(
            // the parent refuses an Event whose involvedObject is in another namespace than
            // the dry run's (the reserved one), so these skip the dry run
            "apiVersion: v1\nkind: Event\nmetadata: {{name: {name}, namespace: {ns}, \
             annotations: {{apps.clusternet.io/skip-validating: \"true\"}}}}\n\
             involvedObject: {{apiVersion: apps/v1, kind: Deployment, name: {object}, namespace: {ns}, uid: \"{uid}\"}}\n\
             reason: {reason}\nmessage: {reason} happened\ntype: Normal\n\
             source: {{component: test}}\nfirstTimestamp: \"2026-01-01T00:00:00Z\"\n\
             lastTimestamp: \"2026-01-01T00:00:00Z\"\ncount: 1\n"
        )
    };
    let out = env.plugin_with_stdin(
        &["apply", "-f", "-"],
        Some(&format!(
            "{}---\n{}",
            event("web.1", "web", &web_uid, "WebScaled"),
            event("api.1", "api", "other-uid", "ApiScaled")
        )),
    );
    assert!(out.status.success(), "apply events: {}", stderr(&out));

    let out = env.plugin(&["describe", "deploy", "web", "-n", &ns]);
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "describe: {e}");
    assert!(!e.contains("ERROR") && !o.contains("ERROR"), "{o}\n{e}");
    assert!(o.contains("Name:") && o.contains("web"), "{o}");
    assert!(o.contains("nginx:1.25"), "{o}");
    assert!(o.contains("WebScaled"), "its own Event: {o}");
    assert!(!o.contains("ApiScaled"), "another object's Event: {o}");

    // field selectors on lists, other than metadata.name
    let out = env.plugin(&[
        "get",
        "events",
        "-n",
        &ns,
        "--field-selector",
        "involvedObject.name=api",
        "-o",
        "name",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "event/api.1");
    let out = env.plugin(&[
        "get",
        "events",
        "-n",
        &ns,
        "--field-selector",
        "involvedObject.name!=api,metadata.namespace="
            .to_string()
            .as_str(),
        "-o",
        "name",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "",
        "namespaced Events have a namespace"
    );
    let out = env.plugin(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        &format!("metadata.namespace={ns},reason=WebScaled"),
        "-o",
        "name",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "event/web.1");
    // and on watches: only the matching object's events arrive
    let shadow_events = kube::api::ApiResource {
        group: "shadow".into(),
        version: "v1alpha1".into(),
        api_version: "shadow/v1alpha1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    };
    let events: Api<kube::api::DynamicObject> =
        Api::namespaced_with(parent.clone(), &ns, &shadow_events);
    let wp = kube::api::WatchParams::default()
        .fields("involvedObject.name=api")
        .timeout(3);
    let stream = events.watch(&wp, "0").await.expect("a shadow watch");
    use futures::StreamExt;
    let seen: Vec<String> = stream
        .filter_map(|ev| async move {
            match ev {
                Ok(kube::api::WatchEvent::Added(o)) => o.metadata.name,
                _ => None,
            }
        })
        .collect()
        .await;
    assert_eq!(seen, vec!["api.1".to_string()]);

    // a malformed selector is the caller's mistake, not the server's
    let (code, body) = raw(
        &parent,
        "GET",
        &format!("/apis/shadow/v1alpha1/namespaces/{ns}/events?fieldSelector=involvedObject.name"),
        "application/json",
        vec![],
    )
    .await;
    assert_eq!(code, 400, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    assert_eq!(status["kind"], json!("Status"), "{body}");
    assert_eq!(status["reason"], json!("BadRequest"), "{body}");

    delete_manifests(
        &parent,
        &[
            format!("deployments.{ns}.web"),
            format!("events.{ns}.web.1"),
            format!("events.{ns}.api.1"),
        ],
    )
    .await;
}

/// A wrong `--cluster-id`: kubectl's discovery would only say "the server rejected our request
/// for an unknown reason"; the plugin shows the hub's own message instead.
#[tokio::test]
async fn a_wrong_cluster_id_gets_the_hubs_message() {
    let _shared = HUB_LOCK.read().await;
    let env = TestEnv::get();
    env.with_hub();
    let bogus = format!("bogus-{}", uid());
    let out = env.plugin(&[
        &format!("--cluster-id={bogus}"),
        &format!("--child-kubeconfig={}", env.child_kubeconfig(1).display()),
        "get",
        "pods",
    ]);
    let e = stderr(&out);
    assert!(!out.status.success(), "{e}");
    assert!(e.contains(&format!("no cluster id is {bogus}")), "{e}");
    assert!(!e.contains("unknown reason"), "{e}");
    // commands that do not call the server still work
    let out = env.plugin(&[
        &format!("--cluster-id={bogus}"),
        &format!("--child-kubeconfig={}", env.child_kubeconfig(1).display()),
        "get",
        "--help",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Issue #44: every dry run through the shadow API (kubectl clusternet diff, apply, patch,
/// replace, scale and delete with `--dry-run=server`) answers what would be stored and stores
/// nothing: the Manifest keeps its resourceVersion and template, and the Deployment a
/// Subscription put in a child keeps its spec and generation.
#[tokio::test]
async fn dry_runs_through_the_shadow_api_change_nothing_anywhere() {
    let _shared = HUB_LOCK.read().await;
    let env = TestEnv::get();
    env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let ns = format!("dry-{id}");
    let clusters = register(env, &id, &[2], "Pull", &[]).await;
    let c = &clusters[0];
    let app = |replicas: i32, image: &str| {
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n{}",
            deployment_yaml(&ns, "web", replicas, image)
        )
    };
    let out = env.plugin_with_stdin(&["apply", "-f", "-"], Some(&app(3, "nginx:1.25")));
    assert!(out.status.success(), "apply: {}", stderr(&out));
    let subs_ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "drysubs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &subs_ns.name);
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
        "metadata": {"name": "web"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
            "feeds": [{"apiVersion": "v1", "kind": "Namespace", "name": ns},
                      {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns, "name": "web"}]}
    }))
    .expect("a Subscription");
    subs.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(c.child.clone(), &ns);
    let child_state = || async {
        let d = deployments.get("web").await.map_err(|e| e.to_string())?;
        let replicas = d.spec.as_ref().and_then(|s| s.replicas);
        let image = d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.image.clone());
        Ok::<_, String>((replicas, image, d.metadata.generation))
    };
    let before = wait_for(
        "the Deployment in the child",
        Duration::from_secs(60),
        || async {
            match child_state().await? {
                s @ (Some(3), _, _) => Ok(s),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let name = format!("deployments.{ns}.web");
    let stored = manifest(&parent, &name).await.expect("the Manifest");
    let stored_rv = stored.metadata.resource_version.clone();
    let stored_template = template_of(&stored);
    let unchanged = |what: &str, m: Option<Manifest>| {
        let m = m.unwrap_or_else(|| panic!("{what} deleted the Manifest"));
        assert_eq!(
            m.metadata.resource_version, stored_rv,
            "{what} wrote the Manifest"
        );
        assert_eq!(
            template_of(&m),
            stored_template,
            "{what} changed the template"
        );
    };

    // kubectl diff: the change it would make, nothing made (exit code 1: differences found)
    let out = env.plugin_with_stdin(&["diff", "-f", "-"], Some(&app(9, "nginx:1.27")));
    let diff = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "diff: {diff}{}", stderr(&out));
    for (sign, text) in [
        ('-', "replicas: 3"),
        ('+', "replicas: 9"),
        ('-', "image: nginx:1.25"),
        ('+', "image: nginx:1.27"),
    ] {
        assert!(
            diff.lines()
                .any(|l| l.starts_with(sign) && l.trim_end().ends_with(text)),
            "diff lacks a {sign} line with {text:?}:\n{diff}"
        );
    }
    unchanged("kubectl diff", manifest(&parent, &name).await);

    let dry = "--dry-run=server";
    let runs: Vec<(&str, Vec<&str>, Option<String>)> = vec![
        (
            "apply",
            vec!["apply", dry, "-f", "-"],
            Some(app(9, "nginx:1.27")),
        ),
        (
            "server-side apply",
            vec!["apply", "--server-side", dry, "-f", "-"],
            Some(app(9, "nginx:1.27")),
        ),
        (
            "json patch",
            vec![
                "patch",
                "deploy",
                "web",
                "-n",
                &ns,
                dry,
                "--type=json",
                "-p",
                r#"[{"op":"replace","path":"/spec/replicas","value":9}]"#,
            ],
            None,
        ),
        (
            "merge patch",
            vec![
                "patch",
                "deploy",
                "web",
                "-n",
                &ns,
                dry,
                "--type=merge",
                "-p",
                r#"{"spec":{"replicas":9}}"#,
            ],
            None,
        ),
        (
            "strategic merge patch",
            vec![
                "patch",
                "deploy",
                "web",
                "-n",
                &ns,
                dry,
                "--type=strategic",
                "-p",
                r#"{"spec":{"replicas":9}}"#,
            ],
            None,
        ),
        (
            "replace",
            vec!["replace", dry, "-f", "-"],
            Some(deployment_yaml(&ns, "web", 9, "nginx:1.27")),
        ),
        (
            "scale",
            vec!["scale", "deploy/web", "-n", &ns, "--replicas=9", dry],
            None,
        ),
        (
            "delete",
            vec!["delete", "deploy", "web", "-n", &ns, dry],
            None,
        ),
    ];
    for (what, args, input) in &runs {
        let out = env.plugin_with_stdin(args, input.as_deref());
        // (kubectl 1.36's patch drops its "(server dry run)" suffix, so the output is not checked)
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        unchanged(what, manifest(&parent, &name).await);
    }
    // the answer is what would have been stored
    let out = env.plugin(&[
        "patch",
        "deploy",
        "web",
        "-n",
        &ns,
        dry,
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":7}}"#,
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(stdout(&out), "7", "{}", stderr(&out));
    // an unknown dry-run value is refused, not taken for a write
    let (code, body) = raw(
        &parent,
        "PATCH",
        &format!("/apis/shadow/v1alpha1/namespaces/{ns}/deployments/web?dryRun=Yes"),
        "application/merge-patch+json",
        br#"{"spec":{"replicas":9}}"#.to_vec(),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("Unsupported value"), "{body}");
    unchanged("all the dry runs", manifest(&parent, &name).await);

    // nothing reached the child
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        assert_eq!(
            child_state().await.as_ref(),
            Ok(&before),
            "the child's Deployment changed after dry runs"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    subs.delete("web", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    support::wait_app_removed(&c.child, &ns).await;
    let out = env.plugin(&["delete", "deploy", "web", "-n", &ns]);
    assert!(out.status.success(), "delete: {}", stderr(&out));
    let out = env.plugin(&["delete", "namespace", &ns]);
    assert!(out.status.success(), "delete: {}", stderr(&out));
}
