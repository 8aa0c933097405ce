//! Content negotiation: the form an answer takes, picked from the `Accept` header against [`OFFERS`], the table of
//! forms nest can produce besides the object itself.

use std::sync::Arc;

use nest_registry::{ApiError, ResourceInfo, Result};
use serde_json::{Value, json};

use crate::table::Include;

/// The form an answer takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Representation {
    /// The object or list itself.
    Full,
    /// Only metadata: `meta.k8s.io` PartialObjectMetadata(List), as the metadata client and garbage collectors ask.
    Metadata(&'static str),
    /// A `meta.k8s.io` Table, as `kubectl get` asks ([`crate::table`]).
    Table(&'static str),
}

/// One form an `Accept` entry may ask for with its `as`, `g` and `v` parameters.
struct Offer {
    /// The kinds `as` may name: the object's and the list's.
    kinds: &'static [&'static str],
    group: &'static str,
    version: &'static str,
    form: Representation,
}

/// What an `Accept` entry may ask for besides the object itself, as kube-apiserver offers it
/// (`k8s.io/apiserver/pkg/endpoints/handlers/response.go`, 1.33).
const OFFERS: &[Offer] = &[
    Offer {
        kinds: &["PartialObjectMetadata", "PartialObjectMetadataList"],
        group: "meta.k8s.io",
        version: "v1",
        form: Representation::Metadata("meta.k8s.io/v1"),
    },
    Offer {
        kinds: &["PartialObjectMetadata", "PartialObjectMetadataList"],
        group: "meta.k8s.io",
        version: "v1beta1",
        form: Representation::Metadata("meta.k8s.io/v1beta1"),
    },
    Offer { kinds: &["Table"], group: "meta.k8s.io", version: "v1", form: Representation::Table("meta.k8s.io/v1") },
    Offer {
        kinds: &["Table"],
        group: "meta.k8s.io",
        version: "v1beta1",
        form: Representation::Table("meta.k8s.io/v1beta1"),
    },
];

/// The media types an answer can be written in: JSON only.
const MEDIA_TYPES: &[&str] = &["application/json", "application/*", "*/*"];

/// What a Table is made of: the resource (its columns) and what each row carries.
pub(super) struct TableOf {
    pub resource: Arc<ResourceInfo>,
    pub include: Include,
}

impl Representation {
    /// Picks the first acceptable entry of `accept`; 406 when none is.
    pub fn negotiate(accept: Option<&str>) -> Result<Representation> {
        let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else { return Ok(Representation::Full) };
        for entry in accept.split(',') {
            let mut parts = entry.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            if !MEDIA_TYPES.contains(&media.as_str()) {
                continue;
            }
            let params: Vec<(&str, &str)> =
                parts.filter_map(|p| p.split_once('=')).map(|(k, v)| (k.trim(), v.trim())).collect();
            let param = |name: &str| params.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
            let Some(kind) = param("as") else { return Ok(Representation::Full) };
            let offered = OFFERS.iter().find(|offer| {
                offer.kinds.contains(&kind) && param("g") == Some(offer.group) && param("v") == Some(offer.version)
            });
            // Anything else we cannot produce: try the next entry.
            if let Some(offer) = offered {
                return Ok(offer.form);
            }
        }
        Err(ApiError::not_acceptable(format!(
            "only the following media types are accepted: application/json (asked for {accept})"
        )))
    }

    /// One object in this form.
    pub fn object(self, obj: Value, table: &TableOf) -> Value {
        match self {
            Representation::Full => obj,
            Representation::Metadata(api_version) => {
                json!({"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": obj["metadata"]})
            }
            Representation::Table(api_version) => {
                crate::table::object(&table.resource, &obj, table.include, api_version)
            }
        }
    }

    /// A list in this form.
    pub fn list(self, mut list: Value, table: &TableOf) -> Value {
        match self {
            Representation::Full => list,
            Representation::Metadata(api_version) => {
                let items: Vec<Value> = list["items"]
                    .as_array_mut()
                    .map(std::mem::take)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|i| self.object(i, table))
                    .collect();
                json!({"kind": "PartialObjectMetadataList", "apiVersion": api_version, "metadata": list["metadata"], "items": items})
            }
            Representation::Table(api_version) => {
                crate::table::list(&table.resource, &list, table.include, api_version)
            }
        }
    }

    /// A watch event with its object in this form.
    pub fn event(self, mut event: Value, table: &TableOf) -> Value {
        // Bookmarks and errors keep their shape.
        if self != Representation::Full && event["type"] != "ERROR" && event["type"] != "BOOKMARK" {
            let obj = event["object"].take();
            event["object"] = self.object(obj, table);
        }
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_pick_the_first_form_nest_can_produce() {
        let protobuf_table = "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io";
        assert_eq!(
            Representation::negotiate(Some(protobuf_table)).unwrap(),
            Representation::Table("meta.k8s.io/v1beta1")
        );
        let kubectl_get = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(Representation::negotiate(Some(kubectl_get)).unwrap(), Representation::Table("meta.k8s.io/v1"));
        let metadata = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(Representation::negotiate(Some(metadata)).unwrap(), Representation::Metadata("meta.k8s.io/v1"));
        assert_eq!(Representation::negotiate(None).unwrap(), Representation::Full);
        assert_eq!(Representation::negotiate(Some("*/*")).unwrap(), Representation::Full);
        assert_eq!(Representation::negotiate(Some("application/vnd.kubernetes.protobuf")).unwrap_err().code, 406);
        let pods = nest_registry::Catalog::builtin().find("", "v1", "pods").unwrap();
        let table = TableOf { resource: pods, include: crate::table::Include::Metadata };
        let list = Representation::Metadata("meta.k8s.io/v1").list(
            json!({"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "a"}, "spec": {}}]}),
            &table,
        );
        assert_eq!(list["kind"], "PartialObjectMetadataList");
        assert_eq!(
            list["items"][0],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "a"}})
        );
        assert_eq!(list["metadata"]["resourceVersion"], "5");
    }
}
