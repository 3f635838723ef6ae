//! The Grafana dashboard (`deploy/grafana/clusternet.json`) and the alerts
//! (`deploy/prometheus/rules.yaml`) that ship with the binary: Prometheus' own `promtool` accepts
//! the rules, the dashboard takes its data source as `${DS_PROMETHEUS}`, and every series either
//! queries is one the binary exports (or a recording rule of the same file).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Every `.rs` file under `src/`, as one text.
fn sources() -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).expect("reading src").flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    let mut out = String::new();
    walk(&repo("src"), &mut out);
    out
}

/// The series names in a PromQL expression: the identifiers of this project's families.
fn series_in(expr: &str) -> BTreeSet<String> {
    const FAMILIES: &[&str] = &[
        "clusternet_",
        "controller_runtime_",
        "workqueue_",
        "rest_client_",
        "process_",
        "clusternet:",
    ];
    let mut out = BTreeSet::new();
    let mut token = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            token.push(c);
            continue;
        }
        if FAMILIES.iter().any(|f| token.starts_with(f)) {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| token.strip_suffix(s))
                .unwrap_or(&token);
            out.insert(base.to_string());
        }
        token.clear();
    }
    out
}

fn rules() -> Value {
    let text = std::fs::read_to_string(repo("deploy/prometheus/rules.yaml")).expect("the rules");
    serde_yaml::from_str(&text).expect("the rules are YAML")
}

/// Whether the binary exports `name`: a metric macro's literal, or a line a scrape-time collector
/// writes.
fn exported(src: &str, name: &str) -> bool {
    src.contains(&format!("\"{name}\"")) || src.contains(&format!("{name}{{{{"))
}

#[test]
fn every_queried_series_is_exported() {
    let src = sources();
    let rules = rules();
    let groups = rules["spec"]["groups"].as_array().expect("spec.groups");
    let mut recorded = BTreeSet::new();
    let mut exprs: Vec<String> = Vec::new();
    for g in groups {
        for r in g["rules"].as_array().expect("rules") {
            if let Some(name) = r["record"].as_str() {
                recorded.insert(name.to_string());
            }
            exprs.push(r["expr"].as_str().expect("an expr").to_string());
        }
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("deploy/grafana/clusternet.json")).expect("the dashboard"),
    )
    .expect("the dashboard is JSON");
    assert!(
        dashboard["__inputs"]
            .as_array()
            .is_some_and(|i| i.iter().any(|i| i["name"] == "DS_PROMETHEUS")),
        "the dashboard asks for its data source"
    );
    let mut panels = 0;
    for p in dashboard["panels"].as_array().expect("panels") {
        if p["type"] == "row" {
            continue;
        }
        panels += 1;
        assert_eq!(
            p["datasource"]["uid"], "${DS_PROMETHEUS}",
            "panel {} reads another data source",
            p["title"]
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} queries nothing", p["title"]);
        for t in targets {
            exprs.push(t["expr"].as_str().expect("an expr").to_string());
        }
    }
    assert!(panels >= 10, "{panels} panels");
    let mut queried = BTreeSet::new();
    for e in &exprs {
        let names = series_in(e);
        assert!(!names.is_empty(), "{e} queries none of Clusternet's series");
        queried.extend(names);
    }
    let missing: Vec<&String> = queried
        .iter()
        .filter(|n| !recorded.contains(*n) && !exported(&src, n))
        .collect();
    assert!(missing.is_empty(), "queried but not exported: {missing:?}");
}

#[test]
fn promtool_accepts_the_rules() {
    let bin = k8s_bin();
    let dir = tempfile::tempdir().expect("a directory");
    // promtool reads plain rule files: the PrometheusRule's spec is one
    let file = dir.path().join("rules.yaml");
    std::fs::write(
        &file,
        serde_yaml::to_string(&rules()["spec"]).expect("YAML"),
    )
    .expect("writing the rule file");
    let check = Command::new(bin.join("promtool"))
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool (built by tests/env/k8s-bin.sh)");
    assert!(
        check.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn series_names_are_found_in_queries() {
    assert_eq!(
        series_in(
            "histogram_quantile(0.99, sum by (le) (rate(workqueue_queue_duration_seconds_bucket[5m])))"
        ),
        BTreeSet::from(["workqueue_queue_duration_seconds".to_string()])
    );
    assert_eq!(
        series_in(
            "clusternet:x:ratio_rate5m > (14.4 * 0.01) and clusternet_clusters{state=\"Ready\"}"
        ),
        BTreeSet::from([
            "clusternet:x:ratio_rate5m".to_string(),
            "clusternet_clusters".to_string()
        ])
    );
}

/// The Kubernetes binaries' directory (kubectl, krew, promtool), built or reused by k8s-bin.sh.
fn k8s_bin() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo("tests/env/k8s-bin.sh"))
        .output()
        .expect("tests/env/k8s-bin.sh");
    assert!(
        out.status.success(),
        "k8s-bin.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default(),
    )
}

/// `just dist`'s archive installed by a real krew, as `kubectl krew install --manifest
/// --archive` does before a release reaches the index; then `kubectl clusternet version` runs.
#[test]
fn krew_installs_the_plugin_from_the_release_archive() {
    let bin = k8s_bin();
    let dir = tempfile::tempdir().expect("a directory");
    let dist = dir.path().join("dist");
    let made = Command::new("bash")
        .arg(repo("tests/env/dist.sh"))
        .arg(env!("CARGO_BIN_EXE_clusternet"))
        .arg(&dist)
        .output()
        .expect("dist.sh");
    assert!(
        made.status.success(),
        "dist.sh: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let manifest = std::fs::read_to_string(dist.join("clusternet.yaml")).expect("the manifest");
    assert!(!manifest.contains('@'), "placeholders left in:\n{manifest}");
    // kubectl finds krew as the plugin kubectl-krew
    let path_dir = dir.path().join("path");
    std::fs::create_dir_all(&path_dir).expect("a PATH directory");
    std::os::unix::fs::symlink(bin.join("krew"), path_dir.join("kubectl-krew"))
        .expect("linking kubectl-krew");
    let krew_root = dir.path().join("krew");
    let path = format!(
        "{}:{}:{}:{}",
        krew_root.join("bin").display(),
        path_dir.display(),
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = |args: &[&str]| {
        Command::new(bin.join("kubectl"))
            .args(args)
            .env("PATH", &path)
            .env("KREW_ROOT", &krew_root)
            .env("HOME", dir.path())
            .env_remove("KUBECONFIG")
            .output()
            .expect("kubectl")
    };
    let install = kubectl(&[
        "krew",
        "install",
        &format!("--manifest={}", dist.join("clusternet.yaml").display()),
        &format!(
            "--archive={}",
            dist.join("kubectl-clusternet_linux_amd64.tar.gz").display()
        ),
    ]);
    assert!(
        install.status.success(),
        "krew install: {}{}",
        String::from_utf8_lossy(&install.stdout),
        String::from_utf8_lossy(&install.stderr)
    );
    let version = kubectl(&["clusternet", "version"]);
    let text = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.status.success() && text.contains(env!("CARGO_PKG_VERSION")),
        "kubectl clusternet version: {text}{}",
        String::from_utf8_lossy(&version.stderr)
    );
}
