//! The install manifests in `deploy/overlays/{parent,child,all-in-one}` render with kubectl's
//! built-in kustomize, contain what each kind of cluster needs, and are accepted by a real API
//! server (`kubectl apply --dry-run=server -k ...`).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;
use support::TestEnv;

/// The namespaces the overlays put objects into. A server-side dry run cannot create a Namespace
/// and then objects inside it in one go, so these are created for real first (and removed again
/// if this test created them).
const SYSTEM_NAMESPACES: &[&str] = &["clusternet-system", "clusternet-reserved", "clusternet-mcs"];

fn kubectl_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| TestEnv::get().bin("kubectl"))
}

fn kubectl(args: &[&str]) -> Output {
    Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(TestEnv::get().parent_kubeconfig())
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .expect("running kubectl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

struct CreatedNamespaces(Vec<String>);

impl CreatedNamespaces {
    fn ensure(names: &[&str]) -> CreatedNamespaces {
        let mut created = CreatedNamespaces(Vec::new());
        for ns in names {
            if kubectl(&["get", "namespace", ns, "-o", "name"])
                .status
                .success()
            {
                continue;
            }
            let out = kubectl(&["create", "namespace", ns]);
            assert!(
                out.status.success(),
                "creating namespace {ns}: {}",
                text(&out.stderr)
            );
            created.0.push(ns.to_string());
        }
        created
    }
}

impl Drop for CreatedNamespaces {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let mut args = vec![
            "delete",
            "namespace",
            "--ignore-not-found",
            "--wait=true",
            "--timeout=90s",
        ];
        args.extend(self.0.iter().map(String::as_str));
        let out = kubectl(&args);
        if !out.status.success() {
            eprintln!("cleaning up namespaces {:?}: {}", self.0, text(&out.stderr));
        }
    }
}

/// The rendered objects of an overlay.
fn render(overlay: &str) -> Result<Vec<Value>, String> {
    let out = kubectl(&["kustomize", &format!("deploy/overlays/{overlay}")]);
    if !out.status.success() {
        return Err(format!(
            "kubectl kustomize deploy/overlays/{overlay} failed:\n{}",
            text(&out.stderr)
        ));
    }
    Ok(serde_yaml::Deserializer::from_str(&text(&out.stdout))
        .map(|d| serde::Deserialize::deserialize(d).expect("kustomize prints YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect())
}

fn has(objects: &[Value], kind: &str, name: &str) -> bool {
    objects
        .iter()
        .any(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// The container args of the clusternet Deployment.
fn clusternet_args(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "clusternet")
        .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["args"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// What each overlay must install, as a user reads it off the rendered manifests.
fn check_contents(overlay: &str, objects: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut need = |ok: bool, what: &str| {
        if !ok {
            problems.push(format!("{overlay}: {what}"));
        }
    };
    let args = clusternet_args(objects);
    let role = args
        .iter()
        .find_map(|a| a.strip_prefix("--role="))
        .unwrap_or_default()
        .to_string();
    let is_parent = overlay != "child";
    let is_child = overlay != "parent";
    need(
        has(objects, "Namespace", "clusternet-system"),
        "no Namespace clusternet-system",
    );
    need(
        has(objects, "ServiceAccount", "clusternet"),
        "no ServiceAccount clusternet",
    );
    let expected_role = match overlay {
        "parent" => "hub,scheduler,controller",
        "child" => "agent",
        _ => "hub,scheduler,controller,agent",
    };
    need(
        role == expected_role,
        &format!("the Deployment runs --role={role}, expected {expected_role}"),
    );
    need(
        has(
            objects,
            "CustomResourceDefinition",
            "serviceexports.multicluster.x-k8s.io",
        ),
        "no ServiceExport CRD",
    );
    for (kind, name) in [
        (
            "CustomResourceDefinition",
            "subscriptions.apps.clusternet.io",
        ),
        (
            "CustomResourceDefinition",
            "managedclusters.clusters.clusternet.io",
        ),
        ("Namespace", "clusternet-reserved"),
        ("Namespace", "clusternet-mcs"),
        ("Service", "clusternet-hub"),
        ("APIService", "v1alpha1.shadow"),
        ("APIService", "v1alpha1.proxies.clusternet.io"),
        ("APIService", "v1alpha1.placement.clusternet.io"),
        ("APIService", "v1alpha1.dashboard.clusternet.io"),
        ("ClusterRole", "clusternet:system:bootstrapping"),
    ] {
        need(
            has(objects, kind, name) == is_parent,
            &format!(
                "{kind} {name} should {}be installed",
                if is_parent { "" } else { "not " }
            ),
        );
    }
    for (kind, name) in [
        ("ClusterRole", "clusternet:agent:admin"),
        ("ServiceAccount", "clusternet-app-deployer"),
        ("Secret", "clusternet-app-deployer"),
    ] {
        need(
            has(objects, kind, name) == is_child,
            &format!(
                "{kind} {name} should {}be installed",
                if is_child { "" } else { "not " }
            ),
        );
    }
    if is_child {
        let reg = objects.iter().any(|o| {
            o["kind"] == "Deployment"
                && serde_json::to_string(&o["spec"])
                    .unwrap_or_default()
                    .contains("\"name\":\"clusternet-agent-cluster-registration\"")
        });
        need(
            reg,
            "the agent does not read Secret clusternet-agent-cluster-registration",
        );
        need(
            args.iter()
                .any(|a| a == "--cluster-reg-parent-url=$(PARENT_URL)"),
            "the agent is not given --cluster-reg-parent-url",
        );
    }
    problems
}

#[test]
fn every_overlay_renders_and_passes_a_server_dry_run() {
    let _namespaces = CreatedNamespaces::ensure(SYSTEM_NAMESPACES);
    let mut problems = Vec::new();
    for overlay in ["parent", "child", "all-in-one"] {
        let objects = match render(overlay) {
            Ok(o) => o,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        problems.extend(check_contents(overlay, &objects));
        let dir = format!("deploy/overlays/{overlay}");
        let out = kubectl(&["apply", "--dry-run=server", "-k", &dir]);
        let stdout = text(&out.stdout);
        if !out.status.success() {
            problems.push(format!(
                "kubectl apply --dry-run=server -k {dir} failed:\n{}",
                text(&out.stderr)
            ));
            continue;
        }
        // Every rendered object is reported back by the server, none of them created for real.
        let reported = stdout
            .lines()
            .filter(|l| l.ends_with("(server dry run)"))
            .count();
        if reported != objects.len() {
            problems.push(format!(
                "{dir}: the server reported {reported} of {} objects:\n{stdout}",
                objects.len()
            ));
        }
        if !stdout.contains("deployment.apps/clusternet ") {
            problems.push(format!("{dir}: no Deployment in the dry run:\n{stdout}"));
        }
    }
    assert!(
        problems.is_empty(),
        "{} problem(s) with deploy/overlays:\n\n{}",
        problems.len(),
        problems.join("\n\n")
    );
}
