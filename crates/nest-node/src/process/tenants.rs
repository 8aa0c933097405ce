//! A cgroup subtree per tenant: every container of a tenant's pods runs beneath
//! `nest/<node tag>/tenants/<tenant key>/<pod uid>/<container>` in each cgroup hierarchy, and the tenant's directory
//! holds the tenant's share of the node (memory, CPU, processes), so that all of a tenant's pods together can
//! exhaust only that share: the kernel's OOM killer, CPU throttling and the pids limit act inside it, never on
//! another tenant's pods or on the platform.
//!
//! - **Whose pod.** A tenant's workload is a pod with the tenant label ([`TENANT_LABEL`], its tenant key) that the
//!   syncer made ([`SYNCED_ANNOTATION`]). Both are `tenancy.nest.dev/` metadata, which the syncer never copies from
//!   a tenant's own objects: a tenant can pick neither its subtree nor its share. A tenant's control-plane pods (the
//!   provider labels them, but the syncer did not make them) are limited by their own `resources`, as every other
//!   pod is, and stay at `nest/<node tag>/<pod uid>`: a tenant filling its share must not starve the API server it
//!   needs to clean up.
//! - **The share.** From the pod's annotations, which the syncer writes from the tenant's Cluster:
//!   [`MEMORY_ANNOTATION`] (bytes, a quantity), [`CPU_ANNOTATION`] (cores, a quantity) and [`PIDS_ANNOTATION`] (a
//!   count). Each one absent, or not a quantity above zero, is the node's default ([`Share`], `nest node
//!   --tenant-memory`, …): never unlimited. The share a pod of the tenant carries is written when the pod starts and
//!   whenever the node looks at it again (a changed share reaches running pods), the last one seen winning.
//! - **Files.** cgroup v1: `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`: no swap), hierarchical;
//!   `cpu.cfs_quota_us` over `cpu.cfs_period_us`, and `cpu.shares` (1,024 a core, as the kubelet converts requests);
//!   `pids.max`. cgroup v2 (`/sys/fs/cgroup/cgroup.controllers` exists): `memory.max`, `memory.swap.max` 0,
//!   `cpu.max`, `cpu.weight` (the shares converted as runc converts them) and `pids.max`, with the controllers
//!   enabled in every directory above. A file a hierarchy lacks is skipped.
//! - **Lifetime.** A tenant's directories are made when the node starts its first pod and removed when its last pod
//!   is removed, all under one lock, so that no directory is removed between a pod's placement and its containers'
//!   start (the OCI runtime would make it again, without limits). What an earlier run left is removed at start.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

pub use nest_core::tenancy::TENANT_LABEL;

use super::prepare::PrepareError;

/// The pod annotations of a tenant's share, and the one every pod the syncer makes carries
/// ([`nest_core::tenancy`]).
pub use nest_core::tenancy::{
    TENANT_CPU as CPU_ANNOTATION, TENANT_MEMORY as MEMORY_ANNOTATION, TENANT_PIDS as PIDS_ANNOTATION,
    TENANT_UID as SYNCED_ANNOTATION,
};

/// The CFS period every quota is a part of (the kernel's and the kubelet's default, 100 ms).
pub const CPU_PERIOD_US: u64 = 100_000;
/// The smallest CPU share: the kernel's smallest quota, 1 ms a period.
const MIN_MILLICORES: u64 = 10;
/// The largest CPU share: more than any machine has, and well under the kernel's largest quota.
const MAX_MILLICORES: u64 = 1_000_000_000;
/// The largest memory limit the kernel holds (2⁶³−1 rounded down to a page).
const MAX_MEMORY: u64 = 9_223_372_036_854_771_712;
/// The most processes a machine can have (the kernel's `PID_MAX_LIMIT`).
const MAX_PIDS: u64 = 4_194_304;
/// `cpu.shares` bounds (the kernel's, as the kubelet's `MilliCPUToShares` uses them).
const MIN_SHARES: u64 = 2;
const MAX_SHARES: u64 = 262_144;

