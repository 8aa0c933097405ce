//! The OpenAPI v3 schemas of the built-in kinds nest serves, as Kubernetes 1.33 publishes them.
//!
//! They are not written here: [k8s-openapi](https://docs.rs/k8s-openapi) generates Rust types, with their JSON
//! schemas, from the Kubernetes OpenAPI document, and [`kind_schema`] asks [`schemars`] for the schema of one kind's
//! type and every definition it references. The registry checks request bodies against them (types, unknown fields);
//! `/openapi/v3` can serve them.
//!
//! A kind's schema is generated the first time it is asked for and kept. Descriptions are dropped (they are most of
//! the document and validation has no use for them).

pub mod list_meta;
pub mod patch_meta;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};

use k8s_openapi::Resource;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

/// Where references point: `{"$ref": "#/components/schemas/<name>"}`.
pub const REF_PREFIX: &str = "#/components/schemas/";

/// The schema of `resource.Quantity` is replaced by `{"x-nest-quantity": true}`: Kubernetes decodes a quantity from a
/// string or from any JSON number (`cpu: 0.5`), which no OpenAPI type says.
pub const QUANTITY: &str = "x-nest-quantity";

/// A CRD schema's `default`, `example` and `enum` values: any JSON value.
const ANY_JSON: &str = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON";

/// One kind's schema: the root (a reference into `definitions`) and every definition reachable from it.
#[derive(Debug)]
pub struct KindSchema {
    pub root: Value,
    pub definitions: Map<String, Value>,
}

impl KindSchema {
    /// Follows `schema`'s `$ref`, if it has one, to the definition it names.
    pub fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        let mut schema = schema;
        // Definitions may be references themselves; a bound keeps a malformed cycle from looping.
        for _ in 0..8 {
            match schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix(REF_PREFIX)) {
                Some(name) => match self.definitions.get(name) {
                    Some(target) => schema = target,
                    None => break,
                },
                None => break,
            }
        }
        schema
    }

    /// Like [`KindSchema::resolve`], with the name of the definition reached (`None` for an inline schema).
    pub fn resolve_named<'a>(&'a self, schema: &'a Value) -> (Option<&'a str>, &'a Value) {
        let mut schema = schema;
        let mut name = None;
        for _ in 0..8 {
            match schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix(REF_PREFIX)) {
                Some(target) => match self.definitions.get_key_value(target) {
                    Some((key, definition)) => {
                        name = Some(key.as_str());
                        schema = definition;
                    }
                    None => break,
                },
                None => break,
            }
        }
        (name, schema)
    }
}

type Generate = fn() -> KindSchema;
type Describe = fn() -> (String, Map<String, Value>);

macro_rules! kinds {
    ($($ty:ty),* $(,)?) => {
        /// `(group, version, kind)` of every kind with a schema, and how to generate it.
        const KINDS: &[(&str, &str, &str, Generate, Describe)] = &[
            $((<$ty as Resource>::GROUP, <$ty as Resource>::VERSION, <$ty as Resource>::KIND, generate::<$ty>, describe::<$ty>),)*
            // Not a resource, but a body clients send (with DELETE).
            ("meta.k8s.io", "v1", "DeleteOptions", generate::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>,
             describe::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>),
        ];
    };
}

