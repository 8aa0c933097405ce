//! What a tenant object must pass before its copy is made or changed, besides the super cluster's own admission:
//! the tenant's caps (objects and bytes per kind) and compute quota over what the syncer made for it, counting what
//! it just made and the cache does not show yet, and the platform admin's policy ([`crate::policy`]), which may ask
//! what the syncer knows of the management cluster's addresses.

use kube::ResourceExt;
use serde_json::Value;

use crate::Syncer;
use crate::kinds::KindId;
use crate::names::{TENANT_LABEL, TENANT_NAME};
use crate::tenants::Tenant;

/// Whether super object `wanted` (`namespace/name` of synced kind `kind`) fits under the tenant's cap of its kind
/// beside the tenant's other objects of the kind in the super cluster, and, for a kind that counts against the
/// tenant's compute quota (pods, [`crate::kinds::Kind::usage`]), under that quota beside all its other pods; a
/// refusal is a 403 the tenant is told of, and the object waits (the next change or patrol tries again).
///
/// What the cache does not show yet counts too: with `reserve`, an object let through is recorded
/// ([`Tenant::reserved`]) until the cache shows it or a minute has passed, so that objects created one after another
/// faster than the watch reports them cannot pass a cap or quota together. [`release`] takes back a reservation
/// whose create failed.
#[allow(clippy::too_many_arguments)]
pub fn within_caps(
    syncer: &Syncer,
    tenant: &Tenant,
    kind: KindId,
    namespace: &str,
    name: &str,
    wanted: &Value,
    size: Option<u64>,
    reserve: bool,
) -> kube::Result<()> {
    let spec = syncer.kind(kind);
    let plural = spec.name;
    let policy = tenant.policy.read().expect("the policy lock").clone();
    let cap = policy.cap(plural);
    let (mut objects, mut bytes) = (0usize, 0u64);
    let mut used = crate::compute::Usage::default();
    let mut reserved = tenant.reserved.lock().expect("the reservations lock");
    let mut seen = std::collections::HashSet::new();
    for object in syncer.super_cache(kind).objects.state() {
        // Only what the syncer made for the tenant's objects counts (its control plane's pods and Services carry its
        // label too, and are the platform's).
        let (object_namespace, object_name) = (
            object.metadata.namespace.as_deref().unwrap_or_default(),
            object.metadata.name.as_deref().unwrap_or_default(),
        );
        if object.labels().get(TENANT_LABEL) != Some(&tenant.key)
            || !object.annotations().contains_key(TENANT_NAME)
            || (object_name == name && object_namespace == namespace)
        {
            continue;
        }
        let key = (kind, object_namespace.to_string(), object_name.to_string());
        if reserved.contains_key(&key) {
            seen.insert(key);
        }
        objects += 1;
        bytes = bytes.saturating_add(crate::cached_bytes(&object));
        if let Some(usage) = spec.usage {
            used.add(&usage(&crate::full(&object), None));
        }
    }
    reserved.retain(|key, reservation| reservation.at.elapsed() < RESERVED_FOR && !seen.contains(key));
    for ((of, at_namespace, at_name), reservation) in reserved.iter() {
        if *of == kind && !(at_name == name && at_namespace == namespace) {
            objects += 1;
            bytes = bytes.saturating_add(reservation.size);
            used.add(&reservation.usage);
        }
    }
    let size = size.unwrap_or_else(|| u64::try_from(wanted.to_string().len()).unwrap_or(u64::MAX));
    let refused = |refusal: String| {
        syncer.metrics.capped(&tenant.key, plural);
        kube::Error::Api(kube::core::Status::failure(&refusal, "Forbidden").with_code(403).boxed())
    };
    crate::policy::within(cap, plural, objects, bytes, size).map_err(refused)?;
    let requested = spec.usage.map(|usage| usage(wanted, Some(&policy.defaults))).unwrap_or_default();
    if spec.usage.is_some() {
        let tenant_name = wanted["metadata"]["annotations"][TENANT_NAME].as_str().unwrap_or(name);
        policy.quota.admit(tenant_name, &used, &requested).map_err(refused)?;
    }
    if reserve {
        let at = std::time::Instant::now();
        let reservation = crate::tenants::Reservation { size, usage: requested, at };
        reserved.insert((kind, namespace.to_string(), name.to_string()), reservation);
    }
    Ok(())
}

