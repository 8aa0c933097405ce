//! Issue 35's port-forward and SPDY streams, as a user drives them on `nest up`, against nginx and busybox built
//! from Debian packages (`scripts/test-images`, through a loopback registry): `kubectl port-forward` in its default
//! transport (SPDY tunnelled in WebSocket) and forced to plain SPDY, `kubectl exec` forced to SPDY, the Python
//! client's `portforward` as its e2e tests `test_portforward_raw` and `test_portforward_http` use it; and what an
//! attacker tries: a user who may only `get` pods/portforward, ports that are no ports, a port that only the node's
//! own loopback listens on, an oversized SPDY frame and a flood of streams — each refused, and the node serving the
//! next client. One `nest up` for all.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::registry::{registry, test_images};
use crate::common::up::{kubectl, stop, up_with};
use crate::common::{Cases, eventually};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A running `kubectl port-forward` and the local port it listens on.
pub(super) struct Forward {
    child: Child,
    pub(super) port: u16,
    /// What it logged (`-v=7`: each request with its answer's status).
    pub(super) log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Forward {
    /// Whether every request kubectl made to `pods/<name>/portforward` was a `method` (GET: a WebSocket, POST:
    /// SPDY), and one was answered `101` — read from its log, so that a silent fallback to the other is noticed.
    pub(super) fn upgraded_with(&self, method: &str) -> bool {
        let log = self.log.lock().unwrap();
        let asked: Vec<&str> =
            log.lines().filter(|l| l.contains("\"Request\"") && l.contains("/portforward")).collect();
        let verb = format!("verb=\"{method}\"");
        !asked.is_empty()
            && asked.iter().all(|l| l.contains(&verb))
            && log.contains("status=\"101 Switching Protocols\"")
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `kubectl port-forward pod/<pod> :<port>` with `env`, once it says where it listens.
pub(super) fn forward(kubeconfig: &Path, cache: &Path, pod: &str, port: u16, env: &[(&str, &str)]) -> Forward {
    let mut child = Command::new(crate::common::KUBECTL)
        .args(["port-forward", "-v=7", &format!("pod/{pod}"), &format!(":{port}")])
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", cache)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (said, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                let _ = said.send(rest.split_whitespace().next().and_then(|p| p.parse::<u16>().ok()));
            }
        }
    });
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (stderr, kept) = (child.stderr.take().unwrap(), log.clone());
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut kept = kept.lock().unwrap();
            kept.push_str(&line);
            kept.push('\n');
        }
    });
    let Ok(Some(local)) = heard.recv_timeout(Duration::from_secs(30)) else {
        let _ = child.kill();
        panic!("kubectl port-forward never listened: {}", log.lock().unwrap());
    };
    Forward { child, port: local, log }
}

/// `GET /` through `port` on this machine's loopback: the whole answer (empty when the connection ends first).
pub(super) fn get(port: u16) -> String {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(15)));
    let _ = stream.write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    text(&answer)
}

