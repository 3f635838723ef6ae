//! Kubeconfig handling for `kubectl clusternet`: resolves the parent credentials from the kubeconfig
//! plus the kubectl config flags (what upstream gets from `genericclioptions.ConfigFlags`), reads
//! the child identity from `--child-kubeconfig`, and renders the kubeconfigs the real kubectl is run
//! with: a credential-less one for the local shadow proxy (parent mode) and one pointing at the
//! hub's socket proxy with `clusternet` impersonation extras (child mode, upstream
//! `ClusternetOptions.WrapConfigFn`).

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use secrecy::{ExposeSecret, SecretString};

use crate::kube_ext::yaml::{self, YamlError};
use crate::plugin::args::{ConfigFlags, OwnFlags};

/// The user the caller impersonates in child mode; the hub only honours the `Clusternet-*` extras
/// for it (hub.md §2.3).
pub const CLUSTERNET_USER: &str = "clusternet";
const EXTRA_TOKEN: &str = "Clusternet-Token";
const EXTRA_CERTIFICATE: &str = "Clusternet-Certificate";
const EXTRA_PRIVATE_KEY: &str = "Clusternet-PrivateKey";
const EXTRA_IMPERSONATE_USER: &str = "Clusternet-Impersonate-User";
const EXTRA_IMPERSONATE_UID: &str = "Clusternet-Impersonate-Uid";
const EXTRA_IMPERSONATE_GROUP: &str = "Clusternet-Impersonate-Group";

/// Name of the single cluster, user and context in generated kubeconfigs.
const GENERATED_NAME: &str = "clusternet";

