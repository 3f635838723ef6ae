//! Upstream's example scenarios (docs/spec/cli.md §3), kept in `tests/scenarios/`, are accepted
//! by a real parent API server once `clusternet crds` is installed: every file passes a server-side
//! dry run without the server dropping any Clusternet field, bad enum values are rejected naming
//! the field, and kubectl's discovery features (explain, the `clusternet` category) work.

mod support;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use support::{TestEnv, TestNamespace, wait_for};

/// The scenario folders, one per upstream example (cli.md §3); each must be present.
const SCENARIOS: &[&str] = &[
    "replication-scheduling",
    "static-dividing-scheduling",
    "dynamic-dividing-scheduling",
    "scheduling-group",
    "scheduling-with-mcs-api",
    "scheduling-with-nfd/day0",
    "scheduling-with-nfd/day1",
    "fieldpatch",
    "oci",
    "private-repo",
];

/// API groups whose objects must come back from the server exactly as written (no pruning).
const CHECKED_GROUPS: &[&str] = &[
    "apps.clusternet.io/",
    "clusters.clusternet.io/",
    "multicluster.x-k8s.io/",
];

fn scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios")
}

fn kubectl_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| TestEnv::get().bin("kubectl"))
}

/// Runs kubectl against the parent, feeding `stdin` if given. Its discovery cache is this test
/// binary's own: kubectl keeps one per API server in the home directory for hours, and an
/// aggregated API a test binary served before (the hub's placementreviews, say) would still be
/// listed in the `clusternet` category after that binary removed it.
fn kubectl(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let env = TestEnv::get();
    let mut child = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(env.parent_kubeconfig())
        .arg("--cache-dir")
        .arg(
            env.dir
                .join(format!("kubectl-cache-{}", std::process::id())),
        )
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running kubectl");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("kubectl stdin")
            .write_all(input)
            .expect("writing to kubectl");
    }
    child.wait_with_output().expect("waiting for kubectl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Installs every CRD of `clusternet crds` into the parent the way a user does, once per test
/// binary, and waits until each is Established. The CRDs are the shared installation that other
/// test binaries install the same way (idempotently), so they are not removed afterwards.
fn install_crds() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let crds = Command::new(env!("CARGO_BIN_EXE_clusternet"))
            .arg("crds")
            .output()
            .expect("running clusternet crds");
        assert!(
            crds.status.success(),
            "clusternet crds failed: {}",
            text(&crds.stderr)
        );
        let applied = kubectl(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&crds.stdout),
        );
        assert!(
            applied.status.success(),
            "installing the CRDs failed:\n{}",
            text(&applied.stderr)
        );
        let names: Vec<String> = yaml_docs(&text(&crds.stdout))
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .map(|d| format!("crd/{}", d["metadata"]["name"].as_str().unwrap_or_default()))
            .collect();
        assert!(
            names.contains(&"crd/subscriptions.apps.clusternet.io".to_string()),
            "clusternet crds has no Subscription CRD: {names:?}"
        );
        let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        args.extend(names.iter().map(String::as_str));
        let waited = kubectl(&args, None);
        assert!(
            waited.status.success(),
            "CRDs not Established:\n{}{}",
            text(&waited.stdout),
            text(&waited.stderr)
        );
    });
}

/// Every YAML document of a (multi-document) file as JSON; empty documents are skipped.
fn yaml_docs(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| {
            let v: Value = serde::Deserialize::deserialize(d).expect("valid YAML");
            v
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn scenario_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("reading tests/scenarios") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&scenarios_dir(), &mut files);
    files.sort();
    files
}

/// Namespaces that the test created because the examples need them and removes again, waiting
/// until they are gone (only those it created: an existing one is left alone).
struct ExampleNamespaces {
    created: Vec<String>,
}

