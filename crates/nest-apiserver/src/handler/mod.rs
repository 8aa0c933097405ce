//! From an HTTP request to a registry call and back, as a stack of small layers that each do one thing and pass the
//! request on, in the spirit of kube-apiserver's filter chain (`DefaultBuildHandlerChain`,
//! `k8s.io/apiserver/pkg/server/config.go`, 1.33). [`handle`] and `serve` below assemble them, outermost first; each
//! layer is a file of this folder:
//!
//! 1. `audit.rs` and `metrics.rs` note the request and, once answered, its answer;
//! 2. `authn.rs` says who asks (a client certificate, a bearer token) and whom they act as (impersonation);
//! 3. the in-flight limit of each user ([`crate::limits`]), then the refusal of anonymous requests;
//! 4. `body.rs` reads the body whole, within `--max-request-bytes`;
//! 5. `paths.rs` (and `health.rs`) answers what is not a resource: health, version, metrics, discovery, OpenAPI,
//!    OIDC;
//! 6. `route.rs` names the resource a path means, `authorize.rs` asks RBAC and the certificate plugins, and
//!    `reviews.rs` answers the review kinds, which are never stored;
//! 7. `verbs.rs` serves the REST verbs, reading the query (`query.rs`) and negotiating the answer's form
//!    (`negotiate.rs`), with `apply.rs` for server-side apply, `watch.rs` for watch framing, and `subresources.rs`
//!    for the subresources the server answers itself (`pods/log`, `serviceaccounts/token`, `*/scale`), one row each.
//!
//! A layer's error is an [`ApiError`]; it becomes a response in one place, [`error_response`] (`response.rs`).

mod apply;
mod audit;
mod authn;
mod authorize;
mod body;
mod health;
mod metrics;
mod negotiate;
mod paths;
mod query;
mod response;
mod reviews;
mod route;
mod subresources;
mod verbs;
mod watch;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Request, Response};
use nest_registry::admission::UserInfo;
use nest_registry::{ApiError, Registry, Result};

use crate::auth::{Tokens, User};
pub use response::error_response;
use response::with_warnings;

/// The body of every answer: whole JSON documents, watch streams and log streams alike.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// What every request handler shares.
pub struct State {
    pub registry: Registry,
    pub tokens: Tokens,
    /// Issues and checks ServiceAccount tokens ([`crate::tokens`]).
    pub service_accounts: crate::tokens::Issuer,
    /// `host:port` clients reach this server at.
    pub address: String,
    /// How this server calls nodes' kubelet APIs.
    pub kubelet_tls: Arc<rustls::ClientConfig>,
    /// The Kubernetes version `/version` reports, when not nest's default.
    pub kubernetes_version: Option<String>,
    /// What one client may take ([`crate::limits`]), and what the limits did.
    pub limits: crate::limits::Limits,
    /// How requests are authorized ([`crate::authz`]).
    pub authorization: crate::authz::Mode,
    pub counters: Arc<crate::limits::Counters>,
    /// The audit log, when one is kept ([`crate::audit`]).
    pub audit: Option<Arc<crate::audit::Auditor>>,
}

/// The address a request came from (a request extension the listener sets).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub std::net::SocketAddr);

/// Serves one request from `cert_user` (`None` when the client presented no certificate): the outermost layers,
/// which see every answer, errors included.
pub async fn handle(state: Arc<State>, cert_user: Option<User>, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    let counted = metrics::counted_as(&state.registry, &request);
    let mut audit = audit::begin(&state, &request);
    let (response, failure) = match serve(&state, cert_user, request, &mut audit).await {
        Ok(response) => (response, None),
        Err(error) => (error_response(&error), Some(error.to_status())),
    };
    state.counters.answered(counted.verb, &counted.resource, response.status().as_u16());
    tracing::debug!(%method, %path, status = response.status().as_u16(), "request");
    match (&state.audit, audit) {
        (Some(auditor), Some(record)) => audit::finish(auditor, record, response, failure).await,
        _ => response,
    }
}

