//! Who is calling the hub. The parent's aggregator (front proxy) authenticates users and forwards
//! their identity in request headers over a TLS connection that presents a client certificate
//! signed by the request-header CA; the hub trusts those headers only from such a connection whose
//! certificate's common name is one of the allowed names (all names when the list is empty), as a
//! Kubernetes delegating authenticator does. Anything else must bring a bearer token, which the
//! parent checks with a TokenReview. Settings come from the parent's
//! `kube-system/extension-apiserver-authentication` ConfigMap. The caller's extras also say who it
//! is in a child (`clusternet-token`, a client certificate, impersonation): its [`ChildIdentity`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use tokio_rustls::rustls::RootCertStore;
use tokio_rustls::rustls::pki_types::CertificateDer;

use super::status::ApiError;
use super::ttl::TtlCache;
use crate::apis::known;

/// The authenticated caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// Extra attributes, keys lower-cased (as the front proxy sends them).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The request-header settings of the parent (`--requestheader-*` of kube-apiserver).
#[derive(Debug, Clone)]
pub struct RequestHeaderConfig {
    pub client_ca_pem: String,
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
    pub uid_headers: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthnError {
    #[error("reading kube-system/extension-apiserver-authentication: {0}")]
    ConfigMap(#[source] kube::Error),
    #[error("extension-apiserver-authentication: {key} is not a JSON list of strings: {source}")]
    BadList {
        key: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the request-header client CA holds no usable certificate")]
    NoCa,
    #[error("building the client certificate verifier: {0}")]
    Verifier(String),
}

impl RequestHeaderConfig {
    /// Reads the parent's published request-header settings; `None` when the parent has no front
    /// proxy configured (then only bearer tokens authenticate).
    pub async fn from_parent(client: &kube::Client) -> Result<Option<Self>, AuthnError> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
        let cm = api
            .get_opt("extension-apiserver-authentication")
            .await
            .map_err(AuthnError::ConfigMap)?;
        let Some(data) = cm.and_then(|c| c.data) else {
            return Ok(None);
        };
        Self::from_data(&data)
    }

    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Option<Self>, AuthnError> {
        let Some(ca) = data
            .get("requestheader-client-ca-file")
            .filter(|s| !s.trim().is_empty())
        else {
            return Ok(None);
        };
        let list = |key: &'static str, default: &[&str]| -> Result<Vec<String>, AuthnError> {
            match data.get(key).map(|s| s.trim()).filter(|s| !s.is_empty()) {
                None => Ok(default.iter().map(|s| s.to_string()).collect()),
                Some(s) => {
                    serde_json::from_str(s).map_err(|source| AuthnError::BadList { key, source })
                }
            }
        };
        Ok(Some(RequestHeaderConfig {
            client_ca_pem: ca.clone(),
            allowed_names: list("requestheader-allowed-names", &[])?,
            username_headers: list("requestheader-username-headers", &["X-Remote-User"])?,
            group_headers: list("requestheader-group-headers", &["X-Remote-Group"])?,
            extra_prefixes: list("requestheader-extra-headers-prefix", &["X-Remote-Extra-"])?,
            uid_headers: list("requestheader-uid-headers", &[])?,
        }))
    }

    pub fn roots(&self) -> Result<RootCertStore, AuthnError> {
        let mut roots = RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut self.client_ca_pem.as_bytes()).flatten() {
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(AuthnError::NoCa);
        }
        Ok(roots)
    }

    /// The identity the front proxy forwarded, if the connection's verified client certificate
    /// may forward identities at all.
    pub fn identity(&self, headers: &HeaderMap, client_cn: &str) -> Result<UserInfo, ApiError> {
        if !self.allowed_names.is_empty() && !self.allowed_names.iter().any(|n| n == client_cn) {
            return Err(ApiError::unauthorized(format!(
                "client certificate common name {client_cn:?} is not allowed to forward identities"
            )));
        }
        let first = |names: &[String]| {
            names.iter().find_map(|h| {
                headers
                    .get_all(h.as_str())
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find(|v| !v.is_empty())
                    .map(str::to_string)
            })
        };
        let name = first(&self.username_headers)
            .ok_or_else(|| ApiError::unauthorized("the front proxy sent no user name header"))?;
        let uid = first(&self.uid_headers).unwrap_or_default();
        let mut groups = Vec::new();
        for h in &self.group_headers {
            for v in headers.get_all(h.as_str()) {
                if let Ok(v) = v.to_str() {
                    groups.push(v.to_string());
                }
            }
        }
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, value) in headers {
            let key = key.as_str();
            for prefix in &self.extra_prefixes {
                if key.len() > prefix.len()
                    && key[..prefix.len()].eq_ignore_ascii_case(prefix)
                    && let Ok(v) = value.to_str()
                {
                    let extra_key = unescape(&key[prefix.len()..]).to_lowercase();
                    extra.entry(extra_key).or_default().push(v.to_string());
                }
            }
        }
        Ok(UserInfo {
            name,
            uid,
            groups,
            extra,
        })
    }
}

