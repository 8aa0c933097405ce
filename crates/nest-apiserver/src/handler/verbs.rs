//! The REST verbs on a routed, authorized resource request: list, watch, create and deletecollection on a
//! collection; get, update, patch and delete on an object or its `status`; and writes of a kind's own subresources
//! (`pods/binding`, `namespaces/finalize`), which its strategy handles. Server-owned subresources are rows of
//! [`super::subresources`]; apply is [`super::apply`]'s, watch framing [`super::watch`]'s.

use bytes::Bytes;
use hyper::{Method, Response, StatusCode};
use nest_codec::{Patch, apply_patch, decode_object, parse_patch};
use nest_registry::{ApiError, ResourceInfo, Result, Subresource};
use serde_json::{Value, json};

use super::apply::APPLY_PATCH;
use super::body::content_type;
use super::negotiate::{Representation, TableOf};
use super::query::Query;
use super::response::{json_bytes_response, json_response, with_warnings};
use super::route::Target;
use super::{Body, State, apply, subresources, watch};

/// A request to a resource, read: what every verb needs.
pub(super) struct ResourceRequest<'a> {
    pub state: &'a State,
    pub target: Target,
    pub method: Method,
    pub query: Query,
    /// The body's media type, without parameters.
    pub content_type: String,
    pub body: Bytes,
    /// The form the answer takes.
    pub form: Representation,
    /// What a Table answer is made of.
    pub table: TableOf,
    /// The request's headers (a connect request's upgrade headers are passed on to the node).
    pub headers: hyper::HeaderMap,
    /// The client's connection, when it may be taken over after a `101` (HTTP/1.1).
    pub upgrade: Option<hyper::upgrade::OnUpgrade>,
}

impl<'a> ResourceRequest<'a> {
    /// Reads the query, the field manager of a write and the form of the answer; a bad one is a 4xx.
    fn read(
        state: &'a State,
        mut target: Target,
        request: &hyper::http::request::Parts,
        body: Bytes,
    ) -> Result<ResourceRequest<'a>> {
        let query = Query::parse(request.uri.query())?;
        let method = request.method.clone();
        if matches!(method, Method::POST | Method::PUT | Method::PATCH) {
            let agent = request.headers.get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or_default();
            target.resource.manager = Some(query.field_manager(agent)?);
        }
        let form = Representation::negotiate(request.headers.get("accept").and_then(|v| v.to_str().ok()))?;
        let include = crate::table::Include::parse(query.get("includeObject"))?;
        let table = TableOf { resource: target.resource.info.clone(), include };
        let content_type = content_type(request);
        let (headers, upgrade) = (request.headers.clone(), request.extensions.get().cloned());
        Ok(ResourceRequest { state, target, method, query, content_type, body, form, table, headers, upgrade })
    }

    /// The resource asked about.
    pub fn info(&self) -> &ResourceInfo {
        &self.target.resource.info
    }

    /// The namespace of a namespaced resource's object; empty for a cluster-scoped one.
    pub fn namespace(&self) -> &str {
        if self.info().namespaced { self.target.namespace.as_deref().unwrap_or_default() } else { "" }
    }

    /// The object's name (empty for a collection).
    pub fn name(&self) -> &str {
        self.target.name.as_deref().unwrap_or_default()
    }

    /// 405 unless the resource serves `verb`.
    fn verb_allowed(&self, verb: &str) -> Result<()> {
        let info = self.info();
        if info.verbs.iter().any(|v| v == verb) {
            Ok(())
        } else {
            Err(ApiError::method_not_allowed(format!("{verb} is not supported on {}", info.qualified())))
        }
    }

    /// The 405 for a method nothing here takes.
    pub fn not_supported(&self) -> ApiError {
        ApiError::method_not_allowed(format!("{} is not supported here", self.method))
    }
}

