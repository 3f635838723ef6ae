//! Request-path rewriting towards the shadow API: the Rust form of upstream's client-go wrapper
//! (`pkg/wrappers/clientgo/wrapper.go`, `ClusternetTransport.normalizeLocation`, cli.md §2).
//!
//! Upstream matches three regular expressions; they are simple enough to match by hand, which keeps
//! the plugin free of a regex engine. Each matcher below spells out the expression it replaces.

/// The group/version every non-Clusternet API path is redirected to.
pub const SHADOW_GROUP_VERSION: &str = "shadow/v1alpha1";

/// Rewrites a request path (optionally with a `?query`) for a REST config whose host URL path is
/// `prefix` (upstream trims the trailing `/` of the host before taking its path).
///
/// Upstream removes the first occurrence of the prefix, then:
/// 1. `^(/api/v1)/(.*)` -> `prefix + /apis/shadow/v1alpha1/<rest>`;
/// 2. `^(/apis/\w*\.clusternet\.io/v\w*.)/(.*)` -> unchanged;
/// 3. `^(/apis/[^/]+/v\w+)(/.*)` -> `prefix + /apis/shadow/v1alpha1<rest>`;
/// 4. anything else (discovery, `/version`, `/openapi`) -> unchanged.
///
/// Rewritten paths go through Go's `path.Join`, hence [`clean`]; unchanged paths are returned
/// byte for byte, and the query string is never touched.
pub fn rewrite_path(prefix: &str, path_and_query: &str) -> String {
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    };
    // A URL path ends at `?`: a prefix with one (no parsed host URL has it, but the function
    // takes any text) would move the query into the path.
    let prefix = prefix
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .trim_end_matches('/');
    let relative = if prefix.is_empty() {
        path.to_string()
    } else {
        path.replacen(prefix, "", 1)
    };

    let rewritten = if let Some(rest) = relative.strip_prefix("/api/v1/") {
        Some(format!("{prefix}/apis/{SHADOW_GROUP_VERSION}/{rest}"))
    } else if is_clusternet_api(&relative) {
        None
    } else {
        group_version_rest(&relative)
            .map(|rest| format!("{prefix}/apis/{SHADOW_GROUP_VERSION}/{rest}"))
    };

    let path = match rewritten {
        Some(new) => clean(&new),
        None => path.to_string(),
    };
    match query {
        Some(query) => format!("{path}?{query}"),
        None => path,
    }
}

/// RE2's `\w`: ASCII letters, digits and underscore.
fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `^(/apis/\w*\.clusternet\.io/v\w*.)/(.*)`.
fn is_clusternet_api(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/apis/") else {
        return false;
    };
    // `\w*` cannot swallow the `.` that must follow it, so only the maximal run can match.
    let group_len = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
    let Some(version) = rest[group_len..].strip_prefix(".clusternet.io/v") else {
        return false;
    };
    // `\w*.` then `/`: some run of word characters, one arbitrary character (not a newline, as
    // Go's `.`), then a slash. Try every length of the run.
    let mut chars = version.char_indices().peekable();
    loop {
        let Some((i, c)) = chars.next() else {
            return false;
        };
        if c != '\n' && version[i + c.len_utf8()..].starts_with('/') {
            return true;
        }
        if !is_word(c) {
            return false;
        }
    }
}

/// `^(/apis/[^/]+/v\w+)(/.*)`: returns the part after the version, without its leading slash.
fn group_version_rest(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/apis/")?;
    let (group, rest) = rest.split_once('/')?;
    if group.is_empty() {
        return None;
    }
    let version = rest.strip_prefix('v')?;
    let (version, rest) = version.split_once('/')?;
    (!version.is_empty() && version.chars().all(is_word)).then_some(rest)
}

