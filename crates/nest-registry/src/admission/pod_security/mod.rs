//! `PodSecurity` admission, as kube-apiserver's built-in plugin (`k8s.io/pod-security-admission/admission`, 1.33):
//! a namespace's `pod-security.kubernetes.io/{enforce,audit,warn}` labels (each with a `-version`) choose a level
//! of the Pod Security Standards ([`standards`]); a pod that violates the enforced level is refused with a 403
//! naming every violation, and one that violates the warned level is admitted with a `Warning` header. Workloads'
//! pod templates are only warned about, never refused. Invalid labels on a namespace are a 422.
//!
//! Namespaces without labels get the configured defaults ([`Config`]; `privileged`, so nothing is checked, unless
//! an administrator says otherwise), and configured users, namespaces and runtime classes are exempt. nest keeps
//! no audit log, so the `audit` labels are validated but record nothing.

pub mod standards;
#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::catalog::ResourceInfo;
use crate::chain::{Operation, Request, Validating, Warnings};
use crate::error::{ApiError, Cause, Result};
use crate::strategy::{Cluster, Subresource};
use standards::{LATEST_MINOR, Level, PodView};

/// The label prefix of the three modes.
const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// A policy version: `latest` or `v1.<minor>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Latest,
    Minor(u32),
}

impl Version {
    /// `latest` or `v1.N` (no leading zeros), as upstream's `ParseVersion` accepts.
    pub fn parse(text: &str) -> Option<Version> {
        if text == "latest" {
            return Some(Version::Latest);
        }
        let minor = text.strip_prefix("v1.")?;
        let canonical = minor == "0" || (!minor.starts_with('0') && !minor.is_empty());
        if !canonical || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        minor.parse().ok().map(Version::Minor)
    }

    fn minor(self) -> u32 {
        match self {
            Version::Latest => LATEST_MINOR,
            Version::Minor(minor) => minor,
        }
    }
}

/// A level at a version, shown as upstream shows it (`baseline:latest`, `restricted:v1.30`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub level: Level,
    pub version: Version,
}

impl Policy {
    pub const PRIVILEGED: Policy = Policy { level: Level::Privileged, version: Version::Latest };

    /// `level` or `level:version`.
    pub fn parse(text: &str) -> std::result::Result<Policy, String> {
        let (level, version) = text.split_once(':').unwrap_or((text, "latest"));
        let level =
            Level::parse(level).ok_or_else(|| format!("{level:?} is not privileged, baseline or restricted"))?;
        let version = Version::parse(version).ok_or_else(|| format!("{version:?} is not \"latest\" or \"v1.x\""))?;
        Ok(Policy { level, version })
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.version {
            Version::Latest => write!(f, "{}:latest", self.level.as_str()),
            Version::Minor(minor) => write!(f, "{}:v1.{minor}", self.level.as_str()),
        }
    }
}

/// One of the three modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Enforce,
    Audit,
    Warn,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Enforce, Mode::Audit, Mode::Warn];

    fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Audit => "audit",
            Mode::Warn => "warn",
        }
    }
}

/// What an administrator configures (kube-apiserver's `PodSecurityConfiguration`).
#[derive(Clone, Debug)]
pub struct Config {
    /// The policies of namespaces without the labels.
    pub enforce: Policy,
    pub audit: Policy,
    pub warn: Policy,
    /// Requests from these users are never checked.
    pub exempt_users: Vec<String>,
    /// Pods in these namespaces are never checked.
    pub exempt_namespaces: Vec<String>,
    /// Pods with these `runtimeClassName`s are never checked.
    pub exempt_runtime_classes: Vec<String>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            enforce: Policy::PRIVILEGED,
            audit: Policy::PRIVILEGED,
            warn: Policy::PRIVILEGED,
            exempt_users: Vec::new(),
            exempt_namespaces: Vec::new(),
            exempt_runtime_classes: Vec::new(),
        }
    }
}

/// The three policies a namespace's labels choose, and what is wrong with the labels.
struct Policies {
    enforce: Policy,
    warn: Policy,
    errors: Vec<Cause>,
}

/// A label's value, its field path in a cause, and the message of a bad value.
fn label_cause(key: &str, value: &str, message: &str) -> Cause {
    Cause::invalid(format!("metadata.labels[{key}]"), format!("Invalid value: {value:?}: {message}"))
}

