//! The `ServiceAccount` admission plugin (kube-apiserver's `plugin/pkg/admission/serviceaccount`, 1.33), for new
//! pods:
//!
//! - a pod that names no ServiceAccount runs as `default`;
//! - the ServiceAccount must exist: otherwise 403 `error looking up service account <ns>/<name>: serviceaccount
//!   "<name>" not found` (the namespace's `default` is waited for briefly, since a controller makes it a moment after
//!   the namespace);
//! - unless the pod, or else its ServiceAccount, says `automountServiceAccountToken: false`, the pod gets a projected
//!   volume `kube-api-access-<5 characters>` — a bound token of its ServiceAccount (`token`, 3607 s, which the node
//!   asks for and keeps fresh), the cluster's CA (`ca.crt`, from `kube-root-ca.crt`) and its namespace
//!   (`namespace`) — mounted read-only at `/var/run/secrets/kubernetes.io/serviceaccount` in every container and
//!   init container that has nothing mounted there yet;
//! - a pod without `imagePullSecrets` gets its ServiceAccount's;
//! - mirror pods may reference neither ServiceAccounts, nor Secrets, nor token projections; and a ServiceAccount
//!   annotated `kubernetes.io/enforce-mountable-secrets: "true"` limits the Secrets its pods use to those it lists.

use std::time::Duration;

use serde_json::{Value, json};

use crate::chain::{Mutating, Request, Validating};
use crate::error::{ApiError, Result};
use crate::strategy::Cluster;

/// Where the token, the CA and the namespace are mounted.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the projected volume's name.
pub const VOLUME_PREFIX: &str = "kube-api-access-";
/// The lifetime the projected token asks for (`WarnOnlyBoundTokenExpirationSeconds` upstream: an hour and 7 s).
pub const TOKEN_SECONDS: i64 = 3607;
/// The annotation that marks a mirror pod (the kubelet's static pods).
const MIRROR: &str = "kubernetes.io/config.mirror";
/// The annotation by which a ServiceAccount limits the Secrets its pods may use.
const ENFORCE_MOUNTABLE: &str = "kubernetes.io/enforce-mountable-secrets";

/// The plugin (both of its halves).
pub struct ServiceAccount;

fn pod_name<'a>(request: &'a Request<'a>, pod: &'a Value) -> &'a str {
    request.object_name(pod)
}

/// The ServiceAccount `name` of `namespace`. The namespace's `default` is looked for ten times over about two seconds,
/// as upstream does, since the ServiceAccount controller makes it only after the namespace exists.
async fn service_account(cluster: Cluster<'_>, namespace: &str, name: &str) -> Result<Option<Value>> {
    let key = format!("/registry/core/serviceaccounts/{namespace}/{name}");
    let attempts = if name == "default" { 10 } else { 1 };
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100 + fastrand::u64(..100))).await;
        }
        if let Some(account) = cluster.lookup(&key).await? {
            return Ok(Some(Value::clone(&account)));
        }
    }
    Ok(None)
}

/// The ServiceAccount a pod names, or upstream's refusal.
async fn required(cluster: Cluster<'_>, request: &Request<'_>, pod: &Value) -> Result<Value> {
    let name = pod["spec"]["serviceAccountName"].as_str().unwrap_or_default();
    service_account(cluster, request.namespace, name).await?.ok_or_else(|| {
        ApiError::forbidden(
            request.info,
            pod_name(request, pod),
            format!(
                "error looking up service account {}/{name}: serviceaccount \"{name}\" not found",
                request.namespace
            ),
        )
    })
}

/// Whether the pod gets the token volume: the pod's word, else its ServiceAccount's, else yes.
fn automount(pod: &Value, account: &Value) -> bool {
    pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| account["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

/// The projected volume upstream's `TokenVolumeSource` describes, named `name`.
pub fn token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_SECONDS, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [
                    {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                ]}},
            ],
        },
    })
}

/// Mounts the token volume into every container and init container that has nothing at [`MOUNT_PATH`], adding the
/// volume (or reusing a `kube-api-access-` one the pod has) when one of them needs it.
fn mount_token(spec: &mut Value) {
    let existing = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|v| v["name"].as_str().filter(|n| n.starts_with(VOLUME_PREFIX)).map(str::to_string));
    let name = existing.clone().unwrap_or_else(|| crate::meta::generate_name(VOLUME_PREFIX));
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        for container in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            let mounts = container.as_object_mut().expect("a container").entry("volumeMounts").or_insert(json!([]));
            let Some(mounts) = mounts.as_array_mut() else { continue };
            if mounts.iter().any(|m| m["mountPath"] == MOUNT_PATH) {
                continue;
            }
            mounts.push(json!({"name": name, "readOnly": true, "mountPath": MOUNT_PATH}));
            needed = true;
        }
    }
    if needed && existing.is_none() {
        let volumes = spec.as_object_mut().expect("a pod spec").entry("volumes").or_insert(json!([]));
        if let Some(volumes) = volumes.as_array_mut() {
            volumes.push(token_volume(&name));
        }
    }
}

