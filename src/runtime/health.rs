//! `/healthz`, `/livez`, `/readyz` and `/metrics` on one port, for every role of the process.
//!
//! Readiness is a set of named checks (an informer cache has synced, a role has started); `/readyz`
//! answers 200 only when all of them pass, and `?verbose` lists them the way kube-apiserver does.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;
use warp::Filter;
use warp::http::StatusCode;

#[derive(Clone, Default)]
pub struct Readiness {
    checks: Arc<Mutex<BTreeMap<String, bool>>>,
}

/// One named readiness check; set it to true once the thing it names is ready.
#[derive(Clone)]
pub struct Check {
    name: String,
    checks: Arc<Mutex<BTreeMap<String, bool>>>,
}

impl Check {
    pub fn set(&self, ok: bool) {
        let mut c = match self.checks.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        c.insert(self.name.clone(), ok);
    }
}

impl Readiness {
    pub fn register(&self, name: impl Into<String>) -> Check {
        let check = Check {
            name: name.into(),
            checks: self.checks.clone(),
        };
        check.set(false);
        check
    }

    /// (all ready, one line per check).
    pub fn report(&self) -> (bool, String) {
        let c = match self.checks.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        let mut out = String::new();
        let mut all = true;
        for (name, ok) in c.iter() {
            all &= ok;
            out.push_str(&format!("[{}] {name}\n", if *ok { "+" } else { "-" }));
        }
        (all, out)
    }
}

/// Binds the health/metrics listener (so a bad address fails at start-up) and serves it until shutdown.
pub async fn serve(
    addr: SocketAddr,
    readiness: Readiness,
    metrics: PrometheusHandle,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let health = warp::path("healthz")
        .or(warp::path("livez"))
        .unify()
        .and(warp::path::end())
        .map(|| "ok");
    let verbose = warp::query::<BTreeMap<String, String>>();
    let ready = warp::path("readyz")
        .and(warp::path::end())
        .and(verbose)
        .map(move |q: BTreeMap<String, String>| {
            let (ok, lines) = readiness.report();
            let body = if q.contains_key("verbose") {
                format!(
                    "{lines}readyz check {}\n",
                    if ok { "passed" } else { "failed" }
                )
            } else if ok {
                "ok".to_string()
            } else {
                format!("{lines}readyz check failed\n")
            };
            let status = if ok {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            warp::reply::with_status(body, status)
        });
    let render = metrics.clone();
    let metrics_route = warp::path("metrics").and(warp::path::end()).map(move || {
        super::telemetry::record_process_metrics();
        let mut text = render.render();
        text.push_str(&super::telemetry::collected());
        warp::reply::with_header(text, "content-type", "text/plain; version=0.0.4")
    });
    let routes = health.or(ready).or(metrics_route);
    let upkeep_shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = upkeep_shutdown.cancelled() => break,
                _ = tick.tick() => metrics.run_upkeep(),
            }
        }
    });
    tokio::spawn(
        warp::serve(routes)
            .incoming(listener)
            .graceful(async move { shutdown.cancelled().await })
            .run(),
    );
    Ok(local)
}
