//! `nest bench store`: write throughput and latency, list latency and watch fan-out latency, for the embedded and
//! the etcd backend in one run, ending with the ratio of their write throughput at 64 writers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use futures_util::StreamExt;
use nest_storage::embedded::{Config, EmbeddedStore};
use nest_storage::{ListOptions, Store};
use serde_json::json;
use tokio::sync::mpsc;

use super::stats::{Summary, round};
use super::{emit, parse_duration};

/// The writer counts measured; the ratio is taken at the last.
const WRITERS: [usize; 3] = [1, 16, 64];
/// Keys listed by the list measurement.
const LIST_KEYS: usize = 10_000;
/// Watchers of the fan-out measurement.
const WATCHERS: usize = 1_000;
/// Writes timed by the fan-out measurement.
const FAN_OUT_WRITES: usize = 100;
/// The size of every written value: a typical small Kubernetes object.
const VALUE_SIZE: usize = 1024;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Use this etcd (client URL) instead of starting a temporary one from PATH.
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// How long each write configuration runs.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Where the embedded store's temporary directory goes (the same disk etcd uses, by default the system's).
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR")]
    data_dir: Option<std::path::PathBuf>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let dir = match &args.data_dir {
        Some(base) => tempfile::tempdir_in(base),
        None => tempfile::tempdir(),
    }
    .context("creating a temporary directory for the embedded store")?;
    let embedded: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path(), Config::default())?);
    let embedded_64 = measure(&embedded, args.duration).await?;
    drop(embedded);

    let etcd_64 = match etcd(&args).await? {
        Ok((store, _guard)) => Some(measure(&store, args.duration).await?),
        Err(reason) => {
            emit(json!({"bench": "store", "backend": "etcd", "skipped": reason}));
            None
        }
    };
    let ratio = etcd_64.map(|etcd| round(embedded_64 / etcd));
    emit(json!({
        "bench": "store",
        "summary": "write throughput, embedded ÷ etcd, at 64 writers",
        "writers": 64,
        "embedded_ops_per_sec": round(embedded_64),
        "etcd_ops_per_sec": etcd_64.map(round),
        "ratio": ratio,
    }));
    Ok(())
}

/// The etcd store with whatever keeps a temporary server alive, or why there is none.
type Etcd = Result<(Arc<dyn Store>, Box<dyn std::any::Any>), String>;

#[cfg(feature = "etcd")]
async fn etcd(args: &Args) -> anyhow::Result<Etcd> {
    use nest_storage::etcd::{Config, EtcdStore, TempEtcd};
    let (url, guard): (String, Box<dyn std::any::Any>) = match &args.etcd {
        Some(url) => (url.clone(), Box::new(())),
        None => {
            let etcd = TempEtcd::start().await.context("starting a temporary etcd (is etcd-server installed?)")?;
            (etcd.url().to_string(), Box::new(etcd))
        }
    };
    let store = EtcdStore::connect(&[url], Config::default()).await?;
    Ok(Ok((Arc::new(store), guard)))
}

#[cfg(not(feature = "etcd"))]
async fn etcd(_: &Args) -> anyhow::Result<Etcd> {
    Ok(Err("this nest was built without the `etcd` feature; rebuild with `--features etcd` (needs protoc) to compare"
        .into()))
}

/// Runs every measurement on one backend; returns its write throughput at 64 writers.
async fn measure(store: &Arc<dyn Store>, duration: Duration) -> anyhow::Result<f64> {
    let backend = store.backend();
    let mut at_64 = 0.0;
    for writers in WRITERS {
        let (ops_per_sec, mut latencies) = write_load(store, writers, duration).await?;
        let s = Summary::of(&mut latencies);
        emit(json!({
            "bench": "store", "backend": backend, "op": "write", "writers": writers, "value_bytes": VALUE_SIZE,
            "ops": s.count, "ops_per_sec": round(ops_per_sec), "p50_ms": s.p50_ms, "p99_ms": s.p99_ms,
        }));
        at_64 = ops_per_sec;
    }
    list(store).await?;
    fan_out(store).await?;
    Ok(at_64)
}

