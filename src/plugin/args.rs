//! Command-line splitting for `kubectl clusternet`: separates the plugin's own flags (upstream
//! `ClusternetOptions.AddFlags`: `--cluster-id`, `--child-kubeconfig`, `--clusternet-as*`) and the
//! kubectl config flags the plugin must evaluate itself (upstream reads them through
//! `genericclioptions.ConfigFlags`) from everything that is handed to the real kubectl unchanged.
//!
//! Parsing follows pflag: `--flag=value` and `--flag value` (the next argument is taken whatever
//! it looks like), `-s value`, `-s=value` and `-svalue`, `_` accepted for `-` in long names
//! (upstream installs `WarnWordSepNormalizeFunc`), last occurrence wins, and nothing after `--`
//! is interpreted.

use std::ffi::{OsStr, OsString};

/// The plugin's own flags.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OwnFlags {
    pub cluster_id: Option<String>,
    pub child_kubeconfig: Option<String>,
    pub clusternet_as: Option<String>,
    pub clusternet_as_uid: Option<String>,
    pub clusternet_as_groups: Vec<String>,
}

/// kubectl config and credential flags; they select the parent credentials and are never passed
/// to kubectl, since they would override the generated kubeconfig.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ConfigFlags {
    pub kubeconfig: Option<String>,
    pub context: Option<String>,
    pub cluster: Option<String>,
    pub user: Option<String>,
    pub server: Option<String>,
    pub token: Option<String>,
    pub as_user: Option<String>,
    pub as_uid: Option<String>,
    pub as_groups: Vec<String>,
    pub insecure_skip_tls_verify: Option<bool>,
    pub certificate_authority: Option<String>,
    pub client_certificate: Option<String>,
    pub client_key: Option<String>,
    pub tls_server_name: Option<String>,
}

/// A split command line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub own: OwnFlags,
    pub config: ConfigFlags,
    /// Everything else, in order, including a `--` and what follows it.
    pub kubectl_args: Vec<OsString>,
}

/// The arguments of one of the plugin's own commands (`placement`, `dashboard`, `rollout`), read
/// one at a time as kubectl reads flags: `--flag=value` is split at the `=`, and a flag's value
/// may also be the next argument.
pub struct OwnArgs {
    it: std::vec::IntoIter<String>,
}

impl OwnArgs {
    pub fn new(args: &[OsString]) -> Self {
        let words: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        OwnArgs {
            it: words.into_iter(),
        }
    }