/// Go's `path.Clean` for absolute paths: collapses duplicate slashes, resolves `.` and `..`, and
/// drops a trailing slash.
pub fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every vector of cli.md §2, verbatim.
    #[test]
    fn spec_vectors() {
        let cases = [
            ("", "/api/v1/namespaces", "/apis/shadow/v1alpha1/namespaces"),
            (
                "",
                "/api/v1/namespaces/abc/serviceaccounts?resourceVersion=17825795&watch=true",
                "/apis/shadow/v1alpha1/namespaces/abc/serviceaccounts?resourceVersion=17825795&watch=true",
            ),
            (
                "",
                "/apis/far/vbar/namespaces/abc/foos",
                "/apis/shadow/v1alpha1/namespaces/abc/foos",
            ),
            (
                "",
                "/apis/samplecontroller.k8s.io/v1alpha1/namespaces/default/foos",
                "/apis/shadow/v1alpha1/namespaces/default/foos",
            ),
            (
                "",
                "/apis/far/v2/foos/abc?fieldSelector=metadata.name%3Dabc",
                "/apis/shadow/v1alpha1/foos/abc?fieldSelector=metadata.name%3Dabc",
            ),
            (
                "",
                "/apis/far.clusternet.io/v1bar/namespaces/boo/foos/abc",
                "/apis/far.clusternet.io/v1bar/namespaces/boo/foos/abc",
            ),
            (
                "/abc",
                "/abc/api/v1/foos/abc",
                "/abc/apis/shadow/v1alpha1/foos/abc",
            ),
            (
                "/abc",
                "/abc/apis/far/vbar/foos",
                "/abc/apis/shadow/v1alpha1/foos",
            ),
        ];
        for (prefix, request, want) in cases {
            assert_eq!(
                rewrite_path(prefix, request),
                want,
                "prefix {prefix:?} request {request}"
            );
        }
    }

    /// Found by libFuzzer (plugin_urls): a prefix holding `?` put a second query into the path.
    #[test]
    fn a_prefix_with_a_question_mark_never_changes_the_query() {
        let path = "/apis/apps/v1/deployments?watch=true";
        let rewritten = rewrite_path("?c1", path);
        assert_eq!(rewritten, "/apis/shadow/v1alpha1/deployments?watch=true");
        crate::fuzzing::check_rewrite(path, &rewritten);
        crate::fuzzing::plugin_urls(include_bytes!(
            "../../fuzz/corpus/plugin_urls/regression-prefix-with-question-mark"
        ));
    }

    #[test]
    fn host_with_trailing_slash_is_the_same_prefix() {
        assert_eq!(
            rewrite_path("/abc/", "/abc/api/v1/foos/abc"),
            "/abc/apis/shadow/v1alpha1/foos/abc"
        );
    }

    #[test]
    fn discovery_and_non_resource_paths_are_unchanged() {
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps/v1",
            "/apis/apps.clusternet.io/v1alpha1",
            "/version",
            "/openapi/v3/apis/apps/v1?hash=abc",
            "/healthz",
        ] {
            assert_eq!(rewrite_path("", path), path);
        }
    }

    #[test]
    fn clusternet_groups_are_untouched_and_others_are_shadowed() {
        assert_eq!(
            rewrite_path("", "/apis/apps.clusternet.io/v1alpha1/subscriptions"),
            "/apis/apps.clusternet.io/v1alpha1/subscriptions"
        );
        assert_eq!(
            rewrite_path(
                "",
                "/apis/clusters.clusternet.io/v1beta1/managedclusters?limit=500"
            ),
            "/apis/clusters.clusternet.io/v1beta1/managedclusters?limit=500"
        );
        // upstream's `\w*` admits no dot, so a dotted Clusternet-like group is shadowed
        assert_eq!(
            rewrite_path("", "/apis/a.b.clusternet.io/v1/foos"),
            "/apis/shadow/v1alpha1/foos"
        );
        assert_eq!(
            rewrite_path("", "/apis/apps/v1/namespaces/qux/deployments/x/scale"),
            "/apis/shadow/v1alpha1/namespaces/qux/deployments/x/scale"
        );
        // versions must start with `v`
        assert_eq!(rewrite_path("", "/apis/apps/1/foos"), "/apis/apps/1/foos");
    }

    #[test]
    fn rewritten_paths_are_cleaned() {
        assert_eq!(
            rewrite_path("", "/api/v1//namespaces///abc/"),
            "/apis/shadow/v1alpha1/namespaces/abc"
        );
        assert_eq!(rewrite_path("", "/api/v1/"), "/apis/shadow/v1alpha1");
        assert_eq!(
            rewrite_path("", "/apis/apps/v1//deployments"),
            "/apis/shadow/v1alpha1/deployments"
        );
    }

    #[test]
    fn clean_matches_go_path_clean() {
        assert_eq!(clean("/a//b/./c/../d/"), "/a/b/d");
        assert_eq!(clean("//"), "/");
        assert_eq!(clean("/.."), "/");
    }

    /// A request path as kubectl sends them (API, group, Clusternet and discovery paths with
    /// odd segments and a query), or any text.
    fn request_path() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let segment = prop_oneof![
            prop::sample::select(vec![
                "api",
                "apis",
                "v1",
                "v1alpha1",
                "apps",
                "apps.clusternet.io",
                "a.b.clusternet.io",
                "namespaces",
                "default",
                "pods",
                "..",
                ".",
                "",
                "abc",
                "v",
                "vé",
                "\n",
            ])
            .prop_map(str::to_owned),
            "[a-z0-9._-]{0,6}",
        ];
        prop_oneof![
            5 => (
                prop::collection::vec(segment, 0..7),
                prop::option::of("[a-z=&%0-9?/]{0,12}"),
            )
                .prop_map(|(segments, query)| {
                    let mut p = format!("/{}", segments.join("/"));
                    if let Some(q) = query {
                        p.push('?');
                        p.push_str(&q);
                    }
                    p
                }),
            1 => any::<String>(),
        ]
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz_support::config(crate::fuzz_support::DEFAULT_CASES))]

        /// Any prefix, path, session token, kubeconfig server and cluster ID through the
        /// plugin: the rewrite keeps the query and yields an unchanged or clean path, the
        /// session check and the generated kubeconfigs never panic, and kube's reading of the
        /// server never panics either.
        #[test]
        fn random_urls_never_panic_the_plugin(
            prefix in proptest::prop_oneof![
                proptest::strategy::Just(String::new()),
                proptest::strategy::Just("/abc/".to_owned()),
                proptest::arbitrary::any::<String>(),
            ],
            path in request_path(),
            token in "[a-z0-9]{0,8}",
            server in proptest::prop_oneof![
                proptest::strategy::Just("https://10.0.0.1:6443/prefix".to_owned()),
                "(https?|ftp|)://[a-z0-9.:@\\[\\]%/-]{0,20}",
                proptest::arbitrary::any::<String>(),
            ],
            cluster_id in proptest::arbitrary::any::<String>(),
        ) {
            let rewritten = rewrite_path(&prefix, &path);
            crate::fuzzing::check_rewrite(&path, &rewritten);
            let data = [prefix, path, token, server, cluster_id].join("\0");
            crate::fuzzing::plugin_urls(data.as_bytes());
        }
    }
}
