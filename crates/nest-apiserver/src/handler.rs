//! From an HTTP request to a registry call and back: routing, query and body decoding, and the one place an
//! [`ApiError`] becomes an HTTP response.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use nest_registry::admission::UserInfo;
use nest_registry::scale::scale_of;
use nest_registry::{ApiError, DeleteOptions, ListOptions, Registry, Resource, Result, Subresource};
use serde_json::{Value, json};

use crate::auth::{Tokens, User};
use crate::body::{Patch, apply_patch, decode_object, parse_json, parse_patch};
use crate::discovery;

/// How long a watch lasts when the client does not say.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);
/// The longest a watch may ask to last (`timeoutSeconds`): twice the default, the top of the range kube-apiserver
/// picks its own timeouts from (`--min-request-timeout` 1800 s, times one to two). Clients start a new watch when
/// one ends; no timeout a client can send overflows a clock.
const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long a watch asking for `timeoutSeconds` lasts: 0, like no value, means the server's default (as
/// kube-apiserver's watch handler reads it); more than [`MAX_WATCH_TIMEOUT`] is that.
fn watch_timeout(asked: Option<&str>) -> Result<Duration> {
    match asked.filter(|t| !t.is_empty() && *t != "0") {
        Some(t) => {
            let seconds: u64 = t.parse().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?;
            Ok(Duration::from_secs(seconds).min(MAX_WATCH_TIMEOUT))
        }
        None => Ok(DEFAULT_WATCH_TIMEOUT),
    }
}

/// How often a quiet watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(30);

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

/// Whether a request lasts as long as the client wants (a watch, a log stream): kube-apiserver's long-running
/// requests, which in-flight limits leave out.
fn long_running(request: &hyper::http::request::Parts) -> bool {
    asks_to_watch(request.uri.query()) || request.uri.path().trim_end_matches('/').ends_with("/log")
}

/// Whether a query asks for a watch.
fn asks_to_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    json_bytes_response(code, Bytes::from(value.to_string()))
}

fn json_bytes_response(code: StatusCode, json: Bytes) -> Response<Body> {
    let mut response = Response::new(full(json));
    *response.status_mut() = code;
    response.headers_mut().insert("content-type", "application/json".parse().expect("a header value"));
    response
}

