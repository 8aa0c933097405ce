//! The way out for pulls from registries the admin did not name (`--pull-from '*'`): a proxy inside the node, on a
//! loopback port and asking for a secret of its own, through which the HTTP client makes every connection of such a
//! pull. It resolves each name itself and connects only to addresses outside this machine
//! ([`internal_address`](super::internal_address)), so that neither a registry's redirect, nor its token service
//! (the `realm` of its `WWW-Authenticate` challenge), nor a name that resolves differently when asked again can lead
//! the node to a service of this machine. It only tunnels (HTTP `CONNECT`, for HTTPS): plain HTTP is for registries
//! the admin named, which do not go through it.
//!
//! A refusal is a `403` to the client, which the pull reports as a registry it cannot reach; the node's log says
//! what was refused.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The most a client's request head may be.
const MOST_HEAD: usize = 8 << 10;

/// How long a client has to send its request head, and the guard to connect to the registry.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Whether an address is this machine's, or one no tenant's registry may be at: the whole judgement
/// ([`internal_address`](super::internal_address) with the node's own addresses, in the node).
pub type Internal = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

/// A running guard; it stops when dropped.
pub struct Guard {
    address: SocketAddr,
    secret: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Guard {
    /// Starts a guard on a free loopback port, refusing every address `internal` says is internal.
    pub async fn start(internal: Internal) -> std::io::Result<Guard> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let address = listener.local_addr()?;
        let mut random = [0u8; 16];
        getrandom(&mut random)?;
        let secret = hex::encode(random);
        let expected = format!("Basic {}", nest_core::base64::encode(format!("nest:{secret}").as_bytes()));
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                let (internal, expected) = (internal.clone(), expected.clone());
                tokio::spawn(async move {
                    if let Err(refused) = serve(client, &expected, &internal).await {
                        tracing::warn!(%refused, "the pull guard refused a connection");
                    }
                });
            }
        });
        Ok(Guard { address, secret, task })
    }

    /// The proxy URL the client is given, with the guard's secret.
    pub fn url(&self) -> String {
        format!("http://nest:{}@{}", self.secret, self.address)
    }
}

/// Random bytes from the kernel.
fn getrandom(buffer: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read as _;
    std::fs::File::open("/dev/urandom")?.read_exact(buffer)
}

/// Why the guard refused a connection: for the node's log.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("reading the request: {0}")]
    Read(#[from] std::io::Error),
    #[error("a request that is no CONNECT: {0:?}")]
    NotConnect(String),
    #[error("a request without the guard's secret")]
    Unauthenticated,
    #[error("{0:?} is no host:port")]
    Target(String),
    #[error("{target} is this machine's ({address})")]
    Internal { target: String, address: String },
    #[error("resolving {target}: {error}")]
    Resolve { target: String, error: std::io::Error },
    #[error("connecting to {target}: {error}")]
    Connect { target: String, error: String },
}

/// One client connection: its `CONNECT host:port`, checked, then the tunnel.
async fn serve(mut client: TcpStream, expected: &str, internal: &Internal) -> Result<(), Refused> {
    let head = match tokio::time::timeout(TIMEOUT, read_head(&mut client)).await {
        Ok(head) => head?,
        Err(_) => return Err(Refused::Read(std::io::ErrorKind::TimedOut.into())),
    };
    let mut lines = head.split("\r\n");
    let request = lines.next().unwrap_or_default();
    let mut words = request.split(' ');
    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
        answer(&mut client, "403 Forbidden").await;
        return Err(Refused::NotConnect(request.chars().take(200).collect()));
    };
    let authorized = lines
        .filter_map(|line| line.split_once(':'))
        .any(|(name, value)| name.trim().eq_ignore_ascii_case("proxy-authorization") && value.trim() == expected);
    if !authorized {
        answer(&mut client, "407 Proxy Authentication Required").await;
        return Err(Refused::Unauthenticated);
    }
    let mut upstream = match connect(target, internal).await {
        Ok(upstream) => upstream,
        Err(refused) => {
            answer(&mut client, "403 Forbidden").await;
            return Err(refused);
        }
    };
    client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await?;
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    Ok(())
}

