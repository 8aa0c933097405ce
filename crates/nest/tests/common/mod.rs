//! The harness the black-box tests share: a real `nest apiserver` process and the clients pointed at it.

#![allow(dead_code)] // each test binary uses a different part of the harness

pub mod management;
pub mod registry;
pub mod up;

/// A pod `hardened` that passes the restricted level of the Pod Security Standards (no namespace: `-n` chooses).
pub const RESTRICTED_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: hardened}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: c
    image: nginx
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
"#;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";

/// A running `nest apiserver` and a kubectl pointed at it.
pub struct Server {
    child: Child,
    _data: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub cache: tempfile::TempDir,
}

impl Server {
    pub fn start(storage: &Storage) -> Server {
        Server::start_sharing(storage, &format!("/test-{}-{}", std::process::id(), fastrand::u64(..)))
    }

    /// Starts a server whose etcd keys live under `prefix`; two servers given the same prefix share their objects.
    pub fn start_sharing(storage: &Storage, prefix: &str) -> Server {
        Server::start_in(tempfile::tempdir().unwrap(), storage, prefix, &[])
    }

    /// Starts a server on the etcd at `url` (its own key prefix) with more arguments.
    pub fn start_in_etcd(url: &str, args: &[&str]) -> Server {
        let prefix = format!("/test-{}-{}", std::process::id(), fastrand::u64(..));
        Server::start_in(tempfile::tempdir().unwrap(), &Storage::Etcd(url.to_string()), &prefix, args)
    }

    /// Starts a server on `storage` (its own key prefix) with more arguments.
    pub fn start_on(storage: &Storage, args: &[&str]) -> Server {
        let prefix = format!("/test-{}-{}", std::process::id(), fastrand::u64(..));
        Server::start_in(tempfile::tempdir().unwrap(), storage, &prefix, args)
    }

    /// Starts a server on embedded storage with more arguments (such as `--service-cidr`).
    pub fn start_with(args: &[&str]) -> Server {
        Server::start_in(tempfile::tempdir().unwrap(), &Storage::Embedded, "", args)
    }

    /// Stops the server with SIGTERM and starts it again on the same data directory (and so the same store).
    pub fn restart(mut self) -> Server {
        self.stop();
        let data = std::mem::replace(&mut self._data, tempfile::tempdir().unwrap());
        Server::start_in(data, &Storage::Embedded, "", &[])
    }

