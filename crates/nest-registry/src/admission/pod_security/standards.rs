//! The Pod Security Standards' checks, as kube-apiserver's `PodSecurity` admission evaluates them
//! (`k8s.io/pod-security-admission/policy`, 1.33): each check reads a pod's metadata and spec and, when the pod fails
//! it, says why as a reason and a detail with upstream's wording, so a client sees the message kube-apiserver sends.
//!
//! A check belongs to a level and applies from a minimum policy version; a restricted check can replace a baseline
//! one from some version on. Results come in upstream's order: the baseline checks' ids sorted, then the restricted
//! ones'. Containers are visited as upstream visits them: init containers, containers, then ephemeral containers.

use std::collections::BTreeSet;

use nest_core::pod_security::BASELINE_CAPABILITIES;
use serde_json::Value;

/// The newest policy version this server evaluates (its Kubernetes minor version): `latest` means this one.
pub const LATEST_MINOR: u32 = 33;

/// A level of the Pod Security Standards, least strict first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(text: &str) -> Option<Level> {
        match text {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// One failed check: `reason (detail)` in a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

/// What a check reads: a pod's (or a pod template's) metadata and spec.
pub struct PodView<'a> {
    pub metadata: &'a Value,
    pub spec: &'a Value,
}

impl PodView<'_> {
    /// Every container with its name, in upstream's order.
    fn containers(&self) -> impl Iterator<Item = (&str, &Value)> {
        ["initContainers", "containers", "ephemeralContainers"]
            .into_iter()
            .flat_map(|list| self.spec[list].as_array().into_iter().flatten())
            .map(|c| (c["name"].as_str().unwrap_or_default(), c))
    }

    fn pod_context(&self) -> &Value {
        &self.spec["securityContext"]
    }

    fn windows(&self) -> bool {
        self.spec["os"]["name"] == "windows"
    }
}

type Check = fn(&PodView, u32) -> Option<Violation>;

/// A check as upstream registers it: its id, level, first version, and the baseline checks it replaces (from which
/// version on).
struct Registered {
    id: &'static str,
    level: Level,
    since: u32,
    replaces: &'static [(&'static str, u32)],
    check: Check,
}

/// Every check, each level's sorted by id (Go's byte order: upper case first).
const CHECKS: &[Registered] = &[
    Registered { id: "appArmorProfile", level: Level::Baseline, since: 0, replaces: &[], check: app_armor },
    Registered {
        id: "capabilities_baseline",
        level: Level::Baseline,
        since: 0,
        replaces: &[],
        check: capabilities_baseline,
    },
    Registered { id: "hostNamespaces", level: Level::Baseline, since: 0, replaces: &[], check: host_namespaces },
    Registered { id: "hostPathVolumes", level: Level::Baseline, since: 0, replaces: &[], check: host_path_volumes },
    Registered { id: "hostPorts", level: Level::Baseline, since: 0, replaces: &[], check: host_ports },
    Registered { id: "privileged", level: Level::Baseline, since: 0, replaces: &[], check: privileged },
    Registered { id: "procMount", level: Level::Baseline, since: 0, replaces: &[], check: proc_mount },
    Registered { id: "seLinuxOptions", level: Level::Baseline, since: 0, replaces: &[], check: se_linux },
    Registered {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        since: 19,
        replaces: &[],
        check: seccomp_baseline,
    },
    Registered { id: "sysctls", level: Level::Baseline, since: 0, replaces: &[], check: sysctls },
    Registered {
        id: "windowsHostProcess",
        level: Level::Baseline,
        since: 0,
        replaces: &[],
        check: windows_host_process,
    },
    Registered {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        since: 8,
        replaces: &[],
        check: allow_privilege_escalation,
    },
    Registered {
        id: "capabilities_restricted",
        level: Level::Restricted,
        since: 22,
        replaces: &[("capabilities_baseline", 22)],
        check: capabilities_restricted,
    },
    Registered {
        id: "restrictedVolumes",
        level: Level::Restricted,
        since: 0,
        replaces: &[("hostPathVolumes", 0)],
        check: restricted_volumes,
    },
    Registered { id: "runAsNonRoot", level: Level::Restricted, since: 0, replaces: &[], check: run_as_non_root },
    Registered { id: "runAsUser", level: Level::Restricted, since: 23, replaces: &[], check: run_as_user },
    Registered {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        since: 19,
        replaces: &[("seccompProfile_baseline", 19)],
        check: seccomp_restricted,
    },
];

