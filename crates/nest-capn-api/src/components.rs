//! `controlplane.cluster.x-k8s.io/v1alpha1` `NestedEtcd`, `NestedAPIServer` and `NestedControllerManager`: the
//! components of a nested control plane, each rendered from a versioned package of manifests (its `channel` and
//! `version`), patched, applied and kept as declared.

use k8s_openapi::api::core::v1::{ObjectReference, ResourceRequirements};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// What every component is declared with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NestedComponentSpec {
    /// The version to run (`v1.33.0`); the control plane's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$"))]
    pub version: Option<String>,
    /// The channel of the package of manifests (`stable` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Changes to the rendered manifests, applied in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<Vec<ComponentPatch>>,
    /// The resources of the component's main container; unset, the flavor's defaults for the component (the `nest`
    /// flavor: API server requests 10m CPU and 32Mi, limit 1Gi; controller-manager 5m and 16Mi, limit 512Mi; etcd
    /// 10m and 64Mi, limit 1Gi. The `kubernetes` flavor: kubeadm's CPU requests — 250m, 200m, 100m — with 256Mi,
    /// 128Mi and 128Mi, limits 2Gi, 1Gi, 2Gi). Memory limits, no CPU limits, as kubeadm-like setups do. Given in
    /// part, the rest is defaulted resource by resource (a memory limit never below the memory asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// How many instances run (etcd: 1, 3 or 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 5))]
    pub replicas: Option<i32>,
}

/// A change to one rendered object, chosen by kind and name (the name as rendered, such as `<cluster>-apiserver`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentPatch {
    /// The kind of the object to change (`StatefulSet`, `Service`).
    pub kind: String,
    /// Its name; every object of the kind when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `json` (RFC 6902 operations) or `merge` (a partial object merged in, lists of named items merged by name).
    #[serde(rename = "type")]
    pub type_: PatchType,
    /// The patch.
    #[schemars(schema_with = "super::any_json")]
    pub patch: serde_json::Value,
}

/// How a [`ComponentPatch`] is written.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PatchType {
    Json,
    #[default]
    Merge,
}

/// What is known of a component.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NestedComponentStatus {
    /// `Pending`, `Provisioning`, `Ready`, `Unhealthy`, `Upgrading` or `Deleting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Whether the component answers its health check.
    #[serde(default)]
    pub healthy: bool,
    /// The version running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Client URLs (etcd) or addresses (API server) of the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<String>>,
    /// The Service in front of the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_ref: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// What the tenant API server holds each client to, and how much history it keeps for watches (the `nest` flavor
/// renders them as `nest apiserver`'s flags; the `kubernetes` flavor's kube-apiserver has other knobs, set with
/// `patches`). Unset, `nest apiserver`'s defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct APIServerLimits {
    /// Connections open at once (`--max-connections`, default 4096): more are closed as soon as they are accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1048576))]
    pub max_connections: Option<i32>,
    /// Requests one user may have in flight, watches and log streams aside (`--max-requests-inflight-per-user`,
    /// default 200): more are answered 429 Too Many Requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_requests_inflight_per_user: Option<i32>,
    /// The largest request body, in bytes (`--max-request-bytes`, default 3 MiB as kube-apiserver's): larger ones are
    /// answered 413 Request Entity Too Large.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 67108864))]
    pub max_request_bytes: Option<i32>,
    /// Changes the watch cache keeps per resource (`--default-watch-cache-size`, default 1024): watches resume from
    /// any revision they cover, and from an older one are answered 410 Gone and list again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub watch_cache_size: Option<i32>,
}

macro_rules! component {
    ($spec:ident, $kind:literal, $short:literal, $doc:literal $(, $(#[$field_meta:meta])* $field:ident: $ty:ty)*) => {
        #[doc = $doc]
        #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
        #[kube(
            group = "controlplane.cluster.x-k8s.io",
            version = "v1alpha1",
            kind = $kind,
            namespaced,
            status = "NestedComponentStatus",
            shortname = $short,
            category = "cluster-api",
            category = "capn",
            doc = $doc,
            label("cluster.x-k8s.io/provider", "control-plane-nested"),
            label("cluster.x-k8s.io/v1beta1", "v1alpha1"),
            label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
            printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
            printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
            printcolumn = r#"{"name":"Healthy","type":"boolean","jsonPath":".status.healthy"}"#,
            printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.version"}"#,
            printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
        )]
        pub struct $spec {
            #[serde(flatten)]
            pub component: NestedComponentSpec,
            $($(#[$field_meta])* pub $field: $ty,)*
        }
    };
}

component!(
    NestedEtcdSpec,
    "NestedEtcd",
    "netcd",
    "The tenant's etcd: `replicas` members (1, 3 or 5) with a correct initial cluster."
);
component!(
    NestedAPIServerSpec,
    "NestedAPIServer",
    "nkas",
    "The tenant's API servers, behind one Service.",
    /// What the API server holds each client to.
    #[serde(flatten)]
    limits: APIServerLimits
);
component!(
    NestedControllerManagerSpec,
    "NestedControllerManager",
    "nkcm",
    "The tenant's controller-managers, with their own least-privilege kubeconfig."
);
