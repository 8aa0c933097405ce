//! The workers: each takes an [`Item`] from the queue, reconciles it ([`crate::object`] for an object of a synced
//! kind, [`crate::namespaces`], [`crate::events`], [`crate::public`], [`crate::volumes`] for the rest), and looks at it
//! again when the reconcile asks or failed: failures to reach a server with back-off, a refusal told to the tenant.
//! Also what queues items for changes seen in the super cluster.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt as _;
use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;

use crate::kinds::KindId;
use crate::names::{TENANT_LABEL, TENANT_NAME, TENANT_NAMESPACE};
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
                    Item::Object { kind, .. } => syncer.kind(*kind).name,
                    Item::Namespace(_) => "namespaces",
                    Item::Event { .. } => "events",
                    Item::Public { kind, .. } => syncer.public.get(*kind).map_or("public", |public| public.name),
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
            if let Item::Object { kind, namespace, name } = &item
                && let Some(object) = tenant.cache(*kind).get(namespace, name)
            {
                let kind_name = object.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
                let message = format!("the super cluster refused it: {}", status.message);
                crate::events::tell(&tenant.client, namespace, &kind_name, name, object.uid(), "SyncFailed", &message)
                    .await;
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
pub fn tenant_item(kind: KindId, object: &DynamicObject) -> Option<Item> {
    let annotations = object.annotations();
    Some(Item::Object {
        kind,
        namespace: annotations.get(TENANT_NAMESPACE)?.clone(),
        name: annotations.get(TENANT_NAME)?.clone(),
    })
}

/// Queues the tenant object a changed super object stands for.
pub fn enqueue_super(syncer: &Syncer, kind: KindId, object: &DynamicObject) {
    let Some(key) = object.labels().get(TENANT_LABEL) else { return };
    if let Some(item) = tenant_item(kind, object) {
        syncer.queue.add(key, item);
    }
}

async fn reconcile(syncer: &Syncer, tenant: &Tenant, item: &Item) -> kube::Result<Done> {
    match item {
        Item::Namespace(name) => crate::namespaces::reconcile(syncer, tenant, name).await,
        Item::Object { kind, namespace, name } => {
            let requests = crate::requests::Live { syncer, tenant };
            crate::object::reconcile(syncer, tenant, &requests, *kind, namespace, name).await
        }
        Item::Event { namespace, name } => crate::events::reconcile(syncer, tenant, namespace, name).await,
        Item::Public { kind, name } => crate::public::reconcile(syncer, tenant, *kind, name).await,
        Item::Volume(name) => crate::volumes::reconcile(syncer, tenant, name).await,
    }
}

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
