//! Kubernetes `Status` errors for everything the hub answers: every failure a caller can cause
//! (bad body, unknown resource, missing rights, oversized request) leaves as a `meta.k8s.io`
//! `Status` with the HTTP code kubectl expects, never as a panic or a bare string.

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::body::{HubBody, full};

/// A failed request, rendered as a Kubernetes `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status (group, kind, name, causes), when there is an object to name.
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "Unauthorized", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }
    pub fn not_found_path(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }
    /// `<resource>.<group> "<name>" not found`, as the API server words it.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified(group, resource);
        let mut e = Self::new(404, "NotFound", format!("{qualified} \"{name}\" not found"));
        e.details = Some(json!({"name": name, "group": group, "kind": resource}));
        e
    }
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified(group, resource);
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{qualified} \"{name}\" already exists"),
        );
        e.details = Some(json!({"name": name, "group": group, "kind": resource}));
        e
    }
    pub fn method_not_supported(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("request body is larger than the limit of {limit} bytes"),
        )
    }
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format: {content_type}"),
        )
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }
    /// 429 with `details.retryAfterSeconds`, which [`into_response`](Self::into_response) also
    /// sends as `Retry-After` (as the API server's own `NewTooManyRequests` does).
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        let mut e = Self::new(429, "TooManyRequests", message);
        e.details = Some(json!({"retryAfterSeconds": retry_after_seconds}));
        e
    }

    /// The API server's own answer, passed through unchanged (dry-run validation errors).
    pub fn from_status(status: &kube::core::Status) -> Self {
        let reason = reason_for(status.code);
        ApiError {
            code: if status.code == 0 { 500 } else { status.code },
            reason,
            message: status.message.clone(),
            details: status
                .details
                .as_ref()
                .and_then(|d| serde_json::to_value(d).ok()),
        }
        .with_reason_text(&status.reason)
    }

    fn with_reason_text(mut self, reason: &str) -> Self {
        if let Some(r) = KNOWN_REASONS.iter().find(|r| **r == reason) {
            self.reason = r;
        }
        self
    }

    /// Maps a client error from the parent: API errors pass through, transport errors are 500s.
    pub fn from_kube(e: &kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => Self::from_status(s),
            other => Self::internal(format!("talking to the parent API server: {other}")),
        }
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }

    pub fn into_response(self) -> http::Response<HubBody> {
        let body = serde_json::to_vec(&self.to_json()).unwrap_or_default();
        let mut resp = http::Response::new(full(Bytes::from(body)));
        *resp.status_mut() =
            StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self
            .details
            .as_ref()
            .and_then(|d| d["retryAfterSeconds"].as_u64())
        {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

const KNOWN_REASONS: &[&str] = &[
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "Timeout",
    "TooManyRequests",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
];

fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Gone",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

/// A successful `Status` (deletecollection and deletes of objects that are gone at once).
pub fn success_status(details: Option<Value>) -> Value {
    let mut v = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
    });
    if let Some(d) = details {
        v["details"] = d;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_group_and_resource_like_the_api_server() {
        let e = ApiError::not_found("apps", "deployments", "web");
        assert_eq!(e.message, "deployments.apps \"web\" not found");
        let core = ApiError::not_found("", "configmaps", "c");
        assert_eq!(core.message, "configmaps \"c\" not found");
        let j = e.to_json();
        assert_eq!(j["code"], 404);
        assert_eq!(j["reason"], "NotFound");
        assert_eq!(j["kind"], "Status");
    }

    #[test]
    fn too_many_requests_says_when_to_retry() {
        let resp = ApiError::too_many_requests("slow down", 5).into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "5");
        let e = ApiError::too_many_requests("slow down", 5).to_json();
        assert_eq!(e["reason"], "TooManyRequests");
        assert_eq!(e["details"]["retryAfterSeconds"], 5);
        let plain = ApiError::unavailable("x").into_response();
        assert!(!plain.headers().contains_key(header::RETRY_AFTER));
    }

    #[test]
    fn parent_status_passes_through_with_its_reason() {
        let s: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "message": "Deployment.apps \"x\" is invalid: spec.replicas: Invalid value: -1",
            "reason": "Invalid", "code": 422
        }))
        .expect("status");
        let e = ApiError::from_status(&s);
        assert_eq!(e.code, 422);
        assert_eq!(e.reason, "Invalid");
        assert!(e.message.contains("spec.replicas"));
    }
}
