//! Per-kind policy: the small trait every kind implements, after `k8s.io/apiserver/pkg/registry/rest`'s
//! `RESTCreateStrategy` / `RESTUpdateStrategy` (1.33). Mechanism (conflicts, generated names, dry-run, finalizers,
//! watch) lives once in [`crate::store`]; a strategy holds only what differs between kinds.

use serde_json::Value;

use crate::error::Cause;
use crate::kinds::pod::Pod;
use crate::meta;
use crate::schema;
use crate::validation;

/// What a kind decides for itself. Every method has the behaviour most kinds want.
pub trait Strategy: Send + Sync + 'static {
    /// Checks a name (`metadata.name`); most kinds use the DNS subdomain rule.
    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::dns1123_subdomain(name)
    }

    /// Sets defaults and clears what a client may not set, before the first write.
    fn prepare_for_create(&self, _obj: &mut Value) {}

    /// Kind-specific checks of a new object.
    fn validate(&self, _obj: &Value) -> Vec<Cause> {
        Vec::new()
    }

    /// Sets defaults on an update; `old` is the stored object.
    fn prepare_for_update(&self, obj: &mut Value, _old: &Value) {
        self.prepare_for_create(obj)
    }

    /// Kind-specific checks of an update.
    fn validate_update(&self, obj: &Value, _old: &Value) -> Vec<Cause> {
        self.validate(obj)
    }

    /// The fields a field selector may use besides `metadata.name` and `metadata.namespace`.
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[]
    }
}

/// The strategy of kinds with no policy of their own.
pub struct Default;

impl Strategy for Default {}

/// Kinds named by any path segment (RBAC roles and bindings, as kube-apiserver allows).
pub struct PathSegmentNames;

impl Strategy for PathSegmentNames {
    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::path_segment(name)
    }
}

/// Namespaces: DNS label names, the `kubernetes` finalizer, phase `Active` (pkg/registry/core/namespace/strategy.go).
pub struct Namespace;

impl Strategy for Namespace {
    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::dns1123_label(name)
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        obj["spec"]["finalizers"] = serde_json::json!(["kubernetes"]);
        obj["status"] = serde_json::json!({"phase": "Active"});
        let name = meta::name(obj).to_string();
        let labels = meta::metadata_mut(obj).entry("labels").or_insert_with(|| serde_json::json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), Value::String(name));
        }
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) {
        // The finalizers are changed only through the `finalize` subresource.
        obj["spec"]["finalizers"] = old["spec"]["finalizers"].clone();
        let name = meta::name(obj).to_string();
        let labels = meta::metadata_mut(obj).entry("labels").or_insert_with(|| serde_json::json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), Value::String(name));
        }
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.phase"]
    }
}

/// The keys of `obj`'s `data` and `binaryData` as config keys, each refusal a cause at `data[<key>]`, and a key in
/// both a cause too (`ValidateConfigMap` and `ValidateSecret` in pkg/apis/core/validation, 1.33).
fn config_keys(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for field in ["data", "binaryData"] {
        for key in obj[field].as_object().into_iter().flat_map(|m| m.keys()) {
            for message in validation::config_map_key(key) {
                causes.push(Cause::invalid(format!("{field}[{key}]"), format!("Invalid value: {key:?}: {message}")));
            }
            if field == "binaryData" && obj["data"].get(key).is_some() {
                causes.push(Cause::invalid(
                    format!("{field}[{key}]"),
                    format!("Invalid value: {key:?}: duplicate of key present in data"),
                ));
            }
        }
    }
    causes
}

/// ConfigMaps: their keys, which become file names in volumes.
pub struct ConfigMap;

impl Strategy for ConfigMap {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        config_keys(obj)
    }
}

/// Secrets: a default type, the `type` field selector, and keys that can be file names.
pub struct Secret;

