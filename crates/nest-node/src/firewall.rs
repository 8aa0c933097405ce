//! The wall between tenants on a node's pod network, kept with nftables.
//!
//! Every pod is in a *zone*: the platform's own pods (no tenant label) in zone 1, each tenant's pods — its
//! workloads, which the syncer labels, and its control plane, which the provider labels — in a zone of the tenant's
//! own ([`nest_core::tenancy::TENANT_LABEL`]). A pod reaches:
//!
//! - the pods of its own zone, on this bridge or another;
//! - the Services of its own zone (the node's service proxy serves them on this host, so they are reached as the
//!   host is);
//! - the platform's shared services on this host (the syncer's kubelet endpoints: see [`Shared`]);
//! - the world beyond the machine, unless its tenant's egress is off (`tenancy.nest.dev/egress: deny` on its pods,
//!   which only the syncer writes), and never link-local addresses (cloud metadata) or loopback;
//!
//! and nothing else: not another tenant's pods, control plane or Services, not the platform's pods, not what listens
//! on this host (the API server, kubelet ports, host services). The platform's pods reach everything, and the host
//! reaches every pod; replies to what is allowed are allowed (connection tracking). A pod's port of the bridge may
//! send only from the pod's own address, IPv4 and ARP, and nothing of IPv6: no pod takes another's address.
//!
//! The rules are written once, in `firewall.nft` (read it for the whole policy); they never change while the node
//! runs. What changes is the sets they look in: which address is in which zone, which Services are whose, which
//! veth holds which address. The node admits a pod's address into its zone before any of its processes start
//! ([`Firewall::admit`]), so that no packet of a tenant's pod is ever judged as the platform's; an address no zone
//! holds is dropped. A watch of every pod and Service ([`follow`]) keeps the zones of pods on other nodes and the
//! Services current. Each change is one `nft -f -` transaction.
//!
//! Pod-to-pod traffic on one bridge is judged in the `inet` family's forward hook, which sees bridged IPv4 when
//! `net.bridge.bridge-nf-call-iptables` is 1 (the kernel's `br_netfilter`, as Kubernetes networks require); the
//! guard against taken addresses is in the `bridge` family, by port.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, ResourceExt as _};
use nest_core::tenancy::TENANT_LABEL;

/// The label that turns a tenant's egress off (`deny`); the syncer sets it on a tenant's pods from its Cluster's
/// annotation of the same name, and a tenant cannot set it itself (the syncer does not copy `tenancy.nest.dev/`
/// metadata down).
pub const EGRESS_LABEL: &str = nest_core::tenancy::EGRESS;

/// The platform's zone: pods without a tenant.
const PLATFORM: u32 = 1;

/// What the firewall failed at.
#[derive(Debug, thiserror::Error)]
#[error("the network wall: {0}")]
pub struct FirewallError(pub String);

/// A service on this host every pod may reach: an address, a protocol and a range of ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shared {
    pub address: Ipv4Addr,
    pub protocol: Protocol,
    pub ports: std::ops::RangeInclusive<u16>,
}

/// A transport protocol, as nftables names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// Whose a pod or Service is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Zone {
    /// The platform's own.
    Platform,
    /// The tenant of this cluster key.
    Tenant(String),
}

impl Zone {
    /// The zone of an object with `labels`.
    pub fn of(labels: &BTreeMap<String, String>) -> Zone {
        match labels.get(TENANT_LABEL).filter(|key| !key.is_empty()) {
            Some(key) => Zone::Tenant(key.clone()),
            None => Zone::Platform,
        }
    }
}

/// A pod's place in the wall.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Member {
    zone: u32,
    /// The host side of its veth on this node's bridge, for a pod of this node.
    port: Option<String>,
}

/// What the kernel holds, as this node wrote it.
#[derive(Debug, Default)]
struct State {
    /// Zone numbers by tenant key; 2 and up.
    zones: HashMap<String, u32>,
    /// Addresses of pods, by address.
    pods: HashMap<Ipv4Addr, Member>,
    /// Tenants' Services, by ClusterIP.
    services: HashMap<Ipv4Addr, u32>,
    /// Zones whose egress is off, with the pods that say so.
    no_egress: BTreeMap<u32, BTreeSet<Ipv4Addr>>,
}

