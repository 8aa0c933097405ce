//! A real image registry for the tests that pull: Debian's `docker-registry` (which scripts/check installs) on a free
//! loopback port, and nest's own image built with `nest image build` and pushed to it with `nest image push`.
//!
//! A node pulls from a loopback registry only when the platform admin names it (`nest up --pull-from ADDRESS`), so a
//! test starts its registries before `nest up`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use super::eventually;

/// A registry server on a free loopback port; stopped when dropped.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub address: String,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A registry storing in `dir/storage`, open to anyone.
pub fn registry(dir: &Path) -> Registry {
    registry_of(dir, &dir.join("storage"), None)
}

/// A registry server storing in `storage` (which another may share), asking for `user:password` when given; its
/// configuration is kept in `dir`.
pub fn registry_of(dir: &Path, storage: &Path, login: Option<(&str, &str)>) -> Registry {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let config = dir.join(format!("config-{port}.yml"));
    let mut text = format!(
        "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {address}\n",
        storage.display()
    );
    if let Some((user, password)) = login {
        let htpasswd = dir.join(format!("htpasswd-{port}"));
        std::fs::write(&htpasswd, format!("{user}:{}\n", bcrypt::hash(password, 4).unwrap())).unwrap();
        text.push_str(&format!("auth:\n  htpasswd:\n    realm: nest-test\n    path: {}\n", htpasswd.display()));
    }
    std::fs::write(&config, text).unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("docker-registry (Debian's package docker-registry; scripts/check installs it)");
    let registry = Registry { child, address };
    eventually(30, "the registry serving", || std::net::TcpStream::connect(&registry.address).is_ok());
    registry
}

/// `nest ARGS`, which must succeed; its standard output.
pub fn nest(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nest")).args(args).output().unwrap();
    assert!(out.status.success(), "nest {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// nest's own image, built into `dir` as an OCI archive (`nest image build`); the archive's path.
pub fn nest_image(dir: &Path) -> PathBuf {
    let archive = dir.join("nest.tar");
    let built = nest(&["image", "build", "--output", archive.to_str().unwrap()]);
    assert!(built.contains("sha256:"), "{built}");
    archive
}

/// Pushes the OCI archive `archive` to `reference` (`nest image push`); the manifest's digest.
pub fn push(archive: &Path, reference: &str) -> String {
    let pushed = nest(&["image", "push", archive.to_str().unwrap(), reference]);
    pushed.trim().rsplit_once('@').map(|(_, digest)| digest.to_string()).unwrap_or_else(|| panic!("{pushed}"))
}

/// A registry in `dir` holding the tests' images ([`test_images`]), and the flags that make it `nest up`'s mirror for
/// `docker.io`: pods then name `busybox`, `nginx` or `python` as a user types them.
pub fn docker_io_mirror(dir: &Path) -> (Registry, [String; 2]) {
    let registry = registry(dir);
    test_images(&registry);
    let flags = ["--registry-mirror".to_string(), format!("docker.io=http://{}", registry.address)];
    (registry, flags)
}

/// Pushes the tests' images of real software to `registry`: `library/busybox`, `library/nginx` and `library/python`
/// (`:latest` and their Debian versions), built from this machine's Debian packages by `scripts/test-images`. The packages and the
/// built layout are kept in `target/test-images`, so only the first run of a machine downloads and builds (seconds);
/// each registry then gets a push.
pub fn test_images(registry: &Registry) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("scripts/test-images");
    let cache = root.join("target/test-images");
    let out = Command::new("bash").arg(&script).arg(&registry.address).arg(&cache).output().unwrap();
    assert!(
        out.status.success(),
        "scripts/test-images {}: {}{}",
        registry.address,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