impl ExampleNamespaces {
    fn ensure(names: &BTreeSet<String>) -> ExampleNamespaces {
        let listed = kubectl(&["get", "namespaces", "-o", "name"], None);
        assert!(listed.status.success(), "{}", text(&listed.stderr));
        let existing = text(&listed.stdout);
        let created: Vec<String> = names
            .iter()
            .filter(|ns| !existing.lines().any(|l| l == format!("namespace/{ns}")))
            .cloned()
            .collect();
        let guard = ExampleNamespaces { created };
        if !guard.created.is_empty() {
            let yaml: String = guard
                .created
                .iter()
                .map(|ns| {
                    format!(
                        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{clusternet.io/test: \"true\"}}\n---\n"
                    )
                })
                .collect();
            let made = kubectl(&["create", "-f", "-"], Some(yaml.as_bytes()));
            assert!(
                made.status.success(),
                "creating namespaces {:?}: {}",
                guard.created,
                text(&made.stderr)
            );
        }
        guard
    }
}

impl Drop for ExampleNamespaces {
    fn drop(&mut self) {
        if self.created.is_empty() {
            return;
        }
        let mut args = vec![
            "delete",
            "namespace",
            "--ignore-not-found",
            "--wait=true",
            "--timeout=90s",
        ];
        args.extend(self.created.iter().map(String::as_str));
        let out = kubectl(&args, None);
        if !out.status.success() {
            eprintln!(
                "cleaning up namespaces {:?}: {}",
                self.created,
                text(&out.stderr)
            );
        }
    }
}

/// Where `want` is not contained in `got` (every key/element of `want` present with the same
/// value), as a JSON-pointer-like path; None when it is.
fn missing(want: &Value, got: &Value, path: &str) -> Option<String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w.iter().find_map(|(k, wv)| match g.get(k) {
            Some(gv) => missing(wv, gv, &format!("{path}/{k}")),
            None => Some(format!("{path}/{k} was dropped")),
        }),
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => w
            .iter()
            .zip(g)
            .enumerate()
            .find_map(|(i, (wv, gv))| missing(wv, gv, &format!("{path}/{i}"))),
        (w, g) if w == g => None,
        (w, g) => Some(format!("{path}: wrote {w}, server returned {g}")),
    }
}

/// The objects a `kubectl ... -o json` printed: one object, or the items of a List.
fn returned_objects(stdout: &[u8]) -> Vec<Value> {
    let v: Value = serde_json::from_slice(stdout).expect("kubectl -o json prints JSON");
    if v["kind"] == "List" {
        v["items"].as_array().cloned().unwrap_or_default()
    } else {
        vec![v]
    }
}

fn find_returned<'a>(objects: &'a [Value], doc: &Value) -> Option<&'a Value> {
    objects.iter().find(|o| {
        o["kind"] == doc["kind"]
            && o["apiVersion"] == doc["apiVersion"]
            && o["metadata"]["name"] == doc["metadata"]["name"]
    })
}

