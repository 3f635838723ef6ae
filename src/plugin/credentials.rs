//! `kubectl clusternet credentials`: the exec credential plugin of the ClusterProfiles' access
//! provider (KEP-5339; standards.md §1.3). A consumer (Kueue's MultiKueue, Argo CD,
//! multicluster-runtime, or kubectl with a kubeconfig built from a ClusterProfile) names it in its
//! provider file for provider `clusternet`; client-go runs it and sends what it prints to the
//! profile's server, the hub's socket proxy of the cluster.
//!
//! The credential is the caller's own for the parent: the hub authenticates it, checks
//! `sockets/proxy`, and goes into the child as that same user (hub.md §2.3.1), so the child's
//! RBAC decides. Where it comes from, first that applies:
//! 1. `--token-file FILE` (read on every call: projected tokens rotate);
//! 2. the kubeconfig (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`): `--context` when given,
//!    else the first context (the current one first) whose server is the parent the profile
//!    names (`spec.cluster.server` of `KUBERNETES_EXEC_INFO`, with `provideClusterInfo: true`),
//!    so a credential never goes to a server it was not issued for;
//! 3. in a pod with no kubeconfig, the pod's service account token.
//!
//! It prints an `ExecCredential` of the version client-go asked for (client.authentication.k8s.io
//! v1 or v1beta1): `status.token`, or `status.clientCertificateData`/`clientKeyData`.

use std::ffi::OsString;
use std::path::Path;

use kube::config::{AuthInfo, Kubeconfig};
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_json::{Value, json};

use super::args::ConfigFlags;
use super::kubeconfig::{self, Parent};

pub const USAGE: &str = "\
Print credentials for a Clusternet ClusterProfile access provider (a client-go exec credential
plugin, KEP-5339): the caller's own credentials for the parent, whose hub reaches the child
through the agent's tunnel and acts there as that same user.

Usage:
  kubectl clusternet credentials [--token-file FILE] [--kubeconfig FILE] [--context NAME]

Options:
      --token-file FILE   send the bearer token in FILE (read on every call)
      --context NAME      use this kubeconfig context (default: the first one, current first,
                          whose server is the parent the ClusterProfile names)
  -h, --help              this help

