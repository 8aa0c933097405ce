//! gnostic's `openapi_v2` messages (`github.com/google/gnostic-models`, `openapiv2/OpenAPIv2.proto`), written by
//! hand with prost's derive: only as much of them as [`crate::openapi_v2`]'s document uses, so the crate needs no
//! `.proto` files or build script. [`document`] writes the Swagger JSON into them.
//!
//! The field tags are gnostic's; a message or field this file leaves out is absent from the encoding, which a
//! protobuf reader takes as unset.

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

// === The Swagger JSON as messages ===

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
        Value::Object(_) => {
            Some(Box::new(AdditionalPropertiesItem { schema: Some(schema(&s["additionalProperties"])), boolean: None }))
        }
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
