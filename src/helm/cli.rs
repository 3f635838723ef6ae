//! The real `helm` v3 CLI as a subprocess (docs/spec/deployer.md §7.3): releases are installed,
//! upgraded and uninstalled by Helm itself, stored the way Helm stores them (storage driver
//! `secret` in the release namespace, history capped at 5), so `helm list` and `helm history` in
//! the child show them. Why a subprocess and not a re-implementation: Helm's template engine
//! (Go `text/template` with Sprig), its hooks, its 3-way merge on upgrade and its release format
//! are the behaviour users depend on; no Rust crate reproduces them, and a release written any
//! other way would not be one `helm` can read. The memory of a chart render also lives and dies
//! with its subprocess, so 40 releases of which 30 fail cannot grow this process (upstream #493).
//!
//! Each invocation gets a kubeconfig of its own (written to a private directory, removed after)
//! and private Helm homes, so nothing of the user's `~/.config/helm` leaks in.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tracing::debug;

use crate::apis::HelmOptions;
use crate::helm::repo::Credentials;

/// Longer than any `--timeout` we pass: Helm's own timeout fires first, this only catches a
/// subprocess that hangs outside of it (a registry that never answers).
const KILL_MARGIN: Duration = Duration::from_secs(120);
/// Reads (`status`, `get metadata`) take well under a second; a child that does not answer is
/// given up on after this.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Helm keeps this many revisions per release (upstream's `MaxHistory`).
pub const MAX_HISTORY: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum HelmError {
    /// Helm ran and said no; the text is Helm's own (`Error: ...` without the prefix).
    #[error("{0}")]
    Helm(String),
    #[error("cannot run {binary}: {source}")]
    Spawn {
        binary: String,
        #[source]
        source: std::io::Error,
    },
    #[error("helm {command} did not finish within {after:?}")]
    Timeout { command: String, after: Duration },
    #[error("preparing helm's files in {dir}: {source}")]
    Files {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("unexpected output of helm {command}: {message}")]
    Output { command: String, message: String },
}

impl HelmError {
    /// Helm's "nothing of that name here" (`release: not found`, also uninstall's "release not
    /// loaded"): for a lookup the release is absent, for an uninstall it is gone already.
    pub fn is_not_found(&self) -> bool {
        matches!(self, HelmError::Helm(m) if m.contains("release: not found") || m.contains("not loaded"))
    }
}

/// The latest revision of a release, as Helm reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Release {
    pub revision: i64,
    /// Helm's status string: `deployed`, `failed`, `pending-install`, ...
    pub status: String,
    pub chart: String,
    pub chart_version: String,
    /// The values supplied by the user (not the chart's defaults); `{}` when none.
    pub values: Value,
    /// RFC 3339 as Helm prints them.
    pub first_deployed: String,
    pub last_deployed: String,
    pub description: String,
    pub notes: String,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    chart: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    revision: i64,
    #[serde(default)]
    status: String,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    info: Info,
    #[serde(default)]
    config: Option<Value>,
    #[serde(default)]
    version: i64,
}

#[derive(Deserialize, Default)]
struct Info {
    #[serde(default)]
    first_deployed: String,
    #[serde(default)]
    last_deployed: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    notes: String,
}

/// Where a chart comes from and how it is installed: one HelmRelease's spec, made into flags.
#[derive(Debug, Clone)]
pub struct Chart<'a> {
    pub options: &'a HelmOptions,
    pub credentials: Option<&'a Credentials>,
}

impl Chart<'_> {
    /// The chart argument and the flags that locate it (§7.3 step 5): `oci://<repo>/<chart>` for
    /// registries, `<chart> --repo <url>` for HTTP(S) repositories; TLS verification off, plain
    /// HTTP when asked, basic auth from the pull secret.
    pub fn locate_args(&self) -> Vec<String> {
        let o = self.options;
        let mut args = Vec::new();
        // helm ignores --plain-http once any TLS flag is given: plain HTTP goes alone
        let mut plain_http = false;
        if o.repo.starts_with("oci://") {
            args.push(format!("{}/{}", o.repo.trim_end_matches('/'), o.chart));
            plain_http = o.plain_http == Some(true);
        } else {
            args.push(o.chart.clone());
            args.push("--repo".into());
            args.push(o.repo.clone());
        }
        if !o.version.is_empty() {
            args.push("--version".into());
            args.push(o.version.clone());
        }
        args.push(if plain_http {
            "--plain-http".into()
        } else {
            "--insecure-skip-tls-verify".into()
        });
        if let Some(c) = self.credentials {
            args.extend([
                "--username".into(),
                c.username.clone(),
                "--password".into(),
                c.password.clone(),
            ]);
        }
        args
    }
}

