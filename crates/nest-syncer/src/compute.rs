//! What a tenant's pods may take of the management cluster's CPU, memory and processes, as the platform admin sets
//! it on the tenant's Cluster (or NestedControlPlane), over `nest syncer`'s defaults (issue 33):
//!
//! - **Defaults for containers** ([`Defaults`]; `tenancy.nest.dev/default-cpu-limit`, `…-memory-limit`,
//!   `…-cpu-request`, `…-memory-request`): the LimitRange [`LIMIT_RANGE`] in each of the tenant's super namespaces
//!   ([`limit_range`]), which the management API server's LimitRanger admission applies to every container that does
//!   not say (kube-apiserver's `plugin/pkg/admission/limitranger`, 1.33): a pod without limits gets the tenant's.
//!   The syncer owns it, in the management cluster, where no tenant writes; it follows the policy and is put back.
//! - **A quota summed over all the tenant's super namespaces** ([`Quota`]; `tenancy.nest.dev/quota-<resource>` for
//!   `pods`, `requests.cpu`, `requests.memory`, `limits.cpu`, `limits.memory`). A ResourceQuota counts one
//!   namespace and a tenant has many, so the syncer checks it itself before it creates a super pod: what the
//!   tenant's super pods that have not finished take ([`usage`], counted as upstream's quota evaluator counts pods),
//!   plus the new pod after its LimitRange defaults ([`defaulted`]). A refusal ([`Quota::admit`]) is in upstream
//!   ResourceQuota's words.
//! - **The tenant's share of the node** ([`SHARE_ANNOTATIONS`]): memory, CPU and process limits of the cgroup
//!   subtree the node keeps for all of the tenant's pods, written on every super pod when the platform admin set them
//!   (the node has its own defaults otherwise).
//!
//! ```
//! use nest_syncer::compute::{Defaults, Quota, defaulted, usage};
//! let pod = serde_json::json!({"containers": [{"name": "c"}]});
//! let asked = usage(&defaulted(&pod, &Defaults::default()));
//! assert_eq!(asked.get("limits.memory"), 512.0 * 1024.0 * 1024.0);
//! let mut quota = Quota::default();
//! assert!(quota.set("pods", "1"));
//! assert!(quota.admit("p", &asked, &asked).unwrap_err().starts_with("pods \"p\" is forbidden: exceeded quota"));
//! ```

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// The LimitRange in each of a tenant's super namespaces.
pub const LIMIT_RANGE: &str = "nest-tenant-defaults";
/// The name a tenant's quota goes by in refusals (there is no ResourceQuota object: it spans namespaces).
pub const QUOTA: &str = "nest-tenant-quota";
/// The annotations setting a tenant's container defaults: `tenancy.nest.dev/default-cpu-limit: 1`, and
/// `default-memory-limit`, `default-cpu-request`, `default-memory-request`.
pub const DEFAULT_PREFIX: &str = "tenancy.nest.dev/default-";
/// The annotations setting a tenant's quota: `tenancy.nest.dev/quota-pods: 20`, `quota-limits.memory: 8Gi`, …
pub const QUOTA_PREFIX: &str = "tenancy.nest.dev/quota-";
/// The annotations of a Cluster that the syncer writes on every super pod of its tenant, for the node: the memory
/// (a quantity), CPU (cores, a quantity) and processes (a count) all of the tenant's pods on a node may take together.
pub const SHARE_ANNOTATIONS: [&str; 3] =
    [nest_core::tenancy::TENANT_MEMORY, nest_core::tenancy::TENANT_CPU, nest_core::tenancy::TENANT_PIDS];

