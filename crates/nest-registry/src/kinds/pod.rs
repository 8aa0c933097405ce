//! Pods: their defaults (pkg/apis/core/v1/defaults.go), their field selectors, graceful deletion, `pods/binding`,
//! and the checks of their spec that
//! keep what a tenant writes from naming paths outside its volumes (`ValidatePodSpec` in pkg/apis/core/validation,
//! 1.33: names of containers and volumes, mounts of volumes that exist, `subPath`s and `items[].path`s that descend).
//! The node refuses the same again, whatever an API server let through (`nest-node/src/process/paths.rs`); here a
//! client gets upstream's 422 first. The numeric bounds of the spec are in `pod_numbers.rs`.

use serde_json::{Value, json};

use crate::catalog::{ResourceInfo, SubresourceInfo};
use crate::error::{ApiError, Cause, Result};
use crate::meta;
use crate::strategy::{Strategy, Subresource};
use crate::validation;

use super::pod_ephemeral::{self, SUBRESOURCE};

/// `pods/binding` (what a scheduler sends), `pods/ephemeralcontainers` (what `kubectl debug` writes), and
/// `pods/log`, `pods/exec`, `pods/attach` and `pods/portforward` (served by the API server from the pod's node).
pub const SUBRESOURCES: &[SubresourceInfo] = &[
    SubresourceInfo { name: "attach", kind: "PodAttachOptions", verbs: &["create", "get"] },
    SubresourceInfo { name: "binding", kind: "Binding", verbs: &["create"] },
    SubresourceInfo { name: SUBRESOURCE, kind: "Pod", verbs: &["get", "patch", "update"] },
    SubresourceInfo { name: "exec", kind: "PodExecOptions", verbs: &["create", "get"] },
    SubresourceInfo { name: "log", kind: "Pod", verbs: &["get"] },
    SubresourceInfo { name: "portforward", kind: "PodPortForwardOptions", verbs: &["create", "get"] },
];

/// Pods: the defaults controllers and clients rely on (pkg/apis/core/v1/defaults.go) and their field selectors.
pub struct Pod;

