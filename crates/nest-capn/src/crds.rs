//! The CustomResourceDefinitions of the provider's kinds, as `nest crds` prints them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::api;

/// The provider's own CRDs (NestedCluster, NestedControlPlane and the components), without the Cluster API core's.
pub fn provider() -> Vec<CustomResourceDefinition> {
    vec![
        api::NestedCluster::crd(),
        api::NestedControlPlane::crd(),
        api::NestedEtcd::crd(),
        api::NestedAPIServer::crd(),
        api::NestedControllerManager::crd(),
    ]
}

/// Every CRD nest serves: the Cluster API core's `Cluster` (for management clusters without the Cluster API core),
/// then the provider's. Each is annotated [`MANAGED_BY`] `nest`.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut all = vec![api::Cluster::crd()];
    all.extend(provider());
    for crd in &mut all {
        crd.metadata.annotations.get_or_insert_with(Default::default).insert(MANAGED_BY.into(), "nest".into());
    }
    all
}

/// The annotation marking the CRDs nest installed, which it may replace; a `Cluster` CRD without it belongs to the
/// Cluster API core and is left alone.
pub const MANAGED_BY: &str = "nest.dev/managed-by";

/// Installs the CRDs into the cluster `client` talks to, or brings nest's up to date; returns the names of those left
/// alone because another installer owns them.
pub async fn install(client: &kube::Client) -> Result<Vec<String>, kube::Error> {
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let mut left = Vec::new();
    for crd in all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.get_opt(&name).await? {
            None => {
                api.create(&Default::default(), &crd).await?;
            }
            Some(existing) => {
                let ours = existing.metadata.annotations.as_ref().and_then(|a| a.get(MANAGED_BY)).is_some();
                if !ours {
                    left.push(name);
                } else if existing.spec != crd.spec || existing.metadata.labels != crd.metadata.labels {
                    let mut updated = crd;
                    updated.metadata.resource_version = existing.metadata.resource_version;
                    api.replace(&name, &Default::default(), &updated).await?;
                }
            }
        }
    }
    Ok(left)
}

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
