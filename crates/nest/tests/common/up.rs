//! `nest up` as a test runs it: started on a free port with a data directory of the test's, stopped with SIGTERM,
//! killed if the test fails first.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::KUBECTL;

/// A running `nest up`, killed if the test fails before stopping it.
pub struct Up(Option<Child>);

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `nest up` keeping its files in `data`; returns it once it printed its instructions, and what it printed.
pub fn up(data: &Path) -> (Up, String) {
    up_with(data, &[])
}

/// [`up`] with more arguments.
pub fn up_with(data: &Path, args: &[&str]) -> (Up, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nest"))
        .args(["up", "--listen", "127.0.0.1:0"])
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nest up");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    while !printed.contains("Ctrl-C stops it") {
        assert!(stdout.read_line(&mut printed).unwrap() > 0, "nest up exited early: {printed}");
    }
    std::thread::spawn(move || for _ in stdout.lines() {});
    (Up(Some(child)), printed)
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

/// The processes on this machine whose command line contains `needle`: containers' programs, not the init each
/// sandbox starts them with (whose command line names them too).
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) && pid != std::process::id() && !cmdline.starts_with("/.nest/init ") {
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
    demo
}

/// The pod network namespaces on this machine (`/run/netns/nest-*`): none may outlive the `nest up` that made them.
#[allow(dead_code)]
pub fn pod_namespaces() -> Vec<String> {
    let entries = std::fs::read_dir("/run/netns").into_iter().flatten().flatten();
    entries.map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("nest-")).collect()
}