#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("cannot read kubeconfig {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("cannot read {what} {path}: {source}")]
    File {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("context \"{0}\" does not exist")]
    MissingContext(String),
    #[error("cluster \"{0}\" does not exist")]
    MissingCluster(String),
    #[error("user \"{0}\" does not exist")]
    MissingUser(String),
    #[error(
        "no configuration has been provided: set a current context in the kubeconfig or use --context or --server"
    )]
    NoConfiguration,
    #[error("no server found for cluster \"{0}\"")]
    NoServer(String),
    #[error("child kubeconfig {path}: {reason}")]
    Child { path: String, reason: String },
    #[error("cannot write the temporary kubeconfig: {0}")]
    Temp(#[source] std::io::Error),
    #[error("cannot render the temporary kubeconfig: {0}")]
    Render(#[from] YamlError),
}

/// The parent connection after kubeconfig selection and flag overrides.
#[derive(Debug, Clone)]
pub struct Parent {
    pub cluster: Cluster,
    pub auth: AuthInfo,
    /// The selected context's namespace, kept as the generated context's default namespace.
    pub namespace: Option<String>,
}

impl Parent {
    pub fn server(&self) -> &str {
        self.cluster.server.as_deref().unwrap_or_default()
    }

    /// A one-context kubeconfig of exactly this connection, for `kube::Config`.
    pub fn to_kubeconfig(&self) -> Kubeconfig {
        single_context(
            self.cluster.clone(),
            self.auth.clone(),
            self.namespace.clone(),
        )
    }
}

/// Loads the kubeconfig kubectl would load: `--kubeconfig`, else `KUBECONFIG` (merged), else
/// `~/.kube/config` (absent means empty, so `--server` alone still works).
pub fn load_kubeconfig(flags: &ConfigFlags) -> Result<Kubeconfig, KubeconfigError> {
    let unreadable = |path: String, e: kube::config::KubeconfigError| KubeconfigError::Unreadable {
        path,
        reason: kube_reason(e),
    };
    if let Some(path) = flags.kubeconfig.as_deref().filter(|p| !p.is_empty()) {
        return Kubeconfig::read_from(path).map_err(|e| unreadable(path.to_string(), e));
    }
    if let Some(env) = std::env::var_os("KUBECONFIG") {
        // kube's own loader panics on NUL; Unix environment strings cannot hold one anyway
        match Kubeconfig::from_env() {
            Ok(Some(config)) => return Ok(config),
            Ok(None) => {}
            Err(e) => return Err(unreadable(env.to_string_lossy().into_owned(), e)),
        }
    }
    let Some(home) = std::env::var_os("HOME") else {
        return Ok(Kubeconfig::default());
    };
    let path = PathBuf::from(home).join(".kube").join("config");
    if !path.exists() {
        return Ok(Kubeconfig::default());
    }
    Kubeconfig::read_from(&path).map_err(|e| unreadable(path.display().to_string(), e))
}

/// kube's read error repeats the path, which the callers already print.
fn kube_reason(e: kube::config::KubeconfigError) -> String {
    match e {
        kube::config::KubeconfigError::ReadConfig(io, _) => io.to_string(),
        other => other.to_string(),
    }
}

/// Selects context, cluster and user the way client-go's `DirectClientConfig` does and applies the
/// flag overrides.
pub fn resolve_parent(config: &Kubeconfig, flags: &ConfigFlags) -> Result<Parent, KubeconfigError> {
    let context_name = flags
        .context
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| config.current_context.clone().filter(|c| !c.is_empty()));
    let context = match &context_name {
        Some(name) => Some(
            config
                .contexts
                .iter()
                .find(|c| &c.name == name)
                .map(|c| c.context.clone().unwrap_or_default())
                .ok_or_else(|| KubeconfigError::MissingContext(name.clone()))?,
        ),
        None => None,
    };

    let cluster_name = flags
        .cluster
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| context.as_ref().map(|c| c.cluster.clone()));
    let mut cluster = match &cluster_name {
        Some(name) => match config.clusters.iter().find(|c| &c.name == name) {
            Some(named) => named.cluster.clone().unwrap_or_default(),
            // a context may name a cluster that `--server` replaces entirely
            None if flags.server.is_some() => Cluster::default(),
            None => return Err(KubeconfigError::MissingCluster(name.clone())),
        },
        None if flags.server.is_some() => Cluster::default(),
        None => return Err(KubeconfigError::NoConfiguration),
    };

    let user_name = flags
        .user
        .clone()
        .filter(|u| !u.is_empty())
        .or_else(|| context.as_ref().and_then(|c| c.user.clone()));
    let mut auth = match &user_name {
        Some(name) => match config.auth_infos.iter().find(|a| &a.name == name) {
            Some(named) => named.auth_info.clone().unwrap_or_default(),
            None if flags.user.is_some() => {
                return Err(KubeconfigError::MissingUser(name.clone()));
            }
            // client-go only warns about a context naming an unknown user and goes anonymous
            None => AuthInfo::default(),
        },
        None => AuthInfo::default(),
    };

    apply_cluster_overrides(&mut cluster, flags);
    apply_auth_overrides(&mut auth, flags);
    if cluster.server.as_deref().unwrap_or_default().is_empty() {
        return Err(KubeconfigError::NoServer(cluster_name.unwrap_or_default()));
    }
    Ok(Parent {
        cluster,
        auth,
        namespace: context.and_then(|c| c.namespace),
    })
}

fn apply_cluster_overrides(cluster: &mut Cluster, flags: &ConfigFlags) {
    if let Some(server) = flags.server.clone().filter(|s| !s.is_empty()) {
        cluster.server = Some(server);
        // client-go: a server override invalidates the kubeconfig's TLS server name
        cluster.tls_server_name = None;
    }
    if let Some(ca) = flags
        .certificate_authority
        .clone()
        .filter(|s| !s.is_empty())
    {
        cluster.certificate_authority = Some(ca);
        cluster.certificate_authority_data = None;
    }
    if let Some(insecure) = flags.insecure_skip_tls_verify {
        cluster.insecure_skip_tls_verify = Some(insecure);
        // client-go: `--insecure-skip-tls-verify` without `--certificate-authority` drops the CA,
        // as a CA together with the insecure flag is rejected
        if insecure && flags.certificate_authority.is_none() {
            cluster.certificate_authority = None;
            cluster.certificate_authority_data = None;
        }
    }
    if let Some(name) = flags.tls_server_name.clone().filter(|s| !s.is_empty()) {
        cluster.tls_server_name = Some(name);
    }
}

