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
  kubectl clusternet rollout approve subscription/NAME [-n NAMESPACE] [--stage=N]
  kubectl clusternet rollout pause|resume|restart subscription/NAME [-n NAMESPACE]
  kubectl clusternet rollout undo subscription/NAME [-n NAMESPACE] [--to-revision=N]

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
  approve      let the stage that waits for approval (requireApproval) go on, or approve stage N
               of the revision being rolled out ahead of time; who approved is recorded
  pause        hold the rollout where it is (the time paused does not count against deadlines)
  resume       let a paused rollout go on
  restart      roll the newest revision out again from stage 1 (after a rollback, say)
  undo         roll revision N (default: the one before the revision rolled out now) out again,
               stage by stage, until the next change

Options:
  -n, --namespace NS    namespace of the Subscription (default: the context's, default)
      --revision N      show what revision N holds: the Subscription's spec, each feed's content,
                        and the overrides of each cluster namespace
  -o, --output FORMAT   json or yaml (with --revision: that revision's content)
  -w, --watch           status: keep following until the rollout ends (default true)
      --timeout D       status: give up after this long (a duration, 0 = never; default 0)
      --stage N         approve: the stage (1 = the first) to approve
      --to-revision N   undo: the revision to go back to

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
    /// `approve --stage N` (1-based).
    pub stage: Option<usize>,
    /// `undo --to-revision N`.
    pub to_revision: Option<i64>,
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
            "--stage" => {
                let v = value("--stage")?;
                out.stage = Some(v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("invalid argument {v:?} for \"--stage\" flag: a stage number from 1")
                })?);
            }
            "--to-revision" => {
                let v = value("--to-revision")?;
                let n: i64 = v
                    .parse()
                    .map_err(|_| format!("invalid argument {v:?} for \"--to-revision\" flag"))?;
                out.to_revision = (n != 0).then_some(n);
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
        RolloutPhase::Progressing if r.paused_at.is_some() => Progress::Waiting(format!(
            "Waiting for rollout of revision {} to finish: it is paused ({})",
            r.revision_number, r.message
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

/// The revisions of `sub` as (number, name), oldest first.
async fn revisions_of(
    client: &kube::Client,
    sub: &Subscription,
) -> Result<Vec<ControllerRevision>, String> {
    let revisions: Api<ControllerRevision> =
        Api::namespaced(client.clone(), &sub.namespace().unwrap_or_default());
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
    Ok(list)
}

/// The user the API server takes this command's credentials for (`kubectl auth whoami`).
async fn whoami(client: &kube::Client) -> Result<String, String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(
            &kube::api::PostParams::default(),
            &SelfSubjectReview::default(),
        )
        .await
        .map_err(|e| format!("asking the API server who approves (SelfSubjectReview): {e}"))?;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| "the API server did not say who approves".into())
}

/// What `approve`, `pause`, `resume`, `restart` and `undo` write: the Subscription's annotation
/// (the rollout controller acts on it), and what to print. An annotation value of None removes it.
pub fn control_patch(
    verb: &str,
    sub: &Subscription,
    revisions: &[(i64, String)],
    user: &str,
    now: &str,
    args: &RolloutArgs,
) -> Result<(&'static str, Option<String>, String), String> {
    let name = sub.name_any();
    let target = format!("subscription.apps.clusternet.io/{name}");
    if sub.spec.rollout_strategy_name.is_none() {
        return Err(format!(
            "subscription \"{name}\" has no rollout strategy (spec.rolloutStrategyName): every \
             change reaches every cluster at once, there is no rollout to {verb}"
        ));
    }
    let rollout = sub.status.as_ref().and_then(|s| s.rollout.as_deref());
    let annotations = sub.annotations();
    match verb {
        "pause" => {
            if annotations
                .get(known::ROLLOUT_PAUSED_ANNOTATION)
                .map(String::as_str)
                == Some("true")
            {
                return Ok((
                    known::ROLLOUT_PAUSED_ANNOTATION,
                    Some("true".into()),
                    format!("{target} is already paused"),
                ));
            }
            Ok((
                known::ROLLOUT_PAUSED_ANNOTATION,
                Some("true".into()),
                format!("{target} paused"),
            ))
        }
        "resume" => {
            if !annotations.contains_key(known::ROLLOUT_PAUSED_ANNOTATION) {
                return Err(format!("{target} is not paused"));
            }
            Ok((
                known::ROLLOUT_PAUSED_ANNOTATION,
                None,
                format!("{target} resumed"),
            ))
        }
        "restart" => Ok((
            known::ROLLOUT_RESTART_ANNOTATION,
            Some(now.into()),
            format!("{target} restarted"),
        )),
        "approve" => {
            let r = rollout.ok_or_else(|| format!("{target} has no rollout yet"))?;
            let (index, stage) = match args.stage {
                Some(n) => r
                    .stages
                    .get(n - 1)
                    .map(|s| (n - 1, s))
                    .ok_or_else(|| format!("revision {} has {} stages, not {n}", r.revision_number, r.stages.len()))?,
                None => r
                    .stages
                    .iter()
                    .enumerate()
                    .find(|(_, s)| s.phase == crate::apis::StagePhase::WaitingForApproval)
                    .ok_or_else(|| {
                        format!(
                            "no stage of revision {} is waiting for approval; name one with --stage=N",
                            r.revision_number
                        )
                    })?,
            };
            if r.phase != RolloutPhase::Progressing {
                return Err(format!(
                    "the rollout of revision {} is {}: there is nothing to approve",
                    r.revision_number, r.phase
                ));
            }
            let approval = crate::apis::RolloutApproval {
                revision: r.revision_number,
                stage: stage.name.clone(),
                user: user.to_string(),
            };
            let value = serde_json::to_string(&approval).map_err(|e| e.to_string())?;
            Ok((
                known::ROLLOUT_APPROVAL_ANNOTATION,
                Some(value),
                format!(
                    "{target} stage {} ({}) of revision {} approved by {user}",
                    index + 1,
                    stage.name,
                    r.revision_number
                ),
            ))
        }
        "undo" => {
            let newest = revisions
                .iter()
                .map(|r| r.0)
                .max()
                .ok_or_else(|| format!("{target} has no revisions"))?;
            let now_out = rollout.map(|r| r.revision_number).unwrap_or(newest);
            let to = match args.to_revision {
                Some(n) => revisions
                    .iter()
                    .find(|r| r.0 == n)
                    .map(|r| r.0)
                    .ok_or("unable to find the specified revision")?,
                None => revisions
                    .iter()
                    .filter(|r| r.0 < now_out)
                    .map(|r| r.0)
                    .max()
                    .ok_or_else(|| format!("{target} has no revision before revision {now_out}"))?,
            };
            let undo = crate::apis::RolloutUndo { to, newest };
            let value = serde_json::to_string(&undo).map_err(|e| e.to_string())?;
            Ok((
                known::ROLLOUT_UNDO_ANNOTATION,
                Some(value),
                format!("{target} rolled back (to revision {to}, stage by stage)"),
            ))
        }
        other => Err(format!("unknown command {other:?} for \"rollout\"")),
    }
}

async fn control(
    client: &kube::Client,
    subs: &Api<Subscription>,
    args: &RolloutArgs,
    sub: &Subscription,
) -> Result<ExitCode, String> {
    let revisions: Vec<(i64, String)> = revisions_of(client, sub)
        .await?
        .iter()
        .map(|r| (r.revision, r.name_any()))
        .collect();
    let user = if args.verb == "approve" {
        whoami(client).await?
    } else {
        String::new()
    };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let (key, value, said) = control_patch(&args.verb, sub, &revisions, &user, &now, args)?;
    let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
    subs.patch(
        &sub.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(crate::emit(&format!("{said}\n")))
}

pub async fn run(
    client: kube::Client,
    args: &RolloutArgs,
    context_namespace: Option<&str>,
) -> Result<ExitCode, String> {
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
    match args.verb.as_str() {
        "status" => return status(&subs, args, sub).await,
        "history" => {}
        _ => return control(&client, &subs, args, &sub).await,
    }
    let list = revisions_of(&client, &sub).await?;
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
            stage: None,
            to_revision: None,
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