/// Header names that carry forwarded identities; removed before anything leaves the hub.
pub fn is_identity_header(name: &str, cfg: Option<&RequestHeaderConfig>) -> bool {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("x-remote-") || lower.starts_with("impersonate-") {
        return true;
    }
    cfg.is_some_and(|c| {
        c.username_headers
            .iter()
            .chain(&c.group_headers)
            .chain(&c.uid_headers)
            .any(|h| h.eq_ignore_ascii_case(&lower))
            || c.extra_prefixes
                .iter()
                .any(|p| lower.starts_with(&p.to_ascii_lowercase()))
    })
}

/// Extra keys travel URL-escaped in header names (`%2F` for `/`), like Go's `url.PathUnescape`.
fn unescape(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The subject common name of a DER certificate (the hub needs this one field of an already
/// verified certificate), read by the same DER reader as the certificates' expiry.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    crate::runtime::certs::parse_der(cert.as_ref(), "client certificate")
        .ok()?
        .subject_cn
}

/// Bearer tokens checked with a TokenReview against the parent, remembered briefly (upstream's
/// `--authentication-token-webhook-cache-ttl` is 10 s).
#[derive(Clone)]
pub struct TokenAuthenticator {
    client: kube::Client,
    cache: Arc<TtlCache<String, Option<UserInfo>>>,
}

const TOKEN_CACHE_TTL: Duration = Duration::from_secs(10);

impl TokenAuthenticator {
    pub fn new(client: kube::Client) -> Self {
        TokenAuthenticator {
            client,
            cache: Arc::new(TtlCache::new(TOKEN_CACHE_TTL, 10_000)),
        }
    }

    pub async fn authenticate(&self, token: &str) -> Result<UserInfo, ApiError> {
        if let Some(user) = self.cache.get(&token.to_string()) {
            return user.ok_or_else(|| ApiError::unauthorized("invalid bearer token"));
        }
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        let result = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                ApiError::internal(format!("TokenReview against the parent failed: {e}"))
            })?;
        let user = result
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
            .map(|u| UserInfo {
                name: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default().into_iter().collect(),
            });
        self.cache.insert(token.to_string(), user.clone());
        user.ok_or_else(|| ApiError::unauthorized("invalid bearer token"))
    }
}

/// The child-facing credentials and headers derived from the caller's user extras (hub.md §2.3).
/// Unlike upstream's Go code, the `clusternet-*` prefix is matched case-insensitively, so
/// `--clusternet-as` really impersonates in the child.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ChildIdentity {
    pub bearer: Option<String>,
    pub client_cert: Option<(Vec<u8>, Vec<u8>)>,
    pub headers: Vec<(String, String)>,
}

impl ChildIdentity {
    /// Nothing handed over: no credentials and no child impersonation.
    pub fn is_empty(&self) -> bool {
        self.bearer.is_none() && self.client_cert.is_none() && self.headers.is_empty()
    }
}

pub fn child_identity(extra: &BTreeMap<String, Vec<String>>) -> Result<ChildIdentity, ApiError> {
    let lower = |s: &str| s.to_ascii_lowercase();
    let get = |k: &str| extra.get(&lower(k)).and_then(|v| v.first()).cloned();
    let mut id = ChildIdentity {
        bearer: get(known::CLUSTERNET_TOKEN_EXTRA),
        ..Default::default()
    };
    let b64 = |what: &str, v: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(v.trim())
            .map_err(|e| ApiError::bad_request(format!("{what} is not valid base64: {e}")))
    };
    match (
        get(known::CLUSTERNET_CERTIFICATE_EXTRA),
        get(known::CLUSTERNET_PRIVATE_KEY_EXTRA),
    ) {
        (Some(c), Some(k)) => {
            let cert = b64(known::CLUSTERNET_CERTIFICATE_EXTRA, &c)?;
            let key = b64(known::CLUSTERNET_PRIVATE_KEY_EXTRA, &k)?;
            // a broken pair is the caller's mistake: say so now rather than fail the handshake
            crate::runtime::serving::insecure_client_config(Some((&cert, &key))).map_err(|e| {
                ApiError::bad_request(format!("invalid child client certificate/key pair: {e}"))
            })?;
            id.client_cert = Some((cert, key));
        }
        (None, None) => {}
        _ => {
            return Err(ApiError::bad_request(
                "Clusternet-Certificate and Clusternet-PrivateKey must be given together",
            ));
        }
    }
    let prefix = lower(known::PROXY_EXTRA_HEADER_PREFIX);
    let consumed = [
        lower(known::CLUSTERNET_TOKEN_EXTRA),
        lower(known::CLUSTERNET_CERTIFICATE_EXTRA),
        lower(known::CLUSTERNET_PRIVATE_KEY_EXTRA),
    ];
    for (key, values) in extra {
        if let Some(rest) = key.strip_prefix(&prefix)
            && !consumed.contains(key)
            && !rest.is_empty()
        {
            let name = canonical_header(rest);
            for v in values {
                id.headers.push((name.clone(), v.clone()));
            }
        }
    }
    Ok(id)
}

