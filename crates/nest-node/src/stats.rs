//! Resource statistics from the sandboxes, as the kubelet serves them on its port: `GET /stats/summary` (the Summary
//! API, `k8s.io/kubelet/pkg/apis/stats/v1alpha1`, v1.33: the node, and each pod and container with CPU, memory and
//! the writable layer's disk) and `GET /metrics/resource` (Prometheus text, the metrics of
//! `pkg/kubelet/metrics/collectors/resource_metrics.go`). metrics-server reads the second, `kubectl top` the API
//! it serves; both stay out of nest for now.
//!
//! - **Where the numbers come from.** Each container's cgroup (its pod's is the parent), read when asked: cgroup v2's
//!   `cpu.stat` (`usage_usec`), `memory.current` and `memory.stat`, or v1's `cpuacct.usage`,
//!   `memory.usage_in_bytes` and `memory.stat` (`total_*`). The working set is usage less `inactive_file`, as
//!   cAdvisor computes it (`setMemoryStats`), never below zero; `rssBytes` is `anon` (v1: `total_rss`). The node's
//!   are the machine's, from `/proc/stat` and `/proc/meminfo`, as the kubelet reports its root cgroup; its `fs` is
//!   the file system of the node's data directory. A container's `rootfs.usedBytes` is what its writable layer's
//!   upper directory holds ([`crate::process::layer`]), measured as `ephemeral-storage` is, at most once a
//!   [`crate::process::storage::PERIOD`] ([`Sizes`]): a tenant's millions of files cost one walk a period, however
//!   often the node is scraped.
//! - **Rates.** `usageNanoCores` is the rate since the previous read of the same cgroup ([`Rates`]); a cgroup read
//!   for the first time is read twice, [`FIRST_SAMPLE`] apart, so every answer has it. Nothing runs between
//!   requests: an idle node pays nothing for this.
//! - **Who may.** The kubelet port answers only the API server's kubelet-client certificate
//!   ([`nest_kubelet_server`]), which upstream's API server holds with `nodes/stats` and `nodes/metrics` (the
//!   `system:kubelet-api-admin` role); nothing else reaches these paths.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::process::storage;
use crate::process::tenants::{Hierarchy, Version};

/// How far apart the two reads of a cgroup seen for the first time are, for its CPU rate.
pub const FIRST_SAMPLE: Duration = Duration::from_millis(100);

/// Limits in cgroup v1 at or above this are "no limit" (the kernel writes its page-rounded `i64::MAX`).
const V1_UNLIMITED: u64 = 1 << 62;

/// The cgroup hierarchies the statistics are read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// The one v2 hierarchy, mounted at this root.
    V2(PathBuf),
    /// v1: the `memory` and `cpuacct` hierarchies' roots.
    V1 { memory: PathBuf, cpuacct: PathBuf },
}

impl Layout {
    /// This machine's, from the hierarchies the sandboxes use; `None` without a v2 hierarchy with controllers nor
    /// v1 `memory` and `cpuacct` hierarchies.
    pub fn discover() -> Option<Layout> {
        Layout::of(&Hierarchy::discover())
    }

    fn of(hierarchies: &[Hierarchy]) -> Option<Layout> {
        if let [only] = hierarchies
            && only.version == Version::V2
        {
            return Some(Layout::V2(only.root.clone()));
        }
        let v1 = |name: &str| {
            hierarchies.iter().find(|h| h.version == Version::V1 && h.root.file_name().is_some_and(|n| n == name))
        };
        // `cpu,cpuacct` where the two are mounted together: either name's directory reaches it.
        let cpuacct = v1("cpuacct").or_else(|| v1("cpu,cpuacct"))?;
        Some(Layout::V1 { memory: v1("memory")?.root.clone(), cpuacct: cpuacct.root.clone() })
    }

