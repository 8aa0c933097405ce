//! One module per `nest` subcommand that runs a component.

pub mod apiserver;
pub mod cluster;
pub mod clusterctl;
pub mod controller_manager;
pub mod crds;
pub mod debug;
pub mod etcd_member;
pub mod manager;
pub mod node;
pub mod proxy;
pub mod render;
pub mod scheduler;
pub mod syncer;
pub mod up;

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
