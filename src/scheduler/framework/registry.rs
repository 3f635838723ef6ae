//! The plugin registry: plugin name -> constructor (Go's `framework/runtime.Registry`).
//!
//! A constructor gets the plugin's `args` from the profile's `pluginConfig` (as JSON; `null`
//! when the profile configures none) and returns the plugin. Only plugins a profile enables are
//! constructed, once per profile, and a plugin enabled at several extension points is one object.
//!
//! Out-of-tree plugins are added at compile time, like Go's `app.WithPlugin`: implement
//! [`Plugin`](super::Plugin) and the extension-point traits, then
//!
//! ```
//! # use std::sync::Arc;
//! # use clusternet::scheduler::framework::{Plugin, Registry};
//! # struct MyPlugin { threshold: u64 }
//! # impl Plugin for MyPlugin { fn name(&self) -> &str { "MyPlugin" } }
//! let mut registry = Registry::new(); // or Registry::in_tree(predictor_client)
//! registry.register("MyPlugin", |args: &serde_json::Value| {
//!     let threshold = args.get("threshold").and_then(|v| v.as_u64()).unwrap_or(10);
//!     Ok(Arc::new(MyPlugin { threshold }) as Arc<dyn Plugin>)
//! })?;
//! # Ok::<(), clusternet::scheduler::framework::RegistryError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::Plugin;
use crate::scheduler::plugins::{self, PredictorClient};

/// Builds a plugin from its `args` (`Value::Null` when none are configured). The error text is
/// reported as `initializing plugin "<name>": <error>`.
pub type PluginFactory =
    Arc<dyn Fn(&serde_json::Value) -> Result<Arc<dyn Plugin>, String> + Send + Sync>;

/// Registry errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// A plugin with this name is already registered.
    #[error("a plugin named {0} already exists")]
    Duplicate(String),
}

/// Plugin name -> constructor.
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<String, PluginFactory>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.factories.keys()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The in-tree plugins: `DefaultBinder`, `TaintToleration`, `StaticAssigner`,
    /// `DynamicAssigner` and `Predictor` (which asks `predictor` for each cluster's capacity).
    pub fn in_tree(predictor: Arc<dyn PredictorClient>) -> Self {
        let mut registry = Self::new();
        plugins::register_in_tree(&mut registry, predictor);
        registry
    }

    /// Adds a plugin constructor under `name`.
    pub fn register<F>(&mut self, name: impl Into<String>, factory: F) -> Result<(), RegistryError>
    where
        F: Fn(&serde_json::Value) -> Result<Arc<dyn Plugin>, String> + Send + Sync + 'static,
    {
        let name = name.into();
        if self.factories.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.factories.insert(name, Arc::new(factory));
        Ok(())
    }

    /// Adds every plugin of `other` (Go's `Registry.Merge`).
    pub fn merge(&mut self, other: Registry) -> Result<(), RegistryError> {
        for (name, factory) in other.factories {
            if self.factories.contains_key(&name) {
                return Err(RegistryError::Duplicate(name));
            }
            self.factories.insert(name, factory);
        }
        Ok(())
    }

    /// Removes a plugin (e.g. to replace an in-tree one).
    pub fn unregister(&mut self, name: &str) -> bool {
        self.factories.remove(name).is_some()
    }

    /// Is a plugin with this name registered?
    pub fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }

    /// Registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }

    /// Builds the plugin `name`; `None` if it is not registered.
    pub fn instantiate(
        &self,
        name: &str,
        args: &serde_json::Value,
    ) -> Option<Result<Arc<dyn Plugin>, String>> {
        self.factories.get(name).map(|factory| factory(args))
    }
}