/// What `pod` violates at `level` of policy version `1.<minor>` (capped at [`LATEST_MINOR`]).
pub fn evaluate(level: Level, minor: u32, pod: &PodView) -> Vec<Violation> {
    let minor = minor.min(LATEST_MINOR);
    if level == Level::Privileged {
        return Vec::new();
    }
    let active = |r: &&Registered| r.level <= level && r.since <= minor;
    let replaced: BTreeSet<&str> = CHECKS
        .iter()
        .filter(active)
        .flat_map(|r| r.replaces.iter().filter(|(_, from)| *from <= minor).map(|(id, _)| *id))
        .collect();
    CHECKS
        .iter()
        .filter(active)
        .filter(|r| !replaced.contains(r.id))
        .filter_map(|r| (r.check)(pod, minor))
        .map(|mut v| {
            if v.reason.is_empty() {
                v.reason = "unknown forbidden reason".into();
            }
            v
        })
        .collect()
}

/// `reason (detail), reason (detail)`, as upstream's `ForbiddenDetail` joins them.
pub fn describe(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| if v.detail.is_empty() { v.reason.clone() } else { format!("{} ({})", v.reason, v.detail) })
        .collect::<Vec<_>>()
        .join(", ")
}

// === wording ===

fn pluralize<'a>(singular: &'a str, plural: &'a str, n: usize) -> &'a str {
    if n == 1 { singular } else { plural }
}

/// `"a", "b"`: each item in double quotes, unescaped, as upstream's `joinQuote`.
fn quoted<S: AsRef<str>>(items: &[S]) -> String {
    items.iter().map(|s| format!("\"{}\"", s.as_ref())).collect::<Vec<_>>().join(", ")
}

/// `container "a"` or `containers "a", "b"`.
fn containers_phrase(names: &[&str]) -> String {
    format!("{} {}", pluralize("container", "containers", names.len()), quoted(names))
}

/// `pod`, `container "a"`, or `pod and containers "a", "b"`.
fn setters(pod: bool, names: &[&str]) -> String {
    let mut parts = Vec::new();
    if pod {
        parts.push("pod".to_string());
    }
    if !names.is_empty() {
        parts.push(containers_phrase(names));
    }
    parts.join(" and ")
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation { reason: reason.into(), detail: detail.into() })
}

fn str_at<'v>(value: &'v Value, field: &str) -> Option<&'v str> {
    value.get(field).and_then(Value::as_str)
}

// === baseline ===

fn host_namespaces(pod: &PodView, _: u32) -> Option<Violation> {
    let set: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|field| pod.spec[*field] == true)
        .map(|field| format!("{field}=true"))
        .collect();
    if set.is_empty() { None } else { violation("host namespaces", set.join(", ")) }
}

fn privileged(pod: &PodView, _: u32) -> Option<Violation> {
    let bad: Vec<&str> =
        pod.containers().filter(|(_, c)| c["securityContext"]["privileged"] == true).map(|(n, _)| n).collect();
    if bad.is_empty() {
        return None;
    }
    violation("privileged", format!("{} must not set securityContext.privileged=true", containers_phrase(&bad)))
}

/// The capabilities each container adds that `allowed` does not list: the containers, and the capabilities pooled.
fn added_beyond<'p>(pod: &'p PodView, allowed: &[&str]) -> (Vec<&'p str>, Vec<&'p str>) {
    let mut names = Vec::new();
    let mut caps = BTreeSet::new();
    for (name, c) in pod.containers() {
        let added = c["securityContext"]["capabilities"]["add"].as_array().into_iter().flatten();
        let bad: Vec<&str> = added.filter_map(Value::as_str).filter(|cap| !allowed.contains(cap)).collect();
        if !bad.is_empty() {
            names.push(name);
            caps.extend(bad);
        }
    }
    (names, caps.into_iter().collect())
}

fn capabilities_baseline(pod: &PodView, _: u32) -> Option<Violation> {
    let (names, caps) = added_beyond(pod, BASELINE_CAPABILITIES);
    if names.is_empty() {
        return None;
    }
    violation(
        "non-default capabilities",
        format!("{} must not include {} in securityContext.capabilities.add", containers_phrase(&names), quoted(&caps)),
    )
}

