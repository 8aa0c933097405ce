//! `subPath` mounts that no link can redirect: the path is opened one component at a time (`openat` with `O_PATH`
//! and `O_NOFOLLOW`, each descriptor checked to be a directory, making what is missing with `mkdirat`), so each step
//! is the directory it names and never a link; the last descriptor is then bind-mounted (through `/proc/self/fd/N`, which names exactly that
//! directory) onto a directory of the node's own in the pod's directory, and that is what the OCI runtime mounts into
//! the container. A link a container swaps in between the check and the runtime's mount is never followed. The bind
//! mounts go before the pod's directory does ([`release`]).

use std::ffi::CString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::path::{Component, Path};

/// Why a subPath was not opened.
#[derive(Debug)]
pub enum Refused {
    Link,
    NotDirectory,
    Io(std::io::Error),
}

/// Opens the one component `name` of `dir`, a link as the link itself (`O_PATH` with `O_NOFOLLOW`), which
/// [`kind`] then tells apart.
fn open_at(dir: libc::c_int, name: &CString) -> std::io::Result<OwnedFd> {
    let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `name` is a NUL-terminated string that outlives the call; the returned descriptor, when valid, is
    // owned by the OwnedFd made from it and by nothing else.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is open.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `sub` (plain components only) beneath the directory `base`, making missing directories, refusing links.
pub fn open_beneath(base: &Path, sub: &Path) -> Result<OwnedFd, Refused> {
    let text = |path: &std::ffi::OsStr| {
        CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path))
            .map_err(|_| Refused::Io(std::io::Error::other("a NUL in a path")))
    };
    // The volume's own directory is the node's, not the pod's: it may be reached through links of the node's.
    let base = std::fs::canonicalize(base).map_err(Refused::Io)?;
    let mut current = kind(open_at(libc::AT_FDCWD, &text(base.as_os_str())?).map_err(Refused::Io)?)?;
    for component in sub.components() {
        let Component::Normal(part) = component else {
            return Err(Refused::Io(std::io::Error::other("not a plain path")));
        };
        let name = text(part)?;
        let next = match open_at(current.as_raw_fd(), &name) {
            Ok(next) => kind(next)?,
            Err(error) if error.raw_os_error() == Some(libc::ENOENT) => {
                // SAFETY: a NUL-terminated name relative to an open directory descriptor.
                if unsafe { libc::mkdirat(current.as_raw_fd(), name.as_ptr(), 0o755) } != 0 {
                    let error = std::io::Error::last_os_error();
                    if error.raw_os_error() != Some(libc::EEXIST) {
                        return Err(Refused::Io(error));
                    }
                } else {
                    // The new directory is the volume's users', as its parent is (never following a link that may
                    // have replaced it meanwhile).
                    let (uid, gid) = owner(&current).map_err(Refused::Io)?;
                    // SAFETY: a NUL-terminated name relative to an open directory descriptor.
                    unsafe { libc::fchownat(current.as_raw_fd(), name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) };
                }
                kind(open_at(current.as_raw_fd(), &name).map_err(Refused::Io)?)?
            }
            Err(error) => return Err(Refused::Io(error)),
        };
        current = next;
    }
    Ok(current)
}

/// The owner of the open file `fd`.
fn owner(fd: &OwnedFd) -> std::io::Result<(libc::uid_t, libc::gid_t)> {
    // SAFETY: fstat fills the zeroed struct for an open descriptor.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((stat.st_uid, stat.st_gid))
}

/// `fd` if it is a directory; else why not.
fn kind(fd: OwnedFd) -> Result<OwnedFd, Refused> {
    // SAFETY: fstat fills the zeroed struct for an open descriptor.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return Err(Refused::Io(std::io::Error::last_os_error()));
    }
    match stat.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Ok(fd),
        libc::S_IFLNK => Err(Refused::Link),
        _ => Err(Refused::NotDirectory),
    }
}

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
        .map_err(|_| std::io::Error::other("a NUL in a path"))
}

/// Bind-mounts the directory `held` onto `target` (made if missing, unmounted first should an earlier run have left a
/// mount there).
pub fn bind(held: &OwnedFd, target: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(target)?;
    let target = c_path(target)?;
    // SAFETY: a NUL-terminated path; a failure (nothing mounted there) is fine.
    unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    let source = c_path(Path::new(&format!("/proc/self/fd/{}", held.as_raw_fd())))?;
    // SAFETY: NUL-terminated paths; no file system type or data for a bind mount.
    let done =
        unsafe { libc::mount(source.as_ptr(), target.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) };
    if done != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Unmounts every subPath bind mount of the pod whose directory is `pod_dir`, so that removing the directory never
/// reaches into a volume through one.
pub fn release(pod_dir: &Path) {
    let prefix = pod_dir.join("volume-subpaths");
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    let mut points: Vec<String> = table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| point.replace("\\040", " "))
        .filter(|point| Path::new(point).starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for point in points {
        if let Ok(point) = c_path(Path::new(&point)) {
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount2(point.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subpath_is_made_and_held_but_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let held = open_beneath(dir.path(), Path::new("a/b")).expect("made");
        assert!(dir.path().join("a/b").is_dir());
        let named = std::fs::read_link(format!("/proc/self/fd/{}", held.as_raw_fd())).unwrap();
        assert_eq!(named, dir.path().join("a/b").canonicalize().unwrap());
        std::os::unix::fs::symlink("/etc", dir.path().join("a/out")).unwrap();
        assert!(matches!(open_beneath(dir.path(), Path::new("a/out")), Err(Refused::Link)));
        assert!(matches!(open_beneath(dir.path(), Path::new("a/out/x")), Err(Refused::Link)));
        std::fs::write(dir.path().join("a/file"), "x").unwrap();
        assert!(matches!(open_beneath(dir.path(), Path::new("a/file")), Err(Refused::NotDirectory)));
    }
}
