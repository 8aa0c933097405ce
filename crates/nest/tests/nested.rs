//! Nested control planes end to end on a super cluster of real processes: `nest manager` turns a NestedControlPlane
//! into a tenant API server and controller-manager running as processes on a `nest node`, reached through the
//! service proxy with the `<cluster>-kubeconfig` Secret; tenants are isolated from each other and from the
//! management cluster; a killed tenant API server makes the control plane not ready until it is back, with its data.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Component, ControllerManager, KUBECTL, Server, eventually};
use serde_json::Value;

/// A management cluster: API server (ClusterIPs in `service_cidr`), controller-manager, scheduler, proxy, manager,
/// and a node running nest's image as processes with pods in `pod_cidr`.
fn management(service_cidr: &str, pod_cidr: &str, node_dir: &Path) -> (Server, Vec<Component>) {
    let server = Server::start_with(&["--service-cidr", service_cidr]);
    let ca_dir = server.data_dir().join("pki").display().to_string();
    let node_dir = node_dir.display().to_string();
    let components = vec![
        ControllerManager::start(&server, "cm", 15),
        Component::run(&server, &["scheduler"]),
        Component::run(&server, &["proxy"]),
        Component::run(&server, &["manager"]),
        Component::run(
            &server,
            &[
                "node",
                "--name",
                "host",
                "--runtime",
                "both",
                "--pod-cidr",
                pod_cidr,
                "--data-dir",
                &node_dir,
                "--ca-dir",
                &ca_dir,
                "--kubelet-port",
                "0",
            ],
        ),
    ];
    (server, components)
}

fn control_plane(name: &str) -> String {
    format!(
        "apiVersion: controlplane.cluster.x-k8s.io/v1alpha1\nkind: NestedControlPlane\n\
         metadata: {{name: {name}, namespace: default, labels: {{cluster.x-k8s.io/cluster-name: {name}}}}}\n\
         spec: {{version: v1.33.0}}\n"
    )
}

fn ready_condition(server: &Server, name: &str) -> (String, String) {
    let plane = server.json(&["get", "nestedcontrolplane", name]);
    let ready = plane["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready").cloned();
    let ready = ready.unwrap_or(Value::Null);
    (ready["status"].as_str().unwrap_or("").to_string(), ready["reason"].as_str().unwrap_or("").to_string())
}

/// kubectl against tenant `name`, with the kubeconfig from its Secret.
fn tenant(server: &Server, name: &str, dir: &Path, args: &[&str]) -> std::process::Output {
    let path = dir.join(format!("{name}.kubeconfig"));
    if !path.exists() {
        let value = server.ok(&["get", "secret", &format!("{name}-kubeconfig"), "-o", "jsonpath={.data.value}"]);
        let bytes: k8s_openapi::ByteString = serde_json::from_value(Value::String(value)).unwrap();
        std::fs::write(&path, bytes.0).unwrap();
    }
    std::process::Command::new(KUBECTL)
        .args(args)
        .env("KUBECONFIG", &path)
        .env("KUBECACHEDIR", dir.join("cache"))
        .output()
        .unwrap()
}

