//! §3.1 / §3.6 which parent resources the shadow API serves and how they appear in its discovery
//! document. Port of upstream `pkg/hub/apiserver/shadow/{apiserver.go,utils.go,priority.go}`
//! (`InstallShadowAPIGroups`, `normalizeAPIGroupResources`, `canBeAddedToStorage`), of the CRD
//! handler's `addStorage` / `versionDiscoveryHandler.updateCRD`, of apimachinery's
//! `version.CompareKubeAwareVersionStrings` and of apiserver's `discovery.StorageVersionHash`.
//!
//! Built-ins and CRDs land in one flattened group version, so name collisions are settled here
//! (one [`PriorityTracker`] shared by install-time selection and the CRD handler, as upstream).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::{Value, json};

use super::*;

/// One resource of one group version, as listed by the parent's discovery (`APIResource`;
/// deserializable from an `APIResourceList` entry). `name` may be `plural/subresource`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiscoveredResource {
    pub name: String,
    pub singular_name: String,
    pub namespaced: bool,
    pub kind: String,
    pub verbs: Vec<String>,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub storage_version_hash: String,
}

/// One version of a discovered group with its resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveredVersion {
    pub version: String,
    pub resources: Vec<DiscoveredResource>,
}

/// One API group of the parent (`""` for core) with its preferred version (`""` if none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveredGroup {
    pub name: String,
    pub preferred_version: String,
    pub versions: Vec<DiscoveredVersion>,
}

/// Where a served resource comes from; decides its routes and discovery shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceOrigin {
    /// Found by discovery at install time (§3.1).
    BuiltIn,
    /// Backed by a CRD's storage version (§3.6), with its subresources.
    Crd { has_status: bool, has_scale: bool },
}

/// A resource served under `shadow/v1alpha1`, keeping the original group, version and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowResource {
    pub group: String,
    pub version: String,
    /// Plural, possibly `plural/subresource` for built-ins (e.g. `deployments/scale`).
    pub name: String,
    pub singular_name: String,
    pub namespaced: bool,
    pub kind: String,
    pub verbs: Vec<String>,
    pub storage_version_hash: String,
    pub origin: ResourceOrigin,
}

impl ShadowResource {
    /// The plural without subresource.
    pub fn resource(&self) -> &str {
        base_resource(&self.name)
    }

    /// The subresource part of `name`, if any.
    pub fn subresource(&self) -> Option<&str> {
        self.name.split_once('/').map(|(_, sub)| sub)
    }

    /// Original `apiVersion` (`v1`, `apps/v1`, ...).
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }

    /// Kind of list responses.
    pub fn list_kind(&self) -> String {
        list_kind(&self.name, &self.kind)
    }

    /// Manifest name for an object of this resource (namespace ignored when cluster-scoped).
    pub fn manifest_name(&self, namespace: &str, name: &str) -> String {
        manifest_name(&self.name, self.namespaced.then_some(namespace), name)
    }

    /// Deprecated Manifest name for an object of this resource.
    pub fn legacy_manifest_name(&self, namespace: &str, name: &str) -> String {
        legacy_manifest_name(&self.name, self.namespaced.then_some(namespace), name)
    }

    /// Discovery entries (`APIResource` JSON) under `shadow/v1alpha1`: one for a built-in (with
    /// its original group/version), one or two for a CRD (no group/version, plus
    /// `<plural>/scale` as `autoscaling/v1` Scale when the storage version has a scale
    /// subresource). The category is always `clusternet.shadow`.
    pub fn discovery_entries(&self) -> Vec<Value> {
        match self.origin {
            ResourceOrigin::BuiltIn => vec![api_resource_json(
                &self.name,
                &self.singular_name,
                self.namespaced,
                &self.group,
                &self.version,
                &self.kind,
                &self.verbs,
                &self.storage_version_hash,
            )],
            ResourceOrigin::Crd { has_scale, .. } => {
                let mut entries = vec![api_resource_json(
                    &self.name,
                    &self.singular_name,
                    self.namespaced,
                    "",
                    "",
                    &self.kind,
                    &self.verbs,
                    &self.storage_version_hash,
                )];
                if has_scale {
                    let verbs: Vec<String> =
                        CRD_SCALE_VERBS.iter().map(|v| v.to_string()).collect();
                    entries.push(api_resource_json(
                        &format!("{}/scale", self.name),
                        &self.singular_name,
                        self.namespaced,
                        "autoscaling",
                        "v1",
                        SCALE_KIND,
                        &verbs,
                        "",
                    ));
                }
                entries
            }
        }
    }
}