/// The wall of one node's bridge.
#[derive(Debug)]
pub struct Firewall {
    /// The bridge's interface.
    bridge: String,
    /// This node's tables (`inet` and `bridge`), named after the bridge.
    table: String,
    state: tokio::sync::Mutex<State>,
}

impl Firewall {
    /// The wall of `bridge`.
    pub fn new(bridge: &str) -> Firewall {
        let table = bridge.replace('-', "_");
        Firewall { bridge: bridge.to_string(), table, state: Default::default() }
    }

    /// Loads the rules, with empty sets but `shared`, replacing whatever an earlier run left; makes sure bridged
    /// traffic goes through them.
    pub async fn install(&self, shared: &[Shared]) -> Result<(), FirewallError> {
        bridged_traffic_filtered()?;
        let mut script = String::new();
        for family in ["inet", "bridge"] {
            // `add` makes the table if it is missing, so that `delete` always has one to delete.
            let _ = writeln!(script, "add table {family} {}\ndelete table {family} {}", self.table, self.table);
        }
        script.push_str(&self.rules());
        for shared in shared {
            let _ = writeln!(
                script,
                "add element inet {} shared {{ {} . {} . {}-{} }}",
                self.table,
                shared.address,
                shared.protocol.name(),
                shared.ports.start(),
                shared.ports.end()
            );
        }
        *self.state.lock().await = State::default();
        nft(&script).await
    }

    /// Removes this node's tables (when it stops, its pods stopped).
    pub async fn uninstall(&self) {
        let mut script = String::new();
        for family in ["inet", "bridge"] {
            let _ = writeln!(script, "add table {family} {}\ndelete table {family} {}", self.table, self.table);
        }
        if let Err(error) = nft(&script).await {
            tracing::warn!(%error, "removing the network wall");
        }
    }

    /// The rules, with this node's names.
    fn rules(&self) -> String {
        include_str!("firewall.nft").replace("@TABLE@", &self.table).replace("@BRIDGE@", &self.bridge)
    }

    /// Puts pod `address` (of this node, on `port` of the bridge) in `zone`, with its egress as its `labels` say,
    /// before any of its processes start.
    pub async fn admit(
        &self,
        address: Ipv4Addr,
        zone: &Zone,
        egress_off: bool,
        port: Option<&str>,
    ) -> Result<(), FirewallError> {
        if let Some(port) = port
            && !valid_interface(port)
        {
            return Err(FirewallError(format!("{port:?} is not an interface name")));
        }
        let mut state = self.state.lock().await;
        let script = self.place(&mut state, address, zone, egress_off, port.map(str::to_string));
        let applied = self.apply(&mut state, &script).await;
        if applied.is_err() {
            // Not admitted: the pod does not start, and is tried again.
            let script = self.remove(&mut state, address);
            let _ = self.apply(&mut state, &script).await;
        }
        applied
    }

    /// Puts each of `pods` (of other nodes: no port) in its zone, in one transaction.
    pub async fn admit_all(&self, pods: impl IntoIterator<Item = (Ipv4Addr, Zone)>) -> Result<(), FirewallError> {
        let mut state = self.state.lock().await;
        let mut script = String::new();
        for (address, zone) in pods {
            script.push_str(&self.place(&mut state, address, &zone, false, None));
        }
        self.apply(&mut state, &script).await
    }

    /// Takes pod `address` out of the wall (its pod is gone); nothing from it passes any more.
    pub async fn forget(&self, address: Ipv4Addr) -> Result<(), FirewallError> {
        let mut state = self.state.lock().await;
        let script = self.remove(&mut state, address);
        self.apply(&mut state, &script).await
    }