/// Adds `Warning: 299 - "…"` headers, as kube-apiserver sends them (kubectl prints them as `Warning: …`).
fn with_warnings(mut response: Response<Body>, warnings: &[String]) -> Response<Body> {
    for warning in warnings {
        let text = format!("299 - {:?}", warning.replace(['\r', '\n'], " "));
        if let Ok(value) = text.parse() {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

/// `/livez`, `/readyz` and `/healthz`, and their single checks (`/readyz/etcd`), as kube-apiserver answers them: `ok`,
/// or with `?verbose` a line per check; a failing check makes a 500 naming it (the reason withheld, as upstream
/// does for anonymous askers). `livez` does not check storage: a server whose etcd is away is alive, and restarting
/// it would not bring etcd back.
async fn health(state: &State, path: &str, query: &str) -> Response<Body> {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let endpoint = parts.next().unwrap_or_default();
    let only = parts.next().filter(|c| !c.is_empty());
    let mut checks = vec![("ping", true)];
    if endpoint != "livez" {
        let storage = state.registry.check_storage().await;
        if let Err(error) = &storage {
            tracing::warn!(%error, "the etcd health check failed");
        }
        checks.push(("etcd", storage.is_ok()));
    }
    let checks: Vec<(&str, bool)> = match only {
        Some(name) => match checks.iter().find(|(check, _)| *check == name) {
            Some(found) => vec![*found],
            None => return error_response(&ApiError::no_route()),
        },
        None => checks,
    };
    let passed = checks.iter().all(|(_, ok)| *ok);
    let verbose = query.split('&').any(|pair| pair == "verbose" || pair.starts_with("verbose="));
    let mut text = String::new();
    if verbose || !passed {
        for (name, ok) in &checks {
            text.push_str(&if *ok {
                format!("[+]{name} ok\n")
            } else {
                format!("[-]{name} failed: reason withheld\n")
            });
        }
        text.push_str(&format!("{endpoint} check {}\n", if passed { "passed" } else { "failed" }));
    } else {
        text.push_str("ok");
    }
    let mut response = Response::new(full(text));
    if !passed {
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    }
    response.headers_mut().insert("content-type", "text/plain; charset=utf-8".parse().expect("a header value"));
    response.headers_mut().insert("x-content-type-options", "nosniff".parse().expect("a header value"));
    response
}

/// The one place a request error becomes a response: a `Status` with the error's code.
pub fn error_response(error: &ApiError) -> Response<Body> {
    let code = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_bytes_response(code, Bytes::from(error.to_status_json()));
    if let Some(seconds) = error.details.retry_after {
        response.headers_mut().insert("retry-after", seconds.to_string().parse().expect("a header value"));
    }
    response
}

/// Serves one request from `user` (`None` when the client proved no identity).
pub async fn handle(state: Arc<State>, cert_user: Option<User>, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    let (verb, resource) = counted_as(&state, &request);
    let mut audit = state.audit.as_ref().map(|_| {
        let peer = request.extensions().get::<Peer>().map(|p| p.0.ip().to_string()).unwrap_or_default();
        let agent = request.headers().get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let uri = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
        crate::audit::Record::new(uri, method.as_str(), peer, agent)
    });
    let (response, failure) = match serve(&state, cert_user, request, &mut audit).await {
        Ok(response) => (response, None),
        Err(error) => (error_response(&error), Some(error.to_status())),
    };
    state.counters.answered(verb, &resource, response.status().as_u16());
    tracing::debug!(%method, %path, status = response.status().as_u16(), "request");
    match (&state.audit, audit) {
        (Some(auditor), Some(record)) => audited(auditor, record, response, failure).await,
        _ => response,
    }
}

/// Writes the audit events of a request answered with `response` (`failure`, the Status of an error), reading the
/// answer's object when the policy asks for it.
async fn audited(
    auditor: &crate::audit::Auditor,
    record: crate::audit::Record,
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
    if level < crate::audit::Level::RequestResponse || record.long_running {
        auditor.write(&record, status, None);
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    auditor.write(&record, status, serde_json::from_slice(&bytes).ok());
    Response::from_parts(parts, full(bytes))
}

/// Notes in the audit record what request on which resource this is, and its object.
fn note_target(
    audit: &mut Option<crate::audit::Record>,
    target: &Target,
    request: &hyper::http::request::Parts,
    body: &[u8],
) {
    let Some(record) = audit.as_mut() else { return };
    let watch = asks_to_watch(request.uri.query());
    record.verb = crate::authz::verb(&request.method, target.name.is_some(), watch).to_string();
    record.long_running = long_running(request);
    let info = &target.resource.info;
    record.object = Some(crate::audit::ObjectRef {
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

/// The verb and resource a request is counted under in `apiserver_request_total`, named as kube-apiserver names
/// them (`LIST` and `WATCH` for collections, `DELETECOLLECTION`); the resource is empty unless the server serves it.
fn counted_as(state: &State, request: &Request<Incoming>) -> (&'static str, String) {
    let segments: Vec<&str> = request.uri().path().split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => ("", "", &[][..]),
    };
    let known = |plural: &str| state.registry.resource(group, version, plural);
    // (the plural, whether one object is named)
    let (plural, named) = match rest {
        ["namespaces", _, plural, rest @ ..] if known(plural).is_some_and(|r| r.info.namespaced) => {
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
    (verb, resource)
}

/// The form an answer takes, negotiated from the `Accept` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Representation {
    /// The object or list itself.
    Full,
    /// Only metadata: `meta.k8s.io` PartialObjectMetadata(List), as the metadata client and garbage collectors ask.
    Metadata(&'static str),
    /// A `meta.k8s.io` Table, as `kubectl get` asks ([`crate::table`]).
    Table(&'static str),
}

impl Representation {
    /// Picks the first acceptable entry of `accept`; 406 when none is.
    fn negotiate(accept: Option<&str>) -> Result<Representation> {
        let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else { return Ok(Representation::Full) };
        for entry in accept.split(',') {
            let mut parts = entry.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            if !matches!(media.as_str(), "application/json" | "application/*" | "*/*") {
                continue;
            }
            let params: Vec<(String, String)> = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect();
            let param = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
            match (param("as"), param("g"), param("v")) {
                (None, _, _) => return Ok(Representation::Full),
                (Some("PartialObjectMetadata" | "PartialObjectMetadataList"), Some("meta.k8s.io"), Some("v1")) => {
                    return Ok(Representation::Metadata("meta.k8s.io/v1"));
                }
                (Some("PartialObjectMetadata" | "PartialObjectMetadataList"), Some("meta.k8s.io"), Some("v1beta1")) => {
                    return Ok(Representation::Metadata("meta.k8s.io/v1beta1"));
                }
                (Some("Table"), Some("meta.k8s.io"), Some("v1")) => return Ok(Representation::Table("meta.k8s.io/v1")),
                (Some("Table"), Some("meta.k8s.io"), Some("v1beta1")) => {
                    return Ok(Representation::Table("meta.k8s.io/v1beta1"));
                }
                // Anything else we cannot produce: try the next entry.
                _ => continue,
            }
        }
        Err(ApiError::not_acceptable(format!(
            "only the following media types are accepted: application/json (asked for {accept})"
        )))
    }

    fn object(self, obj: Value, table: &TableOf) -> Value {
        match self {
            Representation::Full => obj,
            Representation::Metadata(api_version) => {
                json!({"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": obj["metadata"]})
            }
            Representation::Table(api_version) => crate::table::object(&table.0, &obj, table.1, api_version),
        }
    }

    fn list(self, mut list: Value, table: &TableOf) -> Value {
        match self {
            Representation::Full => list,
            Representation::Metadata(api_version) => {
                let items: Vec<Value> = list["items"]
                    .as_array_mut()
                    .map(std::mem::take)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|i| self.object(i, table))
                    .collect();
                json!({"kind": "PartialObjectMetadataList", "apiVersion": api_version, "metadata": list["metadata"], "items": items})
            }
            Representation::Table(api_version) => crate::table::list(&table.0, &list, table.1, api_version),
        }
    }

    fn event(self, mut event: Value, table: &TableOf) -> Value {
        // Bookmarks and errors keep their shape.
        if self != Representation::Full && event["type"] != "ERROR" && event["type"] != "BOOKMARK" {
            let obj = event["object"].take();
            event["object"] = self.object(obj, table);
        }
        event
    }
}

/// What a Table is made of: the resource (its columns) and what each row carries.
struct TableOf(Arc<nest_registry::ResourceInfo>, crate::table::Include);

/// Decoded query parameters.
#[derive(Default, Debug)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: Option<&str>) -> Result<Query> {
        let mut pairs = Vec::new();
        for part in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            pairs.push((percent_decode(k)?, percent_decode(v)?));
        }
        Ok(Query(pairs))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        // Go's strconv.ParseBool, which kube-apiserver uses: clients send "true", "True", "1", …
        matches!(self.get(key), Some("1" | "t" | "T" | "true" | "TRUE" | "True"))
    }

    fn dry_run(&self) -> Result<bool> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => {
                Err(ApiError::bad_request(format!("Unsupported value: {other:?}: supported values: \"All\"")))
            }
        }
    }

    /// What `fieldValidation` asks for fields the kind does not have: an error (`Strict`), a warning (`Warn`, the
    /// default) or nothing (`Ignore`). Returns the warnings to send.
    fn field_validation(&self, resource: &Resource, body: &Value) -> Result<Vec<String>> {
        let strict = match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => false,
            Some("Strict") => true,
            Some("Ignore") => return Ok(Vec::new()),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
                )));
            }
        };
        let unknown: Vec<String> =
            resource.unknown_fields(body).into_iter().map(|field| format!("unknown field {field:?}")).collect();
        if strict && !unknown.is_empty() {
            return Err(ApiError::bad_request(format!("strict decoding error: {}", unknown.join(", "))));
        }
        Ok(unknown)
    }

    fn list_options(&self) -> Result<ListOptions> {
        let limit = match self.get("limit").filter(|l| !l.is_empty()) {
            Some(l) => Some(l.parse::<usize>().map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?),
            None => None,
        };
        Ok(ListOptions {
            label_selector: self.get("labelSelector").map(str::to_string),
            field_selector: self.get("fieldSelector").map(str::to_string),
            limit,
            continue_token: self.get("continue").map(str::to_string),
            resource_version: self.get("resourceVersion").map(str::to_string),
            resource_version_match: self.get("resourceVersionMatch").map(str::to_string),
            allow_watch_bookmarks: self.flag("allowWatchBookmarks"),
        })
    }
}

