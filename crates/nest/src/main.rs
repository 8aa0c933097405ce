//! `nest`: nested Kubernetes control planes. One binary; each subcommand is one component or tool.
//!
//! Today: `nest up` (a whole cluster in one process), `nest apiserver`, `nest controller-manager`, `nest scheduler`,
//! `nest node`, `nest proxy`, `nest manager`, `nest syncer`, `nest cluster`, `nest render`, `nest clusterctl`, `nest crds`, `nest etcd-member`,
//! `nest bench` and `nest debug` (small programs for pods). See `docs/ARCHITECTURE.md` for where each part lives.

mod bench;
mod cmd;
mod memory;

use clap::{Parser, Subcommand};

/// nest: nested Kubernetes control planes.
#[derive(Parser, Debug)]
#[command(name = "nest", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// A whole cluster on this machine: the API server on embedded storage and the controllers.
    Up(cmd::up::Args),
    /// The Kubernetes-compatible API server.
    Apiserver(Box<cmd::apiserver::Args>),
    /// The controllers (namespaces, service accounts, …), behind a leader Lease.
    ControllerManager(cmd::controller_manager::Args),
    /// The scheduler: binds pending pods to nodes.
    Scheduler(cmd::scheduler::Args),
    /// Nodes that run the pods bound to them, as processes or in simulation.
    Node(cmd::node::Args),
    /// The service proxy: serves loopback ClusterIPs on this machine.
    Proxy(cmd::proxy::Args),
    /// Small programs to run in pods (an HTTP echo server, a crashing program, a file printer).
    Debug {
        #[command(subcommand)]
        which: cmd::debug::Debug,
    },
    /// Tenant clusters on a management cluster: create, list, describe, kubeconfig, delete.
    Cluster(cmd::cluster::Args),
    /// The Cluster API provider's controllers: nested control planes and their components.
    Manager(cmd::manager::Args),
    /// Copies every tenant's workloads into the management cluster, and their status back.
    Syncer(cmd::syncer::Args),
    /// Prints the manifests the controllers would apply for the NestedControlPlanes (and Clusters, components and
    /// Services) read as YAML on stdin, without any API server.
    Render(cmd::render::Args),
    /// Writes the Cluster API provider packaged for clusterctl (components, metadata, cluster template) into a
    /// directory, with a clusterctl configuration naming it.
    Clusterctl(cmd::clusterctl::Args),
    /// Starts one member of a new etcd cluster whose members are known by address (what a NestedEtcd's pods run).
    EtcdMember(cmd::etcd_member::Args),
    /// Prints the CustomResourceDefinitions of the Cluster API provider (Cluster, NestedCluster, NestedControlPlane and
    /// its components).
    Crds(cmd::crds::Args),
    /// Prints a kubeconfig for a user (and group), with a client certificate issued by the cluster CA.
    Kubeconfig(cmd::kubeconfig::Args),
    /// nest's own image as an OCI archive (build), and a node's image store (import, push, list).
    Image(cmd::image::Args),
    /// Benchmarks that print one JSON line per measured configuration.
    Bench {
        #[command(subcommand)]
        which: bench::Bench,
    },
}

/// What is logged unless `RUST_LOG` says otherwise: warnings, but not kube-client's, which print whole response
/// bodies (a Secret's data among them) when one does not decode, nor its request layer's line for every failed
/// connection (a component that retries reports its own failures; on `nest up` each tenant's API server starting
/// printed a dozen ERROR lines).
const LOG_DEFAULT: &str = "warn,kube_client=error,kube_client::client::builder=off";

fn main() -> anyhow::Result<()> {
    // In a sandbox the node mounts this binary as the container's first process (`/.nest/init PROGRAM ARGS…`).
    let mut args = std::env::args_os();
    if args.next().is_some_and(|first| first == nest_node::process::sandbox::INIT_PATH) {
        nest_node::process::init::run(args.collect());
    }
    // Everything nest creates is its user's alone: keys, kubeconfigs, Secret volumes, data directories. A mode set
    // after writing leaves a moment in which another user can open the file; a umask leaves none.
    // SAFETY: umask only sets this process's file-creation mask; it touches no memory and cannot fail.
    unsafe { libc::umask(0o077) };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| LOG_DEFAULT.into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    memory::give_back_freed();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match cli.command {
        Command::Up(args) => runtime.block_on(cmd::up::run(args)),
        Command::Apiserver(args) => runtime.block_on(cmd::apiserver::run(*args)),
        Command::ControllerManager(args) => runtime.block_on(cmd::controller_manager::run(args)),
        Command::Scheduler(args) => runtime.block_on(cmd::scheduler::run(args)),
        Command::Node(args) => runtime.block_on(cmd::node::run(args)),
        Command::Proxy(args) => runtime.block_on(cmd::proxy::run(args)),
        Command::Bench { which } => runtime.block_on(bench::run(which)),
        Command::Debug { which } => runtime.block_on(cmd::debug::run(which)),
        Command::Crds(args) => cmd::crds::run(args),
        Command::Kubeconfig(args) => cmd::kubeconfig::run(args),
        Command::Render(args) => cmd::render::run(args),
        Command::Clusterctl(args) => cmd::clusterctl::run(args),
        Command::EtcdMember(args) => cmd::etcd_member::run(args),
        Command::Manager(args) => runtime.block_on(cmd::manager::run(args)),
        Command::Syncer(args) => runtime.block_on(cmd::syncer::run(args)),
        Command::Cluster(args) => runtime.block_on(cmd::cluster::run(args)),
        Command::Image(args) => runtime.block_on(cmd::image::run(args)),
    }
}
