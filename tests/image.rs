//! The image, built here and run here: `tests/env/image.sh` (what `just image` runs) builds the
//! Containerfile with `buildah bud --isolation chroot` on a base made from Debian packages with
//! debootstrap, packing the binary these tests were built with (compiling a release build inside
//! the image as well would double CI's longest step), and every role then starts from the image
//! with `buildah run --isolation chroot`: the hub serves the shadow API and the tunnel, the
//! scheduler and controller bind and push, the agent registers a child.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use clusternet::apis::Subscription;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::{Launcher, TestEnv, TestNamespace, cluster_id, register_with, uid, wait_for};

/// The tests' own tag, so a run never replaces an image `just image` built.
const TAG: &str = "localhost/clusternet:test";

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn buildah(args: &[&str]) -> Output {
    Command::new("buildah")
        .args(args)
        .output()
        .expect("running buildah (tests/env/image.sh installs it)")
}

/// A working container of the image, removed again when the test ends.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = buildah(&["rm", &self.0]);
    }
}

fn build_image() {
    let out = Command::new("bash")
        .arg(repo("tests/env/image.sh"))
        .args(["--binary", env!("CARGO_BIN_EXE_clusternet"), "--tag", TAG])
        .output()
        .expect("running tests/env/image.sh");
    assert!(
        out.status.success(),
        "image.sh failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout).lines().last(),
        Some(TAG),
        "image.sh names the image"
    );
}

/// The environment's kubeconfigs and bootstrap token, owned by the image's user (they are 0600
/// root's), in a directory mounted over the environment's own path inside the container, so
/// every path the harness passes resolves there as well.
fn stage_credentials(env: &TestEnv) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut files = vec![
        "parent.kubeconfig".to_string(),
        "bootstrap-token".to_string(),
    ];
    files.extend((1..=env.children).map(|i| format!("child{i}.kubeconfig")));
    for f in &files {
        let to = dir.path().join(f);
        std::fs::copy(env.dir.join(f), &to).expect("copying a credential");
        std::os::unix::fs::chown(&to, Some(65532), Some(65532)).expect("chown (tests run as root)");
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o400)).expect("chmod");
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

