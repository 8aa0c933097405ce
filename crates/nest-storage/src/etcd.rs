//! The etcd backend: a real etcd v3 server, through the `etcd-client` crate. The store's revisions are etcd's.
//!
//! Each write is one etcd transaction that compares the key's revision and then writes, or else reads the key so a
//! refusal can say why (exists, conflict, not found) without a second round trip. Each watch is one etcd watch with
//! `prev_kv` (a delete event must carry the deleted value), pumped into the same bounded queue (`queue.rs`) the
//! embedded store uses, so a slow consumer ends in [`Error::WatchOverflow`] here too.
//!
//! [`TempEtcd`] starts a throw-away etcd from `PATH` for tests and benchmarks.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use futures_util::StreamExt;

use crate::queue::queue;
use crate::{
    Deleted, Error, Event, EventKind, KeyValue, ListOptions, ListResult, ReadAt, Result, Revision, Store, WatchStream,
    check_key, check_write, prefix_end,
};

/// Items asked of etcd per request when listing.
const LIST_PAGE: usize = 500;

/// Settings of an [`EtcdStore`].
#[derive(Clone, Debug)]
pub struct Config {
    /// How many events a watcher may have queued before it is stopped with [`Error::WatchOverflow`]…
    pub watch_buffer: usize,
    /// …once it has also read nothing for this long. etcd hands a watcher that lagged a moment its missed events in
    /// batches of up to a thousand, more than the buffer may hold; a consumer reading them is not behind.
    pub watch_patience: Duration,
    /// How long a connection attempt may take.
    pub connect_timeout: Duration,
    /// TLS for `https://` endpoints: the CA to trust and the client certificate to present (PEM).
    pub tls: Option<Tls>,
}

/// How to reach an etcd that serves TLS and asks for client certificates.
#[derive(Clone, Debug)]
pub struct Tls {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            watch_buffer: 1024,
            watch_patience: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            tls: None,
        }
    }
}

/// The etcd store. See the [module docs](self).
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    config: Config,
}

impl EtcdStore {
    /// Connects to etcd at `endpoints` (URLs such as `http://127.0.0.1:2379`) and checks that it answers.
    pub async fn connect(endpoints: &[String], config: Config) -> Result<EtcdStore> {
        let mut options = ConnectOptions::new().with_connect_timeout(config.connect_timeout);
        if let Some(tls) = &config.tls {
            options = options.with_tls(
                etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(&tls.ca))
                    .identity(etcd_client::Identity::from_pem(&tls.cert, &tls.key)),
            );
        }
        let mut client =
            Client::connect(endpoints, Some(options)).await.map_err(|e| Error::backend("connecting to etcd", e))?;
        client.status().await.map_err(|e| Error::backend("asking etcd for its status", e))?;
        Ok(EtcdStore { client, config })
    }
}

/// Translates an etcd failure, recognising the refusals the store interface names.
fn etcd_error(context: &'static str, requested: Option<Revision>, error: etcd_client::Error) -> Error {
    if let etcd_client::Error::GRpcStatus(status) = &error {
        let message = status.message();
        let requested = requested.unwrap_or_default();
        if message.contains("required revision has been compacted") {
            return Error::Compacted { requested };
        }
        if message.contains("required revision is a future revision") {
            return Error::FutureRevision { requested };
        }
        if message.contains("request is too large") {
            return Error::ValueTooLarge { size: 0, limit: crate::MAX_VALUE_SIZE };
        }
    }
    Error::backend(context, error)
}

fn revision(value: i64) -> Revision {
    Revision(u64::try_from(value).unwrap_or(0))
}

fn signed(revision: Revision) -> i64 {
    i64::try_from(revision.0).unwrap_or(i64::MAX)
}

fn item(kv: &etcd_client::KeyValue) -> KeyValue {
    KeyValue {
        key: Bytes::copy_from_slice(kv.key()),
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: revision(kv.create_revision()),
        mod_revision: revision(kv.mod_revision()),
    }
}

