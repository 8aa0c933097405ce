use super::*;

fn mapping() -> Mapping<'static> {
    Mapping {
        key: "default-abcde-a",
        namespace: "web",
        super_namespace: "default-abcde-a-web".into(),
        api_server: ("10.0.0.9", 6443),
        transparent: TRANSPARENT,
        max_grace_period_seconds: 3600,
        egress_off: false,
        share: &NO_SHARE,
    }
}

static TRANSPARENT: &[String] = &[];
static NO_SHARE: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();

fn pod_down(spec: Value, mapping: &Mapping) -> Value {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u"}, "spec": spec});
    let kinds = built_in();
    let pods = kinds.iter().find(|k| k.name == "pods").unwrap();
    (pods.down)(&pod, mapping).unwrap()
}

#[test]
fn what_flows_up_only_never_goes_down() {
    let configured = ["example.com/from-super/".to_string()];
    let mapping = Mapping { transparent: &configured, ..mapping() };
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "uid": "u",
            "labels": {"app": "x", "transparency.tenancy.nest.dev/zone": "forged", "example.com/from-super/a": "b"},
            "annotations": {"note": "kept", "transparency.tenancy.nest.dev/ingress": "forged",
                            "example.com/from-super/c": "d", "nest.dev/stop-seconds": "86400"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    });
    for kind in &built_in() {
        let down = (kind.down)(&pod, &mapping).unwrap();
        let labels = down["metadata"]["labels"].as_object().unwrap();
        let annotations = down["metadata"]["annotations"].as_object().unwrap();
        assert_eq!(labels.keys().collect::<Vec<_>>(), ["app", "tenancy.nest.dev/cluster"], "{}", kind.name);
        assert!(annotations.contains_key("note"), "{}", kind.name);
        for key in annotations.keys() {
            assert!(
                !key.starts_with("transparency.") && !key.starts_with("example.com/") && !key.starts_with("nest.dev/"),
                "{}: {key}",
                kind.name
            );
        }
    }
}

