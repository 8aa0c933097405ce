//! `controlplane.cluster.x-k8s.io/v1alpha1` `NestedControlPlane`: a tenant control plane made of separately managed
//! components, reporting itself as the Cluster API control-plane contract asks (both its v1beta1 and v1beta2 fields).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ApiEndpoint, Condition, NestedComponentSpec};

/// What the tenant control plane runs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// nest's own API server and controller-manager (and etcd when asked for): megabytes, a second to start.
    #[default]
    Nest,
    /// Upstream etcd, kube-apiserver and kube-controller-manager images, for real management clusters.
    Kubernetes,
}

/// A tenant control plane.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "NestedControlPlane",
    namespaced,
    status = "NestedControlPlaneStatus",
    shortname = "ncp",
    category = "cluster-api",
    category = "capn",
    doc = "A tenant control plane made of separately managed components: NestedEtcd, NestedAPIServer, NestedControllerManager.",
    label("cluster.x-k8s.io/provider", "control-plane-nested"),
    label("cluster.x-k8s.io/v1beta1", "v1alpha1"),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Flavor","type":"string","jsonPath":".spec.flavor"}"#,
    printcolumn = r#"{"name":"Initialized","type":"boolean","jsonPath":".status.initialized"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NestedControlPlaneSpec {
    /// The Kubernetes version every component runs unless it names its own, such as `v1.33.0`. Upgrades go forward
    /// one minor version at a time.
    #[schemars(regex(pattern = r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$"))]
    pub version: String,
    /// `nest` (default) or `kubernetes`.
    #[serde(default)]
    pub flavor: Flavor,
    /// Where the tenant API server is reached; set from its Service when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The NestedEtcd to use; one named after this object is created when unset. Unset with the `nest` flavor and no
    /// `components.etcd`: the API server keeps its data itself, and no etcd runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<ObjectReference>,
    /// The NestedAPIServer to use; one named after this object is created when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<ObjectReference>,
    /// The NestedControllerManager to use; one named after this object is created when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_manager: Option<ObjectReference>,
    /// The specs of the components created for this control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components: Option<ComponentOverrides>,
    /// How long leaf certificates are valid (a Go duration such as `8760h`); they are renewed when a third of that is
    /// left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(h|m|s))+$"))]
    pub certificate_validity: Option<String>,
}

/// The specs of the components a NestedControlPlane creates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<NestedComponentSpec>,
    /// The API server's spec, with its [`super::APIServerLimits`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<super::NestedAPIServerSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_manager: Option<NestedComponentSpec>,
}

/// What is known of a NestedControlPlane.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NestedControlPlaneStatus {
    /// The v1beta1 contract: true once the API server has answered (and never false again).
    #[serde(default)]
    pub initialized: bool,
    /// The v1beta1 contract: true while every component is ready.
    #[serde(default)]
    pub ready: bool,
    /// The v1beta2 contract's `initialization.controlPlaneInitialized`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ControlPlaneInitialization>,
    /// API server instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// v1beta1: instances at the wanted version; v1beta2 calls them `upToDateReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
    /// The lowest Kubernetes version the control plane's components run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The label selector of the API server pods, as a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Whether the control plane has come up once.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneInitialization {
    #[serde(default)]
    pub control_plane_initialized: bool,
}
