//! A real browser for the dashboard's tests and benchmark: headless Chromium (Debian's
//! `chromium-headless-shell`; `CLUSTERNET_CHROMIUM` names another) run once per page
//! ([`dom`], [`screenshot`]) or kept open and driven through the DevTools protocol
//! ([`LivePage`]), and `kubectl clusternet dashboard` serving the hub's pages on 127.0.0.1
//! ([`Dashboard`]).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use super::{TestEnv, uid, wait_for};

/// The headless browser: `CLUSTERNET_CHROMIUM`, else the first of Debian's names on PATH.
pub fn chromium() -> PathBuf {
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

pub fn browser(args: &[&str]) -> String {
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
pub fn dom(url: &str) -> String {
    browser(&["--dump-dom", url])
}

/// A screenshot of `url`, kept as a test artefact.
pub fn screenshot(url: &str, name: &str) -> PathBuf {
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
pub fn reqwest_like_get(url: &str) -> String {
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
pub struct LivePage {
    child: Child,
    ws: async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>,
    next_id: u64,
    profile: PathBuf,
}

impl LivePage {
    pub async fn open(url: &str) -> LivePage {
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
    pub async fn eval(&mut self, expression: &str) -> serde_json::Value {
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

    /// [`LivePage::open`], then waits until the page follows the hub's events (the dashboard's
    /// live updates are on).
    pub async fn open_live(url: &str) -> LivePage {
        let mut page = LivePage::open(url).await;
        page.wait_until(
            "the page to follow the hub's events",
            "document.body.dataset.live",
            serde_json::json!("on"),
            Duration::from_secs(20),
        )
        .await;
        page
    }

    /// Evaluates `expression` until it gives `want`.
    pub async fn wait_until(
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
pub struct Dashboard {
    child: Child,
    pub url: String,
}

impl Dashboard {
    pub fn start(env: &TestEnv, args: &[&str]) -> Dashboard {
        let mut child = Command::new(super::clusternet_bin())
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

    pub fn page(&self, page: &str) -> String {
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
