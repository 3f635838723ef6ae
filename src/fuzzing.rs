//! Entry points for the libFuzzer targets in `fuzz/` (issue #21): one function per target, each
//! taking the raw bytes libFuzzer hands out, turning them into the inputs of one entry point of
//! the product that reads untrusted data, and checking what the bounded harnesses in the unit
//! tests check (no panic, every refusal readable, the documented invariants).
//!
//! Not an API: the module is public only so that the out-of-tree fuzz crate can reach
//! crate-private functions through thin wrappers, instead of those functions becoming public.
//! The checks here panic on purpose when a property is violated: a panic is how a libFuzzer
//! target reports a finding.
//!
//! Input layouts (every target accepts any bytes; these only make the corpus meaningful):
//! - `tunnel_frame`: one WebSocket binary message;
//! - `tunnel_session`: a flags byte (bit 0: client role, bit 1: gossip), then frames, each a
//!   length byte followed by that many bytes;
//! - the others: a selector byte, then fields separated by NUL bytes (see each function).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::apis::{
    FeedInventory, FeedInventorySpec, FeedOrder, FieldFormat, Globalization, Localization,
    ManagedCluster, ManagedClusterStatus, OverrideConfig, OverrideType, ReplicaRequirements,
    Subscription,
};
use crate::kube_ext::strategic_merge::{PatchSchema, PatchSchemaIndex};
use crate::scheduler::framework::{BoxFuture, Framework};

/// A property of the product that a fuzz input broke: panics with what and why.
macro_rules! check {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            panic!($($arg)+);
        }
    };
}

/// A refusal must say what is wrong.
fn readable(message: &str, what: &str) {
    check!(
        !message.trim().is_empty(),
        "{what} was refused with an empty message"
    );
}

/// `data` split at NUL bytes into exactly `n` fields (missing ones empty, the last keeps any
/// further NULs).
fn fields(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = data.splitn(n, |&b| b == 0).collect();
    out.resize(n, &[]);
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A small current-thread runtime shared by the targets that need one.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("the fuzz runtime does not start: {e}"))
    })
}

// ---------------------------------------------------------------------------------------------
// 1. The tunnel
// ---------------------------------------------------------------------------------------------

/// One WebSocket binary message through the tunnel's frame decoder.
pub fn tunnel_frame(data: &[u8]) {
    use crate::tunnel::{Message, frame::MAX_TEXT_PAYLOAD};
    match Message::decode(Bytes::copy_from_slice(data)) {
        Ok(msg) => {
            check!(
                Message::decode(msg.encode()).as_ref() == Ok(&msg),
                "{msg:?} does not survive re-encoding"
            );
            check!(
                msg.error_text().len() <= 3 * MAX_TEXT_PAYLOAD,
                "error text is not capped"
            );
            if let Err(e) = msg.connect_target() {
                readable(&e.to_string(), "a Connect payload");
            }
            if let Err(e) = msg.client_target() {
                readable(&e.to_string(), "a gossip payload");
            }
        }
        Err(e) => readable(&e.to_string(), "a tunnel frame"),
    }
}

/// A sequence of frames through a session's state machine (see [`tunnel_frame`] for one).
pub fn tunnel_session(data: &[u8]) {
    use crate::tunnel::session::{SessionRole, replay};
    use crate::tunnel::{Message, MessageType};
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let role = if flags & 1 == 0 {
        SessionRole::Server
    } else {
        SessionRole::Client
    };
    let mut frames = Vec::new();
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        frames.push(Bytes::copy_from_slice(&tail[..len]));
        rest = &tail[len..];
    }
    match replay(role, flags & 2 != 0, &frames) {
        Ok(sent) => {
            for msg in sent {
                check!(
                    Message::decode(msg.encode()).as_ref() == Ok(&msg),
                    "the session queued a malformed {msg:?}"
                );
                if msg.kind == MessageType::Error {
                    readable(&msg.error_text(), "a connection the session closed");
                }
            }
        }
        Err(e) => readable(&e.to_string(), "a frame sequence"),
    }
}

// ---------------------------------------------------------------------------------------------
// 2. The shadow API's request decoding
// ---------------------------------------------------------------------------------------------

/// Content types the shadow API reads, picked by the selector byte of [`shadow_request`].
pub const SHADOW_CONTENT_TYPES: [&str; 8] = [
    "application/json",
    "application/yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/vnd.kubernetes.protobuf",
    "text/plain",
];