#[test]
fn a_tenant_kept_in_has_its_pods_labelled_for_the_wall_and_no_tenant_labels_itself_out() {
    let spec = json!({"containers": [{"name": "c", "image": "i"}]});
    let kept_in = pod_down(spec.clone(), &Mapping { egress_off: true, ..mapping() });
    assert_eq!(kept_in["metadata"]["labels"]["tenancy.nest.dev/egress"], "deny");
    assert!(pod_down(spec, &mapping())["metadata"]["labels"].get("tenancy.nest.dev/egress").is_none());
    // A tenant's own label of the name never goes down (nest's metadata is not copied).
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "uid": "u", "labels": {"tenancy.nest.dev/egress": "allow"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let kinds = built_in();
    let pods = kinds.iter().find(|k| k.name == "pods").unwrap();
    let down = (pods.down)(&pod, &Mapping { egress_off: true, ..mapping() }).unwrap();
    assert_eq!(down["metadata"]["labels"]["tenancy.nest.dev/egress"], "deny");
}

#[test]
fn a_pod_carries_the_platform_admins_share_of_the_node_and_never_the_tenants_own() {
    let share = std::collections::BTreeMap::from([
        ("tenancy.nest.dev/tenant-memory".to_string(), "2Gi".to_string()),
        ("tenancy.nest.dev/tenant-pids".to_string(), "500".to_string()),
    ]);
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "uid": "u", "annotations": {
            "tenancy.nest.dev/tenant-memory": "1Ti", "tenancy.nest.dev/tenant-cpu": "64", "note": "kept"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let kinds = built_in();
    let pods = kinds.iter().find(|k| k.name == "pods").unwrap();
    let annotations = |mapping: &Mapping| (pods.down)(&pod, mapping).unwrap()["metadata"]["annotations"].clone();
    let shared = annotations(&Mapping { share: &share, ..mapping() });
    assert_eq!(shared["tenancy.nest.dev/tenant-memory"], "2Gi");
    assert_eq!(shared["tenancy.nest.dev/tenant-pids"], "500");
    assert!(shared.get("tenancy.nest.dev/tenant-cpu").is_none(), "the tenant's own never goes down");
    assert_eq!(shared["note"], "kept");
    let unset = annotations(&mapping());
    for annotation in crate::compute::SHARE_ANNOTATIONS {
        assert!(unset.get(annotation).is_none(), "{annotation}: the node's defaults unless the admin says");
    }
    // Only pods carry it.
    let configmaps = kinds.iter().find(|k| k.name == "configmaps").unwrap();
    let down = (configmaps.down)(&pod, &Mapping { share: &share, ..mapping() }).unwrap();
    assert!(down["metadata"]["annotations"].get("tenancy.nest.dev/tenant-memory").is_none());
}

#[test]
fn only_pods_count_against_the_quota_and_a_new_one_counts_with_its_defaults() {
    let kinds = built_in();
    for kind in &kinds {
        assert_eq!(kind.usage.is_some(), kind.name == "pods", "{}", kind.name);
    }
    let usage = kinds.iter().find(|k| k.name == "pods").unwrap().usage.unwrap();
    let pod = json!({"spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}});
    assert_eq!(usage(&pod, None).get("limits.memory"), 0.0, "as it is: made before any LimitRange");
    let defaults = crate::compute::Defaults::default();
    assert_eq!(usage(&pod, Some(&defaults)).get("limits.memory"), 512.0 * 1024.0 * 1024.0);
    let done = json!({"spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Succeeded"}});
    assert_eq!(usage(&done, None).get("pods"), 0.0);
}

#[test]
fn ephemeral_claims_go_down_as_synced_claims_do() {
    let claim = json!({
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "fast", "volumeMode": "Filesystem",
        "volumeName": "pvc-of-another-tenant", "selector": {"matchLabels": {"tenant": "acme"}},
        "dataSource": {"kind": "PersistentVolumeClaim", "name": "acme-data"},
        "dataSourceRef": {"kind": "VolumeSnapshot", "name": "acme-snapshot", "namespace": "acme"},
    });
    let wanted = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                        "storageClassName": "fast", "volumeMode": "Filesystem"});
    let spec = json!({"containers": [{"name": "c", "image": "i"}], "volumes": [{"name": "scratch", "ephemeral": {
        "volumeClaimTemplate": {
            "metadata": {"labels": {"tenancy.nest.dev/cluster": "acme-key", "app": "x"},
                         "annotations": {"transparency.tenancy.nest.dev/a": "b"}, "name": "ignored"},
            "spec": claim}}}]});
    let down = pod_down(spec, &mapping());
    let template = &down["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"];
    assert_eq!(template, &json!({"metadata": {"labels": {"app": "x"}}, "spec": wanted}));
    // A synced claim, the same way.
    let kinds = built_in();
    let claims = kinds.iter().find(|k| k.name == "persistentvolumeclaims").unwrap();
    let object = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c", "uid": "u"},
                        "spec": claim});
    assert_eq!((claims.down)(&object, &mapping()).unwrap()["spec"], wanted);
}

