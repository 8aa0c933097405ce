//! `nest kubeconfig`: a kubeconfig for a user of a cluster whose CA this machine holds, with a client certificate
//! issued for it (as `kubeadm kubeconfig user --client-name --org`): a node's (`system:node:<name>`, group
//! `system:nodes`), a component's, a person's.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The cluster CA's directory (`ca.crt`, `ca.key`; `nest apiserver` keeps them in `<data dir>/pki`).
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR")]
    ca_dir: PathBuf,
    /// The API server's URL.
    #[arg(long, value_name = "URL")]
    server: String,
    /// The user: the certificate's common name.
    #[arg(long, value_name = "NAME")]
    user: String,
    /// The user's group: the certificate's organization.
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (cert, key, ca) = nest_apiserver::certs::issue_client(&args.ca_dir, &args.user, args.group.as_deref())?;
    print!("{}", nest_apiserver::certs::kubeconfig(&args.server, &ca, &cert, &key, &args.user));
    Ok(())
}
