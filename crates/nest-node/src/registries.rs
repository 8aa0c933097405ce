//! Which registries a node pulls images from, and how: the platform admin's list ([`PullFrom`], `--pull-from`), and
//! the hosts no tenant's image reference may make the node connect to.
//!
//! A reference is a tenant's text. Without a check, `127.0.0.1:2379/x` or `localhost:8080/x` would make the node
//! send requests to a service on the host's loopback, which no tenant's pod can reach itself (issue 33). So a registry
//! is pulled from only when the admin named it (`HOST[:PORT]`, `http://HOST[:PORT]` for plain HTTP), or when the admin
//! allowed any (`*`) and its host is none of this machine's: not loopback (`localhost`, `*.localhost`,
//! `127.0.0.0/8`, `::1`), not unspecified, link-local (cloud metadata at `169.254.169.254`) or multicast, not an
//! address this machine holds (its bridge's gateway, its interfaces, the Service ranges made local), not in the
//! node's pod range, whatever form the address is written in: hosts are read as the HTTP client reads them (the
//! WHATWG URL parser: `127.1`, `0x7f.1` and `2130706433` are all `127.0.0.1`; `LOCALHOST` is `localhost`), and an
//! IPv4-mapped IPv6 address as its IPv4 address. Under `*`, a registry's name is resolved before the pull and refused
//! when it leads to such an address, and every connection of the pull goes through the node's [`guard`], which
//! resolves and checks again, so that neither a redirect nor a token service nor a name that changes its answer leads
//! the node back to this machine.
//!
//! ```
//! use nest_node::registries::{Decision, PullFrom};
//! let admin = PullFrom::parse(&["127.0.0.1:5000".into(), "*".into()]).unwrap();
//! let nothing_local = |_: std::net::IpAddr| false;
//! assert_eq!(admin.decide("127.0.0.1:5000", &nothing_local), Decision::Named { plain_http: true });
//! assert_eq!(admin.decide("127.1:5001", &nothing_local), Decision::Internal);
//! assert_eq!(admin.decide("ghcr.io", &nothing_local), Decision::Any);
//! ```

pub mod guard;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A registry's host and port, as the HTTP client will read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registry {
    /// The host, normalized: a domain in lowercase, or an address (IPv4 in any of its written forms).
    pub host: url::Host,
    /// The port the reference or entry names, if any.
    pub port: Option<u16>,
}

impl Registry {
    /// `registry` (`HOST`, `HOST:PORT`, `[IPv6]:PORT`), as a reference's registry or an admin's entry gives it.
    pub fn parse(registry: &str) -> Option<Registry> {
        let (host, port) = match registry.rsplit_once(':') {
            // An IPv6 address without brackets has colons of its own, and no port.
            Some((host, port)) if !host.contains(':') || host.ends_with(']') => (host, Some(port.parse().ok()?)),
            _ => (registry, None),
        };
        if host.is_empty() || host.contains(['/', '@', '?', '#', '%', '\\']) {
            return None;
        }
        Some(Registry { host: url::Host::parse(host).ok()?, port })
    }

    /// The host as a name, when it is one (not an address).
    pub fn domain(&self) -> Option<&str> {
        match &self.host {
            url::Host::Domain(name) => Some(name),
            _ => None,
        }
    }

    /// Whether the host itself (without resolving a name) is one of this machine's, or one no registry of a tenant's
    /// may be at ([`internal_address`]). `local` says whether this machine holds an address.
    pub fn is_internal(&self, local: &dyn Fn(IpAddr) -> bool) -> bool {
        match &self.host {
            url::Host::Domain(name) => is_localhost(name),
            url::Host::Ipv4(ip) => internal_address(IpAddr::V4(*ip), local),
            url::Host::Ipv6(ip) => internal_address(IpAddr::V6(*ip), local),
        }
    }

    fn is_loopback(&self) -> bool {
        match &self.host {
            url::Host::Domain(name) => is_localhost(name),
            url::Host::Ipv4(ip) => ip.is_loopback(),
            url::Host::Ipv6(ip) => ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        }
    }
}

/// Whether `name` (lowercase) names this machine whatever a resolver says: `localhost` and every name beneath it
/// (RFC 6761).
pub fn is_localhost(name: &str) -> bool {
    name == "localhost" || name.ends_with(".localhost")
}

