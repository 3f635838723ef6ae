//! `kubectl clusternet placement`: the placement what-if on the command line, a client of the
//! hub's `placement.clusternet.io` reviews (`hub::placement`).
//!
//! ```text
//! kubectl clusternet placement -f subscription.yaml [--show-objects | --diff] [-o json|yaml]
//! kubectl clusternet placement subscription NAME [-n NS] [--show-objects | --diff] [-o json|yaml]
//! ```
//!
//! `-f` reviews every Subscription in the file (`-` for stdin), which need not exist; the other
//! form reviews an existing one and says whether scheduling it now would move it. The table has
//! one row per ManagedCluster with the step that kept or dropped it and why; `--show-objects`
//! adds what each selected child would receive, `--diff` only the fields the overrides changed,
//! each with the override that set it. Not `explain`: that stays kubectl's own verb.

use std::ffi::OsString;
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::apis::SchedulingDecision;
use crate::apis::known::SUBSCRIPTION_KIND;
use crate::apis::placement::{self, PlacementReview, RenderedObject};
use crate::kube_ext::yaml;

pub const USAGE: &str = "\
Usage:
  kubectl clusternet placement -f FILE [--show-objects | --diff] [-o json|yaml]
  kubectl clusternet placement subscription NAME [-n NAMESPACE] [--show-objects | --diff] [-o json|yaml]

Explains where a Subscription goes and why, before or after it is applied, without changing
anything: every ManagedCluster with the step that kept or dropped it (the affinity term it
missed, the taint it did not tolerate), scores, predicted capacity (Dynamic dividing), the
binding and replica split the scheduler would write.

Options:
  -f, --filename FILE   Subscriptions to review (YAML or JSON, several documents; - for stdin)
  -n, --namespace NS    namespace of the Subscription (default: the file's, the context's, default)
      --show-objects    also print the object each selected child would receive
      --diff            print only the fields the overrides change, with the override that set each
  -o, --output FORMAT   json or yaml: the PlacementReview answers, for scripts
";

/// What the command line asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PlacementArgs {
    pub file: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub show_objects: bool,
    pub diff: bool,
    pub output: Output,
}

#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub enum Output {
    #[default]
    Table,
    Json,
    Yaml,
}

/// Reads the arguments after `placement`.
pub fn parse(args: &[OsString]) -> Result<PlacementArgs, String> {
    let mut out = PlacementArgs::default();
    let mut words = Vec::new();
    let mut args = super::args::OwnArgs::new(args);
    while let Some((flag, inline)) = args.next_arg() {
        let mut value = |name: &str| args.value(inline.clone(), name);
        match flag.as_str() {
            "-f" | "--filename" => out.file = Some(value("--filename")?),
            "-n" | "--namespace" => out.namespace = Some(value("--namespace")?),
            "-o" | "--output" => {
                out.output = match value("--output")?.as_str() {
                    "json" => Output::Json,
                    "yaml" => Output::Yaml,
                    "" | "table" | "wide" => Output::Table,
                    other => {
                        return Err(format!(
                            "unable to match a printer suitable for the output format {other:?}, allowed formats are: json,yaml"
                        ));
                    }
                }
            }
            "--show-objects" => out.show_objects = parse_bool(inline.as_deref())?,
            "--diff" => out.diff = parse_bool(inline.as_deref())?,
            f if f.starts_with('-') && f.len() > 1 => return Err(format!("unknown flag: {f}")),
            _ => words.push(flag),
        }
    }
    match words.as_slice() {
        [] => {}
        [kind, name] if is_subscription_word(kind) => out.name = Some(name.clone()),
        [one] => match one.split_once('/') {
            Some((kind, name)) if is_subscription_word(kind) && !name.is_empty() => {
                out.name = Some(name.to_string())
            }
            _ => return Err(format!("expected `subscription NAME`, got {one:?}")),
        },
        other => return Err(format!("unexpected arguments: {}", other.join(" "))),
    }
    match (&out.file, &out.name) {
        (Some(_), Some(_)) => Err("give either -f FILE or subscription NAME, not both".into()),
        (None, None) => Err("give -f FILE or subscription NAME".into()),
        _ => Ok(out),
    }
}

/// The ways kubectl lets one write the Subscription kind.
pub(crate) fn is_subscription_word(w: &str) -> bool {
    matches!(
        w,
        "subscription"
            | "subscriptions"
            | "sub"
            | "subs"
            | "subscription.apps.clusternet.io"
            | "subscriptions.apps.clusternet.io"
    )
}

