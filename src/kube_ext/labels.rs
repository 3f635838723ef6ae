//! `metav1.LabelSelector` evaluation against a label set, as Kubernetes'
//! `metav1.LabelSelectorAsSelector(...).Matches(labels.Set(...))` does it.
//!
//! The one label-selector implementation of the crate. The scheduler matches every subscriber's
//! `clusterAffinity` against ManagedCluster labels (candidate selection, subgroups, static
//! weights) and the override renderer matches a Globalization's `clusterAffinity` against the
//! labels of the clusters in a namespace, so the semantics must be apimachinery's:
//!
//! - an empty selector (no `matchLabels`, no `matchExpressions`) matches everything;
//! - `matchLabels` entries are equality requirements;
//! - `matchExpressions` operators are exactly `In`, `NotIn`, `Exists`, `DoesNotExist`
//!   (case-sensitive); `In`/`NotIn` need at least one value, `Exists`/`DoesNotExist` none;
//! - `NotIn` and `DoesNotExist` match clusters that lack the key;
//! - keys must be qualified names and values valid label values, otherwise the selector is
//!   invalid (apimachinery rejects it the same way, and the callers decide what an invalid
//!   selector means: an error for candidate selection, "skip this subscriber" elsewhere).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use thiserror::Error;

/// Why a label selector cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LabelSelectorError {
    /// The operator is not one of `In`, `NotIn`, `Exists`, `DoesNotExist`.
    #[error("{0:?} is not a valid label selector operator")]
    InvalidOperator(String),
    /// `In`/`NotIn` without values.
    #[error("key {key:?}: for 'in', 'notin' operators, values set can't be empty")]
    EmptyValues {
        /// The requirement's key.
        key: String,
    },
    /// `Exists`/`DoesNotExist` with values.
    #[error("key {key:?}: values set must be empty for exists and does not exist")]
    UnexpectedValues {
        /// The requirement's key.
        key: String,
    },
    /// The key is not a qualified name (`[prefix/]name`).
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey {
        /// The offending key.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The value is not a valid label value.
    #[error("invalid label value {value:?} for key {key:?}: {reason}")]
    InvalidValue {
        /// The requirement's key.
        key: String,
        /// The offending value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Operator of one requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    operator: Operator,
    values: BTreeSet<String>,
    /// from `matchLabels` (shown `key=value`, as apimachinery's `Selector.String()` does)
    equals: bool,
}

impl std::fmt::Display for Requirement {
    /// apimachinery's requirement syntax, the one `kubectl get -l` takes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let values = || self.values.iter().cloned().collect::<Vec<_>>().join(",");
        match self.operator {
            Operator::In if self.equals => write!(f, "{}={}", self.key, values()),
            Operator::In => write!(f, "{} in ({})", self.key, values()),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, values()),
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self.operator {
            Operator::In => labels
                .get(&self.key)
                .is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => labels
                .get(&self.key)
                .is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => labels.contains_key(&self.key),
            Operator::DoesNotExist => !labels.contains_key(&self.key),
        }
    }
}

/// A validated label selector: all requirements must match (logical AND).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Validates and converts a `metav1.LabelSelector`.
    pub fn from_label_selector(selector: &LabelSelector) -> Result<Self, LabelSelectorError> {
        Self::compile(selector, true)
    }

    /// Like [`Selector::from_label_selector`], but keys and values are not checked for being
    /// qualified names and label values (operators and the number of values still are).
    ///
    /// A Globalization's `clusterAffinity` has always been compiled this way, and a refactoring
    /// must not start rejecting Globalizations that worked before. Upstream validates them
    /// (`metav1.LabelSelectorAsSelector`); switching the override renderer to
    /// `from_label_selector` is a behaviour change to make on purpose, not by accident.
    pub fn from_label_selector_unvalidated(
        selector: &LabelSelector,
    ) -> Result<Self, LabelSelectorError> {
        Self::compile(selector, false)
    }

    fn compile(selector: &LabelSelector, validate: bool) -> Result<Self, LabelSelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            if validate {
                validate_key(key)?;
                validate_value(key, value)?;
            }
            requirements.push(Requirement {
                key: key.clone(),
                operator: Operator::In,
                values: BTreeSet::from([value.clone()]),
                equals: true,
            });
        }
        for expr in selector.match_expressions.iter().flatten() {
            let operator = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => return Err(LabelSelectorError::InvalidOperator(other.to_owned())),
            };
            if validate {
                validate_key(&expr.key)?;
            }
            let values: &[String] = expr.values.as_deref().unwrap_or_default();
            match operator {
                Operator::In | Operator::NotIn if values.is_empty() => {
                    return Err(LabelSelectorError::EmptyValues {
                        key: expr.key.clone(),
                    });
                }
                Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                    return Err(LabelSelectorError::UnexpectedValues {
                        key: expr.key.clone(),
                    });
                }
                _ => {}
            }
            if validate {
                for value in values {
                    validate_value(&expr.key, value)?;
                }
            }
            requirements.push(Requirement {
                key: expr.key.clone(),
                operator,
                values: values.iter().cloned().collect(),
                equals: false,
            });
        }
        Ok(Self { requirements })
    }

    /// Does this selector match the label set? An empty selector matches everything.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// The first requirement the labels miss, in selector syntax (`tier in (gold,bronze)`), or
    /// `None` when the selector matches: what the placement what-if names as the reason a
    /// cluster was not a candidate.
    pub fn first_unmatched(&self, labels: &BTreeMap<String, String>) -> Option<String> {
        self.requirements
            .iter()
            .find(|r| !r.matches(labels))
            .map(ToString::to_string)
    }

    /// Whether the selector has no requirement (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// Convenience: validate `selector` and match it against `labels` in one go.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, LabelSelectorError> {
    Ok(Selector::from_label_selector(selector)?.matches(labels))
}

