//! Kubernetes' channel protocol over WebSocket (`k8s.io/apimachinery/pkg/util/httpstream/wsstream`, 1.33): every
//! WebSocket message carries one channel's bytes, the channel number first — a byte in the binary protocols, an ASCII
//! digit followed by base64 in the `base64.` ones. Which channels mean what is the caller's (exec: stdin 0, stdout
//! 1, stderr 2, error 3, resize 4). `v5.channel.k8s.io` adds one signal (KEP-4006): a message on channel 255 whose
//! one byte names a channel the peer will write no more to (stdin's end of file).

use base64::Engine as _;
use bytes::Bytes;
use tokio_tungstenite::tungstenite::Message;

/// The channel protocols a kubelet speaks for exec and attach, most preferred first (the kubelet's
/// `remotecommand.SupportedStreamingProtocols` over WebSocket, plus v5 and the base64 forms).
pub const REMOTE_COMMAND: &[&str] = &[
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "v3.channel.k8s.io",
    "v3.base64.channel.k8s.io",
    "v2.channel.k8s.io",
    "v2.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
];

/// The channel protocols the kubelet speaks for port-forward over plain WebSocket (the Python client's): a data and
/// an error channel per port.
pub const PORT_FORWARD: &[&str] = &["v4.channel.k8s.io", "channel.k8s.io", "base64.channel.k8s.io"];

/// The channel number of v5's close signal.
pub const CLOSE_CHANNEL: u8 = 255;

/// A negotiated channel protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protocol {
    /// Its name, as the `Sec-WebSocket-Protocol` header carries it (empty when the client named none).
    pub name: &'static str,
    /// 1 for `channel.k8s.io` and `base64.channel.k8s.io`, else the `vN.` prefix's N.
    pub version: u8,
    /// Whether messages are text (an ASCII digit, then base64) rather than binary.
    pub base64: bool,
}

impl Protocol {
    /// The first of `supported` that the client offered in its `Sec-WebSocket-Protocol` headers (`offered`, each a
    /// comma-separated list), or the binary v1 protocol when it offered none (as upstream serves `""`). `None` when
    /// it offered some and none is supported.
    pub fn negotiate<'a>(offered: impl IntoIterator<Item = &'a str>, supported: &[&'static str]) -> Option<Protocol> {
        let offered: Vec<&str> =
            offered.into_iter().flat_map(|h| h.split(',')).map(str::trim).filter(|p| !p.is_empty()).collect();
        if offered.is_empty() {
            return Some(Protocol { name: "", version: 1, base64: false });
        }
        // The client's order decides among those both speak (upstream: the first requested that is allowed).
        let name = offered.iter().find_map(|p| supported.iter().find(|s| *s == p))?;
        Some(Protocol::named(name))
    }

    fn named(name: &'static str) -> Protocol {
        let base64 = name.contains("base64.");
        let version =
            name.strip_prefix('v').and_then(|rest| rest.split('.').next()).and_then(|n| n.parse().ok()).unwrap_or(1);
        Protocol { name, version, base64 }
    }

    /// Whether the error channel carries a `Status` object (v4 and later) rather than plain text.
    pub fn status_errors(&self) -> bool {
        self.version >= 4
    }

    /// The message carrying `data` on `channel`.
    pub fn encode(&self, channel: u8, data: &[u8]) -> Message {
        if self.base64 {
            let mut text = String::with_capacity(1 + data.len().div_ceil(3) * 4);
            text.push(char::from(b'0'.wrapping_add(channel)));
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
            Message::text(text)
        } else {
            let mut frame = Vec::with_capacity(1 + data.len());
            frame.push(channel);
            frame.extend_from_slice(data);
            Message::binary(frame)
        }
    }

