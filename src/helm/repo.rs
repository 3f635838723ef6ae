//! Where a chart is (docs/spec/deployer.md §7.1): an HTTP(S) chart repository answers with its
//! `index.yaml`, an OCI registry with the tags of `<repo>/<chart>`. As upstream: TLS verification
//! off, a 15 s timeout, plain HTTP for OCI when `plainHTTP`, basic auth for HTTP repositories from
//! the chart's `chartPullSecret`, an empty version meaning the latest, and Helm's own texts for
//! what is not found. The lookups over fetched documents are pure ([`find_in_index`],
//! [`find_in_tags`]); [`locate`] does the fetching.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde::Deserialize;

use crate::apis::HelmOptions;

/// How long one request to a repository may take (upstream's 15 s).
pub const TIMEOUT: Duration = Duration::from_secs(15);
/// Redirects followed (chart repositories are often static sites behind one).
const MAX_REDIRECTS: usize = 5;
/// An index larger than this is refused rather than held in memory.
const MAX_BODY: usize = 64 << 20;

/// Basic-auth credentials from a `chartPullSecret` (keys `username` and `password`).
#[derive(Clone, PartialEq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A `chartPullSecret` that cannot be used: `secret` is `<namespace>/<name>`.
#[derive(Debug, thiserror::Error)]
#[error("{secret}: {what}")]
pub struct CredentialsError {
    pub secret: String,
    pub what: String,
}

/// The basic-auth credentials of `options.chartPullSecret` (keys `username` and `password`), read
/// with `client`; its namespace defaults to `namespace` (the object's own). `None` when the options
/// name no secret.
pub async fn read_credentials(
    client: &kube::Client,
    options: &HelmOptions,
    namespace: &str,
) -> Result<Option<Credentials>, CredentialsError> {
    let s = &options.chart_pull_secret;
    if s.name.is_empty() {
        return Ok(None);
    }
    let ns = if s.namespace.is_empty() {
        namespace
    } else {
        &s.namespace
    };
    let bad = |what: String| CredentialsError {
        secret: format!("{ns}/{}", s.name),
        what,
    };
    let secret = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
        .get_opt(&s.name)
        .await
        .map_err(|e| bad(format!("cannot be read: {e}")))?
        .ok_or_else(|| bad("not found".into()))?;
    let data = secret.data.unwrap_or_default();
    let field = |k: &str| {
        data.get(k)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .ok_or_else(|| bad(format!("has no key {k:?}")))
    };
    Ok(Some(Credentials {
        username: field("username")?,
        password: field("password")?,
    }))
}

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    entries: std::collections::BTreeMap<String, Vec<IndexEntry>>,
}

#[derive(Deserialize)]
struct IndexEntry {
    #[serde(default)]
    version: String,
}

/// A chart version as Helm (Masterminds semver) reads it: a leading `v` and missing minor or
/// patch numbers are tolerated.
fn lenient_version(v: &str) -> Option<semver::Version> {
    let v = v.trim().trim_start_matches('v');
    if let Ok(parsed) = semver::Version::parse(v) {
        return Some(parsed);
    }
    let (core, rest) = match v.find(['-', '+']) {
        Some(i) => v.split_at(i),
        None => (v, ""),
    };
    let parts = core.split('.').count();
    if parts == 0 || parts > 3 {
        return None;
    }
    let padded = format!("{core}{}{rest}", ".0".repeat(3 - parts));
    semver::Version::parse(&padded).ok()
}

/// A Helm version constraint (`^1.2`, `~1.2.3`, `>= 1.2 < 2`, `1.x`, `a || b`) as alternatives of
/// semver requirements.
fn constraint(version: &str) -> Option<Vec<semver::VersionReq>> {
    version
        .split("||")
        .map(|alt| {
            // Masterminds separates ANDed comparators by spaces or commas, and allows a space
            // between an operator and its version
            let mut parts: Vec<String> = Vec::new();
            let mut pending = String::new();
            for token in alt.split([' ', ',']).filter(|t| !t.is_empty()) {
                if token.chars().all(|c| "<>=~^!".contains(c)) {
                    pending.push_str(token);
                } else {
                    parts.push(format!("{pending}{token}"));
                    pending.clear();
                }
            }
            semver::VersionReq::parse(&parts.join(", ")).ok()
        })
        .collect()
}

