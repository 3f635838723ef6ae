//! `placement.clusternet.io/v1alpha1` (`apis::placement`): the placement what-if, served by the
//! hub so `kubectl clusternet placement`, the dashboard and scripts share one computation.
//!
//! A review reads the parent's current state with the hub's own client and runs the scheduler's
//! cycle ([`explain::what_if`], the profiles of `--scheduler-config`, the scheduler's predictor
//! client) and the Base controller's rendering ([`preview::preview_objects`]) over it; it writes
//! nothing. What the answer reveals is what the caller could read in the parent anyway, so the
//! caller's own rights are checked first with SubjectAccessReviews: `create placementreviews`
//! in the namespace, `list managedclusters`, `get subscriptions` for a review by name, and
//! `list localizations` in each selected cluster's namespace and `list globalizations` for the
//! rendered objects.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::Hub;
use super::authn::UserInfo;
use super::authz::Attributes;
use super::shadow::model::{ShadowResource, build_manifest, manifest_labels, trim_template};
use super::shadow::rest::decode_object;
use super::status::ApiError;
use crate::apis::placement::Explanation;
use crate::apis::placement::{
    self, ClusterObjects, CurrentPlacement, PlacementReview, PlacementReviewSpec,
    PlacementReviewStatus,
};
use crate::apis::{
    Globalization, HelmChart, Localization, ManagedCluster, Manifest, Subscription, known,
};
use crate::pipeline::preview::{PreviewState, preview_objects};
use crate::scheduler::config::Profiles;
use crate::scheduler::explain;

/// The scheduler profiles the reviews decide with, read once at start as the scheduler reads
/// them; the error is every review's answer when they cannot be read.
pub struct PlacementApi {
    profiles: Result<Arc<Profiles>, String>,
}

impl PlacementApi {
    pub fn new(rt: &crate::runtime::Runtime) -> Self {
        PlacementApi {
            profiles: crate::scheduler::controller::profiles_for(rt),
        }
    }
}

