//! The gateway (SPEC §7): route matching, the routes' rate limits, rooms and passes, and the
//! reverse proxy to the protected site, with WebSocket message limits (§10.4) and upstream
//! measurements (§5.4); and the verify endpoint for proxies that keep proxying themselves
//! (nginx `auth_request`, Envoy `ext_authz`, Traefik `forwardAuth`, Caddy `forward_auth`).
//!
//! [`Gateway::site`] serves every request through `Gateway::handle`, the request's steps in
//! order in one place (plain functions awaited in one future, no boxed middleware; the matched
//! route and the passes go from step to step as arguments, not request extensions). It takes
//! the correlation ids first (`correlation.rs`: `X-Request-Id`, `traceparent`, both sent
//! upstream), and with an access log writes the line (`access.rs`) from the decision and
//! upstream timing the steps left in the response's extensions. Each step is in its own file:
//! - `canonical.rs`: the path in one spelling, or 400 `ambiguous_path` (SPEC §14.3);
//! - `routes.rs`: the first `[[route]]` matching host, path glob and method (precompiled),
//!   then the rooms' `routes` shorthands; the table, the upstream and the `[websocket]`
//!   limits change while the gateway serves (`live.rs`, changed by `reload.rs`: reloads and
//!   rooms changed anywhere);
//! - `limits.rs`: the route's route-only rate limits, through the rate-limit engine;
//! - `protect.rs`: the rooms the route needs, in order: a valid pass goes through (renewed
//!   when half its `session_ttl` has passed), otherwise immediate admission when the room has
//!   room, else the waiting page (navigations) or 429 `waiting_room` (everything else);
//! - `upstream_stats.rs`: latency, 5xx and in-flight per route;
//! - `proxy.rs`: the reverse proxy: the engine's own upstream client (`upstream_client.rs`,
//!   over `upstream_stream.rs`) for bodies in memory, hyper's for streamed bodies and h2c;
//!   WebSocket upgrades go to `websocket.rs` instead; `connection_cap.rs` holds both clients
//!   to `[upstream] max_connections`.
//!
//! The steps depend one way: this file orders them and no step names it (`layer.rs`, built on
//! the same steps, does). What they read is [`Gateway`] (`state.rs`: the node's state, the
//! settings in force, the caches), below every step but the proxy: `proxy.rs` takes the node's
//! `AppState` and the trusted proxies instead, so the settings in force (`live.rs`) can hold
//! its `Upstream`.
//!
//! The same steps, with an inner service where the proxy would be, make `WaitingRoomLayer`
//! (`layer.rs`), through [`Gateway::route_of`] and [`Gateway::check`].
//!
//! Verified passes are cached per node (`passes.rs`): a signature check costs more than
//! proxying a small request. Revocation still holds within a second: a cached pass's session is
//! looked up in the store at most once a second. Room configurations and figures are cached
//! the same way (`rooms.rs`).

mod access;
mod canonical;
mod connection_cap;
mod forwarding;
mod layer;
mod limits;
mod live;
mod passes;
mod protect;
mod proxy;
mod reload;
mod rooms;
mod routes;
mod state;
mod upstream_client;
mod upstream_stats;
mod upstream_stream;
mod verify;
mod websocket;
mod websocket_stats;

use std::sync::Arc;

use arc_swap::ArcSwap;

use std::convert::Infallible;

use axum::Router;
use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse as _, Response};
use axum::routing::any;
use tower::service_fn;

use anteroom_core::RoomId;
use anteroom_core::config::{
    HttpEngine, RouteConfig, UpstreamConfig, VerifyConfig, WebSocketConfig,
};
use anteroom_core::room::RoomConfig;

use anteroom_api::AppState;
use anteroom_api::error::ApiError;
use anteroom_api::ratelimit::{self, ClientIp, RateLimitLayer, RateLimiter};

use anteroom_h1::PassedFields;

use crate::access_log::{AccessLog, Decided, Decision, UpstreamPart};
use crate::correlation;
use crate::span_export::SpanExport;
use crate::visitor::Visitor;

pub use layer::{WaitingRoomLayer, WaitingRoomService};
pub(crate) use proxy::UpstreamPools;
pub use reload::{GatewayReload, GatewayReloadError, GatewayReloaded};
pub use state::Gateway;
pub(crate) use upstream_stats::fine_bound_ms;
pub use upstream_stats::{LATENCY_BUCKETS_MS, UpstreamStats, UpstreamStatsSnapshot};
pub use websocket_stats::{WebSocketStats, WebSocketStatsSnapshot};

