//! The kinds the syncer copies down, each an entry of one registry: its resource, how a tenant object becomes its
//! super object, which fields are its content (compared to find drift), and whether its status flows back up.
//! Built-in kinds are entries like any other, so more kinds (custom resources) are more entries.

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Map, Value, json};

use crate::names::{self, TENANT_LABEL, TENANT_NAME, TENANT_NAMESPACE, TENANT_UID};
use crate::policy;

/// What a transform knows of the tenant.
pub struct Mapping<'a> {
    /// The tenant's cluster key.
    pub key: &'a str,
    /// The tenant namespace of the object, and its super namespace.
    pub namespace: &'a str,
    pub super_namespace: String,
    /// Where the tenant's API server is reached from the super cluster's pods.
    pub api_server: (&'a str, i32),
}

/// One synced kind.
pub struct Kind {
    /// The plural resource name (`pods`).
    pub name: &'static str,
    pub resource: ApiResource,
    /// The super object for a tenant object, or `None` when the object is not synced.
    pub down: fn(&Value, &Mapping) -> Option<Value>,
    /// The top-level fields that are the object's content: a super object whose content differs has drifted.
    pub content: &'static [&'static str],
    /// Whether the super object's status is copied to the tenant object.
    pub status_up: bool,
    /// What the platform admin's policy says of the super object ([`crate::policy`]): a refusal names the field.
    pub admit: fn(&Value, &policy::Context) -> Result<(), String>,
    /// The super object's name for tenant object `name`, or `None` when that name is not synced.
    pub super_name: fn(&str) -> Option<&str>,
}

/// Every object of the kind may go down.
fn anything(_: &Value, _: &policy::Context) -> Result<(), String> {
    Ok(())
}

/// The super object has the tenant object's name.
fn same(name: &str) -> Option<&str> {
    Some(name)
}