    /// Runs `script`, which brought `state` to where it is; should it fail, the kernel's sets are written afresh from
    /// `state`, so that the two never part.
    async fn apply(&self, state: &mut State, script: &str) -> Result<(), FirewallError> {
        if script.is_empty() {
            return Ok(());
        }
        let result = nft(script).await;
        if let Err(error) = &result {
            tracing::warn!(%error, "updating the network wall; writing its sets afresh");
            if let Err(error) = nft(&self.everything(state)).await {
                tracing::error!(%error, "writing the network wall's sets afresh");
            }
        }
        result
    }

    /// The commands that empty every set and fill it from `state`.
    fn everything(&self, state: &State) -> String {
        let table = &self.table;
        let mut script = String::new();
        for set in ["zone_of", "member", "pods", "service_member", "no_egress"] {
            let _ = writeln!(script, "flush set inet {table} {set}");
        }
        for set in ["ports", "port_address"] {
            let _ = writeln!(script, "flush set bridge {table} {set}");
        }
        for (address, member) in &state.pods {
            let zone = member.zone;
            let _ = writeln!(script, "add element inet {table} zone_of {{ {address} : {zone} }}");
            let _ = writeln!(script, "add element inet {table} member {{ {address} . {zone} }}");
            let _ = writeln!(script, "add element inet {table} pods {{ {address} }}");
            if let Some(port) = &member.port {
                let _ = writeln!(script, "add element bridge {table} ports {{ \"{port}\" }}");
                let _ = writeln!(script, "add element bridge {table} port_address {{ \"{port}\" . {address} }}");
            }
        }
        for (address, zone) in &state.services {
            let _ = writeln!(script, "add element inet {table} service_member {{ {address} . {zone} }}");
        }
        for zone in state.no_egress.keys() {
            let _ = writeln!(script, "add element inet {table} no_egress {{ {zone} }}");
        }
        script
    }

    /// The commands that put `address` in `zone` (taking out what it was before), recorded in `state`.
    fn place(
        &self,
        state: &mut State,
        address: Ipv4Addr,
        zone: &Zone,
        egress_off: bool,
        port: Option<String>,
    ) -> String {
        let number = zone_number(state, zone);
        let wanted = Member { zone: number, port };
        let egress_held = state.no_egress.get(&number).is_some_and(|pods| pods.contains(&address));
        let mut script = String::new();
        if state.pods.get(&address) != Some(&wanted) {
            // A member of this node keeps its port when the watch (which knows no ports) reports it again.
            let wanted = match (&wanted.port, state.pods.get(&address)) {
                (None, Some(known)) if known.zone == number && known.port.is_some() => known.clone(),
                _ => wanted,
            };
            if state.pods.get(&address) != Some(&wanted) {
                script.push_str(&self.remove(state, address));
                let table = &self.table;
                let _ = writeln!(script, "add element inet {table} zone_of {{ {address} : {number} }}");
                let _ = writeln!(script, "add element inet {table} member {{ {address} . {number} }}");
                let _ = writeln!(script, "add element inet {table} pods {{ {address} }}");
                if let Some(port) = &wanted.port {
                    let _ = writeln!(script, "add element bridge {table} ports {{ \"{port}\" }}");
                    let _ = writeln!(script, "add element bridge {table} port_address {{ \"{port}\" . {address} }}");
                }
                state.pods.insert(address, wanted);
            }
        }
        if egress_off != egress_held || (egress_off && !state.no_egress.contains_key(&number)) {
            script.push_str(&self.set_egress(state, address, number, egress_off));
        }
        script
    }

    /// The commands that take `address` out, recorded in `state`; nothing when it is not in.
    fn remove(&self, state: &mut State, address: Ipv4Addr) -> String {
        let Some(member) = state.pods.remove(&address) else { return String::new() };
        let table = &self.table;
        let mut script = String::new();
        let _ = writeln!(script, "delete element inet {table} zone_of {{ {address} }}");
        let _ = writeln!(script, "delete element inet {table} member {{ {address} . {} }}", member.zone);
        let _ = writeln!(script, "delete element inet {table} pods {{ {address} }}");
        if let Some(port) = &member.port {
            let _ = writeln!(script, "delete element bridge {table} port_address {{ \"{port}\" . {address} }}");
            let _ = writeln!(script, "delete element bridge {table} ports {{ \"{port}\" }}");
        }
        script.push_str(&self.set_egress(state, address, member.zone, false));
        script
    }

