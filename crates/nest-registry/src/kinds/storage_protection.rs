//! The `StorageObjectInUseProtection` admission plugin (kube-apiserver's
//! `plugin/pkg/admission/storage/storageobjectinuseprotection`, 1.33): every new PersistentVolumeClaim gets the
//! `kubernetes.io/pvc-protection` finalizer and every new PersistentVolume `kubernetes.io/pv-protection`, so that
//! neither goes while in use; the controller-manager's protection controllers (nest-controllers' `protection.rs`)
//! take them off once a claim no pod uses, or a volume no claim is bound to, is being deleted.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::admission::{Mutating, Request};
use crate::error::Result;
use crate::strategy::Cluster;

/// A claim's finalizer.
pub const CLAIM: &str = "kubernetes.io/pvc-protection";
/// A volume's finalizer.
pub const VOLUME: &str = "kubernetes.io/pv-protection";

/// The plugin.
pub struct StorageObjectInUseProtection;

impl Mutating for StorageObjectInUseProtection {
    fn admit<'a>(
        &'a self,
        _cluster: Cluster<'a>,
        request: &'a Request<'a>,
        object: &'a mut Value,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let finalizer = if request.creates("", "persistentvolumeclaims") {
                CLAIM
            } else if request.creates("", "persistentvolumes") {
                VOLUME
            } else {
                return Ok(());
            };
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
        })
    }
}