fn resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// The built-in kinds, in the order they are created (what pods use comes before pods).
pub fn built_in() -> Vec<Kind> {
    vec![
        Kind {
            name: "configmaps",
            resource: resource("", "v1", "ConfigMap"),
            down: |o, m| Some(with(o, m, &["data", "binaryData", "immutable"])),
            content: &["data", "binaryData"],
            status_up: false,
            admit: anything,
            super_name: names::super_config_map,
        },
        Kind {
            name: "secrets",
            resource: resource("", "v1", "Secret"),
            down: |o, m| {
                // Service-account tokens are the tenant's credentials; they stay there.
                (o["type"] != "kubernetes.io/service-account-token").then(|| with(o, m, &["type", "data", "immutable"]))
            },
            content: &["data"],
            status_up: false,
            admit: anything,
            // Pods' token Secrets are the syncer's own ([`crate::tokens`]).
            super_name: |name| (!name.starts_with(crate::tokens::SECRET_PREFIX)).then_some(name),
        },
        Kind {
            name: "serviceaccounts",
            resource: resource("", "v1", "ServiceAccount"),
            down: |o, m| {
                // The super cluster issues no tokens for tenant accounts (pods do not mount them either).
                let mut account = with(o, m, &["imagePullSecrets"]);
                account["automountServiceAccountToken"] = json!(false);
                Some(account)
            },
            content: &["imagePullSecrets"],
            status_up: false,
            admit: anything,
            super_name: same,
        },
        Kind {
            name: "endpoints",
            resource: resource("", "v1", "Endpoints"),
            // Only those of Services without a selector (the others are the super cluster's endpoints controller's);
            // `sync.rs` checks the Service.
            down: |o, m| Some(with(o, m, &["subsets"])),
            content: &["subsets"],
            status_up: false,
            admit: policy::endpoints,
            super_name: same,
        },
        Kind {
            name: "persistentvolumeclaims",
            resource: resource("", "v1", "PersistentVolumeClaim"),
            down: |o, m| {
                let mut claim = with(o, m, &[]);
                let spec = &o["spec"];
                claim["spec"] = pick(spec, &["accessModes", "resources", "storageClassName", "volumeMode"]);
                Some(claim)
            },
            content: &[],
            status_up: true,
            admit: anything,
            super_name: same,
        },
        Kind {
            name: "services",
            resource: resource("", "v1", "Service"),
            down: |o, m| {
                let mut service = with(o, m, &[]);
                let mut spec = pick(&o["spec"], &["selector", "type", "sessionAffinity", "publishNotReadyAddresses"]);
                // Addresses and node ports are the super cluster's to give.
                let ports: Vec<Value> = o["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| pick(p, &["name", "port", "targetPort", "protocol", "appProtocol"]))
                    .collect();
                spec["ports"] = json!(ports);
                if o["spec"]["clusterIP"] == "None" {
                    spec["clusterIP"] = json!("None");
                }
                service["spec"] = spec;
                Some(service)
            },
            content: &["spec"],
            status_up: false,
            admit: |o, cx| policy::service(&o["spec"], cx),
            super_name: same,
        },
        Kind {
            name: "pods",
            resource: resource("", "v1", "Pod"),
            down: |o, m| {
                let mut pod = with(o, m, &[]);
                pod["spec"] = pod_spec(&o["spec"], m, o["metadata"]["name"].as_str().unwrap_or_default());
                Some(pod)
            },
            content: &[],
            status_up: true,
            admit: |o, cx| policy::pod(&o["spec"], cx),
            super_name: same,
        },
    ]
}

/// The cluster-scoped kinds the super cluster shares with every tenant: objects labelled [`names::PUBLIC_LABEL`]
/// `"true"` appear in each tenant as they are.
pub fn public() -> Vec<(&'static str, ApiResource)> {
    vec![
        ("storageclasses", resource("storage.k8s.io", "v1", "StorageClass")),
        ("priorityclasses", resource("scheduling.k8s.io", "v1", "PriorityClass")),
        ("customresourcedefinitions", resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition")),
    ]
}

/// A custom resource kind synced like the built-in ones: its `spec` down, its `status` up.
pub fn custom(group: &str, version: &str, kind: &str) -> Kind {
    let resource = resource(group, version, kind);
    // Registered once at start, for the life of the process: the name may live as long.
    let name: &'static str = Box::leak(resource.plural.clone().into_boxed_str());
    Kind {
        name,
        resource,
        down: |o, m| Some(with(o, m, &["spec"])),
        content: &["spec"],
        status_up: true,
        admit: anything,
        super_name: same,
    }
}

/// Parses `group/version/Kind` (`version/Kind` for the core group).
pub fn parse_gvk(text: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = text.split('/').collect();
    match parts[..] {
        [group, version, kind] if !version.is_empty() && !kind.is_empty() => {
            Some((group.to_string(), version.to_string(), kind.to_string()))
        }
        [version, kind] if !version.is_empty() && !kind.is_empty() => {
            Some((String::new(), version.to_string(), kind.to_string()))
        }
        _ => None,
    }
}

/// The super object's metadata with the fields `copy` of the tenant object `object`.
fn with(object: &Value, mapping: &Mapping, copy: &[&str]) -> Value {
    let meta = &object["metadata"];
    let kept = |field: &str| -> Map<String, Value> {
        meta[field]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| names::copied(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let mut labels = kept("labels");
    labels.insert(TENANT_LABEL.into(), json!(mapping.key));
    let mut annotations = kept("annotations");
    annotations.insert(TENANT_NAMESPACE.into(), json!(mapping.namespace));
    annotations.insert(TENANT_NAME.into(), meta["name"].clone());
    annotations.insert(TENANT_UID.into(), meta["uid"].clone());
    let mut out = json!({
        "apiVersion": object["apiVersion"], "kind": object["kind"],
        "metadata": {"name": meta["name"], "namespace": mapping.super_namespace, "labels": labels, "annotations": annotations},
    });
    for field in copy {
        if let Some(value) = object.get(*field).filter(|v| !v.is_null()) {
            out[*field] = value.clone();
        }
    }
    out
}

fn pick(object: &Value, fields: &[&str]) -> Value {
    let picked: Map<String, Value> = fields
        .iter()
        .filter_map(|f| object.get(*f).filter(|v| !v.is_null()).map(|v| (f.to_string(), v.clone())))
        .collect();
    Value::Object(picked)
}

/// A tenant pod's spec as it runs in the super cluster: unscheduled; with its tenant ServiceAccount's tokens (which
/// the tenant API server issues, [`crate::tokens`]) projected from the pod's token Secret instead of asked of the
/// super cluster, and the tenant's API server as `kubernetes`; with the downward API reporting the tenant's
/// namespace and the tenant pod's UID; with affinity terms kept within the tenant.
fn pod_spec(spec: &Value, mapping: &Mapping, pod: &str) -> Value {
    let mut spec = spec.clone();
    let Some(map) = spec.as_object_mut() else { return json!({}) };
    // A node selector stays: virtual nodes carry the super nodes' names and labels.
    // A priority is the super cluster's to compute from the class, which the policy checks.
    for field in ["nodeName", "serviceAccount", "priority"] {
        map.remove(field);
    }
    // The tenant's account is synced too; the super cluster mounts no token of its own: the tenant's tokens come
    // from the pod's token Secret, each where the tenant pod asked for it.
    if map.get("serviceAccountName").is_none_or(|n| n.as_str().is_none_or(str::is_empty)) {
        map.insert("serviceAccountName".into(), json!("default"));
    }
    map.insert("automountServiceAccountToken".into(), json!(false));
    let secret = crate::tokens::secret_name(pod);
    for volume in map.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or_default().to_string();
        let sources = volume.pointer_mut("/projected/sources").and_then(Value::as_array_mut);
        for (index, source) in sources.into_iter().flatten().enumerate() {
            if let Some(token) = source.get("serviceAccountToken").cloned() {
                let item = json!({"key": crate::tokens::key(&name, index), "path": token["path"]});
                *source = json!({"secret": {"name": secret, "items": [item]}});
            }
        }
        // (Read through `pointer_mut`: indexing a missing field of a `Value` for writing would add it as null.)
        for item in volume.pointer_mut("/downwardAPI/items").and_then(Value::as_array_mut).into_iter().flatten() {
            tenant_field(item);
        }
        let sources = volume.pointer_mut("/projected/sources").and_then(Value::as_array_mut);
        for source in sources.into_iter().flatten() {
            for item in source.pointer_mut("/downwardAPI/items").and_then(Value::as_array_mut).into_iter().flatten() {
                tenant_field(item);
            }
        }
    }
    config_maps_by_super_name(map);
    let (host, port) = mapping.api_server;
    for list in ["initContainers", "containers"] {
        for container in map.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            let mut env: Vec<Value> = container["env"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| !matches!(e["name"].as_str(), Some("KUBERNETES_SERVICE_HOST" | "KUBERNETES_SERVICE_PORT")))
                .map(|mut e| {
                    if e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace" {
                        e = json!({"name": e["name"], "value": mapping.namespace});
                    }
                    e
                })
                .collect();
            env.push(json!({"name": "KUBERNETES_SERVICE_HOST", "value": host}));
            env.push(json!({"name": "KUBERNETES_SERVICE_PORT", "value": port.to_string()}));
            container["env"] = json!(env);
        }
    }
    // Pod (anti-)affinity terms name tenant namespaces: they become the super ones; a term without namespaces means
    // the pod's own, which stays right.
    if let Some(affinity) = map.get_mut("affinity") {
        for kind in ["podAffinity", "podAntiAffinity"] {
            for rule in
                ["requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"]
            {
                for term in affinity[kind][rule].as_array_mut().into_iter().flatten() {
                    let term = if term.get("podAffinityTerm").is_some() { &mut term["podAffinityTerm"] } else { term };
                    if let Some(namespaces) = term.get_mut("namespaces").and_then(Value::as_array_mut) {
                        for namespace in namespaces.iter_mut() {
                            if let Some(name) = namespace.as_str() {
                                *namespace = json!(names::super_namespace(mapping.key, name));
                            }
                        }
                    }
                    if let Some(term) = term.as_object_mut() {
                        // A selector of namespaces would reach other tenants' namespaces.
                        term.remove("namespaceSelector");
                    }
                }
            }
        }
    }
    spec
}

/// A downward-API item whose `fieldRef` would read the super pod's namespace or UID reads the tenant's instead, from
/// the annotations the syncer puts on the super pod.
fn tenant_field(item: &mut Value) {
    let Some(path) = item.pointer_mut("/fieldRef/fieldPath") else { return };
    let tenant = match path.as_str() {
        Some("metadata.namespace") => TENANT_NAMESPACE,
        Some("metadata.uid") => TENANT_UID,
        _ => return,
    };
    *path = json!(format!("metadata.annotations['{tenant}']"));
}

/// Points every ConfigMap a pod spec names (volumes, projected sources, `env` and `envFrom`) at its super name; a
/// reference to a name that is not synced is left alone, and finds nothing.
fn config_maps_by_super_name(spec: &mut Map<String, Value>) {
    let rename = |reference: &mut Value| {
        if let Some(name) = reference.get_mut("name")
            && let Some(super_name) = name.as_str().and_then(names::super_config_map)
        {
            *name = json!(super_name);
        }
    };
    for volume in spec.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(reference) = volume.get_mut("configMap") {
            rename(reference);
        }
        for source in volume.pointer_mut("/projected/sources").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(reference) = source.get_mut("configMap") {
                rename(reference);
            }
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for container in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            for variable in container.get_mut("env").and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(reference) = variable.pointer_mut("/valueFrom/configMapKeyRef") {
                    rename(reference);
                }
            }
            for source in container.get_mut("envFrom").and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(reference) = source.get_mut("configMapRef") {
                    rename(reference);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping() -> Mapping<'static> {
        Mapping {
            key: "default-abcde-a",
            namespace: "web",
            super_namespace: "default-abcde-a-web".into(),
            api_server: ("10.0.0.9", 6443),
        }
    }

    #[test]
    fn a_pod_goes_down_unscheduled_with_the_tenant_api_server_namespace_and_tokens() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "web", "uid": "u1", "labels": {"app": "x", "tenancy.nest.dev/cluster": "forged"}},
            "spec": {
                "nodeName": "n1", "serviceAccountName": "builder",
                "containers": [{"name": "c", "image": "nginx",
                    "env": [{"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                    "volumeMounts": [{"name": "kube-api-access-x", "mountPath": "/var/run/secrets"}, {"name": "data", "mountPath": "/d"}]}],
                "volumes": [{"name": "kube-api-access-x", "projected": {"sources": [
                                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
                            {"name": "data", "emptyDir": {}},
                            {"name": "me", "downwardAPI": {"items": [{"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
                                                                     {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}],
            },
            "status": {"phase": "Running"},
        });
        let kinds = built_in();
        let pods = kinds.iter().find(|k| k.name == "pods").unwrap();
        let down = (pods.down)(&pod, &mapping()).unwrap();
        assert_eq!(down["metadata"]["namespace"], "default-abcde-a-web");
        assert_eq!(
            down["metadata"]["labels"]["tenancy.nest.dev/cluster"], "default-abcde-a",
            "the tenant cannot forge it"
        );
        assert_eq!(down["metadata"]["annotations"]["tenancy.nest.dev/uid"], "u1");
        assert!(down.get("status").is_none() && down["spec"].get("nodeName").is_none());
        assert_eq!(down["spec"]["serviceAccountName"], "builder");
        assert_eq!(down["spec"]["automountServiceAccountToken"], false);
        let container = &down["spec"]["containers"][0];
        assert_eq!(container["volumeMounts"].as_array().unwrap().len(), 2, "the token volume stays mounted");
        // The token is the pod's token Secret's (the tenant API server's), the CA the tenant's, the namespace the
        // tenant's.
        let sources = &down["spec"]["volumes"][0]["projected"]["sources"];
        assert_eq!(
            sources[0],
            json!({"secret": {"name": crate::tokens::secret_name("p"), "items": [{"key": "kube-api-access-x.0", "path": "token"}]}})
        );
        assert_eq!(sources[1]["configMap"]["name"], "nest-kube-root-ca.crt");
        let tenant_namespace = "metadata.annotations['tenancy.nest.dev/namespace']";
        assert_eq!(sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"], tenant_namespace);
        let items = &down["spec"]["volumes"][2]["downwardAPI"]["items"];
        assert_eq!(items[0]["fieldRef"]["fieldPath"], "metadata.annotations['tenancy.nest.dev/uid']");
        assert_eq!(items[1]["fieldRef"]["fieldPath"], "metadata.name", "the super pod has the tenant pod's name");
        let secrets = kinds.iter().find(|k| k.name == "secrets").unwrap();
        assert_eq!((secrets.super_name)(&crate::tokens::secret_name("p")), None, "a tenant Secret in its place");
        assert_eq!((secrets.super_name)("settings"), Some("settings"));
        let env = container["env"].as_array().unwrap();
        assert!(env.contains(&json!({"name": "NS", "value": "web"})), "{env:?}");
        assert!(env.contains(&json!({"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.9"})), "{env:?}");
    }

    #[test]
    fn a_pod_that_names_the_root_ca_gets_the_tenants_under_its_super_name() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "containers": [{"name": "c", "image": "i",
                    "env": [{"name": "CA", "valueFrom": {"configMapKeyRef": {"name": "kube-root-ca.crt", "key": "ca.crt"}}},
                            {"name": "OTHER", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}}],
                    "envFrom": [{"configMapRef": {"name": "kube-root-ca.crt"}}]}],
                "ephemeralContainers": [{"name": "e", "image": "i", "envFrom": [{"configMapRef": {"name": "kube-root-ca.crt"}}]}],
                "volumes": [{"name": "ca", "configMap": {"name": "kube-root-ca.crt"}},
                            {"name": "both", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}, {"configMap": {"name": "settings"}}]}}],
            },
        });
        let kinds = built_in();
        let pods = kinds.iter().find(|k| k.name == "pods").unwrap();
        let down = (pods.down)(&pod, &mapping()).unwrap();
        let spec = &down["spec"];
        assert_eq!(spec["volumes"][0]["configMap"]["name"], "nest-kube-root-ca.crt");
        assert_eq!(spec["volumes"][1]["projected"]["sources"][0]["configMap"]["name"], "nest-kube-root-ca.crt");
        assert_eq!(spec["volumes"][1]["projected"]["sources"][1]["configMap"]["name"], "settings");
        let container = &spec["containers"][0];
        assert_eq!(container["env"][0]["valueFrom"]["configMapKeyRef"]["name"], "nest-kube-root-ca.crt");
        assert_eq!(container["env"][1]["valueFrom"]["configMapKeyRef"]["name"], "settings");
        assert_eq!(container["envFrom"][0]["configMapRef"]["name"], "nest-kube-root-ca.crt");
        assert_eq!(spec["ephemeralContainers"][0]["envFrom"][0]["configMapRef"]["name"], "nest-kube-root-ca.crt");
        let configmaps = kinds.iter().find(|k| k.name == "configmaps").unwrap();
        assert_eq!((configmaps.super_name)("kube-root-ca.crt"), Some("nest-kube-root-ca.crt"));
        assert_eq!(
            (configmaps.super_name)("nest-kube-root-ca.crt"),
            None,
            "a tenant ConfigMap would take the CA's place"
        );
    }

    #[test]
    fn services_lose_their_addresses_and_token_secrets_stay() {
        let kinds = built_in();
        let services = kinds.iter().find(|k| k.name == "services").unwrap();
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "uid": "u"},
            "spec": {"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"], "selector": {"app": "x"},
                     "ports": [{"port": 80, "nodePort": 30001, "targetPort": 8080}]}});
        let down = (services.down)(&service, &mapping()).unwrap();
        assert_eq!(down["spec"], json!({"selector": {"app": "x"}, "ports": [{"port": 80, "targetPort": 8080}]}));
        let secrets = kinds.iter().find(|k| k.name == "secrets").unwrap();
        let token = json!({"metadata": {"name": "t"}, "type": "kubernetes.io/service-account-token"});
        assert!((secrets.down)(&token, &mapping()).is_none());
    }
}
