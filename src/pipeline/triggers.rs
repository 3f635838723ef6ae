//! What a change of a feed's content or of an override triggers, for every kind that lists
//! feeds: the Bases a Base controller renders, the Subscriptions the revision controller records.
//! Looked up through the kind's feed index ([`super::index::feed_key`]), then checked in full.

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::{feeds, index};
use crate::apis::{
    Base, Feed, Globalization, HelmChart, Localization, Manifest, OverridePolicy, Subscription,
};
use crate::runtime::cache::{Index, Shared};
use crate::runtime::controller::through_index;

/// A kind that lists feeds.
pub trait Fed: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static {
    fn feeds(&self) -> &[Feed];
    /// Whether a Localization in `namespace` can apply to it: a Base only in its own cluster
    /// namespace; a Subscription in any it may be bound to.
    fn localized_in(&self, namespace: Option<&str>) -> bool;
}

impl Fed for Base {
    fn feeds(&self) -> &[Feed] {
        &self.spec.feeds
    }
    fn localized_in(&self, namespace: Option<&str>) -> bool {
        self.namespace().as_deref() == namespace
    }
}

impl Fed for Subscription {
    fn feeds(&self) -> &[Feed] {
        &self.spec.feeds
    }
    fn localized_in(&self, _: Option<&str>) -> bool {
        true
    }
}

/// Whether two feed references name the same object (a namespace left out matches any).
pub fn same_feed(a: &Feed, b: &Feed) -> bool {
    a.kind == b.kind
        && a.api_version == b.api_version
        && a.name == b.name
        && (a.namespace.is_empty() || b.namespace.is_empty() || a.namespace == b.namespace)
}

/// A changed Manifest triggers what lists its feed.
pub fn on_manifests<K: Fed>(
    by_feed: Index<K>,
    manifests: &Shared<Manifest>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    through_index(
        manifests.subscribe(),
        by_feed,
        index::manifest_feed_keys,
        |k: &K, m: &Manifest| k.feeds().iter().any(|f| feeds::matches(f, m.labels())),
    )
}

/// A changed override triggers what lists its feed: only ApplyNow overrides at once, ApplyLater
/// ones wait for the next render (deployer.md §5.1).
pub fn on_overrides<K: Fed>(
    by_feed: Index<K>,
    locs: &Shared<Localization>,
    globs: &Shared<Globalization>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    use futures::StreamExt;
    let feed_of = |f: &Feed| vec![index::feed_key(&f.kind, &f.name)];
    let apply_now =
        |p: &Option<OverridePolicy>| futures::future::ready(*p == Some(OverridePolicy::ApplyNow));
    let from_locs = through_index(
        locs.subscribe()
            .filter(move |l| apply_now(&l.spec.override_policy)),
        by_feed.clone(),
        move |l: &Localization| feed_of(&l.spec.feed),
        |k: &K, l: &Localization| {
            k.localized_in(l.namespace().as_deref())
                && k.feeds().iter().any(|f| same_feed(f, &l.spec.feed))
        },
    );
    let from_globs = through_index(
        globs
            .subscribe()
            .filter(move |g| apply_now(&g.spec.override_policy)),
        by_feed,
        move |g: &Globalization| feed_of(&g.spec.feed),
        |k: &K, g: &Globalization| k.feeds().iter().any(|f| same_feed(f, &g.spec.feed)),
    );
    futures::stream::select(from_locs, from_globs)
}

/// A HelmChart changed (its spec, or found or lost in its status) triggers what lists it.
pub fn on_charts<K: Fed>(
    by_feed: Index<K>,
    charts: &Shared<HelmChart>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    through_index(
        charts.subscribe(),
        by_feed,
        |c: &HelmChart| vec![index::feed_key("HelmChart", &c.name_any())],
        |k: &K, c: &HelmChart| {
            k.feeds().iter().any(|f| {
                f.kind == "HelmChart"
                    && Some(&f.namespace) == c.namespace().as_ref()
                    && f.name == c.name_any()
            })
        },
    )
}
