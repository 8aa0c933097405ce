//! The process runtime: a pod whose every image is on the node's [`allowlist`](crate::allowlist) runs as
//! real processes, one per container, each in a sandbox of its own made by an OCI runtime ([`sandbox`]).
//!
//! - **Files.** Everything of pod `<uid>` lives in `<data>/pods/<uid>/`: `volumes/<name>/` (written by
//!   [`prepare`]), `logs/<container>/<restart>.log` (each line `<RFC 3339 time> <stdout|stderr> <text>`) and
//!   `pids/<container>` (the process id and its start time, so a restarted node can find leftovers). Claims live in
//!   `<data>/claims/<namespace>/<claim>/` and outlive pods.
//! - **Lifecycle.** A container's process is restarted as `restartPolicy` says, after the kubelet's back-off (the
//!   first restart at once, then 10 s doubling to 5 min, reset after 10 min of running), during which the container
//!   waits with reason `CrashLoopBackOff`. Stopping sends SIGTERM to the process group, then SIGKILL when the grace
//!   period ends. Children are killed if the node process dies (`PR_SET_PDEATHSIG`).
//! - **Status.** Every change of a container is reported at once as the pod's status (phase, conditions, container
//!   states, restart counts, last termination state).

pub mod init;
pub mod paths;
pub mod prepare;
pub mod sandbox;
mod supervise;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Client, ResourceExt};

use crate::allowlist::Allowlist;
pub use prepare::{Launch, PrepareError};
pub use supervise::PodRun;

/// How the runtime is set up.
#[derive(Clone, Debug)]
pub struct Config {
    /// `<data>`: pods, claims.
    pub data_dir: PathBuf,
    pub allowlist: Allowlist,
    /// The first back-off after a second crash (the kubelet's is 10 s).
    pub crash_backoff: Duration,
    /// The OCI runtime (`runc`, or one with its command line), looked up on `PATH` when it has no `/`.
    pub oci_runtime: PathBuf,
    /// The node's own binary: every container's init ([`init`]).
    pub init: PathBuf,
}

/// The pods this node runs as processes.
pub struct Runtime {
    client: Client,
    config: Config,
    sandboxes: sandbox::Sandboxes,
    /// Pods started by this node and not yet removed, by UID.
    pods: Mutex<HashMap<String, Arc<PodRun>>>,
}

impl Runtime {
    /// A runtime keeping its files under `config.data_dir`. Processes and containers left behind by an earlier run
    /// of this node (the node was killed) are killed first; their pods start again when they are reconciled. Fails,
    /// saying what to install, when the OCI runtime cannot run.
    ///
    /// A relative `data_dir` is made absolute first: the paths of volumes handed to the OCI runtime are beneath it.
    pub fn new(client: Client, mut config: Config) -> anyhow::Result<Runtime> {
        let preparing = |e: std::io::Error| anyhow::anyhow!("preparing {}: {e}", config.data_dir.display());
        config.data_dir = std::path::absolute(&config.data_dir).map_err(preparing)?;
        let preparing = |e: std::io::Error| anyhow::anyhow!("preparing {}: {e}", config.data_dir.display());
        std::fs::create_dir_all(config.data_dir.join("pods")).map_err(preparing)?;
        std::fs::create_dir_all(config.data_dir.join("claims")).map_err(preparing)?;
        for entry in std::fs::read_dir(config.data_dir.join("pods")).map_err(preparing)?.flatten() {
            supervise::kill_leftovers(&entry.path().join("pids"));
        }
        let programs = config.allowlist.entries.iter().map(|e| e.executable.clone()).collect();
        let sandboxes = sandbox::Sandboxes::new(&config.data_dir, &config.oci_runtime, &config.init, programs)?;
        Ok(Runtime { client, config, sandboxes, pods: Mutex::new(HashMap::new()) })
    }

