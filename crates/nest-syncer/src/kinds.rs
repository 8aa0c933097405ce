//! The kinds the syncer copies down, each an entry of one registry: its resource, how a tenant object becomes its
//! super object, which fields are its content (compared to find drift), and whether its status flows back up.
//! Built-in kinds are entries like any other, so more kinds (custom resources) are more entries.

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Map, Value, json};

use crate::names::{self, TENANT_LABEL, TENANT_NAME, TENANT_NAMESPACE, TENANT_UID};
use crate::{compute, policy};

/// What a transform knows of the tenant.
pub struct Mapping<'a> {
    /// The tenant's cluster key.
    pub key: &'a str,
    /// The tenant namespace of the object, and its super namespace.
    pub namespace: &'a str,
    pub super_namespace: String,
    /// Where the tenant's API server is reached from the super cluster's pods.
    pub api_server: (&'a str, i32),
    /// Label and annotation prefixes that flow up only: a tenant's own entries under them stay in the tenant.
    pub transparent: &'a [String],
    /// The longest termination grace period a pod gets in the super cluster ([`policy::Policy`]).
    pub max_grace_period_seconds: u32,
    /// Whether the tenant's pods may not reach beyond the machine: their super pods are labelled so, and the node's
    /// network wall holds them in ([`nest_core::tenancy::EGRESS`]).
    pub egress_off: bool,
    /// The tenant's share of the node, written on its super pods ([`crate::compute::SHARE_ANNOTATIONS`] → value).
    pub share: &'a std::collections::BTreeMap<String, String>,
}

/// One synced kind.
pub struct Kind {
    /// The plural resource name (`pods`).
    pub name: &'static str,
    pub resource: ApiResource,
    /// The super object for a tenant object, or `None` when the object is not synced.
    pub down: fn(&Value, &Mapping) -> Option<Value>,
    /// The top-level fields that are the object's content: a super object whose content differs has drifted.
    pub content: &'static [&'static str],
    /// The content fields copied down exactly as they are (a ConfigMap's and a Secret's data), which the caches hold
    /// only as a digest ([`crate::compact`]): the super copy has drifted when the digests differ.
    pub verbatim: &'static [&'static str],
    /// Whether the super object's status is copied to the tenant object.
    pub status_up: bool,
    /// What the platform admin's policy says of the super object ([`crate::policy`]): a refusal names the field.
    pub admit: fn(&Value, &policy::Context) -> Result<(), String>,
    /// The super object's name for tenant object `name`, or `None` when that name is not synced.
    pub super_name: fn(&str) -> Option<&str>,
    /// What becomes of a super object already there when the policy refuses its tenant object now.
    pub on_refusal: OnRefusal,
    /// What a super object of the kind takes of its tenant's compute quota ([`crate::compute`]), for a kind that
    /// counts against it: of an object as the cache holds it (`None`), or of a new one as the LimitRange of its
    /// namespace will default it (`Some(defaults)`).
    pub usage: Option<fn(&Value, Option<&compute::Defaults>) -> compute::Usage>,
}

/// What becomes of a super object already made when the policy refuses its tenant object now (the platform admin
/// narrowed the policy, or what an address is changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnRefusal {
    /// It stays as it was made (a running pod is not stopped by a change of policy).
    Keep,
    /// It goes: an Endpoints address that became another tenant's pod's must stop carrying traffic there.
    Remove,
}

/// Every object of the kind may go down.
fn anything(_: &Value, _: &policy::Context) -> Result<(), String> {
    Ok(())
}

/// The super object has the tenant object's name.
fn same(name: &str) -> Option<&str> {
    Some(name)
}