/// One request under `/apis/placement.clusternet.io/v1alpha1/`: `tail` is what follows.
pub async fn handle(
    hub: &Hub,
    user: &UserInfo,
    method: &Method,
    tail: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(StatusCode, Value), ApiError> {
    let parts: Vec<&str> = tail.split('/').filter(|p| !p.is_empty()).collect();
    let namespace = match parts.as_slice() {
        ["namespaces", ns, placement::RESOURCE] => *ns,
        _ => {
            return Err(ApiError::not_found_path(&format!(
                "/apis/{}/{tail}",
                placement::API_VERSION
            )));
        }
    };
    if method != Method::POST {
        return Err(ApiError::method_not_supported(format!(
            "{} are create-only (POST): a review is answered, never stored",
            placement::RESOURCE
        )));
    }
    hub.authz
        .authorize(
            user,
            Attributes::resource(
                "create",
                placement::GROUP,
                placement::VERSION,
                placement::RESOURCE,
                namespace,
                "",
            ),
        )
        .await?;
    let mut review = parse_review(decode_object(headers, body)?, namespace)?;
    let answer = review_placement(hub, user, namespace, &review.spec).await?;
    review.status = Some(answer);
    let value = serde_json::to_value(&review)
        .map_err(|e| ApiError::internal(format!("encoding the review: {e}")))?;
    Ok((StatusCode::CREATED, value))
}

/// A `PlacementReview`, or a bare Subscription (what `placement -f subscription.yaml` sends is
/// wrapped by the command, but a script posting the Subscription itself gets the same answer).
pub fn parse_review(body: Value, namespace: &str) -> Result<PlacementReview, ApiError> {
    let kind = body["kind"].as_str().unwrap_or_default().to_string();
    let api_version = body["apiVersion"].as_str().unwrap_or_default().to_string();
    let mut review = match kind.as_str() {
        known::SUBSCRIPTION_KIND => {
            let sub: Subscription = serde_json::from_value(body)
                .map_err(|e| ApiError::bad_request(format!("the Subscription is invalid: {e}")))?;
            PlacementReview {
                spec: PlacementReviewSpec {
                    subscription: Some(Box::new(sub)),
                    ..PlacementReviewSpec::default()
                },
                ..PlacementReview::default()
            }
        }
        placement::KIND | "" => {
            if !api_version.is_empty() && api_version != placement::API_VERSION {
                return Err(ApiError::bad_request(format!(
                    "apiVersion {api_version:?} is not {}",
                    placement::API_VERSION
                )));
            }
            serde_json::from_value(body).map_err(|e| {
                ApiError::bad_request(format!("the {} is invalid: {e}", placement::KIND))
            })?
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "expected a {} (or a Subscription), got kind {other:?}",
                placement::KIND
            )));
        }
    };
    review.api_version = placement::API_VERSION.into();
    review.kind = placement::KIND.into();
    match review.metadata.namespace.as_deref() {
        None | Some("") => review.metadata.namespace = Some(namespace.into()),
        Some(ns) if ns == namespace => {}
        Some(ns) => {
            return Err(ApiError::bad_request(format!(
                "the review's namespace {ns:?} does not match the request's namespace {namespace:?}"
            )));
        }
    }
    match (
        &mut review.spec.subscription,
        review.spec.subscription_name.is_empty(),
    ) {
        (Some(_), false) => Err(ApiError::invalid(
            "spec.subscription and spec.subscriptionName are exclusive: give one",
        )),
        (None, true) => Err(ApiError::invalid(
            "spec.subscription (a Subscription) or spec.subscriptionName (an existing one) is required",
        )),
        (Some(sub), true) => {
            match sub.metadata.namespace.as_deref() {
                None | Some("") => sub.metadata.namespace = Some(namespace.into()),
                Some(ns) if ns == namespace => {}
                Some(ns) => {
                    return Err(ApiError::bad_request(format!(
                        "the Subscription's namespace {ns:?} does not match the review's namespace {namespace:?}"
                    )));
                }
            }
            if sub.metadata.name.as_deref().unwrap_or_default().is_empty() {
                // the what-if does not need one; the rendered objects' attributions do
                sub.metadata.name = Some("what-if".into());
            }
            Ok(review)
        }
        (None, false) => Ok(review),
    }
}

/// `verb` on an apps.clusternet.io resource.
fn apps(resource: &str, ns: &str, name: &str, verb: &str) -> Attributes {
    Attributes::resource(
        verb,
        crate::apis::apps::GROUP,
        "v1alpha1",
        resource,
        ns,
        name,
    )
}

/// The answer of a review (also the dashboard's "explain its placement now").
pub(crate) async fn review_placement(
    hub: &Hub,
    user: &UserInfo,
    namespace: &str,
    spec: &PlacementReviewSpec,
) -> Result<PlacementReviewStatus, ApiError> {
    let client = hub.rt.client.clone();
    let (sub, existing) = reviewed_subscription(hub, user, namespace, spec).await?;
    hub.authz
        .authorize(
            user,
            Attributes::resource(
                "list",
                crate::apis::clusters::GROUP,
                "v1beta1",
                "managedclusters",
                "",
                "",
            ),
        )
        .await?;
    let reserved = hub.rt.config.reserved_namespace.clone();
    // the hub's own cache of them (it follows them for the tunnel metrics)
    let clusters: Vec<Arc<ManagedCluster>> = hub.rt.cache.watch::<ManagedCluster>().store.state();
    let overlay = if spec.objects.is_empty() {
        Overlay::default()
    } else {
        let resources = match &hub.shadow {
            Some(shadow) => shadow.resources()?,
            None => Arc::new(Vec::new()),
        };
        plan_overlay(&spec.objects, &resources, &reserved, namespace).map_err(ApiError::invalid)?
    };
    let listed: Vec<Arc<Manifest>> = list(Api::namespaced(client.clone(), &reserved)).await?;
    let manifests = overlay.manifests_over(&listed);
    let explanation = match &hub.placement.profiles {
        Err(e) => Explanation {
            error: Some(e.clone()),
            ..Explanation::default()
        },
        Ok(profiles) => match profiles.for_subscription(&sub) {
            Some(fwk) => explain::what_if(fwk, &sub, &clusters, &manifests, &reserved).await,
            None => Explanation {
                error: Some(format!(
                    "no scheduler profile handles schedulerName {:?} (profiles: {}): the scheduler leaves this Subscription alone",
                    sub.spec.effective_scheduler_name(),
                    profiles.names().collect::<Vec<_>>().join(", ")
                )),
                ..Explanation::default()
            },
        },
    };
    let mut status = PlacementReviewStatus::default();
    if let Some(live) = &existing {
        let now = live.status.clone().unwrap_or_default();
        let current = CurrentPlacement {
            binding_clusters: now.binding_clusters,
            replicas: now.replicas,
            last_decision: now.last_decision.map(|d| *d),
        };
        // a failed attempt leaves the binding as it is, as the scheduler does
        status.would_change = Some(
            explanation.error.is_none()
                && (current.binding_clusters != explanation.binding_clusters
                    || current.replicas != explanation.replicas),
        );
        status.current = Some(current);
    }
    if spec.show_objects && explanation.error.is_none() {
        let parent = Parent {
            reserved_ns: &reserved,
            manifests: &manifests,
            clusters: &clusters,
        };
        status.objects = preview(hub, user, &sub, &explanation, &overlay, &parent).await?;
    }
    status.explanation = explanation;
    Ok(status)
}

