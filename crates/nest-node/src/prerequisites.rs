//! What a node that really runs pods needs from its machine, each tried by what the node does with it: the OCI
//! runtime answers, the CNI plugins a bridged node runs are there, `ip` (iproute2) and `nft` (nftables) answer. The node itself fails
//! with one of these lines when something is missing ([`process::sandbox::Sandboxes::new`],
//! [`network::Network::prepare`]); `nest up` asks first, so that it can install what is missing before it starts.
//!
//! [`process::sandbox::Sandboxes::new`]: crate::process::sandbox::Sandboxes::new
//! [`network::Network::prepare`]: crate::network::Network::prepare

use std::path::Path;
use std::process::{Command, Stdio};

use crate::network::{self, PLUGIN_DIRS};

/// Something the machine lacks, and the Debian packages that provide it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    /// What is missing, worded for whoever starts the node.
    pub what: String,
    /// The Debian (and Ubuntu) packages that provide it.
    pub packages: &'static [&'static str],
}

/// Whether `program` runs and succeeds with `args` (its output discarded).
pub fn answers(program: &Path, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What a node with the OCI runtime `oci_runtime` (looked up on `PATH` when it has no `/`) lacks here; with
/// `bridged`, also what gives each pod a network namespace on the node's bridge. Empty when nothing is missing.
pub fn missing(oci_runtime: &Path, bridged: bool) -> Vec<Missing> {
    let mut missing = Vec::new();
    if !answers(oci_runtime, &["--version"]) {
        missing.push(Missing {
            what: format!("the OCI runtime {:?}", oci_runtime.display().to_string()),
            packages: &["runc"],
        });
    }
    if bridged {
        if let Some(plugin) = network::missing_plugin() {
            missing.push(Missing {
                what: format!("the CNI plugin {plugin:?} (in {} or {})", PLUGIN_DIRS[0], PLUGIN_DIRS[1]),
                packages: &["containernetworking-plugins"],
            });
        }
        if !answers(Path::new("ip"), &["-V"]) {
            missing.push(Missing { what: "ip (iproute2)".into(), packages: &["iproute2"] });
        }
        // The wall between tenants is loaded with nft; `nft list tables` asks the kernel, so it also shows that
        // nftables works here.
        if !answers(Path::new("nft"), &["list", "tables"]) {
            missing
                .push(Missing { what: "nft (nftables), for the wall between tenants".into(), packages: &["nftables"] });
        }
    }
    missing
}

/// The packages that provide what is `missing`, each once, in order.
pub fn packages(missing: &[Missing]) -> Vec<&'static str> {
    let mut packages: Vec<&'static str> = Vec::new();
    for package in missing.iter().flat_map(|m| m.packages) {
        if !packages.contains(package) {
            packages.push(package);
        }
    }
    packages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_that_does_not_run_is_missing_with_its_package() {
        let missing = missing(Path::new("/nonexistent/runc"), false);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert_eq!(missing[0].packages, ["runc"]);
        assert!(missing[0].what.contains("/nonexistent/runc"), "{missing:?}");
    }

    #[test]
    fn a_runtime_that_answers_is_not_missing() {
        // `true --version` succeeds, as a runtime's does.
        assert_eq!(missing(Path::new("true"), false), Vec::new());
    }

    #[test]
    fn each_package_is_named_once() {
        let of = |packages| Missing { what: String::new(), packages };
        let named = packages(&[of(&["runc"]), of(&["containernetworking-plugins"]), of(&["runc", "iproute2"])]);
        assert_eq!(named, ["runc", "containernetworking-plugins", "iproute2"]);
    }
}
