//! The command line as a user meets it: help, bad roles and values, config layering, version.

use std::process::Command;

fn clusternet(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_clusternet"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("running clusternet");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_lists_roles_and_subcommands() {
    let (code, out, _) = clusternet(&["--help"]);
    assert_eq!(code, 0);
    for word in [
        "--role",
        "hub",
        "scheduler",
        "controller",
        "agent",
        "crds",
        "version",
        "config",
    ] {
        assert!(out.contains(word), "--help does not mention {word}:\n{out}");
    }
}

#[test]
fn an_unknown_role_fails_naming_the_valid_ones() {
    let (code, _, err) = clusternet(&["--role=bogus"]);
    assert_ne!(code, 0);
    assert!(err.contains("hub, scheduler, controller"), "{err}");
}

#[test]
fn bad_values_fail_at_once_with_the_choices() {
    let (code, _, err) = clusternet(&["config", "--role=agent", "--cluster-sync-mode=Sideways"]);
    assert_ne!(code, 0);
    assert!(err.contains("Push, Pull, Dual"), "{err}");
    let (code, _, err) = clusternet(&["config", "--role=hub", "--feature-gates=NoSuchGate=true"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("unknown feature gate") && err.contains("ShadowAPI"),
        "{err}"
    );
    let (code, _, err) = clusternet(&["config", "--leader-elect-lease-duration=soon"]);
    assert_ne!(code, 0);
    assert!(err.contains("soon"), "{err}");
}

#[test]
fn layers_apply_in_order_file_env_flags() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("c.yaml");
    std::fs::write(
        &file,
        "roles: [scheduler]\nkube_api_qps: 11\nkube_api_burst: 22\nlog_format: json\n",
    )
    .expect("writing config");
    let out = Command::new(env!("CARGO_BIN_EXE_clusternet"))
        .args([
            "config",
            "--config",
            file.to_str().unwrap_or_default(),
            "--kube-api-burst=33",
        ])
        .env("CLUSTERNET_KUBE_API_QPS", "12")
        .env("CLUSTERNET_KUBE_API_BURST", "44")
        .output()
        .expect("running clusternet config");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cfg: serde_yaml::Value = serde_yaml::from_str(&text).expect("config prints YAML");
    assert_eq!(
        cfg["roles"][0].as_str(),
        Some("scheduler"),
        "file sets roles"
    );
    assert_eq!(cfg["kube_api_qps"].as_f64(), Some(12.0), "env beats file");
    assert_eq!(cfg["kube_api_burst"].as_u64(), Some(33), "flag beats env");
    assert_eq!(
        cfg["log_format"].as_str(),
        Some("json"),
        "file beats default"
    );
    assert_eq!(
        cfg["feature_gates"]["FailOver"].as_bool(),
        Some(true),
        "scheduler gates on"
    );
}

#[test]
fn example_configs_load() {
    for f in [
        "config/parent.yaml",
        "config/child.yaml",
        "config/all-in-one.yaml",
    ] {
        let path = format!("{}/{f}", env!("CARGO_MANIFEST_DIR"));
        let (code, out, err) = clusternet(&["config", "--config", &path]);
        assert_eq!(code, 0, "{f}: {err}");
        assert!(out.contains("roles:"), "{f}: {out}");
    }
}

#[test]
fn version_prints_in_every_format() {
    let (code, out, _) = clusternet(&["version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("clusternet version: v"), "{out}");
    let (code, out, _) = clusternet(&["version", "-o", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json version");
    assert_eq!(v["programName"], "clusternet");
}

/// Both version commands name the platform as Go does (`linux/amd64`), so they agree with each
/// other and with kubectl's and the API server's own output.
#[test]
fn version_platform_uses_go_names_in_binary_and_plugin() {
    let (code, out, _) = clusternet(&["version", "-o", "json"]);
    assert_eq!(code, 0);
    let server: serde_json::Value = serde_json::from_str(&out).expect("json version");
    let (code, out, err) = clusternet(&["kubectl-clusternet", "version"]);
    assert_eq!(code, 0, "{err}");
    let plugin: serde_json::Value = serde_json::from_str(&out).expect("plugin json version");
    assert_eq!(server["platform"], plugin["platform"]);
    let platform = server["platform"].as_str().unwrap_or_default();
    let want_arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    assert!(
        platform.ends_with(&format!("/{want_arch}")),
        "platform {platform:?} should use Go's architecture name {want_arch}"
    );
}

#[test]
fn a_closed_pipe_ends_output_quietly() {
    use std::io::Read;
    // `clusternet crds | head -c 100`: far more YAML than a pipe holds, and the reader goes away
    for args in [
        &["crds"][..],
        &["kubectl-clusternet", "version"][..],
        &["completion", "zsh"][..],
    ] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_clusternet"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running clusternet");
        let mut first = [0u8; 1];
        let mut stdout = child.stdout.take().expect("stdout");
        stdout.read_exact(&mut first).expect("some output");
        drop(stdout);
        let out = child.wait_with_output().expect("waiting for clusternet");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
    }
}

#[test]
fn the_plugin_helps_without_a_cluster() {
    // the test environment's kubectl (built or reused by tests/env/k8s-bin.sh)
    let bins = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/env/k8s-bin.sh"))
        .output()
        .expect("running tests/env/k8s-bin.sh");
    let dir = String::from_utf8_lossy(&bins.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let kubectl = std::path::Path::new(&dir).join("kubectl");
    let home = std::env::temp_dir().join(format!("plugin-help-{}", std::process::id()));
    std::fs::create_dir_all(&home).expect("an empty HOME");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_clusternet"))
            .arg("kubectl-clusternet")
            .args(args)
            .env("KUBECTL", &kubectl)
            .env("HOME", &home)
            .env("KUBECONFIG", home.join("no-such-kubeconfig"))
            .output()
            .expect("running the plugin");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for args in [&["--help"][..], &["get", "--help"][..], &[][..]] {
        let (ok, out, err) = run(args);
        assert!(ok, "{args:?}: {err}");
        let own = out.find("--cluster-id").expect("the plugin's own flags");
        let theirs = out.find("kubectl").expect("kubectl's help");
        assert!(
            own < out.rfind("kubectl's own help follows").unwrap_or(0) && theirs < out.len(),
            "{out}"
        );
        assert!(out.contains("--child-kubeconfig") && out.contains("--clusternet-as"));
        assert!(!err.contains("no configuration has been provided"), "{err}");
    }
    let (ok, out, err) = run(&["completion", "bash"]);
    assert!(ok && out.contains("complete"), "{err}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn shells_complete_the_binary_and_the_plugin() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = clusternet(&["completion", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(
            out.contains("clusternet") && out.contains("role") && out.contains("kubeconfig"),
            "{shell}: {out}"
        );
    }
    let (code, _, err) = clusternet(&["completion", "tcsh"]);
    assert_ne!(code, 0);
    assert!(err.contains("bash"), "the valid shells are named: {err}");
    // kubectl's plugin completion runs kubectl_complete-clusternet with the words so far
    let (code, out, _) = clusternet(&["kubectl_complete-clusternet", "--clu"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "--cluster-id\n--clusternet-as\n--clusternet-as-group\n--clusternet-as-uid\n:4\n"
    );
    let (_, out, _) = clusternet(&["kubectl_complete-clusternet", "--cluster-id=x", "ve"]);
    assert_eq!(out, "version\n:4\n");
    // a kubeconfig is a file name: the shell completes it
    let (_, out, _) = clusternet(&["kubectl_complete-clusternet", "--child-kubeconfig", ""]);
    assert_eq!(out, ":0\n");
}
