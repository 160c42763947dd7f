//! What the public listener serves ([`PublicApp`]): the gateway's router, and the direct lane
//! to the site that the own HTTP/1 engine takes; assembled here from a [`Gateway`] and the
//! API's public routes.

use axum::Router;

use anteroom_api::{AppState, public_router, public_router_with_site};
use anteroom_core::config::{ConnectionLimits, HttpEngine};

use crate::gateway::{self, Gateway};
use crate::request_metrics::Listener;
use crate::server_limits::ServerLimits;
use crate::tls::TlsServer;

/// The public routes of a gateway: `/_anteroom/*` (with the verify endpoint) and the JWKS are
/// anteroom's; every other path goes through the gateway to the upstream, or answers 404 when
/// no upstream is configured (anteroom beside an existing proxy).
pub fn gateway_router(state: AppState, gateway: &Gateway) -> Router {
    gateway_router_through(state, gateway, gateway.upstream_client())
}

/// [`gateway_router`] with the site's upstream pools `client`.
fn gateway_router_through(
    state: AppState,
    gateway: &Gateway,
    client: Option<gateway::UpstreamPools>,
) -> Router {
    if client.is_some() {
        public_router_with_site(state, gateway.site_through(client)).merge(gateway.verify_router())
    } else {
        public_router(state).merge(gateway.verify_router())
    }
}

/// The public routes of a gateway as the listener serves them: [`gateway_router`], and for a
/// gateway with an upstream a direct lane to the site that HTTP/1 connections take for every
/// path outside `/_anteroom` (the same rate limits and gateway steps without the router's
/// dispatch).
pub fn gateway_app(state: AppState, gateway: &Gateway) -> PublicApp {
    // One set of upstream pools per serving thread, shared by the router and the lane.
    let client = gateway.upstream_client();
    let engine = gateway.http_engine();
    let site = client
        .clone()
        .filter(|_| engine == HttpEngine::Own)
        .map(|client| gateway.site_lane(client));
    PublicApp {
        router: gateway_router_through(state, gateway, client),
        site,
        engine,
        limits: ServerLimits::uncapped(ConnectionLimits::default()),
        listener: Listener::Public,
        tls: None,
    }
}

/// What the public listener serves: a router, and optionally the gateway's direct lane to
/// the site (see [`gateway_app`]). A plain [`Router`] converts into one.
#[derive(Clone)]
pub struct PublicApp {
    pub(crate) router: Router,
    pub(crate) site: Option<gateway::SiteLane>,
    pub(crate) engine: HttpEngine,
    pub(crate) limits: ServerLimits,
    /// Which listener's request series count its answers.
    pub(crate) listener: Listener,
    /// TLS on the listener (`[server.tls]`); `None`: plain HTTP.
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
}

impl PublicApp {
    /// The same app served over TLS with `tls`'s certificates (reloaded in place: the one
    /// acceptor stays valid), ALPN choosing HTTP/2 or HTTP/1.1.
    pub fn with_tls(mut self, tls: Option<&TlsServer>) -> PublicApp {
        self.tls = tls.map(TlsServer::acceptor);
        self
    }

    /// The same app served by `engine` (a plain router is served by the own engine unless
    /// told otherwise).
    pub fn with_engine(mut self, engine: HttpEngine) -> PublicApp {
        self.engine = engine;
        if engine == HttpEngine::Hyper {
            self.site = None;
        }
        self
    }

    /// The same app served with `limits`' timeouts and caps (a plain router, and an app until
    /// told otherwise, has the default timeouts and no caps). Give every worker a clone of
    /// one [`ServerLimits`] so the caps count the node's connections.
    pub fn with_limits(mut self, limits: ServerLimits) -> PublicApp {
        self.limits = limits;
        self
    }

    /// The same app counted as `listener`'s requests (`anteroom_http_requests_total`); an
    /// app counts as the public listener's until told otherwise.
    pub fn counted_as(mut self, listener: Listener) -> PublicApp {
        self.listener = listener;
        self
    }
}

impl From<Router> for PublicApp {
    fn from(router: Router) -> PublicApp {
        PublicApp {
            router,
            site: None,
            engine: HttpEngine::Own,
            limits: ServerLimits::uncapped(ConnectionLimits::default()),
            listener: Listener::Public,
            tls: None,
        }
    }
}