fn host_path_volumes(pod: &PodView, _: u32) -> Option<Violation> {
    let volumes = pod.spec["volumes"].as_array().into_iter().flatten();
    let bad: Vec<&str> = volumes
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(|v| v["name"].as_str().unwrap_or_default())
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation("hostPath volumes", format!("{} {}", pluralize("volume", "volumes", bad.len()), quoted(&bad)))
}

fn host_ports(pod: &PodView, _: u32) -> Option<Violation> {
    let mut names = Vec::new();
    let mut ports = BTreeSet::new();
    for (name, c) in pod.containers() {
        let used: Vec<String> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["hostPort"].as_i64())
            .filter(|port| *port != 0)
            .map(|port| port.to_string())
            .collect();
        if !used.is_empty() {
            names.push(name);
            ports.extend(used);
        }
    }
    if names.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&names),
            pluralize("uses", "use", names.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

fn app_armor(pod: &PodView, _: u32) -> Option<Violation> {
    let bad_type = |context: &Value| -> Option<String> {
        let profile = context.get("appArmorProfile").filter(|p| !p.is_null())?;
        let kind = profile["type"].as_str().unwrap_or_default();
        (!matches!(kind, "RuntimeDefault" | "Localhost")).then(|| kind.to_string())
    };
    let mut types = BTreeSet::new();
    let pod_bad = bad_type(pod.pod_context()).map(|t| types.insert(t)).is_some();
    let mut names = Vec::new();
    for (name, c) in pod.containers() {
        if let Some(t) = bad_type(&c["securityContext"]) {
            names.push(name);
            types.insert(t);
        }
    }
    let mut annotations = BTreeSet::new();
    for (key, value) in pod.metadata["annotations"].as_object().into_iter().flatten() {
        let value = value.as_str().unwrap_or_default();
        if key.starts_with(APPARMOR_ANNOTATION)
            && !(value.is_empty() || value == "runtime/default" || value.starts_with("localhost/"))
        {
            annotations.insert(format!("{key}={value:?}"));
        }
    }
    if !pod_bad && names.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut who = vec![setters(pod_bad, &names)].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>();
    if !annotations.is_empty() {
        who.push(pluralize("annotation", "annotations", annotations.len()).to_string());
    }
    let values: Vec<String> = types.into_iter().chain(annotations).collect();
    violation(
        pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", values.len()),
        format!("{} must not set AppArmor profile type to {}", who.join(" and "), quoted(&values)),
    )
}

fn se_linux(pod: &PodView, minor: u32) -> Option<Violation> {
    let allowed = |t: &str| {
        matches!(t, "" | "container_t" | "container_init_t" | "container_kvm_t")
            || (minor >= 31 && t == "container_engine_t")
    };
    let (mut types, mut user, mut role) = (BTreeSet::new(), false, false);
    let mut inspect = |context: &Value| -> bool {
        let Some(options) = context.get("seLinuxOptions").filter(|o| !o.is_null()) else { return false };
        let mut bad = false;
        let kind = str_at(options, "type").unwrap_or_default();
        if !allowed(kind) {
            types.insert(kind.to_string());
            bad = true;
        }
        if str_at(options, "user").is_some_and(|u| !u.is_empty()) {
            user = true;
            bad = true;
        }
        if str_at(options, "role").is_some_and(|r| !r.is_empty()) {
            role = true;
            bad = true;
        }
        bad
    };
    let pod_bad = inspect(pod.pod_context());
    let names: Vec<&str> = pod.containers().filter(|(_, c)| inspect(&c["securityContext"])).map(|(n, _)| n).collect();
    if !pod_bad && names.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !types.is_empty() {
        let types: Vec<String> = types.into_iter().collect();
        data.push(format!("{} {}", pluralize("type", "types", types.len()), quoted(&types)));
    }
    if user {
        data.push("user may not be set".to_string());
    }
    if role {
        data.push("role may not be set".to_string());
    }
    violation(
        "seLinuxOptions",
        format!("{} set forbidden securityContext.seLinuxOptions: {}", setters(pod_bad, &names), data.join("; ")),
    )
}

fn proc_mount(pod: &PodView, _: u32) -> Option<Violation> {
    let mut names = Vec::new();
    let mut kinds = BTreeSet::new();
    for (name, c) in pod.containers() {
        if let Some(kind) = str_at(&c["securityContext"], "procMount").filter(|k| *k != "Default") {
            names.push(name);
            kinds.insert(kind);
        }
    }
    if names.is_empty() {
        return None;
    }
    let kinds: Vec<&str> = kinds.into_iter().collect();
    violation(
        "procMount",
        format!("{} must not set securityContext.procMount to {}", containers_phrase(&names), quoted(&kinds)),
    )
}

/// A seccomp profile type the standards accept.
fn seccomp_ok(kind: &str) -> bool {
    matches!(kind, "RuntimeDefault" | "Localhost")
}

fn seccomp_type(context: &Value) -> Option<&str> {
    context.get("seccompProfile").filter(|p| !p.is_null()).map(|p| p["type"].as_str().unwrap_or_default())
}

fn seccomp_baseline(pod: &PodView, _: u32) -> Option<Violation> {
    let mut kinds = BTreeSet::new();
    let pod_bad = seccomp_type(pod.pod_context()).filter(|k| !seccomp_ok(k)).map(|k| kinds.insert(k)).is_some();
    let mut names = Vec::new();
    for (name, c) in pod.containers() {
        if let Some(kind) = seccomp_type(&c["securityContext"]).filter(|k| !seccomp_ok(k)) {
            names.push(name);
            kinds.insert(kind);
        }
    }
    if !pod_bad && names.is_empty() {
        return None;
    }
    let kinds: Vec<&str> = kinds.into_iter().collect();
    violation(
        "seccompProfile",
        format!("{} must not set securityContext.seccompProfile.type to {}", setters(pod_bad, &names), quoted(&kinds)),
    )
}

/// The sysctls the baseline level allows at policy version `1.<minor>`.
fn sysctl_allowed(name: &str, minor: u32) -> bool {
    const SINCE: &[(&str, u32)] = &[
        ("kernel.shm_rmid_forced", 0),
        ("net.ipv4.ip_local_port_range", 0),
        ("net.ipv4.tcp_syncookies", 0),
        ("net.ipv4.ping_group_range", 0),
        ("net.ipv4.ip_unprivileged_port_start", 0),
        ("net.ipv4.ip_local_reserved_ports", 27),
        ("net.ipv4.tcp_keepalive_time", 29),
        ("net.ipv4.tcp_fin_timeout", 29),
        ("net.ipv4.tcp_keepalive_intvl", 29),
        ("net.ipv4.tcp_keepalive_probes", 29),
        ("net.ipv4.tcp_rmem", 32),
        ("net.ipv4.tcp_wmem", 32),
    ];
    SINCE.iter().any(|(allowed, since)| *allowed == name && *since <= minor)
}

fn sysctls(pod: &PodView, minor: u32) -> Option<Violation> {
    let names = pod.pod_context()["sysctls"].as_array().into_iter().flatten();
    let bad: Vec<&str> = names.filter_map(|s| s["name"].as_str()).filter(|n| !sysctl_allowed(n, minor)).collect();
    if bad.is_empty() { None } else { violation("forbidden sysctls", bad.join(", ")) }
}

fn windows_host_process(pod: &PodView, _: u32) -> Option<Violation> {
    let host_process = |context: &Value| context["windowsOptions"]["hostProcess"] == true;
    let pod_bad = host_process(pod.pod_context());
    let names: Vec<&str> =
        pod.containers().filter(|(_, c)| host_process(&c["securityContext"])).map(|(n, _)| n).collect();
    if !pod_bad && names.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!("{} must not set securityContext.windowsOptions.hostProcess=true", setters(pod_bad, &names)),
    )
}

