//! `nest up`: one command brings up a cluster (API server, controllers, scheduler, a node running pods as processes
//! or in simulation) that kubectl can use at once, stops cleanly on SIGTERM without leaving processes behind, and
//! resumes from its data directory.

use crate::common;

use std::path::Path;
use std::process::Command;

use crate::common::up::{kubectl, simulated_deployment, stop, up};
use crate::common::{KUBECTL, eventually};

/// How many processes on this machine have `needle` in their command line (their sandboxes' inits aside).
fn processes_with(needle: &str) -> usize {
    common::up::processes_with(needle).len()
}

#[test]
fn nest_up_serves_a_cluster_that_stops_and_resumes() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (child, printed) = up(data.path());
    let kubeconfig = data.path().join("admin.kubeconfig");
    assert!(printed.contains(&format!("export KUBECONFIG={}", kubeconfig.display())), "{printed}");

    let namespaces = kubectl(&kubeconfig, cache.path(), &["get", "namespaces", "-o", "name"]);
    assert!(String::from_utf8_lossy(&namespaces.stdout).contains("namespace/kube-system"));
    assert!(kubectl(&kubeconfig, cache.path(), &["create", "namespace", "demo"]).status.success());
    eventually(20, "the controllers to give the namespace its ServiceAccount", || {
        kubectl(&kubeconfig, cache.path(), &["-n", "demo", "get", "serviceaccount", "default"]).status.success()
    });
    eventually(20, "the node", || {
        let nodes =
            kubectl(&kubeconfig, cache.path(), &["get", "nodes", "-l", "nest.dev/runtime=process", "-o", "name"]);
        String::from_utf8_lossy(&nodes.stdout).contains("node/nest-node-0")
    });
    // nest's own image runs as a process; a pod asking for RuntimeClass nest-simulated is simulated.
    let marker = format!("up-test-{}", std::process::id());
    let run =
        ["run", "sleeper", "--image=ghcr.io/nest-dev/nest:latest", "--restart=Never", "--", "debug", "cat", "--env"];
    assert!(kubectl(&kubeconfig, cache.path(), &[&run[..], &[marker.as_str()]].concat()).status.success());
    let simulated = ["--overrides", r#"{"spec":{"runtimeClassName":"nest-simulated"}}"#];
    assert!(
        kubectl(&kubeconfig, cache.path(), &[&["run", "web", "--image=nginx"][..], &simulated].concat())
            .status
            .success()
    );
    let phase = |pod: &str| {
        let out = kubectl(&kubeconfig, cache.path(), &["get", "pod", pod, "-o", "jsonpath={.status.phase}"]);
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    eventually(30, "both pods Running", || phase("sleeper") == "Running" && phase("web") == "Running");
    assert_eq!(processes_with(&marker), 1, "the sleeper runs as a process");
    // kubectl logs reaches the node: a process's output, and a simulated pod's note.
    let logs =
        |pod: &str| String::from_utf8_lossy(&kubectl(&kubeconfig, cache.path(), &["logs", pod]).stdout).to_string();
    eventually(10, "the sleeper's output", || logs("sleeper").contains(&format!("${marker}=")));
    assert!(logs("web").contains("is simulated"), "{}", logs("web"));

    // The demo tenant, reached by running the instructions nest up printed, as a newcomer would.
    let instructions: Vec<String> = printed
        .lines()
        .skip_while(|l| !l.contains("A first tenant cluster, demo"))
        .filter_map(|l| l.trim().strip_prefix("kubectl ").map(|rest| format!("{KUBECTL} {rest}")))
        .collect();
    assert_eq!(instructions.len(), 3, "{printed}");
    let script = instructions.join(" && ");
    let out = Command::new("sh")
        .args(["-c", &script])
        .current_dir(cache.path())
        .env("KUBECONFIG", &kubeconfig)
        .env("KUBECACHEDIR", cache.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("kube-system"),
        "{script}\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The demo tenant runs workloads out of the box: its pods run on nest up's node through the syncer.
    let demo_kubeconfig = cache.path().join("demo.kubeconfig");
    let in_demo = |args: &[&str]| kubectl(&demo_kubeconfig, cache.path(), args);
    let hello = simulated_deployment(cache.path(), "hello", 2);
    eventually(60, "the syncer's RuntimeClass in demo", || {
        in_demo(&["get", "runtimeclass", "nest-simulated"]).status.success()
    });
    assert!(in_demo(&["apply", "-f", &hello]).status.success());
    eventually(60, "demo's pods Running on nest-node-0", || {
        let out = in_demo(&["get", "pods", "-o", "jsonpath={range .items[*]}{.status.phase}/{.spec.nodeName} {end}"]);
        String::from_utf8_lossy(&out.stdout).trim() == "Running/nest-node-0 Running/nest-node-0"
    });
    // Issue 17: everything nest up wrote is its user's alone (keys, kubeconfigs, the tenants' Secret volumes with
    // their CA keys, the data directories), created so rather than narrowed afterwards.
    let volumes = std::fs::read_dir(data.path().join("nodes/nest-node-0/pods")).unwrap().count();
    assert!(volumes >= 2, "the demo tenant's pods have their directories");
    let open = readable_by_others(data.path());
    assert!(open.is_empty(), "readable by others than their owner: {open:?}");
    let runc = std::fs::metadata(data.path().join("nodes/nest-node-0/runc")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&runc.permissions()) & 0o777,
        0o700,
        "runc's state is the node's"
    );
    two_tenants_share_the_node(&kubeconfig, cache.path());
    // Both flavors' rendered manifests (the golden files, held equal to the packages' output by
    // crates/nest-capn/tests/golden.rs) and the clusterctl cluster template pass a server-side dry run on nest up.
    assert!(kubectl(&kubeconfig, cache.path(), &["create", "namespace", "tenants"]).status.success());
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nest-capn/tests/golden");
    let package = tempfile::tempdir().unwrap();
    let wrote = Command::new(env!("CARGO_BIN_EXE_nest")).arg("clusterctl").arg(package.path()).output().unwrap();
    assert!(wrote.status.success(), "{}", String::from_utf8_lossy(&wrote.stderr));
    let release = format!("v{}", env!("CARGO_PKG_VERSION"));
    let template = std::fs::read_to_string(
        package.path().join("infrastructure-nested").join(&release).join("cluster-template.yaml"),
    )
    .unwrap()
    .replace("${CLUSTER_NAME}", "t1")
    .replace("${NAMESPACE}", "tenants");
    let template = with_defaults(&template);
    let filled = package.path().join("cluster.yaml");
    std::fs::write(&filled, template).unwrap();
    for file in [golden.join("nest.yaml"), golden.join("kubernetes.yaml"), filled] {
        let file = file.display().to_string();
        let out = kubectl(&kubeconfig, cache.path(), &["apply", "--dry-run=server", "-f", &file]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("(server dry run)"),
            "{file}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(stop(child).success(), "nest up exits cleanly on SIGTERM");
    assert_eq!(processes_with(&marker), 0, "nest up left a process behind");
    let left = common::up::pod_namespaces();
    assert!(left.is_empty(), "nest up left pod network namespaces behind: {left:?}");

    let (child, _) = up(data.path());
    let demo = kubectl(&kubeconfig, cache.path(), &["get", "namespace", "demo", "-o", "jsonpath={.status.phase}"]);
    assert_eq!(String::from_utf8_lossy(&demo.stdout), "Active", "the cluster resumes where it left off");
    eventually(30, "the sleeper started again", || processes_with(&marker) == 1);
    assert!(stop(child).success());
}

/// Files and directories under `dir` (itself included) whose mode gives anything to the group or to others.
fn readable_by_others(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut open = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(path) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o777;
        // runc's own state (each container's directory, 0711) lies in the node's `runc` directory, which nest makes
        // 0700: only what nest writes is held to its own modes.
        let runcs = path.parent().is_some_and(|p| p.file_name().is_some_and(|n| n == "runc"));
        // A container's root is its image's and its own: the unpacked image (`images/rootfs/<image>`) and a
        // container's writable layer (`pods/<uid>/layers/<container>/upper`) keep the modes the image and the
        // container gave their files (a 0700 `/` would lock the container's other users out of it), behind the
        // node's own 0700 directories.
        let parent_named = |name: &str| path.parent().is_some_and(|p| p.file_name().is_some_and(|n| n == name));
        let grandparent_named =
            |name: &str| path.parent().and_then(Path::parent).is_some_and(|p| p.file_name().is_some_and(|n| n == name));
        let containers_root = (parent_named("rootfs") && grandparent_named("images"))
            || (path.file_name().is_some_and(|n| n == "upper") && grandparent_named("layers"));
        if containers_root {
            continue;
        }
        if mode & 0o077 != 0 && !runcs {
            open.push(format!("{} {mode:o}", path.display()));
        }
        if meta.is_dir() {
            todo.extend(std::fs::read_dir(&path).into_iter().flatten().flatten().map(|e| e.path()));
        }
    }
    open
}

fn json(kubeconfig: &Path, cache: &Path, args: &[&str]) -> serde_json::Value {
    let out = kubectl(kubeconfig, cache, &[args, &["-o", "json"]].concat());
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn items(list: &serde_json::Value) -> Vec<serde_json::Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Issue 7's first scenario on `nest up`: tenants `a` and `b`, the same Deployment in each. `a`'s three pods run in
/// its own super namespace on nest up's node and, in `a`, are Running on a Ready virtual node of that name; `b`'s
/// pods of the same names never collide, and `b` sees none of `a`'s objects, nodes or events.
fn two_tenants_share_the_node(kubeconfig: &Path, cache: &Path) {
    for name in ["a", "b"] {
        let out = Command::new(env!("CARGO_BIN_EXE_nest"))
            .args(["cluster", "create", name, "--pod-security", "baseline", "--wait", "--timeout", "90s"])
            .env("KUBECONFIG", kubeconfig)
            .output()
            .unwrap();
        assert!(out.status.success(), "nest cluster create {name}: {}", String::from_utf8_lossy(&out.stderr));
        let secret = kubectl(kubeconfig, cache, &["get", "secret", &format!("{name}-kubeconfig"), "-o", "json"]);
        let secret: serde_json::Value = serde_json::from_slice(&secret.stdout).unwrap();
        let bytes: k8s_openapi::ByteString = serde_json::from_value(secret["data"]["value"].clone()).unwrap();
        std::fs::write(cache.join(format!("{name}.kubeconfig")), bytes.0).unwrap();
    }
    let (a, b) = (cache.join("a.kubeconfig"), cache.join("b.kubeconfig"));
    for (tenant, replicas) in [(&a, "3"), (&b, "2")] {
        let web = simulated_deployment(cache, "web", replicas.parse().unwrap());
        eventually(60, "the syncer's RuntimeClass in the tenant", || {
            kubectl(tenant, cache, &["get", "runtimeclass", "nest-simulated"]).status.success()
        });
        let created = kubectl(tenant, cache, &["apply", "-f", &web]);
        assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    }
    let running = |pods: &[serde_json::Value]| {
        pods.iter().filter(|p| p["status"]["phase"] == "Running" && p["spec"]["nodeName"] == "nest-node-0").count()
    };
    eventually(90, "a's three pods and b's two Running on nest-node-0", || {
        running(&items(&json(&a, cache, &["get", "pods"]))) == 3
            && running(&items(&json(&b, cache, &["get", "pods"]))) == 2
    });
    // In the super cluster: each tenant's pods in its own namespace, Running on the node.
    let super_namespace = |cluster: &str| {
        let namespaces = items(&json(kubeconfig, cache, &["get", "namespaces", "-l", "tenancy.nest.dev/cluster"]));
        let found = namespaces.iter().find(|n| {
            let annotations = &n["metadata"]["annotations"];
            annotations["tenancy.nest.dev/cluster-name"] == format!("default/{cluster}").as_str()
                && annotations["tenancy.nest.dev/namespace"] == "default"
        });
        found.map(|n| n["metadata"]["name"].as_str().unwrap().to_string()).expect("the tenant's super namespace")
    };
    let (a_super, b_super) = (super_namespace("a"), super_namespace("b"));
    assert_ne!(a_super, b_super);
    eprintln!("tenant a runs in super namespace {a_super}, b in {b_super}");
    let a_pods = items(&json(kubeconfig, cache, &["get", "pods", "-n", &a_super]));
    assert_eq!(running(&a_pods), 3, "{a_pods:?}");
    assert_eq!(running(&items(&json(kubeconfig, cache, &["get", "pods", "-n", &b_super]))), 2);
    // The tenant sees a Ready node named after the super node.
    let nodes = items(&json(&a, cache, &["get", "nodes"]));
    let names: Vec<&str> = nodes.iter().filter_map(|n| n["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["nest-node-0"]);
    let ready = nodes[0]["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    assert!(ready, "{nodes:?}");
    // b sees only its own: pods, replica sets, nodes, and events about its own objects.
    let a_uids: Vec<serde_json::Value> = items(&json(&a, cache, &["get", "pods,replicasets,deployments"]))
        .iter()
        .map(|o| o["metadata"]["uid"].clone())
        .collect();
    let b_pods = items(&json(&b, cache, &["get", "pods", "-A"]));
    assert_eq!(b_pods.len(), 2, "{b_pods:?}");
    assert!(b_pods.iter().all(|p| !a_uids.contains(&p["metadata"]["uid"])));
    assert_eq!(items(&json(&b, cache, &["get", "nodes"])).len(), 1);
    let b_events = items(&json(&b, cache, &["get", "events", "-A"]));
    assert!(b_events.iter().any(|e| e["reason"] == "Scheduled"), "b gets its own pods' events: {b_events:?}");
    let leaked: Vec<&serde_json::Value> =
        b_events.iter().filter(|e| a_uids.contains(&e["involvedObject"]["uid"])).collect();
    assert!(leaked.is_empty(), "b sees events of a's objects: {leaked:?}");
}

/// clusterctl's `${NAME:=default}` variables, each replaced by its default.
fn with_defaults(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').unwrap() + start;
        let (_, default) = rest[start + 2..end].split_once(":=").expect("a default");
        out.push_str(default);
        rest = &rest[end + 1..];
    }
    out + rest
}

/// On a machine without runc, `nest up --no-install` says in one line which package to install, and starts nothing.
/// (Without `--no-install`, as root where apt-get works, it installs the package instead: not tried here, since that
/// would change the machine the suite runs on.)
#[test]
fn nest_up_without_runc_names_the_package_to_install() {
    let data = tempfile::tempdir().unwrap();
    // A PATH with iproute2's `ip` and nothing else: no runc.
    let bin = tempfile::tempdir().unwrap();
    let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].into_iter().find(|p| Path::new(p).exists());
    std::os::unix::fs::symlink(ip.expect("iproute2's ip"), bin.path().join("ip")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nest"))
        .args(["up", "--no-install", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path().join("nest-data"))
        .env("PATH", bin.path())
        // (A backtrace asked for would follow the line.)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "nest up started without runc: {said}");
    assert!(said.contains("apt-get install runc") && said.contains("--no-install"), "{said}");
    assert_eq!(said.trim_end().lines().count(), 1, "more than one line: {said}");
    assert!(!data.path().join("nest-data").exists(), "nest up made its data directory before stopping");
}