fn percent_decode(text: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(byte.ok_or_else(|| ApiError::bad_request(format!("invalid escape in query {text:?}")))?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| ApiError::bad_request("the query is not UTF-8"))
}

/// What a resource path names.
struct Target {
    resource: Resource,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

/// Parses the segments after `/api/v1` or `/apis/<group>/<version>`.
fn target(state: &State, group: &str, version: &str, segments: &[&str]) -> Result<Target> {
    let find = |plural: &str| state.registry.resource(group, version, plural).ok_or_else(ApiError::no_route);
    let (namespace, rest): (Option<String>, &[&str]) = match segments {
        ["namespaces", ns, plural, rest @ ..]
            if state.registry.resource(group, version, plural).is_some_and(|r| r.info.namespaced) =>
        {
            (Some(ns.to_string()), &segments[2..][..1 + rest.len()])
        }
        _ => (None, segments),
    };
    let (resource, name, subresource) = match rest {
        [plural] => (find(plural)?, None, None),
        [plural, name] => (find(plural)?, Some(name.to_string()), None),
        [plural, name, sub] => (find(plural)?, Some(name.to_string()), Some(sub.to_string())),
        _ => return Err(ApiError::no_route()),
    };
    if resource.info.namespaced && namespace.is_none() && name.is_some() {
        // /api/v1/pods/<name> names nothing: namespaced objects live under a namespace.
        return Err(ApiError::no_route());
    }
    if let Some(sub) = &subresource {
        let known = (sub == "status" && resource.info.status)
            || (sub == "scale" && resource.info.scale.is_some())
            || resource.info.subresources.iter().any(|own| own.name == sub);
        if !known {
            return Err(ApiError::no_route());
        }
    }
    Ok(Target { resource, namespace, name, subresource })
}

async fn serve(
    state: &Arc<State>,
    cert_user: Option<User>,
    request: Request<Incoming>,
    audit: &mut Option<crate::audit::Record>,
) -> Result<Response<Body>> {
    let (request, body) = request.into_parts();
    let path = request.uri.path().trim_end_matches('/').to_string();
    let path = if path.is_empty() { "/".to_string() } else { path };
    // Health and version are open to anyone, as in kube-apiserver's default RBAC.
    let open = matches!(path.as_str(), "/version" | "/healthz" | "/livez" | "/readyz")
        || ["/healthz/", "/livez/", "/readyz/"].iter().any(|prefix| path.starts_with(prefix));
    let user = match cert_user {
        Some(user) => Some(user),
        None => match request.headers.get("authorization").and_then(|v| v.to_str().ok()) {
            Some(authorization) => bearer_user(state, authorization).await,
            None => None,
        },
    };
    if let (Some(record), Some(real)) = (audit.as_mut(), &user) {
        record.user = Some((real.name.clone(), real.groups.clone()));
    }
    let user = match &user {
        Some(real) => Some(impersonated(state, real, &request.headers).await?),
        None => None,
    };
    if let (Some(record), Some(acting)) = (audit.as_mut(), &user)
        && record.user.as_ref().is_some_and(|(name, groups)| *name != acting.name || *groups != acting.groups)
    {
        record.impersonated = Some((acting.name.clone(), acting.groups.clone()));
    }
    // One user's flood does not starve another: each has its own share of requests in flight.
    let who = user.as_ref().map_or("system:anonymous", |u| u.name.as_str());
    let _slot = match long_running(&request) {
        true => None,
        false => match state.counters.begin(who, state.limits.max_inflight_per_user) {
            Some(slot) => Some(slot),
            None => return Ok(error_response(&ApiError::too_many_requests())),
        },
    };
    if !open && user.is_none() {
        // Who is asking is known before the body is read: a client that proved no identity gets no say over this
        // server's memory, whatever it sends. Its body stays unread, so the connection closes after the answer (the
        // unread bytes would be taken for its next request).
        let mut response = error_response(&ApiError::unauthorized());
        // (HTTP/2 has no such header: the stream is reset after the answer, the connection stays.)
        if request.version < hyper::Version::HTTP_2 {
            response.headers_mut().insert("connection", "close".parse().expect("a header value"));
        }
        return Ok(response);
    }
    // Otherwise the whole body is read first, whatever the answer will be: a body left unread makes the HTTP/1.1
    // connection unusable for the client's next request.
    let body = read_body(body, state.limits.max_request_bytes).await?;
    match path.as_str() {
        "/version" => {
            return Ok(json_response(StatusCode::OK, &discovery::version(state.kubernetes_version.as_deref())));
        }
        _ if open => return Ok(health(state, &path, request.uri.query().unwrap_or_default()).await),
        _ => {}
    }
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // Paths that are not resources (discovery, OpenAPI, metrics) are authorized as paths.
    let resource_path = matches!(segments.as_slice(), ["api", _, _, ..] | ["apis", _, _, _, ..]);
    if !resource_path && let Some(user) = &user {
        let verb = request.method.as_str().to_ascii_lowercase();
        let verb = if verb == "head" { "get".to_string() } else { verb };
        let action = crate::authz::Action::Path { verb: &verb, path: &path };
        crate::authz::authorize(&state.registry, state.authorization, user, &action).await?;
    }
    if path == "/metrics" && request.method == Method::GET {
        let mut response = Response::new(full(state.counters.render()));
        response.headers_mut().insert("content-type", "text/plain; version=0.0.4".parse().expect("a header value"));
        return Ok(response);
    }
    let catalog = state.registry.catalog();
    let method = request.method.clone();
    let discovery_get = |doc: Option<Value>| -> Result<Response<Body>> {
        if method != Method::GET {
            return Err(ApiError::method_not_allowed(format!("the server does not allow this method on {path}")));
        }
        doc.map(|d| json_response(StatusCode::OK, &d)).ok_or_else(ApiError::no_route)
    };
    match segments.as_slice() {
        ["api"] => discovery_get(Some(discovery::api_versions(&state.address))),
        ["api", "v1"] => discovery_get(discovery::api_resource_list(&catalog, "", "v1")),
        ["apis"] => discovery_get(Some(discovery::api_group_list(&catalog))),
        ["apis", group] => discovery_get(discovery::api_group(&catalog, group)),
        ["apis", group, version] => discovery_get(discovery::api_resource_list(&catalog, group, version)),
        ["openapi", "v3"] => discovery_get(Some(crate::openapi::index(&catalog))),
        ["openapi", "v2"] => {
            let accept = request.headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or_default();
            let protobuf = accept.contains(crate::openapi_v2::PROTOBUF);
            let doc = openapi_document(&method, Some(crate::openapi_v2::document(&catalog, protobuf)));
            if protobuf {
                doc.map(|mut response| {
                    // As kube-openapi's handler answers: Go's media-type parser refuses the `@` of the asked type.
                    let kind = "application/octet-stream".parse().expect("a header value");
                    response.headers_mut().insert("content-type", kind);
                    response
                })
            } else {
                doc
            }
        }
        [".well-known", "openid-configuration"] => {
            discovery_get(Some(state.service_accounts.discovery(&state.address)))
        }
        ["openid", "v1", "jwks"] => {
            let mut response = discovery_get(Some(state.service_accounts.jwks()))?;
            response.headers_mut().insert("content-type", "application/jwk-set+json".parse().expect("a header value"));
            Ok(response)
        }
        ["openapi", "v3", "api", version] | ["openapi", "v3", "apis", "", version] => {
            openapi_document(&method, crate::openapi::document(&catalog, "", version))
        }
        ["openapi", "v3", "apis", group, version] => {
            openapi_document(&method, crate::openapi::document(&catalog, group, version))
        }
        ["api", "v1", rest @ ..] => {
            let target = target(state, "", "v1", rest)?;
            note_target(audit, &target, &request, &body);
            resource_request(state, target, user.as_ref(), &request, body).await
        }
        ["apis", group, version, rest @ ..] => {
            let target = target(state, group, version, rest)?;
            note_target(audit, &target, &request, &body);
            resource_request(state, target, user.as_ref(), &request, body).await
        }
        _ => Err(ApiError::no_route()),
    }
}

/// Who a write is recorded for in `managedFields`: the `fieldManager` parameter, else the client's user agent up to
/// its first `/` (`kubectl`), as kube-apiserver does.
fn field_manager(query: &Query, request: &hyper::http::request::Parts) -> Result<String> {
    if let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        if manager.chars().count() > 128 {
            return Err(ApiError::invalid_patch_options("fieldManager: Too long: may not be more than 128 bytes"));
        }
        if manager.chars().any(char::is_control) {
            return Err(ApiError::invalid_patch_options(
                "fieldManager: Invalid value: must only contain printable characters",
            ));
        }
        return Ok(manager.to_string());
    }
    let agent = request.headers.get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let prefix: String = agent.split('/').next().unwrap_or_default().trim().chars().take(128).collect();
    Ok(if prefix.is_empty() { "unknown".into() } else { prefix })
}