    /// The next argument: a word, or a flag with the value written after its `=`.
    pub fn next_arg(&mut self) -> Option<(String, Option<String>)> {
        let arg = self.it.next()?;
        Some(match arg.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f.to_string(), Some(v.to_string())),
            _ => (arg, None),
        })
    }

    /// Flag `name`'s value: the one after its `=`, else the next argument.
    pub fn value(&mut self, inline: Option<String>, name: &str) -> Result<String, String> {
        inline
            .or_else(|| self.it.next())
            .ok_or_else(|| ArgError::MissingValue(name.to_string()).to_string())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgError {
    #[error("flag needs an argument: {0}")]
    MissingValue(String),
    #[error("invalid argument {value:?} for \"{flag}\" flag: expected true or false")]
    InvalidBool { flag: String, value: String },
}

#[derive(Clone, Copy)]
enum Target {
    ClusterId,
    ChildKubeconfig,
    ClusternetAs,
    ClusternetAsUid,
    ClusternetAsGroup,
    Kubeconfig,
    Context,
    Cluster,
    User,
    Server,
    Token,
    As,
    AsUid,
    AsGroup,
    Insecure,
    CertificateAuthority,
    ClientCertificate,
    ClientKey,
    TlsServerName,
}

const LONG_FLAGS: &[(&str, Target)] = &[
    ("cluster-id", Target::ClusterId),
    ("child-kubeconfig", Target::ChildKubeconfig),
    ("clusternet-as", Target::ClusternetAs),
    ("clusternet-as-uid", Target::ClusternetAsUid),
    ("clusternet-as-group", Target::ClusternetAsGroup),
    ("kubeconfig", Target::Kubeconfig),
    ("context", Target::Context),
    ("cluster", Target::Cluster),
    ("user", Target::User),
    ("server", Target::Server),
    ("token", Target::Token),
    ("as", Target::As),
    ("as-uid", Target::AsUid),
    ("as-group", Target::AsGroup),
    ("insecure-skip-tls-verify", Target::Insecure),
    ("certificate-authority", Target::CertificateAuthority),
    ("client-certificate", Target::ClientCertificate),
    ("client-key", Target::ClientKey),
    ("tls-server-name", Target::TlsServerName),
];

/// kubectl's global flags that take their value as a separate argument and stay in the kubectl
/// command line; needed only to find the sub-command word.
const KUBECTL_VALUE_FLAGS: &[&str] = &[
    "-n",
    "--namespace",
    "--request-timeout",
    "--cache-dir",
    "-v",
    "--v",
    "--vmodule",
    "--log-flush-frequency",
    "--profile",
    "--profile-output",
    "--kuberc",
    "--username",
    "--password",
];

/// Splits `args` (without the program name).
pub fn split_args(args: &[OsString]) -> Result<Invocation, ArgError> {
    let mut inv = Invocation::default();
    let mut i = 0;
    while i < args.len() {
        let raw = &args[i];
        i += 1;
        let Some(arg) = raw.to_str() else {
            // not UTF-8, so not one of ours
            inv.kubectl_args.push(raw.clone());
            continue;
        };
        if arg == "--" {
            inv.kubectl_args.extend(args[i - 1..].iter().cloned());
            break;
        }
        let Some((flag, target, inline)) = recognise(arg) else {
            inv.kubectl_args.push(raw.clone());
            continue;
        };
        let value = match (target, inline) {
            (_, Some(v)) => v.to_string(),
            (Target::Insecure, None) => "true".to_string(),
            (_, None) => {
                let next = args
                    .get(i)
                    .and_then(|v| v.to_str())
                    .ok_or_else(|| ArgError::MissingValue(flag.clone()))?;
                i += 1;
                next.to_string()
            }
        };
        inv.set(target, &flag, value)?;
    }
    Ok(inv)
}

/// Returns (display name, target, inline value) when `arg` is one of the flags handled here.
fn recognise(arg: &str) -> Option<(String, Target, Option<&str>)> {
    if let Some(long) = arg.strip_prefix("--") {
        let (name, inline) = match long.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (long, None),
        };
        let normalized = name.replace('_', "-");
        let target = LONG_FLAGS
            .iter()
            .find(|(n, _)| *n == normalized)
            .map(|(_, t)| *t)?;
        return Some((format!("--{normalized}"), target, inline));
    }
    let short = arg.strip_prefix("-s")?;
    let inline = match short {
        "" => None,
        v => Some(v.strip_prefix('=').unwrap_or(v)),
    };
    Some(("-s".to_string(), Target::Server, inline))
}

impl Invocation {
    fn set(&mut self, target: Target, flag: &str, value: String) -> Result<(), ArgError> {
        let own = &mut self.own;
        let cfg = &mut self.config;
        match target {
            Target::ClusterId => own.cluster_id = Some(value),
            Target::ChildKubeconfig => own.child_kubeconfig = Some(value),
            Target::ClusternetAs => own.clusternet_as = Some(value),
            Target::ClusternetAsUid => own.clusternet_as_uid = Some(value),
            Target::ClusternetAsGroup => own.clusternet_as_groups.push(value),
            Target::Kubeconfig => cfg.kubeconfig = Some(value),
            Target::Context => cfg.context = Some(value),
            Target::Cluster => cfg.cluster = Some(value),
            Target::User => cfg.user = Some(value),
            Target::Server => cfg.server = Some(value),
            Target::Token => cfg.token = Some(value),
            Target::As => cfg.as_user = Some(value),
            Target::AsUid => cfg.as_uid = Some(value),
            Target::AsGroup => cfg.as_groups.push(value),
            Target::Insecure => {
                cfg.insecure_skip_tls_verify =
                    Some(parse_bool(&value).ok_or_else(|| ArgError::InvalidBool {
                        flag: flag.to_string(),
                        value,
                    })?)
            }
            Target::CertificateAuthority => cfg.certificate_authority = Some(value),
            Target::ClientCertificate => cfg.client_certificate = Some(value),
            Target::ClientKey => cfg.client_key = Some(value),
            Target::TlsServerName => cfg.tls_server_name = Some(value),
        }
        Ok(())
    }
}