impl Config {
    fn default_for(&self, mode: Mode) -> Policy {
        match mode {
            Mode::Enforce => self.enforce,
            Mode::Audit => self.audit,
            Mode::Warn => self.warn,
        }
    }

    /// The policies of a namespace with `labels`: an invalid level is `restricted` for enforce (failing closed) and
    /// `privileged` for the others; an invalid version is `latest`.
    fn policies(&self, labels: &Value) -> Policies {
        let mut errors = Vec::new();
        let mut chosen = [Policy::PRIVILEGED; 3];
        for (i, mode) in Mode::ALL.into_iter().enumerate() {
            let default = self.default_for(mode);
            let key = format!("{LABEL_PREFIX}{}", mode.name());
            let level = match labels.get(&key).and_then(Value::as_str) {
                None => default.level,
                Some(text) => Level::parse(text).unwrap_or_else(|| {
                    errors.push(label_cause(&key, text, "must be one of privileged, baseline, restricted"));
                    if mode == Mode::Enforce { Level::Restricted } else { Level::Privileged }
                }),
            };
            let version_key = format!("{key}-version");
            let version = match labels.get(&version_key).and_then(Value::as_str) {
                None => default.version,
                Some(text) => Version::parse(text).unwrap_or_else(|| {
                    errors.push(label_cause(&version_key, text, "must be \"latest\" or \"v1.x\""));
                    Version::Latest
                }),
            };
            chosen[i] = Policy { level, version };
        }
        Policies { enforce: chosen[0], warn: chosen[2], errors }
    }
}

/// The admission plugin.
#[derive(Default)]
pub struct PodSecurity {
    pub config: Config,
}

/// Where a workload keeps its pod template, by resource: `None` for resources that have none.
fn template_path(info: &ResourceInfo) -> Option<&'static [&'static str]> {
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "replicationcontrollers") | ("apps", "replicasets" | "deployments" | "statefulsets" | "daemonsets") => {
            Some(&["spec", "template"])
        }
        ("batch", "jobs") => Some(&["spec", "template"]),
        ("batch", "cronjobs") => Some(&["spec", "jobTemplate", "spec", "template"]),
        ("", "podtemplates") => Some(&["template"]),
        _ => None,
    }
}

/// Whether an update of a pod can change what Pod Security decides (upstream's `isSignificantPodUpdate`): the
/// number of containers, or a container's image. Everything else a pod update may change is not checked again.
fn significant_update(new: &Value, old: &Value) -> bool {
    let seccomp_annotation = |pod: &Value, name: &str| {
        pod["metadata"]["annotations"][format!("container.seccomp.security.alpha.kubernetes.io/{name}")].clone()
    };
    for list in ["initContainers", "containers"] {
        let (a, b) = (new["spec"][list].as_array(), old["spec"][list].as_array());
        let (a, b) = (a.map(Vec::as_slice).unwrap_or_default(), b.map(Vec::as_slice).unwrap_or_default());
        if a.len() != b.len() {
            return true;
        }
        for (x, y) in a.iter().zip(b) {
            let name = x["name"].as_str().unwrap_or_default();
            if x["image"] != y["image"] || seccomp_annotation(new, name) != seccomp_annotation(old, name) {
                return true;
            }
        }
    }
    let before = old["spec"]["ephemeralContainers"].as_array().map(Vec::as_slice).unwrap_or_default();
    new["spec"]["ephemeralContainers"].as_array().into_iter().flatten().any(|c| {
        let name = c["name"].as_str().unwrap_or_default();
        before
            .iter()
            .find(|b| b["name"] == c["name"])
            .is_none_or(|b| b["image"] != c["image"] || seccomp_annotation(new, name) != seccomp_annotation(old, name))
    })
}

impl PodSecurity {
    async fn namespace_labels(&self, cluster: Cluster<'_>, namespace: &str) -> Result<Value> {
        let key = format!("/registry/core/namespaces/{namespace}");
        let lookup_failed = || ApiError::internal(format!("failed to lookup namespace {namespace:?}"));
        let ns = cluster.lookup(&key).await.map_err(|_| lookup_failed())?;
        Ok(ns.map_or(Value::Null, |ns| ns["metadata"]["labels"].clone()))
    }