/// `PATCH` with `application/apply-patch+yaml`: server-side apply by the `fieldManager` ([`nest_registry::apply`]);
/// creates the object when it does not exist.
#[allow(clippy::too_many_arguments)]
async fn server_side_apply(
    registry: &nest_registry::Registry,
    mut resource: nest_registry::Resource,
    info: &nest_registry::ResourceInfo,
    ns: &str,
    name: &str,
    subresource: Subresource,
    query: &Query,
    body: &[u8],
) -> Result<Response<Body>> {
    let manager = query
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::invalid_patch_options("fieldManager: Required value: is required for apply patch"))?
        .to_string();
    // Apply records its own managedFields.
    resource.manager = None;
    let force = query.flag("force");
    let mut applied: Value =
        serde_norway::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
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
    if info.namespaced && applied["metadata"]["namespace"].as_str().is_none_or(str::is_empty) {
        applied["metadata"]["namespace"] = json!(ns);
    }
    let warnings = query.field_validation(&resource, &applied)?;
    let dry_run = query.dry_run()?;
    let now = nest_core::clock::rfc3339_now();
    let resource = &resource;
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

/// An OpenAPI document, already serialized.
fn openapi_document(method: &Method, doc: Option<Arc<Vec<u8>>>) -> Result<Response<Body>> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed("the server does not allow this method on OpenAPI documents"));
    }
    let doc = doc.ok_or_else(ApiError::no_route)?;
    // The cached document itself, not a copy of it per answer.
    Ok(json_bytes_response(StatusCode::OK, Bytes::from_owner(ArcBytes(doc))))
}

