//! `cluster.x-k8s.io/v1beta2` `Cluster`: the subset of Cluster API's core type that nest uses, in its current shape,
//! served by nest only where the Cluster API core is not installed.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ApiEndpoint, Condition};

/// A Kubernetes cluster: its network, its endpoint, and references to the objects providing its infrastructure and
/// its control plane.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    namespaced,
    status = "ClusterStatus",
    shortname = "cl",
    category = "cluster-api",
    doc = "A Kubernetes cluster, as Cluster API's core declares it (the fields nest uses).",
    label("cluster.x-k8s.io/provider", "cluster-api"),
    label("cluster.x-k8s.io/v1beta2", "v1beta2"),
    printcolumn = r#"{"name":"Paused","type":"boolean","jsonPath":".spec.paused","priority":10}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Whether reconciliation of the Cluster and its objects is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// The cluster's network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_network: Option<ClusterNetwork>,
    /// Where the control plane is reached; copied from the control plane or the infrastructure when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The object that provides the control plane (a NestedControlPlane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_ref: Option<ContractVersionedObjectReference>,
    /// The object that provides the infrastructure (a NestedCluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractVersionedObjectReference>,
}

/// A reference to an object of a provider, in the same namespace, whose version is found through its CRD's contract
/// labels.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractVersionedObjectReference {
    /// The API group, such as `controlplane.cluster.x-k8s.io`.
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

/// The cluster's network.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    /// The port the API server listens on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_port: Option<i32>,
    /// The range Service ClusterIPs come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<NetworkRanges>,
    /// The range pod addresses come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NetworkRanges>,
    /// The DNS domain of Services (`cluster.local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_domain: Option<String>,
}

/// Address ranges.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRanges {
    pub cidr_blocks: Vec<String>,
}

/// What is known of a Cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// `Pending`, `Provisioning`, `Provisioned`, `Deleting` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ClusterInitialization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// How far a Cluster has come.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInitialization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}
