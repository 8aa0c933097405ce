//! A flood of ConfigMaps into one tenant (issue 33, item 3), by demo's admin with kubectl: `nest up` (the management
//! API server, the syncer, the node) holds no more memory once the ConfigMaps are gone than before they came. The
//! syncer copies down what demo's cap allows (64 MiB of ConfigMaps) and tells demo why not the rest; its caches hold
//! a digest of each ConfigMap's data, never the data. acme is served throughout.
//!
//! The flood is `NEST_FLOOD_MIB` MiB (256 unless set) of 1 MiB ConfigMaps. demo's own control plane bears it: its API
//! server holds them in memory, and is OOM-killed at its limit (1 GiB unless its control plane says otherwise), so for
//! a flood of more than 512 MiB the platform admin first gives it four times the flood; and on disk, in its 1 GiB
//! claim, which the node holds it to (a flood that fills it gets demo's API server evicted, and only demo's).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::eventually;
use crate::platform::{Platform, Who};

/// How much `nest up`'s memory may grow, flood and deletion after, over where it began (issue 33).
const RETURNED_WITHIN_MIB: f64 = 100.0;
/// ConfigMaps per kubectl call.
const BATCH: usize = 16;

/// How many ConfigMaps labelled `flood` the management cluster holds (in demo's super namespaces).
fn flooded_copies(platform: &Platform) -> usize {
    platform.ok(Who::Admin, &["get", "configmaps", "-A", "-l", "flood", "-o", "name"]).lines().count()
}

/// `nest up`'s resident memory once it has settled: the least of a few samples a second apart.
fn settled_rss(platform: &Platform) -> f64 {
    (0..5)
        .map(|_| {
            std::thread::sleep(Duration::from_secs(1));
            platform.up_rss_mib()
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn a_flood_of_configmaps_into_one_tenant_leaves_nest_up_as_it_found_it() {
    let mib: usize = std::env::var("NEST_FLOOD_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let platform = Platform::start(&[]);
    if mib > 512 {
        let limit = format!("{}Mi", mib * 4);
        let patch = json!({"spec": {"components": {"apiServer": {"resources": {
            "requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": limit}}}}}});
        platform.ok(Who::Admin, &["patch", "nestedcontrolplane", "demo", "--type=merge", "-p", &patch.to_string()]);
        eventually(300, "demo's API server restarted with the larger limit", || {
            std::thread::sleep(Duration::from_secs(2));
            let pod = platform.json(Who::Admin, &["get", "pod", "demo-apiserver-0", "-n", "default"]);
            let ready = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            pod["spec"]["containers"][0]["resources"]["limits"]["memory"] == limit.as_str()
                && ready
                && platform.kubectl(Who::Demo, &["get", "--raw", "/readyz"]).status.success()
        });
    }
    std::thread::sleep(Duration::from_secs(10));
    let before = settled_rss(&platform);

    // Each ConfigMap holds just under 1 MiB of data, different in each (no two share a digest).
    let began = Instant::now();
    let mut peak = before;
    for batch in 0..mib.div_ceil(BATCH) {
        let items: Vec<Value> = (batch * BATCH..((batch + 1) * BATCH).min(mib))
            .map(|i| {
                let data = format!("{i:08}{}", "x".repeat(1_000_000));
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("flood-{i}"), "labels": {"flood": "yes"}}, "data": {"d": data}})
            })
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        let out = platform.with_input(Who::Demo, &["create", "-f", "-", "-o", "name"], &list.to_string());
        assert!(out.status.success(), "flooding: {}", String::from_utf8_lossy(&out.stderr));
        peak = peak.max(platform.up_rss_mib());
    }
    let flooded = began.elapsed();
    // The syncer has copied what the cap allows, and told demo of the rest.
    eventually(300, "the syncer done with the flood", || {
        std::thread::sleep(Duration::from_secs(2));
        peak = peak.max(platform.up_rss_mib());
        let events = platform.json(Who::Demo, &["get", "events", "--field-selector", "reason=SyncFailed"]);
        let refused = events["items"].as_array().into_iter().flatten().any(|e| {
            e["message"].as_str().is_some_and(|m| m.contains("configmaps"))
                && e["involvedObject"]["kind"] == "ConfigMap"
        });
        let copies = flooded_copies(&platform);
        copies > 0 && (refused || copies == mib)
    });
    let copies = flooded_copies(&platform);
    // Each holds a million bytes of data; demo's cap is 64 MiB of ConfigMaps.
    assert!(copies <= (64 << 20) / 1_000_000, "more than demo's cap of ConfigMaps in the management cluster: {copies}");

    // By name, a batch at a time: a list of the whole flood at once would be as large as the flood.
    for batch in 0..mib.div_ceil(BATCH) {
        let names: Vec<String> =
            (batch * BATCH..((batch + 1) * BATCH).min(mib)).map(|i| format!("flood-{i}")).collect();
        let args: Vec<&str> =
            ["delete", "configmap", "--wait=false"].into_iter().chain(names.iter().map(String::as_str)).collect();
        platform.ok(Who::Demo, &args);
    }
    eventually(300, "the management copies gone", || {
        std::thread::sleep(Duration::from_secs(2));
        flooded_copies(&platform) == 0
    });
    // What was freed is given back within a minute.
    let mut after = settled_rss(&platform);
    let deadline = Instant::now() + Duration::from_secs(60);
    while after - before > RETURNED_WITHIN_MIB && Instant::now() < deadline {
        after = settled_rss(&platform);
    }
    eprintln!(
        "{}",
        json!({"flood_mib": mib, "flooded_seconds": flooded.as_secs(), "copies": copies, "rss_mib": {
            "before": before.round(), "peak": peak.round(), "after": after.round()}})
    );
    assert!(
        after - before <= RETURNED_WITHIN_MIB,
        "nest up held {before:.0} MiB before a flood of {mib} MiB, {peak:.0} MiB at its peak and {after:.0} MiB after"
    );
    platform.assert_serving();
    platform.finish();
}
