//! Issue 35's attach, ephemeral containers and cp, as a user drives them on `nest up` with the busybox test image
//! (`scripts/test-images`, through a loopback Docker Hub mirror): `kubectl attach -it` to a shell with `stdin` and
//! `tty`, `kubectl run -it --rm`, `kubectl debug -it --image=busybox` (an ephemeral container in the pod's
//! namespaces, beside its target's processes), `kubectl cp` both ways; and the hostile cases: attaching input to a
//! container without `stdin`, a privileged ephemeral container in a `baseline` namespace, an ephemeral-container
//! write that edits or removes an entry, and a tar stream that climbs out of its directory. One `nest up`.
//!
//! kubectl's `-t` needs a terminal: the interactive commands run in a pseudo-terminal the Python interpreter opens
//! ([`in_terminal`]), which types into them as a user would.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::registry::{registry, test_images};
use crate::common::up::{kubectl, stop, up_with};
use crate::common::{Cases, eventually};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn python() -> String {
    std::env::var("NEST_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Runs kubectl with `args` in a pseudo-terminal; once its output shows `ready`, types `input` (a line at a time,
/// `\r` as Enter) and reads until kubectl ends or `seconds` pass. Everything the terminal showed, and kubectl's exit
/// code (`None` if it had to be killed).
pub(super) fn in_terminal(
    kubeconfig: &Path,
    cache: &Path,
    args: &[&str],
    ready: &str,
    input: &str,
    seconds: u64,
) -> (String, Option<i32>) {
    in_terminal_with(kubeconfig, cache, &[], args, ready, input, seconds)
}

/// [`in_terminal`], with `env` set for kubectl.
fn in_terminal_with(
    kubeconfig: &Path,
    cache: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    ready: &str,
    input: &str,
    seconds: u64,
) -> (String, Option<i32>) {
    let script = r#"
import fcntl, os, pty, select, struct, sys, termios, time, json
ready, typed, seconds = sys.argv[1].encode(), json.loads(sys.argv[2]), float(sys.argv[3])
pid, fd = pty.fork()
if pid == 0:
    # A terminal of a size, as a user's window has: 45 rows of 123 columns.
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 45, 123, 0, 0))
    os.execvp(sys.argv[4], sys.argv[4:])
out, start, sent, ended = b"", time.time(), False, False
while time.time() - start < seconds:
    if not sent and ready in out:
        time.sleep(1)
        for line in typed:
            os.write(fd, line.encode())
            time.sleep(0.5)
        sent = True
    r, _, _ = select.select([fd], [], [], 0.2)
    if r:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            ended = True
            break
        out += data
# The terminal closes as kubectl exits, a moment before it can be waited for: a few seconds' grace then.
done, status = os.waitpid(pid, os.WNOHANG)
grace = time.time() + 5
while ended and done == 0 and time.time() < grace:
    time.sleep(0.1)
    done, status = os.waitpid(pid, os.WNOHANG)
if done == 0:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    code = "killed"
else:
    code = str(os.waitstatus_to_exitcode(status))
sys.stdout.write(code + "\n" + out.decode(errors="replace"))
"#;
    let typed: Vec<String> = input.split_inclusive('\r').map(str::to_string).collect();
    let out = Command::new(python())
        .args(["-c", script, ready, &serde_json::to_string(&typed).unwrap(), &seconds.to_string()])
        .arg(crate::common::KUBECTL)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", cache)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let said = text(&out.stdout);
    let (code, shown) = said.split_once('\n').unwrap_or((&said, ""));
    (shown.to_string(), code.parse().ok())
}

