//! The Subscription spec hash stored in `Subscription.status.specHash`, bit for bit as Clusternet's
//! Go `utils.HashSubscriptionSpec` computes it (spec/apis.md "Subscription spec hash (exact)").
//!
//! The scheduler compares it with a fresh hash to decide whether a Subscription must be rescheduled,
//! so a Rust scheduler and a Go controller (or the reverse) agree only if every step matches:
//!
//! 1. `encoding/json` of `SubscriptionSpec`: Go struct field order, `omitempty`, sorted map keys,
//!    Go's string escaping including HTML escaping of `<`, `>`, `&`, compact, no trailing newline.
//!    Written out by hand below, because k8s-openapi serializes core types (Toleration, ...) in
//!    alphabetical rather than Go field order, and serde_json escapes differently.
//! 2. The `go-spew` rendering of the resulting `[]byte`: `([]uint8)[` + decimal bytes separated by
//!    single spaces + `]`.
//! 3. FNV-1a 32 of that text, widened to `u64`.
//!
//! Go cannot tell a nil list from an empty one once it is a Rust `Vec`; required lists
//! (`subscribers`, `feeds`) are always present after the apiserver's validation, so they are written
//! as `[]` when empty (Go would write `null` only for a spec that never went through the apiserver).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::apis::apps::{
    DividingScheduling, DynamicDividing, Feed, SubGroupStrategy, Subscriber, SubscriptionSpec,
};

const FNV32_OFFSET_BASIS: u32 = 0x811c_9dc5;
const FNV32_PRIME: u32 = 0x0100_0193;

/// `status.specHash` of a Subscription with this spec.
///
/// Hash the spec as read back from the apiserver (after CRD defaulting); for an in-memory spec call
/// [`SubscriptionSpec::apply_crd_defaults`] first.
pub fn hash_subscription_spec(spec: &SubscriptionSpec) -> u64 {
    let json = subscription_spec_go_json(spec);
    u64::from(fnv1a_32(spew_bytes(json.as_bytes()).as_bytes()))
}

/// FNV-1a, 32 bits.
pub fn fnv1a_32(data: &[u8]) -> u32 {
    data.iter().fold(FNV32_OFFSET_BASIS, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(FNV32_PRIME)
    })
}

/// go-spew's `%#v` rendering of a `[]byte`: `([]uint8)[1 2 3]`.
pub fn spew_bytes(data: &[u8]) -> String {
    let mut out = String::with_capacity(11 + data.len() * 4);
    out.push_str("([]uint8)[");
    for (i, byte) in data.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        // Writing into a String cannot fail.
        let _ = write!(out, "{byte}");
    }
    out.push(']');
    out
}

/// `encoding/json.Marshal(spec)` exactly as Go produces it.
pub fn subscription_spec_go_json(spec: &SubscriptionSpec) -> String {
    let mut out = String::with_capacity(256);
    let mut o = Obj::open(&mut out);
    if !spec.scheduler_name.is_empty() {
        go_string(o.key("schedulerName"), &spec.scheduler_name);
    }
    if let Some(b) = spec.scheduling_by_sub_group {
        go_bool(o.key("schedulingBySubGroup"), b);
    }
    if let Some(strategy) = spec.scheduling_strategy {
        go_string(o.key("schedulingStrategy"), strategy.as_str());
    }
    if let Some(dividing) = &spec.dividing_scheduling {
        dividing_scheduling(o.key("dividingScheduling"), dividing);
    }
    if let Some(priority) = spec.priority {
        go_int(o.key("priority"), priority.into());
    }
    if let Some(policy) = spec.preemption_policy {
        go_string(o.key("preemptionPolicy"), policy.as_str());
    }
    go_list(o.key("subscribers"), &spec.subscribers, subscriber);
    if !spec.cluster_tolerations.is_empty() {
        go_list(
            o.key("clusterTolerations"),
            &spec.cluster_tolerations,
            toleration,
        );
    }
    go_list(o.key("feeds"), &spec.feeds, feed);
    o.close();
    out
}

fn dividing_scheduling(out: &mut String, d: &DividingScheduling) {
    let mut o = Obj::open(out);
    go_string(o.key("type"), d.type_.as_str());
    if let Some(dynamic) = &d.dynamic_dividing {
        dynamic_dividing(o.key("dynamicDividing"), dynamic);
    }
    o.close();
}

