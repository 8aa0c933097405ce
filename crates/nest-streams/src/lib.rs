//! The streaming protocols of the kubelet API — what `kubectl exec`, `attach` and `port-forward` speak to a node —
//! written once, for the node that serves them (the API server only splices bytes between client and node, as
//! kube-apiserver's `UpgradeAwareHandler` does). Start with [`handshake::accept`] (WebSocket) or
//! [`handshake::is_spdy`] (SPDY/3.1), then [`remotecommand::serve`], [`spdy::remotecommand::serve`] or
//! [`portforward`].
//!
//! - [`channel`]: Kubernetes' channel protocol over WebSocket (`channel.k8s.io` … `v5.channel.k8s.io`, and the
//!   `base64.` forms): a channel number per message, v5's close signal;
//! - [`handshake`]: the server's half of the WebSocket handshake, choosing the channel protocol, and SPDY's
//!   protocol negotiation;
//! - [`remotecommand`]: exec and attach sessions: stdin, stdout, stderr, resize, and the error channel's `Status`;
//! - [`spdy`]: SPDY/3.1 frames and header blocks, a server's [`spdy::session`] of streams, and exec over it;
//! - [`portforward`]: port-forward over SPDY, over SPDY tunnelled in a WebSocket ([`tunnel`]), and over channels;
//! - [`idle`]: a connection's idleness, which the API server's port and the kubelet API's both close on.
//!
//! Everything read from a client is bounded (a message by [`handshake::MAX_MESSAGE`], a SPDY frame by
//! [`spdy::MAX_FRAME`], streams and queues by count or bytes): a hostile peer's garbage ends its own connection with
//! an error, never a panic or an unbounded buffer.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod channel;
pub mod handshake;
pub mod idle;
pub mod portforward;
pub mod remotecommand;
pub mod spdy;
pub mod tunnel;
