//! Metric gates of a rollout stage (docs/spec/deployer.md §16): a Prometheus instant query
//! (`GET <address>/api/v1/query`) whose every sample must meet a threshold. The query names the
//! stage's clusters through `$CLUSTERS`; what the answer means is decided here, purely, and the
//! rollout controller fails the stage on a failing gate and holds it on a waiting one.

use std::time::Duration;

use http_body_util::Full;
use serde_json::Value;

use crate::apis::{GateStatus, MetricComparison, MetricGate, NoData};
use crate::runtime::plainhttp;

const TIMEOUT: Duration = Duration::from_secs(10);

/// What one evaluation of a gate found.
#[derive(Debug, Clone, PartialEq)]
pub enum GateResult {
    Passing(String),
    Failing(String),
    /// No data, or Prometheus not reached or not understood: the stage cannot pass yet.
    Waiting(String),
}

impl GateResult {
    pub fn status(&self, name: &str) -> GateStatus {
        let (state, message) = match self {
            GateResult::Passing(m) => ("Passing", m),
            GateResult::Failing(m) => ("Failing", m),
            GateResult::Waiting(m) => ("Waiting", m),
        };
        GateStatus {
            name: name.to_string(),
            state: state.into(),
            message: message.clone(),
        }
    }
}

/// The regex metacharacters of RE2 escaped, so a cluster name matches only itself.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The gate's query for a stage: `$CLUSTERS` the clusters' names (`<namespace>/<name>` entries
/// give their name), `$STAGE` the stage's name. A PromQL string keeps a backslash only doubled,
/// so the escapes are doubled too.
pub fn expand(query: &str, stage: &str, clusters: &[String]) -> String {
    let names: Vec<String> = clusters
        .iter()
        .map(|c| c.rsplit('/').next().unwrap_or(c))
        .map(|n| regex_escape(n).replace('\\', "\\\\"))
        .collect();
    query
        .replace("$CLUSTERS", &names.join("|"))
        .replace("$STAGE", stage)
}

fn meets(v: f64, cmp: MetricComparison, threshold: f64) -> bool {
    match cmp {
        MetricComparison::LessThan => v < threshold,
        MetricComparison::LessOrEqual => v <= threshold,
        MetricComparison::GreaterThan => v > threshold,
        MetricComparison::GreaterOrEqual => v >= threshold,
    }
}

fn symbol(cmp: MetricComparison) -> &'static str {
    match cmp {
        MetricComparison::LessThan => "<",
        MetricComparison::LessOrEqual => "<=",
        MetricComparison::GreaterThan => ">",
        MetricComparison::GreaterOrEqual => ">=",
    }
}

/// The samples of an instant query's answer (`vector` or `scalar`), each with its labels.
fn samples(body: &Value) -> Result<Vec<(String, f64)>, String> {
    if body["status"] != "success" {
        return Err(format!(
            "Prometheus answered {}: {}",
            body["errorType"].as_str().unwrap_or("an error"),
            body["error"].as_str().unwrap_or("(no message)")
        ));
    }
    let value = |pair: &Value| -> Result<f64, String> {
        pair.get(1)
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| format!("a sample that is not a number: {pair}"))
    };
    let data = &body["data"];
    match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|s| Ok((s["metric"].to_string(), value(&s["value"])?)))
            .collect(),
        Some("scalar") => Ok(vec![(String::new(), value(&data["result"])?)]),
        other => Err(format!(
            "the query gives a {}, not an instant vector or a scalar",
            other.unwrap_or("result of no type")
        )),
    }
}

