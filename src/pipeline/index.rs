//! The shared cache's indexes the pipeline reads by: a reconcile looks up its own objects in one
//! bucket instead of filtering a whole kind (at 10,000 Subscriptions a cold start spent most of
//! its CPU filtering 30,000 Descriptions per reconcile). One function per index, so every user of
//! an index name passes the same keys.

use kube::ResourceExt;

use crate::apis::known;
use crate::apis::{Base, Description, Feed, Manifest, Subscription};
use crate::runtime::cache::{Index, Shared};

/// The key a feed is indexed by: its kind and name (namespace and group are checked by the
/// reader; two feeds rarely share both).
pub fn feed_key(kind: &str, name: &str) -> String {
    format!("{kind}/{name}")
}

fn label(o: &impl ResourceExt, key: &str) -> Vec<String> {
    o.labels().get(key).cloned().into_iter().collect()
}

fn feed_keys(feeds: &[Feed]) -> Vec<String> {
    let mut keys: Vec<String> = feeds.iter().map(|f| feed_key(&f.kind, &f.name)).collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Descriptions by the uid of the Subscription they come from.
pub fn descriptions_by_subscription(s: &Shared<Description>) -> Index<Description> {
    s.index("subscription-uid", |d| {
        label(d, known::CONFIG_SUBSCRIPTION_UID_LABEL)
    })
}

/// Descriptions by the uid of the Base they were rendered from.
pub fn descriptions_by_base(s: &Shared<Description>) -> Index<Description> {
    s.index("base-uid", |d| label(d, known::CONFIG_UID_LABEL))
}

/// Bases by the uid of their Subscription.
pub fn bases_by_subscription(s: &Shared<Base>) -> Index<Base> {
    s.index("subscription-uid", |b| {
        label(b, known::CONFIG_SUBSCRIPTION_UID_LABEL)
    })
}

/// Bases by their feeds' [`feed_key`].
pub fn bases_by_feed(s: &Shared<Base>) -> Index<Base> {
    s.index("feed", |b| feed_keys(&b.spec.feeds))
}

/// Subscriptions by their feeds' [`feed_key`].
pub fn subscriptions_by_feed(s: &Shared<Subscription>) -> Index<Subscription> {
    s.index("feed", |sub| feed_keys(&sub.spec.feeds))
}

/// Manifests by the [`feed_key`] of the object they hold ([`manifest_feed_keys`]).
pub fn manifests_by_feed(s: &Shared<Manifest>) -> Index<Manifest> {
    s.index("feed", manifest_feed_keys)
}

/// Objects whose deletion is under way (feeds held by the feed-protection finalizer).
pub fn deleting<K: kube::Resource<DynamicType = ()> + Clone + 'static>(s: &Shared<K>) -> Index<K> {
    s.index("deleting", |m| {
        if m.meta().deletion_timestamp.is_some() {
            vec![String::new()]
        } else {
            Vec::new()
        }
    })
}

/// The Manifests `feeds` may refer to (a superset: [`super::feeds::find`] picks among them).
pub fn manifests_of(index: &Index<Manifest>, feeds: &[Feed]) -> Vec<std::sync::Arc<Manifest>> {
    feed_keys(feeds).iter().flat_map(|k| index.get(k)).collect()
}

/// The [`feed_key`] of the object Manifest `m` holds (its `config.kind` and `config.name`
/// labels), to look up what may use it as a feed (a superset: check with
/// [`super::feeds::uses`]).
pub fn manifest_feed_keys(m: &Manifest) -> Vec<String> {
    let l = m.labels();
    match (
        l.get(known::CONFIG_KIND_LABEL),
        l.get(known::CONFIG_NAME_LABEL),
    ) {
        (Some(kind), Some(name)) => vec![feed_key(kind, name)],
        _ => Vec::new(),
    }
}

/// The Subscription a Base or a Description names through its `config.subscription.*` labels,
/// as `(namespace, name)`.
pub fn subscription_named(
    labels: &std::collections::BTreeMap<String, String>,
) -> Option<(String, String)> {
    crate::runtime::controller::labelled(
        labels,
        known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL,
        known::CONFIG_SUBSCRIPTION_NAME_LABEL,
    )
}
