//! The `Priority` admission plugin (kube-apiserver's `plugin/pkg/admission/priority`, 1.33) and the PriorityClasses
//! every cluster has. A new pod's `priorityClassName` names a PriorityClass that must exist (403 `no PriorityClass
//! with name <name> was found`); without one it takes the class marked `globalDefault`, if any. Its `priority` and
//! `preemptionPolicy` are the class's (0 and `PreemptLowerPriority` without a class); a pod that gives a `priority`
//! of its own that is not the class's is refused, as upstream does. The classes themselves are a kind
//! (`kinds::priority_class`).

use serde_json::{Value, json};

use crate::chain::{Mutating, Request};
use crate::error::{ApiError, Result};
use crate::strategy::Cluster;

/// The plugin.
pub struct Priority;

async fn classes(cluster: Cluster<'_>) -> Result<Vec<Value>> {
    let listed = cluster
        .store
        .list(b"/registry/scheduling.k8s.io/priorityclasses/", Default::default())
        .await
        .map_err(ApiError::from_storage)?;
    listed
        .items
        .iter()
        .map(|item| serde_json::from_slice(&item.value).map_err(|e| ApiError::internal(e.to_string())))
        .collect()
}

/// The class a pod gets when it names none: the `globalDefault` one (the lowest value, should there be several).
fn global_default(classes: &[Value]) -> Option<&Value> {
    classes.iter().filter(|c| c["globalDefault"] == true).min_by_key(|c| c["value"].as_i64().unwrap_or(0))
}

impl Mutating for Priority {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.creates("", "pods")
    }

    async fn admit(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &mut Value) -> Result<()> {
        if !object["spec"].is_object() {
            return Ok(());
        }
        let classes = classes(cluster).await?;
        let name = object["spec"]["priorityClassName"].as_str().filter(|n| !n.is_empty()).map(str::to_string);
        let class = match &name {
            Some(name) => {
                let found = classes.iter().find(|c| c["metadata"]["name"] == name.as_str());
                let Some(found) = found else {
                    return Err(ApiError::forbidden(
                        request.info,
                        request.object_name(object),
                        format!("no PriorityClass with name {name} was found"),
                    ));
                };
                Some(found.clone())
            }
            None => global_default(&classes).cloned(),
        };
        let value = class.as_ref().and_then(|c| c["value"].as_i64()).unwrap_or(0);
        let policy = class
            .as_ref()
            .and_then(|c| c["preemptionPolicy"].as_str().map(str::to_string))
            .unwrap_or_else(|| "PreemptLowerPriority".into());
        if let Some(given) = object["spec"]["priority"].as_i64()
            && given != value
        {
            return Err(ApiError::forbidden(
                request.info,
                request.object_name(object),
                format!(
                    "the integer value of priority ({given}) must not be provided in pod spec; priority admission \
                     controller computed {value} from the given PriorityClass name"
                ),
            ));
        }
        let spec = &mut object["spec"];
        if let Some(class) = &class
            && name.is_none()
        {
            spec["priorityClassName"] = class["metadata"]["name"].clone();
        }
        spec["priority"] = json!(value);
        if spec["preemptionPolicy"].as_str().is_none() {
            spec["preemptionPolicy"] = json!(policy);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn only_a_pods_creation_is_handled() {
        expect_handled(|r| Priority.handles(r), "alice", "pods: create; apps/deployments: -");
    }

    #[test]
    fn the_global_default_is_the_lowest_marked_class() {
        let classes = [
            json!({"metadata": {"name": "high"}, "value": 1000, "globalDefault": true}),
            json!({"metadata": {"name": "low"}, "value": 10, "globalDefault": true}),
            json!({"metadata": {"name": "none"}, "value": 1}),
        ];
        assert_eq!(global_default(&classes).unwrap()["metadata"]["name"], "low");
        assert!(global_default(&classes[2..]).is_none());
    }
}
