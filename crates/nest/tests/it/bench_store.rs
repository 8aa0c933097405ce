//! `nest bench store`, run as a user runs it: one JSON line per measured configuration, then the ratio line.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_store_prints_a_line_per_configuration_then_the_ratio() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nest"));
    command.args(["bench", "store", "--duration", "300ms"]);
    if cfg!(feature = "etcd")
        && let Ok(url) = std::env::var("NEST_TEST_ETCD")
    {
        command.args(["--etcd", &url]);
    }
    let output = command.output().expect("run nest");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "nest bench store failed: {stderr}");
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line: {line:?}: {e}")))
        .collect();

    let backends: &[&str] = if cfg!(feature = "etcd") { &["embedded", "etcd"] } else { &["embedded"] };
    for backend in backends {
        let writers: Vec<u64> = of(&lines, backend, "write").map(|l| l["writers"].as_u64().unwrap()).collect();
        assert_eq!(writers, [1, 16, 64], "{backend}: write lines");
        assert!(
            of(&lines, backend, "write")
                .all(|l| l["ops_per_sec"].as_f64().unwrap() > 0.0 && l["p99_ms"].as_f64().unwrap() > 0.0)
        );
        assert_eq!(of(&lines, backend, "list").next().expect("a list line")["keys"], 10_000, "{backend}");
        assert_eq!(
            of(&lines, backend, "watch_fan_out").next().expect("a fan-out line")["watchers"],
            1_000,
            "{backend}"
        );
    }

    let last = lines.last().expect("output");
    assert_eq!(last["writers"], 64);
    let embedded = last["embedded_ops_per_sec"].as_f64().unwrap();
    if cfg!(feature = "etcd") {
        let etcd = last["etcd_ops_per_sec"].as_f64().expect("etcd throughput");
        let ratio = last["ratio"].as_f64().expect("a numeric ratio");
        assert!((ratio - embedded / etcd).abs() < 0.01 * ratio.max(1.0), "{last}");
    } else {
        assert!(last["ratio"].is_null(), "{last}");
        assert!(lines.iter().any(|l| l["backend"] == "etcd" && l["skipped"].is_string()));
    }
}

fn of<'a>(lines: &'a [Value], backend: &'a str, op: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    lines.iter().filter(move |l| l["backend"] == backend && l["op"] == op)
}
