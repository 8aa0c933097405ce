//! What a container needs before its process starts: its volumes written out under the pod's directory, its
//! environment resolved (literals, ConfigMaps, Secrets, the downward API), its command line expanded, and the host
//! directory each of its `volumeMounts` binds into its sandbox ([`super::sandbox`]).

use super::paths;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, ObjectFieldSelector, PersistentVolumeClaim, Pod,
    ResourceFieldSelector, Secret, Service, Volume,
};
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::expand::expand;

/// A failure to prepare a container, worded for the pod's status (`reason`, `message`).
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// A ConfigMap, Secret or key the pod needs (and did not mark optional) does not exist.
    #[error("{0}")]
    Config(String),
    /// The API server could not be asked.
    #[error("reading from the API server: {0}")]
    Api(#[from] kube::Error),
    /// Writing a volume failed.
    #[error("writing volume files: {0}")]
    Io(#[from] std::io::Error),
    /// A volume cannot be mounted yet: a claim that does not exist in the pod's namespace, or is not Bound. The pod
    /// waits (`ContainerCreating`), with a `FailedMount` Event, as the kubelet's volume manager does.
    #[error("Unable to attach or mount volumes: unmounted volumes=[{volume}]: {message}")]
    Mount { volume: String, message: String },
    /// The pod's network namespace could not be set up: the pod waits (`ContainerCreating`), with a
    /// `FailedCreatePodSandBox` Event, as the kubelet's does.
    #[error("Failed to create pod sandbox: {0}")]
    Network(String),
    /// The image could not be pulled (or found, where the pull policy is `Never`).
    #[error("{message}")]
    Pull {
        /// The image as the container names it.
        image: String,
        message: String,
        /// `ErrImagePull`, or `ErrImageNeverPull` for an image a `Never` policy does not let the node fetch.
        reason: &'static str,
    },
}

impl PrepareError {
    /// The container waiting reason Kubernetes uses for this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            PrepareError::Config(_) | PrepareError::Api(_) => "CreateContainerConfigError",
            PrepareError::Io(_) => "CreateContainerError",
            PrepareError::Pull { reason, .. } => reason,
            PrepareError::Mount { .. } | PrepareError::Network(_) => "ContainerCreating",
        }
    }
}

/// How a container's process is started.
#[derive(Clone, Debug, Default)]
pub struct Launch {
    /// The host executable standing for the image's entrypoint (mounted into the sandbox at the same path).
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// In the container.
    pub working_dir: Option<PathBuf>,
    pub mounts: Vec<VolumeMount>,
    /// The sandbox the process runs in, once [`super::Runtime`] has made it.
    pub sandbox: Option<std::sync::Arc<super::sandbox::Sandboxed>>,
    /// The image the container runs from, when it comes from the node's image store; `program` is then a path (or a
    /// name looked up on `PATH`) inside it. Without one, `program` is an allowlisted host executable.
    pub image: Option<ImageRoot>,
}

/// A container's root filesystem from an image.
#[derive(Clone, Debug)]
pub struct ImageRoot {
    /// The image's layers, unpacked for the pod's user range.
    pub rootfs: PathBuf,
    /// The image's `User` when it is numeric (`uid` or `uid:gid`): who the container runs as unless the pod says.
    pub user: Option<(u32, Option<u32>)>,
    /// `<registry>/<repository>@<manifest digest>`, as the kubelet reports `imageID`.
    pub id: String,
    /// Where the container's writable layer over the image lives ([`super::layer::dir`]).
    pub layer: PathBuf,
}

/// One of a container's `volumeMounts`: where in the container, from which host directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeMount {
    /// `mountPath`.
    pub path: String,
    /// The volume's directory on this machine (with its `subPath`).
    pub dir: PathBuf,
    /// `readOnly`, and always for ConfigMap, Secret, downward API and projected volumes (as the kubelet mounts them).
    pub read_only: bool,
}

