//! The shadow API's verbs (hub.md §3.3-§3.5): create (dry run in the parent, then a Manifest),
//! get/list/watch (Manifests transformed back into the original objects), update and the four
//! patch types, delete, the no-op deletecollection, and the `scale` subresource.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, Method, Response, StatusCode, header};
use http_body_util::StreamBody;
use hyper::body::Frame;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions,
    PropagationPolicy, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

use super::model::{self, ShadowResource};
use super::printers::{self, Printer};
use super::{ShadowApi, ShadowRequest, Target, query_map};
use crate::apis::Manifest;
use crate::hub::body::{HubBody, boxed};
use crate::hub::status::{ApiError, success_status};
use crate::kube_ext::yaml;

use model::{CLUSTERNET_HUB_NAME as CREATED_BY_HUB, CREATED_BY_LABEL, SKIP_VALIDATING_ANNOTATION};

pub async fn dispatch(
    api: &ShadowApi,
    t: &Target,
    req: ShadowRequest,
) -> Result<(StatusCode, Value), ApiError> {
    let q = query_map(&req.query);
    if req.method != Method::GET && req.method != Method::HEAD {
        // a malformed dryRun is refused before anything is read or written
        dry_run_requested(&q)?;
    }
    let table = wants_table(&req.headers);
    match (&req.method, t.name.as_deref(), t.subresource.as_deref()) {
        (&Method::GET | &Method::HEAD, None, None) => {
            let list = list(api, t, &q).await?;
            Ok((
                StatusCode::OK,
                if table {
                    to_table(api, &t.resource, &list)
                } else {
                    list
                },
            ))
        }
        (&Method::GET | &Method::HEAD, Some(name), None) => {
            let obj =
                model::manifest_to_object(&manifest_json(&get_manifest(api, t, name).await?)?)
                    .map_err(|e| ApiError::internal(e.to_string()))?;
            Ok((
                StatusCode::OK,
                if table {
                    to_table(api, &t.resource, &single_list(&obj))
                } else {
                    obj
                },
            ))
        }
        (&Method::POST, None, None) => {
            let body = decode_body(api, t, &req, &q).await?;
            Ok((StatusCode::CREATED, create_decoded(api, t, body, &q).await?))
        }
        (&Method::PUT, Some(name), None) => {
            let body = decode_body(api, t, &req, &q).await?;
            Ok((
                StatusCode::OK,
                update_decoded(api, t, name, body, &q).await?,
            ))
        }
        (&Method::PATCH, Some(name), None) => patch(api, t, name, &req, &q).await,
        (&Method::DELETE, Some(name), None) => delete(api, t, name, &req.body, &q).await,
        // deliberately a no-op (hub.md §3.5): deleting a namespace in the parent must not wipe
        // the templates of that namespace
        (&Method::DELETE, None, None) => Ok((StatusCode::OK, success_status(None))),
        (m, Some(name), Some("scale"))
            if t.has_scale && matches!(*m, Method::GET | Method::PUT | Method::PATCH) =>
        {
            scale(api, t, name, &req, &q).await
        }
        (m, Some(_), Some("status")) if is_crd(&t.resource) => Err(ApiError::method_not_supported(
            model::crd_status_message(m.as_str(), &t.resource.kind),
        )),
        (_, Some(_), Some(sub)) => Err(ApiError::method_not_supported(
            model::subresource_update_message(&t.resource.name, sub),
        )),
        (m, _, _) => Err(ApiError::method_not_supported(format!(
            "{m} is not supported on {}",
            t.resource.name
        ))),
    }
}

fn api_version(r: &ShadowResource) -> String {
    r.api_version()
}

fn is_crd(r: &ShadowResource) -> bool {
    matches!(r.origin, model::ResourceOrigin::Crd { .. })
}

fn api_resource(r: &ShadowResource) -> ApiResource {
    ApiResource {
        group: r.group.clone(),
        version: r.version.clone(),
        api_version: api_version(r),
        kind: r.kind.clone(),
        plural: r.name.clone(),
    }
}

fn manifests(api: &ShadowApi) -> Api<Manifest> {
    Api::namespaced(api.rt.client.clone(), &api.rt.config.reserved_namespace)
}

fn manifest_json(m: &Manifest) -> Result<Value, ApiError> {
    serde_json::to_value(m).map_err(|e| ApiError::internal(format!("encoding a Manifest: {e}")))
}

fn transform(m: &Manifest) -> Result<Value, ApiError> {
    model::manifest_to_object(&manifest_json(m)?).map_err(|e| ApiError::internal(e.to_string()))
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=Table"))
}

/// kubectl's encoding for built-in kinds (`kubectl create configmap|deployment|namespace ...`).
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A create or update body, decoded.
pub enum Decoded {
    /// A JSON or YAML object as sent; validated with a dry run before it is stored.
    Sent(Value),
    /// What the parent's dry run made of a protobuf body: validated already.
    DryRun(Value),
}

impl Decoded {
    /// The object, and whether the parent's dry run has validated it already.
    fn split(self) -> (Value, bool) {
        match self {
            Decoded::Sent(o) => (o, false),
            Decoded::DryRun(o) => (o, true),
        }
    }
}

/// JSON and YAML are read here; protobuf is decoded by the parent (see [`dry_run_protobuf`]).
async fn decode_body(
    api: &ShadowApi,
    t: &Target,
    req: &ShadowRequest,
    q: &BTreeMap<String, String>,
) -> Result<Decoded, ApiError> {
    if content_type(&req.headers) == PROTOBUF {
        return dry_run_protobuf(api, t, &req.headers, &req.body, q)
            .await
            .map(Decoded::DryRun);
    }
    decode_object(&req.headers, &req.body).map(Decoded::Sent)
}

/// Protobuf bodies exist only for built-in kinds: the API server itself serves custom
/// resources as JSON or YAML, so a protobuf custom resource is refused with the reason.
fn protobuf_decodable(r: &ShadowResource) -> Result<(), ApiError> {
    if is_crd(r) {
        return Err(ApiError::unsupported_media_type(&format!(
            "{PROTOBUF}; custom resources ({}) take JSON or YAML",
            qualified(r)
        )));
    }
    Ok(())
}

/// The parent's own collection path of a resource, in `namespace` for namespaced kinds.
fn parent_collection_path(r: &ShadowResource, namespace: &str) -> String {
    let base = if r.group.is_empty() {
        format!("/api/{}", r.version)
    } else {
        format!("/apis/{}/{}", r.group, r.version)
    };
    if r.namespaced {
        format!("{base}/namespaces/{namespace}/{}", r.name)
    } else {
        format!("{base}/{}", r.name)
    }
}

/// Request bodies are JSON or YAML objects; anything else is the caller's mistake.
pub fn decode_object(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let v: Value = if ct.contains("yaml") {
        yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid YAML: {e}")))?
    } else if ct.contains("json") || ct.starts_with("*/*") {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?
    } else {
        return Err(ApiError::unsupported_media_type(ct));
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body must be a Kubernetes object (a JSON/YAML map)",
        ));
    }
    Ok(v)
}

