//! `/openapi/v3`: an index of the served group-versions and one OpenAPI 3 document per group-version, for built-in
//! kinds (their schemas from k8s-openapi, [`nest_openapi::published`]) and for every version a CustomResourceDefinition
//! serves (its `openAPIV3Schema`, regenerated from the catalogue on every request, so a CRD change shows at once).
//!
//! kubectl reads these: `create`, `apply` and `edit` look for the PATCH operation of the object's kind (by its
//! `x-kubernetes-group-version-kind`) and, when it takes the `fieldValidation` query parameter, leave validation to
//! the server (`fieldValidation=Strict`); `explain` walks `components.schemas` from the kind's definition.
//!
//! The index gives every document a `hash`, which clients use as a cache key: a built-in group-version's is fixed for
//! this build, a custom resource group-version's is the hash of its document.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex};

use nest_registry::{Catalog, ResourceInfo};
use serde_json::{Map, Value, json};

/// `api/v1` or `apis/<group>/<version>`: how the index and URLs name a group-version.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

fn hash_hex(bytes: &[u8]) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// The group-versions served, each `(group, version)`.
fn group_versions(catalog: &Catalog) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for info in catalog.resources() {
        let gv = (info.group.clone(), info.version.clone());
        if !out.contains(&gv) {
            out.push(gv);
        }
    }
    out
}

/// `/openapi/v3`.
pub fn index(catalog: &Catalog) -> Value {
    let mut paths = Map::new();
    for (group, version) in group_versions(catalog) {
        let path = gv_path(&group, &version);
        let hash = if custom_group_version(catalog, &group, &version) {
            document(catalog, &group, &version).map(|d| hash_hex(&d)).unwrap_or_default()
        } else {
            hash_hex(format!("{}/{path}", env!("CARGO_PKG_VERSION")).as_bytes())
        };
        paths.insert(path.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}));
    }
    json!({ "paths": paths })
}

fn custom_group_version(catalog: &Catalog, group: &str, version: &str) -> bool {
    catalog.resources().iter().any(|r| r.custom && r.group == group && r.version == version)
}

/// Serialized documents by `(group, version)`.
type Documents = HashMap<(String, String), Arc<Vec<u8>>>;

/// Built-in group-versions' documents, made once.
static BUILT_IN: LazyLock<Mutex<Documents>> = LazyLock::new(Mutex::default);

/// The document of `group/version` (serialized), or `None` when it is not served.
pub fn document(catalog: &Catalog, group: &str, version: &str) -> Option<Arc<Vec<u8>>> {
    let resources: Vec<&Arc<ResourceInfo>> =
        catalog.resources().iter().filter(|r| r.group == group && r.version == version).collect();
    if resources.is_empty() {
        return None;
    }
    let custom = resources.iter().any(|r| r.custom);
    let key = (group.to_string(), version.to_string());
    if !custom && let Some(cached) = BUILT_IN.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Some(cached.clone());
    }
    let mut schemas = Map::new();
    let mut paths = Map::new();
    for info in resources {
        let Some(root) = kind_schemas(info, &mut schemas) else { continue };
        add_paths(info, &root, &mut paths);
    }
    let doc = json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    });
    let bytes = Arc::new(serde_json::to_vec(&doc).expect("a JSON document"));
    if !custom {
        BUILT_IN.lock().unwrap_or_else(|p| p.into_inner()).insert(key, bytes.clone());
    }
    Some(bytes)
}

/// Adds the schemas of `info`'s kind to `schemas`; returns the name of the kind's definition.
fn kind_schemas(info: &ResourceInfo, schemas: &mut Map<String, Value>) -> Option<String> {
    if !info.custom {
        let (root, definitions) = nest_openapi::published(&info.group, &info.version, &info.kind)?;
        schemas.extend(definitions);
        return Some(root);
    }
    // A custom resource: `<reversed group>.<version>.<Kind>`, as kube-apiserver names it.
    let reversed: Vec<&str> = info.group.split('.').rev().collect();
    let name = format!("{}.{}.{}", reversed.join("."), info.version, info.kind);
    let mut schema = info.schema.as_deref().cloned().unwrap_or_else(|| json!({"type": "object"}));
    if !schema.is_object() {
        schema = json!({"type": "object"});
    }
    if schema.get("x-kubernetes-preserve-unknown-fields").is_none() && schema.get("properties").is_none() {
        schema["x-kubernetes-preserve-unknown-fields"] = json!(true);
    }
    let (meta, meta_definitions) = nest_openapi::published_object_meta();
    schemas.extend(meta_definitions);
    let properties = schema.as_object_mut().expect("an object").entry("properties").or_insert_with(|| json!({}));
    properties["apiVersion"] = json!({
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an object.",
    });
    properties["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."});
    properties["metadata"] = json!({
        "allOf": [{"$ref": format!("{}{meta}", nest_openapi::REF_PREFIX)}],
        "description": "Standard object's metadata.",
    });
    schema["x-kubernetes-group-version-kind"] =
        json!([{"group": info.group, "version": info.version, "kind": info.kind}]);
    schemas.insert(name.clone(), schema);
    Some(name)
}

fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn path_parameter(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}})
}

/// The operations on `info`'s collection and objects (and status), each marked with the kind and action.
fn add_paths(info: &ResourceInfo, root: &str, paths: &mut Map<String, Value>) {
    let prefix = format!("/{}", gv_path(&info.group, &info.version));
    let collection = if info.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{prefix}/{}", info.plural)
    };
    let gvk = json!({"group": info.group, "version": info.version, "kind": info.kind});
    let reference = json!({"$ref": format!("{}{root}", nest_openapi::REF_PREFIX)});
    let body = |types: &[&str]| -> Value {
        let content: Map<String, Value> =
            types.iter().map(|t| (t.to_string(), json!({"schema": reference.clone()}))).collect();
        json!({"content": content, "required": true})
    };
    let answer = json!({"200": {"description": "OK", "content": {"application/json": {"schema": reference.clone()}}}});
    let write_parameters = vec![
        query("dryRun", "When present, indicates that modifications should not be persisted."),
        query(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        query(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or \
             duplicate fields. Valid values are: Ignore, Warn (the default) and Strict.",
        ),
    ];
    let mut patch_parameters = write_parameters.clone();
    patch_parameters.push(query("force", "Force is going to \"force\" Apply requests."));
    let mut patch_types =
        vec!["application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"];
    if !info.custom {
        patch_types.push("application/strategic-merge-patch+json");
    }
    let operation = |action: &str, verb: &str, parameters: &[Value], request: Option<Value>| -> Value {
        let mut op = json!({
            "operationId": format!("{verb}{}{}", if info.namespaced { "Namespaced" } else { "" }, info.kind),
            "parameters": parameters,
            "responses": answer,
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        });
        if let Some(request) = request {
            op["requestBody"] = request;
        }
        op
    };
    let scope: Vec<Value> = if info.namespaced { vec![path_parameter("namespace")] } else { Vec::new() };
    let verbs = |verb: &str| info.verbs.iter().any(|v| v == verb);
    let mut on_collection = Map::new();
    on_collection.insert("parameters".into(), json!(scope));
    if verbs("list") {
        on_collection.insert("get".into(), operation("list", "list", &[], None));
    }
    if verbs("create") {
        on_collection.insert(
            "post".into(),
            operation("post", "create", &write_parameters, Some(body(&["application/json", "application/yaml"]))),
        );
    }
    paths.insert(collection.clone(), Value::Object(on_collection));
    let mut item_parameters = scope.clone();
    item_parameters.push(path_parameter("name"));
    let mut on_item = Map::new();
    on_item.insert("parameters".into(), json!(item_parameters));
    if verbs("get") {
        on_item.insert("get".into(), operation("get", "read", &[], None));
    }
    if verbs("update") {
        on_item.insert(
            "put".into(),
            operation("put", "replace", &write_parameters, Some(body(&["application/json", "application/yaml"]))),
        );
    }
    if verbs("patch") {
        on_item.insert("patch".into(), operation("patch", "patch", &patch_parameters, Some(body(&patch_types))));
    }
    if verbs("delete") {
        on_item.insert("delete".into(), operation("delete", "delete", &[query("dryRun", "")], None));
    }
    paths.insert(format!("{collection}/{{name}}"), Value::Object(on_item));
    if info.status {
        let mut on_status = Map::new();
        on_status.insert("parameters".into(), json!(item_parameters));
        on_status.insert("get".into(), operation("get", "read", &[], None));
        on_status
            .insert("put".into(), operation("put", "replace", &write_parameters, Some(body(&["application/json"]))));
        on_status.insert("patch".into(), operation("patch", "patch", &patch_parameters, Some(body(&patch_types))));
        paths.insert(format!("{collection}/{{name}}/status"), Value::Object(on_status));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deployment_patch_takes_field_validation_and_the_schema_marks_the_kind() {
        let catalog = Catalog::builtin();
        let index = index(&catalog);
        let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="), "{url}");
        let doc: Value = serde_json::from_slice(&document(&catalog, "apps", "v1").unwrap()).unwrap();
        let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Deployment");
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        let deployment = &doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(deployment["x-kubernetes-group-version-kind"][0]["kind"], "Deployment");
        let strategy = &doc["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["strategy"];
        assert_eq!(strategy["x-kubernetes-patch-strategy"], "retainKeys");
        let containers = &doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(
            (containers["x-kubernetes-list-type"].as_str(), &containers["x-kubernetes-list-map-keys"]),
            (Some("map"), &json!(["name"]))
        );
        let selector = &doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"];
        assert_eq!(selector["x-kubernetes-map-type"], "atomic");
        assert!(document(&catalog, "nope.example.com", "v1").is_none());
    }
}
