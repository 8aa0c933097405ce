//! What server-side apply needs of the built-in kinds' lists and maps: `x-kubernetes-list-type` (`map` with its
//! `x-kubernetes-list-map-keys`, or `set`; every other list is atomic) and `x-kubernetes-map-type: atomic`, from
//! Kubernetes 1.33's published OpenAPI schemas. Like [`crate::patch_meta`], held equal to them by
//! `tests/patch_strategies.rs`.

/// `(definition, field, list type, keys)` of every list that is not atomic.
const LISTS: &[(&str, &str, &str, &[&str])] = &[
    ("io.k8s.api.admissionregistration.v1.MutatingWebhook", "matchConditions", "map", &["name"]),
    ("io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration", "webhooks", "map", &["name"]),
    ("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBindingSpec", "validationActions", "set", &[]),
    ("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec", "matchConditions", "map", &["name"]),
    ("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec", "variables", "map", &["name"]),
    ("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.admissionregistration.v1.ValidatingWebhook", "matchConditions", "map", &["name"]),
    ("io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration", "webhooks", "map", &["name"]),
    ("io.k8s.api.admissionregistration.v1alpha1.MutatingAdmissionPolicySpec", "matchConditions", "map", &["name"]),
    ("io.k8s.api.admissionregistration.v1beta1.ValidatingAdmissionPolicyBindingSpec", "validationActions", "set", &[]),
    ("io.k8s.api.admissionregistration.v1beta1.ValidatingAdmissionPolicySpec", "matchConditions", "map", &["name"]),
    ("io.k8s.api.admissionregistration.v1beta1.ValidatingAdmissionPolicySpec", "variables", "map", &["name"]),
    ("io.k8s.api.admissionregistration.v1beta1.ValidatingAdmissionPolicyStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.apiserverinternal.v1alpha1.ServerStorageVersion", "decodableVersions", "set", &[]),
    ("io.k8s.api.apiserverinternal.v1alpha1.ServerStorageVersion", "servedVersions", "set", &[]),
    ("io.k8s.api.apiserverinternal.v1alpha1.StorageVersionStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.apiserverinternal.v1alpha1.StorageVersionStatus", "storageVersions", "map", &["apiServerID"]),
    ("io.k8s.api.apps.v1.DaemonSetStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.apps.v1.DeploymentStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.apps.v1.ReplicaSetStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.apps.v1.StatefulSetStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement", "values", "set", &[]),
    ("io.k8s.api.batch.v1.UncountedTerminatedPods", "failed", "set", &[]),
    ("io.k8s.api.batch.v1.UncountedTerminatedPods", "succeeded", "set", &[]),
    ("io.k8s.api.certificates.v1.CertificateSigningRequestStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.core.v1.ComponentStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.core.v1.Container", "env", "map", &["name"]),
    ("io.k8s.api.core.v1.Container", "ports", "map", &["containerPort", "protocol"]),
    ("io.k8s.api.core.v1.Container", "volumeDevices", "map", &["devicePath"]),
    ("io.k8s.api.core.v1.Container", "volumeMounts", "map", &["mountPath"]),
    ("io.k8s.api.core.v1.ContainerStatus", "allocatedResourcesStatus", "map", &["name"]),
    ("io.k8s.api.core.v1.ContainerStatus", "volumeMounts", "map", &["mountPath"]),
    ("io.k8s.api.core.v1.EphemeralContainer", "env", "map", &["name"]),
    ("io.k8s.api.core.v1.EphemeralContainer", "ports", "map", &["containerPort", "protocol"]),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeDevices", "map", &["devicePath"]),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts", "map", &["mountPath"]),
    ("io.k8s.api.core.v1.NamespaceStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.core.v1.NodeSpec", "podCIDRs", "set", &[]),
    ("io.k8s.api.core.v1.NodeStatus", "addresses", "map", &["type"]),
    ("io.k8s.api.core.v1.NodeStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.core.v1.PodSpec", "containers", "map", &["name"]),
    ("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", "map", &["name"]),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", "map", &["ip"]),
    ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", "map", &["name"]),
    ("io.k8s.api.core.v1.PodSpec", "initContainers", "map", &["name"]),
    ("io.k8s.api.core.v1.PodSpec", "resourceClaims", "map", &["name"]),
    ("io.k8s.api.core.v1.PodSpec", "schedulingGates", "map", &["name"]),
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints", "map", &["topologyKey", "whenUnsatisfiable"]),
    ("io.k8s.api.core.v1.PodSpec", "volumes", "map", &["name"]),
    ("io.k8s.api.core.v1.PodStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", "map", &["ip"]),
    ("io.k8s.api.core.v1.PodStatus", "resourceClaimStatuses", "map", &["name"]),
    ("io.k8s.api.core.v1.ReplicationControllerStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.core.v1.ResourceRequirements", "claims", "map", &["name"]),
    ("io.k8s.api.core.v1.ResourceStatus", "resources", "map", &["resourceID"]),
    ("io.k8s.api.core.v1.ServiceAccount", "secrets", "map", &["name"]),
    ("io.k8s.api.core.v1.ServiceSpec", "ports", "map", &["port", "protocol"]),
    ("io.k8s.api.core.v1.ServiceStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.discovery.v1.Endpoint", "addresses", "set", &[]),
    ("io.k8s.api.flowcontrol.v1.FlowSchemaStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.flowcontrol.v1.NonResourcePolicyRule", "nonResourceURLs", "set", &[]),
    ("io.k8s.api.flowcontrol.v1.NonResourcePolicyRule", "verbs", "set", &[]),
    ("io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "apiGroups", "set", &[]),
    ("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "namespaces", "set", &[]),
    ("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "resources", "set", &[]),
    ("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "verbs", "set", &[]),
    ("io.k8s.api.networking.v1.ServiceCIDRStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.networking.v1beta1.ServiceCIDRStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.policy.v1.PodDisruptionBudgetStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.resource.v1alpha3.AllocatedDeviceStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.resource.v1alpha3.ResourceClaimStatus", "devices", "map", &["driver", "device", "pool"]),
    ("io.k8s.api.resource.v1alpha3.ResourceClaimStatus", "reservedFor", "map", &["uid"]),
    ("io.k8s.api.resource.v1beta1.AllocatedDeviceStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.resource.v1beta1.ResourceClaimStatus", "devices", "map", &["driver", "device", "pool"]),
    ("io.k8s.api.resource.v1beta1.ResourceClaimStatus", "reservedFor", "map", &["uid"]),
    ("io.k8s.api.resource.v1beta2.AllocatedDeviceStatus", "conditions", "map", &["type"]),
    ("io.k8s.api.resource.v1beta2.ResourceClaimStatus", "devices", "map", &["driver", "device", "pool"]),
    ("io.k8s.api.resource.v1beta2.ResourceClaimStatus", "reservedFor", "map", &["uid"]),
    ("io.k8s.api.storage.v1.CSIDriverSpec", "volumeLifecycleModes", "set", &[]),
    ("io.k8s.api.storage.v1.CSINodeSpec", "drivers", "map", &["name"]),
    ("io.k8s.api.storagemigration.v1alpha1.StorageVersionMigrationList", "items", "map", &["type"]),
    ("io.k8s.api.storagemigration.v1alpha1.StorageVersionMigrationStatus", "conditions", "map", &["type"]),
    (
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus",
        "conditions",
        "map",
        &["type"],
    ),
    (
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        "x-kubernetes-validations",
        "map",
        &["rule"],
    ),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers", "set", &[]),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences", "map", &["uid"]),
    ("io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIServiceStatus", "conditions", "map", &["type"]),
];

/// Definitions whose objects are atomic (owned and replaced as a whole).
const ATOMIC: &[&str] = &[
    "io.k8s.api.admissionregistration.v1.MatchResources",
    "io.k8s.api.admissionregistration.v1.NamedRuleWithOperations",
    "io.k8s.api.admissionregistration.v1.ParamKind",
    "io.k8s.api.admissionregistration.v1.ParamRef",
    "io.k8s.api.admissionregistration.v1.Variable",
    "io.k8s.api.admissionregistration.v1alpha1.MatchResources",
    "io.k8s.api.admissionregistration.v1alpha1.NamedRuleWithOperations",
    "io.k8s.api.admissionregistration.v1alpha1.ParamKind",
    "io.k8s.api.admissionregistration.v1alpha1.ParamRef",
    "io.k8s.api.admissionregistration.v1beta1.MatchResources",
    "io.k8s.api.admissionregistration.v1beta1.NamedRuleWithOperations",
    "io.k8s.api.admissionregistration.v1beta1.ParamKind",
    "io.k8s.api.admissionregistration.v1beta1.ParamRef",
    "io.k8s.api.admissionregistration.v1beta1.Variable",
    "io.k8s.api.autoscaling.v1.CrossVersionObjectReference",
    "io.k8s.api.core.v1.ConfigMapKeySelector",
    "io.k8s.api.core.v1.EndpointAddress",
    "io.k8s.api.core.v1.EndpointPort",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.NodeSelector",
    "io.k8s.api.core.v1.NodeSelectorTerm",
    "io.k8s.api.core.v1.ObjectFieldSelector",
    "io.k8s.api.core.v1.ObjectReference",
    "io.k8s.api.core.v1.ResourceFieldSelector",
    "io.k8s.api.core.v1.ScopeSelector",
    "io.k8s.api.core.v1.SecretKeySelector",
    "io.k8s.api.core.v1.SecretReference",
    "io.k8s.api.core.v1.TopologySelectorTerm",
    "io.k8s.api.core.v1.TypedLocalObjectReference",
    "io.k8s.api.discovery.v1.EndpointPort",
    "io.k8s.api.networking.v1.ServiceBackendPort",
    "io.k8s.api.rbac.v1.RoleRef",
    "io.k8s.api.rbac.v1.Subject",
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference",
];

/// `(definition, field, map type)` where a field says it itself.
const MAP_FIELDS: &[(&str, &str, &str)] = &[
    ("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "allocatedResourceStatuses", "granular"),
    ("io.k8s.api.core.v1.PersistentVolumeSpec", "claimRef", "granular"),
    ("io.k8s.api.core.v1.PodSpec", "nodeSelector", "atomic"),
    ("io.k8s.api.core.v1.ReplicationControllerSpec", "selector", "atomic"),
    ("io.k8s.api.core.v1.ServiceSpec", "selector", "atomic"),
    ("io.k8s.api.node.v1.Scheduling", "nodeSelector", "atomic"),
];

/// How a list is merged by server-side apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole.
    Atomic,
    /// Items identified by the values of these fields.
    Map(&'static [&'static str]),
    /// Items identified by their value.
    Set,
}

/// The list type of `field` of definition `definition`.
pub fn list_type(definition: &str, field: &str) -> ListType {
    match LISTS.iter().find(|(d, f, _, _)| *d == definition && *f == field) {
        Some((_, _, "set", _)) => ListType::Set,
        Some((_, _, _, keys)) => ListType::Map(keys),
        None => ListType::Atomic,
    }
}

/// Whether objects of definition `definition` are atomic.
pub fn atomic_definition(definition: &str) -> bool {
    ATOMIC.contains(&definition)
}

/// The map type `field` of `definition` declares itself (`atomic` or `granular`), if it does.
pub fn field_map_type(definition: &str, field: &str) -> Option<&'static str> {
    MAP_FIELDS.iter().find(|(d, f, _)| *d == definition && *f == field).map(|&(_, _, t)| t)
}

/// Lists as `(definition, field, list type, keys)`.
pub type Lists = Vec<(&'static str, &'static str, &'static str, Vec<&'static str>)>;
/// Fields' own map types as `(definition, field, map type)`.
pub type MapFields = Vec<(&'static str, &'static str, &'static str)>;

/// Every entry, for the check against the published schemas: lists, atomic definitions, field map types.
pub fn all() -> (Lists, Vec<&'static str>, MapFields) {
    (LISTS.iter().map(|&(d, f, t, k)| (d, f, t, k.to_vec())).collect(), ATOMIC.to_vec(), MAP_FIELDS.to_vec())
}
