//! The etcd backend: a real etcd v3 server, through the `etcd-client` crate. The store's revisions are etcd's.
//!
//! Each write is one etcd transaction that compares the key's revision and then writes, or else reads the key so a
//! refusal can say why (exists, conflict, not found) without a second round trip. Each watch is one etcd watch with
//! `prev_kv` (a delete event must carry the deleted value), pumped into the same bounded queue (`queue.rs`) the
//! embedded store uses, so a slow consumer ends in [`Error::WatchOverflow`] here too.
//!
//! A cluster of members is reached through one client that balances over the members in good health, as etcd's own
//! client does: each member has a probe of its own (its status, every second and at once after a failed request), a
//! member that does not answer leaves the balancer and comes back when it answers again. Every request asks for a
//! member with a leader (`hasleader`), so a member that lost its leader refuses at once instead of waiting. A request
//! that fails is tried again, on whichever member the balancer gives, for up to [`RETRY_WITHIN`] — a read on any
//! failure of the member or the connection, a write only when the failure proves it was not applied (no connection
//! was made; the member had no leader), after etcd's `isSafeRetryMutableRPC`. What still fails is
//! [`Error::Unavailable`] (a 503 for clients) or, for a write whose fate is unknown, [`Error::Backend`] (a 504). A
//! watch whose member goes away is opened again on another from the revision after its last event: no gap, no
//! event twice.
//!
//! [`EtcdStore::compact_every`] compacts history as kube-apiserver does, taking turns through the `compact_rev_key`
//! key it uses too: one API server of many compacts at each interval, to the revision of the interval before.
//!
//! [`TempEtcd`] starts a throw-away etcd from `PATH` for tests and benchmarks.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, KvClient, Txn,
    TxnOp, TxnOpResponse, WatchOptions,
};
use futures_util::StreamExt;

use crate::queue::queue;
use crate::{
    Deleted, Error, Event, EventKind, KeyValue, ListOptions, ListResult, ReadAt, Result, Revision, Store, WatchStream,
    check_key, check_write, prefix_end,
};

/// Items asked of etcd per request when listing.
const LIST_PAGE: usize = 500;
/// How long a request is tried again while the members fail it in ways that are safe to retry.
pub const RETRY_WITHIN: Duration = Duration::from_secs(4);
/// How long a watch whose member went away is tried on the others before it ends.
const RESUME_WITHIN: Duration = Duration::from_secs(30);
/// How often each member is probed, and how long a probe may take.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// The key kube-apiserver's compactor takes turns with (`compact_rev_key`): the same, so that nest and kube-apiserver
/// sharing an etcd compact in turn too.
const COMPACT_KEY: &[u8] = b"compact_rev_key";

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
    inner: Arc<Inner>,
}

struct Inner {
    /// Balances over the members in rotation.
    client: Client,
    config: Config,
    /// Each member: its URL, a client of its own for probes, and whether it is in the balancer.
    members: Vec<Member>,
    /// Wakes the prober early, after a request failed.
    wake: tokio::sync::Notify,
}

struct Member {
    url: String,
    probe: Client,
    in_rotation: Mutex<bool>,
}

fn connect_options(config: &Config) -> ConnectOptions {
    let mut options = ConnectOptions::new().with_connect_timeout(config.connect_timeout).with_require_leader(true);
    if let Some(tls) = &config.tls {
        options = options.with_tls(
            etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(&tls.ca))
                .identity(etcd_client::Identity::from_pem(&tls.cert, &tls.key)),
        );
    }
    options
}

