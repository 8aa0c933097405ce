//! The statistics computed from cgroup files written to a temporary directory, as the kernel writes them.

use super::*;

/// A cgroup v2 directory `cgroup` beneath `root` holding `files`.
fn write(root: &Path, cgroup: &str, files: &[(&str, &str)]) {
    let dir = root.join(cgroup);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

const V2_MEMORY_STAT: &str = "anon 4194304\nfile 8388608\nkernel 0\nactive_file 2097152\ninactive_file 6291456\n\
                              pgfault 1234\npgmajfault 5\n";

#[test]
fn cgroup_v2_working_set_is_usage_less_inactive_file_and_cpu_is_in_nanoseconds() {
    let root = tempfile::tempdir().unwrap();
    write(
        root.path(),
        "nest/pod/c",
        &[
            ("cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"),
            ("memory.current", "16777216\n"),
            ("memory.stat", V2_MEMORY_STAT),
            ("memory.max", "33554432\n"),
        ],
    );
    let layout = Layout::V2(root.path().to_path_buf());
    let usage = layout.read(Path::new("nest/pod/c")).unwrap();
    assert_eq!(usage.cpu_nanoseconds, 2_500_000_000);
    let memory = usage.memory;
    assert_eq!((memory.usage, memory.working_set, memory.rss), (16_777_216, 16_777_216 - 6_291_456, 4_194_304));
    assert_eq!((memory.page_faults, memory.major_page_faults, memory.limit), (1234, 5, Some(33_554_432)));
    let json = memory.to_json("2026-12-07T00:00:00Z");
    assert_eq!(json["workingSetBytes"], 10_485_760);
    assert_eq!(json["availableBytes"], 33_554_432 - 10_485_760);
}

#[test]
fn without_a_limit_nothing_is_available_to_say_and_the_working_set_never_goes_below_zero() {
    let root = tempfile::tempdir().unwrap();
    // Inactive file pages counted after the usage was read: more than it.
    write(
        root.path(),
        "c",
        &[
            ("cpu.stat", "usage_usec 0\n"),
            ("memory.current", "4096\n"),
            ("memory.stat", "inactive_file 8192\n"),
            ("memory.max", "max\n"),
        ],
    );
    let usage = Layout::V2(root.path().to_path_buf()).read(Path::new("c")).unwrap();
    assert_eq!((usage.memory.working_set, usage.memory.limit), (0, None));
    assert!(usage.memory.to_json("t").get("availableBytes").is_none());
}

#[test]
fn cgroup_v1_reads_the_memory_and_cpuacct_hierarchies_totals() {
    let root = tempfile::tempdir().unwrap();
    write(
        root.path(),
        "memory/nest/pod/c",
        &[
            ("memory.usage_in_bytes", "10000000\n"),
            ("memory.limit_in_bytes", "9223372036854771712\n"),
            (
                "memory.stat",
                "cache 100\nrss 1\ninactive_file 1\ntotal_rss 3000000\ntotal_inactive_file 2000000\n\
                         total_pgfault 7\ntotal_pgmajfault 1\n",
            ),
        ],
    );
    write(root.path(), "cpuacct/nest/pod/c", &[("cpuacct.usage", "123456789\n")]);
    let hierarchies = ["cpu", "cpuacct", "memory", "unified"].map(|name| Hierarchy {
        root: root.path().join(name),
        version: if name == "unified" { Version::V2 } else { Version::V1 },
    });
    let layout = Layout::of(&hierarchies).unwrap();
    let usage = layout.read(Path::new("nest/pod/c")).unwrap();
    assert_eq!(usage.cpu_nanoseconds, 123_456_789);
    assert_eq!((usage.memory.usage, usage.memory.working_set, usage.memory.rss), (10_000_000, 8_000_000, 3_000_000));
    assert_eq!(usage.memory.limit, None, "v1's page-rounded i64::MAX is no limit");
}

#[test]
fn files_that_are_missing_or_not_numbers_are_errors_not_zeros() {
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::V2(root.path().to_path_buf());
    assert!(layout.read(Path::new("gone")).is_err());
    write(root.path(), "odd", &[("cpu.stat", "usage_usec 1\n"), ("memory.current", "lots\n"), ("memory.stat", "")]);
    let error = layout.read(Path::new("odd")).unwrap_err();
    assert!(error.contains("memory.current holds \"lots\""), "{error}");
    write(root.path(), "no-usage", &[("cpu.stat", "user_usec 1\n"), ("memory.current", "1\n"), ("memory.stat", "")]);
    assert!(layout.read(Path::new("no-usage")).is_err());
}

#[test]
fn the_cpu_rate_is_taken_between_readings_and_a_counter_that_went_back_has_none() {
    let rates = Rates::default();
    let start = Instant::now();
    assert_eq!(rates.rate("c", start, 1_000_000_000), None, "no earlier reading");
    // Half a core for two seconds.
    assert_eq!(rates.rate("c", start + Duration::from_secs(2), 2_000_000_000), Some(500_000_000));
    assert_eq!(rates.rate("c", start + Duration::from_secs(3), 5), None, "a new cgroup of that name");
    assert_eq!(rates.rate("c", start + Duration::from_secs(3), u64::MAX), None, "no time passed");
    rates.keep_only(&["other".to_string()]);
    assert!(!rates.knows("c"));
}

#[test]
fn the_machines_cpu_and_memory_from_proc() {
    let stat = "cpu  100 20 30 5000 40 5 6 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nbtime 1765000000\n";
    // user + nice + system + irq + softirq + steal, at 100 ticks a second.
    assert_eq!(machine_cpu(stat, 100), Some(168 * 10_000_000));
    assert_eq!(boot_time(stat).as_deref(), Some("2025-12-06T05:46:40Z"));
    let meminfo = "MemTotal:       8000 kB\nMemFree:        3000 kB\nMemAvailable:   6000 kB\nInactive(file): 1000 kB\n\
                   AnonPages:       500 kB\n";
    let memory = machine_memory(meminfo).unwrap();
    assert_eq!((memory.usage, memory.working_set, memory.rss), (5000 * 1024, 4000 * 1024, 500 * 1024));
    assert_eq!(memory.limit, Some(8000 * 1024));
}

#[test]
fn a_summary_lists_each_running_container_and_its_pod_and_the_metrics_name_them_as_the_kubelet_does() {
    let root = tempfile::tempdir().unwrap();
    let files = |usec: &str, current: &str| {
        vec![
            ("cpu.stat", format!("usage_usec {usec}\n")),
            ("memory.current", current.to_string()),
            ("memory.stat", "inactive_file 1000\nanon 500\n".to_string()),
        ]
    };
    for (cgroup, usec, current) in [("pods/uid-1", "3000000", "9000"), ("pods/uid-1/web", "2000000", "5000")] {
        let owned = files(usec, current);
        let borrowed: Vec<(&str, &str)> = owned.iter().map(|(n, t)| (*n, t.as_str())).collect();
        write(root.path(), cgroup, &borrowed);
    }
    let upper = root.path().join("upper");
    std::fs::create_dir_all(&upper).unwrap();
    std::fs::write(upper.join("written"), vec![7u8; 64 << 10]).unwrap();
    let pod = Pod {
        namespace: "team \"a\"".into(),
        name: "web-1".into(),
        uid: "uid-1".into(),
        started: "2026-12-07T06:00:00Z".into(),
        containers: vec![Container {
            name: "web".into(),
            started: Some("2026-12-07T06:00:01Z".into()),
            cgroup: PathBuf::from("pods/uid-1/web"),
            upper: Some(upper),
        }],
    };
    let rates = Rates::default();
    let layout = Layout::V2(root.path().to_path_buf());
    let read = read("node-0", root.path(), Some(&layout), std::slice::from_ref(&pod), &rates, &Sizes::default());
    assert!(read.errors.is_empty(), "{:?}", read.errors);
    let summary = &read.summary;
    assert_eq!(summary["node"]["nodeName"], "node-0");
    assert!(summary["node"]["cpu"]["usageCoreNanoSeconds"].as_u64().is_some());
    assert!(summary["node"]["fs"]["capacityBytes"].as_u64().is_some_and(|c| c > 0));
    let stats = &summary["pods"][0];
    assert_eq!(stats["podRef"], json!({"name": "web-1", "namespace": "team \"a\"", "uid": "uid-1"}));
    assert_eq!(stats["memory"]["workingSetBytes"], 8000);
    let container = &stats["containers"][0];
    assert_eq!(container["startTime"], "2026-12-07T06:00:01Z");
    assert_eq!(container["cpu"]["usageCoreNanoSeconds"], 2_000_000_000u64);
    assert_eq!(container["cpu"]["usageNanoCores"], 0, "read twice, nothing used between");
    assert_eq!(
        (container["memory"]["usageBytes"].as_u64(), container["memory"]["workingSetBytes"].as_u64()),
        (Some(5000), Some(4000))
    );
    assert!(container["rootfs"]["usedBytes"].as_u64().is_some_and(|b| b >= 64 << 10), "{container}");

    let text = resource_metrics(summary, 0);
    for line in [
        "# TYPE container_cpu_usage_seconds_total counter",
        r#"container_cpu_usage_seconds_total{container="web",namespace="team \"a\"",pod="web-1"} 2 "#,
        r#"container_memory_working_set_bytes{container="web",namespace="team \"a\"",pod="web-1"} 4000 "#,
        r#"pod_cpu_usage_seconds_total{namespace="team \"a\"",pod="web-1"} 3 "#,
        r#"pod_memory_working_set_bytes{namespace="team \"a\"",pod="web-1"} 8000 "#,
        "node_cpu_usage_seconds_total ",
        "node_memory_working_set_bytes ",
        "resource_scrape_error 0\n",
        "scrape_error 0\n",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    assert!(resource_metrics(summary, 1).contains("resource_scrape_error 1\n"));
}

#[test]
fn a_container_whose_cgroup_is_gone_is_left_out_and_counted_as_an_error() {
    let root = tempfile::tempdir().unwrap();
    let pod = Pod {
        namespace: "default".into(),
        name: "gone".into(),
        uid: "u".into(),
        started: "2026-12-07T06:00:00Z".into(),
        containers: vec![Container { name: "c".into(), started: None, cgroup: "pods/u/c".into(), upper: None }],
    };
    let layout = Layout::V2(root.path().to_path_buf());
    let read = read("node-0", root.path(), Some(&layout), &[pod], &Rates::default(), &Sizes::default());
    assert_eq!(read.errors.len(), 1, "{:?}", read.errors);
    assert_eq!(read.summary["pods"][0]["containers"], json!([]));
}

#[test]
fn a_writable_layer_is_walked_at_most_once_a_period_however_often_it_is_asked_and_forgotten_once_gone() {
    let (sizes, layer, other) = (Sizes::default(), Path::new("/layers/a"), Path::new("/layers/b"));
    let start = Instant::now();
    let walks = std::cell::Cell::new(0u64);
    let walk = |held: u64| {
        let walks = &walks;
        move |_: &Path| {
            walks.set(walks.get() + 1);
            storage::Usage { bytes: held, entries: 1, incomplete: false }
        }
    };
    assert_eq!(sizes.of(layer, start, walk(10)).bytes, 10);
    for second in 1..10 {
        let asked = sizes.of(layer, start + Duration::from_secs(second), walk(99));
        assert_eq!(asked.bytes, 10, "within the period: the last walk's");
    }
    assert_eq!(walks.get(), 1);
    assert_eq!(sizes.of(layer, start + storage::PERIOD, walk(20)).bytes, 20, "a period on: walked again");
    assert_eq!(sizes.of(other, start, walk(5)).bytes, 5);
    sizes.keep_only(&[other]);
    assert_eq!(sizes.of(layer, start + storage::PERIOD, walk(30)).bytes, 30, "a forgotten layer is walked anew");
    assert_eq!(walks.get(), 4);
}
