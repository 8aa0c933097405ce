//! What the syncer copies down (issue 33, the rest of the audit's list), attacked by demo's admin with kubectl: the
//! metadata only the management cluster may write, ephemeral claims that name volumes, grace periods without end,
//! Endpoints that aim the management cluster's proxy at what no tenant may reach, and idle connections held on the
//! tenant's kubelet endpoint. acme, the other tenant, is the victim: its pods and control plane stay unreached.

use std::io::Read as _;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::platform::{Platform, Who, restricted_pod};
use crate::common::eventually;

/// The address of tenant pod `name` once it runs.
fn running_address(platform: &Platform, who: Who, name: &str) -> String {
    let mut address = String::new();
    eventually(120, &format!("{who:?}'s pod {name} Running with an address"), || {
        let pod = platform.json(who, &["get", "pod", name]);
        address = pod["status"]["podIP"].as_str().unwrap_or_default().to_string();
        pod["status"]["phase"] == "Running" && !address.is_empty()
    });
    address
}

/// The management copy of tenant object `kind/name` in tenant namespace `default`, found by the annotations the
/// syncer puts on it (the platform admin's view).
fn management_copy(platform: &Platform, tenant: &str, kind: &str, name: &str) -> Option<Value> {
    let namespaces = platform.json(Who::Admin, &["get", "namespaces", "-l", "tenancy.nest.dev/cluster"]);
    let namespace = namespaces["items"].as_array()?.iter().find_map(|n| {
        let annotations = &n["metadata"]["annotations"];
        (annotations["tenancy.nest.dev/cluster-name"] == format!("default/{tenant}")
            && annotations["tenancy.nest.dev/namespace"] == "default")
            .then(|| n["metadata"]["name"].as_str().unwrap_or_default().to_string())
    })?;
    let out = platform.kubectl(Who::Admin, &["get", kind, name, "-n", &namespace, "-o", "json"]);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// Whether demo was told, by a SyncFailed Event on `name`, a refusal containing `needle`.
fn told(platform: &Platform, name: &str, needle: &str) -> bool {
    let selector = format!("involvedObject.name={name}");
    let events = platform.json(Who::Demo, &["get", "events", "--field-selector", &selector]);
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["reason"] == "SyncFailed" && e["message"].as_str().is_some_and(|m| m.contains(needle)))
}

/// A Service without a selector and its Endpoints at `address`, as demo's admin writes them.
fn endpoints_to(name: &str, address: &str) -> String {
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                         "spec": {"ports": [{"port": 443}]}});
    let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name},
                           "subsets": [{"addresses": [{"ip": address}], "ports": [{"port": 443}]}]});
    format!("{service}\n{endpoints}\n")
}

