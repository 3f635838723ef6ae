//! The in-tree plugins (`pkg/scheduler/framework/plugins/**`): `TaintToleration` (filter +
//! score), `Predictor` (predict, through a [`PredictorClient`]), `StaticAssigner` and
//! `DynamicAssigner` (assign; the latter also pre-assign) and `DefaultBinder` (bind).

mod assigner;
mod default_binder;
mod predictor;
mod taint_toleration;

use std::sync::Arc;

pub use assigner::{
    DynamicAssigner, StaticAssigner, dynamic_divide_replicas, static_divide_replicas,
    static_weights,
};
pub use default_binder::DefaultBinder;
pub use predictor::{Predictor, PredictorClient};
pub use taint_toleration::{TaintToleration, find_untolerated_taint, tolerates};

use super::framework::{Plugin, Registry};

/// Names of the in-tree plugins (`framework/plugins/names`).
pub mod names {
    /// Writes the binding into the Subscription status.
    pub const DEFAULT_BINDER: &str = "DefaultBinder";
    /// Filters and scores by cluster taints.
    pub const TAINT_TOLERATION: &str = "TaintToleration";
    /// Divides replicas by subscriber weights.
    pub const STATIC_ASSIGNER: &str = "StaticAssigner";
    /// Divides replicas by predicted capacity.
    pub const DYNAMIC_ASSIGNER: &str = "DynamicAssigner";
    /// Asks each cluster's predictor for its capacity.
    pub const PREDICTOR: &str = "Predictor";
}

/// Registers the in-tree plugins; none of them takes args.
pub(crate) fn register_in_tree(registry: &mut Registry, predictor: Arc<dyn PredictorClient>) {
    let entries: [(&str, Arc<dyn Plugin>); 5] = [
        (names::DEFAULT_BINDER, Arc::new(DefaultBinder)),
        (names::TAINT_TOLERATION, Arc::new(TaintToleration)),
        (names::STATIC_ASSIGNER, Arc::new(StaticAssigner)),
        (names::DYNAMIC_ASSIGNER, Arc::new(DynamicAssigner)),
        (names::PREDICTOR, Arc::new(Predictor::new(predictor))),
    ];
    for (name, plugin) in entries {
        // The registry starts empty here, so names cannot collide; stateless plugins can be
        // shared by every profile.
        let _ = registry.register(name, move |_args: &serde_json::Value| {
            Ok(Arc::clone(&plugin))
        });
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Test doubles shared by the scheduler's tests.

    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use super::PredictorClient;
    use crate::apis::{ManagedCluster, ReplicaRequirements};
    use crate::scheduler::framework::{BoxFuture, Plugin, Registry, cluster_key};

    /// A plugin that implements no extension point.
    pub struct Noop(pub &'static str);

    impl Plugin for Noop {
        fn name(&self) -> &str {
            self.0
        }
    }

    /// Answers from a table: cluster key -> max replicas (missing key -> error).
    #[derive(Default)]
    pub struct FakePredictor {
        pub answers: Mutex<BTreeMap<String, Result<i32, String>>>,
        pub calls: Mutex<Vec<String>>,
    }

    impl FakePredictor {
        pub fn with(answers: &[(&str, Result<i32, &str>)]) -> Arc<Self> {
            Arc::new(Self {
                answers: Mutex::new(
                    answers
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).map_err(str::to_owned)))
                        .collect(),
                ),
                calls: Mutex::default(),
            })
        }
    }

    impl PredictorClient for FakePredictor {
        fn predict<'a>(
            &'a self,
            cluster: &'a ManagedCluster,
            _requirements: &'a ReplicaRequirements,
        ) -> BoxFuture<'a, Result<i32, String>> {
            let key = cluster_key(cluster);
            Box::pin(async move {
                if let Ok(mut calls) = self.calls.lock() {
                    calls.push(key.clone());
                }
                self.answers
                    .lock()
                    .map_err(|e| e.to_string())?
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| Err(format!("no answer for {key}")))
            })
        }
    }

    /// The in-tree registry with a predictor that knows no cluster.
    pub fn fake_registry() -> Registry {
        Registry::in_tree(Arc::new(FakePredictor::default()))
    }
}
