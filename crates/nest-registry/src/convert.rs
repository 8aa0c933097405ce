//! The shapes one stored object is served in.
//!
//! Most resources have one: objects are served as stored. `events.k8s.io/v1` Events are the core `v1` Events in
//! another shape, as in kube-apiserver (`pkg/apis/events/v1`): they are stored as core Events, converted on the way
//! in, and converted back on every read, list and watch, so both APIs see the same objects.

use serde_json::{Value, json};

use crate::catalog::ResourceInfo;

/// Core `v1` Event field ↔ `events.k8s.io/v1` Event field.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

/// Whether objects of `info` are stored in another shape than they are served in.
pub fn converts(info: &ResourceInfo) -> bool {
    info.stored_as.is_some()
}

/// Turns an object as served by `info` into its stored shape.
pub fn to_storage(info: &ResourceInfo, obj: &mut Value) {
    if info.group == "events.k8s.io" {
        rename(obj, |(core, events)| (events, core));
        obj["apiVersion"] = json!("v1");
    }
}

/// Turns a stored object into the shape `info` serves, with `info`'s `apiVersion` and `kind`.
pub fn from_storage(info: &ResourceInfo, obj: &mut Value) {
    if info.group == "events.k8s.io" {
        rename(obj, |pair| pair);
    }
    if converts(info) || info.custom {
        // Custom resources are stored at one version and served at every served version (conversion "None").
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
    }
}

fn rename(obj: &mut Value, direction: impl Fn((&'static str, &'static str)) -> (&'static str, &'static str)) {
    let Some(map) = obj.as_object_mut() else { return };
    for &pair in EVENT_FIELDS {
        let (from, to) = direction(pair);
        match map.remove(from) {
            Some(value) => {
                map.insert(to.to_string(), value);
            }
            None => {
                map.remove(to);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    #[test]
    fn events_convert_both_ways() {
        let catalog = Catalog::builtin();
        let events = catalog.find("events.k8s.io", "v1", "events").unwrap();
        let mut obj = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "regarding": {"name": "p"},
                             "note": "pulled", "reportingController": "kubelet", "reason": "Pulled"});
        to_storage(&events, &mut obj);
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "Event", "involvedObject": {"name": "p"}, "message": "pulled",
                   "reportingComponent": "kubelet", "reason": "Pulled"})
        );
        from_storage(&events, &mut obj);
        assert_eq!(obj["regarding"]["name"], "p");
        assert_eq!((obj["note"].as_str(), obj["apiVersion"].as_str()), (Some("pulled"), Some("events.k8s.io/v1")));
        assert!(obj.get("involvedObject").is_none());
    }
}
