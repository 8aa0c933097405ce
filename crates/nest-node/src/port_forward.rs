//! The kubelet API's `/portForward/<namespace>/<pod>[/<uid>]`: a pod's ports, forwarded in the three transports
//! [`nest_streams::portforward`] speaks — SPDY/3.1 (a POST upgrade), SPDY tunnelled in a WebSocket
//! (`SPDY/3.1+portforward.k8s.io`, terminated here, so that whatever splices bytes between client and node needs
//! to know nothing of it), and the channel protocol over WebSocket with the ports in the query (`port=80&port=8080`,
//! as kube-apiserver's `PortForwardLocation` writes them).
//!
//! Every connection goes to localhost inside the pod's network namespace and nowhere else: a thread of its own
//! enters the namespace (`setns`), makes the socket and ends, so no address of the node — its own loopback
//! services included — is ever reachable through it, whatever port a client names.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::{Request, Response, StatusCode};
use nest_kubelet_server::Body;
use nest_streams::handshake::{self, Refusal};
use nest_streams::portforward::{self, Forwarder, SPDY_PROTOCOL, TUNNEL_PROTOCOL, WEBSOCKET_PROTOCOLS};

use crate::Context;
use crate::streaming::status;

/// How long a connection to a pod's port may take to be made.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The transport a request asked for.
enum Transport {
    /// SPDY/3.1 on the upgraded connection.
    Spdy,
    /// A WebSocket: SPDY tunnelled in it, or the channel protocol for these ports.
    WebSocket { accept: String, protocol: nest_streams::channel::Protocol, ports: Vec<u16> },
}

/// The ports of the query (`port`, repeated; upstream's messages for what is no port).
fn query_ports(query: &str) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        if key == "port" {
            for text in value.split(',') {
                if ports.len() >= portforward::MAX_PORTS {
                    return Err(format!("at most {} ports may be forwarded at once", portforward::MAX_PORTS));
                }
                ports.push(portforward::parse_port(text.trim())?);
            }
        }
    }
    Ok(ports)
}

/// Which transport `request` asks for, or why it cannot be served (a 400, or the 403 of a failed negotiation).
fn transport(request: &Request<hyper::body::Incoming>) -> Result<Transport, (StatusCode, String)> {
    let bad = |message: String| (StatusCode::BAD_REQUEST, message);
    let ports = query_ports(request.uri().query().unwrap_or("")).map_err(bad)?;
    let headers = request.headers();
    if handshake::is_spdy(headers) {
        handshake::spdy_protocol(headers, &[SPDY_PROTOCOL]).map_err(|m| (StatusCode::FORBIDDEN, m))?;
        return Ok(Transport::Spdy);
    }
    match handshake::accept(headers, WEBSOCKET_PROTOCOLS) {
        Ok(accepted) => {
            if accepted.protocol.name != TUNNEL_PROTOCOL && ports.is_empty() {
                return Err(bad("query parameter \"port\" is required".into()));
            }
            Ok(Transport::WebSocket { accept: accepted.accept, protocol: accepted.protocol, ports })
        }
        Err(Refusal::NotWebSocket) => Err(bad("Upgrade request required".into())),
        Err(refusal) => Err(bad(refusal.to_string())),
    }
}

