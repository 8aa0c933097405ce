//! A container's writable layer, as containerd's overlayfs snapshotter makes one: the image's layers, unpacked once
//! for the pod's user range ([`crate::images::Store::rootfs`]), are the read-only lower directory of an overlayfs
//! whose upper and work directories are the container's own (`<data>/pods/<uid>/layers/<container>/{upper,work}`),
//! mounted at the bundle's `rootfs` as the container's root.
//!
//! - **Users.** The node mounts the overlay in its own mount namespace, as the host's root, before the OCI runtime
//!   starts the container; the runtime binds it into the container's user namespace like any root. The upper
//!   directory belongs to the container's root (host user `base`), as the unpacked image's files belong to the
//!   range's users, so root in the container writes where the image lets root write, and a file copied up keeps its
//!   owner.
//! - **Lifetime.** Each run of a container starts from a fresh layer ([`WritableLayer::mount_fresh`]), as the
//!   kubelet makes a new container (and containerd a new snapshot) for every restart; the layer is unmounted and
//!   deleted when the run ends ([`WritableLayer::remove`]), and whatever a crashed node left mounted beneath its
//!   bundles is unmounted when it starts again ([`unmount_beneath`]).
//! - **Read-only roots.** `readOnlyRootFilesystem: true` still gets the overlay (the runtime makes its mount points
//!   in it), mounted read-only by the runtime (`root.readonly`).
//! - **Size.** What the upper directory holds counts against the container's `ephemeral-storage` limit
//!   ([`super::storage`]), as the kubelet counts a container's writable layer.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The directory of container `container`'s writable layer in the pod's directory `pod_dir`.
pub fn dir(pod_dir: &Path, container: &str) -> PathBuf {
    pod_dir.join("layers").join(container)
}

/// One container's writable layer over its image.
#[derive(Clone, Debug)]
pub struct WritableLayer {
    /// The image's unpacked layers: the overlay's lower directory.
    pub lower: PathBuf,
    /// [`dir`]: holds `upper` and `work`.
    pub dir: PathBuf,
    /// Where the overlay is mounted: the bundle's `rootfs`.
    pub merged: PathBuf,
    /// The container's root: host user and group `base`.
    pub base: u32,
}

impl WritableLayer {
    /// The directory the container's writes land in.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// The overlay's mount options. Paths holding a character the options would read as a separator (`,` `:`) or an
    /// escape (`\`) are refused rather than escaped: the node makes all three paths, from its data directory.
    pub fn options(&self) -> std::io::Result<String> {
        let mut paths = Vec::new();
        for path in [&self.lower, &self.upper(), &self.work()] {
            let text = path.to_str().filter(|t| !t.contains([',', ':', '\\', '\0']));
            let text = text.ok_or_else(|| {
                std::io::Error::other(format!("{} cannot be named in overlayfs' mount options", path.display()))
            })?;
            paths.push(text.to_string());
        }
        Ok(format!("lowerdir={},upperdir={},workdir={}", paths[0], paths[1], paths[2]))
    }

    /// Mounts a fresh layer at `merged`: whatever an earlier run wrote is unmounted and deleted first. The upper
    /// directory holds the container's root directory (owned by its root) and the mount point of the node's init.
    pub fn mount_fresh(&self, init_dir: &Path) -> std::io::Result<()> {
        self.remove();
        let options = self.options()?;
        std::fs::create_dir_all(&self.dir)?;
        for (dir, owner, mode) in [(self.upper(), self.base, 0o755), (self.work(), 0, 0o700)] {
            std::fs::create_dir(&dir)?;
            std::os::unix::fs::lchown(&dir, Some(owner), Some(owner))?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?;
        }
        let init = self.upper().join(init_dir);
        std::fs::create_dir_all(&init)?;
        std::os::unix::fs::lchown(&init, Some(self.base), Some(self.base))?;
        std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))?;
        match std::fs::create_dir(&self.merged) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        mount_overlay(&self.merged, &options)
    }

    /// Unmounts the layer and deletes what the container wrote.
    pub fn remove(&self) {
        unmount(&self.merged);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn c_path(path: &Path) -> std::io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)
}

/// `mount -t overlay overlay -o <options>,… <at>`: never with devices or set-user-ID programs.
fn mount_overlay(at: &Path, options: &str) -> std::io::Result<()> {
    let target = c_path(at)?;
    let data = std::ffi::CString::new(options).map_err(std::io::Error::other)?;
    let flags = libc::MS_NODEV | libc::MS_NOSUID;
    // SAFETY: mount(2) reads the NUL-terminated strings given, which live until it returns.
    let mounted =
        unsafe { libc::mount(c"overlay".as_ptr(), target.as_ptr(), c"overlay".as_ptr(), flags, data.as_ptr().cast()) };
    if mounted != 0 {
        let error = std::io::Error::last_os_error();
        return Err(std::io::Error::new(error.kind(), format!("mounting the container's writable layer: {error}")));
    }
    Ok(())
}