    fn pods(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<PodRun>>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The executables for the pod's containers (init containers first), or the first image not on the allowlist.
    pub fn programs(&self, pod: &Pod) -> Result<Vec<PathBuf>, String> {
        let spec = pod.spec.clone().unwrap_or_default();
        spec.init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .map(|c| {
                let image = c.image.clone().unwrap_or_default();
                self.config.allowlist.executable(&image).map(Path::to_path_buf).ok_or(image)
            })
            .collect()
    }

    /// Whether pod `uid` was started here (and not removed since).
    pub fn knows(&self, uid: &str) -> bool {
        self.pods().contains_key(uid)
    }

    /// The pod `namespace/name` started here, if any (the latest, should an earlier pod of that name linger).
    pub fn find(&self, namespace: &str, name: &str) -> Option<Arc<PodRun>> {
        let pods = self.pods();
        let mut matching = pods.values().filter(|run| run.names() == (namespace, name));
        let first = matching.next()?.clone();
        Some(matching.find(|run| !run.finished()).cloned().unwrap_or(first))
    }

    fn pod_dir(&self, uid: &str) -> PathBuf {
        self.config.data_dir.join("pods").join(uid)
    }

    /// Prepares the pod's volumes and command lines and starts its processes.
    pub async fn start(&self, pod: &Pod, facts: &prepare::PodFacts<'_>) -> Result<(), PrepareError> {
        let uid = pod.uid().unwrap_or_default();
        let pod_dir = self.pod_dir(&uid);
        let claims_dir = self.config.data_dir.join("claims");
        let mut sources = prepare::Sources::new(self.client.clone(), &pod.namespace().unwrap_or_default());
        prepare::write_volumes(facts, &mut sources, &pod_dir, &claims_dir).await?;
        let programs =
            self.programs(pod).map_err(|image| PrepareError::Config(format!("image {image} not allowed")))?;
        let spec = pod.spec.clone().unwrap_or_default();
        let containers: Vec<_> = spec.init_containers.iter().flatten().chain(spec.containers.iter()).collect();
        let mut launches = Vec::new();
        for (container, program) in containers.iter().zip(&programs) {
            let launch = prepare::launch(facts, container, program, &mut sources, &pod_dir, &claims_dir).await?;
            launches.push(launch);
        }
        let base = self.sandboxes.base(pod)?;
        self.sandboxes.own_volumes(pod, &pod_dir, &claims_dir, base)?;
        for (container, launch) in containers.iter().zip(&mut launches) {
            let sandboxed = self.sandboxes.prepare(pod, container, launch, facts.pod_ip, base)?;
            launch.sandbox = Some(Arc::new(sandboxed));
        }
        let setting = supervise::Setting {
            pod_ip: facts.pod_ip.to_string(),
            host_ip: facts.host_ip.to_string(),
            pod_dir,
            backoff: self.config.crash_backoff,
        };
        let run = PodRun::start(self.client.clone(), pod, setting, launches);
        self.pods().insert(uid, run);
        Ok(())
    }

    /// Stops pod `uid`'s processes (SIGTERM, SIGKILL after `grace`) and waits for them. The pod stays known until
    /// [`Runtime::remove`].
    pub async fn stop(&self, uid: &str, grace: Duration) {
        let run = self.pods().get(uid).cloned();
        if let Some(run) = run {
            run.stop(grace).await;
        }
    }

    /// Forgets pod `uid` and deletes its files (claims stay).
    pub async fn remove(&self, uid: &str) {
        let run = self.pods().remove(uid);
        if let Some(run) = run {
            run.stop(Duration::ZERO).await;
        }
        let _ = std::fs::remove_dir_all(self.pod_dir(uid));
        self.sandboxes.remove_pod(uid);
    }

    /// Stops and removes every pod not in `live`, a list of the node's pods taken at `listed` (deleted without this
    /// node seeing it, for example by force). Pods started, and directories made, after the list was taken are not
    /// in it, and stay.
    pub async fn keep_only(&self, live: &BTreeSet<String>, listed: std::time::SystemTime) {
        let gone: Vec<String> = self
            .pods()
            .iter()
            .filter(|(uid, run)| !live.contains(*uid) && run.started < listed)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            self.remove(&uid).await;
        }
        // Directories of pods this run never started (left by an earlier run).
        if let Ok(entries) = std::fs::read_dir(self.config.data_dir.join("pods")) {
            for entry in entries.flatten() {
                let uid = entry.file_name().to_string_lossy().into_owned();
                // A directory made after the list was taken belongs to a pod being started.
                let older = entry.metadata().and_then(|m| m.modified()).is_ok_and(|made| made < listed);
                if !live.contains(&uid) && !self.knows(&uid) && older {
                    supervise::kill_leftovers(&entry.path().join("pids"));
                    let _ = std::fs::remove_dir_all(entry.path());
                    self.sandboxes.remove_pod(&uid);
                }
            }
        }
    }

    /// Stops every pod, each within `grace`, without reporting it stopped: the node is shutting down, and starts the
    /// pods again when it comes back.
    pub async fn stop_all(&self, grace: Duration) {
        let runs: Vec<Arc<PodRun>> = self.pods().values().cloned().collect();
        futures_util::future::join_all(runs.iter().map(|run| run.stop_silently(grace))).await;
        self.sandboxes.forget_all();
    }

    /// Restart counts of the pod's containers as last reported, so a restarted node keeps counting.
    pub fn restart_counts(pod: &Pod) -> BTreeMap<String, i32> {
        let status = pod.status.clone().unwrap_or_default();
        status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
            .map(|c| (c.name.clone(), c.restart_count))
            .collect()
    }
}
