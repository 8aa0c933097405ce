//! Issue 35's streams in a tenant: `kubectl exec` and the Python client's `stream` exec through the demo tenant's
//! API server, which proxies to its virtual node, the syncer's kubelet endpoint for demo, which proxies to the
//! management cluster's copy of the pod; and with demo's pods of real software (busybox and nginx through a loopback
//! Docker Hub mirror): `attach -it`, `port-forward` in kubectl's two transports and the Python client's, `cp` both
//! ways, `debug -it --image=busybox` (the ephemeral container goes down through the syncer), and a privileged
//! ephemeral container, which the management cluster's Pod Security refuses. Then the endpoint as an attacker tries
//! it: with another tenant's
//! certificate, and — with demo's own API server's certificate, as a compromised or lying tenant API server would
//! hold it — with paths that name another tenant's pod, a management pod, demo's super namespace, or a pod demo
//! deleted. And the node's resource statistics (`/stats/summary`), read with the management API server's
//! kubelet-client certificate, against the container's cgroup. One `nest up`, with demo and acme, for every case.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use super::hostile::platform::{Platform, Who};
use crate::common::{Cases, eventually};

/// Demo's pods of real software (busybox and nginx from the loopback mirror, as demo's `baseline` Pod Security
/// admits them): nginx; two echo servers (the Python client's `portforward` test asks for ports 1234 and 1235); a
/// shell with a terminal to attach to; a ticker to debug and copy into; one to aim a privileged debugger at.
const SOFTWARE: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers: [{name: web, image: nginx, ports: [{containerPort: 80}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: echo}
spec:
  containers:
  - {name: echo, image: busybox, command: [sh, -c, "nc -ll -p 1234 -e cat & nc -ll -p 1235 -e cat & wait"]}
---
apiVersion: v1
kind: Pod
metadata: {name: console}
spec:
  containers: [{name: sh, image: busybox, command: [sh], stdin: true, tty: true}]
---
apiVersion: v1
kind: Pod
metadata: {name: ticker}
spec:
  containers:
  - {name: tick, image: busybox, command: [sh, -c, "while true; do echo tick; sleep 1; done"]}
---
apiVersion: v1
kind: Pod
metadata: {name: guarded}
spec:
  containers: [{name: app, image: busybox, command: [sleep, "3600"]}]
"#;

/// The Python client's stream exec as its e2e tests `test_pod_apis` and `test_exit_code` drive it, against demo's
/// pod `ticker`.
const PYTHON_EXEC: &str = r#"
import sys
from kubernetes import client, config
from kubernetes.stream import stream
config.load_kube_config(sys.argv[1])
api = client.CoreV1Api()
out = stream(api.connect_get_namespaced_pod_exec, "ticker", "default",
             command=["/bin/sh", "-c", "for i in $(seq 1 3); do echo line $i; done"],
             stderr=True, stdin=False, stdout=True, tty=False)
assert out == "line 1\nline 2\nline 3\n", repr(out)
resp = stream(api.connect_get_namespaced_pod_exec, "ticker", "default", command=["/bin/sh"],
              stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
resp.write_stdin("echo test string 1\n")
line = resp.readline_stdout(timeout=10)
assert line == "test string 1", repr(line)
resp.write_stdin("echo test string 2 >&2\n")
line = resp.readline_stderr(timeout=10)
assert line == "test string 2", repr(line)
resp.write_stdin("exit 7\n")
resp.run_forever(timeout=10)
assert resp.returncode == 7, resp.returncode
resp.close()
for command, value in ((["false"], 1), (["/bin/sh", "-c", "sleep 1; exit 3"], 3), (["true"], 0),
                       (["/bin/sh", "-c", "ls /"], 0)):
    resp = stream(api.connect_get_namespaced_pod_exec, "ticker", "default", command=command,
                  stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    assert resp.returncode is None
    resp.run_forever(timeout=10)
    assert resp.returncode == value, (command, resp.returncode)
print("ok")
"#;

/// What a user does to enter demo's pods of real software, through demo's API server and its virtual node (the
/// syncer's endpoint): attach, port-forward in both of kubectl's transports and the Python client's, cp both ways,
/// debug with an ephemeral container; and a privileged ephemeral container, which demo's API server takes (its
/// namespace has no Pod Security level) and the management cluster refuses (demo's super namespaces are
/// `baseline`), which demo sees as a SyncFailed Event.
fn entering_cases(platform: &Platform, cases: &mut Cases) {
    let (demo, cache) = (platform.demo.as_path(), platform.cache.path());
    cases.case("attach -it to a shell in a tenant pod", || {
        let typed = "\recho marker-$((6*7))\r";
        let (shown, code) =
            super::attach::in_terminal(demo, cache, &["attach", "-it", "console"], "pressing enter", typed, 15);
        assert!(shown.contains("marker-42"), "{shown}");
        assert_eq!(code, None, "attach stays until detached: {shown}");
    });
    cases.case("exec -it a shell in a tenant pod: a terminal of the client's size", || {
        let (shown, code) = super::attach::in_terminal(
            demo,
            cache,
            &["exec", "-it", "ticker", "--", "sh"],
            "/ #",
            "stty size\rexit\r",
            30,
        );
        assert!(shown.contains("45 123"), "{shown}");
        assert_eq!(code, Some(0), "{shown}");
    });
    for (transport, websockets, method) in [("SPDY in WebSocket", "true", "GET"), ("plain SPDY", "false", "POST")] {
        cases.case(&format!("kubectl port-forward ({transport}) to a tenant's nginx serves its page"), || {
            let env = [("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets)];
            let pf = super::port_forward::forward(demo, cache, "web", 80, &env);
            let answer = super::port_forward::get(pf.port);
            assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("Welcome to nginx!"), "{answer}");
            assert!(pf.upgraded_with(method), "{}", pf.log.lock().unwrap());
        });
    }
    cases.case("the Python client's portforward through the tenant (test_portforward_raw, _http)", || {
        let out =
            Command::new(python()).args(["-c", super::port_forward::PYTHON_PORT_FORWARD]).arg(demo).output().unwrap();
        assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    });
    cases.case("the Python client's stream exec through the tenant: output, stdin, exit codes", || {
        let out = Command::new(python()).args(["-c", PYTHON_EXEC]).arg(demo).output().unwrap();
        assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    });
    cases.case("kubectl cp into a tenant's container and back", || {
        let local = cache.join("upload.txt");
        std::fs::write(&local, "carried both ways\n").unwrap();
        let out = platform.kubectl(Who::Demo, &["cp", local.to_str().unwrap(), "ticker:/tmp/upload.txt"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let read = platform.ok(Who::Demo, &["exec", "ticker", "--", "cat", "/tmp/upload.txt"]);
        assert_eq!(read, "carried both ways\n");
        let back = cache.join("back.txt");
        let out = platform.kubectl(Who::Demo, &["cp", "ticker:/tmp/upload.txt", back.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(std::fs::read_to_string(&back).unwrap(), "carried both ways\n");
    });
    cases.case("debug -it --image=busybox in a tenant: an ephemeral container beside its target", || {
        let args = ["debug", "-it", "pod/ticker", "--image=busybox", "--target=tick", "--", "sh"];
        let typed = "\recho debug-$((3*3))\rps\rexit\r";
        let (shown, code) = super::attach::in_terminal(demo, cache, &args, "pressing enter", typed, 90);
        assert!(shown.contains("debug-9"), "{shown}");
        assert!(shown.contains("while true"), "the target's processes are in its PID namespace: {shown}");
        assert_eq!(code, Some(0), "{shown}");
        eventually(30, "the ephemeral container's status in the tenant", || {
            let pod = platform.json(Who::Demo, &["get", "pod", "ticker"]);
            pod["status"]["ephemeralContainerStatuses"][0]["state"]["terminated"].is_object()
        });
    });
    cases.case("hostile: a tenant's privileged ephemeral container is refused by the management cluster", || {
        let evil = r#"{"spec":{"ephemeralContainers":[{"name":"evil","image":"busybox","command":["sleep","3600"],"securityContext":{"privileged":true}}]}}"#;
        let args = ["patch", "pod", "guarded", "--subresource=ephemeralcontainers", "--type=strategic", "-p", evil];
        // Demo's own API server takes it: its namespace has no Pod Security level, and demo is its admin.
        platform.ok(Who::Demo, &args);
        let refusal = r#"violates PodSecurity "baseline:latest": privileged (container "evil" must not set securityContext.privileged=true)"#;
        eventually(60, "a SyncFailed Event on demo's pod", || {
            let events = platform.json(Who::Demo, &["get", "events", "--field-selector", "involvedObject.name=guarded"]);
            events["items"].as_array().into_iter().flatten().any(|e| {
                e["reason"] == "SyncFailed" && e["message"].as_str().is_some_and(|m| m.contains(refusal))
            })
        });
        let namespace = super_namespace(platform, "demo");
        let copy = platform.json(Who::Admin, &["get", "pod", "guarded", "-n", &namespace]);
        assert!(copy["spec"]["ephemeralContainers"].is_null(), "the copy got it: {copy}");
        let pod = platform.json(Who::Demo, &["get", "pod", "guarded"]);
        assert!(pod["status"]["ephemeralContainerStatuses"].is_null(), "{pod}");
        assert_eq!(pod["status"]["phase"], "Running", "the pod runs on without it: {pod}");
    });
}

/// A pod of the nest image that waits (`debug cat`), as restricted Pod Security (a tenant's default) admits it.
fn shell(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "c", "image": "nest", "args": ["debug", "cat"],
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn python() -> String {
    std::env::var("NEST_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// `kubectl exec` as `kubeconfig`'s user with `stdin` written to it (and closed).
fn exec(platform: &Platform, kubeconfig: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(crate::common::KUBECTL)
        .arg("exec")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", platform.cache.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// Waits for `who`'s pod `name` to run.
fn running(platform: &Platform, who: Who, name: &str) {
    eventually(120, &format!("{who:?}'s pod {name} Running"), || {
        let out = platform.kubectl(who, &["get", "pod", name, "-o", "jsonpath={.status.phase}"]);
        text(&out.stdout) == "Running"
    });
}

/// A client certificate for the kubelet API issued by tenant `tenant`'s CA (its `<tenant>-ca` Secret, as the
/// platform admin reads it), with the API server's common name: what that tenant's API server presents to its
/// virtual nodes. Written into `dir`; the files (certificate, key).
fn api_server_certificate(platform: &Platform, tenant: &str, dir: &Path) -> (PathBuf, PathBuf) {
    let field = |name: &str| secret_field(platform, &format!("{tenant}-ca"), name);
    let ca = nest_pki::Ca(nest_pki::Pair { cert: field("tls.crt"), key: field("tls.key") });
    let leaf = nest_pki::Leaf {
        common_name: nest_apiserver::certs::KUBELET_CLIENT,
        organization: None,
        names: Vec::new(),
        usage: nest_pki::Usage::Client,
        validity: nest_pki::LEAF_VALIDITY,
    };
    let pair = ca.issue(&leaf).unwrap();
    let (cert, key) = (dir.join(format!("{tenant}-client.crt")), dir.join(format!("{tenant}-client.key")));
    std::fs::write(&cert, pair.cert).unwrap();
    std::fs::write(&key, pair.key).unwrap();
    (cert, key)
}

/// Field `field` of Secret `name` in the management cluster's namespace `default`, decoded (the platform admin's
/// view).
fn secret_field(platform: &Platform, name: &str, field: &str) -> String {
    let template = format!("go-template={{{{index .data \"{field}\" | base64decode}}}}");
    platform.ok(Who::Admin, &["get", "secret", name, "-o", &template])
}

/// Where a kubelet API is, and what a client trusts and presents there.
struct Kubelet {
    host: String,
    port: u16,
    ca: PathBuf,
}

/// The kubelet API of node `node` as `who` sees it (its InternalIP and kubelet port), trusting `ca`.
fn kubelet_of(platform: &Platform, who: Who, node: &str, ca: PathBuf) -> Kubelet {
    let node = platform.json(who, &["get", "node", node]);
    let host =
        node["status"]["addresses"].as_array().unwrap().iter().find(|a| a["type"] == "InternalIP").unwrap()["address"]
            .as_str()
            .unwrap()
            .to_string();
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64().unwrap();
    Kubelet { host, port: u16::try_from(port).unwrap(), ca }
}

/// What a kubelet API answers a WebSocket upgrade (`GET`) or a plain `GET` of `path`, presenting `client`: the
/// status line, or `refused: …` when the TLS handshake or the connection is refused.
fn request(kubelet: &Kubelet, client: &(PathBuf, PathBuf), path: &str, upgrade: bool) -> String {
    let script = r#"
import socket, ssl, sys
host, port, ca, cert, key, path, upgrade = sys.argv[1:8]
context = ssl.create_default_context(cafile=ca)
context.check_hostname = False
context.load_cert_chain(cert, key)
headers = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" \
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n" \
          if upgrade == "1" else "Connection: close\r\n"
try:
    with socket.create_connection((host, int(port)), timeout=20) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n".encode())
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = tls.recv(65536)
                if not chunk:
                    break
                answer += chunk
            if not answer:
                print("refused: closed")
            elif upgrade == "1":
                print(answer.split(b"\r\n")[0].decode())
            else:
                while True:
                    chunk = tls.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
                sys.stdout.write(answer.decode(errors="replace"))
except (ssl.SSLError, OSError) as error:
    print(f"refused: {type(error).__name__}: {error}")
"#;
    let (cert, key) = client;
    let out = Command::new(python())
        .args(["-c", script, &kubelet.host, &kubelet.port.to_string()])
        .args([&kubelet.ca, cert, key])
        .args([path, if upgrade { "1" } else { "0" }])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The management namespace of tenant `tenant`'s namespace `default` (the platform admin's view).
fn super_namespace(platform: &Platform, tenant: &str) -> String {
    let namespaces = platform.json(Who::Admin, &["get", "namespaces", "-l", "tenancy.nest.dev/cluster"]);
    namespaces["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| {
            let annotations = &n["metadata"]["annotations"];
            annotations["tenancy.nest.dev/cluster-name"] == format!("default/{tenant}")
                && annotations["tenancy.nest.dev/namespace"] == "default"
        })
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .expect("the tenant's default namespace in the management cluster")
}

#[test]
fn tenant_pods_are_entered_through_the_syncer_and_only_by_their_own_tenant() {
    let platform = Platform::with_images(&[]);
    let demo = platform.demo.clone();
    platform.create(Who::Demo, &shell("shell"));
    platform.create(Who::Demo, &shell("gone"));
    platform.create(Who::Acme, &shell("victim"));
    let applied = platform.with_input(Who::Demo, &["apply", "-f", "-"], SOFTWARE);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    for (who, name) in [(Who::Demo, "shell"), (Who::Demo, "gone"), (Who::Acme, "victim")] {
        running(&platform, who, name);
    }
    for name in ["web", "echo", "console", "ticker", "guarded"] {
        running(&platform, Who::Demo, name);
    }

    let mut cases = Cases::new();
    cases.case("kubectl exec through the tenant prints the command's output", || {
        let out = exec(&platform, &demo, &["shell", "--", "cat", "/etc/hostname"], b"");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "shell\n");
    });
    cases.case("kubectl exec -i through the tenant passes standard input and its end", || {
        let out = exec(&platform, &demo, &["-i", "shell", "--", "sh", "-c", "wc -c; echo done"], b"hello\n");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout).split_whitespace().collect::<Vec<_>>(), ["6", "done"]);
    });
    cases.case("exec's exit code comes back through the tenant", || {
        let out = exec(&platform, &demo, &["shell", "--", "sh", "-c", "echo out; exit 3"], b"");
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "out\n");
    });
    cases.case("the Python client's stream exec through the tenant", || {
        let script = r#"
import sys
from kubernetes import client, config
from kubernetes.stream import stream
config.load_kube_config(sys.argv[1])
api = client.CoreV1Api()
out = stream(api.connect_get_namespaced_pod_exec, "shell", "default", command=["cat", "/etc/hostname"],
             stderr=True, stdin=False, stdout=True, tty=False)
assert out == "shell\n", repr(out)
print("ok")
"#;
        let out = Command::new(python()).args(["-c", script]).arg(&demo).output().unwrap();
        assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    });

    entering_cases(&platform, &mut cases);

    // The attacker's tools: demo's virtual node (the syncer's endpoint for demo), a certificate of each tenant's CA
    // with the API server's name, and the management names it would aim at.
    let files = tempfile::tempdir().unwrap();
    let ca = files.path().join("demo-ca.crt");
    std::fs::write(&ca, secret_field(&platform, "demo-ca", "tls.crt")).unwrap();
    let node = platform.ok(Who::Demo, &["get", "pod", "shell", "-o", "jsonpath={.spec.nodeName}"]);
    let endpoint = kubelet_of(&platform, Who::Demo, &node, ca);
    let demo_client = api_server_certificate(&platform, "demo", files.path());
    let acme_client = api_server_certificate(&platform, "acme", files.path());
    let exec_path = |namespace: &str, pod: &str| format!("/exec/{namespace}/{pod}/c?command=true&output=1");

    cases.case("demo's own API server's certificate opens a stream into demo's pod (the control)", || {
        let said = request(&endpoint, &demo_client, &exec_path("default", "shell"), true);
        assert!(said.starts_with("HTTP/1.1 101"), "{said}");
    });
    cases.case("another tenant's API server certificate is refused by demo's endpoint", || {
        let said = request(&endpoint, &acme_client, &exec_path("default", "shell"), true);
        assert!(said.starts_with("refused"), "{said}");
        let said = request(&endpoint, &acme_client, &exec_path("default", "victim"), true);
        assert!(said.starts_with("refused"), "{said}");
    });
    cases.case("a forged path naming another tenant's pod is 404, for exec and port-forward", || {
        let said = request(&endpoint, &demo_client, &exec_path("default", "victim"), true);
        assert!(said.starts_with("HTTP/1.1 404"), "{said}");
        let acme_namespace = super_namespace(&platform, "acme");
        let said = request(&endpoint, &demo_client, &exec_path(&acme_namespace, "victim"), true);
        assert!(said.starts_with("HTTP/1.1 404"), "{said}");
        for path in ["/portForward/default/victim?port=80".to_string(), format!("/portForward/{acme_namespace}/victim")]
        {
            let said = request(&endpoint, &demo_client, &path, true);
            assert!(said.starts_with("HTTP/1.1 404"), "{path}: {said}");
        }
    });
    cases.case("a forged path naming a management pod or demo's super namespace is 404", || {
        let pods = platform.json(Who::Admin, &["get", "pods", "-A"]);
        let management = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("demo-apiserver")))
            .expect("demo's API server pod");
        let (namespace, name) =
            (management["metadata"]["namespace"].as_str().unwrap(), management["metadata"]["name"].as_str().unwrap());
        for path in [
            exec_path(namespace, name),
            exec_path("default", name),
            format!("/exec/{namespace}/{name}/apiserver?command=true&output=1"),
            exec_path(&super_namespace(&platform, "demo"), "shell"),
            format!("/portForward/{namespace}/{name}?port=6443"),
            format!("/attach/{}/shell/c?output=1", super_namespace(&platform, "demo")),
        ] {
            let said = request(&endpoint, &demo_client, &path, true);
            assert!(said.starts_with("HTTP/1.1 404"), "{path}: {said}");
        }
    });
    cases.case("an exec to a pod the tenant deleted is 404", || {
        platform.ok(Who::Demo, &["delete", "pod", "gone", "--wait=true", "--grace-period=1"]);
        eventually(30, "the endpoint refusing the deleted pod", || {
            request(&endpoint, &demo_client, &exec_path("default", "gone"), true).starts_with("HTTP/1.1 404")
        });
        let out = exec(&platform, &demo, &["gone", "--", "true"], b"");
        assert!(!out.status.success() && text(&out.stderr).contains("not found"), "{}", text(&out.stderr));
    });
    stats_case(&platform, &mut cases);

    platform.assert_serving();
    platform.finish();
    cases.finish();
}

/// The node's `/stats/summary` and `/metrics/resource` with the management API server's kubelet-client certificate:
/// demo's running pod `shell` is there, its container's memory matching its cgroup's, its CPU counted.
fn stats_case(platform: &Platform, cases: &mut Cases) {
    cases.case(
        "the node's /stats/summary shows a running container's memory as its cgroup has it, and its CPU",
        || {
            let pki = platform.data.path().join("pki");
            let node = kubelet_of(platform, Who::Admin, "nest-node-0", pki.join("ca.crt"));
            let client = (pki.join("apiserver-kubelet-client.crt"), pki.join("apiserver-kubelet-client.key"));
            let namespace = super_namespace(platform, "demo");
            let uid =
                platform.ok(Who::Admin, &["get", "pod", "shell", "-n", &namespace, "-o", "jsonpath={.metadata.uid}"]);
            let cgroup = container_cgroup(&uid, "c").expect("the container's cgroup");
            let answer = request(&node, &client, "/stats/summary", false);
            let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
            assert!(head.starts_with("HTTP/1.1 200"), "{answer}");
            let summary: Value = serde_json::from_str(body).unwrap();
            let cgroup_memory = memory_of(&cgroup);
            let pod = summary["pods"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["podRef"]["name"] == "shell" && p["podRef"]["namespace"] == namespace.as_str())
                .unwrap_or_else(|| panic!("demo's pod in {summary}"));
            assert_eq!(pod["podRef"]["uid"], uid.as_str());
            let container = &pod["containers"][0];
            assert_eq!(container["name"], "c");
            let reported = container["memory"]["usageBytes"].as_u64().unwrap();
            let difference = reported.abs_diff(cgroup_memory);
            assert!(
                difference <= (1 << 20).max(cgroup_memory / 10),
                "{reported} reported, {cgroup_memory} in the cgroup"
            );
            let working_set = container["memory"]["workingSetBytes"].as_u64().unwrap();
            assert!(working_set > 0 && working_set <= reported, "{container}");
            assert!(container["cpu"]["usageCoreNanoSeconds"].as_u64().is_some_and(|ns| ns > 0), "{container}");
            assert!(container["cpu"]["usageNanoCores"].as_u64().is_some(), "{container}");
            assert!(summary["node"]["memory"]["workingSetBytes"].as_u64().is_some_and(|b| b > 0), "{summary}");

            let metrics = request(&node, &client, "/metrics/resource", false);
            let sample = format!(
                "container_memory_working_set_bytes{{container=\"c\",namespace=\"{namespace}\",pod=\"shell\"}} "
            );
            assert!(metrics.contains(&sample) && metrics.contains("resource_scrape_error 0"), "{metrics}");
            assert!(metrics.contains("container_cpu_usage_seconds_total{container=\"c\""), "{metrics}");

            // A tenant's API server certificate is not the management API server's.
            let demo_client = api_server_certificate(platform, "demo", platform.cache.path());
            let said = request(&node, &demo_client, "/stats/summary", false);
            assert!(said.starts_with("refused"), "{said}");
        },
    );
}

/// The cgroup directory (in the memory hierarchy, or the one v2 hierarchy) of container `container` of the pod of
/// UID `uid`: `…/<uid>/<container>` beneath the node's `nest/` cgroups.
fn container_cgroup(uid: &str, container: &str) -> Option<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let root = if root.join("cgroup.controllers").exists() { root.to_path_buf() } else { root.join("memory") };
    let mut pending = vec![root.join("nest")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if entry.file_name() == uid {
                return Some(entry.path().join(container));
            }
            pending.push(entry.path());
        }
    }
    None
}

/// What cgroup `dir` says its memory use is: `memory.current` (v2) or `memory.usage_in_bytes` (v1).
fn memory_of(dir: &Path) -> u64 {
    let file = ["memory.current", "memory.usage_in_bytes"].into_iter().map(|f| dir.join(f)).find(|f| f.exists());
    let file = file.unwrap_or_else(|| panic!("no memory file in {}", dir.display()));
    std::fs::read_to_string(file).unwrap().trim().parse().unwrap()
}