/// kubectl with `stdin` written to it (and closed).
fn with_input(kubeconfig: &Path, cache: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(crate::common::KUBECTL)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", cache)
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

fn json(kubeconfig: &Path, cache: &Path, args: &[&str]) -> serde_json::Value {
    let out = kubectl(kubeconfig, cache, &[args, &["-o", "json"]].concat());
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// A tar stream an attacker writes: a file climbing out with `../..`, one at an absolute path, and a symbolic link
/// to `/` with a file written through it, each named `marker`.
fn hostile_tar(dir: &Path, marker: &str) -> Vec<u8> {
    let script = r#"
import io, sys, tarfile
marker = sys.argv[1]
buffer = io.BytesIO()
with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
    def add(name, data=b"pwned\n"):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    add("../../" + marker + "-climbed")
    add("/tmp/" + marker + "-absolute")
    add("/" + marker + "-root")
    link = tarfile.TarInfo("escape")
    link.type = tarfile.SYMTYPE
    link.linkname = "/"
    tar.addfile(link)
    add("escape/tmp/" + marker + "-linked")
    add("escape/" + marker + "-linked-root")
sys.stdout.buffer.write(buffer.getvalue())
"#;
    let out = Command::new(python()).args(["-c", script, marker]).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    out.stdout
}

/// Every path beneath `dir` (not following links) whose name contains `needle`.
fn found_beneath(dir: &Path, needle: &str, depth: usize) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name().to_string_lossy().contains(needle) {
            found.push(path.clone());
        }
        if depth > 0 && entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(found_beneath(&path, needle, depth - 1));
        }
    }
    found
}

