//! The edge of a node: the gateway (SPEC §7) in front of the protected site (route matching,
//! the routes' rate limits, rooms and passes, the reverse proxy, WebSocket limits, the verify
//! endpoint and `WaitingRoomLayer` for an embedding app), the node's own HTTP/1 engine and its
//! upstream client, TLS on the listener, the per-thread workers, the access log, trace
//! correlation and span export, and the adaptive admission loop that reads the gateway's
//! measurements.
//!
//! It builds on `anteroom-api` (the public API and the node's shared state): the gateway's
//! waiting page, join gate and passes are the API's. `anteroom-admin` and the binary build on
//! this crate.

mod access_log;
pub mod adaptive;
mod deadline;
mod gateway;
mod h1;
mod request_metrics;
mod span_export;
mod tls;
mod waiting_room;
mod workers;

use axum::Router;

use anteroom_core::config::{ConnectionLimits, HttpEngine};

// What this crate builds on from `anteroom-api`, named at the root so the modules here reach
// it as `crate::page`, `crate::AppState`, like their own.
use anteroom_api::error::ApiError;
use anteroom_api::key_reload::follow_key_dir;
use anteroom_api::ratelimit::{RateLimitLayer, RateLimitVerdict, RateLimiter, RouteRateLimits};
use anteroom_api::{
    AppState, KeySource, NodeOptions, PublicSettings, follow_notices, public_router,
    public_router_with_site, run_ticker, waiting_room_routes,
};
use anteroom_api::{api, cookies, error, join_gate, key_reload, page, ratelimit, site_identity};

pub use access_log::AccessLog;
pub use adaptive::run_adaptive;
pub use gateway::{
    Gateway, GatewayOptions, GatewayReload, GatewayReloadError, GatewayReloaded,
    LATENCY_BUCKETS_MS, UpstreamStats, UpstreamStatsSnapshot, WaitingRoomLayer, WaitingRoomService,
    WebSocketStats, WebSocketStatsSnapshot,
};
pub use h1::limits::ServerLimits;
pub use h1::serve;
pub use request_metrics::Listener;
pub use span_export::{SpanExport, SpanExportError};
pub use tls::{
    CERTIFICATE_CHECK_INTERVAL, TlsServer, TlsSetupError, UpstreamTls, follow_certificate_files,
    upstream_tls,
};
pub use waiting_room::{WaitingRoom, WaitingRoomBuilder, WaitingRoomSetupError};
pub use workers::{PublicListeners, Workers, start_workers};

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
    router: Router,
    site: Option<gateway::SiteLane>,
    engine: HttpEngine,
    limits: ServerLimits,
    /// Which listener's request series count its answers.
    listener: Listener,
    /// TLS on the listener (`[server.tls]`); `None`: plain HTTP.
    tls: Option<tokio_rustls::TlsAcceptor>,
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
