//! `kubectl get` tables for shadow objects (hub.md §3.4): built-in kinds get kubectl-like column
//! sets (a few of Kubernetes' own printers, always wide, as upstream copies them), CRD kinds the
//! CRD's `additionalPrinterColumns` of the storage version, everything else name and age.

use serde_json::{Value, json};

/// How a table is built for one kind.
pub enum Printer {
    Builtin {
        group: String,
        kind: String,
    },
    /// `additionalPrinterColumns` of the CRD's storage version.
    Crd(Vec<Value>),
}

struct Column {
    name: &'static str,
    kind: &'static str,
    description: &'static str,
}

const NAME: Column = Column {
    name: "Name",
    kind: "string",
    description: "Name must be unique within a namespace.",
};
const AGE: Column = Column {
    name: "Age",
    kind: "date",
    description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
};

fn col(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        description,
    }
}

fn definition(c: &Column) -> Value {
    json!({"name": c.name, "type": c.kind, "format": if c.name == "Name" { "name" } else { "" },
           "description": c.description, "priority": 0})
}

/// Builds the Table of a list (`{"metadata", "items"}`).
pub fn table(printer: &Printer, list: &Value) -> Value {
    let now = chrono::Utc::now();
    let age = |o: &Value| {
        o["metadata"]["creationTimestamp"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .map(|t| human_age(now.signed_duration_since(t)))
            .unwrap_or_else(|| "<unknown>".into())
    };
    let items: Vec<&Value> = list["items"].as_array().into_iter().flatten().collect();
    let (defs, rows): (Vec<Value>, Vec<Vec<Value>>) = match printer {
        Printer::Crd(columns) if !columns.is_empty() => {
            let mut defs = vec![definition(&NAME)];
            for c in columns {
                defs.push(json!({
                    "name": c["name"], "type": c["type"].as_str().unwrap_or("string"),
                    "format": c["format"].as_str().unwrap_or(""),
                    "description": c["description"].as_str().unwrap_or(""),
                    "priority": c["priority"].as_i64().unwrap_or(0),
                }));
            }
            let rows = items
                .iter()
                .map(|o| {
                    let mut cells = vec![o["metadata"]["name"].clone()];
                    for c in columns {
                        let v = json_path(o, c["jsonPath"].as_str().unwrap_or_default());
                        let v = match (c["type"].as_str(), v) {
                            (Some("date"), Value::String(s)) => {
                                chrono::DateTime::parse_from_rfc3339(&s)
                                    .map(|t| Value::String(human_age(now.signed_duration_since(t))))
                                    .unwrap_or(Value::String(s))
                            }
                            (_, v) => v,
                        };
                        cells.push(v);
                    }
                    cells
                })
                .collect();
            (defs, rows)
        }
        Printer::Builtin { group, kind } => builtin(group, kind, &items, &age),
        Printer::Crd(_) => default_rows(&items, &age),
    };
    let rows: Vec<Value> = rows
        .into_iter()
        .zip(items.iter())
        .map(|(cells, o)| json!({"cells": cells, "object": o}))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {
            "resourceVersion": list["metadata"]["resourceVersion"],
            "continue": list["metadata"]["continue"],
        },
        "columnDefinitions": defs,
        "rows": rows,
    })
}