    /// The commands that record pod `address` as asking its zone's egress off (or no longer), in `state`; the zone's
    /// egress is off while any pod of it asks.
    fn set_egress(&self, state: &mut State, address: Ipv4Addr, zone: u32, off: bool) -> String {
        let was = state.no_egress.contains_key(&zone);
        let pods = state.no_egress.entry(zone).or_default();
        if off {
            pods.insert(address);
        } else {
            pods.remove(&address);
        }
        let now = !pods.is_empty();
        if !now {
            state.no_egress.remove(&zone);
        }
        match (was, now) {
            (false, true) => format!("add element inet {} no_egress {{ {zone} }}\n", self.table),
            (true, false) => format!("delete element inet {} no_egress {{ {zone} }}\n", self.table),
            _ => String::new(),
        }
    }

    /// The commands that put Service `address` in `zone` (the platform's Services are in no set: only the platform's
    /// pods reach them), recorded in `state`.
    fn place_service(&self, state: &mut State, address: Ipv4Addr, zone: &Zone) -> String {
        let wanted = match zone {
            Zone::Platform => None,
            tenant => Some(zone_number(state, tenant)),
        };
        if state.services.get(&address).copied() == wanted {
            return String::new();
        }
        let mut script = self.remove_service(state, address);
        if let Some(number) = wanted {
            let _ = writeln!(script, "add element inet {} service_member {{ {address} . {number} }}", self.table);
            state.services.insert(address, number);
        }
        script
    }

    fn remove_service(&self, state: &mut State, address: Ipv4Addr) -> String {
        match state.services.remove(&address) {
            Some(zone) => format!("delete element inet {} service_member {{ {address} . {zone} }}\n", self.table),
            None => String::new(),
        }
    }
}

/// The number of `zone`, given the first time it is seen.
fn zone_number(state: &mut State, zone: &Zone) -> u32 {
    match zone {
        Zone::Platform => PLATFORM,
        Zone::Tenant(key) => {
            let next = u32::try_from(state.zones.len()).unwrap_or(u32::MAX - 2).saturating_add(2);
            *state.zones.entry(key.clone()).or_insert(next)
        }
    }
}

