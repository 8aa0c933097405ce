//! Events the controllers record, as kube-controller-manager's do: on the object acted for, from the controller's
//! component (`deployment-controller`, `replicaset-controller`, …), with upstream's reasons and messages. Each is
//! sent in the background, so that a controller never waits for its explanation; one the API server refuses is
//! dropped.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, Resource, ResourceExt};

/// Records an Event about `object` from `component`; `type_` is `Normal` or `Warning`.
pub fn record<K>(
    client: &Client,
    object: &K,
    component: &'static str,
    type_: &'static str,
    reason: &'static str,
    message: String,
) where
    K: Resource<DynamicType = ()>,
{
    let namespace = object.namespace().unwrap_or_else(|| "default".into());
    let now = Time(nest_core::clock::now());
    let event = Event {
        metadata: ObjectMeta { generate_name: Some(format!("{}.", object.name_any())), ..Default::default() },
        involved_object: ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            name: Some(object.name_any()),
            namespace: object.namespace(),
            uid: object.uid(),
            resource_version: object.resource_version(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message),
        type_: Some(type_.into()),
        source: Some(EventSource { component: Some(component.into()), host: None }),
        reporting_component: Some(component.into()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        ..Default::default()
    };
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
    tokio::spawn(async move {
        if let Err(error) = events.create(&PostParams::default(), &event).await {
            tracing::debug!(%error, "recording an event");
        }
    });
}