impl Strategy for Pod {
    fn prepare_for_create(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if !spec.is_object() {
            return;
        }
        default_pod_spec(spec);
        // The v1 Pod conversion (`Convert_v1_Pod_To_core_Pod`, 1.27+) reads a negative grace period as 1; a template
        // keeps what it was given.
        if spec["terminationGracePeriodSeconds"].as_i64().is_some_and(|g| g < 0) {
            spec["terminationGracePeriodSeconds"] = json!(1);
        }
        // `SetDefaults_Pod`: what a pod gets and a template does not.
        if spec.get("enableServiceLinks").is_none_or(Value::is_null) {
            spec["enableServiceLinks"] = json!(true);
        }
        let host_network = spec["hostNetwork"] == true;
        for list in ["initContainers", "containers"] {
            for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
                requests_from_limits(c);
                if host_network {
                    for port in c.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
                        if port.get("hostPort").is_none_or(|p| p.as_i64() == Some(0)) {
                            port["hostPort"] = port["containerPort"].clone();
                        }
                    }
                }
            }
        }
        // v1's deprecated alias of the account, which the conversion to v1 always writes.
        if let Some(account) = spec.get("serviceAccountName").filter(|a| a.as_str().is_some_and(|a| !a.is_empty())) {
            spec["serviceAccount"] = account.clone();
        }
        if obj.get("status").is_none_or(Value::is_null) || obj["status"].get("phase").is_none() {
            obj["status"]["phase"] = json!("Pending");
        }
        if obj["status"].get("qosClass").is_none() {
            obj["status"]["qosClass"] = json!(qos_class(&obj["spec"]));
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = spec(&obj["spec"], "spec");
        pod_ephemeral::check_create(&obj["spec"], &mut causes);
        causes
    }

    fn prepare_for_update(&self, obj: &mut Value, _old: &Value) {
        self.prepare_for_create(obj);
    }

    fn validate_update(&self, obj: &Value, _old: &Value) -> Vec<Cause> {
        spec(&obj["spec"], "spec")
    }

    fn validate_update_of(&self, subresource: Subresource, obj: &Value, old: &Value) -> Vec<Cause> {
        let mut causes = self.validate_update(obj, old);
        match subresource {
            Subresource::Own(SUBRESOURCE) => pod_ephemeral::check_update(obj, old, &mut causes),
            // Only `pods/ephemeralcontainers` changes them; the pod itself refuses to (upstream's 422).
            Subresource::Main => pod_ephemeral::check_main_update(obj, old, &mut causes),
            _ => {}
        }
        causes
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

    /// After kube's pod strategy (`CheckGracefulDelete`): the period asked for, or else
    /// `terminationGracePeriodSeconds`; but 0 for a pod no node runs and for a finished pod, and at least 1 when
    /// negative. A pod on a node is so deleted in two steps: marked, then removed by its node once stopped.
    fn grace_period(&self, obj: &Value, asked: Option<i64>) -> i64 {
        let spec = &obj["spec"];
        let period = asked.or_else(|| spec["terminationGracePeriodSeconds"].as_i64()).unwrap_or(0);
        let scheduled = spec["nodeName"].as_str().is_some_and(|n| !n.is_empty());
        let finished = matches!(obj["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
        if !scheduled || finished {
            0
        } else if period < 0 {
            1
        } else {
            period
        }
    }

    /// `binding`: the pod bound to the Binding's `target.name`, as kube-apiserver's binding storage does it: only an
    /// unbound pod that is not being deleted, with `PodScheduled` set true.
    fn update_subresource(&self, sub: &str, info: &ResourceInfo, current: &Value, binding: &Value) -> Result<Value> {
        if sub == SUBRESOURCE {
            return Ok(pod_ephemeral::updated(current, binding));
        }
        let name = meta::name(current);
        let node = binding["target"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::invalid(info, name, vec![Cause::required("target.name")]))?;
        let assigned = current["spec"]["nodeName"].as_str().unwrap_or_default();
        if !assigned.is_empty() {
            return Err(ApiError::conflict(info, name)
                .with_message(format!("pod {name} is already assigned to node \"{assigned}\"")));
        }
        if meta::is_deleting(current) {
            return Err(ApiError::conflict(info, name)
                .with_message(format!("pod {name} is being deleted, cannot be assigned to a host")));
        }
        let mut obj = current.clone();
        meta::metadata_mut(&mut obj).remove("resourceVersion");
        obj["spec"]["nodeName"] = json!(node);
        let condition = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                               "lastTransitionTime": nest_core::clock::rfc3339_now()});
        let conditions = obj["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut conditions: Vec<Value> = conditions.into_iter().filter(|c| c["type"] != "PodScheduled").collect();
        conditions.push(condition);
        obj["status"]["conditions"] = json!(conditions);
        Ok(obj)
    }
}

/// The pod's quality of service class, as kube-apiserver computes it at create (`GetPodQOS`): `BestEffort` when no
/// container requests or limits CPU or memory, `Guaranteed` when every container limits both and requests what it
/// limits, `Burstable` otherwise.
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> =
        ["initContainers", "containers"].iter().flat_map(|list| spec[*list].as_array().into_iter().flatten()).collect();
    let amount = |resources: &Value, kind: &str, name: &str| -> Option<f64> {
        let value = &resources[kind][name];
        let text = match value {
            Value::String(text) => text.clone(),
            Value::Number(number) => number.to_string(),
            _ => return None,
        };
        Some(nest_core::quantity::parse(&text))
    };
    let mut any = false;
    let mut guaranteed = true;
    for container in &containers {
        let resources = &container["resources"];
        for name in ["cpu", "memory"] {
            let request = amount(resources, "requests", name).filter(|q| *q != 0.0);
            let limit = amount(resources, "limits", name).filter(|q| *q != 0.0);
            any |= request.is_some() || limit.is_some();
            match (request, limit) {
                (_, None) => guaranteed = false,
                (Some(request), Some(limit)) if request != limit => guaranteed = false,
                _ => {}
            }
        }
    }
    match (any, guaranteed && !containers.is_empty()) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// The defaults of a pod's spec, a pod's or a template's (`SetDefaults_PodSpec`, `SetDefaults_Container`,
/// `SetDefaults_Probe`, the volume sources' and the ports' defaults of pkg/apis/core/v1/defaults.go and the
/// generated `zz_generated.defaults.go`).
pub fn default_pod_spec(spec: &mut Value) {
    for (field, default) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("securityContext", json!({})),
    ] {
        if spec.get(field).is_none_or(Value::is_null) {
            spec[field] = default;
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            default_container(c);
        }
    }
    for volume in spec.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        default_volume(volume);
    }
}

