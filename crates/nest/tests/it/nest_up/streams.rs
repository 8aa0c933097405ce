//! Issue 35's streams, as a user drives them on `nest up`: `kubectl exec` (WebSocket, `v5.channel.k8s.io`) into a
//! pod that really runs — a command's output, its exit code, standard input — the Python client's `stream` exec,
//! and who may: a user allowed only to read pods gets upstream's 403. One `nest up` for every case.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::up::{kubectl, processes_with, stop, up_with};
use crate::common::{Cases, eventually};

/// `kubectl exec` in the management cluster with `stdin` written to it (and closed), `env` set.
fn exec(kubeconfig: &Path, cache: &Path, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(crate::common::KUBECTL)
        .arg("exec")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", cache)
        .envs(env.iter().copied())
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

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn kubectl_exec_runs_commands_in_a_running_pod_for_whoever_may_create_pods_exec() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (child, _) = up_with(data.path(), &["--no-demo"]);
    let admin = data.path().join("admin.kubeconfig");
    let (admin, cache) = (admin.as_path(), cache.path());
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: shell}\nspec:\n  containers:\n  - {name: main, image: nest, \
               args: [debug, cat]}\n";
    let file = cache.join("shell.yaml");
    std::fs::write(&file, pod).unwrap();
    let created = kubectl(admin, cache, &["apply", "-f", &file.display().to_string()]);
    assert!(created.status.success(), "{}", text(&created.stderr));
    eventually(120, "the pod running", || {
        let out = kubectl(admin, cache, &["get", "pod", "shell", "-o", "jsonpath={.status.phase}"]);
        text(&out.stdout) == "Running"
    });

    let mut cases = Cases::new();
    cases.case("exec prints the command's output", || {
        let out = exec(admin, cache, &["shell", "--", "cat", "/etc/hostname"], b"", &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "shell\n");
    });
    cases.case("exec's exit code is the command's", || {
        let out = exec(admin, cache, &["shell", "--", "sh", "-c", "echo out; echo err >&2; exit 3"], b"", &[]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "out\n");
        let said = text(&out.stderr);
        assert!(said.contains("err\n") && said.contains("command terminated with exit code 3"), "{said}");
    });
    cases.case("exec -i passes standard input and its end", || {
        let out = exec(admin, cache, &["-i", "shell", "--", "sh", "-c", "wc -c; echo done"], b"hello\n", &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout).split_whitespace().collect::<Vec<_>>(), ["6", "done"]);
    });
    cases.case("the command runs inside the sandbox, as the container's user", || {
        let out =
            exec(admin, cache, &["shell", "--", "sh", "-c", "id -u; cat /proc/1/cmdline | tr '\\0' ' '"], b"", &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let said = text(&out.stdout);
        // The container's PID namespace: its first process is nest's init, not the host's.
        assert!(said.starts_with("0\n") && said.contains("/.nest/init"), "{said}");
    });
    cases.case("exec into a container that does not exist is upstream's 400", || {
        let out = exec(admin, cache, &["shell", "-c", "nope", "--", "true"], b"", &[]);
        let said = text(&out.stderr);
        assert!(!out.status.success() && said.contains("container nope is not valid for pod shell"), "{said}");
    });
    cases.case("the Python client's stream exec", || {
        let python = std::env::var("NEST_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = r#"
import sys
from kubernetes import client, config
from kubernetes.stream import stream
config.load_kube_config(sys.argv[1])
api = client.CoreV1Api()
out = stream(api.connect_get_namespaced_pod_exec, "shell", "default", command=["cat", "/etc/hostname"],
             stderr=True, stdin=False, stdout=True, tty=False)
assert out == "shell\n", repr(out)
resp = stream(api.connect_get_namespaced_pod_exec, "shell", "default", command=["sh", "-c", "exit 5"],
              stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
resp.run_forever(timeout=30)
assert resp.returncode == 5, resp.returncode
print("ok")
"#;
        let out = Command::new(python).args(["-c", script]).arg(admin).output().unwrap();
        assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    });
    cases.case("a command whose client went away is killed", || {
        let mut client = Command::new(crate::common::KUBECTL)
            .args(["exec", "shell", "--", "sleep", "4242"])
            .env("KUBECONFIG", admin)
            .env("KUBECACHEDIR", cache)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        eventually(30, "the command running", || !processes_with("sleep 4242").is_empty());
        client.kill().unwrap();
        let _ = client.wait();
        eventually(30, "the command killed", || processes_with("sleep 4242").is_empty());
    });
    cases.case("a client that speaks only SPDY is served over SPDY", || {
        let env = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")];
        let out = exec(admin, cache, &["shell", "--", "cat", "/etc/hostname"], b"", &env);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "shell\n");
    });
    cases.case("a terminal, resized as the client asks", || {
        let python = std::env::var("NEST_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = r#"
import json, sys, time
from kubernetes import client, config
from kubernetes.stream import stream
config.load_kube_config(sys.argv[1])
api = client.CoreV1Api()
resp = stream(api.connect_get_namespaced_pod_exec, "shell", "default", command=["sh"],
              stderr=True, stdin=True, stdout=True, tty=True, _preload_content=False)
resp.write_channel(4, json.dumps({"Width": 123, "Height": 45}))
time.sleep(0.5)
resp.write_stdin("tty; stty size; exit 4\n")
out = ""
deadline = time.time() + 30
while resp.is_open() and time.time() < deadline:
    resp.update(timeout=1)
    out += resp.read_stdout(timeout=0) or ""
assert "/dev/pts/" in out and "45 123" in out, repr(out)
assert resp.returncode == 4, resp.returncode
print("ok")
"#;
        let out = Command::new(python).args(["-c", script]).arg(admin).output().unwrap();
        assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    });
    cases.case("a user who may only read pods cannot exec: upstream's 403", || {
        for args in [
            &["create", "role", "reader", "--verb=get,list", "--resource=pods"][..],
            &["create", "rolebinding", "reader", "--role=reader", "--user=reader"],
            // `get` on pods/exec alone does not open a WebSocket exec either (it needs `create`).
            &["create", "role", "getter", "--verb=get", "--resource=pods,pods/exec"],
            &["create", "rolebinding", "getter", "--role=getter", "--user=getter"],
        ] {
            let out = kubectl(admin, cache, args);
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
        for user in ["reader", "getter"] {
            let out = exec(admin, cache, &["--as", user, "shell", "--", "true"], b"", &[]);
            let said = text(&out.stderr);
            let forbidden = format!(r#"pods "shell" is forbidden: User "{user}" cannot create resource "pods/exec""#);
            assert!(!out.status.success() && said.contains(&forbidden), "{user}: {said}");
        }
    });
    stop(child);
    cases.finish();
}
