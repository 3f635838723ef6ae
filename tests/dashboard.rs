//! The dashboard in a real browser against real control planes: `kubectl clusternet dashboard`
//! serves the hub's pages on 127.0.0.1 with the user's kubeconfig, and headless Chromium (Debian's
//! `chromium-headless-shell`; `CLUSTERNET_CHROMIUM` names another) renders them. Screenshots of
//! each page are saved under `target/test-artifacts/`.

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clusternet::apis::Subscription;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{TestEnv, TestNamespace, create_manifests, register, uid, wait_for};

/// The headless browser: `CLUSTERNET_CHROMIUM`, else the first of Debian's names on PATH.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CLUSTERNET_CHROMIUM") {
        return PathBuf::from(p);
    }
    for name in ["chromium-headless-shell", "chromium", "chromium-browser"] {
        if let Some(dir) = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .find(|d| d.join(name).is_file())
        {
            return dir.join(name);
        }
    }
    for p in [
        "/usr/lib/chromium/headless_shell",
        "/usr/lib/chromium/chromium",
    ] {
        if std::path::Path::new(p).is_file() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "no headless Chromium: install Debian's chromium-headless-shell (tests/env/browser.sh does) \
         or set CLUSTERNET_CHROMIUM"
    );
}

fn browser(args: &[&str]) -> String {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
        ])
        .args([
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1440,900",
        ])
        .args(args)
        .output()
        .expect("running chromium");
    assert!(
        out.status.success(),
        "chromium {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The page as the browser rendered it (its DOM after loading).
fn dom(url: &str) -> String {
    browser(&["--dump-dom", url])
}

/// A screenshot of `url`, kept as a test artefact.
fn screenshot(url: &str, name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&dir).expect("artefact directory");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    browser(&[&format!("--screenshot={}", path.display()), url]);
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    assert!(size > 1000, "screenshot {} is empty", path.display());
    path
}

/// `GET url` with a bare HTTP/1.1 request (the local server is plain HTTP on loopback): the
/// body, with the status line and headers before it.
fn reqwest_like_get(url: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut s = std::net::TcpStream::connect(authority).expect("connecting");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("a read timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    // up to the end of the headers, then Content-Length bytes (a server may keep the
    // connection open whatever the request says), else to the end of the stream
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => raw.push(byte[0]),
            _ => break,
        }
    }
    let head = String::from_utf8_lossy(&raw).into_owned();
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k.eq_ignore_ascii_case("content-length") {
            v.trim().parse::<usize>().ok()
        } else {
            None
        }
    });
    let mut body = Vec::new();
    match length {
        Some(n) => {
            body.resize(n, 0);
            s.read_exact(&mut body).expect("the body");
        }
        None => {
            let _ = s.read_to_end(&mut body);
        }
    }
    head + &String::from_utf8_lossy(&body)
}

/// A headless Chromium kept open on a page and driven through the DevTools protocol: the page
/// stays loaded while the fleet changes, as a person's would.
struct LivePage {
    child: Child,
    ws: async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>,
    next_id: u64,
    profile: PathBuf,
}