/// What the gateway is built from (the `[upstream]`, `[[route]]` and `[websocket]` sections).
#[derive(Debug, Clone, Default)]
pub struct GatewayOptions {
    /// The protected site; `None` beside an existing proxy (only the verify endpoint works).
    pub upstream: Option<UpstreamConfig>,
    /// The `[[route]]` entries, the first match wins, then the configured rooms' `routes`
    /// shorthands; requests no route matches go through unprotected.
    pub routes: Vec<RouteConfig>,
    /// Per-connection WebSocket limits; `None`: no message limit.
    pub websocket: Option<WebSocketConfig>,
    /// The configured rooms: their `routes` shorthands until the store's rooms are listed
    /// ([`Gateway::follow_rooms`]), and what `on_store_error` says when the store cannot be
    /// read.
    pub rooms: Vec<RoomConfig>,
    /// `[verify]`: the headers the verify endpoint reads the visitor's request from.
    pub verify: VerifyConfig,
    /// `[server] http_engine`: whether the engine's own upstream client and direct lane serve
    /// what they can, or hyper everything.
    pub http_engine: HttpEngine,
    /// `[log] access`: where the site's requests are logged; `None`: not logged.
    pub access_log: Option<AccessLog>,
    /// `[tracing] otlp_endpoint`: where the site's requests' spans go; `None`: no spans.
    pub spans: Option<SpanExport>,
}

impl Gateway {
    /// The gateway of `app`'s rooms with these routes and upstream.
    pub fn new(app: AppState, options: GatewayOptions) -> Gateway {
        let sources = live::RouteSources::new(options.routes, &options.rooms);
        let upstream = options.upstream.and_then(|config| {
            let url = config.url.clone();
            let upstream = proxy::Upstream::new(config);
            if upstream.is_none() {
                tracing::error!(%url, "the upstream URL cannot be used; nothing is proxied");
            }
            upstream.map(Arc::new)
        });
        let live = live::LiveSettings {
            routes: sources.table(None),
            upstream,
            websocket: options.websocket.unwrap_or_default(),
        };
        Gateway {
            inner: Arc::new(state::Shared {
                live: ArcSwap::from_pointee(live),
                route_sources: parking_lot::Mutex::new(sources),
                verify: options.verify,
                http_engine: options.http_engine,
                access_log: options.access_log,
                spans: options.spans,
                rooms: rooms::RoomsReadEverySecond::new(options.rooms),
                passes: passes::PassesVerifiedUntilExpiry::default(),
                websocket_stats: WebSocketStats::default(),
                app,
            }),
        }
    }

    /// The proxied WebSocket connections and their messages.
    pub fn websocket_stats(&self) -> &WebSocketStats {
        &self.inner.websocket_stats
    }

    /// Each route's upstream measurements, in route order, then the requests no route matched
    /// (named `default`).
    pub fn route_stats(&self) -> Vec<Arc<UpstreamStats>> {
        self.live().routes.stats()
    }

    /// The upstream measurements of the routes that name `room` (adaptive admission, §5.4).
    pub fn room_upstreams(&self, room: &RoomId) -> Vec<Arc<UpstreamStats>> {
        self.live().routes.stats_naming(room)
    }

    /// The names of the `[[route]]` entries in force that need `room` (a room's own
    /// `routes` shorthand goes with the room, so it is not one of them).
    pub fn routes_needing(&self, room: &RoomId) -> Vec<String> {
        self.inner.route_sources.lock().configured_naming(room)
    }

    /// Whether an upstream is configured (otherwise only the verify endpoint is useful).
    pub fn has_upstream(&self) -> bool {
        self.live().upstream.is_some()
    }

    /// `/_anteroom/verify` (SPEC §7.3), to merge into the public router: any method (Envoy
    /// sends the visitor's), and with the visitor's path appended (Envoy's `path_prefix`).
    pub fn verify_router(&self) -> Router {
        Router::new()
            .route(verify::VERIFY_PATH, any(verify::verify))
            .route(
                &format!("{}/{{*path}}", verify::VERIFY_PATH),
                any(verify::verify),
            )
            .with_state(self.clone())
    }

    /// The protected site: every request the reserved routes do not take, through
    /// `Gateway::handle`, with a pool of upstream connections of its own.
    pub fn site(&self) -> Router {
        self.site_through(self.upstream_client())
    }

