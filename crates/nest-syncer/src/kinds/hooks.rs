//! What a kind may add to the reconcile every kind shares ([`crate::object`]), as upstream's `RESTCreateStrategy`
//! and friends add a kind's policy to the generic store: each hook has a default that does nothing, so a kind's
//! file names only what it needs.
//!
//! The order is the mechanism's, the same for every kind: [`Hooks::synced`] decides whether the tenant object goes
//! down at all; a missing super object is made after [`Hooks::before_create`]; one that drifted is put back, then
//! [`Hooks::repair`] does what a merge patch of its content cannot; then what the super cluster decided goes up, in
//! at most one patch of the tenant object and one of its status, which [`Hooks::upward`] adds to ([`Up`]); a tenant
//! object gone has its super object deleted, then [`Hooks::gone`] removes what went with it. A missing super object
//! is created without what [`Hooks::creating`] takes out of it; a refusal of a repair does not hold back what goes
//! up.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Map, Value};

use super::Kind;
use crate::Syncer;
use crate::requests::{At, Requests, Side};
use crate::sync::Done;
use crate::tenants::Tenant;

/// One object's reconcile, as a kind's hooks see it.
pub struct Cx<'a> {
    pub syncer: &'a Syncer,
    pub tenant: &'a Tenant,
    /// Every request goes through these ([`crate::requests::Live`], or a fake in unit tests).
    pub requests: &'a dyn Requests,
    pub kind: &'a Kind,
    /// The tenant object's namespace and name, and its super object's.
    pub namespace: &'a str,
    pub name: &'a str,
    pub super_namespace: &'a str,
    pub super_name: &'a str,
}

impl Cx<'_> {
    /// Where the super object is.
    pub fn super_at(&self) -> At<'_> {
        At { side: Side::Super, resource: &self.kind.resource, namespace: self.super_namespace }
    }

    /// Where the tenant object is.
    pub fn tenant_at(&self) -> At<'_> {
        At { side: Side::Tenant, resource: &self.kind.resource, namespace: self.namespace }
    }

    /// The tenant's object `namespace/name` of synced kind `plural`, as the tenant's cache has it.
    pub fn tenant_object(&self, plural: &str, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let id = self.syncer.find_kind(plural)?;
        let reference = ObjectRef::new_with(name, self.syncer.kind(id).resource.clone()).within(namespace);
        self.tenant.cache(id).objects.get(&reference)
    }

    /// Whether the super object `namespace/name` of synced kind `plural` exists, as the syncer's cache has it.
    pub fn super_has(&self, plural: &str, namespace: &str, name: &str) -> bool {
        self.syncer.find_kind(plural).is_some_and(|id| self.syncer.super_object(id, namespace, name).is_some())
    }
}

/// What [`Hooks::before_create`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prepared {
    /// Something the object needs is not there yet: it is not made now, and is looked at again shortly.
    pub wait: bool,
    /// Something is due then (a pod's tokens are renewed): look again after this long.
    pub after: Option<Duration>,
}

/// What [`Hooks::repair`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repaired {
    /// Requests that changed the super cluster.
    pub down: usize,
    /// Something is due then: look again after this long.
    pub after: Option<Duration>,
}

/// A tenant object gone (or going, or no longer synced), for [`Hooks::gone`].
#[derive(Clone, Copy, Debug)]
pub struct Gone<'a> {
    /// The tenant object, while it is still there (being deleted).
    pub tenant: Option<&'a Value>,
    /// The super object, as the cache had it before this reconcile.
    pub existing: Option<&'a Value>,
    /// Whether `existing` is the syncer's copy of this tenant object.
    pub ours: bool,
    /// Whether this reconcile just deleted `existing`.
    pub deleted: bool,
}

/// What goes up to the tenant object: one merge patch of the object, one of its status, and a node to bind it to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Up {
    /// Merged into the tenant object (`metadata` and the few `spec` fields the super cluster decides).
    pub patch: Map<String, Value>,
    /// The status the tenant object gets, when the kind's status flows up.
    pub status: Option<Value>,
    /// The node the tenant object (a pod) is bound to, through its `binding` subresource.
    pub node: Option<String>,
}

impl Up {
    /// Sets `metadata.<field>.<key>` (labels or annotations) to `value`.
    pub fn metadata(&mut self, field: &str, key: &str, value: Value) {
        let metadata = self.patch.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
        if !metadata[field].is_object() {
            metadata[field] = Value::Object(Map::new());
        }
        metadata[field][key] = value;
    }

    /// Sets `spec.<field>` to `value`.
    pub fn spec(&mut self, field: &str, value: Value) {
        let spec = self.patch.entry("spec").or_insert_with(|| Value::Object(Map::new()));
        spec[field] = value;
    }
}

/// What one kind does beyond copying its objects down and keeping them equal.
pub trait Hooks: Send + Sync {
    /// Whether the tenant object is synced at all, besides what the kind's `down` says of it alone: another of the
    /// tenant's objects may gate it (an Endpoints is the tenant's to sync only when its Service has no selector).
    fn synced(&self, _cx: &Cx<'_>) -> bool {
        true
    }

    /// What the super object `wanted` (made from tenant object `tenant`) needs before it is created — its namespace
    /// is made by then.
    fn before_create<'a>(
        &'a self,
        _cx: &'a Cx<'a>,
        _wanted: &'a Value,
        _tenant: &'a Value,
    ) -> BoxFuture<'a, kube::Result<Prepared>> {
        Box::pin(async { Ok(Prepared::default()) })
    }

    /// What super object `wanted` leaves out when it is created: what the super API server refuses on create and
    /// takes only through a subresource afterwards (a pod's ephemeral containers), which [`Hooks::repair`] then
    /// writes.
    fn creating(&self, _wanted: &mut Value) {}

    /// Repairs of super object `existing` beyond its content and labels (which the mechanism puts back first).
    fn repair<'a>(
        &'a self,
        _cx: &'a Cx<'a>,
        _wanted: &'a Value,
        _existing: &'a Value,
        _tenant: &'a Value,
    ) -> BoxFuture<'a, kube::Result<Repaired>> {
        Box::pin(async { Ok(Repaired::default()) })
    }

    /// Adds to what goes up to tenant object `tenant` from its super object `existing` (the mechanism has put in
    /// the labels and annotations under the transparent prefixes, and the status when the kind's flows up).
    fn upward(&self, _cx: &Cx<'_>, _tenant: &Value, _existing: &Value, _up: &mut Up) {}

    /// What goes once the tenant object is gone (the mechanism has deleted its super object, if it was ours).
    fn gone<'a>(&'a self, _cx: &'a Cx<'a>, _gone: Gone<'a>) -> BoxFuture<'a, kube::Result<Done>> {
        Box::pin(async { Ok(Done::default()) })
    }
}

/// The hooks of a kind that needs none.
pub struct NoHooks;

impl Hooks for NoHooks {}
