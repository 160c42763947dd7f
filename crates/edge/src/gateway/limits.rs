//! The route's rate limits: the route-only rules (rules without `match`) its `rate_limits`
//! names, decided by the rate-limit engine. Rules with a `match` are not decided here: the
//! public router's outer layer already did, and the engine applies a rule at most once per
//! request anyway.

use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::response::Response;

use anteroom_api::ratelimit::{RateLimitVerdict, RouteRateLimits};

use crate::access_log::Decision;

use crate::visitor::Visitor;

use super::Gateway;
use super::routes::Route;

/// The step before the rooms: refuses (or holds) the request by its route's rules (the
/// refusal is the answer, with what the access log calls it); otherwise the rate-limit
/// headers for the response it lets through.
pub(crate) async fn route_rate_limits(
    gateway: &Gateway,
    route: &Route,
    parts: &mut Parts,
    visitor: &Visitor,
) -> Result<HeaderMap, (Decision, Response)> {
    let Some(limiter) = gateway.app().rate_limiter() else {
        return Ok(HeaderMap::new());
    };
    if route.rate_limits.is_empty() {
        return Ok(HeaderMap::new());
    }
    let names = route.rate_limits.clone();
    // The engine reads the peer, the client address and what it applied before from the
    // extensions.
    visitor.mark(&mut parts.extensions);
    parts.extensions.insert(RouteRateLimits(names));
    match limiter.check(parts).await {
        RateLimitVerdict::Refused(response) => Err((Decision::Limited, response)),
        RateLimitVerdict::Unavailable(response) => Err((Decision::Refused, response)),
        RateLimitVerdict::Allowed { headers } => Ok(headers),
    }
}