/// Fills in `apiVersion`/`kind` and the namespace from the path; rejects objects of another
/// kind or namespace.
pub(crate) fn normalize(t: &Target, obj: &mut Value) -> Result<(), ApiError> {
    let r = &t.resource;
    let want_av = api_version(r);
    match obj["apiVersion"].as_str() {
        None | Some("") => obj["apiVersion"] = json!(want_av),
        Some(av) if av == want_av => {}
        Some(av) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
    }
    match obj["kind"].as_str() {
        None | Some("") => obj["kind"] = json!(r.kind),
        Some(k) if k == r.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                r.kind
            )));
        }
    }
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if r.namespaced {
        let in_body = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        let ns = match (t.namespace.as_deref(), in_body) {
            (Some(p), "") => p.to_string(),
            (Some(p), b) if p == b => p.to_string(),
            (Some(_), _) => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (None, "") => {
                return Err(ApiError::bad_request(format!(
                    "{} are namespaced: send them to /apis/shadow/v1alpha1/namespaces/<namespace>/{}",
                    r.name, r.name
                )));
            }
            (None, b) => b.to_string(),
        };
        if let Err(msg) = dns_label(&ns) {
            return Err(invalid(r, obj, "metadata.namespace", &ns, &msg));
        }
        obj["metadata"]["namespace"] = json!(ns);
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    if r.group.is_empty() && r.kind == "Namespace" {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if !name.is_empty()
            && let Err(msg) = dns_label(&name)
        {
            return Err(invalid(r, obj, "metadata.name", &name, &msg));
        }
    }
    Ok(())
}

fn invalid(r: &ShadowResource, obj: &Value, field: &str, value: &str, msg: &str) -> ApiError {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let mut e = ApiError::invalid(format!(
        "{} \"{name}\" is invalid: {field}: Invalid value: \"{value}\": {msg}",
        r.kind
    ));
    e.details = Some(json!({
        "name": name, "group": r.group, "kind": r.kind,
        "causes": [{"reason": "FieldValueInvalid", "message": format!("Invalid value: \"{value}\": {msg}"), "field": field}]
    }));
    e
}

/// RFC 1123 label, as namespace names must be.
fn dns_label(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character".into())
    }
}

fn set_label(obj: &mut Value, key: &str, value: &str) {
    if !obj["metadata"]["labels"].is_object() {
        obj["metadata"]["labels"] = json!({});
    }
    obj["metadata"]["labels"][key] = json!(value);
}

fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn skip_validating(obj: &Value) -> bool {
    obj["metadata"]["annotations"][SKIP_VALIDATING_ANNOTATION].as_str() == Some("true")
}

fn is_crd_kind(r: &ShadowResource) -> bool {
    r.group == "apiextensions.k8s.io" && r.kind == "CustomResourceDefinition"
}

/// Validates `obj` with a server-side dry-run create in the parent (in the reserved namespace
/// for namespaced kinds) and returns what the parent would have stored, with the original name
/// and namespace restored. Name clashes in the parent are dodged with a random suffix; a CRD that
/// already exists yields the live definition (hub.md §3.3 step 4).
async fn dry_run(
    api: &ShadowApi,
    r: &ShadowResource,
    obj: &Value,
    q: &BTreeMap<String, String>,
) -> Result<Value, ApiError> {
    let reserved = &api.rt.config.reserved_namespace;
    let original_ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
    let original_name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ar = api_resource(r);
    let dyn_api: Api<DynamicObject> = if r.namespaced {
        Api::namespaced_with(api.rt.client.clone(), reserved, &ar)
    } else {
        Api::all_with(api.rt.client.clone(), &ar)
    };
    let mut candidate = obj.clone();
    if r.namespaced {
        candidate["metadata"]["namespace"] = json!(reserved);
    }
    let pp = PostParams {
        dry_run: true,
        field_manager: q.get("fieldManager").cloned(),
    };
    let mut attempt = 0;
    let mut result = loop {
        let dynamic: DynamicObject = serde_json::from_value(candidate.clone())
            .map_err(|e| ApiError::bad_request(format!("decoding the object: {e}")))?;
        match dyn_api.create(&pp, &dynamic).await {
            Ok(created) => {
                break serde_json::to_value(created)
                    .map_err(|e| ApiError::internal(format!("encoding the object: {e}")))?;
            }
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                if let Some(live) = on_name_clash(api, r, &original_name, &mut attempt, &s).await? {
                    break live;
                }
                candidate["metadata"]["name"] = json!(format!(
                    "{original_name}{}",
                    crate::kube_ext::random_suffix(3)
                ));
            }
            Err(e) => return Err(ApiError::from_kube(&e)),
        }
    };
    // generateName: the dry run picked the name, keep it
    if !original_name.is_empty() {
        result["metadata"]["name"] = json!(original_name);
    }
    match original_ns {
        Some(ns) if r.namespaced => result["metadata"]["namespace"] = json!(ns),
        _ => {
            if let Some(m) = result["metadata"].as_object_mut() {
                m.remove("namespace");
            }
        }
    }
    Ok(result)
}

/// A dry-run create in the parent met an object of the same name: a CRD that already exists is
/// the live definition (hub.md §3.3 step 4), returned as `Some`; anything else is tried again
/// under another name (`None`), at most five times.
async fn on_name_clash(
    api: &ShadowApi,
    r: &ShadowResource,
    name: &str,
    attempt: &mut u32,
    clash: &kube::core::Status,
) -> Result<Option<Value>, ApiError> {
    if is_crd_kind(r) {
        let live = Api::<DynamicObject>::all_with(api.rt.client.clone(), &api_resource(r))
            .get(name)
            .await
            .map_err(|e| ApiError::from_kube(&e))?;
        return serde_json::to_value(live)
            .map(Some)
            .map_err(|e| ApiError::internal(format!("encoding the object: {e}")));
    }
    *attempt += 1;
    if *attempt > 5 {
        return Err(ApiError::from_status(clash));
    }
    Ok(None)
}

