//! One module per `nest` subcommand that runs a component.

pub mod apiserver;
pub mod cluster;
pub mod clusterctl;
pub mod controller_manager;
pub mod crds;
pub mod debug;
pub mod etcd_member;
pub mod image;
pub mod kubeconfig;
pub mod manager;
pub mod node;
pub mod prerequisites;
pub mod proxy;
pub mod render;
pub mod scheduler;
pub mod syncer;
pub mod up;

/// Parses a path argument into an absolute path, against the working directory of the command that was given it.
///
/// Every path a `nest` command takes goes through this, defaults included (clap parses them too): components hand
/// paths on to other processes, and a process the node starts runs in its pod's directory, so a path relative to
/// where `nest up` was started would point nowhere there. Symbolic links are left as they are and the path need not
/// exist yet.
pub fn absolute(text: &str) -> Result<std::path::PathBuf, String> {
    if text.is_empty() {
        return Err("an empty path".into());
    }
    std::path::absolute(text).map_err(|error| format!("{text}: {error}"))
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::absolute;

    #[test]
    fn path_arguments_are_made_absolute_against_the_working_directory() {
        let here = std::env::current_dir().unwrap();
        assert_eq!(absolute("nest-data").unwrap(), here.join("nest-data"));
        // `..` is kept, as it must be where `a` is a symbolic link.
        assert_eq!(absolute("a/../b").unwrap(), here.join("a/../b"));
        assert_eq!(absolute("/var/lib/nest").unwrap(), std::path::Path::new("/var/lib/nest"));
        assert!(absolute("").is_err());
    }
}