impl LivePage {
    async fn open(url: &str) -> LivePage {
        let profile = std::env::temp_dir().join(format!("clusternet-chromium-{}", uid()));
        let mut child = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
            ])
            .args(["--no-first-run", "--remote-debugging-port=0"])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting chromium");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // keep draining: a full pipe would stall the browser
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("DevTools listening on ") {
                    let _ = tx.send(rest.to_string());
                }
            }
        });
        let endpoint = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("chromium's DevTools endpoint");
        let authority = endpoint
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .expect("host:port")
            .to_string();
        let targets = wait_for(
            "the page's DevTools target",
            Duration::from_secs(20),
            || async {
                let raw = reqwest_like_get(&format!("http://{authority}/json/list"));
                let body = raw
                    .split_once("\r\n\r\n")
                    .map(|(_, b)| b)
                    .unwrap_or_default();
                let list: Vec<serde_json::Value> =
                    serde_json::from_str(body).map_err(|e| format!("{e}: {raw}"))?;
                list.into_iter()
                    .find(|t| t["type"] == "page")
                    .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(str::to_string))
                    .ok_or_else(|| format!("no page yet: {body}"))
            },
        )
        .await;
        let (ws, _) = async_tungstenite::tokio::connect_async(targets.as_str())
            .await
            .expect("connecting to the page");
        LivePage {
            child,
            ws,
            next_id: 0,
            profile,
        }
    }

    /// The value of `expression` in the page.
    async fn eval(&mut self, expression: &str) -> serde_json::Value {
        use async_tungstenite::tungstenite::Message;
        use futures::StreamExt;
        self.next_id += 1;
        let id = self.next_id;
        let call = json!({"id": id, "method": "Runtime.evaluate",
                          "params": {"expression": expression, "returnByValue": true}});
        self.ws
            .send(Message::Text(call.to_string().into()))
            .await
            .expect("sending to the page");
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(20), self.ws.next())
                .await
                .expect("the page answers")
                .expect("the page's connection")
                .expect("a message");
            if let Message::Text(text) = msg {
                let v: serde_json::Value = serde_json::from_str(text.as_str()).expect("JSON");
                if v["id"] == id {
                    return v["result"]["result"]["value"].clone();
                }
            }
        }
    }

    /// Evaluates `expression` until it gives `want`.
    async fn wait_until(
        &mut self,
        what: &str,
        expression: &str,
        want: serde_json::Value,
        within: Duration,
    ) {
        let start = std::time::Instant::now();
        loop {
            let got = self.eval(expression).await;
            if got == want {
                return;
            }
            assert!(
                start.elapsed() < within,
                "{what}: {expression} is {got}, not {want}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for LivePage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// `kubectl clusternet dashboard --no-browser --port 0 ARGS`, running until dropped.
struct Dashboard {
    child: Child,
    url: String,
}

impl Dashboard {
    fn start(env: &TestEnv, args: &[&str]) -> Dashboard {
        let mut child = Command::new(env!("CARGO_BIN_EXE_clusternet"))
            .arg("kubectl-clusternet")
            .arg(format!(
                "--kubeconfig={}",
                env.parent_kubeconfig().display()
            ))
            .args(args)
            .args(["dashboard", "--no-browser", "--port", "0"])
            .env("KUBECTL", env.bin("kubectl"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting kubectl clusternet dashboard");
        let stdout = child.stdout.take().expect("stdout");
        let mut first = String::new();
        BufReader::new(stdout)
            .read_line(&mut first)
            .expect("reading the dashboard's URL");
        let url = first
            .trim()
            .strip_prefix("Clusternet dashboard available at ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .trim_end_matches('/')
            .to_string();
        Dashboard { child, url }
    }

    fn page(&self, page: &str) -> String {
        format!(
            "{}/apis/dashboard.clusternet.io/v1alpha1/pages/{page}",
            self.url
        )
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two Pull children with a Subscription deployed to both: the Clusters page shows both Ready
/// with their capacity and tunnel, the Subscriptions page shows it bound to both with their
/// ready counts; the local server's root leads to the Clusters page.
#[tokio::test]
async fn the_pages_show_the_fleet_and_its_subscriptions() {
    let env = TestEnv::get();
    env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 2], "Pull", &[]).await;
    let appns = format!("dash-{id}");
    create_manifests(
        &parent,
        &[json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hello", "namespace": appns},
                 "data": {"greeting": "hi"}}),
          json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns}})],
    )
    .await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "dashboard").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    subs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "hello", "namespace": ns.name},
            "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
                     "feeds": [{"apiVersion": "v1", "kind": "Namespace", "name": appns},
                               {"apiVersion": "v1", "kind": "ConfigMap", "namespace": appns, "name": "hello"}]}}))
        .expect("a Subscription"),
    )
    .await
    .expect("creating the Subscription");
    wait_for(
        "the Subscription available in both children",
        Duration::from_secs(60),
        || async {
            let s = subs.get("hello").await.map_err(|e| e.to_string())?;
            let st = s.status.unwrap_or_default();
            let all = st.aggregated_statuses.len() == 2
                && st.aggregated_statuses.iter().all(|a| {
                    a.feed_status_details.len() == 2
                        && a.feed_status_details
                            .iter()
                            .all(|d| d.feed_status.available)
                });
            if all {
                Ok(())
            } else {
                Err(format!("{:?}", st.aggregated_statuses))
            }
        },
    )
    .await;

    let dash = Dashboard::start(env, &[]);
    let page = dom(&dash.page("clusters"));
    for c in &clusters {
        let row = format!(
            "data-cluster=\"{}/{}\" class=\"ready\"",
            c.dedicated, c.name
        );
        assert!(
            page.contains(&row),
            "{row} missing from the Clusters page:\n{page}"
        );
    }
    for want in [
        "<td class=\"state\">Ready</td>",
        "allocatable of",
        "Pull",
        "<meter",
    ] {
        assert!(
            page.contains(want),
            "{want:?} missing from the Clusters page:\n{page}"
        );
    }
    // the root of the local server is the Clusters page, and the page's own links stay on the
    // local server (the stylesheet loads through it too)
    assert!(dom(&format!("{}/", dash.url)).contains("<h1>Clusters</h1>"));
    assert!(
        page.contains("<a href=\"subscriptions\">Subscriptions</a>")
            && page.contains("href=\"assets/dashboard.css\""),
        "links are relative: {page}"
    );
    let css = reqwest_like_get(&dash.page("assets/dashboard.css"));
    assert!(css.contains("font:"), "the stylesheet: {css}");
    // no script, no framing, through the aggregator and the local server alike
    let raw = reqwest_like_get(&dash.page("clusters")).to_lowercase();
    for header in [
        "content-security-policy: default-src 'none'; style-src 'self'",
        "x-frame-options: deny",
        "x-content-type-options: nosniff",
    ] {
        assert!(raw.contains(header), "{header} missing: {raw}");
    }
    // the one script is the hub's own file, nothing inline (the aggregator re-serialises the
    // HTML it proxies, `defer` comes back as `defer=""`)
    assert_eq!(raw.matches("<script").count(), 1, "{raw}");
    assert!(raw.contains("<script src=\"assets/dashboard.js\""), "{raw}");
    let js = reqwest_like_get(&dash.page("assets/dashboard.js"));
    assert!(js.contains("new EventSource(\"events\")"), "{js}");
    let page = dom(&dash.page("subscriptions"));
    let row = format!("data-subscription=\"{}/hello\"", ns.name);
    assert!(page.contains(&row), "{row} missing:\n{page}");
    for c in &clusters {
        let bound = format!(
            "<div class=\"bound ready\" data-cluster=\"{}/{}\">",
            c.dedicated, c.name
        );
        assert!(page.contains(&bound), "{bound} missing:\n{page}");
    }
    assert!(page.contains("2/2 ready"), "{page}");
    screenshot(&dash.page("clusters"), "dashboard-clusters.png");
    screenshot(&dash.page("subscriptions"), "dashboard-subscriptions.png");
}