/// The facts about the pod the downward API exposes, once it has an address.
pub struct PodFacts<'a> {
    pub pod: &'a Pod,
    pub pod_ip: &'a str,
    pub host_ip: &'a str,
    /// The node's allocatable CPU (cores) and memory (bytes): the value of a limit that is not set.
    pub node_cpu: f64,
    pub node_memory: f64,
}

/// Reads ConfigMaps, Secrets and Services of the pod's namespace, each once, and asks for its ServiceAccount's
/// tokens; remembers when the first token it got must be renewed.
pub struct Sources {
    client: Client,
    namespace: String,
    config_maps: BTreeMap<String, Option<ConfigMap>>,
    secrets: BTreeMap<String, Option<Secret>>,
    services: Option<Vec<Service>>,
    /// When the earliest token asked for so far must be asked for again.
    pub renew_tokens_at: Option<std::time::SystemTime>,
    /// Who the files of a running pod's volumes belong to, when they are written again while it runs.
    pub owner: Option<paths::Owner>,
    /// Whether projected tokens are asked for (at start, and when one is due for renewal), or left as they are.
    pub tokens: bool,
    /// The capacity of each claim the pod's volumes name, by claim name, as [`write_volumes`] found them Bound.
    pub claim_capacities: BTreeMap<String, super::storage::Limit>,
}

/// The longest a projected token is kept before it is asked for again, whatever it is valid for (the kubelet's
/// token manager's `maxTTL`).
const TOKEN_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// When a token valid for `seconds` from `issued` is renewed: after 80% of its life, or a day, as the kubelet's token
/// manager does (`requiresRefresh`, 1.33).
pub fn renew_at(issued: std::time::SystemTime, seconds: i64) -> std::time::SystemTime {
    let life = std::time::Duration::from_secs(seconds.max(0).unsigned_abs());
    issued + (life / 5).saturating_mul(4).min(TOKEN_MAX_AGE)
}

impl Sources {
    pub fn new(client: Client, namespace: &str) -> Sources {
        Sources {
            client,
            namespace: namespace.into(),
            config_maps: BTreeMap::new(),
            secrets: BTreeMap::new(),
            services: None,
            renew_tokens_at: None,
            owner: None,
            tokens: true,
            claim_capacities: BTreeMap::new(),
        }
    }

    /// A token of the pod's ServiceAccount for a projected volume: asked of the API server (TokenRequest) for
    /// `audience` (the API server's own when empty), valid for `seconds`, and bound to the pod, so that it stops
    /// working once the pod is deleted.
    pub async fn token(&mut self, pod: &Pod, audience: &str, seconds: i64) -> Result<String, kube::Error> {
        use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
        let account = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or("default".into());
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: if audience.is_empty() { Vec::new() } else { vec![audience.to_string()] },
                expiration_seconds: Some(seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(pod.name_any()),
                    uid: pod.uid(),
                }),
            },
            ..Default::default()
        };
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let asked = std::time::SystemTime::now();
        let answer = accounts.create_token_request(&account, &Default::default(), &request).await?;
        let granted = answer.spec.expiration_seconds.unwrap_or(seconds);
        let renew = renew_at(asked, granted);
        self.renew_tokens_at = Some(self.renew_tokens_at.map_or(renew, |at| at.min(renew)));
        Ok(answer.status.map(|s| s.token).unwrap_or_default())
    }

    /// The Services whose variables a pod gets, as the kubelet picks them: those of the pod's namespace (with
    /// `enableServiceLinks`, the default), and `kubernetes` of `default` always.
    async fn services(&mut self, links: bool) -> Result<Vec<Service>, kube::Error> {
        if self.services.is_none() {
            let mut services = Vec::new();
            if links {
                let api: Api<Service> = Api::namespaced(self.client.clone(), &self.namespace);
                services = api.list(&Default::default()).await?.items;
            }
            // The API server's Service, unless the namespace has its own `kubernetes` (which then wins).
            if !services.iter().any(|s| s.metadata.name.as_deref() == Some("kubernetes")) {
                let api: Api<Service> = Api::namespaced(self.client.clone(), "default");
                services.extend(api.get_opt("kubernetes").await?);
            }
            self.services = Some(services);
        }
        Ok(self.services.clone().unwrap_or_default())
    }

    /// ConfigMap `name` as key → bytes (data and binaryData), or `None` when it does not exist.
    async fn config_map(&mut self, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, kube::Error> {
        if !self.config_maps.contains_key(name) {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
            self.config_maps.insert(name.into(), api.get_opt(name).await?);
        }
        Ok(self.config_maps[name].as_ref().map(|c| {
            let text = c.data.iter().flatten().map(|(k, v)| (k.clone(), v.clone().into_bytes()));
            text.chain(c.binary_data.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone()))).collect()
        }))
    }

    /// The claim `name` of the pod's namespace, read afresh (a claim is bound a moment after it is made).
    pub async fn claim(&mut self, name: &str) -> Result<Option<PersistentVolumeClaim>, kube::Error> {
        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &self.namespace).get_opt(name).await
    }

    /// Secret `name` as key → bytes, or `None` when it does not exist.
    pub async fn secret(&mut self, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, kube::Error> {
        if !self.secrets.contains_key(name) {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
            self.secrets.insert(name.into(), api.get_opt(name).await?);
        }
        Ok(self.secrets[name].as_ref().map(|s| {
            let text = s.string_data.iter().flatten().map(|(k, v)| (k.clone(), v.clone().into_bytes()));
            s.data.iter().flatten().map(|(k, ByteString(v))| (k.clone(), v.clone())).chain(text).collect()
        }))
    }
}