/// What an answer of Prometheus (`Err`: it was not reached) means for `gate`.
pub fn judge(gate: &MetricGate, answer: Result<Value, String>) -> GateResult {
    let body = match answer {
        Ok(b) => b,
        Err(e) => return GateResult::Waiting(e),
    };
    let found = match samples(&body) {
        Ok(s) => s,
        Err(e) => return GateResult::Waiting(e),
    };
    let want = format!("{} {}", symbol(gate.comparison), gate.threshold);
    if found.is_empty() {
        return match gate.on_no_data.unwrap_or_default() {
            NoData::Pass => GateResult::Passing("no data (onNoData: Pass)".into()),
            NoData::Wait => GateResult::Waiting("the query returns no data yet".into()),
        };
    }
    match found
        .iter()
        .find(|(_, v)| v.is_nan() || !meets(*v, gate.comparison, gate.threshold))
    {
        Some((labels, v)) => GateResult::Failing(format!(
            "{v} is not {want}{}",
            if labels.is_empty() || labels == "{}" {
                String::new()
            } else {
                format!(" for {labels}")
            }
        )),
        None => GateResult::Passing(format!(
            "{} {want}",
            found
                .iter()
                .map(|(_, v)| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Asks Prometheus: the answer's JSON (Prometheus answers errors as JSON too, with a 4xx), or
/// why it could not be read.
async fn query(address: &str, q: &str) -> Result<Value, String> {
    let base = plainhttp::http_base(address, "address")?;
    let url = format!(
        "{base}/api/v1/query?{}",
        form_urlencoded::Serializer::new(String::new())
            .append_pair("query", q)
            .finish()
    );
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("address {address:?}: {e}"))?;
    let req = http::Request::get(uri)
        .body(Full::new(bytes::Bytes::new()))
        .map_err(|e| e.to_string())?;
    let (status, body) = plainhttp::send(&format!("Prometheus at {base}"), req, TIMEOUT).await?;
    serde_json::from_slice(&body)
        .map_err(|_| format!("Prometheus at {base} answered {status} with no JSON"))
}

/// Evaluates `gate` for the stage `stage` of `clusters`.
pub async fn evaluate(gate: &MetricGate, stage: &str, clusters: &[String]) -> GateResult {
    let q = expand(&gate.query, stage, clusters);
    judge(gate, query(&gate.address, &q).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gate(cmp: MetricComparison, threshold: f64) -> MetricGate {
        MetricGate {
            name: "errors".into(),
            address: "http://127.0.0.1:9090".into(),
            query: "errors{cluster=~\"$CLUSTERS\"}".into(),
            comparison: cmp,
            threshold,
            on_no_data: None,
        }
    }

    fn vector(values: &[(&str, &str)]) -> Value {
        json!({"status": "success", "data": {"resultType": "vector", "result":
            values.iter().map(|(c, v)| json!({"metric": {"cluster": c}, "value": [1.0, v]})).collect::<Vec<_>>()}})
    }

    #[test]
    fn every_sample_must_meet_the_threshold_and_no_data_waits() {
        let g = gate(MetricComparison::LessThan, 0.05);
        assert!(matches!(
            judge(&g, Ok(vector(&[("a", "0.01"), ("b", "0.02")]))),
            GateResult::Passing(_)
        ));
        let bad = judge(&g, Ok(vector(&[("a", "0.01"), ("b", "0.5")])));
        assert!(
            matches!(&bad, GateResult::Failing(m) if m.contains("0.5 is not < 0.05") && m.contains("\"b\"")),
            "{bad:?}"
        );
        assert!(matches!(
            judge(&g, Ok(vector(&[("a", "NaN")]))),
            GateResult::Failing(_)
        ));
        assert!(matches!(judge(&g, Ok(vector(&[]))), GateResult::Waiting(_)));
        let lenient = MetricGate {
            on_no_data: Some(NoData::Pass),
            ..g.clone()
        };
        assert!(matches!(
            judge(&lenient, Ok(vector(&[]))),
            GateResult::Passing(_)
        ));
        let scalar =
            json!({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "7"]}});
        assert!(matches!(
            judge(&gate(MetricComparison::GreaterOrEqual, 7.0), Ok(scalar)),
            GateResult::Passing(_)
        ));
        let error = json!({"status": "error", "errorType": "bad_data", "error": "parse error"});
        assert!(
            matches!(judge(&g, Ok(error)), GateResult::Waiting(m) if m.contains("bad_data: parse error"))
        );
        assert!(matches!(
            judge(&g, Err("connection refused".into())),
            GateResult::Waiting(_)
        ));
    }

    #[test]
    fn the_query_names_the_stages_clusters() {
        assert_eq!(
            expand(
                "sum(errors{cluster=~\"$CLUSTERS\", stage=\"$STAGE\"})",
                "one",
                &["clusternet-abc/child1".into(), "ns/a.b".into()]
            ),
            "sum(errors{cluster=~\"child1|a\\\\.b\", stage=\"one\"})"
        );
    }
}
