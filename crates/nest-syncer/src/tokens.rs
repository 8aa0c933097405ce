//! Tenant workloads' identity: a synced pod gets the tokens its *tenant* API server issues for its tenant
//! ServiceAccount, never a credential of the management cluster.
//!
//! A tenant pod's projected `serviceAccountToken` sources (the `kube-api-access-*` volume the tenant's ServiceAccount
//! admission adds, or the pod's own) cannot be filled by the super cluster's node, which would ask the super API
//! server. So the syncer asks the tenant API server for each (a TokenRequest with the source's audience and
//! lifetime, bound to the tenant pod: deleting the pod ends the token), keeps them in one super Secret per pod,
//! `nest-token-<digest of the pod's name>` (a name no tenant Secret is synced to), and the super pod's spec projects
//! that Secret's keys where the tokens were asked for ([`crate::kinds`]). The syncer asks again after 80% of a
//! token's life (as the kubelet's token manager does) and updates the Secret; the node writes changed Secrets into
//! running pods. The super pod keeps `automountServiceAccountToken: false`, so the super cluster adds no token of its
//! own, and the Secret goes when the super pod goes.

use std::time::{Duration, SystemTime};

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::names::{self, TENANT_LABEL, TENANT_NAMESPACE, TENANT_UID};
use crate::tenants::Tenant;

/// The prefix of the Secrets holding pods' tokens: tenant Secrets of such names are not synced.
pub const SECRET_PREFIX: &str = "nest-token-";
/// The annotation of a token Secret naming its tenant pod.
pub const POD: &str = "tenancy.nest.dev/pod";
/// The annotation of a token Secret saying when its tokens are asked for again (seconds since the epoch).
pub const RENEW_AT: &str = "tenancy.nest.dev/renew-at";

/// The super Secret holding the tokens of tenant pod `pod`.
pub fn secret_name(pod: &str) -> String {
    format!("{SECRET_PREFIX}{}", names::digest(pod, 16))
}

/// The key of the token for source `index` of projected volume `volume`.
pub fn key(volume: &str, index: usize) -> String {
    format!("{volume}.{index}")
}

/// One token a pod asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub key: String,
    pub audience: Option<String>,
    pub seconds: i64,
}

/// The tokens a tenant pod spec asks for, one per `serviceAccountToken` projection.
pub fn wanted(spec: &Value) -> Vec<Wanted> {
    let mut out = Vec::new();
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or_default();
        for (index, source) in volume["projected"]["sources"].as_array().into_iter().flatten().enumerate() {
            let token = &source["serviceAccountToken"];
            if token.is_object() {
                out.push(Wanted {
                    key: key(name, index),
                    audience: token["audience"].as_str().filter(|a| !a.is_empty()).map(str::to_string),
                    seconds: token["expirationSeconds"].as_i64().unwrap_or(3600),
                });
            }
        }
    }
    out
}

/// When tokens valid for `seconds` from `issued` are asked for again: after 80% of their life, or a day.
pub fn renew_at(issued: SystemTime, seconds: i64) -> SystemTime {
    let life = Duration::from_secs(seconds.max(0).unsigned_abs());
    issued + (life / 5).saturating_mul(4).min(Duration::from_secs(24 * 3600))
}

