//! Staged rollouts on real control planes (docs/spec/deployer.md §16): a parent and three
//! children, one per stage. A new image through the shadow API reaches child 1 first, child 2
//! only after child 1 has been healthy for minSuccessTime, child 3 last; a revision whose pods
//! can never run stops at child 1 after its progressDeadline and child 1 goes back to the
//! previous template on its own, while children 2 and 3 never see it.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clusternet::apis::{RolloutPhase, Subscription};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use support::browser::{Dashboard, LivePage};
use support::{NEVER_READY_IMAGE, TestEnv, TestNamespace, register, uid, wait_for};

/// What a child runs: the Deployment's pod template, as JSON (None while it has none).
async fn template(child: &kube::Client, ns: &str) -> Option<Value> {
    let d = Api::<Deployment>::namespaced(child.clone(), ns)
        .get_opt("web")
        .await
        .ok()
        .flatten()?;
    serde_json::to_value(d.spec?.template.spec?).ok()
}

fn image_of(t: &Value) -> String {
    t["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Watches every child's Deployment until dropped: per child, each distinct pod template it
/// ran, with when it was first seen.
/// Per child, each template seen and when.
type Seen = Arc<Mutex<Vec<Vec<(Instant, Value)>>>>;

struct Recorder {
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    fn start(children: Vec<kube::Client>, ns: String) -> Recorder {
        let seen: Seen = Arc::new(Mutex::new(vec![Vec::new(); children.len()]));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                // side by side, so one slow child does not delay what is seen of another
                let now: Vec<Option<Value>> =
                    futures::future::join_all(children.iter().map(|c| template(c, &ns))).await;
                let at = Instant::now();
                {
                    let mut seen = s.lock().unwrap_or_else(|e| e.into_inner());
                    for (i, t) in now.into_iter().enumerate() {
                        if let Some(t) = t
                            && seen[i].last().map(|(_, v)| v) != Some(&t)
                        {
                            seen[i].push((at, t));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Recorder { seen, task }
    }

    /// When child `i` first ran a template with this image and no node selector.
    fn first(&self, i: usize, image: &str) -> Option<Instant> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen[i]
            .iter()
            .find(|(_, t)| image_of(t) == image)
            .map(|(at, _)| *at)
    }

    fn history(&self, i: usize) -> Vec<Value> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen[i].iter().map(|(_, t)| t.clone()).collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn rollout_of(subs: &Api<Subscription>) -> Option<clusternet::apis::RolloutStatus> {
    subs.get("app")
        .await
        .ok()
        .and_then(|s| s.status)
        .and_then(|s| s.rollout)
        .map(|r| *r)
}

/// Waits until the rollout of revision `number` is in `phase`.
async fn wait_rollout(
    subs: &Api<Subscription>,
    what: &str,
    phase: RolloutPhase,
    number: i64,
    within: Duration,
) -> clusternet::apis::RolloutStatus {
    wait_for(what, within, || async {
        let r = rollout_of(subs).await.ok_or("no status.rollout")?;
        if r.phase == phase && r.revision_number == number {
            Ok(r)
        } else {
            Err(format!(
                "{:?} stage {} revision {}: {}",
                r.phase, r.stage, r.revision_number, r.message
            ))
        }
    })
    .await
}

/// Rollout tests share the three children; one at a time keeps their timing honest.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Deployment applied through the shadow API and a Subscription over children 1 to 3 (labelled
/// `stage=one|two|three`) that rolls out with `strategy` (its spec), revision 1 (`nginx:1.26`)
/// running everywhere.
struct App {
    env: &'static TestEnv,
    id: String,
    clusters: Vec<support::Cluster>,
    children: Vec<kube::Client>,
    appns: String,
    ns: TestNamespace,
    subs: Api<Subscription>,
    strategy: Value,
    replicas: i32,
}

/// The label of child `i`'s stage.
fn stage_label(i: usize) -> &'static str {
    ["stage=one", "stage=two", "stage=three"][i - 1]
}

impl App {
    async fn start(strategy_spec: Value) -> App {
        Self::start_on(strategy_spec, &[1, 2, 3], false).await
    }

    /// [`App::start`] over some of the children; `dividing`: 6 replicas divided among them
    /// (Static), else 1 in each.
    async fn start_on(strategy_spec: Value, on: &[usize], dividing: bool) -> App {
        let env = TestEnv::get();
        env.with_hub();
        env.with_controller();
        let parent = env.parent().await;
        let id = uid();
        let labels: Vec<&str> = on.iter().map(|i| stage_label(*i)).collect();
        let clusters = register(env, &id, on, "Push", &labels).await;
        let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "rollout").await;
        let strategy = json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "RolloutStrategy",
            "metadata": {"name": "staged", "namespace": ns.name},
            "spec": strategy_spec
        });
        env.kubectl_apply(&strategy);
        let app = App {
            env,
            id: id.clone(),
            children: clusters.iter().map(|c| c.child.clone()).collect(),
            clusters,
            appns: format!("roll-{id}"),
            subs: Api::namespaced(parent.clone(), &ns.name),
            ns,
            strategy,
            replicas: if dividing { 6 } else { 1 },
        };
        app.apply("nginx:1.26", None);
        let sub: Subscription = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "app"},
            "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
                     "rolloutStrategyName": "staged",
                     "feeds": [{"apiVersion": "v1", "kind": "Namespace", "name": app.appns},
                               {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                "namespace": app.appns}]}
        }))
        .expect("a Subscription");
        let mut sub = sub;
        if dividing {
            sub.spec.scheduling_strategy = Some(clusternet::apis::SchedulingStrategy::Dividing);
            sub.spec.dividing_scheduling =
                Some(serde_json::from_value(json!({"type": "Static"})).expect("dividing"));
            // every cluster weighs the same: 2 replicas each
            sub.spec.subscribers[0].weight = 1;
        }
        app.subs
            .create(&PostParams::default(), &sub)
            .await
            .expect("creating the Subscription");
        // the first revision is taken as it is: every child gets it
        wait_for(
            "revision 1 everywhere, completed",
            Duration::from_secs(90),
            || async {
                let r = rollout_of(&app.subs).await.ok_or("no status.rollout yet")?;
                let images = app.images().await;
                if r.phase == RolloutPhase::Completed
                    && r.revision_number == 1
                    && images.iter().all(|i| i == "nginx:1.26")
                {
                    Ok(())
                } else {
                    Err(format!("{:?} {images:?}", r.phase))
                }
            },
        )
        .await;
        app
    }

    /// `kubectl clusternet apply` of the app with this image (and node selector).
    fn apply(&self, image: &str, node_selector: Option<&str>) {
        let out = self.env.plugin_with_stdin(
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {}}}\n---\n{}",
                self.appns,
                support::web_deployment_yaml(
                    &self.appns,
                    image,
                    node_selector,
                    self.replicas,
                    None
                )
            )),
        );
        assert!(
            out.status.success(),
            "kubectl clusternet apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The image each child runs now.
    async fn images(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in &self.children {
            out.push(
                template(c, &self.appns)
                    .await
                    .map(|t| image_of(&t))
                    .unwrap_or_default(),
            );
        }
        out
    }

    fn plugin(&self, args: &[&str]) -> std::process::Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-n", &self.ns.name]);
        self.env.plugin(&all)
    }

    /// Registers child `i` (labelled for its stage) while the app runs.
    async fn join(&mut self, i: usize) {
        let mut more = register(self.env, &self.id, &[i], "Push", &[stage_label(i)]).await;
        self.children.extend(more.iter().map(|c| c.child.clone()));
        self.clusters.append(&mut more);
    }

    fn recorder(&self) -> Recorder {
        Recorder::start(self.children.clone(), self.appns.clone())
    }
}

