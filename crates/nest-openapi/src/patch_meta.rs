//! How strategic merge patch treats each field of the built-in kinds that does not simply replace: the
//! `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key` of Kubernetes 1.33's published OpenAPI schemas
//! (the Go types' `patchStrategy` and `patchMergeKey` tags). k8s-openapi's schemas leave these out, so they are
//! listed here; `tests/patch_strategies.rs` holds this table equal to the published schemas (the JSON schemas in the
//! pinned PyPI package `kubernetes-validate`, which `scripts/check` installs).
//!
//! Every field not listed is replaced as a whole by a patch that sets it (maps are merged key by key).

/// What a patch does to one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strategy {
    /// Lists are merged: items of a list of objects by [`Strategy::key`], primitives as a set.
    pub merge: bool,
    /// A map (or each item of a merged list) may carry `$retainKeys`.
    pub retain_keys: bool,
    /// The field is replaced as a whole even where it is a map.
    pub replace: bool,
    /// The field of a list item that identifies it.
    pub key: Option<&'static str>,
}

/// `(definition, field, strategy, merge key)`.
const TABLE: &[(&str, &str, &str, Option<&str>)] = &[
    ("io.k8s.api.admissionregistration.v1.MutatingWebhook", "matchConditions", "merge", Some("name")),
    ("io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration", "webhooks", "merge", Some("name")),
    ("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec", "matchConditions", "merge", Some("name")),
    ("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec", "variables", "merge", Some("name")),
    ("io.k8s.api.admissionregistration.v1.ValidatingWebhook", "matchConditions", "merge", Some("name")),
    ("io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration", "webhooks", "merge", Some("name")),
    ("io.k8s.api.admissionregistration.v1alpha1.MutatingAdmissionPolicySpec", "matchConditions", "merge", Some("name")),
    (
        "io.k8s.api.admissionregistration.v1beta1.ValidatingAdmissionPolicySpec",
        "matchConditions",
        "merge",
        Some("name"),
    ),
    ("io.k8s.api.admissionregistration.v1beta1.ValidatingAdmissionPolicySpec", "variables", "merge", Some("name")),
    ("io.k8s.api.apps.v1.DaemonSetStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.apps.v1.DeploymentSpec", "strategy", "retainKeys", None),
    ("io.k8s.api.apps.v1.DeploymentStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.apps.v1.ReplicaSetStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.apps.v1.StatefulSetStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.batch.v1.JobStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.ComponentStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.Container", "env", "merge", Some("name")),
    ("io.k8s.api.core.v1.Container", "ports", "merge", Some("containerPort")),
    ("io.k8s.api.core.v1.Container", "volumeDevices", "merge", Some("devicePath")),
    ("io.k8s.api.core.v1.Container", "volumeMounts", "merge", Some("mountPath")),
    ("io.k8s.api.core.v1.ContainerStatus", "allocatedResourcesStatus", "merge", Some("name")),
    ("io.k8s.api.core.v1.ContainerStatus", "volumeMounts", "merge", Some("mountPath")),
    ("io.k8s.api.core.v1.EphemeralContainer", "env", "merge", Some("name")),
    ("io.k8s.api.core.v1.EphemeralContainer", "ports", "merge", Some("containerPort")),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeDevices", "merge", Some("devicePath")),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts", "merge", Some("mountPath")),
    ("io.k8s.api.core.v1.NamespaceStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.NodeSpec", "podCIDRs", "merge", None),
    ("io.k8s.api.core.v1.NodeStatus", "addresses", "merge", Some("type")),
    ("io.k8s.api.core.v1.NodeStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.PodSpec", "containers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "initContainers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "resourceClaims", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "schedulingGates", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints", "merge", Some("topologyKey")),
    ("io.k8s.api.core.v1.PodSpec", "volumes", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.PodStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.PodStatus", "hostIPs", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodStatus", "resourceClaimStatuses", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.ReplicationControllerStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.ServiceAccount", "secrets", "merge", Some("name")),
    ("io.k8s.api.core.v1.ServiceSpec", "ports", "merge", Some("port")),
    ("io.k8s.api.core.v1.ServiceStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.flowcontrol.v1.FlowSchemaStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.networking.v1.ServiceCIDRStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.networking.v1beta1.ServiceCIDRStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.policy.v1.PodDisruptionBudgetSpec", "selector", "replace", None),
    ("io.k8s.api.policy.v1.PodDisruptionBudgetStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.resource.v1alpha3.ResourceClaimStatus", "reservedFor", "merge", Some("uid")),
    ("io.k8s.api.resource.v1beta1.ResourceClaimStatus", "reservedFor", "merge", Some("uid")),
    ("io.k8s.api.resource.v1beta2.ResourceClaimStatus", "reservedFor", "merge", Some("uid")),
    ("io.k8s.api.storage.v1.CSINodeSpec", "drivers", "merge", Some("name")),
    ("io.k8s.api.storagemigration.v1alpha1.StorageVersionMigrationList", "items", "merge", Some("type")),
    ("io.k8s.api.storagemigration.v1alpha1.StorageVersionMigrationStatus", "conditions", "merge", Some("type")),
    (
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        "x-kubernetes-validations",
        "merge",
        Some("rule"),
    ),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers", "merge", None),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences", "merge", Some("uid")),
    ("io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIServiceStatus", "conditions", "merge", Some("type")),
];

/// The strategy of `field` in the definition named `definition` (`io.k8s.api.core.v1.PodSpec`), if it is not plain
/// replacement.
pub fn strategy(definition: &str, field: &str) -> Option<Strategy> {
    let &(_, _, strategy, key) = TABLE.iter().find(|(d, f, _, _)| *d == definition && *f == field)?;
    let parts: Vec<&str> = strategy.split(',').collect();
    Some(Strategy {
        merge: parts.contains(&"merge"),
        retain_keys: parts.contains(&"retainKeys"),
        replace: parts.contains(&"replace"),
        key,
    })
}

/// The strategy of `field` as published (`"merge,retainKeys"`) and its merge key.
pub fn published(definition: &str, field: &str) -> Option<(&'static str, Option<&'static str>)> {
    TABLE.iter().find(|(d, f, _, _)| *d == definition && *f == field).map(|&(_, _, strategy, key)| (strategy, key))
}

/// Every entry: `(definition, field, strategy as published, merge key)`.
pub fn all() -> impl Iterator<Item = (&'static str, &'static str, &'static str, Option<&'static str>)> {
    TABLE.iter().copied()
}