/// The layers between knowing who asks and knowing what is asked for.
async fn serve(
    state: &Arc<State>,
    cert_user: Option<User>,
    request: Request<Incoming>,
    audit: &mut Option<crate::audit::Record>,
) -> Result<Response<Body>> {
    let (request, body) = request.into_parts();
    let path = request.uri.path().trim_end_matches('/');
    let path = if path.is_empty() { "/".to_string() } else { path.to_string() };
    let open = paths::is_open(&path);
    let user = authn::authenticate(state, cert_user, &request.headers, audit).await?;
    // One user's flood does not starve another: each has its own share of requests in flight.
    let who = user.as_ref().map_or("system:anonymous", |u| u.name.as_str());
    let _slot = match route::long_running(&request) {
        true => None,
        false => match state.counters.begin(who, state.limits.max_inflight_per_user) {
            Some(slot) => Some(slot),
            None => return Ok(error_response(&ApiError::too_many_requests())),
        },
    };
    if !open && user.is_none() {
        return Ok(unauthenticated(&request));
    }
    // Otherwise the whole body is read first, whatever the answer will be: a body left unread makes the HTTP/1.1
    // connection unusable for the client's next request.
    let body = body::read(body, state.limits.max_request_bytes).await?;
    // Past here a request that is not open has a user (refused above otherwise).
    let user = match user {
        Some(user) if !open => user,
        _ => return Ok(paths::open(state, &path, request.uri.query().unwrap_or_default()).await),
    };
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        ["api", "v1", rest @ ..] if !rest.is_empty() => {
            resource(state, Path { group: "", version: "v1", rest }, &user, &request, body, audit).await
        }
        ["apis", group, version, rest @ ..] if !rest.is_empty() => {
            resource(state, Path { group, version, rest }, &user, &request, body, audit).await
        }
        _ => {
            // Paths that are not resources (discovery, OpenAPI, metrics) are authorized as paths.
            if !matches!(segments.as_slice(), ["api", _, _, ..] | ["apis", _, _, _, ..]) {
                authorize::path(state, &user, &request.method, &path).await?;
            }
            paths::non_resource(state, &path, &segments, &request)
        }
    }
}

/// A request from a client that proved no identity, to a path that is not open. Who is asking is known before the
/// body is read: such a client gets no say over this server's memory, whatever it sends. Its body stays unread, so
/// the connection closes after the answer (the unread bytes would be taken for its next request).
fn unauthenticated(request: &hyper::http::request::Parts) -> Response<Body> {
    let mut response = error_response(&ApiError::unauthorized());
    // (HTTP/2 has no such header: the stream is reset after the answer, the connection stays.)
    if request.version < hyper::Version::HTTP_2 {
        response.headers_mut().insert("connection", HeaderValue::from_static("close"));
    }
    response
}

/// A resource path, split after `/api/v1` or `/apis/<group>/<version>`.
struct Path<'a> {
    group: &'a str,
    version: &'a str,
    /// The segments after the version: `namespaces/<ns>/<plural>/<name>/<subresource>` or shorter.
    rest: &'a [&'a str],
}

/// A request to a resource from `user`: routed, authorized, answered, with what admission warned about as
/// `Warning` headers.
async fn resource(
    state: &Arc<State>,
    path: Path<'_>,
    user: &User,
    request: &hyper::http::request::Parts,
    body: Bytes,
    audit: &mut Option<crate::audit::Record>,
) -> Result<Response<Body>> {
    let mut target = route::target(&state.registry, path.group, path.version, path.rest)?;
    audit::note_target(audit, &target, request, &body);
    target.resource.user = UserInfo { name: user.name.clone(), groups: user.groups.clone() };
    authorize::resource(state, &target, user, request, &body).await?;
    if let Some(review) = reviews::answer(state, &target, user, request, &body).await? {
        return Ok(review);
    }
    let warnings = target.resource.warnings.clone();
    let response = verbs::serve(state, target, request, body).await?;
    Ok(with_warnings(response, &warnings.take()))
}
