//! Issue 35's writable roots, on `nest up`: stock software built from Debian packages (`scripts/test-images`: nginx
//! and busybox, pushed to a loopback `docker-registry` that `--pull-from` names) runs with a writable layer of its own
//! over its image. nginx writes `/var/lib/nginx` and `/run` and answers its welcome page at its pod's address and
//! through its ClusterIP Service; with `readOnlyRootFilesystem: true` it fails as upstream's does, in its own words;
//! busybox writes `/tmp` in its root; a container filling its writable layer past its `ephemeral-storage` limit is
//! evicted in the kubelet's words (a tenant's, the hostile case); and a deleted pod's layer is gone from the disk.

use std::path::{Path, PathBuf};

use crate::common::registry::{registry, test_images};
use crate::common::up::{demo_tenant, kubectl, processes_with, stop, up_with};
use crate::common::{Cases, eventually};

fn json(kubeconfig: &Path, cache: &Path, args: &[&str]) -> serde_json::Value {
    let out = kubectl(kubeconfig, cache, &[args, &["-o", "json"]].concat());
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// `GET /` from `address`: the whole answer, once it is a 200.
fn get(address: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).ok()?;
    let request = format!("GET / HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.starts_with("HTTP/1.1 200").then_some(answer)
}

/// Every overlay mounted on this machine whose upper directory lies beneath `dir`.
fn overlays_beneath(dir: &Path) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let needle = format!("upperdir={}", dir.display());
    table.lines().filter(|l| l.contains(" - overlay ") && l.contains(&needle)).map(str::to_string).collect()
}