/// What an install or upgrade is asked to do, beyond locating the chart.
#[derive(Debug, Clone, Default)]
pub struct Install {
    pub create_namespace: bool,
    pub atomic: bool,
    pub wait: bool,
    pub wait_for_jobs: bool,
    pub skip_crds: bool,
    pub disable_hooks: bool,
    pub replace: bool,
    pub force: bool,
    pub timeout: Duration,
}

impl Install {
    /// Install (`upgrade == false`) or upgrade flags from a HelmRelease's options (§7.3 step 9):
    /// `atomic` for installs, `upgradeAtomic` for upgrades.
    pub fn from_options(o: &HelmOptions, upgrade: bool) -> Install {
        let on = |b: Option<bool>| b == Some(true);
        Install {
            create_namespace: o.effective_create_namespace(),
            atomic: if upgrade {
                on(o.upgrade_atomic)
            } else {
                on(o.atomic)
            },
            wait: on(o.wait),
            wait_for_jobs: on(o.wait_for_job),
            skip_crds: on(o.skip_crds),
            disable_hooks: on(o.disable_hooks),
            // upstream installs with Replace: a name left by an uninstalled release is reused
            replace: true,
            force: on(o.force),
            timeout: Duration::from_secs(o.effective_timeout_seconds().max(1) as u64),
        }
    }

    fn args(&self, upgrade: bool) -> Vec<String> {
        let mut a = vec![format!("--timeout={}s", self.timeout.as_secs())];
        let mut flag = |on: bool, f: &str| {
            if on {
                a.push(f.to_string());
            }
        };
        flag(self.atomic, "--atomic");
        flag(self.wait, "--wait");
        flag(self.wait_for_jobs, "--wait-for-jobs");
        flag(self.skip_crds, "--skip-crds");
        flag(self.disable_hooks, "--no-hooks");
        if upgrade {
            flag(self.force, "--force");
            // our values are the whole truth: never merge with an earlier revision's
            flag(true, "--reset-values");
            a.push(format!("--history-max={MAX_HISTORY}"));
        } else {
            flag(self.create_namespace, "--create-namespace");
            flag(self.replace, "--replace");
        }
        a
    }
}

/// Which release, in which cluster: a kubeconfig reaching the child, the release name and
/// its namespace.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    pub kubeconfig: &'a [u8],
    pub name: &'a str,
    pub namespace: &'a str,
}

/// The helm executable and its private homes.
#[derive(Debug, Clone)]
pub struct Helm {
    binary: String,
    dir: PathBuf,
}

