//! PersistentVolumes and PersistentVolumeClaims, as kube-apiserver 1.33 defaults them (`SetDefaults_PersistentVolume`,
//! `SetDefaults_PersistentVolumeClaimSpec`, `SetDefaults_HostPathVolumeSource` in pkg/apis/core/v1/defaults.go; the
//! strategies in pkg/registry/core/persistentvolume{,claim}): a volume is `Retain`ed and a `Filesystem` unless told
//! otherwise, starts `Pending` with the time it became so, and a claim wants a `Filesystem`.

use serde_json::{Value, json};

use crate::strategy::Strategy;

/// Volumes.
pub struct PersistentVolume;

/// `SetDefaults_PersistentVolume`'s spec half, on every write.
fn default_spec(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) {
        crate::strategy::set_defaults(
            spec,
            [("persistentVolumeReclaimPolicy", json!("Retain")), ("volumeMode", json!("Filesystem"))],
        );
        if let Some(host_path) = spec.get_mut("hostPath").filter(|h| h.is_object()) {
            crate::strategy::set_defaults(host_path, [("type", json!(""))]);
        }
    }
}

impl Strategy for PersistentVolume {
    fn prepare_for_create(&self, obj: &mut Value) {
        default_spec(obj);
        if obj.get("status").is_none_or(|s| s.get("lastPhaseTransitionTime").is_none()) {
            obj["status"]["lastPhaseTransitionTime"] = json!(nest_core::clock::rfc3339_now());
        }
    }

    fn prepare_for_update(&self, obj: &mut Value, _old: &Value) {
        default_spec(obj);
    }
}

/// Claims.
pub struct PersistentVolumeClaim;

impl Strategy for PersistentVolumeClaim {
    fn prepare_for_create(&self, obj: &mut Value) {
        if obj["spec"].is_object() {
            crate::strategy::set_defaults(&mut obj["spec"], [("volumeMode", json!("Filesystem"))]);
        }
    }
}
