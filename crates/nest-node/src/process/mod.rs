//! The process runtime: a pod runs as real processes, one per container, each in a sandbox of its own made by an
//! OCI runtime ([`sandbox`]), from its image (the node's store, or pulled: [`Runtime::sources`]) or from the host
//! executable the node's [`allowlist`](crate::allowlist) maps its image to.
//!
//! - **Files.** Everything of pod `<uid>` lives in `<data>/pods/<uid>/`: `volumes/<name>/` (written by
//!   [`prepare`]), `layers/<container>/` (the writable layer of a container of an image, [`layer`]),
//!   `logs/<container>/<restart>.log` (each line `<RFC 3339 time> <stdout|stderr> <text>`) and
//!   `pids/<container>` (the process id and its start time, so a restarted node can find leftovers). Claims live in
//!   `<data>/claims/<namespace>/<claim>/` and outlive pods.
//! - **Lifecycle.** A container's process is restarted as `restartPolicy` says, after the kubelet's back-off (the
//!   first restart at once, then 10 s doubling to 5 min, reset after 10 min of running), during which the container
//!   waits with reason `CrashLoopBackOff`. Stopping sends SIGTERM to the process group, then SIGKILL when the grace
//!   period ends. Children are killed if the node process dies (`PR_SET_PDEATHSIG`).
//! - **Status.** Every change of a container is reported at once as the pod's status (phase, conditions, container
//!   states, restart counts, last termination state).
//! - **Shares and limits.** A tenant's pods run beneath its tenant's cgroup share ([`tenants`]); `emptyDir`
//!   `sizeLimit`s, `ephemeral-storage` limits and claims' capacities are measured and a pod over one is evicted
//!   ([`storage`], [`Runtime::enforce_storage`]).

mod ephemeral;
pub mod init;
pub mod layer;
pub mod paths;
pub mod prepare;
pub mod sandbox;
pub mod stdio;
pub mod storage;
mod subpath;
mod supervise;
pub mod tenants;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Client, ResourceExt};

use crate::allowlist::Allowlist;
use crate::registries::{Decision, PullFrom};
pub use prepare::{Launch, PrepareError};
pub use supervise::{NotRunning, PodRun};

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
    /// The registries this node pulls images from, as the platform admin names them (`--pull-from`: `host[:port]`,
    /// `http://host[:port]` for plain HTTP, `*` for any not of this machine); see [`crate::registries::PullFrom`]. A
    /// registry on this machine (loopback, its own addresses) only when named, never because a pod's image names it.
    pub pull_from: Vec<String>,
    /// The admin's registry hosts: mirrors and per-host settings ([`crate::hosts`], `--registry-config`,
    /// `--registry-mirror`), asked before a registry the pull-from list judges.
    pub hosts: crate::hosts::Hosts,
    /// The node's name, as its Events give it.
    pub node: String,
    /// The most bytes an image may be, its blobs as pulled and its files once unpacked.
    pub image_size_limit: u64,
    /// Each tenant's share of the node unless its pods' annotations say otherwise ([`tenants`]).
    pub tenant_share: tenants::Share,
}

/// Where a container's process comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// An allowlisted executable of the host.
    Host(PathBuf),
    /// An image, from the node's store or pulled into it.
    Image(String),
}

/// A pod's image pulls that failed: how many times, and when the node may try again (the kubelet's back-off: 10 s,
/// doubling to 5 min).
#[derive(Clone, Debug)]
pub struct PullBackOff {
    pub image: String,
    pub failures: u32,
    pub until: std::time::Instant,
}

/// The pods this node runs as processes.
pub struct Runtime {
    client: Client,
    events: crate::events::Recorder,
    config: Config,
    sandboxes: sandbox::Sandboxes,
    /// Pods started by this node and not yet removed, by UID.
    pods: Mutex<HashMap<String, Arc<PodRun>>>,
    /// Where pods' processes talk from.
    network: crate::network::Network,
    images: crate::images::Store,
    /// Pods whose image pulls failed, by UID.
    pulls: Mutex<HashMap<String, PullBackOff>>,
    /// The registries the platform admin lets this node pull from.
    pull_from: crate::registries::PullFrom,
    /// The proxy every pull from a registry the admin did not name goes through, started at the first.
    guard: tokio::sync::OnceCell<crate::registries::guard::Guard>,
    /// When running pods' volumes were last written and their projected tokens are due for renewal, by UID.
    renewals: Mutex<HashMap<String, Freshness>>,
}

