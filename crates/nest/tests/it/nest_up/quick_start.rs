//! The README's quick start, exactly as a newcomer runs it: a fresh clone of this repository in a temporary
//! directory, `nest up` started from its root with the README's arguments (so with the default, relative
//! `nest-data`), then every command of the quick start's shell blocks, read from the clone's README, run by `sh` from
//! the same directory. The test then stops `nest up` with SIGINT (Ctrl-C), checks that nothing it started is left
//! running, and starts it again to see it resume.
//!
//! The commands are run as written; one that fails is run again for a while, as a newcomer would retry a command
//! whose target is not ready yet (`curl` before the echo pods serve). What the README promises and a command's exit
//! status does not show (pods Running, the echo answering) is checked here after each block.
//!
//! The test listens where the README's command does (127.0.0.1:6443), and its `nest up` has the node's fixed
//! addresses, so it holds the machine-wide `nest up` lock (`common::up::MACHINE_LOCK`) as every other `nest up` does.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{KUBECTL, eventually};

/// The quick start's shell blocks, in order, from a README.
fn quick_start_blocks(readme: &str) -> Vec<String> {
    let section = readme.split("\n## Quick start\n").nth(1).expect("README has a Quick start section");
    let section = section.split("\n## ").next().unwrap().split("\n### ").next().unwrap();
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```sh" {
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            blocks.push(body.join("\n"));
        }
    }
    blocks
}

/// The commands of a shell block: one per line, except that a line ending in `\` goes on with the next, and a
/// here-document belongs to the line that opens it.
fn commands(block: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut lines = block.lines();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let mut command = line.to_string();
        while command.ends_with('\\') {
            let Some(next) = lines.next() else { break };
            command.push('\n');
            command.push_str(next);
        }
        if let Some((_, rest)) = line.split_once("<<") {
            let delimiter = rest.trim().trim_matches(['\'', '"']).to_string();
            for body in lines.by_ref() {
                command.push('\n');
                command.push_str(body);
                if body.trim() == delimiter {
                    break;
                }
            }
        }
        commands.push(command);
    }
    commands
}

/// What `nest up` printed, kept while it runs.
#[derive(Clone, Default)]
struct Output(Arc<Mutex<String>>);

impl Output {
    fn drain(&self, from: impl std::io::Read + Send + 'static) {
        let sink = self.0.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(from).lines().map_while(Result::ok) {
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
    }

    fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }
}

/// A running `nest up`, killed if the test fails before stopping it.
struct Up {
    child: Option<Child>,
    stdout: Output,
    stderr: Output,
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The README's own machine: a shell in the clone's root with `kubectl` (the versioned binary) and `nest` (the
/// binary under test) on its PATH, as `target/release` is on the newcomer's.
struct Shell {
    root: PathBuf,
    bin: tempfile::TempDir,
    cache: tempfile::TempDir,
}

impl Shell {
    fn new(root: &Path) -> Shell {
        let bin = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(KUBECTL, bin.path().join("kubectl")).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_nest"), bin.path().join("nest")).unwrap();
        Shell { root: root.to_path_buf(), bin, cache: tempfile::tempdir().unwrap() }
    }

    fn command(&self, program: &str) -> Command {
        let path = format!("{}:{}", self.bin.path().display(), std::env::var("PATH").unwrap_or_default());
        let mut command = Command::new(program);
        command
            .current_dir(&self.root)
            .env("PATH", path)
            .env("KUBECACHEDIR", self.cache.path())
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST");
        command
    }

    /// Runs `script` with `sh` after `prelude` (the block's `export` line, which the newcomer's terminal keeps), again
    /// until it succeeds, for at most `seconds`; returns its standard output.
    fn run(&self, prelude: &str, script: &str, seconds: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let out = self.command("sh").arg("-c").arg(format!("set -e\n{prelude}\n{script}")).output().unwrap();
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            assert!(
                Instant::now() < deadline,
                "the README's command failed:\n{script}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// `nest up` as the README starts it: the arguments after `cargo run … --`, from the clone's root.
    fn up(&self, args: &[String]) -> Up {
        let mut child = self
            .command(env!("CARGO_BIN_EXE_nest"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdout, stderr) = (Output::default(), Output::default());
        stdout.drain(child.stdout.take().unwrap());
        stderr.drain(child.stderr.take().unwrap());
        let up = Up { child: Some(child), stdout, stderr };
        eventually(120, "nest up to say it is up", || up.stdout.text().contains("Ctrl-C stops it"));
        up
    }

    /// Ctrl-C: SIGINT, then `nest up` must exit by itself, successfully.
    fn interrupt(&self, mut up: Up) {
        let mut child = up.child.take().unwrap();
        assert!(Command::new("kill").arg("-INT").arg(child.id().to_string()).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "nest up did not stop on SIGINT: {}", up.stderr.text());
            std::thread::sleep(Duration::from_millis(100));
        };
        std::thread::sleep(Duration::from_millis(200));
        assert!(status.success(), "nest up exited with {status} on SIGINT: {}", up.stderr.text());
        assert!(up.stderr.text().contains("nest up: stopped"), "{}", up.stderr.text());
        // A quick start that went well says nothing alarming: no ERROR line (each tenant API server starting once
        // printed a dozen of kube-client's "failed with error client error (Connect)").
        let errors: Vec<String> =
            up.stderr.text().lines().filter(|l| l.contains("ERROR")).map(str::to_string).collect();
        assert!(errors.is_empty(), "nest up logged errors during the quick start:\n{}", errors.join("\n"));
    }
}

/// Processes (other than this test) whose command line names `needle`.
fn processes_naming(needle: &Path) -> Vec<String> {
    let needle = needle.display().to_string();
    let entries = std::fs::read_dir("/proc").unwrap().flatten();
    entries
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok_and(|pid| pid != std::process::id()))
        .filter_map(|e| {
            let cmdline = String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).unwrap_or_default())
                .replace('\0', " ");
            cmdline.contains(&needle).then_some(cmdline)
        })
        .collect()
}

#[test]
fn the_readme_quick_start_works_in_a_fresh_clone() {
    let _machine = crate::common::up::machine_lock();
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("nest");
    let cloned = Command::new("git").arg("clone").arg("--quiet").arg(&repository).arg(&root).status().unwrap();
    assert!(cloned.success(), "git clone of {}", repository.display());
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = quick_start_blocks(&readme);
    assert_eq!(blocks.len(), 4, "the quick start's blocks: the two commands, the shell, the echo, the tenant");

    // The two commands: the first starts nest up; the second is what runs this very test.
    let two = commands(&blocks[0]);
    assert_eq!(two.len(), 2, "{two:?}");
    let up_args: Vec<String> = two[0]
        .split('#')
        .next()
        .unwrap()
        .strip_prefix("cargo run --release -p nest -- ")
        .expect("the first command runs nest through cargo")
        .split_whitespace()
        .map(String::from)
        .collect();
    assert!(two[1].starts_with("scripts/check"), "{two:?}");
    // This machine reaches no registry: as the README says for such a machine, a registry on loopback holds the
    // images (`scripts/test-images`) and `up` gets it as Docker Hub's mirror.
    let mirror_flag = "--registry-mirror docker.io=http://127.0.0.1:5000";
    assert!(readme.replace('\n', " ").contains(mirror_flag), "the README tells a machine without network what to add");
    std::fs::create_dir(scratch.path().join("registry")).unwrap();
    let registry = crate::common::registry::registry(&scratch.path().join("registry"));
    crate::common::registry::test_images(&registry);
    let up_args: Vec<String> = up_args
        .into_iter()
        .chain(["--registry-mirror".into(), format!("docker.io=http://{}", registry.address)])
        .collect();
    let shell = Shell::new(&root);
    let up = shell.up(&up_args);
    assert!(root.join("nest-data/admin.kubeconfig").exists(), "nest up keeps its state in ./nest-data");

    // The other terminal: its exports hold for every later block.
    let prelude = commands(&blocks[1]).into_iter().filter(|c| c.starts_with("export ")).collect::<Vec<_>>().join("\n");
    for command in commands(&blocks[1]) {
        shell.run(&prelude, &command, 60);
    }
    assert!(shell.run(&prelude, "kubectl get namespaces -o name", 10).contains("namespace/kube-system"));

    // The echo Deployment, its Service and the curl that reaches a pod through it.
    let mut answers = Vec::new();
    for command in commands(&blocks[2]) {
        let out = shell.run(&prelude, &command, 120);
        if command.starts_with("curl ") {
            answers.push(out);
        }
    }
    assert!(
        answers.len() == 1 && answers[0].contains("/hello"),
        "the echo pods answer through their Service: {answers:?}"
    );
    // "each pod answers in turn": both pods are reached through the one ClusterIP.
    let curl = commands(&blocks[2]).into_iter().find(|c| c.starts_with("curl ")).unwrap();
    let mut pods = std::collections::BTreeSet::new();
    eventually(60, "both echo pods to answer through the Service", || {
        pods.insert(shell.run(&prelude, &curl, 10).split_whitespace().next().unwrap_or_default().to_string());
        pods.len() == 2
    });

    // The demo tenant: ready, its kubeconfig, a Deployment of the real nginx running on nest up's node and answering
    // through its Service, another tenant made and deleted.
    let mut welcome = Vec::new();
    for command in commands(&blocks[3]) {
        let out = shell.run(&prelude, &command, 180);
        if command.starts_with("curl ") {
            welcome.push(out);
        }
    }
    assert!(
        welcome.len() == 1 && welcome[0].contains("<title>Welcome to nginx!</title>"),
        "the tenant's nginx answers through its Service: {welcome:?}"
    );
    let demo_pods = |shell: &Shell| {
        let jsonpath = "{range .items[*]}{.status.phase}/{.spec.nodeName} {end}";
        shell.run(&prelude, &format!("kubectl --kubeconfig demo.kubeconfig get pods -o jsonpath='{jsonpath}'"), 30)
    };
    eventually(120, "the demo tenant's pods Running on nest-node-0", || {
        demo_pods(&shell).trim() == "Running/nest-node-0 Running/nest-node-0"
    });
    let phase = shell.run(&prelude, "kubectl get cluster demo -o jsonpath='{.status.phase}'", 10);
    assert_eq!(phase, "Provisioned");
    let clusters = shell.run(&prelude, "kubectl get clusters -o name", 10);
    assert!(clusters.lines().any(|c| c.ends_with("/demo")) && !clusters.contains("acme"), "{clusters}");

    // Ctrl-C stops every process nest up started (their command lines name the clone's nest-data).
    shell.interrupt(up);
    let left = processes_naming(&root);
    assert!(left.is_empty(), "nest up left processes behind: {left:?}");

    // Running it again resumes: the echo Deployment, the demo tenant and its workload are still there.
    let up = shell.up(&up_args);
    eventually(60, "the echo pods again", || shell.run(&prelude, &curl, 30).contains("/hello"));
    eventually(120, "the demo tenant's pods Running again", || {
        demo_pods(&shell).trim() == "Running/nest-node-0 Running/nest-node-0"
    });
    let nginx = commands(&blocks[3]).into_iter().find(|c| c.starts_with("curl ")).unwrap();
    eventually(60, "the tenant's nginx again", || shell.run(&prelude, &nginx, 30).contains("Welcome to nginx!"));
    shell.interrupt(up);
    assert!(processes_naming(&root).is_empty());
}
