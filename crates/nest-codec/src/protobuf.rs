//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), which client-go's typed
//! clients send — kubectl's `create namespace|configmap|secret|deployment|…` among them.
//!
//! The wire format is `k8s\0` followed by a `runtime.Unknown` message whose `typeMeta` names the kind and whose `raw`
//! holds the object's own message. The message is decoded with [k8s-pb](https://docs.rs/k8s-pb)'s generated types,
//! which know every field number. Those types carry no JSON names, so the decoded message is read back through its
//! `Debug` form (field names, `Some(…)`, lists, maps and nested messages, all unambiguous) and turned into the JSON
//! object, with each field's JSON name, and the JSON form of the types whose protobuf form differs (times,
//! quantities, int-or-strings, bytes, raw JSON), taken from the kind's OpenAPI schema ([`nest_openapi`]).
//!
//! Responses are always JSON: every client that sends protobuf also accepts JSON.

use k8s_pb::api::{
    apps, batch, coordination, core, discovery, events, networking, node, policy, rbac, scheduling, storage,
};
use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions;
use nest_openapi::KindSchema;
use nest_registry::{ApiError, Result};
use prost::Message;
use serde_json::{Map, Value, json};

/// The four bytes every Kubernetes protobuf body starts with.
const MAGIC: &[u8] = b"k8s\0";

type Decode = fn(&[u8]) -> Result<String, prost::DecodeError>;

fn debug<T: Message + Default + std::fmt::Debug>(bytes: &[u8]) -> Result<String, prost::DecodeError> {
    T::decode(bytes).map(|message| format!("{message:?}"))
}

macro_rules! messages {
    ($(($group:literal, $version:literal, $kind:literal, $ty:ty)),* $(,)?) => {
        /// `(group, version, kind)` of every message nest decodes.
        const MESSAGES: &[(&str, &str, &str, Decode)] = &[$(($group, $version, $kind, debug::<$ty>),)*];
    };
}

messages!(
    ("", "v1", "Namespace", core::v1::Namespace),
    ("", "v1", "Pod", core::v1::Pod),
    ("", "v1", "Service", core::v1::Service),
    ("", "v1", "Endpoints", core::v1::Endpoints),
    ("", "v1", "ConfigMap", core::v1::ConfigMap),
    ("", "v1", "Secret", core::v1::Secret),
    ("", "v1", "ServiceAccount", core::v1::ServiceAccount),
    ("", "v1", "Event", core::v1::Event),
    ("", "v1", "Node", core::v1::Node),
    ("", "v1", "PersistentVolumeClaim", core::v1::PersistentVolumeClaim),
    ("", "v1", "PersistentVolume", core::v1::PersistentVolume),
    ("", "v1", "ResourceQuota", core::v1::ResourceQuota),
    ("", "v1", "LimitRange", core::v1::LimitRange),
    ("", "v1", "ReplicationController", core::v1::ReplicationController),
    ("apps", "v1", "Deployment", apps::v1::Deployment),
    ("apps", "v1", "ReplicaSet", apps::v1::ReplicaSet),
    ("apps", "v1", "StatefulSet", apps::v1::StatefulSet),
    ("apps", "v1", "DaemonSet", apps::v1::DaemonSet),
    ("apps", "v1", "ControllerRevision", apps::v1::ControllerRevision),
    ("batch", "v1", "Job", batch::v1::Job),
    ("batch", "v1", "CronJob", batch::v1::CronJob),
    ("coordination.k8s.io", "v1", "Lease", coordination::v1::Lease),
    ("rbac.authorization.k8s.io", "v1", "Role", rbac::v1::Role),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", rbac::v1::RoleBinding),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", rbac::v1::ClusterRole),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", rbac::v1::ClusterRoleBinding),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", apiextensions::v1::CustomResourceDefinition),
    ("discovery.k8s.io", "v1", "EndpointSlice", discovery::v1::EndpointSlice),
    ("networking.k8s.io", "v1", "Ingress", networking::v1::Ingress),
    ("networking.k8s.io", "v1", "IngressClass", networking::v1::IngressClass),
    ("networking.k8s.io", "v1", "NetworkPolicy", networking::v1::NetworkPolicy),
    ("storage.k8s.io", "v1", "StorageClass", storage::v1::StorageClass),
    ("events.k8s.io", "v1", "Event", events::v1::Event),
    ("policy", "v1", "PodDisruptionBudget", policy::v1::PodDisruptionBudget),
    ("scheduling.k8s.io", "v1", "PriorityClass", scheduling::v1::PriorityClass),
    ("node.k8s.io", "v1", "RuntimeClass", node::v1::RuntimeClass),
    (
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        k8s_pb::api::certificates::v1::CertificateSigningRequest
    ),
    ("autoscaling", "v1", "Scale", k8s_pb::api::autoscaling::v1::Scale),
    ("authorization.k8s.io", "v1", "SelfSubjectAccessReview", k8s_pb::api::authorization::v1::SelfSubjectAccessReview),
    ("authorization.k8s.io", "v1", "SelfSubjectRulesReview", k8s_pb::api::authorization::v1::SelfSubjectRulesReview),
    ("authorization.k8s.io", "v1", "SubjectAccessReview", k8s_pb::api::authorization::v1::SubjectAccessReview),
    (
        "authorization.k8s.io",
        "v1",
        "LocalSubjectAccessReview",
        k8s_pb::api::authorization::v1::LocalSubjectAccessReview
    ),
    ("authentication.k8s.io", "v1", "SelfSubjectReview", k8s_pb::api::authentication::v1::SelfSubjectReview),
    ("authentication.k8s.io", "v1", "TokenRequest", k8s_pb::api::authentication::v1::TokenRequest),
    ("authentication.k8s.io", "v1", "TokenReview", k8s_pb::api::authentication::v1::TokenReview),
    ("meta.k8s.io", "v1", "DeleteOptions", k8s_pb::apimachinery::pkg::apis::meta::v1::DeleteOptions),
);

