//! Faults in the middle of a rollout (issue #21), against real control planes: a load of
//! Subscriptions over three children (Pull, Push, Pull) is being rolled out when one fault hits at
//! a random moment; while it lasts, some feeds change and some Subscriptions are deleted; when it
//! ends, the suite waits for the invariants below and records how long that took:
//!
//! - every Subscription's object exists in exactly its bound children, with the spec its feed has
//!   now, and the Description for that cluster says the same;
//! - no object was deleted (or re-created) in a child that stayed bound: its UID is the one it had
//!   when the fault began;
//! - no duplicates and no leftovers: one Base and one Description per Subscription per cluster,
//!   none (and no object in any child) for the deleted Subscriptions;
//! - no process panicked.
//!
//! The cases here run in `just test` (CI): kill -9 of the parent process (hub, scheduler and
//! controller in one) restarted at once, kill -9 of a Pull agent restarted at once, and a Pull
//! child's link to the parent cut for 30 s. `just chaos` runs them with a larger load and the
//! longer cases (`#[ignore]` here), and prints the table of case, convergence and invariants.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use clusternet::apis::{Base, Description, Manifest, Subscription, known};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use rand::Rng;
use rand::seq::IndexedRandom;
use serde_json::json;
use support::{
    Cluster, Clusternet, FaultProxy, Link, Netns, TestEnv, TestNamespace, free_port, uid,
};

/// One case at a time: each owns the parent's leader Leases and kills processes.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Subscriptions per case: `CLUSTERNET_CHAOS_SUBSCRIPTIONS` (`just chaos` sets 100).
fn load_size() -> usize {
    support::env_or("CLUSTERNET_CHAOS_SUBSCRIPTIONS", 30)
}

/// Every case must converge within this long after its fault ends (the goal is 30 s for process
/// faults and 60 s after a partition; the figure is printed and kept in the report).
const CONVERGE_LIMIT: Duration = Duration::from_secs(120);

// ---- the parent process ----

/// The parent roles in one process (`--role=hub,scheduler,controller`), with production-like
/// timings (a 60 s fail-over grace: a child that is cut off for 30 s keeps its share), registered
/// with the parent's aggregator on a fixed port so that a restart serves the same APIServices.
struct Parent {
    roles: String,
    port: u16,
    process: Option<Clusternet>,
    logs: Vec<PathBuf>,
}

impl Parent {
    fn start(env: &TestEnv, roles: &str) -> Parent {
        let port = free_port();
        let mut p = Parent {
            roles: roles.to_string(),
            port,
            process: None,
            logs: Vec::new(),
        };
        p.run(env);
        if roles.contains("hub") {
            register_hub(env, port);
        }
        p
    }

    fn run(&mut self, env: &TestEnv) {
        let args = [
            format!("--role={}", self.roles),
            format!("--kubeconfig={}", env.parent_kubeconfig().display()),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={}", self.port),
            "--leader-elect-lease-duration=4s".to_string(),
            "--leader-elect-renew-deadline=3s".to_string(),
            "--leader-elect-retry-period=500ms".to_string(),
            // fail-back damping shortened from 5 min so that a long partition's case ends
            "--cluster-failback-stable=20s".to_string(),
            format!("--helm-binary={}", env.bin("helm").display()),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let p = Clusternet::start("chaos-parent", &args);
        self.logs.push(p.log.clone());
        self.process = Some(p);
    }

    /// Waits until this process leads the scheduler and the controller roles.
    async fn until_leading(&self) {
        let process = self.process.as_ref().expect("a running parent");
        support::wait_for(
            "the first parent replica to lead",
            Duration::from_secs(60),
            || async {
                let mut missing = Vec::new();
                for role in ["scheduler", "controller"] {
                    let line = format!("clusternet_leader_election_is_leader{{role=\"{role}\"}}");
                    if process.metric(&line).await != Some(1.0) {
                        missing.push(role);
                    }
                }
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(format!("not leading {missing:?} yet"))
                }
            },
        )
        .await;
    }