/// Lets the parent decode a protobuf body, which the hub cannot read without every built-in
/// type: the same bytes, with the namespace and resource version taken out of their metadata, go
/// to the parent's own endpoint as a dry-run create (in the reserved namespace for namespaced
/// kinds), answered in JSON. That dry run is also the validation the JSON path does in
/// [`dry_run`], so the result is treated the same: original name, namespace and resource
/// version put back, name clashes dodged with `generateName`, an existing CRD read live.
async fn dry_run_protobuf(
    api: &ShadowApi,
    t: &Target,
    headers: &HeaderMap,
    body: &Bytes,
    q: &BTreeMap<String, String>,
) -> Result<Value, ApiError> {
    use crate::kube_ext::protobuf;
    let r = &t.resource;
    protobuf_decodable(r)?;
    let unreadable = |e: protobuf::ProtobufError| {
        ApiError::bad_request(format!("the protobuf body cannot be read: {e}"))
    };
    let meta = protobuf::read_meta(body).map_err(unreadable)?;
    let query = {
        // the serializer is not Send: finish it before the first await
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("dryRun", "All");
        if let Some(fm) = q.get("fieldManager") {
            query.append_pair("fieldManager", fm);
        }
        query.finish()
    };
    let uri = format!(
        "{}?{query}",
        parent_collection_path(r, &api.rt.config.reserved_namespace)
    );
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or_else(|| http::HeaderValue::from_static(PROTOBUF));
    let mut edit = protobuf::MetaEdit {
        // the reserved namespace comes from the path; a create must not carry a version
        clear_namespace: true,
        clear_resource_version: true,
        generate_name: None,
    };
    let mut attempt = 0;
    let mut result = loop {
        let bytes = protobuf::edit_meta(body, &edit).map_err(unreadable)?;
        let req = http::Request::post(&uri)
            .header(header::CONTENT_TYPE, content_type.clone())
            .header(header::ACCEPT, "application/json")
            .body(bytes)
            .map_err(|e| ApiError::internal(format!("building the dry run: {e}")))?;
        match api.rt.client.request::<Value>(req).await {
            Ok(decoded) => break decoded,
            Err(kube::Error::Api(s))
                if s.code == 409 && s.reason == "AlreadyExists" && !meta.name.is_empty() =>
            {
                if let Some(live) = on_name_clash(api, r, &meta.name, &mut attempt, &s).await? {
                    break live;
                }
                // the parent has an object of that name (a Namespace it holds too): let it pick
                // a free one for the dry run; the original name is put back below
                edit.generate_name = Some(meta.name.clone());
            }
            Err(e) => return Err(ApiError::from_kube(&e)),
        }
    };
    if !result.is_object() {
        return Err(ApiError::internal(
            "the parent answered the dry run with something other than an object",
        ));
    }
    if !result["metadata"].is_object() {
        result["metadata"] = json!({});
    }
    let m = &mut result["metadata"];
    // an empty name means the body used generateName: the dry run picked the name, keep it
    if !meta.name.is_empty() {
        m["name"] = json!(meta.name);
    }
    if let Some(fields) = m.as_object_mut() {
        if meta.generate_name.is_empty() {
            fields.remove("generateName");
        }
        fields.remove("namespace");
        fields.remove("resourceVersion");
    }
    let namespace = Some(meta.namespace.as_str())
        .filter(|ns| !ns.is_empty())
        .or(t.namespace.as_deref());
    if r.namespaced
        && let Some(ns) = namespace
    {
        m["namespace"] = json!(ns);
    }
    if !meta.resource_version.is_empty() {
        m["resourceVersion"] = json!(meta.resource_version);
    }
    Ok(result)
}

async fn get_manifest_opt(
    api: &ShadowApi,
    r: &ShadowResource,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Manifest>, ApiError> {
    let m = manifests(api);
    for candidate in [
        model::manifest_name(&r.name, namespace, name),
        model::legacy_manifest_name(&r.name, namespace, name),
    ] {
        match m.get_opt(&candidate).await {
            Ok(Some(found)) => return Ok(Some(found)),
            Ok(None) => {}
            Err(e) => return Err(ApiError::from_kube(&e)),
        }
    }
    Ok(None)
}

async fn get_manifest(api: &ShadowApi, t: &Target, name: &str) -> Result<Manifest, ApiError> {
    let ns = t
        .resource
        .namespaced
        .then_some(t.namespace.as_deref())
        .flatten();
    get_manifest_opt(api, &t.resource, ns, name)
        .await?
        .ok_or_else(|| ApiError::not_found(&t.resource.group, &t.resource.name, name))
}

pub async fn create(
    api: &ShadowApi,
    t: &Target,
    obj: Value,
    q: &BTreeMap<String, String>,
) -> Result<Value, ApiError> {
    create_decoded(api, t, Decoded::Sent(obj), q).await
}

async fn create_decoded(
    api: &ShadowApi,
    t: &Target,
    body: Decoded,
    q: &BTreeMap<String, String>,
) -> Result<Value, ApiError> {
    let r = &t.resource;
    let (mut obj, dry_run_done) = body.split();
    normalize(t, &mut obj)?;
    set_label(&mut obj, CREATED_BY_LABEL, CREATED_BY_HUB);
    let mut validated = if dry_run_done {
        obj
    } else if skip_validating(&obj) {
        if obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        {
            return Err(invalid(r, &obj, "metadata.name", "", "name is required"));
        }
        if obj["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        {
            obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
        }
        obj
    } else {
        dry_run(api, r, &obj, q).await?
    };
    model::trim_template(&mut validated, &r.group, &r.kind);
    let name = validated["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ns = validated["metadata"]["namespace"]
        .as_str()
        .map(str::to_string);
    let ns = if r.namespaced { ns } else { None };
    if get_manifest_opt(api, r, ns.as_deref(), &name)
        .await?
        .is_some()
    {
        return Err(ApiError::already_exists(&r.group, &r.name, &name));
    }
    let labels = model::manifest_labels(
        &labels_of(&validated),
        &r.group,
        &r.version,
        &r.kind,
        &name,
        ns.as_deref().unwrap_or_default(),
    );
    let manifest_value = model::build_manifest(
        &api.rt.config.reserved_namespace,
        &model::manifest_name(&r.name, ns.as_deref(), &name),
        &labels,
        validated,
    );
    let manifest: Manifest = serde_json::from_value(manifest_value)
        .map_err(|e| ApiError::internal(format!("building the Manifest: {e}")))?;
    let pp = PostParams {
        dry_run: dry_run_requested(q)?,
        field_manager: None,
    };
    match manifests(api).create(&pp, &manifest).await {
        Ok(created) => transform(&created),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(ApiError::already_exists(&r.group, &r.name, &name))
        }
        Err(e) => Err(ApiError::from_kube(&e)),
    }
}

async fn update(
    api: &ShadowApi,
    t: &Target,
    name: &str,
    obj: Value,
    q: &BTreeMap<String, String>,
) -> Result<Value, ApiError> {
    update_decoded(api, t, name, Decoded::Sent(obj), q).await
}

async fn update_decoded(
    api: &ShadowApi,
    t: &Target,
    name: &str,
    body: Decoded,
    q: &BTreeMap<String, String>,
) -> Result<Value, ApiError> {
    let r = &t.resource;
    let (mut obj, dry_run_done) = body.split();
    normalize(t, &mut obj)?;
    match obj["metadata"]["name"].as_str() {
        None | Some("") => obj["metadata"]["name"] = json!(name),
        Some(n) if n == name => {}
        Some(n) => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
    }
    let existing = get_manifest(api, t, name).await?;
    let requested_rv = obj["metadata"]["resourceVersion"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    set_label(&mut obj, CREATED_BY_LABEL, CREATED_BY_HUB);
    let mut validated = if dry_run_done || skip_validating(&obj) {
        obj
    } else {
        dry_run(api, r, &obj, q).await?
    };
    // the template keeps its identity across updates
    let old_template = manifest_json(&existing)?["template"].clone();
    if let Some(uid) = old_template["metadata"]["uid"].as_str() {
        validated["metadata"]["uid"] = json!(uid);
    }
    model::trim_template(&mut validated, &r.group, &r.kind);
    store_update(
        api,
        t,
        existing,
        validated,
        requested_rv,
        false,
        dry_run_requested(q)?,
    )
    .await
}

/// Writes a new template into an existing Manifest: labels are only ever added, `config.*`
/// refreshed (hub.md §3.5). A dry run (`dryRun=All`) goes to the parent as one too, so the answer
/// is what would have been stored (what `kubectl diff` compares) and nothing is.
async fn store_update(
    api: &ShadowApi,
    t: &Target,
    existing: Manifest,
    template: Value,
    requested_rv: Option<String>,
    scale: bool,
    dry_run: bool,
) -> Result<Value, ApiError> {
    let r = &t.resource;
    let name = template["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ns = if r.namespaced {
        template["metadata"]["namespace"]
            .as_str()
            .map(str::to_string)
    } else {
        None
    };
    let mut m = manifest_json(&existing)?;
    let existing_labels = labels_of(&m);
    let labels = model::merge_labels_for_update(
        &existing_labels,
        &labels_of(&template),
        &r.group,
        &r.version,
        if scale { model::SCALE_KIND } else { &r.kind },
        &name,
        ns.as_deref().unwrap_or_default(),
    );
    m["metadata"]["labels"] = json!(labels);
    m["template"] = template;
    if let Some(rv) = requested_rv {
        m["metadata"]["resourceVersion"] = json!(rv);
    }
    let manifest: Manifest = serde_json::from_value(m)
        .map_err(|e| ApiError::internal(format!("building the Manifest: {e}")))?;
    let mname = manifest.metadata.name.clone().unwrap_or_default();
    let pp = PostParams {
        dry_run,
        field_manager: None,
    };
    match manifests(api).replace(&mname, &pp, &manifest).await {
        Ok(updated) => transform(&updated),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let mut e = ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    qualified(r)
                ),
            );
            e.details = Some(json!({"name": name, "group": r.group, "kind": r.name}));
            Err(e)
        }
        Err(e) => Err(ApiError::from_kube(&e)),
    }
}

