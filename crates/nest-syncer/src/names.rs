//! How tenant objects are named and marked in the super cluster.
//!
//! A tenant is known by its *cluster key*: the Cluster's namespace and name with a short hash of its UID between
//! them, so that a Cluster deleted and created again under the same name is another tenant. A tenant namespace `ns`
//! becomes the super namespace `<key>-<ns>`; names longer than a DNS label allows are cut and end in a hash of the
//! whole, so two tenants never collide. Every super object carries the labels and annotations below.

/// Label on every super object: the tenant's cluster key.
pub use nest_core::tenancy::TENANT_LABEL;
/// Annotation: the tenant namespace the object came from.
pub const TENANT_NAMESPACE: &str = "tenancy.nest.dev/namespace";
/// Annotation: the tenant object's name.
pub const TENANT_NAME: &str = "tenancy.nest.dev/name";
/// Annotation: the tenant object's UID; the syncer changes or deletes a super object only when it matches.
pub use nest_core::tenancy::TENANT_UID;
/// Annotation on a tenant Service: the ClusterIP of its super Service.
pub const SUPER_CLUSTER_IP: &str = "tenancy.nest.dev/super-cluster-ip";
/// Label on super StorageClasses, PriorityClasses and CRDs that every tenant gets a copy of (`"true"`).
pub const PUBLIC_LABEL: &str = "tenancy.nest.dev/public";
/// Label on the tenant copies of public objects.
pub const FROM_SUPER_LABEL: &str = "tenancy.nest.dev/from-super";
/// Label on tenant nodes the syncer made.
pub const VIRTUAL_NODE_LABEL: &str = "tenancy.nest.dev/virtual-node";

/// The label and annotation prefix that flows up from super objects to tenant objects by default.
pub const TRANSPARENT_PREFIX: &str = "transparency.tenancy.nest.dev/";

/// Metadata prefixes that are not copied down: the syncer's own, nest's instructions to the super cluster's nodes
/// (`nest.dev/exit-code`, `nest.dev/stop-seconds`, `nest.dev/ready` drive a simulated pod), which a tenant must not
/// give the super cluster (issue 18), and [`TRANSPARENT_PREFIX`], which flows up only: what the super cluster says
/// there, the tenant must not be able to say for it (issue 33). Other prefixes configured to flow up are not copied
/// down either ([`crate::kinds::Mapping::transparent`]).
pub const RESERVED_PREFIXES: &[&str] =
    &["tenancy.nest.dev/", "nest.dev/", TRANSPARENT_PREFIX, "kubectl.kubernetes.io/last-applied-configuration"];

/// The ConfigMap every namespace has, holding its cluster's CA (kube-controller-manager's root-CA publisher makes
/// it). The super cluster's publisher keeps its own in every super namespace, so the tenant's goes down under
/// another name ([`SUPER_ROOT_CA`]) and pods that name it are pointed there: two owners of one object would rewrite
/// it after each other forever.
pub const ROOT_CA: &str = "kube-root-ca.crt";
/// The super name of a tenant's [`ROOT_CA`]; a tenant ConfigMap of this name is not synced.
pub const SUPER_ROOT_CA: &str = "nest-kube-root-ca.crt";

// The cluster key and the hashes it is made of are shared with the provider and the node, which label and wall
// a tenant's control plane by the same key.
pub use nest_core::tenancy::{cluster_key, digest, hash, label_safe, short_hash};

/// The super namespace of tenant namespace `namespace`.
pub fn super_namespace(key: &str, namespace: &str) -> String {
    label_safe(&format!("{key}-{namespace}"))
}

/// The super name of tenant ConfigMap `name`: `None` for the one name reserved for the tenant's root CA.
pub fn super_config_map(name: &str) -> Option<&str> {
    match name {
        ROOT_CA => Some(SUPER_ROOT_CA),
        SUPER_ROOT_CA => None,
        other => Some(other),
    }
}

/// Whether a metadata key is copied between tenant and super objects.
pub fn copied(key: &str) -> bool {
    !RESERVED_PREFIXES.iter().any(|prefix| key.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_never_collide_and_stay_labels() {
        let a = cluster_key("default", "a", "uid-1");
        let a_again = cluster_key("default", "a", "uid-2");
        assert_ne!(a, a_again, "a Cluster made again is another tenant");
        assert_eq!(super_namespace(&a, "web"), format!("{a}-web"));
        let long = "x".repeat(70);
        let one = super_namespace(&a, &long);
        let other = super_namespace(&a, &format!("{long}y"));
        assert!(one.len() <= 63 && other.len() <= 63);
        assert_ne!(one, other);
        assert!(!copied("tenancy.nest.dev/uid") && copied("app"));
        for instruction in ["nest.dev/exit-code", "nest.dev/stop-seconds", "nest.dev/ready"] {
            assert!(!copied(instruction), "{instruction} reaches the super cluster");
        }
        assert!(copied("example.nest.dev/team"), "only nest.dev/ itself is reserved");
        assert!(!copied("transparency.tenancy.nest.dev/ingress"), "what flows up never goes down");
    }

    #[test]
    fn the_root_ca_goes_down_under_a_name_no_tenant_configmap_takes() {
        assert_eq!(super_config_map("kube-root-ca.crt"), Some("nest-kube-root-ca.crt"));
        assert_eq!(super_config_map("nest-kube-root-ca.crt"), None);
        assert_eq!(super_config_map("settings"), Some("settings"));
    }

    #[test]
    fn long_names_end_in_a_digest_of_the_whole() {
        let long = format!("{}-{}", "a".repeat(40), "b".repeat(40));
        let safe = label_safe(&long);
        assert_eq!(safe.len(), 63);
        assert_eq!(&safe[..46], &long[..46]);
        assert_eq!(safe[47..], digest(&long, 16));
        assert_eq!(digest("nest", 16), digest("nest", 16));
        assert_ne!(digest("nest", 16), digest("nesu", 16));
        assert!(digest("nest", 16).chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    }
}
