//! `/openapi/v2`: the served API as one Swagger 2.0 document, made from the `/openapi/v3` documents
//! ([`crate::openapi`]), in JSON or in the protobuf encoding of gnostic's `openapi_v2.Document` ([`crate::gnostic`]),
//! which is the only one client-go asks for (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`).
//!
//! kubectl reads it when `/openapi/v3` cannot say whether a kind's PATCH takes `fieldValidation` — a kind with no
//! PATCH, such as the review kinds — and then validates the object on the client against this document's
//! definitions; other clients (the GitOps tools among them) read their schemas from it.
//!
//! The translation is upstream's: `#/components/schemas/X` references become `#/definitions/X`; a request body is a
//! `body` parameter and each parameter's `schema.type` its own `type`; an int-or-string is `type: string` with
//! `format: int-or-string`; what Swagger 2.0 cannot say (`anyOf`, `oneOf`, `not`, the type of a `nullable` field,
//! and the shape of a custom resource's field that keeps unknown fields) is left out, which leaves the value
//! unconstrained rather than wrongly constrained. Built-in definitions come first, so a custom resource cannot take
//! one's name.

use std::sync::{Arc, LazyLock, Mutex};

use nest_registry::Catalog;
use prost::Message;
use serde_json::{Map, Value, json};

/// The media type client-go asks for.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The document in JSON and in protobuf, for the `/openapi/v3` index it was made from.
struct Made {
    index: String,
    json: Arc<Vec<u8>>,
    protobuf: Arc<Vec<u8>>,
}

static MADE: LazyLock<Mutex<Option<Made>>> = LazyLock::new(Mutex::default);

/// The document, JSON unless `protobuf`: made again only when a served group-version's v3 document changed.
pub fn document(catalog: &Catalog, protobuf: bool) -> Arc<Vec<u8>> {
    let index = crate::openapi::index(catalog);
    let key = index.to_string();
    let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    if made.as_ref().is_none_or(|m| m.index != key) {
        let swagger = swagger(catalog, &index);
        let protobuf = crate::gnostic::document(&swagger).encode_to_vec();
        *made = Some(Made {
            index: key,
            json: Arc::new(serde_json::to_vec(&swagger).expect("a JSON document")),
            protobuf: Arc::new(protobuf),
        });
    }
    let made = made.as_ref().expect("made above");
    if protobuf { made.protobuf.clone() } else { made.json.clone() }
}

/// The Swagger 2.0 document of every group-version the v3 `index` lists.
fn swagger(catalog: &Catalog, index: &Value) -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    let mut group_versions: Vec<(&str, &str, bool)> = index["paths"]
        .as_object()
        .into_iter()
        .flat_map(|p| p.keys())
        .filter_map(|path| {
            let (group, version) = match path.split('/').collect::<Vec<_>>()[..] {
                ["api", version] => ("", version),
                ["apis", group, version] => (group, version),
                _ => return None,
            };
            let custom = catalog.resources().iter().any(|r| r.custom && r.group == group && r.version == version);
            Some((group, version, custom))
        })
        .collect();
    // Built-in group-versions first: a custom resource's definition never takes the name of a built-in one.
    group_versions.sort_by_key(|(_, _, custom)| *custom);
    for (group, version, custom) in group_versions {
        let Some(bytes) = crate::openapi::document(catalog, group, version) else { continue };
        let Ok(v3) = serde_json::from_slice::<Value>(&bytes) else { continue };
        for (name, schema) in v3["components"]["schemas"].as_object().into_iter().flatten() {
            definitions.entry(name.clone()).or_insert_with(|| definition(schema, custom));
        }
        for (name, item) in v3["paths"].as_object().into_iter().flatten() {
            paths.insert(name.clone(), path_item(item));
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::GIT_VERSION},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header",
                                                "description": "Bearer Token authentication"}},
        "security": [{"BearerToken": []}],
    })
}

