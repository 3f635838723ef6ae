//! Drift of an applied object in a child, decided from field ownership (#14): the object's
//! `managedFields` say which fields this deployer's field manager still owns. A field it applied
//! and no longer owns was changed (or removed) by someone else: the entry that owns it now names
//! the manager and the time. Whether that is drift or a hand-over is the retain rules' call: a
//! field taken by one of the retained managers (an autoscaler's `spec.replicas`) or on a retained
//! path is left to its new owner. Everything here is pure: the deployer feeds it the desired
//! object and the live one from its watch.
//!
//! Ownership rather than a value comparison, because the API server normalises what it stores
//! (quantities, defaults): a value that reads differently but was not touched is still ours.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::apis::known;
use crate::apis::{DriftField, RetainedField};

pub use crate::apis::known::DEFAULT_RETAIN_MANAGERS;

/// What to do about drift (annotation `apps.clusternet.io/drift-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Put the applied state back (upstream's Recovery).
    Repair,
    /// Leave the change, say what it was.
    Report,
    /// Neither: the object is only collected for status.
    Ignore,
}

impl Policy {
    /// The policy a Description's annotations ask for; `Err` names a value we do not know.
    pub fn of(annotations: &BTreeMap<String, String>) -> Result<Policy, String> {
        match annotations
            .get(known::DRIFT_POLICY_ANNOTATION)
            .map(|s| s.trim())
        {
            None | Some("") => Ok(Policy::Repair),
            Some(p) if p.eq_ignore_ascii_case("repair") => Ok(Policy::Repair),
            Some(p) if p.eq_ignore_ascii_case("report") => Ok(Policy::Report),
            Some(p) if p.eq_ignore_ascii_case("ignore") => Ok(Policy::Ignore),
            Some(p) => Err(format!(
                "annotation {}: unknown policy {p:?} (want Repair, Report or Ignore); repairing",
                known::DRIFT_POLICY_ANNOTATION
            )),
        }
    }
}

/// Which taken-over fields are left to their new owner.
#[derive(Debug, Clone, Default)]
pub struct Retain {
    pub managers: Vec<String>,
    /// Paths as users write them: `spec.replicas`, `/spec/replicas`,
    /// `spec.template.spec.containers[*].image`.
    pub paths: Vec<String>,
}