fn tenant_ok(server: &Server, name: &str, dir: &Path, args: &[&str]) -> String {
    let out = tenant(server, name, dir, args);
    assert!(out.status.success(), "tenant {name}: kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The pids of processes whose command line contains `needle`.
fn pids_with(needle: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(needle) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_nested_control_plane_serves_its_tenant_and_recovers_from_a_killed_api_server() {
    let node_dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let (server, _components) = management("127.120.0.0/16", "127.21.0.0/16", node_dir.path());
    // The CRDs come from the manager: wait until they are served.
    eventually(60, "the manager's CRDs served", || {
        server.kubectl(&["get", "nestedcontrolplanes,nestedclusters,clusters.cluster.x-k8s.io"]).status.success()
    });
    server.apply_manifest(&control_plane("alpha"));
    eventually(60, "alpha ready", || ready_condition(&server, "alpha").0 == "True");
    // The second through the CLI, as a whole Cluster.
    let nest = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nest"))
            .args(args)
            .env("KUBECONFIG", &server.kubeconfig)
            .output()
            .unwrap();
        assert!(out.status.success(), "nest {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let created = nest(&["cluster", "create", "beta", "--wait", "--timeout", "60s"]);
    assert!(created.contains("Provisioned, control plane ready"), "{created}");
    assert_eq!(ready_condition(&server, "beta").0, "True");
    let described = nest(&["cluster", "describe", "beta"]);
    for level in [
        "Cluster/beta",
        "NestedCluster/beta",
        "NestedControlPlane/beta",
        "NestedAPIServer/beta",
        "NestedControllerManager/beta",
    ] {
        let line = described
            .lines()
            .find(|l| l.contains(&format!("{level} ")))
            .unwrap_or_else(|| panic!("{level} missing: {described}"));
        assert!(line.contains(" True "), "{level} not ready: {described}");
    }
    assert!(nest(&["cluster", "list"]).lines().any(|l| l.starts_with("beta ") && l.contains("Provisioned")));
    assert!(nest(&["cluster", "kubeconfig", "beta"]).contains("client-certificate-data"));

    // A downgrade is refused with a condition, and the components keep their version; pausing is reported.
    let condition_of = |name: &str, kind: &str| {
        let plane = server.json(&["get", "ncp", name]);
        let found = plane["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == kind).cloned();
        found.map(|c| (c["status"].as_str().unwrap_or("").to_string(), c["reason"].as_str().unwrap_or("").to_string()))
    };
    server.ok(&["patch", "ncp", "beta", "--type=merge", "-p", r#"{"spec":{"version":"v1.32.0"}}"#]);
    eventually(30, "the downgrade refused", || {
        condition_of("beta", "VersionAccepted") == Some(("False".into(), "DowngradeRefused".into()))
    });
    assert_eq!(server.json(&["get", "nkas", "beta"])["spec"]["version"], "v1.33.0");
    assert_eq!(ready_condition(&server, "beta").0, "True", "a refused version leaves the control plane running");
    server.ok(&["patch", "ncp", "beta", "--type=merge", "-p", r#"{"spec":{"version":"v1.33.0"}}"#]);
    eventually(30, "the version accepted again", || {
        condition_of("beta", "VersionAccepted").is_some_and(|c| c.0 == "True")
    });
    server.ok(&["annotate", "ncp", "beta", "cluster.x-k8s.io/paused=true"]);
    eventually(30, "beta paused", || condition_of("beta", "Paused").is_some_and(|c| c.0 == "True"));
    server.ok(&["annotate", "ncp", "beta", "cluster.x-k8s.io/paused-"]);
    eventually(30, "beta resumed", || condition_of("beta", "Paused").is_some_and(|c| c.0 == "False"));

    // The contract fields, the endpoint and the Secrets Cluster API reads.
    let plane = server.json(&["get", "ncp", "alpha"]);
    assert_eq!(plane["status"]["initialized"], true);
    assert_eq!(plane["status"]["initialization"]["controlPlaneInitialized"], true);
    assert_eq!(plane["status"]["readyReplicas"], 1);
    let host = plane["spec"]["controlPlaneEndpoint"]["host"].as_str().unwrap().to_string();
    assert!(host.starts_with("127.120."), "the endpoint is the API server's ClusterIP: {host}");
    let kubeconfig = server.json(&["get", "secret", "alpha-kubeconfig"]);
    assert_eq!(kubeconfig["type"], "cluster.x-k8s.io/secret");
    assert_eq!(kubeconfig["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], "alpha");
    let component = server.json(&["get", "nkas", "alpha"]);
    assert_eq!(component["status"]["phase"], "Ready");
    assert_eq!(component["status"]["healthy"], true);

    // Each tenant is a cluster of its own.
    let namespaces = tenant_ok(&server, "alpha", work.path(), &["get", "namespaces", "-o", "name"]);
    assert!(namespaces.contains("namespace/kube-system"), "{namespaces}");
    tenant_ok(&server, "alpha", work.path(), &["create", "namespace", "alpha-only"]);
    eventually(30, "the tenant's controller-manager at work", || {
        tenant(&server, "alpha", work.path(), &["-n", "alpha-only", "get", "serviceaccount", "default"])
            .status
            .success()
    });
    assert!(!tenant(&server, "beta", work.path(), &["get", "namespace", "alpha-only"]).status.success());
    assert!(!server.kubectl(&["get", "namespace", "alpha-only"]).status.success());

    // Kill alpha's API server: the control plane goes not ready with a reason, the process is restarted, and it
    // comes back ready with its data. The first restart is immediate, too quick to be seen reliably, so the process
    // is killed once more: the second restart waits out the crash back-off (10 s).
    let pids = pids_with("--tls-san=alpha-apiserver ");
    assert_eq!(pids.len(), 1, "one alpha API server process: {pids:?}");
    let _ = std::process::Command::new("kill").args(["-KILL", &pids[0].to_string()]).status();
    let mut restarted = Vec::new();
    eventually(30, "alpha's API server restarted", || {
        restarted = pids_with("--tls-san=alpha-apiserver ");
        restarted.len() == 1 && restarted != pids
    });
    let killed = Instant::now();
    let _ = std::process::Command::new("kill").args(["-KILL", &restarted[0].to_string()]).status();
    let mut reasons = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, reason) = ready_condition(&server, "alpha");
        if status == "False" && !reasons.contains(&reason) {
            reasons.push(reason);
        }
        if status == "True" && !reasons.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "alpha did not go not-ready and back: {reasons:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(reasons.iter().any(|r| r == "ComponentsNotReady"), "{reasons:?}");
    eprintln!("alpha back after {:?}", killed.elapsed());
    let restarts =
        server.ok(&["get", "pod", "alpha-apiserver-0", "-o", "jsonpath={.status.containerStatuses[0].restartCount}"]);
    assert_eq!(restarts, "2");
    tenant_ok(&server, "alpha", work.path(), &["get", "namespace", "alpha-only"]);

    // A Cluster and a NestedCluster around alpha: adopted, the endpoint copied, Provisioned.
    server.apply_manifest(&cluster_api_objects("alpha"));
    eventually(30, "the Cluster Provisioned", || {
        server.ok(&["get", "cluster", "alpha", "-o", "jsonpath={.status.phase}"]) == "Provisioned"
    });
    let cluster = server.json(&["get", "cluster", "alpha"]);
    assert_eq!(cluster["spec"]["controlPlaneEndpoint"]["host"], host.as_str());
    assert_eq!(cluster["status"]["initialization"]["controlPlaneInitialized"], true);
    let infrastructure = server.json(&["get", "nestedcluster", "alpha"]);
    assert_eq!(infrastructure["status"]["ready"], true);
    assert_eq!(infrastructure["spec"]["controlPlaneEndpoint"]["host"], host.as_str());
    let owners = server.json(&["get", "ncp", "alpha"])["metadata"]["ownerReferences"].clone();
    assert!(owners.as_array().unwrap().iter().any(|o| o["kind"] == "Cluster"), "{owners}");

    // Deleting the Cluster takes everything it made along; beta stays.
    server.ok(&["delete", "cluster", "alpha", "--timeout=120s"]);
    let leftovers = || {
        [
            "nestedcontrolplanes",
            "nestedclusters",
            "nestedapiservers",
            "nestedcontrollermanagers",
            "statefulsets",
            "services",
            "secrets",
            "persistentvolumeclaims",
            "pods",
        ]
        .iter()
        .flat_map(|kind| {
            server
                .ok(&["get", kind, "-l", "cluster.x-k8s.io/cluster-name=alpha", "-o", "name"])
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
    };
    eventually(60, "alpha's objects gone", || leftovers().is_empty());
    assert!(pids_with("--tls-san=alpha-apiserver ").is_empty(), "alpha's API server process survived");
    assert_eq!(ready_condition(&server, "beta").0, "True");
}

fn cluster_api_objects(name: &str) -> String {
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: NestedCluster\n\
         metadata: {{name: {name}, namespace: default}}\nspec: {{}}\n---\n\
         apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {{name: {name}, namespace: default}}\n\
         spec:\n  controlPlaneRef: {{apiGroup: controlplane.cluster.x-k8s.io, kind: NestedControlPlane, name: {name}}}\n\
         \x20 infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: NestedCluster, name: {name}}}\n"
    )
}