/// A shared serialized document, as the bytes of an answer.
struct ArcBytes(Arc<Vec<u8>>);

impl AsRef<[u8]> for ArcBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// Reads a request body, refusing more than `limit` bytes (`--max-request-bytes`, [`crate::limits::Limits`]) with
/// 413, in kube-apiserver's words (`limitedReadBody`, `k8s.io/apiserver/pkg/endpoints/handlers/rest.go`, 1.33). No
/// more than `limit` bytes are ever held: the read stops at the first byte beyond.
async fn read_body<B>(body: B, limit: usize) -> Result<Bytes>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            Err(ApiError::too_large(format!("Request entity too large: limit is {limit}")))
        }
        Err(error) => Err(ApiError::bad_request(format!("reading the request body: {error}"))),
    }
}

fn content_type(request: &hyper::http::request::Parts) -> String {
    request
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Who a request acts as: its sender, or whom it impersonates (`Impersonate-User`, `Impersonate-Group`: `kubectl
/// --as`, `--as-group`) if the sender may `impersonate` them, as kube-apiserver's impersonation filter decides.
/// The user of an `Authorization` header: a static token's, else a ServiceAccount token's.
async fn bearer_user(state: &Arc<State>, authorization: &str) -> Option<User> {
    if let Some(user) = state.tokens.user(authorization) {
        return Some(user);
    }
    let token = authorization.strip_prefix("Bearer ").or_else(|| authorization.strip_prefix("bearer "))?.trim();
    state.service_accounts.authenticate(&state.registry, token, &[]).await.map(|(user, _)| user)
}

async fn impersonated(state: &Arc<State>, real: &User, headers: &hyper::HeaderMap) -> Result<User> {
    let texts = |name: &str| -> Vec<String> {
        headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect()
    };
    let (names, groups) = (texts("impersonate-user"), texts("impersonate-group"));
    if headers.keys().any(|k| k.as_str() == "impersonate-uid" || k.as_str().starts_with("impersonate-extra-")) {
        return Err(ApiError::bad_request("impersonating a UID or extra user information is not supported by nest"));
    }
    let Some(name) = names.first() else {
        if !groups.is_empty() {
            return Err(ApiError::bad_request(format!("requested {:?} without impersonating a user", groups)));
        }
        return Ok(real.clone());
    };
    let mut asked = vec![match name.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':')) {
        Some((namespace, account)) => ("serviceaccounts", account.to_string(), Some(namespace.to_string())),
        None => ("users", name.clone(), None),
    }];
    asked.extend(groups.iter().map(|g| ("groups", g.clone(), None)));
    for (resource, asked_name, namespace) in &asked {
        let action = crate::authz::Action::Resource {
            verb: "impersonate",
            group: "",
            resource,
            subresource: None,
            namespace: namespace.as_deref(),
            name: Some(asked_name),
        };
        if !crate::authz::allowed(&state.registry, state.authorization, real, &action).await? {
            let scope =
                namespace.as_ref().map_or("at the cluster scope".to_string(), |n| format!("in the namespace \"{n}\""));
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{resource} \"{asked_name}\" is forbidden: User \"{}\" cannot impersonate resource \"{resource}\" in API group \"\" {scope}",
                    real.name
                ),
            ));
        }
    }
    let mut groups = groups;
    if name != "system:anonymous" && !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    Ok(User { name: name.clone(), groups })
}

/// The RBAC object a write would leave: the body of a create or replace, or the stored object with the patch
/// applied (the body itself, for an apply of a new object).
async fn object_after(
    state: &Arc<State>,
    target: &Target,
    request: &hyper::http::request::Parts,
    body: &Bytes,
) -> Result<Value> {
    let content_type = content_type(request);
    if request.method != Method::PATCH {
        return decode_object(&content_type, body);
    }
    if content_type == "application/apply-patch+yaml" {
        return crate::body::decode_object("application/yaml", body);
    }
    let (ns, name) = (target.namespace.as_deref().unwrap_or_default(), target.name.as_deref().unwrap_or_default());
    let current = state.registry.get(&target.resource, ns, name).await?;
    let patch = parse_patch(&content_type, body, target.resource.schema.is_some())?;
    apply_patch(&patch, &current, target.resource.schema.as_deref())
}

