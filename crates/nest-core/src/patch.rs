//! JSON merge patch (RFC 7386) and JSON Patch (RFC 6902), as kube-apiserver applies them.
//!
//! One deliberate difference from RFC 6902, copied from the Go library kube-apiserver uses (evanphx/json-patch):
//! `{"op":"test","path":P,"value":null}` succeeds when `P` does not exist. kube-runtime's finalizer helper depends
//! on it.

use serde_json::Value;

/// RFC 7386: objects merge recursively, `null` removes, everything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let map = target.as_object_mut().expect("an object");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The most operations one JSON Patch may hold (kube-apiserver's `maxJSONPatchOperations`, 1.33); more is a 413.
pub const MAX_OPERATIONS: usize = 10_000;

/// How many bytes the `copy` operations of one JSON Patch may add in all, as encoded JSON: kube-apiserver sets
/// json-patch's `AccumulatedCopySizeLimit` to its request body limit (3 MiB). Without it, each `copy` of a document
/// into itself doubles it: 21 operations of a 1.2 KB patch made a gigabyte.
pub const MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

/// The size of `value` encoded as compact JSON (strings counted without their escapes), counted only up to
/// `budget`: what lies past it is not walked.
fn encoded_size(value: &Value, budget: usize) -> usize {
    let mut size = 0;
    let mut todo = vec![value];
    while let Some(value) = todo.pop() {
        if size > budget {
            break;
        }
        size += match value {
            Value::Null => 4,
            Value::Bool(b) => {
                if *b {
                    4
                } else {
                    5
                }
            }
            Value::Number(n) => n.to_string().len(),
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                todo.extend(items);
                // The brackets and the commas between items.
                2 + items.len().saturating_sub(1)
            }
            Value::Object(map) => {
                for (key, item) in map {
                    size += key.len() + 3;
                    todo.push(item);
                }
                2 + map.len().saturating_sub(1)
            }
        };
    }
    size
}

/// Why a JSON Patch could not be applied (a 422 or 400 for the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatchError(pub String);

fn err(message: impl Into<String>) -> PatchError {
    PatchError(message.into())
}

/// Splits a JSON Pointer (RFC 6901) into unescaped tokens.
fn pointer(path: &str) -> Result<Vec<String>, PatchError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(err(format!("invalid JSON pointer {path:?}: must start with '/'")));
    };
    Ok(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

fn index(token: &str, len: usize, allow_end: bool) -> Result<usize, PatchError> {
    if token == "-" && allow_end {
        return Ok(len);
    }
    let i: usize = token.parse().map_err(|_| err(format!("invalid array index {token:?}")))?;
    if (allow_end && i > len) || (!allow_end && i >= len) {
        return Err(err(format!("array index {i} out of bounds")));
    }
    Ok(i)
}

fn get<'a>(doc: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    tokens.iter().try_fold(doc, |at, t| match at {
        Value::Object(m) => m.get(t),
        Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn parent_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Result<&'a mut Value, PatchError> {
    let mut at = doc;
    for t in tokens {
        at = match at {
            Value::Object(m) => m.get_mut(t).ok_or_else(|| err(format!("path element {t:?} does not exist")))?,
            Value::Array(a) => {
                let i = index(t, a.len(), false)?;
                &mut a[i]
            }
            _ => return Err(err(format!("path element {t:?} is not in an object or array"))),
        };
    }
    Ok(at)
}

fn add(doc: &mut Value, tokens: &[String], value: Value) -> Result<(), PatchError> {
    let Some((last, parents)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            let i = index(last, a.len(), true)?;
            a.insert(i, value);
        }
        _ => return Err(err("the parent of the path is not an object or array")),
    }
    Ok(())
}

fn remove(doc: &mut Value, tokens: &[String]) -> Result<Value, PatchError> {
    let Some((last, parents)) = tokens.split_last() else {
        return Err(err("cannot remove the whole document"));
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => m.remove(last).ok_or_else(|| err(format!("unable to remove nonexistent key: {last}"))),
        Value::Array(a) => {
            let i = index(last, a.len(), false)?;
            Ok(a.remove(i))
        }
        _ => Err(err("the parent of the path is not an object or array")),
    }
}