/// Serves a resource request with the verb its method, name and subresource make.
pub(super) async fn serve(
    state: &State,
    target: Target,
    request: &hyper::http::request::Parts,
    body: Bytes,
) -> Result<Response<Body>> {
    let request = ResourceRequest::read(state, target, request, body)?;
    let info = request.info();
    let subresource = request.target.subresource.as_deref();
    if let Some(row) = subresource.and_then(|sub| subresources::server_owned(info, sub)) {
        return (row.serve)(request).await;
    }
    let named = request.target.name.is_some();
    let main_or_status = match subresource {
        None => Some(Subresource::Main),
        Some("status") => Some(Subresource::Status),
        Some(_) => None,
    };
    match (&request.method, named, subresource, main_or_status) {
        (&Method::GET, false, None, _) => list_or_watch(request).await,
        (&Method::POST, false, None, _) => create(request).await,
        (&Method::DELETE, false, None, _) => delete_collection(request).await,
        (&Method::GET, true, sub, _) if sub.is_none_or(|sub| read_whole(info, sub)) => get(request).await,
        (&Method::PUT, true, _, Some(sub)) => update(request, sub).await,
        (&Method::PATCH, true, _, Some(sub)) => {
            request.verb_allowed("patch")?;
            if request.content_type == APPLY_PATCH {
                apply::serve(request, sub).await
            } else {
                patch(request, sub).await
            }
        }
        (&Method::DELETE, true, None, _) => delete(request).await,
        (&Method::POST | &Method::PUT, true, Some(sub), _) if writes_own(info, sub, &request.method) => {
            write_own(request).await
        }
        (&Method::PATCH, true, Some(sub), _) if writes_own(info, sub, &request.method) => {
            request.verb_allowed("patch")?;
            patch_own(request).await
        }
        _ => Err(request.not_supported()),
    }
}

/// Whether a GET of `sub` reads the object: through `/status`, or a kind's own view of it that is read and
/// written whole (a CSR's `/approval`).
fn read_whole(info: &ResourceInfo, sub: &str) -> bool {
    sub == "status"
        || info.subresources.iter().any(|own| {
            own.name == sub && own.kind == info.kind && own.verbs.contains(&"get") && own.verbs.contains(&"update")
        })
}

/// Whether `method` writes the kind's own subresource `sub` (`pods/binding` is created, `namespaces/finalize`
/// updated, `pods/ephemeralcontainers` updated or patched).
fn writes_own(info: &ResourceInfo, sub: &str, method: &Method) -> bool {
    let verb = match *method {
        Method::POST => "create",
        Method::PATCH => "patch",
        _ => "update",
    };
    info.subresources.iter().any(|own| own.name == sub && own.verbs.contains(&verb))
}

// === collections ===

async fn list_or_watch(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    let options = request.query.list_options()?;
    if request.query.flag("watch") {
        request.verb_allowed("watch")?;
        return watch::serve(request, options).await;
    }
    request.verb_allowed("list")?;
    let (registry, resource) = (&request.state.registry, &request.target.resource);
    let scope = request.target.namespace.as_deref();
    if request.form == Representation::Full {
        let list = registry.list_json(resource, scope, &options).await?;
        return Ok(json_bytes_response(StatusCode::OK, list));
    }
    let list = registry.list(resource, scope, &options).await?;
    Ok(json_response(StatusCode::OK, &request.form.list(list, &request.table)))
}

async fn create(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    request.verb_allowed("create")?;
    let body = decode_object(&request.content_type, &request.body)?;
    let resource = &request.target.resource;
    let warnings = request.query.field_validation(resource, &body)?;
    let created = request.state.registry.create(resource, request.namespace(), body, request.query.dry_run()?).await?;
    Ok(with_warnings(json_response(StatusCode::CREATED, &created), &warnings))
}

