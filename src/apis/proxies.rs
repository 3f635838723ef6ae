//! API group `proxies.clusternet.io/v1alpha1`, served by the hub's aggregated API server (not a CRD):
//! resource `sockets` (cluster-scoped, connect verbs only) opens an agent's WebSocket tunnel, and
//! `sockets/proxy` proxies HTTP into a child cluster (hub.md §2, spec/apis.md §3).
//!
//! `Socket` is only the connect-options kind of those requests (upstream
//! `pkg/apis/proxies/v1alpha1/types.go`): it carries `TypeMeta` and the proxied `path`, and is never
//! stored, so it has no `ObjectMeta`.

use serde::{Deserialize, Serialize};

/// API group of this module.
pub const GROUP: &str = "proxies.clusternet.io";
/// API version of this module.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of objects in this group.
pub const API_VERSION: &str = "proxies.clusternet.io/v1alpha1";
/// Name of the `APIService` that routes this group to the hub.
pub const API_SERVICE_NAME: &str = "v1alpha1.proxies.clusternet.io";
/// `groupPriorityMinimum` of that APIService.
pub const API_SERVICE_GROUP_PRIORITY_MINIMUM: i32 = 1000;
/// `versionPriority` of that APIService.
pub const API_SERVICE_VERSION_PRIORITY: i32 = 100;

/// Kind of the connect options.
pub const SOCKET_KIND: &str = "Socket";
/// Plural resource name; `GET .../sockets/{clusterID}` with a WebSocket upgrade is the agent tunnel.
pub const SOCKETS_RESOURCE: &str = "sockets";
/// Singular resource name.
pub const SOCKET_SINGULAR: &str = "socket";
/// Short name of `sockets`.
pub const SOCKET_SHORT_NAME: &str = "ss";
/// Subresource that proxies HTTP (including upgrades) into the child: `.../sockets/{clusterID}/proxy/{path...}`.
pub const PROXY_SUBRESOURCE: &str = "proxy";
/// Discovery category of `sockets`.
pub const SOCKET_CATEGORY: &str = "clusternet";
/// HTTP methods `sockets/proxy` accepts.
pub const PROXY_METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// Connect options of a `sockets` / `sockets/proxy` request.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Socket {
    /// `proxies.clusternet.io/v1alpha1` when set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,

    /// `Socket` when set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,

    /// Path is the URL path to use for the current proxy request.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
}

impl Socket {
    /// Connect options for `path`, with TypeMeta filled in.
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: SOCKET_KIND.to_owned(),
            path: path.into(),
        }
    }
}

/// Path of the tunnel endpoint for a child cluster (relative to the parent apiserver).
pub fn socket_path(cluster_id: &str) -> String {
    format!("/apis/{API_VERSION}/{SOCKETS_RESOURCE}/{cluster_id}")
}

/// Path prefix of the proxy into a child cluster; append the proxied path (e.g. `direct/api/v1/pods`).
pub fn proxy_path(cluster_id: &str) -> String {
    format!("{}/{PROXY_SUBRESOURCE}/", socket_path(cluster_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_wire_form() {
        let json = serde_json::to_string(&Socket::new("/api/v1/pods")).expect("serializes");
        assert_eq!(
            json,
            r#"{"apiVersion":"proxies.clusternet.io/v1alpha1","kind":"Socket","path":"/api/v1/pods"}"#
        );
        let parsed: Socket = serde_json::from_str(r#"{"path":"x"}"#).expect("deserializes");
        assert_eq!(parsed.path, "x");
        assert_eq!(
            serde_json::to_string(&Socket::default()).expect("serializes"),
            "{}"
        );
    }

    #[test]
    fn paths() {
        let id = "dc91021d-2361-4f6d-a404-7c33b9e01118";
        assert_eq!(
            socket_path(id),
            "/apis/proxies.clusternet.io/v1alpha1/sockets/dc91021d-2361-4f6d-a404-7c33b9e01118"
        );
        assert_eq!(
            proxy_path(id),
            "/apis/proxies.clusternet.io/v1alpha1/sockets/dc91021d-2361-4f6d-a404-7c33b9e01118/proxy/"
        );
    }
}