fn parse_bool(v: Option<&str>) -> Result<bool, String> {
    match v {
        None | Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(v) => Err(format!("invalid boolean {v:?}")),
    }
}

/// A file's documents (`List`s flattened): its Subscriptions, each with its namespace (if it
/// names one), and everything else, which the reviews take as applied with them (feeds not in
/// the parent yet, overrides being written).
pub fn split_file(text: &str, source: &str) -> Result<(Vec<Value>, Vec<Value>), String> {
    let docs: Vec<Value> =
        yaml::from_str_documents(text).map_err(|e| format!("reading {source}: {e}"))?;
    let (mut subs, mut others) = (Vec::new(), Vec::new());
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let items = match doc["kind"].as_str() {
            Some("List") => doc["items"].as_array().cloned().unwrap_or_default(),
            _ => vec![doc],
        };
        for item in items {
            if item["kind"] == SUBSCRIPTION_KIND {
                subs.push(item);
            } else {
                others.push(item);
            }
        }
    }
    if subs.is_empty() {
        return Err(format!("no Subscription in {source}"));
    }
    Ok((subs, others))
}

/// The review to send for one Subscription of a file, in `namespace` unless it names its own.
pub fn review_for(
    sub: &Value,
    objects: &[Value],
    namespace: Option<&str>,
    fallback: &str,
    show_objects: bool,
) -> Result<(String, Value), String> {
    let own = sub["metadata"]["namespace"]
        .as_str()
        .filter(|s| !s.is_empty());
    let ns = match (own, namespace) {
        (Some(o), Some(n)) if o != n => {
            return Err(format!(
                "the namespace from the provided object {o:?} does not match the namespace {n:?}. You must pass '--namespace={o}' to perform this operation."
            ));
        }
        (Some(o), _) => o.to_string(),
        (None, Some(n)) => n.to_string(),
        (None, None) => fallback.to_string(),
    };
    Ok((
        ns,
        json!({
            "apiVersion": placement::API_VERSION,
            "kind": placement::KIND,
            "spec": {"subscription": sub, "showObjects": show_objects, "objects": objects},
        }),
    ))
}

/// The review of an existing Subscription.
pub fn review_by_name(name: &str, show_objects: bool) -> Value {
    json!({
        "apiVersion": placement::API_VERSION,
        "kind": placement::KIND,
        "spec": {"subscriptionName": name, "showObjects": show_objects},
    })
}

/// Posts the reviews and prints the answers.
pub async fn run(
    client: kube::Client,
    args: &PlacementArgs,
    context_namespace: Option<&str>,
) -> Result<ExitCode, String> {
    let fallback = context_namespace.unwrap_or("default");
    let wants_objects = args.show_objects || args.diff;
    let requests: Vec<(String, Value)> = match (&args.file, &args.name) {
        (Some(file), _) => {
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin())
                    .map_err(|e| format!("reading stdin: {e}"))?
            } else {
                std::fs::read_to_string(file).map_err(|e| format!("reading {file}: {e}"))?
            };
            let (subs, others) = split_file(&text, file)?;
            subs.iter()
                .map(|s| {
                    review_for(
                        s,
                        &others,
                        args.namespace.as_deref(),
                        fallback,
                        wants_objects,
                    )
                })
                .collect::<Result<_, _>>()?
        }
        (None, Some(name)) => vec![(
            args.namespace
                .clone()
                .unwrap_or_else(|| fallback.to_string()),
            review_by_name(name, wants_objects),
        )],
        (None, None) => return Err("give -f FILE or subscription NAME".into()),
    };
    let mut answers = Vec::new();
    for (ns, body) in requests {
        answers.push(post(&client, &ns, &body).await?);
    }
    let text = match args.output {
        Output::Json => {
            let v = one_or_list(answers)?;
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())? + "\n"
        }
        Output::Yaml => {
            crate::kube_ext::yaml::to_string(&one_or_list(answers)?).map_err(|e| e.to_string())?
        }
        Output::Table => {
            let mut out = String::new();
            for (i, a) in answers.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                out.push_str(&render(a, args.show_objects && !args.diff, args.diff));
            }
            out
        }
    };
    Ok(crate::emit(&text))
}

fn one_or_list(mut answers: Vec<PlacementReview>) -> Result<Value, String> {
    if answers.len() == 1 {
        return serde_json::to_value(answers.remove(0)).map_err(|e| e.to_string());
    }
    Ok(json!({"apiVersion": "v1", "kind": "List", "items": answers}))
}

