//! The audit layer: a record begun when a request arrives, told what the request is about once it is routed, and
//! written with the answer ([`crate::audit`] keeps the policy and the log).

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::Value;

use super::response::full;
use super::route::{Target, asks_to_watch, long_running};
use super::{Body, Peer, State};
use crate::audit::{Auditor, Level, ObjectRef, Record};

/// A record of `request`, when an audit log is kept.
pub(super) fn begin(state: &State, request: &Request<Incoming>) -> Option<Record> {
    state.audit.as_ref()?;
    let peer = request.extensions().get::<Peer>().map(|p| p.0.ip().to_string()).unwrap_or_default();
    let agent = request.headers().get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let uri = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
    Some(Record::new(uri, request.method().as_str(), peer, agent))
}

/// Notes in the audit record what request on which resource this is, and its object.
pub(super) fn note_target(
    audit: &mut Option<Record>,
    target: &Target,
    request: &hyper::http::request::Parts,
    body: &[u8],
) {
    let Some(record) = audit.as_mut() else { return };
    let watch = asks_to_watch(request.uri.query());
    record.verb = crate::authz::verb(&request.method, target.name.is_some(), watch).to_string();
    record.long_running = long_running(request);
    let info = &target.resource.info;
    record.object = Some(ObjectRef {
        resource: info.plural.clone(),
        subresource: target.subresource.clone().unwrap_or_default(),
        namespace: target.namespace.clone().unwrap_or_default(),
        name: target.name.clone().unwrap_or_default(),
        api_group: info.group.clone(),
        api_version: info.version.clone(),
    });
    if !body.is_empty() {
        record.request_object = serde_json::from_slice(body).ok();
    }
}

/// Writes the audit events of a request answered with `response` (`failure`, the Status of an error), reading the
/// answer's object when the policy asks for it.
pub(super) async fn finish(
    auditor: &Auditor,
    record: Record,
    response: Response<Body>,
    failure: Option<Value>,
) -> Response<Body> {
    let status = match failure {
        Some(mut status) => {
            if let Some(status) = status.as_object_mut() {
                status.remove("kind");
                status.remove("apiVersion");
            }
            status
        }
        None => serde_json::json!({"metadata": {}, "code": response.status().as_u16()}),
    };
    let level = auditor.level(&record);
    if level < Level::RequestResponse || record.long_running {
        auditor.write(&record, status, None);
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    auditor.write(&record, status, serde_json::from_slice(&bytes).ok());
    Response::from_parts(parts, full(bytes))
}