/// Deletes every object the list options select, one by one; one already gone is no error.
async fn delete_collection(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    request.verb_allowed("deletecollection")?;
    let delete = request.query.delete_options(&request.content_type, &request.body)?;
    let (registry, resource) = (&request.state.registry, &request.target.resource);
    let list = registry.list(resource, request.target.namespace.as_deref(), &request.query.list_options()?).await?;
    let mut deleted = Vec::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let item_ns = nest_registry::meta::namespace(item).to_string();
        let name = nest_registry::meta::name(item).to_string();
        match registry.delete(resource, &item_ns, &name, &delete).await {
            Ok(obj) => deleted.push(obj),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let mut answer = list;
    answer["items"] = json!(deleted);
    Ok(json_response(StatusCode::OK, &answer))
}

// === one object ===

async fn get(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    request.verb_allowed("get")?;
    let obj = request.state.registry.get(&request.target.resource, request.namespace(), request.name()).await?;
    Ok(json_response(StatusCode::OK, &request.form.object(obj, &request.table)))
}

async fn update(request: ResourceRequest<'_>, subresource: Subresource) -> Result<Response<Body>> {
    request.verb_allowed("update")?;
    let body = decode_object(&request.content_type, &request.body)?;
    let resource = &request.target.resource;
    let warnings = request.query.field_validation(resource, &body)?;
    let (ns, name, dry_run) = (request.namespace(), request.name(), request.query.dry_run()?);
    let updated = request.state.registry.update(resource, ns, name, body, subresource, dry_run).await?;
    Ok(with_warnings(json_response(StatusCode::OK, &updated), &warnings))
}

/// A JSON, merge or strategic merge patch (server-side apply is [`apply::serve`]).
async fn patch(request: ResourceRequest<'_>, subresource: Subresource) -> Result<Response<Body>> {
    if request.query.get("force").is_some() {
        return Err(ApiError::invalid_patch_options("force: Forbidden: may not be specified for non-apply patch"));
    }
    let resource = &request.target.resource;
    let patch = parse_patch(&request.content_type, &request.body, resource.schema.is_some())?;
    // A merge patch has the object's shape, so its unknown fields are the result's.
    let warnings = match &patch {
        Patch::Merge(doc) => request.query.field_validation(resource, doc)?,
        Patch::Strategic(doc) => {
            request.query.field_validation(resource, &nest_registry::strategic::without_directives(doc))?
        }
        Patch::Json(_) => Vec::new(),
    };
    let (ns, name, dry_run) = (request.namespace(), request.name(), request.query.dry_run()?);
    let patched = request
        .state
        .registry
        .update_with(resource, ns, name, subresource, dry_run, |current| {
            apply_patch(&patch, current, resource.schema.as_deref())
        })
        .await?;
    Ok(with_warnings(json_response(StatusCode::OK, &patched), &warnings))
}

async fn delete(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    request.verb_allowed("delete")?;
    let options = request.query.delete_options(&request.content_type, &request.body)?;
    let obj = request.state.registry.delete(&request.target.resource, request.namespace(), request.name(), &options);
    let obj = obj.await?;
    // 202 when the object lingers (finalizers), 200 when it is gone.
    let code = if nest_registry::meta::is_deleting(&obj) { StatusCode::ACCEPTED } else { StatusCode::OK };
    Ok(json_response(code, &obj))
}

/// A patch of the kind's own subresource whose view is the object itself (`pods/ephemeralcontainers`): the patch
/// applies to the current object, and the strategy takes from the result what the subresource may change.
async fn patch_own(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    if request.content_type == APPLY_PATCH {
        return Err(ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json",
        ));
    }
    let resource = &request.target.resource;
    let patch = parse_patch(&request.content_type, &request.body, resource.schema.is_some())?;
    let sub = request.target.subresource.as_deref().unwrap_or_default();
    let (ns, name, dry_run) = (request.namespace(), request.name(), request.query.dry_run()?);
    let schema = resource.schema.as_deref();
    let registry = &request.state.registry;
    let patched =
        registry.patch_subresource(resource, ns, name, sub, dry_run, |current| apply_patch(&patch, current, schema));
    Ok(json_response(StatusCode::OK, &patched.await?))
}

/// A write of the kind's own subresource, which its strategy handles: the object for an update, a `Status` for a
/// create.
async fn write_own(request: ResourceRequest<'_>) -> Result<Response<Body>> {
    let body = decode_object(&request.content_type, &request.body)?;
    let (resource, sub) = (&request.target.resource, request.target.subresource.as_deref().unwrap_or_default());
    let (ns, name, dry_run) = (request.namespace(), request.name(), request.query.dry_run()?);
    let written = request.state.registry.update_subresource(resource, ns, name, sub, body, dry_run).await?;
    if request.method == Method::PUT {
        return Ok(json_response(StatusCode::OK, &written));
    }
    let created: Value =
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    Ok(json_response(StatusCode::CREATED, &created))
}
