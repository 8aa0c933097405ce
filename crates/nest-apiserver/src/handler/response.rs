//! Answers: whole bodies, JSON documents, `Warning` headers, and the one place an [`ApiError`] becomes a response.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use nest_registry::ApiError;
use serde_json::Value;

use super::Body;

/// A body sent whole.
pub(super) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// `value` as a JSON answer with status `code`.
pub(super) fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    json_bytes_response(code, Bytes::from(value.to_string()))
}

/// Already serialized JSON as an answer with status `code`.
pub(super) fn json_bytes_response(code: StatusCode, json: Bytes) -> Response<Body> {
    let mut response = Response::new(full(json));
    *response.status_mut() = code;
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    response
}

/// A shared serialized document (a cached OpenAPI document) as a JSON answer: the document itself, not a copy of it
/// per answer.
pub(super) fn shared_json_response(doc: Arc<Vec<u8>>) -> Response<Body> {
    json_bytes_response(StatusCode::OK, Bytes::from_owner(ArcBytes(doc)))
}

/// A shared serialized document, as the bytes of an answer.
struct ArcBytes(Arc<Vec<u8>>);

impl AsRef<[u8]> for ArcBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// Adds `Warning: 299 - "…"` headers, as kube-apiserver sends them (kubectl prints them as `Warning: …`).
pub(super) fn with_warnings(mut response: Response<Body>, warnings: &[String]) -> Response<Body> {
    for warning in warnings {
        let text = format!("299 - {:?}", warning.replace(['\r', '\n'], " "));
        if let Ok(value) = text.parse() {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

/// The one place a request error becomes a response: a `Status` with the error's code.
pub fn error_response(error: &ApiError) -> Response<Body> {
    let code = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_bytes_response(code, Bytes::from(error.to_status_json()));
    if let Some(seconds) = error.details.retry_after {
        response.headers_mut().insert("retry-after", HeaderValue::from(seconds));
    }
    response
}