/// Go's `strconv.ParseBool`, which pflag uses.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// The first positional word of the kubectl command line (the sub-command), skipping the values of
/// kubectl's global flags that take a separate argument.
pub fn subcommand(kubectl_args: &[OsString]) -> Option<&OsStr> {
    let mut iter = kubectl_args.iter();
    while let Some(arg) = iter.next() {
        let Some(s) = arg.to_str() else {
            return Some(arg);
        };
        if s == "--" {
            return None;
        }
        if s.starts_with('-') {
            if KUBECTL_VALUE_FLAGS.contains(&s) {
                iter.next();
            }
            continue;
        }
        return Some(arg);
    }
    None
}

/// Whether `flag` (a long kubectl flag such as `--cache-dir`) is present before `--`.
pub fn has_flag(kubectl_args: &[OsString], flag: &str) -> bool {
    kubectl_args
        .iter()
        .map_while(|a| a.to_str().map(|s| s != "--").unwrap_or(true).then_some(a))
        .filter_map(|a| a.to_str())
        .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|r| r.starts_with('=')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn split(args: &[&str]) -> Invocation {
        split_args(&os(args)).expect("valid command line")
    }

    #[test]
    fn own_flags_in_both_forms_anywhere_before_the_separator() {
        let inv = split(&[
            "get",
            "--cluster-id=dc91021d",
            "pods",
            "--child-kubeconfig",
            "./child1.kubeconfig",
            "-A",
            "--clusternet-as",
            "alice",
            "--clusternet-as-uid=42",
            "--clusternet-as-group",
            "dev",
            "--clusternet-as-group=ops",
        ]);
        assert_eq!(
            inv.own,
            OwnFlags {
                cluster_id: Some("dc91021d".into()),
                child_kubeconfig: Some("./child1.kubeconfig".into()),
                clusternet_as: Some("alice".into()),
                clusternet_as_uid: Some("42".into()),
                clusternet_as_groups: vec!["dev".into(), "ops".into()],
            }
        );
        assert_eq!(inv.kubectl_args, os(&["get", "pods", "-A"]));
    }

    #[test]
    fn config_flags_are_read_and_removed_but_others_kept() {
        let inv = split(&[
            "--kubeconfig",
            "/tmp/p.kubeconfig",
            "--context=ctx",
            "--cluster",
            "c",
            "--user=u",
            "-s",
            "https://x:6443",
            "--token",
            "T",
            "--as=bob",
            "--as-group",
            "g1",
            "--as-group=g2",
            "--as-uid",
            "7",
            "--insecure-skip-tls-verify",
            "--certificate-authority=/ca",
            "--client-certificate",
            "/crt",
            "--client-key=/key",
            "--tls-server-name",
            "kubernetes",
            "get",
            "deploy",
            "-n",
            "qux",
            "-o",
            "yaml",
            "--namespace=foo",
        ]);
        assert_eq!(
            inv.config,
            ConfigFlags {
                kubeconfig: Some("/tmp/p.kubeconfig".into()),
                context: Some("ctx".into()),
                cluster: Some("c".into()),
                user: Some("u".into()),
                server: Some("https://x:6443".into()),
                token: Some("T".into()),
                as_user: Some("bob".into()),
                as_uid: Some("7".into()),
                as_groups: vec!["g1".into(), "g2".into()],
                insecure_skip_tls_verify: Some(true),
                certificate_authority: Some("/ca".into()),
                client_certificate: Some("/crt".into()),
                client_key: Some("/key".into()),
                tls_server_name: Some("kubernetes".into()),
            }
        );
        assert_eq!(
            inv.kubectl_args,
            os(&[
                "get",
                "deploy",
                "-n",
                "qux",
                "-o",
                "yaml",
                "--namespace=foo"
            ])
        );
        assert_eq!(inv.own, OwnFlags::default());
    }

    #[test]
    fn short_server_forms() {
        for form in [
            &["-s", "https://a"][..],
            &["-s=https://a"],
            &["-shttps://a"],
        ] {
            assert_eq!(split(form).config.server.as_deref(), Some("https://a"));
        }
    }

    #[test]
    fn insecure_bool_forms() {
        assert_eq!(
            split(&["--insecure-skip-tls-verify=false", "get"])
                .config
                .insecure_skip_tls_verify,
            Some(false)
        );
        // a bare bool flag does not consume the next argument
        let inv = split(&["--insecure-skip-tls-verify", "get", "ns"]);
        assert_eq!(inv.config.insecure_skip_tls_verify, Some(true));
        assert_eq!(inv.kubectl_args, os(&["get", "ns"]));
        assert_eq!(
            split_args(&os(&["--insecure-skip-tls-verify=maybe"])),
            Err(ArgError::InvalidBool {
                flag: "--insecure-skip-tls-verify".into(),
                value: "maybe".into()
            })
        );
    }

    #[test]
    fn flags_after_the_verb_and_last_one_wins() {
        let inv = split(&[
            "get",
            "ns",
            "--cluster-id",
            "a",
            "--cluster-id=b",
            "--context",
            "x",
        ]);
        assert_eq!(inv.own.cluster_id.as_deref(), Some("b"));
        assert_eq!(inv.config.context.as_deref(), Some("x"));
        assert_eq!(inv.kubectl_args, os(&["get", "ns"]));
    }

    #[test]
    fn nothing_after_double_dash_is_interpreted() {
        let inv = split(&[
            "exec",
            "-it",
            "pod",
            "--cluster-id=x",
            "--",
            "sh",
            "--cluster-id=y",
            "--token",
            "z",
        ]);
        assert_eq!(inv.own.cluster_id.as_deref(), Some("x"));
        assert_eq!(inv.config.token, None);
        assert_eq!(
            inv.kubectl_args,
            os(&[
                "exec",
                "-it",
                "pod",
                "--",
                "sh",
                "--cluster-id=y",
                "--token",
                "z"
            ])
        );
    }

    #[test]
    fn value_is_taken_even_if_it_looks_like_a_flag() {
        let inv = split(&["--cluster-id", "--child-kubeconfig", "get"]);
        assert_eq!(inv.own.cluster_id.as_deref(), Some("--child-kubeconfig"));
        assert_eq!(inv.own.child_kubeconfig, None);
    }

    #[test]
    fn missing_values_are_errors() {
        for flag in [
            "--cluster-id",
            "--clusternet-as-group",
            "--kubeconfig",
            "-s",
            "--token",
        ] {
            let err = split_args(&os(&["get", flag])).expect_err("missing value");
            assert_eq!(err, ArgError::MissingValue(flag.to_string()));
            assert_eq!(err.to_string(), format!("flag needs an argument: {flag}"));
        }
    }

    #[test]
    fn underscores_are_normalized_and_prefixes_are_not_flags() {
        let inv = split(&[
            "--cluster_id=x",
            "--clusters",
            "--asx=1",
            "--server-side",
            "-sort",
        ]);
        assert_eq!(inv.own.cluster_id.as_deref(), Some("x"));
        // `-sort` is pflag's `-s ort`: the short server flag really does swallow it
        assert_eq!(inv.config.server.as_deref(), Some("ort"));
        assert_eq!(
            inv.kubectl_args,
            os(&["--clusters", "--asx=1", "--server-side"])
        );
    }

    #[test]
    fn subcommand_detection() {
        assert_eq!(subcommand(&os(&["version"])), Some(OsStr::new("version")));
        assert_eq!(
            subcommand(&os(&["-n", "version", "get", "ns"])),
            Some(OsStr::new("get"))
        );
        assert_eq!(
            subcommand(&os(&["--namespace=x", "-v", "6", "version"])),
            Some(OsStr::new("version"))
        );
        assert_eq!(subcommand(&os(&["--", "version"])), None);
        assert_eq!(subcommand(&os(&[])), None);
    }

    #[test]
    fn has_flag_stops_at_separator() {
        assert!(has_flag(&os(&["get", "--cache-dir=/x"]), "--cache-dir"));
        assert!(has_flag(&os(&["--cache-dir", "/x", "get"]), "--cache-dir"));
        assert!(!has_flag(&os(&["--cache-dirs"]), "--cache-dir"));
        assert!(!has_flag(
            &os(&["exec", "--", "--cache-dir"]),
            "--cache-dir"
        ));
    }
}
