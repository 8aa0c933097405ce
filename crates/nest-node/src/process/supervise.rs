//! One pod's processes: init containers one after the other, then every container at once, each restarted as the
//! pod's `restartPolicy` says, and the pod's status reported after every change.

use nest_core::clock::rfc3339_now;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::Launch;
use super::sandbox::Sandboxed;
use crate::probe::{self, Probes};

/// The kubelet's longest crash back-off.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long a container must run for its back-off to start over (the kubelet: 10 minutes).
const BACKOFF_RESET: Duration = Duration::from_secs(600);
/// How long the OCI runtime may take to start a container's first process.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The reason a container waits while it is being started.
const CREATING: &str = "ContainerCreating";

/// What is known of one container.
#[derive(Clone, Debug)]
struct Container {
    name: String,
    image: String,
    /// `imageID`: the image's repository and manifest digest, or `process://<image>` for an allowlisted executable.
    image_id: String,
    init: bool,
    restart_count: i32,
    /// `{"waiting": …}`, `{"running": …}` or `{"terminated": …}`; terminated only when it will not run again.
    state: Value,
    last_state: Value,
    ready: bool,
    started: bool,
    /// The sandbox while its first process runs: what exec and attach enter.
    running: Option<Arc<Sandboxed>>,
    /// What its spec asks of its standard streams.
    wants: super::stdio::Wants,
    /// Its standard streams while it runs: what attach connects to.
    stdio: Option<Arc<super::stdio::ContainerStdio>>,
    /// Whether it is an ephemeral container (`kubectl debug`): run once, never restarted, reported apart.
    ephemeral: bool,
}

/// Why a container cannot be entered (exec, attach).
#[derive(Debug, PartialEq, Eq)]
pub enum NotRunning {
    /// The pod has no container of that name.
    NoSuchContainer,
    /// It has, but its process does not run now.
    NotRunning,
}

/// What the pod's tasks share.
struct Shared {
    client: Client,
    events: crate::events::Recorder,
    namespace: String,
    name: String,
    uid: String,
    pod_ip: String,
    host_ip: String,
    start_time: String,
    restart_policy: String,
    pod_dir: PathBuf,
    containers: Mutex<Vec<Container>>,
    /// Held while a status is sent, so reports arrive in order.
    reporting: tokio::sync::Mutex<()>,
    /// Set when the node, not the pod, is stopping: the pod's status is left as it was, so that the node starts
    /// the pod again when it comes back.
    silent: std::sync::atomic::AtomicBool,
    /// Why the node evicted the pod, once it has: the pod is then `Failed`, with reason `Evicted`.
    evicted: Mutex<Option<String>>,
}

/// Where and how a pod runs.
pub struct Setting {
    pub pod_ip: String,
    pub host_ip: String,
    /// `<data>/pods/<uid>`.
    pub pod_dir: PathBuf,
    /// The first crash back-off.
    pub backoff: Duration,
    /// What of the pod's storage is limited ([`super::storage`]).
    pub storage: super::storage::Limits,
    /// The pod's network namespace, if it has one of its own: where ephemeral containers start too.
    pub netns: Option<PathBuf>,
}

/// A running pod: stop it with [`PodRun::stop`].
pub struct PodRun {
    stop: watch::Sender<Option<Duration>>,
    done: watch::Receiver<bool>,
    shared: Arc<Shared>,
    /// When the pod was started here.
    pub started: std::time::SystemTime,
    /// What of the pod's storage is limited, and where it is.
    pub storage: super::storage::Limits,
    /// The pod's network namespace, if it has one of its own.
    pub netns: Option<PathBuf>,
    /// The runs of its ephemeral containers, waited for when the pod stops.
    ephemeral: Mutex<Vec<tokio::task::JoinHandle<bool>>>,
}