/// How long an object the syncer created counts against its tenant's caps and quota before the cache shows it.
const RESERVED_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// Takes back what [`within_caps`] reserved for super object `namespace/name` of kind `kind`: its create failed.
pub fn release(tenant: &Tenant, kind: KindId, namespace: &str, name: &str) {
    let key = (kind, namespace.to_string(), name.to_string());
    tenant.reserved.lock().expect("the reservations lock").remove(&key);
}

/// What the tenant's policy ([`crate::policy`]) says of super object `wanted` of kind `kind`.
pub fn admit(
    syncer: &Syncer,
    tenant: &Tenant,
    kind: &crate::kinds::Kind,
    policy: &crate::policy::Policy,
    wanted: &Value,
) -> Result<(), String> {
    let public_priority_classes = syncer
        .public
        .iter()
        .find(|public| public.name == "priorityclasses")
        .map(|public| public.objects.state().iter().map(|class| class.name_any()).collect())
        .unwrap_or_default();
    // Gathered once per check, and only for a check that asks about an address.
    let known = std::cell::OnceCell::new();
    let forbidden_address = |ip: std::net::IpAddr| -> Option<&'static str> {
        crate::addresses::refused(ip, &tenant.key, known.get_or_init(|| known_addresses(syncer)))
    };
    let cx = crate::policy::Context { policy, public_priority_classes, forbidden_address: &forbidden_address };
    (kind.admit)(wanted, &cx)
}

/// What the syncer knows now of the management cluster's addresses ([`crate::addresses::Known`]): its API server's,
/// its nodes' and their pod ranges, the ranges it was told of, and the addresses of the pods labelled with a tenant
/// (those of finished pods aside: their addresses are free again). An address two tenants' pods claim is neither's.
pub fn known_addresses(syncer: &Syncer) -> crate::addresses::Known {
    use crate::addresses::canonical;
    let mut known = crate::addresses::Known {
        api_servers: syncer.api_addresses.read().expect("the addresses lock").clone(),
        kubelet: Some(syncer.options.kubelet_address),
        pod_ranges: syncer.options.pod_ranges.clone(),
        service_ranges: syncer.options.service_ranges.clone(),
        ..Default::default()
    };
    for node in syncer.super_nodes.state() {
        let addresses = node.status.iter().flat_map(|s| s.addresses.iter().flatten());
        known.nodes.extend(addresses.filter_map(|a| a.address.parse::<std::net::IpAddr>().ok()));
        let spec = node.spec.as_ref();
        let ranges =
            spec.and_then(|s| s.pod_cidrs.as_ref()).into_iter().flatten().chain(spec.and_then(|s| s.pod_cidr.as_ref()));
        for range in ranges.filter_map(|r| r.parse::<crate::addresses::Range>().ok()) {
            if !known.pod_ranges.contains(&range) {
                known.pod_ranges.push(range);
            }
        }
    }
    if let Some(pods) = syncer.find_kind("pods") {
        for pod in syncer.super_cache(pods).objects.state() {
            let Some(owner) = pod.labels().get(TENANT_LABEL) else { continue };
            // Kept beside the compacted body ([`crate::compact`]).
            let status = &pod.data["status"];
            if matches!(status["phase"].as_str(), Some("Succeeded" | "Failed")) {
                continue;
            }
            let listed = status["podIPs"].as_array().into_iter().flatten().filter_map(|p| p["ip"].as_str());
            for ip in status["podIP"].as_str().into_iter().chain(listed) {
                let Ok(ip) = ip.parse::<std::net::IpAddr>() else { continue };
                let claimed = known.pods.entry(canonical(ip)).or_insert_with(|| owner.clone());
                if claimed != owner {
                    // No key is empty.
                    claimed.clear();
                }
            }
        }
    }
    known
}
