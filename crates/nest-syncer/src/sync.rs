//! The reconcile of one tenant object, both ways.
//!
//! Downward: the super object is made to be what the tenant object says ([`crate::kinds`]): created when missing,
//! put back when its content or labels drifted, deleted when the tenant object is gone. A super object is changed or
//! deleted only when its tenant UID annotation is the tenant object's (or, when deleting, when it is labelled for
//! this tenant and names this object): the syncer never touches what it does not own.
//!
//! Upward: a super pod's status, and the node it runs on (the tenant pod is bound to a virtual node of that name),
//! a super Service's ClusterIP (annotation), a claim's status and volume ([`crate::volumes`]). A tenant pod being
//! deleted is deleted in the super cluster first; once the super pod is gone the tenant pod is removed, as a kubelet
//! would.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt as _;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use crate::kinds::Mapping;
use crate::names::{self, SUPER_CLUSTER_IP, TENANT_LABEL, TENANT_NAME, TENANT_NAMESPACE, TENANT_UID};
use crate::tenants::Tenant;
use crate::{Item, Syncer};

/// What a reconcile did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Requests that changed the super cluster, and the tenant.
    pub down: usize,
    pub up: usize,
    /// Waiting for something else to be synced first: look again shortly.
    pub again: bool,
    /// Something is due then (a pod's tokens are renewed): look again after this long.
    pub after: Option<std::time::Duration>,
}

/// A worker: takes items in turn and reconciles them.
pub async fn work(syncer: Arc<Syncer>) {
    loop {
        let (key, item, waited) = syncer.queue.next().await;
        syncer.metrics.waited(&key, waited);
        if let Some(tenant) = syncer.tenant(&key) {
            if syncer.phase(&key).is_some_and(crate::lifecycle::Phase::syncs) {
                let began = Instant::now();
                let kind = match &item {
                    Item::Object { kind, .. } => syncer.kinds[*kind].name,
                    Item::Namespace(_) => "namespaces",
                    Item::Event { .. } => "events",
                    Item::Public { kind, .. } => syncer.public_kinds[*kind].0,
                    Item::Volume(_) => "persistentvolumes",
                };
                // A panic in one object's reconcile (a bug, perhaps tripped by what a tenant wrote) is that object's
                // failure, logged and tried again in a minute; it never ends the worker, which every tenant shares.
                let reconciled = AssertUnwindSafe(reconcile(&syncer, &tenant, &item)).catch_unwind().await;
                let Ok(reconciled) = reconciled else {
                    tracing::error!(tenant = %key, ?item, "reconciling the object failed unexpectedly; trying again in a minute");
                    syncer.metrics.failed(kind);
                    later(&syncer, &key, item.clone(), std::time::Duration::from_secs(60));
                    syncer.queue.done(&key, &item);
                    continue;
                };
                match reconciled {
                    Ok(done) => {
                        syncer.metrics.reconciled(kind, &done, began.elapsed());
                        syncer.failures.lock().expect("the failures lock").remove(&(key.clone(), item.clone()));
                        if done.again {
                            later(&syncer, &key, item.clone(), std::time::Duration::from_millis(500));
                        } else if let Some(after) = done.after {
                            later(&syncer, &key, item.clone(), after);
                        }
                    }
                    Err(error) => {
                        syncer.metrics.failed(kind);
                        retry(&syncer, &tenant, item.clone(), &error).await;
                    }
                }
            } else {
                // The tenant's caches are still filling: look again shortly.
                later(&syncer, &key, item.clone(), std::time::Duration::from_millis(200));
            }
        }
        syncer.queue.done(&key, &item);
    }
}

fn later(syncer: &Arc<Syncer>, key: &str, item: Item, delay: std::time::Duration) {
    let (syncer, key) = (syncer.clone(), key.to_string());
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        syncer.queue.add(&key, item);
    });
}

/// Failures to reach a server are retried with back-off (1 s, doubling to a minute, per object). A refusal (4xx) is
/// not retried — retrying cannot make it pass; the next change or the patrol brings the object back — and is told to
/// the tenant as a Warning Event on the object, so its owner sees why it does not run.
async fn retry(syncer: &Arc<Syncer>, tenant: &Tenant, item: Item, error: &kube::Error) {
    let key = tenant.key.as_str();
    // A pod refused because its namespace's `default` ServiceAccount is not there yet (the super cluster's
    // controllers make it a moment after the namespace) is tried again, as a ReplicaSet controller would.
    let account_pending =
        |status: &kube::core::Status| status.code == 403 && status.message.contains("error looking up service account");
    match error {
        kube::Error::Api(status)
            if (400..500).contains(&status.code)
                && status.code != 409
                && status.code != 429
                && !account_pending(status) =>
        {
            tracing::info!(tenant = %key, ?item, %error, "refused; not retried");
            if let Item::Object { kind, namespace, name } = &item {
                let reference = ObjectRef::new_with(name, syncer.kinds[*kind].resource.clone()).within(namespace);
                if let Some(object) = tenant.objects[*kind].get(&reference) {
                    let kind_name = object.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
                    let message = format!("the super cluster refused it: {}", status.message);
                    crate::events::tell(
                        &tenant.client,
                        namespace,
                        &kind_name,
                        name,
                        object.uid(),
                        "SyncFailed",
                        &message,
                    )
                    .await;
                }
            }
        }
        _ => {
            let failures = {
                let mut failures = syncer.failures.lock().expect("the failures lock");
                let count = failures.entry((key.to_string(), item.clone())).or_insert(0);
                *count = count.saturating_add(1);
                *count
            };
            let delay = std::time::Duration::from_secs(1u64 << failures.min(7).saturating_sub(1))
                .min(std::time::Duration::from_secs(60));
            tracing::debug!(tenant = %key, ?item, %error, ?delay, "retrying");
            later(syncer, key, item, delay);
        }
    }
}