/// Does any of these selectors match the labels? Invalid selectors are skipped (Go logs and
/// continues). The scheduler's ManagedCluster event handlers use this with the subscribers'
/// `clusterAffinity` to decide which Subscriptions to enqueue (scheduler.md §3).
pub fn any_matches<'a>(
    selectors: impl IntoIterator<Item = &'a LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selectors
        .into_iter()
        .any(|s| Selector::from_label_selector(s).is_ok_and(|sel| sel.matches(labels)))
}

const MAX_NAME_LEN: usize = 63;
const MAX_PREFIX_LEN: usize = 253;

/// `validation.IsQualifiedName`: `[DNS-subdomain prefix "/"] name`.
fn validate_key(key: &str) -> Result<(), LabelSelectorError> {
    let invalid = |reason| LabelSelectorError::InvalidKey {
        key: key.to_owned(),
        reason,
    };
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err(invalid("prefix part must be non-empty"));
        }
        if prefix.len() > MAX_PREFIX_LEN {
            return Err(invalid("prefix part must be no more than 253 characters"));
        }
        if !is_dns1123_subdomain(prefix) {
            return Err(invalid(
                "prefix part must be a lowercase RFC 1123 subdomain (alphanumerics, '-' and '.', starting and ending with an alphanumeric)",
            ));
        }
    }
    if name.is_empty() {
        return Err(invalid("name part must be non-empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(invalid("name part must be no more than 63 characters"));
    }
    if !is_qualified_name_part(name) {
        return Err(invalid(
            "name part must consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        ));
    }
    Ok(())
}

/// `validation.IsValidLabelValue`: empty, or a qualified-name part of at most 63 characters.
fn validate_value(key: &str, value: &str) -> Result<(), LabelSelectorError> {
    let invalid = |reason| LabelSelectorError::InvalidValue {
        key: key.to_owned(),
        value: value.to_owned(),
        reason,
    };
    if value.len() > MAX_NAME_LEN {
        return Err(invalid("must be no more than 63 characters"));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        return Err(invalid(
            "must consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        ));
    }
    Ok(())
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let bytes = label.as_bytes();
        let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|v| (*v).to_owned()).collect())
            },
        }
    }

    fn selector(
        match_labels: &[(&str, &str)],
        exprs: Vec<LabelSelectorRequirement>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels: if match_labels.is_empty() {
                None
            } else {
                Some(labels(match_labels))
            },
            match_expressions: if exprs.is_empty() { None } else { Some(exprs) },
        }
    }

    #[test]
    fn the_first_missed_requirement_is_named_in_selector_syntax() {
        let s = Selector::from_label_selector(&selector(
            &[("env", "prod")],
            vec![
                expr("tier", "In", &["gold", "bronze"]),
                expr("zone", "NotIn", &["b"]),
                expr("gpu", "Exists", &[]),
                expr("legacy", "DoesNotExist", &[]),
            ],
        ))
        .expect("valid");
        let all = [
            ("env", "prod"),
            ("tier", "gold"),
            ("zone", "a"),
            ("gpu", "1"),
        ];
        assert_eq!(s.first_unmatched(&labels(&all)), None);
        let miss = |pairs: &[(&str, &str)]| s.first_unmatched(&labels(pairs));
        assert_eq!(miss(&[]).as_deref(), Some("env=prod"));
        assert_eq!(
            miss(&[("env", "prod"), ("tier", "silver")]).as_deref(),
            Some("tier in (bronze,gold)")
        );
        assert_eq!(
            miss(&[("env", "prod"), ("tier", "gold"), ("zone", "b")]).as_deref(),
            Some("zone notin (b)")
        );
        assert_eq!(
            miss(&[("env", "prod"), ("tier", "gold")]).as_deref(),
            Some("gpu")
        );
        assert_eq!(
            miss(&[
                ("env", "prod"),
                ("tier", "gold"),
                ("gpu", "1"),
                ("legacy", "y")
            ])
            .as_deref(),
            Some("!legacy")
        );
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = selector(&[], vec![]);
        assert_eq!(matches(&s, &labels(&[])), Ok(true));
        assert_eq!(matches(&s, &labels(&[("a", "b")])), Ok(true));
        assert!(Selector::from_label_selector(&s).expect("valid").is_empty());
    }

    #[test]
    fn match_labels_are_equality() {
        let s = selector(&[("region", "east"), ("tier", "gold")], vec![]);
        assert_eq!(
            matches(
                &s,
                &labels(&[("region", "east"), ("tier", "gold"), ("x", "y")])
            ),
            Ok(true)
        );
        assert_eq!(matches(&s, &labels(&[("region", "east")])), Ok(false));
        assert_eq!(
            matches(&s, &labels(&[("region", "west"), ("tier", "gold")])),
            Ok(false)
        );
    }

    #[test]
    fn operators() {
        let cluster = labels(&[("env", "prod"), ("zone", "a")]);
        let case = |e: LabelSelectorRequirement| matches(&selector(&[], vec![e]), &cluster);
        assert_eq!(case(expr("env", "In", &["prod", "dev"])), Ok(true));
        assert_eq!(case(expr("env", "In", &["dev"])), Ok(false));
        assert_eq!(case(expr("missing", "In", &["x"])), Ok(false));
        assert_eq!(case(expr("env", "NotIn", &["dev"])), Ok(true));
        assert_eq!(case(expr("env", "NotIn", &["prod"])), Ok(false));
        // NotIn matches clusters without the key, like apimachinery.
        assert_eq!(case(expr("missing", "NotIn", &["x"])), Ok(true));
        assert_eq!(case(expr("zone", "Exists", &[])), Ok(true));
        assert_eq!(case(expr("missing", "Exists", &[])), Ok(false));
        assert_eq!(case(expr("missing", "DoesNotExist", &[])), Ok(true));
        assert_eq!(case(expr("zone", "DoesNotExist", &[])), Ok(false));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let s = selector(&[("env", "prod")], vec![expr("zone", "In", &["a", "b"])]);
        assert_eq!(
            matches(&s, &labels(&[("env", "prod"), ("zone", "b")])),
            Ok(true)
        );
        assert_eq!(
            matches(&s, &labels(&[("env", "prod"), ("zone", "c")])),
            Ok(false)
        );
    }

    #[test]
    fn invalid_selectors() {
        let l = labels(&[]);
        let err = |e| matches(&selector(&[], vec![e]), &l).expect_err("invalid");
        assert_eq!(
            err(expr("a", "in", &["x"])),
            LabelSelectorError::InvalidOperator("in".into())
        );
        assert_eq!(
            err(expr("a", "Gt", &["1"])),
            LabelSelectorError::InvalidOperator("Gt".into())
        );
        assert_eq!(
            err(expr("a", "In", &[])),
            LabelSelectorError::EmptyValues { key: "a".into() }
        );
        assert_eq!(
            err(expr("a", "Exists", &["x"])),
            LabelSelectorError::UnexpectedValues { key: "a".into() }
        );
        assert!(matches!(
            err(expr("-bad", "Exists", &[])),
            LabelSelectorError::InvalidKey { .. }
        ));
        assert!(matches!(
            err(expr("Upper.Case/x", "Exists", &[])),
            LabelSelectorError::InvalidKey { .. }
        ));
        assert!(matches!(
            err(expr("a", "In", &["bad value"])),
            LabelSelectorError::InvalidValue { .. }
        ));
        assert!(matches!(
            matches(&selector(&[("a", &"x".repeat(64))], vec![]), &l),
            Err(LabelSelectorError::InvalidValue { .. })
        ));
        assert_eq!(
            err(expr("a", "in", &["x"])).to_string(),
            "\"in\" is not a valid label selector operator"
        );
    }

    #[test]
    fn subscribers_match_if_any_does() {
        use crate::apis::Subscriber;
        let sub = |s: LabelSelector| Subscriber {
            cluster_affinity: s,
            ..Default::default()
        };
        let subscribers = [
            sub(selector(&[], vec![expr("a", "In", &[])])),
            sub(selector(&[("region", "east")], vec![])),
        ];
        assert!(any_matches(
            subscribers.iter().map(|s| &s.cluster_affinity),
            &labels(&[("region", "east")])
        ));
        assert!(!any_matches(
            subscribers.iter().map(|s| &s.cluster_affinity),
            &labels(&[("region", "west")])
        ));
        assert!(!any_matches([], &labels(&[])));
    }

    #[test]
    fn unvalidated_selectors_accept_any_key_but_not_any_operator() {
        let bad_key = selector(&[("Bad Key!", "v")], vec![]);
        assert!(Selector::from_label_selector(&bad_key).is_err());
        let lax = Selector::from_label_selector_unvalidated(&bad_key).unwrap();
        assert!(lax.matches(&labels(&[("Bad Key!", "v")])));
        let bad_op = selector(&[], vec![expr("a", "in", &["x"])]);
        assert_eq!(
            Selector::from_label_selector_unvalidated(&bad_op),
            Err(LabelSelectorError::InvalidOperator("in".into()))
        );
    }

    #[test]
    fn qualified_keys_and_empty_values() {
        let s = selector(
            &[("clusters.clusternet.io/cluster-name", "")],
            vec![expr("example.com/a_b.c-d", "Exists", &[])],
        );
        let l = labels(&[
            ("clusters.clusternet.io/cluster-name", ""),
            ("example.com/a_b.c-d", "1"),
        ]);
        assert_eq!(matches(&s, &l), Ok(true));
    }
}
