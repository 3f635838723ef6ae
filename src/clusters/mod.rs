//! The parent side of cluster registration and lifecycle (controller role): the registration
//! approver and the cluster-lifecycle controller (heartbeat loss, taints, deregistration).

pub mod approver;
pub mod lifecycle;

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use kube::Resource;
use kube::runtime::controller::{self, Action, Controller};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::runtime::Runtime;
use crate::runtime::cache::Shared;

/// Runs every cluster controller until `stop`.
pub async fn run(rt: &Runtime, stop: CancellationToken) {
    tokio::join!(
        approver::run(rt.clone(), stop.clone()),
        lifecycle::run(rt.clone(), stop.clone())
    );
}

/// A kube-runtime controller over a kind of the shared cache: it starts after leadership, so it
/// first reconciles everything already in the cache, then follows changes; errors back off per object.
pub async fn run_controller<K, R, Fut, E>(
    name: &'static str,
    shared: Shared<K>,
    concurrency: u16,
    stop: CancellationToken,
    reconcile: R,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default + std::fmt::Debug + Unpin + Send + Sync,
    R: Fn(Arc<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    run_controller_with(
        name,
        shared,
        concurrency,
        stop,
        futures::stream::empty(),
        reconcile,
    )
    .await
}

/// [`run_controller`] that also reconciles the objects `also` names (changes of related kinds).
pub async fn run_controller_with<K, R, Fut, E, S>(
    name: &'static str,
    shared: Shared<K>,
    concurrency: u16,
    stop: CancellationToken,
    also: S,
    reconcile: R,
) where
    S: futures::Stream<Item = kube::runtime::reflector::ObjectRef<K>> + Send + 'static,
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default + std::fmt::Debug + Unpin + Send + Sync,
    R: Fn(Arc<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    if !shared.ready().await {
        return;
    }
    let reconcile = Arc::new(reconcile);
    let seconds = metrics::histogram!("clusternet_controller_reconcile_duration_seconds", "controller" => name);
    let (tick_tx, tick_rx) = futures::channel::mpsc::unbounded::<()>();
    let _ = tick_tx.unbounded_send(());
    Controller::for_shared_stream(shared.subscribe(), shared.store.clone())
        .with_config(controller::Config::default().concurrency(concurrency))
        .reconcile_all_on(tick_rx)
        .reconcile_on(also)
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(
            move |obj, ctx: Arc<()>| {
                let reconcile = reconcile.clone();
                let seconds = seconds.clone();
                let _ = ctx;
                async move {
                    let start = std::time::Instant::now();
                    let r = reconcile(obj).await;
                    seconds.record(start.elapsed().as_secs_f64());
                    r
                }
            },
            move |obj, err: &E, _ctx| {
                warn!(controller = name, object = %obj.meta().name.clone().unwrap_or_default(), error = %err, "reconcile failed; retrying");
                metrics::counter!("clusternet_controller_reconcile_errors_total", "controller" => name).increment(1);
                Action::requeue(std::time::Duration::from_secs(2))
            },
            Arc::new(()),
        )
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(controller = name, error = %e, "controller event");
            }
        })
        .await;
    drop(tick_tx);
}
