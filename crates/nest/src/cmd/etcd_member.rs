//! `nest etcd-member`: starts one member of a new etcd cluster whose members are known by address before they start
//! (the `nest` flavor's NestedEtcd, where each member has a Service of its own). Given its name and the initial
//! cluster (`name=peer-URL,…`), it gives etcd the peer URL listed for its name as the one to advertise, the same
//! host on the client port as its client URL, then becomes `etcd` (from PATH) with the remaining arguments. It runs
//! nothing but etcd.

use std::ffi::OsString;

use anyhow::Context;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// This member's name, as the initial cluster lists it.
    #[arg(long)]
    name: String,
    /// Every member: `name=https://address:2380,…`.
    #[arg(long, value_name = "MEMBERS")]
    initial_cluster: String,
    /// More arguments for etcd, after `--`.
    #[arg(last = true)]
    etcd_args: Vec<OsString>,
}

/// The arguments etcd gets for member `name` of `initial_cluster`.
fn etcd_arguments(name: &str, initial_cluster: &str) -> anyhow::Result<Vec<String>> {
    let peer = initial_cluster
        .split(',')
        .find_map(|member| member.split_once('=').filter(|(n, _)| *n == name).map(|(_, url)| url.to_string()))
        .with_context(|| format!("the initial cluster {initial_cluster:?} does not list {name:?}"))?;
    let (base, port) = peer.rsplit_once(':').with_context(|| format!("{peer:?} has no port"))?;
    anyhow::ensure!(port.parse::<u16>().is_ok(), "{peer:?} has no port");
    Ok(vec![
        format!("--name={name}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--advertise-client-urls={base}:2379"),
        format!("--initial-cluster={initial_cluster}"),
        "--initial-cluster-state=new".into(),
    ])
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut command = std::process::Command::new("etcd");
    command.args(etcd_arguments(&args.name, &args.initial_cluster)?).args(&args.etcd_args);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let error = command.exec();
        Err(error).context("starting etcd (is it on PATH?)")
    }
    #[cfg(not(unix))]
    {
        let status = command.status().context("starting etcd (is it on PATH?)")?;
        std::process::exit(status.code().unwrap_or(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_advertises_what_the_initial_cluster_lists_for_it() {
        let cluster = "t-etcd-0=https://127.96.0.20:2380,t-etcd-1=https://127.96.0.21:2380";
        let args = etcd_arguments("t-etcd-1", cluster).unwrap();
        assert!(args.contains(&"--initial-advertise-peer-urls=https://127.96.0.21:2380".to_string()), "{args:?}");
        assert!(args.contains(&"--advertise-client-urls=https://127.96.0.21:2379".to_string()), "{args:?}");
        assert!(etcd_arguments("t-etcd-2", cluster).is_err());
    }
}