impl PodRun {
    /// Starts the pod's processes (`launches` are for the init containers, then the containers, in order).
    pub fn start(
        client: Client,
        events: crate::events::Recorder,
        pod: &Pod,
        setting: Setting,
        launches: Vec<Launch>,
    ) -> Arc<PodRun> {
        let Setting { pod_ip, host_ip, pod_dir, backoff, storage, netns } = setting;
        let spec = pod.spec.clone().unwrap_or_default();
        let restarts = super::Runtime::restart_counts(pod);
        // A pod this node ran before (it was restarted) keeps counting restarts.
        let already = pod.status.as_ref().and_then(|s| s.start_time.clone());
        let init = spec.init_containers.clone().unwrap_or_default();
        let containers: Vec<Container> = init
            .iter()
            .map(|c| (c, true))
            .chain(spec.containers.iter().map(|c| (c, false)))
            .zip(&launches)
            .map(|((c, init), launch)| Container {
                wants: super::stdio::Wants::of(c),
                stdio: None,
                ephemeral: false,
                name: c.name.clone(),
                image: crate::images::reported(c.image.as_deref().unwrap_or_default()),
                image_id: match &launch.image {
                    Some(image) => image.id.clone(),
                    None => format!("process://{}", c.image.as_deref().unwrap_or_default()),
                },
                init,
                restart_count: restarts
                    .get(&c.name)
                    .map_or(0, |n| (*n).max(0).saturating_add(i32::from(already.is_some()))),
                state: json!({"waiting": {"reason": "ContainerCreating"}}),
                last_state: json!({}),
                ready: false,
                started: false,
                running: None,
            })
            .collect();
        let probes: Vec<Probes> =
            init.iter().map(|_| Probes::default()).chain(spec.containers.iter().map(Probes::of)).collect();
        let shared = Arc::new(Shared {
            client,
            events,
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
            pod_ip,
            host_ip,
            start_time: already.map_or_else(rfc3339_now, |t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
            restart_policy: spec.restart_policy.clone().unwrap_or_else(|| "Always".into()),
            pod_dir,
            containers: Mutex::new(containers),
            reporting: tokio::sync::Mutex::new(()),
            silent: std::sync::atomic::AtomicBool::new(false),
            evicted: Mutex::new(None),
        });
        let (stop, stop_rx) = watch::channel(None);
        let (done_tx, done) = watch::channel(false);
        let inits = init.len();
        let for_task = shared.clone();
        tokio::spawn(async move {
            let shared = for_task;
            shared.report().await;
            let mut jobs = launches.into_iter().zip(probes).enumerate();
            for (index, (launch, probes)) in jobs.by_ref().take(inits) {
                if !shared.clone().run(index, launch, probes, stop_rx.clone(), backoff).await {
                    // A failed init container that will not be retried ends the pod.
                    let _ = done_tx.send(true);
                    return;
                }
            }
            let containers = jobs
                .map(|(index, (launch, probes))| shared.clone().run(index, launch, probes, stop_rx.clone(), backoff));
            futures_util::future::join_all(containers).await;
            let _ = done_tx.send(true);
        });
        let ephemeral = Mutex::new(Vec::new());
        Arc::new(PodRun { stop, done, shared, started: std::time::SystemTime::now(), storage, netns, ephemeral })
    }

    /// The pod's namespace and name.
    pub fn names(&self) -> (&str, &str) {
        (&self.shared.namespace, &self.shared.name)
    }

    /// How often container `name` has been restarted (which numbers its current log); `None` if it has no such
    /// container.
    pub fn restart_count(&self, name: &str) -> Option<i32> {
        let containers = self.shared.containers.lock().unwrap_or_else(|p| p.into_inner());
        containers.iter().find(|c| c.name == name).map(|c| c.restart_count)
    }

    /// The sandbox of container `name` while its process runs: what exec enters.
    pub fn running_sandbox(&self, name: &str) -> Result<Arc<Sandboxed>, NotRunning> {
        let containers = self.shared.containers.lock().unwrap_or_else(|p| p.into_inner());
        let container = containers.iter().find(|c| c.name == name).ok_or(NotRunning::NoSuchContainer)?;
        container.running.clone().ok_or(NotRunning::NotRunning)
    }

    /// The containers whose process runs now: each one's name, when it started (RFC 3339) and its sandbox.
    pub fn running_containers(&self) -> Vec<(String, Option<String>, Arc<Sandboxed>)> {
        let containers = self.shared.containers.lock().unwrap_or_else(|p| p.into_inner());
        let started = |c: &Container| c.state["running"]["startedAt"].as_str().map(str::to_string);
        containers.iter().filter_map(|c| Some((c.name.clone(), started(c), c.running.clone()?))).collect()
    }

    /// The pod's network namespace, as its running containers share it; `None` when none runs or it has none.
    pub fn netns(&self) -> Option<PathBuf> {
        let containers = self.shared.containers.lock().unwrap_or_else(|p| p.into_inner());
        containers.iter().filter_map(|c| c.running.as_ref()).find_map(|sandbox| sandbox.netns().map(Path::to_path_buf))
    }

    /// The standard streams of container `name` while its process runs: what attach connects to.
    pub fn attachable(&self, name: &str) -> Result<Arc<super::stdio::ContainerStdio>, NotRunning> {
        let containers = self.shared.containers.lock().unwrap_or_else(|p| p.into_inner());
        let container = containers.iter().find(|c| c.name == name).ok_or(NotRunning::NoSuchContainer)?;
        container.stdio.clone().filter(|_| container.running.is_some()).ok_or(NotRunning::NotRunning)
    }

    /// Whether the pod has a container `name` this node started or tried to (an ephemeral container that could not
    /// be started is tried again: it has none).
    pub fn has_started(&self, name: &str) -> bool {
        let containers = self.shared.containers.lock().unwrap_or_else(|p| p.into_inner());
        let failed =
            |c: &Container| c.ephemeral && c.state["waiting"]["reason"].as_str().is_some_and(|r| r != CREATING);
        containers.iter().any(|c| c.name == name && !failed(c))
    }

    /// Records that ephemeral container `name` of `image` cannot start, as the kubelet reports it: waiting, with
    /// `reason` and `message`.
    pub async fn ephemeral_waiting(&self, name: &str, image: &str, reason: &str, message: &str) {
        let waiting = json!({"waiting": {"reason": reason, "message": message}});
        {
            let mut containers = self.shared.containers.lock().unwrap_or_else(|p| p.into_inner());
            match containers.iter_mut().find(|c| c.name == name) {
                Some(known) if known.state == waiting => return,
                Some(known) => known.state = waiting,
                None => containers.push(ephemeral_container(name, image, String::new(), waiting)),
            }
        }
        self.shared.report().await;
    }

    /// Starts ephemeral container `container` as `launch` says: once, never restarted, until it exits or the pod
    /// stops.
    pub fn start_ephemeral(&self, container: &k8s_openapi::api::core::v1::Container, launch: Launch) {
        let image = container.image.as_deref().unwrap_or_default();
        let image_id = launch.image.as_ref().map(|i| i.id.clone()).unwrap_or_default();
        let creating = json!({"waiting": {"reason": CREATING}});
        let mut entry = ephemeral_container(&container.name, image, image_id, creating);
        entry.wants = super::stdio::Wants::of(container);
        let index = {
            let mut containers = self.shared.containers.lock().unwrap_or_else(|p| p.into_inner());
            match containers.iter().position(|c| c.name == container.name) {
                Some(index) => {
                    containers[index] = entry;
                    index
                }
                None => {
                    containers.push(entry);
                    containers.len() - 1
                }
            }
        };
        let run = self.shared.clone().run(index, launch, Probes::default(), self.stop.subscribe(), Duration::ZERO);
        self.ephemeral.lock().unwrap_or_else(|p| p.into_inner()).push(tokio::spawn(run));
    }

    /// The pod's UID.
    pub fn uid(&self) -> &str {
        &self.shared.uid
    }

    /// The log file of run `restart` of container `name`.
    pub fn log_path(&self, name: &str, restart: i32) -> PathBuf {
        self.shared.log_path(name, restart)
    }

    /// Whether every process of the pod has ended for good.
    pub fn finished(&self) -> bool {
        *self.done.borrow()
    }

    /// Whether the node has evicted the pod.
    pub fn evicted(&self) -> bool {
        self.shared.evicted.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Evicts the pod as the kubelet's eviction manager does (`evictPod`): an `Evicted` Event with `message`, the
    /// pod `Failed` with reason `Evicted` and `message`, and its processes stopped within `grace`. Returns once they
    /// have; `false` when the pod was already evicted or had ended.
    pub async fn evict(&self, message: &str, grace: Duration) -> bool {
        {
            let mut evicted = self.shared.evicted.lock().unwrap_or_else(|p| p.into_inner());
            if evicted.is_some() || self.finished() {
                return false;
            }
            *evicted = Some(message.to_string());
        }
        let about = crate::events::About {
            namespace: self.shared.namespace.clone(),
            name: self.shared.name.clone(),
            uid: self.shared.uid.clone(),
            field_path: None,
        };
        crate::events::record(&self.shared.events, &about, "Warning", super::storage::REASON, message);
        self.shared.report().await;
        self.stop(grace).await;
        true
    }

    /// Stops the pod's processes because the node is stopping: nothing more is reported.
    pub async fn stop_silently(&self, grace: Duration) {
        self.shared.silent.store(true, std::sync::atomic::Ordering::SeqCst);
        self.stop(grace).await;
    }

    /// Stops the pod's processes, giving them `grace` (a shorter grace than one already given wins), and waits.
    pub async fn stop(&self, grace: Duration) {
        self.stop.send_if_modified(|current| match current {
            Some(given) if *given <= grace => false,
            _ => {
                *current = Some(grace);
                true
            }
        });
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
        let ephemeral = std::mem::take(&mut *self.ephemeral.lock().unwrap_or_else(|p| p.into_inner()));
        for run in ephemeral {
            let _ = run.await;
        }
    }
}

/// An ephemeral container's entry, in `state`.
fn ephemeral_container(name: &str, image: &str, image_id: String, state: Value) -> Container {
    Container {
        name: name.to_string(),
        image: crate::images::reported(image),
        image_id,
        init: false,
        restart_count: 0,
        state,
        last_state: json!({}),
        ready: false,
        started: false,
        running: None,
        wants: super::stdio::Wants::default(),
        stdio: None,
        ephemeral: true,
    }
}

/// Waits until the pod is told to stop; returns its grace period.
async fn stopped(stop: &mut watch::Receiver<Option<Duration>>) -> Duration {
    match stop.wait_for(Option::is_some).await {
        Ok(grace) => grace.unwrap_or_default(),
        // The runtime is gone: stop at once.
        Err(_) => Duration::ZERO,
    }
}

fn signal_group(pid: u32, signal: i32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    // SAFETY: kill(2) has no memory effects; a process group that is gone yields ESRCH, which is ignored.
    unsafe {
        libc::kill(-pid, signal);
        libc::kill(pid, signal);
    }
}

/// The start time of process `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`), which tells a process
/// from a later one that reused its id.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Kills the processes recorded in `pids_dir` that are still the ones recorded, and forgets them.
pub fn kill_leftovers(pids_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(pids_dir) else { return };
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let mut fields = text.split_whitespace().map(str::parse::<u64>);
        if let (Some(Ok(pid)), Some(Ok(ticks))) = (fields.next(), fields.next())
            && let Ok(pid) = u32::try_from(pid)
            && start_ticks(pid) == Some(ticks)
        {
            tracing::info!(pid, "killing a process left by an earlier run of this node");
            signal_group(pid, libc::SIGKILL);
        }
        let _ = std::fs::remove_file(entry.path());
    }
}

/// Appends a process's output to its log file, a line at a time: `<RFC 3339 time> <stream> <text>`.
async fn copy_lines(
    output: impl tokio::io::AsyncRead + Unpin,
    stream: &'static str,
    log: Arc<tokio::sync::Mutex<tokio::fs::File>>,
) {
    let mut lines = tokio::io::BufReader::new(output).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let stamp = crate::now().strftime("%Y-%m-%dT%H:%M:%S%.9fZ");
        let mut file = log.lock().await;
        let _ = file.write_all(format!("{stamp} {stream} {line}\n").as_bytes()).await;
    }
}

