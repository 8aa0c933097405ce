//! Pod networks: where a pod's processes talk from.
//!
//! - **Bridged** (any pod range that is not loopback, as `nest up`'s `10.128.0.0/16`): each pod gets a network
//!   namespace of its own, `/run/netns/nest-<pod uid>`, made by the node and joined by every container of the pod.
//!   CNI plugins (containernetworking's, as the kubelet's runtime calls them; Debian's `containernetworking-plugins`)
//!   set it up, one after the other with the previous one's result: `loopback`; `bridge` with `static` IPAM, which
//!   joins it to the node's bridge `nest-<hash of the node's name>` with a veth pair, its `eth0` holding the address
//!   the node picked from the range and a default route through the bridge's address (the range's first); then
//!   `tuning`, which lets a container's root (a user of its own user namespace, without privileges over the network
//!   namespace) bind ports below 1024. The node's own processes reach pods through the bridge; pods reach each other
//!   there, the Service addresses the node's proxy serves on this machine (see `proxy.rs`), and the bridge's address,
//!   but not what listens on the host's loopback.
//! - **Shared** (a loopback pod range, as `127.1.0.0/16`): pods stay in the node's network namespace, each on its
//!   own loopback address — for machines without bridges, and nodes running inside a pod.
//!
//! The plugins' configuration is the node's policy (written once here); running them is a chain of commands with
//! the CNI environment (`CNI_COMMAND`, `CNI_NETNS`, …), their configuration on stdin and their result on stdout.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::Digest as _;

/// Where CNI plugins are looked for: Debian's directory, then the upstream one.
pub(crate) const PLUGIN_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];

/// The plugins a bridged node runs.
const PLUGINS: [&str; 4] = ["loopback", "bridge", "static", "tuning"];

/// The directory the plugins are taken from: the first that holds `bridge`.
fn plugin_dir() -> PathBuf {
    let found = PLUGIN_DIRS.iter().map(PathBuf::from).find(|dir| dir.join("bridge").is_file());
    found.unwrap_or_else(|| PathBuf::from(PLUGIN_DIRS[0]))
}

/// The first plugin a bridged node runs that `dir` lacks.
fn missing_plugin_in(dir: &Path) -> Option<&'static str> {
    PLUGINS.iter().copied().find(|p| !dir.join(p).is_file())
}

/// The first plugin a bridged node runs that this machine lacks (see [`crate::prerequisites`]).
pub fn missing_plugin() -> Option<&'static str> {
    missing_plugin_in(&plugin_dir())
}

/// A pod's network namespaces live here, as `ip netns` keeps them.
const NETNS_DIR: &str = "/run/netns";

/// How a node's pods are networked.
#[derive(Clone, Debug)]
pub enum Network {
    /// In the node's network namespace, each on its own loopback address.
    Shared,
    /// Each in its own network namespace on the node's bridge.
    Bridged(Bridge),
}

/// A node's bridge, and the plugins that put pods on it.
#[derive(Clone, Debug)]
pub struct Bridge {
    /// The bridge's interface name (at most 15 characters).
    pub name: String,
    /// The wall between tenants on this bridge.
    pub firewall: std::sync::Arc<crate::firewall::Firewall>,
    /// The bridge's address: pods' gateway, and the host as pods see it.
    pub gateway: Ipv4Addr,
    /// The pod range's prefix length.
    pub prefix: u8,
    /// The directory holding the CNI plugins.
    pub plugins: PathBuf,
}

/// What setting up or tearing down a pod's network failed at.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NetworkError(pub String);

impl Network {
    /// The network of node `node` whose pod range is `cidr`: shared for a loopback range, else bridged.
    pub fn for_range(node: &str, cidr: &str) -> Result<Network, NetworkError> {
        let bad = || NetworkError(format!("{cidr:?} is not an IPv4 range such as 10.128.0.0/16"));
        let (address, prefix) = cidr.split_once('/').ok_or_else(bad)?;
        let address: Ipv4Addr = address.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().ok().filter(|p| (8..=30).contains(p)).ok_or_else(bad)?;
        if address.is_loopback() {
            return Ok(Network::Shared);
        }
        let mask = u32::MAX << (32 - u32::from(prefix));
        let gateway = Ipv4Addr::from((u32::from(address) & mask) + 1);
        let hash = hex::encode(sha2::Sha256::digest(node.as_bytes()));
        let name = format!("nest-{}", &hash[..8]);
        let firewall = std::sync::Arc::new(crate::firewall::Firewall::new(&name));
        Ok(Network::Bridged(Bridge { name, firewall, gateway, prefix, plugins: plugin_dir() }))
    }

    /// The address pods reach this machine at, when they have their own network namespaces.
    pub fn host_address(&self) -> Option<Ipv4Addr> {
        match self {
            Network::Shared => None,
            Network::Bridged(bridge) => Some(bridge.gateway),
        }
    }

