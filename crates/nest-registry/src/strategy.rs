//! Per-kind policy: the small trait every kind implements, after `k8s.io/apiserver/pkg/registry/rest`'s
//! `RESTCreateStrategy` / `RESTUpdateStrategy` (1.33). Mechanism (conflicts, generated names, dry-run, finalizers,
//! watch) lives once in [`crate::store`]; a strategy holds only what differs between kinds.

use serde_json::Value;

use crate::error::Cause;
use crate::meta;
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

/// Secrets: a default type, and the `type` field selector.
pub struct Secret;

impl Strategy for Secret {
    fn prepare_for_create(&self, obj: &mut Value) {
        if obj.get("type").is_none_or(|t| t.as_str().is_none_or(str::is_empty)) {
            obj["type"] = Value::String("Opaque".into());
        }
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["type"]
    }
}

/// Pods: the defaults controllers and clients rely on (pkg/apis/core/v1/defaults.go) and their field selectors.
pub struct Pod;

impl Strategy for Pod {
    fn prepare_for_create(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if !spec.is_object() {
            return;
        }
        for (field, default) in [
            ("restartPolicy", serde_json::json!("Always")),
            ("dnsPolicy", serde_json::json!("ClusterFirst")),
            ("schedulerName", serde_json::json!("default-scheduler")),
            ("terminationGracePeriodSeconds", serde_json::json!(30)),
            ("securityContext", serde_json::json!({})),
            ("enableServiceLinks", serde_json::json!(true)),
        ] {
            if spec.get(field).is_none_or(Value::is_null) {
                spec[field] = default;
            }
        }
        for list in ["initContainers", "containers"] {
            if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
                for c in containers {
                    default_container(c);
                }
            }
        }
        if obj.get("status").is_none_or(Value::is_null) || obj["status"].get("phase").is_none() {
            obj["status"]["phase"] = serde_json::json!("Pending");
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let containers = obj.get("spec").and_then(|s| s.get("containers")).and_then(Value::as_array);
        match containers {
            Some(list) if !list.is_empty() => list
                .iter()
                .enumerate()
                .flat_map(|(i, c)| {
                    let mut causes = Vec::new();
                    if c.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
                        causes.push(Cause::required(format!("spec.containers[{i}].name")));
                    }
                    if c.get("image").and_then(Value::as_str).is_none_or(str::is_empty) {
                        causes.push(Cause::required(format!("spec.containers[{i}].image")));
                    }
                    causes
                })
                .collect(),
            _ => vec![Cause::required("spec.containers")],
        }
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
    }
}

fn default_container(c: &mut Value) {
    if c.get("terminationMessagePath").is_none() {
        c["terminationMessagePath"] = serde_json::json!("/dev/termination-log");
    }
    if c.get("terminationMessagePolicy").is_none() {
        c["terminationMessagePolicy"] = serde_json::json!("File");
    }
    if c.get("imagePullPolicy").is_none() {
        let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
        let tag = image.rsplit('/').next().unwrap_or(image);
        let latest = !image.contains('@') && (!tag.contains(':') || tag.ends_with(":latest"));
        c["imagePullPolicy"] = serde_json::json!(if latest { "Always" } else { "IfNotPresent" });
    }
}

/// Events: the `involvedObject.*` field selectors `kubectl describe` uses.
pub struct Event;

impl Strategy for Event {
    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::path_segment(name)
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
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

/// The strategy for a resource, by group and plural.
pub fn for_resource(group: &str, plural: &str) -> Box<dyn Strategy> {
    match (group, plural) {
        ("", "namespaces") => Box::new(Namespace),
        ("", "pods") => Box::new(Pod),
        ("", "secrets") => Box::new(Secret),
        ("", "events") | ("events.k8s.io", "events") => Box::new(Event),
        ("rbac.authorization.k8s.io", _) => Box::new(PathSegmentNames),
        _ => Box::new(Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