// === restricted ===

/// The volume sources the restricted level allows.
const RESTRICTED_VOLUME_SOURCES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The volume sources upstream names when it refuses one, in the order it looks for them.
const NAMED_VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

fn restricted_volumes(pod: &PodView, _: u32) -> Option<Violation> {
    let mut names = Vec::new();
    let mut kinds = BTreeSet::new();
    for volume in pod.spec["volumes"].as_array().into_iter().flatten() {
        let has = |field: &str| volume.get(field).is_some_and(|v| !v.is_null());
        if RESTRICTED_VOLUME_SOURCES.iter().any(|f| has(f)) {
            continue;
        }
        names.push(volume["name"].as_str().unwrap_or_default());
        kinds.insert(NAMED_VOLUME_SOURCES.iter().find(|f| has(f)).copied().unwrap_or("unknown"));
    }
    if names.is_empty() {
        return None;
    }
    let kinds: Vec<&str> = kinds.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", names.len()),
            quoted(&names),
            pluralize("uses", "use", names.len()),
            pluralize("restricted volume type", "restricted volume types", kinds.len()),
            quoted(&kinds)
        ),
    )
}

fn allow_privilege_escalation(pod: &PodView, minor: u32) -> Option<Violation> {
    if minor >= 25 && pod.windows() {
        return None;
    }
    let bad: Vec<&str> = pod
        .containers()
        .filter(|(_, c)| c["securityContext"]["allowPrivilegeEscalation"] != false)
        .map(|(n, _)| n)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!("{} must set securityContext.allowPrivilegeEscalation=false", containers_phrase(&bad)),
    )
}

