//! Tenant namespaces: each has a super namespace while it exists (named by [`names::super_namespace`], labelled
//! with the tenant, with the Pod Security labels of the tenant's level and the LimitRange of its container
//! defaults), which goes, with everything in it, when it goes. A super namespace of that name that is not the
//! tenant's is never used.

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::Syncer;
use crate::names::{self, TENANT_LABEL, TENANT_NAMESPACE};
use crate::sync::Done;
use crate::tenants::Tenant;

/// A tenant namespace: its super namespace exists while it does (and goes, with everything in it, when it goes),
/// with the labels and the LimitRange the tenant's policy gives it.
pub async fn reconcile(syncer: &Syncer, tenant: &Tenant, name: &str) -> kube::Result<Done> {
    let live = tenant.namespaces.get(&ObjectRef::new(name)).filter(|n| n.metadata.deletion_timestamp.is_none());
    let super_name = names::super_namespace(&tenant.key, name);
    let existing = syncer.super_namespaces.get(&ObjectRef::new(&super_name));
    let ours = existing.as_ref().is_some_and(|n| n.labels().get(TENANT_LABEL) == Some(&tenant.key));
    match (live, existing) {
        (Some(_), None) => {
            ensure(syncer, tenant, name).await?;
            Ok(Done { down: 1, ..Default::default() })
        }
        (Some(_), Some(existing)) if ours && existing.metadata.deletion_timestamp.is_none() => {
            ensure(syncer, tenant, name).await?;
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

pub async fn ensure(syncer: &Syncer, tenant: &Tenant, name: &str) -> kube::Result<()> {
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

/// The refusal to sync into super namespace `name`, which exists and is not the tenant's: a 403, which is told to
/// the tenant and not retried (a 409 would be).
fn not_ours(name: &str) -> kube::Error {
    let message = format!("namespace {name} exists in the super cluster and is not this tenant's");
    kube::Error::Api(kube::core::Status::failure(&message, "Forbidden").with_code(403).boxed())
}
