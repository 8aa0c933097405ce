//! Request errors, and the one place they become Kubernetes `Status` objects.
//!
//! Reasons and codes follow `k8s.io/apimachinery/pkg/api/errors` (1.33): NotFound 404, AlreadyExists 409, Conflict
//! 409, Invalid 422, Expired / Gone 410, BadRequest 400, Forbidden 403, Unauthorized 401, MethodNotAllowed 405,
//! UnsupportedMediaType 415, RequestEntityTooLarge 413, Timeout 504, InternalError 500.

use serde_json::{Value, json};

use crate::catalog::ResourceInfo;

/// `Result` with [`ApiError`] as its default error.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// One field-level cause of an `Invalid` error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, `FieldValueTypeInvalid`, …
    pub reason: &'static str,
    pub message: String,
    /// The field path, e.g. `metadata.name` or `spec.containers[0].image`.
    pub field: String,
}

impl Cause {
    pub fn required(field: impl Into<String>) -> Cause {
        Cause { reason: "FieldValueRequired", message: "Required value".into(), field: field.into() }
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Cause {
        Cause { reason: "FieldValueInvalid", message: message.into(), field: field.into() }
    }
}

/// A request error: everything needed to answer with a `Status`.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// Boxed so that `Result<T, ApiError>` stays small on the happy path.
    pub details: Box<Details>,
}

/// The `details` of a `Status`.
#[derive(Clone, Debug, Default)]
pub struct Details {
    /// `details.group`, `details.kind` (the resource's plural for most errors, the kind for a 422, as kube-apiserver
    /// sends them), `details.name`.
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub causes: Vec<Cause>,
    /// Seconds the client should wait before retrying, for 429 and 504.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// 422 for bad PatchOptions (`fieldManager`, `force`), as kube-apiserver words it.
    pub fn invalid_patch_options(detail: &str) -> ApiError {
        let (field, _) = detail.split_once(':').unwrap_or((detail, ""));
        let mut error = ApiError::new(422, "Invalid", format!("PatchOptions.meta.k8s.io \"\" is invalid: {detail}"));
        error.details.group = Some("meta.k8s.io".into());
        error.details.kind = Some("PatchOptions".into());
        error.details.causes =
            vec![Cause { reason: "FieldValueInvalid", message: detail.to_string(), field: field.to_string() }];
        error
    }

