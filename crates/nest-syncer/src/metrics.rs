//! The syncer's counters, in Prometheus' text format ([`render`]): operations and their latency per kind and
//! direction, queue depth and wait per tenant, patrol rounds, tenant health.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use crate::Syncer;
use crate::sync::Done;

#[derive(Default)]
struct Counts {
    /// (kind, direction) → requests that changed something.
    operations: BTreeMap<(&'static str, &'static str), u64>,
    /// kind → (reconciles, seconds spent).
    reconciles: BTreeMap<&'static str, (u64, f64)>,
    failures: BTreeMap<&'static str, u64>,
    /// tenant → (items taken, seconds waited).
    waits: BTreeMap<String, (u64, f64)>,
    /// tenant → (patrol rounds, items queued by them, seconds spent comparing).
    patrols: BTreeMap<String, (u64, u64, f64)>,
    health: BTreeMap<String, bool>,
    /// (tenant, kind) → objects that waited for room under the tenant's cap.
    capped: BTreeMap<(String, &'static str), u64>,
}

/// The counters.
#[derive(Default)]
pub struct Metrics {
    counts: Mutex<Counts>,
}

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut Counts)) {
        f(&mut self.counts.lock().expect("the metrics lock"));
    }
    pub fn reconciled(&self, kind: &'static str, done: &Done, took: Duration) {
        self.with(|c| {
            *c.operations.entry((kind, "down")).or_default() += done.down as u64;
            *c.operations.entry((kind, "up")).or_default() += done.up as u64;
            let entry = c.reconciles.entry(kind).or_default();
            entry.0 += 1;
            entry.1 += took.as_secs_f64();
        });
    }
    pub fn failed(&self, kind: &'static str) {
        self.with(|c| *c.failures.entry(kind).or_default() += 1);
    }
    pub fn waited(&self, tenant: &str, waited: Duration) {
        self.with(|c| {
            let entry = c.waits.entry(tenant.to_string()).or_default();
            entry.0 += 1;
            entry.1 += waited.as_secs_f64();
        });
    }
    pub fn patrolled(&self, tenant: &str, queued: usize, took: Duration) {
        self.with(|c| {
            let entry = c.patrols.entry(tenant.to_string()).or_default();
            entry.0 += 1;
            entry.1 += queued as u64;
            entry.2 += took.as_secs_f64();
        });
    }
    pub fn set_health(&self, tenant: &str, healthy: bool) {
        self.with(|c| {
            c.health.insert(tenant.to_string(), healthy);
        });
    }
    pub fn capped(&self, tenant: &str, kind: &'static str) {
        self.with(|c| *c.capped.entry((tenant.to_string(), kind)).or_default() += 1);
    }
    /// Forgets a tenant that is gone.
    pub fn forget(&self, tenant: &str) {
        self.with(|c| {
            c.waits.remove(tenant);
            c.patrols.remove(tenant);
            c.health.remove(tenant);
            c.capped.retain(|(t, _), _| t != tenant);
        });
    }
}

/// One metric family: its header, then its samples (`labels`, value).
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: impl IntoIterator<Item = (String, String)>) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// Everything, as Prometheus text.
pub fn render(syncer: &Syncer) -> String {
    let c = syncer.metrics.counts.lock().expect("the metrics lock");
    let mut out = String::new();
    let per_kind = |map: &BTreeMap<&'static str, (u64, f64)>, seconds: bool| -> Vec<(String, String)> {
        map.iter()
            .map(|(kind, (n, s))| (format!("kind=\"{kind}\""), if seconds { format!("{s:.6}") } else { n.to_string() }))
            .collect()
    };
    let operations = c
        .operations
        .iter()
        .map(|((kind, direction), n)| (format!("kind=\"{kind}\",direction=\"{direction}\""), n.to_string()));
    family(
        &mut out,
        "nest_syncer_operations_total",
        "counter",
        "Requests that changed an object, per kind and direction.",
        operations,
    );
    family(&mut out, "nest_syncer_reconciles_total", "counter", "Reconciles per kind.", per_kind(&c.reconciles, false));
    family(
        &mut out,
        "nest_syncer_reconcile_seconds_total",
        "counter",
        "Time spent reconciling, per kind.",
        per_kind(&c.reconciles, true),
    );
    let failures = c.failures.iter().map(|(kind, n)| (format!("kind=\"{kind}\""), n.to_string()));
    family(&mut out, "nest_syncer_failures_total", "counter", "Reconciles that failed, per kind.", failures);
    let tenant = |t: &String| format!("tenant=\"{t}\"");
    let depths = syncer.queue.depths().into_iter().map(|(t, d)| (tenant(&t), d.to_string()));
    family(&mut out, "nest_syncer_queue_depth", "gauge", "Items waiting, per tenant.", depths);
    let items = c.waits.iter().map(|(t, (n, _))| (tenant(t), n.to_string()));
    family(&mut out, "nest_syncer_queue_items_total", "counter", "Items taken from the queue, per tenant.", items);
    let waits = c.waits.iter().map(|(t, (_, s))| (tenant(t), format!("{s:.6}")));
    family(
        &mut out,
        "nest_syncer_queue_wait_seconds_total",
        "counter",
        "Time items waited in the queue, per tenant.",
        waits,
    );
    let patrols = c.patrols.iter().map(|(t, (n, _, _))| (tenant(t), n.to_string()));
    family(&mut out, "nest_syncer_patrols_total", "counter", "Patrol rounds, per tenant.", patrols);
    let scans = c.patrols.iter().map(|(t, (_, _, s))| (tenant(t), format!("{s:.6}")));
    family(
        &mut out,
        "nest_syncer_patrol_scan_seconds_total",
        "counter",
        "Time patrols spent comparing both sides' caches (the reconciles they queue are counted apart), per tenant.",
        scans,
    );
    let compared = c.patrols.iter().map(|(t, (_, n, _))| (tenant(t), n.to_string()));
    family(&mut out, "nest_syncer_patrol_items_total", "counter", "Objects compared by patrols, per tenant.", compared);
    let health = c.health.iter().map(|(t, h)| (tenant(t), u8::from(*h).to_string()));
    family(&mut out, "nest_syncer_tenant_healthy", "gauge", "1 while the tenant's API server answers.", health);
    let capped = c.capped.iter().map(|((t, kind), n)| (format!("tenant=\"{t}\",kind=\"{kind}\""), n.to_string()));
    family(
        &mut out,
        "nest_syncer_capped_total",
        "counter",
        "Objects that waited because their tenant was at its cap of the kind, per tenant and kind.",
        capped,
    );
    let connections = &syncer.kubelet_connections;
    let _ = writeln!(
        out,
        "# HELP nest_syncer_kubelet_connections Connections open on the tenants' kubelet endpoints.\n\
         # TYPE nest_syncer_kubelet_connections gauge\nnest_syncer_kubelet_connections {}",
        connections.open()
    );
    let closed = connections.closed();
    let closed = [("cap", closed.over_cap), ("handshake_timeout", closed.handshake_timeout), ("idle", closed.idle)];
    family(
        &mut out,
        "nest_syncer_kubelet_connections_closed_total",
        "counter",
        "Connections the tenants' kubelet endpoints closed: over a cap as accepted, a TLS handshake too slow, idle too \
         long.",
        closed.map(|(reason, n)| (format!("reason=\"{reason}\""), n.to_string())),
    );
    out
}
