//! The API of nest's Cluster API provider for nested control planes ("CAPN"): its types and their
//! CustomResourceDefinitions, and nothing that does I/O.
//!
//! A [`Cluster`] (`cluster.x-k8s.io`, served by nest when no Cluster API core is installed) points at a
//! [`NestedCluster`] (its infrastructure) and a [`NestedControlPlane`], which is made of three separately upgradable
//! components: [`NestedEtcd`], [`NestedAPIServer`] and [`NestedControllerManager`]. [`crds::all`] builds their CRDs.
//!
//! The types live here rather than in `nest-capn` so that what only reads these objects (the syncer finds tenants by
//! their Cluster and NestedControlPlane) links neither the provider's controllers nor its packages of manifests.
//! Field names and shapes follow the Cluster API contracts (`docs/book/src/developer/providers/contracts/` in
//! cluster-api) where a contract names them; one module per group of kinds.

#![forbid(unsafe_code)]

mod cluster;
mod components;
mod control_plane;
pub mod crds;
mod nested_cluster;

pub use cluster::*;
pub use components::*;
pub use control_plane::*;
pub use nested_cluster::*;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A condition, as `metav1.Condition`.
pub type Condition = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The version of this provider's API (`controlplane.` and `infrastructure.cluster.x-k8s.io`).
pub const VERSION: &str = "v1alpha1";
/// The control-plane group.
pub const CONTROL_PLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";
/// The infrastructure group.
pub const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The label naming the Cluster an object belongs to.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// The annotation that pauses reconciliation of an object.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// On a Cluster (or its NestedControlPlane): the Pod Security level (`privileged`, `baseline` or `restricted`) the
/// tenant's namespaces in the management cluster enforce, instead of the syncer's default. Only the platform admin
/// writes these objects; the tenant cannot.
pub const POD_SECURITY_ANNOTATION: &str = "tenancy.nest.dev/pod-security";

/// A reachable Kubernetes API endpoint (Cluster API's `APIEndpoint`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ApiEndpoint {
    /// The host name or address the API server is reached at.
    pub host: String,
    /// The port the API server is reached at.
    pub port: i32,
}

impl ApiEndpoint {
    /// Whether the endpoint is unset (Cluster API's `IsZero`).
    pub fn is_zero(&self) -> bool {
        self.host.is_empty() && self.port == 0
    }
}

/// A schema that keeps any JSON, for fields such as patches whose shape is free.
pub(crate) fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}