/// The Subscription a review is about (defaults applied): the one it carries, or the stored one
/// it names (which the caller must be allowed to get), with the stored one when there is one.
async fn reviewed_subscription(
    hub: &Hub,
    user: &UserInfo,
    namespace: &str,
    spec: &PlacementReviewSpec,
) -> Result<(Subscription, Option<Subscription>), ApiError> {
    if let Some(s) = &spec.subscription {
        let mut sub = (**s).clone();
        sub.spec.apply_crd_defaults();
        return Ok((sub, None));
    }
    let name = &spec.subscription_name;
    hub.authz
        .authorize(user, apps("subscriptions", namespace, name, "get"))
        .await?;
    let api: Api<Subscription> = Api::namespaced(hub.rt.client.clone(), namespace);
    let found = api
        .get_opt(name)
        .await
        .map_err(|e| ApiError::from_kube(&e))?
        .ok_or_else(|| ApiError::not_found(crate::apis::apps::GROUP, "subscriptions", name))?;
    let mut sub = found.clone();
    sub.spec.apply_crd_defaults();
    Ok((sub, Some(found)))
}

/// What a review reads of the parent whatever it shows.
struct Parent<'a> {
    reserved_ns: &'a str,
    manifests: &'a [Arc<Manifest>],
    clusters: &'a [Arc<ManagedCluster>],
}

/// The objects each cluster the review chose would get: the overrides (the caller must be
/// allowed to list them) and charts of the parent, with what the review's `spec.objects` put in
/// their place.
async fn preview(
    hub: &Hub,
    user: &UserInfo,
    sub: &Subscription,
    explanation: &Explanation,
    overlay: &Overlay,
    parent: &Parent<'_>,
) -> Result<Vec<ClusterObjects>, ApiError> {
    let client = hub.rt.client.clone();
    hub.authz
        .authorize(user, apps("globalizations", "", "", "list"))
        .await?;
    let mut localizations: Vec<Localization> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for cluster in &explanation.binding_clusters {
        let ns = cluster.split('/').next().unwrap_or_default();
        if !seen.insert(ns.to_string()) {
            continue;
        }
        hub.authz
            .authorize(user, apps("localizations", ns, "", "list"))
            .await?;
        let found: Vec<Arc<Localization>> = list(Api::namespaced(client.clone(), ns)).await?;
        localizations.extend(found.iter().map(|l| (**l).clone()));
    }
    let localizations = Overlay::replace(&localizations, &overlay.localizations, |l| {
        (l.namespace(), l.name_any())
    });
    let globalizations: Vec<Globalization> = list(Api::all(client.clone()))
        .await?
        .iter()
        .map(|g: &Arc<Globalization>| (**g).clone())
        .collect();
    let globalizations =
        Overlay::replace(&globalizations, &overlay.globalizations, |g| g.name_any());
    let charts = review_charts(&client, sub, overlay).await?;
    let state = PreviewState {
        reserved_ns: parent.reserved_ns,
        manifests: parent.manifests,
        charts: &charts,
        globalizations: &globalizations,
        localizations: &localizations,
        clusters: parent.clusters,
    };
    Ok(preview_objects(
        sub,
        &explanation.binding_clusters,
        &explanation.replicas,
        &state,
    ))
}

