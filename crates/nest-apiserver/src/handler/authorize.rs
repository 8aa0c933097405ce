//! Authorization: whether the acting user may do what a request asks ([`crate::authz`]), and the checks that look
//! at what a write would leave: RBAC's escalation check and the certificate admission plugins
//! ([`crate::certificates`]).

use bytes::Bytes;
use hyper::Method;
use nest_codec::{apply_patch, decode_object, parse_patch};
use nest_registry::Result;
use serde_json::Value;

use super::State;
use super::apply::APPLY_PATCH;
use super::body::content_type;
use super::route::{Target, asks_to_watch};
use crate::auth::User;
use crate::authz::Action;

/// Authorizes a request to a path that is not a resource (`/api`, `/metrics`): its method is the verb, HEAD a
/// `get`.
pub(super) async fn path(state: &State, user: &User, method: &Method, path: &str) -> Result<()> {
    let verb = method.as_str().to_ascii_lowercase();
    let verb = if verb == "head" { "get".to_string() } else { verb };
    let action = Action::Path { verb: &verb, path };
    crate::authz::authorize(&state.registry, state.authorization, user, &action).await
}

/// Authorizes a request to a resource; a write of an RBAC object or of a CertificateSigningRequest is also checked
/// for what it would leave.
pub(super) async fn resource(
    state: &State,
    target: &Target,
    user: &User,
    request: &hyper::http::request::Parts,
    body: &Bytes,
) -> Result<()> {
    let info = &target.resource.info;
    let action = |verb| Action::Resource {
        verb,
        group: &info.group,
        resource: &info.plural,
        subresource: target.subresource.as_deref(),
        namespace: target.namespace.as_deref(),
        name: target.name.as_deref(),
    };
    let verb = crate::authz::verb(&request.method, target.name.is_some(), asks_to_watch(request.uri.query()));
    crate::authz::authorize(&state.registry, state.authorization, user, &action(verb)).await?;
    // A WebSocket opens exec, attach and port-forward streams with a GET, where SPDY's POST is a `create`: the GET
    // must be allowed `create` too, or `get` alone would run commands in pods (upstream's
    // `AuthorizePodWebsocketUpgradeCreatePermission`, beta and on by default since 1.35).
    if request.method == Method::GET && creates_a_stream(info, target.subresource.as_deref()) {
        crate::authz::authorize(&state.registry, state.authorization, user, &action("create")).await?;
    }
    if !matches!(request.method, Method::POST | Method::PUT | Method::PATCH) {
        return Ok(());
    }
    let namespace = target.namespace.as_deref().unwrap_or_default();
    // A write of an RBAC object grants no more than its writer holds.
    if info.group == "rbac.authorization.k8s.io" {
        let object = object_after(state, target, request, body).await?;
        crate::authz::check_escalation(&state.registry, state.authorization, user, info, namespace, &object).await?;
    }
    // Who may approve and sign for a signer, and what it may be asked (the certificate admission plugins).
    if info.group == "certificates.k8s.io" {
        let after = object_after(state, target, request, body).await?;
        let old = match target.name.as_deref() {
            Some(name) => Some(state.registry.get(&target.resource, namespace, name).await?),
            None => None,
        };
        let subresource = target.subresource.as_deref();
        let (registry, mode) = (&state.registry, state.authorization);
        crate::certificates::check(registry, mode, user, info, subresource, &after, old.as_ref()).await?;
    }
    Ok(())
}

/// Whether `subresource` of `info` opens a stream into a pod: `pods/exec`, `pods/attach`, `pods/portforward`.
fn creates_a_stream(info: &nest_registry::ResourceInfo, subresource: Option<&str>) -> bool {
    info.group.is_empty() && info.plural == "pods" && matches!(subresource, Some("exec" | "attach" | "portforward"))
}

/// The object a write would leave: the body of a create or replace, or the stored object with the patch applied
/// (the body itself, for an apply).
async fn object_after(
    state: &State,
    target: &Target,
    request: &hyper::http::request::Parts,
    body: &Bytes,
) -> Result<Value> {
    let content_type = content_type(request);
    if request.method != Method::PATCH {
        return decode_object(&content_type, body);
    }
    if content_type == APPLY_PATCH {
        return decode_object("application/yaml", body);
    }
    let (ns, name) = (target.namespace.as_deref().unwrap_or_default(), target.name.as_deref().unwrap_or_default());
    let current = state.registry.get(&target.resource, ns, name).await?;
    let patch = parse_patch(&content_type, body, target.resource.schema.is_some())?;
    apply_patch(&patch, &current, target.resource.schema.as_deref())
}