/// `metadata.name`, `status.podIP` and the other fields `fieldRef` may name.
fn field(facts: &PodFacts, selector: &ObjectFieldSelector) -> Result<String, PrepareError> {
    let pod = facts.pod;
    let path = selector.field_path.as_str();
    let quoted = |prefix: &str| path.strip_prefix(prefix).and_then(|r| r.strip_suffix("']")).map(str::to_string);
    let value = match path {
        "metadata.name" => pod.name_any(),
        "metadata.namespace" => pod.namespace().unwrap_or_default(),
        "metadata.uid" => pod.uid().unwrap_or_default(),
        "spec.nodeName" => pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        "status.podIP" | "status.podIPs" => facts.pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.to_string(),
        "metadata.labels" | "metadata.annotations" => {
            let map = if path == "metadata.labels" { pod.labels() } else { pod.annotations() };
            map.iter().map(|(k, v)| format!("{k}={v:?}")).collect::<Vec<_>>().join("\n")
        }
        _ => {
            if let Some(key) = quoted("metadata.labels['") {
                pod.labels().get(&key).cloned().unwrap_or_default()
            } else if let Some(key) = quoted("metadata.annotations['") {
                pod.annotations().get(&key).cloned().unwrap_or_default()
            } else {
                return Err(PrepareError::Config(format!("unsupported fieldRef {path:?}")));
            }
        }
    };
    Ok(value)
}

/// `limits.cpu`, `requests.memory` and the other resources `resourceFieldRef` may name, in units of its divisor
/// (rounded up, as the kubelet does); a limit that is not set is the node's allocatable.
fn resource(facts: &PodFacts, container: &Container, selector: &ResourceFieldSelector) -> Result<String, PrepareError> {
    let resources = container.resources.clone().unwrap_or_default();
    let (kind, name) = selector
        .resource
        .split_once('.')
        .ok_or_else(|| PrepareError::Config(format!("unsupported resourceFieldRef {:?}", selector.resource)))?;
    let set = match kind {
        "limits" => resources.limits.as_ref().and_then(|l| l.get(name)),
        "requests" => resources.requests.as_ref().and_then(|r| r.get(name)),
        _ => None,
    };
    let value = match (set, name) {
        (Some(quantity), _) => crate::quantity::parse(&quantity.0),
        (None, "cpu") if kind == "limits" => facts.node_cpu,
        (None, "memory") if kind == "limits" => facts.node_memory,
        (None, "cpu" | "memory" | "ephemeral-storage") => 0.0,
        _ => return Err(PrepareError::Config(format!("unsupported resourceFieldRef {:?}", selector.resource))),
    };
    let divisor = selector.divisor.as_ref().map(|d| crate::quantity::parse(&d.0)).filter(|d| *d > 0.0).unwrap_or(1.0);
    Ok(format!("{}", (value / divisor).ceil() as i64))
}