/// When a running pod's volumes were last written, and when its projected tokens are due for renewal.
#[derive(Clone, Copy, Debug)]
struct Freshness {
    written: std::time::Instant,
    renew_tokens: Option<std::time::SystemTime>,
}

/// How often a running pod's ConfigMap, Secret, downward-API and projected volumes are written again from what the
/// API server holds (the kubelet's sync period is a minute, plus its caches' time).
pub const VOLUME_REFRESH: Duration = Duration::from_secs(60);

impl Runtime {
    /// A runtime keeping its files under `config.data_dir`. Processes and containers left behind by an earlier run
    /// of this node (the node was killed) are killed first; their pods start again when they are reconciled. Fails,
    /// saying what to install, when the OCI runtime cannot run.
    ///
    /// A relative `data_dir` is made absolute first: the paths of volumes handed to the OCI runtime are beneath it.
    pub fn new(
        client: Client,
        events: crate::events::Recorder,
        mut config: Config,
        network: crate::network::Network,
    ) -> anyhow::Result<Runtime> {
        let preparing = |e: std::io::Error| anyhow::anyhow!("preparing {}: {e}", config.data_dir.display());
        config.data_dir = std::path::absolute(&config.data_dir).map_err(preparing)?;
        let preparing = |e: std::io::Error| anyhow::anyhow!("preparing {}: {e}", config.data_dir.display());
        std::fs::create_dir_all(config.data_dir.join("pods")).map_err(preparing)?;
        std::fs::create_dir_all(config.data_dir.join("claims")).map_err(preparing)?;
        for entry in std::fs::read_dir(config.data_dir.join("pods")).map_err(preparing)?.flatten() {
            supervise::kill_leftovers(&entry.path().join("pids"));
        }
        let programs = config.allowlist.programs();
        let sandboxes = sandbox::Sandboxes::new(
            &config.data_dir,
            &config.oci_runtime,
            &config.init,
            programs,
            config.tenant_share,
        )?;
        let images =
            crate::images::Store::open(&config.data_dir.join("images"))?.with_size_limit(config.image_size_limit);
        let pull_from =
            crate::registries::PullFrom::parse(&config.pull_from).map_err(|e| anyhow::anyhow!("--pull-from {e}"))?;
        Ok(Runtime {
            client,
            events,
            config,
            sandboxes,
            pods: Mutex::new(HashMap::new()),
            network,
            images,
            pulls: Mutex::new(HashMap::new()),
            pull_from,
            guard: tokio::sync::OnceCell::new(),
            renewals: Mutex::new(HashMap::new()),
        })
    }

    /// The node's image store.
    pub fn images(&self) -> &crate::images::Store {
        &self.images
    }

    /// What this node does with the registry of `image` ([`registries`](crate::registries)); `None` when the
    /// reference does not parse.
    fn decide(&self, image: &str) -> Option<PullDecision> {
        let whole = crate::images::normalize(image).ok()?;
        let reference: oci_client::Reference = whole.parse().ok()?;
        let local = |ip| self.holds(ip);
        Some(decide(&self.pull_from, &reference, &local))
    }

    /// Whether `ip` is this machine's or one of this node's pods': no tenant's registry may be there.
    fn holds(&self, ip: std::net::IpAddr) -> bool {
        holder(&self.network)(ip)
    }

    /// The guard proxy for pulls from registries the admin did not name, started at the first such pull.
    async fn guard(&self) -> std::io::Result<&crate::registries::guard::Guard> {
        let holds = holder(&self.network);
        let internal = move |ip| crate::registries::internal_address(ip, &holds);
        self.guard.get_or_try_init(|| crate::registries::guard::Guard::start(Arc::new(internal))).await
    }

    /// Every pod started here and not yet removed.
    pub fn runs(&self) -> Vec<Arc<PodRun>> {
        self.pods().values().cloned().collect()
    }