impl Strategy for Secret {
    fn prepare_for_create(&self, obj: &mut Value) {
        if obj.get("type").is_none_or(|t| t.as_str().is_none_or(str::is_empty)) {
            obj["type"] = Value::String("Opaque".into());
        }
        // `stringData` is write-only: its entries go into `data`, winning over entries of the same key, as the core
        // v1 conversion does.
        if let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
            if !obj.get("data").is_some_and(Value::is_object) {
                obj["data"] = serde_json::json!({});
            }
            for (key, value) in strings {
                let text = value.as_str().unwrap_or_default();
                obj["data"][key] = Value::String(crate::base64::encode(text.as_bytes()));
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        config_keys(obj)
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["type"]
    }
}

/// Events: the `involvedObject.*` field selectors `kubectl describe` uses (`regarding.*` in `events.k8s.io`).
pub struct Event {
    /// Served as `events.k8s.io/v1` (`crate::convert`).
    pub events_v1: bool,
}

impl Strategy for Event {
    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::path_segment(name)
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        if self.events_v1 {
            return &[
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "regarding.apiVersion",
                "regarding.resourceVersion",
                "regarding.fieldPath",
                "reason",
                "reportingController",
                "type",
            ];
        }
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]
    }
}

/// Services: the defaults of pkg/apis/core/v1/defaults.go (type, session affinity, port protocol and target port)
/// and an immutable ClusterIP. The address itself is allocated by the registry ([`crate::ipalloc`]).
pub struct Service;

impl Strategy for Service {
    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::dns1035_label(name)
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        if !obj.get("spec").is_some_and(Value::is_object) {
            obj["spec"] = serde_json::json!({});
        }
        let spec = &mut obj["spec"];
        for (field, default) in [
            ("type", serde_json::json!("ClusterIP")),
            ("sessionAffinity", serde_json::json!("None")),
            ("internalTrafficPolicy", serde_json::json!("Cluster")),
        ] {
            if spec.get(field).is_none_or(Value::is_null) {
                spec[field] = default;
            }
        }
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for port in ports {
                if port.get("protocol").is_none() {
                    port["protocol"] = serde_json::json!("TCP");
                }
                if port.get("targetPort").is_none_or(Value::is_null) {
                    port["targetPort"] = port.get("port").cloned().unwrap_or(Value::Null);
                }
            }
        }
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) {
        self.prepare_for_create(obj);
        // An update that leaves the address out keeps the allocated one.
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if obj["spec"].get(field).is_none_or(|v| v.is_null() || v == "")
                && let Some(value) = old.get("spec").and_then(|s| s.get(field))
            {
                obj["spec"][field] = value.clone();
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let spec = &obj["spec"];
        let kind = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP");
        let mut causes = Vec::new();
        if !["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"].contains(&kind) {
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                message: format!("Unsupported value: {kind:?}: supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""),
                field: "spec.type".into(),
            });
        }
        let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
        let ports = spec.get("ports").and_then(Value::as_array);
        if kind != "ExternalName" && !headless && ports.is_none_or(|p| p.is_empty()) {
            causes.push(Cause::required("spec.ports"));
        }
        for (i, port) in ports.into_iter().flatten().enumerate() {
            match port.get("port").and_then(Value::as_i64) {
                Some(p) if (1..=65535).contains(&p) => {}
                Some(p) => causes.push(Cause::invalid(
                    format!("spec.ports[{i}].port"),
                    format!("Invalid value: {p}: must be between 1 and 65535, inclusive"),
                )),
                None => causes.push(Cause::required(format!("spec.ports[{i}].port"))),
            }
        }
        causes
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<Cause> {
        let mut causes = self.validate(obj);
        let (new_ip, old_ip) = (&obj["spec"]["clusterIP"], &old["spec"]["clusterIP"]);
        if !old_ip.is_null() && new_ip != old_ip {
            causes.push(Cause::invalid(
                "spec.clusterIPs[0]",
                format!("Invalid value: {new_ip}: may not change once set"),
            ));
        }
        causes
    }
}

/// Workloads: the defaults of pkg/apis/apps/v1/defaults.go that controllers rely on (replicas, strategies, history
/// limits), and the pod template's pod defaults.
pub struct Workload {
    kind: &'static str,
}

