//! HelmChart feeds in the parent (docs/spec/deployer.md §6, §7.1): every HelmChart carries the
//! `apps.clusternet.io/config.*` labels a feed is found by, and its `status` says whether the
//! chart exists: `Found`, or `NotFound` with Helm's reason (the repository's `index.yaml` for
//! HTTP(S) repositories, the tags of `<repo>/<chart>` for `oci://` ones, credentials from
//! `chartPullSecret`). A chart is looked up when its spec changes and again now and then (one
//! NotFound may be pushed later), never because of our own status write.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::runtime::controller::Action;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::apis::{HelmChart, HelmChartPhase, HelmChartStatus};
use crate::helm::repo::{self, Credentials};
use crate::runtime::Runtime;
use crate::runtime::controller::{ApiFailure, Controller, ReconcileError};

/// How often a Found chart is looked up again.
const RECHECK_FOUND: Duration = Duration::from_secs(600);
/// How often a NotFound chart is looked up again.
const RECHECK_NOT_FOUND: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum HelmChartError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
    #[error("HelmChart {chart}: chartPullSecret {secret}: {what}")]
    Secret {
        chart: String,
        secret: String,
        what: String,
    },
}
impl ReconcileError for HelmChartError {
    fn metric_label(&self) -> &'static str {
        match self {
            HelmChartError::Api(_) => "api",
            HelmChartError::Secret { .. } => "secret",
        }
    }
}

struct Ctx {
    rt: Runtime,
    /// chart key -> (generation, when) of the last lookup.
    looked: Mutex<HashMap<String, (Option<i64>, Instant)>>,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let charts = rt.cache.watch::<HelmChart>();
    let ctx = Arc::new(Ctx {
        rt,
        looked: Mutex::default(),
    });
    Controller::new("helmchart", &charts)
        .run(stop, move |c| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, c).await }
        })
        .await;
}

fn key(c: &HelmChart) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}

/// The feed labels of a HelmChart (§6): what finds it as a feed.
pub fn feed_labels(c: &HelmChart) -> BTreeMap<String, String> {
    let feed = crate::apis::Feed::new(
        "apps.clusternet.io/v1alpha1",
        "HelmChart",
        c.namespace().unwrap_or_default(),
        c.name_any(),
    );
    super::feeds::manifest_selector(&feed)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// The status a lookup's result gives (§7.1), for the spec of `generation`.
pub fn status_of(found: &Result<String, String>, generation: Option<i64>) -> HelmChartStatus {
    match found {
        Ok(_) => HelmChartStatus {
            phase: Some(HelmChartPhase::Found),
            reason: String::new(),
            observed_generation: generation,
        },
        Err(reason) => HelmChartStatus {
            phase: Some(HelmChartPhase::NotFound),
            reason: reason.clone(),
            observed_generation: generation,
        },
    }
}

async fn reconcile(ctx: &Ctx, chart: Arc<HelmChart>) -> Result<Action, HelmChartError> {
    if chart.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let k = key(&chart);
    let ns = chart.namespace().unwrap_or_default();
    let api: Api<HelmChart> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let err = |what: &'static str| ApiFailure::about(chart.as_ref(), what);
    let labels = feed_labels(&chart);
    if labels.iter().any(|(l, v)| chart.labels().get(l) != Some(v)) {
        api.patch(
            &chart.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .map_err(err("writing its feed labels"))?;
    }
    let found_before = chart
        .status
        .as_ref()
        .is_some_and(|s| s.phase == Some(HelmChartPhase::Found));
    let recheck = if found_before {
        RECHECK_FOUND
    } else {
        RECHECK_NOT_FOUND
    };
    let due = {
        let looked = ctx
            .looked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match looked.get(&k) {
            Some((generation, at)) => {
                *generation != chart.metadata.generation || at.elapsed() >= recheck
            }
            None => true,
        }
    };
    if !due {
        return Ok(Action::requeue(recheck));
    }
    let credentials = credentials(ctx, &chart).await?;
    let found = repo::locate(&chart.spec.options, credentials.as_ref()).await;
    ctx.looked
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(k.clone(), (chart.metadata.generation, Instant::now()));
    let status = status_of(&found, chart.metadata.generation);
    if chart.status.as_ref() != Some(&status) {
        match &found {
            Ok(version) => info!(chart = %k, %version, "chart found"),
            Err(reason) => info!(chart = %k, %reason, "chart not found"),
        }
        api.patch_status(
            &chart.name_any(),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": status.phase, "reason": status.reason,
                "observedGeneration": status.observed_generation}}),
            ),
        )
        .await
        .map_err(err("writing its status"))?;
    }
    Ok(Action::requeue(if found.is_ok() {
        RECHECK_FOUND
    } else {
        RECHECK_NOT_FOUND
    }))
}

/// The `chartPullSecret` credentials (keys `username`, `password`), when one is named; a
/// missing Secret or key is an error (retried), as upstream.
async fn credentials(ctx: &Ctx, chart: &HelmChart) -> Result<Option<Credentials>, HelmChartError> {
    repo::read_credentials(
        &ctx.rt.client,
        &chart.spec.options,
        &chart.namespace().unwrap_or_default(),
    )
    .await
    .map_err(|e| HelmChartError::Secret {
        chart: key(chart),
        secret: e.secret,
        what: e.what,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::known;

    #[test]
    fn labels_and_status_as_upstream() {
        let chart: HelmChart = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
            "metadata": {"name": "mysql", "namespace": "default"},
            "spec": {"repo": "https://charts.example", "chart": "mysql", "version": "9.4.1",
                     "targetNamespace": "abc"}}))
        .expect("a HelmChart");
        let l = feed_labels(&chart);
        assert_eq!(l[known::CONFIG_KIND_LABEL], "HelmChart");
        assert_eq!(l[known::CONFIG_GROUP_LABEL], "apps.clusternet.io");
        assert_eq!(l[known::CONFIG_NAMESPACE_LABEL], "default");
        assert_eq!(
            status_of(&Err("nope".into()), Some(2)),
            HelmChartStatus {
                phase: Some(HelmChartPhase::NotFound),
                reason: "nope".into(),
                observed_generation: Some(2),
            }
        );
        assert_eq!(
            status_of(&Ok("1".into()), Some(1)).phase,
            Some(HelmChartPhase::Found)
        );
    }
}