/// The resources [`shadow_request`] resolves paths against: namespaced and cluster-scoped
/// built-ins, a subresource, and a CRD with a scale subresource.
pub fn shadow_resources() -> Vec<crate::hub::shadow::model::ShadowResource> {
    use crate::hub::shadow::model::{ResourceOrigin, ShadowResource};
    let r = |group: &str, name: &str, kind: &str, namespaced: bool, origin| ShadowResource {
        group: group.into(),
        version: "v1".into(),
        name: name.into(),
        singular_name: String::new(),
        namespaced,
        kind: kind.into(),
        verbs: vec!["get".into(), "list".into(), "create".into(), "patch".into()],
        storage_version_hash: String::new(),
        origin,
    };
    vec![
        r(
            "apps",
            "deployments",
            "Deployment",
            true,
            ResourceOrigin::BuiltIn,
        ),
        r(
            "apps",
            "deployments/scale",
            "Scale",
            true,
            ResourceOrigin::BuiltIn,
        ),
        r(
            "",
            "namespaces",
            "Namespace",
            false,
            ResourceOrigin::BuiltIn,
        ),
        r("", "configmaps", "ConfigMap", true, ResourceOrigin::BuiltIn),
        r(
            "example.com",
            "widgets",
            "Widget",
            true,
            ResourceOrigin::Crd {
                has_status: true,
                has_scale: true,
            },
        ),
    ]
}

/// Patch metadata of a Deployment as the parent publishes it (merge lists keyed by `name` and
/// `containerPort`, `retainKeys`, a primitive merge list), for strategic merge patches.
pub fn deployment_patch_schema() -> PatchSchema {
    static INDEX: OnceLock<PatchSchemaIndex> = OnceLock::new();
    let index = INDEX.get_or_init(|| {
        let r = |name: &str| json!({"allOf": [{"$ref": format!("#/components/schemas/{name}")}]});
        let merge_list = |item: &str, key: &str| {
            json!({"type": "array", "items": r(item),
                "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": key})
        };
        PatchSchemaIndex::from_openapi(&json!({"components": {"schemas": {
            "Deployment": {
                "type": "object",
                "x-kubernetes-group-version-kind": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
                "properties": {"metadata": r("ObjectMeta"), "spec": r("DeploymentSpec")}
            },
            "DeploymentSpec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "strategy": {"allOf": [{"$ref": "#/components/schemas/Strategy"}],
                    "x-kubernetes-patch-strategy": "retainKeys"},
                "template": r("PodTemplateSpec")
            }},
            "Strategy": {"type": "object", "properties": {"type": {"type": "string"}, "rollingUpdate": {"type": "object"}}},
            "PodTemplateSpec": {"type": "object", "properties": {"metadata": r("ObjectMeta"), "spec": r("PodSpec")}},
            "PodSpec": {"type": "object", "properties": {
                "containers": merge_list("Container", "name"),
                "volumes": {"type": "array", "items": r("Volume"),
                    "x-kubernetes-patch-strategy": "merge,retainKeys", "x-kubernetes-patch-merge-key": "name"}
            }},
            "Volume": {"type": "object", "properties": {"name": {"type": "string"}, "configMap": {"type": "object"}}},
            "Container": {"type": "object", "properties": {
                "name": {"type": "string"},
                "env": merge_list("EnvVar", "name"),
                "ports": merge_list("ContainerPort", "containerPort")
            }},
            "EnvVar": {"type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "string"}}},
            "ContainerPort": {"type": "object", "properties": {"containerPort": {"type": "integer"}}},
            "ObjectMeta": {"type": "object", "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-patch-strategy": "merge"}
            }}
        }}}))
    });
    index
        .for_kind("apps", "v1", "Deployment")
        .unwrap_or_else(|| panic!("the built-in Deployment schema lost its kind"))
}

