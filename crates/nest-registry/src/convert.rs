//! The shapes one stored object is served in.
//!
//! Most resources have one: objects are served as stored. A resource whose objects another resource owns
//! ([`crate::catalog::StoredAs`], such as `events.k8s.io/v1` Events, which are core Events in another shape) is
//! converted on the way in, and converted back on every read, list and watch, so both APIs see the same objects.

use serde_json::{Value, json};

use crate::catalog::ResourceInfo;

/// Whether objects of `info` are stored in another shape than they are served in.
pub fn converts(info: &ResourceInfo) -> bool {
    info.stored_as.is_some()
}

/// Turns an object as served by `info` into its stored shape.
pub fn to_storage(info: &ResourceInfo, obj: &mut Value) {
    if let Some(stored) = &info.stored_as {
        rename(obj, stored.renames, |(stored, served)| (served, stored));
        obj["apiVersion"] = json!(if stored.group.is_empty() {
            info.version.clone()
        } else {
            format!("{}/{}", stored.group, info.version)
        });
    }
}

/// Turns a stored object into the shape `info` serves, with `info`'s `apiVersion` and `kind`.
pub fn from_storage(info: &ResourceInfo, obj: &mut Value) {
    if let Some(stored) = &info.stored_as {
        rename(obj, stored.renames, |pair| pair);
    }
    if converts(info) || info.custom {
        // Custom resources are stored at one version and served at every served version (conversion "None").
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
    }
}

fn rename(
    obj: &mut Value,
    renames: &[(&'static str, &'static str)],
    direction: impl Fn((&'static str, &'static str)) -> (&'static str, &'static str),
) {
    let Some(map) = obj.as_object_mut() else { return };
    for &pair in renames {
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
