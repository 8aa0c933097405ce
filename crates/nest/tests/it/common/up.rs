//! `nest up` as a test runs it: started on a free port with a data directory of the test's, stopped with SIGTERM,
//! killed if the test fails first.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::KUBECTL;

/// A running `nest up`, killed if the test fails before stopping it. It holds [`MACHINE_LOCK`] while it lives.
pub struct Up(Option<Child>, #[allow(dead_code)] std::fs::File, std::path::PathBuf);

/// `nest up`'s node has fixed addresses (its bridge and pod range), so no two may run on one machine at once: every
/// test that starts one holds an exclusive lock on this file first, whichever test binary, clone or `cargo test` it
/// is part of.
pub const MACHINE_LOCK: &str = "/tmp/nest-up-tests.lock";

/// Set by `scripts/check` to [`OTHER_LANE`] in the lane that runs every test not under `nest_up::`.
pub const LANE: &str = "NEST_E2E_LANE";
/// The value of [`LANE`] in the lane that must not start `nest up`.
pub const OTHER_LANE: &str = "without-nest-up";

/// Waits for [`MACHINE_LOCK`]; it is released when the returned file is dropped (or the process ends). A test outside
/// `nest_up::` that gets here in `scripts/check`'s other lane fails: there it would hold one of that lane's threads
/// while it waits for the lock, and run beside nothing.
pub fn machine_lock() -> std::fs::File {
    assert!(
        std::env::var(LANE).as_deref() != Ok(OTHER_LANE),
        "this test starts nest up: move it under crates/nest/tests/it/nest_up/, the lane that runs them one at a time"
    );
    use std::os::fd::AsRawFd as _;
    let file = std::fs::OpenOptions::new().create(true).append(true).open(MACHINE_LOCK).unwrap();
    // SAFETY: flock on a descriptor this function owns; it blocks until the lock is ours.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "locking {MACHINE_LOCK}: {}", std::io::Error::last_os_error());
    file
}

impl Up {
    /// The process id of `nest up`.
    pub fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Whatever the test asserted, a panic in nest up's log or its pods' is kept for scripts/check.
        let _ = panics_in(&self.2);
    }
}

/// Starts `nest up` keeping its files in `data`; returns it once it printed its instructions, and what it printed.
pub fn up(data: &Path) -> (Up, String) {
    up_with(data, &[])
}

/// [`up`] with more arguments. What it logs is kept in `data/nest-up.log` (see [`panics_in`]).
pub fn up_with(data: &Path, args: &[&str]) -> (Up, String) {
    let lock = machine_lock();
    std::fs::create_dir_all(data).unwrap();
    // Only its owner reads it, as every file nest up keeps (the up test checks the data directory for that).
    use std::os::unix::fs::OpenOptionsExt as _;
    let log = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(data.join(LOG)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nest"))
        .args(["up", "--listen", "127.0.0.1:0"])
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start nest up");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    while !printed.contains("Ctrl-C stops it") {
        assert!(stdout.read_line(&mut printed).unwrap() > 0, "nest up exited early: {printed}");
    }
    std::thread::spawn(move || for _ in stdout.lines() {});
    (Up(Some(child), lock, data.to_path_buf()), printed)
}

/// The Events kubectl lists for pod `pod`, as (reason, message); `scope` goes before `get` (`["-n", "team-b"]`, or
/// nothing for the kubeconfig's namespace).
pub fn pod_events(kubeconfig: &Path, cache: &Path, scope: &[&str], pod: &str) -> Vec<(String, String)> {
    let selector = format!("involvedObject.name={pod}");
    let args = [scope, &["get", "events", "--field-selector", &selector, "-o", "json"]].concat();
    let listed: serde_json::Value =
        serde_json::from_slice(&kubectl(kubeconfig, cache, &args).stdout).unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    listed["items"].as_array().into_iter().flatten().map(|e| (text(&e["reason"]), text(&e["message"]))).collect()
}

/// Where [`up_with`] keeps what `nest up` logs, in its data directory.
pub const LOG: &str = "nest-up.log";