/// One shadow API request. Selector byte: content type ([`SHADOW_CONTENT_TYPES`], low 3 bits),
/// whether the stored object is a custom resource (bit 3). Fields: body, the stored object
/// (JSON), the path after `/apis/shadow/v1alpha1/`, the query string.
pub fn shadow_request(data: &[u8]) {
    use crate::hub::shadow::rest::{decode_apply_patch, decode_object, normalize, patch_object};
    use crate::hub::shadow::{model, query_map, resolve_target};
    use crate::kube_ext::protobuf;
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let f = fields(rest, 4);
    let ct = SHADOW_CONTENT_TYPES[usize::from(selector & 7)];
    let crd = selector & 8 != 0;
    let body = Bytes::copy_from_slice(f[0]);
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ct),
    );

    let current: Value =
        serde_json::from_slice(f[1]).unwrap_or_else(|_| json!({"metadata": {"name": "web"}}));
    let resources = shadow_resources();
    let target = resolve_target(&resources, &text(f[2]));
    if let Err(e) = &target {
        readable(&e.message, "a request path");
    }

    match decode_object(&headers, &body) {
        Ok(mut obj) => {
            check!(obj.is_object(), "decode_object let a non-object through");
            if let Ok(t) = &target
                && let Err(e) = normalize(t, &mut obj)
            {
                readable(&e.message, "a request body");
            }
            let mut template = obj.clone();
            model::trim_template(&mut template, "apps", "Deployment");
            if let Err(e) = model::apply_scale(&mut template, &obj) {
                readable(&e.to_string(), "a Scale body");
            }
        }
        Err(e) => readable(&e.message, "a request body"),
    }
    if current.is_object() {
        let schema = deployment_patch_schema();
        match patch_object(ct, crd, &current, &body, Some(&schema)) {
            Ok(patched) => check!(patched.is_object(), "a patch produced a non-object"),
            Err(e) => readable(&e.message, "a patch"),
        }
    }
    if let Err(e) = decode_apply_patch(&body, "web") {
        readable(&e.message, "an apply patch");
    }
    let meta = protobuf::read_meta(&body);
    if let Err(e) = &meta {
        readable(&e.to_string(), "a protobuf body");
    }
    let edit = protobuf::MetaEdit {
        clear_namespace: true,
        clear_resource_version: true,
        generate_name: Some("web-".into()),
    };
    match protobuf::edit_meta(&body, &edit) {
        Ok(edited) => {
            // an edited body reads back with the edits made
            let read = protobuf::read_meta(&edited);
            check!(
                read.as_ref()
                    .is_ok_and(|m| m.namespace.is_empty() && m.generate_name == "web-"),
                "an edited protobuf body reads back as {read:?}"
            );
        }
        Err(e) => readable(&e.to_string(), "a protobuf body"),
    }

    let q = query_map(&text(f[3]));
    let _ = crate::hub::shadow::is_watch(&text(f[2]), Some(&text(f[3])));
    if let Err(e) = model::list_selectors(
        q.get("labelSelector").map(String::as_str),
        q.get("fieldSelector").map(String::as_str),
        "Deployment",
        q.get("namespace").map(String::as_str),
    ) {
        readable(&e.to_string(), "a selector");
    }
}

// ---------------------------------------------------------------------------------------------
// 3. The strategic merge patch
// ---------------------------------------------------------------------------------------------

/// A strategic merge patch on a stored object. Selector byte: no schema (even) or the
/// Deployment schema (odd). Fields: the stored object (JSON), the patch (JSON).
pub fn strategic_merge(data: &[u8]) {
    use crate::kube_ext::strategic_merge::apply_strategic_merge_patch;
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let f = fields(rest, 2);
    let (Ok(original), Ok(patch)) = (
        serde_json::from_slice::<Value>(f[0]),
        serde_json::from_slice::<Value>(f[1]),
    ) else {
        return;
    };
    let schema = (selector & 1 == 1).then(deployment_patch_schema);
    match apply_strategic_merge_patch(&original, &patch, schema.as_ref()) {
        Ok(merged) => check!(
            merged.is_object(),
            "a strategic merge produced a non-object"
        ),
        Err(e) => readable(&e.to_string(), "a strategic merge patch"),
    }
}

// ---------------------------------------------------------------------------------------------
// 4. The override engine
// ---------------------------------------------------------------------------------------------

