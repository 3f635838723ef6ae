//! The hub's resource limits (issue #21) against the real parent: an agent's tunnel sessions are
//! capped per cluster (only live ones count, so a reconnect after a blip gets in), watches are
//! capped per user (shadow API and proxied ones alike, released when the watch ends), and a
//! proxied upgrade or streamed response that moves no byte for the idle timeout is closed.
//!
//! Each test runs its own hub with small limits, called straight at its port with bearer tokens
//! (the parent checks them with a TokenReview); the test process plays the agent with the
//! crate's own tunnel client, and a tiny HTTP server in the test stands in for the child's
//! endpoints (a 101 upgrade that echoes, a response that streams one line and goes quiet).

mod support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use clusternet::apis::known;
use clusternet::tunnel::client::{ClientConfig, ClientOptions};
use clusternet::tunnel::session::SessionHandle;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use support::{Clusternet, TestEnv, TestNamespace, free_port, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

const WAIT: Duration = Duration::from_secs(30);

/// A hub of this test alone, with `flags`; killed when dropped.
struct LimitedHub {
    process: Clusternet,
    port: u16,
    token: String,
}

async fn start_hub(name: &str, flags: &[&str]) -> LimitedHub {
    static SETUP: OnceLock<()> = OnceLock::new();
    let env = TestEnv::get();
    SETUP.get_or_init(|| {
        env.install_crds();
        env.apply_bootstrap_rbac();
    });
    let port = free_port();
    let kubeconfig = format!("--kubeconfig={}", env.parent_kubeconfig().display());
    let secure = format!("--secure-port={port}");
    let mut args = vec![
        "--role=hub",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        &secure,
        &kubeconfig,
    ];
    args.extend_from_slice(flags);
    let process = Clusternet::start(name, &args);
    let token = support::kubeconfig_token(&env.parent_kubeconfig());
    let hub = LimitedHub {
        process,
        port,
        token,
    };
    wait_for("the hub to serve the shadow API", WAIT, || async {
        match support::get_from_hub(port, Some(&hub.token), "/apis/shadow/v1alpha1").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}; log {}", hub.process.log.display())),
        }
    })
    .await;
    hub
}

/// A ManagedCluster (no agent behind it) whose ID the test's own tunnel sessions use.
async fn fake_cluster(parent: &kube::Client, ns: &str) -> String {
    let id = uuid::Uuid::new_v4().to_string();
    let ar = kube::core::ApiResource::erase::<clusternet::apis::ManagedCluster>(&());
    let mc: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
        "metadata": {"name": "limits", "labels": {known::CLUSTER_ID_LABEL: id}},
        "spec": {"clusterId": id, "syncMode": "Pull"}
    }))
    .expect("a ManagedCluster");
    Api::<DynamicObject>::namespaced_with(parent.clone(), ns, &ar)
        .create(&PostParams::default(), &mc)
        .await
        .expect("creating the ManagedCluster");
    id
}

/// An agent's tunnel session to `hub` for cluster `id`, opened by the crate's tunnel client.
async fn agent_session(hub: &LimitedHub, id: &str) -> Result<SessionHandle, String> {
    let config = ClientConfig {
        url: format!("https://127.0.0.1:{}", hub.port),
        cluster_id: id.to_string(),
        token: hub.token.clone(),
    };
    clusternet::tunnel::client::connect(&config, &ClientOptions::default())
        .await
        .map_err(|e| e.to_string())
}

fn sockets(id: &str) -> String {
    format!("/apis/proxies.clusternet.io/v1alpha1/sockets/{id}")
}

/// An HTTP/1.1 exchange with the hub over TLS, read up to the end of the response head.
struct Exchange {
    code: u16,
    head: String,
    /// Bytes read after the head.
    body: Vec<u8>,
    stream: Tls,
}