fn apply_auth_overrides(auth: &mut AuthInfo, flags: &ConfigFlags) {
    if let Some(token) = flags.token.clone().filter(|s| !s.is_empty()) {
        auth.token = Some(SecretString::from(token));
        auth.token_file = None;
    }
    if let Some(cert) = flags.client_certificate.clone().filter(|s| !s.is_empty()) {
        auth.client_certificate = Some(cert);
        auth.client_certificate_data = None;
    }
    if let Some(key) = flags.client_key.clone().filter(|s| !s.is_empty()) {
        auth.client_key = Some(key);
        auth.client_key_data = None;
    }
    if let Some(user) = flags.as_user.clone().filter(|s| !s.is_empty()) {
        auth.impersonate = Some(user);
    }
    if let Some(uid) = flags.as_uid.clone().filter(|s| !s.is_empty()) {
        auth.impersonate_uid = Some(uid);
    }
    if !flags.as_groups.is_empty() {
        auth.impersonate_groups = Some(flags.as_groups.clone());
    }
}

/// Replaces file references of the parent credentials by inline `*-data`, so the generated
/// kubeconfig is self-contained.
pub fn inline_files(parent: &mut Parent) -> Result<(), KubeconfigError> {
    if let Some(path) = parent.cluster.certificate_authority.take() {
        let data = read_file("certificate authority", &path)?;
        parent.cluster.certificate_authority_data = Some(base64_encode(&data));
    }
    if let Some(path) = parent.auth.client_certificate.take() {
        let data = read_file("client certificate", &path)?;
        parent.auth.client_certificate_data = Some(base64_encode(&data));
    }
    if let Some(path) = parent.auth.client_key.take() {
        let data = read_file("client key", &path)?;
        parent.auth.client_key_data = Some(SecretString::from(base64_encode(&data)));
    }
    Ok(())
}

fn read_file(what: &'static str, path: &str) -> Result<Vec<u8>, KubeconfigError> {
    fs::read(path).map_err(|source| KubeconfigError::File {
        what,
        path: path.to_string(),
        source,
    })
}

/// The credentials of the child cluster that travel as impersonation extras.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ChildIdentity {
    pub token: Option<String>,
    /// base64 of the client certificate PEM
    pub certificate: Option<String>,
    /// base64 of the client key PEM
    pub private_key: Option<String>,
}

/// Reads the current context's user of the child kubeconfig (upstream builds a full client config
/// from it and takes `BearerToken`, `CertData` and `KeyData`).
pub fn load_child_identity(path: &str) -> Result<ChildIdentity, KubeconfigError> {
    let child = |reason: String| KubeconfigError::Child {
        path: path.to_string(),
        reason,
    };
    let config = Kubeconfig::read_from(path).map_err(|e| child(kube_reason(e)))?;
    let context_name = config
        .current_context
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| child("no current context".to_string()))?;
    let context = config
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| child(format!("context \"{context_name}\" does not exist")))?;
    let auth = context
        .user
        .as_ref()
        .and_then(|user| config.auth_infos.iter().find(|a| &a.name == user))
        .and_then(|a| a.auth_info.clone())
        .unwrap_or_default();

    let token = match (&auth.token, &auth.token_file) {
        (Some(token), _) => Some(token.expose_secret().to_string()),
        (None, Some(file)) => Some(
            read_file("child token file", file)?
                .as_slice()
                .trim_ascii()
                .to_vec(),
        )
        .map(|t| String::from_utf8_lossy(&t).into_owned()),
        (None, None) => None,
    };
    let certificate = match (&auth.client_certificate_data, &auth.client_certificate) {
        (Some(data), _) => Some(strip_whitespace(data)),
        (None, Some(file)) => Some(base64_encode(&read_file("child client certificate", file)?)),
        (None, None) => None,
    };
    let private_key = match (&auth.client_key_data, &auth.client_key) {
        (Some(data), _) => Some(strip_whitespace(data.expose_secret())),
        (None, Some(file)) => Some(base64_encode(&read_file("child client key", file)?)),
        (None, None) => None,
    };
    Ok(ChildIdentity {
        token: token.filter(|t| !t.is_empty()),
        certificate: certificate.filter(|c| !c.is_empty()),
        private_key: private_key.filter(|k| !k.is_empty()),
    })
}