fn default_rows(items: &[&Value], age: &dyn Fn(&Value) -> String) -> (Vec<Value>, Vec<Vec<Value>>) {
    (
        vec![definition(&NAME), definition(&AGE)],
        items
            .iter()
            .map(|o| vec![o["metadata"]["name"].clone(), json!(age(o))])
            .collect(),
    )
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn builtin(
    group: &str,
    kind: &str,
    items: &[&Value],
    age: &dyn Fn(&Value) -> String,
) -> (Vec<Value>, Vec<Vec<Value>>) {
    let containers = |o: &Value| {
        let c = o["spec"]["template"]["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let names: Vec<&str> = c.iter().filter_map(|c| c["name"].as_str()).collect();
        let images: Vec<&str> = c.iter().filter_map(|c| c["image"].as_str()).collect();
        (names.join(","), images.join(","))
    };
    let selector = |v: &Value| {
        v.as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "<none>".into())
    };
    match (group, kind) {
        ("apps", "Deployment") => {
            let cols = [
                NAME,
                col("Ready", "Number of the pod with ready state"),
                col(
                    "Up-to-date",
                    "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                ),
                col(
                    "Available",
                    "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                ),
                AGE,
                col("Containers", "Names of each container in the template."),
                col(
                    "Images",
                    "Images referenced by each container in the template.",
                ),
                col("Selector", "Label selector for pods."),
            ];
            let rows = items
                .iter()
                .map(|o| {
                    let (names, images) = containers(o);
                    vec![
                        o["metadata"]["name"].clone(),
                        json!(format!(
                            "{}/{}",
                            int(&o["status"]["readyReplicas"]),
                            o["spec"]["replicas"].as_i64().unwrap_or(1)
                        )),
                        json!(int(&o["status"]["updatedReplicas"])),
                        json!(int(&o["status"]["availableReplicas"])),
                        json!(age(o)),
                        json!(names),
                        json!(images),
                        json!(selector(&o["spec"]["selector"]["matchLabels"])),
                    ]
                })
                .collect();
            (cols.iter().map(definition).collect(), rows)
        }
        ("", "Service") => {
            let cols = [
                NAME,
                col("Type", "The type of the service."),
                col("Cluster-IP", "The IP address of the service."),
                col("External-IP", "The external IP address of the service."),
                col("Port(s)", "The ports the service exposes."),
                AGE,
                col("Selector", "The label selector of the service."),
            ];
            let rows = items
                .iter()
                .map(|o| {
                    let ports: Vec<String> = o["spec"]["ports"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|p| {
                            format!(
                                "{}/{}",
                                int(&p["port"]),
                                p["protocol"].as_str().unwrap_or("TCP")
                            )
                        })
                        .collect();
                    vec![
                        o["metadata"]["name"].clone(),
                        json!(o["spec"]["type"].as_str().unwrap_or("ClusterIP")),
                        json!(o["spec"]["clusterIP"].as_str().unwrap_or("<none>")),
                        json!("<none>"),
                        json!(if ports.is_empty() {
                            "<none>".to_string()
                        } else {
                            ports.join(",")
                        }),
                        json!(age(o)),
                        json!(selector(&o["spec"]["selector"])),
                    ]
                })
                .collect();
            (cols.iter().map(definition).collect(), rows)
        }
        ("", "ConfigMap") | ("", "Secret") => {
            let mut cols = vec![NAME];
            if kind == "Secret" {
                cols.push(col("Type", "The type of the secret"));
            }
            cols.push(col("Data", "Number of entries in the data"));
            cols.push(AGE);
            let rows = items
                .iter()
                .map(|o| {
                    let n = o["data"].as_object().map_or(0, |m| m.len())
                        + o["binaryData"].as_object().map_or(0, |m| m.len())
                        + o["stringData"].as_object().map_or(0, |m| m.len());
                    let mut cells = vec![o["metadata"]["name"].clone()];
                    if kind == "Secret" {
                        cells.push(json!(o["type"].as_str().unwrap_or("Opaque")));
                    }
                    cells.push(json!(n));
                    cells.push(json!(age(o)));
                    cells
                })
                .collect();
            (cols.iter().map(definition).collect(), rows)
        }
        _ => default_rows(items, age),
    }
}

/// The simple JSONPath subset printer columns use: `.a.b`, `.a[0].b`; anything else is empty.
pub fn json_path(obj: &Value, path: &str) -> Value {
    let mut cur = obj;
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        let (key, index) = match part.split_once('[') {
            Some((k, rest)) => (k, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        cur = &cur[key];
        if let Some(i) = index {
            cur = &cur[i];
        }
    }
    cur.clone()
}

/// kubectl's short age format (`45s`, `12m`, `3h`, `5d`).
pub fn human_age(d: chrono::TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: Vec<Value>) -> Value {
        json!({"metadata": {"resourceVersion": "5"}, "items": items})
    }

    #[test]
    fn deployments_print_like_kubectl() {
        let d = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}});
        let t = table(
            &Printer::Builtin {
                group: "apps".into(),
                kind: "Deployment".into(),
            },
            &list(vec![d]),
        );
        assert_eq!(t["columnDefinitions"][1]["name"], "Ready");
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "web");
        assert_eq!(cells[1], "0/3");
        assert_eq!(cells[5], "nginx");
        assert_eq!(cells[6], "nginx:1.27");
        assert_eq!(cells[7], "app=web");
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "web");
    }

    #[test]
    fn crd_columns_follow_their_json_paths() {
        let cols = vec![
            json!({"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"}),
            json!({"name": "Image", "type": "string", "jsonPath": ".spec.images[1]"}),
        ];
        let o = json!({"metadata": {"name": "c"}, "spec": {"cronSpec": "* * * * */5", "images": ["a", "b"]}});
        let t = table(&Printer::Crd(cols), &list(vec![o]));
        assert_eq!(t["rows"][0]["cells"], json!(["c", "* * * * */5", "b"]));
        let t = table(
            &Printer::Crd(vec![]),
            &list(vec![json!({"metadata": {"name": "x"}})]),
        );
        assert_eq!(t["columnDefinitions"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_age(chrono::TimeDelta::seconds(45)), "45s");
        assert_eq!(human_age(chrono::TimeDelta::seconds(600)), "10m");
        assert_eq!(human_age(chrono::TimeDelta::seconds(3 * 86400)), "3d");
    }
}