    /// What cgroup `cgroup` (relative to each hierarchy's root) has used.
    pub fn read(&self, cgroup: &Path) -> Result<Usage, String> {
        let read = |path: PathBuf| std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()));
        match self {
            Layout::V2(root) => {
                let dir = root.join(cgroup);
                let cpu_stat = read(dir.join("cpu.stat"))?;
                let cpu = keyed(&cpu_stat);
                let stat = read(dir.join("memory.stat"))?;
                let current = number(&read(dir.join("memory.current"))?, "memory.current")?;
                let limit = read(dir.join("memory.max")).ok().and_then(|t| t.trim().parse().ok());
                let usage_usec = cpu.get("usage_usec").copied().ok_or("cpu.stat without usage_usec".to_string())?;
                Ok(Usage {
                    cpu_nanoseconds: usage_usec.saturating_mul(1000),
                    memory: Memory::of(
                        current,
                        &keyed(&stat),
                        ["inactive_file", "anon", "pgfault", "pgmajfault"],
                        limit,
                    ),
                })
            }
            Layout::V1 { memory, cpuacct } => {
                let cpu = number(&read(cpuacct.join(cgroup).join("cpuacct.usage"))?, "cpuacct.usage")?;
                let dir = memory.join(cgroup);
                let usage = number(&read(dir.join("memory.usage_in_bytes"))?, "memory.usage_in_bytes")?;
                let limit = read(dir.join("memory.limit_in_bytes")).ok().and_then(|t| t.trim().parse().ok());
                let limit = limit.filter(|l| *l < V1_UNLIMITED);
                let stat_text = read(dir.join("memory.stat"))?;
                let stat = keyed(&stat_text);
                let names = ["total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"];
                Ok(Usage { cpu_nanoseconds: cpu, memory: Memory::of(usage, &stat, names, limit) })
            }
        }
    }
}

/// A flat keyed file (`memory.stat`, `cpu.stat`): `name value` per line; lines that are not are skipped.
fn keyed(text: &str) -> HashMap<&str, u64> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            Some((key, value.trim().parse().ok()?))
        })
        .collect()
}

/// A file holding one number.
fn number(text: &str, file: &str) -> Result<u64, String> {
    text.trim().parse().map_err(|_| format!("{file} holds {:?}, not a number", text.trim()))
}

/// What a cgroup has used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// CPU time, all cores together, since the cgroup was made.
    pub cpu_nanoseconds: u64,
    pub memory: Memory,
}

/// A cgroup's memory, as the Summary API's `MemoryStats` has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    /// All of it, page cache included (`memory.current`, v1 `memory.usage_in_bytes`).
    pub usage: u64,
    /// Usage less inactive file pages: what the kubelet evicts on and metrics-server reports.
    pub working_set: u64,
    /// Anonymous memory.
    pub rss: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// The cgroup's limit, if it has one.
    pub limit: Option<u64>,
}

impl Memory {
    /// `usage` with `memory.stat`'s entries named `[inactive file, rss, page faults, major page faults]`.
    fn of(usage: u64, stat: &HashMap<&str, u64>, names: [&str; 4], limit: Option<u64>) -> Memory {
        let get = |name: &str| stat.get(name).copied().unwrap_or(0);
        Memory {
            usage,
            working_set: usage.saturating_sub(get(names[0])),
            rss: get(names[1]),
            page_faults: get(names[2]),
            major_page_faults: get(names[3]),
            limit,
        }
    }

    /// As the Summary API writes it, at `time`.
    fn to_json(self, time: &str) -> Value {
        let mut memory = json!({
            "time": time, "usageBytes": self.usage, "workingSetBytes": self.working_set, "rssBytes": self.rss,
            "pageFaults": self.page_faults, "majorPageFaults": self.major_page_faults,
        });
        if let Some(limit) = self.limit {
            memory["availableBytes"] = json!(limit.saturating_sub(self.working_set));
        }
        memory
    }
}

/// The last CPU reading of each cgroup, for rates between reads. Only the cgroups of the latest read are kept, so
/// it holds no more than the node runs.
#[derive(Debug, Default)]
pub struct Rates {
    last: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Rates {
    /// Whether `key` has a reading to compute a rate from.
    pub fn knows(&self, key: &str) -> bool {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).contains_key(key)
    }

    /// The rate in nanocores of `key` since its last reading (`None` without one, or when its counter went back: a
    /// new cgroup of the same name), and `cpu_nanoseconds` at `at` kept as its reading.
    pub fn rate(&self, key: &str, at: Instant, cpu_nanoseconds: u64) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let before = last.insert(key.to_string(), (at, cpu_nanoseconds))?;
        let elapsed = at.checked_duration_since(before.0)?.as_nanos();
        let used = u128::from(cpu_nanoseconds.checked_sub(before.1)?);
        let rate = used.checked_mul(1_000_000_000)?.checked_div(elapsed)?;
        u64::try_from(rate).ok()
    }

    /// Forgets every cgroup but `keep`'s.
    pub fn keep_only(&self, keep: &[String]) {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).retain(|key, _| keep.contains(key));
    }
}