/// `metav1.APIResource` JSON with Go's `omitempty` rules (group, version, storageVersionHash
/// omitted when empty; singularName, namespaced, kind, verbs always present). Unlike upstream it
/// advertises no short names: the originals already own them, and kubectl, seeing `deploy` twice,
/// warned on every `kubectl clusternet get deploy` that it "could also match lower priority
/// resource deployments.shadow". The plugin resolves `deploy` against the original group and
/// rewrites the request path, so the shadow copies never needed them.
#[allow(clippy::too_many_arguments)]
fn api_resource_json(
    name: &str,
    singular_name: &str,
    namespaced: bool,
    group: &str,
    version: &str,
    kind: &str,
    verbs: &[String],
    storage_version_hash: &str,
) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), name.into());
    m.insert("singularName".into(), singular_name.into());
    m.insert("namespaced".into(), namespaced.into());
    if !group.is_empty() {
        m.insert("group".into(), group.into());
    }
    if !version.is_empty() {
        m.insert("version".into(), version.into());
    }
    m.insert("kind".into(), kind.into());
    m.insert("verbs".into(), json!(verbs));
    m.insert("categories".into(), json!([SHADOW_CATEGORY]));
    if !storage_version_hash.is_empty() {
        m.insert("storageVersionHash".into(), storage_version_hash.into());
    }
    Value::Object(m)
}

/// The `APIResourceList` served at `GET /apis/shadow/v1alpha1`. Entries appear in the order
/// given; upstream lists built-ins first, then CRDs in the order they were added.
pub fn discovery_resource_list(resources: &[ShadowResource]) -> Value {
    let entries: Vec<Value> = resources
        .iter()
        .flat_map(ShadowResource::discovery_entries)
        .collect();
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": SHADOW_GROUP_VERSION,
        "resources": entries,
    })
}

/// The `APIGroup` served at `GET /apis/shadow`.
pub fn shadow_api_group() -> Value {
    let gv = json!({ "groupVersion": SHADOW_GROUP_VERSION, "version": SHADOW_VERSION });
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": SHADOW_GROUP,
        "versions": [gv.clone()],
        "preferredVersion": gv,
    })
}

/// Kubernetes version priority (apimachinery `version.CompareKubeAwareVersionStrings`):
/// `Greater` means `a` has the higher priority. GA > beta > alpha, then higher major, then
/// higher minor (`v2 > v1 > v1beta2 > v1beta1 > v1alpha1`); strings not shaped like
/// `v<N>[(alpha|beta)<M>]` rank below all others and among themselves in reverse
/// lexicographic order (so ascending lexicographic when sorted by priority).
pub fn compare_kube_versions(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    match (parse_kube_version(a), parse_kube_version(b)) {
        (None, None) => b.cmp(a),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some((a_major, a_type, a_minor)), Some((b_major, b_type, b_minor))) => a_type
            .cmp(&b_type)
            .then(a_major.cmp(&b_major))
            .then(a_minor.cmp(&b_minor)),
    }
}

/// `(major, type, minor)` with type alpha = 0, beta = 1, GA = 2 (GA minor is 0).
fn parse_kube_version(v: &str) -> Option<(i64, u8, i64)> {
    let rest = v.strip_prefix('v')?;
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (major, tail) = rest.split_at(digits_end);
    if major.is_empty() {
        return None;
    }
    // Go's Atoi fails on int64 overflow, which makes the string "not kube-like".
    let major: i64 = major.parse().ok()?;
    if tail.is_empty() {
        return Some((major, 2, 0));
    }
    let (kind, minor) = if let Some(m) = tail.strip_prefix("alpha") {
        (0, m)
    } else if let Some(m) = tail.strip_prefix("beta") {
        (1, m)
    } else {
        return None;
    };
    if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((major, kind, minor.parse().ok()?))
}

/// Groups never mirrored: clusternet's own, the shadow group itself (no nesting), and the
/// metrics groups whose `pods`/`nodes` would shadow the core resources.
pub fn is_skipped_group(group: &str) -> bool {
    group.ends_with(CLUSTERNET_GROUP_SUFFIX)
        || group == SHADOW_GROUP
        || group == "metrics.k8s.io"
        || group == "custom.metrics.k8s.io"
}