A consumer's provider file names it for provider \"clusternet\":
  {\"providers\": [{\"name\": \"clusternet\", \"execConfig\": {
      \"apiVersion\": \"client.authentication.k8s.io/v1\", \"command\": \"kubectl-clusternet\",
      \"args\": [\"credentials\"], \"provideClusterInfo\": true, \"interactiveMode\": \"Never\"}}]}
Without a kubeconfig, in a pod, the pod's service account token is sent.
";

/// Where a pod's service account token is mounted.
pub const POD_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
const DEFAULT_VERSION: &str = "client.authentication.k8s.io/v1";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredentialArgs {
    pub token_file: Option<String>,
}

pub fn parse(args: &[OsString]) -> Result<CredentialArgs, String> {
    let mut out = CredentialArgs::default();
    let mut args = super::args::OwnArgs::new(args);
    while let Some((flag, inline)) = args.next_arg() {
        match flag.as_str() {
            "--token-file" => out.token_file = Some(args.value(inline, "--token-file")?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(out)
}

/// What client-go hands the plugin in `KUBERNETES_EXEC_INFO`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecInfo {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub spec: ExecSpec,
}

#[derive(Debug, Default, Deserialize)]
pub struct ExecSpec {
    #[serde(default)]
    pub cluster: Option<ExecCluster>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ExecCluster {
    #[serde(default)]
    pub server: String,
}

impl ExecInfo {
    pub fn parse(text: &str) -> Result<ExecInfo, String> {
        serde_json::from_str(text).map_err(|e| format!("KUBERNETES_EXEC_INFO is not valid: {e}"))
    }

    fn server(&self) -> Option<&str> {
        self.spec
            .cluster
            .as_ref()
            .map(|c| c.server.as_str())
            .filter(|s| !s.is_empty())
    }
}

/// A credential for the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    Token(String),
    ClientCertificate { cert_pem: String, key_pem: String },
}

/// The `ExecCredential` client-go reads from the plugin's standard output.
pub fn exec_credential(api_version: Option<&str>, credential: &Credential) -> Value {
    let version = api_version
        .filter(|v| v.starts_with("client.authentication.k8s.io/"))
        .unwrap_or(DEFAULT_VERSION);
    let status = match credential {
        Credential::Token(t) => json!({"token": t}),
        Credential::ClientCertificate { cert_pem, key_pem } => {
            json!({"clientCertificateData": cert_pem, "clientKeyData": key_pem})
        }
    };
    json!({"apiVersion": version, "kind": "ExecCredential", "status": status})
}

/// `scheme://host:port`, the port filled in from the scheme, for comparing servers.
fn origin(url: &str) -> Option<(String, String, u16)> {
    let uri: http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.trim_matches(['[', ']']).to_ascii_lowercase();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "http" { 80 } else { 443 });
    Some((scheme, host, port))
}

/// Whether the two URLs name the same server.
pub fn same_server(a: &str, b: &str) -> bool {
    matches!((origin(a), origin(b)), (Some(x), Some(y)) if x == y)
}

/// The kubeconfig connection the credential comes from: the flags' choice when they make one
/// (`--context`, `--user`, `--token`, ...), else the first context whose server is `server`
/// (the current one first); with no `server` known, the current context.
pub fn select(
    config: &Kubeconfig,
    flags: &ConfigFlags,
    server: Option<&str>,
) -> Result<Parent, String> {
    let chosen = flags.context.is_some()
        || flags.user.is_some()
        || flags.token.is_some()
        || flags.client_certificate.is_some()
        || flags.server.is_some();
    let Some(server) = server.filter(|_| !chosen) else {
        return kubeconfig::resolve_parent(config, flags).map_err(|e| e.to_string());
    };
    let mut names: Vec<&str> = Vec::new();
    if let Some(current) = config.current_context.as_deref().filter(|c| !c.is_empty()) {
        names.push(current);
    }
    names.extend(
        config
            .contexts
            .iter()
            .map(|c| c.name.as_str())
            .filter(|n| Some(*n) != config.current_context.as_deref()),
    );
    for name in names {
        let with_context = ConfigFlags {
            context: Some(name.to_string()),
            ..flags.clone()
        };
        if let Ok(parent) = kubeconfig::resolve_parent(config, &with_context)
            && same_server(parent.server(), server)
        {
            return Ok(parent);
        }
    }
    Err(format!(
        "no context of your kubeconfig has the server {server} (the parent this ClusterProfile names): pass --context, or --token-file"
    ))
}

/// The credential a kubeconfig user holds, files read.
pub fn credential_of(parent: &mut Parent) -> Result<Credential, String> {
    kubeconfig::inline_files(parent).map_err(|e| e.to_string())?;
    let auth: &AuthInfo = &parent.auth;
    if let Some(token) = &auth.token {
        return Ok(Credential::Token(token.expose_secret().to_string()));
    }
    if let Some(path) = &auth.token_file {
        return read_token(path);
    }
    if let (Some(cert), Some(key)) = (&auth.client_certificate_data, &auth.client_key_data) {
        let decode = |what: &str, b64: &str| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|e| format!("the kubeconfig's {what} is not valid base64: {e}"))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        };
        return Ok(Credential::ClientCertificate {
            cert_pem: decode("client-certificate-data", cert)?,
            key_pem: decode("client-key-data", key.expose_secret())?,
        });
    }
    if auth.exec.is_some() || auth.auth_provider.is_some() {
        return Err(
            "the kubeconfig user gets its credentials from an exec plugin or auth provider, which this plugin does not run: pass --token-file".into(),
        );
    }
    Err("the kubeconfig user has no token and no client certificate: pass --token-file".into())
}

fn read_token(path: &str) -> Result<Credential, String> {
    let token = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the token file {path}: {e}"))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("the token file {path} is empty"));
    }
    Ok(Credential::Token(token.to_string()))
}

