//! The platform every case attacks: `nest up` with its demo tenant and a second tenant, acme.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::eventually;
use crate::common::up::{self, Up};

/// `nest up` with two Ready tenants, and kubectl for the platform admin and each tenant admin.
pub struct Platform {
    up: Option<Up>,
    /// The mirror for `docker.io` of [`Platform::with_images`], and where it keeps the images.
    _mirror: Option<(crate::common::registry::Registry, tempfile::TempDir)>,
    pub data: tempfile::TempDir,
    pub cache: tempfile::TempDir,
    pub admin: PathBuf,
    pub demo: PathBuf,
    pub acme: PathBuf,
}

/// Whose kubectl.
#[derive(Clone, Copy, Debug)]
pub enum Who {
    Admin,
    Demo,
    Acme,
}

impl Platform {
    /// Starts `nest up` (with `args`), waits for demo, and creates acme as a platform admin would.
    pub fn start(args: &[&str]) -> Platform {
        Platform::start_with(args, None)
    }

    /// [`Platform::start`] with a mirror for `docker.io` holding the tests' images of real software (busybox, nginx,
    /// python: `common::registry::test_images`), which pods name as users do.
    pub fn with_images(args: &[&str]) -> Platform {
        let dir = tempfile::tempdir().unwrap();
        let (registry, flags) = crate::common::registry::docker_io_mirror(dir.path());
        let args: Vec<&str> = args.iter().copied().chain(flags.iter().map(String::as_str)).collect();
        Platform::start_with(&args, Some((registry, dir)))
    }

    fn start_with(args: &[&str], mirror: Option<(crate::common::registry::Registry, tempfile::TempDir)>) -> Platform {
        let (data, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (child, _) = up::up_with(data.path(), args);
        let admin = data.path().join("admin.kubeconfig");
        let demo = up::demo_tenant(data.path(), cache.path());
        nest(&admin, &["cluster", "create", "acme", "--wait", "--timeout", "120s"]);
        let acme = cache.path().join("acme.kubeconfig");
        std::fs::write(&acme, nest(&admin, &["cluster", "kubeconfig", "acme"])).unwrap();
        up::wait_for_simulation_class(&acme, cache.path());
        // One nest up at a time on the machine: `up_with` holds the machine's lock until it is stopped.
        Platform { up: Some(child), _mirror: mirror, data, cache, admin, demo, acme }
    }

    /// What `nest up` holds of the machine's memory now (its resident set, in MiB): the management cluster's API
    /// server, controllers, syncer and node, not the processes of the pods it runs.
    pub fn up_rss_mib(&self) -> f64 {
        let pid = self.up.as_ref().map_or(0, Up::pid);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kib / 1024.0
    }

    fn kubeconfig(&self, who: Who) -> &Path {
        match who {
            Who::Admin => &self.admin,
            Who::Demo => &self.demo,
            Who::Acme => &self.acme,
        }
    }

    /// kubectl as `who`.
    pub fn kubectl(&self, who: Who, args: &[&str]) -> Output {
        up::kubectl(self.kubeconfig(who), self.cache.path(), args)
    }

    /// kubectl as `who`, which must succeed; its standard output.
    pub fn ok(&self, who: Who, args: &[&str]) -> String {
        let out = self.kubectl(who, args);
        assert!(out.status.success(), "{who:?}: kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// kubectl as `who` with `-o json`, parsed.
    pub fn json(&self, who: Who, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(who, &[args, &["-o", "json"]].concat())).unwrap()
    }

    /// kubectl as `who` reading `manifest` from standard input (`create -f -`, `apply -f -`).
    pub fn with_input(&self, who: Who, args: &[&str], manifest: &str) -> Output {
        self.with_input_as(self.kubeconfig(who), args, manifest)
    }

    /// kubectl with kubeconfig `kubeconfig` (a tenant the case made) reading `manifest` from standard input.
    pub fn with_input_as(&self, kubeconfig: &Path, args: &[&str], manifest: &str) -> Output {
        use std::io::Write as _;
        let mut child = Command::new(crate::common::KUBECTL)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("KUBECACHEDIR", self.cache.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(manifest.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// kubectl as `who` creating `object`, which must succeed.
    pub fn create(&self, who: Who, object: &Value) {
        let out = self.with_input(who, &["create", "-f", "-"], &object.to_string());
        let name = &object["metadata"]["name"];
        assert!(out.status.success(), "{who:?} creating {name}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Whether every part of the platform still serves: the management API server, both tenants' API servers and
    /// control planes (Ready), and the node (Ready, its pods reported).
    pub fn assert_serving(&self) {
        for who in [Who::Admin, Who::Demo, Who::Acme] {
            eventually(60, &format!("{who:?}'s API server answering"), || {
                self.kubectl(who, &["get", "--raw", "/readyz"]).status.success()
            });
        }
        for plane in ["demo", "acme"] {
            eventually(60, &format!("{plane}'s control plane Ready"), || {
                let args = ["wait", &format!("nestedcontrolplane/{plane}"), "--for=condition=Ready", "--timeout=5s"];
                self.kubectl(Who::Admin, &args).status.success()
            });
        }
        eventually(60, "the node Ready", || {
            let node = self.json(Who::Admin, &["get", "node", "nest-node-0"]);
            let conditions = node["status"]["conditions"].as_array().cloned().unwrap_or_default();
            conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
    }

    /// Stops nest up and asserts that nothing in its logs, or its pods', tells of a panic.
    pub fn finish(mut self) {
        if let Some(up) = self.up.take() {
            up::stop(up);
        }
        let panics = up::panics_in(self.data.path());
        assert!(panics.is_empty(), "panics in the logs:\n{}", panics.join("\n"));
    }
}

/// A pod that restricted Pod Security (a tenant's default) admits, of an image no registry has, simulated (it asks
/// for RuntimeClass nest-simulated: the node gives it an address on the pod network), saying nothing of its
/// resources.
pub fn restricted_pod(name: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "runtimeClassName": "nest-simulated",
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "c", "image": "registry.invalid/none:1",
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    })
}

/// `nest ARGS` as the platform admin; its standard output.
pub fn nest(admin: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nest")).args(args).env("KUBECONFIG", admin).output().unwrap();
    assert!(out.status.success(), "nest {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