/// Whether a connection to `ip` would stay on this machine or reach what no tenant's registry may be: loopback,
/// unspecified (`0.0.0.0` and `::` connect to this machine), link-local (cloud metadata services), multicast and
/// broadcast, the metadata services outside those ranges, and any address this machine holds (`local`). IPv4-mapped
/// and IPv4-compatible IPv6 addresses count as their IPv4 address.
pub fn internal_address(ip: IpAddr, local: &dyn Fn(IpAddr) -> bool) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4) || local(ip),
        IpAddr::V6(v6) => {
            let embedded = v6.to_ipv4_mapped().or_else(|| ipv4_compatible(v6));
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local()
                || v6 == AWS_METADATA_V6
                || local(ip)
                || embedded.is_some_and(|v4| internal_v4(v4) || local(IpAddr::V4(v4)))
        }
    }
}

/// AWS's instance metadata service over IPv6 (the IPv4 services all live in 169.254.0.0/16).
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

/// Alibaba Cloud's metadata service, outside the link-local range.
const ALIBABA_METADATA: Ipv4Addr = Ipv4Addr::new(100, 100, 100, 200);

fn internal_v4(ip: Ipv4Addr) -> bool {
    ip.is_loopback()
        // 0.0.0.0/8: "this network"; Linux connects 0.0.0.0 to this machine.
        || ip.octets()[0] == 0
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip == ALIBABA_METADATA
}

/// The IPv4 address of a deprecated IPv4-compatible IPv6 address (`::a.b.c.d`), `::` and `::1` excepted.
fn ipv4_compatible(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = ip.segments();
    let compatible = segments[..6].iter().all(|s| *s == 0) && !ip.is_loopback() && !ip.is_unspecified();
    compatible.then(|| {
        Ipv4Addr::new((segments[6] >> 8) as u8, segments[6] as u8, (segments[7] >> 8) as u8, segments[7] as u8)
    })
}

/// Whether this machine holds `ip`: it may bind a socket to it (its interfaces' addresses, all of 127.0.0.0/8, and
/// ranges routed as local, such as the Service ranges the proxy serves). Asked of the kernel at each check, so
/// addresses that come later (a new interface, a bridge) count too.
pub fn held_by_this_machine(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(std::net::SocketAddr::new(ip, 0)).is_ok()
}

/// One registry the platform admin named.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    registry: Registry,
    plain_http: bool,
}

impl Entry {
    /// The port this entry's registry listens on: the one named, else the scheme's.
    fn port(&self) -> u16 {
        self.registry.port.unwrap_or(if self.plain_http { 80 } else { 443 })
    }
}

/// The registries the platform admin lets a node pull from (`--pull-from`, repeatable): `HOST` or `HOST:PORT` over
/// HTTPS, except a loopback host (`localhost`, `127.0.0.1:5000`), spoken to over plain HTTP as Docker does;
/// `http://HOST[:PORT]` over plain HTTP, `https://HOST[:PORT]` over HTTPS; `*` for any registry not of this machine.
/// A registry is named by its host and port together, as containerd's `certs.d/<host:port>` names it: an entry without a
/// port names the registry at the scheme's port only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullFrom {
    entries: Vec<Entry>,
    any: bool,
}

/// What a node does with an image reference's registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The admin named it: pull, over plain HTTP when `plain_http`.
    Named { plain_http: bool },
    /// The admin allowed any registry (`*`) and this one's host is not this machine's: pull over HTTPS, once the name
    /// is seen not to resolve to an internal address.
    Any,
    /// Its host is this machine, or one no registry of a tenant's may be at, and the admin did not name it: never
    /// connected to.
    Internal,
    /// The admin did not name it, and did not allow any.
    NotNamed,
}

impl Decision {
    /// Whether the node may pull from the registry (resolving its name first when [`Decision::Any`]).
    pub fn may_pull(self) -> bool {
        matches!(self, Decision::Named { .. } | Decision::Any)
    }
}

impl PullFrom {
    /// The admin's entries, each as [`PullFrom`] says; an entry that is no registry is an error naming it.
    pub fn parse(entries: &[String]) -> Result<PullFrom, String> {
        let mut parsed = PullFrom::default();
        for text in entries {
            if text == "*" {
                parsed.any = true;
                continue;
            }
            parsed.entries.push(parse_entry(text)?);
        }
        Ok(parsed)
    }

