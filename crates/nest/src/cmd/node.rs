//! `nest node`: simulated nodes (`nest.dev/runtime=simulated`) that report the pods bound to them Running.

use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The cluster to join.
    #[arg(long, value_name = "FILE")]
    kubeconfig: PathBuf,
    /// The node's name; with `--count`, the prefix of `<name>-<i>`.
    #[arg(long, value_name = "NAME")]
    name: String,
    /// How many nodes this process simulates.
    #[arg(long, default_value_t = 1)]
    count: u8,
    /// Capacity: CPU cores.
    #[arg(long, default_value = "4")]
    cpu: String,
    /// Capacity: memory.
    #[arg(long, default_value = "8Gi")]
    memory: String,
    /// Capacity: pods.
    #[arg(long, default_value_t = 110)]
    pods: u32,
    /// How long a pod takes to become Running and Ready, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    start_delay_ms: u64,
    /// How often each node renews its Lease, in seconds (the Lease lasts four times as long).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    lease_seconds: u64,
}

/// The options of node `i` of `args`.
fn options(args: &Args, i: u8) -> nest_node::Options {
    let name = if args.count == 1 { args.name.clone() } else { format!("{}-{i}", args.name) };
    let mut options = nest_node::Options::numbered(name, i);
    options.cpu = args.cpu.clone();
    options.memory = args.memory.clone();
    options.pods = args.pods;
    options.start_delay = Duration::from_millis(args.start_delay_ms);
    options.lease_every = Duration::from_secs(args.lease_seconds.max(1));
    options
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let (client, _) = nest_controllers::connect(&args.kubeconfig).await?;
    let nodes = (0..args.count.max(1)).map(|i| {
        let (client, options) = (client.clone(), options(&args, i));
        tokio::spawn(async move { nest_node::run(client, options, std::future::pending()).await })
    });
    let nodes: Vec<_> = nodes.collect();
    eprintln!("nest node: {} simulated node(s) running", nodes.len());
    tokio::select! {
        (result, _, _) = futures_util::future::select_all(nodes) => { result??; }
        () = super::shutdown_signal() => {}
    }
    eprintln!("nest node: stopped");
    Ok(())
}
