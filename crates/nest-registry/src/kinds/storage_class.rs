//! StorageClasses (`storage.k8s.io/v1`). Which one a claim gets when it names none is the `DefaultStorageClass`
//! admission plugin's ([`crate::admission::default_storage_class`]).

use serde_json::{Value, json};

use crate::strategy::{Strategy, set_defaults};

/// StorageClasses, as `SetDefaults_StorageClass` defaults them: volumes are deleted with their claims and bound at
/// once.
pub struct StorageClass;

impl Strategy for StorageClass {
    fn prepare_for_create(&self, obj: &mut Value) {
        set_defaults(obj, [("reclaimPolicy", json!("Delete")), ("volumeBindingMode", json!("Immediate"))]);
    }
}
