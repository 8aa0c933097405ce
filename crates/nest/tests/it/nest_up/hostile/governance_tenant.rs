//! What a tenant's pods may take of the management cluster (issue 33, item 3), tried by demo's admin with kubectl:
//! pods past the quota the platform admin gave demo (`tenancy.nest.dev/quota-pods` on its Cluster) are told why and
//! never reach the management cluster, while acme's pods still do; a pod that says nothing of its resources gets
//! demo's defaults there (the LimitRange the syncer keeps in each of demo's namespaces, which demo cannot touch); the
//! platform admin's share of the node for demo rides on demo's pods, and acme's own claim to one does not; and every
//! tenant control-plane pod asks for, and is held to, resources of its own.

use std::time::Duration;

use serde_json::{Value, json};

use super::platform::{Platform, Who, restricted_pod};
use crate::common::eventually;

/// The management namespace of `tenant`'s namespace `default` (the platform admin's view), once the syncer made it.
fn super_namespace(platform: &Platform, tenant: &str) -> Option<String> {
    let namespaces = platform.json(Who::Admin, &["get", "namespaces", "-l", "tenancy.nest.dev/cluster"]);
    namespaces["items"].as_array()?.iter().find_map(|n| {
        let annotations = &n["metadata"]["annotations"];
        (annotations["tenancy.nest.dev/cluster-name"] == format!("default/{tenant}")
            && annotations["tenancy.nest.dev/namespace"] == "default")
            .then(|| n["metadata"]["name"].as_str().unwrap_or_default().to_string())
    })
}

