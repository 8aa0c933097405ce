//! `infrastructure.cluster.x-k8s.io/v1alpha1` `NestedCluster`: the infrastructure of a nested cluster, which is
//! nothing but the endpoint of its control plane.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ApiEndpoint, Condition};

/// The infrastructure of a nested cluster: where its control plane is reached.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "NestedCluster",
    namespaced,
    status = "NestedClusterStatus",
    shortname = "nc",
    category = "cluster-api",
    category = "capn",
    doc = "The infrastructure of a nested cluster: where its control plane is reached.",
    label("cluster.x-k8s.io/provider", "infrastructure-nested"),
    label("cluster.x-k8s.io/v1beta1", "v1alpha1"),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".spec.controlPlaneEndpoint.host","priority":10}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NestedClusterSpec {
    /// Where the control plane is reached; set from the tenant API server's Service unless given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
}

/// What is known of a NestedCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NestedClusterStatus {
    /// Ready once the control plane is (the v1beta1 contract).
    #[serde(default)]
    pub ready: bool,
    /// The v1beta2 contract's `initialization.provisioned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<InfrastructureInitialization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Whether the infrastructure is provisioned.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfrastructureInitialization {
    #[serde(default)]
    pub provisioned: bool,
}
