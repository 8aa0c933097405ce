//! Which images a node runs as host executables rather than pulling them: nest's own image only (any registry, any
//! tag), as the `nest` binary the node itself runs. Every other image is pulled and run as a kubelet runs it.
//!
//! The programs nest's image needs beside the binary are mounted into its containers too: `etcd`, when the node has
//! it on `PATH`, which a tenant control plane's etcd members run (`nest etcd-member`, the `nest` flavor's
//! `etcd.yaml`). No image maps to etcd: `registry.k8s.io/etcd` and its like are images like any other.

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
    /// Host programs mounted into the allowlisted containers beside the entries' executables.
    pub companions: Vec<PathBuf>,
}

/// The image names under which nest itself is published (with any registry and tag); they run the `nest` binary.
pub const NEST_IMAGES: &[&str] = &["nest", "nest:*", "*/nest", "*/nest:*", "*/nest@*"];

impl Allowlist {
    /// nest's own images mapped to `nest` (the running binary), with `etcd` as a companion when it is on `PATH`.
    pub fn defaults(nest: &Path) -> Allowlist {
        let entries: Vec<Entry> =
            NEST_IMAGES.iter().map(|p| Entry { pattern: (*p).to_string(), executable: nest.to_path_buf() }).collect();
        Allowlist { entries, companions: find_on_path("etcd").into_iter().collect() }
    }

    /// The executable for `image`, if the image is allowed.
    pub fn executable(&self, image: &str) -> Option<&Path> {
        self.entries.iter().find(|e| wildcard(&e.pattern, image)).map(|e| e.executable.as_path())
    }

    /// Every host program mounted into the containers of allowlisted images: the entries' executables, then the
    /// companions.
    pub fn programs(&self) -> Vec<PathBuf> {
        let mut programs: Vec<PathBuf> = Vec::new();
        for program in self.entries.iter().map(|e| &e.executable).chain(&self.companions) {
            if !programs.contains(program) {
                programs.push(program.clone());
            }
        }
        programs
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
        // Only nest's own image: etcd's, a shell's and everything else are pulled as images.
        let list = Allowlist { companions: vec!["/usr/bin/etcd".into()], ..list };
        for image in
            ["nginx", "nestor", "ghcr.io/nest-dev/nestor:1", "nest-other:1", "etcd", "registry.k8s.io/etcd:3.5"]
        {
            assert_eq!(list.executable(image), None, "{image}");
        }
        assert_eq!(list.programs(), [PathBuf::from("/bin/nest"), PathBuf::from("/usr/bin/etcd")]);
        assert!(wildcard("a*b*c", "a-b-c") && wildcard("a*b*c", "abc") && !wildcard("a*b*c", "acb"));
    }
}
