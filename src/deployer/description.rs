//! Reconciling one Generic Description against its child (docs/spec/deployer.md §8, §10, §11):
//! apply, prune, record per-object status (`status.manifestStatuses`, phase, reason), repair drift
//! by re-applying periodically, and on deletion remove the objects before releasing the finalizer.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use serde_json::json;
use tracing::{info, warn};

use super::generic::ChildCluster;
use crate::apis::known;
use crate::apis::{Description, DescriptionDeployer, DescriptionPhase, DescriptionStatus};
use crate::runtime::api_code;
use crate::runtime::events::Events;

#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error("Description {desc}: {what}: {source}")]
    Api {
        desc: String,
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("Description {desc}: deleting its objects in the child: {message}")]
    Offload { desc: String, message: String },
}

/// How often a Description is looked at again: soon while workloads settle, then for drift.
const UNSETTLED: Duration = Duration::from_secs(2);
const SETTLED: Duration = Duration::from_secs(20);

fn key(d: &Description) -> String {
    format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any())
}

pub async fn release_finalizer(
    api: &Api<Description>,
    desc: &Description,
) -> Result<(), DeployError> {
    let remaining: Vec<String> = desc
        .finalizers()
        .iter()
        .filter(|f| *f != known::APP_FINALIZER)
        .cloned()
        .collect();
    let patch =
        json!({"metadata": {"finalizers": remaining, "resourceVersion": desc.resource_version()}});
    match api
        .patch(
            &desc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if matches!(api_code(&e), Some(404 | 409)) => Ok(()),
        Err(source) => Err(DeployError::Api {
            desc: key(desc),
            what: "releasing the finalizer",
            source,
        }),
    }
}

/// Reconciles `desc` against its child; `siblings` are the other Descriptions the deployer knows
/// of (any namespace: only those of `desc`'s namespace, the same child, are looked at), so objects
/// two Subscriptions share stay until the last one lets go.
pub async fn reconcile(
    child: &ChildCluster,
    api: &Api<Description>,
    desc: Arc<Description>,
    siblings: &[Arc<Description>],
    events: &Events,
) -> Result<Action, DeployError> {
    let elsewhere = super::generic::wanted_elsewhere(&desc, siblings.iter().map(|d| d.as_ref()));
    if desc.spec.deployer != DescriptionDeployer::Generic {
        // Helm Descriptions are handled by the Helm deployer, which this build does not have yet
        return Ok(Action::await_change());
    }
    if desc.metadata.deletion_timestamp.is_some() {
        if !desc.finalizers().iter().any(|f| f == known::APP_FINALIZER) {
            return Ok(Action::await_change());
        }
        if let Err(message) = child.offload(&desc, &elsewhere).await {
            events.warn(desc.as_ref(), "FailedDeletingDescription", &message);
            return Err(DeployError::Offload {
                desc: key(&desc),
                message,
            });
        }
        info!(description = %key(&desc), "deleted its objects from the child");
        release_finalizer(api, &desc).await?;
        return Ok(Action::await_change());
    }
    let previous = desc.status.clone().unwrap_or_default();
    let outcome = child
        .apply(&desc, &previous.manifest_statuses, &elsewhere)
        .await;
    let failed = !outcome.errors.is_empty();
    let status = DescriptionStatus {
        phase: Some(if failed {
            DescriptionPhase::Failure
        } else {
            DescriptionPhase::Success
        }),
        reason: outcome.errors.join("; "),
        manifest_statuses: outcome.statuses,
    };
    if status != previous {
        if failed && previous.reason != status.reason {
            warn!(description = %key(&desc), reason = %status.reason, "UnSuccessfullyDeployed");
            events.warn(desc.as_ref(), "UnSuccessfullyDeployed", &status.reason);
        } else if !failed && previous.phase != Some(DescriptionPhase::Success) {
            info!(description = %key(&desc), "SuccessfullyDeployed");
            events.normal(
                desc.as_ref(),
                "SuccessfullyDeployed",
                &format!("Description {} is deployed successfully", key(&desc)),
            );
        }
        let mut updated = (*desc).clone();
        updated.status = Some(status);
        match api
            .replace_status(&desc.name_any(), &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {}
            // changed meanwhile: the watch brings the new version
            Err(e) if api_code(&e) == Some(409) => {
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            Err(source) => {
                return Err(DeployError::Api {
                    desc: key(&desc),
                    what: "writing the status",
                    source,
                });
            }
        }
    }
    Ok(Action::requeue(if outcome.settled && !failed {
        SETTLED
    } else {
        UNSETTLED
    }))
}
