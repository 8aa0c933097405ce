//! Which addresses a tenant's Endpoints may name in the management cluster. A tenant writes the Endpoints of a
//! Service without a selector itself, and the management cluster's proxy then sends that Service's traffic wherever
//! they point, from inside the management cluster: so an address is allowed only when it is one of the tenant's own
//! pods, or lies outside everything the management cluster keeps apart (an address on the Internet, a database
//! outside the cluster).
//!
//! An address is first read as what it reaches: an IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) is the IPv4
//! address it maps (Go's `net.IP` reads it so too, and so does the kernel). Then it is refused when it is
//! - special ([`special`]): loopback, link-local (cloud metadata), unspecified, multicast or broadcast;
//! - the management cluster's API server, a node's, or the syncer's kubelet endpoints';
//! - a node bridge's: the first address of a node's pod range, where the node's bridge (and what listens on the host
//!   for pods) answers;
//! - in the management cluster's Service range;
//! - a pod's that is not the tenant's own: a pod labelled `tenancy.nest.dev/cluster` with another key (another
//!   tenant's workload or control plane) or an address in a pod range that no pod of the tenant has (an unlabelled
//!   management pod, or one not started yet).
//!
//! The refusal names the address and the class, never whose pod it is.
//!
//! ```
//! use nest_syncer::addresses::{Known, Range, refused};
//! let mut known = Known::default();
//! known.pod_ranges.push("10.128.0.0/16".parse().unwrap());
//! known.pods.insert("10.128.0.9".parse().unwrap(), "default-abcde-demo".into());
//! assert_eq!(refused("10.128.0.9".parse().unwrap(), "default-abcde-demo", &known), None);
//! assert_eq!(refused("::ffff:10.128.0.1".parse().unwrap(), "default-abcde-demo", &known), Some("a node bridge's address"));
//! ```

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

/// An address range such as `10.128.0.0/16` or `fd00::/64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// The first address (the network's), its host bits zero.
    base: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Range {
    type Err = String;

    fn from_str(text: &str) -> Result<Range, String> {
        let bad = || format!("{text:?} is not an address range such as 10.128.0.0/16");
        let (address, prefix) = text.trim().split_once('/').ok_or_else(bad)?;
        let address: IpAddr = address.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        let bits = match address {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if prefix > bits {
            return Err(bad());
        }
        let base = match address {
            IpAddr::V4(v4) => IpAddr::V4((u32::from(v4) & mask32(prefix)).into()),
            IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & mask128(prefix)).into()),
        };
        Ok(Range { base, prefix })
    }
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix.min(128))).unwrap_or(0)
}

impl Range {
    /// Whether `ip` (read as what it reaches, [`canonical`]) lies in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.base, canonical(ip)) {
            (IpAddr::V4(base), IpAddr::V4(ip)) => u32::from(ip) & mask32(self.prefix) == u32::from(base),
            (IpAddr::V6(base), IpAddr::V6(ip)) => u128::from(ip) & mask128(self.prefix) == u128::from(base),
            _ => false,
        }
    }

    /// The first address after the network's: where a node's bridge answers in its pod range (the CNI bridge
    /// plugin's gateway, and nest-node's).
    pub fn gateway(&self) -> IpAddr {
        match self.base {
            IpAddr::V4(base) => IpAddr::V4(u32::from(base).saturating_add(1).into()),
            IpAddr::V6(base) => IpAddr::V6(u128::from(base).saturating_add(1).into()),
        }
    }
}

/// `ip` as what it reaches: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is the IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// Why `ip` can never be a tenant's Endpoints address, whoever runs the cluster: the host's own and addresses that
/// reach no single pod.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    let ip = canonical(ip);
    let (loopback, link_local, unspecified, multicast) = match ip {
        IpAddr::V4(v4) => {
            (v4.is_loopback(), v4.is_link_local(), v4.is_unspecified(), v4.is_multicast() || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            (v6.is_loopback(), (v6.segments()[0] & 0xffc0) == 0xfe80, v6.is_unspecified(), v6.is_multicast())
        }
    };
    if loopback {
        Some("a loopback address")
    } else if link_local {
        Some("a link-local address")
    } else if unspecified {
        Some("the unspecified address")
    } else if multicast {
        Some("a multicast or broadcast address")
    } else {
        None
    }
}

/// What the syncer knows of the management cluster's addresses when it checks a tenant's Endpoints.
#[derive(Clone, Debug, Default)]
pub struct Known {
    /// The management cluster's API server's addresses (its `kubernetes` Service's and Endpoints').
    pub api_servers: BTreeSet<IpAddr>,
    /// Every node's addresses.
    pub nodes: BTreeSet<IpAddr>,
    /// Where the syncer's kubelet endpoints listen.
    pub kubelet: Option<IpAddr>,
    /// The pod ranges: the nodes' `spec.podCIDRs` and those the syncer is told of.
    pub pod_ranges: Vec<Range>,
    /// The management cluster's Service ranges.
    pub service_ranges: Vec<Range>,
    /// The addresses of the pods the syncer knows (every pod labelled `tenancy.nest.dev/cluster`), and that label.
    pub pods: HashMap<IpAddr, String>,
}

