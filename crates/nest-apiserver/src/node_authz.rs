//! The Node authorizer (`--authorization-mode Node,RBAC`), as kube-apiserver's
//! (`plugin/pkg/auth/authorizer/node`, 1.33): a node's credential — user `system:node:<name>` in group
//! `system:nodes` — may read a Secret, ConfigMap, PersistentVolumeClaim or PersistentVolume only when a pod bound to
//! that node uses it, and ask for a token only for the ServiceAccount such a pod runs as; everything else a kubelet
//! does it may do by the node rules (its Node, Leases, pods and their status, Services, Events, reviews). Writes are
//! narrowed further, to the node's own objects, by NodeRestriction admission
//! (`nest_registry::admission::node_restriction`). What this does not allow, RBAC may still allow.

use nest_registry::{ListOptions, Registry, Result};
use serde_json::Value;

use crate::auth::User;
use crate::authz::{Action, Rule};

/// The node `user` is, when it is one.
pub fn node_name(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix("system:node:")?;
    (!name.is_empty() && user.groups.iter().any(|g| g == "system:nodes")).then_some(name)
}

/// What a kubelet may do whatever its pods use: kube-apiserver's `NodeRules` (the `system:node` role), less what
/// the graph decides.
fn node_rules() -> Vec<Rule> {
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| Rule {
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        api_groups: groups.iter().map(|g| g.to_string()).collect(),
        resources: resources.iter().map(|r| r.to_string()).collect(),
        ..Default::default()
    };
    let read = ["get", "list", "watch"];
    vec![
        rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
        rule(&["authorization.k8s.io"], &["subjectaccessreviews", "localsubjectaccessreviews"], &["create"]),
        rule(&[""], &["services"], &read),
        rule(&[""], &["nodes"], &["create", "delete", "get", "list", "watch", "patch", "update"]),
        rule(&[""], &["nodes/status"], &["patch", "update"]),
        rule(&["", "events.k8s.io"], &["events"], &["create", "patch", "update"]),
        rule(&[""], &["pods"], &["get", "list", "watch", "create", "delete"]),
        rule(&[""], &["pods/status"], &["patch", "update"]),
        rule(&[""], &["pods/eviction"], &["create"]),
        rule(&[""], &["persistentvolumeclaims/status"], &["get", "update", "patch"]),
        rule(&["coordination.k8s.io"], &["leases"], &["get", "create", "update", "patch", "delete"]),
        rule(&["node.k8s.io"], &["runtimeclasses"], &read),
        rule(&["storage.k8s.io"], &["csidrivers", "csinodes", "volumeattachments"], &read),
        rule(&["certificates.k8s.io"], &["certificatesigningrequests"], &["create", "get", "list", "watch"]),
    ]
}

/// The kinds whose objects a node reaches only through its pods.
const THROUGH_PODS: [&str; 5] =
    ["secrets", "configmaps", "persistentvolumeclaims", "persistentvolumes", "serviceaccounts"];

/// Whether the Node authorizer allows node `node` to take `action` (it has no opinion otherwise).
pub async fn allows(registry: &Registry, node: &str, action: &Action<'_>) -> Result<bool> {
    let Action::Resource { verb, group, resource, subresource, namespace, name } = *action else {
        return Ok(false);
    };
    if group.is_empty() && THROUGH_PODS.contains(&resource) {
        return related(registry, node, verb, resource, subresource, namespace, name).await;
    }
    let resource = subresource.map_or_else(|| resource.to_string(), |sub| format!("{resource}/{sub}"));
    Ok(node_rules().iter().any(|rule| rule.allows(verb, group, &resource, name)))
}

/// Why a node was refused a Secret, ConfigMap, claim, volume or ServiceAccount token, in kube-apiserver's words.
pub fn refusal(node: &str, action: &Action<'_>) -> Option<String> {
    match *action {
        Action::Resource { group: "", resource, .. } if THROUGH_PODS.contains(&resource) => {
            Some(format!("no relationship found between node '{node}' and this object"))
        }
        _ => None,
    }
}

