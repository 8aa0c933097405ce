//! The review APIs, created and answered and never stored, as kube-apiserver serves them (1.33):
//! `SelfSubjectAccessReview` (`kubectl auth can-i`), `SelfSubjectRulesReview` (`kubectl auth can-i --list`),
//! `SubjectAccessReview` and `LocalSubjectAccessReview` (another user's access, for those allowed to ask), and
//! `SelfSubjectReview` (`kubectl auth whoami`).

use nest_registry::{ApiError, Registry, Result};
use serde_json::{Value, json};

use crate::auth::User;
use crate::authz::{self, Action, Mode};

/// The answer to a review of kind `kind` sent as `body` by `user` (in `namespace` for a local one), or `None` when
/// `kind` is no review.
pub async fn answer(
    registry: &Registry,
    mode: Mode,
    user: &User,
    kind: &str,
    namespace: Option<&str>,
    body: &Value,
) -> Option<Result<Value>> {
    let mut review = body.clone();
    let result = match kind {
        "SelfSubjectAccessReview" => access(registry, mode, user, &body["spec"], None).await,
        "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            let spec = &body["spec"];
            let asked =
                User { name: spec["user"].as_str().unwrap_or_default().to_string(), groups: strings(&spec["groups"]) };
            if kind == "LocalSubjectAccessReview"
                && spec["resourceAttributes"]["namespace"].as_str().is_some_and(|n| Some(n) != namespace)
            {
                return Some(Err(ApiError::bad_request(
                    "spec.resourceAttributes.namespace must match the namespace of the LocalSubjectAccessReview",
                )));
            }
            access(registry, mode, &asked, spec, namespace).await
        }
        "SelfSubjectRulesReview" => rules(registry, mode, user, body["spec"]["namespace"].as_str()).await,
        "SelfSubjectReview" => Ok(json!({"userInfo": {"username": user.name, "groups": user.groups}})),
        _ => return None,
    };
    Some(result.map(|status| {
        review["status"] = status;
        review
    }))
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect()
}

/// Whether `user` may do what `spec` asks (`resourceAttributes` or `nonResourceAttributes`).
async fn access(registry: &Registry, mode: Mode, user: &User, spec: &Value, namespace: Option<&str>) -> Result<Value> {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let allowed = if let Some(attributes) = spec.get("resourceAttributes").filter(|a| a.is_object()) {
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
        authz::allowed(registry, mode, user, &action).await?
    } else if let Some(attributes) = spec.get("nonResourceAttributes").filter(|a| a.is_object()) {
        let (verb, path) = (text(&attributes["verb"]), text(&attributes["path"]));
        authz::allowed(registry, mode, user, &Action::Path { verb: &verb, path: &path }).await?
    } else {
        return Err(ApiError::bad_request("spec.resourceAttributes or spec.nonResourceAttributes is required"));
    };
    let mut status = json!({"allowed": allowed});
    if allowed && mode.rbac() {
        status["reason"] = json!("allowed by RBAC");
    }
    Ok(status)
}

/// The rules that apply to `user` in `namespace`.
async fn rules(registry: &Registry, mode: Mode, user: &User, namespace: Option<&str>) -> Result<Value> {
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
