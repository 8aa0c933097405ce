//! Nested control planes end to end on a super cluster of real processes: `nest manager` turns a NestedControlPlane
//! into a tenant API server and controller-manager running as processes on a `nest node`, reached through the
//! service proxy with the `<cluster>-kubeconfig` Secret; tenants are isolated from each other and from the
//! management cluster; a killed tenant API server makes the control plane not ready until it is back, with its data.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::management::{control_plane, management, ready_condition, tenant, tenant_ok};
use crate::common::{Server, eventually};
use serde_json::Value;

/// The pids of processes whose command line contains `needle` (containers' programs, not their sandboxes' inits).
fn pids_with(needle: &str) -> Vec<u32> {
    common::up::processes_with(needle)
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
    let nest = |args: &[&str]| server.nest(args);
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
            "nestedetcds",
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

fn status_of(server: &Server, kind: &str, name: &str, field: &str) -> String {
    let object = server.json(&["get", kind, name]);
    match &object["status"][field] {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[test]
fn an_etcd_backed_control_plane_scales_repairs_and_upgrades_in_order() {
    let node_dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let (server, _components) = management("127.122.0.0/16", "127.22.0.0/16", node_dir.path());
    eventually(60, "the manager's CRDs served", || {
        server.kubectl(&["get", "nestedcontrolplanes,nestedetcds"]).status.success()
    });
    let nest = |args: &[&str], stdin: Option<&str>| {
        use std::io::Write;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nest"))
            .args(args)
            .env("KUBECONFIG", &server.kubeconfig)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.unwrap_or_default().as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "nest {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    // Three etcd members with TLS, two API servers on them.
    let created = nest(
        &["cluster", "create", "gamma", "--etcd-members", "3", "--api-servers", "2", "--wait", "--timeout", "90s"],
        None,
    );
    assert!(created.contains("Provisioned, control plane ready"), "{created}");
    let described = nest(&["cluster", "describe", "gamma"], None);
    let etcd_line =
        described.lines().find(|l| l.contains("NestedEtcd/gamma ")).unwrap_or_else(|| panic!("{described}"));
    assert!(etcd_line.contains(" True ") && etcd_line.contains("3/3 Ready"), "{described}");
    let etcd = server.json(&["get", "netcd", "gamma"]);
    assert_eq!(etcd["status"]["healthy"], true);
    assert_eq!(etcd["status"]["addresses"].as_array().map(Vec::len), Some(3), "{etcd}");
    assert_eq!(status_of(&server, "nkas", "gamma", "readyReplicas"), "2");
    for secret in ["ca", "etcd", "etcd-server", "apiserver-etcd-client", "proxy", "proxy-client", "sa", "kubeconfig"] {
        let found = server.json(&["get", "secret", &format!("gamma-{secret}")]);
        assert_eq!(found["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], "gamma", "gamma-{secret}");
    }
    tenant_ok(&server, "gamma", work.path(), &["create", "namespace", "kept"]);

    // What `nest render` prints for the control plane and its Services is what the controllers applied.
    let input = format!(
        "{}\n---\n{}",
        server.ok(&["get", "ncp", "gamma", "-o", "yaml"]),
        server.ok(&["get", "services", "-l", "cluster.x-k8s.io/cluster-name=gamma", "-o", "yaml"])
    );
    let rendered = nest(&["render"], Some(&input));
    let mut checked = 0;
    for document in rendered.split("\n---\n") {
        let wanted: Value = match serde_norway::from_str(document.trim_start_matches("---\n")) {
            Ok(Value::Null) | Err(_) => continue,
            Ok(value) => value,
        };
        let kind = wanted["kind"].as_str().unwrap().to_lowercase();
        let live = server.json(&["get", &kind, wanted["metadata"]["name"].as_str().unwrap()]);
        assert!(
            nest_capn::render::covers(&live["spec"], &wanted["spec"]),
            "live {kind} differs from `nest render`: {wanted}\n{live}"
        );
        checked += 1;
    }
    // 3 StatefulSets, the API server's and etcd's client Services, and one Service per member.
    assert_eq!(checked, 8, "{rendered}");

    // Changed by hand: put back.
    server.ok(&[
        "patch",
        "statefulset",
        "gamma-apiserver",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"example.com/other:1"}]"#,
    ]);
    server.ok(&["scale", "statefulset", "gamma-etcd", "--replicas=1"]);
    eventually(30, "the StatefulSets repaired", || {
        let api = server.json(&["get", "statefulset", "gamma-apiserver"]);
        let etcd = server.json(&["get", "statefulset", "gamma-etcd"]);
        api["spec"]["template"]["spec"]["containers"][0]["image"].as_str().is_some_and(|i| i.contains("nest-dev/nest"))
            && etcd["spec"]["replicas"] == 3
    });
    // A change of etcd membership is refused; API server replicas roll.
    server.ok(&[
        "patch",
        "ncp",
        "gamma",
        "--type=merge",
        "-p",
        r#"{"spec":{"components":{"etcd":{"replicas":5},"apiServer":{"replicas":3}}}}"#,
    ]);
    // One at a time, each ready before the next starts: on two busy cores (CI builds and fuzzes beside it) this has
    // taken over a minute.
    eventually(180, "three API servers ready", || status_of(&server, "nkas", "gamma", "readyReplicas") == "3");
    eventually(30, "the etcd change refused", || {
        let etcd = server.json(&["get", "netcd", "gamma"]);
        etcd["status"]["conditions"].as_array().into_iter().flatten().any(|c| {
            c["type"] == "SpecAccepted"
                && c["status"] == "False"
                && c["message"].as_str().unwrap().contains("3 members")
        })
    });
    assert_eq!(server.json(&["get", "statefulset", "gamma-etcd"])["spec"]["replicas"], 3);

    // Upgrade in Kubernetes' order: with etcd held back (paused), the API servers keep their version.
    server.ok(&["annotate", "netcd", "gamma", "cluster.x-k8s.io/paused=true"]);
    eventually(30, "etcd paused", || {
        let etcd = server.json(&["get", "netcd", "gamma"]);
        etcd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Paused" && c["status"] == "True")
    });
    server.ok(&["patch", "ncp", "gamma", "--type=merge", "-p", r#"{"spec":{"version":"v1.33.1"}}"#]);
    eventually(30, "the control plane rolling out", || {
        let plane = server.json(&["get", "ncp", "gamma"]);
        plane["status"]["conditions"].as_array().into_iter().flatten().any(|c| {
            c["type"] == "RollingOut" && c["status"] == "True" && c["message"].as_str().unwrap().contains("NestedEtcd")
        })
    });
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(server.json(&["get", "nkas", "gamma"])["spec"]["version"], "v1.33.0", "API servers before etcd");
    assert_eq!(server.json(&["get", "nkcm", "gamma"])["spec"]["version"], "v1.33.0");
    server.ok(&["annotate", "netcd", "gamma", "cluster.x-k8s.io/paused-"]);
    // From here each component is only asked for the new version once the one before runs it. (Read from the last
    // to the first: a version a component runs does not go back, so what is seen later is at least as far along.)
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let manager = server.json(&["get", "nkcm", "gamma"]);
        let api = server.json(&["get", "nkas", "gamma"]);
        let etcd = server.json(&["get", "netcd", "gamma"]);
        if api["spec"]["version"] == "v1.33.1" {
            assert_eq!(etcd["status"]["version"], "v1.33.1", "the API servers went before etcd");
        }
        if manager["spec"]["version"] == "v1.33.1" {
            assert_eq!(api["status"]["version"], "v1.33.1", "the controller-managers went before the API servers");
        }
        if manager["status"]["version"] == "v1.33.1" {
            break;
        }
        assert!(Instant::now() < deadline, "the upgrade did not finish: {api}\n{manager}");
        std::thread::sleep(Duration::from_millis(100));
    }
    eventually(30, "gamma ready at v1.33.1", || {
        let plane = server.json(&["get", "ncp", "gamma"]);
        plane["status"]["ready"] == true && plane["status"]["version"] == "v1.33.1"
    });
    let version = tenant_ok(&server, "gamma", work.path(), &["version", "-o", "json"]);
    assert!(version.contains("v1.33.1+nest"), "{version}");
    tenant_ok(&server, "gamma", work.path(), &["get", "namespace", "kept"]);

    // Deleting the cluster removes the etcd too.
    nest(&["cluster", "delete", "gamma", "--wait", "--timeout", "120s"], None);
    eventually(60, "gamma's objects gone", || {
        ["nestedetcds", "statefulsets", "services", "secrets", "persistentvolumeclaims", "pods"].iter().all(|kind| {
            server.ok(&["get", kind, "-l", "cluster.x-k8s.io/cluster-name=gamma", "-o", "name"]).trim().is_empty()
        })
    });
}