/// Looks `chart` at `version` up in an `index.yaml` (Helm's `IndexFile.Get`): an empty version
/// is the latest, an exact version string wins, else the latest that satisfies the version as a
/// constraint. The version found, or Helm's error text (`repo` names the repository in it).
pub fn find_in_index(
    index: &[u8],
    repo: &str,
    chart: &str,
    version: &str,
) -> Result<String, String> {
    let index: Index = crate::kube_ext::yaml::from_slice(index).map_err(|e| {
        format!("looks like \"{repo}\" is not a valid chart repository or cannot be reached: {e}")
    })?;
    let not_found = || {
        if version.is_empty() {
            format!("chart \"{chart}\" not found in {repo} repository")
        } else {
            format!("chart \"{chart}\" version \"{version}\" not found in {repo} repository")
        }
    };
    let Some(entries) = index.entries.get(chart).filter(|e| !e.is_empty()) else {
        return Err(not_found());
    };
    if let Some(exact) = entries.iter().find(|e| e.version == version) {
        return Ok(exact.version.clone());
    }
    let mut versions: Vec<(semver::Version, &str)> = entries
        .iter()
        .filter_map(|e| Some((lenient_version(&e.version)?, e.version.as_str())))
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    if version.is_empty() {
        // "*": the latest that is not a pre-release
        return versions
            .iter()
            .find(|(v, _)| v.pre.is_empty())
            .map(|(_, v)| v.to_string())
            .ok_or_else(not_found);
    }
    let Some(reqs) = constraint(version) else {
        return Err(not_found());
    };
    versions
        .iter()
        .find(|(v, _)| reqs.iter().any(|r| r.matches(v)))
        .map(|(_, v)| v.to_string())
        .ok_or_else(not_found)
}

/// Whether an OCI repository's tags hold `version` (upstream: exact equality; OCI tags cannot
/// carry `+`, which Helm writes as `_`).
pub fn find_in_tags(tags: &[String], repo: &str, chart: &str, version: &str) -> Result<(), String> {
    let tag = version.replace('+', "_");
    if !version.is_empty() && tags.contains(&tag) {
        Ok(())
    } else {
        Err(format!(
            "not found a version matched {version} for chart {}/{chart}",
            repo.trim_end_matches('/')
        ))
    }
}

#[derive(Deserialize)]
struct Tags {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

/// Finds the chart of `opts`: `Ok` with the version found, or the reason it is not there.
pub async fn locate(opts: &HelmOptions, auth: Option<&Credentials>) -> Result<String, String> {
    if opts.chart.is_empty() {
        return Err("the chart name is empty".into());
    }
    match opts.repo.strip_prefix("oci://") {
        Some(rest) => {
            let (host, path) = rest
                .trim_end_matches('/')
                .split_once('/')
                .unwrap_or((rest, ""));
            let name = if path.is_empty() {
                opts.chart.clone()
            } else {
                format!("{path}/{}", opts.chart)
            };
            let scheme = if opts.plain_http == Some(true) {
                "http"
            } else {
                "https"
            };
            let url = format!("{scheme}://{host}/v2/{name}/tags/list");
            let body = get_registry(&url).await?;
            let tags: Tags = serde_json::from_slice(&body)
                .map_err(|e| format!("unexpected answer from {url}: {e}"))?;
            find_in_tags(
                &tags.tags.unwrap_or_default(),
                &opts.repo,
                &opts.chart,
                &opts.version,
            )?;
            Ok(opts.version.clone())
        }
        None => {
            let base = opts.repo.trim_end_matches('/');
            if !(base.starts_with("http://") || base.starts_with("https://")) {
                return Err(format!(
                    "could not find protocol handler for: {}",
                    base.split("://").next().unwrap_or(base)
                ));
            }
            let url = format!("{base}/index.yaml");
            let mut headers = HeaderMap::new();
            if let Some(a) = auth {
                use base64::Engine;
                let token = base64::engine::general_purpose::STANDARD
                    .encode(format!("{}:{}", a.username, a.password));
                if let Ok(v) = HeaderValue::from_str(&format!("Basic {token}")) {
                    headers.insert(header::AUTHORIZATION, v);
                }
            }
            let (status, _, body) = get(&url, &headers).await?;
            if !status.is_success() {
                return Err(format!(
                    "looks like \"{}\" is not a valid chart repository or cannot be reached: failed to fetch {url} : {status}",
                    opts.repo
                ));
            }
            find_in_index(&body, &opts.repo, &opts.chart, &opts.version)
        }
    }
}

/// GET from a registry, answering its anonymous bearer-token challenge once (as registries that
/// serve public charts ask).
async fn get_registry(url: &str) -> Result<Bytes, String> {
    let (status, headers, body) = get(url, &HeaderMap::new()).await?;
    if status == StatusCode::UNAUTHORIZED
        && let Some(challenge) = headers
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
        && let Some(token_url) = token_url(challenge)
    {
        let (s, _, token_body) = get(&token_url, &HeaderMap::new()).await?;
        #[derive(Deserialize)]
        struct Token {
            #[serde(default)]
            token: String,
            #[serde(default)]
            access_token: String,
        }
        let t: Token = serde_json::from_slice(&token_body)
            .map_err(|e| format!("token from {token_url} ({s}): {e}"))?;
        let token = if t.token.is_empty() {
            t.access_token
        } else {
            t.token
        };
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
            h.insert(header::AUTHORIZATION, v);
        }
        let (status, _, body) = get(url, &h).await?;
        return ok_body(url, status, body);
    }
    ok_body(url, status, body)
}