#[test]
fn every_example_scenario_passes_a_server_dry_run() {
    let dir = scenarios_dir();
    for scenario in SCENARIOS {
        assert!(
            dir.join(scenario).is_dir(),
            "tests/scenarios/{scenario} is missing"
        );
    }
    let files = scenario_files();
    let docs: Vec<(PathBuf, Vec<Value>)> = files
        .iter()
        .map(|f| {
            let yaml = std::fs::read_to_string(f).expect("reading a scenario");
            (f.clone(), yaml_docs(&yaml))
        })
        .collect();

    install_crds();
    // A server-side dry run does not create anything, so an object in a namespace that does not
    // exist yet is rejected ("namespaces \"foo\" not found") even when the same file carries that
    // Namespace. The namespaces the examples put objects into are therefore created for real.
    let namespaces: BTreeSet<String> = docs
        .iter()
        .flat_map(|(_, d)| d.iter())
        .filter_map(|d| d["metadata"]["namespace"].as_str().map(str::to_string))
        .collect();
    let _namespaces = ExampleNamespaces::ensure(&namespaces);

    let mut failures = Vec::new();
    let mut checked = 0;
    for (file, docs) in &docs {
        let rel = file
            .strip_prefix(&dir)
            .unwrap_or(file)
            .display()
            .to_string();
        let path = file.to_string_lossy();
        let out = kubectl(
            &["apply", "--dry-run=server", "-o", "json", "-f", &path],
            None,
        );
        if !out.status.success() {
            failures.push(format!(
                "{rel}: kubectl apply --dry-run=server failed:\n{}",
                text(&out.stderr)
            ));
            continue;
        }
        let returned = returned_objects(&out.stdout);
        for doc in docs {
            let what = format!(
                "{rel}: {} {}",
                doc["kind"].as_str().unwrap_or("?"),
                doc["metadata"]["name"].as_str().unwrap_or("?")
            );
            let Some(got) = find_returned(&returned, doc) else {
                failures.push(format!("{what}: not in kubectl's output"));
                continue;
            };
            let api_version = doc["apiVersion"].as_str().unwrap_or_default();
            if !CHECKED_GROUPS.iter().any(|g| api_version.starts_with(g)) {
                continue;
            }
            checked += 1;
            for part in ["spec", "data"] {
                if let Some(problem) = missing(&doc[part], &got[part], &format!("/{part}")) {
                    failures.push(format!("{what}: {problem}"));
                }
            }
            if let Some(problem) = missing(
                &doc["metadata"]["labels"],
                &got["metadata"]["labels"],
                "/metadata/labels",
            ) {
                failures.push(format!("{what}: {problem}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} problem(s) with the example scenarios:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        checked >= 20,
        "only {checked} Clusternet/MCS objects were checked; were scenario files lost?"
    );
}

#[test]
fn the_server_fills_in_the_documented_defaults() {
    install_crds();
    let file = scenarios_dir().join("replication-scheduling/subscription.yaml");
    let out = kubectl(
        &[
            "apply",
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            &file.to_string_lossy(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sub = &returned_objects(&out.stdout)[0];
    assert_eq!(sub["spec"]["schedulerName"], "default", "{sub:#}");
    assert_eq!(sub["spec"]["schedulingStrategy"], "Replication", "{sub:#}");

    // A Localization without priority/overridePolicy gets 500 / ApplyLater; Static dividing is
    // the default dividing type. Dry runs in the default namespace: nothing is created.
    let yaml = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata: {name: defaults-check, namespace: default}
spec:
  feed: {apiVersion: apps/v1, kind: Deployment, namespace: foo, name: my-nginx}
  overrides:
    - {name: one, type: MergePatch, value: '{"metadata":{"labels":{"a":"b"}}}'}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: defaults-check, namespace: default}
spec:
  schedulingStrategy: Dividing
  dividingScheduling: {}
  subscribers: [{clusterAffinity: {}}]
  feeds: [{apiVersion: v1, kind: Namespace, name: foo}]
"#;
    let out = kubectl(
        &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
        Some(yaml.as_bytes()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let objects = returned_objects(&out.stdout);
    let loc = objects
        .iter()
        .find(|o| o["kind"] == "Localization")
        .expect("the Localization");
    assert_eq!(loc["spec"]["priority"], 500, "{loc:#}");
    assert_eq!(loc["spec"]["overridePolicy"], "ApplyLater", "{loc:#}");
    let sub = objects
        .iter()
        .find(|o| o["kind"] == "Subscription")
        .expect("the Subscription");
    assert_eq!(
        sub["spec"]["dividingScheduling"]["type"], "Static",
        "{sub:#}"
    );
}

#[tokio::test]
async fn a_subscription_with_a_bad_enum_value_is_rejected_naming_the_field() {
    install_crds();
    let env = TestEnv::get();
    let parent = env.parent().await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "badenum").await;
    let name = format!(
        "sideways-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let yaml = format!(
        r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {{name: {name}, namespace: {ns}}}
spec:
  schedulingStrategy: Sideways
  dividingScheduling: {{type: Sometimes}}
  subscribers:
    - clusterAffinity: {{matchLabels: {{clusters.clusternet.io/cluster-name: east}}}}
  feeds:
    - {{apiVersion: v1, kind: Namespace, name: web}}
"#,
        ns = ns.name
    );
    let out = kubectl(&["apply", "-f", "-"], Some(yaml.as_bytes()));
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "the server accepted it:\n{}",
        text(&out.stdout)
    );
    for needle in [
        "spec.schedulingStrategy",
        "\"Sideways\"",
        "\"Replication\", \"Dividing\"",
        "spec.dividingScheduling.type",
        "\"Sometimes\"",
    ] {
        assert!(
            err.contains(needle),
            "the error does not mention {needle}:\n{err}"
        );
    }
    let get = kubectl(&["get", "subscription", &name, "-n", &ns.name], None);
    assert!(
        !get.status.success(),
        "the rejected Subscription exists anyway:\n{}",
        text(&get.stdout)
    );
}

#[tokio::test]
async fn kubectl_explain_documents_subscription_feeds() {
    install_crds();
    // The apiserver publishes a new CRD's OpenAPI a moment after it is Established.
    let out = wait_for(
        "kubectl explain subscriptions.spec.feeds",
        Duration::from_secs(60),
        || async {
            let out = kubectl(&["explain", "subscriptions.spec.feeds"], None);
            let stdout = text(&out.stdout);
            if out.status.success() && stdout.contains("FIELDS:") {
                Ok(stdout)
            } else {
                Err(format!("{stdout}{}", text(&out.stderr)))
            }
        },
    )
    .await;
    assert!(out.contains("GROUP:      apps.clusternet.io"), "{out}");
    assert!(out.contains("KIND:       Subscription"), "{out}");
    assert!(out.contains("VERSION:    v1alpha1"), "{out}");
    assert!(out.contains("FIELD: feeds <[]Object>"), "{out}");
    let description = out
        .split("DESCRIPTION:")
        .nth(1)
        .and_then(|rest| rest.split("FIELDS:").next())
        .unwrap_or_default();
    assert!(
        description.split_whitespace().count() >= 3,
        "feeds has no description:\n{out}"
    );
    let fields = out.split("FIELDS:").nth(1).unwrap_or_default();
    let lines: Vec<&str> = fields.lines().collect();
    for (field, ty) in [
        ("apiVersion", "<string> -required-"),
        ("kind", "<string> -required-"),
        ("name", "<string> -required-"),
        ("namespace", "<string>"),
    ] {
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with(&format!("{field}\t")))
            .unwrap_or_else(|| panic!("explain lists no field {field}:\n{out}"));
        assert!(lines[at].ends_with(ty), "{field} is not {ty}:\n{out}");
        let doc = lines.get(at + 1).map(|l| l.trim()).unwrap_or_default();
        assert!(
            !doc.is_empty(),
            "field {field} has no documentation:\n{out}"
        );
    }
}

#[tokio::test]
async fn kubectl_get_clusternet_lists_clusternet_objects() {
    install_crds();
    let env = TestEnv::get();
    let parent = env.parent().await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "category").await;
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let (sub, chart) = (format!("web-{suffix}"), format!("mysql-{suffix}"));
    let yaml = format!(
        r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {{name: {sub}, namespace: {ns}}}
spec:
  subscribers: [{{clusterAffinity: {{matchLabels: {{clusters.clusternet.io/cluster-name: east}}}}}}]
  feeds: [{{apiVersion: apps.clusternet.io/v1alpha1, kind: HelmChart, namespace: {ns}, name: {chart}}}]
---
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata: {{name: {chart}, namespace: {ns}}}
spec:
  repo: https://charts.bitnami.com/bitnami
  chart: mysql
  version: 9.2.0
  targetNamespace: abc
"#,
        ns = ns.name
    );
    let out = kubectl(&["apply", "-f", "-"], Some(yaml.as_bytes()));
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = kubectl(&["get", "clusternet", "-n", &ns.name], None);
    let listed = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for needle in [
        format!("subscription.apps.clusternet.io/{sub}"),
        format!("helmchart.apps.clusternet.io/{chart}"),
    ] {
        assert!(
            listed.contains(&needle),
            "`kubectl get clusternet` misses {needle}:\n{listed}"
        );
    }
    let all = kubectl(&["get", "clusternet", "-A"], None);
    assert!(all.status.success(), "{}", text(&all.stderr));

    // HelmChart's printer columns, and the category naming every Clusternet kind.
    let out = kubectl(&["get", "charts", "-n", &ns.name], None);
    let table = text(&out.stdout);
    let header = table.lines().next().unwrap_or_default();
    for col in ["NAME", "CHART", "VERSION", "REPO", "STATUS", "AGE"] {
        assert!(header.contains(col), "no {col} column:\n{table}");
    }
    assert!(
        table.contains(&chart)
            && table.contains("9.2.0")
            && table.contains("https://charts.bitnami.com/bitnami"),
        "{table}"
    );
    let out = kubectl(
        &["api-resources", "--categories=clusternet", "-o", "name"],
        None,
    );
    let resources = text(&out.stdout);
    for r in [
        "subscriptions.apps.clusternet.io",
        "bases.apps.clusternet.io",
        "descriptions.apps.clusternet.io",
        "manifests.apps.clusternet.io",
        "helmcharts.apps.clusternet.io",
        "helmreleases.apps.clusternet.io",
        "localizations.apps.clusternet.io",
        "globalizations.apps.clusternet.io",
        "feedinventories.apps.clusternet.io",
        "clusterregistrationrequests.clusters.clusternet.io",
        "managedclusters.clusters.clusternet.io",
    ] {
        assert!(
            resources.lines().any(|l| l == r),
            "{r} is not in category clusternet:\n{resources}"
        );
    }
    // The objects go with the test namespace; ask for their deletion now so that a finalizer a
    // future controller adds cannot keep the namespace around.
    let _ = kubectl(
        &[
            "delete",
            "-n",
            &ns.name,
            &format!("subscription/{sub}"),
            &format!("helmchart/{chart}"),
            "--wait=false",
        ],
        None,
    );
}
