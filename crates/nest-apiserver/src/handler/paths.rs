//! The paths that are not resources: health and version (open to anyone), and, for a user the path authorization
//! let through, `/metrics`, discovery, the OpenAPI documents and the ServiceAccount issuer's OIDC documents.

use std::sync::Arc;

use hyper::header::HeaderValue;
use hyper::{Method, Response, StatusCode};
use nest_registry::{ApiError, Result};
use serde_json::Value;

use super::response::{json_response, shared_json_response};
use super::{Body, State, health, metrics};
use crate::discovery;

/// Whether anyone may ask for `path` (no trailing `/`), as in kube-apiserver's default RBAC: health and version.
pub(super) fn is_open(path: &str) -> bool {
    matches!(path, "/version" | "/healthz" | "/livez" | "/readyz")
        || ["/healthz/", "/livez/", "/readyz/"].iter().any(|prefix| path.starts_with(prefix))
}

/// Answers an open path.
pub(super) async fn open(state: &State, path: &str, query: &str) -> Response<Body> {
    if path == "/version" {
        return json_response(StatusCode::OK, &discovery::version(state.kubernetes_version.as_deref()));
    }
    health::health(state, path, query).await
}

/// Answers a path that is neither open nor a resource; 404 for one nest does not serve.
pub(super) fn non_resource(
    state: &State,
    path: &str,
    segments: &[&str],
    request: &hyper::http::request::Parts,
) -> Result<Response<Body>> {
    let catalog = state.registry.catalog();
    let method = &request.method;
    let document = |doc: Option<Value>| get_document(method, path, doc);
    match segments {
        ["metrics"] if method == Method::GET => Ok(metrics::render(state)),
        ["api"] => document(Some(discovery::api_versions(&state.address))),
        ["api", "v1"] => document(discovery::api_resource_list(&catalog, "", "v1")),
        ["apis"] => document(Some(discovery::api_group_list(&catalog))),
        ["apis", group] => document(discovery::api_group(&catalog, group)),
        ["apis", group, version] => document(discovery::api_resource_list(&catalog, group, version)),
        ["openapi", "v3"] => document(Some(crate::openapi::index(&catalog))),
        ["openapi", "v2"] => openapi_v2(method, &catalog, request),
        [".well-known", "openid-configuration"] => document(Some(state.service_accounts.discovery(&state.address))),
        ["openid", "v1", "jwks"] => {
            let mut response = document(Some(state.service_accounts.jwks()))?;
            response.headers_mut().insert("content-type", HeaderValue::from_static("application/jwk-set+json"));
            Ok(response)
        }
        ["openapi", "v3", "api", version] | ["openapi", "v3", "apis", "", version] => {
            openapi_document(method, crate::openapi::document(&catalog, "", version))
        }
        ["openapi", "v3", "apis", group, version] => {
            openapi_document(method, crate::openapi::document(&catalog, group, version))
        }
        _ => Err(ApiError::no_route()),
    }
}

/// A document only GET reads (discovery, OIDC); 404 when there is none.
fn get_document(method: &Method, path: &str, doc: Option<Value>) -> Result<Response<Body>> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed(format!("the server does not allow this method on {path}")));
    }
    doc.map(|d| json_response(StatusCode::OK, &d)).ok_or_else(ApiError::no_route)
}

/// `/openapi/v2`, in JSON or in the protobuf client-go asks for ([`crate::openapi_v2`]).
fn openapi_v2(
    method: &Method,
    catalog: &nest_registry::Catalog,
    request: &hyper::http::request::Parts,
) -> Result<Response<Body>> {
    let accept = request.headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let protobuf = accept.contains(crate::openapi_v2::PROTOBUF);
    let mut response = openapi_document(method, Some(crate::openapi_v2::document(catalog, protobuf)))?;
    if protobuf {
        // As kube-openapi's handler answers: Go's media-type parser refuses the `@` of the asked type.
        response.headers_mut().insert("content-type", HeaderValue::from_static("application/octet-stream"));
    }
    Ok(response)
}

/// An OpenAPI document, already serialized.
fn openapi_document(method: &Method, doc: Option<Arc<Vec<u8>>>) -> Result<Response<Body>> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed("the server does not allow this method on OpenAPI documents"));
    }
    let doc = doc.ok_or_else(ApiError::no_route)?;
    Ok(shared_json_response(doc))
}