/// A Service's variables, as the kubelet sets them (Docker links style): `<NAME>_SERVICE_HOST`, `_SERVICE_PORT` and
/// `_SERVICE_PORT_<PORT NAME>`, `<NAME>_PORT` and `<NAME>_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR]`. Services without a
/// ClusterIP (headless) have none.
pub fn service_variables(service: &Service) -> Vec<(String, String)> {
    let Some(spec) = &service.spec else { return Vec::new() };
    let Some(ip) = spec.cluster_ip.as_deref().filter(|ip| !ip.is_empty() && *ip != "None") else { return Vec::new() };
    let name = service.metadata.name.clone().unwrap_or_default().to_uppercase().replace('-', "_");
    let ports = spec.ports.clone().unwrap_or_default();
    let Some(first) = ports.first() else { return Vec::new() };
    let mut variables = vec![
        (format!("{name}_SERVICE_HOST"), ip.to_string()),
        (format!("{name}_SERVICE_PORT"), first.port.to_string()),
    ];
    for port in &ports {
        if let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            let port_name = port_name.to_uppercase().replace('-', "_");
            variables.push((format!("{name}_SERVICE_PORT_{port_name}"), port.port.to_string()));
        }
    }
    let protocol = |p: &k8s_openapi::api::core::v1::ServicePort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
    variables.push((format!("{name}_PORT"), format!("{}://{ip}:{}", protocol(first).to_lowercase(), first.port)));
    for port in &ports {
        let proto = protocol(port);
        let prefix = format!("{name}_PORT_{}_{proto}", port.port);
        variables.push((prefix.clone(), format!("{}://{ip}:{}", proto.to_lowercase(), port.port)));
        variables.push((format!("{prefix}_PROTO"), proto.to_lowercase()));
        variables.push((format!("{prefix}_PORT"), port.port.to_string()));
        variables.push((format!("{prefix}_ADDR"), ip.to_string()));
    }
    variables
}

/// The container's environment, in order: service links, then `envFrom`, then `env`, each value expanded against what
/// came before.
async fn environment(
    facts: &PodFacts<'_>,
    container: &Container,
    sources: &mut Sources,
) -> Result<Vec<(String, String)>, PrepareError> {
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, name: String, value: String| {
        env.retain(|(n, _)| *n != name);
        env.push((name, value));
    };
    // Service links first: what the container declares wins over them.
    let links = facts.pod.spec.as_ref().and_then(|s| s.enable_service_links).unwrap_or(true);
    for service in sources.services(links).await? {
        for (name, value) in service_variables(&service) {
            set(&mut env, name, value);
        }
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (values, what, optional) = if let Some(reference) = &from.config_map_ref {
            (sources.config_map(&reference.name).await?, format!("configmap {:?}", reference.name), reference.optional)
        } else if let Some(reference) = &from.secret_ref {
            (sources.secret(&reference.name).await?, format!("secret {:?}", reference.name), reference.optional)
        } else {
            continue;
        };
        match values {
            Some(values) => {
                for (key, value) in values {
                    set(&mut env, format!("{prefix}{key}"), String::from_utf8_lossy(&value).into_owned());
                }
            }
            None if optional == Some(true) => {}
            None => return Err(PrepareError::Config(format!("{what} not found"))),
        }
    }
    for var in container.env.iter().flatten() {
        let value = if let Some(source) = &var.value_from {
            let keyed =
                |values: Option<BTreeMap<String, Vec<u8>>>, what: &str, key: &str, optional: Option<bool>| match values
                    .as_ref()
                    .and_then(|v| v.get(key))
                {
                    Some(value) => Ok(Some(String::from_utf8_lossy(value).into_owned())),
                    None if optional == Some(true) => Ok(None),
                    None if values.is_none() => Err(PrepareError::Config(format!("{what} not found"))),
                    None => Err(PrepareError::Config(format!("couldn't find key {key} in {what}"))),
                };
            if let Some(selector) = &source.field_ref {
                Some(field(facts, selector)?)
            } else if let Some(selector) = &source.resource_field_ref {
                Some(resource(facts, container, selector)?)
            } else if let Some(key) = &source.config_map_key_ref {
                let values = sources.config_map(&key.name).await?;
                keyed(values, &format!("configmap {:?}", key.name), &key.key, key.optional)?
            } else if let Some(key) = &source.secret_key_ref {
                let values = sources.secret(&key.name).await?;
                keyed(values, &format!("secret {:?}", key.name), &key.key, key.optional)?
            } else {
                None
            }
        } else {
            let known: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            Some(expand(var.value.as_deref().unwrap_or(""), |name| known.get(name).map(|v| v.to_string())))
        };
        if let Some(value) = value {
            set(&mut env, var.name.clone(), value);
        }
    }
    Ok(env)
}

