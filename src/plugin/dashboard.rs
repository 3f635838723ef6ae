//! `kubectl clusternet dashboard`: the hub's dashboard (`dashboard.clusternet.io` pages) on a
//! local address, the way `linkerd viz dashboard` opens its own. A loopback HTTP server forwards
//! each page request to the parent's aggregator with the user's kubeconfig credentials, so every
//! page is read as that user and the browser holds no credentials at all.

use std::convert::Infallible;
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::net::TcpListener;

use crate::apis::dashboard::PAGES_PATH;
use crate::plugin::proxy::{self, ProxyBody};

/// `kubectl clusternet dashboard --help`.
pub const USAGE: &str = "\
Open the Clusternet dashboard: the fleet's clusters and Subscriptions as the parent's RBAC lets
you see them, served by the hub and read with your kubeconfig's credentials.

Usage:
  kubectl clusternet dashboard [--port N] [--address ADDR] [--no-browser]

Options:
      --port N          local port (default 50750; 0 picks a free one)
      --address ADDR    local address to listen on (default 127.0.0.1)
      --no-browser      print the URL without opening a browser
  -h, --help            this help

The dashboard is served by the hub at /apis/dashboard.clusternet.io/v1alpha1/pages/ (you need
`get` on pages.dashboard.clusternet.io in the parent); this command forwards to it until stopped
with Ctrl-C.
";

/// Default local port.
pub const DEFAULT_PORT: u16 = 50750;

/// Parsed `dashboard` arguments.
#[derive(Debug, PartialEq, Eq)]
pub struct DashboardArgs {
    pub port: u16,
    pub address: IpAddr,
    pub no_browser: bool,
}