/// Name of the APIService registering a group version (`v1.` for core, `v1.apps`).
pub fn apiservice_name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// Decides name collisions in the single flattened shadow group version (upstream
/// `canBeAddedToStorage` and its process-wide `resourcePriorityMap`). One tracker must be shared
/// by the install-time selection and the CRD handler, as upstream shares the map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriorityTracker {
    /// resource name -> (APIService name, groupPriorityMinimum) of the last admitted holder.
    winners: BTreeMap<String, (String, i32)>,
}

impl PriorityTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `group/version` `resource` may (re)place the storage for its name.
    ///
    /// `apiservice_priority` is the `groupPriorityMinimum` of APIService `<version>.<group>`, or
    /// `None` when it cannot be read (upstream treats every lister error, not only NotFound,
    /// as "just add it"). `apiregistration.k8s.io/v1` `apiservices[/status]` are
    /// never admitted. A missing APIService admits without being recorded; otherwise a
    /// recorded holder with a strictly higher priority wins, else the newcomer is recorded and
    /// admitted (so on equal priority the later one replaces the earlier one).
    pub fn admit(
        &mut self,
        group: &str,
        version: &str,
        resource: &str,
        apiservice_priority: Option<i32>,
    ) -> bool {
        if group == "apiregistration.k8s.io"
            && version == "v1"
            && (resource == "apiservices" || resource == "apiservices/status")
        {
            return false;
        }
        let Some(priority) = apiservice_priority else {
            return true;
        };
        if let Some((_, held)) = self.winners.get(resource)
            && *held > priority
        {
            return false;
        }
        self.winners.insert(
            resource.to_string(),
            (apiservice_name(group, version), priority),
        );
        true
    }

    /// The recorded holder (APIService name, priority) of a resource name.
    pub fn holder(&self, resource: &str) -> Option<(&str, i32)> {
        self.winners.get(resource).map(|(n, p)| (n.as_str(), *p))
    }
}

/// One version per resource name of a group (upstream `normalizeAPIGroupResources`): the
/// preferred version's, else the highest by [`compare_kube_versions`]. Output is sorted by that
/// version order, then by name, and carries the group and chosen version on every resource.
pub fn normalize_group_resources(group: &DiscoveredGroup) -> Vec<ShadowResource> {
    let preferred = group.preferred_version.as_str();
    let mut all: Vec<(&str, &DiscoveredResource)> = group
        .versions
        .iter()
        .flat_map(|v| v.resources.iter().map(move |r| (v.version.as_str(), r)))
        .collect();
    all.sort_by(|(va, ra), (vb, rb)| {
        if va == vb {
            return ra.name.cmp(&rb.name);
        }
        if *va == preferred {
            return Ordering::Less;
        }
        if *vb == preferred {
            return Ordering::Greater;
        }
        // Tie-breaks keep the order total (e.g. `v1` vs `v01`), which Rust's sort requires.
        compare_kube_versions(vb, va)
            .then_with(|| va.cmp(vb))
            .then_with(|| ra.name.cmp(&rb.name))
    });
    let mut seen = BTreeSet::new();
    all.into_iter()
        .filter(|(_, r)| seen.insert(r.name.as_str()))
        .map(|(version, r)| ShadowResource {
            group: group.name.clone(),
            version: version.to_string(),
            name: r.name.clone(),
            singular_name: r.singular_name.clone(),
            namespaced: r.namespaced,
            kind: r.kind.clone(),
            verbs: r.verbs.clone(),
            storage_version_hash: r.storage_version_hash.clone(),
            origin: ResourceOrigin::BuiltIn,
        })
        .collect()
}

/// The built-in resources served by the shadow API (§3.1), in discovery order, one per name.
///
/// Groups are walked in the given (discovery) order; skipped are [`is_skipped_group`] groups and
/// every group in `crd_groups` (the CRD handler serves those). Each group is reduced with
/// [`normalize_group_resources`], then each candidate goes through `tracker`
/// ([`PriorityTracker::admit`], with `apiservice_priority(group, version)`). An admitted
/// resource replaces an earlier one of the same name in place; upstream also keeps the loser's
/// discovery entry, which would advertise a group/version that is not served, so it is dropped.
pub fn select_shadow_resources(
    groups: &[DiscoveredGroup],
    crd_groups: &BTreeSet<String>,
    tracker: &mut PriorityTracker,
    apiservice_priority: impl Fn(&str, &str) -> Option<i32>,
) -> Vec<ShadowResource> {
    let mut selected: Vec<ShadowResource> = Vec::new();
    for group in groups {
        if is_skipped_group(&group.name) || crd_groups.contains(&group.name) {
            continue;
        }
        for resource in normalize_group_resources(group) {
            let priority = apiservice_priority(&resource.group, &resource.version);
            if !tracker.admit(&resource.group, &resource.version, &resource.name, priority) {
                continue;
            }
            match selected.iter_mut().find(|r| r.name == resource.name) {
                Some(slot) => *slot = resource,
                None => selected.push(resource),
            }
        }
    }
    selected
}