/// What each writable layer held at its last walk, kept for a [`storage::PERIOD`] (the kubelet's cAdvisor also
/// answers from its last `du`). Only the layers of the latest read are kept.
#[derive(Debug, Default)]
pub struct Sizes {
    last: Mutex<HashMap<PathBuf, (Instant, storage::Usage)>>,
}

impl Sizes {
    /// What `dir` holds: its walk at most a period before `now`, else a new `walk` of it (kept, as of `now`).
    pub fn of(&self, dir: &Path, now: Instant, walk: impl FnOnce(&Path) -> storage::Usage) -> storage::Usage {
        let kept = self.last.lock().unwrap_or_else(|p| p.into_inner()).get(dir).copied();
        if let Some((at, usage)) = kept
            && now.saturating_duration_since(at) < storage::PERIOD
        {
            return usage;
        }
        // Walked without the lock: one slow layer holds up no other request.
        let usage = walk(dir);
        self.last.lock().unwrap_or_else(|p| p.into_inner()).insert(dir.to_path_buf(), (now, usage));
        usage
    }

    /// Forgets every layer but `keep`'s.
    pub fn keep_only(&self, keep: &[&Path]) {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).retain(|dir, _| keep.contains(&dir.as_path()));
    }
}

/// A CPU reading as the Summary API writes it.
fn cpu_json(time: &str, cpu_nanoseconds: u64, rate: Option<u64>) -> Value {
    let mut cpu = json!({"time": time, "usageCoreNanoSeconds": cpu_nanoseconds});
    if let Some(rate) = rate {
        cpu["usageNanoCores"] = json!(rate);
    }
    cpu
}

// === The machine ===

/// The machine's CPU time (all cores, nanoseconds) from `/proc/stat`'s `cpu` line: every state but idle and iowait,
/// in clock ticks of `ticks_per_second`.
fn machine_cpu(stat: &str, ticks_per_second: u64) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is counted in user already).
    let busy = [0usize, 1, 2, 5, 6, 7].iter().filter_map(|i| ticks.get(*i)).fold(0u64, |sum, t| sum.saturating_add(*t));
    Some(busy.saturating_mul(1_000_000_000 / ticks_per_second.max(1)))
}

/// The machine's memory from `/proc/meminfo`, as cAdvisor reports the root cgroup: usage is total less free,
/// the working set that less inactive file pages.
fn machine_memory(meminfo: &str) -> Option<Memory> {
    let kib = |name: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.split(':').next() == Some(name))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok()?.checked_mul(1024)
    };
    let (total, free) = (kib("MemTotal")?, kib("MemFree")?);
    let usage = total.saturating_sub(free);
    Some(Memory {
        usage,
        working_set: usage.saturating_sub(kib("Inactive(file)").unwrap_or(0)),
        rss: kib("AnonPages").unwrap_or(0),
        page_faults: 0,
        major_page_faults: 0,
        limit: Some(total),
    })
}