/// `?dryRun=All`, the only dry-run value the API server knows; anything else is refused as it
/// refuses it, never taken for a real write.
pub fn dry_run_requested(q: &BTreeMap<String, String>) -> Result<bool, ApiError> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(unsupported_dry_run(other)),
    }
}

/// `DeleteOptions.dryRun` (a list of the same values) from a request body.
fn dry_run_options(v: &Value) -> Result<bool, ApiError> {
    match v {
        Value::Null => Ok(false),
        Value::Array(values) => {
            for v in values {
                match v.as_str() {
                    Some("All") => {}
                    other => {
                        return Err(unsupported_dry_run(
                            &other.map_or_else(|| v.to_string(), str::to_string),
                        ));
                    }
                }
            }
            Ok(!values.is_empty())
        }
        other => Err(ApiError::bad_request(format!(
            "the DeleteOptions' dryRun must be a list, got {}",
            crate::kube_ext::a_json_type(other)
        ))),
    }
}

fn unsupported_dry_run(value: &str) -> ApiError {
    ApiError::bad_request(format!(
        "dryRun: Unsupported value: \"{value}\": supported values: \"All\""
    ))
}

fn qualified(r: &ShadowResource) -> String {
    if r.group.is_empty() {
        r.name.clone()
    } else {
        format!("{}.{}", r.name, r.group)
    }
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";

/// Applies a patch body of the given content type to `current`.
async fn apply_patch(
    api: &ShadowApi,
    r: &ShadowResource,
    ct: &str,
    current: &Value,
    body: &Bytes,
) -> Result<Value, ApiError> {
    // the OpenAPI document is fetched only for the patch type that needs it
    let schema = if ct == STRATEGIC_MERGE_PATCH && !is_crd(r) {
        strategic_schema(api, r).await
    } else {
        None
    };
    patch_object(ct, is_crd(r), current, body, schema.as_ref())
}

/// The pure half of [`apply_patch`]: a JSON patch, merge patch or strategic merge patch body
/// (`ct`, lowercase without parameters) applied to `current`. `crd` refuses strategic merge
/// patches as the API server does for custom resources; `schema` is the kind's patch metadata
/// (`None` treats every list as atomic). Every malformed body is a 4xx with the reason.
pub fn patch_object(
    ct: &str,
    crd: bool,
    current: &Value,
    body: &Bytes,
    schema: Option<&crate::kube_ext::strategic_merge::PatchSchema>,
) -> Result<Value, ApiError> {
    let parse = || -> Result<Value, ApiError> {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))
    };
    match ct {
        "application/json-patch+json" => {
            use crate::kube_ext::patch_limits::{GrowthBudget, MAX_PATCH_GROWTH};
            let ops: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("the JSON patch is not valid: {e}")))?;
            // one operation at a time, each charged first: a few `copy`s of the document into
            // itself would otherwise grow it exponentially (the copy is thrown away on error,
            // so the patch still applies all or nothing)
            let mut out = current.clone();
            let mut budget = GrowthBudget::new(MAX_PATCH_GROWTH);
            for (index, op) in ops.0.iter().enumerate() {
                if !budget.charge(&out, op) {
                    return Err(ApiError::invalid(format!(
                        "the JSON patch cannot be applied: operation {index} would grow the object past {MAX_PATCH_GROWTH} bytes"
                    )));
                }
                json_patch::patch(&mut out, std::slice::from_ref(op)).map_err(|e| {
                    ApiError::invalid(format!(
                        "the JSON patch cannot be applied: operation {index} failed at path '{}': {}",
                        e.path, e.kind
                    ))
                })?;
            }
            // what follows indexes the result as an object (`patched["metadata"]`), and a JSON
            // patch may replace the whole document with anything
            if !out.is_object() {
                return Err(ApiError::invalid(format!(
                    "the JSON patch cannot be applied: the result must be an object, got {}",
                    crate::kube_ext::a_json_type(&out)
                )));
            }
            Ok(out)
        }
        "application/merge-patch+json" => {
            let p = parse()?;
            if !p.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            let mut out = current.clone();
            json_patch::merge(&mut out, &p);
            Ok(out)
        }
        STRATEGIC_MERGE_PATCH => {
            if crd {
                return Err(ApiError::unsupported_media_type(
                    "application/strategic-merge-patch+json is not supported for custom resources: use a merge patch",
                ));
            }
            let p = parse()?;
            crate::kube_ext::strategic_merge::apply_strategic_merge_patch(current, &p, schema)
                .map_err(|e| {
                    ApiError::bad_request(format!(
                        "the strategic merge patch cannot be applied: {e}"
                    ))
                })
        }
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

