//! The in-process tier's server: `nest_apiserver::serve` on `127.0.0.1:0`, in a runtime of its own inside the test
//! process, over the embedded store or an etcd. What `nest apiserver` does around `serve` (flags, signals) is the
//! end-to-end tier's; everything a request meets is the same code.

use std::sync::{Arc, Once};
use std::time::Duration;

use nest_storage::Store;
use nest_testkit::{Kubectl, Storage};

/// The name of the threads the server runs on, by which the panic hook tells a panic of the server from a test's
/// failed assertion.
const THREADS: &str = "in-process apiserver";

/// A running in-process API server and the kubectl its tests drive it with. Dropping it stops the server.
pub struct Server {
    client: Kubectl,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _data: tempfile::TempDir,
}

/// A server's admin is the kubectl the tests drive it with (`server.ok(…)`, `server.kubeconfig`).
impl std::ops::Deref for Server {
    type Target = Kubectl;
    fn deref(&self) -> &Kubectl {
        &self.client
    }
}

impl Server {
    pub fn start(storage: &Storage) -> Server {
        Server::start_with_plugins(storage, &[])
    }

    /// A server alone has no controller-manager to make each namespace's `default` ServiceAccount, so, as envtest
    /// runs kube-apiserver, its ServiceAccount admission is off unless `enable` names it.
    pub fn start_with_plugins(storage: &Storage, enable: &[&str]) -> Server {
        keep_panics_of_the_server();
        let data = tempfile::tempdir().expect("a temporary directory");
        let enable: Vec<String> = enable.iter().map(|p| p.to_string()).collect();
        let disable = if enable.iter().any(|p| p == "ServiceAccount") { vec![] } else { vec!["ServiceAccount".into()] };
        let config = nest_apiserver::Config {
            data_dir: data.path().to_path_buf(),
            listen: "127.0.0.1:0".parse().expect("an address"),
            token_file: None,
            extra_sans: Vec::new(),
            service_cidr: "10.96.0.0/12".parse().expect("a range"),
            ca_files: None,
            kubernetes_version: None,
            pod_security: Default::default(),
            admission_plugins: nest_registry::admission::Plugins::new(&enable, &disable).expect("known plugins"),
            limits: Default::default(),
            watch_cache: Default::default(),
            authorization: "Node,RBAC".parse().expect("a mode"),
            service_accounts: Default::default(),
            audit_log: None,
            audit_policy: None,
        };
        let backend = match storage {
            Storage::Embedded => None,
            Storage::Etcd(url) => Some(url.clone()),
        };
        let store_dir = data.path().join("store");
        let (ready, started) = std::sync::mpsc::channel::<Result<(), String>>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(THREADS.into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name(THREADS)
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async move {
                    let store = match open(backend, &store_dir).await {
                        Ok(store) => store,
                        Err(error) => return drop(ready.send(Err(format!("{error:#}")))),
                    };
                    let up = ready.clone();
                    let served = nest_apiserver::serve(config, store, move |_| drop(up.send(Ok(()))), async move {
                        drop(stopped.await)
                    })
                    .await;
                    if let Err(error) = served {
                        let _ = ready.send(Err(format!("{error:#}")));
                    }
                });
            })
            .expect("a thread");
        match started.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("the in-process API server did not start: {error}"),
            Err(_) => panic!("the in-process API server did not become ready"),
        }
        Server { client: Kubectl::for_server(data.path()), stop: Some(stop), thread: Some(thread), _data: data }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The embedded store in `dir`, or the etcd at `etcd` under a key prefix of this server's own.
async fn open(etcd: Option<String>, dir: &std::path::Path) -> anyhow::Result<Arc<dyn Store>> {
    let Some(url) = etcd else {
        return Ok(Arc::new(nest_storage::embedded::EmbeddedStore::open(dir, Default::default())?));
    };
    open_etcd(url).await
}

#[cfg(feature = "etcd")]
async fn open_etcd(url: String) -> anyhow::Result<Arc<dyn Store>> {
    let store = nest_storage::etcd::EtcdStore::connect(&[url], Default::default()).await?;
    let prefix = format!("/test-{}-{}", std::process::id(), fastrand::u64(..));
    Ok(Arc::new(nest_storage::prefixed::Prefixed::new(Arc::new(store), prefix.into_bytes())))
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(_: String) -> anyhow::Result<Arc<dyn Store>> {
    anyhow::bail!("the etcd backend needs nest-apiserver's `etcd` feature")
}

/// A panic on the server's threads fails `scripts/check` (through `$NEST_TEST_LOGS`, as a panic in a `nest` process
/// of the end-to-end tier does), whatever the test asserted; a test's own failed assertion is left to the test.
fn keep_panics_of_the_server() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(THREADS) {
                nest_testkit::keep_if_panic("the in-process API server", &format!("panicked: {info}"));
            }
            previous(info);
        }));
    });
}