/// A tenant's share of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// Bytes of memory.
    pub memory: u64,
    /// Thousandths of a core.
    pub millicores: u64,
    /// Processes and threads.
    pub pids: u64,
}

/// The default share, for a machine of 24 GiB and 2 cores: a sixth of the memory (the audit's 3,000 MiB pod fits,
/// eight of them do not), half of the CPU (one tenant busy leaves a core for the platform and the others), and as
/// many processes as one container may have.
impl Default for Share {
    fn default() -> Share {
        Share { memory: 4 << 30, millicores: 1000, pids: 4096 }
    }
}

impl Share {
    /// The share `annotations` give ([`MEMORY_ANNOTATION`], [`CPU_ANNOTATION`], [`PIDS_ANNOTATION`]), each part
    /// absent or unreadable taken from `defaults`.
    pub fn from_annotations(annotations: &BTreeMap<String, String>, defaults: Share) -> Share {
        let read = |name: &str, parse: fn(&str) -> Option<u64>| annotations.get(name).and_then(|v| parse(v));
        Share {
            memory: read(MEMORY_ANNOTATION, memory).unwrap_or(defaults.memory),
            millicores: read(CPU_ANNOTATION, millicores).unwrap_or(defaults.millicores),
            pids: read(PIDS_ANNOTATION, pids).unwrap_or(defaults.pids),
        }
    }

    /// The CFS quota of this share, in microseconds a [`CPU_PERIOD_US`].
    pub fn cpu_quota_us(&self) -> u64 {
        self.millicores.clamp(MIN_MILLICORES, MAX_MILLICORES).saturating_mul(CPU_PERIOD_US) / 1000
    }

    /// `cpu.shares`: 1,024 a core, within the kernel's bounds.
    fn cpu_shares(&self) -> u64 {
        (self.millicores.saturating_mul(1024) / 1000).clamp(MIN_SHARES, MAX_SHARES)
    }

    /// `cpu.weight` (v2): the shares mapped onto 1–10,000 as runc maps them (`ConvertCPUSharesToCgroupV2Value`).
    fn cpu_weight(&self) -> u64 {
        1 + (self.cpu_shares() - MIN_SHARES) * 9999 / (MAX_SHARES - MIN_SHARES)
    }
}

/// A quantity above zero, rounded up to a whole number and held at `max`; `None` for anything else (never
/// "unlimited").
fn whole(text: &str, scale: f64, max: u64) -> Option<u64> {
    let value = nest_core::quantity::value(text.trim())? * scale;
    // `as` holds a float past u64's range at its largest; the value is finite and positive here.
    (value > 0.0).then(|| (value.ceil() as u64).clamp(1, max))
}

/// Bytes of memory from a quantity (`512Mi`).
pub fn memory(text: &str) -> Option<u64> {
    whole(text, 1.0, MAX_MEMORY)
}

/// Thousandths of a core from a quantity of cores (`1`, `500m`), at least the kernel's smallest quota.
pub fn millicores(text: &str) -> Option<u64> {
    whole(text, 1000.0, MAX_MILLICORES).map(|m| m.max(MIN_MILLICORES))
}

/// A count of processes from a quantity (`4096`, `4k`).
pub fn pids(text: &str) -> Option<u64> {
    whole(text, 1.0, MAX_PIDS)
}

/// [`memory`] for a command-line flag: the error says what was wrong.
pub fn memory_flag(text: &str) -> Result<u64, String> {
    memory(text).ok_or_else(|| format!("{text:?} is not a quantity of bytes above zero (as 4Gi)"))
}

/// [`millicores`] for a command-line flag.
pub fn cpu_flag(text: &str) -> Result<u64, String> {
    millicores(text).ok_or_else(|| format!("{text:?} is not a quantity of cores above zero (as 1 or 500m)"))
}

