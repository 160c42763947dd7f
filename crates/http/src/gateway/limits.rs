//! The route's rate limits: the route-only rules (rules without `match`) its `rate_limits`
//! names, decided by the rate-limit engine. Rules with a `match` are not decided here: the
//! public router's outer layer already did, and the engine applies a rule at most once per
//! request anyway.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::{RateLimitVerdict, RouteRateLimits};

use super::Gateway;
use super::routes::MatchedRoute;

/// The middleware: refuses (or holds) the request by the route's rules; adds the rate-limit
/// headers to the response it lets through.
pub(crate) async fn route_rate_limits(
    State(gateway): State<Gateway>,
    request: Request,
    next: Next,
) -> Response {
    let Some(limiter) = gateway.app().rate_limiter() else {
        return next.run(request).await;
    };
    let names = match request.extensions().get::<MatchedRoute>() {
        Some(MatchedRoute(route)) if !route.rate_limits.is_empty() => route.rate_limits.clone(),
        _ => return next.run(request).await,
    };
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(RouteRateLimits(names));
    let headers = match limiter.check(&mut parts).await {
        RateLimitVerdict::Refused(response) => return response,
        RateLimitVerdict::Allowed { headers } => headers,
    };
    let mut response = next.run(Request::from_parts(parts, body)).await;
    let response_headers = response.headers_mut();
    for (name, value) in &headers {
        if !response_headers.contains_key(name) {
            response_headers.insert(name.clone(), value.clone());
        }
    }
    response
}