use k8s_openapi::api::{
    apps, batch, coordination, core, discovery, events, networking, policy, rbac, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;

kinds!(
    core::v1::Namespace,
    core::v1::Pod,
    core::v1::Service,
    core::v1::Endpoints,
    core::v1::ConfigMap,
    core::v1::Secret,
    core::v1::ServiceAccount,
    core::v1::Event,
    core::v1::Node,
    core::v1::PersistentVolumeClaim,
    core::v1::PersistentVolume,
    core::v1::ResourceQuota,
    core::v1::LimitRange,
    core::v1::ReplicationController,
    apps::v1::Deployment,
    apps::v1::ReplicaSet,
    apps::v1::StatefulSet,
    apps::v1::DaemonSet,
    apps::v1::ControllerRevision,
    batch::v1::Job,
    batch::v1::CronJob,
    coordination::v1::Lease,
    rbac::v1::Role,
    rbac::v1::RoleBinding,
    rbac::v1::ClusterRole,
    rbac::v1::ClusterRoleBinding,
    apiextensions::v1::CustomResourceDefinition,
    discovery::v1::EndpointSlice,
    networking::v1::Ingress,
    networking::v1::IngressClass,
    networking::v1::NetworkPolicy,
    storage::v1::StorageClass,
    events::v1::Event,
    policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
    k8s_openapi::api::node::v1::RuntimeClass,
    k8s_openapi::api::certificates::v1::CertificateSigningRequest,
    k8s_openapi::api::autoscaling::v1::Scale,
    k8s_openapi::api::authorization::v1::SelfSubjectAccessReview,
    k8s_openapi::api::authorization::v1::SelfSubjectRulesReview,
    k8s_openapi::api::authorization::v1::SubjectAccessReview,
    k8s_openapi::api::authorization::v1::LocalSubjectAccessReview,
    k8s_openapi::api::authentication::v1::SelfSubjectReview,
    k8s_openapi::api::authentication::v1::TokenRequest,
    k8s_openapi::api::authentication::v1::TokenReview,
);

/// `(group, version, kind)`.
type Gvk = (&'static str, &'static str, &'static str);

/// Where each kind sits in [`KINDS`], built once.
static INDEX: LazyLock<HashMap<Gvk, usize>> =
    LazyLock::new(|| KINDS.iter().enumerate().map(|(i, &(g, v, k, _, _))| ((g, v, k), i)).collect());

/// Each kind's schema once generated, by its place in [`KINDS`]: read without a lock once it is there.
static GENERATED: LazyLock<Vec<OnceLock<Arc<KindSchema>>>> =
    LazyLock::new(|| KINDS.iter().map(|_| OnceLock::new()).collect());

/// The schema of `group/version, Kind=kind` (`group` empty for the core group), if it is a built-in kind nest knows.
pub fn kind_schema(group: &str, version: &str, kind: &str) -> Option<Arc<KindSchema>> {
    let &at = INDEX.get(&(group, version, kind))?;
    let generate = KINDS[at].3;
    Some(GENERATED[at].get_or_init(|| Arc::new(generate())).clone())
}

/// ObjectMeta's schema (its root is a reference to it), for the metadata of kinds with no schema of their own here.
pub fn object_meta_schema() -> Arc<KindSchema> {
    static META: LazyLock<Arc<KindSchema>> =
        LazyLock::new(|| Arc::new(generate::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>()));
    META.clone()
}

/// Every `(group, version, kind)` [`kind_schema`] knows.
pub fn kinds() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    KINDS.iter().map(|&(g, v, k, _, _)| (g, v, k))
}

/// The schema of a kind as `/openapi/v3` publishes it: the name of its definition and every definition it reaches,
/// descriptions included, the kind's own marked with `x-kubernetes-group-version-kind`, fields with a patch strategy
/// with `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key` ([`patch_meta`]), lists with
/// `x-kubernetes-list-type` (and map keys) and atomic structures with `x-kubernetes-map-type` ([`list_meta`]).
pub fn published(group: &str, version: &str, kind: &str) -> Option<(String, Map<String, Value>)> {
    let &(g, v, k, _, describe) = KINDS.iter().find(|(g, v, k, _, _)| *g == group && *v == version && *k == kind)?;
    let (root, mut definitions) = describe();
    if let Some(definition) = definitions.get_mut(&root).and_then(Value::as_object_mut) {
        let gvk = serde_json::json!([{"group": g, "version": v, "kind": k}]);
        definition.insert("x-kubernetes-group-version-kind".into(), gvk);
    }
    Some((root, definitions))
}

/// ObjectMeta and what it reaches, as [`published`] gives them (for custom resources' documents).
pub fn published_object_meta() -> (String, Map<String, Value>) {
    describe::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>()
}

fn describe<T: JsonSchema>() -> (String, Map<String, Value>) {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let root = generator.subschema_for::<T>().to_value();
    let mut definitions = generator.take_definitions(false);
    let name = root.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix(REF_PREFIX)).unwrap_or_default();
    for (definition, schema) in definitions.iter_mut() {
        let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else { continue };
        for (field, property) in properties.iter_mut() {
            let (Some(strategy), Some(property)) = (patch_meta::published(definition, field), property.as_object_mut())
            else {
                continue;
            };
            property.insert("x-kubernetes-patch-strategy".into(), strategy.0.into());
            if let Some(key) = strategy.1 {
                property.insert("x-kubernetes-patch-merge-key".into(), key.into());
            }
        }
        // Server-side apply's list and map types ([`list_meta`]).
        for (field, property) in properties.iter_mut() {
            let Some(property) = property.as_object_mut() else { continue };
            if property.get("type").and_then(Value::as_str) == Some("array") {
                match list_meta::list_type(definition, field) {
                    list_meta::ListType::Atomic => {
                        property.insert("x-kubernetes-list-type".into(), "atomic".into());
                    }
                    list_meta::ListType::Set => {
                        property.insert("x-kubernetes-list-type".into(), "set".into());
                    }
                    list_meta::ListType::Map(keys) => {
                        property.insert("x-kubernetes-list-type".into(), "map".into());
                        property.insert("x-kubernetes-list-map-keys".into(), serde_json::json!(keys));
                    }
                }
            }
            if let Some(kind) = list_meta::field_map_type(definition, field) {
                property.insert("x-kubernetes-map-type".into(), kind.into());
            }
        }
    }
    for (definition, schema) in definitions.iter_mut() {
        if list_meta::atomic_definition(definition)
            && let Some(schema) = schema.as_object_mut()
        {
            schema.insert("x-kubernetes-map-type".into(), "atomic".into());
        }
        // The Rust types hold `metadata` whether or not it is given; Go's are `omitempty`, so upstream's schemas
        // never require it — except core v1 Event's, whose tag has no `omitempty`.
        if definition != "io.k8s.api.core.v1.Event"
            && let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut)
        {
            required.retain(|field| field != "metadata");
            if required.is_empty() {
                schema.as_object_mut().expect("a schema with a required list is an object").remove("required");
            }
        }
    }
    (name.to_string(), definitions)
}