/// A pod template's defaults: its pod spec's, and the `creationTimestamp: null` Go writes for the zero time of the
/// template's embedded metadata (kube-apiserver 1.33).
pub fn default_template(template: &mut Value) {
    if !template.is_object() {
        return;
    }
    if let Some(spec) = template.get_mut("spec").filter(|s| s.is_object()) {
        default_pod_spec(spec);
    }
    default_template_metadata(template);
}

/// `metadata: {creationTimestamp: null, …}`, as Go encodes the metadata embedded in a template.
pub fn default_template_metadata(template: &mut Value) {
    if !template["metadata"].is_object() {
        template["metadata"] = json!({});
    }
    template["metadata"]["creationTimestamp"] = Value::Null;
}

/// A limit without a request is the request too (`SetDefaults_Pod`).
fn requests_from_limits(c: &mut Value) {
    let limits = c.pointer("/resources/limits").and_then(Value::as_object).cloned().unwrap_or_default();
    if !limits.is_empty() {
        let resources = c.as_object_mut().map(|c| c.entry("resources").or_insert_with(|| json!({})));
        if let Some(resources) = resources.and_then(Value::as_object_mut) {
            let requests = resources.entry("requests").or_insert_with(|| json!({}));
            if let Some(requests) = requests.as_object_mut() {
                for (resource, amount) in limits {
                    requests.entry(resource).or_insert(amount);
                }
            }
        }
    }
}

/// An ephemeral container's defaults: a container's.
pub(super) fn default_ephemeral_container(c: &mut Value) {
    default_container(c);
}