    /// Pods: refused when they violate the enforced policy, warned about when they violate the warned one.
    async fn check_pod(
        &self,
        cluster: Cluster<'_>,
        request: &Request<'_>,
        pod: &Value,
        warnings: &Warnings,
    ) -> Result<()> {
        // Upstream checks the pod itself and its ephemeral containers' writes; its other subresources (status,
        // binding) change nothing Pod Security looks at.
        let checked = matches!(request.subresource, Subresource::Main | Subresource::Own("ephemeralcontainers"));
        if !checked
            || request.old.is_some_and(|old| !significant_update(pod, old))
            || self.exempt_runtime_class(&pod["spec"])
        {
            return Ok(());
        }
        let policies = self.config.policies(&self.namespace_labels(cluster, request.namespace).await?);
        let view = PodView { metadata: &pod["metadata"], spec: &pod["spec"] };
        let enforced = standards::evaluate(policies.enforce.level, policies.enforce.version.minor(), &view);
        if !enforced.is_empty() {
            return Err(ApiError::forbidden(
                request.info,
                request.name,
                format!("violates PodSecurity \"{}\": {}", policies.enforce, standards::describe(&enforced)),
            ));
        }
        self.warn(&policies, &view, warnings);
        Ok(())
    }

    /// Workloads: their pod template is warned about, never refused.
    async fn check_template(
        &self,
        cluster: Cluster<'_>,
        request: &Request<'_>,
        path: &[&str],
        object: &Value,
        warnings: &Warnings,
    ) -> Result<()> {
        let template = path.iter().fold(object, |value, field| &value[*field]);
        if request.subresource != Subresource::Main
            || !template.is_object()
            || self.exempt_runtime_class(&template["spec"])
        {
            return Ok(());
        }
        // Failing open, as upstream does for workloads: a namespace that cannot be read gives no warning.
        let Ok(labels) = self.namespace_labels(cluster, request.namespace).await else { return Ok(()) };
        let policies = self.config.policies(&labels);
        self.warn(&policies, &PodView { metadata: &template["metadata"], spec: &template["spec"] }, warnings);
        Ok(())
    }

    fn warn(&self, policies: &Policies, view: &PodView, warnings: &Warnings) {
        let warned = standards::evaluate(policies.warn.level, policies.warn.version.minor(), view);
        if !warned.is_empty() {
            warnings.push(format!("would violate PodSecurity \"{}\": {}", policies.warn, standards::describe(&warned)));
        }
    }

    fn exempt_runtime_class(&self, spec: &Value) -> bool {
        spec["runtimeClassName"]
            .as_str()
            .is_some_and(|class| self.config.exempt_runtime_classes.iter().any(|c| c == class))
    }

    /// Namespaces: their labels must name levels and versions (a 422 otherwise; on an update, only when the update
    /// makes them wrong in a new way).
    fn check_namespace(&self, request: &Request<'_>, namespace: &Value) -> Result<()> {
        let errors = self.config.policies(&namespace["metadata"]["labels"]).errors;
        if errors.is_empty() {
            return Ok(());
        }
        if let Some(old) = request.old
            && self.config.policies(&old["metadata"]["labels"]).errors == errors
        {
            return Ok(());
        }
        Err(ApiError::invalid(request.info, request.name, errors))
    }
}

impl Validating for PodSecurity {
    fn handles(&self, request: &Request<'_>) -> bool {
        let info = request.info;
        let checked = (info.group.is_empty() && matches!(info.plural.as_str(), "namespaces" | "pods"))
            || template_path(info).is_some();
        checked && request.operation != Operation::Delete && !self.config.exempt_users.contains(&request.user.name)
    }

    async fn validate(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &Value) -> Result<()> {
        let (info, warnings) = (request.info, request.warnings);
        if info.group.is_empty() && info.plural == "namespaces" {
            return self.check_namespace(request, object);
        }
        if self.config.exempt_namespaces.iter().any(|n| n == request.namespace) {
            return Ok(());
        }
        if info.group.is_empty() && info.plural == "pods" {
            return self.check_pod(cluster, request, object, warnings).await;
        }
        match template_path(info) {
            Some(path) => self.check_template(cluster, request, path, object, warnings).await,
            None => Ok(()),
        }
    }
}
