//! Reconciling a HelmRelease in its child (docs/spec/deployer.md §7.3), shared by the agent (Pull,
//! and Dual without AppPusher) and the parent (Push, and Dual with AppPusher): observe the latest
//! revision with the real `helm` ([`crate::helm::cli`]), plan one [`Step`] ([`plan_step`], pure),
//! run it, then report the release on the HelmRelease and on its Description (the phase table of
//! §7.3 step 12, over all of the Description's charts, plus one `manifestStatuses` entry per
//! chart so the Subscription's aggregated status covers charts too).
//!
//! Beyond upstream, from its users' bug reports: a failed release is retried (with backoff) until
//! it deploys, so fixing the cause in the child is enough (#476): a first install that failed is
//! uninstalled and installed again, a failed upgrade is upgraded again; an unchanged release is
//! never upgraded, also when the chart's version is empty (it is resolved to the repository's
//! latest first), so resyncs add no revisions; a release stuck `pending-*` (its helm was killed)
//! is rolled back or reinstalled once its timeout has passed, instead of failing forever with
//! "another operation is in progress"; an upgrade never installs, so "cannot re-use a name that
//! is still in use" (#318) cannot happen.

use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tracing::info;

use crate::apis::known;
use crate::apis::{
    Description, DescriptionPhase, DescriptionStatus, Feed, HelmOptions, HelmRelease,
    HelmReleaseStatus, HelmReleaseStatusPhase, ManifestStatus,
};
use crate::helm::cli::{self, At, Chart, Helm, HelmError, Install, Release};
use crate::helm::repo::{self, Credentials};
use crate::kube_ext::condition::{Verdict, kstatus_conditions};
use crate::kube_ext::health::{Health, HealthStatus};
use crate::runtime::apply;
use crate::runtime::controller::{ApiFailure, ReconcileError};
use crate::runtime::events::Events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

/// How soon a release another operation holds is looked at again.
const BUSY_RECHECK: Duration = Duration::from_secs(15);
/// How often a deployed release is compared with its HelmRelease when nothing changed (the
/// release may have been uninstalled or rolled back by hand in the child).
const RESYNC: Duration = Duration::from_secs(600);
/// A `pending-*` release older than its timeout plus this is taken for abandoned.
const STUCK_MARGIN: Duration = Duration::from_secs(60);
/// The first retry of a failed release comes after 2 s, each next one after twice as long, up to
/// 5 minutes: a helm run costs a second of CPU, so 30 failing releases must not spin.
const RETRY: crate::runtime::backoff::Exponential =
    crate::runtime::backoff::Exponential::new(Duration::from_secs(2), Duration::from_secs(300));

/// The wait before the next try after `failures` failures in a row.
pub fn retry_after(failures: u32) -> Duration {
    RETRY.after(failures)
}

/// What a HelmRelease looked like when it last failed, and when it may be tried again: our own
/// status writes wake the watch, and without this every write would be a retry at once.
#[derive(Debug, Clone, PartialEq)]
struct Retry {
    fingerprint: String,
    failures: u32,
    not_before: std::time::Instant,
}

/// The parts of a HelmRelease a user changes (not its status): a change there is tried at once.
fn fingerprint(hr: &HelmRelease) -> String {
    format!(
        "{:?}|{}|{:?}|{:?}",
        hr.metadata.generation,
        hr.metadata.deletion_timestamp.is_some(),
        hr.metadata.labels,
        hr.metadata.annotations
    )
}

#[derive(Debug, thiserror::Error)]
pub enum HelmDeployError {
    #[error("HelmRelease {release}: {source}")]
    Helm {
        release: String,
        #[source]
        source: HelmError,
    },
    #[error(transparent)]
    Api(#[from] ApiFailure),
    #[error("HelmRelease {release}: chart pull secret {secret}: {message}")]
    Secret {
        release: String,
        secret: String,
        message: String,
    },
    #[error("HelmRelease {release}: replacing the chart's CRDs: {message}")]
    Crds { release: String, message: String },
}

impl ReconcileError for HelmDeployError {
    fn metric_label(&self) -> &'static str {
        match self {
            HelmDeployError::Helm { .. } => "helm",
            HelmDeployError::Api(_) => "api",
            HelmDeployError::Secret { .. } => "secret",
            HelmDeployError::Crds { .. } => "crds",
        }
    }
}

/// One step towards what a HelmRelease asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The HelmRelease is being deleted: uninstall, then release its finalizer.
    Uninstall,
    /// No release (or one that must go first: `atomic` and not deployed, a failed first install,
    /// an abandoned `pending-install`).
    Install { uninstall_first: bool },
    /// The chart, its version or the values differ, or the last upgrade failed.
    Upgrade,
    /// An upgrade or rollback was abandoned half-way (`pending-upgrade` past its timeout).
    Rollback,
    /// Deployed as asked.
    UpToDate,
    /// Another operation holds the release (Helm would refuse): look again soon.
    Busy,
}

