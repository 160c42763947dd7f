//! What the server knows of a request beside its head: the connection's peer and scheme, and
//! what the rate limiter in front of the gateway settled (the client address, the lone rule's
//! mark).
//!
//! The engine's own connection loop hands the site lane a [`Visitor`] as a plain value next to
//! the request, rather than as request extensions: each extension is a box, and the first one
//! also boxes the extensions' map and allocates its table (five allocations a proxied request,
//! six over TLS, docs/benchmarks.md). Requests that come through the router (hyper, the
//! reserved routes, `WaitingRoomLayer`) carry these in their extensions as before:
//! [`Visitor::of`] reads them from there. The few steps that read the extensions themselves
//! (a route's own rate limits, the join gate, a WebSocket upgrade) get them put there first
//! ([`Visitor::mark`]).

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::Extensions;

use anteroom_api::ratelimit::Settled;

use crate::client_scheme::ClientScheme;

/// A request's connection and what was settled about it before the gateway.
#[derive(Debug, Clone)]
pub(crate) struct Visitor {
    /// The peer's address; `None` when the server did not say (tests without connect info).
    peer: Option<SocketAddr>,
    /// Plain HTTP or TLS.
    scheme: ClientScheme,
    /// What the rate limiter in front of the gateway settled, when it is carried here.
    settled: Option<Settled>,
    /// Whether all of the above is in the request's extensions already (a request through
    /// the router): then [`mark`](Self::mark) has nothing to add.
    in_extensions: bool,
}

impl Visitor {
    /// A request of the engine's own connection loop from `peer`, over `scheme`; nothing of
    /// it is in the request's extensions.
    pub(crate) fn new(peer: SocketAddr, scheme: ClientScheme) -> Visitor {
        Visitor {
            peer: Some(peer),
            scheme,
            settled: None,
            in_extensions: false,
        }
    }

    /// The visitor of a request that carries its connection in `extensions`
    /// (`ConnectInfo`, else `MockConnectInfo`, as the rate limiter reads them).
    pub(crate) fn of(extensions: &Extensions) -> Visitor {
        let peer = extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(address)| *address)
            .or_else(|| {
                extensions
                    .get::<MockConnectInfo<SocketAddr>>()
                    .map(|MockConnectInfo(address)| *address)
            });
        Visitor {
            peer,
            scheme: ClientScheme::of(extensions),
            settled: None,
            in_extensions: true,
        }
    }

    /// The peer's IP address.
    pub(crate) fn peer_ip(&self) -> Option<IpAddr> {
        self.peer.map(|peer| peer.ip())
    }

    pub(crate) fn scheme(&self) -> ClientScheme {
        self.scheme
    }

    /// The client address the rate limiter settled on, when it is carried here (otherwise
    /// it is in the extensions as `ClientIp`, or was never settled).
    pub(crate) fn settled_client_ip(&self) -> Option<IpAddr> {
        self.settled.as_ref().map(|settled| settled.client_ip)
    }

    /// Keeps what the rate limiter settled.
    pub(crate) fn settle(&mut self, settled: Settled) {
        self.settled = Some(settled);
    }

    /// `extensions` with the visitor in them ([`mark`](Self::mark)): copied only when it is
    /// carried here.
    pub(crate) fn marked<'e>(&self, extensions: &'e Extensions) -> Cow<'e, Extensions> {
        if self.in_extensions {
            return Cow::Borrowed(extensions);
        }
        let mut marked = extensions.clone();
        self.mark(&mut marked);
        Cow::Owned(marked)
    }

    /// Puts the visitor into `extensions` as the router's requests carry it: the peer as
    /// `ConnectInfo`, the scheme over TLS, and what the rate limiter settled (its
    /// `ClientIp` and mark), for the steps that read them there. Nothing is added to a
    /// request that carried them already.
    pub(crate) fn mark(&self, extensions: &mut Extensions) {
        if self.in_extensions {
            return;
        }
        if let Some(peer) = self.peer
            && extensions.get::<ConnectInfo<SocketAddr>>().is_none()
        {
            extensions.insert(ConnectInfo(peer));
        }
        if self.scheme == ClientScheme::Https {
            extensions.insert(self.scheme);
        }
        if let Some(settled) = &self.settled {
            settled.mark(extensions);
        }
    }
}