    fn pods(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<PodRun>>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where each of the pod's containers (init containers first) comes from: an image the store holds (unless its
    /// pull policy is `Always`), else an allowlisted executable, else the image, to be pulled (`Runtime::image`
    /// says whether it may be, and the pod is told `ErrImagePull` when it may not or no registry gives it).
    pub fn sources(&self, pod: &Pod) -> Vec<Source> {
        let spec = pod.spec.clone().unwrap_or_default();
        spec.init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .map(|c| {
                let image = c.image.clone().unwrap_or_default();
                let always = pull_policy(c) == "Always";
                let stored = self.images.lookup(&image).is_some();
                if stored && !always {
                    return Source::Image(image);
                }
                match self.config.allowlist.executable(&image) {
                    Some(program) => Source::Host(program.to_path_buf()),
                    None => Source::Image(image),
                }
            })
            .collect()
    }

    /// The image `image` for a container of `pod` whose pull policy is `policy`: the store's copy, or pulled into
    /// it with the pod's `imagePullSecrets`. While an earlier pull of the pod's is backing off, nothing is tried.
    async fn image(
        &self,
        pod: &Pod,
        container: &k8s_openapi::api::core::v1::Container,
        init: bool,
        sources: &mut prepare::Sources,
    ) -> Result<crate::images::Image, PrepareError> {
        let image = container.image.as_deref().unwrap_or_default();
        let policy = pull_policy(container);
        let mut auth = crate::images::Auth::default();
        for secret in pod.spec.iter().flat_map(|s| s.image_pull_secrets.iter().flatten()) {
            if let Some(data) = sources.secret(&secret.name).await? {
                for key in [".dockerconfigjson", ".dockercfg"] {
                    if let Some(json) = data.get(key) {
                        auth.add_docker_config(json);
                    }
                }
            }
        }
        let stored = self.images.lookup(image);
        // A stored image pulled with credentials this pod does not hold is, for this pod, not present.
        let unverified = stored.as_ref().is_some_and(|found| !self.images.may_use(found, &auth));
        let decision = self.decide(image);
        // The admin's hosts for the image's registry (mirrors, a server in its stead), in the order they are asked;
        // then the registry itself, when the admin's list lets the node pull from it.
        let by_digest = image.contains('@');
        let route = decision.as_ref().map(|d| self.config.hosts.route(&d.registry));
        let mut admin: Vec<crate::hosts::Endpoint> = Vec::new();
        if let Some(route) = &route {
            admin.extend(route.mirrors.iter().filter(|m| m.serves(by_digest)).cloned());
            if let crate::hosts::Upstream::Server(server) = &route.upstream
                && server.serves(by_digest)
            {
                admin.push(server.clone());
            }
        }
        let upstream = route.as_ref().is_some_and(|r| r.upstream == crate::hosts::Upstream::Registry);
        let pull = decision.clone().filter(|d| d.decision.may_pull() && upstream);
        let can_pull = pull.is_some() || !admin.is_empty();
        let about = crate::about(pod).container(&container.name, init);
        let uid = pod.uid().unwrap_or_default();
        let present = |found: crate::images::Image| async {
            let message = format!("Container image \"{image}\" already present on machine");
            crate::events::record(&self.events, &about, "Normal", "Pulled", &message);
            Ok(found)
        };
        let pull_error = |message: String, reason| PrepareError::Pull { image: image.into(), message, reason };
        let never = "ErrImageNeverPull";
        match (stored, can_pull) {
            (Some(_), _) if unverified && policy == "Never" => {
                return Err(pull_error(
                    format!(
                        "Container image \"{image}\" is present on the machine, but the pod's credentials have not \
                         pulled it, and its pull policy is Never"
                    ),
                    never,
                ));
            }
            (Some(found), can_pull) if !unverified && (policy != "Always" || !can_pull) => {
                return present(found).await;
            }
            (None, _) if policy == "Never" => {
                let message = format!("Container image \"{image}\" is not present with pull policy of Never");
                return Err(pull_error(message, never));
            }
            (_, true) => {}
            (stored, false) => {
                // Refused before any connection: a registry the admin did not name, or one of this machine's. The
                // pod backs off as after a failed pull, and is told the same whichever it was.
                self.back_off(&uid, image);
                let Some(decision) = decision else {
                    let message = format!("Failed to apply default image tag \"{image}\": couldn't parse image name");
                    return Err(pull_error(message, "InvalidImageName"));
                };
                let mut message = not_allowed(&decision.registry);
                if stored.is_some() {
                    message = format!("the pod's credentials have not pulled {image:?}, and {message}");
                }
                return Err(pull_error(message, "ErrImagePull"));
            }
        }
        let whole = crate::images::normalize(image).map_err(|e| pull_error(e.to_string(), "InvalidImageName"))?;
        // What the pod is told names the registry as its reference does, never the admin's hosts.
        let registry = decision.as_ref().map(|d| d.registry.clone()).unwrap_or_default();
        let message = format!("Pulling image \"{image}\"");
        crate::events::record(&self.events, &about, "Normal", "Pulling", &message);
        let began = std::time::Instant::now();
        let pulled = |pulled: crate::images::Image| {
            self.pulls().remove(&uid);
            let took = began.elapsed();
            let size: i64 = pulled.layers.iter().map(|l| l.size() as i64).sum();
            let message = format!(
                "Successfully pulled image \"{image}\" in {took:.3?} ({took:.3?} including waiting). Image size: {size} bytes."
            );
            crate::events::record(&self.events, &about, "Normal", "Pulled", &message);
            Ok(pulled)
        };
        let mut failure = crate::images::PullFailure::Unreachable;
        for host in &admin {
            let via = match via_host(host) {
                Ok(via) => via,
                Err(error) => {
                    tracing::warn!(%error, registry = %host.host, "reading a registry host's CA certificates");
                    failure = crate::images::PullFailure::Node;
                    continue;
                }
            };
            match self.images.pull_through(image, &auth, &via).await {
                Ok(image) => return pulled(image),
                Err(error) => {
                    tracing::warn!(pod = %pod.name_any(), image, registry = %host.host, error = %chain(&error), "pulling an image from a registry host");
                    failure = error.failure();
                }
            }
        }
        let Some(pull) = pull else {
            self.back_off(&uid, image);
            return Err(pull_error(failure.describe(&whole, &registry), "ErrImagePull"));
        };
        // Any registry: not one whose name leads to this machine (`localhost.localdomain`, a name in /etc/hosts, a
        // DNS name of 127.0.0.1), asked just before the pull. The client resolves the name again: a name that
        // changes its answer in between is not caught here.
        if pull.decision == Decision::Any
            && let Err(refusal) = self.resolves_outside(&pull).await
        {
            tracing::warn!(pod = %pod.name_any(), image, registry = %pull.connect, why = %refusal, "refused a pull");
            self.back_off(&uid, image);
            let message = match refusal {
                Resolved::Internal(_) => not_allowed(&pull.registry),
                Resolved::Unknown(_) => crate::images::PullFailure::Unreachable.describe(&whole, &pull.registry),
            };
            return Err(pull_error(message, "ErrImagePull"));
        }
        let plain_http = matches!(pull.decision, Decision::Named { plain_http: true });
        let insecure = if plain_http { vec![pull.connect.clone()] } else { Vec::new() };
        // Through the guard, so that what the registry answers (a redirect, its token service) cannot lead the node
        // to this machine either.
        let proxy = match pull.decision {
            Decision::Any => match self.guard().await {
                Ok(guard) => Some(guard.url()),
                Err(error) => {
                    tracing::warn!(%error, "starting the pull guard");
                    self.back_off(&uid, image);
                    return Err(pull_error(
                        crate::images::PullFailure::Node.describe(&whole, &pull.registry),
                        "ErrImagePull",
                    ));
                }
            },
            _ => None,
        };
        let via = crate::images::Via { insecure, proxy, ..Default::default() };
        match self.images.pull_through(image, &auth, &via).await {
            Ok(image) => pulled(image),
            Err(error) => {
                // The whole error for the node's admin; for the pod, what kind of failure it was, in fixed words.
                tracing::warn!(pod = %pod.name_any(), image, error = %chain(&error), "pulling an image");
                self.back_off(&uid, image);
                Err(pull_error(error.failure().describe(&whole, &pull.registry), "ErrImagePull"))
            }
        }
    }

    /// Starts, or lengthens, pod `uid`'s back-off after a failed (or refused) pull of `image`: the kubelet's 10 s,
    /// doubling to 5 min.
    fn back_off(&self, uid: &str, image: &str) {
        let mut pulls = self.pulls();
        let failures = pulls.get(uid).filter(|p| p.image == image).map_or(0, |p| p.failures).saturating_add(1);
        let wait = Duration::from_secs(10).saturating_mul(1 << (failures - 1).min(5)).min(Duration::from_secs(300));
        let until = std::time::Instant::now() + wait;
        pulls.insert(uid.to_string(), PullBackOff { image: image.into(), failures, until });
    }

    /// Whether the name of `pull`'s registry (when it is one) resolves only to addresses outside this machine.
    async fn resolves_outside(&self, pull: &PullDecision) -> Result<(), Resolved> {
        let Some(target) = crate::registries::Registry::parse(&pull.connect) else {
            return Err(Resolved::Unknown(None));
        };
        let Some(name) = target.domain() else { return Ok(()) };
        let port = target.port.unwrap_or(443);
        let addresses = tokio::net::lookup_host((name, port)).await.map_err(|e| Resolved::Unknown(Some(e)))?;
        let local = |ip| self.holds(ip);
        for address in addresses {
            if crate::registries::internal_address(address.ip(), &local) {
                return Err(Resolved::Internal(address.ip()));
            }
        }
        Ok(())
    }

    fn pulls(&self) -> std::sync::MutexGuard<'_, HashMap<String, PullBackOff>> {
        self.pulls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The back-off of pod `uid`'s failed image pull, while it lasts.
    pub fn pull_backoff(&self, uid: &str) -> Option<PullBackOff> {
        self.pulls().get(uid).filter(|p| p.until > std::time::Instant::now()).cloned()
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
        prepare::write_volumes(facts, &mut sources, &pod_dir, &claims_dir, false).await?;
        let fresh = Freshness { written: std::time::Instant::now(), renew_tokens: sources.renew_tokens_at };
        self.renewals.lock().unwrap_or_else(|p| p.into_inner()).insert(uid.clone(), fresh);
        let storage = storage::Limits::of(pod, &pod_dir, &claims_dir, &sources.claim_capacities)?;
        let chosen = self.sources(pod);
        let spec = pod.spec.clone().unwrap_or_default();
        let containers: Vec<_> = spec.init_containers.iter().flatten().chain(spec.containers.iter()).collect();
        let base = self.sandboxes.base(pod)?;
        // Before the containers' mounts: a subPath the node makes belongs to its volume's users.
        self.sandboxes.own_volumes(pod, &pod_dir, &claims_dir, base)?;
        let mut launches = Vec::new();
        let inits = spec.init_containers.as_ref().map_or(0, Vec::len);
        for (index, (container, source)) in containers.iter().zip(&chosen).enumerate() {
            let launch = match source {
                Source::Host(program) => {
                    prepare::launch(facts, container, program, None, &mut sources, &pod_dir, &claims_dir).await?
                }
                Source::Image(name) => {
                    let init = index < inits;
                    let image = self.image(pod, container, init, &mut sources).await?;
                    let rootfs = self.images.rootfs(&image, base).map_err(|e| PrepareError::Pull {
                        image: name.clone(),
                        message: format!("unpacking image \"{name}\": {e}"),
                        reason: "CreateContainerError",
                    })?;
                    let root = Some((&image, rootfs));
                    prepare::launch(facts, container, Path::new(""), root, &mut sources, &pod_dir, &claims_dir).await?
                }
            };
            launches.push(launch);
        }
        let address =
            facts.pod_ip.parse().map_err(|_| PrepareError::Network(format!("no address: {:?}", facts.pod_ip)))?;
        // Beneath its tenant's share, made and written now (the pod keeps it until it is removed).
        let placement = self.sandboxes.place(pod)?;
        // The pod's zone in the network wall: its tenant's (the label only the syncer and the provider write), or
        // the platform's.
        let labels = pod.labels();
        let zone = crate::firewall::Zone::of(labels);
        let egress_off = labels.get(crate::firewall::EGRESS_LABEL).is_some_and(|v| v == "deny");
        let netns = self
            .network
            .add(&uid, address, &zone, egress_off, &pod_dir)
            .await
            .map_err(|e| PrepareError::Network(e.to_string()))?;
        for (container, launch) in containers.iter().zip(&mut launches) {
            match self.sandboxes.prepare(pod, container, launch, facts.pod_ip, netns.as_deref(), base, &placement) {
                Ok(sandboxed) => launch.sandbox = Some(Arc::new(sandboxed)),
                Err(error) => {
                    // Nothing runs in the namespace yet: it goes, and the next try makes it again.
                    self.network.remove(&uid, &self.pod_dir(&uid)).await;
                    return Err(error);
                }
            }
        }
        let setting = supervise::Setting {
            pod_ip: facts.pod_ip.to_string(),
            host_ip: facts.host_ip.to_string(),
            pod_dir,
            backoff: self.config.crash_backoff,
            storage,
            netns,
        };
        let run = PodRun::start(self.client.clone(), self.events.clone(), pod, setting, launches);
        self.pods().insert(uid, run);
        Ok(())
    }

    /// Writes a running pod's ConfigMap, Secret, downward-API and projected volumes again, as the kubelet keeps them
    /// up to date: files that changed are replaced whole, already the pod's users'; its projected tokens are asked
    /// for again once due ([`prepare::renew_at`]); its tenant's share is written again if the pod says another
    /// ([`sandbox::Sandboxes::place`]). Returns when to look again.
    pub async fn refresh(&self, pod: &Pod, facts: &prepare::PodFacts<'_>) -> Result<Duration, PrepareError> {
        let uid = pod.uid().unwrap_or_default();
        // Its tenant's share, as the pod now says it (the syncer writes a changed share onto running pods); nothing
        // is written when it is the share the tenant's directories hold.
        if let Err(error) = self.sandboxes.place(pod) {
            tracing::warn!(pod = %pod.name_any(), %error, "placing a running pod beneath its tenant's share");
        }
        let last = self.renewals.lock().unwrap_or_else(|p| p.into_inner()).get(&uid).copied();
        let now = std::time::SystemTime::now();
        let due = last.and_then(|l| l.renew_tokens).filter(|at| *at <= now);
        // A pod is looked at whenever it changes (its own status reports included): its volumes are written at most
        // once a period, unless a token is due.
        if let Some(last) = last.filter(|_| due.is_none()) {
            let left = VOLUME_REFRESH.saturating_sub(last.written.elapsed());
            if !left.is_zero() {
                let until_renewal = last.renew_tokens.and_then(|at| at.duration_since(now).ok()).unwrap_or(left);
                return Ok(left.min(until_renewal));
            }
        }
        let mut sources = prepare::Sources::new(self.client.clone(), &pod.namespace().unwrap_or_default());
        sources.tokens = due.is_some();
        sources.owner = Some(self.sandboxes.volume_owner(pod, self.sandboxes.base(pod)?));
        let claims = self.config.data_dir.join("claims");
        prepare::write_volumes(facts, &mut sources, &self.pod_dir(&uid), &claims, true).await?;
        let renew_tokens = sources.renew_tokens_at.or(last.and_then(|l| l.renew_tokens).filter(|at| *at > now));
        let fresh = Freshness { written: std::time::Instant::now(), renew_tokens };
        self.renewals.lock().unwrap_or_else(|p| p.into_inner()).insert(uid, fresh);
        let until_renewal = renew_tokens.and_then(|at| at.duration_since(now).ok()).unwrap_or(VOLUME_REFRESH);
        Ok(until_renewal.min(VOLUME_REFRESH))
    }

    /// Measures the storage of every running pod that has a limit each [`storage::PERIOD`], and evicts those over
    /// one ([`storage`]); runs until the node stops. Each pod is measured off the async threads, one after another,
    /// so that measuring takes at most one thread however many files tenants make.
    pub async fn enforce_storage(self: Arc<Self>) {
        loop {
            tokio::time::sleep(storage::PERIOD).await;
            let runs: Vec<Arc<PodRun>> = self
                .pods()
                .values()
                .filter(|run| run.storage.any() && !run.finished() && !run.evicted())
                .cloned()
                .collect();
            for run in runs {
                let limits = run.storage.clone();
                let judged = tokio::task::spawn_blocking(move || {
                    storage::verdict(&limits, |dir| storage::measure(dir, storage::MAX_ENTRIES))
                })
                .await;
                match judged {
                    Ok(Some(message)) => {
                        // Stopping takes up to the grace period: the next pod is measured meanwhile.
                        tokio::spawn(evict(run, message));
                    }
                    Ok(None) => {}
                    Err(error) => tracing::warn!(%error, "measuring a pod's storage"),
                }
            }
        }
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
        self.pulls().remove(uid);
        self.renewals.lock().unwrap_or_else(|p| p.into_inner()).remove(uid);
        let run = self.pods().remove(uid);
        if let Some(run) = run {
            run.stop(Duration::ZERO).await;
        }
        self.network.remove(uid, &self.pod_dir(uid)).await;
        subpath::release(&self.pod_dir(uid));
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
                    self.network.remove(&uid, &entry.path()).await;
                    subpath::release(&entry.path());
                    let _ = std::fs::remove_dir_all(entry.path());
                    self.sandboxes.remove_pod(&uid);
                }
            }
        }
    }

    /// Stops every pod, each within `grace`, without reporting it stopped: the node is shutting down, and starts the
    /// pods again when it comes back.
    pub async fn stop_all(&self, grace: Duration) {
        let runs: Vec<(String, Arc<PodRun>)> =
            self.pods().iter().map(|(uid, run)| (uid.clone(), run.clone())).collect();
        futures_util::future::join_all(runs.iter().map(|(_, run)| run.stop_silently(grace))).await;
        self.sandboxes.forget_all();
        // Nothing runs in their network namespaces any more; the pods get new ones when they start again.
        for (uid, _) in &runs {
            self.network.remove(uid, &self.pod_dir(uid)).await;
            subpath::release(&self.pod_dir(uid));
        }
        // Nor in those of pods whose start was cut short by the shutdown (the node drops its pod loop, and with it a
        // start that had made the namespace but not yet recorded its run): every pod of the node has its directory.
        if let Ok(entries) = std::fs::read_dir(self.config.data_dir.join("pods")) {
            for entry in entries.flatten() {
                let uid = entry.file_name().to_string_lossy().into_owned();
                if !runs.iter().any(|(started, _)| *started == uid) {
                    self.network.remove(&uid, &entry.path()).await;
                }
            }
        }
        if let Err(error) = self.network.sweep() {
            tracing::warn!(%error, "removing pods' network namespaces");
        }
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

/// Evicts `run`'s pod for `message` ([`PodRun::evict`]), then empties its `emptyDir`s, as the kubelet removes a
/// terminated pod's volumes: what filled the disk is given back at once. Claims keep their files.
async fn evict(run: Arc<PodRun>, message: String) {
    let (namespace, name) = run.names();
    tracing::info!(pod = %format!("{namespace}/{name}"), %message, "evicting a pod");
    if !run.evict(&message, storage::EVICTION_GRACE).await {
        return;
    }
    let dirs: Vec<PathBuf> = run.storage.empty_dirs.iter().map(|e| e.dir.clone()).collect();
    let emptied = tokio::task::spawn_blocking(move || {
        for dir in dirs {
            let _ = std::fs::remove_dir_all(&dir);
        }
    });
    if let Err(error) = emptied.await {
        tracing::warn!(%error, "emptying an evicted pod's volumes");
    }
}

/// The container's `imagePullPolicy`, defaulted as the API server defaults it: `Always` for `:latest` or no tag,
/// else `IfNotPresent`.
pub fn pull_policy(container: &k8s_openapi::api::core::v1::Container) -> &str {
    if let Some(policy) = container.image_pull_policy.as_deref() {
        return policy;
    }
    let image = container.image.as_deref().unwrap_or_default();
    let last = image.rsplit('/').next().unwrap_or_default();
    if image.contains('@') {
        return "IfNotPresent";
    }
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

/// What the node does with an image's registry, and how it names it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PullDecision {
    decision: Decision,
    /// The registry as the reference names it (`docker.io`, `127.1:5000`): what the pod is told.
    registry: String,
    /// The registry the client connects to (`index.docker.io` for Docker Hub).
    connect: String,
}

/// What the node does with `reference`'s registry under the admin's `pull_from`: judged as the client will connect
/// (Docker Hub as `index.docker.io`), or named as the reference names it (`docker.io`).
fn decide(
    pull_from: &PullFrom,
    reference: &oci_client::Reference,
    local: &dyn Fn(std::net::IpAddr) -> bool,
) -> PullDecision {
    let connect = reference.resolve_registry();
    let mut decision = pull_from.decide(connect, local);
    if !matches!(decision, Decision::Named { .. })
        && reference.registry() != connect
        && let named @ Decision::Named { .. } = pull_from.decide(reference.registry(), local)
    {
        decision = named;
    }
    PullDecision { decision, registry: reference.registry().to_string(), connect: connect.to_string() }
}

/// Whether an address is this machine's ([`held_by_this_machine`](crate::registries::held_by_this_machine)) or in
/// the pod range of `network`.
fn holder(network: &crate::network::Network) -> impl Fn(std::net::IpAddr) -> bool + Send + Sync + 'static {
    let range = match network {
        crate::network::Network::Bridged(bridge) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bridge.prefix)).unwrap_or(0);
            Some((u32::from(bridge.gateway) & mask, mask))
        }
        _ => None,
    };
    move |ip| {
        let in_range = match (range, ip) {
            (Some((base, mask)), std::net::IpAddr::V4(v4)) => u32::from(v4) & mask == base,
            _ => false,
        };
        in_range || crate::registries::held_by_this_machine(ip)
    }
}