/// The release name of a HelmRelease: `spec.releaseName`, or its own name (legacy objects).
pub fn release_name(hr: &HelmRelease) -> String {
    hr.spec
        .release_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| hr.name_any())
}

/// The values a HelmRelease supplies (`spec.overrides`, JSON); `{}` when it has none.
pub fn wanted_values(hr: &HelmRelease) -> Result<Value, String> {
    let raw = hr
        .spec
        .overrides
        .as_ref()
        .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
        .unwrap_or_default();
    if raw.is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(&raw) {
        Ok(Value::Null) => Ok(json!({})),
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("spec.overrides must be a JSON object of Helm values".into()),
        Err(e) => Err(format!("spec.overrides is not JSON: {e}")),
    }
}

/// What to do next (§7.3 steps 7-9, and the retries described at the top). `version` is the
/// chart version wanted (`spec.version`, or the repository's latest when that is empty; `None`
/// when it could not be told, and then the version is not compared).
pub fn plan_step(
    hr: &HelmRelease,
    latest: Option<&Release>,
    values: &Value,
    version: Option<&str>,
    now: DateTime<Utc>,
) -> Step {
    if hr.metadata.deletion_timestamp.is_some() {
        return Step::Uninstall;
    }
    let Some(r) = latest else {
        return Step::Install {
            uninstall_first: false,
        };
    };
    let o = &hr.spec.options;
    let pending = r.status.starts_with("pending-") || r.status == "uninstalling";
    if pending {
        let limit = Duration::from_secs(o.effective_timeout_seconds().max(1) as u64) + STUCK_MARGIN;
        let since = DateTime::parse_from_rfc3339(&r.last_deployed)
            .map(|t| now.signed_duration_since(t.with_timezone(&Utc)))
            .ok()
            .and_then(|d| d.to_std().ok());
        if since.is_none_or(|s| s < limit) {
            return Step::Busy;
        }
        return match r.status.as_str() {
            "pending-upgrade" | "pending-rollback" if r.revision > 1 => Step::Rollback,
            _ => Step::Install {
                uninstall_first: true,
            },
        };
    }
    match r.status.as_str() {
        "uninstalled" => {
            return Step::Install {
                uninstall_first: false,
            };
        }
        s if o.atomic == Some(true) && s != "deployed" => {
            return Step::Install {
                uninstall_first: true,
            };
        }
        "failed" if r.revision <= 1 => {
            return Step::Install {
                uninstall_first: true,
            };
        }
        "failed" => return Step::Upgrade,
        _ => {}
    }
    let version_differs = version.is_some_and(|v| v != r.chart_version);
    if r.chart != o.chart || version_differs || r.values != *values {
        Step::Upgrade
    } else {
        Step::UpToDate
    }
}

/// The HelmRelease status a release reports (§7.3 step 11).
pub fn release_status(r: &Release) -> HelmReleaseStatus {
    HelmReleaseStatus {
        first_deployed: cli::go_time(&r.first_deployed),
        last_deployed: cli::go_time(&r.last_deployed),
        description: r.description.clone(),
        phase: Some(HelmReleaseStatusPhase::from(r.status.as_str())),
        notes: r.notes.clone(),
        version: r.revision,
        ..Default::default()
    }
}

/// Whether a HelmRelease is Ready, as kstatus reads it (deployer.md §17.2): deployed is Ready,
/// failed is Stalled (Helm's words as the message), anything on its way is Reconciling.
pub fn release_verdict(status: &HelmReleaseStatus) -> Verdict {
    let said = |what: &str| match status.notes.trim() {
        "" => what.to_string(),
        notes => format!("{what}: {notes}"),
    };
    match &status.phase {
        Some(HelmReleaseStatusPhase::Deployed) => {
            Verdict::Ready(format!("release deployed, revision {}", status.version))
        }
        Some(HelmReleaseStatusPhase::Failed) => {
            Verdict::Stalled("ReleaseFailed".into(), said("the release failed"))
        }
        Some(HelmReleaseStatusPhase::PendingInstall) => {
            Verdict::Progressing("Installing", "installing".into())
        }
        Some(HelmReleaseStatusPhase::PendingUpgrade | HelmReleaseStatusPhase::PendingRollback) => {
            Verdict::Progressing("Upgrading", "upgrading".into())
        }
        Some(HelmReleaseStatusPhase::Uninstalling) => {
            Verdict::Progressing("Uninstalling", "uninstalling".into())
        }
        Some(other) => Verdict::Progressing("Deploying", format!("release status {other}")),
        None => Verdict::Progressing("Deploying", "not installed yet".into()),
    }
}

/// `status` as written for `hr`: the generation it speaks for and the conditions of its
/// [`release_verdict`], keeping the transition times of `previous`.
pub fn release_status_of(
    hr: &HelmRelease,
    mut status: HelmReleaseStatus,
    previous: &[Condition],
    now: Timestamp,
) -> HelmReleaseStatus {
    status.observed_generation = hr.metadata.generation;
    status.conditions = kstatus_conditions(
        &release_verdict(&status),
        status.observed_generation,
        previous,
        now,
    );
    status
}