impl Strategy for Workload {
    fn prepare_for_create(&self, obj: &mut Value) {
        if !obj.get("spec").is_some_and(Value::is_object) {
            return;
        }
        let spec = &mut obj["spec"];
        let mut defaults: Vec<(&str, Value)> = Vec::new();
        match self.kind {
            "Deployment" => {
                defaults.push(("replicas", serde_json::json!(1)));
                defaults.push(("strategy", serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})));
                defaults.push(("revisionHistoryLimit", serde_json::json!(10)));
                defaults.push(("progressDeadlineSeconds", serde_json::json!(600)));
            }
            "ReplicaSet" => defaults.push(("replicas", serde_json::json!(1))),
            "StatefulSet" => {
                defaults.push(("replicas", serde_json::json!(1)));
                defaults.push(("podManagementPolicy", serde_json::json!("OrderedReady")));
                defaults.push((
                    "updateStrategy",
                    serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                ));
                defaults.push(("revisionHistoryLimit", serde_json::json!(10)));
                defaults.push((
                    "persistentVolumeClaimRetentionPolicy",
                    serde_json::json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                ));
            }
            "DaemonSet" => {
                defaults.push((
                    "updateStrategy",
                    serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
                ));
                defaults.push(("revisionHistoryLimit", serde_json::json!(10)));
            }
            "Job" => {
                defaults.push(("completions", serde_json::json!(1)));
                defaults.push(("parallelism", serde_json::json!(1)));
                defaults.push(("backoffLimit", serde_json::json!(6)));
                defaults.push(("completionMode", serde_json::json!("NonIndexed")));
                defaults.push(("suspend", serde_json::json!(false)));
            }
            _ => {}
        }
        for (field, default) in defaults {
            match spec.get_mut(field) {
                None | Some(Value::Null) => spec[field] = default,
                // A strategy without a type (protobuf clients send `strategy: {}`) gets the default type, and a
                // rolling update its default parameters.
                Some(Value::Object(given)) if matches!(field, "strategy" | "updateStrategy") => {
                    if !given.contains_key("type") {
                        given.insert("type".into(), default["type"].clone());
                    }
                    if given.get("type") == default.get("type") && !given.contains_key("rollingUpdate") {
                        given.insert("rollingUpdate".into(), default["rollingUpdate"].clone());
                    }
                }
                Some(_) => {}
            }
        }
        if let Some(template) = spec.get_mut("template")
            && template.get("spec").is_some_and(Value::is_object)
        {
            // The template's pod gets the pod defaults, but a template has no status.
            Pod.prepare_for_create(template);
            if let Some(map) = template.as_object_mut() {
                map.remove("status");
            }
            if self.kind == "Job" && template["spec"]["restartPolicy"] == "Always" {
                // A Job's pods must not restart forever; kube-apiserver refuses Always, nest defaults to Never.
                template["spec"]["restartPolicy"] = serde_json::json!("Never");
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        self.check(obj)
    }
}

impl Workload {
    /// The checks of `pkg/apis/apps/validation` (and batch's) that protect the controllers: counts are not negative,
    /// an apps workload has a selector its template's labels match, and the template is a valid pod.
    fn check(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = &obj["spec"];
        for field in [
            "replicas",
            "minReadySeconds",
            "revisionHistoryLimit",
            "progressDeadlineSeconds",
            "completions",
            "parallelism",
            "backoffLimit",
        ] {
            if let Some(n) = spec.get(field).and_then(Value::as_i64)
                && n < 0
            {
                causes.push(Cause::invalid(
                    format!("spec.{field}"),
                    format!("Invalid value: {n}: must be greater than or equal to 0"),
                ));
            }
        }
        if self.kind != "Job" {
            let selector = spec.get("selector").filter(|s| s.is_object());
            let labels = &spec["template"]["metadata"]["labels"];
            match selector {
                None => causes.push(Cause::required("spec.selector")),
                Some(selector) => {
                    let unmatched = selector["matchLabels"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .any(|(key, value)| labels.get(key) != Some(value));
                    if unmatched {
                        causes.push(Cause::invalid(
                            "spec.template.metadata.labels",
                            format!("Invalid value: {labels}: `selector` does not match template `labels`"),
                        ));
                    }
                }
            }
        }
        match spec.get("template").filter(|t| t.is_object()) {
            None => causes.push(Cause::required("spec.template")),
            Some(template) => causes.extend(crate::kinds::pod::template(template).into_iter().map(|mut cause| {
                cause.field = format!("spec.template.{}", cause.field);
                cause
            })),
        }
        causes
    }
}

/// CustomResourceDefinitions (apiextensions-apiserver's strategy and validation, 1.33, the parts nest uses): the name
/// is `<plural>.<group>`; names, scope and exactly one storage version are required. nest accepts names and
/// establishes the CRD in the same write, so `NamesAccepted` and `Established` are true as soon as it exists.
pub struct CustomResourceDefinition;

impl CustomResourceDefinition {
    fn status(obj: &Value) -> Value {
        let now = nest_core::clock::rfc3339_now();
        let mut accepted = obj["spec"]["names"].clone();
        if accepted.get("singular").is_none_or(|s| s.as_str().is_none_or(str::is_empty)) {
            accepted["singular"] = serde_json::json!(meta::path_str(obj, "spec.names.kind").to_lowercase());
        }
        if accepted.get("listKind").is_none_or(|s| s.as_str().is_none_or(str::is_empty)) {
            accepted["listKind"] = serde_json::json!(format!("{}List", meta::path_str(obj, "spec.names.kind")));
        }
        let stored: Vec<Value> = obj["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["storage"].as_bool() == Some(true))
            .map(|v| v["name"].clone())
            .collect();
        serde_json::json!({
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
            ],
            "acceptedNames": accepted,
            "storedVersions": stored,
        })
    }
}

impl Strategy for CustomResourceDefinition {
    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = Self::status(obj);
    }

