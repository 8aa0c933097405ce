//! A tenant's share of the node (issue 33, item 3), tried by demo's admin with kubectl on `nest up --tenant-memory
//! 256Mi`: a pod that takes memory without end, with a limit of its own far above what its tenant may have, is
//! OOM-killed inside demo's cgroup share; a pod that writes past its `emptyDir`'s `sizeLimit` is evicted in the
//! kubelet's words, and its volume emptied; a pod that writes past its claim's capacity is evicted too. acme's pod and
//! both control planes keep running, and demo's directories go with its last pod.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::platform::{Platform, Who};
use crate::common::eventually;

/// The memory all of a tenant's pods may take together on this `nest up`'s node.
const TENANT_MEMORY: u64 = 256 << 20;

/// What restricted Pod Security asks of every pod and container.
fn restricted(name: &str, container: Value, volumes: Value) -> Value {
    let mut container = container;
    container["securityContext"] = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
            "volumes": volumes,
        },
    })
}

/// The management copy of demo's pod `name` (the platform admin's view).
fn management_pod(platform: &Platform, name: &str) -> Value {
    let pods = platform.json(Who::Admin, &["get", "pods", "-A", "-l", "tenancy.nest.dev/cluster"]);
    let found = pods["items"].as_array().unwrap().iter().find(|p| {
        p["metadata"]["annotations"]["tenancy.nest.dev/name"] == name
            && p["metadata"]["annotations"]["tenancy.nest.dev/namespace"] == "default"
    });
    found.unwrap_or_else(|| panic!("no management copy of demo's pod {name}")).clone()
}

/// The memory cgroup hierarchy, its limit file, and the file telling how far usage went.
fn memory_hierarchy() -> (PathBuf, &'static str, &'static str) {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        ("/sys/fs/cgroup".into(), "memory.max", "memory.peak")
    } else {
        ("/sys/fs/cgroup/memory".into(), "memory.limit_in_bytes", "memory.max_usage_in_bytes")
    }
}

/// The tenant directories (`nest/<node tag>/tenants/<key>`) of the memory hierarchy holding a cgroup of pod `uid`.
fn tenant_dirs_with(key: &str, uid: &str) -> Vec<PathBuf> {
    let (hierarchy, _, _) = memory_hierarchy();
    let nodes = std::fs::read_dir(hierarchy.join("nest")).into_iter().flatten().flatten();
    nodes.map(|node| node.path().join("tenants").join(key)).filter(|tenant| tenant.join(uid).is_dir()).collect()
}

/// The most memory the cgroup `dir` (and everything beneath it) has held at once.
fn peak(dir: &Path) -> u64 {
    let (_, _, file) = memory_hierarchy();
    std::fs::read_to_string(dir.join(file)).unwrap_or_default().trim().parse().unwrap_or(0)
}