/// Answers the client with `status` and nothing else.
async fn answer(client: &mut TcpStream, status: &str) {
    let head = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let _ = client.write_all(head.as_bytes()).await;
}

/// The request head, up to its blank line (nothing follows it before the guard answers a `CONNECT`).
async fn read_head(client: &mut TcpStream) -> Result<String, Refused> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MOST_HEAD || client.read(&mut byte).await? == 0 {
            return Err(Refused::Read(std::io::ErrorKind::InvalidData.into()));
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// A connection to `target` (`host:port`), unless it or any address its name resolves to is internal.
async fn connect(target: &str, internal: &Internal) -> Result<TcpStream, Refused> {
    let registry = super::Registry::parse(target).ok_or_else(|| Refused::Target(target.to_string()))?;
    let port = registry.port.ok_or_else(|| Refused::Target(target.to_string()))?;
    let addresses: Vec<SocketAddr> = match &registry.host {
        url::Host::Domain(name) if super::is_localhost(name) => {
            return Err(Refused::Internal { target: target.to_string(), address: name.clone() });
        }
        url::Host::Domain(name) => tokio::net::lookup_host((name.as_str(), port))
            .await
            .map_err(|error| Refused::Resolve { target: target.to_string(), error })?
            .collect(),
        url::Host::Ipv4(ip) => vec![SocketAddr::new(IpAddr::V4(*ip), port)],
        url::Host::Ipv6(ip) => vec![SocketAddr::new(IpAddr::V6(*ip), port)],
    };
    // A name with any internal address is refused whole, as the node's check before the pull refuses it.
    if let Some(found) = addresses.iter().find(|a| internal(a.ip())) {
        return Err(Refused::Internal { target: target.to_string(), address: found.ip().to_string() });
    }
    let mut last = String::from("no address");
    for address in addresses {
        match tokio::time::timeout(TIMEOUT, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(error)) => last = error.to_string(),
            Err(_) => last = "timed out".into(),
        }
    }
    Err(Refused::Connect { target: target.to_string(), error: last })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `request` to the guard; its answer's status line.
    async fn ask(guard: &Guard, request: &str) -> String {
        let mut stream = TcpStream::connect(guard.address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = vec![0u8; 256];
        let read = stream.read(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer[..read]).lines().next().unwrap_or_default().to_string()
    }

    #[tokio::test]
    async fn the_guard_tunnels_only_outside_this_machine_and_only_for_the_node() {
        // A registry "outside": 127.0.0.1 stands for it, as `internal` here says every other address is this
        // machine's.
        let outside = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = outside.local_addr().unwrap().port();
        let internal: Internal = Arc::new(|ip: IpAddr| ip != IpAddr::from([127, 0, 0, 1]));
        let guard = Guard::start(internal).await.unwrap();
        let secret = nest_core::base64::encode(format!("nest:{}", guard.secret).as_bytes());
        let connect = |target: &str, auth: &str| {
            format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {auth}\r\n\r\n")
        };
        assert_eq!(
            ask(&guard, &connect(&format!("127.0.0.1:{port}"), &secret)).await,
            "HTTP/1.1 200 Connection established"
        );
        // This machine's addresses, in any form, and its names; and what is no host and port.
        for refused in ["127.0.0.2", "0x7f.0.0.2", "[::1]", "localhost", "registry.localhost", "[::ffff:127.0.0.2]"] {
            let status = ask(&guard, &connect(&format!("{refused}:{port}"), &secret)).await;
            assert_eq!(status, "HTTP/1.1 403 Forbidden", "{refused}");
        }
        assert_eq!(ask(&guard, &connect("127.0.0.1", &secret)).await, "HTTP/1.1 403 Forbidden", "no port");
        // Without the guard's secret, nothing: not every process of this machine may use it to reach outside.
        assert_eq!(
            ask(&guard, &connect(&format!("127.0.0.1:{port}"), "bm9ib2R5Omd1ZXNz")).await,
            "HTTP/1.1 407 Proxy Authentication Required"
        );
        let plain = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nProxy-Authorization: Basic {secret}\r\n\r\n");
        assert_eq!(ask(&guard, &plain).await, "HTTP/1.1 403 Forbidden");
    }
}