/// `writers` tasks create keys as fast as the store acknowledges them, for `duration`.
async fn write_load(
    store: &Arc<dyn Store>,
    writers: usize,
    duration: Duration,
) -> anyhow::Result<(f64, Vec<Duration>)> {
    let run = fastrand::u64(..);
    let value = Bytes::from(vec![b'x'; VALUE_SIZE]);
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, value) = (store.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let key = format!("/registry/bench/write-{run}/{w}/{i}");
                let began = Instant::now();
                store.create(key.as_bytes(), value.clone()).await?;
                latencies.push(began.elapsed());
                i += 1;
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok((latencies.len() as f64 / elapsed, latencies))
}

/// Lists a prefix holding 10,000 keys, several times.
async fn list(store: &Arc<dyn Store>) -> anyhow::Result<()> {
    let prefix = format!("/registry/bench/list-{}/", fastrand::u64(..));
    let value = Bytes::from(vec![b'x'; VALUE_SIZE]);
    let mut tasks = Vec::new();
    for w in 0..64 {
        let (store, prefix, value) = (store.clone(), prefix.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            for i in (w..LIST_KEYS).step_by(64) {
                store.create(format!("{prefix}{i:05}").as_bytes(), value.clone()).await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let mut latencies = Vec::new();
    for _ in 0..20 {
        let began = Instant::now();
        let listed = store.list(prefix.as_bytes(), ListOptions::default()).await?;
        latencies.push(began.elapsed());
        anyhow::ensure!(listed.items.len() == LIST_KEYS, "listed {} keys, expected {LIST_KEYS}", listed.items.len());
    }
    // The first run reads from a cold cache (the write load before it evicted these pages); report it apart.
    let first_ms = round(latencies[0].as_secs_f64() * 1000.0);
    let s = Summary::of(&mut latencies);
    emit(json!({
        "bench": "store", "backend": store.backend(), "op": "list", "keys": LIST_KEYS, "value_bytes": VALUE_SIZE,
        "runs": s.count, "first_ms": first_ms, "p50_ms": s.p50_ms, "max_ms": s.max_ms,
    }));
    Ok(())
}

/// Times how long one write takes to reach every one of 1,000 watchers of its prefix.
async fn fan_out(store: &Arc<dyn Store>) -> anyhow::Result<()> {
    let prefix = format!("/registry/bench/watch-{}/", fastrand::u64(..));
    let from = store.current_revision().await?.next();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let mut stream = store.watch(prefix.as_bytes(), from).await?;
        let tx = tx.clone();
        watchers.push(tokio::spawn(async move {
            while let Some(Ok(event)) = stream.next().await {
                if tx.send((event.revision, Instant::now())).is_err() {
                    break;
                }
            }
        }));
    }
    drop(tx);
    let mut latencies = Vec::new();
    for i in 0..FAN_OUT_WRITES {
        let began = Instant::now();
        let written = store.create(format!("{prefix}{i}").as_bytes(), Bytes::from_static(b"x")).await?;
        let mut received = 0;
        let mut last = began;
        while received < WATCHERS {
            let (revision, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .context("a watcher did not receive the write within 30 s")?
                .context("the watchers stopped")?;
            anyhow::ensure!(
                revision == written.mod_revision,
                "watchers saw revision {revision}, expected {}",
                written.mod_revision
            );
            received += 1;
            last = last.max(at);
        }
        latencies.push(last - began);
    }
    for watcher in watchers {
        watcher.abort();
    }
    let s = Summary::of(&mut latencies);
    emit(json!({
        "bench": "store", "backend": store.backend(), "op": "watch_fan_out", "watchers": WATCHERS,
        "writes": s.count, "p50_ms": s.p50_ms, "p99_ms": s.p99_ms, "max_ms": s.max_ms,
    }));
    Ok(())
}
