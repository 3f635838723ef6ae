//! The shadow API, `shadow/v1alpha1` (hub.md §3): every resource the parent serves, mirrored so
//! that `kubectl apply -f deployment.yaml` pointed at it stores the object as a Manifest template
//! in the reserved namespace (after a server-side dry run in the parent) instead of creating it.
//! Built-in resources are discovered once when the hub starts; CRDs are followed live through the
//! shared cache, so a CRD created later is served at once.
//!
//! `model` holds every pure decision (names, labels, trimming, transforms, selectors, resource
//! selection); `rest` the verbs; this file the served-resource table and request parsing.

pub mod model;
pub mod printers;
pub mod rest;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;
use tracing::{info, warn};

use super::Hub;
use super::authn::UserInfo;
use super::authz::{Attributes, verb_for};
use super::body::HubBody;
use super::discovery::{SHADOW_GROUP, SHADOW_VERSION};
pub use super::limits::is_watch;
use super::status::ApiError;
use crate::runtime::Runtime;
use crate::runtime::cache::Shared;
use model::ShadowResource;

/// A request under `/apis/shadow/v1alpha1/`, body already read (bounded).
#[derive(Debug)]
pub struct ShadowRequest {
    pub method: Method,
    /// Path after `/apis/shadow/v1alpha1/`.
    pub tail: String,
    pub query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// What a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub resource: ShadowResource,
    /// Whether `<plural>/scale` is served for this resource.
    pub has_scale: bool,
    /// Namespace from the path (`namespaces/<ns>/...`), if any.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

pub struct ShadowApi {
    pub(crate) rt: Runtime,
    /// Built-in resources, discovered once (`None` until discovery finished).
    builtins: RwLock<Option<Vec<ShadowResource>>>,
    /// Built-ins plus CRD resources, rebuilt only when the CRDs change (every request resolves
    /// its path against this).
    served: Mutex<Option<(u64, Arc<Vec<ShadowResource>>)>>,
    pub(crate) crds: Shared<CustomResourceDefinition>,
    /// Patch metadata of the parent's OpenAPI v3 documents per group-version, for strategic
    /// merge patches.
    pub(crate) openapi: Mutex<HashMap<String, crate::kube_ext::strategic_merge::PatchSchemaIndex>>,
}

impl ShadowApi {
    /// Starts discovery in the background: the hub serves (and reports ready) before the shadow
    /// group is installed; until then its requests get a 503.
    pub fn start(rt: Runtime) -> Arc<ShadowApi> {
        let crds = rt.cache.watch::<CustomResourceDefinition>();
        let api = Arc::new(ShadowApi {
            rt: rt.clone(),
            builtins: RwLock::new(None),
            served: Mutex::new(None),
            crds,
            openapi: Mutex::new(HashMap::new()),
        });
        let install = api.clone();
        tokio::spawn(async move {
            crate::runtime::ensure_namespace(&rt.client, &rt.config.reserved_namespace).await;
            let mut delay = std::time::Duration::from_secs(1);
            loop {
                match install.discover().await {
                    Ok(n) => {
                        info!(resources = n, "shadow API installed");
                        break;
                    }
                    Err(e) => {
                        warn!(error = %e, "discovering the parent's resources for the shadow API failed; retrying");
                    }
                }
                tokio::select! {
                    _ = rt.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(std::time::Duration::from_secs(30));
            }
        });
        api
    }

    async fn discover(&self) -> Result<usize, kube::Error> {
        let client = &self.rt.client;
        let mut groups = Vec::new();
        // the core group
        let core: Value = client.request(get_req("/api/v1")?).await?;
        groups.push(model::DiscoveredGroup {
            name: String::new(),
            preferred_version: "v1".into(),
            versions: vec![model::DiscoveredVersion {
                version: "v1".into(),
                resources: resources_of(&core),
            }],
        });
        let list: Value = client.request(get_req("/apis")?).await?;
        for g in list["groups"].as_array().into_iter().flatten() {
            let name = g["name"].as_str().unwrap_or_default().to_string();
            if name.is_empty() || model::is_skipped_group(&name) {
                continue;
            }
            let preferred = g["preferredVersion"]["version"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let mut versions = Vec::new();
            for v in g["versions"].as_array().into_iter().flatten() {
                let Some(version) = v["version"].as_str() else {
                    continue;
                };
                match client
                    .request::<Value>(get_req(&format!("/apis/{name}/{version}"))?)
                    .await
                {
                    Ok(rl) => versions.push(model::DiscoveredVersion {
                        version: version.to_string(),
                        resources: resources_of(&rl),
                    }),
                    // an unavailable aggregated API must not keep every other resource out
                    Err(e) => {
                        warn!(group = %name, %version, error = %e, "skipping an unavailable group version")
                    }
                }
            }
            groups.push(model::DiscoveredGroup {
                name,
                preferred_version: preferred,
                versions,
            });
        }
        let apiservices: Value = client
            .request(get_req("/apis/apiregistration.k8s.io/v1/apiservices")?)
            .await?;
        let priorities: HashMap<String, i32> = apiservices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| {
                Some((
                    s["metadata"]["name"].as_str()?.to_string(),
                    s["spec"]["groupPriorityMinimum"].as_i64()? as i32,
                ))
            })
            .collect();
        // CRD-owned groups are served from the CRDs, so the CRD list must be in first
        self.crds.ready().await;
        let crd_groups: BTreeSet<String> = self
            .crds
            .store
            .state()
            .iter()
            .map(|c| c.spec.group.clone())
            .collect();
        let mut tracker = model::PriorityTracker::new();
        let selected =
            model::select_shadow_resources(&groups, &crd_groups, &mut tracker, |group, version| {
                priorities
                    .get(&model::apiservice_name(group, version))
                    .copied()
            });
        let n = selected.len();
        if let Ok(mut b) = self.builtins.write() {
            *b = Some(selected);
        }
        Ok(n)
    }

    /// Every resource served right now: built-ins plus the CRDs the cache holds.
    pub fn resources(&self) -> Result<Arc<Vec<ShadowResource>>, ApiError> {
        let crds = self.crds.store.state();
        // the CRDs' uids and resource versions say whether the last table still holds
        let mut versions: Vec<(&str, &str)> = crds
            .iter()
            .map(|c| {
                (
                    c.metadata.uid.as_deref().unwrap_or_default(),
                    c.metadata.resource_version.as_deref().unwrap_or_default(),
                )
            })
            .collect();
        versions.sort_unstable();
        let fingerprint = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            versions.hash(&mut h);
            h.finish()
        };
        if let Ok(served) = self.served.lock()
            && let Some((f, table)) = served.as_ref()
            && *f == fingerprint
        {
            return Ok(table.clone());
        }
        let builtins = self
            .builtins
            .read()
            .ok()
            .and_then(|b| b.clone())
            .ok_or_else(|| {
                ApiError::unavailable("the shadow API is still discovering the parent's resources")
            })?;
        let mut all = builtins;
        // built-ins win name clashes: their APIServices outrank the 1000 of CRD groups
        let taken: BTreeSet<String> = all.iter().map(|r| r.resource().to_string()).collect();
        for crd in &crds {
            let Ok(v) = serde_json::to_value(crd.as_ref()) else {
                continue;
            };
            if let Some(r) = model::crd_shadow_resource(&v)
                && !taken.contains(&r.name)
            {
                all.push(r);
            }
        }
        let table = Arc::new(all);
        if let Ok(mut served) = self.served.lock() {
            *served = Some((fingerprint, table.clone()));
        }
        Ok(table)
    }

