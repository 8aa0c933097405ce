//! The `LimitRanger` admission plugin (kube-apiserver's `plugin/pkg/admission/limitranger`, 1.33), for the
//! `Container` limits of a namespace's LimitRanges: a new pod's containers get the `defaultRequest` and `default`
//! amounts they do not set (recorded in the `kubernetes.io/limit-ranger` annotation, in upstream's words), and a pod
//! whose containers ask for less than a `min` or more than a `max` is refused with upstream's message.

use serde_json::{Value, json};

use crate::chain::{Mutating, Operation, Request, Validating};
use crate::error::{ApiError, Result};
use crate::strategy::Cluster;

/// The annotation LimitRanger records what it set in.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// The plugin (both of its halves).
pub struct LimitRanger;

/// The `Container` items of the namespace's LimitRanges, with upstream's defaulting of an item: a `default` taken
/// from `max` when unset, a `defaultRequest` from `default`.
async fn container_limits(cluster: Cluster<'_>, namespace: &str) -> Result<Vec<Value>> {
    let prefix = format!("/registry/core/limitranges/{namespace}/");
    let listed = cluster.store.list(prefix.as_bytes(), Default::default()).await.map_err(ApiError::from_storage)?;
    let mut items = Vec::new();
    for item in listed.items {
        let range: Value = serde_json::from_slice(&item.value).map_err(|e| ApiError::internal(e.to_string()))?;
        for limit in range["spec"]["limits"].as_array().into_iter().flatten() {
            if limit["type"] != "Container" {
                continue;
            }
            let mut limit = limit.clone();
            for (from, to) in [("max", "default"), ("default", "defaultRequest")] {
                let source = limit[from].as_object().cloned().unwrap_or_default();
                let target = limit.as_object_mut().expect("an item").entry(to).or_insert_with(|| json!({}));
                for (resource, amount) in source {
                    target.as_object_mut().map(|t| t.entry(resource).or_insert(amount));
                }
            }
            items.push(limit);
        }
    }
    Ok(items)
}

/// Every container of a pod spec with its kind's word in upstream's messages, `containers` first as upstream walks
/// them.
fn containers(spec: &mut Value) -> Vec<(&'static str, &mut Value)> {
    let mut out = Vec::new();
    let Some(spec) = spec.as_object_mut() else { return out };
    for (list, items) in spec.iter_mut() {
        let word = match list.as_str() {
            "containers" => "container",
            "initContainers" => "init container",
            _ => continue,
        };
        out.extend(items.as_array_mut().into_iter().flatten().map(|c| (word, c)));
    }
    out.sort_by_key(|(word, _)| *word != "container");
    out
}