/// The management copy of `tenant`'s object `kind/name` in its namespace `default`.
fn management_copy(platform: &Platform, tenant: &str, kind: &str, name: &str) -> Option<Value> {
    let namespace = super_namespace(platform, tenant)?;
    let out = platform.kubectl(Who::Admin, &["get", kind, name, "-n", &namespace, "-o", "json"]);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// The messages of the SyncFailed Events demo was told about its pod `name`.
fn sync_failures(platform: &Platform, name: &str) -> Vec<String> {
    let selector = format!("involvedObject.name={name}");
    let events = platform.json(Who::Demo, &["get", "events", "--field-selector", &selector]);
    let failures = events["items"].as_array().into_iter().flatten().filter(|e| e["reason"] == "SyncFailed");
    failures.filter_map(|e| e["message"].as_str().map(str::to_string)).collect()
}

#[test]
fn a_tenant_takes_no_more_than_its_platform_admin_gives_it() {
    let platform = Platform::start(&[]);

    // Every tenant control-plane pod asks for what it takes and is held to a memory limit (the defaults of the nest
    // flavor: nobody set the components' resources).
    for (pod, cpu, memory, limit) in [
        ("demo-apiserver-0", "10m", "32Mi", "1Gi"),
        ("demo-controller-manager-0", "5m", "16Mi", "512Mi"),
        ("acme-apiserver-0", "10m", "32Mi", "1Gi"),
        ("acme-controller-manager-0", "5m", "16Mi", "512Mi"),
    ] {
        let spec = platform.json(Who::Admin, &["get", "pod", pod, "-n", "default"])["spec"].clone();
        let resources = &spec["containers"][0]["resources"];
        assert_eq!(resources["requests"], json!({"cpu": cpu, "memory": memory}), "{pod}: {resources}");
        assert_eq!(resources["limits"], json!({"memory": limit}), "{pod}: {resources}");
    }

    // The platform admin gives demo three pods and a share of the node.
    platform.ok(
        Who::Admin,
        &["annotate", "cluster", "demo", "tenancy.nest.dev/quota-pods=3", "tenancy.nest.dev/tenant-memory=2Gi"],
    );
    // The syncer looks at its tenants' Clusters at least every 2 s.
    std::thread::sleep(Duration::from_secs(3));

    // A pod that says nothing of its resources gets demo's defaults in the management cluster.
    platform.create(Who::Demo, &restricted_pod("bare"));
    let mut copy = Value::Null;
    eventually(60, "demo's pod bare in the management cluster", || {
        copy = management_copy(&platform, "demo", "pod", "bare").unwrap_or(Value::Null);
        !copy.is_null()
    });
    assert_eq!(
        copy["spec"]["containers"][0]["resources"],
        json!({"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "10m", "memory": "32Mi"}}),
        "the LimitRange's defaults"
    );
    assert!(copy["metadata"]["annotations"]["kubernetes.io/limit-ranger"].is_string(), "{}", copy["metadata"]);
    assert_eq!(copy["metadata"]["annotations"]["tenancy.nest.dev/tenant-memory"], "2Gi", "demo's share of the node");
    let namespace = super_namespace(&platform, "demo").unwrap();
    let range = platform.json(Who::Admin, &["get", "limitrange", "nest-tenant-defaults", "-n", &namespace]);
    assert_eq!(range["spec"]["limits"][0]["default"]["memory"], "512Mi");
    // demo's own cluster has no such object: it is the management cluster's.
    let own = platform.json(Who::Demo, &["get", "limitranges", "-A"]);
    assert_eq!(own["items"].as_array().map(Vec::len), Some(0), "{own}");

    // demo's admin makes pods until the quota is passed: three go down, the rest are refused in the words of
    // upstream's ResourceQuota and go nowhere. (Two, then two more: the syncer's workers take pods made at once in
    // any order.)
    for name in ["second", "third"] {
        platform.create(Who::Demo, &restricted_pod(name));
    }
    for name in ["second", "third"] {
        eventually(60, &format!("demo's pod {name} in the management cluster"), || {
            management_copy(&platform, "demo", "pod", name).is_some()
        });
    }
    for name in ["fourth", "fifth"] {
        platform.create(Who::Demo, &restricted_pod(name));
    }
    let refusal = "exceeded quota: nest-tenant-quota, requested: pods=1, used: pods=3, limited: pods=3";
    for name in ["fourth", "fifth"] {
        eventually(60, &format!("a SyncFailed Event on {name} with the quota's words"), || {
            sync_failures(&platform, name).iter().any(|m| m.contains(refusal))
        });
    }
    // Past a patrol's worth of tries (every 60 s, and on every change), still nothing of them went down.
    std::thread::sleep(Duration::from_secs(5));
    for name in ["fourth", "fifth"] {
        assert!(management_copy(&platform, "demo", "pod", name).is_none(), "{name} went down past the quota");
        let phase = platform.json(Who::Demo, &["get", "pod", name])["status"]["phase"].clone();
        assert_eq!(phase, "Pending", "{name} is not running anywhere");
    }
    let messages = sync_failures(&platform, "fourth");
    eprintln!("demo was told: {messages:?}");

    // acme is not held by demo's quota, and its own claim to a share of the node never reaches it.
    let mut acme = restricted_pod("neighbour");
    acme["metadata"]["annotations"] = json!({"tenancy.nest.dev/tenant-memory": "64Gi"});
    platform.create(Who::Acme, &acme);
    let mut copy = Value::Null;
    eventually(60, "acme's pod in the management cluster", || {
        copy = management_copy(&platform, "acme", "pod", "neighbour").unwrap_or(Value::Null);
        !copy.is_null()
    });
    assert!(
        copy["metadata"]["annotations"].get("tenancy.nest.dev/tenant-memory").is_none(),
        "a tenant's own share annotation went down: {}",
        copy["metadata"]["annotations"]
    );
    for name in ["second", "third", "fourth", "fifth"] {
        platform.create(Who::Acme, &restricted_pod(name));
    }
    for name in ["second", "third", "fourth", "fifth"] {
        eventually(60, &format!("acme's pod {name} in the management cluster"), || {
            management_copy(&platform, "acme", "pod", name).is_some()
        });
    }

    // Room again: once one of demo's pods is gone, a waiting one goes down (at the latest with the next patrol).
    platform.ok(Who::Demo, &["delete", "pod", "second", "--wait=true"]);
    eventually(120, "one of demo's waiting pods in the management cluster", || {
        ["fourth", "fifth"].iter().filter(|name| management_copy(&platform, "demo", "pod", name).is_some()).count() == 1
    });

    platform.assert_serving();
    platform.finish();
}