/// A failed step's status: phase `failed`, Helm's words as the notes (§7.3 steps 5, 10).
pub fn failed_status(previous: Option<&HelmReleaseStatus>, notes: &str) -> HelmReleaseStatus {
    HelmReleaseStatus {
        phase: Some(HelmReleaseStatusPhase::Failed),
        notes: notes.to_string(),
        ..previous.cloned().unwrap_or_default()
    }
}

/// The Description's phase and reason from all of its HelmReleases (the table of §7.3 step 12;
/// upstream writes it from whichever release was reconciled last, so one deployed chart hid a
/// failed one): the worst phase wins, and its notes are the reason.
pub fn description_status(
    desc: &Description,
    releases: &[Arc<HelmRelease>],
    now: Timestamp,
) -> DescriptionStatus {
    let rank = |p: &DescriptionPhase| match p {
        DescriptionPhase::Failure => 0,
        DescriptionPhase::Uninstalling => 1,
        DescriptionPhase::Installing => 2,
        DescriptionPhase::Upgrading => 3,
        DescriptionPhase::Pending => 4,
        DescriptionPhase::Unknown => 5,
        DescriptionPhase::Superseded => 6,
        DescriptionPhase::Success => 7,
    };
    let desc_name = desc.name_any();
    let mut worst: Option<(DescriptionPhase, String)> = None;
    let mut statuses = Vec::new();
    for chart in &desc.spec.charts {
        let name = format!("{desc_name}-{}-{}", chart.namespace, chart.name);
        let hr = releases.iter().find(|r| r.name_any() == name);
        let status = hr.and_then(|r| r.status.clone());
        let (phase, reason) = match status.as_ref().and_then(|s| s.phase.clone()) {
            None => (DescriptionPhase::Pending, String::new()),
            Some(p) => {
                let notes = status.as_ref().map(|s| s.notes.clone()).unwrap_or_default();
                match p {
                    HelmReleaseStatusPhase::Deployed => (DescriptionPhase::Success, String::new()),
                    HelmReleaseStatusPhase::PendingInstall => {
                        (DescriptionPhase::Installing, String::new())
                    }
                    HelmReleaseStatusPhase::PendingUpgrade => {
                        (DescriptionPhase::Upgrading, String::new())
                    }
                    HelmReleaseStatusPhase::Uninstalling => {
                        (DescriptionPhase::Uninstalling, String::new())
                    }
                    HelmReleaseStatusPhase::Superseded => (DescriptionPhase::Superseded, notes),
                    HelmReleaseStatusPhase::Failed => (DescriptionPhase::Failure, notes),
                    _ => (DescriptionPhase::Unknown, notes),
                }
            }
        };
        let deployed = phase == DescriptionPhase::Success;
        if worst.as_ref().is_none_or(|(w, _)| rank(&phase) < rank(w)) {
            worst = Some((phase, reason));
        }
        statuses.push(ManifestStatus {
            feed: Feed {
                kind: "HelmChart".into(),
                api_version: "apps.clusternet.io/v1alpha1".into(),
                namespace: chart.namespace.clone(),
                name: chart.name.clone(),
            },
            health: deployed.then(|| Health {
                status: HealthStatus::Current,
                message: "release deployed".into(),
            }),
            observed_status: status.and_then(|s| serde_json::to_value(s).ok()),
            ..Default::default()
        });
    }
    let (phase, reason) = worst.unwrap_or((DescriptionPhase::Success, String::new()));
    let previous = desc
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or(&[]);
    super::description::with_conditions(
        DescriptionStatus {
            phase: Some(phase),
            reason,
            manifest_statuses: statuses,
            observed_generation: desc.metadata.generation,
            conditions: Vec::new(),
        },
        previous,
        now,
    )
}

/// How a child is reached: a kubeconfig for helm, and a client for the CRDs `replaceCRDs` asks
/// to replace.
pub struct Target {
    pub kubeconfig: Vec<u8>,
    pub client: kube::Client,
}

impl Target {
    pub fn new(cfg: kube::Config) -> Result<Target, String> {
        let kubeconfig = cli::kubeconfig_for(&cfg).map_err(|e| e.to_string())?;
        let client = kube::Client::try_from(cfg).map_err(|e| e.to_string())?;
        Ok(Target { kubeconfig, client })
    }
}

/// What reconciling needs besides the child: helm, the parent (HelmReleases, Descriptions and
/// pull Secrets live there) and where events go.
pub struct HelmDeployer {
    helm: Helm,
    parent: kube::Client,
    events: Events,
    field_manager: &'static str,
    retries: std::sync::Mutex<std::collections::HashMap<String, Retry>>,
}