/// The whole command: the credential as an `ExecCredential` (JSON, one line).
pub fn run(args: &CredentialArgs, flags: &ConfigFlags) -> Result<String, String> {
    let info = match std::env::var("KUBERNETES_EXEC_INFO") {
        Ok(text) if !text.trim().is_empty() => ExecInfo::parse(&text)?,
        _ => ExecInfo::default(),
    };
    let credential = match &args.token_file {
        Some(path) => read_token(path)?,
        None => {
            let config = kubeconfig::load_kubeconfig(flags).map_err(|e| e.to_string())?;
            let nothing_configured = config.contexts.is_empty()
                && flags.context.is_none()
                && flags.server.is_none()
                && flags.token.is_none();
            if nothing_configured && Path::new(POD_TOKEN).exists() {
                read_token(POD_TOKEN)?
            } else {
                let mut parent = select(&config, flags, info.server())?;
                credential_of(&mut parent)?
            }
        }
    };
    Ok(format!(
        "{}\n",
        exec_credential(info.api_version.as_deref(), &credential)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: other
clusters:
- name: other
  cluster: {server: "https://other.example:6443"}
- name: parent
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: other
  user: {token: other-token}
- name: parent
  user: {token: parent-token}
contexts:
- name: other
  context: {cluster: other, user: other}
- name: parent
  context: {cluster: parent, user: parent}
"#;

    fn config() -> Kubeconfig {
        Kubeconfig::from_yaml(CONFIG).expect("kubeconfig")
    }

    #[test]
    fn the_context_of_the_profiles_parent_is_chosen() {
        let server =
            "https://127.0.0.1:6443/apis/proxies.clusternet.io/v1alpha1/sockets/id/proxy/direct";
        let mut p = select(&config(), &ConfigFlags::default(), Some(server)).expect("found");
        assert_eq!(
            credential_of(&mut p).expect("credential"),
            Credential::Token("parent-token".into()),
            "the current context names another server: its token must not go to this one"
        );
        let err = select(
            &config(),
            &ConfigFlags::default(),
            Some("https://elsewhere:6443/x"),
        )
        .expect_err("no such server");
        assert!(err.contains("--context"), "{err}");
        // an explicit choice is the user's
        let flags = ConfigFlags {
            context: Some("other".into()),
            ..Default::default()
        };
        let mut p = select(&config(), &flags, Some(server)).expect("chosen");
        assert_eq!(
            credential_of(&mut p).expect("credential"),
            Credential::Token("other-token".into())
        );
        // no server known: the current context, as kubectl would
        let p = select(&config(), &ConfigFlags::default(), None).expect("current");
        assert_eq!(p.server(), "https://other.example:6443");
    }

    #[test]
    fn servers_compare_by_scheme_host_and_port() {
        assert!(same_server("https://a:443/x", "https://A/y"));
        assert!(!same_server("https://a:6443", "https://a:443"));
        assert!(!same_server("http://a", "https://a"));
        assert!(!same_server("not a url", "https://a"));
    }

    #[test]
    fn exec_credentials_follow_the_asked_version() {
        let info = ExecInfo::parse(
            r#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",
                "spec":{"interactive":false,"cluster":{"server":"https://p:6443/x"}}}"#,
        )
        .expect("exec info");
        assert_eq!(info.server(), Some("https://p:6443/x"));
        let out = exec_credential(info.api_version.as_deref(), &Credential::Token("t".into()));
        assert_eq!(
            out,
            json!({"apiVersion": "client.authentication.k8s.io/v1beta1",
                "kind": "ExecCredential", "status": {"token": "t"}})
        );
        let cert = Credential::ClientCertificate {
            cert_pem: "C".into(),
            key_pem: "K".into(),
        };
        assert_eq!(
            exec_credential(None, &cert)["status"],
            json!({"clientCertificateData": "C", "clientKeyData": "K"})
        );
        assert!(ExecInfo::parse("{").is_err());
        assert_eq!(
            parse(&["--token-file=/t".into()]).expect("args").token_file,
            Some("/t".into())
        );
        assert!(parse(&["--bogus".into()]).is_err());
    }
}
