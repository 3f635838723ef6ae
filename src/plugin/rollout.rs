//! `kubectl clusternet rollout VERB subscription/NAME`: the verbs of `kubectl rollout` for a
//! Subscription, read from the parent. `history` lists the Subscription's revisions (the
//! ControllerRevisions `pipeline::revision` keeps) with why each was made, or shows one with
//! `--revision=N`. Any other target (`deployment/web`) is kubectl's own `rollout` through the
//! shadow API, as before.

use std::ffi::OsString;
use std::process::ExitCode;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::apis::known;
use crate::apis::known::CHANGE_CAUSE_ANNOTATION;
use crate::apis::{RolloutPhase, Subscription, SubscriptionRevision};
use crate::kube_ext::yaml;

use super::placement::is_subscription_word;

pub const USAGE: &str = "\
Usage:
  kubectl clusternet rollout history subscription/NAME [-n NAMESPACE] [--revision=N] [-o json|yaml]
  kubectl clusternet rollout status subscription/NAME [-n NAMESPACE] [-w=false] [--timeout=DURATION]

Manages the rollout of a Subscription (the verbs of kubectl rollout). Every change to what a
Subscription deploys (its spec, its feeds' content, the HelmCharts it deploys, the overrides that
apply to it) is kept as a numbered revision (a ControllerRevision in its namespace; the newest
spec.revisionHistoryLimit, default 10).

With a RolloutStrategy (spec.rolloutStrategyName), a new revision moves through the clusters
stage by stage and rolls back on its own when a stage fails.

Verbs:
  history      list the revisions with what changed in each, or show one with --revision=N
  status       follow the rollout of the newest revision until it completes (exit 0), or until
               it is rolled back or paused by a failed stage (exit 1)

