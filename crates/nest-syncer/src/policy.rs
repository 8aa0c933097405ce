//! What a tenant may ask of the management cluster beyond what Pod Security admits there: the platform admin's
//! allowlists, checked on each object before it goes down. A refusal names the field and what is allowed; it reaches
//! the tenant as a `SyncFailed` Event on the object (a 403, not retried), and nothing of the object reaches the
//! super cluster.
//!
//! The defaults keep a tenant's workloads on the cluster's ordinary footing: ClusterIP Services only (headless
//! included); the volume types Pod Security's restricted level allows, less inline CSI; no tolerations but for the
//! node conditions every pod tolerates; node selection only by zone, region, OS, architecture and instance type
//! (never a node's name); the default scheduler; no runtime classes; priority classes only those the management
//! cluster shares as public; and Endpoints only to the tenant's own pods or addresses outside the management
//! cluster ([`crate::addresses`]). `nest syncer --allow-*` widens them for every tenant; a tenant's Cluster (or
//! NestedControlPlane) annotation `tenancy.nest.dev/allow-<what>: a,b` adds to them for that tenant.
//!
//! Caps bound what a tenant keeps and asks for: objects and bytes of each kind (`tenancy.nest.dev/cap-<plural>-objects`,
//! `-bytes`), and the longest termination grace period its pods get in the management cluster
//! (`tenancy.nest.dev/cap-pods-grace-period-seconds`, [`DEFAULT_MAX_GRACE_PERIOD_SECONDS`] unless told otherwise).
//! What its pods take of CPU, memory and processes — container defaults, a quota over all its namespaces, its share
//! of the node — is [`crate::compute`]'s, set the same way (`tenancy.nest.dev/default-*`, `quota-*`, `tenant-*`).

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde_json::Value;

/// The allowlists.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// `spec.type` of Services.
    pub service_types: Vec<String>,
    /// Pod volume sources (`emptyDir`, `nfs`…).
    pub volume_types: Vec<String>,
    /// Toleration keys (a toleration of every taint, with no key, is never allowed).
    pub toleration_keys: Vec<String>,
    /// Node label keys a pod may select nodes by (`nodeSelector`, node affinity).
    pub node_selector_keys: Vec<String>,
    pub scheduler_names: Vec<String>,
    pub runtime_classes: Vec<String>,
    /// Priority classes allowed besides those shared as public.
    pub priority_classes: Vec<String>,
    /// How much of each synced kind (by plural) a tenant may keep in the management cluster.
    pub caps: std::collections::BTreeMap<String, Cap>,
    /// The longest termination grace period (seconds) a tenant's pod gets in the management cluster: its spec's, and
    /// the one the syncer deletes it with, are held to it ([`crate::kinds`]).
    pub max_grace_period_seconds: u32,
    /// Whether the tenant's pods are kept from reaching beyond the machine (the Cluster's
    /// `tenancy.nest.dev/egress: deny`); the node's network wall enforces it.
    pub egress_off: bool,
    /// What a container that does not say gets: the LimitRange in each super namespace ([`crate::compute`]).
    pub defaults: crate::compute::Defaults,
    /// What all of the tenant's pods may take together ([`crate::compute::Quota`]).
    pub quota: crate::compute::Quota,
    /// The tenant's share of the node ([`crate::compute::SHARE_ANNOTATIONS`] → value), written on its super pods;
    /// none unless the platform admin sets it (the node has defaults of its own).
    pub share: std::collections::BTreeMap<String, String>,
}

/// How much of one kind a tenant may keep in the management cluster: objects, and bytes of their JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cap {
    pub objects: Option<usize>,
    pub bytes: Option<u64>,
}