/// The item an `or_else` read returned, if the key exists.
fn read_back(responses: Vec<TxnOpResponse>) -> Option<KeyValue> {
    responses.into_iter().find_map(|response| match response {
        TxnOpResponse::Get(get) => get.kvs().first().map(item),
        _ => None,
    })
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Revision {
    header.map(|h| revision(h.revision())).unwrap_or_default()
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        check_key(key)?;
        let response =
            self.client.kv_client().get(key, None).await.map_err(|e| etcd_error("reading from etcd", None, e))?;
        Ok(response.kvs().first().map(item))
    }

    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListResult> {
        // etcd-client cannot raise gRPC's 4 MiB response limit, so a list is read in pages, all at the revision of
        // the first; a page too large for the limit is asked for again at half the size.
        let end = prefix_end(prefix);
        let mut start = match &options.start_after {
            Some(after) if after.as_ref() >= prefix => [after.as_ref(), &[0]].concat(),
            _ => prefix.to_vec(),
        };
        let mut pinned = match options.revision {
            ReadAt::Latest => None,
            ReadAt::Revision(at) => Some(at),
        };
        let limit = options.limit.unwrap_or(usize::MAX);
        let mut page_size = LIST_PAGE;
        let mut items = Vec::new();
        loop {
            let wanted = page_size.min(limit - items.len()).max(1);
            let mut get = match &end {
                Some(end) => GetOptions::new().with_range(end.clone()),
                None => GetOptions::new().with_from_key(),
            }
            .with_limit(i64::try_from(wanted).unwrap_or(i64::MAX));
            if let Some(at) = pinned {
                get = get.with_revision(signed(at));
            }
            let response = match self.client.kv_client().get(start.clone(), Some(get)).await {
                Ok(response) => response,
                Err(etcd_client::Error::GRpcStatus(status))
                    if status.message().contains("message length too large") && page_size > 1 =>
                {
                    page_size /= 2;
                    continue;
                }
                Err(e) => return Err(etcd_error("listing from etcd", pinned, e)),
            };
            let at = *pinned.get_or_insert_with(|| header_revision(response.header()));
            let more = response.more();
            items.extend(response.kvs().iter().map(item));
            if items.len() >= limit || !more {
                // A page that stopped exactly at the limit may still have more behind it.
                let more = (more || items.len() > limit) && items.len() >= limit;
                items.truncate(limit);
                return Ok(ListResult { items, revision: at, more });
            }
            start = [items.last().map(|kv| kv.key.as_ref()).unwrap_or_default(), &[0]].concat();
        }
    }

    async fn create(&self, key: &[u8], value: Bytes) -> Result<KeyValue> {
        check_write(key, &value)?;
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value.to_vec(), None)])
            .or_else([TxnOp::get(key, None)]);
        let response = self.client.kv_client().txn(txn).await.map_err(|e| etcd_error("writing to etcd", None, e))?;
        if !response.succeeded() {
            return Err(Error::AlreadyExists { key: key.to_vec() });
        }
        let rev = header_revision(response.header());
        Ok(KeyValue { key: Bytes::copy_from_slice(key), value, create_revision: rev, mod_revision: rev })
    }

    async fn update(&self, key: &[u8], value: Bytes, expected: Revision) -> Result<KeyValue> {
        check_write(key, &value)?;
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, signed(expected))])
            .and_then([TxnOp::put(key, value.to_vec(), None), TxnOp::get(key, None)])
            .or_else([TxnOp::get(key, None)]);
        let response = self.client.kv_client().txn(txn).await.map_err(|e| etcd_error("writing to etcd", None, e))?;
        let succeeded = response.succeeded();
        let current = read_back(response.op_responses());
        match (succeeded, current) {
            (true, Some(current)) => Ok(current),
            (false, Some(current)) => Err(Error::Conflict { expected, current: Box::new(current) }),
            (_, None) => Err(Error::NotFound { key: key.to_vec() }),
        }
    }

    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<Deleted> {
        check_key(key)?;
        let compare = match expected {
            Some(expected) => Compare::mod_revision(key, CompareOp::Equal, signed(expected)),
            None => Compare::create_revision(key, CompareOp::Greater, 0),
        };
        let txn = Txn::new()
            .when([compare])
            .and_then([TxnOp::delete(key, Some(DeleteOptions::new().with_prev_key()))])
            .or_else([TxnOp::get(key, None)]);
        let response = self.client.kv_client().txn(txn).await.map_err(|e| etcd_error("writing to etcd", None, e))?;
        let rev = header_revision(response.header());
        let succeeded = response.succeeded();
        let responses = response.op_responses();
        if succeeded {
            let prev = responses.into_iter().find_map(|response| match response {
                TxnOpResponse::Delete(delete) => delete.prev_kvs().first().map(item),
                _ => None,
            });
            return match prev {
                Some(prev) => Ok(Deleted { revision: rev, prev }),
                None => Err(Error::NotFound { key: key.to_vec() }),
            };
        }
        match (expected, read_back(responses)) {
            (Some(expected), Some(current)) => Err(Error::Conflict { expected, current: Box::new(current) }),
            _ => Err(Error::NotFound { key: key.to_vec() }),
        }
    }

    async fn watch(&self, prefix: &[u8], from: Revision) -> Result<WatchStream> {
        let from = from.max(Revision(1));
        let mut options = WatchOptions::new().with_start_revision(signed(from)).with_prev_key();
        options = if prefix.is_empty() { options.with_all_keys() } else { options.with_prefix() };
        let mut stream = self
            .client
            .watch_client()
            .watch(prefix, Some(options))
            .await
            .map_err(|e| etcd_error("starting an etcd watch", Some(from), e))?;
        let (tx, rx) = queue(self.config.watch_buffer);
        let patience = self.config.watch_patience;
        tokio::spawn(async move {
            loop {
                let response = tokio::select! {
                    response = stream.message() => response,
                    () = tx.closed() => return,
                };
                let response = match response {
                    Ok(Some(response)) => response,
                    Ok(None) => return tx.fail(Error::Closed),
                    Err(e) => return tx.fail(etcd_error("reading an etcd watch", Some(from), e)),
                };
                if response.compact_revision() > 0 {
                    return tx.fail(Error::Compacted { requested: from });
                }
                if response.canceled() {
                    let reason = response.cancel_reason().to_string();
                    return tx.fail(Error::backend("etcd canceled the watch", reason));
                }
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let event = match event.event_type() {
                        EventType::Put => Event {
                            kind: EventKind::Put,
                            key: Bytes::copy_from_slice(kv.key()),
                            value: Bytes::copy_from_slice(kv.value()),
                            create_revision: revision(kv.create_revision()),
                            revision: revision(kv.mod_revision()),
                        },
                        EventType::Delete => {
                            let prev = event.prev_kv();
                            Event {
                                kind: EventKind::Delete,
                                key: Bytes::copy_from_slice(kv.key()),
                                value: prev.map(|p| Bytes::copy_from_slice(p.value())).unwrap_or_default(),
                                create_revision: prev.map(|p| revision(p.create_revision())).unwrap_or_default(),
                                revision: revision(kv.mod_revision()),
                            }
                        }
                    };
                    if !tx.push_within(event, patience).await {
                        // Dropping `stream` cancels the etcd watch.
                        return;
                    }
                }
            }
        });
        Ok(futures_util::stream::unfold(rx, |mut rx| async move {
            let item = rx.recv().await?;
            Some((item, rx))
        })
        .boxed())
    }

    async fn current_revision(&self) -> Result<Revision> {
        let response = self
            .client
            .kv_client()
            .get(&b"\0"[..], Some(GetOptions::new().with_count_only()))
            .await
            .map_err(|e| etcd_error("reading from etcd", None, e))?;
        Ok(header_revision(response.header()))
    }

    async fn count(&self, prefix: &[u8]) -> Result<u64> {
        let options = match prefix_end(prefix) {
            Some(end) => GetOptions::new().with_range(end),
            None => GetOptions::new().with_from_key(),
        };
        let response = self
            .client
            .kv_client()
            .get(prefix, Some(options.with_count_only()))
            .await
            .map_err(|e| etcd_error("counting in etcd", None, e))?;
        Ok(u64::try_from(response.count()).unwrap_or(0))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let options = CompactionOptions::new().with_physical();
        match self.client.kv_client().compact(signed(revision), Some(options)).await {
            Ok(_) => Ok(()),
            // Compacting to a point already passed does nothing, as the interface promises.
            Err(e) => match etcd_error("compacting etcd", Some(revision), e) {
                Error::Compacted { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    fn backend(&self) -> &'static str {
        "etcd"
    }
}

/// A throw-away etcd server on loopback, started from `PATH` with a temporary data directory and stopped (and its
/// directory removed) on drop. Durability is etcd's default: every commit is fsynced.
pub struct TempEtcd {
    child: tokio::process::Child,
    dir: PathBuf,
    url: String,
}

impl TempEtcd {
    /// Starts etcd and waits until it answers.
    pub async fn start() -> Result<TempEtcd> {
        let dir = std::env::temp_dir().join(format!("nest-etcd-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).map_err(|e| Error::backend("creating etcd's data directory", e))?;
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let url = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = std::fs::File::create(dir.join("etcd.log")).map_err(|e| Error::backend("creating etcd's log", e))?;
        let child = tokio::process::Command::new("etcd")
            .arg("--name=nest-temp")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={url}"))
            .arg(format!("--advertise-client-urls={url}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=nest-temp={peer}"))
            // Room above the store's own 1.5 MiB value limit, so the store's check is the one that refuses.
            .arg("--max-request-bytes=2097152")
            .arg("--quota-backend-bytes=8589934592")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::backend("starting etcd from PATH (Debian package etcd-server)", e))?;
        let mut etcd = TempEtcd { child, dir, url };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = etcd.child.try_wait() {
                let log = std::fs::read_to_string(etcd.dir.join("etcd.log")).unwrap_or_default();
                let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                return Err(Error::backend("etcd exited at start-up", format!("{status}: {tail}")));
            }
            if EtcdStore::connect(std::slice::from_ref(&etcd.url), Config::default()).await.is_ok() {
                return Ok(etcd);
            }
            if Instant::now() > deadline {
                return Err(Error::backend("starting etcd", "it did not answer within 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The client URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TempEtcd {
    fn drop(&mut self) {
        // SIGKILL; tokio reaps the child in the background.
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| Error::backend("finding a free port", e))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| Error::backend("finding a free port", e))
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