async fn post(client: &kube::Client, ns: &str, body: &Value) -> Result<PlacementReview, String> {
    let path = format!(
        "/apis/{}/namespaces/{ns}/{}",
        placement::API_VERSION,
        placement::RESOURCE
    );
    let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    let req = http::Request::post(&path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(bytes)
        .map_err(|e| e.to_string())?;
    match client.request::<PlacementReview>(req).await {
        Ok(r) => Ok(r),
        Err(kube::Error::Api(s)) if s.code == 404 && s.message.contains("could not find") => {
            Err(format!(
                "the parent does not serve {}: is the hub running and its APIService {} available?",
                placement::API_VERSION,
                placement::API_SERVICE_NAME
            ))
        }
        Err(kube::Error::Api(s)) => Err(super::server_error_line(&s.reason, &s.message)
            .trim_start_matches("error: ")
            .to_string()),
        Err(e) => Err(format!("asking the parent for the placement: {e}")),
    }
}

/// The human answer for one review.
pub fn render(review: &PlacementReview, objects: bool, diff: bool) -> String {
    let Some(status) = &review.status else {
        return "the hub answered without a status\n".into();
    };
    let sub = review
        .spec
        .subscription
        .as_ref()
        .map(|s| {
            format!(
                "{}/{}",
                s.metadata.namespace.clone().unwrap_or_default(),
                s.metadata.name.clone().unwrap_or_default()
            )
        })
        .unwrap_or_else(|| {
            format!(
                "{}/{}",
                review.metadata.namespace.clone().unwrap_or_default(),
                review.spec.subscription_name
            )
        });
    let mut out = format!("Subscription {sub}\n\n");
    out.push_str(&status.explanation.table());
    for (feed, counts) in &status.explanation.replicas {
        let parts: Vec<String> = status
            .explanation
            .binding_clusters
            .iter()
            .zip(counts)
            .map(|(c, n)| format!("{c}={n}"))
            .collect();
        out.push_str(&format!("  replicas of {feed}: {}\n", parts.join(", ")));
    }
    if let Some(current) = &status.current {
        let bound = if current.binding_clusters.is_empty() {
            "no cluster".to_string()
        } else {
            current.binding_clusters.join(", ")
        };
        out.push_str(&format!("now bound to {bound}\n"));
        if let Some(d) = &current.last_decision {
            out.push_str(&render_decision(d));
        }
        if let Some(text) = would_change_text(status.would_change) {
            out.push_str(text);
        }
    }
    if objects || diff {
        for cluster in &status.objects {
            out.push_str(&format!("\n--- {}\n", cluster.cluster));
            for obj in &cluster.objects {
                out.push_str(&render_object(obj, diff));
            }
        }
    }
    out
}

/// Whether scheduling now would change the binding, in words (none when not known).
pub fn would_change_text(would_change: Option<bool>) -> Option<&'static str> {
    match would_change {
        Some(true) => Some(
            "scheduling it now would bind it differently: the parent's state changed since the last decision (or that decision is still to come)\n",
        ),
        Some(false) => Some("scheduling it now would bind it the same way\n"),
        None => None,
    }
}

