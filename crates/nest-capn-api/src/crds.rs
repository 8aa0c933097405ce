//! The CustomResourceDefinitions of the provider's kinds, as `nest crds` prints them (`nest-capn`'s `crds::install`
//! puts them into a cluster).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{Cluster, NestedAPIServer, NestedCluster, NestedControlPlane, NestedControllerManager, NestedEtcd};

/// The provider's own CRDs (NestedCluster, NestedControlPlane and the components), without the Cluster API core's.
pub fn provider() -> Vec<CustomResourceDefinition> {
    vec![
        NestedCluster::crd(),
        NestedControlPlane::crd(),
        NestedEtcd::crd(),
        NestedAPIServer::crd(),
        NestedControllerManager::crd(),
    ]
}

/// Every CRD nest serves: the Cluster API core's `Cluster` (for management clusters without the Cluster API core),
/// then the provider's. Each is annotated [`MANAGED_BY`] `nest`.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut all = vec![Cluster::crd()];
    all.extend(provider());
    for crd in &mut all {
        crd.metadata.annotations.get_or_insert_with(Default::default).insert(MANAGED_BY.into(), "nest".into());
    }
    all
}

/// The annotation marking the CRDs nest installed, which it may replace; a `Cluster` CRD without it belongs to the
/// Cluster API core and is left alone.
pub const MANAGED_BY: &str = "nest.dev/managed-by";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_carry_the_contract_labels_names_and_categories_cluster_api_looks_for() {
        for crd in provider() {
            let labels = crd.metadata.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get("cluster.x-k8s.io/v1beta2").map(String::as_str),
                Some("v1alpha1"),
                "{:?}",
                crd.metadata.name
            );
            let names = &crd.spec.names;
            // Cluster API finds a provider's CRD by name: the plural, then the group.
            assert_eq!(crd.metadata.name.as_deref(), Some(format!("{}.{}", names.plural, crd.spec.group).as_str()));
            assert!(names.categories.iter().flatten().any(|c| c == "cluster-api"));
            assert!(!names.short_names.clone().unwrap_or_default().is_empty());
            assert!(crd.spec.versions[0].subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
        }
        let names: Vec<String> = all().iter().filter_map(|c| c.metadata.name.clone()).collect();
        assert_eq!(
            names,
            [
                "clusters.cluster.x-k8s.io",
                "nestedclusters.infrastructure.cluster.x-k8s.io",
                "nestedcontrolplanes.controlplane.cluster.x-k8s.io",
                "nestedetcds.controlplane.cluster.x-k8s.io",
                "nestedapiservers.controlplane.cluster.x-k8s.io",
                "nestedcontrollermanagers.controlplane.cluster.x-k8s.io",
            ]
        );
    }
}