/// Objects of each kind a tenant may keep unless told otherwise.
pub const DEFAULT_OBJECTS: usize = 10_000;
/// Bytes of ConfigMaps, and of Secrets, a tenant may keep unless told otherwise.
pub const DEFAULT_CONFIG_BYTES: u64 = 64 << 20;
/// The longest termination grace period a tenant's pod gets unless told otherwise: an hour. A pod that asks for
/// more (kube-apiserver takes any int64, and i64::MAX once stopped the node for every tenant) gets an hour, which
/// is more than any shutdown needs and bounds how long a deleted pod holds its node's resources.
pub const DEFAULT_MAX_GRACE_PERIOD_SECONDS: u32 = 3600;
/// The cap (`--cap`, and after [`CAP_PREFIX`] in a tenant's annotation) of the longest grace period.
pub const GRACE_PERIOD_CAP: &str = "pods-grace-period-seconds";

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            service_types: strings(&["ClusterIP"]),
            volume_types: strings(&[
                "configMap",
                "secret",
                "downwardAPI",
                "projected",
                "emptyDir",
                "persistentVolumeClaim",
                "ephemeral",
                "image",
            ]),
            toleration_keys: strings(&["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"]),
            node_selector_keys: strings(&[
                "kubernetes.io/os",
                "kubernetes.io/arch",
                "topology.kubernetes.io/zone",
                "topology.kubernetes.io/region",
                "node.kubernetes.io/instance-type",
            ]),
            scheduler_names: strings(&["default-scheduler"]),
            // Simulation, which runs nothing: a tenant's pod may ask for it (the syncer makes the class in every
            // tenant cluster, and `nest up` in the management cluster).
            runtime_classes: strings(&[nest_client::runtime_classes::SIMULATED]),
            priority_classes: Vec::new(),
            caps: ["configmaps", "secrets"]
                .into_iter()
                .map(|kind| (kind.to_string(), Cap { objects: None, bytes: Some(DEFAULT_CONFIG_BYTES) }))
                .collect(),
            max_grace_period_seconds: DEFAULT_MAX_GRACE_PERIOD_SECONDS,
            egress_off: false,
            defaults: Default::default(),
            quota: Default::default(),
            share: Default::default(),
        }
    }
}

/// The annotation on a tenant's Cluster (or NestedControlPlane) adding to list `what` for that tenant.
pub const ALLOW_PREFIX: &str = "tenancy.nest.dev/allow-";
/// A Cluster's annotation that keeps its tenant's pods from reaching beyond the machine (`deny`).
pub const EGRESS_ANNOTATION: &str = nest_core::tenancy::EGRESS;
/// The annotations setting a tenant's caps: `tenancy.nest.dev/cap-<plural>-objects: 100`, `…-bytes: 1Mi`, and
/// `tenancy.nest.dev/cap-pods-grace-period-seconds: 600`.
pub const CAP_PREFIX: &str = "tenancy.nest.dev/cap-";

impl Policy {
    /// This policy with what a tenant's annotations add (`tenancy.nest.dev/allow-service-types: NodePort`, and
    /// `volume-types`, `toleration-keys`, `node-selector-keys`, `scheduler-names`, `runtime-classes`,
    /// `priority-classes`) or set (caps, egress, and [`crate::compute`]'s defaults, quota and share). A value that
    /// means nothing changes nothing.
    pub fn with_annotations<'a>(&self, annotations: impl IntoIterator<Item = (&'a String, &'a String)>) -> Policy {
        use crate::compute::{DEFAULT_PREFIX, QUOTA_PREFIX, SHARE_ANNOTATIONS, share_value};
        let mut policy = self.clone();
        for (key, value) in annotations {
            if key == EGRESS_ANNOTATION {
                policy.egress_off = value.trim() == "deny";
                continue;
            }
            if let Some(cap) = key.strip_prefix(CAP_PREFIX) {
                policy.set_cap(cap, value);
                continue;
            }
            if let Some(what) = key.strip_prefix(DEFAULT_PREFIX) {
                policy.defaults.set(what, value);
                continue;
            }
            if let Some(resource) = key.strip_prefix(QUOTA_PREFIX) {
                policy.quota.set(resource, value);
                continue;
            }
            if SHARE_ANNOTATIONS.contains(&key.as_str()) {
                if let Some(value) = share_value(key, value) {
                    policy.share.insert(key.clone(), value);
                }
                continue;
            }
            let Some(what) = key.strip_prefix(ALLOW_PREFIX) else { continue };
            let list = match what {
                "service-types" => &mut policy.service_types,
                "volume-types" => &mut policy.volume_types,
                "toleration-keys" => &mut policy.toleration_keys,
                "node-selector-keys" => &mut policy.node_selector_keys,
                "scheduler-names" => &mut policy.scheduler_names,
                "runtime-classes" => &mut policy.runtime_classes,
                "priority-classes" => &mut policy.priority_classes,
                _ => continue,
            };
            list.extend(value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string));
        }
        policy
    }
}