/// The kept decision (`status.lastDecision`): why it is bound where it is, as the scheduler saw
/// the fleet then (the command's words, also on the dashboard's Subscription page).
pub fn render_decision(d: &SchedulingDecision) -> String {
    let when = d.decided_at.as_ref().map_or_else(
        || "at an unknown time".to_string(),
        |t| format!("at {}", t.0),
    );
    let mut out = format!("  the scheduler decided that {when} ({}):\n", d.strategy);
    for s in &d.selected {
        let mut line = format!("    selected {}", s.cluster);
        if let Some(score) = s.score {
            line.push_str(&format!(", score {score}"));
        }
        for (feed, n) in &s.predicted {
            line.push_str(&format!(", predicted {n} of {feed}"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    for g in &d.dropped {
        let more = usize::try_from(g.count)
            .unwrap_or(0)
            .saturating_sub(g.clusters.len());
        let mut names = g.clusters.join(", ");
        if more > 0 {
            names.push_str(&format!(" and {more} more"));
        }
        out.push_str(&format!("    {} ({}): {names}\n", g.reason, g.count));
    }
    if d.omitted > 0 {
        out.push_str(&format!("    ({} more clusters not recorded)\n", d.omitted));
    }
    if let Some(e) = &d.error {
        out.push_str(&format!("    not scheduled: {e}\n"));
    }
    out
}

fn render_object(obj: &RenderedObject, diff: bool) -> String {
    let mut out = format!("{}:\n", obj.feed);
    if let Some(e) = &obj.error {
        out.push_str(&format!("  error: {e}\n"));
        return out;
    }
    if diff {
        if obj.changes.is_empty() && obj.applied.is_empty() {
            out.push_str("  unchanged by overrides\n");
        }
        let at = |v: &Option<Value>, p: &str| {
            v.as_ref()
                .and_then(|v| v.pointer(p))
                .map_or_else(|| "(unset)".to_string(), |v| v.to_string())
        };
        for c in &obj.changes {
            out.push_str(&format!(
                "  {}: {} -> {}   {}\n",
                c.path,
                at(&obj.template, &c.path),
                at(&obj.object, &c.path),
                describe_source(&c.source, Some((&c.rule, c.type_.to_string())))
            ));
        }
    } else {
        let text = obj
            .object
            .as_ref()
            .and_then(|o| crate::kube_ext::yaml::to_string(o).ok())
            .unwrap_or_default();
        for line in text.lines() {
            out.push_str(&format!("  {line}\n"));
        }
        for c in &obj.changes {
            out.push_str(&format!(
                "  # {} set by {}\n",
                c.path,
                describe_source(&c.source, Some((&c.rule, c.type_.to_string())))
            ));
        }
    }
    if let Some(values) = obj.values.as_deref().filter(|v| !v.trim().is_empty()) {
        out.push_str(&format!("  values: {values}\n"));
    }
    for s in &obj.applied {
        out.push_str(&format!("  # applied {}\n", describe_source(s, None)));
    }
    out
}

fn describe_source(
    s: &crate::apis::placement::OverrideSource,
    rule: Option<(&String, String)>,
) -> String {
    let name = match &s.namespace {
        Some(ns) if s.kind != SUBSCRIPTION_KIND => format!("{ns}/{}", s.name),
        Some(ns) => format!("{ns}/{} (dividing replicas)", s.name),
        None => s.name.clone(),
    };
    match rule {
        Some((rule, type_)) => format!(
            "{} {name} (priority {}, rule {rule:?}, {type_})",
            s.kind, s.priority
        ),
        None => format!("{} {name} (priority {})", s.kind, s.priority),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn both_forms_and_their_flags() {
        let a = parse(&os(&["-f", "sub.yaml", "--diff", "-o=yaml"])).unwrap();
        assert_eq!(a.file.as_deref(), Some("sub.yaml"));
        assert!(a.diff);
        assert_eq!(a.output, Output::Yaml);
        let a = parse(&os(&[
            "subscription",
            "app",
            "-n",
            "team",
            "--show-objects",
        ]))
        .unwrap();
        assert_eq!(a.name.as_deref(), Some("app"));
        assert_eq!(a.namespace.as_deref(), Some("team"));
        assert!(a.show_objects);
        assert_eq!(
            parse(&os(&["subs/app"])).unwrap().name.as_deref(),
            Some("app")
        );
    }

    #[test]
    fn mistakes_are_named() {
        assert!(parse(&os(&[])).unwrap_err().contains("-f FILE"));
        assert!(
            parse(&os(&["-f"]))
                .unwrap_err()
                .contains("needs an argument")
        );
        assert!(
            parse(&os(&["-f", "a", "sub", "b"]))
                .unwrap_err()
                .contains("not both")
        );
        assert!(
            parse(&os(&["-o", "wide2", "sub", "b"]))
                .unwrap_err()
                .contains("json,yaml")
        );
        assert!(
            parse(&os(&["--bogus", "sub", "b"]))
                .unwrap_err()
                .contains("--bogus")
        );
        assert!(
            parse(&os(&["deployment", "b"]))
                .unwrap_err()
                .contains("unexpected")
        );
    }

    #[test]
    fn each_subscription_is_reviewed_in_its_namespace_with_the_rest_of_the_file() {
        let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\napiVersion: apps.clusternet.io/v1alpha1\nkind: Subscription\nmetadata: {name: app, namespace: team}\nspec: {subscribers: [], feeds: []}\n---\n";
        let (subs, others) = split_file(text, "f.yaml").unwrap();
        assert_eq!(subs.len(), 1);
        assert_eq!(others.len(), 1, "the Deployment, not the empty document");
        let (ns, body) = review_for(&subs[0], &others, None, "default", true).unwrap();
        assert_eq!(ns, "team");
        assert_eq!(body["spec"]["showObjects"], true);
        assert_eq!(body["spec"]["objects"][0]["kind"], "Deployment");
        assert!(
            review_for(&subs[0], &[], Some("other"), "default", false)
                .unwrap_err()
                .contains("--namespace=team")
        );
        assert!(
            split_file("kind: ConfigMap\n", "f.yaml")
                .unwrap_err()
                .contains("no Subscription in f.yaml")
        );
    }
}