/// Whether a pod bound to `node` uses the object `action` names (reading it; or, for a ServiceAccount, asking for
/// its token).
async fn related(
    registry: &Registry,
    node: &str,
    verb: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<bool> {
    let wanted = match (resource, subresource) {
        ("serviceaccounts", Some("token")) => verb == "create",
        (_, None) => matches!(verb, "get" | "list" | "watch"),
        _ => false,
    };
    let Some(name) = name.filter(|n| !n.is_empty()) else { return Ok(false) };
    if !wanted {
        return Ok(false);
    }
    let pods_resource = registry.resource("", "v1", "pods").expect("pods are built in");
    let options = ListOptions { field_selector: Some(format!("spec.nodeName={node}")), ..ListOptions::default() };
    if resource == "persistentvolumes" {
        // A volume bound to a claim one of the node's pods uses.
        let claims_resource = registry.resource("", "v1", "persistentvolumeclaims").expect("claims are built in");
        let pods = registry.list(&pods_resource, None, &options).await?;
        for pod in pods["items"].as_array().into_iter().flatten() {
            let pod_namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
            for claim in uses(pod, "persistentvolumeclaims") {
                if let Ok(found) = registry.get(&claims_resource, pod_namespace, &claim).await
                    && found["spec"]["volumeName"] == name
                {
                    return Ok(true);
                }
            }
        }
        return Ok(false);
    }
    let Some(namespace) = namespace.filter(|n| !n.is_empty()) else { return Ok(false) };
    let pods = registry.list(&pods_resource, Some(namespace), &options).await?;
    Ok(pods["items"].as_array().into_iter().flatten().any(|pod| uses(pod, resource).iter().any(|used| used == name)))
}

/// The names of the objects of `resource` pod `pod` uses: its volumes (projected ones too), environment and
/// image pull secrets, its claims, its ServiceAccount.
fn uses(pod: &Value, resource: &str) -> Vec<String> {
    let spec = &pod["spec"];
    let mut names = Vec::new();
    let mut add = |value: &Value| {
        if let Some(name) = value.as_str().filter(|n| !n.is_empty()) {
            names.push(name.to_string());
        }
    };
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| spec[*list].as_array().cloned().unwrap_or_default())
        .collect::<Vec<Value>>();
    let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
    match resource {
        "secrets" => {
            for secret in spec["imagePullSecrets"].as_array().into_iter().flatten() {
                add(&secret["name"]);
            }
            for volume in &volumes {
                add(&volume["secret"]["secretName"]);
                for source in volume["projected"]["sources"].as_array().into_iter().flatten() {
                    add(&source["secret"]["name"]);
                }
            }
            for container in &containers {
                for from in container["envFrom"].as_array().into_iter().flatten() {
                    add(&from["secretRef"]["name"]);
                }
                for env in container["env"].as_array().into_iter().flatten() {
                    add(&env["valueFrom"]["secretKeyRef"]["name"]);
                }
            }
        }
        "configmaps" => {
            for volume in &volumes {
                add(&volume["configMap"]["name"]);
                for source in volume["projected"]["sources"].as_array().into_iter().flatten() {
                    add(&source["configMap"]["name"]);
                }
            }
            for container in &containers {
                for from in container["envFrom"].as_array().into_iter().flatten() {
                    add(&from["configMapRef"]["name"]);
                }
                for env in container["env"].as_array().into_iter().flatten() {
                    add(&env["valueFrom"]["configMapKeyRef"]["name"]);
                }
            }
        }
        "persistentvolumeclaims" => {
            let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
            for volume in &volumes {
                add(&volume["persistentVolumeClaim"]["claimName"]);
                if volume["ephemeral"].is_object() {
                    let claim = format!("{pod_name}-{}", volume["name"].as_str().unwrap_or_default());
                    add(&Value::String(claim));
                }
            }
        }
        "serviceaccounts" => {
            let account = spec["serviceAccountName"].as_str().filter(|a| !a.is_empty()).unwrap_or("default");
            add(&Value::String(account.to_string()));
        }
        _ => {}
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_uses_what_its_volumes_environment_and_pull_secrets_name() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {
            "serviceAccountName": "robot",
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [{"name": "s", "secret": {"secretName": "vol"}},
                        {"name": "c", "configMap": {"name": "settings"}},
                        {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                        {"name": "e", "ephemeral": {"volumeClaimTemplate": {}}},
                        {"name": "x", "projected": {"sources": [{"secret": {"name": "projected"}}, {"configMap": {"name": "ca"}}]}}],
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-env"}}]}],
            "containers": [{"name": "m", "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "key", "key": "k"}}},
                                                  {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "k"}}}]}]}});
        assert_eq!(uses(&pod, "secrets"), ["pull", "vol", "projected", "init-env", "key"]);
        assert_eq!(uses(&pod, "configmaps"), ["settings", "ca", "conf"]);
        assert_eq!(uses(&pod, "persistentvolumeclaims"), ["data", "p-e"]);
        assert_eq!(uses(&pod, "serviceaccounts"), ["robot"]);
    }

    #[test]
    fn only_node_credentials_are_nodes() {
        let user = |name: &str, groups: &[&str]| User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        assert_eq!(node_name(&user("system:node:n1", &["system:nodes"])), Some("n1"));
        assert_eq!(node_name(&user("system:node:n1", &["system:authenticated"])), None);
        assert_eq!(node_name(&user("alice", &["system:nodes"])), None);
    }
}