/// One override rule on a document. Selector byte: the type (low 3 bits, modulo the five
/// types), `overrideChart` (bit 3), the field format (bits 4-5: none, JSON, YAML). Fields: the
/// document, the rule's value, its field path, the chart document.
pub fn overrides(data: &[u8]) {
    use crate::pipeline::overrides::{apply_overrides, render_generic, render_helm};
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let f = fields(rest, 4);
    let types = [
        OverrideType::Helm,
        OverrideType::JsonPatch,
        OverrideType::MergePatch,
        OverrideType::FieldJsonPatch,
        OverrideType::FieldMergePatch,
    ];
    let rule = OverrideConfig {
        name: "fuzz".into(),
        value: text(f[1]),
        type_: types[usize::from(selector & 7) % types.len()],
        override_chart: selector & 8 != 0,
        field_path: text(f[2]),
        field_format: match (selector >> 4) & 3 {
            1 => Some(FieldFormat::Json),
            2 => Some(FieldFormat::Yaml),
            _ => None,
        },
    };
    let rules = [rule];
    let doc = text(f[0]);
    if let Err(e) = apply_overrides(&doc, &text(f[3]), &rules) {
        readable(&e.to_string(), "an override");
    }
    if let Ok(template) = serde_json::from_str::<Value>(&doc)
        && let Err(e) = render_generic(&template, &rules)
    {
        readable(&e.to_string(), "an override");
    }
    let chart = json!({"spec": {"chart": "mysql", "targetNamespace": "db"}});
    match render_helm(&chart, &rules) {
        Ok(rendered) => check!(
            rendered.chart["spec"]["chart"] == "mysql"
                && rendered.chart["spec"]["targetNamespace"] == "db",
            "an override changed which chart is installed where: {}",
            rendered.chart
        ),
        Err(e) => readable(&e.to_string(), "a Helm override"),
    }
}

// ---------------------------------------------------------------------------------------------
// 5. The scheduler's arithmetic
// ---------------------------------------------------------------------------------------------

