//! Events about tenants' objects, copied up: an Event in a super namespace about a synced pod, Service or claim
//! becomes an Event in the tenant namespace about the tenant object (its name, namespace and UID), with the super
//! namespace's name replaced by the tenant's in the message. Events about anything else stay in the super cluster.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use crate::Syncer;
use crate::names::{TENANT_LABEL, TENANT_NAME, TENANT_NAMESPACE, TENANT_UID};
use crate::sync::Done;
use crate::tenants::Tenant;

/// The kinds whose Events are copied, by Event `involvedObject.kind` and synced kind name.
const ABOUT: &[(&str, &str)] =
    &[("Pod", "pods"), ("Service", "services"), ("PersistentVolumeClaim", "persistentvolumeclaims")];

pub async fn reconcile(syncer: &Syncer, tenant: &Tenant, namespace: &str, name: &str) -> kube::Result<Done> {
    let Some(event) = syncer.super_events.get(&ObjectRef::new(name).within(namespace)) else {
        return Ok(Done::default());
    };
    let involved = &event.involved_object;
    let Some((_, kind_name)) = ABOUT.iter().find(|(kind, _)| Some(*kind) == involved.kind.as_deref()) else {
        return Ok(Done::default());
    };
    let Some(kind) = syncer.find_kind(kind_name) else { return Ok(Done::default()) };
    let object_name = involved.name.clone().unwrap_or_default();
    let Some(object) = syncer.super_object(kind, namespace, &object_name) else { return Ok(Done::default()) };
    let (labels, annotations) = (object.labels(), object.annotations());
    if labels.get(TENANT_LABEL) != Some(&tenant.key) {
        return Ok(Done::default());
    }
    let (Some(tenant_namespace), Some(tenant_name), Some(uid)) =
        (annotations.get(TENANT_NAMESPACE), annotations.get(TENANT_NAME), annotations.get(TENANT_UID))
    else {
        return Ok(Done::default());
    };
    let message = event.message.clone().unwrap_or_default().replace(namespace, tenant_namespace);
    let wanted = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": tenant_namespace},
        "involvedObject": {
            "apiVersion": involved.api_version, "kind": involved.kind, "name": tenant_name,
            "namespace": tenant_namespace, "uid": uid, "fieldPath": involved.field_path,
        },
        "reason": event.reason, "message": message, "type": event.type_, "count": event.count,
        "firstTimestamp": event.first_timestamp, "lastTimestamp": event.last_timestamp,
        "eventTime": event.event_time, "source": event.source,
        "reportingComponent": event.reporting_component, "reportingInstance": event.reporting_instance,
        "action": event.action,
    });
    let wanted = strip_nulls(wanted);
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(tenant.client.clone(), tenant_namespace);
    match api.get_opt(name).await? {
        None => {
            let event = serde_json::from_value(wanted).map_err(kube::Error::SerdeError)?;
            match api.create(&PostParams::default(), &event).await {
                Ok(_) => Ok(Done { up: 1, ..Default::default() }),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Done::default()),
                Err(error) => Err(error),
            }
        }
        Some(existing) => {
            let same = existing.count == event.count
                && existing.last_timestamp == event.last_timestamp
                && existing.message.as_deref() == Some(message.as_str());
            if same {
                return Ok(Done::default());
            }
            let patch = json!({"count": wanted["count"], "lastTimestamp": wanted["lastTimestamp"], "message": message});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            Ok(Done { up: 1, ..Default::default() })
        }
    }
}

/// Records a Warning Event about object `kind` `namespace/name` (UID `uid`) in `client`'s cluster, from the syncer.
pub async fn tell(
    client: &kube::Client,
    namespace: &str,
    kind: &str,
    name: &str,
    uid: Option<String>,
    reason: &str,
    message: &str,
) {
    let now = jiff::Timestamp::now().to_string();
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": format!("{name}."), "namespace": namespace},
        "involvedObject": {"kind": kind, "name": name, "namespace": namespace, "uid": uid},
        "reason": reason, "message": message, "type": "Warning", "count": 1,
        "firstTimestamp": now, "lastTimestamp": now,
        "source": {"component": "nest-syncer"}, "reportingComponent": "nest-syncer",
    });
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), namespace);
    if let Ok(event) = serde_json::from_value(strip_nulls(event))
        && let Err(error) = api.create(&PostParams::default(), &event).await
    {
        tracing::debug!(%error, "recording an event");
    }
}

fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, strip_nulls(v))).collect())
        }
        other => other,
    }
}