fn strip_whitespace(s: &str) -> String {
    s.chars().filter(|c| !c.is_ascii_whitespace()).collect()
}

/// The socket-proxy URL of a child cluster behind `parent_server` (cli.md §1.2).
pub fn child_server(parent_server: &str, cluster_id: &str) -> String {
    format!(
        "{}/apis/proxies.clusternet.io/v1alpha1/sockets/{cluster_id}/proxy/direct",
        parent_server.trim_end_matches('/')
    )
}

/// The child-mode kubeconfig: parent TLS settings and credentials (files already inlined), server
/// moved to the socket proxy, and impersonation of `clusternet` with the `Clusternet-*` extras.
pub fn child_kubeconfig(
    parent: &Parent,
    cluster_id: &str,
    identity: &ChildIdentity,
    own: &OwnFlags,
) -> Kubeconfig {
    let mut cluster = parent.cluster.clone();
    cluster.server = Some(child_server(parent.server(), cluster_id));

    let mut extra: HashMap<String, Vec<String>> = HashMap::new();
    let mut put = |key: &str, value: &Option<String>| {
        if let Some(v) = value.as_ref().filter(|v| !v.is_empty()) {
            extra.insert(key.to_string(), vec![v.clone()]);
        }
    };
    put(EXTRA_IMPERSONATE_USER, &own.clusternet_as);
    put(EXTRA_IMPERSONATE_UID, &own.clusternet_as_uid);
    put(EXTRA_TOKEN, &identity.token);
    put(EXTRA_CERTIFICATE, &identity.certificate);
    put(EXTRA_PRIVATE_KEY, &identity.private_key);
    if !own.clusternet_as_groups.is_empty() {
        extra.insert(
            EXTRA_IMPERSONATE_GROUP.to_string(),
            own.clusternet_as_groups.clone(),
        );
    }

    let mut auth = parent.auth.clone();
    // upstream overwrites only the user name: `--as-group`/`--as-uid` of the parent stay
    auth.impersonate = Some(CLUSTERNET_USER.to_string());
    auth.impersonate_user_extra = (!extra.is_empty()).then_some(extra);
    single_context(cluster, auth, parent.namespace.clone())
}

/// The parent-mode kubeconfig: the local proxy, with a per-run secret as the first path segment so
/// other local users cannot borrow the parent credentials through the port. No credentials:
/// client-go would not send them over plain HTTP anyway.
pub fn proxy_kubeconfig(port: u16, session_token: &str, namespace: Option<String>) -> Kubeconfig {
    let cluster = Cluster {
        server: Some(format!("http://127.0.0.1:{port}/{session_token}")),
        ..Cluster::default()
    };
    single_context(cluster, AuthInfo::default(), namespace)
}