Options:
  -n, --namespace NS    namespace of the Subscription (default: the context's, default)
      --revision N      show what revision N holds: the Subscription's spec, each feed's content,
                        and the overrides of each cluster namespace
  -o, --output FORMAT   json or yaml (with --revision: that revision's content)
  -w, --watch           status: keep following until the rollout ends (default true)
      --timeout D       status: give up after this long (a duration, 0 = never; default 0)

Other targets (deployment/web) go to kubectl's own rollout through the shadow API.
";

/// The verbs of `kubectl rollout`; all but `history` come with rollout strategies.
const VERBS: &[&str] = &[
    "history", "status", "undo", "pause", "resume", "restart", "approve",
];

#[derive(Debug, Default, PartialEq, Eq)]
pub struct RolloutArgs {
    pub verb: String,
    pub name: String,
    pub namespace: Option<String>,
    pub revision: Option<i64>,
    pub output: Option<String>,
    /// `status`: follow until the rollout ends (kubectl's default) or print once.
    pub watch: bool,
    /// `status`: how long to follow (None: no limit).
    pub timeout: Option<std::time::Duration>,
}

/// The target of `kubectl clusternet rollout ...` when it is a Subscription, else `None` (the
/// words go to kubectl).
pub fn is_subscription_target(args: &[OsString]) -> bool {
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .filter(|a| !a.starts_with('-'))
        .collect();
    words.iter().any(|w| {
        is_subscription_word(w)
            || w.split_once('/')
                .is_some_and(|(kind, name)| is_subscription_word(kind) && !name.is_empty())
    })
}

/// Reads the arguments after `rollout`.
pub fn parse(args: &[OsString]) -> Result<RolloutArgs, String> {
    let mut out = RolloutArgs {
        watch: true,
        ..Default::default()
    };
    let mut words = Vec::new();
    let mut args = super::args::OwnArgs::new(args);
    while let Some((flag, inline)) = args.next_arg() {
        let mut value = |name: &str| args.value(inline.clone(), name);
        match flag.as_str() {
            "-n" | "--namespace" => out.namespace = Some(value("--namespace")?),
            "--revision" => {
                let v = value("--revision")?;
                let n: i64 = v
                    .parse()
                    .map_err(|_| format!("invalid argument {v:?} for \"--revision\" flag"))?;
                out.revision = (n != 0).then_some(n);
            }
            "-o" | "--output" => {
                let v = value("--output")?;
                match v.as_str() {
                    "json" | "yaml" => out.output = Some(v),
                    other => {
                        return Err(format!(
                            "unable to match a printer suitable for the output format {other:?}, allowed formats are: json,yaml"
                        ));
                    }
                }
            }
            "-w" | "--watch" => {
                out.watch = match inline.as_deref() {
                    None | Some("true") => true,
                    Some("false") => false,
                    Some(v) => {
                        return Err(format!("invalid argument {v:?} for \"--watch\" flag"));
                    }
                }
            }
            "--timeout" => {
                let v = value("--timeout")?;
                let d = crate::config::parse_go_duration(&v)
                    .map_err(|e| format!("invalid argument {v:?} for \"--timeout\" flag: {e}"))?;
                out.timeout = (!d.is_zero()).then_some(d);
            }
            f if f.starts_with('-') && f.len() > 1 => return Err(format!("unknown flag: {f}")),
            _ => words.push(flag),
        }
    }
    let mut words = words.into_iter();
    out.verb = words.next().ok_or("give a verb: history")?;
    if !VERBS.contains(&out.verb.as_str()) {
        return Err(format!("unknown command {:?} for \"rollout\"", out.verb));
    }
    let rest: Vec<String> = words.collect();
    out.name = match rest.as_slice() {
        [kind, name] if is_subscription_word(kind) => name.clone(),
        [one] => match one.split_once('/') {
            Some((kind, name)) if is_subscription_word(kind) && !name.is_empty() => name.into(),
            _ => return Err(format!("expected subscription/NAME, got {one:?}")),
        },
        [] => return Err("give the Subscription: subscription/NAME".into()),
        other => return Err(format!("unexpected arguments: {}", other.join(" "))),
    };
    Ok(out)
}

/// One line of the history table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub number: i64,
    pub cause: String,
}

/// `kubectl rollout history`'s table.
pub fn history_table(name: &str, rows: &[Row]) -> String {
    let mut out = format!("subscription.apps.clusternet.io/{name}\nREVISION  CHANGE-CAUSE\n");
    for r in rows {
        let cause = if r.cause.is_empty() {
            "<none>"
        } else {
            &r.cause
        };
        out.push_str(&format!("{:<9} {cause}\n", r.number));
    }
    out
}

/// Where a rollout is, as `kubectl rollout status` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Not done: what it waits for.
    Waiting(String),
    Done(String),
    Failed(String),
}

/// The status line of a Subscription's rollout.
pub fn progress(sub: &Subscription) -> Progress {
    let name = sub.name_any();
    let Some(strategy) = &sub.spec.rollout_strategy_name else {
        return Progress::Done(format!(
            "subscription \"{name}\" has no rollout strategy: every change reaches every cluster at once"
        ));
    };
    let Some(r) = sub.status.as_ref().and_then(|s| s.rollout.as_deref()) else {
        return Progress::Waiting(format!(
            "Waiting for the rollout of subscription \"{name}\" to start (strategy {strategy})..."
        ));
    };
    match r.phase {
        RolloutPhase::Completed => Progress::Done(format!(
            "subscription \"{name}\" successfully rolled out (revision {})",
            r.revision_number
        )),
        RolloutPhase::RolledBack | RolloutPhase::Paused => Progress::Failed(format!(
            "rollout of subscription \"{name}\" revision {} {}: {}",
            r.revision_number,
            if r.phase == RolloutPhase::Paused {
                "is paused"
            } else {
                "was rolled back"
            },
            r.message
        )),
        RolloutPhase::Progressing => {
            let total = r.stages.len();
            let stage = usize::try_from(r.stage).unwrap_or(0);
            let detail = r
                .stages
                .get(stage)
                .map(|s| {
                    format!(
                        "stage {} of {total} ({}): {} of {} clusters updated, {} healthy; {}",
                        stage + 1,
                        s.name,
                        s.updated.len(),
                        s.clusters.len(),
                        s.healthy.len(),
                        s.message
                    )
                })
                .unwrap_or_else(|| r.message.clone());
            Progress::Waiting(format!(
                "Waiting for rollout of revision {} to finish: {detail}",
                r.revision_number
            ))
        }
    }
}