    /// What to do with the registry `registry` of an image reference (`HOST[:PORT]`, as the reference names it);
    /// `local` says whether this machine holds an address ([`held_by_this_machine`], and the node's pod range).
    pub fn decide(&self, registry: &str, local: &dyn Fn(IpAddr) -> bool) -> Decision {
        let Some(wanted) = Registry::parse(registry) else { return Decision::NotNamed };
        let named = self
            .entries
            .iter()
            .find(|entry| entry.registry.host == wanted.host && wanted.port.unwrap_or(entry.port()) == entry.port());
        if let Some(entry) = named {
            return Decision::Named { plain_http: entry.plain_http };
        }
        if wanted.is_internal(local) {
            Decision::Internal
        } else if self.any {
            Decision::Any
        } else {
            Decision::NotNamed
        }
    }
}

/// One `--pull-from` entry other than `*`: `[http://|https://]HOST[:PORT]`.
fn parse_entry(text: &str) -> Result<Entry, String> {
    let bad = || format!("{text:?} is not a registry: expected HOST, HOST:PORT, http://HOST[:PORT] or *");
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (Some(scheme.to_ascii_lowercase()), rest.trim_end_matches('/')),
        None => (None, text),
    };
    let registry = Registry::parse(rest).ok_or_else(bad)?;
    let plain_http = match scheme.as_deref() {
        Some("http") => true,
        Some("https") => false,
        Some(_) => return Err(bad()),
        None => registry.is_loopback(),
    };
    Ok(Entry { registry, plain_http })
}

