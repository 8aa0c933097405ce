//! `/openapi/v2`: the served API as one Swagger 2.0 document, made from the `/openapi/v3` documents
//! ([`crate::openapi`]), in JSON or in the protobuf encoding of gnostic's `openapi_v2.Document`, which is the only one
//! client-go asks for (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`).
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
        let protobuf = pb::document(&swagger).encode_to_vec();
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

/// gnostic's `openapi_v2` messages (`openapiv2/OpenAPIv2.proto`), as much of them as the document uses, and the
/// Swagger JSON written into them.
mod pb {
    use serde_json::Value;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Document {
        #[prost(string, tag = "1")]
        pub swagger: String,
        #[prost(message, optional, tag = "2")]
        pub info: Option<Info>,
        #[prost(string, repeated, tag = "5")]
        pub schemes: Vec<String>,
        #[prost(message, optional, tag = "8")]
        pub paths: Option<Paths>,
        #[prost(message, optional, tag = "9")]
        pub definitions: Option<Definitions>,
        #[prost(message, repeated, tag = "12")]
        pub security: Vec<SecurityRequirement>,
        #[prost(message, optional, tag = "13")]
        pub security_definitions: Option<SecurityDefinitions>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Info {
        #[prost(string, tag = "1")]
        pub title: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Paths {
        #[prost(message, repeated, tag = "2")]
        pub path: Vec<NamedPathItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedPathItem {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<PathItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PathItem {
        #[prost(message, optional, tag = "2")]
        pub get: Option<Operation>,
        #[prost(message, optional, tag = "3")]
        pub put: Option<Operation>,
        #[prost(message, optional, tag = "4")]
        pub post: Option<Operation>,
        #[prost(message, optional, tag = "5")]
        pub delete: Option<Operation>,
        #[prost(message, optional, tag = "8")]
        pub patch: Option<Operation>,
        #[prost(message, repeated, tag = "9")]
        pub parameters: Vec<ParametersItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Operation {
        #[prost(string, tag = "5")]
        pub operation_id: String,
        #[prost(string, repeated, tag = "6")]
        pub produces: Vec<String>,
        #[prost(string, repeated, tag = "7")]
        pub consumes: Vec<String>,
        #[prost(message, repeated, tag = "8")]
        pub parameters: Vec<ParametersItem>,
        #[prost(message, optional, tag = "9")]
        pub responses: Option<Responses>,
        #[prost(string, repeated, tag = "10")]
        pub schemes: Vec<String>,
        #[prost(message, repeated, tag = "13")]
        pub vendor_extension: Vec<NamedAny>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ParametersItem {
        #[prost(message, optional, tag = "1")]
        pub parameter: Option<Parameter>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Parameter {
        #[prost(message, optional, tag = "1")]
        pub body_parameter: Option<BodyParameter>,
        #[prost(message, optional, tag = "2")]
        pub non_body_parameter: Option<NonBodyParameter>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct BodyParameter {
        #[prost(string, tag = "1")]
        pub description: String,
        #[prost(string, tag = "2")]
        pub name: String,
        #[prost(string, tag = "3")]
        pub r#in: String,
        #[prost(bool, tag = "4")]
        pub required: bool,
        #[prost(message, optional, tag = "5")]
        pub schema: Option<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NonBodyParameter {
        #[prost(message, optional, tag = "3")]
        pub query_parameter_sub_schema: Option<QueryParameterSubSchema>,
        #[prost(message, optional, tag = "4")]
        pub path_parameter_sub_schema: Option<PathParameterSubSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct QueryParameterSubSchema {
        #[prost(bool, tag = "1")]
        pub required: bool,
        #[prost(string, tag = "2")]
        pub r#in: String,
        #[prost(string, tag = "3")]
        pub description: String,
        #[prost(string, tag = "4")]
        pub name: String,
        #[prost(string, tag = "6")]
        pub r#type: String,
        #[prost(bool, tag = "20")]
        pub unique_items: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PathParameterSubSchema {
        #[prost(bool, tag = "1")]
        pub required: bool,
        #[prost(string, tag = "2")]
        pub r#in: String,
        #[prost(string, tag = "3")]
        pub description: String,
        #[prost(string, tag = "4")]
        pub name: String,
        #[prost(string, tag = "5")]
        pub r#type: String,
        #[prost(bool, tag = "19")]
        pub unique_items: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Responses {
        #[prost(message, repeated, tag = "1")]
        pub response_code: Vec<NamedResponseValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedResponseValue {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<ResponseValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResponseValue {
        #[prost(message, optional, tag = "1")]
        pub response: Option<Response>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Response {
        #[prost(string, tag = "1")]
        pub description: String,
        #[prost(message, optional, tag = "2")]
        pub schema: Option<SchemaItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SchemaItem {
        #[prost(message, optional, tag = "1")]
        pub schema: Option<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Definitions {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedSchema {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Schema {
        #[prost(string, tag = "1")]
        pub r#ref: String,
        #[prost(string, tag = "2")]
        pub format: String,
        #[prost(string, tag = "3")]
        pub title: String,
        #[prost(string, tag = "4")]
        pub description: String,
        #[prost(message, optional, tag = "5")]
        pub default: Option<Any>,
        #[prost(double, tag = "6")]
        pub multiple_of: f64,
        #[prost(double, tag = "7")]
        pub maximum: f64,
        #[prost(bool, tag = "8")]
        pub exclusive_maximum: bool,
        #[prost(double, tag = "9")]
        pub minimum: f64,
        #[prost(bool, tag = "10")]
        pub exclusive_minimum: bool,
        #[prost(int64, tag = "11")]
        pub max_length: i64,
        #[prost(int64, tag = "12")]
        pub min_length: i64,
        #[prost(string, tag = "13")]
        pub pattern: String,
        #[prost(int64, tag = "14")]
        pub max_items: i64,
        #[prost(int64, tag = "15")]
        pub min_items: i64,
        #[prost(bool, tag = "16")]
        pub unique_items: bool,
        #[prost(int64, tag = "17")]
        pub max_properties: i64,
        #[prost(int64, tag = "18")]
        pub min_properties: i64,
        #[prost(string, repeated, tag = "19")]
        pub required: Vec<String>,
        #[prost(message, repeated, tag = "20")]
        pub r#enum: Vec<Any>,
        #[prost(message, optional, boxed, tag = "21")]
        pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
        #[prost(message, optional, tag = "22")]
        pub r#type: Option<TypeItem>,
        #[prost(message, optional, tag = "23")]
        pub items: Option<ItemsItem>,
        #[prost(message, repeated, tag = "24")]
        pub all_of: Vec<Schema>,
        #[prost(message, optional, tag = "25")]
        pub properties: Option<Properties>,
        #[prost(bool, tag = "27")]
        pub read_only: bool,
        #[prost(message, optional, tag = "30")]
        pub example: Option<Any>,
        #[prost(message, repeated, tag = "31")]
        pub vendor_extension: Vec<NamedAny>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AdditionalPropertiesItem {
        #[prost(message, optional, tag = "1")]
        pub schema: Option<Schema>,
        #[prost(bool, optional, tag = "2")]
        pub boolean: Option<bool>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeItem {
        #[prost(string, repeated, tag = "1")]
        pub value: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ItemsItem {
        #[prost(message, repeated, tag = "1")]
        pub schema: Vec<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Properties {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSchema>,
    }

    /// A value as YAML text (JSON is YAML).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        #[prost(string, tag = "2")]
        pub yaml: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedAny {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<Any>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SecurityRequirement {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedStringArray>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedStringArray {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<StringArray>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StringArray {
        #[prost(string, repeated, tag = "1")]
        pub value: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SecurityDefinitions {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSecurityDefinitionsItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedSecurityDefinitionsItem {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<SecurityDefinitionsItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SecurityDefinitionsItem {
        #[prost(message, optional, tag = "2")]
        pub api_key_security: Option<ApiKeySecurity>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ApiKeySecurity {
        #[prost(string, tag = "1")]
        pub r#type: String,
        #[prost(string, tag = "2")]
        pub name: String,
        #[prost(string, tag = "3")]
        pub r#in: String,
        #[prost(string, tag = "4")]
        pub description: String,
    }

    fn text(value: &Value) -> String {
        value.as_str().unwrap_or_default().to_string()
    }

    fn strings(value: &Value) -> Vec<String> {
        value.as_array().into_iter().flatten().map(text).collect()
    }

    fn any(value: &Value) -> Option<Any> {
        (!value.is_null()).then(|| Any { yaml: value.to_string() })
    }

    fn extensions(object: &Value) -> Vec<NamedAny> {
        let fields = object.as_object().into_iter().flatten();
        fields.filter(|(k, _)| k.starts_with("x-")).map(|(k, v)| NamedAny { name: k.clone(), value: any(v) }).collect()
    }

    /// The Swagger JSON `doc` as the protobuf message.
    pub fn document(doc: &Value) -> Document {
        let paths = doc["paths"].as_object().into_iter().flatten();
        let definitions = doc["definitions"].as_object().into_iter().flatten();
        Document {
            swagger: text(&doc["swagger"]),
            info: Some(Info { title: text(&doc["info"]["title"]), version: text(&doc["info"]["version"]) }),
            schemes: Vec::new(),
            paths: Some(Paths {
                path: paths
                    .map(|(name, item)| NamedPathItem { name: name.clone(), value: Some(path_item(item)) })
                    .collect(),
            }),
            definitions: Some(Definitions {
                additional_properties: definitions
                    .map(|(name, s)| NamedSchema { name: name.clone(), value: Some(schema(s)) })
                    .collect(),
            }),
            security: vec![SecurityRequirement {
                additional_properties: vec![NamedStringArray {
                    name: "BearerToken".into(),
                    value: Some(StringArray::default()),
                }],
            }],
            security_definitions: Some(SecurityDefinitions {
                additional_properties: vec![NamedSecurityDefinitionsItem {
                    name: "BearerToken".into(),
                    value: Some(SecurityDefinitionsItem {
                        api_key_security: Some(ApiKeySecurity {
                            r#type: "apiKey".into(),
                            name: "authorization".into(),
                            r#in: "header".into(),
                            description: "Bearer Token authentication".into(),
                        }),
                    }),
                }],
            }),
        }
    }

    fn path_item(item: &Value) -> PathItem {
        let operation = |verb: &str| item.get(verb).map(operation);
        PathItem {
            get: operation("get"),
            put: operation("put"),
            post: operation("post"),
            delete: operation("delete"),
            patch: operation("patch"),
            parameters: item["parameters"].as_array().into_iter().flatten().map(parameter).collect(),
        }
    }

    fn operation(op: &Value) -> Operation {
        let responses = op["responses"].as_object().into_iter().flatten();
        Operation {
            operation_id: text(&op["operationId"]),
            produces: strings(&op["produces"]),
            consumes: strings(&op["consumes"]),
            parameters: op["parameters"].as_array().into_iter().flatten().map(parameter).collect(),
            responses: Some(Responses {
                response_code: responses
                    .map(|(code, answer)| NamedResponseValue {
                        name: code.clone(),
                        value: Some(ResponseValue {
                            response: Some(Response {
                                description: text(&answer["description"]),
                                schema: answer.get("schema").map(|s| SchemaItem { schema: Some(schema(s)) }),
                            }),
                        }),
                    })
                    .collect(),
            }),
            schemes: strings(&op["schemes"]),
            vendor_extension: extensions(op),
        }
    }

    fn parameter(p: &Value) -> ParametersItem {
        let parameter = if p["in"] == "body" {
            Parameter {
                body_parameter: Some(BodyParameter {
                    description: text(&p["description"]),
                    name: text(&p["name"]),
                    r#in: "body".into(),
                    required: p["required"] == true,
                    schema: Some(schema(&p["schema"])),
                }),
                non_body_parameter: None,
            }
        } else {
            let (required, r#in, description, name, r#type, unique_items) = (
                p["required"] == true,
                text(&p["in"]),
                text(&p["description"]),
                text(&p["name"]),
                text(&p["type"]),
                p["uniqueItems"] == true,
            );
            let non_body = if p["in"] == "path" {
                NonBodyParameter {
                    path_parameter_sub_schema: Some(PathParameterSubSchema {
                        required,
                        r#in,
                        description,
                        name,
                        r#type,
                        unique_items,
                    }),
                    query_parameter_sub_schema: None,
                }
            } else {
                NonBodyParameter {
                    query_parameter_sub_schema: Some(QueryParameterSubSchema {
                        required,
                        r#in,
                        description,
                        name,
                        r#type,
                        unique_items,
                    }),
                    path_parameter_sub_schema: None,
                }
            };
            Parameter { body_parameter: None, non_body_parameter: Some(non_body) }
        };
        ParametersItem { parameter: Some(parameter) }
    }

    fn schema(s: &Value) -> Schema {
        let number = |key: &str| s[key].as_f64().unwrap_or_default();
        let integer = |key: &str| s[key].as_i64().unwrap_or_default();
        let flag = |key: &str| s[key] == true;
        let additional = match &s["additionalProperties"] {
            Value::Bool(b) => Some(Box::new(AdditionalPropertiesItem { schema: None, boolean: Some(*b) })),
            Value::Object(_) => Some(Box::new(AdditionalPropertiesItem {
                schema: Some(schema(&s["additionalProperties"])),
                boolean: None,
            })),
            _ => None,
        };
        Schema {
            r#ref: text(&s["$ref"]),
            format: text(&s["format"]),
            title: text(&s["title"]),
            description: text(&s["description"]),
            default: any(&s["default"]),
            multiple_of: number("multipleOf"),
            maximum: number("maximum"),
            exclusive_maximum: flag("exclusiveMaximum"),
            minimum: number("minimum"),
            exclusive_minimum: flag("exclusiveMinimum"),
            max_length: integer("maxLength"),
            min_length: integer("minLength"),
            pattern: text(&s["pattern"]),
            max_items: integer("maxItems"),
            min_items: integer("minItems"),
            unique_items: flag("uniqueItems"),
            max_properties: integer("maxProperties"),
            min_properties: integer("minProperties"),
            required: strings(&s["required"]),
            r#enum: s["enum"].as_array().into_iter().flatten().filter_map(any).collect(),
            additional_properties: additional,
            r#type: s["type"].as_str().map(|t| TypeItem { value: vec![t.to_string()] }),
            items: s.get("items").filter(|i| i.is_object()).map(|i| ItemsItem { schema: vec![schema(i)] }),
            all_of: s["allOf"].as_array().into_iter().flatten().map(schema).collect(),
            properties: s["properties"].as_object().map(|p| Properties {
                additional_properties: p
                    .iter()
                    .map(|(name, v)| NamedSchema { name: name.clone(), value: Some(schema(v)) })
                    .collect(),
            }),
            read_only: flag("readOnly"),
            example: any(&s["example"]),
            vendor_extension: extensions(s),
        }
    }
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
        let decoded = pb::Document::decode(encoded.as_slice()).unwrap();
        assert_eq!(decoded.swagger, "2.0");
        assert!(decoded.definitions.unwrap().additional_properties.len() > 100);
    }
}
