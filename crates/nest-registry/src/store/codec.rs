//! Keys, encoding and continue tokens: how objects sit in storage.

use bytes::Bytes;
use nest_storage::{KeyValue, Revision};
use serde_json::{Value, json};

use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Result};
use crate::meta;

use super::Registry;

impl Registry {
    pub(super) fn prefix(info: &ResourceInfo, namespace: Option<&str>) -> String {
        let base = format!("/registry/{}/{}/", info.storage_group(), info.storage_plural());
        match namespace.filter(|_| info.namespaced) {
            Some(ns) => format!("{base}{ns}/"),
            None => base,
        }
    }

    pub(super) fn key(info: &ResourceInfo, namespace: &str, name: &str) -> String {
        format!("{}{name}", Self::prefix(info, Some(namespace)))
    }

    pub(super) fn decode(info: &ResourceInfo, item: &KeyValue) -> Result<Value> {
        Self::decode_at(info, &item.value, item.mod_revision)
    }

    pub(super) fn decode_at(info: &ResourceInfo, bytes: &[u8], revision: Revision) -> Result<Value> {
        let obj: Value = serde_json::from_slice(bytes)
            .map_err(|e| ApiError::internal(format!("stored {} is not JSON: {e}", info.qualified())))?;
        Ok(Self::served(info, obj, revision))
    }

    /// A stored object (as decoded, or as the watch cache holds it) at `revision`, as the API serves it.
    pub(super) fn served(info: &ResourceInfo, mut obj: Value, revision: Revision) -> Value {
        meta::metadata_mut(&mut obj).insert("resourceVersion".into(), json!(revision.0.to_string()));
        crate::convert::from_storage(info, &mut obj);
        // Defaults added to a schema after an object was written apply when it is read, as in kube-apiserver.
        if let Some(schema) = &info.schema {
            crate::schema::default(schema, &mut obj);
        }
        obj
    }

    /// An object just written at `revision`, as a read would serve it.
    pub(super) fn stored(mut obj: Value, revision: Revision) -> Value {
        meta::metadata_mut(&mut obj).insert("resourceVersion".into(), json!(revision.0.to_string()));
        obj
    }

    pub(super) fn encode(info: &ResourceInfo, obj: &Value) -> Result<Bytes> {
        let mut obj = obj.clone();
        meta::metadata_mut(&mut obj).remove("resourceVersion");
        crate::convert::to_storage(info, &mut obj);
        serde_json::to_vec(&obj).map(Bytes::from).map_err(|e| ApiError::internal(e.to_string()))
    }
}

/// Continue tokens: base64 of `{"v":"meta.k8s.io/v1","rv":R,"start":"<key>"}`, as kube-apiserver shapes them.
pub(super) fn encode_continue(revision: Revision, key: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": revision.0, "start": key});
    nest_core::base64::encode(token.to_string().as_bytes())
}

pub(super) fn decode_continue(token: &str) -> Result<(Revision, String)> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let bytes = nest_core::base64::decode(token).ok_or_else(bad)?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let revision = value.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let start = value.get("start").and_then(Value::as_str).ok_or_else(bad)?;
    Ok((Revision(revision), start.to_string()))
}