impl EtcdStore {
    /// Connects to etcd at `endpoints` (URLs such as `http://127.0.0.1:2379`, the members of one cluster) and checks
    /// that it answers.
    pub async fn connect(endpoints: &[String], config: Config) -> Result<EtcdStore> {
        let options = connect_options(&config);
        let client = Client::connect(endpoints, Some(options.clone()))
            .await
            .map_err(|e| Error::backend("connecting to etcd", e))?;
        let probe_options = options.with_connect_timeout(PROBE_EVERY).with_timeout(PROBE_EVERY);
        let mut members = Vec::new();
        for url in endpoints {
            let probe = Client::connect([url], Some(probe_options.clone()))
                .await
                .map_err(|e| Error::backend("connecting to etcd", e))?;
            members.push(Member { url: url.clone(), probe, in_rotation: Mutex::new(true) });
        }
        let store = EtcdStore { inner: Arc::new(Inner { client, config, members, wake: Default::default() }) };
        store
            .retrying(Retry::Read, |_| async { store.inner.client.maintenance_client().status().await })
            .await
            .map_err(|e| etcd_error("asking etcd for its status", None, e))?;
        if store.inner.members.len() > 1 {
            tokio::spawn(probe(Arc::downgrade(&store.inner)));
        }
        Ok(store)
    }

    /// Compacts etcd's history every `interval`, after kube-apiserver's compactor (`--etcd-compaction-interval`):
    /// each API server tries to advance `compact_rev_key`'s version from the one it last saw; the one that succeeds
    /// compacts to the revision it saw an interval ago, the others learn the new version and wait. Runs as long as
    /// the store does.
    pub fn compact_every(&self, interval: Duration) {
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let (mut version, mut last) = (0i64, 0i64);
            loop {
                tokio::time::sleep(interval).await;
                let Some(inner) = inner.upgrade() else { return };
                let store = EtcdStore { inner };
                match store.compact_turn(version, last).await {
                    Ok((seen, revision)) => (version, last) = (seen, revision),
                    Err(error) => tracing::warn!(%error, "compacting etcd"),
                }
            }
        });
    }

    /// One turn of [`compact_every`](Self::compact_every): the version of the turn key now, and the revision now.
    async fn compact_turn(&self, version: i64, last: i64) -> Result<(i64, i64)> {
        let txn = Txn::new()
            .when([Compare::version(COMPACT_KEY, CompareOp::Equal, version)])
            .and_then([TxnOp::put(COMPACT_KEY, last.to_string(), None)])
            .or_else([TxnOp::get(COMPACT_KEY, None)]);
        let response = self
            .retrying(Retry::Cas, |mut kv| {
                let txn = txn.clone();
                async move { kv.txn(txn).await }
            })
            .await
            .map_err(|e| etcd_error("compacting etcd", None, e))?;
        let now = response.header().map_or(0, |h| h.revision());
        if !response.succeeded() {
            // Another API server took this turn (or this one starts late): its version is the one to advance next.
            let seen = response.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.version()),
                _ => None,
            });
            return Ok((seen.unwrap_or(version), now));
        }
        if last > 0 {
            self.compact(revision(last)).await?;
            tracing::info!(revision = last, "compacted etcd");
        }
        Ok((version + 1, now))
    }

    /// Runs `op` on the balanced client, again while it fails in a way [`retriable`] for `kind` and
    /// [`RETRY_WITHIN`] has not passed.
    async fn retrying<T, F, Fut>(&self, kind: Retry, op: F) -> std::result::Result<T, etcd_client::Error>
    where
        F: FnMut(KvClient) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        self.attempts(kind, op).await.0
    }

    /// [`retrying`](Self::retrying), also saying whether an attempt before the last may have been applied.
    async fn attempts<T, F, Fut>(&self, kind: Retry, mut op: F) -> (std::result::Result<T, etcd_client::Error>, bool)
    where
        F: FnMut(KvClient) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let deadline = Instant::now() + RETRY_WITHIN;
        let mut pause = Duration::from_millis(20);
        let mut ambiguous = false;
        loop {
            let attempt = op(self.inner.client.kv_client());
            let result = match kind {
                Retry::Compact => attempt.await,
                _ => tokio::time::timeout(ATTEMPT_WITHIN, attempt).await.unwrap_or_else(|_| {
                    Err(etcd_client::Error::GRpcStatus(tonic::Status::deadline_exceeded("no answer in time")))
                }),
            };
            match result {
                Err(error) if retriable(&error, kind) && Instant::now() + pause < deadline => {
                    tracing::debug!(%error, "etcd failed a request; trying again");
                    ambiguous |= !unapplied_error(&error);
                    self.inner.wake.notify_one();
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                other => return (other, ambiguous),
            }
        }
    }
}