impl Policy {
    /// Sets cap `what` (`<plural>-objects` or `<plural>-bytes`, or [`GRACE_PERIOD_CAP`]) to `value` (a count, a
    /// quantity such as `1Mi`, or seconds); false when `what` or `value` means nothing.
    pub fn set_cap(&mut self, what: &str, value: &str) -> bool {
        let value = value.trim();
        if !value.starts_with(|c: char| c.is_ascii_digit()) {
            return false;
        }
        if what == GRACE_PERIOD_CAP {
            return match value.parse() {
                Ok(seconds) => {
                    self.max_grace_period_seconds = seconds;
                    true
                }
                Err(_) => false,
            };
        }
        if let Some(kind) = what.strip_suffix("-objects")
            && let Ok(n) = value.parse()
        {
            self.caps.entry(kind.to_string()).or_default().objects = Some(n);
            return true;
        }
        if let Some(kind) = what.strip_suffix("-bytes") {
            let bytes = nest_core::quantity::parse(value);
            if bytes.is_finite() && bytes >= 0.0 {
                self.caps.entry(kind.to_string()).or_default().bytes = Some(bytes as u64);
                return true;
            }
        }
        false
    }

    /// The cap of kind `plural`.
    pub fn cap(&self, plural: &str) -> Cap {
        let cap = self.caps.get(plural).copied().unwrap_or_default();
        Cap { objects: cap.objects.or(Some(DEFAULT_OBJECTS)), ..cap }
    }
}

/// Whether one more object of `size` bytes fits under `cap` beside `objects` others of `bytes` bytes in all; the
/// refusal says what the cap is and what is used.
pub fn within(cap: Cap, plural: &str, objects: usize, bytes: u64, size: u64) -> Result<(), String> {
    if let Some(max) = cap.objects
        && objects >= max
    {
        return Err(format!(
            "the tenant's cap of {max} {plural} in the management cluster is reached ({objects} there): it waits until \
             there is room"
        ));
    }
    if let Some(max) = cap.bytes
        && bytes.saturating_add(size) > max
    {
        return Err(format!(
            "the tenant's cap of {max} bytes of {plural} in the management cluster would be passed ({bytes} there, \
             this one {size}): it waits until there is room"
        ));
    }
    Ok(())
}

/// What a check knows besides the policy.
pub struct Context<'a> {
    pub policy: &'a Policy,
    /// The priority classes the management cluster shares as public.
    pub public_priority_classes: BTreeSet<String>,
    /// Why an address (as it reaches, [`crate::addresses::canonical`]) may not be an Endpoints address of this tenant
    /// beyond [`crate::addresses::special`] (a node's, the API server's, a bridge's, the Service range's, a pod's not
    /// the tenant's), if so.
    pub forbidden_address: &'a dyn Fn(IpAddr) -> Option<&'static str>,
}

fn refused(field: impl std::fmt::Display, value: &str, allowed: &[String]) -> String {
    let allowed = if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") };
    format!("{field}: {value:?} is not allowed by the management cluster's policy for tenants (allowed: {allowed})")
}