#[test]
fn attach_debug_and_cp_work_as_kubectl_drives_them_and_refuse_what_upstream_refuses() {
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let registry = registry(work.path());
    test_images(&registry);
    let data = tempfile::tempdir().unwrap();
    let mirror = format!("docker.io=http://{}", registry.address);
    let (child, _) = up_with(data.path(), &["--no-demo", "--registry-mirror", &mirror]);
    let admin = data.path().join("admin.kubeconfig");
    let (admin, cache) = (admin.as_path(), cache.path());
    let manifest = r#"
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
kind: Namespace
metadata:
  name: locked
  labels: {pod-security.kubernetes.io/enforce: baseline}
---
apiVersion: v1
kind: Pod
metadata: {name: guarded, namespace: locked}
spec:
  containers: [{name: app, image: busybox, command: [sleep, "3600"]}]
"#;
    let file = cache.join("pods.yaml");
    std::fs::write(&file, manifest).unwrap();
    let applied = kubectl(admin, cache, &["apply", "-f", file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    for (namespace, pod) in [("default", "console"), ("default", "ticker"), ("locked", "guarded")] {
        eventually(120, &format!("{pod} running"), || {
            let pod = json(admin, cache, &["get", "pod", "-n", namespace, pod]);
            pod["status"]["containerStatuses"][0]["state"]["running"].is_object()
        });
    }
    let pods_dir = data.path().join("nodes/nest-node-0/pods");

    let mut cases = Cases::new();
    cases.case("attach -it reaches the shell of a container with stdin and tty; its output is in the log", || {
        let typed = "echo marker-$((6*7))\r";
        let (shown, code) =
            in_terminal(admin, cache, &["attach", "-it", "console"], "pressing enter", &format!("\r{typed}"), 15);
        assert!(shown.contains("marker-42"), "{shown}");
        assert_eq!(code, None, "attach stays until detached: {shown}");
        let logs = kubectl(admin, cache, &["logs", "console"]);
        assert!(text(&logs.stdout).contains("marker-42"), "the terminal's output is logged: {}", text(&logs.stdout));
        // The container kept running after its client went.
        let pod = json(admin, cache, &["get", "pod", "console"]);
        assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0, "{pod}");
    });
    cases.case("attach -it over SPDY/3.1 (a POST upgrade), as kubectl falls back to it", || {
        let spdy = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")];
        let args = ["attach", "-it", "-v=7", "console"];
        let typed = "\recho spdy-$((8*8))\r";
        let (shown, code) = in_terminal_with(admin, cache, &spdy, &args, "pressing enter", typed, 15);
        assert!(shown.contains("spdy-64"), "{shown}");
        assert_eq!(code, None, "attach stays until detached: {shown}");
        let asked: Vec<&str> = shown.lines().filter(|l| l.contains("\"Request\"") && l.contains("/attach")).collect();
        assert!(!asked.is_empty() && asked.iter().all(|l| l.contains("verb=\"POST\"")), "not SPDY: {shown}");
        assert!(shown.contains("status=\"101 Switching Protocols\""), "{shown}");
    });
    cases.case("exec -it: a shell in a terminal of the client's size", || {
        let (shown, code) =
            in_terminal(admin, cache, &["exec", "-it", "ticker", "--", "sh"], "/ #", "stty size\rexit\r", 30);
        assert!(shown.contains("45 123"), "{shown}");
        assert_eq!(code, Some(0), "{shown}");
    });
    cases.case("attach without -i streams the running container's output", || {
        let (shown, _) = in_terminal(admin, cache, &["attach", "ticker"], "", "", 5);
        assert!(shown.contains("tick"), "{shown}");
    });
    cases.case("attach -i to a container without stdin: true is refused, saying why", || {
        let out = with_input(admin, cache, &["attach", "-i", "ticker"], b"echo hi\n");
        let said = text(&out.stderr);
        assert!(!out.status.success() && said.contains("does not set stdin: true"), "{said}");
    });
    cases.case("a user who may only get pods/attach cannot attach: upstream's 403", || {
        for args in [
            &["create", "role", "attach-getter", "--verb=get", "--resource=pods,pods/attach"][..],
            &["create", "rolebinding", "attach-getter", "--role=attach-getter", "--user=attach-getter"],
        ] {
            let out = kubectl(admin, cache, args);
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
        let out = with_input(admin, cache, &["attach", "--as", "attach-getter", "ticker"], b"");
        let said = text(&out.stderr);
        let forbidden = r#"User "attach-getter" cannot create resource "pods/attach""#;
        assert!(!out.status.success() && said.contains(forbidden), "{said}");
    });
    cases.case("run -it --rm: a shell in a new pod, which is deleted after", || {
        let args = ["run", "-it", "--rm", "oneshot", "--image=busybox", "--restart=Never", "--", "sh"];
        let (shown, code) = in_terminal(admin, cache, &args, "pressing enter", "\recho run-$((5+5))\rexit\r", 90);
        assert!(shown.contains("run-10"), "{shown}");
        assert_eq!(code, Some(0), "{shown}");
        assert!(shown.contains(r#"pod "oneshot" deleted"#), "{shown}");
    });
    let mut debugger = String::new();
    cases.case("debug -it --image=busybox: an ephemeral container beside its target's processes", || {
        let args = ["debug", "-it", "pod/ticker", "--image=busybox", "--target=tick", "--", "sh"];
        let typed = "\recho debug-$((3*3))\rps\rexit\r";
        let (shown, code) = in_terminal(admin, cache, &args, "pressing enter", typed, 90);
        assert!(shown.contains("debug-9"), "{shown}");
        assert!(shown.contains("while true"), "the target's processes are in its PID namespace: {shown}");
        assert_eq!(code, Some(0), "{shown}");
        eventually(30, "the ephemeral container's status", || {
            let pod = json(admin, cache, &["get", "pod", "ticker"]);
            let status = &pod["status"]["ephemeralContainerStatuses"][0];
            debugger = status["name"].as_str().unwrap_or_default().to_string();
            status["state"]["terminated"].is_object()
        });
        assert!(debugger.starts_with("debugger-"), "{debugger}");
    });
    cases.case("an ephemeral container's entry may not be edited or removed: 422", || {
        for (patch, refusal) in [
            (r#"[{"op":"replace","path":"/spec/ephemeralContainers/0/image","value":"nginx"}]"#, "may not be changed"),
            (r#"[{"op":"remove","path":"/spec/ephemeralContainers/0"}]"#, "may not be removed"),
        ] {
            let args = ["patch", "pod", "ticker", "--subresource=ephemeralcontainers", "--type=json", "-p", patch];
            let out = kubectl(admin, cache, &args);
            let said = text(&out.stderr);
            let expected = r#"The Pod "ticker" is invalid: spec.ephemeralContainers"#;
            assert!(!out.status.success() && said.contains(expected) && said.contains(refusal), "{said}");
        }
        let ports =
            r#"{"spec":{"ephemeralContainers":[{"name":"porty","image":"busybox","ports":[{"containerPort":80}]}]}}"#;
        let args = ["patch", "pod", "ticker", "--subresource=ephemeralcontainers", "--type=strategic", "-p", ports];
        let said = text(&kubectl(admin, cache, &args).stderr);
        assert!(said.contains("cannot be set for an Ephemeral Container"), "{said}");
    });
    cases.case("a privileged ephemeral container in a baseline namespace: Pod Security's refusal", || {
        let evil = r#"{"spec":{"ephemeralContainers":[{"name":"evil","image":"busybox","securityContext":{"privileged":true}}]}}"#;
        let args =
            ["patch", "pod", "guarded", "-n", "locked", "--subresource=ephemeralcontainers", "--type=strategic", "-p", evil];
        let out = kubectl(admin, cache, &args);
        let said = text(&out.stderr);
        let refusal = r#"pods "guarded" is forbidden: violates PodSecurity "baseline:latest": privileged (container "evil" must not set securityContext.privileged=true)"#;
        assert!(!out.status.success() && said.contains(refusal), "{said}");
        let pod = json(admin, cache, &["get", "pod", "guarded", "-n", "locked"]);
        assert!(pod["spec"]["ephemeralContainers"].is_null(), "nothing was added: {pod}");
    });
    cases.case("kubectl cp into the container and back", || {
        let local = cache.join("upload.txt");
        std::fs::write(&local, "carried both ways\n").unwrap();
        let out = kubectl(admin, cache, &["cp", local.to_str().unwrap(), "ticker:/tmp/upload.txt"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let read = kubectl(admin, cache, &["exec", "ticker", "--", "cat", "/tmp/upload.txt"]);
        assert_eq!(text(&read.stdout), "carried both ways\n", "{}", text(&read.stderr));
        let back = cache.join("back.txt");
        let out = kubectl(admin, cache, &["cp", "ticker:/tmp/upload.txt", back.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(std::fs::read_to_string(&back).unwrap(), "carried both ways\n");
    });
    cases.case("a tar stream that climbs out writes nothing outside the container's root", || {
        let marker = format!("nest-escape-{}", std::process::id());
        let tar = hostile_tar(cache, &marker);
        // busybox's tar may refuse some entries (its own words are in the failure message below); whatever it
        // wrote is inside the container.
        let out = with_input(admin, cache, &["exec", "-i", "ticker", "--", "tar", "x", "-C", "/tmp"], &tar);
        for dir in [Path::new("/"), Path::new("/tmp"), Path::new("/root"), Path::new("/run")] {
            let found = found_beneath(dir, &marker, 0);
            assert!(found.is_empty(), "written on the host: {found:?}");
        }
        let pod = json(admin, cache, &["get", "pod", "ticker"]);
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("none").to_string();
        let layer = pods_dir.join(&uid).join("layers");
        for found in found_beneath(data.path(), &marker, 12) {
            assert!(found.starts_with(&layer), "written outside the container's layers: {}", found.display());
        }
        let inside =
            kubectl(admin, cache, &["exec", "ticker", "--", "sh", "-c", &format!("ls / /tmp | grep {marker}")]);
        assert!(!text(&inside.stdout).is_empty(), "the entries landed inside the container: {}", text(&out.stderr));
    });
    stop(child);
    cases.finish();
}
