//! The provider's CustomResourceDefinitions: built by [`nest_capn_api::crds`] (re-exported here), installed into a
//! cluster by [`install`].

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

pub use nest_capn_api::crds::{MANAGED_BY, all, provider};

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