fn resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// The built-in kinds, in the order they are created (what pods use comes before pods).
pub fn built_in() -> Vec<Kind> {
    vec![
        Kind {
            name: "configmaps",
            resource: resource("", "v1", "ConfigMap"),
            down: |o, m| Some(with(o, m, &["data", "binaryData", "immutable"])),
            content: &["data", "binaryData"],
            verbatim: &["data", "binaryData"],
            status_up: false,
            admit: anything,
            super_name: names::super_config_map,
            on_refusal: OnRefusal::Keep,
            usage: None,
        },
        Kind {
            name: "secrets",
            resource: resource("", "v1", "Secret"),
            down: |o, m| {
                // Service-account tokens are the tenant's credentials; they stay there.
                (o["type"] != "kubernetes.io/service-account-token").then(|| with(o, m, &["type", "data", "immutable"]))
            },
            content: &["data"],
            verbatim: &["data"],
            status_up: false,
            admit: anything,
            // Pods' token Secrets are the syncer's own ([`crate::tokens`]).
            super_name: |name| (!name.starts_with(crate::tokens::SECRET_PREFIX)).then_some(name),
            on_refusal: OnRefusal::Keep,
            usage: None,
        },
        Kind {
            name: "serviceaccounts",
            resource: resource("", "v1", "ServiceAccount"),
            down: |o, m| {
                // The super cluster issues no tokens for tenant accounts (pods do not mount them either).
                let mut account = with(o, m, &["imagePullSecrets"]);
                account["automountServiceAccountToken"] = json!(false);
                Some(account)
            },
            content: &["imagePullSecrets"],
            verbatim: &[],
            status_up: false,
            admit: anything,
            super_name: same,
            on_refusal: OnRefusal::Keep,
            usage: None,
        },
        Kind {
            name: "endpoints",
            resource: resource("", "v1", "Endpoints"),
            // Only those of Services without a selector (the others are the super cluster's endpoints controller's);
            // `sync.rs` checks the Service.
            down: |o, m| Some(with(o, m, &["subsets"])),
            content: &["subsets"],
            verbatim: &[],
            status_up: false,
            admit: policy::endpoints,
            super_name: same,
            // An address allowed when it was copied (the tenant's pod's) can become another tenant's pod's.
            on_refusal: OnRefusal::Remove,
            usage: None,
        },
        Kind {
            name: "persistentvolumeclaims",
            resource: resource("", "v1", "PersistentVolumeClaim"),
            down: |o, m| {
                let mut claim = with(o, m, &[]);
                claim["spec"] = claim_spec(&o["spec"]);
                Some(claim)
            },
            content: &[],
            verbatim: &[],
            status_up: true,
            admit: anything,
            super_name: same,
            on_refusal: OnRefusal::Keep,
            usage: None,
        },
        Kind {
            name: "services",
            resource: resource("", "v1", "Service"),
            down: |o, m| {
                let mut service = with(o, m, &[]);
                let mut spec = pick(&o["spec"], &["selector", "type", "sessionAffinity", "publishNotReadyAddresses"]);
                // Addresses and node ports are the super cluster's to give.
                let ports: Vec<Value> = o["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| pick(p, &["name", "port", "targetPort", "protocol", "appProtocol"]))
                    .collect();
                spec["ports"] = json!(ports);
                if o["spec"]["clusterIP"] == "None" {
                    spec["clusterIP"] = json!("None");
                }
                service["spec"] = spec;
                Some(service)
            },
            content: &["spec"],
            verbatim: &[],
            status_up: false,
            admit: |o, cx| policy::service(&o["spec"], cx),
            super_name: same,
            on_refusal: OnRefusal::Keep,
            usage: None,
        },
        Kind {
            name: "pods",
            resource: resource("", "v1", "Pod"),
            down: |o, m| {
                let mut pod = with(o, m, &[]);
                pod["spec"] = pod_spec(&o["spec"], m, o["metadata"]["name"].as_str().unwrap_or_default());
                if m.egress_off {
                    pod["metadata"]["labels"][nest_core::tenancy::EGRESS] = json!("deny");
                }
                // The platform admin's word on the tenant's share of the node, for the node (a tenant's own
                // annotations of these names were not copied: `with` keeps nest's prefixes out).
                for (annotation, value) in m.share {
                    pod["metadata"]["annotations"][annotation] = json!(value);
                }
                Some(pod)
            },
            content: &[],
            verbatim: &[],
            status_up: true,
            admit: |o, cx| policy::pod(&o["spec"], cx),
            super_name: same,
            on_refusal: OnRefusal::Keep,
            usage: Some(|pod, defaults| match defaults {
                None => compute::usage_of_pod(pod),
                Some(defaults) => compute::usage(&compute::defaulted(&pod["spec"], defaults)),
            }),
        },
    ]
}

/// The cluster-scoped kinds the super cluster shares with every tenant: objects labelled [`names::PUBLIC_LABEL`]
/// `"true"` appear in each tenant as they are.
pub fn public() -> Vec<(&'static str, ApiResource)> {
    vec![
        ("storageclasses", resource("storage.k8s.io", "v1", "StorageClass")),
        ("priorityclasses", resource("scheduling.k8s.io", "v1", "PriorityClass")),
        ("customresourcedefinitions", resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition")),
    ]
}

/// A custom resource kind synced like the built-in ones: its `spec` down, its `status` up.
pub fn custom(group: &str, version: &str, kind: &str) -> Kind {
    let resource = resource(group, version, kind);
    // Registered once at start, for the life of the process: the name may live as long.
    let name: &'static str = Box::leak(resource.plural.clone().into_boxed_str());
    Kind {
        name,
        resource,
        down: |o, m| Some(with(o, m, &["spec"])),
        content: &["spec"],
        verbatim: &[],
        status_up: true,
        admit: anything,
        super_name: same,
        on_refusal: OnRefusal::Keep,
        usage: None,
    }
}

/// Parses `group/version/Kind` (`version/Kind` for the core group).
pub fn parse_gvk(text: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = text.split('/').collect();
    match parts[..] {
        [group, version, kind] if !version.is_empty() && !kind.is_empty() => {
            Some((group.to_string(), version.to_string(), kind.to_string()))
        }
        [version, kind] if !version.is_empty() && !kind.is_empty() => {
            Some((String::new(), version.to_string(), kind.to_string()))
        }
        _ => None,
    }
}

/// What of a claim's spec goes down: what it asks for, never what would pick a volume (`volumeName`, `selector`,
/// `dataSource`, `dataSourceRef`: a volume or snapshot of another tenant's is one name away), which the super
/// cluster's provisioner and binder decide.
pub fn claim_spec(spec: &Value) -> Value {
    pick(spec, &["accessModes", "resources", "storageClassName", "volumeMode"])
}

/// The labels or annotations (`entries`) of a tenant object that go down: neither nest's own ([`names::copied`])
/// nor those under a prefix that flows up only.
fn kept(entries: &Value, mapping: &Mapping) -> Map<String, Value> {
    entries
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| names::copied(k) && !mapping.transparent.iter().any(|p| k.starts_with(p.as_str())))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The super object's metadata with the fields `copy` of the tenant object `object`.
fn with(object: &Value, mapping: &Mapping, copy: &[&str]) -> Value {
    let meta = &object["metadata"];
    let mut labels = kept(&meta["labels"], mapping);
    labels.insert(TENANT_LABEL.into(), json!(mapping.key));
    let mut annotations = kept(&meta["annotations"], mapping);
    annotations.insert(TENANT_NAMESPACE.into(), json!(mapping.namespace));
    annotations.insert(TENANT_NAME.into(), meta["name"].clone());
    annotations.insert(TENANT_UID.into(), meta["uid"].clone());
    let mut out = json!({
        "apiVersion": object["apiVersion"], "kind": object["kind"],
        "metadata": {"name": meta["name"], "namespace": mapping.super_namespace, "labels": labels, "annotations": annotations},
    });
    for field in copy {
        if let Some(value) = object.get(*field).filter(|v| !v.is_null()) {
            out[*field] = value.clone();
        }
    }
    out
}

fn pick(object: &Value, fields: &[&str]) -> Value {
    let picked: Map<String, Value> = fields
        .iter()
        .filter_map(|f| object.get(*f).filter(|v| !v.is_null()).map(|v| (f.to_string(), v.clone())))
        .collect();
    Value::Object(picked)
}

/// A tenant pod's spec as it runs in the super cluster: unscheduled; with its tenant ServiceAccount's tokens (which
/// the tenant API server issues, [`crate::tokens`]) projected from the pod's token Secret instead of asked of the
/// super cluster, and the tenant's API server as `kubernetes`; with the downward API reporting the tenant's
/// namespace and the tenant pod's UID; with affinity terms kept within the tenant.
fn pod_spec(spec: &Value, mapping: &Mapping, pod: &str) -> Value {
    let mut spec = spec.clone();
    let Some(map) = spec.as_object_mut() else { return json!({}) };
    // A node selector stays: virtual nodes carry the super nodes' names and labels.
    // A priority is the super cluster's to compute from the class, which the policy checks.
    for field in ["nodeName", "serviceAccount", "priority"] {
        map.remove(field);
    }
    // The tenant's account is synced too; the super cluster mounts no token of its own: the tenant's tokens come
    // from the pod's token Secret, each where the tenant pod asked for it.
    if map.get("serviceAccountName").is_none_or(|n| n.as_str().is_none_or(str::is_empty)) {
        map.insert("serviceAccountName".into(), json!("default"));
    }
    map.insert("automountServiceAccountToken".into(), json!(false));
    let secret = crate::tokens::secret_name(pod);
    for volume in map.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or_default().to_string();
        let sources = volume.pointer_mut("/projected/sources").and_then(Value::as_array_mut);
        for (index, source) in sources.into_iter().flatten().enumerate() {
            if let Some(token) = source.get("serviceAccountToken").cloned() {
                let item = json!({"key": crate::tokens::key(&name, index), "path": token["path"]});
                *source = json!({"secret": {"name": secret, "items": [item]}});
            }
        }
        // (Read through `pointer_mut`: indexing a missing field of a `Value` for writing would add it as null.)
        for item in volume.pointer_mut("/downwardAPI/items").and_then(Value::as_array_mut).into_iter().flatten() {
            tenant_field(item);
        }
        let sources = volume.pointer_mut("/projected/sources").and_then(Value::as_array_mut);
        for source in sources.into_iter().flatten() {
            for item in source.pointer_mut("/downwardAPI/items").and_then(Value::as_array_mut).into_iter().flatten() {
                tenant_field(item);
            }
        }
        // The claim the super cluster makes for an ephemeral volume is a claim like any other: what it asks for goes
        // down, as a synced claim's does, and its metadata as any object's.
        if let Some(template) = volume.pointer_mut("/ephemeral/volumeClaimTemplate") {
            let mut filtered = json!({"spec": claim_spec(&template["spec"])});
            for field in ["labels", "annotations"] {
                let entries = kept(&template["metadata"][field], mapping);
                if !entries.is_empty() {
                    filtered["metadata"][field] = Value::Object(entries);
                }
            }
            *template = filtered;
        }
    }
    bound_numbers(map, mapping.max_grace_period_seconds);
    config_maps_by_super_name(map);
    let (host, port) = mapping.api_server;
    for list in ["initContainers", "containers"] {
        for container in map.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            let mut env: Vec<Value> = container["env"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| !matches!(e["name"].as_str(), Some("KUBERNETES_SERVICE_HOST" | "KUBERNETES_SERVICE_PORT")))
                .map(|mut e| {
                    if e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace" {
                        e = json!({"name": e["name"], "value": mapping.namespace});
                    }
                    e
                })
                .collect();
            env.push(json!({"name": "KUBERNETES_SERVICE_HOST", "value": host}));
            env.push(json!({"name": "KUBERNETES_SERVICE_PORT", "value": port.to_string()}));
            container["env"] = json!(env);
        }
    }
    // Pod (anti-)affinity terms name tenant namespaces: they become the super ones; a term without namespaces means
    // the pod's own, which stays right.
    if let Some(affinity) = map.get_mut("affinity") {
        for kind in ["podAffinity", "podAntiAffinity"] {
            for rule in
                ["requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"]
            {
                for term in affinity[kind][rule].as_array_mut().into_iter().flatten() {
                    let term = if term.get("podAffinityTerm").is_some() { &mut term["podAffinityTerm"] } else { term };
                    if let Some(namespaces) = term.get_mut("namespaces").and_then(Value::as_array_mut) {
                        for namespace in namespaces.iter_mut() {
                            if let Some(name) = namespace.as_str() {
                                *namespace = json!(names::super_namespace(mapping.key, name));
                            }
                        }
                    }
                    if let Some(term) = term.as_object_mut() {
                        // A selector of namespaces would reach other tenants' namespaces.
                        term.remove("namespaceSelector");
                    }
                }
            }
        }
    }
    spec
}