    /// New, empty upstream connection pools for one serving thread (see
    /// `start_workers`); `None` without an upstream.
    pub(crate) fn upstream_client(&self) -> Option<UpstreamPools> {
        let live = self.live();
        let upstream = live.upstream.as_ref()?;
        Some(UpstreamPools::new(upstream, self.inner.http_engine))
    }

    /// Which HTTP engine serves this gateway's listener.
    pub(crate) fn http_engine(&self) -> HttpEngine {
        self.inner.http_engine
    }

    /// [`site`](Self::site) through the pools `client` holds.
    pub(crate) fn site_through(&self, client: Option<UpstreamPools>) -> Router {
        let gateway = self.clone();
        let service = service_fn(move |request: Request<Body>| {
            let gateway = gateway.clone();
            let client = client.clone();
            async move {
                // hyper writes what the router answers: every field in the map.
                let visitor = Visitor::of(request.extensions());
                let handled = gateway.handle(client.as_ref(), request, &visitor, false);
                let (response, _) = handled.await;
                Ok::<_, Infallible>(response)
            }
        });
        Router::new().fallback_service(service)
    }

    /// The direct lane to the site for the engine's own connection loop (`h1/server.rs`),
    /// through the pools `client` holds (the same as the site's router).
    pub(crate) fn site_lane(&self, client: UpstreamPools) -> SiteLane {
        SiteLane {
            gateway: self.clone(),
            client,
            limits: self.app().rate_limiter().map(RateLimiter::layer),
        }
    }

    /// The request's way through the gateway from `visitor`: its correlation ids first (sent
    /// upstream and returned to the visitor), then [`steps`](Self::steps). With `as_read`, the origin's
    /// answer fields the gateway does not read may come back passed as read, beside the
    /// response, for a writer that writes them (`h1/server.rs`), and the request id goes
    /// with them rather than into the response's map.
    async fn handle(
        &self,
        client: Option<&UpstreamPools>,
        request: Request<Body>,
        visitor: &Visitor,
        as_read: bool,
    ) -> (Response, PassedFields) {
        let (mut parts, body) = request.into_parts();
        let trusted = self.app().is_trusted_address(visitor.peer_ip());
        let mut correlation = correlation::Correlation::take(&mut parts.headers, trusted);
        let span = self.inner.spans.as_ref().map(|spans| {
            let span = spans.request_span(
                correlation.received.as_ref(),
                parts.method.as_str(),
                parts.uri.path(),
            );
            correlation.trace = span.trace_parent();
            span
        });
        // Only with an access log is anything about the request kept for after it.
        let asked = self.inner.access_log.as_ref().map(|log| {
            let client = self.client_ip(&parts, visitor);
            (log, access::Asked::of(&parts, client, self.app().now()))
        });
        let request = Request::from_parts(parts, body);
        let steps = self.steps(client, request, visitor, &correlation, as_read);
        let (mut response, mut passed) = steps.await;
        if let Some((log, asked)) = asked {
            asked.log(log, &correlation, &response);
        }
        if let Some(span) = span {
            let request_id = correlation.request_id.to_str().unwrap_or("-");
            let decided = response.extensions().get::<Decided>();
            span.finish(request_id, response.status().as_u16(), decided);
        }
        // The origin's own `X-Request-Id` is in the map whichever way its fields came
        // (`proxy::READ_FROM_ANSWERS`): replaced here, never written beside ours.
        if as_read {
            // The own loop writes ours after the passed fields: an answer whose fields are
            // all passed (and with no cookie) needs no header map of its own.
            response.headers_mut().remove(&correlation::X_REQUEST_ID);
            passed.add_field(correlation::X_REQUEST_ID.clone(), correlation.request_id);
        } else {
            response
                .headers_mut()
                .insert(correlation::X_REQUEST_ID.clone(), correlation.request_id);
        }
        (response, passed)
    }

    /// The visitor's address as the rate limiter settled on it in front of the gateway
    /// (carried by `visitor`, or [`ClientIp`] in the extensions: set by the server, never
    /// read from the request), else resolved from the peer and the forwarding headers a
    /// trusted proxy sent.
    fn client_ip(&self, parts: &Parts, visitor: &Visitor) -> std::net::IpAddr {
        if let Some(client) = visitor.settled_client_ip() {
            return client;
        }
        if let Some(ClientIp(client)) = parts.extensions.get::<ClientIp>() {
            return *client;
        }
        visitor.peer_ip().map_or(ratelimit::UNKNOWN_PEER, |peer| {
            ratelimit::resolve_client_ip(
                &parts.headers,
                peer,
                &self.app().settings().trusted_proxies,
            )
        })
    }