/// The file system holding `dir`: capacity, available and used bytes, and inodes, as `FsStats`.
fn file_system(dir: &Path, time: &str) -> Option<Value> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` is plain integers, for which all zeros is a value.
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs(3) writes only the struct it is given; `path` is a NUL-terminated string that outlives it.
    if unsafe { libc::statvfs(path.as_ptr(), &mut fs) } != 0 {
        return None;
    }
    let block = fs.f_frsize;
    let (capacity, free, available) =
        (fs.f_blocks.saturating_mul(block), fs.f_bfree.saturating_mul(block), fs.f_bavail.saturating_mul(block));
    let (inodes, inodes_free) = (fs.f_files, fs.f_ffree);
    Some(json!({
        "time": time, "availableBytes": available, "capacityBytes": capacity,
        "usedBytes": capacity.saturating_sub(free),
        "inodesFree": inodes_free, "inodes": inodes, "inodesUsed": inodes.saturating_sub(inodes_free),
    }))
}

/// The time the machine booted (`/proc/stat`'s `btime`), as Kubernetes writes times.
fn boot_time(stat: &str) -> Option<String> {
    let seconds: u64 = stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    Some(nest_core::clock::rfc3339(seconds))
}

// === The summary ===

/// One running container, as the statistics need it.
#[derive(Clone, Debug)]
pub struct Container {
    pub name: String,
    /// When its process started (RFC 3339), if known.
    pub started: Option<String>,
    /// Its cgroup, relative to each hierarchy's root; its pod's is the parent.
    pub cgroup: PathBuf,
    /// Its writable layer's upper directory, if it has one.
    pub upper: Option<PathBuf>,
}

/// One pod with running containers.
#[derive(Clone, Debug)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub started: String,
    pub containers: Vec<Container>,
}

/// What one read found: the node's and each pod's statistics, and whether any cgroup could not be read.
#[derive(Debug)]
pub struct Read {
    /// The Summary API's `Summary`.
    pub summary: Value,
    /// Cgroups that could not be read (each left out of the summary), with why.
    pub errors: Vec<String>,
}

/// Reads the statistics of the node `node` (keeping its files in `data_dir`) and of `pods` from `layout`, with rates
/// from `rates` and writable layers' sizes from `sizes`. Blocking (files, and a walk of each writable layer not walked
/// for a period): call off the async threads.
pub fn read(node: &str, data_dir: &Path, layout: Option<&Layout>, pods: &[Pod], rates: &Rates, sizes: &Sizes) -> Read {
    let cgroups = pods.iter().flat_map(|pod| {
        let parent = pod.containers.first().and_then(|c| c.cgroup.parent()).map(Path::to_path_buf);
        parent.into_iter().chain(pod.containers.iter().map(|c| c.cgroup.clone()))
    });
    let keys: Vec<String> = cgroups.map(|c| c.display().to_string()).chain(std::iter::once(NODE.to_string())).collect();
    if keys.iter().any(|k| !rates.knows(k)) {
        // A first reading for some: one now, the rate from the next.
        sample(layout, pods, rates);
        std::thread::sleep(FIRST_SAMPLE);
    }
    rates.keep_only(&keys);
    let layers: Vec<&Path> = pods.iter().flat_map(|p| &p.containers).filter_map(|c| c.upper.as_deref()).collect();
    sizes.keep_only(&layers);
    let mut errors = Vec::new();
    let pods: Vec<Value> = pods.iter().filter_map(|pod| pod_stats(layout, pod, rates, sizes, &mut errors)).collect();
    let time = crate::rfc3339_now();
    let proc_stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let mut node = json!({"nodeName": node, "startTime": boot_time(&proc_stat).unwrap_or_else(|| time.clone())});
    if let Some(cpu) = machine_cpu(&proc_stat, ticks_per_second()) {
        node["cpu"] = cpu_json(&time, cpu, rates.rate(NODE, Instant::now(), cpu));
    }
    if let Some(memory) = machine_memory(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default()) {
        node["memory"] = memory.to_json(&time);
    }
    if let Some(fs) = file_system(data_dir, &time) {
        node["fs"] = fs.clone();
        node["runtime"] = json!({"imageFs": fs});
    }
    Read { summary: json!({"node": node, "pods": pods}), errors }
}

/// The key of the machine's CPU in [`Rates`] (no cgroup path is empty).
const NODE: &str = "";

/// One reading of every cgroup of `pods`, and of the machine, kept in `rates`.
fn sample(layout: Option<&Layout>, pods: &[Pod], rates: &Rates) {
    let now = Instant::now();
    if let Some(cpu) = machine_cpu(&std::fs::read_to_string("/proc/stat").unwrap_or_default(), ticks_per_second()) {
        rates.rate(NODE, now, cpu);
    }
    let Some(layout) = layout else { return };
    for pod in pods {
        let parent = pod.containers.first().and_then(|c| c.cgroup.parent());
        for cgroup in parent.into_iter().chain(pod.containers.iter().map(|c| c.cgroup.as_path())) {
            if let Ok(usage) = layout.read(cgroup) {
                rates.rate(&cgroup.display().to_string(), now, usage.cpu_nanoseconds);
            }
        }
    }
}

/// The Summary API's `PodStats` of `pod`; `None` (and why in `errors`) when its cgroup cannot be read.
fn pod_stats(
    layout: Option<&Layout>,
    pod: &Pod,
    rates: &Rates,
    sizes: &Sizes,
    errors: &mut Vec<String>,
) -> Option<Value> {
    let Some(layout) = layout else {
        errors.push("no cgroup hierarchy with memory and CPU accounting".into());
        return None;
    };
    let time = crate::rfc3339_now();
    let mut containers = Vec::new();
    for container in &pod.containers {
        let usage = match layout.read(&container.cgroup) {
            Ok(usage) => usage,
            Err(error) => {
                errors.push(format!("container {} of pod {}/{}: {error}", container.name, pod.namespace, pod.name));
                continue;
            }
        };
        let rate = rates.rate(&container.cgroup.display().to_string(), Instant::now(), usage.cpu_nanoseconds);
        let mut stats = json!({
            "name": container.name,
            "startTime": container.started.clone().unwrap_or_else(|| pod.started.clone()),
            "cpu": cpu_json(&time, usage.cpu_nanoseconds, rate),
            "memory": usage.memory.to_json(&time),
        });
        if let Some(upper) = &container.upper {
            let used = sizes.of(upper, Instant::now(), |dir| storage::measure(dir, storage::MAX_ENTRIES));
            stats["rootfs"] = json!({"time": time, "usedBytes": used.bytes, "inodesUsed": used.entries});
        }
        containers.push(stats);
    }
    let mut stats = json!({
        "podRef": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "startTime": pod.started,
        "containers": containers,
    });
    if let Some(parent) = pod.containers.first().and_then(|c| c.cgroup.parent())
        && let Ok(usage) = layout.read(parent)
    {
        let rate = rates.rate(&parent.display().to_string(), Instant::now(), usage.cpu_nanoseconds);
        stats["cpu"] = cpu_json(&time, usage.cpu_nanoseconds, rate);
        stats["memory"] = usage.memory.to_json(&time);
    }
    Some(stats)
}

/// The kernel's clock ticks per second (`USER_HZ`), which `/proc/stat` counts in.
fn ticks_per_second() -> u64 {
    // SAFETY: sysconf(3) reads a constant and touches no memory.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

// === /metrics/resource ===

/// The Prometheus text of `/metrics/resource` for `summary` (as [`read`] made it) with `errors`, each sample
/// stamped with the milliseconds of its reading, as the kubelet stamps them.
pub fn resource_metrics(summary: &Value, errors: usize) -> String {
    let mut families: BTreeMap<&str, (&str, &str, Vec<String>)> = BTreeMap::new();
    let mut add =
        |name: &'static str, kind: &'static str, help: &'static str, labels: String, value: f64, time: &Value| {
            let stamp = time.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()).map(|t| t.as_millisecond());
            let stamp = stamp.map(|ms| format!(" {ms}")).unwrap_or_default();
            let line = format!("{name}{labels} {value}{stamp}");
            families.entry(name).or_insert((kind, help, Vec::new())).2.push(line);
        };
    let cpu = |stats: &Value| stats["cpu"]["usageCoreNanoSeconds"].as_u64().map(|ns| ns as f64 / 1e9);
    let memory = |stats: &Value| stats["memory"]["workingSetBytes"].as_u64().map(|b| b as f64);
    let node = &summary["node"];
    if let Some(value) = cpu(node) {
        add("node_cpu_usage_seconds_total", "counter", NODE_CPU, String::new(), value, &node["cpu"]["time"]);
    }
    if let Some(value) = memory(node) {
        add("node_memory_working_set_bytes", "gauge", NODE_MEMORY, String::new(), value, &node["memory"]["time"]);
    }
    for pod in summary["pods"].as_array().into_iter().flatten() {
        let (namespace, name) = (quoted(&pod["podRef"]["namespace"]), quoted(&pod["podRef"]["name"]));
        let labels = format!("{{namespace={namespace},pod={name}}}");
        if let Some(value) = cpu(pod) {
            add("pod_cpu_usage_seconds_total", "counter", POD_CPU, labels.clone(), value, &pod["cpu"]["time"]);
        }
        if let Some(value) = memory(pod) {
            add("pod_memory_working_set_bytes", "gauge", POD_MEMORY, labels, value, &pod["memory"]["time"]);
        }
        for container in pod["containers"].as_array().into_iter().flatten() {
            let labels = format!("{{container={},namespace={namespace},pod={name}}}", quoted(&container["name"]));
            if let Some(value) = cpu(container) {
                let time = &container["cpu"]["time"];
                add("container_cpu_usage_seconds_total", "counter", CONTAINER_CPU, labels.clone(), value, time);
            }
            if let Some(value) = memory(container) {
                let time = &container["memory"]["time"];
                add("container_memory_working_set_bytes", "gauge", CONTAINER_MEMORY, labels.clone(), value, time);
            }
            if let Some(started) = container["startTime"].as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()) {
                let value = started.as_second() as f64;
                add("container_start_time_seconds", "gauge", CONTAINER_START, labels, value, &Value::Null);
            }
        }
    }
    let failed = if errors > 0 { 1.0 } else { 0.0 };
    add("resource_scrape_error", "gauge", SCRAPE_ERROR, String::new(), failed, &Value::Null);
    add("scrape_error", "gauge", SCRAPE_ERROR, String::new(), failed, &Value::Null);
    let mut text = String::new();
    for (name, (kind, help, lines)) in families {
        text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for line in lines {
            text.push_str(&line);
            text.push('\n');
        }
    }
    text
}

/// A label value in Prometheus text: quoted, with `\`, `"` and newlines escaped.
fn quoted(value: &Value) -> String {
    let text = value.as_str().unwrap_or_default();
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))
}