fn epoch_seconds(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Makes sure the super Secret of tenant pod `pod` (in tenant namespace `namespace`) holds fresh tokens for what its
/// spec asks; returns when to look again, or `None` when the pod asks for no token.
pub async fn ensure(
    syncer: &crate::Syncer,
    tenant: &Tenant,
    namespace: &str,
    super_namespace: &str,
    pod: &Value,
) -> kube::Result<Option<Duration>> {
    let wanted = wanted(&pod["spec"]);
    if wanted.is_empty() {
        return Ok(None);
    }
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let secret = secret_name(name);
    let now = SystemTime::now();
    let secrets = Api::<DynamicObject>::namespaced_with(
        syncer.super_client.clone(),
        super_namespace,
        &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
    );
    // What the Secret holds now (as the super cache has it): the same pod's tokens, each key there, not yet due.
    let cached = syncer.find_kind("secrets").and_then(|secrets| syncer.super_object(secrets, super_namespace, &secret));
    if let Some(existing) = cached.map(|o| crate::full(&o)) {
        let annotations = &existing["metadata"]["annotations"];
        let due = annotations[RENEW_AT].as_str().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
        let keys = existing["data"].as_object().cloned().unwrap_or_default();
        let fresh = annotations[TENANT_UID] == uid
            && wanted.iter().all(|w| keys.contains_key(&w.key))
            && due > epoch_seconds(now);
        if fresh {
            return Ok(Some(Duration::from_secs(due - epoch_seconds(now))));
        }
    }
    let account = pod["spec"]["serviceAccountName"].as_str().filter(|a| !a.is_empty()).unwrap_or("default");
    let mut data = serde_json::Map::new();
    let mut renew = None::<SystemTime>;
    for token in &wanted {
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {
                "audiences": token.audience.iter().collect::<Vec<_>>(),
                "expirationSeconds": token.seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid},
            },
        });
        let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token");
        let http = http::Request::post(path)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&request).map_err(kube::Error::SerdeError)?)
            .map_err(kube::Error::HttpError)?;
        let issued = SystemTime::now();
        let answer: Value = tenant.client.request(http).await?;
        let granted = answer["spec"]["expirationSeconds"].as_i64().unwrap_or(token.seconds);
        let at = renew_at(issued, granted);
        renew = Some(renew.map_or(at, |r| r.min(at)));
        let value = answer["status"]["token"].as_str().unwrap_or_default();
        data.insert(token.key.clone(), json!(nest_core::base64::encode(value.as_bytes())));
    }
    let renew = renew.unwrap_or(now);
    let object = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": secret, "namespace": super_namespace,
            "labels": {TENANT_LABEL: tenant.key},
            "annotations": {TENANT_NAMESPACE: namespace, POD: name, TENANT_UID: uid, RENEW_AT: epoch_seconds(renew).to_string()},
        },
        "type": "Opaque",
        "data": data,
    });
    let params = PatchParams::apply("nest-syncer").force();
    secrets.patch(&secret, &params, &Patch::Apply(&object)).await?;
    Ok(Some(renew.duration_since(SystemTime::now()).unwrap_or(Duration::from_secs(1))))
}

/// Deletes the token Secret of tenant pod `pod`, whose super pod is gone.
pub async fn remove(syncer: &crate::Syncer, super_namespace: &str, pod: &str) -> kube::Result<()> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(syncer.super_client.clone(), super_namespace);
    nest_client::done_unless_gone_or_changed(secrets.delete(&secret_name(pod), &DeleteParams::default()).await)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_token_projection_is_one_key_of_the_pods_secret() {
        let spec = json!({"volumes": [
            {"name": "kube-api-access-abcde", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt"}},
            ]}},
            {"name": "vault", "projected": {"sources": [
                {"serviceAccountToken": {"audience": "vault", "path": "t"}},
            ]}},
            {"name": "plain", "emptyDir": {}},
        ]});
        assert_eq!(
            wanted(&spec),
            [
                Wanted { key: "kube-api-access-abcde.0".into(), audience: None, seconds: 3607 },
                Wanted { key: "vault.0".into(), audience: Some("vault".into()), seconds: 3600 },
            ]
        );
        assert!(wanted(&json!({"containers": []})).is_empty());
    }

    #[test]
    fn tokens_are_renewed_after_four_fifths_of_their_life_or_a_day() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        assert_eq!(renew_at(t, 3600), t + Duration::from_secs(2880));
        assert_eq!(renew_at(t, 365 * 24 * 3600), t + Duration::from_secs(24 * 3600));
    }

    #[test]
    fn secret_names_are_reserved_and_valid_whatever_the_pod_is_called() {
        let long = "p".repeat(253);
        for pod in ["web-0", long.as_str()] {
            let name = secret_name(pod);
            assert!(name.starts_with(SECRET_PREFIX) && name.len() == SECRET_PREFIX.len() + 16, "{name}");
        }
        assert_ne!(secret_name("a"), secret_name("b"));
    }
}