impl Retain {
    /// The configured managers plus the paths of a Description's `retain-fields` annotation.
    pub fn new(managers: &[String], annotations: &BTreeMap<String, String>) -> Retain {
        let paths = annotations
            .get(known::RETAIN_FIELDS_ANNOTATION)
            .map(|s| {
                s.split([',', '\n'])
                    .map(normalise_path)
                    .filter(|p| !p.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Retain {
            managers: managers.to_vec(),
            paths,
        }
    }

    fn keeps(&self, path: &str, owners: &[Owner<'_>]) -> Option<String> {
        if let Some(o) = owners
            .iter()
            .find(|o| self.managers.iter().any(|m| m == o.manager))
        {
            return Some(o.manager.to_string());
        }
        let bare = path.trim_start_matches('.');
        let wild = wildcard_keys(bare);
        self.paths
            .iter()
            .any(|p| {
                [bare, wild.as_str()]
                    .iter()
                    .any(|have| have == p || under(have, p))
            })
            .then(|| {
                owners
                    .first()
                    .map(|o| o.manager.to_string())
                    .unwrap_or_default()
            })
    }
}

fn under(have: &str, prefix: &str) -> bool {
    have.strip_prefix(prefix)
        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// `spec.containers[name=web].image` -> `spec.containers[*].image`.
fn wildcard_keys(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut inside = false;
    for c in path.chars() {
        match c {
            '[' => {
                inside = true;
                out.push_str("[*]");
            }
            ']' => inside = false,
            _ if inside => {}
            _ => out.push(c),
        }
    }
    out
}

fn normalise_path(p: &str) -> String {
    p.trim()
        .trim_start_matches(['.', '/'])
        .replace('/', ".")
        .trim_end_matches('.')
        .to_string()
}

/// One step of a field path, as managedFields spell them.
#[derive(Debug, Clone, PartialEq)]
pub enum Seg {
    /// `f:<name>`: a field of a map.
    Field(String),
    /// `k:{...}`: an element of a keyed list; the element as desired.
    Elem(Value),
    /// `v:<json>`: a scalar element of a set-like list.
    Scalar(Value),
}

/// `.spec.template.spec.containers[name=web].image`.
pub fn display(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            Seg::Elem(e) => s.push_str(&format!("[{}]", element_label(e))),
            Seg::Scalar(v) => s.push_str(&format!("[{}]", clip(&v.to_string(), 40))),
        }
    }
    s
}

fn element_label(e: &Value) -> String {
    for key in IDENTITY_KEYS {
        if let Some(v) = e.get(*key) {
            let v = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            return format!("{key}={v}");
        }
    }
    "?".into()
}

/// Keys that name list elements in the built-in types (containers, env, ports, volumes, ...).
const IDENTITY_KEYS: &[&str] = &[
    "name",
    "key",
    "mountPath",
    "devicePath",
    "containerPort",
    "port",
    "ip",
    "type",
];

/// One managedFields entry.
#[derive(Debug, Clone, Copy)]
struct Owner<'a> {
    manager: &'a str,
    operation: &'a str,
    subresource: &'a str,
    time: &'a str,
    fields: &'a Value,
}

fn owners_in(live: &Value) -> Vec<Owner<'_>> {
    live.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|e| {
                    // status writes say nothing about the fields we apply
                    e.get("subresource").and_then(Value::as_str) != Some("status")
                })
                .filter_map(|e| {
                    Some(Owner {
                        manager: e.get("manager").and_then(Value::as_str).unwrap_or(""),
                        operation: e.get("operation").and_then(Value::as_str).unwrap_or(""),
                        subresource: e.get("subresource").and_then(Value::as_str).unwrap_or(""),
                        time: e.get("time").and_then(Value::as_str).unwrap_or(""),
                        fields: e.get("fieldsV1")?,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A field set node that owns everything beneath it (a scalar or an atomic value).
fn is_leaf(node: &Value) -> bool {
    node.as_object().is_none_or(|o| o.is_empty())
}

/// A keyed element `k:{"name":"web"}` matches a desired element when the element agrees with it
/// on every key the element has (the server may have defaulted the others, e.g. a port's
/// `protocol`) and on at least one.
fn key_matches(key: &str, element: &Value) -> bool {
    let Some(json) = key.strip_prefix("k:") else {
        return false;
    };
    let Ok(Value::Object(k)) = serde_json::from_str::<Value>(json) else {
        return false;
    };
    let mut agreed = 0;
    for (name, v) in &k {
        match element.get(name) {
            Some(e) if e == v => agreed += 1,
            Some(_) => return false,
            None => {}
        }
    }
    agreed > 0
}

fn step<'a>(node: &'a Value, seg: &Seg) -> Option<&'a Value> {
    let map = node.as_object()?;
    match seg {
        Seg::Field(f) => map.get(&format!("f:{f}")),
        Seg::Elem(e) => map.iter().find(|(k, _)| key_matches(k, e)).map(|(_, v)| v),
        Seg::Scalar(v) => map.get(&format!("v:{v}")),
    }
}

/// Whether a field set owns `path` (or an atomic value above it).
fn owns(fields: &Value, path: &[Seg]) -> bool {
    let mut cur = fields;
    for (depth, seg) in path.iter().enumerate() {
        if depth > 0 && is_leaf(cur) {
            return true;
        }
        match step(cur, seg) {
            Some(next) => cur = next,
            None => return false,
        }
    }
    true
}

/// The paths of `desired` that none of `ours` owns.
fn unowned(desired: &Value, ours: &[&Value]) -> Vec<Vec<Seg>> {
    let mut out = Vec::new();
    let mut path = Vec::new();
    walk_map(desired, ours, &mut path, &mut out);
    out
}

fn skipped(path: &[Seg], field: &str) -> bool {
    match path {
        [] => matches!(field, "apiVersion" | "kind" | "status"),
        [Seg::Field(m)] if m == "metadata" => matches!(field, "name" | "namespace"),
        _ => false,
    }
}

fn walk_map(desired: &Value, nodes: &[&Value], path: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    let Some(map) = desired.as_object() else {
        return;
    };
    for (k, v) in map {
        if v.is_null() || skipped(path, k) {
            continue;
        }
        let seg = Seg::Field(k.clone());
        let below: Vec<&Value> = nodes.iter().filter_map(|n| step(n, &seg)).collect();
        path.push(seg);
        if below.is_empty() {
            out.push(path.clone());
        } else if !below.iter().any(|n| is_leaf(n)) {
            walk_value(v, &below, path, out);
        }
        path.pop();
    }
}

fn walk_value(v: &Value, nodes: &[&Value], path: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    match v {
        Value::Object(m) if !m.is_empty() => walk_map(v, nodes, path, out),
        Value::Array(items) => {
            for e in items {
                let seg = if e.is_object() {
                    Seg::Elem(e.clone())
                } else {
                    Seg::Scalar(e.clone())
                };
                let below: Vec<&Value> = nodes.iter().filter_map(|n| step(n, &seg)).collect();
                path.push(seg);
                if below.is_empty() {
                    out.push(path.clone());
                } else if e.is_object() && !below.iter().any(|n| is_leaf(n)) {
                    walk_map(e, &below, path, out);
                }
                path.pop();
            }
        }
        _ => {}
    }
}

/// The value at `path` in an object (desired or live), for the report.
fn value_at<'a>(obj: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path {
        cur = match seg {
            Seg::Field(f) => cur.get(f)?,
            Seg::Elem(e) => {
                let items = cur.as_array()?;
                if let Some(found) = items.iter().find(|i| *i == e) {
                    found
                } else {
                    let key = IDENTITY_KEYS.iter().find(|k| e.get(**k).is_some())?;
                    items.iter().find(|i| i.get(*key) == e.get(*key))?
                }
            }
            Seg::Scalar(v) => cur.as_array()?.iter().find(|i| *i == v)?,
        };
    }
    Some(cur)
}

fn summary(v: Option<&Value>) -> String {
    match v {
        None => String::new(),
        Some(Value::String(s)) => clip(s, 120),
        Some(other) => clip(&other.to_string(), 120),
    }
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push_str("...");
    out
}

/// What the live object says about the fields we applied.
#[derive(Debug, Default, PartialEq)]
pub struct Check {
    /// Fields changed or removed behind our back (not retained).
    pub drifted: Vec<DriftField>,
    /// Fields left to another owner.
    pub retained: Vec<RetainedField>,
    /// The retained paths: what an apply must leave out so as not to take them back.
    pub leave_out: Vec<Vec<Seg>>,
}

/// Compares the `desired` object (as prepared for the child) with the `live` one (its
/// managedFields) for what `manager` applied. `extra_retained` are paths retained by the child's
/// own situation (e.g. `spec.replicas` of an object an HPA targets).
pub fn check(
    desired: &Value,
    live: &Value,
    manager: &str,
    retain: &Retain,
    extra_retained: &[&str],
) -> Check {
    let owners = owners_in(live);
    let ours: Vec<&Value> = owners
        .iter()
        .filter(|o| o.manager == manager)
        .map(|o| o.fields)
        .collect();
    let mut out = Check::default();
    for path in unowned(desired, &ours) {
        let shown = display(&path);
        let holders: Vec<Owner<'_>> = owners
            .iter()
            .filter(|o| o.manager != manager && owns(o.fields, &path))
            .copied()
            .collect();
        let extra = extra_retained
            .iter()
            .any(|p| shown.trim_start_matches('.') == *p)
            || autoscaled(&shown, &holders);
        let kept = retain.keeps(&shown, &holders).or_else(|| {
            extra.then(|| {
                holders
                    .first()
                    .map(|o| o.manager.to_string())
                    .unwrap_or_default()
            })
        });
        if let Some(manager) = kept {
            out.retained.push(RetainedField {
                path: shown,
                manager,
            });
            out.leave_out.push(path);
            continue;
        }
        // the newest change among the owners is the one to name
        let by = holders.iter().max_by_key(|o| o.time);
        out.drifted.push(DriftField {
            path: shown,
            desired: summary(value_at(desired, &path)),
            live: summary(value_at(live, &path)),
            manager: by.map(|o| o.manager.to_string()).unwrap_or_default(),
            operation: by.map(|o| o.operation.to_string()).unwrap_or_default(),
            changed_at: by.map(|o| o.time.to_string()).unwrap_or_default(),
        });
    }
    out
}

/// `spec.replicas` set through the scale subresource (how every autoscaler and `kubectl scale`
/// write it) or claimed with server-side apply by another manager is that manager's to keep,
/// whatever its name: replicas are the field the child's own scaling owns.
fn autoscaled(path: &str, holders: &[Owner<'_>]) -> bool {
    path == ".spec.replicas"
        && holders
            .iter()
            .any(|o| o.subresource == "scale" || o.operation == "Apply")
}

/// Removes `path` from an object about to be applied (a retained field).
pub fn leave_out(obj: &mut Value, path: &[Seg]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for seg in parents {
        let next = match seg {
            Seg::Field(f) => cur.get_mut(f),
            Seg::Elem(e) => cur
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| *i == e)),
            Seg::Scalar(_) => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        Seg::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        Seg::Elem(e) | Seg::Scalar(e) => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| i != e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const US: &str = "clusternet/agent/deployer";

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "demo", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80}],
                 "args": ["-a", "-b"]}]}}}})
    }

    fn ours() -> Value {
        json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"web\"}": {".": {}, "f:name": {}, "f:image": {}, "f:args": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}}}})
    }

    fn live(entries: Value) -> Value {
        let mut l = deployment();
        l["metadata"]["managedFields"] = entries;
        l
    }

    fn entry(manager: &str, op: &str, time: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": op, "time": time, "fieldsV1": fields})
    }

    #[test]
    fn everything_still_ours_is_in_sync() {
        let l = live(json!([
            entry(US, "Apply", "t0", ours()),
            entry(
                "kube-controller-manager",
                "Update",
                "t1",
                json!({"f:status": {"f:replicas": {}}})
            )
        ]));
        let c = check(&deployment(), &l, US, &Retain::default(), &[]);
        assert_eq!(c, Check::default());
    }

    #[test]
    fn a_field_another_manager_took_is_drift_naming_it() {
        let mut mine = ours();
        mine["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"]
            .as_object_mut()
            .expect("a node")
            .remove("f:image");
        let mut l = live(json!([
            entry(US, "Apply", "t0", mine),
            entry(
                "kubectl-edit",
                "Update",
                "2026-12-01T10:00:00Z",
                json!({"f:spec": {"f:template": {"f:spec": {
                "f:containers": {"k:{\"name\":\"web\"}": {"f:image": {}}}}}}})
            )
        ]));
        l["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:evil");
        let c = check(&deployment(), &l, US, &Retain::default(), &[]);
        assert_eq!(c.drifted.len(), 1, "{c:?}");
        let d = &c.drifted[0];
        assert_eq!(d.path, ".spec.template.spec.containers[name=web].image");
        assert_eq!(
            (d.desired.as_str(), d.live.as_str()),
            ("nginx:1", "nginx:evil")
        );
        assert_eq!(
            (d.manager.as_str(), d.operation.as_str()),
            ("kubectl-edit", "Update")
        );
        assert_eq!(d.changed_at, "2026-12-01T10:00:00Z");
    }

    #[test]
    fn a_removed_field_is_drift_with_no_manager() {
        let mut mine = ours();
        mine["f:metadata"]["f:labels"]
            .as_object_mut()
            .expect("labels")
            .remove("f:app");
        let mut l = live(json!([entry(US, "Apply", "t0", mine)]));
        l["metadata"]["labels"] = json!({});
        let c = check(&deployment(), &l, US, &Retain::default(), &[]);
        assert_eq!(c.drifted.len(), 1);
        assert_eq!(c.drifted[0].path, ".metadata.labels.app");
        assert_eq!(c.drifted[0].live, "");
        assert_eq!(c.drifted[0].manager, "");
    }

    #[test]
    fn an_autoscalers_replicas_are_retained_and_left_out_of_the_apply() {
        let mut mine = ours();
        mine["f:spec"]
            .as_object_mut()
            .expect("spec")
            .remove("f:replicas");
        let l = live(json!([
            entry(US, "Apply", "t0", mine),
            entry(
                "kube-controller-manager",
                "Update",
                "t1",
                json!({"f:spec": {"f:replicas": {}}})
            )
        ]));
        let managers: Vec<String> = DEFAULT_RETAIN_MANAGERS
            .iter()
            .map(|s| s.to_string())
            .collect();
        let retain = Retain::new(&managers, &BTreeMap::new());
        let c = check(&deployment(), &l, US, &retain, &[]);
        assert!(c.drifted.is_empty(), "{c:?}");
        assert_eq!(
            c.retained,
            vec![RetainedField {
                path: ".spec.replicas".into(),
                manager: "kube-controller-manager".into()
            }]
        );
        let mut d = deployment();
        for p in &c.leave_out {
            leave_out(&mut d, p);
        }
        assert!(d["spec"].get("replicas").is_none());
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1"
        );
        // the same taken by someone else is drift, unless the Subscription retains the path
        let l = live(json!([
            entry(US, "Apply", "t0", {
                let mut m = ours();
                m["f:spec"]
                    .as_object_mut()
                    .expect("spec")
                    .remove("f:replicas");
                m
            }),
            entry(
                "kubectl",
                "Update",
                "t1",
                json!({"f:spec": {"f:replicas": {}}})
            )
        ]));
        assert_eq!(check(&deployment(), &l, US, &retain, &[]).drifted.len(), 1);
        let by_path = Retain::new(
            &managers,
            &BTreeMap::from([(
                known::RETAIN_FIELDS_ANNOTATION.to_string(),
                " /spec/replicas , metadata.annotations.x".to_string(),
            )]),
        );
        let c = check(&deployment(), &l, US, &by_path, &[]);
        assert!(c.drifted.is_empty());
        assert_eq!(c.retained[0].manager, "kubectl");
        // and an HPA in the child targeting the object retains its replicas whoever wrote them
        assert!(
            check(&deployment(), &l, US, &retain, &["spec.replicas"])
                .drifted
                .is_empty()
        );
        // replicas written through the scale subresource (kubectl scale, any autoscaler), or
        // claimed by another manager's server-side apply, are that manager's
        for (op, sub) in [("Update", "scale"), ("Apply", "")] {
            let mut theirs = entry(
                "my-autoscaler",
                op,
                "t1",
                json!({"f:spec": {"f:replicas": {}}}),
            );
            theirs["subresource"] = json!(sub);
            let mut mine = ours();
            mine["f:spec"]
                .as_object_mut()
                .expect("spec")
                .remove("f:replicas");
            let l = live(json!([entry(US, "Apply", "t0", mine), theirs]));
            let c = check(&deployment(), &l, US, &retain, &[]);
            assert!(c.drifted.is_empty(), "{op} {sub}: {c:?}");
            assert_eq!(c.retained[0].manager, "my-autoscaler");
        }
    }

    #[test]
    fn keyed_elements_match_despite_defaulted_keys_and_atomic_lists_are_whole() {
        // the port key carries a defaulted protocol; args is atomic: both are ours
        let l = live(json!([entry(US, "Apply", "t0", ours())]));
        assert!(
            check(&deployment(), &l, US, &Retain::default(), &[])
                .drifted
                .is_empty()
        );
        // a whole container missing from what we own is one drift at the element
        let mut mine = ours();
        mine["f:spec"]["f:template"]["f:spec"]["f:containers"] = json!({".": {}});
        let l = live(json!([entry(US, "Apply", "t0", mine)]));
        let c = check(&deployment(), &l, US, &Retain::default(), &[]);
        assert_eq!(
            c.drifted
                .iter()
                .map(|d| d.path.as_str())
                .collect::<Vec<_>>(),
            [".spec.template.spec.containers[name=web]"]
        );
    }

    #[test]
    fn retained_paths_take_wildcards_and_prefixes() {
        let r = Retain::new(
            &[],
            &BTreeMap::from([(
                known::RETAIN_FIELDS_ANNOTATION.to_string(),
                "spec.template.spec.containers[*].image,metadata.annotations".to_string(),
            )]),
        );
        assert!(
            r.keeps(".spec.template.spec.containers[name=web].image", &[])
                .is_some()
        );
        assert!(r.keeps(".metadata.annotations.team", &[]).is_some());
        assert!(r.keeps(".metadata.annotationsx", &[]).is_none());
        assert!(r.keeps(".spec.replicas", &[]).is_none());
    }

    #[test]
    fn the_policy_comes_from_the_annotation() {
        let of = |v: &str| {
            Policy::of(&BTreeMap::from([(
                known::DRIFT_POLICY_ANNOTATION.to_string(),
                v.to_string(),
            )]))
        };
        assert_eq!(Policy::of(&BTreeMap::new()), Ok(Policy::Repair));
        assert_eq!(of("Report"), Ok(Policy::Report));
        assert_eq!(of("ignore"), Ok(Policy::Ignore));
        assert!(of("Sometimes").expect_err("unknown").contains("Sometimes"));
    }
}