/// The resources a tenant's quota may hold, by ResourceQuota's names.
pub const RESOURCES: [&str; 5] = ["pods", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

/// What a container that does not say gets (a LimitRange's `default` and `defaultRequest` for containers), unless
/// the platform admin says otherwise: limits of half a core and 512 MiB, so that no pod without limits holds more
/// (one once held 3,000 MiB of the host), and requests of 10 millicores and 32 MiB, which is about what an idle small
/// process takes and lets a 4-core, 8 GiB node place 250 such pods.
#[derive(Clone, Debug, PartialEq)]
pub struct Defaults {
    /// Resource (`cpu`, `memory`) → quantity.
    pub limits: BTreeMap<String, String>,
    pub requests: BTreeMap<String, String>,
}

impl Default for Defaults {
    fn default() -> Defaults {
        let amounts = |cpu: &str, memory: &str| {
            BTreeMap::from([("cpu".to_string(), cpu.to_string()), ("memory".to_string(), memory.to_string())])
        };
        Defaults { limits: amounts("500m", "512Mi"), requests: amounts("10m", "32Mi") }
    }
}

/// A quantity the platform admin gave, if it is one and more than zero.
fn positive(text: &str) -> Option<f64> {
    nest_core::quantity::value(text.trim()).filter(|v| *v > 0.0)
}

impl Defaults {
    /// Sets `what` (`cpu-limit`, `memory-limit`, `cpu-request`, `memory-request`) to quantity `value`; false when
    /// either means nothing (a quantity must be more than zero: a zero limit would be no limit at all).
    pub fn set(&mut self, what: &str, value: &str) -> bool {
        let Some((resource, kind)) = what.split_once('-') else { return false };
        if !matches!(resource, "cpu" | "memory") || positive(value).is_none() {
            return false;
        }
        let amounts = match kind {
            "limit" => &mut self.limits,
            "request" => &mut self.requests,
            _ => return false,
        };
        amounts.insert(resource.to_string(), value.trim().to_string());
        true
    }

    /// The requests a container gets, each held to the limit it gets (a LimitRange whose `defaultRequest` is above
    /// its `default` is refused by the API server).
    pub fn held_requests(&self) -> BTreeMap<String, String> {
        self.requests
            .iter()
            .map(|(resource, request)| {
                let limit = self.limits.get(resource).filter(|l| positive(l) < positive(request));
                (resource.clone(), limit.unwrap_or(request).clone())
            })
            .collect()
    }
}

/// The LimitRange [`LIMIT_RANGE`] of super namespace `namespace` of tenant `key`.
pub fn limit_range(namespace: &str, key: &str, defaults: &Defaults) -> Value {
    json!({
        "apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": LIMIT_RANGE, "namespace": namespace, "labels": {crate::names::TENANT_LABEL: key}},
        "spec": {"limits": [
            {"type": "Container", "default": defaults.limits, "defaultRequest": defaults.held_requests()},
        ]},
    })
}

/// Whether a LimitRange's `spec` (as the API server returns it, its quantities perhaps written otherwise) is the
/// one `defaults` make.
pub fn limit_range_is(spec: &Value, defaults: &Defaults) -> bool {
    let same = |have: &Value, want: &BTreeMap<String, String>| {
        let have = have.as_object().cloned().unwrap_or_default();
        have.len() == want.len()
            && want.iter().all(|(resource, amount)| {
                have.get(resource).and_then(Value::as_str).and_then(nest_core::quantity::value) == positive(amount)
            })
    };
    let limits = spec["limits"].as_array().cloned().unwrap_or_default();
    let [item] = limits.as_slice() else { return false };
    item["type"] == "Container"
        && same(&item["default"], &defaults.limits)
        && same(&item["defaultRequest"], &defaults.held_requests())
        && ["min", "max", "maxLimitRequestRatio"].iter().all(|field| item.get(*field).is_none())
}

