//! The `StorageObjectInUseProtection` admission plugin (kube-apiserver's
//! `plugin/pkg/admission/storage/storageobjectinuseprotection`, 1.33): every new PersistentVolumeClaim gets the
//! `kubernetes.io/pvc-protection` finalizer and every new PersistentVolume `kubernetes.io/pv-protection`, so that
//! neither goes while in use; the controller-manager's protection controllers (nest-controllers' `protection.rs`)
//! take them off once a claim no pod uses, or a volume no claim is bound to, is being deleted.

use serde_json::{Value, json};

use crate::chain::{Mutating, Request};
use crate::error::Result;
use crate::strategy::Cluster;

/// A claim's finalizer.
pub const CLAIM: &str = "kubernetes.io/pvc-protection";
/// A volume's finalizer.
pub const VOLUME: &str = "kubernetes.io/pv-protection";

/// The plugin.
pub struct StorageObjectInUseProtection;

impl Mutating for StorageObjectInUseProtection {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.creates("", "persistentvolumeclaims") || request.creates("", "persistentvolumes")
    }

    async fn admit(&self, _: Cluster<'_>, request: &Request<'_>, object: &mut Value) -> Result<()> {
        let finalizer = if request.info.plural == "persistentvolumeclaims" { CLAIM } else { VOLUME };
        if !object["metadata"].is_object() {
            return Ok(());
        }
        let finalizers = &mut object["metadata"]["finalizers"];
        if !finalizers.is_array() {
            *finalizers = json!([]);
        }
        if let Some(list) = finalizers.as_array_mut()
            && !list.iter().any(|f| f == finalizer)
        {
            list.push(json!(finalizer));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn claims_and_volumes_are_handled_when_created() {
        expect_handled(
            |r| StorageObjectInUseProtection.handles(r),
            "alice",
            "persistentvolumeclaims: create; persistentvolumes: create; pods: -",
        );
    }
}