#[test]
fn stock_images_write_to_their_own_layer_which_is_limited_and_goes_with_the_pod() {
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let registry = registry(work.path());
    test_images(&registry);
    let nginx = format!("{}/library/nginx:latest", registry.address);
    let busybox = format!("{}/library/busybox:latest", registry.address);

    let data = tempfile::tempdir().unwrap();
    let before = crate::common::up::pod_namespaces();
    let (child, _) = up_with(data.path(), &["--pull-from", &registry.address]);
    let admin = data.path().join("admin.kubeconfig");
    let pods_dir = data.path().join("nodes/nest-node-0/pods");
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: web, labels: {{app: web}}}}
spec:
  containers: [{{name: web, image: "{nginx}", ports: [{{containerPort: 80}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 80}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web-read-only}}
spec:
  containers:
  - name: web
    image: "{nginx}"
    securityContext: {{readOnlyRootFilesystem: true}}
---
apiVersion: v1
kind: Pod
metadata: {{name: scratch}}
spec:
  containers:
  - name: sh
    image: "{busybox}"
    command: [sh, -c, "echo x > /tmp/f && cat /tmp/f && sleep 3600"]
---
apiVersion: v1
kind: Pod
metadata: {{name: unprivileged}}
spec:
  securityContext: {{runAsUser: 1000, runAsGroup: 1000}}
  containers:
  - name: sh
    image: "{busybox}"
    command: [sh, -c, "head -c 3 /dev/zero | wc -c; echo y > /tmp/g && cat /tmp/g; echo z > /dev/null && echo null; sleep 3600"]
---
apiVersion: v1
kind: Pod
metadata: {{name: again}}
spec:
  containers:
  - name: sh
    image: "{busybox}"
    command: [sh, -c, "if [ -e /marker ]; then echo stale; else echo fresh; fi; touch /marker; sleep 1; exit 1"]
"#
    );
    let file = cache.path().join("pods.yaml");
    std::fs::write(&file, manifest).unwrap();
    let applied = kubectl(&admin, cache.path(), &["apply", "-f", file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let pod = |name: &str| json(&admin, cache.path(), &["get", "pod", name]);
    let layer_of = |pod: &serde_json::Value, container: &str| -> PathBuf {
        pods_dir.join(pod["metadata"]["uid"].as_str().unwrap_or("none")).join("layers").join(container)
    };

    let mut cases = Cases::new();
    cases.case("nginx answers its welcome page at its pod's address, having written its root", || {
        eventually(120, "nginx Running", || {
            pod("web")["status"]["containerStatuses"][0]["state"]["running"].is_object()
        });
        let web = pod("web");
        let address = format!("{}:80", web["status"]["podIP"].as_str().unwrap());
        let mut answer = None;
        eventually(30, "nginx answering", || {
            answer = get(&address);
            answer.is_some()
        });
        let answer = answer.unwrap();
        assert!(answer.contains("Welcome to nginx!"), "{answer}");
        // What it wrote is in its own layer, not in the image's.
        let upper = layer_of(&web, "web").join("upper");
        assert!(upper.join("run/nginx.pid").is_file(), "no /run/nginx.pid in {}", upper.display());
        assert!(upper.join("var/lib/nginx/body").is_dir(), "no /var/lib/nginx/body in {}", upper.display());
        let images = data.path().join("nodes/nest-node-0/images/rootfs");
        let unpacked: Vec<_> = std::fs::read_dir(&images).unwrap().flatten().collect();
        assert!(!unpacked.is_empty());
        for image in unpacked {
            assert!(!image.path().join("run/nginx.pid").exists(), "the container wrote into its image");
        }
        // Its master runs as the container's root and its workers as www-data (33), with baseline's capabilities.
        let users: Vec<u32> = processes_with("nginx: worker process")
            .iter()
            .filter_map(|pid| {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                let uid = status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?;
                uid.parse::<u32>().ok()
            })
            .collect();
        assert!(!users.is_empty() && users.iter().all(|uid| uid % 65536 == 33), "nginx workers' users: {users:?}");
        // Its access log is its standard output, as the official image's.
        eventually(30, "the request in nginx's log", || {
            let logs = kubectl(&admin, cache.path(), &["logs", "web"]);
            String::from_utf8_lossy(&logs.stdout).contains("\"GET / HTTP/1.1\" 200")
        });
    });
    cases.case("and through its ClusterIP Service", || {
        let service = json(&admin, cache.path(), &["get", "service", "web"]);
        let address = format!("{}:80", service["spec"]["clusterIP"].as_str().unwrap());
        let mut answer = None;
        eventually(60, "the Service answering", || {
            answer = get(&address);
            answer.is_some()
        });
        assert!(answer.unwrap().contains("Welcome to nginx!"));
    });
    cases.case("with readOnlyRootFilesystem nginx fails in its own words and never runs", || {
        let failed = || {
            let status = &pod("web-read-only")["status"]["containerStatuses"][0];
            let waiting = status["state"]["waiting"]["reason"].as_str();
            let last = status["lastState"]["terminated"]["reason"].as_str();
            let now = status["state"]["terminated"]["reason"].as_str();
            waiting == Some("CrashLoopBackOff") || last == Some("Error") || now == Some("Error")
        };
        eventually(120, "web-read-only in CrashLoopBackOff or Error", failed);
        let status = &pod("web-read-only")["status"];
        assert!(!status["containerStatuses"][0]["state"]["running"].is_object(), "{status}");
        let logs = kubectl(&admin, cache.path(), &["logs", "web-read-only"]);
        let logs = String::from_utf8_lossy(&logs.stdout).into_owned();
        assert!(logs.contains("Read-only file system"), "{logs}");
    });
    cases.case("busybox writes /tmp in its root", || {
        eventually(120, "scratch's line", || {
            let logs = kubectl(&admin, cache.path(), &["logs", "scratch"]);
            String::from_utf8_lossy(&logs.stdout).trim() == "x"
        });
        let scratch = pod("scratch");
        assert!(layer_of(&scratch, "sh").join("upper/tmp/f").is_file(), "/tmp/f is not in scratch's writable layer");
    });
    cases.case(
        "a container user other than root reads /dev/zero, writes /dev/null and /tmp (the image has neither)",
        || {
            let said = || {
                String::from_utf8_lossy(&kubectl(&admin, cache.path(), &["logs", "unprivileged"]).stdout).into_owned()
            };
            eventually(120, "unprivileged's lines", || said().lines().count() >= 3);
            let lines: Vec<String> = said().lines().map(|l| l.trim().to_string()).collect();
            assert_eq!(lines, ["3", "y", "null"], "what a user (1000) of busybox could do");
        },
    );
    cases.case("a restarted container starts from its image again, not from what the last run wrote", || {
        let restarts = || pod("again")["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(0);
        eventually(120, "again restarted twice", || restarts() >= 2);
        for previous in [false, true] {
            let mut args = vec!["logs", "again"];
            if previous {
                args.push("--previous");
            }
            let logs = kubectl(&admin, cache.path(), &args);
            let logs = String::from_utf8_lossy(&logs.stdout).into_owned();
            assert_eq!(logs.trim(), "fresh", "previous: {previous}");
        }
    });
    cases.case("a tenant filling its writable layer past its ephemeral-storage limit is evicted", || {
        let demo = demo_tenant(data.path(), cache.path());
        let filler = format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: filler}}
spec:
  restartPolicy: Never
  containers:
  - name: fill
    image: "{busybox}"
    command: [sh, -c, "dd if=/dev/zero of=/fill bs=1M count=64 && sleep 3600"]
    resources: {{limits: {{ephemeral-storage: 16Mi}}}}
"#
        );
        let file = cache.path().join("filler.yaml");
        std::fs::write(&file, filler).unwrap();
        let applied = kubectl(&demo, cache.path(), &["apply", "-f", file.to_str().unwrap()]);
        assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
        let status = || json(&demo, cache.path(), &["get", "pod", "filler"])["status"].clone();
        eventually(120, "filler evicted", || status()["reason"] == "Evicted");
        let status = status();
        assert_eq!(status["phase"], "Failed", "{status}");
        let message = status["message"].as_str().unwrap_or_default();
        assert_eq!(message, "Pod ephemeral local storage usage exceeds the total limit of containers 16Mi. ");
        eventually(60, "the Evicted event", || {
            let described = kubectl(&demo, cache.path(), &["describe", "pod", "filler"]);
            String::from_utf8_lossy(&described.stdout).contains("Evicted")
        });
        // What it wrote is given back: its layer went with its container.
        let super_pods = json(&admin, cache.path(), &["get", "pods", "-A"]);
        let super_filler = super_pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["metadata"]["name"].as_str().is_some_and(|n| n.contains("filler")))
            .cloned()
            .unwrap_or_default();
        let layer = layer_of(&super_filler, "fill");
        eventually(30, "filler's layer gone", || !layer.exists());
    });
    cases.case("a deleted pod's writable layer is gone from the disk", || {
        let web = pod("web");
        let layer = layer_of(&web, "web");
        assert!(layer.exists(), "{} missing while web runs", layer.display());
        let deleted = kubectl(&admin, cache.path(), &["delete", "pod", "web", "scratch", "--wait=true"]);
        assert!(deleted.status.success(), "{}", String::from_utf8_lossy(&deleted.stderr));
        eventually(30, "web's layer gone", || !layer.exists());
        let mounted = overlays_beneath(&layer);
        assert!(mounted.is_empty(), "{mounted:?}");
    });
    cases.case("nest up stops and leaves no writable layer mounted and no pod's network namespace", || {
        // The pods left (one read-only, one restarting, a tenant's evicted), by the namespace each would leave.
        let pods = json(&admin, cache.path(), &["get", "pods", "--all-namespaces"]);
        let names: std::collections::BTreeMap<String, String> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let uid = p["metadata"]["uid"].as_str().unwrap_or_default();
                let phase = p["status"]["phase"].as_str().unwrap_or_default();
                (format!("nest-{uid}"), format!("{}/{} ({phase})", p["metadata"]["namespace"], p["metadata"]["name"]))
            })
            .collect();
        assert!(stop(child).success(), "nest up exits cleanly on SIGTERM");
        let mounted = overlays_beneath(data.path());
        assert!(mounted.is_empty(), "{mounted:?}");
        let left: Vec<String> = crate::common::up::pod_namespaces()
            .into_iter()
            .filter(|n| !before.contains(n))
            .map(|n| names.get(&n).cloned().unwrap_or(n))
            .collect();
        assert!(left.is_empty(), "nest up left pod network namespaces behind: {left:?}");
    });
    cases.finish();
}