/// The HelmCharts a Subscription's feeds name: the review's own, else the parent's.
async fn review_charts(
    client: &kube::Client,
    sub: &Subscription,
    overlay: &Overlay,
) -> Result<Vec<Arc<HelmChart>>, ApiError> {
    let mut charts: Vec<Arc<HelmChart>> = Vec::new();
    for feed in sub.spec.feeds.iter().filter(|f| f.kind == "HelmChart") {
        let from_file = overlay.charts.iter().find(|c| {
            c.name_any() == feed.name && c.namespace().as_deref() == Some(&*feed.namespace)
        });
        if let Some(c) = from_file {
            charts.push(Arc::clone(c));
            continue;
        }
        let api: Api<HelmChart> = Api::namespaced(client.clone(), &feed.namespace);
        if let Some(c) = api
            .get_opt(&feed.name)
            .await
            .map_err(|e| ApiError::from_kube(&e))?
        {
            charts.push(Arc::new(c));
        }
    }
    Ok(charts)
}

/// What a review's `spec.objects` put in place of the parent's state.
#[derive(Debug, Default)]
struct Overlay {
    manifests: Vec<Arc<Manifest>>,
    localizations: Vec<Localization>,
    globalizations: Vec<Globalization>,
    charts: Vec<Arc<HelmChart>>,
}

impl Overlay {
    /// `existing` with the overlay's objects of the same identity replaced (and the others
    /// added); `id` is what makes two objects the same.
    fn replace<T: Clone, I: PartialEq>(
        existing: &[T],
        overlay: &[T],
        id: impl Fn(&T) -> I,
    ) -> Vec<T> {
        existing
            .iter()
            .filter(|e| !overlay.iter().any(|o| id(o) == id(e)))
            .chain(overlay)
            .cloned()
            .collect()
    }

    fn manifests_over(&self, existing: &[Arc<Manifest>]) -> Vec<Arc<Manifest>> {
        // a Manifest is the feed its config.* labels name
        let id = |m: &Arc<Manifest>| {
            [
                known::CONFIG_GROUP_LABEL,
                known::CONFIG_VERSION_LABEL,
                known::CONFIG_KIND_LABEL,
                known::CONFIG_NAMESPACE_LABEL,
                known::CONFIG_NAME_LABEL,
            ]
            .map(|l| m.labels().get(l).cloned().unwrap_or_default())
        };
        Self::replace(existing, &self.manifests, id)
    }
}