#[test]
fn numbers_go_down_within_what_the_api_takes_and_the_platforms_caps() {
    let container = |grace: Value, sleep: Value| {
        json!({"name": "c", "image": "i",
               "livenessProbe": {"tcpSocket": {"port": 80}, "terminationGracePeriodSeconds": grace},
               "startupProbe": {"tcpSocket": {"port": 80}, "terminationGracePeriodSeconds": 5},
               "lifecycle": {"preStop": {"sleep": {"seconds": sleep}}}})
    };
    let spec = json!({
        "terminationGracePeriodSeconds": i64::MAX, "activeDeadlineSeconds": i64::MAX,
        "tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": i64::MIN},
                        {"key": "k", "effect": "NoExecute", "tolerationSeconds": i64::MAX},
                        {"key": "k", "effect": "NoExecute"}],
        "containers": [container(json!(i64::MAX), json!(7200))],
        "initContainers": [container(json!(u64::MAX), json!(-1))],
    });
    let down = pod_down(spec, &mapping());
    let spec = &down["spec"];
    assert_eq!(spec["terminationGracePeriodSeconds"], 3600);
    assert_eq!(spec["activeDeadlineSeconds"], i32::MAX);
    assert_eq!(spec["tolerations"][0]["tolerationSeconds"], 0);
    assert_eq!(spec["tolerations"][1]["tolerationSeconds"], i64::MAX, "within int64 the API takes anything");
    assert!(spec["tolerations"][2].get("tolerationSeconds").is_none(), "nothing is added");
    for list in ["containers", "initContainers"] {
        let container = &spec[list][0];
        assert_eq!(container["livenessProbe"]["terminationGracePeriodSeconds"], 3600, "{list}");
        assert_eq!(container["startupProbe"]["terminationGracePeriodSeconds"], 5, "{list}");
    }
    assert_eq!(spec["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"], 3600, "within the grace period");
    assert_eq!(spec["initContainers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"], 0);

    // The platform admin's cap for the tenant, a negative grace period, floats and numbers past i64.
    let tight = Mapping { max_grace_period_seconds: 60, ..mapping() };
    let odd = json!({"terminationGracePeriodSeconds": -5, "activeDeadlineSeconds": 1e300,
                     "containers": [container(json!(-3), json!(1e300))]});
    let spec = &pod_down(odd, &tight)["spec"];
    assert_eq!(spec["terminationGracePeriodSeconds"], 1, "negative is 1, as the Pod conversion makes it");
    assert_eq!(spec["activeDeadlineSeconds"], i32::MAX);
    assert_eq!(spec["containers"][0]["livenessProbe"]["terminationGracePeriodSeconds"], 1);
    assert_eq!(spec["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"], 1);
    let spec = &pod_down(json!({"terminationGracePeriodSeconds": 600, "containers": []}), &tight)["spec"];
    assert_eq!(spec["terminationGracePeriodSeconds"], 60);
    let spec = &pod_down(json!({"terminationGracePeriodSeconds": 0, "containers": []}), &tight)["spec"];
    assert_eq!(spec["terminationGracePeriodSeconds"], 0, "zero stays: stop at once");
}

#[test]
fn a_super_pod_is_deleted_within_the_cap_whether_or_not_its_tenant_pod_is_there() {
    let super_pod = json!({"spec": {"terminationGracePeriodSeconds": i64::MAX}});
    let deleting = |grace: Value| json!({"metadata": {"deletionGracePeriodSeconds": grace}});
    assert_eq!(delete_grace(Some(&deleting(json!(30))), &super_pod, 3600), Some(30));
    assert_eq!(delete_grace(Some(&deleting(json!(0))), &super_pod, 3600), Some(0));
    assert_eq!(delete_grace(Some(&deleting(json!(i64::MAX))), &super_pod, 3600), Some(3600));
    assert_eq!(delete_grace(Some(&deleting(json!(1u64 << 32))), &super_pod, 3600), Some(3600), "never wrapped to 0");
    assert_eq!(delete_grace(Some(&deleting(json!(-1))), &super_pod, 3600), Some(0));
    // The tenant pod gone (a forced delete): the super pod's spec, held to the cap, not left to the API server.
    assert_eq!(delete_grace(None, &super_pod, 3600), Some(3600));
    assert_eq!(delete_grace(None, &json!({"spec": {"terminationGracePeriodSeconds": 30}}), 3600), Some(30));
    assert_eq!(delete_grace(Some(&json!({"metadata": {}})), &json!({"spec": {}}), 3600), None, "not a pod");
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
    assert_eq!(down["metadata"]["labels"]["tenancy.nest.dev/cluster"], "default-abcde-a", "the tenant cannot forge it");
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
    assert_eq!((configmaps.super_name)("nest-kube-root-ca.crt"), None, "a tenant ConfigMap would take the CA's place");
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