/// The parent's OpenAPI v3 patch metadata for a built-in kind (cached per group-version); `None`
/// falls back to merge-patch semantics for lists.
async fn strategic_schema(
    api: &ShadowApi,
    r: &ShadowResource,
) -> Option<crate::kube_ext::strategic_merge::PatchSchema> {
    let path = if r.group.is_empty() {
        format!("/openapi/v3/api/{}", r.version)
    } else {
        format!("/openapi/v3/apis/{}/{}", r.group, r.version)
    };
    let cached = api.openapi.lock().ok().and_then(|c| c.get(&path).cloned());
    let index = match cached {
        Some(i) => i,
        None => {
            let req = http::Request::get(&path).body(Vec::new()).ok()?;
            let doc: Value = match api.rt.client.request(req).await {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(%path, error = %e, "no OpenAPI document for strategic merge patches");
                    return None;
                }
            };
            let index = crate::kube_ext::strategic_merge::PatchSchemaIndex::from_openapi(&doc);
            if let Ok(mut c) = api.openapi.lock() {
                c.insert(path, index.clone());
            }
            index
        }
    };
    index.for_kind(&r.group, &r.version, &r.kind)
}

async fn patch(
    api: &ShadowApi,
    t: &Target,
    name: &str,
    req: &ShadowRequest,
    q: &BTreeMap<String, String>,
) -> Result<(StatusCode, Value), ApiError> {
    let ct = content_type(&req.headers);
    let existing = match get_manifest(api, t, name).await {
        Ok(m) => Some(m),
        Err(e) if e.code == 404 => None,
        Err(e) => return Err(e),
    };
    if ct == "application/apply-patch+yaml" || ct == "application/apply-patch+cbor" {
        // server-side apply: the template is the whole desired state, so the applied
        // configuration replaces it (field ownership is not tracked for templates)
        let applied = decode_apply_patch(&req.body, name)?;
        return match existing {
            None => Ok((StatusCode::CREATED, create(api, t, applied, q).await?)),
            Some(_) => Ok((StatusCode::OK, update(api, t, name, applied, q).await?)),
        };
    }
    let existing =
        existing.ok_or_else(|| ApiError::not_found(&t.resource.group, &t.resource.name, name))?;
    let current = transform(&existing)?;
    let mut patched = apply_patch(api, &t.resource, &ct, &current, &req.body).await?;
    // a patch works on the latest version unless it says otherwise
    if patched["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
        && let Some(m) = patched["metadata"].as_object_mut()
    {
        m.remove("resourceVersion");
    }
    Ok((StatusCode::OK, update(api, t, name, patched, q).await?))
}

/// A server-side apply body (YAML or JSON): an object whose name, when it has one, is the name
/// on the URL; a missing name is filled in.
pub fn decode_apply_patch(body: &Bytes, name: &str) -> Result<Value, ApiError> {
    let mut applied: Value = yaml::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the apply patch is not valid YAML: {e}")))?;
    if !applied.is_object() {
        return Err(ApiError::bad_request("the apply patch must be an object"));
    }
    // writing `metadata.name` below would panic on a `metadata` that is a string or a list
    if !applied["metadata"].is_object() && !applied["metadata"].is_null() {
        return Err(ApiError::bad_request(format!(
            "the apply patch's metadata must be an object, got {}",
            crate::kube_ext::a_json_type(&applied["metadata"])
        )));
    }
    match applied["metadata"]["name"].as_str() {
        Some(n) if n == name => {}
        None | Some("") => applied["metadata"]["name"] = json!(name),
        Some(n) => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
    }
    Ok(applied)
}

async fn delete(
    api: &ShadowApi,
    t: &Target,
    name: &str,
    body: &Bytes,
    q: &BTreeMap<String, String>,
) -> Result<(StatusCode, Value), ApiError> {
    let existing = get_manifest(api, t, name).await?;
    let mut dp = DeleteParams::default();
    let opts: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the DeleteOptions are not valid JSON: {e}"))
        })?
    };
    let policy = opts["propagationPolicy"]
        .as_str()
        .or(q.get("propagationPolicy").map(String::as_str));
    dp.propagation_policy = match policy {
        Some("Orphan") => Some(PropagationPolicy::Orphan),
        Some("Background") => Some(PropagationPolicy::Background),
        Some("Foreground") => Some(PropagationPolicy::Foreground),
        None => None,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown propagationPolicy {other:?}"
            )));
        }
    };
    dp.grace_period_seconds = opts["gracePeriodSeconds"]
        .as_u64()
        .or_else(|| q.get("gracePeriodSeconds").and_then(|v| v.parse().ok()))
        .map(|v| v as u32);
    dp.dry_run = dry_run_requested(q)? || dry_run_options(&opts["dryRun"])?;
    // preconditions name the template's uid/resourceVersion, which are the Manifest's
    if opts["preconditions"].is_object() {
        dp.preconditions = Some(Preconditions {
            uid: opts["preconditions"]["uid"]
                .as_str()
                .map(str::to_string)
                .and_then(|_| existing.metadata.uid.clone()),
            resource_version: opts["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
        });
    }
    let mname = existing.metadata.name.clone().unwrap_or_default();
    match manifests(api).delete(&mname, &dp).await {
        Ok(either) => match either.left() {
            Some(m) => Ok((StatusCode::OK, transform(&m)?)),
            None => Ok((
                StatusCode::OK,
                success_status(Some(json!({
                    "name": name, "group": t.resource.group, "kind": t.resource.name,
                    "uid": existing.metadata.uid,
                }))),
            )),
        },
        Err(kube::Error::Api(s)) if s.code == 404 => Err(ApiError::not_found(
            &t.resource.group,
            &t.resource.name,
            name,
        )),
        Err(e) => Err(ApiError::from_kube(&e)),
    }
}

