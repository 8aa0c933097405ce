//! The kinds the syncer copies down, each an entry of one table ([`built_in`], then [`custom`] resources): its
//! resource, how a tenant object becomes its super object, which fields are its content (compared to find drift),
//! whether its status flows back up, and its [`Hooks`] — what the kind needs before it is copied, how its copy is
//! repaired, what goes up to the tenant, what goes with it — as a registry `Strategy` holds one kind's policy.
//!
//! One file per kind holds that kind's entry and hooks (`pod.rs`, `service.rs`, …); the mechanism that runs them,
//! the same for every kind, is [`crate::object`], which names no kind. A kind is found in the table by its
//! [`KindId`], which the syncer's caches of the kind are found by too.

mod config_map;
mod custom;
mod endpoints;
mod hooks;
mod persistent_volume_claim;
mod pod;
mod secret;
mod service;
mod service_account;
#[cfg(test)]
mod tests;

pub use custom::{custom, parse_gvk};
pub use hooks::{Cx, Gone, Hooks, NoHooks, Prepared, Repaired, Up};
pub use persistent_volume_claim::claim_spec;
pub use pod::prune_super_pod;

use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Map, Value, json};

use crate::names::{self, TENANT_LABEL, TENANT_NAME, TENANT_NAMESPACE, TENANT_UID};
use crate::{compute, policy};

/// A synced kind's place in the syncer's table ([`crate::Syncer::kind`]): the kind, and the caches of its objects
/// in the super cluster and in every tenant, are found by it. Only the table makes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindId(usize);

impl KindId {
    /// The `index`th kind of the table (the syncer's own tables only).
    pub(crate) fn new(index: usize) -> KindId {
        KindId(index)
    }

    /// Its row in the syncer's tables.
    pub(crate) fn index(self) -> usize {
        self.0
    }
}

/// What a transform knows of the tenant.
pub struct Mapping<'a> {
    /// The tenant's cluster key.
    pub key: &'a str,
    /// The tenant namespace of the object, and its super namespace.
    pub namespace: &'a str,
    pub super_namespace: String,
    /// Where the tenant's API server is reached from the super cluster's pods.
    pub api_server: (&'a str, i32),
    /// Label and annotation prefixes that flow up only: a tenant's own entries under them stay in the tenant.
    pub transparent: &'a [String],
    /// The longest termination grace period a pod gets in the super cluster ([`policy::Policy`]).
    pub max_grace_period_seconds: u32,
    /// Whether the tenant's pods may not reach beyond the machine: their super pods are labelled so, and the node's
    /// network wall holds them in ([`nest_core::tenancy::EGRESS`]).
    pub egress_off: bool,
    /// The tenant's share of the node, written on its super pods ([`crate::compute::SHARE_ANNOTATIONS`] → value).
    pub share: &'a std::collections::BTreeMap<String, String>,
}

/// One synced kind.
pub struct Kind {
    /// The plural resource name (`pods`).
    pub name: &'static str,
    pub resource: ApiResource,
    /// The super object for a tenant object, or `None` when the object is not synced.
    pub down: fn(&Value, &Mapping) -> Option<Value>,
    /// The top-level fields that are the object's content: a super object whose content differs has drifted.
    pub content: &'static [&'static str],
    /// The content fields copied down exactly as they are (a ConfigMap's and a Secret's data), which the caches hold
    /// only as a digest ([`crate::compact`]): the super copy has drifted when the digests differ.
    pub verbatim: &'static [&'static str],
    /// Whether the super object's status is copied to the tenant object.
    pub status_up: bool,
    /// What the platform admin's policy says of the super object ([`crate::policy`]): a refusal names the field.
    pub admit: fn(&Value, &policy::Context) -> Result<(), String>,
    /// The super object's name for tenant object `name`, or `None` when that name is not synced.
    pub super_name: fn(&str) -> Option<&str>,
    /// What becomes of a super object already there when the policy refuses its tenant object now.
    pub on_refusal: OnRefusal,
    /// What a super object of the kind takes of its tenant's compute quota ([`crate::compute`]), for a kind that
    /// counts against it: of an object as the cache holds it (`None`), or of a new one as the LimitRange of its
    /// namespace will default it (`Some(defaults)`).
    pub usage: Option<fn(&Value, Option<&compute::Defaults>) -> compute::Usage>,
    /// What a super object of the kind keeps in the syncer's cache, for a kind whose objects are large and many (a
    /// pod keeps what the syncer reads of it); `None` keeps it whole (before [`crate::compact`]).
    pub prune: Option<fn(&mut DynamicObject)>,
    /// What the kind does beyond copying its objects down ([`Hooks`]).
    pub hooks: &'static dyn Hooks,
}

