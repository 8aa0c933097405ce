//! `nest crds`: prints the CustomResourceDefinitions of nest's Cluster API provider, as YAML documents that
//! `kubectl apply -f -` takes.

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Leave out the Cluster API core's `Cluster` (for management clusters where the Cluster API core is installed).
    #[arg(long)]
    provider_only: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let crds = if args.provider_only { nest_capn::crds::provider() } else { nest_capn::crds::all() };
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(&crd)?);
    }
    use std::io::Write;
    match std::io::stdout().write_all(out.as_bytes()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(error.into()),
        _ => Ok(()),
    }
}