const NODE_CPU: &str = "[STABLE] Cumulative cpu time consumed by the node in core-seconds";
const NODE_MEMORY: &str = "[STABLE] Current working set of the node in bytes";
const POD_CPU: &str = "[STABLE] Cumulative cpu time consumed by the pod in core-seconds";
const POD_MEMORY: &str = "[STABLE] Current working set of the pod in bytes";
const CONTAINER_CPU: &str = "[STABLE] Cumulative cpu time consumed by the container in core-seconds";
const CONTAINER_MEMORY: &str = "[STABLE] Current working set of the container in bytes";
const CONTAINER_START: &str = "[STABLE] Start time of the container since unix epoch in seconds";
const SCRAPE_ERROR: &str = "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise";

// === The node's handler ===

/// The pods of `runtime` with running containers, as [`read`] takes them.
pub(crate) fn running_pods(runtime: &crate::process::Runtime) -> Vec<Pod> {
    runtime
        .runs()
        .into_iter()
        .filter(|run| !run.finished())
        .filter_map(|run| {
            let containers: Vec<Container> = run
                .running_containers()
                .into_iter()
                .map(|(name, started, sandbox)| Container {
                    name,
                    started,
                    cgroup: sandbox.cgroup().to_path_buf(),
                    upper: sandbox.upper(),
                })
                .collect();
            let (namespace, name) = run.names();
            let started = run.started.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
            let started = nest_core::clock::rfc3339(started);
            (!containers.is_empty()).then(|| Pod {
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: run.uid().to_string(),
                started,
                containers,
            })
        })
        .collect()
}

