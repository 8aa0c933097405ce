//! Which images a node may run as processes, and with which executable: an ordered list of image patterns (`*`
//! matches any run of characters) each mapped to a local program.

use std::path::{Path, PathBuf};

/// One entry: image pattern → executable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub pattern: String,
    pub executable: PathBuf,
}

/// The allowlist; the first matching entry wins.
#[derive(Clone, Debug, Default)]
pub struct Allowlist {
    pub entries: Vec<Entry>,
}

/// The image names under which nest itself is published (with any registry and tag); they run the `nest` binary.
pub const NEST_IMAGES: &[&str] = &["nest", "nest:*", "*/nest", "*/nest:*", "*/nest@*"];
/// The usual etcd image names (registry.k8s.io/etcd, quay.io/coreos/etcd, gcr.io/etcd-development/etcd, …).
pub const ETCD_IMAGES: &[&str] = &["etcd", "etcd:*", "*/etcd", "*/etcd:*", "*/etcd@*"];

impl Allowlist {
    /// nest's own images mapped to `nest` (the running binary), and etcd's to `etcd` when it is on `PATH`.
    pub fn defaults(nest: &Path) -> Allowlist {
        let mut entries: Vec<Entry> =
            NEST_IMAGES.iter().map(|p| Entry { pattern: (*p).to_string(), executable: nest.to_path_buf() }).collect();
        if let Some(etcd) = find_on_path("etcd") {
            entries.extend(ETCD_IMAGES.iter().map(|p| Entry { pattern: (*p).to_string(), executable: etcd.clone() }));
        }
        Allowlist { entries }
    }

    /// Parses `PATTERN=EXECUTABLE`, as `--allow-image` takes it.
    pub fn parse_entry(text: &str) -> Result<Entry, String> {
        let (pattern, executable) =
            text.split_once('=').ok_or_else(|| format!("{text:?}: expected IMAGE-PATTERN=EXECUTABLE"))?;
        if pattern.is_empty() || executable.is_empty() {
            return Err(format!("{text:?}: expected IMAGE-PATTERN=EXECUTABLE"));
        }
        Ok(Entry { pattern: pattern.to_string(), executable: PathBuf::from(executable) })
    }

    /// The executable for `image`, if the image is allowed.
    pub fn executable(&self, image: &str) -> Option<&Path> {
        self.entries.iter().find(|e| wildcard(&e.pattern, image)).map(|e| e.executable.as_path())
    }
}

/// `program` found in a directory of `PATH`.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters (`/` included).
fn wildcard(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_match_their_patterns() {
        let list = Allowlist::defaults(Path::new("/bin/nest"));
        for image in ["nest", "nest:0.1", "ghcr.io/nest-dev/nest:latest", "localhost:5000/nest", "x/nest@sha256:ab"] {
            assert_eq!(list.executable(image), Some(Path::new("/bin/nest")), "{image}");
        }
        for image in ["nginx", "nestor", "ghcr.io/nest-dev/nestor:1", "nest-other:1"] {
            assert_eq!(list.executable(image), None, "{image}");
        }
        assert!(wildcard("a*b*c", "a-b-c") && wildcard("a*b*c", "abc") && !wildcard("a*b*c", "acb"));
        assert_eq!(Allowlist::parse_entry("busybox:*=/bin/busybox").unwrap().pattern, "busybox:*");
        assert!(Allowlist::parse_entry("busybox").is_err());
    }
}
