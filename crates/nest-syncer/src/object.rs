//! The reconcile of one tenant object of a synced kind, both ways: the mechanism, the same for every kind; what a
//! kind does beyond it is its [`Hooks`](crate::kinds::Hooks), run here at fixed points. No kind is named here.
//!
//! Downward: the super object is made to be what the tenant object says (the kind's `down`): created when missing,
//! put back when its content or labels drifted, deleted when the tenant object is gone. A super object is changed or
//! deleted only when its tenant UID annotation is the tenant object's (or, when deleting, when it is labelled for
//! this tenant and names this object): the syncer never touches what it does not own.
//!
//! Upward: what the super cluster decided goes to the tenant object in at most one patch of the object (labels and
//! annotations under the transparent prefixes, and what the kind adds: a Service's address, a claim's volume), one
//! binding (a pod, to the virtual node of its super node) and one patch of its status.
//!
//! ```text
//!   tenant object ──(down, synced?)──► wanted ──admit──► missing? ──caps, before_create──► create
//!        │                               │                  │
//!        │ gone: delete super, gone()    │                  └─ there ──► drift patch, repair() ──► upward ──► Up
//! ```
//!
//! Every request goes through [`Requests`], so the decisions are unit-tested below against a fake.

use serde_json::{Value, json};

use crate::caps::{admit, release, within_caps};
use crate::kinds::{Cx, Gone, KindId, Mapping, Up};
use crate::names::{self, TENANT_LABEL, TENANT_NAME, TENANT_NAMESPACE, TENANT_UID};
use crate::requests::{Change, Requests};
use crate::sync::Done;
use crate::tenants::Tenant;
use crate::{Syncer, policy};

/// Reconciles tenant object `namespace/name` of synced kind `id` with its super object.
pub async fn reconcile(
    syncer: &Syncer,
    tenant: &Tenant,
    requests: &dyn Requests,
    id: KindId,
    namespace: &str,
    name: &str,
) -> kube::Result<Done> {
    let kind = syncer.kind(id);
    if !tenant.cache(id).is_filled() || !syncer.super_cache(id).is_filled() {
        return Ok(Done { again: true, ..Default::default() });
    }
    let tenant_object = tenant.cache(id).get(namespace, name);
    let Some(super_name) = (kind.super_name)(name) else {
        if tenant_object.is_none() {
            return Ok(Done::default());
        }
        let message = format!("the name {name} is reserved in the super cluster; rename the object to sync it");
        return Err(forbidden(&message));
    };
    let super_namespace = names::super_namespace(&tenant.key, namespace);
    let cx = Cx { syncer, tenant, requests, kind, namespace, name, super_namespace: &super_namespace, super_name };
    let existing = syncer.super_object(id, &super_namespace, super_name).map(|o| crate::full(&o));
    let size = tenant_object.as_deref().map(crate::cached_bytes);
    let cached = tenant_object.as_ref().map(|o| crate::full(o));
    let tenant_value = match read_whole(&cx, id, cached, size, existing.as_ref()).await? {
        Read::Found(value) => Some(value),
        Read::Missing => None,
        Read::Vanished => return Ok(Done::default()),
    };
    let ours = existing.as_ref().is_some_and(|s| {
        s["metadata"]["labels"][TENANT_LABEL] == tenant.key.as_str()
            && s["metadata"]["annotations"][TENANT_NAME] == name
            && s["metadata"]["annotations"][TENANT_NAMESPACE] == namespace
    });
    let policy = tenant.policy.read().expect("the policy lock").clone();
    let Some(wanted) = wanted(&cx, &policy, tenant_value.as_ref()) else {
        // Gone (or going) in the tenant: the super object goes, and what went with it.
        return remove(&cx, tenant_value.as_ref(), existing.as_ref(), ours, policy.max_grace_period_seconds).await;
    };
    // (A wanted object is made from a tenant object.)
    let Some(tenant_value) = tenant_value else { return Ok(Done::default()) };
    let uid = &tenant_value["metadata"]["uid"];
    // The platform admin's policy, beyond what the super cluster's admission refuses: a refusal is told to the tenant
    // and not retried, and nothing of the object goes down; for some kinds, what went down before goes too.
    if let Err(refusal) = admit(syncer, tenant, kind, &policy, &wanted) {
        if kind.on_refusal == crate::kinds::OnRefusal::Remove
            && let Some(existing) = &existing
            && ours
            && owned_by(existing, uid)
            && !deleting(existing)
        {
            nest_client::done_unless_gone_or_changed(requests.delete(cx.super_at(), super_name, None).await)?;
        }
        return Err(forbidden(&refusal));
    }
    let Some(existing) = existing else {
        within_caps(syncer, tenant, id, &super_namespace, super_name, &wanted, None, true)?;
        let created = create(&cx, &tenant_value, wanted).await;
        // Made (or found made): it counts until the cache shows it. Not made: it does not.
        if !matches!(&created, Ok(done) if !done.again) {
            release(tenant, id, &super_namespace, super_name);
        }
        return created;
    };
    if !owned_by(&existing, uid) {
        if ours {
            // Made for an earlier tenant object of the same name: it goes, and the next round makes the new one.
            nest_client::done_unless_gone_or_changed(requests.delete(cx.super_at(), super_name, None).await)?;
            return Ok(Done { down: 1, ..Default::default() });
        }
        tracing::warn!(tenant = %tenant.key, %namespace, %name, kind = kind.name, "a super object not made for this tenant object is in the way");
        return Ok(Done::default());
    }
    if deleting(&existing) {
        return Ok(Done::default());
    }
    // What the super cluster decided goes up even when it refused a repair (a tenant pod's privileged ephemeral
    // container): the tenant object's status must not stop following its copy's while the refusal stands.
    let repaired = repair(&cx, id, &wanted, &existing, &tenant_value).await;
    let up = upward(&cx, &tenant_value, &existing).await?;
    let mut done = repaired?;
    done.up += up;
    Ok(done)
}