impl Mutating for LimitRanger {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.creates("", "pods")
    }

    async fn admit(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &mut Value) -> Result<()> {
        let limits = container_limits(cluster, request.namespace).await?;
        let Some(item) = limits.first() else { return Ok(()) };
        let mut said = Vec::new();
        for (word, container) in containers(&mut object["spec"]) {
            let name = container["name"].as_str().unwrap_or_default().to_string();
            let resources =
                container.as_object_mut().expect("a container").entry("resources").or_insert_with(|| json!({}));
            let limits_set = {
                let mut names = Vec::new();
                let existing = resources.get("limits").and_then(Value::as_object).cloned().unwrap_or_default();
                let mut merged = existing.clone();
                for (resource, amount) in item["default"].as_object().into_iter().flatten() {
                    if !existing.contains_key(resource) {
                        merged.insert(resource.clone(), amount.clone());
                        names.push(resource.clone());
                    }
                }
                if !names.is_empty() {
                    resources["limits"] = Value::Object(merged);
                }
                names.sort();
                names
            };
            // A limit given without a request is the request too (the API's own defaulting, which upstream runs
            // before admission): only a resource with neither gets the default request.
            let given_limits = resources.get("limits").and_then(Value::as_object).cloned().unwrap_or_default();
            let original_limit =
                |resource: &str| given_limits.contains_key(resource) && !limits_set.iter().any(|l| l == resource);
            let requests_set = {
                let mut names = Vec::new();
                let existing = resources.get("requests").and_then(Value::as_object).cloned().unwrap_or_default();
                let mut merged = existing.clone();
                for (resource, amount) in item["defaultRequest"].as_object().into_iter().flatten() {
                    if !existing.contains_key(resource) && !original_limit(resource) {
                        merged.insert(resource.clone(), amount.clone());
                        names.push(resource.clone());
                    }
                }
                if !names.is_empty() {
                    resources["requests"] = Value::Object(merged);
                }
                names.sort();
                names
            };
            if !requests_set.is_empty() {
                said.push(format!("{} request for {word} {name}", requests_set.join(", ")));
            }
            if !limits_set.is_empty() {
                said.push(format!("{} limit for {word} {name}", limits_set.join(", ")));
            }
        }
        if !said.is_empty() {
            let metadata = object.as_object_mut().expect("an object").entry("metadata").or_insert_with(|| json!({}));
            let annotations =
                metadata.as_object_mut().expect("metadata").entry("annotations").or_insert_with(|| json!({}));
            annotations[ANNOTATION] = json!(format!("LimitRanger plugin set: {}", said.join("; ")));
        }
        Ok(())
    }
}

impl Validating for LimitRanger {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.is_main("", "pods") && request.operation != Operation::Delete
    }

    async fn validate(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &Value) -> Result<()> {
        let limits = container_limits(cluster, request.namespace).await?;
        let mut refusals = Vec::new();
        let mut spec = object["spec"].clone();
        for item in &limits {
            for (_, container) in containers(&mut spec) {
                let resources = &container["resources"];
                // The request a container has is its limit when it gives only that.
                let amount = |field: &str, resource: &str| -> Option<String> {
                    let given = resources[field][resource]
                        .as_str()
                        .map(str::to_string)
                        .or_else(|| resources[field][resource].as_f64().map(|n| n.to_string()));
                    given.or_else(|| {
                        (field == "requests")
                            .then(|| resources["limits"][resource].as_str().map(str::to_string))
                            .flatten()
                    })
                };
                for (resource, min) in item["min"].as_object().into_iter().flatten() {
                    let min = text(min);
                    match amount("requests", resource) {
                        None => refusals
                            .push(format!("minimum {resource} usage per Container is {min}.  No request is specified")),
                        Some(request) if parse(&request) < parse(&min) => refusals
                            .push(format!("minimum {resource} usage per Container is {min}, but request is {request}")),
                        Some(_) => {}
                    }
                }
                for (resource, max) in item["max"].as_object().into_iter().flatten() {
                    let max = text(max);
                    match amount("limits", resource) {
                        None => refusals
                            .push(format!("maximum {resource} usage per Container is {max}.  No limit is specified")),
                        Some(limit) if parse(&limit) > parse(&max) => refusals
                            .push(format!("maximum {resource} usage per Container is {max}, but limit is {limit}")),
                        Some(_) => {}
                    }
                }
            }
        }
        match refusals.len() {
            0 => Ok(()),
            1 => Err(ApiError::forbidden(request.info, request.name, refusals.remove(0))),
            _ => Err(ApiError::forbidden(request.info, request.name, format!("[{}]", refusals.join(", ")))),
        }
    }
}

fn text(quantity: &Value) -> String {
    quantity.as_str().map(str::to_string).unwrap_or_else(|| quantity.to_string())
}

fn parse(quantity: &str) -> f64 {
    nest_core::quantity::parse(quantity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn pods_are_defaulted_when_created_and_checked_when_written() {
        expect_handled(|r| Mutating::handles(&LimitRanger, r), "alice", "pods: create; services: -");
        expect_handled(|r| Validating::handles(&LimitRanger, r), "alice", "pods: create, update; services: -");
    }
}
