//! The subresources the API server answers itself, rather than a kind's strategy through the registry: one row
//! each in [`SERVER_OWNED`]. A new one (`pods/exec`, `pods/attach`, `pods/portforward`, `*/proxy`) is a row and
//! the function that serves it; routing, the long-running check and the verbs' dispatch read the table.
//!
//! `status` and a kind's own subresources that its strategy writes (`pods/binding`, `namespaces/finalize`, a CSR's
//! `approval`) are the verbs' ([`super::verbs`]), not rows here.

use futures_util::future::BoxFuture;
use hyper::{Method, Response, StatusCode};
use nest_codec::{Patch, apply_patch, decode_object, parse_patch};
use nest_registry::scale::scale_of;
use nest_registry::{ResourceInfo, Result, Subresource};
use serde_json::Value;

use super::Body;
use super::response::json_response;
use super::verbs::ResourceRequest;

/// A subresource the server answers itself.
pub(super) struct ServerOwned {
    /// Its name in the path: `log` in `pods/<name>/log`.
    pub name: &'static str,
    /// Which resources have it.
    pub held_by: HeldBy,
    /// Whether a request to it lasts as long as the client wants (a log stream), which leaves it out of the
    /// in-flight limit and the audit log's response bodies.
    pub long_running: bool,
    /// Answers a request to it, whatever the method (405 for a method it does not take).
    pub serve: Serve,
}

/// Which resources have a server-owned subresource.
pub(super) enum HeldBy {
    /// The kinds that list it among their own ([`ResourceInfo::subresources`]): `log` for pods, `token` for
    /// ServiceAccounts.
    Declared,
    /// Every resource with a scale subresource ([`ResourceInfo::scale`]), custom resources included.
    Scalable,
}

/// How a server-owned subresource is served.
pub(super) type Serve = for<'a> fn(ResourceRequest<'a>) -> BoxFuture<'a, Result<Response<Body>>>;

/// The subresources the server answers itself.
pub(super) const SERVER_OWNED: &[ServerOwned] = &[
    ServerOwned { name: "log", held_by: HeldBy::Declared, long_running: true, serve: |r| Box::pin(log(r)) },
    ServerOwned { name: "exec", held_by: HeldBy::Declared, long_running: true, serve: |r| Box::pin(exec(r)) },
    ServerOwned {
        name: "portforward",
        held_by: HeldBy::Declared,
        long_running: true,
        serve: |r| Box::pin(port_forward(r)),
    },
    ServerOwned { name: "attach", held_by: HeldBy::Declared, long_running: true, serve: |r| Box::pin(attach(r)) },
    ServerOwned { name: "token", held_by: HeldBy::Declared, long_running: false, serve: |r| Box::pin(token(r)) },
    ServerOwned { name: "scale", held_by: HeldBy::Scalable, long_running: false, serve: |r| Box::pin(scale(r)) },
];

/// The server-owned subresource `sub` of `info`, if it has one.
pub(super) fn server_owned(info: &ResourceInfo, sub: &str) -> Option<&'static ServerOwned> {
    SERVER_OWNED.iter().find(|row| {
        row.name == sub
            && match row.held_by {
                HeldBy::Declared => info.subresources.iter().any(|own| own.name == sub),
                HeldBy::Scalable => info.scale.is_some(),
            }
    })
}

/// Whether `path` (without a trailing `/`) ends in a long-running subresource, before it is routed.
pub(super) fn long_running(path: &str) -> bool {
    SERVER_OWNED
        .iter()
        .filter(|row| row.long_running)
        .any(|row| path.strip_suffix(row.name).is_some_and(|before| before.ends_with('/')))
}

// === impl the rows ===

/// `GET pods/<name>/log`: the kubelet's answer, streamed ([`crate::logs`]).
async fn log(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    if request.method != Method::GET {
        return Err(request.not_supported());
    }
    let (state, query) = (request.state, &request.query);
    let tls = state.kubelet_tls.clone();
    crate::logs::pod_log(&state.registry, tls, request.namespace(), request.name(), |key| {
        query.get(key).map(str::to_string)
    })
    .await
}

/// `GET` (WebSocket) or `POST` (SPDY) `pods/<name>/exec`: the node's stream ([`crate::streams`]).
async fn exec(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    if !matches!(request.method, Method::GET | Method::POST) {
        return Err(request.not_supported());
    }
    let query = &request.query;
    let all = |key: &str| query.get_all(key).map(str::to_string).collect();
    let options = crate::streams::ExecOptions::read(|key| query.get(key), all)?;
    let client =
        crate::streams::Client { method: &request.method, headers: &request.headers, upgrade: request.upgrade.clone() };
    let tls = request.state.kubelet_tls.clone();
    crate::streams::exec(&request.state.registry, tls, request.namespace(), request.name(), options, client).await
}