fn capabilities_restricted(pod: &PodView, minor: u32) -> Option<Violation> {
    if minor >= 25 && pod.windows() {
        return None;
    }
    let no_drop: Vec<&str> = pod
        .containers()
        .filter(|(_, c)| {
            !c["securityContext"]["capabilities"]["drop"].as_array().is_some_and(|d| d.iter().any(|cap| cap == "ALL"))
        })
        .map(|(n, _)| n)
        .collect();
    let (adding, caps) = added_beyond(pod, &["NET_BIND_SERVICE"]);
    let mut parts = Vec::new();
    if !no_drop.is_empty() {
        parts.push(format!("{} must set securityContext.capabilities.drop=[\"ALL\"]", containers_phrase(&no_drop)));
    }
    if !adding.is_empty() {
        parts.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            quoted(&caps)
        ));
    }
    if parts.is_empty() { None } else { violation("unrestricted capabilities", parts.join("; ")) }
}

fn run_as_non_root(pod: &PodView, _: u32) -> Option<Violation> {
    let pod_value = pod.pod_context().get("runAsNonRoot").and_then(Value::as_bool);
    let pod_bad = pod_value == Some(false);
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for (name, c) in pod.containers() {
        match c["securityContext"].get("runAsNonRoot").and_then(Value::as_bool) {
            Some(false) => explicit.push(name),
            None if pod_value != Some(true) => implicit.push(name),
            _ => {}
        }
    }
    if pod_bad || !explicit.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!("{} must not set securityContext.runAsNonRoot=false", setters(pod_bad, &explicit)),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "runAsNonRoot != true",
        format!("pod or {} must set securityContext.runAsNonRoot=true", containers_phrase(&implicit)),
    )
}

fn run_as_user(pod: &PodView, _: u32) -> Option<Violation> {
    let root = |context: &Value| context.get("runAsUser").and_then(Value::as_i64) == Some(0);
    let pod_bad = root(pod.pod_context());
    let names: Vec<&str> = pod.containers().filter(|(_, c)| root(&c["securityContext"])).map(|(n, _)| n).collect();
    if !pod_bad && names.is_empty() {
        return None;
    }
    violation("runAsUser=0", format!("{} must not set runAsUser=0", setters(pod_bad, &names)))
}

fn seccomp_restricted(pod: &PodView, minor: u32) -> Option<Violation> {
    if minor >= 25 && pod.windows() {
        return None;
    }
    let pod_type = seccomp_type(pod.pod_context());
    let mut kinds = BTreeSet::new();
    let pod_bad = pod_type.filter(|k| !seccomp_ok(k)).map(|k| kinds.insert(k)).is_some();
    let pod_ok = pod_type.is_some_and(seccomp_ok);
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for (name, c) in pod.containers() {
        match seccomp_type(&c["securityContext"]) {
            Some(kind) if !seccomp_ok(kind) => {
                explicit.push(name);
                kinds.insert(kind);
            }
            None if !pod_ok => implicit.push(name),
            _ => {}
        }
    }
    if pod_bad || !explicit.is_empty() {
        let kinds: Vec<&str> = kinds.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters(pod_bad, &explicit),
                quoted(&kinds)
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    )
}
