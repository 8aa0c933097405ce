//! What nest's test tiers share, so that a test reads the same whichever tier it is in: [`Kubectl`] (the real
//! kubectl 1.33 pointed at a server under test, with a cache directory of its own), [`eventually`], the storage
//! [`backends`] a test runs against, and [`keep_if_panic`] for the logs of the processes a test starts.
//!
//! The in-process tier (`crates/nest-apiserver/tests/api`) serves the API from the test's own process; the
//! end-to-end tier (`crates/nest/tests/it`) starts `nest` processes. Both hand their tests a [`Kubectl`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The machine's kubectl 1.33.
pub const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";

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

/// kubectl as a server's admin: the server's `admin.kubeconfig`, its PKI (`pki/` of its data directory) and a
/// discovery cache of its own (`KUBECACHEDIR`), so that no two servers' answers mix.
pub struct Kubectl {
    pub kubeconfig: PathBuf,
    pub cache: tempfile::TempDir,
    data_dir: PathBuf,
}

impl Kubectl {
    /// kubectl for the server whose data directory is `data_dir` (with `admin.kubeconfig` and `pki/` in it).
    pub fn for_server(data_dir: &Path) -> Kubectl {
        Kubectl {
            kubeconfig: data_dir.join("admin.kubeconfig"),
            cache: tempfile::tempdir().expect("a temporary directory"),
            data_dir: data_dir.to_path_buf(),
        }
    }

    /// The server's data directory (its PKI is in `pki/`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
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

/// Where a server under test keeps its objects.
pub enum Storage {
    Embedded,
    /// An etcd at this URL (each server under its own key prefix).
    Etcd(String),
}

/// The backends a test runs against: the embedded store, and the etcd `scripts/check` starts (`NEST_TEST_ETCD`)
/// when the test's crate is built with its `etcd` feature (`with_etcd`: `cfg!(feature = "etcd")` of the caller).
pub fn backends(with_etcd: bool) -> Vec<(&'static str, Storage)> {
    let mut backends = vec![("embedded", Storage::Embedded)];
    if with_etcd {
        let url = std::env::var("NEST_TEST_ETCD")
            .expect("tests of the etcd backend need NEST_TEST_ETCD (scripts/check starts an etcd and sets it)");
        backends.push(("etcd", Storage::Etcd(url)));
    }
    backends
}

/// Appends `line` of `whose` log to `$NEST_TEST_LOGS/panics.log` when it tells of a panic: `scripts/check` fails a run
/// in which any process the tests started panicked, whether or not a test noticed (issue 33).
pub fn keep_if_panic(whose: &str, line: &str) {
    if !line.contains("panicked") {
        return;
    }
    if let Some(dir) = std::env::var_os("NEST_TEST_LOGS") {
        let _ = std::fs::create_dir_all(&dir);
        let file = std::fs::OpenOptions::new().create(true).append(true).open(Path::new(&dir).join("panics.log"));
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

/// The cases of one long end-to-end script that share a setup too costly to make per case (a management cluster
/// with tenants): each case runs even when one before it failed, so one failure hides none of the rest, and
/// [`Cases::finish`] fails the test naming every case that failed. A case that needs what an earlier one made
/// fails too when that one did; its message says so.
#[derive(Default)]
pub struct Cases {
    failed: Vec<String>,
}

impl Cases {
    pub fn new() -> Cases {
        Cases::default()
    }

    /// Runs `check`; a panic in it (a failed assertion, an `eventually` that timed out) is recorded under `name`.
    /// How long it took goes to the test's output (shown when the test fails, or with `--nocapture`).
    pub fn case(&mut self, name: &str, check: impl FnOnce()) {
        let began = Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check));
        eprintln!(
            "case {name:?}: {} in {:.1} s",
            if outcome.is_ok() { "passed" } else { "failed" },
            began.elapsed().as_secs_f64()
        );
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(a panic without a message)");
            self.failed.push(format!("{name}: {message}"));
        }
    }

    /// Fails the test if any case failed, naming each.
    pub fn finish(self) {
        assert!(self.failed.is_empty(), "{} case(s) failed:\n{}", self.failed.len(), self.failed.join("\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::Cases;

    #[test]
    fn a_failed_case_hides_none_of_the_rest() {
        let mut cases = Cases::new();
        let mut ran = Vec::new();
        cases.case("first", || panic!("the first is wrong"));
        cases.case("second", || ran.push("second"));
        cases.case("third", || assert_eq!(1, 2, "the third is wrong too"));
        assert_eq!(ran, ["second"]);
        let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cases.finish())).unwrap_err();
        let report = report.downcast_ref::<String>().unwrap();
        assert!(report.starts_with("2 case(s) failed:"), "{report}");
        assert!(report.contains("first: the first is wrong") && report.contains("the third is wrong too"), "{report}");
        assert!(!report.contains("second"), "{report}");
        Cases::new().finish();
    }
}