fn default_container(c: &mut Value) {
    if !c.is_object() {
        return;
    }
    // ResourceRequirements is not a pointer: Go writes `resources: {}`.
    if c.get("resources").is_none_or(Value::is_null) {
        c["resources"] = json!({});
    }
    if c.get("terminationMessagePath").is_none() {
        c["terminationMessagePath"] = json!("/dev/termination-log");
    }
    if c.get("terminationMessagePolicy").is_none() {
        c["terminationMessagePolicy"] = json!("File");
    }
    if c.get("imagePullPolicy").is_none() {
        let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
        c["imagePullPolicy"] = json!(if pulls_always(image) { "Always" } else { "IfNotPresent" });
    }
    for port in c.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
        if port.is_object() && port.get("protocol").is_none_or(Value::is_null) {
            port["protocol"] = json!("TCP");
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(probe) = c.get_mut(probe).filter(|p| p.is_object()) else { continue };
        for (field, default) in
            [("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)]
        {
            if probe.get(field).is_none_or(Value::is_null) {
                probe[field] = json!(default);
            }
        }
        default_http_get(probe);
        if let Some(grpc) = probe.get_mut("grpc").filter(|g| g.is_object())
            && grpc.get("service").is_none_or(Value::is_null)
        {
            grpc["service"] = json!("");
        }
    }
    for hook in ["postStart", "preStop"] {
        if let Some(handler) = c.get_mut("lifecycle").and_then(|l| l.get_mut(hook)).filter(|h| h.is_object()) {
            default_http_get(handler);
        }
    }
    for env in c.get_mut("env").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(field_ref) = env.pointer_mut("/valueFrom/fieldRef").filter(|f| f.is_object())
            && field_ref.get("apiVersion").is_none_or(Value::is_null)
        {
            field_ref["apiVersion"] = json!("v1");
        }
    }
}

/// `SetDefaults_HTTPGetAction`: path `/`, scheme `HTTP`.
fn default_http_get(handler: &mut Value) {
    if let Some(get) = handler.get_mut("httpGet").filter(|g| g.is_object()) {
        if get.get("path").is_none_or(|p| p.as_str().is_none_or(str::is_empty)) {
            get["path"] = json!("/");
        }
        if get.get("scheme").is_none_or(Value::is_null) {
            get["scheme"] = json!("HTTP");
        }
    }
}

/// The volume sources' defaults: no source is an `emptyDir`; Secret, ConfigMap, downward API and projected files
/// are 0644 (`defaultMode: 420`); a token projection lives an hour; a hostPath's type is `""`; a field reference
/// is to v1.
fn default_volume(volume: &mut Value) {
    let Some(map) = volume.as_object_mut() else { return };
    if map.keys().all(|k| k == "name") {
        map.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(source) = map.get_mut(source).filter(|s| s.is_object())
            && source.get("defaultMode").is_none_or(Value::is_null)
        {
            source["defaultMode"] = json!(420);
        }
    }
    if let Some(host_path) = map.get_mut("hostPath").filter(|h| h.is_object())
        && host_path.get("type").is_none_or(Value::is_null)
    {
        host_path["type"] = json!("");
    }
    let field_refs = |items: &mut Value| {
        for item in items.as_array_mut().into_iter().flatten() {
            if let Some(field_ref) = item.get_mut("fieldRef").filter(|f| f.is_object())
                && field_ref.get("apiVersion").is_none_or(Value::is_null)
            {
                field_ref["apiVersion"] = json!("v1");
            }
        }
    };
    if let Some(items) = map.get_mut("downwardAPI").and_then(|d| d.get_mut("items")) {
        field_refs(items);
    }
    for source in
        map.get_mut("projected").and_then(|p| p.get_mut("sources")).and_then(Value::as_array_mut).into_iter().flatten()
    {
        if let Some(token) = source.get_mut("serviceAccountToken").filter(|t| t.is_object())
            && token.get("expirationSeconds").is_none_or(Value::is_null)
        {
            token["expirationSeconds"] = json!(3600);
        }
        if let Some(items) = source.get_mut("downwardAPI").and_then(|d| d.get_mut("items")) {
            field_refs(items);
        }
    }
}

/// `value` at `field` is not a valid whatever `message` says: upstream's `field.Invalid`.
fn invalid(field: String, value: &str, message: &str) -> Cause {
    Cause::invalid(field, format!("Invalid value: {value:?}: {message}"))
}

/// A path beneath a volume (`subPath`): relative and without a `..` element (`validateLocalDescendingPath`).
fn descending(path: &str, field: &str, causes: &mut Vec<Cause>) {
    if path.starts_with('/') {
        causes.push(invalid(field.into(), path, "must be a relative path"));
    }
    if path.split('/').any(|part| part == "..") {
        causes.push(invalid(field.into(), path, "must not contain '..'"));
    }
}

/// A file of a projected volume (`items[].path`): descending, and not starting with `..`
/// (`validateLocalNonReservedPath`).
fn non_reserved(path: &str, field: &str, causes: &mut Vec<Cause>) {
    if path.is_empty() {
        causes.push(Cause::required(field));
        return;
    }
    descending(path, field, causes);
    if path.starts_with("..") {
        causes.push(invalid(field.into(), path, "must not start with '..'"));
    }
}

/// The `items` of a ConfigMap, Secret or downward API source at `field`.
fn items(source: &Value, field: &str, causes: &mut Vec<Cause>) {
    for (i, item) in source["items"].as_array().into_iter().flatten().enumerate() {
        non_reserved(item["path"].as_str().unwrap_or_default(), &format!("{field}.items[{i}].path"), causes);
    }
}

/// Names that must be DNS-1123 labels and unique (containers, volumes).
fn label_names<'a>(names: impl Iterator<Item = (String, &'a str)>, causes: &mut Vec<Cause>) {
    let mut seen = std::collections::BTreeSet::new();
    for (field, name) in names {
        if name.is_empty() {
            causes.push(Cause::required(field));
        } else if let Err(message) = validation::dns1123_label(name) {
            causes.push(invalid(field, name, &message));
        } else if !seen.insert(name) {
            causes.push(Cause { reason: "FieldValueDuplicate", message: format!("Duplicate value: {name:?}"), field });
        }
    }
}