/// A request to a resource from `user`: served, with what admission warned about as `Warning` headers.
async fn resource_request(
    state: &Arc<State>,
    mut target: Target,
    user: Option<&User>,
    request: &hyper::http::request::Parts,
    body: Bytes,
) -> Result<Response<Body>> {
    if let Some(user) = user {
        target.resource.user = UserInfo { name: user.name.clone(), groups: user.groups.clone() };
        let watch = request.uri.query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let action = crate::authz::Action::Resource {
            verb: crate::authz::verb(&request.method, target.name.is_some(), watch),
            group: &target.resource.info.group,
            resource: &target.resource.info.plural,
            subresource: target.subresource.as_deref(),
            namespace: target.namespace.as_deref(),
            name: target.name.as_deref(),
        };
        crate::authz::authorize(&state.registry, state.authorization, user, &action).await?;
        // A write of an RBAC object grants no more than its writer holds.
        if target.resource.info.group == "rbac.authorization.k8s.io"
            && matches!(request.method, Method::POST | Method::PUT | Method::PATCH)
        {
            let object = object_after(state, &target, request, &body).await?;
            let namespace = target.namespace.as_deref().unwrap_or_default();
            crate::authz::check_escalation(
                &state.registry,
                state.authorization,
                user,
                &target.resource.info,
                namespace,
                &object,
            )
            .await?;
        }
    }
    // Who may approve and sign for a signer, and what it may be asked (the certificate admission plugins).
    if let Some(user) = user
        && target.resource.info.group == "certificates.k8s.io"
        && matches!(request.method, Method::POST | Method::PUT | Method::PATCH)
    {
        let after = object_after(state, &target, request, &body).await?;
        let (ns, name) = (target.namespace.as_deref().unwrap_or_default(), target.name.as_deref());
        let old = match name {
            Some(name) => Some(state.registry.get(&target.resource, ns, name).await?),
            None => None,
        };
        crate::certificates::check(
            &state.registry,
            state.authorization,
            user,
            &target.resource.info,
            target.subresource.as_deref(),
            &after,
            old.as_ref(),
        )
        .await?;
    }
    // Reviews are answered, not stored.
    if request.method == Method::POST
        && let Some(user) = user
        && matches!(target.resource.info.group.as_str(), "authorization.k8s.io" | "authentication.k8s.io")
    {
        let object = decode_object(&content_type(request), &body)?;
        let kind = target.resource.info.kind.clone();
        if kind == "TokenReview" {
            let mut review = state.service_accounts.review(&state.registry, &object).await?;
            review["apiVersion"] = json!(target.resource.info.api_version());
            review["kind"] = json!(kind);
            return Ok(json_response(StatusCode::CREATED, &review));
        }
        if let Some(answer) = crate::reviews::answer(
            &state.registry,
            state.authorization,
            user,
            &kind,
            target.namespace.as_deref(),
            &object,
        )
        .await
        {
            let mut review = answer?;
            review["apiVersion"] = json!(target.resource.info.api_version());
            review["kind"] = json!(kind);
            return Ok(json_response(StatusCode::CREATED, &review));
        }
    }
    let warnings = target.resource.warnings.clone();
    let response = serve_resource(state, target, request, body).await?;
    Ok(with_warnings(response, &warnings.take()))
}