/// A 403 refusal, which is told to the tenant and not retried.
fn forbidden(message: &str) -> kube::Error {
    kube::Error::Api(kube::core::Status::failure(message, "Forbidden").with_code(403).boxed())
}

fn deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// Whether super object `object` was made for the tenant object of UID `uid`.
fn owned_by(object: &Value, uid: &Value) -> bool {
    object["metadata"]["annotations"][TENANT_UID] == *uid
}

/// The tenant object, as far as the reconcile can tell.
enum Read {
    Found(Value),
    Missing,
    /// Gone since the cache saw it: its deletion is on its way to the cache, which then asks again.
    Vanished,
}

/// The tenant object whole: as the cache has it (`cached`, of `size` bytes there), unless the cache holds its data
/// only as a digest and a copy must be written — there is none yet, or its data differs from `existing`'s (equal
/// data, however written, has equal digests; sizes decide the same way on both sides) — when it is read whole.
async fn read_whole(
    cx: &Cx<'_>,
    id: KindId,
    cached: Option<Value>,
    size: Option<u64>,
    existing: Option<&Value>,
) -> kube::Result<Read> {
    let Some(digested) = cached else { return Ok(Read::Missing) };
    let verbatim = cx.kind.verbatim;
    let must_read = !deleting(&digested)
        && crate::digested(&digested, verbatim)
        && existing.is_none_or(|s| verbatim.iter().any(|field| s[*field] != digested[*field]));
    if !must_read {
        return Ok(Read::Found(digested));
    }
    // Past its cap, an object is refused before its data is read: a tenant over its cap must not have the syncer
    // read all its data again at every patrol. (Sized as the cache knows it; the caps are checked again on the
    // object whole.)
    within_caps(cx.syncer, cx.tenant, id, cx.super_namespace, cx.super_name, &digested, size, false)?;
    Ok(match cx.requests.get(cx.tenant_at(), cx.name).await? {
        Some(whole) => Read::Found(whole),
        None => Read::Vanished,
    })
}