fn single_context(cluster: Cluster, auth: AuthInfo, namespace: Option<String>) -> Kubeconfig {
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: GENERATED_NAME.to_string(),
            cluster: Some(cluster),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: GENERATED_NAME.to_string(),
            auth_info: Some(auth),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: GENERATED_NAME.to_string(),
            context: Some(Context {
                cluster: GENERATED_NAME.to_string(),
                user: Some(GENERATED_NAME.to_string()),
                namespace,
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(GENERATED_NAME.to_string()),
        kind: Some("Config".to_string()),
        api_version: Some("v1".to_string()),
        ..Kubeconfig::default()
    }
}

/// Serializes a kubeconfig as YAML.
pub fn render(config: &Kubeconfig) -> Result<String, KubeconfigError> {
    Ok(yaml::to_string(config)?)
}

/// A private (0700) temporary directory, removed with everything in it when dropped. It holds the
/// generated kubeconfig (0600) and, in parent mode, kubectl's discovery cache.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new() -> Result<Self, KubeconfigError> {
        let base = std::env::temp_dir();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let mut last = None;
        for attempt in 0..16u32 {
            let path = base.join(format!(
                "kubectl-clusternet-{}-{:08x}",
                std::process::id(),
                nanos.wrapping_add(attempt.wrapping_mul(0x9e37_79b9))
            ));
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(KubeconfigError::Temp(e)),
            }
        }
        Err(KubeconfigError::Temp(last.unwrap_or_else(|| {
            std::io::Error::other("no free temporary directory name")
        })))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `contents` to a new 0600 file in the directory.
    pub fn write_private(&self, name: &str, contents: &str) -> Result<PathBuf, KubeconfigError> {
        let path = self.path.join(name);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(KubeconfigError::Temp)?;
        file.write_all(contents.as_bytes())
            .map_err(KubeconfigError::Temp)?;
        Ok(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Standard base64 with padding (kubeconfig `*-data` fields and the certificate extras).
pub fn base64_encode(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = r#"
apiVersion: v1
kind: Config
current-context: parent
clusters:
- name: parent
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: Q0EK
- name: other
  cluster:
    server: https://10.0.0.2:6443
users:
- name: parent-admin
  user:
    token: parent-token
- name: cert-user
  user:
    client-certificate-data: Q0VSVAo=
    client-key-data: S0VZCg==
contexts:
- name: parent
  context: {cluster: parent, user: parent-admin, namespace: qux}
- name: certs
  context: {cluster: other, user: cert-user}
- name: dangling
  context: {cluster: nowhere, user: parent-admin}
"#;

    fn parent_config() -> Kubeconfig {
        Kubeconfig::from_yaml(PARENT).expect("test kubeconfig parses")
    }

    fn token_of(auth: &AuthInfo) -> Option<&str> {
        auth.token.as_ref().map(|t| t.expose_secret())
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(input.as_bytes()), want);
        }
        assert_eq!(base64_encode(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn current_context_is_used_by_default() {
        let parent = resolve_parent(&parent_config(), &ConfigFlags::default()).expect("resolves");
        assert_eq!(parent.server(), "https://127.0.0.1:6443/");
        assert_eq!(token_of(&parent.auth), Some("parent-token"));
        assert_eq!(parent.namespace.as_deref(), Some("qux"));
    }

    #[test]
    fn flags_select_and_override() {
        let flags = ConfigFlags {
            context: Some("certs".into()),
            token: Some("flag-token".into()),
            as_user: Some("bob".into()),
            as_groups: vec!["g".into()],
            insecure_skip_tls_verify: Some(true),
            ..ConfigFlags::default()
        };
        let parent = resolve_parent(&parent_config(), &flags).expect("resolves");
        assert_eq!(parent.server(), "https://10.0.0.2:6443");
        assert_eq!(token_of(&parent.auth), Some("flag-token"));
        assert_eq!(
            parent.auth.client_certificate_data.as_deref(),
            Some("Q0VSVAo=")
        );
        assert_eq!(parent.auth.impersonate.as_deref(), Some("bob"));
        assert_eq!(parent.auth.impersonate_groups, Some(vec!["g".to_string()]));
        assert_eq!(parent.cluster.insecure_skip_tls_verify, Some(true));

        let flags = ConfigFlags {
            server: Some("https://elsewhere:1".into()),
            user: Some("cert-user".into()),
            insecure_skip_tls_verify: Some(true),
            ..ConfigFlags::default()
        };
        let parent = resolve_parent(&parent_config(), &flags).expect("resolves");
        assert_eq!(parent.server(), "https://elsewhere:1");
        assert_eq!(parent.cluster.certificate_authority_data, None);
        assert_eq!(token_of(&parent.auth), None);
    }

    #[test]
    fn selection_errors() {
        let err = |flags: ConfigFlags| {
            resolve_parent(&parent_config(), &flags)
                .expect_err("must fail")
                .to_string()
        };
        assert_eq!(
            err(ConfigFlags {
                context: Some("nope".into()),
                ..ConfigFlags::default()
            }),
            "context \"nope\" does not exist"
        );
        assert_eq!(
            err(ConfigFlags {
                context: Some("dangling".into()),
                ..ConfigFlags::default()
            }),
            "cluster \"nowhere\" does not exist"
        );
        assert_eq!(
            err(ConfigFlags {
                user: Some("ghost".into()),
                ..ConfigFlags::default()
            }),
            "user \"ghost\" does not exist"
        );
        let empty = Kubeconfig::default();
        assert!(matches!(
            resolve_parent(&empty, &ConfigFlags::default()),
            Err(KubeconfigError::NoConfiguration)
        ));
        let parent = resolve_parent(
            &empty,
            &ConfigFlags {
                server: Some("https://x".into()),
                ..ConfigFlags::default()
            },
        )
        .expect("--server alone is enough");
        assert_eq!(parent.server(), "https://x");
    }

    #[test]
    fn unreadable_kubeconfig_is_reported_with_its_path() {
        let err = load_kubeconfig(&ConfigFlags {
            kubeconfig: Some("/nonexistent/kubeconfig".into()),
            ..ConfigFlags::default()
        })
        .expect_err("missing file");
        assert_eq!(
            err.to_string(),
            "cannot read kubeconfig /nonexistent/kubeconfig: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn child_kubeconfig_round_trips() {
        let parent = resolve_parent(&parent_config(), &ConfigFlags::default()).expect("resolves");
        let identity = ChildIdentity {
            token: Some("child-token".into()),
            certificate: Some("Q0VSVAo=".into()),
            private_key: Some("S0VZCg==".into()),
        };
        let own = OwnFlags {
            cluster_id: Some("dc91021d-2361-4f6d-a404-7c33b9e01118".into()),
            child_kubeconfig: Some("child.kubeconfig".into()),
            clusternet_as: Some("alice".into()),
            clusternet_as_uid: Some("1000".into()),
            clusternet_as_groups: vec!["dev".into(), "ops".into()],
        };
        let generated = child_kubeconfig(
            &parent,
            "dc91021d-2361-4f6d-a404-7c33b9e01118",
            &identity,
            &own,
        );
        let yaml = render(&generated).expect("renders");
        assert!(yaml.contains("as-user-extra:"), "{yaml}");
        let back = Kubeconfig::from_yaml(&yaml).expect("parses back");

        assert_eq!(back.current_context.as_deref(), Some(GENERATED_NAME));
        let context = back.contexts[0].context.as_ref().expect("context");
        assert_eq!(context.namespace.as_deref(), Some("qux"));
        let cluster = back.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(
            cluster.server.as_deref(),
            Some(
                "https://127.0.0.1:6443/apis/proxies.clusternet.io/v1alpha1/sockets/dc91021d-2361-4f6d-a404-7c33b9e01118/proxy/direct"
            )
        );
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0EK"));
        let auth = back.auth_infos[0].auth_info.as_ref().expect("user");
        assert_eq!(token_of(auth), Some("parent-token"));
        assert_eq!(auth.impersonate.as_deref(), Some("clusternet"));
        let extra = auth.impersonate_user_extra.clone().expect("extras");
        let want: HashMap<String, Vec<String>> = [
            ("Clusternet-Token", vec!["child-token"]),
            ("Clusternet-Certificate", vec!["Q0VSVAo="]),
            ("Clusternet-PrivateKey", vec!["S0VZCg=="]),
            ("Clusternet-Impersonate-User", vec!["alice"]),
            ("Clusternet-Impersonate-Uid", vec!["1000"]),
            ("Clusternet-Impersonate-Group", vec!["dev", "ops"]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
        .collect();
        assert_eq!(extra, want);
    }

    #[test]
    fn child_kubeconfig_without_child_credentials_has_no_empty_extras() {
        let parent = resolve_parent(&parent_config(), &ConfigFlags::default()).expect("resolves");
        let generated = child_kubeconfig(
            &parent,
            "id",
            &ChildIdentity::default(),
            &OwnFlags::default(),
        );
        let auth = generated.auth_infos[0].auth_info.as_ref().expect("user");
        assert_eq!(auth.impersonate.as_deref(), Some("clusternet"));
        assert_eq!(auth.impersonate_user_extra, None);
    }

    #[test]
    fn child_identity_from_files_and_inline_data() {
        let dir = TempDir::new().expect("temp dir");
        let cert = dir.write_private("c.crt", "CERT\n").expect("write");
        let token = dir.write_private("token", "  tok\n").expect("write");
        let config = format!(
            r#"
apiVersion: v1
kind: Config
current-context: child
clusters: [{{name: c, cluster: {{server: "https://10.1.1.1:6443"}}}}]
users:
- name: u
  user:
    tokenFile: {}
    client-certificate: {}
    client-key-data: "S0VZ\n Cg=="
contexts: [{{name: child, context: {{cluster: c, user: u}}}}]
"#,
            token.display(),
            cert.display()
        );
        let path = dir
            .write_private("child.kubeconfig", &config)
            .expect("write");
        let identity = load_child_identity(&path.to_string_lossy()).expect("loads");
        assert_eq!(
            identity,
            ChildIdentity {
                token: Some("tok".into()),
                certificate: Some("Q0VSVAo=".into()),
                private_key: Some("S0VZCg==".into()),
            }
        );

        let no_context = dir
            .write_private("bad.kubeconfig", "apiVersion: v1\nkind: Config\n")
            .expect("write");
        let err = load_child_identity(&no_context.to_string_lossy()).expect_err("no context");
        assert_eq!(
            err.to_string(),
            format!(
                "child kubeconfig {}: no current context",
                no_context.display()
            )
        );
    }

    #[test]
    fn inline_files_reads_parent_credentials() {
        let dir = TempDir::new().expect("temp dir");
        let ca = dir.write_private("ca.crt", "CA\n").expect("write");
        let key = dir.write_private("k.key", "KEY\n").expect("write");
        let mut parent = Parent {
            cluster: Cluster {
                server: Some("https://p".into()),
                certificate_authority: Some(ca.to_string_lossy().into_owned()),
                ..Cluster::default()
            },
            auth: AuthInfo {
                client_key: Some(key.to_string_lossy().into_owned()),
                client_certificate: Some("/nonexistent.crt".into()),
                ..AuthInfo::default()
            },
            namespace: None,
        };
        let err = inline_files(&mut parent).expect_err("missing certificate");
        assert!(
            err.to_string()
                .starts_with("cannot read client certificate /nonexistent.crt: "),
            "{err}"
        );
        parent.auth.client_certificate = None;
        inline_files(&mut parent).expect("inlines");
        assert_eq!(
            parent.cluster.certificate_authority_data.as_deref(),
            Some("Q0EK")
        );
        assert_eq!(parent.cluster.certificate_authority, None);
        assert_eq!(
            parent
                .auth
                .client_key_data
                .as_ref()
                .map(|k| k.expose_secret()),
            Some("S0VZCg==")
        );
    }

    #[test]
    fn temp_dir_is_private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new().expect("temp dir");
        let file = dir.write_private("kubeconfig", "x").expect("write");
        let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(dir.path()), 0o700);
        assert_eq!(mode(&file), 0o600);
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn proxy_kubeconfig_points_at_loopback() {
        let yaml = render(&proxy_kubeconfig(4242, "s3cret", Some("ns1".into()))).expect("renders");
        let back = Kubeconfig::from_yaml(&yaml).expect("parses back");
        let cluster = back.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(
            cluster.server.as_deref(),
            Some("http://127.0.0.1:4242/s3cret")
        );
        let auth = back.auth_infos[0].auth_info.as_ref().expect("user");
        assert_eq!(token_of(auth), None);
        assert!(auth.client_certificate_data.is_none() && auth.exec.is_none());
        assert_eq!(
            back.contexts[0]
                .context
                .as_ref()
                .and_then(|c| c.namespace.as_deref()),
            Some("ns1")
        );
    }
}