    pub fn discovery(&self) -> Result<Value, ApiError> {
        Ok(model::discovery_resource_list(&self.resources()?))
    }

    /// Resolves a path tail to the resource, namespace, name and subresource it names.
    pub fn target(&self, tail: &str) -> Result<Target, ApiError> {
        resolve_target(&self.resources()?, tail)
    }
}

/// Resolves a path tail (after `/apis/shadow/v1alpha1/`) against the served `resources`: the
/// pure half of [`ShadowApi::target`]. A path naming nothing served is a 404.
pub fn resolve_target(resources: &[ShadowResource], tail: &str) -> Result<Target, ApiError> {
    let parts: Vec<&str> = tail.split('/').filter(|p| !p.is_empty()).collect();
    let find = |plural: &str| resources.iter().find(|r| r.name == plural).cloned();
    let has_scale = |r: &ShadowResource| match r.origin {
        model::ResourceOrigin::Crd { has_scale, .. } => has_scale,
        model::ResourceOrigin::BuiltIn => {
            let scale = format!("{}/scale", r.name);
            resources.iter().any(|x| x.name == scale)
        }
    };
    let not_found = || ApiError::not_found_path(&format!("/apis/shadow/v1alpha1/{tail}"));
    if parts.len() >= 3
        && parts[0] == "namespaces"
        && let Some(r) = find(parts[2]).filter(|r| r.namespaced)
    {
        if parts.len() > 5 {
            return Err(not_found());
        }
        return Ok(Target {
            has_scale: has_scale(&r),
            resource: r,
            namespace: Some(parts[1].to_string()),
            name: parts.get(3).map(|s| s.to_string()),
            subresource: parts.get(4).map(|s| s.to_string()),
        });
    }
    // `namespaces/<ns>/<x>` naming no namespaced resource is a 404 for `<x>`, unless `<x>` is a
    // subresource of Namespaces (status, finalize): read as the Namespace `<ns>`'s subresource it
    // used to answer a POST of an unknown kind with "namespaces are considered as templates"
    if parts.len() >= 3
        && parts[0] == "namespaces"
        && !resources
            .iter()
            .any(|r| r.name.strip_prefix("namespaces/") == Some(parts[2]))
    {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource: no namespaced resource \"{}\" is served in shadow/v1alpha1 (kubectl api-resources --api-group=shadow lists them)",
                parts[2]
            ),
        ));
    }
    let Some(first) = parts.first() else {
        return Err(not_found());
    };
    if parts.len() > 3 {
        return Err(not_found());
    }
    let r = find(first).ok_or_else(not_found)?;
    Ok(Target {
        has_scale: has_scale(&r),
        resource: r,
        namespace: None,
        name: parts.get(1).map(|s| s.to_string()),
        subresource: parts.get(2).map(|s| s.to_string()),
    })
}

