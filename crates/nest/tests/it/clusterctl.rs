//! Issue 19: the provider's managers and the syncer, installed as `clusterctl init` installs them — the components
//! files `nest clusterctl` writes, applied as they are — run as pods of a management cluster of processes, each
//! with nothing but its ServiceAccount's token and the RBAC those files grant it, and a tenant comes up: its control
//! plane Ready, and a pod of the tenant Running on the management cluster's node through the syncer.

use crate::common;

use std::process::Command;

use crate::common::eventually;
use crate::common::management::{control_plane, management_with, ready_condition, tenant, tenant_ok};

#[test]
fn the_manager_and_the_syncer_run_under_the_rbac_clusterctl_installs() {
    let package = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nest")).arg("clusterctl").arg(package.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let release = format!("v{}", env!("CARGO_PKG_VERSION"));
    let node_dir = tempfile::tempdir().unwrap();
    let (server, _components) = management_with("127.125.0.0/16", "127.25.0.0/16", node_dir.path(), false);
    for file in [
        package.path().join("infrastructure-nested").join(&release).join("infrastructure-components.yaml"),
        package.path().join("control-plane-nested").join(&release).join("control-plane-components.yaml"),
    ] {
        server.ok(&["apply", "-f", file.to_str().unwrap()]);
    }

    // Each runs as its own pod, with its own account.
    let workloads = [
        ("capn-system", "capn-infrastructure"),
        ("capn-control-plane-system", "capn-control-plane"),
        ("capn-control-plane-system", "capn-syncer"),
    ];
    for (namespace, name) in workloads {
        eventually(120, &format!("{name} Running"), || {
            let pods = server.kubectl(&["get", "pods", "-n", namespace, "-o", "json"]);
            let pods: serde_json::Value = serde_json::from_slice(&pods.stdout).unwrap_or_default();
            pods["items"].as_array().into_iter().flatten().any(|p| {
                p["metadata"]["name"].as_str().is_some_and(|n| n.starts_with(&format!("{name}-")))
                    && p["spec"]["serviceAccountName"] == name
                    && p["status"]["phase"] == "Running"
            })
        });
        // Nothing more than the files grant: no admin.
        let account = format!("system:serviceaccount:{namespace}:{name}");
        let anything = server.kubectl(&["auth", "can-i", "*", "*", "--all-namespaces", &format!("--as={account}")]);
        assert_eq!(String::from_utf8_lossy(&anything.stdout).trim(), "no", "{account} may do anything");
    }

    // A tenant comes up through them.
    server.apply_manifest(&control_plane("t"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while ready_condition(&server, "t").0 != "True" {
        if std::time::Instant::now() > deadline {
            let plane = server.kubectl(&["get", "nestedcontrolplane", "t", "-o", "yaml"]);
            let pods = server.kubectl(&["get", "pods", "-A", "-o", "wide"]);
            let logs = server.kubectl(&["logs", "-n", "capn-control-plane-system", "deployment/capn-control-plane"]);
            panic!(
                "the tenant's control plane not Ready:\n{}\n{}\n{}{}",
                String::from_utf8_lossy(&plane.stdout),
                String::from_utf8_lossy(&pods.stdout),
                String::from_utf8_lossy(&logs.stdout),
                String::from_utf8_lossy(&logs.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let dir = tempfile::tempdir().unwrap();
    // (The syncer's default: tenants' pods are admitted at Pod Security restricted in the management cluster.)
    let pod = dir.path().join("pod.yaml");
    let simulated = common::RESTRICTED_POD.replace("spec:\n", "spec:\n  runtimeClassName: nest-simulated\n");
    std::fs::write(&pod, simulated).unwrap();
    tenant_ok(&server, "t", dir.path(), &["create", "-f", pod.to_str().unwrap()]);
    eventually(120, "the tenant's pod Running", || {
        let out = tenant(&server, "t", dir.path(), &["get", "pod", "hardened", "-o", "jsonpath={.status.phase}"]);
        String::from_utf8_lossy(&out.stdout) == "Running"
    });

    // And nothing they did was refused for want of a permission.
    for (namespace, name) in workloads {
        let logs = server.ok(&["logs", "-n", namespace, &format!("deployment/{name}")]);
        let refused: Vec<&str> = logs.lines().filter(|l| l.contains("forbidden") || l.contains("403")).collect();
        assert!(refused.is_empty(), "{name} was refused: {refused:#?}");
    }
}