    /// The request's steps, outermost first: one future, no boxed middleware per step. The
    /// `correlation` ids go to the upstream with the request; `visitor` and `as_read` as in
    /// [`handle`](Self::handle).
    async fn steps(
        &self,
        client: Option<&UpstreamPools>,
        request: Request<Body>,
        visitor: &Visitor,
        correlation: &correlation::Correlation,
        as_read: bool,
    ) -> (Response, PassedFields) {
        // The routes, upstream and limits in force when the request started, to its end.
        let live = self.live();
        let (mut parts, body) = request.into_parts();
        // The checks every protected request passes, shared with `WaitingRoomLayer`.
        let route = match self.route_of(&live, &mut parts) {
            Ok(route) => route,
            Err(refused) => return (refused.into_response(), PassedFields::default()),
        };
        let let_through = match self.check(route, &mut parts, visitor).await {
            Ok(let_through) => let_through,
            Err(held_back) => return (held_back, PassedFields::default()),
        };
        // Measure only what reaches the upstream, per route.
        let measuring = upstream_stats::Measuring::start(&route.stats);
        // The reverse proxy (and WebSocket upgrades) at the bottom.
        let request = Request::from_parts(parts, body);
        let LetThrough {
            limit_headers,
            cookies,
            passes,
            decision,
        } = let_through;
        // Rate-limit fields are added only where the origin sent none: an answer that may
        // get them keeps all its fields in the map, where that is looked up.
        let fields = proxy::answer_fields(as_read && limit_headers.is_empty());
        let (mut response, passed) = proxy_or_upgrade(
            self,
            &live,
            client,
            (request, &route.rooms),
            visitor,
            (passes, correlation),
            fields,
        )
        .await;
        let took = measuring.finish(&response);
        if self.inner.access_log.is_some() || self.inner.spans.is_some() {
            let upstream = UpstreamPart {
                status: response.status().as_u16(),
                took,
            };
            response.extensions_mut().insert(upstream);
            response
                .extensions_mut()
                .insert(let_through_decided(decision, route));
        }
        protect::add_cookies(&mut response, cookies);
        ratelimit::add_headers(&mut response, &limit_headers);
        (response, passed)
    }

    /// The first steps, before anything waits: the request's path in its one spelling, then
    /// its route in `live` (the settings the request keeps to its end), which every later
    /// step acts on.
    pub(crate) fn route_of<'l>(
        &self,
        live: &'l live::LiveSettings,
        parts: &mut Parts,
    ) -> Result<&'l Arc<routes::Route>, ApiError> {
        // The path every step below matches is the one the upstream (or the layer's inner
        // service) receives; spellings that servers read differently never get further.
        canonical::canonicalize(&mut parts.uri)?;
        Ok(routes::match_route(&live.routes, parts))
    }

    /// The checks of a request on `route` from `visitor`: what goes with its answer when it
    /// may go on, or the answer that holds it back.
    pub(crate) async fn check(
        &self,
        route: &routes::Route,
        parts: &mut Parts,
        visitor: &Visitor,
    ) -> Result<LetThrough, Response> {
        // The route's own rate limits before anything costs store work or the upstream's
        // time; rules with a `match` already ran in the public router's outer layer.
        let limit_headers = limits::route_rate_limits(self, route, parts, visitor)
            .await
            .map_err(|(decision, mut refused)| {
                let room = route.rooms.first().cloned();
                refused.extensions_mut().insert(Decided { decision, room });
                refused
            })?;
        // Rooms and passes: a request held back never reaches the upstream.
        let asked = protect::Asked {
            method: &parts.method,
            headers: &parts.headers,
            extensions: &parts.extensions,
            visitor,
            uri: &parts.uri,
        };
        let (cookies, passes, decision) = protect::protect(self, route, &asked).await?;
        Ok(LetThrough {
            limit_headers,
            cookies,
            passes,
            decision,
        })
    }
}