impl Exchange {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The rest of the response (`Content-Length` bytes), as a Status.
    async fn status(mut self) -> Value {
        let length: usize = self
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("a Content-Length in {}", self.head));
        let mut buf = [0u8; 4096];
        while self.body.len() < length {
            match tokio::time::timeout(WAIT, self.stream.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => self.body.extend_from_slice(&buf[..n]),
                other => panic!("the body ended early ({other:?}): {:?}", self.body),
            }
        }
        let text = String::from_utf8_lossy(&self.body);
        serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("a Status body, not {text:?}: {e}"))
    }

    /// Reads until the body holds `what`.
    async fn read_until(&mut self, what: &str) {
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&self.body).contains(what) {
            let n = tokio::time::timeout(WAIT, self.stream.read(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("{what:?} in time; got {:?}", self.body))
                .expect("reading");
            assert!(n > 0, "the stream ended before {what:?}");
            self.body.extend_from_slice(&buf[..n]);
        }
    }

    /// Waits until the hub closes the connection; how long that took.
    async fn until_closed(&mut self) -> Duration {
        let started = Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout(WAIT, self.stream.read(&mut buf)).await {
                Err(_) => panic!("the hub kept the connection open for {WAIT:?}"),
                Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
                Ok(Ok(n)) => self.body.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// Closes our side (TLS close_notify, then FIN), as a client that stops watching.
    async fn close(mut self) {
        let _ = self.stream.shutdown().await;
    }
}

async fn exchange(port: u16, token: &str, path: &str, headers: &[(&str, &str)]) -> Exchange {
    let mut stream = support::tls_to_hub(port)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    stream
        .write_all(
            format!(
                "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n{extra}\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("sending the request");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = tokio::time::timeout(WAIT, stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no response head to {path} in time"))
            .expect("reading the response");
        assert!(n > 0, "the hub closed {path} before answering: {got:?}");
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    Exchange {
        code,
        head,
        body: got[end + 4..].to_vec(),
        stream,
    }
}

/// Stands in for endpoints in the child: `/upgrade` answers 101 and echoes, `/stream` sends a
/// chunked response with one line and then nothing. Every connection the hub closes is
/// reported with its path.
async fn upstream() -> (u16, mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the upstream");
    let port = listener.local_addr().expect("address").port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                let echo = path.starts_with("/upgrade");
                let answer: &[u8] = if echo {
                    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"
                } else {
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n11\r\n{\"type\":\"ADDED\"}\n\r\n"
                };
                if socket.write_all(answer).await.is_err() {
                    return;
                }
                loop {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) if echo => {
                            if socket.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        Ok(_) => {}
                    }
                }
                let _ = tx.send(path);
            });
        }
    });
    (port, rx)
}

/// A hub with `flag`, a ManagedCluster in a namespace of the test, the test's tunnel session for
/// it, and the stand-in upstream behind that tunnel.
struct Setup {
    parent: kube::Client,
    hub: LimitedHub,
    ns: TestNamespace,
    id: String,
    _agent: SessionHandle,
    upstream_port: u16,
    closed: mpsc::UnboundedReceiver<String>,
}