fn ok_body(url: &str, status: StatusCode, body: Bytes) -> Result<Bytes, String> {
    if status.is_success() {
        Ok(body)
    } else if status == StatusCode::NOT_FOUND {
        Err(format!("{url}: not found"))
    } else {
        Err(format!("GET {url}: {status}"))
    }
}

/// The token URL of a `WWW-Authenticate: Bearer realm="…",service="…",scope="…"` challenge.
pub fn token_url(challenge: &str) -> Option<String> {
    let params = challenge.strip_prefix("Bearer ")?;
    let mut realm = None;
    let mut query = Vec::new();
    for part in params.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        let v = v.trim_matches('"');
        if k == "realm" {
            realm = Some(v.to_string());
        } else {
            query.push(format!(
                "{k}={}",
                percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC)
            ));
        }
    }
    let realm = realm?;
    Some(if query.is_empty() {
        realm
    } else {
        format!("{realm}?{}", query.join("&"))
    })
}

/// One GET (following redirects), bounded by [`TIMEOUT`].
async fn get(url: &str, headers: &HeaderMap) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    tokio::time::timeout(TIMEOUT, async {
        let mut url = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let (status, got, body) = get_once(&url, headers).await?;
            if status.is_redirection()
                && let Some(next) = got.get(header::LOCATION).and_then(|v| v.to_str().ok())
            {
                url = resolve(&url, next);
                continue;
            }
            return Ok((status, got, body));
        }
        Err(format!("GET {url}: too many redirects"))
    })
    .await
    .map_err(|_| format!("GET {url}: timed out after {TIMEOUT:?}"))?
}

/// `next` (a Location header) against `base`.
fn resolve(base: &str, next: &str) -> String {
    if next.contains("://") {
        return next.to_string();
    }
    let origin_end = base
        .find("://")
        .and_then(|i| base[i + 3..].find('/').map(|j| i + 3 + j))
        .unwrap_or(base.len());
    if next.starts_with('/') {
        format!("{}{next}", &base[..origin_end])
    } else {
        let dir = base
            .rfind('/')
            .filter(|i| *i >= origin_end)
            .unwrap_or(base.len());
        format!("{}/{next}", &base[..dir])
    }
}

async fn get_once(
    url: &str,
    headers: &HeaderMap,
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    let uri: Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => return Err(format!("{url}: unsupported scheme {other:?}")),
    };
    let host = uri
        .host()
        .ok_or_else(|| format!("{url}: no host"))?
        .to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let mut req = Request::get(path)
        .header(
            header::HOST,
            uri.authority().map_or(host.as_str(), |a| a.as_str()),
        )
        .header(header::USER_AGENT, "clusternet")
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("GET {url}: {e}"))?;
    req.headers_mut().extend(headers.clone());
    if tls {
        let config = crate::runtime::serving::insecure_client_config(None)
            .map_err(|e| format!("GET {url}: {e}"))?;
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(
            host.trim_matches(['[', ']']).to_string(),
        )
        .map_err(|e| format!("GET {url}: {e}"))?;
        let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("GET {url}: TLS: {e}"))?;
        send(url, TokioIo::new(stream), req).await
    } else {
        send(url, TokioIo::new(tcp), req).await
    }
}

