//! API group `dashboard.clusternet.io/v1alpha1`, served by the hub's aggregated API server: the
//! fleet's web pages. `GET .../pages/<page>` answers HTML (`pages/assets/<file>` the stylesheet),
//! read from the hub's shared watch cache with the caller's own rights (SubjectAccessReviews),
//! so a user sees only what the parent's RBAC lets them list. The parent's aggregator checks
//! `get` on `pages` in this group before the request reaches the hub. `kubectl clusternet
//! dashboard` serves these pages on 127.0.0.1 through the user's kubeconfig.

/// API group of this module.
pub const GROUP: &str = "dashboard.clusternet.io";
/// API version of this module.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of this group.
pub const API_VERSION: &str = "dashboard.clusternet.io/v1alpha1";
/// Name of the `APIService` that routes this group to the hub.
pub const API_SERVICE_NAME: &str = "v1alpha1.dashboard.clusternet.io";
/// The one resource: the pages (read-only).
pub const RESOURCE: &str = "pages";
/// Path of the pages on the parent (and on `kubectl clusternet dashboard`'s local server).
pub const PAGES_PATH: &str = "/apis/dashboard.clusternet.io/v1alpha1/pages";