/// Replica division. The bytes are little-endian numbers: the desired replicas (`i32`), then
/// alternately a static weight (`i64`) and a dynamic capacity (`i32`) per cluster.
pub fn scheduler_divide(data: &[u8]) {
    use crate::scheduler::plugins::{dynamic_divide_replicas, static_divide_replicas};
    let Some((head, mut rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let desired = i32::from_le_bytes(*head);
    let (mut weights, mut capacity) = (Vec::new(), Vec::new());
    while let Some((w, tail)) = rest.split_first_chunk::<8>() {
        weights.push(i64::from_le_bytes(*w));
        let Some((c, tail)) = tail.split_first_chunk::<4>() else {
            break;
        };
        capacity.push(i32::from_le_bytes(*c));
        rest = tail;
    }
    check_divisions(
        desired,
        &weights,
        &capacity,
        static_divide_replicas(desired, &weights),
        dynamic_divide_replicas(desired, &capacity),
    );
}

/// What every division must satisfy: one share per cluster, and all of `desired` handed out
/// when it can be (non-negative inputs, a positive total, and for Dynamic enough capacity).
pub(crate) fn check_divisions(
    desired: i32,
    weights: &[i64],
    capacity: &[i32],
    by_weight: Vec<i32>,
    by_capacity: Vec<i32>,
) {
    check!(
        by_weight.len() == weights.len(),
        "static: one share per cluster"
    );
    check!(
        by_capacity.len() == capacity.len(),
        "dynamic: one share per cluster"
    );
    let sum = |v: &[i32]| v.iter().map(|&x| i64::from(x)).sum::<i64>();
    let total_weight: i128 = weights.iter().map(|&w| i128::from(w)).sum();
    if desired >= 0 && weights.iter().all(|&w| w >= 0) && total_weight > 0 {
        check!(
            sum(&by_weight) == i64::from(desired),
            "static: {desired} over {weights:?} gave {by_weight:?}"
        );
    }
    let total_capacity: i64 = capacity.iter().map(|&c| i64::from(c)).sum();
    if desired >= 0 && capacity.iter().all(|&c| c >= 0) && total_capacity > 0 {
        if i64::from(desired) <= total_capacity {
            check!(
                sum(&by_capacity) == i64::from(desired),
                "dynamic: {desired} over {capacity:?} gave {by_capacity:?}"
            );
            for (share, cap) in by_capacity.iter().zip(capacity) {
                check!(
                    (0..=*cap).contains(share),
                    "dynamic: share {share} outside 0..={cap}"
                );
            }
        } else {
            check!(
                by_capacity == capacity,
                "dynamic: saturation gives every capacity"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Subscription, Localization and Globalization specs
// ---------------------------------------------------------------------------------------------

/// Predicts from the cluster name, so that Dynamic dividing has numbers to work with: `err`
/// in the name fails, digits are the answer (`c-2147483648` predicts `i32::MIN`).
struct NamePredictor;

impl crate::scheduler::plugins::PredictorClient for NamePredictor {
    fn predict<'a>(
        &'a self,
        cluster: &'a ManagedCluster,
        _requirements: &'a ReplicaRequirements,
    ) -> BoxFuture<'a, Result<i32, String>> {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        Box::pin(async move {
            if name.contains("err") {
                return Err(format!("predictor of {name} is down"));
            }
            let digits = name.trim_start_matches(|c: char| !c.is_ascii_digit() && c != '-');
            Ok(digits
                .trim_start_matches('-')
                .parse::<i64>()
                .ok()
                .map(|n| if name.contains("c--") { -n } else { n })
                .and_then(|n| i32::try_from(n).ok())
                .unwrap_or(3))
        })
    }
}

/// The default scheduler profile with [`NamePredictor`].
fn framework() -> &'static Arc<Framework> {
    use crate::scheduler::config::{Profiles, SchedulerConfiguration};
    use crate::scheduler::framework::Registry;
    static FRAMEWORK: OnceLock<Arc<Framework>> = OnceLock::new();
    FRAMEWORK.get_or_init(|| {
        let registry = Registry::in_tree(Arc::new(NamePredictor));
        let config = SchedulerConfiguration::defaulted();
        let profiles = Profiles::new(&config, &registry, true)
            .unwrap_or_else(|e| panic!("the default scheduler profile is invalid: {e}"));
        let name = config.profiles[0].scheduler_name.clone();
        Arc::clone(
            profiles
                .get(&name)
                .unwrap_or_else(|| panic!("no profile {name}")),
        )
    })
}

/// Clusters to schedule onto: labelled, tainted, predicting (one with a failing predictor, one
/// predicting `i32::MAX`, one a negative number).
fn clusters() -> Vec<ManagedCluster> {
    use k8s_openapi::api::core::v1::Taint;
    let cluster = |name: &str, labels: &[(&str, &str)], predicting: bool| {
        let mut c = ManagedCluster::new(name, Default::default());
        c.metadata.namespace = Some(format!("clusternet-{name}"));
        c.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        c.status = predicting.then(|| ManagedClusterStatus {
            predictor_enabled: true,
            predictor_direct_access: true,
            ..Default::default()
        });
        c
    };
    let mut tainted = cluster("c-4", &[("region", "west")], true);
    tainted.spec.taints.push(Taint {
        key: "hard".into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    });
    vec![
        cluster("c-5", &[("region", "east"), ("tier", "gold")], true),
        cluster("c-2147483647", &[("region", "east")], true),
        cluster("c--7", &[("region", "west")], true),
        cluster("c-err", &[("region", "west"), ("tier", "gold")], true),
        cluster("plain", &[], false),
        tainted,
    ]
}

/// Random specs as users write them, checked the way the controllers use them. `doc` may hold
/// `subscription` (a spec), `status` (a Subscription status), `inventory` (a list of feed
/// orders), `localization` and `globalization` (specs); missing or malformed parts are skipped
/// after their decoding error was checked for a message.
pub fn api_specs(doc: &Value) {
    use crate::apis::hash::{hash_subscription_spec, subscription_spec_go_json};
    use crate::kube_ext::labels::Selector;
    use crate::pipeline::overrides::{render_generic, try_applicable_overrides};
    use crate::scheduler::algorithm::{FilterOffset, schedule};
    use crate::scheduler::binder;
    use crate::scheduler::framework::CycleState;

    fn decode<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Option<T> {
        serde_json::from_value(v)
            .map_err(|e| readable(&e.to_string(), what))
            .ok()
    }
    let meta = |kind: &str, namespaced: bool| {
        let mut m = json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": kind,
            "metadata": {"name": "fuzz", "labels": {"feed-uid": "Deployment"}}});
        if namespaced {
            m["metadata"]["namespace"] = json!("clusternet-abcde");
        }
        m
    };
    let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": "u"},
        "spec": {"replicas": 3}, "status": {"replicas": 3}});

    if let Some(spec) = doc.get("subscription") {
        let mut v = meta("Subscription", true);
        v["spec"] = spec.clone();
        if let Some(status) = doc.get("status") {
            v["status"] = status.clone();
        }
        if let Some(mut sub) = decode::<Subscription>(v, "a Subscription") {
            sub.spec.apply_crd_defaults();
            let _ = hash_subscription_spec(&sub.spec);
            let _ = subscription_spec_go_json(&sub.spec);
            let _ = crate::hub::dashboard::rows::subscription_row(&sub);
            for s in &sub.spec.subscribers {
                if let Err(e) = Selector::from_label_selector(&s.cluster_affinity) {
                    readable(&e.to_string(), "a clusterAffinity");
                }
            }
            let orders = doc
                .get("inventory")
                .cloned()
                .and_then(|v| decode::<Vec<FeedOrder>>(v, "a FeedInventory"))
                .unwrap_or_else(|| {
                    sub.spec
                        .feeds
                        .iter()
                        .map(|feed| FeedOrder {
                            feed: feed.clone(),
                            desired_replicas: Some(7),
                            ..Default::default()
                        })
                        .collect()
                });
            let inventory = FeedInventory::new("fuzz", FeedInventorySpec { feeds: orders });
            let _ = binder::needs_scheduling(&sub, Some(&inventory));
            let _ = binder::feeds_changed(&sub, Some(&inventory));
            let clusters = clusters();
            let result = runtime().block_on(async {
                let mut offset = FilterOffset::default();
                let state = CycleState::new();
                schedule(
                    framework(),
                    &state,
                    &mut offset,
                    &sub,
                    &clusters,
                    Some(&inventory),
                )
                .await
            });
            match result {
                Ok(r) => {
                    let status = binder::binding_status(&sub, &r.suggested);
                    let _ = binder::scheduled_event_message(&sub, &status.binding_clusters);
                }
                Err(e) => readable(&e.to_string(), "a Subscription"),
            }
        }
    }

    let feed_uid = "feed-uid";
    let locs: Vec<Localization> = doc
        .get("localization")
        .and_then(|spec| {
            let mut v = meta("Localization", true);
            v["spec"] = spec.clone();
            decode(v, "a Localization")
        })
        .into_iter()
        .collect();
    let globs: Vec<Globalization> = doc
        .get("globalization")
        .and_then(|spec| {
            let mut v = meta("Globalization", false);
            v["spec"] = spec.clone();
            decode(v, "a Globalization")
        })
        .into_iter()
        .collect();
    if locs.is_empty() && globs.is_empty() {
        return;
    }
    let labels: Vec<BTreeMap<String, String>> = clusters()
        .into_iter()
        .filter_map(|c| c.metadata.labels)
        .collect();
    let feed = crate::apis::Feed::new("apps/v1", "Deployment", "default", "web");
    match try_applicable_overrides(
        &globs,
        &locs,
        "clusternet-abcde",
        feed_uid,
        "Deployment",
        Some(&feed),
        &labels,
    ) {
        Ok(rules) => {
            if let Err(e) = render_generic(&object, &rules) {
                readable(&e.to_string(), "an override");
            }
        }
        Err(e) => readable(&e.to_string(), "a Globalization"),
    }
}