/// The Manifest label selector, the field terms left for the transformed objects, and the
/// requested resource version. A malformed selector is the caller's mistake: 400.
fn list_params(
    t: &Target,
    q: &BTreeMap<String, String>,
) -> Result<(model::ListSelectors, Option<String>), ApiError> {
    let ns = if t.resource.namespaced {
        t.namespace.as_deref()
    } else {
        None
    };
    let selectors = model::list_selectors(
        q.get("labelSelector").map(String::as_str),
        q.get("fieldSelector").map(String::as_str),
        &t.resource.kind,
        ns,
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((selectors, q.get("resourceVersion").cloned()))
}

async fn list(
    api: &ShadowApi,
    t: &Target,
    q: &BTreeMap<String, String>,
) -> Result<Value, ApiError> {
    let (selectors, rv) = list_params(t, q)?;
    let lp = ListParams {
        label_selector: Some(selectors.label_selector),
        limit: q.get("limit").and_then(|v| v.parse().ok()),
        continue_token: q.get("continue").cloned().filter(|s| !s.is_empty()),
        resource_version: rv.filter(|s| !s.is_empty()),
        ..Default::default()
    };
    let list = manifests(api)
        .list(&lp)
        .await
        .map_err(|e| ApiError::from_kube(&e))?;
    let mut items = Vec::with_capacity(list.items.len());
    for m in &list.items {
        let obj = transform(m)?;
        // a page may come back shorter than `limit`; the continue token still resumes after
        // the last Manifest read, which clients handle as the API server's own short pages
        if selectors.fields.matches(&obj) {
            items.push(obj);
        }
    }
    Ok(model::list_object(
        &api_version(&t.resource),
        &t.resource.list_kind(),
        list.metadata
            .resource_version
            .as_deref()
            .unwrap_or_default(),
        list.metadata.continue_.as_deref().unwrap_or_default(),
        items,
    ))
}

fn single_list(obj: &Value) -> Value {
    json!({"metadata": {}, "items": [obj]})
}

/// The Table printer of a resource: CRD printer columns, or built-in column sets.
fn printer(api: &ShadowApi, r: &ShadowResource) -> Printer {
    if !is_crd(r) {
        return Printer::Builtin {
            group: r.group.clone(),
            kind: r.kind.clone(),
        };
    }
    let columns = api
        .crds
        .store
        .state()
        .iter()
        .find(|c| c.spec.group == r.group && c.spec.names.plural == r.name)
        .and_then(|c| {
            c.spec
                .versions
                .iter()
                .find(|v| v.storage)
                .and_then(|v| v.additional_printer_columns.clone())
        })
        .map(|cols| {
            cols.iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect()
        })
        .unwrap_or_default();
    Printer::Crd(columns)
}

fn to_table(api: &ShadowApi, r: &ShadowResource, list: &Value) -> Value {
    printers::table(&printer(api, r), list)
}

async fn scale(
    api: &ShadowApi,
    t: &Target,
    name: &str,
    req: &ShadowRequest,
    q: &BTreeMap<String, String>,
) -> Result<(StatusCode, Value), ApiError> {
    let existing = get_manifest(api, t, name).await?;
    let m = manifest_json(&existing)?;
    let scale_av = model::scale_api_version(&api_version(&t.resource));
    let current = model::scale_from_object(&transform(&existing)?, scale_av);
    let new_scale = match req.method {
        Method::GET => return Ok((StatusCode::OK, current)),
        Method::PUT => decode_object(&req.headers, &req.body)?,
        _ => {
            let ct = content_type(&req.headers);
            // Scale has no patch strategies beyond merge semantics worth having
            let ct = if ct == "application/strategic-merge-patch+json" {
                "application/merge-patch+json".to_string()
            } else {
                ct
            };
            apply_patch(api, &t.resource, &ct, &current, &req.body).await?
        }
    };
    let mut template = m["template"].clone();
    model::apply_scale(&mut template, &new_scale)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let rv = new_scale["metadata"]["resourceVersion"]
        .as_str()
        .filter(|s| !s.is_empty() && Some(*s) != current["metadata"]["resourceVersion"].as_str())
        .map(str::to_string);
    // the object as stored (or as it would be, in a dry run) is what the Scale reads from
    let updated = store_update(api, t, existing, template, rv, true, dry_run_requested(q)?).await?;
    Ok((StatusCode::OK, model::scale_from_object(&updated, scale_av)))
}

/// Streams Manifest events as events of the original kind.
pub async fn watch(
    api: &ShadowApi,
    t: &Target,
    query: &str,
    headers: &HeaderMap,
) -> Result<Response<HubBody>, ApiError> {
    let q = query_map(query);
    // `kubectl get -w` asks for Table events; every event then carries a one-row Table
    let table = wants_table(headers).then(|| printer(api, &t.resource));
    let (selectors, rv) = list_params(t, &q)?;
    let fields = selectors.fields;
    let wp = WatchParams {
        label_selector: Some(selectors.label_selector),
        // the parent ends the Manifest watch before our client's read timeout would, so the
        // caller sees a clean end of stream and simply watches again
        timeout: Some(
            q.get("timeoutSeconds")
                .and_then(|v| v.parse().ok())
                .map_or(290, |v: u32| v.min(290)),
        ),
        // streaming lists (client-go's WatchList) need the initial events and the closing
        // bookmark; the Manifest watch provides both, transformed below
        send_initial_events: q.get("sendInitialEvents").is_some_and(|v| v == "true"),
        bookmarks: q.get("allowWatchBookmarks").is_some_and(|v| v == "true")
            || q.get("sendInitialEvents").is_some_and(|v| v == "true"),
        ..Default::default()
    };
    let rv = rv.filter(|s| !s.is_empty()).unwrap_or_else(|| "0".into());
    let stream = manifests(api)
        .watch(&wp, &rv)
        .await
        .map_err(|e| ApiError::from_kube(&e))?;
    let kind = t.resource.kind.clone();
    let av = api_version(&t.resource);
    let events = stream.filter_map(move |ev| {
        // objects outside the field selector are not the watcher's business; unlike the API
        // server we cannot tell "stopped matching" from "never matched", so such an object's
        // later events are dropped rather than turned into a DELETED
        let object_event = |kind: &str, m: &Manifest| match transform(m) {
            Ok(o) if !fields.matches(&o) => None,
            other => Some(event(kind, other, table.as_ref())),
        };
        let line = match ev {
            Ok(WatchEvent::Added(m)) => object_event("ADDED", &m),
            Ok(WatchEvent::Modified(m)) => object_event("MODIFIED", &m),
            Ok(WatchEvent::Deleted(m)) => object_event("DELETED", &m),
            Ok(WatchEvent::Bookmark(b)) => Some(model::watch_event(
                "BOOKMARK",
                model::bookmark_object(&av, &kind, &b.metadata.resource_version),
            )),
            Ok(WatchEvent::Error(e)) => Some(json!({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": e.message, "reason": e.reason, "code": e.code}})),
            Err(e) => Some(json!({"type": "ERROR", "object": ApiError::from_kube(&e).to_json()})),
        };
        let frame = line.map(|line| {
            let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
            bytes.push(b'\n');
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(bytes)))
        });
        std::future::ready(frame)
    });
    let mut resp = Response::new(boxed(StreamBody::new(events)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

fn event(kind: &str, obj: Result<Value, ApiError>, table: Option<&Printer>) -> Value {
    match obj {
        Ok(o) if let Some(p) = table => {
            model::watch_event(kind, printers::table(p, &single_list(&o)))
        }
        Ok(o) => model::watch_event(kind, o),
        Err(e) => json!({"type": "ERROR", "object": e.to_json()}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_must_be_objects_in_a_known_format() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        assert_eq!(decode_object(&h, &Bytes::from("{")).unwrap_err().code, 400);
        assert_eq!(
            decode_object(&h, &Bytes::from("[1]")).unwrap_err().code,
            400
        );
        assert!(decode_object(&h, &Bytes::from("{\"a\":1}")).is_ok());
        h.insert(header::CONTENT_TYPE, "application/yaml".parse().unwrap());
        assert_eq!(
            decode_object(&h, &Bytes::from("a: 1\n")).unwrap()["a"],
            json!(1)
        );
        h.insert(
            header::CONTENT_TYPE,
            "application/vnd.kubernetes.protobuf".parse().unwrap(),
        );
        assert_eq!(decode_object(&h, &Bytes::from("x")).unwrap_err().code, 415);
    }

    fn resource(
        group: &str,
        name: &str,
        kind: &str,
        namespaced: bool,
        crd: bool,
    ) -> ShadowResource {
        ShadowResource {
            group: group.into(),
            version: "v1".into(),
            name: name.into(),
            singular_name: String::new(),
            namespaced,
            kind: kind.into(),
            verbs: vec![],
            storage_version_hash: String::new(),
            origin: if crd {
                model::ResourceOrigin::Crd {
                    has_status: false,
                    has_scale: false,
                }
            } else {
                model::ResourceOrigin::BuiltIn
            },
        }
    }

    #[test]
    fn protobuf_is_decoded_for_built_ins_only() {
        assert!(protobuf_decodable(&resource("", "configmaps", "ConfigMap", true, false)).is_ok());
        let e = protobuf_decodable(&resource("example.com", "widgets", "Widget", true, true))
            .unwrap_err();
        assert_eq!((e.code, e.reason), (415, "UnsupportedMediaType"));
        assert!(
            e.message.contains(PROTOBUF) && e.message.contains("widgets.example.com"),
            "{}",
            e.message
        );
    }

    #[test]
    fn dry_runs_go_to_the_parents_own_collections() {
        let cm = resource("", "configmaps", "ConfigMap", true, false);
        assert_eq!(
            parent_collection_path(&cm, "clusternet-reserved"),
            "/api/v1/namespaces/clusternet-reserved/configmaps"
        );
        let ns = resource("", "namespaces", "Namespace", false, false);
        assert_eq!(parent_collection_path(&ns, "r"), "/api/v1/namespaces");
        let deploy = resource("apps", "deployments", "Deployment", true, false);
        assert_eq!(
            parent_collection_path(&deploy, "r"),
            "/apis/apps/v1/namespaces/r/deployments"
        );
    }

    #[test]
    fn an_unknown_namespaced_resource_is_a_404_naming_it() {
        let mut served = crate::fuzzing::shadow_resources();
        served.push(resource("", "namespaces/status", "Namespace", false, false));
        let e = crate::hub::shadow::resolve_target(&served, "namespaces/demo/gadgets")
            .expect_err("nothing serves gadgets");
        assert_eq!((e.code, e.reason), (404, "NotFound"));
        assert!(e.message.contains("\"gadgets\""), "{}", e.message);
        assert!(!e.message.contains("templates"), "{}", e.message);
        // a Namespace's own subresource and a served namespaced resource still resolve
        let t = crate::hub::shadow::resolve_target(&served, "namespaces/demo/status")
            .expect("a Namespace's status");
        assert_eq!(
            (
                t.resource.name.as_str(),
                t.name.as_deref(),
                t.subresource.as_deref()
            ),
            ("namespaces", Some("demo"), Some("status"))
        );
        let t = crate::hub::shadow::resolve_target(&served, "namespaces/demo/deployments/web")
            .expect("a Deployment");
        assert_eq!(t.resource.name, "deployments");
    }

    #[test]
    fn only_dry_run_all_is_a_dry_run_and_other_values_are_refused() {
        let q = |v: &str| BTreeMap::from([("dryRun".to_string(), v.to_string())]);
        assert!(!dry_run_requested(&BTreeMap::new()).expect("no dry run"));
        assert!(!dry_run_requested(&q("")).expect("an empty value"));
        assert!(dry_run_requested(&q("All")).expect("a dry run"));
        let e = dry_run_requested(&q("all")).expect_err("not a value the API server knows");
        assert_eq!(e.code, 400);
        assert!(
            e.message.contains("supported values: \"All\""),
            "{}",
            e.message
        );
        assert!(dry_run_options(&json!(["All"])).expect("a dry run"));
        assert!(!dry_run_options(&json!([])).expect("no dry run"));
        assert!(!dry_run_options(&Value::Null).expect("no dry run"));
        assert_eq!(
            dry_run_options(&json!(["Yes"])).expect_err("refused").code,
            400
        );
        assert_eq!(
            dry_run_options(&json!("All")).expect_err("not a list").code,
            400
        );
    }

    #[test]
    fn namespace_names_are_rfc1123_labels() {
        assert!(dns_label("foo-1").is_ok());
        assert!(dns_label("Foo").is_err());
        assert!(dns_label("-a").is_err());
        assert!(dns_label(&"a".repeat(64)).is_err());
    }

    /// Bounded fuzz harnesses (issue #21): everything a client sends the shadow API is decoded
    /// here, so no body, patch, path or selector may panic the hub, and every refusal is a
    /// Status with a message.
    mod fuzz {
        use proptest::prelude::*;

        use super::*;
        use crate::fuzz_support::{self, assert_readable};
        use crate::fuzzing::{deployment_patch_schema, shadow_resources};
        use crate::hub::shadow::resolve_target;

        fn body_text() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                3 => fuzz_support::json_object().prop_map(|v| v.to_string().into_bytes()),
                2 => fuzz_support::json_object()
                    .prop_map(|v| yaml::to_string(&v).unwrap_or_default().into_bytes()),
                2 => fuzz_support::json_value().prop_map(|v| v.to_string().into_bytes()),
                1 => fuzz_support::json_patch().prop_map(|v| v.to_string().into_bytes()),
                1 => prop::collection::vec(any::<u8>(), 0..64),
            ]
        }

        fn content_type() -> impl Strategy<Value = &'static str> {
            prop::sample::select(&crate::fuzzing::SHADOW_CONTENT_TYPES[..])
        }

        fn headers(ct: &str) -> HeaderMap {
            let mut h = HeaderMap::new();
            if let Ok(v) = ct.parse() {
                h.insert(header::CONTENT_TYPE, v);
            }
            h
        }

        /// A path tail: resource paths of the served table, with random names and extra
        /// segments, or any text.
        fn path_tail() -> impl Strategy<Value = String> {
            let segment = prop_oneof![
                prop::sample::select(vec![
                    "namespaces",
                    "default",
                    "deployments",
                    "scale",
                    "status",
                    "widgets",
                    "configmaps",
                    "web",
                    "",
                    "..",
                ])
                .prop_map(str::to_owned),
                "[a-z0-9-]{0,8}",
            ];
            prop_oneof![
                4 => prop::collection::vec(segment, 0..7).prop_map(|s| s.join("/")),
                1 => any::<String>(),
            ]
        }

        proptest! {
            #![proptest_config(fuzz_support::config(fuzz_support::DEFAULT_CASES))]

            /// Create/update bodies: JSON, YAML or anything else under any content type become an
            /// object or a 4xx with a message, and normalizing one against any path never panics.
            #[test]
            fn random_bodies_never_panic_the_shadow_decoder(
                ct in content_type(),
                body in body_text(),
                tail in path_tail(),
            ) {
                let resources = shadow_resources();
                let target = resolve_target(&resources, &tail);
                if let Err(e) = &target {
                    prop_assert_eq!(e.code, 404);
                    assert_readable(&e.message, "a path")?;
                }
                match decode_object(&headers(ct), &Bytes::from(body)) {
                    Ok(mut obj) => {
                        prop_assert!(obj.is_object());
                        if let Ok(t) = &target {
                            match normalize(t, &mut obj) {
                                Ok(()) => prop_assert!(obj["metadata"].is_object()),
                                Err(e) => {
                                    prop_assert!((400..500).contains(&e.code), "{}", e);
                                    assert_readable(&e.message, "a body")?;
                                }
                            }
                        }
                    }
                    Err(e) => {
                        prop_assert!((400..500).contains(&e.code), "{}", e);
                        assert_readable(&e.message, "a body")?;
                    }
                }
            }

            /// Patches of every type (JSON patch, merge patch, strategic merge patch with and
            /// without the kind's schema, server-side apply) on any stored object: an object or
            /// a 4xx with a message, never a panic, and never a non-object for the callers to
            /// index into.
            #[test]
            fn random_patches_never_panic_the_shadow_api(
                ct in content_type(),
                crd in any::<bool>(),
                with_schema in any::<bool>(),
                current in prop_oneof![fuzz_support::deployment_like(), fuzz_support::json_object()],
                body in prop_oneof![
                    3 => fuzz_support::json_patch().prop_map(|v| v.to_string().into_bytes()),
                    3 => body_text(),
                ],
            ) {
                let schema = with_schema.then(deployment_patch_schema);
                let body = Bytes::from(body);
                match patch_object(ct, crd, &current, &body, schema.as_ref()) {
                    Ok(patched) => prop_assert!(patched.is_object(), "{}", patched),
                    Err(e) => {
                        prop_assert!((400..500).contains(&e.code), "{}", e);
                        assert_readable(&e.message, "a patch")?;
                    }
                }
                match decode_apply_patch(&body, "web") {
                    Ok(applied) => prop_assert_eq!(&applied["metadata"]["name"], &json!("web")),
                    Err(e) => {
                        prop_assert!((400..500).contains(&e.code), "{}", e);
                        assert_readable(&e.message, "an apply patch")?;
                    }
                }
            }

            /// Label and field selectors, query strings and watch detection: any text.
            #[test]
            fn random_selectors_never_panic_the_shadow_api(
                label in prop_oneof![any::<String>(), "[a-z=!,() ]{0,16}"],
                field in prop_oneof![
                    any::<String>(),
                    "(metadata\\.name|status\\.phase|spec)(=|==|!=)[a-z\\\\,=]{0,6}(,[a-z.]{0,8}=?[a-z]{0,4}){0,2}",
                ],
                namespace in prop::option::of(prop_oneof![Just("default".to_owned()), any::<String>()]),
                query in any::<String>(),
            ) {
                match model::list_selectors(Some(&label), Some(&field), "Deployment", namespace.as_deref()) {
                    Ok(s) => {
                        let obj = json!({"metadata": {"name": "web"}, "status": {"phase": "Running"}});
                        let _ = s.fields.matches(&obj);
                    }
                    Err(e) => assert_readable(&e.to_string(), "a selector")?,
                }
                let _ = query_map(&query);
                let _ = crate::hub::shadow::is_watch(&label, Some(&query));
            }

            /// Protobuf bodies (kubectl's encoding of built-in kinds) are only framed and edited
            /// here: any bytes after the magic number are read or refused with a message.
            #[test]
            fn random_protobuf_bodies_never_panic_the_shadow_api(
                tail in prop::collection::vec(any::<u8>(), 0..96),
            ) {
                use crate::kube_ext::protobuf::{self, MAGIC, MetaEdit};
                let mut body = MAGIC.to_vec();
                body.extend_from_slice(&tail);
                if let Err(e) = protobuf::read_meta(&body) {
                    assert_readable(&e.to_string(), "a protobuf body")?;
                }
                let edit = MetaEdit {
                    clear_namespace: true,
                    clear_resource_version: true,
                    generate_name: Some("web-".into()),
                };
                match protobuf::edit_meta(&body, &edit) {
                    Ok(edited) => {
                        let meta = protobuf::read_meta(&edited);
                        prop_assert!(
                            meta.as_ref().is_ok_and(|m| m.namespace.is_empty() && m.generate_name == "web-"),
                            "{:?}", meta
                        );
                    }
                    Err(e) => assert_readable(&e.to_string(), "a protobuf body")?,
                }
            }
        }

        /// Found while writing the patch harness (which requires an object back): a JSON patch
        /// may replace the whole object (`{"op": "replace", "path": "", "value": "x"}`), and
        /// `patch` then indexed the result as an object (`patched["metadata"]`), which panics
        /// on a string.
        #[test]
        fn json_patch_replacing_the_object_with_a_scalar_is_refused() {
            let body = Bytes::from(r#"[{"op": "replace", "path": "", "value": "x"}]"#);
            let current = json!({"metadata": {"name": "web"}});
            let e = patch_object("application/json-patch+json", false, &current, &body, None)
                .expect_err("a scalar is no object");
            assert_eq!(e.code, 422);
            assert!(
                e.message.contains("must be an object, got a string"),
                "{}",
                e.message
            );
        }

        /// Found while writing the patch harness: an apply patch whose `metadata` is not a map made
        /// `applied["metadata"]["name"] = ...` panic.
        #[test]
        fn apply_patch_with_scalar_metadata_is_refused() {
            for body in ["metadata: x\n", "{\"metadata\": [1]}"] {
                let e = decode_apply_patch(&Bytes::from(body), "web").expect_err("refused");
                assert_eq!(e.code, 400);
                assert!(
                    e.message.contains("metadata must be an object"),
                    "{}",
                    e.message
                );
            }
            let ok = decode_apply_patch(&Bytes::from("metadata: null\n"), "web")
                .expect("a null metadata is filled in");
            assert_eq!(ok["metadata"]["name"], json!("web"));
        }

        /// Found while writing the patch harness: forty copies of the object into itself (a 2 KiB patch)
        /// used to build 2^40 copies in the hub's memory.
        #[test]
        fn self_copying_json_patch_is_refused_not_expanded() {
            let ops: Vec<Value> = (0..40)
                .map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")}))
                .collect();
            let body = Bytes::from(Value::Array(ops).to_string());
            // a 1 MiB object reaches the bound after two copies (a small one after some twenty
            // doublings, the same refusal, only slower in a debug build)
            let current =
                json!({"metadata": {"name": "web"}, "data": {"blob": "x".repeat(1 << 20)}});
            let started = std::time::Instant::now();
            let e = patch_object("application/json-patch+json", false, &current, &body, None)
                .expect_err("an exponential patch is refused");
            assert_eq!(e.code, 422);
            assert!(e.message.contains("would grow the object"), "{}", e.message);
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
        }
    }
}