async fn serve_resource(
    state: &Arc<State>,
    mut target: Target,
    request: &hyper::http::request::Parts,
    body: Bytes,
) -> Result<Response<Body>> {
    let query = Query::parse(request.uri.query())?;
    let method = request.method.clone();
    if matches!(method, Method::POST | Method::PUT | Method::PATCH) {
        target.resource.manager = Some(field_manager(&query, request)?);
    }
    let representation = Representation::negotiate(request.headers.get("accept").and_then(|v| v.to_str().ok()))?;
    let registry = &state.registry;
    let info = target.resource.info.clone();
    let table = TableOf(info.clone(), crate::table::Include::parse(query.get("includeObject"))?);
    let namespace = target.namespace.clone().unwrap_or_default();
    let ns = if info.namespaced { namespace.as_str() } else { "" };
    let content_type = content_type(request);
    let verb_allowed = |verb: &str| -> Result<()> {
        if info.verbs.iter().any(|v| v == verb) {
            Ok(())
        } else {
            Err(ApiError::method_not_allowed(format!("{verb} is not supported on {}", info.qualified())))
        }
    };

    match (&method, target.name.as_deref(), target.subresource.as_deref()) {
        // === collections ===
        (&Method::GET, None, None) => {
            let options = query.list_options()?;
            let scope = target.namespace.as_deref();
            if query.flag("watch") {
                verb_allowed("watch")?;
                let timeout = watch_timeout(query.get("timeoutSeconds"))?;
                let bookmarks = options.allow_watch_bookmarks.then_some(BOOKMARK_EVERY);
                let events = registry.watch(&target.resource, scope, &options, bookmarks).await?;
                let events = events.map(move |event| representation.event(event, &table)).boxed();
                return Ok(watch_response(events, timeout));
            }
            verb_allowed("list")?;
            if representation == Representation::Full {
                let list = registry.list_json(&target.resource, scope, &options).await?;
                return Ok(json_bytes_response(StatusCode::OK, list));
            }
            let list = registry.list(&target.resource, scope, &options).await?;
            Ok(json_response(StatusCode::OK, &representation.list(list, &table)))
        }
        (&Method::POST, None, None) => {
            verb_allowed("create")?;
            let body = decode_object(&content_type, &body)?;
            let warnings = query.field_validation(&target.resource, &body)?;
            let created = registry.create(&target.resource, ns, body, query.dry_run()?).await?;
            Ok(with_warnings(json_response(StatusCode::CREATED, &created), &warnings))
        }
        (&Method::DELETE, None, None) => {
            verb_allowed("deletecollection")?;

            let delete = delete_options(&query, &content_type, &body)?;
            let list = registry.list(&target.resource, target.namespace.as_deref(), &query.list_options()?).await?;
            let mut deleted = Vec::new();
            for item in list["items"].as_array().into_iter().flatten() {
                let item_ns = nest_registry::meta::namespace(item).to_string();
                let name = nest_registry::meta::name(item).to_string();
                match registry.delete(&target.resource, &item_ns, &name, &delete).await {
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
        // The object through `/status` or a kind's own view of it that is read and written whole (a CSR's
        // `/approval`); not `pods/log`, which is the node's.
        (&Method::GET, Some(name), sub)
            if sub.is_none_or(|sub| {
                sub == "status"
                    || info.subresources.iter().any(|own| {
                        own.name == sub
                            && own.kind == info.kind
                            && own.verbs.contains(&"get")
                            && own.verbs.contains(&"update")
                    })
            }) =>
        {
            verb_allowed("get")?;
            let obj = registry.get(&target.resource, ns, name).await?;
            Ok(json_response(StatusCode::OK, &representation.object(obj, &table)))
        }
        (&Method::PUT, Some(name), sub @ (None | Some("status"))) => {
            verb_allowed("update")?;
            let body = decode_object(&content_type, &body)?;
            let warnings = query.field_validation(&target.resource, &body)?;
            let subresource = if sub == Some("status") { Subresource::Status } else { Subresource::Main };
            let updated = registry.update(&target.resource, ns, name, body, subresource, query.dry_run()?).await?;
            Ok(with_warnings(json_response(StatusCode::OK, &updated), &warnings))
        }
        (&Method::PATCH, Some(name), sub @ (None | Some("status")))
            if content_type == "application/apply-patch+yaml" =>
        {
            verb_allowed("patch")?;
            let subresource = if sub == Some("status") { Subresource::Status } else { Subresource::Main };
            let name = name.to_string();
            server_side_apply(registry, target.resource, &info, ns, &name, subresource, &query, &body).await
        }
        (&Method::PATCH, Some(name), sub @ (None | Some("status"))) => {
            verb_allowed("patch")?;
            if query.get("force").is_some() {
                return Err(ApiError::invalid_patch_options(
                    "force: Forbidden: may not be specified for non-apply patch",
                ));
            }
            let patch = parse_patch(&content_type, &body, target.resource.schema.is_some())?;
            // A merge patch has the object's shape, so its unknown fields are the result's.
            let warnings = match &patch {
                Patch::Merge(doc) => query.field_validation(&target.resource, doc)?,
                Patch::Strategic(doc) => {
                    query.field_validation(&target.resource, &nest_registry::strategic::without_directives(doc))?
                }
                Patch::Json(_) => Vec::new(),
            };
            let subresource = if sub == Some("status") { Subresource::Status } else { Subresource::Main };
            let patched = registry
                .update_with(&target.resource, ns, name, subresource, query.dry_run()?, |current| {
                    apply_patch(&patch, current, target.resource.schema.as_deref())
                })
                .await?;
            Ok(with_warnings(json_response(StatusCode::OK, &patched), &warnings))
        }
        (&Method::DELETE, Some(name), None) => {
            verb_allowed("delete")?;

            let options = delete_options(&query, &content_type, &body)?;
            let obj = registry.delete(&target.resource, ns, name, &options).await?;
            // 202 when the object lingers (finalizers), 200 when it is gone.
            let code = if nest_registry::meta::is_deleting(&obj) { StatusCode::ACCEPTED } else { StatusCode::OK };
            Ok(json_response(code, &obj))
        }

        // === subresources ===
        (&Method::GET, Some(name), Some("log")) => {
            let tls = state.kubelet_tls.clone();
            crate::logs::pod_log(registry, tls, ns, name, |key| query.get(key).map(str::to_string)).await
        }
        (&Method::GET, Some(name), Some("scale")) => {
            let obj = registry.get(&target.resource, ns, name).await?;
            Ok(json_response(StatusCode::OK, &scale_of(&info, &obj)))
        }
        (&Method::PUT | &Method::PATCH, Some(name), Some("scale")) => {
            // PUT replaces the Scale; PATCH patches the current one.
            let (replacement, patch) = if method == Method::PUT {
                (Some(decode_object(&content_type, &body)?), None)
            } else {
                (None, Some(parse_patch(&content_type, &body, true)?))
            };
            let scale_schema = nest_openapi::kind_schema("autoscaling", "v1", "Scale");
            let change = |current: &Value| match (&replacement, &patch) {
                (Some(scale), _) => Ok(scale.clone()),
                (None, Some(patch)) => apply_patch(patch, current, scale_schema.as_deref()),
                (None, None) => unreachable!("either a replacement or a patch"),
            };
            let updated = registry
                .update_with(&target.resource, ns, name, Subresource::Main, query.dry_run()?, |current| {
                    nest_registry::scale::scaled(&info, current, &change(&scale_of(&info, current))?)
                })
                .await?;
            Ok(json_response(StatusCode::OK, &scale_of(&info, &updated)))
        }
        // TokenRequest: answered with a token this server signs, never stored.
        (&Method::POST, Some(name), Some("token")) if info.group.is_empty() && info.plural == "serviceaccounts" => {
            let body = decode_object(&content_type, &body)?;
            let answer = state.service_accounts.token_request(registry, ns, name, &body).await?;
            Ok(json_response(StatusCode::CREATED, &answer))
        }
        // A kind's own subresource (`pods/binding` is created, `namespaces/finalize` updated): its strategy writes it.
        (&Method::POST | &Method::PUT, Some(name), Some(sub))
            if info.subresources.iter().any(|own| {
                own.name == sub && own.verbs.contains(&if method == Method::POST { "create" } else { "update" })
            }) =>
        {
            let body = decode_object(&content_type, &body)?;
            let written = registry.update_subresource(&target.resource, ns, name, sub, body, query.dry_run()?).await?;
            if method == Method::PUT {
                return Ok(json_response(StatusCode::OK, &written));
            }
            Ok(json_response(
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        _ => Err(ApiError::method_not_allowed(format!("{method} is not supported here"))),
    }
}

/// `DeleteOptions` from the body (kubectl sends one without TypeMeta) and the query.
fn delete_options(query: &Query, content_type: &str, body: &[u8]) -> Result<DeleteOptions> {
    let body: Value = match content_type {
        _ if body.iter().all(u8::is_ascii_whitespace) => json!({}),
        "application/vnd.kubernetes.protobuf" => decode_object(content_type, body)?,
        _ => parse_json(body)?,
    };
    let text = |v: &Value| v.as_str().map(str::to_string);
    let preconditions = body.get("preconditions").cloned().unwrap_or(Value::Null);
    let dry_run_body = body.get("dryRun").and_then(Value::as_array).is_some_and(|d| d.iter().any(|v| v == "All"));
    let mut propagation = body.get("propagationPolicy").and_then(text);
    if let Some(p) = query.get("propagationPolicy").filter(|p| !p.is_empty()) {
        propagation = Some(p.to_string());
    }
    // The deprecated orphanDependents says it too, either way (false keeps a kind that orphans by default from it).
    let orphan = match query.get("orphanDependents").filter(|o| !o.is_empty()) {
        Some(text) => Some(text == "true"),
        None => body.get("orphanDependents").and_then(Value::as_bool),
    };
    if propagation.is_none() {
        propagation = orphan.map(|orphan| if orphan { "Orphan" } else { "Background" }.to_string());
    }
    let mut grace = body.get("gracePeriodSeconds").and_then(Value::as_i64);
    if let Some(text) = query.get("gracePeriodSeconds").filter(|g| !g.is_empty()) {
        let seconds = text.parse().map_err(|_| {
            ApiError::bad_request(format!("gracePeriodSeconds: {text:?} is not a whole number of seconds"))
        })?;
        grace = Some(seconds);
    }
    Ok(DeleteOptions {
        grace_period_seconds: grace,
        propagation_policy: propagation,
        precondition_uid: preconditions.get("uid").and_then(text),
        precondition_resource_version: preconditions.get("resourceVersion").and_then(text),
        dry_run: dry_run_body || query.dry_run()?,
    })
}

/// A watch: HTTP 200, chunked, one JSON event per line, each flushed as it comes; ends after `timeout`.
fn watch_response(events: futures_util::stream::BoxStream<'static, Value>, timeout: Duration) -> Response<Body> {
    let deadline = tokio::time::Instant::now() + timeout;
    let lines = events.take_until(tokio::time::sleep_until(deadline)).map(|event| {
        let mut line = event.to_string();
        line.push('\n');
        Ok::<_, Infallible>(Frame::data(Bytes::from(line)))
    });
    let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(lines)));
    response.headers_mut().insert("content-type", "application/json".parse().expect("a header value"));
    response.headers_mut().insert("cache-control", "no-cache, private".parse().expect("a header value"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_over_the_configured_limit_is_a_413_status() {
        let limit = 1024;
        let exactly = read_body(Full::new(Bytes::from(vec![b'x'; limit])), limit).await.unwrap();
        assert_eq!(exactly.len(), limit, "a body of exactly the limit is read whole");
        let error = read_body(Full::new(Bytes::from(vec![b'x'; limit + 1])), limit).await.unwrap_err();
        let response = error_response(&error);
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let status: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(
            (&status["kind"], &status["status"], &status["reason"], &status["code"]),
            (&json!("Status"), &json!("Failure"), &json!("RequestEntityTooLarge"), &json!(413))
        );
        assert_eq!(status["message"], "Request entity too large: limit is 1024");
        // The server's default is kube-apiserver's.
        let limits = crate::limits::Limits::default();
        assert_eq!(limits.max_request_bytes, 3 * 1024 * 1024);
        let three_mib = read_body(Full::new(Bytes::from(vec![b'x'; 3 * 1024 * 1024])), limits.max_request_bytes);
        assert!(three_mib.await.is_ok());
    }

    #[test]
    fn a_watch_lasts_at_most_an_hour_whatever_it_asks() {
        assert_eq!(watch_timeout(Some("18446744073709551615")).unwrap(), MAX_WATCH_TIMEOUT);
        assert_eq!(watch_timeout(Some("86400")).unwrap(), MAX_WATCH_TIMEOUT);
        assert_eq!(watch_timeout(Some("5")).unwrap(), Duration::from_secs(5));
        assert_eq!(watch_timeout(Some("0")).unwrap(), DEFAULT_WATCH_TIMEOUT);
        assert_eq!(watch_timeout(None).unwrap(), DEFAULT_WATCH_TIMEOUT);
        assert_eq!(watch_timeout(Some("-1")).unwrap_err().code, 400);
        assert_eq!(watch_timeout(Some("18446744073709551616")).unwrap_err().code, 400);
    }

    #[test]
    fn accept_headers_pick_the_first_form_nest_can_produce() {
        let protobuf_table = "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io";
        assert_eq!(
            Representation::negotiate(Some(protobuf_table)).unwrap(),
            Representation::Table("meta.k8s.io/v1beta1")
        );
        let kubectl_get = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(Representation::negotiate(Some(kubectl_get)).unwrap(), Representation::Table("meta.k8s.io/v1"));
        let metadata = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(Representation::negotiate(Some(metadata)).unwrap(), Representation::Metadata("meta.k8s.io/v1"));
        assert_eq!(Representation::negotiate(None).unwrap(), Representation::Full);
        assert_eq!(Representation::negotiate(Some("*/*")).unwrap(), Representation::Full);
        assert_eq!(Representation::negotiate(Some("application/vnd.kubernetes.protobuf")).unwrap_err().code, 406);
        let pods = nest_registry::Catalog::builtin().find("", "v1", "pods").unwrap();
        let table = TableOf(pods, crate::table::Include::Metadata);
        let list = Representation::Metadata("meta.k8s.io/v1").list(
            json!({"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "a"}, "spec": {}}]}),
            &table,
        );
        assert_eq!(list["kind"], "PartialObjectMetadataList");
        assert_eq!(
            list["items"][0],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "a"}})
        );
        assert_eq!(list["metadata"]["resourceVersion"], "5");
    }
}
