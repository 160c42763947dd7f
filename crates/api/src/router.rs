//! The public routes: which handler answers which path of the reserved `/_anteroom/` prefix,
//! the JWKS and the OpenID Connect discovery, behind the body limit and the rate limiter.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::ratelimit::RateLimiter;
use crate::state::AppState;
use crate::{api, challenge, oidc, page, readiness, sse};

/// The largest request body the public API reads.
pub(crate) const MAX_BODY_BYTES: usize = 16 * 1024;

/// The public listener's routes: the reserved `/_anteroom/` prefix, the JWKS and the OpenID
/// Connect discovery document. Anything else answers 404 problem+json.
pub fn public_router(state: AppState) -> Router {
    let limiter = state.rate_limiter().cloned();
    with_rate_limits(reserved_routes(state).fallback(api::not_found), limiter)
}

/// The public routes in front of a site: `/_anteroom/*`, the JWKS and the OIDC discovery
/// are anteroom's, every other path goes to `site`.
pub fn public_router_with_site(state: AppState, site: Router) -> Router {
    let limiter = state.rate_limiter().cloned();
    let router = reserved_prefix(state).fallback_service(site);
    with_rate_limits(router, limiter)
}

/// The reserved routes, and 404 problem+json for any other path under `/_anteroom`.
fn reserved_prefix(state: AppState) -> Router {
    reserved_routes(state)
        .route("/_anteroom", axum::routing::any(api::not_found))
        .route("/_anteroom/{*rest}", axum::routing::any(api::not_found))
}

/// The routes `WaitingRoom::router` (anteroom-edge) gives a service: the reserved `/_anteroom/`
/// prefix (any path under it not served answers 404 problem+json) and the JWKS, with no
/// fallback, so the service's router keeps its own.
pub fn waiting_room_routes(state: AppState) -> Router {
    let limiter = state.rate_limiter().cloned();
    with_rate_limits(reserved_prefix(state), limiter)
}

/// Puts the rate limiter in front of every route and the fallback. It is the outermost layer:
/// a refused request costs no routing, no body and no store work.
fn with_rate_limits(router: Router, limiter: Option<RateLimiter>) -> Router {
    match limiter {
        Some(limiter) => router.layer(limiter.layer()),
        None => router,
    }
}

fn reserved_routes(state: AppState) -> Router {
    Router::new()
        .route("/_anteroom/v1/rooms/{room}/join", post(api::join))
        .route(
            "/_anteroom/v1/rooms/{room}/challenge",
            post(challenge::issue),
        )
        .route("/_anteroom/v1/rooms/{room}/status", get(api::status))
        .route(
            "/_anteroom/v1/rooms/{room}/ticket",
            axum::routing::delete(api::leave),
        )
        // `navigator.sendBeacon` can only POST: the page's leave beacon uses this alias.
        .route("/_anteroom/v1/rooms/{room}/leave", post(api::leave_beacon))
        .route("/_anteroom/v1/rooms/{room}/events", get(sse::events))
        .route("/_anteroom/v1/rooms/{room}", get(api::summary))
        .route(
            "/_anteroom/v1/rooms/{room}/sessions/{session}/complete",
            post(api::complete_session),
        )
        .route(
            "/_anteroom/v1/rooms/{room}/sessions/{session}/abandon",
            post(api::abandon_session),
        )
        .route("/_anteroom/wait/{room}", get(page::waiting_page))
        .route("/_anteroom/wait/{room}/preview", get(page::preview))
        .route("/_anteroom/healthz", get(api::health))
        .route("/_anteroom/readyz", get(readiness::ready))
        .route("/.well-known/jwks.json", get(api::jwks))
        .route("/.well-known/openid-configuration", get(oidc::discovery))
        .route(oidc::AUTHORIZE_PATH, get(oidc::authorize))
        .route(oidc::CONTINUE_PATH, get(oidc::resume))
        .route(oidc::TOKEN_PATH, post(oidc::token))
        .route(
            oidc::USERINFO_PATH,
            get(oidc::userinfo).post(oidc::userinfo),
        )
        .method_not_allowed_fallback(api::method_not_allowed)
        // Bodies are tiny JSON documents; anything larger is refused before it is buffered.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}