/// The tenant item a super object stands for, from its annotations.
pub fn tenant_item(kind: usize, object: &DynamicObject) -> Option<Item> {
    let annotations = object.annotations();
    Some(Item::Object {
        kind,
        namespace: annotations.get(TENANT_NAMESPACE)?.clone(),
        name: annotations.get(TENANT_NAME)?.clone(),
    })
}

/// Queues the tenant object a changed super object stands for.
pub fn enqueue_super(syncer: &Syncer, kind: usize, object: &DynamicObject) {
    let Some(key) = object.labels().get(TENANT_LABEL) else { return };
    if let Some(item) = tenant_item(kind, object) {
        syncer.queue.add(key, item);
    }
}

fn super_api(syncer: &Syncer, kind: usize, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(syncer.super_client.clone(), namespace, &syncer.kinds[kind].resource)
}

fn tenant_api(tenant: &Tenant, syncer: &Syncer, kind: usize, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(tenant.client.clone(), namespace, &syncer.kinds[kind].resource)
}

async fn reconcile(syncer: &Syncer, tenant: &Tenant, item: &Item) -> kube::Result<Done> {
    match item {
        Item::Namespace(name) => reconcile_namespace(syncer, tenant, name).await,
        Item::Object { kind, namespace, name } => reconcile_object(syncer, tenant, *kind, namespace, name).await,
        Item::Event { namespace, name } => crate::events::reconcile(syncer, tenant, namespace, name).await,
        Item::Public { kind, name } => crate::public::reconcile(syncer, tenant, *kind, name).await,
        Item::Volume(name) => crate::volumes::reconcile(syncer, tenant, name).await,
    }
}

/// Whether the tenant Service `namespace/name` exists and has no selector (its Endpoints are the tenant's to sync).
fn selectorless(syncer: &Syncer, tenant: &Tenant, namespace: &str, name: &str) -> bool {
    let Some(services) = syncer.kinds.iter().position(|k| k.name == "services") else { return false };
    let reference = ObjectRef::new_with(name, syncer.kinds[services].resource.clone()).within(namespace);
    tenant.objects[services]
        .get(&reference)
        .is_some_and(|s| s.data["spec"]["selector"].as_object().is_none_or(|m| m.is_empty()))
}

/// Queues the tenant whose object a super Event is about.
pub fn enqueue_event(syncer: &Syncer, event: &k8s_openapi::api::core::v1::Event) {
    let Some(namespace) = event.metadata.namespace.as_deref() else { return };
    let Some(super_namespace) = syncer.super_namespaces.get(&ObjectRef::new(namespace)) else { return };
    let Some(key) = super_namespace.labels().get(TENANT_LABEL) else { return };
    let item = Item::Event { namespace: namespace.to_string(), name: event.name_any() };
    syncer.queue.add(key, item);
}

/// Queues the tenant namespace whose super namespace is `super_namespace` (something in it the syncer keeps, such
/// as its LimitRange, changed).
pub fn enqueue_namespace_of(syncer: &Syncer, super_namespace: &str) {
    let Some(namespace) = syncer.super_namespaces.get(&ObjectRef::new(super_namespace)) else { return };
    let (Some(key), Some(tenant_namespace)) =
        (namespace.labels().get(TENANT_LABEL), namespace.annotations().get(TENANT_NAMESPACE))
    else {
        return;
    };
    syncer.queue.add(key, Item::Namespace(tenant_namespace.clone()));
}

