//! An event recorder, as client-go's `record.EventRecorder` and its broadcaster: each component (the kubelet of a
//! node, each controller, the scheduler) has one, events are queued (1,000 at most; beyond, they are dropped, never
//! waited for) and written in order by one task, after [`nest_core::events::Correlator`] decided whether to create
//! an Event (`<object>.<hex nanoseconds>`), count an earlier one up (a merge patch of `count`, `lastTimestamp` and
//! `message`), or say nothing. An Event the API server refuses is dropped: events explain, they never stop anyone.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use nest_core::events::{Correlator, Decision, Occurrence};
use tokio::sync::mpsc;

/// How many events wait to be written before more are dropped (client-go's `maxQueuedEvents`).
const QUEUE: usize = 1000;

/// Records Events from one component.
#[derive(Clone)]
pub struct Recorder {
    queue: mpsc::Sender<(ObjectReference, Occurrence)>,
    component: String,
    host: String,
}

impl Recorder {
    /// A recorder writing through `client` as `component` (on `host`, for a node's), with its writer task.
    pub fn new(client: Client, component: &str, host: Option<&str>) -> Recorder {
        let (queue, mut queued) = mpsc::channel::<(ObjectReference, Occurrence)>(QUEUE);
        let correlator = Arc::new(Mutex::new(Correlator::default()));
        let (source_component, source_host) = (component.to_string(), host.map(str::to_string));
        tokio::spawn(async move {
            while let Some((regarding, occurrence)) = queued.recv().await {
                let decision =
                    correlator.lock().expect("never poisoned").correlate(&occurrence, Instant::now(), || {
                        let nanos = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_nanos());
                        format!("{}.{nanos:x}", occurrence.name)
                    });
                let source = EventSource { component: Some(source_component.clone()), host: source_host.clone() };
                if let Err(name) = write(&client, regarding, &occurrence, source, decision).await {
                    correlator.lock().expect("never poisoned").forget(&name);
                }
            }
        });
        Recorder { queue, component: component.into(), host: host.unwrap_or_default().into() }
    }

    /// Records that `reason` (`message`) happened to `regarding`; `type_` is `Normal` or `Warning`.
    pub fn record(&self, regarding: ObjectReference, type_: &str, reason: &str, message: impl Into<String>) {
        let text = |s: &Option<String>| s.clone().unwrap_or_default();
        let occurrence = Occurrence {
            component: self.component.clone(),
            host: self.host.clone(),
            kind: text(&regarding.kind),
            namespace: text(&regarding.namespace),
            name: text(&regarding.name),
            field_path: text(&regarding.field_path),
            uid: text(&regarding.uid),
            api_version: text(&regarding.api_version),
            type_: type_.into(),
            reason: reason.into(),
            message: message.into(),
        };
        if self.queue.try_send((regarding, occurrence)).is_err() {
            tracing::debug!(reason, "event queue full: event dropped");
        }
    }

    /// Records an event about `object` (see [`Recorder::record`]).
    pub fn about<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        type_: &str,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.record(reference(object), type_, reason, message);
    }
}

/// A reference to `object`, as an Event's `involvedObject`.
pub fn reference<K: Resource<DynamicType = ()>>(object: &K) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: Some(object.name_any()),
        namespace: object.namespace(),
        uid: object.uid(),
        resource_version: object.resource_version(),
        ..Default::default()
    }
}

/// Writes what was decided; on failure, the name of an Event the correlator should forget.
async fn write(
    client: &Client,
    regarding: ObjectReference,
    occurrence: &Occurrence,
    source: EventSource,
    decision: Decision,
) -> Result<(), String> {
    // Events of cluster-scoped objects go to `default`, as client-go puts them.
    let namespace = regarding.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into());
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let now = Time(nest_core::clock::now());
    let (name, count, message) = match decision {
        Decision::Skip => return Ok(()),
        Decision::Create { name, message } => (name, 1, message),
        Decision::Count { name, count, message } => {
            let patch = serde_json::json!({"count": count, "lastTimestamp": now, "message": message});
            match events.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(()),
                // Gone (expired, deleted): written anew below, with its count.
                Err(kube::Error::Api(status)) if status.code == 404 => (name, count, message),
                Err(error) => {
                    tracing::debug!(%error, "counting an event");
                    return Err(name);
                }
            }
        }
    };
    let event = Event {
        metadata: ObjectMeta { name: Some(name.clone()), namespace: Some(namespace), ..Default::default() },
        involved_object: regarding,
        reason: Some(occurrence.reason.clone()),
        message: Some(message),
        type_: Some(occurrence.type_.clone()),
        reporting_component: source.component.clone(),
        reporting_instance: source.host.clone(),
        source: Some(source),
        count: Some(i32::try_from(count).unwrap_or(i32::MAX)),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        ..Default::default()
    };
    match events.create(&PostParams::default(), &event).await {
        Ok(_) => Ok(()),
        Err(error) => {
            tracing::debug!(%error, "recording an event");
            Err(name)
        }
    }
}