impl Kind {
    /// A kind whose objects go down with their metadata only, are never compared, keep their status, may all go
    /// down under their own names, and need nothing else: what each kind's entry starts from, naming only what it
    /// does differently.
    pub fn plain(name: &'static str, resource: ApiResource) -> Kind {
        Kind {
            name,
            resource,
            down: |o, m| Some(with(o, m, &[])),
            content: &[],
            verbatim: &[],
            status_up: false,
            admit: anything,
            super_name: same,
            on_refusal: OnRefusal::Keep,
            usage: None,
            prune: None,
            hooks: &NoHooks,
        }
    }
}

/// What becomes of a super object already made when the policy refuses its tenant object now (the platform admin
/// narrowed the policy, or what an address is changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnRefusal {
    /// It stays as it was made (a running pod is not stopped by a change of policy).
    Keep,
    /// It goes: an Endpoints address that became another tenant's pod's must stop carrying traffic there.
    Remove,
}

/// Every object of the kind may go down.
pub(crate) fn anything(_: &Value, _: &policy::Context) -> Result<(), String> {
    Ok(())
}

/// The super object has the tenant object's name.
pub(crate) fn same(name: &str) -> Option<&str> {
    Some(name)
}

pub(crate) fn resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// The built-in kinds, in the order they are created (what pods use comes before pods).
pub fn built_in() -> Vec<Kind> {
    vec![
        config_map::kind(),
        secret::kind(),
        service_account::kind(),
        endpoints::kind(),
        persistent_volume_claim::kind(),
        service::kind(),
        pod::kind(),
    ]
}

/// The cluster-scoped kinds the super cluster shares with every tenant: objects labelled [`names::PUBLIC_LABEL`]
/// `"true"` appear in each tenant as they are.
pub fn public() -> Vec<(&'static str, ApiResource)> {
    vec![
        ("storageclasses", resource("storage.k8s.io", "v1", "StorageClass")),
        ("priorityclasses", resource("scheduling.k8s.io", "v1", "PriorityClass")),
        ("customresourcedefinitions", resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition")),
    ]
}

/// The labels or annotations (`entries`) of a tenant object that go down: neither nest's own ([`names::copied`])
/// nor those under a prefix that flows up only.
pub(crate) fn kept(entries: &Value, mapping: &Mapping) -> Map<String, Value> {
    entries
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| names::copied(k) && !mapping.transparent.iter().any(|p| k.starts_with(p.as_str())))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The super object's metadata with the fields `copy` of the tenant object `object`.
pub(crate) fn with(object: &Value, mapping: &Mapping, copy: &[&str]) -> Value {
    let meta = &object["metadata"];
    let mut labels = kept(&meta["labels"], mapping);
    labels.insert(TENANT_LABEL.into(), json!(mapping.key));
    let mut annotations = kept(&meta["annotations"], mapping);
    annotations.insert(TENANT_NAMESPACE.into(), json!(mapping.namespace));
    annotations.insert(TENANT_NAME.into(), meta["name"].clone());
    annotations.insert(TENANT_UID.into(), meta["uid"].clone());
    let mut out = json!({
        "apiVersion": object["apiVersion"], "kind": object["kind"],
        "metadata": {"name": meta["name"], "namespace": mapping.super_namespace, "labels": labels, "annotations": annotations},
    });
    for field in copy {
        if let Some(value) = object.get(*field).filter(|v| !v.is_null()) {
            out[*field] = value.clone();
        }
    }
    out
}

pub(crate) fn pick(object: &Value, fields: &[&str]) -> Value {
    let picked: Map<String, Value> = fields
        .iter()
        .filter_map(|f| object.get(*f).filter(|v| !v.is_null()).map(|v| (f.to_string(), v.clone())))
        .collect();
    Value::Object(picked)
}

/// The grace period to delete super object `existing` with, its tenant object being `tenant` (or gone): the tenant
/// deletion's own when it has one, else the super pod's spec's, held to `max` either way, and never negative; so
/// that the super API server never falls back to a spec's grace period made before the cap. `None` for kinds
/// without a grace period.
pub fn delete_grace(tenant: Option<&Value>, existing: &Value, max: u32) -> Option<u32> {
    let asked = tenant
        .and_then(|t| integer(&t["metadata"]["deletionGracePeriodSeconds"]))
        .or_else(|| integer(&existing["spec"]["terminationGracePeriodSeconds"]))?;
    Some(u32::try_from(asked.clamp(0, i128::from(max))).unwrap_or(max))
}

/// An integer of a spec as a number wide enough for any JSON number (a float, or one past i64, is held at the end
/// of i128 it lies towards); `None` for what is no number.
pub(crate) fn integer(value: &Value) -> Option<i128> {
    if let Some(n) = value.as_i64() {
        return Some(i128::from(n));
    }
    if let Some(n) = value.as_u64() {
        return Some(i128::from(n));
    }
    // A saturating cast: a float past i128 is i128::MAX or MIN.
    value.as_f64().map(|f| f as i128)
}
