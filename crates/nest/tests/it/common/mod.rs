//! The harness the black-box tests share: a real `nest apiserver` process and the clients pointed at it.

pub mod fixtures;
pub mod management;
pub mod registry;
pub mod up;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use nest_testkit::{Cases, KUBECTL, Kubectl, RESTRICTED_POD, Storage, eventually, keep_if_panic};

/// A running `nest apiserver` and a kubectl pointed at it.
pub struct Server {
    child: Child,
    _data: tempfile::TempDir,
    client: Kubectl,
}

/// A server's admin is the kubectl the tests drive it with (`server.ok(…)`, `server.kubeconfig`).
impl std::ops::Deref for Server {
    type Target = Kubectl;
    fn deref(&self) -> &Kubectl {
        &self.client
    }
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
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))] // the etcd fault tests' own
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
        let client = Kubectl::for_server(data.path());
        Server { child, _data: data, client }
    }

    /// The server's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `nest` (the binary under test) with this server as its kubeconfig; asserts it succeeds, returns its output.
    pub fn nest(&self, args: &[&str]) -> String {
        let out =
            Command::new(env!("CARGO_BIN_EXE_nest")).args(args).env("KUBECONFIG", &self.kubeconfig).output().unwrap();
        assert!(out.status.success(), "nest {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
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

/// The backends this build tests: the embedded store, and etcd with the `etcd` feature.
pub fn backends() -> Vec<(&'static str, Storage)> {
    nest_testkit::backends(cfg!(feature = "etcd"))
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
