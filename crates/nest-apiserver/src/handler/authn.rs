//! Authentication and impersonation: who sends a request, and whom it acts as.

use nest_registry::{ApiError, Result};

use super::State;
use crate::audit::Record;
use crate::auth::User;
use crate::authz::Action;

/// Whom a request acts as, `None` for an anonymous one: the user of its client certificate (`cert_user`), else of
/// its bearer token, or whom that user impersonates. The audit record names both.
pub(super) async fn authenticate(
    state: &State,
    cert_user: Option<User>,
    headers: &hyper::HeaderMap,
    audit: &mut Option<Record>,
) -> Result<Option<User>> {
    let user = match cert_user {
        Some(user) => Some(user),
        None => match headers.get("authorization").and_then(|v| v.to_str().ok()) {
            Some(authorization) => bearer_user(state, authorization).await,
            None => None,
        },
    };
    let Some(real) = user else { return Ok(None) };
    if let Some(record) = audit.as_mut() {
        record.user = Some((real.name.clone(), real.groups.clone()));
    }
    let acting = impersonated(state, &real, headers).await?;
    if let Some(record) = audit.as_mut()
        && record.user.as_ref().is_some_and(|(name, groups)| *name != acting.name || *groups != acting.groups)
    {
        record.impersonated = Some((acting.name.clone(), acting.groups.clone()));
    }
    Ok(Some(acting))
}

/// The user of an `Authorization` header: a static token's, else a ServiceAccount token's.
async fn bearer_user(state: &State, authorization: &str) -> Option<User> {
    if let Some(user) = state.tokens.user(authorization) {
        return Some(user);
    }
    let token = authorization.strip_prefix("Bearer ").or_else(|| authorization.strip_prefix("bearer "))?.trim();
    state.service_accounts.authenticate(&state.registry, token, &[]).await.map(|(user, _)| user)
}

/// Who a request acts as: its sender, or whom it impersonates (`Impersonate-User`, `Impersonate-Group`: `kubectl
/// --as`, `--as-group`) if the sender may `impersonate` them, as kube-apiserver's impersonation filter decides
/// (`k8s.io/apiserver/pkg/endpoints/filters/impersonation.go`).
async fn impersonated(state: &State, real: &User, headers: &hyper::HeaderMap) -> Result<User> {
    let texts = |name: &str| -> Vec<String> {
        headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect()
    };
    let (names, groups) = (texts("impersonate-user"), texts("impersonate-group"));
    if headers.keys().any(|k| k.as_str() == "impersonate-uid" || k.as_str().starts_with("impersonate-extra-")) {
        return Err(ApiError::bad_request("impersonating a UID or extra user information is not supported by nest"));
    }
    let Some(name) = names.first() else {
        if !groups.is_empty() {
            return Err(ApiError::bad_request(format!("requested {:?} without impersonating a user", groups)));
        }
        return Ok(real.clone());
    };
    let mut asked = vec![match name.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':')) {
        Some((namespace, account)) => Asked { resource: "serviceaccounts", name: account, namespace: Some(namespace) },
        None => Asked { resource: "users", name, namespace: None },
    }];
    asked.extend(groups.iter().map(|g| Asked { resource: "groups", name: g, namespace: None }));
    for asked in &asked {
        may_impersonate(state, real, asked).await?;
    }
    let mut groups = groups;
    if name != "system:anonymous" && !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    Ok(User { name: name.clone(), groups })
}

/// One identity a request asks to act as.
#[derive(Clone, Copy)]
struct Asked<'a> {
    /// `users`, `groups` or `serviceaccounts`: the resource RBAC grants `impersonate` on.
    resource: &'static str,
    name: &'a str,
    /// A ServiceAccount's namespace.
    namespace: Option<&'a str>,
}

/// Refuses, as kube-apiserver words it, unless `real` may `impersonate` what is `asked`.
async fn may_impersonate(state: &State, real: &User, asked: &Asked<'_>) -> Result<()> {
    let Asked { resource, name, namespace } = *asked;
    let action =
        Action::Resource { verb: "impersonate", group: "", resource, subresource: None, namespace, name: Some(name) };
    if crate::authz::allowed(&state.registry, state.authorization, real, &action).await? {
        return Ok(());
    }
    let scope = namespace.map_or("at the cluster scope".to_string(), |n| format!("in the namespace \"{n}\""));
    Err(ApiError::new(
        403,
        "Forbidden",
        format!(
            "{resource} \"{name}\" is forbidden: User \"{}\" cannot impersonate resource \"{resource}\" in API group \"\" {scope}",
            real.name
        ),
    ))
}
