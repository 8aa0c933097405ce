//! `nest bench sync`, run as a user runs it (with small numbers): a line for the load, a line for the resync.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_sync_prints_the_load_and_the_resync() {
    let output = Command::new(env!("CARGO_BIN_EXE_nest"))
        .args(["bench", "sync", "--tenants", "2", "--pods-per-tenant", "5", "--timeout", "120s"])
        .output()
        .expect("run nest");
    assert!(output.status.success(), "nest bench sync failed: {}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let load = &lines[0];
    assert_eq!((load["bench"].as_str(), load["pods"].as_u64()), (Some("sync"), Some(10)), "{load}");
    let ms = |key: &str| load[key].as_f64().unwrap();
    assert!(ms("to_super_pod_p50_ms") > 0.0 && ms("to_super_pod_p99_ms") >= ms("to_super_pod_p50_ms"), "{load}");
    assert!(ms("to_running_p99_ms") >= ms("to_super_pod_p50_ms"), "Running comes after the super pod: {load}");
    assert!(ms("syncer_rss_loaded_mib") > 1.0, "{load}");
    let resync = &lines[1];
    assert_eq!(resync["bench"], "sync-resync");
    // Ten pods, and each tenant's four namespaces, compared again; nothing needed changing.
    assert!(resync["objects_compared"].as_f64().unwrap() >= 18.0, "{resync}");
    assert_eq!(resync["changes_made"].as_f64(), Some(0.0), "{resync}");
}