/// A tenant namespace: its super namespace exists while it does (and goes, with everything in it, when it goes),
/// with the labels and the LimitRange the tenant's policy gives it.
async fn reconcile_namespace(syncer: &Syncer, tenant: &Tenant, name: &str) -> kube::Result<Done> {
    let live = tenant.namespaces.get(&ObjectRef::new(name)).filter(|n| n.metadata.deletion_timestamp.is_none());
    let super_name = names::super_namespace(&tenant.key, name);
    let existing = syncer.super_namespaces.get(&ObjectRef::new(&super_name));
    let ours = existing.as_ref().is_some_and(|n| n.labels().get(TENANT_LABEL) == Some(&tenant.key));
    match (live, existing) {
        (Some(_), None) => {
            ensure_namespace(syncer, tenant, name).await?;
            Ok(Done { down: 1, ..Default::default() })
        }
        (Some(_), Some(existing)) if ours && existing.metadata.deletion_timestamp.is_none() => {
            ensure_namespace(syncer, tenant, name).await?;
            Ok(Done::default())
        }
        (None, Some(existing)) if ours && existing.metadata.deletion_timestamp.is_none() => {
            let api: Api<Namespace> = Api::all(syncer.super_client.clone());
            nest_client::done_unless_gone_or_changed(api.delete(&super_name, &DeleteParams::default()).await)?;
            Ok(Done { down: 1, ..Default::default() })
        }
        _ => Ok(Done::default()),
    }
}

/// The Pod Security labels of a tenant's super namespaces: the tenant's level enforced, audited and warned about,
/// so the management cluster (kube-apiserver, or nest's) refuses a tenant pod that asks for host namespaces,
/// privileges or capabilities beyond it, whatever the tenant's own cluster allowed, and the tenant is told why.
pub(crate) fn pod_security_labels(tenant: &Tenant) -> std::collections::BTreeMap<String, String> {
    let level = tenant.pod_security.read().expect("the level lock").as_str();
    let mut labels = std::collections::BTreeMap::new();
    for mode in ["enforce", "audit", "warn"] {
        labels.insert(format!("pod-security.kubernetes.io/{mode}"), level.to_string());
        labels.insert(format!("pod-security.kubernetes.io/{mode}-version"), "latest".to_string());
    }
    labels
}