/// A super pod's spec.
pub fn pod(spec: &Value, cx: &Context) -> Result<(), String> {
    let policy = cx.policy;
    for (i, volume) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        let source = volume.as_object().into_iter().flatten().map(|(k, _)| k.as_str()).find(|k| *k != "name");
        if let Some(source) = source
            && !policy.volume_types.iter().any(|t| t == source)
        {
            return Err(refused(format!("spec.volumes[{i}].{source}"), source, &policy.volume_types));
        }
    }
    if let Some(class) = spec["priorityClassName"].as_str().filter(|c| !c.is_empty())
        && !cx.public_priority_classes.contains(class)
        && !policy.priority_classes.iter().any(|c| c == class)
    {
        let mut allowed: Vec<String> = cx.public_priority_classes.iter().cloned().collect();
        allowed.extend(policy.priority_classes.iter().cloned());
        return Err(refused("spec.priorityClassName", class, &allowed));
    }
    for (i, toleration) in spec["tolerations"].as_array().into_iter().flatten().enumerate() {
        let key = toleration["key"].as_str().unwrap_or_default();
        if key.is_empty() {
            return Err(format!(
                "spec.tolerations[{i}]: a toleration of every taint is not allowed by the management cluster's policy \
                 for tenants"
            ));
        }
        if !policy.toleration_keys.iter().any(|k| k == key) {
            return Err(refused(format!("spec.tolerations[{i}].key"), key, &policy.toleration_keys));
        }
    }
    for key in spec["nodeSelector"].as_object().into_iter().flatten().map(|(k, _)| k) {
        if !policy.node_selector_keys.iter().any(|k| k == key) {
            return Err(refused(format!("spec.nodeSelector[{key}]"), key, &policy.node_selector_keys));
        }
    }
    let node_affinity = &spec["affinity"]["nodeAffinity"];
    let required = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].as_array();
    let preferred = node_affinity["preferredDuringSchedulingIgnoredDuringExecution"].as_array();
    let terms = required.into_iter().flatten().chain(preferred.into_iter().flatten().map(|p| &p["preference"]));
    for term in terms {
        if let Some(field) = term["matchFields"].as_array().and_then(|f| f.first()) {
            let key = field["key"].as_str().unwrap_or_default();
            return Err(refused("spec.affinity.nodeAffinity: matchFields key", key, &[]));
        }
        for expression in term["matchExpressions"].as_array().into_iter().flatten() {
            let key = expression["key"].as_str().unwrap_or_default();
            if !policy.node_selector_keys.iter().any(|k| k == key) {
                return Err(refused(
                    "spec.affinity.nodeAffinity: matchExpressions key",
                    key,
                    &policy.node_selector_keys,
                ));
            }
        }
    }
    let scheduler = spec["schedulerName"].as_str().unwrap_or("default-scheduler");
    if !policy.scheduler_names.iter().any(|s| s == scheduler) {
        return Err(refused("spec.schedulerName", scheduler, &policy.scheduler_names));
    }
    if let Some(class) = spec["runtimeClassName"].as_str().filter(|c| !c.is_empty())
        && !policy.runtime_classes.iter().any(|c| c == class)
    {
        return Err(refused("spec.runtimeClassName", class, &policy.runtime_classes));
    }
    Ok(())
}

/// A super Service's spec.
pub fn service(spec: &Value, cx: &Context) -> Result<(), String> {
    let kind = spec["type"].as_str().unwrap_or("ClusterIP");
    if !cx.policy.service_types.iter().any(|t| t == kind) {
        return Err(refused("spec.type", kind, &cx.policy.service_types));
    }
    Ok(())
}