impl Mutating for ServiceAccount {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.creates("", "pods")
    }

    async fn admit(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &mut Value) -> Result<()> {
        if object["metadata"]["annotations"].get(MIRROR).is_some() {
            return Ok(());
        }
        if !object["spec"].is_object() {
            return Ok(());
        }
        if object["spec"]["serviceAccountName"].as_str().is_none_or(str::is_empty) {
            object["spec"]["serviceAccountName"] = json!("default");
        }
        let account = required(cluster, request, object).await?;
        if automount(object, &account) {
            mount_token(&mut object["spec"]);
        }
        let pull_secrets = object["spec"]["imagePullSecrets"].as_array().is_some_and(|s| !s.is_empty());
        if !pull_secrets && let Some(secrets) = account["imagePullSecrets"].as_array().filter(|s| !s.is_empty()) {
            let names: Vec<Value> = secrets.iter().map(|s| json!({"name": s["name"]})).collect();
            object["spec"]["imagePullSecrets"] = Value::Array(names);
        }
        Ok(())
    }
}

/// The Secrets a pod spec names: in volumes (and projections), in its containers' environment, and as pull secrets.
fn secret_refusal(spec: &Value, account: &Value) -> Option<String> {
    let sa = account["metadata"]["name"].as_str().unwrap_or_default();
    let listed = |list: &str, name: &str| account[list].as_array().into_iter().flatten().any(|s| s["name"] == name);
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        if let Some(name) = volume["secret"]["secretName"].as_str()
            && !listed("secrets", name)
        {
            return Some(format!(
                "volume with secret.secretName=\"{name}\" is not allowed because service account {sa} does not \
                 reference that secret"
            ));
        }
    }
    for (list, word) in [("initContainers", "init container"), ("containers", "container")] {
        for container in spec[list].as_array().into_iter().flatten() {
            for env in container["env"].as_array().into_iter().flatten() {
                if let Some(name) = env["valueFrom"]["secretKeyRef"]["name"].as_str()
                    && !listed("secrets", name)
                {
                    return Some(format!(
                        "{word} {} with envVar {} referencing secret.secretName=\"{name}\" is not allowed because \
                         service account {sa} does not reference that secret",
                        container["name"].as_str().unwrap_or_default(),
                        env["name"].as_str().unwrap_or_default()
                    ));
                }
            }
        }
    }
    for (i, pull) in spec["imagePullSecrets"].as_array().into_iter().flatten().enumerate() {
        let name = pull["name"].as_str().unwrap_or_default();
        if !listed("imagePullSecrets", name) {
            return Some(format!(
                "imagePullSecrets[{i}].name=\"{name}\" is not allowed because service account {sa} does not \
                 reference that imagePullSecret"
            ));
        }
    }
    None
}

/// What a mirror pod may not reference.
fn mirror_refusal(spec: &Value) -> Option<&'static str> {
    if spec["serviceAccountName"].as_str().is_some_and(|n| !n.is_empty()) {
        return Some("a mirror pod may not reference service accounts");
    }
    let volumes: Vec<&Value> = spec["volumes"].as_array().into_iter().flatten().collect();
    let projections = || volumes.iter().flat_map(|v| v["projected"]["sources"].as_array().into_iter().flatten());
    let env_secret = ["initContainers", "containers"].iter().any(|list| {
        spec[*list].as_array().into_iter().flatten().any(|c| {
            c["env"].as_array().into_iter().flatten().any(|e| e["valueFrom"]["secretKeyRef"].is_object())
                || c["envFrom"].as_array().into_iter().flatten().any(|e| e["secretRef"].is_object())
        })
    });
    let secrets = volumes.iter().any(|v| v["secret"].is_object())
        || projections().any(|p| p["secret"].is_object())
        || spec["imagePullSecrets"].as_array().is_some_and(|s| !s.is_empty())
        || env_secret;
    if secrets {
        return Some("a mirror pod may not reference secrets");
    }
    if projections().any(|p| p["serviceAccountToken"].is_object()) {
        return Some("a mirror pod may not use ServiceAccountToken volume projections");
    }
    None
}

