//! The `/scale` subresource: an `autoscaling/v1` Scale read from and written into the object, at the paths its
//! resource declares ([`ScalePaths`](crate::catalog::ScalePaths): fixed for the built-in workloads, from the CRD for
//! custom resources).

use serde_json::{Value, json};

use crate::catalog::{ResourceInfo, ScaleSelector};
use crate::error::{ApiError, Cause, Result};
use crate::meta;

/// The Scale of `obj`. `info` must have a scale subresource.
pub fn scale_of(info: &ResourceInfo, obj: &Value) -> Value {
    let paths = info.scale.as_ref().expect("a resource with a scale subresource");
    let selector = match &paths.selector {
        ScaleSelector::SpecSelector => format_selector(&obj["spec"]["selector"]),
        ScaleSelector::SpecSet => format_selector(&json!({"matchLabels": obj["spec"]["selector"]})),
        ScaleSelector::Path(path) => at(obj, path).and_then(Value::as_str).unwrap_or_default().to_string(),
        ScaleSelector::None => String::new(),
    };
    // A built-in workload without replicas has the default of one; a custom resource has none.
    let default_replicas = if info.custom { 0 } else { 1 };
    let mut status = json!({"replicas": at(obj, &paths.status_replicas).and_then(Value::as_i64).unwrap_or(0)});
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"]["namespace"],
            "uid": obj["metadata"]["uid"],
            "resourceVersion": obj["metadata"]["resourceVersion"],
            "creationTimestamp": obj["metadata"]["creationTimestamp"],
        },
        "spec": {"replicas": at(obj, &paths.spec_replicas).and_then(Value::as_i64).unwrap_or(default_replicas)},
        "status": status,
    })
}

/// `current` with the replicas `scale` asks for, checked as kube-apiserver checks a Scale update.
pub fn scaled(info: &ResourceInfo, current: &Value, scale: &Value) -> Result<Value> {
    let paths = info.scale.as_ref().expect("a resource with a scale subresource");
    let name = meta::name(current);
    let wanted_rv = meta::meta_str(scale, "resourceVersion");
    if !wanted_rv.is_empty() && wanted_rv != meta::meta_str(current, "resourceVersion") {
        return Err(ApiError::conflict(info, name));
    }
    let replicas =
        scale.get("spec").and_then(|s| s.get("replicas")).and_then(Value::as_i64).ok_or_else(|| {
            ApiError::invalid_kind("autoscaling", "Scale", name, vec![Cause::required("spec.replicas")])
        })?;
    if !(0..=i64::from(i32::MAX)).contains(&replicas) {
        let message = format!("Invalid value: {replicas}: must be greater than or equal to 0");
        return Err(ApiError::invalid_kind(
            "autoscaling",
            "Scale",
            name,
            vec![Cause::invalid("spec.replicas", message)],
        ));
    }
    let mut obj = current.clone();
    meta::metadata_mut(&mut obj).remove("resourceVersion");
    set(&mut obj, &paths.spec_replicas, json!(replicas));
    Ok(obj)
}

fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('.').filter(|s| !s.is_empty())
}

fn at<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    segments(path).try_fold(obj, |value, key| value.get(key))
}

fn set(obj: &mut Value, path: &str, value: Value) {
    let keys: Vec<&str> = segments(path).collect();
    let Some((last, parents)) = keys.split_last() else { return };
    let mut target = obj;
    for key in parents {
        if !target.get(*key).is_some_and(Value::is_object) {
            target[*key] = json!({});
        }
        target = &mut target[*key];
    }
    target[*last] = value;
}

/// A label selector as `metav1.FormatLabelSelector` writes it: `a=b,c in (d,e),!f`.
fn format_selector(selector: &Value) -> String {
    let mut parts: Vec<String> = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    for expression in selector["matchExpressions"].as_array().into_iter().flatten() {
        let key = expression["key"].as_str().unwrap_or_default();
        let values: Vec<&str> =
            expression["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        parts.push(match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    #[test]
    fn selectors_format_as_kubernetes_prints_them() {
        let selector = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]}, {"key": "x", "operator": "DoesNotExist"}]});
        assert_eq!(format_selector(&selector), "app=web,tier in (a,b),!x");
    }

    #[test]
    fn a_deployment_scales_through_its_spec() {
        let deployments = Catalog::builtin().find("apps", "v1", "deployments").unwrap();
        let obj = json!({"metadata": {"name": "web", "resourceVersion": "5"}, "spec": {"replicas": 2,
                         "selector": {"matchLabels": {"app": "web"}}}, "status": {"replicas": 1}});
        let scale = scale_of(&deployments, &obj);
        assert_eq!(
            (scale["spec"]["replicas"].as_i64(), scale["status"]["selector"].as_str()),
            (Some(2), Some("app=web"))
        );
        let updated = scaled(&deployments, &obj, &json!({"spec": {"replicas": 5}})).unwrap();
        assert_eq!(updated["spec"]["replicas"], 5);
        let stale = json!({"metadata": {"resourceVersion": "4"}, "spec": {"replicas": 5}});
        assert_eq!(scaled(&deployments, &obj, &stale).unwrap_err().code, 409);
        assert_eq!(scaled(&deployments, &obj, &json!({"spec": {"replicas": -1}})).unwrap_err().code, 422);
    }
}