/// Every line of every log under `dir` (nest up's, and those of the containers its node ran) that tells of a panic:
/// none may (issue 33). A run that finds one copies the file into `$NEST_TEST_LOGS`, when set, for `scripts/check`
/// to show.
pub fn panics_in(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "log") {
                let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
                let lines: Vec<String> = text.lines().filter(|l| l.contains("panicked")).map(str::to_string).collect();
                if !lines.is_empty() {
                    if let Some(keep) = std::env::var_os("NEST_TEST_LOGS") {
                        let name = path.to_string_lossy().replace('/', "_");
                        let _ = std::fs::create_dir_all(&keep);
                        let _ = std::fs::copy(&path, Path::new(&keep).join(name));
                    }
                    found.extend(lines.into_iter().map(|l| format!("{}: {l}", path.display())));
                }
            }
        }
    }
    found
}

/// Stops `nest up` with SIGTERM and waits for it.
pub fn stop(mut up: Up) -> std::process::ExitStatus {
    let mut child = up.0.take().expect("a running nest up");
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    child.wait().unwrap()
}

pub fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    Command::new(KUBECTL).args(args).env("KUBECONFIG", kubeconfig).env("KUBECACHEDIR", cache).output().unwrap()
}

/// A Deployment `name` of `replicas` nginx pods that ask for RuntimeClass `nest-simulated` (nest up's node runs
/// nothing it cannot pull, and this machine pulls no nginx), written into `dir`; the file's path.
pub fn simulated_deployment(dir: &Path, name: &str, replicas: u32) -> String {
    let manifest = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  replicas: {replicas}\n  \
         selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    \
         spec:\n      runtimeClassName: nest-simulated\n      containers: [{{name: nginx, image: nginx}}]\n"
    );
    let file = dir.join(format!("{name}-deployment.yaml"));
    std::fs::write(&file, manifest).unwrap();
    file.display().to_string()
}

/// The processes on this machine whose command line contains `needle`: containers' programs, not the init each
/// sandbox starts them with (whose command line names them too).
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) && pid != std::process::id() && !nest_node::process::sandbox::runs_init(&cmdline) {
            found.push(pid);
        }
    }
    found
}

/// Waits for `nest up`'s demo tenant (in `data`) to be Ready and writes its admin kubeconfig into `cache`; returns
/// the file, as a tenant admin would get it with `nest cluster kubeconfig demo`.
pub fn demo_tenant(data: &Path, cache: &Path) -> std::path::PathBuf {
    let admin = data.join("admin.kubeconfig");
    // The provider's CRDs and the demo tenant come a moment after nest up prints its instructions.
    super::eventually(120, "the demo tenant Ready", || {
        let args = ["wait", "nestedcontrolplane/demo", "--for=condition=Ready", "--timeout=10s"];
        kubectl(&admin, cache, &args).status.success()
    });
    let demo = cache.join("demo.kubeconfig");
    let written = Command::new(env!("CARGO_BIN_EXE_nest"))
        .args(["cluster", "kubeconfig", "demo"])
        .env("KUBECONFIG", &admin)
        .output()
        .unwrap();
    assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    std::fs::write(&demo, &written.stdout).unwrap();
    wait_for_simulation_class(&demo, cache);
    demo
}

/// Waits for RuntimeClass `nest-simulated` in the cluster of `kubeconfig`: the syncer makes it in a tenant a moment
/// after it starts following the tenant, and pods naming it are refused until then.
pub fn wait_for_simulation_class(kubeconfig: &Path, cache: &Path) {
    super::eventually(60, "RuntimeClass nest-simulated", || {
        kubectl(kubeconfig, cache, &["get", "runtimeclass", "nest-simulated"]).status.success()
    });
}

/// The pod network namespaces on this machine (`/run/netns/nest-*`): none may outlive the `nest up` that made them.
#[allow(dead_code)]
pub fn pod_namespaces() -> Vec<String> {
    let entries = std::fs::read_dir("/run/netns").into_iter().flatten().flatten();
    entries.map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("nest-")).collect()
}
