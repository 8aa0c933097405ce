//! Events: core `v1` Events, and `events.k8s.io/v1` Events, which are the same objects in another shape (as in
//! kube-apiserver's `pkg/apis/events/v1`): stored as core Events and renamed field by field on the way in and out
//! ([`crate::convert`] does the renaming from [`CORE_EVENTS`]).

use serde_json::Value;

use crate::catalog::StoredAs;
use crate::strategy::Strategy;
use crate::validation;

/// Where `events.k8s.io/v1` Events are stored: as core Events, with these fields renamed (core, events.k8s.io).
pub const CORE_EVENTS: StoredAs = StoredAs {
    group: "",
    plural: "events",
    renames: &[
        ("involvedObject", "regarding"),
        ("message", "note"),
        ("source", "deprecatedSource"),
        ("firstTimestamp", "deprecatedFirstTimestamp"),
        ("lastTimestamp", "deprecatedLastTimestamp"),
        ("count", "deprecatedCount"),
        ("reportingComponent", "reportingController"),
    ],
};

/// The Event strategy: the `involvedObject.*` field selectors `kubectl describe` uses (`regarding.*` in `events.k8s.io`).
pub struct Event {
    /// Served as `events.k8s.io/v1` (`crate::convert`).
    pub events_v1: bool,
}

impl Strategy for Event {
    /// What Go writes for an Event's fields that are neither pointers nor `omitempty`: the source as `{}`, the zero
    /// times as `null`, the reporting fields as `""` — under their names in the shape being written.
    fn prepare_for_create(&self, obj: &mut Value) {
        if !obj.is_object() {
            return;
        }
        let zeros: &[(&str, Value)] = if self.events_v1 {
            &[
                ("deprecatedSource", serde_json::json!({})),
                ("deprecatedFirstTimestamp", Value::Null),
                ("deprecatedLastTimestamp", Value::Null),
            ]
        } else {
            &[
                ("source", serde_json::json!({})),
                ("firstTimestamp", Value::Null),
                ("lastTimestamp", Value::Null),
                ("eventTime", Value::Null),
                ("reportingComponent", serde_json::json!("")),
                ("reportingInstance", serde_json::json!("")),
            ]
        };
        for (field, zero) in zeros {
            if obj.get(*field).is_none() {
                obj[*field] = zero.clone();
            }
        }
    }

    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::path_segment(name)
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        if self.events_v1 {
            return &[
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "regarding.apiVersion",
                "regarding.resourceVersion",
                "regarding.fieldPath",
                "reason",
                "reportingController",
                "type",
            ];
        }
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]
    }
}
