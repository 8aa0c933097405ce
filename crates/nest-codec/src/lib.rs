//! Request bodies: objects in JSON, YAML or protobuf ([`protobuf`]), and patches. Everything a client sends passes
//! through here before the registry sees it; every failure is a 4xx [`ApiError`]. `fuzz/` feeds these functions
//! arbitrary input; they are a crate of their own so that it links them without the server around them.

pub mod protobuf;

use nest_registry::patch::{json_patch, merge_patch};
use nest_registry::{ApiError, Result};
use serde_json::Value;

/// Parses a JSON body.
pub fn parse_json(bytes: &[u8]) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// Decodes an object body: JSON, YAML or Kubernetes protobuf.
pub fn decode_object(content_type: &str, bytes: &[u8]) -> Result<Value> {
    match content_type {
        "" | "application/json" | "*/*" => parse_json(bytes),
        "application/vnd.kubernetes.protobuf" => protobuf::decode(bytes),
        "application/yaml" => {
            let value: Value = serde_norway::from_slice(bytes)
                .map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML: {e}")))?;
            Ok(value)
        }
        other => Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format ({other}) - accepted media types include: \
             application/json, application/yaml, application/vnd.kubernetes.protobuf"
        ))),
    }
}

/// A patch body with its type.
pub enum Patch {
    Merge(Value),
    Json(Value),
    /// A strategic merge patch, for a built-in kind.
    Strategic(Value),
}

/// Reads a patch body of the given content type. `built_in` says whether the kind is built in: strategic merge
/// patch needs the kind's patch strategies, which custom resources do not have (415, as kube-apiserver answers).
pub fn parse_patch(content_type: &str, bytes: &[u8], built_in: bool) -> Result<Patch> {
    match content_type {
        "application/merge-patch+json" => Ok(Patch::Merge(parse_json(bytes)?)),
        "application/json-patch+json" => Ok(Patch::Json(parse_json(bytes)?)),
        "application/strategic-merge-patch+json" if built_in => Ok(Patch::Strategic(parse_json(bytes)?)),
        other => {
            let accepted = if built_in {
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, \
                 application/strategic-merge-patch+json"
            } else {
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            };
            Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted} \
                 (got {other})"
            )))
        }
    }
}

/// Applies a patch to the current object, of the kind `schema` describes (built-in kinds); the result must still be
/// an object.
pub fn apply_patch(patch: &Patch, current: &Value, schema: Option<&nest_openapi::KindSchema>) -> Result<Value> {
    let mut obj = current.clone();
    let invalid = |e: nest_registry::patch::PatchError| ApiError {
        code: 422,
        reason: "Invalid",
        ..ApiError::bad_request(format!("the server rejected our request due to an error in our request: {e}"))
    };
    match patch {
        Patch::Strategic(p) => {
            let schema = schema.ok_or_else(|| {
                ApiError::unsupported_media_type("strategic merge patch is not supported for this kind")
            })?;
            obj = nest_registry::strategic::strategic_merge(current, p, schema).map_err(invalid)?;
        }
        Patch::Merge(p) => merge_patch(&mut obj, p),
        Patch::Json(p) => {
            let operations = p.as_array().map_or(0, Vec::len);
            if operations > nest_core::patch::MAX_OPERATIONS {
                return Err(ApiError::too_large(format!(
                    "The allowed maximum operations in a JSON patch is {}, got {operations}",
                    nest_core::patch::MAX_OPERATIONS
                )));
            }
            json_patch(&mut obj, p).map_err(invalid)?
        }
    }
    if !obj.is_object() {
        return Err(ApiError::bad_request("the patched object is not a JSON object"));
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_decode_from_json_or_yaml_and_anything_else_is_refused() {
        let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: \"1\"\n";
        let from_yaml = decode_object("application/yaml", yaml).unwrap();
        assert_eq!(
            from_yaml,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "1"}})
        );
        assert_eq!(decode_object("application/json", br#"{"a": 1}"#).unwrap(), json!({"a": 1}));
        assert_eq!(decode_object("application/yaml", b"a: [1, 2").unwrap_err().code, 400);
        assert_eq!(decode_object("application/json", b"{").unwrap_err().code, 400);
        assert_eq!(decode_object("application/vnd.kubernetes.protobuf", b"k8s\0").unwrap_err().code, 400);
        assert_eq!(decode_object("text/plain", b"{}").unwrap_err().code, 415);
    }

    #[test]
    fn yaml_alias_bombs_and_deep_nesting_are_refused_not_expanded() {
        let mut bomb = String::from("a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n");
        for (i, prev) in ["b", "c", "d", "e", "f", "g", "h", "i"].iter().zip(["a", "b", "c", "d", "e", "f", "g", "h"]) {
            bomb.push_str(&format!("{}: &{} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n", i, i, p = prev));
        }
        assert_eq!(decode_object("application/yaml", bomb.as_bytes()).unwrap_err().code, 400);
        let deep = "[".repeat(100_000);
        assert_eq!(decode_object("application/yaml", deep.as_bytes()).unwrap_err().code, 400);
        assert_eq!(decode_object("application/json", deep.as_bytes()).unwrap_err().code, 400);
    }
}
