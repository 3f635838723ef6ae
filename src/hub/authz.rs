//! Delegated authorization: every request the hub serves is checked with a SubjectAccessReview
//! against the parent for the caller the front proxy named, as upstream's delegating authorizer
//! does. Decisions are remembered for 10 s (upstream's webhook cache TTLs).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use super::authn::UserInfo;
use super::status::ApiError;
use super::ttl::TtlCache;

/// What is being asked for, in the API server's terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attributes {
    Resource {
        verb: String,
        group: String,
        version: String,
        resource: String,
        subresource: String,
        namespace: String,
        name: String,
    },
    NonResource {
        verb: String,
        path: String,
    },
}

impl Attributes {
    /// A resource request without subresource.
    pub fn resource(
        verb: &str,
        group: &str,
        version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes::Resource {
            verb: verb.into(),
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Attributes::Resource {
                verb,
                group,
                resource,
                subresource,
                namespace,
                name,
                ..
            } => {
                let mut r = resource.clone();
                if !subresource.is_empty() {
                    r = format!("{r}/{subresource}");
                }
                let mut s = format!("cannot {verb} resource \"{r}\" in API group \"{group}\"");
                if !name.is_empty() {
                    s = format!("{s} (name {name:?})");
                }
                if namespace.is_empty() {
                    format!("{s} at the cluster scope")
                } else {
                    format!("{s} in the namespace \"{namespace}\"")
                }
            }
            Attributes::NonResource { verb, path } => {
                format!("cannot {verb} path \"{path}\"")
            }
        }
    }
}

/// The Kubernetes verb of an HTTP method on a resource path.
pub fn verb_for(method: &http::Method, has_name: bool, watch: bool) -> &'static str {
    match *method {
        http::Method::GET | http::Method::HEAD if watch => "watch",
        http::Method::GET | http::Method::HEAD if has_name => "get",
        http::Method::GET | http::Method::HEAD => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if has_name => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "get",
    }
}

type Key = (String, String, Vec<String>, Attributes);

#[derive(Clone)]
pub struct Authorizer {
    client: kube::Client,
    cache: Arc<TtlCache<Key, Result<(), String>>>,
}

const DECISION_TTL: Duration = Duration::from_secs(10);

impl Authorizer {
    pub fn new(client: kube::Client) -> Self {
        Authorizer {
            client,
            cache: Arc::new(TtlCache::new(DECISION_TTL, 10_000)),
        }
    }

    pub async fn authorize(&self, user: &UserInfo, attrs: Attributes) -> Result<(), ApiError> {
        // upstream's delegating authorizer always allows this group without asking
        if user.groups.iter().any(|g| g == "system:masters") {
            return Ok(());
        }
        // extras are part of the decision (impersonation extras select rules), so they key it too
        let extra_key = serde_json::to_string(&user.extra).unwrap_or_default();
        let key: Key = (
            user.name.clone(),
            extra_key,
            user.groups.clone(),
            attrs.clone(),
        );
        if let Some(decision) = self.cache.get(&key) {
            return decision.map_err(|m| forbidden(user, &attrs, &m));
        }
        let mut spec = SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone().into_iter().collect()),
            ..Default::default()
        };
        match &attrs {
            Attributes::Resource {
                verb,
                group,
                version,
                resource,
                subresource,
                namespace,
                name,
            } => {
                spec.resource_attributes = Some(ResourceAttributes {
                    verb: Some(verb.clone()),
                    group: Some(group.clone()),
                    version: Some(version.clone()),
                    resource: Some(resource.clone()),
                    subresource: Some(subresource.clone()),
                    namespace: Some(namespace.clone()),
                    name: Some(name.clone()),
                    ..Default::default()
                })
            }
            Attributes::NonResource { verb, path } => {
                spec.non_resource_attributes = Some(NonResourceAttributes {
                    verb: Some(verb.clone()),
                    path: Some(path.clone()),
                })
            }
        }
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = SubjectAccessReview {
            spec,
            ..Default::default()
        };
        let result = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                ApiError::internal(format!(
                    "SubjectAccessReview against the parent failed: {e}"
                ))
            })?;
        let decision = match result.status {
            Some(s) if s.allowed => Ok(()),
            Some(s) => Err(s.reason.unwrap_or_default()),
            None => Err(String::new()),
        };
        self.cache.insert(key, decision.clone());
        decision.map_err(|m| forbidden(user, &attrs, &m))
    }
}

fn forbidden(user: &UserInfo, attrs: &Attributes, reason: &str) -> ApiError {
    let mut msg = format!("User \"{}\" {}", user.name, attrs.describe());
    if !reason.is_empty() {
        msg = format!("{msg}: {reason}");
    }
    ApiError::forbidden(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_follow_the_api_server() {
        use http::Method;
        assert_eq!(verb_for(&Method::GET, true, false), "get");
        assert_eq!(verb_for(&Method::GET, false, false), "list");
        assert_eq!(verb_for(&Method::GET, false, true), "watch");
        assert_eq!(verb_for(&Method::DELETE, false, false), "deletecollection");
        assert_eq!(verb_for(&Method::PATCH, true, false), "patch");
    }

    #[test]
    fn forbidden_message_reads_like_rbac() {
        let a = Attributes::Resource {
            verb: "get".into(),
            group: "proxies.clusternet.io".into(),
            version: "v1alpha1".into(),
            resource: "sockets".into(),
            subresource: "proxy".into(),
            namespace: String::new(),
            name: "abc".into(),
        };
        let u = UserInfo {
            name: "bob".into(),
            ..Default::default()
        };
        let e = forbidden(&u, &a, "");
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "User \"bob\" cannot get resource \"sockets/proxy\" in API group \"proxies.clusternet.io\" (name \"abc\") at the cluster scope"
        );
    }
}
