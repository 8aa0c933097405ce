//! Where the names and paths a pod spec gives may lead on this machine: beneath the pod's own directories, and
//! nowhere else, whatever the API server let through.
//!
//! A pod's spec is written by its tenant. Its volume and claim names become directory names, and its ConfigMap and
//! Secret keys, `items[].path`, downward-API paths and `subPath`s become paths beneath them: an absolute path, a `..`
//! or a symbolic link left in a volume by the pod's own processes would otherwise let the node write, as itself,
//! anywhere on the host. Kubernetes' own rules are the model (`validateLocalDescendingPath` and the DNS-1123 names of
//! `pkg/apis/core/validation`, 1.33), so that nothing a real cluster accepts is refused here.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path};

use super::prepare::PrepareError;

/// `path` (a key, an `items[].path`, a `subPath`) if it stays beneath the directory it is joined to: relative, with
/// no `..` element and not empty. `field` names it in the refusal.
pub fn relative<'a>(path: &'a str, field: &str) -> Result<&'a Path, PrepareError> {
    let refuse = |why: &str| Err(PrepareError::Config(format!("{field} {path:?} {why}")));
    if path.is_empty() || path.contains('\0') {
        return refuse("is not a path");
    }
    let path_ref = Path::new(path);
    if path_ref.is_absolute() {
        return refuse("must be a relative path");
    }
    if path_ref.components().any(|c| c == Component::ParentDir) {
        return refuse("must not contain '..'");
    }
    Ok(path_ref)
}

/// `name` (a volume's, a claim's, a namespace's) if it can stand as one directory name: a DNS-1123 subdomain, as
/// Kubernetes requires of all three (lowercase letters, digits, `-` and `.`; no `/`, and so neither `.` nor `..`
/// alone, which are not subdomains either).
pub fn name<'a>(name: &'a str, field: &str) -> Result<&'a str, PrepareError> {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.len() <= 253 && name.split('.').all(label_ok) {
        Ok(name)
    } else {
        Err(PrepareError::Config(format!("{field} {name:?} is not a valid name (a DNS-1123 subdomain)")))
    }
}

/// Writes `contents` to `base/relative` (which [`relative`] accepted), creating the directories between, none of
/// which may be a symbolic link: a link a pod's process left there is refused, not followed. The file is created
/// 0600 (the pod's processes run as the node's user) beside its place and renamed over what stands there, so that a
/// volume refreshed while its pod runs (a Secret changed, a token renewed) is never seen half-written or missing,
/// and a link planted there is replaced, not written through.
pub fn write_beneath(base: &Path, relative: &Path, contents: &[u8]) -> std::io::Result<()> {
    write_beneath_as(base, relative, contents, None)
}

/// Who a file written into a running pod's volume belongs to, and its mode: what the pod's users must find at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

/// [`write_beneath`], the new file given to `owner` before it takes its place; a file already holding `contents`
/// is left as it is.
pub fn write_beneath_as(base: &Path, relative: &Path, contents: &[u8], owner: Option<Owner>) -> std::io::Result<()> {
    let mut at = base.to_path_buf();
    let parts: Vec<Component> = relative.components().filter(|c| *c != Component::CurDir).collect();
    let Some((last, dirs)) = parts.split_last() else {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "an empty path"));
    };
    for dir in dirs {
        at.push(dir);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_dir() => {}
            Ok(_) => return Err(not_a_directory(&at)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new().mode(0o700).create(&at)?;
            }
            Err(error) => return Err(error),
        }
    }
    let mut new = at.clone();
    new.push(format!(".{}.nest-new", last.as_os_str().to_string_lossy()));
    at.push(last);
    if std::fs::symlink_metadata(&at).is_ok_and(|meta| meta.file_type().is_dir()) {
        return Err(not_a_directory(&at));
    }
    if owner.is_some() && unchanged(&at, contents) {
        return Ok(());
    }
    // A file an interrupted write left (or anything planted in its place) goes; the new one never follows a link
    // (O_NOFOLLOW on top of O_EXCL).
    match std::fs::symlink_metadata(&new) {
        Ok(meta) if meta.file_type().is_dir() => return Err(not_a_directory(&new)),
        Ok(_) => std::fs::remove_file(&new)?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&new)?;
    file.write_all(contents)?;
    if let Some(Owner { uid, gid, mode }) = owner {
        std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    drop(file);
    std::fs::rename(&new, &at)
}

/// Whether the regular file at `path` (not a link) holds `contents`.
fn unchanged(path: &Path, contents: &[u8]) -> bool {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path);
    let Ok(file) = file else { return false };
    let mut held = Vec::with_capacity(contents.len());
    use std::io::Read as _;
    file.take(contents.len() as u64 + 1).read_to_end(&mut held).is_ok() && held == contents
}

fn not_a_directory(path: &Path) -> std::io::Error {
    std::io::Error::other(format!("{} is not a directory the node made", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_leave_their_directory_are_refused() {
        for good in ["key", "a/b/c", "./x", "..hidden", "a..b"] {
            assert!(relative(good, "items[0].path").is_ok(), "{good}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../b", "a/..", "x\0y"] {
            let error = relative(bad, "items[0].path").unwrap_err().to_string();
            assert!(error.starts_with("items[0].path "), "{error}");
        }
    }

    #[test]
    fn names_are_one_directory_each() {
        for good in ["data", "data-acme-apiserver-0", "kube-api-access.x1"] {
            assert!(name(good, "claimName").is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "../default/data-acme-apiserver-0", "a/b", "UPPER", "-a", "a_b"] {
            assert!(name(bad, "claimName").is_err(), "{bad}");
        }
    }

    #[test]
    fn files_are_written_beneath_and_links_are_not_followed() {
        let base = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        write_beneath(base.path(), Path::new("a/b/key"), b"one").unwrap();
        write_beneath(base.path(), Path::new("a/b/key"), b"two").unwrap();
        assert_eq!(std::fs::read(base.path().join("a/b/key")).unwrap(), b"two");
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(base.path().join("a/b/key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A link planted as a directory on the way is refused; one planted as the file is replaced, not followed.
        std::os::unix::fs::symlink(outside.path(), base.path().join("link")).unwrap();
        assert!(write_beneath(base.path(), Path::new("link/key"), b"x").is_err());
        let target = outside.path().join("target");
        std::fs::write(&target, b"kept").unwrap();
        std::os::unix::fs::symlink(&target, base.path().join("planted")).unwrap();
        write_beneath(base.path(), Path::new("planted"), b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"kept");
        assert_eq!(std::fs::read(base.path().join("planted")).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1, "nothing appeared outside");
    }
}