/// Applies an RFC 6902 patch (a JSON array of operations) to `doc`, all or nothing.
pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Value::Array(ops) = patch else {
        return Err(err("a JSON Patch must be an array of operations"));
    };
    let mut work = doc.clone();
    let mut copied = 0usize;
    for op in ops {
        let name = op.get("op").and_then(Value::as_str).ok_or_else(|| err("an operation has no \"op\""))?;
        let path = pointer(
            op.get("path").and_then(Value::as_str).ok_or_else(|| err(format!("{name} operation has no \"path\"")))?,
        )?;
        let value = || op.get("value").cloned().ok_or_else(|| err(format!("{name} operation has no \"value\"")));
        let from = || -> Result<Vec<String>, PatchError> {
            pointer(
                op.get("from")
                    .and_then(Value::as_str)
                    .ok_or_else(|| err(format!("{name} operation has no \"from\"")))?,
            )
        };
        match name {
            "add" => add(&mut work, &path, value()?)?,
            "remove" => {
                remove(&mut work, &path)?;
            }
            "replace" => {
                let v = value()?;
                if path.is_empty() {
                    work = v;
                } else {
                    remove(&mut work, &path).map_err(|_| {
                        err(format!("replace operation does not apply: doc is missing path: {}", op["path"]))
                    })?;
                    add(&mut work, &path, v)?;
                }
            }
            "move" => {
                let from = from()?;
                if path.starts_with(&from) && path.len() > from.len() {
                    return Err(err("cannot move a value into one of its children"));
                }
                let v = remove(&mut work, &from)?;
                add(&mut work, &path, v)?;
            }
            "copy" => {
                let source =
                    get(&work, &from()?).ok_or_else(|| err("copy operation does not apply: from path is missing"))?;
                copied = copied.saturating_add(encoded_size(source, MAX_COPY_BYTES));
                if copied > MAX_COPY_BYTES {
                    return Err(err(format!(
                        "Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the \
                         limit {MAX_COPY_BYTES}"
                    )));
                }
                let v = source.clone();
                add(&mut work, &path, v)?;
            }
            "test" => {
                let expected = op.get("value").cloned().unwrap_or(Value::Null);
                match get(&work, &path) {
                    Some(actual) if *actual == expected => {}
                    // Go's json-patch: testing a missing path against null succeeds.
                    None if expected.is_null() => {}
                    _ => return Err(err(format!("testing value {} failed", op["path"]))),
                }
            }
            other => return Err(err(format!("unexpected operation {other:?}"))),
        }
    }
    *doc = work;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn copies_that_double_the_document_stop_at_the_limit() {
        let mut doc = json!({"a": "x".repeat(1000)});
        // Each operation copies the whole document into itself: 2^n times the first size.
        let bomb: Vec<Value> = (0..30).map(|i| json!({"op": "copy", "from": "", "path": format!("/k{i}")})).collect();
        let error = json_patch(&mut doc, &Value::Array(bomb)).unwrap_err().to_string();
        assert!(error.starts_with("Unable to complete the copy, the accumulated size increase of copy is "), "{error}");
        assert!(error.ends_with(&format!("exceeding the limit {MAX_COPY_BYTES}")), "{error}");
        assert_eq!(doc, json!({"a": "x".repeat(1000)}), "nothing was applied");
        // Copies within the limit apply.
        let fine: Vec<Value> = (0..3).map(|i| json!({"op": "copy", "from": "/a", "path": format!("/b{i}")})).collect();
        json_patch(&mut doc, &Value::Array(fine)).unwrap();
        assert_eq!(doc["b2"], doc["a"]);
        assert_eq!(encoded_size(&json!({"k": [1, "ab", null]}), usize::MAX), r#"{"k":[1,"ab",null]}"#.len());
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        // The examples of RFC 7386, appendix A.
        for (original, patch, result) in [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "b"}), json!({"b": "c"}), json!({"a": "b", "b": "c"})),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (json!({"a": {"b": "c"}}), json!({"a": {"b": "d", "c": null}}), json!({"a": {"b": "d"}})),
            (json!({"a": [{"b": "c"}]}), json!({"a": [1]}), json!({"a": [1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (json!({"e": null}), json!({"a": 1}), json!({"e": null, "a": 1})),
            (json!([1, 2]), json!({"a": "b", "c": null}), json!({"a": "b"})),
        ] {
            let mut doc = original.clone();
            merge_patch(&mut doc, &patch);
            assert_eq!(doc, result, "{original} + {patch}");
        }
    }

    #[test]
    fn json_patch_operations() {
        let mut doc = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x"]}, "spec": {"list": [1, 2, 3]}});
        json_patch(
            &mut doc,
            &json!([
                {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
                {"op": "replace", "path": "/spec/list/0", "value": 10},
                {"op": "remove", "path": "/spec/list/1"},
                {"op": "add", "path": "/spec/list/-", "value": 4},
                {"op": "copy", "from": "/metadata/labels/a", "path": "/spec/copied"},
                {"op": "move", "from": "/spec/copied", "path": "/spec/moved"},
                {"op": "test", "path": "/metadata/finalizers/0", "value": "x"},
            ]),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["labels"]["b/c"], "2");
        assert_eq!(doc["spec"]["list"], json!([10, 3, 4]));
        assert_eq!(doc["spec"]["moved"], "1");
        assert!(doc["spec"].get("copied").is_none());
    }

    #[test]
    fn a_failed_operation_leaves_the_document_unchanged() {
        let mut doc = json!({"a": 1});
        let error = json_patch(
            &mut doc,
            &json!([{"op": "add", "path": "/b", "value": 2}, {"op": "test", "path": "/a", "value": 2}]),
        );
        assert!(error.is_err());
        assert_eq!(doc, json!({"a": 1}));
        assert!(json_patch(&mut doc, &json!([{"op": "remove", "path": "/missing"}])).is_err());
        assert!(json_patch(&mut doc, &json!({"op": "add"})).is_err());
    }

    #[test]
    fn testing_a_missing_path_against_null_succeeds_as_in_go() {
        let mut doc = json!({"metadata": {}});
        json_patch(&mut doc, &json!([{"op": "test", "path": "/metadata/finalizers", "value": null}, {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}])).unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["f"]));
    }
}
