//! The review APIs, created and answered and never stored, as kube-apiserver serves them (1.33):
//! `SelfSubjectAccessReview` (`kubectl auth can-i`), `SelfSubjectRulesReview` (`kubectl auth can-i --list`),
//! `SubjectAccessReview` and `LocalSubjectAccessReview` (another user's access, for those allowed to ask), and
//! `SelfSubjectReview` (`kubectl auth whoami`).

use nest_registry::{ApiError, Cause, Registry, Result};
use serde_json::{Value, json};

use crate::auth::User;
use crate::authz::{self, Action, Mode};

/// The answer to a review of kind `kind` sent as `body` by `user` (in `namespace` for a local one), or `None` when
/// `kind` is no review. As upstream, an access review is the request itself with its `status` (and `metadata` as a
/// create handler leaves it: no name, a null `creationTimestamp`); a rules review or a self review is a new object.
pub async fn answer(
    registry: &Registry,
    mode: Mode,
    user: &User,
    kind: &str,
    namespace: Option<&str>,
    body: &Value,
) -> Option<Result<Value>> {
    let spec = &body["spec"];
    let echoed = || {
        let mut review = body.clone();
        review["metadata"] = match namespace {
            Some(namespace) => json!({"namespace": namespace, "creationTimestamp": null}),
            None => json!({"creationTimestamp": null}),
        };
        review
    };
    let result = match kind {
        "SelfSubjectAccessReview" => {
            let checked = check_attributes(spec).and_then(|()| empty_metadata(body, "must be empty"));
            match checked {
                Ok(()) => access(registry, mode, user, spec, None).await.map(|status| (echoed(), status)),
                Err(error) => Err(error),
            }
        }
        "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            let asked =
                User { name: spec["user"].as_str().unwrap_or_default().to_string(), groups: strings(&spec["groups"]) };
            let local = kind == "LocalSubjectAccessReview";
            let stated = body["metadata"]["namespace"].as_str().unwrap_or_default();
            if local && !stated.is_empty() && Some(stated) != namespace {
                return Some(Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                )));
            }
            let checked = check_subject_access(spec, local.then(|| namespace.unwrap_or_default())).and_then(|()| {
                empty_metadata(body, if local { "must be empty except for namespace" } else { "must be empty" })
            });
            match checked {
                Ok(()) => access(registry, mode, &asked, spec, namespace).await.map(|status| (echoed(), status)),
                Err(error) => Err(error),
            }
        }
        "SelfSubjectRulesReview" => match spec["namespace"].as_str().filter(|n| !n.is_empty()) {
            None => Err(ApiError::bad_request("no namespace on request")),
            Some(asked) => rules(registry, mode, user, asked)
                .await
                .map(|status| (json!({"metadata": {"creationTimestamp": null}, "spec": {}}), status)),
        },
        "SelfSubjectReview" => {
            let review = json!({"metadata": {"creationTimestamp": nest_core::clock::rfc3339_now()}});
            Ok((review, json!({"userInfo": {"username": user.name, "groups": user.groups}})))
        }
        _ => return None,
    };
    Some(result.map(|(mut review, status)| {
        review["status"] = status;
        review
    }))
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect()
}

