//! Local storage, limited as the kubelet's eviction manager limits it (`localStorageEviction`,
//! `pkg/kubelet/eviction/eviction_manager.go`, 1.33): measured, and a pod over a limit evicted.
//!
//! Every [`PERIOD`] each running pod that has a limit is measured: each `emptyDir` against its `sizeLimit`, the pod's
//! whole ephemeral storage (its `emptyDir`s, its containers' writable layers and logs) against the sum of its
//! containers' `ephemeral-storage` limits, each container's writable layer and logs against its own limit (as the
//! kubelet counts a container's `rootfs` and `logs` usage; a container of a host executable has no writable layer: its
//! root is read-only and its `/tmp` memory), and, nest's own, each `persistentVolumeClaim` against the claim's
//! capacity: a claim's directory is a plain directory, which nothing else keeps at its size. The first limit passed, in
//! that order, evicts the pod as the kubelet does: an `Evicted` Event with upstream's message, the pod `Failed` with
//! reason `Evicted`, its processes stopped within [`EVICTION_GRACE`], and its `emptyDir`s emptied (what filled the
//! disk is given back; a claim's files are the claim's and stay).
//!
//! Measuring is bounded, since a tenant can make millions of files: the blocks files hold on disk (`st_blocks`, as
//! `du` counts them: a sparse file counts what it holds, a hard-linked file once), never across a mount or through a
//! symbolic link, and at most [`MAX_ENTRIES`] entries a volume. A volume with more, or with a path the walk cannot
//! follow (deeper than the kernel's longest path), counts as over its limit: what cannot be measured is not trusted.
//!
//! A loop-mounted filesystem image per claim would be a hard limit, and this machine has `mkfs.ext4` and `losetup`;
//! it was not chosen: a loop device and a mount per claim that must outlive crashes of the node, a filesystem made
//! for each claim (a tenant's `100Ti` claim would cost metadata on the host's disk), and data of existing claims to
//! move.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::prepare::PrepareError;

/// How often running pods' storage is measured (the kubelet's eviction manager's housekeeping interval).
pub const PERIOD: Duration = Duration::from_secs(10);
/// The most entries (files, directories, links) of one volume measured; a volume with more counts as over its limit.
pub const MAX_ENTRIES: u64 = 250_000;
/// The grace period of an evicted pod (the kubelet's `immediateEvictionGracePeriodSeconds`).
pub const EVICTION_GRACE: Duration = Duration::from_secs(1);
/// The pod's status reason, and the Event's, when a pod is evicted (the kubelet's `eviction.Reason`).
pub const REASON: &str = "Evicted";

/// A storage limit: bytes, and the quantity as the pod's spec (or claim) gives it, for the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
    pub text: String,
}

impl Limit {
    /// The limit `text` says, when it is a quantity above zero (upstream ignores a zero limit).
    pub fn parse(text: &str) -> Option<Limit> {
        let value = nest_core::quantity::value(text)?;
        // Rounded down: a limit of half a byte is passed by any byte.
        (value >= 1.0).then(|| Limit { bytes: value as u64, text: text.to_string() })
    }
}

/// One `emptyDir` volume of the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmptyDir {
    pub name: String,
    pub dir: PathBuf,
    /// `sizeLimit`.
    pub limit: Option<Limit>,
}

/// One `persistentVolumeClaim` volume of the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The volume's name.
    pub volume: String,
    /// `claimName`.
    pub claim: String,
    pub dir: PathBuf,
    /// The claim's capacity (`status.capacity.storage`).
    pub capacity: Limit,
}

/// One container's own storage: its logs (every run's) and its writable layer ([`super::layer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logs {
    pub container: String,
    pub dir: PathBuf,
    /// The writable layer's directory (missing for a container without one: it then holds nothing).
    pub layer: PathBuf,
    /// `resources.limits.ephemeral-storage`.
    pub limit: Option<Limit>,
}

/// What of a pod's storage is limited, and where it lives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub empty_dirs: Vec<EmptyDir>,
    pub claims: Vec<Claim>,
    /// The containers' logs, init containers' too.
    pub logs: Vec<Logs>,
    /// The pod's whole ephemeral storage: the containers' limits summed (the larger of that and any init
    /// container's), as upstream's `PodLimits`; set when any container has one.
    pub pod: Option<Limit>,
}