/// An open Clusters page follows the fleet: the agent of a child stops, and its row turns
/// not ready in the page that stays loaded (the same document: no reload), fed by the hub's
/// server-sent events.
#[tokio::test]
async fn an_open_page_follows_the_fleet_without_a_reload() {
    let env = TestEnv::get();
    env.with_hub();
    env.with_controller();
    let id = uid();
    let mut clusters = support::register_with(
        env,
        &id,
        &[2],
        "Pull",
        &[],
        &["--cluster-status-update-frequency=2s"],
    )
    .await;
    let c = &mut clusters[0];
    let dash = Dashboard::start(env, &[]);
    let mut page = LivePage::open(&dash.page("clusters")).await;
    page.wait_until(
        "the page to follow the hub's events",
        "document.body.dataset.live",
        json!("on"),
        Duration::from_secs(20),
    )
    .await;
    let row = format!(
        "document.querySelector('tr[data-cluster=\"{}/{}\"]')?.className ?? 'missing'",
        c.dedicated, c.name
    );
    page.wait_until(
        "the cluster to show ready",
        &row,
        json!("ready"),
        Duration::from_secs(30),
    )
    .await;
    // a mark only this document carries: a reload would lose it
    assert_eq!(page.eval("window.clusternetTestMark = 42").await, json!(42));
    c.agent.kill();
    page.wait_until(
        "the row to turn not ready",
        &row,
        json!("not-ready"),
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(
        page.eval("window.clusternetTestMark").await,
        json!(42),
        "the page was updated in place, not reloaded"
    );
    let state = format!(
        "document.querySelector('tr[data-cluster=\"{}/{}\"] td.state')?.textContent",
        c.dedicated, c.name
    );
    let text = page.eval(&state).await;
    assert!(
        text.as_str().is_some_and(|t| t.starts_with("NotReady")),
        "the state cell: {text}"
    );
}

/// A user who may open the pages but not list ManagedClusters sees a clear message and none
/// of them; one who may not open the pages gets the parent's own refusal.
#[tokio::test]
async fn a_user_without_rights_sees_a_message_not_the_data() {
    let env = TestEnv::get();
    env.with_hub();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[3], "Pull", &[]).await;
    let user = format!("dash-viewer-{id}");
    let rbac = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": format!("pages-{id}")},
               "rules": [{"apiGroups": ["dashboard.clusternet.io"], "resources": ["pages"], "verbs": ["get"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": format!("pages-{id}")},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("pages-{id}")},
               "subjects": [{"kind": "User", "name": user}]}),
    ];
    for obj in &rbac {
        env.kubectl_apply(obj);
    }
    let as_user = format!("--as={user}");
    let dash = Dashboard::start(env, &[&as_user]);
    let page = wait_for("the RBAC to apply", Duration::from_secs(20), || async {
        let page = dom(&dash.page("clusters"));
        if page.contains("class=\"denied\"") {
            Ok(page)
        } else {
            Err(page)
        }
    })
    .await;
    assert!(
        page.contains("may not see this page") && page.contains("managedclusters"),
        "{page}"
    );
    assert!(!page.contains("data-cluster="), "no cluster shown: {page}");
    assert!(
        !page.contains(&clusters[0].dedicated),
        "nothing of the fleet: {page}"
    );
    screenshot(&dash.page("clusters"), "dashboard-denied.png");

    // without the pages' own right, the parent refuses before the hub is asked
    let nobody = Dashboard::start(env, &["--as=nobody-at-all"]);
    let page = dom(&nobody.page("clusters"));
    assert!(
        page.contains("Forbidden") || page.contains("forbidden"),
        "{page}"
    );
    assert!(!page.contains("data-cluster="), "{page}");

    let cleanup = |kind: &str| {
        let _ = Command::new(env.bin("kubectl"))
            .arg("--kubeconfig")
            .arg(env.parent_kubeconfig())
            .args(["delete", kind, &format!("pages-{id}"), "--ignore-not-found"])
            .output();
    };
    cleanup("clusterrolebinding");
    cleanup("clusterrole");
    let _ = parent;
}