/// Unmounts whatever is mounted at `at` (lazily: a process still inside lets go later), every mount stacked there.
fn unmount(at: &Path) {
    let Ok(target) = c_path(at) else { return };
    // SAFETY: umount2(2) reads the NUL-terminated path, which lives until it returns. Stops at the first failure
    // (EINVAL: nothing more is mounted there).
    while unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } == 0 {}
}

/// Unmounts every mount at or beneath `dir` (deepest first), as `/proc/self/mountinfo` lists them: the writable
/// layers a node that stopped without cleaning up left in its bundles.
pub fn unmount_beneath(dir: &Path) {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    let mut points = mount_points_beneath(&table, dir);
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for point in points {
        unmount(&point);
    }
}

/// The mount points of `table` (the format of `/proc/self/mountinfo`) at or beneath `dir`.
fn mount_points_beneath(table: &str, dir: &Path) -> Vec<PathBuf> {
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_octal)
        .map(PathBuf::from)
        .filter(|point| point.starts_with(dir))
        .collect()
}

/// A mountinfo field with its `\NNN` octal escapes (space, tab, newline, backslash) undone.
fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'\\'
            && let Some(value) = bytes
                .get(at + 1..at + 4)
                .and_then(|digits| std::str::from_utf8(digits).ok())
                .and_then(|digits| u8::from_str_radix(digits, 8).ok())
        {
            out.push(value);
            at += 4;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(lower: &str) -> WritableLayer {
        WritableLayer {
            lower: lower.into(),
            dir: "/data/pods/u/layers/web".into(),
            merged: "/run/nest/sandboxes/t/u/web/rootfs".into(),
            base: 1 << 20,
        }
    }

    #[test]
    fn the_overlay_has_the_image_below_and_the_containers_own_directories_above() {
        let options = layer("/data/images/rootfs/abc-1048576").options().unwrap();
        assert_eq!(
            options,
            "lowerdir=/data/images/rootfs/abc-1048576,upperdir=/data/pods/u/layers/web/upper,\
             workdir=/data/pods/u/layers/web/work"
        );
        assert_eq!(dir(Path::new("/data/pods/u"), "web"), Path::new("/data/pods/u/layers/web"));
        for bad in ["/data/a,upperdir=/etc", "/data/a:b", "/data/a\\b"] {
            assert!(layer(bad).options().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn leftover_mounts_beneath_the_bundles_are_found_with_their_escapes_undone() {
        let table = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 0:50 / /run/nest/sandboxes/t/u/web/rootfs rw,nodev shared:2 - overlay overlay rw,lowerdir=/x
91 22 0:51 / /run/nest/sandboxes/t/u/my\\040web/rootfs rw - overlay overlay rw
92 22 0:52 / /run/nest/sandboxes/other rw - tmpfs tmpfs rw
";
        let found = mount_points_beneath(table, Path::new("/run/nest/sandboxes/t"));
        assert_eq!(
            found,
            [
                PathBuf::from("/run/nest/sandboxes/t/u/web/rootfs"),
                PathBuf::from("/run/nest/sandboxes/t/u/my web/rootfs")
            ]
        );
    }

    /// As the host's root (the node always is): a layer mounted over a lower directory takes writes without changing
    /// the lower one, starts empty again on the next mount, and leaves nothing when removed.
    #[test]
    fn a_fresh_layer_takes_writes_above_the_image_and_goes_with_the_container() {
        // SAFETY: geteuid(2) cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: mounting needs root");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let lower = work.path().join("image");
        std::fs::create_dir_all(lower.join("etc")).unwrap();
        std::fs::write(lower.join("etc/config"), "image").unwrap();
        let layer = WritableLayer {
            lower: lower.clone(),
            dir: work.path().join("layers/web"),
            merged: work.path().join("rootfs"),
            base: 4242,
        };
        layer.mount_fresh(Path::new(".nest")).unwrap();
        let merged = &layer.merged;
        std::fs::write(merged.join("etc/config"), "changed").unwrap();
        std::fs::write(merged.join("new"), "x").unwrap();
        assert_eq!(std::fs::read_to_string(lower.join("etc/config")).unwrap(), "image");
        assert_eq!(std::fs::read_to_string(layer.upper().join("etc/config")).unwrap(), "changed");
        use std::os::unix::fs::MetadataExt as _;
        let root = std::fs::metadata(merged).unwrap();
        assert_eq!((root.uid(), root.gid(), root.mode() & 0o777), (4242, 4242, 0o755), "the container's root owns /");
        assert_eq!(std::fs::metadata(merged.join(".nest")).unwrap().uid(), 4242);

        layer.mount_fresh(Path::new(".nest")).unwrap();
        assert_eq!(std::fs::read_to_string(merged.join("etc/config")).unwrap(), "image", "a new run starts fresh");
        assert!(!merged.join("new").exists());

        std::fs::write(merged.join("again"), "x").unwrap();
        unmount_beneath(work.path());
        assert!(!merged.join("again").exists(), "unmounted");
        layer.remove();
        assert!(!layer.dir.exists());
    }
}
