//! How a tenant is known in the management cluster: its *cluster key*, and the label that carries it.
//!
//! A tenant is known by the key of its Cluster: the Cluster's namespace and name with a short hash of its UID between
//! them, so that a Cluster deleted and made again under the same name is another tenant. Every object the syncer
//! makes for a tenant in the management cluster carries [`TENANT_LABEL`] with the key, and so do the pods and
//! Services of the tenant's control plane (the provider labels them): the node's network wall puts each tenant's
//! pods in a zone of their own by this label. A tenant cannot set the label itself: the syncer does not copy
//! `tenancy.nest.dev/` metadata down.
//!
//! ```
//! let key = nest_core::tenancy::cluster_key("default", "demo", "0b6c1a6e-4f7e-4a55-9b59-5c1cbb0c1b8e");
//! assert!(key.starts_with("default-") && key.ends_with("-demo"));
//! ```

use sha2::Digest as _;

/// Label on every management object of a tenant: the tenant's cluster key.
pub const TENANT_LABEL: &str = "tenancy.nest.dev/cluster";

/// Annotation the syncer puts on every object it makes for a tenant: the tenant object's UID. The node takes a pod
/// with it (and [`TENANT_LABEL`]) for a tenant's workload.
pub const TENANT_UID: &str = "tenancy.nest.dev/uid";

/// A tenant's share of each node, which the syncer writes from its Cluster's annotations of the same names onto
/// every pod of the tenant, and the node gives the tenant's cgroup subtree: memory (a quantity of bytes), CPU (a
/// quantity of cores) and processes (a count), for all of its pods on the node together.
pub const TENANT_MEMORY: &str = "tenancy.nest.dev/tenant-memory";
/// See [`TENANT_MEMORY`].
pub const TENANT_CPU: &str = "tenancy.nest.dev/tenant-cpu";
/// See [`TENANT_MEMORY`].
pub const TENANT_PIDS: &str = "tenancy.nest.dev/tenant-pids";

/// Whether a tenant's pods may reach beyond the machine (`deny` keeps them in): a Cluster's annotation, which the
/// syncer writes as a label on the tenant's pods, where the node's network wall reads it.
pub const EGRESS: &str = "tenancy.nest.dev/egress";

/// The longest DNS label.
const LABEL_MAX: usize = 63;

/// FNV-1a, 64 bits: stable across builds and machines (for the cluster key's UID part, which no tenant chooses).
pub fn hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3))
}

/// [`hash`] in base 36, `len` characters.
pub fn short_hash(text: &str, len: usize) -> String {
    let mut n = hash(text);
    let mut out = String::new();
    for _ in 0..len {
        out.push(base36(n % 36));
        n /= 36;
    }
    out
}

fn base36(digit: impl Into<u128>) -> char {
    char::from_digit(u32::try_from(digit.into() % 36).unwrap_or(0), 36).unwrap_or('0')
}

/// SHA-256 of `text` in base 36, `len` characters (at most 48): what ends a name too long for a label. Collision
/// resistant, so that no tenant can choose a name that lands in another tenant's namespace (16 characters are 82
/// bits).
pub fn digest(text: &str, len: usize) -> String {
    let sum = sha2::Sha256::digest(text.as_bytes());
    let (high, low) = sum.split_at(16);
    let mut halves = [
        u128::from_be_bytes(high.try_into().unwrap_or_default()),
        u128::from_be_bytes(low.try_into().unwrap_or_default()),
    ];
    let mut out = String::new();
    for i in 0..len.min(48) {
        // 24 digits from each half: each has 128 bits, more than 24 base-36 digits need.
        let n = &mut halves[usize::from(i >= 24)];
        out.push(base36(*n));
        *n /= 36;
    }
    out
}

/// `name` as a DNS label: itself when short enough, else cut (on a character boundary) and ended with a digest of
/// the whole.
pub fn label_safe(name: &str) -> String {
    if name.len() <= LABEL_MAX {
        return name.to_string();
    }
    let suffix = digest(name, 16);
    let mut cut = LABEL_MAX - suffix.len() - 1;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let keep = name[..cut].trim_end_matches('-');
    format!("{keep}-{suffix}")
}

/// The key of the tenant Cluster `namespace/name` with UID `uid`.
pub fn cluster_key(namespace: &str, name: &str, uid: &str) -> String {
    label_safe(&format!("{namespace}-{}-{name}", short_hash(uid, 5)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_differ_by_uid() {
        // Fixed forever: a change would rename every tenant's namespaces in the management cluster.
        assert_eq!(cluster_key("default", "demo", "uid-1"), "default-bahrq-demo");
        assert_eq!(digest("abc", 30), "z82js9fxb0soy0hqu8ak93f156hjgu");
        assert_ne!(cluster_key("default", "a", "uid-1"), cluster_key("default", "a", "uid-2"));
        let long = "x".repeat(100);
        let key = cluster_key("default", &long, "uid");
        assert_eq!(key.len(), 63);
        assert!(label_safe(&"é".repeat(40)).len() <= 63);
    }
}
