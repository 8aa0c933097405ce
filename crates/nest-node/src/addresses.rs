//! A node's pod addresses: one IPv4 range (`10.244.3.0/24` for simulated nodes, a loopback `/16` such as
//! `127.1.0.0/16` where pods run as processes), handed out per pod UID and taken back when the pod goes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::SystemTime;

/// A range of addresses and who holds which.
#[derive(Debug)]
pub struct Pool {
    base: u32,
    size: u32,
    /// Offset in the range, and when it was taken, by pod UID.
    taken: BTreeMap<String, (u32, SystemTime)>,
}

/// A range that is not `a.b.c.d/len` with a length from 8 to 30.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not an IPv4 range such as 10.244.0.0/24 (prefix length 8 to 30)")]
pub struct BadRange(pub String);

impl Pool {
    /// The addresses of `cidr`; the first two (network and gateway) and the last (broadcast) are never handed out.
    pub fn new(cidr: &str) -> Result<Pool, BadRange> {
        let bad = || BadRange(cidr.to_string());
        let (address, length) = cidr.split_once('/').ok_or_else(bad)?;
        let address: Ipv4Addr = address.parse().map_err(|_| bad())?;
        let length: u32 = length.parse().map_err(|_| bad())?;
        if !(8..=30).contains(&length) {
            return Err(bad());
        }
        let size = 1u32 << (32 - length);
        Ok(Pool { base: u32::from(address) & !(size - 1), size, taken: BTreeMap::new() })
    }

    /// Whether `ip` lies in the range.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip).wrapping_sub(self.base) < self.size
    }

    /// Records that pod `uid` holds `ip` (found in its status), if it lies in the range.
    pub fn remember(&mut self, uid: &str, ip: &str) {
        if let Ok(ip) = ip.parse::<Ipv4Addr>()
            && self.contains(ip)
        {
            self.taken.entry(uid.to_string()).or_insert((u32::from(ip) - self.base, SystemTime::now()));
        }
    }

    /// The address of pod `uid`: the one it holds, else the lowest free one; `None` when the range is full.
    pub fn allocate(&mut self, uid: &str) -> Option<Ipv4Addr> {
        if let Some((offset, _)) = self.taken.get(uid) {
            return Some(Ipv4Addr::from(self.base + offset));
        }
        let used: BTreeSet<u32> = self.taken.values().map(|(offset, _)| *offset).collect();
        let offset = (2..self.size - 1).find(|o| !used.contains(o))?;
        self.taken.insert(uid.to_string(), (offset, SystemTime::now()));
        Some(Ipv4Addr::from(self.base + offset))
    }

    /// Gives back the address of pod `uid`.
    pub fn release(&mut self, uid: &str) {
        self.taken.remove(uid);
    }

    /// Forgets every pod not in `live`, a list of the node's pods taken at `listed` (pods removed while the node was
    /// not looking); addresses handed out after the list was taken stay.
    pub fn retain(&mut self, live: &BTreeSet<String>, listed: SystemTime) {
        self.taken.retain(|uid, (_, since)| live.contains(uid) || *since >= listed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_handed_out_once_and_taken_back() {
        let mut pool = Pool::new("10.244.3.0/30").unwrap();
        assert_eq!(pool.allocate("a"), Some(Ipv4Addr::new(10, 244, 3, 2)));
        assert_eq!(pool.allocate("a"), Some(Ipv4Addr::new(10, 244, 3, 2)), "the same pod keeps its address");
        assert_eq!(pool.allocate("b"), None, "a /30 has one usable pod address");
        pool.release("a");
        assert_eq!(pool.allocate("b"), Some(Ipv4Addr::new(10, 244, 3, 2)));

        let mut loopback = Pool::new("127.1.0.0/16").unwrap();
        loopback.remember("x", "127.1.0.2");
        loopback.remember("elsewhere", "10.0.0.2");
        assert_eq!(loopback.allocate("y"), Some(Ipv4Addr::new(127, 1, 0, 3)));
        let listed = SystemTime::now();
        loopback.retain(&BTreeSet::from(["y".to_string()]), listed);
        assert_eq!(loopback.allocate("z"), Some(Ipv4Addr::new(127, 1, 0, 2)));
        assert!(Pool::new("127.1.0.0").is_err() && Pool::new("127.1.0.0/31").is_err());
    }
}