impl Validating for ServiceAccount {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.creates("", "pods")
    }

    async fn validate(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &Value) -> Result<()> {
        let spec = &object["spec"];
        if object["metadata"]["annotations"].get(MIRROR).is_some() {
            return match mirror_refusal(spec) {
                Some(why) => Err(ApiError::forbidden(request.info, pod_name(request, object), why)),
                None => Ok(()),
            };
        }
        let account = required(cluster, request, object).await?;
        if account["metadata"]["annotations"][ENFORCE_MOUNTABLE].as_str().is_some_and(|v| v == "true")
            && let Some(why) = secret_refusal(spec, &account)
        {
            return Err(ApiError::forbidden(request.info, pod_name(request, object), why));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn every_container_gets_the_token_mount_unless_it_has_one_there() {
        let mut spec = json!({
            "initContainers": [{"name": "i", "image": "x"}],
            "containers": [
                {"name": "a", "image": "x"},
                {"name": "b", "image": "x", "volumeMounts": [{"name": "mine", "mountPath": MOUNT_PATH}]},
            ],
            "volumes": [{"name": "mine", "emptyDir": {}}],
        });
        mount_token(&mut spec);
        let volume = spec["volumes"][1].clone();
        let name = volume["name"].as_str().unwrap();
        assert!(name.starts_with(VOLUME_PREFIX) && name.len() == VOLUME_PREFIX.len() + 5, "{name}");
        assert_eq!(volume, token_volume(name));
        let mounted = json!([{"name": name, "readOnly": true, "mountPath": MOUNT_PATH}]);
        assert_eq!(spec["initContainers"][0]["volumeMounts"], mounted);
        assert_eq!(spec["containers"][0]["volumeMounts"], mounted);
        assert_eq!(spec["containers"][1]["volumeMounts"].as_array().unwrap().len(), 1, "b keeps its own");
    }

    #[test]
    fn a_pod_with_its_own_mounts_everywhere_gets_no_volume_and_one_with_the_volume_reuses_it() {
        let mut spec = json!({"containers": [{"name": "a", "volumeMounts": [{"name": "m", "mountPath": MOUNT_PATH}]}]});
        mount_token(&mut spec);
        assert!(spec.get("volumes").is_none(), "{spec}");
        let mut spec = json!({"containers": [{"name": "a"}], "volumes": [token_volume("kube-api-access-abcde")]});
        mount_token(&mut spec);
        assert_eq!(spec["volumes"].as_array().unwrap().len(), 1);
        assert_eq!(spec["containers"][0]["volumeMounts"][0]["name"], "kube-api-access-abcde");
    }

    #[test]
    fn the_pods_word_on_automounting_wins_then_the_service_accounts() {
        let pod = |v: Value| json!({"spec": {"automountServiceAccountToken": v}});
        let account = |v: Value| json!({"automountServiceAccountToken": v});
        assert!(automount(&json!({"spec": {}}), &json!({})));
        assert!(!automount(&json!({"spec": {}}), &account(json!(false))));
        assert!(automount(&pod(json!(true)), &account(json!(false))));
        assert!(!automount(&pod(json!(false)), &account(json!(true))));
    }

    #[test]
    fn mirror_pods_reference_no_accounts_secrets_or_tokens() {
        assert_eq!(
            mirror_refusal(&json!({"serviceAccountName": "x"})),
            Some("a mirror pod may not reference service accounts")
        );
        let secret = json!({"volumes": [{"name": "s", "secret": {"secretName": "s"}}]});
        assert_eq!(mirror_refusal(&secret), Some("a mirror pod may not reference secrets"));
        let token = json!({"volumes": [token_volume("kube-api-access-x")]});
        assert_eq!(mirror_refusal(&token), Some("a mirror pod may not use ServiceAccountToken volume projections"));
        assert_eq!(mirror_refusal(&json!({"containers": [{"name": "a"}]})), None);
    }

    #[test]
    fn an_enforcing_account_allows_only_the_secrets_it_lists() {
        let account =
            json!({"metadata": {"name": "sa"}, "secrets": [{"name": "ok"}], "imagePullSecrets": [{"name": "pull"}]});
        let spec =
            json!({"volumes": [{"name": "v", "secret": {"secretName": "ok"}}], "imagePullSecrets": [{"name": "pull"}]});
        assert_eq!(secret_refusal(&spec, &account), None);
        let spec = json!({"volumes": [{"name": "v", "secret": {"secretName": "other"}}]});
        assert_eq!(
            secret_refusal(&spec, &account).unwrap(),
            "volume with secret.secretName=\"other\" is not allowed because service account sa does not reference that secret"
        );
        let spec = json!({"containers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "x", "key": "k"}}}]}]});
        assert_eq!(
            secret_refusal(&spec, &account).unwrap(),
            "container c with envVar E referencing secret.secretName=\"x\" is not allowed because service account sa does not reference that secret"
        );
        let spec = json!({"imagePullSecrets": [{"name": "pull"}, {"name": "nope"}]});
        assert_eq!(
            secret_refusal(&spec, &account).unwrap(),
            "imagePullSecrets[1].name=\"nope\" is not allowed because service account sa does not reference that imagePullSecret"
        );
    }

    #[test]
    fn only_a_pods_creation_is_handled() {
        expect_handled(|r| Mutating::handles(&ServiceAccount, r), "alice", "pods: create; serviceaccounts: -");
        expect_handled(|r| Validating::handles(&ServiceAccount, r), "alice", "pods: create; serviceaccounts: -");
    }
}
