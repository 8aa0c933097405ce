//! ClusterIP allocation from the service CIDR.
//!
//! Each allocated address is a storage key, `/registry/core/ipallocations/<ip>`, created with compare-and-swap, so
//! no two Services get the same address even when several API servers share one store (the same idea as the
//! `IPAddress` objects kube-apiserver 1.33 allocates with). The first address of the range is reserved for the
//! `kubernetes` Service, as kube-apiserver reserves it.

use std::net::Ipv4Addr;

use bytes::Bytes;
use nest_storage::Store;

use crate::error::{ApiError, Result};

const ATTEMPTS: usize = 64;

/// An IPv4 range such as `10.96.0.0/12`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceCidr {
    base: u32,
    bits: u8,
}

impl std::str::FromStr for ServiceCidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (ip, bits) = text.split_once('/').ok_or_else(|| format!("{text:?} is not a CIDR such as 10.96.0.0/12"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| format!("{ip:?} is not an IPv4 address"))?;
        let bits: u8 = bits.parse().map_err(|_| format!("{bits:?} is not a prefix length"))?;
        if !(8..=30).contains(&bits) {
            return Err(format!("the prefix length must be between 8 and 30, not {bits}"));
        }
        let mask = u32::MAX << (32 - bits);
        Ok(ServiceCidr { base: u32::from(ip) & mask, bits })
    }
}

impl ServiceCidr {
    fn size(&self) -> u32 {
        1 << (32 - self.bits)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip).wrapping_sub(self.base) < self.size()
    }

    /// Whether the range lies in loopback (`127.96.0.0/16`): a cluster kept whole on one machine's loopback, whose
    /// pods listen on loopback addresses too.
    pub fn is_loopback(&self) -> bool {
        Ipv4Addr::from(self.base).is_loopback()
    }

    /// The address of the `kubernetes` Service: the first usable one.
    pub fn kubernetes_service_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }

    /// Whether `ip` may be given to a Service: inside the range, not its network or broadcast address.
    fn usable(&self, ip: Ipv4Addr) -> bool {
        let offset = u32::from(ip).wrapping_sub(self.base);
        self.contains(ip) && offset != 0 && offset != self.size() - 1
    }

    fn random(&self) -> Ipv4Addr {
        // Offsets 2 ..= size-2: not the network address, not the reserved first address, not the broadcast.
        Ipv4Addr::from(self.base + fastrand::u32(2..self.size() - 1))
    }
}

fn key(ip: Ipv4Addr) -> String {
    format!("/registry/core/ipallocations/{ip}")
}

/// Allocates `wanted` (checked against the range) or a free random address for the Service `owner`.
pub async fn allocate(
    store: &dyn Store,
    cidr: &ServiceCidr,
    wanted: Option<Ipv4Addr>,
    owner: &str,
) -> Result<Ipv4Addr> {
    if let Some(ip) = wanted {
        if !cidr.usable(ip) {
            return Err(ApiError::bad_request(format!(
                "spec.clusterIPs: Invalid value: [\"{ip}\"]: failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range"
            )));
        }
        return match store.create(key(ip).as_bytes(), Bytes::from(owner.to_string())).await {
            Ok(_) => Ok(ip),
            Err(nest_storage::Error::AlreadyExists { .. }) => Err(ApiError::bad_request(format!(
                "spec.clusterIPs: Invalid value: [\"{ip}\"]: failed to allocate IP {ip}: provided IP is already allocated"
            ))),
            Err(e) => Err(ApiError::from_storage(e)),
        };
    }
    for _ in 0..ATTEMPTS {
        let ip = cidr.random();
        match store.create(key(ip).as_bytes(), Bytes::from(owner.to_string())).await {
            Ok(_) => return Ok(ip),
            Err(nest_storage::Error::AlreadyExists { .. }) => continue,
            Err(e) => return Err(ApiError::from_storage(e)),
        }
    }
    Err(ApiError::internal("failed to allocate a service IP: the range is full"))
}

/// Frees an address; freeing one that is not allocated does nothing.
pub async fn release(store: &dyn Store, ip: &str) -> Result<()> {
    let Ok(ip) = ip.parse::<Ipv4Addr>() else { return Ok(()) };
    match store.delete(key(ip).as_bytes(), None).await {
        Ok(_) | Err(nest_storage::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(ApiError::from_storage(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let cidr: ServiceCidr = "10.96.5.7/12".parse().unwrap();
        assert_eq!(cidr.kubernetes_service_ip(), Ipv4Addr::new(10, 96, 0, 1));
        assert!(cidr.contains(Ipv4Addr::new(10, 111, 255, 255)));
        assert!(!cidr.contains(Ipv4Addr::new(10, 112, 0, 0)));
        assert!(!cidr.usable(Ipv4Addr::new(10, 96, 0, 0)));
        for _ in 0..1000 {
            let ip = cidr.random();
            assert!(cidr.usable(ip) && ip != cidr.kubernetes_service_ip());
        }
        assert!("10.0.0.0".parse::<ServiceCidr>().is_err());
        assert!("10.0.0.0/31".parse::<ServiceCidr>().is_err());
    }
}
