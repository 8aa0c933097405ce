//! The server's half of a WebSocket handshake (RFC 6455 §4.2) for a channel protocol: which protocol to speak, and
//! the `101 Switching Protocols` headers that say so. The caller answers with them, takes the upgraded connection
//! (hyper's `upgrade::on`) and hands it to [`websocket`].

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::http::HeaderMap;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::channel::Protocol;

/// The largest message a client may send (a frame or a message of fragments): stdin arrives in chunks of 32 KiB or
/// less from every client seen (client-go, the Python client), a resize is a few bytes. A larger one ends the stream.
pub const MAX_MESSAGE: usize = 1 << 20;

/// What the `101` answer carries.
#[derive(Debug, PartialEq, Eq)]
pub struct Accepted {
    /// `Sec-WebSocket-Accept`.
    pub accept: String,
    /// The protocol chosen; its name goes in `Sec-WebSocket-Protocol` unless empty.
    pub protocol: Protocol,
}

/// Why a request cannot become a channel-protocol WebSocket.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    /// Not a WebSocket upgrade at all (no `Upgrade: websocket`, no key, another version).
    #[error("not a WebSocket upgrade request")]
    NotWebSocket,
    /// The client offered only protocols this server does not speak (upstream's message).
    #[error("requested protocol(s) are not supported: [{offered}]; supports [{supported}]")]
    Protocols {
        /// What the client offered.
        offered: String,
        /// What this server speaks.
        supported: String,
    },
}

/// Whether `headers` ask for a WebSocket upgrade (`Connection: upgrade` and `Upgrade: websocket`).
pub fn is_websocket(headers: &HeaderMap) -> bool {
    has_token(headers, "connection", "upgrade") && has_token(headers, "upgrade", "websocket")
}

/// Whether `headers` ask for a SPDY/3.1 upgrade (`Connection: upgrade` and `Upgrade: SPDY/3.1`).
pub fn is_spdy(headers: &HeaderMap) -> bool {
    has_token(headers, "connection", "upgrade") && has_token(headers, "upgrade", "SPDY/3.1")
}

/// The stream protocol of a SPDY upgrade: the first of the client's `X-Stream-Protocol-Version` values that is
/// among `supported` (`k8s.io/apimachinery/pkg/util/httpstream.Handshake`), or empty when the client named none. The
/// refusal is upstream's message, answered with 403.
pub fn spdy_protocol(headers: &HeaderMap, supported: &[&'static str]) -> Result<&'static str, String> {
    let offered: Vec<&str> = headers
        .get_all("x-stream-protocol-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if offered.is_empty() {
        return Ok("");
    }
    offered.iter().find_map(|p| supported.iter().find(|s| *s == p).copied()).ok_or_else(|| {
        format!("unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports {supported:?}")
    })
}

fn has_token(headers: &HeaderMap, name: &str, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|part| part.trim().eq_ignore_ascii_case(token)))
}

/// Checks a WebSocket upgrade request and chooses among `supported` the protocol to speak.
pub fn accept(headers: &HeaderMap, supported: &[&'static str]) -> Result<Accepted, Refusal> {
    let version_13 = headers.get("sec-websocket-version").is_some_and(|v| v.as_bytes() == b"13");
    let key = headers.get("sec-websocket-key").filter(|k| !k.is_empty());
    let (true, Some(key)) = (is_websocket(headers) && version_13, key) else {
        return Err(Refusal::NotWebSocket);
    };
    let offered: Vec<&str> = headers.get_all("sec-websocket-protocol").iter().filter_map(|v| v.to_str().ok()).collect();
    let protocol = Protocol::negotiate(offered.iter().copied(), supported)
        .ok_or_else(|| Refusal::Protocols { offered: offered.join(" "), supported: supported.join(" ") })?;
    Ok(Accepted { accept: derive_accept_key(key.as_bytes()), protocol })
}

/// The WebSocket over an upgraded connection, as its server, held to [`MAX_MESSAGE`].
pub async fn websocket<S: AsyncRead + AsyncWrite + Unpin>(io: S) -> WebSocketStream<S> {
    let config = WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE)).max_frame_size(Some(MAX_MESSAGE));
    WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::REMOTE_COMMAND;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn an_upgrade_is_accepted_with_rfc_6455s_key_and_the_chosen_protocol() {
        let request = headers(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-version", "13"),
            // RFC 6455's own example.
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-protocol", "v5.channel.k8s.io"),
            ("sec-websocket-protocol", "v4.channel.k8s.io"),
        ]);
        let accepted = accept(&request, REMOTE_COMMAND).unwrap();
        assert_eq!(accepted.accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(accepted.protocol.name, "v5.channel.k8s.io");
    }

    #[test]
    fn what_is_no_websocket_or_speaks_nothing_known_is_refused() {
        let plain = headers(&[("connection", "keep-alive")]);
        assert_eq!(accept(&plain, REMOTE_COMMAND), Err(Refusal::NotWebSocket));
        let spdy = headers(&[("connection", "Upgrade"), ("upgrade", "SPDY/3.1")]);
        assert_eq!(accept(&spdy, REMOTE_COMMAND), Err(Refusal::NotWebSocket));
        let unknown = headers(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-protocol", "v9.channel.k8s.io"),
        ]);
        let refusal = accept(&unknown, REMOTE_COMMAND).unwrap_err();
        assert!(refusal.to_string().starts_with("requested protocol(s) are not supported: [v9.channel.k8s.io]"));
    }
}
