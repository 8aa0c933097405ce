//! The review kinds (TokenReview, SubjectAccessReview and the rest): answered, never stored ([`crate::reviews`],
//! [`crate::tokens`]).

use bytes::Bytes;
use hyper::{Method, Response, StatusCode};
use nest_codec::decode_object;
use nest_registry::Result;
use serde_json::json;

use super::body::content_type;
use super::response::json_response;
use super::route::Target;
use super::{Body, State};
use crate::auth::User;

/// The answer to a review `user` creates; `None` when the request is no review.
pub(super) async fn answer(
    state: &State,
    target: &Target,
    user: &User,
    request: &hyper::http::request::Parts,
    body: &Bytes,
) -> Result<Option<Response<Body>>> {
    let info = &target.resource.info;
    if request.method != Method::POST
        || !matches!(info.group.as_str(), "authorization.k8s.io" | "authentication.k8s.io")
    {
        return Ok(None);
    }
    let object = decode_object(&content_type(request), body)?;
    let (registry, mode) = (&state.registry, state.authorization);
    let mut review = if info.kind == "TokenReview" {
        state.service_accounts.review(registry, &object).await?
    } else {
        match crate::reviews::answer(registry, mode, user, &info.kind, target.namespace.as_deref(), &object).await {
            Some(answer) => answer?,
            None => return Ok(None),
        }
    };
    review["apiVersion"] = json!(info.api_version());
    review["kind"] = json!(info.kind);
    Ok(Some(json_response(StatusCode::CREATED, &review)))
}