fn bad(message: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("the request body is not a valid Kubernetes protobuf message: {message}"))
}

/// Decodes a protobuf body into the JSON object it stands for, `apiVersion` and `kind` included.
pub fn decode(bytes: &[u8]) -> Result<Value> {
    let envelope = bytes.strip_prefix(MAGIC).ok_or_else(|| bad("it does not start with k8s\\0"))?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(envelope).map_err(bad)?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    if kind.is_empty() || api_version.is_empty() {
        return Err(bad("it names no apiVersion and kind"));
    }
    if unknown.content_encoding.as_deref().is_some_and(|e| !e.is_empty()) {
        return Err(bad("content encodings are not supported"));
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    // DeleteOptions travel under whichever group the request is for.
    let group = if kind == "DeleteOptions" { "meta.k8s.io" } else { group };
    let &(_, _, _, decode) =
        MESSAGES.iter().find(|(g, v, k, _)| *g == group && *v == version && *k == kind).ok_or_else(|| {
            ApiError::unsupported_media_type(format!(
                "{kind} in {api_version} cannot be sent as protobuf to nest; send it as application/json"
            ))
        })?;
    let schema = nest_openapi::kind_schema(group, version, &kind)
        .ok_or_else(|| ApiError::internal(format!("no schema for {api_version} {kind}")))?;
    let text = decode(unknown.raw.as_deref().unwrap_or_default()).map_err(bad)?;
    let tree = Parser { text: text.as_bytes(), at: 0 }.value().map_err(ApiError::internal)?;
    let mut obj = convert(&tree, &schema.root, &schema).unwrap_or_else(|| json!({}));
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(kind));
    }
    Ok(obj)
}