async fn status(
    subs: &Api<Subscription>,
    args: &RolloutArgs,
    first: Subscription,
) -> Result<ExitCode, String> {
    let started = std::time::Instant::now();
    let mut sub = first;
    let mut last = String::new();
    loop {
        match progress(&sub) {
            Progress::Done(line) => return Ok(crate::emit(&format!("{line}\n"))),
            Progress::Failed(line) => return Err(line),
            Progress::Waiting(line) => {
                if line != last {
                    crate::emit(&format!("{line}\n"));
                    last = line;
                }
                if !args.watch {
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
        if args.timeout.is_some_and(|t| started.elapsed() >= t) {
            return Err("timed out waiting for the condition".into());
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        sub = subs
            .get_opt(&args.name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("subscription \"{}\" was deleted", args.name))?;
    }
}

pub async fn run(
    client: kube::Client,
    args: &RolloutArgs,
    context_namespace: Option<&str>,
) -> Result<ExitCode, String> {
    if args.verb != "history" && args.verb != "status" {
        return Err(format!(
            "rollout {} of a Subscription is not implemented yet in this build; `rollout \
             history` and `rollout status` are",
            args.verb
        ));
    }
    let ns = args
        .namespace
        .as_deref()
        .or(context_namespace)
        .unwrap_or("default");
    let subs: Api<Subscription> = Api::namespaced(client.clone(), ns);
    let sub = subs
        .get_opt(&args.name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "subscriptions.apps.clusternet.io \"{}\" not found in namespace {ns}",
                args.name
            )
        })?;
    if args.verb == "status" {
        return status(&subs, args, sub).await;
    }
    let revisions: Api<ControllerRevision> = Api::namespaced(client, ns);
    let selector = format!(
        "{}={}",
        known::CONFIG_SUBSCRIPTION_UID_LABEL,
        sub.uid().unwrap_or_default()
    );
    let mut list = revisions
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| e.to_string())?
        .items;
    list.sort_by_key(|r| r.revision);
    if let Some(n) = args.revision {
        let Some(r) = list.iter().find(|r| r.revision == n) else {
            return Err("unable to find the specified revision".into());
        };
        let snapshot: SubscriptionRevision = r
            .data
            .as_ref()
            .map(|d| serde_json::from_value(d.0.clone()))
            .transpose()
            .map_err(|e| format!("revision {n} holds no readable content: {e}"))?
            .unwrap_or_default();
        let text = match args.output.as_deref() {
            Some("json") => serde_json::to_string_pretty(&snapshot).map_err(|e| e.to_string())?,
            _ => yaml::to_string(&snapshot).map_err(|e| e.to_string())?,
        };
        let head = if args.output.is_some() {
            String::new()
        } else {
            format!(
                "subscription.apps.clusternet.io/{} with revision #{n}\n",
                args.name
            )
        };
        return Ok(crate::emit(&format!("{head}{}\n", text.trim_end())));
    }
    let rows: Vec<Row> = list
        .iter()
        .map(|r| Row {
            number: r.revision,
            cause: r
                .annotations()
                .get(CHANGE_CAUSE_ANNOTATION)
                .cloned()
                .unwrap_or_default(),
        })
        .collect();
    let text = match args.output.as_deref() {
        Some(format) => {
            let items: Vec<serde_json::Value> = list
                .iter()
                .zip(&rows)
                .map(|(r, row)| {
                    serde_json::json!({"revision": row.number, "name": r.name_any(), "changeCause": row.cause})
                })
                .collect();
            if format == "json" {
                serde_json::to_string_pretty(&items).map_err(|e| e.to_string())?
            } else {
                yaml::to_string(&items).map_err(|e| e.to_string())?
            }
        }
        None => history_table(&args.name, &rows),
    };
    Ok(crate::emit(&format!("{}\n", text.trim_end())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_target_may_be_written_as_kubectl_accepts_it() {
        let want = RolloutArgs {
            verb: "history".into(),
            name: "app".into(),
            namespace: Some("ns".into()),
            revision: Some(2),
            output: None,
            watch: true,
            timeout: None,
        };
        assert_eq!(
            parse(&args(&[
                "history",
                "subscription/app",
                "-n",
                "ns",
                "--revision=2"
            ])),
            Ok(want)
        );
        assert_eq!(
            parse(&args(&["history", "subs", "app"])).map(|a| a.name),
            Ok("app".into())
        );
        assert!(parse(&args(&["history", "app"])).is_err());
        assert!(parse(&args(&["frobnicate", "subscription/app"])).is_err());
        assert!(parse(&args(&["history", "subscription/app", "--revision=x"])).is_err());
        assert!(is_subscription_target(&args(&["history", "sub/app"])));
        assert!(!is_subscription_target(&args(&[
            "history",
            "deployment/web"
        ])));
    }

    #[test]
    fn status_says_where_the_rollout_is_as_kubectl_does() {
        let sub = |strategy: bool, rollout: serde_json::Value| -> Subscription {
            let mut spec = serde_json::json!({"subscribers": [], "feeds": []});
            if strategy {
                spec["rolloutStrategyName"] = "s".into();
            }
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
                "metadata": {"name": "app", "namespace": "ns"}, "spec": spec,
                "status": {"rollout": rollout}}))
            .expect("a Subscription")
        };
        assert!(matches!(
            progress(&sub(false, serde_json::Value::Null)),
            Progress::Done(_)
        ));
        let going = sub(
            true,
            serde_json::json!({"revision": "app-2", "revisionNumber": 2, "phase": "Progressing",
                "stage": 1, "stages": [
                    {"name": "one", "phase": "Succeeded", "clusters": ["a/a"], "updated": ["a/a"]},
                    {"name": "two", "phase": "Soaking", "clusters": ["b/b", "c/c"],
                     "updated": ["b/b", "c/c"], "healthy": ["b/b", "c/c"],
                     "message": "healthy; soaking for 4s more"}]}),
        );
        assert_eq!(
            progress(&going),
            Progress::Waiting(
                "Waiting for rollout of revision 2 to finish: stage 2 of 2 (two): 2 of 2 clusters \
                 updated, 2 healthy; healthy; soaking for 4s more"
                    .into()
            )
        );
        let back = sub(
            true,
            serde_json::json!({"revision": "app-3", "revisionNumber": 3, "phase": "RolledBack",
                "stage": 0, "message": "stage 1 (one) failed: not healthy"}),
        );
        assert!(
            matches!(progress(&back), Progress::Failed(m) if m.contains("was rolled back: stage 1 (one) failed"))
        );
        let done = sub(
            true,
            serde_json::json!({"revision": "app-2", "revisionNumber": 2, "phase": "Completed", "stage": 2}),
        );
        assert_eq!(
            progress(&done),
            Progress::Done("subscription \"app\" successfully rolled out (revision 2)".into())
        );
        let a = parse(&args(&["status", "sub/app", "-w=false", "--timeout=30s"])).expect("args");
        assert!(!a.watch);
        assert_eq!(a.timeout, Some(std::time::Duration::from_secs(30)));
    }

    #[test]
    fn the_history_table_has_kubectls_columns() {
        let rows = [
            Row {
                number: 1,
                cause: "first revision".into(),
            },
            Row {
                number: 12,
                cause: String::new(),
            },
        ];
        assert_eq!(
            history_table("app", &rows),
            "subscription.apps.clusternet.io/app\nREVISION  CHANGE-CAUSE\n1         first revision\n12        <none>\n"
        );
    }
}