#[test]
fn what_a_tenant_writes_goes_down_only_as_far_as_the_management_cluster_allows() {
    let platform = Platform::start(&[]);
    // The platform admin holds acme's pods to a minute of grace.
    platform.ok(Who::Admin, &["annotate", "cluster", "acme", "tenancy.nest.dev/cap-pods-grace-period-seconds=60"]);
    // The syncer looks at its tenants' Clusters at least every 2 s.
    std::thread::sleep(Duration::from_secs(3));

    // The victims: a pod of acme, and acme's API server.
    let mut victim = restricted_pod("victim");
    victim["spec"]["terminationGracePeriodSeconds"] = json!(600);
    platform.create(Who::Acme, &victim);
    let victim_address = running_address(&platform, Who::Acme, "victim");
    let management_pods = platform.json(Who::Admin, &["get", "pods", "-A"]);
    let control_plane = management_pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("acme-apiserver"))
                && p["status"]["podIP"].as_str().is_some_and(|ip| !ip.is_empty())
        })
        .map(|p| p["status"]["podIP"].as_str().unwrap().to_string())
        .expect("acme's API server pod, with an address");
    let api_server = platform.ok(Who::Admin, &["get", "service", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"]);
    let management_service = format!("{}.0.77", api_server.rsplitn(3, '.').last().unwrap());

    // demo's own pod, and one that asks for what only the management cluster may say, a grace period without end
    // and an ephemeral claim that names a volume, another tenant's selector and a data source.
    platform.create(Who::Demo, &restricted_pod("own"));
    let own_address = running_address(&platform, Who::Demo, "own");
    let forger = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "forger",
            "labels": {"app": "forger", "transparency.tenancy.nest.dev/zone": "forged"},
            "annotations": {"transparency.tenancy.nest.dev/ingress-class": "forged", "note": "kept"}},
        "spec": {
            "terminationGracePeriodSeconds": i64::MAX,
            "runtimeClassName": "nest-simulated",
            "containers": [{"name": "c", "image": "registry.invalid/none:1",
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                "metadata": {"labels": {"tenancy.nest.dev/cluster": "someone-else", "app": "forger"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}},
                         "volumeName": "pvc-of-acme", "selector": {"matchLabels": {"tenant": "acme"}},
                         "dataSource": {"kind": "PersistentVolumeClaim", "name": "acme-data"}}}}}],
        },
    });
    platform.create(Who::Demo, &forger);
    let mut copy = Value::Null;
    eventually(60, "the forger's pod in the management cluster", || {
        copy = management_copy(&platform, "demo", "pod", "forger").unwrap_or(Value::Null);
        !copy.is_null()
    });
    let metadata = &copy["metadata"];
    for field in ["labels", "annotations"] {
        let keys: Vec<&String> = metadata[field].as_object().unwrap().keys().collect();
        assert!(!keys.iter().any(|k| k.starts_with("transparency.")), "{field} copied down: {keys:?}");
    }
    assert_eq!(metadata["annotations"]["note"], "kept");
    assert_eq!(copy["spec"]["terminationGracePeriodSeconds"], 3600, "the default cap");
    let template = &copy["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"];
    assert_eq!(
        template["spec"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["accessModes", "resources"],
        "only what the claim asks for: {template}"
    );
    assert_eq!(template["metadata"]["labels"], json!({"app": "forger"}));
    let victim_copy = management_copy(&platform, "acme", "pod", "victim").expect("acme's pod down");
    assert_eq!(victim_copy["spec"]["terminationGracePeriodSeconds"], 60, "acme's cap");

    // Endpoints aimed where demo may not go: each refused by name, none copied down; its own pod's address is.
    let mut manifest = endpoints_to("mine", &own_address);
    let attacks = [
        ("mapped-loopback", "::ffff:127.0.0.1".to_string(), "(127.0.0.1) is a loopback address"),
        ("bridge", "10.128.0.1".to_string(), "is the address of the syncer's kubelet endpoints"),
        ("neighbour", victim_address.clone(), "not the address of one of this tenant's pods"),
        ("mapped-neighbour", format!("::ffff:{victim_address}"), "not the address of one of this tenant's pods"),
        // Labelled as acme's by its provider, or unknown to the syncer: refused either way.
        ("control-plane", control_plane.clone(), "not the address of one of this tenant's pods"),
        ("service", management_service.clone(), "is in the management cluster's Service range"),
        ("nobody", "10.128.250.250".to_string(), "in the pod range but not the address of one of this tenant's pods"),
    ];
    for (name, address, _) in &attacks {
        manifest.push_str(&endpoints_to(name, address));
    }
    let out = platform.with_input(Who::Demo, &["create", "-f", "-"], &manifest);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eventually(60, "demo's Endpoints to its own pod down", || {
        management_copy(&platform, "demo", "endpoints", "mine").is_some()
    });
    for (name, address, why) in &attacks {
        if stderr.contains(&format!("\"{name}\" is invalid")) {
            // Refused by demo's own API server already (as kube-apiserver refuses loopback addresses).
            continue;
        }
        let needle = format!("{address:?}");
        eventually(60, &format!("a SyncFailed Event naming {address} ({name})"), || {
            told(&platform, name, &needle) && told(&platform, name, why)
        });
        assert!(management_copy(&platform, "demo", "endpoints", name).is_none(), "{name} ({address}) went down");
    }

    // An address allowed once stops being allowed when its pod is gone: the copy goes at the next patrol, so that
    // the address, given to another pod, never carries demo's traffic there.
    platform.create(Who::Demo, &restricted_pod("moving"));
    let moving = running_address(&platform, Who::Demo, "moving");
    let out = platform.with_input(Who::Demo, &["create", "-f", "-"], &endpoints_to("stale", &moving));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eventually(60, "the Endpoints to demo's moving pod down", || {
        management_copy(&platform, "demo", "endpoints", "stale").is_some()
    });
    platform.ok(Who::Demo, &["delete", "pod", "moving", "--wait=true"]);
    eventually(120, "the stale Endpoints removed from the management cluster", || {
        management_copy(&platform, "demo", "endpoints", "stale").is_none()
    });

    // demo's kubelet endpoint (its virtual node's InternalIP and port): 400 connections from one address that never
    // speak. Past the cap of an address they are closed as accepted; the rest within the handshake deadline; and
    // meanwhile demo's admin still reads logs through it.
    let node = platform.json(Who::Demo, &["get", "nodes", "-l", "tenancy.nest.dev/virtual-node"]);
    let node = &node["items"][0]["status"];
    let ip = node["addresses"].as_array().unwrap().iter().find(|a| a["type"] == "InternalIP").unwrap()["address"]
        .as_str()
        .unwrap()
        .to_string();
    let port = u16::try_from(node["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64().unwrap()).unwrap();
    let target = SocketAddr::new(ip.parse().unwrap(), port);
    let logs = platform.ok(Who::Demo, &["logs", "own"]);
    assert!(logs.contains("simulated"), "logs through the kubelet endpoint before the flood: {logs}");
    let began = Instant::now();
    let held: Vec<TcpStream> =
        (0..400).filter_map(|_| TcpStream::connect_timeout(&target, Duration::from_secs(2)).ok()).collect();
    assert!(held.len() > 300, "the connections were accepted by the kernel: {}", held.len());
    std::thread::sleep(Duration::from_millis(500));
    let closed_at_once = held.iter().filter(|s| closed(s, Duration::from_millis(10))).count();
    assert!(closed_at_once >= held.len() - 256, "{closed_at_once} of {} closed over the cap", held.len());
    eprintln!("{} connections held, {closed_at_once} closed at once", held.len());
    let logs = platform.ok(Who::Demo, &["logs", "own"]);
    assert!(logs.contains("simulated"), "logs through the kubelet endpoint during the flood: {logs}");
    for (i, stream) in held.iter().enumerate() {
        let deadline = Duration::from_secs(20).saturating_sub(began.elapsed());
        assert!(closed(stream, deadline.max(Duration::from_millis(10))), "connection {i} still open after 20 s");
    }

    platform.assert_serving();
    assert_eq!(platform.json(Who::Acme, &["get", "pod", "victim"])["status"]["phase"], "Running");
    platform.finish();
}

/// Whether the server has closed `stream` (which never sent anything), waiting at most `wait`.
fn closed(stream: &TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait.max(Duration::from_millis(1)))).unwrap();
    let mut buffer = [0u8; 256];
    let mut reader = stream;
    match reader.read(&mut buffer) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => !matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}