/// A value in a message's `Debug` form.
#[derive(Debug, PartialEq)]
enum Tree {
    /// `None`, or an absent field.
    Absent,
    Str(String),
    /// A number, as written.
    Num(String),
    Bool(bool),
    List(Vec<Tree>),
    Map(Vec<(Tree, Tree)>),
    /// A message: its fields by Rust name (`r#` stripped).
    Message(Vec<(String, Tree)>),
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, token: &str) -> bool {
        if self.text[self.at..].starts_with(token.as_bytes()) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), String> {
        if self.eat(token) { Ok(()) } else { Err(format!("expected {token:?} at {} of the decoded message", self.at)) }
    }

    fn ident(&mut self) -> String {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'#') {
            self.at += 1;
        }
        let word = String::from_utf8_lossy(&self.text[start..self.at]).into_owned();
        word.strip_prefix("r#").map(str::to_string).unwrap_or(word)
    }

    fn value(&mut self) -> Result<Tree, String> {
        match self.peek() {
            Some(b'"') => self.string().map(Tree::Str),
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                while !self.eat("]") {
                    items.push(self.value()?);
                    self.eat(", ");
                }
                Ok(Tree::List(items))
            }
            Some(b'{') => {
                self.at += 1;
                let mut entries = Vec::new();
                while !self.eat("}") {
                    let key = self.value()?;
                    self.expect(": ")?;
                    entries.push((key, self.value()?));
                    self.eat(", ");
                }
                Ok(Tree::Map(entries))
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => {
                let start = self.at;
                while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.')) {
                    self.at += 1;
                }
                Ok(Tree::Num(String::from_utf8_lossy(&self.text[start..self.at]).into_owned()))
            }
            _ => {
                let word = self.ident();
                match word.as_str() {
                    "None" => Ok(Tree::Absent),
                    "true" => Ok(Tree::Bool(true)),
                    "false" => Ok(Tree::Bool(false)),
                    "NaN" | "inf" => Ok(Tree::Num(word)),
                    "Some" => {
                        self.expect("(")?;
                        let inner = self.value()?;
                        self.expect(")")?;
                        Ok(inner)
                    }
                    "" => Err(format!("unexpected input at {} of the decoded message", self.at)),
                    _ => {
                        // A message: `Name { field: value, … }`, or just `Name` when it has no fields.
                        let mut fields = Vec::new();
                        if self.eat(" { ") {
                            while !self.eat(" }") {
                                let name = self.ident();
                                self.expect(": ")?;
                                fields.push((name, self.value()?));
                                self.eat(", ");
                            }
                        }
                        Ok(Tree::Message(fields))
                    }
                }
            }
        }
    }

    /// A string in Rust's `Debug` escaping.
    fn string(&mut self) -> Result<String, String> {
        self.expect("\"")?;
        let mut out = Vec::new();
        loop {
            let c = self.peek().ok_or("an unterminated string")?;
            self.at += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let escaped = self.peek().ok_or("an unterminated escape")?;
                    self.at += 1;
                    match escaped {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'0' => out.push(0),
                        b'u' => {
                            self.expect("{")?;
                            let start = self.at;
                            while self.peek().is_some_and(|c| c != b'}') {
                                self.at += 1;
                            }
                            let hex = std::str::from_utf8(&self.text[start..self.at]).map_err(|e| e.to_string())?;
                            self.expect("}")?;
                            let ch =
                                u32::from_str_radix(hex, 16).ok().and_then(char::from_u32).ok_or("a bad escape")?;
                            out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                        }
                        other => out.push(other),
                    }
                }
                other => out.push(other),
            }
        }
        String::from_utf8(out).map_err(|e| e.to_string())
    }
}

/// Field names match their JSON names but for case and underscores (`cluster_ip` is `clusterIP`).
fn same_name(rust: &str, json: &str) -> bool {
    let mut a = rust.chars().filter(|c| *c != '_').map(|c| c.to_ascii_lowercase());
    let mut b = json.chars().map(|c| c.to_ascii_lowercase());
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (x, y) if x == y => continue,
            _ => return false,
        }
    }
}

fn ref_name(schema: &Value) -> &str {
    schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix(nest_openapi::REF_PREFIX)).unwrap_or("")
}

fn field<'t>(fields: &'t [(String, Tree)], name: &str) -> &'t Tree {
    fields.iter().find(|(n, _)| n == name).map_or(&Tree::Absent, |(_, t)| t)
}

fn number(tree: &Tree) -> Option<i64> {
    match tree {
        Tree::Num(n) => n.parse().ok(),
        _ => None,
    }
}

fn bytes(tree: &Tree) -> Option<Vec<u8>> {
    match tree {
        Tree::List(items) => items.iter().map(|i| number(i).and_then(|n| u8::try_from(n).ok())).collect(),
        _ => None,
    }
}

/// A list's element or a map's value: an empty string there is a value the client sent (`apiGroups: [""]`, a label
/// `role: ""`), not an unset field.
fn element(tree: &Tree, schema: &Value, kind: &KindSchema) -> Option<Value> {
    match tree {
        Tree::Str(s) if s.is_empty() => Some(json!("")),
        _ => convert(tree, schema, kind),
    }
}

