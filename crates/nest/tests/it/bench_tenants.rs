//! `nest bench tenants`, run as a user runs it (with small counts): one JSON line per step, with readiness times and
//! the memory of the tenants' processes.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_tenants_prints_a_line_per_step() {
    let output = Command::new(env!("CARGO_BIN_EXE_nest"))
        .args(["bench", "tenants", "--count", "1,2", "--timeout", "120s"])
        .output()
        .expect("run nest");
    assert!(output.status.success(), "nest bench tenants failed: {}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let totals: Vec<u64> = lines.iter().filter_map(|l| l["tenants"].as_u64()).collect();
    assert_eq!(totals, [1, 3], "{lines:?}");
    for line in &lines {
        assert!(line["ready_ms"]["p50"].as_f64().unwrap() > 0.0, "{line}");
        assert!(
            line["all_ready_seconds"].as_f64().unwrap() >= line["ready_ms"]["max"].as_f64().unwrap() / 1000.0 - 0.1
        );
        // Each tenant is an API server and a controller-manager process.
        let memory = |kind: &str| line["idle_mib_per_tenant"][kind].as_f64().unwrap();
        assert!(memory("rss") >= memory("pss") && memory("pss") >= memory("anon") && memory("anon") > 1.0, "{line}");
    }
}