impl Limits {
    /// The limits of `pod`, whose files are in `pod_dir` and whose claims are in `claims_dir`; `capacities` holds the
    /// capacity of each claim the pod names (by claim name).
    pub fn of(
        pod: &Pod,
        pod_dir: &Path,
        claims_dir: &Path,
        capacities: &BTreeMap<String, Limit>,
    ) -> Result<Limits, PrepareError> {
        let spec = pod.spec.clone().unwrap_or_default();
        let mut limits = Limits::default();
        for volume in spec.volumes.iter().flatten() {
            if let Some(empty) = &volume.empty_dir {
                limits.empty_dirs.push(EmptyDir {
                    name: volume.name.clone(),
                    dir: super::prepare::volume_dir(pod, volume, pod_dir, claims_dir)?,
                    limit: empty.size_limit.as_ref().and_then(|q| Limit::parse(&q.0)),
                });
            } else if let Some(source) = &volume.persistent_volume_claim {
                let capacity = capacities.get(&source.claim_name).cloned().ok_or_else(|| PrepareError::Mount {
                    volume: volume.name.clone(),
                    message: format!("persistentvolumeclaim {:?} has no capacity", source.claim_name),
                })?;
                limits.claims.push(Claim {
                    volume: volume.name.clone(),
                    claim: source.claim_name.clone(),
                    dir: super::prepare::volume_dir(pod, volume, pod_dir, claims_dir)?,
                    capacity,
                });
            }
        }
        let limit_of = |c: &k8s_openapi::api::core::v1::Container| {
            let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
            limits.and_then(|l| l.get("ephemeral-storage")).and_then(|q| Limit::parse(&q.0))
        };
        let mut sum: Option<u64> = None;
        let mut texts = Vec::new();
        for container in &spec.containers {
            if let Some(limit) = limit_of(container) {
                sum = Some(sum.unwrap_or(0).saturating_add(limit.bytes));
                texts.push(limit.text);
            }
        }
        let mut largest_init: Option<Limit> = None;
        for container in spec.init_containers.iter().flatten() {
            if let Some(limit) = limit_of(container)
                && largest_init.as_ref().is_none_or(|l| l.bytes < limit.bytes)
            {
                largest_init = Some(limit);
            }
        }
        limits.pod = match (sum, largest_init) {
            (Some(sum), Some(init)) if init.bytes > sum => Some(init),
            (None, init) => init,
            // One container's limit is said as its spec says it; a sum as a quantity of bytes.
            (Some(sum), _) if texts.len() == 1 => Some(Limit { bytes: sum, text: texts.remove(0) }),
            (Some(sum), _) => Some(Limit { bytes: sum, text: bytes_quantity(sum) }),
        };
        for container in spec.init_containers.iter().flatten().chain(&spec.containers) {
            let Ok(name) = super::paths::name(&container.name, "container name") else { continue };
            limits.logs.push(Logs {
                container: name.to_string(),
                dir: pod_dir.join("logs").join(name),
                layer: super::layer::dir(pod_dir, name),
                limit: limit_of(container),
            });
        }
        Ok(limits)
    }

    /// Whether anything of the pod is limited (else it is not measured).
    pub fn any(&self) -> bool {
        self.pod.is_some()
            || !self.claims.is_empty()
            || self.empty_dirs.iter().any(|e| e.limit.is_some())
            || self.logs.iter().any(|l| l.limit.is_some())
    }
}

/// `bytes` as a quantity: with the largest binary suffix that says it exactly, as `resource.Quantity` prints a
/// binary quantity.
fn bytes_quantity(bytes: u64) -> String {
    let suffixes = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut value = bytes;
    let mut at = 0;
    while value != 0 && value.is_multiple_of(1024) && at + 1 < suffixes.len() {
        value /= 1024;
        at += 1;
    }
    format!("{value}{}", suffixes[at])
}

/// What a directory holds on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of the blocks its files and directories hold.
    pub bytes: u64,
    /// Entries walked.
    pub entries: u64,
    /// The walk stopped before the end: more than its entries allowed, or a path it could not follow. Counts as over
    /// any limit.
    pub incomplete: bool,
}