/// A pod spec as LimitRanger leaves it with `defaults` (`mutatePodResources`): each container and init container
/// gets the limits it does not set, and the requests it sets neither a request nor a limit of (a limit alone is the
/// request too, by the API's defaulting).
pub fn defaulted(spec: &Value, defaults: &Defaults) -> Value {
    let mut spec = spec.clone();
    let requests = defaults.held_requests();
    for list in ["containers", "initContainers"] {
        for container in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            let Some(container) = container.as_object_mut() else { continue };
            let resources = container.entry("resources").or_insert_with(|| json!({}));
            if !resources.is_object() {
                *resources = json!({});
            }
            let given_limits = resources["limits"].as_object().cloned().unwrap_or_default();
            let given_requests = resources["requests"].as_object().cloned().unwrap_or_default();
            let mut limits = given_limits.clone();
            for (resource, amount) in &defaults.limits {
                limits.entry(resource.clone()).or_insert_with(|| json!(amount));
            }
            let mut asked = given_requests.clone();
            for (resource, amount) in &requests {
                if !given_limits.contains_key(resource) {
                    asked.entry(resource.clone()).or_insert_with(|| json!(amount));
                }
            }
            if !limits.is_empty() {
                resources["limits"] = Value::Object(limits);
            }
            if !asked.is_empty() {
                resources["requests"] = Value::Object(asked);
            }
        }
    }
    spec
}

/// Amounts of the quota's resources ([`RESOURCES`]): pods counted, CPU in cores, memory in bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage(BTreeMap<&'static str, f64>);

impl Usage {
    /// The amount of `resource` (0 when none).
    pub fn get(&self, resource: &str) -> f64 {
        self.0.get(resource).copied().unwrap_or(0.0)
    }

    /// Adds `other`, resource by resource (held at the largest quantity rather than overflowing to infinity).
    pub fn add(&mut self, other: &Usage) {
        for (resource, amount) in &other.0 {
            let total = self.0.entry(resource).or_insert(0.0);
            *total = (*total + amount).min(nest_core::quantity::LARGEST);
        }
    }
}

/// What a pod (its spec; its phase, when `status` says one) takes of a quota, as upstream's pod evaluator counts it
/// (`PodUsageFunc`, 1.33): nothing once it has Succeeded or Failed; else one pod, and of each compute resource the
/// sum over its containers or its largest init container, whichever is more, a container's limit standing for a
/// request it does not give.
pub fn usage_of_pod(pod: &Value) -> Usage {
    if matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed")) {
        return Usage::default();
    }
    usage(&pod["spec"])
}

/// What a pod spec takes of a quota ([`usage_of_pod`], for a pod not finished).
pub fn usage(spec: &Value) -> Usage {
    let mut out = BTreeMap::from([("pods", 1.0)]);
    let list = |name: &str| spec[name].as_array().cloned().unwrap_or_default();
    let (containers, inits) = (list("containers"), list("initContainers"));
    for resource in &RESOURCES[1..] {
        let (field, name) = resource.split_once('.').expect("a compute resource");
        let amount = |container: &Value| -> f64 {
            let resources = &container["resources"];
            let given = resources[field][name].as_str().or_else(|| resources["limits"][name].as_str());
            given.and_then(nest_core::quantity::value).unwrap_or(0.0).clamp(0.0, nest_core::quantity::LARGEST)
        };
        let sum = containers.iter().map(amount).fold(0.0, |a, b| (a + b).min(nest_core::quantity::LARGEST));
        let init = inits.iter().map(amount).fold(0.0, f64::max);
        out.insert(resource, sum.max(init));
    }
    Usage(out)
}

/// How much of each resource a tenant's pods may take together, unless the platform admin says otherwise: generous
/// but finite, sized so that the syncer's default cap of pods (10,000, [`crate::policy::DEFAULT_OBJECTS`]) fits with
/// the default container resources — 10,000 pods, 100 cores and 320 GiB of requests, 5,000 cores and 5 TiB of
/// limits. A platform admin sets real numbers per tenant.
#[derive(Clone, Debug, PartialEq)]
pub struct Quota {
    /// Resource → the most (pods counted, CPU in cores, memory in bytes); a resource not here is not limited.
    pub hard: BTreeMap<&'static str, f64>,
}