/// Answers `/portForward/<namespace>/<pod>[/<uid>]`: the `101` that starts forwarding, or why not.
pub(crate) async fn port_forward(
    context: &Context,
    mut request: Request<hyper::body::Incoming>,
    path: &[&str],
) -> Response<Body> {
    let (namespace, pod) = match path {
        [namespace, pod] | [namespace, pod, _] => (*namespace, *pod),
        _ => return status(StatusCode::BAD_REQUEST, "BadRequest", "expected /portForward/<namespace>/<pod>"),
    };
    let transport = match transport(&request) {
        Ok(transport) => transport,
        Err((code, message)) => {
            let reason = if code == StatusCode::FORBIDDEN { "Forbidden" } else { "BadRequest" };
            return status(code, reason, message);
        }
    };
    let run = context.runtime.as_ref().and_then(|runtime| runtime.find(namespace, pod));
    let Some(run) = run else {
        return status(StatusCode::NOT_FOUND, "NotFound", format!("pod {namespace}/{pod} does not run on this node"));
    };
    let Some(netns) = run.netns() else {
        // No network namespace of its own: forwarding would reach the node's, which is never the pod's to offer.
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("pod {namespace}/{pod} has no running container with a network namespace of its own"),
        );
    };
    let pending = match nest_kubelet_server::upgrade::take(&mut request) {
        Ok(pending) => pending,
        Err(error) => return status(StatusCode::BAD_REQUEST, "BadRequest", error.to_string()),
    };
    let forwarder = Forwarder { pod: format!("{pod}, uid {}", run.uid()), dial: dial_in(netns) };
    let mut response = Response::new(http_body_util::Empty::<Bytes>::new().boxed_unsync());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert("connection", "Upgrade".parse().expect("a header value"));
    match &transport {
        Transport::Spdy => {
            headers.insert("upgrade", "SPDY/3.1".parse().expect("a header value"));
            headers.insert("x-stream-protocol-version", SPDY_PROTOCOL.parse().expect("a header value"));
        }
        Transport::WebSocket { accept, protocol, .. } => {
            headers.insert("upgrade", "websocket".parse().expect("a header value"));
            if let Ok(accept) = accept.parse() {
                headers.insert("sec-websocket-accept", accept);
            }
            if !protocol.name.is_empty() {
                headers.insert("sec-websocket-protocol", protocol.name.parse().expect("a protocol is a header value"));
            }
        }
    }
    tokio::spawn(async move {
        let Ok(stream) = pending.stream().await else { return };
        let idle = stream.idle();
        let session: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = match transport {
            Transport::Spdy => Box::pin(portforward::serve_spdy(stream, forwarder)),
            Transport::WebSocket { protocol, ports, .. } => {
                let ws = handshake::websocket(stream).await;
                if protocol.name == TUNNEL_PROTOCOL {
                    Box::pin(portforward::serve_spdy(nest_streams::tunnel::Tunnel::new(ws), forwarder))
                } else {
                    Box::pin(portforward::serve_channels(ws, protocol, ports, forwarder))
                }
            }
        };
        tokio::select! {
            () = session => {}
            () = idle.elapsed() => tracing::debug!("a port-forward idled out"),
        }
    });
    response
}

/// Connects to a port on localhost inside the network namespace at `netns`.
fn dial_in(netns: PathBuf) -> portforward::Dial {
    Arc::new(move |port| {
        let netns = netns.clone();
        Box::pin(async move {
            let made = tokio::task::spawn_blocking(move || connect_inside(&netns, port))
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))??;
            made.set_nonblocking(true)?;
            tokio::net::TcpStream::from_std(made)
        })
    })
}

/// Makes the connection from a thread that enters the namespace and ends with it: the blocking pool's threads,
/// which run everything else, never leave the node's own network. Tries IPv4's loopback, then IPv6's, as
/// `localhost` resolves.
pub fn connect_inside(netns: &std::path::Path, port: u16) -> std::io::Result<std::net::TcpStream> {
    let namespace = std::fs::File::open(netns)?;
    let thread = std::thread::Builder::new().name("port-forward".into()).spawn(move || {
        // SAFETY: setns(2) changes only this thread's network namespace; the thread ends after the connect.
        if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        std::net::TcpStream::connect_timeout(&v4, DIAL_TIMEOUT).or_else(|first| {
            let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
            std::net::TcpStream::connect_timeout(&v6, DIAL_TIMEOUT).map_err(|_| first)
        })
    })?;
    thread.join().map_err(|_| std::io::Error::other("the port-forward thread panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_ports_are_bounded_as_the_kubelet_bounds_them() {
        assert_eq!(query_ports("port=80&port=8080"), Ok(vec![80, 8080]));
        assert_eq!(query_ports("port=80,443"), Ok(vec![80, 443]));
        assert_eq!(query_ports(""), Ok(vec![]));
        assert_eq!(query_ports("port=0").unwrap_err(), "port \"0\" must be > 0");
        assert!(query_ports("port=70000").unwrap_err().starts_with("unable to parse \"70000\" as a port"));
        assert!(query_ports("port=http").unwrap_err().starts_with("unable to parse \"http\" as a port"));
        assert!(query_ports(&"port=1&".repeat(portforward::MAX_PORTS + 1)).is_err());
    }
}
