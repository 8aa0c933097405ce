//! Routing: what resource, namespace, object and subresource a path names, asked of the catalog
//! ([`nest_registry::Catalog::find`]), and what kind of request it is before it is routed.

use nest_registry::{ApiError, Registry, Resource, ResourceInfo, Result};

use super::subresources;

/// What a resource path names.
pub(super) struct Target {
    /// The resource, ready for the registry's verbs.
    pub resource: Resource,
    /// Set only for a namespaced resource, under `namespaces/<ns>/`.
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// Set only with a name: `status`, a subresource of the kind's own, or one the server answers.
    pub subresource: Option<String>,
}

/// Parses the segments after `/api/v1` or `/apis/<group>/<version>`: the path names nothing (404) unless it is
/// `[namespaces/<ns>/]<plural>[/<name>[/<subresource>]]` of a served resource and subresource.
pub(super) fn target(registry: &Registry, group: &str, version: &str, segments: &[&str]) -> Result<Target> {
    let catalog = registry.catalog();
    let find = |plural: &str| catalog.find(group, version, plural);
    let (namespace, rest) = match segments {
        ["namespaces", ns, plural, ..] if find(plural).is_some_and(|r| r.namespaced) => {
            (Some(ns.to_string()), &segments[2..])
        }
        _ => (None, segments),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (plural, None, None),
        [plural, name] => (plural, Some(name.to_string()), None),
        [plural, name, sub] => (plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return Err(ApiError::no_route()),
    };
    let info = find(plural).ok_or_else(ApiError::no_route)?;
    if info.namespaced && namespace.is_none() && name.is_some() {
        // /api/v1/pods/<name> names nothing: namespaced objects live under a namespace.
        return Err(ApiError::no_route());
    }
    if subresource.as_deref().is_some_and(|sub| !has_subresource(&info, sub)) {
        return Err(ApiError::no_route());
    }
    // One resource per request, made once its path is known to name one.
    let resource = registry.resource(group, version, plural).ok_or_else(ApiError::no_route)?;
    Ok(Target { resource, namespace, name, subresource })
}

/// Whether objects of `info` have the subresource `sub`: `status`, one of the kind's own, or one the server answers.
fn has_subresource(info: &ResourceInfo, sub: &str) -> bool {
    (sub == "status" && info.status)
        || subresources::server_owned(info, sub).is_some()
        || info.subresources.iter().any(|own| own.name == sub)
}

/// Whether a query asks for a watch.
pub(super) fn asks_to_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// Whether a request lasts as long as the client wants (a watch, a log stream): kube-apiserver's long-running
/// requests, which in-flight limits leave out. Decided from the path before it is routed, as upstream's
/// `BasicLongRunningRequestCheck` does.
pub(super) fn long_running(request: &hyper::http::request::Parts) -> bool {
    let path = request.uri.path().trim_end_matches('/');
    asks_to_watch(request.uri.query()) || subresources::long_running(path)
}