/// The checks of a workload's pod template (`spec` of it): its containers, each named and with an image. As upstream,
/// not the volumes and mounts, which a StatefulSet's claim templates complete only in the pods made from it; those
/// pods get every check of [`spec`].
pub fn template(template: &Value) -> Vec<Cause> {
    let containers = template["spec"]["containers"].as_array().map(Vec::as_slice).unwrap_or_default();
    if containers.is_empty() {
        return vec![Cause::required("spec.containers")];
    }
    let mut causes = Vec::new();
    for (i, c) in containers.iter().enumerate() {
        for field in ["name", "image"] {
            if c[field].as_str().is_none_or(str::is_empty) {
                causes.push(Cause::required(format!("spec.containers[{i}].{field}")));
            }
        }
    }
    super::pod_numbers::check(&template["spec"], "spec", &mut causes);
    causes
}

/// The checks of a pod's spec, at `at` (`spec`).
pub fn spec(spec: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let containers = spec["containers"].as_array().map(Vec::as_slice).unwrap_or_default();
    if containers.is_empty() {
        causes.push(Cause::required(format!("{at}.containers")));
    }
    let volumes = spec["volumes"].as_array().map(Vec::as_slice).unwrap_or_default();
    label_names(
        volumes
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("{at}.volumes[{i}].name"), v["name"].as_str().unwrap_or_default())),
        &mut causes,
    );
    for (i, volume) in volumes.iter().enumerate() {
        let field = format!("{at}.volumes[{i}]");
        for source in ["configMap", "secret", "downwardAPI"] {
            items(&volume[source], &format!("{field}.{source}"), &mut causes);
        }
        for (j, projection) in volume["projected"]["sources"].as_array().into_iter().flatten().enumerate() {
            for source in ["configMap", "secret", "downwardAPI"] {
                items(&projection[source], &format!("{field}.projected.sources[{j}].{source}"), &mut causes);
            }
        }
    }
    let volume_names: std::collections::BTreeSet<&str> = volumes.iter().filter_map(|v| v["name"].as_str()).collect();
    let mut all: Vec<(String, &Value)> = Vec::new();
    for list in ["initContainers", "containers"] {
        for (i, container) in spec[list].as_array().into_iter().flatten().enumerate() {
            all.push((format!("{at}.{list}[{i}]"), container));
        }
    }
    label_names(
        all.iter().map(|(field, c)| (format!("{field}.name"), c["name"].as_str().unwrap_or_default())),
        &mut causes,
    );
    for (field, container) in &all {
        if field.contains(".containers[") && container["image"].as_str().is_none_or(str::is_empty) {
            causes.push(Cause::required(format!("{field}.image")));
        }
        for (j, mount) in container["volumeMounts"].as_array().into_iter().flatten().enumerate() {
            let at = format!("{field}.volumeMounts[{j}]");
            let name = mount["name"].as_str().unwrap_or_default();
            if name.is_empty() {
                causes.push(Cause::required(format!("{at}.name")));
            } else if !volume_names.contains(name) {
                causes.push(Cause {
                    reason: "FieldValueNotFound",
                    message: format!("Not found: {name:?}"),
                    field: format!("{at}.name"),
                });
            }
            if mount["mountPath"].as_str().is_none_or(str::is_empty) {
                causes.push(Cause::required(format!("{at}.mountPath")));
            }
            if let Some(sub) = mount["subPath"].as_str().filter(|s| !s.is_empty()) {
                descending(sub, &format!("{at}.subPath"), &mut causes);
            }
        }
    }
    pod_ephemeral::check(spec, at, &mut causes);
    super::pod_numbers::check(spec, at, &mut causes);
    causes
}