    /// SIGKILL: no shutdown hook runs, Leases stay held until they expire.
    fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    fn restart(&mut self, env: &TestEnv) {
        self.kill();
        self.run(env);
    }

    fn logs(&self) -> String {
        self.logs
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect()
    }
}

/// Points the parent's aggregated APIs at a hub on `port`, and removes them again when the test
/// binary exits (an unavailable aggregated API stalls namespace deletion for the binaries after).
fn register_hub(env: &TestEnv, port: u16) {
    env.apply_bootstrap_rbac();
    env.register_hub(port);
    let register = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/env/hub-register.sh");
    let cleanup = format!(
        "while kill -0 {owner} 2>/dev/null; do sleep 0.5; done; K8S_BIN={k8s} bash {register} {kc} --delete",
        owner = std::process::id(),
        k8s = env.bin_dir().display(),
        kc = env.parent_kubeconfig().display(),
    );
    let _ = Command::new("bash")
        .args(["-c", &cleanup])
        .stdin(std::process::Stdio::null())
        .spawn();
}

// ---- the load ----

struct Load {
    parent: kube::Client,
    appns: String,
    subs: Api<Subscription>,
    manifests: Api<Manifest>,
    _ns: TestNamespace,
    /// Subscription name -> the value its feed holds now.
    wanted: BTreeMap<String, String>,
    deleted: BTreeSet<String>,
}

fn manifest(appns: &str, name: &str, value: &str) -> Manifest {
    serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
        "metadata": {"name": format!("configmaps.{appns}.{name}"), "namespace": known::CLUSTERNET_RESERVED_NAMESPACE, "labels": {
            "apps.clusternet.io/config.group": "", "apps.clusternet.io/config.version": "v1",
            "apps.clusternet.io/config.kind": "ConfigMap", "apps.clusternet.io/config.name": name,
            "apps.clusternet.io/config.namespace": appns}},
        "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": appns},
                     "data": {"v": value}}
    }))
    .expect("a Manifest")
}

