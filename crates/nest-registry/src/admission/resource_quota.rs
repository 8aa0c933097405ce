//! The `ResourceQuota` admission plugin for pods (kube-apiserver's `plugin/pkg/admission/resourcequota`, 1.33): a
//! new pod is refused when, with it, a namespace's quota of `pods` (`count/pods`), `requests.cpu`/`cpu`,
//! `requests.memory`/`memory`, `limits.cpu` or `limits.memory` would be exceeded, with upstream's `exceeded quota`
//! message; a quota of a compute resource refuses a pod whose containers do not say how much they take of it.
//!
//! Usage is what the namespace's pods that have not finished take, counted at admission, plus the pods this server
//! admitted in the last minute that storage does not show yet. Admitting writes the quota's `status` (`hard`,
//! `used`) with a compare-and-swap of the quota, so two admissions against one quota are serialized as upstream's
//! are: the second one, conflicting, counts again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::chain::{Request, Validating};
use crate::error::{ApiError, Result};
use crate::strategy::Cluster;

/// How long a pod admitted here counts before storage is expected to show it.
const PENDING_FOR: Duration = Duration::from_secs(60);

/// The plugin, with the pods it admitted recently (namespace → name → when).
#[derive(Default)]
pub struct ResourceQuota {
    pending: Mutex<HashMap<String, HashMap<String, Instant>>>,
}

/// What a pod takes of each quota resource nest tracks: `None` for a compute resource a container does not say.
fn usage(pod: &Value) -> BTreeMap<&'static str, Option<f64>> {
    let mut out = BTreeMap::from([("pods", Some(1.0)), ("count/pods", Some(1.0))]);
    let containers: Vec<&Value> = pod["spec"]["containers"].as_array().into_iter().flatten().collect();
    let inits: Vec<&Value> = pod["spec"]["initContainers"].as_array().into_iter().flatten().collect();
    for (name, field, resource) in [
        ("requests.cpu", "requests", "cpu"),
        ("cpu", "requests", "cpu"),
        ("requests.memory", "requests", "memory"),
        ("memory", "requests", "memory"),
        ("limits.cpu", "limits", "cpu"),
        ("limits.memory", "limits", "memory"),
    ] {
        let amount = |c: &&Value| -> Option<f64> {
            let resources = &c["resources"];
            // A limit alone is the request too.
            let value = resources[field][resource].as_str().or_else(|| resources["limits"][resource].as_str())?;
            Some(nest_core::quantity::parse(value))
        };
        let each: Option<Vec<f64>> = containers.iter().map(amount).collect();
        // The pod takes its containers' sum, or its largest init container if that is more (as upstream counts).
        let init = inits.iter().filter_map(amount).fold(0.0, f64::max);
        out.insert(name, each.map(|each| each.iter().sum::<f64>().max(init)));
    }
    out
}

fn listing(map: &BTreeMap<String, f64>) -> String {
    map.iter()
        .map(|(resource, value)| format!("{resource}={}", nest_core::quantity::show(resource, *value)))
        .collect::<Vec<_>>()
        .join(",")
}