/// The status a reconcile last wrote (or found): writes are skipped only when they would
/// change nothing on the server.
struct Current(std::sync::Mutex<Option<HelmReleaseStatus>>);

impl Current {
    fn new(status: Option<HelmReleaseStatus>) -> Current {
        Current(std::sync::Mutex::new(status))
    }

    fn get(&self) -> Option<HelmReleaseStatus> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The status as it is now, entering `phase`.
    fn with_phase(&self, phase: HelmReleaseStatusPhase) -> HelmReleaseStatus {
        HelmReleaseStatus {
            phase: Some(phase),
            ..self.get().unwrap_or_default()
        }
    }

    fn set(&self, status: HelmReleaseStatus) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
    }
}

/// What a step runs with.
#[derive(Clone, Copy)]
struct Run<'a> {
    target: &'a Target,
    hr: &'a Arc<HelmRelease>,
    current: &'a Current,
    at: At<'a>,
    chart: &'a Chart<'a>,
    values: &'a Value,
    timeout: Duration,
}

/// The reason a failed helm run is reported under: the chart could not be had, or the
/// release itself failed.
fn failure_reason(e: &HelmError) -> &'static str {
    let e = e.to_string();
    if e.contains("failed to download")
        || e.contains("not found in")
        || e.contains("could not find")
    {
        "ChartLocateFailure"
    } else {
        "ReleaseFailure"
    }
}

fn key(hr: &HelmRelease) -> String {
    format!("{}/{}", hr.namespace().unwrap_or_default(), hr.name_any())
}

impl HelmDeployer {
    pub fn new(
        helm: Helm,
        parent: kube::Client,
        events: Events,
        field_manager: &'static str,
    ) -> HelmDeployer {
        HelmDeployer {
            helm,
            parent,
            events,
            field_manager,
            retries: Default::default(),
        }
    }

    /// Brings the release of `hr` in the child of `target` to what it asks for. A release that
    /// failed is tried again after [`retry_after`], or at once when the HelmRelease changes.
    pub async fn reconcile(
        &self,
        target: &Target,
        hr: Arc<HelmRelease>,
    ) -> Result<Action, HelmDeployError> {
        let k = key(&hr);
        let fp = fingerprint(&hr);
        let now = std::time::Instant::now();
        let waiting = {
            let retries = self.retries.lock().unwrap_or_else(|p| p.into_inner());
            retries
                .get(&k)
                .filter(|r| r.fingerprint == fp && r.not_before > now)
                .map(|r| r.not_before - now)
        };
        if let Some(wait) = waiting {
            return Ok(Action::requeue(wait));
        }
        let result = self.reconcile_now(target, hr).await;
        let mut retries = self.retries.lock().unwrap_or_else(|p| p.into_inner());
        match &result {
            Ok(_) => {
                retries.remove(&k);
            }
            Err(_) => {
                // the error goes to the controller (log, metrics); the next try waits for us
                let failures = retries.get(&k).map_or(0, |r| r.failures) + 1;
                retries.insert(
                    k,
                    Retry {
                        fingerprint: fp,
                        failures,
                        not_before: std::time::Instant::now() + retry_after(failures),
                    },
                );
            }
        }
        result
    }

    fn api_error(
        hr: &HelmRelease,
        what: &'static str,
    ) -> impl FnOnce(kube::Error) -> HelmDeployError {
        let fail = ApiFailure::about(hr, what);
        move |source| fail(source).into()
    }

    fn helm_error(hr: &HelmRelease) -> impl FnOnce(HelmError) -> HelmDeployError {
        let release = key(hr);
        move |source| HelmDeployError::Helm { release, source }
    }

    async fn reconcile_now(
        &self,
        target: &Target,
        hr: Arc<HelmRelease>,
    ) -> Result<Action, HelmDeployError> {
        // what the status is now, as this reconcile wrote it (the object it got is older)
        let current = Current::new(hr.status.clone());
        let ns = hr.namespace().unwrap_or_default();
        let api: Api<HelmRelease> = Api::namespaced(self.parent.clone(), &ns);
        let deleting = hr.metadata.deletion_timestamp.is_some();
        if !hr.finalizers().iter().any(|f| f == known::APP_FINALIZER) {
            if !deleting {
                // a HelmRelease written by hand gets the finalizer that makes deleting it uninstall
                self.add_finalizer(&api, &hr).await?;
            }
            return Ok(Action::await_change());
        }
        let o = &hr.spec.options;
        let name = release_name(&hr);
        let target_ns = hr.spec.target_namespace.clone();
        let timeout = Duration::from_secs(o.effective_timeout_seconds().max(1) as u64);
        let at = At {
            kubeconfig: &target.kubeconfig,
            name: &name,
            namespace: &target_ns,
        };
        if deleting {
            return self.uninstall(&api, &hr, &current, at, timeout).await;
        }
        let values = match wanted_values(&hr) {
            Ok(v) => v,
            Err(e) => return self.fail(&hr, &current, "InvalidOverrides", &e).await,
        };
        let credentials = self.credentials(&hr).await?;
        let latest = self.helm.latest(at).await.map_err(Self::helm_error(&hr))?;
        let version = wanted_version(o, latest.is_some(), credentials.as_ref()).await;
        let step = plan_step(
            &hr,
            latest.as_ref(),
            &values,
            version.as_deref(),
            Utc::now(),
        );
        if step == Step::Busy {
            if let Some(r) = &latest {
                self.report(&hr, &current, &release_status(r)).await?;
            }
            return Ok(Action::requeue(BUSY_RECHECK));
        }
        let chart = Chart {
            options: o,
            credentials: credentials.as_ref(),
        };
        let run = Run {
            target,
            hr: &hr,
            current: &current,
            at,
            chart: &chart,
            values: &values,
            timeout,
        };
        self.carry_out_and_report(step, &run, latest).await
    }