/// The last step: proxies `request` from `visitor` (or its WebSocket upgrade), with the
/// `correlation` ids, to the upstream through `pools`, the answer's fields as `fields` says.
/// `passes` are those the request holds (an `Anteroom-Release` answer ends one), `rooms` its
/// route's (an upgrade's socket is watched for them). Here rather
/// than in `proxy.rs`, so that `websocket.rs`, which builds on the proxy's `Upstream`, is
/// not named by it in turn.
async fn proxy_or_upgrade(
    gateway: &Gateway,
    live: &live::LiveSettings,
    pools: Option<&UpstreamPools>,
    (mut request, rooms): (Request<Body>, &[RoomId]),
    visitor: &Visitor,
    (passes, correlation): (passes::HeldPasses, &correlation::Correlation),
    fields: anteroom_h1::AnswerFields<'static>,
) -> (Response, PassedFields) {
    let (Some(upstream), Some(pools)) = (&live.upstream, pools) else {
        let missing = ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such page");
        return (missing.into_response(), PassedFields::default());
    };
    if websocket::is_upgrade(&request) {
        correlation.insert_into(request.headers_mut());
        // The upgrade's steps read the connection from the extensions.
        visitor.mark(request.extensions_mut());
        let upgraded =
            websocket::proxy(gateway, upstream, &live.websocket, (request, rooms), passes).await;
        return (upgraded, PassedFields::default());
    }
    let pools = pools.for_upstream(upstream);
    proxy::forward(
        gateway.app(),
        upstream,
        &pools.client,
        (request, visitor),
        passes,
        correlation,
        fields,
    )
    .await
}

/// What the access log says of a request [`Gateway::check`] let through on `route` with
/// `decision`: the room named is the route's first (none for a bypass), its id copied only
/// when a log line or span is written.
fn let_through_decided(decision: Decision, route: &routes::Route) -> Decided {
    let room = match decision {
        Decision::Bypass => None,
        _ => route.rooms.first().cloned(),
    };
    Decided { decision, room }
}

/// What goes with the answer to a request [`Gateway::check`] let through.
pub(crate) struct LetThrough {
    /// The route's rate-limit headers.
    pub(crate) limit_headers: HeaderMap,
    /// Passes issued or renewed (and tickets), as `Set-Cookie` values.
    pub(crate) cookies: Vec<HeaderValue>,
    /// The passes the request holds, room by room (for `Anteroom-Release`).
    pub(crate) passes: passes::HeldPasses,
    /// What the rooms decided, for the access log (which names the route's first room with
    /// it: [`Decided::let_through`]).
    pub(crate) decision: Decision,
}

/// The site as the connection loop serves it without the public router: the public router's
/// rate limits, then [`Gateway::handle`], for paths the router would send to the site.
#[derive(Clone)]
pub(crate) struct SiteLane {
    gateway: Gateway,
    client: UpstreamPools,
    limits: Option<RateLimitLayer>,
}

impl SiteLane {
    /// Whether the public router would send a request for `path` to the site: anything
    /// outside `/_anteroom` and `/.well-known/` (the lane leaves the site's own
    /// `/.well-known/` paths to the router, which sends them on too).
    pub(crate) fn takes(path: &str) -> bool {
        !(path.starts_with("/.well-known/")
            || path
                .strip_prefix("/_anteroom")
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')))
    }

    /// Answers `request` from `visitor` (its connection carried beside it, not in its
    /// extensions) as the public router's rate-limit layer and site fallback would, for the
    /// connection loop's writer: the origin's fields the gateway does not read come back
    /// passed as read (written after the status line, before the response's own).
    pub(crate) async fn handle(
        &self,
        request: Request<Body>,
        visitor: &mut Visitor,
    ) -> (Response, PassedFields) {
        let Some(limits) = &self.limits else {
            let handled = self
                .gateway
                .handle(Some(&self.client), request, visitor, true);
            return handled.await;
        };
        let (mut parts, body) = request.into_parts();
        let headers = match limits.decide_from(&mut parts, visitor.peer_ip()).await {
            Ok((headers, settled)) => {
                visitor.settle(settled);
                headers
            }
            Err(refused) => return (refused, PassedFields::default()),
        };
        // The public limits' fields go in only where the origin sent none: then the origin's
        // fields stay in the map, where that is looked up.
        let request = Request::from_parts(parts, body);
        let as_read = headers.is_empty();
        let (mut response, passed) = self
            .gateway
            .handle(Some(&self.client), request, visitor, as_read)
            .await;
        ratelimit::add_headers(&mut response, &headers);
        (response, passed)
    }
}