/// How a pull reaches one of the admin's registry hosts: directly (the admin chose it, so it may be on this
/// machine), over plain HTTP or with the host's CA certificates.
fn via_host(host: &crate::hosts::Endpoint) -> std::io::Result<crate::images::Via> {
    let ca = host.ca.iter().map(std::fs::read).collect::<std::io::Result<Vec<_>>>()?;
    Ok(crate::images::Via {
        mirror: Some(host.host.clone()),
        insecure: if host.plain_http { vec![host.host.clone()] } else { Vec::new() },
        proxy: None,
        ca,
        skip_verify: host.skip_verify,
    })
}

/// What the pod is told of a registry the node does not pull from.
fn not_allowed(registry: &str) -> String {
    format!("registry {registry:?} is not allowed for this node")
}

/// Why a registry's name is not pulled from.
#[derive(Debug)]
enum Resolved {
    /// It resolves to an address of this machine (or one no tenant's registry may be at).
    Internal(std::net::IpAddr),
    /// It does not resolve.
    Unknown(Option<std::io::Error>),
}

impl std::fmt::Display for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Resolved::Internal(ip) => write!(f, "its name resolves to {ip}, an address of this machine"),
            Resolved::Unknown(Some(error)) => write!(f, "resolving its name: {error}"),
            Resolved::Unknown(None) => write!(f, "not a registry host"),
        }
    }
}