/// The JSON for `tree` under `schema` (`None`: absent, or empty as Go's `omitempty` leaves it out).
fn convert(tree: &Tree, schema: &Value, kind: &KindSchema) -> Option<Value> {
    let name = ref_name(schema);
    let resolved = kind.resolve(schema);
    match tree {
        Tree::Absent => None,
        // Go encodes every non-pointer field, so an empty string is a field the client did not set.
        Tree::Str(s) if s.is_empty() => None,
        Tree::Str(s) => Some(json!(s)),
        Tree::Bool(b) => Some(json!(b)),
        Tree::Num(n) => n.parse::<i64>().map(Value::from).ok().or_else(|| n.parse::<f64>().ok().map(Value::from)),
        Tree::List(items) => {
            if resolved.get("format").and_then(Value::as_str) == Some("byte") {
                return bytes(tree).map(|b| json!(nest_core::base64::encode(&b)));
            }
            let item_schema = resolved.get("items").unwrap_or(&Value::Null);
            let items: Vec<Value> = items.iter().filter_map(|i| element(i, item_schema, kind)).collect();
            (!items.is_empty()).then_some(Value::Array(items))
        }
        Tree::Map(entries) => {
            let value_schema = resolved.get("additionalProperties").unwrap_or(&Value::Null);
            let map: Map<String, Value> = entries
                .iter()
                .filter_map(|(k, v)| match k {
                    Tree::Str(key) => element(v, value_schema, kind).map(|v| (key.clone(), v)),
                    _ => None,
                })
                .collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
        Tree::Message(fields) => {
            if name.ends_with("meta.v1.Time") || name.ends_with("meta.v1.MicroTime") {
                let seconds = number(field(fields, "seconds")).unwrap_or(0).max(0);
                if seconds == 0 && number(field(fields, "nanos")).unwrap_or(0) == 0 {
                    return None; // Go's zero time: unset.
                }
                let mut text = nest_core::clock::rfc3339(seconds.max(0) as u64);
                if name.ends_with("MicroTime") {
                    let micros = number(field(fields, "nanos")).unwrap_or(0) / 1000;
                    text = format!("{}.{micros:06}Z", text.trim_end_matches('Z'));
                }
                return Some(json!(text));
            }
            if name.ends_with("meta.v1.Duration") {
                return number(field(fields, "duration")).map(|nanos| json!(format!("{nanos}ns")));
            }
            if resolved.get(nest_openapi::QUANTITY).is_some() {
                return convert(field(fields, "string"), &Value::Null, kind);
            }
            if resolved.get("x-kubernetes-int-or-string").is_some() {
                return match number(field(fields, "type")) {
                    Some(1) => convert(field(fields, "str_val"), &Value::Null, kind),
                    // The zero value, which Go sends for a field left unset (a Service port's targetPort).
                    _ => number(field(fields, "int_val")).filter(|&n| n != 0).map(Value::from),
                };
            }
            if resolved.get("x-kubernetes-preserve-unknown-fields").is_some() && resolved.get("properties").is_none() {
                // Raw JSON (RawExtension, FieldsV1, a CRD's JSON values).
                let raw = bytes(field(fields, "raw"))?;
                return serde_json::from_slice(&raw).ok();
            }
            let properties = resolved.get("properties").and_then(Value::as_object);
            let mut map = Map::new();
            for (rust_name, value) in fields {
                let found = properties.and_then(|p| p.iter().find(|(json_name, _)| same_name(rust_name, json_name)));
                match (found, value) {
                    (Some((json_name, child_schema)), _) => {
                        if let Some(value) = convert(value, child_schema, kind) {
                            map.insert(json_name.clone(), value);
                        }
                    }
                    // A struct Go embeds inline (`json:",inline"`) is a nested message in protobuf: its fields are
                    // this object's (an Ingress rule's `ingressRuleValue`, a Volume's `volumeSource`).
                    (None, Tree::Message(_)) => {
                        if let Some(Value::Object(inline)) = convert(value, schema, kind) {
                            map.extend(inline);
                        }
                    }
                    (None, _) => {
                        if let Some(value) = convert(value, &Value::Null, kind) {
                            map.insert(camel(rust_name), value);
                        }
                    }
                }
            }
            Some(Value::Object(map))
        }
    }
}

fn camel(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        [MAGIC.to_vec(), unknown.encode_to_vec()].concat()
    }

    /// kubectl create role --resource=pods sends `apiGroups: [""]`: the core group, not an absent field; and a label
    /// with an empty value is a label.
    #[test]
    fn empty_strings_in_lists_and_maps_are_values() {
        let mut labels = std::collections::BTreeMap::new();
        labels.insert("node-role.kubernetes.io/control-plane".to_string(), String::new());
        let role = rbac::v1::Role {
            metadata: Some(ObjectMeta { name: Some("reader".into()), labels, ..Default::default() }),
            rules: vec![rbac::v1::PolicyRule {
                verbs: vec!["get".into()],
                api_groups: vec![String::new()],
                resources: vec!["pods".into()],
                ..Default::default()
            }],
        };
        let obj = decode(&envelope("rbac.authorization.k8s.io/v1", "Role", role.encode_to_vec())).unwrap();
        assert_eq!(obj["rules"], json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]));
        assert_eq!(obj["metadata"]["labels"], json!({"node-role.kubernetes.io/control-plane": ""}));
    }

    #[test]
    fn a_config_map_with_metadata_and_binary_data() {
        let mut cm = core::v1::ConfigMap {
            metadata: Some(ObjectMeta {
                name: Some("x\"y\n\u{1}é".into()),
                namespace: Some("default".into()),
                creation_timestamp: Some(Time { seconds: Some(86_400), nanos: None }),
                ..Default::default()
            }),
            ..Default::default()
        };
        cm.data.insert("a".into(), "b".into());
        cm.binary_data.insert("bin".into(), vec![1, 2, 255]);
        let obj = decode(&envelope("v1", "ConfigMap", cm.encode_to_vec())).unwrap();
        assert_eq!(
            obj,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x\"y\n\u{1}é", "namespace": "default", "creationTimestamp": "1970-01-02T00:00:00Z"},
                "data": {"a": "b"}, "binaryData": {"bin": "AQL/"},
            })
        );
    }

    #[test]
    fn services_and_deployments_get_their_json_names_and_forms() {
        let svc = core::v1::Service {
            spec: Some(core::v1::ServiceSpec {
                cluster_ip: Some("10.0.0.1".into()),
                ports: vec![core::v1::ServicePort {
                    port: Some(80),
                    target_port: Some(IntOrString { r#type: Some(1), int_val: None, str_val: Some("http".into()) }),
                    ..Default::default()
                }],
                r#type: Some("ClusterIP".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let obj = decode(&envelope("v1", "Service", svc.encode_to_vec())).unwrap();
        assert_eq!(
            obj["spec"],
            json!({"clusterIP": "10.0.0.1", "type": "ClusterIP", "ports": [{"port": 80, "targetPort": "http"}]})
        );

        let mut container =
            core::v1::Container { name: Some("web".into()), image: Some("nginx".into()), ..Default::default() };
        let mut limits = std::collections::BTreeMap::new();
        limits.insert(
            "cpu".to_string(),
            k8s_pb::apimachinery::pkg::api::resource::Quantity { string: Some("500m".into()) },
        );
        container.resources = Some(core::v1::ResourceRequirements { limits, ..Default::default() });
        let deployment = apps::v1::Deployment {
            spec: Some(apps::v1::DeploymentSpec {
                replicas: Some(3),
                template: Some(core::v1::PodTemplateSpec {
                    spec: Some(core::v1::PodSpec { containers: vec![container], ..Default::default() }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let obj = decode(&envelope("apps/v1", "Deployment", deployment.encode_to_vec())).unwrap();
        assert_eq!(obj["spec"]["replicas"], 3);
        assert_eq!(
            obj["spec"]["template"]["spec"]["containers"][0],
            json!({"name": "web", "image": "nginx", "resources": {"limits": {"cpu": "500m"}}})
        );
    }

    #[test]
    fn anything_else_is_a_clear_error() {
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code, 400);
        let unknown_kind = envelope("example.com/v1", "Widget", Vec::new());
        assert_eq!(decode(&unknown_kind).unwrap_err().code, 415);
        let garbage = envelope("v1", "ConfigMap", vec![0x0a, 0xff, 0x01]);
        assert_eq!(decode(&garbage).unwrap_err().code, 400);
    }
}
