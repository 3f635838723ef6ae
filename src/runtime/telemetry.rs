//! Logs (tracing-subscriber, text for humans or JSON for machines) and the Prometheus recorder,
//! including the standard `process_*` metrics that client-go based components export.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber once; `RUST_LOG` wins over the configured filter when set.
pub fn init_logging(format: LogFormat, filter: &str) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .or_else(|| EnvFilter::try_new(filter).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

type Collector = Box<dyn Fn() -> String + Send + Sync>;
static COLLECTORS: std::sync::Mutex<std::collections::BTreeMap<&'static str, Collector>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Registers (or replaces) `name`'s collector: text in Prometheus' exposition format computed
/// at every scrape, for series whose label sets follow objects that come and go (one per
/// cluster), which a gauge would keep after the object is gone.
pub fn register_collector(
    name: &'static str,
    collect: impl Fn() -> String + Send + Sync + 'static,
) {
    let mut c = COLLECTORS.lock().unwrap_or_else(|p| p.into_inner());
    c.insert(name, Box::new(collect));
}

/// What the registered collectors say now.
pub fn collected() -> String {
    let c = COLLECTORS.lock().unwrap_or_else(|p| p.into_inner());
    c.values().map(|f| f()).collect()
}

/// A label value in the exposition format (backslash, quote and newline escaped).
pub fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The process-wide recorder (installed on first use), with explicit histogram buckets.
pub fn metrics_handle() -> Result<PrometheusHandle, String> {
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let handle = PrometheusBuilder::new()
        // a scheduling decision takes micro- to milliseconds: finer buckets than the rest (upstream's
        // scheduling_algorithm_duration_seconds starts at 1 ms too), so its p99 can be read
        .set_buckets_for_metric(
            Matcher::Full("clusternet_scheduler_e2e_scheduling_duration_seconds".to_string()),
            &[
                0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
            ],
        )
        .map_err(|e| e.to_string())?
        // a rollout stage takes seconds to hours (its soak, its deadline)
        .set_buckets_for_metric(
            Matcher::Full("clusternet_rollout_stage_duration_seconds".to_string()),
            &[
                1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0,
            ],
        )
        .map_err(|e| e.to_string())?
        .set_buckets_for_metric(
            Matcher::Suffix("_seconds".to_string()),
            &[
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ],
        )
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())?;
    let _ = HANDLE.set(handle.clone());
    Ok(HANDLE.get().cloned().unwrap_or(handle))
}

/// The number after `field` (`VmRSS:`, `RssAnon:`, `Threads:`, ...) in the text of
/// /proc/PID/status: kB for the sizes, a count for the rest; None when absent or not a number.
pub fn proc_status_value(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// Refreshes process_* gauges from /proc (Linux); silently skipped where /proc is absent.
pub fn record_process_metrics() {
    static START: OnceLock<f64> = OnceLock::new();
    let start = *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    });
    metrics::gauge!("process_start_time_seconds").set(start);
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for (field, gauge, scale) in [
            ("VmRSS:", "process_resident_memory_bytes", 1024.0),
            ("VmSize:", "process_virtual_memory_bytes", 1024.0),
            ("Threads:", "process_threads", 1.0),
        ] {
            if let Some(v) = proc_status_value(&status, field) {
                metrics::gauge!(gauge).set(v as f64 * scale);
            }
        }
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // fields after the parenthesised command name; utime and stime are 14th and 15th overall
        if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if let (Some(u), Some(s)) = (f.get(11), f.get(12))
                && let (Ok(u), Ok(s)) = (u.parse::<f64>(), s.parse::<f64>())
            {
                // USER_HZ is 100 on every Linux we target
                metrics::gauge!("process_cpu_seconds_total").set((u + s) / 100.0);
            }
        }
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        metrics::gauge!("process_open_fds").set(fds.count() as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_numbers_from_proc_status() {
        let status = "Name:\tclusternet\nVmRSS:\t   51200 kB\nRssAnon:\t   40960 kB\nThreads:\t3\n";
        assert_eq!(proc_status_value(status, "VmRSS:"), Some(51200));
        assert_eq!(proc_status_value(status, "RssAnon:"), Some(40960));
        assert_eq!(proc_status_value(status, "Threads:"), Some(3));
        assert_eq!(proc_status_value(status, "RssFile:"), None);
        assert_eq!(proc_status_value("RssAnon:\tlots kB\n", "RssAnon:"), None);
    }
}