/// `error` and every error beneath it, for the log.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a node does with a pod's image reference, read by the distribution grammar as the store reads it: the
    /// registry is the reference's first component when it has a `.` or `:`, or is `localhost`.
    fn decision(pull_from: &[&str], image: &str) -> Option<Decision> {
        let entries: Vec<String> = pull_from.iter().map(|e| e.to_string()).collect();
        let pull_from = PullFrom::parse(&entries).unwrap();
        let whole = crate::images::normalize(image).ok()?;
        let reference: oci_client::Reference = whole.parse().ok()?;
        Some(decide(&pull_from, &reference, &|_| false).decision)
    }

    #[test]
    fn image_references_naming_this_machine_are_pulled_only_when_the_admin_named_their_registry() {
        let table: &[(&str, Option<Decision>)] = &[
            // `localhost` is a registry host by the grammar, not a Docker Hub repository.
            ("localhost/foo", Some(Decision::Internal)),
            ("localhost:5000/foo:1", Some(Decision::Internal)),
            ("LOCALHOST:5000/x", Some(Decision::Internal)),
            ("127.0.0.1:5000/x", Some(Decision::Internal)),
            ("127.1:5000/x", Some(Decision::Internal)),
            ("0x7f.1:5000/x", Some(Decision::Internal)),
            ("2130706433:5000/x", Some(Decision::Internal)),
            ("0.0.0.0:5000/x", Some(Decision::Internal)),
            ("169.254.169.254/latest/meta-data:1", Some(Decision::Internal)),
            // Brackets are not in the grammar: no registry at all, so never pulled.
            ("[::1]:5000/x", None),
            ("registry.local:5000/x", Some(Decision::Any)),
            ("nginx", Some(Decision::Any)),
            (
                "ghcr.io/org/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                Some(Decision::Any),
            ),
        ];
        for (image, with_any) in table {
            assert_eq!(decision(&["*"], image), *with_any, "{image} with *");
            let without = with_any.map(|d| if d == Decision::Any { Decision::NotNamed } else { d });
            assert_eq!(decision(&[], image), without, "{image} with nothing named");
        }
        let named = Some(Decision::Named { plain_http: true });
        assert_eq!(decision(&["127.0.0.1:5000"], "127.0.0.1:5000/x"), named);
        assert_eq!(decision(&["127.0.0.1:5000"], "127.1:5000/x"), named, "the same registry, written otherwise");
        assert_eq!(decision(&["127.0.0.1:5000"], "127.0.0.1:5001/x"), Some(Decision::Internal));
        assert_eq!(decision(&["localhost:5000"], "LOCALHOST:5000/x"), named);
        // Docker Hub named as references name it, or as the client reaches it.
        let hub = Some(Decision::Named { plain_http: false });
        assert_eq!(decision(&["docker.io"], "nginx:1.27"), hub);
        assert_eq!(decision(&["index.docker.io"], "docker.io/library/nginx:1.27"), hub);
    }
}