/// Writes `items` of `values` (all keys when `items` is unset) into `dir`; a missing key fails unless optional.
fn write_keys(
    dir: &Path,
    values: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    what: &str,
    optional: bool,
    owner: Option<paths::Owner>,
) -> Result<(), PrepareError> {
    let chosen: Vec<(String, String, String)> = match items {
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| (item.key.clone(), item.path.clone(), format!("items[{i}].path")))
            .collect(),
        None => values.keys().map(|k| (k.clone(), k.clone(), format!("the key of {what}"))).collect(),
    };
    for (key, path, field) in chosen {
        let path = paths::relative(&path, &field)?;
        match values.get(&key) {
            Some(value) => paths::write_beneath_as(dir, path, value, owner)?,
            None if optional => {}
            None => return Err(PrepareError::Config(format!("couldn't find key {key} in {what}"))),
        }
    }
    Ok(())
}

/// Writes a ConfigMap's or Secret's keys (`values`, `None` when it does not exist) into `dir`.
fn write_source(
    dir: &Path,
    values: Option<BTreeMap<String, Vec<u8>>>,
    items: Option<&Vec<KeyToPath>>,
    what: &str,
    optional: bool,
    owner: Option<paths::Owner>,
) -> Result<(), PrepareError> {
    match values {
        Some(values) => write_keys(dir, &values, items, what, optional, owner),
        None if optional => Ok(()),
        None => Err(PrepareError::Config(format!("{what} not found"))),
    }
}

fn downward_items(
    dir: &Path,
    facts: &PodFacts,
    items: &[DownwardAPIVolumeFile],
    containers: &[Container],
    owner: Option<paths::Owner>,
) -> Result<(), PrepareError> {
    for (i, item) in items.iter().enumerate() {
        let path = paths::relative(&item.path, &format!("downwardAPI items[{i}].path"))?;
        let value = if let Some(selector) = &item.field_ref {
            field(facts, selector)?
        } else if let Some(selector) = &item.resource_field_ref {
            let name = selector.container_name.as_deref().unwrap_or("");
            let container = containers.iter().find(|c| c.name == name).or(containers.first());
            resource(facts, container.unwrap_or(&Container::default()), selector)?
        } else {
            continue;
        };
        paths::write_beneath_as(dir, path, value.as_bytes(), owner)?;
    }
    Ok(())
}

/// Where each volume of the pod lives on this machine: under `pod_dir/volumes/<name>`, except claims, which live in
/// `claims_dir/<namespace>/<claim>` so that they outlive the pod. Names that are not one directory each are refused
/// (a claim named `../other-namespace/data` must not reach another namespace's data), and so is `hostPath`: this
/// node runs no pod with the host's files.
pub fn volume_dir(pod: &Pod, volume: &Volume, pod_dir: &Path, claims_dir: &Path) -> Result<PathBuf, PrepareError> {
    if volume.host_path.is_some() {
        return Err(PrepareError::Config(format!(
            "volume {:?}: hostPath volumes are not run on this node",
            volume.name
        )));
    }
    let name = paths::name(&volume.name, "volume name")?;
    Ok(match &volume.persistent_volume_claim {
        Some(claim) => {
            let namespace = pod.namespace().unwrap_or_default();
            claims_dir
                .join(paths::name(&namespace, "namespace")?)
                .join(paths::name(&claim.claim_name, &format!("volume {name:?}: claimName"))?)
        }
        None => pod_dir.join("volumes").join(name),
    })
}

