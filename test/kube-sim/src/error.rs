//! API errors, rendered as `Status` objects with the reason and code the real server uses.

use serde_json::{Value, json};

/// An error answered to a client as a `Status`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// Adds `details` (group, kind, name, causes).
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 404 NotFound for `<resource>[.group] "name"`.
    pub fn not_found(resource: &str, group: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(resource, group)),
        )
        .with_details(json!({"name": name, "group": group, "kind": resource}))
    }

    /// 404 for a path that names no resource.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(resource: &str, group: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(resource, group)),
        )
        .with_details(json!({"name": name, "group": group, "kind": resource}))
    }

    /// 409 Conflict.
    pub fn conflict(resource: &str, group: &str, name: &str, why: impl Into<String>) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {}",
                qualified(resource, group),
                why.into()
            ),
        )
        .with_details(json!({"name": name, "group": group, "kind": resource}))
    }

    /// 409 Conflict with a message of its own (server-side apply).
    pub fn conflict_message(message: impl Into<String>) -> Self {
        Self::new(409, "Conflict", message)
    }

    /// 410 Gone / Expired.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 422 Invalid, with causes `(field, message)`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: &[(String, String)]) -> Self {
        let summary: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let message = format!(
            "{kind}.{} \"{name}\" is invalid: {}",
            if group.is_empty() { "core" } else { group },
            if summary.len() == 1 {
                summary[0].clone()
            } else {
                format!("[{}]", summary.join(", "))
            }
        );
        let causes: Vec<Value> = causes
            .iter()
            .map(|(f, m)| json!({"reason": "FieldValueInvalid", "field": f, "message": m}))
            .collect();
        Self::new(422, "Invalid", message).with_details(json!({
            "name": name, "group": group, "kind": kind, "causes": causes
        }))
    }

    /// 422 Invalid without field detail (a JSON patch that failed).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 429 TooManyRequests (fault injection).
    pub fn too_many_requests() -> Self {
        Self::new(
            429,
            "TooManyRequests",
            "injected: too many requests, please try again later",
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// An injected error of any code.
    pub fn injected(code: u16) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(code, reason, format!("injected fault: {reason}"))
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// `resource.group`, or `resource` for the core group.
pub fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// A `Status` reporting success (what a delete returns once the object is gone).
pub fn success_status(name: &str, group: &str, kind: &str, uid: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": group, "kind": kind, "uid": uid}
    })
}

/// Result of an API operation.
pub type ApiResult<T> = Result<T, ApiError>;