fn get_req(path: &str) -> Result<Request<Vec<u8>>, kube::Error> {
    Request::get(path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)
}

fn resources_of(list: &Value) -> Vec<model::DiscoveredResource> {
    list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| serde_json::from_value(r.clone()).ok())
        .collect()
}

/// Parses a query string into its first value per key (keys may repeat; Kubernetes uses the first).
pub fn query_map(query: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        m.entry(k.into_owned()).or_insert_with(|| v.into_owned());
    }
    m
}

fn shadow_attrs(method: &Method, target: &Target, watch: bool) -> Attributes {
    let verb = verb_for(method, target.name.is_some(), watch);
    Attributes::Resource {
        verb: verb.to_string(),
        group: SHADOW_GROUP.into(),
        version: SHADOW_VERSION.into(),
        resource: target.resource.name.clone(),
        subresource: target.subresource.clone().unwrap_or_default(),
        namespace: target.namespace.clone().unwrap_or_default(),
        name: target.name.clone().unwrap_or_default(),
    }
}

fn shadow_api(hub: &Hub) -> Result<&Arc<ShadowApi>, ApiError> {
    hub.shadow.as_ref().ok_or_else(|| {
        ApiError::not_found_path("/apis/shadow/v1alpha1 (feature gate ShadowAPI is off)")
    })
}

/// Every verb but watch.
pub async fn handle(
    hub: &Hub,
    user: &UserInfo,
    req: ShadowRequest,
) -> Result<(StatusCode, Value), ApiError> {
    let api = shadow_api(hub)?;
    let target = api.target(&req.tail)?;
    hub.authz
        .authorize(user, shadow_attrs(&req.method, &target, false))
        .await?;
    rest::dispatch(api, &target, req).await
}

/// `GET ...?watch=true`: Manifest events, transformed, streamed as they come.
pub async fn watch(
    hub: &Arc<Hub>,
    user: &UserInfo,
    tail: &str,
    req: Request<Incoming>,
) -> Response<HubBody> {
    let result = async {
        let api = shadow_api(hub)?;
        let tail = tail.strip_prefix("watch/").unwrap_or(tail);
        let target = api.target(tail)?;
        hub.authz
            .authorize(user, shadow_attrs(req.method(), &target, true))
            .await?;
        // counted until the stream ends, however it ends: the body holds the guard
        let guard = hub
            .watches
            .acquire(&super::limits::watch_key(user, None), &user.name)?;
        let resp = rest::watch(
            api,
            &target,
            req.uri().query().unwrap_or_default(),
            req.headers(),
        )
        .await?;
        // a caller that stops reading gives its place up after --proxy-idle-timeout, as a
        // proxied watch does (the parent's own quiet is no reason: it ends the watch in time)
        let idle = hub.rt.config.proxy_idle_timeout;
        let what = format!("shadow watch {tail} of {}", user.name);
        Ok::<_, ApiError>(
            resp.map(|body| super::limits::caller_limited(body, idle, what, Some(guard))),
        )
    }
    .await;
    match result {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}