    fn prepare_for_update(&self, obj: &mut Value, _old: &Value) {
        obj["status"] = Self::status(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let group = meta::path_str(obj, "spec.group");
        let plural = meta::path_str(obj, "spec.names.plural");
        for (field, value) in [("spec.group", &group), ("spec.names.plural", &plural)] {
            if value.is_empty() {
                causes.push(Cause::required(field));
            }
        }
        if meta::path_str(obj, "spec.names.kind").is_empty() {
            causes.push(Cause::required("spec.names.kind"));
        }
        if !plural.is_empty()
            && let Err(message) = validation::dns1123_label(&plural)
        {
            causes.push(Cause::invalid("spec.names.plural", format!("Invalid value: {plural:?}: {message}")));
        }
        if !group.is_empty() && !plural.is_empty() && meta::name(obj) != format!("{plural}.{group}") {
            causes.push(Cause::invalid(
                "metadata.name",
                format!("Invalid value: {:?}: must be spec.names.plural+\".\"+spec.group", meta::name(obj)),
            ));
        }
        let scope = meta::path_str(obj, "spec.scope");
        if scope != "Namespaced" && scope != "Cluster" {
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                message: format!("Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""),
                field: "spec.scope".into(),
            });
        }
        let versions = obj["spec"]["versions"].as_array();
        match versions {
            Some(v) if !v.is_empty() => {
                if v.iter().filter(|v| v["storage"].as_bool() == Some(true)).count() != 1 {
                    causes.push(Cause::invalid(
                        "spec.versions",
                        "Invalid value: must have exactly one version marked as storage version",
                    ));
                }
                for (i, version) in v.iter().enumerate() {
                    if version["name"].as_str().is_none_or(str::is_empty) {
                        causes.push(Cause::required(format!("spec.versions[{i}].name")));
                    }
                }
            }
            _ => causes.push(Cause::required("spec.versions")),
        }
        causes
    }
}

/// Custom resources: their CRD's structural schema defaults, prunes and validates them ([`crate::schema`]).
pub struct Custom {
    schema: Option<std::sync::Arc<Value>>,
}

impl Strategy for Custom {
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(schema) = &self.schema {
            schema::default(schema, obj);
            schema::prune(schema, obj, true);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        if let Some(schema) = &self.schema {
            schema::validate(schema, obj, "", &mut causes);
        }
        causes
    }
}