/// A v3 schema as a Swagger 2.0 definition (see the module's notes); `custom` for a custom resource's.
fn definition(schema: &Value, custom: bool) -> Value {
    let Some(fields) = schema.as_object() else { return schema.clone() };
    if custom && fields.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true)) {
        // Anything goes below: say only what it is for.
        let kept = fields.iter().filter(|(k, _)| k.as_str() == "description" || k.starts_with("x-"));
        return Value::Object(kept.map(|(k, v)| (k.clone(), v.clone())).collect());
    }
    let mut out = Map::new();
    for (key, value) in fields {
        match key.as_str() {
            "nullable" | "anyOf" | "oneOf" | "not" => {}
            "$ref" => {
                let target = value.as_str().unwrap_or_default().replace("#/components/schemas/", "#/definitions/");
                out.insert(key.clone(), json!(target));
            }
            // A single reference with a description beside it, as v3 must write it, is the reference in v2.
            "allOf" => match value.as_array().map(Vec::as_slice) {
                Some([only]) if only.get("$ref").is_some() => {
                    out.extend(definition(only, custom).as_object().cloned().unwrap_or_default());
                }
                _ if custom => {}
                _ => {
                    let all = value.as_array().into_iter().flatten().map(|s| definition(s, custom)).collect();
                    out.insert(key.clone(), Value::Array(all));
                }
            },
            "properties" => {
                let properties = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, s)| (name.clone(), definition(s, custom)))
                    .collect();
                out.insert(key.clone(), Value::Object(properties));
            }
            "items" | "additionalProperties" if value.is_object() => {
                out.insert(key.clone(), definition(value, custom));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    if fields.get("nullable") == Some(&json!(true)) {
        // Swagger 2.0 cannot say "or null": a typed field would refuse the null it allows, so it says no type.
        for key in ["type", "items", "properties"] {
            out.remove(key);
        }
    }
    if out.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        out.insert("type".into(), json!("string"));
        out.insert("format".into(), json!("int-or-string"));
    }
    Value::Object(out)
}

/// A v3 path item in Swagger 2.0: parameters with their type inline, the body a parameter, the answer's schema.
fn path_item(item: &Value) -> Value {
    let mut out = Map::new();
    for (key, value) in item.as_object().into_iter().flatten() {
        if key == "parameters" {
            out.insert(key.clone(), parameters(value));
            continue;
        }
        let mut operation = Map::new();
        let mut params = parameters(&value["parameters"]).as_array().cloned().unwrap_or_default();
        if let Some(body) = value["requestBody"].as_object() {
            let content = body["content"].as_object().cloned().unwrap_or_default();
            let schema = content.values().next().map(|c| definition(&c["schema"], false)).unwrap_or(json!({}));
            params.insert(0, json!({"name": "body", "in": "body", "required": true, "schema": schema}));
            operation.insert("consumes".into(), json!(content.keys().collect::<Vec<_>>()));
        }
        for (field, v) in value.as_object().into_iter().flatten() {
            if field == "operationId" || field.starts_with("x-") {
                operation.insert(field.clone(), v.clone());
            }
        }
        operation.insert("produces".into(), json!(["application/json", "application/yaml"]));
        operation.insert("schemes".into(), json!(["https"]));
        operation.insert("parameters".into(), Value::Array(params));
        let mut responses = Map::new();
        for (code, answer) in value["responses"].as_object().into_iter().flatten() {
            let mut response = json!({"description": answer["description"].clone()});
            if let Some(schema) = answer["content"].as_object().and_then(|c| c.values().next()) {
                response["schema"] = definition(&schema["schema"], false);
            }
            responses.insert(code.clone(), response);
        }
        operation.insert("responses".into(), Value::Object(responses));
        out.insert(key.clone(), Value::Object(operation));
    }
    Value::Object(out)
}

fn parameters(list: &Value) -> Value {
    let converted = list.as_array().into_iter().flatten().map(|p| {
        let mut out = Map::new();
        for (key, value) in p.as_object().into_iter().flatten() {
            if key == "schema" {
                for (field, v) in value.as_object().into_iter().flatten() {
                    out.insert(field.clone(), v.clone());
                }
            } else {
                out.insert(key.clone(), value.clone());
            }
        }
        Value::Object(out)
    });
    Value::Array(converted.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_bodies_and_int_or_string_read_as_swagger_two() {
        let catalog = Catalog::builtin();
        let doc: Value = serde_json::from_slice(&document(&catalog, false)).unwrap();
        assert_eq!(doc["swagger"], "2.0");
        let deployment = &doc["definitions"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            deployment["properties"]["metadata"]["$ref"],
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert_eq!(deployment["x-kubernetes-group-version-kind"][0]["kind"], "Deployment");
        let int_or_string = &doc["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
        assert_eq!((&int_or_string["type"], &int_or_string["format"]), (&json!("string"), &json!("int-or-string")));
        let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        let parameters = patch["parameters"].as_array().unwrap();
        assert_eq!(parameters[0]["in"], "body");
        assert!(
            parameters.iter().any(|p| p["name"] == "fieldValidation" && p["in"] == "query" && p["type"] == "string")
        );
        assert!(!doc.to_string().contains("#/components/"), "every reference rewritten");
        // The review kinds have no PATCH, which is what sends kubectl here.
        let reviews = &doc["paths"]["/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"];
        assert!(reviews.get("patch").is_none() && reviews.get("post").is_some());
        let encoded = document(&catalog, true);
        let decoded = crate::gnostic::Document::decode(encoded.as_slice()).unwrap();
        assert_eq!(decoded.swagger, "2.0");
        assert!(decoded.definitions.unwrap().additional_properties.len() > 100);
    }
}