fn python(script: &str, args: &[&str]) -> std::process::Output {
    let python = std::env::var("NEST_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    Command::new(python).args(["-c", script]).args(args).output().unwrap()
}

/// The Python client's `portforward`, as its e2e tests `test_portforward_raw` and `test_portforward_http` use it.
pub(super) const PYTHON_PORT_FORWARD: &str = r#"
import select, socket, sys, time
import urllib.request as urllib_request
from kubernetes import client, config
from kubernetes.stream import portforward
config.load_kube_config(sys.argv[1])
api = client.CoreV1Api()
for ix in range(3):
    pf = portforward(api.connect_get_namespaced_pod_portforward, "echo", "default", ports="1234,1235,1236")
    assert pf.connected
    socks = {p: pf.socket(p) for p in (1234, 1235)}
    sent = {p: b"Test %d port %d forwarding" % (ix, p) for p in socks}
    for p, s in socks.items():
        s.setblocking(True)
        s.sendall(sent[p])
    replies = {p: b"" for p in socks}
    deadline = time.time() + 60
    while any(replies[p] != sent[p] for p in socks):
        assert time.time() < deadline, replies
        r, _, _ = select.select(list(socks.values()), [], [], 1)
        for p, s in socks.items():
            if s in r:
                data = s.recv(1024)
                assert data, "unexpected close of %d" % p
                replies[p] += data
    # Nothing listens on 1236: its socket ends, and its error channel says why.
    lonely = pf.socket(1236)
    lonely.setblocking(True)
    assert lonely.recv(1024) == b""
    assert pf.error(1236), "no error for 1236"
    lonely.close()
    for s in socks.values():
        s.close()
    time.sleep(1)
    assert not pf.connected
    assert pf.error(1234) is None and pf.error(1235) is None, (pf.error(1234), pf.error(1235))

def kubernetes_create_connection(address, *args, **kwargs):
    name, namespace, suffix = address[0].split(".")
    pf = portforward(api.connect_get_namespaced_pod_portforward, name, namespace, ports=str(address[1]))
    return pf.socket(address[1])
socket.create_connection = kubernetes_create_connection
response = urllib_request.urlopen("http://web.default.kubernetes/")
html = response.read().decode("utf-8")
assert response.code == 200 and "<h1>Welcome to nginx!</h1>" in html, html
print("ok")
"#;

/// A SPDY client written by hand that speaks to the API server as an attacker would: an oversized frame, then a
/// flood of streams that never pair. Each connection must end with a GOAWAY, and only that connection.
const PYTHON_HOSTILE_SPDY: &str = r#"
import socket, ssl, struct, sys, zlib
from urllib.parse import urlparse
from kubernetes import client, config
config.load_kube_config(sys.argv[1])
c = client.Configuration.get_default_copy()
u = urlparse(c.host)
ctx = ssl.create_default_context(cafile=c.ssl_ca_cert)
ctx.load_cert_chain(c.cert_file, c.key_file)

def connect():
    s = ctx.wrap_socket(socket.create_connection((u.hostname, u.port)), server_hostname=u.hostname)
    s.sendall(b"POST /api/v1/namespaces/default/pods/web/portforward HTTP/1.1\r\nHost: %s\r\n"
              b"Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n"
              b"Content-Length: 0\r\n\r\n" % u.hostname.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return s

def frames_until_closed(s):
    s.settimeout(60)
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            break
        if not chunk:
            break
        data += chunk
    kinds = []
    while len(data) >= 8:
        word, flags_length = struct.unpack(">II", data[:8])
        length = flags_length & 0xffffff
        kinds.append(word & 0xffff if word & 0x80000000 else "data")
        data = data[8 + length:]
    return kinds

s = connect()
s.sendall(struct.pack(">HHI", 0x8003, 6, 0xffffff))
kinds = frames_until_closed(s)
assert kinds[-1:] == [7], kinds

s = connect()
z = zlib.compressobj()
def block(pairs):
    raw = struct.pack(">I", len(pairs))
    for k, v in pairs:
        raw += struct.pack(">I", len(k)) + k + struct.pack(">I", len(v)) + v
    return z.compress(raw) + z.flush(zlib.Z_SYNC_FLUSH)
for i in range(400):
    payload = struct.pack(">IIBB", 2 * i + 1, 0, 0, 0)
    payload += block([(b"streamtype", b"data"), (b"port", b"80"), (b"requestid", str(i).encode())])
    try:
        s.sendall(struct.pack(">HHI", 0x8003, 1, len(payload)) + payload)
    except OSError:
        break
# The connection ends with a GOAWAY after at most 256 replies: the node reads on (and drops) what this side still
# writes, so no reset overtakes it.
kinds = frames_until_closed(s)
replies = kinds.count(2)
assert 0 < replies <= 256, (replies, kinds[-3:])
assert kinds[-1:] == [7], kinds[-3:]
print("ok")
"#;

#[test]
fn port_forward_reaches_a_pods_ports_in_every_transport_and_nothing_outside_it() {
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let registry = registry(work.path());
    test_images(&registry);
    let nginx = format!("{}/library/nginx:latest", registry.address);
    let busybox = format!("{}/library/busybox:latest", registry.address);
    let data = tempfile::tempdir().unwrap();
    let (child, _) = up_with(data.path(), &["--no-demo", "--pull-from", &registry.address]);
    let admin = data.path().join("admin.kubeconfig");
    let (admin, cache) = (admin.as_path(), cache.path());
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  containers: [{{name: web, image: "{nginx}", ports: [{{containerPort: 80}}]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: echo}}
spec:
  containers:
  - name: echo
    image: "{busybox}"
    command: [sh, -c, "nc -ll -p 1234 -e cat & nc -ll -p 1235 -e cat & wait"]
"#
    );
    let file = cache.join("pods.yaml");
    std::fs::write(&file, manifest).unwrap();
    let applied = kubectl(admin, cache, &["apply", "-f", file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    for pod in ["web", "echo"] {
        eventually(120, &format!("{pod} running"), || {
            let out =
                kubectl(admin, cache, &["get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].state}"]);
            text(&out.stdout).contains("running")
        });
    }
    eventually(30, "nginx answering through a port-forward", || {
        get(forward(admin, cache, "web", 80, &[]).port).contains("Welcome to nginx!")
    });

    let mut cases = Cases::new();
    cases.case("kubectl port-forward (SPDY tunnelled in WebSocket) serves nginx's welcome page", || {
        let pf = forward(admin, cache, "web", 80, &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "true")]);
        for _ in 0..3 {
            let answer = get(pf.port);
            assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("Welcome to nginx!"), "{answer}");
        }
        assert!(pf.upgraded_with("GET"), "no WebSocket upgrade: {}", pf.log.lock().unwrap());
    });
    cases.case("kubectl port-forward over plain SPDY serves nginx's welcome page", || {
        let pf = forward(admin, cache, "web", 80, &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")]);
        for _ in 0..3 {
            let answer = get(pf.port);
            assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("Welcome to nginx!"), "{answer}");
        }
        assert!(pf.upgraded_with("POST"), "no SPDY upgrade: {}", pf.log.lock().unwrap());
    });
    cases.case("kubectl exec over SPDY: output, exit code, standard input", || {
        let spdy = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")];
        let exec = |args: &[&str], stdin: &[u8]| {
            let mut child = Command::new(crate::common::KUBECTL)
                .arg("exec")
                .args(args)
                .env("KUBECONFIG", admin)
                .env("KUBECACHEDIR", cache)
                .envs(spdy)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(stdin).unwrap();
            child.wait_with_output().unwrap()
        };
        let out = exec(&["echo", "--", "cat", "/etc/hostname"], b"");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "echo\n");
        let out = exec(&["echo", "--", "sh", "-c", "echo out; echo err >&2; exit 3"], b"");
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "out\n");
        assert!(text(&out.stderr).contains("err\n"), "{}", text(&out.stderr));
        let out = exec(&["-i", "echo", "--", "sh", "-c", "wc -c; echo done"], b"hello\n");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout).split_whitespace().collect::<Vec<_>>(), ["6", "done"]);
    });
    cases.case("the Python client's portforward (test_portforward_raw, test_portforward_http)", || {
        let out = python(PYTHON_PORT_FORWARD, &[admin.to_str().unwrap()]);
        assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    });
    cases.case("hostile: ports 0, 70000 and a name are refused with a 400 Status", || {
        for port in ["0", "70000", "http"] {
            let path = format!("/api/v1/namespaces/default/pods/web/portforward?ports={port}");
            let out = kubectl(admin, cache, &["get", "--raw", &path]);
            let said = text(&out.stderr);
            assert!(!out.status.success() && said.contains("BadRequest"), "{port}: {said}");
        }
        let out = kubectl(admin, cache, &["get", "--raw", "/api/v1/namespaces/default/pods/nope/portforward?ports=80"]);
        assert!(text(&out.stderr).contains("NotFound"), "{}", text(&out.stderr));
    });
    cases.case("hostile: a user who may only get pods/portforward cannot forward: upstream's 403", || {
        for args in [
            &["create", "role", "getter", "--verb=get", "--resource=pods,pods/portforward"][..],
            &["create", "rolebinding", "getter", "--role=getter", "--user=getter"],
        ] {
            let out = kubectl(admin, cache, args);
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
        // Both transports: the WebSocket GET needs `create` too, and so does the SPDY POST kubectl falls back to.
        for websockets in ["true", "false"] {
            let out = Command::new(crate::common::KUBECTL)
                .args(["port-forward", "--as", "getter", "pod/web", ":80"])
                .env("KUBECONFIG", admin)
                .env("KUBECACHEDIR", cache)
                .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets)
                .output()
                .unwrap();
            let said = text(&out.stderr);
            let forbidden = r#"User "getter" cannot create resource "pods/portforward""#;
            assert!(!out.status.success() && said.contains(forbidden), "{websockets}: {said}");
        }
    });
    cases.case("hostile: a port only the node's loopback listens on reaches nothing", || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        for env in [("KUBECTL_PORT_FORWARD_WEBSOCKETS", "true"), ("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")] {
            let pf = forward(admin, cache, "web", port, &[env]);
            let answer = get(pf.port);
            assert_eq!(answer, "", "{env:?}: an answer from outside the pod");
        }
        let script = format!(
            "import sys\nfrom kubernetes import client, config\nfrom kubernetes.stream import portforward\n\
             config.load_kube_config(sys.argv[1])\napi = client.CoreV1Api()\n\
             pf = portforward(api.connect_get_namespaced_pod_portforward, 'web', 'default', ports='{port}')\n\
             s = pf.socket({port})\ns.setblocking(True)\n\
             try:\n    s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n    assert s.recv(1024) == b''\n\
             except OSError:\n    pass\nassert pf.error({port}), 'no error'\nprint(pf.error({port}))\n"
        );
        let out = python(&script, &[admin.to_str().unwrap()]);
        assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
        assert!(text(&out.stdout).contains("error forwarding port"), "{}", text(&out.stdout));
        assert!(
            matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the node's loopback listener was reached"
        );
    });
    cases.case("hostile: an oversized SPDY frame and a flood of streams end only their own connection", || {
        let out = python(PYTHON_HOSTILE_SPDY, &[admin.to_str().unwrap()]);
        assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
        let pf = forward(admin, cache, "web", 80, &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")]);
        assert!(get(pf.port).contains("Welcome to nginx!"), "the node stopped serving after the attack");
    });
    stop(child);
    cases.finish();
}