/// [`api_specs`] on a JSON or YAML document.
pub fn api_validation(data: &[u8]) {
    let doc: Value = match serde_json::from_slice(data) {
        Ok(v) => v,
        Err(_) => match crate::kube_ext::yaml::from_slice(data) {
            Ok(v) => v,
            Err(_) => return,
        },
    };
    api_specs(&doc);
}

// ---------------------------------------------------------------------------------------------
// 7. The kubectl plugin's URL handling
// ---------------------------------------------------------------------------------------------

/// The plugin's path rewriting and kubeconfig generation. Fields: the host path prefix, the
/// request path and query, the session token, the parent server URL, the cluster ID.
pub fn plugin_urls(data: &[u8]) {
    use crate::plugin::args::{ConfigFlags, OwnFlags};
    use crate::plugin::kubeconfig::{
        ChildIdentity, child_kubeconfig, child_server, render, resolve_parent,
    };
    use crate::plugin::proxy::strip_session;
    use crate::plugin::rewrite::{clean, rewrite_path};
    let f = fields(data, 5);
    let (prefix, path, token, server, cluster_id) =
        (text(f[0]), text(f[1]), text(f[2]), text(f[3]), text(f[4]));

    let rewritten = rewrite_path(&prefix, &path);
    check_rewrite(&path, &rewritten);
    let _ = rewritten.parse::<http::Uri>();
    let cleaned = clean(&path);
    check!(cleaned.starts_with('/'), "clean({path:?}) = {cleaned:?}");
    check!(
        clean(&cleaned) == cleaned,
        "clean is not idempotent on {path:?}"
    );
    if let Some(rest) = strip_session(&path, &token) {
        check!(path.ends_with(rest), "strip_session invented {rest:?}");
    }
    let _ = child_server(&server, &cluster_id);

    let flags = ConfigFlags {
        server: Some(server),
        ..Default::default()
    };
    match resolve_parent(&kube::config::Kubeconfig::default(), &flags) {
        Ok(parent) => {
            let own = OwnFlags {
                cluster_id: Some(cluster_id.clone()),
                ..Default::default()
            };
            let child = child_kubeconfig(&parent, &cluster_id, &ChildIdentity::default(), &own);
            if let Err(e) = render(&child) {
                readable(&e.to_string(), "a child kubeconfig");
            }
            // what `kubectl clusternet` does with the server before it sends anything
            let config = runtime().block_on(kube::Config::from_custom_kubeconfig(
                parent.to_kubeconfig(),
                &kube::config::KubeConfigOptions::default(),
            ));
            if let Err(e) = config {
                readable(&e.to_string(), "a kubeconfig server");
            }
        }
        Err(e) => readable(&e.to_string(), "a kubeconfig server"),
    }
}