/// The strategy for a resource.
pub fn for_resource(info: &crate::catalog::ResourceInfo) -> Box<dyn Strategy> {
    if info.custom {
        return Box::new(Custom { schema: info.schema.clone() });
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "namespaces") => Box::new(Namespace),
        ("", "pods") => Box::new(Pod),
        ("", "secrets") => Box::new(Secret),
        ("", "configmaps") => Box::new(ConfigMap),
        ("", "services") => Box::new(Service),
        ("apps", "deployments") => Box::new(Workload { kind: "Deployment" }),
        ("apps", "replicasets") => Box::new(Workload { kind: "ReplicaSet" }),
        ("apps", "statefulsets") => Box::new(Workload { kind: "StatefulSet" }),
        ("apps", "daemonsets") => Box::new(Workload { kind: "DaemonSet" }),
        ("batch", "jobs") => Box::new(Workload { kind: "Job" }),
        ("", "events") => Box::new(Event { events_v1: false }),
        ("events.k8s.io", "events") => Box::new(Event { events_v1: true }),
        ("rbac.authorization.k8s.io", _) => Box::new(PathSegmentNames),
        ("apiextensions.k8s.io", "customresourcedefinitions") => Box::new(CustomResourceDefinition),
        _ => Box::new(Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn services_get_their_defaults_and_keep_their_address() {
        let mut svc = json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}});
        Service.prepare_for_create(&mut svc);
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(svc["spec"]["sessionAffinity"], "None");
        assert_eq!(svc["spec"]["ports"][0], json!({"port": 80, "protocol": "TCP", "targetPort": 80}));
        assert!(Service.validate(&svc).is_empty());
        let old = json!({"spec": {"clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"], "ports": [{"port": 80}]}});
        let mut update = json!({"spec": {"ports": [{"port": 81}]}});
        Service.prepare_for_update(&mut update, &old);
        assert_eq!(update["spec"]["clusterIP"], "10.96.0.9");
        let mut moved = json!({"spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 81}]}});
        Service.prepare_for_update(&mut moved, &old);
        assert_eq!(Service.validate_update(&moved, &old)[0].field, "spec.clusterIPs[0]");
        assert_eq!(Service.validate(&json!({"spec": {"ports": [{"port": 70000}]}}))[0].field, "spec.ports[0].port");
        assert!(Service.validate_name("9lives").is_err());
    }

    #[test]
    fn crds_are_checked_and_established_at_once() {
        let mut crd = json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": true, "storage": true}]},
        });
        assert!(CustomResourceDefinition.validate(&crd).is_empty());
        CustomResourceDefinition.prepare_for_create(&mut crd);
        let conditions = crd["status"]["conditions"].as_array().unwrap();
        assert!(conditions.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
        assert_eq!(crd["status"]["acceptedNames"]["singular"], "widget");
        assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
        crd["metadata"]["name"] = json!("wrong.example.com");
        crd["spec"]["versions"][0]["storage"] = json!(false);
        crd["spec"]["scope"] = json!("Global");
        let fields: Vec<String> = CustomResourceDefinition.validate(&crd).into_iter().map(|c| c.field).collect();
        assert_eq!(fields, ["metadata.name", "spec.scope", "spec.versions"]);
    }

    #[test]
    fn workloads_get_the_defaults_controllers_rely_on() {
        let mut d =
            json!({"spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}});
        Workload { kind: "Deployment" }.prepare_for_create(&mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert!(d["spec"]["template"].get("status").is_none());
        let mut j = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        Workload { kind: "Job" }.prepare_for_create(&mut j);
        assert_eq!((j["spec"]["backoffLimit"].as_i64(), j["spec"]["completions"].as_i64()), (Some(6), Some(1)));
        assert_eq!(j["spec"]["template"]["spec"]["restartPolicy"], "Never");
    }

    #[test]
    fn pods_get_the_defaults_clients_rely_on() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}, {"name": "d", "image": "busybox:1.36"}]}});
        Pod.prepare_for_create(&mut pod);
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["spec"]["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(pod["spec"]["containers"][0]["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(pod["status"]["phase"], "Pending");
        assert!(Pod.validate(&pod).is_empty());
        let causes = Pod.validate(&json!({"spec": {"containers": [{"name": "c"}]}}));
        assert_eq!(causes[0].field, "spec.containers[0].image");
    }

    #[test]
    fn namespaces_start_active_with_the_kubernetes_finalizer() {
        let mut ns = json!({"metadata": {"name": "team-a"}});
        Namespace.prepare_for_create(&mut ns);
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(ns["status"]["phase"], "Active");
        assert_eq!(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "team-a");
        assert!(Namespace.validate_name("Team").is_err());
    }
}
