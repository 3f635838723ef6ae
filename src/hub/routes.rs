//! The hub's one routing table: every path the hub serves, to the handler that serves it. It is
//! a pure function of the request line ([`resolve`]), so what answers a path is read here and
//! tested here; `server.rs` only authenticates and calls what this names. The shadow API and the
//! placement API then route inside their own resources (by method, name and subresource).

use http::Method;

use super::discovery::{SHADOW_GROUP, SHADOW_VERSION};
use super::limits;
use crate::apis::{dashboard, placement, proxies};

/// What answers a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Endpoint<'a> {
    /// `/healthz`, `/livez`, `/readyz`: answered before authentication.
    Health,
    /// Under `sockets/`: an agent's tunnel (`sockets/<id>`) or a proxied request
    /// (`sockets/<id>/proxy/...`); streamed both ways, so the body is not read here.
    Sockets(&'a str),
    /// A shadow watch (`?watch=true` or `/watch/`): streamed, the body is not read here.
    ShadowWatch(&'a str),
    /// Any other request under `/apis/shadow/v1alpha1/`.
    Shadow(&'a str),
    /// A request under `/apis/placement.clusternet.io/v1alpha1/`.
    Placement(&'a str),
    /// A dashboard page: what follows `/apis/dashboard.clusternet.io/v1alpha1/pages/`.
    Dashboard(&'a str),
    /// A discovery or OpenAPI document (GET or HEAD).
    Document(Document<'a>),
    /// A discovery document's path with another method.
    DocumentMethod,
    NotFound,
}

/// The discovery and OpenAPI documents the hub serves.
#[derive(Debug, PartialEq, Eq)]
pub enum Document<'a> {
    /// `/apis`
    GroupList,
    /// `/apis/<group>` of a group the hub serves.
    Group(&'static str),
    /// `/apis/<group>/<version>` of a group the hub serves.
    Resources(&'static str),
    /// `/openapi/v2`
    OpenApiV2,
    /// `/openapi/v3`
    OpenApiV3,
    /// `/openapi/v3/apis/<group>/<version>` (the handler knows which it has).
    OpenApiV3Group(&'a str, &'a str),
}

/// The groups the hub serves, with their version.
pub const GROUPS: [(&str, &str); 4] = [
    (SHADOW_GROUP, SHADOW_VERSION),
    (proxies::GROUP, proxies::VERSION),
    (placement::GROUP, placement::VERSION),
    (dashboard::GROUP, dashboard::VERSION),
];

/// The handler for `method path?query` (the path is the URI's, query without `?`).
pub fn resolve<'a>(method: &Method, path: &'a str, query: Option<&str>) -> Endpoint<'a> {
    if matches!(path, "/healthz" | "/livez" | "/readyz") {
        return Endpoint::Health;
    }
    if let Some(rest) = path.strip_prefix(crate::tunnel::server::SOCKETS_PATH_PREFIX) {
        return Endpoint::Sockets(rest);
    }
    let readable = method == Method::GET || method == Method::HEAD;
    if let Some(document) = document(path) {
        return if readable {
            Endpoint::Document(document)
        } else if under(path, SHADOW_GROUP, SHADOW_VERSION).is_some()
            || under(path, placement::GROUP, placement::VERSION).is_some()
        {
            // a POST to a group version is the resource handler's to refuse
            resource(path, query).unwrap_or(Endpoint::NotFound)
        } else {
            Endpoint::DocumentMethod
        };
    }
    resource(path, query).unwrap_or(Endpoint::NotFound)
}

/// A request to one of the hub's own resources.
fn resource<'a>(path: &'a str, query: Option<&str>) -> Option<Endpoint<'a>> {
    if let Some(tail) = under(path, SHADOW_GROUP, SHADOW_VERSION) {
        return Some(if limits::is_watch(tail, query) {
            Endpoint::ShadowWatch(tail)
        } else {
            Endpoint::Shadow(tail)
        });
    }
    if let Some(tail) = under(path, placement::GROUP, placement::VERSION) {
        return Some(Endpoint::Placement(tail));
    }
    let pages = under(path, dashboard::GROUP, dashboard::VERSION)?;
    let page = pages.strip_prefix(dashboard::RESOURCE)?;
    if page.is_empty() {
        return Some(Endpoint::Dashboard(""));
    }
    page.strip_prefix('/').map(Endpoint::Dashboard)
}

/// What follows `/apis/<group>/<version>` (without its `/`), if the path is there.
fn under<'a>(path: &'a str, group: &str, version: &str) -> Option<&'a str> {
    let rest = path
        .strip_prefix("/apis/")?
        .strip_prefix(group)?
        .strip_prefix('/')?
        .strip_prefix(version)?;
    if rest.is_empty() {
        return Some("");
    }
    rest.strip_prefix('/')
}

