//! Issue 17's escapes, tried on `nest up` from inside its demo tenant as the tenant's admin would: every pod that
//! really runs runs in a sandbox (its own user, mount and PID namespaces, none of the host's files), a container over
//! its memory limit is `OOMKilled` and restarted, paths that climb out of a volume are refused (by the tenant's API
//! server, as kube-apiserver refuses them), and a "node" started inside a pod cannot start anything.
//!
//! Its own test binary: `nest up`'s node has fixed addresses, so no other `nest up` may run beside it.

use crate::common;

use std::path::Path;

use crate::common::up::{demo_tenant, kubectl, processes_with, stop, up};
use crate::common::{Cases, eventually};

fn json(kubeconfig: &Path, cache: &Path, args: &[&str]) -> serde_json::Value {
    let out = kubectl(kubeconfig, cache, &[args, &["-o", "json"]].concat());
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// The pod's first container's status, in the tenant.
fn container(kubeconfig: &Path, cache: &Path, pod: &str) -> serde_json::Value {
    json(kubeconfig, cache, &["get", "pod", pod])["status"]["containerStatuses"][0].clone()
}

/// The namespaces (`/proc/<pid>/ns/<kind>` links) process `pid` is in.
fn namespace(pid: &str, kind: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).map(|l| l.display().to_string()).unwrap_or_default()
}

#[test]
fn a_tenant_admins_pods_run_in_sandboxes_that_keep_the_host_out_of_reach() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (child, _) = up(data.path());
    let admin = data.path().join("admin.kubeconfig");
    let demo = demo_tenant(data.path(), cache.path());

    let marker = format!("sandbox-test-{}", std::process::id());
    let host_files = [
        "../../../../admin.kubeconfig".to_string(),
        "../../../../pki/ca.key".to_string(),
        "/etc/shadow".to_string(),
        admin.display().to_string(),
    ];
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: thief}}
spec:
  containers:
  - name: main
    image: nest
    args: [debug, cat, {files}, --env, {marker}]
---
apiVersion: v1
kind: Pod
metadata: {{name: hog}}
spec:
  containers:
  - name: main
    image: nest
    args: [debug, allocate, --mebibytes, "512"]
    resources: {{limits: {{memory: 64Mi}}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: bait}}
data: {{k: planted}}
---
apiVersion: v1
kind: Pod
metadata: {{name: inner-node}}
spec:
  containers:
  - name: main
    image: nest
    args: [node, --kubeconfig, /k/value, --name, fake, --runtime, process, --data-dir, /tmp/node,
           --pod-cidr, 127.201.0.0/16, --kubelet-port, "0"]
    volumeMounts: [{{name: k, mountPath: /k}}]
  volumes: [{{name: k, secret: {{secretName: own-cluster}}}}]