impl Default for Quota {
    fn default() -> Quota {
        let gib = 1024.0 * 1024.0 * 1024.0;
        Quota {
            hard: BTreeMap::from([
                ("pods", crate::policy::DEFAULT_OBJECTS as f64),
                ("requests.cpu", 100.0),
                ("requests.memory", 320.0 * gib),
                ("limits.cpu", 5000.0),
                ("limits.memory", 5120.0 * gib),
            ]),
        }
    }
}

impl Quota {
    /// Sets the quota of `resource` (one of [`RESOURCES`]) to quantity `value` (0 or more); false when either means
    /// nothing.
    pub fn set(&mut self, resource: &str, value: &str) -> bool {
        let Some(resource) = RESOURCES.iter().find(|r| **r == resource) else { return false };
        match nest_core::quantity::value(value.trim()).filter(|v| *v >= 0.0) {
            Some(amount) => {
                self.hard.insert(resource, amount);
                true
            }
            None => false,
        }
    }

    /// Whether pod `name`, asking for `requested`, fits beside `used`; the refusal is upstream ResourceQuota's
    /// (`pods "web" is forbidden: exceeded quota: <quota>, requested: …, used: …, limited: …`), naming only the
    /// resources exceeded.
    pub fn admit(&self, name: &str, used: &Usage, requested: &Usage) -> Result<(), String> {
        let exceeded: Vec<&'static str> = self
            .hard
            .iter()
            .filter(|(resource, hard)| used.get(resource) + requested.get(resource) > **hard + 1e-9)
            .map(|(resource, _)| *resource)
            .collect();
        if exceeded.is_empty() {
            return Ok(());
        }
        let listing = |amount: &dyn Fn(&str) -> f64| {
            exceeded
                .iter()
                .map(|r| format!("{r}={}", nest_core::quantity::show(r, amount(r))))
                .collect::<Vec<_>>()
                .join(",")
        };
        Err(format!(
            "pods {name:?} is forbidden: exceeded quota: {QUOTA}, requested: {}, used: {}, limited: {}",
            listing(&|r| requested.get(r)),
            listing(&|r| used.get(r)),
            listing(&|r| self.hard.get(r).copied().unwrap_or(0.0)),
        ))
    }
}

/// The value of share annotation `annotation` ([`SHARE_ANNOTATIONS`]) the platform admin wrote, if it means
/// something: a quantity above zero for memory and CPU, a whole number above zero for processes.
pub fn share_value(annotation: &str, value: &str) -> Option<String> {
    let value = value.trim();
    let good = if annotation.ends_with("-pids") {
        value.parse::<u64>().is_ok_and(|n| n > 0)
    } else {
        positive(value).is_some()
    };
    (good && SHARE_ANNOTATIONS.contains(&annotation)).then(|| value.to_string())
}

