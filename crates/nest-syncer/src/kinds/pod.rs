//! Pods: a tenant pod runs as a super pod (unscheduled, with the tenant's API server, namespace, tokens and share
//! of the node, [`pod_spec`]); before it is made its account must be there and its token Secret filled
//! ([`crate::tokens`]); its tokens are renewed and its images put back; it is bound in the tenant to a virtual node
//! named after the super node it runs on (as a scheduler binds, through `pods/binding`), and its status goes up;
//! its ephemeral containers (`kubectl debug`) go down after it, through `pods/ephemeralcontainers`;
//! once its super pod is gone its token Secret goes, and a tenant pod being deleted is removed, as a kubelet would.

use futures_util::future::BoxFuture;
use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use super::{Cx, Gone, Hooks, Kind, Mapping, Prepared, Repaired, Up, claim_spec, integer, kept, resource, with};
use crate::names::{self, TENANT_NAMESPACE, TENANT_UID};
use crate::requests::Change;
use crate::sync::Done;
use crate::{compute, policy};

pub fn kind() -> Kind {
    Kind {
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
        status_up: true,
        admit: |o, cx| policy::pod(&o["spec"], cx),
        usage: Some(|pod, defaults| match defaults {
            None => compute::usage_of_pod(pod),
            Some(defaults) => compute::usage(&compute::defaulted(&pod["spec"], defaults)),
        }),
        prune: Some(prune_super_pod),
        hooks: &PodHooks,
        ..Kind::plain("pods", resource("", "v1", "Pod"))
    }
}

struct PodHooks;

impl Hooks for PodHooks {
    /// Its account first (the super cluster may refuse a pod whose account does not exist), then its tokens (the
    /// node would otherwise find its token Secret missing).
    fn before_create<'a>(
        &'a self,
        cx: &'a Cx<'a>,
        wanted: &'a Value,
        tenant: &'a Value,
    ) -> BoxFuture<'a, kube::Result<Prepared>> {
        Box::pin(async move {
            let account = wanted["spec"]["serviceAccountName"].as_str().unwrap_or("default");
            if account != "default" && !cx.super_has("serviceaccounts", cx.super_namespace, account) {
                return Ok(Prepared { wait: true, after: None });
            }
            let after = cx.requests.ensure_tokens(cx.namespace, cx.super_namespace, tenant).await?;
            Ok(Prepared { wait: false, after })
        })
    }

    /// A pod is created without ephemeral containers (the super API server refuses them on create, as upstream's):
    /// [`Hooks::repair`] adds them through `pods/ephemeralcontainers`.
    fn creating(&self, wanted: &mut Value) {
        if let Some(spec) = wanted["spec"].as_object_mut() {
            spec.remove("ephemeralContainers");
        }
    }

    /// Its tokens renewed when due; its images put back (a pod's spec is mostly immutable: they are what can be);
    /// the tenant's ephemeral containers its copy lacks added ([`added_ephemeral_containers`]).
    fn repair<'a>(
        &'a self,
        cx: &'a Cx<'a>,
        wanted: &'a Value,
        existing: &'a Value,
        tenant: &'a Value,
    ) -> BoxFuture<'a, kube::Result<Repaired>> {
        Box::pin(async move {
            let after = cx.requests.ensure_tokens(cx.namespace, cx.super_namespace, tenant).await?;
            let operations: Vec<Value> = wanted["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
                .filter(|(i, c)| {
                    existing["spec"]["containers"][*i]["name"] == c["name"]
                        && existing["spec"]["containers"][*i]["image"] != c["image"]
                })
                .map(|(i, c)| json!({"op": "replace", "path": format!("/spec/containers/{i}/image"), "value": c["image"]}))
                .collect();
            let mut down = 0;
            if !operations.is_empty() {
                cx.requests.patch(cx.super_at(), cx.super_name, Change::Json(json!(operations))).await?;
                down += 1;
            }
            // One write each: the super namespace's Pod Security judges each there, and one refused (told to the
            // tenant as a SyncFailed Event on its pod, the copy running on without it) holds back no other.
            let mut refused = None;
            for container in added_ephemeral_containers(wanted, existing) {
                let patch = json!({"spec": {"ephemeralContainers": [container]}});
                match cx.requests.patch_subresource(cx.super_at(), cx.super_name, "ephemeralcontainers", patch).await {
                    Ok(()) => down += 1,
                    Err(kube::Error::Api(status)) if (400..500).contains(&status.code) => {
                        refused.get_or_insert(kube::Error::Api(status));
                    }
                    Err(error) => return Err(error),
                }
            }
            match refused {
                Some(refusal) => Err(refusal),
                None => Ok(Repaired { down, after }),
            }
        })
    }

    /// Bound to the virtual node of its super pod's node; its status without `nominatedNodeName` (the super
    /// cluster's scheduler's business).
    fn upward(&self, _cx: &Cx<'_>, tenant: &Value, existing: &Value, up: &mut Up) {
        let node = existing["spec"]["nodeName"].as_str().unwrap_or_default();
        if !node.is_empty() && tenant["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
            up.node = Some(node.to_string());
        }
        // The super pod's host is the super node: the virtual node has its address, so hostIP stays right.
        if let Some(status) = up.status.as_mut().and_then(Value::as_object_mut) {
            status.remove("nominatedNodeName");
        }
    }

    /// Its token Secret goes once its super pod has; a tenant pod being deleted goes once its super pod has (or
    /// when what is in the way is not its), as a kubelet would remove it.
    fn gone<'a>(&'a self, cx: &'a Cx<'a>, gone: Gone<'a>) -> BoxFuture<'a, kube::Result<Done>> {
        Box::pin(async move {
            let mut done = Done::default();
            let secret = crate::tokens::secret_name(cx.name);
            if gone.existing.is_none() && cx.super_has("secrets", cx.super_namespace, &secret) {
                cx.requests.remove_tokens(cx.super_namespace, cx.name).await?;
                done.down += 1;
            }
            if let Some(tenant) = gone.tenant
                && !tenant["metadata"]["deletionTimestamp"].is_null()
                && (gone.existing.is_none() || !gone.ours)
            {
                nest_client::done_unless_gone_or_changed(cx.requests.delete(cx.tenant_at(), cx.name, Some(0)).await)?;
                done.up += 1;
            }
            Ok(done)
        })
    }
}