impl Shared {
    fn with<T>(&self, index: usize, change: impl FnOnce(&mut Container) -> T) -> T {
        let mut containers = self.containers.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut containers[index])
    }

    /// Records an Event about container `index`, as the kubelet does (its failures are dropped: events explain).
    async fn event(&self, index: usize, type_: &str, reason: &str, message: String) {
        let (name, init, ephemeral) = self.with(index, |c| (c.name.clone(), c.init, c.ephemeral));
        let pod = crate::events::About {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            field_path: None,
        };
        let about = if ephemeral {
            crate::events::About { field_path: Some(format!("spec.ephemeralContainers{{{name}}}")), ..pod }
        } else {
            pod.container(&name, init)
        };
        crate::events::record(&self.events, &about, type_, reason, &message);
    }

    /// Where container `name`'s output of run `restart` goes.
    pub fn log_path(&self, name: &str, restart: i32) -> PathBuf {
        self.pod_dir.join("logs").join(name).join(format!("{restart}.log"))
    }

    /// Starts the OCI runtime's process for one run of container `index`, its output copied to the container's log.
    async fn spawn(
        &self,
        index: usize,
        sandbox: &Sandboxed,
    ) -> Result<(tokio::process::Child, Vec<tokio::task::JoinHandle<()>>), String> {
        let (name, restart) = self.with(index, |c| (c.name.clone(), c.restart_count));
        let log_path = self.log_path(&name, restart);
        if let Some(dir) = log_path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        let log = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .await
            .map_err(|e| format!("opening {}: {e}", log_path.display()))?;
        sandbox.fresh_root().map_err(|e| e.to_string())?;
        let mut command = sandbox.run();
        command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default()).kill_on_drop(true);
        // SAFETY: prctl(2) and umask(2) are async-signal-safe and touch no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The node's own umask (077) keeps its files private; the runtime's would make the mount points it
                // creates in the container's root (the parents of `/var/run/secrets/…`, of an allowlisted program's
                // path) unreachable to a container user other than its root. What the runtime writes outside the
                // container lies under the node's 0700 data directory.
                libc::umask(0o022);
                Ok(())
            });
        }
        let wants = self.with(index, |c| c.wants);
        let started = super::stdio::start(command, wants).map_err(|e| format!("starting the OCI runtime: {e}"))?;
        let log = Arc::new(tokio::sync::Mutex::new(log));
        let mut copies = Vec::new();
        for (stream, output) in started.outputs {
            let name = match stream {
                super::stdio::Stream::Stdout => "stdout",
                super::stdio::Stream::Stderr => "stderr",
            };
            copies.push(tokio::spawn(copy_lines(output, name, log.clone())));
        }
        self.with(index, |c| c.stdio = Some(started.stdio));
        Ok((started.child, copies))
    }

    /// Waits for the container's first process to exist: its host process ID, or `None` when the runtime ended (or
    /// took too long) without starting it.
    async fn started(&self, index: usize, sandbox: &Sandboxed, child: &mut tokio::process::Child) -> Option<u32> {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(pid) = sandbox.pid() {
                let pids = self.pod_dir.join("pids");
                let _ = std::fs::create_dir_all(&pids);
                let name = self.with(index, |c| c.name.clone());
                let _ = std::fs::write(pids.join(name), format!("{pid} {}", start_ticks(pid).unwrap_or(0)));
                return Some(pid);
            }
            if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                return sandbox.pid();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    /// Runs container `index` until it is done for good; returns whether it last exited with 0.
    async fn run(
        self: Arc<Self>,
        index: usize,
        launch: Launch,
        probes: Probes,
        mut stop: watch::Receiver<Option<Duration>>,
        backoff: Duration,
    ) -> bool {
        let mut crashes: u32 = 0;
        loop {
            if stop.borrow().is_some() {
                self.with(index, |c| {
                    if c.state.get("terminated").is_none() {
                        c.state =
                            json!({"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": rfc3339_now()}});
                    }
                    c.ready = false;
                });
                self.report().await;
                return false;
            }
            let started = Instant::now();
            let started_at = rfc3339_now();
            let Some(sandbox) = launch.sandbox.clone() else { return false };
            let container_id = format!("runc://{}", sandbox.id);
            let mut message = None;
            let (code, reason) = match self.spawn(index, &sandbox).await {
                Err(text) => {
                    self.with(index, |c| {
                        c.state = json!({"waiting": {"reason": "RunContainerError", "message": text}});
                    });
                    (128, "ContainerCannotRun")
                }
                Ok((mut child, copies)) => match self.started(index, &sandbox, &mut child).await {
                    None => {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                        for copy in copies {
                            let _ = tokio::time::timeout(Duration::from_secs(1), copy).await;
                        }
                        sandbox.finish().await;
                        message = Some(sandbox.failure().unwrap_or_else(|| "the OCI runtime did not start it".into()));
                        (128, "StartError")
                    }
                    Some(pid) => {
                        let name = self.with(index, |c| c.name.clone());
                        self.event(index, "Normal", "Created", format!("Created container: {name}")).await;
                        self.event(index, "Normal", "Started", format!("Started container {name}")).await;
                        let (code, oom) =
                            self.running(index, &sandbox, &probes, (child, copies, pid), &mut stop, &started_at).await;
                        (
                            code,
                            if oom {
                                "OOMKilled"
                            } else if code == 0 {
                                "Completed"
                            } else {
                                "Error"
                            },
                        )
                    }
                },
            };
            let mut terminated = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started_at,
                                                   "finishedAt": rfc3339_now(), "containerID": container_id}});
            if let Some(message) = message {
                terminated["terminated"]["message"] = json!(message);
            }
            if let Some(stdio) = self.with(index, |c| c.stdio.take()) {
                stdio.finish();
            }
            let (init, ephemeral) = self.with(index, |c| (c.init, c.ephemeral));
            let restart = stop.borrow().is_none()
                && !ephemeral
                && match self.restart_policy.as_str() {
                    "Never" => false,
                    "OnFailure" => code != 0,
                    _ => !init || code != 0,
                };
            if !restart {
                self.with(index, |c| {
                    c.state = terminated;
                    c.ready = false;
                });
                self.report().await;
                return code == 0;
            }
            if started.elapsed() >= BACKOFF_RESET {
                crashes = 0;
            }
            let delay = if crashes == 0 {
                Duration::ZERO
            } else {
                backoff.saturating_mul(1 << (crashes - 1).min(16)).min(MAX_BACKOFF)
            };
            crashes += 1;
            let name = self.with(index, |c| {
                c.last_state = terminated;
                c.ready = false;
                c.started = false;
                if !delay.is_zero() {
                    c.state = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!(
                        "back-off {}s restarting failed container={} pod={}_{}({})",
                        delay.as_secs(), c.name, self.name, self.namespace, self.uid)}});
                }
                c.name.clone()
            });
            if !delay.is_zero() {
                self.report().await;
                let message = format!(
                    "Back-off restarting failed container {name} in pod {}_{}({})",
                    self.name, self.namespace, self.uid
                );
                self.event(index, "Warning", "BackOff", message).await;
                tracing::debug!(pod = %self.name, container = %name, ?delay, "crash loop back-off");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stopped(&mut stop) => continue,
                }
            }
            self.with(index, |c| c.restart_count = c.restart_count.saturating_add(1));
        }
    }

    /// One run of container `index`, whose runtime process is `child` (its output copied by `copies`) and whose
    /// first process is `pid`: probes it, stops it when told (SIGTERM, then SIGKILL when the grace period ends) and
    /// waits for it. Returns its exit code and whether the kernel killed it for memory.
    async fn running(
        self: &Arc<Self>,
        index: usize,
        sandbox: &Arc<Sandboxed>,
        probes: &Probes,
        (mut child, copies, pid): (tokio::process::Child, Vec<tokio::task::JoinHandle<()>>, u32),
        stop: &mut watch::Receiver<Option<Duration>>,
        started_at: &str,
    ) -> (i32, bool) {
        self.with(index, |c| {
            c.running = Some(sandbox.clone());
            c.state = json!({"running": {"startedAt": started_at}});
            c.started = !probes.has_startup();
            c.ready = !c.init && !c.ephemeral && !probes.has_readiness() && c.started;
        });
        self.report().await;
        let target = probe::Target { pod_ip: self.pod_ip.clone(), sandbox: Some(sandbox.clone()) };
        let probing =
            (!probes.is_empty()).then(|| tokio::spawn(self.clone().probe(index, probes.clone(), target, pid)));
        let outcome = {
            let wait = child.wait();
            tokio::pin!(wait);
            tokio::select! {
                status = &mut wait => Ok(status),
                grace = stopped(stop) => Err(grace),
            }
        };
        let status = match outcome {
            Ok(status) => status,
            Err(grace) => {
                let name = self.with(index, |c| c.name.clone());
                if !self.silent.load(std::sync::atomic::Ordering::SeqCst) {
                    self.event(index, "Normal", "Killing", format!("Stopping container {name}")).await;
                }
                signal_group(pid, libc::SIGTERM);
                match tokio::time::timeout(grace, child.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        signal_group(pid, libc::SIGKILL);
                        child.wait().await
                    }
                }
            }
        };
        self.with(index, |c| c.running = None);
        if let Some(probing) = probing {
            probing.abort();
        }
        // The output of a process whose children keep its pipes open is not waited for.
        for copy in copies {
            let _ = tokio::time::timeout(Duration::from_secs(1), copy).await;
        }
        let _ = std::fs::remove_file(self.pod_dir.join("pids").join(self.with(index, |c| c.name.clone())));
        let oom = sandbox.finish().await;
        let code = match status {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(9))
            }
            Err(_) => 128,
        };
        (code, oom)
    }

    /// Runs the container's probes while its process `pid` lives: startup first, then liveness and readiness. A
    /// failed liveness probe kills the process (the restart policy then applies).
    async fn probe(self: Arc<Self>, index: usize, probes: Probes, target: probe::Target, pid: u32) {
        if let Some(startup) = &probes.startup {
            if !startup.passes_within(&target).await {
                signal_group(pid, libc::SIGKILL);
                return;
            }
            self.with(index, |c| {
                c.started = true;
                c.ready = probes.readiness.is_none();
            });
            self.report().await;
        }
        let liveness = async {
            if let Some(liveness) = &probes.liveness {
                let error = liveness.until_failure(&target).await;
                tracing::info!(pod = %self.name, "liveness probe failed; killing the container");
                let name = self.with(index, |c| c.name.clone());
                self.event(index, "Warning", "Unhealthy", format!("Liveness probe failed: {error}")).await;
                let message = format!("Container {name} failed liveness probe, will be restarted");
                self.event(index, "Normal", "Killing", message).await;
                signal_group(pid, libc::SIGKILL);
            } else {
                std::future::pending::<()>().await;
            }
        };
        let readiness = async {
            if let Some(readiness) = &probes.readiness {
                readiness
                    .watch(&target, |ready| {
                        let changed = self.with(index, |c| std::mem::replace(&mut c.ready, ready) != ready);
                        let shared = self.clone();
                        async move {
                            if changed {
                                shared.report().await;
                            }
                        }
                    })
                    .await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::join!(liveness, readiness);
    }

    /// Sends the pod's status as it is now.
    async fn report(&self) {
        let _order = self.reporting.lock().await;
        if self.silent.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let containers = self.containers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut status = pod_status(&containers, &self.pod_ip, &self.host_ip, &self.start_time);
        if let Some(message) = self.evicted.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            // As the kubelet's eviction manager words it (`evictPod`): whatever its containers did, the pod failed.
            status["phase"] = json!("Failed");
            status["reason"] = json!(super::storage::REASON);
            status["message"] = json!(message);
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let patch = json!({"status": status});
        if let Err(error) = pods.patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::debug!(%error, pod = %self.name, "reporting a pod's status");
        }
    }
}

