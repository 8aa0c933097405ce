//! `nest bench wall`: what the network wall between tenants costs a new connection. Two pods' network namespaces on
//! a bridge of the bench's own (as the node makes them), a TCP listener in one, and from the other `--count` new
//! connections, each opened and closed, timed; once without the wall and once with it, its sets holding
//! `--tenants` other tenants of `--pods-per-tenant` pods each besides the two (so that what a lookup costs at that
//! size shows), in `--rounds` rounds, which of the two goes first alternating. One JSON line per round and configuration. Needs root, nftables and
//! `br_netfilter`, as the node does.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nest_node::firewall::{Firewall, Zone};

use super::emit;
use super::stats::Summary;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// New connections timed per round and configuration.
    #[arg(long, default_value_t = 2000)]
    count: usize,
    /// Rounds, each timing both configurations.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Other tenants whose pods fill the wall's sets.
    #[arg(long, default_value_t = 1000)]
    tenants: u32,
    /// Pods of each other tenant.
    #[arg(long, default_value_t = 10)]
    pods_per_tenant: u32,
    /// Internal: time connections to this address from this network namespace, and print the latencies.
    #[arg(long, hide = true)]
    connect_to: Option<SocketAddr>,
}

const BRIDGE_ADDRESS: &str = "10.207.0.1/24";
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 207, 0, 2);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 207, 0, 3);

pub async fn run(args: Args) -> anyhow::Result<()> {
    if let Some(target) = args.connect_to {
        return connect_many(target, args.count).await;
    }
    let lab = Lab::new()?;
    let firewall = Firewall::new(&lab.bridge);
    let tenant = Zone::Tenant("bench-tenant".into());
    // Each round times both, the one timed first alternating, so that warming up favours neither.
    for round in 1..=args.rounds {
        let order = if round % 2 == 1 { [false, true] } else { [true, false] };
        for walled in order {
            if walled {
                firewall.install(&[]).await?;
                for (address, port) in [(SERVER, &lab.ports[0]), (CLIENT, &lab.ports[1])] {
                    firewall.admit(address, &tenant, false, Some(port)).await?;
                }
                fill(&firewall, args.tenants, args.pods_per_tenant).await?;
            }
            let latencies = lab.time(args.count)?;
            if walled {
                firewall.uninstall().await;
            }
            let mut samples: Vec<Duration> = latencies;
            let summary = Summary::of(&mut samples);
            emit(serde_json::json!({
                "bench": "wall", "round": round, "wall": walled, "connections": summary.count,
                "other_tenants": if walled { args.tenants } else { 0 },
                "other_pods": if walled { args.tenants * args.pods_per_tenant } else { 0 },
                "connect_avg_ms": summary.avg_ms, "connect_p50_ms": summary.p50_ms,
                "connect_p99_ms": summary.p99_ms, "connect_max_ms": summary.max_ms,
            }));
        }
    }
    Ok(())
}

/// Puts `tenants × pods` addresses of other tenants into the wall, as a busy node's sets would hold them.
async fn fill(firewall: &Firewall, tenants: u32, pods: u32) -> anyhow::Result<()> {
    let base = u32::from(Ipv4Addr::new(10, 208, 0, 0));
    let all = (0..tenants).flat_map(|tenant| {
        (0..pods).map(move |pod| {
            let n = tenant.saturating_mul(pods).saturating_add(pod);
            (Ipv4Addr::from(base.saturating_add(n)), Zone::Tenant(format!("other-{tenant}")))
        })
    });
    firewall.admit_all(all).await?;
    Ok(())
}

/// Opens and closes `count` connections to `target`, printing each one's time in microseconds, a line each.
async fn connect_many(target: SocketAddr, count: usize) -> anyhow::Result<()> {
    let mut out = String::new();
    for _ in 0..count {
        let began = Instant::now();
        let stream = tokio::net::TcpStream::connect(target).await.with_context(|| format!("connecting to {target}"))?;
        let took = began.elapsed();
        drop(stream);
        out.push_str(&format!("{}\n", took.as_micros()));
    }
    print!("{out}");
    Ok(())
}

/// A bridge with a server's and a client's network namespace on it, removed when dropped.
struct Lab {
    bridge: String,
    namespaces: [String; 2],
    /// The veths' host sides: the server's, the client's.
    ports: [String; 2],
    server: std::process::Child,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("running ip (iproute2)")?;
    anyhow::ensure!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    Ok(())
}

impl Lab {
    fn new() -> anyhow::Result<Lab> {
        let id = std::process::id() % 10_000;
        let bridge = format!("nestbw{id}");
        let namespaces = [format!("nestbw{id}-server"), format!("nestbw{id}-client")];
        let ports = [format!("vbw{id}s"), format!("vbw{id}c")];
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", BRIDGE_ADDRESS, "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for ((namespace, port), address) in namespaces.iter().zip(&ports).zip([SERVER, CLIENT]) {
            ip(&["netns", "add", namespace])?;
            ip(&["link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", namespace])?;
            ip(&["link", "set", port, "master", &bridge, "up"])?;
            ip(&["-n", namespace, "addr", "add", &format!("{address}/24"), "dev", "eth0"])?;
            ip(&["-n", namespace, "link", "set", "eth0", "up"])?;
            ip(&["-n", namespace, "link", "set", "lo", "up"])?;
        }
        let nest = std::env::current_exe()?;
        let server = Command::new("ip")
            .args(["netns", "exec", &namespaces[0]])
            .arg(&nest)
            .args(["debug", "http-echo", "--listen", &format!("{SERVER}:8000")])
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("starting the listener")?;
        std::thread::sleep(Duration::from_millis(500));
        Ok(Lab { bridge, namespaces, ports, server })
    }

    /// `count` connections from the client to the server, timed in the client's namespace.
    fn time(&self, count: usize) -> anyhow::Result<Vec<Duration>> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.namespaces[1]])
            .arg(std::env::current_exe()?)
            .args(["bench", "wall", "--count", &count.to_string(), "--connect-to", &format!("{SERVER}:8000")])
            .output()
            .context("running the client")?;
        anyhow::ensure!(out.status.success(), "the client: {}", String::from_utf8_lossy(&out.stderr).trim());
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| line.parse::<u64>().ok())
            .map(Duration::from_micros)
            .collect())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        for namespace in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "delete", namespace]).output();
        }
        let _ = Command::new("ip").args(["link", "delete", &self.bridge]).output();
    }
}
