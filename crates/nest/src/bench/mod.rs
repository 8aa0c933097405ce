//! `nest bench …`: measurements printed as JSON lines, one per configuration, for `docs/BENCHMARKS.md`.
//!
//! Benchmarks are commands, never timed tests: the machines are shared and noisy, so compare ratios within one run.

mod api;
mod cluster;
mod exec;
mod idle;
mod stats;
mod store;
mod sync;
mod tenants;
mod wall;

use std::time::Duration;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum Bench {
    /// The storage engine: both backends, same durability (every commit fsynced).
    Store(store::Args),
    /// The API server under vcluster's published load, on both backends.
    Api(api::Args),
    /// A Deployment of 1,000 replicas on 10 simulated nodes: the time until every pod is Running.
    Cluster(cluster::Args),
    /// An idle `nest up`, then with more idle tenants: the CPU of all its processes and the rate of new connections.
    Idle(idle::Args),
    /// Entering a pod: `kubectl exec`'s round trip and a port-forward's throughput, in the management cluster and
    /// through a tenant, beside `runc exec` and a direct connection (the floor).
    Exec(exec::Args),
    /// Tenant clusters (Cluster + NestedCluster + NestedControlPlane) run as processes: time to ready, memory.
    Tenants(tenants::Args),
    /// The syncer: pods created in many tenants at once, to the super cluster and Running; memory; resync.
    Sync(sync::Args),
    /// The network wall between tenants: a new connection's time with and without it (needs root).
    Wall(wall::Args),
}

pub async fn run(which: Bench) -> anyhow::Result<()> {
    match which {
        Bench::Store(args) => store::run(args).await,
        Bench::Api(args) => api::run(args).await,
        Bench::Cluster(args) => cluster::run(args).await,
        Bench::Exec(args) => exec::run(args).await,
        Bench::Idle(args) => idle::run(args).await,
        Bench::Tenants(args) => tenants::run(args).await,
        Bench::Sync(args) => sync::run(args).await,
        Bench::Wall(args) => wall::run(args).await,
    }
}

/// Parses durations such as `5s`, `500ms`, `2m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 5s or 500ms"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" => number * 60.0,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (use ms, s or m)")),
    };
    Ok(Duration::from_secs_f64(seconds))
}

/// Prints one JSON line on standard output.
pub fn emit(line: serde_json::Value) {
    println!("{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("5h").is_err());
    }
}