fn dynamic_dividing(out: &mut String, d: &DynamicDividing) {
    let mut o = Obj::open(out);
    go_string(o.key("strategy"), d.strategy.as_str());
    if !d.topology_spread_constraints.is_empty() {
        go_list(
            o.key("topologySpreadConstraints"),
            &d.topology_spread_constraints,
            topology_spread_constraint,
        );
    }
    if !d.preferred_clusters.is_empty() {
        go_list(
            o.key("preferredClusters"),
            &d.preferred_clusters,
            preferred_scheduling_term,
        );
    }
    if let Some(n) = d.min_clusters {
        go_int(o.key("minClusters"), n.into());
    }
    if let Some(n) = d.max_clusters {
        go_int(o.key("maxClusters"), n.into());
    }
    o.close();
}

fn subscriber(out: &mut String, s: &Subscriber) {
    let mut o = Obj::open(out);
    label_selector(o.key("clusterAffinity"), &s.cluster_affinity);
    if s.weight != 0 {
        go_int(o.key("weight"), s.weight.into());
    }
    if let Some(strategy) = &s.sub_group_strategy {
        sub_group_strategy(o.key("subGroupStrategy"), strategy);
    }
    o.close();
}

fn sub_group_strategy(out: &mut String, s: &SubGroupStrategy) {
    let mut o = Obj::open(out);
    go_int(o.key("minClusters"), s.min_clusters.into());
    o.close();
}

fn feed(out: &mut String, f: &Feed) {
    let mut o = Obj::open(out);
    go_string(o.key("kind"), &f.kind);
    go_string(o.key("apiVersion"), &f.api_version);
    if !f.namespace.is_empty() {
        go_string(o.key("namespace"), &f.namespace);
    }
    go_string(o.key("name"), &f.name);
    o.close();
}

/// `metav1.LabelSelector`: matchLabels, matchExpressions (both omitempty).
fn label_selector(out: &mut String, s: &LabelSelector) {
    let mut o = Obj::open(out);
    if let Some(labels) = s.match_labels.as_ref().filter(|m| !m.is_empty()) {
        string_map(o.key("matchLabels"), labels);
    }
    if let Some(exprs) = s.match_expressions.as_ref().filter(|v| !v.is_empty()) {
        go_list(o.key("matchExpressions"), exprs, label_selector_requirement);
    }
    o.close();
}

/// `metav1.LabelSelectorRequirement`: key, operator, values (omitempty).
fn label_selector_requirement(out: &mut String, r: &LabelSelectorRequirement) {
    requirement(out, &r.key, &r.operator, r.values.as_deref());
}

/// `corev1.NodeSelectorRequirement`: key, operator, values (omitempty).
fn node_selector_requirement(out: &mut String, r: &NodeSelectorRequirement) {
    requirement(out, &r.key, &r.operator, r.values.as_deref());
}

fn requirement(out: &mut String, key: &str, operator: &str, values: Option<&[String]>) {
    let mut o = Obj::open(out);
    go_string(o.key("key"), key);
    go_string(o.key("operator"), operator);
    if let Some(values) = values.filter(|v| !v.is_empty()) {
        go_list(o.key("values"), values, |out, v| go_string(out, v));
    }
    o.close();
}

/// `corev1.Toleration`: key, operator, value, effect, tolerationSeconds (all omitempty).
fn toleration(out: &mut String, t: &Toleration) {
    let mut o = Obj::open(out);
    for (name, value) in [
        ("key", &t.key),
        ("operator", &t.operator),
        ("value", &t.value),
        ("effect", &t.effect),
    ] {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
            go_string(o.key(name), v);
        }
    }
    if let Some(seconds) = t.toleration_seconds {
        go_int(o.key("tolerationSeconds"), seconds);
    }
    o.close();
}

/// `corev1.TopologySpreadConstraint` (Kubernetes 1.32 field order).
fn topology_spread_constraint(out: &mut String, c: &TopologySpreadConstraint) {
    let mut o = Obj::open(out);
    go_int(o.key("maxSkew"), c.max_skew.into());
    go_string(o.key("topologyKey"), &c.topology_key);
    go_string(o.key("whenUnsatisfiable"), &c.when_unsatisfiable);
    if let Some(selector) = &c.label_selector {
        label_selector(o.key("labelSelector"), selector);
    }
    if let Some(n) = c.min_domains {
        go_int(o.key("minDomains"), n.into());
    }
    if let Some(p) = &c.node_affinity_policy {
        go_string(o.key("nodeAffinityPolicy"), p);
    }
    if let Some(p) = &c.node_taints_policy {
        go_string(o.key("nodeTaintsPolicy"), p);
    }
    if let Some(keys) = c.match_label_keys.as_ref().filter(|k| !k.is_empty()) {
        go_list(o.key("matchLabelKeys"), keys, |out, k| go_string(out, k));
    }
    o.close();
}