async fn ensure_namespace(syncer: &Syncer, tenant: &Tenant, name: &str) -> kube::Result<()> {
    let super_name = names::super_namespace(&tenant.key, name);
    let wanted = pod_security_labels(tenant);
    if let Some(existing) = syncer.super_namespaces.get(&ObjectRef::new(&super_name)) {
        // A namespace of that name that is not this tenant's is never used: its objects are someone else's.
        if existing.labels().get(TENANT_LABEL) != Some(&tenant.key) {
            return Err(not_ours(&super_name));
        }
        // The platform admin changed the tenant's level: the namespace follows.
        if wanted.iter().any(|(key, value)| existing.labels().get(key) != Some(value)) {
            let api: Api<Namespace> = Api::all(syncer.super_client.clone());
            let patch = serde_json::json!({"metadata": {"labels": wanted}});
            api.patch(&super_name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await?;
        }
        return ensure_limit_range(syncer, tenant, &super_name).await;
    }
    let mut labels = wanted;
    labels.insert(TENANT_LABEL.to_string(), tenant.key.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(super_name.clone()),
            labels: Some(labels),
            annotations: Some(
                [
                    (TENANT_NAMESPACE.to_string(), name.to_string()),
                    ("tenancy.nest.dev/cluster-name".to_string(), format!("{}/{}", tenant.namespace, tenant.cluster)),
                ]
                .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<Namespace> = Api::all(syncer.super_client.clone());
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        // Made since the store was filled, by this syncer or by someone else (the store holds only tenants').
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let existing = api.get(&super_name).await?;
            if existing.labels().get(TENANT_LABEL) != Some(&tenant.key) {
                return Err(not_ours(&super_name));
            }
        }
        Err(error) => return Err(error),
    }
    // Before any pod is made there, so that LimitRanger gives each the tenant's defaults.
    ensure_limit_range(syncer, tenant, &super_name).await
}

/// The tenant's container defaults as the LimitRange [`crate::compute::LIMIT_RANGE`] of its super namespace
/// `super_name`: made when missing, put back when it is not what the tenant's policy says (the platform admin changed
/// it, or someone edited or deleted it). Looked up in the cache first, so that a namespace in order costs nothing.
async fn ensure_limit_range(syncer: &Syncer, tenant: &Tenant, super_name: &str) -> kube::Result<()> {
    use crate::compute::{LIMIT_RANGE, limit_range, limit_range_is};
    use k8s_openapi::api::core::v1::LimitRange;
    let defaults = tenant.policy.read().expect("the policy lock").defaults.clone();
    let existing = syncer.super_limit_ranges.get(&ObjectRef::new(LIMIT_RANGE).within(super_name));
    let is = |range: &LimitRange| {
        range.labels().get(TENANT_LABEL) == Some(&tenant.key)
            && limit_range_is(&serde_json::to_value(&range.spec).unwrap_or_default(), &defaults)
    };
    if existing.as_deref().is_some_and(is) {
        return Ok(());
    }
    let wanted = limit_range(super_name, &tenant.key, &defaults);
    let api: Api<LimitRange> = Api::namespaced(syncer.super_client.clone(), super_name);
    let replace = || async {
        // A merge patch replaces `limits` whole, and with it anything added to the item.
        let patch = json!({"metadata": {"labels": wanted["metadata"]["labels"]}, "spec": wanted["spec"]});
        api.patch(LIMIT_RANGE, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
    };
    if existing.is_some() {
        return replace().await;
    }
    let range: LimitRange = serde_json::from_value(wanted.clone()).map_err(kube::Error::SerdeError)?;
    match api.create(&PostParams::default(), &range).await {
        Ok(_) => Ok(()),
        // There already (the cache had not seen it yet): as the policy says.
        Err(kube::Error::Api(status)) if status.code == 409 => replace().await,
        Err(error) => Err(error),
    }
}

/// Whether super object `wanted` (`namespace/name` of synced kind `kind`) fits under the tenant's cap of its kind
/// beside the tenant's other objects of the kind in the super cluster, and, for a kind that counts against the
/// tenant's compute quota (pods, [`crate::kinds::Kind::usage`]), under that quota beside all its other pods; a
/// refusal is a 403 the tenant is told of, and the object waits (the next change or patrol tries again).
///
/// What the cache does not show yet counts too: with `reserve`, an object let through is recorded
/// ([`Tenant::reserved`]) until the cache shows it or a minute has passed, so that objects created one after another
/// faster than the watch reports them cannot pass a cap or quota together. [`release`] takes back a reservation
/// whose create failed.
#[allow(clippy::too_many_arguments)]
fn within_caps(
    syncer: &Syncer,
    tenant: &Tenant,
    kind: usize,
    namespace: &str,
    name: &str,
    wanted: &Value,
    size: Option<u64>,
    reserve: bool,
) -> kube::Result<()> {
    let spec = &syncer.kinds[kind];
    let plural = spec.name;
    let policy = tenant.policy.read().expect("the policy lock").clone();
    let cap = policy.cap(plural);
    let (mut objects, mut bytes) = (0usize, 0u64);
    let mut used = crate::compute::Usage::default();
    let mut reserved = tenant.reserved.lock().expect("the reservations lock");
    let mut seen = std::collections::HashSet::new();
    for object in syncer.super_objects[kind].state() {
        // Only what the syncer made for the tenant's objects counts (its control plane's pods and Services carry its
        // label too, and are the platform's).
        let (object_namespace, object_name) = (
            object.metadata.namespace.as_deref().unwrap_or_default(),
            object.metadata.name.as_deref().unwrap_or_default(),
        );
        if object.labels().get(TENANT_LABEL) != Some(&tenant.key)
            || !object.annotations().contains_key(TENANT_NAME)
            || (object_name == name && object_namespace == namespace)
        {
            continue;
        }
        let key = (kind, object_namespace.to_string(), object_name.to_string());
        if reserved.contains_key(&key) {
            seen.insert(key);
        }
        objects += 1;
        bytes = bytes.saturating_add(crate::cached_bytes(&object));
        if let Some(usage) = spec.usage {
            used.add(&usage(&crate::full(&object), None));
        }
    }
    reserved.retain(|key, reservation| reservation.at.elapsed() < RESERVED_FOR && !seen.contains(key));
    for ((of, at_namespace, at_name), reservation) in reserved.iter() {
        if *of == kind && !(at_name == name && at_namespace == namespace) {
            objects += 1;
            bytes = bytes.saturating_add(reservation.size);
            used.add(&reservation.usage);
        }
    }
    let size = size.unwrap_or_else(|| u64::try_from(wanted.to_string().len()).unwrap_or(u64::MAX));
    let refused = |refusal: String| {
        syncer.metrics.capped(&tenant.key, plural);
        kube::Error::Api(kube::core::Status::failure(&refusal, "Forbidden").with_code(403).boxed())
    };
    crate::policy::within(cap, plural, objects, bytes, size).map_err(refused)?;
    let requested = spec.usage.map(|usage| usage(wanted, Some(&policy.defaults))).unwrap_or_default();
    if spec.usage.is_some() {
        let tenant_name = wanted["metadata"]["annotations"][TENANT_NAME].as_str().unwrap_or(name);
        policy.quota.admit(tenant_name, &used, &requested).map_err(refused)?;
    }
    if reserve {
        let at = std::time::Instant::now();
        let reservation = crate::tenants::Reservation { size, usage: requested, at };
        reserved.insert((kind, namespace.to_string(), name.to_string()), reservation);
    }
    Ok(())
}

/// How long an object the syncer created counts against its tenant's caps and quota before the cache shows it.
const RESERVED_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// Takes back what [`within_caps`] reserved for super object `namespace/name` of kind `kind`: its create failed.
fn release(tenant: &Tenant, kind: usize, namespace: &str, name: &str) {
    let key = (kind, namespace.to_string(), name.to_string());
    tenant.reserved.lock().expect("the reservations lock").remove(&key);
}

/// What the tenant's policy ([`crate::policy`]) says of super object `wanted` of kind `kind`.
fn admit(
    syncer: &Syncer,
    tenant: &Tenant,
    kind: &crate::kinds::Kind,
    policy: &crate::policy::Policy,
    wanted: &Value,
) -> Result<(), String> {
    let public_priority_classes = syncer
        .public_kinds
        .iter()
        .position(|(name, _)| *name == "priorityclasses")
        .map(|index| syncer.public[index].state().iter().map(|class| class.name_any()).collect())
        .unwrap_or_default();
    // Gathered once per check, and only for a check that asks about an address.
    let known = std::cell::OnceCell::new();
    let forbidden_address = |ip: std::net::IpAddr| -> Option<&'static str> {
        crate::addresses::refused(ip, &tenant.key, known.get_or_init(|| known_addresses(syncer)))
    };
    let cx = crate::policy::Context { policy, public_priority_classes, forbidden_address: &forbidden_address };
    (kind.admit)(wanted, &cx)
}

/// What the syncer knows now of the management cluster's addresses ([`crate::addresses::Known`]): its API server's,
/// its nodes' and their pod ranges, the ranges it was told of, and the addresses of the pods labelled with a tenant
/// (those of finished pods aside: their addresses are free again). An address two tenants' pods claim is neither's.
pub fn known_addresses(syncer: &Syncer) -> crate::addresses::Known {
    use crate::addresses::canonical;
    let mut known = crate::addresses::Known {
        api_servers: syncer.api_addresses.read().expect("the addresses lock").clone(),
        kubelet: Some(syncer.options.kubelet_address),
        pod_ranges: syncer.options.pod_ranges.clone(),
        service_ranges: syncer.options.service_ranges.clone(),
        ..Default::default()
    };
    for node in syncer.super_nodes.state() {
        let addresses = node.status.iter().flat_map(|s| s.addresses.iter().flatten());
        known.nodes.extend(addresses.filter_map(|a| a.address.parse::<std::net::IpAddr>().ok()));
        let spec = node.spec.as_ref();
        let ranges =
            spec.and_then(|s| s.pod_cidrs.as_ref()).into_iter().flatten().chain(spec.and_then(|s| s.pod_cidr.as_ref()));
        for range in ranges.filter_map(|r| r.parse::<crate::addresses::Range>().ok()) {
            if !known.pod_ranges.contains(&range) {
                known.pod_ranges.push(range);
            }
        }
    }
    if let Some(pods) = syncer.kinds.iter().position(|k| k.name == "pods") {
        for pod in syncer.super_objects[pods].state() {
            let Some(owner) = pod.labels().get(TENANT_LABEL) else { continue };
            // Kept beside the compacted body ([`crate::compact`]).
            let status = &pod.data["status"];
            if matches!(status["phase"].as_str(), Some("Succeeded" | "Failed")) {
                continue;
            }
            let listed = status["podIPs"].as_array().into_iter().flatten().filter_map(|p| p["ip"].as_str());
            for ip in status["podIP"].as_str().into_iter().chain(listed) {
                let Ok(ip) = ip.parse::<std::net::IpAddr>() else { continue };
                let claimed = known.pods.entry(canonical(ip)).or_insert_with(|| owner.clone());
                if claimed != owner {
                    // No key is empty.
                    claimed.clear();
                }
            }
        }
    }
    known
}

/// The refusal to sync into super namespace `name`, which exists and is not the tenant's: a 403, which is told to
/// the tenant and not retried (a 409 would be).
fn not_ours(name: &str) -> kube::Error {
    let message = format!("namespace {name} exists in the super cluster and is not this tenant's");
    kube::Error::Api(kube::core::Status::failure(&message, "Forbidden").with_code(403).boxed())
}

/// Whether the super object `namespace/name` of synced kind `kind` exists.
fn super_has(syncer: &Syncer, kind: &str, namespace: &str, name: &str) -> bool {
    syncer.kinds.iter().position(|k| k.name == kind).is_some_and(|index| {
        let reference = ObjectRef::new_with(name, syncer.kinds[index].resource.clone()).within(namespace);
        syncer.super_objects[index].get(&reference).is_some()
    })
}

async fn reconcile_object(
    syncer: &Syncer,
    tenant: &Tenant,
    kind: usize,
    namespace: &str,
    name: &str,
) -> kube::Result<Done> {
    let spec = &syncer.kinds[kind];
    let filled = |ready: &std::sync::atomic::AtomicBool| ready.load(std::sync::atomic::Ordering::SeqCst);
    if !filled(&tenant.kind_ready[kind]) || !filled(&syncer.super_ready[kind]) {
        return Ok(Done { again: true, ..Default::default() });
    }
    let reference = ObjectRef::new_with(name, spec.resource.clone()).within(namespace);
    let tenant_object = tenant.objects[kind].get(&reference);
    let Some(super_name) = (spec.super_name)(name) else {
        if tenant_object.is_none() {
            return Ok(Done::default());
        }
        let message = format!("the name {name} is reserved in the super cluster; rename the object to sync it");
        return Err(kube::Error::Api(kube::core::Status::failure(&message, "Forbidden").with_code(403).boxed()));
    };
    let super_namespace = names::super_namespace(&tenant.key, namespace);
    let super_reference = ObjectRef::new_with(super_name, spec.resource.clone()).within(&super_namespace);
    let super_object = syncer.super_objects[kind].get(&super_reference);
    let mut tenant_value = tenant_object.as_ref().map(|o| crate::full(o));
    let super_value = super_object.as_ref().map(|o| crate::full(o));
    // Data the cache holds only as a digest is read whole when a copy must be written: there is none yet, or its
    // data differs (equal data, however written, has equal digests; sizes decide the same way on both sides).
    if let Some(digested) = &tenant_value
        && digested["metadata"]["deletionTimestamp"].is_null()
        && crate::digested(digested, spec.verbatim)
        && super_value.as_ref().is_none_or(|s| spec.verbatim.iter().any(|field| s[*field] != digested[*field]))
    {
        // Past its cap, an object is refused before its data is read: a tenant over its cap must not have the syncer
        // read all its data again at every patrol. (Sized as the cache knows it; the caps are checked again on the
        // object whole.)
        let size = tenant_object.as_deref().map(crate::cached_bytes);
        within_caps(syncer, tenant, kind, &super_namespace, super_name, digested, size, false)?;
        let api = tenant_api(tenant, syncer, kind, namespace);
        tenant_value = match api.get_opt(name).await? {
            Some(whole) => Some(serde_json::to_value(whole).map_err(kube::Error::SerdeError)?),
            // Gone since the cache saw it: its deletion is on its way to the cache, which then asks again.
            None => return Ok(Done::default()),
        };
    }
    let owned_by = |value: &Value, uid: &Value| value["metadata"]["annotations"][TENANT_UID] == *uid;
    let ours = super_value.as_ref().is_some_and(|s| {
        s["metadata"]["labels"][TENANT_LABEL] == tenant.key.as_str()
            && s["metadata"]["annotations"][TENANT_NAME] == name
            && s["metadata"]["annotations"][TENANT_NAMESPACE] == namespace
    });
    let policy = tenant.policy.read().expect("the policy lock").clone();
    let mapping = Mapping {
        key: &tenant.key,
        namespace,
        super_namespace: super_namespace.clone(),
        api_server: (&tenant.api_server.0, tenant.api_server.1),
        transparent: &syncer.options.transparent_prefixes,
        max_grace_period_seconds: policy.max_grace_period_seconds,
        egress_off: policy.egress_off,
        share: &policy.share,
    };
    let wanted = tenant_value
        .as_ref()
        .filter(|t| t["metadata"]["deletionTimestamp"].is_null())
        .filter(|_| spec.name != "endpoints" || selectorless(syncer, tenant, namespace, name))
        .and_then(|t| (spec.down)(t, &mapping))
        .map(|mut wanted| {
            wanted["metadata"]["name"] = json!(super_name);
            wanted
        });
    let mut done = Done::default();
    let super_api = super_api(syncer, kind, &super_namespace);

    let Some(wanted) = wanted else {
        // Gone (or going) in the tenant: the super object goes; a tenant pod goes once its super pod has.
        if let Some(existing) = &super_value
            && ours
            && existing["metadata"]["deletionTimestamp"].is_null()
        {
            // Held to the tenant's cap whether or not the tenant object is still there to say how long.
            let grace = crate::kinds::delete_grace(tenant_value.as_ref(), existing, policy.max_grace_period_seconds);
            let params = DeleteParams { grace_period_seconds: grace, ..Default::default() };
            nest_client::done_unless_gone_or_changed(super_api.delete(super_name, &params).await)?;
            done.down += 1;
            // The tenant's copy of the volume it was bound to goes with it.
            if let Some(volume) = existing["spec"]["volumeName"].as_str().filter(|v| !v.is_empty()) {
                syncer.queue.add(&tenant.key, crate::Item::Volume(volume.to_string()));
            }
        }
        // A pod's token Secret goes once its super pod has.
        if spec.name == "pods"
            && super_value.is_none()
            && super_has(syncer, "secrets", &super_namespace, &crate::tokens::secret_name(name))
        {
            crate::tokens::remove(syncer, &super_namespace, name).await?;
            done.down += 1;
        }
        if let Some(tenant_value) = &tenant_value
            && !tenant_value["metadata"]["deletionTimestamp"].is_null()
            && spec.name == "pods"
            && (super_value.is_none() || !ours)
        {
            let api = tenant_api(tenant, syncer, kind, namespace);
            nest_client::done_unless_gone_or_changed(
                api.delete(name, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await,
            )?;
            done.up += 1;
        }
        return Ok(done);
    };
    // (A wanted object is made from a tenant object.)
    let Some(tenant_value) = tenant_value else { return Ok(done) };
    let uid = tenant_value["metadata"]["uid"].clone();
    // The platform admin's policy, beyond what the super cluster's admission refuses: a refusal is told to the tenant
    // and not retried, and nothing of the object goes down; for some kinds, what went down before goes too.
    if let Err(refusal) = admit(syncer, tenant, spec, &policy, &wanted) {
        if spec.on_refusal == crate::kinds::OnRefusal::Remove
            && let Some(existing) = &super_value
            && ours
            && owned_by(existing, &uid)
            && existing["metadata"]["deletionTimestamp"].is_null()
        {
            nest_client::done_unless_gone_or_changed(super_api.delete(super_name, &DeleteParams::default()).await)?;
        }
        return Err(kube::Error::Api(kube::core::Status::failure(&refusal, "Forbidden").with_code(403).boxed()));
    }

    let Some(existing) = super_value else {
        within_caps(syncer, tenant, kind, &super_namespace, super_name, &wanted, None, true)?;
        let created = create(syncer, tenant, kind, namespace, &super_namespace, &tenant_value, wanted, done).await;
        // Made (or found made): it counts until the cache shows it. Not made: it does not.
        if !matches!(&created, Ok(done) if !done.again) {
            release(tenant, kind, &super_namespace, super_name);
        }
        return created;
    };
    if !owned_by(&existing, &uid) {
        if ours {
            // Made for an earlier tenant object of the same name: it goes, and the next round makes the new one.
            nest_client::done_unless_gone_or_changed(super_api.delete(super_name, &DeleteParams::default()).await)?;
            done.down += 1;
        } else {
            tracing::warn!(tenant = %tenant.key, %namespace, %name, kind = spec.name, "a super object not made for this tenant object is in the way");
        }
        return Ok(done);
    }
    if !existing["metadata"]["deletionTimestamp"].is_null() {
        return Ok(done);
    }

    // Drift: content and labels as the tenant says.
    let mut patch = serde_json::Map::new();
    for field in spec.content {
        let (want, have) = (&wanted[*field], &existing[*field]);
        // A spec is compared field by field (the server adds defaults); data must be exactly the tenant's.
        let same = if *field == "spec" { nest_core::json::covers(have, want) } else { want == have };
        if !same {
            patch.insert(field.to_string(), want.clone());
        }
    }
    // Labels as the tenant says; those under a transparent prefix are the super cluster's (they flow up instead).
    let transparent = |key: &str| syncer.options.transparent_prefixes.iter().any(|p| key.starts_with(p.as_str()));
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
    if let Some(share) = crate::compute::share_patch(&annotations(&wanted), &annotations(&existing)) {
        let metadata = patch.entry("metadata").or_insert_with(|| json!({}));
        metadata["annotations"] = Value::Object(share);
    }
    if !patch.is_empty() {
        if spec.content.iter().any(|field| patch.contains_key(*field)) {
            within_caps(syncer, tenant, kind, &super_namespace, super_name, &wanted, None, false)?;
        }
        super_api.patch(super_name, &PatchParams::default(), &Patch::Merge(&Value::Object(patch))).await?;
        done.down += 1;
    }
    if spec.name == "pods" {
        done.after = crate::tokens::ensure(syncer, tenant, namespace, &super_namespace, &tenant_value).await?;
        // A pod's spec is mostly immutable: its images are what can be put back.
        let operations: Vec<Value> = wanted["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(i, c)| {
                existing["spec"]["containers"][*i]["name"] == c["name"]
                    && existing["spec"]["containers"][*i]["image"] != c["image"]
            })
            .map(|(i, c)| json!({"op": "replace", "path": format!("/spec/containers/{i}/image"), "value": c["image"]}))
            .collect();
        if !operations.is_empty() {
            let request = http::Request::patch(format!("/api/v1/namespaces/{super_namespace}/pods/{name}"))
                .header("content-type", "application/json-patch+json")
                .body(serde_json::to_vec(&operations).map_err(kube::Error::SerdeError)?)
                .map_err(kube::Error::HttpError)?;
            syncer.super_client.request::<Value>(request).await?;
            done.down += 1;
        }
    }

    // Upward.
    done.up += upward(syncer, tenant, kind, namespace, name, &tenant_value, &existing).await?;
    Ok(done)
}

/// Creates super object `wanted` (of kind `kind`, for tenant object `tenant_value` in `namespace`), with what it
/// needs first: its namespace, and for a pod its account and tokens.
#[allow(clippy::too_many_arguments)]
async fn create(
    syncer: &Syncer,
    tenant: &Tenant,
    kind: usize,
    namespace: &str,
    super_namespace: &str,
    tenant_value: &Value,
    wanted: Value,
    mut done: Done,
) -> kube::Result<Done> {
    let spec = &syncer.kinds[kind];
    ensure_namespace(syncer, tenant, namespace).await?;
    // A pod's account first (the super cluster may refuse a pod whose account does not exist).
    let account = wanted["spec"]["serviceAccountName"].as_str().unwrap_or("default");
    if spec.name == "pods" && account != "default" && !super_has(syncer, "serviceaccounts", super_namespace, account) {
        return Ok(Done { again: true, ..done });
    }
    // Its tokens before the pod: the node would otherwise find the Secret missing.
    if spec.name == "pods" {
        done.after = crate::tokens::ensure(syncer, tenant, namespace, super_namespace, tenant_value).await?;
    }
    let object: DynamicObject = serde_json::from_value(wanted).map_err(kube::Error::SerdeError)?;
    match super_api(syncer, kind, super_namespace).create(&PostParams::default(), &object).await {
        Ok(_) => done.down += 1,
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => return Err(error),
    }
    Ok(done)
}

/// Copies what the super cluster decided back to the tenant object.
async fn upward(
    syncer: &Syncer,
    tenant: &Tenant,
    kind: usize,
    namespace: &str,
    name: &str,
    tenant_value: &Value,
    super_value: &Value,
) -> kube::Result<usize> {
    let spec = &syncer.kinds[kind];
    let api = tenant_api(tenant, syncer, kind, namespace);
    let mut changes = 0;
    if spec.name == "services" {
        let address = &super_value["spec"]["clusterIP"];
        if !address.is_null() && tenant_value["metadata"]["annotations"][SUPER_CLUSTER_IP] != *address {
            let patch = json!({"metadata": {"annotations": {SUPER_CLUSTER_IP: address}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            changes += 1;
        }
        // Optionally, also as an external IP of the tenant Service, which tenant clients resolve like any other.
        let external = json!([address]);
        if syncer.options.service_external_ips
            && address.as_str().is_some_and(|a| !a.is_empty() && a != "None")
            && tenant_value["spec"]["externalIPs"] != external
        {
            let patch = json!({"spec": {"externalIPs": external}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            changes += 1;
        }
    }
    if spec.name == "pods" {
        let node = super_value["spec"]["nodeName"].as_str().unwrap_or_default();
        if !node.is_empty() && tenant_value["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
            crate::nodes::ensure_virtual_node(syncer, tenant, node).await?;
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            });
            let request = http_post(
                &format!("/api/v1/namespaces/{namespace}/pods/{name}/binding"),
                serde_json::to_vec(&binding).map_err(kube::Error::SerdeError)?,
            )?;
            match tenant.client.request::<Value>(request).await {
                Ok(_) => changes += 1,
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => return Err(error),
            }
        }
    }
    if spec.name == "persistentvolumeclaims"
        && let Some(volume) = super_value["spec"]["volumeName"].as_str().filter(|v| !v.is_empty())
    {
        // Bound in the super cluster: the tenant gets the volume, and its claim names it.
        syncer.queue.add(&tenant.key, crate::Item::Volume(volume.to_string()));
        if tenant_value["spec"]["volumeName"] != volume {
            let patch = json!({"spec": {"volumeName": volume}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            changes += 1;
        }
    }
    // Labels and annotations the super cluster adds under the transparent prefixes flow up.
    let mut transparent = serde_json::Map::new();
    for field in ["labels", "annotations"] {
        let mut changed = serde_json::Map::new();
        for (key, value) in super_value["metadata"][field].as_object().into_iter().flatten() {
            let passes = syncer.options.transparent_prefixes.iter().any(|p| key.starts_with(p.as_str()));
            if passes && tenant_value["metadata"][field][key] != *value {
                changed.insert(key.clone(), value.clone());
            }
        }
        if !changed.is_empty() {
            transparent.insert(field.to_string(), Value::Object(changed));
        }
    }
    if !transparent.is_empty() {
        let patch = json!({"metadata": transparent});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        changes += 1;
    }
    if spec.status_up {
        let mut status = super_value["status"].clone();
        if spec.name == "pods" {
            // The super pod's host is the super node: the virtual node has its address, so hostIP stays right.
            if let Some(map) = status.as_object_mut() {
                map.remove("nominatedNodeName");
            }
        }
        if !status.is_null() && !nest_core::json::covers(&tenant_value["status"], &status) {
            let patch = json!({"status": status});
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            changes += 1;
        }
    }
    Ok(changes)
}

fn http_post(path: &str, body: Vec<u8>) -> kube::Result<http::Request<Vec<u8>>> {
    http::Request::post(path).header("content-type", "application/json").body(body).map_err(kube::Error::HttpError)
}
