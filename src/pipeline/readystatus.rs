//! `Ready` on the kinds whose status says nothing else (beyond upstream, docs/spec/deployer.md
//! §17.3), as kstatus reads it, with `observedGeneration`:
//! - a **Base** (controller `basestatus`) is Ready when every Description rendered from it is
//!   Ready (the deployers' judgment, §17.2), Stalled when one is, Reconciling otherwise;
//! - a **RolloutStrategy** (controller `rolloutstrategystatus`) is Ready when its stages can be
//!   read (selectors, counts, durations), Stalled saying what is wrong when not: a Subscription
//!   naming it would stop at the same error.
//!
//! observe (the cache) -> [`base_verdict`] / [`strategy_verdict`] (pure) -> the status, written
//! only when it differs, each by its own field manager.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::index;
use crate::apis::apps::ReadinessStatus;
use crate::apis::{Base, Description, DescriptionDeployer, RolloutStrategy, known};
use crate::kube_ext::condition::{STALLED, Verdict, kstatus_conditions};
use crate::runtime::Runtime;
use crate::runtime::apply;
use crate::runtime::cache::Index;
use crate::runtime::controller::{Action, ApiFailure, Controller, ReconcileError, named_by};

pub const BASE_FIELD_MANAGER: &str = "clusternet/controller/basestatus";
pub const STRATEGY_FIELD_MANAGER: &str = "clusternet/controller/rolloutstrategystatus";

#[derive(Debug, thiserror::Error)]
pub enum ReadyError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl ReconcileError for ReadyError {
    fn metric_label(&self) -> &'static str {
        match self {
            ReadyError::Api(_) => "api",
        }
    }
}

/// Whether `base` is Ready, from the Descriptions rendered from it.
pub fn base_verdict(base: &Base, descriptions: &[Arc<Description>]) -> Verdict {
    let live: Vec<&Arc<Description>> = descriptions
        .iter()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .collect();
    if let Some(missing) = DescriptionDeployer::needed_by(&base.spec.feeds)
        .into_iter()
        .find(|k| !live.iter().any(|d| d.spec.deployer == *k))
    {
        return Verdict::Progressing("Rendering", format!("no {missing} Description yet"));
    }
    let mut changing: Option<String> = None;
    for d in &live {
        let conditions = d
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or(&[]);
        if let Some(c) = conditions
            .iter()
            .find(|c| c.type_ == STALLED && c.status == "True")
        {
            return Verdict::Stalled(
                "DescriptionFailed".into(),
                format!("Description {}: {}", d.name_any(), c.message),
            );
        }
        let ready = conditions.iter().find(|c| c.type_ == "Ready");
        let current = ready
            .is_some_and(|c| c.status == "True" && c.observed_generation == d.metadata.generation);
        if !current && changing.is_none() {
            let why = ready
                .filter(|c| !c.message.is_empty())
                .map(|c| c.message.clone())
                .unwrap_or_else(|| "not deployed yet".into());
            changing = Some(format!("Description {}: {why}", d.name_any()));
        }
    }
    match changing {
        Some(why) => Verdict::Progressing("Deploying", why),
        None => Verdict::Ready(match live.len() {
            1 => "its Description is Ready".into(),
            n => format!("its {n} Descriptions are Ready"),
        }),
    }
}

/// Whether `strategy` can be used: its stages read over no cluster in particular.
pub fn strategy_verdict(strategy: &RolloutStrategy) -> Verdict {
    match super::rollout::stages(&strategy.spec.stages, &[], &|_| BTreeMap::new()) {
        Ok(stages) => Verdict::Ready(match stages.len() {
            1 => "1 stage".into(),
            n => format!("{n} stages"),
        }),
        Err(e) => Verdict::Stalled("InvalidStrategy".into(), e),
    }
}

/// The status `verdict` makes for an object of `generation` whose status is `previous`.
pub fn status_of(
    verdict: &Verdict,
    generation: Option<i64>,
    previous: Option<&ReadinessStatus>,
    now: Timestamp,
) -> ReadinessStatus {
    let before = previous.map(|p| p.conditions.as_slice()).unwrap_or(&[]);
    ReadinessStatus {
        observed_generation: generation,
        conditions: kstatus_conditions(verdict, generation, before, now),
    }
}

/// Writes `want` as `obj`'s status unless it already says that.
async fn write<K>(
    rt: &Runtime,
    obj: &K,
    current: Option<&ReadinessStatus>,
    want: &ReadinessStatus,
    manager: &str,
) -> Result<(), ReadyError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    if current == Some(want) {
        return Ok(());
    }
    let api: Api<K> = Api::namespaced(rt.client.clone(), &obj.namespace().unwrap_or_default());
    apply::write_status(&api, manager, obj, json!(want))
        .await
        .map_err(ApiFailure::about(obj, "writing its Ready condition"))?;
    Ok(())
}

struct BaseCtx {
    rt: Runtime,
    descriptions_by_base: Index<Description>,
}