/// `corev1.PreferredSchedulingTerm`: weight, preference.
fn preferred_scheduling_term(out: &mut String, t: &PreferredSchedulingTerm) {
    let mut o = Obj::open(out);
    go_int(o.key("weight"), t.weight.into());
    node_selector_term(o.key("preference"), &t.preference);
    o.close();
}

/// `corev1.NodeSelectorTerm`: matchExpressions, matchFields (both omitempty).
fn node_selector_term(out: &mut String, t: &NodeSelectorTerm) {
    let mut o = Obj::open(out);
    if let Some(exprs) = t.match_expressions.as_ref().filter(|v| !v.is_empty()) {
        go_list(o.key("matchExpressions"), exprs, node_selector_requirement);
    }
    if let Some(fields) = t.match_fields.as_ref().filter(|v| !v.is_empty()) {
        go_list(o.key("matchFields"), fields, node_selector_requirement);
    }
    o.close();
}

// ---------------------------------------------------------------------------------------------
// A minimal Go-compatible JSON writer
// ---------------------------------------------------------------------------------------------

/// An open JSON object; tracks whether a comma is needed.
struct Obj<'a> {
    out: &'a mut String,
    empty: bool,
}

impl<'a> Obj<'a> {
    fn open(out: &'a mut String) -> Self {
        out.push('{');
        Self { out, empty: true }
    }

    /// Writes `"name":` (after a comma if needed) and returns the buffer for the value.
    fn key(&mut self, name: &str) -> &mut String {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        go_string(self.out, name);
        self.out.push(':');
        self.out
    }

    fn close(self) {
        self.out.push('}');
    }
}

fn go_list<T>(out: &mut String, items: &[T], mut write: impl FnMut(&mut String, &T)) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write(out, item);
    }
    out.push(']');
}

fn string_map(out: &mut String, map: &BTreeMap<String, String>) {
    // BTreeMap iterates in byte order of the keys, which is the order Go sorts map keys in.
    let mut o = Obj::open(out);
    for (k, v) in map {
        go_string(o.key(k), v);
    }
    o.close();
}

fn go_int(out: &mut String, n: i64) {
    // Writing into a String cannot fail.
    let _ = write!(out, "{n}");
}

fn go_bool(out: &mut String, b: bool) {
    out.push_str(if b { "true" } else { "false" });
}