/// The super object tenant object `tenant_value` should have, under its super name; `None` when it should have none
/// (it is gone or going, its kind does not sync it, or another object gates it).
fn wanted(cx: &Cx<'_>, policy: &policy::Policy, tenant_value: Option<&Value>) -> Option<Value> {
    let mapping = Mapping {
        key: &cx.tenant.key,
        namespace: cx.namespace,
        super_namespace: cx.super_namespace.to_string(),
        api_server: (&cx.tenant.api_server.0, cx.tenant.api_server.1),
        transparent: &cx.syncer.options.transparent_prefixes,
        max_grace_period_seconds: policy.max_grace_period_seconds,
        egress_off: policy.egress_off,
        share: &policy.share,
    };
    tenant_value
        .filter(|t| !deleting(t))
        .filter(|_| cx.kind.hooks.synced(cx))
        .and_then(|t| (cx.kind.down)(t, &mapping))
        .map(|mut wanted| {
            wanted["metadata"]["name"] = json!(cx.super_name);
            wanted
        })
}

/// The tenant object is gone, going or no longer synced: its super object goes (when it is ours), held to the
/// tenant's cap of grace whether or not the tenant object is still there to say how long; then what the kind says
/// goes with it.
async fn remove(
    cx: &Cx<'_>,
    tenant_value: Option<&Value>,
    existing: Option<&Value>,
    ours: bool,
    max_grace: u32,
) -> kube::Result<Done> {
    let mut done = Done::default();
    let mut deleted = false;
    if let Some(existing) = existing
        && ours
        && !deleting(existing)
    {
        let grace = crate::kinds::delete_grace(tenant_value, existing, max_grace);
        nest_client::done_unless_gone_or_changed(cx.requests.delete(cx.super_at(), cx.super_name, grace).await)?;
        done.down += 1;
        deleted = true;
    }
    let gone = Gone { tenant: tenant_value, existing, ours, deleted };
    let more = cx.kind.hooks.gone(cx, gone).await?;
    done.down += more.down;
    done.up += more.up;
    Ok(done)
}

/// Creates super object `wanted` for tenant object `tenant_value` (less what [`crate::kinds::Hooks::creating`]
/// leaves for later), with what it needs first: its namespace, and what the kind asks for
/// ([`crate::kinds::Hooks::before_create`]).
async fn create(cx: &Cx<'_>, tenant_value: &Value, mut wanted: Value) -> kube::Result<Done> {
    cx.requests.ensure_namespace(cx.namespace).await?;
    cx.kind.hooks.creating(&mut wanted);
    let prepared = cx.kind.hooks.before_create(cx, &wanted, tenant_value).await?;
    if prepared.wait {
        return Ok(Done { again: true, ..Default::default() });
    }
    let mut done = Done { after: prepared.after, ..Default::default() };
    match cx.requests.create(cx.super_at(), wanted).await {
        Ok(()) => done.down += 1,
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => return Err(error),
    }
    Ok(done)
}

/// Puts super object `existing` back to `wanted` where it drifted ([`drift`]), within the tenant's caps when its
/// content changes; then what the kind repairs beyond that.
async fn repair(cx: &Cx<'_>, id: KindId, wanted: &Value, existing: &Value, tenant_value: &Value) -> kube::Result<Done> {
    let mut done = Done::default();
    let patch = drift(cx, wanted, existing);
    if !patch.is_empty() {
        if cx.kind.content.iter().any(|field| patch.contains_key(*field)) {
            within_caps(cx.syncer, cx.tenant, id, cx.super_namespace, cx.super_name, wanted, None, false)?;
        }
        cx.requests.patch(cx.super_at(), cx.super_name, Change::Merge(Value::Object(patch))).await?;
        done.down += 1;
    }
    let repaired = cx.kind.hooks.repair(cx, wanted, existing, tenant_value).await?;
    done.down += repaired.down;
    done.after = repaired.after;
    Ok(done)
}