async fn send<T>(
    url: &str,
    io: T,
    req: Request<Empty<Bytes>>,
) -> Result<(StatusCode, HeaderMap, Bytes), String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let (parts, body) = resp.into_parts();
    let limited = http_body_util::Limited::new(body, MAX_BODY);
    let bytes = limited
        .collect()
        .await
        .map_err(|e| format!("GET {url}: reading the answer: {e}"))?
        .to_bytes();
    Ok((parts.status, parts.headers, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INDEX: &str = r#"
apiVersion: v1
entries:
  mysql:
    - version: 9.4.1
    - version: 10.1.0
    - version: 10.2.0-rc.1
    - version: "8.8"
  empty: []
generated: "2026-12-01T10:00:00Z"
"#;

    #[test]
    fn an_index_answers_as_helm_does() {
        let find = |chart: &str, version: &str| {
            find_in_index(INDEX.as_bytes(), "http://127.0.0.1:8879", chart, version)
        };
        // empty: the latest release (not a pre-release)
        assert_eq!(find("mysql", ""), Ok("10.1.0".into()));
        assert_eq!(find("mysql", "9.4.1"), Ok("9.4.1".into()));
        assert_eq!(find("mysql", "8.8"), Ok("8.8".into()));
        // constraints, Masterminds style
        assert_eq!(find("mysql", "^9.0"), Ok("9.4.1".into()));
        assert_eq!(find("mysql", ">= 8.0 < 10"), Ok("9.4.1".into()));
        assert_eq!(find("mysql", "~8.8 || ^10"), Ok("10.1.0".into()));
        assert_eq!(
            find("mysql", "11.0.0"),
            Err(
                "chart \"mysql\" version \"11.0.0\" not found in http://127.0.0.1:8879 repository"
                    .into()
            )
        );
        assert_eq!(
            find("nginx", ""),
            Err("chart \"nginx\" not found in http://127.0.0.1:8879 repository".into())
        );
        assert!(find("empty", "").is_err());
        assert!(
            find_in_index(b"<html>", "http://x", "mysql", "")
                .is_err_and(|e| e.contains("not a valid chart repository"))
        );
    }

    #[test]
    fn oci_tags_match_exactly_with_helms_plus_for_underscore() {
        let tags = vec!["1.0.0".to_string(), "1.1.0_build.2".to_string()];
        assert_eq!(
            find_in_tags(&tags, "oci://r/charts", "app", "1.0.0"),
            Ok(())
        );
        assert_eq!(
            find_in_tags(&tags, "oci://r/charts", "app", "1.1.0+build.2"),
            Ok(())
        );
        assert_eq!(
            find_in_tags(&tags, "oci://r/charts/", "app", "2.0.0"),
            Err("not found a version matched 2.0.0 for chart oci://r/charts/app".into())
        );
        assert!(find_in_tags(&tags, "oci://r", "app", "").is_err());
    }

    #[test]
    fn challenges_redirects_and_versions() {
        assert_eq!(
            token_url(r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:charts/app:pull""#),
            Some("https://auth.example/token?service=registry%2Eexample&scope=repository%3Acharts%2Fapp%3Apull".into())
        );
        assert_eq!(token_url("Basic realm=x"), None);
        assert_eq!(
            resolve("http://h:1/a/index.yaml", "/b/index.yaml"),
            "http://h:1/b/index.yaml"
        );
        assert_eq!(
            resolve("http://h:1/a/index.yaml", "c.yaml"),
            "http://h:1/a/c.yaml"
        );
        assert_eq!(resolve("http://h/a", "https://o/x"), "https://o/x");
        assert_eq!(
            lenient_version("v1.2").map(|v| v.to_string()),
            Some("1.2.0".into())
        );
        assert_eq!(
            lenient_version("1-rc1").map(|v| v.to_string()),
            Some("1.0.0-rc1".into())
        );
        assert_eq!(lenient_version("x.y"), None);
    }
}
