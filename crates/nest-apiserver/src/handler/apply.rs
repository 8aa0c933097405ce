//! Server-side apply: `PATCH` with `application/apply-patch+yaml`, by the `fieldManager`
//! ([`nest_registry::apply`] merges and records the fields).

use hyper::{Response, StatusCode};
use nest_registry::{ApiError, Result, Subresource};
use serde_json::{Value, json};

use super::Body;
use super::response::{json_response, with_warnings};
use super::verbs::ResourceRequest;

/// The media type of an apply patch.
pub(super) const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// Applies the request's configuration to the object (or its status) for its `fieldManager`; creates the object
/// when it does not exist.
pub(super) async fn serve(mut request: ResourceRequest<'_>, subresource: Subresource) -> Result<Response<Body>> {
    let manager = request
        .query
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::invalid_patch_options("fieldManager: Required value: is required for apply patch"))?
        .to_string();
    // Apply records its own managedFields.
    request.target.resource.manager = None;
    let force = request.query.flag("force");
    let applied = configuration(&request)?;
    let (registry, resource) = (&request.state.registry, &request.target.resource);
    let (ns, name) = (request.namespace(), request.name());
    let warnings = request.query.field_validation(resource, &applied)?;
    let dry_run = request.query.dry_run()?;
    let now = nest_core::clock::rfc3339_now();
    let result = registry
        .update_with(resource, ns, name, subresource, dry_run, |current| {
            nest_registry::apply::apply(resource, Some(current), &applied, &manager, force, subresource, &now)
        })
        .await;
    match result {
        Err(error) if error.code == 404 && subresource == Subresource::Main => {
            let object = nest_registry::apply::apply(resource, None, &applied, &manager, force, subresource, &now)?;
            let created = registry.create(resource, ns, object, dry_run).await?;
            Ok(with_warnings(json_response(StatusCode::CREATED, &created), &warnings))
        }
        Err(error) => Err(error),
        Ok(applied) => Ok(with_warnings(json_response(StatusCode::OK, &applied), &warnings)),
    }
}

/// The apply configuration in the body, named and placed as the path says (a name that differs is a 400).
fn configuration(request: &ResourceRequest<'_>) -> Result<Value> {
    let (ns, name) = (request.namespace(), request.name());
    let mut applied: Value = serde_norway::from_slice(&request.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !applied.is_object() {
        return Err(ApiError::bad_request("the apply configuration must be an object"));
    }
    match applied["metadata"]["name"].as_str() {
        None | Some("") => applied["metadata"]["name"] = json!(name),
        Some(given) if given != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({given}) does not match the name on the URL ({name})"
            )));
        }
        Some(_) => {}
    }
    if request.info().namespaced && applied["metadata"]["namespace"].as_str().is_none_or(str::is_empty) {
        applied["metadata"]["namespace"] = json!(ns);
    }
    Ok(applied)
}