    /// Makes sure what pods will need is here: the plugins, the bridge with its address (which the plugins would
    /// otherwise make at the first pod, too late for what listens on it), and the wall between tenants on it, which
    /// lets every pod reach `shared`; and that no pod namespace is left on the bridge. Called when the node starts,
    /// before any pod. Says how to install what is missing.
    pub async fn prepare(&self, shared: &[crate::firewall::Shared]) -> Result<(), NetworkError> {
        let Network::Bridged(bridge) = self else { return Ok(()) };
        if let Some(missing) = missing_plugin_in(&bridge.plugins) {
            return Err(NetworkError(format!(
                "pods with a network of their own need the CNI plugin {missing:?} in {} or {} (Debian: apt-get \
                 install containernetworking-plugins; or give the node a loopback --pod-cidr to keep pods on the \
                 host's network)",
                PLUGIN_DIRS[0], PLUGIN_DIRS[1]
            )));
        }
        let address = format!("{}/{}", bridge.gateway, bridge.prefix);
        // Made unless an earlier run left it: asked of the kernel (the interface's sysfs entry), not read from `ip`'s
        // error text.
        if !std::path::Path::new("/sys/class/net").join(&bridge.name).exists() {
            ip(&["link", "add", "name", &bridge.name, "type", "bridge"])?;
        }
        ip(&["addr", "replace", &address, "dev", &bridge.name])?;
        ip(&["link", "set", &bridge.name, "up"])?;
        // The wall before any pod: what an earlier run left is replaced.
        bridge.firewall.install(shared).await.map_err(|e| NetworkError(e.to_string()))?;
        // Pods' namespaces left on the bridge by an earlier run that did not stop cleanly: nothing runs in them any
        // more (the node kills what an earlier run left before it starts pods, each in a new namespace), and their
        // addresses would be taken twice.
        self.sweep()
    }

    /// Deletes every pod namespace on this node's bridge: at start (what an earlier run left), and when the node
    /// stops (after its pods, for a pod whose start failed half-way may have left one).
    pub fn sweep(&self) -> Result<(), NetworkError> {
        let Network::Bridged(bridge) = self else { return Ok(()) };
        let out = std::process::Command::new("ip").args(["-o", "link", "show", "master", &bridge.name]).output();
        let listed = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        let mut words = listed.split_whitespace();
        while let Some(word) = words.next() {
            if word == "link-netns"
                && let Some(name) = words.next().filter(|n| n.starts_with("nest-"))
            {
                ip(&["netns", "delete", name])?;
            }
        }
        Ok(())
    }

    /// Makes pod `uid`'s network namespace with `address` on the bridge (afresh, should one be left from before);
    /// returns its path, or `None` for a shared network. The plugins' configuration is kept in `pod_dir`, for
    /// [`Network::remove`].
    pub async fn add(
        &self,
        uid: &str,
        address: Ipv4Addr,
        zone: &crate::firewall::Zone,
        egress_off: bool,
        pod_dir: &Path,
    ) -> Result<Option<PathBuf>, NetworkError> {
        let Network::Bridged(bridge) = self else { return Ok(None) };
        self.remove(uid, pod_dir).await;
        let name = namespace_name(uid)?;
        let chain = bridge.chain(address);
        std::fs::create_dir_all(pod_dir)
            .and_then(|()| std::fs::write(pod_dir.join("network.json"), serde_json::to_vec(&chain).unwrap_or_default()))
            .map_err(|e| NetworkError(format!("writing the pod's network configuration: {e}")))?;
        ip(&["netns", "add", &name])?;
        let netns = Path::new(NETNS_DIR).join(&name);
        let mut previous: Option<Value> = None;
        for (interface, config) in &chain {
            let mut config = config.clone();
            if let Some(result) = previous.take() {
                config["prevResult"] = result;
            }
            let result = bridge.run("ADD", uid, &netns, interface, &config).await;
            match result {
                Ok(result) => previous = Some(result).filter(|_| interface == "eth0"),
                Err(error) => {
                    self.remove(uid, pod_dir).await;
                    return Err(error);
                }
            }
        }
        // Into its zone before anything runs in it, by the veth the bridge plugin made (its result's interface
        // outside the namespace, other than the bridge).
        let port = previous.as_ref().and_then(|result| host_side(result, &bridge.name));
        if let Err(error) = bridge.firewall.admit(address, zone, egress_off, port.as_deref()).await {
            self.remove(uid, pod_dir).await;
            return Err(NetworkError(error.to_string()));
        }
        Ok(Some(netns))
    }