/// The merge patch that puts super object `existing` back to `wanted`: its content fields and its labels as the
/// tenant says, and the tenant's share of the node (on its pods) as the platform admin says; empty when nothing
/// drifted.
fn drift(cx: &Cx<'_>, wanted: &Value, existing: &Value) -> serde_json::Map<String, Value> {
    let mut patch = serde_json::Map::new();
    for field in cx.kind.content {
        let (want, have) = (&wanted[*field], &existing[*field]);
        // A spec is compared field by field (the server adds defaults); data must be exactly the tenant's.
        let same = if *field == "spec" { nest_core::json::covers(have, want) } else { want == have };
        if !same {
            patch.insert(field.to_string(), want.clone());
        }
    }
    // Labels as the tenant says; those under a transparent prefix are the super cluster's (they flow up instead).
    let transparent = |key: &str| cx.syncer.options.transparent_prefixes.iter().any(|p| key.starts_with(p.as_str()));
    let own = |labels: &Value| -> serde_json::Map<String, Value> {
        labels
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| !transparent(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let (wanted_labels, existing_labels) = (own(&wanted["metadata"]["labels"]), own(&existing["metadata"]["labels"]));
    if wanted_labels != existing_labels {
        let mut labels = Value::Object(wanted_labels);
        // Labels added by hand in the super cluster are removed.
        for key in existing_labels.keys() {
            if labels.get(key).is_none() {
                labels[key] = Value::Null;
            }
        }
        patch.insert("metadata".into(), json!({"labels": labels}));
    }
    // The tenant's share of the node (on its pods) follows the platform admin's word on running objects too.
    let annotations = |object: &Value| object["metadata"]["annotations"].clone();
    if let Some(share) = crate::compute::share_patch(&annotations(wanted), &annotations(existing)) {
        let metadata = patch.entry("metadata").or_insert_with(|| json!({}));
        metadata["annotations"] = Value::Object(share);
    }
    patch
}

/// What goes up from super object `existing` to tenant object `tenant_value`: the labels and annotations the super
/// cluster set under the transparent prefixes, the status when the kind's flows up, and what the kind adds.
fn up(cx: &Cx<'_>, tenant_value: &Value, existing: &Value) -> Up {
    let mut up = Up::default();
    for field in ["labels", "annotations"] {
        for (key, value) in existing["metadata"][field].as_object().into_iter().flatten() {
            let passes = cx.syncer.options.transparent_prefixes.iter().any(|p| key.starts_with(p.as_str()));
            if passes && tenant_value["metadata"][field][key] != *value {
                up.metadata(field, key, value.clone());
            }
        }
    }
    if cx.kind.status_up {
        up.status = Some(existing["status"].clone());
    }
    cx.kind.hooks.upward(cx, tenant_value, existing, &mut up);
    up
}

/// Copies what the super cluster decided back to the tenant object ([`up`]): a binding, one patch of the object,
/// one of its status, each only when something changed. Returns how many requests changed the tenant.
async fn upward(cx: &Cx<'_>, tenant_value: &Value, existing: &Value) -> kube::Result<usize> {
    let up = up(cx, tenant_value, existing);
    let mut changes = 0;
    if let Some(node) = &up.node {
        cx.requests.ensure_virtual_node(node).await?;
        match cx.requests.bind(cx.namespace, cx.name, node).await {
            Ok(()) => changes += 1,
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(error),
        }
    }
    if !up.patch.is_empty() {
        cx.requests.patch(cx.tenant_at(), cx.name, Change::Merge(Value::Object(up.patch))).await?;
        changes += 1;
    }
    if let Some(status) = up.status
        && !status.is_null()
        && !nest_core::json::covers(&tenant_value["status"], &status)
    {
        cx.requests.patch_status(cx.tenant_at(), cx.name, json!({"status": status})).await?;
        changes += 1;
    }
    Ok(changes)
}

#[cfg(test)]
mod tests;