fn finished(pod: &Value) -> bool {
    matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

impl ResourceQuota {
    async fn check(&self, cluster: Cluster<'_>, request: &Request<'_>, pod: &Value) -> Result<()> {
        let namespace = request.namespace;
        // Named by now (a generated name is given before validating admission).
        let name = pod["metadata"]["name"].as_str().unwrap_or(request.name);
        let wanted = usage(pod);
        for _ in 0..10 {
            let prefix = format!("/registry/core/resourcequotas/{namespace}/");
            let quotas =
                cluster.store.list(prefix.as_bytes(), Default::default()).await.map_err(ApiError::from_storage)?;
            if quotas.items.is_empty() {
                return Ok(());
            }
            let pods_prefix = format!("/registry/core/pods/{namespace}/");
            let pods =
                cluster.store.list(pods_prefix.as_bytes(), Default::default()).await.map_err(ApiError::from_storage)?;
            let mut stored: HashMap<String, Value> = HashMap::new();
            for item in &pods.items {
                let other: Value =
                    serde_json::from_slice(&item.value).map_err(|e| ApiError::internal(e.to_string()))?;
                let name = other["metadata"]["name"].as_str().unwrap_or_default().to_string();
                if !finished(&other) {
                    stored.insert(name, other);
                }
            }
            // This pod counts as pending before its quota is written, so that an admission that runs after that
            // write (conflicting with it, and counting again) finds it here even if it is not stored yet.
            let recent: Vec<String> = {
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                let here = pending.entry(namespace.to_string()).or_default();
                here.retain(|other, when| when.elapsed() < PENDING_FOR && !stored.contains_key(other));
                if !request.dry_run {
                    here.insert(name.to_string(), Instant::now());
                }
                here.keys().filter(|other| *other != name).cloned().collect()
            };
            let forget = || {
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(here) = pending.get_mut(namespace) {
                    here.remove(name);
                }
            };
            let mut conflict = false;
            for item in &quotas.items {
                let mut quota: Value =
                    serde_json::from_slice(&item.value).map_err(|e| ApiError::internal(e.to_string()))?;
                let quota_name = quota["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let hard: BTreeMap<String, f64> = quota["spec"]["hard"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(resource, _)| wanted.contains_key(resource.as_str()))
                    .map(|(resource, amount)| {
                        (resource.clone(), nest_core::quantity::parse(amount.as_str().unwrap_or("0")))
                    })
                    .collect();
                if hard.is_empty() {
                    continue;
                }
                let unsaid: Vec<&str> =
                    hard.keys().filter(|r| wanted[r.as_str()].is_none()).map(String::as_str).collect();
                if !unsaid.is_empty() {
                    forget();
                    return Err(ApiError::forbidden(
                        request.info,
                        name,
                        format!("failed quota: {quota_name}: must specify {}", unsaid.join(",")),
                    ));
                }
                // What the namespace's pods take now: those stored, and those admitted here not stored yet (whose
                // usage the last admission counted into the quota's status).
                let mut used: BTreeMap<String, f64> = hard.keys().map(|r| (r.clone(), 0.0)).collect();
                for other in stored.values().filter(|p| p["metadata"]["name"] != name) {
                    let theirs = usage(other);
                    for (resource, total) in used.iter_mut() {
                        *total += theirs[resource.as_str()].unwrap_or(0.0);
                    }
                }
                if !recent.is_empty() {
                    let recorded = &quota["status"]["used"];
                    for (resource, total) in used.iter_mut() {
                        let before =
                            recorded[resource.as_str()].as_str().map(nest_core::quantity::parse).unwrap_or(0.0);
                        *total = total.max(before);
                    }
                }
                let requested: BTreeMap<String, f64> =
                    hard.keys().map(|r| (r.clone(), wanted[r.as_str()].unwrap_or(0.0))).collect();
                let exceeded: Vec<&String> = hard
                    .iter()
                    .filter(|(r, limit)| used[*r] + requested[*r] > **limit + 1e-9)
                    .map(|(r, _)| r)
                    .collect();
                if !exceeded.is_empty() {
                    forget();
                    let mask = |map: &BTreeMap<String, f64>| -> BTreeMap<String, f64> {
                        map.iter().filter(|(r, _)| exceeded.contains(r)).map(|(r, v)| (r.clone(), *v)).collect()
                    };
                    return Err(ApiError::forbidden(
                        request.info,
                        name,
                        format!(
                            "exceeded quota: {quota_name}, requested: {}, used: {}, limited: {}",
                            listing(&mask(&requested)),
                            listing(&mask(&used)),
                            listing(&mask(&hard))
                        ),
                    ));
                }
                if request.dry_run {
                    continue;
                }
                // The quota's status says what it holds with this pod; the swap orders admissions of one quota.
                let with: serde_json::Map<String, Value> = hard
                    .keys()
                    .map(|r| (r.clone(), json!(nest_core::quantity::show(r, used[r] + requested[r]))))
                    .collect();
                let all_hard: serde_json::Map<String, Value> =
                    quota["spec"]["hard"].as_object().cloned().unwrap_or_default();
                quota["status"] = json!({"hard": all_hard, "used": with});
                let bytes = serde_json::to_vec(&quota).map_err(|e| ApiError::internal(e.to_string()))?;
                match cluster.store.update(&item.key, Bytes::from(bytes), item.mod_revision).await {
                    Ok(_) => {}
                    Err(nest_storage::Error::Conflict { .. }) => {
                        conflict = true;
                        break;
                    }
                    Err(error) => {
                        forget();
                        return Err(ApiError::from_storage(error));
                    }
                }
            }
            if !conflict {
                return Ok(());
            }
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(here) = pending.get_mut(namespace) {
            here.remove(name);
        }
        Err(ApiError::conflict(request.info, name)
            .with_message("the quota changed too often while this pod was admitted; try again"))
    }
}

impl Validating for ResourceQuota {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.creates("", "pods")
    }

    async fn validate(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &Value) -> Result<()> {
        self.check(cluster, request, object).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn only_a_pods_creation_is_handled() {
        expect_handled(|r| ResourceQuota::default().handles(r), "alice", "pods: create; services: -");
    }
}