/// Groups owning at least one CRD (`spec.group` of each CRD object).
pub fn crd_groups<'a>(crds: impl IntoIterator<Item = &'a Value>) -> BTreeSet<String> {
    crds.into_iter()
        .filter_map(|crd| get_str(crd, &["spec", "group"]))
        .map(str::to_string)
        .collect()
}

/// The shadow resource of a CRD (§3.6), before the priority check: `None` for `.clusternet.io`
/// groups, CRDs being deleted, CRDs without a storage version or whose storage version is not
/// served. Version = storage version; plural/kind/singular/short names/scope from the CRD;
/// status/scale flags from the storage version's subresources.
pub fn crd_shadow_resource(crd: &Value) -> Option<ShadowResource> {
    let group = get_str(crd, &["spec", "group"]).unwrap_or_default();
    if group.ends_with(CLUSTERNET_GROUP_SUFFIX) {
        return None;
    }
    if get_path(crd, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_null()) {
        return None;
    }
    let versions = get_path(crd, &["spec", "versions"])?.as_array()?;
    let flag = |v: &Value, key: &str| v.get(key).and_then(Value::as_bool).unwrap_or(false);
    let storage = versions.iter().find(|v| flag(v, "storage"))?;
    let storage_version = storage.get("name").and_then(Value::as_str)?;
    // Upstream HasServedCRDVersion: some served version carries the storage version's name.
    let served = versions.iter().any(|v| {
        flag(v, "served") && v.get("name").and_then(Value::as_str) == Some(storage_version)
    });
    if !served {
        return None;
    }
    let has_sub =
        |sub: &str| get_path(storage, &["subresources", sub]).is_some_and(|s| !s.is_null());
    let names = get_path(crd, &["spec", "names"]);
    let name_field = |key: &str| {
        names
            .and_then(|n| n.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let kind = name_field("kind");
    let plural = name_field("plural");
    if plural.is_empty() || kind.is_empty() {
        return None;
    }
    Some(ShadowResource {
        group: group.to_string(),
        version: storage_version.to_string(),
        singular_name: name_field("singular"),
        namespaced: get_str(crd, &["spec", "scope"]) == Some("Namespaced"),
        verbs: CRD_VERBS.iter().map(|v| v.to_string()).collect(),
        storage_version_hash: storage_version_hash(group, storage_version, &kind),
        name: plural,
        kind,
        origin: ResourceOrigin::Crd {
            has_status: has_sub("status"),
            has_scale: has_sub("scale"),
        },
    })
}

/// [`crd_shadow_resource`] followed by the shared priority check (upstream `addStorage`).
pub fn admit_crd(
    crd: &Value,
    tracker: &mut PriorityTracker,
    apiservice_priority: impl Fn(&str, &str) -> Option<i32>,
) -> Option<ShadowResource> {
    let resource = crd_shadow_resource(crd)?;
    let priority = apiservice_priority(&resource.group, &resource.version);
    tracker
        .admit(&resource.group, &resource.version, &resource.name, priority)
        .then_some(resource)
}

/// Whether a CRD update must remove and re-add its routes and discovery (upstream
/// `updateCustomResourceDefinition`): not for a CRD being deleted (the delete event handles
/// it), not when the spec is unchanged, not for `.clusternet.io` groups.
pub fn crd_update_needs_resync(old: &Value, new: &Value) -> bool {
    if get_path(new, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_null()) {
        return false;
    }
    if old.get("spec") == new.get("spec") {
        return false;
    }
    !get_str(new, &["spec", "group"])
        .unwrap_or_default()
        .ends_with(CLUSTERNET_GROUP_SUFFIX)
}

/// apiserver `discovery.StorageVersionHash`: base64 of the first 8 bytes of
/// SHA-256(`group/version/kind`); `""` for an empty kind.
pub fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    if kind.is_empty() {
        return String::new();
    }
    let digest = sha256(format!("{group}/{version}/{kind}").as_bytes());
    base64_std(&digest[..8])
}

fn base64_std(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests;
