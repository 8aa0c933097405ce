//! `nest bench api`, run as a user runs it (with a small load): per-verb latency lines and a memory line per backend.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_api_prints_per_verb_latency_and_memory() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nest"));
    command.args(["bench", "api", "--objects", "120", "--reads", "60", "--rate", "400", "--settle", "100ms"]);
    if cfg!(feature = "etcd")
        && let Ok(url) = std::env::var("NEST_TEST_ETCD")
    {
        command.args(["--etcd", &url]);
    }
    let output = command.output().expect("run nest");
    assert!(output.status.success(), "nest bench api failed: {}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let backends: &[&str] = if cfg!(feature = "etcd") { &["embedded", "etcd"] } else { &["embedded"] };
    for backend in backends {
        let verbs: Vec<&str> =
            lines.iter().filter(|l| l["backend"] == *backend).filter_map(|l| l["verb"].as_str()).collect();
        // Beside the API server on etcd, etcd itself (through its own client) under the same load.
        let expected: &[&str] = if *backend == "etcd" {
            &["create", "get", "update", "list_120", "etcd_put", "etcd_get"]
        } else {
            &["create", "get", "update", "list_120"]
        };
        assert_eq!(verbs, expected, "{backend}");
        for line in lines.iter().filter(|l| l["backend"] == *backend && l["verb"].is_string()) {
            assert!(line["p99_ms"].as_f64().unwrap() > 0.0 && line["requests"].as_u64().unwrap() > 0, "{line}");
        }
        let memory = lines.iter().find(|l| l["backend"] == *backend && l["rss_idle_mib"].is_number()).expect("memory");
        assert!(memory["rss_after_load_mib"].as_f64().unwrap() > 0.0, "{memory}");
    }
}

/// `--rbac`: the same load as the admin and as a user whose rights come from a RoleBinding, whose every request RBAC
/// evaluates (and lets through: a refusal would fail the run).
#[test]
fn bench_api_rbac_compares_the_admin_with_an_rbac_user() {
    let output = Command::new(env!("CARGO_BIN_EXE_nest"))
        .args(["bench", "api", "--rbac", "--objects", "60", "--reads", "30", "--rate", "400", "--settle", "100ms"])
        .output()
        .expect("run nest");
    assert!(output.status.success(), "nest bench api --rbac failed: {}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<Value> =
        String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for backend in ["embedded", "embedded+rbac-user"] {
        let verbs: Vec<&str> =
            lines.iter().filter(|l| l["backend"] == backend).filter_map(|l| l["verb"].as_str()).collect();
        assert_eq!(verbs, ["create", "get", "update", "list_60"], "{backend}");
    }
}