#[test]
fn a_tenant_takes_no_more_than_its_share_of_the_node() {
    let platform = Platform::with_images(&["--tenant-memory", "256Mi"]);
    let web = json!({"name": "web", "image": "nest", "args": ["debug", "http-echo", "--listen", "0.0.0.0:8080"]});
    platform.create(Who::Acme, &restricted("web", web, json!([])));

    // demo's admin asks for 4 GiB (over any default the tenant would get) and takes 3,000 MiB.
    let hog = json!({
        "name": "hog", "image": "nest", "args": ["debug", "allocate", "--mebibytes", "3000"],
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "4Gi"}},
    });
    platform.create(Who::Demo, &restricted("hog", hog, json!([])));
    // And writes 8 MiB into an emptyDir of 1 MiB.
    let write = "open('/scratch/f', 'wb').write(b'x' * (8 << 20))\nprint('written', flush=True)\n\
                 import time\ntime.sleep(3600)";
    let filler = json!({
        "name": "filler", "image": "python", "command": ["python3", "-c", write],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
    });
    platform.create(
        Who::Demo,
        &restricted("filler", filler, json!([{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}])),
    );

    // And 8 MiB into a claim of 1 MiB.
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
    });
    platform.create(Who::Demo, &claim);
    let hoarder = json!({
        "name": "hoarder", "image": "python", "command": ["python3", "-c", write.replace("/scratch", "/data")],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    });
    let volumes = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]);
    platform.create(Who::Demo, &restricted("hoarder", hoarder, volumes));

    // The hog is killed for memory, as its own container, though its own limit was not reached.
    eventually(240, "demo's hog OOMKilled", || {
        let pod = platform.json(Who::Demo, &["get", "pod", "hog"]);
        let status = &pod["status"]["containerStatuses"][0];
        status["lastState"]["terminated"]["reason"] == "OOMKilled"
            || status["state"]["terminated"]["reason"] == "OOMKilled"
    });
    // Inside demo's share: its cgroup is beneath demo's directory, whose limit is the tenant's and was hit.
    let hog = management_pod(&platform, "hog");
    let key = hog["metadata"]["labels"]["tenancy.nest.dev/cluster"].as_str().unwrap().to_string();
    let uid = hog["metadata"]["uid"].as_str().unwrap().to_string();
    let tenants = tenant_dirs_with(&key, &uid);
    assert_eq!(tenants.len(), 1, "demo's hog is not beneath one directory of demo's: {tenants:?}");
    let tenant = &tenants[0];
    let (_, limit_file, _) = memory_hierarchy();
    let limit = std::fs::read_to_string(tenant.join(limit_file)).unwrap();
    assert_eq!(limit.trim(), TENANT_MEMORY.to_string(), "demo's share in {}", tenant.display());
    // (v1 counts the kill in the victim's own cgroup, and this kernel no `failcnt`: the peak says it.)
    // (The kernel may charge a page or a batch past the limit before it reclaims: up to 64 pages.)
    let peaked = peak(tenant);
    assert!(
        (TENANT_MEMORY..=TENANT_MEMORY + (256 << 10)).contains(&peaked),
        "demo's share was not what held it: {} peaked at {peaked}",
        tenant.display()
    );

    // The filler is evicted as the kubelet evicts, and its volume emptied.
    let message = "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ";
    eventually(120, "demo's filler Evicted", || {
        let pod = platform.json(Who::Demo, &["get", "pod", "filler"]);
        pod["status"]["phase"] == "Failed" && pod["status"]["reason"] == "Evicted"
    });
    let filler = platform.json(Who::Demo, &["get", "pod", "filler"]);
    assert_eq!(filler["status"]["message"], message);
    eventually(60, "the Evicted event in demo", || {
        let events = platform.json(Who::Demo, &["get", "events", "--field-selector", "involvedObject.name=filler"]);
        events["items"].as_array().unwrap().iter().any(|e| e["reason"] == "Evicted" && e["message"] == message)
    });
    let filler_uid = management_pod(&platform, "filler")["metadata"]["uid"].as_str().unwrap().to_string();
    let scratch = platform.data.path().join("nodes/nest-node-0/pods").join(&filler_uid).join("volumes/scratch");
    eventually(30, "the evicted pod's emptyDir emptied", || !scratch.exists());

    // The hoarder is evicted for its claim; the claim keeps its files.
    let message =
        "Usage of PersistentVolumeClaim volume \"data\" (claim \"data\") exceeds the claim's capacity \"1Mi\". ";
    eventually(180, "demo's hoarder Evicted", || {
        let pod = platform.json(Who::Demo, &["get", "pod", "hoarder"]);
        pod["status"]["reason"] == "Evicted" && pod["status"]["message"] == message
    });
    eventually(60, "the hoarder's Evicted event in demo", || {
        let events = platform.json(Who::Demo, &["get", "events", "--field-selector", "involvedObject.name=hoarder"]);
        events["items"].as_array().unwrap().iter().any(|e| e["reason"] == "Evicted" && e["message"] == message)
    });

    // acme's pod ran through it all, and every control plane serves.
    let web = platform.json(Who::Acme, &["get", "pod", "web"]);
    assert_eq!(web["status"]["phase"], "Running", "{web}");
    assert_eq!(web["status"]["containerStatuses"][0]["restartCount"], 0, "{web}");
    platform.assert_serving();

    // demo's last pods gone, its directories go.
    platform.ok(Who::Demo, &["delete", "pod", "hog", "filler", "hoarder", "--wait", "--timeout=120s"]);
    eventually(60, "demo's cgroup directory removed", || !tenant.exists());
    platform.finish();
}