/// A super Endpoints object (of a Service without a selector): every address the tenant's own pod's or outside the
/// management cluster ([`crate::addresses`]). The refusal names the address, and what an IPv4-mapped one maps to.
pub fn endpoints(object: &Value, cx: &Context) -> Result<(), String> {
    for (i, subset) in object["subsets"].as_array().into_iter().flatten().enumerate() {
        for list in ["addresses", "notReadyAddresses"] {
            for (j, address) in subset[list].as_array().into_iter().flatten().enumerate() {
                let field = format!("subsets[{i}].{list}[{j}].ip");
                let text = address["ip"].as_str().unwrap_or_default();
                let ip: IpAddr = text.parse().map_err(|_| format!("{field}: {text:?} is not an IP address"))?;
                let canonical = crate::addresses::canonical(ip);
                if let Some(why) = crate::addresses::special(canonical).or_else(|| (cx.forbidden_address)(canonical)) {
                    let reads = if canonical == ip { String::new() } else { format!(" ({canonical})") };
                    return Err(format!(
                        "{field}: {text:?}{reads} is {why}, which the management cluster's policy for tenants does \
                         not allow"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Keeps [`crate::Syncer::api_addresses`]: the management cluster's `default/kubernetes` Service's addresses and
/// its Endpoints', read every minute.
pub async fn follow_api_server(syncer: std::sync::Arc<crate::Syncer>) {
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    let services: kube::Api<Service> = kube::Api::namespaced(syncer.super_client.clone(), "default");
    let endpoints: kube::Api<Endpoints> = kube::Api::namespaced(syncer.super_client.clone(), "default");
    loop {
        let mut found = BTreeSet::new();
        if let Ok(service) = services.get("kubernetes").await {
            let spec = service.spec.unwrap_or_default();
            found.extend(
                spec.cluster_ips
                    .unwrap_or_default()
                    .iter()
                    .chain(&spec.cluster_ip)
                    .filter_map(|ip| ip.parse::<IpAddr>().ok()),
            );
        }
        if let Ok(endpoints) = endpoints.get("kubernetes").await {
            let addresses =
                endpoints.subsets.unwrap_or_default().into_iter().flat_map(|s| s.addresses.unwrap_or_default());
            found.extend(addresses.filter_map(|a| a.ip.parse::<IpAddr>().ok()));
        }
        if !found.is_empty() {
            *syncer.api_addresses.write().expect("the addresses lock") = found;
        }
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(spec: Value, policy: &Policy) -> Result<(), String> {
        let nothing = |_: IpAddr| None;
        let cx = Context {
            policy,
            public_priority_classes: ["shared-high".to_string()].into(),
            forbidden_address: &nothing,
        };
        pod(&spec, &cx)
    }

    #[test]
    fn a_clusters_egress_annotation_turns_its_tenants_egress_off() {
        let deny = [("tenancy.nest.dev/egress".to_string(), "deny".to_string())];
        assert!(Policy::default().with_annotations(deny.iter().map(|(k, v)| (k, v))).egress_off);
        let allow = [("tenancy.nest.dev/egress".to_string(), "allow".to_string())];
        assert!(!Policy::default().with_annotations(allow.iter().map(|(k, v)| (k, v))).egress_off);
        assert!(!Policy::default().egress_off);
    }

    #[test]
    fn pods_ask_only_for_what_the_policy_allows() {
        let policy = Policy::default();
        let plain = json!({"containers": [{"name": "c"}], "volumes": [{"name": "v", "emptyDir": {}}],
                           "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
                           "nodeSelector": {"kubernetes.io/os": "linux"}, "priorityClassName": "shared-high"});
        assert_eq!(check(plain, &policy), Ok(()));
        let cases = [
            (
                json!({"volumes": [{"name": "v", "nfs": {"server": "127.0.0.1", "path": "/"}}]}),
                "spec.volumes[0].nfs: \"nfs\" is not allowed",
            ),
            (
                json!({"priorityClassName": "system-node-critical"}),
                "spec.priorityClassName: \"system-node-critical\" is not allowed by the management cluster's policy for tenants (allowed: shared-high)",
            ),
            (
                json!({"tolerations": [{"operator": "Exists"}]}),
                "spec.tolerations[0]: a toleration of every taint is not allowed",
            ),
            (
                json!({"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}),
                "spec.tolerations[0].key: \"node-role.kubernetes.io/control-plane\" is not allowed",
            ),
            (
                json!({"nodeSelector": {"kubernetes.io/hostname": "node-1"}}),
                "spec.nodeSelector[kubernetes.io/hostname]: \"kubernetes.io/hostname\" is not allowed",
            ),
            (
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}}}}),
                "spec.affinity.nodeAffinity: matchFields key: \"metadata.name\" is not allowed",
            ),
            (
                json!({"schedulerName": "mine"}),
                "spec.schedulerName: \"mine\" is not allowed by the management cluster's policy for tenants (allowed: default-scheduler)",
            ),
            (
                json!({"runtimeClassName": "runc-privileged"}),
                "spec.runtimeClassName: \"runc-privileged\" is not allowed by the management cluster's policy for tenants (allowed: nest-simulated)",
            ),
        ];
        for (spec, expected) in cases {
            let error = check(spec.clone(), &policy).unwrap_err();
            assert!(error.starts_with(expected), "{spec}: {error}");
        }
    }

    #[test]
    fn a_tenants_annotations_add_to_the_policy() {
        let annotations: Vec<(String, String)> = vec![
            ("tenancy.nest.dev/allow-service-types".into(), "NodePort, LoadBalancer".into()),
            ("tenancy.nest.dev/allow-scheduler-names".into(), "mine".into()),
            ("tenancy.nest.dev/weight".into(), "3".into()),
        ];
        let policy = Policy::default().with_annotations(annotations.iter().map(|(k, v)| (k, v)));
        assert_eq!(policy.service_types, ["ClusterIP", "NodePort", "LoadBalancer"]);
        assert_eq!(check(json!({"schedulerName": "mine"}), &policy), Ok(()));
        let nothing = |_: IpAddr| None;
        let cx = Context { policy: &policy, public_priority_classes: BTreeSet::new(), forbidden_address: &nothing };
        assert!(service(&json!({"type": "NodePort"}), &cx).is_ok());
        assert!(service(&json!({"type": "ExternalName"}), &cx).unwrap_err().starts_with("spec.type: \"ExternalName\""));
    }

    #[test]
    fn caps_count_objects_and_bytes_per_kind() {
        let policy = Policy::default();
        assert_eq!(policy.cap("configmaps"), Cap { objects: Some(DEFAULT_OBJECTS), bytes: Some(DEFAULT_CONFIG_BYTES) });
        assert_eq!(policy.cap("pods"), Cap { objects: Some(DEFAULT_OBJECTS), bytes: None });
        let annotations: Vec<(String, String)> = vec![
            ("tenancy.nest.dev/cap-configmaps-bytes".into(), "1Mi".into()),
            ("tenancy.nest.dev/cap-pods-objects".into(), "3".into()),
            ("tenancy.nest.dev/cap-secrets-bytes".into(), "-1".into()),
        ];
        let tenant = policy.with_annotations(annotations.iter().map(|(k, v)| (k, v)));
        assert_eq!(tenant.cap("configmaps").bytes, Some(1 << 20));
        assert_eq!(tenant.cap("secrets").bytes, Some(DEFAULT_CONFIG_BYTES), "a bad value changes nothing");
        assert_eq!(within(tenant.cap("pods"), "pods", 2, 0, 100), Ok(()));
        assert!(within(tenant.cap("pods"), "pods", 3, 0, 100).unwrap_err().starts_with("the tenant's cap of 3 pods"));
        assert_eq!(within(tenant.cap("configmaps"), "configmaps", 1, 1 << 19, 1 << 19), Ok(()));
        assert!(within(tenant.cap("configmaps"), "configmaps", 2, 1 << 20, 1).unwrap_err().contains("1048576 bytes"));
        assert!(within(tenant.cap("configmaps"), "configmaps", 0, u64::MAX, u64::MAX).is_err(), "no overflow");
    }

    #[test]
    fn a_clusters_annotations_set_its_defaults_quota_and_share() {
        let annotations: Vec<(String, String)> = vec![
            ("tenancy.nest.dev/default-memory-limit".into(), "256Mi".into()),
            ("tenancy.nest.dev/default-cpu-request".into(), "nonsense".into()),
            ("tenancy.nest.dev/quota-pods".into(), "3".into()),
            ("tenancy.nest.dev/quota-limits.memory".into(), "-1".into()),
            ("tenancy.nest.dev/tenant-memory".into(), "2Gi".into()),
            ("tenancy.nest.dev/tenant-pids".into(), "0".into()),
        ];
        let policy = Policy::default().with_annotations(annotations.iter().map(|(k, v)| (k, v)));
        let defaults = crate::compute::Defaults::default();
        assert_eq!(policy.defaults.limits["memory"], "256Mi");
        assert_eq!(policy.defaults.requests, defaults.requests, "a bad value changes nothing");
        assert_eq!(policy.quota.hard["pods"], 3.0);
        assert_eq!(policy.quota.hard["limits.memory"], crate::compute::Quota::default().hard["limits.memory"]);
        assert_eq!(policy.share.len(), 1);
        assert_eq!(policy.share["tenancy.nest.dev/tenant-memory"], "2Gi");
        assert!(Policy::default().share.is_empty(), "the node's own defaults unless the platform admin says");
    }

    #[test]
    fn the_longest_grace_period_is_an_hour_unless_the_platform_admin_says_otherwise() {
        let policy = Policy::default();
        assert_eq!(policy.max_grace_period_seconds, 3600);
        let annotations: Vec<(String, String)> =
            vec![("tenancy.nest.dev/cap-pods-grace-period-seconds".into(), "600".into())];
        assert_eq!(policy.with_annotations(annotations.iter().map(|(k, v)| (k, v))).max_grace_period_seconds, 600);
        for nonsense in ["-1", "1e9", "4294967296", "ten", ""] {
            let mut tenant = policy.clone();
            assert!(!tenant.set_cap(GRACE_PERIOD_CAP, nonsense), "{nonsense}");
            assert_eq!(tenant.max_grace_period_seconds, 3600, "{nonsense} changes nothing");
        }
    }

    #[test]
    fn endpoints_never_point_at_the_host_or_what_the_cluster_keeps_apart() {
        let policy = Policy::default();
        let node = |ip: IpAddr| (ip == "10.0.0.7".parse::<IpAddr>().unwrap()).then_some("a node's address");
        let cx = Context { policy: &policy, public_priority_classes: BTreeSet::new(), forbidden_address: &node };
        let at =
            |ip: &str| json!({"subsets": [{"addresses": [{"ip": "10.1.2.3"}, {"ip": ip}], "ports": [{"port": 443}]}]});
        assert_eq!(endpoints(&at("10.1.2.4"), &cx), Ok(()));
        for (ip, why) in [
            ("127.0.0.1", "a loopback address"),
            ("169.254.169.254", "a link-local address"),
            ("0.0.0.0", "the unspecified address"),
            ("224.0.0.1", "a multicast or broadcast address"),
            ("::1", "a loopback address"),
            ("fe80::1", "a link-local address"),
            ("10.0.0.7", "a node's address"),
        ] {
            let error = endpoints(&at(ip), &cx).unwrap_err();
            assert_eq!(
                error,
                format!(
                    "subsets[0].addresses[1].ip: {ip:?} is {why}, which the management cluster's policy for tenants does not allow"
                )
            );
        }
        // IPv4-mapped IPv6 addresses are what they map to, and the refusal says so.
        for (ip, reads, why) in [
            ("::ffff:127.0.0.1", "127.0.0.1", "a loopback address"),
            ("::ffff:169.254.169.254", "169.254.169.254", "a link-local address"),
            ("::ffff:10.0.0.7", "10.0.0.7", "a node's address"),
        ] {
            let error = endpoints(&at(ip), &cx).unwrap_err();
            assert_eq!(
                error,
                format!(
                    "subsets[0].addresses[1].ip: {ip:?} ({reads}) is {why}, which the management cluster's policy for tenants does not allow"
                )
            );
        }
        assert!(endpoints(&at("not-an-ip"), &cx).unwrap_err().contains("is not an IP address"));
    }
}
