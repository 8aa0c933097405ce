//! `nest up`: one command brings up a cluster (API server, controllers, scheduler, a node running pods as processes
//! or in simulation) that kubectl can use at once, stops cleanly on SIGTERM without leaving processes behind, and
//! resumes from its data directory.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{KUBECTL, eventually};

/// A running `nest up`, killed if the test fails before stopping it.
struct Up(Option<Child>);

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn up(data: &Path) -> (Up, String) {
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
    (Up(Some(child)), printed)
}

fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    Command::new(KUBECTL).args(args).env("KUBECONFIG", kubeconfig).env("KUBECACHEDIR", cache).output().unwrap()
}

/// How many processes on this machine have `needle` in their command line.
fn processes_with(needle: &str) -> usize {
    let entries = std::fs::read_dir("/proc").unwrap().flatten();
    entries
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok_and(|pid| pid != std::process::id()))
        .filter(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .count()
}

fn stop(mut up: Up) -> std::process::ExitStatus {
    let mut child = up.0.take().expect("a running nest up");
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
    eventually(20, "the node", || {
        let nodes = kubectl(&kubeconfig, cache.path(), &["get", "nodes", "-l", "nest.dev/runtime=both", "-o", "name"]);
        String::from_utf8_lossy(&nodes.stdout).contains("node/nest-node-0")
    });
    // nest's own image runs as a process; anything else is simulated.
    let marker = format!("up-test-{}", std::process::id());
    let run =
        ["run", "sleeper", "--image=ghcr.io/nest-dev/nest:latest", "--restart=Never", "--", "debug", "cat", "--env"];
    assert!(kubectl(&kubeconfig, cache.path(), &[&run[..], &[marker.as_str()]].concat()).status.success());
    assert!(kubectl(&kubeconfig, cache.path(), &["run", "web", "--image=nginx"]).status.success());
    let phase = |pod: &str| {
        let out = kubectl(&kubeconfig, cache.path(), &["get", "pod", pod, "-o", "jsonpath={.status.phase}"]);
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    eventually(30, "both pods Running", || phase("sleeper") == "Running" && phase("web") == "Running");
    assert_eq!(processes_with(&marker), 1, "the sleeper runs as a process");
    // kubectl logs reaches the node: a process's output, and a simulated pod's note.
    let logs =
        |pod: &str| String::from_utf8_lossy(&kubectl(&kubeconfig, cache.path(), &["logs", pod]).stdout).to_string();
    eventually(10, "the sleeper's output", || logs("sleeper").contains(&format!("${marker}=")));
    assert!(logs("web").contains("is simulated"), "{}", logs("web"));

    // The demo tenant, reached by running the instructions nest up printed, as a newcomer would.
    let instructions: Vec<String> = printed
        .lines()
        .skip_while(|l| !l.contains("A first tenant cluster, demo"))
        .filter_map(|l| l.trim().strip_prefix("kubectl ").map(|rest| format!("{KUBECTL} {rest}")))
        .collect();
    assert_eq!(instructions.len(), 3, "{printed}");
    let script = instructions.join(" && ");
    let out = Command::new("sh")
        .args(["-c", &script])
        .current_dir(cache.path())
        .env("KUBECONFIG", &kubeconfig)
        .env("KUBECACHEDIR", cache.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("kube-system"),
        "{script}\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The demo tenant runs workloads out of the box: its pods run on nest up's node through the syncer.
    let demo_kubeconfig = cache.path().join("demo.kubeconfig");
    let in_demo = |args: &[&str]| kubectl(&demo_kubeconfig, cache.path(), args);
    assert!(in_demo(&["create", "deployment", "hello", "--image=nginx", "--replicas=2"]).status.success());
    eventually(60, "demo's pods Running on nest-node-0", || {
        let out = in_demo(&["get", "pods", "-o", "jsonpath={range .items[*]}{.status.phase}/{.spec.nodeName} {end}"]);
        String::from_utf8_lossy(&out.stdout).trim() == "Running/nest-node-0 Running/nest-node-0"
    });
    // Both flavors' rendered manifests (the golden files, held equal to the packages' output by
    // crates/nest-capn/tests/golden.rs) and the clusterctl cluster template pass a server-side dry run on nest up.
    assert!(kubectl(&kubeconfig, cache.path(), &["create", "namespace", "tenants"]).status.success());
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nest-capn/tests/golden");
    let package = tempfile::tempdir().unwrap();
    let wrote = Command::new(env!("CARGO_BIN_EXE_nest")).arg("clusterctl").arg(package.path()).output().unwrap();
    assert!(wrote.status.success(), "{}", String::from_utf8_lossy(&wrote.stderr));
    let release = format!("v{}", env!("CARGO_PKG_VERSION"));
    let template = std::fs::read_to_string(
        package.path().join("infrastructure-nested").join(&release).join("cluster-template.yaml"),
    )
    .unwrap()
    .replace("${CLUSTER_NAME}", "t1")
    .replace("${NAMESPACE}", "tenants");
    let template = with_defaults(&template);
    let filled = package.path().join("cluster.yaml");
    std::fs::write(&filled, template).unwrap();
    for file in [golden.join("nest.yaml"), golden.join("kubernetes.yaml"), filled] {
        let file = file.display().to_string();
        let out = kubectl(&kubeconfig, cache.path(), &["apply", "--dry-run=server", "--validate=false", "-f", &file]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("(server dry run)"),
            "{file}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(stop(child).success(), "nest up exits cleanly on SIGTERM");
    assert_eq!(processes_with(&marker), 0, "nest up left a process behind");

    let (child, _) = up(data.path());
    let demo = kubectl(&kubeconfig, cache.path(), &["get", "namespace", "demo", "-o", "jsonpath={.status.phase}"]);
    assert_eq!(String::from_utf8_lossy(&demo.stdout), "Active", "the cluster resumes where it left off");
    eventually(30, "the sleeper started again", || processes_with(&marker) == 1);
    assert!(stop(child).success());
}

/// clusterctl's `${NAME:=default}` variables, each replaced by its default.
fn with_defaults(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').unwrap() + start;
        let (_, default) = rest[start + 2..end].split_once(":=").expect("a default");
        out.push_str(default);
        rest = &rest[end + 1..];
    }
    out + rest
}