/// An access review's attributes as `ValidateSelfSubjectAccessReviewSpec` checks them: exactly one of resource and
/// non-resource attributes.
fn attribute_causes(spec: &Value) -> Vec<Cause> {
    let given = |field: &str| spec.get(field).is_some_and(|a| !a.is_null());
    match (given("resourceAttributes"), given("nonResourceAttributes")) {
        (false, false) => vec![Cause::invalid(
            "spec.resourceAttributes",
            "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )],
        (true, true) => vec![Cause::invalid(
            "spec.nonResourceAttributes",
            format!(
                "Invalid value: {}: cannot be specified in combination with resourceAttributes",
                go_attributes(&spec["nonResourceAttributes"])
            ),
        )],
        _ => Vec::new(),
    }
}

/// Non-resource attributes as Go's `%#v` prints the internal type in upstream's messages.
fn go_attributes(attributes: &Value) -> String {
    let text = |field: &str| attributes[field].as_str().unwrap_or_default().to_string();
    format!("authorization.NonResourceAttributes{{Path:{:?}, Verb:{:?}}}", text("path"), text("verb"))
}

fn check_attributes(spec: &Value) -> Result<()> {
    refuse(attribute_causes(spec))
}

/// A (local) subject access review's spec, as `ValidateSubjectAccessReviewSpec` and
/// `ValidateLocalSubjectAccessReview` check it; `local` is the namespace of a local one.
fn check_subject_access(spec: &Value, local: Option<&str>) -> Result<()> {
    let mut causes = attribute_causes(spec);
    let nobody = spec["user"].as_str().unwrap_or_default().is_empty() && strings(&spec["groups"]).is_empty();
    if nobody {
        causes
            .push(Cause::invalid("spec.user", "Invalid value: \"\": at least one of user or group must be specified"));
    }
    if let Some(namespace) = local {
        if let Some(attributes) = spec.get("resourceAttributes").filter(|a| a.is_object()) {
            let asked = attributes["namespace"].as_str().unwrap_or_default();
            if asked != namespace {
                causes.push(Cause::invalid(
                    "spec.resourceAttributes.namespace",
                    format!("Invalid value: {asked:?}: must match metadata.namespace"),
                ));
            }
        }
        if let Some(attributes) = spec.get("nonResourceAttributes").filter(|a| a.is_object()) {
            causes.push(Cause::invalid(
                "spec.nonResourceAttributes",
                format!("Invalid value: {}: disallowed on this kind of request", go_attributes(attributes)),
            ));
        }
    }
    refuse(causes)
}

/// A review's metadata may say nothing but (for a local one) its namespace.
fn empty_metadata(body: &Value, message: &str) -> Result<()> {
    let metadata = body["metadata"].as_object().cloned().unwrap_or_default();
    // Zero values are Go's empty metadata too (a protobuf body decodes to them).
    let zero = nest_core::json::is_zero;
    let said = metadata.iter().any(|(key, value)| {
        !matches!(key.as_str(), "namespace" | "managedFields" | "creationTimestamp") && !zero(value)
    });
    refuse(if said {
        vec![Cause::invalid("metadata", format!("Invalid value: {}: {message}", Value::Object(metadata)))]
    } else {
        vec![]
    })
}

fn refuse(causes: Vec<Cause>) -> Result<()> {
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid_kind("authorization.k8s.io", "", "", causes)) }
}

/// Whether `user` may do what `spec` asks (`resourceAttributes` or `nonResourceAttributes`), and why.
async fn access(registry: &Registry, mode: Mode, user: &User, spec: &Value, namespace: Option<&str>) -> Result<Value> {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let decision = if let Some(attributes) = spec.get("resourceAttributes").filter(|a| a.is_object()) {
        let (verb, group, resource) =
            (text(&attributes["verb"]), text(&attributes["group"]), text(&attributes["resource"]));
        let (subresource, name) = (text(&attributes["subresource"]), text(&attributes["name"]));
        let asked_namespace = text(&attributes["namespace"]);
        let namespace = namespace.map(str::to_string).or(Some(asked_namespace).filter(|n| !n.is_empty()));
        let action = Action::Resource {
            verb: &verb,
            group: &group,
            resource: &resource,
            subresource: Some(subresource.as_str()).filter(|s| !s.is_empty()),
            namespace: namespace.as_deref(),
            name: Some(name.as_str()).filter(|n| !n.is_empty()),
        };
        authz::decide(registry, mode, user, &action).await?
    } else {
        let attributes = &spec["nonResourceAttributes"];
        let (verb, path) = (text(&attributes["verb"]), text(&attributes["path"]));
        authz::decide(registry, mode, user, &Action::Path { verb: &verb, path: &path }).await?
    };
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    Ok(status)
}

/// The rules that apply to `user` in `namespace`.
async fn rules(registry: &Registry, mode: Mode, user: &User, namespace: &str) -> Result<Value> {
    let namespace = Some(namespace);
    if mode == Mode::AlwaysAllow {
        return Ok(json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }));
    }
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in authz::rules(registry, user, namespace).await? {
        if !rule.resources.is_empty() {
            let mut entry = json!({"verbs": rule.verbs, "apiGroups": rule.api_groups, "resources": rule.resources});
            if !rule.resource_names.is_empty() {
                entry["resourceNames"] = json!(rule.resource_names);
            }
            resource_rules.push(entry);
        }
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules.push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
    }
    Ok(json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": false}))
}