    /// A server alone has no controller-manager to make each namespace's `default` ServiceAccount, so, as envtest
    /// runs kube-apiserver, its ServiceAccount admission is off unless the test's arguments say which plugins run
    /// (the harnesses with controllers pass `--enable-admission-plugins=ServiceAccount`).
    fn start_in(data: tempfile::TempDir, storage: &Storage, prefix: &str, args: &[&str]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_nest"));
        command.args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data.path()).args(args);
        if !args.iter().any(|a| a.contains("-admission-plugins")) {
            command.arg("--disable-admission-plugins=ServiceAccount");
        }
        if let Storage::Etcd(url) = storage {
            command.arg(format!("--storage=etcd={url}")).arg(format!("--storage-prefix={prefix}"));
        }
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start nest apiserver");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !line.contains("serving https://") {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "nest apiserver exited before it was ready");
            assert!(Instant::now() < deadline, "nest apiserver did not become ready");
        }
        // Keep draining its log so it never blocks on a full pipe; a panic in it is kept for scripts/check.
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                keep_if_panic("nest apiserver", &line);
            }
        });
        let kubeconfig = data.path().join("admin.kubeconfig");
        Server { child, _data: data, kubeconfig, cache: tempfile::tempdir().unwrap() }
    }

    /// The server's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's data directory (its PKI is in `pki/`).
    pub fn data_dir(&self) -> &std::path::Path {
        self._data.path()
    }

    /// kubectl against this server with `token` as its only credential (no kubeconfig).
    pub fn with_token(&self, token: &str, args: &[&str]) -> Output {
        let config = std::fs::read_to_string(&self.kubeconfig).unwrap();
        let url = config.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap().to_string();
        let ca = self.data_dir().join("pki/ca.crt");
        Command::new(KUBECTL)
            .args(["--server", &url, "--certificate-authority", ca.to_str().unwrap(), &format!("--token={token}")])
            .args(args)
            .env("KUBECONFIG", "/dev/null")
            .env("KUBECACHEDIR", self.cache.path())
            .output()
            .unwrap()
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with_input(args, None)
    }

    pub fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> Output {
        let mut child = Command::new(KUBECTL)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", self.cache.path())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        if let Some(input) = input {
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// Runs kubectl and returns its standard output, failing the test if kubectl fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs kubectl with `input` on its standard input and returns its standard output, failing the test if it fails.
    pub fn ok_with_input(&self, args: &[&str], input: &str) -> String {
        let out = self.kubectl_with_input(args, Some(input));
        assert!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn apply_manifest(&self, manifest: &str) -> String {
        let out = self.kubectl_with_input(&["create", "-f", "-"], Some(manifest));
        assert!(out.status.success(), "kubectl create -f failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Creates from a manifest that the server must refuse; returns kubectl's error output.
    pub fn create_refused(&self, manifest: &str) -> String {
        let out = self.kubectl_with_input(&["create", "-f", "-"], Some(manifest));
        assert!(!out.status.success(), "the server accepted {manifest}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// POSTs `body` to `path` over HTTPS as the admin (curl with the admin's client certificate): the HTTP status
    /// and the body as it came.
    pub fn post_raw(&self, path: &str, body: &Value) -> (u16, String) {
        let pki = self.data_dir().join("pki");
        let url = self.ok(&["config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"]);
        let out = Command::new("curl")
            .args(["-s", "-X", "POST", "-H", "Content-Type: application/json", "-w", "\n%{http_code}"])
            .arg("--cacert")
            .arg(pki.join("ca.crt"))
            .arg("--cert")
            .arg(pki.join("admin.crt"))
            .arg("--key")
            .arg(pki.join("admin.key"))
            .arg("--data-binary")
            .arg(body.to_string())
            .arg(format!("{url}{path}"))
            .output()
            .expect("curl");
        let text = String::from_utf8(out.stdout).unwrap();
        let (answer, code) = text.rsplit_once('\n').expect("a status code");
        (code.parse().unwrap(), answer.to_string())
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Server {
    /// SIGTERM, as an operator would stop it, then make sure it is gone.
    fn stop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub enum Storage {
    Embedded,
    Etcd(String),
}

pub fn backends() -> Vec<(&'static str, Storage)> {
    let mut backends = vec![("embedded", Storage::Embedded)];
    if cfg!(feature = "etcd") {
        let url = std::env::var("NEST_TEST_ETCD")
            .expect("tests of the etcd backend need NEST_TEST_ETCD (scripts/check starts an etcd and sets it)");
        backends.push(("etcd", Storage::Etcd(url)));
    }
    backends
}

/// A running `nest` component (`controller-manager`, `scheduler`, `node`) pointed at a server, with what it has
/// printed so far.
pub struct Component {
    child: Child,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

/// The controller-manager is one component among others.
pub type ControllerManager = Component;

impl Component {
    /// `nest controller-manager` with this identity and Lease duration, provisioning local volumes for claims as
    /// `nest up`'s does.
    pub fn start(server: &Server, identity: &str, lease_seconds: u64) -> Component {
        let lease = lease_seconds.to_string();
        let args =
            ["controller-manager", "--identity", identity, "--lease-duration-seconds", &lease, "--local-volumes"];
        Component::run(server, &args)
    }

    /// `nest <args> --kubeconfig <the server's>`.
    pub fn run(server: &Server, args: &[&str]) -> Component {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nest"))
            .args(args)
            .arg("--kubeconfig")
            .arg(&server.kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a nest component");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (stderr, sink) = (child.stderr.take().unwrap(), log.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                keep_if_panic("a nest component", &line);
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Component { child, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn is_leading(&self) -> bool {
        self.log().contains("is leading")
    }

    /// SIGTERM, and wait for the process to exit.
    pub fn terminate(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }

    /// SIGKILL: the instance stops renewing its Lease without a chance to hand it over.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Appends `line` of `whose` log to `$NEST_TEST_LOGS/panics.log` when it tells of a panic: `scripts/check` fails a run
/// in which any process the tests started panicked, whether or not a test noticed (issue 33).
pub fn keep_if_panic(whose: &str, line: &str) {
    if !line.contains("panicked") {
        return;
    }
    if let Some(dir) = std::env::var_os("NEST_TEST_LOGS") {
        let _ = std::fs::create_dir_all(&dir);
        let file =
            std::fs::OpenOptions::new().create(true).append(true).open(std::path::Path::new(&dir).join("panics.log"));
        if let Ok(mut file) = file {
            let _ = writeln!(file, "{whose}: {line}");
        }
    }
}

/// Polls `check` until it holds, for at most `seconds`.
pub fn eventually(seconds: u64, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