#[test]
fn the_overlays_run_the_image_just_image_builds() {
    let tag = Command::new("bash")
        .arg(repo("tests/env/image.sh"))
        .arg("--print-tag")
        .output()
        .expect("image.sh --print-tag");
    let tag = text(&tag.stdout).trim().to_string();
    assert_eq!(
        tag,
        format!("localhost/clusternet:{}", env!("CARGO_PKG_VERSION"))
    );
    let kubectl = TestEnv::get().bin("kubectl");
    for overlay in ["parent", "child", "all-in-one"] {
        let out = Command::new(&kubectl)
            .args(["kustomize"])
            .arg(repo(&format!("deploy/overlays/{overlay}")))
            .output()
            .expect("kubectl kustomize");
        assert!(out.status.success(), "{overlay}: {}", text(&out.stderr));
        let images: Vec<String> = text(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image: ").map(str::to_string))
            .collect();
        assert!(!images.is_empty(), "{overlay} runs no image");
        assert!(
            images.iter().all(|i| *i == tag),
            "{overlay} runs {images:?}, just image builds {tag}"
        );
    }
}

#[tokio::test]
async fn every_role_runs_from_the_image() {
    let env = TestEnv::get();
    build_image();

    // what the image is: non-root, clusternet as the entry point, helm and CA certificates inside
    let inspect = buildah(&["inspect", "--type", "image", TAG]);
    assert!(inspect.status.success(), "{}", text(&inspect.stderr));
    let inspect: Value = serde_json::from_slice(&inspect.stdout).expect("buildah inspect JSON");
    let config = &inspect["OCIv1"]["config"];
    assert_eq!(config["User"], json!("65532:65532"), "{config}");
    assert_eq!(
        config["Entrypoint"],
        json!(["/usr/local/bin/clusternet"]),
        "{config}"
    );
    let name = format!("clusternet-image-test-{}", std::process::id());
    let _ = buildah(&["rm", &name]);
    let from = buildah(&["from", "--name", &name, TAG]);
    assert!(
        from.status.success(),
        "buildah from: {}",
        text(&from.stderr)
    );
    let ctr = Container(name);
    let run = |cmd: &[&str]| {
        let out = buildah(
            &["run", "--isolation", "chroot", &ctr.0, "--"]
                .into_iter()
                .chain(cmd.iter().copied())
                .collect::<Vec<_>>(),
        );
        assert!(
            out.status.success(),
            "{cmd:?} in the image: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    assert_eq!(run(&["id", "-u"]).trim(), "65532", "runs as non-root");
    assert!(run(&["/usr/local/bin/helm", "version", "--short"]).starts_with("v3."));
    assert!(
        run(&["/usr/local/bin/clusternet", "version"]).contains(env!("CARGO_PKG_VERSION")),
        "clusternet in the image is this build"
    );
    run(&["test", "-s", "/etc/ssl/certs/ca-certificates.crt"]);

    // every role from the image, against the test environment's API servers
    let staged = stage_credentials(env);
    Launcher::use_image(&ctr.0, &[(staged.path(), &env.dir)]);
    let hub = env.with_hub();
    let helm = "--helm-binary=/usr/local/bin/helm";
    let controller = env.with_controller_args(&[helm]);
    let parent = env.parent().await;
    let id = uid();
    let clusters = register_with(env, &id, &[1], "Push", &[], &[helm]).await;
    let c = &clusters[0];

    // the hub: the tunnel the agent opened carries a request into the child
    let path = format!(
        "/apis/proxies.clusternet.io/v1alpha1/sockets/{}/proxy/direct/version",
        cluster_id(&parent, c).await
    );
    wait_for(
        "the tunnel from the image's agent through the image's hub",
        Duration::from_secs(30),
        || async {
            let req = http::Request::get(&path)
                .body(Vec::new())
                .map_err(|e| e.to_string())?;
            let body = parent.request_text(req).await.map_err(|e| e.to_string())?;
            body.contains("gitVersion").then_some(()).ok_or(body)
        },
    )
    .await;

    // the shadow API stores a plain object; the scheduler binds, the controller pushes it
    let appns = format!("img-{id}");
    let cm = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {appns}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-image\n  namespace: {appns}\ndata:\n  built: here\n"
    );
    let out = env.plugin_with_stdin(&["apply", "-f", "-"], Some(&cm));
    assert!(
        out.status.success(),
        "apply through the shadow API: {}",
        text(&out.stderr)
    );
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "img").await;
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
        "metadata": {"name": "from-image"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
                 "feeds": [{"apiVersion": "v1", "kind": "Namespace", "name": appns},
                           {"apiVersion": "v1", "kind": "ConfigMap", "name": "from-image", "namespace": appns}]}
    }))
    .expect("a Subscription");
    Api::<Subscription>::namespaced(parent.clone(), &ns.name)
        .create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    let cms: Api<ConfigMap> = Api::namespaced(c.child.clone(), &appns);
    wait_for(
        "the ConfigMap pushed into the child",
        Duration::from_secs(60),
        || async {
            let cm = cms
                .get_opt("from-image")
                .await
                .map_err(|e| e.to_string())?
                .ok_or("not there yet")?;
            let built = cm.data.and_then(|d| d.get("built").cloned());
            (built.as_deref() == Some("here"))
                .then_some(())
                .ok_or(format!("{built:?}"))
        },
    )
    .await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let bound = subs
        .get("from-image")
        .await
        .expect("the Subscription")
        .status
        .map(|s| s.binding_clusters)
        .unwrap_or_default();
    assert!(
        bound.len() == 1 && bound[0].starts_with(&format!("{}/", c.dedicated)),
        "bound to the image agent's cluster: {bound:?}"
    );
    assert!(
        controller
            .metric("controller_runtime_reconcile_total{")
            .await
            .unwrap_or(0.0)
            > 0.0,
        "the image's controller serves its metrics"
    );
    assert!(
        hub.metric("clusternet_socket_connections_count")
            .await
            .unwrap_or(0.0)
            >= 1.0,
        "the image's hub counts the agent's tunnel"
    );
    // the feeds are protected while a Subscription uses them (feed-protection): the
    // Subscription goes first, then the Manifests stop blocking
    let _ = subs.delete("from-image", &Default::default()).await;
    for args in [
        ["configmap", "from-image", "-n", appns.as_str()].as_slice(),
        ["namespace", appns.as_str()].as_slice(),
    ] {
        let _ = env.plugin(&[&["delete", "--wait=false"], args].concat());
    }
}