    /// The same error with another message.
    pub fn with_message(mut self, message: impl Into<String>) -> ApiError {
        self.message = message.into();
        self
    }

    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { code, reason, message: message.into(), details: Box::default() }
    }

    fn about(mut self, info: &ResourceInfo, name: &str) -> ApiError {
        self.details.group = Some(info.group.clone());
        self.details.kind = Some(info.plural.clone());
        self.details.name = Some(name.to_string()).filter(|n| !n.is_empty());
        self
    }

    pub fn not_found(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError::not_found_named(&info.group, &info.plural, name)
    }

    /// A 404 about `name` of a resource known by its group and plural only.
    pub fn not_found_named(group: &str, plural: &str, name: &str) -> ApiError {
        let qualified = if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") };
        let mut error = ApiError::new(404, "NotFound", format!("{qualified} \"{name}\" not found"));
        error.details.group = Some(group.to_string());
        error.details.kind = Some(plural.to_string());
        error.details.name = Some(name.to_string()).filter(|n| !n.is_empty());
        error
    }

    pub fn already_exists(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", info.qualified())).about(info, name)
    }

    pub fn conflict(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes \
                 to the latest version and try again",
                info.qualified()
            ),
        )
        .about(info, name)
    }

    pub fn invalid(info: &ResourceInfo, name: &str, causes: Vec<Cause>) -> ApiError {
        ApiError::invalid_kind(&info.group, &info.kind, name, causes)
    }

    /// A 422 as `apierrors.NewInvalid` makes it: `<Kind>.<group> "<name>" is invalid: <errors>`, where the errors
    /// are `field: message`, once each, and bracketed when there are several; `details` name the group, kind and
    /// name that are not empty. (A review's kind is empty: upstream decodes it into an internal type that forgets.)
    pub fn invalid_kind(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> ApiError {
        let mut errors: Vec<String> = Vec::new();
        for cause in &causes {
            let text = format!("{}: {}", cause.field, cause.message);
            if !errors.contains(&text) {
                errors.push(text);
            }
        }
        let detail = match &errors[..] {
            [] => String::new(),
            [one] => format!(": {one}"),
            many => format!(": [{}]", many.join(", ")),
        };
        let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let mut error = ApiError::new(422, "Invalid", format!("{qualified} \"{name}\" is invalid{detail}"));
        let given = |text: &str| Some(text.to_string()).filter(|t| !t.is_empty());
        error.details.group = Some(group.to_string());
        error.details.kind = given(kind);
        error.details.name = given(name);
        error.details.causes = causes;
        error
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn forbidden(info: &ResourceInfo, name: &str, message: impl Into<String>) -> ApiError {
        let message = format!("{} \"{name}\" is forbidden: {}", info.qualified(), message.into());
        ApiError::new(403, "Forbidden", message).about(info, name)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 410 for an expired continue token or a compacted resourceVersion.
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Gone", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> ApiError {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(413, "RequestEntityTooLarge", message)
    }

    pub fn not_acceptable(message: impl Into<String>) -> ApiError {
        ApiError::new(406, "NotAcceptable", message)
    }

    pub fn timeout(message: impl Into<String>) -> ApiError {
        let mut error = ApiError::new(504, "Timeout", message);
        error.details.retry_after = Some(1);
        error
    }

    /// A 429, as kube-apiserver's priority and fairness answers a client over its share: try again in a second.
    pub fn too_many_requests() -> ApiError {
        let mut error = ApiError::new(429, "TooManyRequests", "Too many requests, please try again later.");
        error.details.retry_after = Some(1);
        error
    }

    /// A 503: something the request needs (a node's kubelet API, say) cannot be reached.
    pub fn service_unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(503, "ServiceUnavailable", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", format!("Internal error occurred: {}", message.into()))
    }

    /// A 404 for a path that names nothing served.
    pub fn no_route() -> ApiError {
        ApiError::new(404, "NotFound", "the server could not find the requested resource")
    }

    /// The `Status` object clients read.
    pub fn to_status(&self) -> Value {
        let d = &self.details;
        let mut details = serde_json::Map::new();
        if let Some(name) = &d.name {
            details.insert("name".into(), json!(name));
        }
        if let Some(group) = d.group.as_ref().filter(|g| !g.is_empty()) {
            details.insert("group".into(), json!(group));
        }
        if let Some(kind) = &d.kind {
            details.insert("kind".into(), json!(kind));
        }
        if !d.causes.is_empty() {
            let causes: Vec<Value> =
                d.causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(seconds) = d.retry_after {
            details.insert("retryAfterSeconds".into(), json!(seconds));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

impl ApiError {
    /// The `Status` object as kube-apiserver writes it on the wire: fields in the order of Go's `metav1.Status`
    /// (`kind`, `apiVersion`, `metadata`, `status`, `message`, `reason`, `details`, `code`; within `details`: `name`,
    /// `group`, `kind`, `causes`, `retryAfterSeconds`), empty ones left out as `omitempty` leaves them, and a
    /// trailing newline, as Go's JSON encoder ends what it writes. Clients that compare error bodies compare these.
    pub fn to_status_json(&self) -> String {
        let text = |value: &str| serde_json::to_string(value).unwrap_or_else(|_| "\"\"".into());
        let mut out = String::from(r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure""#);
        if !self.message.is_empty() {
            out.push_str(&format!(",\"message\":{}", text(&self.message)));
        }
        if !self.reason.is_empty() {
            out.push_str(&format!(",\"reason\":{}", text(self.reason)));
        }
        let d = &self.details;
        let mut details = Vec::new();
        for (key, value) in [("name", &d.name), ("group", &d.group), ("kind", &d.kind)] {
            if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
                details.push(format!("\"{key}\":{}", text(value)));
            }
        }
        if !d.causes.is_empty() {
            let causes: Vec<String> = d
                .causes
                .iter()
                .map(|c| {
                    let fields: Vec<String> =
                        [("reason", c.reason), ("message", c.message.as_str()), ("field", c.field.as_str())]
                            .into_iter()
                            .filter(|(_, v)| !v.is_empty())
                            .map(|(k, v)| format!("\"{k}\":{}", text(v)))
                            .collect();
                    format!("{{{}}}", fields.join(","))
                })
                .collect();
            details.push(format!("\"causes\":[{}]", causes.join(",")));
        }
        if let Some(seconds) = d.retry_after {
            details.push(format!("\"retryAfterSeconds\":{seconds}"));
        }
        if !details.is_empty() {
            out.push_str(&format!(",\"details\":{{{}}}", details.join(",")));
        }
        if self.code != 0 {
            out.push_str(&format!(",\"code\":{}", self.code));
        }
        out.push_str("}\n");
        out
    }
}

/// Translates a storage failure that the generic store did not handle itself.
/// [`ApiError::interpret`] and [`ApiError::from_storage`] on a storage result.
pub(crate) trait StorageResult<T> {
    /// The error interpreted as about `name` of `info`.
    fn about(self, info: &ResourceInfo, name: &str) -> Result<T>;
    /// The error as not about one object.
    fn storage(self) -> Result<T>;
}

impl<T> StorageResult<T> for std::result::Result<T, nest_storage::Error> {
    fn about(self, info: &ResourceInfo, name: &str) -> Result<T> {
        self.map_err(|e| ApiError::interpret(e, info, name))
    }

    fn storage(self) -> Result<T> {
        self.map_err(ApiError::from_storage)
    }
}

/// Storage errors as API errors, after kube-apiserver's `storage/errors` (`InterpretGetError`,
/// `InterpretCreateError`, …, 1.33): each names the object it was about, and what storage could not do for a reason of
/// its own (unreachable, closed) is a 503 or 504 a client retries, not a 500.
impl ApiError {
    /// A storage error of an operation on the object `name` of `info`.
    pub fn interpret(error: nest_storage::Error, info: &ResourceInfo, name: &str) -> ApiError {
        match error {
            nest_storage::Error::NotFound { .. } => ApiError::not_found(info, name),
            nest_storage::Error::AlreadyExists { .. } => ApiError::already_exists(info, name),
            nest_storage::Error::Conflict { .. } => ApiError::conflict(info, name),
            other => ApiError::from_storage(other),
        }
    }

    /// A storage error not about one object (a list, a watch, a read of another kind's key).
    pub fn from_storage(error: nest_storage::Error) -> ApiError {
        use nest_storage::Error;
        match error {
            Error::Compacted { requested } => ApiError::expired(format!("too old resource version: {requested}")),
            Error::FutureRevision { requested } => {
                ApiError::timeout(format!("Too large resource version: {requested}, current resource version is lower"))
            }
            Error::ValueTooLarge { .. } => ApiError::too_large("the object is too large to store"),
            Error::WatchOverflow => ApiError::expired(
                "the watch fell behind and was stopped; list again and watch from the new resourceVersion",
            ),
            Error::Closed => ApiError::service_unavailable("the storage is closed: the server is shutting down"),
            // etcd had no leader, or no member answered: nothing was done, and a moment later it may be.
            Error::Unavailable { context, detail } => {
                let mut error = ApiError::service_unavailable(format!("storage is unavailable ({context}): {detail}"));
                error.details.retry_after = Some(1);
                error
            }
            // etcd's own words, as kube-apiserver passes them on; retried once an operator has made room.
            Error::NoSpace { detail } => {
                let mut error = ApiError::service_unavailable(detail);
                error.details.retry_after = Some(1);
                error
            }
            Error::Backend { context, source } => {
                ApiError::timeout(format!("storage is unavailable ({context}): {source}"))
            }
            // Not about one object here (see `interpret`), or a fault of the store itself.
            other => ApiError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    #[test]
    fn statuses_carry_reason_code_and_details() {
        let pods = Catalog::builtin().find("", "v1", "pods").unwrap();
        let status = ApiError::not_found(&pods, "web").to_status();
        assert_eq!(status["code"], 404);
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["message"], "pods \"web\" not found");
        assert_eq!(status["details"], json!({"name": "web", "kind": "pods"}));

        let invalid = ApiError::invalid(&pods, "web", vec![Cause::required("spec.containers")]).to_status();
        assert_eq!(invalid["code"], 422);
        assert_eq!(invalid["details"]["causes"][0]["field"], "spec.containers");
        assert_eq!(invalid["details"]["kind"], "Pod");
    }

    /// The bytes kube-apiserver 1.33 sends for these errors, field for field and in its order.
    #[test]
    fn statuses_on_the_wire_are_upstreams_bytes() {
        let pods = Catalog::builtin().find("", "v1", "pods").unwrap();
        assert_eq!(
            ApiError::not_found(&pods, "web").to_status_json(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"pods \\\"web\\\" not found\",\"reason\":\"NotFound\",\
             \"details\":{\"name\":\"web\",\"kind\":\"pods\"},\"code\":404}\n"
        );
        let deployments = Catalog::builtin().find("apps", "v1", "deployments").unwrap();
        assert_eq!(
            ApiError::already_exists(&deployments, "web").to_status_json(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"deployments.apps \\\"web\\\" already exists\",\"reason\":\"AlreadyExists\",\
             \"details\":{\"name\":\"web\",\"group\":\"apps\",\"kind\":\"deployments\"},\"code\":409}\n"
        );
        let invalid = ApiError::invalid(&pods, "web", vec![Cause::required("spec.containers")]);
        let wire: Value = serde_json::from_str(&invalid.to_status_json()).unwrap();
        assert_eq!(wire, invalid.to_status(), "the wire form says what the object says");
        assert!(invalid.to_status_json().contains(
            "\"details\":{\"name\":\"web\",\"kind\":\"Pod\",\"causes\":[{\"reason\":\"FieldValueRequired\","
        ));
    }
}