/// The document at `path` (a trailing `/` read as none).
fn document(path: &str) -> Option<Document<'_>> {
    let path = path.strip_suffix('/').unwrap_or(path);
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let served = |group: &str| GROUPS.iter().find(|(g, _)| *g == group);
    match segments.as_slice() {
        ["apis"] => Some(Document::GroupList),
        ["apis", group] => served(group).map(|(g, _)| Document::Group(g)),
        ["apis", group, version] => served(group)
            .filter(|(_, v)| v == version)
            .map(|(g, _)| Document::Resources(g)),
        ["openapi", "v2"] => Some(Document::OpenApiV2),
        ["openapi", "v3"] => Some(Document::OpenApiV3),
        ["openapi", "v3", "apis", group, version] => Some(Document::OpenApiV3Group(group, version)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Endpoint<'_> {
        resolve(&Method::GET, path, None)
    }

    #[test]
    fn every_hub_api_has_one_handler() {
        assert_eq!(get("/readyz"), Endpoint::Health);
        assert_eq!(
            get("/apis/proxies.clusternet.io/v1alpha1/sockets/c1/proxy/api"),
            Endpoint::Sockets("c1/proxy/api")
        );
        assert_eq!(
            get("/apis/shadow/v1alpha1/namespaces/a/deployments"),
            Endpoint::Shadow("namespaces/a/deployments")
        );
        assert_eq!(
            resolve(
                &Method::GET,
                "/apis/shadow/v1alpha1/namespaces/a/deployments",
                Some("watch=true")
            ),
            Endpoint::ShadowWatch("namespaces/a/deployments")
        );
        assert_eq!(
            resolve(
                &Method::POST,
                "/apis/placement.clusternet.io/v1alpha1/namespaces/a/placementreviews",
                None
            ),
            Endpoint::Placement("namespaces/a/placementreviews")
        );
        assert_eq!(
            get("/apis/dashboard.clusternet.io/v1alpha1/pages/clusters/c1"),
            Endpoint::Dashboard("clusters/c1")
        );
        assert_eq!(
            get("/apis/dashboard.clusternet.io/v1alpha1/pages"),
            Endpoint::Dashboard("")
        );
        assert_eq!(
            get("/apis/dashboard.clusternet.io/v1alpha1/pagesx"),
            Endpoint::NotFound
        );
        assert_eq!(get("/api/v1/pods"), Endpoint::NotFound);
    }

    #[test]
    fn documents_are_read_with_get_or_head() {
        assert_eq!(get("/apis"), Endpoint::Document(Document::GroupList));
        assert_eq!(get("/apis/"), Endpoint::Document(Document::GroupList));
        assert_eq!(
            resolve(&Method::HEAD, "/apis/shadow", None),
            Endpoint::Document(Document::Group("shadow"))
        );
        assert_eq!(
            get("/apis/shadow/v1alpha1"),
            Endpoint::Document(Document::Resources("shadow"))
        );
        assert_eq!(get("/apis/shadow/v1"), Endpoint::NotFound);
        assert_eq!(get("/apis/apps"), Endpoint::NotFound);
        assert_eq!(
            get("/openapi/v3/apis/shadow/v1alpha1"),
            Endpoint::Document(Document::OpenApiV3Group("shadow", "v1alpha1"))
        );
        assert_eq!(
            resolve(&Method::POST, "/apis", None),
            Endpoint::DocumentMethod
        );
        // the group version's own path, written to, is the resource handler's
        assert_eq!(
            resolve(&Method::POST, "/apis/shadow/v1alpha1", None),
            Endpoint::Shadow("")
        );
    }
}