impl Usage {
    /// Whether this usage passes `limit` (an incomplete measure always does).
    pub fn over(&self, limit: &Limit) -> bool {
        self.incomplete || self.bytes > limit.bytes
    }

    fn add(&mut self, other: Usage) {
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.entries = self.entries.saturating_add(other.entries);
        self.incomplete |= other.incomplete;
    }
}

/// Measures `dir`: the blocks of everything beneath it (a hard-linked file once), not beyond a mount, not through a
/// link, at most `max_entries` entries. A missing `dir` holds nothing.
pub fn measure(dir: &Path, max_entries: u64) -> Usage {
    let mut usage = Usage::default();
    let top = match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => meta,
        Ok(_) => return usage,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return usage,
        Err(_) => return Usage { incomplete: true, ..usage },
    };
    usage.bytes = top.blocks().saturating_mul(512);
    let mut linked = HashSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let entries = match std::fs::read_dir(&at) {
            Ok(entries) => entries,
            // Removed while the walk went on: it holds nothing now.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return Usage { incomplete: true, ..usage },
        };
        for entry in entries {
            usage.entries += 1;
            if usage.entries > max_entries {
                return Usage { incomplete: true, ..usage };
            }
            // `DirEntry::metadata` does not follow a symbolic link.
            let meta = match entry.and_then(|e| e.metadata().map(|m| (e.path(), m))) {
                Ok(found) => found,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => return Usage { incomplete: true, ..usage },
            };
            let (path, meta) = meta;
            if meta.dev() != top.dev() {
                continue;
            }
            if !meta.is_dir() && meta.nlink() > 1 && !linked.insert(meta.ino()) {
                continue;
            }
            usage.bytes = usage.bytes.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                pending.push(path);
            }
        }
    }
    usage
}

/// Why the pod must be evicted, in upstream's words, measuring each directory with `measure`; `None` when it is
/// within every limit. Checked in upstream's order (`emptyDir`s, the pod, each container), then claims.
pub fn verdict(limits: &Limits, mut measure: impl FnMut(&Path) -> Usage) -> Option<String> {
    let mut cache: BTreeMap<PathBuf, Usage> = BTreeMap::new();
    let mut usage = |dir: &Path| *cache.entry(dir.to_path_buf()).or_insert_with(|| measure(dir));
    for empty in &limits.empty_dirs {
        if let Some(limit) = &empty.limit
            && usage(&empty.dir).over(limit)
        {
            return Some(format!("Usage of EmptyDir volume {:?} exceeds the limit {:?}. ", empty.name, limit.text));
        }
    }
    if let Some(limit) = &limits.pod {
        let mut total = Usage::default();
        let containers = limits.logs.iter().flat_map(|l| [&l.dir, &l.layer]);
        for dir in limits.empty_dirs.iter().map(|e| &e.dir).chain(containers) {
            total.add(usage(dir));
        }
        if total.over(limit) {
            return Some(format!(
                "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                limit.text
            ));
        }
    }
    for logs in &limits.logs {
        if let Some(limit) = &logs.limit
            && {
                let mut own = usage(&logs.dir);
                own.add(usage(&logs.layer));
                own.over(limit)
            }
        {
            return Some(format!(
                "Container {} exceeded its local ephemeral storage limit {:?}. ",
                logs.container, limit.text
            ));
        }
    }
    for claim in &limits.claims {
        if usage(&claim.dir).over(&claim.capacity) {
            return Some(format!(
                "Usage of PersistentVolumeClaim volume {:?} (claim {:?}) exceeds the claim's capacity {:?}. ",
                claim.volume, claim.claim, claim.capacity.text
            ));
        }
    }
    None
}