impl Setup {
    async fn start(name: &str, flag: &str) -> Setup {
        let env = TestEnv::get();
        let parent = env.parent().await;
        let hub = start_hub(name, &[flag]).await;
        let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "limits").await;
        let id = fake_cluster(&parent, &ns.name).await;
        let agent = agent_session(&hub, &id).await.expect("a tunnel session");
        let (upstream_port, closed) = upstream().await;
        Setup {
            parent,
            hub,
            ns,
            id,
            _agent: agent,
            upstream_port,
            closed,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_sessions_are_capped_per_cluster_counting_only_live_ones() {
    let hub = start_hub(
        "hub-limits-tunnels",
        &["--max-tunnel-sessions-per-cluster=2"],
    )
    .await;
    let id = uuid::Uuid::new_v4().to_string();

    let first = agent_session(&hub, &id).await.expect("the first session");
    let _second = agent_session(&hub, &id).await.expect("the second session");
    let third = agent_session(&hub, &id).await;
    assert!(
        third.as_ref().is_err_and(|e| e.contains("429")),
        "a third session is refused: {third:?}"
    );
    // what the agent is told, read as a plain answer
    let upgrade = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    let refused = exchange(hub.port, &hub.token, &sockets(&id), &upgrade).await;
    assert_eq!(refused.code, 429, "{}", refused.head);
    assert_eq!(refused.header("retry-after"), Some("5"), "{}", refused.head);
    let status = refused.status().await;
    assert_eq!(status["reason"], "TooManyRequests", "{status}");
    assert_eq!(
        status["message"],
        format!(
            "cluster {id} already has 2 live tunnel sessions at this hub, the limit (--max-tunnel-sessions-per-cluster=2)"
        ),
        "{status}"
    );
    let other = agent_session(&hub, &uuid::Uuid::new_v4().to_string()).await;
    assert!(other.is_ok(), "the cap is per cluster: {other:?}");
    let refusals = hub
        .process
        .metric("clusternet_socket_connections_refused_total")
        .await;
    assert!(refusals >= Some(2.0), "refusals counted: {refusals:?}");

    // a session that ends gives its place back at once
    first.close();
    let replacement = wait_for("a place after a session ended", WAIT, || async {
        agent_session(&hub, &id).await
    })
    .await;

    // a socket whose agent went away without a word (a blip: the upgrade done, then silence)
    // holds a place only until it has missed three pings (15 s), long before the hub's 60 s read
    // timeout closes it: the agent's reconnect gets in while the dead socket is still open
    replacement.close();
    let mut dead = wait_for("a place for the dead socket", WAIT, || async {
        match exchange(hub.port, &hub.token, &sockets(&id), &upgrade).await {
            e if e.code == 101 => Ok(e),
            e => Err(e.head),
        }
    })
    .await;
    let blocked = agent_session(&hub, &id).await;
    assert!(
        blocked.is_err(),
        "while the dead socket is fresh the cap is full: {blocked:?}"
    );
    let reconnected = wait_for(
        "the agent's reconnect next to its dead socket",
        Duration::from_secs(40),
        || async { agent_session(&hub, &id).await },
    )
    .await;
    assert!(!reconnected.is_closed());
    let mut probe = [0u8; 1];
    let still_open =
        tokio::time::timeout(Duration::from_millis(200), dead.stream.read(&mut probe)).await;
    assert!(
        still_open.is_err(),
        "the dead socket was not closed to make room: {still_open:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_capped_per_user_and_released_when_they_end() {
    // every field bound: a field left to `..` would be dropped (the namespace deleted) at once
    let Setup {
        parent,
        hub,
        ns,
        id,
        upstream_port,
        _agent,
        closed: _closed,
    } = Setup::start("hub-limits-watches", "--max-watches-per-user=2").await;
    let shadow_watch = format!(
        "/apis/shadow/v1alpha1/namespaces/{}/configmaps?watch=true",
        ns.name
    );
    let proxied_watch = format!(
        "{}/proxy/http/127.0.0.1:{upstream_port}/api/v1/pods?watch=true",
        sockets(&id)
    );
    // the hub learns of the ManagedCluster from its watch of the parent
    let first_proxied = wait_for("the proxied watch to start", WAIT, || async {
        let e = exchange(hub.port, &hub.token, &proxied_watch, &[]).await;
        if e.code == 200 { Ok(e) } else { Err(e.head) }
    })
    .await;
    let first_shadow = exchange(hub.port, &hub.token, &shadow_watch, &[]).await;
    assert_eq!(first_shadow.code, 200, "{}", first_shadow.head);

    // a third watch of the same user, of either kind, is refused
    for path in [&shadow_watch, &proxied_watch] {
        let refused = exchange(hub.port, &hub.token, path, &[]).await;
        assert_eq!(refused.code, 429, "{path}: {}", refused.head);
        assert_eq!(refused.header("retry-after"), Some("5"), "{}", refused.head);
        let status = refused.status().await;
        assert_eq!(status["reason"], "TooManyRequests", "{status}");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("too many watches: user ")
                && message
                    .ends_with(" has 2 open at this hub, the limit (--max-watches-per-user=2)"),
            "{message}"
        );
    }
    // plain requests are not watches
    let list = exchange(
        hub.port,
        &hub.token,
        &format!("/apis/shadow/v1alpha1/namespaces/{}/configmaps", ns.name),
        &[],
    )
    .await;
    assert_eq!(list.code, 200, "{}", list.head);

    // another user has a cap of their own
    let sa_token = service_account_token(&parent, &ns.name).await;
    let theirs = exchange(hub.port, &sa_token, &shadow_watch, &[]).await;
    assert_eq!(theirs.code, 200, "another user's watch: {}", theirs.head);

    let refused = hub
        .process
        .metric("clusternet_hub_watches_refused_total")
        .await;
    assert!(refused >= Some(2.0), "refusals counted: {refused:?}");
    let open = hub.process.metric("clusternet_hub_watches_open").await;
    assert_eq!(open, Some(3.0), "open watches");

    // a watch that ends, of either kind, gives its place back (the new ones are held, so the
    // next place comes from the next close)
    let mut held = vec![theirs];
    for (ended, path) in [
        (first_proxied, &proxied_watch),
        (first_shadow, &shadow_watch),
    ] {
        ended.close().await;
        held.push(
            wait_for("a place after a watch ended", WAIT, || async {
                let e = exchange(hub.port, &hub.token, path, &[]).await;
                if e.code == 200 { Ok(e) } else { Err(e.head) }
            })
            .await,
        );
    }
    for e in held {
        e.close().await;
    }
}

/// A token of a new ServiceAccount that may do anything in `ns` (and so watch the shadow API
/// there).
async fn service_account_token(parent: &kube::Client, ns: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(parent.clone(), ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "watcher"}})).expect("SA"),
    )
    .await
    .expect("creating the ServiceAccount");
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::rbac::v1::RoleBinding>(&());
    Api::<DynamicObject>::namespaced_with(parent.clone(), ns, &ar)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "watcher"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "watcher", "namespace": ns}]
            }))
            .expect("RoleBinding"),
        )
        .await
        .expect("binding the ServiceAccount");
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .expect("TokenRequest");
    sas.create_token_request("watcher", &PostParams::default(), &request)
        .await
        .expect("a token")
        .status
        .and_then(|s| s.token)
        .expect("a token in the status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_proxied_connections_are_closed() {
    let Setup {
        hub,
        id,
        upstream_port,
        mut closed,
        _agent,
        parent: _parent,
        ns: _ns,
    } = Setup::start("hub-limits-idle", "--proxy-idle-timeout=2s").await;
    let proxy = |rest: &str| {
        format!(
            "{}/proxy/http/127.0.0.1:{upstream_port}{rest}",
            sockets(&id)
        )
    };

    // an upgraded stream (as exec/attach/port-forward): traffic keeps it open past the timeout
    let upgrade = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")];
    let mut exec = wait_for("the proxied upgrade", WAIT, || async {
        let e = exchange(hub.port, &hub.token, &proxy("/upgrade"), &upgrade).await;
        if e.code == 101 { Ok(e) } else { Err(e.head) }
    })
    .await;
    let started = Instant::now();
    for i in 0..5 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let word = format!("ping{i};");
        exec.stream
            .write_all(word.as_bytes())
            .await
            .expect("writing through the upgrade");
        exec.read_until(&word).await;
    }
    assert!(started.elapsed() > Duration::from_secs(3));
    // then nothing moves: the hub closes both sides
    let after = exec.until_closed().await;
    assert!(
        after >= Duration::from_millis(1500),
        "closed only after the idle timeout, not {after:?}"
    );
    let upstream_saw = tokio::time::timeout(WAIT, closed.recv()).await;
    assert_eq!(
        upstream_saw,
        Ok(Some("/upgrade".to_string())),
        "the child's side is closed too"
    );

    // a streamed response (as logs -f) that goes quiet after its first line
    let mut follow = exchange(hub.port, &hub.token, &proxy("/stream?follow=true"), &[]).await;
    if follow.code != 200 {
        panic!("the streamed response: {}", follow.status().await);
    }
    follow.read_until("ADDED").await;
    let after = follow.until_closed().await;
    assert!(
        after >= Duration::from_millis(1500) && after < Duration::from_secs(15),
        "closed after the idle timeout, not {after:?}"
    );
    let upstream_saw = tokio::time::timeout(WAIT, closed.recv()).await;
    assert_eq!(upstream_saw, Ok(Some("/stream?follow=true".to_string())));

    let log = hub.process.log_text();
    assert!(
        log.contains("closed an idle proxied upgrade"),
        "the hub says why it closed the upgrade; log {}",
        hub.process.log.display()
    );
    assert!(
        log.contains("closing an idle proxied response"),
        "and the response; log {}",
        hub.process.log.display()
    );
}