    /// Carries out `step` and reports the release as it then is (a failure as the release's
    /// failure).
    async fn carry_out_and_report(
        &self,
        step: Step,
        run: &Run<'_>,
        latest: Option<Release>,
    ) -> Result<Action, HelmDeployError> {
        let hr = run.hr;
        if let Err(e) = self.carry_out(&step, run).await? {
            return self
                .fail(hr, run.current, failure_reason(&e), &e.to_string())
                .await;
        }
        if step != Step::UpToDate {
            info!(helmrelease = %key(hr), release = %run.at.name, namespace = %run.at.namespace, step = ?step, "release reconciled");
        }
        // an up-to-date release is the one just read: no second look
        let now = match (&step, latest) {
            (Step::UpToDate, Some(r)) => Some(r),
            _ => self
                .helm
                .latest(run.at)
                .await
                .map_err(Self::helm_error(hr))?,
        };
        self.report_release(hr, run.current, now).await
    }

    async fn add_finalizer(
        &self,
        api: &Api<HelmRelease>,
        hr: &Arc<HelmRelease>,
    ) -> Result<(), HelmDeployError> {
        let mut fins = hr.finalizers().to_vec();
        fins.push(known::APP_FINALIZER.to_string());
        api.patch(
            &hr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": fins,
                "resourceVersion": hr.resource_version()}})),
        )
        .await
        .map_err(Self::api_error(hr, "adding the finalizer"))?;
        Ok(())
    }

    /// A deleted HelmRelease: its release is uninstalled from the child, then the finalizer goes.
    async fn uninstall(
        &self,
        api: &Api<HelmRelease>,
        hr: &Arc<HelmRelease>,
        current: &Current,
        at: At<'_>,
        timeout: Duration,
    ) -> Result<Action, HelmDeployError> {
        let uninstalling = current.with_phase(HelmReleaseStatusPhase::Uninstalling);
        self.write_status(hr, current, &uninstalling).await?;
        let wait = hr.spec.options.wait == Some(true);
        self.helm
            .uninstall(at, wait, timeout)
            .await
            .map_err(Self::helm_error(hr))?;
        info!(helmrelease = %key(hr), release = %at.name, namespace = %at.namespace, "release uninstalled");
        apply::release_finalizer(api, hr.as_ref(), known::APP_FINALIZER)
            .await
            .map_err(Self::api_error(hr, "releasing the finalizer"))?;
        Ok(Action::await_change())
    }

    /// Runs one planned step with helm, reporting the phase it enters first. The outer error is
    /// a status write that failed; the inner one what helm said.
    async fn carry_out(
        &self,
        step: &Step,
        run: &Run<'_>,
    ) -> Result<Result<(), HelmError>, HelmDeployError> {
        let Run {
            target,
            hr,
            current,
            at,
            chart,
            values,
            timeout,
        } = *run;
        let o = &hr.spec.options;
        Ok(match step {
            // nothing to run (a busy release was handled before)
            Step::UpToDate | Step::Busy | Step::Uninstall => Ok(()),
            Step::Rollback => self.helm.rollback(at, timeout).await,
            Step::Install { uninstall_first } => {
                let mut r = Ok(());
                if *uninstall_first {
                    let phase = current.with_phase(HelmReleaseStatusPhase::Uninstalling);
                    self.report(hr, current, &phase).await?;
                    r = self.helm.uninstall(at, true, timeout).await;
                }
                if r.is_ok() {
                    let phase = current.with_phase(HelmReleaseStatusPhase::PendingInstall);
                    self.report(hr, current, &phase).await?;
                    r = self.replace_crds(target, hr, chart).await;
                }
                if r.is_ok() {
                    let opts = Install::from_options(o, false);
                    r = self
                        .helm
                        .install(at, chart, Some(values), &opts, false)
                        .await;
                }
                r
            }
            Step::Upgrade => {
                let phase = current.with_phase(HelmReleaseStatusPhase::PendingUpgrade);
                self.report(hr, current, &phase).await?;
                let mut r = self.replace_crds(target, hr, chart).await;
                if r.is_ok() {
                    let opts = Install::from_options(o, true);
                    r = self
                        .helm
                        .install(at, chart, Some(values), &opts, true)
                        .await;
                }
                r
            }
        })
    }

    /// Reports the release as helm stores it after a step; a failed one (a hook, --wait) or
    /// none at all is a failure, retried with backoff.
    async fn report_release(
        &self,
        hr: &Arc<HelmRelease>,
        current: &Current,
        release: Option<Release>,
    ) -> Result<Action, HelmDeployError> {
        let Some(r) = release else {
            let why = "helm reported success but no release is stored";
            return self.fail(hr, current, "ReleaseFailure", why).await;
        };
        self.report(hr, current, &release_status(&r)).await?;
        if r.status == "failed" {
            return self
                .fail(hr, current, "ReleaseFailure", &r.description)
                .await;
        }
        Ok(Action::requeue(RESYNC))
    }

    /// Reports a failure on the HelmRelease (phase `failed`, notes) and its Description, with
    /// a Warning, and asks to be retried with backoff.
    async fn fail(
        &self,
        hr: &Arc<HelmRelease>,
        current: &Current,
        reason: &str,
        message: &str,
    ) -> Result<Action, HelmDeployError> {
        self.events.warn(hr.as_ref(), reason, message);
        let failed = failed_status(current.get().as_ref(), message);
        self.report(hr, current, &failed).await?;
        Err(HelmDeployError::Helm {
            release: key(hr),
            source: HelmError::Helm(message.to_string()),
        })
    }

    /// Writes the HelmRelease's status (when it changed) and its Description's.
    async fn report(
        &self,
        hr: &Arc<HelmRelease>,
        current: &Current,
        status: &HelmReleaseStatus,
    ) -> Result<(), HelmDeployError> {
        self.write_status(hr, current, status).await?;
        self.describe(hr).await
    }

    async fn write_status(
        &self,
        hr: &HelmRelease,
        current: &Current,
        status: &HelmReleaseStatus,
    ) -> Result<(), HelmDeployError> {
        let previous = current.get().or_else(|| hr.status.clone());
        let status = &release_status_of(
            hr,
            status.clone(),
            previous
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or(&[]),
            Timestamp::now(),
        );
        if current.get().as_ref() == Some(status) {
            return Ok(());
        }
        let api: Api<HelmRelease> =
            Api::namespaced(self.parent.clone(), &hr.namespace().unwrap_or_default());
        let status_json = serde_json::to_value(status).unwrap_or_default();
        if apply::write_status(&api, self.field_manager, hr, status_json)
            .await
            .map_err(Self::api_error(hr, "writing its status"))?
        {
            current.set(status.clone());
        }
        Ok(())
    }

    /// The owning Description's status from all of its HelmReleases, read afresh (two of its
    /// charts reconciled at once each see the other's last status).
    async fn describe(&self, hr: &HelmRelease) -> Result<(), HelmDeployError> {
        let ns = hr.namespace().unwrap_or_default();
        let Some(desc_name) = hr.labels().get(known::CONFIG_NAME_LABEL).cloned() else {
            return Ok(());
        };
        let descs: Api<Description> = Api::namespaced(self.parent.clone(), &ns);
        let Some(desc) = descs
            .get_opt(&desc_name)
            .await
            .map_err(Self::api_error(hr, "reading its Description"))?
        else {
            return Ok(());
        };
        if desc.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let uid = desc.uid().unwrap_or_default();
        let releases: Vec<Arc<HelmRelease>> =
            Api::<HelmRelease>::namespaced(self.parent.clone(), &ns)
                .list(
                    &kube::api::ListParams::default()
                        .labels(&format!("{}={uid}", known::CONFIG_UID_LABEL)),
                )
                .await
                .map_err(Self::api_error(
                    hr,
                    "listing its Description's HelmReleases",
                ))?
                .items
                .into_iter()
                .map(Arc::new)
                .collect();
        let status = description_status(&desc, &releases, Timestamp::now());
        if desc.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let status = serde_json::to_value(&status).unwrap_or_default();
        apply::write_status(&descs, self.field_manager, &desc, status)
            .await
            .map_err(Self::api_error(hr, "writing its Description's status"))?;
        Ok(())
    }

    /// The chart pull secret's credentials, read from the parent (§7.3 step 4).
    async fn credentials(&self, hr: &HelmRelease) -> Result<Option<Credentials>, HelmDeployError> {
        repo::read_credentials(
            &self.parent,
            &hr.spec.options,
            &hr.namespace().unwrap_or_default(),
        )
        .await
        .map_err(|e| HelmDeployError::Secret {
            release: key(hr),
            secret: e.secret,
            message: e.what,
        })
    }

    /// `replaceCRDs` (and not `skipCRDs`): every CRD of the chart is applied first, replacing
    /// what the child has (Helm itself only ever creates CRDs).
    async fn replace_crds(
        &self,
        target: &Target,
        hr: &HelmRelease,
        chart: &Chart<'_>,
    ) -> Result<(), HelmError> {
        let o = &hr.spec.options;
        if o.replace_crds != Some(true) || o.skip_crds == Some(true) {
            return Ok(());
        }
        let text = self.helm.crds(chart).await?;
        let docs: Vec<Value> = crate::kube_ext::yaml::from_str_documents(&text)
            .map_err(|e| HelmError::Helm(format!("the chart's CRDs are not YAML: {e}")))?;
        let crds: Api<DynamicObject> = Api::all_with(
            target.client.clone(),
            &kube::discovery::ApiResource::erase::<
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
            >(&()),
        );
        for doc in docs.into_iter().filter(|d| d.is_object()) {
            let Some(name) = doc.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            let mut doc = doc.clone();
            if let Some(m) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            crds.patch(
                name,
                &PatchParams::apply(self.field_manager).force(),
                &Patch::Apply(&doc),
            )
            .await
            .map_err(|e| HelmError::Helm(format!("replacing CRD {name}: {e}")))?;
        }
        Ok(())
    }
}