/// [`pids`] for a command-line flag.
pub fn pids_flag(text: &str) -> Result<u64, String> {
    pids(text).ok_or_else(|| format!("{text:?} is not a count above zero (as 4096)"))
}

/// Which cgroup interface a hierarchy speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// One cgroup hierarchy: where it is mounted, and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub root: PathBuf,
    pub version: Version,
}

impl Hierarchy {
    /// The hierarchies of this machine: the one v2 hierarchy when `/sys/fs/cgroup` is one, else every v1 hierarchy
    /// mounted beneath it (and a hybrid system's `unified`, which is v2 without controllers).
    pub fn discover() -> Vec<Hierarchy> {
        let root = Path::new("/sys/fs/cgroup");
        if root.join("cgroup.controllers").exists() {
            return vec![Hierarchy { root: root.to_path_buf(), version: Version::V2 }];
        }
        let mut found: Vec<Hierarchy> = std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| {
                let version = if e.path().join("cgroup.controllers").exists() { Version::V2 } else { Version::V1 };
                Hierarchy { root: e.path(), version }
            })
            .collect();
        found.sort_by(|a, b| a.root.cmp(&b.root));
        found
    }
}

/// What a tenant's directory gets, in order: file name and value. A file the hierarchy lacks is skipped.
pub fn files(share: &Share, version: Version) -> Vec<(&'static str, String)> {
    let memory = share.memory.clamp(1, MAX_MEMORY).to_string();
    let quota = share.cpu_quota_us();
    let pids = share.pids.clamp(1, MAX_PIDS).to_string();
    match version {
        Version::V1 => vec![
            // Always 1 on recent kernels; older ones need it before the directory has children.
            ("memory.use_hierarchy", "1".into()),
            ("memory.limit_in_bytes", memory.clone()),
            ("memory.memsw.limit_in_bytes", memory),
            ("cpu.cfs_period_us", CPU_PERIOD_US.to_string()),
            ("cpu.cfs_quota_us", quota.to_string()),
            ("cpu.shares", share.cpu_shares().to_string()),
            ("pids.max", pids),
        ],
        Version::V2 => vec![
            ("memory.max", memory),
            ("memory.swap.max", "0".into()),
            ("cpu.max", format!("{quota} {CPU_PERIOD_US}")),
            ("cpu.weight", share.cpu_weight().to_string()),
            ("pids.max", pids),
        ],
    }
}

/// A file of a tenant's directory the kernel did not take.
#[derive(Debug)]
pub struct Refused {
    pub file: PathBuf,
    pub error: std::io::Error,
}

/// Writes `files` into the cgroup directory `dir`, skipping those it lacks. What the kernel refuses is tried once
/// more after the others, since some limits must follow others (a v1 memory limit may not pass the memory-and-swap
/// limit, which is raised second); what it refuses again is returned.
pub fn write(dir: &Path, files: &[(&'static str, String)]) -> Vec<Refused> {
    let attempt = |name: &str, value: &str| -> Option<Refused> {
        let file = dir.join(name);
        if !file.exists() {
            return None;
        }
        // Opened for writing only, never created: a cgroup directory's files are the kernel's.
        let written = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, value.as_bytes()));
        written.err().map(|error| Refused { file, error })
    };
    let first: Vec<&(&str, String)> = files.iter().filter(|(name, value)| attempt(name, value).is_some()).collect();
    first.into_iter().filter_map(|(name, value)| attempt(name, value)).collect()
}