/// What a request is, for whether it may be sent again after a failure ([`retriable`]).
#[derive(Clone, Copy, PartialEq)]
enum Retry {
    /// A read: always.
    Read,
    /// A write that is not a compare-and-swap: only when it cannot have been applied.
    Write,
    /// A compare-and-swap transaction: whenever a read would be, for an attempt that was applied makes the next one's
    /// comparison fail, and the caller recognises its own value ([`EtcdStore::write`]).
    Cas,
    /// A compaction: as a write, and with no time limit per attempt (it may take long on a large database).
    Compact,
}

/// How long one attempt may take before it is given up and, if safe, tried on another member: a write sent to a
/// member whose leader just died waits for etcd's own request timeout (7 s) otherwise.
const ATTEMPT_WITHIN: Duration = Duration::from_secs(2);

impl EtcdStore {
    /// Commits the compare-and-swap `txn`, tried again where [`retriable`] says it may be; also says whether an
    /// attempt before the last may have been applied (then a failed comparison may be this write's own doing).
    async fn write(&self, txn: Txn, kind: Retry) -> Result<(etcd_client::TxnResponse, bool)> {
        let (result, ambiguous) = self
            .attempts(kind, |mut kv| {
                let txn = txn.clone();
                async move { kv.txn(txn).await }
            })
            .await;
        result.map(|response| (response, ambiguous)).map_err(|e| etcd_error("writing to etcd", None, e))
    }
}

impl EtcdStore {
    /// An etcd watch of `prefix` from revision `from`, with the deleted values of deletions.
    async fn open_watch(&self, prefix: &[u8], from: Revision) -> Result<etcd_client::WatchStream> {
        let mut options = WatchOptions::new().with_start_revision(signed(from)).with_prev_key();
        options = if prefix.is_empty() { options.with_all_keys() } else { options.with_prefix() };
        self.inner
            .client
            .watch_client()
            .watch(prefix, Some(options))
            .await
            .map_err(|e| etcd_error("starting an etcd watch", Some(from), e))
    }

    /// The watch opened again from `from` after its member went away, tried for [`RESUME_WITHIN`]; `None` once the
    /// watcher has gone.
    async fn reopen_watch(
        &self,
        prefix: &[u8],
        from: Revision,
        tx: &crate::queue::QueueSender,
    ) -> Option<Result<etcd_client::WatchStream>> {
        let deadline = Instant::now() + RESUME_WITHIN;
        let mut pause = Duration::from_millis(20);
        loop {
            match self.open_watch(prefix, from).await {
                Err(error @ (Error::Unavailable { .. } | Error::Backend { .. })) if Instant::now() < deadline => {
                    tracing::debug!(%error, "an etcd watch lost its member; opening it again");
                }
                other => return Some(other),
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = tx.closed() => return None,
            }
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }
}

/// Whether a watch response says its member cannot go on (it lost its leader, and `hasleader` was asked).
fn lost_member(response: &etcd_client::WatchResponse) -> bool {
    response.canceled() && response.cancel_reason().contains("no leader")
}

/// Keeps the balancer to the members that answer: each is asked its status every [`PROBE_EVERY`] (or at once when a
/// request failed); one that fails leaves the balancer, unless it is the last, and comes back once it answers.
async fn probe(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else { return };
        let checks = strong.members.iter().map(|member| async {
            let mut probe = member.probe.clone();
            let answered = tokio::time::timeout(PROBE_EVERY, probe.status()).await;
            matches!(answered, Ok(Ok(_)))
        });
        let answers = futures_util::future::join_all(checks).await;
        for (member, answers) in strong.members.iter().zip(&answers) {
            let was = *member.in_rotation.lock().expect("the rotation lock");
            let others = strong.members.iter().filter(|m| *m.in_rotation.lock().expect("the rotation lock")).count();
            let change = match (was, *answers) {
                (true, false) if others > 1 => Some(false),
                (false, true) => Some(true),
                _ => None,
            };
            let Some(now) = change else { continue };
            let done = if now {
                strong.client.add_endpoint(&member.url).await
            } else {
                strong.client.remove_endpoint(&member.url).await
            };
            match done {
                Ok(()) => {
                    *member.in_rotation.lock().expect("the rotation lock") = now;
                    tracing::info!(member = %member.url, healthy = now, "etcd member {}", if now { "back" } else { "left" });
                }
                Err(error) => tracing::warn!(member = %member.url, %error, "changing the etcd balancer"),
            }
        }
        let _ = tokio::time::timeout(PROBE_EVERY, strong.wake.notified()).await;
    }
}