/// Whether a container of `image` is pulled every time by default: when its tag is `latest`, named or implied (no tag
/// and no digest), as `SetDefaults_Container` reads it through `parsers.ParseImageName` (1.33). The reference is
/// parsed by the distribution grammar, so `registry:5000/app` has no tag and `app:latest@sha256:…` has one; a
/// reference that does not parse has none.
fn pulls_always(image: &str) -> bool {
    image.parse::<oci_spec::distribution::Reference>().is_ok_and(|reference| reference.tag() == Some("latest"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pull_policy_defaults_to_always_for_a_latest_tag_named_or_implied() {
        for always in ["nginx", "nginx:latest", "registry.example:5000/team/app", "localhost:5000/app:latest"] {
            assert!(pulls_always(always), "{always}");
        }
        for if_not_present in [
            "nginx:1.27",
            "registry.example:5000/team/app:v2",
            "app@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            // Not a reference by the grammar (upper case): ParseImageName fails, so there is no tag.
            "Nginx",
            "",
        ] {
            assert!(!pulls_always(if_not_present), "{if_not_present}");
        }
        // A tag beside a digest is still a tag: `latest` with a digest is pulled always, as upstream parses it.
        assert!(pulls_always("app:latest@sha256:0000000000000000000000000000000000000000000000000000000000000000"));
    }

    #[test]
    fn qos_classes_are_kube_apiservers() {
        let spec = |resources: Value| json!({"containers": [{"name": "c", "resources": resources}]});
        assert_eq!(qos_class(&spec(json!({}))), "BestEffort");
        assert_eq!(qos_class(&spec(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))), "Guaranteed");
        let equal = json!({"requests": {"cpu": "1000m", "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1024Mi"}});
        assert_eq!(qos_class(&spec(equal)), "Guaranteed");
        assert_eq!(qos_class(&spec(json!({"requests": {"cpu": "100m"}}))), "Burstable");
        assert_eq!(qos_class(&spec(json!({"limits": {"memory": "1Gi"}}))), "Burstable");
        let less = json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(qos_class(&spec(less)), "Burstable");
    }
    use serde_json::json;

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn a_valid_spec_has_no_causes() {
        let ok = json!({
            "containers": [{"name": "main", "image": "nest", "volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "a/b"}]}],
            "volumes": [{"name": "v", "configMap": {"name": "c", "items": [{"key": "k", "path": "dir/file"}]}}],
        });
        assert!(spec(&ok, "spec").is_empty(), "{:?}", spec(&ok, "spec"));
    }

    #[test]
    fn names_that_are_paths_and_paths_that_climb_are_invalid() {
        let bad = json!({
            "containers": [{"name": "../../c", "image": "nest",
                            "volumeMounts": [{"name": "../v", "mountPath": "/v", "subPath": "../../../../etc"},
                                             {"name": "missing", "mountPath": "/m"}]}],
            "volumes": [{"name": "../v", "configMap": {"name": "c", "items": [{"key": "k", "path": "/etc/passwd"}]}},
                        {"name": "d", "downwardAPI": {"items": [{"path": "../x"}]}}],
        });
        let found = fields(&spec(&bad, "spec"));
        let label = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must \
                     start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for \
                     validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
        for expected in [
            format!("spec.volumes[0].name: Invalid value: \"../v\": {label}"),
            "spec.volumes[0].configMap.items[0].path: Invalid value: \"/etc/passwd\": must be a relative path".into(),
            "spec.volumes[1].downwardAPI.items[0].path: Invalid value: \"../x\": must not contain '..'".into(),
            "spec.volumes[1].downwardAPI.items[0].path: Invalid value: \"../x\": must not start with '..'".into(),
            format!("spec.containers[0].name: Invalid value: \"../../c\": {label}"),
            "spec.containers[0].volumeMounts[1].name: Not found: \"missing\"".into(),
            "spec.containers[0].volumeMounts[0].subPath: Invalid value: \"../../../../etc\": must not contain '..'"
                .into(),
        ] {
            assert!(found.contains(&expected), "{expected}\nnot in {found:#?}");
        }
        let twice = json!({"containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]});
        assert_eq!(fields(&spec(&twice, "spec")), ["spec.containers[1].name: Duplicate value: \"a\""]);
    }
}