/// An interface name the kernel could have made (what goes between quotes in the script).
fn valid_interface(name: &str) -> bool {
    !name.is_empty() && name.len() <= 15 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Bridged IPv4 goes through the `inet` hooks (`br_netfilter`): without it, pods on one bridge would reach each other
/// unjudged, so the node refuses to run bridged pods.
fn bridged_traffic_filtered() -> Result<(), FirewallError> {
    const SWITCH: &str = "/proc/sys/net/bridge/bridge-nf-call-iptables";
    if std::fs::read_to_string(SWITCH).is_err() {
        // Not loaded yet: as kube's setup does.
        let _ = std::process::Command::new("modprobe").arg("br_netfilter").output();
    }
    match std::fs::read_to_string(SWITCH) {
        Ok(value) if value.trim() == "1" => Ok(()),
        Ok(_) => std::fs::write(SWITCH, "1")
            .map_err(|e| FirewallError(format!("turning {SWITCH} on, which the wall between tenants needs: {e}"))),
        Err(_) => Err(FirewallError(format!(
            "{SWITCH} is missing: the kernel's br_netfilter, which the wall between tenants needs, is not loaded \
             (modprobe br_netfilter)"
        ))),
    }
}

/// Runs `script` as one nftables transaction.
async fn nft(script: &str) -> Result<(), FirewallError> {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| FirewallError(format!("running nft (nftables; Debian: apt-get install nftables): {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes()).await.map_err(|e| FirewallError(format!("writing to nft: {e}")))?;
    }
    let out = child.wait_with_output().await.map_err(|e| FirewallError(format!("running nft: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(FirewallError(format!("nft: {}", String::from_utf8_lossy(&out.stderr).trim())))
    }
}

/// Keeps the zones of every pod with an address (on any node: the destinations this node's pods may or may not
/// reach) and the zones of every Service current, from watches of both, until they end.
pub async fn follow(client: Client, firewall: std::sync::Arc<Firewall>) {
    let pods = watched(
        Api::<Pod>::all(client.clone()),
        firewall.clone(),
        |firewall, state, pod: &Pod| {
            let address = pod_address(pod)?;
            let labels = pod.labels();
            let egress_off = labels.get(EGRESS_LABEL).is_some_and(|v| v == "deny");
            Some((address, firewall.place(state, address, &Zone::of(labels), egress_off, None)))
        },
        |firewall, state, address| {
            // A pod of this node (it has a port) leaves when its runtime removes it, not before.
            if state.pods.get(&address).is_some_and(|m| m.port.is_none()) {
                firewall.remove(state, address)
            } else {
                String::new()
            }
        },
    );
    let services = watched(
        Api::<Service>::all(client),
        firewall.clone(),
        |firewall, state, service: &Service| {
            let address = service_address(service)?;
            Some((address, firewall.place_service(state, address, &Zone::of(service.labels()))))
        },
        |firewall, state, address| firewall.remove_service(state, address),
    );
    tokio::join!(pods, services);
}

/// A pod's own address (not one on the host's network).
fn pod_address(pod: &Pod) -> Option<Ipv4Addr> {
    if pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
        return None;
    }
    pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

/// A Service's ClusterIP, when it has one.
fn service_address(service: &Service) -> Option<Ipv4Addr> {
    service.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()
}

/// Follows `api`, placing each object with `place` and taking out with `take_out` the address of what is deleted,
/// what changed its address, and what a relist no longer shows.
async fn watched<K, P, T>(api: Api<K>, firewall: std::sync::Arc<Firewall>, place: P, take_out: T)
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
    P: Fn(&Firewall, &mut State, &K) -> Option<(Ipv4Addr, String)>,
    T: Fn(&Firewall, &mut State, Ipv4Addr) -> String,
{
    // Where each object was placed, by namespace/name.
    let mut placed: HashMap<String, Ipv4Addr> = HashMap::new();
    let mut listing: Option<HashMap<String, Ipv4Addr>> = None;
    let key = |object: &K| format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any());
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        let mut state = firewall.state.lock().await;
        let mut script = String::new();
        match event {
            Ok(watcher::Event::Init) => listing = Some(HashMap::new()),
            Ok(watcher::Event::InitApply(object)) => {
                if let Some((address, commands)) = place(&firewall, &mut state, &object) {
                    script.push_str(&commands);
                    listing.get_or_insert_with(HashMap::new).insert(key(&object), address);
                }
            }
            Ok(watcher::Event::InitDone) => {
                let now = listing.take().unwrap_or_default();
                let kept: BTreeSet<Ipv4Addr> = now.values().copied().collect();
                for address in placed.values().filter(|a| !kept.contains(a)) {
                    script.push_str(&take_out(&firewall, &mut state, *address));
                }
                placed = now;
            }
            Ok(watcher::Event::Apply(object)) => {
                let name = key(&object);
                let before = placed.remove(&name);
                let now = place(&firewall, &mut state, &object);
                if let Some(before) = before.filter(|b| now.as_ref().is_none_or(|(a, _)| a != b)) {
                    script.push_str(&take_out(&firewall, &mut state, before));
                }
                if let Some((address, commands)) = now {
                    // Placed after the old address went, so that a removal never undoes it.
                    script.push_str(&commands);
                    placed.insert(name, address);
                }
            }
            Ok(watcher::Event::Delete(object)) => {
                if let Some(before) = placed.remove(&key(&object)) {
                    script.push_str(&take_out(&firewall, &mut state, before));
                }
            }
            Err(error) => tracing::debug!(%error, "the network wall's watch"),
        }
        let _ = firewall.apply(&mut state, &script).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn firewall() -> Firewall {
        Firewall::new("nest-0a1b2c3d")
    }

    #[test]
    fn the_rules_name_this_nodes_bridge_and_tables() {
        let rules = firewall().rules();
        assert!(rules.contains("table inet nest_0a1b2c3d {") && rules.contains("table bridge nest_0a1b2c3d {"));
        assert!(rules.contains("iifname != \"nest-0a1b2c3d\" accept"));
        assert!(!rules.contains('@') || !rules.contains("@TABLE@"), "every placeholder filled");
    }

    #[test]
    fn each_tenant_gets_a_zone_of_its_own_and_the_platform_zone_1() {
        let firewall = firewall();
        let mut state = State::default();
        let a: Ipv4Addr = "10.128.0.5".parse().unwrap();
        let script =
            firewall.place(&mut state, a, &Zone::Tenant("default-abcde-demo".into()), false, Some("veth1".into()));
        assert!(script.contains("add element inet nest_0a1b2c3d zone_of { 10.128.0.5 : 2 }"), "{script}");
        assert!(script.contains("add element bridge nest_0a1b2c3d port_address { \"veth1\" . 10.128.0.5 }"));
        // The watch reporting the same pod changes nothing, and keeps its port.
        assert_eq!(firewall.place(&mut state, a, &Zone::Tenant("default-abcde-demo".into()), false, None), "");
        let b: Ipv4Addr = "10.128.0.6".parse().unwrap();
        let script = firewall.place(&mut state, b, &Zone::Tenant("default-fghij-acme".into()), false, None);
        assert!(script.contains("zone_of { 10.128.0.6 : 3 }"), "{script}");
        let c: Ipv4Addr = "10.128.0.7".parse().unwrap();
        assert!(firewall.place(&mut state, c, &Zone::Platform, false, None).contains("zone_of { 10.128.0.7 : 1 }"));
        // An address that moves to another zone is taken out of the first.
        let script = firewall.place(&mut state, a, &Zone::Tenant("default-fghij-acme".into()), false, None);
        assert!(script.contains("delete element inet nest_0a1b2c3d member { 10.128.0.5 . 2 }"), "{script}");
        assert!(script.contains("add element inet nest_0a1b2c3d member { 10.128.0.5 . 3 }"), "{script}");
    }

    #[test]
    fn a_zones_egress_is_off_while_any_of_its_pods_asks() {
        let firewall = firewall();
        let mut state = State::default();
        let zone = Zone::Tenant("t".into());
        let (a, b): (Ipv4Addr, Ipv4Addr) = ("10.128.0.5".parse().unwrap(), "10.128.0.6".parse().unwrap());
        assert!(
            firewall.place(&mut state, a, &zone, true, None).contains("add element inet nest_0a1b2c3d no_egress { 2 }")
        );
        assert!(!firewall.place(&mut state, b, &zone, true, None).contains("no_egress"));
        assert!(!firewall.remove(&mut state, a).contains("no_egress"));
        assert!(firewall.remove(&mut state, b).contains("delete element inet nest_0a1b2c3d no_egress { 2 }"));
    }

    #[test]
    fn services_of_tenants_are_in_their_zone_and_the_platforms_in_none() {
        let firewall = firewall();
        let mut state = State::default();
        let address: Ipv4Addr = "10.96.0.10".parse().unwrap();
        let script = firewall.place_service(&mut state, address, &Zone::Tenant("t".into()));
        assert_eq!(script, "add element inet nest_0a1b2c3d service_member { 10.96.0.10 . 2 }\n");
        assert_eq!(
            firewall.place_service(&mut state, address, &Zone::Platform),
            "delete element inet nest_0a1b2c3d service_member { 10.96.0.10 . 2 }\n"
        );
    }

    #[test]
    fn only_interface_names_go_into_the_script() {
        assert!(valid_interface("veth1a2b3c4d"));
        for bad in ["", "veth\" }; flush ruleset; {", "a b", "averyveryverylongname"] {
            assert!(!valid_interface(bad), "{bad}");
        }
    }
}