/// Removes the cgroup directory `dir` and every directory beneath it, deepest first (a cgroup directory goes with
/// `rmdir`, once it has no processes and no children); what cannot go stays.
pub fn remove_tree(dir: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(dir) else { return };
    if !meta.is_dir() {
        return;
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Where a pod's containers' cgroups go, and the share of its tenant, if it has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The pod's cgroup, relative to each hierarchy's root: `nest/<node tag>/<pod uid>`, or
    /// `nest/<node tag>/tenants/<tenant key>/<pod uid>`.
    pub cgroup: PathBuf,
    /// The tenant's key and share, for a tenant's pod.
    pub tenant: Option<(String, Share)>,
}

/// The tenants of one node: their directories in each hierarchy, and the pods placed in them.
pub struct Tenants {
    /// `nest/<node tag>`, relative to each hierarchy's root.
    node: PathBuf,
    hierarchies: Vec<Hierarchy>,
    defaults: Share,
    /// Each tenant with pods placed here, by tenant key; held while directories are made or removed.
    placed: Mutex<BTreeMap<String, Placed>>,
}

/// A tenant with pods on this node.
#[derive(Debug, Default)]
struct Placed {
    /// Its pods' UIDs.
    pods: BTreeSet<String>,
    /// The share its directories hold, once every file took it: an unchanged share is not written again (lowering a
    /// v1 memory limit makes the kernel reclaim at once).
    written: Option<Share>,
}

/// What no pod UID may be: the directory of the tenants, beside pods' cgroups.
const TENANTS: &str = "tenants";

/// The controllers a v2 tenant directory needs enabled above it.
const V2_CONTROLLERS: [&str; 3] = ["+memory", "+cpu", "+pids"];

impl Tenants {
    /// The tenants of the node whose cgroups are beneath `node` (relative to each of `hierarchies`), each given
    /// `defaults` unless its pods' annotations say otherwise.
    pub fn new(node: &Path, hierarchies: Vec<Hierarchy>, defaults: Share) -> Tenants {
        Tenants { node: node.to_path_buf(), hierarchies, defaults, placed: Mutex::new(BTreeMap::new()) }
    }

    /// `nest/<node tag>/tenants`, relative to each hierarchy's root.
    fn root(&self) -> PathBuf {
        self.node.join(TENANTS)
    }

    /// The tenant key of `pod` when it is a tenant's workload ([`TENANT_LABEL`] and [`SYNCED_ANNOTATION`]); refused
    /// when the key could not be one directory.
    pub fn tenant_of(pod: &Pod) -> Result<Option<&str>, PrepareError> {
        let Some(key) = pod.labels().get(TENANT_LABEL) else { return Ok(None) };
        if !pod.annotations().contains_key(SYNCED_ANNOTATION) {
            return Ok(None);
        }
        super::paths::name(key, &format!("label {TENANT_LABEL}")).map(Some)
    }

    /// Places `pod`: for a tenant's workload, makes its tenant's directory in every hierarchy (if missing) and
    /// writes the tenant's share from the pod's annotations into it; the pod is counted among the tenant's until
    /// [`Tenants::release`].
    pub fn place(&self, pod: &Pod) -> Result<Placement, PrepareError> {
        let uid = super::paths::name(pod.metadata.uid.as_deref().unwrap_or_default(), "pod uid")?;
        if uid == TENANTS {
            return Err(PrepareError::Config(format!("pod uid {uid:?} names the node's tenants")));
        }
        let Some(key) = Tenants::tenant_of(pod)? else {
            return Ok(Placement { cgroup: self.node.join(uid), tenant: None });
        };
        let share = Share::from_annotations(pod.annotations(), self.defaults);
        let relative = self.root().join(key);
        let mut placed = self.placed.lock().unwrap_or_else(|p| p.into_inner());
        let tenant = placed.entry(key.to_string()).or_default();
        tenant.pods.insert(uid.to_string());
        let placement = Placement { cgroup: relative.join(uid), tenant: Some((key.to_string(), share)) };
        // Its directories hold this share already (they are made before anything is written, and stay while it has
        // pods here): nothing to do, as for each look at a running pod.
        if tenant.written == Some(share) {
            return Ok(placement);
        }
        let mut refusals = 0;
        for hierarchy in &self.hierarchies {
            let dir = hierarchy.root.join(&relative);
            if let Err(error) = make(hierarchy, &relative) {
                // Without its directory in this hierarchy the runtime makes it, unlimited: the pod does not start.
                tenant.written = None;
                return Err(PrepareError::Config(format!("the cgroup of tenant {key} ({}): {error}", dir.display())));
            }
            for refused in write(&dir, &files(&share, hierarchy.version)) {
                refusals += 1;
                tracing::warn!(tenant = key, file = %refused.file.display(), error = %refused.error,
                               "setting a tenant's share");
            }
        }
        tenant.written = (refusals == 0).then_some(share);
        Ok(placement)
    }

    /// Removes pod `uid`'s cgroups wherever they are, and its tenant's directories when it was the tenant's last pod
    /// on this node.
    pub fn release(&self, uid: &str) {
        if uid == TENANTS {
            return;
        }
        for hierarchy in &self.hierarchies {
            remove_tree(&hierarchy.root.join(&self.node).join(uid));
        }
        let mut placed = self.placed.lock().unwrap_or_else(|p| p.into_inner());
        let key = placed.iter().find(|(_, tenant)| tenant.pods.contains(uid)).map(|(key, _)| key.clone());
        let tenant = key.map(|key| {
            let tenant = placed.entry(key.clone()).or_default();
            tenant.pods.remove(uid);
            let last = tenant.pods.is_empty();
            (key, last)
        });
        let keys: Vec<String> = match &tenant {
            Some((key, _)) => vec![key.clone()],
            // A pod this run did not place (left by an earlier one): wherever it is.
            None => self.leftover_keys(),
        };
        for key in &keys {
            for hierarchy in &self.hierarchies {
                remove_tree(&hierarchy.root.join(self.root()).join(key).join(uid));
            }
        }
        if let Some((key, true)) = tenant {
            placed.remove(&key);
            for hierarchy in &self.hierarchies {
                remove_tree(&hierarchy.root.join(self.root()).join(&key));
            }
        }
    }

    /// The tenant keys that have a directory in some hierarchy.
    fn leftover_keys(&self) -> Vec<String> {
        let mut keys = BTreeSet::new();
        for hierarchy in &self.hierarchies {
            for entry in std::fs::read_dir(hierarchy.root.join(self.root())).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    keys.insert(entry.file_name().to_string_lossy().into_owned());
                }
            }
        }
        keys.into_iter().collect()
    }

    /// Removes every tenant's directories (the node starts with no containers, or has stopped them all).
    pub fn remove_all(&self) {
        let mut placed = self.placed.lock().unwrap_or_else(|p| p.into_inner());
        placed.clear();
        for hierarchy in &self.hierarchies {
            remove_tree(&hierarchy.root.join(self.root()));
        }
    }
}

