//! `nest up`: one command brings up a cluster (API server, controllers, scheduler, a simulated node) that kubectl can use at once, stops
//! cleanly on SIGTERM, and resumes from its data directory.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{KUBECTL, eventually};

fn up(data: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nest"))
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
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
    (child, printed)
}

fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    Command::new(KUBECTL).args(args).env("KUBECONFIG", kubeconfig).env("KUBECACHEDIR", cache).output().unwrap()
}

fn stop(mut child: Child) -> std::process::ExitStatus {
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    child.wait().unwrap()
}

#[test]
fn nest_up_serves_a_cluster_that_stops_and_resumes() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (child, printed) = up(data.path());
    let kubeconfig = data.path().join("admin.kubeconfig");
    assert!(printed.contains(&format!("export KUBECONFIG={}", kubeconfig.display())), "{printed}");

    let namespaces = kubectl(&kubeconfig, cache.path(), &["get", "namespaces", "-o", "name"]);
    assert!(String::from_utf8_lossy(&namespaces.stdout).contains("namespace/kube-system"));
    assert!(kubectl(&kubeconfig, cache.path(), &["create", "namespace", "demo"]).status.success());
    eventually(20, "the controllers to give the namespace its ServiceAccount", || {
        kubectl(&kubeconfig, cache.path(), &["-n", "demo", "get", "serviceaccount", "default"]).status.success()
    });
    eventually(20, "the simulated node", || {
        let nodes = kubectl(&kubeconfig, cache.path(), &["get", "nodes", "-o", "name"]);
        String::from_utf8_lossy(&nodes.stdout).contains("node/nest-node-0")
    });
    assert!(stop(child).success(), "nest up exits cleanly on SIGTERM");

    let (child, _) = up(data.path());
    let demo = kubectl(&kubeconfig, cache.path(), &["get", "namespace", "demo", "-o", "jsonpath={.status.phase}"]);
    assert_eq!(String::from_utf8_lossy(&demo.stdout), "Active", "the cluster resumes where it left off");
    assert!(stop(child).success());
}