/// The capacity of `claim` for [`Limits`]: its `status.capacity.storage` (the volume it is bound to), else what it
/// requested.
pub fn capacity(claim: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> Option<Limit> {
    let status = claim.status.as_ref().and_then(|s| s.capacity.as_ref()).and_then(|c| c.get("storage"));
    let requested = || {
        let resources = claim.spec.as_ref().and_then(|s| s.resources.as_ref());
        resources.and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage"))
    };
    status.or_else(requested).and_then(|q| Limit::parse(&q.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "p", "namespace": "n", "uid": "u"}, "spec": spec}),
        )
        .unwrap()
    }

    fn limit(text: &str) -> Limit {
        Limit::parse(text).unwrap()
    }

    #[test]
    fn limits_are_read_from_the_spec_as_upstream_reads_them() {
        let pod = pod(serde_json::json!({
            "initContainers": [{"name": "init", "resources": {"limits": {"ephemeral-storage": "5Mi"}}}],
            "containers": [
                {"name": "a", "resources": {"limits": {"ephemeral-storage": "1Mi"}}},
                {"name": "b", "resources": {"limits": {"ephemeral-storage": "2Mi"}}},
                {"name": "c"},
            ],
            "volumes": [
                {"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}},
                {"name": "cache", "emptyDir": {}},
                {"name": "zero", "emptyDir": {"sizeLimit": "0"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "db"}},
                {"name": "config", "configMap": {"name": "x"}},
            ],
        }));
        let capacities = BTreeMap::from([("db".to_string(), limit("1Gi"))]);
        let limits = Limits::of(&pod, Path::new("/p"), Path::new("/c"), &capacities).unwrap();
        assert_eq!(limits.empty_dirs.len(), 3);
        assert_eq!(limits.empty_dirs[0].limit, Some(limit("1Mi")));
        assert_eq!(limits.empty_dirs[0].dir, Path::new("/p/volumes/scratch"));
        assert_eq!(limits.empty_dirs[1].limit, None);
        assert_eq!(limits.empty_dirs[2].limit, None, "a zero limit is no limit, as upstream's Sign() == 1");
        assert_eq!(limits.claims[0].dir, Path::new("/c/n/db"));
        assert_eq!(limits.claims[0].capacity.bytes, 1 << 30);
        // The containers' limits summed (3Mi), unless an init container's is larger (5Mi).
        assert_eq!(limits.pod, Some(limit("5Mi")));
        assert_eq!(limits.logs.iter().map(|l| l.container.as_str()).collect::<Vec<_>>(), ["init", "a", "b", "c"]);
        assert_eq!(limits.logs[1].dir, Path::new("/p/logs/a"));
        assert_eq!(limits.logs[1].layer, Path::new("/p/layers/a"));
        assert!(limits.any());
        let missing = Limits::of(&pod, Path::new("/p"), Path::new("/c"), &BTreeMap::new()).unwrap_err();
        assert!(matches!(missing, PrepareError::Mount { .. }), "{missing}");

        let summed = Limits::of(
            &self::pod(serde_json::json!({"containers": [
                {"name": "a", "resources": {"limits": {"ephemeral-storage": "1Mi"}}},
                {"name": "b", "resources": {"limits": {"ephemeral-storage": "2Mi"}}},
            ]})),
            Path::new("/p"),
            Path::new("/c"),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(summed.pod, Some(Limit { bytes: 3 << 20, text: "3Mi".into() }));
        let unlimited = Limits::of(
            &self::pod(serde_json::json!({"containers": [{"name": "a"}], "volumes": [{"name": "e", "emptyDir": {}}]})),
            Path::new("/p"),
            Path::new("/c"),
            &BTreeMap::new(),
        )
        .unwrap();
        assert!(!unlimited.any(), "nothing limited is not measured");
        assert_eq!(bytes_quantity(1536), "1536");
        assert_eq!(bytes_quantity(0), "0");
    }

    fn used(bytes: u64) -> Usage {
        Usage { bytes, entries: 1, incomplete: false }
    }

    #[test]
    fn the_first_limit_passed_evicts_in_upstreams_words_and_order() {
        let limits = Limits {
            empty_dirs: vec![
                EmptyDir { name: "scratch".into(), dir: "/e/scratch".into(), limit: Some(limit("1Mi")) },
                EmptyDir { name: "cache".into(), dir: "/e/cache".into(), limit: None },
            ],
            claims: vec![Claim {
                volume: "data".into(),
                claim: "db".into(),
                dir: "/c/db".into(),
                capacity: limit("1Gi"),
            }],
            logs: vec![Logs {
                container: "app".into(),
                dir: "/l/app".into(),
                layer: "/w/app".into(),
                limit: Some(limit("2Mi")),
            }],
            pod: Some(limit("2Mi")),
        };
        let judge = |sizes: &[(&str, Usage)]| {
            let sizes: BTreeMap<PathBuf, Usage> = sizes.iter().map(|(p, u)| (PathBuf::from(p), *u)).collect();
            verdict(&limits, |dir| sizes.get(dir).copied().unwrap_or_default())
        };
        assert_eq!(judge(&[("/e/scratch", used(1 << 20)), ("/c/db", used(1 << 30))]), None, "at the limit is within");
        assert_eq!(
            judge(&[("/e/scratch", used((1 << 20) + 1)), ("/l/app", used(1 << 30))]).unwrap(),
            "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "
        );
        assert_eq!(
            judge(&[("/e/cache", used(1 << 20)), ("/l/app", used((1 << 20) + 1))]).unwrap(),
            "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. "
        );
        let limits_without_pod = Limits { pod: None, ..limits.clone() };
        let container =
            verdict(&limits_without_pod, |dir| if dir == Path::new("/l/app") { used(3 << 20) } else { used(0) });
        assert_eq!(container.unwrap(), "Container app exceeded its local ephemeral storage limit \"2Mi\". ");
        // A container's writable layer counts with its logs, against its own limit and the pod's.
        let written = |dir: &Path| match dir.to_str() {
            Some("/w/app") => used(7 << 18),
            Some("/l/app") => used(1 << 19),
            _ => used(0),
        };
        assert_eq!(
            verdict(&limits_without_pod, written).unwrap(),
            "Container app exceeded its local ephemeral storage limit \"2Mi\". "
        );
        assert!(verdict(&limits, written).unwrap().starts_with("Pod ephemeral local storage usage exceeds"));
        assert_eq!(verdict(&limits, |dir| if dir == Path::new("/w/app") { used(1 << 20) } else { used(0) }), None);
        assert_eq!(
            judge(&[("/c/db", used((1 << 30) + 4096))]).unwrap(),
            "Usage of PersistentVolumeClaim volume \"data\" (claim \"db\") exceeds the claim's capacity \"1Gi\". "
        );
        // A walk cut short is over any limit, even with few bytes counted.
        let cut = Usage { bytes: 10, entries: MAX_ENTRIES + 1, incomplete: true };
        assert!(judge(&[("/c/db", cut)]).unwrap().contains("PersistentVolumeClaim"));
        // Each directory is measured once a verdict.
        let mut measured = Vec::new();
        verdict(&limits, |dir| {
            measured.push(dir.to_path_buf());
            used(0)
        });
        let unique: HashSet<_> = measured.iter().collect();
        assert_eq!(unique.len(), measured.len(), "{measured:?}");
    }

    #[test]
    fn measuring_counts_blocks_on_disk_once_and_stops_at_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/data"), vec![7u8; 1 << 20]).unwrap();
        // A hard link holds no more; a sparse file holds what it wrote; a link to elsewhere is not followed.
        std::fs::hard_link(root.join("a/b/data"), root.join("a/again")).unwrap();
        let sparse = std::fs::File::create(root.join("sparse")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        std::os::unix::fs::symlink("/usr", root.join("usr")).unwrap();
        let usage = measure(root, MAX_ENTRIES);
        assert!(!usage.incomplete);
        assert!(usage.bytes >= 1 << 20 && usage.bytes < (1 << 20) + 64 * 1024, "{usage:?}");
        assert_eq!(usage.entries, 6);
        for i in 0..20 {
            std::fs::write(root.join(format!("f{i}")), b"").unwrap();
        }
        let bounded = measure(root, 10);
        assert!(bounded.incomplete && bounded.entries == 11, "{bounded:?}");
        assert!(bounded.over(&limit("1Gi")));
        assert_eq!(measure(&root.join("missing"), 10), Usage::default());
    }

    #[test]
    fn a_claims_capacity_is_its_volumes_else_its_request() {
        let claim = |value: serde_json::Value| -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
            serde_json::from_value(value).unwrap()
        };
        let bound = claim(serde_json::json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}},
                                             "status": {"capacity": {"storage": "2Gi"}}}));
        assert_eq!(capacity(&bound), Some(limit("2Gi")));
        let pending = claim(serde_json::json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}}));
        assert_eq!(capacity(&pending), Some(limit("1Gi")));
        assert_eq!(capacity(&claim(serde_json::json!({"spec": {}}))), None);
    }
}
