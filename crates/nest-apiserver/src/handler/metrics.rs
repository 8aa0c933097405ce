//! `apiserver_request_total`: what each answer is counted under, and `/metrics` itself ([`crate::limits::Counters`]
//! keeps the counts).

use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response};
use nest_registry::Registry;

use super::response::full;
use super::route::asks_to_watch;
use super::{Body, State};

/// What an answer is counted under.
pub(super) struct Counted {
    /// kube-apiserver's name of the verb: `GET`, `LIST`, `WATCH`, `DELETECOLLECTION`…
    pub verb: &'static str,
    /// The plural of a resource the server serves; empty for any other path, so that the number of series stays
    /// bounded whatever paths clients ask for.
    pub resource: String,
}

/// The verb and resource `request` is counted under, named as kube-apiserver names them (`LIST` and `WATCH` for
/// collections, `DELETECOLLECTION`).
pub(super) fn counted_as(registry: &Registry, request: &Request<Incoming>) -> Counted {
    let segments: Vec<&str> = request.uri().path().split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => ("", "", &[][..]),
    };
    let catalog = registry.catalog();
    let known = |plural: &str| catalog.find(group, version, plural);
    let (plural, named) = match rest {
        ["namespaces", _, plural, rest @ ..] if known(plural).is_some_and(|r| r.namespaced) => {
            (*plural, !rest.is_empty())
        }
        [plural, rest @ ..] => (*plural, !rest.is_empty()),
        [] => ("", false),
    };
    let resource = if !plural.is_empty() && known(plural).is_some() { plural.to_string() } else { String::new() };
    let verb = match *request.method() {
        Method::GET if named || resource.is_empty() => "GET",
        Method::GET if asks_to_watch(request.uri().query()) => "WATCH",
        Method::GET => "LIST",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE if named || resource.is_empty() => "DELETE",
        Method::DELETE => "DELETECOLLECTION",
        Method::HEAD => "HEAD",
        _ => "OTHER",
    };
    Counted { verb, resource }
}

/// `/metrics`, in Prometheus' text format.
pub(super) fn render(state: &State) -> Response<Body> {
    let mut response = Response::new(full(state.counters.render()));
    response.headers_mut().insert("content-type", HeaderValue::from_static("text/plain; version=0.0.4"));
    response
}
