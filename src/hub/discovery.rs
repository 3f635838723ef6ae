//! Discovery and OpenAPI documents of the hub's three groups, so that the parent's aggregator can
//! list them and `kubectl api-resources` / `kubectl explain sockets` work: `proxies.clusternet.io/
//! v1alpha1` (the `sockets` resource and its `proxy` subresource), `shadow/v1alpha1` (whose
//! resource list is built by the shadow API itself) and `placement.clusternet.io/v1alpha1` (the
//! create-only `placementreviews`).

use serde_json::{Value, json};

use crate::apis::{dashboard, placement, proxies};

pub const SHADOW_GROUP: &str = "shadow";
pub const SHADOW_VERSION: &str = "v1alpha1";
pub const SHADOW_GROUP_VERSION: &str = "shadow/v1alpha1";

pub fn api_group(name: &str, version: &str) -> Value {
    let gv = format!("{name}/{version}");
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": [{"groupVersion": gv, "version": version}],
        "preferredVersion": {"groupVersion": gv, "version": version},
    })
}

pub fn api_group_list(shadow: bool) -> Value {
    let mut groups = vec![api_group(proxies::GROUP, proxies::VERSION)];
    if shadow {
        groups.push(api_group(SHADOW_GROUP, SHADOW_VERSION));
    }
    groups.push(api_group(placement::GROUP, placement::VERSION));
    groups.push(api_group(dashboard::GROUP, dashboard::VERSION));
    for g in &mut groups {
        if let Some(o) = g.as_object_mut() {
            o.remove("kind");
            o.remove("apiVersion");
        }
    }
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/proxies.clusternet.io/v1alpha1`.
pub fn proxies_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": proxies::API_VERSION,
        "resources": [
            {
                "name": proxies::SOCKETS_RESOURCE,
                "singularName": proxies::SOCKET_SINGULAR,
                "namespaced": false,
                "kind": proxies::SOCKET_KIND,
                // GET sockets/<id> is how an agent opens its tunnel (authorized as `get`)
                "verbs": ["get"],
                "shortNames": [proxies::SOCKET_SHORT_NAME],
                "categories": [proxies::SOCKET_CATEGORY],
            },
            {
                "name": format!("{}/{}", proxies::SOCKETS_RESOURCE, proxies::PROXY_SUBRESOURCE),
                "singularName": "",
                "namespaced": false,
                "kind": proxies::SOCKET_KIND,
                "verbs": ["create", "delete", "get", "patch", "update"],
            }
        ]
    })
}

/// `GET /apis/placement.clusternet.io/v1alpha1`.
pub fn placement_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": placement::API_VERSION,
        "resources": [{
            "name": placement::RESOURCE,
            "singularName": placement::SINGULAR,
            "namespaced": true,
            "kind": placement::KIND,
            // a review, answered and never stored
            "verbs": ["create"],
            "categories": [proxies::SOCKET_CATEGORY],
        }]
    })
}

/// `GET /apis/dashboard.clusternet.io/v1alpha1`: the pages, read with `get`.
pub fn dashboard_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": dashboard::API_VERSION,
        "resources": [{
            "name": dashboard::RESOURCE,
            "singularName": "page",
            "namespaced": false,
            "kind": "Page",
            "verbs": ["get"],
        }]
    })
}

const PLACEMENT_SCHEMA: &str = "io.clusternet.apis.placement.v1alpha1.PlacementReview";

fn placement_schema() -> Value {
    let open = |description: &str| json!({"description": description, "type": "object", "x-kubernetes-preserve-unknown-fields": true});
    json!({
        "description": "PlacementReview asks where a Subscription would be placed and why: create it with spec.subscription (a Subscription, which need not exist) or spec.subscriptionName (an existing one in the review's namespace); the answer is the same object with its status filled in. Nothing is stored or changed.",
        "type": "object",
        "properties": {
            "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string"},
            "kind": {"description": "Kind is a string value representing the REST resource this object represents.", "type": "string"},
            "metadata": open("Standard object metadata."),
            "spec": {
                "description": "What to explain.",
                "type": "object",
                "properties": {
                    "subscription": open("A Subscription as it would be applied."),
                    "subscriptionName": {"description": "The name of an existing Subscription in the review's namespace.", "type": "string"},
                    "showObjects": {"description": "Also render the objects each selected child would receive, with the override that set each changed field.", "type": "boolean"},
                },
            },
            "status": open("The explanation: one verdict per ManagedCluster (the step it left at and why, its prediction and score), the binding and replicas, and the rendered objects when asked."),
        },
        "x-kubernetes-group-version-kind": [{"group": placement::GROUP, "kind": placement::KIND, "version": placement::VERSION}],
    })
}

pub fn openapi_v3_placement() -> Value {
    let gvk =
        json!({"group": placement::GROUP, "version": placement::VERSION, "kind": placement::KIND});
    let schema = json!({"$ref": format!("#/components/schemas/{PLACEMENT_SCHEMA}")});
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Clusternet", "version": crate::VERSION},
        "paths": {
            format!("/apis/{}/namespaces/{{namespace}}/{}", placement::API_VERSION, placement::RESOURCE): {
                "post": {
                    "description": "create a PlacementReview",
                    "operationId": "createPlacementV1alpha1NamespacedPlacementReview",
                    "requestBody": {"content": {"application/json": {"schema": schema.clone()}}, "required": true},
                    "responses": {"201": {"description": "Created", "content": {"application/json": {"schema": schema}}}},
                    "x-kubernetes-action": "post",
                    "x-kubernetes-group-version-kind": gvk,
                },
                "parameters": [{"name": "namespace", "in": "path", "required": true, "schema": {"type": "string"}, "description": "object name and auth scope, such as for teams and projects"}],
            },
        },
        "components": {"schemas": {PLACEMENT_SCHEMA: placement_schema()}},
    })
}

const SOCKET_SCHEMA: &str = "io.clusternet.apis.proxies.v1alpha1.Socket";

fn socket_schema() -> Value {
    json!({
        "description": "Socket is the connect-options kind of proxies.clusternet.io: GET sockets/<cluster-id> with a WebSocket upgrade opens an agent's tunnel, and sockets/<cluster-id>/proxy/<path> reaches the child cluster through it.",
        "type": "object",
        "properties": {
            "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string"},
            "kind": {"description": "Kind is a string value representing the REST resource this object represents.", "type": "string"},
            "path": {"description": "Path is the URL path to use for the current proxy request: direct/<path> for the child's API server, or <scheme>/<host:port>/<path> for any address reachable from the agent.", "type": "string"},
        },
        "x-kubernetes-group-version-kind": [{"group": proxies::GROUP, "kind": proxies::SOCKET_KIND, "version": proxies::VERSION}],
    })
}

/// `GET /openapi/v2`: the definitions the aggregator merges into the parent's document.
pub fn openapi_v2() -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": "Clusternet", "version": crate::VERSION},
        "paths": {},
        "definitions": {SOCKET_SCHEMA: socket_schema(), PLACEMENT_SCHEMA: placement_schema()},
    })
}

pub fn openapi_v3_proxies() -> Value {
    let gvk =
        json!({"group": proxies::GROUP, "version": proxies::VERSION, "kind": proxies::SOCKET_KIND});
    let op = |action: &str, id: &str| {
        json!({
            "description": format!("connect {action} requests to {}", proxies::SOCKET_KIND),
            "operationId": id,
            "responses": {"200": {"description": "OK", "content": {"*/*": {"schema": {"type": "string"}}}}},
            "x-kubernetes-action": "connect",
            "x-kubernetes-group-version-kind": gvk,
        })
    };
    // kubectl explain finds a resource's kind through the operations on its paths
    let base = format!("/apis/{}/sockets/{{name}}", proxies::API_VERSION);
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Clusternet", "version": crate::VERSION},
        "paths": {
            base.clone(): {
                "get": op("GET", "connectProxiesV1alpha1GetSocket"),
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}, "description": "ID of the child cluster"}],
            },
            format!("{base}/proxy/{{path}}"): {
                "get": op("GET", "connectProxiesV1alpha1GetSocketProxyWithPath"),
                "post": op("POST", "connectProxiesV1alpha1PostSocketProxyWithPath"),
                "put": op("PUT", "connectProxiesV1alpha1PutSocketProxyWithPath"),
                "patch": op("PATCH", "connectProxiesV1alpha1PatchSocketProxyWithPath"),
                "delete": op("DELETE", "connectProxiesV1alpha1DeleteSocketProxyWithPath"),
                "parameters": [
                    {"name": "name", "in": "path", "required": true, "schema": {"type": "string"}, "description": "ID of the child cluster"},
                    {"name": "path", "in": "path", "required": true, "schema": {"type": "string"}, "description": "direct/<path> or <scheme>/<host:port>/<path>"},
                ],
            },
        },
        "components": {"schemas": {SOCKET_SCHEMA: socket_schema()}},
    })
}

pub fn openapi_v3_shadow() -> Value {
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Clusternet", "version": crate::VERSION},
        "paths": {},
        "components": {"schemas": {}},
    })
}

/// `GET /openapi/v3`: where each group-version document lives; the hash lets the aggregator
/// cache them.
pub fn openapi_v3_index(shadow: bool) -> Value {
    let mut paths = serde_json::Map::new();
    let mut add = |gv: &str, doc: &Value| {
        let hash = fnv(&serde_json::to_vec(doc).unwrap_or_default());
        paths.insert(
            format!("apis/{gv}"),
            json!({"serverRelativeURL": format!("/openapi/v3/apis/{gv}?hash={hash:016X}")}),
        );
    };
    add(proxies::API_VERSION, &openapi_v3_proxies());
    if shadow {
        add(SHADOW_GROUP_VERSION, &openapi_v3_shadow());
    }
    add(placement::API_VERSION, &openapi_v3_placement());
    json!({"paths": paths})
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_are_listed_with_upstream_names() {
        let r = proxies_resources();
        assert_eq!(r["groupVersion"], "proxies.clusternet.io/v1alpha1");
        assert_eq!(r["resources"][0]["shortNames"][0], "ss");
        assert_eq!(r["resources"][1]["name"], "sockets/proxy");
    }

    #[test]
    fn openapi_index_points_at_both_groups() {
        let i = openapi_v3_index(true);
        let url = i["paths"]["apis/proxies.clusternet.io/v1alpha1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(url.starts_with("/openapi/v3/apis/proxies.clusternet.io/v1alpha1?hash="));
        assert!(i["paths"]["apis/shadow/v1alpha1"].is_object());
        assert!(openapi_v3_index(false)["paths"]["apis/shadow/v1alpha1"].is_null());
    }
}