/// A `--pull-from` value, checked as [`PullFrom::parse`] reads it (for the command line's parser).
pub fn check_entry(text: &str) -> Result<String, String> {
    if text != "*" {
        parse_entry(text)?;
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine, as the tests pretend it: the bridge's gateway 10.128.0.1 and a host address 192.0.2.10.
    fn local(ip: IpAddr) -> bool {
        ["10.128.0.1", "192.0.2.10"].iter().any(|held| held.parse::<IpAddr>().unwrap() == ip)
    }

    fn decide(pull_from: &[&str], registry: &str) -> Decision {
        let entries: Vec<String> = pull_from.iter().map(|e| e.to_string()).collect();
        PullFrom::parse(&entries).unwrap().decide(registry, &local)
    }

    #[test]
    fn references_to_this_machine_are_refused_unless_the_admin_named_them() {
        // A registry as a reference names it (the distribution grammar's host, or what a looser one might pass),
        // and what a node allowing any registry (`*`) does with it.
        let table: &[(&str, Decision)] = &[
            ("127.0.0.1:5000", Decision::Internal),
            ("localhost:5000", Decision::Internal),
            // `localhost/foo`: a registry host by the grammar (the first component is `localhost`), port 443.
            ("localhost", Decision::Internal),
            ("LOCALHOST:5000", Decision::Internal),
            ("registry.localhost:5000", Decision::Internal),
            ("[::1]:5000", Decision::Internal),
            ("[0:0:0:0:0:0:0:1]:5000", Decision::Internal),
            ("[::ffff:127.0.0.1]:5000", Decision::Internal),
            ("[::ffff:7f00:1]:5000", Decision::Internal),
            ("[::127.0.0.2]:5000", Decision::Internal),
            ("[::]:5000", Decision::Internal),
            ("[fe80::1]:5000", Decision::Internal),
            ("[fd00:ec2::254]", Decision::Internal),
            // The forms the HTTP client reads as 127.0.0.1 (as inet_aton does), every one of them valid by the grammar.
            ("127.1:5000", Decision::Internal),
            ("127.0.1:5000", Decision::Internal),
            ("0x7f.1:5000", Decision::Internal),
            ("0x7F000001:5000", Decision::Internal),
            ("2130706433:5000", Decision::Internal),
            ("0177.0.0.1:5000", Decision::Internal),
            ("127.255.255.254:5000", Decision::Internal),
            ("0.0.0.0:5000", Decision::Internal),
            ("0:5000", Decision::Internal),
            ("169.254.169.254", Decision::Internal),
            ("100.100.100.200", Decision::Internal),
            ("224.0.0.1:5000", Decision::Internal),
            ("255.255.255.255:5000", Decision::Internal),
            // This machine's own addresses, written plainly or otherwise.
            ("10.128.0.1:5000", Decision::Internal),
            ("192.0.2.10", Decision::Internal),
            ("3221225994", Decision::Internal),
            ("[::ffff:192.0.2.10]:5000", Decision::Internal),
            // Names: by the name alone not this machine's (their addresses are checked when resolved).
            ("registry.local:5000", Decision::Any),
            ("ghcr.io", Decision::Any),
            ("index.docker.io", Decision::Any),
            ("localhost.example.com:5000", Decision::Any),
            ("127.0.0.1.nip.io:5000", Decision::Any),
            ("10.128.0.2:5000", Decision::Any),
            ("[2001:db8::1]:5000", Decision::Any),
            // Not a registry: never pulled from.
            ("127.0.0.1:99999", Decision::NotNamed),
            ("", Decision::NotNamed),
            ("user@127.0.0.1:5000", Decision::NotNamed),
        ];
        for (registry, with_any) in table {
            assert_eq!(decide(&["*"], registry), *with_any, "{registry} with *");
            let without = if *with_any == Decision::Any { Decision::NotNamed } else { *with_any };
            assert_eq!(decide(&[], registry), without, "{registry} with nothing named");
            let named_other = decide(&["registry.example.com"], registry);
            assert_eq!(named_other, without, "{registry} with another registry named");
        }
    }

    #[test]
    fn a_named_registry_is_pulled_from_by_host_and_port() {
        let named = |plain_http| Decision::Named { plain_http };
        // Loopback over plain HTTP, as Docker speaks to it; the same address in any form the client reads.
        assert_eq!(decide(&["127.0.0.1:5000"], "127.0.0.1:5000"), named(true));
        assert_eq!(decide(&["127.0.0.1:5000"], "127.1:5000"), named(true));
        assert_eq!(decide(&["localhost:5000"], "LOCALHOST:5000"), named(true));
        assert_eq!(decide(&["[::1]:5000"], "[::1]:5000"), named(true));
        // Another port of the same host is another registry, and stays refused.
        assert_eq!(decide(&["127.0.0.1:5000"], "127.0.0.1:5001"), Decision::Internal);
        assert_eq!(decide(&["127.0.0.1:5000", "*"], "127.0.0.1:2379"), Decision::Internal);
        assert_eq!(decide(&["localhost"], "localhost:8080"), Decision::Internal);
        // Without a port, the scheme's: localhost over plain HTTP is port 80.
        assert_eq!(decide(&["localhost"], "localhost"), named(true));
        assert_eq!(decide(&["localhost"], "localhost:80"), named(true));
        // Elsewhere HTTPS, unless the admin says http://; https:// keeps a loopback registry on HTTPS.
        assert_eq!(decide(&["registry.example.com"], "registry.example.com"), named(false));
        assert_eq!(decide(&["registry.example.com"], "registry.example.com:443"), named(false));
        assert_eq!(decide(&["registry.example.com"], "registry.example.com:5000"), Decision::NotNamed);
        assert_eq!(decide(&["http://registry.local:5000"], "registry.local:5000"), named(true));
        assert_eq!(decide(&["HTTP://10.0.0.7:5000/"], "10.0.0.7:5000"), named(true));
        assert_eq!(decide(&["https://localhost:5443"], "localhost:5443"), named(false));
        // The admin may name one of this machine's own addresses.
        assert_eq!(decide(&["10.128.0.1:5000"], "10.128.0.1:5000"), named(false));
        assert_eq!(decide(&["http://10.128.0.1:5000"], "10.128.0.1:5000"), named(true));
    }

    #[test]
    fn entries_that_name_no_registry_are_refused() {
        for bad in ["", "ftp://x", "http://", "a/b", "user@host", "127.0.0.1:http", "host:70000", "[::1"] {
            assert!(check_entry(bad).is_err(), "{bad:?}");
        }
        for good in ["*", "localhost:5000", "ghcr.io", "http://10.0.0.7:5000", "[::1]:5000", "https://r.example"] {
            assert_eq!(check_entry(good).as_deref(), Ok(good));
        }
    }
}