/// Makes the directory `relative` in `hierarchy`; in v2, with the tenant controllers enabled in every directory above
/// it (each one's `cgroup.subtree_control`; one the kernel refuses is left as it is).
fn make(hierarchy: &Hierarchy, relative: &Path) -> std::io::Result<()> {
    if hierarchy.version == Version::V2 {
        let mut at = hierarchy.root.clone();
        let parents: Vec<_> = relative.parent().map(|p| p.components().collect()).unwrap_or_default();
        for component in std::iter::once(None).chain(parents.into_iter().map(Some)) {
            if let Some(component) = component {
                at.push(component);
                create(&at)?;
            }
            let control = at.join("cgroup.subtree_control");
            if control.exists() {
                let enabled = std::fs::read_to_string(&control).unwrap_or_default();
                for controller in V2_CONTROLLERS {
                    if !enabled.split_whitespace().any(|c| c == &controller[1..]) {
                        let _ = std::fs::OpenOptions::new()
                            .write(true)
                            .truncate(true)
                            .open(&control)
                            .and_then(|mut f| std::io::Write::write_all(&mut f, controller.as_bytes()));
                    }
                }
            }
        }
    }
    std::fs::create_dir_all(hierarchy.root.join(relative))
}

fn create(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: serde_json::Value, annotations: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "0b6c1a6e-4f7e-4a55-9b59-5c1cbb0c1b8e",
                         "labels": labels, "annotations": annotations},
        }))
        .unwrap()
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_share_is_read_from_the_annotations_and_anything_unreadable_is_the_default_never_unlimited() {
        let defaults = Share { memory: 512 << 20, millicores: 2000, pids: 100 };
        assert_eq!(Share::from_annotations(&BTreeMap::new(), defaults), defaults);
        let set = annotations(&[(MEMORY_ANNOTATION, "1Gi"), (CPU_ANNOTATION, "250m"), (PIDS_ANNOTATION, "4k")]);
        assert_eq!(Share::from_annotations(&set, defaults), Share { memory: 1 << 30, millicores: 250, pids: 4000 });
        for bad in ["", "lots", "0", "-1Gi", "-0.5", "1.5.2", " ", "NaN", "max", "1 Gi"] {
            let set = annotations(&[(MEMORY_ANNOTATION, bad), (CPU_ANNOTATION, bad), (PIDS_ANNOTATION, bad)]);
            assert_eq!(Share::from_annotations(&set, defaults), defaults, "{bad:?}");
        }
        // Extremes are held at what the kernel holds; a sliver is the smallest there is.
        let huge = annotations(&[(MEMORY_ANNOTATION, "1e999"), (CPU_ANNOTATION, "1e999"), (PIDS_ANNOTATION, "1e999")]);
        let share = Share::from_annotations(&huge, defaults);
        assert_eq!((share.memory, share.millicores, share.pids), (MAX_MEMORY, MAX_MILLICORES, MAX_PIDS));
        let tiny = annotations(&[(MEMORY_ANNOTATION, "1n"), (CPU_ANNOTATION, "1n"), (PIDS_ANNOTATION, "1n")]);
        assert_eq!(Share::from_annotations(&tiny, defaults), Share { memory: 1, millicores: 10, pids: 1 });
        assert_eq!(memory("512Mi"), Some(512 << 20));
        assert_eq!(millicores("1.5"), Some(1500));
        assert_eq!(pids("4096"), Some(4096));
    }

    #[test]
    fn the_files_say_the_share_in_each_versions_words() {
        let share = Share { memory: 512 << 20, millicores: 1500, pids: 300 };
        let v1: BTreeMap<_, _> = files(&share, Version::V1).into_iter().collect();
        assert_eq!(v1["memory.limit_in_bytes"], "536870912");
        assert_eq!(v1["memory.memsw.limit_in_bytes"], "536870912");
        assert_eq!((v1["cpu.cfs_quota_us"].as_str(), v1["cpu.cfs_period_us"].as_str()), ("150000", "100000"));
        assert_eq!(v1["cpu.shares"], "1536");
        assert_eq!(v1["pids.max"], "300");
        let v2: BTreeMap<_, _> = files(&share, Version::V2).into_iter().collect();
        assert_eq!(v2["memory.max"], "536870912");
        assert_eq!(v2["memory.swap.max"], "0");
        assert_eq!(v2["cpu.max"], "150000 100000");
        assert_eq!(v2["cpu.weight"], (1 + (1536 - 2) * 9999 / 262142).to_string());
        assert_eq!(v2["pids.max"], "300");
        // The weight's ends are the kernel's.
        let least = Share { millicores: MIN_MILLICORES, ..share };
        let most = Share { millicores: MAX_MILLICORES, ..share };
        assert_eq!((least.cpu_weight(), most.cpu_weight()), (1, 10000));
        assert_eq!((least.cpu_quota_us(), most.cpu_quota_us()), (1000, 100_000_000_000));
    }

    /// A directory standing for a hierarchy: the tenant directory's files are made as the kernel would make them.
    fn hierarchy(version: Version, files: &[&str]) -> (tempfile::TempDir, Hierarchy, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let hierarchy = Hierarchy { root: dir.path().to_path_buf(), version };
        (dir, hierarchy, files.iter().map(|f| f.to_string()).collect())
    }

    fn prefill(hierarchy: &Hierarchy, relative: &Path, files: &[String]) {
        let dir = hierarchy.root.join(relative);
        std::fs::create_dir_all(&dir).unwrap();
        for file in files {
            std::fs::write(dir.join(file), "").unwrap();
        }
    }

    #[test]
    fn a_tenants_pods_go_beneath_its_directory_which_gets_its_share_and_goes_with_its_last_pod() {
        let (_v1, memory, memory_files) = hierarchy(Version::V1, &["memory.limit_in_bytes", "memory.use_hierarchy"]);
        let (_v1b, pids_h, pids_files) = hierarchy(Version::V1, &["pids.max"]);
        let node = Path::new("nest/0000abcd");
        let tenant_dir = node.join("tenants/default-bahrq-demo");
        prefill(&memory, &tenant_dir, &memory_files);
        prefill(&pids_h, &tenant_dir, &pids_files);
        let defaults = Share { memory: 512 << 20, millicores: 1000, pids: 64 };
        let tenants = Tenants::new(node, vec![memory.clone(), pids_h.clone()], defaults);

        let labels = serde_json::json!({TENANT_LABEL: "default-bahrq-demo"});
        let synced = serde_json::json!({SYNCED_ANNOTATION: "u", PIDS_ANNOTATION: "128"});
        let workload = pod(labels.clone(), synced);
        let placed = tenants.place(&workload).unwrap();
        assert_eq!(placed.cgroup, tenant_dir.join("0b6c1a6e-4f7e-4a55-9b59-5c1cbb0c1b8e"));
        assert_eq!(placed.tenant, Some(("default-bahrq-demo".into(), Share { pids: 128, ..defaults })));
        let read = |h: &Hierarchy, file: &str| std::fs::read_to_string(h.root.join(&tenant_dir).join(file)).unwrap();
        assert_eq!(read(&memory, "memory.limit_in_bytes"), "536870912");
        assert_eq!(read(&memory, "memory.use_hierarchy"), "1");
        assert_eq!(read(&pids_h, "pids.max"), "128");
        assert!(!memory.root.join(&tenant_dir).join("pids.max").exists(), "a file the hierarchy lacks is not made");

        // The same share again is not written again; another is.
        std::fs::write(memory.root.join(&tenant_dir).join("memory.limit_in_bytes"), "").unwrap();
        tenants.place(&workload).unwrap();
        assert_eq!(read(&memory, "memory.limit_in_bytes"), "");
        let more = pod(
            serde_json::json!({TENANT_LABEL: "default-bahrq-demo"}),
            serde_json::json!({SYNCED_ANNOTATION: "u", MEMORY_ANNOTATION: "1Gi"}),
        );
        tenants.place(&more).unwrap();
        assert_eq!(read(&memory, "memory.limit_in_bytes"), "1073741824");

        // The provider's control-plane pods and the platform's own stay beneath the node, as before.
        let control_plane = pod(labels, serde_json::json!({}));
        assert_eq!(tenants.place(&control_plane).unwrap().cgroup, node.join("0b6c1a6e-4f7e-4a55-9b59-5c1cbb0c1b8e"));
        let platform = pod(serde_json::json!({}), serde_json::json!({SYNCED_ANNOTATION: "u"}));
        assert_eq!(tenants.place(&platform).unwrap().tenant, None);
        // A key that could climb is refused.
        let climbing = pod(serde_json::json!({TENANT_LABEL: ".."}), serde_json::json!({SYNCED_ANNOTATION: "u"}));
        assert!(tenants.place(&climbing).is_err());

        // Its last pod gone, the tenant's (now empty) directories go.
        for h in [&memory, &pids_h] {
            for file in std::fs::read_dir(h.root.join(&tenant_dir)).unwrap() {
                std::fs::remove_file(file.unwrap().path()).unwrap();
            }
            std::fs::create_dir_all(h.root.join(&placed.cgroup).join("container")).unwrap();
        }
        tenants.release("0b6c1a6e-4f7e-4a55-9b59-5c1cbb0c1b8e");
        assert!(!memory.root.join(&tenant_dir).exists() && !pids_h.root.join(&tenant_dir).exists());
        assert!(memory.root.join(node).join("tenants").exists());
    }

    #[test]
    fn a_tenants_directory_stays_while_another_of_its_pods_is_placed() {
        let (_dir, h, _) = hierarchy(Version::V1, &[]);
        let node = Path::new("nest/0000abcd");
        let tenants = Tenants::new(node, vec![h.clone()], Share::default());
        let of = |uid: &str| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": uid, "uid": uid,
                "labels": {TENANT_LABEL: "t"}, "annotations": {SYNCED_ANNOTATION: "x"}}}))
            .unwrap()
        };
        tenants.place(&of("a")).unwrap();
        tenants.place(&of("b")).unwrap();
        tenants.release("a");
        assert!(h.root.join(node).join("tenants/t").is_dir());
        tenants.release("b");
        assert!(!h.root.join(node).join("tenants/t").exists());
    }

    #[test]
    fn v2_enables_the_controllers_above_the_tenant_and_writes_its_files() {
        let (_dir, h, _) = hierarchy(Version::V2, &[]);
        let node = Path::new("nest/0000abcd");
        std::fs::write(h.root.join("cgroup.subtree_control"), "cpu").unwrap();
        let tenant_dir = node.join("tenants/t");
        prefill(&h, &tenant_dir, &["memory.max".into(), "cpu.max".into(), "cpu.weight".into(), "pids.max".into()]);
        for above in [Path::new("nest"), node, &node.join("tenants")] {
            std::fs::write(h.root.join(above).join("cgroup.subtree_control"), "").unwrap();
        }
        let tenants = Tenants::new(node, vec![h.clone()], Share { memory: 1 << 30, millicores: 500, pids: 10 });
        let workload: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "p", "uid": "u",
            "labels": {TENANT_LABEL: "t"}, "annotations": {SYNCED_ANNOTATION: "x"}}}))
        .unwrap();
        tenants.place(&workload).unwrap();
        let read = |p: &Path| std::fs::read_to_string(h.root.join(p)).unwrap();
        assert_eq!(read(&tenant_dir.join("memory.max")), "1073741824");
        assert_eq!(read(&tenant_dir.join("cpu.max")), "50000 100000");
        assert_eq!(read(&tenant_dir.join("pids.max")), "10");
        assert!(!h.root.join(&tenant_dir).join("memory.swap.max").exists());
        // A plain file keeps only the last write; the kernel's takes each. `cpu` was enabled at the root already.
        assert_eq!(read(Path::new("cgroup.subtree_control")), "+pids");
        assert_eq!(read(&node.join("tenants/cgroup.subtree_control")), "+pids");
    }

    #[test]
    fn what_the_kernel_refuses_first_is_tried_again_after_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "").unwrap();
        // A directory stands for a file that refuses writes.
        std::fs::create_dir(dir.path().join("refuses")).unwrap();
        let refused = write(dir.path(), &[("refuses", "1".into()), ("a", "2".into()), ("absent", "3".into())]);
        assert_eq!(refused.len(), 1);
        assert!(refused[0].file.ends_with("refuses"));
        assert_eq!(std::fs::read_to_string(dir.path().join("a")).unwrap(), "2");
        assert!(!dir.path().join("absent").exists());
    }
}
