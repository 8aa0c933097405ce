//! Crash safety of the embedded store: nothing acknowledged is lost when the process dies at a random moment.
//!
//! The test runs its own binary again as a child (the ignored test `crash_writer_child`), which writes continuously
//! with many concurrent writers and prints a line for every acknowledged write. The parent kills it with SIGKILL
//! at a random moment, several times over the same directory, and after each kill reopens the store and checks
//! every acknowledged write and that revisions only grow.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nest_storage::embedded::{Config, EmbeddedStore};
use nest_storage::{Error, Revision, Store};

const ROUNDS: usize = 6;
const WRITERS: usize = 16;

/// What a child acknowledged.
#[derive(Default)]
struct Acks {
    /// Created keys and the revision each create was acknowledged at.
    created: HashMap<String, Revision>,
    /// The highest counter value acknowledged, with its revision.
    counter: Option<(u64, Revision)>,
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut highest_seen = Revision(0);
    let mut all_created: HashMap<String, Revision> = HashMap::new();
    let mut last_counter = 0;
    for round in 0..ROUNDS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash_writer_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("NEST_CRASH_DIR", dir.path())
            .env("NEST_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Let it write for a random while after its first acknowledgement, then kill it mid-flight.
        let mut lines = Vec::new();
        while !lines.last().is_some_and(|line: &String| line.starts_with("ack ")) {
            lines.push(rx.recv_timeout(Duration::from_secs(60)).expect("the child acknowledges writes"));
        }
        if round == 0 {
            // While the child has the directory open, another process cannot.
            match EmbeddedStore::open(dir.path(), Config::default()) {
                Err(error @ Error::Locked { .. }) => assert!(!error.to_string().contains('\n')),
                Err(other) => panic!("expected Locked, got {other}"),
                Ok(_) => panic!("opened a directory another process is writing to"),
            }
        }
        let deadline = Instant::now() + Duration::from_millis(fastrand::u64(50..1500));
        while Instant::now() < deadline {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(5)) {
                lines.push(line);
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());

        let acks = parse(&lines);
        assert!(!acks.created.is_empty(), "round {round}: the child wrote nothing");
        let lowest = acks.created.values().min().copied().unwrap();
        assert!(lowest > highest_seen, "round {round}: revisions went back from {highest_seen} to {lowest}");
        all_created.extend(acks.created.clone());

        runtime.block_on(async {
            let store = EmbeddedStore::open(dir.path(), Config::default()).unwrap();
            for (key, revision) in &all_created {
                let item = store.get(key.as_bytes()).await.unwrap();
                let item = item.unwrap_or_else(|| panic!("round {round}: acknowledged key {key} is missing"));
                assert_eq!(item.mod_revision, *revision, "round {round}: {key}");
            }
            let counter = store.get(b"/registry/crash/counter").await.unwrap().expect("the counter survives");
            let value: u64 = std::str::from_utf8(&counter.value).unwrap().parse().unwrap();
            if let Some((acked, _)) = acks.counter {
                assert!(value >= acked, "round {round}: counter {value} is behind the acknowledged {acked}");
                last_counter = last_counter.max(acked);
            }
            assert!(value >= last_counter);
            let current = store.current_revision().await.unwrap();
            let highest = acks.created.values().chain(acks.counter.iter().map(|(_, r)| r)).max().copied().unwrap();
            assert!(current >= highest, "round {round}: current revision {current} is behind {highest}");
            highest_seen = current;
            // The store still takes writes after recovery, at a higher revision.
            let probe = store.create(format!("/registry/crash/probe-{round}").as_bytes(), "p".into()).await.unwrap();
            assert!(probe.mod_revision > current);
            highest_seen = probe.mod_revision;
        });
        eprintln!("round {round}: {} acknowledged writes checked", all_created.len());
    }
}

fn parse(lines: &[String]) -> Acks {
    let mut acks = Acks::default();
    for line in lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["ack", key, revision] => {
                acks.created.insert(key.to_string(), Revision(revision.parse().unwrap()));
            }
            ["counter", value, revision] => {
                let value: u64 = value.parse().unwrap();
                if acks.counter.is_none_or(|(v, _)| value > v) {
                    acks.counter = Some((value, Revision(revision.parse().unwrap())));
                }
            }
            _ => {}
        }
    }
    acks
}

/// The writer the crash test kills. Run only as the child of `acknowledged_writes_survive_sigkill`.
#[test]
#[ignore = "run by acknowledged_writes_survive_sigkill as a child process, which it kills"]
fn crash_writer_child() {
    let dir = std::env::var("NEST_CRASH_DIR").expect("NEST_CRASH_DIR");
    let round = std::env::var("NEST_CRASH_ROUND").expect("NEST_CRASH_ROUND");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async move {
        let store = std::sync::Arc::new(EmbeddedStore::open(&dir, Config::default()).unwrap());
        let counter_key = b"/registry/crash/counter";
        match store.create(counter_key, "0".into()).await {
            Ok(_) | Err(Error::AlreadyExists { .. }) => {}
            Err(e) => panic!("creating the counter: {e}"),
        }
        let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let (store, out, round) = (store.clone(), out.clone(), round.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0.. {
                    if writer == 0 {
                        // One writer increments a counter with compare-and-swap.
                        let current = store.get(counter_key).await.unwrap().unwrap();
                        let n: u64 = std::str::from_utf8(&current.value).unwrap().parse().unwrap();
                        let value = Bytes::from((n + 1).to_string());
                        if let Ok(kv) = store.update(counter_key, value, current.mod_revision).await {
                            let mut out = out.lock().unwrap();
                            writeln!(out, "counter {} {}", n + 1, kv.mod_revision).unwrap();
                            out.flush().unwrap();
                        }
                        continue;
                    }
                    let key = format!("/registry/crash/r{round}-w{writer}-{i}");
                    let value = Bytes::from(vec![b'v'; 100 + (i % 7) * 300]);
                    let kv = store.create(key.as_bytes(), value).await.unwrap();
                    let mut out = out.lock().unwrap();
                    writeln!(out, "ack {key} {}", kv.mod_revision).unwrap();
                    out.flush().unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
}
