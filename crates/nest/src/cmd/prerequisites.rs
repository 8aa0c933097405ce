//! What `nest up` needs from the machine before it starts anything, and installing it: the README's quick start is
//! two commands on a machine with only the Rust toolchain, so `nest up`, run as root where `apt-get` works (Debian,
//! Ubuntu), installs the packages of whatever is missing — as `scripts/check` does for the tests — and says so.
//! Elsewhere, or with `--no-install`, it stops with one line naming the packages. What is missing is decided by
//! trying it ([`nest_node::prerequisites::missing`]), not by looking for a command.

use std::path::Path;
use std::process::Command;

use anyhow::bail;
use nest_node::prerequisites::{self, Missing};

/// What to do about what is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing is missing.
    Nothing,
    /// Install the packages with `apt-get`.
    Install,
    /// Stop, naming the packages.
    Refuse,
}

/// The plan, from what is missing, whether installing is allowed, whether this is root and whether `apt-get` works.
pub fn plan(missing: &[Missing], install: bool, root: bool, apt: bool) -> Plan {
    match () {
        () if missing.is_empty() => Plan::Nothing,
        () if install && root && apt => Plan::Install,
        () => Plan::Refuse,
    }
}

/// One line saying what is missing and which packages provide it.
fn describe(missing: &[Missing]) -> String {
    let what: Vec<&str> = missing.iter().map(|m| m.what.as_str()).collect();
    format!("{} (Debian and Ubuntu: apt-get install {})", what.join(", "), prerequisites::packages(missing).join(" "))
}

/// Makes sure the node of `nest up` (OCI runtime `runc`, bridged pods) can run here, installing what is missing when
/// `install` allows it and this machine can.
pub fn ensure(install: bool) -> anyhow::Result<()> {
    let runtime = Path::new("runc");
    let missing = prerequisites::missing(runtime, true);
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    let apt = prerequisites::answers(Path::new("apt-get"), &["--version"]);
    match plan(&missing, install, root, apt) {
        Plan::Nothing => Ok(()),
        Plan::Refuse if !install => bail!("nest up needs {} and --no-install was given", describe(&missing)),
        Plan::Refuse => {
            bail!("nest up needs {}; run as root where apt-get works to have them installed", describe(&missing))
        }
        Plan::Install => {
            let packages = prerequisites::packages(&missing);
            eprintln!("nest up: installing {} (missing: {})", packages.join(" "), describe(&missing));
            let update = Command::new("apt-get").args(["update", "-qq"]).status()?;
            if !update.success() {
                bail!("nest up: apt-get update failed ({update}); install {} by hand", packages.join(" "));
            }
            let installed = Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(&packages)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()?;
            if !installed.success() {
                bail!("nest up: apt-get install {} failed ({installed})", packages.join(" "));
            }
            let still = prerequisites::missing(runtime, true);
            if !still.is_empty() {
                bail!("nest up: installed {}, yet still missing {}", packages.join(" "), describe(&still));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runc() -> Vec<Missing> {
        vec![Missing { what: "the OCI runtime \"runc\"".into(), packages: &["runc"] }]
    }

    #[test]
    fn what_is_missing_is_installed_only_by_root_with_apt_unless_told_not_to() {
        assert_eq!(plan(&[], true, true, true), Plan::Nothing);
        assert_eq!(plan(&[], false, false, false), Plan::Nothing);
        assert_eq!(plan(&runc(), true, true, true), Plan::Install);
        assert_eq!(plan(&runc(), false, true, true), Plan::Refuse, "--no-install");
        assert_eq!(plan(&runc(), true, false, true), Plan::Refuse, "not root");
        assert_eq!(plan(&runc(), true, true, false), Plan::Refuse, "no apt-get");
    }

    #[test]
    fn the_refusal_is_one_line_naming_the_packages() {
        let line = describe(&runc());
        assert!(line.contains("apt-get install runc") && !line.contains('\n'), "{line}");
    }
}