/// An integer of a spec as a number wide enough for any JSON number (a float, or one past i64, is held at the end
/// of i128 it lies towards); `None` for what is no number.
fn integer(value: &Value) -> Option<i128> {
    if let Some(n) = value.as_i64() {
        return Some(i128::from(n));
    }
    if let Some(n) = value.as_u64() {
        return Some(i128::from(n));
    }
    // A saturating cast: a float past i128 is i128::MAX or MIN.
    value.as_f64().map(|f| f as i128)
}

/// Holds `object[field]`, when it is a number, to what `bound` makes of it.
fn hold(object: &mut Value, field: &str, bound: impl Fn(i128) -> i64) {
    if let Some(value) = object.get_mut(field)
        && let Some(n) = integer(value)
    {
        *value = json!(bound(n));
    }
}

/// `n` within `least..=most`.
fn within(n: i128, least: i64, most: i64) -> i64 {
    i64::try_from(n.clamp(i128::from(least), i128::from(most))).unwrap_or(most)
}

/// Holds the numbers of a pod spec that the super cluster acts on to what kube-apiserver takes and the platform's
/// caps, whatever the tenant's API server let through: the termination grace period at most `max_grace` (a negative
/// one is 1, as the Pod conversion makes it), a liveness or startup probe's likewise (at least 1), a `sleep` action
/// within the grace period (kube-apiserver's validateSleepAction), `activeDeadlineSeconds` within 1..=2^31-1 (as
/// the management cluster's API server bounds it), and `tolerationSeconds` at least 0 (a negative one means 0
/// upstream).
fn bound_numbers(spec: &mut Map<String, Value>, max_grace: u32) {
    let max_grace = i64::from(max_grace);
    let mut pod = Value::Object(std::mem::take(spec));
    hold(&mut pod, "terminationGracePeriodSeconds", |n| if n < 0 { 1.min(max_grace) } else { within(n, 0, max_grace) });
    // kube-apiserver's default, for the sleep actions' bound, when the spec has none.
    let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap_or(30.min(max_grace));
    hold(&mut pod, "activeDeadlineSeconds", |n| within(n, 1, i64::from(i32::MAX)));
    for toleration in pod.get_mut("tolerations").and_then(Value::as_array_mut).into_iter().flatten() {
        hold(toleration, "tolerationSeconds", |n| within(n, 0, i64::MAX));
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for container in pod.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            for probe in ["livenessProbe", "startupProbe"] {
                if let Some(probe) = container.get_mut(probe).filter(|p| p.is_object()) {
                    hold(probe, "terminationGracePeriodSeconds", |n| within(n, 1, max_grace.max(1)));
                }
            }
            for hook in ["postStart", "preStop"] {
                if let Some(sleep) = container.pointer_mut(&format!("/lifecycle/{hook}/sleep")) {
                    hold(sleep, "seconds", |n| within(n, 0, grace));
                }
            }
        }
    }
    if let Value::Object(bounded) = pod {
        *spec = bounded;
    }
}