fn generate<T: JsonSchema>() -> KindSchema {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut root = generator.subschema_for::<T>().to_value();
    let mut definitions = generator.take_definitions(false);
    strip(&mut root);
    for (name, definition) in definitions.iter_mut() {
        match name.as_str() {
            "io.k8s.apimachinery.pkg.api.resource.Quantity" => *definition = serde_json::json!({ QUANTITY: true }),
            // Any JSON value at all, which the published schemas call `type: object`.
            ANY_JSON
            | "io.k8s.apimachinery.pkg.runtime.RawExtension"
            | "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1" => {
                *definition = serde_json::json!({"x-kubernetes-preserve-unknown-fields": true})
            }
            _ => {}
        }
        strip(definition);
    }
    KindSchema { root, definitions }
}

/// Drops `description` from a schema and every schema inside it (not from `properties`, whose keys are field names).
fn strip(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else { return };
    map.remove("description");
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            "properties" => {
                if let Some(properties) = child.as_object_mut() {
                    properties.values_mut().for_each(strip);
                }
            }
            "items" | "additionalProperties" | "not" => strip(child),
            "allOf" | "anyOf" | "oneOf" => {
                if let Some(all) = child.as_array_mut() {
                    all.iter_mut().for_each(strip);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_required_where_go_writes_it_without_omitempty_only() {
        let required = |group: &str, kind: &str| {
            let (root, definitions) = published(group, "v1", kind).unwrap();
            definitions[&root].get("required").cloned().unwrap_or_default()
        };
        assert_eq!(required("authorization.k8s.io", "SelfSubjectAccessReview"), serde_json::json!(["spec"]));
        assert_eq!(required("apps", "Deployment"), Value::Null);
        assert_eq!(required("", "Event"), serde_json::json!(["involvedObject", "metadata"]));
    }

    #[test]
    fn a_deployment_schema_reaches_the_pod_template() {
        let schema = kind_schema("apps", "v1", "Deployment").expect("Deployment is known");
        let root = schema.resolve(&schema.root);
        assert_eq!(root["type"], "object");
        let spec = schema.resolve(&root["properties"]["spec"]);
        assert_eq!(spec["properties"]["replicas"]["type"], "integer");
        let template = schema.resolve(&spec["properties"]["template"]);
        let pod_spec = schema.resolve(&template["properties"]["spec"]);
        let container = schema.resolve(&pod_spec["properties"]["containers"]["items"]);
        assert_eq!(container["properties"]["image"]["type"], "string");
        assert!(root.get("description").is_none(), "descriptions are dropped");
    }

    #[test]
    fn quantities_are_marked_and_every_kind_generates() {
        let pod = kind_schema("", "v1", "Pod").unwrap();
        assert_eq!(
            pod.definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"],
            serde_json::json!({QUANTITY: true})
        );
        for (g, v, k) in kinds() {
            let schema = kind_schema(g, v, k).unwrap();
            assert_eq!(schema.resolve(&schema.root)["type"], "object", "{g}/{v} {k}");
        }
        assert!(kind_schema("", "v1", "Nope").is_none());
    }
}
