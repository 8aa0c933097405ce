//! `nest`: nested Kubernetes control planes. One binary; each subcommand is one component or tool.
//!
//! Today: `nest apiserver` and `nest bench store`. See `docs/ARCHITECTURE.md` for where each part lives.

mod bench;
mod cmd;

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
    /// The Kubernetes-compatible API server.
    Apiserver(cmd::apiserver::Args),
    /// Benchmarks that print one JSON line per measured configuration.
    Bench {
        #[command(subcommand)]
        which: bench::Bench,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match cli.command {
        Command::Apiserver(args) => runtime.block_on(cmd::apiserver::run(args)),
        Command::Bench { which } => runtime.block_on(bench::run(which)),
    }
}
