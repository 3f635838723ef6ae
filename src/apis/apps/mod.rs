//! API group `apps.clusternet.io/v1alpha1`: everything on the distribution pipeline, from the
//! user's `Subscription` down to per-cluster `Base`, `Description` and `HelmRelease`, plus the
//! templates (`Manifest`, `HelmChart`), overrides (`Localization`, `Globalization`) and the
//! scheduler's input `FeedInventory`.
//!
//! Mirrors Clusternet's `pkg/apis/apps/v1alpha1/*.go` and CRDs `apps.clusternet.io_*.yaml`
//! (spec/apis.md §2). This file holds the shared `Feed` reference; each kind has its own file.
//! Field order is Go's struct order; see [`crate::apis::clusters`] for the Go -> Rust mapping rules.

mod helm;
mod inventory;
mod overrides;
mod revision;
mod rollout;
mod subscription;
mod templates;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use helm::*;
pub use inventory::*;
pub use overrides::*;
pub use revision::*;
pub use rollout::*;
pub use subscription::*;
pub use templates::*;

/// API group of this module.
pub const GROUP: &str = "apps.clusternet.io";
/// API version of this module.
pub const VERSION: &str = "v1alpha1";

/// Feed defines the resource to be selected: a Manifest created through the shadow API, or a HelmChart.
// JSON key order is `kind`, `apiVersion`, `namespace`, `name` (Go's); the spec hash relies on it.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct Feed {
    /// Kind is a string value representing the REST resource this object represents. In CamelCase.
    pub kind: String,

    /// APIVersion defines the versioned schema of this representation of an object.
    pub api_version: String,

    /// Namespace of the target resource.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,

    /// Name of the target resource.
    pub name: String,
}

impl Feed {
    /// Builds a feed reference.
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            kind: kind.into(),
            api_version: api_version.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The feed key used in `Subscription.status.replicas`: `<apiVersion>/<kind>/<namespace>/<name>`,
    /// or `<apiVersion>/<kind>/<name>` for cluster-scoped feeds (upstream `utils.GetFeedKey`).
    pub fn key(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}/{}", self.api_version, self.kind, self.name)
        } else {
            format!(
                "{}/{}/{}/{}",
                self.api_version, self.kind, self.namespace, self.name
            )
        }
    }

    /// Is this the zero value (every field empty)?
    pub fn is_empty(&self) -> bool {
        self.kind.is_empty()
            && self.api_version.is_empty()
            && self.namespace.is_empty()
            && self.name.is_empty()
    }
}

/// The display form used in events and messages: `<Kind> <namespace>/<name>` or `<Kind> <name>`.
impl std::fmt::Display for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feed_key_and_display() {
        let deploy = Feed::new("apps/v1", "Deployment", "qux", "my-nginx");
        assert_eq!(deploy.key(), "apps/v1/Deployment/qux/my-nginx");
        assert_eq!(deploy.to_string(), "Deployment qux/my-nginx");
        let ns = Feed::new("v1", "Namespace", "", "qux");
        assert_eq!(ns.key(), "v1/Namespace/qux");
        assert_eq!(ns.to_string(), "Namespace qux");
    }

    #[test]
    fn feed_serializes_in_go_order_and_omits_empty_namespace() {
        let json =
            serde_json::to_string(&Feed::new("v1", "Namespace", "", "qux")).expect("serializes");
        assert_eq!(
            json,
            r#"{"kind":"Namespace","apiVersion":"v1","name":"qux"}"#
        );
        let json = serde_json::to_string(&Feed::new("apps/v1", "Deployment", "qux", "x"))
            .expect("serializes");
        assert_eq!(
            json,
            r#"{"kind":"Deployment","apiVersion":"apps/v1","namespace":"qux","name":"x"}"#
        );
    }
}