/// The grace period to delete super object `existing` with, its tenant object being `tenant` (or gone): the tenant
/// deletion's own when it has one, else the super pod's spec's, held to `max` either way, and never negative; so
/// that the super API server never falls back to a spec's grace period made before the cap. `None` for kinds
/// without a grace period.
pub fn delete_grace(tenant: Option<&Value>, existing: &Value, max: u32) -> Option<u32> {
    let asked = tenant
        .and_then(|t| integer(&t["metadata"]["deletionGracePeriodSeconds"]))
        .or_else(|| integer(&existing["spec"]["terminationGracePeriodSeconds"]))?;
    Some(u32::try_from(asked.clamp(0, i128::from(max))).unwrap_or(max))
}

/// A downward-API item whose `fieldRef` would read the super pod's namespace or UID reads the tenant's instead, from
/// the annotations the syncer puts on the super pod.
fn tenant_field(item: &mut Value) {
    let Some(path) = item.pointer_mut("/fieldRef/fieldPath") else { return };
    let tenant = match path.as_str() {
        Some("metadata.namespace") => TENANT_NAMESPACE,
        Some("metadata.uid") => TENANT_UID,
        _ => return,
    };
    *path = json!(format!("metadata.annotations['{tenant}']"));
}

/// Points every ConfigMap a pod spec names (volumes, projected sources, `env` and `envFrom`) at its super name; a
/// reference to a name that is not synced is left alone, and finds nothing.
fn config_maps_by_super_name(spec: &mut Map<String, Value>) {
    let rename = |reference: &mut Value| {
        if let Some(name) = reference.get_mut("name")
            && let Some(super_name) = name.as_str().and_then(names::super_config_map)
        {
            *name = json!(super_name);
        }
    };
    for volume in spec.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(reference) = volume.get_mut("configMap") {
            rename(reference);
        }
        for source in volume.pointer_mut("/projected/sources").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(reference) = source.get_mut("configMap") {
                rename(reference);
            }
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for container in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            for variable in container.get_mut("env").and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(reference) = variable.pointer_mut("/valueFrom/configMapKeyRef") {
                    rename(reference);
                }
            }
            for source in container.get_mut("envFrom").and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(reference) = source.get_mut("configMapRef") {
                    rename(reference);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping() -> Mapping<'static> {
        Mapping {
            key: "default-abcde-a",
            namespace: "web",
            super_namespace: "default-abcde-a-web".into(),
            api_server: ("10.0.0.9", 6443),
            transparent: TRANSPARENT,
            max_grace_period_seconds: 3600,
            egress_off: false,
            share: &NO_SHARE,
        }
    }

    static TRANSPARENT: &[String] = &[];
    static NO_SHARE: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();

    fn pod_down(spec: Value, mapping: &Mapping) -> Value {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u"}, "spec": spec});
        let kinds = built_in();
        let pods = kinds.iter().find(|k| k.name == "pods").unwrap();
        (pods.down)(&pod, mapping).unwrap()
    }

    #[test]
    fn what_flows_up_only_never_goes_down() {
        let configured = ["example.com/from-super/".to_string()];
        let mapping = Mapping { transparent: &configured, ..mapping() };
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "uid": "u",
                "labels": {"app": "x", "transparency.tenancy.nest.dev/zone": "forged", "example.com/from-super/a": "b"},
                "annotations": {"note": "kept", "transparency.tenancy.nest.dev/ingress": "forged",
                                "example.com/from-super/c": "d", "nest.dev/stop-seconds": "86400"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        });
        for kind in &built_in() {
            let down = (kind.down)(&pod, &mapping).unwrap();
            let labels = down["metadata"]["labels"].as_object().unwrap();
            let annotations = down["metadata"]["annotations"].as_object().unwrap();
            assert_eq!(labels.keys().collect::<Vec<_>>(), ["app", "tenancy.nest.dev/cluster"], "{}", kind.name);
            assert!(annotations.contains_key("note"), "{}", kind.name);
            for key in annotations.keys() {
                assert!(
                    !key.starts_with("transparency.")
                        && !key.starts_with("example.com/")
                        && !key.starts_with("nest.dev/"),
                    "{}: {key}",
                    kind.name
                );
            }
        }
    }

    #[test]
    fn a_tenant_kept_in_has_its_pods_labelled_for_the_wall_and_no_tenant_labels_itself_out() {
        let spec = json!({"containers": [{"name": "c", "image": "i"}]});
        let kept_in = pod_down(spec.clone(), &Mapping { egress_off: true, ..mapping() });
        assert_eq!(kept_in["metadata"]["labels"]["tenancy.nest.dev/egress"], "deny");
        assert!(pod_down(spec, &mapping())["metadata"]["labels"].get("tenancy.nest.dev/egress").is_none());
        // A tenant's own label of the name never goes down (nest's metadata is not copied).
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "uid": "u", "labels": {"tenancy.nest.dev/egress": "allow"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let kinds = built_in();
        let pods = kinds.iter().find(|k| k.name == "pods").unwrap();
        let down = (pods.down)(&pod, &Mapping { egress_off: true, ..mapping() }).unwrap();
        assert_eq!(down["metadata"]["labels"]["tenancy.nest.dev/egress"], "deny");
    }

    #[test]
    fn a_pod_carries_the_platform_admins_share_of_the_node_and_never_the_tenants_own() {
        let share = std::collections::BTreeMap::from([
            ("tenancy.nest.dev/tenant-memory".to_string(), "2Gi".to_string()),
            ("tenancy.nest.dev/tenant-pids".to_string(), "500".to_string()),
        ]);
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "uid": "u", "annotations": {
                "tenancy.nest.dev/tenant-memory": "1Ti", "tenancy.nest.dev/tenant-cpu": "64", "note": "kept"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let kinds = built_in();
        let pods = kinds.iter().find(|k| k.name == "pods").unwrap();
        let annotations = |mapping: &Mapping| (pods.down)(&pod, mapping).unwrap()["metadata"]["annotations"].clone();
        let shared = annotations(&Mapping { share: &share, ..mapping() });
        assert_eq!(shared["tenancy.nest.dev/tenant-memory"], "2Gi");
        assert_eq!(shared["tenancy.nest.dev/tenant-pids"], "500");
        assert!(shared.get("tenancy.nest.dev/tenant-cpu").is_none(), "the tenant's own never goes down");
        assert_eq!(shared["note"], "kept");
        let unset = annotations(&mapping());
        for annotation in crate::compute::SHARE_ANNOTATIONS {
            assert!(unset.get(annotation).is_none(), "{annotation}: the node's defaults unless the admin says");
        }
        // Only pods carry it.
        let configmaps = kinds.iter().find(|k| k.name == "configmaps").unwrap();
        let down = (configmaps.down)(&pod, &Mapping { share: &share, ..mapping() }).unwrap();
        assert!(down["metadata"]["annotations"].get("tenancy.nest.dev/tenant-memory").is_none());
    }

    #[test]
    fn only_pods_count_against_the_quota_and_a_new_one_counts_with_its_defaults() {
        let kinds = built_in();
        for kind in &kinds {
            assert_eq!(kind.usage.is_some(), kind.name == "pods", "{}", kind.name);
        }
        let usage = kinds.iter().find(|k| k.name == "pods").unwrap().usage.unwrap();
        let pod = json!({"spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}});
        assert_eq!(usage(&pod, None).get("limits.memory"), 0.0, "as it is: made before any LimitRange");
        let defaults = crate::compute::Defaults::default();
        assert_eq!(usage(&pod, Some(&defaults)).get("limits.memory"), 512.0 * 1024.0 * 1024.0);
        let done = json!({"spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Succeeded"}});
        assert_eq!(usage(&done, None).get("pods"), 0.0);
    }

    #[test]
    fn ephemeral_claims_go_down_as_synced_claims_do() {
        let claim = json!({
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "fast", "volumeMode": "Filesystem",
            "volumeName": "pvc-of-another-tenant", "selector": {"matchLabels": {"tenant": "acme"}},
            "dataSource": {"kind": "PersistentVolumeClaim", "name": "acme-data"},
            "dataSourceRef": {"kind": "VolumeSnapshot", "name": "acme-snapshot", "namespace": "acme"},
        });
        let wanted = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                            "storageClassName": "fast", "volumeMode": "Filesystem"});
        let spec = json!({"containers": [{"name": "c", "image": "i"}], "volumes": [{"name": "scratch", "ephemeral": {
            "volumeClaimTemplate": {
                "metadata": {"labels": {"tenancy.nest.dev/cluster": "acme-key", "app": "x"},
                             "annotations": {"transparency.tenancy.nest.dev/a": "b"}, "name": "ignored"},
                "spec": claim}}}]});
        let down = pod_down(spec, &mapping());
        let template = &down["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"];
        assert_eq!(template, &json!({"metadata": {"labels": {"app": "x"}}, "spec": wanted}));
        // A synced claim, the same way.
        let kinds = built_in();
        let claims = kinds.iter().find(|k| k.name == "persistentvolumeclaims").unwrap();
        let object = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c", "uid": "u"},
                            "spec": claim});
        assert_eq!((claims.down)(&object, &mapping()).unwrap()["spec"], wanted);
    }

    #[test]
    fn numbers_go_down_within_what_the_api_takes_and_the_platforms_caps() {
        let container = |grace: Value, sleep: Value| {
            json!({"name": "c", "image": "i",
                   "livenessProbe": {"tcpSocket": {"port": 80}, "terminationGracePeriodSeconds": grace},
                   "startupProbe": {"tcpSocket": {"port": 80}, "terminationGracePeriodSeconds": 5},
                   "lifecycle": {"preStop": {"sleep": {"seconds": sleep}}}})
        };
        let spec = json!({
            "terminationGracePeriodSeconds": i64::MAX, "activeDeadlineSeconds": i64::MAX,
            "tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": i64::MIN},
                            {"key": "k", "effect": "NoExecute", "tolerationSeconds": i64::MAX},
                            {"key": "k", "effect": "NoExecute"}],
            "containers": [container(json!(i64::MAX), json!(7200))],
            "initContainers": [container(json!(u64::MAX), json!(-1))],
        });
        let down = pod_down(spec, &mapping());
        let spec = &down["spec"];
        assert_eq!(spec["terminationGracePeriodSeconds"], 3600);
        assert_eq!(spec["activeDeadlineSeconds"], i32::MAX);
        assert_eq!(spec["tolerations"][0]["tolerationSeconds"], 0);
        assert_eq!(spec["tolerations"][1]["tolerationSeconds"], i64::MAX, "within int64 the API takes anything");
        assert!(spec["tolerations"][2].get("tolerationSeconds").is_none(), "nothing is added");
        for list in ["containers", "initContainers"] {
            let container = &spec[list][0];
            assert_eq!(container["livenessProbe"]["terminationGracePeriodSeconds"], 3600, "{list}");
            assert_eq!(container["startupProbe"]["terminationGracePeriodSeconds"], 5, "{list}");
        }
        assert_eq!(spec["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"], 3600, "within the grace period");
        assert_eq!(spec["initContainers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"], 0);

        // The platform admin's cap for the tenant, a negative grace period, floats and numbers past i64.
        let tight = Mapping { max_grace_period_seconds: 60, ..mapping() };
        let odd = json!({"terminationGracePeriodSeconds": -5, "activeDeadlineSeconds": 1e300,
                         "containers": [container(json!(-3), json!(1e300))]});
        let spec = &pod_down(odd, &tight)["spec"];
        assert_eq!(spec["terminationGracePeriodSeconds"], 1, "negative is 1, as the Pod conversion makes it");
        assert_eq!(spec["activeDeadlineSeconds"], i32::MAX);
        assert_eq!(spec["containers"][0]["livenessProbe"]["terminationGracePeriodSeconds"], 1);
        assert_eq!(spec["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"], 1);
        let spec = &pod_down(json!({"terminationGracePeriodSeconds": 600, "containers": []}), &tight)["spec"];
        assert_eq!(spec["terminationGracePeriodSeconds"], 60);
        let spec = &pod_down(json!({"terminationGracePeriodSeconds": 0, "containers": []}), &tight)["spec"];
        assert_eq!(spec["terminationGracePeriodSeconds"], 0, "zero stays: stop at once");
    }

    #[test]
    fn a_super_pod_is_deleted_within_the_cap_whether_or_not_its_tenant_pod_is_there() {
        let super_pod = json!({"spec": {"terminationGracePeriodSeconds": i64::MAX}});
        let deleting = |grace: Value| json!({"metadata": {"deletionGracePeriodSeconds": grace}});
        assert_eq!(delete_grace(Some(&deleting(json!(30))), &super_pod, 3600), Some(30));
        assert_eq!(delete_grace(Some(&deleting(json!(0))), &super_pod, 3600), Some(0));
        assert_eq!(delete_grace(Some(&deleting(json!(i64::MAX))), &super_pod, 3600), Some(3600));
        assert_eq!(
            delete_grace(Some(&deleting(json!(1u64 << 32))), &super_pod, 3600),
            Some(3600),
            "never wrapped to 0"
        );
        assert_eq!(delete_grace(Some(&deleting(json!(-1))), &super_pod, 3600), Some(0));
        // The tenant pod gone (a forced delete): the super pod's spec, held to the cap, not left to the API server.
        assert_eq!(delete_grace(None, &super_pod, 3600), Some(3600));
        assert_eq!(delete_grace(None, &json!({"spec": {"terminationGracePeriodSeconds": 30}}), 3600), Some(30));
        assert_eq!(delete_grace(Some(&json!({"metadata": {}})), &json!({"spec": {}}), 3600), None, "not a pod");
    }

    #[test]
    fn a_pod_goes_down_unscheduled_with_the_tenant_api_server_namespace_and_tokens() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "web", "uid": "u1", "labels": {"app": "x", "tenancy.nest.dev/cluster": "forged"}},
            "spec": {
                "nodeName": "n1", "serviceAccountName": "builder",
                "containers": [{"name": "c", "image": "nginx",
                    "env": [{"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                    "volumeMounts": [{"name": "kube-api-access-x", "mountPath": "/var/run/secrets"}, {"name": "data", "mountPath": "/d"}]}],
                "volumes": [{"name": "kube-api-access-x", "projected": {"sources": [
                                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
                            {"name": "data", "emptyDir": {}},
                            {"name": "me", "downwardAPI": {"items": [{"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
                                                                     {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}],
            },
            "status": {"phase": "Running"},
        });
        let kinds = built_in();
        let pods = kinds.iter().find(|k| k.name == "pods").unwrap();
        let down = (pods.down)(&pod, &mapping()).unwrap();
        assert_eq!(down["metadata"]["namespace"], "default-abcde-a-web");
        assert_eq!(
            down["metadata"]["labels"]["tenancy.nest.dev/cluster"], "default-abcde-a",
            "the tenant cannot forge it"
        );
        assert_eq!(down["metadata"]["annotations"]["tenancy.nest.dev/uid"], "u1");
        assert!(down.get("status").is_none() && down["spec"].get("nodeName").is_none());
        assert_eq!(down["spec"]["serviceAccountName"], "builder");
        assert_eq!(down["spec"]["automountServiceAccountToken"], false);
        let container = &down["spec"]["containers"][0];
        assert_eq!(container["volumeMounts"].as_array().unwrap().len(), 2, "the token volume stays mounted");
        // The token is the pod's token Secret's (the tenant API server's), the CA the tenant's, the namespace the
        // tenant's.
        let sources = &down["spec"]["volumes"][0]["projected"]["sources"];
        assert_eq!(
            sources[0],
            json!({"secret": {"name": crate::tokens::secret_name("p"), "items": [{"key": "kube-api-access-x.0", "path": "token"}]}})
        );
        assert_eq!(sources[1]["configMap"]["name"], "nest-kube-root-ca.crt");
        let tenant_namespace = "metadata.annotations['tenancy.nest.dev/namespace']";
        assert_eq!(sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"], tenant_namespace);
        let items = &down["spec"]["volumes"][2]["downwardAPI"]["items"];
        assert_eq!(items[0]["fieldRef"]["fieldPath"], "metadata.annotations['tenancy.nest.dev/uid']");
        assert_eq!(items[1]["fieldRef"]["fieldPath"], "metadata.name", "the super pod has the tenant pod's name");
        let secrets = kinds.iter().find(|k| k.name == "secrets").unwrap();
        assert_eq!((secrets.super_name)(&crate::tokens::secret_name("p")), None, "a tenant Secret in its place");
        assert_eq!((secrets.super_name)("settings"), Some("settings"));
        let env = container["env"].as_array().unwrap();
        assert!(env.contains(&json!({"name": "NS", "value": "web"})), "{env:?}");
        assert!(env.contains(&json!({"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.9"})), "{env:?}");
    }

    #[test]
    fn a_pod_that_names_the_root_ca_gets_the_tenants_under_its_super_name() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "containers": [{"name": "c", "image": "i",
                    "env": [{"name": "CA", "valueFrom": {"configMapKeyRef": {"name": "kube-root-ca.crt", "key": "ca.crt"}}},
                            {"name": "OTHER", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}}],
                    "envFrom": [{"configMapRef": {"name": "kube-root-ca.crt"}}]}],
                "ephemeralContainers": [{"name": "e", "image": "i", "envFrom": [{"configMapRef": {"name": "kube-root-ca.crt"}}]}],
                "volumes": [{"name": "ca", "configMap": {"name": "kube-root-ca.crt"}},
                            {"name": "both", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}, {"configMap": {"name": "settings"}}]}}],
            },
        });
        let kinds = built_in();
        let pods = kinds.iter().find(|k| k.name == "pods").unwrap();
        let down = (pods.down)(&pod, &mapping()).unwrap();
        let spec = &down["spec"];
        assert_eq!(spec["volumes"][0]["configMap"]["name"], "nest-kube-root-ca.crt");
        assert_eq!(spec["volumes"][1]["projected"]["sources"][0]["configMap"]["name"], "nest-kube-root-ca.crt");
        assert_eq!(spec["volumes"][1]["projected"]["sources"][1]["configMap"]["name"], "settings");
        let container = &spec["containers"][0];
        assert_eq!(container["env"][0]["valueFrom"]["configMapKeyRef"]["name"], "nest-kube-root-ca.crt");
        assert_eq!(container["env"][1]["valueFrom"]["configMapKeyRef"]["name"], "settings");
        assert_eq!(container["envFrom"][0]["configMapRef"]["name"], "nest-kube-root-ca.crt");
        assert_eq!(spec["ephemeralContainers"][0]["envFrom"][0]["configMapRef"]["name"], "nest-kube-root-ca.crt");
        let configmaps = kinds.iter().find(|k| k.name == "configmaps").unwrap();
        assert_eq!((configmaps.super_name)("kube-root-ca.crt"), Some("nest-kube-root-ca.crt"));
        assert_eq!(
            (configmaps.super_name)("nest-kube-root-ca.crt"),
            None,
            "a tenant ConfigMap would take the CA's place"
        );
    }

    #[test]
    fn services_lose_their_addresses_and_token_secrets_stay() {
        let kinds = built_in();
        let services = kinds.iter().find(|k| k.name == "services").unwrap();
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "uid": "u"},
            "spec": {"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"], "selector": {"app": "x"},
                     "ports": [{"port": 80, "nodePort": 30001, "targetPort": 8080}]}});
        let down = (services.down)(&service, &mapping()).unwrap();
        assert_eq!(down["spec"], json!({"selector": {"app": "x"}, "ports": [{"port": 80, "targetPort": 8080}]}));
        let secrets = kinds.iter().find(|k| k.name == "secrets").unwrap();
        let token = json!({"metadata": {"name": "t"}, "type": "kubernetes.io/service-account-token"});
        assert!((secrets.down)(&token, &mapping()).is_none());
    }
}
