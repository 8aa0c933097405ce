//! Events about pods, as the kubelet records them (`source.component: kubelet`, `source.host: <node>`), with the
//! kubelet's reasons and messages: `Pulling`, `Pulled`, `Failed`, `BackOff`, `Created`, `Started`, `Killing`,
//! `Unhealthy`. An Event the API server refuses is dropped: events explain, they never stop a pod.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// The pod (and, for a container's events, the container) an Event is about.
#[derive(Clone, Debug)]
pub struct About {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.containers{<name>}` (or `spec.initContainers{…}`), as the kubelet sets `involvedObject.fieldPath`.
    pub field_path: Option<String>,
}

impl About {
    /// The same pod's container `name`.
    pub fn container(&self, name: &str, init: bool) -> About {
        let list = if init { "initContainers" } else { "containers" };
        About { field_path: Some(format!("spec.{list}{{{name}}}")), ..self.clone() }
    }
}

/// Records an Event from node `node`'s kubelet; `type_` is `Normal` or `Warning`.
pub async fn record(
    client: &Client,
    node: &str,
    about: &About,
    type_: &str,
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let now = Time(nest_core::clock::now());
    let event = Event {
        metadata: ObjectMeta { generate_name: Some(format!("{}.", about.name)), ..Default::default() },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(about.name.clone()),
            namespace: Some(about.namespace.clone()),
            uid: Some(about.uid.clone()),
            field_path: about.field_path.clone(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(type_.into()),
        source: Some(EventSource { component: Some("kubelet".into()), host: Some(node.into()) }),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some(node.into()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        ..Default::default()
    };
    let events: Api<Event> = Api::namespaced(client.clone(), &about.namespace);
    match events.create(&PostParams::default(), &event).await {
        Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
        Err(error) => Err(error),
    }
}