/// `impersonate-user` -> `Impersonate-User`.
fn canonical_header(name: &str) -> String {
    name.split('-')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(allowed: &[&str]) -> RequestHeaderConfig {
        RequestHeaderConfig {
            client_ca_pem: String::new(),
            allowed_names: allowed.iter().map(|s| s.to_string()).collect(),
            username_headers: vec!["X-Remote-User".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_prefixes: vec!["X-Remote-Extra-".into()],
            uid_headers: vec![],
        }
    }

    #[test]
    fn extras_become_child_credentials_and_impersonation() {
        let mut extra = BTreeMap::new();
        extra.insert(
            "clusternet-token".to_string(),
            vec!["child-token".to_string()],
        );
        extra.insert(
            "clusternet-impersonate-user".to_string(),
            vec!["jane".to_string()],
        );
        extra.insert(
            "clusternet-impersonate-group".to_string(),
            vec!["a".to_string(), "b".to_string()],
        );
        extra.insert("other".to_string(), vec!["x".to_string()]);
        let id = child_identity(&extra).unwrap();
        assert_eq!(id.bearer.as_deref(), Some("child-token"));
        assert_eq!(
            id.headers,
            vec![
                ("Impersonate-Group".to_string(), "a".to_string()),
                ("Impersonate-Group".to_string(), "b".to_string()),
                ("Impersonate-User".to_string(), "jane".to_string()),
            ]
        );
    }

    #[test]
    fn bad_certificate_extras_are_400() {
        let mut extra = BTreeMap::new();
        extra.insert("clusternet-certificate".to_string(), vec!["!!".to_string()]);
        extra.insert(
            "clusternet-privatekey".to_string(),
            vec!["AAAA".to_string()],
        );
        assert_eq!(child_identity(&extra).unwrap_err().code, 400);
        extra.insert(
            "clusternet-certificate".to_string(),
            vec![base64::engine::general_purpose::STANDARD.encode("not pem")],
        );
        assert_eq!(child_identity(&extra).unwrap_err().code, 400);
        extra.remove("clusternet-privatekey");
        assert_eq!(child_identity(&extra).unwrap_err().code, 400);
    }

    #[test]
    fn front_proxy_headers_become_the_identity() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", "clusternet".parse().unwrap());
        h.append("x-remote-group", "system:authenticated".parse().unwrap());
        h.append("x-remote-group", "dev".parse().unwrap());
        h.insert("x-remote-extra-clusternet-token", "abc".parse().unwrap());
        h.insert(
            "X-Remote-Extra-Clusternet-Impersonate-Group",
            "g1".parse().unwrap(),
        );
        h.insert("x-remote-extra-example.com%2fteam", "blue".parse().unwrap());
        let u = cfg(&["front-proxy-client"])
            .identity(&h, "front-proxy-client")
            .unwrap();
        assert_eq!(u.name, "clusternet");
        assert_eq!(u.groups, vec!["system:authenticated", "dev"]);
        assert_eq!(u.extra["clusternet-token"], vec!["abc"]);
        assert_eq!(u.extra["clusternet-impersonate-group"], vec!["g1"]);
        assert_eq!(u.extra["example.com/team"], vec!["blue"]);
    }

    #[test]
    fn a_certificate_not_in_the_allowed_names_cannot_forward_identities() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", "admin".parse().unwrap());
        let e = cfg(&["front-proxy-client"])
            .identity(&h, "mallory")
            .unwrap_err();
        assert_eq!(e.code, 401);
        assert!(
            cfg(&[]).identity(&h, "anyone").is_ok(),
            "empty list allows all"
        );
        let e = cfg(&[]).identity(&HeaderMap::new(), "x").unwrap_err();
        assert_eq!(e.code, 401);
    }

    #[test]
    fn configmap_lists_are_json() {
        let mut data = BTreeMap::new();
        data.insert("requestheader-client-ca-file".into(), "PEM".into());
        data.insert(
            "requestheader-allowed-names".into(),
            "[\"front-proxy-client\"]".into(),
        );
        data.insert(
            "requestheader-username-headers".into(),
            "[\"X-Remote-User\"]".into(),
        );
        let c = RequestHeaderConfig::from_data(&data).unwrap().unwrap();
        assert_eq!(c.allowed_names, vec!["front-proxy-client"]);
        assert_eq!(c.group_headers, vec!["X-Remote-Group"]);
        data.insert("requestheader-group-headers".into(), "not json".into());
        assert!(RequestHeaderConfig::from_data(&data).is_err());
        assert!(
            RequestHeaderConfig::from_data(&BTreeMap::new())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn common_name_of_a_generated_certificate() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:masters");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "front-proxy-client");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            common_name(cert.der()).as_deref(),
            Some("front-proxy-client")
        );
        assert_eq!(common_name(&CertificateDer::from(vec![0x30, 0x85])), None);
        assert_eq!(common_name(&CertificateDer::from(Vec::new())), None);
    }

    #[test]
    fn escaped_extra_keys() {
        assert_eq!(unescape("a%2fb"), "a/b");
        assert_eq!(unescape("a%2"), "a%2");
        assert_eq!(unescape("%zz"), "%zz");
    }
}