/// The merge patch of annotations that makes a super object's share annotations (`existing`, its annotations) those
/// of `wanted` (the annotations it is made with): changed ones set, ones no longer wanted removed (`null`); `None`
/// when they are the same.
pub fn share_patch(wanted: &Value, existing: &Value) -> Option<Map<String, Value>> {
    let mut patch = Map::new();
    for annotation in SHARE_ANNOTATIONS {
        let want = wanted[annotation].as_str();
        if want != existing[annotation].as_str() {
            patch.insert(annotation.to_string(), want.map_or(Value::Null, |v| json!(v)));
        }
    }
    (!patch.is_empty()).then_some(patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: f64 = 1024.0 * 1024.0;

    #[test]
    fn a_container_that_does_not_say_gets_the_tenants_defaults_as_limitranger_gives_them() {
        let spec = json!({
            "containers": [
                {"name": "bare"},
                {"name": "limited", "resources": {"limits": {"cpu": "2"}}},
                {"name": "asking", "resources": {"requests": {"memory": "100Mi"}}},
            ],
            "initContainers": [{"name": "init", "resources": {}}],
        });
        let out = defaulted(&spec, &Defaults::default());
        assert_eq!(
            out["containers"][0]["resources"],
            json!({"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "10m", "memory": "32Mi"}})
        );
        // A limit given alone is the request too: no default request for it.
        assert_eq!(
            out["containers"][1]["resources"],
            json!({"limits": {"cpu": "2", "memory": "512Mi"}, "requests": {"memory": "32Mi"}})
        );
        assert_eq!(
            out["containers"][2]["resources"],
            json!({"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "10m", "memory": "100Mi"}})
        );
        assert_eq!(out["initContainers"][0]["resources"]["limits"]["memory"], "512Mi");
    }

    #[test]
    fn the_limit_range_carries_the_defaults_and_is_recognised_however_quantities_are_written() {
        let mut defaults = Defaults::default();
        assert!(defaults.set("memory-limit", "1024Mi"));
        assert!(defaults.set("cpu-request", "2"), "a request above its limit is held to it");
        for nonsense in [("memory-limit", "0"), ("memory-limit", "-1Gi"), ("disk-limit", "1Gi"), ("cpu", "1")] {
            assert!(!defaults.clone().set(nonsense.0, nonsense.1), "{nonsense:?}");
        }
        let range = limit_range("ns-1", "default-abc-demo", &defaults);
        assert_eq!(range["metadata"]["name"], LIMIT_RANGE);
        assert_eq!(range["metadata"]["labels"]["tenancy.nest.dev/cluster"], "default-abc-demo");
        assert_eq!(
            range["spec"],
            json!({"limits": [{"type": "Container", "default": {"cpu": "500m", "memory": "1024Mi"},
                                "defaultRequest": {"cpu": "500m", "memory": "32Mi"}}]})
        );
        // As the API server may write it back.
        let served = json!({"limits": [{"type": "Container", "default": {"cpu": "0.5", "memory": "1Gi"},
                                        "defaultRequest": {"cpu": "500m", "memory": "32Mi"}}]});
        assert!(limit_range_is(&served, &defaults));
        assert!(!limit_range_is(&served, &Defaults::default()));
        let widened = json!({"limits": [{"type": "Container", "default": {"cpu": "500m", "memory": "1Gi"},
                                         "defaultRequest": {"cpu": "500m", "memory": "32Mi"}, "max": {"cpu": "1"}}]});
        assert!(!limit_range_is(&widened, &defaults), "anything added is drift");
    }

    #[test]
    fn usage_is_counted_as_upstreams_pod_evaluator_counts_it() {
        let pod = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                            "limits": {"cpu": "1", "memory": "128Mi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "250m", "memory": "1Gi"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}}],
        }});
        let used = usage_of_pod(&pod);
        assert_eq!(used.get("pods"), 1.0);
        assert_eq!(used.get("requests.cpu"), 2.0, "the largest init container, when it is more");
        assert_eq!(used.get("requests.memory"), 64.0 * MI + 1024.0 * MI, "a limit alone is the request");
        assert_eq!(used.get("limits.cpu"), 2.0);
        assert_eq!(used.get("limits.memory"), 128.0 * MI + 1024.0 * MI);
        let mut finished = pod.clone();
        finished["status"]["phase"] = json!("Succeeded");
        assert_eq!(usage_of_pod(&finished), Usage::default(), "finished pods take nothing");
        finished["status"]["phase"] = json!("Failed");
        assert_eq!(usage_of_pod(&finished), Usage::default());
        // Numbers at their extremes are held, never infinite or negative.
        let huge = json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"memory": "1e999"}}},
            {"name": "b", "resources": {"limits": {"memory": "99999999999Ei"}, "requests": {"cpu": "-5"}}},
        ]}});
        let used = usage_of_pod(&huge);
        assert_eq!(used.get("limits.memory"), nest_core::quantity::LARGEST);
        assert_eq!(used.get("requests.cpu"), 0.0);
        let mut total = used.clone();
        total.add(&used);
        assert_eq!(total.get("limits.memory"), nest_core::quantity::LARGEST);
    }

    #[test]
    fn the_default_quota_holds_the_default_cap_of_pods_with_the_default_resources() {
        let mut used = Usage::default();
        let one = usage(&defaulted(&json!({"containers": [{"name": "c"}]}), &Defaults::default()));
        for _ in 1..crate::policy::DEFAULT_OBJECTS {
            used.add(&one);
        }
        assert_eq!(Quota::default().admit("last", &used, &one), Ok(()));
        used.add(&one);
        let refusal = Quota::default().admit("one-more", &used, &one).unwrap_err();
        assert!(refusal.contains(",pods=10000,"), "every resource is used up at once: {refusal}");
    }

    #[test]
    fn the_quota_sums_the_tenants_pods_and_refuses_in_upstreams_words() {
        let mut quota = Quota::default();
        assert!(quota.set("pods", "3"));
        assert!(quota.set("limits.memory", "1Gi"));
        for nonsense in [("pods", "-1"), ("pods", "many"), ("storage", "1Gi"), ("cpu", "1")] {
            assert!(!quota.clone().set(nonsense.0, nonsense.1), "{nonsense:?}");
        }
        let pod =
            |memory: &str| usage(&json!({"containers": [{"name": "c", "resources": {"limits": {"memory": memory}}}]}));
        let mut used = Usage::default();
        for _ in 0..2 {
            used.add(&pod("256Mi"));
        }
        assert_eq!(quota.admit("third", &used, &pod("256Mi")), Ok(()));
        used.add(&pod("256Mi"));
        assert_eq!(
            quota.admit("fourth", &used, &pod("1Mi")).unwrap_err(),
            "pods \"fourth\" is forbidden: exceeded quota: nest-tenant-quota, requested: pods=1, used: pods=3, \
             limited: pods=3"
        );
        let mut roomy = quota.clone();
        roomy.set("pods", "10");
        assert_eq!(
            roomy.admit("big", &used, &pod("512Mi")).unwrap_err(),
            "pods \"big\" is forbidden: exceeded quota: nest-tenant-quota, requested: limits.memory=512Mi, \
             used: limits.memory=768Mi, limited: limits.memory=1Gi"
        );
        assert_eq!(roomy.admit("fits", &used, &pod("256Mi")), Ok(()), "exactly at the limit fits");
        let mut cpu = Quota::default();
        cpu.set("requests.cpu", "1");
        let asking = usage(&json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m"}}}]}));
        assert!(cpu.admit("p", &Usage::default(), &asking).unwrap_err().contains("requests.cpu=1500m"));
    }

    #[test]
    fn share_annotations_are_copied_only_when_they_mean_something() {
        assert_eq!(share_value("tenancy.nest.dev/tenant-memory", "4Gi").as_deref(), Some("4Gi"));
        assert_eq!(share_value("tenancy.nest.dev/tenant-cpu", " 1.5 ").as_deref(), Some("1.5"));
        assert_eq!(share_value("tenancy.nest.dev/tenant-pids", "512").as_deref(), Some("512"));
        for (annotation, value) in [
            ("tenancy.nest.dev/tenant-memory", "0"),
            ("tenancy.nest.dev/tenant-memory", "lots"),
            ("tenancy.nest.dev/tenant-cpu", "-1"),
            ("tenancy.nest.dev/tenant-pids", "1.5"),
            ("tenancy.nest.dev/tenant-pids", "0"),
            ("tenancy.nest.dev/tenant-disk", "1Gi"),
        ] {
            assert_eq!(share_value(annotation, value), None, "{annotation}: {value}");
        }
        let wanted = json!({"tenancy.nest.dev/tenant-memory": "4Gi", "note": "a"});
        assert_eq!(share_patch(&wanted, &json!({"tenancy.nest.dev/tenant-memory": "4Gi"})), None);
        assert_eq!(share_patch(&json!({}), &json!({"other": "x"})), None, "nothing of nest's to follow");
        let patch = share_patch(&wanted, &json!({"tenancy.nest.dev/tenant-pids": "100", "other": "x"})).unwrap();
        assert_eq!(
            Value::Object(patch),
            json!({"tenancy.nest.dev/tenant-memory": "4Gi", "tenancy.nest.dev/tenant-pids": null})
        );
    }
}