/// Keeps every Base's Ready condition until `stop`.
pub async fn run_bases(rt: Runtime, stop: CancellationToken) {
    let bases = rt.cache.watch::<Base>();
    let descs = rt.cache.watch::<Description>();
    let ctx = Arc::new(BaseCtx {
        descriptions_by_base: index::descriptions_by_base(&descs),
        rt,
    });
    // a Description's change (its status above all) looks at its Base again
    let from_descriptions = named_by(descs.subscribe(), |d: &Description| {
        crate::runtime::controller::labelled(
            d.labels(),
            known::CONFIG_NAMESPACE_LABEL,
            known::CONFIG_NAME_LABEL,
        )
    });
    Controller::new("basestatus", &bases)
        .after([descs.listed()])
        .triggered_by(from_descriptions)
        .run(stop, move |base| {
            let ctx = ctx.clone();
            async move { reconcile_base(&ctx, base).await }
        })
        .await;
}

async fn reconcile_base(ctx: &BaseCtx, base: Arc<Base>) -> Result<Action, ReadyError> {
    if base.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let uid = base.uid().unwrap_or_default();
    let mine = ctx.descriptions_by_base.get(&uid);
    let want = status_of(
        &base_verdict(&base, &mine),
        base.metadata.generation,
        base.status.as_ref(),
        Timestamp::now(),
    );
    write(
        &ctx.rt,
        base.as_ref(),
        base.status.as_ref(),
        &want,
        BASE_FIELD_MANAGER,
    )
    .await?;
    Ok(Action::await_change())
}

/// Keeps every RolloutStrategy's Ready condition until `stop`.
pub async fn run_strategies(rt: Runtime, stop: CancellationToken) {
    let strategies = rt.cache.watch::<RolloutStrategy>();
    Controller::new("rolloutstrategystatus", &strategies)
        .run(stop, move |s| {
            let rt = rt.clone();
            async move {
                let want = status_of(
                    &strategy_verdict(&s),
                    s.metadata.generation,
                    s.status.as_ref(),
                    Timestamp::now(),
                );
                write(
                    &rt,
                    s.as_ref(),
                    s.status.as_ref(),
                    &want,
                    STRATEGY_FIELD_MANAGER,
                )
                .await?;
                Ok::<_, ReadyError>(Action::await_change())
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(feeds: &[&str]) -> Base {
        let feeds: Vec<serde_json::Value> = feeds
            .iter()
            .map(|k| json!({"kind": k, "apiVersion": "v1", "namespace": "demo", "name": "x"}))
            .collect();
        serde_json::from_value(
            json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Base",
            "metadata": {"name": "b", "namespace": "clusternet-abc", "generation": 1},
            "spec": {"feeds": feeds}}),
        )
        .expect("a Base")
    }

    fn desc(deployer: &str, generation: i64, conditions: serde_json::Value) -> Arc<Description> {
        Arc::new(
            serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1",
                "kind": "Description",
                "metadata": {"name": format!("d-{}", deployer.to_lowercase()),
                    "namespace": "clusternet-abc", "generation": generation},
                "spec": {"deployer": deployer},
                "status": {"conditions": conditions}}))
            .expect("a Description"),
        )
    }

    fn cond(type_: &str, status: &str, generation: i64, message: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": "R", "message": message,
            "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn a_base_is_ready_when_its_descriptions_are() {
        let b = base(&["Deployment", "HelmChart"]);
        let generic_ready = desc("Generic", 2, json!([cond("Ready", "True", 2, "ok")]));
        assert_eq!(
            base_verdict(&b, std::slice::from_ref(&generic_ready)),
            Verdict::Progressing("Rendering", "no Helm Description yet".into())
        );
        let helm_ready = desc("Helm", 1, json!([cond("Ready", "True", 1, "ok")]));
        assert!(matches!(
            base_verdict(&b, &[generic_ready.clone(), helm_ready.clone()]),
            Verdict::Ready(_)
        ));
        // a Ready of an older generation is not Ready yet
        let stale = desc("Helm", 2, json!([cond("Ready", "True", 1, "ok")]));
        assert!(matches!(
            base_verdict(&b, &[generic_ready.clone(), stale]),
            Verdict::Progressing("Deploying", _)
        ));
        let failed = desc(
            "Helm",
            1,
            json!([
                cond("Ready", "False", 1, "boom"),
                cond("Stalled", "True", 1, "boom")
            ]),
        );
        assert_eq!(
            base_verdict(&b, &[generic_ready, failed]),
            Verdict::Stalled(
                "DescriptionFailed".into(),
                "Description d-helm: boom".into()
            )
        );
    }

    #[test]
    fn a_strategy_is_ready_when_its_stages_can_be_read() {
        let strategy = |stages: serde_json::Value| -> RolloutStrategy {
            serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1",
                "kind": "RolloutStrategy", "metadata": {"name": "s", "namespace": "demo"},
                "spec": {"stages": stages}}))
            .expect("a RolloutStrategy")
        };
        assert_eq!(
            strategy_verdict(&strategy(json!([{"name": "one"}, {"name": "two"}]))),
            Verdict::Ready("2 stages".into())
        );
        let bad = strategy_verdict(&strategy(
            json!([{"name": "one", "minSuccessTime": "ten seconds"}]),
        ));
        assert!(
            matches!(&bad, Verdict::Stalled(r, m) if r == "InvalidStrategy" && m.contains("minSuccessTime")),
            "{bad:?}"
        );
        let st = status_of(&bad, Some(3), None, Timestamp::UNIX_EPOCH);
        assert_eq!(st.observed_generation, Some(3));
        assert!(st.conditions.iter().any(|c| c.type_ == "Stalled"));
    }
}