#[tokio::test]
async fn a_change_moves_stage_by_stage_and_a_bad_one_rolls_back_on_its_own() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let app = App::start(json!({"stages": [
        {"name": "one", "clusterSelector": {"matchLabels": {"stage": "one"}},
         "minSuccessTime": "10s", "progressDeadline": "30s"},
        {"name": "two", "clusterSelector": {"matchLabels": {"stage": "two"}},
         "minSuccessTime": "10s"},
        {"name": "three", "clusterSelector": {"matchLabels": {"stage": "three"}}}
    ]}))
    .await;
    let (env, subs, children, ns) = (app.env, &app.subs, &app.children, &app.ns);
    let parent = env.parent().await;
    let apply = |image: &str, node_selector: Option<&str>| app.apply(image, node_selector);
    let images = |_: &[kube::Client]| app.images();
    let appns = app.appns.clone();
    let strategy = app.strategy.clone();

    // a new image: child 1, then child 2 after child 1's 10 s soak, then child 3
    let rec = app.recorder();
    apply("nginx:1.27", None);
    // `rollout status` follows it to the end
    let follow = {
        let ns = ns.name.clone();
        std::thread::spawn(move || {
            TestEnv::get().plugin(&[
                "rollout",
                "status",
                "subscription/app",
                "-n",
                &ns,
                "--timeout=150s",
            ])
        })
    };
    let done = wait_rollout(
        subs,
        "revision 2 rolled out to every stage",
        RolloutPhase::Completed,
        2,
        Duration::from_secs(150),
    )
    .await;
    assert_eq!(done.stable_revision_number, Some(2));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let at: Vec<Instant> = (0..3)
        .map(|i| {
            rec.first(i, "nginx:1.27")
                .unwrap_or_else(|| panic!("child {} never ran nginx:1.27", i + 1))
        })
        .collect();
    assert!(
        at[1] >= at[0] + Duration::from_secs(10),
        "child 2 changed {:?} after child 1: before child 1's 10 s soak",
        at[1] - at[0]
    );
    assert!(
        at[2] >= at[1] + Duration::from_secs(10),
        "child 3 changed {:?} after child 2",
        at[2] - at[1]
    );
    let out = follow.join().expect("rollout status");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "rollout status: {said}");
    assert!(
        said.contains("Waiting for rollout of revision 2 to finish: stage 1 of 3 (one)")
            && said.contains("stage 2 of 3 (two)")
            && said.contains("subscription \"app\" successfully rolled out (revision 2)"),
        "rollout status: {said}"
    );
    let good = rec.history(0).last().cloned().expect("child 1's template");
    drop(rec);

    // a revision whose pods never become ready (kwok leaves them Pending): it stops at child 1
    // and is rolled back
    let rec = app.recorder();
    apply(NEVER_READY_IMAGE, None);
    let back = wait_rollout(
        subs,
        "revision 3 rolled back",
        RolloutPhase::RolledBack,
        3,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(back.stable_revision_number, Some(2));
    assert!(
        back.message.contains("progressDeadline"),
        "the rollout says why: {}",
        back.message
    );
    wait_for(
        "child 1 back on revision 2's template",
        Duration::from_secs(60),
        || async {
            let t = template(&children[0], &appns).await;
            if t.as_ref() == Some(&good) {
                Ok(())
            } else {
                Err(format!("{t:?}"))
            }
        },
    )
    .await;
    assert!(
        rec.first(0, NEVER_READY_IMAGE).is_some(),
        "child 1 ran the bad revision: {:?}",
        rec.history(0)
    );
    for i in [1, 2] {
        assert_eq!(
            rec.first(i, NEVER_READY_IMAGE),
            None,
            "child {} saw the bad revision: {:?}",
            i + 1,
            rec.history(i)
        );
    }
    let out = env.plugin(&["rollout", "status", "subscription/app", "-n", &ns.name]);
    assert!(!out.status.success(), "a rolled back rollout is a failure");
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(said.contains("revision 3 was rolled back"), "{said}");
    let out = env.plugin(&["rollout", "history", "subscription/app", "-n", &ns.name]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        said.contains("1         first revision")
            && said.contains("3         changed: feed Deployment"),
        "{said}"
    );
    let events: Vec<String> = Api::<Event>::namespaced(parent.clone(), &ns.name)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("RolloutRolledBack"))
        .filter_map(|e| e.message)
        .collect();
    assert!(
        events.iter().any(|m| m.contains("stage 1 (one) failed")),
        "an Event says why: {events:?}"
    );
    let cond = wait_for(
        "the RolloutComplete condition",
        Duration::from_secs(30),
        || async {
            let sub = subs.get("app").await.map_err(|e| e.to_string())?;
            sub.status
                .and_then(|s| {
                    s.conditions
                        .into_iter()
                        .find(|c| c.type_ == "RolloutComplete" && c.reason == "RolledBack")
                })
                .ok_or_else(|| "not RolledBack yet".to_string())
        },
    )
    .await;
    assert_eq!(cond.status, "False");
    assert!(
        cond.message.contains("stage 1 (one) failed"),
        "a condition says why: {}",
        cond.message
    );
    // kstatus's view: Stalled (Failed) for the same reason, not Ready
    let kstatus = |want: &'static str, reason: &'static str| {
        let subs = subs.clone();
        async move {
            wait_for(
                &format!("{want} ({reason})"),
                Duration::from_secs(30),
                || async {
                    let sub = subs.get("app").await.map_err(|e| e.to_string())?;
                    let cs = sub.status.map(|s| s.conditions).unwrap_or_default();
                    let ready = cs.iter().find(|c| c.type_ == "Ready");
                    let it = cs.iter().find(|c| c.type_ == want);
                    match (ready, it) {
                        (Some(r), Some(c))
                            if r.status == "False" && c.status == "True" && c.reason == reason =>
                        {
                            Ok(())
                        }
                        _ => Err(format!("{cs:?}")),
                    }
                },
            )
            .await
        }
    };
    kstatus("Stalled", "RolledBack").await;
    drop(rec);

    // stage two now waits for an approval: revision 4 stops after stage one
    let mut gated = strategy.clone();
    gated["spec"]["stages"][1]["requireApproval"] = json!(true);
    env.kubectl_apply(&gated);
    apply("nginx:1.29", None);
    let waiting = |number: i64| {
        let subs = subs.clone();
        async move {
            wait_for(
                &format!("revision {number} waiting for approval at stage 2"),
                Duration::from_secs(90),
                || async {
                    let r = rollout_of(&subs).await.ok_or("no status.rollout")?;
                    match r.stages.get(1) {
                        Some(s)
                            if r.revision_number == number
                                && s.phase == clusternet::apis::StagePhase::WaitingForApproval =>
                        {
                            Ok(())
                        }
                        _ => Err(format!("{:?} stage {}: {}", r.phase, r.stage, r.message)),
                    }
                },
            )
            .await
        }
    };
    waiting(4).await;
    kstatus("Reconciling", "WaitingForApproval").await;
    assert_eq!(
        images(children).await,
        ["nginx:1.29", "nginx:1.27", "nginx:1.27"],
        "stage two is held until approved"
    );
    // the dashboard's rollout view, live in a real Chromium
    let dash = Dashboard::start(env, &[]);
    let mut page =
        LivePage::open_live(&dash.page(&format!("subscription?namespace={}&name=app", ns.name)))
            .await;
    let stage_two =
        "document.querySelector('tr[data-stage=\"two\"] td.state')?.textContent ?? 'missing'";
    page.wait_until(
        "stage two waiting for approval on the page",
        stage_two,
        json!("WaitingForApproval"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(page.eval("window.clusternetTestMark = 7").await, json!(7));
    let out = env.plugin(&["rollout", "approve", "subscription/app", "-n", &ns.name]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success() && said.contains("stage 2 (two) of revision 4 approved by"),
        "rollout approve: {said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = wait_rollout(
        subs,
        "revision 4 rolled out after the approval",
        RolloutPhase::Completed,
        4,
        Duration::from_secs(90),
    )
    .await;
    assert!(
        !done.stages[1].approved_by.is_empty(),
        "who approved is recorded: {:?}",
        done.stages[1]
    );
    page.wait_until(
        "the page to show revision 4 completed",
        "document.querySelector('[data-rollout]')?.dataset.rollout ?? 'missing'",
        json!("Completed"),
        Duration::from_secs(30),
    )
    .await;
    let approved = page
        .eval("document.querySelector('tr[data-stage=\"two\"]')?.textContent ?? ''")
        .await;
    assert!(
        approved
            .as_str()
            .is_some_and(|t| t.contains(&format!("approved by {}", done.stages[1].approved_by))),
        "{approved}"
    );
    assert_eq!(
        page.eval("window.clusternetTestMark").await,
        json!(7),
        "the page was updated in place"
    );
    drop(page);
    drop(dash);
    assert_eq!(
        images(children).await,
        ["nginx:1.29", "nginx:1.29", "nginx:1.29"]
    );

    // undo to revision 2 goes back through the stages, the approval included
    let out = env.plugin(&[
        "rollout",
        "undo",
        "subscription/app",
        "-n",
        &ns.name,
        "--to-revision=2",
    ]);
    assert!(
        out.status.success(),
        "rollout undo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    waiting(2).await;
    assert_eq!(
        images(children).await,
        ["nginx:1.27", "nginx:1.29", "nginx:1.29"]
    );
    let out = env.plugin(&["rollout", "approve", "subscription/app", "-n", &ns.name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_rollout(
        subs,
        "revision 2 rolled out again",
        RolloutPhase::Completed,
        2,
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(
        images(children).await,
        ["nginx:1.27", "nginx:1.27", "nginx:1.27"]
    );
}

/// The exporter's text: the error ratio of each cluster.
fn error_ratios(names: &[String], bad: Option<&str>) -> String {
    let mut text = String::from("# TYPE app_error_ratio gauge\n");
    for n in names {
        let v = if Some(n.as_str()) == bad { "0.5" } else { "0" };
        text.push_str(&format!("app_error_ratio{{cluster=\"{n}\"}} {v}\n"));
    }
    text
}

#[tokio::test]
async fn a_metric_gate_that_goes_bad_during_the_soak_rolls_back_and_a_good_one_completes() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::get();
    let exporter = support::Exporter::start("").await;
    let prometheus =
        support::Prometheus::start(env, &[format!("127.0.0.1:{}", exporter.port)]).await;
    let app = App::start(json!({"stages": [
        {"name": "one", "clusterSelector": {"matchLabels": {"stage": "one"}},
         "minSuccessTime": "20s", "progressDeadline": "90s",
         "metricGates": [{"name": "errors", "address": prometheus.address,
             "query": "max(app_error_ratio{cluster=~\"$CLUSTERS\"})",
             "comparison": "LessThan", "threshold": 0.05}]},
        {"name": "two", "clusterSelector": {"matchLabels": {"stage": "two"}}},
        {"name": "three", "clusterSelector": {"matchLabels": {"stage": "three"}}}
    ]}))
    .await;
    let parent = app.env.parent().await;
    let mut names = Vec::new();
    for c in &app.clusters {
        names.push(
            support::managed_cluster(&parent, c)
                .await
                .metadata
                .name
                .unwrap_or_default(),
        );
    }
    exporter.set(&error_ratios(&names, None));

    // revision 2 soaks in child 1 with the gate passing, then child 1's errors go up
    let rec = app.recorder();
    app.apply("nginx:1.27", None);
    wait_for(
        "stage 1 soaking with its gate passing",
        Duration::from_secs(90),
        || async {
            let r = rollout_of(&app.subs).await.ok_or("no status.rollout")?;
            let s = r.stages.first().ok_or("no stages")?;
            if r.revision_number == 2
                && s.phase == clusternet::apis::StagePhase::Soaking
                && s.gates.first().is_some_and(|g| g.state == "Passing")
            {
                Ok(())
            } else {
                Err(format!("{:?}: {:?}", r.phase, s))
            }
        },
    )
    .await;
    exporter.set(&error_ratios(&names, Some(&names[0])));
    let back = wait_rollout(
        &app.subs,
        "revision 2 rolled back by its metric gate",
        RolloutPhase::RolledBack,
        2,
        Duration::from_secs(60),
    )
    .await;
    assert!(
        back.message
            .contains("metric gate errors: 0.5 is not < 0.05"),
        "{}",
        back.message
    );
    wait_for(
        "child 1 back on nginx:1.26",
        Duration::from_secs(60),
        || async {
            let images = app.images().await;
            if images == ["nginx:1.26", "nginx:1.26", "nginx:1.26"] {
                Ok(())
            } else {
                Err(format!("{images:?}"))
            }
        },
    )
    .await;
    assert!(
        rec.first(0, "nginx:1.27").is_some(),
        "child 1 ran revision 2"
    );
    for i in [1, 2] {
        assert_eq!(
            rec.first(i, "nginx:1.27"),
            None,
            "child {} saw the revision its gate rejected: {:?}",
            i + 1,
            rec.history(i)
        );
    }

    // the errors are gone: a restart rolls revision 2 out to the end
    exporter.set(&error_ratios(&names, None));
    // once Prometheus has scraped it (a restart asks at once)
    prometheus.wait_value("max(app_error_ratio)", 0.0).await;
    let out = app.plugin(&["rollout", "restart", "subscription/app"]);
    assert!(
        out.status.success(),
        "rollout restart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_rollout(
        &app.subs,
        "revision 2 rolled out after the restart",
        RolloutPhase::Completed,
        2,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(
        app.images().await,
        ["nginx:1.27", "nginx:1.27", "nginx:1.27"]
    );
}

#[tokio::test]
async fn a_newer_change_supersedes_a_rollout_and_a_cluster_joining_mid_rollout_waits_for_its_stage()
{
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut app = App::start_on(
        json!({"stages": [
            {"name": "one", "clusterSelector": {"matchLabels": {"stage": "one"}},
             "minSuccessTime": "25s"},
            {"name": "two", "clusterSelector": {"matchLabels": {"stage": "two"}}},
            {"name": "three", "clusterSelector": {"matchLabels": {"stage": "three"}}}
        ]}),
        &[1, 2],
        false,
    )
    .await;
    // revision 2 soaks in child 1; meanwhile child 3 joins: it gets revision 1, the last good one
    let before = app.recorder();
    app.apply("nginx:1.27", None);
    wait_for(
        "stage 1 of revision 2 soaking",
        Duration::from_secs(90),
        || async {
            let r = rollout_of(&app.subs).await.ok_or("no status.rollout")?;
            match r.stages.first() {
                Some(s)
                    if r.revision_number == 2
                        && s.phase == clusternet::apis::StagePhase::Soaking =>
                {
                    Ok(())
                }
                _ => Err(format!("{:?} stage {}: {}", r.phase, r.stage, r.message)),
            }
        },
    )
    .await;
    app.join(3).await;
    let rec = app.recorder();
    wait_for(
        "child 3 running revision 1",
        Duration::from_secs(90),
        || async {
            let images = app.images().await;
            if images == ["nginx:1.27", "nginx:1.26", "nginx:1.26"] {
                Ok(())
            } else {
                Err(format!("{images:?}"))
            }
        },
    )
    .await;
    // revision 3 supersedes revision 2 before stage one passes: it starts over from stage one,
    // with revision 1 still the stable one, and child 2 never runs revision 2
    app.apply("nginx:1.28", None);
    let r = wait_for("revision 3 under way", Duration::from_secs(60), || async {
        let r = rollout_of(&app.subs).await.ok_or("no status.rollout")?;
        if r.revision_number == 3 {
            Ok(r)
        } else {
            Err(format!("{:?} revision {}", r.phase, r.revision_number))
        }
    })
    .await;
    assert_eq!(r.stable_revision_number, Some(1));
    assert_eq!(r.stage, 0, "a newer revision starts from stage one: {r:?}");
    wait_rollout(
        &app.subs,
        "revision 3 rolled out",
        RolloutPhase::Completed,
        3,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(
        app.images().await,
        ["nginx:1.28", "nginx:1.28", "nginx:1.28"]
    );
    assert_eq!(
        before.first(1, "nginx:1.27"),
        None,
        "child 2 ran the superseded revision 2: {:?}",
        before.history(1)
    );
    for i in [1, 2] {
        assert_eq!(
            rec.first(i, "nginx:1.27"),
            None,
            "child {} ran the superseded revision 2: {:?}",
            i + 1,
            rec.history(i)
        );
    }
    // every revision stays in the history
    let out = app.plugin(&["rollout", "history", "subscription/app"]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("\n3 "), "{said}");
}

/// The replicas each child's Deployment asks for.
async fn replicas_of(app: &App) -> Vec<i32> {
    let mut out = Vec::new();
    for c in &app.children {
        let d = Api::<Deployment>::namespaced(c.clone(), &app.appns)
            .get_opt("web")
            .await
            .ok()
            .flatten();
        out.push(
            d.and_then(|d| d.spec)
                .and_then(|s| s.replicas)
                .unwrap_or(-1),
        );
    }
    out
}

#[tokio::test]
async fn a_dividing_subscription_rolls_out_stage_by_stage_keeping_each_clusters_share() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let app = App::start_on(
        json!({"stages": [
            {"name": "one", "clusterSelector": {"matchLabels": {"stage": "one"}},
             "minSuccessTime": "5s"},
            {"name": "rest"}
        ]}),
        &[1, 2, 3],
        true,
    )
    .await;
    let shares = wait_for("the replicas divided", Duration::from_secs(60), || async {
        let r = replicas_of(&app).await;
        if r.iter().sum::<i32>() == 6 && r.iter().all(|n| *n > 0) {
            Ok(r)
        } else {
            Err(format!("{r:?}"))
        }
    })
    .await;
    let rec = app.recorder();
    app.apply("nginx:1.27", None);
    let r = wait_for(
        "child 1 alone on revision 2",
        Duration::from_secs(60),
        || async {
            let images = app.images().await;
            if images == ["nginx:1.27", "nginx:1.26", "nginx:1.26"] {
                Ok(images)
            } else {
                Err(format!("{images:?}"))
            }
        },
    )
    .await;
    assert_eq!(replicas_of(&app).await, shares, "shares kept at {r:?}");
    wait_rollout(
        &app.subs,
        "revision 2 rolled out",
        RolloutPhase::Completed,
        2,
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(
        app.images().await,
        ["nginx:1.27", "nginx:1.27", "nginx:1.27"]
    );
    assert_eq!(
        replicas_of(&app).await,
        shares,
        "each cluster keeps its share"
    );
    let child2_first = rec.first(1, "nginx:1.27").expect("child 2 changed");
    let child1_first = rec.first(0, "nginx:1.27").expect("child 1 changed");
    assert!(
        child2_first >= child1_first + Duration::from_secs(5),
        "the second stage waited for the first one's soak"
    );
}