"#,
        files = host_files.join(", ")
    );
    let file = cache.path().join("attacks.yaml");
    std::fs::write(&file, manifest).unwrap();
    let secret = kubectl(
        &demo,
        cache.path(),
        &["create", "secret", "generic", "own-cluster", &format!("--from-file=value={}", demo.display())],
    );
    assert!(secret.status.success(), "{}", String::from_utf8_lossy(&secret.stderr));
    let applied = kubectl(&demo, cache.path(), &["apply", "-f", &file.display().to_string()]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    // A path climbing out of its volume: the tenant's API server refuses it, as kube-apiserver does.
    let climber = cache.path().join("climber.yaml");
    std::fs::write(
        &climber,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: climber}}\nspec:\n  containers:\n  - {{name: main, image: nest, \
             args: [debug, cat, /v/k], volumeMounts: [{{name: v, mountPath: /v}}]}}\n  volumes:\n  - {{name: v, configMap: \
             {{name: bait, items: [{{key: k, path: ../../../../../../{marker}}}]}}}}\n"
        ),
    )
    .unwrap();
    let refused = kubectl(&demo, cache.path(), &["apply", "-f", &climber.display().to_string()]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("items[0].path"), "{said}");
    // So are an absolute items[].path and ConfigMap keys that are paths, with kube-apiserver's messages.
    let absolute = cache.path().join("absolute.yaml");
    std::fs::write(
        &absolute,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: absolute}}\nspec:\n  containers:\n  - {{name: main, image: nest, \
             args: [debug, cat, /v/k]}}\n  volumes:\n  - {{name: v, configMap: {{name: bait, items: [{{key: k, path: \
             /var/lib/{marker}}}]}}}}\n"
        ),
    )
    .unwrap();
    let refused = kubectl(&demo, cache.path(), &["create", "-f", &absolute.display().to_string()]);
    let said = String::from_utf8_lossy(&refused.stderr);
    let expected = format!(
        r#"spec.volumes[0].configMap.items[0].path: Invalid value: "/var/lib/{marker}": must be a relative path"#
    );
    assert!(!refused.status.success() && said.contains(&expected), "{said}");
    for key in ["../../x", "/var/lib/x"] {
        let keyed = cache.path().join("keyed.yaml");
        std::fs::write(
            &keyed,
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: keyed}}\ndata: {{'{key}': planted}}\n"),
        )
        .unwrap();
        let refused = kubectl(&demo, cache.path(), &["create", "-f", &keyed.display().to_string()]);
        let said = String::from_utf8_lossy(&refused.stderr);
        let expected = format!(
            r#"data[{key}]: Invalid value: "{key}": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"#
        );
        assert!(!refused.status.success() && said.contains(&expected), "{key}: {said}");
        assert!(said.contains(r#"The ConfigMap "keyed" is invalid"#), "{said}");
        let climbs = format!(r#"data[{key}]: Invalid value: "{key}": must not start with '..'"#);
        assert_eq!(said.contains(&climbs), key.starts_with(".."), "{key}: {said}");
    }

    // The host's files are not in the sandbox, by any path.
    let logs = |pod: &str| String::from_utf8_lossy(&kubectl(&demo, cache.path(), &["logs", pod]).stdout).to_string();
    let mut cases = Cases::new();
    cases.case("the host's files are not in the sandbox, by any path", || {
        eventually(90, "thief's output", || logs("thief").contains(&format!("${marker}=")));
        let printed = logs("thief");
        for file in &host_files {
            assert!(printed.contains(&format!("{file}: <No such file or directory")), "{file} was readable: {printed}");
        }
        // Its process, seen from the host: not root, and in namespaces of its own.
        let pids = processes_with(&marker);
        assert_eq!(pids.len(), 1, "thief's process: {pids:?}");
        let pid = pids[0].to_string();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let ids = |field: &str| -> Vec<u32> {
            let line = status.lines().find(|l| l.starts_with(field)).unwrap();
            line.split_whitespace().skip(1).map(|n| n.parse().unwrap()).collect()
        };
        assert!(ids("Uid:").iter().chain(&ids("Gid:")).all(|id| *id != 0), "thief runs as root on the host: {status}");
        for kind in ["pid", "mnt", "user", "ipc", "uts", "net"] {
            assert_ne!(namespace(&pid, kind), namespace("self", kind), "thief shares the host's {kind} namespace");
        }
    });

    cases.case("its network is its own", || {
    // Its network is its own: the host's loopback, where the management API server listens, is not in it; another
    // pod's address cannot be taken; a port below 1024 can; Services are reached through the node's bridge.
    let kubeconfig = std::fs::read_to_string(&admin).unwrap();
    let server = kubeconfig.lines().find_map(|l| l.trim().strip_prefix("server: https://")).unwrap().to_string();
    let field = |args: &[&str], path: &str| {
        let out =
            kubectl(&admin, cache.path(), &[args, &["-n", "default", "-o", &format!("jsonpath={path}")]].concat());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let other_pod = format!("{}:7000", field(&["get", "pod", "demo-apiserver-0"], "{.status.podIP}"));
    let service = format!("{}:6443", field(&["get", "service", "demo-apiserver"], "{.spec.clusterIP}"));
    let prober = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: prober}}\nspec:\n  containers:\n  - {{name: main, image: nest, \
         args: [debug, connect, '{server}', '{service}', --bind, '{other_pod}', --bind, '0.0.0.0:80']}}\n"
    );
    let file = cache.path().join("prober.yaml");
    std::fs::write(&file, prober).unwrap();
    let applied = kubectl(&demo, cache.path(), &["apply", "-f", &file.display().to_string()]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    eventually(90, "prober's output", || logs("prober").contains("0.0.0.0:80"));
    let printed = logs("prober");
    assert!(printed.contains(&format!("{server}: Connection refused")), "the host's loopback reached: {printed}");
    assert!(printed.contains(&format!("{service} connected")), "its API server's Service not reached: {printed}");
    assert!(printed.contains(&format!("{other_pod}: Cannot assign requested address")), "took an address: {printed}");
    assert!(printed.contains("0.0.0.0:80 bound"), "{printed}");
    });

    cases.case("over its memory limit it is OOMKilled and restarted", || {
        // Over its memory limit: killed by the kernel, reported OOMKilled, restarted.
        eventually(90, "hog OOMKilled and restarted", || {
            let status = container(&demo, cache.path(), "hog");
            status["lastState"]["terminated"]["reason"] == "OOMKilled" && status["restartCount"].as_i64() >= Some(1)
        });
        assert_eq!(container(&demo, cache.path(), "hog")["lastState"]["terminated"]["exitCode"], 137);
    });

    cases.case("nothing of the climber was written anywhere", || {
        // Nothing of the climber was written anywhere.
        let mut escaped = Vec::new();
        let mut dirs = vec![std::env::temp_dir(), data.path().to_path_buf(), "/run/nest".into()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_name().to_string_lossy().contains(&marker) {
                    escaped.push(entry.path());
                }
                let inside = entry.path().starts_with(data.path()) || entry.path().starts_with("/run/nest");
                if entry.file_type().is_ok_and(|t| t.is_dir()) && inside {
                    dirs.push(entry.path());
                }
            }
        }
        assert!(escaped.is_empty(), "files escaped their volume: {escaped:?}");
    });

    cases.case("claims: its own is bound and written; no other's is reached", || {
    // Claims: the tenant's own claim is bound (a local volume provisioned in the management cluster) and its pod
    // writes there; a claim name that is not a Bound claim of the pod's namespace — the demo control plane's own
    // data claim in the management cluster, by its name and by a path climbing to it, a claim of the tenant that is
    // never bound, and one that does not exist — leaves the pod Pending with a FailedMount Event, and mounts
    // nothing.
    let managed = json(&admin, cache.path(), &["get", "persistentvolumeclaims", "-n", "default"]);
    let foreign = managed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .find(|name| name.contains("demo"))
        .unwrap_or_else(|| panic!("no claim of demo's control plane: {managed}"))
        .to_string();
    let claims = cache.path().join("claims.yaml");
    let claim_pod = |name: &str, claim: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - {{name: main, image: nest, \
             args: [debug, http-echo, --listen, '127.0.0.1:0'], volumeMounts: [{{name: data, mountPath: /data}}]}}\n  \
             volumes:\n  - {{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}\n"
        )
    };
    std::fs::write(
        &claims,
        [
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: mine}\n\
             spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n"
                .to_string(),
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: unbound}\nspec: {accessModes: \
             [ReadWriteOnce], storageClassName: no-such-class, resources: {requests: {storage: 1Gi}}}\n"
                .to_string(),
            claim_pod("keeper", "mine"),
            claim_pod("borrower", &foreign),
            claim_pod("climber", &format!("../default/{foreign}")),
            claim_pod("waiter", "unbound"),
            claim_pod("dreamer", "no-such-claim"),
        ]
        .join("---\n"),
    )
    .unwrap();
    let applied = kubectl(&demo, cache.path(), &["apply", "-f", &claims.display().to_string()]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    eventually(90, "the tenant's claim Bound and its pod Running", || {
        let claim = json(&demo, cache.path(), &["get", "persistentvolumeclaim", "mine"]);
        let pod = json(&demo, cache.path(), &["get", "pod", "keeper"]);
        claim["status"]["phase"] == "Bound" && pod["status"]["phase"] == "Running"
    });
    // A name that is not one (`../default/…`) the node refuses outright, as a CreateContainerConfigError with the
    // kubelet's `Failed` Event; the others wait for their claim with a `FailedMount` Event.
    let climbing = format!("Error: volume \"data\": claimName \"../default/{foreign}\" is not a valid name");
    let refusals = [
        ("borrower", "FailedMount", "Unable to attach or mount volumes", "ContainerCreating"),
        ("climber", "Failed", climbing.as_str(), "CreateContainerConfigError"),
        ("waiter", "FailedMount", "Unable to attach or mount volumes", "ContainerCreating"),
        ("dreamer", "FailedMount", "Unable to attach or mount volumes", "ContainerCreating"),
    ];
    for (pod, reason, message, waiting) in refusals {
        eventually(60, &format!("{pod}'s {reason} event"), || {
            let events = crate::common::up::pod_events(&demo, cache.path(), &[], pod);
            events.iter().any(|(r, m)| r == reason && m.starts_with(message))
        });
        let status = json(&demo, cache.path(), &["get", "pod", pod])["status"].clone();
        assert_eq!(status["phase"], "Pending", "{pod}: {status}");
        assert_eq!(status["containerStatuses"][0]["state"]["waiting"]["reason"], waiting, "{status}");
    }
    // Nothing was made for them on the node: no directory of either claim name in any tenant's claims.
    let node_claims = data.path().join("nodes/nest-node-0/claims");
    for namespace in std::fs::read_dir(&node_claims).unwrap().flatten() {
        let made = |claim: &str| namespace.path().join(claim).exists();
        let tenant_side = namespace.file_name() != "default";
        assert!(!made("no-such-claim"), "a directory for a claim that does not exist");
        assert!(!(tenant_side && made(&foreign)), "a tenant's namespace got the control plane's claim directory");
    }
    });

    cases.case("a node inside a pod reaches only the tenant", || {
        // A node run inside a pod, with the tenant's own admin kubeconfig: it cannot make sandboxes (no privileges,
        // a read-only root filesystem), so it stops before it registers, and no pod can be given to it.
        eventually(90, "the inner node failing", || {
            let status = container(&demo, cache.path(), "inner-node");
            status["restartCount"].as_i64() >= Some(1) || status["state"]["terminated"]["exitCode"].as_i64() > Some(0)
        });
        let previous = kubectl(&demo, cache.path(), &["logs", "inner-node", "--previous"]);
        let said = String::from_utf8_lossy(&previous.stdout).to_string() + &logs("inner-node");
        assert!(said.contains("/run/nest") || said.contains("OCI runtime"), "the inner node's last words: {said}");
        let nodes = json(&demo, cache.path(), &["get", "nodes"]);
        let names: Vec<&str> =
            nodes["items"].as_array().unwrap().iter().filter_map(|n| n["metadata"]["name"].as_str()).collect();
        assert_eq!(names, ["nest-node-0"], "a node from inside a pod registered");
    });

    cases.case("what the tenant allows, the management cluster refuses", || {
        // What the tenant's own cluster allows, the management cluster refuses: demo's pods are admitted at Pod Security
        // baseline there, and the tenant is told which fields it refused.
        let escape = cache.path().join("escape.yaml");
        std::fs::write(
        &escape,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: escape}\nspec:\n  hostPID: true\n  containers:\n  - {name: main, \
         image: nest, args: [debug, cat, /etc/shadow], securityContext: {privileged: true}}\n",
    )
    .unwrap();
        let created = kubectl(&demo, cache.path(), &["create", "-f", &escape.display().to_string()]);
        assert!(
            created.status.success(),
            "the tenant's own API server takes it: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        eventually(60, "a SyncFailed Event naming the refused fields", || {
            let events =
                json(&demo, cache.path(), &["get", "events", "--field-selector", "involvedObject.name=escape"]);
            events["items"].as_array().unwrap().iter().any(|e| {
                e["reason"] == "SyncFailed"
                    && e["message"].as_str().is_some_and(|m| {
                        m.contains(concat!(
                            r#"violates PodSecurity "baseline:latest": host namespaces (hostPID=true), privileged "#,
                            r#"(container "main" must not set securityContext.privileged=true)"#
                        ))
                    })
            })
        });
        let everywhere = json(&admin, cache.path(), &["get", "pods", "-A", "--field-selector", "metadata.name=escape"]);
        assert_eq!(everywhere["items"].as_array().unwrap().len(), 0, "the escape reached the management cluster");
    });

    cases.case("nest up stops and leaves no process and no network namespace behind", || {
        assert!(stop(child).success(), "nest up exits cleanly on SIGTERM");
        assert!(processes_with(&marker).is_empty(), "a sandboxed process outlived nest up");
        let left = common::up::pod_namespaces();
        assert!(left.is_empty(), "nest up left pod network namespaces behind: {left:?}");
    });
    cases.finish();
}
