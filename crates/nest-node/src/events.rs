//! Events about pods, as the kubelet records them (`source.component: kubelet`, `source.host: <node>`), with the
//! kubelet's reasons and messages: `Pulling`, `Pulled`, `Failed`, `BackOff`, `Created`, `Started`, `Killing`,
//! `Unhealthy`; counted, aggregated and held back as client-go's recorder does (nest-client's `events.rs`). An Event
//! the API server refuses is dropped: events explain, they never stop a pod.

use k8s_openapi::api::core::v1::ObjectReference;
pub use nest_client::events::Recorder;

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

/// Records an Event about `about` from this node's kubelet (`recorder` is the node's: component `kubelet`, host the
/// node's name); `type_` is `Normal` or `Warning`.
pub fn record(recorder: &Recorder, about: &About, type_: &str, reason: &str, message: &str) {
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(about.name.clone()),
        namespace: Some(about.namespace.clone()),
        uid: Some(about.uid.clone()),
        field_path: about.field_path.clone(),
        ..Default::default()
    };
    recorder.record(regarding, type_, reason, message);
}
