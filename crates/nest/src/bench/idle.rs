//! `nest bench idle`: what a `nest up` costs while nothing happens. It starts `nest up` (this binary) on a new data
//! directory, waits for its `demo` tenant to be ready, lets it settle, and measures over a window: the CPU used by
//! `nest up` and every process it started (the tenants' API servers and controller-managers), and the rate of new
//! TCP connections. Then it adds tenants, step by step (`--tenants 10`), and measures again once they are ready and
//! have settled, so that the cost of one more idle tenant shows.
//!
//! The management API server's answers are read from its `apiserver_request_total` before and after the window:
//! their rate, and the five series (verb, resource, code) answered most often.
//!
//! New connections are counted machine-wide (`TcpActiveOpens` in `/proc/net/snmp`), so run it on a quiet machine;
//! nothing but `nest up` runs during the window. The bench uses `nest up`'s fixed node and pod addresses: run no
//! other `nest up` beside it.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use std::time::{Duration, Instant};

use kube::api::Api;
use serde_json::json;

use super::stats::round;
use super::tenants::wait_provisioned;
use super::{emit, parse_duration};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// How many tenants to add after the first measurement, step by step, comma separated (0: demo alone).
    #[arg(long, default_value = "0,10", value_delimiter = ',')]
    tenants: Vec<usize>,
    /// How long to let the cluster settle after tenants become ready, before measuring.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    settle: Duration,
    /// How long to measure.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    window: Duration,
    /// Give up on a step after this long.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    timeout: Duration,
}

/// `/proc/<pid>/stat`'s clock ticks: Linux reports them in USER_HZ, which is 100 on every architecture it runs on.
const TICKS_PER_SECOND: f64 = 100.0;

/// `pid` and all its descendants.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut next = 0;
    while next < all.len() {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", all[next])).into_iter().flatten().flatten();
        for task in tasks {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            all.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
        next += 1;
    }
    all
}

/// CPU time used so far by `pids` (user and system), in clock ticks.
fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command name, in parentheses: state is field 3, utime 14 and stime 15.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum()
}

/// Connections this machine has opened so far (`Tcp: ActiveOpens`).
fn active_opens() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else { return 0 };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "ActiveOpens")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// The management API server's `apiserver_request_total`, series by series (`verb resource code` → count).
async fn requests_answered(client: &kube::Client) -> BTreeMap<String, u64> {
    let request = hyper::Request::get("/metrics").body(Vec::new()).expect("a request");
    let text = client.request_text(request).await.unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (labels, count) = line.strip_prefix("apiserver_request_total{")?.split_once("} ")?;
            let label = |name: &str| {
                let value = labels.split(&format!("{name}=\"")).nth(1)?;
                value.split('"').next()
            };
            let series = format!("{} {} {}", label("verb")?, label("resource")?, label("code")?);
            Some((series, count.trim().parse().ok()?))
        })
        .collect()
}

/// What the processes under `pid` used over `window`, and what the management API server answered.
struct Idle {
    processes: usize,
    cpu_percent: f64,
    connections_per_second: f64,
    requests_per_second: f64,
    /// The series answered most often over the window, with their rates.
    busiest: Vec<(String, f64)>,
}

async fn measure(pid: u32, client: &kube::Client, window: Duration) -> Idle {
    let before = (cpu_ticks(&process_tree(pid)), active_opens(), requests_answered(client).await);
    tokio::time::sleep(window).await;
    let pids = process_tree(pid);
    let after = (cpu_ticks(&pids), active_opens(), requests_answered(client).await);
    let seconds = window.as_secs_f64();
    let mut grew: Vec<(String, u64)> = after
        .2
        .iter()
        .map(|(series, n)| (series.clone(), n - before.2.get(series).copied().unwrap_or(0).min(*n)))
        .filter(|(_, n)| *n > 0)
        .collect();
    // The bench's own first read of /metrics is counted in the second.
    if let Some(own) = grew.iter_mut().find(|(series, _)| series == "GET  200") {
        own.1 -= 1;
    }
    grew.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let requests: u64 = grew.iter().map(|(_, n)| n).sum();
    Idle {
        processes: pids.len(),
        cpu_percent: round(after.0.saturating_sub(before.0) as f64 / TICKS_PER_SECOND / seconds * 100.0),
        connections_per_second: round(after.1.saturating_sub(before.1) as f64 / seconds),
        requests_per_second: round(requests as f64 / seconds),
        busiest: grew
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .take(5)
            .map(|(s, n)| (s, round(n as f64 / seconds)))
            .collect(),
    }
}

/// A running `nest up`, stopped with SIGINT (as Ctrl-C stops it) when dropped.
pub(super) struct Up(pub(super) std::process::Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").arg("-INT").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// Starts `nest up` (this binary) on `data`, with `extra` flags; returns once it says it is up.
pub(super) fn start_up(data: &Path, extra: &[String]) -> anyhow::Result<Up> {
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("a piped stdout"));
    let up = Up(child);
    let mut line = String::new();
    while !line.contains("Ctrl-C stops it") {
        line.clear();
        anyhow::ensure!(stdout.read_line(&mut line)? > 0, "nest up exited before it was up");
    }
    // Keep reading, so that nest up never blocks on a full pipe.
    std::thread::spawn(move || for _ in stdout.lines() {});
    Ok(up)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let up = start_up(data.path(), &[])?;
    let client = nest_client::connect(&data.path().join("admin.kubeconfig")).await?.client;
    let clusters: Api<nest_capn::api::Cluster> = Api::namespaced(client.clone(), "default");
    let began = Instant::now();
    // The CRDs are installed and demo created a moment after nest up says it is up.
    while clusters.get_opt("demo").await.ok().flatten().is_none() {
        anyhow::ensure!(began.elapsed() < args.timeout, "nest up created no demo tenant");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut names = vec!["demo".to_string()];
    let mut first: Option<(usize, f64)> = None;
    for (step, count) in args.tenants.iter().copied().enumerate() {
        let added: Vec<String> = (0..count).map(|i| format!("idle{step}-{i}")).collect();
        for name in &added {
            nest_capn::bundle::create(&client, name, "default", &Default::default()).await?;
        }
        names.extend(added);
        wait_provisioned(&clusters, &names, Instant::now(), args.timeout).await?;
        tokio::time::sleep(args.settle).await;
        let idle = measure(up.0.id(), &client, args.window).await;
        let (tenants_then, cpu_then) = *first.get_or_insert((names.len(), idle.cpu_percent));
        let extra = names.len() - tenants_then;
        emit(json!({
            "bench": "idle", "tenants": names.len(), "processes": idle.processes,
            "cpu_percent_of_one_core": idle.cpu_percent,
            "cpu_percent_per_added_tenant": (extra > 0).then(|| round((idle.cpu_percent - cpu_then) / extra as f64)),
            "new_tcp_connections_per_second": idle.connections_per_second,
            "management_requests_per_second": idle.requests_per_second,
            "management_busiest": idle.busiest.iter().map(|(series, rate)| json!({"series": series, "per_second": rate})).collect::<Vec<_>>(),
            "window_seconds": args.window.as_secs_f64(),
        }));
    }
    drop(up);
    Ok(())
}