impl Load {
    /// Creates `n` Subscriptions, each with its own ConfigMap feed, for the clusters `chaos=<id>`.
    async fn start(env: &TestEnv, id: &str, clusters: &[Cluster], n: usize) -> Load {
        let parent = env.parent().await;
        support::ensure_namespace(&parent, known::CLUSTERNET_RESERVED_NAMESPACE).await;
        let appns = format!("chaos-{id}");
        for c in clusters {
            support::ensure_namespace(&c.child, &appns).await;
        }
        let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "chaos").await;
        let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
        let manifests: Api<Manifest> =
            Api::namespaced(parent.clone(), known::CLUSTERNET_RESERVED_NAMESPACE);
        let mut wanted = BTreeMap::new();
        for i in 0..n {
            let name = format!("cm{i}");
            manifests
                .create(&PostParams::default(), &manifest(&appns, &name, "1"))
                .await
                .expect("creating a Manifest");
            let sub: Subscription = serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": name},
                "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"chaos": id}}}],
                         "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": appns, "name": name}]}}))
            .expect("a Subscription");
            subs.create(&PostParams::default(), &sub)
                .await
                .expect("creating a Subscription");
            wanted.insert(name, "1".to_string());
        }
        Load {
            parent,
            appns,
            subs,
            manifests,
            _ns: ns,
            wanted,
            deleted: BTreeSet::new(),
        }
    }

    /// How many of the wanted objects exist in the children so far.
    async fn present(&self, clusters: &[Cluster]) -> usize {
        let mut n = 0;
        for c in clusters {
            if let Ok(list) = Api::<ConfigMap>::namespaced(c.child.clone(), &self.appns)
                .list(&ListParams::default())
                .await
            {
                n += list
                    .items
                    .iter()
                    .filter(|cm| self.wanted.contains_key(&cm.name_any()))
                    .count();
            }
        }
        n
    }

    /// Waits until a random share (20-70 %) of the rollout is in the children: the fault's moment.
    async fn until_mid_rollout(&self, clusters: &[Cluster]) -> usize {
        let total = self.wanted.len() * clusters.len();
        let target = rand::rng().random_range(total / 5..=total * 7 / 10).max(1);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let n = self.present(clusters).await;
            if n >= target || Instant::now() > deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The objects in each child now: name -> UID (the fault's starting point).
    async fn snapshot(&self, clusters: &[Cluster]) -> Vec<BTreeMap<String, String>> {
        let mut out = Vec::new();
        for c in clusters {
            let list = Api::<ConfigMap>::namespaced(c.child.clone(), &self.appns)
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            out.push(
                list.into_iter()
                    .filter(|cm| self.wanted.contains_key(&cm.name_any()))
                    .map(|cm| (cm.name_any(), cm.uid().unwrap_or_default()))
                    .collect(),
            );
        }
        out
    }

    /// Waits until the parent's API server serves this load's objects again (after a restart).
    async fn until_answering(&self) {
        support::wait_for(
            "the parent's API server to answer again",
            Duration::from_secs(90),
            || async {
                self.subs
                    .list(&ListParams::default().limit(1))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        )
        .await;
    }

    /// While the fault lasts, users go on: `k` feeds change and `k` Subscriptions are deleted.
    async fn churn(&mut self, k: usize) {
        let names: Vec<String> = self.wanted.keys().cloned().collect();
        let picked: Vec<String> = names
            .choose_multiple(&mut rand::rng(), (2 * k).min(names.len()))
            .cloned()
            .collect();
        let (update, delete) = picked.split_at(picked.len() / 2);
        for name in update {
            self.manifests
                .patch(
                    &format!("configmaps.{}.{name}", self.appns),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"template": {"data": {"v": "2"}}})),
                )
                .await
                .expect("updating a feed");
            self.wanted.insert(name.clone(), "2".to_string());
        }
        for name in delete {
            self.subs
                .delete(name, &DeleteParams::default())
                .await
                .expect("deleting a Subscription");
            let _ = self
                .manifests
                .delete(
                    &format!("configmaps.{}.{name}", self.appns),
                    &DeleteParams::default(),
                )
                .await;
            self.wanted.remove(name);
            self.deleted.insert(name.clone());
        }
    }

    /// The invariants, or the first few ways they do not hold yet.
    async fn check(
        &self,
        clusters: &[Cluster],
        before: &[BTreeMap<String, String>],
    ) -> Result<(), String> {
        let mut problems = Vec::new();
        let sub_ns = self.subs.namespace().unwrap_or_default();
        for (c, before) in clusters.iter().zip(before) {
            let objects = Api::<ConfigMap>::namespaced(c.child.clone(), &self.appns)
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing {} objects: {e}", c.name))?;
            let mut seen = BTreeSet::new();
            for cm in &objects.items {
                let name = cm.name_any();
                if name == "kube-root-ca.crt" {
                    continue;
                }
                seen.insert(name.clone());
                let v = cm.data.as_ref().and_then(|d| d.get("v"));
                match self.wanted.get(&name) {
                    None => problems.push(format!("{}: {name} is left over", c.name)),
                    Some(want) if v != Some(want) => {
                        problems.push(format!("{}: {name} has v={v:?}, want {want}", c.name))
                    }
                    Some(_) => {}
                }
                if let Some(was) = before.get(&name)
                    && self.wanted.contains_key(&name)
                    && cm.uid().as_deref() != Some(was.as_str())
                {
                    // fatal at once: waiting longer cannot undo a deletion
                    return Err(format!(
                        "FATAL {}: {name} was deleted and re-created in a child that stayed bound",
                        c.name
                    ));
                }
            }
            for name in self.wanted.keys().filter(|n| !seen.contains(*n)) {
                if before.contains_key(name) {
                    return Err(format!(
                        "FATAL {}: {name} was deleted in a child that stayed bound",
                        c.name
                    ));
                }
                problems.push(format!("{}: {name} is missing", c.name));
            }
            // the parent's side: one Base and one Description per Subscription, saying the same
            let of_subs = |labels: &BTreeMap<String, String>| {
                if labels
                    .get(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL)
                    .map(String::as_str)
                    == Some(sub_ns)
                {
                    labels.get(known::CONFIG_SUBSCRIPTION_NAME_LABEL).cloned()
                } else {
                    None
                }
            };
            let bases = Api::<Base>::namespaced(self.parent.clone(), &c.dedicated)
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing Bases: {e}"))?;
            let mut base_count: BTreeMap<String, usize> = BTreeMap::new();
            for b in &bases.items {
                if let Some(s) = of_subs(b.labels()) {
                    *base_count.entry(s).or_default() += 1;
                }
            }
            let descs = Api::<Description>::namespaced(self.parent.clone(), &c.dedicated)
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing Descriptions: {e}"))?;
            let mut desc_count: BTreeMap<String, usize> = BTreeMap::new();
            for d in &descs.items {
                let Some(s) = of_subs(d.labels()) else {
                    continue;
                };
                *desc_count.entry(s.clone()).or_default() += 1;
                let rendered: Option<serde_json::Value> = d
                    .spec
                    .raw
                    .first()
                    .and_then(|r| serde_json::from_slice(&r.0).ok());
                let v = rendered
                    .as_ref()
                    .and_then(|o| o["data"]["v"].as_str().map(str::to_string));
                if let Some(want) = self.wanted.get(&s)
                    && v.as_ref() != Some(want)
                {
                    problems.push(format!(
                        "{}: Description of {s} says v={v:?}, want {want}",
                        c.name
                    ));
                }
            }
            for (what, count) in [("Base", &base_count), ("Description", &desc_count)] {
                for name in self.wanted.keys() {
                    match count.get(name).copied().unwrap_or(0) {
                        1 => {}
                        n => problems.push(format!("{}: {n} {what}s of {name}", c.name)),
                    }
                }
                for name in count.keys().filter(|n| self.deleted.contains(*n)) {
                    problems.push(format!(
                        "{}: a {what} of deleted {name} is left over",
                        c.name
                    ));
                }
            }
        }
        for name in &self.deleted {
            if self.subs.get_opt(name).await.ok().flatten().is_some() {
                problems.push(format!("deleted Subscription {name} still exists"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            let n = problems.len();
            problems.truncate(5);
            Err(format!("{n} problems, first: {}", problems.join("; ")))
        }
    }

    /// Waits for the invariants; returns how long that took after the fault ended.
    async fn converge(
        &self,
        clusters: &[Cluster],
        before: &[BTreeMap<String, String>],
        ended: Instant,
    ) -> Duration {
        let mut last = String::new();
        let mut said = Instant::now();
        while ended.elapsed() < CONVERGE_LIMIT {
            match self.check(clusters, before).await {
                Ok(()) => return ended.elapsed(),
                Err(e) if e.starts_with("FATAL") => panic!("{e}"),
                Err(e) => last = e,
            }
            // progress for whoever watches a long case
            if said.elapsed() > Duration::from_secs(10) {
                eprintln!(
                    "chaos: {:.0} s after the fault: {last}",
                    ended.elapsed().as_secs_f64()
                );
                said = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!(
            "not converged {} s after the fault ended: {last}",
            CONVERGE_LIMIT.as_secs()
        );
    }

    /// Deletes the load and waits until its Descriptions are gone (while the agents still run:
    /// a Push child's objects are removed through its agent's tunnel, and a case that left them
    /// behind would make the next case's controller retry them).
    async fn cleanup(&self, clusters: &[Cluster]) {
        for name in self.wanted.keys() {
            let _ = self.subs.delete(name, &DeleteParams::default()).await;
            let _ = self
                .manifests
                .delete(
                    &format!("configmaps.{}.{name}", self.appns),
                    &DeleteParams::default(),
                )
                .await;
        }
        let sub_ns = self.subs.namespace().unwrap_or_default();
        let selector = format!("{}={sub_ns}", known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL);
        support::wait_for(
            "the load's Descriptions deleted",
            Duration::from_secs(120),
            || async {
                let mut left = 0;
                for c in clusters {
                    left += Api::<Description>::namespaced(self.parent.clone(), &c.dedicated)
                        .list(&ListParams::default().labels(&selector))
                        .await
                        .map_err(|e| e.to_string())?
                        .items
                        .len();
                }
                if left == 0 {
                    Ok(())
                } else {
                    Err(format!("{left} left"))
                }
            },
        )
        .await;
    }
}

/// Three children: child1 Pull, child2 Push, child3 Pull, each labelled `chaos=<id>`.
/// `via_proxy` sends child3's agent to the parent through a fault proxy, `netns` runs it in a
/// network namespace of its own (the partition cases).
async fn fleet(
    env: &TestEnv,
    id: &str,
    via_proxy: Option<&FaultProxy>,
    netns: Option<&Netns>,
) -> Vec<Cluster> {
    let label = format!("chaos={id}");
    let mut out = Vec::new();
    for (i, mode) in [(1, "Pull"), (2, "Push"), (3, "Pull")] {
        let mut extra = Vec::new();
        let mut in_ns = None;
        if i == 3 {
            if let Some(proxy) = via_proxy {
                extra.push(format!(
                    "--cluster-reg-parent-url=https://127.0.0.1:{}",
                    proxy.port
                ));
            }
            if let Some(ns) = netns {
                let kubeconfig = env.dir.join(format!("{}-child3.kubeconfig", ns.name));
                // the child's API server as the relay shows it inside the namespace
                ns.child
                    .kubeconfig_through(&env.child_kubeconfig(3), &kubeconfig);
                extra.push(format!("--cluster-reg-parent-url={}", ns.parent_url()));
                extra.push(format!("--kubeconfig={}", kubeconfig.display()));
                in_ns = Some(ns.name.as_str());
            }
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        out.extend(
            support::register_in(
                env,
                &format!("{id}{i}"),
                &[i],
                mode,
                &[&label],
                &extra,
                in_ns,
            )
            .await,
        );
    }
    out
}

/// A case's row in the report (`just chaos` prints the file).
fn report(case: &str, n: usize, fault_at: usize, total: usize, converged: Duration) {
    let line = format!(
        "| {case} | {n} Subscriptions x 3 children | {fault_at}/{total} objects | {:.1} s | OK |\n",
        converged.as_secs_f64()
    );
    eprint!("chaos: {line}");
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos-report.md");
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
}

fn assert_no_panic(what: &str, log: &str) {
    if let Some(at) = log.find("panicked at") {
        let start = log[..at].rfind('\n').map(|i| i + 1).unwrap_or(0);
        let end = log[at..].find('\n').map(|i| at + i).unwrap_or(log.len());
        panic!("{what} panicked: {}", &log[start..end]);
    }
}

/// The fault a case injects.
enum Fault {
    /// kill -9 of the parent process, started again after the delay.
    KillParent(Duration),
    /// kill -9 of one process of a split parent (`scheduler` or `controller`), started again
    /// after the delay.
    KillRole(&'static str, Duration),
    /// kill -9 of child `i`'s agent (0-based in the fleet), started again after the delay.
    KillAgent(usize, Duration),
    /// child3's link to the parent down for this long: [`Link::Cut`] (connections reset, new ones
    /// refused) or [`Link::Stall`] (connections open, no byte moves).
    Partition(Link, Duration),
    /// kill -9 of one of the environment's processes (`parent-kube-apiserver`, or `etcd` under all
    /// four control planes), started again after the delay.
    KillComponent(&'static str, Duration),
    /// Two replicas of the parent with leader election; kill -9 of the one leading every role:
    /// the standby takes over.
    KillLeader,
    /// child3's link this long slow (every chunk 300 ms late), every connection reset each 5 s.
    Flaky(Duration),
    /// child3's agent in its own network namespace, every packet to and from the parent dropped
    /// by nftables for this long (its own API server stays reachable).
    NetnsPartition(Duration),
}

async fn run_case(case: &str, fault: Fault) {
    let _serial = SERIAL.lock().await;
    let env = TestEnv::get();
    env.install_crds();
    let id = uid();
    let proxy = match fault {
        Fault::Partition(..) | Fault::Flaky(_) => {
            Some(FaultProxy::start(support::kubeconfig_server(&env.parent_kubeconfig())).await)
        }
        _ => None,
    };
    let netns = match fault {
        Fault::NetnsPartition(_) => Some(
            Netns::create(
                &id,
                support::kubeconfig_server(&env.parent_kubeconfig()),
                support::kubeconfig_server(&env.child_kubeconfig(3)),
            )
            .await,
        ),
        _ => None,
    };
    // a split parent is two processes; every other case runs all parent roles in one
    let mut parents = match fault {
        Fault::KillRole(..) => vec![
            Parent::start(env, "hub"),
            Parent::start(env, "scheduler"),
            Parent::start(env, "controller"),
        ],
        Fault::KillLeader => {
            // the first leads every role before the second (which the aggregator then points
            // at) starts, so the one killed is the leader and the hub the agents reach lives on
            let first = Parent::start(env, "hub,scheduler,controller");
            first.until_leading().await;
            vec![first, Parent::start(env, "hub,scheduler,controller")]
        }
        _ => vec![Parent::start(env, "hub,scheduler,controller")],
    };
    let mut clusters = fleet(env, &id, proxy.as_ref(), netns.as_ref()).await;
    let n = load_size();
    let mut load = Load::start(env, &id, &clusters, n).await;
    let total = n * clusters.len();
    let fault_at = load.until_mid_rollout(&clusters).await;
    let before = load.snapshot(&clusters).await;
    let ended = match fault {
        Fault::KillParent(delay) => {
            parents[0].kill();
            load.churn(n / 10 + 1).await;
            tokio::time::sleep(delay).await;
            parents[0].restart(env);
            Instant::now()
        }
        Fault::KillRole(role, delay) => {
            let p = parents
                .iter_mut()
                .find(|p| p.roles == role)
                .expect("the role's process");
            p.kill();
            load.churn(n / 10 + 1).await;
            tokio::time::sleep(delay).await;
            p.restart(env);
            Instant::now()
        }
        Fault::KillAgent(i, delay) => {
            clusters[i].kill_agent();
            load.churn(n / 10 + 1).await;
            tokio::time::sleep(delay).await;
            clusters[i].start_agent();
            Instant::now()
        }
        Fault::Partition(mode, length) => {
            let proxy = proxy.as_ref().expect("the fault proxy");
            proxy.set(mode);
            load.churn(n / 10 + 1).await;
            tokio::time::sleep(length).await;
            proxy.restore();
            Instant::now()
        }
        Fault::KillComponent(name, delay) => {
            let killed = env.kill_component(name);
            tokio::time::sleep(delay).await;
            env.start_component(killed);
            // the fault ends when the parent answers again; users go on from there
            load.until_answering().await;
            let ended = Instant::now();
            load.churn(n / 10 + 1).await;
            ended
        }
        Fault::NetnsPartition(length) => {
            let ns = netns.as_ref().expect("the network namespace");
            ns.partition();
            load.churn(n / 10 + 1).await;
            tokio::time::sleep(length).await;
            ns.heal();
            Instant::now()
        }
        Fault::KillLeader => {
            parents[0].kill();
            load.churn(n / 10 + 1).await;
            Instant::now()
        }
        Fault::Flaky(length) => {
            let proxy = proxy.as_ref().expect("the fault proxy");
            proxy.set(Link::Slow(Duration::from_millis(300)));
            load.churn(n / 10 + 1).await;
            let until = Instant::now() + length;
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_secs(5)).await;
                proxy.reset_all();
            }
            proxy.restore();
            Instant::now()
        }
    };
    let took = load.converge(&clusters, &before, ended).await;
    for p in &parents {
        assert_no_panic("the parent", &p.logs());
    }
    for c in &clusters {
        assert_no_panic(&c.name, &c.agent_logs());
    }
    report(case, n, fault_at, total, took);
    load.cleanup(&clusters).await;
    drop(clusters);
    drop(parents);
    drop(netns);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parent_killed_mid_rollout_loses_nothing() {
    run_case(
        "kill -9 parent, restart at once",
        Fault::KillParent(Duration::ZERO),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_rollout_loses_nothing() {
    run_case(
        "kill -9 Pull agent, restart at once",
        Fault::KillAgent(0, Duration::ZERO),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_cut_off_for_30s_keeps_its_objects_and_converges() {
    run_case(
        "child cut off from the parent 30 s",
        Fault::Partition(Link::Cut, Duration::from_secs(30)),
    )
    .await;
}

// ---- the longer cases: `just chaos` ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_parent_killed_restarted_after_30s() {
    run_case(
        "kill -9 parent, restart after 30 s",
        Fault::KillParent(Duration::from_secs(30)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_scheduler_alone_killed() {
    run_case(
        "kill -9 scheduler alone, restart at once",
        Fault::KillRole("scheduler", Duration::ZERO),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_controller_alone_killed() {
    run_case(
        "kill -9 controller alone, restart at once",
        Fault::KillRole("controller", Duration::ZERO),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_controller_alone_killed_restarted_after_30s() {
    run_case(
        "kill -9 controller alone, restart after 30 s",
        Fault::KillRole("controller", Duration::from_secs(30)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_push_agent_killed_restarted_after_30s() {
    run_case(
        "kill -9 Push agent, restart after 30 s",
        Fault::KillAgent(1, Duration::from_secs(30)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_pull_agent_killed_restarted_after_30s() {
    run_case(
        "kill -9 Pull agent, restart after 30 s",
        Fault::KillAgent(0, Duration::from_secs(30)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_child_cut_off_for_2_minutes() {
    run_case(
        "child cut off from the parent 2 min",
        Fault::Partition(Link::Cut, Duration::from_secs(120)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_parent_kube_apiserver_killed_restarted_after_10s() {
    run_case(
        "kill -9 parent kube-apiserver, restart after 10 s",
        Fault::KillComponent("parent-kube-apiserver", Duration::from_secs(10)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_etcd_killed_restarted_after_10s() {
    run_case(
        "kill -9 etcd (all control planes), restart after 10 s",
        Fault::KillComponent("etcd", Duration::from_secs(10)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_leader_killed_standby_takes_over() {
    run_case("2 parent replicas, kill -9 the leader", Fault::KillLeader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_child_link_stalled_for_30s() {
    run_case(
        "child's link stalled (silent) 30 s",
        Fault::Partition(Link::Stall, Duration::from_secs(30)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos"]
async fn chaos_child_link_slow_and_resetting_for_60s() {
    run_case(
        "child's link slow (300 ms) + resets every 5 s, 60 s",
        Fault::Flaky(Duration::from_secs(60)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: just chaos (needs root, iproute2 and nftables)"]
async fn chaos_child_partitioned_by_nftables_for_2_minutes() {
    run_case(
        "child in its own netns, nftables drops the parent 2 min",
        Fault::NetnsPartition(Duration::from_secs(120)),
    )
    .await;
}