/// Parses what follows `dashboard`.
pub fn parse(args: &[OsString]) -> Result<DashboardArgs, String> {
    let mut out = DashboardArgs {
        port: DEFAULT_PORT,
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        no_browser: false,
    };
    let mut args = super::args::OwnArgs::new(args);
    while let Some((flag, inline)) = args.next_arg() {
        let mut value = |name: &str| args.value(inline.clone(), name);
        match flag.as_str() {
            "--port" => {
                let v = value("--port")?;
                out.port = v
                    .parse()
                    .map_err(|_| format!("--port {v:?}: not a port number (0-65535)"))?;
            }
            "--address" => {
                let v = value("--address")?;
                out.address = v
                    .parse()
                    .map_err(|_| format!("--address {v:?}: not an IP address"))?;
            }
            "--no-browser" => out.no_browser = true,
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    Ok(out)
}

/// Whether a request's `Host` names this server (a web page elsewhere cannot make the browser
/// read the dashboard through a name that resolves here: DNS rebinding).
pub fn host_allowed(host: Option<&str>, bound: SocketAddr) -> bool {
    let Some(host) = host else {
        return false;
    };
    let port = bound.port();
    let ip = match bound.ip() {
        IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    };
    host == format!("{ip}:{port}") || host == format!("localhost:{port}")
}

/// What the local server answers for `method` and `path` before anything is forwarded:
/// `Ok(())` to forward, else the answer.
pub fn route(method: &Method, path: &str) -> Result<(), (StatusCode, String)> {
    if path == "/" {
        return Err((StatusCode::FOUND, format!("{PAGES_PATH}/clusters")));
    }
    let page = path
        .strip_prefix(PAGES_PATH)
        .filter(|rest| rest.is_empty() || rest.starts_with('/'));
    match (page, method) {
        (Some(_), &Method::GET | &Method::HEAD) => Ok(()),
        (Some(_), _) => Err((
            StatusCode::METHOD_NOT_ALLOWED,
            "the dashboard is read-only\n".into(),
        )),
        (None, _) => Err((
            StatusCode::NOT_FOUND,
            format!("nothing here: the dashboard is at {PAGES_PATH}/clusters\n"),
        )),
    }
}

fn text(code: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn handle(
    client: kube::Client,
    bound: SocketAddr,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    if !host_allowed(host, bound) {
        return text(
            StatusCode::FORBIDDEN,
            format!("open the dashboard as http://{bound}/\n"),
        );
    }
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    match route(req.method(), req.uri().path()) {
        Ok(()) => {}
        Err((StatusCode::FOUND, location)) => {
            let mut r = text(StatusCode::FOUND, String::new());
            if let Ok(v) = http::HeaderValue::from_str(&location) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            return r;
        }
        Err((code, message)) => return text(code, message),
    }
    let Ok(uri) = path_and_query.parse::<http::Uri>() else {
        return text(StatusCode::BAD_REQUEST, "invalid path\n".into());
    };
    let mut outgoing = Request::new(kube::client::Body::empty());
    *outgoing.method_mut() = req.method().clone();
    *outgoing.uri_mut() = uri;
    // the browser's headers stay here except what content negotiation needs: no cookies, no
    // credentials of its own (kube adds the kubeconfig's)
    for name in [header::ACCEPT, header::ACCEPT_LANGUAGE] {
        if let Some(v) = req.headers().get(&name) {
            outgoing.headers_mut().insert(name, v.clone());
        }
    }
    match client.send(outgoing).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            parts.headers = proxy::response_headers(&parts.headers);
            Response::from_parts(parts, body.map_err(Into::into).boxed_unsync())
        }
        Err(e) => text(
            StatusCode::BAD_GATEWAY,
            format!("cannot reach the parent's API server: {e}\n"),
        ),
    }
}

/// Serves the dashboard until Ctrl-C.
pub async fn run(client: kube::Client, args: &DashboardArgs) -> Result<ExitCode, String> {
    let wanted = SocketAddr::new(args.address, args.port);
    let listener = TcpListener::bind(wanted).await.map_err(|e| {
        format!("cannot listen on {wanted}: {e} (pick another port with --port, or 0 for any)")
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the local address: {e}"))?;
    let url = format!("http://{bound}/");
    let mut notice = format!("Clusternet dashboard available at {url}\n");
    if !args.address.is_loopback() {
        notice.push_str(
            "warning: listening beyond this machine: anyone who reaches it reads the parent with your credentials\n",
        );
    }
    if !args.no_browser {
        let opener = std::env::var("BROWSER").unwrap_or_else(|_| "xdg-open".into());
        let opened = std::process::Command::new(&opener)
            .arg(&url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if opened.is_err() {
            notice.push_str(&format!(
                "could not start {opener}: open {url} in your browser\n"
            ));
        }
    }
    notice.push_str("Press Ctrl-C to stop.\n");
    let code = crate::emit(&notice);
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    let serving = proxy::serve_with(listener, move |req| handle(client.clone(), bound, req));
    tokio::select! {
        () = serving => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn flags_and_their_mistakes() {
        assert_eq!(
            parse(&[]).unwrap(),
            DashboardArgs {
                port: DEFAULT_PORT,
                address: IpAddr::V4(Ipv4Addr::LOCALHOST),
                no_browser: false
            }
        );
        let a = parse(&os(&["--port=0", "--address", "::1", "--no-browser"])).unwrap();
        assert_eq!(
            (a.port, a.address.to_string(), a.no_browser),
            (0, "::1".into(), true)
        );
        assert!(
            parse(&os(&["--port", "http"]))
                .unwrap_err()
                .contains("not a port")
        );
        assert!(
            parse(&os(&["--address"]))
                .unwrap_err()
                .contains("flag needs an argument: --address")
        );
        assert!(parse(&os(&["--open"])).unwrap_err().contains("\"--open\""));
    }

    #[test]
    fn only_its_own_name_and_the_pages_are_served() {
        let bound: SocketAddr = "127.0.0.1:50750".parse().unwrap();
        assert!(host_allowed(Some("127.0.0.1:50750"), bound));
        assert!(host_allowed(Some("localhost:50750"), bound));
        assert!(!host_allowed(Some("evil.example:50750"), bound));
        assert!(!host_allowed(None, bound));
        let v6: SocketAddr = "[::1]:8080".parse().unwrap();
        assert!(host_allowed(Some("[::1]:8080"), v6));

        assert_eq!(
            route(&Method::GET, "/"),
            Err((StatusCode::FOUND, format!("{PAGES_PATH}/clusters")))
        );
        assert_eq!(
            route(&Method::GET, &format!("{PAGES_PATH}/subscriptions")),
            Ok(())
        );
        assert_eq!(
            route(&Method::GET, &format!("{PAGES_PATH}xyz"))
                .unwrap_err()
                .0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            route(&Method::GET, "/api/v1/secrets").unwrap_err().0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            route(&Method::POST, &format!("{PAGES_PATH}/clusters"))
                .unwrap_err()
                .0,
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