/// Writes every volume of the pod (ConfigMap, Secret, projected, downward API) and creates the directories of the
/// others (emptyDir, claims); a pod with a `hostPath` volume or a name or path that would leave its directories is
/// refused ([`volume_dir`], [`paths`]).
///
/// Run again while the pod runs (`refresh`), it writes only the first four, each file that changed given at once to
/// `sources.owner`, as the kubelet keeps such volumes up to date.
pub async fn write_volumes(
    facts: &PodFacts<'_>,
    sources: &mut Sources,
    pod_dir: &Path,
    claims_dir: &Path,
    refresh: bool,
) -> Result<(), PrepareError> {
    let spec = facts.pod.spec.clone().unwrap_or_default();
    let owner = sources.owner;
    // Every claim first: the pod runs once each is a Bound claim of its own namespace, and until then nothing of it
    // is made (not even a claim's directory).
    for volume in spec.volumes.iter().flatten().filter(|_| !refresh) {
        if let Some(source) = &volume.persistent_volume_claim {
            let mount = |message: String| PrepareError::Mount { volume: volume.name.clone(), message };
            paths::name(&source.claim_name, &format!("volume {:?}: claimName", volume.name))?;
            let claim = sources.claim(&source.claim_name).await?;
            let Some(claim) = claim else {
                return Err(mount(format!("persistentvolumeclaim {:?} not found", source.claim_name)));
            };
            let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
            let bound_to = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap_or_default();
            if phase != "Bound" || bound_to.is_empty() || claim.metadata.deletion_timestamp.is_some() {
                return Err(mount(format!("persistentvolumeclaim {:?} is not bound", source.claim_name)));
            }
            // Its directory is held to this size (`storage`): a claim without one is not mounted.
            let Some(capacity) = super::storage::capacity(&claim) else {
                return Err(mount(format!("persistentvolumeclaim {:?} has no capacity", source.claim_name)));
            };
            sources.claim_capacities.insert(source.claim_name.clone(), capacity);
        }
    }
    for volume in spec.volumes.iter().flatten() {
        let written = volume.config_map.is_some()
            || volume.secret.is_some()
            || volume.downward_api.is_some()
            || volume.projected.is_some();
        if refresh && !written {
            continue;
        }
        let dir = volume_dir(facts.pod, volume, pod_dir, claims_dir)?;
        std::fs::create_dir_all(&dir)?;
        if let Some(source) = &volume.config_map {
            let values = sources.config_map(&source.name).await?;
            let what = format!("configmap {:?}", source.name);
            write_source(&dir, values, source.items.as_ref(), &what, source.optional == Some(true), owner)?;
        } else if let Some(source) = &volume.secret {
            let name = source.secret_name.clone().unwrap_or_default();
            let values = sources.secret(&name).await?;
            let what = format!("secret {name:?}");
            write_source(&dir, values, source.items.as_ref(), &what, source.optional == Some(true), owner)?;
        } else if let Some(source) = &volume.downward_api {
            downward_items(&dir, facts, source.items.as_deref().unwrap_or_default(), &spec.containers, owner)?;
        } else if let Some(projected) = &volume.projected {
            for source in projected.sources.iter().flatten() {
                if let Some(source) = &source.config_map {
                    let values = sources.config_map(&source.name).await?;
                    let what = format!("configmap {:?}", source.name);
                    write_source(&dir, values, source.items.as_ref(), &what, source.optional == Some(true), owner)?;
                } else if let Some(source) = &source.secret {
                    let values = sources.secret(&source.name).await?;
                    let what = format!("secret {:?}", source.name);
                    write_source(&dir, values, source.items.as_ref(), &what, source.optional == Some(true), owner)?;
                } else if let Some(source) = &source.downward_api {
                    let items = source.items.as_deref().unwrap_or_default();
                    downward_items(&dir, facts, items, &spec.containers, owner)?;
                } else if let Some(source) = source.service_account_token.as_ref().filter(|_| sources.tokens) {
                    let path = paths::relative(&source.path, "serviceAccountToken path")?;
                    let audience = source.audience.as_deref().unwrap_or_default();
                    let token = sources.token(facts.pod, audience, source.expiration_seconds.unwrap_or(3600)).await?;
                    paths::write_beneath_as(&dir, path, token.as_bytes(), owner)?;
                }
            }
        }
    }
    Ok(())
}

