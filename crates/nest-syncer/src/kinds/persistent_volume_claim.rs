//! PersistentVolumeClaims: what a claim asks for goes down (never what would pick a volume); the volume the super
//! cluster binds it to goes up, as the tenant claim's `spec.volumeName` and as a tenant PersistentVolume
//! ([`crate::volumes`]), which goes again with the claim.

use serde_json::{Value, json};

use super::{Cx, Gone, Hooks, Kind, Up, pick, resource, with};
use crate::sync::Done;

pub fn kind() -> Kind {
    Kind {
        down: |o, m| {
            let mut claim = with(o, m, &[]);
            claim["spec"] = claim_spec(&o["spec"]);
            Some(claim)
        },
        status_up: true,
        hooks: &ClaimHooks,
        ..Kind::plain("persistentvolumeclaims", resource("", "v1", "PersistentVolumeClaim"))
    }
}

/// What of a claim's spec goes down: what it asks for, never what would pick a volume (`volumeName`, `selector`,
/// `dataSource`, `dataSourceRef`: a volume or snapshot of another tenant's is one name away), which the super
/// cluster's provisioner and binder decide.
pub fn claim_spec(spec: &Value) -> Value {
    pick(spec, &["accessModes", "resources", "storageClassName", "volumeMode"])
}

/// The volume super claim `claim` is bound to, if any.
fn volume_of(claim: &Value) -> Option<&str> {
    claim["spec"]["volumeName"].as_str().filter(|v| !v.is_empty())
}

struct ClaimHooks;

impl Hooks for ClaimHooks {
    /// Bound in the super cluster: the tenant gets the volume, and its claim names it.
    fn upward(&self, cx: &Cx<'_>, tenant: &Value, existing: &Value, up: &mut Up) {
        if let Some(volume) = volume_of(existing) {
            cx.syncer.queue.add(&cx.tenant.key, crate::Item::Volume(volume.to_string()));
            if tenant["spec"]["volumeName"] != volume {
                up.spec("volumeName", json!(volume));
            }
        }
    }

    /// The tenant's copy of the volume the claim was bound to goes with it.
    fn gone<'a>(&'a self, cx: &'a Cx<'a>, gone: Gone<'a>) -> futures_util::future::BoxFuture<'a, kube::Result<Done>> {
        if gone.deleted
            && let Some(volume) = gone.existing.and_then(volume_of)
        {
            cx.syncer.queue.add(&cx.tenant.key, crate::Item::Volume(volume.to_string()));
        }
        Box::pin(async { Ok(Done::default()) })
    }
}