/// A JSON string as Go's `encoding/json` writes it with HTML escaping on (the `Marshal` default).
///
/// Go >= 1.22 writes `\b` and `\f` in short form; other control characters as `\u00xx` (lowercase
/// hex); `<`, `>`, `&`, U+2028 and U+2029 as `\u` escapes. Rust strings are valid UTF-8, so Go's
/// replacement of invalid bytes by U+FFFD never applies.
fn go_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{0}'..='\u{1f}' => {
                let b = c as u32;
                out.push_str("\\u00");
                out.push(char::from(HEX[(b >> 4) as usize & 0xf]));
                out.push(char::from(HEX[b as usize & 0xf]));
            }
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::apps::{PreemptionPolicy, ReplicaDividingType, SchedulingStrategy};

    /// spec/apis.md test vector (upstream `pkg/utils/feed_test.go`).
    const VECTOR: &str = r#"{"schedulerName":"default","schedulingStrategy":"Replication","subscribers":[{"clusterAffinity":{"matchLabels":{"cluster-name":"abc"}}}],"feeds":[{"kind":"Demo","apiVersion":"abc.com/v1","namespace":"foo","name":"bar"}]}"#;

    #[test]
    fn upstream_vector_through_the_typed_spec() {
        let spec: SubscriptionSpec = serde_json::from_str(VECTOR).expect("vector deserializes");
        assert_eq!(subscription_spec_go_json(&spec), VECTOR);
        assert_eq!(hash_subscription_spec(&spec), 2_608_449_479);
    }

    #[test]
    fn fnv_and_spew_building_blocks() {
        assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        assert_eq!(spew_bytes(b"{}"), "([]uint8)[123 125]");
        assert_eq!(spew_bytes(b""), "([]uint8)[]");
    }

    #[test]
    fn html_and_control_characters_are_escaped_like_go() {
        let mut out = String::new();
        go_string(
            &mut out,
            "a<b>&c\"\\\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{2028}\u{2029}é✓",
        );
        assert_eq!(
            out,
            r#""a\u003cb\u003e\u0026c\"\\\n\r\t\b\f\u0001\u001f\u2028\u2029é✓""#
        );

        let mut spec: SubscriptionSpec = serde_json::from_str(VECTOR).expect("vector deserializes");
        spec.feeds[0].name = "a<b>&c".into();
        let json = subscription_spec_go_json(&spec);
        assert!(json.contains(r#""name":"a\u003cb\u003e\u0026c""#), "{json}");
        assert_ne!(hash_subscription_spec(&spec), 2_608_449_479);
    }

    #[test]
    fn omitempty_and_field_order() {
        let spec: SubscriptionSpec = serde_json::from_value(serde_json::json!({
            "feeds": [{"apiVersion": "v1", "kind": "Namespace", "name": "qux", "namespace": ""}],
            "subscribers": [{
                "subGroupStrategy": {"minClusters": 0},
                "weight": 0,
                "clusterAffinity": {
                    "matchExpressions": [{"operator": "Exists", "key": "k", "values": []}],
                    "matchLabels": {"b": "2", "a": "1"},
                },
            }],
            "clusterTolerations": [{"effect": "NoSchedule", "operator": "Exists", "key": "t", "value": ""}],
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "dividingScheduling": {
                "dynamicDividing": {
                    "maxClusters": 3,
                    "preferredClusters": [{"preference": {"matchFields": [{"key": "f", "operator": "In", "values": ["x"]}]}, "weight": 1}],
                    "topologySpreadConstraints": [{"whenUnsatisfiable": "DoNotSchedule", "topologyKey": "zone", "maxSkew": 1}],
                    "strategy": "Spread",
                },
                "type": "Dynamic",
            },
            "schedulingStrategy": "Dividing",
            "schedulingBySubGroup": false,
            "schedulerName": "",
        }))
        .expect("deserializes");
        assert_eq!(
            spec.dividing_scheduling.as_ref().map(|d| d.type_),
            Some(ReplicaDividingType::Dynamic)
        );
        assert_eq!(
            subscription_spec_go_json(&spec),
            concat!(
                r#"{"schedulingBySubGroup":false,"schedulingStrategy":"Dividing","#,
                r#""dividingScheduling":{"type":"Dynamic","dynamicDividing":{"strategy":"Spread","#,
                r#""topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule"}],"#,
                r#""preferredClusters":[{"weight":1,"preference":{"matchFields":[{"key":"f","operator":"In","values":["x"]}]}}],"#,
                r#""maxClusters":3}},"priority":0,"preemptionPolicy":"PreemptLowerPriority","#,
                r#""subscribers":[{"clusterAffinity":{"matchLabels":{"a":"1","b":"2"},"#,
                r#""matchExpressions":[{"key":"k","operator":"Exists"}]},"subGroupStrategy":{"minClusters":0}}],"#,
                r#""clusterTolerations":[{"key":"t","operator":"Exists","effect":"NoSchedule"}],"#,
                r#""feeds":[{"kind":"Namespace","apiVersion":"v1","name":"qux"}]}"#,
            )
        );
    }

    #[test]
    fn crd_defaults_change_the_hash_only_when_applied() {
        let mut spec = SubscriptionSpec {
            subscribers: vec![Subscriber::default()],
            feeds: vec![Feed::new("v1", "Namespace", "", "qux")],
            ..Default::default()
        };
        let raw = hash_subscription_spec(&spec);
        spec.apply_crd_defaults();
        assert_eq!(
            spec.scheduling_strategy,
            Some(SchedulingStrategy::Replication)
        );
        assert_eq!(
            spec.preemption_policy,
            Some(PreemptionPolicy::PreemptLowerPriority)
        );
        assert_ne!(raw, hash_subscription_spec(&spec));
        assert!(subscription_spec_go_json(&spec).starts_with(
            r#"{"schedulerName":"default","schedulingStrategy":"Replication","preemptionPolicy":"PreemptLowerPriority","subscribers":[{"clusterAffinity":{}}]"#
        ));
    }
}