/// The mounts of `container` (index `index` among the pod's init containers and containers). A `subPath` is made if
/// missing, and refused if any part of it is a symbolic link (the pod's own processes may have left one in an
/// emptyDir or claim, pointing anywhere on the host); it is then held by a file descriptor opened one component at
/// a time without following links, and bind-mounted from that descriptor onto
/// `<pod dir>/volume-subpaths/<volume>/<container index>/<mount index>`, which the OCI runtime mounts: a link another
/// container of the pod swaps in afterwards changes nothing (kubelet's subPath handling).
pub fn mounts(
    pod: &Pod,
    container: &Container,
    index: usize,
    pod_dir: &Path,
    claims_dir: &Path,
) -> Result<Vec<VolumeMount>, PrepareError> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
    let mut mounts = Vec::new();
    for (mount_index, mount) in container.volume_mounts.iter().flatten().enumerate() {
        let Some(volume) = volumes.iter().find(|v| v.name == mount.name) else {
            return Err(PrepareError::Config(format!("volumeMounts {:?}: no volume of that name", mount.name)));
        };
        let mut dir = volume_dir(pod, volume, pod_dir, claims_dir)?;
        if let Some(sub) = mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
            let field = format!("volumeMounts[{:?}].subPath", mount.name);
            let held = super::subpath::open_beneath(&dir, paths::relative(sub, &field)?).map_err(|e| match e {
                super::subpath::Refused::Link => {
                    PrepareError::Config(format!("{field} {sub:?} leads through a symbolic link"))
                }
                super::subpath::Refused::NotDirectory => {
                    PrepareError::Config(format!("{field} {sub:?} is not a directory"))
                }
                super::subpath::Refused::Io(error) => PrepareError::Io(error),
            })?;
            let volume_name = paths::name(&mount.name, "volume name")?;
            let target =
                pod_dir.join("volume-subpaths").join(volume_name).join(index.to_string()).join(mount_index.to_string());
            super::subpath::bind(&held, &target)?;
            dir = target;
        }
        let projected = volume.config_map.is_some()
            || volume.secret.is_some()
            || volume.downward_api.is_some()
            || volume.projected.is_some();
        mounts.push(VolumeMount {
            path: mount.mount_path.clone(),
            dir,
            read_only: projected || mount.read_only == Some(true),
        });
    }
    Ok(mounts)
}

/// Where `container` stands among the pod's init containers, then containers.
fn spec_index(pod: &Pod, container: &Container) -> usize {
    let spec = pod.spec.clone().unwrap_or_default();
    let all: Vec<&Container> = spec.init_containers.iter().flatten().chain(spec.containers.iter()).collect();
    all.iter().position(|c| c.name == container.name).unwrap_or(0)
}