/// What a rewrite must keep: the query string byte for byte, and the path either unchanged or
/// rewritten into a clean one. (A rewritten path is usually under the shadow group, but `..`
/// segments can climb out of it, as they do through Go's `path.Join` upstream.)
pub(crate) fn check_rewrite(original: &str, rewritten: &str) {
    use crate::plugin::rewrite::clean;
    let query = |p: &str| p.split_once('?').map(|(_, q)| q.to_owned());
    check!(
        query(original) == query(rewritten),
        "{original:?} -> {rewritten:?} changed the query"
    );
    let path = rewritten.split_once('?').map_or(rewritten, |(p, _)| p);
    let original_path = original.split_once('?').map_or(original, |(p, _)| p);
    check!(
        path == original_path || clean(path) == path,
        "{original:?} -> {rewritten:?} is neither unchanged nor clean"
    );
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz_support;

    /// A fuzz target: its name in `fuzz/` (the corpus directories are named alike) and entry.
    type Target = (&'static str, fn(&[u8]));

    const TARGETS: [Target; 8] = [
        ("tunnel_frame", tunnel_frame),
        ("tunnel_session", tunnel_session),
        ("shadow_request", shadow_request),
        ("strategic_merge", strategic_merge),
        ("overrides", overrides),
        ("scheduler_divide", scheduler_divide),
        ("api_validation", api_validation),
        ("plugin_urls", plugin_urls),
    ];

    /// The seed corpus is what the long fuzz runs start from: every seed must reach its
    /// target's checks without tripping them, and every target must have seeds.
    #[test]
    fn fuzz_targets_accept_their_seed_corpus() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        for (name, target) in TARGETS {
            let dir = root.join(name);
            let seeds: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .filter_map(Result::ok)
                .map(|e| e.path())
                .collect();
            assert!(!seeds.is_empty(), "{name} has no seeds");
            for seed in seeds {
                let data = std::fs::read(&seed).expect("seed readable");
                target(&data);
            }
        }
    }

    /// Some Subscription, Localization and Globalization specs: fields users set, with values
    /// around the edges (negative and huge weights and replicas, empty selectors, unknown
    /// strategies), or any JSON where a spec should be.
    fn subscription_spec() -> impl Strategy<Value = Value> {
        let number = || fuzz_support::json_number();
        let label = || {
            (
                prop::sample::select(vec!["region", "tier", "bad key!", ""]),
                prop::sample::select(vec!["east", "west", "gold", "", "-x"]),
            )
        };
        let selector = (
            prop::collection::vec(label(), 0..3),
            prop::collection::vec(
                (
                    prop::sample::select(vec!["region", "tier", "Bad/"]),
                    prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist", "in"]),
                    prop::collection::vec(prop::sample::select(vec!["east", "gold", "x y"]), 0..3),
                ),
                0..3,
            ),
        )
            .prop_map(|(labels, exprs)| {
                let labels: serde_json::Map<String, Value> = labels
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect();
                let exprs: Vec<Value> = exprs
                    .into_iter()
                    .map(|(k, op, vs)| json!({"key": k, "operator": op, "values": vs}))
                    .collect();
                json!({"matchLabels": labels, "matchExpressions": exprs})
            });
        let subscriber =
            (selector, number(), prop::option::of(number())).prop_map(|(affinity, weight, min)| {
                let mut s = json!({"clusterAffinity": affinity, "weight": weight});
                if let Some(min) = min {
                    s["subGroupStrategy"] = json!({"minClusters": min});
                }
                s
            });
        let feed = prop::sample::select(vec![
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"}),
            json!({"apiVersion": "v1", "kind": "Namespace", "name": "web"}),
            json!({"apiVersion": "v1", "kind": "Service"}),
        ]);
        let spec = (
            prop::collection::vec(subscriber, 0..4),
            prop::collection::vec(feed, 0..3),
            prop::sample::select(vec!["Replication", "Dividing", "Other"]),
            prop::option::of((
                prop::sample::select(vec!["Static", "Dynamic", "Unknown"]),
                prop::option::of((
                    prop::sample::select(vec!["Spread", "Binpack"]),
                    number(),
                    number(),
                )),
            )),
            prop::option::of(any::<bool>()),
        )
            .prop_map(|(subscribers, feeds, strategy, dividing, by_group)| {
                let mut spec = json!({"subscribers": subscribers, "feeds": feeds,
                    "schedulingStrategy": strategy});
                if let Some((type_, dynamic)) = dividing {
                    spec["dividingScheduling"] = json!({"type": type_});
                    if let Some((strategy, min, max)) = dynamic {
                        spec["dividingScheduling"]["dynamicDividing"] =
                            json!({"strategy": strategy, "minClusters": min, "maxClusters": max});
                    }
                }
                if let Some(b) = by_group {
                    spec["schedulingBySubGroup"] = json!(b);
                }
                spec
            });
        prop_oneof![6 => spec, 1 => fuzz_support::json_value()]
    }

    fn override_spec() -> impl Strategy<Value = Value> {
        let rule = (
            prop::sample::select(vec!["JSONPatch", "MergePatch", "Helm", "FieldJSONPatch", "Nope"]),
            prop_oneof![
                fuzz_support::json_patch().prop_map(|v| v.to_string()),
                fuzz_support::json_object().prop_map(|v| v.to_string()),
                any::<String>(),
            ],
            prop::option::of(fuzz_support::json_pointer()),
        )
            .prop_map(|(type_, value, path)| {
                json!({"name": "r", "type": type_, "value": value, "fieldPath": path.unwrap_or_default(),
                    "fieldFormat": "JSON"})
            });
        let spec = (
            prop::collection::vec(rule, 0..3),
            fuzz_support::json_number(),
            prop::option::of(prop::sample::select(vec!["ApplyNow", "ApplyLater", "Sometimes"])),
            prop::option::of(Just(json!({"matchExpressions": [
                {"key": "region", "operator": "In", "values": ["east"]}]}))),
        )
            .prop_map(|(overrides, priority, policy, affinity)| {
                let mut spec = json!({"overrides": overrides, "priority": priority,
                    "feed": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"}});
                if let Some(p) = policy {
                    spec["overridePolicy"] = json!(p);
                }
                if let Some(a) = affinity {
                    spec["clusterAffinity"] = a;
                }
                spec
            });
        prop_oneof![6 => spec, 1 => fuzz_support::json_value()]
    }

    proptest! {
        // every case runs a scheduling cycle and an override rendering
        #![proptest_config(fuzz_support::config(128))]

        /// Random Subscription, Localization and Globalization specs (decoded from JSON as the
        /// informers decode them) never panic the decoding, the spec hash, the scheduler or the
        /// override selection and rendering; every refusal is readable.
        #[test]
        fn random_specs_never_panic_validation(
            sub in prop::option::of(subscription_spec()),
            status in prop::option::of(prop_oneof![
                Just(json!({"bindingClusters": ["clusternet-c-5/c-5"],
                    "replicas": {"apps/v1/Deployment/default/web": [2147483647]}})),
                fuzz_support::json_value(),
            ]),
            inventory in prop::option::of(prop::collection::vec(
                (fuzz_support::json_number(), prop::bool::ANY).prop_map(|(n, set)| {
                    let mut o = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                        "namespace": "default", "name": "web"});
                    if set {
                        o["desiredReplicas"] = n;
                    }
                    o
                }),
                0..3,
            )),
            loc in prop::option::of(override_spec()),
            glob in prop::option::of(override_spec()),
        ) {
            let mut doc = json!({});
            for (key, part) in [("subscription", sub), ("status", status), ("localization", loc),
                ("globalization", glob)] {
                if let Some(part) = part {
                    doc[key] = part;
                }
            }
            if let Some(inv) = inventory {
                doc["inventory"] = Value::Array(inv);
            }
            api_specs(&doc);
        }

        /// Any bytes into any fuzz target: the targets themselves never panic on input that
        /// does not even parse.
        #[test]
        fn random_bytes_never_panic_the_fuzz_targets(
            target in 0..TARGETS.len(),
            data in prop::collection::vec(any::<u8>(), 0..128),
        ) {
            (TARGETS[target].1)(&data);
        }
    }
}