/// `GET` (WebSocket) or `POST` (SPDY) `pods/<name>/portforward`: the node's stream ([`crate::port_forward`]).
async fn port_forward(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    if !matches!(request.method, Method::GET | Method::POST) {
        return Err(request.not_supported());
    }
    let ports = crate::port_forward::ports(request.query.get_all("ports"))?;
    let client =
        crate::streams::Client { method: &request.method, headers: &request.headers, upgrade: request.upgrade.clone() };
    let (state, namespace, name) = (request.state, request.namespace(), request.name());
    let tls = state.kubelet_tls.clone();
    crate::port_forward::port_forward(&state.registry, tls, namespace, name, &ports, client).await
}

/// `GET` (WebSocket) or `POST` (SPDY) `pods/<name>/attach`: the node's stream of the running container's own
/// standard streams ([`crate::streams`]).
async fn attach(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    if !matches!(request.method, Method::GET | Method::POST) {
        return Err(request.not_supported());
    }
    let query = &request.query;
    // An attach runs no command: whatever `command` says is not read.
    let options = crate::streams::ExecOptions::read(|key| query.get(key), |_| Vec::new())?;
    let client =
        crate::streams::Client { method: &request.method, headers: &request.headers, upgrade: request.upgrade.clone() };
    let tls = request.state.kubelet_tls.clone();
    crate::streams::attach(&request.state.registry, tls, request.namespace(), request.name(), options, client).await
}

/// `POST serviceaccounts/<name>/token` (TokenRequest): answered with a token this server signs, never stored.
async fn token(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    if request.method != Method::POST {
        return Err(request.not_supported());
    }
    let body = decode_object(&request.content_type, &request.body)?;
    let state = request.state;
    let answer = state.service_accounts.token_request(&state.registry, request.namespace(), request.name(), &body);
    Ok(json_response(StatusCode::CREATED, &answer.await?))
}

/// `*/scale`: the object seen as an `autoscaling/v1` Scale; PUT replaces the Scale, PATCH patches the current one.
async fn scale(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    let (registry, resource) = (&request.state.registry, &request.target.resource);
    let (ns, name, info) = (request.namespace(), request.name(), &resource.info);
    let new_scale = match request.method {
        Method::GET => {
            let obj = registry.get(resource, ns, name).await?;
            return Ok(json_response(StatusCode::OK, &scale_of(info, &obj)));
        }
        Method::PUT => NewScale::Replace(decode_object(&request.content_type, &request.body)?),
        Method::PATCH => NewScale::Patch(parse_patch(&request.content_type, &request.body, true)?),
        _ => return Err(request.not_supported()),
    };
    let scale_schema = nest_openapi::kind_schema("autoscaling", "v1", "Scale");
    let change = |current: &Value| match &new_scale {
        NewScale::Replace(scale) => Ok(scale.clone()),
        NewScale::Patch(patch) => apply_patch(patch, current, scale_schema.as_deref()),
    };
    let updated = registry
        .update_with(resource, ns, name, Subresource::Main, request.query.dry_run()?, |current| {
            nest_registry::scale::scaled(info, current, &change(&scale_of(info, current))?)
        })
        .await?;
    Ok(json_response(StatusCode::OK, &scale_of(info, &updated)))
}

/// What a write of a Scale asks for.
enum NewScale {
    /// PUT: this Scale.
    Replace(Value),
    /// PATCH: the current Scale, patched.
    Patch(Patch),
}

#[cfg(test)]
mod tests {
    use nest_registry::Catalog;

    use super::*;

    #[test]
    fn rows_apply_to_the_kinds_that_have_them() {
        let catalog = Catalog::builtin();
        let find = |group, plural| catalog.find(group, "v1", plural).unwrap();
        let (pods, accounts, deployments) =
            (find("", "pods"), find("", "serviceaccounts"), find("apps", "deployments"));
        assert_eq!(server_owned(&pods, "log").map(|row| row.name), Some("log"));
        assert_eq!(server_owned(&accounts, "token").map(|row| row.name), Some("token"));
        assert_eq!(server_owned(&deployments, "scale").map(|row| row.name), Some("scale"));
        assert!(server_owned(&deployments, "log").is_none(), "a deployment has no log");
        assert!(server_owned(&pods, "scale").is_none(), "a pod has no scale");
        assert!(server_owned(&pods, "binding").is_none(), "a pod's binding is its strategy's");
        assert!(long_running("/api/v1/namespaces/a/pods/b/log"));
        assert!(long_running("/api/v1/namespaces/a/pods/b/exec"));
        assert_eq!(server_owned(&pods, "exec").map(|row| row.name), Some("exec"));
        assert_eq!(server_owned(&pods, "portforward").map(|row| row.name), Some("portforward"));
        assert!(long_running("/api/v1/namespaces/a/pods/b/portforward"));
        assert_eq!(server_owned(&pods, "attach").map(|row| row.name), Some("attach"));
        assert!(long_running("/api/v1/namespaces/a/pods/b/attach"));
        assert!(server_owned(&pods, "ephemeralcontainers").is_none(), "the pod's strategy writes them");
        assert!(!long_running("/api/v1/namespaces/a/pods/b/catalog"));
        assert!(!long_running("/apis/apps/v1/namespaces/a/deployments/b/scale"));
    }
}