/// Everything needed to start `container` of the pod as a process of `program`: `command[0]` stands for the image's
/// entrypoint and is replaced by `program`; the rest of `command` and `args` follow, expanded.
pub async fn launch(
    facts: &PodFacts<'_>,
    container: &Container,
    program: &Path,
    image: Option<(&crate::images::Image, PathBuf)>,
    sources: &mut Sources,
    pod_dir: &Path,
    claims_dir: &Path,
) -> Result<Launch, PrepareError> {
    let index = spec_index(facts.pod, container);
    let mounts = mounts(facts.pod, container, index, pod_dir, claims_dir)?;
    let mut env = environment(facts, container, sources).await?;
    let known: BTreeMap<String, String> = env.iter().cloned().collect();
    let lookup = |name: &str| known.get(name).cloned();
    let hostname = facts.pod.spec.as_ref().and_then(|s| s.hostname.clone()).unwrap_or_else(|| facts.pod.name_any());
    if !env.iter().any(|(k, _)| k == "HOSTNAME") {
        env.push(("HOSTNAME".into(), hostname));
    }
    let mut working_dir = container.working_dir.as_deref().map(PathBuf::from);
    let Some((image, rootfs)) = image else {
        // An allowlisted executable stands for the image's entrypoint: the command's first word names it.
        let mut args: Vec<String> = container.command.iter().flatten().skip(1).cloned().collect();
        args.extend(container.args.iter().flatten().cloned());
        let args = args.iter().map(|a| expand(a, lookup)).collect();
        return Ok(Launch {
            program: program.to_path_buf(),
            args,
            env,
            working_dir,
            mounts,
            sandbox: None,
            image: None,
        });
    };
    // From an image, as the kubelet combines them: `command` replaces the entrypoint (and drops the image's `Cmd`),
    // `args` replaces `Cmd`.
    let config = image.config.config().clone().unwrap_or_default();
    let entrypoint = config.entrypoint().clone().unwrap_or_default();
    let cmd = config.cmd().clone().unwrap_or_default();
    let mut words: Vec<String> = match (&container.command, &container.args) {
        (Some(command), Some(args)) => command.iter().chain(args).cloned().collect(),
        (Some(command), None) => command.clone(),
        (None, Some(args)) => entrypoint.iter().chain(args).cloned().collect(),
        (None, None) => entrypoint.iter().chain(&cmd).cloned().collect(),
    };
    if words.is_empty() {
        return Err(PrepareError::Config(format!(
            "container {:?}: the image {} has no entrypoint or command, and the container gives none",
            container.name, image.reference
        )));
    }
    let program = PathBuf::from(expand(&words.remove(0), lookup));
    let args = words.iter().map(|a| expand(a, lookup)).collect();
    // The image's environment comes first: what the pod sets wins.
    let mut from_image: Vec<(String, String)> = config
        .env()
        .iter()
        .flatten()
        .filter_map(|pair| pair.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .filter(|(k, _)| !env.iter().any(|(n, _)| n == k))
        .collect();
    from_image.append(&mut env);
    if working_dir.is_none() {
        working_dir = config.working_dir().as_deref().filter(|d| !d.is_empty()).map(PathBuf::from);
    }
    let user = config.user().as_deref().and_then(|user| {
        let (uid, gid) = user.split_once(':').map_or((user, None), |(u, g)| (u, Some(g)));
        Some((uid.parse().ok()?, gid.and_then(|g| g.parse().ok())))
    });
    Ok(Launch {
        program,
        args,
        env: from_image,
        working_dir,
        mounts,
        sandbox: None,
        image: Some(ImageRoot {
            rootfs,
            user,
            id: image.image_id(),
            layer: super::layer::dir(pod_dir, super::paths::name(&container.name, "container name")?),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_become_variables_as_the_kubelet_makes_them() {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-api"},
            "spec": {"clusterIP": "10.0.0.7", "ports": [{"name": "http", "port": 80}, {"port": 53, "protocol": "UDP"}]},
        }))
        .unwrap();
        let variables: BTreeMap<String, String> = service_variables(&service).into_iter().collect();
        assert_eq!(variables["WEB_API_SERVICE_HOST"], "10.0.0.7");
        assert_eq!(variables["WEB_API_SERVICE_PORT"], "80");
        assert_eq!(variables["WEB_API_SERVICE_PORT_HTTP"], "80");
        assert_eq!(variables["WEB_API_PORT"], "tcp://10.0.0.7:80");
        assert_eq!(variables["WEB_API_PORT_53_UDP"], "udp://10.0.0.7:53");
        assert_eq!(variables["WEB_API_PORT_53_UDP_ADDR"], "10.0.0.7");
        let headless: Service =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}}))
                .unwrap();
        assert!(service_variables(&headless).is_empty());
    }
}