/// A file removed when dropped (kubeconfigs and values hold credentials and data).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Helm {
    /// `binary` is a path or a name in PATH; `dir` a private directory for Helm's homes and
    /// the per-invocation files (created 0700).
    pub fn new(binary: impl Into<String>, dir: impl Into<PathBuf>) -> Helm {
        Helm {
            binary: binary.into(),
            dir: dir.into(),
        }
    }

    /// In a directory of this process's own under the system temporary directory.
    pub fn in_temp_dir(binary: impl Into<String>) -> Helm {
        Helm::new(
            binary,
            std::env::temp_dir().join(format!("clusternet-helm-{}", std::process::id())),
        )
    }

    fn prepare(&self) -> Result<(), HelmError> {
        let files = |source| HelmError::Files {
            dir: self.dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(files)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
                .map_err(files)?;
        }
        Ok(())
    }

    fn scratch(&self, what: &str, body: &[u8]) -> Result<Scratch, HelmError> {
        self.prepare()?;
        let path = self.dir.join(format!("{what}-{}", uuid::Uuid::new_v4()));
        let files = |source| HelmError::Files {
            dir: self.dir.display().to_string(),
            source,
        };
        #[cfg(unix)]
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(files)?;
            f.write_all(body).map_err(files)?;
        }
        #[cfg(not(unix))]
        std::fs::write(&path, body).map_err(files)?;
        Ok(Scratch(path))
    }

    /// Runs helm with `args` against the cluster of `kubeconfig`; stdout on success, Helm's
    /// error text otherwise.
    async fn run(
        &self,
        kubeconfig: &Path,
        command: &str,
        args: &[String],
        limit: Duration,
    ) -> Result<Vec<u8>, HelmError> {
        self.prepare()?;
        let mut cmd = tokio::process::Command::new(&self.binary);
        cmd.arg(command)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.dir)
            .env("KUBECONFIG", kubeconfig)
            .env("HELM_DRIVER", "secret")
            .env("HELM_CACHE_HOME", self.dir.join("cache"))
            .env("HELM_CONFIG_HOME", self.dir.join("config"))
            .env("HELM_DATA_HOME", self.dir.join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        debug!(command, "running helm");
        let child = cmd.spawn().map_err(|source| HelmError::Spawn {
            binary: self.binary.clone(),
            source,
        })?;
        let out = tokio::time::timeout(limit, child.wait_with_output())
            .await
            .map_err(|_| HelmError::Timeout {
                command: command.to_string(),
                after: limit,
            })?
            .map_err(|source| HelmError::Spawn {
                binary: self.binary.clone(),
                source,
            })?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        Err(HelmError::Helm(helm_error_text(&out.stderr, out.status)))
    }

    /// The latest revision of release `name` in `namespace`, `None` when there is none.
    pub async fn latest(&self, at: At<'_>) -> Result<Option<Release>, HelmError> {
        let (name, namespace) = (at.name, at.namespace);
        let kc = self.scratch("kubeconfig", at.kubeconfig)?;
        let args = |extra: &[&str]| {
            let mut a = vec![name.to_string(), "-n".into(), namespace.into()];
            a.extend(extra.iter().map(|s| s.to_string()));
            a
        };
        let meta_args = [vec!["metadata".to_string()], args(&["-o", "json"])].concat();
        let status_args = args(&["-o", "json"]);
        let (meta, status) = tokio::join!(
            self.run(&kc.0, "get", &meta_args, READ_TIMEOUT),
            self.run(&kc.0, "status", &status_args, READ_TIMEOUT),
        );
        let (meta, status) = match (meta, status) {
            (Err(e), _) | (_, Err(e)) if e.is_not_found() => return Ok(None),
            (Err(e), _) | (_, Err(e)) => return Err(e),
            (Ok(m), Ok(s)) => (m, s),
        };
        parse_release(&meta, &status).map(Some)
    }

    /// `helm install` (or `helm upgrade` when `upgrade`) of `chart` as `name` in `namespace`
    /// with `values` (JSON; `None` = no values).
    pub async fn install(
        &self,
        at: At<'_>,
        chart: &Chart<'_>,
        values: Option<&Value>,
        opts: &Install,
        upgrade: bool,
    ) -> Result<(), HelmError> {
        let (name, namespace) = (at.name, at.namespace);
        let kc = self.scratch("kubeconfig", at.kubeconfig)?;
        let body = values
            .map(|v| serde_json::to_vec(v).unwrap_or_default())
            .unwrap_or_else(|| b"{}".to_vec());
        let vf = self.scratch("values", &body)?;
        let mut args = vec![name.to_string()];
        args.extend(chart.locate_args());
        args.extend(["-n".into(), namespace.into()]);
        args.push(format!("--values={}", vf.0.display()));
        args.extend(opts.args(upgrade));
        let command = if upgrade { "upgrade" } else { "install" };
        self.run(&kc.0, command, &args, opts.timeout + KILL_MARGIN)
            .await
            .map(|_| ())
    }

    /// `helm uninstall`; a release that is not there counts as uninstalled.
    pub async fn uninstall(
        &self,
        at: At<'_>,
        wait: bool,
        timeout: Duration,
    ) -> Result<(), HelmError> {
        let (name, namespace) = (at.name, at.namespace);
        let kc = self.scratch("kubeconfig", at.kubeconfig)?;
        let mut args = vec![
            name.to_string(),
            "-n".into(),
            namespace.into(),
            format!("--timeout={}s", timeout.as_secs()),
        ];
        if wait {
            args.push("--wait".into());
        }
        match self
            .run(&kc.0, "uninstall", &args, timeout + KILL_MARGIN)
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// `helm rollback` to the previous revision (a release stuck in `pending-upgrade`).
    pub async fn rollback(&self, at: At<'_>, timeout: Duration) -> Result<(), HelmError> {
        let (name, namespace) = (at.name, at.namespace);
        let kc = self.scratch("kubeconfig", at.kubeconfig)?;
        let args = vec![
            name.to_string(),
            "-n".into(),
            namespace.into(),
            format!("--timeout={}s", timeout.as_secs()),
            format!("--history-max={MAX_HISTORY}"),
        ];
        self.run(&kc.0, "rollback", &args, timeout + KILL_MARGIN)
            .await
            .map(|_| ())
    }

    /// The CRDs of a chart and its dependencies (`helm show crds`), as YAML documents.
    pub async fn crds(&self, chart: &Chart<'_>) -> Result<String, HelmError> {
        // no cluster is contacted; helm still wants a kubeconfig path
        let kc = self.scratch("kubeconfig", b"apiVersion: v1\nkind: Config\n")?;
        let out = self
            .run(
                &kc.0,
                "show",
                &[vec!["crds".to_string()], chart.locate_args()].concat(),
                READ_TIMEOUT,
            )
            .await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// Helm's last `Error:` line (its message), or the whole stderr when it has none.
fn helm_error_text(stderr: &[u8], status: std::process::ExitStatus) -> String {
    let text = String::from_utf8_lossy(stderr);
    let from_error = text
        .find("Error: ")
        .map(|i| text[i + "Error: ".len()..].trim().to_string());
    match from_error {
        Some(m) if !m.is_empty() => m,
        _ if text.trim().is_empty() => format!("helm exited with {status}"),
        _ => text.trim().to_string(),
    }
}

fn parse_release(meta: &[u8], status: &[u8]) -> Result<Release, HelmError> {
    let bad = |command: &str, e: serde_json::Error| HelmError::Output {
        command: command.to_string(),
        message: e.to_string(),
    };
    let m: Metadata = serde_json::from_slice(meta).map_err(|e| bad("get metadata", e))?;
    let s: Status = serde_json::from_slice(status).map_err(|e| bad("status", e))?;
    Ok(Release {
        revision: if s.version > 0 { s.version } else { m.revision },
        status: if s.info.status.is_empty() {
            m.status
        } else {
            s.info.status
        },
        chart: m.chart,
        chart_version: m.version,
        values: match s.config {
            Some(Value::Null) | None => Value::Object(Default::default()),
            Some(v) => v,
        },
        first_deployed: s.info.first_deployed,
        last_deployed: s.info.last_deployed,
        description: s.info.description,
        notes: s.info.notes,
    })
}

/// A kubeconfig (YAML) that reaches the cluster of `cfg` as `cfg` does: server, CA (or no
/// verification), credentials and impersonation, for helm to use.
pub fn kubeconfig_for(cfg: &kube::Config) -> Result<Vec<u8>, HelmError> {
    use base64::Engine;
    let ca = cfg.root_cert.as_ref().map(|ders| {
        let pem = crate::runtime::certs::certificates_pem(ders);
        base64::engine::general_purpose::STANDARD.encode(pem)
    });
    let mut cluster = serde_json::json!({"server": cfg.cluster_url.to_string()});
    match ca {
        Some(ca) => cluster["certificate-authority-data"] = ca.into(),
        None => cluster["insecure-skip-tls-verify"] = cfg.accept_invalid_certs.into(),
    }
    if let Some(name) = &cfg.tls_server_name {
        cluster["tls-server-name"] = name.clone().into();
    }
    let user = serde_json::to_value(&cfg.auth_info).map_err(|e| HelmError::Output {
        command: "kubeconfig".into(),
        message: e.to_string(),
    })?;
    let doc = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "child", "cluster": cluster}],
        "users": [{"name": "clusternet", "user": user}],
        "contexts": [{"name": "child", "context": {"cluster": "child", "user": "clusternet",
            "namespace": cfg.default_namespace}}],
        "current-context": "child",
    });
    // JSON is YAML, and helm reads either
    serde_json::to_vec(&doc).map_err(|e| HelmError::Output {
        command: "kubeconfig".into(),
        message: e.to_string(),
    })
}