    /// Tears pod `uid`'s network namespace down (the plugins in reverse order, with the configuration they were
    /// given), if it has one.
    pub async fn remove(&self, uid: &str, pod_dir: &Path) {
        let Network::Bridged(bridge) = self else { return };
        let Ok(name) = namespace_name(uid) else { return };
        let netns = Path::new(NETNS_DIR).join(&name);
        if !netns.exists() {
            return;
        }
        let chain: Vec<(String, Value)> = std::fs::read(pod_dir.join("network.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        if let Some(address) = address_in(&chain)
            && let Err(error) = bridge.firewall.forget(address).await
        {
            tracing::warn!(pod = uid, %error, "taking a pod out of the network wall");
        }
        for (interface, config) in chain.iter().rev() {
            if let Err(error) = bridge.run("DEL", uid, &netns, interface, config).await {
                tracing::warn!(pod = uid, %error, "tearing down a pod's network");
            }
        }
        if let Err(error) = ip(&["netns", "delete", &name]) {
            tracing::warn!(pod = uid, %error, "removing a pod's network namespace");
        }
    }
}

impl Bridge {
    /// The plugins pod `address` is set up by, each with the interface it is for.
    fn chain(&self, address: Ipv4Addr) -> Vec<(String, Value)> {
        let version = "1.0.0";
        vec![
            ("lo".into(), json!({"cniVersion": version, "name": "nest", "type": "loopback"})),
            (
                "eth0".into(),
                json!({
                    "cniVersion": version, "name": "nest", "type": "bridge", "bridge": self.name,
                    "isGateway": true, "ipMasq": false, "hairpinMode": true,
                    "ipam": {
                        "type": "static",
                        "addresses": [{"address": format!("{address}/{}", self.prefix), "gateway": self.gateway.to_string()}],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                }),
            ),
            (
                "eth0".into(),
                json!({
                    "cniVersion": version, "name": "nest", "type": "tuning",
                    "sysctl": {"net.ipv4.ip_unprivileged_port_start": "0"},
                }),
            ),
        ]
    }

    /// Runs the plugin `config` names for `command` on `interface` of `netns`; returns its result.
    async fn run(
        &self,
        command: &str,
        uid: &str,
        netns: &Path,
        interface: &str,
        config: &Value,
    ) -> Result<Value, NetworkError> {
        use tokio::io::AsyncWriteExt as _;
        let plugin = config["type"].as_str().unwrap_or_default();
        let mut child = tokio::process::Command::new(self.plugins.join(plugin))
            .env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", uid)
            .env("CNI_NETNS", netns)
            .env("CNI_IFNAME", interface)
            .env("CNI_PATH", &self.plugins)
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| NetworkError(format!("running the CNI plugin {plugin}: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&serde_json::to_vec(config).unwrap_or_default()).await;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| NetworkError(format!("running the CNI plugin {plugin}: {e}")))?;
        let result: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if !out.status.success() {
            let message = result["msg"].as_str().map(str::to_string);
            let message = message.unwrap_or_else(|| String::from_utf8_lossy(&out.stderr).trim().to_string());
            return Err(NetworkError(format!("the CNI plugin {plugin} ({command} {interface}): {message}")));
        }
        Ok(result)
    }
}

/// The name of pod `uid`'s network namespace.
fn namespace_name(uid: &str) -> Result<String, NetworkError> {
    let plain = !uid.is_empty() && uid.len() <= 64 && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !plain {
        return Err(NetworkError(format!("{uid:?} is no pod UID")));
    }
    Ok(format!("nest-{uid}"))
}

/// The host side of a pod's veth, from the bridge plugin's result: the interface outside the pod's namespace that is
/// not the bridge.
fn host_side(result: &Value, bridge: &str) -> Option<String> {
    result["interfaces"].as_array()?.iter().find_map(|interface| {
        let name = interface["name"].as_str()?;
        (interface.get("sandbox").is_none_or(Value::is_null) && name != bridge).then(|| name.to_string())
    })
}

/// The pod's address in the plugins' configuration it was set up with.
fn address_in(chain: &[(String, Value)]) -> Option<Ipv4Addr> {
    chain.iter().find_map(|(_, config)| {
        let text = config["ipam"]["addresses"][0]["address"].as_str()?;
        text.split('/').next()?.parse().ok()
    })
}

/// Runs `ip ARGS` (iproute2).
fn ip(args: &[&str]) -> Result<(), NetworkError> {
    let out = std::process::Command::new("ip").args(args).output().map_err(|e| {
        NetworkError(format!("running ip (iproute2; Debian: apt-get install iproute2) for pods' networks: {e}"))
    })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return Ok(());
    }
    Err(NetworkError(format!("ip {}: {}", args.join(" "), stderr.trim())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_range_keeps_pods_on_the_host_and_any_other_gets_a_bridge() {
        assert!(matches!(Network::for_range("n", "127.1.0.0/16").unwrap(), Network::Shared));
        let Network::Bridged(bridge) = Network::for_range("nest-node-0", "10.128.0.0/16").unwrap() else {
            panic!("not bridged")
        };
        assert_eq!(bridge.gateway, Ipv4Addr::new(10, 128, 0, 1));
        assert_eq!(bridge.prefix, 16);
        assert!(bridge.name.starts_with("nest-") && bridge.name.len() <= 15, "{}", bridge.name);
        let other = Network::for_range("nest-node-1", "10.129.0.0/16").unwrap();
        assert!(matches!(other, Network::Bridged(b) if b.name != bridge.name), "two nodes, two bridges");
        assert!(Network::for_range("n", "10.0.0.0").is_err() && Network::for_range("n", "10.0.0.0/31").is_err());
    }

    #[test]
    fn namespace_names_come_from_pod_uids_only() {
        assert_eq!(namespace_name("6c1d2e0a-1b2c-4d5e-8f90-0a1b2c3d4e5f").unwrap().len(), 41);
        assert!(namespace_name("../../etc").is_err() && namespace_name("").is_err());
    }
}