/// A container's state is final when it is terminated (it is only marked so when it will not run again).
fn terminated_with(container: &Container) -> Option<i64> {
    container.state.get("terminated").map(|t| t["exitCode"].as_i64().unwrap_or(0))
}

/// The pod's status from its containers' states.
fn pod_status(containers: &[Container], pod_ip: &str, host_ip: &str, start_time: &str) -> Value {
    let (ephemeral, containers): (Vec<&Container>, Vec<&Container>) = containers.iter().partition(|c| c.ephemeral);
    let (init, main): (Vec<&Container>, Vec<&Container>) = containers.into_iter().partition(|c| c.init);
    let initialized = init.iter().all(|c| terminated_with(c) == Some(0));
    let init_failed = init.iter().any(|c| terminated_with(c).is_some_and(|code| code != 0));
    let all_done = main.iter().all(|c| terminated_with(c).is_some());
    let phase = if init_failed {
        "Failed"
    } else if initialized && all_done && !main.is_empty() {
        if main.iter().all(|c| terminated_with(c) == Some(0)) { "Succeeded" } else { "Failed" }
    } else if initialized && main.iter().any(|c| c.state.get("running").is_some() || c.restart_count > 0) {
        "Running"
    } else {
        "Pending"
    };
    let ready = initialized && main.iter().all(|c| c.ready);
    let now = rfc3339_now();
    let condition = |kind: &str, ok: bool, reason: &str| {
        let reason = if ok { Value::Null } else { json!(reason) };
        json!({"type": kind, "status": if ok { "True" } else { "False" }, "reason": reason, "lastProbeTime": null,
               "lastTransitionTime": now})
    };
    let statuses = |list: &[&Container]| -> Vec<Value> {
        list.iter()
            .map(|c| {
                json!({"name": c.name, "image": c.image, "imageID": c.image_id,
                       "ready": c.ready, "started": c.started, "restartCount": c.restart_count,
                       "state": c.state, "lastState": c.last_state})
            })
            .collect()
    };
    let mut status = json!({
        "phase": phase,
        "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "conditions": [
            condition("PodReadyToStartContainers", true, ""),
            condition("Initialized", initialized, "ContainersNotInitialized"),
            condition("Ready", ready, "ContainersNotReady"),
            condition("ContainersReady", ready, "ContainersNotReady"),
            condition("PodScheduled", true, ""),
        ],
        "containerStatuses": statuses(&main),
    });
    // As the kubelet writes them: a pod without init or ephemeral containers has no such lists at all.
    for (field, list) in [("initContainerStatuses", &init), ("ephemeralContainerStatuses", &ephemeral)] {
        if !list.is_empty() {
            status[field] = Value::Array(statuses(list));
        }
    }
    status
}