    /// What a message from the client says: bytes on a channel, a channel closed (v5), or nothing (an empty message,
    /// a ping or pong, which the WebSocket layer answers itself). A message this protocol cannot carry is an error,
    /// which ends the stream.
    pub fn decode(&self, message: Message) -> Result<Option<Frame>, FrameError> {
        let raw: Bytes = match message {
            Message::Binary(data) if !self.base64 => data,
            Message::Text(text) if self.base64 => Bytes::from(text),
            // A peer that sends the other kind is lenient upstream (golang.org/x/net/websocket takes either); so
            // is this: the payload is read by the protocol's codec.
            Message::Binary(data) => data,
            Message::Text(text) => Bytes::from(text),
            Message::Close(_) => return Err(FrameError::Closed),
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => return Ok(None),
        };
        let Some(&first) = raw.first() else { return Ok(None) };
        let channel = if self.base64 { first.checked_sub(b'0').ok_or(FrameError::BadChannel(first))? } else { first };
        let payload = raw.slice(1..);
        let data = if self.base64 {
            let decoded = base64::engine::general_purpose::STANDARD.decode(&payload).map_err(|_| FrameError::Base64)?;
            Bytes::from(decoded)
        } else {
            payload
        };
        if channel == CLOSE_CHANNEL && self.version >= 5 {
            // The signal's payload is exactly the channel being closed.
            return match data.as_ref() {
                [closed] => Ok(Some(Frame::Close(*closed))),
                _ => Err(FrameError::BadClose(data.len())),
            };
        }
        Ok(Some(Frame::Data { channel, data }))
    }
}

/// What one message from the client carries.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// Bytes for a channel.
    Data {
        /// The channel.
        channel: u8,
        /// Its bytes (possibly none).
        data: Bytes,
    },
    /// The client will write no more to this channel (v5).
    Close(u8),
}

/// A message the protocol cannot carry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// The client closed the WebSocket.
    #[error("the client closed the connection")]
    Closed,
    /// A base64 message whose first byte is no channel digit.
    #[error("message for channel byte {0}, which is no channel")]
    BadChannel(u8),
    /// A base64 message whose payload is not base64.
    #[error("a message that is not base64")]
    Base64,
    /// A close signal that does not name exactly one channel.
    #[error("a close signal of {0} bytes, where one names the channel")]
    BadClose(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_first_supported_protocol_is_chosen() {
        let chosen = Protocol::negotiate(["v5.channel.k8s.io, v4.channel.k8s.io"], REMOTE_COMMAND).unwrap();
        assert_eq!(chosen, Protocol { name: "v5.channel.k8s.io", version: 5, base64: false });
        let chosen = Protocol::negotiate(["x.example", "v4.base64.channel.k8s.io"], REMOTE_COMMAND).unwrap();
        assert_eq!(chosen, Protocol { name: "v4.base64.channel.k8s.io", version: 4, base64: true });
        assert_eq!(Protocol::negotiate(["channel.k8s.io"], REMOTE_COMMAND).unwrap().version, 1);
        assert_eq!(Protocol::negotiate([], REMOTE_COMMAND).unwrap().name, "");
        assert!(Protocol::negotiate(["v9.channel.k8s.io"], REMOTE_COMMAND).is_none());
        assert!(Protocol::negotiate(["v5.channel.k8s.io"], PORT_FORWARD).is_none());
    }

    #[test]
    fn binary_messages_carry_the_channel_first() {
        let v5 = Protocol::named("v5.channel.k8s.io");
        assert_eq!(v5.encode(1, b"hi"), Message::binary(vec![1, b'h', b'i']));
        let frame = v5.decode(Message::binary(vec![0, b'x'])).unwrap();
        assert_eq!(frame, Some(Frame::Data { channel: 0, data: Bytes::from_static(b"x") }));
        assert_eq!(v5.decode(Message::binary(vec![255, 0])).unwrap(), Some(Frame::Close(0)));
        assert_eq!(v5.decode(Message::binary(vec![255])), Err(FrameError::BadClose(0)));
        assert_eq!(v5.decode(Message::binary(vec![255, 0, 1])), Err(FrameError::BadClose(2)));
        assert_eq!(v5.decode(Message::binary(Vec::new())).unwrap(), None);
        // Before v5, channel 255 is only a channel no one reads.
        let v4 = Protocol::named("v4.channel.k8s.io");
        assert_eq!(
            v4.decode(Message::binary(vec![255, 0])).unwrap(),
            Some(Frame::Data { channel: 255, data: Bytes::from_static(&[0]) })
        );
        assert_eq!(v4.decode(Message::Close(None)), Err(FrameError::Closed));
    }

    #[test]
    fn base64_messages_carry_a_digit_then_base64() {
        let b64 = Protocol::named("v4.base64.channel.k8s.io");
        assert_eq!(b64.encode(2, b"hi"), Message::text("2aGk="));
        let frame = b64.decode(Message::text("0aGk=")).unwrap();
        assert_eq!(frame, Some(Frame::Data { channel: 0, data: Bytes::from_static(b"hi") }));
        assert_eq!(b64.decode(Message::text("0!!")), Err(FrameError::Base64));
        assert_eq!(b64.decode(Message::text(" aGk=")), Err(FrameError::BadChannel(b' ')));
    }
}