/// The chart version a release is compared with: the one asked for, or (an empty version) the
/// repository's latest, asked only when there is a release to compare with; an answer that
/// cannot be had compares nothing.
async fn wanted_version(
    o: &HelmOptions,
    released: bool,
    credentials: Option<&Credentials>,
) -> Option<String> {
    if !o.version.is_empty() {
        Some(o.version.clone())
    } else if released {
        repo::locate(o, credentials).await.ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hr(version: &str, atomic: bool) -> HelmRelease {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmRelease",
            "metadata": {"name": "d-default-hello", "namespace": "clusternet-x"},
            "spec": {"repo": "https://charts.example", "chart": "hello", "version": version,
                "targetNamespace": "demo", "releaseName": "hello", "atomic": atomic,
                "timeoutSeconds": 60}
        }))
        .expect("a HelmRelease")
    }

    fn release(status: &str, revision: i64, version: &str, values: Value) -> Release {
        Release {
            revision,
            status: status.into(),
            chart: "hello".into(),
            chart_version: version.into(),
            values,
            last_deployed: "2026-12-01T20:00:00Z".into(),
            ..Default::default()
        }
    }

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T20:00:00Z")
            .expect("time")
            .with_timezone(&Utc)
            + chrono::Duration::minutes(minutes)
    }

    #[test]
    fn installs_what_is_absent_and_upgrades_only_what_differs() {
        let h = hr("0.1.0", false);
        let v = json!({});
        assert_eq!(
            plan_step(&h, None, &v, Some("0.1.0"), at(0)),
            Step::Install {
                uninstall_first: false
            }
        );
        let deployed = release("deployed", 1, "0.1.0", json!({}));
        assert_eq!(
            plan_step(&h, Some(&deployed), &v, Some("0.1.0"), at(0)),
            Step::UpToDate
        );
        assert_eq!(
            plan_step(&h, Some(&deployed), &v, Some("0.2.0"), at(0)),
            Step::Upgrade
        );
        assert_eq!(
            plan_step(&h, Some(&deployed), &json!({"a": 1}), Some("0.1.0"), at(0)),
            Step::Upgrade
        );
        // an empty version the repository could not resolve compares nothing: no upgrade loop
        assert_eq!(
            plan_step(&hr("", false), Some(&deployed), &v, None, at(0)),
            Step::UpToDate
        );
        let mut deleting = h.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(
            plan_step(&deleting, Some(&deployed), &v, None, at(0)),
            Step::Uninstall
        );
    }

    #[test]
    fn failed_releases_are_retried_and_stuck_ones_recovered() {
        let h = hr("0.1.0", false);
        let v = json!({});
        // a first install that failed: installed again from scratch (upstream #476)
        assert_eq!(
            plan_step(
                &h,
                Some(&release("failed", 1, "0.1.0", json!({}))),
                &v,
                Some("0.1.0"),
                at(0)
            ),
            Step::Install {
                uninstall_first: true
            }
        );
        // a failed upgrade: upgraded again, never installed over (upstream #318)
        assert_eq!(
            plan_step(
                &h,
                Some(&release("failed", 3, "0.1.0", json!({}))),
                &v,
                Some("0.1.0"),
                at(0)
            ),
            Step::Upgrade
        );
        // atomic: anything not deployed goes first (upstream)
        assert_eq!(
            plan_step(
                &hr("0.1.0", true),
                Some(&release("failed", 3, "0.1.0", json!({}))),
                &v,
                Some("0.1.0"),
                at(0)
            ),
            Step::Install {
                uninstall_first: true
            }
        );
        // pending: busy within its timeout, recovered after it
        let p = release("pending-upgrade", 2, "0.1.0", json!({}));
        assert_eq!(
            plan_step(&h, Some(&p), &v, Some("0.1.0"), at(1)),
            Step::Busy
        );
        assert_eq!(
            plan_step(&h, Some(&p), &v, Some("0.1.0"), at(3)),
            Step::Rollback
        );
        let p = release("pending-install", 1, "0.1.0", json!({}));
        assert_eq!(
            plan_step(&h, Some(&p), &v, Some("0.1.0"), at(3)),
            Step::Install {
                uninstall_first: true
            }
        );
    }

    #[test]
    fn failed_releases_are_retried_ever_more_slowly() {
        let waits: Vec<u64> = (1..=10).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(retry_after(u32::MAX).as_secs(), 300);
        let mut h = hr("1", false);
        let before = fingerprint(&h);
        h.status = Some(HelmReleaseStatus::default());
        assert_eq!(
            fingerprint(&h),
            before,
            "our own status writes are no change"
        );
        h.metadata.generation = Some(2);
        assert_ne!(fingerprint(&h), before);
    }

    #[test]
    fn values_come_from_the_overrides() {
        let mut h = hr("1", false);
        assert_eq!(wanted_values(&h), Ok(json!({})));
        h.spec.overrides = Some(k8s_openapi::ByteString(br#"{"greeting":"hi"}"#.to_vec()));
        assert_eq!(wanted_values(&h), Ok(json!({"greeting": "hi"})));
        h.spec.overrides = Some(k8s_openapi::ByteString(b" ".to_vec()));
        assert_eq!(wanted_values(&h), Ok(json!({})));
        h.spec.overrides = Some(k8s_openapi::ByteString(b"[1]".to_vec()));
        assert!(wanted_values(&h).is_err());
        h.spec.release_name = None;
        assert_eq!(release_name(&h), "d-default-hello");
    }

    #[test]
    fn the_description_says_the_worst_of_its_charts() {
        let desc: Description = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
            "metadata": {"name": "d", "namespace": "clusternet-x"},
            "spec": {"deployer": "Helm", "charts": [
                {"namespace": "default", "name": "hello"}, {"namespace": "default", "name": "db"}]}
        }))
        .expect("a Description");
        let with = |name: &str, phase: &str, notes: &str| {
            let mut h = hr("1", false);
            h.metadata.name = Some(name.into());
            h.status = Some(HelmReleaseStatus {
                phase: Some(HelmReleaseStatusPhase::from(phase)),
                notes: notes.into(),
                ..Default::default()
            });
            Arc::new(h)
        };
        let now = Timestamp::UNIX_EPOCH;
        let s = description_status(&desc, &[with("d-default-hello", "deployed", "")], now);
        assert_eq!(
            s.phase,
            Some(DescriptionPhase::Pending),
            "db has no release yet"
        );
        assert_eq!(s.manifest_statuses.len(), 2);
        assert_eq!(s.manifest_statuses[0].feed.kind, "HelmChart");
        assert_eq!(
            s.manifest_statuses[0]
                .observed_status
                .as_ref()
                .and_then(|o| o.get("phase")),
            Some(&json!("deployed"))
        );
        let s = description_status(
            &desc,
            &[
                with("d-default-hello", "deployed", ""),
                with("d-default-db", "failed", "boom"),
            ],
            now,
        );
        assert_eq!(
            (s.phase, s.reason.as_str()),
            (Some(DescriptionPhase::Failure), "boom")
        );
        let s = description_status(
            &desc,
            &[
                with("d-default-hello", "deployed", ""),
                with("d-default-db", "deployed", ""),
            ],
            now,
        );
        assert_eq!(
            (s.phase, s.reason.as_str()),
            (Some(DescriptionPhase::Success), "")
        );
        assert_eq!(s.conditions[0].type_, "Ready");
        assert_eq!(s.conditions[0].status, "True");
    }

    #[test]
    fn a_release_is_ready_when_deployed_and_stalled_when_failed() {
        let of = |phase: &str, notes: &str| {
            let st = HelmReleaseStatus {
                phase: Some(HelmReleaseStatusPhase::from(phase)),
                notes: notes.into(),
                version: 2,
                ..Default::default()
            };
            let mut h = hr("1", false);
            h.metadata.generation = Some(4);
            release_status_of(&h, st, &[], Timestamp::UNIX_EPOCH)
        };
        let deployed = of("deployed", "");
        assert_eq!(deployed.observed_generation, Some(4));
        assert_eq!(
            deployed
                .conditions
                .iter()
                .map(|c| (c.type_.as_str(), c.status.as_str(), c.observed_generation))
                .collect::<Vec<_>>(),
            vec![("Ready", "True", Some(4))]
        );
        let failed = of("failed", "chart not found");
        assert!(
            failed
                .conditions
                .iter()
                .any(|c| c.type_ == "Stalled" && c.message.contains("chart not found"))
        );
        let upgrading = of("pending-upgrade", "");
        assert!(
            upgrading
                .conditions
                .iter()
                .any(|c| c.type_ == "Reconciling" && c.reason == "Upgrading")
        );
    }
}