/// The ephemeral containers of `wanted` (translated as the pod's other containers are) that super pod `existing`
/// lacks, by name: each is added with a strategic merge patch of `pods/ephemeralcontainers`, whose merge key `name`
/// keeps the entries already there. Only additions: an entry is never changed or removed (the API server refuses
/// either, as upstream's `ValidatePodEphemeralContainersUpdate` does).
fn added_ephemeral_containers<'a>(wanted: &'a Value, existing: &Value) -> Vec<&'a Value> {
    let there: Vec<&Value> =
        existing["spec"]["ephemeralContainers"].as_array().into_iter().flatten().map(|c| &c["name"]).collect();
    wanted["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| !there.contains(&&c["name"]))
        .collect()
}

/// A tenant pod's spec as it runs in the super cluster: unscheduled; with its tenant ServiceAccount's tokens (which
/// the tenant API server issues, [`crate::tokens`]) projected from the pod's token Secret instead of asked of the
/// super cluster, and the tenant's API server as `kubernetes`; with the downward API reporting the tenant's
/// namespace and the tenant pod's UID; with affinity terms kept within the tenant.
pub fn pod_spec(spec: &Value, mapping: &Mapping, pod: &str) -> Value {
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
    for list in ["initContainers", "containers", "ephemeralContainers"] {
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

/// Keeps of a super pod only what the syncer reads (its metadata, status, node, grace period, containers' names,
/// images and the CPU and memory they ask for, which the tenant's quota counts, and its ephemeral containers' names),
/// so that the cache of ten thousand pods stays small.
pub fn prune_super_pod(pod: &mut DynamicObject) {
    let spec = &pod.data["spec"];
    let compute = |resources: &serde_json::Value| {
        let amounts = |field: &str| {
            let kept: serde_json::Map<String, serde_json::Value> = ["cpu", "memory"]
                .into_iter()
                .filter_map(|r| resources[field].get(r).map(|amount| (r.to_string(), amount.clone())))
                .collect();
            serde_json::Value::Object(kept)
        };
        serde_json::json!({"requests": amounts("requests"), "limits": amounts("limits")})
    };
    let list = |name: &str, image: bool| -> Vec<serde_json::Value> {
        spec[name]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let mut kept = serde_json::json!({"name": c["name"], "resources": compute(&c["resources"])});
                if image {
                    kept["image"] = c["image"].clone();
                }
                kept
            })
            .collect()
    };
    let names = |name: &str| -> Vec<serde_json::Value> {
        spec[name].as_array().into_iter().flatten().map(|c| serde_json::json!({"name": c["name"]})).collect()
    };
    let mut pruned = serde_json::json!({
        "nodeName": spec["nodeName"], "containers": list("containers", true),
        "initContainers": list("initContainers", false),
        "terminationGracePeriodSeconds": spec["terminationGracePeriodSeconds"],
    });
    let ephemeral = names("ephemeralContainers");
    if !ephemeral.is_empty() {
        pruned["ephemeralContainers"] = serde_json::json!(ephemeral);
    }
    pod.data["spec"] = pruned;
    pod.metadata.managed_fields = None;
}