/// The review's `spec.objects` as the parent would hold them once applied: a feed object
/// becomes the Manifest the shadow API would store (its `resources` say the kind's plural and
/// scope; a namespaced object without a namespace takes the review's, as kubectl gives it the
/// context's), the Clusternet kinds stay themselves. An object of another kind is refused by
/// name: the review would otherwise answer as if it were not in the file.
fn plan_overlay(
    objects: &[Value],
    resources: &[ShadowResource],
    reserved_ns: &str,
    namespace: &str,
) -> Result<Overlay, String> {
    let mut overlay = Overlay::default();
    for (i, obj) in objects.iter().enumerate() {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let (api_version, kind, name) = (
            text(&obj["apiVersion"]),
            text(&obj["kind"]),
            text(&obj["metadata"]["name"]),
        );
        let what = format!("spec.objects[{i}] ({api_version} {kind} {name:?})");
        if kind.is_empty() || api_version.is_empty() || name.is_empty() {
            return Err(format!(
                "{what}: apiVersion, kind and metadata.name are required"
            ));
        }
        let mut obj = obj.clone();
        let own_ns = text(&obj["metadata"]["namespace"]);
        let (group, version) = crate::pipeline::feeds::group_version(&api_version);
        if group == crate::apis::apps::GROUP {
            let with_ns = |mut o: Value| {
                if own_ns.is_empty() {
                    o["metadata"]["namespace"] = Value::String(namespace.into());
                }
                o
            };
            let parsed = match kind.as_str() {
                "Localization" => {
                    serde_json::from_value(with_ns(obj)).map(|l| overlay.localizations.push(l))
                }
                "HelmChart" => {
                    serde_json::from_value(with_ns(obj)).map(|c| overlay.charts.push(Arc::new(c)))
                }
                "Globalization" => {
                    serde_json::from_value(obj).map(|g| overlay.globalizations.push(g))
                }
                "Subscription" => Ok(()),
                _ => {
                    return Err(format!(
                        "{what}: a what-if takes Localizations, Globalizations and HelmCharts of {}, not {kind}",
                        crate::apis::apps::GROUP
                    ));
                }
            };
            parsed.map_err(|e| format!("{what}: {e}"))?;
            continue;
        }
        let Some(r) = resources.iter().find(|r| {
            r.group == group && r.version == version && r.kind == kind && r.subresource().is_none()
        }) else {
            return Err(format!(
                "{what}: the shadow API serves no such kind, so it cannot be a feed"
            ));
        };
        let ns = match (r.namespaced, own_ns.is_empty()) {
            (true, true) => namespace.to_string(),
            (true, false) => own_ns,
            (false, _) => String::new(),
        };
        if r.namespaced {
            obj["metadata"]["namespace"] = Value::String(ns.clone());
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        trim_template(&mut obj, group, &kind);
        let object_labels: std::collections::BTreeMap<String, String> =
            serde_json::from_value(obj["metadata"]["labels"].clone()).unwrap_or_default();
        let labels = manifest_labels(&object_labels, group, version, &kind, &name, &ns);
        let manifest = build_manifest(reserved_ns, &r.manifest_name(&ns, &name), &labels, obj);
        let manifest: Manifest =
            serde_json::from_value(manifest).map_err(|e| format!("{what}: {e}"))?;
        overlay.manifests.push(Arc::new(manifest));
    }
    Ok(overlay)
}

async fn list<K>(api: Api<K>) -> Result<Vec<Arc<K>>, ApiError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + kube::Resource,
{
    let items = api
        .list(&ListParams::default())
        .await
        .map_err(|e| ApiError::from_kube(&e))?
        .items;
    // objects being deleted stay: the scheduler and the renderer judge them as they do live
    Ok(items.into_iter().map(Arc::new).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resource(group: &str, kind: &str, plural: &str, namespaced: bool) -> ShadowResource {
        ShadowResource {
            group: group.into(),
            version: "v1".into(),
            name: plural.into(),
            singular_name: kind.to_lowercase(),
            namespaced,
            kind: kind.into(),
            verbs: vec!["create".into()],
            storage_version_hash: String::new(),
            origin: super::super::shadow::model::ResourceOrigin::BuiltIn,
        }
    }

    /// The rest of a user's file: a Deployment without a namespace and a Namespace become the
    /// Manifests the shadow API would store (named and labelled as it names them), replacing
    /// the parent's Manifest of the same feed; a Localization stays one; a kind that is no feed
    /// and no override is refused by its place in the file.
    #[test]
    fn a_files_objects_stand_in_for_what_they_would_become() {
        let resources = [
            resource("apps", "Deployment", "deployments", true),
            resource("", "Namespace", "namespaces", false),
        ];
        let objects = [
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "labels": {"app": "web"}, "managedFields": []},
                   "spec": {"replicas": 3}, "status": {"replicas": 1}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "namespace": "x"}}),
            json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
                   "metadata": {"name": "big", "namespace": "clusternet-abcde"},
                   "spec": {"priority": 700, "overrides": []}}),
        ];
        let o =
            plan_overlay(&objects, &resources, "clusternet-reserved", "team").expect("an overlay");
        let names: Vec<String> = o.manifests.iter().map(|m| m.name_any()).collect();
        assert_eq!(names, ["deployments.team.web", "namespaces.team"]);
        let web = &o.manifests[0];
        assert_eq!(web.namespace().as_deref(), Some("clusternet-reserved"));
        assert_eq!(web.labels()[known::CONFIG_NAMESPACE_LABEL], "team");
        assert_eq!(web.labels()[known::CONFIG_KIND_LABEL], "Deployment");
        assert_eq!(
            web.labels()["app"],
            "web",
            "the object's labels are kept, as the shadow API keeps them"
        );
        let template = &web.spec.template;
        assert_eq!(template["metadata"]["namespace"], "team");
        assert!(
            template.get("status").is_none() && template["metadata"].get("managedFields").is_none()
        );
        assert_eq!(o.manifests[1].labels()[known::CONFIG_NAMESPACE_LABEL], "");
        assert_eq!(o.localizations.len(), 1);

        // the file's Deployment replaces the parent's Manifest of that feed, others stay
        let mut old = (*o.manifests[0]).clone();
        old.metadata.name = Some("deployments.team.web-old".into());
        let other = plan_overlay(
            &[json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"}})],
            &resources,
            "clusternet-reserved",
            "team",
        )
        .expect("an overlay")
        .manifests;
        let merged = o.manifests_over(&[Arc::new(old), Arc::clone(&other[0])]);
        let names: Vec<String> = merged.iter().map(|m| m.name_any()).collect();
        assert_eq!(
            names,
            [
                "deployments.team.api",
                "deployments.team.web",
                "namespaces.team"
            ]
        );

        for (bad, says) in [
            (
                json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}}),
                "spec.objects[0] (batch/v1 CronJob \"c\"): the shadow API serves no such kind",
            ),
            (
                json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Base", "metadata": {"name": "b"}}),
                "not Base",
            ),
            (
                json!({"kind": "Deployment"}),
                "apiVersion, kind and metadata.name are required",
            ),
            (
                json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization", "metadata": {"name": "l"}, "spec": {"priority": "high"}}),
                "spec.objects[0]",
            ),
        ] {
            let e = plan_overlay(&[bad], &resources, "clusternet-reserved", "team").unwrap_err();
            assert!(e.contains(says), "{e:?} does not say {says:?}");
        }
    }

    #[test]
    fn a_bare_subscription_is_wrapped_and_takes_the_namespace() {
        let r = parse_review(
            json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
                   "metadata": {"name": "app"},
                   "spec": {"subscribers": [{"clusterAffinity": {}}], "feeds": []}}),
            "team",
        )
        .expect("review");
        assert_eq!(r.kind, "PlacementReview");
        let sub = r.spec.subscription.expect("subscription");
        assert_eq!(sub.metadata.namespace.as_deref(), Some("team"));
    }

    #[test]
    fn bad_reviews_are_refused_with_the_reason() {
        let e = parse_review(json!({"kind": "PlacementReview", "spec": {}}), "ns").unwrap_err();
        assert_eq!(e.code, 422);
        let e = parse_review(json!({"kind": "ConfigMap"}), "ns").unwrap_err();
        assert_eq!(e.code, 400);
        let e = parse_review(
            json!({"kind": "PlacementReview", "spec": {"subscriptionName": "a",
                   "subscription": {"metadata": {"name": "b"}, "spec": {"subscribers": [], "feeds": []}}}}),
            "ns",
        )
        .unwrap_err();
        assert!(e.message.contains("exclusive"), "{}", e.message);
        let e = parse_review(
            json!({"kind": "PlacementReview", "spec": {"subscription":
                   {"metadata": {"name": "b", "namespace": "other"}, "spec": {"subscribers": [], "feeds": []}}}}),
            "ns",
        )
        .unwrap_err();
        assert!(e.message.contains("\"other\""), "{}", e.message);
    }
}