/// Why `ip` may not be an Endpoints address of tenant `key` in the management cluster, if so.
pub fn refused(ip: IpAddr, key: &str, known: &Known) -> Option<&'static str> {
    let ip = canonical(ip);
    if let Some(why) = special(ip) {
        return Some(why);
    }
    if known.api_servers.iter().any(|a| canonical(*a) == ip) {
        return Some("the management cluster's API server");
    }
    if known.nodes.iter().any(|a| canonical(*a) == ip) {
        return Some("a node's address");
    }
    if known.kubelet.is_some_and(|a| canonical(a) == ip) {
        return Some("the address of the syncer's kubelet endpoints");
    }
    if known.pod_ranges.iter().any(|r| r.gateway() == ip) {
        return Some("a node bridge's address");
    }
    if known.service_ranges.iter().any(|r| r.contains(ip)) {
        return Some("in the management cluster's Service range");
    }
    match known.pods.get(&ip) {
        Some(owner) if owner == key => None,
        Some(_) => Some("not the address of one of this tenant's pods"),
        None if known.pod_ranges.iter().any(|r| r.contains(ip)) => {
            Some("in the pod range but not the address of one of this tenant's pods")
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ranges_hold_what_their_prefix_says_and_mapped_addresses_are_ipv4() {
        let pods: Range = "10.128.3.4/16".parse().unwrap();
        assert_eq!(pods.to_string(), "10.128.0.0/16");
        assert!(pods.contains(ip("10.128.255.255")) && pods.contains(ip("::ffff:10.128.0.9")));
        assert!(!pods.contains(ip("10.129.0.0")) && !pods.contains(ip("fd00::1")));
        assert_eq!(pods.gateway(), ip("10.128.0.1"));
        let six: Range = "fd00:1::/64".parse().unwrap();
        assert!(six.contains(ip("fd00:1::5")) && !six.contains(ip("fd00:2::5")));
        let everything: Range = "0.0.0.0/0".parse().unwrap();
        assert!(everything.contains(ip("203.0.113.9")));
        for bad in ["10.0.0.0", "10.0.0.0/33", "::/129", "ten/8", "10.0.0.0/-1"] {
            assert!(bad.parse::<Range>().is_err(), "{bad}");
        }
        assert_eq!(canonical(ip("::ffff:127.0.0.1")), ip("127.0.0.1"));
        assert_eq!(special(ip("::ffff:127.0.0.1")), Some("a loopback address"));
        assert_eq!(special(ip("::ffff:169.254.169.254")), Some("a link-local address"));
        assert_eq!(special(ip("::ffff:0.0.0.0")), Some("the unspecified address"));
        assert_eq!(special(ip("255.255.255.255")), Some("a multicast or broadcast address"));
    }

    #[test]
    fn only_the_tenants_own_pods_and_the_outside_world_may_be_named() {
        let known = Known {
            api_servers: [ip("10.112.0.1"), ip("127.0.0.1")].into(),
            nodes: [ip("192.168.1.10")].into(),
            kubelet: Some(ip("10.128.0.1")),
            pod_ranges: vec!["10.128.0.0/16".parse().unwrap(), "10.244.1.0/24".parse().unwrap()],
            service_ranges: vec!["10.112.0.0/16".parse().unwrap()],
            pods: [
                (ip("10.128.0.5"), "demo".to_string()),
                (ip("10.128.0.6"), "acme".to_string()),
                // A control-plane pod of acme (labelled by its provider).
                (ip("10.128.0.7"), "acme".to_string()),
            ]
            .into(),
        };
        let verdict = |text: &str| refused(ip(text), "demo", &known);
        assert_eq!(verdict("10.128.0.5"), None, "its own pod");
        assert_eq!(verdict("::ffff:10.128.0.5"), None, "its own pod, mapped");
        assert_eq!(verdict("203.0.113.9"), None, "outside everything the cluster keeps apart");
        for (address, why) in [
            ("::ffff:127.0.0.1", "a loopback address"),
            ("10.112.0.1", "the management cluster's API server"),
            ("::ffff:192.168.1.10", "a node's address"),
            ("10.128.0.1", "the address of the syncer's kubelet endpoints"),
            ("10.244.1.1", "a node bridge's address"),
            ("10.112.4.4", "in the management cluster's Service range"),
            ("10.128.0.6", "not the address of one of this tenant's pods"),
            ("::ffff:10.128.0.7", "not the address of one of this tenant's pods"),
            ("10.128.200.200", "in the pod range but not the address of one of this tenant's pods"),
            ("10.244.1.0", "in the pod range but not the address of one of this tenant's pods"),
        ] {
            assert_eq!(verdict(address), Some(why), "{address}");
        }
        assert_eq!(refused(ip("10.128.0.6"), "acme", &known), None, "acme's own pod");
    }
}
