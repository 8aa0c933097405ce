//! The official Python client (`kubernetes` from PyPI, pinned in scripts/check) against a real `nest apiserver`,
//! on every storage backend. The checks themselves are in `tests/python/client_semantics.py`.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use crate::common::{Server, backends};

/// The interpreter with the pinned client: `NEST_TEST_PYTHON` (set by scripts/check), else `python3`.
fn python() -> String {
    let python = std::env::var("NEST_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python).args(["-c", "import kubernetes"]).output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "{python} cannot import the kubernetes client; run scripts/check, or pip install kubernetes==33.1.0"
    );
    python
}

#[test]
fn python_client_crud_pagination_conflicts_and_watch() {
    let python = python();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/client_semantics.py");
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let out = Command::new(&python).arg(&script).arg(&server.kubeconfig).output().unwrap();
        assert!(
            out.status.success(),
            "{backend}: the Python client's checks failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn hostile_requests_get_4xx_statuses_never_5xx() {
    let python = python();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/robustness.py");
    let server = Server::start(&common::Storage::Embedded);
    let seed = fastrand::u32(..).to_string();
    let out = Command::new(&python).arg(&script).arg(&server.kubeconfig).arg(&seed).output().unwrap();
    assert!(
        out.status.success(),
        "seed {seed}: hostile requests got 5xx answers or broke connections:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Issue 18's named attacks (a JSON Patch copy bomb, 10,001 operations, a watch timeout past any clock): each gets
    // upstream's answer, and the server's memory stays within twice what it was.
    let rss = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap().to_string();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
    };
    let before = rss();
    let out = Command::new(&python).arg(&script).arg(&server.kubeconfig).arg("attacks").output().unwrap();
    assert!(
        out.status.success(),
        "the named attacks:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let after = rss();
    assert!(after <= 2 * before, "the server grew from {before} KiB to {after} KiB");
}
