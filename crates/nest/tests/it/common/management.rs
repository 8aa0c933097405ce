//! A management cluster of real processes (API server, controller-manager, scheduler, proxy, manager, a node running
//! nest's image as processes) and kubectl against its tenants: what the nested-control-plane and syncer tests share.

use std::path::Path;

use serde_json::Value;

use super::{Component, ControllerManager, KUBECTL, Server};

/// A management cluster: API server (ClusterIPs in `service_cidr`), controller-manager, scheduler, proxy, manager,
/// and a node running nest's image as processes with pods in `pod_cidr` (and simulating pods that ask for
/// RuntimeClass `nest-simulated`, which it has, as `nest up`'s has).
pub fn management(service_cidr: &str, pod_cidr: &str, node_dir: &Path) -> (Server, Vec<Component>) {
    management_with(service_cidr, pod_cidr, node_dir, true)
}

/// [`management`], with the provider's manager as a process of its own (with the admin's credential) or not (a test
/// installs it another way).
pub fn management_with(service_cidr: &str, pod_cidr: &str, node_dir: &Path, manager: bool) -> (Server, Vec<Component>) {
    let server = Server::start_with(&["--service-cidr", service_cidr, "--enable-admission-plugins=ServiceAccount"]);
    // What `nest up` makes: the RuntimeClass pods (tenants' too, through the syncer) ask for simulation by.
    let class =
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: nest-simulated}\nhandler: simulated\n";
    let made = server.kubectl_with_input(&["create", "-f", "-"], Some(class));
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let ca_dir = server.data_dir().join("pki").display().to_string();
    let node_dir = node_dir.display().to_string();
    let mut components = vec![
        ControllerManager::start(&server, "cm", 15),
        Component::run(&server, &["scheduler"]),
        Component::run(&server, &["proxy"]),
    ];
    if manager {
        components.push(Component::run(&server, &["manager"]));
    }
    components.push(Component::run(
        &server,
        &[
            "node",
            "--name",
            "host",
            "--runtime",
            "process",
            "--pod-cidr",
            pod_cidr,
            "--data-dir",
            &node_dir,
            "--ca-dir",
            &ca_dir,
            "--kubelet-port",
            "0",
        ],
    ));
    (server, components)
}

pub fn control_plane(name: &str) -> String {
    format!(
        "apiVersion: controlplane.cluster.x-k8s.io/v1alpha1\nkind: NestedControlPlane\n\
         metadata: {{name: {name}, namespace: default, labels: {{cluster.x-k8s.io/cluster-name: {name}}}}}\n\
         spec: {{version: v1.33.0}}\n"
    )
}

pub fn ready_condition(server: &Server, name: &str) -> (String, String) {
    let plane = server.json(&["get", "nestedcontrolplane", name]);
    let ready = plane["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready").cloned();
    let ready = ready.unwrap_or(Value::Null);
    (ready["status"].as_str().unwrap_or("").to_string(), ready["reason"].as_str().unwrap_or("").to_string())
}

/// kubectl against tenant `name`, with the kubeconfig from its Secret.
pub fn tenant(server: &Server, name: &str, dir: &Path, args: &[&str]) -> std::process::Output {
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

pub fn tenant_ok(server: &Server, name: &str, dir: &Path, args: &[&str]) -> String {
    let out = tenant(server, name, dir, args);
    assert!(out.status.success(), "tenant {name}: kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}