/// Helm's RFC 3339 time as Go's `time.Time.String()` (upstream's status format), e.g.
/// `2024-01-02 15:04:05.123456789 +0000 UTC`; unparsable text is kept as it is.
pub fn go_time(rfc3339: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(rfc3339) {
        Ok(t) => {
            let t = t.with_timezone(&chrono::Utc);
            let nanos = t.timestamp_subsec_nanos();
            let frac = if nanos == 0 {
                String::new()
            } else {
                format!(".{nanos:09}").trim_end_matches('0').to_string()
            };
            format!("{}{frac} +0000 UTC", t.format("%Y-%m-%d %H:%M:%S"))
        }
        Err(_) => rfc3339.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(repo: &str, version: &str) -> HelmOptions {
        HelmOptions {
            repo: repo.into(),
            chart: "hello".into(),
            version: version.into(),
            ..Default::default()
        }
    }

    #[test]
    fn charts_are_located_in_repositories_and_registries() {
        let o = options("https://charts.example/stable/", "0.1.0");
        let c = Chart {
            options: &o,
            credentials: None,
        };
        assert_eq!(
            c.locate_args(),
            [
                "hello",
                "--repo",
                "https://charts.example/stable/",
                "--version",
                "0.1.0",
                "--insecure-skip-tls-verify"
            ]
        );
        let mut o = options("oci://127.0.0.1:5000/charts/", "");
        o.plain_http = Some(true);
        let creds = Credentials {
            username: "u".into(),
            password: "p".into(),
        };
        let c = Chart {
            options: &o,
            credentials: Some(&creds),
        };
        assert_eq!(
            c.locate_args(),
            [
                "oci://127.0.0.1:5000/charts/hello",
                "--plain-http",
                "--username",
                "u",
                "--password",
                "p"
            ]
        );
    }

    #[test]
    fn install_and_upgrade_flags_follow_the_options() {
        let mut o = options("https://x", "1");
        o.atomic = Some(true);
        o.wait = Some(true);
        o.timeout_seconds = 30;
        let i = Install::from_options(&o, false);
        assert_eq!(
            i.args(false),
            [
                "--timeout=30s",
                "--atomic",
                "--wait",
                "--create-namespace",
                "--replace"
            ]
        );
        // upgrades are atomic by upgradeAtomic only, and keep 5 revisions
        let u = Install::from_options(&o, true);
        assert_eq!(
            u.args(true),
            [
                "--timeout=30s",
                "--wait",
                "--reset-values",
                "--history-max=5"
            ]
        );
    }

    #[test]
    fn releases_are_read_from_helm_output() {
        let meta = br#"{"name":"hello","chart":"hello","version":"0.1.0","appVersion":"1.0","namespace":"t1","revision":1,"status":"deployed","deployedAt":"2026-12-01T20:28:16Z"}"#;
        let status = br#"{"name":"hello","info":{"first_deployed":"2026-12-01T20:28:16.447270113Z","last_deployed":"2026-12-01T20:28:16.447270113Z","deleted":"","description":"Install complete","status":"deployed"},"config":{"x":1},"manifest":"","version":1,"namespace":"t1"}"#;
        let r = parse_release(meta, status).expect("a release");
        assert_eq!(
            (r.revision, r.status.as_str(), r.chart.as_str()),
            (1, "deployed", "hello")
        );
        assert_eq!(r.chart_version, "0.1.0");
        assert_eq!(r.values, json!({"x": 1}));
        let status = br#"{"info":{"status":"failed"},"version":2}"#;
        assert_eq!(
            parse_release(meta, status).expect("a release").values,
            json!({})
        );
        assert!(parse_release(b"nope", status).is_err());
    }

    #[test]
    fn helm_errors_keep_helms_words() {
        use std::os::unix::process::ExitStatusExt;
        let st = std::process::ExitStatus::from_raw(256);
        assert_eq!(
            helm_error_text(b"Error: release: not found\n", st),
            "release: not found"
        );
        assert!(
            HelmError::Helm(helm_error_text(b"Error: release: not found\n", st)).is_not_found()
        );
        assert_eq!(
            helm_error_text(b"WARNING: x\nError: INSTALLATION FAILED: boom\n", st),
            "INSTALLATION FAILED: boom"
        );
        assert!(helm_error_text(b"", st).starts_with("helm exited with"));
    }

    #[test]
    fn times_are_written_the_go_way() {
        assert_eq!(
            go_time("2026-12-01T20:28:16.447270113Z"),
            "2026-12-01 20:28:16.447270113 +0000 UTC"
        );
        assert_eq!(
            go_time("2026-12-01T20:28:16.5+01:00"),
            "2026-12-01 19:28:16.5 +0000 UTC"
        );
        assert_eq!(
            go_time("2026-12-01T20:28:16Z"),
            "2026-12-01 20:28:16 +0000 UTC"
        );
        assert_eq!(go_time("garbage"), "garbage");
    }

    #[test]
    fn kubeconfigs_carry_server_ca_credentials_and_impersonation() {
        let mut cfg = kube::Config::new("https://127.0.0.1:6443/".parse().expect("uri"));
        cfg.root_cert = Some(vec![vec![1, 2, 3]]);
        cfg.auth_info.token = Some(secrecy::SecretString::from("t0k".to_string()));
        cfg.auth_info.impersonate = Some("clusternet".into());
        let kc: Value =
            serde_json::from_slice(&kubeconfig_for(&cfg).expect("kubeconfig")).expect("json");
        assert_eq!(
            kc["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:6443/"
        );
        let ca = kc["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .expect("ca");
        use base64::Engine;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca)
            .expect("base64");
        assert!(String::from_utf8_lossy(&pem).starts_with("-----BEGIN CERTIFICATE-----\nAQID\n"));
        assert_eq!(kc["users"][0]["user"]["token"], "t0k");
        assert_eq!(kc["users"][0]["user"]["as"], "clusternet");
    }
}
