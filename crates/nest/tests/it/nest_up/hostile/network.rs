//! The wall between tenants on the pod network (issue 33, item 2), tried from a pod of acme as its admin would: every
//! address of demo (its pods, its control plane's pods, its Services and its control plane's), the platform's own
//! pods and Services, a service listening on the node's bridge address,
//! and demo's kubelet endpoint with a handshake that presents no certificate of demo's. acme's own pod, Service and
//! API server it reaches.

use serde_json::Value;

use super::platform::{Platform, Who};
use crate::common::eventually;

/// What the probe runs: a TCP connection to each `address:port` argument, one line each, then a TLS handshake with
/// the last one, then sleeps.
const PROBE: &str = r#"
import os, socket, ssl, sys, time
targets = sys.argv[1:]
for target in targets[:-1]:
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, int(port)))
        print(target, "open", flush=True)
    except Exception as error:
        print(target, "closed", error, flush=True)
    s.close()
host, port = targets[-1].rsplit(":", 1)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
try:
    with socket.create_connection((host, int(port)), timeout=3) as raw:
        with context.wrap_socket(raw) as tls:
            tls.sendall(b"GET /containerLogs/default/web/web HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = tls.recv(100)
            print("kubelet answered", answer[:12], flush=True)
except Exception as error:
    print("kubelet refused", type(error).__name__, flush=True)
print("done", flush=True)
while True:
    time.sleep(60)
"#;

/// A web pod and its Service, as a tenant (or the platform admin) makes them.
fn web(namespace_line: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: web, labels: {{app: web}}{namespace_line}}}
spec:
  securityContext: {{runAsNonRoot: true, runAsUser: 1000, seccompProfile: {{type: RuntimeDefault}}}}
  containers:
  - name: web
    image: nest
    args: [debug, http-echo, --listen, "0.0.0.0:8080"]
    securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: web{namespace_line}}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080}}]
"#
    )
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

#[test]
fn a_tenants_pods_reach_their_own_cluster_and_nothing_of_anyone_elses() {
    let platform = Platform::with_images(&[]);
    for who in [Who::Demo, Who::Acme] {
        let out = platform.with_input(who, &["apply", "-f", "-"], &web(""));
        assert!(out.status.success(), "{who:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = platform.with_input(Who::Admin, &["apply", "-f", "-"], &web(", namespace: default"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let running = |who: Who| platform.json(who, &["get", "pod", "web"])["status"]["phase"] == "Running";
    eventually(180, "the web pods Running", || running(Who::Demo) && running(Who::Acme) && running(Who::Admin));

    // A service of the host's, on the node's bridge address (where pods reach the host).
    let gateway = "10.128.0.1";
    let mut host_service = std::process::Command::new("python3")
        .args(["-m", "http.server", "18080", "--bind", gateway])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();

    let pod_ip = |who: Who, args: &[&str]| text(&platform.json(who, args)["status"]["podIP"]);
    let super_ip = |who: Who| {
        text(
            &platform.json(who, &["get", "service", "web"])["metadata"]["annotations"]["tenancy.nest.dev/super-cluster-ip"],
        )
    };
    let cluster_ip = |args: &[&str]| text(&platform.json(Who::Admin, args)["spec"]["clusterIP"]);
    let demo_node = platform.json(Who::Demo, &["get", "pod", "web"])["spec"]["nodeName"].as_str().unwrap().to_string();
    let node = platform.json(Who::Demo, &["get", "node", &demo_node]);
    let kubelet_address = node["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .map(|a| text(&a["address"]))
        .unwrap();
    let kubelet = format!("{kubelet_address}:{}", node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]);

    let forbidden = [
        ("demo's pod", format!("{}:8080", pod_ip(Who::Demo, &["get", "pod", "web"]))),
        ("demo's Service", format!("{}:80", super_ip(Who::Demo))),
        (
            "demo's API server pod",
            format!("{}:6443", pod_ip(Who::Admin, &["get", "pod", "demo-apiserver-0", "-n", "default"])),
        ),
        (
            "demo's API server Service",
            format!("{}:6443", cluster_ip(&["get", "service", "demo-apiserver", "-n", "default"])),
        ),
        ("the platform's pod", format!("{}:8080", pod_ip(Who::Admin, &["get", "pod", "web", "-n", "default"]))),
        ("the platform's Service", format!("{}:80", cluster_ip(&["get", "service", "web", "-n", "default"]))),
        ("a host service on the bridge", format!("{gateway}:18080")),
    ];
    let allowed = [
        ("acme's own pod", format!("{}:8080", pod_ip(Who::Acme, &["get", "pod", "web"]))),
        ("acme's own Service", format!("{}:80", super_ip(Who::Acme))),
        (
            "acme's API server Service",
            format!("{}:6443", cluster_ip(&["get", "service", "acme-apiserver", "-n", "default"])),
        ),
    ];
    let mut args: Vec<String> = forbidden.iter().chain(&allowed).map(|(_, target)| target.clone()).collect();
    args.push(kubelet.clone());
    let probe_command: Vec<String> = [vec!["python3".into(), "-c".into(), PROBE.to_string()], args].concat();
    let probe = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe", "image": "python", "command": probe_command,
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    });
    // The same probe from acme, and from a pod of the platform's own: what the platform's pod reaches is really
    // there, so that what acme does not reach is the wall's doing. (The management API server listens on the host's
    // loopback, which no pod reaches, wall or not.)
    let out = platform.with_input(Who::Acme, &["create", "-f", "-"], &probe.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut platform_probe = probe.clone();
    platform_probe["metadata"]["namespace"] = serde_json::json!("default");
    let out = platform.with_input(Who::Admin, &["create", "-f", "-"], &platform_probe.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let logs = |who: Who, namespace: &str| {
        String::from_utf8_lossy(&platform.kubectl(who, &["logs", "probe", "-n", namespace]).stdout).into_owned()
    };
    eventually(180, "both probes done", || {
        logs(Who::Acme, "default").contains("done") && logs(Who::Admin, "default").contains("done")
    });
    let printed = logs(Who::Acme, "default");
    let control = logs(Who::Admin, "default");
    let _ = host_service.kill();
    let _ = host_service.wait();
    for (what, target) in forbidden.iter().chain(&allowed) {
        assert!(control.contains(&format!("{target} open")), "{what} ({target}) is not there to reach:\n{control}");
    }

    for (what, target) in &forbidden {
        assert!(printed.contains(&format!("{target} closed")), "acme reached {what} ({target}):\n{printed}");
    }
    for (what, target) in &allowed {
        assert!(printed.contains(&format!("{target} open")), "acme did not reach {what} ({target}):\n{printed}");
    }
    assert!(printed.contains("kubelet refused"), "demo's kubelet endpoint answered acme:\n{printed}");

    platform.assert_serving();
    platform.finish();
}