/// What the node's `/stats/summary` and `/metrics/resource` read, shared by every request.
#[derive(Debug)]
pub(crate) struct Stats {
    pub layout: Option<Layout>,
    pub rates: Arc<Rates>,
    pub sizes: Arc<Sizes>,
}

impl Stats {
    pub(crate) fn new() -> Stats {
        Stats { layout: Layout::discover(), rates: Arc::default(), sizes: Arc::default() }
    }
}

/// Answers `GET /stats/summary` (`metrics` false) or `GET /metrics/resource` (true) for the node of `context`.
pub(crate) async fn answer(
    context: &crate::Context,
    method: &hyper::Method,
    metrics: bool,
) -> hyper::Response<nest_kubelet_server::Body> {
    use hyper::StatusCode;
    if method != hyper::Method::GET {
        return nest_kubelet_server::text(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not allowed here\n"));
    }
    let mut pods = context.runtime.as_deref().map(running_pods).unwrap_or_default();
    if metrics {
        // No metric of the resource endpoint reads a writable layer's size: no walk of the layers for it.
        pods.iter_mut().flat_map(|pod| pod.containers.iter_mut()).for_each(|container| container.upper = None);
    }
    let (node, data_dir) = (context.options.name.clone(), context.options.process.data_dir.clone());
    let (layout, rates, sizes) =
        (context.stats.layout.clone(), context.stats.rates.clone(), context.stats.sizes.clone());
    let read =
        tokio::task::spawn_blocking(move || read(&node, &data_dir, layout.as_ref(), &pods, &rates, &sizes)).await;
    let Ok(read) = read else {
        return nest_kubelet_server::text(StatusCode::INTERNAL_SERVER_ERROR, "reading the statistics failed\n");
    };
    for error in &read.errors {
        tracing::debug!(%error, "a container's statistics");
    }
    let (body, content_type) = if metrics {
        (resource_metrics(&read.summary, read.errors.len()), "text/plain; version=0.0.4; charset=utf-8")
    } else {
        (read.summary.to_string(), "application/json")
    };
    let mut response = nest_kubelet_server::text(StatusCode::OK, body);
    response.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests;