/// Whether a failed request may be sent again: a read whenever the member or the connection failed it; a write only
/// when it cannot have been applied — no connection was made, or the member refused it for want of a leader.
fn retriable(error: &etcd_client::Error, kind: Retry) -> bool {
    use tonic::Code;
    if unapplied_error(error) {
        return true;
    }
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            matches!(kind, Retry::Read | Retry::Cas)
                && matches!(status.code(), Code::Unavailable | Code::Unknown | Code::DeadlineExceeded | Code::Aborted)
                && refusal(status).is_none()
        }
        _ => false,
    }
}

/// Whether the failure proves the request was not applied.
fn unapplied_error(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(status) => unapplied(status.message()),
        _ => false,
    }
}

/// Failures that prove the request never reached etcd's log.
fn unapplied(message: &str) -> bool {
    [
        "etcdserver: no leader",
        "tcp connect error",
        "error trying to connect",
        "Connection refused",
        "no connection available",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// etcd's final refusals, whichever member gives them: the errors its own client (`api/v3rpc/rpctypes`) knows by
/// gRPC code and exact description. Matched exactly, so that no other message that happens to hold the words counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    Compacted,
    FutureRevision,
    TooLarge,
    NoSpace,
}

fn refusal(status: &tonic::Status) -> Option<Refusal> {
    use tonic::Code;
    match (status.code(), status.message()) {
        (Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted") => Some(Refusal::Compacted),
        (Code::OutOfRange, "etcdserver: mvcc: required revision is a future revision") => Some(Refusal::FutureRevision),
        (Code::InvalidArgument, "etcdserver: request is too large") => Some(Refusal::TooLarge),
        (Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded") => Some(Refusal::NoSpace),
        _ => None,
    }
}

/// Translates an etcd failure, recognising the refusals the store interface names.
fn etcd_error(context: &'static str, requested: Option<Revision>, error: etcd_client::Error) -> Error {
    if let etcd_client::Error::GRpcStatus(status) = &error {
        let message = status.message();
        let requested = requested.unwrap_or_default();
        match refusal(status) {
            Some(Refusal::Compacted) => return Error::Compacted { requested },
            Some(Refusal::FutureRevision) => return Error::FutureRevision { requested },
            Some(Refusal::TooLarge) => return Error::ValueTooLarge { size: 0, limit: crate::MAX_VALUE_SIZE },
            Some(Refusal::NoSpace) => return Error::NoSpace { detail: message.to_string() },
            None => {}
        }
        if unapplied(message) || status.code() == tonic::Code::Unavailable {
            return Error::Unavailable { context, detail: message.to_string() };
        }
    }
    if let etcd_client::Error::TransportError(transport) = &error {
        return Error::Unavailable { context, detail: transport.to_string() };
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
        let response = self
            .retrying(Retry::Read, |mut kv| async move { kv.get(key, None).await })
            .await
            .map_err(|e| etcd_error("reading from etcd", None, e))?;
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
            let response = match self
                .retrying(Retry::Read, |mut kv| {
                    let (start, get) = (start.clone(), get.clone());
                    async move { kv.get(start, Some(get)).await }
                })
                .await
            {
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
        let (response, ambiguous) = self.write(txn, Retry::Cas).await?;
        if !response.succeeded() {
            // An earlier attempt that was applied after all: the key holds this very value.
            return match read_back(response.op_responses()) {
                Some(current) if ambiguous && current.value == value => Ok(current),
                _ => Err(Error::AlreadyExists { key: key.to_vec() }),
            };
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
        let (response, ambiguous) = self.write(txn, Retry::Cas).await?;
        let succeeded = response.succeeded();
        let current = read_back(response.op_responses());
        match (succeeded, current) {
            (true, Some(current)) => Ok(current),
            // An earlier attempt that was applied after all.
            (false, Some(current)) if ambiguous && current.value == value && current.mod_revision > expected => {
                Ok(current)
            }
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
        // Not as a compare-and-swap: an attempt applied would leave nothing to recognise it by.
        let (response, _) = self.write(txn, Retry::Write).await?;
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
        let prefix = prefix.to_vec();
        let mut stream = self.open_watch(&prefix, from).await?;
        let (tx, rx) = queue(self.inner.config.watch_buffer);
        let patience = self.inner.config.watch_patience;
        let store = self.clone();
        tokio::spawn(async move {
            // The revision the next event must have at least: where a watch opened again starts.
            let mut next = from;
            loop {
                let response = tokio::select! {
                    response = stream.message() => response,
                    () = tx.closed() => return,
                };
                let response = match response {
                    Ok(Some(response)) if !lost_member(&response) => response,
                    // The member went away, or lost its leader: on another, from the next revision.
                    Ok(_) | Err(_) => {
                        store.inner.wake.notify_one();
                        match store.reopen_watch(&prefix, next, &tx).await {
                            Some(Ok(reopened)) => {
                                stream = reopened;
                                continue;
                            }
                            Some(Err(error)) => return tx.fail(error),
                            None => return,
                        }
                    }
                };
                if response.compact_revision() > 0 {
                    return tx.fail(Error::Compacted { requested: next });
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
                    next = Revision(event.revision.0 + 1);
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
            .retrying(Retry::Read, |mut kv| async move {
                kv.get(&b"\0"[..], Some(GetOptions::new().with_count_only())).await
            })
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
            .retrying(Retry::Read, |mut kv| {
                let options = options.clone().with_count_only();
                async move { kv.get(prefix, Some(options)).await }
            })
            .await
            .map_err(|e| etcd_error("counting in etcd", None, e))?;
        Ok(u64::try_from(response.count()).unwrap_or(0))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let options = CompactionOptions::new().with_physical();
        let compacted = self
            .retrying(Retry::Compact, |mut kv| {
                let options = options.clone();
                async move { kv.compact(signed(revision), Some(options)).await }
            })
            .await;
        match compacted {
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

    /// Whether etcd answers a read in good time with a leader: the API server's `etcd` readiness check.
    async fn check(&self) -> Result<()> {
        let mut kv = self.inner.client.kv_client();
        let read = kv.get(&b"/"[..], Some(GetOptions::new().with_count_only()));
        match tokio::time::timeout(Duration::from_secs(2), read).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(etcd_error("reading from etcd", None, e)),
            Err(_) => {
                return Err(Error::Unavailable { context: "reading from etcd", detail: "no answer within 2s".into() });
            }
        }
        // A member that answers reads may still refuse every write: its space quota's alarm.
        let mut maintenance = self.inner.client.maintenance_client();
        let alarms = maintenance.alarm(etcd_client::AlarmAction::Get, etcd_client::AlarmType::None, None);
        if let Ok(Ok(alarms)) = tokio::time::timeout(Duration::from_secs(2), alarms).await
            && alarms.alarms().iter().any(|a| a.alarm() == etcd_client::AlarmType::Nospace)
        {
            return Err(Error::NoSpace { detail: "etcdserver: mvcc: database space exceeded".into() });
        }
        Ok(())
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
